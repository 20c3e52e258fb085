/* A worker thread: one io_uring loop, the client connections it accepted,
 * and one lock-table shard (ARCHITECTURE.md).
 *
 * Each round of the loop: wait for completions (or the next deadline),
 * handle them (accept, recv, send, wakeup), drain the rings from other
 * workers and from the Raft thread, fire the shard's timers, then flush
 * everything batched during the round: sends, messages to other threads,
 * proposals. One syscall submits the round's work and waits for the next.
 *
 * Connection life: accept -> banner -> AUTH checked -> OK (+ M and close
 * when not leader) -> request lines -> close. A connection's bytes pass
 * through conn_stream_in()/conn_stream_out(), the seam where TLS will sit.
 */
#include <errno.h>
#include <liburing.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/auth.h"
#include "core/proto.h"
#include "net/server.h"
#include "shard/lock.h"

#define SQ_ENTRIES 4096
#define BUF_COUNT 512          /* provided buffers per worker; power of two */
#define BUF_SIZE 8192
#define IN_CAP_START 4096
#define IN_PAUSE_BYTES 65536   /* paused connection: stop receiving beyond this */
#define IN_CAP_MAX (1u << 20)  /* a paused connection's input never exceeds this */
#define OUT_PAUSE_BYTES (256u << 10) /* unsent output that pauses reading */
#define STATS_PERIOD_US 50000

enum op { OP_ACCEPT = 1, OP_RECV, OP_SEND, OP_WAKE, OP_CANCEL };
enum conn_state { CONN_FREE, CONN_HANDSHAKE, CONN_READY, CONN_CLOSING };

static uint64_t ud_make(enum op op, uint32_t slot, uint32_t gen)
{
    return ((uint64_t)op << 56) | ((uint64_t)(slot & 0xffffffu) << 32) | gen;
}

struct buf {
    char *p;
    uint32_t len, cap;
};

struct conn {
    int fd;
    uint32_t slot, gen;
    uint8_t state;
    bool recv_armed;     /* a multishot recv is outstanding */
    bool recv_stopped;   /* paused: recv cancelled until resumed */
    bool send_inflight;
    bool cancel_inflight;
    bool dirty;          /* on the worker's flush list */
    bool resume;         /* on the worker's resume list */
    uint32_t inflight;   /* requests without a reply yet */
    char snonce[TK_AUTH_HEX_LEN + 1];
    struct buf in;       /* received plaintext, not yet parsed */
    struct buf out;      /* formatted output, not yet handed to the kernel */
    struct buf snd;      /* output being sent; snd_off bytes done */
    uint32_t snd_off;
    struct conn *next_dirty, *next_resume;
};

struct hs_deadline {
    uint32_t slot, gen;
    uint64_t at_us;
};

struct tk_worker {
    struct tk_server *s;
    uint32_t idx;
    pthread_t thread;
    struct io_uring ring;
    struct tk_wake wake;
    uint64_t wake_buf;
    int listen_fd;
    bool accept_armed;

    struct io_uring_buf_ring *br;
    char *bufs;

    struct conn **conns;     /* slot -> connection (allocated on first use) */
    uint32_t nconns_alloc;
    uint32_t *free_slots;
    uint32_t nfree;
    struct hs_deadline *hs;  /* FIFO of handshake deadlines (accept order) */
    uint32_t hs_head, hs_len, hs_cap;
    struct conn *dirty, *resume;

    /* Rings: inbox[j] is written by worker j (j != idx); from_raft by raft. */
    struct tk_ring inbox[TK_WORKERS_MAX];
    struct tk_ring from_raft;
    struct tk_ring to_raft_ring;
    struct tk_outbox to_worker[TK_WORKERS_MAX];
    struct tk_outbox to_raft;

    struct tk_lock_table *table;
    struct tk_lock_sink sink;
    bool leader;
    bool backlogged;         /* some outbox has overflow: stop parsing input */
    char leader_addr[TK_ADDR_MAX];
    uint64_t now_us;
    uint64_t stats_at;
    uint64_t stat[TK_WSTAT_COUNT];
};

/* ------------------------------------------------------------------ */
/* Buffers */

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

/* ------------------------------------------------------------------ */
/* io_uring submission helpers */

static struct io_uring_sqe *get_sqe(struct tk_worker *w)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&w->ring);
    if (!sqe) {
        io_uring_submit(&w->ring);
        sqe = io_uring_get_sqe(&w->ring);
    }
    TK_ASSERT(sqe != NULL);
    return sqe;
}

static void arm_accept(struct tk_worker *w)
{
    struct io_uring_sqe *sqe = get_sqe(w);
    io_uring_prep_multishot_accept(sqe, w->listen_fd, NULL, NULL, SOCK_CLOEXEC);
    io_uring_sqe_set_data64(sqe, ud_make(OP_ACCEPT, 0, 0));
    w->accept_armed = true;
}

static void arm_wake(struct tk_worker *w)
{
    struct io_uring_sqe *sqe = get_sqe(w);
    io_uring_prep_read(sqe, w->wake.fd, &w->wake_buf, sizeof(w->wake_buf), 0);
    io_uring_sqe_set_data64(sqe, ud_make(OP_WAKE, 0, 0));
}

static void arm_recv(struct tk_worker *w, struct conn *c)
{
    struct io_uring_sqe *sqe = get_sqe(w);
    io_uring_prep_recv_multishot(sqe, c->fd, NULL, 0, 0);
    sqe->flags |= IOSQE_BUFFER_SELECT;
    sqe->buf_group = 0;
    io_uring_sqe_set_data64(sqe, ud_make(OP_RECV, c->slot, c->gen));
    c->recv_armed = true;
}

static void cancel_recv(struct tk_worker *w, struct conn *c)
{
    if (!c->recv_armed || c->cancel_inflight)
        return;
    struct io_uring_sqe *sqe = get_sqe(w);
    io_uring_prep_cancel64(sqe, ud_make(OP_RECV, c->slot, c->gen), 0);
    io_uring_sqe_set_data64(sqe, ud_make(OP_CANCEL, c->slot, c->gen));
    c->cancel_inflight = true;
}

/* ------------------------------------------------------------------ */
/* Connections */

static struct conn *conn_get(struct tk_worker *w, uint32_t slot, uint32_t gen)
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
    if (c->out.len == 0 && c->recv_armed) {
        /* Everything said: stop the multishot recv; its final CQE releases. */
        shutdown(c->fd, SHUT_RDWR);
        cancel_recv(w, c);
        return;
    }
    if (!c->recv_armed && !c->cancel_inflight)
        conn_free_slot(w, c);
}

static void notify_closed(struct tk_worker *w, uint64_t ref)
{
    for (uint32_t j = 0; j < w->s->nworkers; j++) {
        if (j == w->idx) {
            tk_lock_client_closed(w->table, ref);
            continue;
        }
        uint64_t *p = tk_outbox_put(&w->to_worker[j], TK_MSG_CLOSED, sizeof(uint64_t));
        memcpy(p, &ref, sizeof(ref));
    }
}

/* Starts closing: no more input is read; pending output is still sent. */
static void conn_close(struct tk_worker *w, struct conn *c)
{
    if (c->state == CONN_CLOSING || c->state == CONN_FREE)
        return;
    bool was_ready = c->state == CONN_READY;
    c->state = CONN_CLOSING;
    c->in.len = 0;
    if (was_ready)
        notify_closed(w, tk_client_ref(w->idx, c->slot, c->gen));
    if (c->out.len == 0)
        cancel_recv(w, c);
    mark_dirty(w, c); /* flush decides when to release */
}

static void conn_error(struct tk_worker *w, struct conn *c, enum tk_reason r)
{
    conn_write_error(w, c, r);
    w->stat[TK_WSTAT_conn_errors]++;
    conn_close(w, c);
}

static void conn_moved(struct tk_worker *w, struct conn *c)
{
    char line[TK_ADDR_MAX + 8];
    size_t n = tk_proto_fmt_moved(line, sizeof(line), w->leader_addr[0] ? w->leader_addr : NULL);
    conn_stream_out(w, c, line, n);
    w->stat[TK_WSTAT_moved]++;
    conn_close(w, c);
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

static void on_accept(struct tk_worker *w, int fd)
{
    struct tk_server *s = w->s;
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
    c->inflight = 0;
    c->snd_off = 0;
    c->recv_stopped = false;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    w->stat[TK_WSTAT_conns_accepted]++;
    w->stat[TK_WSTAT_conns_open]++;
    if (tk_auth_nonce(c->snonce) != TK_OK) {
        tk_log(TK_LOG_ERROR, "CSPRNG failed; refusing connection");
        conn_close(w, c);
        return;
    }
    char line[128];
    size_t len = tk_proto_fmt_banner(line, sizeof(line), false, c->snonce);
    conn_stream_out(w, c, line, len);
    hs_push(w, c);
    arm_recv(w, c);
}

/* ------------------------------------------------------------------ */
/* Requests and replies */

static void deliver_reply(struct tk_worker *w, const struct tk_lock_reply *r)
{
    struct conn *c = conn_get(w, tk_client_slot(r->client), tk_client_gen(r->client));
    if (!c || c->state != CONN_READY)
        return; /* the connection closed meanwhile; its outcome is Indeterminate */
    char line[160];
    size_t n;
    switch (r->type) {
    case 'G':
        n = tk_proto_fmt_grant(line, sizeof(line), r->id, r->token);
        w->stat[TK_WSTAT_res_granted]++;
        break;
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

struct msg_reply {
    uint64_t client, id, token;
    uint32_t waiters;
    uint8_t type, owner_len;
    char owner[];
};

struct msg_req {
    uint64_t client, id, token;
    uint32_t lease_ms, wait_ms;
    uint8_t type, key_len, owner_len;
    char bytes[]; /* key then owner */
};

static void sink_reply(void *ctx, const struct tk_lock_reply *r)
{
    struct tk_worker *w = ctx;
    uint32_t dst = tk_client_worker(r->client);
    if (dst == w->idx) {
        deliver_reply(w, r);
        return;
    }
    TK_ASSERT(dst < w->s->nworkers);
    struct msg_reply *m = tk_outbox_put(&w->to_worker[dst], TK_MSG_REPLY,
                                     (uint32_t)(sizeof(*m) + r->owner_len));
    m->client = r->client;
    m->id = r->id;
    m->token = r->token;
    m->waiters = r->waiters;
    m->type = (uint8_t)r->type;
    m->owner_len = (uint8_t)r->owner_len;
    if (r->owner_len)
        memcpy(m->owner, r->owner, r->owner_len);
}

static void sink_propose(void *ctx, const struct tk_cmd *cmd)
{
    struct tk_worker *w = ctx;
    uint8_t tmp[8 + TK_CMD_ENCODED_MAX];
    memcpy(tmp, &w->now_us, 8);
    size_t n = tk_cmd_encode(cmd, tmp + 8, sizeof(tmp) - 8);
    TK_ASSERT(n > 0);
    void *p = tk_outbox_put(&w->to_raft, TK_MSG_PROPOSE, (uint32_t)(8 + n));
    memcpy(p, tmp, 8 + n);
}

static void route_request(struct tk_worker *w, const struct tk_lock_req *lr)
{
    uint32_t dst = tk_cmd_shard(lr->key, lr->key_len, w->s->nworkers);
    if (dst == w->idx) {
        tk_lock_request(w->table, w->now_us, lr, &w->sink);
        return;
    }
    uint32_t len = (uint32_t)(sizeof(struct msg_req) + lr->key_len + lr->owner_len);
    struct msg_req *m = tk_outbox_put(&w->to_worker[dst], TK_MSG_REQ, len);
    m->client = lr->client;
    m->id = lr->id;
    m->token = lr->token;
    m->lease_ms = lr->lease_ms;
    m->wait_ms = lr->wait_ms;
    m->type = (uint8_t)lr->type;
    m->key_len = (uint8_t)lr->key_len;
    m->owner_len = (uint8_t)lr->owner_len;
    memcpy(m->bytes, lr->key, lr->key_len);
    memcpy(m->bytes + lr->key_len, lr->owner, lr->owner_len);
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
    w->stat[req.type == 'A' ? TK_WSTAT_req_acquire
            : req.type == 'R' ? TK_WSTAT_req_release
                              : TK_WSTAT_req_query]++;
    struct tk_lock_req lr = {
        .type = req.type,
        .client = tk_client_ref(w->idx, c->slot, c->gen),
        .id = req.id,
        .key = req.key,
        .key_len = req.key_len,
        .owner = req.owner,
        .owner_len = req.owner_len,
        .lease_ms = req.lease_ms,
        .wait_ms = req.wait_ms,
        .token = req.token,
    };
    c->inflight++;
    if (c->inflight == w->s->opt.max_inflight)
        w->stat[TK_WSTAT_inflight_paused]++;
    route_request(w, &lr);
}

static void handle_auth_line(struct tk_worker *w, struct conn *c, const char *line, size_t len)
{
    const char *cnonce, *cproof;
    char expect[TK_AUTH_HEX_LEN + 1];
    if (!tk_proto_parse_auth(line, len, &cnonce, &cproof)) {
        w->stat[TK_WSTAT_auth_failures]++;
        conn_error(w, c, TK_REASON_AUTH);
        return;
    }
    struct tk_server *s = w->s;
    tk_auth_proof(s->client_secret, s->client_secret_len, false, c->snonce, cnonce, expect);
    if (!tk_auth_equal(expect, cproof, TK_AUTH_HEX_LEN)) {
        w->stat[TK_WSTAT_auth_failures]++;
        conn_error(w, c, TK_REASON_AUTH);
        return;
    }
    char sproof[TK_AUTH_HEX_LEN + 1];
    tk_auth_proof(s->client_secret, s->client_secret_len, true, c->snonce, cnonce, sproof);
    uint64_t domain[2] = {atomic_load(&s->domain_lo), atomic_load(&s->domain_hi)};
    char ok[160];
    size_t n = tk_proto_fmt_ok(ok, sizeof(ok), sproof, s->node_id, domain);
    conn_stream_out(w, c, ok, n);
    if (!w->leader) {
        conn_moved(w, c);
        return;
    }
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
    if (c->state == CONN_READY && c->recv_stopped && c->in.len < IN_PAUSE_BYTES &&
        !c->recv_armed && !c->cancel_inflight && !conn_paused(w, c)) {
        c->recv_stopped = false;
        arm_recv(w, c);
    }
}

static void on_recv(struct tk_worker *w, struct conn *c, struct io_uring_cqe *cqe)
{
    bool more = cqe->flags & IORING_CQE_F_MORE;
    if (!more)
        c->recv_armed = false;
    if (cqe->res > 0) {
        TK_ASSERT(cqe->flags & IORING_CQE_F_BUFFER);
        uint32_t bid = cqe->flags >> IORING_CQE_BUFFER_SHIFT;
        TK_ASSERT(bid < BUF_COUNT);
        char *data = w->bufs + (size_t)bid * BUF_SIZE;
        if (c->state == CONN_HANDSHAKE || c->state == CONN_READY) {
            if (c->in.len + (uint32_t)cqe->res > IN_CAP_MAX) {
                conn_error(w, c, TK_REASON_OVERLOAD);
            } else {
                buf_reserve(&c->in, (uint32_t)cqe->res);
                memcpy(c->in.p + c->in.len, data, (size_t)cqe->res);
                c->in.len += (uint32_t)cqe->res;
            }
        }
        io_uring_buf_ring_add(w->br, data, BUF_SIZE, (unsigned short)bid,
                              io_uring_buf_ring_mask(BUF_COUNT), 0);
        io_uring_buf_ring_advance(w->br, 1);
        conn_parse(w, c);
    } else if (cqe->res == 0 || (cqe->res < 0 && cqe->res != -ENOBUFS && cqe->res != -ECANCELED)) {
        /* End of stream or a socket error: the client is gone. */
        conn_close(w, c);
        c->out.len = 0; /* nobody will read it */
    }
    if (!c->recv_armed) {
        if ((c->state == CONN_HANDSHAKE || c->state == CONN_READY) && !c->recv_stopped)
            arm_recv(w, c);
        else if (c->recv_stopped)
            mark_resume(w, c);
        else
            conn_maybe_release(w, c);
    }
}

static void on_send(struct tk_worker *w, struct conn *c, int res)
{
    c->send_inflight = false;
    if (res < 0) {
        c->snd.len = 0;
        c->snd_off = 0;
        c->out.len = 0;
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
        if (c->snd.len == 0 && c->out.len > 0) {
            struct buf t = c->snd;
            c->snd = c->out;
            c->out = t;
            c->out.len = 0;
            c->snd_off = 0;
        }
        if (c->snd.len > c->snd_off) {
            struct io_uring_sqe *sqe = get_sqe(w);
            io_uring_prep_send(sqe, c->fd, c->snd.p + c->snd_off, c->snd.len - c->snd_off,
                               MSG_NOSIGNAL);
            io_uring_sqe_set_data64(sqe, ud_make(OP_SEND, c->slot, c->gen));
            c->send_inflight = true;
        }
    }
    conn_maybe_release(w, c);
}

/* ------------------------------------------------------------------ */
/* Messages from other threads */

static void set_role(struct tk_worker *w, const struct tk_msg_role *m)
{
    memcpy(w->leader_addr, m->leader_addr, sizeof(w->leader_addr));
    w->leader_addr[sizeof(w->leader_addr) - 1] = 0;
    bool lead = m->leader != 0;
    if (lead == w->leader)
        return;
    w->leader = lead;
    if (lead) {
        tk_lock_lead(w->table, w->now_us);
        return;
    }
    /* Stepped down: pending requests are never answered with a guess. */
    tk_lock_follow(w->table);
    for (uint32_t i = 0; i < w->nconns_alloc; i++) {
        struct conn *c = w->conns[i];
        if (c && c->state == CONN_READY)
            conn_moved(w, c);
    }
}

static void drain_rings(struct tk_worker *w)
{
    const struct tk_ring_msg *m;
    for (uint32_t j = 0; j < w->s->nworkers; j++) {
        if (j == w->idx)
            continue;
        struct tk_ring *r = &w->inbox[j];
        while ((m = tk_ring_peek(r)) != NULL) {
            if (m->kind == TK_MSG_REQ) {
                const struct msg_req *q = (const void *)m->data;
                struct tk_lock_req lr = {
                    .type = (char)q->type, .client = q->client, .id = q->id,
                    .key = q->bytes, .key_len = q->key_len,
                    .owner = q->bytes + q->key_len, .owner_len = q->owner_len,
                    .lease_ms = q->lease_ms, .wait_ms = q->wait_ms, .token = q->token,
                };
                if (w->leader)
                    tk_lock_request(w->table, w->now_us, &lr, &w->sink);
                /* else: this node stepped down; the client's worker closes it with M. */
            } else if (m->kind == TK_MSG_REPLY) {
                const struct msg_reply *p = (const void *)m->data;
                struct tk_lock_reply rep = {
                    .type = (char)p->type, .client = p->client, .id = p->id,
                    .token = p->token, .waiters = p->waiters,
                    .owner = p->owner_len ? p->owner : NULL, .owner_len = p->owner_len,
                };
                deliver_reply(w, &rep);
            } else if (m->kind == TK_MSG_CLOSED) {
                uint64_t ref;
                memcpy(&ref, m->data, sizeof(ref));
                tk_lock_client_closed(w->table, ref);
            } else {
                TK_ASSERT(!"unexpected message kind from a worker");
            }
            tk_ring_pop(r, m);
        }
    }
    while ((m = tk_ring_peek(&w->from_raft)) != NULL) {
        if (m->kind == TK_MSG_APPLY) {
            struct tk_cmd cmd;
            size_t used;
            TK_ASSERT(tk_cmd_decode(m->data, m->len, &cmd, &used) == TK_OK);
            tk_lock_apply(w->table, w->now_us, &cmd, &w->sink);
        } else if (m->kind == TK_MSG_ROLE) {
            struct tk_msg_role role;
            memcpy(&role, m->data, sizeof(role));
            set_role(w, &role);
        } else {
            TK_ASSERT(!"unexpected message kind from raft");
        }
        tk_ring_pop(&w->from_raft, m);
    }
}

/* ------------------------------------------------------------------ */
/* The loop */

static void handle_cqe(struct tk_worker *w, struct io_uring_cqe *cqe)
{
    uint64_t ud = io_uring_cqe_get_data64(cqe);
    enum op op = (enum op)(ud >> 56);
    uint32_t slot = (uint32_t)(ud >> 32) & 0xffffffu;
    uint32_t gen = (uint32_t)ud;
    struct conn *c;
    switch (op) {
    case OP_ACCEPT:
        if (cqe->res >= 0)
            on_accept(w, cqe->res);
        else if (cqe->res != -ECANCELED)
            tk_log(TK_LOG_WARN, "accept failed: %s", strerror(-cqe->res));
        if (!(cqe->flags & IORING_CQE_F_MORE))
            w->accept_armed = false;
        break;
    case OP_RECV:
        c = conn_get(w, slot, gen);
        TK_ASSERT(c != NULL);
        on_recv(w, c, cqe);
        break;
    case OP_SEND:
        c = conn_get(w, slot, gen);
        TK_ASSERT(c != NULL);
        on_send(w, c, cqe->res);
        break;
    case OP_CANCEL:
        c = conn_get(w, slot, gen);
        if (c) {
            c->cancel_inflight = false;
            conn_maybe_release(w, c);
            if (c->recv_stopped)
                mark_resume(w, c);
        }
        break;
    case OP_WAKE:
        arm_wake(w);
        break;
    default:
        TK_ASSERT(!"unknown completion");
    }
}

static void expire_handshakes(struct tk_worker *w)
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

static uint64_t next_deadline(struct tk_worker *w)
{
    uint64_t t = tk_lock_next_deadline(w->table);
    if (w->hs_len > 0)
        t = TK_MIN(t, w->hs[w->hs_head].at_us);
    return TK_MIN(t, w->now_us + 100000u); /* wake at least every 100 ms */
}

static void publish_stats(struct tk_worker *w)
{
    struct tk_lock_stats ls;
    tk_lock_stats(w->table, &ls);
    w->stat[TK_WSTAT_keys] = ls.keys;
    w->stat[TK_WSTAT_held] = ls.held;
    w->stat[TK_WSTAT_waiters] = ls.waiters;
    w->stat[TK_WSTAT_deferred] = ls.deferred;
    w->stat[TK_WSTAT_in_flight] = ls.in_flight;
    w->stat[TK_WSTAT_grants] = ls.grants;
    w->stat[TK_WSTAT_handoffs] = ls.handoffs;
    w->stat[TK_WSTAT_releases] = ls.releases;
    w->stat[TK_WSTAT_expiries] = ls.expiries;
    w->stat[TK_WSTAT_busy_bound] = ls.busy_bound;
    uint64_t full = w->to_raft.full_count;
    for (uint32_t j = 0; j < w->s->nworkers; j++)
        full += w->to_worker[j].full_count;
    w->stat[TK_WSTAT_ring_full] = full;
    for (int i = 0; i < TK_WSTAT_COUNT; i++)
        atomic_store_explicit(&w->s->wstats[w->idx][i], w->stat[i], memory_order_relaxed);
    w->stats_at = w->now_us;
}

static void flush_round(struct tk_worker *w)
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
    bool busy = false;
    for (uint32_t j = 0; j < w->s->nworkers; j++) {
        if (j == w->idx)
            continue;
        tk_outbox_flush(&w->to_worker[j]);
        busy |= tk_outbox_busy(&w->to_worker[j]);
    }
    tk_outbox_flush(&w->to_raft);
    busy |= tk_outbox_busy(&w->to_raft);
    if (w->backlogged && !busy) {
        /* Parsing stopped while messages waited: resume every connection. */
        for (uint32_t i = 0; i < w->nconns_alloc; i++)
            if (w->conns[i] && w->conns[i]->state == CONN_READY && w->conns[i]->in.len)
                mark_resume(w, w->conns[i]);
    }
    w->backlogged = busy;
    while (w->dirty) {
        struct conn *c = w->dirty;
        w->dirty = c->next_dirty;
        flush_conn(w, c);
    }
}

static void shutdown_conns(struct tk_worker *w)
{
    for (uint32_t i = 0; i < w->nconns_alloc; i++) {
        struct conn *c = w->conns[i];
        if (c && c->state != CONN_FREE)
            conn_close(w, c);
    }
}

static void *worker_main(void *arg)
{
    struct tk_worker *w = arg;
    struct tk_server *s = w->s;
    char name[16];
    snprintf(name, sizeof(name), "tk-worker-%u", w->idx);
    pthread_setname_np(pthread_self(), name);

    struct io_uring_params p = {0};
    p.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
    int rc = io_uring_queue_init_params(SQ_ENTRIES, &w->ring, &p);
    if (rc < 0) {
        memset(&p, 0, sizeof(p));
        rc = io_uring_queue_init_params(SQ_ENTRIES, &w->ring, &p);
    }
    if (rc < 0) {
        tk_log(TK_LOG_ERROR, "worker %u: io_uring setup failed: %s", w->idx, strerror(-rc));
        atomic_store(&s->stopping, 1);
        return NULL;
    }
    /* Provided buffer ring (liburing 2.3 has no io_uring_setup_buf_ring). */
    size_t br_bytes = BUF_COUNT * sizeof(struct io_uring_buf);
    void *brmem = NULL;
    TK_ASSERT(posix_memalign(&brmem, 4096, br_bytes) == 0);
    w->br = brmem;
    w->bufs = malloc((size_t)BUF_COUNT * BUF_SIZE);
    TK_ASSERT(w->bufs != NULL);
    struct io_uring_buf_reg reg = {.ring_addr = (uint64_t)(uintptr_t)w->br,
                                   .ring_entries = BUF_COUNT, .bgid = 0};
    rc = io_uring_register_buf_ring(&w->ring, &reg, 0);
    if (rc < 0) {
        tk_log(TK_LOG_ERROR, "worker %u: provided buffers unsupported: %s", w->idx,
               strerror(-rc));
        atomic_store(&s->stopping, 1);
        return NULL;
    }
    io_uring_buf_ring_init(w->br);
    for (uint32_t i = 0; i < BUF_COUNT; i++)
        io_uring_buf_ring_add(w->br, w->bufs + (size_t)i * BUF_SIZE, BUF_SIZE,
                              (unsigned short)i, io_uring_buf_ring_mask(BUF_COUNT), (int)i);
    io_uring_buf_ring_advance(w->br, BUF_COUNT);

    w->now_us = tk_now_us();
    arm_accept(w);
    arm_wake(w);
    bool stopping = false;
    for (;;) {
        uint64_t deadline = next_deadline(w);
        uint64_t wait_us = deadline > w->now_us ? deadline - w->now_us : 0;
        struct __kernel_timespec ts = {.tv_sec = (long long)(wait_us / 1000000u),
                                       .tv_nsec = (long long)(wait_us % 1000000u) * 1000};
        struct io_uring_cqe *cqe = NULL;
        rc = io_uring_submit_and_wait_timeout(&w->ring, &cqe, 1, wait_us ? &ts : NULL, NULL);
        if (wait_us == 0 && rc == -ETIME)
            rc = 0;
        w->now_us = tk_now_us();
        unsigned head, n = 0;
        io_uring_for_each_cqe(&w->ring, head, cqe)
        {
            handle_cqe(w, cqe);
            n++;
        }
        io_uring_cq_advance(&w->ring, n);
        tk_wake_clear(&w->wake);
        drain_rings(w);
        expire_handshakes(w);
        if (tk_lock_next_deadline(w->table) <= w->now_us)
            tk_lock_tick(w->table, w->now_us, &w->sink);
        if (!stopping && atomic_load_explicit(&s->stopping, memory_order_relaxed)) {
            stopping = true;
            shutdown_conns(w);
            if (w->accept_armed) {
                struct io_uring_sqe *sqe = get_sqe(w);
                io_uring_prep_cancel64(sqe, ud_make(OP_ACCEPT, 0, 0), 0);
                io_uring_sqe_set_data64(sqe, ud_make(OP_CANCEL, 0xffffff, 0));
            }
        }
        flush_round(w);
        if (w->now_us - w->stats_at >= STATS_PERIOD_US)
            publish_stats(w);
        if (stopping && w->stat[TK_WSTAT_conns_open] == 0)
            break;
    }
    publish_stats(w);
    io_uring_queue_exit(&w->ring);
    free(w->bufs);
    free(w->br);
    return NULL;
}

/* ------------------------------------------------------------------ */
/* Setup */

int tk_worker_create(struct tk_server *s, uint32_t idx)
{
    struct tk_worker *w = calloc(1, sizeof(*w));
    if (!w)
        return TK_ENOMEM;
    s->workers[idx] = w;
    w->s = s;
    w->idx = idx;
    w->listen_fd = -1;
    uint32_t n = s->opt.max_connections;
    w->conns = calloc(n, sizeof(*w->conns));
    w->free_slots = malloc(n * sizeof(*w->free_slots));
    w->hs_cap = n;
    w->hs = malloc(n * sizeof(*w->hs));
    if (!w->conns || !w->free_slots || !w->hs)
        return TK_ENOMEM;
    w->nconns_alloc = n;
    for (uint32_t i = 0; i < n; i++)
        w->free_slots[i] = n - 1 - i;
    w->nfree = n;
    if (tk_wake_init(&w->wake) != TK_OK)
        return TK_EIO;
    for (uint32_t j = 0; j < s->nworkers; j++)
        if (j != idx && tk_ring_init(&w->inbox[j], TK_RING_BYTES) != TK_OK)
            return TK_ENOMEM;
    if (tk_ring_init(&w->from_raft, TK_RING_BYTES) != TK_OK ||
        tk_ring_init(&w->to_raft_ring, TK_RING_BYTES) != TK_OK)
        return TK_ENOMEM;
    uint32_t nw = s->nworkers;
    struct tk_lock_limits lim = {
        .keys_max = (s->opt.max_keys + nw - 1) / nw,
        .waiters_per_key_max = s->opt.max_waiters_per_key,
        .waiters_max = (s->opt.max_waiters + nw - 1) / nw,
    };
    w->table = tk_lock_create(&lim);
    if (!w->table)
        return TK_ENOMEM;
    w->sink = (struct tk_lock_sink){.reply = sink_reply, .propose = sink_propose, .ctx = w};
    return TK_OK;
}

int tk_worker_start(struct tk_server *s, uint32_t idx)
{
    struct tk_worker *w = s->workers[idx];
    /* Outboxes point at the inboxes of the others, which all exist now. */
    for (uint32_t j = 0; j < s->nworkers; j++) {
        if (j == idx)
            continue;
        tk_outbox_init(&w->to_worker[j], &s->workers[j]->inbox[idx], &s->workers[j]->wake);
    }
    tk_outbox_init(&w->to_raft, &w->to_raft_ring, tk_raftd_wake(s));
    w->listen_fd = tk_listen(s->opt.bind, s->opt.port, true);
    if (w->listen_fd < 0) {
        tk_log(TK_LOG_ERROR, "cannot listen on %s:%u: %s", s->opt.bind, s->opt.port,
               strerror(errno));
        return TK_EIO;
    }
    if (pthread_create(&w->thread, NULL, worker_main, w) != 0)
        return TK_EIO;
    return TK_OK;
}

void tk_worker_join(struct tk_server *s, uint32_t idx)
{
    struct tk_worker *w = s->workers[idx];
    tk_wake_signal(&w->wake);
    pthread_join(w->thread, NULL);
}

void tk_worker_destroy(struct tk_server *s, uint32_t idx)
{
    struct tk_worker *w = s->workers[idx];
    if (!w)
        return;
    if (w->listen_fd >= 0)
        close(w->listen_fd);
    for (uint32_t i = 0; i < w->nconns_alloc; i++) {
        struct conn *c = w->conns[i];
        if (!c)
            continue;
        if (c->fd >= 0 && c->state != CONN_FREE)
            close(c->fd);
        buf_free(&c->in);
        buf_free(&c->out);
        buf_free(&c->snd);
        free(c);
    }
    free(w->conns);
    free(w->free_slots);
    free(w->hs);
    for (uint32_t j = 0; j < s->nworkers; j++) {
        if (j != idx)
            tk_ring_free(&w->inbox[j]);
        tk_outbox_free(&w->to_worker[j]);
    }
    tk_outbox_free(&w->to_raft);
    tk_ring_free(&w->from_raft);
    tk_ring_free(&w->to_raft_ring);
    tk_wake_close(&w->wake);
    if (w->table)
        tk_lock_destroy(w->table);
    free(w);
    s->workers[idx] = NULL;
}

struct tk_ring *tk_worker_inbox_from_raft(struct tk_server *s, uint32_t idx)
{
    return &s->workers[idx]->from_raft;
}

struct tk_ring *tk_worker_outbox_to_raft(struct tk_server *s, uint32_t idx)
{
    return &s->workers[idx]->to_raft_ring;
}

struct tk_wake *tk_worker_wake(struct tk_server *s, uint32_t idx)
{
    return &s->workers[idx]->wake;
}
