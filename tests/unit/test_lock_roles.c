/* The lock table's committed layer and role changes: a follower applies
 * silently and keeps lease deadlines with the drift margin, lead/follow move
 * between roles without losing committed state, snapshots round-trip, and
 * apply panics on any command that contradicts the committed state (a
 * corrupt log must crash, never grant twice).
 *
 * Method: the fixture of test_lock_fixture.h; hand-made commands through
 * fx_apply() for the follower side, .signal = SIGABRT for the panics.
 */
#include <stdlib.h>

#include "test_lock_fixture.h"

#define LEASE 10000u

/* Collects the GRANTs of tk_lock_each_holder(). */
struct snap {
    struct tk_cmd v[64];
    size_t n;
};

static void snap_add(void *ctx, const struct tk_cmd *c)
{
    struct snap *s = ctx;
    cr_assert_lt(s->n, 64);
    s->v[s->n++] = *c;
}

static int snap_cmp(const void *a, const void *b)
{
    const struct tk_cmd *x = a;
    const struct tk_cmd *y = b;
    return x->token < y->token ? -1 : x->token > y->token;
}

/* ---- Follower ---- */

TestSuite(follower, .init = fx_setup_follower, .fini = fx_teardown);

Test(follower, apply_is_silent)
{
    fx_apply(TK_CMD_GRANT, "k", "alice", LEASE, 0, 10, false);
    fx_apply(TK_CMD_HANDOFF, "k", "bob", LEASE, 10, 11, false);
    fx_apply(TK_CMD_HANDOFF, "k", "carol", LEASE, 11, 12, true);
    fx_apply(TK_CMD_RELEASE, "k", NULL, 0, 12, 0, false);
    fx_apply(TK_CMD_GRANT, "u", "dave", LEASE, 0, 13, false);
    fx_apply(TK_CMD_EXPIRE, "u", NULL, 0, 13, 0, false);
    fx_apply(TK_CMD_GRANT, "v", "erin", LEASE, 0, 20, false);
    cr_assert_eq(fx.nreplies, 0);
    cr_assert_eq(fx.nprops, 0);
    struct tk_lock_stats s = fx_stats();
    cr_assert_eq(s.keys, 1);
    cr_assert_eq(s.held, 1);
    cr_assert_eq(s.grants, 5);
    cr_assert_eq(s.handoffs, 2);
    cr_assert_eq(s.releases, 1);
    cr_assert_eq(s.expiries, 2);
}

Test(follower, request_is_not_leader)
{
    cr_assert_eq(fx_acq(1, 1, "k", "alice", LEASE, 0), TK_ENOTLEADER);
    cr_assert_eq(fx_rel(1, 2, "k", "alice", 5), TK_ENOTLEADER);
    cr_assert_eq(fx_qry(1, 3, "k"), TK_ENOTLEADER);
    cr_assert_eq(fx.nreplies, 0);
    cr_assert_eq(fx.nprops, 0);
    cr_assert_eq(fx_stats().keys, 0);
    cr_assert_not(tk_lock_is_leader(fx.t));
}

Test(follower, tick_does_nothing)
{
    fx_apply(TK_CMD_GRANT, "k", "alice", 1000, 0, 10, false);
    cr_assert_eq(tk_lock_next_deadline(fx.t), UINT64_MAX);
    fx_advance_ms(1000000);
    cr_assert_eq(fx.nprops, 0);
    cr_assert_eq(fx_stats().held, 1, "only a committed EXPIRE ends a lease");
}

Test(follower, lease_counts_from_apply_plus_margin)
{
    /* SPEC 6: at least 0.1% of the lease + 50 ms. */
    cr_assert_geq(TK_LOCK_DRIFT_US(250000), 250000u * 1000u / 1000u + 50000u);
    cr_assert_geq(TK_LOCK_DRIFT_US(1000), 1000u + 50000u);
    uint64_t t0 = fx.now;
    fx_apply(TK_CMD_GRANT, "k", "alice", LEASE, 0, 10, false);
    fx_advance_ms(3000);
    tk_lock_lead(fx.t, fx.now);
    uint64_t due = t0 + LEASE * 1000ull + TK_LOCK_DRIFT_US(LEASE);
    cr_assert_eq(tk_lock_next_deadline(fx.t), due);
    fx_advance_us(due - fx.now - 1);
    cr_assert_eq(fx_pending(), 0, "a new leader never expires early");
    fx_advance_us(1);
    fx_expect_prop(TK_CMD_EXPIRE, "k", NULL, 10, false);
}

static void left_of(void *ctx, const struct tk_cmd *grant, uint32_t left_ms)
{
    (void)grant;
    *(uint32_t *)ctx = left_ms;
}

/* --max-clock-drift-ms: a table's drift bound replaces the default 50 ms
 * in the margin of every lease it counts, applied or restored, and what a
 * snapshot says is left does not include it. */
Test(follower, the_drift_bound_widens_every_lease_margin)
{
    struct tk_lock_limits lim = {
        .keys_max = 8, .waiters_per_key_max = 4, .waiters_max = 8, .drift_us = 400000};
    struct tk_lock_table *t = tk_lock_create(&lim);
    struct tk_cmd g = {.type = TK_CMD_GRANT, .token = 10, .lease_ms = 2000};
    g.key_len = 1;
    g.key[0] = 'k';
    g.owner_len = 5;
    memcpy(g.owner, "alice", 5);
    uint64_t t0 = 5000000;
    tk_lock_apply(t, t0, &g, &fx.sink);
    uint32_t left = 0;
    tk_lock_each_holder_left(t, t0 + 500000, left_of, &left);
    cr_assert_eq(left, 1500, "left %u ms", left);
    tk_lock_lead(t, t0);
    cr_assert_eq(tk_lock_next_deadline(t), t0 + 2000000u + 2000u + 400000u);
    tk_lock_follow(t);
    g.token = 11;
    g.key[0] = 'm';
    tk_lock_restore_left(t, t0, &g, 700);
    tk_lock_lead(t, t0);
    cr_assert_eq(tk_lock_next_deadline(t), t0 + 700000u + 2000u + 400000u,
                 "the restored lease counts the bound too");
    tk_lock_check(t);
    tk_lock_destroy(t);
}

Test(follower, handoff_restarts_lease_at_apply)
{
    fx_apply(TK_CMD_GRANT, "k", "alice", LEASE, 0, 10, false);
    fx_advance_ms(7000);
    uint64_t t1 = fx.now;
    fx_apply(TK_CMD_HANDOFF, "k", "bob", 2000, 10, 11, false);
    tk_lock_lead(fx.t, fx.now);
    cr_assert_eq(tk_lock_next_deadline(fx.t), t1 + 2000000u + TK_LOCK_DRIFT_US(2000));
}

Test(follower, each_holder_lists_grants)
{
    fx_apply(TK_CMD_GRANT, "a", "alice", 1000, 0, 10, false);
    fx_apply(TK_CMD_GRANT, "b", "bob", 2000, 0, 11, false);
    fx_apply(TK_CMD_GRANT, "c", "carol", 3000, 0, 12, false);
    fx_apply(TK_CMD_RELEASE, "b", NULL, 0, 11, 0, false);
    struct snap a = {.n = 0};
    tk_lock_each_holder(fx.t, snap_add, &a);
    struct tk_cmd *seen = a.v;
    size_t n = a.n;
    cr_assert_eq(n, 2);
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(seen[i].type, TK_CMD_GRANT);
        cr_assert_eq(seen[i].key_len, 1);
        if (seen[i].key[0] == 'a') {
            cr_assert_eq(seen[i].token, 10);
            cr_assert_eq(seen[i].lease_ms, 1000);
            cr_assert(memcmp(seen[i].owner, "alice", 5) == 0 && seen[i].owner_len == 5);
        } else {
            cr_assert_eq(seen[i].key[0], 'c');
            cr_assert_eq(seen[i].token, 12);
        }
    }
}

/* ---- Role changes ---- */

TestSuite(roles, .init = fx_setup_leader, .fini = fx_teardown);

Test(roles, follow_drops_leader_state_silently)
{
    uint64_t t1 = fx_hold(1, 1, "k1", "alice", LEASE);
    uint64_t t3 = fx_hold(1, 2, "k3", "alice", LEASE);
    fx_acq(2, 1, "k1", "bob", LEASE, 5000); /* waiter */
    fx_acq(1, 3, "k2", "alice", LEASE, 0);  /* GRANT in flight */
    fx_acq(2, 2, "k2", "bob", LEASE, 5000); /* waiter on an in-flight key */
    fx_qry(3, 1, "k2");                     /* deferred */
    fx_rel(1, 4, "k3", "alice", t3);        /* RELEASE in flight */
    fx_rel(3, 2, "k3", "alice", t3);        /* deferred */
    tk_lock_follow(fx.t);
    tk_lock_check(fx.t);
    fx_expect_quiet();
    struct tk_lock_stats s = fx_stats();
    cr_assert_eq(s.waiters, 0);
    cr_assert_eq(s.deferred, 0);
    cr_assert_eq(s.in_flight, 0);
    cr_assert_eq(s.keys, 2, "k2's uncommitted grant is gone, k1 and k3 stay held");
    cr_assert_eq(s.held, 2);
    /* The proposals may still commit under the next leader: applied
     * silently on this follower. */
    struct tk_cmd grant_k2 = fx.props[fx.phead++];
    struct tk_cmd release_k3 = fx.props[fx.phead++];
    grant_k2.token = ++fx.next_token;
    tk_lock_apply(fx.t, fx.now, &grant_k2, &fx.sink);
    tk_lock_apply(fx.t, fx.now, &release_k3, &fx.sink);
    tk_lock_check(fx.t);
    fx_expect_quiet();
    cr_assert_eq(fx_pending(), 0);
    /* Leading again: no waiters, committed state intact. */
    tk_lock_lead(fx.t, fx.now);
    tk_lock_check(fx.t);
    fx_qry(9, 1, "k1");
    fx_expect_q(9, 1, "alice", t1, 0);
    fx_qry(9, 2, "k2");
    fx_expect_q(9, 2, "alice", grant_k2.token, 0);
    fx_qry(9, 3, "k3");
    fx_expect_q(9, 3, NULL, 0, 0);
}

Test(roles, follow_restores_parked_lease)
{
    uint64_t tok = fx_hold(1, 1, "k", "alice", 1000);
    fx_rel(1, 2, "k", "alice", tok); /* RELEASE in flight */
    fx_advance_ms(2000);             /* lease due while in flight: parked */
    cr_assert_eq(fx_pending(), 1);
    tk_lock_follow(fx.t); /* the release never commits */
    tk_lock_check(fx.t);
    fx.phead = fx.nprops;
    tk_lock_lead(fx.t, fx.now);
    cr_assert_leq(tk_lock_next_deadline(fx.t), fx.now, "the lease is due again");
    fx_advance_us(0);
    fx_expect_prop(TK_CMD_EXPIRE, "k", NULL, tok, false);
    fx_commit();
    cr_assert_eq(fx_stats().keys, 0);
}

Test(roles, follow_restores_lease_of_dropped_expiry)
{
    uint64_t tok = fx_hold(1, 1, "k", "alice", 1000);
    fx_acq(2, 1, "k", "bob", LEASE, 100000);
    fx_advance_us(FX_LEASE_US(1000));
    fx_expect_prop(TK_CMD_HANDOFF, "k", "bob", tok, true);
    tk_lock_follow(fx.t);
    tk_lock_check(fx.t);
    fx.phead = fx.nprops;
    cr_assert_eq(fx_stats().held, 1);
    tk_lock_lead(fx.t, fx.now);
    fx_advance_us(0);
    fx_expect_prop(TK_CMD_EXPIRE, "k", NULL, tok, false); /* bob left with the old leader */
    fx_expect_quiet();
}

Test(roles, lead_and_follow_are_idempotent)
{
    fx_hold(1, 1, "k", "alice", LEASE);
    tk_lock_lead(fx.t, fx.now);
    cr_assert(tk_lock_is_leader(fx.t));
    tk_lock_follow(fx.t);
    tk_lock_follow(fx.t);
    tk_lock_check(fx.t);
    cr_assert_not(tk_lock_is_leader(fx.t));
    cr_assert_eq(fx_stats().held, 1);
}

/* The leader counts the margin too: its clock may run fast against the
 * client's, which counts the lease from its send. */
Test(roles, leader_counts_lease_with_the_margin)
{
    uint64_t t0 = fx.now;
    fx_hold(1, 1, "k", "alice", LEASE);
    cr_assert_eq(tk_lock_next_deadline(fx.t), t0 + LEASE * 1000ull + TK_LOCK_DRIFT_US(LEASE));
}

Test(roles, clear_drops_everything)
{
    fx_hold(1, 1, "k1", "alice", LEASE);
    fx_acq(2, 1, "k1", "bob", LEASE, 5000);
    fx_acq(1, 2, "k2", "alice", LEASE, 0);
    fx_qry(3, 1, "k2");
    tk_lock_clear(fx.t);
    tk_lock_check(fx.t);
    fx_expect_quiet();
    struct tk_lock_stats s = fx_stats();
    cr_assert_eq(s.keys, 0);
    cr_assert_eq(s.held, 0);
    cr_assert_eq(s.waiters, 0);
    cr_assert_eq(s.deferred, 0);
    cr_assert_eq(s.in_flight, 0);
    cr_assert_eq(s.grants, 1, "cumulative counters survive");
    cr_assert_eq(tk_lock_next_deadline(fx.t), UINT64_MAX);
    fx.phead = fx.nprops;
    fx.next_token = 5; /* a clear resets the token floor */
    fx_hold(1, 3, "k1", "carol", LEASE);
}

/* ---- Snapshots ---- */

Test(roles, snapshot_round_trips_through_restore)
{
    char key[8];
    char owner[8];
    for (int i = 0; i < 40; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        snprintf(owner, sizeof(owner), "o%d", i * 7);
        uint64_t tok = fx_hold(1, (uint64_t)i + 1, key, owner, 1000u + (uint32_t)i);
        if (i % 3 == 0) {
            fx_rel(1, 100u + (uint64_t)i, key, owner, tok);
            fx_commit();
            fx_expect('R', 1, 100u + (uint64_t)i);
        }
    }
    struct snap a = {.n = 0};
    tk_lock_each_holder(fx.t, snap_add, &a);
    cr_assert_eq(a.n, 26);
    /* Install in falling token order: restore must not care. */
    qsort(a.v, a.n, sizeof(a.v[0]), snap_cmp);
    struct tk_lock_limits lim = {.keys_max = 100, .waiters_per_key_max = 4, .waiters_max = 10};
    struct tk_lock_table *f = tk_lock_create(&lim);
    tk_lock_clear(f);
    for (size_t i = a.n; i-- > 0;) {
        tk_lock_restore(f, fx.now, &a.v[i]);
        tk_lock_check(f);
    }
    struct snap b = {.n = 0};
    tk_lock_each_holder(f, snap_add, &b);
    qsort(b.v, b.n, sizeof(b.v[0]), snap_cmp);
    cr_assert_eq(b.n, a.n);
    for (size_t i = 0; i < a.n; i++) {
        cr_assert_eq(b.v[i].token, a.v[i].token);
        cr_assert_eq(b.v[i].lease_ms, a.v[i].lease_ms);
        cr_assert_eq(b.v[i].key_len, a.v[i].key_len);
        cr_assert(memcmp(b.v[i].key, a.v[i].key, a.v[i].key_len) == 0);
        cr_assert_eq(b.v[i].owner_len, a.v[i].owner_len);
        cr_assert(memcmp(b.v[i].owner, a.v[i].owner, a.v[i].owner_len) == 0);
    }
    /* The restored leases count from the install, with the margin. */
    tk_lock_lead(f, fx.now);
    cr_assert_eq(tk_lock_next_deadline(f), fx.now + 1001000u + TK_LOCK_DRIFT_US(1001));
    tk_lock_follow(f);
    /* The log continues above the snapshot's tokens. */
    struct tk_cmd g = a.v[0];
    g.key[0] = 'z';
    g.token = a.v[a.n - 1].token + 1;
    tk_lock_apply(f, fx.now, &g, &fx.sink);
    tk_lock_check(f);
    tk_lock_destroy(f);
}

/* ---- Apply panics on contradictory commands ---- */

TestSuite(apply_panics, .init = fx_setup_follower, .fini = fx_teardown);

Test(apply_panics, grant_on_held_key, .signal = SIGABRT)
{
    fx_apply(TK_CMD_GRANT, "k", "alice", LEASE, 0, 10, false);
    fx_apply(TK_CMD_GRANT, "k", "bob", LEASE, 0, 11, false);
}

Test(apply_panics, grant_token_zero, .signal = SIGABRT)
{
    fx_apply(TK_CMD_GRANT, "k", "alice", LEASE, 0, 0, false);
}

Test(apply_panics, grant_token_below_earlier_token, .signal = SIGABRT)
{
    fx_apply(TK_CMD_GRANT, "a", "alice", LEASE, 0, 10, false);
    fx_apply(TK_CMD_RELEASE, "a", NULL, 0, 10, 0, false);
    fx_apply(TK_CMD_GRANT, "b", "bob", LEASE, 0, 9, false); /* another key, older token */
}

Test(apply_panics, grant_token_repeated, .signal = SIGABRT)
{
    fx_apply(TK_CMD_GRANT, "a", "alice", LEASE, 0, 10, false);
    fx_apply(TK_CMD_GRANT, "b", "bob", LEASE, 0, 10, false);
}

Test(apply_panics, handoff_token_not_increasing, .signal = SIGABRT)
{
    fx_apply(TK_CMD_GRANT, "k", "alice", LEASE, 0, 10, false);
    fx_apply(TK_CMD_HANDOFF, "k", "bob", LEASE, 10, 10, false);
}

Test(apply_panics, handoff_wrong_old_token, .signal = SIGABRT)
{
    fx_apply(TK_CMD_GRANT, "k", "alice", LEASE, 0, 10, false);
    fx_apply(TK_CMD_HANDOFF, "k", "bob", LEASE, 9, 11, false);
}

Test(apply_panics, handoff_on_free_key, .signal = SIGABRT)
{
    fx_apply(TK_CMD_HANDOFF, "k", "bob", LEASE, 9, 11, false);
}

Test(apply_panics, release_wrong_old_token, .signal = SIGABRT)
{
    fx_apply(TK_CMD_GRANT, "k", "alice", LEASE, 0, 10, false);
    fx_apply(TK_CMD_RELEASE, "k", NULL, 0, 11, 0, false);
}

Test(apply_panics, release_free_key, .signal = SIGABRT)
{
    fx_apply(TK_CMD_RELEASE, "k", NULL, 0, 10, 0, false);
}

Test(apply_panics, release_twice, .signal = SIGABRT)
{
    fx_apply(TK_CMD_GRANT, "k", "alice", LEASE, 0, 10, false);
    fx_apply(TK_CMD_RELEASE, "k", NULL, 0, 10, 0, false);
    fx_apply(TK_CMD_RELEASE, "k", NULL, 0, 10, 0, false);
}

Test(apply_panics, expire_wrong_old_token, .signal = SIGABRT)
{
    fx_apply(TK_CMD_GRANT, "k", "alice", LEASE, 0, 10, false);
    fx_apply(TK_CMD_EXPIRE, "k", NULL, 0, 12, 0, false);
}

Test(apply_panics, malformed_command, .signal = SIGABRT)
{
    fx_apply(TK_CMD_RELEASE, "k", "alice", 0, 10, 0, false); /* owner on a release */
}

Test(apply_panics, restore_duplicate_key, .signal = SIGABRT)
{
    struct tk_cmd g = {.type = TK_CMD_GRANT,
                       .key_len = 1,
                       .owner_len = 1,
                       .lease_ms = LEASE,
                       .token = 10,
                       .key = "k",
                       .owner = "a"};
    tk_lock_restore(fx.t, fx.now, &g);
    g.token = 11;
    tk_lock_restore(fx.t, fx.now, &g);
}

Test(apply_panics, restore_then_lower_token, .signal = SIGABRT)
{
    struct tk_cmd g = {.type = TK_CMD_GRANT,
                       .key_len = 1,
                       .owner_len = 1,
                       .lease_ms = LEASE,
                       .token = 10,
                       .key = "k",
                       .owner = "a"};
    tk_lock_restore(fx.t, fx.now, &g);
    fx_apply(TK_CMD_GRANT, "j", "b", LEASE, 0, 10, false);
}

/* On the leader every applied command is the key's proposal in flight. */

Test(apply_panics, leader_apply_not_proposed, .signal = SIGABRT)
{
    tk_lock_lead(fx.t, fx.now);
    fx_apply(TK_CMD_GRANT, "k", "alice", LEASE, 0, 10, false);
}

Test(apply_panics, leader_apply_other_type, .signal = SIGABRT)
{
    tk_lock_lead(fx.t, fx.now);
    uint64_t tok = fx_hold(1, 1, "k", "alice", LEASE);
    fx_acq(2, 1, "k", "bob", LEASE, 5000);
    fx_rel(1, 2, "k", "alice", tok); /* HANDOFF in flight */
    fx_apply(TK_CMD_RELEASE, "k", NULL, 0, tok, 0, false);
}

Test(apply_panics, leader_apply_other_expired_flag, .signal = SIGABRT)
{
    tk_lock_lead(fx.t, fx.now);
    uint64_t tok = fx_hold(1, 1, "k", "alice", LEASE);
    fx_acq(2, 1, "k", "bob", LEASE, 5000);
    fx_rel(1, 2, "k", "alice", tok); /* HANDOFF, expired = 0 */
    fx_apply(TK_CMD_HANDOFF, "k", "bob", LEASE, tok, tok + 1, true);
}

Test(apply_panics, tokens_may_skip_but_never_fall)
{
    fx_apply(TK_CMD_GRANT, "a", "alice", LEASE, 0, 10, false);
    fx_apply(TK_CMD_GRANT, "b", "bob", LEASE, 0, 1000, false);
    fx_apply(TK_CMD_HANDOFF, "a", "carol", LEASE, 10, 1001, false);
    cr_assert_eq(fx_stats().held, 2);
}
