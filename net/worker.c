/* A worker thread: one io_uring loop, the client connections it accepted
 * (net/conn.c), and one lock-table shard (ARCHITECTURE.md).
 *
 * Each round of the loop: wait for completions (or the next deadline),
 * handle them (accept, recv, send, wakeup), drain the rings from other
 * workers and from the Raft thread, fire the shard's timers, then flush
 * everything batched during the round: sends, messages to other threads,
 * proposals. One syscall submits the round's work and waits for the next.
 *
 * Requests are routed to the shard owning their key (hash of the key); a
 * shard's replies go back to the worker holding the connection. Q and N
 * replies are held until the Raft thread confirms, with a read barrier,
 * that this node still led after computing them (SPEC 3: linearizable).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "net/worker.h"

#define SQ_ENTRIES 4096
#define STATS_PERIOD_US 50000

struct io_uring_sqe *worker_sqe(struct tk_worker *w)
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
    struct io_uring_sqe *sqe = worker_sqe(w);
    io_uring_prep_multishot_accept(sqe, w->listen_fd, NULL, NULL, SOCK_CLOEXEC);
    io_uring_sqe_set_data64(sqe, tk_ud(OP_ACCEPT, 0, 0));
    w->accept.armed = true;
}

static void arm_wake(struct tk_worker *w)
{
    struct io_uring_sqe *sqe = worker_sqe(w);
    io_uring_prep_read(sqe, w->wake.fd, &w->wake_buf, sizeof(w->wake_buf), 0);
    io_uring_sqe_set_data64(sqe, tk_ud(OP_WAKE, 0, 0));
}

/* ------------------------------------------------------------------ */
/* The shard's sink: replies and proposals */

static void send_reply_msg(struct tk_worker *w, uint32_t dst, const struct tk_lock_reply *r)
{
    TK_ASSERT(dst < w->s->nworkers);
    struct tk_msg_reply *m =
        tk_outbox_put(&w->to_worker[dst], TK_MSG_REPLY, (uint32_t)(sizeof(*m) + r->owner_len));
    m->client = r->client;
    m->id = r->id;
    m->token = r->token;
    m->waiters = r->waiters;
    m->type = (uint8_t)r->type;
    m->owner_len = (uint8_t)r->owner_len;
    if (r->owner_len)
        memcpy(m->owner, r->owner, r->owner_len);
}

static void reply_now(struct tk_worker *w, const struct tk_lock_reply *r)
{
    uint32_t dst = tk_client_worker(r->client);
    if (dst == w->idx)
        conn_deliver(w, r);
    else
        send_reply_msg(w, dst, r);
}

static void sink_reply(void *ctx, const struct tk_lock_reply *r)
{
    struct tk_worker *w = ctx;
    if (r->type != 'Q' && r->type != 'N') {
        reply_now(w, r);
        return;
    }
    /* A read: hold it until a barrier started after now confirms that this
     * node still led; a deposed leader must not answer from stale state. */
    /* Bounded: every held reply answers a request in flight. */
    TK_ASSERT(w->stat[TK_WSTAT_reads_held] <
              (uint64_t)w->s->opt.max_connections * w->s->opt.max_inflight);
    struct held_reply *h = malloc(sizeof(*h));
    TK_ASSERT(h != NULL);
    h->next = NULL;
    h->round = w->read_round;
    h->r = *r;
    if (r->owner_len) {
        memcpy(h->owner, r->owner, r->owner_len);
        h->r.owner = h->owner;
    }
    if (w->held_tail)
        w->held_tail->next = h;
    else
        w->held_head = h;
    w->held_tail = h;
    w->stat[TK_WSTAT_reads_held]++;
}

static void sink_propose(void *ctx, const struct tk_cmd *cmd)
{
    struct tk_worker *w = ctx;
    uint8_t tmp[16 + TK_CMD_ENCODED_MAX];
    memcpy(tmp, &w->epoch, 8);
    memcpy(tmp + 8, &w->now_us, 8);
    size_t n = tk_cmd_encode(cmd, tmp + 16, sizeof(tmp) - 16);
    TK_ASSERT(n > 0);
    void *p = tk_outbox_put(&w->to_raft, TK_MSG_PROPOSE, (uint32_t)(16 + n));
    memcpy(p, tmp, 16 + n);
}

/* Releases held reads up to round (ok), or drops them (leadership lost:
 * the connections are closed with M). */
static void release_reads(struct tk_worker *w, uint64_t round, bool ok)
{
    while (w->held_head && w->held_head->round <= round) {
        struct held_reply *h = w->held_head;
        w->held_head = h->next;
        if (!w->held_head)
            w->held_tail = NULL;
        if (ok)
            reply_now(w, &h->r);
        w->stat[TK_WSTAT_reads_held]--;
        free(h);
    }
}

/* End of a round: if replies were held this round, ask for a barrier. */
static void request_barrier(struct tk_worker *w)
{
    if (!w->held_tail || w->held_tail->round != w->read_round)
        return;
    uint64_t *p = tk_outbox_put(&w->to_raft, TK_MSG_READ, sizeof(uint64_t));
    *p = w->read_round;
    w->read_round++;
    w->stat[TK_WSTAT_read_barriers]++;
}

/* ------------------------------------------------------------------ */
/* Routing */

/* Answers a request the shard could not take (tk_lock_request failed). */
static void refuse(struct tk_worker *w, uint64_t client, uint64_t id, int err)
{
    struct tk_lock_reply r = {.type = err == TK_ENOTLEADER ? 'M' : 'X', .client = client, .id = id};
    reply_now(w, &r);
}

static void shard_request(struct tk_worker *w, const struct tk_lock_req *lr)
{
    int rc = tk_lock_request(w->table, w->now_us, lr, &w->sink);
    if (rc != TK_OK)
        refuse(w, lr->client, lr->id, rc);
}

void worker_route(struct tk_worker *w, const struct tk_lock_req *lr)
{
    uint32_t dst = tk_cmd_shard(lr->key, lr->key_len, w->s->nworkers);
    if (dst == w->idx) {
        shard_request(w, lr);
        return;
    }
    uint32_t len = (uint32_t)(sizeof(struct tk_msg_req) + lr->key_len + lr->owner_len);
    struct tk_msg_req *m = tk_outbox_put(&w->to_worker[dst], TK_MSG_REQ, len);
    m->epoch = w->epoch;
    m->client = lr->client;
    m->id = lr->id;
    m->token = lr->token;
    m->lease_ms = lr->lease_ms;
    m->wait_ms = lr->wait_ms;
    m->type = (uint8_t)lr->type;
    m->key_len = (uint8_t)lr->key_len;
    m->owner_len = (uint8_t)lr->owner_len;
    memcpy(m->bytes, lr->key, lr->key_len);
    if (lr->owner_len)
        memcpy(m->bytes + lr->key_len, lr->owner, lr->owner_len);
}

void worker_client_closed(struct tk_worker *w, uint64_t ref)
{
    for (uint32_t j = 0; j < w->s->nworkers; j++) {
        if (j == w->idx) {
            tk_lock_client_closed(w->table, ref);
            continue;
        }
        uint64_t *p = tk_outbox_put(&w->to_worker[j], TK_MSG_CLOSED, sizeof(uint64_t));
        *p = ref;
    }
}

/* A request forwarded by another worker. Its epoch says under which
 * leadership the client's worker accepted it. */
static void forwarded_request(struct tk_worker *w, const struct tk_msg_req *q, uint32_t len)
{
    if (q->epoch > w->epoch) {
        /* The sender already took a ROLE message we have not read yet. */
        TK_ASSERT(w->nearly < (uint64_t)w->s->opt.max_connections * w->s->opt.max_inflight);
        w->nearly++;
        struct early_req *e = malloc(sizeof(*e) + len);
        TK_ASSERT(e != NULL);
        e->next = NULL;
        e->epoch = q->epoch;
        e->len = len;
        memcpy(e->msg, q, len);
        if (w->early_tail)
            w->early_tail->next = e;
        else
            w->early_head = e;
        w->early_tail = e;
        return;
    }
    if (q->epoch < w->epoch || !w->leader) {
        refuse(w, q->client, q->id, TK_ENOTLEADER);
        return;
    }
    struct tk_lock_req lr = {
        .type = (char)q->type,
        .client = q->client,
        .id = q->id,
        .key = q->bytes,
        .key_len = q->key_len,
        .owner = q->bytes + q->key_len,
        .owner_len = q->owner_len,
        .lease_ms = q->lease_ms,
        .wait_ms = q->wait_ms,
        .token = q->token,
    };
    shard_request(w, &lr);
}

static void replay_early(struct tk_worker *w)
{
    struct early_req *e = w->early_head;
    w->early_head = w->early_tail = NULL;
    w->nearly = 0;
    while (e) {
        struct early_req *next = e->next;
        forwarded_request(w, (const struct tk_msg_req *)e->msg, e->len);
        free(e);
        e = next;
    }
}

/* ------------------------------------------------------------------ */
/* Messages from the Raft thread */

static void set_role(struct tk_worker *w, const struct tk_msg_role *m)
{
    TK_ASSERT(m->epoch > w->epoch);
    memcpy(w->leader_addr, m->leader_addr, sizeof(w->leader_addr));
    w->leader_addr[sizeof(w->leader_addr) - 1] = 0;
    w->epoch = m->epoch;
    bool was_leader = w->leader;
    w->leader = m->leader != 0;
    if (w->leader) {
        TK_ASSERT(!was_leader);
        tk_lock_lead(w->table, w->now_us);
    } else {
        /* Stepped down (or a new leader is known): pending requests are
         * never answered with a guess; clients get M and reconnect. */
        tk_lock_follow(w->table);
        release_reads(w, UINT64_MAX, false);
        for (uint32_t i = 0; i < w->nconns_alloc; i++) {
            struct conn *c = w->conns[i];
            if (c && c->state == CONN_READY)
                conn_moved(w, c);
        }
    }
    replay_early(w);
}

/* A shard's cut in progress: the GRANT records in table order, and where
 * each one is. Both arrays are sized from the held count up front and
 * double when needed: a cut of a million holders is a few large
 * allocations, not a million reallocs. */
struct snap_cut {
    struct tk_msg_snap_part part;
    size_t cap;
    uint64_t recs_cap;
};

static void snapshot_cut_fn(void *ctx, const struct tk_cmd *grant)
{
    struct snap_cut *sc = ctx;
    struct tk_msg_snap_part *part = &sc->part;
    if (sc->cap - part->len < TK_CMD_ENCODED_MAX) {
        sc->cap = TK_MAX(sc->cap * 2, part->len + TK_CMD_ENCODED_MAX);
        part->data = realloc(part->data, sc->cap);
        TK_ASSERT(part->data != NULL);
    }
    if (part->count == sc->recs_cap) {
        sc->recs_cap = TK_MAX(sc->recs_cap * 2, 1024);
        part->recs = realloc(part->recs, sc->recs_cap * sizeof(*part->recs));
        TK_ASSERT(part->recs != NULL);
    }
    size_t n = tk_cmd_encode(grant, part->data + part->len, TK_CMD_ENCODED_MAX);
    TK_ASSERT(n > 0);
    part->recs[part->count] = (struct tk_snap_rec){grant->token, part->len, n};
    part->len += n;
    part->count++;
}

/* Sorts the records by token: LSD radix sort on token - min, 16 bits a
 * pass, as many passes as the tokens' spread needs (one or two in
 * practice: a shard's holders were granted within a short span of the
 * counter). Linear, and done here so the shards sort in parallel, off the
 * Raft thread, which only merges. */
static void snapshot_sort(struct tk_msg_snap_part *part)
{
    uint64_t n = part->count;
    if (n < 2)
        return;
    uint64_t lo = UINT64_MAX, hi = 0;
    for (uint64_t i = 0; i < n; i++) {
        lo = TK_MIN(lo, part->recs[i].token);
        hi = TK_MAX(hi, part->recs[i].token);
    }
    struct tk_snap_rec *a = part->recs, *b = malloc(n * sizeof(*b));
    uint32_t *count = malloc(65536 * sizeof(*count));
    TK_ASSERT(b != NULL);
    TK_ASSERT(count != NULL);
    for (unsigned shift = 0; shift < 64 && ((hi - lo) >> shift) != 0; shift += 16) {
        memset(count, 0, 65536 * sizeof(*count));
        for (uint64_t i = 0; i < n; i++)
            count[((a[i].token - lo) >> shift) & 0xffff]++;
        uint32_t sum = 0;
        for (uint32_t d = 0; d < 65536; d++) {
            uint32_t c = count[d];
            count[d] = sum;
            sum += c;
        }
        for (uint64_t i = 0; i < n; i++)
            b[count[((a[i].token - lo) >> shift) & 0xffff]++] = a[i];
        struct tk_snap_rec *t = a;
        a = b;
        b = t;
    }
    free(count);
    free(b);
    part->recs = a;
    for (uint64_t i = 1; i < n; i++)
        TK_ASSERT(a[i].token > a[i - 1].token); /* tokens are unique */
}

static void snapshot_cut(struct tk_worker *w, uint64_t index)
{
    struct tk_lock_stats ls;
    tk_lock_stats(w->table, &ls);
    struct snap_cut sc = {.part = {.index = index}};
    /* Most keys are short: 64 bytes a record covers them without growth. */
    sc.cap = TK_MAX((size_t)ls.held * 64u, (size_t)TK_CMD_ENCODED_MAX);
    sc.part.data = malloc(sc.cap);
    sc.recs_cap = TK_MAX(ls.held, 1024u);
    sc.part.recs = malloc(sc.recs_cap * sizeof(*sc.part.recs));
    TK_ASSERT(sc.part.data != NULL);
    TK_ASSERT(sc.part.recs != NULL);
    tk_lock_each_holder(w->table, snapshot_cut_fn, &sc);
    TK_ASSERT(sc.part.count == ls.held);
    snapshot_sort(&sc.part);
    struct tk_msg_snap_part *m = tk_outbox_put(&w->to_raft, TK_MSG_SNAP_PART, sizeof(*m));
    *m = sc.part;
}

static unsigned drain_raft(struct tk_worker *w)
{
    const struct tk_ring_msg *m;
    unsigned n = 0;
    while ((m = tk_ring_peek(&w->from_raft)) != NULL) {
        n++;
        struct tk_cmd cmd;
        size_t used;
        switch (m->kind) {
            case TK_MSG_APPLY:
                TK_ASSERT(tk_cmd_decode(m->data, m->len, &cmd, &used) == TK_OK);
                tk_lock_apply(w->table, w->now_us, &cmd, &w->sink);
                break;
            case TK_MSG_ROLE: {
                struct tk_msg_role role;
                TK_ASSERT(m->len == sizeof(role));
                memcpy(&role, m->data, sizeof(role));
                set_role(w, &role);
                break;
            }
            case TK_MSG_READ_DONE: {
                uint64_t v[2];
                memcpy(v, m->data, sizeof(v));
                release_reads(w, v[0], v[1] != 0);
                break;
            }
            case TK_MSG_SNAP_REQ: {
                uint64_t index;
                memcpy(&index, m->data, 8);
                snapshot_cut(w, index);
                break;
            }
            case TK_MSG_CLEAR:
                tk_lock_clear(w->table);
                break;
            case TK_MSG_RESTORE:
                TK_ASSERT(tk_cmd_decode(m->data, m->len, &cmd, &used) == TK_OK);
                tk_lock_restore(w->table, w->now_us, &cmd);
                break;
            default:
                TK_ASSERT(!"unexpected message kind from raft");
        }
        tk_ring_pop(&w->from_raft, m);
    }
    return n;
}

static unsigned drain_workers(struct tk_worker *w)
{
    const struct tk_ring_msg *m;
    unsigned n = 0;
    for (uint32_t j = 0; j < w->s->nworkers; j++) {
        if (j == w->idx)
            continue;
        struct tk_ring *r = &w->inbox[j];
        while ((m = tk_ring_peek(r)) != NULL) {
            if (m->kind == TK_MSG_REQ) {
                forwarded_request(w, (const struct tk_msg_req *)m->data, m->len);
            } else if (m->kind == TK_MSG_REPLY) {
                const struct tk_msg_reply *p = (const void *)m->data;
                struct tk_lock_reply rep = {
                    .type = (char)p->type,
                    .client = p->client,
                    .id = p->id,
                    .token = p->token,
                    .waiters = p->waiters,
                    .owner = p->owner_len ? p->owner : NULL,
                    .owner_len = p->owner_len,
                };
                conn_deliver(w, &rep);
            } else if (m->kind == TK_MSG_CLOSED) {
                uint64_t ref;
                memcpy(&ref, m->data, sizeof(ref));
                tk_lock_client_closed(w->table, ref);
            } else {
                TK_ASSERT(!"unexpected message kind from a worker");
            }
            tk_ring_pop(r, m);
            n++;
        }
    }
    return n;
}

/* True if a message waits in any ring this worker reads. */
static bool rings_pending(struct tk_worker *w)
{
    if (tk_ring_peek(&w->from_raft))
        return true;
    for (uint32_t j = 0; j < w->s->nworkers; j++)
        if (j != w->idx && tk_ring_peek(&w->inbox[j]))
            return true;
    return false;
}

/* ------------------------------------------------------------------ */
/* The loop */

static void handle_cqe(struct tk_worker *w, struct io_uring_cqe *cqe)
{
    uint64_t ud = io_uring_cqe_get_data64(cqe);
    enum tk_op op = (enum tk_op)(ud >> 56);
    uint32_t slot = (uint32_t)(ud >> 32) & 0xffffffu;
    uint32_t gen = (uint32_t)ud;
    struct conn *c;
    switch (op) {
        case OP_ACCEPT:
            if (cqe->res >= 0)
                conn_on_accept(w, cqe->res);
            tk_accept_done(&w->accept, cqe->res, cqe->flags & IORING_CQE_F_MORE, w->now_us,
                           "client port");
            break;
        case OP_RECV:
            c = conn_get(w, slot, gen);
            TK_ASSERT(c != NULL);
            conn_on_recv(w, c, cqe);
            break;
        case OP_SEND:
            c = conn_get(w, slot, gen);
            TK_ASSERT(c != NULL);
            conn_on_send(w, c, cqe->res);
            break;
        case OP_CANCEL:
            c = conn_get(w, slot, gen);
            if (c)
                conn_on_cancel(w, c);
            break;
        case OP_POLL:
            c = conn_get(w, slot, gen);
            TK_ASSERT(c != NULL);
            conn_on_poll(w, c, cqe->res);
            break;
        case OP_WAKE:
            arm_wake(w);
            break;
        default:
            TK_ASSERT(!"unknown completion");
    }
}

static uint64_t next_deadline(struct tk_worker *w)
{
    uint64_t t = tk_lock_next_deadline(w->table);
    if (w->hs_len > 0)
        t = TK_MIN(t, w->hs[w->hs_head].at_us);
    if (!w->accept.armed)
        t = TK_MIN(t, w->accept.retry_at_us);
    return TK_MIN(t, w->now_us + 100000u); /* wake at least every 100 ms */
}

static void publish_stats(struct tk_worker *w)
{
    struct tk_lock_stats ls;
    tk_lock_stats(w->table, &ls);
    w->stat[TK_WSTAT_keys] = ls.keys;
    w->stat[TK_WSTAT_accept_errors] = w->accept.errors;
    w->stat[TK_WSTAT_handshaking] = w->handshaking;
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
    conn_flush_round(w);
    request_barrier(w);
    bool busy = false;
    for (uint32_t j = 0; j < w->s->nworkers; j++) {
        if (j == w->idx)
            continue;
        tk_outbox_flush(&w->to_worker[j]);
        busy |= tk_outbox_busy(&w->to_worker[j]);
    }
    tk_outbox_flush(&w->to_raft);
    busy |= tk_outbox_busy(&w->to_raft);
    if (w->backlogged && !busy)
        conn_resume_all(w); /* parsing stopped while messages waited */
    w->backlogged = busy;
    conn_flush_sends(w);
}

static int setup_ring(struct tk_worker *w)
{
    struct io_uring_params p = {0};
    p.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
    int rc = io_uring_queue_init_params(SQ_ENTRIES, &w->ring, &p);
    if (rc < 0) {
        memset(&p, 0, sizeof(p));
        rc = io_uring_queue_init_params(SQ_ENTRIES, &w->ring, &p);
    }
    if (rc < 0) {
        tk_log(TK_LOG_ERROR, "worker %u: io_uring setup failed: %s", w->idx, strerror(-rc));
        return TK_EUNSUPPORTED;
    }
    /* Provided buffer ring (liburing 2.3 has no io_uring_setup_buf_ring). */
    size_t br_bytes = TK_WORKER_BUF_COUNT * sizeof(struct io_uring_buf);
    void *brmem = NULL;
    TK_ASSERT(posix_memalign(&brmem, 4096, br_bytes) == 0);
    w->br = brmem;
    w->bufs = malloc((size_t)TK_WORKER_BUF_COUNT * TK_WORKER_BUF_SIZE);
    TK_ASSERT(w->bufs != NULL);
    struct io_uring_buf_reg reg = {
        .ring_addr = (uint64_t)(uintptr_t)w->br, .ring_entries = TK_WORKER_BUF_COUNT, .bgid = 0};
    rc = io_uring_register_buf_ring(&w->ring, &reg, 0);
    if (rc < 0) {
        tk_log(TK_LOG_ERROR, "worker %u: provided buffer rings unsupported by this kernel: %s",
               w->idx, strerror(-rc));
        return TK_EUNSUPPORTED;
    }
    io_uring_buf_ring_init(w->br);
    int mask = io_uring_buf_ring_mask(TK_WORKER_BUF_COUNT);
    for (uint32_t i = 0; i < TK_WORKER_BUF_COUNT; i++)
        io_uring_buf_ring_add(w->br, w->bufs + (size_t)i * TK_WORKER_BUF_SIZE, TK_WORKER_BUF_SIZE,
                              (unsigned short)i, mask, (int)i);
    io_uring_buf_ring_advance(w->br, TK_WORKER_BUF_COUNT);
    return TK_OK;
}

static void begin_stop(struct tk_worker *w)
{
    for (uint32_t i = 0; i < w->nconns_alloc; i++) {
        struct conn *c = w->conns[i];
        if (c && c->state != CONN_FREE)
            conn_close(w, c);
    }
    if (w->accept.armed) {
        struct io_uring_sqe *sqe = worker_sqe(w);
        io_uring_prep_cancel64(sqe, tk_ud(OP_ACCEPT, 0, 0), 0);
        io_uring_sqe_set_data64(sqe, tk_ud(OP_CANCEL, 0xffffff, 0));
    }
}

static void *worker_main(void *arg)
{
    struct tk_worker *w = arg;
    struct tk_server *s = w->s;
    char name[16];
    snprintf(name, sizeof(name), "tk-worker-%u", w->idx);
    pthread_setname_np(pthread_self(), name);
    if (setup_ring(w) != TK_OK) {
        atomic_store(&s->failed, 1);
        atomic_store(&s->stopping, 1);
        return NULL;
    }
    w->now_us = tk_now_us();
    arm_accept(w);
    arm_wake(w);
    bool stopping = false;
    bool did_work = false;
    for (;;) {
        /* Sleep only when idle: after a round that did work, poll once more
         * without blocking and leave the wake flag set, so producers skip
         * the eventfd write while work flows. (Spinning longer before
         * sleeping was measured worse on 2 shared cores: 3 nodes + load.) */
        bool block = !did_work;
        if (block) {
            tk_wake_clear(&w->wake);
            block = !rings_pending(w);
        }
        uint64_t deadline = next_deadline(w);
        uint64_t wait_us = block && deadline > w->now_us ? deadline - w->now_us : 0;
        struct __kernel_timespec ts = {.tv_sec = (long long)(wait_us / 1000000u),
                                       .tv_nsec = (long long)(wait_us % 1000000u) * 1000};
        struct io_uring_cqe *cqe = NULL;
        if (wait_us)
            io_uring_submit_and_wait_timeout(&w->ring, &cqe, 1, &ts, NULL);
        else
            io_uring_submit_and_get_events(&w->ring);
        w->now_us = tk_now_us();
        atomic_store_explicit(&s->progress_us[w->idx], w->now_us, memory_order_relaxed);
        unsigned head, n = 0;
        io_uring_for_each_cqe(&w->ring, head, cqe)
        {
            handle_cqe(w, cqe);
            n++;
        }
        io_uring_cq_advance(&w->ring, n);
        n += drain_raft(w);
        n += drain_workers(w);
        did_work = n != 0;
        conn_expire_handshakes(w);
        if (tk_lock_next_deadline(w->table) <= w->now_us)
            tk_lock_tick(w->table, w->now_us, &w->sink);
        if (!stopping && tk_accept_due(&w->accept, w->now_us))
            arm_accept(w);
        if (!stopping && atomic_load_explicit(&s->stopping, memory_order_relaxed)) {
            stopping = true;
            begin_stop(w);
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
    w->read_round = 1;
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
    /* Outboxes point at the inboxes of the others, which all exist now.
     * Bounds: to another worker, each request in flight is at most one
     * forwarded request or one reply, plus one close per connection; to
     * the Raft thread, one proposal per key in flight (one per key of the
     * shard) plus one read barrier per round and one snapshot part. */
    uint64_t requests = (uint64_t)s->opt.max_connections * s->opt.max_inflight;
    for (uint32_t j = 0; j < s->nworkers; j++)
        if (j != idx)
            tk_outbox_init(&w->to_worker[j], &s->workers[j]->inbox[idx], &s->workers[j]->wake,
                           2 * requests + s->opt.max_connections);
    tk_outbox_init(&w->to_raft, &w->to_raft_ring, tk_raftd_wake(s), s->opt.max_keys + requests + 2);
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
    if (w->conns)
        conn_free_all(w);
    free(w->conns);
    free(w->free_slots);
    free(w->hs);
    release_reads(w, UINT64_MAX, false);
    for (struct early_req *e = w->early_head; e;) {
        struct early_req *next = e->next;
        free(e);
        e = next;
    }
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
