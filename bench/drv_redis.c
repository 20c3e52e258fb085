/* Redis driver (RESP2): the single-instance lock recipe.
 *
 *   acquire: SET key owner NX PX lease   -> +OK granted, nil held
 *   release: EVALSHA <compare-and-delete> 1 key owner -> :1 released, :0 not held
 *
 * Redis has no queue: on a held key the engine retries after 1 ms until the
 * wait ends (driver flag client_retry), so there is no FIFO and a waiter
 * can be overtaken any number of times. It is not replicated either: one
 * process, no persistence in our runs. Replies come in request order, so
 * the engine's in-flight ring pairs them with their slots. Owners are
 * unique per acquire ("o<slot>.<n>"), which makes the compare-and-delete
 * exact, like a token.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"

#define OP_SCRIPT 'S'

static const char release_script[] =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) "
    "else return 0 end";

struct rd {
    bool ready;
    char sha[41];
};

static int rd_init(struct bench *b)
{
    (void)b;
    return 0;
}

/* Appends a RESP array of bulk strings. */
static void rd_cmd(struct bconn *c, int argc, const char *const *argv, const size_t *lens)
{
    size_t need = 16;
    for (int i = 0; i < argc; i++)
        need += lens[i] + 16;
    char *o = bench_out(c, need);
    size_t n = (size_t)snprintf(o, need, "*%d\r\n", argc);
    for (int i = 0; i < argc; i++) {
        n += (size_t)snprintf(o + n, need - n, "$%zu\r\n", lens[i]);
        memcpy(o + n, argv[i], lens[i]);
        n += lens[i];
        o[n++] = '\r';
        o[n++] = '\n';
    }
    TK_ASSERT(n <= need);
    bench_out_commit(c, n);
}

static void rd_open(struct bconn *c)
{
    if (c->drv == NULL) {
        c->drv = calloc(1, sizeof(struct rd));
        TK_ASSERT(c->drv != NULL);
    }
    struct rd *d = c->drv;
    d->ready = false;
    const char *argv[] = {"SCRIPT", "LOAD", release_script};
    size_t lens[] = {6, 4, sizeof(release_script) - 1};
    rd_cmd(c, 3, argv, lens);
    bench_inflight_push(c, UINT32_MAX, OP_SCRIPT);
}

/* One RESP2 reply at p (n bytes): its type, and for simple strings,
 * errors, integers and bulk strings the payload. Returns the reply's
 * length, 0 if incomplete, -1 if malformed or an array (never sent). */
static long rd_reply(const char *p, size_t n, char *type, const char **val, long *vlen)
{
    const char *nl = memchr(p, '\n', n);
    if (nl == NULL)
        return n > 512 ? -1 : 0;
    if (nl == p || nl[-1] != '\r')
        return -1;
    size_t head = (size_t)(nl - p) + 1;
    *type = p[0];
    *val = p + 1;
    *vlen = (long)(head - 3);
    if (*type == '+' || *type == '-' || *type == ':')
        return (long)head;
    if (*type != '$')
        return -1;
    long len = strtol(p + 1, NULL, 10);
    if (len < 0) {
        *val = NULL;
        *vlen = -1;
        return (long)head;
    }
    if ((size_t)len + 2 > n - head)
        return (size_t)len > BENCH_IN_CAP ? -1 : 0;
    *val = p + head;
    *vlen = len;
    return (long)(head + (size_t)len + 2);
}

static long rd_input(struct bconn *c)
{
    struct rd *d = c->drv;
    size_t off = 0;
    while (off < c->in_len) {
        char type;
        const char *val;
        long vlen;
        long used = rd_reply(c->in + off, c->in_len - off, &type, &val, &vlen);
        if (used < 0) {
            bench_conn_warn(c, "malformed RESP reply");
            return -1;
        }
        if (used == 0)
            break;
        off += (size_t)used;
        struct inflight *f = bench_inflight_head(c);
        if (f == NULL) {
            bench_conn_warn(c, "a reply with no request in flight");
            return -1;
        }
        if (f->op == OP_SCRIPT) {
            bench_inflight_pop(c);
            if (type != '$' || vlen != 40) {
                bench_conn_warn(c, "SCRIPT LOAD failed");
                return -1;
            }
            memcpy(d->sha, val, 40);
            d->sha[40] = 0;
            d->ready = true;
            bench_ready(c);
            continue;
        }
        struct bresp r = {.has_id = false};
        if (type == '-') {
            bench_conn_warn(c, "redis error: %.*s", (int)TK_MIN(vlen, 200), val);
            r.kind = BR_ERROR;
        } else if (f->op == 'A') {
            if (type == '+' && vlen == 2 && memcmp(val, "OK", 2) == 0)
                r.kind = BR_GRANT;
            else if (type == '$' && vlen < 0)
                r.kind = BR_BUSY;
            else
                r.kind = BR_ERROR;
        } else {
            if (type == ':' && vlen == 1 && val[0] == '1')
                r.kind = BR_RELEASED;
            else if (type == ':' && vlen == 1 && val[0] == '0')
                r.kind = BR_NOTHELD;
            else
                r.kind = BR_ERROR;
        }
        bench_response(c, &r);
    }
    return (long)off;
}

static size_t owner_fmt(const struct slot *s, char *buf, size_t cap)
{
    int n = snprintf(buf, cap, "o%u.%llu", s->global, (unsigned long long)s->acq_seq);
    TK_ASSERT(n > 0 && (size_t)n < cap);
    return (size_t)n;
}

static void rd_acquire(struct bconn *c, struct slot *s, const char *key, size_t key_len)
{
    struct bench *b = c->th->b;
    char owner[BENCH_OWNER_MAX], lease[24];
    size_t olen = owner_fmt(s, owner, sizeof(owner));
    size_t llen = (size_t)snprintf(lease, sizeof(lease), "%u", b->lease_ms);
    const char *argv[] = {"SET", key, owner, "NX", "PX", lease};
    size_t lens[] = {3, key_len, olen, 2, 2, llen};
    rd_cmd(c, 6, argv, lens);
    bench_inflight_push(c, s->index, 'A');
}

static void rd_release(struct bconn *c, struct slot *s, const char *key, size_t key_len)
{
    struct rd *d = c->drv;
    char owner[BENCH_OWNER_MAX];
    size_t olen = owner_fmt(s, owner, sizeof(owner));
    const char *argv[] = {"EVALSHA", d->sha, "1", key, owner};
    size_t lens[] = {7, 40, 1, key_len, olen};
    rd_cmd(c, 5, argv, lens);
    bench_inflight_push(c, s->index, 'R');
}

static void rd_free(struct bconn *c)
{
    free(c->drv);
    c->drv = NULL;
}

const struct bench_driver bench_drv_redis = {
    .name = "redis",
    .ordered = true,
    .client_retry = true,
    .has_token = false,
    .fifo = false,
    .req_max = 2 * BENCH_KEY_MAX + 128,
    .init = rd_init,
    .open = rd_open,
    .input = rd_input,
    .acquire = rd_acquire,
    .release = rd_release,
    .lost = NULL,
    .free = rd_free,
};
