/* Goal: SPEC 15's ring on real processes. Two groups of three ticketingd
 * each (6 processes), started with --group; ticketctl ring apply gives
 * each the ring over its leader's peer port; a group then serves exactly
 * its slots and answers W <id> <slot> <version> for the others, S with
 * the ring; refusals say why and change nothing; the ring survives a
 * leader's death and reaches a member restarted under a fresh NodeId
 * through a snapshot.
 *
 * Method: the real binaries; the line protocol by hand (tests/support);
 * ticketctl as a child process; /status and /metrics on the admin ports. */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/tk.h"
#include "tests/support/tk_cluster_cr.h"

#define TICKETCTL TK_BIN_DIR "/ticketctl"

static struct tk_cluster A, B;
static const char *const EXTRA_A[] = {"--group", "sales-a", "--max-log-entries", "64", NULL};
static const char *const EXTRA_B[] = {"--group", "sales-b", NULL};

static void teardown(void)
{
    tk_cluster_stop(&A);
    tk_cluster_stop(&B);
}

static char ring_path[512];

/* Writes the ring file: version v, A owning 0..a_last, B the rest. */
static void write_ring(uint64_t v, uint32_t a_last)
{
    char a[256], b[256];
    tk_cluster_client_addrs(&A, a, sizeof(a));
    tk_cluster_client_addrs(&B, b, sizeof(b));
    snprintf(ring_path, sizeof(ring_path), "%s/ring.txt", A.node[0].dir);
    FILE *f = fopen(ring_path, "w");
    cr_assert_not_null(f);
    fprintf(f, "# two groups\nversion %" PRIu64 "\n0-%u=sales-a@%s\n%u-16383=sales-b@%s\n", v,
            a_last, a, a_last + 1, b);
    fclose(f);
}

/* The same ownership as write_ring(v, 8191), with A's half cut into
 * ranges of 100 slots: a ring whose S answer takes several lines. Its
 * body into body. */
static void write_split_ring(uint64_t v, char *body, size_t cap)
{
    char a[256], b[256];
    tk_cluster_client_addrs(&A, a, sizeof(a));
    tk_cluster_client_addrs(&B, b, sizeof(b));
    FILE *f = fopen(ring_path, "w");
    cr_assert_not_null(f);
    fprintf(f, "version %" PRIu64 "\n", v);
    size_t n = 0;
    for (uint32_t first = 0; first <= 8191; first += 100) {
        uint32_t last = first + 99 > 8191 ? 8191 : first + 99;
        fprintf(f, "%u-%u=sales-a@%s\n", first, last, a);
        n +=
            (size_t)snprintf(body + n, cap - n, "%s%u-%u=sales-a@%s", n ? ";" : "", first, last, a);
    }
    fprintf(f, "8192-16383=sales-b@%s\n", b);
    snprintf(body + n, cap - n, ";8192-16383=sales-b@%s", b);
    fclose(f);
}

/* Reads an S answer of several lines for id; returns the joined body. */
static void read_ring(struct tk_tc *c, uint64_t id, uint64_t version, char *body, size_t cap)
{
    char line[1100];
    size_t n = 0;
    unsigned k = 0, parts = 1;
    do {
        int len = tk_tc_line(c, line, sizeof(line), 10000);
        cr_assert(len > 0, "part %u of the ring", k + 1);
        cr_assert_leq(len, 1023, "a line of at most 1,024 bytes with its newline");
        uint64_t gid, v;
        unsigned part, of;
        int at = 0;
        cr_assert_eq(sscanf(line, "S %" SCNu64 " %" SCNu64 " %u/%u %n", &gid, &v, &part, &of, &at),
                     4, "'%s'", line);
        cr_assert(gid == id && v == version && part == k + 1 && (k == 0 || of == parts));
        parts = of;
        n += (size_t)snprintf(body + n, cap - n, "%s%s", k ? ";" : "", line + at);
        k++;
    } while (k < parts);
    cr_assert_gt(parts, 1, "several lines");
}

static int ring_apply(const struct tk_cluster *c, const char *group, char *out, size_t cap)
{
    return tk_run_cmd(out, cap,
                      "%s ring apply %s --group %s --peers %s --peer-secret-file %s --timeout 20s",
                      TICKETCTL, ring_path, group, c->peers, c->node[0].peer_secret_file);
}

/* A key whose slot is in [lo, hi]. */
static const char *key_in(uint32_t lo, uint32_t hi, char *buf, size_t cap)
{
    for (uint32_t i = 0;; i++) {
        snprintf(buf, cap, "show-%u", i);
        uint32_t s = tk_slot(buf, strlen(buf));
        if (s >= lo && s <= hi)
            return buf;
    }
}

static void expect_line(struct tk_tc *c, const char *want)
{
    char line[1100];
    cr_assert(tk_tc_line(c, line, sizeof(line), 10000) >= 0, "no answer (wanted '%s')", want);
    cr_assert_str_eq(line, want);
}

TestSuite(groups, .fini = teardown, .timeout = 240);

Test(groups, two_groups_serve_their_slots_and_keep_the_ring)
{
    cr_assert_eq(tk_cluster_start(&A, 3, EXTRA_A), 0, "group sales-a");
    cr_assert_eq(tk_cluster_start(&B, 3, EXTRA_B), 0, "group sales-b");
    int la = tk_cluster_leader(&A, 10000, 0), lb = tk_cluster_leader(&B, 10000, 0);
    cr_assert(la >= 0 && lb >= 0);
    char ka[64], kb[64], line[1100], out[4096];
    key_in(0, 8191, ka, sizeof(ka));
    key_in(8192, 16383, kb, sizeof(kb));
    uint32_t sa = tk_slot(ka, strlen(ka)), sb = tk_slot(kb, strlen(kb));

    /* A named group serves nothing before a ring. */
    struct tk_tc *c = cr_open_node(&A, la);
    tk_tc_send(c, "A 1 %s alice 10000 0\n", ka);
    snprintf(line, sizeof(line), "W 1 %u 0", sa);
    expect_line(c, line);
    tk_tc_send(c, "S 2\n");
    expect_line(c, "S 2 0 -");
    cr_drop(c);

    /* The ring, to both groups. */
    write_ring(1, 8191);
    int rc = ring_apply(&A, "sales-a", out, sizeof(out));
    cr_assert_eq(rc, 0, "ring apply to sales-a: exit %d\n%s", rc, out);
    cr_assert(strstr(out, "ring version 1 committed in group sales-a"), "%s", out);
    rc = ring_apply(&A, "sales-a", out, sizeof(out));
    cr_assert_eq(rc, 0, "the same ring again: exit %d\n%s", rc, out);
    rc = ring_apply(&B, "sales-b", out, sizeof(out));
    cr_assert_eq(rc, 0, "ring apply to sales-b: exit %d\n%s", rc, out);
    /* Refusals: the wrong group, a ring that moves slots, one not newer. */
    rc = ring_apply(&B, "sales-a", out, sizeof(out));
    cr_assert_eq(rc, 84, "exit %d\n%s", rc, out);
    cr_assert(strstr(out, "this is group 'sales-b'"), "%s", out);
    write_ring(2, 4095);
    rc = ring_apply(&A, "sales-a", out, sizeof(out));
    cr_assert_eq(rc, 84, "exit %d\n%s", rc, out);
    cr_assert(strstr(out, "by a move"), "%s", out);
    write_ring(1, 8190);
    rc = ring_apply(&A, "sales-a", out, sizeof(out));
    cr_assert_eq(rc, 84, "exit %d\n%s", rc, out);
    cr_assert(strstr(out, "not newer"), "%s", out);

    /* The same slots in many ranges: S takes several lines, and ticketctl
     * ring show puts them together. */
    static char split[1 << 14], got[1 << 14];
    write_split_ring(3, split, sizeof(split));
    rc = ring_apply(&A, "sales-a", out, sizeof(out));
    cr_assert_eq(rc, 0, "the split ring to sales-a: exit %d\n%s", rc, out);
    rc = ring_apply(&B, "sales-b", out, sizeof(out));
    cr_assert_eq(rc, 0, "the split ring to sales-b: exit %d\n%s", rc, out);
    c = cr_open_node(&B, lb);
    tk_tc_send(c, "S 9\n");
    read_ring(c, 9, 3, got, sizeof(got));
    cr_assert_str_eq(got, split);
    tk_tc_send(c, "P 10\n");
    expect_line(c, "P 10");
    cr_drop(c);
    static char show[1 << 15];
    rc = tk_run_cmd(show, sizeof(show), "%s ring show --addr 127.0.0.1:%u --secret-file %s",
                    TICKETCTL, B.node[lb].port, B.node[lb].secret_file);
    cr_assert_eq(rc, 0, "ring show: exit %d\n%s", rc, show);
    cr_assert(strstr(show, "version 3\n"), "%s", show);
    cr_assert(strstr(show, "8100-8191=sales-a@"), "%s", show);
    write_ring(4, 8191);
    cr_assert_eq(ring_apply(&A, "sales-a", out, sizeof(out)), 0, "%s", out);
    cr_assert_eq(ring_apply(&B, "sales-b", out, sizeof(out)), 0, "%s", out);

    /* Each group serves its slots; W for the other's, the connection stays. */
    char body[1024], a_addrs[256], b_addrs[256];
    tk_cluster_client_addrs(&A, a_addrs, sizeof(a_addrs));
    tk_cluster_client_addrs(&B, b_addrs, sizeof(b_addrs));
    snprintf(body, sizeof(body), "0-8191=sales-a@%s;8192-16383=sales-b@%s", a_addrs, b_addrs);
    c = cr_open_node(&A, la);
    tk_tc_send(c, "A 3 %s alice 10000 0\n", ka);
    uint64_t t1 = cr_grant(c, 3);
    tk_tc_send(c, "A 4 %s alice 10000 0\n", kb);
    snprintf(line, sizeof(line), "W 4 %u 4", sb);
    expect_line(c, line);
    tk_tc_send(c, "Q 5 %s\n", kb);
    snprintf(line, sizeof(line), "W 5 %u 4", sb);
    expect_line(c, line);
    tk_tc_send(c, "P 6\n");
    expect_line(c, "P 6");
    tk_tc_send(c, "S 7\n");
    snprintf(line, sizeof(line), "S 7 4 %s", body);
    expect_line(c, line);
    tk_tc_send(c, "R 8 %s alice %" PRIu64 "\n", ka, t1);
    expect_line(c, "R 8");
    cr_drop(c);
    c = cr_open_node(&B, lb);
    tk_tc_send(c, "A 1 %s bob 10000 0\n", kb);
    cr_grant(c, 1);
    tk_tc_send(c, "A 2 %s bob 10000 0\n", ka);
    snprintf(line, sizeof(line), "W 2 %u 4", sa);
    expect_line(c, line);
    tk_tc_send(c, "S 3\n");
    snprintf(line, sizeof(line), "S 3 4 %s", body);
    expect_line(c, line);
    cr_drop(c);
    /* Keys held per range: bob's (the workers publish every few ms). */
    static char st[1 << 17];
    bool seen = false;
    for (uint64_t end = tk_test_ms() + 5000; !seen && tk_test_ms() < end; usleep(20 * 1000)) {
        cr_assert_eq(tk_cluster_status(&B, lb, st, sizeof(st)), 200);
        seen = strstr(st, "\"ranges_owned\":[{\"first\":8192,\"last\":16383,\"held\":1}]");
    }
    cr_assert(seen, "one key held in 8192-16383: %s", st);

    /* /status and /metrics say what the group owns. */
    cr_assert_eq(cr_status_u64(&A, la, "ring_version"), 4);
    cr_assert_eq(cr_status_u64(&A, la, "slots_owned"), 8192);
    static char metrics[1 << 18];
    cr_assert_eq(tk_http_get(A.node[la].port + 2, "/metrics", metrics, sizeof(metrics)), 200);
    uint64_t v = 0;
    cr_assert(tk_metric_u64(metrics, "ticketing_ring_version", &v) && v == 4, "ring_version");
    cr_assert(tk_metric_u64(metrics, "ticketing_slots_owned", &v) && v == 8192, "slots_owned");

    /* Enough entries after the ring that the log no longer holds it
     * (--max-log-entries 64): a member restarted under a fresh NodeId gets
     * the ring from a snapshot. */
    c = cr_open_node(&A, la);
    for (uint64_t i = 0; i < 300; i++) {
        tk_tc_send(c, "A %" PRIu64 " %s alice 10000 0\n", 100 + 2 * i, ka);
        uint64_t t = cr_grant(c, 100 + 2 * i);
        tk_tc_send(c, "R %" PRIu64 " %s alice %" PRIu64 "\n", 101 + 2 * i, ka, t);
        snprintf(line, sizeof(line), "R %" PRIu64, 101 + 2 * i);
        expect_line(c, line);
    }
    cr_drop(c);
    int f = (la + 1) % 3;
    cr_assert_gt(tk_node_stop(&A.node[f], SIGKILL, 5000), -1);
    cr_assert_eq(tk_cluster_restart(&A, f), 0);
    cr_assert_geq(tk_cluster_wait_ready(&A, f, 30000), 0, "the restarted member is ready");
    cr_assert_eq(cr_status_u64(&A, f, "ring_version"), 4, "the ring came with the snapshot");
    cr_assert_eq(cr_status_u64(&A, f, "slots_owned"), 8192);
    cr_assert_eq(tk_http_get(A.node[f].port + 2, "/metrics", metrics, sizeof(metrics)), 200);
    cr_assert(
        tk_metric_u64(metrics, "ticketing_raft_snapshots_total{event=\"installed\"}", &v) && v >= 1,
        "installed from a snapshot");

    /* The leader dies: the next one serves by the same ring. */
    cr_assert_gt(tk_node_stop(&A.node[la], SIGKILL, 5000), -1);
    int nl = tk_cluster_leader(&A, 20000, 1u << la);
    cr_assert(nl >= 0 && nl != la, "a new leader");
    c = cr_open_node(&A, nl);
    tk_tc_send(c, "A 1 %s carol 10000 0\n", kb);
    snprintf(line, sizeof(line), "W 1 %u 4", sb);
    expect_line(c, line);
    tk_tc_send(c, "A 2 %s carol 10000 0\n", ka);
    cr_grant(c, 2);
    cr_drop(c);
}
