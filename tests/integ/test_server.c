/* Integration tests of a standalone ticketingd: the real binary on
 * 127.0.0.1, driven over real sockets. Covers the handshake (SPEC 2), the
 * request x key-state matrix (SPEC 6) cell by cell, FIFO and handoff,
 * timers, disconnects, pipelining, many connections, every class of bad
 * input (SPEC 5, 14) and SIGTERM.
 *
 * Method: each test starts its own node (free ports, fresh secret) with
 * two worker threads, so keys and connections spread across shards.
 */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/auth.h"
#include "tests/support/tk_test.h"

/* Fixture */

static struct tk_node node;

static void start_with(const char *const *args)
{
    cr_assert_eq(tk_node_start(&node, args), 0, "ticketingd did not start");
}

static void setup(void)
{
    static const char *const args[] = {"--threads", "2", NULL};
    start_with(args);
}

static void teardown(void)
{
    if (node.pid > 0) {
        int st = tk_node_stop(&node, SIGTERM, 10000);
        cr_expect(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0,
                  "ticketingd did not exit cleanly on SIGTERM (status %d)", st);
    }
    tk_node_cleanup(&node);
}

/* Helpers */

static struct tk_tc *client(void)
{
    struct tk_tc *c = malloc(sizeof(*c));
    cr_assert(c);
    cr_assert_eq(tk_tc_open(c, node.port, TK_TEST_SECRET), 0, "handshake failed");
    return c;
}

static void drop(struct tk_tc *c)
{
    tk_tc_close(c);
    free(c);
}

/* Reads the next line and checks it equals want exactly. */
static void expect_line(struct tk_tc *c, const char *want)
{
    char line[1100];
    int n = tk_tc_line(c, line, sizeof(line), 5000);
    cr_assert(n >= 0, "no line (wanted '%s')", want);
    cr_assert_str_eq(line, want);
}

/* Reads "G <id> <token>" for the given id and returns the token. */
static uint64_t expect_grant(struct tk_tc *c, uint64_t id)
{
    char line[256];
    int n = tk_tc_line(c, line, sizeof(line), 5000);
    cr_assert(n >= 0, "no grant for id %" PRIu64, id);
    uint64_t gid = 0, token = 0;
    cr_assert_eq(sscanf(line, "G %" SCNu64 " %" SCNu64, &gid, &token), 2, "got '%s'", line);
    cr_assert_eq(gid, id, "got '%s'", line);
    cr_assert_gt(token, 0);
    return token;
}

/* Nothing arrives on c within ms. */
static void expect_silence(struct tk_tc *c, int ms)
{
    char line[256];
    int n = tk_tc_line(c, line, sizeof(line), ms);
    cr_assert_eq(n, -1, "unexpected line '%s'", n >= 0 ? line : "(eof)");
}

/* Waits until Q on key reports the given number of waiters. */
static void await_waiters(struct tk_tc *c, const char *key, unsigned waiters)
{
    char want_suffix[32], line[512];
    snprintf(want_suffix, sizeof(want_suffix), " %u", waiters);
    for (int i = 0; i < 500; i++) {
        tk_tc_send(c, "Q 999999 %s\n", key);
        cr_assert(tk_tc_line(c, line, sizeof(line), 5000) >= 0);
        size_t n = strlen(line), m = strlen(want_suffix);
        if (n > m && !strcmp(line + n - m, want_suffix))
            return;
        usleep(2000);
    }
    cr_assert_fail("key %s never reached %u waiters (last '%s')", key, waiters, line);
}

/* ---------------------------------------------------------------- */
/* Handshake (SPEC 2) */

TestSuite(handshake, .init = setup, .fini = teardown, .timeout = 60);

Test(handshake, good_secret_gets_ok_with_server_proof)
{
    struct tk_tc *c = client();
    cr_assert_neq(c->node_id, 0);
    tk_tc_send(c, "P 1\n");
    expect_line(c, "P 1");
    drop(c);
}

Test(handshake, wrong_secret_gets_auth_error_and_close)
{
    struct tk_tc c;
    cr_assert_eq(tk_tc_connect(&c, node.port), 0);
    cr_assert_neq(tk_tc_handshake(&c, "not-the-secret-at-all-0000"), 0);
    cr_assert_str_eq(c.ok_line, "E - auth");
    cr_assert(tk_tc_closed(&c, 3000));
    tk_tc_close(&c);
}

Test(handshake, replayed_proof_is_refused)
{
    /* Record a good AUTH line on one connection, replay it on another:
     * the new connection's fresh nonce makes the old proof worthless. */
    struct tk_tc a, b;
    char banner[256], line[256];
    cr_assert_eq(tk_tc_connect(&a, node.port), 0);
    cr_assert(tk_tc_line(&a, banner, sizeof(banner), 5000) > 0);
    char cn[TK_AUTH_HEX_LEN + 1], proof[TK_AUTH_HEX_LEN + 1];
    cr_assert_eq(tk_auth_nonce(cn), TK_OK);
    tk_auth_proof((const uint8_t *)TK_TEST_SECRET, strlen(TK_TEST_SECRET), false,
                  banner + strlen("TICKETING/1 "), cn, proof);
    tk_tc_send(&a, "AUTH %s %s\n", cn, proof);
    cr_assert(tk_tc_line(&a, line, sizeof(line), 5000) > 0);
    cr_assert_eq(strncmp(line, "OK ", 3), 0, "first use must succeed: '%s'", line);

    cr_assert_eq(tk_tc_connect(&b, node.port), 0);
    cr_assert(tk_tc_line(&b, banner, sizeof(banner), 5000) > 0);
    tk_tc_send(&b, "AUTH %s %s\n", cn, proof);
    cr_assert(tk_tc_line(&b, line, sizeof(line), 5000) >= 0);
    cr_assert_str_eq(line, "E - auth");
    cr_assert(tk_tc_closed(&b, 3000));
    tk_tc_close(&a);
    tk_tc_close(&b);
}

Test(handshake, request_before_auth_is_refused)
{
    struct tk_tc c;
    char line[256];
    cr_assert_eq(tk_tc_connect(&c, node.port), 0);
    cr_assert(tk_tc_line(&c, line, sizeof(line), 5000) > 0);
    tk_tc_send(&c, "A 1 k o 1000 0\n");
    cr_assert(tk_tc_line(&c, line, sizeof(line), 5000) >= 0);
    cr_assert_str_eq(line, "E - auth");
    cr_assert(tk_tc_closed(&c, 3000));
    tk_tc_close(&c);
}

Test(handshake, idle_connection_closed_after_5s_without_a_line)
{
    struct tk_tc c;
    char line[256];
    cr_assert_eq(tk_tc_connect(&c, node.port), 0);
    cr_assert(tk_tc_line(&c, line, sizeof(line), 5000) > 0); /* banner */
    uint64_t t0 = tk_test_ms();
    /* A partial AUTH line does not count as finishing the handshake. */
    tk_tc_send(&c, "AUTH 00");
    int n = tk_tc_line(&c, line, sizeof(line), 9000);
    uint64_t waited = tk_test_ms() - t0;
    cr_assert_eq(n, -2, "expected a close without a line, got %d '%s'", n, n >= 0 ? line : "");
    cr_assert_geq(waited, 4000, "closed too early: %" PRIu64 " ms", waited);
    tk_tc_close(&c);
}

Test(handshake, banner_format)
{
    struct tk_tc c;
    char line[256];
    cr_assert_eq(tk_tc_connect(&c, node.port), 0);
    cr_assert_eq(tk_tc_line(&c, line, sizeof(line), 5000), 12 + 64);
    cr_assert_eq(strncmp(line, "TICKETING/1 ", 12), 0);
    cr_assert(tk_auth_is_hex64(line + 12, 64));
    tk_tc_close(&c);
}

/* ---------------------------------------------------------------- */
/* The request x key-state matrix (SPEC 6), over real sockets. */

TestSuite(matrix, .init = setup, .fini = teardown, .timeout = 60);

Test(matrix, acquire_wait0_free_grants)
{
    struct tk_tc *c = client();
    tk_tc_send(c, "A 1 seat-1 alice 10000 0\n");
    uint64_t t = expect_grant(c, 1);
    tk_tc_send(c, "Q 2 seat-1\n");
    char want[128];
    snprintf(want, sizeof(want), "Q 2 alice %" PRIu64 " 0", t);
    expect_line(c, want);
    drop(c);
}

Test(matrix, acquire_wait0_held_no_waiters_busy)
{
    struct tk_tc *c = client();
    tk_tc_send(c, "A 1 k alice 10000 0\n");
    expect_grant(c, 1);
    tk_tc_send(c, "A 2 k bob 10000 0\n");
    expect_line(c, "B 2");
    drop(c);
}

Test(matrix, acquire_wait0_held_with_waiters_busy)
{
    struct tk_tc *c = client(), *d = client();
    tk_tc_send(c, "A 1 k alice 10000 0\n");
    expect_grant(c, 1);
    tk_tc_send(d, "A 1 k bob 10000 5000\n");
    await_waiters(c, "k", 1);
    tk_tc_send(c, "A 2 k carol 10000 0\n");
    expect_line(c, "B 2");
    drop(c);
    drop(d);
}

Test(matrix, acquire_wait_free_grants)
{
    struct tk_tc *c = client();
    tk_tc_send(c, "A 7 k alice 10000 3000\n");
    expect_grant(c, 7);
    drop(c);
}

Test(matrix, acquire_wait_held_enqueues_then_granted_on_release)
{
    struct tk_tc *c = client(), *d = client();
    tk_tc_send(c, "A 1 k alice 10000 0\n");
    uint64_t t1 = expect_grant(c, 1);
    tk_tc_send(d, "A 5 k bob 10000 5000\n");
    await_waiters(c, "k", 1);
    expect_silence(d, 100);
    tk_tc_send(c, "R 2 k alice %" PRIu64 "\n", t1);
    expect_line(c, "R 2");
    uint64_t t2 = expect_grant(d, 5);
    cr_assert_gt(t2, t1);
    drop(c);
    drop(d);
}

Test(matrix, acquire_same_owner_again_queues_not_reentrant)
{
    struct tk_tc *c = client();
    tk_tc_send(c, "A 1 k alice 10000 0\n");
    expect_grant(c, 1);
    tk_tc_send(c, "A 2 k alice 10000 300\n");
    expect_line(c, "T 2");
    drop(c);
}

Test(matrix, release_exact_on_free_not_held)
{
    struct tk_tc *c = client();
    tk_tc_send(c, "R 1 k alice 12345\n");
    expect_line(c, "N 1");
    drop(c);
}

Test(matrix, release_exact_no_waiters_frees_key)
{
    struct tk_tc *c = client();
    tk_tc_send(c, "A 1 k alice 10000 0\n");
    uint64_t t = expect_grant(c, 1);
    tk_tc_send(c, "R 2 k alice %" PRIu64 "\n", t);
    expect_line(c, "R 2");
    tk_tc_send(c, "Q 3 k\n");
    expect_line(c, "Q 3 - 0 0");
    drop(c);
}

Test(matrix, release_exact_with_waiters_hands_off)
{
    struct tk_tc *c = client(), *d = client(), *e = client();
    tk_tc_send(c, "A 1 k alice 10000 0\n");
    uint64_t t1 = expect_grant(c, 1);
    tk_tc_send(d, "A 1 k bob 10000 5000\n");
    await_waiters(c, "k", 1);
    tk_tc_send(e, "A 1 k carol 10000 5000\n");
    await_waiters(c, "k", 2);
    tk_tc_send(c, "R 2 k alice %" PRIu64 "\n", t1);
    expect_line(c, "R 2");
    uint64_t t2 = expect_grant(d, 1);
    cr_assert_gt(t2, t1);
    expect_silence(e, 100);
    char want[128];
    snprintf(want, sizeof(want), "Q 3 bob %" PRIu64 " 1", t2);
    tk_tc_send(c, "Q 3 k\n");
    expect_line(c, want);
    drop(c);
    drop(d);
    drop(e);
}

Test(matrix, release_wrong_owner_or_token_not_held)
{
    struct tk_tc *c = client();
    tk_tc_send(c, "A 1 k alice 10000 0\n");
    uint64_t t = expect_grant(c, 1);
    tk_tc_send(c, "R 2 k bob %" PRIu64 "\n", t);
    expect_line(c, "N 2");
    tk_tc_send(c, "R 3 k alice %" PRIu64 "\n", t + 1);
    expect_line(c, "N 3");
    tk_tc_send(c, "R 4 other alice %" PRIu64 "\n", t);
    expect_line(c, "N 4");
    tk_tc_send(c, "Q 5 k\n");
    char want[128];
    snprintf(want, sizeof(want), "Q 5 alice %" PRIu64 " 0", t);
    expect_line(c, want);
    drop(c);
}

Test(matrix, release_wrong_with_waiters_not_held)
{
    struct tk_tc *c = client(), *d = client();
    tk_tc_send(c, "A 1 k alice 10000 0\n");
    uint64_t t = expect_grant(c, 1);
    tk_tc_send(d, "A 1 k bob 10000 5000\n");
    await_waiters(c, "k", 1);
    tk_tc_send(c, "R 2 k bob %" PRIu64 "\n", t);
    expect_line(c, "N 2");
    expect_silence(d, 100);
    drop(c);
    drop(d);
}

Test(matrix, query_free_held_and_waiters)
{
    struct tk_tc *c = client(), *d = client();
    tk_tc_send(c, "Q 1 k\n");
    expect_line(c, "Q 1 - 0 0");
    tk_tc_send(c, "A 2 k alice 10000 0\n");
    uint64_t t = expect_grant(c, 2);
    char want[128];
    snprintf(want, sizeof(want), "Q 3 alice %" PRIu64 " 0", t);
    tk_tc_send(c, "Q 3 k\n");
    expect_line(c, want);
    tk_tc_send(d, "A 1 k bob 10000 5000\n");
    await_waiters(c, "k", 1);
    drop(c);
    drop(d);
}

Test(matrix, in_flight_release_and_query_pipelined_behind_grant)
{
    /* A, R and Q pipelined in one write: the R and Q arrive while the
     * grant is in flight, wait for it, and are evaluated after it. */
    struct tk_tc *c = client();
    tk_tc_send(c, "A 1 k alice 10000 0\nQ 2 k\n");
    uint64_t t = expect_grant(c, 1);
    char want[128];
    snprintf(want, sizeof(want), "Q 2 alice %" PRIu64 " 0", t);
    expect_line(c, want);
    /* The release is in flight when the Q and the wait-0 acquire arrive:
     * the Q waits for it; the acquire finds the key IN-FLIGHT and is busy
     * at once (SPEC 6), so its answer comes first. */
    tk_tc_send(c, "R 3 k alice %" PRIu64 "\nQ 4 k\nA 5 k bob 10000 0\n", t);
    expect_line(c, "B 5");
    expect_line(c, "R 3");
    expect_line(c, "Q 4 - 0 0");
    drop(c);
}

Test(matrix, in_flight_acquire_wait0_busy)
{
    /* Two acquires of a free key in one write: the second finds the first's
     * grant in flight; with wait 0 it is busy, never granted too. */
    struct tk_tc *c = client();
    tk_tc_send(c, "A 1 k alice 10000 0\nA 2 k bob 10000 0\n");
    char a[128], b[128];
    cr_assert(tk_tc_line(c, a, sizeof(a), 5000) > 0);
    cr_assert(tk_tc_line(c, b, sizeof(b), 5000) > 0);
    bool first_granted = !strncmp(a, "G 1 ", 4) || !strncmp(b, "G 1 ", 4);
    bool second_busy = !strcmp(a, "B 2") || !strcmp(b, "B 2");
    cr_assert(first_granted && second_busy, "got '%s' and '%s'", a, b);
    drop(c);
}

Test(matrix, in_flight_acquire_wait_enqueues)
{
    struct tk_tc *c = client();
    tk_tc_send(c, "A 1 k alice 10000 0\nA 2 k bob 10000 5000\n");
    uint64_t t = expect_grant(c, 1);
    expect_silence(c, 100);
    tk_tc_send(c, "R 3 k alice %" PRIu64 "\n", t);
    expect_line(c, "R 3");
    uint64_t t2 = expect_grant(c, 2);
    cr_assert_gt(t2, t);
    drop(c);
}

Test(matrix, wait_timeout_answers_T_without_granting)
{
    struct tk_tc *c = client(), *d = client();
    tk_tc_send(c, "A 1 k alice 10000 0\n");
    uint64_t t = expect_grant(c, 1);
    uint64_t t0 = tk_test_ms();
    tk_tc_send(d, "A 1 k bob 10000 400\n");
    expect_line(d, "T 1");
    cr_assert_geq(tk_test_ms() - t0, 390);
    char want[128];
    snprintf(want, sizeof(want), "Q 2 alice %" PRIu64 " 0", t);
    tk_tc_send(c, "Q 2 k\n");
    expect_line(c, want);
    drop(c);
    drop(d);
}

Test(matrix, lease_expiry_frees_key)
{
    struct tk_tc *c = client();
    tk_tc_send(c, "A 1 k alice 1000 0\n");
    uint64_t t = expect_grant(c, 1);
    usleep(1300 * 1000);
    tk_tc_send(c, "Q 2 k\n");
    expect_line(c, "Q 2 - 0 0");
    tk_tc_send(c, "R 3 k alice %" PRIu64 "\n", t);
    expect_line(c, "N 3");
    drop(c);
}

Test(matrix, lease_expiry_hands_key_to_next_waiter)
{
    struct tk_tc *c = client(), *d = client();
    tk_tc_send(c, "A 1 k alice 1000 0\n");
    uint64_t t1 = expect_grant(c, 1);
    uint64_t t0 = tk_test_ms();
    tk_tc_send(d, "A 1 k bob 10000 5000\n");
    uint64_t t2 = expect_grant(d, 1);
    cr_assert_gt(t2, t1);
    cr_assert_geq(tk_test_ms() - t0, 800, "granted before the lease ran out");
    tk_tc_send(c, "R 2 k alice %" PRIu64 "\n", t1);
    expect_line(c, "N 2");
    drop(c);
    drop(d);
}

Test(matrix, waiter_disconnect_removes_it_silently)
{
    struct tk_tc *c = client(), *d = client(), *e = client();
    tk_tc_send(c, "A 1 k alice 10000 0\n");
    uint64_t t = expect_grant(c, 1);
    tk_tc_send(d, "A 1 k bob 10000 5000\n");
    await_waiters(c, "k", 1);
    tk_tc_send(e, "A 1 k carol 10000 5000\n");
    await_waiters(c, "k", 2);
    drop(d);
    await_waiters(c, "k", 1);
    tk_tc_send(c, "R 2 k alice %" PRIu64 "\n", t);
    expect_line(c, "R 2");
    expect_grant(e, 1);
    drop(c);
    drop(e);
}

Test(matrix, holder_disconnect_keeps_the_lock)
{
    struct tk_tc *c = client(), *d = client();
    tk_tc_send(c, "A 1 k alice 10000 0\n");
    uint64_t t = expect_grant(c, 1);
    drop(c);
    usleep(100000);
    char want[128];
    snprintf(want, sizeof(want), "Q 1 alice %" PRIu64 " 0", t);
    tk_tc_send(d, "Q 1 k\n");
    expect_line(d, want);
    /* The owner releases over another connection. */
    tk_tc_send(d, "R 2 k alice %" PRIu64 "\n", t);
    expect_line(d, "R 2");
    drop(d);
}

Test(matrix, tokens_strictly_increase_across_keys_and_handoffs)
{
    struct tk_tc *c = client();
    uint64_t last = 0;
    for (int i = 1; i <= 200; i++) {
        tk_tc_send(c, "A %d key-%d o 10000 0\n", i, i % 7);
        uint64_t t = expect_grant(c, (uint64_t)i);
        cr_assert_gt(t, last);
        last = t;
        tk_tc_send(c, "R %d key-%d o %" PRIu64 "\n", 1000 + i, i % 7, t);
        char want[32];
        snprintf(want, sizeof(want), "R %d", 1000 + i);
        expect_line(c, want);
    }
    drop(c);
}

/* ---------------------------------------------------------------- */
/* FIFO and handoff */

TestSuite(fifo, .init = setup, .fini = teardown, .timeout = 120);

Test(fifo, hundred_waiters_granted_in_arrival_order)
{
    enum { N = 100 };
    struct tk_tc *holder = client();
    struct tk_tc *w[N];
    tk_tc_send(holder, "A 1 hot alice 30000 0\n");
    uint64_t tok = expect_grant(holder, 1);
    for (int i = 0; i < N; i++) {
        w[i] = client();
        tk_tc_send(w[i], "A %d hot owner-%d 30000 60000\n", 100 + i, i);
        await_waiters(holder, "hot", (unsigned)i + 1);
    }
    tk_tc_send(holder, "R 2 hot alice %" PRIu64 "\n", tok);
    expect_line(holder, "R 2");
    uint64_t last = tok;
    for (int i = 0; i < N; i++) {
        uint64_t t = expect_grant(w[i], (uint64_t)(100 + i));
        cr_assert_gt(t, last);
        last = t;
        if (i + 1 < N)
            expect_silence(w[i + 1], 1);
        tk_tc_send(w[i], "R 9 hot owner-%d %" PRIu64 "\n", i, t);
        expect_line(w[i], "R 9");
    }
    tk_tc_send(holder, "Q 3 hot\n");
    expect_line(holder, "Q 3 - 0 0");
    for (int i = 0; i < N; i++)
        drop(w[i]);
    drop(holder);
}

Test(fifo, no_cut_in_during_handoff)
{
    /* While a waiter is queued, a stream of wait-0 acquires from another
     * client races the release: none may win, the waiter gets the key. */
    struct tk_tc *h = client(), *w = client(), *x = client();
    for (int round = 0; round < 30; round++) {
        tk_tc_send(h, "A 1 k holder 10000 0\n");
        uint64_t t = expect_grant(h, 1);
        tk_tc_send(w, "A 2 k waiter 10000 5000\n");
        await_waiters(h, "k", 1);
        char burst[4096];
        size_t off = 0;
        for (int i = 0; i < 50; i++)
            off += (size_t)snprintf(burst + off, sizeof(burst) - off, "A %d k thief 10000 0\n",
                                    100 + i);
        tk_tc_send(h, "R 3 k holder %" PRIu64 "\n", t);
        tk_tc_send_raw(x, burst, off);
        expect_line(h, "R 3");
        uint64_t t2 = expect_grant(w, 2);
        for (int i = 0; i < 50; i++) {
            char line[64];
            cr_assert(tk_tc_line(x, line, sizeof(line), 5000) > 0);
            cr_assert_eq(line[0], 'B', "a wait-0 acquire cut in: '%s'", line);
        }
        tk_tc_send(w, "R 4 k waiter %" PRIu64 "\n", t2);
        expect_line(w, "R 4");
    }
    drop(h);
    drop(w);
    drop(x);
}

/* ---------------------------------------------------------------- */
/* Load shapes */

TestSuite(load, .init = setup, .fini = teardown, .timeout = 180);

Test(load, ten_thousand_pipelined_requests_on_one_connection)
{
    enum { N = 10000 };
    struct tk_tc *c = client();
    static char big[N * 48];
    size_t off = 0;
    for (int i = 0; i < N; i++)
        off += (size_t)snprintf(big + off, sizeof(big) - off, "A %d pk-%d o 30000 0\n", i + 1, i);
    cr_assert_eq(tk_tc_send_raw(c, big, off), 0);
    static uint64_t tokens[N + 1];
    for (int i = 0; i < N; i++) {
        char line[128];
        cr_assert(tk_tc_line(c, line, sizeof(line), 10000) > 0, "response %d missing", i);
        uint64_t id, t;
        cr_assert_eq(sscanf(line, "G %" SCNu64 " %" SCNu64, &id, &t), 2, "got '%s'", line);
        cr_assert(id >= 1 && id <= N && tokens[id] == 0, "duplicate or bad id in '%s'", line);
        tokens[id] = t;
    }
    off = 0;
    for (int i = 0; i < N; i++)
        off += (size_t)snprintf(big + off, sizeof(big) - off, "R %d pk-%d o %" PRIu64 "\n",
                                N + i + 1, i, tokens[i + 1]);
    cr_assert_eq(tk_tc_send_raw(c, big, off), 0);
    static bool seen[N];
    for (int i = 0; i < N; i++) {
        char line[128];
        cr_assert(tk_tc_line(c, line, sizeof(line), 10000) > 0, "release %d missing", i);
        int id;
        cr_assert_eq(sscanf(line, "R %d", &id), 1, "got '%s'", line);
        cr_assert(id > N && id <= 2 * N && !seen[id - N - 1]);
        seen[id - N - 1] = true;
    }
    drop(c);
}

Test(load, thousand_concurrent_connections)
{
    enum { N = 1000 };
    static struct tk_tc conns[N];
    for (int i = 0; i < N; i++)
        cr_assert_eq(tk_tc_open(&conns[i], node.port, TK_TEST_SECRET), 0, "conn %d", i);
    for (int i = 0; i < N; i++)
        tk_tc_send(&conns[i], "A 1 conn-%d o 30000 0\n", i % 100);
    int granted = 0, busy = 0;
    for (int i = 0; i < N; i++) {
        char line[128];
        cr_assert(tk_tc_line(&conns[i], line, sizeof(line), 10000) > 0, "conn %d silent", i);
        if (line[0] == 'G')
            granted++;
        else if (!strcmp(line, "B 1"))
            busy++;
        else
            cr_assert_fail("conn %d got '%s'", i, line);
    }
    /* 100 distinct keys: exactly one holder each. */
    cr_assert_eq(granted, 100);
    cr_assert_eq(busy, N - 100);
    /* Counters are published every 50 ms: poll /status until they show. */
    char body[8192];
    bool seen = false;
    for (int i = 0; i < 100 && !seen; i++) {
        cr_assert_eq(tk_http_get(node.port + 2, "/status", body, sizeof(body)), 200);
        seen = strstr(body, "\"held\":100,") && strstr(body, "\"connections\":1000,");
        usleep(20000);
    }
    cr_assert(seen, "status: %s", body);
    for (int i = 0; i < N; i++)
        tk_tc_close(&conns[i]);
}

/* ---------------------------------------------------------------- */
/* Bad input (SPEC 5, 14): a definite answer, and the server keeps serving. */

TestSuite(bad_input, .init = setup, .fini = teardown, .timeout = 60);

static void check_still_serving(void)
{
    struct tk_tc *c = client();
    tk_tc_send(c, "A 1 alive o 1000 0\n");
    expect_grant(c, 1);
    drop(c);
}

Test(bad_input, field_errors_answered_per_request_connection_stays)
{
    struct tk_tc *c = client();
    static const struct {
        const char *line, *want;
    } cases[] = {
        {"A 1 k o 999 0\n", "E 1 lease"},
        {"A 2 k o 250001 0\n", "E 2 lease"},
        {"A 3 k o 1000 250001\n", "E 3 wait"},
        {"A 4 k o 01000 0\n", "E 4 lease"},
        {"R 5 k o 0\n", "E 5 token"},
        {"R 6 k o 18446744073709551616\n", "E 6 token"},
        {"X 7 k\n", "E 7 command"},
        {"A 8 k o 1000\n", "E 8 syntax"},
        {"Q 9  k\n", "E 9 syntax"},
        {"A 10 k\x7f o 1000 0\n", "E 10 key"},
        {"A 11 k o\x01 1000 0\n", "E 11 owner"},
        {"A 12 k o 1000 -1\n", "E 12 wait"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        tk_tc_send(c, "%s", cases[i].line);
        expect_line(c, cases[i].want);
    }
    tk_tc_send(c, "P 99\n");
    expect_line(c, "P 99");
    drop(c);
    check_still_serving();
}

Test(bad_input, key_and_owner_length_limits)
{
    struct tk_tc *c = client();
    char key[300], owner[80];
    memset(key, 'k', 251);
    key[251] = 0;
    memset(owner, 'o', 65);
    owner[65] = 0;
    tk_tc_send(c, "A 1 %s o 1000 0\n", key);
    expect_line(c, "E 1 key");
    key[250] = 0;
    tk_tc_send(c, "A 2 %s o 1000 0\n", key);
    expect_grant(c, 2);
    tk_tc_send(c, "A 3 k2 %s 1000 0\n", owner);
    expect_line(c, "E 3 owner");
    owner[64] = 0;
    tk_tc_send(c, "A 4 k2 %s 1000 0\n", owner);
    expect_grant(c, 4);
    drop(c);
}

Test(bad_input, missing_id_is_fatal_syntax)
{
    struct tk_tc *c = client();
    tk_tc_send(c, "A x k o 1000 0\n");
    expect_line(c, "E - syntax");
    cr_assert(tk_tc_closed(c, 3000));
    drop(c);
    c = client();
    tk_tc_send(c, "\n");
    expect_line(c, "E - syntax");
    cr_assert(tk_tc_closed(c, 3000));
    drop(c);
    check_still_serving();
}

Test(bad_input, line_over_1024_bytes_is_toolong)
{
    struct tk_tc *c = client();
    char big[1100];
    memset(big, 'a', sizeof(big));
    tk_tc_send_raw(c, big, sizeof(big));
    expect_line(c, "E - toolong");
    cr_assert(tk_tc_closed(c, 3000));
    drop(c);
    /* Exactly 1024 bytes with the newline is still a line. */
    c = client();
    char line[1025];
    int n = snprintf(line, sizeof(line), "P 1 ");
    memset(line + n, 'x', (size_t)(1023 - n));
    line[1023] = '\n';
    tk_tc_send_raw(c, line, 1024);
    expect_line(c, "E 1 syntax");
    drop(c);
    check_still_serving();
}

Test(bad_input, binary_garbage_does_not_crash)
{
    for (int round = 0; round < 20; round++) {
        struct tk_tc *c = client();
        unsigned char junk[700];
        for (size_t i = 0; i < sizeof(junk); i++)
            junk[i] = (unsigned char)((i * 131 + (size_t)round * 17) & 0xff);
        tk_tc_send_raw(c, junk, sizeof(junk));
        tk_tc_closed(c, 2000);
        drop(c);
    }
    check_still_serving();
}

/* Bounds: each test starts its own node with a small bound. */
TestSuite(bounds, .fini = teardown, .timeout = 60);

Test(bounds, waiters_per_key_bound_answers_busy)
{
    static const char *const args[] = {"--threads", "2", "--max-waiters-per-key", "2", NULL};
    start_with(args);
    struct tk_tc *c = client();
    tk_tc_send(c, "A 1 k a 10000 0\n");
    expect_grant(c, 1);
    tk_tc_send(c, "A 2 k b 10000 5000\nA 3 k c 10000 5000\nA 4 k d 10000 5000\n");
    expect_line(c, "B 4");
    await_waiters(c, "k", 2);
    drop(c);
}

Test(bounds, key_table_bound_answers_busy)
{
    static const char *const args[] = {"--threads", "1", "--max-keys", "3", NULL};
    start_with(args);
    struct tk_tc *c = client();
    for (int i = 1; i <= 3; i++) {
        tk_tc_send(c, "A %d key-%d o 10000 0\n", i, i);
        expect_grant(c, (uint64_t)i);
    }
    tk_tc_send(c, "A 4 key-4 o 10000 5000\n");
    expect_line(c, "B 4");
    /* Nothing already granted was lost. */
    tk_tc_send(c, "Q 5 key-1\n");
    char line[128];
    cr_assert(tk_tc_line(c, line, sizeof(line), 5000) > 0);
    cr_assert_eq(strncmp(line, "Q 5 o ", 6), 0, "got '%s'", line);
    drop(c);
}

Test(bounds, connection_bound_answers_overload)
{
    static const char *const args[] = {"--threads", "2", "--max-connections", "4", NULL};
    start_with(args);
    usleep(200000); /* let the start-up probe connection's close be processed */
    struct tk_tc *held[4];
    for (int i = 0; i < 4; i++)
        held[i] = client();
    struct tk_tc extra;
    char line[128];
    cr_assert_eq(tk_tc_connect(&extra, node.port), 0);
    cr_assert(tk_tc_line(&extra, line, sizeof(line), 5000) >= 0);
    cr_assert_str_eq(line, "E - overload");
    cr_assert(tk_tc_closed(&extra, 3000));
    tk_tc_close(&extra);
    drop(held[0]);
    usleep(200000);
    struct tk_tc *again = client();
    tk_tc_send(again, "P 1\n");
    expect_line(again, "P 1");
    drop(again);
    for (int i = 1; i < 4; i++)
        drop(held[i]);
}

Test(bounds, inflight_bound_stops_reading_without_dropping)
{
    static const char *const args[] = {"--threads", "2", "--max-inflight", "2", NULL};
    start_with(args);
    struct tk_tc *h = client(), *c = client();
    tk_tc_send(h, "A 1 k holder 10000 0\n");
    uint64_t t = expect_grant(h, 1);
    /* Ten queued acquires then a ping: only two may be in flight, so the
     * ping is not even read until some are answered. */
    for (int i = 0; i < 10; i++)
        tk_tc_send(c, "A %d k w%d 10000 20000\n", 10 + i, i);
    tk_tc_send(c, "P 99\n");
    expect_silence(c, 300);
    tk_tc_send(h, "R 2 k holder %" PRIu64 "\n", t);
    expect_line(h, "R 2");
    /* Each grant is released in turn; every request gets its answer. */
    for (int i = 0; i < 10; i++) {
        uint64_t tok = expect_grant(c, (uint64_t)(10 + i));
        if (i == 8) {
            expect_line(c, "P 99");
        }
        tk_tc_send(h, "R 3 k w%d %" PRIu64 "\n", i, tok);
        expect_line(h, "R 3");
    }
    drop(h);
    drop(c);
}

/* ---------------------------------------------------------------- */
/* Admin and lifecycle */

TestSuite(admin, .init = setup, .fini = teardown, .timeout = 60);

Test(admin, health_ready_status_metrics)
{
    char body[1 << 16];
    cr_assert_eq(tk_http_get(node.port + 2, "/healthz", body, sizeof(body)), 200);
    cr_assert_eq(tk_http_get(node.port + 2, "/readyz", body, sizeof(body)), 200);
    struct tk_tc *c = client();
    tk_tc_send(c, "A 1 k o 10000 0\n");
    expect_grant(c, 1);
    usleep(150000); /* counters are published every 50 ms */
    cr_assert_eq(tk_http_get(node.port + 2, "/status", body, sizeof(body)), 200);
    cr_assert(strstr(body, "\"role\":\"leader\"") != NULL, "%s", body);
    cr_assert(strstr(body, "\"held\":1") != NULL, "%s", body);
    cr_assert(strstr(body, "\"commit_index\":") != NULL, "%s", body);
    cr_assert_eq(tk_http_get(node.port + 2, "/metrics", body, sizeof(body)), 200);
    cr_assert(strstr(body, "ticketing_requests_total{type=\"acquire\"} 1\n") != NULL, "%s", body);
    cr_assert(strstr(body, "ticketing_grants_total 1\n") != NULL, "%s", body);
    cr_assert(strstr(body, "ticketing_raft_commit_seconds_count 1\n") != NULL, "%s", body);
    cr_assert(strstr(body, "ticketing_connections_max 10000\n") != NULL, "%s", body);
    cr_assert_eq(tk_http_get(node.port + 2, "/nope", body, sizeof(body)), 404);
    drop(c);
}

Test(admin, sigterm_with_clients_connected_exits_cleanly)
{
    struct tk_tc *c = client(), *d = client();
    tk_tc_send(c, "A 1 k o 10000 0\n");
    expect_grant(c, 1);
    tk_tc_send(d, "A 1 k p 10000 60000\n");
    await_waiters(c, "k", 1);
    int st = tk_node_stop(&node, SIGTERM, 10000);
    cr_assert(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
    cr_assert(tk_tc_closed(c, 2000));
    cr_assert(tk_tc_closed(d, 2000));
    drop(c);
    drop(d);
}
