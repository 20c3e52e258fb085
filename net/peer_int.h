/* Internals of the Raft thread's peer links (net/peer.h), shared by
 * net/peer.c (the links' lifecycle: dialling, accepting, the ring, the
 * deadlines and budgets), net/peer_tls.c (TLS on a link) and
 * net/peer_link.c (the handshake and frame reassembly above the stream).
 * Calls go one way: peer.c -> peer_tls.c -> peer_link.c (and peer.c ->
 * peer_link.c), never back. Only the Raft thread touches any of this.
 */
#ifndef TK_NET_PEER_INT_H
#define TK_NET_PEER_INT_H

#include <liburing.h>
#include <sys/socket.h>

#include "core/handshake.h"
#include "net/peer.h"
#include "net/resolve.h"
#include "net/stream.h"

#define LINKS_MAX 64 /* outbound + inbound links */
/* The table is split so that no kind of link can fill it: inbound links
 * still in their handshake, authenticated inbound links (each member
 * dials us once; an operator's ticketctl once more), and outbound links,
 * which the Raft thread opens only to --peers and configuration members
 * (raftd_send_msg) and prunes when they leave (tk_peers_prune). */
#define UNAUTH_MAX 16  /* inbound links still in their handshake */
#define INBOUND_MAX 24 /* authenticated inbound links */
/* Inbound links of every state, those closing (slot held until the
 * kernel hands the socket back) included: the budgets above plus slack. */
#define INBOUND_SLOTS (UNAUTH_MAX + INBOUND_MAX + 8)
#define OUTBOUND_MAX (LINKS_MAX - INBOUND_SLOTS)
_Static_assert(OUTBOUND_MAX >= TK_PEERS_MAX + TK_RAFT_MEMBERS_MAX,
               "room for --peers and a full configuration");
_Static_assert(LINKS_MAX <= TK_RESOLVE_JOBS_MAX, "a name lookup per link slot");
#define RECV_CHUNK (256u << 10)
#define IN_CAP_MAX (TK_WIRE_FRAME_MAX + TK_WIRE_LENGTH_LEN + RECV_CHUNK)
#define OUT_MAX (64u << 20) /* queued bytes per link before it is cut */
#define CONNECT_TIMEOUT_MS 1000
#define BACKOFF_MIN_US 100000u
#define BACKOFF_MAX_US 1000000u
/* Test hook (integration tests only): every name lookup first sleeps this
 * many milliseconds, as behind a slow cluster DNS. Read once at start. */
#define RESOLVE_DELAY_ENV "TK_TEST_RESOLVE_DELAY_MS"
/* Every TLS record, and so every TLS session, opens with this byte. */
#define TLS_RECORD_HANDSHAKE 0x16
/* Failure lines of peer links: a member misconfigured for good (another
 * CA, no TLS) is redialled every second for as long as it runs, so each
 * outbound link logs one line per window and all inbound links together
 * INBOUND_LOG_BURST; the next line says how many were not logged. */
#define LOG_WINDOW_US 10000000u
#define INBOUND_LOG_BURST 4u

/* L_RESOLVING: an outbound link waits for a resolver thread to look up
 * its name; nothing is in flight in the ring and no socket is open. */
enum { L_IDLE, L_RESOLVING, L_CONNECTING, L_BANNER, L_AUTH, L_OK, L_READY, L_CLOSING };

struct tk_plink {
    struct tk_stream st; /* the socket, TLS and buffers (net/stream.h) */
    uint32_t slot, gen;
    bool outbound;
    uint8_t state;
    bool recv_inflight, send_inflight, connect_inflight;
    bool resolve_inflight; /* a lookup of addr is queued or running (one at most) */
    bool resolve_failed;   /* the last lookup failed (logged once until one succeeds) */
    bool forget;           /* outbound: not wanted any more; freed once nothing is in flight */
    uint64_t active_us;    /* when its last bytes came in (an inbound link's age for eviction) */
    char addr[TK_ADDR_MAX];
    uint64_t remote_id;
    struct tk_hs hs;      /* the peer handshake (core/handshake.h) */
    uint64_t deadline_us; /* handshake deadline */
    uint64_t retry_at_us; /* outbound idle: next dial */
    uint64_t backoff_us;
    struct sockaddr_storage sa;
    socklen_t salen;
    bool tls_seen;            /* a byte was received (the first one checked) */
    bool cert_checked;        /* inbound: the certificate was found to name a member */
    struct tk_stream_log log; /* outbound: this link's failure lines */
};

struct tk_peers {
    struct tk_server *s;
    char self[TK_ADDR_MAX]; /* this node's peer address: what an AUTH must name */
    struct tk_peer_cb cb;
    struct io_uring ring;
    int listen_fd;
    int wake_fd;
    uint64_t wake_buf;
    struct tk_plink *links[LINKS_MAX];
    uint32_t gens[LINKS_MAX]; /* the last generation of each slot, kept across links */
    struct tk_deadlines hs;   /* handshake deadlines, connect included (net/stream.h) */
    struct __kernel_timespec connect_ts;
    struct tk_wire_scratch scratch;
    struct tk_peer_stats st;
    struct tk_accept accept;
    struct tk_resolver *resolver; /* created at the first name to look up */
    uint32_t resolve_delay_ms;
    /* With --tls-cert: contexts for the links opened from now on (a
     * reload replaces them; each link holds a reference to its own). */
    struct tk_tls_ctx *tls_server; /* accepted links: client certificate required */
    struct tk_tls_ctx *tls_client; /* dialled links: server verified, ours presented */
    struct tk_stream_log inbound_log;
};

/* Handshake lines and frames go out as plaintext through the stream. */
static inline void peer_send_line(struct tk_plink *l, const char *line, size_t n)
{
    tk_stream_write(&l->st, line, n);
}

/* net/peer_tls.c */
/* The link's TLS failed: a line naming the cause (why, or NULL for
 * core/tls's), counted, and the link closed. */
void peer_tls_failed(struct tk_peers *p, struct tk_plink *l, const char *why);
/* A link whose socket just connected (or was accepted) gets its TLS
 * state on the current context; a dialler writes its ClientHello. False
 * on allocation failure. */
bool peer_tls_begin(struct tk_peers *p, struct tk_plink *l);
/* n bytes were received at the tail of l->st.in: through the stream. */
void peer_recv(struct tk_peers *p, struct tk_plink *l, size_t n);
/* An inbound TLS link ended by its dialler before a byte came. */
void peer_tls_eof(struct tk_peers *p, struct tk_plink *l);
/* Both peer TLS contexts from the options; TK_EINVAL with why. */
int peer_tls_contexts(const struct tk_options *o,
                      struct tk_tls_ctx **server,
                      struct tk_tls_ctx **client,
                      char *why,
                      size_t cap);

/* net/peer_link.c */
/* One warning about a link that is being closed, rate-limited (see
 * LOG_WINDOW_US): "peer link to <dialled address>: ..." or "peer link from
 * <remote host:port>: ...". */
void peer_link_warn(struct tk_peers *p, struct tk_plink *l, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* An outbound link without a socket: dial again after the backoff. */
void peer_retry_later(struct tk_plink *l);
/* An outbound link's socket connected: its handshake begins, meant for
 * the address dialled. False without random bytes for a nonce. */
bool peer_hs_dial(struct tk_peers *p, struct tk_plink *l);
/* Parses what arrived: handshake lines first, then frames. */
void peer_input(struct tk_peers *p, struct tk_plink *l);

#endif
