/* TLS over our own buffers (core/tls.h) on wolfSSL: the library reads and
 * writes through callbacks on a connection's two byte buffers, so TLS
 * rides on whatever moves the bytes (io_uring loops, the client's poll). */

/* options.h before any other wolfSSL header: struct sizes depend on it. */
#include <wolfssl/options.h>

#include <wolfssl/error-ssl.h>
#include <wolfssl/ssl.h>
#include <wolfssl/wolfcrypt/ecc.h>
#include <wolfssl/wolfcrypt/error-crypt.h>
#include <wolfssl/wolfio.h>

#include "core/tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TLS_RECORD_HANDSHAKE 0x16

struct tk_tls_ctx {
    WOLFSSL_CTX *ctx;
    bool server;
    _Atomic int refs;
};

struct bytes {
    uint8_t *p;
    size_t off, len, cap; /* live bytes are p[off, len) */
};

struct tk_tls {
    WOLFSSL *ssl;
    struct tk_tls_ctx *ctx;
    struct bytes in;   /* ciphertext received, not yet taken by wolfSSL */
    struct bytes out;  /* ciphertext to send */
    struct bytes held; /* plaintext written before the handshake was done */
    bool ready, failed, seen_first;
    char err[TK_TLS_ERR_MAX];
};

static void once_init(void)
{
    static atomic_int done;
    if (atomic_exchange(&done, 1) == 0)
        wolfSSL_Init();
}

static bool bytes_add(struct bytes *b, const void *data, size_t n)
{
    if (b->off > 0 && b->off == b->len)
        b->off = b->len = 0;
    if (b->cap - b->len < n) {
        if (b->off > 0) { /* compact first */
            memmove(b->p, b->p + b->off, b->len - b->off);
            b->len -= b->off;
            b->off = 0;
        }
        if (b->cap - b->len < n) {
            size_t cap = TK_MAX(b->cap * 2, b->len + n);
            cap = TK_MAX(cap, (size_t)4096);
            uint8_t *p = realloc(b->p, cap);
            if (!p)
                return false;
            b->p = p;
            b->cap = cap;
        }
    }
    memcpy(b->p + b->len, data, n);
    b->len += n;
    return true;
}

static void fail(struct tk_tls *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(struct tk_tls *t, const char *fmt, ...)
{
    if (t->failed)
        return;
    t->failed = true;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->err, sizeof(t->err), fmt, ap);
    va_end(ap);
}

/* ---- wolfSSL I/O callbacks on our buffers -------------------------------- */

static int io_recv(WOLFSSL *ssl, char *buf, int sz, void *ctx)
{
    (void)ssl;
    struct tk_tls *t = ctx;
    size_t avail = t->in.len - t->in.off;
    if (avail == 0)
        return WOLFSSL_CBIO_ERR_WANT_READ;
    size_t n = TK_MIN(avail, (size_t)sz);
    memcpy(buf, t->in.p + t->in.off, n);
    t->in.off += n;
    return (int)n;
}

static int io_send(WOLFSSL *ssl, char *buf, int sz, void *ctx)
{
    (void)ssl;
    struct tk_tls *t = ctx;
    if (!bytes_add(&t->out, buf, (size_t)sz))
        return WOLFSSL_CBIO_ERR_GENERAL;
    return sz;
}

/* ---- Contexts ------------------------------------------------------------ */

static int ctx_err(char *err, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int ctx_err(char *err, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
    return TK_EINVAL;
}

static const char *file_problem(const char *path)
{
    if (access(path, R_OK) != 0)
        return strerror(errno);
    return NULL;
}

/* The certificate's own dates, so an expired one stops the start with a
 * clear message instead of failing every handshake. */
static int check_dates(const char *path, char *err, size_t cap)
{
    WOLFSSL_X509 *x = wolfSSL_X509_load_certificate_file(path, WOLFSSL_FILETYPE_PEM);
    if (!x)
        return ctx_err(err, cap, "%s: not a PEM certificate", path);
    int rc = TK_OK;
    const WOLFSSL_ASN1_TIME *na = wolfSSL_X509_get_notAfter(x);
    const WOLFSSL_ASN1_TIME *nb = wolfSSL_X509_get_notBefore(x);
    if (na && wolfSSL_X509_cmp_current_time(na) < 0)
        rc = ctx_err(err, cap, "%s: the certificate has expired", path);
    else if (nb && wolfSSL_X509_cmp_current_time(nb) > 0)
        rc = ctx_err(err, cap, "%s: the certificate is not valid yet", path);
    wolfSSL_X509_free(x);
    return rc;
}

static int self_check(struct tk_tls_ctx *sc);

int tk_tls_ctx_new(const struct tk_tls_opts *o, struct tk_tls_ctx **out, char *err, size_t cap)
{
    once_init();
    *out = NULL;
    const char *why;
    if (o->server && (!o->cert || !o->key))
        return ctx_err(err, cap, "a TLS server needs a certificate and its key");
    if (!o->server && !o->ca)
        return ctx_err(err, cap, "a TLS client needs a CA file to verify the server with");
    if (o->verify_peer && !o->ca)
        return ctx_err(err, cap, "verifying peer certificates needs a CA file");
    const char *files[3] = {o->cert, o->key, o->ca};
    const char *names[3] = {"certificate", "private key", "CA file"};
    for (int i = 0; i < 3; i++)
        if (files[i] && (why = file_problem(files[i])) != NULL)
            return ctx_err(err, cap, "cannot read TLS %s %s: %s", names[i], files[i], why);
    if (o->cert && check_dates(o->cert, err, cap) != TK_OK)
        return TK_EINVAL;
    WOLFSSL_CTX *ctx =
        wolfSSL_CTX_new(o->server ? wolfSSLv23_server_method() : wolfSSLv23_client_method());
    if (!ctx)
        return ctx_err(err, cap, "out of memory creating a TLS context");
    int rc = TK_OK;
    if (wolfSSL_CTX_SetMinVersion(ctx, WOLFSSL_TLSV1_2) != WOLFSSL_SUCCESS)
        rc = ctx_err(err, cap, "this wolfSSL cannot set TLS 1.2 as the minimum");
    else if (o->cert && wolfSSL_CTX_use_certificate_chain_file(ctx, o->cert) != WOLFSSL_SUCCESS)
        rc = ctx_err(err, cap, "%s: not a usable PEM certificate chain", o->cert);
    else if (o->key &&
             wolfSSL_CTX_use_PrivateKey_file(ctx, o->key, WOLFSSL_FILETYPE_PEM) != WOLFSSL_SUCCESS)
        rc = ctx_err(err, cap, "%s: not a usable PEM private key", o->key);
    else if (o->cert && o->key && wolfSSL_CTX_check_private_key(ctx) != WOLFSSL_SUCCESS)
        rc = ctx_err(err, cap, "%s does not match the certificate %s", o->key, o->cert);
    else if (o->ca && wolfSSL_CTX_load_verify_locations(ctx, o->ca, NULL) != WOLFSSL_SUCCESS)
        rc = ctx_err(err, cap, "%s: no usable PEM CA certificate in it", o->ca);
    if (rc != TK_OK) {
        wolfSSL_CTX_free(ctx);
        return rc;
    }
    wolfSSL_CTX_SetIORecv(ctx, io_recv);
    wolfSSL_CTX_SetIOSend(ctx, io_send);
    struct tk_tls_ctx *c = calloc(1, sizeof(*c));
    if (!c) {
        wolfSSL_CTX_free(ctx);
        return ctx_err(err, cap, "out of memory creating a TLS context");
    }
    c->ctx = ctx;
    c->server = o->server;
    atomic_init(&c->refs, 1);
    wolfSSL_CTX_set_verify(ctx, WOLFSSL_VERIFY_NONE, NULL);
    if (o->server && self_check(c) != TK_OK) {
        tk_tls_ctx_unref(c);
        return ctx_err(err, cap,
                       "%s does not match the certificate %s (a handshake with them fails)", o->key,
                       o->cert);
    }
    /* Set after the self check, whose client has no certificate. */
    int mode = WOLFSSL_VERIFY_NONE;
    if (!o->server)
        mode = WOLFSSL_VERIFY_PEER;
    else if (o->verify_peer)
        mode = WOLFSSL_VERIFY_PEER | WOLFSSL_VERIFY_FAIL_IF_NO_PEER_CERT;
    wolfSSL_CTX_set_verify(ctx, mode, NULL);
    *out = c;
    return TK_OK;
}

/* A server's certificate and key must work together: one handshake in
 * memory with a client that checks nothing else (the library's own key
 * check passes some mismatched ECC pairs). */
static int self_check(struct tk_tls_ctx *sc)
{
    WOLFSSL_CTX *cctx = wolfSSL_CTX_new(wolfSSLv23_client_method());
    if (!cctx)
        return TK_ENOMEM;
    wolfSSL_CTX_set_verify(cctx, WOLFSSL_VERIFY_NONE, NULL);
    wolfSSL_CTX_SetIORecv(cctx, io_recv);
    wolfSSL_CTX_SetIOSend(cctx, io_send);
    struct tk_tls_ctx cc = {.ctx = cctx, .server = false};
    atomic_init(&cc.refs, 2); /* never freed through the connection */
    struct tk_tls *s = tk_tls_new(sc, NULL), *c = tk_tls_new(&cc, NULL);
    int rc = s && c ? TK_OK : TK_ENOMEM;
    for (int i = 0; rc == TK_OK && i < 20 && !(tk_tls_ready(s) && tk_tls_ready(c)); i++) {
        struct tk_tls *ends[2] = {c, s};
        for (int e = 0; e < 2 && rc == TK_OK; e++) {
            uint8_t buf[64];
            size_t got, n;
            rc = tk_tls_read(ends[e], buf, 0, &got);
            const uint8_t *p = tk_tls_pending(ends[e], &n);
            if (rc == TK_OK && n) {
                rc = tk_tls_feed(ends[1 - e], p, n);
                tk_tls_sent(ends[e], n);
            }
        }
    }
    if (rc == TK_OK && !(tk_tls_ready(s) && tk_tls_ready(c)))
        rc = TK_EPROTO;
    tk_tls_free(s);
    tk_tls_free(c);
    wolfSSL_CTX_free(cctx);
    /* The handshake filled this thread's ECC cache; the caller may be a
     * thread that never does TLS again (main, configuration checks). */
    tk_tls_thread_done();
    return rc;
}

void tk_tls_ctx_ref(struct tk_tls_ctx *c)
{
    atomic_fetch_add_explicit(&c->refs, 1, memory_order_relaxed);
}

void tk_tls_ctx_unref(struct tk_tls_ctx *c)
{
    if (c && atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel) == 1) {
        wolfSSL_CTX_free(c->ctx);
        free(c);
    }
}

/* ---- Connections --------------------------------------------------------- */

struct tk_tls *tk_tls_new(struct tk_tls_ctx *c, const char *server_name)
{
    struct tk_tls *t = calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    t->ssl = wolfSSL_new(c->ctx);
    if (!t->ssl) {
        free(t);
        return NULL;
    }
    wolfSSL_SetIOReadCtx(t->ssl, t);
    wolfSSL_SetIOWriteCtx(t->ssl, t);
    if (!c->server && server_name && server_name[0]) {
        /* SNI carries host names only, never an IP literal (RFC 6066);
         * the name check covers both (IP literals against IP SANs). */
        struct in6_addr a;
        if (inet_pton(AF_INET, server_name, &a) != 1 && inet_pton(AF_INET6, server_name, &a) != 1)
            wolfSSL_UseSNI(t->ssl, WOLFSSL_SNI_HOST_NAME, server_name,
                           (unsigned short)strlen(server_name));
        wolfSSL_check_domain_name(t->ssl, server_name);
    }
    tk_tls_ctx_ref(c);
    t->ctx = c;
    return t;
}

void tk_tls_free(struct tk_tls *t)
{
    if (!t)
        return;
    wolfSSL_free(t->ssl);
    tk_tls_ctx_unref(t->ctx);
    free(t->in.p);
    free(t->out.p);
    free(t->held.p);
    free(t);
}

int tk_tls_feed(struct tk_tls *t, const void *data, size_t len)
{
    if (t->failed)
        return TK_EPROTO;
    if (len == 0)
        return TK_OK;
    if (!t->seen_first) {
        t->seen_first = true;
        /* A TLS client opens with a handshake record; a line of text is a
         * plaintext client on a TLS port. (A server may open with an
         * alert: the client side leaves the verdict to wolfSSL.) */
        if (t->ctx->server && ((const uint8_t *)data)[0] != TLS_RECORD_HANDSHAKE) {
            fail(t, "a plaintext client on a TLS port (first byte 0x%02x, not a TLS record)",
                 ((const uint8_t *)data)[0]);
            return TK_EPROTO;
        }
    }
    if (!bytes_add(&t->in, data, len)) {
        fail(t, "out of memory buffering TLS input");
        return TK_EPROTO;
    }
    return TK_OK;
}

/* Names a failed handshake or read. */
static int ssl_failure(struct tk_tls *t, int ret)
{
    int e = wolfSSL_get_error(t->ssl, ret);
    if (e == WOLFSSL_ERROR_WANT_READ || e == WOLFSSL_ERROR_WANT_WRITE)
        return TK_OK;
    if (e == WOLFSSL_ERROR_ZERO_RETURN)
        return TK_ECLOSED;
    char reason[WOLFSSL_MAX_ERROR_SZ];
    wolfSSL_ERR_error_string_n((unsigned long)e, reason, sizeof(reason));
    bool verify = e == ASN_AFTER_DATE_E || e == ASN_BEFORE_DATE_E || e == ASN_NO_SIGNER_E ||
                  e == DOMAIN_NAME_MISMATCH || e == ASN_SIG_CONFIRM_E || e == NO_PEER_CERT ||
                  e == VERIFY_CERT_ERROR || e == FATAL_ERROR;
    const char *what = e == ASN_AFTER_DATE_E    ? "the peer's certificate has expired"
                       : e == ASN_BEFORE_DATE_E ? "the peer's certificate is not valid yet"
                       : e == ASN_NO_SIGNER_E   ? "the peer's certificate is not signed by our CA"
                       : e == DOMAIN_NAME_MISMATCH
                           ? "the server's certificate does not name the host we dialled"
                       : e == NO_PEER_CERT ? "the peer sent no certificate (one is required)"
                                           : NULL;
    if (what)
        fail(t, "TLS handshake failed: %s (%s)", what, reason);
    else
        fail(t, "TLS failed: %s (wolfSSL error %d)", reason, e);
    return verify || what ? TK_EAUTH : TK_EPROTO;
}

int tk_tls_read(struct tk_tls *t, void *out, size_t cap, size_t *got)
{
    *got = 0;
    if (t->failed)
        return TK_EPROTO;
    if (!t->ready) {
        int ret = t->ctx->server ? wolfSSL_accept(t->ssl) : wolfSSL_connect(t->ssl);
        if (ret != WOLFSSL_SUCCESS)
            return ssl_failure(t, ret);
        t->ready = true;
        /* What was written during the handshake goes out now. */
        size_t n = t->held.len - t->held.off;
        int rc = n ? tk_tls_write(t, t->held.p + t->held.off, n) : TK_OK;
        t->held.off = t->held.len = 0;
        if (rc != TK_OK)
            return TK_EPROTO;
    }
    if (cap == 0)
        return TK_OK;
    int ret = wolfSSL_read(t->ssl, out, (int)TK_MIN(cap, (size_t)INT32_MAX));
    if (ret > 0) {
        *got = (size_t)ret;
        return TK_OK;
    }
    return ssl_failure(t, ret);
}

int tk_tls_write(struct tk_tls *t, const void *data, size_t len)
{
    if (t->failed)
        return TK_EPROTO;
    if (!t->ready) {
        if (!bytes_add(&t->held, data, len)) {
            fail(t, "out of memory buffering TLS output");
            return TK_EPROTO;
        }
        return TK_OK;
    }
    const uint8_t *p = data;
    while (len > 0) {
        int n = (int)TK_MIN(len, (size_t)16384);
        int ret = wolfSSL_write(t->ssl, p, n);
        if (ret <= 0) {
            int rc = ssl_failure(t, ret);
            if (rc == TK_OK) /* our send callback never blocks */
                fail(t, "TLS write would block");
            return TK_EPROTO;
        }
        p += ret;
        len -= (size_t)ret;
    }
    return TK_OK;
}

const uint8_t *tk_tls_pending(const struct tk_tls *t, size_t *len)
{
    *len = t->out.len - t->out.off;
    return t->out.p + t->out.off;
}

void tk_tls_sent(struct tk_tls *t, size_t n)
{
    TK_ASSERT(n <= t->out.len - t->out.off);
    t->out.off += n;
    if (t->out.off == t->out.len)
        t->out.off = t->out.len = 0;
}

bool tk_tls_ready(const struct tk_tls *t)
{
    return t->ready;
}

void tk_tls_host_name(const char *host, char *out, size_t cap)
{
    char bare[256];
    size_t n = strlen(host);
    if (n >= 2 && host[0] == '[' && host[n - 1] == ']' && n - 2 < sizeof bare) {
        memcpy(bare, host + 1, n - 2);
        bare[n - 2] = '\0';
    } else {
        snprintf(bare, sizeof bare, "%s", host);
    }
    struct in6_addr a6;
    if (inet_pton(AF_INET6, bare, &a6) != 1) {
        snprintf(out, cap, "%s", bare);
        return;
    }
    size_t off = 0;
    for (int i = 0; i < 8 && off < cap; i++)
        off += (size_t)snprintf(out + off, cap - off, "%s%02x%02x", i ? ":" : "", a6.s6_addr[2 * i],
                                a6.s6_addr[2 * i + 1]);
}

bool tk_tls_peer_has_name(const struct tk_tls *t, const char *host)
{
    if (!t->ready || t->failed)
        return false;
    WOLFSSL_X509 *x = wolfSSL_get_peer_certificate(t->ssl);
    if (x == NULL)
        return false;
    char name[256];
    tk_tls_host_name(host, name, sizeof name);
    struct in6_addr a6;
    struct in_addr a4;
    bool ip = inet_pton(AF_INET, name, &a4) == 1 || strchr(name, ':') != NULL ||
              inet_pton(AF_INET6, name, &a6) == 1;
    bool ok = ip ? wolfSSL_X509_check_ip_asc(x, name, 0) == WOLFSSL_SUCCESS
                 : wolfSSL_X509_check_host(x, name, strlen(name), 0, NULL) == WOLFSSL_SUCCESS;
    wolfSSL_X509_free(x);
    return ok;
}

int tk_tls_channel_binding(const struct tk_tls *t, uint8_t out[TK_TLS_BINDING_LEN])
{
    static const char label[] = "EXPORTER-Channel-Binding";
    if (!t->ready || t->failed)
        return TK_EPROTO;
    int rc = wolfSSL_export_keying_material(t->ssl, out, TK_TLS_BINDING_LEN, label,
                                            sizeof(label) - 1, NULL, 0, 0);
    return rc == WOLFSSL_SUCCESS ? TK_OK : TK_EPROTO;
}

const char *tk_tls_error(const struct tk_tls *t)
{
    return t->failed ? t->err : "";
}

void tk_tls_thread_done(void)
{
#ifdef FP_ECC
    wc_ecc_fp_free();
#endif
}

bool tk_tls_has_plaintext(const struct tk_tls *t)
{
    return wolfSSL_pending(t->ssl) > 0;
}
