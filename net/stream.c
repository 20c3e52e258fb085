/* One byte stream over a socket (net/stream.h): buffers, the plain and TLS
 * transforms, peer names, failure-line limits and handshake deadlines. */
#include "net/stream.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "core/tls.h"

#define SBUF_CAP_MIN 4096u
/* Room made in s->in for each tk_tls_read(): one TLS record at most. */
#define TLS_READ_CHUNK (16u << 10)

void tk_sbuf_grow(struct tk_sbuf *b, size_t extra)
{
    TK_ASSERT(b->len + extra < UINT32_MAX / 2);
    uint32_t cap = b->cap ? b->cap : SBUF_CAP_MIN;
    while (cap < b->len + extra)
        cap *= 2;
    char *p = realloc(b->p, cap);
    TK_ASSERT(p != NULL);
    b->p = p;
    b->cap = cap;
}

void tk_sbuf_free(struct tk_sbuf *b)
{
    free(b->p);
    memset(b, 0, sizeof(*b));
}

/* ---- plain --------------------------------------------------------------- */

static int plain_input(struct tk_stream *s, const char *data, size_t n, size_t in_max)
{
    if (in_max && s->in.len + n > in_max)
        return TK_EFULL;
    if (data != s->in.p + s->in.len) {
        tk_sbuf_reserve(&s->in, n);
        memcpy(s->in.p + s->in.len, data, n);
    }
    TK_ASSERT(s->in.len + n <= s->in.cap);
    s->in.len += (uint32_t)n;
    return TK_OK;
}

/* The buffers change places: no copy. */
static int plain_output(struct tk_stream *s)
{
    TK_ASSERT(s->snd.len == 0);
    if (s->out.len == 0)
        return TK_OK;
    struct tk_sbuf t = s->snd;
    s->snd = s->out;
    s->out = t;
    s->out.len = 0;
    s->snd_off = 0;
    return TK_OK;
}

static size_t plain_pending(const struct tk_stream *s)
{
    (void)s;
    return 0;
}

static void plain_discard(struct tk_stream *s)
{
    s->out.len = 0;
}

const struct tk_stream_type tk_stream_plain = {
    .input = plain_input,
    .output = plain_output,
    .pending = plain_pending,
    .discard = plain_discard,
};

/* ---- TLS ----------------------------------------------------------------- */

/* Received ciphertext in; every byte of plaintext it completes out into
 * s->in, so nothing waits inside TLS for a recv that a pause may stop.
 * tk_tls_feed() copies the ciphertext away first, so it may sit in the
 * tail of s->in that the plaintext then overwrites. Handshake messages
 * (and alerts) the input produced wait in pending. */
static int tls_input(struct tk_stream *s, const char *data, size_t n, size_t in_max)
{
    int rc = tk_tls_feed(s->tls, data, n);
    while (rc == TK_OK) {
        if (in_max && s->in.len > in_max)
            return TK_EFULL;
        tk_sbuf_reserve(&s->in, TLS_READ_CHUNK);
        size_t got = 0;
        rc = tk_tls_read(s->tls, s->in.p + s->in.len, s->in.cap - s->in.len, &got);
        if (got == 0)
            break;
        s->in.len += (uint32_t)got;
    }
    return rc;
}

/* The plaintext is encrypted in one call (records of up to 16 KiB rather
 * than one per line or frame), then all ciphertext pending is taken,
 * handshake messages included. A copy, because TLS appends to its buffer
 * (a post-handshake message) while a send of the previous bytes is still
 * in flight. */
static int tls_output(struct tk_stream *s)
{
    TK_ASSERT(s->snd.len == 0);
    if (s->out.len > 0) {
        uint32_t len = s->out.len;
        s->out.len = 0;
        if (tk_tls_write(s->tls, s->out.p, len) != TK_OK)
            return TK_EPROTO;
    }
    size_t n;
    const uint8_t *p = tk_tls_pending(s->tls, &n);
    if (n == 0)
        return TK_OK;
    tk_sbuf_reserve(&s->snd, n);
    memcpy(s->snd.p, p, n);
    s->snd.len = (uint32_t)n;
    s->snd_off = 0;
    tk_tls_sent(s->tls, n);
    return TK_OK;
}

static size_t tls_pending(const struct tk_stream *s)
{
    size_t n = 0;
    tk_tls_pending(s->tls, &n);
    return n;
}

static void tls_discard(struct tk_stream *s)
{
    s->out.len = 0;
    size_t n = tls_pending(s);
    if (n)
        tk_tls_sent(s->tls, n);
}

const struct tk_stream_type tk_stream_tls = {
    .input = tls_input,
    .output = tls_output,
    .pending = tls_pending,
    .discard = tls_discard,
};

/* wolfSSL (built with FP_ECC) keeps an ECC point cache per thread, filled
 * by the handshakes a thread runs, that only that thread can free: a
 * thread-specific destructor frees it when a thread that ran TLS exits
 * (a worker, the Raft thread), so their owners need no TLS call. */
static pthread_key_t tls_thread_key;
static pthread_once_t tls_thread_once = PTHREAD_ONCE_INIT;

static void tls_thread_end(void *unused)
{
    (void)unused;
    tk_tls_thread_done();
}

static void tls_thread_key_init(void)
{
    int rc = pthread_key_create(&tls_thread_key, tls_thread_end);
    TK_ASSERT(rc == 0);
}

void tk_stream_tls_thread(void)
{
    pthread_once(&tls_thread_once, tls_thread_key_init);
    if (!pthread_getspecific(tls_thread_key))
        pthread_setspecific(tls_thread_key, (void *)1);
}

/* ---- the stream ---------------------------------------------------------- */

void tk_stream_open(struct tk_stream *s, int fd, struct tk_tls *tls)
{
    TK_ASSERT(s->tls == NULL);
    s->fd = fd;
    s->tls = tls;
    s->type = tls ? &tk_stream_tls : &tk_stream_plain;
    s->in.len = s->out.len = s->snd.len = 0;
    s->snd_off = 0;
}

void tk_stream_reset(struct tk_stream *s)
{
    tk_tls_free(s->tls); /* drops its reference to the context it began with */
    s->tls = NULL;
    s->type = &tk_stream_plain;
    s->in.len = s->out.len = s->snd.len = 0;
    s->snd_off = 0;
}

void tk_stream_free(struct tk_stream *s)
{
    tk_stream_reset(s);
    tk_sbuf_free(&s->in);
    tk_sbuf_free(&s->out);
    tk_sbuf_free(&s->snd);
}

bool tk_stream_has_output(const struct tk_stream *s)
{
    return s->out.len > 0 || s->type->pending(s) > 0;
}

void tk_stream_sent(struct tk_stream *s, size_t n)
{
    s->snd_off += (uint32_t)n;
    TK_ASSERT(s->snd_off <= s->snd.len);
    if (s->snd_off == s->snd.len)
        s->snd.len = s->snd_off = 0;
}

void tk_stream_push_now(struct tk_stream *s, bool send_inflight)
{
    size_t n = 0;
    const uint8_t *c = s->tls ? tk_tls_pending(s->tls, &n) : NULL;
    if (n == 0 || send_inflight || s->fd < 0)
        return;
    ssize_t w = send(s->fd, c, n, MSG_DONTWAIT | MSG_NOSIGNAL);
    (void)w;
    tk_tls_sent(s->tls, n);
}

const char *tk_stream_peer_name(int fd, char *buf, size_t cap)
{
    struct sockaddr_storage a;
    socklen_t len = sizeof(a);
    char host[INET6_ADDRSTRLEN];
    if (fd < 0 || getpeername(fd, (struct sockaddr *)&a, &len) != 0) {
        snprintf(buf, cap, "an unknown address");
    } else if (a.ss_family == AF_INET) {
        const struct sockaddr_in *v4 = (const struct sockaddr_in *)&a;
        inet_ntop(AF_INET, &v4->sin_addr, host, sizeof(host));
        snprintf(buf, cap, "%s:%u", host, ntohs(v4->sin_port));
    } else if (a.ss_family == AF_INET6) {
        const struct sockaddr_in6 *v6 = (const struct sockaddr_in6 *)&a;
        inet_ntop(AF_INET6, &v6->sin6_addr, host, sizeof(host));
        snprintf(buf, cap, "[%s]:%u", host, ntohs(v6->sin6_port));
    } else {
        snprintf(buf, cap, "an address of family %d", a.ss_family);
    }
    return buf;
}

bool tk_stream_log_take(struct tk_stream_log *ll,
                        uint64_t now_us,
                        uint64_t window_us,
                        uint32_t burst,
                        uint32_t *unlogged)
{
    if (ll->window_us == 0 || now_us - ll->window_us >= window_us) {
        ll->window_us = now_us;
        ll->logged = 0;
    }
    if (ll->logged >= burst) {
        ll->unlogged++;
        return false;
    }
    ll->logged++;
    *unlogged = ll->unlogged;
    ll->unlogged = 0;
    return true;
}

/* ---- handshake deadlines ------------------------------------------------- */

int tk_deadlines_init(struct tk_deadlines *d,
                      uint32_t cap,
                      void *ctx,
                      bool (*live)(void *ctx, uint32_t slot, uint32_t gen))
{
    TK_ASSERT(cap > 0);
    memset(d, 0, sizeof(*d));
    d->q = calloc(cap, sizeof(*d->q));
    if (!d->q)
        return TK_ENOMEM;
    d->cap = cap;
    d->ctx = ctx;
    d->live = live;
    return TK_OK;
}

void tk_deadlines_free(struct tk_deadlines *d)
{
    free(d->q);
    d->q = NULL;
    d->len = 0;
}

static struct tk_deadline *deadline_at(struct tk_deadlines *d, uint32_t i)
{
    return &d->q[(d->head + i) % d->cap];
}

/* Drops the entries of streams that finished or closed, keeping order. */
static void deadlines_compact(struct tk_deadlines *d)
{
    uint32_t kept = 0;
    for (uint32_t i = 0; i < d->len; i++) {
        struct tk_deadline e = *deadline_at(d, i);
        if (d->live(d->ctx, e.slot, e.gen))
            *deadline_at(d, kept++) = e;
    }
    d->len = kept;
}

void tk_deadlines_push(struct tk_deadlines *d, uint32_t slot, uint32_t gen, uint64_t at_us)
{
    if (d->len == d->cap)
        deadlines_compact(d);
    TK_ASSERT(d->len < d->cap);
    struct tk_deadline *e = deadline_at(d, d->len);
    e->slot = slot;
    e->gen = gen;
    e->at_us = at_us;
    d->len++;
}

bool tk_deadlines_next(const struct tk_deadlines *d, uint64_t *at_us)
{
    if (d->len == 0)
        return false;
    *at_us = d->q[d->head].at_us;
    return true;
}

void tk_deadlines_expire(struct tk_deadlines *d,
                         uint64_t now_us,
                         void (*expire)(void *ctx, uint32_t slot, uint32_t gen))
{
    while (d->len > 0) {
        struct tk_deadline e = *deadline_at(d, 0);
        if (d->live(d->ctx, e.slot, e.gen)) {
            if (e.at_us > now_us)
                break;
            expire(d->ctx, e.slot, e.gen);
        }
        d->head = (d->head + 1) % d->cap;
        d->len--;
    }
}

void tk_deadlines_budget(struct tk_deadlines *d,
                         uint32_t handshaking,
                         uint32_t budget,
                         bool (*evict)(void *ctx, uint32_t slot, uint32_t gen))
{
    for (uint32_t i = 0; i < d->len && handshaking >= budget; i++) {
        struct tk_deadline e = *deadline_at(d, i);
        if (d->live(d->ctx, e.slot, e.gen) && evict(d->ctx, e.slot, e.gen))
            handshaking--;
    }
}
