/* ticketctl remove-member: asks the leader to drop a member that is gone
 * for good (its address will not come back), over the leader's peer port.
 *
 * The peer port speaks the peer handshake (TICKETING-PEER/1, SPEC 2 with
 * the peer secret, not the client secret), then binary frames (SPEC 9):
 * one REMOVE frame out, a JOIN_REPLY back. The leader refuses to remove a
 * member it heard from within an election timeout, so a live member (a
 * typo included) cannot be taken out this way.
 *
 * The leader is found like `members` finds it (the --addr nodes' admin
 * /status, ticketctl_members.c), then its peer_addr dialled; NOT_LEADER is
 * followed (a few hops), RETRY asked again shortly, all within --timeout.
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "client/ticketctl.h"
#include "client/ticketing.h"
#include "core/auth.h"
#include "core/proto.h"
#include "raft/wire.h"

#define RETRY_PAUSE_MS 200
#define HOPS_MAX 3 /* NOT_LEADER answers followed in a row */
#define ADDR_CAP 256
#define LINE_MAX_LEN 512   /* a handshake line; ours are under 200 bytes */
#define IN_CAP (64u << 10) /* a JOIN_REPLY is under 300 bytes */

/* How one attempt (dial, handshake, REMOVE, answer) ended. */
enum attempt {
    AT_NO_CONN,    /* the peer port did not answer, or closed before the handshake ended */
    AT_BAD,        /* not a peer port, or a malformed answer */
    AT_AUTH,       /* the server rejected our proof (or its own proof was wrong) */
    AT_UNANSWERED, /* REMOVE sent, no answer: it may or may not have been appended */
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
    uint64_t deadline_us;
    int fd;
    uint8_t in[IN_CAP];
    size_t in_len;
    char next[ADDR_CAP]; /* NOT_LEADER: the leader's peer address, "" if unknown */
    uint64_t next_id;
    char why[512]; /* what went wrong last, for the final message */
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

/* Milliseconds left before the deadline (0 once it has passed). */
static int left_ms(const struct rm *r)
{
    uint64_t now = tk_client_now_us();
    return now >= r->deadline_us ? 0 : (int)((r->deadline_us - now + 999u) / 1000u);
}

static void sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* ---- a blocking-with-deadline TCP exchange --------------------------------------- */

static int dial(const struct rm *r, const char *host, unsigned port)
{
    char ps[8];
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    snprintf(ps, sizeof ps, "%u", port);
    if (getaddrinfo(host, ps, &hints, &res) != 0 || res == NULL)
        return -1;
    int fd = -1;
    for (struct addrinfo *a = res; a != NULL && fd < 0 && left_ms(r) > 0; a = a->ai_next) {
        fd = socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
            continue;
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        int err = 0;
        socklen_t el = sizeof err;
        if ((connect(fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) ||
            poll(&p, 1, left_ms(r)) != 1 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0 ||
            err != 0) {
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd >= 0) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    return fd;
}

static bool send_all(const struct rm *r, const void *buf, size_t n)
{
    const uint8_t *p = buf;
    while (n > 0) {
        struct pollfd pf = {.fd = r->fd, .events = POLLOUT};
        int ms = left_ms(r);
        if (ms == 0 || poll(&pf, 1, ms) != 1)
            return false;
        ssize_t w = send(r->fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (w <= 0)
            return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

/* More bytes into r->in: > 0 bytes read, 0 the peer closed, -1 the
 * deadline passed (or an error), -2 the buffer is full. */
static int read_more(struct rm *r)
{
    if (r->in_len == sizeof r->in)
        return -2;
    for (;;) {
        struct pollfd pf = {.fd = r->fd, .events = POLLIN};
        int ms = left_ms(r);
        if (ms == 0 || poll(&pf, 1, ms) != 1)
            return -1;
        ssize_t got = recv(r->fd, r->in + r->in_len, sizeof r->in - r->in_len, 0);
        if (got < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (got < 0)
            return -1;
        r->in_len += (size_t)got;
        return (int)got;
    }
}

static void consume(struct rm *r, size_t n)
{
    memmove(r->in, r->in + n, r->in_len - n);
    r->in_len -= n;
}

/* One line (without "\n", NUL-terminated) into line; its length, or -1
 * if none came (timed out or closed), -2 if no line end within
 * LINE_MAX_LEN bytes. */
static int read_line(struct rm *r, char *line)
{
    for (;;) {
        uint8_t *nl = memchr(r->in, '\n', r->in_len < LINE_MAX_LEN ? r->in_len : LINE_MAX_LEN);
        if (nl != NULL) {
            size_t len = (size_t)(nl - r->in);
            memcpy(line, r->in, len);
            line[len] = '\0';
            consume(r, len + 1);
            return (int)len;
        }
        if (r->in_len >= LINE_MAX_LEN)
            return -2;
        if (read_more(r) <= 0)
            return -1;
    }
}

/* ---- one attempt ----------------------------------------------------------------- */

/* The peer handshake as the dialler (net/peer.c hs_line's outbound side). */
static enum attempt handshake(struct rm *r, const char *addr)
{
    char line[LINE_MAX_LEN + 1], snonce[TK_AUTH_HEX_LEN + 1], cnonce[TK_AUTH_HEX_LEN + 1];
    char proof[TK_AUTH_HEX_LEN + 1], out[256];
    const char *p;
    int n = read_line(r, line);
    if (n < 0) {
        set_why(r, "%s: no banner from the peer port (%s)", addr,
                n == -2 ? "no line end" : "timed out or closed");
        return n == -2 ? AT_BAD : AT_NO_CONN;
    }
    if (!tk_proto_parse_banner(line, (size_t)n, true, &p)) {
        bool client = tk_proto_parse_banner(line, (size_t)n, false, &p);
        set_why(r, "%s: %s", addr,
                client ? "that is a client port, not a peer port (client port + 1)"
                       : "not a Ticketing peer port (unexpected banner)");
        return AT_BAD;
    }
    memcpy(snonce, p, TK_AUTH_HEX_LEN);
    snonce[TK_AUTH_HEX_LEN] = '\0';
    if (tk_auth_nonce(cnonce) != TK_OK) {
        set_why(r, "no random bytes for a nonce");
        return AT_BAD;
    }
    tk_auth_proof(r->secret, r->secret_len, false, snonce, cnonce, proof);
    size_t len = tk_proto_fmt_auth(out, sizeof out, cnonce, proof);
    if (len == 0 || !send_all(r, out, len)) {
        set_why(r, "%s: the handshake could not be sent", addr);
        return AT_NO_CONN;
    }
    n = read_line(r, line);
    if (n < 0) {
        set_why(r, "%s: no answer to the handshake (%s)", addr,
                n == -2 ? "no line end" : "timed out or closed");
        return n == -2 ? AT_BAD : AT_NO_CONN;
    }
    if (strncmp(line, "E ", 2) == 0) {
        set_why(r,
                "%s: the peer secret was rejected (%s): is --peer-secret-file the cluster's "
                "peer secret (not the client secret)?",
                addr, line);
        return AT_AUTH;
    }
    uint64_t node, dom[2];
    if (!tk_proto_parse_ok(line, (size_t)n, &p, &node, dom)) {
        set_why(r, "%s: unexpected handshake answer '%.80s'", addr, line);
        return AT_BAD;
    }
    tk_auth_proof(r->secret, r->secret_len, true, snonce, cnonce, proof);
    if (!tk_auth_equal(proof, p, TK_AUTH_HEX_LEN)) {
        set_why(r, "%s: the server's proof is wrong: it does not hold this peer secret", addr);
        return AT_AUTH;
    }
    vlog(r, "%s: authenticated to node %016llx", addr, (unsigned long long)node);
    return AT_OK;
}

/* Waits for the JOIN_REPLY that answers our REMOVE; other frames are skipped. */
static enum attempt answer(struct rm *r, const char *addr)
{
    static struct tk_wire_scratch scratch; /* no entries: a JOIN_REPLY has none */
    size_t skip = 0, flen = 0;
    for (;;) {
        size_t drop = skip < r->in_len ? skip : r->in_len;
        consume(r, drop);
        skip -= drop;
        if (skip == 0 && r->in_len > TK_WIRE_LENGTH_LEN) { /* the length and the type */
            if (tk_wire_frame_len(r->in, r->in_len, &flen) != TK_OK) {
                set_why(r, "%s: malformed frame from the leader", addr);
                return AT_BAD;
            }
            if (r->in[TK_WIRE_LENGTH_LEN] != TK_RAFT_MSG_JOIN_REPLY) {
                skip = flen; /* not ours, however large */
                continue;
            }
            if (flen > sizeof r->in) {
                set_why(r, "%s: an answer of %zu bytes, far too large", addr, flen);
                return AT_BAD;
            }
        }
        if (skip == 0 && r->in_len > TK_WIRE_LENGTH_LEN && r->in_len >= flen) {
            struct tk_wire_frame f;
            if (tk_wire_decode(r->in, flen, &f, &scratch) != TK_OK) {
                set_why(r, "%s: malformed answer from the leader", addr);
                return AT_BAD;
            }
            const struct tk_raft_msg *m = &f.msg;
            size_t al = m->join_reply.leader_peer_addr.len;
            snprintf(r->next, sizeof r->next, "%.*s", (int)(al < ADDR_CAP ? al : 0),
                     m->join_reply.leader_peer_addr.p ? m->join_reply.leader_peer_addr.p : "");
            r->next_id = m->join_reply.leader_id;
            consume(r, flen);
            switch (m->join_reply.status) {
                case TK_RAFT_JOIN_OK:
                    return AT_OK;
                case TK_RAFT_JOIN_NOT_LEADER:
                    set_why(r, "%s: not the leader (leader %016llx at %s)", addr,
                            (unsigned long long)r->next_id, r->next[0] ? r->next : "unknown");
                    return AT_NOT_LEADER;
                case TK_RAFT_JOIN_RETRY:
                    set_why(r,
                            "%s: the leader asks to retry: a membership change is in "
                            "flight, or %s is the leader itself and hands leadership over",
                            addr, r->id_text);
                    return AT_RETRY;
                case TK_RAFT_JOIN_REFUSED:
                    return AT_REFUSED;
                default:
                    set_why(r, "%s: unexpected answer status %u", addr, m->join_reply.status);
                    return AT_BAD;
            }
        }
        int got = read_more(r);
        if (got <= 0) {
            set_why(r, "%s: REMOVE sent, but no answer (%s)", addr,
                    got == 0 ? "the connection was closed" : "timed out");
            return AT_UNANSWERED;
        }
    }
}

static enum attempt attempt(struct rm *r, const char *addr)
{
    char host[ADDR_CAP];
    unsigned port;
    uint8_t buf[128];
    r->next[0] = '\0';
    r->next_id = 0;
    r->in_len = 0;
    if (!ctl_split_addr(addr, strlen(addr), host, sizeof host, &port)) {
        set_why(r, "the leader's peer address '%s' is malformed", addr);
        return AT_BAD;
    }
    vlog(r, "asking %s to remove %s", addr, r->id_text);
    r->fd = dial(r, host, port);
    if (r->fd < 0) {
        set_why(r, "%s: the peer port did not answer", addr);
        return AT_NO_CONN;
    }
    enum attempt a = handshake(r, addr);
    if (a == AT_OK) {
        struct tk_wire_frame f = {.domain_lo = 0, .domain_hi = 0};
        uint64_t from = 0;
        while (from == 0 && tk_auth_random(&from, sizeof from) == TK_OK) {
        }
        f.msg.type = TK_RAFT_MSG_REMOVE;
        f.msg.from = from != 0 ? from : 1; /* only names this link; the leader answers on it */
        f.msg.term = 0;
        f.msg.remove.id = r->id;
        size_t n = tk_wire_encode(&f, buf, sizeof buf);
        if (n == 0 || !send_all(r, buf, n)) {
            set_why(r, "%s: REMOVE could not be sent", addr);
            a = AT_UNANSWERED; /* part of it may have gone out */
        } else {
            a = answer(r, addr);
        }
    }
    close(r->fd);
    r->fd = -1;
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
    char msg[1024];
    if (text != NULL) {
        /* Addresses in it come from the server: one printable line. */
        snprintf(msg, sizeof msg, "%s", text);
        for (char *c = msg; *c != '\0'; c++)
            if ((unsigned char)*c < 0x20 || *c == 0x7f)
                *c = '?';
    }
    if (r->o->json) {
        bool first = true;
        putchar('{');
        ctl_json_kstr(stdout, &first, "outcome", outcome);
        ctl_json_kstr(stdout, &first, "id", r->id_text);
        if (text != NULL)
            ctl_json_kstr(stdout, &first, "reason", msg);
        printf("}\n");
    } else if (text == NULL) {
        printf("removed %s\n", r->id_text);
    } else {
        fprintf(stderr, "ticketctl: remove-member %s: %s\n", r->id_text, msg);
    }
    return code;
}

static int remove_loop(struct rm *r)
{
    char target[ADDR_CAP] = "", leader_id[ADDR_CAP];
    int hops = 0;
    bool maybe_sent = false; /* a REMOVE went out unanswered: it may have been appended */
    for (;;) {
        bool pause = true;
        if (target[0] == '\0') {
            /* A quarter of --timeout per /status read (at least 250 ms): a
             * gone member among the --addr must not eat the whole budget. */
            uint64_t read_ms = r->o->timeout_ms / 4 > 250 ? r->o->timeout_ms / 4 : 250;
            int rc =
                ctl_find_leader(r->o, read_ms, r->deadline_us, leader_id, target, sizeof target);
            if (rc == CTL_EXIT_USAGE)
                return rc;
            hops = 0;
            if (rc != 0) {
                target[0] = '\0';
                set_why(r,
                        "no leader found through --addr %s (their admin /status, client "
                        "port + 2)",
                        r->o->addr);
            } else {
                vlog(r, "the leader is %s, peer address %s", leader_id, target);
            }
        }
        if (target[0] != '\0') {
            enum attempt a = attempt(r, target);
            maybe_sent |= a == AT_UNANSWERED;
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
                    if (r->next[0] != '\0' && strcmp(r->next, target) != 0 && hops < HOPS_MAX) {
                        snprintf(target, sizeof target, "%s", r->next);
                        hops++;
                        pause = false;
                    } else if (strcmp(r->next, target) != 0) {
                        target[0] = '\0'; /* none named, or hops enough: ask /status */
                    }
                    break;
                case AT_RETRY:
                    hops = 0;
                    break;
                default:
                    target[0] = '\0'; /* maybe the leader moved: ask /status again */
                    break;
            }
        }
        if (pause) {
            if (left_ms(r) <= RETRY_PAUSE_MS)
                break;
            sleep_ms(RETRY_PAUSE_MS);
        } else if (left_ms(r) == 0) {
            break;
        }
    }
    if (maybe_sent)
        return finish(r, CTL_EXIT_INDETERMINATE, "indeterminate",
                      "a REMOVE was sent but not answered before --timeout: the member may or "
                      "may not have been removed; check `ticketctl members` (asking again is "
                      "safe: a non-member is answered as removed)");
    return finish(r, CTL_EXIT_UNAVAILABLE, "unavailable", r->why);
}

int ctl_remove_member(const struct ctl_opts *o)
{
    static struct rm r;
    memset(&r, 0, sizeof r);
    r.o = o;
    r.fd = -1;
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
    r.deadline_us = tk_client_now_us() + o->timeout_ms * 1000u;
    rc = remove_loop(&r);
    explicit_bzero(r.secret, sizeof r.secret);
    fflush(stdout);
    return rc;
}
