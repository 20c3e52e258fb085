/* The lock table against the request x key-state matrix (SPEC 6), one test
 * per cell, plus the rules around it: deferral order, handoff as one
 * command, lease and wait timers, closed clients, bounds and role changes.
 *
 * Method: a leader table with a recording sink and a fake Raft that commits
 * proposals in FIFO order (test_lock_fixture.h). Each test drives requests,
 * commits and clock steps by hand and checks every reply and proposal;
 * tk_lock_check() runs after every step. Panic tests use .signal = SIGABRT.
 */
#include "test_lock_fixture.h"

#define LEASE 10000u /* ms */
#define WAIT 5000u   /* ms */

TestSuite(matrix, .init = fx_setup_leader, .fini = fx_teardown);

/* ---- A, wait_ms = 0 ---- */

Test(matrix, a_wait0_free_proposes_grant_and_answers_on_commit)
{
    cr_assert_eq(fx_acq(1, 7, "k", "alice", LEASE, 0), TK_OK);
    fx_expect_quiet(); /* nothing before the commit (SPEC 4.5) */
    fx_expect_prop(TK_CMD_GRANT, "k", "alice", 0, false);
    cr_assert_eq(fx_next_prop()->lease_ms, LEASE);
    cr_assert_eq(fx_stats().in_flight, 1);
    uint64_t tok = fx_commit();
    fx_expect_g(1, 7, tok);
    fx_expect_quiet();
    fx_qry(2, 1, "k");
    fx_expect_q(2, 1, "alice", tok, 0);
    cr_assert_eq(fx_stats().held, 1);
    cr_assert_eq(fx_stats().in_flight, 0);
}

Test(matrix, a_wait0_held_no_waiters_busy)
{
    fx_hold(1, 1, "k", "alice", LEASE);
    cr_assert_eq(fx_acq(2, 1, "k", "bob", LEASE, 0), TK_OK);
    fx_expect('B', 2, 1);
    cr_assert_eq(fx_pending(), 0);
    cr_assert_eq(fx_stats().busy, 1);
    cr_assert_eq(fx_stats().busy_bound, 0);
}

Test(matrix, a_wait0_held_waiters_busy)
{
    fx_hold(1, 1, "k", "alice", LEASE);
    fx_acq(2, 1, "k", "bob", LEASE, WAIT);
    fx_acq(3, 1, "k", "carol", LEASE, 0);
    fx_expect('B', 3, 1);
    fx_expect_quiet();
    fx_qry(9, 1, "k");
    fx_expect_q(9, 1, "alice", fx.next_token, 1);
}

Test(matrix, a_wait0_in_flight_busy)
{
    fx_acq(1, 1, "k", "alice", LEASE, 0);
    fx_acq(2, 1, "k", "bob", LEASE, 0);
    fx_expect('B', 2, 1);
    cr_assert_eq(fx_pending(), 1);
    uint64_t tok = fx_commit();
    fx_expect_g(1, 1, tok);
    fx_expect_quiet();
}

/* ---- A, wait_ms > 0 ---- */

Test(matrix, a_wait_free_proposes_grant_and_answers_on_commit)
{
    fx_acq(1, 1, "k", "alice", LEASE, WAIT);
    fx_expect_prop(TK_CMD_GRANT, "k", "alice", 0, false);
    cr_assert_eq(fx_stats().waiters, 0, "a granted acquire is not a waiter");
    /* Its wait no longer applies: no T even if the commit is slow. */
    fx_advance_ms(WAIT * 2);
    fx_expect_quiet();
    uint64_t tok = fx_commit();
    fx_expect_g(1, 1, tok);
    fx_expect_quiet();
}

Test(matrix, a_wait_held_no_waiters_enqueues)
{
    uint64_t tok = fx_hold(1, 1, "k", "alice", LEASE);
    fx_acq(2, 1, "k", "bob", LEASE, WAIT);
    fx_expect_quiet();
    cr_assert_eq(fx_pending(), 0);
    cr_assert_eq(fx_stats().waiters, 1);
    fx_qry(9, 1, "k");
    fx_expect_q(9, 1, "alice", tok, 1);
}

Test(matrix, a_wait_held_waiters_enqueues_at_tail)
{
    uint64_t t1 = fx_hold(1, 1, "k", "alice", LEASE);
    fx_acq(2, 1, "k", "bob", LEASE, WAIT);
    fx_acq(3, 1, "k", "carol", LEASE, WAIT);
    fx_acq(4, 1, "k", "dave", LEASE, WAIT);
    fx_expect_quiet();
    /* Releases hand the key down the queue in arrival order. */
    fx_rel(1, 2, "k", "alice", t1);
    fx_expect_prop(TK_CMD_HANDOFF, "k", "bob", t1, false);
    uint64_t t2 = fx_commit();
    fx_expect('R', 1, 2);
    fx_expect_g(2, 1, t2);
    fx_rel(2, 2, "k", "bob", t2);
    fx_expect_prop(TK_CMD_HANDOFF, "k", "carol", t2, false);
    uint64_t t3 = fx_commit();
    fx_expect('R', 2, 2);
    fx_expect_g(3, 1, t3);
    fx_rel(3, 2, "k", "carol", t3);
    uint64_t t4 = fx_commit();
    fx_expect('R', 3, 2);
    fx_expect_g(4, 1, t4);
    fx_expect_quiet();
    cr_assert(t1 < t2 && t2 < t3 && t3 < t4);
}

Test(matrix, a_wait_held_queue_full_busy)
{
    tk_lock_destroy(fx.t);
    fx_setup_limits(100, 2, 100);
    tk_lock_lead(fx.t, fx.now);
    uint64_t tok = fx_hold(1, 1, "k", "alice", LEASE);
    fx_acq(2, 1, "k", "bob", LEASE, WAIT);
    fx_acq(3, 1, "k", "carol", LEASE, WAIT);
    fx_acq(4, 1, "k", "dave", LEASE, WAIT);
    fx_expect('B', 4, 1);
    fx_expect_quiet();
    struct tk_lock_stats s = fx_stats();
    cr_assert_eq(s.busy_bound, 1);
    cr_assert_eq(s.waiters, 2);
    fx_qry(9, 1, "k");
    fx_expect_q(9, 1, "alice", tok, 2);
}

Test(matrix, a_wait_in_flight_enqueues)
{
    fx_acq(1, 1, "k", "alice", LEASE, 0);
    fx_acq(2, 1, "k", "bob", LEASE, WAIT);
    fx_expect_quiet();
    cr_assert_eq(fx_stats().waiters, 1);
    uint64_t tok = fx_commit();
    fx_expect_g(1, 1, tok);
    fx_expect_quiet();
    cr_assert_eq(fx_pending(), 0, "bob waits for alice");
    fx_qry(9, 1, "k");
    fx_expect_q(9, 1, "alice", tok, 1);
}

/* ---- R, exact (key, owner, token) match ---- */

Test(matrix, r_exact_free_not_held)
{
    uint64_t tok = fx_hold(1, 1, "k", "alice", LEASE);
    fx_rel(1, 2, "k", "alice", tok);
    fx_commit();
    fx_expect('R', 1, 2);
    cr_assert_eq(fx_stats().keys, 0, "a free key with nothing pending leaves the table");
    /* The same exact triple again: the key is FREE now. */
    fx_rel(1, 3, "k", "alice", tok);
    fx_expect('N', 1, 3);
    cr_assert_eq(fx_pending(), 0);
}

Test(matrix, r_exact_held_no_waiters_proposes_release)
{
    uint64_t tok = fx_hold(1, 1, "k", "alice", LEASE);
    fx_rel(2, 1, "k", "alice", tok); /* from another connection: allowed */
    fx_expect_quiet();
    fx_expect_prop(TK_CMD_RELEASE, "k", NULL, tok, false);
    cr_assert_eq(fx_commit(), 0);
    fx_expect('R', 2, 1);
    fx_expect_quiet();
    struct tk_lock_stats s = fx_stats();
    cr_assert_eq(s.held, 0);
    cr_assert_eq(s.releases, 1);
    fx_qry(9, 1, "k");
    fx_expect_q(9, 1, NULL, 0, 0);
}

Test(matrix, r_exact_held_waiters_hands_off_in_one_command)
{
    uint64_t t1 = fx_hold(1, 1, "k", "alice", LEASE);
    fx_acq(2, 5, "k", "bob", 3000, WAIT);
    fx_rel(1, 2, "k", "alice", t1);
    fx_expect_quiet();
    cr_assert_eq(fx_pending(), 1, "handoff is one command");
    fx_expect_prop(TK_CMD_HANDOFF, "k", "bob", t1, false);
    cr_assert_eq(fx_next_prop()->lease_ms, 3000);
    cr_assert_eq(fx_stats().waiters, 0, "the head is no longer a waiter");
    /* No new arrival can cut in while the handoff is in flight. */
    fx_acq(3, 1, "k", "carol", LEASE, 0);
    fx_expect('B', 3, 1);
    uint64_t t2 = fx_commit();
    fx_expect('R', 1, 2);
    fx_expect_g(2, 5, t2);
    fx_expect_quiet();
    cr_assert_eq(fx_pending(), 0);
    struct tk_lock_stats s = fx_stats();
    cr_assert_eq(s.handoffs, 1);
    cr_assert_eq(s.releases, 0);
    cr_assert_eq(s.held, 1);
    fx_qry(9, 1, "k");
    fx_expect_q(9, 1, "bob", t2, 0);
}

/* SPEC 6, IN-FLIGHT column: a waiter that arrives after a RELEASE was
 * proposed (the queue was empty when the holder let go, so the key really
 * was free at that moment) is queued; the RELEASE commits, the GRANT for
 * the head follows at once and in arrival order, and nobody who comes in
 * between, wait 0 or not, gets ahead of it. */
Test(matrix, a_wait_behind_release_in_flight_is_granted_next)
{
    uint64_t t1 = fx_hold(1, 1, "k", "alice", LEASE);
    fx_rel(1, 2, "k", "alice", t1);
    fx_expect_prop(TK_CMD_RELEASE, "k", NULL, t1, false);
    fx_acq(2, 1, "k", "bob", LEASE, WAIT);
    fx_acq(3, 1, "k", "carol", LEASE, WAIT);
    fx_expect_quiet();
    cr_assert_eq(fx_pending(), 1, "the RELEASE is the only proposal");
    cr_assert_eq(fx_commit(), 0);
    fx_expect('R', 1, 2);
    fx_expect_quiet();
    cr_assert_eq(fx_pending(), 1, "the head's GRANT goes out with the commit");
    fx_expect_prop(TK_CMD_GRANT, "k", "bob", 0, false);
    fx_acq(4, 1, "k", "dave", LEASE, 0);
    fx_expect('B', 4, 1);
    uint64_t t2 = fx_commit();
    cr_assert_gt(t2, t1);
    fx_expect_g(2, 1, t2);
    fx_expect_quiet();
    fx_qry(9, 1, "k");
    fx_expect_q(9, 1, "bob", t2, 1);
}

Test(matrix, r_exact_in_flight_waits_then_reevaluates)
{
    uint64_t t1 = fx_hold(1, 1, "k", "alice", LEASE);
    fx_acq(2, 1, "k", "bob", LEASE, WAIT);
    fx_rel(1, 2, "k", "alice", t1); /* HANDOFF to bob in flight */
    /* Deferred: a duplicate release by alice, then bob's release with the
     * token the handoff is about to receive, then a query. */
    uint64_t t2 = fx.next_token + 1;
    cr_assert_eq(fx_rel(1, 3, "k", "alice", t1), TK_OK);
    cr_assert_eq(fx_rel(2, 2, "k", "bob", t2), TK_OK);
    cr_assert_eq(fx_qry(9, 1, "k"), TK_OK);
    fx_expect_quiet();
    cr_assert_eq(fx_stats().deferred, 3);
    cr_assert_eq(fx_commit(), t2);
    fx_expect('R', 1, 2);
    fx_expect_g(2, 1, t2);
    fx_expect('N', 1, 3);
    /* bob's release matched and started a RELEASE: the query keeps waiting. */
    fx_expect_quiet();
    fx_expect_prop(TK_CMD_RELEASE, "k", NULL, t2, false);
    cr_assert_eq(fx_stats().deferred, 1);
    fx_commit();
    fx_expect('R', 2, 2);
    fx_expect_q(9, 1, NULL, 0, 0);
    fx_expect_quiet();
    cr_assert_eq(fx_stats().keys, 0);
}

Test(matrix, r_exact_behind_expiry_in_flight_not_held)
{
    uint64_t tok = fx_hold(1, 1, "k", "alice", 1000);
    fx_advance_us(FX_LEASE_US(1000)); /* EXPIRE in flight */
    fx_expect_prop(TK_CMD_EXPIRE, "k", NULL, tok, false);
    fx_rel(1, 2, "k", "alice", tok); /* exact now, but waits for the expiry */
    fx_expect_quiet();
    fx_commit();
    fx_expect('N', 1, 2); /* the lease ran out first: not released by this R */
    fx_expect_quiet();
    cr_assert_eq(fx_stats().releases, 0);
}

/* ---- R, no exact match ---- */

Test(matrix, r_nomatch_free_not_held)
{
    fx_rel(1, 1, "never", "alice", 5);
    fx_expect('N', 1, 1);
    cr_assert_eq(fx_pending(), 0);
    cr_assert_eq(fx_stats().keys, 0);
}

Test(matrix, r_nomatch_held_no_waiters_not_held)
{
    uint64_t tok = fx_hold(1, 1, "k", "alice", LEASE);
    fx_rel(1, 2, "k", "alice", tok + 1); /* wrong token */
    fx_rel(1, 3, "k", "mallory", tok);   /* wrong owner */
    fx_rel(1, 4, "k", "alic", tok);      /* owner prefix */
    fx_rel(1, 5, "k", "alicee", tok);    /* owner extension */
    fx_rel(1, 6, "kk", "alice", tok);    /* wrong key */
    for (uint64_t id = 2; id <= 6; id++)
        fx_expect('N', 1, id);
    fx_expect_quiet();
    cr_assert_eq(fx_pending(), 0);
    fx_qry(9, 1, "k");
    fx_expect_q(9, 1, "alice", tok, 0);
}

Test(matrix, r_nomatch_held_waiters_not_held)
{
    uint64_t tok = fx_hold(1, 1, "k", "alice", LEASE);
    fx_acq(2, 1, "k", "bob", LEASE, WAIT);
    fx_rel(2, 2, "k", "bob", tok); /* the waiter is not the holder */
    fx_expect('N', 2, 2);
    cr_assert_eq(fx_pending(), 0);
    fx_qry(9, 1, "k");
    fx_expect_q(9, 1, "alice", tok, 1);
}

Test(matrix, r_nomatch_in_flight_waits_then_reevaluates)
{
    fx_acq(1, 1, "k", "alice", LEASE, 0);
    fx_rel(3, 1, "k", "mallory", 5);
    fx_expect_quiet();
    uint64_t tok = fx_commit();
    fx_expect_g(1, 1, tok);
    fx_expect('N', 3, 1);
    fx_expect_quiet();
}

/* ---- Q ---- */

Test(matrix, q_free)
{
    fx_qry(1, 1, "k");
    fx_expect_q(1, 1, NULL, 0, 0);
    cr_assert_eq(fx_stats().keys, 0, "a query creates nothing");
}

Test(matrix, q_held_no_waiters)
{
    uint64_t tok = fx_hold(1, 1, "k", "alice", LEASE);
    fx_qry(2, 1, "k");
    fx_expect_q(2, 1, "alice", tok, 0);
}

Test(matrix, q_held_waiters)
{
    uint64_t tok = fx_hold(1, 1, "k", "alice", LEASE);
    fx_acq(2, 1, "k", "bob", LEASE, WAIT);
    fx_acq(3, 1, "k", "carol", LEASE, WAIT);
    fx_qry(4, 1, "k");
    fx_expect_q(4, 1, "alice", tok, 2);
}

Test(matrix, q_in_flight_waits_then_reevaluates)
{
    fx_acq(1, 1, "k", "alice", LEASE, 0);
    fx_qry(2, 1, "k");
    fx_expect_quiet(); /* the GRANT is not committed yet */
    uint64_t tok = fx_commit();
    fx_expect_g(1, 1, tok);
    fx_expect_q(2, 1, "alice", tok, 0);
}

/* ---- The holder's lease runs out ---- */

Test(matrix, lease_free_nothing)
{
    cr_assert_eq(tk_lock_next_deadline(fx.t), UINT64_MAX);
    fx_advance_ms(1000000);
    fx_expect_quiet();
    cr_assert_eq(fx_pending(), 0);
}

Test(matrix, lease_held_no_waiters_proposes_expire)
{
    uint64_t t0 = fx.now;
    uint64_t tok = fx_hold(1, 1, "k", "alice", 2000);
    cr_assert_eq(tk_lock_next_deadline(fx.t), t0 + FX_LEASE_US(2000),
                 "the leader counts from its apply, plus the margin");
    fx_advance_us(FX_LEASE_US(2000) - 1);
    cr_assert_eq(fx_pending(), 0);
    fx_advance_us(1);
    fx_expect_prop(TK_CMD_EXPIRE, "k", NULL, tok, false);
    cr_assert(tk_lock_next_deadline(fx.t) > fx.now, "no busy loop on a proposed expiry");
    fx_commit();
    fx_expect_quiet();
    struct tk_lock_stats s = fx_stats();
    cr_assert_eq(s.expiries, 1);
    cr_assert_eq(s.keys, 0);
    fx_rel(1, 2, "k", "alice", tok);
    fx_expect('N', 1, 2);
}

Test(matrix, lease_held_waiters_hands_off_to_head)
{
    uint64_t t1 = fx_hold(1, 1, "k", "alice", 2000);
    fx_acq(2, 1, "k", "bob", LEASE, 100000);
    fx_acq(3, 1, "k", "carol", LEASE, 100000);
    fx_advance_us(FX_LEASE_US(2000));
    fx_expect_prop(TK_CMD_HANDOFF, "k", "bob", t1, true);
    cr_assert_eq(fx_pending(), 1);
    uint64_t t2 = fx_commit();
    fx_expect_g(2, 1, t2); /* no R: nobody released */
    fx_expect_quiet();
    struct tk_lock_stats s = fx_stats();
    cr_assert_eq(s.expiries, 1);
    cr_assert_eq(s.handoffs, 1);
    fx_qry(9, 1, "k");
    fx_expect_q(9, 1, "bob", t2, 1);
}

Test(matrix, lease_in_flight_expires_after_commit_if_due)
{
    uint64_t t1 = fx_hold(1, 1, "k", "alice", 2000);
    fx_rel(1, 2, "k", "alice", t1); /* RELEASE in flight */
    fx_advance_ms(3000);            /* alice's lease comes due meanwhile */
    cr_assert_eq(fx_pending(), 1, "nothing proposed while in flight");
    cr_assert(tk_lock_next_deadline(fx.t) > fx.now);
    fx_commit();
    fx_expect('R', 1, 2);
    fx_expect_quiet();
    cr_assert_eq(fx_pending(), 0, "the release made the expiry moot");
    cr_assert_eq(fx_stats().keys, 0);
}

Test(matrix, lease_in_flight_handoff_new_holder_keeps_fresh_lease)
{
    uint64_t t1 = fx_hold(1, 1, "k", "alice", 2000);
    fx_acq(2, 1, "k", "bob", 4000, 100000);
    fx_rel(1, 2, "k", "alice", t1); /* HANDOFF in flight */
    fx_advance_ms(2500);
    cr_assert_eq(fx_pending(), 1);
    uint64_t t2 = fx_commit();
    fx_expect('R', 1, 2);
    fx_expect_g(2, 1, t2);
    cr_assert_eq(fx_pending(), 0);
    cr_assert_eq(tk_lock_next_deadline(fx.t), fx.now + FX_LEASE_US(4000));
    fx_advance_us(FX_LEASE_US(4000));
    fx_expect_prop(TK_CMD_EXPIRE, "k", NULL, t2, false);
}

Test(matrix, lease_due_while_expire_in_flight_fires_once)
{
    uint64_t t1 = fx_hold(1, 1, "k", "alice", 1000);
    fx_advance_us(FX_LEASE_US(1000));
    fx_expect_prop(TK_CMD_EXPIRE, "k", NULL, t1, false);
    fx_advance_ms(5000);
    cr_assert_eq(fx_pending(), 1, "one expiry per lease");
    fx_commit();
    fx_expect_quiet();
}

/* ---- A waiter's wait runs out ---- */

Test(matrix, wait_held_waiters_times_out)
{
    uint64_t tok = fx_hold(1, 1, "k", "alice", LEASE);
    uint64_t t0 = fx.now;
    fx_acq(2, 1, "k", "bob", LEASE, 1000);
    fx_acq(3, 1, "k", "carol", LEASE, 3000);
    cr_assert_eq(tk_lock_next_deadline(fx.t), t0 + 1000000u);
    fx_advance_us(999999);
    fx_expect_quiet();
    fx_advance_us(1);
    fx_expect('T', 2, 1);
    fx_expect_quiet();
    cr_assert_eq(fx_stats().timeouts, 1);
    fx_qry(9, 1, "k");
    fx_expect_q(9, 1, "alice", tok, 1);
    /* The next in line is still carol. */
    fx_rel(1, 2, "k", "alice", tok);
    fx_expect_prop(TK_CMD_HANDOFF, "k", "carol", tok, false);
}

Test(matrix, wait_in_flight_times_out_as_held)
{
    uint64_t t1 = fx_hold(1, 1, "k", "alice", LEASE);
    fx_acq(2, 1, "k", "bob", LEASE, WAIT);
    fx_rel(1, 2, "k", "alice", t1); /* HANDOFF to bob in flight */
    fx_acq(3, 1, "k", "carol", LEASE, 500);
    fx_advance_ms(500);
    fx_expect('T', 3, 1);
    fx_expect_quiet();
    uint64_t t2 = fx_commit();
    fx_expect('R', 1, 2);
    fx_expect_g(2, 1, t2);
    fx_expect_quiet();
}

Test(matrix, wait_of_head_stops_once_granted)
{
    uint64_t t1 = fx_hold(1, 1, "k", "alice", LEASE);
    fx_acq(2, 1, "k", "bob", LEASE, 1000);
    fx_rel(1, 2, "k", "alice", t1); /* bob popped for the handoff */
    fx_advance_ms(5000);
    fx_expect_quiet();
    uint64_t t2 = fx_commit();
    fx_expect('R', 1, 2);
    fx_expect_g(2, 1, t2);
    fx_expect_quiet();
}

/* ---- A waiter's connection closes ---- */

Test(matrix, close_held_waiters_removes_silently)
{
    uint64_t t1 = fx_hold(1, 1, "k", "alice", LEASE);
    uint64_t u1 = fx_hold(1, 2, "u", "alice", LEASE);
    fx_acq(2, 1, "k", "bob", LEASE, WAIT);
    fx_acq(3, 1, "k", "carol", LEASE, WAIT);
    fx_acq(2, 2, "k", "bob", LEASE, WAIT);
    fx_acq(2, 3, "u", "bob", LEASE, WAIT);
    tk_lock_client_closed(fx.t, 2);
    tk_lock_check(fx.t);
    fx_expect_quiet();
    cr_assert_eq(fx_stats().waiters, 1);
    fx_qry(9, 1, "k");
    fx_expect_q(9, 1, "alice", t1, 1);
    fx_qry(9, 2, "u");
    fx_expect_q(9, 2, "alice", u1, 0);
    fx_rel(1, 3, "k", "alice", t1);
    fx_expect_prop(TK_CMD_HANDOFF, "k", "carol", t1, false);
    /* Nothing of client 2 is left to fire. */
    fx_advance_ms(WAIT * 2);
    fx_expect_quiet();
}

Test(matrix, close_in_flight_removes_waiters_and_deferred)
{
    fx_acq(1, 1, "k", "alice", LEASE, 0); /* GRANT in flight */
    fx_acq(2, 1, "k", "bob", LEASE, WAIT);
    fx_qry(2, 2, "k");
    fx_rel(2, 3, "k", "bob", 1);
    fx_qry(3, 1, "k");
    cr_assert_eq(fx_stats().deferred, 3);
    tk_lock_client_closed(fx.t, 2);
    tk_lock_check(fx.t);
    struct tk_lock_stats s = fx_stats();
    cr_assert_eq(s.deferred, 1);
    cr_assert_eq(s.waiters, 0);
    uint64_t tok = fx_commit();
    fx_expect_g(1, 1, tok);
    fx_expect_q(3, 1, "alice", tok, 0);
    fx_expect_quiet();
}

Test(matrix, close_keeps_holder)
{
    uint64_t tok = fx_hold(1, 1, "k", "alice", LEASE);
    tk_lock_client_closed(fx.t, 1);
    tk_lock_check(fx.t);
    tk_lock_client_closed(fx.t, 77); /* unknown client: nothing */
    fx_qry(9, 1, "k");
    fx_expect_q(9, 1, "alice", tok, 0);
    /* The owner may release over another connection. */
    fx_rel(5, 1, "k", "alice", tok);
    fx_commit();
    fx_expect('R', 5, 1);
}

/* ---- Rules around the matrix ---- */

Test(matrix, deferral_keeps_arrival_order)
{
    fx_acq(1, 1, "k", "alice", LEASE, 0);
    fx_qry(3, 1, "k");
    fx_rel(4, 1, "k", "mallory", 1);
    fx_qry(3, 2, "k");
    fx_rel(4, 2, "k", "eve", 2);
    fx_qry(5, 1, "k");
    fx_expect_quiet();
    uint64_t tok = fx_commit();
    fx_expect_g(1, 1, tok);
    fx_expect_q(3, 1, "alice", tok, 0);
    fx_expect('N', 4, 1);
    fx_expect_q(3, 2, "alice", tok, 0);
    fx_expect('N', 4, 2);
    fx_expect_q(5, 1, "alice", tok, 0);
    fx_expect_quiet();
}

Test(matrix, free_key_never_has_waiters)
{
    uint64_t t1 = fx_hold(1, 1, "k", "alice", LEASE);
    fx_rel(1, 2, "k", "alice", t1); /* RELEASE: no waiters yet */
    fx_expect_prop(TK_CMD_RELEASE, "k", NULL, t1, false);
    fx_acq(2, 1, "k", "bob", LEASE, WAIT); /* queued behind the release */
    fx_qry(9, 1, "k");
    fx_commit();
    fx_expect('R', 1, 2);
    /* The key is FREE with a waiter for no longer than it takes to
     * propose the grant to the head: the query waits for it. */
    fx_expect_quiet();
    fx_expect_prop(TK_CMD_GRANT, "k", "bob", 0, false);
    uint64_t t2 = fx_commit();
    fx_expect_g(2, 1, t2);
    fx_expect_q(9, 1, "bob", t2, 0);
    fx_expect_quiet();
}

Test(matrix, same_owner_queues_not_reentrant)
{
    uint64_t t1 = fx_hold(1, 1, "k", "alice", LEASE);
    fx_acq(1, 2, "k", "alice", LEASE, WAIT);
    fx_expect_quiet();
    cr_assert_eq(fx_pending(), 0);
    fx_acq(1, 3, "k", "alice", LEASE, 0);
    fx_expect('B', 1, 3);
    fx_rel(1, 4, "k", "alice", t1);
    fx_expect_prop(TK_CMD_HANDOFF, "k", "alice", t1, false);
    uint64_t t2 = fx_commit();
    fx_expect('R', 1, 4);
    fx_expect_g(1, 2, t2);
    cr_assert_gt(t2, t1);
}

Test(matrix, waiter_keeps_its_own_lease)
{
    uint64_t t1 = fx_hold(1, 1, "k", "alice", LEASE);
    fx_acq(2, 1, "k", "bob", 1234, WAIT);
    fx_rel(1, 2, "k", "alice", t1);
    cr_assert_eq(fx_next_prop()->lease_ms, 1234);
}

/* ---- Bounds: B and nothing changed ---- */

TestSuite(bounds, .fini = fx_teardown);

Test(bounds, keys_max_busy)
{
    fx_setup_limits(2, 8, 64);
    tk_lock_lead(fx.t, fx.now);
    uint64_t t1 = fx_hold(1, 1, "k1", "alice", LEASE);
    fx_hold(1, 2, "k2", "alice", LEASE);
    fx_acq(1, 3, "k3", "alice", LEASE, WAIT);
    fx_expect('B', 1, 3);
    cr_assert_eq(fx_pending(), 0);
    struct tk_lock_stats s = fx_stats();
    cr_assert_eq(s.keys, 2);
    cr_assert_eq(s.busy_bound, 1);
    /* Existing keys still take waiters. */
    fx_acq(2, 1, "k1", "bob", LEASE, WAIT);
    fx_expect_quiet();
    fx_rel(1, 4, "k1", "alice", t1);
    uint64_t b1 = fx_commit();
    fx_expect('R', 1, 4);
    fx_expect_g(2, 1, b1);
    fx_rel(2, 2, "k1", "bob", b1);
    fx_commit();
    fx_expect('R', 2, 2);
    /* k1 left the table: room for k3. */
    fx_acq(1, 5, "k3", "alice", LEASE, 0);
    fx_expect_prop(TK_CMD_GRANT, "k3", "alice", 0, false);
}

Test(bounds, waiters_max_busy)
{
    fx_setup_limits(100, 8, 3);
    tk_lock_lead(fx.t, fx.now);
    fx_hold(1, 1, "a", "alice", LEASE);
    fx_hold(1, 2, "b", "alice", LEASE);
    fx_acq(2, 1, "a", "bob", LEASE, WAIT);
    fx_acq(2, 2, "b", "bob", LEASE, WAIT);
    fx_acq(3, 1, "a", "carol", LEASE, WAIT);
    fx_expect_quiet();
    fx_acq(3, 2, "b", "carol", LEASE, WAIT);
    fx_expect('B', 3, 2);
    struct tk_lock_stats s = fx_stats();
    cr_assert_eq(s.waiters, 3);
    cr_assert_eq(s.busy_bound, 1);
    /* A closed client frees places. */
    tk_lock_client_closed(fx.t, 2);
    fx_acq(3, 3, "b", "carol", LEASE, WAIT);
    fx_expect_quiet();
    cr_assert_eq(fx_stats().waiters, 2);
}

Test(bounds, deferred_over_waiters_max_is_full)
{
    fx_setup_limits(100, 8, 2);
    tk_lock_lead(fx.t, fx.now);
    fx_acq(1, 1, "k", "alice", LEASE, 0);
    cr_assert_eq(fx_qry(2, 1, "k"), TK_OK);
    cr_assert_eq(fx_rel(2, 2, "k", "x", 1), TK_OK);
    cr_assert_eq(fx_qry(2, 3, "k"), TK_EFULL);
    cr_assert_eq(fx_stats().deferred, 2);
    uint64_t tok = fx_commit();
    fx_expect_g(1, 1, tok);
    fx_expect_q(2, 1, "alice", tok, 0);
    fx_expect('N', 2, 2);
    fx_expect_quiet(); /* no reply for the refused request */
}

Test(bounds, zero_limits_refuse_everything)
{
    fx_setup_limits(0, 0, 0);
    tk_lock_lead(fx.t, fx.now);
    fx_acq(1, 1, "k", "alice", LEASE, WAIT);
    fx_expect('B', 1, 1);
    cr_assert_eq(fx_stats().keys, 0);
}
