/* Private state and helpers of the Raft core, shared by the raft/ sources only.
 *
 * Files: raft.c (create, step dispatch, roles, timers), status.c (queries,
 * status, the consistency check), log.c (the
 * in-memory log ring), config.c (membership helpers and encoding),
 * election.c (pre-vote, vote, TimeoutNow), replication.c (Append, commit,
 * flow control), snapshot.c (taking, sending, receiving snapshots),
 * leader.c (propose, membership changes, transfer, read barriers),
 * out.c (the update's output buffers).
 */
#ifndef TK_RAFT_INTERNAL_H
#define TK_RAFT_INTERNAL_H

#include "raft/raft.h"

/* Peer-supplied terms and indexes above these are refused as malformed, so
 * that no arithmetic on them (term + 1, index + 1, index + n) can wrap: a
 * cluster never gets anywhere near 2^62 terms or entries. */
#define RAFT_TERM_MAX (UINT64_MAX >> 2)
#define RAFT_INDEX_MAX (UINT64_MAX >> 2)

/* ------------------------------------------------------------------ */
/* The log (log.c)                                                     */

/* Entries [first, first + n) in a ring. Entry data is owned by the log
 * (malloc'd). Dropped data goes to the trash and is freed at the start of
 * the next step, so pointers handed out in an update stay valid until then. */
struct raft_log {
    struct tk_raft_entry *ring;
    uint64_t cap;             /* power of two, 0 before the first append */
    uint64_t head;            /* ring slot of `first` */
    uint64_t first;           /* index of the first entry in memory */
    uint64_t n;               /* entries in memory */
    uint64_t prev_term;       /* term of entry first - 1 (0 if none) */
    uint64_t prev_token_next; /* fencing counter after entry first - 1 */
    uint64_t prev_cum;        /* cum_bytes of entry first - 1 */
    uint64_t bytes;           /* data bytes in memory */
    void **trash;
    uint64_t trash_n, trash_cap;
};

void raft_log_init(struct raft_log *l);
void raft_log_free(struct raft_log *l);
/* Frees the data dropped since the last call. */
void raft_log_gc(struct raft_log *l);
static inline uint64_t raft_log_last(const struct raft_log *l)
{
    return l->first + l->n - 1;
}
uint64_t raft_log_last_term(const struct raft_log *l);
/* The entry at index, or NULL if not in memory. */
const struct tk_raft_entry *raft_log_get(const struct raft_log *l, uint64_t index);
/* Term of index if known (in memory, or first - 1); *known says which. */
uint64_t raft_log_term(const struct raft_log *l, uint64_t index, bool *known);
uint64_t raft_log_token_next(const struct raft_log *l);
/* cum_bytes at index, clamped to [first - 1, last]. */
uint64_t raft_log_cum(const struct raft_log *l, uint64_t index);
/* Appends e at index last + 1, taking ownership of e->data (malloc'd) on
 * success. Asserts index/term/token order. Returns TK_OK or TK_ENOMEM. */
int raft_log_append(struct raft_log *l, const struct tk_raft_entry *e);
/* Drops entries [index, last]. */
void raft_log_truncate(struct raft_log *l, uint64_t index);
/* Drops entries [first, index]. */
void raft_log_compact(struct raft_log *l, uint64_t index);
/* Drops everything; the log restarts after (index, term, token_next). */
void raft_log_reset(struct raft_log *l, uint64_t index, uint64_t term, uint64_t token_next);
/* Frees p (malloc'd) at the next step rather than now. */
void raft_log_discard(struct raft_log *l, void *p);

/* ------------------------------------------------------------------ */
/* The core                                                            */

enum raft_progress_state {
    PROGRESS_PROBE = 0,     /* one Append at a time until one matches */
    PROGRESS_REPLICATE = 1, /* pipelined Appends within the in-flight bound */
    PROGRESS_SNAPSHOT = 2,  /* sending the snapshot, chunk by chunk */
};

/* The leader's view of one member, parallel to config.m[]. */
struct raft_progress {
    uint64_t next;
    uint64_t match;
    uint8_t state;
    bool paused;            /* PROBE: an Append is out; wait for a reply or heartbeat */
    bool eager;             /* gets new entries at once (choose_eager() in replication.c) */
    uint64_t last_heard_us; /* last message from it in this term */
    uint64_t ack_seq;       /* highest heartbeat round it acknowledged */
    /* SNAPSHOT (snapshot.c): chunks [snap_offset, snap_next) are out. */
    uint64_t snap_index;      /* the snapshot being sent: r->snap or r->snap_old */
    uint64_t snap_sent_hi;    /* highest snapshot index sent to it in this term */
    uint64_t snap_offset;     /* bytes the follower acknowledged */
    uint64_t snap_next;       /* offset of the next chunk to send */
    uint64_t snap_sent_max;   /* highest offset sent in this transfer */
    bool snap_end_sent;       /* the chunk that ends the blob is out */
    uint64_t snap_sent_us;    /* last chunk (or heartbeat) sent to it */
    uint64_t snap_moved_us;   /* last time snap_offset advanced (or the window was resent) */
    uint64_t snap_back_us;    /* last time the window was sent again */
    uint64_t snap_resent_off; /* the chunk last sent again (UINT64_MAX: none) */
    uint64_t snap_resent_us;  /* when */
    uint64_t snap_rto_us;     /* resend timeout (0: not measured yet) */
    uint64_t snap_rtt_off;    /* round-trip sample: the ack awaited (0: none) */
    uint64_t snap_rtt_us;     /* when the sampled chunk first went out */
};

/* The node's latest snapshot: taken locally or installed from a leader. */
struct raft_snap {
    uint64_t index; /* 0: none */
    uint64_t term;
    uint64_t token_next;
    /* On this node's clock, no earlier than the leases in data were
     * counted: when the blob was handed over, or an install's time less
     * the age its last chunk carried. */
    uint64_t taken_us;
    struct tk_raft_config config;
    uint8_t *data;
    size_t len;
};

/* A snapshot being received. Two leaders may hold different blobs for the
 * same index (a state machine need not serialize deterministically), so
 * chunks only join if they come from the same leader in the same term. */
struct raft_incoming {
    uint64_t index; /* 0: none */
    uint64_t term;
    uint64_t from;     /* the leader sending it */
    uint64_t msg_term; /* that leader's term */
    uint64_t total;
    uint64_t received;
    uint64_t cap; /* bytes of buf: grows with what arrives, up to total */
    uint8_t *buf;
};

struct raft_read_pending {
    uint64_t id;
    uint64_t seq;
    uint64_t index;
};

/* Output buffers of one step (out.c). */
struct raft_out {
    struct tk_raft_msg *msgs;
    uint64_t *msg_ent_off; /* per message: offset of its entries in ents */
    uint32_t n_msgs, cap_msgs;
    struct tk_raft_entry *ents;
    uint64_t n_ents, cap_ents;
    struct tk_raft_read *reads;
    uint32_t n_reads, cap_reads;
    uint64_t dropped; /* messages lost to allocation failure */
};

struct tk_raft {
    struct tk_raft_options opt;
    struct tk_prng prng;
    uint64_t id;
    uint64_t now_us;

    uint8_t role;
    uint64_t term;
    uint64_t voted_for;
    uint64_t leader_id;
    uint64_t commit;
    uint64_t applied;

    struct raft_log log;

    /* Membership: the latest config in the log is in effect (thesis §4.1). */
    bool has_config;
    struct tk_raft_config config;
    uint64_t config_index;             /* entry it came from; <= snapshot index if older */
    struct tk_raft_config base_config; /* in effect at log.first - 1 */
    bool has_base_config;

    struct raft_snap snap;
    /* Leader: an older snapshot pinned by a transfer that started with it
     * (index 0: none). At most one is kept besides snap; it is dropped as
     * soon as no transfer uses it (raft_snap_unpin). */
    struct raft_snap snap_old;
    struct raft_incoming in;
    bool install_pending; /* report snap as installed in this update */

    /* Leader */
    struct raft_progress prog[TK_RAFT_MEMBERS_MAX];
    uint64_t term_start_index;
    uint64_t heartbeat_due_us;
    uint64_t lazy_due_us; /* next Append round for followers that are not eager */
    bool lazy_pending;    /* such a follower has entries it was not sent yet */
    uint64_t transfer_target;
    uint64_t transfer_deadline_us;
    bool transfer_sent;
    struct raft_read_pending *reads; /* ring of opt.reads_max */
    uint32_t reads_head, reads_n;
    uint64_t read_seq;
    bool read_round; /* send a heartbeat round at the end of the step */

    /* Candidates */
    bool votes[TK_RAFT_MEMBERS_MAX];
    bool reasked[TK_RAFT_MEMBERS_MAX]; /* pre-vote asked again, this round */
    bool campaign_transfer;

    /* Followers */
    uint64_t election_deadline_us;
    uint64_t leader_heard_us; /* last valid message from a leader; 0 never */

    uint64_t snapshot_asked_index; /* last applied index a snapshot was asked at */

    struct raft_out out;
    struct tk_raft_metrics metrics;
};

/* raft.c */
void raft_become_follower(struct tk_raft *r, uint64_t term, uint64_t leader_id);
void raft_become_leader(struct tk_raft *r);
void raft_reset_election_timer(struct tk_raft *r);
/* Sets the commit index (never lower); asserts it is in the log. */
void raft_commit_to(struct tk_raft *r, uint64_t index);
/* Index of a member in config.m[], or -1. */
int raft_member_slot(const struct tk_raft *r, uint64_t id);
uint32_t raft_quorum(const struct tk_raft *r);
bool raft_log_up_to_date(const struct tk_raft *r, uint64_t last_index, uint64_t last_term);

/* config.c */
/* The config in effect at index (>= log.first - 1). */
void raft_config_at(const struct tk_raft *r, uint64_t index, struct tk_raft_config *out);
/* Appending or truncating CONFIG entries changed the latest config. */
void raft_config_refresh(struct tk_raft *r);
/* Adopts c as the config in effect; the leader remaps its progress. */
void raft_config_set(struct tk_raft *r, const struct tk_raft_config *c, uint64_t index);

/* election.c */
void raft_election_start(struct tk_raft *r, bool pre, bool transfer);
void raft_recv_vote(struct tk_raft *r, const struct tk_raft_msg *m);
void raft_recv_vote_reply(struct tk_raft *r, const struct tk_raft_msg *m);
void raft_recv_timeout_now(struct tk_raft *r, const struct tk_raft_msg *m);

/* replication.c */
/* Appends one entry to the log as leader: term and index are set here,
 * tokens from token_first (0: the counter; above it only to raise it, a
 * DATA entry's). Takes ownership of data (malloc'd or NULL). */
int raft_leader_append(struct tk_raft *r,
                       uint8_t type,
                       uint8_t *data,
                       uint32_t len,
                       uint64_t token_first,
                       uint32_t token_count);
void raft_replicate_all(struct tk_raft *r, bool heartbeat);
void raft_send_append(struct tk_raft *r, int slot, bool heartbeat);
/* An empty Append from the first entry in memory, to a follower being sent
 * a snapshot: a heartbeat (election timer, check-quorum, read rounds). */
void raft_send_heartbeat(struct tk_raft *r, int slot);
/* Checks an Append before anything changes (term included): what the
 * message says about itself and, from a leader of at least our term, what
 * it says about our log (Election Safety, Log Matching at the committed
 * prefix, the fencing counter). False: drop it as invalid. */
bool raft_append_check(const struct tk_raft *r, const struct tk_raft_msg *m);
/* Precondition: raft_append_check(r, m) passed, then the term update. */
void raft_recv_append(struct tk_raft *r, const struct tk_raft_msg *m);
/* Returns TK_OK, or TK_EPROTO for a reply that contradicts the leader's
 * log (nothing changed then). */
int raft_recv_append_reply(struct tk_raft *r, const struct tk_raft_msg *m);
void raft_leader_commit(struct tk_raft *r);
/* A follower acknowledged entries up to match: advance, commit, transfer. */
void raft_leader_progress(struct tk_raft *r, int slot, uint64_t match);
/* Sends TimeoutNow once the transfer target has every entry. */
void raft_transfer_maybe_send(struct tk_raft *r, int slot);
/* Another node claims to lead our current term, which Election Safety
 * rules out: its Append or Snapshot is refused. */
bool raft_other_leader(const struct tk_raft *r, const struct tk_raft_msg *m);
/* A leader of the current term spoke (Append or Snapshot): follow it. */
void raft_follow_leader(struct tk_raft *r, uint64_t leader);

/* snapshot.c */
int raft_snapshot_taken(struct tk_raft *r, uint64_t index, uint8_t *data, size_t len);
void raft_snapshot_maybe_ask(struct tk_raft *r, struct tk_raft_update *up);
/* Sends chunks of the follower's snapshot while its window has room. On
 * a heartbeat, first: the window again from the acknowledged offset if no
 * ack moved it for the resend timeout, else a heartbeat Append if nothing
 * went to the follower for a heartbeat. */
void raft_send_snapshot(struct tk_raft *r, int slot, bool heartbeat);
/* Like raft_append_check, for a Snapshot chunk. */
bool raft_snapshot_check(const struct tk_raft *r, const struct tk_raft_msg *m);
/* Precondition: raft_snapshot_check(r, m) passed, then the term update. */
void raft_recv_snapshot(struct tk_raft *r, const struct tk_raft_msg *m);
/* Returns TK_OK, or TK_EPROTO for a reply that claims more than was sent. */
int raft_recv_snapshot_reply(struct tk_raft *r, const struct tk_raft_msg *m);
/* Drops the pinned older snapshot once no transfer uses it. */
void raft_snap_unpin(struct tk_raft *r);
void raft_snap_free(struct raft_snap *s);
void raft_incoming_free(struct raft_incoming *in);
/* Drops log entries no longer needed: up to the snapshot index minus the
 * trailing margin (bounded in entries and bytes, see raft.h), never above
 * the applied index. */
void raft_log_trim(struct tk_raft *r);

/* leader.c */
int raft_propose(struct tk_raft *r, const struct tk_raft_event *ev, struct tk_raft_update *up);
int raft_change(struct tk_raft *r, const struct tk_raft_event *ev, struct tk_raft_update *up);
int raft_transfer(struct tk_raft *r, uint64_t target);
void raft_transfer_check(struct tk_raft *r);
int raft_read(struct tk_raft *r, uint64_t id);
void raft_reads_confirm(struct tk_raft *r);
void raft_reads_fail_all(struct tk_raft *r);

/* out.c */
void raft_out_reset(struct raft_out *o);
void raft_out_free(struct raft_out *o);
/* A new message to `to`, with type/from/term filled; NULL if out of memory
 * (the message is then lost, which Raft tolerates). */
struct tk_raft_msg *raft_out_msg(struct tk_raft *r, uint8_t type, uint64_t to);
/* Copies n entries from the log into the message's entry list. */
bool raft_out_append_entries(struct tk_raft *r,
                             struct tk_raft_msg *m,
                             uint64_t from_index,
                             uint32_t n);
void raft_out_read(struct tk_raft *r, uint64_t id, uint64_t index, bool ok);
/* Fixes the entry pointers of Append messages once all are generated. */
void raft_out_finish(struct raft_out *o);

#endif
