/* Fuzz target "lock": the lock table as a state machine, structure-aware.
 *
 * The fuzzer's bytes are the choices of tests/unit/test_lock_random.c's
 * random model test, taken from the input instead of a seeded PRNG: which
 * operation comes next (an acquire, release or query from one of four
 * client connections on one of six keys, a committed apply of the oldest
 * proposal, a timer firing after the clock moved on, a closed connection,
 * or a leader change with a committed prefix and a spell as follower), and
 * every operand. When the input runs out, everything is committed and every
 * wait and lease runs out, as at the end of a model test seed.
 *
 * The model and its checks are the random test's (tests/support/
 * lock_model.c, shared with it): after every
 * step tk_lock_check() and the table's counters against the model's; the
 * exact replies and proposals of every request and commit predicted; timer
 * firings each the earliest due (waits first on a tie); one holder per
 * key, FIFO grants, strictly increasing tokens, exactly one reply per
 * request unless its client closed or leadership changed, and nothing
 * reported before it is committed. A failed check aborts; so does a table
 * panic.
 */
#include "tests/fuzz/fuzz.h"

#include "tests/support/lock_model.h"

/* ---- Input: the choices ---- */

static const uint8_t *in_p;
static size_t in_left;

/* A choice in [lo, hi] from the next input bytes (as many as the range
 * needs, little-endian); lo once the input is used up. */
static uint64_t pick(void *ctx, uint64_t lo, uint64_t hi)
{
    (void)ctx;
    uint64_t span = hi - lo;
    if (span == 0)
        return lo;
    uint64_t v = 0;
    int bytes = 0;
    for (uint64_t s = span; s != 0 && in_left > 0; s >>= 8, bytes++) {
        v |= (uint64_t)*in_p++ << (8 * bytes);
        in_left--;
    }
    return lo + (span == UINT64_MAX ? v : v % (span + 1));
}

static bool more(void *ctx)
{
    (void)ctx;
    return in_left > 0;
}

#define STEPS 400 /* most operations per input */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    in_p = data;
    in_left = size;
    struct lock_model_cfg cfg = {.steps = STEPS,
                                 .max_requests = STEPS * 4 + 16,
                                 .holder_every = 8,
                                 .choose = pick,
                                 .more = more}; /* no fail hook: print and abort */
    lock_model_run(&cfg, NULL);
    return 0;
}
