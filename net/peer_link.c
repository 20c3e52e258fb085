/* A peer link above its stream (net/peer_int.h): its closing and
 * failure lines, the peer handshake (SPEC 2 with the peer secret,
 * TICKETING-PEER/2, run by core/handshake.c), then binary frames (SPEC 9)
 * reassembled from the plaintext and handed to the Raft thread, and
 * frames queued to send. The bottom of the peer files: it calls none of
 * the others. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "core/auth.h"
#include "core/handshake.h"
#include "core/tls.h"
#include "net/peer_int.h"
#include "net/uring.h"

/* ------------------------------------------------------------------ */
/* A link: its state, closing, failure lines */

/* An outbound link without a socket: dial again after the backoff. */
void peer_retry_later(struct tk_plink *l)
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
        peer_retry_later(l);
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

/* One warning about a link that is being closed (net/peer_int.h). */
void peer_link_warn(struct tk_peers *p, struct tk_plink *l, const char *fmt, ...)
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

bool tk_plink_ready(const struct tk_plink *l)
{
    return l && l->state == L_READY;
}

uint64_t tk_plink_remote_id(const struct tk_plink *l)
{
    return l->remote_id;
}

const char *tk_plink_addr(const struct tk_plink *l)
{
    return l->addr;
}

/* ------------------------------------------------------------------ */
/* The handshake's end, frames out */

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
        peer_link_warn(p, idle,
                       "closed: more than %u authenticated peer links; this one was idle "
                       "the longest",
                       INBOUND_MAX);
        tk_plink_close(p, idle);
    }
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
                tk_stream_push_now(&l->st, l->send_inflight);
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
        peer_send_line(l, out, n);
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
bool peer_hs_dial(struct tk_peers *p, struct tk_plink *l)
{
    char cnonce[TK_AUTH_HEX_LEN + 1];
    if (tk_auth_nonce(cnonce) != TK_OK)
        return false;
    tk_hs_dial(&l->hs, p->s->peer_secret, p->s->peer_secret_len, l->addr, cnonce);
    return true;
}

/* Parses what arrived: handshake lines first, then frames. */
void peer_input(struct tk_peers *p, struct tk_plink *l)
{
    size_t pos = 0;
    const uint8_t *in = (const uint8_t *)l->st.in.p;
    while (pos < l->st.in.len && l->state != L_CLOSING) {
        if (l->state != L_READY) {
            if (l->state == L_AUTH && pos == 0 && !l->st.tls && in[0] == TLS_RECORD_HANDSHAKE) {
                /* A dialler that opens with a TLS record (AUTH opens with
                 * 'A'): it runs with TLS and this node without. */
                p->st.tls_failures++;
                peer_link_warn(p, l,
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
