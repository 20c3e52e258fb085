/* A move of slots between two groups (SPEC 15), on the production driver
 * and shards of two standalone nodes (node_harness.h): freeze, hand-over,
 * claim; what clients see at each step; the counter carried across; every
 * step asked again; the refusals. */
#include "node_harness.h"

#define RING1 "version 1\n0-8191=sales-a@h:1\n8192-16383=sales-b@h:2\n"
#define RING2 "version 2\n0-99=sales-b@h:2\n100-8191=sales-a@h:1\n8192-16383=sales-b@h:2\n"

static void two_groups(struct node *a, struct node *b)
{
    /* b's clock and counter start an hour behind a's. */
    struct forced fa = {.group = "sales-a"},
                  fb = {.group = "sales-b", .wall_behind_us = UINT64_C(3600000000)};
    node_init_forced(a, 1024, 30000, &fa);
    node_init_forced(b, 1024, 30000, &fb);
    node_settle(a);
    node_settle(b);
    cr_assert_eq(commit_ring(a, "sales-a", RING1), TK_RAFT_SLOTS_OK, "%s", last_why);
    cr_assert_eq(commit_ring(b, "sales-b", RING1), TK_RAFT_SLOTS_OK, "%s", last_why);
}

/* Asked until it is no longer RETRY, the node settling in between. */
static uint8_t commit_step(struct node *n,
                           uint8_t op,
                           const char *group,
                           const char *text,
                           const char *peer,
                           uint64_t counter)
{
    uint8_t st = TK_RAFT_SLOTS_RETRY;
    for (int i = 0; i < 20 && st == TK_RAFT_SLOTS_RETRY; i++) {
        st = give_step(n, op, group, text, 0, 99, peer, counter);
        node_settle(n);
    }
    return st;
}

/* The nth key whose slot is in lo..hi. */
static const char *nth_key_in(uint32_t lo, uint32_t hi, int nth, char *buf, size_t cap)
{
    for (uint32_t i = 0;; i++) {
        snprintf(buf, cap, "seat-%u", i);
        uint32_t s = tk_slot(buf, strlen(buf));
        if (s >= lo && s <= hi && nth-- == 0)
            return buf;
    }
}

static uint32_t shard_of(const char *key)
{
    return tk_cmd_shard(key, strlen(key), NSHARDS);
}

static const struct answer *ask(struct node *n,
                                char type,
                                const char *key,
                                uint64_t id,
                                uint64_t token,
                                uint32_t wait_ms)
{
    request_ex(n, shard_of(key), type, key, id, token, wait_ms);
    node_settle(n);
    return answer_of(n, id);
}

Test(moves, slots_move_with_their_holders_gone_and_tokens_keep_increasing)
{
    static struct node a, b;
    two_groups(&a, &b);
    char k1[32], k2[32], k3[32], other[32];
    nth_key_in(0, 99, 0, k1, sizeof(k1));
    nth_key_in(0, 99, 1, k2, sizeof(k2));
    nth_key_in(0, 99, 2, k3, sizeof(k3));
    nth_key_in(100, 8191, 0, other, sizeof(other));
    const struct answer *g1 = ask(&a, 'A', k1, 1, 0, 0);
    cr_assert_eq(g1->type, 'G');
    uint64_t t1 = g1->token;
    cr_assert_eq(ask(&a, 'A', k2, 2, 0, 0)->type, 'G');
    cr_assert_null(ask(&a, 'A', k2, 3, 0, 60000), "a waiter behind the holder of k2");

    /* Freeze at the source: acquires and reads are answered W, the
     * waiter too; other slots are served as before. */
    cr_assert_eq(commit_step(&a, TK_RAFT_SLOTS_FREEZE, "sales-a", NULL, "sales-b", 0),
                 TK_RAFT_SLOTS_OK, "%s", last_why);
    const struct answer *w = answer_of(&a, 3);
    cr_assert_not_null(w, "the waiter was answered");
    cr_assert_eq(w->type, 'W');
    cr_assert_eq(w->token, 1, "with the ring's version");
    cr_assert_eq(ask(&a, 'A', k3, 4, 0, 0)->type, 'W');
    cr_assert_eq(ask(&a, 'Q', k1, 5, 0, 0)->type, 'W');
    cr_assert_eq(ask(&a, 'A', other, 6, 0, 0)->type, 'G', "slot 100 and up are not moving");
    struct tk_driver_stats st;
    tk_driver_stats(a.d, &st);
    cr_assert_eq(st.slots_frozen, 100);

    /* The hand-over waits for the holders: k1 releases, k2's lease runs out. */
    cr_assert_eq(commit_step(&a, TK_RAFT_SLOTS_HANDOVER, "sales-a", RING2, "sales-b", 0),
                 TK_RAFT_SLOTS_RETRY);
    cr_assert(strstr(last_why, "2 keys are still held"), "%s", last_why);
    cr_assert_eq(ask(&a, 'R', k1, 7, t1, 0)->type, 'R', "a holder may release in a frozen slot");
    cr_assert_eq(commit_step(&a, TK_RAFT_SLOTS_HANDOVER, "sales-a", RING2, "sales-b", 0),
                 TK_RAFT_SLOTS_RETRY);
    cr_assert(strstr(last_why, "1 keys are still held"), "%s", last_why);
    node_run_ms(&a, 10000 + 1100); /* the lease and its drift margin */
    cr_assert_eq(commit_step(&a, TK_RAFT_SLOTS_HANDOVER, "sales-a", RING2, "sales-b", 0),
                 TK_RAFT_SLOTS_OK, "%s", last_why);
    uint64_t c = last_reply.slots_reply.counter;
    cr_assert_gt(c, t1, "the counter is above every token the source issued");
    cr_assert_eq(last_reply.slots_reply.version, 2);
    cr_assert_eq(ask(&a, 'A', k1, 8, 0, 0)->type, 'W', "given away");
    cr_assert_eq(ask(&a, 'R', k1, 9, t1, 0)->type, 'W');
    tk_driver_stats(a.d, &st);
    cr_assert_eq(st.slots_frozen, 0);
    cr_assert_eq(st.slots_owned, 8092);
    cr_assert_eq(st.ring_version, 2);

    /* Nobody serves the range until the target claims it. */
    cr_assert_eq(ask(&b, 'A', k1, 10, 0, 0)->type, 'W');
    cr_assert_lt(tk_raft_next_token(tk_driver_core(b.d)), c, "the target's counter starts below");
    cr_assert_eq(commit_step(&b, TK_RAFT_SLOTS_CLAIM, "sales-b", RING2, "sales-a", c),
                 TK_RAFT_SLOTS_OK, "%s", last_why);
    const struct answer *g = ask(&b, 'A', k1, 11, 0, 0);
    cr_assert_eq(g->type, 'G');
    cr_assert_geq(g->token, c, "the key's tokens go on increasing across the move");
    tk_driver_stats(b.d, &st);
    cr_assert_eq(st.slots_owned, 8292);
    cr_assert_eq(st.moves_claimed, 1);

    /* Every step asked again is answered as done, the counter with it. */
    cr_assert_eq(give_step(&a, TK_RAFT_SLOTS_FREEZE, "sales-a", NULL, 0, 99, "sales-b", 0),
                 TK_RAFT_SLOTS_OK, "%s", last_why);
    cr_assert_eq(give_step(&a, TK_RAFT_SLOTS_HANDOVER, "sales-a", RING2, 0, 99, "sales-b", 0),
                 TK_RAFT_SLOTS_OK, "%s", last_why);
    cr_assert_eq(last_reply.slots_reply.counter, c);
    cr_assert_eq(give_step(&b, TK_RAFT_SLOTS_CLAIM, "sales-b", RING2, 0, 99, "sales-a", c),
                 TK_RAFT_SLOTS_OK, "%s", last_why);
    node_free(&a);
    node_free(&b);
}

Test(moves, steps_out_of_order_or_of_other_slots_are_refused_with_a_sentence)
{
    static struct node a, b;
    two_groups(&a, &b);
    /* A hand-over before the freeze. */
    cr_assert_eq(give_step(&a, TK_RAFT_SLOTS_HANDOVER, "sales-a", RING2, 0, 99, "sales-b", 0),
                 TK_RAFT_SLOTS_REFUSED);
    cr_assert(strstr(last_why, "not frozen"), "%s", last_why);
    /* Slots the source does not own. */
    cr_assert_eq(give_step(&a, TK_RAFT_SLOTS_FREEZE, "sales-a", NULL, 8000, 8300, "sales-b", 0),
                 TK_RAFT_SLOTS_REFUSED);
    cr_assert(strstr(last_why, "does not own slot 8192"), "%s", last_why);
    /* To itself; at the wrong group. */
    cr_assert_eq(give_step(&a, TK_RAFT_SLOTS_FREEZE, "sales-a", NULL, 0, 99, "sales-a", 0),
                 TK_RAFT_SLOTS_REFUSED);
    cr_assert(strstr(last_why, "itself"), "%s", last_why);
    cr_assert_eq(give_step(&b, TK_RAFT_SLOTS_FREEZE, "sales-a", NULL, 0, 99, "sales-b", 0),
                 TK_RAFT_SLOTS_REFUSED);
    cr_assert(strstr(last_why, "this is group 'sales-b'"), "%s", last_why);
    /* A claim of slots the target owns already. */
    cr_assert_eq(give_step(&b, TK_RAFT_SLOTS_CLAIM, "sales-b", RING2, 8192, 8200, "sales-a", 5),
                 TK_RAFT_SLOTS_REFUSED);
    cr_assert(strstr(last_why, "owns slot 8192 already"), "%s", last_why);
    /* A hand-over whose ring gives the range elsewhere, or keeps it. */
    cr_assert_eq(commit_step(&a, TK_RAFT_SLOTS_FREEZE, "sales-a", NULL, "sales-b", 0),
                 TK_RAFT_SLOTS_OK, "%s", last_why);
    cr_assert_eq(give_step(&a, TK_RAFT_SLOTS_HANDOVER, "sales-a", RING1, 0, 99, "sales-b", 0),
                 TK_RAFT_SLOTS_REFUSED);
    cr_assert(strstr(last_why, "does not give slots 0-99 to group 'sales-b'"), "%s", last_why);
    cr_assert_eq(commit_step(&a, TK_RAFT_SLOTS_HANDOVER, "sales-a", RING2, "sales-b", 0),
                 TK_RAFT_SLOTS_OK, "%s", last_why);
    /* Slots handed over are not the source's to freeze again. */
    cr_assert_eq(give_step(&a, TK_RAFT_SLOTS_FREEZE, "sales-a", NULL, 50, 150, "sales-b", 0),
                 TK_RAFT_SLOTS_REFUSED);
    cr_assert(strstr(last_why, "does not own slot 50"), "%s", last_why);
    /* A freeze of slots frozen already, for another group. */
    uint64_t c = last_reply.slots_reply.counter;
    /* A claim whose ring drops the target's own slots. */
    cr_assert_eq(
        give_step(&b, TK_RAFT_SLOTS_CLAIM, "sales-b",
                  "version 2\n0-99=sales-b@h:2\n100-8191=sales-a@h:1\n", 0, 99, "sales-a", c),
        TK_RAFT_SLOTS_REFUSED);
    cr_assert(strstr(last_why, "the slots it owns and slots 0-99, and no others"), "%s", last_why);
    cr_assert_eq(commit_step(&b, TK_RAFT_SLOTS_CLAIM, "sales-b", RING2, "sales-a", c),
                 TK_RAFT_SLOTS_OK, "%s", last_why);
    cr_assert_eq(commit_step(&a, TK_RAFT_SLOTS_FREEZE, "sales-a", NULL, "sales-c", 0),
                 TK_RAFT_SLOTS_REFUSED);
    cr_assert(strstr(last_why, "does not own slot 0"), "%s", last_why);
    cr_assert_eq(give_step(&a, TK_RAFT_SLOTS_FREEZE, "sales-a", NULL, 100, 200, "sales-b", 0),
                 TK_RAFT_SLOTS_RETRY);
    node_settle(&a);
    cr_assert_eq(give_step(&a, TK_RAFT_SLOTS_FREEZE, "sales-a", NULL, 150, 300, "sales-c", 0),
                 TK_RAFT_SLOTS_REFUSED);
    cr_assert(strstr(last_why, "slot 150 is frozen for another move"), "%s", last_why);
    node_free(&a);
    node_free(&b);
}
