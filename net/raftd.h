/* Internals of the Raft thread, shared by net/raftd.c (the driver loop,
 * proposals, apply, roles, reads, snapshots), net/raftd_peers.c (the peer
 * links' side of the driver) and net/raftd_status.c (/status and
 * /metrics). Calls go one way: raftd.c -> raftd_peers.c ->
 * raftd_status.c, never back. Only the Raft thread touches this state, except the fields
 * marked as published (read by the admin thread).
 */
#ifndef TK_NET_RAFTD_H
#define TK_NET_RAFTD_H

#include <pthread.h>

#include "core/json.h"
#include "core/slots.h"
#include "net/metrics.h"
#include "net/peer.h"
#include "net/server.h"
#include "raft/driver.h"

/* The longest JSON text the Raft thread publishes (/status's Raft fields,
 * the /members document): the leader's addresses, every member's and the
 * membership note at their longest with every byte escaped, each member's
 * other fields in 256 bytes and everything else in 1 KiB. */
#define RAFTD_MEMBER_JSON_MAX (256 + 2 * TK_JSON_STR_MAX(TK_RAFT_ADDR_MAX))
#define RAFTD_JSON_MAX                                                \
    (1024 + 3 * TK_JSON_STR_MAX(TK_RAFT_ADDR_MAX) +                   \
     TK_JSON_STR_MAX(sizeof(((struct tk_driver_members *)0)->note)) + \
     TK_RAFT_MEMBERS_MAX * RAFTD_MEMBER_JSON_MAX + RAFTD_RING_JSON_MAX)
/* The ring's part of /status: the group, and the ranges it owns. */
#define RAFTD_RING_JSON_MAX (256 + TK_SLOTS_RANGES_MAX * 40)

#define STATUS_PERIOD_US 100000u
#define PRUNE_PERIOD_US 250000u
#define DRAIN_TRANSFER_US 3000000u
/* A follower's workers are woken for committed commands at most this often
 * (they serve nobody; see flush_all() in raftd.c). */
#define FOLLOWER_APPLY_US 2000u

struct tk_raftd {
    struct tk_server *s;
    pthread_t thread;
    struct tk_wake wake;
    struct tk_wake local_wake; /* inline: what worker 0's proposals signal (nothing) */
    struct tk_outbox to_worker[TK_WORKERS_MAX];
    bool urgent[TK_WORKERS_MAX]; /* a message other than APPLY went to this worker */
    uint64_t apply_wake_at;      /* follower: when quietly published applies wake the workers */
    struct tk_peers *peers;      /* NULL when standalone */

    /* --peers (the driver runs the membership protocol over them). */
    uint32_t npeers;
    char peer_addr[TK_PEERS_MAX][TK_ADDR_MAX];
    uint32_t self;
    uint64_t peers_hash;
    uint64_t prune_at;       /* next pruning of links no member has */
    bool removed;            /* the driver said this node was removed */
    uint64_t test_stall_us;  /* test hook: stall once this long (0: never) */
    uint64_t drain_deadline; /* draining: when to stop waiting for a transfer */
    bool did_work;           /* the last round handled something */
    bool started;            /* inline: the loop's start ran */
    unsigned io_work;        /* inline: messages the I/O part handled */
    _Atomic int finished;    /* the loop ended (inline: tk_raftd_join waits) */

    /* The pure logic of this thread (raft/driver.h): it alone steps the
     * Raft core, and runs the membership protocol. */
    struct tk_driver *d;
    uint64_t now;

    /* Published for the admin thread. */
    pthread_mutex_t pub_mu;
    char status_json[RAFTD_JSON_MAX]; /* /status's Raft fields (raftd_status.c) */
    size_t status_len;
    char members_json[RAFTD_JSON_MAX]; /* the /members document */
    size_t members_len;
    char raft_metrics[16384];
    uint64_t pub_at;
    _Atomic int ready;
    struct tk_hist batch_hist;
    struct tk_hist latency;
};

/* net/raftd.c */
uint64_t raftd_random_u64(void);

/* net/raftd_peers.c: tk_driver_io for peers, tk_peer_cb, and what the
 * driver's membership outputs mean for the process. */
/* After every input to the driver: publishes a new domain at once (a
 * leader never greets clients or peers with domain 0 while it grants),
 * and exits the process's loop once the node was removed. */
void raftd_after_driver(struct tk_raftd *r);
void raftd_io_send(void *ctx, const struct tk_wire_frame *f, const char *addr);
void raftd_io_reply(void *ctx, uint64_t link, struct tk_wire_frame *f);
void raftd_io_close_link(void *ctx, uint64_t link);
uint64_t raftd_io_link_id(void *ctx, const char *addr);
/* Whether addr is an entry of --peers or a configuration member's peer
 * address: the only addresses this node dials (ctx is the tk_raftd). */
bool raftd_dial_ok(void *ctx, const char *addr);
/* Whether an inbound peer link's TLS certificate names a member: a host
 * of --peers or of the configuration, or one of --tls-peer-names
 * (struct tk_peer_cb.peer_cert; ctx is the tk_raftd). */
struct tk_tls;
bool raftd_peer_cert(void *ctx, const struct tk_tls *tls);
void raftd_on_frame(void *ctx, struct tk_plink *l, const struct tk_wire_frame *f);
int raftd_parse_peers(struct tk_raftd *r);

/* net/raftd_status.c */
enum { RAFTD_HIST_BATCH = TK_DRIVER_SAMPLE_BATCH, RAFTD_HIST_LATENCY = TK_DRIVER_SAMPLE_LATENCY };
void raftd_hist_add(void *raftd, int which, uint64_t v);
void raftd_publish(struct tk_raftd *r);

#endif
