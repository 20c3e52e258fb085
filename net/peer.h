/* Peer links of the Raft thread (SPEC 2, 9): its own io_uring, outbound
 * links that redial with backoff, inbound links from the peer listener, the
 * TICKETING-PEER/2 handshake with the peer secret (core/handshake.h: each
 * proof is bound to the address dialled and, with TLS, to the session),
 * and frame I/O.
 *
 * Each node sends its messages on the link it dialled to the receiver and
 * receives on the links the others dialled to it, so a pair of nodes uses
 * two TCP connections and nobody has to break ties. Only the Raft thread
 * calls these functions (tk_peers_create and tk_peers_destroy excepted: they
 * run before the thread starts and after it ended).
 *
 * TLS (SPEC 2: TCP -> TLS -> challenge-response -> traffic): with
 * --tls-cert every link is mutual TLS. The accepting side requires a client
 * certificate signed by --tls-ca; the dialling side verifies the server's
 * certificate against --tls-ca and the host part of the address it dialled,
 * and presents its own certificate. The banner/HMAC handshake and the
 * frames then run inside TLS unchanged. Without --tls-cert the links carry
 * exactly the bytes they always did.
 */
#ifndef TK_NET_PEER_H
#define TK_NET_PEER_H

#include "core/auth.h"
#include "net/server.h"
#include "raft/wire.h"

struct tk_peers;
struct tk_plink; /* one connection */
struct tk_tls;

struct tk_peer_cb {
    /* A decoded frame from a link whose handshake completed. */
    void (*frame)(void *ctx, struct tk_plink *l, const struct tk_wire_frame *f);
    /* tk_peers_run() woke from its wait: called before the frames it
     * brought, so the receiver can read its clock first (optional). */
    void (*woke)(void *ctx);
    /* Without --tls-peer-ca: whether the certificate an inbound TLS link
     * presented names a member (optional: without it any certificate of
     * the CA is taken). */
    bool (*peer_cert)(void *ctx, const struct tk_tls *tls);
    void *ctx;
};

/* Listens on the peer port. self is this node's peer address as --peers
 * lists it: an inbound handshake must name it (core/handshake.h). wake_fd (eventfd) is polled in
 * the same ring; resolver threads write it too, until tk_peers_destroy(), which must come before
 * wake_fd is closed. Lookups still running then finish (and are dropped) on their own threads:
 * destroy does not wait for DNS. With s->opt.tls_cert set it loads the peer TLS contexts from
 * tls_cert, tls_key and tls_ca (required then); a file that cannot be used fails the call
 * (TK_EINVAL) after an error line naming the file and the cause. */
int tk_peers_create(struct tk_server *s,
                    const char *self,
                    const struct tk_peer_cb *cb,
                    int wake_fd,
                    struct tk_peers **out);
void tk_peers_destroy(struct tk_peers *p);

/* The outbound link to addr ("host:port"), created and dialled on first
 * use and redialled after failures; NULL if the outbound share of the link
 * table is full (the caller dials only members, so it never is). A host name is looked up again at
 * each dial by a resolver thread of this module (one lookup per address at a time), never on the
 * calling thread; an IP literal connects at once. The link is not ready while its lookup runs. */
struct tk_plink *tk_peers_dial(struct tk_peers *p, const char *addr);
/* Forgets every outbound link whose address keep() refuses (a member that
 * left the configuration, an address nobody lists): closed, its slot
 * freed. Returns how many. */
unsigned tk_peers_prune(struct tk_peers *p, bool (*keep)(void *ctx, const char *addr), void *ctx);
/* Outbound link to addr if one exists, else NULL. */
struct tk_plink *tk_peers_find(struct tk_peers *p, const char *addr);
/* True once the handshake completed; the remote NodeId and domain it
 * announced in its OK line. */
bool tk_plink_ready(const struct tk_plink *l);
uint64_t tk_plink_remote_id(const struct tk_plink *l);
const char *tk_plink_addr(const struct tk_plink *l); /* outbound: the dialled address */
/* A MAC over data that only the two ends of this link's handshake can
 * make (tk_hs_mac); the link must be ready. */
void tk_plink_mac(const struct tk_plink *l,
                  const char *label,
                  const void *data,
                  size_t len,
                  uint8_t out[TK_AUTH_MAC_LEN]);
/* Closes the connection (an outbound link redials later). */
void tk_plink_close(struct tk_peers *p, struct tk_plink *l);

/* Queues one frame on a ready link. Returns false if the link is not ready
 * or its output bound is reached (the frame is dropped; Raft retransmits). */
bool tk_peers_send(struct tk_peers *p, struct tk_plink *l, const struct tk_wire_frame *f);

/* Waits up to timeout_us (0: does not wait) for I/O or the wake fd,
 * handles it, connects links whose name lookups finished, redials due links
 * and flushes queued frames. Returns the number of completions handled. A
 * finished lookup writes wake_fd, so a wait ends for it. */
unsigned tk_peers_run(struct tk_peers *p, uint64_t timeout_us);
/* Like tk_peers_run(p, 0), but enters the kernel only to submit: for a
 * thread that just returned from the kernel, where the ring's task work
 * (its completions) already ran. */
unsigned tk_peers_reap(struct tk_peers *p);
/* Queues every link's pending output and submits it, without reaping. */
void tk_peers_submit(struct tk_peers *p);
/* The peer ring's file: readable while completions wait (for a thread
 * that sleeps on another ring). */
int tk_peers_ring_fd(const struct tk_peers *p);

/* SIGHUP: loads the peer TLS contexts again from the files the options
 * name, for links opened from now on; open links keep the contexts they
 * began with. On failure (logged with the file and cause) the previous
 * contexts stay and TK_EINVAL is returned. TK_OK without TLS (nothing to
 * do). Raft thread only; it reads the files and runs one in-memory
 * handshake (a few milliseconds). */
int tk_peers_tls_reload(struct tk_peers *p);

/* Counters for /metrics. */
struct tk_peer_stats {
    uint64_t frames_in, frames_out, bytes_in, bytes_out;
    uint64_t dials, handshakes, auth_failures, frames_dropped, links_closed;
    uint64_t frames_oversize, handshake_timeouts, frames_malformed, accept_errors;
    uint64_t handshakes_evicted;
    uint64_t resolves, resolve_failures; /* name lookups (off the Raft thread) */
    uint64_t tls_failures;    /* links closed by a TLS failure (handshake, certificate, record) */
    uint64_t links_evicted;   /* outbound links to addresses no longer members (prune) */
    uint64_t inbound_evicted; /* authenticated inbound links closed over INBOUND_MAX */
    uint64_t dials_refused;   /* outbound links refused: the outbound share was full */
    uint64_t accepts_refused; /* connections closed at accept: inbound slots all taken */
    uint64_t certs_refused;   /* inbound TLS links whose certificate named no member */
};
void tk_peers_stats(const struct tk_peers *p, struct tk_peer_stats *st);

#endif
