/* Goal: libticketing and ticketctl speak TLS (tls_ca_file and friends):
 * TCP -> TLS -> the handshake of SPEC 2 -> requests, inside the library's
 * non-blocking loop; the server's certificate must chain to the CA and name
 * the host dialled (or tls_server_name); a client certificate is presented
 * when configured; every refusal (another CA, a wrong name, a plaintext
 * server, a missing client certificate, unusable files) is a definite
 * failure with a sentence that names it, retried only slowly.
 *
 * Method: the server is mostly a fake in this test, so that every refusal
 * can be staged: a listening thread on 127.0.0.1 and one blocking thread per
 * connection, which wraps the socket in core/tls.h (server side, the
 * certificates of tests/support/make_certs.sh) or speaks plaintext, sends
 * the banner, checks the AUTH proof with the test secret, answers OK with
 * the server proof, then answers P, A (a grant with a fresh token), R and
 * Q. The real ticketctl binary runs against it too. A second suite runs
 * the library and ticketctl against a real ticketingd started with
 * --tls-cert/--tls-key/--tls-ca (and --tls-client-auth). Time bounds are
 * loose.
 */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "client/ticketing.h"
#include "core/auth.h"
#include "core/proto.h"
#include "core/tls.h"
#include "tests/support/tk_test.h"

#define TICKETCTL TK_BIN_DIR "/ticketctl"
#define SRV_CONNS_MAX 64

/* ---- certificates ---------------------------------------------------------- */

static char dir[64];

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
    snprintf(dir, sizeof dir, "/tmp/tk-ctls-%d", (int)getpid());
    char cmd[256];
    snprintf(cmd, sizeof cmd, "sh %s/tests/support/make_certs.sh %s", TK_SRC_DIR, dir);
    cr_assert_eq(system(cmd), 0, "openssl made the test certificates");
    FILE *s = fopen(f("secret"), "w");
    cr_assert(s != NULL);
    fprintf(s, "%s\n", TK_TEST_SECRET);
    fclose(s);
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

TestSuite(client_tls, .init = setup, .fini = teardown, .timeout = 120);

/* ---- the fake server ----------------------------------------------------------- */

struct srv {
    int lfd;
    uint32_t port;
    struct tk_tls_ctx *ctx; /* NULL: plaintext */
    pthread_t acceptor;
    pthread_t conns[SRV_CONNS_MAX];
    int nconns; /* the acceptor's, then (after the join) the test's */
    atomic_bool stop;
    atomic_int accepted;
    atomic_int authed;   /* AUTH proofs that checked out */
    atomic_int requests; /* request lines answered */
    pthread_mutex_t mu;
    char tls_error[TK_TLS_ERR_MAX]; /* the server side's last TLS failure */
};

struct srv_conn {
    struct srv *s;
    int fd;
    struct tk_tls *tls;
};

static struct tk_tls_ctx *server_ctx(const char *cert, bool verify_peer)
{
    char c[32], k[32];
    snprintf(c, sizeof c, "%s.pem", cert);
    snprintf(k, sizeof k, "%s.key", cert);
    struct tk_tls_opts o = {
        .server = true, .cert = f(c), .key = f(k), .ca = f("ca.pem"), .verify_peer = verify_peer};
    struct tk_tls_ctx *ctx = NULL;
    char err[TK_TLS_ERR_MAX] = "";
    cr_assert_eq(tk_tls_ctx_new(&o, &ctx, err, sizeof err), TK_OK, "%s", err);
    return ctx;
}

static void srv_note_tls_error(struct srv_conn *sc)
{
    if (sc->tls == NULL || tk_tls_error(sc->tls)[0] == '\0')
        return;
    pthread_mutex_lock(&sc->s->mu);
    snprintf(sc->s->tls_error, sizeof sc->s->tls_error, "%s", tk_tls_error(sc->tls));
    pthread_mutex_unlock(&sc->s->mu);
}

static bool send_all(int fd, const void *p, size_t n)
{
    const char *b = p;
    while (n > 0) {
        ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        b += w;
        n -= (size_t)w;
    }
    return true;
}

/* Sends what TLS holds for the peer. */
static bool srv_push(struct srv_conn *sc)
{
    size_t n;
    const uint8_t *p = tk_tls_pending(sc->tls, &n);
    if (n == 0)
        return true;
    bool ok = send_all(sc->fd, p, n);
    tk_tls_sent(sc->tls, n);
    return ok;
}

static bool srv_send(struct srv_conn *sc, const char *line, size_t n)
{
    if (sc->tls == NULL)
        return send_all(sc->fd, line, n);
    return tk_tls_write(sc->tls, line, n) == TK_OK && srv_push(sc);
}

/* One line from the client; false to close. */
static bool srv_line(struct srv_conn *sc,
                     const char *sn,
                     bool *authed,
                     uint64_t *token,
                     const char *line,
                     size_t len)
{
    char out[512];
    size_t n;
    if (!*authed) {
        const char *cn, *cp;
        char cnonce[TK_AUTH_HEX_LEN + 1], expect[TK_AUTH_HEX_LEN + 1], proof[TK_AUTH_HEX_LEN + 1];
        const uint8_t *secret = (const uint8_t *)TK_TEST_SECRET;
        if (!tk_proto_parse_auth(line, len, &cn, &cp)) {
            srv_send(sc, "E - auth\n", 9);
            return false;
        }
        memcpy(cnonce, cn, TK_AUTH_HEX_LEN);
        cnonce[TK_AUTH_HEX_LEN] = '\0';
        tk_auth_proof(secret, strlen(TK_TEST_SECRET), false, sn, cnonce, expect);
        if (!tk_auth_equal(expect, cp, TK_AUTH_HEX_LEN)) {
            srv_send(sc, "E - auth\n", 9);
            return false;
        }
        tk_auth_proof(secret, strlen(TK_TEST_SECRET), true, sn, cnonce, proof);
        uint64_t dom[2] = {1, 2};
        n = tk_proto_fmt_ok(out, sizeof out, proof, 7, dom);
        *authed = true;
        atomic_fetch_add(&sc->s->authed, 1);
        return srv_send(sc, out, n);
    }
    struct tk_request req;
    if (tk_proto_parse(line, len, &req) != TK_PARSE_OK)
        return false;
    switch (req.type) {
        case 'A':
            n = tk_proto_fmt_grant(out, sizeof out, req.id, ++*token);
            break;
        case 'Q':
            n = tk_proto_fmt_query(out, sizeof out, req.id, NULL, 0, 0, 0);
            break;
        default: /* 'R', 'P' */
            n = tk_proto_fmt_id(out, sizeof out, req.type, req.id);
            break;
    }
    atomic_fetch_add(&sc->s->requests, 1);
    return srv_send(sc, out, n);
}

static void *srv_conn_main(void *arg)
{
    struct srv_conn *sc = arg;
    struct srv *s = sc->s;
    char *in = malloc(1 << 16);
    size_t inlen = 0;
    char sn[TK_AUTH_HEX_LEN + 1], out[256];
    bool authed = false;
    uint64_t token = 0;
    struct timeval tv = {.tv_sec = 0, .tv_usec = 50000};
    setsockopt(sc->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    cr_assert(in != NULL);
    cr_assert_eq(tk_auth_nonce(sn), TK_OK);
    /* The banner: with TLS, held until the handshake is done. */
    size_t n = tk_proto_fmt_banner(out, sizeof out, false, sn);
    bool ok = srv_send(sc, out, n);
    while (ok && !atomic_load(&s->stop)) {
        uint8_t buf[16384];
        ssize_t r = recv(sc->fd, buf, sizeof buf, 0);
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            continue;
        if (r <= 0)
            break;
        if (sc->tls != NULL) {
            ok = tk_tls_feed(sc->tls, buf, (size_t)r) == TK_OK;
            while (ok) {
                size_t got;
                ok = tk_tls_read(sc->tls, in + inlen, (1 << 16) - inlen, &got) == TK_OK;
                ok = ok && srv_push(sc);
                if (got == 0)
                    break;
                inlen += got;
            }
        } else {
            size_t take = TK_MIN((size_t)r, (size_t)(1 << 16) - inlen);
            memcpy(in + inlen, buf, take);
            inlen += take;
        }
        size_t off = 0;
        char *nl;
        while (ok && (nl = memchr(in + off, '\n', inlen - off)) != NULL) {
            size_t len = (size_t)(nl - (in + off));
            ok = srv_line(sc, sn, &authed, &token, in + off, len);
            off += len + 1;
        }
        memmove(in, in + off, inlen - off);
        inlen -= off;
        if (inlen == (1 << 16))
            break;
    }
    if (sc->tls != NULL) {
        srv_push(sc); /* an alert, if the handshake failed */
        srv_note_tls_error(sc);
        tk_tls_free(sc->tls);
    }
    close(sc->fd);
    free(in);
    free(sc);
    tk_tls_thread_done(); /* wolfSSL keeps a cache per thread */
    return NULL;
}

static void *srv_accept_main(void *arg)
{
    struct srv *s = arg;
    for (;;) {
        int fd = accept(s->lfd, NULL, NULL);
        if (fd < 0 || atomic_load(&s->stop)) {
            if (fd >= 0)
                close(fd);
            return NULL;
        }
        atomic_fetch_add(&s->accepted, 1);
        struct srv_conn *sc = calloc(1, sizeof *sc);
        cr_assert(sc != NULL);
        sc->s = s;
        sc->fd = fd;
        if (s->ctx != NULL)
            sc->tls = tk_tls_new(s->ctx, NULL);
        if (s->nconns == SRV_CONNS_MAX ||
            pthread_create(&s->conns[s->nconns], NULL, srv_conn_main, sc) != 0) {
            tk_tls_free(sc->tls);
            close(fd);
            free(sc);
            continue;
        }
        s->nconns++;
    }
}

/* cert: "node", "other", "wrongname"... or NULL for a plaintext server. */
static void srv_start(struct srv *s, const char *cert, bool verify_peer)
{
    memset(s, 0, sizeof *s);
    pthread_mutex_init(&s->mu, NULL);
    s->ctx = cert ? server_ctx(cert, verify_peer) : NULL;
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t al = sizeof a;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    s->lfd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert(s->lfd >= 0);
    cr_assert_eq(bind(s->lfd, (struct sockaddr *)&a, sizeof a), 0);
    cr_assert_eq(listen(s->lfd, 64), 0);
    cr_assert_eq(getsockname(s->lfd, (struct sockaddr *)&a, &al), 0);
    s->port = ntohs(a.sin_port);
    cr_assert_eq(pthread_create(&s->acceptor, NULL, srv_accept_main, s), 0);
}

static void srv_stop(struct srv *s)
{
    atomic_store(&s->stop, true);
    shutdown(s->lfd, SHUT_RDWR);
    close(s->lfd);
    pthread_join(s->acceptor, NULL);
    for (int i = 0; i < s->nconns; i++)
        pthread_join(s->conns[i], NULL);
    tk_tls_ctx_unref(s->ctx);
    pthread_mutex_destroy(&s->mu);
}

/* ---- client helpers --------------------------------------------------------------- */

static char addr_buf[64];

static const char *srv_addr(const struct srv *s, const char *host)
{
    snprintf(addr_buf, sizeof addr_buf, "%s:%u", host, s->port);
    return addr_buf;
}

static void tls_config(struct tk_client_config *cfg, const char *addrs)
{
    tk_client_config_init(cfg);
    cfg->addrs = addrs;
    cfg->secret = TK_TEST_SECRET;
    cfg->secret_len = strlen(TK_TEST_SECRET);
    cfg->tls_ca_file = f("ca.pem");
    cfg->connect_timeout_ms = 3000;
}

static struct tk_client *create(const struct tk_client_config *cfg)
{
    struct tk_client *c = NULL;
    char why[512] = "";
    int rc = tk_client_create(cfg, &c);
    if (rc == TK_CLIENT_ETLS)
        tk_client_tls_check(cfg, why, sizeof why);
    cr_assert_eq(rc, TK_CLIENT_ENONE, "tk_client_create: %s %s", tk_client_strerror(rc), why);
    return c;
}

#define expect_outcome(got, want)                                                    \
    cr_assert_eq((got), (want), "outcome %s, wanted %s", tk_client_outcome_str(got), \
                 tk_client_outcome_str(want))

/* One full round trip of every request kind over the client. */
static void round_trip(struct tk_client *c)
{
    struct tk_client_result r, q;
    char err[512] = "";
    cr_assert(tk_client_wait_ready(c, 10000), "not ready: %s",
              (tk_client_last_error(c, err, sizeof err), err));
    expect_outcome(tk_client_ping(c, &r), TK_CLIENT_ANSWERED);
    expect_outcome(tk_client_acquire(c, "tls-key", 5000, 0, &r), TK_CLIENT_ACQUIRED);
    cr_assert_gt(r.token, 0);
    expect_outcome(tk_client_query(c, "tls-key", &q), TK_CLIENT_ANSWERED);
    expect_outcome(tk_client_release(c, "tls-key", r.token, &r), TK_CLIENT_RELEASED);
}

/* A client that must not connect: its ping ends UNAVAILABLE "tls" well
 * before its 5 s budget, and the last error holds every word of want. */
static void expect_refused(struct tk_client *c, const char *const *want)
{
    struct tk_client_result r;
    uint64_t t0 = tk_test_ms();
    expect_outcome(tk_client_ping(c, &r), TK_CLIENT_UNAVAILABLE);
    uint64_t took = tk_test_ms() - t0;
    cr_assert_str_eq(r.reason, "tls", "reason '%s'", r.reason);
    cr_assert_lt(took, 4000, "a TLS refusal is definite: no wait for the budget (%llu ms)",
                 (unsigned long long)took);
    char err[512];
    cr_assert_gt(tk_client_last_error(c, err, sizeof err), 0);
    cr_log_info("last error: %s", err);
    for (int i = 0; want[i] != NULL; i++)
        cr_assert(strstr(err, want[i]) != NULL, "\"%s\" not in \"%s\"", want[i], err);
    struct tk_client_stats st;
    tk_client_stats(c, &st);
    cr_assert_eq(st.handshakes, 0);
    cr_assert_eq(st.connections_ready, 0);
}

/* ---- handshake and traffic ---------------------------------------------------------- */

Test(client_tls, handshake_auth_and_requests_over_tls)
{
    struct srv s;
    srv_start(&s, "node", false);
    struct tk_client_config cfg;
    tls_config(&cfg, srv_addr(&s, "127.0.0.1")); /* an IP literal: the IP SAN is checked */
    struct tk_client *c = create(&cfg);
    round_trip(c);
    struct tk_client_stats st;
    tk_client_stats(c, &st);
    cr_assert_eq(st.auth_failures, 0);
    cr_assert_geq(st.handshakes, 1);
    char err[64];
    cr_assert_eq(tk_client_last_error(c, err, sizeof err), 0, "a failure: %s", err);
    tk_client_destroy(c);
    cr_assert_geq(atomic_load(&s.authed), 1, "the HMAC handshake ran inside TLS");
    cr_assert_geq(atomic_load(&s.requests), 4);
    srv_stop(&s);
}

Test(client_tls, a_host_name_is_checked_against_the_dns_names)
{
    struct srv s;
    srv_start(&s, "node", false);
    struct tk_client_config cfg;
    tls_config(&cfg, srv_addr(&s, "localhost"));
    struct tk_client *c = create(&cfg);
    round_trip(c);
    tk_client_destroy(c);
    srv_stop(&s);
}

static atomic_int pipe_answered, pipe_granted;

static void pipe_done(void *arg, const struct tk_client_result *r)
{
    (void)arg;
    if (r->outcome == TK_CLIENT_ACQUIRED)
        atomic_fetch_add(&pipe_granted, 1);
    atomic_fetch_add(&pipe_answered, 1);
}

Test(client_tls, many_pipelined_requests_cross_record_boundaries)
{
    /* Far more than one TLS record (16 KiB) of requests at once: the
     * output is handed to TLS in pieces and every answer comes back. */
    enum { N = 5000 };
    struct srv s;
    srv_start(&s, "node", false);
    struct tk_client_config cfg;
    tls_config(&cfg, srv_addr(&s, "127.0.0.1"));
    struct tk_client *c = create(&cfg);
    cr_assert(tk_client_wait_ready(c, 10000));
    for (int i = 0; i < N; i++) {
        char key[32];
        snprintf(key, sizeof key, "pipe-%d", i);
        cr_assert_eq(tk_client_acquire_async(c, key, 30000, 0, pipe_done, NULL, NULL),
                     TK_CLIENT_ENONE);
    }
    for (int i = 0; i < 3000 && atomic_load(&pipe_answered) < N; i++)
        usleep(10000);
    cr_assert_eq(atomic_load(&pipe_answered), N, "only %d of %d answered",
                 atomic_load(&pipe_answered), N);
    cr_assert_eq(atomic_load(&pipe_granted), N);
    tk_client_destroy(c);
    srv_stop(&s);
}

/* ---- refusals ----------------------------------------------------------------------- */

Test(client_tls, a_server_of_another_ca_is_refused)
{
    struct srv s;
    srv_start(&s, "other", false);
    struct tk_client_config cfg;
    tls_config(&cfg, srv_addr(&s, "127.0.0.1"));
    struct tk_client *c = create(&cfg);
    const char *const want[] = {srv_addr(&s, "127.0.0.1"), "not signed by our CA", "ca.pem", NULL};
    expect_refused(c, want);
    /* A configuration error is retried slowly (backoff_max_ms, 3.2 s),
     * not in a tight loop: two connections, one attempt each so far. */
    usleep(1500 * 1000);
    struct tk_client_stats st;
    tk_client_stats(c, &st);
    cr_assert_leq(st.connect_attempts, 4, "%llu attempts in 1.5 s",
                  (unsigned long long)st.connect_attempts);
    cr_assert_eq(atomic_load(&s.authed), 0, "no secret proof was sent to that server");
    tk_client_destroy(c);
    srv_stop(&s);
}

Test(client_tls, a_certificate_for_another_name_is_refused)
{
    struct srv s;
    srv_start(&s, "wrongname", false);
    struct tk_client_config cfg;
    tls_config(&cfg, srv_addr(&s, "127.0.0.1"));
    struct tk_client *c = create(&cfg);
    const char *const want[] = {"does not name the host", "server name 127.0.0.1", NULL};
    expect_refused(c, want);
    tk_client_destroy(c);
    /* The same server is fine for a client told the name it holds. */
    tls_config(&cfg, srv_addr(&s, "127.0.0.1"));
    cfg.tls_server_name = "elsewhere.example";
    c = create(&cfg);
    round_trip(c);
    tk_client_destroy(c);
    srv_stop(&s);
}

Test(client_tls, tls_server_name_replaces_the_host_dialled)
{
    struct srv s;
    srv_start(&s, "node", false);
    struct tk_client_config cfg;
    tls_config(&cfg, srv_addr(&s, "127.0.0.1"));
    cfg.tls_server_name = "db.example";
    struct tk_client *c = create(&cfg);
    const char *const want[] = {"does not name the host", "server name db.example", NULL};
    expect_refused(c, want);
    tk_client_destroy(c);
    srv_stop(&s);
}

Test(client_tls, a_client_certificate_is_presented_when_configured)
{
    /* This server requires a client certificate signed by the CA. */
    struct srv s;
    srv_start(&s, "node", true);
    struct tk_client_config cfg;
    tls_config(&cfg, srv_addr(&s, "127.0.0.1"));
    cfg.tls_cert_file = f("client.pem");
    cfg.tls_key_file = f("client.key");
    struct tk_client *c = create(&cfg);
    round_trip(c);
    tk_client_destroy(c);
    srv_stop(&s);
}

Test(client_tls, no_client_certificate_where_one_is_required_is_named)
{
    struct srv s;
    srv_start(&s, "node", true);
    struct tk_client_config cfg;
    tls_config(&cfg, srv_addr(&s, "127.0.0.1"));
    cfg.request_timeout_ms = 2000;
    struct tk_client *c = create(&cfg);
    struct tk_client_result r;
    expect_outcome(tk_client_ping(c, &r), TK_CLIENT_UNAVAILABLE);
    char err[512];
    cr_assert_gt(tk_client_last_error(c, err, sizeof err), 0);
    cr_log_info("last error: %s", err);
    cr_assert(strstr(err, "tls_cert_file") != NULL, "no hint at client certificates: %s", err);
    cr_assert_eq(atomic_load(&s.authed), 0);
    tk_client_destroy(c);
    pthread_mutex_lock(&s.mu);
    cr_assert(strstr(s.tls_error, "certificate") != NULL, "server side: %s", s.tls_error);
    pthread_mutex_unlock(&s.mu);
    srv_stop(&s);
}

Test(client_tls, a_plaintext_server_is_named)
{
    struct srv s;
    srv_start(&s, NULL, false);
    struct tk_client_config cfg;
    tls_config(&cfg, srv_addr(&s, "127.0.0.1"));
    struct tk_client *c = create(&cfg);
    const char *const want[] = {"does not speak TLS", "TICKETING/1", NULL};
    expect_refused(c, want);
    tk_client_destroy(c);
    srv_stop(&s);
}

Test(client_tls, a_plaintext_client_on_a_tls_port_gets_a_hint)
{
    struct srv s;
    srv_start(&s, "node", false);
    struct tk_client_config cfg;
    tls_config(&cfg, srv_addr(&s, "127.0.0.1"));
    cfg.tls_ca_file = NULL;
    cfg.connect_timeout_ms = 300;
    cfg.request_timeout_ms = 1500;
    struct tk_client *c = create(&cfg);
    struct tk_client_result r;
    expect_outcome(tk_client_ping(c, &r), TK_CLIENT_UNAVAILABLE);
    char err[512];
    cr_assert_gt(tk_client_last_error(c, err, sizeof err), 0);
    cr_log_info("last error: %s", err);
    cr_assert(strstr(err, "no banner") && strstr(err, "tls_ca_file"), "%s", err);
    tk_client_destroy(c);
    srv_stop(&s);
}

Test(client_tls, unusable_tls_settings_fail_create_with_a_sentence)
{
    struct tk_client_config cfg;
    struct tk_client *c = NULL;
    char why[512];
    struct {
        const char *ca, *cert, *key, *name, *want;
    } cases[] = {
        {"nope.pem", NULL, NULL, NULL, "nope.pem"},
        {NULL, NULL, NULL, "localhost", "tls_ca_file"},
        {NULL, "client.pem", "client.key", NULL, "tls_ca_file"},
        {"ca.pem", "client.pem", NULL, NULL, "tls_key_file"},
        {"ca.pem", NULL, "client.key", NULL, "tls_cert_file"},
        {"ca.pem", "expired.pem", "expired.key", NULL, "expired"},
        {"ca.pem", "client.pem", "node.key", NULL, "does not match"},
        {"ca.pem", NULL, NULL, "has space", "not a host name"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tls_config(&cfg, "127.0.0.1:1");
        cfg.tls_ca_file = cases[i].ca ? f(cases[i].ca) : NULL;
        cfg.tls_cert_file = cases[i].cert ? f(cases[i].cert) : NULL;
        cfg.tls_key_file = cases[i].key ? f(cases[i].key) : NULL;
        cfg.tls_server_name = cases[i].name;
        cr_assert_eq(tk_client_create(&cfg, &c), TK_CLIENT_ETLS, "case %zu", i);
        cr_assert_null(c);
        cr_assert_eq(tk_client_tls_check(&cfg, why, sizeof why), TK_CLIENT_ETLS);
        cr_assert(strstr(why, cases[i].want) != NULL, "case %zu: \"%s\" not in \"%s\"", i,
                  cases[i].want, why);
    }
    tls_config(&cfg, "127.0.0.1:1");
    cr_assert_eq(tk_client_tls_check(&cfg, why, sizeof why), TK_CLIENT_ENONE);
    cfg.tls_ca_file = NULL;
    cr_assert_eq(tk_client_tls_check(&cfg, why, sizeof why), TK_CLIENT_ENONE, "plaintext");
}

/* ---- ticketctl ---------------------------------------------------------------------- */

/* Runs ticketctl with args (NULL-terminated); its exit code, and its
 * stdout and stderr together in out. */
static int ctl(const char *const *args, char *out, size_t cap)
{
    char path[128], *argv[32];
    int a = 0;
    snprintf(path, sizeof path, "%s/ctl-out", dir);
    argv[a++] = TICKETCTL;
    for (int i = 0; args[i] != NULL && a < 31; i++)
        argv[a++] = (char *)args[i];
    argv[a] = NULL;
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        unsetenv("TICKETING_TLS_CA");
        execv(TICKETCTL, argv);
        _exit(127);
    }
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    FILE *fp = fopen(path, "r");
    cr_assert(fp != NULL);
    size_t n = fread(out, 1, cap - 1, fp);
    out[n] = '\0';
    fclose(fp);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

Test(client_tls, ticketctl_over_tls)
{
    struct srv good, other;
    srv_start(&good, "node", true);
    srv_start(&other, "other", false);
    char out[2048], a_good[64], a_other[64];
    snprintf(a_good, sizeof a_good, "127.0.0.1:%u", good.port);
    snprintf(a_other, sizeof a_other, "127.0.0.1:%u", other.port);
    const char *ok[] = {"ping",          "--addr",    a_good,          "--secret-file",
                        f("secret"),     "--tls-ca",  f("ca.pem"),     "--tls-cert",
                        f("client.pem"), "--tls-key", f("client.key"), NULL};
    int rc = ctl(ok, out, sizeof out);
    cr_assert_eq(rc, 0, "exit %d: %s", rc, out);
    cr_assert(strstr(out, "pong") != NULL, "%s", out);
    const char *acq[] = {"acquire",
                         "k1",
                         "--addr",
                         a_good,
                         "--secret-file",
                         f("secret"),
                         "--tls-ca",
                         f("ca.pem"),
                         "--tls-cert",
                         f("client.pem"),
                         "--tls-key",
                         f("client.key"),
                         "--tls-server-name",
                         "localhost",
                         NULL};
    rc = ctl(acq, out, sizeof out);
    cr_assert_eq(rc, 0, "exit %d: %s", rc, out);
    cr_assert(strstr(out, "acquired k1 token") != NULL, "%s", out);
    /* Refused: one line that names the cause, exit 83 (unavailable). */
    const char *bad[] = {"ping",      "--addr",   a_other,     "--secret-file",
                         f("secret"), "--tls-ca", f("ca.pem"), NULL};
    rc = ctl(bad, out, sizeof out);
    cr_assert_eq(rc, 83, "exit %d: %s", rc, out);
    cr_log_info("ticketctl: %s", out);
    cr_assert(strstr(out, "not signed by our CA") != NULL, "%s", out);
    cr_assert(strchr(out, '\n') == out + strlen(out) - 1, "one line: %s", out);
    /* Unusable files: one line, exit 64. */
    const char *files[] = {"ping",     "--addr",    a_good,       "--secret-file", f("secret"),
                           "--tls-ca", f("ca.pem"), "--tls-cert", f("client.pem"), NULL};
    rc = ctl(files, out, sizeof out);
    cr_assert_eq(rc, 64, "exit %d: %s", rc, out);
    cr_assert(strstr(out, "--tls-key") != NULL, "%s", out);
    cr_assert(strchr(out, '\n') == out + strlen(out) - 1, "one line: %s", out);
    srv_stop(&good);
    srv_stop(&other);
}

/* ---- against a real ticketingd ------------------------------------------------------ */

static struct tk_node node;

static void teardown_node(void)
{
    if (node.pid > 0)
        tk_node_stop(&node, SIGTERM, 10000);
    tk_node_cleanup(&node);
    teardown();
}

TestSuite(client_tls_ticketingd, .init = setup, .fini = teardown_node, .timeout = 120);

static void start_node(bool client_auth)
{
    const char *args[] = {"--threads",   "2",         "--tls-cert",
                          f("node.pem"), "--tls-key", f("node.key"),
                          "--tls-ca",    f("ca.pem"), client_auth ? "--tls-client-auth" : NULL,
                          NULL};
    cr_assert_eq(tk_node_start_tls(&node, args), 0, "ticketingd with TLS did not start (log in %s)",
                 node.log_file);
}

Test(client_tls_ticketingd, the_library_and_ticketctl_over_tls)
{
    start_node(false);
    struct tk_client_config cfg;
    char addr[64], out[2048];
    snprintf(addr, sizeof addr, "127.0.0.1:%u", node.port);
    tls_config(&cfg, addr);
    struct tk_client *c = create(&cfg);
    round_trip(c);
    tk_client_destroy(c);
    /* ticketctl: a lock held while a command runs, over TLS. */
    const char *run[] = {"run",
                         "tls-run",
                         "--addr",
                         addr,
                         "--secret-file",
                         node.secret_file,
                         "--tls-ca",
                         f("ca.pem"),
                         "--",
                         "sh",
                         "-c",
                         "echo token=$TICKETING_TOKEN",
                         NULL};
    int rc = ctl(run, out, sizeof out);
    cr_assert_eq(rc, 0, "exit %d: %s", rc, out);
    cr_assert(strstr(out, "token=") != NULL && strstr(out, "token=\n") == NULL, "%s", out);
    /* Without TLS on a TLS port: a clear line, exit 83. */
    const char *plain[] = {"ping",           "--addr",    addr, "--secret-file",
                           node.secret_file, "--timeout", "1s", NULL};
    rc = ctl(plain, out, sizeof out);
    cr_assert_eq(rc, 83, "exit %d: %s", rc, out);
    cr_log_info("ticketctl without TLS: %s", out);
    cr_assert(strstr(out, "--tls-ca") != NULL, "no hint at TLS: %s", out);
}

Test(client_tls_ticketingd, client_certificates_with_tls_client_auth)
{
    start_node(true);
    struct tk_client_config cfg;
    char addr[64], err[512];
    snprintf(addr, sizeof addr, "127.0.0.1:%u", node.port);
    tls_config(&cfg, addr);
    cfg.tls_cert_file = f("client.pem");
    cfg.tls_key_file = f("client.key");
    struct tk_client *c = create(&cfg);
    round_trip(c);
    tk_client_destroy(c);
    /* No client certificate: refused, and the error says what to set. */
    tls_config(&cfg, addr);
    cfg.request_timeout_ms = 2000;
    c = create(&cfg);
    struct tk_client_result r;
    expect_outcome(tk_client_ping(c, &r), TK_CLIENT_UNAVAILABLE);
    cr_assert_gt(tk_client_last_error(c, err, sizeof err), 0);
    cr_log_info("no client certificate: %s", err);
    cr_assert(strstr(err, "tls_cert_file") != NULL, "%s", err);
    tk_client_destroy(c);
}
