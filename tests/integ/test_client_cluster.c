/* Goal: against a real 3-node cluster, libticketing follows the leader:
 * an M from a follower routes the next requests to the leader (even one the
 * client was not configured with), and after the leader dies requests go to
 * the new one within the wait budget.
 *
 * Method: three ticketingd processes on 127.0.0.1 with --peers, fast Raft
 * timers (heartbeat 50 ms, election 600 ms) to keep the test short; the
 * leader is found through each node's admin /status. If this build of the
 * server cannot form a cluster, the tests are skipped with that message.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client/ticketing.h"
#include "tests/support/tk_test.h"

#define NODES 3

static struct tk_node nodes[NODES];
static char addrs[NODES][64];

static void teardown(void)
{
    for (int i = 0; i < NODES; i++) {
        if (nodes[i].pid > 0)
            tk_node_stop(&nodes[i], SIGKILL, 5000);
        tk_node_cleanup(&nodes[i]);
    }
}

/* The index of the node whose /status says it leads and serves; -1. */
static int find_leader(void)
{
    static char body[1 << 16];
    for (int i = 0; i < NODES; i++) {
        if (nodes[i].pid <= 0)
            continue;
        if (tk_http_get(nodes[i].port + 2, "/status", body, sizeof body) == 200 &&
            strstr(body, "\"role\":\"leader\"") != NULL &&
            strstr(body, "\"serving\":false") == NULL)
            return i;
    }
    return -1;
}

static int await_leader(int timeout_ms)
{
    uint64_t end = tk_test_ms() + (uint64_t)timeout_ms;
    while (tk_test_ms() < end) {
        int l = find_leader();
        if (l >= 0)
            return l;
        usleep(50000);
    }
    return -1;
}

static void setup(void)
{
    uint32_t ports[NODES];
    char peers[256] = "", adv[NODES][64];
    for (int i = 0; i < NODES; i++) {
        do { /* three distinct triples of free ports */
            ports[i] = tk_free_port3();
        } while (i > 0 && (ports[i] == ports[i - 1] || (i > 1 && ports[i] == ports[i - 2])));
        char one[40];
        snprintf(one, sizeof one, "%s127.0.0.1:%u", i ? "," : "", ports[i] + 1);
        strcat(peers, one);
        snprintf(adv[i], sizeof adv[i], "127.0.0.1:%u", ports[i]);
        snprintf(addrs[i], sizeof addrs[i], "127.0.0.1:%u", ports[i]);
    }
    for (int i = 0; i < NODES; i++) {
        cr_assert_eq(tk_node_prepare(&nodes[i], ports[i]), 0);
        const char *args[] = {"--threads",
                              "1",
                              "--peers",
                              peers,
                              "--peer-secret-file",
                              nodes[i].peer_secret_file,
                              "--advertise",
                              adv[i],
                              "--heartbeat-ms",
                              "50",
                              "--election-ms",
                              "600",
                              NULL};
        cr_assert_eq(tk_node_spawn(&nodes[i], args), 0);
    }
    for (int i = 0; i < NODES; i++)
        if (tk_node_wait_port(&nodes[i], 10000) != 0)
            cr_skip_test("this ticketingd does not run with --peers yet");
    if (await_leader(20000) < 0)
        cr_skip_test("this ticketingd's cluster elected no serving leader within 20 s");
}

static struct tk_client *client_for(const char *list)
{
    struct tk_client_config cfg;
    struct tk_client *c = NULL;
    tk_client_config_init(&cfg);
    cfg.addrs = list;
    cfg.secret_file = nodes[0].secret_file;
    cr_assert_eq(tk_client_create(&cfg, &c), TK_CLIENT_ENONE);
    return c;
}

#define expect_outcome(got, want)                                                    \
    cr_assert_eq((got), (want), "outcome %s, wanted %s", tk_client_outcome_str(got), \
                 tk_client_outcome_str(want))

TestSuite(cluster, .init = setup, .fini = teardown, .timeout = 120);

Test(cluster, m_from_a_follower_routes_requests_to_an_unconfigured_leader)
{
    int leader = find_leader();
    cr_assert_geq(leader, 0);
    int follower = (leader + 1) % NODES;
    struct tk_client *c = client_for(addrs[follower]);
    struct tk_client_result r;
    expect_outcome(tk_client_acquire(c, "routed", 30000, 10000, &r), TK_CLIENT_ACQUIRED);
    struct tk_client_stats st;
    tk_client_stats(c, &st);
    cr_assert_str_eq(st.leader_hint, addrs[leader]);
    cr_assert_geq(st.moved, 1);
    cr_assert_eq(st.connections, 3, "two to the follower, one to the hinted leader");
    cr_assert_eq(st.indeterminate, 0, "nothing may be written to a node that answers M");
    expect_outcome(tk_client_release(c, "routed", r.token, &r), TK_CLIENT_RELEASED);
    tk_client_destroy(c);
}

Test(cluster, requests_follow_the_new_leader_after_failover)
{
    char list[200];
    snprintf(list, sizeof list, "%s,%s,%s", addrs[0], addrs[1], addrs[2]);
    struct tk_client *c = client_for(list);
    struct tk_client_result r, q;
    expect_outcome(tk_client_acquire(c, "before", 30000, 10000, &r), TK_CLIENT_ACQUIRED);
    int old = find_leader();
    cr_assert_geq(old, 0);
    uint64_t killed = tk_test_ms();
    tk_node_stop(&nodes[old], SIGKILL, 5000);
    /* Let the client see the close first: a request written to a socket
     * whose peer just died is INDETERMINATE, rightly. */
    struct tk_client_stats st;
    for (int i = 0; i < 300; i++) {
        tk_client_stats(c, &st);
        if (st.connections_ready == 0)
            break;
        usleep(10000);
    }
    expect_outcome(tk_client_acquire(c, "after", 30000, 20000, &r), TK_CLIENT_ACQUIRED);
    fprintf(stderr, "failover: acquired on the new leader %llu ms after the kill\n",
            (unsigned long long)(tk_test_ms() - killed));
    int now = await_leader(5000);
    cr_assert_geq(now, 0);
    cr_assert_neq(now, old);
    expect_outcome(tk_client_query(c, "after", &q), TK_CLIENT_ANSWERED);
    cr_assert(q.held);
    cr_assert_eq(q.token, r.token);
    tk_client_destroy(c);
}
