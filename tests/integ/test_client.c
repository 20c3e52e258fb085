/* Goal: libticketing keeps the seed's client behaviour (SPEC 11) against a
 * real standalone ticketingd: connections (two to one address), the
 * handshake's mutual authentication, M hints followed to an address that
 * was not configured, outcomes ACQUIRED/BUSY/TIMEOUT/INVALID/UNAVAILABLE,
 * query and ping, cancellation, shutdown, and pipelining of 10,000
 * asynchronous acquires from one client.
 *
 * Method: each test starts its own node (free ports, fresh secret). Fault
 * cases that need a misbehaving network are in test_client_faults.c; fake
 * servers here (a thread in the test) answer the handshake with a wrong
 * server proof, or with a right one followed by M. Timing bounds are loose
 * protocol deadlines only: the machine is shared and noisy.
 */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "client/ticketing.h"
#include "core/auth.h"
#include "core/proto.h"
#include "tests/support/tk_test.h"

/* ---- fixture ---------------------------------------------------------------- */

static struct tk_node node;

static void setup(void)
{
    static const char *const args[] = {"--threads", "2", NULL};
    cr_assert_eq(tk_node_start(&node, args), 0, "ticketingd did not start");
}

static void teardown(void)
{
    if (node.pid > 0)
        tk_node_stop(&node, SIGTERM, 10000);
    tk_node_cleanup(&node);
}

/* ---- helpers ------------------------------------------------------------------ */

static struct tk_client *client_with(const char *addrs, struct tk_client_config *cfg)
{
    struct tk_client_config def;
    if (cfg == NULL) {
        tk_client_config_init(&def);
        cfg = &def;
    }
    cfg->addrs = addrs;
    if (cfg->secret == NULL && cfg->secret_file == NULL)
        cfg->secret_file = node.secret_file;
    struct tk_client *c = NULL;
    int rc = tk_client_create(cfg, &c);
    cr_assert_eq(rc, TK_CLIENT_ENONE, "tk_client_create: %s", tk_client_strerror(rc));
    return c;
}

static char *node_addr(void)
{
    static char buf[64];
    snprintf(buf, sizeof buf, "127.0.0.1:%u", node.port);
    return buf;
}

static struct tk_client *client(void)
{
    return client_with(node_addr(), NULL);
}

/* ---- assertion helpers ----------------------------------------------------- */

#define expect_outcome(got, want)                                                    \
    cr_assert_eq((got), (want), "outcome %s, wanted %s", tk_client_outcome_str(got), \
                 tk_client_outcome_str(want))

/* ---- connections ------------------------------------------------------------- */

TestSuite(client, .init = setup, .fini = teardown, .timeout = 120);

Test(client, one_address_gets_two_connections)
{
    struct tk_client *c = client();
    struct tk_client_stats st;
    cr_assert(tk_client_wait_ready(c, 5000));
    for (int i = 0; i < 500; i++) {
        tk_client_stats(c, &st);
        if (st.connections_ready == 2)
            break;
        usleep(10000);
    }
    cr_assert_eq(st.connections, 2);
    cr_assert_eq(st.connections_ready, 2);
    cr_assert_eq(st.handshakes, 2);
    cr_assert_eq(st.auth_failures, 0);
    tk_client_destroy(c);
}

Test(client, wrong_secret_never_becomes_ready)
{
    struct tk_client_config cfg;
    tk_client_config_init(&cfg);
    cfg.secret = "this-is-not-the-secret-0123456789";
    cfg.secret_len = strlen(cfg.secret);
    struct tk_client *c = client_with(node_addr(), &cfg);
    struct tk_client_result r;
    cr_assert(!tk_client_wait_ready(c, 1000));
    expect_outcome(tk_client_acquire(c, "k", 5000, 0, &r), TK_CLIENT_UNAVAILABLE);
    cr_assert_eq(r.sent_us, 0, "nothing may be written before a good handshake");
    struct tk_client_stats st;
    tk_client_stats(c, &st);
    cr_assert_gt(st.auth_failures, 0);
    cr_assert_eq(st.handshakes, 0);
    tk_client_destroy(c);
}

/* The last line a client logged (from tk_client_create(): on this thread). */
static char logged[512];
static void log_keep(void *arg, int level, const char *message)
{
    (void)arg;
    (void)level;
    snprintf(logged, sizeof logged, "%s", message);
}

Test(client, a_bad_addrs_is_logged_with_its_reason)
{
    static const char *const cases[][2] = {
        {"127.0.0.1:0", "addrs: '127.0.0.1:0': port out of range (1-65535)"},
        {"::1:7400", "addrs: '::1:7400': an IPv6 address must be in brackets, as in [::1]:7400"},
        {"a:1, b:2", "addrs: ' b:2': a space or control character in the address"},
        {"a:1,b:2,c:3,d:4,e:5,f:6,g:7,h:8,i:9", "addrs: more than 8 addresses"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct tk_client_config cfg;
        struct tk_client *c = NULL;
        tk_client_config_init(&cfg);
        cfg.addrs = cases[i][0];
        cfg.secret_file = node.secret_file;
        cfg.log = log_keep;
        logged[0] = '\0';
        cr_assert_eq(tk_client_create(&cfg, &c), TK_CLIENT_EINVAL, "addrs '%s'", cases[i][0]);
        cr_assert_str_eq(logged, cases[i][1]);
    }
}

Test(client, create_refuses_bad_config)
{
    struct tk_client_config cfg;
    struct tk_client *c = NULL;
    const char *bad_addrs[] = {"",
                               "127.0.0.1",
                               "127.0.0.1:0",
                               "127.0.0.1:70000",
                               "::1:7400",
                               "a:1,,b:2",
                               "a:1,b:2,c:3,d:4,e:5,f:6,g:7,h:8,i:9"};
    for (size_t i = 0; i < sizeof bad_addrs / sizeof bad_addrs[0]; i++) {
        tk_client_config_init(&cfg);
        cfg.addrs = bad_addrs[i];
        cfg.secret_file = node.secret_file;
        cr_assert_eq(tk_client_create(&cfg, &c), TK_CLIENT_EINVAL, "addrs '%s'", bad_addrs[i]);
    }
    tk_client_config_init(&cfg);
    cfg.addrs = node_addr();
    cfg.secret = "short";
    cfg.secret_len = 5;
    cr_assert_eq(tk_client_create(&cfg, &c), TK_CLIENT_ESECRET);
    cfg.secret = NULL;
    cfg.secret_file = "/nonexistent/secret";
    cr_assert_eq(tk_client_create(&cfg, &c), TK_CLIENT_ESECRET);
    cfg.secret_file = node.secret_file;
    cfg.owner = "has space";
    cr_assert_eq(tk_client_create(&cfg, &c), TK_CLIENT_EINVAL);
    cfg.owner = NULL;
    cfg.tls_ca_file = "/nonexistent/ca.pem";
    cr_assert_eq(tk_client_create(&cfg, &c), TK_CLIENT_ETLS, "an unreadable CA file");
    cfg.tls_ca_file = NULL;
    cfg.tls_server_name = "localhost";
    cr_assert_eq(tk_client_create(&cfg, &c), TK_CLIENT_ETLS,
                 "TLS fields without a CA must not be silently ignored");
}

Test(client, default_owner_is_unique_and_valid)
{
    struct tk_client *a = client(), *b = client();
    const char *oa = tk_client_owner(a), *ob = tk_client_owner(b);
    cr_assert(tk_proto_owner_ok(oa, strlen(oa)), "owner '%s'", oa);
    cr_assert_str_neq(oa, ob);
    tk_client_destroy(a);
    tk_client_destroy(b);
}

/* ---- outcomes ------------------------------------------------------------------ */

Test(client, acquire_query_release)
{
    struct tk_client *c = client();
    struct tk_client_result r, q, rel;
    uint64_t before = tk_client_now_us();
    expect_outcome(tk_client_acquire(c, "seat-map", 30000, 1000, &r), TK_CLIENT_ACQUIRED);
    cr_assert_gt(r.token, 0);
    cr_assert_str_eq(r.key, "seat-map");
    cr_assert_geq(r.sent_us, before);
    cr_assert_eq(r.lease_deadline_us, r.sent_us + 30000u * 1000u,
                 "the lease counts from the first write (SPEC 3)");
    expect_outcome(tk_client_query(c, "seat-map", &q), TK_CLIENT_ANSWERED);
    cr_assert(q.held);
    cr_assert_str_eq(q.owner, tk_client_owner(c));
    cr_assert_eq(q.token, r.token);
    cr_assert_eq(q.waiters, 0);
    expect_outcome(tk_client_release(c, "seat-map", r.token, &rel), TK_CLIENT_RELEASED);
    cr_assert_eq(rel.token, r.token);
    cr_assert(!rel.resent);
    expect_outcome(tk_client_query(c, "seat-map", &q), TK_CLIENT_ANSWERED);
    cr_assert(!q.held);
    expect_outcome(tk_client_release(c, "seat-map", r.token, &rel), TK_CLIENT_NOT_HELD);
    tk_client_destroy(c);
}

Test(client, busy_returns_at_once_and_timeout_after_wait)
{
    struct tk_client *a = client(), *b = client();
    struct tk_client_result r, r2;
    expect_outcome(tk_client_acquire(a, "k", 30000, 0, &r), TK_CLIENT_ACQUIRED);
    cr_assert(tk_client_wait_ready(b, 5000));
    uint64_t t0 = tk_test_ms();
    expect_outcome(tk_client_acquire(b, "k", 30000, 0, &r2), TK_CLIENT_BUSY);
    cr_assert_lt(tk_test_ms() - t0, 1500, "B must return at once, with no retry");
    t0 = tk_test_ms();
    expect_outcome(tk_client_acquire(b, "k", 30000, 400, &r2), TK_CLIENT_TIMEOUT);
    uint64_t took = tk_test_ms() - t0;
    cr_assert_geq(took, 350, "T before the wait elapsed (%llu ms)", (unsigned long long)took);
    cr_assert_lt(took, 2500);
    /* FIFO handoff: a waiter gets the key when the holder releases. */
    struct tk_client_result rel;
    expect_outcome(tk_client_release(a, "k", r.token, &rel), TK_CLIENT_RELEASED);
    expect_outcome(tk_client_acquire(b, "k", 30000, 0, &r2), TK_CLIENT_ACQUIRED);
    cr_assert_gt(r2.token, r.token, "fencing tokens increase");
    tk_client_destroy(a);
    tk_client_destroy(b);
}

Test(client, invalid_fields_are_refused_without_a_round_trip)
{
    struct tk_client *c = client();
    struct tk_client_result r;
    char long_key[300];
    memset(long_key, 'k', sizeof long_key - 1);
    long_key[sizeof long_key - 1] = '\0';
    expect_outcome(tk_client_acquire(c, "has space", 5000, 0, &r), TK_CLIENT_INVALID);
    cr_assert_str_eq(r.reason, "key");
    expect_outcome(tk_client_acquire(c, long_key, 5000, 0, &r), TK_CLIENT_INVALID);
    cr_assert_str_eq(r.reason, "key");
    expect_outcome(tk_client_acquire(c, "k", 999, 0, &r), TK_CLIENT_INVALID);
    cr_assert_str_eq(r.reason, "lease");
    expect_outcome(tk_client_acquire(c, "k", 5000, 250001, &r), TK_CLIENT_INVALID);
    cr_assert_str_eq(r.reason, "wait");
    expect_outcome(tk_client_release(c, "k", 0, &r), TK_CLIENT_INVALID);
    cr_assert_str_eq(r.reason, "token");
    cr_assert_eq(tk_client_acquire_async(c, "", 5000, 0, NULL, NULL, NULL), TK_CLIENT_EINVAL);
    struct tk_client_stats st;
    tk_client_stats(c, &st);
    cr_assert_eq(st.requests_written, 0);
    tk_client_destroy(c);
}

Test(client, unavailable_when_nothing_listens)
{
    uint32_t port = tk_free_port3();
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%u", port);
    struct tk_client *c = client_with(addr, NULL);
    struct tk_client_result r;
    uint64_t t0 = tk_test_ms();
    expect_outcome(tk_client_acquire(c, "k", 5000, 200, &r), TK_CLIENT_UNAVAILABLE);
    uint64_t took = tk_test_ms() - t0;
    /* The send budget is max(wait, send_budget_min_ms = 1 s). */
    cr_assert_geq(took, 900);
    cr_assert_lt(took, 3000);
    cr_assert_eq(r.sent_us, 0);
    expect_outcome(tk_client_ping(c, &r), TK_CLIENT_UNAVAILABLE);
    tk_client_destroy(c);
}

Test(client, ping_answers)
{
    struct tk_client *c = client();
    struct tk_client_result r;
    expect_outcome(tk_client_ping(c, &r), TK_CLIENT_ANSWERED);
    cr_assert_gt(r.sent_us, 0);
    cr_assert_lt(r.rtt_us, 5000000);
    tk_client_destroy(c);
}

/* ---- asynchronous calls, cancel, shutdown -------------------------------------- */

struct collect {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned done;
    unsigned by_outcome[TK_CLIENT_WRONG_GROUP + 1]; /* the last outcome */
    uint64_t *tokens;                               /* by index, for acquires */
    pthread_t thread;
    bool wrong_thread;
};

struct slot {
    struct collect *col;
    unsigned index;
};

static void collect_init(struct collect *col, unsigned n)
{
    memset(col, 0, sizeof *col);
    pthread_mutex_init(&col->mu, NULL);
    pthread_cond_init(&col->cv, NULL);
    col->tokens = calloc(n, sizeof *col->tokens);
    col->thread = pthread_self();
}

static void collect_done(void *arg, const struct tk_client_result *r)
{
    struct slot *s = arg;
    struct collect *col = s->col;
    pthread_mutex_lock(&col->mu);
    if (pthread_equal(pthread_self(), col->thread))
        col->wrong_thread = true; /* callbacks run on the I/O thread */
    col->done++;
    col->by_outcome[r->outcome]++;
    if (r->outcome == TK_CLIENT_ACQUIRED)
        col->tokens[s->index] = r->token;
    pthread_cond_broadcast(&col->cv);
    pthread_mutex_unlock(&col->mu);
}

static void collect_free(struct collect *col)
{
    free(col->tokens);
    col->tokens = NULL;
}

static bool collect_wait(struct collect *col, unsigned n, int timeout_ms)
{
    uint64_t end = tk_test_ms() + (uint64_t)timeout_ms;
    pthread_mutex_lock(&col->mu);
    while (col->done < n && tk_test_ms() < end) {
        pthread_mutex_unlock(&col->mu);
        usleep(2000);
        pthread_mutex_lock(&col->mu);
    }
    bool ok = col->done >= n;
    pthread_mutex_unlock(&col->mu);
    return ok;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

Test(client, pipelines_ten_thousand_async_acquires, .timeout = 180)
{
    enum { N = 10000 };
    struct tk_client_config cfg;
    tk_client_config_init(&cfg);
    cfg.release_queue_max = N;
    struct tk_client *c = client_with(node_addr(), &cfg);
    struct collect acq, rel;
    struct slot *slots = calloc(N, sizeof *slots);
    char key[32];
    collect_init(&acq, N);
    collect_init(&rel, N);
    cr_assert(tk_client_wait_ready(c, 5000));
    uint64_t t0 = tk_test_ms();
    /* One assertion per loop, not per request: Criterion reports every
     * assertion to its runner. */
    unsigned refused = 0;
    for (unsigned i = 0; i < N; i++) {
        slots[i] = (struct slot){.col = &acq, .index = i};
        snprintf(key, sizeof key, "pipe-%u", i);
        refused += tk_client_acquire_async(c, key, 60000, 30000, collect_done, &slots[i], NULL) !=
                   TK_CLIENT_ENONE;
    }
    cr_assert_eq(refused, 0);
    cr_assert(collect_wait(&acq, N, 90000), "only %u of %d acquires finished", acq.done, N);
    uint64_t t1 = tk_test_ms();
    cr_assert_eq(acq.by_outcome[TK_CLIENT_ACQUIRED], N, "acquired %u, indeterminate %u",
                 acq.by_outcome[TK_CLIENT_ACQUIRED], acq.by_outcome[TK_CLIENT_INDETERMINATE]);
    cr_assert(!acq.wrong_thread);
    struct slot *rslots = calloc(N, sizeof *rslots);
    for (unsigned i = 0; i < N; i++) {
        rslots[i] = (struct slot){.col = &rel, .index = i};
        snprintf(key, sizeof key, "pipe-%u", i);
        refused += tk_client_release_async(c, key, acq.tokens[i], collect_done, &rslots[i]) !=
                   TK_CLIENT_ENONE;
    }
    cr_assert_eq(refused, 0);
    cr_assert(collect_wait(&rel, N, 90000), "only %u of %d releases finished", rel.done, N);
    cr_assert_eq(rel.by_outcome[TK_CLIENT_RELEASED], N);
    qsort(acq.tokens, N, sizeof *acq.tokens, cmp_u64);
    unsigned twice = 0;
    for (unsigned i = 1; i < N; i++)
        twice += acq.tokens[i] == acq.tokens[i - 1];
    cr_assert_eq(twice, 0, "a token was issued twice");
    struct tk_client_stats st;
    tk_client_stats(c, &st);
    cr_assert_geq(st.requests_written, 2 * N);
    cr_assert_eq(st.indeterminate, 0);
    fprintf(stderr, "pipelining: %d acquires in %llu ms, %d releases in %llu ms\n", N,
            (unsigned long long)(t1 - t0), N, (unsigned long long)(tk_test_ms() - t1));
    tk_client_destroy(c);
    collect_free(&acq);
    collect_free(&rel);
    free(slots);
    free(rslots);
}

struct relay {
    struct tk_client *c;
    struct collect col;
};

static void ignore_done(void *arg, const struct tk_client_result *r)
{
    (void)arg;
    (void)r;
}

/* Each grant is released at once from the callback (allowed: async calls
 * from the I/O thread), handing the key to the next waiter. */
static void relay_release_done(void *arg, const struct tk_client_result *r)
{
    struct slot *s = arg;
    struct relay *rl = (struct relay *)(void *)((char *)s->col - offsetof(struct relay, col));
    if (r->outcome == TK_CLIENT_ACQUIRED)
        tk_client_release_async(rl->c, r->key, r->token, ignore_done, NULL);
    collect_done(arg, r);
}

Test(client, a_burst_of_waiters_on_one_key_all_get_their_turn_in_order)
{
    /* Regression: requests submitted while the I/O thread was mid-round
     * once had their wait computed from a clock reading older than their
     * submission, which wrapped to "wait 0" and came back BUSY. */
    enum { N = 500 };
    struct tk_client *holder = client();
    struct relay rl = {.c = client()};
    struct slot *slots = calloc(N, sizeof *slots);
    struct tk_client_result r;
    collect_init(&rl.col, N);
    expect_outcome(tk_client_acquire(holder, "burst", 30000, 0, &r), TK_CLIENT_ACQUIRED);
    unsigned refused = 0;
    for (unsigned i = 0; i < N; i++) {
        slots[i] = (struct slot){.col = &rl.col, .index = i};
        refused += tk_client_acquire_async(rl.c, "burst", 30000, 60000, relay_release_done,
                                           &slots[i], NULL) != TK_CLIENT_ENONE;
    }
    cr_assert_eq(refused, 0);
    expect_outcome(tk_client_release(holder, "burst", r.token, &r), TK_CLIENT_RELEASED);
    cr_assert(collect_wait(&rl.col, N, 60000), "only %u of %d turns came", rl.col.done, N);
    cr_assert_eq(rl.col.by_outcome[TK_CLIENT_ACQUIRED], N, "busy %u, timeout %u",
                 rl.col.by_outcome[TK_CLIENT_BUSY], rl.col.by_outcome[TK_CLIENT_TIMEOUT]);
    /* The client spreads requests over its two connections, so arrival
     * order is not submission order: check only that tokens are distinct. */
    unsigned twice = 0;
    qsort(rl.col.tokens, N, sizeof *rl.col.tokens, cmp_u64);
    for (unsigned i = 1; i < N; i++)
        twice += rl.col.tokens[i] == rl.col.tokens[i - 1];
    cr_assert_eq(twice, 0);
    tk_client_destroy(rl.c);
    tk_client_destroy(holder);
    collect_free(&rl.col);
    free(slots);
}

Test(client, cancelled_waiter_gets_cancelled_and_its_late_grant_is_released)
{
    struct tk_client *holder = client(), *c = client();
    struct tk_client_result r, q, rel;
    struct collect col;
    struct slot s = {.col = &col, .index = 0};
    uint64_t handle = 0;
    collect_init(&col, 1);
    expect_outcome(tk_client_acquire(holder, "queue", 30000, 0, &r), TK_CLIENT_ACQUIRED);
    cr_assert_eq(tk_client_acquire_async(c, "queue", 30000, 20000, collect_done, &s, &handle),
                 TK_CLIENT_ENONE);
    /* Wait until the server has queued it, then give up on it. */
    for (int i = 0; i < 500; i++) {
        expect_outcome(tk_client_query(holder, "queue", &q), TK_CLIENT_ANSWERED);
        if (q.waiters == 1)
            break;
        usleep(10000);
    }
    cr_assert_eq(q.waiters, 1);
    cr_assert_eq(tk_client_cancel(c, handle), TK_CLIENT_ENONE);
    cr_assert(collect_wait(&col, 1, 5000));
    cr_assert_eq(col.by_outcome[TK_CLIENT_CANCELLED], 1);
    /* The holder lets go: the server hands the key to the cancelled waiter,
     * whose grant the client must release at once (compensation). */
    expect_outcome(tk_client_release(holder, "queue", r.token, &rel), TK_CLIENT_RELEASED);
    bool freed = false;
    for (int i = 0; i < 500 && !freed; i++) {
        expect_outcome(tk_client_query(holder, "queue", &q), TK_CLIENT_ANSWERED);
        freed = !q.held;
        if (!freed)
            usleep(10000);
    }
    cr_assert(freed, "the late grant was not released");
    struct tk_client_stats st;
    tk_client_stats(c, &st);
    cr_assert_eq(st.compensations, 1);
    cr_assert_eq(tk_client_cancel(c, handle), TK_CLIENT_ENOTFOUND, "a stale handle");
    tk_client_destroy(c);
    tk_client_destroy(holder);
    collect_free(&col);
}

Test(client, destroy_cancels_what_is_in_progress)
{
    struct tk_client *holder = client(), *c = client();
    struct tk_client_result r, q;
    struct collect col;
    struct slot s = {.col = &col, .index = 0};
    collect_init(&col, 1);
    expect_outcome(tk_client_acquire(holder, "d", 30000, 0, &r), TK_CLIENT_ACQUIRED);
    cr_assert_eq(tk_client_acquire_async(c, "d", 30000, 60000, collect_done, &s, NULL),
                 TK_CLIENT_ENONE);
    for (int i = 0; i < 500; i++) {
        expect_outcome(tk_client_query(holder, "d", &q), TK_CLIENT_ANSWERED);
        if (q.waiters == 1)
            break;
        usleep(10000);
    }
    uint64_t t0 = tk_test_ms();
    tk_client_destroy(c);
    cr_assert_lt(tk_test_ms() - t0, 2000, "destroy waits for releases only, and there are none");
    cr_assert_eq(col.done, 1);
    cr_assert_eq(col.by_outcome[TK_CLIENT_CANCELLED], 1);
    tk_client_destroy(holder);
    collect_free(&col);
}

static void blocking_from_callback(void *arg, const struct tk_client_result *r)
{
    struct tk_client **cp = arg;
    struct tk_client_result inner;
    (void)r;
    /* Must refuse, not deadlock: the callback runs on the I/O thread. */
    enum tk_client_outcome o = tk_client_ping(*cp, &inner);
    cp[1] =
        (struct tk_client *)(uintptr_t)(o == TK_CLIENT_INVALID && !strcmp(inner.reason, "thread")
                                            ? 1
                                            : 2);
}

Test(client, blocking_call_from_a_callback_is_refused)
{
    struct tk_client *pair[2] = {client(), NULL};
    cr_assert_eq(tk_client_ping_async(pair[0], blocking_from_callback, pair), TK_CLIENT_ENONE);
    for (int i = 0; i < 500 && pair[1] == NULL; i++)
        usleep(10000);
    cr_assert_eq((uintptr_t)pair[1], 1);
    tk_client_destroy(pair[0]);
}

/* ---- fake servers: mutual authentication and M ---------------------------------- */

struct fake {
    int lfd;
    uint32_t port;
    bool right_proof;  /* sign OK with the real secret? */
    char moved_to[64]; /* then send "M <moved_to>" and close */
    pthread_t thread;
    atomic_int served;
};

static void *fake_main(void *arg)
{
    struct fake *f = arg;
    for (;;) {
        int fd = accept(f->lfd, NULL, NULL);
        if (fd < 0)
            return NULL;
        char sn[TK_AUTH_HEX_LEN + 1], line[512], out[512];
        cr_assert_eq(tk_auth_nonce(sn), TK_OK);
        size_t n = tk_proto_fmt_banner(out, sizeof out, false, sn);
        if (write(fd, out, n) != (ssize_t)n) {
            close(fd);
            continue;
        }
        size_t len = 0;
        while (len < sizeof line - 1) {
            ssize_t got = read(fd, line + len, 1);
            if (got <= 0 || line[len] == '\n')
                break;
            len++;
        }
        const char *cn, *cp;
        if (tk_proto_parse_auth(line, len, &cn, &cp)) {
            char cnonce[TK_AUTH_HEX_LEN + 1], proof[TK_AUTH_HEX_LEN + 1];
            memcpy(cnonce, cn, TK_AUTH_HEX_LEN);
            cnonce[TK_AUTH_HEX_LEN] = '\0';
            if (f->right_proof)
                tk_auth_proof((const uint8_t *)TK_TEST_SECRET, strlen(TK_TEST_SECRET), true, sn,
                              cnonce, proof);
            else
                memset(proof, 'a', TK_AUTH_HEX_LEN);
            proof[TK_AUTH_HEX_LEN] = '\0';
            uint64_t dom[2] = {1, 2};
            n = tk_proto_fmt_ok(out, sizeof out, proof, 7, dom);
            n += tk_proto_fmt_moved(out + n, sizeof out - n, f->moved_to);
            if (write(fd, out, n) != (ssize_t)n)
                n = 0;
            atomic_fetch_add(&f->served, 1);
        }
        close(fd);
    }
}

static void fake_start(struct fake *f)
{
    f->lfd = tk_test_listen(&f->port);
    cr_assert(f->lfd >= 0);
    cr_assert_eq(pthread_create(&f->thread, NULL, fake_main, f), 0);
}

static void fake_stop(struct fake *f)
{
    shutdown(f->lfd, SHUT_RDWR);
    close(f->lfd);
    pthread_join(f->thread, NULL);
}

Test(client, m_is_not_believed_without_the_server_proof)
{
    struct fake f = {.right_proof = false};
    char addr[64];
    snprintf(f.moved_to, sizeof f.moved_to, "%s", node_addr());
    fake_start(&f);
    snprintf(addr, sizeof addr, "127.0.0.1:%u", f.port);
    struct tk_client *c = client_with(addr, NULL);
    for (int i = 0; i < 300 && atomic_load(&f.served) < 2; i++)
        usleep(10000);
    cr_assert_geq(atomic_load(&f.served), 2);
    struct tk_client_stats st;
    tk_client_stats(c, &st);
    cr_assert_eq(st.moved, 0, "an M from an unauthenticated server was believed");
    cr_assert_str_eq(st.leader_hint, "");
    cr_assert_eq(st.connections, 2, "no connection to the M address");
    cr_assert_gt(st.auth_failures, 0);
    tk_client_destroy(c);
    fake_stop(&f);
}

Test(client, m_hint_to_an_unconfigured_member_is_followed)
{
    /* A "follower" that knows the secret answers the handshake with M
     * naming the real node, which the client was not configured with. */
    struct fake f = {.right_proof = true};
    char addr[64];
    snprintf(f.moved_to, sizeof f.moved_to, "%s", node_addr());
    fake_start(&f);
    snprintf(addr, sizeof addr, "127.0.0.1:%u", f.port);
    struct tk_client *c = client_with(addr, NULL);
    struct tk_client_result r;
    expect_outcome(tk_client_acquire(c, "via-hint", 30000, 5000, &r), TK_CLIENT_ACQUIRED);
    struct tk_client_stats st;
    tk_client_stats(c, &st);
    cr_assert_geq(st.moved, 1);
    cr_assert_str_eq(st.leader_hint, node_addr());
    cr_assert_eq(st.connections, 3, "two configured + one to the hinted leader: %u",
                 st.connections);
    expect_outcome(tk_client_release(c, "via-hint", r.token, &r), TK_CLIENT_RELEASED);
    tk_client_destroy(c);
    fake_stop(&f);
}
