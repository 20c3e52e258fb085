/* Inside the Raft driver (raft/driver.h): its state, shared by
 * raft/driver.c (batches, roles, reads, snapshots) and raft/membership.c
 * (the membership protocol: probes, joins, removals, the new-domain
 * agreement). Nothing outside raft/ includes it. */
#ifndef TK_RAFT_DRIVER_INTERNAL_H
#define TK_RAFT_DRIVER_INTERNAL_H

#include "core/slots.h"
#include "raft/boot.h"
#include "raft/driver.h"

#define BATCH_BYTES_MAX (4 + TK_DRIVER_BATCH_CMDS_MAX * TK_CMD_ENCODED_MAX)
#define PENDING_MAX 8192

_Static_assert(BATCH_BYTES_MAX <= TK_RAFT_ENTRY_BYTES_MAX, "a full batch must fit one entry");

/* One DATA entry being built or waiting for room in the log. */
struct batch {
    struct batch *next;
    uint8_t *buf; /* u32 count | commands */
    size_t len;
    uint32_t cmds, tokens;
    uint64_t oldest_us;
};

struct read_group {
    uint64_t id;
    uint64_t round[TK_DRIVER_SHARDS_MAX];
};

struct pending_entry { /* commit latency of entries this leader proposed */
    uint64_t index;
    uint64_t proposed_us;
};

#define PROBE_PERIOD_US 250000u
#define PROBE_FRESH_US 1500000u
/* After writing a new domain's entry 1, its proposer repeats CHOSEN this
 * long to voters that may have missed it. */
#define BOOT_LINGER_US 10000000u
#define MEMBERS_PERIOD_US 50000u
#define NOTE_PERIOD_US 20000u
/* NodeIds this node saw leave its configuration, newest last (a ring): a
 * Join from one of them is answered removed. */
#define GONE_MAX 32

struct peer_info { /* what probes told us about a configured peer */
    uint64_t id;
    char client_addr[TK_RAFT_ADDR_MAX + 1];
    uint64_t peers_hash;
    uint64_t probed_us;  /* its PROBE reached us */
    uint64_t replied_us; /* its PROBE_REPLY reached us */
    bool member;         /* it belongs to a domain */
    bool agreed;         /* it was seen fresh with our --peers: a bootstrap partner */
    bool forced;         /* its PROBE says --force-new-domain */
    bool leader_known;   /* its last PROBE_REPLY named a leader */
    uint64_t token_next; /* its fencing counter, from its last PROBE_REPLY */
};

/* The membership protocol's state (raft/membership.c). */
struct members {
    struct tk_driver_cluster c; /* npeers 0: standalone, nothing here runs */
    uint64_t self_id;
    struct tk_prng prng;
    struct peer_info info[TK_DRIVER_PEERS_MAX];
    uint64_t probe_at;
    bool domain_seen; /* a peer reported membership of a domain */

    /* The new-domain agreement among fresh nodes (raft/boot.h). */
    struct tk_boot boot;
    bool boot_ready;            /* boot initialised (first probe round) */
    bool boot_willing;          /* this node's view lets it promise a new domain */
    uint64_t boot_floor;        /* the highest fencing counter its probes saw */
    struct tk_boot_offer offer; /* what it proposes, while offering */
    bool offering;              /* its view says it should write the new domain */
    uint64_t boot_linger_until; /* after writing entry 1: keep telling the voters */

    /* Joining a live domain as a fresh NodeId (SPEC 10). */
    uint64_t join_leader_id;                     /* whom to ask; 0: no leader known */
    char join_leader_addr[TK_RAFT_ADDR_MAX + 1]; /* its peer address */
    uint64_t join_domain_lo, join_domain_hi;     /* the domain we join (0,0: none seen) */
    uint64_t gone[GONE_MAX];
    uint32_t gone_next;
    uint64_t seen_ids[TK_RAFT_MEMBERS_MAX];
    uint32_t seen_n;
    uint64_t leader_heard_us; /* last Append/Snapshot from a leader */
    uint64_t leader_seen_us;  /* fresh: since when probes name a live leader */
    uint8_t join_reply;       /* last JoinReply status, 0xff: none */
    uint8_t state;            /* enum tk_driver_membership */
    char note[256];           /* why we are where we are (/status) */
    uint64_t note_us;         /* when the note was last brought up to date */
    uint64_t members_at;      /* leader: next membership step */
    uint64_t invalid_log_at;  /* next time an invalid message may be logged */
    uint64_t refused_log_at;  /* next time a refused dial may be logged */
    uint64_t dials_refused, joins, changes;
};

/* The ring (SPEC 15) in this group's replicated state (raft/driver_slots.c). */
#define MOVES_MAX 16
enum { MOVE_FROZEN = 1, MOVE_HANDED, MOVE_CLAIMED };
/* A move this group takes part in: frozen here (the range still owned,
 * served only to its holders' releases), handed over (given away, the
 * counter recorded), or claimed (owned from the source above its
 * counter). Finished ones stay, oldest dropped first, so a resumed step
 * is answered as done. */
struct slot_move {
    uint16_t first, last;
    uint8_t state;
    char peer[TK_SLOTS_NAME_MAX + 1]; /* frozen, handed: the target; claimed: the source */
    uint64_t counter; /* handed: the first token this group did not issue; claimed: the source's */
    uint64_t index;   /* the entry that froze, handed or claimed it */
};

struct slots {
    struct tk_slot_ring *ring;         /* NULL: none committed */
    char group[TK_SLOTS_NAME_MAX + 1]; /* the group the committed ring was given to */
    uint32_t owned;                    /* slots the group owns in it */
    struct slot_move moves[MOVES_MAX]; /* oldest first */
    uint32_t nmoves;
    /* The operator's step this leader proposed last: until it is applied,
     * another request is answered RETRY (one at a time). */
    uint64_t pending_index, pending_term;
    /* Leader: the shards' count of what the frozen slots hold (a
     * hand-over waits for 0), asked at applied index held_applied. */
    uint64_t held_seq, held_epoch, held_applied, held_count;
    uint32_t held_replies;
    uint64_t rings_applied, rings_refused, moves_frozen, moves_handed, moves_claimed;
};

struct tk_driver {
    struct tk_driver_options o;
    struct tk_msg_out out;
    struct tk_driver_io io;
    struct tk_raft *core;
    uint64_t now, wall;

    uint64_t applied;
    bool leader_ready;
    bool refused;        /* a batch was refused while leading: wait for the transfer */
    bool held_noted;     /* TK_DRIVER_EV_HELD reported */
    uint64_t hold_until; /* monotonic: this voter wrote a forced domain's entry 1 */
    uint64_t epoch;
    uint64_t role_leader_id; /* leader announced to the shards */
    char leader_client[TK_MSG_ADDR_MAX];

    /* Batches: head proposed first; tail is being filled. */
    struct batch *head, *tail;
    uint64_t waiting_cmds, waiting_tokens, nbatches;
    struct batch *spare; /* one freed batch kept for reuse */

    uint64_t want_round[TK_DRIVER_SHARDS_MAX];
    struct read_group groups[TK_DRIVER_READ_GROUPS_MAX];
    uint32_t groups_head, groups_len;
    uint64_t next_read_id;

    /* The snapshot being assembled from the shards' pieces: the blob is
     * allocated once every shard has said how much its cut holds (pieces
     * that come before wait in early[]), each shard writes its own region
     * of it, and the core gets it once every shard's final piece came. */
    bool snap_busy;
    bool snap_again; /* the core asked while a cut was running */
    uint64_t snap_index;
    uint64_t snap_asked_us;
    uint8_t *snap_blob;
    size_t snap_len;
    uint8_t *snap_state; /* the ring at snap_index (raft/driver_slots.c), or NULL */
    size_t snap_state_len;
    uint32_t snap_known, snap_finals; /* shards whose size / final piece came */
    struct snap_region {
        bool known, final;
        uint64_t total_count, total_len; /* what the shard's cut holds */
        uint64_t off, count, len;        /* its region; what has come */
    } snap_sh[TK_DRIVER_SHARDS_MAX];
    struct snap_early {
        uint32_t src;
        struct tk_msg_snap_part part;
    } * snap_early;
    uint32_t snap_nearly, snap_early_cap;

    struct pending_entry pending[PENDING_MAX];
    uint32_t pend_head, pend_len;

    uint64_t m_commands, m_entries, m_snapshot_bytes, m_refused, m_snapshot_cut_us;

    struct members m;
    struct slots sl;
};

void driver_event(struct tk_driver *d, int ev, uint64_t a, uint64_t b);
void driver_to_shard(struct tk_driver *d, uint32_t shard, const struct tk_msg *m);

/* raft/driver_slots.c. A DATA entry whose u32 count is TK_DRIVER_SLOTS_MARK
 * holds a ring or a step of a move, not commands:
 *     u32 mark | u8 op (enum tk_raft_slots_op) | u8 name_len | group name
 *     ring:      | ring (core/slots.h)
 *     freeze:    | u16 first | u16 last | u8 len | target
 *     hand-over: | u16 first | u16 last | u8 len | target | ring
 *     claim:     | u16 first | u16 last | u8 len | source | u64 counter | ring
 * It consumes no token; a claim's token_first may raise the counter. */
#define TK_DRIVER_SLOTS_MARK UINT32_MAX
bool slots_entry_is(const uint8_t *data, uint32_t len);
int slots_entry_check(const uint8_t *data, uint32_t len);
/* A committed ring entry at index; TK_EPROTO if it does not decode (the
 * node cannot follow: fatal), and then nothing changed. */
int slots_apply(struct tk_driver *d, uint64_t index, const struct tk_raft_entry *e);
/* Leader, from membership.c: an operator's SLOTS frame, answered at once
 * on its link: OK (done: this ring is the committed one, or the step is
 * committed), REFUSED with why, RETRY while it (or another) is being
 * committed or the frozen slots still hold keys, so that the operator
 * asks again until OK or REFUSED. */
void slots_request(struct tk_driver *d, uint64_t link, const struct tk_raft_msg *msg);
/* A shard's answer to a count of the frozen slots (TK_MSG_HELD). */
void slots_held(struct tk_driver *d, const struct tk_msg_held *h);
void slots_stats(const struct tk_driver *d, struct tk_driver_stats *st);
/* The state a snapshot carries, malloc'd (NULL and *len 0: no ring). */
uint8_t *slots_state(const struct tk_driver *d, size_t *len);
/* An install: the ring and the moves become the blob's state (NULL:
 * none), the shards' views wait for slots_send_views() (after the
 * installs: a view that takes slots away judges the installed table).
 * TK_EPROTO if it does not decode, and then nothing changed. */
int slots_state_load(struct tk_driver *d, const uint8_t *state, size_t len);
void slots_send_views(struct tk_driver *d);
void slots_free(struct tk_driver *d);
/* raft/driver.c: proposes the waiting batches (a claim first needs none
 * numbered from the counter it raises). */
void driver_propose_batches(struct tk_driver *d);

/* raft/membership.c: answers an operator's SLOTS frame on its link. */
void members_slots_reply(struct tk_driver *d,
                         uint64_t link,
                         uint64_t to,
                         uint8_t status,
                         const char *why,
                         uint64_t counter);

/* raft/membership.c */
void members_init(struct tk_driver *d);
/* The periodic part: probes, the note, joins, the next replacement step. */
void members_tick(struct tk_driver *d);
uint64_t members_deadline(const struct tk_driver *d);
/* The core's messages go out through this (address by NodeId). */
void members_send_msg(struct tk_driver *d, const struct tk_raft_msg *m, const char *addr);

#endif
