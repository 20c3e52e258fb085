/* Randomized test of the lock table against a reference model
 * (tests/support/lock_model.c, shared with tests/fuzz/fuzz_lock.c).
 *
 * Goal: find sequences the hand-written matrix tests miss. A seeded PRNG
 * drives one table through random acquires, releases, queries, clock steps,
 * closed connections and leader changes, with a fake Raft that commits the
 * table's proposals in FIFO order after random delays and assigns
 * increasing tokens (or, at a leader change, commits a random prefix on the
 * follower and drops the rest).
 *
 * Method: a small reference model (per key: committed holder, FIFO queue,
 * deferred requests, proposal in flight) predicts the exact replies and
 * proposals of every request and commit; timer firings are checked as
 * properties (each one is the earliest timer due, ties: waits first). After
 * every step tk_lock_check() runs and the table's counters must equal the
 * model's. Checked throughout: one holder per key (model apply asserts),
 * FIFO grant order (each grant to a waiter goes to the model's queue head),
 * tokens strictly increase (G replies and applies), every request gets
 * exactly one reply unless its client closed or the leader changed,
 * and no reply reports uncommitted state (G/R only when their command is
 * applied, Q equal to the model's committed holder).
 *
 * Seeds: TK_SEED=<n> runs that seed only; otherwise a fixed range. A failure
 * prints the seed (model assertions say it; a table panic prints it from a
 * SIGABRT handler).
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "tests/support/lock_model.h"

#define STEPS 1500
#define SEEDS 500

static uint64_t seed;

static uint64_t choose(void *ctx, uint64_t lo, uint64_t hi)
{
    return tk_prng_range(ctx, lo, hi);
}

static void fail(void *ctx, const char *msg)
{
    (void)ctx;
    cr_assert_fail("seed=%llu %s", (unsigned long long)seed, msg);
}

static void abort_handler(int sig)
{
    char buf[96];
    int n = snprintf(buf, sizeof(buf), "test_lock_random: table panic with seed=%llu step=%d\n",
                     (unsigned long long)seed, lock_model_step());
    if (n > 0)
        (void)!write(2, buf, (size_t)n);
    signal(sig, SIG_DFL);
    raise(sig);
}

static struct tk_lock_stats totals; /* over all seeds: shows what was covered */
static uint64_t deferred_seen, refused_seen, leader_changes;

static void run_seed(void)
{
    struct tk_prng p;
    tk_prng_seed(&p, seed);
    struct lock_model_cfg cfg = {.steps = STEPS,
                                 .max_requests = STEPS * 2 + 16,
                                 .holder_every = 50,
                                 .choose = choose,
                                 .fail = fail,
                                 .ctx = &p};
    struct lock_model_result res;
    lock_model_run(&cfg, &res);
    totals.grants += res.stats.grants;
    totals.handoffs += res.stats.handoffs;
    totals.releases += res.stats.releases;
    totals.expiries += res.stats.expiries;
    totals.timeouts += res.stats.timeouts;
    totals.busy += res.stats.busy;
    totals.busy_bound += res.stats.busy_bound;
    deferred_seen += res.deferred;
    refused_seen += res.refused;
    leader_changes += res.leader_changes;
}

Test(random, model)
{
    signal(SIGABRT, abort_handler);
    const char *env = getenv("TK_SEED");
    if (env != NULL && *env != '\0') {
        seed = strtoull(env, NULL, 10);
        run_seed();
        cr_log_info("TK_SEED=%llu passed", (unsigned long long)seed);
        return;
    }
    for (seed = 1; seed <= SEEDS; seed++)
        run_seed();
    cr_log_info(
        "%d seeds x %d steps: grants %llu handoffs %llu releases %llu expiries %llu "
        "timeouts %llu busy %llu (bound %llu) deferred %llu refused %llu "
        "leader changes %llu",
        SEEDS, STEPS, (unsigned long long)totals.grants, (unsigned long long)totals.handoffs,
        (unsigned long long)totals.releases, (unsigned long long)totals.expiries,
        (unsigned long long)totals.timeouts, (unsigned long long)totals.busy,
        (unsigned long long)totals.busy_bound, (unsigned long long)deferred_seen,
        (unsigned long long)refused_seen, (unsigned long long)leader_changes);
}
