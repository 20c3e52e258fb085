/* Test support: clusters of real ticketingd processes. */
#include "tests/support/tk_cluster.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

int tk_cluster_start(struct tk_cluster *c, int n, const char *const *extra)
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
        char adv[64];
        snprintf(adv, sizeof(adv), "127.0.0.1:%u", ports[i]);
        const char *args[40];
        int a = 0;
        args[a++] = "--peers";
        args[a++] = c->peers;
        args[a++] = "--peer-secret-file";
        args[a++] = c->node[i].peer_secret_file;
        args[a++] = "--advertise";
        args[a++] = adv;
        args[a++] = "--threads";
        args[a++] = "2";
        for (int k = 0; extra && extra[k] && a < 38; k++)
            args[a++] = extra[k];
        args[a] = NULL;
        if (tk_node_spawn(&c->node[i], args) < 0)
            return -1;
    }
    return tk_cluster_leader(c, 15000, 0) >= 0 ? 0 : -1;
}

void tk_cluster_stop(struct tk_cluster *c)
{
    for (int i = 0; i < c->n; i++) {
        if (c->node[i].pid > 0) {
            kill(c->node[i].pid, SIGCONT);
            tk_node_stop(&c->node[i], SIGKILL, 3000);
        }
        tk_node_cleanup(&c->node[i]);
    }
}
