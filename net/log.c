/* Logging, clocks and listening sockets: the small I/O helpers every
 * thread of ticketingd uses. */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/json.h"
#include "net/server.h"

static int log_level = TK_LOG_INFO;
static int log_format = TK_LOG_TEXT;
static uint64_t log_node;

void tk_log_init(int level, int format, uint64_t node_id)
{
    log_level = level;
    log_format = format;
    log_node = node_id;
}

void tk_accept_done(struct tk_accept *a, int res, bool more, uint64_t now_us, const char *what)
{
    if (res >= 0 || res == -ECANCELED) {
        a->backoff_us = 0;
    } else {
        a->errors++;
        if (a->backoff_us == 0)
            tk_log(TK_LOG_WARN, "%s: accept failed: %s; retrying with backoff", what,
                   strerror(-res));
        a->backoff_us = TK_MIN(TK_MAX(a->backoff_us * 2, 10000u), 1000000u);
    }
    if (!more) {
        a->armed = false;
        a->retry_at_us = res < 0 && res != -ECANCELED ? now_us + a->backoff_us : now_us;
    }
}

/* Appends msg to out[*pos..lim) escaped for the format, whole characters
 * only; if it does not all fit, ends it with "..." (room for which lies
 * beyond lim: the caller keeps 3 bytes). JSON escapes are core/json's,
 * so a log line escapes as /status does. */
static void put_msg(char *out, size_t *pos, size_t lim, bool json, const char *msg, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *m = (const unsigned char *)msg;
    size_t o = *pos;
    for (size_t i = 0; i < len;) {
        char esc[TK_JSON_ESCAPE_MAX];
        size_t elen, step = 1;
        unsigned char c = m[i];
        if (json) {
            elen = tk_json_escape_char(m + i, len - i, esc, &step);
        } else if (c < 0x20 || c == 0x7f) {
            esc[0] = '\\';
            esc[1] = 'x';
            esc[2] = hex[c >> 4];
            esc[3] = hex[c & 15];
            elen = 4;
        } else {
            esc[0] = (char)c;
            elen = 1;
        }
        if (o + elen > lim) {
            memcpy(out + o, "...", 3);
            o += 3;
            break;
        }
        memcpy(out + o, esc, elen);
        o += elen;
        i += step;
    }
    *pos = o;
}

size_t tk_log_format_line(char *out,
                          size_t cap,
                          int format,
                          uint64_t wall_us,
                          int level,
                          uint64_t node_id,
                          const char *msg,
                          size_t len)
{
    static const char *const names[] = {"error", "warn", "info", "debug"};
    const char *name = level >= TK_LOG_ERROR && level <= TK_LOG_DEBUG ? names[level] : "info";
    cap = TK_MIN(cap, (size_t)TK_LOG_LINE_MAX);
    time_t sec = (time_t)(wall_us / 1000000u);
    struct tm tm;
    gmtime_r(&sec, &tm);
    char ts[48];
    size_t tl = strftime(ts, sizeof(ts) - 6, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(ts + tl, sizeof(ts) - tl, ".%03uZ", (unsigned)(wall_us / 1000u % 1000u));
    bool json = format == TK_LOG_JSON;
    int n =
        json ? snprintf(out, cap, "{\"ts\":\"%s\",\"level\":\"%s\",\"node\":\"%016llx\",\"msg\":\"",
                        ts, name, (unsigned long long)node_id)
             : snprintf(out, cap, "%s %s node=%016llx ", ts, name, (unsigned long long)node_id);
    size_t pos = n < 0 ? 0 : TK_MIN((size_t)n, cap - 1);
    /* Room after the message: "..." if it is cut, then "\"}\n" or "\n". */
    size_t tail = json ? 3 : 1;
    if (pos + 3 + tail <= cap)
        put_msg(out, &pos, cap - 3 - tail, json, msg, len);
    if (json)
        out[pos++] = '"', out[pos++] = '}';
    out[pos++] = '\n';
    return pos;
}

void tk_log(int level, const char *fmt, ...)
{
    if (level > log_level)
        return;
    char msg[TK_LOG_LINE_MAX], line[TK_LOG_LINE_MAX];
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    size_t len = m < 0 ? 0 : TK_MIN((size_t)m, sizeof(msg) - 1);
    size_t n =
        tk_log_format_line(line, sizeof(line), log_format, tk_wall_us(), level, log_node, msg, len);
    /* One write per line keeps lines whole across threads. */
    ssize_t w = write(2, line, n);
    (void)w;
}

void tk_log_limited(struct tk_log_limit *ll, int level, const char *fmt, ...)
{
    if (level > log_level)
        return;
    uint64_t now = tk_now_us(), more = 0;
    bool write_it;
    pthread_mutex_lock(&ll->lock);
    if (ll->lines == 0 || now - ll->window_start_us >= TK_LOG_LIMIT_WINDOW_US) {
        ll->window_start_us = now;
        ll->lines = 0;
    }
    write_it = ll->lines < TK_LOG_LIMIT_BURST;
    if (write_it) {
        ll->lines++;
        more = ll->suppressed;
        ll->suppressed = 0;
    } else {
        ll->suppressed++;
    }
    pthread_mutex_unlock(&ll->lock);
    if (!write_it)
        return;
    char msg[TK_LOG_LINE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (more)
        tk_log(level, "%s (%llu more since last line)", msg, (unsigned long long)more);
    else
        tk_log(level, "%s", msg);
}

uint64_t tk_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

uint64_t tk_wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* True if a socket without SO_REUSEPORT can bind the address: then no
 * other socket holds it, shared or not. */
static bool port_unheld(const struct addrinfo *a)
{
    int fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return true; /* the real bind will say */
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    bool ok = bind(fd, a->ai_addr, a->ai_addrlen) == 0 || errno != EADDRINUSE;
    close(fd);
    return ok;
}

int tk_listen(const char *host, uint32_t port, enum tk_listen_share share)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    char portstr[16];
    snprintf(portstr, sizeof(portstr), "%u", port);
    if (getaddrinfo(host, portstr, &hints, &res) != 0 || !res)
        return -1;
    /* A process restarted at once (a member coming back) may find its
     * predecessor's listener not yet released: the kernel frees a socket
     * that an io_uring accept held a moment after that process is gone.
     * Retry EADDRINUSE for up to 5 s rather than fail the restart. */
    int fd = -1, err = 0;
    for (int attempt = 0; attempt < 100; attempt++) {
        fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
            break;
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (share != TK_LISTEN_ALONE)
            setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
        bool unheld = share != TK_LISTEN_SHARE_FIRST || port_unheld(res);
        if (unheld && bind(fd, res->ai_addr, res->ai_addrlen) == 0 && listen(fd, 4096) == 0)
            break;
        err = unheld ? errno : EADDRINUSE;
        close(fd);
        fd = -1;
        if (err != EADDRINUSE)
            break;
        if (attempt == 0)
            tk_log(TK_LOG_WARN, "port %u still in use; retrying for up to 5 s", port);
        struct timespec pause = {.tv_sec = 0, .tv_nsec = 50 * 1000 * 1000};
        nanosleep(&pause, NULL);
    }
    if (fd < 0 && !err)
        err = errno; /* socket() failed */
    freeaddrinfo(res);
    if (fd < 0)
        errno = err; /* for the caller's message */
    return fd;
}
