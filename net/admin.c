/* The admin HTTP listener on client port + 2: /healthz, /readyz, /status
 * (JSON) and /metrics (Prometheus text). A thread of its own reads up to
 * 64 connections at once, each with a deadline for its whole request, and
 * answers each in turn; it only reads published counters, never the hot
 * path's state. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "net/admin_http.h"
#include "net/metrics.h"
#include "net/server.h"
#include "tk_version.h"

#define REQ_MAX 4096
#define RSP_MAX (256u << 10)
#define IO_TIMEOUT_MS 500

static int admin_fd = -1;
static pthread_t admin_thread;

static const struct {
    const char *family, *type, *label, *help;
} wstat_rows[] = {
#define X(name, type, family, label, help) {#family, #type, label, help},
    TK_WSTAT_MAP(X)
#undef X
};

static uint64_t wstat_sum(struct tk_server *s, int i)
{
    uint64_t v = 0;
    for (uint32_t w = 0; w < s->nworkers; w++)
        v += atomic_load_explicit(&s->wstats[w][i], memory_order_relaxed);
    return v;
}

static size_t render_metrics(struct tk_server *s, char *buf, size_t cap)
{
    size_t off = 0;
    tk_put(buf, cap, &off,
           "# HELP ticketing_build_info Version and commit of this ticketingd build.\n"
           "# TYPE ticketing_build_info gauge\n"
           "ticketing_build_info{version=\"%s\",commit=\"%s\"} 1\n",
           TK_VERSION, TK_COMMIT);
    for (int i = 0; i < TK_WSTAT_COUNT; i++) {
        const char *family = wstat_rows[i].family;
        const char *label = wstat_rows[i].label;
        const char *suffix = strcmp(wstat_rows[i].type, "counter") == 0 ? "_total" : "";
        if (i == 0 || strcmp(family, wstat_rows[i - 1].family) != 0)
            tk_put(buf, cap, &off, "# HELP ticketing_%s%s %s.\n# TYPE ticketing_%s%s %s\n", family,
                   suffix, wstat_rows[i].help, family, suffix, wstat_rows[i].type);
        tk_put(buf, cap, &off, "ticketing_%s%s%s%s%s %llu\n", family, suffix, *label ? "{" : "",
               label, *label ? "}" : "", (unsigned long long)wstat_sum(s, i));
    }
    tk_put(buf, cap, &off,
           "# HELP ticketing_connections_max Bound on client connections.\n"
           "# TYPE ticketing_connections_max gauge\n"
           "ticketing_connections_max %u\n"
           "# HELP ticketing_inflight_per_connection_max Bound on requests in "
           "flight per connection.\n"
           "# TYPE ticketing_inflight_per_connection_max gauge\n"
           "ticketing_inflight_per_connection_max %u\n"
           "# HELP ticketing_waiters_per_key_max Bound on waiters per key.\n"
           "# TYPE ticketing_waiters_per_key_max gauge\n"
           "ticketing_waiters_per_key_max %u\n"
           "# HELP ticketing_waiters_max Bound on waiters in all.\n"
           "# TYPE ticketing_waiters_max gauge\nticketing_waiters_max %llu\n"
           "# HELP ticketing_keys_max Bound on keys in the table.\n"
           "# TYPE ticketing_keys_max gauge\nticketing_keys_max %llu\n"
           "# HELP ticketing_handshake_seconds_max Time allowed for a "
           "handshake.\n"
           "# TYPE ticketing_handshake_seconds_max gauge\n"
           "ticketing_handshake_seconds_max %g\n",
           s->opt.max_connections, s->opt.max_inflight, s->opt.max_waiters_per_key,
           (unsigned long long)s->opt.max_waiters, (unsigned long long)s->opt.max_keys,
           s->opt.handshake_ms / 1000.0);
    off += tk_hist_print(buf + off, cap - off, "ticketing_acquire_seconds",
                         "Time from reading an acquire to sending its G.", s->acquire_hist,
                         s->nworkers, tk_hist_latency_us, tk_hist_latency_n, 1e-6);
    off += tk_hist_print(buf + off, cap - off, "ticketing_wait_seconds",
                         "Time an acquire spent queued as a waiter before its grant.", s->wait_hist,
                         s->nworkers, tk_hist_latency_us, tk_hist_latency_n, 1e-6);
    off += tk_process_metrics(buf + off, cap - off);
    off += tk_raftd_metrics(s, buf + off, cap - off);
    return TK_MIN(off, cap);
}

/* Alive = every loop made a round recently: workers wake at least every
 * 100 ms and the Raft thread every 50 ms, so 5 s without a round means a
 * thread is stuck (a liveness probe should then restart the process). */
#define STALL_US 5000000u

static bool stalled(struct tk_server *s, char *why, size_t cap)
{
    uint64_t now = tk_now_us();
    for (uint32_t i = 0; i <= s->nworkers; i++) {
        uint32_t slot = i < s->nworkers ? i : TK_WORKERS_MAX;
        uint64_t at = atomic_load_explicit(&s->progress_us[slot], memory_order_relaxed);
        if (at != 0 && now > at && now - at > STALL_US) {
            if (i < s->nworkers)
                snprintf(why, cap, "worker %u made no progress for %llu ms\n", i,
                         (unsigned long long)((now - at) / 1000u));
            else
                snprintf(why, cap, "raft thread made no progress for %llu ms\n",
                         (unsigned long long)((now - at) / 1000u));
            return true;
        }
    }
    return false;
}

static size_t render_status(struct tk_server *s, char *buf, size_t cap)
{
    int n =
        snprintf(buf, cap,
                 "{\"node_id\":\"%016llx\",\"domain\":\"%016llx%016llx\",\"advertise\":\"%s\","
                 "\"workers\":%u,\"connections\":%llu,\"keys\":%llu,\"held\":%llu,\"waiters\":%llu,"
                 "\"grants\":%llu,\"tls\":%s,",
                 (unsigned long long)s->node_id, (unsigned long long)atomic_load(&s->domain_hi),
                 (unsigned long long)atomic_load(&s->domain_lo), s->advertise, s->nworkers,
                 (unsigned long long)wstat_sum(s, TK_WSTAT_conns_open),
                 (unsigned long long)wstat_sum(s, TK_WSTAT_keys),
                 (unsigned long long)wstat_sum(s, TK_WSTAT_held),
                 (unsigned long long)wstat_sum(s, TK_WSTAT_waiters),
                 (unsigned long long)wstat_sum(s, TK_WSTAT_grants), s->tls ? "true" : "false");
    if (n < 0 || (size_t)n >= cap)
        return 0;
    size_t off = (size_t)n;
    off += tk_raftd_status(s, buf + off, cap - off);
    if (off + 2 < cap) {
        buf[off++] = '}';
        buf[off++] = '\n';
    }
    return off;
}

static bool write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        struct pollfd pfd = {.fd = fd, .events = POLLOUT};
        if (poll(&pfd, 1, IO_TIMEOUT_MS) <= 0)
            return false;
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (w <= 0)
            return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

static bool head_only;

static void respond(int fd, int code, const char *ctype, const char *body, size_t len)
{
    char head[256];
    const char *reason = code == 200   ? "OK"
                         : code == 404 ? "Not Found"
                         : code == 405 ? "Method Not Allowed"
                         : code == 503 ? "Service Unavailable"
                                       : "Bad Request";
    int n = snprintf(head, sizeof(head),
                     "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n",
                     code, reason, ctype, len);
    if (write_all(fd, head, (size_t)n) && !head_only)
        write_all(fd, body, len);
}

/* Answers one complete request (req[len] is NUL). */
static void serve(struct tk_server *s, int fd, const char *req, size_t len, char *rsp)
{
    head_only = false; /* a 400 after a HEAD still gets its body */
    switch (tk_admin_http_parse(req, len, &head_only)) {
        case TK_ADMIN_BAD_REQUEST:
            respond(fd, 400, "text/plain", "bad request\n", 12);
            break;
        case TK_ADMIN_BAD_METHOD:
            respond(fd, 405, "text/plain", "GET only\n", 9);
            break;
        case TK_ADMIN_HEALTHZ: {
            char why[128];
            if (stalled(s, why, sizeof(why)))
                respond(fd, 503, "text/plain", why, strlen(why));
            else
                respond(fd, 200, "text/plain", "ok\n", 3);
            break;
        }
        case TK_ADMIN_READYZ:
            if (tk_raftd_ready(s))
                respond(fd, 200, "text/plain", "ready\n", 6);
            else
                respond(fd, 503, "text/plain", "not ready\n", 10);
            break;
        case TK_ADMIN_STATUS: {
            size_t n = render_status(s, rsp, RSP_MAX);
            respond(fd, 200, "application/json", rsp, n);
            break;
        }
        case TK_ADMIN_METRICS: {
            size_t n = render_metrics(s, rsp, RSP_MAX);
            respond(fd, 200, "text/plain; version=0.0.4", rsp, n);
            break;
        }
        case TK_ADMIN_NOT_FOUND:
            respond(fd, 404, "text/plain", "not found\n", 10);
            break;
    }
}

/* Connections are read concurrently, each with a deadline for its whole
 * request: a client trickling bytes or sitting idle costs one slot for at
 * most REQ_DEADLINE_US, and delays nobody else. When the slots are full the
 * oldest connection goes, so /healthz answers while idle or slow clients
 * hold the port. */
#define ADMIN_CONNS_MAX 64
#define REQ_DEADLINE_US 1000000u

struct admin_conn {
    int fd;
    uint64_t deadline_us;
    size_t len;
    char req[REQ_MAX + 1];
};

static void admin_accept(struct admin_conn *c, uint32_t *n)
{
    int fd = accept4(admin_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0)
        return;
    if (*n == ADMIN_CONNS_MAX) {
        uint32_t oldest = 0;
        for (uint32_t i = 1; i < *n; i++)
            if (c[i].deadline_us < c[oldest].deadline_us)
                oldest = i;
        close(c[oldest].fd);
        c[oldest] = c[--*n];
    }
    c[*n].fd = fd;
    c[*n].deadline_us = tk_now_us() + REQ_DEADLINE_US;
    c[*n].len = 0;
    (*n)++;
}

/* Reads what arrived; true when the connection is done with (answered,
 * closed, or over its limits). */
static bool admin_read(struct tk_server *s, struct admin_conn *c, char *rsp)
{
    for (;;) {
        ssize_t r = recv(c->fd, c->req + c->len, REQ_MAX - c->len, MSG_DONTWAIT);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && errno == EAGAIN)
            return false;
        if (r <= 0)
            return true;
        c->len += (size_t)r;
        c->req[c->len] = 0;
        if (tk_admin_http_complete(c->req, c->len) || c->len == REQ_MAX) {
            serve(s, c->fd, c->req, c->len, rsp);
            return true;
        }
    }
}

static void *admin_main(void *arg)
{
    struct tk_server *s = arg;
    pthread_setname_np(pthread_self(), "tk-admin");
    char *rsp = malloc(RSP_MAX);
    struct admin_conn *c = malloc(ADMIN_CONNS_MAX * sizeof(*c));
    TK_ASSERT(rsp != NULL);
    TK_ASSERT(c != NULL);
    uint32_t n = 0;
    struct pollfd pfd[ADMIN_CONNS_MAX + 1];
    while (!atomic_load_explicit(&s->stopping, memory_order_relaxed)) {
        pfd[0] = (struct pollfd){.fd = admin_fd, .events = POLLIN};
        for (uint32_t i = 0; i < n; i++)
            pfd[i + 1] = (struct pollfd){.fd = c[i].fd, .events = POLLIN};
        int ready = poll(pfd, n + 1, 100);
        uint64_t now = tk_now_us();
        /* Serve or expire the open ones first: accepting may move them. */
        for (uint32_t i = n; i-- > 0;) {
            bool done = now >= c[i].deadline_us;
            if (!done && ready > 0 && (pfd[i + 1].revents & (POLLIN | POLLHUP | POLLERR)))
                done = admin_read(s, &c[i], rsp);
            if (done) {
                close(c[i].fd);
                c[i] = c[--n];
            }
        }
        if (ready > 0 && (pfd[0].revents & POLLIN))
            admin_accept(c, &n);
    }
    for (uint32_t i = 0; i < n; i++)
        close(c[i].fd);
    free(c);
    free(rsp);
    return NULL;
}

int tk_admin_start(struct tk_server *s)
{
    admin_fd = tk_listen(s->opt.bind, s->opt.admin_port, TK_LISTEN_ALONE);
    if (admin_fd < 0) {
        tk_log(TK_LOG_ERROR, "cannot listen on admin port %s:%u: %s", s->opt.bind,
               s->opt.admin_port, strerror(errno));
        return TK_EIO;
    }
    if (pthread_create(&admin_thread, NULL, admin_main, s) != 0)
        return TK_EIO;
    return TK_OK;
}

void tk_admin_join(struct tk_server *s)
{
    (void)s;
    pthread_join(admin_thread, NULL);
    close(admin_fd);
}
