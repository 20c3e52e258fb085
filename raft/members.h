/* Membership decisions of the leader (SPEC 10): whether a Join is
 * welcome, and which single-server change comes next when a restarted
 * member rejoins under a fresh NodeId.
 *
 * Pure functions of the configuration and the leader's view of progress;
 * the Raft thread and the simulation both call them, so the simulated
 * replacement is the one that ships. They decide, the core enforces: the
 * core still refuses a change while another is uncommitted, before an
 * entry of the leader's term commits, or a promotion of a learner that
 * has not caught up (tk_raft_change returns TK_EFULL: ask again later).
 *
 * Age within a configuration is its order: an added learner goes to the
 * end and a removal keeps the order of the rest, so of two members at
 * the same peer address the later one is the newer process. That rule
 * lives in the log, so every leader of every term reads it the same way.
 */
#ifndef TK_RAFT_MEMBERS_H
#define TK_RAFT_MEMBERS_H

#include "raft/raft.h"

enum tk_members_verdict {
    TK_MEMBERS_ALREADY = 1, /* already a member: nothing to add */
    TK_MEMBERS_ADD = 2,     /* welcome: add it as a learner (the core may say "later") */
    TK_MEMBERS_REFUSE = 3,  /* unknown address */
    TK_MEMBERS_WAIT = 4,    /* no room now: stale learners must go first; ask again */
};

/* A Join from `joiner` (its NodeId and addresses). addr_listed: its peer
 * address is one this cluster is configured with (the leader's --peers),
 * so a member that never existed cannot talk its way in. */
uint8_t tk_members_join(const struct tk_raft_config *c,
                        const struct tk_raft_member *joiner,
                        bool addr_listed);

/* Returned by tk_members_next besides the change types: the leader's own
 * address has a newer member (its process was taken for dead and
 * replaced, yet it leads): hand leadership to another voter, whose term
 * then finishes the replacement of this identity. */
#define TK_MEMBERS_TRANSFER 4

/* The next change towards a settled membership, or 0 if there is none:
 *   0. TK_MEMBERS_TRANSFER if a newer member lives at the leader's address;
 *   1. REMOVE a learner that a newer member at its address superseded
 *      (its process restarted again before it was promoted);
 *   2. REMOVE a voter that a newer voter at its address replaced (the
 *      second of the two steps; never the leader itself);
 *   3. PROMOTE the newest learner at an address once it has caught up
 *      (match >= commit in st), if it replaces an older voter there or
 *      the voters are fewer than voters_target (the configured size).
 * Only one step at a time: removals first, so a replacement finishes
 * before the next begins and the voter count is back at its size before
 * another member may go. st is the leader's tk_raft_status. Sets *id to
 * the member to change. */
uint8_t tk_members_next(const struct tk_raft_config *c,
                        const struct tk_raft_status *st,
                        uint32_t voters_target,
                        uint64_t *id);

/* True if the configuration lists a member older than `id` at id's peer
 * address (a replacement of id's predecessor is not finished), or id is
 * not a voter: such a node is not ready to let the next member go. */
bool tk_members_replacing(const struct tk_raft_config *c, uint64_t id);

/* What probes told a fresh node about one other peer of its --peers. */
struct tk_members_peer {
    uint64_t id;         /* its NodeId, 0 unknown */
    bool fresh;          /* its PROBE_REPLY is recent */
    bool partner;        /* fresh, in no domain, same --peers, probed us: can bootstrap with us */
    bool member;         /* in a domain it did not form with us */
    bool leader_known;   /* its last reply named a live leader */
    bool forced;         /* it runs with --force-new-domain */
    uint64_t token_next; /* its fencing counter, from its last reply */
};

enum tk_members_boot_verdict {
    TK_MEMBERS_BOOT_WAIT = 1,  /* every peer fresh is not known yet, or another node writes */
    TK_MEMBERS_BOOT_NOW,       /* write entry 1 of a new domain with the partners */
    TK_MEMBERS_BOOT_JOIN,      /* a peer is in a live domain: join it, never bootstrap */
    TK_MEMBERS_BOOT_NO_LEADER, /* a peer is in a domain without a leader: wait */
    TK_MEMBERS_BOOT_FORCE,     /* --force-new-domain: form a new domain of the fresh majority */
};

struct tk_members_boot {
    uint8_t verdict;      /* enum tk_members_boot_verdict */
    uint64_t token_floor; /* the first token must exceed every counter a peer reported */
    uint32_t fresh;       /* fresh nodes, this one included */
};

/* Bootstrap of a fresh node (SPEC 10). The lowest NodeId writes the new
 * domain once every other peer is a partner; a node whose peers belong to
 * a domain joins it (or waits while it has no leader) and never
 * bootstraps, unless a majority of --peers is fresh, no survivor knows a
 * leader, and this node is the lowest NodeId among the fresh nodes run
 * with --force-new-domain. peers: the other n peers of --peers (npeers
 * in all, this node included). */
uint8_t tk_members_bootstrap(uint64_t self_id,
                             bool self_forced,
                             const struct tk_members_peer *peers,
                             uint32_t n,
                             uint32_t npeers,
                             struct tk_members_boot *out);

#endif
