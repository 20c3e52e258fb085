/* libticketing's public calls: create/destroy (configuration is
 * client/client_cfg.c's), the request pool, submission to the I/O thread, the blocking wrappers and
 * stats.
 *
 * Cost per request on the caller's thread: one mutex section (take a
 * request from the pool, append it to the submission list) and, only when
 * the I/O thread is not already awake, one eventfd write. Requests come
 * from chunks that are never freed before tk_client_destroy(), so the steady
 * state allocates nothing.
 */
#include "client/internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "core/addr.h"
#include "core/proto.h"

/* ---- small things ------------------------------------------------------ */

_Thread_local bool cl_on_client_thread;

uint64_t cl_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

uint64_t tk_client_now_us(void)
{
    return cl_now_us();
}

void cl_log(struct tk_client *c, int level, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    if (c->cfg.log == NULL)
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    c->cfg.log(c->cfg.log_arg, level, msg);
}

uint32_t tk_client_slot(const char *key, size_t len)
{
    _Static_assert(TK_CLIENT_SLOTS == TK_SLOTS, "one slot count");
    return tk_slot(key, len);
}

const char *tk_client_strerror(int err)
{
    static const char *const msgs[] = {
        [TK_CLIENT_ENONE] = "no error",
        [TK_CLIENT_EINVAL] = "invalid argument",
        [TK_CLIENT_ENOMEM] = "out of memory or too many requests in progress",
        [TK_CLIENT_EFULL] = "release queue full",
        [TK_CLIENT_ESECRET] = "secret unreadable, too short or too long",
        [TK_CLIENT_EUNSUPPORTED] = "not supported",
        [TK_CLIENT_ESYSTEM] = "system call failed",
        [TK_CLIENT_ESHUTDOWN] = "client is shutting down",
        [TK_CLIENT_ENOTFOUND] = "no such request in progress",
        [TK_CLIENT_ETLS] = "unusable TLS settings (tk_client_tls_check() names the problem)",
    };
    if (err < 0 || (size_t)err >= TK_ARRAY_LEN(msgs) || msgs[err] == NULL)
        return "unknown error";
    return msgs[err];
}

const char *tk_client_outcome_str(enum tk_client_outcome o)
{
    static const char *const names[] = {
        [TK_CLIENT_ACQUIRED] = "acquired",
        [TK_CLIENT_TIMEOUT] = "timeout",
        [TK_CLIENT_BUSY] = "busy",
        [TK_CLIENT_INVALID] = "invalid",
        [TK_CLIENT_UNAVAILABLE] = "unavailable",
        [TK_CLIENT_INDETERMINATE] = "indeterminate",
        [TK_CLIENT_CANCELLED] = "cancelled",
        [TK_CLIENT_RELEASED] = "released",
        [TK_CLIENT_NOT_HELD] = "not_held",
        [TK_CLIENT_UNCONFIRMED] = "unconfirmed",
        [TK_CLIENT_QUEUE_FULL] = "queue_full",
        [TK_CLIENT_ANSWERED] = "answered",
        [TK_CLIENT_WRONG_GROUP] = "wrong_group",
    };
    if ((unsigned)o >= TK_ARRAY_LEN(names) || names[o] == NULL)
        return "unknown";
    return names[o];
}

void cl_wake(struct tk_client *c)
{
    /* Only the first waker since the I/O thread last looked pays for the
     * syscall; the I/O thread clears the flag before it drains. */
    if (!atomic_exchange_explicit(&c->wake_pending, true, memory_order_seq_cst)) {
        uint64_t one = 1;
        ssize_t w = write(c->efd, &one, sizeof one);
        (void)w; /* EAGAIN means the counter is already non-zero: awake anyway */
    }
}

/* ---- create / destroy -------------------------------------------------- */

static int client_setup_io(struct tk_client *c)
{
    c->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    c->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (c->efd < 0 || c->epfd < 0)
        return TK_CLIENT_ESYSTEM;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    if (epoll_ctl(c->epfd, EPOLL_CTL_ADD, c->efd, &ev) != 0)
        return TK_CLIENT_ESYSTEM;
    c->nchunks = (c->pool_cap + CL_POOL_CHUNK - 1) / CL_POOL_CHUNK;
    c->chunks = calloc(c->nchunks, sizeof *c->chunks);
    if (c->chunks == NULL)
        return TK_CLIENT_ENOMEM;
    char seed[TK_AUTH_HEX_LEN + 1];
    if (tk_auth_nonce(seed) != TK_OK)
        return TK_CLIENT_ESYSTEM;
    uint64_t s = 0;
    for (int i = 0; i < 16; i++)
        s = (s << 4) | (uint64_t)(seed[i] <= '9' ? seed[i] - '0' : seed[i] - 'a' + 10);
    tk_prng_seed(&c->prng, s);
    return TK_CLIENT_ENONE;
}

static struct tk_client *client_alloc(void)
{
    struct tk_client *c = calloc(1, sizeof *c);
    if (c == NULL)
        return NULL;
    c->efd = -1;
    c->epfd = -1;
    c->leader = -1;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->ready_cond, NULL);
    pthread_mutex_init(&c->rmu, NULL);
    pthread_cond_init(&c->rcond, NULL);
    return c;
}

/* After configuration: the I/O thread, and (seed only) the routing. */
static int client_start(struct tk_client *c, bool seed)
{
    int rc = client_setup_io(c);
    if (rc != 0)
        return rc;
    if (pthread_create(&c->io_thread, NULL, cl_io_main, c) != 0)
        return TK_CLIENT_ESYSTEM;
    c->io_started = true;
    return seed ? cl_route_start(c) : TK_CLIENT_ENONE;
}

int tk_client_create(const struct tk_client_config *cfg, struct tk_client **out)
{
    int rc;
    if (cfg == NULL || out == NULL)
        return TK_CLIENT_EINVAL;
    *out = NULL;
    struct tk_client *c = client_alloc();
    if (c == NULL)
        return TK_CLIENT_ENOMEM;
    if ((rc = cl_configure(c, cfg)) != 0 || (rc = client_start(c, true)) != 0)
        goto err;
    *out = c;
    return TK_CLIENT_ENONE;
err:
    TK_ASSERT(rc != 0);
    tk_client_destroy(c);
    return rc;
}

int cl_child_create(const struct tk_client *seed, const char *addrs, struct tk_client **out)
{
    int rc;
    *out = NULL;
    struct tk_client *c = client_alloc();
    if (c == NULL)
        return TK_CLIENT_ENOMEM;
    if ((rc = cl_configure_child(c, seed, addrs)) != 0 || (rc = client_start(c, false)) != 0) {
        tk_client_destroy(c);
        return rc;
    }
    *out = c;
    return TK_CLIENT_ENONE;
}

void tk_client_destroy(struct tk_client *c)
{
    if (c == NULL)
        return;
    cl_route_stop(c); /* its requests end on the groups' clients, stopped next */
    if (c->io_started) {
        TK_ASSERT(!pthread_equal(pthread_self(), c->io_thread)); /* not from a callback */
        pthread_mutex_lock(&c->mu);
        c->stopping = true;
        pthread_mutex_unlock(&c->mu);
        cl_wake(c);
        pthread_join(c->io_thread, NULL);
    }
    cl_resolve_stop(c);
    for (unsigned i = 0; i < c->nconns; i++)
        cl_conn_free(c->conns[i]);
    tk_tls_ctx_unref(c->tls_ctx); /* after the connections, which hold references */
    for (uint32_t i = 0; c->chunks != NULL && i < c->nchunks; i++)
        free(c->chunks[i]);
    free(c->chunks);
    free(c->cancels);
    free(c->heap);
    if (c->efd >= 0)
        close(c->efd);
    if (c->epfd >= 0)
        close(c->epfd);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->ready_cond);
    pthread_mutex_destroy(&c->rmu);
    pthread_cond_destroy(&c->rcond);
    cl_route_free(c);
    explicit_bzero(c->secret, sizeof c->secret);
    free(c);
}

const char *tk_client_owner(const struct tk_client *c)
{
    return c->owner;
}

size_t tk_client_last_error(struct tk_client *c, char *buf, size_t cap)
{
    pthread_mutex_lock(&c->mu);
    size_t n = strlen(c->last_error);
    if (cap > 0)
        snprintf(buf, cap, "%s", c->last_error);
    pthread_mutex_unlock(&c->mu);
    return n;
}

/* ---- the request pool (under mu) ---------------------------------------- */

struct cl_req *cl_req_at(struct tk_client *c, uint32_t index)
{
    TK_ASSERT(index < c->pool_len);
    return &c->chunks[index / CL_POOL_CHUNK][index % CL_POOL_CHUNK];
}

static struct cl_req *pool_get(struct tk_client *c)
{
    struct cl_req *r = c->free_list;
    if (r != NULL) {
        c->free_list = r->next;
    } else {
        if (c->pool_len == c->pool_cap)
            return NULL;
        uint32_t chunk = c->pool_len / CL_POOL_CHUNK;
        if (c->chunks[chunk] == NULL) {
            c->chunks[chunk] = calloc(CL_POOL_CHUNK, sizeof(struct cl_req));
            if (c->chunks[chunk] == NULL)
                return NULL;
        }
        r = &c->chunks[chunk][c->pool_len % CL_POOL_CHUNK];
        r->index = c->pool_len++;
        r->gen = 1;
    }
    uint32_t index = r->index, gen = r->gen;
    memset(r, 0, sizeof *r);
    r->index = index;
    r->gen = gen;
    r->heap_idx = UINT32_MAX;
    return r;
}

/* Returns the requests the I/O thread freed this round (c->to_free). */
void cl_release_req(struct tk_client *c, struct cl_req *r)
{
    TK_ASSERT(r->decided);
    TK_ASSERT(r->wire == CL_WIRE_NONE);
    TK_ASSERT(r->heap_idx == UINT32_MAX);
    TK_ASSERT(!r->pending);
    r->next = c->to_free;
    c->to_free = r;
}

void cl_pool_return(struct tk_client *c)
{
    if (c->to_free == NULL)
        return;
    pthread_mutex_lock(&c->mu);
    while (c->to_free != NULL) {
        struct cl_req *r = c->to_free;
        c->to_free = r->next;
        if (r->type == 'R') {
            TK_ASSERT(c->live_releases > 0);
            c->live_releases--;
        } else {
            TK_ASSERT(c->live_requests > 0);
            c->live_requests--;
        }
        r->gen = r->gen + 1 != 0 ? r->gen + 1 : 1; /* a handle is never 0 */
        r->type = 0;
        r->next = c->free_list;
        c->free_list = r;
    }
    pthread_mutex_unlock(&c->mu);
}

struct cl_req *cl_compensation_new(struct tk_client *c,
                                   const char *key,
                                   size_t key_len,
                                   uint64_t token)
{
    struct cl_req *r = NULL;
    pthread_mutex_lock(&c->mu);
    if (c->live_releases < c->cfg.release_queue_max) {
        r = pool_get(c);
        if (r != NULL)
            c->live_releases++;
    }
    pthread_mutex_unlock(&c->mu);
    if (r == NULL)
        return NULL;
    r->type = 'R';
    r->compensation = true;
    memcpy(r->key, key, key_len);
    r->key[key_len] = '\0';
    r->key_len = (uint16_t)key_len;
    r->token = token;
    r->submit_us = cl_now_us();
    return r;
}

/* ---- submission -------------------------------------------------------- */

/* Checks the fields the way the server would (SPEC 5) and names the first
 * bad one in reason (may be NULL). */
int cl_submit_check(const struct cl_submit_args *a, size_t *key_len, char *reason)
{
    const char *bad = NULL;
    *key_len = 0;
    if (a->type != 'P' && a->type != 'S') {
        *key_len = a->key ? strnlen(a->key, TK_KEY_LEN_MAX + 1) : 0;
        if (a->key == NULL || !tk_proto_key_ok(a->key, *key_len))
            bad = "key";
    }
    if (bad == NULL && a->type == 'A' &&
        (a->lease_ms < TK_LEASE_MS_MIN || a->lease_ms > TK_LEASE_MS_MAX))
        bad = "lease";
    if (bad == NULL && a->type == 'A' && a->wait_ms > TK_WAIT_MS_MAX)
        bad = "wait";
    if (bad == NULL && a->type == 'R' && a->token == 0)
        bad = "token";
    if (bad == NULL && a->type == 'S' && a->ring_buf == NULL && a->ring_cap > 0)
        bad = "buffer";
    if (bad != NULL && reason != NULL)
        snprintf(reason, 16, "%s", bad);
    return bad != NULL || a->done == NULL ? TK_CLIENT_EINVAL : TK_CLIENT_ENONE;
}

int cl_submit(struct tk_client *c, const struct cl_submit_args *a, uint64_t *handle, char *reason)
{
    size_t key_len;
    int rc = cl_submit_check(a, &key_len, reason);
    if (rc != 0)
        return rc;
    uint64_t now = cl_now_us();
    pthread_mutex_lock(&c->mu);
    bool rel = a->type == 'R';
    struct cl_req *r = NULL;
    if (c->stopping)
        rc = TK_CLIENT_ESHUTDOWN;
    else if (rel ? c->live_releases >= c->cfg.release_queue_max
                 : c->live_requests >= c->cfg.requests_max)
        rc = rel ? TK_CLIENT_EFULL : TK_CLIENT_ENOMEM;
    else if ((r = pool_get(c)) == NULL)
        rc = TK_CLIENT_ENOMEM;
    if (r != NULL) {
        *(rel ? &c->live_releases : &c->live_requests) += 1;
        r->type = a->type;
        memcpy(r->key, a->key ? a->key : "", key_len);
        r->key[key_len] = '\0';
        r->key_len = (uint16_t)key_len;
        r->lease_ms = a->lease_ms;
        r->wait_ms = a->wait_ms;
        r->token = a->token;
        r->ring_buf = a->ring_buf;
        r->ring_cap = a->ring_cap;
        r->submit_us = a->submit_us != 0 ? a->submit_us : now;
        r->done = a->done;
        r->arg = a->arg;
        cl_list_push_back(&c->submitted, r);
        if (handle != NULL)
            *handle = (uint64_t)r->gen << 32 | r->index;
    }
    pthread_mutex_unlock(&c->mu);
    if (r != NULL)
        cl_wake(c);
    return rc;
}

int tk_client_acquire_async(struct tk_client *c,
                            const char *key,
                            uint32_t lease_ms,
                            uint32_t wait_ms,
                            void (*done)(void *arg, const struct tk_client_result *result),
                            void *arg,
                            uint64_t *handle)
{
    struct cl_submit_args a = {.type = 'A',
                               .key = key,
                               .lease_ms = lease_ms,
                               .wait_ms = wait_ms,
                               .done = done,
                               .arg = arg};
    return cl_route_submit(c, &a, handle, NULL);
}

int tk_client_release_async(struct tk_client *c,
                            const char *key,
                            uint64_t token,
                            void (*done)(void *arg, const struct tk_client_result *result),
                            void *arg)
{
    struct cl_submit_args a = {.type = 'R', .key = key, .token = token, .done = done, .arg = arg};
    return cl_route_submit(c, &a, NULL, NULL);
}

int tk_client_query_async(struct tk_client *c,
                          const char *key,
                          void (*done)(void *arg, const struct tk_client_result *result),
                          void *arg)
{
    struct cl_submit_args a = {.type = 'Q', .key = key, .done = done, .arg = arg};
    return cl_route_submit(c, &a, NULL, NULL);
}

int tk_client_ping_async(struct tk_client *c,
                         void (*done)(void *arg, const struct tk_client_result *result),
                         void *arg)
{
    struct cl_submit_args a = {.type = 'P', .done = done, .arg = arg};
    return cl_submit(c, &a, NULL, NULL);
}

int tk_client_ring_async(struct tk_client *c,
                         char *buf,
                         size_t cap,
                         void (*done)(void *arg, const struct tk_client_result *result),
                         void *arg)
{
    struct cl_submit_args a = {
        .type = 'S', .ring_buf = buf, .ring_cap = cap, .done = done, .arg = arg};
    /* "" until an answer fills it: the I/O thread writes it only later. */
    if (buf != NULL && cap > 0)
        buf[0] = '\0';
    return cl_submit(c, &a, NULL, NULL);
}

int cl_cancel(struct tk_client *c, uint64_t handle)
{
    uint32_t index = (uint32_t)handle, gen = (uint32_t)(handle >> 32);
    int rc = TK_CLIENT_ENONE;
    pthread_mutex_lock(&c->mu);
    if (c->stopping) {
        rc = TK_CLIENT_ESHUTDOWN;
    } else if (index >= c->pool_len || cl_req_at(c, index)->gen != gen ||
               cl_req_at(c, index)->type != 'A') {
        rc = TK_CLIENT_ENOTFOUND;
    } else if (c->ncancels == c->cancels_cap) {
        size_t cap = c->cancels_cap ? 2 * c->cancels_cap : 64;
        uint64_t *p = cap <= c->pool_cap * 2u ? realloc(c->cancels, cap * sizeof *p) : NULL;
        if (p == NULL)
            rc = TK_CLIENT_ENOMEM;
        else {
            c->cancels = p;
            c->cancels_cap = cap;
        }
    }
    if (rc == TK_CLIENT_ENONE)
        c->cancels[c->ncancels++] = handle;
    pthread_mutex_unlock(&c->mu);
    if (rc == TK_CLIENT_ENONE)
        cl_wake(c);
    return rc;
}

int tk_client_cancel(struct tk_client *c, uint64_t handle)
{
    return c->route != NULL ? cl_route_cancel(c, handle) : cl_cancel(c, handle);
}

/* ---- blocking wrappers -------------------------------------------------- */

struct waiter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    struct tk_client_result res;
};

static void waiter_done(void *arg, const struct tk_client_result *result)
{
    struct waiter *w = arg;
    pthread_mutex_lock(&w->mu);
    w->res = *result;
    w->done = true;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

/* Runs one request to its outcome. Local refusals become outcomes: a bad
 * field is INVALID with its reason, a full release queue QUEUE_FULL, no room
 * for another request UNAVAILABLE (nothing was sent), a client shutting down
 * CANCELLED, a call from the I/O thread INVALID "thread". */
enum tk_client_outcome cl_blocking(struct tk_client *c,
                                   struct cl_submit_args *a,
                                   struct tk_client_result *out)
{
    struct waiter w = {.done = false};
    struct tk_client_result tmp;
    struct tk_client_result *res = out ? out : &tmp;
    memset(res, 0, sizeof *res);
    res->key = a->key ? a->key : "";
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    a->done = waiter_done;
    a->arg = &w;
    bool keyed = a->type == 'A' || a->type == 'R' || a->type == 'Q';
    int rc = keyed && c->route != NULL ? cl_route_submit(c, a, NULL, res->reason)
                                       : cl_submit(c, a, NULL, res->reason);
    if (rc == TK_CLIENT_ENONE) {
        pthread_mutex_lock(&w.mu);
        while (!w.done)
            pthread_cond_wait(&w.cv, &w.mu);
        pthread_mutex_unlock(&w.mu);
        *res = w.res;
        res->key = a->key ? a->key : "";
    } else if (rc == TK_CLIENT_EINVAL) {
        res->outcome = TK_CLIENT_INVALID;
    } else if (rc == TK_CLIENT_EFULL) {
        res->outcome = TK_CLIENT_QUEUE_FULL;
    } else if (rc == TK_CLIENT_ESHUTDOWN) {
        res->outcome = TK_CLIENT_CANCELLED;
        snprintf(res->reason, sizeof res->reason, "shutdown");
    } else {
        res->outcome = TK_CLIENT_UNAVAILABLE;
        snprintf(res->reason, sizeof res->reason, "requests_max");
    }
    pthread_mutex_destroy(&w.mu);
    pthread_cond_destroy(&w.cv);
    return res->outcome;
}

/* A blocking call: refused on the library's own threads (a callback
 * waiting there for an answer that thread must deliver would wait
 * forever). */
static enum tk_client_outcome blocking(struct tk_client *c,
                                       struct cl_submit_args *a,
                                       struct tk_client_result *out)
{
    if (cl_on_client_thread) {
        struct tk_client_result tmp;
        struct tk_client_result *res = out ? out : &tmp;
        memset(res, 0, sizeof *res);
        res->key = a->key ? a->key : "";
        res->outcome = TK_CLIENT_INVALID;
        snprintf(res->reason, sizeof res->reason, "thread");
        return res->outcome;
    }
    return cl_blocking(c, a, out);
}

enum tk_client_outcome tk_client_acquire(struct tk_client *c,
                                         const char *key,
                                         uint32_t lease_ms,
                                         uint32_t wait_ms,
                                         struct tk_client_result *out)
{
    struct cl_submit_args a = {.type = 'A', .key = key, .lease_ms = lease_ms, .wait_ms = wait_ms};
    return blocking(c, &a, out);
}

enum tk_client_outcome tk_client_release(struct tk_client *c,
                                         const char *key,
                                         uint64_t token,
                                         struct tk_client_result *out)
{
    struct cl_submit_args a = {.type = 'R', .key = key, .token = token};
    return blocking(c, &a, out);
}

enum tk_client_outcome tk_client_query(struct tk_client *c,
                                       const char *key,
                                       struct tk_client_result *out)
{
    struct cl_submit_args a = {.type = 'Q', .key = key};
    return blocking(c, &a, out);
}

enum tk_client_outcome tk_client_ping(struct tk_client *c, struct tk_client_result *out)
{
    struct cl_submit_args a = {.type = 'P'};
    return blocking(c, &a, out);
}

enum tk_client_outcome tk_client_ring(struct tk_client *c,
                                      char *buf,
                                      size_t cap,
                                      struct tk_client_result *out)
{
    struct cl_submit_args a = {.type = 'S', .ring_buf = buf, .ring_cap = cap};
    if (buf != NULL && cap > 0)
        buf[0] = '\0'; /* also what a refusal without a round trip leaves */
    return blocking(c, &a, out);
}

bool tk_client_wait_ready(struct tk_client *c, uint32_t timeout_ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t ns = (uint64_t)ts.tv_nsec + (uint64_t)timeout_ms * 1000000u;
    ts.tv_sec += (time_t)(ns / 1000000000u);
    ts.tv_nsec = (long)(ns % 1000000000u);
    pthread_mutex_lock(&c->mu);
    while (c->ready_count == 0 && !c->stopping)
        if (pthread_cond_timedwait(&c->ready_cond, &c->mu, &ts) == ETIMEDOUT)
            break;
    bool ready = c->ready_count > 0;
    pthread_mutex_unlock(&c->mu);
    return ready;
}

void tk_client_stats(struct tk_client *c, struct tk_client_stats *out)
{
    memset(out, 0, sizeof *out);
    out->connections = atomic_load(&c->nconns_pub);
    out->connect_attempts = atomic_load(&c->st_connect_attempts);
    out->handshakes = atomic_load(&c->st_handshakes);
    out->auth_failures = atomic_load(&c->st_auth_failures);
    out->moved = atomic_load(&c->st_moved);
    out->requests_written = atomic_load(&c->st_written);
    out->compensations = atomic_load(&c->st_compensations);
    out->compensations_dropped = atomic_load(&c->st_compensations_dropped);
    out->indeterminate = atomic_load(&c->st_indeterminate);
    pthread_mutex_lock(&c->mu);
    out->connections_ready = c->ready_count;
    out->requests_in_progress = c->live_requests;
    out->releases_queued = c->live_releases;
    snprintf(out->leader_hint, sizeof out->leader_hint, "%s", c->leader_hint);
    pthread_mutex_unlock(&c->mu);
    if (c->route != NULL)
        cl_route_stats(c, out);
}
