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

uint64_t raftd_random_u64(void)
{
    uint64_t v = 0;
    TK_ASSERT(tk_auth_random(&v, sizeof(v)) == TK_OK);
    return v;
}

void raftd_send_role(struct tk_raftd *r, bool leader)
{
    r->epoch++;
    for (uint32_t i = 0; i < r->s->nworkers; i++) {
        struct tk_msg_role *m = tk_outbox_put(&r->to_worker[i], TK_MSG_ROLE, sizeof(*m));
        memset(m, 0, sizeof(*m));
        m->epoch = r->epoch;
        m->leader = leader;
        snprintf(m->leader_addr, sizeof(m->leader_addr), "%s", r->leader_client);
    }
}

static void send_u64s(struct tk_raftd *r,
                      uint32_t worker,
                      uint32_t kind,
                      uint64_t a,
                      uint64_t b,
                      uint32_t n)
{
    uint64_t *p = tk_outbox_put(&r->to_worker[worker], kind, n * 8);
    p[0] = a;
    if (n > 1)
        p[1] = b;
}

/* Hands every command of a committed DATA entry to the shard of its key. */
static void apply_entry(struct tk_raftd *r, const struct tk_raft_entry *e)
{
    TK_ASSERT(e->len >= 4);
    uint32_t ncmds;
    memcpy(&ncmds, e->data, 4);
    uint64_t expect = e->token_first;
    size_t off = 4;
    for (uint32_t i = 0; i < ncmds; i++) {
        struct tk_cmd c;
        size_t used;
        TK_ASSERT(tk_cmd_decode(e->data + off, e->len - off, &c, &used) == TK_OK);
        if (tk_cmd_grants(&c)) {
            TK_ASSERT(c.token == expect); /* tokens strictly increase in log order */
            expect++;
        }
        uint32_t shard = tk_cmd_shard(c.key, c.key_len, r->s->nworkers);
        void *p = tk_outbox_put(&r->to_worker[shard], TK_MSG_APPLY, (uint32_t)used);
        memcpy(p, e->data + off, used);
        off += used;
    }
    TK_ASSERT(off == e->len);
    TK_ASSERT(expect == tk_raft_entry_token_next(e));
    atomic_fetch_add_explicit(&r->m_commands, ncmds, memory_order_relaxed);
}

/* A follower replaces its lock state with the leader's snapshot. The Raft
 * core has already accepted it (its log now starts after install.index and
 * it counts the snapshot as applied), so a blob this node cannot load can
 * not be refused here and the node carry on: its tables would no longer
 * match the log it goes on applying. Hence the whole blob is checked first,
 * before any shard drops its state; a malformed one (a bug or corruption on
 * the leader) stops this process, cleanly and before anything changed, with
 * status 3 like a removed member: a restart joins again under a new NodeId
 * and gets a fresh snapshot. The asserts below cannot fire after the check. */
static void install_snapshot(struct tk_raftd *r, const uint8_t *data, size_t len)
{
    _Static_assert(sizeof(SNAP_MAGIC) == sizeof(TK_SNAP_MAGIC), "one magic for cut and install");
    uint64_t count = 0;
    const char *why = NULL;
    int rc = tk_snap_check(data, len, tk_raft_next_token(r->core), &count, &why);
    if (rc != TK_OK) {
        tk_log(TK_LOG_ERROR,
               "refusing a malformed snapshot from leader %016llx (%zu bytes): %s; the Raft log "
               "already moved past it, so this node cannot follow: exiting with status 3 (a "
               "restart joins again under a new NodeId)",
               (unsigned long long)tk_raft_leader(r->core), len, why);
        _exit(3);
    }
    for (uint32_t i = 0; i < r->s->nworkers; i++)
        tk_outbox_put(&r->to_worker[i], TK_MSG_CLEAR, 8);
    size_t off = TK_SNAP_HEADER_LEN;
    for (uint64_t i = 0; i < count; i++) {
        struct tk_cmd c;
        size_t at = off;
        TK_ASSERT(tk_snap_next(data, len, &off, &c) == TK_OK);
        uint32_t shard = tk_cmd_shard(c.key, c.key_len, r->s->nworkers);
        void *p = tk_outbox_put(&r->to_worker[shard], TK_MSG_RESTORE, (uint32_t)(off - at));
        memcpy(p, data + at, off - at);
    }
    TK_ASSERT(off == len);
    tk_log(TK_LOG_INFO, "installed snapshot: %llu held keys, %zu bytes", (unsigned long long)count,
           len);
}

static void update_roles(struct tk_raftd *r, const struct tk_raft_update *up)
{
    if (up->role != TK_RAFT_LEADER && r->leader_ready) {
        r->leader_ready = false;
        tk_log(TK_LOG_INFO, "stepped down in term %llu", (unsigned long long)up->term);
    }
    if (up->role == TK_RAFT_LEADER) {
        struct tk_raft_status st;
        tk_raft_status(r->core, &st);
        /* A forced new domain serves nothing until the lost domain's
         * leases have run out (SPEC 10, --new-domain-hold-ms). */
        const struct tk_raft_config *c = tk_raft_config(r->core);
        bool held = c && c->serve_after_us > tk_wall_us();
        if (!r->leader_ready && !held && r->applied >= st.term_start_index && st.term_start_index &&
            r->applied >= up->commit) {
            r->leader_ready = true;
            snprintf(r->leader_client, sizeof(r->leader_client), "%s", r->s->advertise);
            r->role_leader_id = r->s->node_id;
            raftd_send_role(r, true);
            tk_log(TK_LOG_INFO, "leading term %llu from index %llu", (unsigned long long)up->term,
                   (unsigned long long)st.term_start_index);
        }
        return;
    }
    /* Follower or candidate: tell the workers where clients should go. */
    const struct tk_raft_member *lm = up->leader_id ? raftd_member(r, up->leader_id) : NULL;
    const char *addr = lm ? lm->client_addr : "";
    if (r->role_leader_id == up->leader_id && !strcmp(addr, r->leader_client) && r->epoch)
        return;
    r->role_leader_id = up->leader_id;
    snprintf(r->leader_client, sizeof(r->leader_client), "%s", addr);
    raftd_send_role(r, false);
}

static void resolve_reads(struct tk_raftd *r, const struct tk_raft_update *up)
{
    for (uint32_t k = 0; k < up->n_reads; k++) {
        const struct tk_raft_read *rd = &up->reads[k];
        while (r->groups_len > 0) {
            struct read_group *g = &r->groups[r->groups_head];
            if (g->id > rd->id)
                break;
            bool ok = g->id == rd->id && rd->ok;
            for (uint32_t w = 0; w < r->s->nworkers; w++)
                if (g->round[w])
                    send_u64s(r, w, TK_MSG_READ_DONE, g->round[w], ok, 2);
            r->groups_head = (r->groups_head + 1) % READ_GROUPS_MAX;
            r->groups_len--;
            if (g->id == rd->id)
                break;
        }
    }
}

static void request_snapshot(struct tk_raftd *r, uint64_t index)
{
    if (r->snap_busy)
        return;
    TK_ASSERT(index == r->applied);
    r->snap_busy = true;
    r->snap_index = index;
    r->snap_parts = 0;
    for (uint32_t w = 0; w < r->s->nworkers; w++)
        send_u64s(r, w, TK_MSG_SNAP_REQ, index, 0, 1);
}

static void observe_commits(struct tk_raftd *r, uint64_t commit)
{
    while (r->pend_len > 0 && r->pending[r->pend_head].index <= commit) {
        struct pending_entry *pe = &r->pending[r->pend_head];
        uint64_t waited = r->now > pe->proposed_us ? r->now - pe->proposed_us : 0;
        raftd_hist_add(r, RAFTD_HIST_LATENCY, waited);
        r->pend_head = (r->pend_head + 1) % PENDING_MAX;
        r->pend_len--;
    }
}

/* Performs one update, then reports applied entries to the core and
 * performs what that returns, until nothing is left. */
void raftd_process(struct tk_raftd *r, int rc, struct tk_raft_update *up)
{
    (void)rc; /* failures of the event itself change nothing; the update stays valid */
    for (;;) {
        if (up->flags & TK_RAFT_UPDATE_SNAPSHOT_INSTALL) {
            install_snapshot(r, up->install.data, up->install.len);
            r->applied = up->install.index;
        }
        for (uint32_t i = 0; i < up->n_msgs; i++)
            raftd_send_msg(r, &up->msgs[i], NULL);
        if (up->flags & TK_RAFT_UPDATE_READS)
            resolve_reads(r, up);
        if (up->role != TK_RAFT_LEADER && r->pend_len)
            r->pend_len = 0;
        uint64_t commit = up->commit;
        bool advanced = commit > r->applied;
        for (uint64_t i = r->applied + 1; i <= commit; i++) {
            const struct tk_raft_entry *e = tk_raft_entry(r->core, i);
            TK_ASSERT(e != NULL);
            if (e->type == TK_RAFT_DATA)
                apply_entry(r, e);
        }
        if (advanced) {
            r->applied = commit;
            observe_commits(r, commit);
        }
        update_roles(r, up);
        if (up->flags & TK_RAFT_UPDATE_SNAPSHOT_WANTED)
            request_snapshot(r, up->snapshot_index);
        if (!advanced)
            return;
        rc = tk_raft_applied(r->core, r->applied, r->now, up);
    }
}

static void propose_batch(struct tk_raftd *r)
{
    if (r->batch_cmds == 0)
        return;
    memcpy(r->batch, &r->batch_cmds, 4);
    struct tk_raft_update up;
    if (!r->leader_ready || r->batch_epoch != r->epoch) {
        /* Leadership changed since the batch was built: its commands and
         * token numbers belong to an older epoch; drop it. */
        r->batch_cmds = r->batch_tokens = 0;
        r->batch_len = 4;
        return;
    }
    uint64_t first = tk_raft_next_token(r->core);
    int rc = tk_raft_propose(r->core, r->batch, (uint32_t)r->batch_len, first, r->batch_tokens,
                             r->now, &up);
    if (rc == TK_EFULL)
        return; /* the log is at its bound: keep the batch, try next round */
    TK_ASSERT(rc == TK_OK || rc == TK_ENOTLEADER);
    if (rc == TK_OK) {
        raftd_hist_add(r, RAFTD_HIST_BATCH, r->batch_cmds);
        atomic_fetch_add_explicit(&r->m_entries, 1, memory_order_relaxed);
        if (r->pend_len < PENDING_MAX) {
            r->pending[(r->pend_head + r->pend_len) % PENDING_MAX] =
                (struct pending_entry){up.index, r->batch_oldest_us};
            r->pend_len++;
        }
    }
    /* Not leader any more: the workers learn it from the update and drop
     * their in-flight state; the batch is discarded. */
    r->batch_cmds = r->batch_tokens = 0;
    r->batch_len = 4;
    raftd_process(r, rc, &up);
}

/* Adds one proposal to the batch, numbering its grant with the counter. */
static void batch_add(struct tk_raftd *r, const uint8_t *data, uint32_t len)
{
    uint64_t epoch, proposed_us;
    memcpy(&epoch, data, 8);
    memcpy(&proposed_us, data + 8, 8);
    if (!r->leader_ready || epoch != r->epoch)
        return; /* made under an older leadership: never proposed now */
    struct tk_cmd c;
    size_t used;
    TK_ASSERT(tk_cmd_decode(data + 16, len - 16, &c, &used) == TK_OK);
    if (r->batch_cmds == 0) {
        r->batch_oldest_us = proposed_us;
        r->batch_epoch = r->epoch;
    }
    if (tk_cmd_grants(&c)) {
        TK_ASSERT(c.token == 0);
        c.token = tk_raft_next_token(r->core) + r->batch_tokens;
        r->batch_tokens++;
    }
    size_t n = tk_cmd_encode(&c, r->batch + r->batch_len, BATCH_BYTES_MAX - r->batch_len);
    TK_ASSERT(n > 0);
    r->batch_len += n;
    r->batch_cmds++;
}

static void snapshot_part_free(struct tk_msg_snap_part *part)
{
    free(part->data);
    free(part->recs);
    part->data = NULL;
    part->recs = NULL;
}

static void snapshot_part(struct tk_raftd *r, const struct tk_msg_snap_part *part)
{
    if (!r->snap_busy || part->index != r->snap_index) {
        struct tk_msg_snap_part stale = *part;
        snapshot_part_free(&stale);
        return;
    }
    r->parts[r->snap_parts++] = *part;
    if (r->snap_parts < r->s->nworkers)
        return;
    /* Every shard cut at the same index, each part's records listed in
     * token order: merge them into one blob in token order (restore
     * applies in that order). */
    uint64_t count = 0;
    size_t bytes = 16;
    for (uint32_t w = 0; w < r->snap_parts; w++) {
        count += r->parts[w].count;
        bytes += r->parts[w].len;
    }
    uint8_t *blob = malloc(bytes);
    TK_ASSERT(blob != NULL);
    memcpy(blob, SNAP_MAGIC, 8);
    memcpy(blob + 8, &count, 8);
    size_t off = 16;
    uint64_t pos[TK_WORKERS_MAX] = {0};
    uint64_t last = 0;
    for (uint64_t k = 0; k < count; k++) {
        int best = -1;
        for (uint32_t w = 0; w < r->snap_parts; w++)
            if (pos[w] < r->parts[w].count &&
                (best < 0 || r->parts[w].recs[pos[w]].token < r->parts[best].recs[pos[best]].token))
                best = (int)w;
        TK_ASSERT(best >= 0);
        const struct tk_snap_rec *rec = &r->parts[best].recs[pos[best]++];
        TK_ASSERT(rec->token > last); /* tokens are unique and parts sorted */
        TK_ASSERT(rec->off + rec->len <= r->parts[best].len);
        last = rec->token;
        memcpy(blob + off, r->parts[best].data + rec->off, rec->len);
        off += rec->len;
    }
    TK_ASSERT(off == bytes);
    for (uint32_t w = 0; w < r->snap_parts; w++)
        snapshot_part_free(&r->parts[w]);
    r->snap_parts = 0;
    r->snap_busy = false;
    atomic_store(&r->m_last_snapshot_bytes, bytes);
    struct tk_raft_update up;
    int rc = tk_raft_snapshot(r->core, r->snap_index, blob, bytes, r->now, &up);
    if (rc != TK_OK)
        tk_log(TK_LOG_WARN, "snapshot at %llu refused: %s", (unsigned long long)r->snap_index,
               tk_strerror(rc));
    raftd_process(r, rc, &up);
}

/* True if a message waits in any worker's ring to the Raft thread. */
static bool rings_pending(struct tk_raftd *r)
{
    for (uint32_t i = 0; i < r->s->nworkers; i++)
        if (tk_ring_peek(tk_worker_outbox_to_raft(r->s, i)))
            return true;
    return false;
}

static unsigned drain_workers(struct tk_raftd *r)
{
    struct tk_server *s = r->s;
    unsigned count = 0;
    for (uint32_t i = 0; i < s->nworkers; i++) {
        struct tk_ring *ring = tk_worker_outbox_to_raft(s, i);
        const struct tk_ring_msg *m;
        while ((m = tk_ring_peek(ring)) != NULL) {
            count++;
            if (m->kind == TK_MSG_PROPOSE) {
                if (r->batch_cmds == BATCH_CMDS_MAX)
                    propose_batch(r);
                if (r->batch_cmds == BATCH_CMDS_MAX)
                    break; /* log full: leave the rest in the ring (push back) */
                batch_add(r, m->data, m->len);
            } else if (m->kind == TK_MSG_READ) {
                uint64_t round;
                memcpy(&round, m->data, 8);
                if (r->leader_ready)
                    r->want_round[i] = round;
                else
                    send_u64s(r, i, TK_MSG_READ_DONE, round, 0, 2);
            } else if (m->kind == TK_MSG_SNAP_PART) {
                struct tk_msg_snap_part part;
                memcpy(&part, m->data, sizeof(part));
                snapshot_part(r, &part);
            } else {
                TK_ASSERT(!"unexpected message kind to raft");
            }
            tk_ring_pop(ring, m);
        }
    }
    propose_batch(r);
    /* One read barrier covers every read the workers asked for so far. */
    bool any = false;
    for (uint32_t i = 0; i < s->nworkers; i++)
        any |= r->want_round[i] != 0;
    if (any && r->groups_len < READ_GROUPS_MAX) {
        struct read_group *g = &r->groups[(r->groups_head + r->groups_len) % READ_GROUPS_MAX];
        g->id = ++r->next_read_id;
        memcpy(g->round, r->want_round, sizeof(g->round));
        struct tk_raft_update up;
        int rc = tk_raft_read(r->core, g->id, r->now, &up);
        if (rc == TK_EFULL) {
            r->next_read_id--;
        } else {
            r->groups_len++;
            memset(r->want_round, 0, sizeof(r->want_round));
            if (rc != TK_OK) { /* not leader: these reads fail */
                struct tk_raft_read fail = {.id = g->id, .ok = 0};
                struct tk_raft_update fu = {.reads = &fail, .n_reads = 1};
                resolve_reads(r, &fu);
            }
            raftd_process(r, rc, &up);
        }
    }
    return count;
}

static void flush_all(struct tk_raftd *r)
{
    for (uint32_t i = 0; i < r->s->nworkers; i++)
        tk_outbox_flush(&r->to_worker[i]);
}

static void bootstrap_standalone(struct tk_raftd *r)
{
    uint64_t wall = tk_wall_us();
    TK_ASSERT(wall >= TOKEN_EPOCH_US); /* checked before the threads start */
    struct tk_raft_config c = {
        .domain_lo = raftd_random_u64(), .domain_hi = raftd_random_u64(), .n = 1};
    c.m[0].id = r->s->node_id;
    c.m[0].role = TK_RAFT_VOTER;
    snprintf(c.m[0].peer_addr, sizeof(c.m[0].peer_addr), "%s", r->peer_addr[0]);
    snprintf(c.m[0].client_addr, sizeof(c.m[0].client_addr), "%s", r->s->advertise);
    struct tk_raft_update up;
    int rc = tk_raft_bootstrap(r->core, &c, wall, r->now, &up);
    TK_ASSERT(rc == TK_OK);
    tk_log(TK_LOG_INFO, "standalone fencing domain %016llx%016llx, first token %llu",
           (unsigned long long)c.domain_hi, (unsigned long long)c.domain_lo,
           (unsigned long long)wall);
    raftd_process(r, rc, &up);
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

static void *raftd_main(void *arg)
{
    struct tk_raftd *r = arg;
    struct tk_server *s = r->s;
    pthread_setname_np(pthread_self(), "tk-raft");
    r->now = tk_now_us();
    if (!r->peers)
        bootstrap_standalone(r);
    flush_all(r);
    uint64_t drain_deadline = 0;
    bool did_work = false;
    for (;;) {
        /* Sleep only when idle (see worker_main): while work flows the wake
         * flag stays set and workers skip the eventfd write. */
        bool block = !did_work;
        if (block) {
            tk_wake_clear(&r->wake);
            block = !rings_pending(r);
        }
        uint64_t deadline = TK_MIN(tk_raft_deadline(r->core), r->now + 50000u);
        if (r->peers)
            deadline = TK_MIN(deadline, r->probe_at);
        uint64_t wait = block && deadline > r->now ? deadline - r->now : 0;
        unsigned n = 0;
        if (r->peers)
            n = tk_peers_run(r->peers, wait);
        else if (wait)
            wait_standalone(r, wait);
        r->now = tk_now_us();
        atomic_store_explicit(&s->progress_us[TK_WORKERS_MAX], r->now, memory_order_relaxed);
        if (tk_raft_deadline(r->core) <= r->now) {
            struct tk_raft_update up;
            int rc = tk_raft_tick(r->core, r->now, &up);
            raftd_process(r, rc, &up);
        }
        n += drain_workers(r);
        did_work = n != 0;
        raftd_probe_peers(r);
        raftd_members_step(r);
        if (r->now - r->pub_at >= STATUS_PERIOD_US)
            raftd_publish(r);
        flush_all(r);
        if (atomic_load_explicit(&s->draining, memory_order_relaxed)) {
            /* SIGTERM: hand leadership to the most up-to-date voter first,
             * so a rolling restart causes no election gap (SPEC 8). */
            if (!drain_deadline) {
                drain_deadline = r->now + DRAIN_TRANSFER_US;
                if (r->peers && tk_raft_role(r->core) == TK_RAFT_LEADER) {
                    struct tk_raft_update up;
                    int rc = tk_raft_transfer(r->core, 0, r->now, &up);
                    tk_log(TK_LOG_INFO, "shutting down: transferring leadership (%s)",
                           tk_strerror(rc));
                    raftd_process(r, rc, &up);
                    flush_all(r);
                }
            }
            bool leading = r->peers && tk_raft_role(r->core) == TK_RAFT_LEADER;
            if (!leading || r->now >= drain_deadline)
                break;
        }
        if (atomic_load_explicit(&s->stopping, memory_order_relaxed))
            break;
    }
    /* Let the peers see our last messages (TimeoutNow) before we go. */
    if (r->peers)
        tk_peers_run(r->peers, 20000);
    raftd_publish(r);
    atomic_store(&s->stopping, 1);
    for (uint32_t i = 0; i < s->nworkers; i++)
        tk_wake_signal(tk_worker_wake(s, i));
    return NULL;
}

int tk_raftd_create(struct tk_server *s)
{
    struct tk_raftd *r = calloc(1, sizeof(*r));
    if (!r)
        return TK_ENOMEM;
    s->raft = r;
    r->s = s;
    pthread_mutex_init(&r->pub_mu, NULL);
    r->batch = malloc(BATCH_BYTES_MAX);
    if (!r->batch)
        return TK_ENOMEM;
    r->batch_len = 4;
    if (tk_wake_init(&r->wake) != TK_OK)
        return TK_EIO;
    if (tk_wall_us() < TOKEN_EPOCH_US) {
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
    r->core = tk_raft_create(&o);
    if (!r->core)
        return TK_ENOMEM;
    r->join_reply = 0xff;
    if (s->opt.peers[0]) {
        r->membership = RAFTD_BOOTSTRAPPING;
        struct tk_peer_cb cb = {.frame = raftd_on_frame, .ctx = r};
        rc = tk_peers_create(s, &cb, r->wake.fd, &r->peers);
        if (rc != TK_OK)
            return rc;
        for (uint32_t i = 0; i < r->npeers; i++)
            if (i != r->self)
                tk_peers_dial(r->peers, r->peer_addr[i]);
    }
    raftd_publish(r);
    return TK_OK;
}

int tk_raftd_start(struct tk_server *s)
{
    struct tk_raftd *r = s->raft;
    for (uint32_t i = 0; i < s->nworkers; i++)
        /* Committed commands wait here only while the log holds them:
         * at most a full batch per entry in memory, plus role, read and
         * snapshot messages. */
        tk_outbox_init(&r->to_worker[i], tk_worker_inbox_from_raft(s, i), tk_worker_wake(s, i),
                       (s->opt.max_log_entries + 1) * BATCH_CMDS_MAX + READ_GROUPS_MAX + 64);
    if (pthread_create(&r->thread, NULL, raftd_main, r) != 0)
        return TK_EIO;
    return TK_OK;
}

void tk_raftd_join(struct tk_server *s)
{
    tk_wake_signal(&s->raft->wake);
    pthread_join(s->raft->thread, NULL);
}

void tk_raftd_destroy(struct tk_server *s)
{
    struct tk_raftd *r = s->raft;
    if (!r)
        return;
    for (uint32_t i = 0; i < s->nworkers; i++)
        tk_outbox_free(&r->to_worker[i]);
    for (uint32_t w = 0; w < r->snap_parts; w++)
        snapshot_part_free(&r->parts[w]);
    tk_peers_destroy(r->peers);
    if (r->core)
        tk_raft_destroy(r->core);
    tk_wake_close(&r->wake);
    pthread_mutex_destroy(&r->pub_mu);
    free(r->batch);
    free(r);
    s->raft = NULL;
}

struct tk_wake *tk_raftd_wake(struct tk_server *s)
{
    return &s->raft->wake;
}

bool tk_raftd_ready(struct tk_server *s)
{
    return atomic_load(&s->raft->ready) != 0;
}
