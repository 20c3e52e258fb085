/* The leader's membership decisions (raft/members.h, SPEC 10).
 *
 * Goal: every rule of a replacement as a table: who may join, which
 * single-server step comes next (stale learner out, caught-up learner in,
 * replaced voter out), in which order, and what is never done (remove the
 * leader, promote a learner that has not caught up, grow past the
 * configured size). Method: configurations and leader status built by
 * hand; the functions are pure, so each case is one call.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "raft/members.h"

static struct tk_raft_config C;
static struct tk_raft_status S;

/* Member `id` at address slot `addr` ("10.0.0.<addr>"). */
static void add(uint64_t id, int addr, uint8_t role, uint64_t match)
{
    struct tk_raft_member *m = &C.m[C.n++];
    memset(m, 0, sizeof(*m));
    m->id = id;
    m->role = role;
    snprintf(m->peer_addr, sizeof(m->peer_addr), "10.0.0.%d:7401", addr);
    snprintf(m->client_addr, sizeof(m->client_addr), "10.0.0.%d:7400", addr);
    struct tk_raft_member_status *ms = &S.members[S.n_members++];
    memset(ms, 0, sizeof(*ms));
    ms->id = id;
    ms->role = role;
    ms->match = match;
}

/* Three voters 1, 2, 3 at addresses 1, 2, 3; 1 leads; commit 100. */
static void three(void)
{
    memset(&C, 0, sizeof(C));
    memset(&S, 0, sizeof(S));
    C.domain_lo = 7;
    S.id = 1;
    S.leader_id = 1;
    S.role = TK_RAFT_LEADER;
    S.commit = 100;
    add(1, 1, TK_RAFT_VOTER, 100);
    add(2, 2, TK_RAFT_VOTER, 100);
    add(3, 3, TK_RAFT_VOTER, 40);
}

static struct tk_raft_member joiner(uint64_t id, int addr)
{
    struct tk_raft_member m = {.id = id, .role = TK_RAFT_LEARNER};
    snprintf(m.peer_addr, sizeof(m.peer_addr), "10.0.0.%d:7401", addr);
    snprintf(m.client_addr, sizeof(m.client_addr), "10.0.0.%d:7400", addr);
    return m;
}

#define expect_next(type_, id_)                                                                 \
    do {                                                                                        \
        uint64_t got_id;                                                                        \
        uint8_t got = tk_members_next(&C, &S, 3, &got_id);                                      \
        cr_assert_eq(got, (type_), "next change: got %u, want %u", got, (type_));               \
        cr_assert_eq(got_id, (uint64_t)(id_), "on %llu, want %llu", (unsigned long long)got_id, \
                     (unsigned long long)(id_));                                                \
    } while (0)

TestSuite(members, .init = three);

Test(members, a_settled_configuration_needs_nothing)
{
    expect_next(0, 0);
    cr_assert_not(tk_members_replacing(&C, 2));
}

Test(members, join_verdicts)
{
    struct tk_raft_member j = joiner(2, 2);
    cr_assert_eq(tk_members_join(&C, &j, true), TK_MEMBERS_ALREADY);
    j = joiner(9, 3); /* a member's address: a restart */
    cr_assert_eq(tk_members_join(&C, &j, false), TK_MEMBERS_ADD);
    j = joiner(9, 4); /* unknown address */
    cr_assert_eq(tk_members_join(&C, &j, false), TK_MEMBERS_REFUSE);
    cr_assert_eq(tk_members_join(&C, &j, true), TK_MEMBERS_ADD, "listed in --peers");
}

Test(members, join_waits_when_no_room_is_left_for_the_next_replacement)
{
    add(4, 4, TK_RAFT_VOTER, 100);
    add(5, 5, TK_RAFT_VOTER, 100);
    add(6, 3, TK_RAFT_LEARNER, 0);
    add(7, 2, TK_RAFT_LEARNER, 0);
    cr_assert_eq(C.n, TK_RAFT_MEMBERS_MAX - 1);
    struct tk_raft_member j = joiner(9, 5);
    cr_assert_eq(tk_members_join(&C, &j, true), TK_MEMBERS_WAIT);
}

Test(members, a_learner_is_promoted_only_once_caught_up)
{
    add(9, 3, TK_RAFT_LEARNER, 99);
    expect_next(0, 0);
    cr_assert(tk_members_replacing(&C, 9), "a learner is not ready");
    S.members[3].match = 100;
    expect_next(TK_RAFT_PROMOTE, 9);
}

Test(members, after_promotion_the_old_identity_is_removed)
{
    add(9, 3, TK_RAFT_VOTER, 100);
    cr_assert(tk_members_replacing(&C, 9), "not ready while 3 is listed at its address");
    cr_assert_not(tk_members_replacing(&C, 3), "the old one has nothing older");
    expect_next(TK_RAFT_REMOVE, 3);
}

Test(members, a_superseded_learner_goes_first)
{
    add(8, 3, TK_RAFT_LEARNER, 100); /* restarted again before promotion */
    add(9, 3, TK_RAFT_LEARNER, 100);
    expect_next(TK_RAFT_REMOVE, 8);
}

Test(members, removals_come_before_promotions_elsewhere)
{
    add(8, 2, TK_RAFT_VOTER, 100);   /* replaces 2: promoted already */
    add(9, 3, TK_RAFT_LEARNER, 100); /* replaces 3: caught up */
    expect_next(TK_RAFT_REMOVE, 2);
}

Test(members, a_replaced_leader_hands_over_instead_of_finishing)
{
    add(9, 1, TK_RAFT_LEARNER, 100); /* claims the leader's own address */
    expect_next(TK_MEMBERS_TRANSFER, 0);
    C.m[3].role = TK_RAFT_VOTER; /* promoted by an earlier leader */
    S.members[3].role = TK_RAFT_VOTER;
    expect_next(TK_MEMBERS_TRANSFER, 0);
    /* The next leader (2) finishes: the old identity 1 goes. */
    S.id = S.leader_id = 2;
    expect_next(TK_RAFT_REMOVE, 1);
}

Test(members, a_learner_at_a_new_address_fills_a_free_seat_only)
{
    add(9, 4, TK_RAFT_LEARNER, 100);
    expect_next(0, 0); /* three voters already: it stays a learner */
    /* A forced domain of two voters takes it as the third. */
    C.m[2] = C.m[3];
    S.members[2] = S.members[3];
    C.n = 3;
    S.n_members = 3;
    expect_next(TK_RAFT_PROMOTE, 9);
}

Test(members, a_replacement_runs_to_the_end)
{
    /* Drive a whole replacement of 3 by 9 the way the leader does. */
    add(9, 3, TK_RAFT_LEARNER, 100);
    for (int step = 0; step < 4; step++) {
        uint64_t id;
        uint8_t t = tk_members_next(&C, &S, 3, &id);
        if (t == TK_RAFT_PROMOTE) {
            for (uint32_t i = 0; i < C.n; i++)
                if (C.m[i].id == id)
                    C.m[i].role = S.members[i].role = TK_RAFT_VOTER;
        } else if (t == TK_RAFT_REMOVE) {
            for (uint32_t i = 0; i < C.n; i++) {
                if (C.m[i].id != id)
                    continue;
                memmove(&C.m[i], &C.m[i + 1], (C.n - i - 1) * sizeof(C.m[0]));
                memmove(&S.members[i], &S.members[i + 1], (C.n - i - 1) * sizeof(S.members[0]));
                C.n--;
                S.n_members--;
                break;
            }
        }
    }
    cr_assert_eq(C.n, 3);
    cr_assert_eq(tk_raft_config_voters(&C), 3);
    cr_assert_not_null(tk_raft_config_find(&C, 9));
    cr_assert_null(tk_raft_config_find(&C, 3));
    cr_assert_not(tk_members_replacing(&C, 9));
}

/* ---- bootstrap of fresh nodes -------------------------------------------- */

static struct tk_members_peer partner(uint64_t id)
{
    return (struct tk_members_peer){.id = id, .fresh = true, .partner = true};
}

Test(boot, the_lowest_fresh_node_writes_once_all_agree)
{
    struct tk_members_peer p[2] = {partner(20), partner(30)};
    struct tk_members_boot b;
    cr_assert_eq(tk_members_bootstrap(10, false, p, 2, 3, &b), TK_MEMBERS_BOOT_NOW);
    cr_assert_eq(b.fresh, 3);
    cr_assert_eq(tk_members_bootstrap(25, false, p, 2, 3, &b), TK_MEMBERS_BOOT_WAIT,
                 "not the lowest");
    p[1].partner = false; /* not heard fresh yet */
    cr_assert_eq(tk_members_bootstrap(10, false, p, 2, 3, &b), TK_MEMBERS_BOOT_WAIT);
}

Test(boot, a_live_domain_is_joined_never_rebootstrapped)
{
    struct tk_members_peer p[2] = {partner(20), {.id = 30, .fresh = true, .member = true}};
    struct tk_members_boot b;
    cr_assert_eq(tk_members_bootstrap(10, false, p, 2, 3, &b), TK_MEMBERS_BOOT_NO_LEADER);
    cr_assert_eq(tk_members_bootstrap(10, true, p, 2, 3, &b), TK_MEMBERS_BOOT_FORCE,
                 "a fresh majority with the flag and no leader anywhere");
    p[1].leader_known = true;
    p[1].token_next = 777;
    cr_assert_eq(tk_members_bootstrap(10, true, p, 2, 3, &b), TK_MEMBERS_BOOT_JOIN,
                 "a leader answers: the flag does not force");
    cr_assert_eq(b.token_floor, 777);
}

Test(boot, force_needs_a_fresh_majority_and_the_lowest_flagged_node)
{
    struct tk_members_peer p[4] = {partner(20),
                                   {.id = 30, .fresh = true, .member = true},
                                   {.id = 40, .fresh = true, .member = true},
                                   partner(50)};
    struct tk_members_boot b;
    /* 3 fresh of 5 (10, 20, 50): a majority. */
    cr_assert_eq(tk_members_bootstrap(10, true, p, 4, 5, &b), TK_MEMBERS_BOOT_FORCE);
    p[0].forced = true; /* 20 has the flag too, 10 is still lower */
    cr_assert_eq(tk_members_bootstrap(10, true, p, 4, 5, &b), TK_MEMBERS_BOOT_FORCE);
    cr_assert_eq(tk_members_bootstrap(50, true, p, 4, 5, &b), TK_MEMBERS_BOOT_NO_LEADER,
                 "20 writes it, not 50");
    p[3].partner = false; /* only 2 of 5 fresh */
    cr_assert_eq(tk_members_bootstrap(10, true, p, 4, 5, &b), TK_MEMBERS_BOOT_NO_LEADER);
}
