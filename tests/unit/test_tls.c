/* core/tls.c: two ends of a TLS connection pumped by hand in memory, with
 * certificates made by tests/support/make_certs.sh (openssl). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/tls.h"

static char dir[64];

static const char *f(const char *name)
{
    static char paths[8][128];
    static int i;
    char *p = paths[i++ % 8];
    snprintf(p, 128, "%s/%s", dir, name);
    return p;
}

static void setup(void)
{
    snprintf(dir, sizeof(dir), "/tmp/tk-tls-%d", (int)getpid());
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "sh %s/tests/support/make_certs.sh %s", TK_SRC_DIR, dir);
    cr_assert_eq(system(cmd), 0, "openssl made the test certificates");
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(tls, .init = setup, .fini = teardown);

static struct tk_tls_ctx *ctx(const struct tk_tls_opts *o)
{
    struct tk_tls_ctx *c = NULL;
    char err[TK_TLS_ERR_MAX] = "";
    cr_assert_eq(tk_tls_ctx_new(o, &c, err, sizeof(err)), TK_OK, "%s", err);
    return c;
}

static struct tk_tls_ctx *server_ctx(const char *cert, bool verify_peer)
{
    char c[64], k[64];
    snprintf(c, sizeof(c), "%s.pem", cert);
    snprintf(k, sizeof(k), "%s.key", cert);
    struct tk_tls_opts o = {
        .server = true, .cert = f(c), .key = f(k), .ca = f("ca.pem"), .verify_peer = verify_peer};
    return ctx(&o);
}

static struct tk_tls_ctx *client_ctx(const char *ca, const char *cert)
{
    char c[64], k[64], a[64];
    snprintf(a, sizeof(a), "%s.pem", ca);
    struct tk_tls_opts o = {.ca = f(a)};
    if (cert) {
        snprintf(c, sizeof(c), "%s.pem", cert);
        snprintf(k, sizeof(k), "%s.key", cert);
        o.cert = f(c);
        o.key = f(k);
    }
    return ctx(&o);
}

/* Moves ciphertext both ways and reads plaintext until nothing moves.
 * Returns the first failure code of either side (TK_OK if none). */
static int pump(struct tk_tls *a, struct tk_tls *b, char *a_got, char *b_got)
{
    struct tk_tls *ends[2] = {a, b};
    char *got[2] = {a_got, b_got};
    for (int round = 0; round < 50; round++) {
        bool moved = false;
        for (int i = 0; i < 2; i++) {
            size_t got_n = 0;
            char buf[256];
            int rc = tk_tls_read(ends[i], buf, sizeof(buf) - 1, &got_n);
            if (rc != TK_OK)
                return rc;
            if (got_n) {
                buf[got_n] = 0;
                strcat(got[i], buf);
                moved = true;
            }
            size_t n;
            const uint8_t *p = tk_tls_pending(ends[i], &n);
            if (n) {
                rc = tk_tls_feed(ends[1 - i], p, n);
                tk_tls_sent(ends[i], n);
                if (rc != TK_OK)
                    return rc;
                moved = true;
            }
        }
        if (!moved)
            break;
    }
    return TK_OK;
}

Test(tls, handshake_then_lines_both_ways)
{
    struct tk_tls_ctx *sc = server_ctx("node", false), *cc = client_ctx("ca", NULL);
    struct tk_tls *s = tk_tls_new(sc, NULL), *c = tk_tls_new(cc, "localhost");
    /* The server speaks first in our protocol: held until the handshake. */
    cr_assert_eq(tk_tls_write(s, "HELLO abc\n", 10), TK_OK);
    char s_got[512] = "", c_got[512] = "";
    cr_assert_eq(pump(c, s, c_got, s_got), TK_OK);
    cr_assert(tk_tls_ready(s) && tk_tls_ready(c));
    cr_assert_str_eq(c_got, "HELLO abc\n");
    cr_assert_eq(tk_tls_write(c, "A 1 seat owner 30000 0\n", 23), TK_OK);
    cr_assert_eq(pump(c, s, c_got, s_got), TK_OK);
    cr_assert_str_eq(s_got, "A 1 seat owner 30000 0\n");
    tk_tls_free(s);
    tk_tls_free(c);
    tk_tls_ctx_unref(sc);
    tk_tls_ctx_unref(cc);
}

/* The channel binding is the same on both ends of one session and differs
 * between two sessions, so a proof over it cannot be carried to another. */
Test(tls, channel_binding_names_one_session)
{
    struct tk_tls_ctx *sc = server_ctx("node", false), *cc = client_ctx("ca", NULL);
    uint8_t first[2][TK_TLS_BINDING_LEN], second[2][TK_TLS_BINDING_LEN];
    for (int round = 0; round < 2; round++) {
        struct tk_tls *s = tk_tls_new(sc, NULL), *c = tk_tls_new(cc, "localhost");
        uint8_t(*b)[TK_TLS_BINDING_LEN] = round == 0 ? first : second;
        cr_assert_eq(tk_tls_channel_binding(c, b[0]), TK_EPROTO, "none before the handshake");
        char s_got[512] = "", c_got[512] = "";
        cr_assert_eq(tk_tls_write(s, "HELLO\n", 6), TK_OK);
        cr_assert_eq(pump(c, s, c_got, s_got), TK_OK);
        cr_assert(tk_tls_ready(s) && tk_tls_ready(c));
        cr_assert_eq(tk_tls_channel_binding(s, b[0]), TK_OK);
        cr_assert_eq(tk_tls_channel_binding(c, b[1]), TK_OK);
        cr_assert(memcmp(b[0], b[1], TK_TLS_BINDING_LEN) == 0, "both ends agree");
        tk_tls_free(s);
        tk_tls_free(c);
    }
    cr_assert(memcmp(first[0], second[0], TK_TLS_BINDING_LEN) != 0, "another session differs");
    tk_tls_ctx_unref(sc);
    tk_tls_ctx_unref(cc);
}

static void refused_handshake(struct tk_tls_ctx *sc,
                              struct tk_tls_ctx *cc,
                              const char *name,
                              const char *expect)
{
    struct tk_tls *s = tk_tls_new(sc, NULL), *c = tk_tls_new(cc, name);
    char s_got[512] = "", c_got[512] = "";
    /* TLS 1.3: a client whose certificate is refused learns it on a read. */
    int rc = pump(c, s, c_got, s_got);
    if (rc == TK_OK)
        rc = pump(c, s, c_got, s_got);
    cr_assert_neq(rc, TK_OK, "the handshake must fail");
    const char *why = tk_tls_error(c)[0] ? tk_tls_error(c) : tk_tls_error(s);
    cr_assert(strstr(tk_tls_error(c), expect) || strstr(tk_tls_error(s), expect),
              "expected \"%s\" in \"%s\" / \"%s\"", expect, tk_tls_error(c), tk_tls_error(s));
    (void)why;
    tk_tls_free(s);
    tk_tls_free(c);
    tk_tls_ctx_unref(sc);
    tk_tls_ctx_unref(cc);
}

Test(tls, a_server_of_another_ca_is_refused)
{
    refused_handshake(server_ctx("other", false), client_ctx("ca", NULL), "localhost",
                      "not signed by our CA");
}

Test(tls, a_name_mismatch_is_refused)
{
    refused_handshake(server_ctx("wrongname", false), client_ctx("ca", NULL), "localhost",
                      "does not name the host");
}

Test(tls, a_missing_client_certificate_is_refused_when_required)
{
    refused_handshake(server_ctx("node", true), client_ctx("ca", NULL), "localhost", "certificate");
}

Test(tls, a_client_certificate_is_accepted_when_required)
{
    struct tk_tls_ctx *sc = server_ctx("node", true), *cc = client_ctx("ca", "client");
    struct tk_tls *s = tk_tls_new(sc, NULL), *c = tk_tls_new(cc, "localhost");
    cr_assert_eq(tk_tls_write(c, "P 1\n", 4), TK_OK);
    char s_got[512] = "", c_got[512] = "";
    cr_assert_eq(pump(c, s, c_got, s_got), TK_OK, "%s / %s", tk_tls_error(c), tk_tls_error(s));
    cr_assert_str_eq(s_got, "P 1\n");
    tk_tls_free(s);
    tk_tls_free(c);
    tk_tls_ctx_unref(sc);
    tk_tls_ctx_unref(cc);
}

Test(tls, a_plaintext_client_on_a_tls_port_is_named)
{
    struct tk_tls_ctx *sc = server_ctx("node", false);
    struct tk_tls *s = tk_tls_new(sc, NULL);
    cr_assert_eq(tk_tls_feed(s, "AUTH abc def\n", 13), TK_EPROTO);
    cr_assert(strstr(tk_tls_error(s), "plaintext client"), "%s", tk_tls_error(s));
    tk_tls_free(s);
    tk_tls_ctx_unref(sc);
}

Test(tls, bad_files_are_named)
{
    struct tk_tls_ctx *c = NULL;
    char err[TK_TLS_ERR_MAX];
    struct tk_tls_opts o = {.server = true, .cert = f("expired.pem"), .key = f("expired.key")};
    cr_assert_eq(tk_tls_ctx_new(&o, &c, err, sizeof(err)), TK_EINVAL);
    cr_assert(strstr(err, "expired"), "%s", err);
    o = (struct tk_tls_opts){.server = true, .cert = f("nope.pem"), .key = f("node.key")};
    cr_assert_eq(tk_tls_ctx_new(&o, &c, err, sizeof(err)), TK_EINVAL);
    cr_assert(strstr(err, "nope.pem") && strstr(err, "No such file"), "%s", err);
    o = (struct tk_tls_opts){.server = true, .cert = f("node.pem"), .key = f("client.key")};
    cr_assert_eq(tk_tls_ctx_new(&o, &c, err, sizeof(err)), TK_EINVAL);
    cr_assert(strstr(err, "does not match"), "%s", err);
    o = (struct tk_tls_opts){.server = true, .cert = f("ca.key"), .key = f("node.key")};
    cr_assert_eq(tk_tls_ctx_new(&o, &c, err, sizeof(err)), TK_EINVAL);
    cr_assert(strstr(err, "ca.key"), "%s", err);
    cr_assert_null(c);
}
