/* The shard runtime: one per worker thread, a pure step function around the
 * shard's lock table (shard/lock.h). Nothing else calls tk_lock_*.
 *
 * Inputs: requests from this worker's own connections, messages from other
 * shards and from the Raft driver (core/msg.h), the time, the end of a
 * round. Outputs: messages to other shards and to the driver (through a
 * struct tk_msg_out), and replies for this worker's connections (through
 * struct tk_shard_client). The server's worker (net/worker.c) and the
 * simulation (tests/support/sim_node.c) run exactly this code.
 *
 * Rules it keeps:
 *  - Routing: a request goes to the shard owning its key (tk_cmd_shard);
 *    replies come back to the shard whose worker holds the connection
 *    (tk_shard_client_shard(client)).
 *  - Epochs: every ROLE message from the driver starts a new epoch. A
 *    forwarded request carries the sender's epoch: one from an older epoch
 *    is refused with M; one from a newer epoch (the sender read its ROLE
 *    first) waits until this shard reads the same ROLE. Proposals carry the
 *    epoch, and the driver drops those of an older epoch.
 *  - Reads: a Q or N reply is held until a read barrier started after it
 *    was computed confirms this node still led (SPEC 3); the barrier is
 *    asked once per round (tk_shard_flush()).
 *  - Leases: committed grants are stamped with the time passed in with the
 *    APPLY message's step, never an earlier one.
 *  - Snapshots: SNAP_REQ starts an incremental cut of the shard's holders
 *    at that moment, each with what remains of its lease (shard/lock.h).
 *    tk_shard_tick() lists one slice of it (TK_SHARD_CUT_SLICE keys, more
 *    as the cut goes on) at most once per TK_SHARD_CUT_EVERY_US, and
 *    tk_shard_deadline() says when the next slice is due; the records go to the driver in pieces of
 * up to TK_SHARD_CUT_PIECE bytes. INSTALL replaces the table (and ends a cut still running).
 *
 *  - Slots (SPEC 15): a request whose key's slot the group does not serve
 *    is answered W at the key's shard, which hears of ring changes in the
 *    same order as the committed commands (SLOTS messages).
 *
 * Bounds: held replies and early requests are each bounded by the requests
 * in flight on the node (requests_max), asserted.
 */
#ifndef TK_SHARD_SHARD_H
#define TK_SHARD_SHARD_H

#include "core/msg.h"
#include "shard/lock.h"

/* Keys a snapshot cut visits per slice, and the size of the pieces it
 * sends: a slice is a small fraction of a millisecond, so requests keep
 * being served. At most one slice per TK_SHARD_CUT_EVERY_US of the shard's
 * clock, so a cut takes a bounded share of the worker however often its
 * loop turns; the slice doubles for every second the cut has run (up to
 * TK_SHARD_CUT_DOUBLINGS times), so a shard of 500,000 held keys is cut in
 * about 1.5 s and one of 5,000,000 in about 5 s. */
#define TK_SHARD_CUT_SLICE 256u
#define TK_SHARD_CUT_EVERY_US 1000u
#define TK_SHARD_CUT_DOUBLINGS 6u
#define TK_SHARD_CUT_PIECE ((size_t)1 << 20)

/* A connection reference carried with requests: shard (worker) | slot |
 * generation; a reference is never reused while a reply can still come. */
static inline uint64_t tk_client_ref(uint32_t shard, uint32_t slot, uint32_t gen)
{
    return tk_ref_pack(shard, slot, gen);
}
static inline uint32_t tk_client_shard(uint64_t ref)
{
    return tk_ref_unpack(ref).tag;
}
static inline uint32_t tk_client_slot(uint64_t ref)
{
    return tk_ref_unpack(ref).slot;
}
static inline uint32_t tk_client_gen(uint64_t ref)
{
    return tk_ref_unpack(ref).gen;
}

/* One shard's share of a server-wide bound (--max-keys, --max-waiters):
 * rounded up, so the shards together may hold up to nshards - 1 more than
 * the bound itself. Whatever sizes for "every key of every shard" must
 * count nshards shares, not the bound. */
static inline uint64_t tk_shard_share(uint64_t total, uint32_t nshards)
{
    return (total + nshards - 1) / nshards;
}

/* What the shard tells its own worker. */
struct tk_shard_client {
    void *ctx;
    /* A reply (G T B R N Q) for one of this worker's connections. */
    void (*reply)(void *ctx, const struct tk_msg_reply *r);
    /* A request of one of this worker's connections was refused: close it
     * with M or `E - overload` (reason: enum tk_refuse). */
    void (*refuse)(void *ctx, uint64_t client, uint64_t id, uint8_t reason);
    /* The role changed. !lead: every open client connection gets M with
     * leader_addr ("" unknown) and closes; nothing pending is answered. */
    void (*role)(void *ctx, bool lead, const char *leader_addr);
    /* Optional (may be NULL), for the metrics: a waiter of this shard's
     * table left the queue for its grant after waited_us (the client may
     * be another worker's; the wait is this shard's to record). */
    void (*waited)(void *ctx, uint64_t waited_us);
};

struct tk_shard_options {
    uint32_t idx, nshards;
    struct tk_lock_limits limits;
    uint64_t requests_max; /* requests in flight on the whole node */
    /* Snapshot cut: keys per slice and bytes per piece; 0 takes
     * TK_SHARD_CUT_SLICE and TK_SHARD_CUT_PIECE (tests cut small). */
    uint32_t cut_slice;
    size_t cut_piece;
    /* SPEC 15: the node was started with --group, so its group serves no
     * slot until a ring is committed; otherwise every slot until then. */
    bool grouped;
};

struct tk_shard_stats {
    struct tk_lock_stats lock;
    uint64_t reads_held;    /* Q/N replies waiting for a barrier */
    uint64_t read_barriers; /* barriers asked */
    uint64_t early;         /* forwarded requests waiting for a ROLE */
    uint64_t epoch;
};

struct tk_shard;

struct tk_shard *tk_shard_create(const struct tk_shard_options *o,
                                 const struct tk_msg_out *out,
                                 const struct tk_shard_client *client);
void tk_shard_destroy(struct tk_shard *sh);

/* A request of one of this worker's connections (q->epoch is ignored: the
 * shard's own). */
void tk_shard_request(struct tk_shard *sh, uint64_t now_us, const struct tk_msg_req *q);
/* One of this worker's connections closed (it had been ready). */
void tk_shard_client_closed(struct tk_shard *sh, uint64_t client);
/* A message from another shard or the driver (src: shard index or
 * TK_MSG_TO_DRIVER). */
void tk_shard_message(struct tk_shard *sh,
                      uint64_t now_us,
                      uint32_t src,
                      uint32_t kind,
                      const uint8_t *data,
                      uint32_t len);
/* Fires due timers; cheap when nothing is due. */
void tk_shard_tick(struct tk_shard *sh, uint64_t now_us);
/* When tk_shard_tick() next has work (UINT64_MAX: none). */
uint64_t tk_shard_deadline(const struct tk_shard *sh);
/* End of a round: asks for a read barrier if replies were held. */
void tk_shard_flush(struct tk_shard *sh);

bool tk_shard_leads(const struct tk_shard *sh);
void tk_shard_stats(const struct tk_shard *sh, struct tk_shard_stats *st);
/* O(n) check of the table; panics on corruption. */
void tk_shard_check(const struct tk_shard *sh);
/* The ring as this shard last heard of it (NULL: none committed), for S
 * answers: read only, valid until the shard's next message. */
const struct tk_slot_view *tk_shard_slots(const struct tk_shard *sh);
/* The lock table, read-only (the simulation compares it to its model). */
const struct tk_lock_table *tk_shard_table(const struct tk_shard *sh);

#endif
