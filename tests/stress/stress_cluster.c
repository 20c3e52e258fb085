/* Threaded stress of a real 3-node cluster (run under TSan with the TSan
 * build: every ticketingd is instrumented, and a race report makes it exit
 * non-zero). Client threads acquire and release hot keys on the leader;
 * the leader is stopped with SIGTERM (leadership transfer) halfway; all
 * nodes must then exit cleanly on SIGTERM. Exit 0 pass, 1 fail. */
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/support/tk_cluster.h"

#define CLIENTS 4
#define KEYS 3

static struct tk_cluster cl;
static _Atomic int leader = -1, stop;
static int failures;
static uint64_t grants;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static void *client_main(void *arg)
{
    int me = (int)(intptr_t)arg;
    struct tk_tc *c = NULL;
    uint64_t id = 1;
    while (!stop) {
        if (!c) {
            int l = leader;
            c = malloc(sizeof(*c));
            if (l < 0 || tk_tc_open(c, cl.node[l].port, TK_TEST_SECRET) != 0) {
                free(c);
                c = NULL;
                usleep(50000);
                continue;
            }
        }
        int key = (int)(id / 2) % KEYS;
        char line[256];
        tk_tc_send(c, "A %" PRIu64 " hot-%d c%d 5000 2000\n", id, key, me);
        int n = tk_tc_line(c, line, sizeof(line), 10000);
        uint64_t gid, token;
        if (n >= 0 && sscanf(line, "G %" SCNu64 " %" SCNu64, &gid, &token) == 2) {
            pthread_mutex_lock(&mu);
            grants++;
            pthread_mutex_unlock(&mu);
            tk_tc_send(c, "R %" PRIu64 " hot-%d c%d %" PRIu64 "\n", id + 1, key, me, token);
            n = tk_tc_line(c, line, sizeof(line), 10000);
        }
        id += 2;
        if (n < 0 || line[0] == 'M' || line[0] == 'E') {
            tk_tc_close(c);
            free(c);
            c = NULL;
        }
    }
    if (c) {
        tk_tc_close(c);
        free(c);
    }
    return NULL;
}

static int stop_node(int i)
{
    int st = tk_node_stop(&cl.node[i], SIGTERM, 30000);
    if (!(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
        fprintf(stderr, "stress_cluster: node %d exit status %d (logs in %s)\n", i, st,
                cl.node[i].dir);
        setenv("TK_KEEP_LOGS", "1", 1);
        return 1;
    }
    return 0;
}

int main(void)
{
    static const char *const args[] = {"--heartbeat-ms", "50", "--election-ms", "600", NULL};
    if (tk_cluster_start(&cl, 3, args) != 0) {
        fprintf(stderr, "stress_cluster: no leader\n");
        tk_cluster_stop(&cl);
        return 1;
    }
    leader = tk_cluster_leader(&cl, 5000, 0);
    pthread_t t[CLIENTS];
    for (int i = 0; i < CLIENTS; i++)
        pthread_create(&t[i], NULL, client_main, (void *)(intptr_t)i);
    sleep(2);
    int old = leader;
    leader = -1;
    failures += stop_node(old);
    leader = tk_cluster_leader(&cl, 20000, 1u << old);
    if (leader < 0) {
        fprintf(stderr, "stress_cluster: no leader after SIGTERM of the old one\n");
        failures++;
    }
    sleep(2);
    stop = 1;
    for (int i = 0; i < CLIENTS; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < 3; i++)
        if (i != old)
            failures += stop_node(i);
    tk_cluster_stop(&cl);
    printf("stress_cluster: %" PRIu64 " grants, %d failures\n", grants, failures);
    if (grants == 0)
        failures++;
    return failures ? 1 : 0;
}
