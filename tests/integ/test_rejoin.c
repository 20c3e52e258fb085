/* Integration tests of a restarted member rejoining its cluster (SPEC 10,
 * SPEC 12 /readyz): a process that restarts at the same addresses comes
 * back under a fresh NodeId, the leader adds it as a learner, catches it
 * up, promotes it and removes its old identity; the fencing domain, held
 * locks and their tokens survive; and a cluster that lost the state of a
 * majority neither rejoins nor bootstraps a new domain.
 *
 * Method: each test starts its own cluster of real ticketingd processes on
 * 127.0.0.1 with tuned timers (--heartbeat-ms 50 --election-ms 400),
 * restarts members with tk_cluster_restart (same ports, --peers, secrets
 * and flags: only the process is new), and judges from outside: /readyz,
 * the leader's /status "members" list, "domain", "serving", and the line
 * protocol (G, Q). The rolling-restart tests keep client threads running
 * acquire/release loops and check safety from the history the clients
 * observed. On a failure the teardown prints every node's log tail and
 * keeps the node directories.
 */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/support/tk_cluster_cr.h"

static struct tk_cluster cl;
static const char *const fast[] = {"--heartbeat-ms", "50", "--election-ms", "400", NULL};
static bool passed;

static const char zero_domain[] = "00000000000000000000000000000000";

static void setup(void)
{
    passed = false;
}

static void teardown(void)
{
    cl.keep_logs = !passed;
    tk_cluster_stop(&cl);
}

TestSuite(rejoin, .init = setup, .fini = teardown, .timeout = 180);

/* ---------------------------------------------------------------- */
/* Helpers. */

static void kill9(int i)
{
    cr_assert_gt(cl.node[i].pid, 0, "node %d is not running", i);
    kill(cl.node[i].pid, SIGKILL);
    waitpid(cl.node[i].pid, NULL, 0);
    cl.node[i].pid = -1;
}

static void domain_of(int i, char out[33])
{
    cr_assert(tk_cluster_domain(&cl, i, out), "node %d: no domain in /status", i);
}

/* Restarts member i, returning its fresh NodeId (which must differ from
 * old_id). */
static uint64_t restart(int i, uint64_t old_id)
{
    cr_assert_eq(tk_cluster_restart(&cl, i), 0, "node %d did not come back", i);
    uint64_t id = tk_cluster_node_id(&cl, i);
    cr_assert_neq(id, 0, "node %d: no node_id", i);
    cr_assert_neq(id, old_id, "node %d kept its NodeId %016" PRIx64 " across a restart", i, id);
    return id;
}

/* Waits for node i's /readyz; returns the milliseconds it took. Then
 * checks that the node's own /status agrees with what 200 promises: it is
 * ready, its configuration lists it as a voter and no other identity at
 * its peer address; and that "membership" says "voter" (allowing for the
 * note being refreshed periodically: up to 1 s). */
static int await_ready(int i, int timeout_ms)
{
    static char body[1 << 16];
    int ms = tk_cluster_wait_ready(&cl, i, timeout_ms);
    if (ms < 0) {
        body[0] = 0;
        tk_cluster_status(&cl, i, body, sizeof(body));
        cr_assert_fail("node %d: /readyz not 200 within %d ms; its /status: %s", i, timeout_ms,
                       body);
    }
    uint64_t self = tk_cluster_node_id(&cl, i);
    char addr[64];
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", cl.node[i].port + 1);
    struct tk_member m[TK_CLUSTER_MEMBERS_MAX];
    int n = tk_cluster_members(&cl, i, m, TK_CLUSTER_MEMBERS_MAX, NULL);
    cr_assert_gt(n, 0, "node %d: /readyz 200 but no members in its /status", i);
    bool voter = false;
    for (int k = 0; k < n && k < TK_CLUSTER_MEMBERS_MAX; k++) {
        if (m[k].id == self)
            voter = m[k].voter;
        else
            cr_assert_str_neq(m[k].peer_addr, addr,
                              "node %d: /readyz 200 while its configuration still lists "
                              "%016" PRIx64 " at its address %s",
                              i, m[k].id, addr);
    }
    cr_assert(voter,
              "node %d: /readyz 200 but %016" PRIx64
              " is not a voter in its own "
              "configuration",
              i, self);
    char mem[32] = "";
    uint64_t end = tk_test_ms() + 1000;
    for (;;) {
        cr_assert_eq(tk_cluster_status(&cl, i, body, sizeof(body)), 200);
        cr_assert(strstr(body, "\"ready\":true"), "node %d: /readyz 200, /status: %s", i, body);
        tk_json_str(body, "membership", mem, sizeof(mem));
        if (!strcmp(mem, "voter") || tk_test_ms() >= end)
            break;
        usleep(10000);
    }
    cr_assert_str_eq(mem, "voter", "node %d: /readyz 200 but membership '%s' 1 s later: %s", i, mem,
                     body);
    return ms;
}

static bool has_id(const struct tk_member *m, int n, uint64_t id)
{
    for (int k = 0; k < n; k++)
        if (m[k].id == id)
            return true;
    return false;
}

/* Polls the serving leader's members list until it holds exactly `n`
 * members, all voters, with every NodeId of want[] (n of them) and none of
 * gone[] (ngone). Fails with the last list seen. */
static void await_members(int n,
                          const uint64_t *want,
                          const uint64_t *gone,
                          int ngone,
                          int timeout_ms)
{
    struct tk_member m[TK_CLUSTER_MEMBERS_MAX];
    int count = -1, voters = 0;
    char seen[2048] = "";
    uint64_t end = tk_test_ms() + (uint64_t)timeout_ms;
    do {
        int l = tk_cluster_leader(&cl, 1000, 0);
        if (l < 0)
            continue;
        count = tk_cluster_members(&cl, l, m, TK_CLUSTER_MEMBERS_MAX, &voters);
        bool ok = count == n && voters == n;
        for (int k = 0; ok && k < n; k++)
            ok = has_id(m, count, want[k]);
        for (int k = 0; ok && k < ngone; k++)
            ok = !has_id(m, count, gone[k]);
        if (ok)
            return;
        size_t off = (size_t)snprintf(seen, sizeof(seen), "leader %d:", l);
        for (int k = 0; k < count && k < TK_CLUSTER_MEMBERS_MAX && off < sizeof(seen); k++)
            off += (size_t)snprintf(seen + off, sizeof(seen) - off,
                                    " {%016" PRIx64 " %s %s match %" PRIu64 " lag %" PRIu64 "}",
                                    m[k].id, m[k].voter ? "voter" : "learner", m[k].peer_addr,
                                    m[k].match_index, m[k].lag);
        usleep(50000);
    } while (tk_test_ms() < end);
    char wants[256] = "";
    size_t off = 0;
    for (int k = 0; k < n && off < sizeof(wants); k++)
        off += (size_t)snprintf(wants + off, sizeof(wants) - off, " %016" PRIx64, want[k]);
    cr_assert_fail(
        "members never became %d voters {%s } without the replaced ids; "
        "last seen (%d members, %d voters): %s",
        n, wants, count, voters, seen);
}

/* Acquires `key` (free, wait 0) from whoever serves among the nodes not in
 * skip, retrying redirects and closed connections until deadline_ms (an
 * absolute tk_test_ms time). Returns the token, or fails. */
static uint64_t acquire_by(const char *key, unsigned skip, uint64_t deadline_ms)
{
    char last[320] = "(no leader)";
    uint64_t id = 100;
    while (tk_test_ms() < deadline_ms) {
        int l = tk_cluster_leader(&cl, (int)(deadline_ms - tk_test_ms()), skip);
        if (l < 0)
            break;
        struct tk_tc c;
        if (tk_tc_open(&c, cl.node[l].port, TK_TEST_SECRET) != 0) {
            snprintf(last, sizeof(last), "handshake with node %d failed", l);
            usleep(20000);
            continue;
        }
        id++;
        tk_tc_send(&c, "A %" PRIu64 " %s fresh 30000 0\n", id, key);
        char line[256];
        int wait = (int)(deadline_ms > tk_test_ms() ? deadline_ms - tk_test_ms() : 0);
        int r = tk_tc_line(&c, line, sizeof(line), wait);
        tk_tc_close(&c);
        uint64_t gid, token;
        if (r >= 0 && sscanf(line, "G %" SCNu64 " %" SCNu64, &gid, &token) == 2 && gid == id)
            return token;
        snprintf(last, sizeof(last), "node %d answered '%s'", l,
                 r >= 0    ? line
                 : r == -1 ? "(timeout)"
                           : "(closed)");
        usleep(20000);
    }
    cr_assert_fail("no grant of %s in time: %s", key, last);
    return 0;
}

/* Q on the serving leader (nodes in skip not asked): `key` is held by
 * owner with token. */
static void expect_held(const char *key, const char *owner, uint64_t token, unsigned skip)
{
    int l = tk_cluster_leader(&cl, 5000, skip);
    cr_assert_geq(l, 0, "no leader for Q");
    struct tk_tc *q = cr_open_node(&cl, l);
    char line[256], want[256];
    tk_tc_send(q, "Q 7 %s\n", key);
    cr_assert(tk_tc_line(q, line, sizeof(line), 10000) >= 0, "no answer to Q");
    snprintf(want, sizeof(want), "Q 7 %s %" PRIu64 " 0", owner, token);
    cr_assert_str_eq(line, want, "the held lock changed");
    cr_drop(q);
}

static void expect_domain_everywhere(const char *dom, unsigned skip)
{
    for (int i = 0; i < cl.n; i++) {
        if ((skip & (1u << i)) || cl.node[i].pid <= 0)
            continue;
        char d[33];
        domain_of(i, d);
        cr_assert_str_eq(d, dom, "node %d is in another domain", i);
    }
}

/* ---------------------------------------------------------------- */
/* 1, 2: one member killed and restarted; then another member lost. */

Test(rejoin, kill9_follower_rejoins_as_voter_and_majority_survives_another_loss)
{
    cr_assert_eq(tk_cluster_start(&cl, 3, fast), 0, "cluster did not elect a leader");
    int l = tk_cluster_leader(&cl, 5000, 0);
    char dom[33];
    domain_of(l, dom);
    cr_assert_str_neq(dom, zero_domain);
    struct tk_tc *h = cr_open_node(&cl, l);
    tk_tc_send(h, "A 1 held holder 240000 0\n");
    uint64_t held = cr_grant(h, 1);

    int f = (l + 1) % 3;
    uint64_t old_id = tk_cluster_node_id(&cl, f);
    cr_assert_neq(old_id, 0);
    kill9(f);
    uint64_t t0 = tk_test_ms();
    uint64_t new_id = restart(f, old_id);
    int ready = await_ready(f, 30000);
    fprintf(stderr,
            "rejoin/kill9_follower: node %d %016" PRIx64 " -> %016" PRIx64
            ": /readyz 200 %d ms after restart (%" PRIu64 " ms after kill)\n",
            f, old_id, new_id, ready, tk_test_ms() - t0);

    uint64_t ids[3];
    for (int i = 0; i < 3; i++)
        ids[i] = tk_cluster_node_id(&cl, i);
    cr_assert_eq(ids[f], new_id);
    await_members(3, ids, &old_id, 1, 5000);
    expect_domain_everywhere(dom, 0);

    /* The other follower goes: the leader and the rejoined node are a
     * majority only if the rejoined node is a voter. */
    int cur = tk_cluster_leader(&cl, 5000, 0);
    cr_assert_geq(cur, 0);
    int o = 0;
    while (o == f || o == cur)
        o++;
    kill9(o);
    uint64_t t1 = tk_test_ms();
    uint64_t tok = acquire_by("after-second-loss", 1u << o, t1 + 5000);
    fprintf(stderr, "rejoin/kill9_follower: grant %" PRIu64 " ms after kill -9 of node %d\n",
            tk_test_ms() - t1, o);
    cr_assert_gt(tok, held);
    expect_held("held", "holder", held, 1u << o);
    expect_domain_everywhere(dom, 1u << o);
    cr_drop(h);
    passed = true;
}

Test(rejoin, kill9_leader_rejoins)
{
    cr_assert_eq(tk_cluster_start(&cl, 3, fast), 0, "cluster did not elect a leader");
    int l = tk_cluster_leader(&cl, 5000, 0);
    char dom[33];
    domain_of(l, dom);
    struct tk_tc *h = cr_open_node(&cl, l);
    tk_tc_send(h, "A 1 held holder 240000 0\n");
    uint64_t held = cr_grant(h, 1);
    cr_drop(h);

    uint64_t old_id = tk_cluster_node_id(&cl, l);
    cr_assert_neq(old_id, 0);
    kill9(l);
    uint64_t t0 = tk_test_ms();
    int nl = tk_cluster_leader(&cl, 10000, 1u << l);
    cr_assert_geq(nl, 0, "no new leader after kill -9 of the leader");
    fprintf(stderr, "rejoin/kill9_leader: node %d serves %" PRIu64 " ms after kill -9 of %d\n", nl,
            tk_test_ms() - t0, l);
    uint64_t t1 = tk_test_ms();
    uint64_t new_id = restart(l, old_id);
    int ready = await_ready(l, 30000);
    fprintf(stderr,
            "rejoin/kill9_leader: node %d %016" PRIx64 " -> %016" PRIx64
            ": /readyz 200 %d ms after restart (%" PRIu64 " ms)\n",
            l, old_id, new_id, ready, tk_test_ms() - t1);

    uint64_t ids[3];
    for (int i = 0; i < 3; i++)
        ids[i] = tk_cluster_node_id(&cl, i);
    cr_assert_eq(ids[l], new_id);
    await_members(3, ids, &old_id, 1, 5000);
    expect_domain_everywhere(dom, 0);

    /* Lose the node that is neither the leader now nor the rejoined one. */
    int cur = tk_cluster_leader(&cl, 5000, 0);
    cr_assert_geq(cur, 0);
    if (cur != nl)
        fprintf(stderr, "rejoin/kill9_leader: note: leadership moved from %d to %d\n", nl, cur);
    int o = 0;
    while (o == l || o == cur)
        o++;
    kill9(o);
    uint64_t t2 = tk_test_ms();
    uint64_t tok = acquire_by("after-second-loss", 1u << o, t2 + 5000);
    fprintf(stderr, "rejoin/kill9_leader: grant %" PRIu64 " ms after kill -9 of node %d\n",
            tk_test_ms() - t2, o);
    cr_assert_gt(tok, held);
    expect_held("held", "holder", held, 1u << o);
    expect_domain_everywhere(dom, 1u << o);
    passed = true;
}

/* ---------------------------------------------------------------- */
/* 3: rolling restart under load. */

#define LKEYS 4
#define LTHREADS 3
#define LLEASE_MS 4000u
#define EV_MAX 400000

struct event {
    int key;
    int thread;
    uint64_t token;
    uint64_t acq_sent_ms; /* when the client sent A */
    uint64_t granted_ms;  /* when it saw G */
    uint64_t rel_sent_ms; /* when it first sent R (UINT64_MAX: never) */
    uint64_t rel_done_ms; /* when it saw R or N (UINT64_MAX: never) */
    char rel_outcome;     /* 'R', 'N' or '?' */
};

static pthread_mutex_t hist_mu = PTHREAD_MUTEX_INITIALIZER;
static struct event *hist;
static int nhist;
static _Atomic int stop_load;

static int record_grant(int key, int thread, uint64_t token, uint64_t sent)
{
    pthread_mutex_lock(&hist_mu);
    int e = nhist < EV_MAX ? nhist++ : -1;
    if (e >= 0)
        hist[e] =
            (struct event){key, thread, token, sent, tk_test_ms(), UINT64_MAX, UINT64_MAX, '?'};
    pthread_mutex_unlock(&hist_mu);
    return e;
}

/* After an answer that is not ours (M, close, timeout): where to go next.
 * "M host:port" names the leader; "M -" or anything else: the next node. */
static uint32_t next_port(const char *line, int r, int *rr)
{
    if (r >= 0 && line[0] == 'M') {
        const char *colon = strrchr(line, ':');
        if (colon && colon[1] && colon[1] != '-')
            return (uint32_t)strtoul(colon + 1, NULL, 10);
    }
    *rr += 1;
    return cl.node[*rr % cl.n].port;
}

static void *load_main(void *arg)
{
    int me = (int)(intptr_t)arg;
    struct tk_tc *c = malloc(sizeof(*c));
    bool connected = false;
    int rr = me;
    uint32_t port = cl.node[rr % cl.n].port;
    uint64_t id = 1;
    int round = 0;
    int unreleased = -1; /* event whose release outcome is unknown */
    char line[256];
    while (!stop_load) {
        if (!connected) {
            if (tk_tc_open(c, port, TK_TEST_SECRET) != 0) {
                port = next_port("", -1, &rr);
                usleep(20000);
                continue;
            }
            connected = true;
        }
        int r;
        if (unreleased >= 0) {
            /* Retry a release whose answer was lost, like libticketing. */
            struct event *ev = &hist[unreleased];
            tk_tc_send(c, "R %" PRIu64 " rk-%d w%d %" PRIu64 "\n", id, ev->key, me, ev->token);
            r = tk_tc_line(c, line, sizeof(line), 8000);
            if (r >= 0 && (line[0] == 'R' || line[0] == 'N') && line[1] == ' ') {
                ev->rel_done_ms = tk_test_ms();
                ev->rel_outcome = line[0];
                unreleased = -1;
            } else {
                tk_tc_close(c);
                connected = false;
                port = next_port(line, r, &rr);
                usleep(10000);
            }
            id++;
            continue;
        }
        int key = (me + round++) % LKEYS;
        uint64_t sent = tk_test_ms();
        tk_tc_send(c, "A %" PRIu64 " rk-%d w%d %u 2000\n", id, key, me, LLEASE_MS);
        r = tk_tc_line(c, line, sizeof(line), 8000);
        uint64_t gid, token;
        if (r >= 0 && sscanf(line, "G %" SCNu64 " %" SCNu64, &gid, &token) == 2 && gid == id) {
            int e = record_grant(key, me, token, sent);
            id++;
            usleep(1000 + (unsigned)(me * 700)); /* the critical section */
            if (e >= 0)
                hist[e].rel_sent_ms = tk_test_ms();
            tk_tc_send(c, "R %" PRIu64 " rk-%d w%d %" PRIu64 "\n", id, key, me, token);
            r = tk_tc_line(c, line, sizeof(line), 8000);
            if (r >= 0 && (line[0] == 'R' || line[0] == 'N') && line[1] == ' ') {
                if (e >= 0) {
                    hist[e].rel_done_ms = tk_test_ms();
                    hist[e].rel_outcome = line[0];
                }
                id++;
                continue;
            }
            unreleased = e;
        } else if (r >= 0 && (line[0] == 'T' || line[0] == 'B') && line[1] == ' ') {
            id++;
            continue;
        }
        /* Redirected, closed, timed out or refused: the outcome of the
         * request is unknown; follow the leader on a new connection. */
        id++;
        tk_tc_close(c);
        connected = false;
        port = next_port(line, r, &rr);
        usleep(10000);
    }
    if (connected)
        tk_tc_close(c);
    free(c);
    return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Safety from what the clients observed:
 *  - per key, in token order, a grant was seen only after the previous
 *    holder sent its release or its lease (counted from its A) ran out;
 *  - per key, tokens increase strictly in the order the grants were seen;
 *  - per thread, tokens increase strictly (each A follows the last G);
 *  - tokens are unique, and all above the lock held since the start. */
static void check_history(uint64_t held)
{
    for (int k = 0; k < LKEYS; k++) {
        const struct event *prev = NULL;
        for (;;) {
            const struct event *next = NULL;
            for (int i = 0; i < nhist; i++)
                if (hist[i].key == k && (!prev || hist[i].token > prev->token) &&
                    (!next || hist[i].token < next->token))
                    next = &hist[i];
            if (!next)
                break;
            if (prev) {
                uint64_t end = prev->acq_sent_ms + LLEASE_MS;
                if (prev->rel_sent_ms < end)
                    end = prev->rel_sent_ms;
                cr_assert_geq(next->granted_ms, end,
                              "rk-%d: token %" PRIu64 " seen at %" PRIu64 " while token %" PRIu64
                              " (granted %" PRIu64 ", release sent %" PRIu64
                              ", outcome %c) was held",
                              k, next->token, next->granted_ms, prev->token, prev->granted_ms,
                              prev->rel_sent_ms, prev->rel_outcome);
                cr_assert_geq(next->granted_ms, prev->granted_ms,
                              "rk-%d: token %" PRIu64 " seen before the smaller %" PRIu64, k,
                              next->token, prev->token);
            }
            prev = next;
        }
    }
    uint64_t last[LTHREADS] = {0};
    for (int i = 0; i < nhist; i++) {
        cr_assert_gt(hist[i].token, held, "a load token below the held lock's");
        cr_assert_gt(hist[i].token, last[hist[i].thread], "thread %d: tokens did not increase",
                     hist[i].thread);
        last[hist[i].thread] = hist[i].token;
    }
    uint64_t *t = malloc(sizeof(uint64_t) * (size_t)(nhist + 1));
    cr_assert(t);
    for (int i = 0; i < nhist; i++)
        t[i] = hist[i].token;
    qsort(t, (size_t)nhist, sizeof(uint64_t), cmp_u64);
    for (int i = 1; i < nhist; i++)
        cr_assert_neq(t[i], t[i - 1], "token %" PRIu64 " issued twice", t[i]);
    free(t);
}

/* The longest time between consecutive grants (any key) that overlaps
 * [from, to]; the sorted grant times are in g[0..n). */
static uint64_t longest_gap(const uint64_t *g, int n, uint64_t from, uint64_t to)
{
    uint64_t gap = 0;
    for (int i = 0; i + 1 < n; i++)
        if (g[i + 1] > from && g[i] < to && g[i + 1] - g[i] > gap)
            gap = g[i + 1] - g[i];
    /* No grant after the step at all: count up to its end. */
    if (n == 0 || g[n - 1] < to) {
        uint64_t since = n && g[n - 1] > from ? g[n - 1] : from;
        if (to - since > gap)
            gap = to - since;
    }
    return gap;
}

static void rolling_restart_under_load(int n)
{
    cr_assert_eq(tk_cluster_start(&cl, n, fast), 0, "cluster did not elect a leader");
    int l = tk_cluster_leader(&cl, 5000, 0);
    char dom[33];
    domain_of(l, dom);
    struct tk_tc *h = cr_open_node(&cl, l);
    tk_tc_send(h, "A 1 long-held holder 240000 0\n");
    uint64_t held = cr_grant(h, 1);
    cr_drop(h);

    hist = calloc(EV_MAX, sizeof(*hist));
    cr_assert(hist);
    nhist = 0;
    stop_load = 0;
    pthread_t th[LTHREADS];
    for (int i = 0; i < LTHREADS; i++)
        pthread_create(&th[i], NULL, load_main, (void *)(intptr_t)i);
    usleep(500000);
    pthread_mutex_lock(&hist_mu);
    int warm = nhist;
    pthread_mutex_unlock(&hist_mu);
    cr_assert_gt(warm, 10, "no load before the restarts (%d grants)", warm);

    uint64_t old_ids[TK_CLUSTER_MAX], new_ids[TK_CLUSTER_MAX];
    uint64_t step_from[TK_CLUSTER_MAX], step_to[TK_CLUSTER_MAX];
    int stop_ms[TK_CLUSTER_MAX], ready_ms[TK_CLUSTER_MAX], was_leader[TK_CLUSTER_MAX];
    for (int i = 0; i < n; i++)
        old_ids[i] = tk_cluster_node_id(&cl, i);
    for (int i = 0; i < n; i++) {
        int cur = tk_cluster_leader(&cl, 5000, 0);
        was_leader[i] = cur == i;
        uint64_t id = tk_cluster_node_id(&cl, i);
        cr_assert_neq(id, 0);
        step_from[i] = tk_test_ms();
        int st = tk_node_stop(&cl.node[i], SIGTERM, 15000);
        stop_ms[i] = (int)(tk_test_ms() - step_from[i]);
        cr_assert(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0,
                  "node %d: SIGTERM exit status %d", i, st);
        if (was_leader[i]) {
            /* It handed leadership over before exiting: another node serves
             * at once, not after an election timeout (400 ms here). */
            uint64_t exited = tk_test_ms();
            int nl = tk_cluster_leader(&cl, 5000, 1u << i);
            int after = (int)(tk_test_ms() - exited);
            cr_assert_geq(nl, 0, "no leader after SIGTERM of the leader %d", i);
            fprintf(stderr,
                    "rejoin/rolling_%d: step %d: node %d serves %d ms after the "
                    "leader's exit (%d ms after SIGTERM)\n",
                    n, i + 1, nl, after, (int)(tk_test_ms() - step_from[i]));
            cr_assert_lt(after, 300,
                         "node %d served only %d ms after the leader exited: no "
                         "leadership transfer on SIGTERM?",
                         nl, after);
        }
        uint64_t t0 = tk_test_ms();
        new_ids[i] = restart(i, id);
        await_ready(i, 30000);
        ready_ms[i] = (int)(tk_test_ms() - t0);
        step_to[i] = tk_test_ms();
        fprintf(stderr,
                "rejoin/rolling_%d: step %d (node %d%s): exit %d ms after SIGTERM, "
                "/readyz %d ms after restart\n",
                n, i + 1, i, was_leader[i] ? ", the leader" : "", stop_ms[i], ready_ms[i]);
    }
    /* The load goes on after the last step. */
    uint64_t after = tk_test_ms(), end = after + 10000;
    int more = 0;
    while (tk_test_ms() < end) {
        pthread_mutex_lock(&hist_mu);
        more = 0;
        for (int k = 0; k < nhist; k++)
            more += hist[k].granted_ms > after;
        pthread_mutex_unlock(&hist_mu);
        if (more >= 10)
            break;
        usleep(50000);
    }
    stop_load = 1;
    for (int i = 0; i < LTHREADS; i++)
        pthread_join(th[i], NULL);

    uint64_t *g = malloc(sizeof(uint64_t) * (size_t)(nhist + 1));
    cr_assert(g);
    for (int k = 0; k < nhist; k++)
        g[k] = hist[k].granted_ms;
    qsort(g, (size_t)nhist, sizeof(uint64_t), cmp_u64);
    for (int i = 0; i < n; i++)
        fprintf(stderr,
                "rejoin/rolling_%d: step %d (node %d%s): longest gap between grants "
                "%" PRIu64 " ms; /readyz %d ms after restart\n",
                n, i + 1, i, was_leader[i] ? ", the leader" : "",
                longest_gap(g, nhist, step_from[i], step_to[i]), ready_ms[i]);
    int unknown = 0;
    for (int k = 0; k < nhist; k++)
        unknown += hist[k].rel_outcome == '?';
    fprintf(stderr,
            "rejoin/rolling_%d: %d grants observed (%d with a release outcome never "
            "seen), %d after the last step\n",
            n, nhist, unknown, more);
    free(g);
    cr_assert_geq(more, 10, "the load stalled after the rolling restart (%d grants)", more);
    check_history(held);

    await_members(n, new_ids, old_ids, n, 10000);
    expect_held("long-held", "holder", held, 0);
    expect_domain_everywhere(dom, 0);
    free(hist);
    hist = NULL;
    passed = true;
}

Test(rejoin, rolling_restart_3_under_load)
{
    rolling_restart_under_load(3);
}

Test(rejoin, rolling_restart_5_under_load)
{
    rolling_restart_under_load(5);
}

/* ---------------------------------------------------------------- */
/* 4: a majority lost its state. */

Test(rejoin, two_of_three_lost_no_grant_no_bootstrap)
{
    cr_assert_eq(tk_cluster_start(&cl, 3, fast), 0, "cluster did not elect a leader");
    int l = tk_cluster_leader(&cl, 5000, 0);
    char dom[33];
    domain_of(l, dom);
    static char body[1 << 17];
    uint64_t grants_before = 0;
    cr_assert_eq(tk_http_get(cl.node[l].port + 2, "/metrics", body, sizeof(body)), 200);
    cr_assert(tk_metric_u64(body, "ticketing_grants_total", &grants_before));
    int f1 = (l + 1) % 3, f2 = (l + 2) % 3;
    uint64_t id1 = tk_cluster_node_id(&cl, f1), id2 = tk_cluster_node_id(&cl, f2);
    kill9(f1);
    kill9(f2);
    restart(f1, id1);
    restart(f2, id2);
    /* The old leader has no majority: it steps down within about an
     * election timeout (check-quorum). An acquire sent now never commits. */
    struct tk_tc *early = cr_open_node(&cl, l);
    tk_tc_send(early, "A 1 lost-early x 30000 5000\n");
    uint64_t down_by = tk_test_ms() + 3000;
    while (tk_cluster_leader(&cl, 0, 0) >= 0 && tk_test_ms() < down_by)
        usleep(20000);
    cr_assert_lt(tk_cluster_leader(&cl, 0, 0), 0, "a node still serves 3 s after the loss");

    uint64_t end = tk_test_ms() + 6000, next_try = 0;
    int round = 0, attempts = 0;
    char note[3][256] = {"", "", ""};
    while (tk_test_ms() < end) {
        for (int i = 0; i < 3; i++) {
            cr_assert_eq(tk_cluster_status(&cl, i, body, sizeof(body)), 200, "node %d /status", i);
            cr_assert_null(strstr(body, "\"serving\":true"), "node %d serves: %s", i, body);
            char d[40] = "", mem[32] = "";
            cr_assert(tk_json_str(body, "domain", d, sizeof(d)));
            tk_json_str(body, "membership", mem, sizeof(mem));
            tk_json_str(body, "membership_note", note[i], sizeof(note[i]));
            if (i == l) {
                cr_assert_str_eq(d, dom, "the surviving member changed domain");
            } else {
                /* Fresh (waiting to join), or a learner of the old domain
                 * that the old leader added before it stepped down: its
                 * addition can never commit. Never a voter, never a new
                 * domain. */
                cr_assert(!strcmp(d, zero_domain) || !strcmp(d, dom),
                          "restarted node %d bootstrapped a new domain %s", i, d);
                cr_assert(!strcmp(d, zero_domain) || !strcmp(mem, "learner"),
                          "restarted node %d reports domain %s, membership '%s'", i, d, mem);
            }
        }
        if (tk_test_ms() >= next_try) {
            next_try = tk_test_ms() + 1000;
            round++;
            for (int i = 0; i < 3; i++) {
                struct tk_tc c;
                if (tk_tc_open(&c, cl.node[i].port, TK_TEST_SECRET) != 0)
                    continue;
                attempts++;
                tk_tc_send(&c, "A 1 lost-%d-%d x 30000 300\n", i, round);
                char line[256];
                int r = tk_tc_line(&c, line, sizeof(line), 500);
                tk_tc_close(&c);
                cr_assert(r < 0 || line[0] != 'G', "node %d granted: '%s'", i, line);
            }
        }
        usleep(50000);
    }
    char line[256];
    int r;
    while ((r = tk_tc_line(early, line, sizeof(line), 0)) >= 0)
        cr_assert_neq(line[0], 'G', "the old leader granted without a majority: '%s'", line);
    cr_drop(early);
    for (int i = 0; i < 3; i++) {
        uint64_t g = 0;
        cr_assert_eq(tk_http_get(cl.node[i].port + 2, "/metrics", body, sizeof(body)), 200);
        if (tk_metric_u64(body, "ticketing_grants_total", &g))
            cr_assert_eq(g, i == l ? grants_before : 0, "node %d applied grants", i);
        if (i != l)
            fprintf(stderr, "rejoin/two_of_three_lost: node %d says: %s\n", i, note[i]);
    }
    fprintf(stderr, "rejoin/two_of_three_lost: %d acquire attempts over 6 s, none granted\n",
            attempts);
    passed = true;
}

Test(rejoin, two_of_three_lost_force_new_domain_recovers_after_the_hold)
{
    cr_assert_eq(tk_cluster_start(&cl, 3, fast), 0, "cluster did not elect a leader");
    int l = tk_cluster_leader(&cl, 5000, 0);
    char dom[33];
    domain_of(l, dom);
    struct tk_tc *h = cr_open_node(&cl, l);
    tk_tc_send(h, "A 1 old-lock holder 240000 0\n");
    uint64_t old_token = cr_grant(h, 1);
    cr_drop(h);
    int f1 = (l + 1) % 3, f2 = (l + 2) % 3;
    kill9(f1);
    kill9(f2);
    /* The operator acts once the outage shows (the survivor steps down
     * within an election timeout) and restarts the lost members, one with
     * the flag and a short hold (the default is the longest lease, 250 s). */
    uint64_t down_by = tk_test_ms() + 3000;
    while (tk_cluster_leader(&cl, 0, 0) >= 0 && tk_test_ms() < down_by)
        usleep(20000);
    cr_assert_lt(tk_cluster_leader(&cl, 0, 0), 0, "the survivor still serves");
    static const char *const forced[] = {"--force-new-domain", "--new-domain-hold-ms", "3000",
                                         NULL};
    uint64_t t0 = tk_test_ms();
    cr_assert_eq(tk_cluster_restart_with(&cl, f1, forced), 0);
    cr_assert_eq(tk_cluster_restart(&cl, f2), 0);
    /* A new domain forms among the two fresh nodes. */
    char d1[33] = "", d2[33] = "";
    uint64_t end = t0 + 10000;
    while (tk_test_ms() < end) {
        if (tk_cluster_domain(&cl, f1, d1) && tk_cluster_domain(&cl, f2, d2) &&
            strcmp(d1, zero_domain) && !strcmp(d1, d2))
            break;
        usleep(20000);
    }
    cr_assert_str_neq(d1, zero_domain, "no new domain within 10 s");
    cr_assert_str_eq(d1, d2, "the fresh nodes disagree on the domain");
    cr_assert_str_neq(d1, dom, "the old domain came back");
    uint64_t formed = tk_test_ms();
    /* During the hold nothing serves and nothing is granted. */
    while (tk_test_ms() < formed + 2500) {
        cr_assert_lt(tk_cluster_leader(&cl, 0, 1u << l), 0,
                     "a forced domain serves during the hold");
        usleep(50000);
    }
    uint64_t tok = acquire_by("new-lock", 1u << l, t0 + 20000);
    uint64_t served = tk_test_ms();
    fprintf(stderr,
            "rejoin/force_new_domain: new domain %s formed %" PRIu64
            " ms after the "
            "restarts, first grant after %" PRIu64 " ms (hold 3000 ms)\n",
            d1, formed - t0, served - t0);
    cr_assert_geq(served - formed, 2800, "granted before the hold ran out");
    cr_assert_gt(tok, old_token, "the new domain's tokens must be larger");
    /* The survivor still holds the old domain; restarted, it joins the new
     * one and is promoted to the third voter. */
    domain_of(l, d2);
    cr_assert_str_eq(d2, dom, "the survivor left its domain by itself");
    kill9(l);
    cr_assert_eq(tk_cluster_restart(&cl, l), 0);
    cr_assert_geq(await_ready(l, 30000), 0);
    uint64_t ids[3];
    for (int i = 0; i < 3; i++)
        ids[i] = tk_cluster_node_id(&cl, i);
    await_members(3, ids, NULL, 0, 5000);
    expect_domain_everywhere(d1, 0);
    passed = true;
}

/* ---------------------------------------------------------------- */
/* 5: the leader's memory across many replacements. */

Test(rejoin, repeated_restarts_keep_leader_rss_flat)
{
    cr_assert_eq(tk_cluster_start(&cl, 3, fast), 0, "cluster did not elect a leader");
    int first = tk_cluster_leader(&cl, 5000, 0);
    char dom[33];
    domain_of(first, dom);
    long rss5 = -1, rss20 = -1;
    int last = -1, moved = 0, worst_ready = 0;
    for (int round = 1; round <= 20; round++) {
        int cur = tk_cluster_leader(&cl, 5000, 0);
        cr_assert_geq(cur, 0, "round %d: no leader", round);
        moved += cur != first;
        /* A follower, and never the first leader (whose RSS we watch). */
        int f = -1;
        for (int k = 1; k <= 3 && f < 0; k++) {
            int cand = (last + k + 3) % 3;
            if (cand != cur && cand != first)
                f = cand;
        }
        cr_assert_geq(f, 0);
        last = f;
        uint64_t old_id = tk_cluster_node_id(&cl, f);
        cr_assert_neq(old_id, 0);
        kill9(f);
        restart(f, old_id);
        int ready = await_ready(f, 30000);
        if (ready > worst_ready)
            worst_ready = ready;
        uint64_t ids[3];
        for (int i = 0; i < 3; i++)
            ids[i] = tk_cluster_node_id(&cl, i);
        await_members(3, ids, &old_id, 1, 5000);
        if (round == 5)
            rss5 = tk_cluster_rss_kib(&cl, first);
        if (round == 20)
            rss20 = tk_cluster_rss_kib(&cl, first);
    }
    int cur = tk_cluster_leader(&cl, 5000, 0);
    fprintf(stderr,
            "rejoin/rss: node %d (leader at start%s): VmRSS %ld KiB after restart 5, "
            "%ld KiB after restart 20 (growth %ld KiB); slowest /readyz %d ms; "
            "rounds led by another node: %d\n",
            first, cur == first ? ", and now" : ", not now", rss5, rss20, rss20 - rss5, worst_ready,
            moved);
    cr_assert_gt(rss5, 0);
    cr_assert_gt(rss20, 0);
    cr_assert_lt(rss20 - rss5, 8 * 1024, "leader RSS grew by %ld KiB over 15 restarts",
                 rss20 - rss5);
    expect_domain_everywhere(dom, 0);
    passed = true;
}
