/* chaos_client: a contending lock user for the fault harness (tests/chaos/).
 *
 * One process, one libticketing client, several threads. Each thread loops
 * until its time is up: acquire one of a few keys, and on ACQUIRED stay in
 * the critical section for a while (never past lease_deadline_us less a
 * safety), then release. Now and then a holder "abandons" the key instead:
 * it stays until its deadline less the safety and never releases, so the
 * server's lease expiry hands the key on.
 *
 * Every call and outcome goes to a history file, one JSON object per line,
 * with times from tk_client_now_us() (CLOCK_MONOTONIC, microseconds). Every
 * network namespace shares the kernel's monotonic clock, so the histories
 * of clients in different namespaces, and the harness's fault log, can be
 * compared line by line. tests/chaos/check.py reads them.
 *
 * Lines (field "ev"):
 *   invoke   acquire asked: key, lease_ms, wait_ms
 *   result   its outcome: outcome, token, deadline (lease_deadline_us), sent
 *   enter    the thread entered the critical section
 *   exit     it left (for an abandon: "abandon": true, and no release);
 *            "planned" is when it meant to leave, t when its sleep ended
 *   rinvoke  release asked (token)
 *   rresult  release outcome
 * Every line has c (client name), th (thread), id (per thread acquire
 * number) and t (microseconds).
 *
 * --break-indeterminate makes the client enter the critical section on
 * INDETERMINATE too, as a careless user would; the checker must catch it.
 * It exists to show that the checks can fail.
 *
 * Two groups (tests/integ/test_moves.c): --addrs-b names a second group
 * (--secret-file-b its client secret) and --slots LO-HI picks the keys among those whose slot is in
 * LO..HI. Each client routes by the ring itself (a W brings the ring and a resend); a
 * WRONG_GROUP outcome (the budget ran out during a move: nothing was done) sends the thread's
 * next acquire through the other client. Result lines carry "g", the client asked (0: --addrs,
 * 1: --addrs-b), not the group that answered.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "client/ticketing.h"
#include "core/tk.h"

static struct {
    const char *addrs, *addrs_b;
    uint32_t slot_lo, slot_hi;
    const char *secret_file, *secret_file_b;
    const char *out;
    const char *name;
    int threads;
    int keys;
    uint32_t lease_ms;
    uint32_t wait_ms;
    uint32_t seconds;
    uint32_t hold_max_ms;
    uint32_t safety_ms;
    uint32_t abandon_pct;
    uint64_t seed;
    bool break_indeterminate;
} opt = {.threads = 3,
         .keys = 3,
         .lease_ms = 2000,
         .wait_ms = 2000,
         .seconds = 60,
         .hold_max_ms = 300,
         .safety_ms = 10,
         .abandon_pct = 10,
         .seed = 1,
         .slot_hi = TK_SLOTS - 1};

static struct tk_client *clients[2];
static FILE *hist;
static pthread_mutex_t hist_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t end_us;

static void emit(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void emit(const char *fmt, ...)
{
    va_list ap;
    pthread_mutex_lock(&hist_mu);
    va_start(ap, fmt);
    vfprintf(hist, fmt, ap);
    va_end(ap);
    fputc('\n', hist);
    fflush(hist);
    pthread_mutex_unlock(&hist_mu);
}

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void sleep_us(uint64_t us)
{
    struct timespec ts = {.tv_sec = (time_t)(us / 1000000u),
                          .tv_nsec = (long)(us % 1000000u) * 1000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Stays inside until `until` (an absolute time) and returns the exit time. */
static uint64_t stay_until(uint64_t until)
{
    uint64_t now = tk_client_now_us();
    if (until > now)
        sleep_us(until - now);
    return tk_client_now_us();
}

/* The n-th key "k<i>" whose slot is in --slots. */
static void key_name(int n, char *key, size_t cap)
{
    for (int i = 0;; i++) {
        snprintf(key, cap, "k%d", i);
        uint32_t slot = tk_slot(key, strlen(key));
        if (slot >= opt.slot_lo && slot <= opt.slot_hi && n-- == 0)
            return;
    }
}

static void *thread_main(void *arg)
{
    int th = (int)(intptr_t)arg;
    uint64_t s = opt.seed * 0x9E3779B97F4A7C15ull + (uint64_t)th * 7919u + 1u;
    const char *c = opt.name;
    int g = 0; /* the group this thread asks */
    for (uint64_t id = 1; tk_client_now_us() < end_us; id++) {
        char key[16];
        key_name((int)(rnd(&s) % (uint64_t)opt.keys), key, sizeof(key));
        struct tk_client *client = clients[g];
        uint64_t t0 = tk_client_now_us();
        emit("{\"c\":\"%s\",\"th\":%d,\"id\":%" PRIu64 ",\"ev\":\"invoke\",\"t\":%" PRIu64
             ",\"key\":\"%s\",\"lease_ms\":%u,\"wait_ms\":%u}",
             c, th, id, t0, key, opt.lease_ms, opt.wait_ms);
        struct tk_client_result r;
        memset(&r, 0, sizeof(r));
        enum tk_client_outcome o = tk_client_acquire(client, key, opt.lease_ms, opt.wait_ms, &r);
        uint64_t t1 = tk_client_now_us();
        emit("{\"c\":\"%s\",\"th\":%d,\"id\":%" PRIu64 ",\"ev\":\"result\",\"t\":%" PRIu64
             ",\"key\":\"%s\",\"outcome\":\"%s\",\"token\":%" PRIu64 ",\"deadline\":%" PRIu64
             ",\"sent\":%" PRIu64 ",\"g\":%d}",
             c, th, id, t1, key, tk_client_outcome_str(o), r.token,
             o == TK_CLIENT_ACQUIRED ? r.lease_deadline_us : 0, r.sent_us, g);
        if (o == TK_CLIENT_WRONG_GROUP && clients[1] != NULL) {
            g = 1 - g; /* nothing was done: the next acquire asks the other group */
            sleep_us(1000u * (1u + rnd(&s) % 20u));
            continue;
        }
        bool enter =
            o == TK_CLIENT_ACQUIRED || (opt.break_indeterminate && o == TK_CLIENT_INDETERMINATE);
        if (enter) {
            /* The deadline a careless user would assume for an INDETERMINATE
             * acquire: as if it had been granted. */
            uint64_t deadline = o == TK_CLIENT_ACQUIRED
                                    ? r.lease_deadline_us
                                    : (r.sent_us ? r.sent_us : t0) + (uint64_t)opt.lease_ms * 1000u;
            uint64_t last = deadline - (uint64_t)opt.safety_ms * 1000u;
            uint64_t now = tk_client_now_us();
            if (now < last) {
                emit("{\"c\":\"%s\",\"th\":%d,\"id\":%" PRIu64 ",\"ev\":\"enter\",\"t\":%" PRIu64
                     ",\"key\":\"%s\",\"token\":%" PRIu64 "}",
                     c, th, id, now, key, r.token);
                bool abandon = rnd(&s) % 100u < opt.abandon_pct;
                uint64_t until = abandon ? last : now + 1000u * (1u + rnd(&s) % opt.hold_max_ms);
                if (until > last)
                    until = last;
                uint64_t t2 = stay_until(until);
                emit("{\"c\":\"%s\",\"th\":%d,\"id\":%" PRIu64 ",\"ev\":\"exit\",\"t\":%" PRIu64
                     ",\"key\":\"%s\",\"abandon\":%s,\"planned\":%" PRIu64 "}",
                     c, th, id, t2, key, abandon ? "true" : "false", until);
                if (abandon)
                    continue;
            }
            if (o == TK_CLIENT_ACQUIRED) {
                uint64_t t3 = tk_client_now_us();
                emit("{\"c\":\"%s\",\"th\":%d,\"id\":%" PRIu64 ",\"ev\":\"rinvoke\",\"t\":%" PRIu64
                     ",\"key\":\"%s\",\"token\":%" PRIu64 "}",
                     c, th, id, t3, key, r.token);
                struct tk_client_result rr;
                memset(&rr, 0, sizeof(rr));
                enum tk_client_outcome ro = tk_client_release(client, key, r.token, &rr);
                emit("{\"c\":\"%s\",\"th\":%d,\"id\":%" PRIu64 ",\"ev\":\"rresult\",\"t\":%" PRIu64
                     ",\"key\":\"%s\",\"outcome\":\"%s\",\"resent\":%s}",
                     c, th, id, tk_client_now_us(), key, tk_client_outcome_str(ro),
                     rr.resent ? "true" : "false");
            }
        }
        sleep_us(1000u * (rnd(&s) % 50u));
    }
    return NULL;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: chaos_client --addrs A --secret-file F --out FILE --name NAME\n"
            "  [--threads 3] [--keys 3] [--lease-ms 2000] [--wait-ms 2000] [--seconds 60]\n"
            "  [--hold-max-ms 300] [--safety-ms 10] [--abandon-pct 10] [--seed 1]\n"
            "  [--break-indeterminate] [--addrs-b B [--secret-file-b F] --slots LO-HI]\n");
    exit(64);
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--break-indeterminate")) {
            opt.break_indeterminate = true;
            continue;
        }
        if (!v)
            usage();
        i++;
        if (!strcmp(a, "--addrs"))
            opt.addrs = v;
        else if (!strcmp(a, "--addrs-b"))
            opt.addrs_b = v;
        else if (!strcmp(a, "--slots") && sscanf(v, "%u-%u", &opt.slot_lo, &opt.slot_hi) != 2)
            usage();
        else if (!strcmp(a, "--slots"))
            ;
        else if (!strcmp(a, "--secret-file"))
            opt.secret_file = v;
        else if (!strcmp(a, "--secret-file-b"))
            opt.secret_file_b = v;
        else if (!strcmp(a, "--out"))
            opt.out = v;
        else if (!strcmp(a, "--name"))
            opt.name = v;
        else if (!strcmp(a, "--threads"))
            opt.threads = atoi(v);
        else if (!strcmp(a, "--keys"))
            opt.keys = atoi(v);
        else if (!strcmp(a, "--lease-ms"))
            opt.lease_ms = (uint32_t)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--wait-ms"))
            opt.wait_ms = (uint32_t)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--seconds"))
            opt.seconds = (uint32_t)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--hold-max-ms"))
            opt.hold_max_ms = (uint32_t)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--safety-ms"))
            opt.safety_ms = (uint32_t)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--abandon-pct"))
            opt.abandon_pct = (uint32_t)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--seed"))
            opt.seed = strtoull(v, NULL, 10);
        else
            usage();
    }
    if (!opt.addrs || !opt.secret_file || !opt.out || !opt.name || opt.threads < 1 ||
        opt.threads > 64 || opt.keys < 1 || opt.hold_max_ms < 1 || opt.seed == 0 ||
        opt.slot_lo > opt.slot_hi || opt.slot_hi >= TK_SLOTS)
        usage();
    hist = fopen(opt.out, "a");
    if (!hist) {
        perror(opt.out);
        return 1;
    }
    for (int g = 0; g < (opt.addrs_b ? 2 : 1); g++) {
        struct tk_client_config cfg;
        tk_client_config_init(&cfg);
        cfg.addrs = g ? opt.addrs_b : opt.addrs;
        cfg.secret_file = g && opt.secret_file_b ? opt.secret_file_b : opt.secret_file;
        char owner[TK_CLIENT_OWNER_MAX + 1];
        snprintf(owner, sizeof(owner), "chaos-%s", opt.name);
        cfg.owner = owner;
        int err = tk_client_create(&cfg, &clients[g]);
        if (err) {
            fprintf(stderr, "chaos_client: %s\n", tk_client_strerror(err));
            return 1;
        }
    }
    end_us = tk_client_now_us() + (uint64_t)opt.seconds * 1000000u;
    pthread_t t[64];
    for (int i = 0; i < opt.threads; i++)
        pthread_create(&t[i], NULL, thread_main, (void *)(intptr_t)i);
    for (int i = 0; i < opt.threads; i++)
        pthread_join(t[i], NULL);
    for (int g = 0; g < 2; g++)
        tk_client_destroy(clients[g]);
    fclose(hist);
    return 0;
}
