/* Ticketing driver: the line protocol of SPEC 2-5 through core/proto.h and
 * core/auth.h.
 *
 * Setup: banner -> AUTH -> OK (the server's proof is checked before any
 * other word is believed) -> "P 0" probe. A follower answers the probe's
 * place with "M <leader>" and closes; the engine reconnects there. Only
 * after the probe's pong are slots let loose, so no acquire is ever sent
 * to a node that is about to redirect (it would end indeterminate).
 *
 * Requests carry ids (slot index in the low bits, a sequence above), and
 * responses are matched by id: a queued acquire is answered when granted,
 * while later requests on the connection are answered meanwhile.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "core/auth.h"
#include "core/proto.h"

enum { PH_BANNER, PH_OK, PH_PROBE, PH_READY };

struct tkd {
    int phase;
    char snonce[TK_AUTH_HEX_LEN + 1];
    char cnonce[TK_AUTH_HEX_LEN + 1];
};

static int tkd_init(struct bench *b)
{
    if (b->secret_len < TK_AUTH_SECRET_MIN) {
        fprintf(stderr, "ticketing-bench: the ticketing driver needs --secret-file\n");
        return -1;
    }
    return 0;
}

static void tkd_open(struct bconn *c)
{
    if (c->drv == NULL) {
        c->drv = calloc(1, sizeof(struct tkd));
        TK_ASSERT(c->drv != NULL);
    }
    struct tkd *d = c->drv;
    d->phase = PH_BANNER;
}

static size_t owner_fmt(const struct slot *s, char *buf, size_t cap)
{
    int n = snprintf(buf, cap, "o%u.%llu", s->global, (unsigned long long)s->acq_seq);
    TK_ASSERT(n > 0 && (size_t)n < cap);
    return (size_t)n;
}

static void write_line(struct bconn *c, const char *line, size_t n)
{
    char *o = bench_out(c, n);
    memcpy(o, line, n);
    bench_out_commit(c, n);
}

static int tkd_setup_line(struct bconn *c, struct tkd *d, const char *line, size_t len)
{
    struct bench *b = c->th->b;
    char buf[512];
    if (d->phase == PH_BANNER) {
        const char *sn;
        if (!tk_proto_parse_banner(line, len, false, &sn)) {
            bench_conn_warn(c, "bad banner '%.*s'", (int)TK_MIN(len, 80u), line);
            return -1;
        }
        memcpy(d->snonce, sn, TK_AUTH_HEX_LEN);
        d->snonce[TK_AUTH_HEX_LEN] = 0;
        if (tk_auth_nonce(d->cnonce) != TK_OK)
            return -1;
        char proof[TK_AUTH_HEX_LEN + 1];
        tk_auth_proof(b->secret, b->secret_len, false, d->snonce, d->cnonce, proof);
        size_t n = tk_proto_fmt_auth(buf, sizeof(buf), d->cnonce, proof);
        TK_ASSERT(n > 0);
        write_line(c, buf, n);
        d->phase = PH_OK;
        return 0;
    }
    if (d->phase == PH_OK) {
        const char *sproof;
        uint64_t node, domain[2];
        if (!tk_proto_parse_ok(line, len, &sproof, &node, domain)) {
            bench_conn_warn(c, "handshake refused: '%.*s'", (int)TK_MIN(len, 80u), line);
            return -1;
        }
        char expect[TK_AUTH_HEX_LEN + 1];
        tk_auth_proof(b->secret, b->secret_len, true, d->snonce, d->cnonce, expect);
        if (!tk_auth_equal(expect, sproof, TK_AUTH_HEX_LEN)) {
            bench_conn_warn(c, "the server's proof is wrong (secret mismatch?)");
            return -1;
        }
        size_t n = tk_proto_fmt_ping(buf, sizeof(buf), 0);
        write_line(c, buf, n);
        d->phase = PH_PROBE;
        return 0;
    }
    /* PH_PROBE: the pong, or M from a follower. */
    struct tk_response r;
    if (!tk_proto_parse_response(line, len, &r)) {
        bench_conn_warn(c, "bad line during setup '%.*s'", (int)TK_MIN(len, 80u), line);
        return -1;
    }
    if (r.type == 'M') {
        bench_redirect(c, r.text, r.text ? r.text_len : 0);
        return 0;
    }
    if (r.type != 'P' || r.id != 0) {
        bench_conn_warn(c, "unexpected answer to the probe '%.*s'", (int)TK_MIN(len, 80u), line);
        return -1;
    }
    d->phase = PH_READY;
    bench_ready(c);
    return 0;
}

static int tkd_line(struct bconn *c, const char *line, size_t len)
{
    struct tk_response r;
    if (!tk_proto_parse_response(line, len, &r)) {
        bench_conn_warn(c, "bad response '%.*s'", (int)TK_MIN(len, 80u), line);
        return -1;
    }
    struct bresp br = {.has_id = true, .id = r.id};
    switch (r.type) {
        case 'G':
            br.kind = BR_GRANT;
            br.token = r.token;
            break;
        case 'T':
            br.kind = BR_TIMEOUT;
            break;
        case 'B':
            br.kind = BR_BUSY;
            break;
        case 'R':
            br.kind = BR_RELEASED;
            break;
        case 'N':
            br.kind = BR_NOTHELD;
            break;
        case 'M':
            /* The leader stepped down or changed: in-flight requests become
             * indeterminate, releases are sent again elsewhere. */
            bench_redirect(c, r.text, r.text ? r.text_len : 0);
            return 0;
        case 'E':
            if (!r.has_id) {
                bench_conn_warn(c, "connection error '%.*s'", (int)TK_MIN(len, 80u), line);
                return -1;
            }
            bench_conn_warn(c, "request rejected '%.*s'", (int)TK_MIN(len, 80u), line);
            br.kind = BR_ERROR;
            break;
        case 'P':
            if (r.id != 0)
                bench_probe_answer(c, r.id);
            return 0;
        default:
            bench_conn_warn(c, "unexpected response '%.*s'", (int)TK_MIN(len, 80u), line);
            return -1;
    }
    bench_response(c, &br);
    return 0;
}

static long tkd_input(struct bconn *c)
{
    struct tkd *d = c->drv;
    size_t off = 0;
    while (off < c->in_len && !c->closing) {
        const char *start = c->in + off;
        const char *nl = memchr(start, '\n', c->in_len - off);
        if (nl == NULL) {
            if (c->in_len - off >= TK_LINE_MAX)
                return -1;
            break;
        }
        size_t len = (size_t)(nl - start);
        int rc = d->phase == PH_READY ? tkd_line(c, start, len) : tkd_setup_line(c, d, start, len);
        if (rc < 0)
            return -1;
        off += len + 1;
    }
    return (long)off;
}

static void tkd_acquire(struct bconn *c, struct slot *s, const char *key, size_t key_len)
{
    struct bench *b = c->th->b;
    char owner[BENCH_OWNER_MAX];
    size_t olen = owner_fmt(s, owner, sizeof(owner));
    char *o = bench_out(c, TK_LINE_MAX);
    size_t n = tk_proto_fmt_acquire(o, TK_LINE_MAX, s->req_id, key, key_len, owner, olen,
                                    b->lease_ms, b->wait_ms);
    TK_ASSERT(n > 0);
    bench_out_commit(c, n);
}

static void tkd_release(struct bconn *c, struct slot *s, const char *key, size_t key_len)
{
    char owner[BENCH_OWNER_MAX];
    size_t olen = owner_fmt(s, owner, sizeof(owner));
    char *o = bench_out(c, TK_LINE_MAX);
    size_t n = tk_proto_fmt_release(o, TK_LINE_MAX, s->req_id, key, key_len, owner, olen, s->token);
    TK_ASSERT(n > 0);
    bench_out_commit(c, n);
}

static void tkd_probe(struct bconn *c, struct slot *s)
{
    char *o = bench_out(c, 32);
    size_t n = tk_proto_fmt_ping(o, 32, s->probe_id);
    TK_ASSERT(n > 0);
    bench_out_commit(c, n);
}

static void tkd_free(struct bconn *c)
{
    free(c->drv);
    c->drv = NULL;
}

const struct bench_driver bench_drv_ticketing = {
    .name = "ticketing",
    .ordered = false,
    .client_retry = false,
    .has_token = true,
    .fifo = true,
    .req_max = 2 * BENCH_KEY_MAX,
    .init = tkd_init,
    .open = tkd_open,
    .input = tkd_input,
    .acquire = tkd_acquire,
    .release = tkd_release,
    .probe = tkd_probe,
    .lost = NULL,
    .free = tkd_free,
};
