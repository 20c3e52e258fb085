/* TLS on the client port of a real ticketingd (SPEC 2: TCP accept -> TLS
 * -> challenge-response -> traffic): the handshake and the HMAC exchange
 * inside it, refusals on both sides (plaintext clients, missing or
 * untrusted client certificates, a server the client cannot trust or that
 * does not carry the dialled name), certificate files that stop the start,
 * and a SIGHUP reload under live connections.
 *
 * Method: each test process makes its own certificates with
 * tests/support/make_certs.sh (openssl) in a temp dir, starts its own
 * standalone node on free ports, and talks to it with the test TLS client
 * of tests/support (core/tls over a blocking socket, not the client
 * library). Server-side reasons are read from the node's log (stderr).
 */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/support/tk_cluster.h"
#include "tests/support/tk_test.h"

/* Fixture */

static char dir[64];
static struct tk_node node;

/* A file of the certificate dir (a few paths live at once). */
static const char *f(const char *name)
{
    static char paths[16][128];
    static int i;
    char *p = paths[i++ % 16];
    snprintf(p, 128, "%s/%s", dir, name);
    return p;
}

static void setup(void)
{
    snprintf(dir, sizeof(dir), "/tmp/tk-itls-%d", (int)getpid());
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "sh %s/tests/support/make_certs.sh %s", TK_SRC_DIR, dir);
    cr_assert_eq(system(cmd), 0, "openssl made the test certificates");
}

static void teardown(void)
{
    if (node.pid > 0) {
        int st = tk_node_stop(&node, SIGTERM, 10000);
        cr_expect(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0,
                  "ticketingd did not exit cleanly on SIGTERM (status %d)", st);
    }
    tk_node_cleanup(&node);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(tls, .init = setup, .fini = teardown, .timeout = 90);

/* Parameters */

#define SERVER_NAME "localhost"

/* Helpers */

/* Starts a TLS node with the node certificate, two workers and more
 * arguments (NULL-terminated, at most 8). */
static void start_tls(const char *const *more)
{
    const char *args[24] = {"--threads",   "2",         "--tls-cert",
                            f("node.pem"), "--tls-key", f("node.key")};
    int a = 6;
    for (int i = 0; more && more[i]; i++)
        args[a++] = more[i];
    args[a] = NULL;
    cr_assert_eq(tk_node_start_tls(&node, args), 0, "ticketingd with TLS did not start");
}

static struct tk_test_tls *dial(const char *ca, const char *cert, const char *name)
{
    struct tk_test_tls *t = malloc(sizeof(*t));
    cr_assert(t);
    char c[64], k[64];
    snprintf(c, sizeof(c), "%s.pem", cert ? cert : "");
    snprintf(k, sizeof(k), "%s.key", cert ? cert : "");
    if (tk_test_tls_dial(t, node.port, f(ca), cert ? f(c) : NULL, cert ? f(k) : NULL, name) != 0)
        cr_assert_fail("TLS dial failed: %s", t->err);
    return t;
}

/* A dial that must fail; returns the client's reason. */
static const char *dial_refused(const char *ca, const char *cert, const char *name)
{
    static struct tk_test_tls t;
    char c[64], k[64];
    snprintf(c, sizeof(c), "%s.pem", cert ? cert : "");
    snprintf(k, sizeof(k), "%s.key", cert ? cert : "");
    int rc = tk_test_tls_dial(&t, node.port, f(ca), cert ? f(c) : NULL, cert ? f(k) : NULL, name);
    if (rc == 0) {
        tk_test_tls_close(&t);
        cr_assert_fail("the TLS handshake succeeded (ca %s, name %s)", ca, name);
    }
    return t.err;
}

static void drop(struct tk_test_tls *t)
{
    tk_test_tls_close(t);
    free(t);
}

static void expect_line(struct tk_test_tls *t, const char *want)
{
    char line[1100];
    int n = tk_test_tls_line(t, line, sizeof(line), 5000);
    cr_assert(n >= 0, "no line (wanted '%s'): %s", want, t->err);
    cr_assert_str_eq(line, want);
}

static void ping(struct tk_test_tls *t, unsigned id)
{
    char want[32];
    snprintf(want, sizeof(want), "P %u", id);
    cr_assert_eq(tk_test_tls_send(t, "P %u\n", id), 0, "%s", t->err);
    expect_line(t, want);
}

/* Dial, authenticate, ping: a client the node serves. */
static struct tk_test_tls *serve(const char *ca, const char *cert)
{
    struct tk_test_tls *t = dial(ca, cert, SERVER_NAME);
    cr_assert_eq(tk_test_tls_auth(t, TK_TEST_SECRET), 0, "auth inside TLS failed: %s", t->err);
    cr_assert_neq(t->node_id, 0);
    ping(t, 1);
    return t;
}

/* The node's log contains text, within timeout_ms. */
static bool log_has(struct tk_node *n, const char *text, int timeout_ms)
{
    static char buf[1 << 18];
    uint64_t end = tk_test_ms() + (uint64_t)timeout_ms;
    do {
        FILE *fp = fopen(n->log_file, "r");
        if (fp) {
            size_t len = fread(buf, 1, sizeof(buf) - 1, fp);
            fclose(fp);
            buf[len] = 0;
            if (strstr(buf, text))
                return true;
        }
        usleep(20000);
    } while (tk_test_ms() < end);
    return false;
}

static uint64_t metric(const char *name)
{
    static char body[1 << 17];
    uint64_t v = 0;
    cr_assert_eq(tk_http_get(node.port + 2, "/metrics", body, sizeof(body)), 200);
    cr_assert(tk_metric_u64(body, name, &v), "no %s in /metrics", name);
    return v;
}

/* Waits until a counter of /metrics (published every 50 ms) reaches min. */
static void await_metric(const char *name, uint64_t min)
{
    uint64_t v = 0;
    for (int i = 0; i < 100 && (v = metric(name)) < min; i++)
        usleep(20000);
    cr_assert_geq(v, min, "%s stayed at %" PRIu64, name, v);
}

/* Runs ticketingd with the arguments, which must make it refuse to start:
 * exit status 2 and a log (stderr) naming the reason. */
static void expect_refusal(const char *const *args, const char *reason)
{
    cr_assert_eq(tk_node_prepare(&node, tk_free_port3()), 0);
    cr_assert_eq(tk_node_spawn(&node, args), 0);
    int st = 0;
    pid_t r = 0;
    for (int i = 0; i < 500 && (r = waitpid(node.pid, &st, WNOHANG)) == 0; i++)
        usleep(20000);
    cr_assert_eq(r, node.pid, "ticketingd kept running");
    node.pid = -1;
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 2, "exit status %d, wanted 2",
              WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    cr_assert(log_has(&node, reason, 0), "the log does not say '%s'", reason);
}

/* Replaces the certificate pair the node serves from (an atomic rename,
 * as a secret mount update is). */
static void install_pair(const char *from)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "cp %s/%s.pem %s/serve.pem.new && cp %s/%s.key %s/serve.key.new && "
             "mv %s/serve.pem.new %s/serve.pem && mv %s/serve.key.new %s/serve.key",
             dir, from, dir, dir, from, dir, dir, dir, dir, dir);
    cr_assert_eq(system(cmd), 0);
}

/* ---------------------------------------------------------------- */
/* Serving over TLS */

Test(tls, handshake_hmac_and_locks_inside_tls)
{
    start_tls(NULL);
    static char body[16384];
    cr_assert_eq(tk_http_get(node.port + 2, "/status", body, sizeof(body)), 200);
    cr_assert(strstr(body, "\"tls\":true"), "/status: %s", body);
    struct tk_test_tls *t = serve("ca.pem", NULL);
    cr_assert_eq(tk_test_tls_send(t, "A 2 seat alice 30000 0\n"), 0);
    char line[256];
    cr_assert_geq(tk_test_tls_line(t, line, sizeof(line), 5000), 0, "%s", t->err);
    uint64_t id = 0, token = 0;
    cr_assert_eq(sscanf(line, "G %" SCNu64 " %" SCNu64, &id, &token), 2, "got '%s'", line);
    cr_assert_eq(id, 2);
    cr_assert_eq(tk_test_tls_send(t, "Q 3 seat\n"), 0);
    char want[128];
    snprintf(want, sizeof(want), "Q 3 alice %" PRIu64 " 0", token);
    expect_line(t, want);
    cr_assert_eq(tk_test_tls_send(t, "R 4 seat alice %" PRIu64 "\n", token), 0);
    expect_line(t, "R 4");
    drop(t);
}

Test(tls, wrong_secret_inside_tls_gets_e_auth)
{
    start_tls(NULL);
    struct tk_test_tls *t = dial("ca.pem", NULL, SERVER_NAME);
    cr_assert_neq(tk_test_tls_auth(t, "not-the-secret-0123456789abcdef"), 0);
    drop(t);
    t = dial("ca.pem", NULL, SERVER_NAME);
    char line[512];
    cr_assert_geq(tk_test_tls_line(t, line, sizeof(line), 5000), 0, "no banner: %s", t->err);
    cr_assert_eq(tk_test_tls_send(t, "AUTH %064d %064d\n", 0, 0), 0);
    expect_line(t, "E - auth");
    cr_assert_lt(tk_test_tls_line(t, line, sizeof(line), 5000), -1, "not closed after E - auth");
    drop(t);
}

/* A round's replies go out as few large records, and many requests in
 * one record come back in order: both directions cross record bounds. */
Test(tls, pipelined_requests_cross_records)
{
    start_tls(NULL);
    struct tk_test_tls *t = serve("ca.pem", NULL);
    enum { N = 3000 };
    static char batch[N * 16];
    size_t off = 0;
    for (unsigned i = 0; i < N; i++)
        off += (size_t)snprintf(batch + off, sizeof(batch) - off, "P %u\n", 100 + i);
    cr_assert_eq(tk_test_tls_send_raw(t, batch, off), 0, "%s", t->err);
    for (unsigned i = 0; i < N; i++) {
        char want[32];
        snprintf(want, sizeof(want), "P %u", 100 + i);
        expect_line(t, want);
    }
    drop(t);
}

/* More input than a paused connection keeps receiving (the in-flight
 * bound stops parsing, then the recv): the plaintext already out of TLS
 * waits in the connection, and parsing resumes without a new recv. */
Test(tls, paused_connection_resumes_inside_tls)
{
    static const char *const more[] = {"--max-inflight", "2", NULL};
    start_tls(more);
    struct tk_test_tls *t = serve("ca.pem", NULL);
    enum { N = 6000 };
    static char batch[N * 32];
    size_t off = 0;
    for (unsigned i = 0; i < N; i++)
        off += (size_t)snprintf(batch + off, sizeof(batch) - off, "Q %u key-%u\n", 10 + i, i % 7);
    cr_assert_gt(off, 65536u, "the batch must exceed the pause threshold");
    cr_assert_eq(tk_test_tls_send_raw(t, batch, off), 0, "%s", t->err);
    for (unsigned i = 0; i < N; i++) {
        char line[128];
        cr_assert_geq(tk_test_tls_line(t, line, sizeof(line), 10000), 0, "reply %u: %s", i, t->err);
        cr_assert_eq(strncmp(line, "Q ", 2), 0, "got '%s'", line);
    }
    ping(t, 2);
    drop(t);
    await_metric("ticketing_inflight_paused_total", 1);
}

Test(tls, handshake_deadline_covers_tls_and_auth)
{
    static const char *const more[] = {"--handshake-ms", "400", NULL};
    start_tls(more);
    /* TLS done, AUTH never sent: closed at the deadline. */
    struct tk_test_tls *t = dial("ca.pem", NULL, SERVER_NAME);
    char line[512];
    cr_assert_geq(tk_test_tls_line(t, line, sizeof(line), 5000), 0, "no banner: %s", t->err);
    uint64_t t0 = tk_test_ms();
    cr_assert_eq(tk_test_tls_line(t, line, sizeof(line), 3000), -2, "not closed");
    cr_assert_lt(tk_test_ms() - t0, 2000);
    drop(t);
    /* TCP only, no TLS hello: closed at the deadline too. */
    struct tk_tc c;
    cr_assert_eq(tk_tc_connect(&c, node.port), 0);
    cr_assert(tk_tc_closed(&c, 3000), "a silent TCP client was not closed");
    tk_tc_close(&c);
    await_metric("ticketing_handshake_timeouts_total", 2);
}

/* ---------------------------------------------------------------- */
/* Refusals */

Test(tls, plaintext_client_on_tls_port_is_closed_and_logged)
{
    start_tls(NULL);
    struct tk_tc c;
    cr_assert_eq(tk_tc_connect(&c, node.port), 0);
    cr_assert_eq(tk_tc_send(&c, "AUTH %064d %064d\n", 0, 0), 0);
    char line[256];
    cr_assert_eq(tk_tc_line(&c, line, sizeof(line), 3000), -2, "got '%s', not a close", line);
    tk_tc_close(&c);
    cr_assert(log_has(&node, "a plaintext client on a TLS port", 3000), "no log line");
    cr_assert(log_has(&node, "TLS: client 127.0.0.1:", 0), "the log line names no peer");
    await_metric("ticketing_tls_failures_total", 1);
    /* The port still serves TLS clients. */
    drop(serve("ca.pem", NULL));
}

Test(tls, client_auth_refuses_a_client_without_certificate)
{
    const char *more[] = {"--tls-ca", f("ca.pem"), "--tls-client-auth", NULL};
    start_tls(more);
    /* TLS 1.3: the client finishes first and hears of the refusal at its
     * first read (an alert, or the close). */
    struct tk_test_tls t;
    if (tk_test_tls_dial(&t, node.port, f("ca.pem"), NULL, NULL, SERVER_NAME) == 0) {
        char line[256];
        cr_assert_eq(tk_test_tls_line(&t, line, sizeof(line), 5000), -2, "served: '%s'", line);
        tk_test_tls_close(&t);
    }
    cr_assert(log_has(&node, "sent no certificate", 3000), "no log line naming the cause");
    await_metric("ticketing_tls_failures_total", 1);
    /* A certificate signed by the CA is served. */
    drop(serve("ca.pem", "client"));
}

Test(tls, client_auth_refuses_a_certificate_of_another_ca)
{
    const char *more[] = {"--tls-ca", f("ca.pem"), "--tls-client-auth", NULL};
    start_tls(more);
    struct tk_test_tls t;
    if (tk_test_tls_dial(&t, node.port, f("ca.pem"), f("other.pem"), f("other.key"), SERVER_NAME) ==
        0) {
        char line[256];
        cr_assert_eq(tk_test_tls_line(&t, line, sizeof(line), 5000), -2, "served: '%s'", line);
        tk_test_tls_close(&t);
    }
    cr_assert(log_has(&node, "not signed by our CA", 3000), "no log line naming the cause");
}

Test(tls, client_trusting_another_ca_refuses_the_server)
{
    start_tls(NULL);
    const char *why = dial_refused("other-ca.pem", NULL, SERVER_NAME);
    cr_assert(strstr(why, "not signed by our CA"), "reason: %s", why);
    /* The server counts the failed handshake (the client's alert). */
    await_metric("ticketing_tls_failures_total", 1);
}

Test(tls, wrong_server_name_is_refused)
{
    start_tls(NULL);
    const char *why = dial_refused("ca.pem", NULL, "db.example");
    cr_assert(strstr(why, "does not name the host"), "reason: %s", why);
    /* And a server whose certificate is for another name. */
    tk_node_stop(&node, SIGTERM, 10000);
    tk_node_cleanup(&node);
    const char *args[] = {"--threads",        "1", "--tls-cert", f("wrongname.pem"), "--tls-key",
                          f("wrongname.key"), NULL};
    cr_assert_eq(tk_node_start_tls(&node, args), 0);
    why = dial_refused("ca.pem", NULL, SERVER_NAME);
    cr_assert(strstr(why, "does not name the host"), "reason: %s", why);
}

/* ---------------------------------------------------------------- */
/* Files that stop the start (exit 2, as other configuration errors) */

Test(tls, expired_certificate_refuses_to_start)
{
    const char *args[] = {"--tls-cert", f("expired.pem"), "--tls-key", f("expired.key"), NULL};
    expect_refusal(args, "expired");
}

Test(tls, missing_key_file_refuses_to_start)
{
    const char *args[] = {"--tls-cert", f("node.pem"), "--tls-key", f("absent.key"), NULL};
    expect_refusal(args, "cannot read TLS private key");
}

Test(tls, mismatched_key_refuses_to_start)
{
    const char *args[] = {"--tls-cert", f("node.pem"), "--tls-key", f("other.key"), NULL};
    expect_refusal(args, "does not match the certificate");
}

Test(tls, half_configured_tls_refuses_to_start)
{
    const char *cert_only[] = {"--tls-cert", f("node.pem"), NULL};
    expect_refusal(cert_only, "--tls-cert and --tls-key go together");
    tk_node_cleanup(&node);
    const char *auth_no_ca[] = {"--tls-cert",  f("node.pem"),       "--tls-key",
                                f("node.key"), "--tls-client-auth", NULL};
    expect_refusal(auth_no_ca, "--tls-client-auth needs --tls-ca");
    tk_node_cleanup(&node);
    const char *bad_ca[] = {"--tls-cert", f("node.pem"), "--tls-key", f("node.key"),
                            "--tls-ca",   f("node.key"), NULL};
    expect_refusal(bad_ca, "no usable PEM CA certificate");
}

Test(tls, plaintext_node_reports_tls_false)
{
    static const char *const args[] = {"--threads", "1", NULL};
    cr_assert_eq(tk_node_start(&node, args), 0);
    static char body[16384];
    cr_assert_eq(tk_http_get(node.port + 2, "/status", body, sizeof(body)), 200);
    cr_assert(strstr(body, "\"tls\":false"), "/status: %s", body);
    /* SIGHUP without TLS reloads nothing and does not stop the node. */
    kill(node.pid, SIGHUP);
    cr_assert(log_has(&node, "nothing to reload", 3000));
    struct tk_tc c;
    cr_assert_eq(tk_tc_open(&c, node.port, TK_TEST_SECRET), 0);
    tk_tc_close(&c);
}

/* ---------------------------------------------------------------- */
/* SIGHUP reload */

Test(tls, sighup_reload_new_certificate_for_new_connections)
{
    install_pair("node");
    const char *args[] = {"--threads",    "2", "--tls-cert", f("serve.pem"), "--tls-key",
                          f("serve.key"), NULL};
    cr_assert_eq(tk_node_start_tls(&node, args), 0);
    struct tk_test_tls *old = serve("ca.pem", NULL);

    /* A pair from another CA: new connections must trust that CA. */
    install_pair("other");
    kill(node.pid, SIGHUP);
    cr_assert(log_has(&node, "TLS: reloaded", 5000), "no reload logged");
    ping(old, 2); /* the open connection keeps its session */
    const char *why = dial_refused("ca.pem", NULL, SERVER_NAME);
    cr_assert(strstr(why, "not signed by our CA"), "reason: %s", why);
    struct tk_test_tls *fresh = serve("other-ca.pem", NULL);

    /* A reload that fails keeps the current certificate. */
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "echo garbage > %s/serve.key", dir);
    cr_assert_eq(system(cmd), 0);
    kill(node.pid, SIGHUP);
    cr_assert(log_has(&node, "TLS reload failed, keeping the previous certificate", 5000));
    cr_assert(tk_node_alive(&node));
    drop(serve("other-ca.pem", NULL));
    ping(old, 3);
    ping(fresh, 4);
    drop(old);
    drop(fresh);
}
