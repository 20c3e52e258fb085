/* ticketingd's log as operators read it: real processes on 127.0.0.1,
 * their stderr captured in a file (tests/support/tk_test.c).
 *
 * - --log-format json: every line from start to shutdown is one JSON
 *   object with exactly ts, level, node and msg (checked by python3's
 *   json module, duplicates and invalid UTF-8 refused);
 * - --log-level by name: warn hides info, debug shows debug, a bad value
 *   stops the start with a message naming the accepted values;
 * - failed logins are logged with the address, on the client port and on
 *   a cluster member's peer port, rate-limited: every failed attempt is
 *   either a line or counted in a later line's "(N more since last line)".
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/support/tk_cluster.h"

#ifndef TK_MIN
#define TK_MIN(a, b) ((a) < (b) ? (a) : (b))
#endif

static struct tk_node node;
static struct tk_cluster cl;

static void teardown(void)
{
    tk_node_cleanup(&node);
    tk_cluster_stop(&cl);
}

TestSuite(logs, .fini = teardown, .timeout = 180);

#define LOG_CAP (1u << 20)
static char log_text[LOG_CAP];

/* The node's log so far, NUL-terminated (cut at LOG_CAP - 1 bytes). */
static const char *read_log(const struct tk_node *n)
{
    log_text[0] = 0;
    FILE *f = fopen(n->log_file, "r");
    if (!f)
        return log_text;
    size_t len = fread(log_text, 1, LOG_CAP - 1, f);
    fclose(f);
    log_text[len] = 0;
    return log_text;
}

/* Lines of text holding every one of the (up to two) needles. */
static int count_lines(const char *text, const char *a, const char *b)
{
    int count = 0;
    for (const char *p = text; *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        char line[1100];
        snprintf(line, sizeof(line), "%.*s", (int)TK_MIN(len, sizeof(line) - 1), p);
        if (strstr(line, a) && (!b || strstr(line, b)))
            count++;
        p += len + (nl ? 1 : 0);
    }
    return count;
}

/* Lines with the needle, and the sum of their "(N more since last line)". */
static int auth_lines(const char *text, const char *needle, unsigned long *more)
{
    int count = 0;
    *more = 0;
    for (const char *p = strstr(text, needle); p; p = strstr(p + 1, needle)) {
        count++;
        const char *nl = strchr(p, '\n');
        const char *m = strstr(p, " more since last line)");
        if (m && (!nl || m < nl)) {
            const char *open = m;
            while (open > p && open[-1] != '(')
                open--;
            *more += strtoul(open, NULL, 10);
        }
    }
    return count;
}

/* One login with a wrong proof on port: reads the banner, sends AUTH,
 * waits until the server closes the connection (by then its log line, if
 * any, is written). */
static void bad_login(uint32_t port, const char *banner)
{
    struct tk_tc c;
    cr_assert_eq(tk_tc_connect(&c, port), 0);
    char line[256];
    cr_assert_gt(tk_tc_line(&c, line, sizeof(line), 5000), 0, "no banner on port %u", port);
    cr_assert(strncmp(line, banner, strlen(banner)) == 0, "banner '%s'", line);
    /* The peer port's AUTH names the address it is meant for. */
    if (strstr(banner, "PEER"))
        cr_assert_eq(tk_tc_send(&c, "AUTH %064d %064d 127.0.0.1:%u\n", 0, 0, port), 0);
    else
        cr_assert_eq(tk_tc_send(&c, "AUTH %064d %064d\n", 0, 0), 0);
    cr_assert(tk_tc_closed(&c, 5000), "a bad login was not closed");
    tk_tc_close(&c);
}

/* 50 bad logins in a burst, then one at a time until one of them is
 * logged (that line carries the count of all suppressed before it).
 * Checks the accounting and that the lines stayed few. */
static void flood_and_check(struct tk_node *n,
                            uint32_t port,
                            const char *banner,
                            const char *needle)
{
    uint64_t t0 = tk_test_ms();
    int attempts = 0;
    for (; attempts < 50; attempts++)
        bad_login(port, banner);
    unsigned long more = 0;
    int lines = auth_lines(read_log(n), needle, &more);
    for (int i = 0; i < 100; i++) {
        bad_login(port, banner);
        attempts++;
        int now = auth_lines(read_log(n), needle, &more);
        if (now > lines) {
            lines = now;
            break;
        }
        usleep(100 * 1000);
    }
    uint64_t windows = (tk_test_ms() - t0) / 1000 + 2;
    fprintf(stderr, "logs: %d bad logins on port %u: %d lines, %lu counted as suppressed\n",
            attempts, port, lines, more);
    cr_assert_gt(lines, 0, "no '%s' line", needle);
    cr_assert_gt(more, 0, "no line says how many were suppressed");
    cr_assert_eq((unsigned long)lines + more, (unsigned long)attempts,
                 "%d lines + %lu suppressed != %d attempts", lines, more, attempts);
    cr_assert_leq((uint64_t)lines, 5 * windows, "%d lines in at most %llu windows of 1 s", lines,
                  (unsigned long long)windows);
}

/* A python3 program: every line of the file is one JSON object with
 * exactly ts, level, node, msg (strings, well-formed), at most 1024 bytes
 * with its "\n"; prints the number of lines. */
static const char json_check[] =
    "import json, re, sys\n"
    "n = 0\n"
    "data = open(sys.argv[1], 'rb').read()\n"
    "assert data.endswith(b'\\n'), 'last line unfinished'\n"
    "for raw in data.split(b'\\n')[:-1]:\n"
    "    assert len(raw) + 1 <= 1024, raw\n"
    "    pairs = json.loads(raw.decode('utf-8'), object_pairs_hook=lambda p: p)\n"
    "    keys = [k for k, v in pairs]\n"
    "    assert keys == ['ts', 'level', 'node', 'msg'], raw\n"
    "    o = dict(pairs)\n"
    "    assert all(isinstance(v, str) for v in o.values()), raw\n"
    "    assert re.fullmatch(r'\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\d\\.\\d{3}Z', o['ts']), "
    "raw\n"
    "    assert o['level'] in ('error', 'warn', 'info', 'debug'), raw\n"
    "    assert re.fullmatch(r'[0-9a-f]{16}', o['node']), raw\n"
    "    n += 1\n"
    "print(n)\n";

/* Runs json_check on the file: the number of lines, or -1 if it failed. */
static int json_lines(const char *path)
{
    char dir[] = "/tmp/tk-logs-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char prog[64], cmd[512];
    snprintf(prog, sizeof(prog), "%s/check.py", dir);
    FILE *f = fopen(prog, "w");
    cr_assert_not_null(f);
    fputs(json_check, f);
    fclose(f);
    snprintf(cmd, sizeof(cmd), "python3 %s %s", prog, path);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    int n = -1;
    if (fscanf(p, "%d", &n) != 1)
        n = -1;
    int st = pclose(p);
    unlink(prog);
    rmdir(dir);
    return st == 0 ? n : -1;
}

Test(logs, json_lines_from_start_to_shutdown)
{
    static const char *const args[] = {"--threads", "2", "--log-format", "json", "--log-level",
                                       "debug",     NULL};
    cr_assert_eq(tk_node_start(&node, args), 0);
    bad_login(node.port, "TICKETING/1"); /* a warn line with an address */
    struct tk_tc c;
    cr_assert_eq(tk_tc_open(&c, node.port, TK_TEST_SECRET), 0);
    tk_tc_close(&c);
    int st = tk_node_stop(&node, SIGTERM, 10000);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
    const char *text = read_log(&node);
    cr_assert_gt(count_lines(text, "\"level\":\"debug\"", "settings: "), 0, "%s", text);
    cr_assert_eq(count_lines(text, "\"level\":\"warn\"", "auth failed from 127.0.0.1:"), 1, "%s",
                 text);
    cr_assert_gt(count_lines(text, "\"msg\":\"stopped\"", NULL), 0, "%s", text);
    int n = json_lines(node.log_file);
    cr_assert_geq(n, 5, "not every line is a JSON object with ts, level, node, msg:\n%s", text);
    cr_assert_eq(n, count_lines(text, "{", NULL));
}

Test(logs, warn_hides_info_and_debug_shows_debug)
{
    static const char *const warn[] = {"--threads", "1", "--log-level", "warn", NULL};
    cr_assert_eq(tk_node_start(&node, warn), 0);
    bad_login(node.port, "TICKETING/1");
    tk_node_stop(&node, SIGTERM, 10000);
    const char *text = read_log(&node);
    cr_assert_eq(count_lines(text, "Z warn node=", "auth failed from 127.0.0.1:"), 1, "%s", text);
    cr_assert_eq(count_lines(text, "Z info node=", NULL), 0, "%s", text);
    cr_assert_eq(count_lines(text, "Z debug node=", NULL), 0, "%s", text);
    tk_node_cleanup(&node);

    static const char *const debug[] = {"--threads", "1", "--log-level", "Debug", NULL};
    cr_assert_eq(tk_node_start(&node, debug), 0);
    tk_node_stop(&node, SIGTERM, 10000);
    text = read_log(&node);
    cr_assert_gt(count_lines(text, "Z debug node=", "settings: "), 0, "%s", text);
    cr_assert_gt(count_lines(text, "Z info node=", "listening on"), 0, "%s", text);
}

Test(logs, a_bad_log_level_stops_the_start)
{
    cr_assert_eq(tk_node_prepare(&node, tk_free_port3()), 0);
    static const char *const args[] = {"--log-level", "bogus", NULL};
    cr_assert_eq(tk_node_spawn(&node, args), 0);
    int st = 0;
    uint64_t end = tk_test_ms() + 10000;
    while (waitpid(node.pid, &st, WNOHANG) == 0 && tk_test_ms() < end)
        usleep(10000);
    cr_assert(WIFEXITED(st), "ticketingd --log-level bogus still runs");
    node.pid = -1;
    cr_assert_eq(WEXITSTATUS(st), 2);
    const char *text = read_log(&node);
    cr_assert_eq(
        count_lines(text, "--log-level: expected error, warn, info or debug (or 0-3)", "'bogus'"),
        1, "%s", text);
}

Test(logs, failed_logins_on_the_client_port_are_rate_limited)
{
    static const char *const args[] = {"--threads", "2", NULL};
    cr_assert_eq(tk_node_start(&node, args), 0);
    flood_and_check(&node, node.port, "TICKETING/1", "auth failed from 127.0.0.1:");
    const char *text = read_log(&node);
    cr_assert_gt(count_lines(text, "auth failed from 127.0.0.1:", "(client port): bad proof"), 0,
                 "%s", text);
}

/* The cluster logs JSON too: the peer port's lines, and every line of the
 * three members from start to shutdown (bootstrap, leadership, peer
 * links, leadership handed over) must parse. */
Test(logs, failed_logins_on_the_peer_port_are_rate_limited)
{
    static const char *const fast[] = {
        "--heartbeat-ms", "50", "--election-ms", "400", "--log-format", "json", NULL};
    cr_assert_eq(tk_cluster_start(&cl, 3, fast), 0);
    struct tk_node *m = &cl.node[1];
    flood_and_check(m, m->port + 1, "TICKETING-PEER/2", "auth failed from 127.0.0.1:");
    const char *text = read_log(m);
    cr_assert_gt(count_lines(text, "auth failed from 127.0.0.1:", "(peer port): bad proof"), 0,
                 "%s", text);
    cr_assert_eq(count_lines(text, "(client port)", NULL), 0, "%s", text);
    for (int i = 0; i < 3; i++) /* stopped first: no line half written */
        tk_node_stop(&cl.node[i], SIGTERM, 10000);
    for (int i = 0; i < 3; i++) {
        text = read_log(&cl.node[i]);
        cr_assert_gt(json_lines(cl.node[i].log_file), 0, "member %d:\n%s", i, text);
    }
}
