/* Threaded stress of a real ticketingd (under TSan when built with
 * TK_SANITIZE=thread: the server binary is instrumented too, and a race
 * report makes it exit non-zero). Eight client threads contend on a few
 * hot keys across three worker threads, so requests cross shards; every
 * grant is checked against a shared record of holders: never two holders
 * of a key, tokens strictly increasing per key and overall per client.
 * Exit 0 pass, 1 fail. */
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/support/tk_test.h"

#define CLIENTS 8
#define KEYS 5
#define ROUNDS 300

static struct tk_node node;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int holder[KEYS]; /* client index + 1, 0 when free */
static uint64_t last_token[KEYS];
static int failures;
static uint64_t grants, timeouts;

static void fail(const char *what, int client, int key)
{
    pthread_mutex_lock(&mu);
    failures++;
    fprintf(stderr, "stress_server: %s (client %d, key %d)\n", what, client, key);
    pthread_mutex_unlock(&mu);
}

static void *client_main(void *arg)
{
    int me = (int)(intptr_t)arg;
    struct tk_tc *c = malloc(sizeof(*c));
    if (!c || tk_tc_open(c, node.port, TK_TEST_SECRET) != 0) {
        fail("handshake failed", me, -1);
        free(c);
        return NULL;
    }
    uint64_t id = 1;
    for (int r = 0; r < ROUNDS && !failures; r++) {
        int key = (me + r) % KEYS;
        char line[256];
        tk_tc_send(c, "A %" PRIu64 " hot-%d client-%d 30000 5000\n", id, key, me);
        if (tk_tc_line(c, line, sizeof(line), 20000) < 0) {
            fail("no answer to acquire", me, key);
            break;
        }
        uint64_t gid, token;
        if (sscanf(line, "G %" SCNu64 " %" SCNu64, &gid, &token) == 2 && gid == id) {
            pthread_mutex_lock(&mu);
            grants++;
            if (holder[key] != 0)
                failures++, fprintf(stderr, "two holders of hot-%d\n", key);
            if (token <= last_token[key])
                failures++, fprintf(stderr, "token went backwards on hot-%d\n", key);
            holder[key] = me + 1;
            last_token[key] = token;
            pthread_mutex_unlock(&mu);
            usleep(100); /* the critical section */
            pthread_mutex_lock(&mu);
            holder[key] = 0; /* cleared before the release is sent */
            pthread_mutex_unlock(&mu);
            id++;
            tk_tc_send(c, "R %" PRIu64 " hot-%d client-%d %" PRIu64 "\n", id, key, me, token);
            char want[64];
            snprintf(want, sizeof(want), "R %" PRIu64, id);
            if (tk_tc_line(c, line, sizeof(line), 20000) < 0 || strcmp(line, want) != 0)
                fail("release not confirmed", me, key);
        } else if (line[0] == 'T') {
            pthread_mutex_lock(&mu);
            timeouts++;
            pthread_mutex_unlock(&mu);
        } else {
            fail("unexpected answer", me, key);
        }
        id++;
    }
    tk_tc_close(c);
    free(c);
    return NULL;
}

int main(void)
{
    static const char *const args[] = {"--threads", "3", NULL};
    if (tk_node_start(&node, args) != 0) {
        fprintf(stderr, "stress_server: ticketingd did not start\n");
        return 1;
    }
    pthread_t t[CLIENTS];
    for (int i = 0; i < CLIENTS; i++)
        pthread_create(&t[i], NULL, client_main, (void *)(intptr_t)i);
    for (int i = 0; i < CLIENTS; i++)
        pthread_join(t[i], NULL);
    int st = tk_node_stop(&node, SIGTERM, 20000);
    if (!(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
        fprintf(stderr, "stress_server: ticketingd exit status %d (log in %s)\n", st, node.dir);
        failures++;
        setenv("TK_KEEP_LOGS", "1", 1);
    }
    tk_node_cleanup(&node);
    printf("stress_server: %" PRIu64 " grants, %" PRIu64 " timeouts, %d failures\n", grants,
           timeouts, failures);
    return failures ? 1 : 0;
}
