/* A reference model of the lock table (shard/lock.h), driven through
 * random operations, shared by the randomized unit test
 * (tests/unit/test_lock_random.c, choices from a seeded PRNG) and the
 * libFuzzer target (tests/fuzz/fuzz_lock.c, choices from the input bytes).
 *
 * One run drives one table through acquires, releases, queries, clock
 * steps, closed connections and leader changes, with a fake Raft that
 * commits the table's proposals in FIFO order and assigns increasing
 * tokens (or, at a leader change, commits a random prefix on the follower
 * and drops the rest). The model (per key: committed holder, FIFO queue,
 * deferred requests, proposal in flight) predicts the exact replies and
 * proposals of every request and commit; timer firings are checked as
 * properties (each one is the earliest timer due, ties: waits first).
 * After every step tk_lock_check() runs and the table's counters must
 * equal the model's. Checked throughout: one holder per key, FIFO grant
 * order, strictly increasing tokens, exactly one reply per request unless
 * its client closed or the leader changed, and no reply reporting
 * uncommitted state. At the end everything is committed and every wait
 * and lease runs out: the table must be empty.
 *
 * A failed check calls cfg->fail with a message (it must not return, e.g.
 * cr_assert_fail); without one it prints the message and aborts.
 */
#ifndef TK_TESTS_LOCK_MODEL_H
#define TK_TESTS_LOCK_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "shard/lock.h"

/* Most steps and requests a run may have. */
#define LOCK_MODEL_STEPS_MAX 1500
#define LOCK_MODEL_REQ_MAX (LOCK_MODEL_STEPS_MAX * 4 + 16)

struct lock_model_cfg {
    int steps;        /* most random operations (<= LOCK_MODEL_STEPS_MAX) */
    int max_requests; /* requests a run may make (<= LOCK_MODEL_REQ_MAX) */
    int holder_every; /* check tk_lock_each_holder() every this many steps */
    /* A choice in [lo, hi]. */
    uint64_t (*choose)(void *ctx, uint64_t lo, uint64_t hi);
    /* Whether to take another step (NULL: always, up to steps). */
    bool (*more)(void *ctx);
    /* A failed check: msg says which (and the step). Must not return. */
    void (*fail)(void *ctx, const char *msg);
    void *ctx;
};

struct lock_model_result {
    struct tk_lock_stats stats; /* the table's, at the end */
    uint64_t deferred;          /* requests deferred behind a proposal */
    uint64_t refused;           /* deferred requests refused (full) */
    uint64_t leader_changes;
};

/* One run from a fresh table; *out (may be NULL) gets what it covered. */
void lock_model_run(const struct lock_model_cfg *cfg, struct lock_model_result *out);

/* The step the current run is at (for a crash handler's message). */
int lock_model_step(void);

#endif
