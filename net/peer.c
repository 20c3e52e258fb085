/* Peer links of the Raft thread: io_uring connect/accept/recv/send, TLS
 * when configured, the peer handshake and frame reassembly; peer names are
 * looked up off the Raft thread by net/resolve.c. See net/peer.h.
 *
 * Bytes meet the socket in the link's stream (net/stream.h), plain or
 * TLS, as on the client port (net/conn.c): a recv lands in the free tail
 * of l->st.in; with TLS those bytes are ciphertext, which the stream's
 * input feeds to TLS and replaces with the plaintext it completes, so the
 * line and frame parser (link_input) sees only plaintext and needs no
 * second buffer. What the handshake and tk_peers_send() append to
 * l->st.out is plaintext; when the previous send is done, flush_link
 * hands it to the stream's output (one TLS write) and sends l->st.snd.
 * The TLS handshake comes first on a link: the dialler's connect completes
 * -> tls_begin() writes the ClientHello; the acceptor's banner, written at
 * accept as without TLS, is held inside TLS until the handshake is done,
 * and the banner/AUTH/OK exchange then runs inside TLS unchanged. The link
 * states do not change: a link handshaking TLS is in L_BANNER (dialler) or
 * L_AUTH (acceptor), so the handshake deadline and the budget of
 * unauthenticated inbound links cover TLS too. Without TLS (l->st.tls NULL)
 * every path is the one it always was. */
#include "net/peer.h"

#include <errno.h>
#include <liburing.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/auth.h"
#include "core/handshake.h"
#include "core/proto.h"
#include "core/tls.h"
#include "net/resolve.h"
#include "net/stream.h"
#include "net/uring.h"

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

static void arm_wake(struct tk_peers *p)
{
    struct io_uring_sqe *sqe = tk_uring_sqe(&p->ring);
    io_uring_prep_read(sqe, p->wake_fd, &p->wake_buf, sizeof(p->wake_buf), 0);
    io_uring_sqe_set_data64(sqe, tk_ud(OP_WAKE, 0, 0));
}

static void arm_accept(struct tk_peers *p)
{
    struct io_uring_sqe *sqe = tk_uring_sqe(&p->ring);
    io_uring_prep_multishot_accept(sqe, p->listen_fd, NULL, NULL, SOCK_CLOEXEC);
    io_uring_sqe_set_data64(sqe, tk_ud(OP_ACCEPT, 0, 0));
    p->accept.armed = true;
}

static void arm_recv(struct tk_peers *p, struct tk_plink *l)
{
    tk_sbuf_reserve(&l->st.in, RECV_CHUNK);
    struct io_uring_sqe *sqe = tk_uring_sqe(&p->ring);
    io_uring_prep_recv(sqe, l->st.fd, l->st.in.p + l->st.in.len, l->st.in.cap - l->st.in.len, 0);
    io_uring_sqe_set_data64(sqe, tk_ud(OP_RECV, l->slot, l->gen));
    l->recv_inflight = true;
}

static struct tk_plink *link_new(struct tk_peers *p, bool outbound)
{
    for (uint32_t i = 0; i < LINKS_MAX; i++) {
        if (p->links[i])
            continue;
        struct tk_plink *l = calloc(1, sizeof(*l));
        TK_ASSERT(l != NULL);
        l->slot = i;
        l->gen = p->gens[i] + 1; /* never a generation an earlier link of the slot had */
        if (l->gen == 0)
            l->gen = 1;
        l->st.fd = -1;
        l->st.type = &tk_stream_plain;
        l->outbound = outbound;
        l->backoff_us = BACKOFF_MIN_US;
        p->links[i] = l;
        return l;
    }
    return NULL;
}

static struct tk_plink *link_get(struct tk_peers *p, uint32_t slot, uint32_t gen)
{
    if (slot >= LINKS_MAX || !p->links[slot] || p->links[slot]->gen != gen)
        return NULL;
    return p->links[slot];
}

/* An outbound link without a socket: dial again after the backoff. */
static void link_retry_later(struct tk_plink *l)
{
    l->state = L_IDLE;
    l->retry_at_us = tk_now_us() + l->backoff_us;
    l->backoff_us = TK_MIN(l->backoff_us * 2, BACKOFF_MAX_US);
}

/* Stops using a link. Outbound links keep their slot and redial once the
 * kernel is done with the socket; inbound links are freed then. */
void tk_plink_close(struct tk_peers *p, struct tk_plink *l)
{
    if (l->state == L_CLOSING || l->state == L_IDLE)
        return;
    if (l->state == L_RESOLVING) {
        /* No socket yet. A lookup still running is collected later and
         * then only clears resolve_inflight. */
        p->st.links_closed++;
        link_retry_later(l);
        return;
    }
    l->state = L_CLOSING;
    p->st.links_closed++;
    if (l->st.fd >= 0)
        shutdown(l->st.fd, SHUT_RDWR);
    if (l->connect_inflight) {
        struct io_uring_sqe *sqe = tk_uring_sqe(&p->ring);
        io_uring_prep_cancel64(sqe, tk_ud(OP_CONNECT, l->slot, l->gen), 0);
        io_uring_sqe_set_data64(sqe, tk_ud(OP_CANCEL, 0, 0));
    }
}

/* Gives the slot back. An outbound link whose name lookup still runs
 * waits for it (the job is numbered by slot): resolve_done frees it. */
static void link_free(struct tk_peers *p, struct tk_plink *l)
{
    if (l->outbound && l->resolve_inflight) {
        l->state = L_IDLE;
        return;
    }
    p->links[l->slot] = NULL;
    p->gens[l->slot] = l->gen;
    tk_stream_free(&l->st);
    free(l);
}

static void link_finish_close(struct tk_peers *p, struct tk_plink *l)
{
    if (l->state != L_CLOSING || l->recv_inflight || l->send_inflight || l->connect_inflight)
        return;
    if (l->st.fd >= 0)
        close(l->st.fd);
    l->st.fd = -1;
    tk_stream_reset(&l->st); /* TLS freed, buffers kept for the redial */
    l->remote_id = 0;
    l->cert_checked = false;
    l->gen++;
    if (!l->outbound || l->forget) {
        link_free(p, l);
        return;
    }
    link_retry_later(l);
}

/* ------------------------------------------------------------------ */
/* Failure lines and TLS */

/* One warning about a link that is being closed, rate-limited (see
 * LOG_WINDOW_US): "peer link to <dialled address>: ..." or "peer link from
 * <remote host:port>: ...". */
static void link_warn(struct tk_peers *p, struct tk_plink *l, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void link_warn(struct tk_peers *p, struct tk_plink *l, const char *fmt, ...)
{
    struct tk_stream_log *ll = l->outbound ? &l->log : &p->inbound_log;
    uint32_t burst = l->outbound ? 1u : INBOUND_LOG_BURST, unlogged;
    if (!tk_stream_log_take(ll, tk_now_us(), LOG_WINDOW_US, burst, &unlogged))
        return;
    char what[2 * TK_TLS_ERR_MAX], who[TK_STREAM_NAME_MAX], more[64] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    if (unlogged)
        snprintf(more, sizeof(more), " (%u similar lines not logged)", unlogged);
    tk_log(TK_LOG_WARN, "peer link %s %s: %s%s", l->outbound ? "to" : "from",
           l->outbound ? l->addr : tk_stream_peer_name(l->st.fd, who, sizeof(who)), what, more);
}

/* Ciphertext TLS has pending (an alert, say) straight to the socket of a
 * link about to close, if no send is in flight: best effort, so the other
 * end learns why rather than only that the connection ended. */
static void tls_push_now(struct tk_plink *l)
{
    size_t n = 0;
    const uint8_t *c = tk_tls_pending(l->st.tls, &n);
    if (n == 0 || l->send_inflight || l->st.fd < 0)
        return;
    ssize_t w = send(l->st.fd, c, n, MSG_DONTWAIT | MSG_NOSIGNAL);
    (void)w;
    tk_tls_sent(l->st.tls, n);
}

/* The link's TLS failed (a certificate from another CA or none, a name
 * mismatch, a plaintext peer, a corrupt record): one line naming the cause
 * and the address, counted, and the link closed. why: our own sentence, or
 * NULL for core/tls's. */
static void tls_failed(struct tk_peers *p, struct tk_plink *l, const char *why)
{
    if (l->state == L_CLOSING)
        return;
    p->st.tls_failures++;
    const char *err = why ? why : tk_tls_error(l->st.tls);
    /* An alert is all this side learns when the other refused the
     * session; its log names the cause. */
    bool refused = !why && strstr(err, "received alert") != NULL;
    link_warn(p, l, "closed by a TLS failure: %s%s", err,
              refused ? " (the peer refused the session, most likely our certificate: its log "
                        "says why)"
                      : "");
    tls_push_now(l);
    tk_plink_close(p, l);
}

/* The name the dialled server's certificate must carry: the host part of
 * the peer address ("127.0.0.1", a pod's DNS name). wolfSSL checks it
 * against the certificate's DNS SANs (wildcards included) and, for an IP
 * literal, against its IP SANs, which it compares as text: IPv4 dotted as
 * written (checked with wolfSSL 5.5.4: a certificate without that IP SAN
 * is refused), IPv6 fully expanded to 8 groups of 4 hex digits, so an IPv6
 * literal is expanded here first. IP literals are therefore checked, not
 * skipped: members dialled by IP need an IP SAN, as with any TLS client. */
static void tls_name(const char *addr, char *out, size_t cap)
{
    char host[TK_ADDR_MAX];
    uint32_t port;
    if (tk_addr_split(addr, host, sizeof(host), &port) != TK_OK)
        snprintf(host, sizeof(host), "%s", addr);
    tk_tls_host_name(host, out, cap);
}

/* wolfSSL (built with FP_ECC) keeps an ECC point cache per thread, filled
 * by the handshakes a thread runs, that only that thread can free. The
 * Raft thread's is freed when it exits, by a thread-specific destructor,
 * so its owner (net/raftd.c) needs no TLS call of its own. */
static pthread_key_t tls_thread_key;
static pthread_once_t tls_thread_once = PTHREAD_ONCE_INIT;

static void tls_thread_end(void *unused)
{
    (void)unused;
    tk_tls_thread_done();
}

static void tls_thread_key_init(void)
{
    int rc = pthread_key_create(&tls_thread_key, tls_thread_end);
    TK_ASSERT(rc == 0);
}

/* The calling thread runs TLS: free its cache when it exits. */
static void tls_thread_mark(void)
{
    pthread_once(&tls_thread_once, tls_thread_key_init);
    if (!pthread_getspecific(tls_thread_key))
        pthread_setspecific(tls_thread_key, (void *)1);
}

/* Gives a link whose socket just connected (or was accepted) its TLS
 * state, on the current context. A dialler writes its ClientHello now.
 * False on allocation failure. */
static bool tls_begin(struct tk_peers *p, struct tk_plink *l)
{
    TK_ASSERT(l->st.tls == NULL);
    tls_thread_mark();
    l->tls_seen = false;
    struct tk_tls *tls;
    if (!l->outbound) {
        tls = tk_tls_new(p->tls_server, NULL);
    } else {
        char name[TK_ADDR_MAX];
        tls_name(l->addr, name, sizeof(name));
        tls = tk_tls_new(p->tls_client, name);
    }
    if (!tls)
        return false;
    tk_stream_open(&l->st, l->st.fd, tls);
    uint8_t none;
    size_t got;
    return !l->outbound || tk_tls_read(tls, &none, 0, &got) == TK_OK;
}

static void send_line(struct tk_plink *l, const char *line, size_t n)
{
    tk_stream_write(&l->st, line, n);
}

/* An inbound link's TLS is done: its certificate is signed by the peer
 * CA. With a CA of its own (--tls-peer-ca) that is all a peer needs;
 * with the CA shared with clients, the certificate must also name a
 * member (cb.peer_cert: the hosts of --peers and the configuration, and
 * --tls-peer-names), so a client's certificate does not open the peer
 * port. Checked before any line is read or written: the banner follows. */
static void tls_check_peer(struct tk_peers *p, struct tk_plink *l)
{
    l->cert_checked = true;
    if (p->s->opt.tls_peer_ca[0] || !p->cb.peer_cert || p->cb.peer_cert(p->cb.ctx, l->st.tls)) {
        char line[TK_HS_LINE_MAX]; /* the banner, held back until now (on_accept) */
        send_line(l, line, tk_proto_fmt_banner(line, sizeof(line), true, l->hs.snonce));
        return;
    }
    p->st.certs_refused++;
    tls_failed(p, l,
               "its certificate names no member (neither a host of --peers or the "
               "configuration nor one of --tls-peer-names): a client's certificate, not a "
               "peer's? Give the peer port a CA of its own with --tls-peer-ca");
}

/* n bytes were received at the tail of l->st.in: through the stream (with
 * TLS, ciphertext fed to TLS and the plaintext it completes written in
 * their place). l->st.in stays bounded as without TLS (link_input cuts
 * the link past IN_CAP_MAX - RECV_CHUNK), overshot by one record at most. */
static void link_recv(struct tk_peers *p, struct tk_plink *l, size_t n)
{
    const char *data = l->st.in.p + l->st.in.len;
    if (!l->st.tls) {
        l->st.type->input(&l->st, data, n, 0);
        return;
    }
    bool first = !l->tls_seen;
    l->tls_seen = true;
    if (l->outbound && first) {
        /* A server speaks first only without TLS (its banner): say so
         * rather than what the record parser would make of it. */
        if ((unsigned char)data[0] != TLS_RECORD_HANDSHAKE) {
            char why[200];
            snprintf(why, sizeof(why),
                     "the peer answered in plaintext (first byte 0x%02x, not a TLS record): it "
                     "runs without TLS on its peer port, and every member needs --tls-cert, "
                     "--tls-key and --tls-ca",
                     (unsigned char)data[0]);
            tls_failed(p, l, why);
            return;
        }
    }
    int rc = l->st.type->input(&l->st, data, n, 0);
    if (rc == TK_ECLOSED) /* close_notify: as an end of stream */
        tk_plink_close(p, l);
    else if (rc != TK_OK)
        tls_failed(p, l, NULL);
    else if (!l->outbound && !l->cert_checked && tk_tls_ready(l->st.tls))
        tls_check_peer(p, l);
}

/* An inbound TLS link ended by its dialler before a single byte came:
 * after a second or more that is what a member without TLS does (it waits
 * for a plaintext banner until its own handshake deadline, then gives up),
 * so say so; a quicker close (a port probe) goes unremarked. Counted as a
 * TLS failure: the link failed before TLS could start. */
static void tls_eof(struct tk_peers *p, struct tk_plink *l)
{
    uint64_t hs_us = (uint64_t)p->s->opt.handshake_ms * 1000u;
    uint64_t age_us = tk_now_us() + hs_us - l->deadline_us;
    if (l->outbound || l->tls_seen || l->state != L_AUTH || age_us < 1000000u)
        return;
    p->st.tls_failures++;
    link_warn(p, l,
              "closed by the peer after %llu ms without a TLS hello (a member without "
              "--tls-cert dials in plaintext and waits for a banner)",
              (unsigned long long)(age_us / 1000u));
}

/* Both contexts from the options: an acceptor that requires a client
 * certificate signed by --tls-ca, and a dialler that verifies the server
 * with it and presents --tls-cert. TK_OK, or TK_EINVAL with why naming the
 * file and the cause. */
static int tls_contexts(const struct tk_options *o,
                        struct tk_tls_ctx **server,
                        struct tk_tls_ctx **client,
                        char *why,
                        size_t cap)
{
    *server = *client = NULL;
    const char *ca = o->tls_peer_ca[0] ? o->tls_peer_ca : o->tls_ca;
    const char *cert = o->tls_peer_cert[0] ? o->tls_peer_cert : o->tls_cert;
    const char *key = o->tls_peer_cert[0] ? o->tls_peer_key : o->tls_key;
    if (!ca[0]) {
        snprintf(why, cap,
                 "--tls-ca (or --tls-peer-ca) is required with --tls-cert on a cluster member: "
                 "peers verify each other's certificates with it");
        return TK_EINVAL;
    }
    struct tk_tls_opts so = {
        .server = true, .cert = cert, .key = key, .ca = ca, .verify_peer = true};
    struct tk_tls_opts co = {.cert = cert, .key = key, .ca = ca};
    int rc = tk_tls_ctx_new(&so, server, why, cap);
    if (rc == TK_OK && (rc = tk_tls_ctx_new(&co, client, why, cap)) != TK_OK) {
        tk_tls_ctx_unref(*server);
        *server = NULL;
    }
    return rc == TK_OK ? TK_OK : TK_EINVAL;
}

int tk_peers_tls_reload(struct tk_peers *p)
{
    if (!p->tls_server)
        return TK_OK;
    struct tk_tls_ctx *server, *client;
    char why[TK_TLS_ERR_MAX];
    tls_thread_mark(); /* the contexts' self check runs a handshake here */
    if (tls_contexts(&p->s->opt, &server, &client, why, sizeof(why)) != TK_OK) {
        tk_log(TK_LOG_ERROR, "peer TLS reload failed, keeping the previous certificates: %s", why);
        return TK_EINVAL;
    }
    tk_tls_ctx_unref(p->tls_server); /* open links keep theirs alive */
    tk_tls_ctx_unref(p->tls_client);
    p->tls_server = server;
    p->tls_client = client;
    tk_log(TK_LOG_INFO, "peer TLS: reloaded %s for new peer links", p->s->opt.tls_cert);
    return TK_OK;
}

/* ------------------------------------------------------------------ */
/* Name lookups off the Raft thread */

static void connect_start(struct tk_peers *p, struct tk_plink *l);

/* Queues a lookup of the link's address (net/resolve.h), the pool made
 * at the first name to look up; the link must have none outstanding. */
static int resolve_submit(struct tk_peers *p, struct tk_plink *l, const char *host, uint32_t port)
{
    if (!p->resolver) {
        p->resolver = tk_resolver_create(p->wake_fd, p->resolve_delay_ms);
        if (!p->resolver)
            return TK_ENOMEM;
    }
    return tk_resolver_submit(p->resolver, l->slot, host, port);
}

/* A lookup finished (tk_resolver_collect): connects the link if it still
 * waits for it. */
static void resolve_done(void *ctx,
                         uint32_t slot,
                         int rc,
                         const struct sockaddr_storage *sa,
                         socklen_t salen)
{
    struct tk_peers *p = ctx;
    struct tk_plink *l = p->links[slot];
    TK_ASSERT(l && l->outbound && l->resolve_inflight);
    l->resolve_inflight = false;
    if (l->forget) {
        link_free(p, l);
        return;
    }
    if (l->state != L_RESOLVING)
        return; /* closed meanwhile: its next dial looks up again */
    if (rc != TK_OK) {
        if (!l->resolve_failed)
            tk_log(TK_LOG_WARN, "peer %s: name lookup failed; retrying", l->addr);
        l->resolve_failed = true;
        p->st.resolve_failures++;
        link_retry_later(l);
        return;
    }
    if (l->resolve_failed)
        tk_log(TK_LOG_INFO, "peer %s: name resolves again", l->addr);
    l->resolve_failed = false;
    memcpy(&l->sa, sa, salen);
    l->salen = salen;
    connect_start(p, l); /* only prepares SQEs: fine under the pool's lock */
}

/* Opens the socket and queues the connect to l->sa. */
static void connect_start(struct tk_peers *p, struct tk_plink *l)
{
    l->st.fd = socket(l->sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (l->st.fd < 0) {
        l->state = L_IDLE;
        l->retry_at_us = tk_now_us() + BACKOFF_MAX_US;
        return;
    }
    int one = 1;
    setsockopt(l->st.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    l->state = L_CONNECTING;
    l->deadline_us = tk_now_us() + (uint64_t)p->s->opt.handshake_ms * 1000u;
    tk_deadlines_push(&p->hs, l->slot, l->gen, l->deadline_us);
    struct io_uring_sqe *sqe = tk_uring_sqe(&p->ring);
    io_uring_prep_connect(sqe, l->st.fd, (struct sockaddr *)&l->sa, l->salen);
    io_uring_sqe_set_data64(sqe, tk_ud(OP_CONNECT, l->slot, l->gen));
    sqe->flags |= IOSQE_IO_LINK;
    sqe = tk_uring_sqe(&p->ring);
    io_uring_prep_link_timeout(sqe, &p->connect_ts, 0);
    io_uring_sqe_set_data64(sqe, tk_ud(OP_TIMEOUT, 0, 0));
    l->connect_inflight = true;
}

/* Every (re)dial looks the name up again, so a peer whose address changed
 * (a rescheduled pod) is found at its new one. Names go to a resolver
 * thread and the link waits in L_RESOLVING; the Raft thread never blocks
 * on DNS. Numeric addresses connect at once. */
static void dial(struct tk_peers *p, struct tk_plink *l)
{
    TK_ASSERT(l->outbound && l->state == L_IDLE);
    p->st.dials++;
    char host[TK_ADDR_MAX];
    uint32_t port;
    if (tk_addr_split(l->addr, host, sizeof(host), &port) != TK_OK) {
        link_retry_later(l);
        return;
    }
    if (tk_resolve_numeric(host, port, &l->sa, &l->salen)) {
        connect_start(p, l);
        return;
    }
    p->st.resolves++;
    l->state = L_RESOLVING;
    /* A lookup from an earlier dial still running serves this one. */
    if (l->resolve_inflight)
        return;
    if (resolve_submit(p, l, host, port) != TK_OK) {
        link_retry_later(l);
        return;
    }
    l->resolve_inflight = true;
}

struct tk_plink *tk_peers_find(struct tk_peers *p, const char *addr)
{
    for (uint32_t i = 0; i < LINKS_MAX; i++) {
        struct tk_plink *l = p->links[i];
        if (l && l->outbound && !l->forget && !strcmp(l->addr, addr))
            return l;
    }
    return NULL;
}

struct tk_plink *tk_peers_dial(struct tk_peers *p, const char *addr)
{
    struct tk_plink *l = tk_peers_find(p, addr);
    if (l)
        return l;
    uint32_t outbound = 0;
    for (uint32_t i = 0; i < LINKS_MAX; i++)
        outbound += p->links[i] && p->links[i]->outbound;
    if (outbound >= OUTBOUND_MAX) {
        p->st.dials_refused++; /* the caller's policy should make this impossible */
        return NULL;
    }
    l = link_new(p, true);
    TK_ASSERT(l != NULL); /* the other kinds leave OUTBOUND_MAX slots */
    snprintf(l->addr, sizeof(l->addr), "%s", addr);
    dial(p, l);
    return l;
}

/* Stops using an outbound link for good: closed if open, its slot freed
 * once the kernel and the resolver are done with it. */
static void link_forget(struct tk_peers *p, struct tk_plink *l)
{
    TK_ASSERT(l->outbound);
    l->forget = true;
    p->st.links_evicted++;
    if (l->state == L_IDLE || l->state == L_RESOLVING)
        link_free(p, l); /* no socket: nothing in flight but maybe a lookup */
    else
        tk_plink_close(p, l);
}

unsigned tk_peers_prune(struct tk_peers *p, bool (*keep)(void *ctx, const char *addr), void *ctx)
{
    unsigned n = 0;
    for (uint32_t i = 0; i < LINKS_MAX; i++) {
        struct tk_plink *l = p->links[i];
        if (l && l->outbound && !l->forget && !keep(ctx, l->addr)) {
            tk_log(TK_LOG_INFO,
                   "peer link to %s closed: not a member of --peers or the "
                   "configuration",
                   l->addr);
            link_forget(p, l);
            n++;
        }
    }
    return n;
}

/* An inbound link finished its handshake: if the authenticated inbound
 * links are now over INBOUND_MAX, the one quiet the longest goes. A
 * member's link carries a heartbeat every --heartbeat-ms, so only idle
 * links (a prober's, a stale operator's) are old; the member redials if
 * it was one of its. */
static void inbound_budget(struct tk_peers *p, const struct tk_plink *fresh)
{
    uint32_t n = 0;
    struct tk_plink *idle = NULL;
    for (uint32_t i = 0; i < LINKS_MAX; i++) {
        struct tk_plink *l = p->links[i];
        if (!l || l->outbound || l->state != L_READY)
            continue;
        n++;
        if (l != fresh && (!idle || l->active_us < idle->active_us))
            idle = l;
    }
    if (n > INBOUND_MAX && idle) {
        p->st.inbound_evicted++;
        link_warn(p, idle,
                  "closed: more than %u authenticated peer links; this one was idle "
                  "the longest",
                  INBOUND_MAX);
        tk_plink_close(p, idle);
    }
}

bool tk_plink_ready(const struct tk_plink *l)
{
    return l && l->state == L_READY;
}

void tk_plink_mac(const struct tk_plink *l,
                  const char *label,
                  const void *data,
                  size_t len,
                  uint8_t out[TK_AUTH_MAC_LEN])
{
    TK_ASSERT(l->state == L_READY);
    tk_hs_mac(&l->hs, label, data, len, out);
}

uint64_t tk_plink_remote_id(const struct tk_plink *l)
{
    return l->remote_id;
}

const char *tk_plink_addr(const struct tk_plink *l)
{
    return l->addr;
}

bool tk_peers_send(struct tk_peers *p, struct tk_plink *l, const struct tk_wire_frame *f)
{
    if (!tk_plink_ready(l)) {
        p->st.frames_dropped++;
        return false;
    }
    size_t n = tk_wire_encoded_len(f);
    if (l->st.out.len + tk_stream_unsent(&l->st) + n > OUT_MAX) {
        /* The peer does not keep up: cut the link rather than queue without
         * bound; Raft resends from the follower's match index later. */
        p->st.frames_dropped++;
        tk_plink_close(p, l);
        return false;
    }
    tk_sbuf_reserve(&l->st.out, n);
    size_t w =
        tk_wire_encode(f, (uint8_t *)l->st.out.p + l->st.out.len, l->st.out.cap - l->st.out.len);
    TK_ASSERT(w == n);
    l->st.out.len += (uint32_t)n;
    p->st.frames_out++;
    return true;
}

/* ------------------------------------------------------------------ */
/* Handshake (SPEC 2 with the peer secret: TICKETING-PEER/2, core/handshake.h) */

/* Failed logins on the peer port: a few lines a second at most. */
static struct tk_log_limit auth_log = TK_LOG_LIMIT_INIT;

/* The handshake failed for the reason why: counted, logged (an inbound
 * link's rate-limited, with the dialler's address), the link closed; tell
 * sends the dialler "E - auth" first. */
static void hs_fail(struct tk_peers *p, struct tk_plink *l, bool tell, const char *why)
{
    p->st.auth_failures++;
    if (tell) {
        static const char e[] = "E - auth\n";
        if (l->st.tls) { /* inside TLS, like every other line */
            if (tk_tls_write(l->st.tls, e, sizeof(e) - 1) == TK_OK)
                tls_push_now(l);
        } else {
            ssize_t w = send(l->st.fd, e, sizeof(e) - 1, MSG_DONTWAIT | MSG_NOSIGNAL);
            (void)w;
        }
    }
    if (l->outbound) {
        tk_log(TK_LOG_WARN, "peer handshake failed on outbound link %s: %s", l->addr, why);
    } else {
        char who[TK_STREAM_NAME_MAX];
        tk_log_limited(&auth_log, TK_LOG_WARN, "auth failed from %s (peer port): %s",
                       tk_stream_peer_name(l->st.fd, who, sizeof(who)), why);
    }
    tk_plink_close(p, l);
}

/* One handshake line, through core/handshake.c. On a TLS link the proofs
 * cover the session's channel binding, taken before the first line (the
 * lines come only once TLS is done). */
static void hs_line(struct tk_peers *p, struct tk_plink *l, const char *line, size_t len)
{
    struct tk_server *s = p->s;
    if (l->st.tls && l->hs.binding[0] == '-') {
        uint8_t b[TK_TLS_BINDING_LEN];
        if (tk_tls_channel_binding(l->st.tls, b) != TK_OK) {
            hs_fail(p, l, false, "no TLS channel binding to bind the proof to");
            return;
        }
        tk_hs_bind(&l->hs, b);
    }
    if (!l->outbound) { /* the OK line carries what this node is now */
        l->hs.node_id = s->node_id;
        l->hs.domain[0] = atomic_load(&s->domain_lo);
        l->hs.domain[1] = atomic_load(&s->domain_hi);
    }
    char out[TK_HS_LINE_MAX];
    size_t n = 0;
    enum tk_hs_state st = tk_hs_line(&l->hs, line, len, out, sizeof(out), &n);
    if (st == TK_HS_FAILED) {
        hs_fail(p, l, l->hs.tell, tk_hs_why(&l->hs));
        return;
    }
    if (n)
        send_line(l, out, n);
    if (st == TK_HS_OK) {
        l->state = L_OK;
    } else if (st == TK_HS_DONE) {
        if (l->outbound) {
            l->remote_id = l->hs.node_id;
            l->backoff_us = BACKOFF_MIN_US;
        }
        l->state = L_READY;
        p->st.handshakes++;
        if (!l->outbound)
            inbound_budget(p, l);
    }
}

/* An outbound link's socket connected: its handshake begins, meant for
 * the address dialled. */
static bool hs_dial(struct tk_peers *p, struct tk_plink *l)
{
    char cnonce[TK_AUTH_HEX_LEN + 1];
    if (tk_auth_nonce(cnonce) != TK_OK)
        return false;
    tk_hs_dial(&l->hs, p->s->peer_secret, p->s->peer_secret_len, l->addr, cnonce);
    return true;
}

/* Parses what arrived: handshake lines first, then frames. */
static void link_input(struct tk_peers *p, struct tk_plink *l)
{
    size_t pos = 0;
    const uint8_t *in = (const uint8_t *)l->st.in.p;
    while (pos < l->st.in.len && l->state != L_CLOSING) {
        if (l->state != L_READY) {
            if (l->state == L_AUTH && pos == 0 && !l->st.tls && in[0] == TLS_RECORD_HANDSHAKE) {
                /* A dialler that opens with a TLS record (AUTH opens with
                 * 'A'): it runs with TLS and this node without. */
                p->st.tls_failures++;
                link_warn(p, l,
                          "closed: the peer speaks TLS but this node's peer port is plaintext "
                          "(every member needs --tls-cert, --tls-key and --tls-ca)");
                tk_plink_close(p, l);
                break;
            }
            const uint8_t *nl =
                memchr(in + pos, '\n', TK_MIN(l->st.in.len - pos, (size_t)TK_LINE_MAX));
            if (!nl) {
                if (l->st.in.len - pos >= TK_LINE_MAX)
                    hs_fail(p, l, l->state == L_AUTH, "handshake line too long");
                break;
            }
            size_t len = (size_t)(nl - (in + pos));
            hs_line(p, l, (const char *)in + pos, len);
            pos += len + 1;
            continue;
        }
        size_t flen = 0;
        if (tk_wire_frame_len(in + pos, l->st.in.len - pos, &flen) != TK_OK) {
            tk_log(TK_LOG_WARN, "peer frame too large or malformed; closing link");
            p->st.frames_malformed++;
            tk_plink_close(p, l);
            break;
        }
        if (flen > (size_t)p->s->opt.max_frame_bytes + TK_WIRE_LENGTH_LEN) {
            tk_log(TK_LOG_WARN, "peer frame of %zu bytes over --max-frame-bytes; closing link",
                   flen);
            p->st.frames_oversize++;
            tk_plink_close(p, l);
            break;
        }
        if (flen == 0 || l->st.in.len - pos < flen)
            break;
        struct tk_wire_frame f;
        if (tk_wire_decode(in + pos, flen, &f, &p->scratch) != TK_OK) {
            tk_log(TK_LOG_WARN, "malformed peer frame; closing link");
            p->st.frames_malformed++;
            tk_plink_close(p, l);
            break;
        }
        p->st.frames_in++;
        pos += flen;
        p->cb.frame(p->cb.ctx, l, &f);
    }
    if (l->state == L_CLOSING) {
        l->st.in.len = 0;
        return;
    }
    if (pos) {
        memmove(l->st.in.p, l->st.in.p + pos, l->st.in.len - pos);
        l->st.in.len -= (uint32_t)pos;
    }
    if (l->st.in.len >= IN_CAP_MAX - RECV_CHUNK) {
        tk_plink_close(p, l);
    }
}

/* A link whose deadline counts: connecting or in its handshake. */
static bool link_handshaking(void *ctx, uint32_t slot, uint32_t gen)
{
    struct tk_plink *l = link_get(ctx, slot, gen);
    return l && (l->state == L_CONNECTING || l->state == L_BANNER || l->state == L_AUTH ||
                 l->state == L_OK);
}

static bool unauth_evict(void *ctx, uint32_t slot, uint32_t gen)
{
    struct tk_peers *p = ctx;
    struct tk_plink *l = link_get(p, slot, gen);
    if (l->outbound || l->state != L_AUTH)
        return false;
    p->st.handshakes_evicted++;
    tk_plink_close(p, l);
    return true;
}

/* Inbound links that have not authenticated get 16 of the 64 slots at
 * most: when they are full the oldest goes (net/stream.h), so sockets
 * that never authenticate cannot keep real peers (or a joining member)
 * out. */
static void unauth_budget(struct tk_peers *p)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < LINKS_MAX; i++) {
        struct tk_plink *l = p->links[i];
        n += l && !l->outbound && l->state == L_AUTH;
    }
    tk_deadlines_budget(&p->hs, n, UNAUTH_MAX, unauth_evict);
}

/* A link did not connect or finish its handshake in time. */
static void link_timeout(void *ctx, uint32_t slot, uint32_t gen)
{
    struct tk_peers *p = ctx;
    struct tk_plink *l = link_get(p, slot, gen);
    p->st.handshake_timeouts++;
    if (l->st.tls && !tk_tls_ready(l->st.tls))
        link_warn(p, l, "closed: no TLS handshake within %u ms%s", p->s->opt.handshake_ms,
                  l->outbound || l->tls_seen
                      ? ""
                      : " (a member without --tls-cert dials in plaintext and waits for a banner)");
    tk_plink_close(p, l);
}

static void on_accept(struct tk_peers *p, int fd)
{
    unauth_budget(p);
    uint32_t inbound = 0;
    for (uint32_t i = 0; i < LINKS_MAX; i++)
        inbound += p->links[i] && !p->links[i]->outbound;
    /* Full of links still closing (a flood): refused; a member redials. */
    struct tk_plink *l = inbound < INBOUND_SLOTS ? link_new(p, false) : NULL;
    if (!l) {
        p->st.accepts_refused++;
        close(fd);
        return;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    l->st.fd = fd;
    l->state = L_AUTH;
    l->deadline_us = tk_now_us() + (uint64_t)p->s->opt.handshake_ms * 1000u;
    tk_deadlines_push(&p->hs, l->slot, l->gen, l->deadline_us);
    char snonce[TK_AUTH_HEX_LEN + 1];
    if (tk_auth_nonce(snonce) != TK_OK || (p->tls_server && !tls_begin(p, l))) {
        tk_plink_close(p, l);
        link_finish_close(p, l); /* nothing in flight: frees it */
        return;
    }
    /* With TLS the banner waits for the TLS handshake and the check of the
     * dialler's certificate (tls_check_peer): a certificate that is not a
     * peer's learns nothing, not even a nonce. */
    char line[TK_HS_LINE_MAX];
    size_t n = tk_hs_listen(&l->hs, p->s->peer_secret, p->s->peer_secret_len, p->self, snonce, line,
                            sizeof(line));
    if (!l->st.tls)
        send_line(l, line, n);
    arm_recv(p, l);
}

static void handle_cqe(struct tk_peers *p, struct io_uring_cqe *cqe)
{
    struct tk_ref ud = tk_ref_unpack(io_uring_cqe_get_data64(cqe));
    enum tk_op op = (enum tk_op)ud.tag;
    uint32_t slot = ud.slot, gen = ud.gen;
    struct tk_plink *l = NULL;
    if (op == OP_CONNECT || op == OP_RECV || op == OP_SEND) {
        l = link_get(p, slot, gen);
        TK_ASSERT(l != NULL);
    }
    switch (op) {
        case OP_ACCEPT:
            if (cqe->res >= 0)
                on_accept(p, cqe->res);
            tk_accept_done(&p->accept, cqe->res, cqe->flags & IORING_CQE_F_MORE, tk_now_us(),
                           "peer port");
            break;
        case OP_CONNECT:
            l->connect_inflight = false;
            if (l->state != L_CONNECTING) {
                link_finish_close(p, l);
            } else if (cqe->res < 0) {
                l->state = L_CLOSING;
                link_finish_close(p, l);
            } else if (p->tls_client && !tls_begin(p, l)) {
                link_warn(p, l, "cannot start TLS (out of memory)");
                tk_plink_close(p, l);
                link_finish_close(p, l);
            } else if (!hs_dial(p, l)) {
                link_warn(p, l, "no random bytes for a handshake nonce");
                tk_plink_close(p, l);
                link_finish_close(p, l);
            } else {
                l->state = L_BANNER; /* with TLS: the TLS handshake first */
                arm_recv(p, l);
            }
            break;
        case OP_RECV:
            l->recv_inflight = false;
            if (cqe->res <= 0 || l->state == L_CLOSING) {
                if (cqe->res == 0 && l->st.tls)
                    tls_eof(p, l);
                tk_plink_close(p, l);
                link_finish_close(p, l);
                break;
            }
            p->st.bytes_in += (uint64_t)cqe->res;
            l->active_us = tk_now_us();
            link_recv(p, l, (size_t)cqe->res);
            link_input(p, l);
            if (l->state != L_CLOSING)
                arm_recv(p, l);
            else
                link_finish_close(p, l);
            break;
        case OP_SEND:
            l->send_inflight = false;
            if (cqe->res < 0) {
                tk_plink_close(p, l);
                link_finish_close(p, l);
                break;
            }
            tk_stream_sent(&l->st, (size_t)cqe->res);
            p->st.bytes_out += (uint64_t)cqe->res;
            link_finish_close(p, l);
            break;
        case OP_WAKE:
            arm_wake(p);
            break;
        default:
            break; /* link timeouts and cancels need nothing */
    }
}

static void flush_link(struct tk_peers *p, struct tk_plink *l)
{
    if (l->send_inflight || l->st.fd < 0 || l->state == L_CLOSING || l->state == L_CONNECTING)
        return;
    if (l->st.snd.len == 0 && l->st.type->output(&l->st) != TK_OK) {
        tls_failed(p, l, NULL);
        return;
    }
    if (tk_stream_unsent(&l->st) > 0) {
        struct io_uring_sqe *sqe = tk_uring_sqe(&p->ring);
        io_uring_prep_send(sqe, l->st.fd, l->st.snd.p + l->st.snd_off, tk_stream_unsent(&l->st),
                           MSG_NOSIGNAL);
        io_uring_sqe_set_data64(sqe, tk_ud(OP_SEND, l->slot, l->gen));
        l->send_inflight = true;
    }
}

static unsigned peers_run(struct tk_peers *p, uint64_t timeout_us, bool enter)
{
    tk_resolver_collect(p->resolver, p, resolve_done);
    uint64_t now = tk_now_us();
    if (tk_accept_due(&p->accept, now) && !atomic_load(&p->s->stopping))
        arm_accept(p);
    tk_deadlines_expire(&p->hs, now, link_timeout);
    for (uint32_t i = 0; i < LINKS_MAX; i++) {
        struct tk_plink *l = p->links[i];
        if (l && l->state == L_IDLE && l->outbound && !l->forget && now >= l->retry_at_us)
            dial(p, l);
        if (p->links[i])
            flush_link(p, p->links[i]);
    }
    struct __kernel_timespec ts = {.tv_sec = (long long)(timeout_us / 1000000u),
                                   .tv_nsec = (long long)(timeout_us % 1000000u) * 1000};
    struct io_uring_cqe *cqe = NULL;
    if (timeout_us)
        io_uring_submit_and_wait_timeout(&p->ring, &cqe, 1, &ts, NULL);
    else if (enter)
        io_uring_submit_and_get_events(&p->ring);
    else
        io_uring_submit(&p->ring); /* enters the kernel only if something is queued */
    if (enter && p->cb.woke)
        p->cb.woke(p->cb.ctx);
    unsigned head, n = 0;
    io_uring_for_each_cqe(&p->ring, head, cqe)
    {
        handle_cqe(p, cqe);
        n++;
    }
    io_uring_cq_advance(&p->ring, n);
    return n;
}

unsigned tk_peers_run(struct tk_peers *p, uint64_t timeout_us)
{
    return peers_run(p, timeout_us, true);
}

unsigned tk_peers_reap(struct tk_peers *p)
{
    return peers_run(p, 0, false);
}

void tk_peers_submit(struct tk_peers *p)
{
    for (uint32_t i = 0; i < LINKS_MAX; i++)
        if (p->links[i])
            flush_link(p, p->links[i]);
    io_uring_submit(&p->ring);
}

int tk_peers_ring_fd(const struct tk_peers *p)
{
    return p->ring.ring_fd;
}

int tk_peers_create(struct tk_server *s,
                    const char *self,
                    const struct tk_peer_cb *cb,
                    int wake_fd,
                    struct tk_peers **out)
{
    TK_ASSERT(strlen(self) >= 1 && strlen(self) <= TK_HS_ADDR_MAX);
    struct tk_peers *p = calloc(1, sizeof(*p));
    if (!p)
        return TK_ENOMEM;
    p->s = s;
    snprintf(p->self, sizeof(p->self), "%s", self);
    p->cb = *cb;
    p->wake_fd = wake_fd;
    p->listen_fd = -1;
    p->connect_ts.tv_sec = CONNECT_TIMEOUT_MS / 1000;
    p->connect_ts.tv_nsec = (CONNECT_TIMEOUT_MS % 1000) * 1000000;
    p->scratch.entries = calloc(TK_WIRE_ENTRIES_MAX, sizeof(struct tk_raft_entry));
    p->scratch.entries_cap = TK_WIRE_ENTRIES_MAX;
    if (!p->scratch.entries || tk_deadlines_init(&p->hs, LINKS_MAX, p, link_handshaking) != TK_OK) {
        free(p->scratch.entries);
        tk_deadlines_free(&p->hs);
        free(p);
        return TK_ENOMEM;
    }
    if (s->opt.tls_cert[0]) {
        char why[TK_TLS_ERR_MAX];
        if (tls_contexts(&s->opt, &p->tls_server, &p->tls_client, why, sizeof(why)) != TK_OK) {
            tk_log(TK_LOG_ERROR, "peer TLS: %s", why);
            free(p->scratch.entries);
            tk_deadlines_free(&p->hs);
            free(p);
            return TK_EINVAL;
        }
    }
    /* COOP_TASKRUN: a completion does not interrupt the thread while it
     * runs (no inter-processor interrupt, which is dear in a VM); it is
     * handled at the thread's next entry into the kernel, and a thread
     * asleep is still woken. TASKRUN_FLAG tells liburing when such work
     * waits, so a submit enters the kernel for it. */
    int rc =
        io_uring_queue_init(512, &p->ring, IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG);
    if (rc < 0)
        rc = io_uring_queue_init(512, &p->ring, 0);
    if (rc < 0) {
        tk_log(TK_LOG_ERROR, "raft: io_uring setup failed: %s", strerror(-rc));
        tk_tls_ctx_unref(p->tls_server);
        tk_tls_ctx_unref(p->tls_client);
        free(p->scratch.entries);
        tk_deadlines_free(&p->hs);
        free(p);
        return TK_EUNSUPPORTED;
    }
    p->listen_fd = tk_listen(s->opt.bind, s->opt.peer_port, TK_LISTEN_ALONE);
    if (p->listen_fd < 0) {
        tk_log(TK_LOG_ERROR, "cannot listen on peer port %s:%u: %s", s->opt.bind, s->opt.peer_port,
               strerror(errno));
        io_uring_queue_exit(&p->ring);
        tk_tls_ctx_unref(p->tls_server);
        tk_tls_ctx_unref(p->tls_client);
        free(p->scratch.entries);
        tk_deadlines_free(&p->hs);
        free(p);
        return TK_EIO;
    }
    if (p->tls_server)
        tk_log(TK_LOG_INFO, "peer port: mutual TLS (certificate %s, peers verified with %s)",
               s->opt.tls_cert, s->opt.tls_ca);
    const char *delay = getenv(RESOLVE_DELAY_ENV);
    if (delay && *delay) {
        p->resolve_delay_ms = (uint32_t)strtoul(delay, NULL, 10);
        tk_log(TK_LOG_WARN, "%s=%u: every peer name lookup is delayed (a test hook)",
               RESOLVE_DELAY_ENV, p->resolve_delay_ms);
    }
    arm_accept(p);
    arm_wake(p);
    *out = p;
    return TK_OK;
}

void tk_peers_destroy(struct tk_peers *p)
{
    if (!p)
        return;
    tk_resolver_release(p->resolver);
    for (uint32_t i = 0; i < LINKS_MAX; i++) {
        struct tk_plink *l = p->links[i];
        if (!l)
            continue;
        if (l->st.fd >= 0)
            close(l->st.fd);
        tk_stream_free(&l->st);
        free(l);
    }
    tk_tls_ctx_unref(p->tls_server);
    tk_tls_ctx_unref(p->tls_client);
    io_uring_queue_exit(&p->ring);
    if (p->listen_fd >= 0)
        close(p->listen_fd);
    free(p->scratch.entries);
    tk_deadlines_free(&p->hs);
    free(p);
}

void tk_peers_stats(const struct tk_peers *p, struct tk_peer_stats *st)
{
    *st = p->st;
    st->accept_errors = p->accept.errors;
}
