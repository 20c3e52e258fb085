/* The lock-table layer of the Raft simulation: one tk_lock_table per
 * node, driven the way the Raft thread drives the shards, plus clients and
 * the checks of the lock invariants (tests/sim/sim_raft.c uses it).
 *
 * Per node: the table leads once this node leads and has applied its
 * term's NOOP; its proposals are batched into one DATA entry with tokens
 * numbered from tk_raft_next_token(); committed entries are decoded and
 * applied on every node; snapshots carry the holders (tk_lock_each_holder)
 * and are restored with tk_lock_restore(). A proposal Raft refuses makes
 * the table follow for the rest of the term (lock.h: it cannot be lost).
 *
 * Checks: a reference model of the committed state (fed at the first
 * apply of each index anywhere) that every table must match; at most one
 * client holding a key at any moment by its own conservative lease clock
 * (counted from sending the request); G tokens strictly increasing within
 * a leadership; FIFO grants per key within a leadership; no expiry
 * committed before the lease ran out since the grant was first applied;
 * no G for a token whose expiry committed.
 */
#ifndef TK_TESTS_SIM_LOCK_H
#define TK_TESTS_SIM_LOCK_H

#include "core/cmd.h"
#include "shard/lock.h"
#include "tests/support/sim_cluster.h"

#define SIM_LOCK_KEYS 16
#define SIM_LOCK_CLIENTS 12
#define SIM_LOCK_BATCH_MAX 64

struct sim_lock_node {
    struct tk_lock_table *t;
    uint64_t epoch;        /* bumped at each tk_lock_lead() */
    uint64_t lead_term;    /* term the table leads in, 0 if not */
    uint64_t blocked_term; /* a proposal failed in this term: no re-lead */
    struct tk_cmd batch[SIM_LOCK_BATCH_MAX];
    uint32_t n_batch;
    bool flushing;
    uint64_t last_g_token; /* per epoch */
    uint64_t last_g_arrival[SIM_LOCK_KEYS];
    uint64_t wake_us; /* next tk_lock_tick */
};

struct sim_lock_req {
    int client;
    int node;
    uint64_t epoch;
    char type;
    int key;
    uint64_t token;
    uint32_t lease_ms;
    uint64_t sent_us;
    uint64_t arrival; /* order of arrival at that leader */
    bool answered;
};

struct sim_lock_holding {
    bool held;
    uint64_t token;
    uint64_t end_us; /* by the client's clock: sent + lease */
};

struct sim_lock_model_key {
    uint64_t token; /* 0: free */
    uint32_t lease_ms;
};

struct sim_lock {
    struct sim_cluster *c;
    struct tk_prng prng;
    bool trace; /* print every lock-layer event */
    struct sim_lock_node nodes[SIM_NODES_MAX];
    struct sim_node *cur; /* node whose sink is being called */
    struct sim_lock_req *reqs;
    uint64_t n_reqs, cap_reqs;
    uint64_t arrivals;
    struct sim_lock_holding hold[SIM_LOCK_CLIENTS][SIM_LOCK_KEYS];
    struct sim_lock_model_key model[SIM_LOCK_KEYS];
    uint64_t model_index;
    uint64_t model_token;
    uint64_t *grant_at; /* per token - token_base */
    uint32_t *grant_lease;
    uint8_t *expired;
    uint64_t token_base, token_cap;
    /* Stats */
    uint64_t g, r, t, b, n, q, proposals, batches;
};

/* Installs the hooks into c; L must stay at its address. */
void sim_lock_init(struct sim_lock *L, struct sim_cluster *c, uint64_t seed);
void sim_lock_free(struct sim_lock *L);
/* True if node slot's table leads (takes client requests). */
bool sim_lock_leads(struct sim_lock *L, int slot);
/* A random request of one client to node slot, which must lead. */
void sim_lock_client(struct sim_lock *L, int slot, int client);
/* Fires due lock timers on leading tables. */
void sim_lock_tick_due(struct sim_lock *L);
/* When sim_lock_tick_due() next has work (UINT64_MAX: none). */
uint64_t sim_lock_next_wake(struct sim_lock *L);
/* Every live node that applied up to the model's index holds its state. */
void sim_lock_compare(struct sim_lock *L);

#endif
