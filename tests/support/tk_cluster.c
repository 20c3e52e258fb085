/* Test support: clusters of real ticketingd processes. */
#include "tests/support/tk_cluster.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int tk_cluster_status(struct tk_cluster *c, int i, char *out, size_t cap)
{
    return tk_http_get(c->node[i].port + 2, "/status", out, cap);
}

bool tk_json_u64(const char *json, const char *name, uint64_t *out)
{
    char pat[128];
    snprintf(pat, sizeof(pat), "\"%s\":", name);
    const char *p = strstr(json, pat);
    if (!p)
        return false;
    p += strlen(pat);
    if (*p == '"')
        p++;
    char *end;
    unsigned long long v = strtoull(p, &end, 10);
    if (end == p)
        return false;
    *out = v;
    return true;
}

bool tk_metric_u64(const char *text, const char *name, uint64_t *out)
{
    char pat[160];
    snprintf(pat, sizeof(pat), "\n%s ", name);
    const char *p = strstr(text, pat);
    if (!p)
        return false;
    *out = strtoull(p + strlen(pat), NULL, 10);
    return true;
}

int tk_cluster_leader(struct tk_cluster *c, int timeout_ms, unsigned skip_mask)
{
    uint64_t end = tk_test_ms() + (uint64_t)timeout_ms;
    char body[16384];
    do {
        for (int i = 0; i < c->n; i++) {
            if ((skip_mask & (1u << i)) || c->node[i].pid <= 0)
                continue;
            if (tk_cluster_status(c, i, body, sizeof(body)) == 200 &&
                strstr(body, "\"serving\":true"))
                return i;
        }
        usleep(10000);
    } while (tk_test_ms() < end);
    return -1;
}

/* Spawns member i with the arguments every start of it gets: its ports,
 * the cluster's --peers, its secret files and the cluster's extra list. */
static int spawn_member(struct tk_cluster *c, int i, const char *const *more)
{
    char adv[64];
    snprintf(adv, sizeof(adv), "127.0.0.1:%u", c->node[i].port);
    const char *args[40];
    int a = 0;
    args[a++] = "--peers";
    args[a++] = c->peers;
    args[a++] = "--peer-secret-file";
    args[a++] = c->node[i].peer_secret_file;
    args[a++] = "--advertise";
    args[a++] = adv;
    /* Odd members run one worker, which also runs the Raft loop; even
     * ones two workers and a Raft thread: every cluster test covers both. */
    args[a++] = "--threads";
    args[a++] = i % 2 ? "1" : "2";
    for (int k = 0; c->extra && c->extra[k] && a < 38; k++)
        args[a++] = c->extra[k];
    for (int k = 0; more && more[k] && a < 38; k++)
        args[a++] = more[k];
    args[a] = NULL;
    return tk_node_spawn(&c->node[i], args);
}

int tk_cluster_spawn(struct tk_cluster *c, int n, const char *const *extra)
{
    memset(c, 0, sizeof(*c));
    c->n = n;
    c->extra = extra;
    uint32_t ports[TK_CLUSTER_MAX];
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        /* Distinct triples: retry until no two overlap. */
        for (;;) {
            ports[i] = tk_free_port3();
            bool clash = ports[i] == 0;
            for (int j = 0; j < i; j++)
                clash |= ports[i] + 3 > ports[j] && ports[j] + 3 > ports[i];
            if (!clash)
                break;
        }
        off += (size_t)snprintf(c->peers + off, sizeof(c->peers) - off, "%s127.0.0.1:%u",
                                i ? "," : "", ports[i] + 1);
    }
    for (int i = 0; i < n; i++) {
        if (tk_node_prepare(&c->node[i], ports[i]) < 0)
            return -1;
        if (spawn_member(c, i, NULL) < 0)
            return -1;
    }
    return 0;
}

int tk_cluster_start(struct tk_cluster *c, int n, const char *const *extra)
{
    if (tk_cluster_spawn(c, n, extra) < 0)
        return -1;
    if (tk_cluster_leader(c, 15000, 0) >= 0)
        return 0;
    /* No leader: the members' own words are the only clue, and the test's
     * teardown removes their files. */
    fprintf(stderr, "tk_cluster_start: no leader among %d members within 15 s\n", n);
    tk_cluster_dump_logs(c, 30);
    return -1;
}

int tk_cluster_restart(struct tk_cluster *c, int i)
{
    return tk_cluster_restart_with(c, i, NULL);
}

int tk_cluster_restart_with(struct tk_cluster *c, int i, const char *const *more)
{
    if (i < 0 || i >= c->n || !c->node[i].dir[0])
        return -1;
    struct tk_node *n = &c->node[i];
    /* The previous process must be gone (reaped here if it just died). */
    uint64_t end = tk_test_ms() + 5000;
    while (n->pid > 0 && tk_node_alive(n)) {
        if (tk_test_ms() >= end)
            return -1;
        usleep(5000);
    }
    /* ticketingd itself waits for a port its predecessor still holds for a
     * moment (its io_uring requests are torn down asynchronously). */
    FILE *f = fopen(n->log_file, "a");
    if (f) {
        fprintf(f, "==== tk_cluster_restart: member %d, fresh process ====\n", i);
        fclose(f);
    }
    if (spawn_member(c, i, more) < 0)
        return -1;
    return tk_node_wait_port(n, 15000);
}

int tk_cluster_wait_ready(struct tk_cluster *c, int i, int timeout_ms)
{
    uint64_t t0 = tk_test_ms(), end = t0 + (uint64_t)timeout_ms;
    char body[256];
    do {
        if (!tk_node_alive(&c->node[i]))
            return -1;
        if (tk_http_get(c->node[i].port + 2, "/readyz", body, sizeof(body)) == 200)
            return (int)(tk_test_ms() - t0);
        usleep(20000);
    } while (tk_test_ms() < end);
    return -1;
}

bool tk_json_str(const char *json, const char *name, char *out, size_t cap)
{
    char pat[128];
    snprintf(pat, sizeof(pat), "\"%s\":\"", name);
    const char *p = strstr(json, pat);
    if (!p)
        return false;
    p += strlen(pat);
    const char *q = strchr(p, '"');
    if (!q || (size_t)(q - p) >= cap)
        return false;
    memcpy(out, p, (size_t)(q - p));
    out[q - p] = 0;
    return true;
}

uint64_t tk_cluster_node_id(struct tk_cluster *c, int i)
{
    static char body[1 << 16];
    char hex[32];
    if (tk_cluster_status(c, i, body, sizeof(body)) != 200 ||
        !tk_json_str(body, "node_id", hex, sizeof(hex)))
        return 0;
    return strtoull(hex, NULL, 16);
}

bool tk_cluster_domain(struct tk_cluster *c, int i, char out[33])
{
    static char body[1 << 16];
    return tk_cluster_status(c, i, body, sizeof(body)) == 200 &&
           tk_json_str(body, "domain", out, 33) && strlen(out) == 32;
}

int tk_cluster_members(struct tk_cluster *c, int i, struct tk_member *out, int cap, int *voters)
{
    static char body[1 << 16];
    if (tk_cluster_status(c, i, body, sizeof(body)) != 200)
        return -1;
    const char *p = strstr(body, "\"members\":[");
    if (!p)
        return -1;
    p += strlen("\"members\":[");
    int count = 0, nv = 0;
    while (*p == '{' || *p == ',') {
        if (*p == ',') {
            p++;
            continue;
        }
        const char *e = strchr(p, '}');
        if (!e)
            return -1;
        char one[1024];
        size_t len = (size_t)(e - p) < sizeof(one) - 1 ? (size_t)(e - p) : sizeof(one) - 1;
        memcpy(one, p, len);
        one[len] = 0;
        struct tk_member m = {0};
        char hex[32];
        if (tk_json_str(one, "id", hex, sizeof(hex)))
            m.id = strtoull(hex, NULL, 16);
        m.voter = strstr(one, "\"voter\":true") != NULL;
        tk_json_str(one, "peer_addr", m.peer_addr, sizeof(m.peer_addr));
        tk_json_u64(one, "match_index", &m.match_index);
        tk_json_u64(one, "lag", &m.lag);
        if (count < cap && out)
            out[count] = m;
        count++;
        nv += m.voter;
        p = e + 1;
    }
    if (voters)
        *voters = nv;
    return count;
}

int tk_cluster_count_members(struct tk_cluster *c, int i, int *voters)
{
    return tk_cluster_members(c, i, NULL, 0, voters);
}

long tk_cluster_rss_kib(struct tk_cluster *c, int i)
{
    if (c->node[i].pid <= 0)
        return -1;
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)c->node[i].pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    long kib = -1;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
            break;
    fclose(f);
    return kib;
}

void tk_cluster_dump_logs(struct tk_cluster *c, int lines)
{
    for (int i = 0; i < c->n; i++) {
        if (!c->node[i].dir[0])
            continue;
        FILE *f = fopen(c->node[i].log_file, "r");
        if (!f)
            continue;
        enum { TAIL = 1 << 16 };
        char *buf = malloc(TAIL + 1);
        fseek(f, 0, SEEK_END);
        long size = ftell(f);
        long from = size > TAIL ? size - TAIL : 0;
        fseek(f, from, SEEK_SET);
        size_t got = buf ? fread(buf, 1, TAIL, f) : 0;
        fclose(f);
        if (!buf)
            continue;
        buf[got] = 0;
        const char *p = buf + got;
        int seen = 0;
        while (p > buf && seen <= lines)
            if (*--p == '\n')
                seen++;
        if (*p == '\n')
            p++;
        fprintf(stderr, "---- node %d (port %u, pid %d) log %s, last %d lines ----\n%s", i,
                c->node[i].port, (int)c->node[i].pid, c->node[i].log_file, lines, p);
        free(buf);
    }
}

void tk_cluster_stop(struct tk_cluster *c)
{
    if (c->keep_logs)
        tk_cluster_dump_logs(c, 40);
    for (int i = 0; i < c->n; i++) {
        if (c->node[i].pid > 0) {
            kill(c->node[i].pid, SIGCONT);
            tk_node_stop(&c->node[i], SIGKILL, 3000);
        }
        if (c->keep_logs && c->node[i].dir[0])
            fprintf(stderr, "node %d: logs kept in %s\n", i, c->node[i].dir);
        else
            tk_node_cleanup(&c->node[i]);
    }
}

void tk_cluster_client_addrs(const struct tk_cluster *c, char *out, size_t cap)
{
    size_t n = 0;
    out[0] = 0;
    for (int i = 0; i < c->n && n < cap; i++)
        n += (size_t)snprintf(out + n, cap - n, "%s127.0.0.1:%u", i ? "," : "", c->node[i].port);
}

int tk_run_cmd(char *out, size_t cap, const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    strncat(cmd, " 2>&1", sizeof(cmd) - strlen(cmd) - 1);
    out[0] = 0;
    FILE *p = popen(cmd, "r");
    if (p == NULL)
        return -1;
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}
