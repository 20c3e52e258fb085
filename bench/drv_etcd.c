/* etcd v3 driver: the lock service (v3lock) through etcd's JSON gateway
 * over HTTP/1.1 keep-alive connections.
 *
 *   setup:   POST /v3/lease/grant  {"TTL":n}            one lease per slot
 *   acquire: POST /v3/lock/lock    {"name":b64,"lease":id} + Grpc-Timeout: <wait>m
 *            200 -> granted (the answer's "key" is the lock key; its
 *            header revision serves as the token: it grows with every
 *            grant of a key, since the next grant waits for the delete of
 *            the previous lock key); 504 -> the wait elapsed (etcd then
 *            deletes the waiter's key itself)
 *   release: POST /v3/lock/unlock  {"key":lockkey}
 *
 * Each slot has its own lease: etcd's lock is reentrant per lease (the
 * lock key is name/lease), so two slots sharing one would both "hold" it.
 * The lease TTL covers the whole run, since the bench does not drive the
 * keepalive stream; the lock's safety net is therefore that TTL.
 *
 * When an acquire ends indeterminate (connection lost, or an error answer
 * such as "leader changed"), the lock key may exist under the slot's lease
 * and would block the key for the rest of the run: the slot's lease is
 * revoked (deleting that key) and a new one granted at the next setup, as
 * etcd's own concurrency.Session does on close.
 *
 * The same after a timed-out lock (504). The gateway answers as soon as the
 * deadline passes, while the server's Lock handler is still cleaning up
 * (deleting the waiter's key). A next lock on the same name with the same
 * lease finds that key still there, takes over its old place in the queue,
 * and can be granted after the cleanup deleted the key, while the waiter
 * behind it was granted too: two holders. The bench's safety check caught
 * this with etcd 3.4.23 (docs/benchmarks.md). So a slot whose lock timed
 * out revokes its lease and takes a fresh one before its next lock: two
 * extra requests per timeout, counted in the measured latency.
 *
 * Go's HTTP server answers pipelined requests in order, so the engine's
 * in-flight ring pairs answers with slots; a blocked lock holds up what is
 * behind it on the connection, so contended scenarios use depth 1.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "bench/bench.h"

#define OP_GRANT 'L'   /* setup: a lease for a slot */
#define OP_REVOKE 'V'  /* setup: revoke a slot's tainted lease */
#define OP_REGRANT 'l' /* in band: a fresh lease, then the slot's deferred lock */
#define OP_UNLEASE 'v' /* in band: revoke the tainted lease */
#define BODY_MAX 4096

struct etcd_slot {
    uint64_t lease;
    uint64_t old_lease; /* to revoke at the next setup */
    bool dirty;         /* the lease may carry a stray lock key: replace it */
    bool deferred;      /* a lock waits for the in-band lease grant */
    char lockkey[BENCH_LOCKKEY_MAX];
    size_t lockkey_len;
    char key[BENCH_KEY_MAX]; /* the deferred lock's name */
    size_t key_len;
};

struct ed {
    struct etcd_slot *s;
    uint32_t pending;    /* setup requests in flight */
    char body[BODY_MAX]; /* a de-chunked body */
};

static int ed_init(struct bench *b)
{
    (void)b;
    return 0;
}

static uint32_t ed_ttl_s(const struct bench *b)
{
    double run = b->warmup_s + b->duration_s + b->drain_s + 120.0;
    if (b->scenario == SC_MEMORY)
        run = 1800.0;
    uint32_t ttl = (uint32_t)run;
    return TK_MAX(ttl, b->lease_ms / 1000u);
}

static size_t b64(const char *in, size_t n, char *out)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)(unsigned char)in[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t)(unsigned char)in[i + 1] << 8;
        if (i + 2 < n)
            v |= (uint32_t)(unsigned char)in[i + 2];
        out[o++] = tab[(v >> 18) & 63];
        out[o++] = tab[(v >> 12) & 63];
        out[o++] = i + 1 < n ? tab[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < n ? tab[v & 63] : '=';
    }
    return o;
}

static void ed_post(struct bconn *c,
                    const char *path,
                    const char *body,
                    size_t blen,
                    uint32_t timeout_ms)
{
    char extra[64] = "";
    if (timeout_ms > 0)
        snprintf(extra, sizeof(extra), "Grpc-Timeout: %um\r\n", timeout_ms);
    size_t need = blen + 256;
    char *o = bench_out(c, need);
    int n = snprintf(o, need,
                     "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\n%s\r\n%.*s",
                     path, blen, extra, (int)blen, body);
    TK_ASSERT(n > 0 && (size_t)n < need);
    bench_out_commit(c, (size_t)n);
}

static void ed_grant(struct bconn *c, uint32_t i, uint8_t op)
{
    struct ed *d = c->drv;
    char body[64];
    int n = snprintf(body, sizeof(body), "{\"TTL\":%u}", ed_ttl_s(c->th->b));
    ed_post(c, "/v3/lease/grant", body, (size_t)n, 0);
    bench_inflight_push(c, i, op);
    if (op == OP_GRANT)
        d->pending++;
}

static void ed_revoke(struct bconn *c, uint32_t i, uint64_t lease, uint8_t op)
{
    struct ed *d = c->drv;
    char body[64];
    int n = snprintf(body, sizeof(body), "{\"ID\":\"%llu\"}", (unsigned long long)lease);
    ed_post(c, "/v3/lease/revoke", body, (size_t)n, 0);
    bench_inflight_push(c, i, op);
    if (op == OP_REVOKE)
        d->pending++;
}

static void ed_lock(struct bconn *c, uint32_t i, const char *key, size_t key_len)
{
    struct ed *d = c->drv;
    struct bench *b = c->th->b;
    char name[BENCH_KEY_MAX * 2];
    size_t nl = b64(key, key_len, name);
    char body[BENCH_KEY_MAX * 2 + 64];
    int n = snprintf(body, sizeof(body), "{\"name\":\"%.*s\",\"lease\":\"%llu\"}", (int)nl, name,
                     (unsigned long long)d->s[i].lease);
    /* etcd has no try-lock: wait 0 (the memory scenario, distinct keys) gets
     * a generous deadline instead of one that would expire in transit. */
    ed_post(c, "/v3/lock/lock", body, (size_t)n, b->wait_ms ? b->wait_ms : 10000u);
    bench_inflight_push(c, i, 'A');
}

static void ed_open(struct bconn *c)
{
    if (c->drv == NULL) {
        struct ed *d = calloc(1, sizeof(*d));
        TK_ASSERT(d != NULL);
        d->s = calloc(c->nslots, sizeof(*d->s));
        TK_ASSERT(d->s != NULL);
        c->drv = d;
    }
    struct ed *d = c->drv;
    d->pending = 0;
    for (uint32_t i = 0; i < c->nslots; i++) {
        struct etcd_slot *es = &d->s[i];
        if (es->dirty) {
            if (es->lease != 0)
                es->old_lease = es->lease;
            es->lease = 0;
            es->dirty = false;
        }
        es->deferred = false;
        if (es->old_lease != 0)
            ed_revoke(c, i, es->old_lease, OP_REVOKE);
        if (es->lease == 0)
            ed_grant(c, i, OP_GRANT);
    }
    if (d->pending == 0)
        bench_ready(c);
}

/* Finds "name":"value" (string) in a JSON text; returns the value's length
 * or -1. */
static long json_str(const char *js, size_t n, const char *name, const char **val)
{
    char pat[40];
    int pl = snprintf(pat, sizeof(pat), "\"%s\":\"", name);
    const char *p = memmem(js, n, pat, (size_t)pl);
    if (p == NULL)
        return -1;
    p += pl;
    const char *q = memchr(p, '"', (size_t)(js + n - p));
    if (q == NULL)
        return -1;
    *val = p;
    return (long)(q - p);
}

static bool json_u64(const char *js, size_t n, const char *name, uint64_t *out)
{
    const char *v;
    long len = json_str(js, n, name, &v);
    if (len <= 0 || len > 20)
        return false;
    char tmp[24];
    memcpy(tmp, v, (size_t)len);
    tmp[len] = 0;
    char *end;
    *out = strtoull(tmp, &end, 10);
    return *end == 0;
}

/* Parses one HTTP/1.1 response at p. Returns its length (0: incomplete,
 * -1: malformed) and the status and body (de-chunked into d->body if
 * chunked; trailers are skipped). */
static long http_response(struct ed *d,
                          const char *p,
                          size_t n,
                          int *status,
                          const char **body,
                          size_t *blen)
{
    const char *end = memmem(p, n, "\r\n\r\n", 4);
    if (end == NULL)
        return n > 16384 ? -1 : 0;
    size_t head = (size_t)(end - p) + 4;
    if (n < 12 || memcmp(p, "HTTP/1.1 ", 9) != 0)
        return -1;
    *status = atoi(p + 9);
    long clen = -1;
    bool chunked = false;
    for (const char *line = memchr(p, '\n', head); line && line < end;
         line = memchr(line + 1, '\n', (size_t)(end - line))) {
        const char *h = line + 1;
        if (strncasecmp(h, "Content-Length:", 15) == 0)
            clen = atol(h + 15);
        else if (strncasecmp(h, "Transfer-Encoding:", 18) == 0 &&
                 memmem(h, (size_t)(end - h), "chunked", 7))
            chunked = true;
    }
    if (!chunked) {
        if (clen < 0 || clen > BENCH_IN_CAP)
            return -1;
        if (n - head < (size_t)clen)
            return 0;
        *body = p + head;
        *blen = (size_t)clen;
        return (long)(head + (size_t)clen);
    }
    size_t off = head, bl = 0;
    for (;;) {
        const char *nl = memmem(p + off, n - off, "\r\n", 2);
        if (nl == NULL)
            return 0;
        size_t sz = strtoul(p + off, NULL, 16);
        off = (size_t)(nl - p) + 2;
        if (sz == 0)
            break;
        if (n - off < sz + 2)
            return 0;
        if (bl + sz > BODY_MAX)
            return -1;
        memcpy(d->body + bl, p + off, sz);
        bl += sz;
        off += sz + 2;
    }
    /* Trailers: lines up to an empty one. */
    for (;;) {
        const char *nl = memmem(p + off, n - off, "\r\n", 2);
        if (nl == NULL)
            return 0;
        bool empty = nl == p + off;
        off = (size_t)(nl - p) + 2;
        if (empty)
            break;
    }
    *body = d->body;
    *blen = bl;
    return (long)off;
}

static long ed_input(struct bconn *c)
{
    struct ed *d = c->drv;
    size_t off = 0;
    while (off < c->in_len && !c->closing) {
        int status = 0;
        const char *body = NULL;
        size_t blen = 0;
        long used = http_response(d, c->in + off, c->in_len - off, &status, &body, &blen);
        if (used < 0) {
            bench_conn_warn(c, "malformed HTTP response");
            return -1;
        }
        if (used == 0)
            break;
        off += (size_t)used;
        struct inflight *f = bench_inflight_head(c);
        if (f == NULL) {
            bench_conn_warn(c, "an HTTP response with no request in flight");
            return -1;
        }
        uint32_t i = f->slot;
        TK_ASSERT(i < c->nslots);
        struct etcd_slot *es = &d->s[i];
        if (f->op == OP_GRANT || f->op == OP_REVOKE || f->op == OP_REGRANT || f->op == OP_UNLEASE) {
            uint8_t op = f->op;
            bench_inflight_pop(c);
            if (op == OP_GRANT || op == OP_REGRANT) {
                if (status != 200 || !json_u64(body, blen, "ID", &es->lease)) {
                    bench_conn_warn(c, "lease grant failed: %d %.*s", status,
                                    (int)TK_MIN(blen, 200u), body);
                    es->lease = 0;
                    return -1;
                }
            } else {
                es->old_lease = 0; /* 200 revoked, 404 already gone: either way */
            }
            if (op == OP_REGRANT && es->deferred) {
                es->deferred = false;
                ed_lock(c, i, es->key, es->key_len);
            }
            if (op == OP_GRANT || op == OP_REVOKE) {
                d->pending--;
                if (d->pending == 0)
                    bench_ready(c);
            }
            continue;
        }
        struct bresp r = {.has_id = false};
        if (status == 200 && f->op == 'A') {
            const char *k;
            long kl = json_str(body, blen, "key", &k);
            if (kl <= 0 || (size_t)kl >= BENCH_LOCKKEY_MAX ||
                !json_u64(body, blen, "revision", &r.token)) {
                bench_conn_warn(c, "lock answer without key or revision");
                return -1;
            }
            memcpy(es->lockkey, k, (size_t)kl);
            es->lockkey_len = (size_t)kl;
            r.kind = BR_GRANT;
            if (getenv("TK_BENCH_DEBUG"))
                fprintf(stderr, "grant conn %u slot %u lease %llx key %.*s rev %llu\n", c->global,
                        i, (unsigned long long)es->lease, (int)kl, k, (unsigned long long)r.token);
        } else if (status == 200) {
            r.kind = BR_RELEASED;
        } else if (status == 504 && f->op == 'A') {
            r.kind = BR_TIMEOUT;
            es->dirty = true;
        } else {
            /* Unavailable (no leader, leader changed...): the outcome is
             * unknown. Reconnect elsewhere; the engine makes the slot's
             * acquire indeterminate or sends its release again. */
            c->th->cnt.unavailable++;
            bench_conn_warn(c, "etcd answered %d: %.*s", status, (int)TK_MIN(blen, 160u), body);
            bench_redirect(c, NULL, 0);
            break;
        }
        bench_response(c, &r);
    }
    return (long)off;
}

static void ed_acquire(struct bconn *c, struct slot *s, const char *key, size_t key_len)
{
    struct ed *d = c->drv;
    struct etcd_slot *es = &d->s[s->index];
    if (!es->dirty) {
        ed_lock(c, s->index, key, key_len);
        return;
    }
    /* Replace the tainted lease first; the lock follows the new grant. */
    es->dirty = false;
    ed_revoke(c, s->index, es->lease, OP_UNLEASE);
    es->old_lease = es->lease;
    es->lease = 0;
    ed_grant(c, s->index, OP_REGRANT);
    TK_ASSERT(key_len < sizeof(es->key));
    memcpy(es->key, key, key_len);
    es->key_len = key_len;
    es->deferred = true;
}

static void ed_release(struct bconn *c, struct slot *s, const char *key, size_t key_len)
{
    (void)key;
    (void)key_len;
    struct ed *d = c->drv;
    struct etcd_slot *es = &d->s[s->index];
    char body[BENCH_LOCKKEY_MAX + 32];
    int n = snprintf(body, sizeof(body), "{\"key\":\"%.*s\"}", (int)es->lockkey_len, es->lockkey);
    ed_post(c, "/v3/lock/unlock", body, (size_t)n, 0);
    bench_inflight_push(c, s->index, 'R');
}

static void ed_lost(struct bconn *c, struct slot *s)
{
    struct ed *d = c->drv;
    if (d != NULL)
        d->s[s->index].dirty = true;
}

static void ed_free(struct bconn *c)
{
    struct ed *d = c->drv;
    if (d != NULL)
        free(d->s);
    free(d);
    c->drv = NULL;
}

const struct bench_driver bench_drv_etcd = {
    .name = "etcd",
    .ordered = true,
    .client_retry = false,
    .has_token = true,
    .fifo = false, /* orders by revision at the Put, which comes after a session setup on
                    * the server: the bench's bypass count is reported, not judged */
    .req_max = 1024,
    .init = ed_init,
    .open = ed_open,
    .input = ed_input,
    .acquire = ed_acquire,
    .release = ed_release,
    .lost = ed_lost,
    .free = ed_free,
};
