/* Deterministic simulation of a Raft cluster of 3 or 5 nodes, with one
 * lock table per node, under random faults (tests/support/sim_cluster.h).
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
 * Checked by the lock layer (3 of 4 seeds; the 4th runs raw random
 * entries): every node applies the same commands (tk_lock_apply panics on
 * contradictions), a reference model of the committed lock state, at most
 * one client holding a key at any moment by its own conservative lease
 * clock (mutual exclusion as clients see it), tokens of G replies strictly
 * increasing per leadership, FIFO grants within a leader's term, no
 * expiry committed before the lease ran out, no grant of an expired token.
 *
 * Environment: TK_SEED=n replays one seed (verbose); TK_SIM_SEEDS=n sets
 * how many seeds to run (default 2000), TK_SIM_FIRST=n the first one;
 * TK_SIM_STEPS=n the events per seed (default 4000); TK_SIM_TRACE=1
 * prints every lock-layer event.
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
#include "tests/support/sim_lock.h"

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

/* ------------------------------------------------------------------ */
/* The scenario                                                        */

struct scenario {
    struct sim_cluster c;
    struct sim_lock L;
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
    sim_read(c, slot, ++s->read_id);
    if (s->lock_mode && sim_lock_leads(&s->L, slot))
        sim_lock_client(&s->L, slot, (int)tk_prng_range(&s->prng, 0, SIM_LOCK_CLIENTS - 1));
}

static void fault(struct scenario *s)
{
    struct sim_cluster *c = &s->c;
    uint64_t dice = tk_prng_range(&s->prng, 0, 99);
    int a = random_live(s);
    if (dice < 30) {
        sim_heal(c);
        for (uint32_t i = 0; i < c->n_nodes; i++)
            resume(s, (int)i);
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
    int l = random_live(s);
    if (l < 0 || c->nodes[l].paused || tk_raft_role(c->nodes[l].r) != TK_RAFT_LEADER)
        l = sim_leader(c);
    if (l < 0 || c->nodes[l].paused)
        return;
    if (tk_prng_range(&s->prng, 0, 99) < 10) {
        sim_read(c, l, ++s->read_id);
        return;
    }
    if (s->lock_mode) {
        /* Sometimes a burst, so that one entry carries several commands. */
        uint64_t burst = tk_prng_range(&s->prng, 0, 3) == 0 ? tk_prng_range(&s->prng, 2, 6) : 1;
        for (uint64_t i = 0; i < burst && sim_lock_leads(&s->L, l); i++)
            sim_lock_client(&s->L, l, (int)tk_prng_range(&s->prng, 0, SIM_LOCK_CLIENTS - 1));
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
    s->nemesis_pct =
        (uint32_t)(tk_prng_range(&s->prng, 0, 2) == 0 ? 0 : tk_prng_range(&s->prng, 20, 80));
    s->nemesis_slot = -1;
    s->nemesis_at = UINT64_MAX;
    sim_init(&s->c, &o, s->voters0);
    if (s->lock_mode)
        sim_lock_init(&s->L, &s->c, seed);
    int low = 0;
    for (uint32_t i = 1; i < s->c.n_nodes; i++)
        if (s->c.nodes[i].id < s->c.nodes[low].id)
            low = (int)i;
    sim_bootstrap(&s->c, low);
    s->next_client_us = s->c.now;
    s->next_fault_us = s->c.now + 200 * MS;
}

/* The faulty phase: `steps` events among timed actions. */
static void scenario_run(struct scenario *s, uint64_t steps)
{
    struct sim_cluster *c = &s->c;
    uint64_t events = 0;
    while (events < steps) {
        uint64_t t = TK_MIN(TK_MIN(s->next_client_us, s->next_fault_us), s->nemesis_at);
        if (s->lock_mode)
            t = TK_MIN(t, sim_lock_next_wake(&s->L));
        if (sim_step(c, t)) {
            events++;
            if (s->nemesis_pct > 0)
                nemesis_watch(s);
            continue;
        }
        if (c->now >= s->nemesis_at)
            nemesis_strike(s);
        if (s->lock_mode)
            sim_lock_tick_due(&s->L);
        if (c->now >= s->next_client_us) {
            client_action(s);
            s->next_client_us = c->now + tk_prng_range(&s->prng, 1 * MS, 15 * MS);
        }
        if (c->now >= s->next_fault_us) {
            fault(s);
            replace_step(s);
            s->next_fault_us = c->now + tk_prng_range(&s->prng, 20 * MS, 600 * MS);
        }
        if ((events & 63) == 0) {
            check_membership(s);
            if (s->lock_mode)
                sim_lock_compare(&s->L);
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
    for (uint32_t i = 0; i < c->n_nodes; i++)
        sim_pause(c, (int)i, false);
    uint64_t limit = c->now + 20 * SEC;
    while (c->now < limit && (s->replace_old >= 0 || !converged(c))) {
        uint64_t t = TK_MIN(c->now + 50 * MS, limit);
        if (s->lock_mode)
            t = TK_MIN(t, sim_lock_next_wake(&s->L));
        while (sim_step(c, t)) {
        }
        if (s->lock_mode)
            sim_lock_tick_due(&s->L);
        replace_step(s);
    }
    if (!converged(c) || s->replace_old >= 0) {
        sim_dump(c);
        sim_fail(c, "no convergence after healing (leader %d, replacement %d)", sim_leader(c),
                 s->replace_old);
    }
    int l = sim_leader(c);
    if (s->lock_mode) {
        sim_lock_tick_due(&s->L);
        sim_lock_compare(&s->L);
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
            "%llu, nemesis %llu, delivered %llu, dropped %llu\n",
            (unsigned long long)seed, s->voters0, s->lock_mode ? "lock" : "raw",
            (unsigned long long)c->steps, (double)c->now / 1e6,
            (unsigned long long)tk_raft_commit(c->nodes[l].r),
            (unsigned long long)tk_raft_term(c->nodes[l].r), (unsigned long long)s->crashes,
            (unsigned long long)s->zombies, (unsigned long long)s->replacements,
            (unsigned long long)s->learner_restarts, (unsigned long long)s->transfers,
            (unsigned long long)s->nemesis_hits, (unsigned long long)c->delivered,
            (unsigned long long)c->dropped);
    if (s->lock_mode && s->L.nodes[l].t != NULL) {
        struct tk_lock_stats ls;
        tk_lock_stats(s->L.nodes[l].t, &ls);
        fprintf(stderr, "  leader table: grants %llu handoffs %llu releases %llu expiries %llu\n",
                (unsigned long long)ls.grants, (unsigned long long)ls.handoffs,
                (unsigned long long)ls.releases, (unsigned long long)ls.expiries);
    }
    if (s->lock_mode)
        fprintf(stderr,
                "  lock: G %llu R %llu T %llu B %llu N %llu Q %llu, proposals %llu in %llu "
                "batches\n",
                (unsigned long long)s->L.g, (unsigned long long)s->L.r, (unsigned long long)s->L.t,
                (unsigned long long)s->L.b, (unsigned long long)s->L.n, (unsigned long long)s->L.q,
                (unsigned long long)s->L.proposals, (unsigned long long)s->L.batches);
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
        grants += s->L.g;
        replacements += s->replacements;
        zombies += s->zombies;
        learner_restarts += s->learner_restarts;
        for (uint32_t i = 0; i < s->c.n_nodes; i++) {
            elections += tk_raft_metrics(s->c.nodes[i].r)->elections_started;
            snaps += s->c.nodes[i].snapshots_installed;
        }
        if (s->lock_mode)
            sim_lock_free(&s->L);
        sim_free(&s->c);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    printf(
        "sim_raft: %llu seeds passed in %.1f s (%.1f seeds/s, %.0f steps/s): %llu steps, "
        "%llu committed entries, %llu grants, %llu elections, %llu snapshot installs, "
        "%llu replacements (%llu of paused members that woke up, %llu learners restarted)\n",
        (unsigned long long)seeds, secs, (double)seeds / secs, (double)total_steps / secs,
        (unsigned long long)total_steps, (unsigned long long)commits, (unsigned long long)grants,
        (unsigned long long)elections, (unsigned long long)snaps, (unsigned long long)replacements,
        (unsigned long long)zombies, (unsigned long long)learner_restarts);
    free(s);
    return 0;
}
