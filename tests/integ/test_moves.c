/* Goal: a move of slots between two real groups (SPEC 15) under load,
 * with the source's leader killed in the middle: the keys of the moving
 * slots never have two holders, their tokens strictly increase across the
 * groups, the move completes (ticketctl slots move, resumed by running it
 * again if a step was left unanswered), and each group ends owning what
 * the new ring says.
 *
 * Method: two groups of three ticketingd (6 processes); chaos_client
 * (tests/chaos) with a client per group, contending on keys of slots
 * 0-99, sending to the other group on W, writing its history; ticketctl
 * slots move as a child process; the source's leader killed with SIGKILL
 * while the move runs; tests/chaos/check.py --groups judges the history
 * (one holder, tokens, complete, indeterminate, lease kept). */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/tk.h"
#include "tests/support/tk_cluster_cr.h"

#define TICKETCTL TK_BIN_DIR "/ticketctl"
#define CHAOS_CLIENT TK_BIN_DIR "/tests/chaos_client"
#define CHECK TK_SRC_DIR "/tests/chaos/check.py"

static struct tk_cluster A, B;
/* Snapshots often: the fresh member of the restarted leader gets the
 * moves through one. */
static const char *const EXTRA_A[] = {"--group", "sales-a", "--max-log-entries", "64", NULL};
static const char *const EXTRA_B[] = {"--group", "sales-b", NULL};
static char dir[512];

static void teardown(void)
{
    if (dir[0] && !A.keep_logs) {
        char cmd[600];
        snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", dir);
    }
    tk_cluster_stop(&A);
    tk_cluster_stop(&B);
}

/* The ring file: version v, slots 0..at_b-1 at B (none if 0), A to 8191. */
static void write_ring(const char *path, uint64_t v, uint32_t at_b)
{
    char a[256], b[256];
    tk_cluster_client_addrs(&A, a, sizeof(a));
    tk_cluster_client_addrs(&B, b, sizeof(b));
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fprintf(f, "version %" PRIu64 "\n", v);
    if (at_b)
        fprintf(f, "0-%u=sales-b@%s\n", at_b - 1, b);
    fprintf(f, "%u-8191=sales-a@%s\n8192-16383=sales-b@%s\n", at_b, a, b);
    fclose(f);
}

static pid_t spawn_sh(const char *cmd, const char *log)
{
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        char line[8192];
        snprintf(line, sizeof(line), "exec %s >%s 2>&1", cmd, log);
        execl("/bin/sh", "sh", "-c", line, (char *)NULL);
        _exit(127);
    }
    return pid;
}

static int wait_exit(pid_t pid)
{
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void show_file(const char *path)
{
    char cmd[800];
    snprintf(cmd, sizeof(cmd), "tail -n 40 %s >&2", path);
    if (system(cmd) != 0)
        fprintf(stderr, "(no %s)\n", path);
}

TestSuite(moves, .fini = teardown, .timeout = 300);

Test(moves, slots_move_under_load_while_the_source_leader_dies)
{
    cr_assert_eq(tk_cluster_start(&A, 3, EXTRA_A), 0, "group sales-a");
    cr_assert_eq(tk_cluster_start(&B, 3, EXTRA_B), 0, "group sales-b");
    snprintf(dir, sizeof(dir), "%s/moves", A.node[0].dir);
    char out[16384], ring1[700], ring2[700], cmd[4096];
    snprintf(cmd, sizeof(cmd), "mkdir -p %s", dir);
    cr_assert_eq(system(cmd), 0);
    snprintf(ring1, sizeof(ring1), "%s/ring1.txt", dir);
    snprintf(ring2, sizeof(ring2), "%s/ring2.txt", dir);
    write_ring(ring1, 1, 0);
    write_ring(ring2, 2, 100);
    for (int g = 0; g < 2; g++) {
        struct tk_cluster *c = g ? &B : &A;
        int rc = tk_run_cmd(
            out, sizeof(out),
            "%s ring apply %s --group %s --peers %s --peer-secret-file %s --timeout 20s", TICKETCTL,
            ring1, g ? "sales-b" : "sales-a", c->peers, c->node[0].peer_secret_file);
        cr_assert_eq(rc, 0, "ring apply: exit %d\n%s", rc, out);
    }

    /* Load on 6 keys of slots 0-99: 2 s before the move, through it, after. */
    char a[256], b[256], hist[700], clog[700];
    tk_cluster_client_addrs(&A, a, sizeof(a));
    tk_cluster_client_addrs(&B, b, sizeof(b));
    snprintf(hist, sizeof(hist), "%s/hist-c0.jsonl", dir);
    snprintf(clog, sizeof(clog), "%s/client.log", dir);
    snprintf(cmd, sizeof(cmd),
             "%s --addrs %s --secret-file %s --addrs-b %s --secret-file-b %s --slots 0-99 "
             "--out %s --name c0 --threads 6 --keys 6 --lease-ms 1500 --wait-ms 1000 "
             "--seconds 14 --hold-max-ms 40 --abandon-pct 5 --seed 7",
             CHAOS_CLIENT, a, A.node[0].secret_file, b, B.node[0].secret_file, hist);
    pid_t load = spawn_sh(cmd, clog);
    usleep(2000 * 1000);

    /* The move, with the source's leader killed while it runs. */
    char mlog[700];
    snprintf(mlog, sizeof(mlog), "%s/move.log", dir);
    snprintf(cmd, sizeof(cmd),
             "%s slots move 0-99 --group sales-a --to sales-b --ring %s --peers %s "
             "--to-peers %s --peer-secret-file %s --to-peer-secret-file %s --timeout 20s "
             "--wait 30s -v",
             TICKETCTL, ring2, A.peers, B.peers, A.node[0].peer_secret_file,
             B.node[0].peer_secret_file);
    uint64_t t0 = tk_test_ms();
    pid_t mover = spawn_sh(cmd, mlog);
    int la = tk_cluster_leader(&A, 5000, 0);
    cr_assert_geq(la, 0);
    /* Killed as soon as it has frozen the slots (or after 3 s). */
    for (uint64_t end = tk_test_ms() + 3000; tk_test_ms() < end; usleep(20 * 1000))
        if (cr_status_u64(&A, la, "slots_frozen") > 0)
            break;
    cr_assert_geq(tk_node_stop(&A.node[la], SIGKILL, 5000), 0);
    int rc = wait_exit(mover);
    if (rc != 0) {
        /* A step sent to the dying leader may have gone unanswered: the
         * same command resumes. */
        show_file(mlog);
        mover = spawn_sh(cmd, mlog);
        rc = wait_exit(mover);
    }
    uint64_t took = tk_test_ms() - t0;
    if (rc != 0)
        show_file(mlog);
    cr_assert_eq(rc, 0, "slots move: exit %d", rc);
    fprintf(stderr, "moves: slots 0-99 moved in %llu ms with the source's leader killed\n",
            (unsigned long long)took);

    /* The other groups' rings are the operator's next step; then a
     * restarted member of the source learns it all through its log or a
     * snapshot. */
    cr_assert_eq(tk_cluster_restart(&A, la), 0);
    cr_assert_geq(tk_cluster_wait_ready(&A, la, 20000), 0, "the restarted member rejoined");
    int rc_load = wait_exit(load);
    if (rc_load != 0)
        show_file(clog);
    cr_assert_eq(rc_load, 0, "chaos_client: exit %d", rc_load);

    rc = tk_run_cmd(out, sizeof(out), "python3 %s --groups %s", CHECK, dir);
    fprintf(stderr, "%s", out);
    if (rc != 0)
        A.keep_logs = true;
    cr_assert_eq(rc, 0, "the history checker found a violation (kept in %s)", dir);
    /* Both groups granted the moved keys: A before the move, B after (B
     * serves no other key of the load; the clients route by the ring, so
     * "g" in the history says which client asked, not which group). */
    rc = tk_run_cmd(out, sizeof(out), "grep -ci '\"outcome\":\"acquired\".*\"g\":0' %s", hist);
    cr_assert_eq(rc, 0, "no key was granted through the source's client");
    int na = tk_cluster_leader(&A, 10000, 0), nb = tk_cluster_leader(&B, 10000, 0);
    cr_assert(na >= 0 && nb >= 0);
    cr_assert_gt(cr_status_u64(&B, nb, "grants"), 0, "no key was granted by the target group");
    cr_assert_eq(cr_status_u64(&A, na, "slots_owned"), 8092);
    cr_assert_eq(cr_status_u64(&A, na, "slots_frozen"), 0);
    cr_assert_eq(cr_status_u64(&B, nb, "slots_owned"), 8292);
    cr_assert_eq(cr_status_u64(&A, la, "ring_version"), 2, "the restarted member has the ring");
    cr_assert_eq(cr_status_u64(&A, la, "slots_owned"), 8092);
    /* The same move again: every step answered done. */
    rc = tk_run_cmd(out, sizeof(out), "%s", cmd);
    cr_assert_eq(rc, 0, "the move run again: exit %d\n%s", rc, out);
    cr_assert(strstr(out, "moved from group sales-a to group sales-b"), "%s", out);
    /* Slots the source no longer owns: refused with a sentence, nothing
     * changed. */
    write_ring(ring1, 3, 200);
    rc = tk_run_cmd(out, sizeof(out),
                    "%s slots move 0-199 --group sales-a --to sales-b --ring %s --peers %s "
                    "--to-peers %s --peer-secret-file %s --to-peer-secret-file %s --timeout 20s",
                    TICKETCTL, ring1, A.peers, B.peers, A.node[0].peer_secret_file,
                    B.node[0].peer_secret_file);
    cr_assert_eq(rc, 84, "exit %d\n%s", rc, out);
    cr_assert(strstr(out, "freeze: refused by group sales-a: group 'sales-a' does not own slot 0"),
              "%s", out);
    cr_assert_eq(cr_status_u64(&A, na, "slots_frozen"), 0);
    cr_assert_eq(cr_status_u64(&A, na, "ring_version"), 2);
}
