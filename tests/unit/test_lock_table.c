/* The lock table's data structures under load: the timer heap against a
 * sorted reference, many lease and wait deadlines firing in order through
 * tk_lock_tick(), the key index through grows and shrinks (incremental
 * rehash), a key moving in memory when a longer owner takes it, and the
 * client index through many connections closing in random order.
 *
 * Method: seeded tk_prng (fixed seeds, deterministic), tk_lock_check() or
 * tk_timer_check() after every step.
 */
#include <stdlib.h>

#include "shard/timer.h"
#include "test_lock_fixture.h"

/* ---- Timer heap ---- */

struct tobj {
    uint64_t due;
    uint32_t slot;
    bool live;
};

Test(timer, heap_matches_reference)
{
    enum { N = 600 };
    static struct tobj o[N];
    struct tk_timer_heap h;
    struct tk_prng p;
    tk_prng_seed(&p, 42);
    tk_timer_init(&h);
    cr_assert_eq(tk_timer_next(&h), UINT64_MAX);
    for (int i = 0; i < N; i++)
        o[i] = (struct tobj){.slot = TK_TIMER_NONE};
    for (int step = 0; step < 20000; step++) {
        struct tobj *x = &o[tk_prng_range(&p, 0, N - 1)];
        uint64_t due = tk_prng_range(&p, 0, 1000); /* many ties on purpose */
        if (!x->live) {
            cr_assert_eq(tk_timer_reserve(&h, h.n + 1u), TK_OK);
            tk_timer_push(&h, due, &x->slot);
            x->live = true;
            x->due = due;
        } else if (tk_prng_range(&p, 0, 1)) {
            tk_timer_update(&h, x->slot, due);
            x->due = due;
        } else {
            tk_timer_remove(&h, x->slot);
            cr_assert_eq(x->slot, TK_TIMER_NONE);
            x->live = false;
            tk_timer_trim(&h, 0);
        }
        tk_timer_check(&h);
        uint64_t min = UINT64_MAX;
        for (int i = 0; i < N; i++)
            if (o[i].live && o[i].due < min)
                min = o[i].due;
        cr_assert_eq(tk_timer_next(&h), min, "step %d", step);
    }
    /* Draining pops in non-decreasing order. */
    uint64_t last = 0;
    while (h.n > 0) {
        uint32_t *slot = tk_timer_top(&h);
        struct tobj *x = (struct tobj *)(void *)((char *)slot - offsetof(struct tobj, slot));
        cr_assert_geq(x->due, last);
        last = x->due;
        tk_timer_remove(&h, *slot);
        x->live = false;
    }
    tk_timer_fini(&h);
}

Test(timer, reserve_refuses_over_max)
{
    struct tk_timer_heap h;
    tk_timer_init(&h);
    cr_assert_eq(tk_timer_reserve(&h, (uint64_t)TK_TIMER_MAX + 1), TK_EFULL);
    cr_assert_eq(h.cap, 0);
    tk_timer_fini(&h);
}

/* ---- Deadlines through the table ---- */

TestSuite(deadlines, .init = fx_setup_leader, .fini = fx_teardown);

Test(deadlines, waits_fire_in_order)
{
    enum { KEYS = 8, PER_KEY = 8 };
    struct tk_prng p;
    tk_prng_seed(&p, 7);
    char key[8];
    uint64_t due[KEYS * PER_KEY + 1] = {0};
    for (int k = 0; k < KEYS; k++) {
        snprintf(key, sizeof(key), "k%d", k);
        fx_hold(100, (uint64_t)k + 1, key, "holder", 250000);
    }
    for (int k = 0; k < KEYS; k++) {
        snprintf(key, sizeof(key), "k%d", k);
        for (int w = 0; w < PER_KEY; w++) {
            uint64_t client = (uint64_t)(k * PER_KEY + w + 1);
            uint32_t wait = (uint32_t)tk_prng_range(&p, 1, 100000);
            fx_acq(client, 1, key, "waiter", 1000, wait);
            due[client] = fx.now + wait * 1000ull;
        }
    }
    fx_expect_quiet();
    int fired = 0;
    uint64_t last = 0;
    while (fired < KEYS * PER_KEY) {
        uint64_t next = tk_lock_next_deadline(fx.t);
        /* The true minimum over the waiters still queued. */
        uint64_t min = UINT64_MAX;
        for (int c = 1; c <= KEYS * PER_KEY; c++)
            if (due[c] != 0 && due[c] < min)
                min = due[c];
        cr_assert_eq(next, min);
        fx_advance_us(next - fx.now);
        while (fx_unread() > 0) {
            const struct fx_reply *r = &fx.replies[fx.rhead++];
            cr_assert_eq(r->type, 'T');
            cr_assert_eq(due[r->client], fx.now, "T fires at its deadline");
            cr_assert_geq(fx.now, last);
            last = fx.now;
            due[r->client] = 0;
            fired++;
        }
    }
    cr_assert_eq(fired, KEYS * PER_KEY);
    cr_assert_eq(fx_stats().timeouts, KEYS * PER_KEY);
}

Test(deadlines, leases_expire_in_order)
{
    enum { KEYS = 200 };
    struct tk_prng p;
    tk_prng_seed(&p, 11);
    tk_lock_follow(fx.t);
    char key[8];
    uint64_t due[KEYS];
    for (int k = 0; k < KEYS; k++) {
        snprintf(key, sizeof(key), "k%d", k);
        uint32_t lease = (uint32_t)tk_prng_range(&p, TK_LEASE_MS_MIN, TK_LEASE_MS_MAX);
        fx_apply(TK_CMD_GRANT, key, "o", lease, 0, 100u + (uint64_t)k, false);
        due[k] = fx.now + lease * 1000ull + TK_LOCK_DRIFT_US(lease);
        fx.now += tk_prng_range(&p, 0, 1000000);
    }
    tk_lock_lead(fx.t, fx.now);
    uint64_t last = 0;
    int expired = 0;
    while (tk_lock_next_deadline(fx.t) != UINT64_MAX) {
        uint64_t next = tk_lock_next_deadline(fx.t);
        uint64_t min = UINT64_MAX;
        for (int k = 0; k < KEYS; k++)
            if (due[k] != 0 && due[k] < min)
                min = due[k];
        cr_assert_eq(next, min);
        cr_assert_geq(next, last);
        last = next;
        fx_advance_us(next > fx.now ? next - fx.now : 0);
        /* Exactly the keys due by now were proposed, each once. */
        cr_assert_gt(fx_pending(), 0);
        while (fx_pending() > 0) {
            const struct tk_cmd *c = fx_next_prop();
            cr_assert_eq(c->type, TK_CMD_EXPIRE);
            int k = atoi(c->key + 1);
            cr_assert_neq(due[k], 0, "one expiry per lease");
            cr_assert_leq(due[k], fx.now, "never early");
            due[k] = 0;
            expired++;
            fx_commit();
        }
    }
    cr_assert_eq(expired, KEYS);
    cr_assert_eq(fx_stats().held, 0);
    cr_assert_eq(tk_lock_next_deadline(fx.t), UINT64_MAX);
}

/* ---- Key index ---- */

Test(index, grows_and_shrinks_through_rehash)
{
    enum { KEYS = 3000 };
    fx_setup_limits(KEYS, 4, 100);
    static uint64_t token[KEYS];
    struct tk_prng p;
    tk_prng_seed(&p, 3);
    char key[16];
    uint64_t next = 10;
    /* Fill, then drain, then a random mix: chains, rehash in both
     * directions and the shrink of the timer and in-flight arrays. */
    for (int phase = 0; phase < 3; phase++) {
        for (int i = 0; i < KEYS * 2; i++) {
            int k;
            if (phase == 0)
                k = i % KEYS;
            else if (phase == 1)
                k = (i * 7) % KEYS;
            else
                k = (int)tk_prng_range(&p, 0, KEYS - 1);
            bool want_held = phase == 0 ? true : phase == 1 ? false : tk_prng_range(&p, 0, 1);
            snprintf(key, sizeof(key), "key-%d", k);
            if (want_held && token[k] == 0) {
                token[k] = ++next;
                fx_apply(TK_CMD_GRANT, key, "o", 1000, 0, token[k], false);
            } else if (!want_held && token[k] != 0) {
                fx_apply(TK_CMD_RELEASE, key, NULL, 0, token[k], 0, false);
                token[k] = 0;
            } else {
                continue;
            }
        }
        uint64_t held = 0;
        for (int k = 0; k < KEYS; k++)
            held += token[k] != 0;
        cr_assert_eq(fx_stats().held, held);
        cr_assert_eq(fx_stats().keys, held);
    }
    fx_teardown();
}

/* ---- A longer owner moves the key ---- */

TestSuite(move, .init = fx_setup_leader, .fini = fx_teardown);

Test(move, longer_owner_reallocates_key_and_pointers_follow)
{
    const char *long1 = "owner-0123456789012345678901234567890123456789012345678901234567";
    const char *long2 = "OWNER-0123456789012345678901234567890123456789012345678901234567";
    cr_assert_eq(strlen(long1), TK_OWNER_LEN_MAX);
    uint64_t t1 = fx_hold(1, 1, "k", "a", 1000);
    fx_acq(2, 1, "k", long1, 1000, 50000);
    fx_acq(3, 1, "k", long2, 1000, 20000);
    fx_acq(4, 1, "k", "b", 1000, 500);
    fx_rel(1, 2, "k", "a", t1); /* HANDOFF to long1: the key grows on apply */
    fx_qry(5, 1, "k");          /* deferred, pointing at the key */
    uint64_t t2 = fx_commit();
    fx_expect('R', 1, 2);
    fx_expect_g(2, 1, t2);
    fx_expect_q(5, 1, long1, t2, 2);
    /* The waiters' key pointers moved along: timers and closes still work. */
    fx_advance_ms(500);
    fx_expect('T', 4, 1);
    tk_lock_client_closed(fx.t, 3);
    tk_lock_check(fx.t);
    fx_qry(5, 2, "k");
    fx_expect_q(5, 2, long1, t2, 0);
    fx_rel(2, 2, "k", long1, t2);
    fx_commit();
    fx_expect('R', 2, 2);
    cr_assert_eq(fx_stats().keys, 0);
}

Test(move, expiry_handoff_to_longer_owner_keeps_lease_timer)
{
    const char *longer = "a-much-longer-owner-name-than-before-0123456789";
    uint64_t t1 = fx_hold(1, 1, "k", "a", 1000);
    fx_acq(2, 1, "k", longer, 2000, 50000);
    fx_advance_us(FX_LEASE_US(1000));
    fx_expect_prop(TK_CMD_HANDOFF, "k", longer, t1, true);
    uint64_t t2 = fx_commit();
    fx_expect_g(2, 1, t2);
    cr_assert_eq(tk_lock_next_deadline(fx.t), fx.now + FX_LEASE_US(2000));
    fx_advance_us(FX_LEASE_US(2000));
    fx_expect_prop(TK_CMD_EXPIRE, "k", NULL, t2, false);
}

/* ---- Client index ---- */

Test(clients, many_clients_close_in_random_order)
{
    enum { CLIENTS = 300, KEYS = 10 };
    fx_setup_limits(100, 1000, 10000);
    tk_lock_lead(fx.t, fx.now);
    struct tk_prng p;
    tk_prng_seed(&p, 5);
    char key[8];
    for (int k = 0; k < KEYS; k++) {
        snprintf(key, sizeof(key), "k%d", k);
        fx_hold(1000000, (uint64_t)k + 1, key, "holder", 250000);
    }
    static int order[CLIENTS];
    uint64_t queued = 0;
    for (int c = 0; c < CLIENTS; c++) {
        order[c] = c + 1;
        int n = (int)tk_prng_range(&p, 1, 3);
        for (int i = 0; i < n; i++) {
            snprintf(key, sizeof(key), "k%d", (int)tk_prng_range(&p, 0, KEYS - 1));
            /* Sequential-looking client references, as a slot allocator
             * would produce. */
            cr_assert_eq(fx_acq((uint64_t)c + 1, (uint64_t)i, key, "w", 1000, 100000), TK_OK);
        }
    }
    fx_expect_quiet();
    queued = fx_stats().waiters;
    for (int i = CLIENTS - 1; i > 0; i--) {
        int j = (int)tk_prng_range(&p, 0, (uint64_t)i);
        int tmp = order[i];
        order[i] = order[j];
        order[j] = tmp;
    }
    for (int i = 0; i < CLIENTS; i++) {
        tk_lock_client_closed(fx.t, (uint64_t)order[i]);
        tk_lock_check(fx.t);
        cr_assert_leq(fx_stats().waiters, queued);
    }
    cr_assert_eq(fx_stats().waiters, 0);
    fx_expect_quiet();
    fx_teardown();
}
