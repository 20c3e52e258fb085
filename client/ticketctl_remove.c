/* ticketctl remove-member: asks the leader to drop a member that is gone
 * for good (its address will not come back), over the leader's peer port.
 *
 * The peer port speaks the peer handshake (TICKETING-PEER/2 with the peer
 * secret, core/handshake.h), inside TLS when --tls-ca is given, then
 * binary frames (SPEC 9): one REMOVE frame out, a JOIN_REPLY back. The
 * leader refuses to remove a member it heard from within an election
 * timeout, so a live member (a typo included) cannot be taken out this way.
 *
 * Where the proof goes. A peer proof is sent only to an address the
 * operator gave (--peers, or each --addr host at its client port + 1, the
 * default peer port) or one a node named in an answer that carried its
 * MAC (a follower's "not the leader, ask X"), never to one read from the
 * plain-HTTP admin port; the proof names the address it is meant for, so
 * a process that relays it to another node is refused there. Success is
 * reported only on an answer whose MAC the node authenticated in the
 * handshake made (tk_hs_mac): whoever carries the bytes cannot forge it.
 * NOT_LEADER is followed (a few hops), RETRY asked again shortly, every
 * given address tried in turn, all within --timeout.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client/stream.h"
#include "client/ticketctl.h"
#include "client/ticketing.h"
#include "core/auth.h"
#include "core/handshake.h"
#include "core/tls.h"
#include "raft/wire.h"

#define RETRY_PAUSE_MS 200
#define HOPS_MAX 3 /* NOT_LEADER answers followed in a row */
#define TARGETS_MAX 8
#define ADDR_CAP 256
#define LINE_MAX_LEN 512   /* a handshake line; ours are under 400 bytes */
#define IN_CAP (64u << 10) /* a JOIN_REPLY is under 350 bytes */

/* How one attempt (dial, handshake, REMOVE, answer) ended. */
enum attempt {
    AT_NO_CONN,    /* the peer port did not answer, or closed before the handshake ended */
    AT_BAD,        /* not a peer port, TLS failed, or a malformed answer */
    AT_AUTH,       /* the peer refused our proof, or its own proof was wrong */
    AT_UNANSWERED, /* REMOVE sent, no authenticated answer: it may or may not be appended */
    AT_OK,
    AT_NOT_LEADER,
    AT_RETRY,
    AT_REFUSED,
};

struct rm {
    const struct ctl_opts *o;
    uint64_t id;
    char id_text[17];
    uint8_t secret[TK_AUTH_SECRET_MAX];
    size_t secret_len;
    uint64_t deadline_us;       /* the whole of --timeout */
    struct tk_tls_ctx *tls_ctx; /* --tls-ca: the peer port runs TLS */
    /* The given peer addresses, tried in turn. */
    char targets[TARGETS_MAX][ADDR_CAP];
    int ntargets;
    /* One attempt's connection. */
    struct cl_stream s;
    struct tk_hs hs;
    uint8_t in[IN_CAP];  /* plaintext: r->s's input */
    char next[ADDR_CAP]; /* NOT_LEADER: the leader's peer address, "" if unknown */
    uint64_t next_id;
    char why[768];      /* what went wrong last, for the final message */
    char sent_why[768]; /* why the last REMOVE sent got no authenticated answer */
};

static void vlog(const struct rm *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void vlog(const struct rm *r, const char *fmt, ...)
{
    va_list ap;
    if (!r->o->verbose)
        return;
    fprintf(stderr, "ticketctl: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
}

static void set_why(struct rm *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_why(struct rm *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->why, sizeof r->why, fmt, ap);
    va_end(ap);
    /* Addresses in it may come from the server: one printable line. */
    for (char *c = r->why; *c != '\0'; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f)
            *c = '?';
    vlog(r, "%s", r->why);
}

static int ms_until(uint64_t deadline_us)
{
    uint64_t now = tk_client_now_us();
    return now >= deadline_us ? 0 : (int)((deadline_us - now + 999u) / 1000u);
}

static void sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* ---- the connection: client/stream.h, with this command's sentences -------------- */

/* What the stream said when TLS failed or met plaintext, into r->why. */
static void stream_why(struct rm *r, const char *addr, int rc)
{
    if (rc == CL_STREAM_PLAIN)
        set_why(r,
                "%s: the peer port answered in plaintext: that cluster runs without TLS, so "
                "leave out --tls-ca",
                addr);
    else if (rc == CL_STREAM_TLS)
        set_why(r, "%s: TLS to the peer port failed: %s", addr, r->s.tls_why);
}

/* More plaintext into r->in: > 0 bytes, or a CL_STREAM_* code (r->why
 * set for TLS's). */
static int read_more(struct rm *r, const char *addr)
{
    int got = cl_stream_read_more(&r->s);
    stream_why(r, addr, got);
    return got;
}

/* One line (without "\n", NUL-terminated) into line: its length, or a
 * CL_STREAM_* code (r->why set for TLS's). */
static int read_line(struct rm *r, char *line, const char *addr)
{
    int n = cl_stream_read_line(&r->s, line, LINE_MAX_LEN);
    stream_why(r, addr, n);
    return n;
}

/* ---- one attempt ----------------------------------------------------------------- */

/* A handshake line that did not come: why, and the attempt's end. */
static enum attempt no_line(struct rm *r, const char *addr, int n, const char *what)
{
    if (n == CL_STREAM_TLS || n == CL_STREAM_PLAIN)
        return AT_BAD; /* r->why says how TLS failed */
    if (n == CL_STREAM_FULL) {
        set_why(r, "%s: %s: no line end", addr, what);
        return AT_BAD;
    }
    set_why(r, "%s: %s (timed out or closed)%s", addr, what,
            r->s.tls == NULL ? ": if that cluster runs TLS on its peer port, give --tls-ca" : "");
    return AT_NO_CONN;
}

/* The peer handshake as the dialler (core/handshake.c), meant for addr. */
static enum attempt handshake(struct rm *r, const char *addr)
{
    char line[LINE_MAX_LEN + 1], cnonce[TK_AUTH_HEX_LEN + 1], out[TK_HS_LINE_MAX];
    size_t n_out = 0;
    if (tk_auth_nonce(cnonce) != TK_OK) {
        set_why(r, "no random bytes for a nonce");
        return AT_BAD;
    }
    tk_hs_dial(&r->hs, r->secret, r->secret_len, addr, cnonce);
    if (r->s.tls != NULL && !cl_stream_tls_hello(&r->s)) {
        set_why(r, "%s: TLS could not start: %s", addr, tk_tls_error(r->s.tls));
        return AT_BAD;
    }
    for (int step = 0; step < 2; step++) {
        int n = read_line(r, line, addr);
        if (n < 0)
            return no_line(
                r, addr, n,
                step == 0 ? "no banner from the peer port" : "no answer to the handshake");
        if (step == 0 && r->s.tls != NULL) {
            uint8_t b[TK_TLS_BINDING_LEN];
            if (tk_tls_channel_binding(r->s.tls, b) != TK_OK) {
                set_why(r, "%s: no TLS channel binding", addr);
                return AT_BAD;
            }
            tk_hs_bind(&r->hs, b);
        }
        enum tk_hs_state st = tk_hs_line(&r->hs, line, (size_t)n, out, sizeof out, &n_out);
        if (st == TK_HS_FAILED) {
            bool auth = r->hs.fail == TK_HS_E_REFUSED || r->hs.fail == TK_HS_E_SPROOF;
            set_why(r, "%s: %s%s", addr, tk_hs_why(&r->hs),
                    r->hs.fail == TK_HS_E_REFUSED
                        ? ". Is --peer-secret-file the cluster's peer secret (not the client "
                          "secret), and is the address the one the cluster's --peers lists "
                          "(give --peers)?"
                        : "");
            return auth ? AT_AUTH : AT_BAD;
        }
        if (n_out > 0 && !cl_stream_send(&r->s, out, n_out)) {
            set_why(r, "%s: the handshake could not be sent", addr);
            return AT_NO_CONN;
        }
    }
    TK_ASSERT(r->hs.state == TK_HS_DONE);
    vlog(r, "%s: authenticated to node %016llx", addr, (unsigned long long)r->hs.node_id);
    return AT_OK;
}

/* The JOIN_REPLY f answers our REMOVE; true if its MAC is the node's. */
static bool reply_authentic(const struct rm *r, const struct tk_raft_msg *m)
{
    char text[TK_WIRE_REPLY_TEXT_MAX];
    uint8_t mac[TK_AUTH_MAC_LEN];
    size_t n = tk_wire_reply_text(m, text, sizeof text);
    tk_hs_mac(&r->hs, "reply", text, n, mac);
    return tk_auth_equal(mac, m->join_reply.mac, sizeof mac);
}

static enum attempt reply_status(struct rm *r, const char *addr, const struct tk_raft_msg *m)
{
    size_t al = m->join_reply.leader_peer_addr.len;
    snprintf(r->next, sizeof r->next, "%.*s", (int)(al < ADDR_CAP ? al : 0),
             m->join_reply.leader_peer_addr.p ? m->join_reply.leader_peer_addr.p : "");
    r->next_id = m->join_reply.leader_id;
    switch (m->join_reply.status) {
        case TK_RAFT_JOIN_OK:
            return AT_OK;
        case TK_RAFT_JOIN_NOT_LEADER:
            set_why(r, "%s: not the leader (leader %016llx at %s)", addr,
                    (unsigned long long)r->next_id, r->next[0] ? r->next : "unknown");
            return AT_NOT_LEADER;
        case TK_RAFT_JOIN_RETRY:
            set_why(r,
                    "%s: the leader asks to retry: a membership change is in flight, or %s is "
                    "the leader itself and hands leadership over",
                    addr, r->id_text);
            return AT_RETRY;
        case TK_RAFT_JOIN_REFUSED:
            return AT_REFUSED;
        default:
            set_why(r, "%s: unexpected answer status %u", addr, m->join_reply.status);
            return AT_UNANSWERED;
    }
}

/* Waits for the JOIN_REPLY that answers our REMOVE; other frames are skipped. */
static enum attempt answer(struct rm *r, const char *addr)
{
    static struct tk_wire_scratch scratch; /* no entries: a JOIN_REPLY has none */
    size_t skip = 0, flen = 0;
    for (;;) {
        size_t drop = skip < r->s.in_len ? skip : r->s.in_len;
        cl_stream_consume(&r->s, drop);
        skip -= drop;
        if (skip == 0 && r->s.in_len > TK_WIRE_LENGTH_LEN) { /* the length and the type */
            if (tk_wire_frame_len(r->in, r->s.in_len, &flen) != TK_OK) {
                set_why(r, "%s: REMOVE sent, then a malformed frame", addr);
                return AT_UNANSWERED;
            }
            if (r->in[TK_WIRE_LENGTH_LEN] != TK_RAFT_MSG_JOIN_REPLY) {
                skip = flen; /* not ours, however large */
                continue;
            }
            if (flen > sizeof r->in) {
                set_why(r, "%s: REMOVE sent, then an answer of %zu bytes, far too large", addr,
                        flen);
                return AT_UNANSWERED;
            }
        }
        if (skip == 0 && r->s.in_len > TK_WIRE_LENGTH_LEN && r->s.in_len >= flen) {
            struct tk_wire_frame f;
            if (tk_wire_decode(r->in, flen, &f, &scratch) != TK_OK) {
                set_why(r, "%s: REMOVE sent, then a malformed answer", addr);
                return AT_UNANSWERED;
            }
            cl_stream_consume(&r->s, flen);
            if (!reply_authentic(r, &f.msg)) {
                set_why(r,
                        "%s: REMOVE sent, then an answer without the node's MAC (forged or "
                        "altered on the way): not believed",
                        addr);
                return AT_UNANSWERED;
            }
            return reply_status(r, addr, &f.msg);
        }
        int got = read_more(r, addr);
        if (got <= 0) {
            set_why(r, "%s: REMOVE sent, but no answer (%s)", addr,
                    got == CL_STREAM_CLOSED                          ? "the connection was closed"
                    : got == CL_STREAM_TLS || got == CL_STREAM_PLAIN ? "TLS failed"
                                                                     : "timed out");
            return AT_UNANSWERED;
        }
    }
}

static enum attempt send_remove(struct rm *r, const char *addr)
{
    uint8_t buf[128];
    struct tk_wire_frame f = {.domain_lo = 0, .domain_hi = 0};
    uint64_t from = 0;
    while (from == 0 && tk_auth_random(&from, sizeof from) == TK_OK) {
    }
    f.msg.type = TK_RAFT_MSG_REMOVE;
    f.msg.from = from != 0 ? from : 1; /* only names this link; the leader answers on it */
    f.msg.term = 0;
    f.msg.remove.id = r->id;
    size_t n = tk_wire_encode(&f, buf, sizeof buf);
    if (n == 0 || !cl_stream_send(&r->s, buf, n)) {
        set_why(r, "%s: REMOVE could not be sent", addr);
        return AT_UNANSWERED; /* part of it may have gone out */
    }
    return answer(r, addr);
}

static enum attempt attempt(struct rm *r, const char *addr)
{
    struct tk_addr peer;
    const char *why = "longer than 255 characters";
    r->next[0] = '\0';
    r->next_id = 0;
    if (strlen(addr) > TK_HS_ADDR_MAX || tk_addr_parse(addr, strlen(addr), &peer, &why) != TK_OK) {
        set_why(r, "the peer address '%s' is malformed: %s", addr, why);
        return AT_BAD;
    }
    const char *host = peer.host;
    unsigned port = peer.port;
    vlog(r, "asking %s to remove %s", addr, r->id_text);
    /* A quarter of --timeout per attempt (at least 1 s): a stopped member
     * among the given addresses accepts and never speaks, and must not eat
     * the whole budget. */
    uint64_t share_us = TK_MAX(r->o->timeout_ms / 4u, 1000u) * 1000u;
    r->s.deadline_us = TK_MIN(r->deadline_us, tk_client_now_us() + share_us);
    if (!cl_stream_dial(&r->s, host, port)) {
        set_why(r, "%s: the peer port did not answer", addr);
        return AT_NO_CONN;
    }
    enum attempt a = AT_BAD;
    if (r->tls_ctx != NULL && !cl_stream_tls(&r->s, r->tls_ctx, host))
        set_why(r, "out of memory for TLS");
    else
        a = handshake(r, addr);
    if (a == AT_OK)
        a = send_remove(r, addr);
    cl_stream_close(&r->s);
    return a;
}

/* ---- the command ----------------------------------------------------------------- */

/* Exactly 16 hex digits, not all zero (a NodeId as `members` prints it). */
static bool parse_node_id(const char *s, uint64_t *id)
{
    if (strlen(s) != 16 || strspn(s, "0123456789abcdefABCDEF") != 16)
        return false;
    *id = strtoull(s, NULL, 16);
    return *id != 0;
}

static int finish(const struct rm *r, int code, const char *outcome, const char *text)
{
    char msg[2048];
    if (text != NULL) {
        /* Addresses in it come from the server: one printable line. */
        snprintf(msg, sizeof msg, "%s", text);
        for (char *c = msg; *c != '\0'; c++)
            if ((unsigned char)*c < 0x20 || *c == 0x7f)
                *c = '?';
    }
    if (r->o->json) {
        json_t *j = json_object();
        json_object_set_new(j, "outcome", ctl_jstr(outcome));
        json_object_set_new(j, "id", ctl_jstr(r->id_text));
        if (text != NULL)
            json_object_set_new(j, "reason", ctl_jstr(msg));
        ctl_json_print(stdout, j, "\n");
    } else if (text == NULL) {
        printf("removed %s\n", r->id_text);
    } else {
        fprintf(stderr, "ticketctl: remove-member %s: %s\n", r->id_text, msg);
    }
    return code;
}

/* The peer addresses to ask: --peers as given, else each --addr host at
 * its client port + 1. 0, or CTL_EXIT_USAGE (said on stderr). */
static int targets(struct rm *r)
{
    const char *list = r->o->peers != NULL && r->o->peers[0] != '\0' ? r->o->peers : r->o->addr;
    bool derive = list == r->o->addr;
    const char *flag = derive ? "--addr" : "--peers";
    struct tk_addr addrs[CTL_ADDRS_MAX];
    size_t n = 0;
    _Static_assert(TARGETS_MAX >= CTL_ADDRS_MAX, "a target for every address");
    int rc = ctl_parse_addrs(flag, list, addrs, &n);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        char *t = r->targets[r->ntargets++];
        if (derive && addrs[i].port == 65535) {
            tk_addr_format(&addrs[i], t, ADDR_CAP);
            return ctl_die_usage(
                "bad --addr: '%s': its peer port (client port + 1) is past "
                "65535; give --peers",
                t);
        }
        if (derive)
            addrs[i].port++;
        if (tk_addr_format(&addrs[i], t, ADDR_CAP) >= ADDR_CAP)
            return ctl_die_usage("bad %s: '%.64s...': longer than %d characters", flag, t,
                                 ADDR_CAP - 1);
    }
    return rc;
}

static int remove_loop(struct rm *r)
{
    char target[ADDR_CAP];
    int hops = 0, next_target = 0;
    bool maybe_sent = false; /* a REMOVE went out unanswered: it may have been appended */
    snprintf(target, sizeof target, "%s", r->targets[next_target++ % r->ntargets]);
    for (;;) {
        bool pause = false;
        enum attempt a = attempt(r, target);
        if (a == AT_UNANSWERED) {
            maybe_sent = true;
            memcpy(r->sent_why, r->why, sizeof r->why);
        }
        bool move_on = false; /* to the next given address */
        switch (a) {
            case AT_OK:
                return finish(r, CTL_EXIT_OK, "removed", NULL);
            case AT_REFUSED: {
                char msg[700];
                snprintf(msg, sizeof msg,
                         "refused by the leader at %s: the member answered it within an "
                         "election timeout (it is alive: stop it for good first), or it is "
                         "the last voter; nothing removed",
                         target);
                return finish(r, CTL_EXIT_INVALID, "refused", msg);
            }
            case AT_AUTH:
                return finish(r, CTL_EXIT_FAIL, "auth", r->why);
            case AT_NOT_LEADER:
                /* The leader an authenticated answer named; none (an
                 * election) or hops enough: the next given address. */
                move_on = r->next[0] == '\0' || strcmp(r->next, target) == 0 || hops >= HOPS_MAX;
                if (!move_on) {
                    snprintf(target, sizeof target, "%s", r->next);
                    hops++;
                }
                break;
            case AT_RETRY:
                hops = 0;
                pause = true;
                break;
            default:
                move_on = true;
                break;
        }
        if (move_on) {
            hops = 0;
            pause = next_target % r->ntargets == 0; /* a whole round asked */
            snprintf(target, sizeof target, "%s", r->targets[next_target++ % r->ntargets]);
        }
        if (pause && ms_until(r->deadline_us) <= RETRY_PAUSE_MS)
            break;
        if (pause)
            sleep_ms(RETRY_PAUSE_MS);
        else if (ms_until(r->deadline_us) == 0)
            break;
    }
    if (maybe_sent) {
        char msg[sizeof r->sent_why + 300];
        snprintf(msg, sizeof msg,
                 "a REMOVE was sent but no authenticated answer came before --timeout: the "
                 "member may or may not have been removed; check `ticketctl members` (asking "
                 "again is safe: a non-member is answered as removed). %s",
                 r->sent_why);
        return finish(r, CTL_EXIT_INDETERMINATE, "indeterminate", msg);
    }
    return finish(r, CTL_EXIT_UNAVAILABLE, "unavailable", r->why);
}

/* --tls-ca: the peer port runs TLS; --tls-cert/--tls-key present a
 * certificate the peer port accepts (one that names a member, or one from
 * its --tls-peer-ca). */
static int tls_setup(struct rm *r)
{
    if (r->o->tls_ca == NULL || r->o->tls_ca[0] == '\0') {
        if (r->o->tls_cert != NULL || r->o->tls_key != NULL)
            return ctl_die_usage("%s", "--tls-cert and --tls-key need --tls-ca");
        return 0;
    }
    struct tk_tls_opts to = {.ca = r->o->tls_ca, .cert = r->o->tls_cert, .key = r->o->tls_key};
    char err[TK_TLS_ERR_MAX];
    if (tk_tls_ctx_new(&to, &r->tls_ctx, err, sizeof err) != TK_OK)
        return ctl_die_usage("TLS: %s", err);
    return 0;
}

int ctl_remove_member(const struct ctl_opts *o)
{
    static struct rm r;
    memset(&r, 0, sizeof r);
    r.o = o;
    cl_stream_init(&r.s, r.in, sizeof r.in);
    if (!parse_node_id(o->key, &r.id))
        return ctl_die_usage("bad NODEID '%s': 16 hex digits, as `ticketctl members` shows",
                             o->key);
    snprintf(r.id_text, sizeof r.id_text, "%016llx", (unsigned long long)r.id);
    if (o->peer_secret_file == NULL || o->peer_secret_file[0] == '\0')
        return ctl_die_usage("%s",
                             "no peer secret: --peer-secret-file PATH or "
                             "TICKETING_PEER_SECRET_FILE (the cluster's peer secret, "
                             "not the client secret)");
    int rc = tk_auth_load_secret(o->peer_secret_file, r.secret, sizeof r.secret, &r.secret_len);
    if (rc != TK_OK)
        return ctl_die_usage("cannot use the peer secret file '%s' (readable, 16-4096 bytes?)",
                             o->peer_secret_file);
    if ((rc = targets(&r)) != 0 || (rc = tls_setup(&r)) != 0) {
        explicit_bzero(r.secret, sizeof r.secret);
        return rc;
    }
    r.deadline_us = tk_client_now_us() + o->timeout_ms * 1000u;
    rc = remove_loop(&r);
    explicit_bzero(r.secret, sizeof r.secret);
    tk_tls_ctx_unref(r.tls_ctx);
    tk_tls_thread_done();
    fflush(stdout);
    return rc;
}
