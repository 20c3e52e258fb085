/* Goal: ticketctl serves operators and scripts (docs/client.md, ticketctl):
 * every --json output is valid JSON whatever bytes a key holds, and the
 * key comes back exactly as it was given; `status` says in its exit code
 * whether the cluster is whole (0), lost a member (88) or has no leader
 * (83); a failed request names its cause in one line without -v (a wrong
 * secret, a port where nothing listens, a host name that does not
 * resolve); --admin-port (and TICKETING_ADMIN_PORT) reach an admin port
 * that is not client port + 2; --version prints the version.
 *
 * Method: the real ticketctl binary against real ticketingd processes on
 * 127.0.0.1 (one standalone node; a 3-node cluster with members killed by
 * SIGKILL). Each JSON output is read by Python's json module, which
 * rejects anything RFC 8259 does not allow (NaN and the like included),
 * and which prints the "key" it decoded for the test to compare.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/support/tk_cluster.h"
#include "tests/support/tk_test.h"

#define TICKETCTL TK_BIN_DIR "/ticketctl"

static struct tk_node node;
static struct tk_cluster cl;
static char dir[] = "/tmp/tk-ctlops-XXXXXX";
static char env_addr[64];
static char env_secret[400];

static void setup(void)
{
    static const char *const args[] = {"--threads", "2", NULL};
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

/* ---- running ticketctl ------------------------------------------------------------ */

static char *slurp(const char *path)
{
    static char buf[1 << 17];
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    buf[n] = '\0';
    if (f)
        fclose(f);
    return buf;
}

/* Runs ticketctl with args (NULL-terminated) and the address and secret of
 * the fixture in its environment ("NAME=value" in env overrides, a bare
 * "NAME" unsets); its stdout into out, its stderr into err (each cap
 * bytes). Returns the exit code, or 1000 + signal. */
static int ctl(const char *const *args, const char *const *env, char *out, char *err, size_t cap)
{
    static unsigned seq;
    char fo[300], fe[300];
    char *argv[64];
    int a = 0;
    snprintf(fo, sizeof fo, "%s/out-%u", dir, seq);
    snprintf(fe, sizeof fe, "%s/err-%u", dir, seq++);
    argv[a++] = TICKETCTL;
    for (int i = 0; args[i] != NULL && a < 63; i++)
        argv[a++] = (char *)args[i];
    argv[a] = NULL;
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        int o = open(fo, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int e = open(fe, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (o < 0 || e < 0)
            _exit(126);
        dup2(o, 1);
        dup2(e, 2);
        putenv(env_addr);
        putenv(env_secret);
        unsetenv("TICKETING_OWNER");
        unsetenv("TICKETING_ADMIN_PORT");
        for (int i = 0; env != NULL && env[i] != NULL; i++) {
            if (strchr(env[i], '='))
                putenv((char *)env[i]);
            else
                unsetenv(env[i]);
        }
        execv(argv[0], argv);
        _exit(127);
    }
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    snprintf(out, cap, "%s", slurp(fo));
    snprintf(err, cap, "%s", slurp(fe));
    return WIFEXITED(st) ? WEXITSTATUS(st) : 1000 + WTERMSIG(st);
}

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

/* ---- a strict JSON reader: Python's -------------------------------------------------- */

/* Each non-empty line of the text is one JSON document (all of it one,
 * if whole). Strict: no NaN or Infinity, nothing after the value, and
 * only ASCII (ticketctl escapes everything else). Prints the hex of the
 * UTF-8 of the first "key" string found (in a document, or in its first
 * element), or "-" if there is none. */
static const char py_check[] =
    "import json,sys\n"
    "def bad(c): raise ValueError('not JSON: ' + c)\n"
    "raw = sys.stdin.buffer.read()\n"
    "text = raw.decode('ascii')\n"
    "docs = [text] if sys.argv[1] == 'whole' else [l for l in text.split('\\n') if l]\n"
    "vals = [json.loads(d, parse_constant=bad) for d in docs]\n"
    "if not vals: raise ValueError('no JSON at all')\n"
    "v = vals[0][0] if isinstance(vals[0], list) and vals[0] else vals[0]\n"
    "k = v.get('key') if isinstance(v, dict) else None\n"
    "print(k.encode('utf-8').hex() if isinstance(k, str) else '-')\n";

/* Whether text is valid JSON (lines, or whole); the decoded "key" as hex
 * into key_hex (cap bytes). */
static bool json_ok(const char *text, bool whole, char *key_hex, size_t cap)
{
    char path[300], script[300], cmd[800];
    snprintf(path, sizeof path, "%s/json-input", dir);
    snprintf(script, sizeof script, "%s/check.py", dir);
    FILE *f = fopen(path, "w");
    FILE *s = fopen(script, "w");
    cr_assert(f != NULL && s != NULL);
    fputs(text, f);
    fputs(py_check, s);
    fclose(f);
    fclose(s);
    snprintf(cmd, sizeof cmd, "python3 %s %s < %s 2>&1", script, whole ? "whole" : "lines", path);
    FILE *p = popen(cmd, "r");
    cr_assert(p != NULL);
    key_hex[0] = '\0';
    if (fgets(key_hex, (int)cap, p) == NULL)
        key_hex[0] = '\0';
    key_hex[strcspn(key_hex, "\n")] = '\0';
    int st = pclose(p);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

static void hex_of(const char *s, char *out, size_t cap)
{
    size_t n = 0;
    for (; *s != '\0' && n + 3 <= cap; s++)
        n += (size_t)snprintf(out + n, cap - n, "%02x", (unsigned char)*s);
    out[n] = '\0';
}

#define assert_json(text, whole, want_key)                                                       \
    do {                                                                                         \
        char got_[1200], want_[1200];                                                            \
        cr_assert(json_ok((text), (whole), got_, sizeof got_), "not valid JSON (%s):\n%s", got_, \
                  (text));                                                                       \
        if ((want_key) != NULL) {                                                                \
            hex_of((want_key), want_, sizeof want_);                                             \
            cr_assert_str_eq(got_, want_, "the key did not come back as given:\n%s", (text));    \
        }                                                                                        \
    } while (0)

/* ---- JSON ------------------------------------------------------------------------ */

TestSuite(ctl_ops, .init = setup, .fini = teardown, .timeout = 240);

/* The keys the protocol allows are 1-250 bytes of 0x21-0x7E: every one of
 * those bytes in one key, the two JSON must escape alone and in numbers,
 * and the longest key of backslashes. */
static void awkward_keys(char keys[4][256])
{
    int n = 0;
    for (int c = 0x21; c <= 0x7E; c++)
        keys[0][n++] = (char)c;
    keys[0][n] = '\0';
    snprintf(keys[1], 256, "we\"ird\\key");
    snprintf(keys[2], 256, "\\\"\\\\\"\"u0041\\u0000");
    memset(keys[3], '\\', 250);
    keys[3][250] = '\0';
}

Test(ctl_ops, json_of_every_command_is_valid_with_awkward_keys)
{
    static char out[1 << 17], err[1 << 17];
    static char keys[4][256];
    awkward_keys(keys);
    for (int i = 0; i < 4; i++) {
        const char *k = keys[i];
        unsigned long long token = 0;
        char tok[32];
        int rc =
            ctl(ARGS("acquire", k, "--json", "--owner", "o\"w\\n"), NULL, out, err, sizeof out);
        cr_assert_eq(rc, 0, "acquire %s: exit %d: %s%s", k, rc, out, err);
        assert_json(out, false, k);
        const char *t = strstr(out, "\"token\":");
        cr_assert(t != NULL && sscanf(t, "\"token\":%llu", &token) == 1, "%s", out);
        snprintf(tok, sizeof tok, "%llu", token);

        cr_assert_eq(ctl(ARGS("query", k, "--json"), NULL, out, err, sizeof out), 0, "%s", err);
        assert_json(out, false, k);
        cr_assert(strstr(out, "\"held\":true") != NULL, "%s", out);
        cr_assert(strstr(out, "\"owner\":\"o\\\"w\\\\n\"") != NULL, "%s", out);

        /* Busy, with the failure's own JSON. */
        cr_assert_eq(ctl(ARGS("acquire", k, "--json", "--wait", "0"), NULL, out, err, sizeof out),
                     80, "%s%s", out, err);
        assert_json(out, false, k);

        cr_assert_eq(ctl(ARGS("release", k, "--token", tok, "--owner", "o\"w\\n", "--json"), NULL,
                         out, err, sizeof out),
                     0, "%s%s", out, err);
        assert_json(out, false, k);
        /* Not held any more: the failure's JSON again. */
        cr_assert_eq(ctl(ARGS("release", k, "--token", tok, "--owner", "o\"w\\n", "--json"), NULL,
                         out, err, sizeof out),
                     86, "%s%s", out, err);
        assert_json(out, false, k);

        cr_assert_eq(ctl(ARGS("query", k, "--json"), NULL, out, err, sizeof out), 0, "%s", err);
        assert_json(out, false, k);
        cr_assert(strstr(out, "\"held\":false") != NULL, "%s", out);

        /* run: the summary is on stderr (stdout is the command's). */
        cr_assert_eq(ctl(ARGS("run", k, "--json", "--", "true"), NULL, out, err, sizeof out), 0,
                     "%s", err);
        assert_json(err, false, k);
    }
}

Test(ctl_ops, json_of_keys_the_server_refuses_is_valid_too)
{
    static char out[1 << 17], err[1 << 17];
    /* Bytes no key may hold: every control, a space, DEL, UTF-8 (2, 3 and
     * 4 bytes) and bytes that are no UTF-8 at all. The server refuses
     * them; the JSON that says so must still be JSON. */
    char key[300];
    size_t n = 0;
    for (int c = 1; c < 0x20; c++)
        key[n++] = (char)c;
    static const char more[] = " \x7f\xc3\xa9\xe2\x82\xac\xf0\x9f\x94\x92\xff\xc3(\xed\xa0\x80";
    memcpy(key + n, more, sizeof more - 1);
    n += sizeof more - 1;
    key[n] = '\0';
    cr_assert_eq(ctl(ARGS("acquire", key, "--json"), NULL, out, err, sizeof out), 84, "%s%s", out,
                 err);
    assert_json(out, false, NULL);
    cr_assert(strstr(out, "\"outcome\":\"invalid\"") != NULL, "%s", out);
    /* Valid UTF-8 comes back as its characters. */
    cr_assert_eq(ctl(ARGS("query", "caf\xc3\xa9\x01", "--json"), NULL, out, err, sizeof out), 84,
                 "%s%s", out, err);
    assert_json(out, false, "caf\xc3\xa9\x01");
    cr_assert(strstr(out, "caf\\u00e9\\u0001") != NULL, "%s", out);
}

Test(ctl_ops, json_of_ping_status_members_and_failures_is_valid)
{
    static char out[1 << 17], err[1 << 17];
    char closed[64], peer[400], id[17] = "0123456789abcdef";
    cr_assert_eq(ctl(ARGS("ping", "--json", "--count", "3"), NULL, out, err, sizeof out), 0, "%s",
                 err);
    assert_json(out, false, NULL);
    cr_assert_eq(ctl(ARGS("status", "--json"), NULL, out, err, sizeof out), 0, "%s", err);
    assert_json(out, true, NULL);
    cr_assert(strstr(out, "\"ok\":true") != NULL, "%s", out);
    cr_assert_eq(ctl(ARGS("members", "--json"), NULL, out, err, sizeof out), 0, "%s", err);
    assert_json(out, true, NULL);
    /* Nothing listens: the error (with its address) inside the JSON. */
    snprintf(closed, sizeof closed, "--addr=127.0.0.1:%u", tk_free_port3());
    cr_assert_eq(ctl(ARGS(closed, "acquire", "we\"ird\\key", "--json", "--wait", "0"), NULL, out,
                     err, sizeof out),
                 83, "%s%s", out, err);
    assert_json(out, false, "we\"ird\\key");
    cr_assert(strstr(out, "\"error\":\"127.0.0.1:") != NULL, "%s", out);
    cr_assert_eq(
        ctl(ARGS(closed, "ping", "--json", "--timeout", "300ms"), NULL, out, err, sizeof out), 83,
        "%s%s", out, err);
    assert_json(out, false, NULL);
    cr_assert_eq(
        ctl(ARGS(closed, "status", "--json", "--timeout", "300ms"), NULL, out, err, sizeof out), 83,
        "%s%s", out, err);
    assert_json(out, true, NULL);
    cr_assert_eq(
        ctl(ARGS(closed, "members", "--json", "--timeout", "300ms"), NULL, out, err, sizeof out),
        83, "%s%s", out, err);
    assert_json(out, true, NULL);
    /* remove-member: a standalone node has no peer port to ask. */
    snprintf(peer, sizeof peer, "--peer-secret-file=%s", node.peer_secret_file);
    cr_assert_eq(ctl(ARGS("remove-member", id, peer, "--json", "--timeout", "1s"), NULL, out, err,
                     sizeof out),
                 83, "%s%s", out, err);
    assert_json(out, false, NULL);
    cr_assert(strstr(out, "\"outcome\":\"unavailable\"") != NULL, "%s", out);
}

/* ---- the cause of a failure, in one line ------------------------------------------ */

/* One line on stderr, nothing on stdout. */
static void one_line(const char *out, const char *err)
{
    cr_assert_str_eq(out, "", "stdout: %s", out);
    size_t len = strlen(err);
    cr_assert(len > 0 && strchr(err, '\n') == err + len - 1, "not one line: %s", err);
}

Test(ctl_ops, a_failure_names_its_cause_in_one_line)
{
    static char out[1 << 16], err[1 << 16];
    char wrong[300], secret[320], addr[64], want[80];
    snprintf(wrong, sizeof wrong, "%s/wrong.secret", dir);
    FILE *f = fopen(wrong, "w");
    cr_assert(f != NULL);
    fputs("not-the-client-secret-of-this-node\n", f);
    fclose(f);

    /* A wrong secret: the node refuses our proof. */
    snprintf(secret, sizeof secret, "--secret-file=%s", wrong);
    cr_assert_eq(ctl(ARGS("ping", secret, "--timeout", "2s"), NULL, out, err, sizeof out), 83,
                 "%s%s", out, err);
    one_line(out, err);
    snprintf(want, sizeof want, "127.0.0.1:%u: authentication refused", node.port);
    cr_assert(strstr(err, want) != NULL, "%s", err);
    cr_assert(strstr(err, "wrong --secret-file?") != NULL, "%s", err);
    cr_assert_eq(ctl(ARGS("acquire", "k", secret, "--wait", "0"), NULL, out, err, sizeof out), 83,
                 "%s%s", out, err);
    one_line(out, err);
    cr_assert(strstr(err, want) != NULL, "%s", err);

    /* Nothing listens at the port. */
    unsigned closed = tk_free_port3();
    snprintf(addr, sizeof addr, "--addr=127.0.0.1:%u", closed);
    cr_assert_eq(ctl(ARGS("ping", addr, "--timeout", "2s"), NULL, out, err, sizeof out), 83, "%s%s",
                 out, err);
    one_line(out, err);
    snprintf(want, sizeof want, "127.0.0.1:%u: connect: Connection refused", closed);
    cr_assert(strstr(err, want) != NULL, "%s", err);
    cr_assert(strstr(err, "check the port in --addr") != NULL, "%s", err);

    /* A host name that cannot resolve (.invalid never does). The budget
     * leaves a slow resolver time to say so. */
    cr_assert_eq(ctl(ARGS("ping", "--addr=no-such-host.invalid:7400", "--timeout", "20s"), NULL,
                     out, err, sizeof out),
                 83, "%s%s", out, err);
    one_line(out, err);
    cr_assert(strstr(err, "no-such-host.invalid:7400: host name lookup failed") != NULL, "%s", err);

    /* The right secret, for contrast: it works, and says nothing on stderr. */
    cr_assert_eq(ctl(ARGS("ping"), NULL, out, err, sizeof out), 0, "%s", err);
    cr_assert_str_eq(err, "");
}

/* ---- --admin-port, --version --------------------------------------------------------- */

Test(ctl_ops, version_names_the_version_and_the_commit)
{
    static char out[1 << 16], err[1 << 16];
    unsigned maj, min, pat;
    char commit[64];
    cr_assert_eq(ctl(ARGS("--version"), ARGS("TICKETING_ADDR"), out, err, sizeof out), 0);
    cr_assert_eq(sscanf(out, "ticketctl %u.%u.%u (commit %63[^)])", &maj, &min, &pat, commit), 4,
                 "%s", out);
    cr_assert(strlen(commit) > 0, "%s", out);
    cr_assert(strchr(out, '\n') == out + strlen(out) - 1, "one line: %s", out);
    /* It wins over everything else on the line, a bad flag included. */
    cr_assert_eq(ctl(ARGS("acquire", "--version"), NULL, out, err, sizeof out), 0);
    cr_assert(strncmp(out, "ticketctl ", 10) == 0, "%s", out);
}

TestSuite(ctl_admin, .timeout = 120);

Test(ctl_admin, admin_port_other_than_client_port_plus_2)
{
    static char out[1 << 16], err[1 << 16];
    struct tk_node n = {0};
    char aport[16], addr[64], flag[32], env[48];
    /* An admin port apart from the node's three, which stay free. */
    unsigned admin = tk_free_port3();
    cr_assert(mkdtemp(dir) != NULL);
    snprintf(aport, sizeof aport, "%u", admin);
    const char *const args[] = {"--threads", "1", "--admin-port", aport, NULL};
    unsigned port = tk_free_port3();
    cr_assert(port != 0 && port != admin);
    cr_assert_eq(tk_node_prepare(&n, port), 0);
    cr_assert_eq(tk_node_spawn(&n, args), 0);
    cr_assert_eq(tk_node_wait_port(&n, 10000), 0, "ticketingd did not start");
    cr_assert_eq(tk_node_wait_serving(admin, 10000), 0, "ticketingd does not serve");
    snprintf(addr, sizeof addr, "--addr=127.0.0.1:%u", port);
    snprintf(flag, sizeof flag, "--admin-port=%u", admin);
    snprintf(env, sizeof env, "TICKETING_ADMIN_PORT=%u", admin);

    /* Client port + 2 has nothing: status finds no member. */
    int rc = ctl(ARGS(addr, "status", "--timeout", "1s"), NULL, out, err, sizeof out);
    cr_assert_eq(rc, 83, "%s%s", out, err);
    cr_assert_eq(ctl(ARGS(addr, flag, "status"), NULL, out, err, sizeof out), 0, "%s%s", out, err);
    cr_assert(strstr(out, "role=leader") != NULL, "%s", out);
    cr_assert_eq(ctl(ARGS(addr, "status", "--json"), ARGS(env), out, err, sizeof out), 0, "%s%s",
                 out, err);
    assert_json(out, true, NULL);
    cr_assert(strstr(out, "\"ok\":true") != NULL, "%s", out);
    cr_assert_eq(ctl(ARGS(addr, flag, "members"), NULL, out, err, sizeof out), 0, "%s%s", out, err);
    cr_assert(strstr(out, "* ") != NULL, "no leader marked: %s", out);
    cr_assert_eq(ctl(ARGS(addr, "members", "--timeout", "1s"), NULL, out, err, sizeof out), 83,
                 "%s%s", out, err);
    /* A bad one is a usage error. */
    cr_assert_eq(ctl(ARGS(addr, "status", "--admin-port", "65536"), NULL, out, err, sizeof out),
                 64);
    cr_assert_eq(ctl(ARGS(addr, "status"), ARGS("TICKETING_ADMIN_PORT=x"), out, err, sizeof out),
                 64);
    tk_node_stop(&n, SIGTERM, 10000);
    tk_node_cleanup(&n);
    remove_dir();
}

/* ---- status and the cluster's health ---------------------------------------------- */

TestSuite(ctl_health, .init = setup_cluster, .fini = teardown_cluster, .timeout = 180);

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

static void all_addrs(char *out, size_t cap)
{
    size_t off = (size_t)snprintf(out, cap, "--addr=");
    for (int i = 0; i < cl.n; i++)
        off +=
            (size_t)snprintf(out + off, cap - off, "%s127.0.0.1:%u", i ? "," : "", cl.node[i].port);
}

/* Waits until node i lists all 3 members (a follower may still be catching up). */
static void wait_members_known(int i)
{
    static char body[1 << 16];
    bool knows = false;
    for (int k = 0; k < 250 && !knows; k++) {
        knows = tk_cluster_status(&cl, i, body, sizeof body) == 200 &&
                strstr(body, "\"membership\":\"voter\"") != NULL;
        if (!knows)
            usleep(20000);
    }
    cr_assert(knows, "node %d never became a voter: %s", i, body);
}

Test(ctl_health, status_exits_88_when_a_member_is_down)
{
    static char out[1 << 17], err[1 << 17];
    char addrs[256], leader[64], gone[64];
    int l = tk_cluster_leader(&cl, 5000, 0);
    cr_assert_geq(l, 0);
    all_addrs(addrs, sizeof addrs);
    snprintf(leader, sizeof leader, "--addr=127.0.0.1:%u", cl.node[l].port);
    /* Right after the election a follower may not have heard the leader
     * yet (still a candidate: it answers, so status exits 0 all the same):
     * wait until every node has, asked through the leader's address alone
     * (the members it lists are asked too). */
    int code = -1;
    for (int k = 0; k < 100 && (code != 0 || count(out, "role=follower") != 2); k++) {
        code = ctl(ARGS(leader, "status"), NULL, out, err, sizeof out);
        if (code != 0 || count(out, "role=follower") != 2)
            usleep(50000);
    }
    cr_assert_eq(code, 0, "%s%s", out, err);
    cr_assert_eq(count(out, "role=follower"), 2, "the followers were not asked:\n%s", out);
    cr_assert_eq(ctl(ARGS(addrs, "status"), NULL, out, err, sizeof out), 0, "%s%s", out, err);

    int f = (l + 1) % 3;
    tk_node_stop(&cl.node[f], SIGKILL, 3000);
    snprintf(gone, sizeof gone, "127.0.0.1:%u  unreachable", cl.node[f].port);
    cr_assert_eq(ctl(ARGS(addrs, "status", "--timeout", "1s"), NULL, out, err, sizeof out), 88,
                 "%s%s", out, err);
    cr_assert(strstr(out, gone) != NULL, "%s", out);
    cr_assert(strstr(out, "role=leader") != NULL, "%s", out);
    cr_assert(strstr(err, "degraded") != NULL, "%s", err);
    cr_assert_eq(ctl(ARGS(leader, "status", "--timeout", "1s"), NULL, out, err, sizeof out), 88,
                 "%s%s", out, err);
    cr_assert(strstr(out, gone) != NULL, "%s", out);
    cr_assert_eq(
        ctl(ARGS(addrs, "status", "--json", "--timeout", "1s"), NULL, out, err, sizeof out), 88,
        "%s%s", out, err);
    assert_json(out, true, NULL);
    cr_assert(strstr(out, "\"ok\":false") != NULL, "%s", out);
}

Test(ctl_health, status_exits_83_without_a_leader)
{
    static char out[1 << 17], err[1 << 17];
    char addrs[256];
    int l = tk_cluster_leader(&cl, 5000, 0);
    cr_assert_geq(l, 0);
    int gone = (l + 1) % 3, left = (l + 2) % 3;
    wait_members_known(left);
    all_addrs(addrs, sizeof addrs);
    tk_node_stop(&cl.node[l], SIGKILL, 3000);
    tk_node_stop(&cl.node[gone], SIGKILL, 3000);
    cr_assert_eq(ctl(ARGS(addrs, "status", "--timeout", "1s"), NULL, out, err, sizeof out), 83,
                 "%s%s", out, err);
    cr_assert(strstr(err, "no leader") != NULL, "%s", err);
    cr_assert(strstr(out, "role=leader") == NULL, "%s", out);
    cr_assert_eq(
        ctl(ARGS(addrs, "status", "--json", "--timeout", "1s"), NULL, out, err, sizeof out), 83,
        "%s%s", out, err);
    assert_json(out, true, NULL);
    cr_assert(strstr(out, "\"ok\":true") != NULL, "the survivor did not answer: %s", out);
    cr_assert_eq(
        ctl(ARGS(addrs, "members", "--json", "--timeout", "1s"), NULL, out, err, sizeof out), 83,
        "%s%s", out, err);
    assert_json(out, true, NULL);
}
