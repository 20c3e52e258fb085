/* Raft core, fed what a buggy peer could send.
 *
 * Goal: a peer is authenticated, not correct. No message it sends, however
 * wrong, may crash the node or change its state: tk_raft_receive() refuses
 * it with TK_EPROTO, counts it in messages_invalid, and the term, vote,
 * leader, role, commit index, log and config stay as they were. Several of
 * these messages tripped an assertion (an abort) before the core checked
 * them; the others were dropped but reported as TK_OK.
 *
 * Method: node 1 of a 5-voter config (ids 1-5), brought to a known state
 * through valid messages; then one test per class of bad input, each
 * compared with the status taken just before. Last, random messages near
 * valid ones, with the consistency check after each.
 */
#include <criterion/criterion.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "raft/raft.h"

static struct tk_raft *R;
static struct tk_raft_update U;
static uint64_t NOW;
static struct tk_raft_config CFG;
static uint8_t CFG_BUF[TK_RAFT_CONFIG_ENCODED_MAX];
static uint32_t CFG_LEN;
static const uint8_t DATA[4] = "data";

#define MS 1000ull
#define SEC 1000000ull

static void setup(void)
{
    struct tk_raft_options o;
    tk_raft_options_default(&o, 1, 99);
    o.heartbeat_us = 10 * MS;
    o.election_min_us = 240 * MS;
    o.election_max_us = 250 * MS;
    o.snapshot_bytes_max = 1u << 20;
    R = tk_raft_create(&o);
    cr_assert_not_null(R);
    NOW = SEC;
    memset(&CFG, 0, sizeof(CFG));
    CFG.domain_lo = 0x1111;
    CFG.domain_hi = 0x2222;
    for (uint32_t i = 0; i < 5; i++) {
        struct tk_raft_member *m = &CFG.m[CFG.n++];
        m->id = i + 1;
        m->role = TK_RAFT_VOTER;
        snprintf(m->peer_addr, sizeof(m->peer_addr), "n%u:7401", i + 1);
        snprintf(m->client_addr, sizeof(m->client_addr), "n%u:7400", i + 1);
    }
    CFG_LEN = (uint32_t)tk_raft_config_encode(&CFG, CFG_BUF, sizeof(CFG_BUF));
    cr_assert_gt(CFG_LEN, 0);
}

static void teardown(void)
{
    tk_raft_destroy(R);
}

TestSuite(raft_faults, .init = setup, .fini = teardown);

/* ------------------------------------------------------------------ */
/* Building messages                                                   */

static struct tk_raft_entry ent(uint64_t index, uint64_t term, uint8_t type, uint64_t token)
{
    struct tk_raft_entry e;
    memset(&e, 0, sizeof(e));
    e.index = index;
    e.term = term;
    e.type = type;
    e.token_first = token;
    if (type == TK_RAFT_CONFIG) {
        e.data = CFG_BUF;
        e.len = CFG_LEN;
    } else if (type == TK_RAFT_DATA) {
        e.data = DATA;
        e.len = 4;
        e.token_count = 1;
    }
    return e;
}

static struct tk_raft_msg msg(uint8_t type, uint64_t from, uint64_t term)
{
    struct tk_raft_msg m;
    memset(&m, 0, sizeof(m));
    m.type = type;
    m.from = from;
    m.to = 1;
    m.term = term;
    return m;
}

static struct tk_raft_msg append_msg(uint64_t from,
                                     uint64_t term,
                                     uint64_t prev,
                                     uint64_t prev_term,
                                     uint64_t commit,
                                     const struct tk_raft_entry *ents,
                                     uint32_t n)
{
    struct tk_raft_msg m = msg(TK_RAFT_MSG_APPEND, from, term);
    m.append.prev_index = prev;
    m.append.prev_term = prev_term;
    m.append.commit = commit;
    m.append.n = n;
    m.append.entries = ents;
    return m;
}

static int recv(const struct tk_raft_msg *m)
{
    return tk_raft_receive(R, m, NOW, &U);
}

static int append(uint64_t from,
                  uint64_t term,
                  uint64_t prev,
                  uint64_t prev_term,
                  uint64_t commit,
                  const struct tk_raft_entry *ents,
                  uint32_t n)
{
    struct tk_raft_msg m = append_msg(from, term, prev, prev_term, commit, ents, n);
    return recv(&m);
}

static const uint8_t BLOB[16] = "0123456789abcdef";

/* A snapshot chunk of BLOB from leader `from`: index 50 of term 3. */
static struct tk_raft_msg chunk_msg(uint64_t from, uint64_t term, uint64_t offset, uint32_t len)
{
    struct tk_raft_msg m = msg(TK_RAFT_MSG_SNAPSHOT, from, term);
    m.snapshot.index = 50;
    m.snapshot.term = 3;
    m.snapshot.token_next = 5000;
    m.snapshot.total = sizeof(BLOB);
    m.snapshot.offset = offset;
    m.snapshot.len = len;
    m.snapshot.data = len > 0 ? BLOB + offset : NULL;
    m.snapshot.config = &CFG;
    return m;
}

/* Log [1:t1 CONFIG, 2:t2 NOOP, 3:t2 DATA, 4:t2 DATA] from leader 2 in
 * term 2, commit 3; the fencing counter is 102 after entry 4. */
static void follower(void)
{
    struct tk_raft_entry e1 = ent(1, 1, TK_RAFT_CONFIG, 100);
    cr_assert_eq(append(5, 1, 0, 0, 0, &e1, 1), TK_OK);
    struct tk_raft_entry e[3] = {ent(2, 2, TK_RAFT_NOOP, 100), ent(3, 2, TK_RAFT_DATA, 100),
                                 ent(4, 2, TK_RAFT_DATA, 101)};
    cr_assert_eq(append(2, 2, 1, 1, 3, e, 3), TK_OK);
    cr_assert_eq(tk_raft_commit(R), 3);
    cr_assert_eq(tk_raft_last_index(R), 4);
    cr_assert_eq(tk_raft_leader(R), 2);
    cr_assert_eq(tk_raft_applied(R, 3, NOW, &U), TK_OK);
}

/* From follower(): node 1 campaigns and wins term 3 with votes of 2 and 3. */
static void leader(void)
{
    follower();
    NOW += SEC;
    tk_raft_tick(R, NOW, &U);
    cr_assert_eq(tk_raft_role(R), TK_RAFT_PRECANDIDATE);
    struct tk_raft_msg v = msg(TK_RAFT_MSG_VOTE_REPLY, 2, 3);
    v.vote_reply.pre = 1;
    v.vote_reply.granted = 1;
    for (uint64_t from = 2; from <= 3; from++) {
        v.from = from;
        cr_assert_eq(recv(&v), TK_OK);
    }
    cr_assert_eq(tk_raft_role(R), TK_RAFT_CANDIDATE);
    v.vote_reply.pre = 0;
    for (uint64_t from = 2; from <= 3; from++) {
        v.from = from;
        cr_assert_eq(recv(&v), TK_OK);
    }
    cr_assert_eq(tk_raft_role(R), TK_RAFT_LEADER);
    cr_assert_eq(tk_raft_term(R), 3);
    cr_assert_eq(tk_raft_last_index(R), 5);
}

/* ------------------------------------------------------------------ */
/* The state a refused message must leave alone                        */

struct state {
    struct tk_raft_status st;
    uint64_t invalid;
    bool has_config;
    struct tk_raft_config config;
    uint64_t token_at_last;
};

static struct state state_now(void)
{
    struct state s;
    memset(&s, 0, sizeof(s));
    tk_raft_status(R, &s.st);
    s.invalid = tk_raft_metrics(R)->messages_invalid;
    const struct tk_raft_config *c = tk_raft_config(R);
    s.has_config = c != NULL;
    if (c != NULL)
        s.config = *c;
    s.token_at_last = tk_raft_next_token(R);
    return s;
}

/* rv is a refusal, counted once, and nothing else changed. */
static void assert_refused(int rv, const struct state *b, const char *what)
{
    cr_assert_eq(rv, TK_EPROTO, "%s: %s", what, tk_strerror(rv));
    struct tk_raft_status st;
    tk_raft_status(R, &st);
    cr_assert_eq(st.term, b->st.term, "%s: term", what);
    cr_assert_eq(st.voted_for, b->st.voted_for, "%s: vote", what);
    cr_assert_eq(st.leader_id, b->st.leader_id, "%s: leader", what);
    cr_assert_eq(st.role, b->st.role, "%s: role", what);
    cr_assert_eq(st.commit, b->st.commit, "%s: commit", what);
    cr_assert_eq(st.applied, b->st.applied, "%s: applied", what);
    cr_assert_eq(st.first_index, b->st.first_index, "%s: first index", what);
    cr_assert_eq(st.last_index, b->st.last_index, "%s: last index", what);
    cr_assert_eq(st.last_term, b->st.last_term, "%s: last term", what);
    cr_assert_eq(st.snapshot_index, b->st.snapshot_index, "%s: snapshot", what);
    cr_assert_eq(st.token_next, b->st.token_next, "%s: token", what);
    cr_assert_eq(st.log_bytes, b->st.log_bytes, "%s: log bytes", what);
    cr_assert_eq(st.domain_lo, b->st.domain_lo, "%s: domain", what);
    for (uint32_t i = 0; i < st.n_members; i++) {
        cr_assert_eq(st.members[i].match, b->st.members[i].match, "%s: match", what);
        cr_assert_eq(st.members[i].next, b->st.members[i].next, "%s: next", what);
    }
    const struct tk_raft_config *c = tk_raft_config(R);
    cr_assert_eq(c != NULL, b->has_config, "%s: config", what);
    if (c != NULL) {
        cr_assert_eq(c->n, b->config.n, "%s: members", what);
        cr_assert_eq(c->domain_hi, b->config.domain_hi, "%s: domain", what);
    }
    cr_assert_eq(tk_raft_metrics(R)->messages_invalid, b->invalid + 1, "%s: counted", what);
    cr_assert_eq(U.flags & (TK_RAFT_UPDATE_STATE | TK_RAFT_UPDATE_COMMIT | TK_RAFT_UPDATE_CONFIG |
                            TK_RAFT_UPDATE_SNAPSHOT_INSTALL),
                 0, "%s: update flags", what);
    if (b->st.role != TK_RAFT_LEADER)
        cr_assert_eq(U.n_msgs, 0, "%s: no answer", what);
    tk_raft_check(R);
}

#define REFUSED(expr, what)                \
    do {                                   \
        struct state b_ = state_now();     \
        assert_refused((expr), &b_, what); \
    } while (0)

/* ------------------------------------------------------------------ */
/* Header                                                              */

Test(raft_faults, term_zero)
{
    follower();
    REFUSED(append(2, 0, 4, 2, 3, NULL, 0), "append in term 0");
    struct tk_raft_msg v = msg(TK_RAFT_MSG_VOTE_REPLY, 3, 0);
    v.vote_reply.granted = 1;
    REFUSED(recv(&v), "vote reply in term 0");
    struct tk_raft_msg c = chunk_msg(2, 0, 0, 4);
    REFUSED(recv(&c), "snapshot in term 0");
}

Test(raft_faults, term_that_could_wrap)
{
    follower();
    NOW += SEC; /* no leader stickiness: a vote would count */
    struct tk_raft_msg v = msg(TK_RAFT_MSG_VOTE, 3, UINT64_MAX);
    v.vote.last_index = 4;
    v.vote.last_term = 2;
    REFUSED(recv(&v), "vote in term 2^64-1");
    v.term = UINT64_MAX / 2;
    REFUSED(recv(&v), "vote in term 2^63");
    REFUSED(append(3, UINT64_MAX - 1, 4, 2, 3, NULL, 0), "append in term 2^64-2");
    /* The node campaigns normally afterwards. */
    tk_raft_tick(R, NOW, &U);
    cr_assert_eq(tk_raft_role(R), TK_RAFT_PRECANDIDATE);
}

Test(raft_faults, vote_for_an_impossible_log)
{
    follower();
    NOW += SEC;
    struct tk_raft_msg v = msg(TK_RAFT_MSG_VOTE, 3, 3);
    v.vote.last_index = 4;
    v.vote.last_term = 4;
    REFUSED(recv(&v), "last term above the candidate's term");
    v.vote.last_index = 0;
    v.vote.last_term = 2;
    REFUSED(recv(&v), "an empty log with a term");
    v.vote.last_index = 7;
    v.vote.last_term = 0;
    REFUSED(recv(&v), "entries of term 0");
    v.vote.last_index = UINT64_MAX;
    v.vote.last_term = 3;
    REFUSED(recv(&v), "index that could wrap");
}

/* ------------------------------------------------------------------ */
/* Append                                                              */

Test(raft_faults, entries_with_index_gaps)
{
    follower();
    struct tk_raft_entry e[2] = {ent(5, 2, TK_RAFT_DATA, 102), ent(7, 2, TK_RAFT_DATA, 103)};
    REFUSED(append(2, 2, 4, 2, 3, e, 2), "index 7 after 5");
    struct tk_raft_entry f = ent(4, 2, TK_RAFT_DATA, 102);
    REFUSED(append(2, 2, 4, 2, 3, &f, 1), "index 4 after prev 4");
    struct tk_raft_entry g = ent(UINT64_MAX, 2, TK_RAFT_DATA, 102);
    REFUSED(append(2, 2, UINT64_MAX - 1, 2, 3, &g, 1), "prev index that could wrap");
}

Test(raft_faults, tokens_that_do_not_chain)
{
    follower(); /* counter 102 after entry 4 */
    struct tk_raft_entry back[2] = {ent(5, 2, TK_RAFT_DATA, 102), ent(6, 2, TK_RAFT_DATA, 102)};
    REFUSED(append(2, 2, 4, 2, 3, back, 2), "a token reused");
    struct tk_raft_entry first = ent(5, 2, TK_RAFT_DATA, 99);
    REFUSED(append(2, 2, 4, 2, 3, &first, 1), "the first entry going back");
    first.token_first = 200; /* a raise (a claim of moved slots, SPEC 15) */
    cr_assert_eq(append(2, 2, 4, 2, 3, &first, 1), TK_OK, "the first entry raising the counter");
    struct tk_raft_entry wrap = ent(5, 2, TK_RAFT_DATA, UINT64_MAX - 1);
    wrap.token_count = 5;
    REFUSED(append(2, 2, 4, 2, 3, &wrap, 1), "a token range that wraps");
    struct tk_raft_entry noop = ent(5, 2, TK_RAFT_NOOP, 102);
    noop.token_count = 2;
    REFUSED(append(2, 2, 4, 2, 3, &noop, 1), "a NOOP with tokens");
}

Test(raft_faults, entry_length_and_data_disagree)
{
    follower();
    struct tk_raft_entry e = ent(5, 2, TK_RAFT_DATA, 102);
    e.data = NULL;
    REFUSED(append(2, 2, 4, 2, 3, &e, 1), "length without data");
    e = ent(5, 2, TK_RAFT_DATA, 102);
    e.len = 0;
    REFUSED(append(2, 2, 4, 2, 3, &e, 1), "data without length");
    e = ent(5, 2, TK_RAFT_DATA, 102);
    e.len = TK_RAFT_ENTRY_BYTES_MAX + 1;
    REFUSED(append(2, 2, 4, 2, 3, &e, 1), "longer than an entry can be");
    struct tk_raft_msg m = append_msg(2, 2, 4, 2, 3, NULL, 3);
    REFUSED(recv(&m), "entries without an array");
    e = ent(5, 2, TK_RAFT_DATA, 102);
    e.type = 9;
    REFUSED(append(2, 2, 4, 2, 3, &e, 1), "an unknown type");
}

Test(raft_faults, terms_out_of_order)
{
    follower();
    struct tk_raft_entry down[2] = {ent(5, 2, TK_RAFT_DATA, 102), ent(6, 1, TK_RAFT_DATA, 103)};
    REFUSED(append(2, 2, 4, 2, 3, down, 2), "a term going down");
    struct tk_raft_entry future = ent(5, 3, TK_RAFT_DATA, 102);
    REFUSED(append(2, 2, 4, 2, 3, &future, 1), "an entry above the message's term");
    REFUSED(append(2, 2, 4, 3, 3, NULL, 0), "prev term above the message's term");
    struct tk_raft_entry zero = ent(5, 0, TK_RAFT_DATA, 102);
    REFUSED(append(2, 2, 4, 0, 3, &zero, 1), "an entry of term 0");
}

static uint32_t config_with(const struct tk_raft_config *c, uint8_t *buf)
{
    uint32_t len = (uint32_t)tk_raft_config_encode(c, buf, TK_RAFT_CONFIG_ENCODED_MAX);
    cr_assert_gt(len, 0);
    return len;
}

Test(raft_faults, config_entries_that_fail_the_config_rules)
{
    follower();
    uint8_t buf[TK_RAFT_CONFIG_ENCODED_MAX + 1];
    struct tk_raft_entry e = ent(5, 2, TK_RAFT_CONFIG, 102);
    /* Two members with one id: patch the second id (after the 17-byte
     * header and the first member, "n1:7401" and "n1:7400"). */
    e.len = config_with(&CFG, buf);
    buf[17 + 9 + 2 + 7 + 2 + 7] = 1;
    e.data = buf;
    REFUSED(append(2, 2, 4, 2, 3, &e, 1), "a duplicate member id");
    e.len = config_with(&CFG, buf);
    buf[17 + 9 + 2 + 7 + 2 + 7 + 8] = 7; /* the second member's role */
    REFUSED(append(2, 2, 4, 2, 3, &e, 1), "a member of an unknown role");
    e.len = config_with(&CFG, buf);
    buf[16] = 0; /* no members */
    REFUSED(append(2, 2, 4, 2, 3, &e, 1), "no members");
    e.len = config_with(&CFG, buf) + 1; /* a trailing byte */
    REFUSED(append(2, 2, 4, 2, 3, &e, 1), "bytes after the config");
    e.len = 10;
    REFUSED(append(2, 2, 4, 2, 3, &e, 1), "a config cut short");
    struct tk_raft_config c = CFG;
    c.domain_lo = 0xbad;
    e.len = config_with(&c, buf);
    REFUSED(append(2, 2, 4, 2, 3, &e, 1), "another domain's config");
}

Test(raft_faults, a_fresh_node_takes_one_domain_and_entry_1_is_a_config)
{
    /* No config yet: the first CONFIG entry gives the domain, and a second
     * one in the same message must not change it. */
    uint8_t buf[TK_RAFT_CONFIG_ENCODED_MAX];
    struct tk_raft_config other = CFG;
    other.domain_hi = 0xbad;
    struct tk_raft_entry e[2] = {ent(1, 1, TK_RAFT_CONFIG, 100), ent(2, 1, TK_RAFT_CONFIG, 100)};
    e[1].len = config_with(&other, buf);
    e[1].data = buf;
    REFUSED(append(5, 1, 0, 0, 2, e, 2), "two domains in one message");
    cr_assert_null(tk_raft_config(R));
    /* Entry 1 is the bootstrap's CONFIG: a log without one would leave the
     * node no config to cut a snapshot with. */
    struct tk_raft_entry noop = ent(1, 1, TK_RAFT_NOOP, 100);
    REFUSED(append(5, 1, 0, 0, 1, &noop, 1), "entry 1 is not a config");
    tk_raft_applied(R, 1, NOW, &U);
    uint8_t *blob = malloc(4);
    memcpy(blob, "snap", 4);
    cr_assert_eq(tk_raft_snapshot(R, 1, blob, 4, NOW, &U), TK_EINVAL, "nothing to snapshot");
    /* The real entry 1 is taken. */
    cr_assert_eq(append(5, 1, 0, 0, 1, e, 1), TK_OK);
    cr_assert_not_null(tk_raft_config(R));
}

Test(raft_faults, a_second_leader_in_one_term)
{
    follower(); /* leader 2 in term 2 */
    struct tk_raft_entry e = ent(5, 2, TK_RAFT_DATA, 102);
    REFUSED(append(3, 2, 4, 2, 3, &e, 1), "append from 3 while 2 leads term 2");
    struct tk_raft_msg c = chunk_msg(3, 2, 0, 4);
    REFUSED(recv(&c), "snapshot from 3 while 2 leads term 2");
}

Test(raft_faults, another_leader_of_the_leaders_own_term)
{
    leader(); /* node 1 leads term 3 */
    struct tk_raft_entry e = ent(6, 3, TK_RAFT_DATA, 102);
    REFUSED(append(2, 3, 5, 3, 5, &e, 1), "append to a leader in its own term");
    struct tk_raft_msg c = chunk_msg(2, 3, 0, 4);
    REFUSED(recv(&c), "snapshot to a leader in its own term");
    cr_assert_eq(tk_raft_role(R), TK_RAFT_LEADER);
}

Test(raft_faults, a_log_that_contradicts_committed_entries)
{
    follower(); /* commit 3 */
    struct tk_raft_entry e = ent(3, 3, TK_RAFT_DATA, 100);
    REFUSED(append(3, 3, 2, 2, 3, &e, 1), "overwrites committed entry 3");
    REFUSED(append(3, 3, 3, 1, 3, NULL, 0), "another term at committed entry 3");
    REFUSED(append(3, 3, 0, 1, 3, NULL, 0), "a term at index 0");
    /* Same index and term, another entry: Log Matching says impossible. */
    struct tk_raft_entry same = ent(3, 2, TK_RAFT_DATA, 100);
    same.token_count = 4;
    struct tk_raft_entry next = ent(4, 2, TK_RAFT_DATA, 104);
    struct tk_raft_entry two[2] = {same, next};
    REFUSED(append(2, 2, 2, 2, 3, two, 2), "entry 3 of term 2 with other tokens");
    /* An uncommitted conflict is fine, in a newer term. */
    struct tk_raft_entry f = ent(4, 3, TK_RAFT_NOOP, 101);
    cr_assert_eq(append(3, 3, 3, 2, 3, &f, 1), TK_OK);
    cr_assert_eq(tk_raft_entry(R, 4)->term, 3);
}

Test(raft_faults, a_log_that_contradicts_the_snapshot)
{
    follower();
    /* Snapshot 50 (term 3) from leader 2 of term 4: the log now starts at 51. */
    struct tk_raft_msg c = chunk_msg(2, 4, 0, sizeof(BLOB));
    cr_assert_eq(recv(&c), TK_OK);
    cr_assert(U.flags & TK_RAFT_UPDATE_SNAPSHOT_INSTALL);
    cr_assert_eq(tk_raft_commit(R), 50);
    /* Entries 49, 50, 51 where entry 50 has another term than the
     * snapshot's: a leader whose log disagrees with what committed. */
    struct tk_raft_entry e[3] = {ent(49, 3, TK_RAFT_DATA, 4998), ent(50, 4, TK_RAFT_NOOP, 4999),
                                 ent(51, 4, TK_RAFT_DATA, 4999)};
    REFUSED(append(2, 4, 48, 3, 51, e, 3), "entry 50 of another term");
    /* Or of the same term but another counter: 4992 after entry 50, where
     * the snapshot says 5000. */
    e[1] = ent(50, 3, TK_RAFT_DATA, 4991);
    e[0].token_first = 4990;
    e[2].token_first = 4992;
    REFUSED(append(2, 4, 48, 3, 51, e, 3), "entry 50 with another counter");
    /* What a correct leader sends is taken. */
    e[0].token_first = 4998;
    e[1].token_first = 4999;
    e[2].token_first = 5000;
    cr_assert_eq(append(2, 4, 48, 3, 51, e, 3), TK_OK);
    cr_assert_eq(tk_raft_last_index(R), 51);
    cr_assert_eq(tk_raft_commit(R), 51);
}

Test(raft_faults, commit_beyond_what_was_sent_is_clamped)
{
    /* Not a refusal: a lagging follower always hears a commit index ahead
     * of the entries it got (Figure 2: commitIndex = min(leaderCommit,
     * index of last new entry)). It must never commit beyond them. */
    follower();
    cr_assert_eq(append(2, 2, 4, 2, UINT64_MAX, NULL, 0), TK_OK);
    cr_assert_eq(tk_raft_commit(R), 4);
    struct tk_raft_entry e = ent(5, 2, TK_RAFT_DATA, 102);
    cr_assert_eq(append(2, 2, 4, 2, 1000, &e, 1), TK_OK);
    cr_assert_eq(tk_raft_commit(R), 5);
    tk_raft_check(R);
}

/* ------------------------------------------------------------------ */
/* Snapshot                                                            */

/* The total a first chunk announces is only a claim: the follower's buffer
 * grows with the bytes that arrive, so a leader that announces the largest
 * snapshot allowed and sends 16 bytes costs the follower little memory. */
Test(raft_faults, a_first_chunk_does_not_allocate_the_announced_total)
{
#ifdef TK_SANITIZED
    cr_skip_test("the sanitizer's allocator does not report to mallinfo2");
#endif
    follower();
    struct tk_raft_msg c = chunk_msg(2, 4, 0, sizeof(BLOB));
    c.snapshot.total = 1u << 20; /* snapshot_bytes_max of this fixture */
    struct mallinfo2 before = mallinfo2();
    cr_assert_eq(recv(&c), TK_OK);
    struct mallinfo2 after = mallinfo2();
    size_t grew = (after.uordblks + after.hblkhd) - (before.uordblks + before.hblkhd);
    cr_assert_lt(grew, (size_t)256 << 10, "a 16-byte chunk took %zu bytes", grew);
}

Test(raft_faults, snapshot_chunks_out_of_bounds)
{
    follower();
    struct tk_raft_msg c = chunk_msg(2, 4, 0, 4);
    c.snapshot.offset = 17;
    c.snapshot.data = BLOB;
    REFUSED(recv(&c), "offset beyond the total");
    c = chunk_msg(2, 4, 12, 8);
    c.snapshot.data = BLOB;
    REFUSED(recv(&c), "length beyond the total");
    c = chunk_msg(2, 4, 0, 4);
    c.snapshot.data = NULL;
    REFUSED(recv(&c), "length without data");
    c = chunk_msg(2, 4, 0, 4);
    c.snapshot.total = 2u << 20;
    REFUSED(recv(&c), "larger than snapshot_bytes_max");
    c = chunk_msg(2, 4, 0, 4);
    c.snapshot.index = 0;
    REFUSED(recv(&c), "index 0");
    c.snapshot.index = UINT64_MAX;
    REFUSED(recv(&c), "an index that could wrap");
    c = chunk_msg(2, 4, 0, 4);
    c.snapshot.term = 5;
    REFUSED(recv(&c), "a term above the message's");
    c.snapshot.term = 0;
    REFUSED(recv(&c), "term 0");
    c = chunk_msg(2, 4, 0, 4);
    c.snapshot.config = NULL;
    REFUSED(recv(&c), "no config");
    struct tk_raft_config bad = CFG;
    bad.m[1].id = bad.m[0].id;
    c.snapshot.config = &bad;
    REFUSED(recv(&c), "a config that fails tk_raft_config_check");
    bad = CFG;
    bad.domain_lo = 0xbad;
    REFUSED(recv(&c), "another domain");
    /* SPEC 7: the counter is 101 after committed entry 3. */
    c = chunk_msg(2, 4, 0, 4);
    c.snapshot.token_next = 100;
    REFUSED(recv(&c), "a fencing counter going back");
}

/* ------------------------------------------------------------------ */
/* Replies to a leader                                                 */

Test(raft_faults, replies_about_what_the_leader_never_sent)
{
    leader(); /* log up to 5 */
    struct tk_raft_msg a = msg(TK_RAFT_MSG_APPEND_REPLY, 2, 3);
    a.append_reply.success = 1;
    a.append_reply.index = 6;
    REFUSED(recv(&a), "acknowledges entry 6 of a 5-entry log");
    a.append_reply.index = 5;
    a.append_reply.seq = 7;
    REFUSED(recv(&a), "acknowledges a heartbeat round never sent");
    a.append_reply.seq = 0;
    a.append_reply.index = UINT64_MAX;
    a.append_reply.success = 0;
    REFUSED(recv(&a), "rejects an index that could wrap");
    struct tk_raft_msg s = msg(TK_RAFT_MSG_SNAPSHOT_REPLY, 2, 3);
    s.snapshot_reply.index = 9;
    s.snapshot_reply.done = 1;
    REFUSED(recv(&s), "installed a snapshot beyond the log");
    /* A valid acknowledgement still counts. */
    a.append_reply.success = 1;
    a.append_reply.index = 5;
    cr_assert_eq(recv(&a), TK_OK);
    cr_assert_eq(tk_raft_commit(R), 3, "one follower is not a majority of 5");
}

Test(raft_faults, messages_that_are_not_for_the_core)
{
    follower();
    struct tk_raft_msg m = msg(TK_RAFT_MSG_JOIN, 3, 2);
    REFUSED(recv(&m), "a Join");
    m = msg(99, 3, 2);
    REFUSED(recv(&m), "an unknown type");
    m = append_msg(1, 2, 4, 2, 3, NULL, 0);
    REFUSED(recv(&m), "from itself");
    m = append_msg(0, 2, 4, 2, 3, NULL, 0);
    REFUSED(recv(&m), "from NodeId 0");
    m = append_msg(2, 2, 4, 2, 3, NULL, 0);
    m.to = 4;
    REFUSED(recv(&m), "for another node");
}

/* ------------------------------------------------------------------ */
/* Random messages near valid ones                                     */

static uint64_t near(struct tk_prng *p, uint64_t v)
{
    switch (tk_prng_range(p, 0, 9)) {
        case 0:
            return 0;
        case 1:
            return UINT64_MAX - tk_prng_range(p, 0, 2);
        case 2:
            return tk_prng_next(p);
        default:
            return v + tk_prng_range(p, 0, 4) - 2 * (v >= 2);
    }
}

Test(raft_faults, random_messages_never_crash_the_node)
{
    struct tk_prng p;
    tk_prng_seed(&p, 7);
    uint8_t junk[64];
    for (size_t i = 0; i < sizeof(junk); i++)
        junk[i] = (uint8_t)tk_prng_next(&p);
    struct tk_raft_config bad = CFG;
    bad.m[2].id = bad.m[3].id;
    for (int round = 0; round < 20; round++) {
        tk_raft_destroy(R);
        setup();
        if (round % 2 == 0)
            follower();
        else
            leader();
        for (int i = 0; i < 5000; i++) {
            uint64_t term = near(&p, tk_raft_term(R));
            uint64_t last = tk_raft_last_index(R);
            uint64_t from = tk_prng_range(&p, 0, 6);
            struct tk_raft_msg m = msg((uint8_t)tk_prng_range(&p, 1, 9), from, term);
            struct tk_raft_entry ents[4];
            switch (m.type) {
                case TK_RAFT_MSG_PREVOTE:
                case TK_RAFT_MSG_VOTE:
                    m.vote.last_index = near(&p, last);
                    m.vote.last_term = near(&p, term);
                    m.vote.transfer = (uint8_t)tk_prng_range(&p, 0, 1);
                    break;
                case TK_RAFT_MSG_VOTE_REPLY:
                    m.vote_reply.pre = (uint8_t)tk_prng_range(&p, 0, 1);
                    m.vote_reply.granted = (uint8_t)tk_prng_range(&p, 0, 1);
                    break;
                case TK_RAFT_MSG_APPEND: {
                    m.append.prev_index = near(&p, last);
                    m.append.prev_term = near(&p, term);
                    m.append.commit = near(&p, last);
                    m.append.n = (uint32_t)tk_prng_range(&p, 0, 4);
                    uint64_t token = near(&p, tk_raft_next_token(R));
                    for (uint32_t k = 0; k < m.append.n; k++) {
                        uint8_t type = (uint8_t)tk_prng_range(&p, 0, 4);
                        ents[k] = ent(m.append.prev_index + 1 + k, near(&p, term), type, token);
                        if (tk_prng_range(&p, 0, 9) == 0)
                            ents[k].token_count = (uint32_t)tk_prng_next(&p);
                        if (tk_prng_range(&p, 0, 9) == 0) {
                            ents[k].data = junk;
                            ents[k].len = (uint32_t)tk_prng_range(&p, 0, sizeof(junk));
                        }
                        token = tk_raft_entry_token_next(&ents[k]);
                    }
                    m.append.entries = ents;
                    break;
                }
                case TK_RAFT_MSG_APPEND_REPLY:
                    m.append_reply.success = (uint8_t)tk_prng_range(&p, 0, 1);
                    m.append_reply.index = near(&p, last);
                    m.append_reply.hint = near(&p, last);
                    m.append_reply.seq = near(&p, 0);
                    break;
                case TK_RAFT_MSG_SNAPSHOT:
                    m = chunk_msg(from, term, 0, 0);
                    m.snapshot.index = near(&p, last + 2);
                    m.snapshot.term = near(&p, term);
                    m.snapshot.token_next = near(&p, tk_raft_next_token(R));
                    m.snapshot.total = near(&p, sizeof(BLOB));
                    m.snapshot.offset = near(&p, 0);
                    m.snapshot.len = (uint32_t)tk_prng_range(&p, 0, sizeof(BLOB));
                    m.snapshot.data = BLOB;
                    if (tk_prng_range(&p, 0, 9) == 0)
                        m.snapshot.config = &bad;
                    break;
                case TK_RAFT_MSG_SNAPSHOT_REPLY:
                    m.snapshot_reply.index = near(&p, last);
                    m.snapshot_reply.offset = near(&p, 8);
                    m.snapshot_reply.done = (uint8_t)tk_prng_range(&p, 0, 1);
                    break;
                default:
                    break;
            }
            int rv = recv(&m);
            cr_assert(rv == TK_OK || rv == TK_EPROTO, "round %d message %d: %s", round, i,
                      tk_strerror(rv));
            tk_raft_check(R);
            if (i % 50 == 0) {
                NOW += 7 * MS;
                tk_raft_tick(R, NOW, &U);
                tk_raft_check(R);
            }
        }
    }
}

/* ------------------------------------------------------------------ */
/* Options and names                                                   */

Test(raft_options, a_core_with_unusable_options_is_not_created)
{
    struct tk_raft_options base;
    tk_raft_options_default(&base, 1, 99);
    struct tk_raft *ok = tk_raft_create(&base);
    cr_assert_not_null(ok, "the defaults are usable");
    tk_raft_destroy(ok);
    struct tk_raft_options o;
#define REFUSES(field, value)                                                \
    do {                                                                     \
        o = base;                                                            \
        o.field = value;                                                     \
        cr_assert_null(tk_raft_create(&o), #field " = " #value " accepted"); \
    } while (0)
    REFUSES(id, 0);
    REFUSES(heartbeat_us, 0);
    REFUSES(election_min_us, base.heartbeat_us);
    REFUSES(election_max_us, base.election_min_us - 1);
    REFUSES(log_entries_max, 3);
    REFUSES(log_bytes_max, TK_RAFT_ENTRY_BYTES_MAX - 1);
    REFUSES(snapshot_entries, 0);
    REFUSES(snapshot_bytes, 0);
    REFUSES(snapshot_chunk_bytes, 0);
    REFUSES(snapshot_chunk_bytes, (8u << 20) + 1);
    REFUSES(append_bytes_max, 0);
    REFUSES(append_bytes_max, (8u << 20) + 1);
    REFUSES(inflight_bytes_max, 0);
    REFUSES(reads_max, 0);
#undef REFUSES
}

Test(raft_options, role_names)
{
    cr_assert_str_eq(tk_raft_role_name(TK_RAFT_FOLLOWER), "follower");
    cr_assert_str_eq(tk_raft_role_name(TK_RAFT_PRECANDIDATE), "precandidate");
    cr_assert_str_eq(tk_raft_role_name(TK_RAFT_CANDIDATE), "candidate");
    cr_assert_str_eq(tk_raft_role_name(TK_RAFT_LEADER), "leader");
    cr_assert_str_eq(tk_raft_role_name(200), "unknown");
}
