/* ticketctl's commands over the leader's peer port: remove-member (drop a
 * member that is gone for good) and ring apply (give a group its ring,
 * SPEC 15). Both ask one request of the leader and believe one answer.
 *
 * The peer port speaks the peer handshake (TICKETING-PEER/2 with the peer
 * secret, core/handshake.h), inside TLS when --tls-ca is given, then
 * binary frames (SPEC 9): one request frame out (REMOVE, SLOTS), its
 * answer back (JOIN_REPLY, SLOTS_REPLY). The leader refuses to remove a
 * member it heard from within an election timeout, so a live member (a
 * typo included) cannot be taken out this way. A ring the leader takes is
 * answered RETRY "the ring is being committed" and asked again until the
 * leader answers OK (it is the committed ring) or REFUSED.
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
 *
 * The shared part (a struct peer): the targets, one attempt (dial, TLS,
 * handshake, the request, its authenticated answer, on a new connection
 * each time) and the loop over attempts (peer_loop). What differs per
 * command is a struct peer_ask: the request's payload and how the
 * answer's status reads; and each command's own setup and final message.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client/ticketctl_peer.h"
#include "client/ticketing.h"

#define RETRY_PAUSE_MS 200
#define HOPS_MAX 3               /* NOT_LEADER answers followed in a row */
#define LINE_MAX_LEN 512         /* a handshake line; ours are under 400 bytes */
#define RING_FILE_MAX (1u << 20) /* a ring file of 1,024 longest ranges is under 700 KiB */

_Static_assert(OUT_CAP - TK_WIRE_LENGTH_LEN <= (8u << 20), "a SLOTS frame fits every peer port");
_Static_assert(TK_SLOTS_NAME_MAX <= TK_RAFT_ADDR_MAX, "a group name is a wire string");

static void vlog(const struct peer *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void vlog(const struct peer *p, const char *fmt, ...)
{
    va_list ap;
    if (!p->o->verbose)
        return;
    fprintf(stderr, "ticketctl: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
}

void printable(char *s)
{
    for (char *c = s; *c != '\0'; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f)
            *c = '?';
}

static void set_why(struct peer *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_why(struct peer *p, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->why, sizeof p->why, fmt, ap);
    va_end(ap);
    printable(p->why);
    vlog(p, "%s", p->why);
}

/* The outcome became unknown: p->why says how. */
static void note_maybe_sent(struct peer *p)
{
    p->maybe_sent = true;
    memcpy(p->sent_why, p->why, sizeof p->why);
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

/* ---- the connection: client/stream.h, with these commands' sentences ------------- */

/* What the stream said when TLS failed or met plaintext, into p->why. */
static void stream_why(struct peer *p, const char *addr, int rc)
{
    if (rc == CL_STREAM_PLAIN)
        set_why(p,
                "%s: the peer port answered in plaintext: that cluster runs without TLS, so "
                "leave out --tls-ca",
                addr);
    else if (rc == CL_STREAM_TLS)
        set_why(p, "%s: TLS to the peer port failed: %s", addr, p->s.tls_why);
}

/* More plaintext into p->in: > 0 bytes, or a CL_STREAM_* code (p->why
 * set for TLS's). */
static int read_more(struct peer *p, const char *addr)
{
    int got = cl_stream_read_more(&p->s);
    stream_why(p, addr, got);
    return got;
}

/* One line (without "\n", NUL-terminated) into line: its length, or a
 * CL_STREAM_* code (p->why set for TLS's). */
static int read_line(struct peer *p, char *line, const char *addr)
{
    int n = cl_stream_read_line(&p->s, line, LINE_MAX_LEN);
    stream_why(p, addr, n);
    return n;
}

/* ---- one attempt ----------------------------------------------------------------- */

/* A handshake line that did not come: why, and the attempt's end. */
static enum attempt no_line(struct peer *p, const char *addr, int n, const char *what)
{
    if (n == CL_STREAM_TLS || n == CL_STREAM_PLAIN)
        return AT_BAD; /* p->why says how TLS failed */
    if (n == CL_STREAM_FULL) {
        set_why(p, "%s: %s: no line end", addr, what);
        return AT_BAD;
    }
    set_why(p, "%s: %s (timed out or closed)%s", addr, what,
            p->s.tls == NULL ? ": if that cluster runs TLS on its peer port, give --tls-ca" : "");
    return AT_NO_CONN;
}

/* The peer handshake as the dialler (core/handshake.c), meant for addr. */
static enum attempt handshake(struct peer *p, const char *addr)
{
    char line[LINE_MAX_LEN + 1], cnonce[TK_AUTH_HEX_LEN + 1], out[TK_HS_LINE_MAX];
    size_t n_out = 0;
    if (tk_auth_nonce(cnonce) != TK_OK) {
        set_why(p, "no random bytes for a nonce");
        return AT_BAD;
    }
    tk_hs_dial(&p->hs, p->secret, p->secret_len, addr, cnonce);
    if (p->s.tls != NULL && !cl_stream_tls_hello(&p->s)) {
        set_why(p, "%s: TLS could not start: %s", addr, tk_tls_error(p->s.tls));
        return AT_BAD;
    }
    for (int step = 0; step < 2; step++) {
        int n = read_line(p, line, addr);
        if (n < 0)
            return no_line(
                p, addr, n,
                step == 0 ? "no banner from the peer port" : "no answer to the handshake");
        if (step == 0 && p->s.tls != NULL) {
            uint8_t b[TK_TLS_BINDING_LEN];
            if (tk_tls_channel_binding(p->s.tls, b) != TK_OK) {
                set_why(p, "%s: no TLS channel binding", addr);
                return AT_BAD;
            }
            tk_hs_bind(&p->hs, b);
        }
        enum tk_hs_state st = tk_hs_line(&p->hs, line, (size_t)n, out, sizeof out, &n_out);
        if (st == TK_HS_FAILED) {
            bool auth = p->hs.fail == TK_HS_E_REFUSED || p->hs.fail == TK_HS_E_SPROOF;
            set_why(p, "%s: %s%s", addr, tk_hs_why(&p->hs),
                    p->hs.fail == TK_HS_E_REFUSED
                        ? ". Is --peer-secret-file the cluster's peer secret (not the client "
                          "secret), and is the address the one the cluster's --peers lists "
                          "(give --peers)?"
                        : "");
            return auth ? AT_AUTH : AT_BAD;
        }
        if (n_out > 0 && !cl_stream_send(&p->s, out, n_out)) {
            set_why(p, "%s: the handshake could not be sent", addr);
            return AT_NO_CONN;
        }
    }
    TK_ASSERT(p->hs.state == TK_HS_DONE);
    vlog(p, "%s: authenticated to node %016llx", addr, (unsigned long long)p->hs.node_id);
    return AT_OK;
}

/* The answer m to our request; true if its MAC is the node's. A
 * SLOTS_REPLY's MAC is checked exactly as a JOIN_REPLY's: the text
 * tk_wire_reply_text makes of it, under this link's handshake. */
static bool reply_authentic(const struct peer *p, const struct tk_raft_msg *m)
{
    char text[TK_WIRE_REPLY_TEXT_MAX];
    uint8_t mac[TK_AUTH_MAC_LEN];
    TK_ASSERT(m->type == TK_RAFT_MSG_JOIN_REPLY || m->type == TK_RAFT_MSG_SLOTS_REPLY);
    _Static_assert(sizeof m->join_reply.mac == TK_AUTH_MAC_LEN, "a MAC");
    _Static_assert(sizeof m->slots_reply.mac == TK_AUTH_MAC_LEN, "a MAC");
    const uint8_t *theirs =
        m->type == TK_RAFT_MSG_JOIN_REPLY ? m->join_reply.mac : m->slots_reply.mac;
    size_t n = tk_wire_reply_text(m, text, sizeof text);
    tk_hs_mac(&p->hs, "reply", text, n, mac);
    return tk_auth_equal(mac, theirs, sizeof mac);
}

/* The leader an authenticated NOT_LEADER names, into p->next and p->next_id. */
static void note_leader(struct peer *p, uint64_t id, const struct tk_raft_str *addr)
{
    size_t al = addr->len;
    snprintf(p->next, sizeof p->next, "%.*s", (int)(al < ADDR_CAP ? al : 0),
             addr->p ? addr->p : "");
    p->next_id = id;
}

static enum attempt not_leader(struct peer *p, const char *addr)
{
    set_why(p, "%s: not the leader (leader %016llx at %s)", addr, (unsigned long long)p->next_id,
            p->next[0] ? p->next : "unknown");
    return AT_NOT_LEADER;
}

/* Waits for the answer to our request; other frames are skipped. */
static enum attempt answer(struct peer *p, const char *addr)
{
    static struct tk_wire_scratch scratch; /* no entries: the answers have none */
    const char *req = p->ask->frame;
    size_t skip = 0, flen = 0;
    for (;;) {
        size_t drop = skip < p->s.in_len ? skip : p->s.in_len;
        cl_stream_consume(&p->s, drop);
        skip -= drop;
        if (skip == 0 && p->s.in_len > TK_WIRE_LENGTH_LEN) { /* the length and the type */
            if (tk_wire_frame_len(p->in, p->s.in_len, &flen) != TK_OK) {
                set_why(p, "%s: %s sent, then a malformed frame", addr, req);
                return AT_UNANSWERED;
            }
            if (p->in[TK_WIRE_LENGTH_LEN] != p->ask->reply_type) {
                skip = flen; /* not ours, however large */
                continue;
            }
            if (flen > sizeof p->in) {
                set_why(p, "%s: %s sent, then an answer of %zu bytes, far too large", addr, req,
                        flen);
                return AT_UNANSWERED;
            }
        }
        if (skip == 0 && p->s.in_len > TK_WIRE_LENGTH_LEN && p->s.in_len >= flen) {
            struct tk_wire_frame f;
            if (tk_wire_decode(p->in, flen, &f, &scratch) != TK_OK) {
                set_why(p, "%s: %s sent, then a malformed answer", addr, req);
                return AT_UNANSWERED;
            }
            /* f's strings point into p->in: read them all (status copies
             * what it keeps) before the frame is consumed, which moves
             * whatever came after it over them. */
            enum attempt a = AT_UNANSWERED;
            if (reply_authentic(p, &f.msg))
                a = p->ask->status(p, addr, &f.msg);
            else
                set_why(p,
                        "%s: %s sent, then an answer without the node's MAC (forged or "
                        "altered on the way): not believed",
                        addr, req);
            cl_stream_consume(&p->s, flen);
            return a;
        }
        int got = read_more(p, addr);
        if (got <= 0) {
            set_why(p, "%s: %s sent, but no answer (%s)", addr, req,
                    got == CL_STREAM_CLOSED                          ? "the connection was closed"
                    : got == CL_STREAM_TLS || got == CL_STREAM_PLAIN ? "TLS failed"
                                                                     : "timed out");
            return AT_UNANSWERED;
        }
    }
}

static enum attempt peer_send(struct peer *p, const char *addr)
{
    struct tk_wire_frame f = {.domain_lo = 0, .domain_hi = 0};
    uint64_t from = 0;
    while (from == 0 && tk_auth_random(&from, sizeof from) == TK_OK) {
    }
    p->ask->fill(p, &f.msg);
    f.msg.from = from != 0 ? from : 1; /* only names this link; the leader answers on it */
    f.msg.term = 0;
    size_t n = tk_wire_encode(&f, p->out, sizeof p->out);
    if (n == 0 || !cl_stream_send(&p->s, p->out, n)) {
        set_why(p, "%s: %s could not be sent", addr, p->ask->frame);
        return AT_UNANSWERED; /* part of it may have gone out */
    }
    return answer(p, addr);
}

static enum attempt attempt(struct peer *p, const char *addr)
{
    struct tk_addr peer;
    const char *why = "longer than 255 characters";
    p->next[0] = '\0';
    p->next_id = 0;
    if (strlen(addr) > TK_HS_ADDR_MAX || tk_addr_parse(addr, strlen(addr), &peer, &why) != TK_OK) {
        set_why(p, "the peer address '%s' is malformed: %s", addr, why);
        return AT_BAD;
    }
    const char *host = peer.host;
    unsigned port = peer.port;
    vlog(p, "asking %s to %s", addr, p->what);
    /* A quarter of --timeout per attempt (at least 1 s): a stopped member
     * among the given addresses accepts and never speaks, and must not eat
     * the whole budget. */
    uint64_t share_us = TK_MAX(p->o->timeout_ms / 4u, 1000u) * 1000u;
    p->s.deadline_us = TK_MIN(p->deadline_us, tk_client_now_us() + share_us);
    if (!cl_stream_dial(&p->s, host, port)) {
        set_why(p, "%s: the peer port did not answer", addr);
        return AT_NO_CONN;
    }
    enum attempt a = AT_BAD;
    if (p->tls_ctx != NULL && !cl_stream_tls(&p->s, p->tls_ctx, host))
        set_why(p, "out of memory for TLS");
    else
        a = handshake(p, addr);
    if (a == AT_OK)
        a = peer_send(p, addr);
    cl_stream_close(&p->s);
    return a;
}

/* ---- the loop over attempts ------------------------------------------------------ */

enum attempt peer_loop(struct peer *p)
{
    int hops = 0, next_target = 0;
    TK_ASSERT(p->ntargets > 0);
    snprintf(p->target, sizeof p->target, "%s", p->targets[next_target++ % p->ntargets]);
    for (;;) {
        bool pause = false, move_on = false; /* move on: to the next given address */
        enum attempt a = attempt(p, p->target);
        if (a == AT_UNANSWERED)
            note_maybe_sent(p);
        switch (a) {
            case AT_OK:
            case AT_REFUSED:
            case AT_AUTH:
                return a;
            case AT_NOT_LEADER:
                /* The leader an authenticated answer named; none (an
                 * election) or hops enough: the next given address. */
                move_on = p->next[0] == '\0' || strcmp(p->next, p->target) == 0 || hops >= HOPS_MAX;
                if (!move_on) {
                    snprintf(p->target, sizeof p->target, "%s", p->next);
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
            pause = next_target % p->ntargets == 0; /* a whole round asked */
            snprintf(p->target, sizeof p->target, "%s", p->targets[next_target++ % p->ntargets]);
        }
        int pause_ms = p->retry_pause_ms ? p->retry_pause_ms : RETRY_PAUSE_MS;
        if (pause && ms_until(p->deadline_us) <= pause_ms)
            break;
        if (pause)
            sleep_ms(pause_ms);
        else if (ms_until(p->deadline_us) == 0)
            break;
    }
    return p->maybe_sent ? AT_UNANSWERED : AT_NO_CONN;
}

/* ---- setup shared by the commands ------------------------------------------------ */

/* The peer addresses to ask: --peers as given, else each --addr host at
 * its client port + 1. 0, or CTL_EXIT_USAGE (said on stderr). */
static int targets(struct peer *p)
{
    const char *list = p->o->peers != NULL && p->o->peers[0] != '\0' ? p->o->peers : p->o->addr;
    bool derive = list == p->o->addr;
    const char *flag = derive ? "--addr" : "--peers";
    struct tk_addr addrs[CTL_ADDRS_MAX];
    size_t n = 0;
    _Static_assert(TARGETS_MAX >= CTL_ADDRS_MAX, "a target for every address");
    int rc = ctl_parse_addrs(flag, list, addrs, &n);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        char *t = p->targets[p->ntargets++];
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

/* --tls-ca: the peer port runs TLS; --tls-cert/--tls-key present a
 * certificate the peer port accepts (one that names a member, or one from
 * its --tls-peer-ca). */
static int tls_setup(struct peer *p)
{
    if (p->o->tls_ca == NULL || p->o->tls_ca[0] == '\0') {
        if (p->o->tls_cert != NULL || p->o->tls_key != NULL)
            return ctl_die_usage("%s", "--tls-cert and --tls-key need --tls-ca");
        return 0;
    }
    struct tk_tls_opts to = {.ca = p->o->tls_ca, .cert = p->o->tls_cert, .key = p->o->tls_key};
    char err[TK_TLS_ERR_MAX];
    if (tk_tls_ctx_new(&to, &p->tls_ctx, err, sizeof err) != TK_OK)
        return ctl_die_usage("TLS: %s", err);
    return 0;
}

int peer_open(struct peer *p, const struct ctl_opts *o, const struct peer_ask *ask)
{
    p->o = o;
    p->ask = ask;
    cl_stream_init(&p->s, p->in, sizeof p->in);
    if (o->peer_secret_file == NULL || o->peer_secret_file[0] == '\0')
        return ctl_die_usage("%s",
                             "no peer secret: --peer-secret-file PATH or "
                             "TICKETING_PEER_SECRET_FILE (the cluster's peer secret, "
                             "not the client secret)");
    int rc = tk_auth_load_secret(o->peer_secret_file, p->secret, sizeof p->secret, &p->secret_len);
    if (rc != TK_OK)
        return ctl_die_usage("cannot use the peer secret file '%s' (readable, 16-4096 bytes?)",
                             o->peer_secret_file);
    if ((rc = targets(p)) != 0 || (rc = tls_setup(p)) != 0)
        return rc;
    p->deadline_us = tk_client_now_us() + o->timeout_ms * 1000u;
    return 0;
}

void peer_close(struct peer *p)
{
    explicit_bzero(p->secret, sizeof p->secret);
    tk_tls_ctx_unref(p->tls_ctx);
    p->tls_ctx = NULL;
    tk_tls_thread_done();
    fflush(stdout);
}

/* ---- remove-member ---------------------------------------------------------------- */

static void remove_fill(const struct peer *p, struct tk_raft_msg *m)
{
    m->type = TK_RAFT_MSG_REMOVE;
    m->remove.id = p->id;
}

static enum attempt remove_status(struct peer *p, const char *addr, const struct tk_raft_msg *m)
{
    note_leader(p, m->join_reply.leader_id, &m->join_reply.leader_peer_addr);
    switch (m->join_reply.status) {
        case TK_RAFT_JOIN_OK:
            return AT_OK;
        case TK_RAFT_JOIN_NOT_LEADER:
            return not_leader(p, addr);
        case TK_RAFT_JOIN_RETRY:
            set_why(p,
                    "%s: the leader asks to retry: a membership change is in flight, or %s is "
                    "the leader itself and hands leadership over",
                    addr, p->id_text);
            return AT_RETRY;
        case TK_RAFT_JOIN_REFUSED:
            return AT_REFUSED;
        default:
            set_why(p, "%s: unexpected answer status %u", addr, m->join_reply.status);
            return AT_UNANSWERED;
    }
}

static const struct peer_ask ask_remove = {
    .frame = "REMOVE",
    .reply_type = TK_RAFT_MSG_JOIN_REPLY,
    .fill = remove_fill,
    .status = remove_status,
};

/* Exactly 16 hex digits, not all zero (a NodeId as `members` prints it). */
static bool parse_node_id(const char *s, uint64_t *id)
{
    if (strlen(s) != 16 || strspn(s, "0123456789abcdefABCDEF") != 16)
        return false;
    *id = strtoull(s, NULL, 16);
    return *id != 0;
}

static int remove_finish(const struct peer *p, int code, const char *outcome, const char *text)
{
    char msg[2048];
    if (text != NULL) {
        snprintf(msg, sizeof msg, "%s", text);
        printable(msg); /* addresses in it come from the server */
    }
    if (p->o->json) {
        json_t *j = json_object();
        json_object_set_new(j, "outcome", ctl_jstr(outcome));
        json_object_set_new(j, "id", ctl_jstr(p->id_text));
        if (text != NULL)
            json_object_set_new(j, "reason", ctl_jstr(msg));
        ctl_json_print(stdout, j, "\n");
    } else if (text == NULL) {
        printf("removed %s\n", p->id_text);
    } else {
        fprintf(stderr, "ticketctl: remove-member %s: %s\n", p->id_text, msg);
    }
    return code;
}

static int remove_result(struct peer *p, enum attempt a)
{
    char msg[sizeof p->sent_why + 300];
    switch (a) {
        case AT_OK:
            return remove_finish(p, CTL_EXIT_OK, "removed", NULL);
        case AT_REFUSED:
            snprintf(msg, sizeof msg,
                     "refused by the leader at %s: the member answered it within an "
                     "election timeout (it is alive: stop it for good first), or it is "
                     "the last voter; nothing removed",
                     p->target);
            return remove_finish(p, CTL_EXIT_INVALID, "refused", msg);
        case AT_AUTH:
            return remove_finish(p, CTL_EXIT_FAIL, "auth", p->why);
        case AT_UNANSWERED:
            snprintf(msg, sizeof msg,
                     "a REMOVE was sent but no authenticated answer came before --timeout: the "
                     "member may or may not have been removed; check `ticketctl members` "
                     "(asking again is safe: a non-member is answered as removed). %s",
                     p->sent_why);
            return remove_finish(p, CTL_EXIT_INDETERMINATE, "indeterminate", msg);
        default:
            return remove_finish(p, CTL_EXIT_UNAVAILABLE, "unavailable", p->why);
    }
}

int ctl_remove_member(const struct ctl_opts *o)
{
    static struct peer p;
    memset(&p, 0, sizeof p);
    p.o = o;
    if (!parse_node_id(o->key, &p.id))
        return ctl_die_usage("bad NODEID '%s': 16 hex digits, as `ticketctl members` shows",
                             o->key);
    snprintf(p.id_text, sizeof p.id_text, "%016llx", (unsigned long long)p.id);
    snprintf(p.what, sizeof p.what, "remove %s", p.id_text);
    int rc = peer_open(&p, o, &ask_remove);
    if (rc == 0)
        rc = remove_result(&p, peer_loop(&p));
    peer_close(&p);
    return rc;
}

/* ---- ring apply -------------------------------------------------------------------- */

static void slots_fill(const struct peer *p, struct tk_raft_msg *m)
{
    size_t glen = strlen(p->o->group);
    TK_ASSERT(tk_slots_name_ok(p->o->group, glen));
    TK_ASSERT((p->ring_len > 0) == (p->op != TK_RAFT_SLOTS_FREEZE));
    m->type = TK_RAFT_MSG_SLOTS;
    m->slots.group = (struct tk_raft_str){p->o->group, (uint16_t)glen};
    m->slots.ring = p->ring;
    m->slots.ring_len = p->ring_len;
    m->slots.op = p->op;
    m->slots.first = p->first;
    m->slots.last = p->last;
    if (p->other != NULL)
        m->slots.peer = (struct tk_raft_str){p->other, (uint16_t)strlen(p->other)};
    m->slots.counter = p->counter;
}

/* A SLOTS_REPLY. RETRY "... being committed" means a ring, perhaps ours,
 * is in the leader's log and not yet applied: from then on the outcome is
 * unknown until an OK or a REFUSED (another ring's RETRY says the same
 * words; counting it as ours only makes a timeout say "unknown" where
 * "not taken" was true, never the reverse). */
static enum attempt slots_status(struct peer *p, const char *addr, const struct tk_raft_msg *m)
{
    const struct tk_raft_str *w = &m->slots_reply.why;
    char why[TK_RAFT_SLOTS_WHY_MAX + 1];
    snprintf(why, sizeof why, "%.*s", (int)TK_MIN(w->len, TK_RAFT_SLOTS_WHY_MAX), w->p ? w->p : "");
    printable(why);
    note_leader(p, m->slots_reply.leader_id, &m->slots_reply.leader_peer_addr);
    switch (m->slots_reply.status) {
        case TK_RAFT_SLOTS_OK:
            p->got_counter = m->slots_reply.counter;
            p->got_version = m->slots_reply.version;
            /* A ring is answered with its version; a step of a move with the
             * group's (a freeze: the ring before; later rings may follow). */
            if (m->slots_reply.version == p->version ||
                (p->op != TK_RAFT_SLOTS_RING &&
                 (p->op == TK_RAFT_SLOTS_FREEZE || m->slots_reply.version >= p->version)))
                return AT_OK;
            set_why(p, "%s: SLOTS sent, then an answer that version %llu is committed, not %llu",
                    addr, (unsigned long long)m->slots_reply.version,
                    (unsigned long long)p->version);
            return AT_UNANSWERED;
        case TK_RAFT_SLOTS_NOT_LEADER:
            return not_leader(p, addr);
        case TK_RAFT_SLOTS_RETRY:
            set_why(p, "%s: the leader asks to retry: %s", addr,
                    why[0] ? why : "it cannot take a ring now");
            if (strstr(why, "being committed") != NULL)
                note_maybe_sent(p);
            return AT_RETRY;
        case TK_RAFT_SLOTS_REFUSED:
            snprintf(p->refusal, sizeof p->refusal, "%s", why[0] ? why : "(no reason given)");
            return AT_REFUSED;
        default:
            set_why(p, "%s: unexpected answer status %u", addr, m->slots_reply.status);
            return AT_UNANSWERED;
    }
}

const struct peer_ask peer_ask_slots = {
    .frame = "SLOTS",
    .reply_type = TK_RAFT_MSG_SLOTS_REPLY,
    .fill = slots_fill,
    .status = slots_status,
};

static int ring_finish(const struct peer *p, int code, const char *outcome, const char *text)
{
    char msg[2048];
    if (text != NULL) {
        snprintf(msg, sizeof msg, "%s", text);
        printable(msg); /* addresses and sentences in it come from the server */
    }
    if (p->o->json) {
        json_t *j = json_object();
        json_object_set_new(j, "group", ctl_jstr(p->o->group));
        json_object_set_new(j, "version", ctl_ju64(p->version));
        json_object_set_new(j, "outcome", ctl_jstr(outcome));
        if (text != NULL)
            json_object_set_new(j, "reason", ctl_jstr(msg));
        ctl_json_print(stdout, j, "\n");
    } else if (text == NULL) {
        printf("ring version %llu committed in group %s\n", (unsigned long long)p->version,
               p->o->group);
    } else if (code == CTL_EXIT_INVALID) {
        fprintf(stderr, "ticketctl: ring refused by the leader: %s\n", msg);
    } else {
        fprintf(stderr, "ticketctl: ring apply: %s\n", msg);
    }
    return code;
}

static int ring_result(struct peer *p, enum attempt a)
{
    char msg[sizeof p->sent_why + 300];
    switch (a) {
        case AT_OK:
            return ring_finish(p, CTL_EXIT_OK, "committed", NULL);
        case AT_REFUSED:
            return ring_finish(p, CTL_EXIT_INVALID, "refused", p->refusal);
        case AT_AUTH:
            return ring_finish(p, CTL_EXIT_FAIL, "auth", p->why);
        case AT_UNANSWERED:
            snprintf(msg, sizeof msg,
                     "the ring was sent but no authenticated answer said it committed before "
                     "--timeout: it may or may not be committed; check `ticketctl ring show` "
                     "(asking again is safe: the committed ring is answered as committed). %s",
                     p->sent_why);
            return ring_finish(p, CTL_EXIT_INDETERMINATE, "indeterminate", msg);
        default:
            return ring_finish(p, CTL_EXIT_UNAVAILABLE, "unavailable", p->why);
    }
}

int peer_ring_load(struct peer *p, const char *path, struct tk_slot_ring *r)
{
    char why[256];
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return ctl_die_usage("%s: cannot open: %s", path, strerror(errno));
    char *text = malloc(RING_FILE_MAX + 1);
    struct tk_slot_ring *check = malloc(sizeof *check);
    size_t n = text != NULL ? fread(text, 1, RING_FILE_MAX + 1, f) : 0;
    int rc = 0;
    if (text == NULL || check == NULL || ferror(f)) {
        rc = ctl_die_usage("%s: cannot read: %s", path,
                           text && check ? strerror(errno) : "no memory");
    } else if (n > RING_FILE_MAX) {
        fprintf(stderr, "ticketctl: %s: larger than 1 MiB: not a ring file\n", path);
        rc = CTL_EXIT_INVALID;
    } else if (tk_slots_parse_file(text, n, r, why, sizeof why) != TK_OK) {
        printable(why);
        fprintf(stderr, "ticketctl: %s: %s\n", path, why);
        rc = CTL_EXIT_INVALID;
    } else {
        p->version = r->version;
        p->ring_len = (uint32_t)tk_slots_encode(r, p->ring, sizeof p->ring);
        /* Checked after encoding as the leader will check it. */
        TK_ASSERT(p->ring_len > 0);
        TK_ASSERT(tk_slots_decode(p->ring, p->ring_len, check, NULL) == TK_OK);
        TK_ASSERT(tk_slots_equal(r, check));
    }
    free(check);
    free(text);
    fclose(f);
    return rc;
}

int ctl_ring_apply(const struct ctl_opts *o)
{
    static struct peer p;
    memset(&p, 0, sizeof p);
    p.o = o;
    if (o->group == NULL || o->group[0] == '\0')
        return ctl_die_usage("%s", "ring apply needs --group NAME (the group the ring is for)");
    if (!tk_slots_name_ok(o->group, strlen(o->group)))
        return ctl_die_usage("bad --group '%.80s': 1-64 bytes 0x21-0x7E, without ';' or '@'",
                             o->group);
    if (o->file == NULL || o->file[0] == '\0')
        return ctl_die_usage("%s", "ring apply needs FILE (the ring file)");
    p.op = TK_RAFT_SLOTS_RING;
    int rc = peer_open(&p, o, &peer_ask_slots);
    struct tk_slot_ring *r = rc == 0 ? malloc(sizeof *r) : NULL;
    if (rc == 0 && r == NULL) {
        fprintf(stderr, "ticketctl: no memory for a ring\n");
        rc = CTL_EXIT_FAIL;
    }
    if (rc == 0)
        rc = peer_ring_load(&p, o->file, r);
    free(r);
    if (rc == 0) {
        snprintf(p.what, sizeof p.what, "take ring version %llu for group %s",
                 (unsigned long long)p.version, o->group);
        rc = ring_result(&p, peer_loop(&p));
    }
    peer_close(&p);
    return rc;
}
