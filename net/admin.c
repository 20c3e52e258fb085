/* The admin HTTP listener on client port + 2: /healthz, /readyz, /status
 * and /members (JSON, written with core/json) and /metrics (Prometheus
 * text). A thread of its own serves up to
 * --max-admin-connections at once without ever blocking on one of them:
 * requests are read and answers written as the sockets allow, each
 * connection has a deadline, and at the cap the oldest connection goes. It
 * only reads published counters, never the hot path's state. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/json.h"
#include "net/admin_http.h"
#include "net/metrics.h"
#include "net/server.h"
#include "tk_version.h"

#define REQ_MAX 4096
#define RSP_MAX (256u << 10)

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

/* The admin thread's own counters (only it writes and reads them). */
static struct {
    uint64_t open, answers_pending, pending_bytes;
    uint64_t dropped_deadline, dropped_full, dropped_memory;
} admin_stats;

static size_t render_admin_metrics(const struct tk_server *s, char *buf, size_t cap)
{
    size_t off = 0;
    tk_put(buf, cap, &off,
           "# HELP ticketing_admin_connections Admin HTTP connections open.\n"
           "# TYPE ticketing_admin_connections gauge\nticketing_admin_connections %llu\n"
           "# HELP ticketing_admin_connections_max Bound on admin HTTP connections.\n"
           "# TYPE ticketing_admin_connections_max gauge\nticketing_admin_connections_max %u\n"
           "# HELP ticketing_admin_answers_pending Admin answers the reader has not taken yet.\n"
           "# TYPE ticketing_admin_answers_pending gauge\nticketing_admin_answers_pending %llu\n"
           "# HELP ticketing_admin_pending_bytes Bytes of admin answers not taken yet.\n"
           "# TYPE ticketing_admin_pending_bytes gauge\nticketing_admin_pending_bytes %llu\n"
           "# HELP ticketing_admin_dropped_total Admin connections closed before their "
           "answer was taken: past their deadline, the oldest at the connection cap, or "
           "the oldest when the answers pending passed their memory bound.\n"
           "# TYPE ticketing_admin_dropped_total counter\n"
           "ticketing_admin_dropped_total{reason=\"deadline\"} %llu\n"
           "ticketing_admin_dropped_total{reason=\"full\"} %llu\n"
           "ticketing_admin_dropped_total{reason=\"memory\"} %llu\n",
           (unsigned long long)admin_stats.open, s->opt.max_admin_connections,
           (unsigned long long)admin_stats.answers_pending,
           (unsigned long long)admin_stats.pending_bytes,
           (unsigned long long)admin_stats.dropped_deadline,
           (unsigned long long)admin_stats.dropped_full,
           (unsigned long long)admin_stats.dropped_memory);
    return off;
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
    off += render_admin_metrics(s, buf + off, cap - off);
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

/* /status: the node's own fields, then the Raft thread's. Returns 0 if
 * it does not fit (RSP_MAX is far above its worst case). */
static size_t render_status(struct tk_server *s, char *buf, size_t cap)
{
    static char raft[RSP_MAX]; /* the admin thread's alone */
    struct tk_json j;
    char domain[33];
    snprintf(domain, sizeof(domain), "%016llx%016llx",
             (unsigned long long)atomic_load(&s->domain_hi),
             (unsigned long long)atomic_load(&s->domain_lo));
    tk_json_init(&j, buf, cap > 0 ? cap - 1 : 0); /* room for the "\n" */
    tk_json_obj_open(&j);
    tk_json_khex64(&j, "node_id", s->node_id);
    tk_json_kstr(&j, "domain", domain);
    tk_json_kstr(&j, "advertise", s->advertise);
    tk_json_kuint(&j, "workers", s->nworkers);
    tk_json_kuint(&j, "connections", wstat_sum(s, TK_WSTAT_conns_open));
    tk_json_kuint(&j, "keys", wstat_sum(s, TK_WSTAT_keys));
    tk_json_kuint(&j, "held", wstat_sum(s, TK_WSTAT_held));
    tk_json_kuint(&j, "waiters", wstat_sum(s, TK_WSTAT_waiters));
    tk_json_kuint(&j, "grants", wstat_sum(s, TK_WSTAT_grants));
    tk_json_kbool(&j, "tls", s->tls);
    tk_json_raw(&j, raft, tk_raftd_status(s, raft, sizeof(raft)));
    tk_json_obj_close(&j);
    size_t off = tk_json_end(&j);
    if (off == 0)
        return 0;
    buf[off++] = '\n';
    return off;
}

/* /members: the Raft thread's document as it is. */
static size_t render_members(struct tk_server *s, char *buf, size_t cap)
{
    size_t off = tk_raftd_members(s, buf, cap - 1);
    if (off > 0)
        buf[off++] = '\n';
    return off;
}

/* Connections are served concurrently. A request must arrive whole within
 * REQ_DEADLINE_US of the accept, and its answer be taken within
 * WRITE_DEADLINE_US of being ready (a Prometheus scrape over a slow link
 * takes a fraction of that); a connection past its deadline is closed. At
 * --max-admin-connections, or when the answers not yet taken would pass
 * PENDING_BYTES_MAX, the oldest connection goes. So a trickling, idle or
 * never-reading client costs one slot and some bytes for a bounded time,
 * and delays nobody: /healthz is answered in the round it arrives. */
#define REQ_DEADLINE_US 1000000u
#define WRITE_DEADLINE_US 10000000u
#define PENDING_BYTES_MAX (32u << 20)
#define ACCEPTS_PER_ROUND 1024
#define EVENTS_MAX 1024
#define LATER_BUDGET_US 5000u

struct admin_conn {
    int fd;
    uint64_t opened_us, deadline_us;
    size_t len; /* request bytes read */
    char *out;  /* the part of the answer not written yet, or NULL */
    size_t out_len, out_off;
    char *req;  /* REQ_MAX + 1 bytes, from the accept to the close */
    bool later; /* a whole request for /status, /members or /metrics, in the later queue */
};

/* Connections live in fixed slots (fd -1: free), so an epoll event can
 * name its slot; free slots are a stack. */
struct admin {
    struct tk_server *s;
    struct admin_conn *c;
    uint32_t *free_slots;
    uint32_t n, cap, nfree;
    /* The answers to /status, /members and /metrics wait in a queue (of cap entries:
     * a connection is in it once at most) and are written LATER_BUDGET_US
     * at most each round, after everything else the round had. */
    uint32_t *later; /* slots */
    uint32_t later_head, nlater;
    int ep;
    uint64_t next_sweep_us;
    /* /status, /members and /metrics are rendered at most once a round, into
     * RSP_MAX bytes each: a burst of scrapes costs one render, not one
     * each. */
    uint64_t round, status_round, members_round, metrics_round;
    size_t status_len, members_len, metrics_len;
    char *status, *members, *metrics;
};

static void conn_close(struct admin *a, uint32_t i)
{
    struct admin_conn *c = &a->c[i];
    TK_ASSERT(!c->later);
    if (c->out != NULL) {
        TK_ASSERT(admin_stats.answers_pending > 0 &&
                  admin_stats.pending_bytes >= c->out_len - c->out_off);
        admin_stats.answers_pending--;
        admin_stats.pending_bytes -= c->out_len - c->out_off;
        free(c->out);
    }
    free(c->req);
    close(c->fd); /* which takes it out of the epoll set too */
    *c = (struct admin_conn){.fd = -1};
    a->free_slots[a->nfree++] = i;
    admin_stats.open = --a->n;
}

/* The connection open the longest, of those with an answer pending if
 * pending; UINT32_MAX if there is none. Connections in the later queue are
 * never chosen: they leave it only by being answered, so the queue never
 * holds a connection that is gone. */
static uint32_t oldest(const struct admin *a, bool pending)
{
    uint32_t o = UINT32_MAX;
    for (uint32_t i = 0; i < a->cap; i++)
        if (a->c[i].fd >= 0 && !a->c[i].later && (!pending || a->c[i].out != NULL) &&
            (o == UINT32_MAX || a->c[i].opened_us < a->c[o].opened_us))
            o = i;
    return o;
}

/* Writes what the socket takes of head + body at once; the rest is kept
 * in a buffer of the connection and written as the reader makes room
 * (admin_round() then trims the pending bytes back to their bound). */
static void answer(struct admin *a,
                   uint32_t i,
                   int code,
                   const char *ctype,
                   const char *body,
                   size_t len,
                   bool head_only)
{
    struct admin_conn *c = &a->c[i];
    char head[256];
    const char *reason = code == 200   ? "OK"
                         : code == 404 ? "Not Found"
                         : code == 405 ? "Method Not Allowed"
                         : code == 500 ? "Internal Server Error"
                         : code == 503 ? "Service Unavailable"
                                       : "Bad Request";
    int hn = snprintf(head, sizeof(head),
                      "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                      "Connection: close\r\n\r\n",
                      code, reason, ctype, len);
    TK_ASSERT(hn > 0 && (size_t)hn < sizeof(head));
    if (head_only)
        len = 0;
    struct iovec iov[2] = {{head, (size_t)hn}, {(void *)body, len}};
    struct msghdr m = {.msg_iov = iov, .msg_iovlen = len ? 2 : 1};
    ssize_t w;
    do
        w = sendmsg(c->fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    while (w < 0 && errno == EINTR);
    size_t total = (size_t)hn + len, done = w > 0 ? (size_t)w : 0;
    if (done == total || (w < 0 && errno != EAGAIN))
        return; /* answered, or the reader is gone: the caller closes it */
    size_t rest = total - done, at = 0;
    c->out = malloc(rest);
    TK_ASSERT(c->out != NULL);
    for (int k = 0; k < 2; k++) {
        if (done >= iov[k].iov_len) {
            done -= iov[k].iov_len;
            continue;
        }
        memcpy(c->out + at, (const char *)iov[k].iov_base + done, iov[k].iov_len - done);
        at += iov[k].iov_len - done;
        done = 0;
    }
    TK_ASSERT(at == rest);
    c->out_len = rest;
    c->out_off = 0;
    c->deadline_us = tk_now_us() + WRITE_DEADLINE_US;
    struct epoll_event ev = {.events = EPOLLOUT, .data.u32 = i};
    TK_ASSERT(epoll_ctl(a->ep, EPOLL_CTL_MOD, c->fd, &ev) == 0);
    admin_stats.answers_pending++;
    admin_stats.pending_bytes += rest;
}

/* A JSON document, or 500 if it could not be rendered (never expected:
 * the buffers are sized for the worst case). */
static void answer_json(struct admin *a, uint32_t i, const char *body, size_t len, bool head_only)
{
    if (len == 0)
        answer(a, i, 500, "text/plain", "no document\n", 12, head_only);
    else
        answer(a, i, 200, "application/json", body, len, head_only);
}

/* Answers one complete request (req[len] is NUL). /status, /members and /metrics
 * go to the later queue unless late: the probes that arrive with a burst
 * of scrapes are answered before the burst is. */
static void serve(struct admin *a, uint32_t i, bool late)
{
    struct tk_server *s = a->s;
    struct admin_conn *c = &a->c[i];
    bool head_only = false; /* a 400 after a HEAD still gets its body */
    enum tk_admin_route route = tk_admin_http_parse(c->req, c->len, &head_only);
    if (!late &&
        (route == TK_ADMIN_STATUS || route == TK_ADMIN_MEMBERS || route == TK_ADMIN_METRICS)) {
        TK_ASSERT(!c->later && a->nlater < a->cap);
        c->later = true;
        uint32_t at = (a->later_head + a->nlater++) % a->cap;
        a->later[at] = i;
        return;
    }
    switch (route) {
        case TK_ADMIN_BAD_REQUEST:
            answer(a, i, 400, "text/plain", "bad request\n", 12, false);
            break;
        case TK_ADMIN_BAD_METHOD:
            answer(a, i, 405, "text/plain", "GET only\n", 9, false);
            break;
        case TK_ADMIN_HEALTHZ: {
            char why[128];
            if (stalled(s, why, sizeof(why)))
                answer(a, i, 503, "text/plain", why, strlen(why), head_only);
            else
                answer(a, i, 200, "text/plain", "ok\n", 3, head_only);
            break;
        }
        case TK_ADMIN_READYZ:
            if (tk_raftd_ready(s))
                answer(a, i, 200, "text/plain", "ready\n", 6, head_only);
            else
                answer(a, i, 503, "text/plain", "not ready\n", 10, head_only);
            break;
        case TK_ADMIN_STATUS:
            if (a->status_round != a->round) {
                a->status_len = render_status(s, a->status, RSP_MAX);
                a->status_round = a->round;
            }
            answer_json(a, i, a->status, a->status_len, head_only);
            break;
        case TK_ADMIN_MEMBERS:
            if (a->members_round != a->round) {
                a->members_len = render_members(s, a->members, RSP_MAX);
                a->members_round = a->round;
            }
            answer_json(a, i, a->members, a->members_len, head_only);
            break;
        case TK_ADMIN_METRICS:
            if (a->metrics_round != a->round) {
                a->metrics_len = render_metrics(s, a->metrics, RSP_MAX);
                a->metrics_round = a->round;
            }
            answer(a, i, 200, "text/plain; version=0.0.4", a->metrics, a->metrics_len, head_only);
            break;
        case TK_ADMIN_NOT_FOUND:
            answer(a, i, 404, "text/plain", "not found\n", 10, false);
            break;
    }
}

static void admin_accept(struct admin *a)
{
    for (int k = 0; k < ACCEPTS_PER_ROUND; k++) {
        int fd = accept4(admin_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0)
            return;
        if (a->n == a->cap) {
            admin_stats.dropped_full++;
            uint32_t o = oldest(a, false);
            if (o == UINT32_MAX) { /* every one waits for its answer: the new one goes */
                close(fd);
                continue;
            }
            conn_close(a, o);
        }
        uint32_t i = a->free_slots[--a->nfree];
        uint64_t now = tk_now_us();
        a->c[i] = (struct admin_conn){.fd = fd,
                                      .opened_us = now,
                                      .deadline_us = now + REQ_DEADLINE_US,
                                      .req = malloc(REQ_MAX + 1)};
        TK_ASSERT(a->c[i].req != NULL);
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = i};
        if (epoll_ctl(a->ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
            close(fd);
            free(a->c[i].req);
            a->c[i] = (struct admin_conn){.fd = -1};
            a->free_slots[a->nfree++] = i;
            continue;
        }
        admin_stats.open = ++a->n;
    }
}

/* Reads what arrived and answers a complete request; true when the
 * connection is done with (answered whole, closed, or over its limits). */
static bool admin_read(struct admin *a, uint32_t i)
{
    struct admin_conn *c = &a->c[i];
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
            serve(a, i, false);
            return a->c[i].out == NULL && !a->c[i].later;
        }
    }
}

/* Writes more of a pending answer; true when it is all written or the
 * reader is gone. */
static bool admin_write(struct admin_conn *c)
{
    for (;;) {
        ssize_t w =
            send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EAGAIN)
            return false;
        if (w <= 0)
            return true;
        c->out_off += (size_t)w;
        admin_stats.pending_bytes -= (size_t)w;
        if (c->out_off == c->out_len)
            return true;
    }
}

#define LISTENER UINT32_MAX

/* Answers the later queue from its head for LATER_BUDGET_US at most. */
static void serve_later(struct admin *a, uint64_t now)
{
    for (uint32_t k = 0; a->nlater > 0; k++) {
        if (k % 8 == 7 && tk_now_us() - now > LATER_BUDGET_US)
            return;
        uint32_t i = a->later[a->later_head];
        a->later_head = (a->later_head + 1) % a->cap;
        a->nlater--;
        struct admin_conn *c = &a->c[i];
        /* Nothing closes a connection in the queue (see oldest()), so its
         * slot still holds it. */
        TK_ASSERT(c->fd >= 0 && c->later);
        c->later = false;
        serve(a, i, true);
        if (c->out == NULL)
            conn_close(a, i);
    }
}

static void admin_round(struct admin *a)
{
    struct epoll_event ev[EVENTS_MAX];
    int ready = epoll_wait(a->ep, ev, EVENTS_MAX, a->nlater > 0 ? 0 : 100);
    uint64_t now = tk_now_us();
    a->round++;
    bool accept = false;
    /* The connections' events first: every close waits until they are all
     * seen, so no event names a slot that was freed and taken again. */
    for (int k = 0; k < ready; k++) {
        uint32_t i = ev[k].data.u32;
        if (i == LISTENER) {
            accept = true;
            continue;
        }
        struct admin_conn *c = &a->c[i];
        bool done;
        if (c->later)
            done = false; /* an error or hang-up: the answer's write sees it */
        else if (ev[k].events & EPOLLERR)
            done = true;
        else if (c->out != NULL)
            done = admin_write(c);
        else
            done = admin_read(a, i);
        if (done)
            conn_close(a, i);
    }
    serve_later(a, now);
    while (admin_stats.pending_bytes > PENDING_BYTES_MAX) {
        admin_stats.dropped_memory++;
        uint32_t o = oldest(a, true);
        TK_ASSERT(o != UINT32_MAX); /* pending bytes belong to a connection */
        conn_close(a, o);
    }
    if (now >= a->next_sweep_us) { /* deadlines are checked every 10 ms */
        a->next_sweep_us = now + 10000u;
        for (uint32_t i = 0; i < a->cap; i++)
            if (a->c[i].fd >= 0 && !a->c[i].later && now >= a->c[i].deadline_us) {
                admin_stats.dropped_deadline++;
                conn_close(a, i);
            }
    }
    if (accept)
        admin_accept(a);
}

static void *admin_main(void *arg)
{
    struct tk_server *s = arg;
    pthread_setname_np(pthread_self(), "tk-admin");
    struct admin a = {.s = s, .cap = s->opt.max_admin_connections, .ep = -1};
    a.status = malloc(RSP_MAX);
    a.members = malloc(RSP_MAX);
    a.metrics = malloc(RSP_MAX);
    a.c = calloc(a.cap, sizeof(*a.c));
    a.free_slots = calloc(a.cap, sizeof(*a.free_slots));
    a.later = calloc(a.cap, sizeof(*a.later));
    a.ep = epoll_create1(EPOLL_CLOEXEC);
    TK_ASSERT(a.status != NULL && a.members != NULL && a.metrics != NULL && a.c != NULL &&
              a.free_slots != NULL && a.later != NULL);
    TK_ASSERT(a.ep >= 0);
    for (uint32_t i = a.cap; i-- > 0;) {
        a.c[i].fd = -1;
        a.free_slots[a.nfree++] = i;
    }
    struct epoll_event lev = {.events = EPOLLIN, .data.u32 = LISTENER};
    TK_ASSERT(epoll_ctl(a.ep, EPOLL_CTL_ADD, admin_fd, &lev) == 0);
    while (!atomic_load_explicit(&s->stopping, memory_order_relaxed))
        admin_round(&a);
    for (uint32_t i = 0; i < a.cap; i++) {
        a.c[i].later = false; /* stopping: the queue is dropped whole */
        if (a.c[i].fd >= 0)
            conn_close(&a, i);
    }
    close(a.ep);
    free(a.later);
    free(a.free_slots);
    free(a.c);
    free(a.metrics);
    free(a.members);
    free(a.status);
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
    /* Non-blocking: admin_accept() takes the backlog until it is empty. */
    int fl = fcntl(admin_fd, F_GETFL);
    if (fl < 0 || fcntl(admin_fd, F_SETFL, fl | O_NONBLOCK) < 0) {
        tk_log(TK_LOG_ERROR, "admin port: fcntl: %s", strerror(errno));
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
