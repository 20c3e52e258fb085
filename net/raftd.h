/* Internals of the Raft thread, shared by net/raftd.c (the driver loop,
 * proposals, apply, roles, reads, snapshots), net/raftd_peers.c (peer
 * frames, probes and bootstrap) and net/raftd_status.c (/status and
 * /metrics). Only the Raft thread touches this state, except the fields
 * marked as published (read by the admin thread).
 */
#ifndef TK_NET_RAFTD_H
#define TK_NET_RAFTD_H

#include <pthread.h>

#include "net/metrics.h"
#include "net/peer.h"
#include "net/server.h"
#include "raft/boot.h"
#include "raft/driver.h"
#include "raft/raft.h"

#define PROBE_PERIOD_US 250000u
#define PROBE_FRESH_US 1500000u
/* After writing a new domain's entry 1, its proposer repeats CHOSEN this
 * long to voters that may have missed it. */
#define BOOT_LINGER_US 10000000u
#define STATUS_PERIOD_US 100000u
#define DRAIN_TRANSFER_US 3000000u
/* A follower's workers are woken for committed commands at most this often
 * (they serve nobody; see flush_all() in raftd.c). */
#define FOLLOWER_APPLY_US 2000u

struct peer_info { /* what probes told us about a configured peer (bootstrap) */
    uint64_t id;
    char client_addr[TK_ADDR_MAX];
    uint64_t peers_hash;
    uint64_t probed_us;  /* its PROBE reached us */
    uint64_t replied_us; /* its PROBE_REPLY reached us */
    bool member;         /* it belongs to a domain */
    bool agreed;         /* it was seen fresh with our --peers: a bootstrap partner */
    bool forced;         /* its PROBE says --force-new-domain */
    bool leader_known;   /* its last PROBE_REPLY named a leader */
    uint64_t token_next; /* its fencing counter, from its last PROBE_REPLY */
};

struct tk_raftd {
    struct tk_server *s;
    pthread_t thread;
    struct tk_wake wake;
    struct tk_wake local_wake; /* inline: what worker 0's proposals signal (nothing) */
    struct tk_outbox to_worker[TK_WORKERS_MAX];
    bool urgent[TK_WORKERS_MAX]; /* a message other than APPLY went to this worker */
    uint64_t apply_wake_at;      /* follower: when quietly published applies wake the workers */
    struct tk_raft *core;
    struct tk_peers *peers; /* NULL when standalone */

    /* Membership from --peers. */
    uint32_t npeers;
    char peer_addr[TK_PEERS_MAX][TK_ADDR_MAX];
    uint32_t self;
    uint64_t peers_hash;
    struct peer_info info[TK_PEERS_MAX];
    uint64_t probe_at;
    bool domain_seen; /* a peer reported membership of a domain (warned once) */

    /* The new-domain agreement among fresh nodes (raft/boot.h). */
    struct tk_boot boot;
    bool boot_ready;            /* boot initialised (first probe round) */
    bool boot_willing;          /* this node's view lets it promise a new domain */
    uint64_t boot_floor;        /* the highest fencing counter its probes saw */
    struct tk_boot_offer offer; /* what it proposes, while offering */
    bool offering;              /* its view says it should write the new domain */
    uint64_t boot_linger_until; /* after writing entry 1: keep telling the voters */

    /* Joining a live domain as a fresh NodeId (SPEC 10). */
    uint64_t join_leader_id;                 /* whom to ask; 0: no leader known */
    char join_leader_addr[TK_ADDR_MAX];      /* its peer address */
    uint64_t join_domain_lo, join_domain_hi; /* the domain we join (0,0: none seen) */
    /* NodeIds this node saw leave its configuration, newest last (a ring):
     * a Join from one of them is answered removed (raftd_peers.c). */
#define RAFTD_GONE_MAX 32
    uint64_t gone[RAFTD_GONE_MAX];
    uint32_t gone_next;
    uint64_t seen_ids[TK_RAFT_MEMBERS_MAX];
    uint32_t seen_n;
    uint64_t leader_heard_us; /* last Append/Snapshot from a leader */
    uint64_t leader_seen_us;  /* fresh: since when probes name a live leader */
    uint8_t join_reply;       /* last JoinReply status, 0xff: none */
    uint8_t membership;       /* enum raftd_membership, published */
    bool removed;             /* the leader says we are not a member */
    char note[256];           /* why we are where we are (/status) */
    uint64_t note_us;         /* when the note was last brought up to date */
    uint64_t members_at;      /* leader: next membership step */
    uint64_t invalid_log_at;  /* next time an invalid message may be logged */
    uint64_t refused_log_at;  /* next time a refused dial may be logged */
    uint64_t dials_refused;   /* sends to addresses no member has (raftd_send_msg) */
    uint64_t test_stall_us;   /* test hook: stall once this long (0: never) */
    uint64_t drain_deadline;  /* draining: when to stop waiting for a transfer */
    bool did_work;            /* the last round handled something */
    bool started;             /* inline: the loop's start ran */
    unsigned io_work;         /* inline: messages the I/O part handled */
    _Atomic int finished;     /* the loop ended (inline: tk_raftd_join waits) */
    _Atomic uint64_t m_joins, m_changes;

    /* The pure logic of this thread (raft/driver.h); core is its Raft core. */
    struct tk_driver *d;
    uint64_t now;

    /* Published for the admin thread. */
    pthread_mutex_t pub_mu;
    char status_json[16384];
    char raft_metrics[16384];
    uint64_t pub_at;
    _Atomic int ready;
    struct tk_hist batch_hist;
    struct tk_hist latency;
};

enum raftd_membership {
    RAFTD_STANDALONE,
    RAFTD_BOOTSTRAPPING, /* fresh; every peer fresh too: forming a new domain */
    RAFTD_JOINING,       /* fresh; asked a live domain's leader to add us */
    RAFTD_WAITING,       /* fresh; a peer has a domain but knows no leader */
    RAFTD_LEARNER,
    RAFTD_VOTER,
    RAFTD_REMOVED, /* no longer in the configuration: exiting */
};
#define MEMBERS_PERIOD_US 50000u

/* net/raftd.c */
void raftd_process(struct tk_raftd *r, int rc, struct tk_raft_update *up);
uint64_t raftd_random_u64(void);

/* net/raftd_peers.c */
const struct tk_raft_member *raftd_member(struct tk_raftd *r, uint64_t id);
void raftd_domain(struct tk_raftd *r, uint64_t *lo, uint64_t *hi);
void raftd_send_msg(struct tk_raftd *r, const struct tk_raft_msg *m, const char *addr);
/* Whether addr is an entry of --peers or a configuration member's peer
 * address: the only addresses this node dials (ctx is the tk_raftd). */
bool raftd_dial_ok(void *ctx, const char *addr);
/* Whether an inbound peer link's TLS certificate names a member: a host
 * of --peers or of the configuration, or one of --tls-peer-names
 * (struct tk_peer_cb.peer_cert; ctx is the tk_raftd). */
struct tk_tls;
bool raftd_peer_cert(void *ctx, const struct tk_tls *tls);
void raftd_on_frame(void *ctx, struct tk_plink *l, const struct tk_wire_frame *f);
void raftd_probe_peers(struct tk_raftd *r);
void raftd_members_step(struct tk_raftd *r);
/* Notes the NodeIds that left the configuration since the last round, and
 * whether id is one of the last RAFTD_GONE_MAX of them. */
void raftd_note_gone(struct tk_raftd *r);
bool raftd_was_removed(const struct tk_raftd *r, uint64_t id);
const char *raftd_membership_name(uint8_t m);
int raftd_parse_peers(struct tk_raftd *r);

/* net/raftd_status.c */
enum { RAFTD_HIST_BATCH = TK_DRIVER_SAMPLE_BATCH, RAFTD_HIST_LATENCY = TK_DRIVER_SAMPLE_LATENCY };
void raftd_hist_add(void *raftd, int which, uint64_t v);
void raftd_publish(struct tk_raftd *r);

#endif
