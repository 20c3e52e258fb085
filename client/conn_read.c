/* A connection's input, on the I/O thread: bytes from the socket (through
 * TLS when it is on) into rbuf, cut into lines, and each line to what the
 * connection's state expects of it: the handshake (core/handshake.c), the
 * answer to the probe, or the answer to a request on the wire, matched by
 * its id (SPEC 4); the lines of a ring's answer (SPEC 15) are put
 * together here. An M, an "E -" or a malformed line ends the connection
 * (conn.c tears it down and hands its requests back to loop.c), and so
 * does a ring's part out of order.
 *
 * The first bytes under TLS are looked at before core/tls.c sees them, so
 * that a plaintext server, or one that refuses our hello with an alert, is
 * named as such (client/stream.h has the record bytes).
 */
#include "client/internal.h"
#include "client/stream.h"
#include "core/tls.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "core/proto.h"

/* ---- lines --------------------------------------------------------------------- */

/* A line of the handshake (BANNER or AUTH), through core/handshake.c:
 * the AUTH answers the banner; the OK, once its server proof checked
 * out, is followed by the probe. */
static void conn_on_handshake(struct cl_conn *k, const char *line, size_t len, uint64_t now_us)
{
    struct tk_client *c = k->client;
    char out[TK_HS_LINE_MAX];
    size_t n = 0, cap;
    if (k->state == CL_CONN_BANNER) {
        char cnonce[TK_AUTH_HEX_LEN + 1];
        if (tk_auth_nonce(cnonce) != TK_OK) {
            cl_conn_fail(k, "no random bytes for a nonce", now_us);
            return;
        }
        tk_hs_client_dial(&k->hs, c->secret, c->secret_len, cnonce);
    }
    enum tk_hs_state st = tk_hs_line(&k->hs, line, len, out, sizeof out, &n);
    if (st == TK_HS_FAILED) {
        if (k->hs.fail == TK_HS_E_AUTH_REFUSED) {
            atomic_fetch_add_explicit(&c->st_auth_failures, 1, memory_order_relaxed);
            cl_log(c, 0, "%s refused our proof: is the client secret right?", k->addr);
        } else if (k->hs.fail == TK_HS_E_SERVER_PROOF) {
            /* Mutual authentication (SPEC 2): this peer does not know our
             * secret, so nothing it says (an M included) is believed. */
            atomic_fetch_add_explicit(&c->st_auth_failures, 1, memory_order_relaxed);
            cl_log(c, 0, "%s sent a wrong server proof: not our cluster", k->addr);
        }
        cl_conn_fail(k, tk_hs_why(&k->hs), now_us);
        return;
    }
    if (st == TK_HS_OK) {
        char *p = cl_conn_tail(k, &cap);
        TK_ASSERT(cap >= n);
        memcpy(p, out, n);
        cl_conn_append(k, n);
        k->state = CL_CONN_AUTH; /* written by the loop's flush, after this batch of lines */
        return;
    }
    TK_ASSERT(st == TK_HS_DONE);
    atomic_fetch_add_explicit(&c->st_handshakes, 1, memory_order_relaxed);
    char *p = cl_conn_tail(k, &cap);
    cl_conn_append(k, tk_proto_fmt_ping(p, cap, CL_PROBE_ID));
    k->probe_sent_us = now_us;
    /* Not flushed here: an M that came in the same segment as the OK is
     * still in rbuf and must be read (and believed) before a write to the
     * closing socket can fail the connection. The loop flushes. */
    k->state = CL_CONN_PROBE;
}

static void conn_on_probe(struct cl_conn *k, const struct tk_response *rsp, uint64_t now_us)
{
    struct tk_client *c = k->client;
    if (rsp->type == 'P' && rsp->has_id && rsp->id == CL_PROBE_ID) {
        k->state = CL_CONN_READY;
        k->backoff_ms = c->cfg.backoff_min_ms; /* a good handshake resets the backoff */
        cl_on_ready_change(c, 1);
        cl_log(c, 2, "connected to %s (%s)", k->addr, k->extra ? "hinted leader" : "configured");
        return;
    }
    cl_conn_fail(k, "unexpected answer to the probe", now_us);
}

/* n bytes more of a ring's body: into the caller's buffer as far as it
 * has room (one byte is kept for the NUL), counted in full. */
static void ring_put(struct cl_req *r, const char *p, size_t n)
{
    if (r->ring_buf != NULL && r->ring_len < r->ring_cap) {
        size_t room = r->ring_cap - 1 - r->ring_len;
        memcpy(r->ring_buf + r->ring_len, p, TK_MIN(n, room));
    }
    r->ring_len += n;
}

/* One line of an S answer (docs/protocol.md, "S (the ring)"). Its parts
 * come in order, 1/n to n/n, all with one version and one n; in an answer
 * of several lines each part holds ranges (never "-"), so n is at most the
 * number of ranges (core/proto.c refuses more); and the body they make is
 * at most TK_CLIENT_RING_TEXT_MAX bytes. Each part joins the body with a ';'
 * before it. A decided request (a zombie) has no buffer any more: its
 * lines are only checked. Returns 1 for the last part, 0 when more are to
 * come, -1 with why for anything else: a protocol error, as for any
 * malformed line. */
static int conn_ring_part(struct cl_req *r, const struct tk_response *rsp, const char **why)
{
    TK_ASSERT(r->type == 'S');
    _Static_assert(TK_PROTO_RING_PARTS_MAX <= TK_SLOTS_RANGES_MAX, "a part holds a range");
    TK_ASSERT(rsp->part >= 1); /* core/proto.c checks these three */
    TK_ASSERT(rsp->part <= rsp->parts);
    TK_ASSERT(rsp->parts <= TK_PROTO_RING_PARTS_MAX);
    if (rsp->part != r->ring_part + 1) {
        *why = "protocol: a part of the ring out of order";
        return -1;
    }
    if (rsp->part == 1) {
        r->ring_parts = rsp->parts;
        r->ring_version = rsp->version;
    } else if (rsp->parts != r->ring_parts || rsp->version != r->ring_version) {
        *why = "protocol: the parts of a ring disagree on its version or their count";
        return -1;
    }
    size_t sep = rsp->part > 1 ? 1 : 0;
    if (rsp->parts > 1 && rsp->text_len == 1 && rsp->text[0] == '-') {
        *why = "protocol: a ring's part without ranges";
        return -1;
    }
    /* Each term is bounded (the length so far by this very check, a line
     * by TK_LINE_MAX): no overflow. */
    if (r->ring_len + sep + rsp->text_len > TK_CLIENT_RING_TEXT_MAX) {
        *why = "protocol: a ring longer than any ring can be";
        return -1;
    }
    ring_put(r, ";", sep);
    ring_put(r, rsp->text, rsp->text_len);
    r->ring_part++;
    TK_ASSERT(r->ring_part <= r->ring_parts);
    return r->ring_part == r->ring_parts;
}

static void conn_on_answer(struct cl_conn *k, const struct tk_response *rsp, uint64_t now_us)
{
    struct tk_client *c = k->client;
    struct cl_req *r = k->slots[rsp->id & k->mask];
    if (r == NULL || r->wire_id != rsp->id) {
        /* A forgotten zombie's answer (its linger ended) or a server bug:
         * nothing waits for it. */
        cl_log(c, 3, "%s: answer for unknown id %llu ignored", k->addr,
               (unsigned long long)rsp->id);
        return;
    }
    /* Once a ring's first part came, only its next part may follow. */
    bool ring_begun = r->type == 'S' && r->ring_part > 0;
    if (r->wire != CL_WIRE_SENT || !cl_response_fits(r, rsp->type) ||
        (ring_begun && rsp->type != 'S')) {
        cl_conn_fail(k, "protocol: answer does not fit its request", now_us);
        return;
    }
    if (rsp->type == 'S') {
        const char *why = NULL;
        int last = conn_ring_part(r, rsp, &why);
        if (last < 0) {
            cl_conn_fail(k, why, now_us);
            return;
        }
        if (last == 0)
            return; /* the request keeps its id until part n */
    }
    cl_conn_drop_slot(k, r);
    cl_on_response(c, r, rsp);
}

static void conn_line(struct cl_conn *k, const char *line, size_t len, uint64_t now_us)
{
    struct tk_response rsp;
    if (k->state == CL_CONN_BANNER || k->state == CL_CONN_AUTH) {
        conn_on_handshake(k, line, len, now_us);
        return;
    }
    if (!tk_proto_parse_response(line, len, &rsp)) {
        cl_conn_fail(k, "protocol: malformed line", now_us);
        return;
    }
    if (rsp.type == 'M') {
        cl_on_moved(k->client, rsp.text, rsp.text ? rsp.text_len : 0, now_us);
        cl_conn_down(k, "not the leader (M)", false, false, now_us);
    } else if (!rsp.has_id) {
        char why[64];
        snprintf(why, sizeof why, "server closed: E - %.*s", (int)TK_MIN(rsp.text_len, 20u),
                 rsp.text ? rsp.text : "");
        cl_conn_fail(k, why, now_us);
    } else if (k->state == CL_CONN_PROBE) {
        conn_on_probe(k, &rsp, now_us);
    } else {
        conn_on_answer(k, &rsp, now_us);
    }
}

/* Handles every complete line in rbuf; stops as soon as the connection
 * fails (its buffers are reset then). */
static void conn_lines(struct cl_conn *k, uint64_t now_us)
{
    size_t off = 0, len = 0;
    int found = 0;
    /* A line and its '\n' fit in TK_LINE_MAX bytes. */
    while (k->fd >= 0 &&
           (found = cl_line_next(k->rbuf + off, k->rlen - off, TK_LINE_MAX, &len)) > 0) {
        conn_line(k, k->rbuf + off, len, now_us);
        off += len + 1;
    }
    if (k->fd < 0)
        return;
    if (found < 0) {
        cl_conn_fail(k, "protocol: line too long", now_us);
        return;
    }
    memmove(k->rbuf, k->rbuf + off, k->rlen - off);
    k->rlen -= off;
}

/* The first bytes of a TLS connection must open a handshake record. A
 * plaintext server greets with its banner; a TLS server that refuses our
 * hello answers with an alert. Either is named here, before core/tls.c
 * (whose own check speaks of plaintext clients, the server's case). */
static bool conn_tls_first(struct cl_conn *k, const uint8_t *p, size_t n, uint64_t now_us)
{
    char why[CL_ERR_MAX];
    k->tls_seen = true;
    if (p[0] == CL_TLS_RECORD_HANDSHAKE)
        return true;
    if (p[0] == CL_TLS_RECORD_ALERT && n >= 7) {
        unsigned desc = p[6];
        const char *what = desc == 40    ? "handshake failure"
                           : desc == 42  ? "bad certificate"
                           : desc == 48  ? "unknown CA"
                           : desc == 70  ? "protocol version"
                           : desc == 112 ? "unrecognized name"
                           : desc == 116 ? "certificate required"
                                         : "see RFC 8446 section 6";
        snprintf(why, sizeof why, "the server refused the TLS handshake (alert %u: %s)", desc,
                 what);
    } else {
        char text[24];
        size_t m = 0;
        for (size_t i = 0; i < n && m < 20 && p[i] != '\n'; i++)
            text[m++] = p[i] >= 0x20 && p[i] < 0x7f ? (char)p[i] : '.';
        text[m] = '\0';
        snprintf(why, sizeof why,
                 "the server does not speak TLS: it answered in plaintext (\"%s...\"); "
                 "enable TLS on it, or connect without tls_ca_file",
                 text);
    }
    cl_conn_down(k, why, true, true, now_us);
    return false;
}

/* Ciphertext received: through TLS into rbuf, then the lines. */
static void conn_tls_input(struct cl_conn *k, const uint8_t *p, size_t n, uint64_t now_us)
{
    if (!k->tls_seen && !conn_tls_first(k, p, n, now_us))
        return;
    int rc = tk_tls_feed(k->tls, p, n);
    while (rc == TK_OK && k->fd >= 0) {
        size_t got;
        /* conn_lines leaves less than a line in rbuf: there is room. */
        rc = tk_tls_read(k->tls, k->rbuf + k->rlen, CL_RBUF_SIZE - k->rlen, &got);
        if (rc != TK_OK)
            break;
        if (k->state == CL_CONN_TLS && tk_tls_ready(k->tls)) {
            k->state = CL_CONN_BANNER;
            k->tls_refused = false;
            cl_log(k->client, 3, "connection to %s: TLS handshake done", k->addr);
        }
        if (got == 0)
            return;
        k->rlen += got;
        conn_lines(k, now_us);
    }
    if (k->fd < 0)
        return;
    if (rc == TK_ECLOSED)
        cl_conn_fail(k, "closed by the server (TLS close_notify)", now_us);
    else
        cl_conn_fail_tls(k, rc, now_us);
}

static void conn_read_tls(struct cl_conn *k, uint64_t now_us)
{
    uint8_t buf[CL_TLS_RECV_SIZE];
    while (k->fd >= 0) {
        ssize_t n = recv(k->fd, buf, sizeof buf, 0);
        if (n > 0) {
            k->got_bytes = true;
            conn_tls_input(k, buf, (size_t)n, now_us);
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n == 0 && (k->state == CL_CONN_TLS || k->state == CL_CONN_BANNER)) {
            /* Hung up before its banner: its TLS side may have refused us. */
            cl_conn_fail_tls(k, TK_ECLOSED, now_us);
            return;
        }
        char why[128];
        snprintf(why, sizeof why, "%s", n == 0 ? "closed by the server" : strerror(errno));
        cl_conn_fail(k, why, now_us);
        return;
    }
}

void cl_conn_read(struct cl_conn *k, uint64_t now_us)
{
    if (k->tls != NULL) {
        conn_read_tls(k, now_us);
        return;
    }
    while (k->fd >= 0) {
        ssize_t n = recv(k->fd, k->rbuf + k->rlen, CL_RBUF_SIZE - k->rlen, 0);
        if (n > 0) {
            k->got_bytes = true;
            k->rlen += (size_t)n;
            conn_lines(k, now_us);
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        char why[128];
        snprintf(why, sizeof why, "%s", n == 0 ? "closed by the server" : strerror(errno));
        cl_conn_fail(k, why, now_us);
        return;
    }
}
