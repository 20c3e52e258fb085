/* The incremental snapshot cut of the lock table (shard/lock.h) against a
 * stop-the-world cut at the same moment.
 *
 * Each seed builds a random table on a follower (GRANT, HANDOFF, RELEASE
 * and EXPIRE applied as the log would), lists its holders at one moment
 * with tk_lock_each_holder_left() (the stop-the-world cut), starts an
 * incremental cut at that same moment, and then interleaves slices of the
 * cut (1..64 keys each) with more commands: changes to listed and unlisted
 * keys, new keys, bursts of new keys that start a resize of the key index
 * during the cut, keys released away, and the clock moving on. Checked:
 *  - the incremental cut lists exactly the stop-the-world cut's records
 *    (key, token, owner, lease and lease left), each once;
 *  - nothing is listed after the cut ended;
 *  - tk_lock_check() after every step;
 *  - installing the records in a fresh table (tk_lock_restore_reserve(),
 *    then tk_lock_restore_left() per record) gives a table whose own cut
 *    lists the very same records, without resizing its key index.
 * The seeds are asserted to cover cuts that begin during a rehash of the
 * key index and cuts during which a resize begins.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/tk.h"
#include "shard/lock.h"
#include "shard/lock_internal.h"

#define SEEDS 150
#define KEYS_SPACE 12000 /* key names k0..k11999 */

struct rec {
    struct tk_cmd g;
    uint32_t left;
};

struct recs {
    struct rec *v;
    size_t n, cap;
    bool closed; /* the cut ended: nothing more may come */
};

static void collect(void *ctx, const struct tk_cmd *grant, uint32_t left_ms)
{
    struct recs *r = ctx;
    cr_assert(!r->closed, "a record after the cut ended");
    if (r->n == r->cap) {
        r->cap = r->cap ? 2 * r->cap : 256;
        r->v = realloc(r->v, r->cap * sizeof(*r->v));
        cr_assert(r->v != NULL);
    }
    r->v[r->n++] = (struct rec){*grant, left_ms};
}

/* A cut's record: through the snapshot encoding and back, so the bytes a
 * snapshot would carry are what is compared. */
static void collect_cut(void *ctx, const struct tk_snap_holder *h)
{
    uint8_t buf[TK_SNAP_RECORD_MAX];
    size_t n = tk_snap_put_holder(buf, sizeof(buf), h);
    cr_assert_gt(n, 0);
    size_t pos = 0;
    struct tk_cmd g;
    uint32_t left = 0;
    cr_assert_eq(tk_snap_next(buf, n, &pos, &g, &left), TK_OK);
    cr_assert_eq(pos, n);
    collect(ctx, &g, left);
}

static int rec_cmp(const void *a, const void *b)
{
    const struct tk_cmd *x = &((const struct rec *)a)->g, *y = &((const struct rec *)b)->g;
    if (x->key_len != y->key_len)
        return x->key_len < y->key_len ? -1 : 1;
    return memcmp(x->key, y->key, x->key_len);
}

static void assert_same(struct recs *a, struct recs *b, uint64_t seed)
{
    cr_assert_eq(a->n, b->n, "seed %llu: %zu records against %zu", (unsigned long long)seed, a->n,
                 b->n);
    qsort(a->v, a->n, sizeof(*a->v), rec_cmp);
    qsort(b->v, b->n, sizeof(*b->v), rec_cmp);
    for (size_t i = 0; i < a->n; i++) {
        const struct rec *x = &a->v[i], *y = &b->v[i];
        cr_assert(rec_cmp(x, y) == 0, "seed %llu: record %zu has another key (or a key twice)",
                  (unsigned long long)seed, i);
        cr_assert_eq(x->g.token, y->g.token, "seed %llu: token of %.*s", (unsigned long long)seed,
                     (int)x->g.key_len, x->g.key);
        cr_assert_eq(x->g.lease_ms, y->g.lease_ms);
        cr_assert_eq(x->g.owner_len, y->g.owner_len);
        cr_assert(memcmp(x->g.owner, y->g.owner, x->g.owner_len) == 0);
        cr_assert_eq(x->left, y->left, "seed %llu: lease left of %.*s: %u against %u",
                     (unsigned long long)seed, (int)x->g.key_len, x->g.key, x->left, y->left);
    }
}

/* The table and what the log has committed so far, per key name. */
struct world {
    struct tk_lock_table *t;
    struct tk_prng prng;
    uint64_t now_us;
    uint64_t next_token;
    uint64_t *token; /* per key index: the committed holder's, 0 free */
};

static void no_reply(void *ctx, const struct tk_lock_reply *r)
{
    (void)ctx;
    (void)r;
    cr_assert_fail("a follower's apply replies");
}

static void no_propose(void *ctx, const struct tk_cmd *c)
{
    (void)ctx;
    (void)c;
    cr_assert_fail("a follower proposes");
}

static const struct tk_lock_sink sink = {.reply = no_reply, .propose = no_propose};

static void key_name(uint32_t i, struct tk_cmd *c)
{
    /* Lengths vary with the index: 2..24 bytes. */
    int n = snprintf(c->key, sizeof(c->key), "k%u", i);
    size_t len = (size_t)n + i % 19;
    memset(c->key + n, '.', len - (size_t)n);
    c->key_len = (uint8_t)len;
}

/* One committed command on key i, whatever its state allows. */
static void apply_on(struct world *w, uint32_t i)
{
    struct tk_cmd c = {0};
    key_name(i, &c);
    uint64_t held = w->token[i];
    uint64_t r = tk_prng_range(&w->prng, 0, 9);
    if (held == 0 || r < 3) {
        c.type = held == 0 ? TK_CMD_GRANT : TK_CMD_HANDOFF;
        c.old_token = held;
        c.token = w->next_token++;
        c.lease_ms = (uint32_t)tk_prng_range(&w->prng, TK_LEASE_MS_MIN, TK_LEASE_MS_MAX);
        c.owner_len = (uint8_t)tk_prng_range(&w->prng, 1, TK_OWNER_LEN_MAX);
        memset(c.owner, 'a' + (int)(c.token % 26), c.owner_len);
        w->token[i] = c.token;
    } else {
        c.type = r < 7 ? TK_CMD_RELEASE : TK_CMD_EXPIRE;
        c.old_token = held;
        w->token[i] = 0;
    }
    tk_lock_apply(w->t, w->now_us, &c, &sink);
}

static void apply_random(struct world *w)
{
    apply_on(w, (uint32_t)tk_prng_range(&w->prng, 0, KEYS_SPACE - 1));
}

static void world_init(struct world *w, uint64_t seed, uint64_t drift_us)
{
    memset(w, 0, sizeof(*w));
    struct tk_lock_limits lim = {
        .keys_max = 1u << 20, .waiters_per_key_max = 8, .waiters_max = 1024, .drift_us = drift_us};
    w->t = tk_lock_create(&lim);
    cr_assert(w->t != NULL);
    tk_prng_seed(&w->prng, seed * 7919u + 1u);
    w->now_us = 1000000000u;
    w->next_token = 1000;
    w->token = calloc(KEYS_SPACE, sizeof(*w->token));
    cr_assert(w->token != NULL);
}

static void world_fini(struct world *w)
{
    tk_lock_destroy(w->t);
    free(w->token);
}

Test(lock_cut, incremental_cut_equals_stop_the_world_and_installs_the_same_table)
{
    uint32_t began_rehashing = 0, resized_during = 0;
    for (uint64_t seed = 1; seed <= SEEDS; seed++) {
        struct world w;
        world_init(&w, seed, 1000 + seed * 1300 % 200000);
        /* A table of up to a few thousand keys, some held for long. */
        uint64_t fill = tk_prng_range(&w.prng, 0, 6000);
        for (uint64_t i = 0; i < fill; i++) {
            apply_random(&w);
            w.now_us += tk_prng_range(&w.prng, 0, 2000);
        }
        tk_lock_check(w.t);

        struct recs stw = {0}, inc = {0};
        tk_lock_each_holder_left(w.t, w.now_us, collect, &stw);
        stw.closed = true;
        began_rehashing += w.t->rehash >= 0;
        struct tk_lock_cut_size size;
        tk_lock_cut_begin(w.t, w.now_us, collect_cut, &inc, &size);
        cr_assert_eq(size.count, stw.n);
        uint64_t bytes = 0;
        for (size_t i = 0; i < stw.n; i++)
            bytes += (uint64_t)stw.v[i].g.key_len + stw.v[i].g.owner_len;
        cr_assert_eq(size.key_owner_bytes, bytes);
        cr_assert(tk_lock_cut_running(w.t));

        size_t ht1_before = w.t->ht[1].size;
        bool done = false;
        while (!done) {
            uint64_t op = tk_prng_range(&w.prng, 0, 99);
            if (op < 45) {
                done = tk_lock_cut_step(w.t, (uint32_t)tk_prng_range(&w.prng, 1, 64));
            } else if (op < 97) {
                apply_random(&w);
            } else {
                /* A burst of new keys: the key index grows during the cut. */
                for (int k = 0; k < 400; k++)
                    apply_on(&w, (uint32_t)tk_prng_range(&w.prng, 6000, KEYS_SPACE - 1));
            }
            w.now_us += tk_prng_range(&w.prng, 0, 3000);
            tk_lock_check(w.t);
        }
        resized_during += w.t->ht[1].size != ht1_before && w.t->ht[1].size != 0;
        inc.closed = true;
        cr_assert(!tk_lock_cut_running(w.t));
        for (int k = 0; k < 50; k++)
            apply_random(&w); /* nothing more is listed (collect asserts) */
        tk_lock_check(w.t);
        assert_same(&stw, &inc, seed);

        /* Install the cut in a fresh follower's table, then cut that one:
         * the same records, leases left included. */
        struct world f;
        world_init(&f, seed, w.t->limits.drift_us);
        f.now_us = w.now_us + 5000000;
        tk_lock_restore_reserve(f.t, inc.n);
        for (size_t i = 0; i < inc.n; i++)
            tk_lock_restore_left(f.t, f.now_us, &inc.v[i].g, inc.v[i].left);
        tk_lock_check(f.t);
        /* Sized up front: the install never resized the key index. */
        cr_assert(f.t->rehash < 0 && f.t->ht[1].size == 0, "seed %llu: the install rehashed",
                  (unsigned long long)seed);
        cr_assert(inc.n == 0 || f.t->ht[0].size >= inc.n);
        struct recs back = {0};
        tk_lock_cut_begin(f.t, f.now_us, collect_cut, &back, NULL);
        while (!tk_lock_cut_step(f.t, 100))
            ;
        back.closed = true;
        assert_same(&inc, &back, seed);

        world_fini(&f);
        world_fini(&w);
        free(stw.v);
        free(inc.v);
        free(back.v);
    }
    /* The seeds cover the key index's two awkward moments. */
    cr_assert_gt(began_rehashing, 0, "no cut began during a rehash");
    cr_assert_gt(resized_during, 0, "no resize began during a cut");
}

Test(lock_cut, an_empty_table_cuts_in_one_step_and_clear_ends_a_cut)
{
    struct world w;
    world_init(&w, 1, 50000);
    struct recs r = {0};
    struct tk_lock_cut_size size;
    tk_lock_cut_begin(w.t, w.now_us, collect_cut, &r, &size);
    cr_assert_eq(size.count, 0);
    cr_assert(tk_lock_cut_step(w.t, 1));
    cr_assert_eq(r.n, 0);

    for (uint32_t i = 0; i < 100; i++)
        apply_on(&w, i);
    tk_lock_cut_begin(w.t, w.now_us, collect_cut, &r, &size);
    cr_assert(size.count > 0);
    cr_assert(!tk_lock_cut_step(w.t, 1));
    /* An install clears the table: the cut ends, and a new one can begin. */
    tk_lock_clear(w.t);
    cr_assert(!tk_lock_cut_running(w.t));
    memset(w.token, 0, KEYS_SPACE * sizeof(*w.token));
    apply_on(&w, 7);
    r.n = 0;
    tk_lock_cut_begin(w.t, w.now_us, collect_cut, &r, &size);
    cr_assert_eq(size.count, 1);
    cr_assert(tk_lock_cut_step(w.t, 1000));
    cr_assert_eq(r.n, 1);
    cr_assert_eq(r.v[0].g.token, w.token[7]);
    free(r.v);
    world_fini(&w);
}
