/* The Raft consensus core: a pure state machine (SPEC 7, 8, 10).
 *
 * No sockets, clocks, threads or I/O: time comes in as `now_us` (monotonic
 * microseconds) with every event, randomness from a struct tk_prng seeded
 * by the caller (options.seed). One thread (the Raft thread, or the
 * simulator) owns a struct tk_raft and feeds it events with tk_raft_step()
 * or the wrappers below; each step fills a struct tk_raft_update saying
 * what the driver must do. This follows cowsql/raft's raft_step(r, event,
 * update).
 *
 * State is volatile (SPEC 8): term, vote and log live in memory only, so
 * an entry counts as stored the moment it is appended and a restarted
 * process comes back under a new NodeId. There are no "persisted" events.
 *
 * Memory ownership, in one rule: everything an update points to (messages,
 * the entries inside Append messages, read results, the snapshot to
 * install) belongs to the core and stays valid until the next call of
 * tk_raft_step() (or a wrapper) or tk_raft_destroy(). Everything an event
 * points to belongs to the caller and is only read during the call, except
 * the snapshot blob of TK_RAFT_EV_SNAPSHOT, whose ownership passes to the
 * core (it must come from malloc(); the core free()s it). Committed
 * entries stay readable with tk_raft_entry() until the driver reports them
 * applied and a later snapshot covers them: the core never drops an entry
 * above the applied index. Pointers from tk_raft_entry() and
 * tk_raft_config() are valid until the next step.
 *
 * The driver (the Raft thread), per step:
 *  1. up.flags & SNAPSHOT_INSTALL: clear the state machine (every shard)
 *     and load up.install.data; the applied index is now up.install.index.
 *     Do this before applying anything else.
 *  2. up.msgs: for each message, find the connection of msgs[i].to, encode
 *     with tk_wire_encode() (raft/wire.h, domain = ours) and send. A
 *     message to a peer without a connection is simply dropped.
 *  3. up.reads: answer each read barrier: ok -> once entries up to
 *     reads[i].index are applied; !ok -> M.
 *  4. up.flags & STATE: role, term or leader changed. Leaving the leader
 *     role: tk_lock_follow() on every shard, `M -` to clients (SPEC 8).
 *     Becoming leader: wait until the entry at term_start_index
 *     (tk_raft_status) is applied, then tk_lock_lead() on every shard.
 *  5. Apply entries (applied, up.commit] in order: tk_raft_entry(r, i);
 *     DATA entries hold the encoded tk_cmd batch, NOOP and CONFIG nothing
 *     for the shards. Then report tk_raft_applied(r, up.commit, now).
 *  6. up.flags & SNAPSHOT_WANTED: cut a snapshot of every shard at the
 *     applied index and hand it over with tk_raft_snapshot() (now or a bit
 *     later; the core asks again when more is applied).
 * Events in: tk_raft_tick() whenever now >= tk_raft_deadline(r) (it may be
 * called more often); tk_raft_receive() for each decoded peer frame of our
 * domain; tk_raft_propose() for each batch of shard proposals (tokens
 * below); tk_raft_read() for linearizable reads; tk_raft_transfer() on
 * SIGTERM; tk_raft_change() for Join (add learner, promote, remove old).
 *
 * Proposals and tokens (SPEC 7): read t = tk_raft_next_token(r), number
 * the GRANT/HANDOFF commands of the batch t, t+1, ..., t+k-1, encode, and
 * call tk_raft_propose(r, data, len, t, k, ...) with no step in between.
 * The core checks token_first >= t (above t only to raise the counter:
 * a group claiming moved slots, SPEC 15) and appends one DATA entry. If the
 * proposal is refused (TK_ENOTLEADER: not leader or a transfer runs;
 * TK_EFULL: log bound reached), the shards' proposals cannot be kept:
 * tk_lock_follow() the shards for the rest of this term (lock.h).
 *
 * Bootstrap (SPEC 10): on the lowest NodeId once every configured peer
 * was probed fresh, tk_raft_bootstrap(r, config, first_token, now) writes
 * entry 1 (CONFIG: members and domain; token_first = first_token) and
 * campaigns at once. Other fresh nodes simply answer what they receive;
 * they learn the config and domain from entry 1 (or a snapshot), and
 * until then tk_raft_config() is NULL and they never campaign.
 *
 * Join (SPEC 10): the leader turns a Join from a fresh NodeId into
 * tk_raft_change(ADD_LEARNER); once tk_raft_status() shows its match at
 * the commit index, PROMOTE; once that committed, REMOVE the old NodeId
 * with the same address. TK_EFULL means "not yet" (one change at a time,
 * after an entry of the leader's term committed, learner caught up).
 *
 * Sections cited: Raft paper Figure 2 (§5), Ongaro's thesis §3.10
 * (leadership transfer), §4.1-4.4 (single-server membership changes),
 * §5 (snapshots), §6.4 (read index), §9.6 (pre-vote), §6.2 and §9.6
 * (check-quorum).
 */
#ifndef TK_RAFT_RAFT_H
#define TK_RAFT_RAFT_H

#include "core/tk.h"

/* ------------------------------------------------------------------ */
/* Limits                                                              */

/* Members of a configuration (voters and learners). A replacement runs
 * with one extra voter and one learner at most, so 5 + 2 leaves room. */
#define TK_RAFT_MEMBERS_MAX 8
/* Voters of a configuration: 1 (standalone), 3 or 5 at start; 4 or 6
 * transiently while a node is replaced (SPEC 10). */
#define TK_RAFT_VOTERS_MAX 7
/* Longest "host:port" address, excluding the NUL. */
#define TK_RAFT_ADDR_MAX 255
/* Largest data of one entry (one proposal batch). */
#define TK_RAFT_ENTRY_BYTES_MAX (4u << 20)
/* Most entries the core puts in one Append message (the driver batches
 * proposals into few large entries, so this is rarely reached). A wire
 * decoder scratch of this many entries accepts every Append the core sends. */
#define TK_RAFT_APPEND_ENTRIES_MAX 8192u

/* ------------------------------------------------------------------ */
/* Log entries                                                         */

enum tk_raft_entry_type {
    TK_RAFT_NOOP = 1,   /* first entry of every leader's term */
    TK_RAFT_DATA = 2,   /* a batch of encoded tk_cmd, opaque to the core */
    TK_RAFT_CONFIG = 3, /* a membership configuration (tk_raft_config_encode) */
};

/* One log entry. Tokens: the fencing counter (SPEC 7) travels in the log.
 * A DATA entry owns tokens [token_first, token_first + token_count); NOOP
 * and CONFIG entries have token_count 0 and carry the counter forward in
 * token_first. Along the log, every entry's token_first is at least the
 * previous entry's token_first + token_count, so tokens strictly increase
 * and the last entry says where the counter stands. */
struct tk_raft_entry {
    uint64_t term;
    uint64_t index;
    uint64_t token_first;
    uint32_t token_count;
    uint8_t type;        /* enum tk_raft_entry_type */
    uint32_t len;        /* bytes of data */
    const uint8_t *data; /* NULL when len == 0 */
    uint64_t cum_bytes;  /* internal: bytes of this node's log up to here */
};

/* Next token after an entry. */
static inline uint64_t tk_raft_entry_token_next(const struct tk_raft_entry *e)
{
    return e->token_first + e->token_count;
}

/* ------------------------------------------------------------------ */
/* Membership                                                          */

enum tk_raft_member_role {
    TK_RAFT_VOTER = 1,
    TK_RAFT_LEARNER = 2, /* replicated to, never votes, not in any quorum */
};

struct tk_raft_member {
    uint64_t id;                            /* NodeId, != 0 */
    uint8_t role;                           /* enum tk_raft_member_role */
    char peer_addr[TK_RAFT_ADDR_MAX + 1];   /* "host:port", NUL-terminated */
    char client_addr[TK_RAFT_ADDR_MAX + 1]; /* "host:port", NUL-terminated */
};

/* A configuration: the members plus the fencing domain they belong to. */
struct tk_raft_config {
    uint64_t domain_lo;
    uint64_t domain_hi;
    /* Wall-clock microseconds before which no leader of this domain serves
     * (0: none). Set when an operator forces a new domain over a lost one
     * (SPEC 10), so that holders of the lost domain's locks run out first;
     * it is in the configuration so that every leader of the domain keeps
     * it. Membership changes carry it along. */
    uint64_t serve_after_us;
    uint32_t n;
    struct tk_raft_member m[TK_RAFT_MEMBERS_MAX];
};

/* Checks a configuration: 1..TK_RAFT_MEMBERS_MAX members, ids distinct and
 * non-zero, roles known, 1..TK_RAFT_VOTERS_MAX voters, addresses non-empty
 * visible ASCII. Returns TK_OK or TK_EINVAL. */
int tk_raft_config_check(const struct tk_raft_config *c);
uint32_t tk_raft_config_voters(const struct tk_raft_config *c);
/* The member with this id, or NULL. */
const struct tk_raft_member *tk_raft_config_find(const struct tk_raft_config *c, uint64_t id);
bool tk_raft_config_is_voter(const struct tk_raft_config *c, uint64_t id);

/* Encoding of a configuration (the data of CONFIG entries, and the config
 * field of Snapshot frames), little-endian:
 *     u64 domain_lo | u64 domain_hi | u8 n |
 *     n x { u64 id | u8 role | u16 len | peer_addr | u16 len | client_addr } |
 *     u64 serve_after_us
 * tk_raft_config_encode() returns the bytes written, or 0 if cap is too
 * small (the config must pass tk_raft_config_check). tk_raft_config_decode()
 * validates everything (the bytes come from peers) and returns TK_OK with
 * *used set, or TK_EPROTO. */
#define TK_RAFT_CONFIG_ENCODED_MAX (17 + TK_RAFT_MEMBERS_MAX * (9 + 2 * (2 + TK_RAFT_ADDR_MAX)) + 8)
size_t tk_raft_config_encode(const struct tk_raft_config *c, uint8_t *buf, size_t cap);
int tk_raft_config_decode(const uint8_t *buf, size_t len, struct tk_raft_config *c, size_t *used);

/* ------------------------------------------------------------------ */
/* Messages between cores (and the membership messages of the driver)  */

enum tk_raft_msg_type {
    TK_RAFT_MSG_PREVOTE = 1,
    TK_RAFT_MSG_VOTE = 2,
    TK_RAFT_MSG_VOTE_REPLY = 3,
    TK_RAFT_MSG_APPEND = 4,
    TK_RAFT_MSG_APPEND_REPLY = 5,
    TK_RAFT_MSG_SNAPSHOT = 6,
    TK_RAFT_MSG_SNAPSHOT_REPLY = 7,
    TK_RAFT_MSG_TIMEOUT_NOW = 8,
    /* The rest are handled by the driver, never by tk_raft_step(). */
    TK_RAFT_MSG_JOIN = 9,
    TK_RAFT_MSG_JOIN_REPLY = 10,
    TK_RAFT_MSG_PROBE = 11,
    TK_RAFT_MSG_PROBE_REPLY = 12,
    TK_RAFT_MSG_REMOVE = 13, /* an operator (ticketctl) asks the leader to drop a member */
    TK_RAFT_MSG_BOOT = 14,   /* the new-domain agreement among fresh nodes (raft/boot.h) */
    TK_RAFT_MSG_SLOTS = 15,  /* an operator (ticketctl ring apply) gives the leader a ring */
    TK_RAFT_MSG_SLOTS_REPLY = 16,
};
#define TK_RAFT_MSG_TYPE_MAX 16

/* SLOTS_REPLY: what became of a ring an operator gave (SPEC 15). */
enum tk_raft_slots_status {
    TK_RAFT_SLOTS_OK = 0,         /* committed: the group's ring is now `version` */
    TK_RAFT_SLOTS_NOT_LEADER = 1, /* ask leader_id at leader_peer_addr */
    TK_RAFT_SLOTS_RETRY = 2,      /* another ring is being committed; ask again */
    TK_RAFT_SLOTS_REFUSED = 3,    /* why says why; nothing changed */
};
#define TK_RAFT_SLOTS_WHY_MAX 255 /* SLOTS_REPLY's why: bytes 0x20-0x7E */

/* SLOTS: what the operator asks (SPEC 15 moves; raft/driver_slots.c). */
enum tk_raft_slots_op {
    TK_RAFT_SLOTS_RING = 1,     /* the ring becomes the group's */
    TK_RAFT_SLOTS_FREEZE = 2,   /* the source stops serving the range */
    TK_RAFT_SLOTS_HANDOVER = 3, /* the source gives it away with its counter */
    TK_RAFT_SLOTS_CLAIM = 4,    /* the target owns it above that counter */
};

/* A string that points into someone else's buffer (not NUL-terminated). */
struct tk_raft_str {
    const char *p;
    uint16_t len;
};

enum tk_raft_join_status {
    TK_RAFT_JOIN_OK = 0,         /* added as learner (or already a member) */
    TK_RAFT_JOIN_NOT_LEADER = 1, /* ask leader_id at leader_peer_addr */
    TK_RAFT_JOIN_RETRY = 2,      /* a change is pending; ask again later */
    TK_RAFT_JOIN_REFUSED = 3,    /* e.g. membership full */
    TK_RAFT_JOIN_REMOVED = 4,    /* from a leader: the receiver is not in its configuration */
};
/* JOIN_REPLY also answers REMOVE: OK (removal appended, or not a member),
 * NOT_LEADER, RETRY (a change is in flight), REFUSED (the member is the
 * leader or was heard from within an election timeout: it is alive, and
 * removing it is not for this command; or it is the last voter). */

#define TK_RAFT_PROBE_MEMBER 0x01u /* the replier belongs to a domain */
#define TK_RAFT_PROBE_LEADER 0x02u /* the replier is the leader */
#define TK_RAFT_PROBE_FORCE 0x04u  /* PROBE: the sender runs with --force-new-domain */

struct tk_raft_msg {
    uint8_t type;  /* enum tk_raft_msg_type */
    uint64_t from; /* sender NodeId */
    uint64_t to;   /* receiver NodeId (not on the wire: the connection says it) */
    uint64_t term; /* sender's term; PREVOTE: the term it would campaign in */
    union {
        struct { /* PREVOTE, VOTE (RequestVote) */
            uint64_t last_index;
            uint64_t last_term;
            uint8_t transfer; /* VOTE after TimeoutNow: skip leader stickiness */
        } vote;
        struct {         /* VOTE_REPLY */
            uint8_t pre; /* answers a PREVOTE */
            uint8_t granted;
        } vote_reply;
        struct { /* APPEND (AppendEntries; also the heartbeat) */
            uint64_t prev_index;
            uint64_t prev_term;
            uint64_t commit;
            uint64_t seq; /* heartbeat round, echoed (read barriers) */
            uint32_t n;
            const struct tk_raft_entry *entries; /* n entries, index prev_index+1.. */
        } append;
        struct { /* APPEND_REPLY */
            uint8_t success;
            uint64_t index; /* success: last index known to match; else the rejected prev_index */
            uint64_t hint;  /* reject: where the leader should probe next */
            uint64_t seq;   /* echo of append.seq */
        } append_reply;
        struct {                 /* SNAPSHOT (InstallSnapshot, one chunk) */
            uint64_t index;      /* last index covered by the snapshot */
            uint64_t term;       /* its term */
            uint64_t token_next; /* fencing counter after index */
            uint64_t total;      /* bytes of the whole blob */
            uint64_t offset;     /* of this chunk */
            /* ms since the leases in the blob were counted, on the sender's
             * clock when it sent this chunk (rounded down): an install
             * takes that off what the blob says is left of each lease. */
            uint32_t age_ms;
            uint32_t len; /* of this chunk */
            const uint8_t *data;
            const struct tk_raft_config *config; /* config at index */
        } snapshot;
        struct {             /* SNAPSHOT_REPLY */
            uint64_t index;  /* the snapshot being received */
            uint64_t offset; /* bytes received so far: send from here */
            uint8_t done;    /* the snapshot is installed (or already covered) */
        } snapshot_reply;
        struct { /* JOIN: a fresh node asks to be added (SPEC 10) */
            struct tk_raft_str peer_addr;
            struct tk_raft_str client_addr;
        } join;
        struct {                /* JOIN_REPLY */
            uint8_t status;     /* enum tk_raft_join_status */
            uint64_t leader_id; /* 0 if unknown */
            struct tk_raft_str leader_peer_addr;
            /* The sender's MAC of the three fields above, bound to the
             * link's handshake (tk_wire_reply_text, tk_hs_mac): what
             * lets `ticketctl remove-member` trust the answer. */
            uint8_t mac[32];
        } join_reply;
        struct {                 /* PROBE: "which domain, which leader?" */
            uint64_t peers_hash; /* hash of the sender's --peers, so peers can agree */
            struct tk_raft_str peer_addr;
            struct tk_raft_str client_addr;
            uint8_t flags; /* TK_RAFT_PROBE_FORCE */
        } probe;
        struct {         /* REMOVE */
            uint64_t id; /* the member to remove */
        } remove;
        struct {                      /* SLOTS */
            struct tk_raft_str group; /* the group the ring is meant for */
            const uint8_t *ring;      /* core/slots.h encoding, checked by the driver */
            uint32_t ring_len;        /* <= TK_SLOTS_ENCODED_MAX; 0 for a freeze */
            /* A step of a move (ticketctl slots move), or a ring alone:
             * op (enum tk_raft_slots_op), the range, the other group
             * (freeze, hand-over: the target; claim: the source) and the
             * source's counter (claim). */
            uint8_t op;
            uint16_t first, last;
            struct tk_raft_str peer;
            uint64_t counter;
        } slots;
        struct {                /* SLOTS_REPLY */
            uint8_t status;     /* enum tk_raft_slots_status */
            uint64_t version;   /* the group's ring version now (0: none) */
            uint64_t leader_id; /* NOT_LEADER: 0 if unknown */
            struct tk_raft_str leader_peer_addr;
            struct tk_raft_str why; /* REFUSED: a sentence */
            uint64_t counter;       /* OK of a hand-over: the source's counter */
            uint8_t mac[32];        /* as JOIN_REPLY's (tk_wire_reply_text) */
        } slots_reply;
        struct {           /* PROBE_REPLY; the frame header carries the domain */
            uint8_t flags; /* TK_RAFT_PROBE_* */
            uint64_t peers_hash;
            uint64_t leader_id;
            struct tk_raft_str leader_peer_addr;
            struct tk_raft_str leader_client_addr;
            uint64_t token_next; /* the replier's fencing counter (0: fresh) */
        } probe_reply;
        struct {                 /* BOOT (raft/boot.h) */
            uint8_t phase;       /* enum tk_boot_phase */
            uint64_t round;      /* the ballot: (round, ballot_id) */
            uint64_t ballot_id;  /* the proposer's NodeId */
            uint64_t peers_hash; /* of the sender's --peers: only equal lists agree */
            /* PROMISE: the ballot of the value it accepted last (0:0 none);
             * NACK: the higher ballot it promised. */
            uint64_t acc_round, acc_id;
            uint64_t token_floor; /* PROMISE: the highest fencing counter it saw */
            uint64_t token_first; /* with config: the value's first token */
            /* ACCEPT, CHOSEN, and a PROMISE that reports a value: the
             * value's configuration (voters, domain, serve_after). */
            const struct tk_raft_config *config;
        } boot;
    };
};

/* ------------------------------------------------------------------ */
/* Options                                                             */

struct tk_raft_options {
    uint64_t id;              /* this node's NodeId, != 0 */
    uint64_t seed;            /* PRNG seed (election timeouts) */
    uint64_t heartbeat_us;    /* default 100 ms */
    uint64_t election_min_us; /* default 2400 ms */
    uint64_t election_max_us; /* default 2500 ms */
    uint64_t log_entries_max; /* entries in memory; a leader refuses proposals past it */
    uint64_t log_bytes_max;   /* data bytes in memory; likewise */
    /* Ask for a snapshot when this many applied entries follow the last
     * one, or this many data bytes, once those entries' bytes are at
     * least 1/snapshot_log_share of the last snapshot's (a cut lists the
     * whole state: it is not repeated for a log much smaller than that; 0
     * turns this off); and in any case at half of log_entries_max or
     * log_bytes_max, so that the log can shrink before it reaches its
     * bound. */
    uint64_t snapshot_entries;
    uint64_t snapshot_bytes;
    uint32_t snapshot_log_share; /* default 4 */
    /* Entries kept before the snapshot index, so that a follower just
     * behind it catches up with Appends rather than a snapshot. Bounded as
     * well by a quarter of log_entries_max, and in bytes by the smaller of
     * a quarter of log_bytes_max and snapshot_bytes: large entries (1 MiB
     * each, say) never keep the log near its bound after a snapshot. */
    uint64_t snapshot_trailing;
    uint64_t snapshot_bytes_max;   /* largest snapshot a follower accepts */
    uint32_t snapshot_chunk_bytes; /* bytes per Snapshot frame */
    uint32_t append_bytes_max;     /* data bytes per Append frame (one entry may exceed it) */
    /* Bytes sent to one follower and not yet acknowledged: Append entries,
     * or Snapshot chunks (at least one chunk), which are pipelined too. */
    uint64_t inflight_bytes_max;
    uint32_t reads_max; /* pending read barriers */
    /* A commit needs the leader and quorum - 1 followers. Those followers
     * (the most caught-up voters) get each new entry at once; the others
     * get what accumulated at most this often (and with every heartbeat
     * and read round), so a commit costs fewer Appends and
     * acknowledgements. 0: every follower gets every entry at once. */
    uint64_t lazy_replicate_us;
};

/* Fills the defaults: heartbeat 100 ms, election 2400-2500 ms (SPEC 8),
 * 1M entries / 1 GiB in memory, snapshot past 64k entries or 64 MiB,
 * 1 MiB chunks and appends, 8 MiB in flight per follower, followers
 * beyond a quorum replicated every 1 ms. */
void tk_raft_options_default(struct tk_raft_options *o, uint64_t id, uint64_t seed);

/* ------------------------------------------------------------------ */
/* Events                                                              */

enum tk_raft_event_type {
    TK_RAFT_EV_TICK = 1,  /* time passed; fires due timers */
    TK_RAFT_EV_RECEIVE,   /* a message from a peer */
    TK_RAFT_EV_PROPOSE,   /* leader: append a DATA entry */
    TK_RAFT_EV_CHANGE,    /* leader: one single-server membership change */
    TK_RAFT_EV_TRANSFER,  /* leader: hand leadership to another voter */
    TK_RAFT_EV_READ,      /* leader: read barrier */
    TK_RAFT_EV_SNAPSHOT,  /* driver: a snapshot taken at an applied index */
    TK_RAFT_EV_APPLIED,   /* driver: entries up to index are applied */
    TK_RAFT_EV_BOOTSTRAP, /* fresh node: write entry 1 and campaign */
};

enum tk_raft_change_type {
    TK_RAFT_ADD_LEARNER = 1, /* member must be new; joins as a learner */
    TK_RAFT_PROMOTE = 2,     /* learner -> voter; it must have caught up to the commit index */
    TK_RAFT_REMOVE = 3,      /* remove a member (not the leader itself) */
};

struct tk_raft_event {
    uint8_t type;    /* enum tk_raft_event_type */
    uint64_t now_us; /* never decreases from one step to the next */
    union {
        const struct tk_raft_msg *receive;
        struct {
            const uint8_t *data;  /* copied by the core */
            uint32_t len;         /* <= TK_RAFT_ENTRY_BYTES_MAX */
            uint64_t token_first; /* must equal tk_raft_next_token() */
            uint32_t token_count; /* tokens the commands in data consumed */
        } propose;
        struct {
            uint8_t type;                        /* enum tk_raft_change_type */
            const struct tk_raft_member *member; /* ADD_LEARNER: the whole member; else only id */
        } change;
        struct {
            uint64_t target; /* a voter, or 0 for the most up-to-date one */
        } transfer;
        struct {
            uint64_t id; /* driver's reference, returned in the result */
        } read;
        struct {
            uint64_t index; /* the applied index the blob was cut at */
            uint8_t *data;  /* from malloc(); the core owns it from now on */
            size_t len;
        } snapshot;
        struct {
            uint64_t index;
        } applied;
        struct {
            const struct tk_raft_config *config; /* all voters, this node among them */
            uint64_t first_token;                /* SPEC 7: bootstrap wall clock in us */
        } bootstrap;
    };
};

/* ------------------------------------------------------------------ */
/* Updates                                                             */

enum tk_raft_role {
    TK_RAFT_FOLLOWER = 1,
    TK_RAFT_PRECANDIDATE = 2, /* running a pre-vote; term not yet raised */
    TK_RAFT_CANDIDATE = 3,
    TK_RAFT_LEADER = 4,
};
const char *tk_raft_role_name(uint8_t role);

#define TK_RAFT_UPDATE_STATE 0x01u            /* role, term or leader changed */
#define TK_RAFT_UPDATE_MESSAGES 0x02u         /* msgs to send */
#define TK_RAFT_UPDATE_COMMIT 0x04u           /* commit index advanced */
#define TK_RAFT_UPDATE_SNAPSHOT_INSTALL 0x08u /* install `install`, before applying anything */
#define TK_RAFT_UPDATE_SNAPSHOT_WANTED 0x10u  /* hand a snapshot at the applied index */
#define TK_RAFT_UPDATE_READS 0x20u            /* read barriers resolved */
#define TK_RAFT_UPDATE_CONFIG 0x40u           /* membership changed (appended or truncated) */

/* A resolved read barrier. ok: a majority acknowledged a heartbeat round
 * sent after the request, so this node was leader at that moment; answer
 * the read once entries up to `index` are applied. !ok: leadership was lost
 * first; answer M. */
struct tk_raft_read {
    uint64_t id;
    uint64_t index;
    uint8_t ok;
};

struct tk_raft_update {
    uint32_t flags; /* TK_RAFT_UPDATE_* */
    /* Always filled: */
    uint8_t role; /* enum tk_raft_role */
    uint64_t term;
    uint64_t leader_id; /* 0 if unknown */
    uint64_t commit;    /* apply entries (applied, commit] in order */
    /* Result of PROPOSE / CHANGE / BOOTSTRAP: the index of the new entry. */
    uint64_t index;
    /* MESSAGES */
    const struct tk_raft_msg *msgs;
    uint32_t n_msgs;
    /* SNAPSHOT_INSTALL: replace the state machine with this blob; the
     * applied index becomes install.index (the core counts it so). */
    struct tk_raft_update_install {
        uint64_t index;
        uint64_t term;
        uint64_t token_next;
        const uint8_t *data;
        size_t len;
        uint32_t age_ms; /* of the leases in data: the last chunk's age_ms */
    } install;
    /* SNAPSHOT_WANTED: the core asks for a snapshot at the applied index
     * (snapshot_index); answer with TK_RAFT_EV_SNAPSHOT when convenient. */
    uint64_t snapshot_index;
    /* READS */
    const struct tk_raft_read *reads;
    uint32_t n_reads;
};

/* ------------------------------------------------------------------ */
/* Status and metrics                                                  */

struct tk_raft_metrics {
    uint64_t elections_started; /* real elections (term raised) */
    uint64_t prevotes_started;
    uint64_t prevotes_reasked;  /* a pre-vote asked again of a voter that lost its leader */
    uint64_t leader_changes;    /* leader id changed to a known leader */
    uint64_t terms_led;         /* times this node became leader */
    uint64_t step_downs_quorum; /* check-quorum step-downs */
    uint64_t transfers;         /* TimeoutNow sent */
    uint64_t appends_sent;      /* Append messages, heartbeats included */
    uint64_t entries_sent;      /* entries in them: entries per append = ratio */
    uint64_t entries_proposed;  /* DATA entries appended as leader */
    uint64_t snapshots_taken;
    uint64_t snapshots_sent; /* complete snapshots sent to followers */
    uint64_t snapshot_chunks_sent;
    uint64_t snapshot_resends; /* chunks found missing and sent again (or a whole window) */
    uint64_t snapshots_installed;
    uint64_t messages_invalid;  /* messages dropped as malformed or out of place */
    uint64_t proposals_refused; /* log full, not leader, transfer running */
};

struct tk_raft_member_status {
    uint64_t id;
    uint8_t role;           /* enum tk_raft_member_role */
    uint64_t match;         /* leader only: last index known replicated there */
    uint64_t next;          /* leader only */
    uint8_t progress;       /* leader only: 0 probe, 1 replicate, 2 snapshot */
    uint64_t last_heard_us; /* leader only */
};

struct tk_raft_status {
    uint64_t id;
    uint8_t role;
    uint64_t term;
    uint64_t voted_for;
    uint64_t leader_id;
    uint64_t commit;
    uint64_t applied;
    uint64_t first_index; /* first entry in memory */
    uint64_t last_index;
    uint64_t last_term;
    uint64_t snapshot_index;
    uint64_t snapshot_term;
    uint64_t term_start_index; /* leader: index of its term's NOOP */
    uint64_t token_next;       /* fencing counter after the last entry */
    uint64_t log_entries;
    uint64_t log_bytes;
    uint64_t transfer_target;      /* leader: transfer running, else 0 */
    uint64_t domain_lo, domain_hi; /* 0,0 while this node knows no domain */
    uint32_t n_members;
    struct tk_raft_member_status members[TK_RAFT_MEMBERS_MAX];
};

/* ------------------------------------------------------------------ */
/* API                                                                 */

struct tk_raft;

/* Creates a fresh node: follower, term 0, empty log, no configuration (it
 * waits for an Append or Snapshot from a leader, or tk_raft_bootstrap).
 * Returns NULL on allocation failure or bad options. */
struct tk_raft *tk_raft_create(const struct tk_raft_options *opt);
void tk_raft_destroy(struct tk_raft *r);

/* Feeds one event. Returns TK_OK, or a failure code for the event only
 * (the state stays consistent and *up is filled in any case):
 *   TK_ENOTLEADER  PROPOSE/CHANGE/TRANSFER/READ on a non-leader, or
 *                  during a leadership transfer (PROPOSE, CHANGE).
 *   TK_EFULL       PROPOSE: the log is at its bound; CHANGE: a change is
 *                  pending, the leader has not committed an entry of its
 *                  term yet, or the learner has not caught up: try later;
 *                  READ: too many pending barriers.
 *   TK_EINVAL      bad arguments (token_first != tk_raft_next_token(),
 *                  a change that breaks the config rules, a bootstrap on
 *                  a node that has state, a snapshot index out of range).
 *   TK_EPROTO      RECEIVE of a message the core refuses: malformed (index
 *                  gaps, tokens that do not continue the counter, a bad
 *                  config, a chunk beyond its total, a term of 0...), out
 *                  of place (a second leader in a term, a log that
 *                  contradicts committed entries, a reply about what was
 *                  never sent) or not its own (JOIN/PROBE types). Nothing
 *                  changed, not even the term; counted in messages_invalid.
 * The update is reset at the start of every step. */
int tk_raft_step(struct tk_raft *r, const struct tk_raft_event *ev, struct tk_raft_update *up);

/* Wrappers that build the event. */
int tk_raft_tick(struct tk_raft *r, uint64_t now_us, struct tk_raft_update *up);
int tk_raft_receive(struct tk_raft *r,
                    const struct tk_raft_msg *m,
                    uint64_t now_us,
                    struct tk_raft_update *up);
int tk_raft_propose(struct tk_raft *r,
                    const uint8_t *data,
                    uint32_t len,
                    uint64_t token_first,
                    uint32_t token_count,
                    uint64_t now_us,
                    struct tk_raft_update *up);
int tk_raft_change(struct tk_raft *r,
                   uint8_t type,
                   const struct tk_raft_member *member,
                   uint64_t now_us,
                   struct tk_raft_update *up);
int tk_raft_transfer(struct tk_raft *r,
                     uint64_t target,
                     uint64_t now_us,
                     struct tk_raft_update *up);
int tk_raft_read(struct tk_raft *r, uint64_t id, uint64_t now_us, struct tk_raft_update *up);
int tk_raft_snapshot(struct tk_raft *r,
                     uint64_t index,
                     uint8_t *data,
                     size_t len,
                     uint64_t now_us,
                     struct tk_raft_update *up);
int tk_raft_applied(struct tk_raft *r, uint64_t index, uint64_t now_us, struct tk_raft_update *up);
/* Bootstrap (SPEC 10): only on a fresh node (term 0, empty log), only on
 * the lowest NodeId once every configured peer was probed fresh. Writes
 * entry 1 = CONFIG(config, domain) with token_first = first_token, then
 * campaigns at once (no pre-vote: the others are fresh). A single-voter
 * config becomes leader within this call. */
int tk_raft_bootstrap(struct tk_raft *r,
                      const struct tk_raft_config *config,
                      uint64_t first_token,
                      uint64_t now_us,
                      struct tk_raft_update *up);

/* The next fencing token: what the first grant of the next proposal must
 * carry. The driver numbers the GRANT/HANDOFF commands of a batch
 * t, t+1, ..., proposes with token_first = t and token_count = how many,
 * all within one thread and with no step in between. Meaningful on the
 * leader; elsewhere it is the counter after this node's last entry. */
uint64_t tk_raft_next_token(const struct tk_raft *r);

/* The entry at index, or NULL if it is not in memory (compacted or beyond
 * the end). Valid until the next step. */
const struct tk_raft_entry *tk_raft_entry(const struct tk_raft *r, uint64_t index);

/* Earliest now_us at which a tick has work to do (election, heartbeat,
 * check-quorum, transfer timeout), or UINT64_MAX. */
uint64_t tk_raft_deadline(const struct tk_raft *r);

void tk_raft_status(const struct tk_raft *r, struct tk_raft_status *st);
const struct tk_raft_metrics *tk_raft_metrics(const struct tk_raft *r);
/* The latest configuration in the log (in effect; SPEC 10), or NULL when
 * the node knows none yet. */
const struct tk_raft_config *tk_raft_config(const struct tk_raft *r);
uint64_t tk_raft_id(const struct tk_raft *r);
uint8_t tk_raft_role(const struct tk_raft *r);
uint64_t tk_raft_term(const struct tk_raft *r);
uint64_t tk_raft_leader(const struct tk_raft *r);
uint64_t tk_raft_commit(const struct tk_raft *r);
uint64_t tk_raft_last_index(const struct tk_raft *r);

/* O(log) consistency check of every structure; panics on corruption. For
 * tests and debug builds. */
void tk_raft_check(const struct tk_raft *r);

#endif
