/* Peer links of the Raft thread: their lifecycle over io_uring (dial,
 * connect, accept, recv, send, close, redial with backoff), the link
 * table and its budgets, the handshake deadlines, and the ring's loop.
 * TLS on a link is net/peer_tls.c, the handshake and frames above the
 * stream net/peer_link.c; peer names are looked up off the Raft thread by
 * net/resolve.c. See net/peer.h.
 *
 * Bytes meet the socket in the link's stream (net/stream.h), plain or
 * TLS, as on the client port (net/conn.c): a recv lands in the free tail
 * of l->st.in; with TLS those bytes are ciphertext, which the stream's
 * input feeds to TLS and replaces with the plaintext it completes, so the
 * line and frame parser (peer_input) sees only plaintext and needs no
 * second buffer. What the handshake and tk_peers_send() append to
 * l->st.out is plaintext; when the previous send is done, flush_link
 * hands it to the stream's output (one TLS write) and sends l->st.snd.
 * The TLS handshake comes first on a link: the dialler's connect completes
 * -> peer_tls_begin() writes the ClientHello; the acceptor's banner,
 * written at accept as without TLS, is held inside TLS until the
 * handshake is done, and the banner/AUTH/OK exchange then runs inside TLS
 * unchanged. The link states do not change: a link handshaking TLS is in
 * L_BANNER (dialler) or L_AUTH (acceptor), so the handshake deadline and
 * the budget of unauthenticated inbound links cover TLS too. Without TLS
 * (l->st.tls NULL) every path is the one it always was. */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/addr.h"
#include "core/auth.h"
#include "core/tls.h"
#include "net/peer_int.h"
#include "net/uring.h"

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
    peer_retry_later(l);
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
        peer_retry_later(l);
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
    struct tk_addr a;
    const char *why;
    if (tk_addr_parse(l->addr, strlen(l->addr), &a, &why) != TK_OK) {
        peer_retry_later(l);
        return;
    }
    const char *host = a.host;
    uint32_t port = a.port;
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
        peer_retry_later(l);
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
        peer_link_warn(
            p, l, "closed: no TLS handshake within %u ms%s", p->s->opt.handshake_ms,
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
    if (tk_auth_nonce(snonce) != TK_OK || (p->tls_server && !peer_tls_begin(p, l))) {
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
        peer_send_line(l, line, n);
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
            } else if (p->tls_client && !peer_tls_begin(p, l)) {
                peer_link_warn(p, l, "cannot start TLS (out of memory)");
                tk_plink_close(p, l);
                link_finish_close(p, l);
            } else if (!peer_hs_dial(p, l)) {
                peer_link_warn(p, l, "no random bytes for a handshake nonce");
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
                    peer_tls_eof(p, l);
                tk_plink_close(p, l);
                link_finish_close(p, l);
                break;
            }
            p->st.bytes_in += (uint64_t)cqe->res;
            l->active_us = tk_now_us();
            peer_recv(p, l, (size_t)cqe->res);
            peer_input(p, l);
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
        peer_tls_failed(p, l, NULL);
        return;
    }
    if (tk_stream_unsent(&l->st) > 0) {
        /* A plain send first, at once: into a socket with room (loopback,
         * or a link that keeps up) it completes here. Through the ring
         * the same send completed while it was submitted, and its
         * completion woke the loop waiting on the ring (or, inline, on
         * the ring's file) once more for nothing: a second turn of the
         * loop per Append on the leader, per acknowledgement on a
         * follower. What the socket does not take goes through the ring
         * as before, and a failure closes the link as the ring's would. */
        ssize_t k = send(l->st.fd, l->st.snd.p + l->st.snd_off, tk_stream_unsent(&l->st),
                         MSG_DONTWAIT | MSG_NOSIGNAL);
        if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            tk_plink_close(p, l);
            link_finish_close(p, l);
            return;
        }
        if (k > 0) {
            tk_stream_sent(&l->st, (size_t)k);
            p->st.bytes_out += (uint64_t)k;
        }
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
    /* What the frames just read made (a follower's acknowledgement, a
     * leader's next Append) leaves now, before the rest of the loop's
     * round: a follower applies its committed commands after it has
     * answered, not before. */
    for (uint32_t i = 0; n && i < LINKS_MAX; i++)
        if (p->links[i])
            flush_link(p, p->links[i]);
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
        if (peer_tls_contexts(&s->opt, &p->tls_server, &p->tls_client, why, sizeof(why)) != TK_OK) {
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
