/* The load engine: one epoll loop per thread driving many non-blocking
 * connections, each carrying `depth` slots (logical lock clients).
 *
 * A slot cycles IDLE -> ACQ -> (HOLD) -> REL -> IDLE. In closed loop an
 * idle slot starts its next acquire at once; in open loop arrivals come at
 * a fixed rate and wait in a backlog for a free slot, and the latency of an
 * acquire counts from its *intended* send time (the arrival), so a stall
 * of the server shows in the tail instead of silently lowering the offered
 * load (coordinated omission).
 *
 * Connections that fail or are redirected reconnect with a backoff; an
 * acquire in flight on a dead connection is indeterminate (its slot moves
 * on, to a fresh key where the scenario allows), a release in flight is
 * sent again once the connection is back.
 *
 * With --tls-ca every connection runs TLS (core/tls.h) under the driver:
 * received ciphertext is fed to TLS and the plaintext lands in c->in; the
 * driver's plaintext output is handed to TLS whole at flush time, and the
 * ciphertext goes to the socket. The driver never knows.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "bench/bench.h"
#include "core/addr.h"
#include "core/tls.h"

enum { TM_HOLD = 1, TM_RETRY, TM_RECONNECT, TM_SETUP };

#define NS_PER_MS 1000000ull
#define SETUP_TIMEOUT_NS (10000ull * NS_PER_MS)
#define BACKOFF_MS_MAX 1000u
#define HEAP_MAX (1u << 26)
#define EVENTS_MAX 256
#define OUT_CAP_MIN (16u << 10)
#define TLS_RECV_SIZE (16u << 10)
#define TLS_RECORD_HANDSHAKE 0x16

uint64_t bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static bool in_window(const struct bench *b, uint64_t t)
{
    return t >= b->t_measure && t < b->t_end;
}

void bench_conn_warn(struct bconn *c, const char *fmt, ...)
{
    if (c->warned)
        return;
    c->warned = true;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "ticketing-bench: conn %u: %s\n", c->global, msg);
}

/* ---- timers: a binary min-heap; stale entries are skipped by generation ---- */

static void heap_push(struct bthread *t, uint64_t at, uint8_t kind, void *obj, uint64_t gen)
{
    if (t->heap_len == t->heap_cap) {
        uint32_t cap = t->heap_cap ? t->heap_cap * 2u : 1024u;
        TK_ASSERT(cap <= HEAP_MAX);
        struct timer_ent *h = realloc(t->heap, cap * sizeof(*h));
        TK_ASSERT(h != NULL);
        t->heap = h;
        t->heap_cap = cap;
    }
    uint32_t i = t->heap_len++;
    struct timer_ent e = {.at = at, .gen = gen, .obj = obj, .kind = kind};
    while (i > 0) {
        uint32_t parent = (i - 1) / 2;
        if (t->heap[parent].at <= at)
            break;
        t->heap[i] = t->heap[parent];
        i = parent;
    }
    t->heap[i] = e;
}

static bool heap_pop_due(struct bthread *t, uint64_t now, struct timer_ent *out)
{
    if (t->heap_len == 0 || t->heap[0].at > now)
        return false;
    *out = t->heap[0];
    struct timer_ent last = t->heap[--t->heap_len];
    uint32_t i = 0;
    for (;;) {
        uint32_t l = 2 * i + 1, r = l + 1, m = i;
        uint64_t mv = last.at;
        if (l < t->heap_len && t->heap[l].at < mv) {
            m = l;
            mv = t->heap[l].at;
        }
        if (r < t->heap_len && t->heap[r].at < mv)
            m = r;
        if (m == i)
            break;
        t->heap[i] = t->heap[m];
        i = m;
    }
    if (t->heap_len > 0)
        t->heap[i] = last;
    return true;
}

/* ---- output and in-flight bookkeeping ---- */

static void conn_mark_dirty(struct bconn *c)
{
    if (c->dirty || c->fd < 0)
        return;
    c->dirty = true;
    c->th->flush[c->th->nflush++] = c;
}

char *bench_out(struct bconn *c, size_t n)
{
    if (c->out_cap - c->out_len < n) {
        if (c->out_sent > 0) {
            memmove(c->out, c->out + c->out_sent, c->out_len - c->out_sent);
            c->out_len -= c->out_sent;
            c->out_sent = 0;
        }
        size_t bound = (size_t)c->nslots * 2u * c->th->b->drv->req_max + (64u << 10);
        size_t cap = c->out_cap ? c->out_cap : OUT_CAP_MIN;
        while (cap - c->out_len < n)
            cap *= 2;
        /* Every slot has at most one request in flight, plus setup requests:
         * past the bound something is being sent twice. */
        TK_ASSERT(cap <= 2 * bound);
        if (cap != c->out_cap) {
            char *o = realloc(c->out, cap);
            TK_ASSERT(o != NULL);
            c->out = o;
            c->out_cap = cap;
        }
    }
    return c->out + c->out_len;
}

void bench_out_commit(struct bconn *c, size_t n)
{
    TK_ASSERT(c->out_len + n <= c->out_cap);
    c->out_len += n;
    conn_mark_dirty(c);
}

void bench_inflight_push(struct bconn *c, uint32_t slot, uint8_t op)
{
    TK_ASSERT(c->ring_len < c->ring_cap);
    c->ring[(c->ring_head + c->ring_len) % c->ring_cap] = (struct inflight){slot, op};
    c->ring_len++;
}

struct inflight *bench_inflight_head(struct bconn *c)
{
    return c->ring_len ? &c->ring[c->ring_head] : NULL;
}

void bench_inflight_pop(struct bconn *c)
{
    TK_ASSERT(c->ring_len > 0);
    c->ring_head = (c->ring_head + 1) % c->ring_cap;
    c->ring_len--;
}

/* ---- slots ---- */

static void slot_acquire(struct bthread *t, struct slot *s, uint64_t intended);

static void slot_idle(struct bthread *t, struct slot *s)
{
    struct bench *b = t->b;
    s->state = SL_IDLE;
    if (t->stopping || !atomic_load_explicit(&b->go, memory_order_acquire) ||
        s->conn->state != CS_READY)
        return;
    if (b->rate > 0) {
        if (!s->in_idle) {
            TK_ASSERT(t->nidle < t->nslots);
            t->idle_ring[(t->idle_head + t->nidle) % t->nslots] = s;
            t->nidle++;
            s->in_idle = true;
        }
        return;
    }
    slot_acquire(t, s, bench_now());
}

static void slot_send_acquire(struct bthread *t, struct slot *s, uint64_t now)
{
    struct bench *b = t->b;
    char key[BENCH_KEY_MAX];
    size_t klen = bench_key_name(b, s, key);
    s->seq++;
    s->req_id = (s->seq << BENCH_SLOT_BITS) | s->index;
    s->t_sent = now;
    s->state = SL_ACQ;
    b->drv->acquire(s->conn, s, key, klen);
}

static void slot_acquire(struct bthread *t, struct slot *s, uint64_t intended)
{
    struct bench *b = t->b;
    char key[BENCH_KEY_MAX];
    if (bench_key_next(b, t, s, key) == 0) {
        s->state = SL_DONE;
        return;
    }
    uint64_t now = bench_now();
    s->acq_seq = s->seq + 1;
    s->t_intended = intended;
    s->deadline = now + (uint64_t)b->wait_ms * NS_PER_MS;
    bench_check_acquire_sent(b, s);
    if (in_window(b, now))
        t->cnt.acquires++;
    s->probe_id = 0;
    s->probed = false;
    slot_send_acquire(t, s, now);
    if (b->fifo_probe && b->drv->probe) {
        s->seq++;
        s->probe_id = (s->seq << BENCH_SLOT_BITS) | s->index;
        b->drv->probe(s->conn, s);
    }
}

void bench_probe_answer(struct bconn *c, uint64_t id)
{
    uint32_t idx = (uint32_t)(id & (BENCH_DEPTH_MAX - 1u));
    if (idx >= c->nslots)
        return;
    struct slot *s = &c->slots[idx];
    if (s->probe_id != id || s->state != SL_ACQ)
        return; /* the grant came first: that wait is not judged */
    s->probe_id = 0;
    s->probed = true;
    bench_check_arrived(c->th->b, s);
}

static void slot_send_release(struct bthread *t, struct slot *s, uint64_t now)
{
    struct bench *b = t->b;
    if (s->conn->state != CS_READY) {
        s->state = SL_REL_PENDING;
        return;
    }
    char key[BENCH_KEY_MAX];
    size_t klen = bench_key_name(b, s, key);
    s->seq++;
    s->req_id = (s->seq << BENCH_SLOT_BITS) | s->index;
    s->t_rel_sent = now;
    s->state = SL_REL;
    b->drv->release(s->conn, s, key, klen);
}

/* The slot leaves its critical section: from here on another client may
 * hold the key without breaking mutual exclusion. */
static void slot_leave(struct bthread *t, struct slot *s, uint64_t now)
{
    bench_check_release(t->b, s);
    slot_send_release(t, s, now);
}

static void slot_on_acquire(struct bthread *t, struct slot *s, const struct bresp *r, uint64_t now)
{
    struct bench *b = t->b;
    bool win = in_window(b, now);
    switch (r->kind) {
        case BR_GRANT:
            s->t_granted = now;
            s->token = r->token;
            atomic_fetch_add_explicit(&b->grants_total, 1, memory_order_relaxed);
            if (now >= b->t_start && (now - b->t_start) / NS_PER_MS < b->timeline_len)
                atomic_fetch_add_explicit(&b->timeline[(now - b->t_start) / NS_PER_MS], 1,
                                          memory_order_relaxed);
            if (win) {
                t->cnt.grants++;
                bhist_record(&t->hist, now - s->t_intended);
            }
            bench_check_grant(b, t, s, now);
            if (b->scenario == SC_MEMORY) {
                t->cnt.mem_acquired++;
                slot_idle(t, s); /* keeps the key; goes on to the next one */
            } else if (b->hold_ms > 0) {
                s->state = SL_HOLD;
                heap_push(t, now + (uint64_t)b->hold_ms * NS_PER_MS, TM_HOLD, s, ++s->timer_gen);
            } else {
                slot_leave(t, s, now);
            }
            return;
        case BR_BUSY:
            if (b->drv->client_retry && b->wait_ms > 0) {
                if (now + NS_PER_MS < s->deadline) {
                    if (win)
                        t->cnt.retries++;
                    s->state = SL_RETRY;
                    heap_push(t, now + NS_PER_MS, TM_RETRY, s, ++s->timer_gen);
                    return;
                }
                if (win)
                    t->cnt.timeouts++;
            } else {
                if (win)
                    t->cnt.busy++;
                atomic_fetch_add_explicit(&b->busy_total, 1, memory_order_relaxed);
            }
            break;
        case BR_TIMEOUT:
            if (win)
                t->cnt.timeouts++;
            break;
        default:
            t->cnt.errors++;
            bench_conn_warn(s->conn, "unexpected answer (kind %d) to an acquire", (int)r->kind);
            break;
    }
    slot_idle(t, s);
}

static void slot_on_release(struct bthread *t, struct slot *s, const struct bresp *r, uint64_t now)
{
    struct bench *b = t->b;
    bool win = in_window(b, now);
    if (r->kind == BR_RELEASED) {
        if (win) {
            t->cnt.released++;
            bhist_record(&t->hist_rel, now - s->t_rel_sent);
        }
    } else if (r->kind == BR_NOTHELD) {
        if (win)
            t->cnt.notheld++;
    } else {
        t->cnt.errors++;
        bench_conn_warn(s->conn, "unexpected answer (kind %d) to a release", (int)r->kind);
    }
    slot_idle(t, s);
}

void bench_response(struct bconn *c, const struct bresp *r)
{
    struct bthread *t = c->th;
    struct slot *s = NULL;
    if (r->has_id) {
        uint32_t idx = (uint32_t)(r->id & (BENCH_DEPTH_MAX - 1u));
        if (idx < c->nslots && c->slots[idx].req_id == r->id &&
            (c->slots[idx].state == SL_ACQ || c->slots[idx].state == SL_REL))
            s = &c->slots[idx];
    } else {
        struct inflight *f = bench_inflight_head(c);
        if (f != NULL) {
            if (f->slot < c->nslots)
                s = &c->slots[f->slot];
            bench_inflight_pop(c);
        }
    }
    if (s == NULL || (s->state != SL_ACQ && s->state != SL_REL)) {
        t->cnt.errors++;
        bench_conn_warn(c, "a response matches no request in flight");
        return;
    }
    uint64_t now = bench_now();
    if (s->state == SL_ACQ)
        slot_on_acquire(t, s, r, now);
    else
        slot_on_release(t, s, r, now);
}

/* The connection died: decide each slot's fate. */
static void slot_conn_lost(struct bthread *t, struct slot *s)
{
    switch (s->state) {
        case SL_ACQ:
            t->cnt.indeterminate++;
            s->key_gen++;
            if (t->b->drv->lost)
                t->b->drv->lost(s->conn, s);
            s->state = SL_IDLE;
            break;
        case SL_REL:
            s->state = SL_REL_PENDING;
            break;
        case SL_RETRY:
            s->timer_gen++;
            s->state = SL_IDLE;
            break;
        default:
            break;
    }
}

static void conn_start_slots(struct bthread *t, struct bconn *c)
{
    uint64_t now = bench_now();
    for (uint32_t i = 0; i < c->nslots && c->state == CS_READY; i++) {
        struct slot *s = &c->slots[i];
        if (s->state == SL_REL_PENDING)
            slot_send_release(t, s, now);
        else if (s->state == SL_IDLE)
            slot_idle(t, s);
    }
}

/* ---- connections ---- */

static void conn_set_events(struct bconn *c)
{
    struct epoll_event ev = {.events = EPOLLIN | (c->want_write ? EPOLLOUT : 0u), .data.ptr = c};
    if (epoll_ctl(c->th->epfd, EPOLL_CTL_MOD, c->fd, &ev) != 0)
        bench_conn_warn(c, "epoll_ctl: %s", strerror(errno));
}

static void conn_down(struct bconn *c, bool error)
{
    struct bthread *t = c->th;
    struct bench *b = t->b;
    if (c->fd >= 0) {
        epoll_ctl(t->epfd, EPOLL_CTL_DEL, c->fd, NULL);
        close(c->fd);
        c->fd = -1;
    }
    tk_tls_free(c->tls);
    c->tls = NULL;
    c->tls_seen = false;
    if (c->state == CS_READY)
        atomic_fetch_sub(&b->ready_conns, 1);
    c->state = CS_DOWN;
    c->closing = false;
    c->in_len = 0;
    c->out_len = c->out_sent = 0;
    c->ring_head = c->ring_len = 0;
    c->want_write = false;
    for (uint32_t i = 0; i < c->nslots; i++)
        slot_conn_lost(t, &c->slots[i]);
    t->cnt.reconnects++;
    if (error) {
        t->cnt.conn_errors++;
        c->redirect_set = false;
        c->addr = (c->addr + 1) % b->naddrs;
    }
    if (atomic_load(&b->hard_stop))
        return;
    uint32_t delay = c->backoff_ms;
    c->backoff_ms = TK_MIN(TK_MAX(c->backoff_ms * 2u, 20u), BACKOFF_MS_MAX);
    heap_push(t, bench_now() + (uint64_t)delay * NS_PER_MS, TM_RECONNECT, c, ++c->timer_gen);
}

static void conn_connect(struct bconn *c)
{
    struct bthread *t = c->th;
    struct bench *b = t->b;
    struct sockaddr_in sa = c->redirect_set ? c->redirect : b->addrs[c->addr];
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0) {
        bench_conn_warn(c, "socket: %s", strerror(errno));
        conn_down(c, true);
        return;
    }
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    c->connects++;
    if (connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 && errno != EINPROGRESS) {
        conn_down(c, true);
        return;
    }
    c->state = CS_CONNECTING;
    c->want_write = true;
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.ptr = c};
    if (epoll_ctl(t->epfd, EPOLL_CTL_ADD, c->fd, &ev) != 0) {
        bench_conn_warn(c, "epoll_ctl add: %s", strerror(errno));
        conn_down(c, true);
        return;
    }
    heap_push(t, bench_now() + SETUP_TIMEOUT_NS, TM_SETUP, c, ++c->timer_gen);
}

void bench_ready(struct bconn *c)
{
    struct bench *b = c->th->b;
    TK_ASSERT(c->state == CS_SETUP);
    c->state = CS_READY;
    c->backoff_ms = 0;
    c->timer_gen++; /* cancels the setup timeout */
    atomic_fetch_add(&b->ready_conns, 1);
    if (atomic_load_explicit(&b->go, memory_order_acquire))
        conn_start_slots(c->th, c);
}

bool bench_loopback_addr(const char *text, size_t len, struct sockaddr_in *sa, const char **why)
{
    struct tk_addr a;
    struct in_addr ia;
    if (tk_addr_parse(text, len, &a, why) != TK_OK)
        return false;
    *why = "not a 127.x.x.x:port address (this tool sends to loopback only)";
    if (a.kind != TK_ADDR_IPV4 || inet_pton(AF_INET, a.host, &ia) != 1 ||
        (ntohl(ia.s_addr) >> 24) != 127)
        return false;
    *sa = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons(a.port), .sin_addr = ia};
    return true;
}

void bench_redirect(struct bconn *c, const char *addr, size_t len)
{
    struct bench *b = c->th->b;
    const char *why = NULL;
    c->th->cnt.redirects++;
    c->closing = true;
    if (addr != NULL && bench_loopback_addr(addr, len, &c->redirect, &why)) {
        c->redirect_set = true;
        return;
    }
    if (addr != NULL)
        bench_conn_warn(c, "ignoring the redirect to '%.*s': %s", (int)TK_MIN(len, 64u), addr, why);
    c->redirect_set = false;
    c->addr = (c->addr + 1) % b->naddrs;
}

/* A TLS failure: warned once per connection; a fatal one (certificates, a
 * plaintext server: nothing a retry can fix) is also kept for main.c,
 * which ends the run with it. */
static void conn_tls_fail(struct bconn *c, const char *why, bool fatal)
{
    struct bench *b = c->th->b;
    bench_conn_warn(c, "TLS: %s", why);
    if (fatal && !atomic_exchange(&b->tls_error_claimed, true)) {
        snprintf(b->tls_error, sizeof(b->tls_error), "%s", why);
        atomic_store_explicit(&b->tls_failed, true, memory_order_release);
    }
    conn_down(c, true);
}

/* TCP is up: start the TLS handshake (the ClientHello leaves with the
 * next flush). The name checked is --tls-server-name, else the address
 * dialled (an IP literal, matched against the certificate's IP SANs). */
static bool conn_tls_start(struct bconn *c)
{
    struct bench *b = c->th->b;
    char name[INET_ADDRSTRLEN] = "";
    struct sockaddr_in peer;
    socklen_t len = sizeof(peer);
    if (!b->tls_server_name[0] && getpeername(c->fd, (struct sockaddr *)&peer, &len) == 0)
        inet_ntop(AF_INET, &peer.sin_addr, name, sizeof(name));
    c->tls = tk_tls_new(b->tls_ctx, b->tls_server_name[0] ? b->tls_server_name : name);
    if (c->tls == NULL) {
        conn_tls_fail(c, "out of memory for a TLS connection", false);
        return false;
    }
    char none[1];
    size_t got;
    if (tk_tls_read(c->tls, none, 0, &got) != TK_OK) {
        conn_tls_fail(c, tk_tls_error(c->tls), false);
        return false;
    }
    conn_mark_dirty(c);
    return true;
}

/* Sends TLS's ciphertext: whatever the socket takes; the rest waits for
 * EPOLLOUT. The driver's plaintext was handed to TLS before. */
static void conn_flush_tls(struct bconn *c)
{
    if (c->out_len > c->out_sent) {
        if (tk_tls_write(c->tls, c->out + c->out_sent, c->out_len - c->out_sent) != TK_OK) {
            conn_tls_fail(c, tk_tls_error(c->tls), false);
            return;
        }
        c->out_len = c->out_sent = 0;
    }
    size_t n;
    const uint8_t *p = tk_tls_pending(c->tls, &n);
    while (n > 0) {
        ssize_t w = send(c->fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (w <= 0) {
            conn_down(c, true);
            return;
        }
        tk_tls_sent(c->tls, (size_t)w);
        p = tk_tls_pending(c->tls, &n);
    }
    if ((n > 0) != c->want_write) {
        c->want_write = n > 0;
        conn_set_events(c);
    }
}

static void conn_flush(struct bconn *c)
{
    if (c->tls != NULL) {
        if (c->fd >= 0 && c->state != CS_CONNECTING)
            conn_flush_tls(c);
        return;
    }
    while (c->fd >= 0 && c->out_sent < c->out_len) {
        ssize_t n = send(c->fd, c->out + c->out_sent, c->out_len - c->out_sent, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            conn_down(c, true);
            return;
        }
        c->out_sent += (size_t)n;
    }
    if (c->fd < 0 || c->state == CS_CONNECTING)
        return;
    if (c->out_sent == c->out_len) {
        c->out_len = c->out_sent = 0;
        if (c->want_write) {
            c->want_write = false;
            conn_set_events(c);
        }
    } else if (!c->want_write) {
        c->want_write = true;
        conn_set_events(c);
    }
}

static void flush_all(struct bthread *t)
{
    for (uint32_t i = 0; i < t->nflush; i++) {
        struct bconn *c = t->flush[i];
        c->dirty = false;
        if (c->fd >= 0 && c->state != CS_CONNECTING)
            conn_flush(c);
    }
    t->nflush = 0;
}

/* Lets the driver consume c->in. Returns false if the connection went
 * down meanwhile. */
static bool conn_consume(struct bthread *t, struct bconn *c)
{
    long used = t->b->drv->input(c);
    if (c->closing) {
        conn_down(c, false);
        return false;
    }
    if (used < 0) {
        t->cnt.errors++;
        conn_down(c, true);
        return false;
    }
    TK_ASSERT((size_t)used <= c->in_len);
    memmove(c->in, c->in + used, c->in_len - (size_t)used);
    c->in_len -= (size_t)used;
    return true;
}

/* The first bytes must open a TLS handshake record; a plaintext server
 * greets with its banner instead (an alert, 0x15, is a refusal). */
static bool conn_tls_first(struct bconn *c, const uint8_t *p, size_t n)
{
    c->tls_seen = true;
    if (p[0] == TLS_RECORD_HANDSHAKE)
        return true;
    char why[160], text[16];
    size_t m = 0;
    for (size_t i = 0; i < n && m < 11 && p[i] != '\n'; i++)
        text[m++] = p[i] >= 0x20 && p[i] < 0x7f ? (char)p[i] : '.';
    text[m] = '\0';
    if (p[0] == 0x15 && n >= 7)
        snprintf(why, sizeof(why), "the server refused the TLS handshake (alert %u)", p[6]);
    else
        snprintf(why, sizeof(why),
                 "the server does not speak TLS: it answered in plaintext (\"%s...\")", text);
    conn_tls_fail(c, why, true);
    return false;
}

static void conn_read_tls(struct bthread *t, struct bconn *c)
{
    struct bench *b = t->b;
    uint8_t buf[TLS_RECV_SIZE];
    for (int round = 0; round < 8 && c->fd >= 0; round++) {
        ssize_t n = recv(c->fd, buf, sizeof(buf), 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                conn_down(c, true);
            return;
        }
        if (n == 0) {
            if (c->state == CS_SETUP && !atomic_load(&b->hard_stop))
                bench_conn_warn(c,
                                "TLS: closed by the server during setup (a client "
                                "certificate required? --tls-cert/--tls-key)");
            conn_down(c, !atomic_load(&b->hard_stop));
            return;
        }
        if (!c->tls_seen && !conn_tls_first(c, buf, (size_t)n))
            return;
        int rc = tk_tls_feed(c->tls, buf, (size_t)n);
        while (rc == TK_OK) {
            size_t room = BENCH_IN_CAP - c->in_len, got = 0;
            if (room == 0) {
                bench_conn_warn(c, "a response does not fit in %u bytes", BENCH_IN_CAP);
                t->cnt.errors++;
                conn_down(c, true);
                return;
            }
            rc = tk_tls_read(c->tls, c->in + c->in_len, room, &got);
            if (rc != TK_OK || got == 0)
                break;
            c->in_len += got;
            if (!conn_consume(t, c))
                return;
        }
        if (rc == TK_ECLOSED) {
            conn_down(c, !atomic_load(&b->hard_stop));
            return;
        }
        if (rc != TK_OK) {
            conn_tls_fail(c, tk_tls_error(c->tls), rc == TK_EAUTH);
            return;
        }
        conn_mark_dirty(c); /* handshake messages, if any */
        if ((size_t)n < sizeof(buf))
            return;
    }
}

static void conn_read(struct bthread *t, struct bconn *c)
{
    struct bench *b = t->b;
    if (c->tls != NULL) {
        conn_read_tls(t, c);
        return;
    }
    for (int round = 0; round < 8 && c->fd >= 0; round++) {
        size_t room = BENCH_IN_CAP - c->in_len;
        if (room == 0) {
            bench_conn_warn(c, "a response does not fit in %u bytes", BENCH_IN_CAP);
            t->cnt.errors++;
            conn_down(c, true);
            return;
        }
        ssize_t n = recv(c->fd, c->in + c->in_len, room, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                conn_down(c, true);
            return;
        }
        if (n == 0) {
            conn_down(c, !atomic_load(&b->hard_stop));
            return;
        }
        c->in_len += (size_t)n;
        if (!conn_consume(t, c))
            return;
        if ((size_t)n < room)
            return;
    }
}

static void conn_event(struct bthread *t, struct bconn *c, uint32_t ev)
{
    if (c->fd < 0)
        return;
    if (c->state == CS_CONNECTING) {
        if (!(ev & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
            return;
        int err = 0;
        socklen_t len = sizeof(err);
        if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
            conn_down(c, true);
            return;
        }
        c->state = CS_SETUP;
        c->want_write = false;
        conn_set_events(c);
        if (t->b->tls_ctx != NULL && !conn_tls_start(c))
            return;
        t->b->drv->open(c);
        return;
    }
    if (ev & EPOLLOUT)
        conn_flush(c);
    if (c->fd >= 0 && (ev & (EPOLLIN | EPOLLERR | EPOLLHUP)))
        conn_read(t, c);
}

/* ---- timers ---- */

static void timer_fire(struct bthread *t, const struct timer_ent *e, uint64_t now)
{
    struct bench *b = t->b;
    if (e->kind == TM_RECONNECT || e->kind == TM_SETUP) {
        struct bconn *c = e->obj;
        if (e->gen != c->timer_gen)
            return;
        if (e->kind == TM_RECONNECT && c->state == CS_DOWN)
            conn_connect(c);
        else if (e->kind == TM_SETUP && (c->state == CS_CONNECTING || c->state == CS_SETUP)) {
            if (b->tls_ctx == NULL && b->drv == &bench_drv_ticketing && c->state == CS_SETUP)
                /* A TLS port waits for our ClientHello as we wait for its banner. */
                bench_conn_warn(c, "connection setup timed out (a TLS port? then --tls-ca)");
            else
                bench_conn_warn(c, "connection setup timed out");
            conn_down(c, true);
        }
        return;
    }
    struct slot *s = e->obj;
    if (e->gen != s->timer_gen)
        return;
    if (e->kind == TM_HOLD && s->state == SL_HOLD) {
        slot_leave(t, s, now);
    } else if (e->kind == TM_RETRY && s->state == SL_RETRY) {
        if (s->conn->state != CS_READY) {
            slot_idle(t, s);
        } else if (now >= s->deadline) {
            if (in_window(b, now))
                t->cnt.timeouts++;
            slot_idle(t, s);
        } else {
            slot_send_acquire(t, s, now);
        }
    }
}

/* ---- open loop ---- */

static void openloop_dispatch(struct bthread *t, uint64_t now)
{
    struct bench *b = t->b;
    while (!t->stopping && t->next_arrival <= now) {
        if (t->bl_len < BENCH_BACKLOG_MAX) {
            t->backlog[(t->bl_head + t->bl_len) % BENCH_BACKLOG_MAX] = t->next_arrival;
            t->bl_len++;
        } else if (in_window(b, t->next_arrival)) {
            t->cnt.dropped++;
        }
        t->next_arrival += t->arrival_ns;
    }
    while (t->bl_len > 0 && t->nidle > 0) {
        struct slot *s = t->idle_ring[t->idle_head];
        t->idle_head = (t->idle_head + 1) % t->nslots;
        t->nidle--;
        s->in_idle = false;
        if (s->state != SL_IDLE || s->conn->state != CS_READY)
            continue;
        uint64_t at = t->backlog[t->bl_head];
        t->bl_head = (t->bl_head + 1) % BENCH_BACKLOG_MAX;
        t->bl_len--;
        slot_acquire(t, s, at);
    }
}

/* ---- thread ---- */

int bench_thread_init(struct bthread *t)
{
    struct bench *b = t->b;
    t->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (t->epfd < 0)
        return -1;
    bhist_init(&t->hist);
    bhist_init(&t->hist_rel);
    tk_prng_seed(&t->prng, (0x9e3779b97f4a7c15ull * ((uint64_t)t->index + 1u)) ^ bench_now());
    t->flush = calloc(t->nconns ? t->nconns : 1, sizeof(*t->flush));
    t->idle_ring = calloc(t->nslots ? t->nslots : 1, sizeof(*t->idle_ring));
    if (t->flush == NULL || t->idle_ring == NULL)
        return -1;
    if (b->rate > 0) {
        t->backlog = malloc(BENCH_BACKLOG_MAX * sizeof(*t->backlog));
        if (t->backlog == NULL)
            return -1;
        t->arrival_ns = (uint64_t)(1e9 * b->nthreads / b->rate);
        if (t->arrival_ns == 0)
            t->arrival_ns = 1;
    }
    for (uint32_t i = 0; i < t->nconns; i++) {
        struct bconn *c = &t->conns[i];
        c->in = malloc(BENCH_IN_CAP);
        c->ring_cap = b->drv->ordered ? c->nslots * 3u + 16u : 1u;
        c->ring = calloc(c->ring_cap, sizeof(*c->ring));
        if (c->in == NULL || c->ring == NULL)
            return -1;
    }
    return 0;
}

static void thread_count_active(struct bthread *t)
{
    uint64_t n = 0;
    for (uint32_t i = 0; i < t->nconns; i++)
        for (uint32_t j = 0; j < t->conns[i].nslots; j++) {
            enum slot_state st = t->conns[i].slots[j].state;
            n += st != SL_IDLE && st != SL_DONE;
        }
    atomic_store(&t->active, n);
}

void *bench_thread_main(void *arg)
{
    struct bthread *t = arg;
    struct bench *b = t->b;
    struct epoll_event evs[EVENTS_MAX];
    bool started = false;
    uint64_t next_scan = 0;
    for (uint32_t i = 0; i < t->nconns; i++)
        conn_connect(&t->conns[i]);
    flush_all(t);
    for (;;) {
        uint64_t now = bench_now();
        if (atomic_load(&b->hard_stop))
            break;
        if (!started && atomic_load_explicit(&b->go, memory_order_acquire)) {
            started = true;
            t->next_arrival = b->t_start + t->arrival_ns * (uint64_t)t->index / b->nthreads;
            for (uint32_t i = 0; i < t->nconns; i++)
                if (t->conns[i].state == CS_READY)
                    conn_start_slots(t, &t->conns[i]);
        }
        if (started && !t->stopping && atomic_load(&b->stop))
            t->stopping = true;
        if (t->stopping && now >= next_scan) {
            thread_count_active(t);
            next_scan = now + 20 * NS_PER_MS;
        }
        struct timer_ent te;
        while (heap_pop_due(t, now, &te))
            timer_fire(t, &te, now);
        if (started && b->rate > 0)
            openloop_dispatch(t, now);
        flush_all(t);

        uint64_t next = now + (started ? 20 : 2) * NS_PER_MS;
        if (t->heap_len > 0 && t->heap[0].at < next)
            next = t->heap[0].at;
        if (started && b->rate > 0 && !t->stopping && t->next_arrival < next)
            next = t->next_arrival;
        uint64_t wait = next > now ? next - now : 0;
        struct timespec ts = {.tv_sec = (time_t)(wait / 1000000000ull),
                              .tv_nsec = (long)(wait % 1000000000ull)};
        int n = epoll_pwait2(t->epfd, evs, EVENTS_MAX, &ts, NULL);
        for (int i = 0; i < n; i++)
            conn_event(t, evs[i].data.ptr, evs[i].events);
        flush_all(t);
    }
    for (uint32_t i = 0; i < t->nconns; i++) {
        struct bconn *c = &t->conns[i];
        if (c->fd >= 0) {
            close(c->fd);
            c->fd = -1;
        }
        tk_tls_free(c->tls);
        c->tls = NULL;
    }
    tk_tls_thread_done(); /* wolfSSL keeps a cache per thread */
    return NULL;
}

void bench_thread_free(struct bthread *t)
{
    for (uint32_t i = 0; i < t->nconns; i++) {
        struct bconn *c = &t->conns[i];
        if (t->b->drv->free)
            t->b->drv->free(c);
        free(c->in);
        free(c->out);
        free(c->ring);
    }
    free(t->heap);
    free(t->flush);
    free(t->idle_ring);
    free(t->backlog);
    if (t->epfd >= 0)
        close(t->epfd);
}
