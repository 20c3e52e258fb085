/* ticketing-client-cost: what libticketing itself costs per request.
 *
 *     ticketing-client-cost --addrs A --secret-file F [--seconds 5]
 *                           [--inflight 64] [--keys 4096]
 *
 * Keeps `inflight` acquire+release pairs going through one client object
 * (the asynchronous calls, each pair on its own key, wait 0), for the
 * given seconds, and prints one JSON line: pairs per second and the
 * client process's CPU (user + system) per pair, which is the library's
 * share (the server runs in its own processes). With a ring of several
 * groups the same run measures routing: the client is seeded with one
 * group's addresses and routes every key. docs/benchmarks.md, section 13.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "client/ticketing.h"

static struct tk_client *client;
static atomic_uint_fast64_t pairs, failures;
static atomic_bool stopping;
static uint32_t nkeys = 4096;
static atomic_uint inflight_now;

struct slot {
    char key[32];
    uint64_t token;
};
static struct slot *slots;
static uint32_t nslots;

static void start(struct slot *s);

static void released(void *arg, const struct tk_client_result *r)
{
    struct slot *s = arg;
    if (r->outcome == TK_CLIENT_RELEASED)
        atomic_fetch_add(&pairs, 1);
    else
        atomic_fetch_add(&failures, 1);
    start(s);
}

static void acquired(void *arg, const struct tk_client_result *r)
{
    struct slot *s = arg;
    if (r->outcome != TK_CLIENT_ACQUIRED) {
        atomic_fetch_add(&failures, 1);
        start(s);
        return;
    }
    s->token = r->token;
    if (tk_client_release_async(client, s->key, s->token, released, s) != TK_CLIENT_ENONE) {
        atomic_fetch_add(&failures, 1);
        atomic_fetch_sub(&inflight_now, 1);
    }
}

/* The next pair of slot s, on a key of its own range. */
static void start(struct slot *s)
{
    if (atomic_load(&stopping)) {
        atomic_fetch_sub(&inflight_now, 1);
        return;
    }
    uint32_t i = (uint32_t)(s - slots);
    static _Thread_local uint32_t turn;
    snprintf(s->key, sizeof s->key, "cost-%u", i + nslots * (turn++ % (nkeys / nslots + 1)));
    if (tk_client_acquire_async(client, s->key, 30000, 0, acquired, s, NULL) != TK_CLIENT_ENONE) {
        atomic_fetch_add(&failures, 1);
        atomic_fetch_sub(&inflight_now, 1);
    }
}

static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

int main(int argc, char **argv)
{
    const char *addrs = NULL, *secret = NULL;
    unsigned seconds = 5;
    nslots = 64;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--addrs"))
            addrs = argv[i + 1];
        else if (!strcmp(argv[i], "--secret-file"))
            secret = argv[i + 1];
        else if (!strcmp(argv[i], "--seconds"))
            seconds = (unsigned)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--inflight"))
            nslots = (uint32_t)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--keys"))
            nkeys = (uint32_t)atoi(argv[i + 1]);
        else {
            fprintf(stderr, "unknown option %s\n", argv[i]);
            return 64;
        }
    }
    if (addrs == NULL || secret == NULL || nslots == 0 || seconds == 0 || nkeys < nslots) {
        fprintf(stderr,
                "usage: ticketing-client-cost --addrs A --secret-file F [--seconds N] "
                "[--inflight N] [--keys N >= inflight]\n");
        return 64;
    }
    struct tk_client_config cfg;
    tk_client_config_init(&cfg);
    cfg.addrs = addrs;
    cfg.secret_file = secret;
    if (tk_client_create(&cfg, &client) != TK_CLIENT_ENONE ||
        !tk_client_wait_ready(client, 10000)) {
        fprintf(stderr, "ticketing-client-cost: no connection to %s\n", addrs);
        return 1;
    }
    slots = calloc(nslots, sizeof *slots);
    /* One warm-up second: connections of every group made, ring known. */
    atomic_store(&inflight_now, nslots);
    for (uint32_t i = 0; i < nslots; i++)
        start(&slots[i]);
    sleep(1);
    uint64_t p0 = atomic_load(&pairs);
    double c0 = cpu_s();
    sleep(seconds);
    uint64_t p1 = atomic_load(&pairs);
    double c1 = cpu_s();
    atomic_store(&stopping, true);
    while (atomic_load(&inflight_now) > 0)
        usleep(10000);
    struct tk_client_stats st;
    tk_client_stats(client, &st);
    tk_client_destroy(client);
    double n = (double)(p1 - p0);
    printf("{\"pairs_per_s\":%.0f,\"client_cpu_us_per_pair\":%.2f,\"failures\":%" PRIu64
           ",\"groups\":%u,\"rerouted\":%" PRIu64 ",\"ring_version\":%" PRIu64 "}\n",
           n / seconds, n > 0 ? (c1 - c0) * 1e6 / n : 0.0, atomic_load(&failures), st.groups,
           st.rerouted, st.ring_version);
    free(slots);
    return 0;
}
