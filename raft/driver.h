/* The Raft driver: the Raft thread's logic as a pure step function around
 * the Raft core (raft/raft.h). The server's Raft thread (net/raftd.c) and
 * the simulation (tests/support/sim_node.c) run exactly this code; net/
 * adds sockets, clocks and rings around it.
 *
 * Inputs: messages from the shards (core/msg.h: proposals, read barriers,
 * snapshot parts), Raft updates from the core (after a tick, a received
 * peer message, a proposal, a membership change), the time. Outputs:
 * messages to the shards (committed commands, roles, read results,
 * snapshot requests and installs) through a struct tk_msg_out, messages to
 * peers and log lines through struct tk_driver_io.
 *
 * What it does:
 *  - Batching and token numbering (SPEC 7): the proposals of every shard
 *    of a round go into one DATA entry (u32 count | tk_cmd encodings) and
 *    its grants are numbered from the core's fencing counter. When the log
 *    is full, complete batches wait here in order (bounded by proposals_max,
 *    one proposal per key in flight) and the shards' messages keep being
 *    read, so snapshot parts and read barriers are never stuck behind them.
 *  - Roles and epochs: every role change is a ROLE message with a new
 *    epoch to every shard; a step-down reaches the shards before any entry
 *    of the new leadership is applied or a snapshot installed; a new
 *    leader announces itself only after its term's first entry is applied
 *    (and, for a forced new domain, after serve_after). A batch the core
 *    refuses while this node leads (a leadership transfer) steps the shards
 *    down, so no key stays in flight with nobody to finish it.
 *  - Reads: the barriers asked in a round become one read group.
 *  - Slots (SPEC 15): a ring an operator gives (SLOTS frame) is checked,
 *    proposed as a DATA entry of its own and, once applied, answered; at
 *    its apply every shard gets the slots its group serves (SLOTS
 *    message), in order with the commands. The ring travels in snapshots.
 *  - Snapshots: SNAP_REQ to every shard; the pieces of each shard's
 *    incremental cut are copied into its region of one blob (core/snap.h),
 *    allocated once every shard said its size; install split per shard,
 *    one message each (a cut still running is given up).
 */
#ifndef TK_RAFT_DRIVER_H
#define TK_RAFT_DRIVER_H

#include "core/msg.h"
#include "core/slots.h"
#include "raft/raft.h"
#include "raft/wire.h"

#define TK_DRIVER_BATCH_CMDS_MAX 4096
#define TK_DRIVER_READ_GROUPS_MAX 1024
#define TK_DRIVER_SHARDS_MAX 64
/* Tokens count microseconds since the Unix epoch at bootstrap at least;
 * no domain is started before 2026-01-01T00:00:00Z. */
#define TK_DRIVER_TOKEN_EPOCH_US UINT64_C(1767225600000000)

/* proposals_max for shards of keys_per_shard keys each: a proposal may
 * wait for every key the shards hold together, plus one. Less, and a full
 * log with every shard full reaches the driver's bound (an assertion). */
static inline uint64_t tk_driver_proposals_for(uint64_t keys_per_shard, uint32_t nshards)
{
    return keys_per_shard * nshards + 1;
}

/* What the driver reports (the server logs them): a, b as listed. */
enum tk_driver_event {
    TK_DRIVER_EV_LEADING = 1,      /* term, index of its first entry: serving */
    TK_DRIVER_EV_STEPPED_DOWN,     /* term */
    TK_DRIVER_EV_INSTALLED,        /* held keys, bytes */
    TK_DRIVER_EV_SNAPSHOT_REFUSED, /* index, error code */
    TK_DRIVER_EV_BOOTSTRAP,        /* first token, voters */
    TK_DRIVER_EV_BOOTSTRAP_FAILED, /* error code */
    TK_DRIVER_EV_BATCH_REFUSED,    /* commands, error code: shards stepped down */
    TK_DRIVER_EV_HELD, /* wall time it waits for, monotonic us left: a forced domain waits */
};
/* Samples for histograms. */
enum { TK_DRIVER_SAMPLE_BATCH, TK_DRIVER_SAMPLE_LATENCY };

/* Log levels of tk_driver_io.log (net/log.h uses the same numbers). */
enum { TK_DRIVER_LOG_ERROR, TK_DRIVER_LOG_WARN, TK_DRIVER_LOG_INFO };

struct tk_driver_io {
    void *ctx;
    /* A frame to the peer at addr, over this node's link to that address
     * (dialled if need be), sent only if the process there proved to be
     * f->msg.to when that is set. The driver chose addr: --peers or a
     * member's (tk_driver_dial_ok), never an address a frame named; NULL
     * only without --peers (cluster.npeers 0), where the transport routes
     * by NodeId (the simulation's). */
    void (*send)(void *ctx, const struct tk_wire_frame *f, const char *addr);
    /* Clusters: an answer on the link a frame came in on (the `link` of
     * tk_driver_peer_frame, during that call). A JoinReply or SlotsReply is to be signed
     * for that link's handshake (tk_wire_reply_text). */
    void (*reply)(void *ctx, uint64_t link, struct tk_wire_frame *f);
    /* Clusters: closes that link (a frame of another fencing domain). */
    void (*close_link)(void *ctx, uint64_t link);
    /* Clusters: the NodeId the process on this node's link to addr proved
     * in its handshake, 0 if there is no such link. */
    uint64_t (*link_id)(void *ctx, const char *addr);
    /* Optional: a log line of the membership protocol. */
    void (*log)(void *ctx, int level, const char *line);
    void (*event)(void *ctx, int event, uint64_t a, uint64_t b);
    /* One sample: commands of a proposed entry, or commit latency (us). */
    void (*sample)(void *ctx, int which, uint64_t v);
    /* A snapshot from the leader cannot be loaded (checked before anything
     * changed): the node must stop (the server exits with status 3). */
    void (*fatal)(void *ctx, const char *why);
    /* Optional: a committed entry was handed to the shards (observers). */
    void (*applied)(void *ctx, uint64_t index, const struct tk_raft_entry *e);
    /* Optional: a snapshot was installed at index. */
    void (*installed)(void *ctx, uint64_t index, const uint8_t *blob, size_t len);
};

#define TK_DRIVER_PEERS_MAX 5

/* A cluster node's --peers and the flags of its membership protocol
 * (SPEC 10); npeers 0 is a standalone node. */
struct tk_driver_cluster {
    uint32_t npeers, self; /* self: this node's entry */
    char peer_addr[TK_DRIVER_PEERS_MAX][TK_RAFT_ADDR_MAX + 1];
    uint64_t peers_hash; /* of the sorted list: peers agree when equal */
    bool force_new_domain;
    uint64_t seed; /* domain ids and the agreement's ballots */
};

struct tk_driver_options {
    uint32_t nshards;
    struct tk_raft_options raft;
    uint64_t proposals_max;          /* proposals that may wait while the log is full */
    char advertise[TK_MSG_ADDR_MAX]; /* this node's client address */
    /* A forced new domain (serve_after_us set) is served only once this
     * node's wall clock passed serve_after_us + drift_us (drift_us: the
     * most two members' clocks differ, --max-clock-drift-ms), and, on a
     * voter that wrote its entry 1, once what was left of that then has
     * passed on its monotonic clock too: a wall clock stepped ahead later
     * does not end the hold. hold_us (--new-domain-hold-ms) is the hold
     * this node proposes when it forces a new domain. */
    uint64_t drift_us, hold_us;
    struct tk_driver_cluster cluster;
    /* --group (SPEC 15): the name of this node's group, "" for none. A
     * group with a name serves no slot until a ring naming it is
     * committed; one without serves every slot until then, and takes only
     * a ring that gives it every slot. */
    char group[TK_SLOTS_NAME_MAX + 1];
};

struct tk_driver_stats {
    uint64_t commands, entries; /* applied commands, proposed entries */
    uint64_t last_snapshot_bytes;
    uint64_t last_snapshot_cut_us; /* from asking the shards to the whole blob */
    uint64_t waiting_batches;      /* complete batches waiting for log room */
    uint64_t refused_batches;      /* batches refused while leading */
    uint64_t epoch;
    uint64_t applied;
    bool serving;          /* the shards lead */
    uint64_t ring_version; /* 0: no ring committed */
    uint32_t
        slots_owned; /* by this group in the committed ring (TK_SLOTS with none and no --group) */
    uint64_t rings_applied; /* ring entries that changed the ring */
    uint64_t rings_refused; /* ring entries that did not (refused at their apply) */
    uint32_t slots_frozen;  /* owned, frozen for moves in progress */
    uint64_t moves_frozen, moves_handed, moves_claimed; /* move steps applied */
};

struct tk_driver;

/* Where a cluster node stands in its membership (SPEC 10). */
enum tk_driver_membership {
    TK_DRIVER_STANDALONE,
    TK_DRIVER_BOOTSTRAPPING, /* fresh; waiting for --peers to agree on a new domain */
    TK_DRIVER_JOINING,       /* fresh; asked a live domain's leader to add it */
    TK_DRIVER_WAITING,       /* fresh; a peer has a domain but knows no leader */
    TK_DRIVER_LEARNER,
    TK_DRIVER_VOTER,
    TK_DRIVER_REMOVED, /* no longer in the configuration: the node must exit (status 3) */
};
const char *tk_driver_membership_name(uint8_t m);

struct tk_driver_members {
    uint8_t state;          /* enum tk_driver_membership */
    char note[256];         /* why it stands there, for /status (any bytes: escaped there) */
    uint64_t joins;         /* fresh NodeIds this node added as learners */
    uint64_t changes;       /* membership changes this node proposed as leader */
    uint64_t dials_refused; /* sends to an address neither --peers nor a member has */
};

struct tk_driver *tk_driver_create(const struct tk_driver_options *o,
                                   const struct tk_msg_out *out,
                                   const struct tk_driver_io *io);
void tk_driver_destroy(struct tk_driver *d);

/* The core, for the simulation's checks (read only); the driver alone
 * steps it. */
struct tk_raft *tk_driver_core(struct tk_driver *d);

/* A frame from a peer, on the link `link` (an opaque handle the replies
 * and close_link of tk_driver_io name), read at the time of the last
 * tk_driver_clock. Raft messages go to the core; probes, joins, removals
 * and the new-domain agreement are the membership protocol's (SPEC 10):
 * all of it runs here, so the simulation runs it too. */
void tk_driver_peer_frame(struct tk_driver *d, uint64_t link, const struct tk_wire_frame *f);
/* Whether this node may dial addr: an entry of --peers or a member's peer
 * address. Nothing a frame says adds to that. */
bool tk_driver_dial_ok(const struct tk_driver *d, const char *addr);
void tk_driver_members(const struct tk_driver *d, struct tk_driver_members *out);
/* The configuration (NULL before one is known), the core's status and
 * counters: read only. */
const struct tk_raft_config *tk_driver_config(const struct tk_driver *d);
void tk_driver_raft_status(const struct tk_driver *d, struct tk_raft_status *st);
const struct tk_raft_metrics *tk_driver_raft_metrics(const struct tk_driver *d);
/* The core's role (TK_RAFT_FOLLOWER, ...) and the leader it knows (0: none). */
int tk_driver_role(const struct tk_driver *d);
uint64_t tk_driver_leader_id(const struct tk_driver *d);

/* Sets the clocks for the calls that follow: monotonic now_us (never
 * decreasing) and the wall clock (bootstrap tokens, serve_after). */
void tk_driver_clock(struct tk_driver *d, uint64_t now_us, uint64_t wall_us);

/* Performs an update of the core, and everything it leads to. */
void tk_driver_process(struct tk_driver *d, int rc, struct tk_raft_update *up);
/* Ticks the core if its deadline passed, and the membership protocol's
 * timers (probes, joins, the next replacement step). */
void tk_driver_tick(struct tk_driver *d);
/* Earliest time the driver needs a tick. */
uint64_t tk_driver_deadline(const struct tk_driver *d);

/* A message from shard src. Always consumed. */
void tk_driver_message(struct tk_driver *d,
                       uint32_t src,
                       uint32_t kind,
                       const uint8_t *data,
                       uint32_t len);
/* End of a round of shard messages: proposes what was batched, starts a
 * read barrier for the reads asked. */
void tk_driver_flush(struct tk_driver *d);

/* Writes entry 1 of a new fencing domain: config c, first token
 * first_token exactly (a value the fresh nodes agreed on, raft/boot.h, so
 * that every voter that writes it writes the same entry), or the wall
 * clock when first_token is 0 (a standalone node). Returns the core's
 * verdict; failures are logged and change nothing. */
int tk_driver_bootstrap(struct tk_driver *d, const struct tk_raft_config *c, uint64_t first_token);

/* Hands leadership to the most caught-up voter (SIGTERM). */
int tk_driver_transfer(struct tk_driver *d);

/* A node outside any configuration (joining) tells its clients where the
 * domain's leader is: a ROLE (follow, addr) if addr changed. */
void tk_driver_point_clients(struct tk_driver *d, const char *addr);

bool tk_driver_serving(const struct tk_driver *d);
/* The leader's client address the shards were last told ("" if none). */
const char *tk_driver_leader_addr(const struct tk_driver *d);
void tk_driver_stats(const struct tk_driver *d, struct tk_driver_stats *st);
/* The committed ring (NULL: none) and the group it was given to (""
 * with none): read only, valid until the driver's next step. */
const struct tk_slot_ring *tk_driver_ring(const struct tk_driver *d, const char **group);
/* The moves this group takes part in (raft/driver_slots.c), oldest first,
 * at most max of them into out; how many. */
struct tk_driver_move {
    uint16_t first, last;
    const char *state; /* "frozen", "handed" (over, to peer), "claimed" (from peer) */
    const char *peer;  /* valid until the driver's next step */
    uint64_t counter;  /* handed: the first token this group did not issue; claimed: the source's */
};
uint32_t tk_driver_moves(const struct tk_driver *d, struct tk_driver_move *out, uint32_t max);
/* Checks the payload of a DATA entry (u32 count | commands, grants
 * numbered token_first, token_first + 1, ... up to token_next). */
int tk_driver_check_entry(const uint8_t *data,
                          uint32_t len,
                          uint64_t token_first,
                          uint64_t token_next);

#endif
