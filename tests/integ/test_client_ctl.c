/* Goal: ticketctl keeps its contract (docs/client.md): `run` holds the lock
 * while a command runs (mutual exclusion between concurrent runs, the
 * token in the environment, the command's exit code passed through, the
 * command stopped when the lease runs out), every outcome has its own exit
 * code, and acquire/release/query/ping/status/members print what scripts
 * need; members shows the leader's view whichever member it asks, and
 * reads the /status of a server too old to have /members;
 * remove-member removes a stopped member (which exits 3 when it wakes)
 * but never a live one, and only with the peer secret; ring show prints
 * a node's ring (none yet: version 0) and a key another group serves
 * exits 84 with its slot.
 *
 * Method: the real ticketctl binary against a real ticketingd, run as child
 * processes with TICKETING_ADDR / TICKETING_SECRET_FILE; the indeterminate
 * case goes through tk_proxy holding the server's answers; members also
 * runs against a real 3-node cluster (fast timers), healthy and with the
 * majority killed, and remove-member against it with a follower
 * SIGSTOPped. Time bounds are loose protocol deadlines only.
 */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/support/tk_cluster.h"
#include "tests/support/tk_proxy.h"
#include "tests/support/tk_test.h"

#define TICKETCTL TK_BIN_DIR "/ticketctl"

/* ---- fixture ---------------------------------------------------------------- */

static struct tk_node node;
static char dir[] = "/tmp/tk-ctl-XXXXXX";
static char env_addr[64];
static char env_secret[400];

static void setup(void)
{
    static const char *const args[] = {"--threads", "2", NULL};
    /* tk_node_start() returns once the node serves: before it has
     * elected itself it answers M, which would fail hold(). */
    cr_assert_eq(tk_node_start(&node, args), 0, "ticketingd did not start (or never served)");
    cr_assert(mkdtemp(dir) != NULL);
    snprintf(env_addr, sizeof env_addr, "TICKETING_ADDR=127.0.0.1:%u", node.port);
    snprintf(env_secret, sizeof env_secret, "TICKETING_SECRET_FILE=%s", node.secret_file);
}

static void remove_dir(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

static void teardown(void)
{
    if (node.pid > 0)
        tk_node_stop(&node, SIGTERM, 10000);
    tk_node_cleanup(&node);
    remove_dir();
}

/* The members tests' cluster, in its own suite: the standalone node above
 * is not needed there. */
static struct tk_cluster cl;

static void setup_cluster(void)
{
    static const char *const fast[] = {"--heartbeat-ms", "50", "--election-ms", "400", NULL};
    cr_assert(mkdtemp(dir) != NULL);
    cr_assert_eq(tk_cluster_start(&cl, 3, fast), 0, "the cluster did not elect a leader");
    snprintf(env_addr, sizeof env_addr, "TICKETING_ADDR=127.0.0.1:%u", cl.node[0].port);
    snprintf(env_secret, sizeof env_secret, "TICKETING_SECRET_FILE=%s", cl.node[0].secret_file);
}

static void teardown_cluster(void)
{
    tk_cluster_stop(&cl);
    remove_dir();
}

/* ---- helpers ------------------------------------------------------------------ */

struct ctl {
    pid_t pid;
    char out[300]; /* stdout and stderr */
};

/* Starts ticketctl with args (NULL-terminated) and the node's address and
 * secret in the environment; "NAME=value" in env overrides, a bare "NAME"
 * unsets. */
static void ctl_start(struct ctl *c, const char *const *args, const char *const *env)
{
    static unsigned seq;
    char *argv[64];
    int a = 0;
    snprintf(c->out, sizeof c->out, "%s/out-%u-%u", dir, (unsigned)getpid(), seq++);
    argv[a++] = TICKETCTL;
    for (int i = 0; args[i] != NULL && a < 63; i++)
        argv[a++] = (char *)args[i];
    argv[a] = NULL;
    c->pid = fork();
    cr_assert(c->pid >= 0);
    if (c->pid == 0) {
        int fd = open(c->out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        putenv(env_addr);
        putenv(env_secret);
        unsetenv("TICKETING_OWNER");
        for (int i = 0; env != NULL && env[i] != NULL; i++) {
            if (strchr(env[i], '='))
                putenv((char *)env[i]);
            else
                unsetenv(env[i]);
        }
        execv(argv[0], argv);
        _exit(127);
    }
}

/* Waits for it; returns the exit code (or 1000 + signal, or -1 on timeout). */
static int ctl_wait(struct ctl *c, int limit_ms)
{
    uint64_t end = tk_test_ms() + (uint64_t)limit_ms;
    for (;;) {
        int st;
        if (waitpid(c->pid, &st, WNOHANG) == c->pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 1000 + WTERMSIG(st);
        if (tk_test_ms() >= end) {
            kill(c->pid, SIGKILL);
            waitpid(c->pid, &st, 0);
            return -1;
        }
        usleep(5000);
    }
}

static char *slurp(const char *path)
{
    static char buf[1 << 16];
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    buf[n] = '\0';
    if (f)
        fclose(f);
    return buf;
}

/* Runs ticketctl to completion; returns its exit code; its output in *out. */
static int ctl(const char *const *args, const char *const *env, char **out)
{
    struct ctl c;
    ctl_start(&c, args, env);
    int code = ctl_wait(&c, 60000);
    char *text = slurp(c.out);
    if (out != NULL)
        *out = text;
    return code;
}

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

#define expect_exit(args, env, want)                                                       \
    do {                                                                                   \
        char *out_;                                                                        \
        int got_ = ctl(args, env, &out_);                                                  \
        cr_assert_eq(got_, (want), "exit %d, wanted %d; output:\n%s", got_, (want), out_); \
    } while (0)

/* Holds key over a plain connection (closing it does not release it). */
static void hold(const char *key)
{
    static struct tk_tc t; /* 64 KiB of buffer: not on the stack */
    char line[256];
    cr_assert_eq(tk_tc_open(&t, node.port, TK_TEST_SECRET), 0);
    tk_tc_send(&t, "A 1 %s someone-else 60000 0\n", key);
    int n = tk_tc_line(&t, line, sizeof line, 5000);
    tk_tc_close(&t);
    cr_assert(n > 0);
    cr_assert_eq(line[0], 'G', "got '%s'", line);
}

/* ---- run ------------------------------------------------------------------------ */

TestSuite(ctl, .init = setup, .fini = teardown, .timeout = 180);

Test(ctl, run_passes_the_token_and_the_exit_code_and_releases)
{
    char *out;
    expect_exit(ARGS("run", "job", "--", "sh", "-c",
                     "test \"$TICKETING_KEY\" = job && test -n \"$TICKETING_TOKEN\" && "
                     "test -n \"$TICKETING_OWNER\" && exit 7"),
                NULL, 7);
    cr_assert_eq(ctl(ARGS("query", "job", "--json"), NULL, &out), 0);
    cr_assert(strstr(out, "\"held\":false") != NULL, "not released: %s", out);
    expect_exit(ARGS("run", "job", "sh", "-c", "kill -TERM $$"), NULL, 128 + SIGTERM);
    expect_exit(ARGS("run", "job", "--", "/nonexistent/command"), NULL, 127);
}

Test(ctl, concurrent_runs_exclude_each_other)
{
    enum { RUNS = 4 };
    char file[300], script[800];
    struct ctl c[RUNS];
    snprintf(file, sizeof file, "%s/log", dir);
    snprintf(script, sizeof script,
             "echo start $TICKETING_TOKEN >> %s; sleep 0.3; echo end $TICKETING_TOKEN >> %s", file,
             file);
    for (int i = 0; i < RUNS; i++)
        ctl_start(&c[i], ARGS("run", "mutex", "--wait", "60s", "--", "sh", "-c", script), NULL);
    for (int i = 0; i < RUNS; i++)
        cr_assert_eq(ctl_wait(&c[i], 90000), 0, "run %d: %s", i, slurp(c[i].out));
    /* The log must read start A, end A, start B, end B, ...: no interleaving,
     * and tokens increasing. */
    FILE *f = fopen(file, "r");
    cr_assert(f);
    char what[16];
    unsigned long long token, open_token = 0, last = 0;
    int lines = 0;
    while (fscanf(f, "%15s %llu", what, &token) == 2) {
        if (lines % 2 == 0) {
            cr_assert_str_eq(what, "start", "line %d: two holders at once", lines);
            cr_assert_gt(token, last, "tokens must increase");
            open_token = token;
        } else {
            cr_assert_str_eq(what, "end", "line %d", lines);
            cr_assert_eq(token, open_token, "line %d: another holder's end", lines);
            last = token;
        }
        lines++;
    }
    fclose(f);
    cr_assert_eq(lines, 2 * RUNS);
}

Test(ctl, run_stops_the_command_when_the_lease_runs_out)
{
    uint64_t t0 = tk_test_ms();
    expect_exit(ARGS("run", "short", "--lease", "1s", "--", "sleep", "20"), NULL, 85);
    cr_assert_lt(tk_test_ms() - t0, 5000);
}

/* ---- exit codes -------------------------------------------------------------------- */

Test(ctl, outcomes_have_their_exit_codes)
{
    char closed[64];
    hold("taken");
    expect_exit(ARGS("acquire", "taken", "--wait", "0"), NULL, 80);
    expect_exit(ARGS("run", "taken", "--wait", "0", "--", "true"), NULL, 80);
    uint64_t t0 = tk_test_ms();
    expect_exit(ARGS("run", "taken", "--wait", "300ms", "--", "true"), NULL, 81);
    cr_assert_geq(tk_test_ms() - t0, 250);
    expect_exit(ARGS("acquire", "k", "--lease", "500ms"), NULL, 84);
    expect_exit(ARGS("acquire", "bad\001key"), NULL, 84);
    expect_exit(ARGS("release", "k", "--token", "5", "--owner", "me"), NULL, 86);
    snprintf(closed, sizeof closed, "--addr=127.0.0.1:%u", tk_free_port3());
    expect_exit(ARGS(closed, "acquire", "k", "--wait", "0"), NULL, 83);
    expect_exit(ARGS(closed, "ping", "--timeout", "300ms"), NULL, 83);
    expect_exit(ARGS(closed, "status", "--timeout", "300ms"), NULL, 83);
    expect_exit(ARGS(closed, "members", "--timeout", "300ms"), NULL, 83);
}

Test(ctl, usage_errors_exit_64)
{
    expect_exit(ARGS("--json"), NULL, 64);
    expect_exit(ARGS("frobnicate"), NULL, 64);
    expect_exit(ARGS("run", "k"), NULL, 64);
    expect_exit(ARGS("run", "k", "--"), NULL, 64);
    expect_exit(ARGS("acquire"), NULL, 64);
    expect_exit(ARGS("acquire", "k", "--wait", "5"), NULL, 64);
    expect_exit(ARGS("acquire", "k", "--lease", "30x"), NULL, 64);
    expect_exit(ARGS("acquire", "k", "--bogus", "1"), NULL, 64);
    expect_exit(ARGS("release", "k", "--owner", "me"), NULL, 64);
    expect_exit(ARGS("release", "k", "--token", "5"), NULL, 64);
    expect_exit(ARGS("ping"), ARGS("TICKETING_ADDR"), 64);
    expect_exit(ARGS("ping"), ARGS("TICKETING_SECRET_FILE"), 64);
    expect_exit(ARGS("ping", "--secret-file", "/nonexistent"), NULL, 64);
    expect_exit(ARGS("members", "extra"), NULL, 64);
    expect_exit(ARGS("members"), ARGS("TICKETING_ADDR"), 64);
    expect_exit(ARGS("members", "--addr", "127.0.0.1"), NULL, 64);
    expect_exit(ARGS("members", "--addr", "127.0.0.1:1,nonsense"), NULL, 64);
    expect_exit(ARGS("--help"), NULL, 0);
}

/* Every command checks --addr (and remove-member its --peers) before it
 * asks anything, with core/addr.h's reasons. */
Test(ctl, a_bad_address_exits_64_with_its_reason)
{
    static const struct {
        const char *cmd, *flag, *value, *said;
    } bad[] = {
        {"ping", "--addr", "::1:7400",
         "bad --addr: '::1:7400': an IPv6 address must be in brackets, as in [::1]:7400"},
        {"query", "--addr", "127.0.0.1:0",
         "bad --addr: '127.0.0.1:0': port out of range (1-65535)"},
        {"status", "--addr", "a:1,,b:2",
         "bad --addr: empty address in the list (a ',' at an end, or two together)"},
        {"members", "--addr", "a:1,b:2,c:3,d:4,e:5,f:6,g:7,h:8,i:9",
         "bad --addr: more than 8 addresses"},
        {"status", "--addr", "127.0.0.1:65535",
         "bad --addr: '127.0.0.1:65535': its admin port (client port + 2) is past 65535"},
        {"remove-member", "--peers", "a:7401,b", "bad --peers: 'b': missing port (want host:port)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *out;
        const char *key = strcmp(bad[i].cmd, "query") == 0           ? "k"
                          : strcmp(bad[i].cmd, "remove-member") == 0 ? "00000000000000ab"
                                                                     : NULL;
        int got = key ? ctl(ARGS(bad[i].cmd, key, bad[i].flag, bad[i].value), NULL, &out)
                      : ctl(ARGS(bad[i].cmd, bad[i].flag, bad[i].value), NULL, &out);
        cr_assert_eq(got, 64, "%s %s %s: exit %d: %s", bad[i].cmd, bad[i].flag, bad[i].value, got,
                     out);
        cr_assert_not_null(strstr(out, bad[i].said), "%s %s: %s", bad[i].cmd, bad[i].value, out);
    }
}

Test(ctl, unanswered_run_is_indeterminate_and_runs_nothing)
{
    struct tk_proxy *p = tk_proxy_start(node.port);
    char addr[64], marker[300], script[400];
    cr_assert(p);
    snprintf(addr, sizeof addr, "TICKETING_ADDR=127.0.0.1:%u", tk_proxy_port(p));
    snprintf(marker, sizeof marker, "%s/ran", dir);
    snprintf(script, sizeof script, "touch %s", marker);
    /* Let each connection's handshake through (server to client: the
     * banner "TICKETING/1 <64 hex>\n", "OK <64 hex> <16 hex> <32 hex>\n" and
     * the probe's "P 0\n"), then hold every answer. */
    enum { BANNER = 12 + 64 + 1, OK_LINE = 3 + 64 + 1 + 16 + 1 + 32 + 1, PROBE = 4 };
    tk_proxy_hold_after(p, UINT64_MAX, BANNER + OK_LINE + PROBE);
    expect_exit(ARGS("run", "ind", "--wait", "0", "--grace", "300ms", "--", "sh", "-c", script),
                ARGS(addr), 82);
    cr_assert_neq(access(marker, F_OK), 0, "the command ran without a confirmed lock");
    tk_proxy_stop(p);
}

/* ---- one request each ------------------------------------------------------------ */

Test(ctl, acquire_query_release_in_json)
{
    char *out;
    unsigned long long token = 0;
    cr_assert_eq(ctl(ARGS("acquire", "j", "--json", "--owner", "batch-7"), NULL, &out), 0, "%s",
                 out);
    char *t = strstr(out, "\"token\":");
    cr_assert(t != NULL, "%s", out);
    cr_assert_eq(sscanf(t, "\"token\":%llu", &token), 1);
    cr_assert(strstr(out, "\"owner\":\"batch-7\"") != NULL, "%s", out);
    cr_assert_eq(ctl(ARGS("query", "j", "--json"), NULL, &out), 0);
    cr_assert(strstr(out, "\"held\":true,\"owner\":\"batch-7\"") != NULL, "%s", out);
    char tok[32];
    snprintf(tok, sizeof tok, "%llu", token);
    expect_exit(ARGS("release", "j", "--token", tok), ARGS("TICKETING_OWNER=batch-7"), 0);
    cr_assert_eq(ctl(ARGS("query", "j"), NULL, &out), 0);
    cr_assert(strstr(out, "j: free") != NULL, "%s", out);
}

Test(ctl, ping_and_status)
{
    char *out;
    cr_assert_eq(ctl(ARGS("ping", "--count", "3"), NULL, &out), 0, "%s", out);
    cr_assert(strstr(out, "pong") != NULL, "%s", out);
    cr_assert_eq(ctl(ARGS("status"), NULL, &out), 0, "%s", out);
    cr_assert(strstr(out, "role=") != NULL && strstr(out, "commit_index=") != NULL, "%s", out);
    cr_assert_eq(ctl(ARGS("status", "--json"), NULL, &out), 0, "%s", out);
    cr_assert(strstr(out, "\"ok\":true") != NULL && strstr(out, "\"role\"") != NULL, "%s", out);
}

/* ---- members --------------------------------------------------------------------- */

struct row {
    bool leader; /* marked '*' */
    char id[32];
    char role[16];
    char match[32];
};

/* The member lines of `ticketctl members` (header and stderr lines skipped). */
static int member_rows(const char *out, struct row *rows, int max)
{
    int n = 0;
    for (const char *l = out; *l != '\0' && n < max;) {
        size_t len = strcspn(l, "\n");
        char line[512];
        snprintf(line, sizeof line, "%.*s", (int)len, l);
        struct row *r = &rows[n];
        r->leader = line[0] == '*';
        if ((line[0] == '*' || line[0] == ' ') && line[1] == ' ' &&
            sscanf(line + 2, "%31s %*s %*s %15s %31s", r->id, r->role, r->match) == 3 &&
            strcmp(r->id, "NODE-ID") != 0)
            n++;
        l += len + (l[len] == '\n');
    }
    return n;
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

/* The "node_id" of a /status body. */
static void status_id(const char *body, char *id, size_t cap)
{
    const char *p = strstr(body, "\"node_id\":\"");
    cr_assert(p != NULL, "no node_id in %s", body);
    p += strlen("\"node_id\":\"");
    snprintf(id, cap, "%.*s", (int)strcspn(p, "\""), p);
}

Test(ctl, members_of_a_standalone_node_lists_itself_as_leader)
{
    static char body[1 << 16];
    char id[32], *out;
    struct row rows[8];
    cr_assert_eq(tk_http_get(node.port + 2, "/status", body, sizeof body), 200);
    status_id(body, id, sizeof id);
    /* No secret needed: members reads the admin port. */
    cr_assert_eq(ctl(ARGS("members"), ARGS("TICKETING_SECRET_FILE"), &out), 0, "%s", out);
    cr_assert_eq(member_rows(out, rows, 8), 1, "%s", out);
    cr_assert(rows[0].leader, "%s", out);
    cr_assert_str_eq(rows[0].id, id, "%s", out);
    cr_assert_str_eq(rows[0].role, "voter", "%s", out);
    cr_assert_eq(ctl(ARGS("members", "--json"), NULL, &out), 0, "%s", out);
    cr_assert_eq(strncmp(out, "[{\"id\":\"", 8), 0, "%s", out);
    cr_assert_eq(count(out, "\"id\":"), 1, "%s", out);
    cr_assert_eq(count(out, "\"leader\":true"), 1, "%s", out);
    cr_assert(strstr(out, "}]\n") != NULL, "%s", out);
}

/* An admin port of a server older than /members: 404 for it, and a
 * /status of that time (the leader as an id and leader_addr, each
 * member's voter flag). A child process answers up to `answers`
 * requests on 127.0.0.1:port, then exits. */
static pid_t old_admin_port(uint32_t port, int answers)
{
    static const char status[] =
        "{\"node_id\":\"00000000000000aa\",\"role\":\"leader\",\"term\":4,"
        "\"leader\":\"00000000000000aa\",\"leader_addr\":\"127.0.0.1:1\",\"serving\":true,"
        "\"membership\":\"voter\",\"members\":["
        "{\"id\":\"00000000000000aa\",\"voter\":true,\"peer_addr\":\"h:1\",\"client_addr\":\"h:0\","
        "\"match_index\":9,\"lag\":0,\"last_contact_ms\":0,\"leader\":true},"
        "{\"id\":\"00000000000000bb\",\"voter\":false,\"peer_addr\":\"i:1\",\"client_addr\":\"i:"
        "0\","
        "\"match_index\":7,\"lag\":2,\"last_contact_ms\":15,\"leader\":false}]}";
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int one = 1, fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert(fd >= 0);
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    cr_assert_eq(listen(fd, 8), 0);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid > 0) {
        close(fd);
        return pid;
    }
    for (int k = 0; k < answers; k++) {
        char req[1024], rsp[2048];
        int c = accept(fd, NULL, NULL);
        if (c < 0)
            _exit(1);
        ssize_t n = recv(c, req, sizeof req - 1, 0);
        req[n > 0 ? n : 0] = '\0';
        bool members = strncmp(req, "GET /members ", 13) == 0;
        const char *body = members ? "not found\n" : status;
        int len = snprintf(rsp, sizeof rsp,
                           "HTTP/1.1 %s\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\n"
                           "Connection: close\r\n\r\n%s",
                           members ? "404 Not Found" : "200 OK", strlen(body), body);
        if (send(c, rsp, (size_t)len, MSG_NOSIGNAL) != len)
            _exit(1);
        close(c);
    }
    _exit(0);
}

Test(ctl, members_reads_the_status_of_a_server_without_members)
{
    uint32_t port = tk_free_port3();
    char addr[64], *out;
    struct row rows[8];
    cr_assert_neq(port, 0);
    snprintf(addr, sizeof addr, "--addr=127.0.0.1:%u", port);
    pid_t srv = old_admin_port(port + 2, 4);
    cr_assert_eq(ctl(ARGS("members", addr), NULL, &out), 0, "%s", out);
    cr_assert_eq(member_rows(out, rows, 8), 2, "%s", out);
    cr_assert(rows[0].leader, "%s", out);
    cr_assert_str_eq(rows[0].id, "00000000000000aa", "%s", out);
    cr_assert_str_eq(rows[0].role, "voter", "%s", out);
    cr_assert_str_eq(rows[0].match, "9", "%s", out);
    cr_assert(!rows[1].leader, "%s", out);
    cr_assert_str_eq(rows[1].role, "learner", "%s", out);
    cr_assert_eq(ctl(ARGS("members", addr, "--json"), NULL, &out), 0, "%s", out);
    cr_assert(strstr(out,
                     "{\"id\":\"00000000000000bb\",\"leader\":false,\"role\":\"learner\","
                     "\"peer_addr\":\"i:1\",\"client_addr\":\"i:0\",\"match_index\":7,"
                     "\"lag\":2,\"last_contact_ms\":15}]\n") != NULL,
              "%s", out);
    int st;
    cr_assert_eq(waitpid(srv, &st, 0), srv);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the old admin port did not answer 4 times");
}

TestSuite(ctl_members, .init = setup_cluster, .fini = teardown_cluster, .timeout = 180);

Test(ctl_members, asked_at_a_follower_lists_the_leaders_view)
{
    static char body[1 << 16], ids[3][32], out[1 << 16];
    char leader[32], addr[64], want[80], *text;
    struct row rows[8];
    int l = tk_cluster_leader(&cl, 5000, 0), f;
    cr_assert_geq(l, 0);
    f = (l + 1) % 3;
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(tk_cluster_status(&cl, i, body, sizeof body), 200);
        status_id(body, ids[i], sizeof ids[i]);
    }
    snprintf(leader, sizeof leader, "%s", ids[l]);
    snprintf(addr, sizeof addr, "--addr=127.0.0.1:%u", cl.node[f].port);
    /* Right after the election the follower may not have heard the
     * leader yet, and so could not name it: wait until it does. */
    char names[64];
    snprintf(names, sizeof names, "\"leader\":\"%s\"", leader);
    bool heard = false;
    for (int k = 0; k < 100 && !heard; k++) {
        heard = tk_cluster_status(&cl, f, body, sizeof body) == 200 && strstr(body, names);
        if (!heard)
            usleep(50000);
    }
    cr_assert(heard, "the follower never named the leader: %s", body);

    cr_assert_eq(ctl(ARGS("members", addr), NULL, &text), 0, "%s", text);
    snprintf(out, sizeof out, "%s", text);
    cr_assert_eq(member_rows(out, rows, 8), 3, "%s", out);
    int marked = 0;
    for (int i = 0; i < 3; i++) {
        cr_assert_str_eq(rows[i].role, "voter", "%s", out);
        cr_assert(!strcmp(rows[i].id, ids[0]) || !strcmp(rows[i].id, ids[1]) ||
                      !strcmp(rows[i].id, ids[2]),
                  "unknown member %s:\n%s", rows[i].id, out);
        if (!rows[i].leader)
            continue;
        marked++;
        cr_assert_str_eq(rows[i].id, leader, "%s", out);
        /* The leader's own match index is its last index (>= 1 after the
         * bootstrap entry); a follower's /status has no match to show, so
         * a number here means the leader was asked. */
        cr_assert(atoi(rows[i].match) >= 1, "not the leader's view:\n%s", out);
    }
    cr_assert_eq(marked, 1, "%s", out);

    cr_assert_eq(ctl(ARGS("members", addr, "--json"), NULL, &text), 0, "%s", text);
    cr_assert_eq(strncmp(text, "[{\"id\":\"", 8), 0, "%s", text);
    cr_assert(strstr(text, "}]\n") != NULL, "%s", text);
    cr_assert_eq(count(text, "\"id\":"), 3, "%s", text);
    cr_assert_eq(count(text, "\"role\":\"voter\""), 3, "%s", text);
    cr_assert_eq(count(text, "\"leader\":true"), 1, "%s", text);
    snprintf(want, sizeof want, "\"id\":\"%s\",\"leader\":true", leader);
    cr_assert(strstr(text, want) != NULL, "%s", text);
}

Test(ctl_members, without_a_leader_lists_what_a_node_knows_and_exits_83)
{
    static char body[1 << 16];
    char addr[64], *out;
    struct row rows[8];
    int l = tk_cluster_leader(&cl, 5000, 0);
    cr_assert_geq(l, 0);
    int gone = (l + 1) % 3, left = (l + 2) % 3;
    /* The survivor must know the configuration first (a cluster serves as
     * soon as two members do; the third may still be catching up). */
    bool knows = false;
    for (int k = 0; k < 250 && !knows; k++) {
        knows = tk_cluster_status(&cl, left, body, sizeof body) == 200 &&
                strstr(body, "\"membership\":\"voter\"") != NULL;
        if (!knows)
            usleep(20000);
    }
    cr_assert(knows, "the survivor never became a voter: %s", body);
    tk_node_stop(&cl.node[l], SIGKILL, 3000);
    tk_node_stop(&cl.node[gone], SIGKILL, 3000);
    /* The survivor forgets the leader at its next election timeout. */
    bool forgot = false;
    for (int k = 0; k < 250 && !forgot; k++) {
        forgot = tk_cluster_status(&cl, left, body, sizeof body) == 200 &&
                 strstr(body, "\"leader\":\"0000000000000000\"") != NULL;
        if (!forgot)
            usleep(20000);
    }
    cr_assert(forgot, "the survivor still names a leader: %s", body);
    snprintf(addr, sizeof addr, "--addr=127.0.0.1:%u", cl.node[left].port);
    cr_assert_eq(ctl(ARGS("members", addr, "--timeout", "1s"), NULL, &out), 83, "%s", out);
    cr_assert(strstr(out, "no leader known") != NULL, "%s", out);
    cr_assert_eq(member_rows(out, rows, 8), 3, "%s", out);
    for (int i = 0; i < 3; i++) {
        cr_assert(!rows[i].leader, "%s", out);
        cr_assert_str_eq(rows[i].match, "-", "only the leader knows match:\n%s", out);
    }
}

/* ---- remove-member ---------------------------------------------------------------- */

/* The NodeId of member i as `members` prints it. */
static void member_id(int i, char id[17])
{
    uint64_t v = tk_cluster_node_id(&cl, i);
    cr_assert_neq(v, 0, "no node_id from member %d", i);
    snprintf(id, 17, "%016llx", (unsigned long long)v);
}

/* The last output of listed_voters, for assertion messages. */
static char listed[1 << 16];

/* The voters `members` lists (asked at --addr addr); whether id is among the members. */
static int listed_voters(const char *addr, const char *id, bool *has_id)
{
    char *out = listed, *text;
    struct row rows[8];
    cr_assert_eq(ctl(ARGS("members", addr), NULL, &text), 0, "%s", text);
    snprintf(listed, sizeof listed, "%s", text);
    int n = member_rows(out, rows, 8), voters = 0;
    *has_id = false;
    for (int i = 0; i < n; i++) {
        voters += strcmp(rows[i].role, "voter") == 0;
        *has_id |= strcmp(rows[i].id, id) == 0;
    }
    return voters;
}

/* Every member's client address, for --addr (a stopped one included). */
static void all_addrs(char *out, size_t cap)
{
    size_t off = (size_t)snprintf(out, cap, "--addr=");
    for (int i = 0; i < cl.n; i++)
        off +=
            (size_t)snprintf(out + off, cap - off, "%s127.0.0.1:%u", i ? "," : "", cl.node[i].port);
}

static bool file_contains(const char *path, const char *needle)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return false;
    size_t cap = 1 << 20, n = 0;
    char *buf = malloc(cap + 1);
    bool found = false;
    while (buf != NULL && !found) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        buf[n] = '\0';
        found = strstr(buf, needle) != NULL;
        if (got == 0 || n < cap)
            break;
        /* Keep the tail a needle could straddle. */
        size_t keep = strlen(needle);
        memmove(buf, buf + n - keep, keep);
        n = keep;
    }
    free(buf);
    fclose(f);
    return found;
}

Test(ctl_members, remove_member_refuses_a_live_member)
{
    char id[17], addrs[256], leader_addr[64], peer[400], *out;
    bool has;
    int l = tk_cluster_leader(&cl, 5000, 0);
    cr_assert_geq(l, 0);
    int f = (l + 1) % 3;
    member_id(f, id);
    all_addrs(addrs, sizeof addrs);
    snprintf(leader_addr, sizeof leader_addr, "--addr=127.0.0.1:%u", cl.node[l].port);
    snprintf(peer, sizeof peer, "TICKETING_PEER_SECRET_FILE=%s", cl.node[l].peer_secret_file);
    cr_assert_eq(ctl(ARGS(addrs, "remove-member", id), ARGS(peer), &out), 84, "%s", out);
    cr_assert(strstr(out, "refused") != NULL, "%s", out);
    cr_assert_eq(listed_voters(leader_addr, id, &has), 3, "%s", listed);
    cr_assert(has, "%s is gone from members", id);
    cr_assert(tk_node_alive(&cl.node[f]), "the follower exited");
    /* The leader itself: alive by definition, refused, and it stays leader. */
    member_id(l, id);
    cr_assert_eq(ctl(ARGS(addrs, "remove-member", id), ARGS(peer), &out), 84, "%s", out);
    cr_assert_eq(tk_cluster_leader(&cl, 2000, 0), l, "asking to remove the leader moved it");
    cr_assert_eq(listed_voters(leader_addr, id, &has), 3, "%s", listed);
}

Test(ctl_members, remove_member_of_a_stopped_member_and_it_exits_3_when_it_wakes)
{
    char id[17], addrs[256], leader_addr[64], peer[400], want[64], *out;
    bool has;
    int l = tk_cluster_leader(&cl, 5000, 0);
    cr_assert_geq(l, 0);
    int f = (l + 1) % 3;
    member_id(f, id);
    all_addrs(addrs, sizeof addrs);
    snprintf(leader_addr, sizeof leader_addr, "--addr=127.0.0.1:%u", cl.node[l].port);
    snprintf(peer, sizeof peer, "--peer-secret-file=%s", cl.node[l].peer_secret_file);
    pid_t pid = cl.node[f].pid;
    cr_assert_eq(kill(pid, SIGSTOP), 0);
    usleep(1500 * 1000); /* past the election timeout (400 ms): the leader stops hearing it */

    /* Its peer port is among those asked and does not answer: each
     * attempt has a quarter of --timeout. */
    cr_assert_eq(ctl(ARGS(addrs, "remove-member", id, peer, "--timeout", "10s"), NULL, &out), 0,
                 "%s", out);
    snprintf(want, sizeof want, "removed %s\n", id);
    cr_assert(strstr(out, want) != NULL, "%s", out);
    /* OK means the removal is appended; /status lists it once committed
     * (a heartbeat or two later). */
    int voters = 0;
    for (uint64_t end = tk_test_ms() + 3000; tk_test_ms() < end; usleep(50000))
        if ((voters = listed_voters(leader_addr, id, &has)) == 2)
            break;
    cr_assert_eq(voters, 2, "%s", listed);
    cr_assert(!has, "%s is still a member", id);
    /* Asked again: not a member, so nothing to do, and said as removed. */
    cr_assert_eq(ctl(ARGS(leader_addr, "remove-member", id, peer, "--json"), NULL, &out), 0, "%s",
                 out);
    cr_assert(strstr(out, "\"outcome\":\"removed\"") != NULL, "%s", out);

    /* Woken, it campaigns; the leader tells it it is no longer a member. */
    cr_assert_eq(kill(pid, SIGCONT), 0);
    int st = 0;
    pid_t r = 0;
    for (uint64_t end = tk_test_ms() + 10000; r != pid && tk_test_ms() < end;) {
        r = waitpid(pid, &st, WNOHANG);
        if (r != pid)
            usleep(20000);
    }
    if (r != pid)
        cl.keep_logs = true;
    cr_assert_eq(r, pid, "the removed member still runs 10 s after waking");
    cl.node[f].pid = -1;
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 3, "wait status %#x, wanted exit 3", st);
    cr_assert(file_contains(cl.node[f].log_file, "no longer in the configuration"),
              "its log does not say why it exited");

    /* The two that are left still serve. */
    cr_assert_eq(ctl(ARGS(leader_addr, "acquire", "after-remove", "--wait", "5s"), NULL, &out), 0,
                 "%s", out);
}

Test(ctl_members, remove_member_with_a_wrong_peer_secret_fails)
{
    char id[17], leader_addr[64], peer[400], path[300], *out;
    bool has;
    int l = tk_cluster_leader(&cl, 5000, 0);
    cr_assert_geq(l, 0);
    int f = (l + 1) % 3;
    member_id(f, id);
    snprintf(leader_addr, sizeof leader_addr, "--addr=127.0.0.1:%u", cl.node[l].port);
    snprintf(path, sizeof path, "%s/wrong-peer.secret", dir);
    FILE *fp = fopen(path, "w");
    cr_assert(fp != NULL);
    fputs("not-the-peer-secret-of-this-cluster\n", fp);
    fclose(fp);
    snprintf(peer, sizeof peer, "--peer-secret-file=%s", path);
    /* Stopped long enough to be removable: only the secret stands in the way. */
    cr_assert_eq(kill(cl.node[f].pid, SIGSTOP), 0);
    usleep(1500 * 1000);
    int code = ctl(ARGS(leader_addr, "remove-member", id, peer), NULL, &out);
    kill(cl.node[f].pid, SIGCONT);
    cr_assert_eq(code, 1, "exit %d: %s", code, out);
    cr_assert(strstr(out, "another peer secret") != NULL, "%s", out);
    /* The client secret is not the peer secret either. */
    snprintf(peer, sizeof peer, "--peer-secret-file=%s", cl.node[l].secret_file);
    cr_assert_eq(ctl(ARGS(leader_addr, "remove-member", id, peer), NULL, &out), 1, "%s", out);
    cr_assert_eq(listed_voters(leader_addr, id, &has), 3, "%s", listed);
    cr_assert(has, "%s was removed", id);
}

Test(ctl, remove_member_usage_errors_exit_64)
{
    char peer[400], bad[400];
    snprintf(peer, sizeof peer, "--peer-secret-file=%s", node.peer_secret_file);
    snprintf(bad, sizeof bad, "--peer-secret-file=%s/nonexistent", dir);
    expect_exit(ARGS("remove-member", peer), NULL, 64);                      /* no NODEID */
    expect_exit(ARGS("remove-member", "0123", peer), NULL, 64);              /* short */
    expect_exit(ARGS("remove-member", "0123456789abcdefa", peer), NULL, 64); /* long */
    expect_exit(ARGS("remove-member", "0123456789abcdeg", peer), NULL, 64);  /* not hex */
    expect_exit(ARGS("remove-member", "0000000000000000", peer), NULL, 64);  /* no NodeId */
    expect_exit(ARGS("remove-member", "0123456789abcdef", "extra", peer), NULL, 64);
    expect_exit(ARGS("remove-member", "0123456789abcdef"), ARGS("TICKETING_PEER_SECRET_FILE"),
                64);                                                       /* no secret */
    expect_exit(ARGS("remove-member", "0123456789abcdef", bad), NULL, 64); /* unreadable */
    expect_exit(ARGS("remove-member", "0123456789abcdef", peer), ARGS("TICKETING_ADDR"), 64);
    expect_exit(ARGS("remove-member", "0123456789abcdef", peer, "--addr", "127.0.0.1"), NULL, 64);
}

/* ---- ring ----------------------------------------------------------------------- */

Test(ctl, ring_show_of_a_standalone_node_is_version_0)
{
    char *out;
    cr_assert_eq(ctl(ARGS("ring", "show"), NULL, &out), 0, "%s", out);
    cr_assert(strncmp(out, "version 0\n# no ring: ", 21) == 0, "%s", out);
    cr_assert_eq(strchr(out, '\n')[1], '#', "a comment, no range: %s", out);
    cr_assert_eq(strchr(strchr(out, '\n') + 1, '\n')[1], '\0', "two lines: %s", out);
    cr_assert_eq(ctl(ARGS("ring", "show", "--json"), NULL, &out), 0, "%s", out);
    cr_assert_str_eq(out, "{\"version\":0,\"ranges\":[]}\n");
}

Test(ctl, ring_usage_errors_exit_64)
{
    expect_exit(ARGS("ring"), NULL, 64);
    expect_exit(ARGS("ring", "frob"), NULL, 64);
    expect_exit(ARGS("ring", "show", "extra"), NULL, 64);
    expect_exit(ARGS("ring", "show", "--group", "g1"), NULL, 64);
    expect_exit(ARGS("ring", "show"), ARGS("TICKETING_SECRET_FILE"), 64);
    expect_exit(ARGS("ring", "apply", "--group", "g1"), NULL, 64); /* no FILE */
    expect_exit(ARGS("ring", "apply", "ring.txt"), NULL, 64);      /* no --group */
    expect_exit(ARGS("ring", "apply", "ring.txt", "--group", "a;b"), NULL, 64);
    expect_exit(ARGS("ring", "apply", "ring.txt", "--group", "a@b"), NULL, 64);
    expect_exit(ARGS("ring", "apply", "ring.txt", "x", "--group", "g1"), NULL, 64);
    expect_exit(ARGS("ring", "apply", "ring.txt", "--group", "g1"), ARGS("TICKETING_ADDR"), 64);
}

/* A group started without a ring serves no slot: every request about a key
 * is answered W, which ticketctl reports with the slot, exit 84. */
Test(ctl, wrong_group_exits_84_with_the_slot)
{
    static const char *const args[] = {"--threads", "1", "--group", "g1", NULL};
    struct tk_node g;
    char addr[64], *out;
    cr_assert_eq(tk_node_start(&g, args), 0, "ticketingd --group g1 did not start");
    snprintf(addr, sizeof addr, "--addr=127.0.0.1:%u", g.port);
    cr_assert_eq(ctl(ARGS(addr, "acquire", "show-42", "--wait", "0"), NULL, &out), 84, "%s", out);
    cr_assert(strstr(out, "show-42: wrong group") != NULL, "%s", out);
    cr_assert(strstr(out, "slot 11909") != NULL, "%s", out);
    cr_assert(strstr(out, "ring version 0") != NULL, "%s", out);
    cr_assert_eq(ctl(ARGS(addr, "query", "a", "--json"), NULL, &out), 84, "%s", out);
    cr_assert_str_eq(out,
                     "{\"outcome\":\"wrong_group\",\"key\":\"a\",\"reason\":\"\",\"slot\":11404,"
                     "\"ring_version\":0}\n");
    cr_assert_eq(ctl(ARGS(addr, "release", "a", "--token", "3", "--owner", "me"), NULL, &out), 84,
                 "%s", out);
    cr_assert_eq(ctl(ARGS(addr, "run", "a", "--", "true"), NULL, &out), 84, "%s", out);
    cr_assert_eq(ctl(ARGS(addr, "ring", "show"), NULL, &out), 0, "%s", out);
    cr_assert(strncmp(out, "version 0\n", 10) == 0, "%s", out);
    tk_node_stop(&g, SIGTERM, 10000);
    tk_node_cleanup(&g);
}

Test(ctl, remove_member_without_a_peer_port_is_unavailable)
{
    char peer[400], id[32], *out;
    static char body[1 << 16];
    /* A standalone node has no peer port: nothing answers there. */
    cr_assert_eq(tk_http_get(node.port + 2, "/status", body, sizeof body), 200);
    status_id(body, id, sizeof id);
    snprintf(peer, sizeof peer, "TICKETING_PEER_SECRET_FILE=%s", node.peer_secret_file);
    uint64_t t0 = tk_test_ms();
    cr_assert_eq(ctl(ARGS("remove-member", id, "--timeout", "1s"), ARGS(peer), &out), 83, "%s",
                 out);
    cr_assert_lt(tk_test_ms() - t0, 3000, "--timeout 1s took %llu ms",
                 (unsigned long long)(tk_test_ms() - t0));
}
