/* Client connections of a worker: accept, TLS when configured, the
 * handshake (SPEC 2), line framing and parsing (SPEC 3-5), batched sends,
 * pauses and closing.
 *
 * Connection life: accept -> [TLS handshake] -> banner -> AUTH checked ->
 * OK (+ M and close when not leader) -> request lines -> close. The
 * handshake deadline runs from accept, so it covers TLS and AUTH alike.
 *
 * Bytes meet the socket in the connection's stream (net/stream.h), plain
 * or TLS: received bytes go in through its input, which appends the
 * plaintext to c->st.in; the plaintext a round wrote to c->st.out leaves
 * through its output into c->st.snd, one TLS write per round with TLS.
 * The parser and the formatters see only plaintext. The banner is written
 * at accept as without TLS; core/tls holds it until the TLS handshake is
 * done. Line framing lives here, above the stream.
 *
 * Closing: no more input is parsed, pending output is still sent, then the
 * multishot recv is cancelled and the slot is freed once the kernel holds
 * no reference to it (no recv, send or cancel outstanding).
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/slots.h"
#include "net/worker.h"

#define IN_PAUSE_BYTES 65536         /* paused connection: stop receiving beyond this */
#define IN_CAP_MAX (1u << 20)        /* a paused connection's input never exceeds this */
#define OUT_PAUSE_BYTES (256u << 10) /* unsent output that pauses reading */
#define TLS_LOG_PER_SEC 10           /* TLS failure lines per worker and second */

static void arm_recv(struct tk_worker *w, struct conn *c)
{
    struct io_uring_sqe *sqe = tk_uring_sqe(&w->ring);
    io_uring_prep_recv_multishot(sqe, c->st.fd, NULL, 0, 0);
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
    struct io_uring_sqe *sqe = tk_uring_sqe(&w->ring);
    io_uring_prep_poll_add(sqe, c->st.fd, POLLRDHUP);
    io_uring_sqe_set_data64(sqe, tk_ud(OP_POLL, c->slot, c->gen));
    c->poll_armed = true;
}

static void cancel_recv(struct tk_worker *w, struct conn *c)
{
    if (!c->recv_armed || c->cancel_inflight)
        return;
    struct io_uring_sqe *sqe = tk_uring_sqe(&w->ring);
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
    tk_stream_write(&c->st, p, n);
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
    if (c->st.fd >= 0)
        close(c->st.fd);
    c->st.fd = -1;
    tk_stream_free(&c->st); /* an idle slot holds no buffers */
    free(c->hs);
    c->hs = NULL;
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
    if (!tk_stream_has_output(&c->st) && c->recv_armed) {
        /* Everything said: stop the multishot recv; its final CQE releases. */
        shutdown(c->st.fd, SHUT_RDWR);
        cancel_recv(w, c);
        return;
    }
    if (c->poll_armed && !c->poll_removing) {
        struct io_uring_sqe *sqe = tk_uring_sqe(&w->ring);
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
    c->st.in.len = 0;
    if (was_ready)
        tk_shard_client_closed(w->shard, tk_client_ref(w->idx, c->slot, c->gen));
    if (!tk_stream_has_output(&c->st))
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

/* The current client-port context with a reference the caller drops
 * with tk_tls_ctx_unref(), or NULL without TLS. */
static struct tk_tls_ctx *server_tls_ctx(struct tk_server *s)
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

/* The connection's TLS failed (a bad or missing client certificate, a
 * plaintext client, a corrupt record): close it, sending only what TLS
 * itself has pending (an alert). Counted always, logged at most
 * TLS_LOG_PER_SEC times a second per worker. */
static void tls_failed(struct tk_worker *w, struct conn *c)
{
    c->st.out.len = 0; /* plaintext can no longer be sent */
    if (c->state != CONN_HANDSHAKE && c->state != CONN_READY)
        return;
    w->stat[TK_WSTAT_tls_failures]++;
    uint32_t unlogged;
    if (tk_stream_log_take(&w->tls_log, w->now_us, 1000000u, TLS_LOG_PER_SEC, &unlogged)) {
        if (unlogged)
            tk_log(TK_LOG_WARN, "TLS: %u more failed client connections were not logged", unlogged);
        char peer[TK_STREAM_NAME_MAX];
        tk_log(TK_LOG_WARN, "TLS: client %s closed: %s",
               tk_stream_peer_name(c->st.fd, peer, sizeof(peer)), tk_tls_error(c->st.tls));
    }
    conn_close(w, c);
}

/* A TLS state for a new connection, on the current context (NULL when
 * out of memory). */
static struct tk_tls *tls_start(struct tk_worker *w)
{
    tk_stream_tls_thread();
    struct tk_tls_ctx *ctx = server_tls_ctx(w->s);
    struct tk_tls *tls = tk_tls_new(ctx, NULL); /* takes a reference of its own */
    tk_tls_ctx_unref(ctx);
    return tls;
}

/* Received bytes in through the stream: its plaintext lands in c->st.in,
 * bounded by IN_CAP_MAX (overshot by one TLS record at most) before the
 * overload error. Handshake messages (and alerts) the input produced are
 * flushed at the end of the round. */
static void conn_input(struct tk_worker *w, struct conn *c, const char *data, size_t n)
{
    int rc = c->st.type->input(&c->st, data, n, IN_CAP_MAX);
    if (rc == TK_EFULL) {
        conn_error(w, c, TK_REASON_OVERLOAD);
    } else if (rc == TK_ECLOSED) { /* close_notify: as an end of stream */
        conn_close(w, c);
        c->st.type->discard(&c->st);
    } else if (rc != TK_OK) {
        tls_failed(w, c);
    }
    if (c->st.type->pending(&c->st) > 0)
        mark_dirty(w, c);
}

static bool conn_paused(const struct tk_worker *w, const struct conn *c)
{
    return c->inflight >= w->s->opt.max_inflight ||
           c->st.out.len + tk_stream_unsent(&c->st) >= OUT_PAUSE_BYTES;
}

static bool conn_handshaking(void *ctx, uint32_t slot, uint32_t gen)
{
    struct conn *c = conn_get(ctx, slot, gen);
    return c && c->state == CONN_HANDSHAKE;
}

int conn_deadlines_init(struct tk_worker *w, uint32_t n)
{
    return tk_deadlines_init(&w->hs, n, w, conn_handshaking);
}

static bool conn_evict(void *ctx, uint32_t slot, uint32_t gen)
{
    struct tk_worker *w = ctx;
    w->stat[TK_WSTAT_handshakes_evicted]++;
    conn_close(w, conn_get(w, slot, gen));
    return true;
}

/* Unauthenticated connections have a budget of their own (this worker's
 * share of --max-handshakes), below the connection bound: the oldest one
 * still in its handshake goes when it is full (net/stream.h). */
static void handshake_budget(struct tk_worker *w)
{
    uint32_t budget = TK_MAX(w->s->opt.max_handshakes / w->s->nworkers, 1u);
    tk_deadlines_budget(&w->hs, w->handshaking, budget, conn_evict);
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
    c->state = CONN_HANDSHAKE;
    w->handshaking++;
    c->inflight = 0;
    c->recv_stopped = false;
    TK_ASSERT(!c->poll_armed); /* a slot is freed only once its poll completed */
    c->poll_removing = false;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    w->stat[TK_WSTAT_conns_accepted]++;
    w->stat[TK_WSTAT_conns_open]++;
    struct tk_tls *tls = s->tls ? tls_start(w) : NULL;
    tk_stream_open(&c->st, fd, tls);
    if (s->tls && !tls) {
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
    TK_ASSERT(c->hs == NULL);
    c->hs = malloc(sizeof(*c->hs));
    if (c->hs == NULL) {
        tk_log(TK_LOG_ERROR, "out of memory for a handshake; refusing connection");
        conn_close(w, c);
        return;
    }
    char line[TK_HS_LINE_MAX];
    size_t len = tk_hs_client_listen(c->hs, s->client_secret, s->client_secret_len, snonce, line,
                                     sizeof(line));
    conn_stream_out(w, c, line, len);
    tk_deadlines_push(&w->hs, c->slot, c->gen, w->now_us + (uint64_t)s->opt.handshake_ms * 1000u);
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
        case 'W': /* the slot in waiters, the ring's version in token (core/msg.h) */
            n = tk_proto_fmt_wrong(line, sizeof(line), r->id, r->waiters, r->token);
            w->stat[TK_WSTAT_res_wrong_group]++;
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

/* S (SPEC 15): the ring as this worker's shard last heard of it, in one
 * line when it fits TK_LINE_MAX, else in parts cut at ranges. */
static void conn_ring(struct tk_worker *w, struct conn *c, uint64_t id)
{
    const struct tk_slot_view *v = tk_shard_slots(w->shard);
    char line[TK_LINE_MAX];
    size_t n;
    if (!v) {
        n = tk_proto_fmt_ring(line, sizeof(line), id, 0, 1, 1, "-", 1);
        conn_stream_out(w, c, line, n);
        return;
    }
    /* "S <id> <version> " and, in parts, "<k>/<n> " with k, n <= 1024. */
    size_t head = tk_proto_fmt_ring(line, sizeof(line), id, v->version, 1, 1, "-", 1) - 2;
    if (head + v->body_len + 1 <= sizeof(line)) {
        n = tk_proto_fmt_ring(line, sizeof(line), id, v->version, 1, 1, v->body, v->body_len);
        conn_stream_out(w, c, line, n);
        return;
    }
    size_t room = sizeof(line) - head - 10 - 1;
    _Static_assert(TK_LINE_MAX - 20 - 20 - 3 - 10 - 1 - 2 >= TK_SLOTS_RANGE_TEXT_MAX,
                   "one range fits a part");
    /* Where each part ends: as many whole ranges as fit. */
    uint32_t end[TK_PROTO_RING_PARTS_MAX];
    uint32_t parts = 0;
    size_t from = 0; /* body offset of the part's first range */
    for (uint32_t i = 0; i < v->nranges; i++) {
        if (i + 1 < v->nranges && v->range_end[i + 1] - from <= room)
            continue; /* the next range fits this part too */
        TK_ASSERT(parts < TK_PROTO_RING_PARTS_MAX);
        end[parts++] = v->range_end[i];
        from = v->range_end[i] + 1; /* past the ';' */
    }
    from = 0;
    for (uint32_t k = 0; k < parts; k++) {
        n = tk_proto_fmt_ring(line, sizeof(line), id, v->version, k + 1, parts, v->body + from,
                              end[k] - from);
        TK_ASSERT(n > 0);
        conn_stream_out(w, c, line, n);
        from = end[k] + 1;
    }
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
    if (req.type == 'S') {
        w->stat[TK_WSTAT_req_ring]++;
        conn_ring(w, c, req.id);
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
                   tk_stream_peer_name(c->st.fd, who, sizeof(who)), why);
    conn_error(w, c, TK_REASON_AUTH);
}

/* One handshake line, through core/handshake.c: the OK carries what
 * this node is now. */
static void handle_auth_line(struct tk_worker *w, struct conn *c, const char *line, size_t len)
{
    struct tk_server *s = w->s;
    TK_ASSERT(c->hs != NULL); /* CONN_HANDSHAKE holds it */
    c->hs->node_id = s->node_id;
    c->hs->domain[0] = atomic_load(&s->domain_lo);
    c->hs->domain[1] = atomic_load(&s->domain_hi);
    char ok[TK_HS_LINE_MAX];
    size_t n = 0;
    if (tk_hs_line(c->hs, line, len, ok, sizeof(ok), &n) != TK_HS_DONE) {
        auth_failed(w, c, tk_hs_why(c->hs));
        return;
    }
    free(c->hs);
    c->hs = NULL;
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
    while (pos < c->st.in.len && (c->state == CONN_HANDSHAKE || c->state == CONN_READY)) {
        if (c->state == CONN_READY && (conn_paused(w, c) || w->backlogged))
            break;
        char *start = c->st.in.p + pos;
        uint32_t avail = c->st.in.len - pos;
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
        c->st.in.len = 0;
        return;
    }
    if (pos > 0) {
        memmove(c->st.in.p, c->st.in.p + pos, c->st.in.len - pos);
        c->st.in.len -= pos;
    }
    /* A paused connection keeps its recv only while its backlog is small. */
    if (c->st.in.len >= IN_PAUSE_BYTES && c->recv_armed) {
        c->recv_stopped = true;
        cancel_recv(w, c);
    }
}

/* Restarts a recv that a pause stopped, once the backlog has shrunk and the
 * cancelled recv has fully completed. */
static void conn_rearm(struct tk_worker *w, struct conn *c)
{
    if (c->state == CONN_READY && c->recv_stopped && c->st.in.len < IN_PAUSE_BYTES &&
        !c->recv_armed && !c->cancel_inflight && !conn_paused(w, c)) {
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
        char *data = tk_bufring_data(w->bufs, bid);
        if (c->state == CONN_HANDSHAKE || c->state == CONN_READY)
            conn_input(w, c, data, (size_t)cqe->res);
        tk_bufring_recycle(w->br, w->bufs, bid);
        conn_parse(w, c);
    } else if (cqe->res == 0 || (cqe->res < 0 && cqe->res != -ENOBUFS && cqe->res != -ECANCELED)) {
        /* End of stream or a socket error: the client is gone. */
        conn_close(w, c);
        c->st.type->discard(&c->st); /* nobody will read it */
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
        c->st.type->discard(&c->st);
    }
    conn_maybe_release(w, c);
    watch_paused(w, c);
}

void conn_on_send(struct tk_worker *w, struct conn *c, int res)
{
    c->send_inflight = false;
    if (res < 0) {
        c->st.snd.len = 0;
        c->st.snd_off = 0;
        c->st.type->discard(&c->st);
        conn_close(w, c);
        conn_maybe_release(w, c);
        return;
    }
    bool was_paused = conn_paused(w, c);
    tk_stream_sent(&c->st, (size_t)res);
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
        if (c->st.snd.len == 0 && c->st.type->output(&c->st) != TK_OK) {
            tls_failed(w, c);
            c->st.type->output(&c->st); /* what TLS has pending still goes: an alert */
        }
        if (tk_stream_unsent(&c->st) > 0) {
            struct io_uring_sqe *sqe = tk_uring_sqe(&w->ring);
            io_uring_prep_send(sqe, c->st.fd, c->st.snd.p + c->st.snd_off, tk_stream_unsent(&c->st),
                               MSG_NOSIGNAL);
            io_uring_sqe_set_data64(sqe, tk_ud(OP_SEND, c->slot, c->gen));
            c->send_inflight = true;
        }
    }
    conn_maybe_release(w, c);
}

static void conn_timeout(void *ctx, uint32_t slot, uint32_t gen)
{
    struct tk_worker *w = ctx;
    /* SPEC 5: closed without a line. */
    w->stat[TK_WSTAT_handshake_timeouts]++;
    conn_close(w, conn_get(w, slot, gen));
}

void conn_expire_handshakes(struct tk_worker *w)
{
    tk_deadlines_expire(&w->hs, w->now_us, conn_timeout);
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
        if (w->conns[i] && w->conns[i]->state == CONN_READY && w->conns[i]->st.in.len)
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
        if (c->st.fd >= 0 && c->state != CONN_FREE)
            close(c->st.fd);
        tk_stream_free(&c->st);
        free(c);
        w->conns[i] = NULL;
    }
}
