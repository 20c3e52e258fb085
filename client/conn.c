/* One connection of the client, on the I/O thread: connect, handshake
 * (SPEC 2), a probe ping, then pipelined requests matched by id (SPEC 4);
 * on any failure, hand every request back to loop.c and reconnect after a
 * backoff (seed: 0.1 s doubling to 3.2 s, with jitter; reset by a good
 * handshake).
 *
 * With TLS (tls_ca_file), TCP is followed by a TLS handshake through
 * core/tls.h, and everything below runs inside it: received bytes are fed
 * to TLS and the plaintext it gives goes to the line parser; plaintext to
 * send is handed to TLS and its ciphertext to the socket. A TLS failure on
 * the certificates, or a plaintext server, is a configuration error: the
 * connection waits backoff_max_ms before its next try, and loop.c fails
 * unsent requests early while every connection is in that state.
 *
 * Handshake: banner -> AUTH -> OK, whose server proof is checked before a
 * single word the server says is believed (an M included). Then "P 0" is
 * sent and the connection is usable only once it is answered: a non-leader
 * follows its OK with M and closes, and a request written in between would
 * needlessly end INDETERMINATE. "Good handshake" (which resets the backoff)
 * therefore means: proof checked and probe answered.
 *
 * "Written" is tracked in bytes: every request records the stream offset of
 * its first byte (stream_pos) and the connection counts bytes accepted by
 * the kernel (out_written; with TLS, bytes handed to TLS). A request is
 * untouched while stream_pos >= out_written; only an untouched request may
 * be retried elsewhere.
 */
#include "client/internal.h"
#include "client/stream.h"
#include "core/addr.h"
#include "core/tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "core/proto.h"

/* ---- addresses ---------------------------------------------------------- */

static void conn_numeric_sa(struct cl_conn *k, const struct tk_addr *addr)
{
    uint16_t port = addr->port;
    memset(&k->sa, 0, sizeof k->sa);
    if (addr->kind == TK_ADDR_IPV6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&k->sa;
        a->sin6_family = AF_INET6;
        a->sin6_port = htons(port);
        inet_pton(AF_INET6, k->host, &a->sin6_addr);
        k->sa_len = sizeof *a;
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)&k->sa;
        a->sin_family = AF_INET;
        a->sin_port = htons(port);
        inet_pton(AF_INET, k->host, &a->sin_addr);
        k->sa_len = sizeof *a;
    }
}

int cl_conn_set_addr(struct cl_conn *k, const char *addr, uint64_t now_us)
{
    size_t len = strlen(addr);
    struct tk_addr a;
    const char *why = "address too long";
    TK_ASSERT(k->fd < 0);
    if (len >= sizeof k->addr || tk_addr_parse(addr, len, &a, &why) != TK_OK) {
        cl_log(k->client, 1, "address '%.64s': %s", addr, why);
        return -1;
    }
    _Static_assert(sizeof k->host >= sizeof a.host, "every host fits");
    memcpy(k->host, a.host, sizeof a.host);
    snprintf(k->port, sizeof k->port, "%u", (unsigned)a.port);
    k->numeric = a.kind != TK_ADDR_NAME;
    memcpy(k->addr, addr, len + 1);
    if (k->numeric)
        conn_numeric_sa(k, &a);
    k->state = CL_CONN_IDLE;
    k->backoff_ms = k->client->cfg.backoff_min_ms;
    k->next_attempt_us = now_us;
    return 0;
}

struct cl_conn *cl_conn_new(struct tk_client *c, const char *addr, bool extra)
{
    struct cl_conn *k = calloc(1, sizeof *k);
    if (k == NULL)
        return NULL;
    k->client = c;
    k->fd = -1;
    k->extra = extra;
    k->index = c->nconns;
    uint32_t n = 1;
    while (n < c->cfg.inflight_per_connection_max)
        n *= 2;
    k->mask = n - 1;
    k->next_id = CL_PROBE_ID + 1;
    k->rbuf = malloc(CL_RBUF_SIZE);
    k->wbuf = malloc(CL_WBUF_SIZE);
    k->slots = calloc(n, sizeof *k->slots);
    if (k->rbuf == NULL || k->wbuf == NULL || k->slots == NULL ||
        cl_conn_set_addr(k, addr, 0) != 0) {
        cl_conn_free(k);
        return NULL;
    }
    return k;
}

void cl_conn_free(struct cl_conn *k)
{
    if (k == NULL)
        return;
    if (k->fd >= 0)
        close(k->fd);
    tk_tls_free(k->tls);
    free(k->rbuf);
    free(k->wbuf);
    free(k->slots);
    free(k);
}

/* ---- epoll and teardown -------------------------------------------------- */

static void conn_arm(struct cl_conn *k, uint32_t events)
{
    if (k->epoll_events == events)
        return;
    struct epoll_event ev = {.events = events, .data.ptr = k};
    int op = k->epoll_events == 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD;
    int rc = epoll_ctl(k->client->epfd, op, k->fd, &ev);
    TK_ASSERT(rc == 0); /* only fails on a bug (bad fd) or without kernel memory */
    k->epoll_events = events;
}

/* Closes the socket and gives every request on it back to loop.c: the
 * untouched ones first, in stream order, so they keep their place. */
static void conn_teardown(struct cl_conn *k)
{
    struct tk_client *c = k->client;
    if (k->fd >= 0) {
        epoll_ctl(c->epfd, EPOLL_CTL_DEL, k->fd, NULL);
        close(k->fd);
    }
    k->fd = -1;
    k->epoll_events = 0;
    tk_tls_free(k->tls);
    k->tls = NULL;
    k->tls_seen = false;
    k->got_bytes = false;
    k->rlen = 0;
    k->whead = 0;
    k->wlen = 0;
    k->out_appended = 0;
    k->out_written = 0;
    if (k->state == CL_CONN_READY)
        cl_on_ready_change(c, -1);
    k->state = CL_CONN_IDLE;

    struct cl_list unsent = k->unsent;
    k->unsent = (struct cl_list){0};
    for (struct cl_req *r = unsent.tail; r != NULL;) {
        struct cl_req *prev = r->prev;
        k->slots[r->wire_id & k->mask] = NULL;
        k->inflight--;
        r->next = r->prev = NULL;
        cl_on_conn_lost(c, r);
        r = prev;
    }
    for (uint32_t s = 0; k->inflight > 0 && s <= k->mask; s++) {
        struct cl_req *r = k->slots[s];
        if (r == NULL)
            continue;
        k->slots[s] = NULL;
        k->inflight--;
        cl_on_conn_lost(c, r);
    }
    TK_ASSERT(k->inflight == 0);
}

/* Closes the connection and schedules the next attempt. record: a failure
 * worth reporting through tk_client_last_error() (an M is not one).
 * tls_refused: a TLS configuration error (see the top of this file). */
void cl_conn_down(struct cl_conn *k,
                  const char *why,
                  bool record,
                  bool tls_refused,
                  uint64_t now_us)
{
    struct tk_client *c = k->client;
    bool was_ready = k->state == CL_CONN_READY;
    cl_log(c, tls_refused ? 0 : was_ready ? 1 : 3, "connection to %s: %s", k->addr, why);
    if (record) {
        pthread_mutex_lock(&c->mu);
        /* "addr: why", cut at the buffer, which is fine for an error. */
        size_t cap = sizeof c->last_error - 1, n = 0;
        const char *parts[] = {k->addr, ": ", why};
        for (size_t i = 0; i < 3; i++) {
            size_t m = strnlen(parts[i], cap - n);
            memcpy(c->last_error + n, parts[i], m);
            n += m;
        }
        c->last_error[n] = 0;
        pthread_mutex_unlock(&c->mu);
    }
    conn_teardown(k);
    k->tls_refused = tls_refused;
    if (k->extra && c->leader != (int)k->index) {
        k->state = CL_CONN_RETIRED; /* the leader moved on from this address */
        return;
    }
    /* Certificates and plaintext servers do not change in a tenth of a
     * second: go straight to the longest step rather than hammer a server
     * that will refuse again. */
    if (tls_refused)
        k->backoff_ms = c->cfg.backoff_max_ms;
    /* Jitter: a delay in [3/4, 1] of the step, so the steps stay at most
     * backoff_max and clients that lost the same node spread out. */
    uint64_t step_us = (uint64_t)k->backoff_ms * 1000u;
    uint64_t delay_us = tk_prng_range(&c->prng, step_us * 3 / 4, step_us);
    k->next_attempt_us = now_us + delay_us;
    k->backoff_ms = TK_MIN(k->backoff_ms * 2, c->cfg.backoff_max_ms);
}

void cl_conn_fail(struct cl_conn *k, const char *why, uint64_t now_us)
{
    cl_conn_down(k, why, true, false, now_us);
}

bool cl_conns_tls_refused(const struct tk_client *c)
{
    unsigned live = 0;
    for (unsigned i = 0; i < c->nconns; i++) {
        const struct cl_conn *k = c->conns[i];
        if (k->state == CL_CONN_RETIRED)
            continue;
        if (!k->tls_refused)
            return false;
        live++;
    }
    return live > 0;
}

/* A TLS failure (rc from core/tls.h), named with what the reader needs to
 * fix it: the CA file and the name checked when the server's certificate
 * was refused, a hint about client certificates when the server hung up
 * on ours (or on its absence). */
void cl_conn_fail_tls(struct cl_conn *k, int rc, uint64_t now_us)
{
    struct tk_client *c = k->client;
    char why[4 * TK_TLS_ERR_MAX]; /* cut to CL_ERR_MAX when recorded */
    const char *name = c->tls_server_name[0] ? c->tls_server_name : k->host;
    const char *err = k->tls ? tk_tls_error(k->tls) : "";
    bool in_handshake = k->state == CL_CONN_TLS;
    /* Before the banner: the server may be refusing us in TLS (TLS 1.3
     * refuses a client certificate only after our side is done). */
    bool early = in_handshake || k->state == CL_CONN_BANNER;
    if (rc == TK_ECLOSED)
        err = in_handshake ? "closed by the server during the TLS handshake"
                           : "closed by the server after the TLS handshake, before its banner";
    else if (err[0] == '\0')
        err = "TLS failed";
    if (rc == TK_EAUTH && in_handshake && strstr(err, "alert") == NULL)
        snprintf(why, sizeof why, "%s (CA file %s, server name %s)", err, c->tls_ca_file, name);
    else if (!early)
        snprintf(why, sizeof why, "%s", err);
    else if (!c->tls_client_cert)
        snprintf(why, sizeof why,
                 "%s (if the server requires client certificates, set tls_cert_file and "
                 "tls_key_file)",
                 err);
    else
        snprintf(why, sizeof why, "%s (the server may have refused our client certificate)", err);
    cl_conn_down(k, why, true, rc == TK_EAUTH, now_us);
}

void cl_conn_retire(struct cl_conn *k, uint64_t now_us)
{
    (void)now_us;
    conn_teardown(k);
    k->state = CL_CONN_RETIRED;
}

/* ---- connecting ------------------------------------------------------------ */

/* TCP is up. Plaintext: wait for the banner. TLS: start the handshake; the
 * ClientHello leaves with the loop's flush. */
static void conn_connected(struct cl_conn *k, uint64_t now_us)
{
    struct tk_client *c = k->client;
    k->got_bytes = false;
    if (c->tls_ctx == NULL) {
        k->state = CL_CONN_BANNER;
        conn_arm(k, EPOLLIN);
        return;
    }
    /* The name checked: the configured one, else the host dialled (an IP
     * literal is matched against the certificate's IP addresses). */
    k->tls = tk_tls_new(c->tls_ctx, c->tls_server_name[0] ? c->tls_server_name : k->host);
    if (k->tls == NULL) {
        cl_conn_fail(k, "out of memory for a TLS connection", now_us);
        return;
    }
    k->tls_seen = false;
    k->state = CL_CONN_TLS;
    char none[1];
    size_t got;
    int rc = tk_tls_read(k->tls, none, 0, &got);
    if (rc != TK_OK) {
        cl_conn_fail_tls(k, rc, now_us);
        return;
    }
    conn_arm(k, EPOLLIN);
}

static void conn_connect(struct cl_conn *k, uint64_t now_us)
{
    struct tk_client *c = k->client;
    atomic_fetch_add_explicit(&c->st_connect_attempts, 1, memory_order_relaxed);
    k->fd = cl_socket_open(k->sa.ss_family);
    if (k->fd < 0) {
        cl_conn_fail(k, strerror(errno), now_us);
        return;
    }
    if (connect(k->fd, (struct sockaddr *)&k->sa, k->sa_len) == 0) {
        conn_connected(k, now_us);
    } else if (errno == EINPROGRESS) {
        k->state = CL_CONN_CONNECTING;
        conn_arm(k, EPOLLOUT);
    } else {
        char why[128];
        snprintf(why, sizeof why, "connect: %s", strerror(errno));
        cl_conn_fail(k, why, now_us);
    }
}

void cl_conn_start(struct cl_conn *k, uint64_t now_us)
{
    TK_ASSERT(k->state == CL_CONN_IDLE);
    TK_ASSERT(k->fd < 0);
    k->attempt_deadline_us = now_us + (uint64_t)k->client->cfg.connect_timeout_ms * 1000u;
    if (k->numeric) {
        conn_connect(k, now_us);
        return;
    }
    k->state = CL_CONN_RESOLVING;
    if (cl_resolve_ask(k->client, k->index, k->host, k->port) != 0)
        cl_conn_fail(k, "cannot start the resolver thread", now_us);
}

void cl_conn_lookup_done(struct cl_conn *k, const struct cl_lookup *l, uint64_t now_us)
{
    if (k->state != CL_CONN_RESOLVING || strcmp(l->host, k->host) != 0)
        return; /* timed out or re-pointed meanwhile: a new attempt asks again */
    if (!l->ok) {
        cl_conn_fail(k, "host name lookup failed", now_us);
        return;
    }
    memcpy(&k->sa, &l->sa, sizeof k->sa);
    k->sa_len = l->sa_len;
    conn_connect(k, now_us);
}

void cl_conn_timer(struct cl_conn *k, uint64_t now_us)
{
    switch (k->state) {
        case CL_CONN_IDLE:
            if (k->next_attempt_us <= now_us)
                cl_conn_start(k, now_us);
            break;
        case CL_CONN_RESOLVING:
        case CL_CONN_CONNECTING:
        case CL_CONN_TLS:
        case CL_CONN_BANNER:
        case CL_CONN_AUTH:
        case CL_CONN_PROBE:
            if (k->attempt_deadline_us > now_us)
                break;
            if (k->state == CL_CONN_TLS)
                cl_conn_fail(k, "TLS handshake timed out", now_us);
            else if (k->state == CL_CONN_BANNER && k->tls == NULL && !k->got_bytes)
                /* A TLS server waits for our ClientHello while we wait for
                 * its banner: the likeliest reason for this silence. */
                cl_conn_fail(k,
                             "connected, but no banner from the server in time (a TLS "
                             "port? then set tls_ca_file)",
                             now_us);
            else
                cl_conn_fail(k, "connect or handshake timed out", now_us);
            break;
        default:
            break;
    }
}

uint64_t cl_conn_next_timer(const struct cl_conn *k)
{
    switch (k->state) {
        case CL_CONN_IDLE:
            return k->next_attempt_us;
        case CL_CONN_READY:
        case CL_CONN_RETIRED:
            return UINT64_MAX;
        default:
            return k->attempt_deadline_us;
    }
}

/* ---- output ------------------------------------------------------------------ */

/* Room for one more line at the end of the buffer. */
char *cl_conn_tail(struct cl_conn *k, size_t *cap)
{
    if (k->whead > 0 && k->whead + k->wlen + TK_LINE_MAX > CL_WBUF_SIZE) {
        memmove(k->wbuf, k->wbuf + k->whead, k->wlen);
        k->whead = 0;
    }
    *cap = CL_WBUF_SIZE - k->whead - k->wlen;
    TK_ASSERT(*cap >= TK_LINE_MAX);
    return k->wbuf + k->whead + k->wlen;
}

void cl_conn_append(struct cl_conn *k, size_t n)
{
    TK_ASSERT(n > 0);
    k->wlen += n;
    k->out_appended += n;
}

bool cl_conn_has_room(const struct cl_conn *k)
{
    return k->state == CL_CONN_READY && k->inflight < k->client->cfg.inflight_per_connection_max &&
           k->wlen < CL_WBUF_HIGH;
}

void cl_conn_queue(struct cl_conn *k, struct cl_req *r, uint64_t now_us)
{
    struct tk_client *c = k->client;
    size_t cap, n = 0;
    TK_ASSERT(cl_conn_has_room(k));
    TK_ASSERT(r->wire == CL_WIRE_NONE);
    uint64_t id;
    do { /* ids only grow on a connection; skip ids whose slot is taken */
        id = k->next_id++;
    } while (id == CL_PROBE_ID || k->slots[id & k->mask] != NULL);
    char *p = cl_conn_tail(k, &cap);
    switch (r->type) {
        case 'A': {
            /* The wait left of the caller's budget (seed: a request that
             * waited for a connection continues within what remains). */
            /* now_us is this round's clock reading, which may predate a
             * request submitted during the round: never let it wrap. */
            uint64_t spent_ms = now_us > r->submit_us ? (now_us - r->submit_us) / 1000u : 0;
            r->wait_sent_ms = spent_ms >= r->wait_ms ? 0 : r->wait_ms - (uint32_t)spent_ms;
            n = tk_proto_fmt_acquire(p, cap, id, r->key, r->key_len, c->owner, c->owner_len,
                                     r->lease_ms, r->wait_sent_ms);
            break;
        }
        case 'R':
            n = tk_proto_fmt_release(p, cap, id, r->key, r->key_len, c->owner, c->owner_len,
                                     r->token);
            break;
        case 'Q':
            n = tk_proto_fmt_qreq(p, cap, id, r->key, r->key_len);
            break;
        case 'S':
            /* Every attempt reads its answer from part 1 again: what an
             * attempt on a dead connection gave is overwritten. */
            r->ring_part = 0;
            r->ring_parts = 0;
            r->ring_len = 0;
            n = tk_proto_fmt_ring_req(p, cap, id);
            break;
        default:
            TK_ASSERT(r->type == 'P');
            n = tk_proto_fmt_ping(p, cap, id);
            break;
    }
    r->stream_pos = k->out_appended;
    cl_conn_append(k, n);
    r->wire = CL_WIRE_QUEUED;
    r->conn = k;
    r->wire_id = id;
    k->slots[id & k->mask] = r;
    k->inflight++;
    cl_list_push_back(&k->unsent, r);
}

void cl_conn_neuter(struct cl_conn *k, struct cl_req *r)
{
    TK_ASSERT(r->wire == CL_WIRE_QUEUED);
    TK_ASSERT(r->stream_pos >= k->out_written);
    size_t off = k->whead + (size_t)(r->stream_pos - k->out_written);
    TK_ASSERT(off < k->whead + k->wlen);
    TK_ASSERT(k->wbuf[off] == r->type);
    /* An unknown command: the server answers "E <id> command" and changes
     * nothing, so a line that can no longer be taken back is harmless. */
    k->wbuf[off] = 'X';
    r->neutered = true;
}

void cl_conn_drop_slot(struct cl_conn *k, struct cl_req *r)
{
    TK_ASSERT(r->conn == k);
    TK_ASSERT(k->slots[r->wire_id & k->mask] == r);
    k->slots[r->wire_id & k->mask] = NULL;
    k->inflight--;
    if (r->wire == CL_WIRE_QUEUED)
        cl_list_remove(&k->unsent, r);
    r->wire = CL_WIRE_NONE;
    r->conn = NULL;
}

/* Marks the requests whose first byte is now below out_written as sent. */
static void conn_mark_sent(struct cl_conn *k, uint64_t before_us)
{
    while (k->unsent.head != NULL && k->unsent.head->stream_pos < k->out_written) {
        struct cl_req *r = k->unsent.head;
        cl_list_remove(&k->unsent, r);
        cl_on_sent(k->client, r, before_us);
    }
}

/* Sends TLS's pending ciphertext. Returns 1 when all of it left, 0 when the
 * socket is full (EPOLLOUT armed), -1 when the connection failed. */
static int conn_tls_push(struct cl_conn *k, uint64_t now_us)
{
    size_t n;
    const uint8_t *p = tk_tls_pending(k->tls, &n);
    while (n > 0) {
        ssize_t w = send(k->fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            conn_arm(k, EPOLLIN | EPOLLOUT);
            return 0;
        }
        if (w <= 0) {
            char why[128];
            snprintf(why, sizeof why, "write: %s", w < 0 ? strerror(errno) : "no progress");
            cl_conn_fail(k, why, now_us);
            return -1;
        }
        tk_tls_sent(k->tls, (size_t)w);
        p = tk_tls_pending(k->tls, &n);
    }
    return 1;
}

/* TLS output: first what TLS already holds, then at most one record of
 * plaintext at a time, and only while the socket takes it all. So the
 * plaintext not yet handed over stays in wbuf, untouched, while the kernel
 * is full, as it does without TLS. */
static void conn_flush_tls(struct cl_conn *k, uint64_t now_us)
{
    for (;;) {
        int rc = conn_tls_push(k, now_us);
        if (rc <= 0)
            return;
        if (k->wlen == 0 || !tk_tls_ready(k->tls))
            break;
        size_t n = TK_MIN(k->wlen, (size_t)CL_TLS_WRITE_MAX);
        /* Read before the bytes are handed over, so it is never later than
         * the moment the first byte left: a lease counted from it is safe. */
        uint64_t before_us = cl_now_us();
        if (tk_tls_write(k->tls, k->wbuf + k->whead, n) != TK_OK) {
            cl_conn_fail_tls(k, TK_EPROTO, now_us);
            return;
        }
        k->whead += n;
        k->wlen -= n;
        k->out_written += (uint64_t)n;
        conn_mark_sent(k, before_us);
    }
    if (k->wlen == 0)
        k->whead = 0;
    conn_arm(k, EPOLLIN);
}

void cl_conn_flush(struct cl_conn *k, uint64_t now_us)
{
    if (k->fd < 0 || k->state == CL_CONN_CONNECTING)
        return;
    if (k->tls != NULL) {
        conn_flush_tls(k, now_us);
        return;
    }
    while (k->wlen > 0) {
        /* Read just before the write, so it is never later than the moment
         * the first byte left: a lease counted from it is safe. */
        uint64_t before_us = cl_now_us();
        ssize_t n = send(k->fd, k->wbuf + k->whead, k->wlen, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            conn_arm(k, EPOLLIN | EPOLLOUT);
            return;
        }
        if (n <= 0) {
            char why[128];
            snprintf(why, sizeof why, "write: %s", n < 0 ? strerror(errno) : "no progress");
            cl_conn_fail(k, why, now_us);
            return;
        }
        k->whead += (size_t)n;
        k->wlen -= (size_t)n;
        k->out_written += (uint64_t)n;
        conn_mark_sent(k, before_us);
    }
    k->whead = 0;
    conn_arm(k, EPOLLIN);
}

void cl_conn_event(struct cl_conn *k, uint32_t events, uint64_t now_us)
{
    if (k->fd < 0)
        return; /* closed earlier in this round */
    if (k->state == CL_CONN_CONNECTING) {
        int err = cl_socket_error(k->fd);
        if (err != 0) {
            char why[128];
            snprintf(why, sizeof why, "connect: %s", strerror(err));
            cl_conn_fail(k, why, now_us);
            return;
        }
        if ((events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) == 0)
            return;
        conn_connected(k, now_us);
        return;
    }
    if (events & (EPOLLIN | EPOLLERR | EPOLLHUP))
        cl_conn_read(k, now_us);
    if (k->fd >= 0 && (events & EPOLLOUT))
        cl_conn_flush(k, now_us);
}

void cl_tls_thread_end(void)
{
    /* wolfSSL keeps an ECC point cache per thread that only this frees: a
     * client made and destroyed over and over would leak one per I/O
     * thread. */
    tk_tls_thread_done();
}
