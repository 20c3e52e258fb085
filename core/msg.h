/* The messages between the threads of a node: shards (shard/shard.h, one
 * per worker) and the Raft driver (raft/driver.h). One struct per kind,
 * one encoding each, checked both ways; the rings of net/ring.h and the
 * simulation's queues carry the encoded bytes.
 *
 * Messages never leave the process: the bytes come from our own threads,
 * so a message that does not decode is a bug and tk_msg_decode() callers
 * assert. (Bytes from the network go through core/proto.c and raft/wire.c,
 * which refuse instead.) SNAP_PART and INSTALL move ownership of malloc'd
 * buffers from one thread to another by pointer.
 *
 * Pure: no I/O; any thread may call these on its own buffers.
 */
#ifndef TK_CORE_MSG_H
#define TK_CORE_MSG_H

#include "core/cmd.h"
#include "core/tk.h"

#define TK_MSG_ADDR_MAX 256 /* a leader's client address, NUL-terminated */

enum tk_msg_kind {
    TK_MSG_REQ = 1,   /* shard -> shard owning the key: a client request */
    TK_MSG_REPLY,     /* shard -> shard of the client's connection: a lock reply */
    TK_MSG_REFUSE,    /* shard -> shard of the client's connection: M or overload */
    TK_MSG_CLOSED,    /* shard -> every other shard: a client connection closed */
    TK_MSG_PROPOSE,   /* shard -> driver: a command to propose */
    TK_MSG_READ,      /* shard -> driver: a read barrier is wanted for a round */
    TK_MSG_SNAP_PART, /* shard -> driver: the shard's cut of a snapshot */
    TK_MSG_APPLY,     /* driver -> shard: a committed command */
    TK_MSG_ROLE,      /* driver -> shard: a new epoch (lead, follow, leader address) */
    TK_MSG_READ_DONE, /* driver -> shard: the barrier of a round resolved */
    TK_MSG_SNAP_REQ,  /* driver -> shard: cut a snapshot at an index */
    TK_MSG_INSTALL,   /* driver -> shard: replace the table by a snapshot's holders */
    TK_MSG_SLOTS,     /* driver -> shard: the slots this group serves, and the ring */
    TK_MSG_HELD, /* driver -> shard: count what the frozen slots hold; shard -> driver: the count */
    TK_MSG_KIND_END
};

/* A client request routed to the shard owning its key. epoch: of the
 * sending shard when it took the request (SPEC 3: never served under a
 * newer leadership than the one it arrived in). arrived_us: when the
 * connection's worker read it (its clock; data, echoed in the G reply). */
struct tk_msg_req {
    uint64_t epoch, arrived_us;
    uint64_t client, id, token;
    uint32_t lease_ms, wait_ms;
    char type; /* 'A' 'R' 'Q' */
    uint8_t key_len, owner_len;
    const char *key, *owner; /* point into the message when decoded */
};

/* A lock reply (G T B R N Q) for a client of the receiving shard. G
 * carries the request's arrived_us (latency metrics). W (SPEC 15, the
 * group does not serve the key's slot) carries the ring's version in
 * token and the slot in waiters. */
struct tk_msg_reply {
    uint64_t client, id, token, arrived_us;
    uint32_t waiters;
    char type;
    uint8_t owner_len;
    const char *owner;
};

enum tk_refuse { TK_REFUSE_MOVED = 1, TK_REFUSE_OVERLOAD };
/* The shard owning the key could not take the request: the client's
 * connection is closed with M (not leading) or `E - overload`. */
struct tk_msg_refuse {
    uint64_t client, id;
    uint8_t reason; /* enum tk_refuse */
};

struct tk_msg_closed {
    uint64_t client;
};

/* proposed_us: the proposing shard's clock (commit latency metrics). */
struct tk_msg_propose {
    uint64_t epoch, proposed_us;
    struct tk_cmd cmd; /* token 0: the driver numbers grants */
};

struct tk_msg_read {
    uint64_t round;
};

/* A piece of a shard's cut (shard/lock.h): count snapshot records
 * (core/snap.h) in data, malloc'd, owned and freed by the receiver (data
 * may be NULL when count is 0). Every piece of a cut says what the whole
 * cut of that shard holds (total_count records, total_len bytes), so the
 * driver can size the blob from the first pieces; the last piece has
 * final set. */
struct tk_msg_snap_part {
    uint64_t index;
    uint64_t count;
    uint8_t *data;
    size_t len;
    uint64_t total_count;
    uint64_t total_len;
    bool final;
};

/* apply_us: 0, or when the driver took the commit (informational); the
 * shard stamps leases with its own clock at the apply. */
struct tk_msg_apply {
    struct tk_cmd cmd;
};

/* Every role change carries a new epoch. lead: this node's shards serve
 * (sent only after every committed entry was applied); otherwise the
 * address clients should go to ("" if unknown). */
struct tk_msg_role {
    uint64_t epoch;
    bool lead;
    char leader_addr[TK_MSG_ADDR_MAX];
};

struct tk_msg_read_done {
    uint64_t round;
    bool ok;
};

struct tk_msg_snap_req {
    uint64_t index;
};

/* The shard's holders from a snapshot: count GRANT encodings in data
 * (malloc'd, the shard frees it), lease_ms the lease left at the cut. */
struct tk_msg_install {
    uint64_t index;
    uint64_t count;
    uint8_t *data;
    size_t len;
};

/* What a shard knows of the ring (SPEC 15), in one malloc'd block the
 * driver makes for each shard and the shard frees: the slots this group
 * owns, those it serves now (owned and not frozen for a move: a frozen
 * slot takes only the releases of its holders), the ring's version and its S body
 * (core/slots.h: ranges joined by ';', or "-"), and where each range's
 * text ends in it, so that an S answer is cut into lines at ranges. */
struct tk_slot_view {
    uint64_t version; /* 0: the ring is gone, the shard has none */
    uint64_t own[TK_SLOTS / 64];
    uint64_t serve[TK_SLOTS / 64]; /* a subset of own */
    uint32_t nranges;
    uint32_t *range_end; /* nranges offsets into body, each just past a range */
    size_t body_len;
    char *body; /* not NUL-terminated; points into the same block */
};
struct tk_msg_slots {
    struct tk_slot_view *view; /* never NULL */
};

/* A move's hand-over waits until nothing is held in the frozen slots
 * (SPEC 15). The driver asks every shard (count 0), tagged with its epoch
 * and a sequence number; a shard answers with the same tags and the keys
 * it holds, or has a grant in flight for, in the slots its view froze. */
struct tk_msg_held {
    uint64_t epoch, seq, count;
};

struct tk_msg {
    uint32_t kind; /* enum tk_msg_kind */
    union {
        struct tk_msg_req req;
        struct tk_msg_reply reply;
        struct tk_msg_refuse refuse;
        struct tk_msg_closed closed;
        struct tk_msg_propose propose;
        struct tk_msg_read read;
        struct tk_msg_snap_part snap_part;
        struct tk_msg_apply apply;
        struct tk_msg_role role;
        struct tk_msg_read_done read_done;
        struct tk_msg_snap_req snap_req;
        struct tk_msg_install install;
        struct tk_msg_slots slots;
        struct tk_msg_held held;
    } u;
};

/* Largest encoding of any message. */
#define TK_MSG_ENCODED_MAX (64 + TK_MSG_ADDR_MAX + TK_CMD_ENCODED_MAX)

/* Bytes tk_msg_encode() writes for m (> 0, <= TK_MSG_ENCODED_MAX). */
uint32_t tk_msg_size(const struct tk_msg *m);
/* Writes exactly tk_msg_size(m) bytes. m must be valid (asserted). */
void tk_msg_encode(const struct tk_msg *m, uint8_t *out);
/* Decodes a message of the given kind; pointers in *m point into buf.
 * TK_OK, or TK_EPROTO if the bytes are not a valid message of that kind. */
int tk_msg_decode(uint32_t kind, const uint8_t *buf, size_t len, struct tk_msg *m);
/* A message that is dropped undelivered (its queue dies with a crashed
 * or stopped node) gives back what it owns: snapshot parts, installs
 * and slot views carry malloc'd memory the receiver would have freed. */
void tk_msg_drop(uint32_t kind, const uint8_t *buf, size_t len);

/* Where outgoing messages go: a ring in the server, a queue in the
 * simulation. put returns room for len bytes, never NULL (the caller's
 * overflow is bounded by the senders' own bounds). */
#define TK_MSG_TO_DRIVER UINT32_MAX
struct tk_msg_out {
    void *ctx;
    void *(*put)(void *ctx, uint32_t dst, uint32_t kind, uint32_t len);
};
/* Encodes m into room from out->put for dst. */
void tk_msg_send(const struct tk_msg_out *out, uint32_t dst, const struct tk_msg *m);

#endif
