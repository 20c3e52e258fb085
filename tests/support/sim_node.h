/* The node-level simulation: every node of a simulated cluster
 * (tests/support/sim_cluster.h) runs the production node code, one Raft
 * driver (raft/driver.h) and 1..4 shards (shard/shard.h), with simulated
 * clients and a checker of the lock semantics (tests/sim/sim_raft.c uses it).
 *
 * A node is its driver's core in the cluster (hooks.create), plus queues
 * between its "threads": driver -> shard i, shard i -> driver, shard i ->
 * shard j, and each shard's client sockets. Each queue is FIFO, like the
 * SPSC rings of net/ring.h; a message becomes readable after a random
 * delay, and the threads run rounds at random moments, so the queues are
 * read in every interleaving threads can produce. A round is what the
 * server's threads do (net/worker.c, net/raftd.c): read some messages
 * (tk_shard_message / tk_driver_message), then tk_shard_tick and
 * tk_shard_flush, or tk_driver_flush. Peer messages and timer ticks reach
 * the driver's core through the cluster, and their updates go to
 * tk_driver_process. Threads may stall; a paused node runs nothing; a
 * crashed node's process is gone, and a restart is a fresh node.
 *
 * Clients: a client connects to one shard of a node (tk_client_ref), which
 * takes it only while leading (else M, with the leader's address to try
 * next), sends requests there (several in flight), and loses the
 * connection on M, on `E - overload`, when it gives up waiting (odd
 * clients never give up on a paused node), or when it closes at random;
 * requests in flight on a lost connection have unknown outcomes. A client
 * holds a key from the moment it sent the acquire for the lease, on its
 * clock, until it sends the release.
 *
 * Clocks: every node has its own (sim_cluster: rate and forward jumps),
 * which its core, driver and shards read. A client's lease clock is, by
 * default, the clock of the node it sent the acquire to (the node that
 * granted it): the server counts a lease from its own apply on that clock,
 * and protocol.md has the client count from its send, so the two agree on
 * the rate; what other nodes count (after a failover) differs by their
 * drift and jumps, which TK_LOCK_DRIFT_US must cover. With
 * client_true_clock the clients count on the true clock instead: then a
 * leader whose clock runs fast or jumps ends a lease before its client
 * does, whatever the margin.
 *
 * Checks (sim_fail prints the seed and aborts), on top of sim_cluster's:
 *  - the model: the committed lock state, per key a timeline of the states
 *    that commands made, fed at the first apply of each entry anywhere;
 *    every command legal there (no grant on a held key, no release of
 *    another token), tokens strictly increasing;
 *  - every APPLY a shard reads is the next command of its key in the model
 *    (State Machine Safety per shard), every table equals its key states
 *    (tk_shard_table) and, once its queue from the driver is empty, the
 *    model at the driver's applied index; tk_shard_check;
 *  - every snapshot a node installs is the model at its index (and passes
 *    tk_snap_check), and each shard's part of it too;
 *  - at most one client holds a key at any moment, by the clients' lease
 *    clocks (a G arriving while another client's window is open fails);
 *  - G tokens strictly increase per shard of a node; FIFO grants per key
 *    within a leadership (arrival order at the owning shard); every reply
 *    comes from the leadership the request arrived in; a G answers a
 *    committed grant of its client, and if that lease's expiry already
 *    committed (a G can come late: a deposed leader's shard reading an
 *    APPLY that waited through a stall), the client's window is over;
 *  - no expiry proposed before the lease ran out on the proposing node's
 *    clock (from its own apply or install of the grant, with the margin
 *    off-leader), and, when no clock drifts or jumps, none committed
 *    before lease after the grant's commit;
 *  - Q and N are linearizable: a state becomes visible when a leading
 *    shard applies it (or a shard holding it starts to lead); a Q answers
 *    a state visible at some moment between the send and the answer, and
 *    an N never comes while the (owner, token) was the visible holder for
 *    the whole of that window; an R answers a committed release;
 *  - liveness after healing: every request on an open connection gets an
 *    answer, and a fresh acquire on the leader gets G.
 */
#ifndef TK_TESTS_SIM_NODE_H
#define TK_TESTS_SIM_NODE_H

#include "raft/driver.h"
#include "shard/shard.h"
#include "tests/support/sim_cluster.h"

#define SIM_SHARDS_MAX 4
#define SIM_CLIENTS_MAX 64

struct sim_nodes_options {
    uint32_t shards_max;   /* each node runs 1..shards_max shards (per node) */
    uint32_t keys;         /* keys the clients use */
    uint32_t clients;      /* < SIM_CLIENTS_MAX */
    uint32_t inflight_max; /* requests in flight per connection */
    uint32_t burst_max;    /* requests per client action */
    uint32_t lease_min_ms, lease_max_ms;
    uint32_t release_pct;   /* chance an action releases something held */
    uint64_t qdelay_max_us; /* a message between threads is readable after 1..this */
    uint32_t stall_ppm;     /* per round: the thread then stalls up to stall_max_us */
    uint64_t stall_max_us;
    int32_t drift_ppm_max;         /* node clock rates within +-this */
    uint64_t jump_max_us;          /* forward jumps of a node clock, at most this... */
    uint64_t jump_window_us;       /* ...in total within any window this long */
    bool client_true_clock;        /* clients count leases on the true clock */
    struct tk_lock_limits limits;  /* per shard */
    uint32_t cut_slice, cut_piece; /* snapshot cut per shard (0: the defaults) */
};

struct sim_nodes_stats {
    uint64_t g, r, t, b, n, q; /* replies the clients got */
    uint64_t moved, overload;  /* connections closed by the server */
    uint64_t lost;             /* requests whose connection closed first */
    uint64_t requests, connects;
    uint64_t entries, commands; /* committed DATA entries and commands (model) */
    uint64_t installs;          /* snapshots installed */
    uint64_t snapshot_keys_max; /* largest snapshot installed, in held keys */
    uint64_t snapshot_bytes_max;
    uint64_t batches_waited;  /* rounds that ended with batches waiting for log room */
    uint64_t batches_refused; /* batches refused while leading */
    uint64_t leading;         /* TK_DRIVER_EV_LEADING */
    uint64_t held_max;        /* most keys held at once (model) */
    uint64_t jumps, stalls, rounds, messages;
};

struct sim_nodes;

/* Takes over c's hooks: c must have no node yet; every node added from now
 * on (sim_add_node) is a node process. Free c (sim_free) before S. */
struct sim_nodes *sim_nodes_create(struct sim_cluster *c,
                                   const struct sim_nodes_options *o,
                                   uint64_t seed);
void sim_nodes_destroy(struct sim_nodes *S);

/* Cluster time of the next thread round due (UINT64_MAX: none). */
uint64_t sim_nodes_next(struct sim_nodes *S);
/* Runs every round due at the cluster's time, in random order. */
void sim_nodes_run(struct sim_nodes *S);
/* One random client's next action (connect, requests, give up, close). */
void sim_nodes_clients(struct sim_nodes *S);
/* Node slot was resumed: one of its clients sends a query at once. */
void sim_nodes_resumed(struct sim_nodes *S, int slot);
/* A clock fault on a random node: a new rate, or a forward jump within
 * the jump budget. */
void sim_nodes_clock_fault(struct sim_nodes *S);
/* Compares every live node's tables with the model. */
void sim_nodes_check(struct sim_nodes *S);
/* After the cluster healed and converged: every request on an open
 * connection is answered, a fresh acquire on the leader gets G, and every
 * node's tables match the model once the queues are empty. */
void sim_nodes_finish(struct sim_nodes *S);
void sim_nodes_stats(const struct sim_nodes *S, struct sim_nodes_stats *st);

#endif
