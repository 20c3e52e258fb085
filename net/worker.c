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
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "net/worker.h"

#define SQ_ENTRIES 4096
#define STATS_PERIOD_US 50000

static void arm_accept(struct tk_worker *w)
{
    struct io_uring_sqe *sqe = tk_uring_sqe(&w->ring);
    io_uring_prep_multishot_accept(sqe, w->listen_fd, NULL, NULL, SOCK_CLOEXEC);
    io_uring_sqe_set_data64(sqe, tk_ud(OP_ACCEPT, 0, 0));
    w->accept.armed = true;
}

/* Inline Raft: the peer ring's completions wake this ring. */
static void arm_raft_poll(struct tk_worker *w)
{
    struct io_uring_sqe *sqe = tk_uring_sqe(&w->ring);
    io_uring_prep_poll_multishot(sqe, w->raft_fd, POLLIN);
    io_uring_sqe_set_data64(sqe, tk_ud(OP_RAFT, 0, 0));
}

static void arm_wake(struct tk_worker *w)
{
    struct io_uring_sqe *sqe = tk_uring_sqe(&w->ring);
    io_uring_prep_read(sqe, w->wake.fd, &w->wake_buf, sizeof(w->wake_buf), 0);
    io_uring_sqe_set_data64(sqe, tk_ud(OP_WAKE, 0, 0));
}

/* ------------------------------------------------------------------ */
/* The shard (shard/shard.h): its messages go on the rings, its replies to
 * this worker's connections. */

static void *shard_put(void *ctx, uint32_t dst, uint32_t kind, uint32_t len)
{
    struct tk_worker *w = ctx;
    if (dst == TK_MSG_TO_DRIVER)
        return tk_outbox_put(&w->to_raft, kind, len);
    TK_ASSERT(dst < w->s->nworkers && dst != w->idx);
    return tk_outbox_put(&w->to_worker[dst], kind, len);
}

static void shard_reply(void *ctx, const struct tk_msg_reply *r)
{
    conn_deliver(ctx, r);
}

static void shard_refuse(void *ctx, uint64_t client, uint64_t id, uint8_t reason)
{
    (void)id;
    conn_refused(ctx, client, reason);
}

/* A waiter of this worker's table got its grant: ticketing_wait_seconds. */
static void shard_waited(void *ctx, uint64_t waited_us)
{
    struct tk_worker *w = ctx;
    tk_hist_add(&w->s->wait_hist[w->idx], tk_hist_latency_us, tk_hist_latency_n, waited_us);
}

static void shard_role(void *ctx, bool lead, const char *leader_addr)
{
    struct tk_worker *w = ctx;
    snprintf(w->leader_addr, sizeof(w->leader_addr), "%s", leader_addr);
    w->leader = lead;
    if (lead)
        return;
    for (uint32_t i = 0; i < w->nconns_alloc; i++) {
        struct conn *c = w->conns[i];
        if (c && c->state == CONN_READY)
            conn_moved(w, c);
    }
}

static unsigned drain_raft(struct tk_worker *w)
{
    const struct tk_ring_msg *m;
    unsigned n = 0;
    /* The clock of the apply: leases of grants applied here start now,
     * not at the start of the round. */
    w->now_us = tk_now_us();
    while ((m = tk_ring_peek(&w->from_raft)) != NULL) {
        n++;
        tk_shard_message(w->shard, w->now_us, TK_MSG_TO_DRIVER, m->kind, m->data, m->len);
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
            tk_shard_message(w->shard, w->now_us, j, m->kind, m->data, m->len);
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
    struct tk_ref ud = tk_ref_unpack(io_uring_cqe_get_data64(cqe));
    enum tk_op op = (enum tk_op)ud.tag;
    uint32_t slot = ud.slot, gen = ud.gen;
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
        case OP_RAFT:
            if (!(cqe->flags & IORING_CQE_F_MORE))
                arm_raft_poll(w);
            break;
        default:
            TK_ASSERT(!"unknown completion");
    }
}

static uint64_t next_deadline(struct tk_worker *w)
{
    uint64_t t = tk_shard_deadline(w->shard);
    uint64_t hs_at;
    if (tk_deadlines_next(&w->hs, &hs_at))
        t = TK_MIN(t, hs_at);
    if (!w->accept.armed)
        t = TK_MIN(t, w->accept.retry_at_us);
    return TK_MIN(t, w->now_us + 100000u); /* wake at least every 100 ms */
}

static void publish_stats(struct tk_worker *w)
{
    struct tk_shard_stats ss;
    tk_shard_stats(w->shard, &ss);
    const struct tk_lock_stats *ls = &ss.lock;
    w->stat[TK_WSTAT_reads_held] = ss.reads_held;
    w->stat[TK_WSTAT_read_barriers] = ss.read_barriers;
    w->stat[TK_WSTAT_keys] = ls->keys;
    w->stat[TK_WSTAT_accept_errors] = w->accept.errors;
    w->stat[TK_WSTAT_handshaking] = w->handshaking;
    w->stat[TK_WSTAT_held] = ls->held;
    w->stat[TK_WSTAT_waiters] = ls->waiters;
    w->stat[TK_WSTAT_deferred] = ls->deferred;
    w->stat[TK_WSTAT_in_flight] = ls->in_flight;
    w->stat[TK_WSTAT_grants] = ls->grants;
    w->stat[TK_WSTAT_handoffs] = ls->handoffs;
    w->stat[TK_WSTAT_releases] = ls->releases;
    w->stat[TK_WSTAT_expiries] = ls->expiries;
    w->stat[TK_WSTAT_busy_bound] = ls->busy_bound;
    uint64_t full = w->to_raft.full_count;
    for (uint32_t j = 0; j < w->s->nworkers; j++)
        full += w->to_worker[j].full_count;
    w->stat[TK_WSTAT_ring_full] = full;
    for (int i = 0; i < TK_WSTAT_COUNT; i++)
        atomic_store_explicit(&w->s->wstats[w->idx][i], w->stat[i], memory_order_relaxed);
    if (tk_shard_slots(w->shard) != NULL) {
        const uint32_t *held = tk_lock_slot_held(tk_shard_table(w->shard));
        for (uint32_t i = 0; i < TK_SLOTS; i++)
            atomic_store_explicit(&w->s->slot_held[w->idx][i], held[i], memory_order_relaxed);
    }
    w->stats_at = w->now_us;
}

static void flush_round(struct tk_worker *w)
{
    conn_flush_round(w);
    tk_shard_flush(w->shard);
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
    size_t br_bytes = TK_BUFRING_COUNT * sizeof(struct io_uring_buf);
    void *brmem = NULL;
    TK_ASSERT(posix_memalign(&brmem, 4096, br_bytes) == 0);
    w->br = brmem;
    w->bufs = malloc((size_t)TK_BUFRING_COUNT * TK_BUFRING_SIZE);
    TK_ASSERT(w->bufs != NULL);
    struct io_uring_buf_reg reg = {
        .ring_addr = (uint64_t)(uintptr_t)w->br, .ring_entries = TK_BUFRING_COUNT, .bgid = 0};
    rc = io_uring_register_buf_ring(&w->ring, &reg, 0);
    if (rc < 0) {
        tk_log(TK_LOG_ERROR, "worker %u: provided buffer rings unsupported by this kernel: %s",
               w->idx, strerror(-rc));
        return TK_EUNSUPPORTED;
    }
    io_uring_buf_ring_init(w->br);
    int mask = io_uring_buf_ring_mask(TK_BUFRING_COUNT);
    for (uint32_t i = 0; i < TK_BUFRING_COUNT; i++)
        io_uring_buf_ring_add(w->br, w->bufs + (size_t)i * TK_BUFRING_SIZE, TK_BUFRING_SIZE,
                              (unsigned short)i, mask, (int)i);
    io_uring_buf_ring_advance(w->br, TK_BUFRING_COUNT);
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
        struct io_uring_sqe *sqe = tk_uring_sqe(&w->ring);
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
    bool raft_inline = s->raft_inline && w->idx == 0;
    w->raft_fd = raft_inline ? tk_raftd_inline_fd(s) : -1;
    if (w->raft_fd >= 0)
        arm_raft_poll(w);
    bool stopping = false;
    bool did_work = false;
    for (;;) {
        /* Sleep only when idle: after a round that did work, poll once more
         * without blocking and leave the wake flag set, so producers skip
         * the eventfd write while work flows. (Spinning longer before
         * sleeping was measured worse on 2 shared cores: 3 nodes + load.) */
        bool block = !did_work || raft_inline;
        if (block) {
            tk_wake_clear(&w->wake);
            block = !rings_pending(w);
        }
        uint64_t deadline = next_deadline(w);
        uint64_t wait_us = block && deadline > w->now_us ? deadline - w->now_us : 0;
        if (raft_inline && wait_us)
            wait_us = TK_MIN(wait_us, tk_raftd_inline_wait_us(s));
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
        if (raft_inline)
            n += tk_raftd_inline_io(s); /* what committed is applied below */
        n += drain_raft(w);
        n += drain_workers(w);
        did_work = n != 0;
        conn_expire_handshakes(w);
        tk_shard_tick(w->shard, w->now_us);
        if (!stopping && tk_accept_due(&w->accept, w->now_us))
            arm_accept(w);
        if (!stopping && atomic_load_explicit(&s->stopping, memory_order_relaxed)) {
            stopping = true;
            begin_stop(w);
        }
        flush_round(w);
        if (raft_inline) {
            unsigned rn = 0;
            raft_inline = tk_raftd_inline_round(s, &rn); /* proposals leave in this round */
            did_work |= rn != 0;
        }
        if (w->now_us - w->stats_at >= STATS_PERIOD_US)
            publish_stats(w);
        if (stopping && w->stat[TK_WSTAT_conns_open] == 0)
            break;
    }
    publish_stats(w);
    io_uring_queue_exit(&w->ring);
    free(w->bufs);
    free(w->br);
    return NULL; /* what TLS kept for this thread goes now (tk_stream_tls_thread) */
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
    if (!w->conns || !w->free_slots || conn_deadlines_init(w, n) != TK_OK)
        return TK_ENOMEM;
    w->nconns_alloc = n;
    for (uint32_t i = 0; i < n; i++)
        w->free_slots[i] = n - 1 - i;
    w->nfree = n;
    if (tk_wake_init(&w->wake) != TK_OK)
        return TK_EIO;
    size_t ring_bytes = tk_ring_bytes_for(s->nworkers);
    for (uint32_t j = 0; j < s->nworkers; j++)
        if (j != idx && tk_ring_init(&w->inbox[j], ring_bytes) != TK_OK)
            return TK_ENOMEM;
    if (tk_ring_init(&w->from_raft, ring_bytes) != TK_OK ||
        tk_ring_init(&w->to_raft_ring, ring_bytes) != TK_OK)
        return TK_ENOMEM;
    s->from_raft[idx] = &w->from_raft; /* published for the Raft thread */
    s->to_raft[idx] = &w->to_raft_ring;
    s->worker_wake[idx] = &w->wake;
    uint32_t nw = s->nworkers;
    struct tk_shard_options so = {
        .idx = idx,
        .nshards = nw,
        .limits =
            {
                .keys_max = tk_shard_share(s->opt.max_keys, nw),
                .waiters_per_key_max = s->opt.max_waiters_per_key,
                .waiters_max = tk_shard_share(s->opt.max_waiters, nw),
                .drift_us = (uint64_t)s->opt.max_clock_drift_ms * 1000u,
            },
        .requests_max = (uint64_t)s->opt.max_connections * s->opt.max_inflight,
        .grouped = s->opt.group[0] != 0,
    };
    struct tk_msg_out out = {.ctx = w, .put = shard_put};
    struct tk_shard_client cl = {
        .ctx = w,
        .reply = shard_reply,
        .refuse = shard_refuse,
        .role = shard_role,
        .waited = shard_waited,
    };
    w->shard = tk_shard_create(&so, &out, &cl);
    if (!w->shard)
        return TK_ENOMEM;
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
        if (j != idx) {
            tk_outbox_init(&w->to_worker[j], &s->workers[j]->inbox[idx], &s->workers[j]->wake,
                           2 * requests + s->opt.max_connections);
            tk_outbox_set_producer(&w->to_worker[j], &w->wake);
        }
    tk_outbox_init(&w->to_raft, &w->to_raft_ring, tk_raftd_wake(s), s->opt.max_keys + requests + 2);
    tk_outbox_set_producer(&w->to_raft, &w->wake);
    w->listen_fd = tk_listen(s->opt.bind, s->opt.port,
                             idx == 0 ? TK_LISTEN_SHARE_FIRST : TK_LISTEN_SHARE_MORE);
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
    tk_deadlines_free(&w->hs);
    for (uint32_t j = 0; j < s->nworkers; j++) {
        if (j != idx)
            tk_ring_free(&w->inbox[j]);
        tk_outbox_free(&w->to_worker[j]);
    }
    tk_outbox_free(&w->to_raft);
    tk_ring_free(&w->from_raft);
    tk_ring_free(&w->to_raft_ring);
    tk_wake_close(&w->wake);
    tk_shard_destroy(w->shard);
    free(w);
    s->workers[idx] = NULL;
}
