/* What the lock table hands out for the latency metrics
 * (ticketing_acquire_seconds, ticketing_wait_seconds in docs/metrics.md).
 *
 * Goal: a G reply echoes the arrived_us its acquire came in with, whether
 * the key was free or the acquire waited in the queue; the sink's waited
 * callback fires once per waiter that leaves the queue for its grant, with
 * the time between the calls that queued and dequeued it, and never for an
 * acquire granted at once or one whose wait ran out.
 * Method: the fixture's fake Raft and clock (test_lock_fixture.h), with a
 * sink that also records arrived_us of each G and every waited call.
 */
#include "test_lock_fixture.h"

#define LEASE 10000u /* ms */
#define WAIT 5000u   /* ms */

static uint64_t g_arrived[16];
static size_t ng;
static uint64_t waited[16];
static size_t nwaited;

static void on_reply(void *ctx, const struct tk_lock_reply *r)
{
    if (r->type == 'G') {
        cr_assert_lt(ng, 16);
        g_arrived[ng++] = r->arrived_us;
    }
    fx_on_reply(ctx, r);
}

static void on_waited(void *ctx, uint64_t us)
{
    (void)ctx;
    cr_assert_lt(nwaited, 16);
    waited[nwaited++] = us;
}

static void setup(void)
{
    fx_setup_leader();
    fx.sink.reply = on_reply;
    fx.sink.waited = on_waited;
}

TestSuite(latency, .init = setup, .fini = fx_teardown);

static void acquire(uint64_t client, const char *owner, uint32_t wait_ms, uint64_t arrived_us)
{
    struct tk_lock_req r = {.type = 'A',
                            .client = client,
                            .id = client,
                            .key = "k",
                            .key_len = 1,
                            .owner = owner,
                            .owner_len = strlen(owner),
                            .lease_ms = LEASE,
                            .wait_ms = wait_ms,
                            .arrived_us = arrived_us};
    cr_assert_eq(tk_lock_request(fx.t, fx.now, &r, &fx.sink), TK_OK);
    tk_lock_check(fx.t);
}

Test(latency, free_key_grant_echoes_arrival_and_never_waited)
{
    acquire(1, "alice", 0, 111);
    uint64_t tok = fx_commit();
    fx_expect_g(1, 1, tok);
    cr_assert_eq(ng, 1);
    cr_assert_eq(g_arrived[0], 111);
    cr_assert_eq(nwaited, 0);
}

Test(latency, waiter_reports_its_time_in_the_queue)
{
    acquire(1, "alice", 0, 111);
    uint64_t t1 = fx_commit();
    fx_expect_g(1, 1, t1);
    acquire(2, "bob", WAIT, 222);
    fx_advance_us(7000);
    cr_assert_eq(nwaited, 0, "still queued");
    fx_rel(1, 9, "k", "alice", t1);
    cr_assert_eq(nwaited, 1, "the handoff is proposed: bob left the queue");
    cr_assert_eq(waited[0], 7000);
    uint64_t t2 = fx_commit();
    fx_expect('R', 1, 9);
    fx_expect_g(2, 2, t2);
    cr_assert_eq(ng, 2);
    cr_assert_eq(g_arrived[1], 222);
}

Test(latency, timed_out_waiter_reports_nothing)
{
    acquire(1, "alice", 0, 111);
    fx_expect_g(1, 1, fx_commit());
    acquire(2, "bob", WAIT, 222);
    fx_advance_ms(WAIT);
    fx_expect('T', 2, 2);
    cr_assert_eq(nwaited, 0);
    cr_assert_eq(ng, 1);
}
