/* Fixture shared by the lock-table tests: one table, a recording sink, a
 * fake clock and a fake Raft log that commits proposals in FIFO order and
 * assigns increasing tokens. Every helper runs tk_lock_check() after its
 * step, so a test fails at the first step that corrupts the table.
 *
 * Each Criterion test runs in its own process, so file-static state is fine.
 */
#ifndef TK_TEST_LOCK_FIXTURE_H
#define TK_TEST_LOCK_FIXTURE_H

#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "shard/lock.h"

#define FX_LOG_MAX 8192
/* Not every test file uses every helper. */
#define FX_FN static __attribute__((unused))

struct fx_reply {
    char type;
    uint64_t client;
    uint64_t id;
    uint64_t token;
    uint32_t waiters;
    bool owner_null;
    char owner[TK_OWNER_LEN_MAX + 1];
};

static struct {
    struct tk_lock_table *t;
    struct tk_lock_sink sink;
    uint64_t now;        /* microseconds */
    uint64_t next_token; /* the fake Raft's fencing counter */
    struct fx_reply replies[FX_LOG_MAX];
    size_t nreplies, rhead;
    struct tk_cmd props[FX_LOG_MAX];
    size_t nprops, phead; /* proposals; phead = next to commit */
} fx;

FX_FN void fx_on_reply(void *ctx, const struct tk_lock_reply *r)
{
    (void)ctx;
    cr_assert_lt(fx.nreplies, FX_LOG_MAX);
    struct fx_reply *o = &fx.replies[fx.nreplies++];
    memset(o, 0, sizeof(*o));
    o->type = r->type;
    o->client = r->client;
    o->id = r->id;
    o->token = r->token;
    o->waiters = r->waiters;
    o->owner_null = r->owner == NULL;
    if (r->owner != NULL) {
        cr_assert_leq(r->owner_len, TK_OWNER_LEN_MAX);
        memcpy(o->owner, r->owner, r->owner_len);
    }
}

FX_FN void fx_on_propose(void *ctx, const struct tk_cmd *c)
{
    (void)ctx;
    cr_assert_lt(fx.nprops, FX_LOG_MAX);
    cr_assert_eq(tk_cmd_check(c), TK_OK);
    cr_assert_eq(c->token, 0, "proposals carry token 0");
    fx.props[fx.nprops++] = *c;
}

FX_FN void fx_setup_limits(uint64_t keys_max, uint32_t per_key, uint64_t waiters_max)
{
    memset(&fx, 0, sizeof(fx));
    struct tk_lock_limits lim = {
        .keys_max = keys_max, .waiters_per_key_max = per_key, .waiters_max = waiters_max};
    fx.t = tk_lock_create(&lim);
    cr_assert_not_null(fx.t);
    fx.sink = (struct tk_lock_sink){.reply = fx_on_reply, .propose = fx_on_propose, .ctx = NULL};
    fx.now = 1000000000ull; /* an arbitrary monotonic start */
    fx.next_token = 1000;
    tk_lock_check(fx.t);
}

FX_FN void fx_setup_leader(void)
{
    fx_setup_limits(1000, 8, 64);
    tk_lock_lead(fx.t, fx.now);
    tk_lock_check(fx.t);
}

FX_FN void fx_setup_follower(void)
{
    fx_setup_limits(1000, 8, 64);
}

FX_FN void fx_teardown(void)
{
    if (fx.t != NULL)
        tk_lock_check(fx.t);
    tk_lock_destroy(fx.t);
    fx.t = NULL;
}

/* ---- Requests ---- */

FX_FN int fx_acq(uint64_t client,
                 uint64_t id,
                 const char *key,
                 const char *owner,
                 uint32_t lease_ms,
                 uint32_t wait_ms)
{
    struct tk_lock_req r = {.type = 'A',
                            .client = client,
                            .id = id,
                            .key = key,
                            .key_len = strlen(key),
                            .owner = owner,
                            .owner_len = strlen(owner),
                            .lease_ms = lease_ms,
                            .wait_ms = wait_ms};
    int rc = tk_lock_request(fx.t, fx.now, &r, &fx.sink);
    tk_lock_check(fx.t);
    return rc;
}

FX_FN int fx_rel(uint64_t client, uint64_t id, const char *key, const char *owner, uint64_t token)
{
    struct tk_lock_req r = {.type = 'R',
                            .client = client,
                            .id = id,
                            .key = key,
                            .key_len = strlen(key),
                            .owner = owner,
                            .owner_len = strlen(owner),
                            .token = token};
    int rc = tk_lock_request(fx.t, fx.now, &r, &fx.sink);
    tk_lock_check(fx.t);
    return rc;
}

FX_FN int fx_qry(uint64_t client, uint64_t id, const char *key)
{
    struct tk_lock_req r = {
        .type = 'Q', .client = client, .id = id, .key = key, .key_len = strlen(key)};
    int rc = tk_lock_request(fx.t, fx.now, &r, &fx.sink);
    tk_lock_check(fx.t);
    return rc;
}

/* ---- Fake Raft and clock ---- */

FX_FN size_t fx_pending(void)
{
    return fx.nprops - fx.phead;
}

/* The next proposal to commit (must exist). */
FX_FN struct tk_cmd *fx_next_prop(void)
{
    cr_assert_gt(fx_pending(), 0, "no proposal pending");
    return &fx.props[fx.phead];
}

/* Commits the oldest proposal: assigns a token if it grants, applies it.
 * Returns the token assigned (0 for RELEASE/EXPIRE). */
FX_FN uint64_t fx_commit(void)
{
    struct tk_cmd *c = fx_next_prop();
    fx.phead++;
    if (tk_cmd_grants(c))
        c->token = ++fx.next_token;
    tk_lock_apply(fx.t, fx.now, c, &fx.sink);
    tk_lock_check(fx.t);
    return c->token;
}

/* Applies a hand-made command (follower tests, panics). */
FX_FN void fx_apply(uint8_t type,
                    const char *key,
                    const char *owner,
                    uint32_t lease_ms,
                    uint64_t old_token,
                    uint64_t token,
                    bool expired)
{
    struct tk_cmd c = {0};
    c.type = type;
    c.key_len = (uint8_t)strlen(key);
    memcpy(c.key, key, c.key_len);
    if (owner != NULL) {
        c.owner_len = (uint8_t)strlen(owner);
        memcpy(c.owner, owner, c.owner_len);
    }
    c.lease_ms = lease_ms;
    c.old_token = old_token;
    c.token = token;
    c.expired = expired ? 1 : 0;
    tk_lock_apply(fx.t, fx.now, &c, &fx.sink);
    tk_lock_check(fx.t);
}

FX_FN void fx_advance_ms(uint64_t ms)
{
    fx.now += ms * 1000u;
    tk_lock_tick(fx.t, fx.now, &fx.sink);
    tk_lock_check(fx.t);
}

/* A lease of ms, as every node counts it: the lease plus the drift
 * margin, from the apply. */
#define FX_LEASE_US(ms) ((uint64_t)(ms)*1000u + TK_LOCK_DRIFT_US(ms))

FX_FN void fx_advance_us(uint64_t us)
{
    fx.now += us;
    tk_lock_tick(fx.t, fx.now, &fx.sink);
    tk_lock_check(fx.t);
}

/* ---- Expectations ---- */

FX_FN size_t fx_unread(void)
{
    return fx.nreplies - fx.rhead;
}

FX_FN const struct fx_reply *fx_expect(char type, uint64_t client, uint64_t id)
{
    cr_assert_gt(fx_unread(), 0, "expected reply %c %llu/%llu, got none", type,
                 (unsigned long long)client, (unsigned long long)id);
    const struct fx_reply *r = &fx.replies[fx.rhead++];
    cr_assert_eq(r->type, type, "expected %c, got %c (client %llu id %llu)", type, r->type,
                 (unsigned long long)r->client, (unsigned long long)r->id);
    cr_assert_eq(r->client, client);
    cr_assert_eq(r->id, id);
    return r;
}

FX_FN void fx_expect_g(uint64_t client, uint64_t id, uint64_t token)
{
    const struct fx_reply *r = fx_expect('G', client, id);
    cr_assert_eq(r->token, token, "G token %llu, expected %llu", (unsigned long long)r->token,
                 (unsigned long long)token);
}

FX_FN void fx_expect_q(uint64_t client,
                       uint64_t id,
                       const char *owner,
                       uint64_t token,
                       uint32_t waiters)
{
    const struct fx_reply *r = fx_expect('Q', client, id);
    if (owner == NULL) {
        cr_assert(r->owner_null, "Q shows owner %s, expected free", r->owner);
    } else {
        cr_assert(!r->owner_null, "Q shows free, expected %s", owner);
        cr_assert_str_eq(r->owner, owner);
    }
    cr_assert_eq(r->token, token);
    cr_assert_eq(r->waiters, waiters, "Q waiters %u, expected %u", r->waiters, waiters);
}

FX_FN void fx_expect_quiet(void)
{
    cr_assert_eq(fx_unread(), 0, "unexpected reply %c to %llu/%llu",
                 fx_unread() ? fx.replies[fx.rhead].type : '-',
                 fx_unread() ? (unsigned long long)fx.replies[fx.rhead].client : 0ull,
                 fx_unread() ? (unsigned long long)fx.replies[fx.rhead].id : 0ull);
}

FX_FN void fx_expect_prop(uint8_t type,
                          const char *key,
                          const char *owner,
                          uint64_t old_token,
                          bool expired)
{
    const struct tk_cmd *c = fx_next_prop();
    cr_assert_eq(c->type, type, "proposal type %u, expected %u", c->type, type);
    cr_assert_eq(c->key_len, strlen(key));
    cr_assert(memcmp(c->key, key, c->key_len) == 0);
    if (owner != NULL) {
        cr_assert_eq(c->owner_len, strlen(owner));
        cr_assert(memcmp(c->owner, owner, c->owner_len) == 0);
    } else {
        cr_assert_eq(c->owner_len, 0);
    }
    cr_assert_eq(c->old_token, old_token);
    cr_assert_eq(c->expired, expired ? 1 : 0);
}

FX_FN struct tk_lock_stats fx_stats(void)
{
    struct tk_lock_stats s;
    tk_lock_stats(fx.t, &s);
    return s;
}

/* Grants key to owner (client/id) from a FREE key, returning the token. */
FX_FN uint64_t
fx_hold(uint64_t client, uint64_t id, const char *key, const char *owner, uint32_t lease_ms)
{
    cr_assert_eq(fx_acq(client, id, key, owner, lease_ms, 0), TK_OK);
    fx_expect_prop(TK_CMD_GRANT, key, owner, 0, false);
    uint64_t token = fx_commit();
    fx_expect_g(client, id, token);
    fx_expect_quiet();
    return token;
}

#endif
