/* A simulated Raft cluster on one thread: fake clock, fake network, and a
 * checker of the Raft safety properties after every step.
 *
 * Used by tests/unit/test_raft*.c (deterministic scenarios) and by
 * tests/sim/sim_raft.c (random faults over thousands of seeds). Modelled
 * on canonical/raft's raft_fixture and TigerBeetle's packet simulator.
 *
 * Network: every message a core emits is encoded with tk_wire_encode()
 * and decoded again at delivery (so the codec is exercised too), after a
 * random latency; it may be dropped, duplicated, reordered (by latency),
 * or cut by a partition (links are checked at send and at delivery).
 * Nodes: alive or crashed (a crashed node never comes back: a restart is a
 * fresh NodeId, added through the membership path), and may be paused
 * (no ticks, no deliveries; time moves on).
 *
 * The driver of each node does what the real Raft thread does with an
 * update: send the messages, install a snapshot, apply committed entries
 * and report them applied, hand a snapshot when asked. The state machine
 * is a hash chain of applied entries, extended by optional hooks. Driven
 * nodes (hooks.create) run the production driver instead (raft/driver.h,
 * see tests/support/sim_node.h): the checks below still read their cores
 * after every step, the hash chain follows what their drivers apply, and
 * their snapshots are lock snapshots that the node simulation checks.
 * Each node has a clock of its own (rate and jumps), which its events carry.
 *
 * Checks (sim_fail() prints the seed and aborts):
 *  - Election Safety: at most one leader per term, ever.
 *  - Log Matching: entries with equal index and term have equal prefixes
 *    (a prefix hash per entry, compared across all nodes and all time).
 *  - Leader Completeness: a new leader's log holds every committed entry.
 *  - State Machine Safety: every node applies the same entry at each
 *    index, and snapshots carry the same state as the applied entries.
 *  - commit never decreases; tokens strictly increase along the
 *    committed log (SPEC 7).
 *  - read barriers: a confirmed read index covers every entry committed
 *    anywhere before the read was requested (linearizable reads).
 */
#ifndef TK_TESTS_SIM_CLUSTER_H
#define TK_TESTS_SIM_CLUSTER_H

#include "core/tk.h"
#include "raft/raft.h"
#include "raft/wire.h"

#define SIM_NODES_MAX 16

struct sim_cluster;
struct sim_node;

/* Optional state-machine hooks. */
struct sim_hooks {
    void *ctx;
    /* A committed entry, in order, on node n. */
    void (*apply)(void *ctx, struct sim_node *n, const struct tk_raft_entry *e);
    /* Extra snapshot payload (malloc'd into *out, length returned). */
    size_t (*snapshot)(void *ctx, struct sim_node *n, uint8_t **out);
    /* Replace the state with a snapshot's extra payload. */
    void (*install)(void *ctx, struct sim_node *n, const uint8_t *data, size_t len);
    /* Called after every step of node n (role changes, leader duties). */
    void (*after_step)(void *ctx, struct sim_node *n, const struct tk_raft_update *up);
    /* Driven nodes (tests/support/sim_node.h): when create is set, every
     * node added gets its core from it (made with options o: a production
     * raft/driver.h driver that owns the core), and destroy frees it. Each
     * step of a driven core is checked like any other, then its update goes
     * to process (tk_driver_process), which reports back through
     * sim_send(), sim_applied() and sim_installed(); the snapshot blobs are
     * the driver's, opaque here. apply/snapshot/install/after_step are not
     * called for driven nodes. */
    struct tk_raft *(*create)(void *ctx, struct sim_node *n, const struct tk_raft_options *o);
    void (*destroy)(void *ctx, struct sim_node *n);
    void (*process)(void *ctx, struct sim_node *n, int rc, struct tk_raft_update *up);
};

struct sim_options {
    uint64_t seed;
    struct tk_raft_options raft; /* template; id and seed are set per node */
    uint64_t lat_min_us;
    uint64_t lat_max_us;
    uint32_t drop_ppm; /* per message, parts per million */
    uint32_t dup_ppm;
    /* Stale messages: this share of messages takes slow_min_us..slow_max_us
     * instead (longer than an election timeout: they arrive terms later). */
    uint32_t slow_ppm;
    uint64_t slow_min_us, slow_max_us;
    uint32_t check_every; /* tk_raft_check() every n-th step (0: never) */
    bool verbose;
};

struct sim_read {
    uint64_t id;
    uint64_t index;
    uint64_t committed_at_request; /* global commit when requested */
    bool done;
    bool ok;
};

struct sim_node {
    int slot;
    uint64_t id;
    int addr; /* its address is 10.0.0.<addr>: a restart keeps it */
    struct tk_raft *r;
    bool alive;
    bool paused;
    bool driven; /* its core belongs to a driver (hooks.create) */
    void *user;  /* for hooks */
    /* Its clock (sim_local): local = clk_base_l + (now - clk_base_g) scaled
     * by 1 + clk_ppm / 10^6; jumps move clk_base_l forward. */
    int32_t clk_ppm;
    uint64_t clk_base_g, clk_base_l;
    uint64_t clk_jumped_us; /* sum of the jumps */
    /* Driver state */
    uint64_t applied;
    uint64_t chain;      /* hash chain of applied entries */
    uint64_t token_next; /* fencing counter after the last applied entry */
    uint8_t role;
    uint64_t term;
    uint64_t commit;
    uint64_t snapshots_installed;
    uint64_t snapshots_taken;
    /* Shadow of the log: per index, term and prefix hash. */
    uint64_t sh_first; /* first index held */
    uint64_t sh_n;
    uint64_t sh_cap;
    uint64_t *sh_term;
    uint64_t *sh_hash;
    uint64_t sh_prev_hash; /* prefix hash at sh_first - 1 */
    /* Read barriers requested on this node */
    struct sim_read reads[64];
    uint32_t n_reads;
};

struct sim_packet {
    uint64_t deliver_at;
    uint64_t seq;
    int from;
    int to;
    size_t len;
    uint8_t *bytes;
};

/* Per index: what was committed there, and every (term, hash) seen. */
struct sim_index_rec {
    bool committed;
    uint64_t term;
    uint64_t hash; /* prefix hash */
    uint64_t entry_hash;
    uint64_t chain; /* state machine after applying it */
    bool chain_known;
    uint64_t token_first;
    uint64_t token_next;
    uint32_t n_seen;
    uint32_t cap_seen;
    uint64_t *seen; /* pairs: term, hash */
};

struct sim_cluster {
    struct sim_options opt;
    struct tk_prng prng;
    uint64_t now;
    struct sim_node nodes[SIM_NODES_MAX];
    uint32_t n_nodes;
    bool cut[SIM_NODES_MAX][SIM_NODES_MAX];          /* cut[a][b]: a -> b is down */
    uint64_t delay_us[SIM_NODES_MAX][SIM_NODES_MAX]; /* extra latency a -> b (sim_delay) */
    struct sim_hooks hooks;
    /* Network */
    struct sim_packet *heap;
    uint64_t heap_n, heap_cap;
    uint64_t packet_seq;
    struct tk_wire_scratch scratch;
    uint64_t domain_lo, domain_hi;
    /* Global records */
    uint64_t *leader_of_term;
    uint64_t terms_cap;
    struct sim_index_rec *recs;
    uint64_t recs_cap;
    uint64_t committed_max;
    /* Stats */
    uint64_t steps;
    uint64_t delivered;
    uint64_t dropped;
    uint64_t bytes_sent;
    uint64_t applied_entries;
};

/* Creates n fresh nodes (not bootstrapped). */
void sim_init(struct sim_cluster *c, const struct sim_options *opt, uint32_t n);
void sim_free(struct sim_cluster *c);
/* Default test options: fast timers (heartbeat 10 ms, election 150-300 ms
 * scaled like production), small log bounds so snapshots happen. */
void sim_options_default(struct sim_options *o, uint64_t seed);

/* Bootstraps on node slot with all current nodes as voters. */
void sim_bootstrap(struct sim_cluster *c, int slot);
/* Adds a fresh node (new NodeId, no state); returns its slot. */
int sim_add_node(struct sim_cluster *c);
/* The config member entry for node slot (addresses derived from its id). */
void sim_member(const struct sim_cluster *c, int slot, uint8_t role, struct tk_raft_member *m);

/* Runs one event: the earliest message delivery or timer, whichever comes
 * first, but not past `until`. Returns false if nothing happened (time
 * moved to `until`). */
bool sim_step(struct sim_cluster *c, uint64_t until);
/* Runs until time t. */
void sim_run_until(struct sim_cluster *c, uint64_t t);
/* Runs until pred is true or time limit (absolute) passes; returns pred. */
bool sim_run_while(struct sim_cluster *c,
                   uint64_t limit,
                   bool (*pred)(struct sim_cluster *c, void *arg),
                   void *arg);

/* Driver entry points: feed an event to a node and process the update. */
int sim_event(struct sim_cluster *c, int slot, struct tk_raft_event *ev);
int sim_propose(struct sim_cluster *c,
                int slot,
                const void *data,
                uint32_t len,
                uint32_t token_count);
int sim_change(struct sim_cluster *c, int slot, uint8_t type, int member_slot);
int sim_transfer(struct sim_cluster *c, int slot, uint64_t target);
int sim_read(struct sim_cluster *c, int slot, uint64_t id);

/* Driven nodes report what their driver did (hooks.create): a message to a
 * peer; a DATA entry handed to the state machine (entries before it are
 * counted applied too); a snapshot installed at index. sim_sync() checks a
 * driven node after any call of its driver outside sim_event() (proposals,
 * reads, snapshots) and counts what it applied. */
void sim_send(struct sim_cluster *c, int slot, const struct tk_raft_msg *m);
void sim_applied(struct sim_cluster *c, int slot, uint64_t index);
void sim_installed(struct sim_cluster *c, int slot, uint64_t index);
void sim_sync(struct sim_cluster *c, int slot);

/* Node clocks: every event of node slot carries its local time. A rate
 * (parts per million, from now on) and forward jumps; no change of rate or
 * jump ever moves a clock back. */
uint64_t sim_local(const struct sim_cluster *c, int slot);
/* The earliest cluster time at which node slot's clock reads local. */
uint64_t sim_global_at(const struct sim_cluster *c, int slot, uint64_t local);
void sim_clock_rate(struct sim_cluster *c, int slot, int32_t ppm);
void sim_clock_jump(struct sim_cluster *c, int slot, uint64_t us);

/* Faults */
void sim_crash(struct sim_cluster *c, int slot);
void sim_pause(struct sim_cluster *c, int slot, bool paused);
void sim_cut(struct sim_cluster *c, int a, int b, bool down); /* both directions */
void sim_isolate(struct sim_cluster *c, int slot, bool down);
void sim_heal(struct sim_cluster *c);
/* Extra latency on the link between a and b, both directions, for the
 * messages sent from now on (a slow link); 0 removes it. */
void sim_delay(struct sim_cluster *c, int a, int b, uint64_t us);

/* Queries */
int sim_leader(const struct sim_cluster *c);       /* a live leader with the highest term, or -1 */
uint32_t sim_leaders(const struct sim_cluster *c); /* live nodes that think they lead */
int sim_slot_of(const struct sim_cluster *c, uint64_t id);

/* Prints every node's state to stderr. */
void sim_dump(const struct sim_cluster *c);
/* Full check of every node (O(log)); also run per step by the driver. */
void sim_check_all(struct sim_cluster *c);
_Noreturn void sim_fail(const struct sim_cluster *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
