/* The bootstrap of a new fencing domain as an agreement among the fresh
 * nodes of --peers (SPEC 7, 10): single-decree Paxos on the domain's first
 * configuration, so that two nodes that each see "a majority fresh" in
 * their own view cannot each start a domain.
 *
 * Every fresh node is an acceptor; a node whose view says it should write
 * the new domain (raft/members.h: the lowest NodeId of a fresh --peers, or
 * of the fresh nodes run with --force-new-domain) is also a proposer.
 *
 *   proposer -> all:    BOOT PREPARE  (ballot)
 *   acceptor -> prop.:  BOOT PROMISE  (ballot, the value it accepted last, if any)
 *   proposer -> all:    BOOT ACCEPT   (ballot, value)        once `quorum` promised
 *   acceptor -> prop.:  BOOT ACCEPTED (ballot)
 *   proposer -> all:    BOOT CHOSEN   (ballot, value)        once a majority accepted
 *   acceptor -> prop.:  BOOT NACK     (the higher ballot it promised)
 *
 * A ballot is (round, proposer NodeId), ordered by round then NodeId. An
 * acceptor promises only a ballot above every one it promised, accepts
 * only at or above its promise, and reports the last value it accepted; a
 * proposer whose promises carry a value must propose the value of the
 * highest ballot among them, else it proposes its own offer with the
 * promisers as the voters. Any two majorities of --peers share a node, so
 * at most one value is ever chosen: one domain, one voter set, one first
 * token. The value's proposer, if it is one of the voters, writes entry 1
 * (tk_raft_bootstrap) once it learns the value chosen (as its proposer, or
 * from CHOSEN); the value is the whole entry, so every writer writes the
 * same entry, and Raft's election among identical logs does the rest.
 *
 * The acceptors are processes: a fresh node that restarts forgets its
 * promises (it is a new NodeId). The agreement therefore assumes that no
 * majority of --peers restarts while it runs; that would be a second loss
 * of a majority's state, which the hold of a forced domain (its first
 * grants wait until the lost domain's leases ran out) covers like the
 * first.
 *
 * Pure: no clock, socket or randomness of its own (times and a seed are
 * inputs). One struct tk_boot per fresh node, owned by the caller's thread.
 */
#ifndef TK_RAFT_BOOT_H
#define TK_RAFT_BOOT_H

#include "core/tk.h"
#include "raft/raft.h"

#define TK_BOOT_PEERS_MAX 5
/* Messages one call can emit: a round to every other peer, and answers. */
#define TK_BOOT_OUT_MAX (2 * TK_BOOT_PEERS_MAX)
/* A proposal that has not reached its end by then starts over with a
 * higher round, after a pause drawn in [RETRY_MIN, RETRY_MIN + RETRY_SPREAD)
 * so that two proposers do not keep preempting each other. */
#define TK_BOOT_ROUND_US 1000000u
#define TK_BOOT_RETRY_MIN_US 200000u
#define TK_BOOT_RETRY_SPREAD_US 800000u

enum tk_boot_phase {
    TK_BOOT_PREPARE = 1,
    TK_BOOT_PROMISE = 2,
    TK_BOOT_ACCEPT = 3,
    TK_BOOT_ACCEPTED = 4,
    TK_BOOT_CHOSEN = 5,
    TK_BOOT_NACK = 6,
};

struct tk_boot_ballot {
    uint64_t round;
    uint64_t id; /* the proposer's NodeId */
};

/* The value agreed on: the whole of entry 1 of the new domain. */
struct tk_boot_value {
    struct tk_raft_config config; /* voters, domain id, serve_after */
    uint64_t token_first;
};

/* One entry of --peers as this node sees it now. */
struct tk_boot_peer {
    uint64_t id; /* the NodeId its probes give, 0 if unknown */
    char peer_addr[TK_RAFT_ADDR_MAX + 1];
    char client_addr[TK_RAFT_ADDR_MAX + 1];
};

/* What a proposer would propose if no acceptor had accepted a value yet. */
struct tk_boot_offer {
    uint64_t domain_lo, domain_hi;
    uint64_t token_first;
    uint64_t serve_after_us;
    uint32_t quorum; /* promises needed, this node's included: a majority at least */
};

/* A message out, to the peer at index `peer` of --peers (m.to is the
 * NodeId it must be; the transport drops it for another process). */
struct tk_boot_send {
    uint32_t peer;
    struct tk_raft_msg m;
};

struct tk_boot_out {
    uint32_t n;
    struct tk_boot_send sends[TK_BOOT_OUT_MAX];
    /* The agreement chose `write`, and this node, one of its voters,
     * writes it as entry 1 (once). Points into the tk_boot. */
    const struct tk_boot_value *write;
};

struct tk_boot {
    uint64_t self;
    uint32_t self_index, n;
    uint64_t peers_hash;
    struct tk_prng prng;
    /* Acceptor. */
    struct tk_boot_ballot promised, accepted;
    bool has_accepted;
    struct tk_boot_value acc;
    bool chosen; /* learned from a CHOSEN, or as the proposer */
    struct tk_boot_value chosen_value;
    /* Proposer. */
    uint8_t stage; /* idle, preparing, accepting, done */
    bool offering; /* the last step had an offer */
    struct tk_boot_offer offer;
    struct tk_boot_ballot mine;
    uint64_t round_seen;                   /* the highest round any message showed */
    uint64_t promisers[TK_BOOT_PEERS_MAX]; /* by index: NodeId that promised mine, 0 none */
    uint64_t acceptors[TK_BOOT_PEERS_MAX]; /* by index: NodeId that accepted mine */
    bool best_has;                         /* the highest accepted value the promises reported */
    struct tk_boot_ballot best;
    struct tk_boot_value best_value;
    uint64_t floor_seen;        /* the highest token_floor the promises of mine reported */
    struct tk_boot_value value; /* what mine proposes, once fixed */
    uint64_t stage_end_us;      /* a stage past this starts over */
    uint64_t retry_at_us;       /* idle: no new round before this */
    bool written;               /* this node wrote entry 1 */
    /* Counters (for /status and tests). */
    uint64_t rounds, nacks;
};

/* A fresh node: self is its NodeId, at self_index of the n (3 or 5)
 * entries of --peers; peers_hash identifies the --peers list (only peers
 * with the same list take part); seed feeds the retry pauses. */
void tk_boot_init(struct tk_boot *b,
                  uint64_t self,
                  uint32_t self_index,
                  uint32_t n,
                  uint64_t peers_hash,
                  uint64_t seed);

/* Time passes (call it every probe round). With offer not NULL, this
 * node's view says it should write the new domain: it starts a ballot, or
 * retries one that ran out of time; retransmits the current stage. NULL
 * offer: it does not propose (any ballot it ran is dropped). peers: the n
 * entries of --peers now. */
void tk_boot_step(struct tk_boot *b,
                  const struct tk_boot_peer *peers,
                  const struct tk_boot_offer *offer,
                  uint64_t now_us,
                  struct tk_boot_out *out);

/* A BOOT message m from peer index `from` (whose NodeId is m->from).
 * willing: this node may take part now (it is fresh, has the same
 * --peers, and does not see a live domain it should join instead); an
 * unwilling node answers nothing. token_floor: the highest fencing counter
 * this node's probes saw (a promise reports it, so the new domain's first
 * token is above every counter any promiser saw). */
void tk_boot_receive(struct tk_boot *b,
                     const struct tk_boot_peer *peers,
                     uint32_t from,
                     const struct tk_raft_msg *m,
                     bool willing,
                     uint64_t token_floor,
                     uint64_t now_us,
                     struct tk_boot_out *out);

/* Whether a fresh node may take Raft traffic of domain (lo, hi): a value
 * with that domain was chosen or accepted here. No other new domain can
 * exist (only a chosen value is ever written). */
bool tk_boot_knows_domain(const struct tk_boot *b, uint64_t lo, uint64_t hi);

/* Ballot order. */
int tk_boot_ballot_cmp(struct tk_boot_ballot a, struct tk_boot_ballot b);

#endif
