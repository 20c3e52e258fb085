/* The lock table of one shard: a pure state machine (SPEC 4.5, 6).
 *
 * It owns the keys that hash to its shard. Two layers of state:
 *  - committed: per key the holder (owner, token, lease, when this node
 *    applied the grant). Changed only by tk_lock_apply() of a committed
 *    command, identical on every node.
 *  - leader-only: FIFO waiter queues, the one proposal in flight per key,
 *    requests deferred behind it, lease and wait deadlines. Dropped when the
 *    node stops being leader (a new leader has no waiters).
 *
 * Inputs: a client request, a committed command, the time (timers), a
 * closed connection, a role change. Outputs go to a sink: replies to clients
 * and commands to propose. Nothing inside reads a clock, touches a socket or
 * takes a lock; one thread (the shard's worker) owns a table.
 *
 * Bounds: keys in the table, waiters per key, waiters in the table. A full
 * bound answers B and changes nothing. R/Q requests waiting behind a
 * proposal in flight have their own budget of waiters_max (see
 * tk_lock_request()).
 *
 * Threads: one thread (the shard's worker) owns a table and makes every
 * call; nothing is shared. Sink callbacks run inside the table's calls and
 * must not call back into the table: they should only queue the reply or
 * the proposal.
 *
 * Costs: lookups O(1) (hash index with incremental rehash), timers O(log n)
 * (heap), tk_lock_next_deadline() O(1), tk_lock_client_closed() O(that
 * client's requests), tk_lock_lead() O(1), tk_lock_follow() O(waiters +
 * deferred + keys in flight). Allocation: one per key, one per waiter or
 * deferred request, and one per key while it has a proposal in flight,
 * waiters or deferred requests (leader state, freed when the key goes idle),
 * plus amortized growth of the index, timer and in-flight arrays.
 * Memory: under 200 bytes per held key beyond the key bytes (see
 * shard/lock_internal.h for the layout).
 */
#ifndef TK_SHARD_LOCK_H
#define TK_SHARD_LOCK_H

#include "core/cmd.h"
#include "core/snap.h"
#include "core/tk.h"

/* A client request, already validated by the parser (SPEC 5). */
struct tk_lock_req {
    char type;       /* 'A' acquire, 'R' release, 'Q' query */
    uint64_t client; /* opaque reply target (connection reference), != 0 */
    uint64_t id;     /* request id, echoed in the reply */
    const char *key;
    size_t key_len;
    const char *owner; /* A, R */
    size_t owner_len;
    uint32_t lease_ms; /* A */
    uint32_t wait_ms;  /* A */
    uint64_t token;    /* R */
    /* A: when the server read it (the caller's clock, data only: echoed in
     * the G reply for the latency metrics). */
    uint64_t arrived_us;
};

/* A reply to send on the client's connection. Pointers are valid only during
 * the sink call. */
struct tk_lock_reply {
    char type; /* 'G' 'T' 'B' 'R' 'N' 'Q', 'W' (tk_lock_move_waiters) */
    uint64_t client;
    uint64_t id;
    uint64_t token;      /* G; Q (0 when free) */
    uint64_t arrived_us; /* G: the request's arrived_us */
    uint32_t waiters;    /* Q */
    const char *owner;   /* Q: holder, NULL when free */
    size_t owner_len;
};

struct tk_lock_sink {
    /* A reply to a client; called only for committed state (SPEC 4.5).
     * The G or R for a proposal already in flight is sent even if its
     * client closed meanwhile (tk_lock_client_closed() removes only waiting
     * requests): the caller drops replies to connections that are gone, so
     * a client reference must not be reused for a new connection while a
     * reply to the old one can still come (e.g. slot + generation). */
    void (*reply)(void *ctx, const struct tk_lock_reply *r);
    /* A command to propose (token 0; the Raft thread assigns it). The table
     * marks the key IN-FLIGHT before calling; the command comes back through
     * tk_lock_apply() once committed. The proposal must not be lost while
     * this node leads: the key stays IN-FLIGHT until it is applied or
     * tk_lock_follow() is called, so a proposal the Raft side cannot take
     * means stepping down. */
    void (*propose)(void *ctx, const struct tk_cmd *c);
    /* Optional (may be NULL), for the metrics: a waiter leaves the queue
     * for its grant (proposed now) after waiting waited_us, measured with
     * the now_us of the calls that queued and dequeued it. */
    void (*waited)(void *ctx, uint64_t waited_us);
    void *ctx;
};

struct tk_lock_limits {
    uint64_t keys_max;            /* keys present in the table */
    uint32_t waiters_per_key_max; /* queue length of one key */
    uint64_t waiters_max;         /* waiters in the whole table */
    /* The clock-drift bound (--max-clock-drift-ms) in every lease margin
     * below; 0 means TK_LOCK_DRIFT_DEFAULT_US. */
    uint64_t drift_us;
};

struct tk_lock_stats {
    uint64_t keys;       /* keys present (held, in flight, or with waiters) */
    uint64_t held;       /* keys with a committed holder */
    uint64_t waiters;    /* queued acquires (leader) */
    uint64_t deferred;   /* R/Q waiting behind an in-flight proposal */
    uint64_t in_flight;  /* keys with a proposal in flight */
    uint64_t grants;     /* committed GRANT + HANDOFF applied */
    uint64_t handoffs;   /* committed HANDOFF applied */
    uint64_t releases;   /* committed RELEASE applied */
    uint64_t expiries;   /* committed EXPIRE, and HANDOFF after expiry */
    uint64_t timeouts;   /* T replies */
    uint64_t busy;       /* B replies */
    uint64_t busy_bound; /* B replies because a bound was reached */
};

struct tk_lock_table;

/* Creates an empty table, follower role. Returns NULL on allocation failure.
 * keys_max and waiters_max above TK_TIMER_MAX (2^32 - 2) are clamped to it. */
struct tk_lock_table *tk_lock_create(const struct tk_lock_limits *limits);
void tk_lock_destroy(struct tk_lock_table *t);

/* Lease deadlines. Every node counts a lease from the moment it applied
 * the grant plus a margin for clock-rate drift and small jumps, so a lease
 * ends late, never early: on a follower that becomes leader (its clock
 * against the old leader's), and on the leader itself (its clock against
 * the client's, which counts from its send). The margin is 0.1% of the
 * lease (rate drift) plus the table's drift bound (small jumps, and the
 * difference between two members' clocks). */
#define TK_LOCK_DRIFT_DEFAULT_US 50000u
#define TK_LOCK_DRIFT_WITH(lease_ms, drift_us) ((uint64_t)(lease_ms) + (uint64_t)(drift_us))
#define TK_LOCK_DRIFT_US(lease_ms) /* 0.1% + the default 50 ms */ \
    TK_LOCK_DRIFT_WITH(lease_ms, TK_LOCK_DRIFT_DEFAULT_US)

/* Role changes. tk_lock_lead() must be called only once every committed
 * entry known to this node has been applied (the Raft thread sends it after
 * the new leader's first entry is applied). tk_lock_follow() drops all
 * leader-only state without replies (the caller closes client connections
 * with M); a lease timer that came due while its key was in flight is
 * re-armed, so the holder expires under the next leadership. Lease
 * deadlines stay valid across both; both calls are idempotent. */
void tk_lock_lead(struct tk_lock_table *t, uint64_t now_us);
void tk_lock_follow(struct tk_lock_table *t);
bool tk_lock_is_leader(const struct tk_lock_table *t);

/* A client request on the leader (SPEC 6 matrix). The request must be valid
 * (SPEC 5; asserted). Returns:
 *  - TK_OK: the request gets exactly one reply, now or later (unless its
 *    client closes or the node stops leading first). Bounds reached answer
 *    B and return TK_OK.
 *  - TK_ENOTLEADER: this table is a follower; nothing changed, no reply
 *    (the caller sends M and closes).
 *  - TK_EFULL: an R or Q had to wait behind a proposal in flight but
 *    waiters_max requests are already waiting so; nothing changed, no reply
 *    (the caller sends `E - overload` and closes, SPEC 14).
 *  - TK_ENOMEM: out of memory; nothing changed, no reply (likewise). */
int tk_lock_request(struct tk_lock_table *t,
                    uint64_t now_us,
                    const struct tk_lock_req *req,
                    const struct tk_lock_sink *sink);

/* Applies a committed command (every node, in log order). On the leader it
 * completes the proposal in flight for the key (replies G/R), then grants to
 * the queue head if the key became free, proposes a due expiry, and
 * re-evaluates deferred requests. A command that contradicts the committed
 * state (a grant on a held key, a release of a token that is not the
 * holder's, a grant with token 0 or with a token not above every token
 * applied before) is a corrupt log: the table panics. On the leader every
 * applied command must be the key's proposal in flight (same type and
 * old_token), which holds because only the leader proposes and
 * tk_lock_lead() comes after every earlier entry was applied; anything
 * else panics too. A follower applies silently. Out of memory while
 * applying (a new key or a longer owner) panics: a committed entry cannot
 * be skipped. */
void tk_lock_apply(struct tk_lock_table *t,
                   uint64_t now_us,
                   const struct tk_cmd *c,
                   const struct tk_lock_sink *sink);

/* Fires due timers on the leader, in deadline order (a wait before a lease
 * on a tie): waiters whose wait ran out get T; holders whose lease ran out
 * get an EXPIRE or HANDOFF proposed (or, if the key is IN-FLIGHT, nothing:
 * the proposal in flight removes that holder anyway). Does nothing on a
 * follower. The work is proportional to the timers due. Proposing an expiry
 * for an idle key allocates its leader state (a few dozen bytes); out of
 * memory there panics, as in tk_lock_apply(): the expiry cannot be skipped. */
void tk_lock_tick(struct tk_lock_table *t, uint64_t now_us, const struct tk_lock_sink *sink);

/* Earliest time tk_lock_tick() may have work (UINT64_MAX on a follower or
 * when there is none). It may be a lease of a key in flight, for which the
 * tick then does nothing: an early wake-up, never a late one. O(1). */
uint64_t tk_lock_next_deadline(const struct tk_lock_table *t);

/* A client connection closed: its waiters and deferred requests are removed
 * silently; what it holds stays held (the lease is the safety net). */
void tk_lock_client_closed(struct tk_lock_table *t, uint64_t client);

void tk_lock_stats(const struct tk_lock_table *t, struct tk_lock_stats *out);

/* Slots (SPEC 15; slots is a bitmap of TK_SLOTS bits, core/slots.h).
 * tk_lock_held_in(): the keys of those slots that have a committed holder
 * or a grant in flight (what a move must wait for). O(TK_SLOTS + keys in
 * flight). */
uint64_t tk_lock_held_in(const struct tk_lock_table *t, const uint64_t *slots);
/* Every slot's committed holders: TK_SLOTS counts, valid while t lives. */
const uint32_t *tk_lock_slot_held(const struct tk_lock_table *t);
/* Leader: every waiter queued on a key of those slots (frozen for a move)
 * is answered 'W' (token = ring_version, waiters = the slot) and removed;
 * returns how many. Holders and proposals in flight stay. */
uint64_t tk_lock_move_waiters(struct tk_lock_table *t,
                              const uint64_t *slots,
                              uint64_t ring_version,
                              const struct tk_lock_sink *sink);

/* Calls fn for every committed holder (snapshots), as a GRANT with the
 * holder's token, owner and lease_ms. fn must not modify the table. O(keys). */
void tk_lock_each_holder(const struct tk_lock_table *t,
                         void (*fn)(void *ctx, const struct tk_cmd *grant),
                         void *ctx);

/* Like tk_lock_each_holder(), with what is left of each holder's lease at
 * now_us, not counting the drift margin (ms, rounded up, 1..lease_ms): a
 * snapshot carries it so that an install does not give a holder a fresh
 * lease. */
void tk_lock_each_holder_left(const struct tk_lock_table *t,
                              uint64_t now_us,
                              void (*fn)(void *ctx, const struct tk_cmd *grant, uint32_t left_ms),
                              void *ctx);

/* ---- Incremental snapshot cut --------------------------------------------
 *
 * A cut lists the committed holders as they were at one moment (the cut's
 * begin, right after the snapshot's index was applied) without stopping the
 * table: tk_lock_cut_step() visits a bounded slice of the key index per
 * call, and while a cut runs, tk_lock_apply() hands a key's holder to the
 * cut *before* it changes it, if the cut has not listed that key yet (copy
 * on write, one key at a time). Keys created during the cut are marked as
 * listed: they held nothing at the cut's moment. Every holder at the begin
 * is thus listed exactly once, whatever was applied meanwhile, and nothing
 * else is. The key index's incremental rehash pauses while a cut runs, so
 * the slice cursor (array, bucket) stays valid; lookups are unaffected.
 *
 * Each listed holder comes with what was left of its lease at the cut's
 * begin (as tk_lock_each_holder_left() counts it at begin_us), its fields
 * pointing into the table (valid during the call only). Records come in
 * table order, not token order. */
typedef void (*tk_lock_cut_fn)(void *ctx, const struct tk_snap_holder *h);

/* What a cut will list: the holders at its begin, and the sum of their key
 * and owner lengths (a snapshot sizes its blob from both). */
struct tk_lock_cut_size {
    uint64_t count;
    uint64_t key_owner_bytes;
};

/* Starts a cut at now_us (no cut may be running); fn gets every record,
 * from tk_lock_cut_step() and from inside tk_lock_apply(). *size (may be
 * NULL) gets what the cut will list. */
void tk_lock_cut_begin(struct tk_lock_table *t,
                       uint64_t now_us,
                       tk_lock_cut_fn fn,
                       void *ctx,
                       struct tk_lock_cut_size *size);
/* Visits up to `budget` keys (and a bounded number of empty buckets);
 * returns true once the cut has listed every holder it will (the cut has
 * then ended: fn is not called again). */
bool tk_lock_cut_step(struct tk_lock_table *t, uint32_t budget);
bool tk_lock_cut_running(const struct tk_lock_table *t);
/* Ends a running cut without listing the rest (a snapshot install replaces
 * the table; tk_lock_clear() does this itself). */
void tk_lock_cut_abort(struct tk_lock_table *t);

/* Drops all state, committed included (before installing a snapshot). The
 * role is kept; cumulative counters in the stats are kept. */
void tk_lock_clear(struct tk_lock_table *t);

/* Before restoring n holders into a cleared table: sizes the key index
 * and the lease heap for min(n, keys_max) keys at once (best effort), so
 * that the restore does not rehash its way up. */
void tk_lock_restore_reserve(struct tk_lock_table *t, uint64_t n);

/* Installs one holder from a snapshot (a GRANT from tk_lock_each_holder()
 * on another node), on a follower, after tk_lock_clear(). Unlike
 * tk_lock_apply() it does not require tokens to rise from one call to the
 * next (a snapshot lists holders in table order); it requires the key to be
 * free and raises the table's token floor to the largest token seen. The
 * lease counts from now_us plus the drift margin: late, never early. */
void tk_lock_restore(struct tk_lock_table *t, uint64_t now_us, const struct tk_cmd *grant);
/* Likewise, with left_ms (1..grant->lease_ms) of the lease left: the lease
 * counts left_ms from now_us, plus the lease's drift margin. */
void tk_lock_restore_left(struct tk_lock_table *t,
                          uint64_t now_us,
                          const struct tk_cmd *grant,
                          uint32_t left_ms);

/* O(n) consistency check of every structure; panics on corruption. */
void tk_lock_check(const struct tk_lock_table *t);

#endif
