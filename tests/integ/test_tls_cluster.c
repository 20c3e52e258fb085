/* Mutual TLS on the peer port (SPEC 2: TCP -> TLS -> challenge-response
 * -> traffic, for peer links as for clients): a 3-node cluster whose
 * members all run with --tls-cert/--tls-key/--tls-ca elects a leader and
 * replicates lock commands over TLS, survives kill -9 of its leader, keeps
 * out a member whose certificate another CA signed, and refuses a member
 * that runs its peer port in plaintext, each refusal logged on the TLS
 * side with its cause and address; a member with a certificate but no CA
 * does not start.
 *
 * Method: each test process makes its own certificates with
 * tests/support/make_certs.sh (openssl) in a temp dir and starts its own
 * cluster on 127.0.0.1 (peer addresses are IP literals, checked against
 * the IP SAN of node.pem). Cluster state is read from the admin port
 * (/status, plaintext HTTP); commands reach the leader's client port, TLS
 * too, through the test TLS client of tests/support. A misconfigured
 * member is started in place of a killed follower, with the same ports and
 * --peers, and its effect read from the logs and the leader's /status.
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
static struct tk_cluster cl;
static struct tk_node lone; /* a node outside the cluster */
/* The cluster's extra arguments (they must outlive it): fast timers and
 * TLS with the node certificate, filled in by setup(). */
static const char *tls_args[16];

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
    snprintf(dir, sizeof(dir), "/tmp/tk-itlsc-%d", (int)getpid());
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "sh %s/tests/support/make_certs.sh %s", TK_SRC_DIR, dir);
    cr_assert_eq(system(cmd), 0, "openssl made the test certificates");
    const char *a[] = {"--heartbeat-ms", "50", "--election-ms", "400", "--tls-cert", NULL,
                       "--tls-key",      NULL, "--tls-ca",      NULL,  NULL};
    static char cert[128], key[128], ca[128];
    snprintf(cert, sizeof(cert), "%s/node.pem", dir);
    snprintf(key, sizeof(key), "%s/node.key", dir);
    snprintf(ca, sizeof(ca), "%s/ca.pem", dir);
    a[5] = cert;
    a[7] = key;
    a[9] = ca;
    memcpy(tls_args, a, sizeof(a));
}

static void teardown(void)
{
    tk_cluster_stop(&cl);
    if (lone.pid > 0)
        tk_node_stop(&lone, SIGKILL, 3000);
    if (lone.dir[0])
        tk_node_cleanup(&lone);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(tls_cluster, .init = setup, .fini = teardown, .timeout = 120);

/* Helpers */

/* Starts the TLS cluster; its logs are printed and kept if the test fails
 * (pass() clears that at the end of a test unless TK_TEST_KEEP_LOGS is
 * set). */
static void start(void)
{
    int rc = tk_cluster_start(&cl, 3, tls_args);
    cl.keep_logs = true;
    cr_assert_eq(rc, 0, "the TLS cluster elected no leader");
}

static void pass(void)
{
    cl.keep_logs = getenv("TK_TEST_KEEP_LOGS") != NULL; /* to read them after a pass */
}

/* A line of node i's log contains text and, if not NULL, also text2,
 * within timeout_ms. */
static bool log_line(int i, const char *text, const char *text2, int timeout_ms)
{
    uint64_t end = tk_test_ms() + (uint64_t)timeout_ms;
    do {
        FILE *fp = fopen(cl.node[i].log_file, "r");
        if (fp) {
            char line[2048];
            bool found = false;
            while (!found && fgets(line, sizeof(line), fp))
                found = strstr(line, text) && (!text2 || strstr(line, text2));
            fclose(fp);
            if (found)
                return true;
        }
        usleep(20000);
    } while (tk_test_ms() < end);
    return false;
}

static bool log_has(int i, const char *text, int timeout_ms)
{
    return log_line(i, text, NULL, timeout_ms);
}

static uint64_t status_u64(int i, const char *name)
{
    static char body[1 << 16];
    uint64_t v = 0;
    cr_assert_eq(tk_cluster_status(&cl, i, body, sizeof(body)), 200, "node %d: no /status", i);
    cr_assert(tk_json_u64(body, name, &v), "node %d: no %s in /status", i, name);
    return v;
}

/* Waits until node i's commit index reaches min. */
static void await_commit(int i, uint64_t min)
{
    uint64_t v = 0;
    for (int k = 0; k < 500 && (v = status_u64(i, "commit_index")) < min; k++)
        usleep(20000);
    cr_assert_geq(v, min, "node %d: commit index stayed at %" PRIu64 ", wanted %" PRIu64, i, v,
                  min);
}

/* A /metrics counter of node i; false if the row is absent. */
static bool metric(int i, const char *name, uint64_t *v)
{
    static char body[1 << 17];
    return tk_http_get(cl.node[i].port + 2, "/metrics", body, sizeof(body)) == 200 &&
           tk_metric_u64(body, name, v);
}

/* n acquires of fresh keys on the leader's client port (TLS as well),
 * each granted: n more lock commands committed. */
static void grants(int leader, unsigned first_id, unsigned n)
{
    static struct tk_test_tls t;
    cr_assert_eq(tk_test_tls_dial(&t, cl.node[leader].port, f("ca.pem"), NULL, NULL, "localhost"),
                 0, "TLS dial of the leader's client port: %s", t.err);
    cr_assert_eq(tk_test_tls_auth(&t, TK_TEST_SECRET), 0, "auth: %s", t.err);
    for (unsigned id = first_id; id < first_id + n; id++) {
        cr_assert_eq(tk_test_tls_send(&t, "A %u seat-%u owner 30000 0\n", id, id), 0, "%s", t.err);
        char line[256], want[32];
        cr_assert_geq(tk_test_tls_line(&t, line, sizeof(line), 10000), 0, "no grant: %s", t.err);
        snprintf(want, sizeof(want), "G %u ", id);
        cr_assert_eq(strncmp(line, want, strlen(want)), 0, "got '%s', wanted '%s...'", line, want);
    }
    tk_test_tls_close(&t);
}

/* Every live node (not in skip_mask) commits what the leader committed. */
static void replicated(int leader, unsigned skip_mask)
{
    uint64_t c = status_u64(leader, "commit_index");
    cr_assert_gt(c, 0);
    for (int i = 0; i < cl.n; i++)
        if (!(skip_mask & (1u << i)))
            await_commit(i, c);
}

/* Kills follower k and starts in its place (same ports, --peers and peer
 * secret) a fresh ticketingd with the given TLS arguments (NULL-terminated,
 * may be empty); waits until its admin port answers. */
static void replace_follower(int k, const char *const *tls)
{
    cr_assert_geq(tk_node_stop(&cl.node[k], SIGKILL, 5000), 0);
    char adv[64];
    snprintf(adv, sizeof(adv), "127.0.0.1:%u", cl.node[k].port);
    const char *args[32] = {
        "--peers",        cl.peers, "--peer-secret-file", cl.node[k].peer_secret_file,
        "--advertise",    adv,      "--threads",          "2",
        "--heartbeat-ms", "50",     "--election-ms",      "400"};
    int a = 12;
    for (int i = 0; tls && tls[i]; i++)
        args[a++] = tls[i];
    args[a] = NULL;
    FILE *fp = fopen(cl.node[k].log_file, "a");
    if (fp) {
        fprintf(fp, "==== test: member %d replaced ====\n", k);
        fclose(fp);
    }
    cr_assert_eq(tk_node_spawn(&cl.node[k], args), 0);
    char body[4096];
    for (int i = 0; i < 500; i++) {
        cr_assert(tk_node_alive(&cl.node[k]), "the replacement of member %d exited", k);
        if (tk_http_get(cl.node[k].port + 2, "/status", body, sizeof(body)) == 200)
            return;
        usleep(20000);
    }
    cr_assert_fail("the replacement of member %d never answered /status", k);
}

/* The replacement at k stays out: it never becomes ready, the leader's
 * configuration never names its NodeId (the old member k stays), and the
 * other two keep serving and committing. */
static void stays_out(int leader, int k)
{
    uint64_t fresh = tk_cluster_node_id(&cl, k);
    cr_assert_neq(fresh, 0);
    cr_assert_eq(tk_cluster_wait_ready(&cl, k, 3000), -1, "the replacement became ready");
    struct tk_member m[TK_CLUSTER_MEMBERS_MAX];
    int voters = 0;
    int n = tk_cluster_members(&cl, leader, m, TK_CLUSTER_MEMBERS_MAX, &voters);
    cr_assert_eq(n, 3, "the leader lists %d members", n);
    cr_assert_eq(voters, 3);
    for (int i = 0; i < n; i++)
        cr_assert_neq(m[i].id, fresh, "the replacement %016" PRIx64 " became a member", fresh);
    cr_assert_eq(tk_cluster_leader(&cl, 5000, 1u << k), leader, "leadership moved");
    uint64_t c = status_u64(leader, "commit_index");
    grants(leader, 100, 5);
    await_commit(leader, c + 5);
    replicated(leader, 1u << k);
    cr_assert_eq(status_u64(k, "commit_index"), 0, "the replacement received entries");
}

/* The other follower of a 3-node cluster with leader l and follower k. */
static int third(int l, int k)
{
    return 3 - l - k;
}

/* ---------------------------------------------------------------- */

Test(tls_cluster, elects_and_replicates_over_mutual_tls)
{
    start();
    for (int i = 0; i < 3; i++)
        cr_assert(log_has(i, "peer port: mutual TLS", 0), "node %d: peer port not TLS", i);
    int l = tk_cluster_leader(&cl, 5000, 0);
    cr_assert_geq(l, 0);
    uint64_t c0 = status_u64(l, "commit_index");
    grants(l, 1, 20);
    await_commit(l, c0 + 20);
    replicated(l, 0);
    for (int i = 0; i < 3; i++) {
        uint64_t v = 0;
        cr_assert(metric(i, "ticketing_peer_handshakes_total", &v) && v >= 2,
                  "node %d: %" PRIu64 " peer handshakes", i, v);
        cr_assert(metric(i, "ticketing_peer_auth_failures_total", &v) && v == 0,
                  "node %d: %" PRIu64 " peer auth failures", i, v);
    }
    /* No plaintext banner on the peer port: it waits for a TLS hello, and
     * a plaintext line gets the link closed and logged. */
    struct tk_tc c;
    cr_assert_eq(tk_tc_connect(&c, cl.node[l].port + 1), 0);
    char line[256];
    cr_assert_eq(tk_tc_line(&c, line, sizeof(line), 300), -1, "the peer port spoke in plaintext");
    cr_assert_eq(tk_tc_send(&c, "AUTH %064d %064d\n", 0, 0), 0);
    cr_assert_eq(tk_tc_line(&c, line, sizeof(line), 3000), -2, "got '%s', not a close", line);
    tk_tc_close(&c);
    cr_assert(log_line(l, "peer link from 127.0.0.1:", "a plaintext client on a TLS port", 3000),
              "no log line naming the cause and the address");
    /* Counted too (/metrics is refreshed every 100 ms). */
    uint64_t v = 0;
    for (int i = 0; i < 100 && !(metric(l, "ticketing_peer_tls_failures_total", &v) && v >= 1); i++)
        usleep(20000);
    cr_assert_geq(v, 1, "ticketing_peer_tls_failures_total");
    /* The cluster carries on. */
    grants(l, 21, 1);
    replicated(l, 0);
    pass();
}

Test(tls_cluster, kill_9_of_the_leader_elects_another_over_tls)
{
    start();
    int l = tk_cluster_leader(&cl, 5000, 0);
    cr_assert_geq(l, 0);
    grants(l, 1, 3);
    replicated(l, 0);
    uint64_t term = status_u64(l, "term");
    cr_assert_geq(tk_node_stop(&cl.node[l], SIGKILL, 5000), 0);
    int l2 = tk_cluster_leader(&cl, 10000, 1u << l);
    cr_assert_geq(l2, 0, "no new leader after kill -9 of node %d", l);
    cr_assert_neq(l2, l);
    cr_assert_gt(status_u64(l2, "term"), term);
    uint64_t c = status_u64(l2, "commit_index");
    grants(l2, 10, 5);
    await_commit(l2, c + 5);
    replicated(l2, 1u << l);
    pass();
}

Test(tls_cluster, member_with_a_certificate_of_another_ca_cannot_join)
{
    start();
    int l = tk_cluster_leader(&cl, 5000, 0);
    cr_assert_geq(l, 0);
    int k = (l + 1) % 3;
    const char *other[] = {"--tls-cert", f("other.pem"), "--tls-key", f("other.key"),
                           "--tls-ca",   f("ca.pem"),    NULL};
    replace_follower(k, other);
    /* The leader dials k and refuses its server certificate; k dials the
     * leader and the leader refuses its client certificate. */
    char want[128];
    snprintf(want, sizeof(want), "peer link to 127.0.0.1:%u: closed by a TLS failure",
             cl.node[k].port + 1);
    const char *cause = "the peer's certificate is not signed by our CA";
    cr_assert(log_line(l, want, cause, 5000), "the leader did not log '%s: ...%s'", want, cause);
    cr_assert(log_line(l, "peer link from 127.0.0.1:", cause, 5000), "no inbound refusal logged");
    cr_assert(log_line(third(l, k), want, cause, 5000), "the other follower did not log it");
    /* The outsider learns only that it was refused. */
    cr_assert(log_has(k, "the peer refused the session", 5000));
    stays_out(l, k);
    uint64_t v = 0;
    for (int i = 0; i < 100 && !(metric(l, "ticketing_peer_tls_failures_total", &v) && v >= 2); i++)
        usleep(20000);
    cr_assert_geq(v, 2, "ticketing_peer_tls_failures_total");
    pass();
}

Test(tls_cluster, plaintext_member_is_refused)
{
    start();
    int l = tk_cluster_leader(&cl, 5000, 0);
    cr_assert_geq(l, 0);
    int k = (l + 1) % 3;
    replace_follower(k, NULL);
    /* The TLS side: its dial gets a plaintext banner back at once; the
     * plaintext member's dial never starts TLS: one side's handshake
     * deadline (5 s) ends it, and the TLS side says what it was. */
    char want[128];
    snprintf(want, sizeof(want), "peer link to 127.0.0.1:%u: closed by a TLS failure",
             cl.node[k].port + 1);
    cr_assert(log_line(l, want, "the peer answered in plaintext", 5000),
              "the leader did not log '%s: ...answered in plaintext'", want);
    cr_assert(
        log_line(l, "peer link from 127.0.0.1:",
                 "a member without --tls-cert dials in plaintext and waits for a banner", 12000),
        "the leader did not log the plaintext dialler");
    /* The plaintext side says what it saw too. */
    cr_assert(log_has(k, "the peer speaks TLS but this node's peer port is plaintext", 5000));
    stays_out(l, k);
    pass();
}

/* Peers always verify each other, so a member with a certificate but no
 * CA to check the others with does not start. */
Test(tls_cluster, member_without_tls_ca_refuses_to_start)
{
    cr_assert_eq(tk_node_prepare(&lone, tk_free_port3()), 0);
    char peers[128];
    snprintf(peers, sizeof(peers), "127.0.0.1:%u,127.0.0.1:%u,127.0.0.1:%u", lone.port + 1,
             lone.port + 11, lone.port + 21);
    const char *args[] = {"--peers",    peers,         "--peer-secret-file", lone.peer_secret_file,
                          "--tls-cert", f("node.pem"), "--tls-key",          f("node.key"),
                          NULL};
    cr_assert_eq(tk_node_spawn(&lone, args), 0);
    int st = 0;
    pid_t r = 0;
    for (int i = 0; i < 500 && (r = waitpid(lone.pid, &st, WNOHANG)) == 0; i++)
        usleep(20000);
    cr_assert_eq(r, lone.pid, "ticketingd kept running without --tls-ca");
    lone.pid = -1;
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 2, "exit status %d (2: a configuration error)",
              st);
    FILE *fp = fopen(lone.log_file, "r");
    cr_assert(fp);
    char line[1024];
    bool said = false;
    while (!said && fgets(line, sizeof(line), fp))
        said = strstr(line, "--tls-ca") != NULL;
    fclose(fp);
    cr_assert(said, "the log does not name --tls-ca");
}

/* ---- peer certificates mean "peer" ------------------------------------------------ */

/* What the peer port of node i says to a TLS dialler presenting cert: its
 * banner (1), a close (0: refused), or nothing (-1). The dialler checks
 * the node against ca. */
static int peer_port_says(int i, const char *ca, const char *cert, const char *key)
{
    static struct tk_test_tls t;
    if (tk_test_tls_dial(&t, cl.node[i].port + 1, ca, cert, key, "127.0.0.1") != 0)
        return 0;
    char line[512];
    int n = tk_test_tls_line(&t, line, sizeof(line), 3000);
    tk_test_tls_close(&t);
    return n > 0 && strncmp(line, "TICKETING-PEER/2 ", 17) == 0 ? 1 : n == -1 ? -1 : 0;
}

Test(tls_cluster, a_client_certificate_of_the_shared_ca_does_not_open_the_peer_port)
{
    start();
    int l = tk_cluster_leader(&cl, 5000, 0);
    cr_assert_geq(l, 0);
    /* client.pem: signed by the same CA, for DNS:event-server, no member. */
    cr_assert_eq(peer_port_says(l, f("ca.pem"), f("client.pem"), f("client.key")), 0,
                 "a client's certificate got the peer banner");
    cr_assert(log_line(l, "peer link from 127.0.0.1:", "its certificate names no member", 3000),
              "the refusal was not logged with its cause");
    uint64_t v = 0;
    for (int i = 0; i < 100 && !(metric(l, "ticketing_peer_certs_refused_total", &v) && v >= 1);
         i++)
        usleep(20000);
    cr_assert_geq(v, 1, "ticketing_peer_certs_refused_total");
    /* A member's certificate (it names 127.0.0.1, the host of --peers). */
    cr_assert_eq(peer_port_says(l, f("ca.pem"), f("node.pem"), f("node.key")), 1);
    pass();
}

Test(tls_cluster, a_peer_ca_of_its_own_keeps_the_client_ca_out)
{
    static const char *args[24];
    int a = 0;
    while (tls_args[a]) {
        args[a] = tls_args[a];
        a++;
    }
    const char *peer[] = {"--tls-peer-ca",
                          f("peer-ca.pem"),
                          "--tls-peer-cert",
                          f("peer.pem"),
                          "--tls-peer-key",
                          f("peer.key"),
                          NULL};
    for (int i = 0; peer[i]; i++)
        args[a++] = peer[i];
    args[a] = NULL;
    int rc = tk_cluster_start(&cl, 3, args);
    cl.keep_logs = true;
    cr_assert_eq(rc, 0, "the cluster with a peer CA elected no leader");
    int l = tk_cluster_leader(&cl, 5000, 0);
    cr_assert_geq(l, 0);
    uint64_t c0 = status_u64(l, "commit_index");
    grants(l, 1, 5); /* the client port keeps node.pem of the client CA */
    await_commit(l, c0 + 5);
    replicated(l, 0);
    /* node.pem names 127.0.0.1, but the client CA signed it: not a peer. */
    cr_assert_eq(peer_port_says(l, f("peer-ca.pem"), f("node.pem"), f("node.key")), 0,
                 "a certificate of the client CA got the peer banner");
    cr_assert_eq(peer_port_says(l, f("peer-ca.pem"), f("peer.pem"), f("peer.key")), 1);
    pass();
}

/* ticketctl remove-member speaks TLS to the peer port, presenting a
 * member's certificate; without --tls-ca it says what to give. */
Test(tls_cluster, remove_member_over_tls)
{
    start();
    int l = tk_cluster_leader(&cl, 5000, 0);
    cr_assert_geq(l, 0);
    int k = (l + 1) % 3;
    char id[17], addr[64], secret[400], out[4096];
    snprintf(id, sizeof(id), "%016" PRIx64, tk_cluster_node_id(&cl, k));
    snprintf(addr, sizeof(addr), "--addr=127.0.0.1:%u", cl.node[l].port);
    snprintf(secret, sizeof(secret), "--peer-secret-file=%s", cl.node[l].peer_secret_file);
    cr_assert_eq(tk_pause_pid(cl.node[k].pid), 0);
    usleep(1200 * 1000); /* past the election timeout: removable */
    const char *plain[] = {
        TK_BIN_DIR "/ticketctl", "remove-member", id, addr, secret, "--timeout", "2s", NULL};
    int code = tk_run(plain, out, sizeof(out), 30000);
    cr_assert_eq(code, 83, "exit %d: %s", code, out);
    cr_assert(strstr(out, "give --tls-ca") != NULL, "%s", out);
    const char *client[] = {TK_BIN_DIR "/ticketctl",
                            "remove-member",
                            id,
                            addr,
                            secret,
                            "--tls-ca",
                            f("ca.pem"),
                            "--tls-cert",
                            f("client.pem"),
                            "--tls-key",
                            f("client.key"),
                            "--timeout",
                            "2s",
                            NULL};
    code = tk_run(client, out, sizeof(out), 30000);
    cr_assert_eq(code, 83, "exit %d with a client's certificate: %s", code, out);
    cr_assert(strstr(out, "no banner") != NULL, "%s", out); /* closed before the banner */
    const char *wrong_ca[] = {TK_BIN_DIR "/ticketctl",
                              "remove-member",
                              id,
                              addr,
                              secret,
                              "--tls-ca",
                              f("other-ca.pem"),
                              "--tls-cert",
                              f("node.pem"),
                              "--tls-key",
                              f("node.key"),
                              "--timeout",
                              "2s",
                              NULL};
    code = tk_run(wrong_ca, out, sizeof(out), 30000);
    cr_assert_neq(code, 0, "a CA that did not sign the members: exit 0: %s", out);
    cr_assert(strstr(out, "certificate is not signed by our CA") != NULL,
              "no sentence saying the members' certificate is not of that CA: %s", out);
    const char *member[] = {TK_BIN_DIR "/ticketctl",
                            "remove-member",
                            id,
                            addr,
                            secret,
                            "--tls-ca",
                            f("ca.pem"),
                            "--tls-cert",
                            f("node.pem"),
                            "--tls-key",
                            f("node.key"),
                            NULL};
    code = tk_run(member, out, sizeof(out), 30000);
    kill(cl.node[k].pid, SIGCONT);
    cr_assert_eq(code, 0, "exit %d: %s", code, out);
    char want[64];
    snprintf(want, sizeof(want), "removed %s", id);
    cr_assert(strstr(out, want) != NULL, "%s", out);
    /* members and status read the admin port, which a TLS cluster serves
     * in plain HTTP as any other: the removed member is gone from both. */
    const char *members[] = {TK_BIN_DIR "/ticketctl", "members", addr, NULL};
    bool listed = true;
    for (int i = 0; i < 50 && listed; i++) { /* "removed" is the append; members the commit */
        code = tk_run(members, out, sizeof(out), 30000);
        cr_assert_eq(code, 0, "members: exit %d: %s", code, out);
        listed = strstr(out, id) != NULL;
        if (listed)
            usleep(100 * 1000);
    }
    cr_assert(!listed, "the removed member is still listed after 5 s: %s", out);
    const char *status[] = {TK_BIN_DIR "/ticketctl", "status", addr, "--json", NULL};
    code = tk_run(status, out, sizeof(out), 30000);
    cr_assert_eq(code, 0, "status: exit %d: %s", code, out);
    cr_assert(strstr(out, "\"tls\":true") != NULL, "%s", out);
    pass();
}
