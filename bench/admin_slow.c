/* ticketing-admin-slow: how long a node's admin port takes to answer
 * /healthz and /readyz, alone and while slow clients hold the port
 * (docs/benchmarks.md, "The admin port behind slow readers").
 *
 * Method: first --tries probes with nothing else connected ("alone"):
 * every --interval-ms, GET /healthz and then GET /readyz, each over a
 * fresh connection, timed from before the connect to the end of the
 * answer (the server closes it). Then it opens --slow connections that ask
 * for /metrics and never read (their receive buffer is set to --rcvbuf
 * bytes and their segment size to --mss bytes before the connect, as a
 * reader on a slow link: on loopback the kernel otherwise sizes the send
 * buffer from the 64 KiB segments and takes a whole answer at once, so
 * only a small segment makes the server's writes stall) and --half
 * connections that send half a request and stop, and runs the same probes
 * again ("behind"), the slow connections still open. Each phase reports
 * the median and the maximum of each path, and a probe that gets no answer
 * within --timeout-ms counts as that long. At the end it counts the slow
 * connections the server has reset or closed. One JSON object (one line)
 * on stdout, a summary on stderr.
 *
 * Exit status: 0, 1 on a setup failure (bad flags, connect failed).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/addr.h"

#define TRIES_MAX 10000
#define SLOW_MAX 60000

struct opts {
    struct sockaddr_in addr;
    uint32_t slow, half, tries, interval_ms, rcvbuf, mss, timeout_ms;
};

/* Samples of one path in one phase, in milliseconds. */
struct series {
    double ms[TRIES_MAX];
    uint32_t n, timeouts, errors;
};

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: ticketing-admin-slow --addr 127.0.0.1:ADMIN_PORT [options]\n"
            "  --slow N         connections that ask for /metrics and never read (1000)\n"
            "  --half N         connections that send half a request and stop (50)\n"
            "  --tries N        probes of /healthz and of /readyz per phase (50)\n"
            "  --interval-ms N  between two probes (100)\n"
            "  --rcvbuf N       SO_RCVBUF of the slow connections, bytes (1024)\n"
            "  --mss N          TCP_MAXSEG of the slow connections, bytes; 0 = the kernel's (88)\n"
            "  --timeout-ms N   a probe without an answer by then counts as N (30000)\n");
}

static bool parse_u32(const char *s, uint32_t lo, uint32_t hi, uint32_t *out)
{
    char *end = NULL;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return false;
    *out = (uint32_t)v;
    return true;
}

/* A flood tool: loopback only, as ticketing-bench; the forms of core/addr.h. */
static bool parse_addr(const char *s, struct sockaddr_in *a)
{
    struct tk_addr addr;
    const char *why;
    memset(a, 0, sizeof(*a));
    if (tk_addr_parse(s, strlen(s), &addr, &why) != TK_OK || addr.kind != TK_ADDR_IPV4 ||
        inet_pton(AF_INET, addr.host, &a->sin_addr) != 1)
        return false;
    a->sin_family = AF_INET;
    a->sin_port = htons(addr.port);
    return (ntohl(a->sin_addr.s_addr) >> 24) == 127;
}

static int parse_opts(int argc, char **argv, struct opts *o)
{
    static const struct option longs[] = {
        {"addr", required_argument, NULL, 'a'},
        {"slow", required_argument, NULL, 's'},
        {"half", required_argument, NULL, 'h'},
        {"tries", required_argument, NULL, 't'},
        {"interval-ms", required_argument, NULL, 'i'},
        {"rcvbuf", required_argument, NULL, 'r'},
        {"mss", required_argument, NULL, 'm'},
        {"timeout-ms", required_argument, NULL, 'o'},
        {"help", no_argument, NULL, 'H'},
        {NULL, 0, NULL, 0},
    };
    *o = (struct opts){.slow = 1000,
                       .half = 50,
                       .tries = 50,
                       .interval_ms = 100,
                       .rcvbuf = 1024,
                       .mss = 88,
                       .timeout_ms = 30000};
    bool have_addr = false, ok = true;
    int c;
    while (ok && (c = getopt_long(argc, argv, "", longs, NULL)) != -1) {
        switch (c) {
            case 'a':
                ok = have_addr = parse_addr(optarg, &o->addr);
                break;
            case 's':
                ok = parse_u32(optarg, 0, SLOW_MAX, &o->slow);
                break;
            case 'h':
                ok = parse_u32(optarg, 0, SLOW_MAX, &o->half);
                break;
            case 't':
                ok = parse_u32(optarg, 1, TRIES_MAX, &o->tries);
                break;
            case 'i':
                ok = parse_u32(optarg, 0, 60000, &o->interval_ms);
                break;
            case 'r':
                ok = parse_u32(optarg, 1, 1u << 24, &o->rcvbuf);
                break;
            case 'm':
                ok = parse_u32(optarg, 0, 65535, &o->mss) && (o->mss == 0 || o->mss >= 88);
                break;
            case 'o':
                ok = parse_u32(optarg, 1, 600000, &o->timeout_ms);
                break;
            case 'H':
                usage(stdout);
                return 1;
            default:
                ok = false;
        }
    }
    if (!ok || !have_addr || optind != argc) {
        usage(stderr);
        return -1;
    }
    return 0;
}

/* A blocking TCP connection to the admin port; rcvbuf and mss 0 leave
 * the kernel's. -1 on failure. */
static int dial(const struct opts *o, uint32_t rcvbuf, uint32_t mss)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    int v = (int)rcvbuf, m = (int)mss;
    if ((rcvbuf != 0 && setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v)) != 0) ||
        (mss != 0 && setsockopt(fd, IPPROTO_TCP, TCP_MAXSEG, &m, sizeof(m)) != 0)) {
        close(fd);
        return -1;
    }
    if (connect(fd, (const struct sockaddr *)&o->addr, sizeof(o->addr)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static bool send_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

/* One probe: GET path over a fresh connection, read to the server's
 * close. Adds the time taken to s (timeout_ms when it ran out). */
static void probe(const struct opts *o, const char *path, struct series *s)
{
    char req[128], buf[4096];
    int n = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", path);
    double t0 = now_ms(), end = t0 + o->timeout_ms;
    int fd = dial(o, 0, 0);
    bool ok = fd >= 0 && send_all(fd, req, (size_t)n), timed_out = false;
    size_t got = 0;
    char head[16] = "";
    while (ok) {
        double left = end - now_ms();
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (left <= 0 || poll(&pfd, 1, (int)left + 1) == 0) {
            timed_out = left <= 0;
            if (timed_out)
                break;
            continue;
        }
        ssize_t r = recv(fd, buf, sizeof(buf), 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        if (got < sizeof(head) - 1) {
            size_t take = (size_t)r < sizeof(head) - 1 - got ? (size_t)r : sizeof(head) - 1 - got;
            memcpy(head + got, buf, take);
            head[got + take] = 0;
        }
        got += (size_t)r;
    }
    double took = now_ms() - t0;
    if (fd >= 0)
        close(fd);
    if (timed_out) {
        s->timeouts++;
        took = o->timeout_ms;
    } else if (!ok ||
               (strncmp(head, "HTTP/1.1 200", 12) != 0 && strncmp(head, "HTTP/1.1 503", 12) != 0)) {
        s->errors++;
    }
    s->ms[s->n++] = took;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(struct series *s)
{
    qsort(s->ms, s->n, sizeof(s->ms[0]), cmp_double);
    if (s->n == 0)
        return 0;
    return s->n % 2 ? s->ms[s->n / 2] : (s->ms[s->n / 2 - 1] + s->ms[s->n / 2]) / 2;
}

static double maximum(const struct series *s)
{
    double m = 0;
    for (uint32_t i = 0; i < s->n; i++)
        m = s->ms[i] > m ? s->ms[i] : m;
    return m;
}

static void phase(const struct opts *o, struct series *healthz, struct series *readyz)
{
    for (uint32_t t = 0; t < o->tries; t++) {
        probe(o, "/healthz", healthz);
        probe(o, "/readyz", readyz);
        if (o->interval_ms != 0)
            usleep(o->interval_ms * 1000u);
    }
}

static void report(const char *phase_name, const char *path, struct series *s, bool last)
{
    double med = median(s), max = maximum(s);
    fprintf(stderr,
            "ticketing-admin-slow: %-6s %-8s median %8.1f ms  max %8.1f ms  (%u tries, %u timed "
            "out, %u failed)\n",
            phase_name, path, med, max, s->n, s->timeouts, s->errors);
    printf(
        "\"%s_%s\":{\"median_ms\":%.3f,\"max_ms\":%.3f,\"tries\":%u,\"timeouts\":%u,"
        "\"errors\":%u}%s",
        phase_name, path + 1, med, max, s->n, s->timeouts, s->errors, last ? "" : ",");
}

/* Slow connections the server has reset or closed by now (read nothing). */
static uint32_t count_closed(const int *fds, uint32_t n)
{
    uint32_t closed = 0;
    for (uint32_t i = 0; i < n; i++) {
        struct pollfd pfd = {.fd = fds[i], .events = POLLRDHUP};
        if (poll(&pfd, 1, 0) == 1 && (pfd.revents & (POLLERR | POLLHUP | POLLRDHUP)))
            closed++;
    }
    return closed;
}

int main(int argc, char **argv)
{
    struct opts o;
    int rc = parse_opts(argc, argv, &o);
    if (rc != 0)
        return rc > 0 ? 0 : 1;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    static struct series alone_h, alone_r, behind_h, behind_r;
    phase(&o, &alone_h, &alone_r);

    uint32_t nslow = o.slow + o.half;
    int *fds = calloc(nslow ? nslow : 1, sizeof(*fds));
    if (fds == NULL)
        return 1;
    static const char full[] = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    static const char part[] = "GET /metrics HTTP/1.1\r\nHo";
    double t0 = now_ms();
    for (uint32_t i = 0; i < nslow; i++) {
        bool slow = i < o.slow;
        fds[i] = dial(&o, slow ? o.rcvbuf : 0, slow ? o.mss : 0);
        if (fds[i] < 0 ||
            !send_all(fds[i], slow ? full : part, slow ? sizeof(full) - 1 : sizeof(part) - 1)) {
            fprintf(stderr, "ticketing-admin-slow: slow connection %u: %s\n", i, strerror(errno));
            return 1;
        }
    }
    double open_ms = now_ms() - t0;
    phase(&o, &behind_h, &behind_r);
    uint32_t closed = count_closed(fds, nslow);

    fprintf(stderr, "ticketing-admin-slow: %u slow readers, %u half requests opened in %.0f ms\n",
            o.slow, o.half, open_ms);
    printf(
        "{\"slow\":%u,\"half\":%u,\"rcvbuf\":%u,\"mss\":%u,\"interval_ms\":%u,"
        "\"open_ms\":%.1f,",
        o.slow, o.half, o.rcvbuf, o.mss, o.interval_ms, open_ms);
    report("alone", "/healthz", &alone_h, false);
    report("alone", "/readyz", &alone_r, false);
    report("behind", "/healthz", &behind_h, false);
    report("behind", "/readyz", &behind_r, false);
    printf("\"slow_closed_by_server\":%u}\n", closed);
    fprintf(stderr, "ticketing-admin-slow: %u of the %u slow connections closed by the server\n",
            closed, nslow);
    for (uint32_t i = 0; i < nslow; i++)
        close(fds[i]);
    free(fds);
    return 0;
}
