/* Goal: the Raft thread never waits for DNS (net/peer.c). Peers addressed
 * by name are looked up by resolver threads at every (re)dial, so a slow
 * cluster DNS (a Kubernetes pod name that resolves only once the pod is
 * ready) cannot hold back heartbeats past the election timeout.
 *
 * Method: three real ticketingd processes on 127.0.0.1 whose --peers and
 * --advertise use the name "localhost" (not an IP literal, so every dial
 * goes through the resolver), started with TK_TEST_RESOLVE_DELAY_MS=3000,
 * the test hook that makes each lookup take 3 s, and an election timeout
 * of 1 s. The cluster must elect a leader. Then a follower is killed: the
 * two others redial it about once a second, each redial a 3 s lookup, for
 * 10 s. Throughout, the leader must stay leader in the same term (no node's
 * term moves) and keep committing: lock requests on it, each a Raft round
 * trip through the surviving follower, must each answer well under the 3 s
 * a lookup on the Raft thread would stall it (on the old code, which looked
 * names up on the Raft thread, the leader stalls 3 s per redial, loses its
 * quorum and the term climbs). Finally the killed member restarts and
 * rejoins the same term.
 */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/support/tk_cluster_cr.h"

#define DELAY_MS "3000"
#define OBSERVE_MS 10000
#define ROUND_TRIP_MS_MAX 1500 /* a lookup on the Raft thread stalls it 3000 */

static struct tk_cluster cl;
static char adv[3][64];

static void teardown(void)
{
    tk_cluster_stop(&cl);
}

TestSuite(peer_dns, .fini = teardown, .timeout = 240);

static int spawn(int i)
{
    const char *args[] = {"--peers",
                          cl.peers,
                          "--peer-secret-file",
                          cl.node[i].peer_secret_file,
                          "--advertise",
                          adv[i],
                          "--threads",
                          "2",
                          "--heartbeat-ms",
                          "100",
                          "--election-ms",
                          "1000",
                          NULL};
    return tk_node_spawn(&cl.node[i], args);
}

/* Three members addressed as localhost:port, with slow lookups. */
static void start_named_cluster(void)
{
    memset(&cl, 0, sizeof(cl));
    cl.n = 3;
    uint32_t ports[3];
    size_t off = 0;
    for (int i = 0; i < 3; i++) {
        for (;;) {
            ports[i] = tk_free_port3();
            bool clash = ports[i] == 0;
            for (int j = 0; j < i; j++)
                clash |= ports[i] + 3 > ports[j] && ports[j] + 3 > ports[i];
            if (!clash)
                break;
        }
        off += (size_t)snprintf(cl.peers + off, sizeof(cl.peers) - off, "%slocalhost:%u",
                                i ? "," : "", ports[i] + 1);
        snprintf(adv[i], sizeof(adv[i]), "localhost:%u", ports[i]);
    }
    /* Inherited by the servers (execv keeps the environment). */
    cr_assert_eq(setenv("TK_TEST_RESOLVE_DELAY_MS", DELAY_MS, 1), 0);
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(tk_node_prepare(&cl.node[i], ports[i]), 0);
        cr_assert_eq(spawn(i), 0);
    }
}

static bool status_of(int i, uint64_t *term, char *role, size_t role_cap, char *leader)
{
    static char body[16384];
    return tk_cluster_status(&cl, i, body, sizeof(body)) == 200 &&
           tk_json_u64(body, "term", term) && tk_json_str(body, "role", role, role_cap) &&
           tk_json_str(body, "leader", leader, 17);
}

/* Waits until every live member names the same leader in the same term;
 * returns that term (0 on timeout). */
static uint64_t await_agreement(int timeout_ms, unsigned skip_mask)
{
    uint64_t end = tk_test_ms() + (uint64_t)timeout_ms;
    do {
        uint64_t term0 = 0;
        char leader0[17] = "";
        bool same = true;
        for (int i = 0; i < 3 && same; i++) {
            if (skip_mask & (1u << i))
                continue;
            uint64_t term;
            char role[16], leader[17];
            if (!status_of(i, &term, role, sizeof(role), leader) ||
                !strcmp(leader, "0000000000000000")) {
                same = false;
                break;
            }
            if (!leader0[0]) {
                term0 = term;
                memcpy(leader0, leader, sizeof(leader0));
            }
            same = term == term0 && !strcmp(leader, leader0);
        }
        if (same && leader0[0])
            return term0;
        usleep(50000);
    } while (tk_test_ms() < end);
    return 0;
}

/* One grant and release on the leader: two Raft commits. Returns the
 * milliseconds it took, or -1 if an answer was not what a serving leader
 * gives (a redirect after losing leadership, or nothing for 5 s). */
static int round_trip(struct tk_tc *c, uint64_t id)
{
    char line[256];
    uint64_t t0 = tk_test_ms(), gid, token;
    tk_tc_send(c, "A %" PRIu64 " dns-key owner 30000 0\n", id);
    if (tk_tc_line(c, line, sizeof(line), 5000) < 0 ||
        sscanf(line, "G %" SCNu64 " %" SCNu64, &gid, &token) != 2 || gid != id) {
        fprintf(stderr, "request %" PRIu64 ": got '%s'\n", id, line);
        return -1;
    }
    tk_tc_send(c, "R %" PRIu64 " dns-key owner %" PRIu64 "\n", id + 1, token);
    char want[32];
    snprintf(want, sizeof(want), "R %" PRIu64, id + 1);
    if (tk_tc_line(c, line, sizeof(line), 5000) < 0 || strcmp(line, want) != 0) {
        fprintf(stderr, "release %" PRIu64 ": got '%s'\n", id + 1, line);
        return -1;
    }
    return (int)(tk_test_ms() - t0);
}

Test(peer_dns, slow_lookups_of_peer_names_do_not_stall_the_leader)
{
    cl.keep_logs = true; /* cleared at the end: logs only for a failure */
    uint64_t t0 = tk_test_ms();
    start_named_cluster();
    int l = tk_cluster_leader(&cl, 60000, 0);
    cr_assert_geq(l, 0, "no leader with 3 s name lookups");
    uint64_t term = await_agreement(20000, 0);
    cr_assert_neq(term, 0, "the members do not agree on one leader");
    l = tk_cluster_leader(&cl, 5000, 0);
    cr_assert_geq(l, 0);
    fprintf(stderr, "peer_dns: leader %d in term %" PRIu64 " after %" PRIu64 " ms\n", l, term,
            tk_test_ms() - t0);

    struct tk_tc *c = cr_open_node(&cl, l);
    cr_assert_geq(round_trip(c, 1), 0, "the leader does not serve");

    /* Kill a follower: the others now redial it, a 3 s lookup each time. */
    int dead = (l + 1) % 3, other = (l + 2) % 3;
    cr_assert_eq(tk_node_stop(&cl.node[dead], SIGKILL, 3000) >= 0, true);
    uint64_t end = tk_test_ms() + OBSERVE_MS, id = 10;
    int worst = 0, trips = 0;
    while (tk_test_ms() < end) {
        int ms = round_trip(c, id);
        id += 2;
        cr_assert_geq(ms, 0, "the leader stopped serving while a peer name was looked up");
        if (ms > worst)
            worst = ms;
        trips++;
        uint64_t t;
        char role[16], leader[17];
        cr_assert(status_of(l, &t, role, sizeof(role), leader));
        cr_assert_str_eq(role, "leader");
        cr_assert_eq(t, term, "the leader's term moved from %" PRIu64 " to %" PRIu64, term, t);
        cr_assert(status_of(other, &t, role, sizeof(role), leader));
        cr_assert_eq(t, term, "the follower's term moved from %" PRIu64 " to %" PRIu64, term, t);
        usleep(100000);
    }
    fprintf(stderr, "peer_dns: %d round trips while redialling, the slowest %d ms\n", trips, worst);
    cr_assert_lt(worst, ROUND_TRIP_MS_MAX, "a commit took %d ms: the Raft thread stalled", worst);
    static char body[1 << 17];
    uint64_t dials = 0;
    cr_assert_eq(tk_http_get(cl.node[l].port + 2, "/metrics", body, sizeof(body)), 200);
    cr_assert(tk_metric_u64(body, "ticketing_peer_dials_total", &dials));
    cr_assert_geq(dials, 4, "the leader redialled the dead member (%" PRIu64 " dials)", dials);

    /* The member comes back and rejoins without an election. */
    FILE *f = fopen(cl.node[dead].log_file, "a");
    if (f) {
        fprintf(f, "==== test_peer_dns: member %d restarted ====\n", dead);
        fclose(f);
    }
    cr_assert_eq(spawn(dead), 0);
    cr_assert_eq(tk_node_wait_port(&cl.node[dead], 15000), 0);
    cr_assert_eq(await_agreement(30000, 0), term,
                 "the restarted member did not rejoin term %" PRIu64, term);
    cr_assert_geq(round_trip(c, id), 0);
    cr_drop(c);
    cl.keep_logs = false;
}
