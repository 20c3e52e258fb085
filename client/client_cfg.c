/* libticketing's configuration: the defaults (tk_client_config_init),
 * the checks of every field a caller sets (numbers, secret, owner, the
 * address list through core/addr.h, TLS) and what tk_client_create keeps
 * of them. Runs on the caller's thread, before the I/O thread starts.
 */
#include "client/internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

int cl_configure_child(struct tk_client *c, const struct tk_client *seed, const char *addrs)
{
    c->cfg = seed->cfg;
    c->cfg.addrs = c->cfg.secret_file = c->cfg.owner = NULL;
    c->cfg.secret = NULL;
    c->cfg.tls_ca_file = c->cfg.tls_cert_file = c->cfg.tls_key_file = NULL;
    c->cfg.tls_server_name = NULL;
    memcpy(c->owner, seed->owner, sizeof c->owner);
    c->owner_len = seed->owner_len;
    memcpy(c->secret, seed->secret, sizeof c->secret);
    c->secret_len = seed->secret_len;
    c->pool_cap = seed->pool_cap;
    if (seed->tls_ctx != NULL) {
        tk_tls_ctx_ref(seed->tls_ctx);
        c->tls_ctx = seed->tls_ctx;
    }
    memcpy(c->tls_server_name, seed->tls_server_name, sizeof c->tls_server_name);
    memcpy(c->tls_ca_file, seed->tls_ca_file, sizeof c->tls_ca_file);
    c->tls_client_cert = seed->tls_client_cert;
    return client_cfg_addrs(c, addrs);
}

int cl_configure(struct tk_client *c, const struct tk_client_config *cfg)
{
    int rc;
    if ((rc = client_cfg_numbers(c, cfg)) != 0 || (rc = client_cfg_tls(c, cfg)) != 0 ||
        (rc = client_cfg_secret(c, cfg)) != 0 || (rc = client_cfg_owner(c, cfg)) != 0 ||
        (rc = client_cfg_addrs(c, cfg->addrs)) != 0)
        return rc;
    return TK_CLIENT_ENONE;
}
