/* Leader state lives only as long as a key needs it (shard/lock_internal.h).
 *
 * Goal: an idle held key carries no struct lock_lead and the in-flight array
 * does not grow with held keys; every path that gives a key leader state
 * (a proposal, a waiter, a deferred request, a lease running out) takes it
 * away again once the key goes idle, also when the node stops leading.
 * Method: white-box. The fixture drives the table through its API as in
 * test_lock.c; the tests then look at k->lead, t->nleads and t->flight_cap
 * through lock_internal.h. tk_lock_check() runs after every step and checks
 * that a key has a lead exactly while it is in flight or has waiters or
 * deferred requests.
 */
#include "shard/lock_internal.h"
#include "test_lock_fixture.h"

#define LEASE 10000u /* ms */
#define WAIT 5000u   /* ms */

TestSuite(lead, .init = fx_setup_leader, .fini = fx_teardown);

static struct lock_key *key_of(const char *key)
{
    size_t n = strlen(key);
    struct lock_key *k = lock_key_find(fx.t, lock_hash(key, n), key, n);
    cr_assert_not_null(k, "key %s not in the table", key);
    return k;
}

static uint64_t leads(void)
{
    return fx.t->nleads;
}

Test(lead, layout_fits_jemalloc_80_byte_class)
{
    /* A 16-byte key with an 8-byte owner: 48 + 24 = 72, in the 80-byte
     * class (jemalloc's classes are 16 bytes apart up to 128). */
    cr_assert_leq(sizeof(struct lock_key) + 16 + 8, 80);
    cr_assert_leq(sizeof(struct lock_lead), 64);
}

Test(lead, idle_held_key_has_none)
{
    fx_hold(1, 1, "k", "alice", LEASE);
    cr_assert_null(key_of("k")->lead);
    cr_assert_eq(leads(), 0);
}

Test(lead, grant_in_flight_has_one_until_commit)
{
    fx_acq(1, 1, "k", "alice", LEASE, 0);
    cr_assert_not_null(key_of("k")->lead);
    cr_assert_eq(key_of("k")->lead->grant_client, 1);
    cr_assert_eq(leads(), 1);
    uint64_t tok = fx_commit();
    fx_expect_g(1, 1, tok);
    cr_assert_null(key_of("k")->lead);
    cr_assert_eq(leads(), 0);
}

Test(lead, release_takes_one_and_frees_it_with_the_key)
{
    uint64_t tok = fx_hold(1, 1, "k", "alice", LEASE);
    fx_rel(2, 1, "k", "mallory", tok); /* N: no proposal, no lead */
    fx_expect('N', 2, 1);
    cr_assert_null(key_of("k")->lead);
    fx_rel(1, 2, "k", "alice", tok);
    cr_assert_eq(key_of("k")->lead->release_client, 1);
    fx_commit();
    fx_expect('R', 1, 2);
    cr_assert_eq(fx_stats().keys, 0);
    cr_assert_eq(leads(), 0);
}

Test(lead, waiter_takes_one_timeout_and_close_free_it)
{
    fx_hold(1, 1, "k", "alice", LEASE);
    fx_acq(2, 1, "k", "bob", LEASE, WAIT);
    cr_assert_not_null(key_of("k")->lead);
    cr_assert_eq(key_of("k")->lead->nwaiters, 1);
    fx_advance_ms(WAIT);
    fx_expect('T', 2, 1);
    cr_assert_null(key_of("k")->lead);
    fx_acq(3, 1, "k", "carol", LEASE, WAIT);
    fx_acq(3, 2, "k", "carol", LEASE, WAIT); /* same client twice on one key */
    cr_assert_eq(key_of("k")->lead->nwaiters, 2);
    tk_lock_client_closed(fx.t, 3);
    tk_lock_check(fx.t);
    cr_assert_null(key_of("k")->lead);
    cr_assert_eq(leads(), 0);
    fx_expect_quiet();
}

Test(lead, handoff_keeps_it_while_waiters_remain)
{
    uint64_t t1 = fx_hold(1, 1, "k", "alice", LEASE);
    fx_acq(2, 1, "k", "bob", LEASE, WAIT);
    fx_acq(3, 1, "k", "carol", LEASE, WAIT);
    fx_rel(1, 2, "k", "alice", t1);
    uint64_t t2 = fx_commit(); /* HANDOFF to bob; carol still waits */
    fx_expect('R', 1, 2);
    fx_expect_g(2, 1, t2);
    cr_assert_not_null(key_of("k")->lead);
    cr_assert_eq(key_of("k")->flight, 0);
    fx_rel(2, 2, "k", "bob", t2);
    uint64_t t3 = fx_commit(); /* HANDOFF to carol; nobody left */
    fx_expect('R', 2, 2);
    fx_expect_g(3, 1, t3);
    cr_assert_null(key_of("k")->lead);
    cr_assert_eq(leads(), 0);
}

Test(lead, deferred_request_keeps_it_until_answered)
{
    fx_acq(1, 1, "k", "alice", LEASE, 0);
    fx_qry(2, 1, "k");
    cr_assert_not_null(key_of("k")->lead->deferred);
    uint64_t tok = fx_commit();
    fx_expect_g(1, 1, tok);
    fx_expect_q(2, 1, "alice", tok, 0);
    cr_assert_null(key_of("k")->lead);
    /* A deferred R that proposes again keeps the same lead. */
    fx_rel(1, 2, "k", "alice", tok);
    fx_acq(3, 1, "k", "bob", LEASE, 0); /* B: in flight */
    fx_expect('B', 3, 1);
    cr_assert_eq(leads(), 1);
    fx_commit();
    fx_expect('R', 1, 2);
    cr_assert_eq(leads(), 0);
}

Test(lead, lease_expiry_of_idle_key_takes_one_in_tick)
{
    uint64_t tok = fx_hold(1, 1, "k", "alice", LEASE);
    cr_assert_null(key_of("k")->lead);
    fx_advance_us(FX_LEASE_US(LEASE));
    fx_expect_prop(TK_CMD_EXPIRE, "k", NULL, tok, false);
    struct lock_key *k = key_of("k");
    cr_assert_not_null(k->lead);
    cr_assert_eq(k->lead->grant_client, 0);
    cr_assert_eq(k->lead->release_client, 0);
    fx_commit();
    cr_assert_eq(fx_stats().keys, 0);
    cr_assert_eq(leads(), 0);
    fx_expect_quiet();
}

Test(lead, follow_frees_every_lead)
{
    uint64_t t1 = fx_hold(1, 1, "a", "alice", LEASE);
    fx_hold(1, 2, "b", "alice", LEASE);
    fx_hold(1, 3, "c", "alice", LEASE);
    fx_acq(2, 1, "a", "bob", LEASE, WAIT);  /* a: waiter, held */
    fx_rel(1, 4, "a", "alice", t1);         /* a: HANDOFF in flight */
    fx_acq(2, 2, "b", "bob", LEASE, WAIT);  /* b: waiter only */
    fx_acq(3, 1, "d", "carol", LEASE, 0);   /* d: GRANT in flight */
    fx_qry(4, 1, "d");                      /* d: deferred */
    fx_acq(4, 2, "d", "dave", LEASE, WAIT); /* d: waiter behind the grant */
    cr_assert_eq(leads(), 3);
    cr_assert_null(key_of("c")->lead);
    tk_lock_follow(fx.t);
    tk_lock_check(fx.t);
    cr_assert_eq(leads(), 0);
    cr_assert_null(key_of("a")->lead);
    cr_assert_null(key_of("b")->lead);
    struct tk_lock_stats s = fx_stats();
    cr_assert_eq(s.keys, 3); /* d was never granted: it leaves */
    cr_assert_eq(s.in_flight, 0);
    tk_lock_lead(fx.t, fx.now);
    tk_lock_check(fx.t);
}

/* Many idle holders cost no in-flight room; a mass expiry gives each key a
 * lead for as long as its EXPIRE is in flight, and the room goes again. */
Test(lead_scale, in_flight_room_follows_leads_not_keys, .fini = fx_teardown)
{
    enum { KEYS = 2000 };
    fx_setup_limits(2 * KEYS, 8, 64);
    tk_lock_lead(fx.t, fx.now);
    char key[32];
    for (int i = 0; i < KEYS; i++) {
        snprintf(key, sizeof(key), "key-%d", i);
        fx_hold(1, (uint64_t)i, key, "alice", LEASE);
    }
    cr_assert_eq(leads(), 0);
    cr_assert_leq(fx.t->flight_cap, 64, "in-flight room for idle keys: %llu",
                  (unsigned long long)fx.t->flight_cap);
    fx_advance_us(FX_LEASE_US(LEASE));
    cr_assert_eq(fx_pending(), KEYS);
    cr_assert_eq(leads(), KEYS);
    cr_assert_geq(fx.t->flight_cap, KEYS);
    while (fx_pending() > 0)
        fx_commit();
    cr_assert_eq(fx_stats().keys, 0);
    cr_assert_eq(leads(), 0);
    cr_assert_leq(fx.t->flight_cap, 64, "room not given back: %llu",
                  (unsigned long long)fx.t->flight_cap);
    fx_expect_quiet();
}
