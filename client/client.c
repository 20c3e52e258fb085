/* libticketing's public calls: configuration, create/destroy, the request
 * pool, submission to the I/O thread, the blocking wrappers and stats.
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

#define CL_DEF_CONNECT_TIMEOUT_MS 5000u
#define CL_DEF_RESPONSE_GRACE_MS 2000u
#define CL_DEF_SEND_BUDGET_MIN_MS 1000u
#define CL_DEF_REQUEST_TIMEOUT_MS 5000u
#define CL_DEF_RELEASE_QUEUE_MAX 1024u
#define CL_DEF_REQUESTS_MAX 65536u
#define CL_DEF_INFLIGHT_MAX 4096u
#define CL_DEF_BACKOFF_MIN_MS 100u
#define CL_DEF_BACKOFF_MAX_MS 3200u
#define CL_REQUESTS_MAX_MAX (1u << 24)
#define CL_INFLIGHT_MAX_MAX (1u << 20)

/* ---- small things ------------------------------------------------------ */

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

/* ---- configuration ----------------------------------------------------- */

void tk_client_config_init(struct tk_client_config *cfg)
{
    TK_ASSERT(cfg != NULL);
    memset(cfg, 0, sizeof *cfg);
    cfg->connect_timeout_ms = CL_DEF_CONNECT_TIMEOUT_MS;
    cfg->response_grace_ms = CL_DEF_RESPONSE_GRACE_MS;
    cfg->send_budget_min_ms = CL_DEF_SEND_BUDGET_MIN_MS;
    cfg->request_timeout_ms = CL_DEF_REQUEST_TIMEOUT_MS;
    cfg->release_queue_max = CL_DEF_RELEASE_QUEUE_MAX;
    cfg->requests_max = CL_DEF_REQUESTS_MAX;
    cfg->inflight_per_connection_max = CL_DEF_INFLIGHT_MAX;
    cfg->backoff_min_ms = CL_DEF_BACKOFF_MIN_MS;
    cfg->backoff_max_ms = CL_DEF_BACKOFF_MAX_MS;
}

static uint32_t cfg_or(uint32_t v, uint32_t def)
{
    return v != 0 ? v : def;
}

/* Copies the numbers with defaults applied and checks them. */
static int client_cfg_numbers(struct tk_client *c, const struct tk_client_config *in)
{
    struct tk_client_config *o = &c->cfg;
    o->connect_timeout_ms = cfg_or(in->connect_timeout_ms, CL_DEF_CONNECT_TIMEOUT_MS);
    o->response_grace_ms = cfg_or(in->response_grace_ms, CL_DEF_RESPONSE_GRACE_MS);
    o->send_budget_min_ms = cfg_or(in->send_budget_min_ms, CL_DEF_SEND_BUDGET_MIN_MS);
    o->request_timeout_ms = cfg_or(in->request_timeout_ms, CL_DEF_REQUEST_TIMEOUT_MS);
    o->release_queue_max = cfg_or(in->release_queue_max, CL_DEF_RELEASE_QUEUE_MAX);
    o->requests_max = cfg_or(in->requests_max, CL_DEF_REQUESTS_MAX);
    o->inflight_per_connection_max = cfg_or(in->inflight_per_connection_max, CL_DEF_INFLIGHT_MAX);
    o->backoff_min_ms = cfg_or(in->backoff_min_ms, CL_DEF_BACKOFF_MIN_MS);
    o->backoff_max_ms = cfg_or(in->backoff_max_ms, CL_DEF_BACKOFF_MAX_MS);
    o->log = in->log;
    o->log_arg = in->log_arg;
    if (o->requests_max > CL_REQUESTS_MAX_MAX || o->release_queue_max > CL_REQUESTS_MAX_MAX ||
        o->inflight_per_connection_max > CL_INFLIGHT_MAX_MAX ||
        o->backoff_min_ms > o->backoff_max_ms)
        return TK_CLIENT_EINVAL;
    c->pool_cap = o->requests_max + o->release_queue_max;
    return TK_CLIENT_ENONE;
}

static int client_cfg_secret(struct tk_client *c, const struct tk_client_config *in)
{
    if (in->secret_file != NULL && in->secret != NULL)
        return TK_CLIENT_EINVAL;
    if (in->secret_file != NULL) {
        int rc = tk_auth_load_secret(in->secret_file, c->secret, sizeof c->secret, &c->secret_len);
        return rc == TK_OK ? TK_CLIENT_ENONE : TK_CLIENT_ESECRET;
    }
    if (in->secret == NULL || in->secret_len < TK_AUTH_SECRET_MIN ||
        in->secret_len > TK_AUTH_SECRET_MAX)
        return TK_CLIENT_ESECRET;
    memcpy(c->secret, in->secret, in->secret_len);
    c->secret_len = in->secret_len;
    return TK_CLIENT_ENONE;
}

/* The default owner: "<host>-<pid>-<12 random hex>", host bytes outside
 * 0x21-0x7E replaced by '_', cut so the whole fits in 64 bytes. */
static int client_default_owner(struct tk_client *c)
{
    char host[64] = "host";
    char rnd[TK_AUTH_HEX_LEN + 1];
    if (gethostname(host, sizeof host) != 0 || host[0] == '\0')
        snprintf(host, sizeof host, "host");
    host[sizeof host - 1] = '\0';
    host[36] = '\0'; /* 36 + '-' + 10 (pid) + '-' + 12 + NUL <= 65 */
    for (char *p = host; *p; p++)
        if ((unsigned char)*p < 0x21 || (unsigned char)*p > 0x7E)
            *p = '_';
    if (tk_auth_nonce(rnd) != TK_OK)
        return TK_CLIENT_ESYSTEM;
    int n = snprintf(c->owner, sizeof c->owner, "%s-%ld-%.12s", host, (long)getpid(), rnd);
    TK_ASSERT(n > 0 && (size_t)n < sizeof c->owner);
    c->owner_len = (size_t)n;
    TK_ASSERT(tk_proto_owner_ok(c->owner, c->owner_len));
    return TK_CLIENT_ENONE;
}

static int client_cfg_owner(struct tk_client *c, const struct tk_client_config *in)
{
    if (in->owner == NULL)
        return client_default_owner(c);
    size_t n = strnlen(in->owner, TK_OWNER_LEN_MAX + 1);
    if (!tk_proto_owner_ok(in->owner, n))
        return TK_CLIENT_EINVAL;
    memcpy(c->owner, in->owner, n);
    c->owner[n] = '\0';
    c->owner_len = n;
    return TK_CLIENT_ENONE;
}

/* Splits "a:1,b:2" (core/addr.h's list) into connections: one per
 * address, two for a single address (seed: a brief drop on one socket must
 * not stop service). */
static int client_cfg_addrs(struct tk_client *c, const char *addrs)
{
    struct tk_addr list[CL_ADDRS_MAX];
    char why[256], one[CL_ADDR_TEXT_MAX];
    size_t n = 0;
    if (addrs == NULL || tk_addr_parse_list(addrs, strlen(addrs), list, CL_ADDRS_MAX, &n, why,
                                            sizeof why) != TK_OK) {
        cl_log(c, 0, "addrs: %s", addrs == NULL ? "no address given" : why);
        return TK_CLIENT_EINVAL;
    }
    for (size_t i = 0; i < n; i++) {
        /* An accepted address formats back to its own text. */
        if (tk_addr_format(&list[i], one, sizeof one) >= sizeof one)
            return TK_CLIENT_EINVAL;
        c->conns[i] = cl_conn_new(c, one, false);
        if (c->conns[i] == NULL)
            return TK_CLIENT_ENOMEM;
        c->conns[i]->index = (unsigned)i;
        c->nconns = (unsigned)i + 1; /* so that destroy frees it if a later one fails */
    }
    unsigned count = (unsigned)n;
    if (count == 1) {
        c->conns[1] = cl_conn_new(c, c->conns[0]->addr, false);
        if (c->conns[1] == NULL)
            return TK_CLIENT_ENOMEM;
        c->conns[1]->index = 1;
        count = 2;
    }
    c->nconns = count;
    c->nconfigured = count;
    atomic_store(&c->nconns_pub, count);
    return TK_CLIENT_ENONE;
}

/* ---- TLS ------------------------------------------------------------------ */

static int tls_err(char *err, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int tls_err(char *err, size_t cap, const char *fmt, ...)
{
    va_list ap;
    if (cap > 0) {
        va_start(ap, fmt);
        vsnprintf(err, cap, fmt, ap);
        va_end(ap);
    }
    return TK_CLIENT_ETLS;
}

/* Checks the TLS fields and, if TLS is asked for, loads the context into
 * *ctx (NULL otherwise). */
static int tls_setup(const struct tk_client_config *cfg,
                     struct tk_tls_ctx **ctx,
                     char *err,
                     size_t cap)
{
    *ctx = NULL;
    if (cap > 0)
        err[0] = '\0';
    if (cfg->tls_ca_file == NULL) {
        if (cfg->tls_cert_file || cfg->tls_key_file || cfg->tls_server_name)
            return tls_err(err, cap,
                           "TLS needs tls_ca_file (the CA that signed the servers' "
                           "certificates); without it the connection would be plaintext");
        return TK_CLIENT_ENONE;
    }
    if ((cfg->tls_cert_file == NULL) != (cfg->tls_key_file == NULL))
        return tls_err(err, cap,
                       "a client certificate needs both tls_cert_file and tls_key_file (%s "
                       "is missing)",
                       cfg->tls_cert_file ? "tls_key_file" : "tls_cert_file");
    if (cfg->tls_server_name != NULL) {
        size_t n = strlen(cfg->tls_server_name);
        bool ok = n > 0 && n <= CL_HOST_MAX;
        for (size_t i = 0; ok && i < n; i++)
            ok = cfg->tls_server_name[i] > 0x20 && cfg->tls_server_name[i] < 0x7f;
        if (!ok)
            return tls_err(err, cap, "tls_server_name '%.64s' is not a host name",
                           cfg->tls_server_name);
    }
    char why[TK_TLS_ERR_MAX];
    if (cfg->tls_cert_file != NULL) {
        /* core/tls.c proves a server's pair with one handshake in memory
         * (wolfSSL's own key check passes some mismatched ECC pairs); the
         * same proof for our pair, so a wrong key is named here rather than
         * as a refusal by every server. */
        struct tk_tls_opts probe = {
            .server = true, .cert = cfg->tls_cert_file, .key = cfg->tls_key_file};
        struct tk_tls_ctx *pc = NULL;
        if (tk_tls_ctx_new(&probe, &pc, why, sizeof why) != TK_OK)
            return tls_err(err, cap, "%s", why);
        tk_tls_ctx_unref(pc);
    }
    struct tk_tls_opts o = {.server = false,
                            .cert = cfg->tls_cert_file,
                            .key = cfg->tls_key_file,
                            .ca = cfg->tls_ca_file};
    if (tk_tls_ctx_new(&o, ctx, why, sizeof why) != TK_OK)
        return tls_err(err, cap, "%s", why);
    return TK_CLIENT_ENONE;
}

int tk_client_tls_check(const struct tk_client_config *cfg, char *err, size_t cap)
{
    struct tk_tls_ctx *ctx;
    if (cfg == NULL)
        return TK_CLIENT_EINVAL;
    int rc = tls_setup(cfg, &ctx, err, cap);
    tk_tls_ctx_unref(ctx);
    return rc;
}

static int client_cfg_tls(struct tk_client *c, const struct tk_client_config *in)
{
    char err[CL_ERR_MAX];
    int rc = tls_setup(in, &c->tls_ctx, err, sizeof err);
    if (rc != TK_CLIENT_ENONE) {
        cl_log(c, 0, "TLS: %s", err);
        return rc;
    }
    if (c->tls_ctx == NULL)
        return TK_CLIENT_ENONE;
    if (in->tls_server_name)
        snprintf(c->tls_server_name, sizeof c->tls_server_name, "%s", in->tls_server_name);
    snprintf(c->tls_ca_file, sizeof c->tls_ca_file, "%s", in->tls_ca_file);
    c->tls_client_cert = in->tls_cert_file != NULL;
    return TK_CLIENT_ENONE;
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

int tk_client_create(const struct tk_client_config *cfg, struct tk_client **out)
{
    int rc;
    if (cfg == NULL || out == NULL)
        return TK_CLIENT_EINVAL;
    *out = NULL;
    struct tk_client *c = calloc(1, sizeof *c);
    if (c == NULL)
        return TK_CLIENT_ENOMEM;
    c->efd = -1;
    c->epfd = -1;
    c->leader = -1;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->ready_cond, NULL);
    pthread_mutex_init(&c->rmu, NULL);
    pthread_cond_init(&c->rcond, NULL);
    if ((rc = client_cfg_numbers(c, cfg)) != 0 || (rc = client_cfg_tls(c, cfg)) != 0 ||
        (rc = client_cfg_secret(c, cfg)) != 0 || (rc = client_cfg_owner(c, cfg)) != 0 ||
        (rc = client_cfg_addrs(c, cfg->addrs)) != 0 || (rc = client_setup_io(c)) != 0)
        goto err;
    if (pthread_create(&c->io_thread, NULL, cl_io_main, c) != 0) {
        rc = TK_CLIENT_ESYSTEM;
        goto err;
    }
    c->io_started = true;
    *out = c;
    return TK_CLIENT_ENONE;
err:
    TK_ASSERT(rc != 0);
    tk_client_destroy(c);
    return rc;
}

void tk_client_destroy(struct tk_client *c)
{
    if (c == NULL)
        return;
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

struct submit_args {
    char type;
    const char *key;
    uint32_t lease_ms;
    uint32_t wait_ms;
    uint64_t token;
    void (*done)(void *arg, const struct tk_client_result *result);
    void *arg;
};

/* Checks the fields the way the server would (SPEC 5) and names the first
 * bad one in reason (may be NULL). */
static int submit_check(const struct submit_args *a, size_t *key_len, char *reason)
{
    const char *bad = NULL;
    *key_len = 0;
    if (a->type != 'P') {
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
    if (bad != NULL && reason != NULL)
        snprintf(reason, 16, "%s", bad);
    return bad ? TK_CLIENT_EINVAL : TK_CLIENT_ENONE;
}

static int submit(struct tk_client *c, const struct submit_args *a, uint64_t *handle, char *reason)
{
    size_t key_len;
    int rc = submit_check(a, &key_len, reason);
    if (rc != 0)
        return rc;
    if (a->done == NULL)
        return TK_CLIENT_EINVAL;
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
        r->submit_us = now;
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
    struct submit_args a = {.type = 'A',
                            .key = key,
                            .lease_ms = lease_ms,
                            .wait_ms = wait_ms,
                            .done = done,
                            .arg = arg};
    return submit(c, &a, handle, NULL);
}

int tk_client_release_async(struct tk_client *c,
                            const char *key,
                            uint64_t token,
                            void (*done)(void *arg, const struct tk_client_result *result),
                            void *arg)
{
    struct submit_args a = {.type = 'R', .key = key, .token = token, .done = done, .arg = arg};
    return submit(c, &a, NULL, NULL);
}

int tk_client_query_async(struct tk_client *c,
                          const char *key,
                          void (*done)(void *arg, const struct tk_client_result *result),
                          void *arg)
{
    struct submit_args a = {.type = 'Q', .key = key, .done = done, .arg = arg};
    return submit(c, &a, NULL, NULL);
}

int tk_client_ping_async(struct tk_client *c,
                         void (*done)(void *arg, const struct tk_client_result *result),
                         void *arg)
{
    struct submit_args a = {.type = 'P', .done = done, .arg = arg};
    return submit(c, &a, NULL, NULL);
}

int tk_client_cancel(struct tk_client *c, uint64_t handle)
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
static enum tk_client_outcome blocking(struct tk_client *c,
                                       struct submit_args *a,
                                       struct tk_client_result *out)
{
    struct waiter w = {.done = false};
    struct tk_client_result tmp;
    struct tk_client_result *res = out ? out : &tmp;
    memset(res, 0, sizeof *res);
    res->key = a->key ? a->key : "";
    if (c->io_started && pthread_equal(pthread_self(), c->io_thread)) {
        res->outcome = TK_CLIENT_INVALID;
        snprintf(res->reason, sizeof res->reason, "thread");
        return res->outcome;
    }
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    a->done = waiter_done;
    a->arg = &w;
    int rc = submit(c, a, NULL, res->reason);
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

enum tk_client_outcome tk_client_acquire(struct tk_client *c,
                                         const char *key,
                                         uint32_t lease_ms,
                                         uint32_t wait_ms,
                                         struct tk_client_result *out)
{
    struct submit_args a = {.type = 'A', .key = key, .lease_ms = lease_ms, .wait_ms = wait_ms};
    return blocking(c, &a, out);
}

enum tk_client_outcome tk_client_release(struct tk_client *c,
                                         const char *key,
                                         uint64_t token,
                                         struct tk_client_result *out)
{
    struct submit_args a = {.type = 'R', .key = key, .token = token};
    return blocking(c, &a, out);
}

enum tk_client_outcome tk_client_query(struct tk_client *c,
                                       const char *key,
                                       struct tk_client_result *out)
{
    struct submit_args a = {.type = 'Q', .key = key};
    return blocking(c, &a, out);
}

enum tk_client_outcome tk_client_ping(struct tk_client *c, struct tk_client_result *out)
{
    struct submit_args a = {.type = 'P'};
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
}
