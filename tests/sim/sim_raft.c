/* Deterministic simulation of a Raft cluster of 3 or 5 nodes under random
 * faults (tests/support/sim_cluster.h); in 3 seeds of 4 every node runs the
 * production node code, its Raft driver and 1..4 shards, with clients
 * (tests/support/sim_node.h).
 *
 * Per seed: a cluster bootstraps, then random events run for a budget of
 * steps: client requests, proposals, read barriers, leadership transfers,
 * partitions (whole splits, single links, one-way cuts), pauses, crashes
 * (a crashed node stays down; a fresh NodeId replaces it through the
 * membership path: learner, promote, remove), with message drops,
 * duplicates and reordering on the fake network. Then the faults heal and
 * the cluster must converge (liveness).
 *
 * Checked after every step by the harness: Election Safety, Log Matching,
 * Leader Completeness, State Machine Safety, commit monotonic, tokens
 * strictly increasing along the committed log, linearizable read index.
 * Checked by the node layer (3 of 4 seeds; the 4th runs raw random
 * entries on bare cores): a reference model of the committed lock state
 * that every shard's table and every installed snapshot must match, at
 * most one client holding a key at any moment by its lease clock, G tokens
 * strictly increasing, FIFO grants within a leadership, no expiry before
 * the lease ran out, linearizable Q and N, and liveness once healed (the
 * full list is in sim_node.h). Per seed the node layer varies: shards per
 * node, 4..64 keys or thousands (large snapshots in many chunks), delays
 * between a node's threads and stalls of them (some longer than an
 * election), leaders that stall for seconds while their clients' requests
 * wait in their sockets, node clocks that drift (+-0.05%) and jump forward
 * (within the lease margin), messages that arrive terms late, and log
 * bounds small enough that proposals wait in the driver for room
 * (TK_EFULL). A seed whose network grows without bound (a message storm)
 * fails too.
 *
 * Environment: TK_SEED=n replays one seed (verbose); TK_SIM_SEEDS=n sets
 * how many seeds to run (default 2000), TK_SIM_FIRST=n the first one;
 * TK_SIM_STEPS=n the events per seed (default 4000); TK_SIM_TRACE=1
 * prints every node-layer event; TK_SIM_TRUE_CLOCK=1 has the clients count
 * leases on the true clock instead of their node's (sim_node.h).
 * Exit 0 when every seed passes; a failure prints its seed and aborts.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "raft/members.h"
#include "raft/raft.h"
#include "tests/support/sim_cluster.h"
#include "tests/support/sim_node.h"

#define MS 1000ull
#define SEC 1000000ull

static volatile uint64_t current_seed;

static void on_abort(int sig)
{
    (void)sig;
    char buf[96];
    int n = snprintf(buf, sizeof(buf), "sim_raft: aborted while running seed %llu (TK_SEED=%llu)\n",
                     (unsigned long long)current_seed, (unsigned long long)current_seed);
    if (n > 0)
        (void)!write(2, buf, (size_t)n);
}

/* A seed whose network grows without bound fails instead of taking the
 * machine's memory: a message storm is a bug too. */
#define STORM_MESSAGES_MAX 200000u

static void storm_guard(struct sim_cluster *c)
{
    if (c->heap_n > STORM_MESSAGES_MAX)
        sim_fail(c, "message storm: %llu messages in flight", (unsigned long long)c->heap_n);
}

/* ------------------------------------------------------------------ */
/* The scenario                                                        */

struct scenario {
    struct sim_cluster c;
    struct sim_nodes *N; /* lock mode: the node processes */
    struct sim_nodes_options no;
    struct tk_prng prng;
    bool lock_mode;
    bool verbose;
    uint32_t voters0;
    int replace_old; /* slot being replaced, -1 */
    int replace_new; /* the fresh process at its address */
    int zombie;      /* a replaced node that was paused, not crashed: wakes up later */
    uint64_t zombies, learner_restarts;
    uint64_t next_client_us;
    uint64_t next_fault_us;
    uint64_t next_clock_us; /* lock mode: a clock fault (rate or jump) */
    /* Lock mode: the leader stalls (a long pause) while the others elect
     * and serve; its clients' requests wait in its sockets. */
    int stall_slot;
    uint64_t stall_until;
    uint64_t leader_stalls;
    uint64_t read_id;
    uint64_t raw_proposals;
    uint64_t transfers;
    uint64_t crashes, replacements;
    /* Nemesis: cut a new leader off moments after it wins, so leaders
     * with unreplicated entries of their own term pile up (the ground
     * the Figure 8 scenario grows on). */
    uint32_t nemesis_pct;  /* chance per new leader */
    uint64_t nemesis_term; /* highest leader term seen */
    int nemesis_slot;
    uint64_t nemesis_at;
    uint64_t nemesis_hits;
};

/* ------------------------------------------------------------------ */
/* Membership                                                          */

static uint32_t live_voters(struct scenario *s, const struct tk_raft_config *cfg)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < cfg->n; i++) {
        int slot = sim_slot_of(&s->c, cfg->m[i].id);
        if (cfg->m[i].role == TK_RAFT_VOTER && slot >= 0 && s->c.nodes[slot].alive)
            k++;
    }
    return k;
}

static const struct tk_raft_config *leader_config(struct scenario *s, int *leader)
{
    *leader = sim_leader(&s->c);
    if (*leader < 0)
        return NULL;
    return tk_raft_config(s->c.nodes[*leader].r);
}

static bool config_same(const struct tk_raft_config *a, const struct tk_raft_config *b)
{
    if (a == NULL || b == NULL || a->n != b->n)
        return false;
    for (uint32_t i = 0; i < a->n; i++)
        if (a->m[i].id != b->m[i].id || a->m[i].role != b->m[i].role)
            return false;
    return true;
}

/* Every live member runs the leader's config: no change in flight, so a
 * crash cannot leave an older, larger config without a majority. */
static bool config_settled(struct scenario *s, const struct tk_raft_config *cfg)
{
    for (uint32_t i = 0; i < cfg->n; i++) {
        int slot = sim_slot_of(&s->c, cfg->m[i].id);
        if (slot < 0 || !s->c.nodes[slot].alive)
            continue;
        if (!config_same(tk_raft_config(s->c.nodes[slot].r), cfg))
            return false;
    }
    return true;
}

/* Drives a replacement with the leader's production decisions
 * (raft/members.h): the fresh process at the old one's address asks to
 * join, then the leader takes one single-server step at a time (stale
 * learner out, caught-up learner in, replaced voter out). Called at
 * random moments, so joins race with elections, transfers and cuts. */
static void replace_step(struct scenario *s)
{
    if (s->replace_old < 0)
        return;
    int l = -1;
    const struct tk_raft_config *cfg = leader_config(s, &l);
    if (cfg == NULL || s->c.nodes[l].paused)
        return;
    struct tk_raft_member j;
    sim_member(&s->c, s->replace_new, TK_RAFT_LEARNER, &j);
    uint8_t verdict = tk_members_join(cfg, &j, true);
    if (verdict == TK_MEMBERS_REFUSE)
        sim_fail(&s->c, "join of slot %d refused", s->replace_new);
    int rv = TK_OK;
    if (verdict == TK_MEMBERS_ADD || verdict == TK_MEMBERS_WAIT) {
        /* No room: the leader removes a stale learner first (below). */
        uint64_t id;
        struct tk_raft_status st;
        tk_raft_status(s->c.nodes[l].r, &st);
        uint8_t type = tk_members_next(cfg, &st, s->voters0, &id);
        if (verdict == TK_MEMBERS_WAIT && type == TK_RAFT_REMOVE)
            rv = sim_change(&s->c, l, type, sim_slot_of(&s->c, id));
        else if (verdict == TK_MEMBERS_WAIT)
            sim_fail(&s->c, "join of slot %d must wait, yet nothing can go", s->replace_new);
        else
            rv = sim_change(&s->c, l, TK_RAFT_ADD_LEARNER, s->replace_new);
    } else {
        struct tk_raft_status st;
        tk_raft_status(s->c.nodes[l].r, &st);
        uint64_t id;
        uint8_t type = tk_members_next(cfg, &st, s->voters0, &id);
        if (type == TK_MEMBERS_TRANSFER) {
            rv = sim_transfer(&s->c, l, 0);
        } else if (type != 0) {
            rv = sim_change(&s->c, l, type, sim_slot_of(&s->c, id));
        } else if (tk_raft_config_find(cfg, s->c.nodes[s->replace_old].id) == NULL &&
                   !tk_members_replacing(cfg, s->c.nodes[s->replace_new].id)) {
            if (!config_settled(s, cfg))
                return;
            if (tk_raft_config_voters(cfg) != s->voters0)
                sim_fail(&s->c, "replacement ended with %u voters", tk_raft_config_voters(cfg));
            s->replace_old = -1;
            s->replacements++;
            if (s->zombie >= 0) {
                /* The replaced identity wakes up: it must not disturb. */
                sim_pause(&s->c, s->zombie, false);
                s->zombie = -1;
            }
        }
    }
    if (rv != TK_OK && rv != TK_EFULL && rv != TK_ENOTLEADER)
        sim_fail(&s->c, "membership change: %s", tk_strerror(rv));
}

/* The fresh process of a replacement restarts again while it is still a
 * learner: a third identity at the same address; the stale learner must
 * go before the newest is promoted. */
static void restart_learner(struct scenario *s, const struct tk_raft_config *cfg)
{
    struct sim_cluster *c = &s->c;
    const struct tk_raft_member *m = tk_raft_config_find(cfg, c->nodes[s->replace_new].id);
    if (m == NULL || m->role != TK_RAFT_LEARNER || !config_settled(s, cfg) ||
        c->n_nodes >= SIM_NODES_MAX)
        return;
    sim_crash(c, s->replace_new);
    int addr = c->nodes[s->replace_new].addr;
    s->replace_new = sim_add_node(c);
    c->nodes[s->replace_new].addr = addr;
    s->learner_restarts++;
}

/* Crashes a voter if the others keep a majority, one at a time; a fresh
 * NodeId at the same address replaces it. Sometimes the voter is paused
 * instead (a process cut off or stopped long enough to be replaced),
 * and wakes up once its replacement is done. */
static void crash_one(struct scenario *s)
{
    struct sim_cluster *c = &s->c;
    int l = -1;
    const struct tk_raft_config *cfg = leader_config(s, &l);
    if (cfg == NULL || c->n_nodes >= SIM_NODES_MAX)
        return;
    if (s->replace_old >= 0) {
        if (tk_prng_range(&s->prng, 0, 3) == 0)
            restart_learner(s, cfg);
        return;
    }
    uint32_t voters = tk_raft_config_voters(cfg);
    if (!config_settled(s, cfg) || live_voters(s, cfg) - 1 < voters / 2 + 1)
        return;
    int victim = (int)tk_prng_range(&s->prng, 0, c->n_nodes - 1);
    if (!c->nodes[victim].alive || c->nodes[victim].paused ||
        !tk_raft_config_is_voter(cfg, c->nodes[victim].id))
        return;
    bool zombie = tk_prng_range(&s->prng, 0, 3) == 0;
    if (s->verbose)
        fprintf(stderr, "t=%llu %s node %d\n", (unsigned long long)c->now,
                zombie ? "pause for good" : "crash", victim);
    if (zombie) {
        sim_pause(c, victim, true);
        s->zombie = victim;
        s->zombies++;
    } else {
        sim_crash(c, victim);
    }
    s->crashes++;
    s->replace_old = victim;
    s->replace_new = sim_add_node(c);
    c->nodes[s->replace_new].addr = c->nodes[victim].addr;
}

/* ------------------------------------------------------------------ */
/* Faults                                                              */

static int random_live(struct scenario *s)
{
    int cand[SIM_NODES_MAX];
    int k = 0;
    for (uint32_t i = 0; i < s->c.n_nodes; i++)
        if (s->c.nodes[i].alive)
            cand[k++] = (int)i;
    return k ? cand[tk_prng_range(&s->prng, 0, (uint64_t)k - 1)] : -1;
}

/* A process back from a long pause may serve a request before any timer
 * of its own fires: a deposed leader must not answer it. */
static void resume(struct scenario *s, int slot)
{
    struct sim_cluster *c = &s->c;
    if (!c->nodes[slot].paused)
        return;
    sim_pause(c, slot, false);
    if (!c->nodes[slot].alive || tk_raft_role(c->nodes[slot].r) != TK_RAFT_LEADER)
        return;
    if (s->lock_mode)
        sim_nodes_resumed(s->N, slot);
    else
        sim_read(c, slot, ++s->read_id);
}

static void fault(struct scenario *s)
{
    struct sim_cluster *c = &s->c;
    uint64_t dice = tk_prng_range(&s->prng, 0, 99);
    int a = random_live(s);
    if (s->lock_mode && s->stall_slot < 0 && tk_prng_range(&s->prng, 0, 99) < 8) {
        int l = sim_leader(c);
        if (l >= 0 && !c->nodes[l].paused) {
            sim_pause(c, l, true);
            s->stall_slot = l;
            s->stall_until = c->now + tk_prng_range(&s->prng, 600 * MS, 3 * SEC);
            s->leader_stalls++;
            return;
        }
    }
    if (a == s->stall_slot)
        a = -1;
    if (dice < 30) {
        sim_heal(c);
        for (uint32_t i = 0; i < c->n_nodes; i++)
            if ((int)i != s->stall_slot)
                resume(s, (int)i);
    } else if (a < 0) {
        return;
    } else if (dice < 45) {
        sim_isolate(c, a, true);
    } else if (dice < 55) {
        /* A random split into two sides. */
        uint32_t mask = (uint32_t)tk_prng_next(&s->prng);
        for (uint32_t i = 0; i < c->n_nodes; i++)
            for (uint32_t j = 0; j < c->n_nodes; j++)
                if (i != j)
                    c->cut[i][j] = ((mask >> i) & 1) != ((mask >> j) & 1);
    } else if (dice < 65) {
        int b = random_live(s);
        if (a != b)
            c->cut[a][b] = true; /* one way only */
    } else if (dice < 75) {
        if (c->nodes[a].paused)
            resume(s, a);
        else
            sim_pause(c, a, true);
    } else if (dice < 85) {
        int l = sim_leader(c);
        if (l >= 0 && !c->nodes[l].paused && sim_transfer(c, l, 0) == TK_OK)
            s->transfers++;
    } else if (dice < 95) {
        crash_one(s);
    } else {
        c->opt.drop_ppm = (uint32_t)tk_prng_range(&s->prng, 0, 50000);
    }
}

static void nemesis_watch(struct scenario *s)
{
    struct sim_cluster *c = &s->c;
    int l = sim_leader(c);
    if (l < 0 || tk_raft_term(c->nodes[l].r) <= s->nemesis_term)
        return;
    s->nemesis_term = tk_raft_term(c->nodes[l].r);
    if (tk_prng_range(&s->prng, 0, 99) >= s->nemesis_pct)
        return;
    /* Within a few round trips: after some of its entries went out, often
     * before its own NOOP reached a majority. */
    s->nemesis_slot = l;
    s->nemesis_at = c->now + tk_prng_range(&s->prng, 0, 3 * c->opt.lat_max_us + 2 * MS);
}

static void nemesis_strike(struct scenario *s)
{
    struct sim_cluster *c = &s->c;
    int l = s->nemesis_slot;
    s->nemesis_at = UINT64_MAX;
    if (l < 0 || !c->nodes[l].alive || tk_raft_role(c->nodes[l].r) != TK_RAFT_LEADER)
        return;
    sim_isolate(c, l, true);
    s->nemesis_hits++;
    /* Maybe let one peer through, so its tail reaches some nodes only. */
    if (tk_prng_range(&s->prng, 0, 1)) {
        int p = random_live(s);
        if (p != l)
            sim_cut(c, l, p, false);
    }
}

/* ------------------------------------------------------------------ */
/* Clients                                                             */

static void client_action(struct scenario *s)
{
    struct sim_cluster *c = &s->c;
    /* Usually the newest leader; sometimes whichever node thinks it leads. */
    if (s->lock_mode) {
        /* The clients find the leader themselves (M redirects them). */
        uint64_t n = tk_prng_range(&s->prng, 1, 3);
        for (uint64_t i = 0; i < n; i++)
            sim_nodes_clients(s->N);
        return;
    }
    int l = random_live(s);
    if (l < 0 || c->nodes[l].paused || tk_raft_role(c->nodes[l].r) != TK_RAFT_LEADER)
        l = sim_leader(c);
    if (l < 0 || c->nodes[l].paused)
        return;
    if (tk_prng_range(&s->prng, 0, 99) < 10) {
        sim_read(c, l, ++s->read_id);
        return;
    }
    uint8_t buf[64];
    uint32_t len = (uint32_t)tk_prng_range(&s->prng, 0, sizeof(buf));
    for (uint32_t i = 0; i < len; i++)
        buf[i] = (uint8_t)tk_prng_next(&s->prng);
    uint32_t tokens = (uint32_t)tk_prng_range(&s->prng, 0, 3);
    if (sim_propose(c, l, len ? buf : NULL, len, tokens) == TK_OK)
        s->raw_proposals++;
}

/* ------------------------------------------------------------------ */
/* Membership invariants, checked along the run                        */

/* A leader has at most one configuration change beyond its commit index
 * (single-server changes, one at a time), and no node campaigns or leads
 * unless its configuration lists it as a voter (learners never do). */
static void check_membership(struct scenario *s)
{
    struct sim_cluster *c = &s->c;
    for (uint32_t i = 0; i < c->n_nodes; i++) {
        struct sim_node *n = &c->nodes[i];
        if (!n->alive)
            continue;
        uint8_t role = tk_raft_role(n->r);
        const struct tk_raft_config *cfg = tk_raft_config(n->r);
        if (role != TK_RAFT_FOLLOWER && (cfg == NULL || !tk_raft_config_is_voter(cfg, n->id)))
            sim_fail(c, "node %u is %s without being a voter", i, tk_raft_role_name(role));
        if (role != TK_RAFT_LEADER)
            continue;
        uint32_t pending = 0;
        for (uint64_t k = tk_raft_commit(n->r) + 1; k <= tk_raft_last_index(n->r); k++) {
            const struct tk_raft_entry *e = tk_raft_entry(n->r, k);
            pending += e != NULL && e->type == TK_RAFT_CONFIG;
        }
        if (pending > 1)
            sim_fail(c, "leader %u has %u configuration changes in flight", i, pending);
    }
}

/* ------------------------------------------------------------------ */
/* One seed                                                            */

static bool converged(struct sim_cluster *c)
{
    int l = sim_leader(c);
    if (l < 0)
        return false;
    struct tk_raft_status st;
    tk_raft_status(c->nodes[l].r, &st);
    if (st.commit < st.term_start_index || st.commit != st.last_index || st.transfer_target != 0)
        return false;
    const struct tk_raft_config *cfg = tk_raft_config(c->nodes[l].r);
    for (uint32_t i = 0; i < cfg->n; i++) {
        int slot = sim_slot_of(c, cfg->m[i].id);
        if (slot < 0 || !c->nodes[slot].alive)
            continue;
        if (c->nodes[slot].applied != st.commit || tk_raft_leader(c->nodes[slot].r) != st.id)
            return false;
    }
    return true;
}

static uint64_t pick(struct scenario *s, const uint64_t *v, size_t n)
{
    return v[tk_prng_range(&s->prng, 0, n - 1)];
}

/* The node layer's dimensions, per seed (lock mode only, so the raw seeds
 * keep their scenarios). */
static void node_setup(struct scenario *s, struct sim_options *o)
{
    struct sim_nodes_options *no = &s->no;
    memset(no, 0, sizeof(*no));
    no->shards_max = (uint32_t)tk_prng_range(&s->prng, 1, SIM_SHARDS_MAX);
    bool big = tk_prng_range(&s->prng, 0, 7) == 0;
    if (big) {
        /* Clients hold thousands of keys on long leases: snapshots of
         * hundreds of kilobytes, sent in hundreds of chunks. */
        no->keys = (uint32_t)tk_prng_range(&s->prng, 1500, 4000);
        no->clients = 24;
        no->inflight_max = 64;
        no->burst_max = 32;
        no->lease_min_ms = 20000;
        no->lease_max_ms = 90000;
        no->release_pct = 5;
        no->limits = (struct tk_lock_limits){
            .keys_max = no->keys + 64, .waiters_per_key_max = 6, .waiters_max = 4096};
        o->raft.snapshot_chunk_bytes = (uint32_t)tk_prng_range(&s->prng, 512, 4096);
        o->raft.inflight_bytes_max = tk_prng_range(&s->prng, 8192, 65536);
    } else {
        static const uint64_t keys[] = {4, 16, 16, 64};
        no->keys = (uint32_t)pick(s, keys, TK_ARRAY_LEN(keys));
        no->clients = 12;
        no->inflight_max = 4;
        no->burst_max = 3;
        no->lease_min_ms = 1000;
        no->lease_max_ms = 3000;
        no->release_pct = 60;
        no->limits = (struct tk_lock_limits){
            .keys_max = 64 + no->keys, .waiters_per_key_max = 6, .waiters_max = 64};
    }
    static const uint64_t qdelay[] = {1, 20, 300, 3000};
    no->qdelay_max_us = pick(s, qdelay, TK_ARRAY_LEN(qdelay));
    if (tk_prng_range(&s->prng, 0, 2) == 0) {
        no->stall_ppm = (uint32_t)tk_prng_range(&s->prng, 2000, 20000);
        /* Now and then longer than an election: a starved worker reads
         * its rings a whole leadership late. */
        no->stall_max_us =
            tk_prng_range(&s->prng, 5, tk_prng_range(&s->prng, 0, 3) ? 150 : 800) * MS;
    }
    if (tk_prng_range(&s->prng, 0, 1)) {
        /* Clocks: rates within +-0.05% (0.1% apart at most), forward jumps
         * adding up to 45 ms within any lease: inside TK_LOCK_DRIFT_US. */
        no->drift_ppm_max = 500;
        no->jump_max_us = 45 * MS;
        no->jump_window_us = (uint64_t)no->lease_max_ms * MS * 1002 / 1000 + 2 * SEC;
    }
    no->client_true_clock = getenv("TK_SIM_TRUE_CLOCK") != NULL;
    if (tk_prng_range(&s->prng, 0, 2) == 0) {
        /* Some messages arrive one to five election timeouts late. */
        o->slow_ppm = (uint32_t)tk_prng_range(&s->prng, 1000, 20000);
        o->slow_min_us = o->raft.election_max_us;
        o->slow_max_us = 5 * o->raft.election_max_us;
    }
    if (tk_prng_range(&s->prng, 0, 3) == 0) {
        /* A small log: while commits stall, proposals hit TK_EFULL and
         * wait in the driver. The smallest bound the server takes
         * (--max-log-entries 16..), with its snapshot ratios
         * (net/raftd.c). */
        o->raft.log_entries_max = tk_prng_range(&s->prng, 16, 24);
        o->raft.snapshot_entries = TK_MAX(o->raft.log_entries_max / 4, 8);
        o->raft.snapshot_trailing = TK_MIN(o->raft.snapshot_entries / 2, 1024);
    }
    if (tk_prng_range(&s->prng, 0, 3) != 0) {
        /* Snapshot cuts that span many rounds, with commands applied
         * between their slices, sent in many small pieces. */
        no->cut_slice = (uint32_t)tk_prng_range(&s->prng, 1, 64);
        no->cut_piece = (uint32_t)tk_prng_range(&s->prng, 1, 4096);
    }
}

/* The environment varies per seed: timers, latency, loss, log bounds. */
static void scenario_setup(struct scenario *s, uint64_t seed, bool verbose)
{
    memset(s, 0, sizeof(*s));
    s->verbose = verbose;
    tk_prng_seed(&s->prng, seed ^ 0x5eed5eed5eedull);
    struct sim_options o;
    sim_options_default(&o, seed);
    o.check_every = 8;
    if (tk_prng_range(&s->prng, 0, 1)) {
        o.raft.election_min_us = 150 * MS; /* a wider window */
        o.raft.election_max_us = 300 * MS;
    }
    o.lat_min_us = tk_prng_range(&s->prng, 50, 1000);
    o.lat_max_us = o.lat_min_us + tk_prng_range(&s->prng, 0, 8000);
    o.drop_ppm = (uint32_t)tk_prng_range(&s->prng, 0, 30000);
    o.dup_ppm = (uint32_t)tk_prng_range(&s->prng, 0, 20000);
    o.raft.snapshot_entries = tk_prng_range(&s->prng, 8, 64);
    o.raft.snapshot_trailing = tk_prng_range(&s->prng, 0, 16);
    o.raft.snapshot_chunk_bytes = (uint32_t)tk_prng_range(&s->prng, 16, 256);
    o.raft.append_bytes_max = (uint32_t)tk_prng_range(&s->prng, 64, 2048);
    o.raft.inflight_bytes_max = tk_prng_range(&s->prng, 256, 8192);
    s->lock_mode = (seed % 4) != 0;
    s->voters0 = tk_prng_range(&s->prng, 0, 1) ? 5 : 3;
    s->replace_old = -1;
    s->zombie = -1;
    s->stall_slot = -1;
    s->stall_until = UINT64_MAX;
    s->nemesis_pct =
        (uint32_t)(tk_prng_range(&s->prng, 0, 2) == 0 ? 0 : tk_prng_range(&s->prng, 20, 80));
    s->nemesis_slot = -1;
    s->nemesis_at = UINT64_MAX;
    if (s->lock_mode) {
        node_setup(s, &o);
        sim_init(&s->c, &o, 0);
        s->N = sim_nodes_create(&s->c, &s->no, seed);
        for (uint32_t i = 0; i < s->voters0; i++)
            sim_add_node(&s->c);
    } else {
        sim_init(&s->c, &o, s->voters0);
    }
    int low = 0;
    for (uint32_t i = 1; i < s->c.n_nodes; i++)
        if (s->c.nodes[i].id < s->c.nodes[low].id)
            low = (int)i;
    sim_bootstrap(&s->c, low);
    s->next_client_us = s->c.now;
    s->next_fault_us = s->c.now + 200 * MS;
    bool clocks = s->lock_mode && (s->no.drift_ppm_max != 0 || s->no.jump_max_us != 0);
    s->next_clock_us = clocks ? s->c.now + 100 * MS : UINT64_MAX;
}

/* The faulty phase: `steps` events among timed actions. */
static void scenario_run(struct scenario *s, uint64_t steps)
{
    struct sim_cluster *c = &s->c;
    uint64_t events = 0, checked = UINT64_MAX;
    while (events < steps) {
        uint64_t t = TK_MIN(TK_MIN(s->next_client_us, s->next_fault_us), s->nemesis_at);
        t = TK_MIN(t, TK_MIN(s->next_clock_us, s->stall_until));
        if (s->lock_mode)
            t = TK_MIN(t, sim_nodes_next(s->N));
        if (sim_step(c, t)) {
            storm_guard(c);
            events++;
            if (s->nemesis_pct > 0)
                nemesis_watch(s);
            continue;
        }
        if (c->now >= s->nemesis_at)
            nemesis_strike(s);
        if (s->lock_mode)
            sim_nodes_run(s->N);
        if (c->now >= s->next_client_us) {
            client_action(s);
            s->next_client_us = c->now + tk_prng_range(&s->prng, 1 * MS, 15 * MS);
        }
        if (c->now >= s->next_fault_us) {
            fault(s);
            replace_step(s);
            s->next_fault_us = c->now + tk_prng_range(&s->prng, 20 * MS, 600 * MS);
        }
        if (c->now >= s->stall_until) {
            int slot = s->stall_slot;
            s->stall_slot = -1;
            s->stall_until = UINT64_MAX;
            resume(s, slot);
        }
        if (c->now >= s->next_clock_us) {
            sim_nodes_clock_fault(s->N);
            s->next_clock_us = c->now + tk_prng_range(&s->prng, 20 * MS, 300 * MS);
        }
        if ((events & 63) == 0 && checked != events) {
            checked = events;
            check_membership(s);
            if (s->lock_mode)
                sim_nodes_check(s->N);
        }
    }
}

/* Heal everything: the cluster must elect, finish any replacement, and
 * bring every live member to the same applied index (liveness). */
static void scenario_converge(struct scenario *s)
{
    struct sim_cluster *c = &s->c;
    sim_heal(c);
    c->opt.drop_ppm = 0;
    s->stall_slot = -1;
    s->stall_until = UINT64_MAX;
    for (uint32_t i = 0; i < c->n_nodes; i++)
        sim_pause(c, (int)i, false);
    uint64_t limit = c->now + 20 * SEC;
    while (c->now < limit && (s->replace_old >= 0 || !converged(c))) {
        uint64_t t = TK_MIN(c->now + 50 * MS, limit);
        if (s->lock_mode)
            t = TK_MIN(t, sim_nodes_next(s->N));
        while (sim_step(c, t)) {
            storm_guard(c);
            if (s->lock_mode)
                t = TK_MIN(t, sim_nodes_next(s->N));
        }
        if (s->lock_mode)
            sim_nodes_run(s->N);
        replace_step(s);
    }
    if (!converged(c) || s->replace_old >= 0) {
        sim_dump(c);
        sim_fail(c, "no convergence after healing (leader %d, replacement %d)", sim_leader(c),
                 s->replace_old);
    }
    int l = sim_leader(c);
    if (s->lock_mode) {
        sim_nodes_finish(s->N);
    } else {
        int rv = sim_propose(c, l, "end", 3, 1);
        if (rv != TK_OK)
            sim_fail(c, "final proposal: %s", tk_strerror(rv));
    }
    sim_check_all(c);
}

static void scenario_report(struct scenario *s, uint64_t seed)
{
    struct sim_cluster *c = &s->c;
    int l = sim_leader(c);
    fprintf(stderr,
            "seed %llu: %u voters, %s mode, %llu steps, t=%.2fs, commit %llu, term %llu, "
            "crashes %llu (paused %llu), replacements %llu (learner restarts %llu), transfers "
            "%llu, nemesis %llu, leader stalls %llu, delivered %llu, dropped %llu\n",
            (unsigned long long)seed, s->voters0, s->lock_mode ? "lock" : "raw",
            (unsigned long long)c->steps, (double)c->now / 1e6,
            (unsigned long long)tk_raft_commit(c->nodes[l].r),
            (unsigned long long)tk_raft_term(c->nodes[l].r), (unsigned long long)s->crashes,
            (unsigned long long)s->zombies, (unsigned long long)s->replacements,
            (unsigned long long)s->learner_restarts, (unsigned long long)s->transfers,
            (unsigned long long)s->nemesis_hits, (unsigned long long)s->leader_stalls,
            (unsigned long long)c->delivered, (unsigned long long)c->dropped);
    if (!s->lock_mode)
        return;
    const struct sim_nodes_options *no = &s->no;
    struct sim_nodes_stats st;
    sim_nodes_stats(s->N, &st);
    fprintf(stderr,
            "  nodes: up to %u shards, %u keys, %u clients, leases %u-%u ms, thread delay <= %llu "
            "us, stalls %u ppm, drift +-%d ppm, jumps <= %llu us, slow messages %u ppm, log "
            "bound %llu entries%s\n",
            no->shards_max, no->keys, no->clients, no->lease_min_ms, no->lease_max_ms,
            (unsigned long long)no->qdelay_max_us, no->stall_ppm, no->drift_ppm_max,
            (unsigned long long)no->jump_max_us, c->opt.slow_ppm,
            (unsigned long long)c->opt.raft.log_entries_max,
            no->client_true_clock ? ", clients on the true clock" : "");
    fprintf(stderr,
            "  clients: %llu requests on %llu connections: G %llu R %llu T %llu B %llu N %llu Q "
            "%llu, M %llu, overload %llu, unknown outcome %llu\n",
            (unsigned long long)st.requests, (unsigned long long)st.connects,
            (unsigned long long)st.g, (unsigned long long)st.r, (unsigned long long)st.t,
            (unsigned long long)st.b, (unsigned long long)st.n, (unsigned long long)st.q,
            (unsigned long long)st.moved, (unsigned long long)st.overload,
            (unsigned long long)st.lost);
    fprintf(stderr,
            "  committed: %llu commands in %llu entries, %llu keys held at most; %llu snapshots "
            "installed (largest %llu keys, %llu bytes); rounds %llu, messages %llu, stalls %llu, "
            "clock jumps %llu; rounds with batches waiting for log room %llu, batches refused "
            "%llu, leaderships %llu\n",
            (unsigned long long)st.commands, (unsigned long long)st.entries,
            (unsigned long long)st.held_max, (unsigned long long)st.installs,
            (unsigned long long)st.snapshot_keys_max, (unsigned long long)st.snapshot_bytes_max,
            (unsigned long long)st.rounds, (unsigned long long)st.messages,
            (unsigned long long)st.stalls, (unsigned long long)st.jumps,
            (unsigned long long)st.batches_waited, (unsigned long long)st.batches_refused,
            (unsigned long long)st.leading);
}

static uint64_t env_u64(const char *name, uint64_t def)
{
    const char *v = getenv(name);
    if (v == NULL || *v == '\0')
        return def;
    return strtoull(v, NULL, 10);
}

int main(void)
{
    signal(SIGABRT, on_abort);
    uint64_t steps = env_u64("TK_SIM_STEPS", 4000);
    struct scenario *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return 1;
    const char *one = getenv("TK_SEED");
    uint64_t first = one ? strtoull(one, NULL, 10) : env_u64("TK_SIM_FIRST", 1);
    uint64_t count = one ? 1 : env_u64("TK_SIM_SEEDS", 2000);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    uint64_t seeds = 0, total_steps = 0, commits = 0, grants = 0, elections = 0, snaps = 0;
    uint64_t replacements = 0, zombies = 0, learner_restarts = 0;
    uint64_t installs = 0, big_installs = 0, waited = 0, jumps = 0, queries = 0;
    for (uint64_t seed = first; seed < first + count; seed++) {
        current_seed = seed;
        scenario_setup(s, seed, one != NULL);
        scenario_run(s, steps);
        scenario_converge(s);
        if (one != NULL)
            scenario_report(s, seed);
        seeds++;
        total_steps += s->c.steps;
        commits += s->c.committed_max;
        if (s->lock_mode) {
            struct sim_nodes_stats st;
            sim_nodes_stats(s->N, &st);
            grants += st.g;
            queries += st.q + st.n;
            installs += st.installs;
            big_installs += st.snapshot_keys_max >= 1000;
            waited += st.batches_waited > 0;
            jumps += st.jumps;
        }
        replacements += s->replacements;
        zombies += s->zombies;
        learner_restarts += s->learner_restarts;
        for (uint32_t i = 0; i < s->c.n_nodes; i++) {
            elections += tk_raft_metrics(s->c.nodes[i].r)->elections_started;
            snaps += s->c.nodes[i].snapshots_installed;
        }
        sim_free(&s->c);
        sim_nodes_destroy(s->N);
        s->N = NULL;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    printf(
        "sim_raft: %llu seeds passed in %.1f s (%.1f seeds/s, %.0f steps/s): %llu steps, "
        "%llu committed entries, %llu grants, %llu elections, %llu snapshot installs, "
        "%llu replacements (%llu of paused members that woke up, %llu learners restarted); "
        "node layer: %llu Q/N answers checked, %llu lock snapshots installed (%llu seeds with "
        "one of 1000+ keys), %llu seeds where batches waited for log room, %llu clock jumps\n",
        (unsigned long long)seeds, secs, (double)seeds / secs, (double)total_steps / secs,
        (unsigned long long)total_steps, (unsigned long long)commits, (unsigned long long)grants,
        (unsigned long long)elections, (unsigned long long)snaps, (unsigned long long)replacements,
        (unsigned long long)zombies, (unsigned long long)learner_restarts,
        (unsigned long long)queries, (unsigned long long)installs, (unsigned long long)big_installs,
        (unsigned long long)waited, (unsigned long long)jumps);
    free(s);
    return 0;
}
