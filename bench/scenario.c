/* Scenarios (which key each acquire goes to) and the checks run on the
 * observed history of grants and releases.
 *
 * Checks, per key, under a short spin lock (grants of one key are causally
 * ordered: the next grant needs the previous holder's release, which the
 * bench sends only after it saw the grant, so the lock is never contended
 * unless something is wrong):
 *  - mutual exclusion: a grant observed while another slot of ours still
 *    holds the key (granted, release not yet sent) and that holder's lease,
 *    counted from its acquire's send time, has not run out, is a double
 *    holder. Sound: both clients believe they hold the key at that moment.
 *  - tokens (systems that have them): each grant's token must be above the
 *    key's previous one, in the order grants are observed; the same causal
 *    order makes this sound.
 *  - FIFO (bounded bypass): each slot notes the key's grant count when its
 *    acquire has reached the server, and at its grant the difference is how
 *    many grants went to others meanwhile. "Reached" is learnt from a probe
 *    (--fifo-probe): a ping sent right behind the acquire on the same
 *    connection, which the server answers only after reading the acquire.
 *    With W clients that each have at most one acquire outstanding, FIFO
 *    allows at most W - 1: those queued ahead at its arrival, where a grant
 *    issued before the arrival but seen after the pong takes the place of
 *    its receiver in the queue (one key has at most one grant in flight,
 *    since the next needs the holder's release). Without a probe the count
 *    starts at the send, and a starved server thread that has not read the
 *    acquire yet lets others go ahead in good FIFO order: then the count is
 *    only reported, not judged.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"

#define NO_KEY UINT32_MAX

uint64_t bench_rand(struct bthread *t)
{
    return tk_prng_next(&t->prng);
}

static uint64_t zipf_sample(struct bench *b, struct bthread *t)
{
    double u = (double)(bench_rand(t) >> 11) * (1.0 / 9007199254740992.0);
    uint64_t lo = 0, hi = b->nkeys - 1;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (b->zipf_cdf[mid] < u)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int bench_scenario_init(struct bench *b)
{
    switch (b->scenario) {
        case SC_UNCONTENDED:
            b->nbkeys = b->nslots;
            b->fifo_bound = 0;
            break;
        case SC_HOTKEY:
            b->nbkeys = 1;
            b->fifo_bound = (uint32_t)b->nslots - 1u;
            break;
        case SC_TICKETDROP:
            b->nbkeys = b->nkeys;
            b->fifo_bound = (uint32_t)b->nslots - 1u;
            b->zipf_cdf = malloc(b->nkeys * sizeof(double));
            if (b->zipf_cdf == NULL)
                return -1;
            double sum = 0;
            for (uint64_t i = 0; i < b->nkeys; i++) {
                sum += 1.0 / pow((double)(i + 1), b->zipf_s);
                b->zipf_cdf[i] = sum;
            }
            for (uint64_t i = 0; i < b->nkeys; i++)
                b->zipf_cdf[i] /= sum;
            b->zipf_cdf[b->nkeys - 1] = 1.0;
            break;
        case SC_FAILOVER:
            b->nbkeys = b->nkeys;
            b->fifo_bound = 0; /* waiters die with the old leader: not judged */
            break;
        case SC_MEMORY:
            b->nbkeys = 0;
            b->fifo_bound = 0;
            break;
    }
    b->fifo_check = b->drv->fifo && b->fifo_probe && b->drv->probe && b->fifo_bound > 0;
    if (b->nbkeys > 0) {
        b->keys = calloc(b->nbkeys, sizeof(*b->keys));
        if (b->keys == NULL)
            return -1;
        for (uint64_t i = 0; i < b->nbkeys; i++)
            atomic_flag_clear(&b->keys[i].lock);
    }
    return 0;
}

size_t bench_key_name(struct bench *b, struct slot *s, char *buf)
{
    int n = 0;
    switch (b->scenario) {
        case SC_UNCONTENDED:
            n = snprintf(buf, BENCH_KEY_MAX, "%su%u.%u", b->prefix, s->global, s->key_gen);
            break;
        case SC_HOTKEY:
            n = snprintf(buf, BENCH_KEY_MAX, "%shot", b->prefix);
            break;
        case SC_TICKETDROP:
            n = snprintf(buf, BENCH_KEY_MAX, "%sseat%llu", b->prefix, (unsigned long long)s->key);
            break;
        case SC_FAILOVER:
            n = snprintf(buf, BENCH_KEY_MAX, "%sf%llu", b->prefix, (unsigned long long)s->key);
            break;
        case SC_MEMORY:
            n = snprintf(buf, BENCH_KEY_MAX, "%sm%llu", b->prefix, (unsigned long long)s->key);
            break;
    }
    TK_ASSERT(n > 0 && n < BENCH_KEY_MAX);
    /* --slots: the first of name, name~1, name~2, ... whose slot is in
     * range (the same one every time: the release names the acquire's). */
    int base = n;
    for (unsigned j = 1;
         tk_slot(buf, (size_t)n) < b->slot_lo || tk_slot(buf, (size_t)n) > b->slot_hi; j++) {
        n = base + snprintf(buf + base, (size_t)(BENCH_KEY_MAX - base), "~%u", j);
        TK_ASSERT(n > base && n < BENCH_KEY_MAX);
    }
    return (size_t)n;
}

size_t bench_key_next(struct bench *b, struct bthread *t, struct slot *s, char *buf)
{
    switch (b->scenario) {
        case SC_UNCONTENDED:
            s->key = s->global;
            s->bkey = s->global;
            break;
        case SC_HOTKEY:
            s->key = 0;
            s->bkey = 0;
            break;
        case SC_TICKETDROP:
            s->key = zipf_sample(b, t);
            s->bkey = (uint32_t)s->key;
            break;
        case SC_FAILOVER:
            s->key = bench_rand(t) % b->nkeys;
            s->bkey = (uint32_t)s->key;
            break;
        case SC_MEMORY:
            s->bkey = NO_KEY;
            if (b->mem_waiters > 0) {
                /* One queued acquire per slot, spread over the held keys. */
                if (s->seq > 0 || s->global >= b->mem_waiters)
                    return 0;
                s->key = s->global % b->mem_waiter_keys;
            } else {
                /* The n-th acquire of slot g takes key g + n * slots. */
                s->key = s->global + s->seq * b->nslots;
                if (s->key >= b->mem_keys)
                    return 0;
            }
            break;
    }
    return bench_key_name(b, s, buf);
}

static void key_lock(struct bkey *k)
{
    while (atomic_flag_test_and_set_explicit(&k->lock, memory_order_acquire))
        ;
}

static void key_unlock(struct bkey *k)
{
    atomic_flag_clear_explicit(&k->lock, memory_order_release);
}

void bench_check_acquire_sent(struct bench *b, struct slot *s)
{
    if (s->bkey == NO_KEY || s->bkey >= b->nbkeys)
        return;
    s->grants_at_send = atomic_load_explicit(&b->keys[s->bkey].grants, memory_order_relaxed);
}

void bench_check_arrived(struct bench *b, struct slot *s)
{
    bench_check_acquire_sent(b, s);
}

void bench_check_grant(struct bench *b, struct bthread *t, struct slot *s, uint64_t now)
{
    if (s->bkey == NO_KEY || s->bkey >= b->nbkeys)
        return;
    struct bkey *k = &b->keys[s->bkey];
    bool twice = false, order = false;
    uint32_t other = 0;
    uint64_t prev_token = 0;
    key_lock(k);
    if (k->holder != 0 && now < k->holder_until) {
        twice = true;
        other = k->holder - 1;
    }
    if (b->drv->has_token) {
        prev_token = k->last_token;
        if (s->token <= k->last_token)
            order = true;
        else
            k->last_token = s->token;
    }
    k->holder = s->global + 1;
    k->holder_until = s->t_sent + (uint64_t)b->lease_ms * 1000000ull;
    key_unlock(k);
    uint64_t g = atomic_fetch_add_explicit(&k->grants, 1, memory_order_relaxed);
    uint64_t bypass = g - s->grants_at_send;
    if (twice) {
        t->cnt.double_holder++;
        fprintf(stderr,
                "ticketing-bench: SAFETY: key #%u granted to slot %u while slot %u holds it\n",
                s->bkey, s->global, other);
    }
    if (order) {
        t->cnt.token_order++;
        fprintf(stderr, "ticketing-bench: SAFETY: key #%u token %llu not above %llu\n", s->bkey,
                (unsigned long long)s->token, (unsigned long long)prev_token);
    }
    if (now >= b->t_measure && now < b->t_end) {
        t->cnt.bypass_sum += bypass;
        t->cnt.bypass_n++;
        if (bypass > t->cnt.bypass_max)
            t->cnt.bypass_max = bypass;
        if (b->fifo_check && s->probed && bypass > b->fifo_bound) {
            t->cnt.fifo_bypass++;
            fprintf(stderr,
                    "ticketing-bench: FIFO: slot %u saw %llu grants to others on key #%u "
                    "after its acquire arrived (bound %u)\n",
                    s->global, (unsigned long long)bypass, s->bkey, b->fifo_bound);
        }
    }
}

void bench_check_release(struct bench *b, struct slot *s)
{
    if (s->bkey == NO_KEY || s->bkey >= b->nbkeys)
        return;
    struct bkey *k = &b->keys[s->bkey];
    key_lock(k);
    if (k->holder == s->global + 1)
        k->holder = 0;
    key_unlock(k);
}
