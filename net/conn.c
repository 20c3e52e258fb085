/* Client connections of a worker: accept, TLS when configured, the
 * handshake (SPEC 2), line framing and parsing (SPEC 3-5), batched sends,
 * pauses and closing.
 *
 * Connection life: accept -> [TLS handshake] -> banner -> AUTH checked ->
 * OK (+ M and close when not leader) -> request lines -> close. The
 * handshake deadline runs from accept, so it covers TLS and AUTH alike.
 *
 * TLS (core/tls.h, wolfSSL over memory) sits where bytes meet the socket
 * and nowhere else: received ciphertext goes to tk_tls_feed() and the
 * plaintext tk_tls_read() yields is appended to c->in (tls_open); the
 * plaintext a round wrote to c->out is encrypted in one tk_tls_write()
 * when it moves to c->snd, together with any handshake messages waiting
 * in tk_tls_pending() (tls_seal). The parser and the formatters see only
 * plaintext. The banner is written at accept as without TLS; core/tls
 * holds it until the TLS handshake is done. Without TLS both steps are
 * skipped and the bytes take the same path as ever.
 *
 * Closing: no more input is parsed, pending output is still sent, then the
 * multishot recv is cancelled and the slot is freed once the kernel holds
 * no reference to it (no recv, send or cancel outstanding).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "net/worker.h"

#define IN_CAP_START 4096
#define IN_PAUSE_BYTES 65536         /* paused connection: stop receiving beyond this */
#define IN_CAP_MAX (1u << 20)        /* a paused connection's input never exceeds this */
#define OUT_PAUSE_BYTES (256u << 10) /* unsent output that pauses reading */
#define TLS_READ_CHUNK 16384u        /* room made in c->in per tk_tls_read (one record) */
#define TLS_LOG_PER_SEC 10           /* TLS failure lines per worker and second */

static void buf_reserve(struct buf *b, uint32_t extra)
{
    if (b->len + extra <= b->cap)
        return;
    uint32_t cap = b->cap ? b->cap : IN_CAP_START;
    while (cap < b->len + extra)
        cap *= 2;
    char *p = realloc(b->p, cap);
    TK_ASSERT(p != NULL);
    b->p = p;
    b->cap = cap;
}

static void buf_free(struct buf *b)
{
    free(b->p);
    memset(b, 0, sizeof(*b));
}

/* Ciphertext waiting in the connection's TLS state (0 without TLS). */
static size_t tls_pending_len(const struct conn *c)
{
    size_t n = 0;
    if (c->tls)
        tk_tls_pending(c->tls, &n);
    return n;
}

/* Output not yet handed to the kernel, plaintext or ciphertext. */
static bool conn_has_output(const struct conn *c)
{
    return c->out.len > 0 || tls_pending_len(c) > 0;
}

/* The peer is gone (or the stream broke): what was left to say is dropped. */
static void conn_drop_output(struct conn *c)
{
    c->out.len = 0;
    size_t n = tls_pending_len(c);
    if (n)
        tk_tls_sent(c->tls, n);
}

static void arm_recv(struct tk_worker *w, struct conn *c)
{
    struct io_uring_sqe *sqe = worker_sqe(w);
    io_uring_prep_recv_multishot(sqe, c->fd, NULL, 0, 0);
    sqe->flags |= IOSQE_BUFFER_SELECT;
    sqe->buf_group = 0;
    io_uring_sqe_set_data64(sqe, tk_ud(OP_RECV, c->slot, c->gen));
    c->recv_armed = true;
}

/* While a pause keeps the recv stopped, nothing would notice the client
 * resetting or closing: its waiters would stay queued until their wait ran
 * out. A one-shot poll for POLLRDHUP (POLLHUP and POLLERR come with it)
 * watches instead; data arriving does not wake it. */
static void watch_paused(struct tk_worker *w, struct conn *c)
{
    if (c->state != CONN_READY || !c->recv_stopped || c->recv_armed || c->cancel_inflight ||
        c->poll_armed)
        return;
    struct io_uring_sqe *sqe = worker_sqe(w);
    io_uring_prep_poll_add(sqe, c->fd, POLLRDHUP);
    io_uring_sqe_set_data64(sqe, tk_ud(OP_POLL, c->slot, c->gen));
    c->poll_armed = true;
}

static void cancel_recv(struct tk_worker *w, struct conn *c)
{
    if (!c->recv_armed || c->cancel_inflight)
        return;
    struct io_uring_sqe *sqe = worker_sqe(w);
    io_uring_prep_cancel64(sqe, tk_ud(OP_RECV, c->slot, c->gen), 0);
    io_uring_sqe_set_data64(sqe, tk_ud(OP_CANCEL, c->slot, c->gen));
    c->cancel_inflight = true;
}

struct conn *conn_get(struct tk_worker *w, uint32_t slot, uint32_t gen)
{
    if (slot >= w->nconns_alloc || !w->conns[slot])
        return NULL;
    struct conn *c = w->conns[slot];
    return (c->gen == gen && c->state != CONN_FREE) ? c : NULL;
}

static void mark_dirty(struct tk_worker *w, struct conn *c)
{
    if (!c->dirty) {
        c->dirty = true;
        c->next_dirty = w->dirty;
        w->dirty = c;
    }
}

static void mark_resume(struct tk_worker *w, struct conn *c)
{
    if (!c->resume) {
        c->resume = true;
        c->next_resume = w->resume;
        w->resume = c;
    }
}

/* The TLS seam: plaintext out of the connection goes through here. */
static void conn_stream_out(struct tk_worker *w, struct conn *c, const char *p, size_t n)
{
    buf_reserve(&c->out, (uint32_t)n);
    memcpy(c->out.p + c->out.len, p, n);
    c->out.len += (uint32_t)n;
    mark_dirty(w, c);
}

static void conn_write_error(struct tk_worker *w, struct conn *c, enum tk_reason r)
{
    char line[64];
    size_t n = tk_proto_fmt_error(line, sizeof(line), false, 0, r);
    conn_stream_out(w, c, line, n);
}

static void conn_free_slot(struct tk_worker *w, struct conn *c)
{
    TK_ASSERT(!c->recv_armed);
    TK_ASSERT(!c->send_inflight);
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    buf_free(&c->in);
    buf_free(&c->out);
    buf_free(&c->snd);
    tk_tls_free(c->tls); /* drops its reference to the context it began with */
    c->tls = NULL;
    c->state = CONN_FREE;
    c->gen++;
    if (c->gen == 0)
        c->gen = 1;
    w->free_slots[w->nfree++] = c->slot;
    atomic_fetch_sub_explicit(&w->s->conns, 1, memory_order_relaxed);
    w->stat[TK_WSTAT_conns_open]--;
}

/* Finishes a close once the kernel holds no more references to it. */
static void conn_maybe_release(struct tk_worker *w, struct conn *c)
{
    if (c->state != CONN_CLOSING || c->send_inflight || c->dirty)
        return;
    if (!conn_has_output(c) && c->recv_armed) {
        /* Everything said: stop the multishot recv; its final CQE releases. */
        shutdown(c->fd, SHUT_RDWR);
        cancel_recv(w, c);
        return;
    }
    if (c->poll_armed && !c->poll_removing) {
        struct io_uring_sqe *sqe = worker_sqe(w);
        io_uring_prep_poll_remove(sqe, tk_ud(OP_POLL, c->slot, c->gen));
        io_uring_sqe_set_data64(sqe, tk_ud(OP_CANCEL, 0xffffff, 0)); /* nothing to do */
        c->poll_removing = true;
    }
    if (!c->recv_armed && !c->cancel_inflight && !c->poll_armed)
        conn_free_slot(w, c);
}

/* Starts closing: no more input is read; pending output is still sent. */
void conn_close(struct tk_worker *w, struct conn *c)
{
    if (c->state == CONN_CLOSING || c->state == CONN_FREE)
        return;
    bool was_ready = c->state == CONN_READY;
    if (c->state == CONN_HANDSHAKE)
        w->handshaking--;
    c->state = CONN_CLOSING;
    c->in.len = 0;
    if (was_ready)
        tk_shard_client_closed(w->shard, tk_client_ref(w->idx, c->slot, c->gen));
    if (!conn_has_output(c))
        cancel_recv(w, c);
    mark_dirty(w, c); /* flush decides when to release */
}

static void conn_error(struct tk_worker *w, struct conn *c, enum tk_reason r)
{
    conn_write_error(w, c, r);
    w->stat[TK_WSTAT_conn_errors]++;
    conn_close(w, c);
}

void conn_moved(struct tk_worker *w, struct conn *c)
{
    char line[TK_ADDR_MAX + 8];
    size_t n = tk_proto_fmt_moved(line, sizeof(line), w->leader_addr[0] ? w->leader_addr : NULL);
    conn_stream_out(w, c, line, n);
    w->stat[TK_WSTAT_moved]++;
    conn_close(w, c);
}

/* ---- TLS ----------------------------------------------------------------- */

struct tk_tls_ctx *tk_server_tls_ctx(struct tk_server *s)
{
    if (!s->tls)
        return NULL;
    /* Under the lock, so a reload cannot release the context between the
     * load of the pointer and the new reference. */
    pthread_mutex_lock(&s->tls_lock);
    struct tk_tls_ctx *ctx = s->tls_ctx;
    TK_ASSERT(ctx != NULL);
    tk_tls_ctx_ref(ctx);
    pthread_mutex_unlock(&s->tls_lock);
    return ctx;
}

void conn_tls_thread_end(void)
{
    /* wolfSSL keeps an ECC point cache per thread, filled by the TLS
     * handshakes this worker ran, that only this frees. */
    tk_tls_thread_done();
}

/* "host:port" of the connection's peer, for log lines. */
static const char *peer_name(int fd, char *buf, size_t cap)
{
    struct sockaddr_storage a;
    socklen_t len = sizeof(a);
    char host[INET6_ADDRSTRLEN];
    if (getpeername(fd, (struct sockaddr *)&a, &len) != 0) {
        snprintf(buf, cap, "an unknown address");
    } else if (a.ss_family == AF_INET) {
        const struct sockaddr_in *v4 = (const struct sockaddr_in *)&a;
        inet_ntop(AF_INET, &v4->sin_addr, host, sizeof(host));
        snprintf(buf, cap, "%s:%u", host, ntohs(v4->sin_port));
    } else if (a.ss_family == AF_INET6) {
        const struct sockaddr_in6 *v6 = (const struct sockaddr_in6 *)&a;
        inet_ntop(AF_INET6, &v6->sin6_addr, host, sizeof(host));
        snprintf(buf, cap, "[%s]:%u", host, ntohs(v6->sin6_port));
    } else {
        snprintf(buf, cap, "an address of family %d", a.ss_family);
    }
    return buf;
}

/* The connection's TLS failed (a bad or missing client certificate, a
 * plaintext client, a corrupt record): close it, sending only what TLS
 * itself has pending (an alert). Counted always, logged at most
 * TLS_LOG_PER_SEC times a second per worker. */
static void tls_failed(struct tk_worker *w, struct conn *c)
{
    c->out.len = 0; /* plaintext can no longer be sent */
    if (c->state != CONN_HANDSHAKE && c->state != CONN_READY)
        return;
    w->stat[TK_WSTAT_tls_failures]++;
    if (w->now_us - w->tls_log_window_us >= 1000000u) {
        if (w->tls_unlogged)
            tk_log(TK_LOG_WARN, "TLS: %u more failed client connections were not logged",
                   w->tls_unlogged);
        w->tls_log_window_us = w->now_us;
        w->tls_logged = 0;
        w->tls_unlogged = 0;
    }
    if (w->tls_logged < TLS_LOG_PER_SEC) {
        char peer[INET6_ADDRSTRLEN + 16];
        tk_log(TK_LOG_WARN, "TLS: client %s closed: %s", peer_name(c->fd, peer, sizeof(peer)),
               tk_tls_error(c->tls));
        w->tls_logged++;
    } else {
        w->tls_unlogged++;
    }
    conn_close(w, c);
}

/* Gives a new connection its TLS state, on the current context. */
static int tls_start(struct tk_worker *w, struct conn *c)
{
    TK_ASSERT(c->tls == NULL);
    struct tk_tls_ctx *ctx = tk_server_tls_ctx(w->s);
    c->tls = tk_tls_new(ctx, NULL); /* takes a reference of its own */
    tk_tls_ctx_unref(ctx);
    return c->tls ? TK_OK : TK_ENOMEM;
}

/* Received ciphertext in; every byte of plaintext it completes out into
 * c->in, so nothing waits inside TLS for a recv that a pause may stop.
 * c->in is bounded as on the plaintext path (IN_CAP_MAX, overshot by one
 * record at most before the overload error). Handshake messages (and
 * alerts) the input produced are flushed at the end of the round. */
static void tls_open(struct tk_worker *w, struct conn *c, const char *data, size_t n)
{
    int rc = tk_tls_feed(c->tls, data, n);
    while (rc == TK_OK) {
        if (c->in.len > IN_CAP_MAX) {
            conn_error(w, c, TK_REASON_OVERLOAD);
            break;
        }
        buf_reserve(&c->in, TLS_READ_CHUNK);
        size_t got = 0;
        rc = tk_tls_read(c->tls, c->in.p + c->in.len, c->in.cap - c->in.len, &got);
        if (got == 0)
            break;
        c->in.len += (uint32_t)got;
    }
    if (rc == TK_ECLOSED) { /* close_notify: as an end of stream */
        conn_close(w, c);
        conn_drop_output(c);
    } else if (rc != TK_OK) {
        tls_failed(w, c);
    }
    if (tls_pending_len(c) > 0)
        mark_dirty(w, c);
}

/* Moves output to c->snd, which is empty: the round's plaintext is
 * encrypted in one call (records of up to 16 KiB rather than one per
 * line), then all ciphertext pending is taken, handshake messages
 * included. A copy, because TLS appends to its buffer while a send of
 * the previous bytes is still in flight. */
static void tls_seal(struct tk_worker *w, struct conn *c)
{
    TK_ASSERT(c->snd.len == 0);
    if (c->out.len > 0) {
        uint32_t len = c->out.len;
        c->out.len = 0;
        if (tk_tls_write(c->tls, c->out.p, len) != TK_OK)
            tls_failed(w, c);
    }
    size_t n;
    const uint8_t *p = tk_tls_pending(c->tls, &n);
    if (n == 0)
        return;
    TK_ASSERT(n < UINT32_MAX / 2);
    buf_reserve(&c->snd, (uint32_t)n);
    memcpy(c->snd.p, p, n);
    c->snd.len = (uint32_t)n;
    c->snd_off = 0;
    tk_tls_sent(c->tls, n);
}

static bool conn_paused(const struct tk_worker *w, const struct conn *c)
{
    return c->inflight >= w->s->opt.max_inflight ||
           c->out.len + (c->snd.len - c->snd_off) >= OUT_PAUSE_BYTES;
}

/* Drops deadlines of connections that finished or closed, keeping order. */
static void hs_compact(struct tk_worker *w)
{
    uint32_t kept = 0;
    for (uint32_t i = 0; i < w->hs_len; i++) {
        struct hs_deadline d = w->hs[(w->hs_head + i) % w->hs_cap];
        struct conn *c = conn_get(w, d.slot, d.gen);
        if (c && c->state == CONN_HANDSHAKE)
            w->hs[(w->hs_head + kept++) % w->hs_cap] = d;
    }
    w->hs_len = kept;
}

static void hs_push(struct tk_worker *w, struct conn *c)
{
    if (w->hs_len == w->hs_cap)
        hs_compact(w);
    TK_ASSERT(w->hs_len < w->hs_cap);
    struct hs_deadline *d = &w->hs[(w->hs_head + w->hs_len) % w->hs_cap];
    d->slot = c->slot;
    d->gen = c->gen;
    d->at_us = w->now_us + (uint64_t)w->s->opt.handshake_ms * 1000u;
    w->hs_len++;
}

/* Unauthenticated connections have a budget of their own (this worker's
 * share of --max-handshakes), below the connection bound: when it is full,
 * the oldest one still in its handshake goes, so a flood of sockets that
 * never authenticate can neither take the slots of authenticated clients
 * nor hold the handshake slots against new ones. */
static void handshake_budget(struct tk_worker *w)
{
    uint32_t budget = TK_MAX(w->s->opt.max_handshakes / w->s->nworkers, 1u);
    for (uint32_t i = 0; i < w->hs_len && w->handshaking >= budget; i++) {
        struct hs_deadline *d = &w->hs[(w->hs_head + i) % w->hs_cap];
        struct conn *c = conn_get(w, d->slot, d->gen);
        if (c && c->state == CONN_HANDSHAKE) {
            w->stat[TK_WSTAT_handshakes_evicted]++;
            conn_close(w, c);
        }
    }
}

void conn_on_accept(struct tk_worker *w, int fd)
{
    struct tk_server *s = w->s;
    handshake_budget(w);
    uint64_t n = atomic_fetch_add_explicit(&s->conns, 1, memory_order_relaxed) + 1;
    if (n > s->opt.max_connections || w->nfree == 0) {
        atomic_fetch_sub_explicit(&s->conns, 1, memory_order_relaxed);
        static const char overload[] = "E - overload\n";
        ssize_t r = send(fd, overload, sizeof(overload) - 1, MSG_DONTWAIT | MSG_NOSIGNAL);
        (void)r;
        close(fd);
        w->stat[TK_WSTAT_conns_rejected]++;
        return;
    }
    uint32_t slot = w->free_slots[--w->nfree];
    struct conn *c = w->conns[slot];
    if (!c) {
        c = calloc(1, sizeof(*c));
        TK_ASSERT(c != NULL);
        c->slot = slot;
        c->gen = 1;
        w->conns[slot] = c;
    }
    TK_ASSERT(c->state == CONN_FREE);
    c->fd = fd;
    c->state = CONN_HANDSHAKE;
    w->handshaking++;
    c->inflight = 0;
    c->snd_off = 0;
    c->recv_stopped = false;
    TK_ASSERT(!c->poll_armed); /* a slot is freed only once its poll completed */
    c->poll_removing = false;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    w->stat[TK_WSTAT_conns_accepted]++;
    w->stat[TK_WSTAT_conns_open]++;
    if (s->tls && tls_start(w, c) != TK_OK) {
        tk_log(TK_LOG_ERROR, "out of memory for a TLS connection; refusing it");
        conn_close(w, c);
        return;
    }
    char snonce[TK_AUTH_HEX_LEN + 1];
    if (tk_auth_nonce(snonce) != TK_OK) {
        tk_log(TK_LOG_ERROR, "CSPRNG failed; refusing connection");
        conn_close(w, c);
        return;
    }
    char line[TK_HS_LINE_MAX];
    size_t len = tk_hs_client_listen(&c->hs, s->client_secret, s->client_secret_len, snonce, line,
                                     sizeof(line));
    conn_stream_out(w, c, line, len);
    hs_push(w, c);
    arm_recv(w, c);
}

/* The shard owning the key could not take a request: it stepped down (M)
 * or a bound of its own was hit (E - overload). */
void conn_refused(struct tk_worker *w, uint64_t client, uint8_t reason)
{
    struct conn *c = conn_get(w, tk_client_slot(client), tk_client_gen(client));
    if (!c || c->state != CONN_READY)
        return;
    if (reason == TK_REFUSE_MOVED)
        conn_moved(w, c);
    else
        conn_overload(w, c);
}

void conn_deliver(struct tk_worker *w, const struct tk_msg_reply *r)
{
    struct conn *c = conn_get(w, tk_client_slot(r->client), tk_client_gen(r->client));
    if (!c || c->state != CONN_READY)
        return; /* the connection closed meanwhile; its outcome is Indeterminate */
    char line[160];
    size_t n;
    switch (r->type) {
        case 'G': {
            n = tk_proto_fmt_grant(line, sizeof(line), r->id, r->token);
            w->stat[TK_WSTAT_res_granted]++;
            /* arrived_us is the round in which this worker (the
             * connection's) read the request; the G leaves in this round,
             * whose clock (read before the apply) is w->now_us: no clock
             * read per grant. */
            uint64_t now = w->now_us;
            tk_hist_add(&w->s->acquire_hist[w->idx], tk_hist_latency_us, tk_hist_latency_n,
                        now > r->arrived_us ? now - r->arrived_us : 0);
            break;
        }
        case 'Q':
            n = tk_proto_fmt_query(line, sizeof(line), r->id, r->owner, r->owner_len, r->token,
                                   r->waiters);
            w->stat[TK_WSTAT_res_query]++;
            break;
        default:
            n = tk_proto_fmt_id(line, sizeof(line), r->type, r->id);
            w->stat[r->type == 'T'   ? TK_WSTAT_res_timeout
                    : r->type == 'B' ? TK_WSTAT_res_busy
                    : r->type == 'R' ? TK_WSTAT_res_released
                                     : TK_WSTAT_res_not_held]++;
            break;
    }
    TK_ASSERT(n > 0);
    TK_ASSERT(c->inflight > 0);
    conn_stream_out(w, c, line, n);
    bool was_paused = conn_paused(w, c);
    c->inflight--;
    if (was_paused && !conn_paused(w, c))
        mark_resume(w, c);
}

static void handle_request_line(struct tk_worker *w, struct conn *c, const char *line, size_t len)
{
    struct tk_request req;
    char out[64];
    enum tk_parse_status st = tk_proto_parse(line, len, &req);
    if (st == TK_PARSE_FATAL) {
        w->stat[TK_WSTAT_req_invalid]++;
        conn_error(w, c, TK_REASON_SYNTAX);
        return;
    }
    if (st == TK_PARSE_REJECT) {
        w->stat[TK_WSTAT_req_invalid]++;
        size_t n = tk_proto_fmt_error(out, sizeof(out), true, req.id, req.reason);
        conn_stream_out(w, c, out, n);
        return;
    }
    if (req.type == 'P') {
        w->stat[TK_WSTAT_req_ping]++;
        size_t n = tk_proto_fmt_id(out, sizeof(out), 'P', req.id);
        conn_stream_out(w, c, out, n);
        return;
    }
    w->stat[req.type == 'A'   ? TK_WSTAT_req_acquire
            : req.type == 'R' ? TK_WSTAT_req_release
                              : TK_WSTAT_req_query]++;
    struct tk_msg_req lr = {
        .type = req.type,
        .client = tk_client_ref(w->idx, c->slot, c->gen),
        .id = req.id,
        .key = req.key,
        .key_len = (uint8_t)req.key_len,
        .owner = req.owner,
        .owner_len = (uint8_t)req.owner_len,
        .lease_ms = req.lease_ms,
        .wait_ms = req.wait_ms,
        .token = req.token,
        .arrived_us = w->now_us,
    };
    c->inflight++;
    if (c->inflight == w->s->opt.max_inflight)
        w->stat[TK_WSTAT_inflight_paused]++;
    tk_shard_request(w->shard, w->now_us, &lr);
}

/* Failed logins on the client port, from every worker: a few lines a
 * second at most, however many arrive. */
static struct tk_log_limit auth_log = TK_LOG_LIMIT_INIT;

static void auth_failed(struct tk_worker *w, struct conn *c, const char *why)
{
    char who[TK_ADDR_MAX];
    w->stat[TK_WSTAT_auth_failures]++;
    tk_log_limited(&auth_log, TK_LOG_WARN, "auth failed from %s (client port): %s",
                   peer_name(c->fd, who, sizeof(who)), why);
    conn_error(w, c, TK_REASON_AUTH);
}

/* One handshake line, through core/handshake.c: the OK carries what
 * this node is now. */
static void handle_auth_line(struct tk_worker *w, struct conn *c, const char *line, size_t len)
{
    struct tk_server *s = w->s;
    c->hs.node_id = s->node_id;
    c->hs.domain[0] = atomic_load(&s->domain_lo);
    c->hs.domain[1] = atomic_load(&s->domain_hi);
    char ok[TK_HS_LINE_MAX];
    size_t n = 0;
    if (tk_hs_line(&c->hs, line, len, ok, sizeof(ok), &n) != TK_HS_DONE) {
        auth_failed(w, c, tk_hs_why(&c->hs));
        return;
    }
    conn_stream_out(w, c, ok, n);
    if (!w->leader) {
        conn_moved(w, c);
        return;
    }
    w->handshaking--;
    c->state = CONN_READY;
}

/* Parses complete lines from the connection's input until it runs out,
 * pauses (in-flight or output bound) or closes. */
static void conn_parse(struct tk_worker *w, struct conn *c)
{
    uint32_t pos = 0;
    while (pos < c->in.len && (c->state == CONN_HANDSHAKE || c->state == CONN_READY)) {
        if (c->state == CONN_READY && (conn_paused(w, c) || w->backlogged))
            break;
        char *start = c->in.p + pos;
        uint32_t avail = c->in.len - pos;
        char *nl = memchr(start, '\n', TK_MIN(avail, (uint32_t)TK_LINE_MAX));
        if (!nl) {
            if (avail >= TK_LINE_MAX)
                conn_error(w, c, TK_REASON_TOOLONG);
            break;
        }
        size_t len = (size_t)(nl - start);
        pos += (uint32_t)len + 1;
        if (c->state == CONN_HANDSHAKE)
            handle_auth_line(w, c, start, len);
        else
            handle_request_line(w, c, start, len);
    }
    if (c->state == CONN_CLOSING) {
        c->in.len = 0;
        return;
    }
    if (pos > 0) {
        memmove(c->in.p, c->in.p + pos, c->in.len - pos);
        c->in.len -= pos;
    }
    /* A paused connection keeps its recv only while its backlog is small. */
    if (c->in.len >= IN_PAUSE_BYTES && c->recv_armed) {
        c->recv_stopped = true;
        cancel_recv(w, c);
    }
}

/* Restarts a recv that a pause stopped, once the backlog has shrunk and the
 * cancelled recv has fully completed. */
static void conn_rearm(struct tk_worker *w, struct conn *c)
{
    if (c->state == CONN_READY && c->recv_stopped && c->in.len < IN_PAUSE_BYTES && !c->recv_armed &&
        !c->cancel_inflight && !conn_paused(w, c)) {
        c->recv_stopped = false;
        arm_recv(w, c);
    }
}

void conn_on_recv(struct tk_worker *w, struct conn *c, struct io_uring_cqe *cqe)
{
    bool more = cqe->flags & IORING_CQE_F_MORE;
    if (!more)
        c->recv_armed = false;
    if (cqe->res > 0) {
        TK_ASSERT(cqe->flags & IORING_CQE_F_BUFFER);
        uint32_t bid = cqe->flags >> IORING_CQE_BUFFER_SHIFT;
        TK_ASSERT(bid < TK_WORKER_BUF_COUNT);
        char *data = w->bufs + (size_t)bid * TK_WORKER_BUF_SIZE;
        if (c->tls && (c->state == CONN_HANDSHAKE || c->state == CONN_READY)) {
            tls_open(w, c, data, (size_t)cqe->res);
        } else if (c->state == CONN_HANDSHAKE || c->state == CONN_READY) {
            if (c->in.len + (uint32_t)cqe->res > IN_CAP_MAX) {
                conn_error(w, c, TK_REASON_OVERLOAD);
            } else {
                buf_reserve(&c->in, (uint32_t)cqe->res);
                memcpy(c->in.p + c->in.len, data, (size_t)cqe->res);
                c->in.len += (uint32_t)cqe->res;
            }
        }
        io_uring_buf_ring_add(w->br, data, TK_WORKER_BUF_SIZE, (unsigned short)bid,
                              io_uring_buf_ring_mask(TK_WORKER_BUF_COUNT), 0);
        io_uring_buf_ring_advance(w->br, 1);
        conn_parse(w, c);
    } else if (cqe->res == 0 || (cqe->res < 0 && cqe->res != -ENOBUFS && cqe->res != -ECANCELED)) {
        /* End of stream or a socket error: the client is gone. */
        conn_close(w, c);
        conn_drop_output(c); /* nobody will read it */
    }
    if (!c->recv_armed) {
        if ((c->state == CONN_HANDSHAKE || c->state == CONN_READY) && !c->recv_stopped)
            arm_recv(w, c);
        else if (c->recv_stopped)
            mark_resume(w, c);
        else
            conn_maybe_release(w, c);
    }
    watch_paused(w, c);
}

void conn_on_poll(struct tk_worker *w, struct conn *c, int res)
{
    c->poll_armed = false;
    c->poll_removing = false;
    if (res > 0 && c->state == CONN_READY) {
        /* The client is gone: drop its waiters now, as at end of stream. */
        conn_close(w, c);
        conn_drop_output(c);
    }
    conn_maybe_release(w, c);
    watch_paused(w, c);
}

void conn_on_send(struct tk_worker *w, struct conn *c, int res)
{
    c->send_inflight = false;
    if (res < 0) {
        c->snd.len = 0;
        c->snd_off = 0;
        conn_drop_output(c);
        conn_close(w, c);
        conn_maybe_release(w, c);
        return;
    }
    bool was_paused = conn_paused(w, c);
    c->snd_off += (uint32_t)res;
    TK_ASSERT(c->snd_off <= c->snd.len);
    if (c->snd_off == c->snd.len) {
        c->snd.len = 0;
        c->snd_off = 0;
    }
    if (was_paused && !conn_paused(w, c))
        mark_resume(w, c);
    mark_dirty(w, c);
}

static void flush_conn(struct tk_worker *w, struct conn *c)
{
    c->dirty = false;
    if (c->state == CONN_FREE)
        return;
    if (!c->send_inflight) {
        if (c->snd.len == 0 && c->tls) {
            tls_seal(w, c);
        } else if (c->snd.len == 0 && c->out.len > 0) {
            struct buf t = c->snd;
            c->snd = c->out;
            c->out = t;
            c->out.len = 0;
            c->snd_off = 0;
        }
        if (c->snd.len > c->snd_off) {
            struct io_uring_sqe *sqe = worker_sqe(w);
            io_uring_prep_send(sqe, c->fd, c->snd.p + c->snd_off, c->snd.len - c->snd_off,
                               MSG_NOSIGNAL);
            io_uring_sqe_set_data64(sqe, tk_ud(OP_SEND, c->slot, c->gen));
            c->send_inflight = true;
        }
    }
    conn_maybe_release(w, c);
}

void conn_expire_handshakes(struct tk_worker *w)
{
    while (w->hs_len > 0) {
        struct hs_deadline *d = &w->hs[w->hs_head];
        struct conn *c = conn_get(w, d->slot, d->gen);
        if (c && c->state == CONN_HANDSHAKE) {
            if (d->at_us > w->now_us)
                break;
            /* SPEC 5: closed without a line. */
            w->stat[TK_WSTAT_handshake_timeouts]++;
            conn_close(w, c);
        }
        w->hs_head = (w->hs_head + 1) % w->hs_cap;
        w->hs_len--;
    }
}

void conn_on_cancel(struct tk_worker *w, struct conn *c)
{
    c->cancel_inflight = false;
    conn_maybe_release(w, c);
    if (c->recv_stopped)
        mark_resume(w, c);
    watch_paused(w, c);
}

void conn_overload(struct tk_worker *w, struct conn *c)
{
    conn_error(w, c, TK_REASON_OVERLOAD);
}

/* Resumes every connection with unparsed input (after a push back ended). */
void conn_resume_all(struct tk_worker *w)
{
    for (uint32_t i = 0; i < w->nconns_alloc; i++)
        if (w->conns[i] && w->conns[i]->state == CONN_READY && w->conns[i]->in.len)
            mark_resume(w, w->conns[i]);
}

/* End of a round: parse what paused connections can take now, then hand
 * every connection's pending output to the kernel. */
void conn_flush_round(struct tk_worker *w)
{
    while (w->resume) {
        struct conn *c = w->resume;
        w->resume = c->next_resume;
        c->resume = false;
        if (c->state != CONN_READY || conn_paused(w, c))
            continue;
        conn_parse(w, c);
        conn_rearm(w, c);
    }
}

void conn_flush_sends(struct tk_worker *w)
{
    while (w->dirty) {
        struct conn *c = w->dirty;
        w->dirty = c->next_dirty;
        flush_conn(w, c);
    }
}

void conn_free_all(struct tk_worker *w)
{
    for (uint32_t i = 0; i < w->nconns_alloc; i++) {
        struct conn *c = w->conns[i];
        if (!c)
            continue;
        if (c->fd >= 0 && c->state != CONN_FREE)
            close(c->fd);
        buf_free(&c->in);
        buf_free(&c->out);
        buf_free(&c->snd);
        tk_tls_free(c->tls);
        free(c);
        w->conns[i] = NULL;
    }
}
