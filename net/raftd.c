/* The Raft thread: the driver of the pure Raft core (raft/raft.h).
 *
 * It drains the proposals of every shard into one DATA entry per round,
 * numbers their grants with the fencing counter (SPEC 7), proposes, sends
 * the core's messages to peers (net/peer.c), and hands committed commands
 * to the shards that own their keys, on every node (ARCHITECTURE.md).
 *
 * A standalone node (no --peers) runs the same path with a configuration
 * of one voter: it bootstraps at start and every entry commits at once.
 *
 * Roles reach the workers as TK_MSG_ROLE messages on the same rings as the
 * committed commands, so a worker has applied every earlier entry when it
 * learns that it leads. A new leader announces itself only after its term's
 * first entry is committed and applied (SPEC 6: it serves from committed
 * state). Every role message carries a new epoch; proposals from an older
 * epoch are discarded, never proposed under a newer leadership.
 *
 * DATA entry payload: u32 ncmds | tk_cmd encodings (tokens filled in).
 * Snapshot blob: "TKSNAP01" | u64 count | GRANT encodings in token order.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/auth.h"
#include "core/snap.h"
#include "net/raftd.h"
#include "shard/shard.h"

static void raftd_clock(struct tk_raftd *r)
{
    r->now = tk_now_us();
    tk_driver_clock(r->d, r->now, tk_wall_us());
}

/* The peer ring woke the Raft thread: the clock first, then the frames. A
 * pre-vote judged by a clock read before a 50 ms wait saw a dead leader as
 * alive and went unanswered. */
static void raftd_woke(void *ctx)
{
    raftd_clock(ctx);
}

static void *raftd_put(void *ctx, uint32_t dst, uint32_t kind, uint32_t len)
{
    struct tk_raftd *r = ctx;
    TK_ASSERT(dst < r->s->nworkers);
    if (kind != TK_MSG_APPLY)
        r->urgent[dst] = true;
    return tk_outbox_put(&r->to_worker[dst], kind, len);
}

static void raftd_io_fatal(void *ctx, const char *why)
{
    struct tk_raftd *r = ctx;
    tk_log(TK_LOG_ERROR,
           "cannot load what leader %016llx committed: %s; the Raft log already moved past it, so "
           "this node cannot follow: exiting with status 3 (a restart joins again under a new "
           "NodeId)",
           (unsigned long long)tk_driver_leader_id(r->d), why);
    _exit(3);
}

static void raftd_io_event(void *ctx, int ev, uint64_t a, uint64_t b)
{
    (void)ctx;
    unsigned long long x = a, y = b;
    switch (ev) {
        case TK_DRIVER_EV_LEADING:
            tk_log(TK_LOG_INFO, "leading term %llu from index %llu", x, y);
            break;
        case TK_DRIVER_EV_STEPPED_DOWN:
            tk_log(TK_LOG_INFO, "stepped down in term %llu", x);
            break;
        case TK_DRIVER_EV_INSTALLED:
            tk_log(TK_LOG_INFO, "installed snapshot: %llu held keys, %llu bytes", x, y);
            break;
        case TK_DRIVER_EV_SNAPSHOT_REFUSED:
            tk_log(TK_LOG_WARN, "snapshot at %llu refused: %s", x, tk_strerror((int)b));
            break;
        case TK_DRIVER_EV_BOOTSTRAP:
            tk_log(TK_LOG_INFO, "fencing domain written with %llu voters, first token %llu", y, x);
            break;
        case TK_DRIVER_EV_BOOTSTRAP_FAILED:
            tk_log(TK_LOG_ERROR, "bootstrap refused: %s", tk_strerror((int)a));
            break;
        case TK_DRIVER_EV_BATCH_REFUSED:
            tk_log(TK_LOG_WARN,
                   "%llu proposed commands refused (%s): clients were told to reconnect", x,
                   tk_strerror((int)b));
            break;
        case TK_DRIVER_EV_HELD: {
            char when[32];
            tk_log(TK_LOG_WARN,
                   "a forced new domain: serving nothing until %s (its hold plus "
                   "--max-clock-drift-ms) and for %llu ms more on this node's own clock",
                   tk_wall_str(a, when, sizeof(when)), (unsigned long long)(b / 1000u));
            break;
        }
        default:
            TK_ASSERT(!"unknown driver event");
    }
}

uint64_t raftd_random_u64(void)
{
    uint64_t v = 0;
    TK_ASSERT(tk_auth_random(&v, sizeof(v)) == TK_OK);
    return v;
}

_Static_assert((int)TK_DRIVER_LOG_ERROR == (int)TK_LOG_ERROR &&
                   (int)TK_DRIVER_LOG_WARN == (int)TK_LOG_WARN &&
                   (int)TK_DRIVER_LOG_INFO == (int)TK_LOG_INFO,
               "driver log levels are the server's");

static void raftd_io_log(void *ctx, int level, const char *line)
{
    (void)ctx;
    tk_log(level, "%s", line);
}

/* True if a message waits in any worker's ring to the Raft thread. */
static bool rings_pending(struct tk_raftd *r)
{
    for (uint32_t i = 0; i < r->s->nworkers; i++)
        if (tk_ring_peek(tk_worker_outbox_to_raft(r->s, i)))
            return true;
    return false;
}

/* Every shard's messages, in ring order per shard; a full log never stops
 * the reading (the driver keeps complete batches waiting). */
static unsigned drain_workers(struct tk_raftd *r)
{
    struct tk_server *s = r->s;
    unsigned count = 0;
    for (uint32_t i = 0; i < s->nworkers; i++) {
        struct tk_ring *ring = tk_worker_outbox_to_raft(s, i);
        const struct tk_ring_msg *m;
        while ((m = tk_ring_peek(ring)) != NULL) {
            count++;
            tk_driver_message(r->d, i, m->kind, m->data, m->len);
            tk_ring_pop(ring, m);
        }
    }
    tk_driver_flush(r->d);
    return count;
}

/* Hands the round's messages to the workers. A leader wakes them at once:
 * clients wait for every committed command. A follower's committed
 * commands only keep its tables current for a later leadership, so they
 * are published quietly and the workers woken once per FOLLOWER_APPLY_US
 * (or when a quarter of a ring fills): on a busy cluster this saves a
 * worker wakeup per Append. Anything else (a role, a snapshot request or
 * install, a read result) wakes the worker at once, and it applies every
 * earlier message first, so a new leader's tables are complete before it
 * serves. */
static void flush_all(struct tk_raftd *r)
{
    /* Inline, the worker is this thread: it applies right after anyway. */
    bool lazy = r->peers && !r->s->raft_inline && tk_driver_role(r->d) == TK_RAFT_FOLLOWER;
    bool due = r->apply_wake_at && r->now >= r->apply_wake_at;
    bool pending = false;
    for (uint32_t i = 0; i < r->s->nworkers; i++) {
        struct tk_outbox *o = &r->to_worker[i];
        uint64_t quarter = (o->ring->mask + 1) / 4;
        if (lazy && !due && !r->urgent[i] && !tk_outbox_busy(o) &&
            tk_ring_used(o->ring) < quarter) {
            tk_outbox_flush_quiet(o);
            pending |= o->unsignaled;
        } else {
            tk_outbox_flush(o);
        }
        r->urgent[i] = false;
    }
    if (!pending)
        r->apply_wake_at = 0;
    else if (!r->apply_wake_at)
        r->apply_wake_at = r->now + FOLLOWER_APPLY_US;
}

static void bootstrap_standalone(struct tk_raftd *r)
{
    struct tk_raft_config c = {
        .domain_lo = raftd_random_u64(), .domain_hi = raftd_random_u64(), .n = 1};
    c.m[0].id = r->s->node_id;
    c.m[0].role = TK_RAFT_VOTER;
    snprintf(c.m[0].peer_addr, sizeof(c.m[0].peer_addr), "%s", r->peer_addr[0]);
    snprintf(c.m[0].client_addr, sizeof(c.m[0].client_addr), "%s", r->s->advertise);
    tk_log(TK_LOG_INFO, "standalone fencing domain %016llx%016llx", (unsigned long long)c.domain_hi,
           (unsigned long long)c.domain_lo);
    TK_ASSERT(tk_driver_bootstrap(r->d, &c, 0) == TK_OK); /* the wall clock was checked */
    raftd_after_driver(r);
}

/* Standalone: no peer sockets, so a plain wait on the wake eventfd. */
static void wait_standalone(struct tk_raftd *r, uint64_t timeout_us)
{
    struct pollfd pfd = {.fd = r->wake.fd, .events = POLLIN};
    int ms = (int)((timeout_us + 999u) / 1000u);
    if (poll(&pfd, 1, ms) > 0) {
        uint64_t v;
        ssize_t n = read(r->wake.fd, &v, sizeof(v));
        (void)n;
    }
}

static void raftd_start_loop(struct tk_raftd *r)
{
    raftd_clock(r);
    if (!r->peers)
        bootstrap_standalone(r);
    flush_all(r);
}

/* Before a wait: clears the wakeup and says how long the loop may sleep
 * (0: work is waiting). Sleep only when idle (see worker_main): while work
 * flows the wake flag stays set and workers skip the eventfd write. */
static uint64_t raftd_wait_us(struct tk_raftd *r, bool after_work)
{
    bool block = !after_work;
    if (block) {
        tk_wake_clear(&r->wake);
        block = !rings_pending(r);
    }
    uint64_t deadline = TK_MIN(tk_driver_deadline(r->d), r->now + 50000u);
    if (r->apply_wake_at)
        deadline = TK_MIN(deadline, r->apply_wake_at);
    if (r->peers)
        deadline = TK_MIN(deadline, r->prune_at);
    return block && deadline > r->now ? deadline - r->now : 0;
}

/* After the wait and the peer I/O: the clock (unless the caller read it
 * just before the I/O) and the test hook. */
static void raftd_after_io(struct tk_raftd *r, bool clock)
{
    struct tk_server *s = r->s;
    if (r->peers && atomic_exchange_explicit(&s->peer_tls_reload, 0, memory_order_relaxed))
        tk_peers_tls_reload(r->peers);
    if (clock)
        raftd_clock(r);
    atomic_store_explicit(&s->progress_us[TK_WORKERS_MAX], r->now, memory_order_relaxed);
    if (r->test_stall_us && tk_driver_serving(r->d)) {
        /* Test hook (TK_TEST_STALL_RAFT_MS): a Raft thread stuck for
         * that long, once, so /healthz can be seen failing. */
        usleep((useconds_t)r->test_stall_us);
        r->test_stall_us = 0;
    }
}

/* The rest of a round: timers, the shards' proposals, membership, status,
 * the messages to the workers. n: messages the I/O part handled. Returns
 * false once the loop should end. */
static bool raftd_round(struct tk_raftd *r, unsigned n)
{
    struct tk_server *s = r->s;
    tk_driver_tick(r->d);
    n += drain_workers(r);
    raftd_after_driver(r);
    r->did_work = n != 0;
    if (r->peers && r->now >= r->prune_at) {
        r->prune_at = r->now + PRUNE_PERIOD_US;
        tk_peers_prune(r->peers, raftd_dial_ok, r); /* members that left */
    }
    if (r->now - r->pub_at >= STATUS_PERIOD_US)
        raftd_publish(r);
    flush_all(r);
    if (atomic_load_explicit(&s->draining, memory_order_relaxed)) {
        /* SIGTERM: hand leadership to the most up-to-date voter first,
         * so a rolling restart causes no election gap (SPEC 8). */
        if (!r->drain_deadline) {
            r->drain_deadline = r->now + DRAIN_TRANSFER_US;
            if (r->peers && tk_driver_role(r->d) == TK_RAFT_LEADER) {
                int rc = tk_driver_transfer(r->d);
                tk_log(TK_LOG_INFO, "shutting down: transferring leadership (%s)", tk_strerror(rc));
                flush_all(r);
            }
        }
        bool leading = r->peers && tk_driver_role(r->d) == TK_RAFT_LEADER;
        if (!leading || r->now >= r->drain_deadline)
            return false;
    }
    return !atomic_load_explicit(&s->stopping, memory_order_relaxed);
}

static void raftd_end_loop(struct tk_raftd *r)
{
    struct tk_server *s = r->s;
    /* Let the peers see our last messages (TimeoutNow) before we go. */
    if (r->peers)
        tk_peers_run(r->peers, 20000);
    raftd_publish(r);
    atomic_store(&s->stopping, 1);
    for (uint32_t i = 0; i < s->nworkers; i++)
        tk_wake_signal(tk_worker_wake(s, i));
    atomic_store(&r->finished, 1);
}

static void *raftd_main(void *arg)
{
    struct tk_raftd *r = arg;
    pthread_setname_np(pthread_self(), "tk-raft");
    raftd_start_loop(r);
    for (;;) {
        uint64_t wait = raftd_wait_us(r, r->did_work);
        unsigned n = 0;
        if (r->peers)
            n = tk_peers_run(r->peers, wait); /* reads the clock: raftd_woke */
        else if (wait)
            wait_standalone(r, wait);
        raftd_after_io(r, !r->peers);
        if (!raftd_round(r, n))
            break;
    }
    raftd_end_loop(r);
    return NULL;
}

/* ------------------------------------------------------------------ */
/* Inline: worker 0 runs the loop above, one piece at a time. Its ring
 * polls the peer ring's file, so peer I/O wakes it like a client's. */

int tk_raftd_inline_fd(struct tk_server *s)
{
    struct tk_raftd *r = s->raft;
    return r->peers ? tk_peers_ring_fd(r->peers) : -1;
}

unsigned tk_raftd_inline_io(struct tk_server *s)
{
    struct tk_raftd *r = s->raft;
    if (atomic_load_explicit(&r->finished, memory_order_relaxed))
        return 0;
    if (!r->started) {
        raftd_start_loop(r);
        r->started = true;
    }
    raftd_clock(r); /* before the frames: the worker just woke */
    unsigned n = r->peers ? tk_peers_reap(r->peers) : 0;
    raftd_after_io(r, false);
    flush_all(r); /* what committed reaches the worker in this round */
    r->io_work = n;
    return n;
}

bool tk_raftd_inline_round(struct tk_server *s, unsigned *work)
{
    struct tk_raftd *r = s->raft;
    if (atomic_load_explicit(&r->finished, memory_order_relaxed))
        return false;
    bool go_on = raftd_round(r, r->io_work);
    r->io_work = 0;
    *work += r->did_work;
    if (r->peers)
        tk_peers_submit(r->peers); /* this round's Appends leave now */
    if (!go_on)
        raftd_end_loop(r);
    return go_on;
}

uint64_t tk_raftd_inline_wait_us(struct tk_server *s)
{
    struct tk_raftd *r = s->raft;
    if (atomic_load_explicit(&r->finished, memory_order_relaxed))
        return UINT64_MAX;
    /* No second look after a busy round: the worker's rings are checked,
     * and peer completions wake the worker's ring by themselves. */
    return raftd_wait_us(r, false);
}

int tk_raftd_create(struct tk_server *s)
{
    struct tk_raftd *r = calloc(1, sizeof(*r));
    if (!r)
        return TK_ENOMEM;
    s->raft = r;
    r->s = s;
    pthread_mutex_init(&r->pub_mu, NULL);
    if (tk_wake_init(&r->wake) != TK_OK)
        return TK_EIO;
    tk_wake_init_local(&r->local_wake);
    /* Published for the workers (their wakes are already: they are made
     * first). Inline, worker 0 runs the loop and a proposal costs no
     * wakeup. */
    s->raft_wake = s->raft_inline ? &r->local_wake : &r->wake;
    s->raft_loop_wake = s->raft_inline ? tk_worker_wake(s, 0) : &r->wake;
    if (tk_wall_us() < TK_DRIVER_TOKEN_EPOCH_US) {
        tk_log(TK_LOG_ERROR, "wall clock reads before 2026-01-01; refusing to start a domain");
        return TK_EINVAL;
    }
    int rc = raftd_parse_peers(r);
    if (rc != TK_OK)
        return rc;
    struct tk_raft_options o;
    tk_raft_options_default(&o, s->node_id, raftd_random_u64());
    o.heartbeat_us = (uint64_t)s->opt.heartbeat_ms * 1000u;
    o.election_min_us = (uint64_t)s->opt.election_ms * 1000u;
    o.election_max_us = o.election_min_us + 100000u;
    if (o.election_min_us <= o.heartbeat_us) {
        tk_log(TK_LOG_ERROR, "--election-ms must exceed --heartbeat-ms");
        return TK_EINVAL;
    }
    o.log_entries_max = s->opt.max_log_entries;
    o.snapshot_entries = TK_MAX(s->opt.max_log_entries / 4, 8);
    o.snapshot_trailing = TK_MIN(o.snapshot_entries / 2, 1024);
    struct tk_driver_options dopt = {.nshards = s->nworkers, .raft = o};
    /* Proposals waiting for log room: one per key in flight, in every
     * shard's share of --max-keys. */
    dopt.proposals_max =
        tk_driver_proposals_for(tk_shard_share(s->opt.max_keys, s->nworkers), s->nworkers);
    snprintf(dopt.advertise, sizeof(dopt.advertise), "%s", s->advertise);
    snprintf(dopt.group, sizeof(dopt.group), "%s", s->opt.group);
    dopt.drift_us = (uint64_t)s->opt.max_clock_drift_ms * 1000u;
    dopt.hold_us = (uint64_t)s->opt.new_domain_hold_ms * 1000u;
    struct tk_msg_out out = {.ctx = r, .put = raftd_put};
    if (s->opt.peers[0]) {
        struct tk_driver_cluster *cl = &dopt.cluster;
        cl->npeers = r->npeers;
        cl->self = r->self;
        for (uint32_t i = 0; i < r->npeers; i++)
            snprintf(cl->peer_addr[i], sizeof(cl->peer_addr[i]), "%s", r->peer_addr[i]);
        cl->peers_hash = r->peers_hash;
        cl->force_new_domain = s->opt.force_new_domain;
        cl->seed = raftd_random_u64();
    }
    struct tk_driver_io io = {.ctx = r,
                              .send = raftd_io_send,
                              .reply = raftd_io_reply,
                              .close_link = raftd_io_close_link,
                              .link_id = raftd_io_link_id,
                              .log = raftd_io_log,
                              .event = raftd_io_event,
                              .sample = raftd_hist_add,
                              .fatal = raftd_io_fatal};
    r->d = tk_driver_create(&dopt, &out, &io);
    if (!r->d)
        return TK_ENOMEM;
    if (s->opt.peers[0]) {
        struct tk_peer_cb cb = {
            .frame = raftd_on_frame, .woke = raftd_woke, .peer_cert = raftd_peer_cert, .ctx = r};
        rc = tk_peers_create(s, r->peer_addr[r->self], &cb, r->wake.fd, &r->peers);
        if (rc != TK_OK)
            return rc;
        for (uint32_t i = 0; i < r->npeers; i++)
            if (i != r->self)
                tk_peers_dial(r->peers, r->peer_addr[i]);
    }
    const char *stall = getenv("TK_TEST_STALL_RAFT_MS");
    if (stall && atoi(stall) > 0) {
        r->test_stall_us = (uint64_t)atoi(stall) * 1000u;
        tk_log(TK_LOG_WARN, "test hook: the Raft thread will stall once for %s ms", stall);
    }
    raftd_publish(r);
    return TK_OK;
}

int tk_raftd_start(struct tk_server *s)
{
    struct tk_raftd *r = s->raft;
    for (uint32_t i = 0; i < s->nworkers; i++) {
        /* Committed commands wait here only while the log holds them:
         * at most a full batch per entry in memory, plus role, read and
         * snapshot messages. */
        tk_outbox_init(&r->to_worker[i], tk_worker_inbox_from_raft(s, i),
                       s->raft_inline ? &r->local_wake : tk_worker_wake(s, i),
                       (s->opt.max_log_entries + 1) * TK_DRIVER_BATCH_CMDS_MAX +
                           TK_DRIVER_READ_GROUPS_MAX + 64);
        tk_outbox_set_producer(&r->to_worker[i], &r->wake);
    }
    if (s->raft_inline)
        return TK_OK; /* worker 0 runs the loop */
    if (pthread_create(&r->thread, NULL, raftd_main, r) != 0)
        return TK_EIO;
    return TK_OK;
}

void tk_raftd_join(struct tk_server *s, bool workers_running)
{
    struct tk_raftd *r = s->raft;
    if (!s->raft_inline) {
        tk_wake_signal(&r->wake);
        pthread_join(r->thread, NULL);
        return;
    }
    /* Worker 0 ends the loop: at once, or after a leadership transfer. */
    tk_wake_signal(tk_worker_wake(s, 0));
    while (workers_running && !atomic_load(&r->finished) && !atomic_load(&s->failed))
        usleep(1000);
}

void tk_raftd_destroy(struct tk_server *s)
{
    struct tk_raftd *r = s->raft;
    if (!r)
        return;
    for (uint32_t i = 0; i < s->nworkers; i++)
        tk_outbox_free(&r->to_worker[i]);
    tk_peers_destroy(r->peers);
    tk_driver_destroy(r->d);
    tk_wake_close(&r->wake);
    pthread_mutex_destroy(&r->pub_mu);
    free(r);
    s->raft = NULL;
}

bool tk_raftd_ready(struct tk_server *s)
{
    return atomic_load(&s->raft->ready) != 0;
}
