/* /metrics of real ticketingd processes (docs/metrics.md).
 *
 * Goal: the labelled request and response counters move by exactly what a
 * client did; the latency histograms count every grant (and the wait
 * histogram every waiter granted); ticketing_build_info matches
 * `ticketingd --version`; the process_* metrics agree with what /proc says
 * about the process; on a cluster's leader ticketing_peer_link_up is 1 for
 * both other members and drops to 0 for a killed one; promtool accepts the
 * text; and every family the server exposes is documented in
 * docs/metrics.md with the same type, so the document cannot drift.
 *
 * Method: a standalone node with two workers (so keys live on different
 * shards and the histograms are summed over workers) driven over real
 * connections, and a 3-node cluster (tuned timers, as in test_cluster.c).
 * Counters are published every 50 ms: a test polls until the expected
 * value shows and fails if it never does.
 */
#include <criterion/criterion.h>
#include <ctype.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/support/tk_cluster_cr.h"

#define BODY_MAX (1 << 18)
#define DOC_PATH TK_SRC_DIR "/docs/metrics.md"

static struct tk_node node;
static struct tk_cluster cl;
static char body[BODY_MAX];

static void teardown(void)
{
    if (node.pid > 0)
        tk_node_stop(&node, SIGTERM, 5000);
    tk_node_cleanup(&node);
    tk_cluster_stop(&cl);
}

TestSuite(metrics, .fini = teardown, .timeout = 120);

static void scrape(uint32_t port)
{
    cr_assert_eq(tk_http_get(port + 2, "/metrics", body, sizeof(body)), 200);
}

/* The value of the sample `name` (labels included) as a double. */
static bool sample(const char *text, const char *name, double *out)
{
    char pat[256];
    snprintf(pat, sizeof(pat), "\n%s ", name);
    const char *p = strstr(text, pat);
    if (p == NULL)
        return false;
    *out = strtod(p + strlen(pat), NULL);
    return true;
}

static double need(const char *text, const char *name)
{
    double v = 0;
    cr_assert(sample(text, name, &v), "no sample %s in:\n%s", name, text);
    return v;
}

/* Polls port's /metrics until sample name equals want. */
static void await_sample(uint32_t port, const char *name, double want)
{
    double v = -1;
    for (int i = 0; i < 500; i++) {
        scrape(port);
        if (sample(body, name, &v) && v == want)
            return;
        usleep(20000);
    }
    cr_assert_fail("%s stayed at %g, wanted %g:\n%s", name, v, want, body);
}

static void expect_line(struct tk_tc *c, const char *want)
{
    char line[256];
    cr_assert(tk_tc_line(c, line, sizeof(line), 10000) >= 0, "no line, wanted '%s'", want);
    cr_assert_str_eq(line, want);
}

/* `promtool check metrics` on the body: it must be installed (setup.sh). */
static void promtool_accepts(const char *text)
{
    char path[] = "/tmp/tk-metrics-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    size_t len = strlen(text);
    cr_assert_eq(write(fd, text, len), (ssize_t)len);
    close(fd);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "promtool check metrics < %s 2>&1", path);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    char out[4096];
    size_t n = fread(out, 1, sizeof(out) - 1, p);
    out[n] = 0;
    int rc = pclose(p);
    unlink(path);
    cr_assert_eq(rc, 0, "promtool check metrics failed (is promtool installed?):\n%s", out);
}

/* ---------------------------------------------------------------- */
/* The families of docs/metrics.md: table rows "| `name` | type | ...". */

#define DOC_FAMILIES_MAX 256

struct doc_family {
    char name[96];
    char type[16];
};

static int doc_families(struct doc_family *out, int cap)
{
    FILE *f = fopen(DOC_PATH, "r");
    cr_assert_not_null(f, "cannot open %s", DOC_PATH);
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof(line), f) != NULL && n < cap) {
        char name[96], type[16];
        if (sscanf(line, "| `%95[a-z_:]` | %15[a-z] |", name, type) != 2)
            continue;
        snprintf(out[n].name, sizeof(out[n].name), "%s", name);
        snprintf(out[n].type, sizeof(out[n].type), "%s", type);
        n++;
    }
    fclose(f);
    return n;
}

/* Every "# TYPE name type" of the text has a row with that type. */
static void all_documented(const char *text)
{
    static struct doc_family doc[DOC_FAMILIES_MAX];
    int ndoc = doc_families(doc, DOC_FAMILIES_MAX);
    cr_assert_gt(ndoc, 20, "docs/metrics.md lists only %d families", ndoc);
    int seen = 0;
    for (const char *p = strstr(text, "# TYPE "); p != NULL; p = strstr(p + 1, "# TYPE ")) {
        char name[96], type[16];
        cr_assert_eq(sscanf(p, "# TYPE %95s %15s", name, type), 2);
        bool found = false;
        for (int i = 0; i < ndoc && !found; i++) {
            if (strcmp(doc[i].name, name) == 0) {
                cr_assert_str_eq(doc[i].type, type, "%s: documented as %s, exposed as %s", name,
                                 doc[i].type, type);
                found = true;
            }
        }
        cr_assert(found, "%s (%s) is exposed but not in docs/metrics.md", name, type);
        seen++;
    }
    cr_assert_gt(seen, 20);
}

/* ---------------------------------------------------------------- */
/* Standalone node */

/* utime + stime of pid in seconds, from /proc/<pid>/stat. */
static double proc_cpu_seconds(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *p = strrchr(buf, ')');
    cr_assert_not_null(p);
    unsigned long long ut, st;
    cr_assert_eq(sscanf(p + 1, " %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %llu %llu", &ut, &st),
                 2);
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* The soft "Max open files" of pid, from /proc/<pid>/limits. */
static double proc_max_fds(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/limits", (int)pid);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    double v = -2;
    while (fgets(line, sizeof(line), f) != NULL) {
        char soft[32];
        if (sscanf(line, "Max open files %31s", soft) == 1)
            v = strcmp(soft, "unlimited") == 0 ? -1 : strtod(soft, NULL);
    }
    fclose(f);
    return v;
}

static uint64_t grant_token(struct tk_tc *c, uint64_t id)
{
    return cr_grant(c, id);
}

Test(metrics, standalone_counts_what_a_client_did)
{
    time_t t0 = time(NULL);
    const char *const args[] = {"--threads", "2", NULL};
    cr_assert_eq(tk_node_start(&node, args), 0, "ticketingd did not start");
    struct tk_tc *a = malloc(sizeof(*a)), *b = malloc(sizeof(*b));
    cr_assert_eq(tk_tc_open(a, node.port, TK_TEST_SECRET), 0);
    cr_assert_eq(tk_tc_open(b, node.port, TK_TEST_SECRET), 0);

    /* Acquires 5 (3 granted, one of them after waiting), releases 4
     * (3 released, 1 not held), 1 query, 1 ping, 1 invalid line. */
    tk_tc_send(a, "A 1 k1 alice 30000 0\n");
    uint64_t t1 = grant_token(a, 1);
    tk_tc_send(a, "A 2 k2 alice 30000 0\n");
    uint64_t t2 = grant_token(a, 2);
    tk_tc_send(b, "A 3 k1 bob 30000 0\n");
    expect_line(b, "B 3");
    tk_tc_send(b, "A 4 k1 bob 30000 50\n");
    expect_line(b, "T 4");
    tk_tc_send(b, "A 5 k1 bob 30000 30000\n");
    await_sample(node.port, "ticketing_waiters", 1);
    tk_tc_send(a, "R 6 k1 alice %" PRIu64 "\n", t1);
    expect_line(a, "R 6");
    uint64_t t5 = grant_token(b, 5);
    tk_tc_send(a, "Q 7 k2\n");
    char want[128];
    snprintf(want, sizeof(want), "Q 7 alice %" PRIu64 " 0", t2);
    expect_line(a, want);
    tk_tc_send(a, "P 8\n");
    expect_line(a, "P 8");
    tk_tc_send(a, "R 9 k2 alice %" PRIu64 "\n", t2 + 1000);
    expect_line(a, "N 9");
    tk_tc_send(a, "A 10 k3 alice 0 0\n");
    expect_line(a, "E 10 lease");
    tk_tc_send(a, "R 11 k2 alice %" PRIu64 "\n", t2);
    expect_line(a, "R 11");
    tk_tc_send(b, "R 12 k1 bob %" PRIu64 "\n", t5);
    expect_line(b, "R 12");

    /* alice's first release handed k1 to bob: a handoff, not a release. */
    await_sample(node.port, "ticketing_releases_total", 2);
    await_sample(node.port, "ticketing_responses_total{result=\"released\"}", 3);
    double cpu_before = proc_cpu_seconds(node.pid);
    scrape(node.port);
    double cpu_after = proc_cpu_seconds(node.pid);
    const struct {
        const char *name;
        double v;
    } want_counts[] = {
        {"ticketing_requests_total{type=\"acquire\"}", 5},
        {"ticketing_requests_total{type=\"release\"}", 4},
        {"ticketing_requests_total{type=\"query\"}", 1},
        {"ticketing_requests_total{type=\"ping\"}", 1},
        {"ticketing_requests_total{type=\"invalid\"}", 1},
        {"ticketing_responses_total{result=\"granted\"}", 3},
        {"ticketing_responses_total{result=\"released\"}", 3},
        {"ticketing_responses_total{result=\"busy\"}", 1},
        {"ticketing_responses_total{result=\"timeout\"}", 1},
        {"ticketing_responses_total{result=\"not_held\"}", 1},
        {"ticketing_responses_total{result=\"query\"}", 1},
        {"ticketing_responses_total{result=\"moved\"}", 0},
        {"ticketing_grants_total", 3},
        {"ticketing_handoffs_total", 1},
        {"ticketing_acquire_seconds_count", 3},
        {"ticketing_acquire_seconds_bucket{le=\"+Inf\"}", 3},
        {"ticketing_wait_seconds_count", 1},
        {"ticketing_waiters", 0},
        {"ticketing_held", 0},
    };
    for (size_t i = 0; i < sizeof(want_counts) / sizeof(want_counts[0]); i++)
        cr_assert_eq(need(body, want_counts[i].name), want_counts[i].v, "%s:\n%s",
                     want_counts[i].name, body);
    /* bob queued for a whole round trip of alice's release. */
    cr_assert_gt(need(body, "ticketing_wait_seconds_sum"), 0);
    cr_assert_geq(need(body, "ticketing_acquire_seconds_sum"),
                  need(body, "ticketing_wait_seconds_sum"));
    cr_assert_eq(strstr(body, "ticketing_req_"), NULL, "old flat families are gone");

    /* ticketing_build_info agrees with --version. */
    FILE *p = popen(TK_BIN_DIR "/ticketingd --version", "r");
    cr_assert_not_null(p);
    char version[64] = "", commit[64] = "";
    cr_assert_eq(fscanf(p, "ticketingd %63s (commit %63[^)])", version, commit), 2);
    cr_assert_eq(pclose(p), 0);
    char info[256];
    snprintf(info, sizeof(info), "ticketing_build_info{version=\"%s\",commit=\"%s\"}", version,
             commit);
    cr_assert_eq(need(body, info), 1, "%s missing:\n%s", info, body);

    /* process_* agree with /proc. */
    double cpu = need(body, "process_cpu_seconds_total");
    cr_assert(cpu >= cpu_before && cpu <= cpu_after, "cpu %g not in [%g, %g]", cpu, cpu_before,
              cpu_after);
    cr_assert_gt(need(body, "process_resident_memory_bytes"), 0);
    cr_assert_geq(need(body, "process_virtual_memory_bytes"),
                  need(body, "process_resident_memory_bytes"));
    /* Listeners, the io_urings, the two clients and the scrape itself. */
    cr_assert_gt(need(body, "process_open_fds"), 4);
    cr_assert_eq(need(body, "process_max_fds"), proc_max_fds(node.pid));
    /* starttime is kept in clock ticks and btime in whole seconds. */
    double start = need(body, "process_start_time_seconds");
    cr_assert(start >= (double)t0 - 2 && start <= (double)time(NULL) + 2, "start %f, test %lld",
              start, (long long)t0);

    promtool_accepts(body);
    all_documented(body);
    cr_drop(a);
    cr_drop(b);
    /* Under the sanitizers a report makes the exit status non-zero. */
    int st = tk_node_stop(&node, SIGTERM, 10000);
    cr_assert(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0,
              "ticketingd did not exit cleanly on SIGTERM (status %d)", st);
}

/* ---------------------------------------------------------------- */
/* Cluster */

static const char *const fast[] = {"--heartbeat-ms", "50", "--election-ms", "400", NULL};

static void peer_name(char *out, size_t cap, const char *family, uint64_t id)
{
    snprintf(out, cap, "%s{peer=\"%016" PRIx64 "\"}", family, id);
}

Test(metrics, cluster_peer_links_and_member_metrics)
{
    cr_assert_eq(tk_cluster_start(&cl, 3, fast), 0, "cluster did not elect a leader");
    int l = tk_cluster_leader(&cl, 5000, 0);
    cr_assert_geq(l, 0);
    uint64_t id[3];
    for (int i = 0; i < 3; i++)
        id[i] = tk_cluster_node_id(&cl, i);
    char name[128];
    for (int i = 0; i < 3; i++) {
        if (i == l)
            continue;
        peer_name(name, sizeof(name), "ticketing_peer_link_up", id[i]);
        await_sample(cl.node[l].port, name, 1);
    }
    scrape(cl.node[l].port);
    cr_assert_eq(need(body, "ticketing_raft_is_leader"), 1);
    for (int i = 0; i < 3; i++) {
        snprintf(name, sizeof(name),
                 "ticketing_raft_member_lag_entries{peer=\"%016" PRIx64 "\",role=\"voter\"}",
                 id[i]);
        cr_assert_geq(need(body, name), 0);
        peer_name(name, sizeof(name), "ticketing_peer_link_up", id[i]);
        double v = 0;
        cr_assert_eq(sample(body, name, &v), i != l, "a link to itself is not reported");
        peer_name(name, sizeof(name), "ticketing_raft_member_last_contact_seconds", id[i]);
        cr_assert_eq(sample(body, name, &v), i != l);
        if (i != l)
            cr_assert_geq(v, 0);
    }
    cr_assert_eq(strstr(body, "lag_entries{id="), NULL, "the label is peer=, not id=");
    promtool_accepts(body);
    all_documented(body);

    /* A follower: links to both others, no leader-only families. */
    int f = (l + 1) % 3, other = (l + 2) % 3;
    peer_name(name, sizeof(name), "ticketing_peer_link_up", id[l]);
    await_sample(cl.node[f].port, name, 1);
    cr_assert_eq(strstr(body, "ticketing_raft_member_lag_entries"), NULL);
    promtool_accepts(body);

    /* Kill a follower: the leader's link to it goes down, the other stays. */
    tk_node_stop(&cl.node[f], SIGKILL, 5000);
    peer_name(name, sizeof(name), "ticketing_peer_link_up", id[f]);
    await_sample(cl.node[l].port, name, 0);
    peer_name(name, sizeof(name), "ticketing_peer_link_up", id[other]);
    cr_assert_eq(need(body, name), 1);
}
