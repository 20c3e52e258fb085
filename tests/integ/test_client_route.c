/* Goal: libticketing routes by key across groups (docs/client.md, "Groups
 * and the ring") on real processes. Two groups of three ticketingd each,
 * given a ring that leaves some slots to no group; one client object
 * seeded with the first group's addresses only:
 * - a key of the other group is granted there after one W (the ring
 *   fetched, a second connection set made), later ones go there directly;
 * - a key of a slot no range covers ends WRONG_GROUP at once, with the
 *   ring's version;
 * - an acquire queued behind another owner in the other group is
 *   cancelled through the handle the client gave;
 * - 300 pipelined acquires over both groups, then their releases, all
 *   succeed, and the servers agree on every holder;
 * - ticketctl, given the first group only, answers for the other's key;
 * - destroy with nothing left behind (the ASan build checks the memory).
 * The conformance scenarios (tests/conformance) check the same rules for
 * every client, moves included. */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "client/ticketing.h"
#include "tests/support/tk_cluster_cr.h"

#define TICKETCTL TK_BIN_DIR "/ticketctl"
#define B_LAST 16000 /* 16001-16383: owned by no group */
#define MANY 300

static struct tk_cluster A, B;
static const char *const EXTRA_A[] = {"--group", "sales-a", NULL};
static const char *const EXTRA_B[] = {"--group", "sales-b", NULL};

static void teardown(void)
{
    tk_cluster_stop(&A);
    tk_cluster_stop(&B);
}

TestSuite(client_route, .fini = teardown, .timeout = 240);

static void give_ring(void)
{
    char a[256], b[256], path[512], out[4096];
    tk_cluster_client_addrs(&A, a, sizeof(a));
    tk_cluster_client_addrs(&B, b, sizeof(b));
    snprintf(path, sizeof(path), "%s/ring.txt", A.node[0].dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fprintf(f, "version 1\n0-8191=sales-a@%s\n8192-%u=sales-b@%s\n", a, B_LAST, b);
    fclose(f);
    for (int g = 0; g < 2; g++) {
        const struct tk_cluster *c = g ? &B : &A;
        int rc = tk_run_cmd(
            out, sizeof(out),
            "%s ring apply %s --group %s --peers %s --peer-secret-file %s --timeout 20s", TICKETCTL,
            path, g ? "sales-b" : "sales-a", c->peers, c->node[0].peer_secret_file);
        cr_assert_eq(rc, 0, "ring apply: exit %d\n%s", rc, out);
    }
}

/* The i-th key (from 0) whose slot is in [lo, hi]. */
static void key_in(uint32_t lo, uint32_t hi, unsigned i, char *buf, size_t cap)
{
    for (uint32_t n = 0;; n++) {
        snprintf(buf, cap, "route-%u", n);
        uint32_t s = tk_client_slot(buf, strlen(buf));
        if (s >= lo && s <= hi && i-- == 0)
            return;
    }
}

struct box {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned done, acquired, released;
    enum tk_client_outcome last;
    uint64_t tokens[MANY];
};

static void on_done(void *arg, const struct tk_client_result *r)
{
    struct box *b = arg;
    pthread_mutex_lock(&b->mu);
    b->last = r->outcome;
    if (r->outcome == TK_CLIENT_ACQUIRED) {
        unsigned i = (unsigned)strtoul(r->key + 1, NULL, 10); /* "k<i>-..." */
        b->tokens[i] = r->token;
        b->acquired++;
    }
    b->released += r->outcome == TK_CLIENT_RELEASED;
    b->done++;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

static void wait_done(struct box *b, unsigned n)
{
    pthread_mutex_lock(&b->mu);
    while (b->done < n)
        pthread_cond_wait(&b->cv, &b->mu);
    pthread_mutex_unlock(&b->mu);
}

/* The server's holder of key at group c: its token (0: free). */
static uint64_t holder(struct tk_cluster *c, const char *key)
{
    int l = tk_cluster_leader(c, 10000, 0);
    cr_assert_geq(l, 0);
    struct tk_tc *t = cr_open_node(c, l);
    char line[600], owner[80];
    uint64_t token = 0;
    unsigned waiters;
    tk_tc_send(t, "Q 1 %s\n", key);
    cr_assert_gt(tk_tc_line(t, line, sizeof(line), 10000), 0);
    cr_assert_eq(sscanf(line, "Q 1 %79s %" SCNu64 " %u", owner, &token, &waiters), 3, "'%s'", line);
    cr_drop(t);
    return token;
}

Test(client_route, one_client_routes_by_key_across_two_groups)
{
    cr_assert_eq(tk_cluster_start(&A, 3, EXTRA_A), 0, "group sales-a");
    cr_assert_eq(tk_cluster_start(&B, 3, EXTRA_B), 0, "group sales-b");
    give_ring();

    char a[256];
    tk_cluster_client_addrs(&A, a, sizeof(a));
    struct tk_client_config cfg;
    tk_client_config_init(&cfg);
    cfg.addrs = a;
    cfg.secret_file = A.node[0].secret_file;
    cfg.owner = "route-test";
    struct tk_client *c;
    cr_assert_eq(tk_client_create(&cfg, &c), TK_CLIENT_ENONE);
    struct tk_client_result r;
    struct tk_client_stats st;

    /* A key of sales-b: one W, the ring, a second connection set. */
    char kb[64], kb2[64], ka[64], knone[64];
    key_in(8192, B_LAST, 0, kb, sizeof(kb));
    key_in(8192, B_LAST, 1, kb2, sizeof(kb2));
    key_in(0, 8191, 0, ka, sizeof(ka));
    key_in(B_LAST + 1, 16383, 0, knone, sizeof(knone));
    cr_assert_eq(tk_client_acquire(c, kb, 30000, 1000, &r), TK_CLIENT_ACQUIRED, "%s",
                 tk_client_outcome_str(r.outcome));
    uint64_t tb = r.token;
    cr_assert_eq(holder(&B, kb), tb, "sales-b holds it");
    tk_client_stats(c, &st);
    cr_assert_eq(st.ring_version, 1);
    cr_assert_eq(st.rerouted, 1);
    cr_assert_eq(st.groups, 2);
    /* Later keys of either group go straight to their group. */
    cr_assert_eq(tk_client_acquire(c, kb2, 30000, 0, &r), TK_CLIENT_ACQUIRED);
    cr_assert_eq(tk_client_release(c, kb2, r.token, &r), TK_CLIENT_RELEASED);
    cr_assert_eq(tk_client_acquire(c, ka, 30000, 0, &r), TK_CLIENT_ACQUIRED);
    cr_assert_eq(holder(&A, ka), r.token, "sales-a holds it");
    cr_assert_eq(tk_client_release(c, ka, r.token, &r), TK_CLIENT_RELEASED);
    cr_assert_eq(tk_client_query(c, kb, &r), TK_CLIENT_ANSWERED);
    cr_assert(r.held && r.token == tb);
    tk_client_stats(c, &st);
    cr_assert_eq(st.rerouted, 1, "no second W");

    /* A slot no group owns: WRONG_GROUP at once, whatever the wait. */
    uint64_t t0 = tk_test_ms();
    cr_assert_eq(tk_client_acquire(c, knone, 30000, 5000, &r), TK_CLIENT_WRONG_GROUP);
    cr_assert_lt(tk_test_ms() - t0, 2000, "not after the wait");
    cr_assert_eq(r.slot, tk_client_slot(knone, strlen(knone)));
    cr_assert_eq(r.ring_version, 1);
    cr_assert_eq(tk_client_release(c, knone, 9, &r), TK_CLIENT_WRONG_GROUP);
    cr_assert_eq(r.token, 9);

    /* Cancel an acquire queued at sales-b behind another owner. */
    int lb = tk_cluster_leader(&B, 10000, 0);
    struct tk_tc *other = cr_open_node(&B, lb);
    char line[200];
    tk_tc_send(other, "A 1 %s someone-else 30000 0\n", kb2);
    cr_assert_gt(tk_tc_line(other, line, sizeof(line), 10000), 0);
    cr_assert_eq(line[0], 'G', "'%s'", line);
    struct box bx = {.done = 0};
    pthread_mutex_init(&bx.mu, NULL);
    pthread_cond_init(&bx.cv, NULL);
    uint64_t h;
    cr_assert_eq(tk_client_acquire_async(c, kb2, 30000, 20000, on_done, &bx, &h), 0);
    usleep(300 * 1000);
    cr_assert_eq(tk_client_cancel(c, h), TK_CLIENT_ENONE);
    wait_done(&bx, 1);
    cr_assert_eq(bx.last, TK_CLIENT_CANCELLED);
    cr_assert_eq(tk_client_cancel(c, h), TK_CLIENT_ENOTFOUND, "the handle is spent");
    cr_drop(other);

    /* Pipelined over both groups (keys "k<i>" of slots some group owns). */
    char keys[MANY][16];
    unsigned in_b = 0;
    bx.done = 0;
    for (unsigned i = 0; i < MANY; i++) {
        snprintf(keys[i], sizeof(keys[i]), "k%u", i);
        uint32_t s = tk_client_slot(keys[i], strlen(keys[i]));
        if (s > B_LAST)
            keys[i][0] = '\0'; /* owned by nobody: left out */
        else
            in_b += s >= 8192;
    }
    unsigned sent = 0;
    for (unsigned i = 0; i < MANY; i++)
        if (keys[i][0] != '\0') {
            cr_assert_eq(tk_client_acquire_async(c, keys[i], 30000, 1000, on_done, &bx, NULL), 0);
            sent++;
        }
    wait_done(&bx, sent);
    cr_assert_eq(bx.acquired, sent, "every pipelined acquire granted");
    cr_assert_gt(in_b, 0);
    cr_assert_lt(in_b, sent);
    for (unsigned i = 0; i < MANY; i += 37)
        if (keys[i][0] != '\0') {
            uint32_t s = tk_client_slot(keys[i], strlen(keys[i]));
            cr_assert_eq(holder(s >= 8192 ? &B : &A, keys[i]), bx.tokens[i], "%s", keys[i]);
        }
    bx.done = 0;
    for (unsigned i = 0; i < MANY; i++)
        if (keys[i][0] != '\0')
            cr_assert_eq(tk_client_release_async(c, keys[i], bx.tokens[i], on_done, &bx), 0);
    wait_done(&bx, sent);
    cr_assert_eq(bx.released, sent, "every release answered R");
    /* A request counts until the end of the round its callback ran in;
     * the cancelled acquire stays on its wire until sales-b answers it
     * (its grant would be released at once). */
    for (uint64_t end = tk_test_ms() + 2000; tk_test_ms() < end; usleep(10 * 1000)) {
        tk_client_stats(c, &st);
        if (st.requests_in_progress <= 1 && st.releases_queued == 0)
            break;
    }
    cr_assert_eq(st.requests_in_progress, 1, "%" PRIu64, st.requests_in_progress);
    cr_assert_eq(st.releases_queued, 0);

    /* ticketctl routes the same way: --addr names sales-a only. */
    char out[4096], want[64];
    int rc = tk_run_cmd(out, sizeof(out), "%s --addr %s --secret-file %s query %s --json",
                        TICKETCTL, a, A.node[0].secret_file, kb);
    cr_assert_eq(rc, 0, "ticketctl query: exit %d\n%s", rc, out);
    snprintf(want, sizeof(want), "%" PRIu64, tb);
    cr_assert(strstr(out, want) && strstr(out, "route-test"), "%s", out);
    rc = tk_run_cmd(out, sizeof(out), "%s --addr %s --secret-file %s query %s", TICKETCTL, a,
                    A.node[0].secret_file, knone);
    cr_assert_eq(rc, 84, "a slot no group serves: exit %d\n%s", rc, out);
    cr_assert(strstr(out, "no group serves the key's slot"), "%s", out);

    cr_assert_eq(tk_client_release(c, kb, tb, &r), TK_CLIENT_RELEASED);
    tk_client_destroy(c);
    pthread_mutex_destroy(&bx.mu);
    pthread_cond_destroy(&bx.cv);
}
