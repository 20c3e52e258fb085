/* Raft core, one node fed crafted messages.
 *
 * Goal: the receiver rules of Figure 2 and the corner cases that a random
 * cluster hits rarely: conflicting suffixes, the conflict hint, stale
 * terms, the commit rule of §5.4.2 (the Figure 8 scenario), vote and
 * pre-vote rules, validation of what a peer sends, snapshot chunks out of
 * order and the leader's window of chunks, the refusals that guard
 * Election Safety and committed entries, and the log bounds after a
 * snapshot. Method: node 1 of a 5-voter config (ids 1-5); every test
 * builds the state it needs through messages, as peers would send them.
 */
#include <criterion/criterion.h>
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

#define MS 1000ull
#define SEC 1000000ull

/* The defaults at test timings: heartbeat 10 ms, election 240-250 ms. */
static struct tk_raft_options test_options(void)
{
    struct tk_raft_options o;
    tk_raft_options_default(&o, 1, 99);
    o.heartbeat_us = 10 * MS;
    o.election_min_us = 240 * MS;
    o.election_max_us = 250 * MS;
    return o;
}

static void setup(void)
{
    struct tk_raft_options o = test_options();
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

TestSuite(raft_log, .init = setup, .fini = teardown);

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
        static const uint8_t d[] = "data";
        e.data = d;
        e.len = 4;
        e.token_count = 1;
    }
    return e;
}

static int append(uint64_t from,
                  uint64_t term,
                  uint64_t prev,
                  uint64_t prev_term,
                  uint64_t commit,
                  const struct tk_raft_entry *ents,
                  uint32_t n)
{
    struct tk_raft_msg m;
    memset(&m, 0, sizeof(m));
    m.type = TK_RAFT_MSG_APPEND;
    m.from = from;
    m.to = 1;
    m.term = term;
    m.append.prev_index = prev;
    m.append.prev_term = prev_term;
    m.append.commit = commit;
    m.append.n = n;
    m.append.entries = ents;
    return tk_raft_receive(R, &m, NOW, &U);
}

static const struct tk_raft_msg *sent(uint8_t type, uint64_t to)
{
    for (uint32_t i = 0; i < U.n_msgs; i++)
        if (U.msgs[i].type == type && (to == 0 || U.msgs[i].to == to))
            return &U.msgs[i];
    return NULL;
}

static uint32_t count_sent(uint8_t type)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < U.n_msgs; i++)
        k += U.msgs[i].type == type;
    return k;
}

static const struct tk_raft_msg *reply(void)
{
    const struct tk_raft_msg *m = sent(TK_RAFT_MSG_APPEND_REPLY, 0);
    cr_assert_not_null(m);
    return m;
}

static uint64_t term_at(uint64_t index)
{
    const struct tk_raft_entry *e = tk_raft_entry(R, index);
    return e ? e->term : 0;
}

static uint64_t CHUNK_FROM = 2;
static uint64_t CHUNK_TERM = 4;
static uint32_t CHUNK_AGE_MS = 0;
static int chunk(uint64_t offset, const uint8_t *data, uint32_t len, uint64_t total);

/* Log [1:t1 CONFIG, 2:t2, 3:t2, 4:t2] from leader 2 in term 2, commit 1. */
static void log_1222(void)
{
    struct tk_raft_entry e1 = ent(1, 1, TK_RAFT_CONFIG, 100);
    append(5, 1, 0, 0, 0, &e1, 1);
    struct tk_raft_entry e[3] = {ent(2, 2, TK_RAFT_NOOP, 100), ent(3, 2, TK_RAFT_DATA, 100),
                                 ent(4, 2, TK_RAFT_DATA, 101)};
    append(2, 2, 1, 1, 1, e, 3);
    cr_assert_eq(reply()->append_reply.success, 1);
    cr_assert_eq(reply()->append_reply.index, 4);
    cr_assert_eq(tk_raft_last_index(R), 4);
    cr_assert_eq(tk_raft_commit(R), 1);
}

Test(raft_log, fresh_node_follows_the_bootstrapper)
{
    struct tk_raft_entry e1 = ent(1, 1, TK_RAFT_CONFIG, 100);
    cr_assert_null(tk_raft_config(R));
    cr_assert_eq(tk_raft_deadline(R), UINT64_MAX, "no config, no election");
    cr_assert_eq(append(5, 1, 0, 0, 0, &e1, 1), TK_OK);
    cr_assert_eq(reply()->append_reply.success, 1);
    cr_assert_eq(reply()->append_reply.index, 1);
    cr_assert_eq(reply()->to, 5);
    cr_assert_eq(tk_raft_leader(R), 5);
    cr_assert_eq(tk_raft_term(R), 1);
    cr_assert_not_null(tk_raft_config(R));
    cr_assert_eq(tk_raft_config(R)->domain_hi, 0x2222);
    cr_assert(U.flags & TK_RAFT_UPDATE_CONFIG);
    cr_assert(U.flags & TK_RAFT_UPDATE_STATE);
    cr_assert_eq(tk_raft_next_token(R), 100);
}

Test(raft_log, conflicting_suffix_is_replaced)
{
    log_1222();
    struct tk_raft_entry e[2] = {ent(2, 3, TK_RAFT_NOOP, 100), ent(3, 3, TK_RAFT_DATA, 100)};
    append(3, 3, 1, 1, 1, e, 2);
    cr_assert_eq(reply()->append_reply.success, 1);
    cr_assert_eq(reply()->append_reply.index, 3);
    cr_assert_eq(tk_raft_last_index(R), 3);
    cr_assert_eq(term_at(2), 3);
    cr_assert_eq(term_at(3), 3);
    cr_assert_eq(tk_raft_leader(R), 3);
}

Test(raft_log, matching_entries_are_kept_and_a_short_append_does_not_truncate)
{
    log_1222();
    /* A delayed copy of an earlier append: entries 2-3 already there. */
    struct tk_raft_entry e[2] = {ent(2, 2, TK_RAFT_NOOP, 100), ent(3, 2, TK_RAFT_DATA, 100)};
    append(2, 2, 1, 1, 3, e, 2);
    cr_assert_eq(reply()->append_reply.index, 3, "acknowledges only what the message covers");
    cr_assert_eq(tk_raft_last_index(R), 4);
    cr_assert_eq(tk_raft_commit(R), 3, "commit = min(leader commit, last new entry)");
}

Test(raft_log, reject_carries_a_hint_past_the_conflicting_term)
{
    log_1222();
    append(3, 3, 4, 3, 1, NULL, 0);
    cr_assert_eq(reply()->append_reply.success, 0);
    cr_assert_eq(reply()->append_reply.index, 4);
    cr_assert_eq(reply()->append_reply.hint, 2, "first index of term 2 above commit");
    append(3, 3, 7, 3, 1, NULL, 0);
    cr_assert_eq(reply()->append_reply.success, 0);
    cr_assert_eq(reply()->append_reply.hint, 5, "beyond the end: last + 1");
    cr_assert_eq(tk_raft_last_index(R), 4, "a reject changes nothing");
}

Test(raft_log, stale_leader_is_told_the_term)
{
    log_1222();
    append(3, 3, 4, 2, 1, NULL, 0);
    cr_assert_eq(tk_raft_term(R), 3);
    append(2, 2, 4, 2, 4, NULL, 0);
    cr_assert_eq(reply()->term, 3);
    cr_assert_eq(reply()->append_reply.success, 0);
    cr_assert_eq(tk_raft_commit(R), 1, "a stale leader's commit is ignored");
    cr_assert_eq(tk_raft_leader(R), 3);
    /* Only the term: node 2 may lead term 3 by the time this arrives, and
     * an index or round of its old leadership would read as this term's
     * (a round it never sent: refused as invalid). */
    struct tk_raft_msg m;
    memset(&m, 0, sizeof(m));
    m.type = TK_RAFT_MSG_APPEND;
    m.from = 2;
    m.to = 1;
    m.term = 2;
    m.append.prev_index = 4;
    m.append.prev_term = 2;
    m.append.seq = 7;
    tk_raft_receive(R, &m, NOW, &U);
    cr_assert_eq(reply()->term, 3);
    cr_assert_eq(reply()->append_reply.seq, 0);
    cr_assert_eq(reply()->append_reply.index, 0);
}

Test(raft_log, invalid_appends_are_dropped)
{
    log_1222();
    uint64_t invalid = tk_raft_metrics(R)->messages_invalid;
    struct tk_raft_entry down[2] = {ent(5, 2, TK_RAFT_DATA, 102), ent(6, 1, TK_RAFT_DATA, 103)};
    append(2, 2, 4, 2, 1, down, 2); /* term goes down */
    struct tk_raft_entry ok5 = ent(5, 2, TK_RAFT_DATA, 102);
    struct tk_raft_entry back[2] = {ok5, ent(6, 2, TK_RAFT_DATA, 102)}; /* token reused */
    append(2, 2, 4, 2, 1, back, 2);
    struct tk_raft_entry future[1] = {ent(5, 9, TK_RAFT_DATA, 102)}; /* term above message */
    append(2, 2, 4, 2, 1, future, 1);
    struct tk_raft_entry gap[1] = {ent(7, 2, TK_RAFT_DATA, 102)}; /* index not prev + 1 */
    append(2, 2, 4, 2, 1, gap, 1);
    struct tk_raft_config other = CFG;
    other.domain_lo = 0xbad;
    uint8_t buf[TK_RAFT_CONFIG_ENCODED_MAX];
    struct tk_raft_entry dom = ent(5, 2, TK_RAFT_CONFIG, 102);
    dom.len = (uint32_t)tk_raft_config_encode(&other, buf, sizeof(buf));
    dom.data = buf;
    append(2, 2, 4, 2, 1, &dom, 1); /* another domain's config */
    struct tk_raft_entry noop_tokens = ent(5, 2, TK_RAFT_NOOP, 102);
    noop_tokens.token_count = 3;
    append(2, 2, 4, 2, 1, &noop_tokens, 1);
    cr_assert_eq(tk_raft_metrics(R)->messages_invalid, invalid + 6);
    cr_assert_eq(tk_raft_last_index(R), 4);
    cr_assert_eq(count_sent(TK_RAFT_MSG_APPEND_REPLY), 0);
}

Test(raft_log, a_leader_that_contradicts_a_committed_entry_is_refused)
{
    log_1222();
    append(2, 2, 4, 2, 3, NULL, 0);
    cr_assert_eq(tk_raft_commit(R), 3);
    /* A leader that disagrees with a committed entry has a bug: its
     * message is refused (not unapplied, and the node does not crash). */
    uint64_t invalid = tk_raft_metrics(R)->messages_invalid;
    struct tk_raft_entry e = ent(3, 3, TK_RAFT_DATA, 100);
    cr_assert_eq(append(3, 3, 2, 2, 3, &e, 1), TK_EPROTO);
    cr_assert_eq(tk_raft_term(R), 2, "not even its term is taken");
    cr_assert_eq(tk_raft_leader(R), 2);
    cr_assert_eq(term_at(3), 2);
    cr_assert_eq(tk_raft_last_index(R), 4);
    cr_assert_eq(tk_raft_metrics(R)->messages_invalid, invalid + 1);
    cr_assert_eq(count_sent(TK_RAFT_MSG_APPEND_REPLY), 0);
    /* Same through a prev_term that differs at a committed index. */
    cr_assert_eq(append(3, 3, 3, 1, 3, NULL, 0), TK_EPROTO);
    cr_assert_eq(tk_raft_term(R), 2);
    cr_assert_eq(tk_raft_metrics(R)->messages_invalid, invalid + 2);
    /* An uncommitted suffix is still replaced as usual. */
    struct tk_raft_entry f = ent(4, 3, TK_RAFT_DATA, 101);
    cr_assert_eq(append(3, 3, 3, 2, 3, &f, 1), TK_OK);
    cr_assert_eq(term_at(4), 3);
}

Test(raft_log, a_second_leader_in_one_term_is_refused)
{
    log_1222();
    uint64_t invalid = tk_raft_metrics(R)->messages_invalid;
    /* Term 2 has leader 2 already. */
    cr_assert_eq(append(3, 2, 4, 2, 1, NULL, 0), TK_EPROTO);
    cr_assert_eq(tk_raft_leader(R), 2);
    cr_assert_eq(count_sent(TK_RAFT_MSG_APPEND_REPLY), 0);
    CHUNK_FROM = 3;
    CHUNK_TERM = 2;
    static const uint8_t blob[4] = "abcd";
    chunk(0, blob, 4, 4);
    cr_assert_eq(tk_raft_commit(R), 1, "no snapshot from a second leader");
    cr_assert_eq(count_sent(TK_RAFT_MSG_SNAPSHOT_REPLY), 0);
    cr_assert_eq(tk_raft_metrics(R)->messages_invalid, invalid + 2);
    cr_assert_eq(append(2, 2, 4, 2, 1, NULL, 0), TK_OK, "the real one goes on");
}

/* A granted (pre-)vote for term 3 from `from`. */
static void grant_t3(uint64_t from, bool pre)
{
    struct tk_raft_msg v;
    memset(&v, 0, sizeof(v));
    v.type = TK_RAFT_MSG_VOTE_REPLY;
    v.from = from;
    v.term = 3;
    v.vote_reply.pre = pre;
    v.vote_reply.granted = 1;
    tk_raft_receive(R, &v, NOW, &U);
}

/* Makes node 1 leader of term 3 over log [1:t1, 2:t2] (Figure 8 setup). */
static void become_leader_t3(void)
{
    struct tk_raft_entry e1 = ent(1, 1, TK_RAFT_CONFIG, 100);
    append(5, 1, 0, 0, 0, &e1, 1);
    struct tk_raft_entry e2 = ent(2, 2, TK_RAFT_DATA, 100);
    append(2, 2, 1, 1, 1, &e2, 1);
    cr_assert_eq(tk_raft_commit(R), 1);
    NOW += 3 * SEC;
    tk_raft_tick(R, NOW, &U);
    cr_assert_eq(tk_raft_role(R), TK_RAFT_PRECANDIDATE);
    cr_assert_eq(count_sent(TK_RAFT_MSG_PREVOTE), 4);
    cr_assert_eq(sent(TK_RAFT_MSG_PREVOTE, 2)->term, 3);
    cr_assert_eq(tk_raft_term(R), 2, "a pre-vote does not raise the term");
    grant_t3(2, true);
    grant_t3(3, true);
    cr_assert_eq(tk_raft_role(R), TK_RAFT_CANDIDATE);
    cr_assert_eq(tk_raft_term(R), 3);
    cr_assert_eq(count_sent(TK_RAFT_MSG_VOTE), 4);
    grant_t3(2, false);
    grant_t3(2, false); /* a duplicate counts once */
    cr_assert_eq(tk_raft_role(R), TK_RAFT_CANDIDATE);
    grant_t3(3, false);
    cr_assert_eq(tk_raft_role(R), TK_RAFT_LEADER);
    cr_assert_eq(tk_raft_last_index(R), 3);
    cr_assert_eq(tk_raft_entry(R, 3)->type, TK_RAFT_NOOP);
    cr_assert_eq(tk_raft_entry(R, 3)->term, 3);
}

static void ack(uint64_t from, uint64_t index)
{
    struct tk_raft_msg m;
    memset(&m, 0, sizeof(m));
    m.type = TK_RAFT_MSG_APPEND_REPLY;
    m.from = from;
    m.term = tk_raft_term(R);
    m.append_reply.success = 1;
    m.append_reply.index = index;
    tk_raft_receive(R, &m, NOW, &U);
}

static int snap_reply(uint64_t from, uint64_t index, uint64_t offset, bool done)
{
    struct tk_raft_msg m;
    memset(&m, 0, sizeof(m));
    m.type = TK_RAFT_MSG_SNAPSHOT_REPLY;
    m.from = from;
    m.term = tk_raft_term(R);
    m.snapshot_reply.index = index;
    m.snapshot_reply.offset = offset;
    m.snapshot_reply.done = done;
    return tk_raft_receive(R, &m, NOW, &U);
}

Test(raft_log, figure8_old_term_entries_commit_only_with_the_current_term)
{
    become_leader_t3();
    /* Entry 2 (term 2) reaches a majority: 1, 2 and 3. */
    ack(2, 2);
    ack(3, 2);
    cr_assert_eq(tk_raft_commit(R), 1, "never commit an old-term entry by counting");
    ack(2, 3);
    cr_assert_eq(tk_raft_commit(R), 1, "entry 3 is on 2 of 5 only");
    ack(3, 3);
    cr_assert_eq(tk_raft_commit(R), 3, "the NOOP commits, and entry 2 with it");
    cr_assert(U.flags & TK_RAFT_UPDATE_COMMIT);
    cr_assert_eq(U.commit, 3);
}

/* A snapshot holds committed entries only: "done" for an index past the
 * leader's commit was never sent and must not count as a match (two such
 * replies would otherwise commit the NOOP that no follower holds). */
Test(raft_log, snapshot_done_past_the_commit_is_refused)
{
    become_leader_t3();
    uint64_t invalid = tk_raft_metrics(R)->messages_invalid;
    for (uint64_t from = 2; from <= 3; from++)
        cr_assert_eq(snap_reply(from, 3, 0, true), TK_EPROTO);
    cr_assert_eq(tk_raft_commit(R), 1, "committed on forged matches");
    cr_assert_eq(tk_raft_metrics(R)->messages_invalid, invalid + 2);
    /* Entries the followers really hold still commit the NOOP. */
    ack(2, 3);
    ack(3, 3);
    cr_assert_eq(tk_raft_commit(R), 3);
}

Test(raft_log, snapshot_done_never_sent_is_refused)
{
    become_leader_t3();
    ack(2, 3);
    ack(3, 3);
    cr_assert_eq(tk_raft_commit(R), 3);
    /* Member 4 was never sent a snapshot: a "done" inside the commit is
     * still a claim nothing backs, and must not raise its match. */
    cr_assert_eq(snap_reply(4, 3, 0, true), TK_EPROTO);
    struct tk_raft_status st;
    tk_raft_status(R, &st);
    for (uint32_t i = 0; i < st.n_members; i++)
        if (st.members[i].id == 4)
            cr_assert_eq(st.members[i].match, 0, "match raised by a forged done");
}

Test(raft_log, leader_pipelines_and_falls_back_on_reject)
{
    become_leader_t3();
    ack(2, 3);
    /* Follower 2 replicates: a proposal goes out at once with entries. */
    uint8_t d[8] = {0};
    cr_assert_eq(tk_raft_propose(R, d, 8, tk_raft_next_token(R), 2, NOW, &U), TK_OK);
    const struct tk_raft_msg *a = sent(TK_RAFT_MSG_APPEND, 2);
    cr_assert_not_null(a);
    cr_assert_eq(a->append.prev_index, 3);
    cr_assert_eq(a->append.n, 1);
    cr_assert_eq(a->append.entries[0].index, 4);
    cr_assert_eq(a->append.entries[0].token_count, 2);
    cr_assert_eq(tk_raft_propose(R, d, 8, tk_raft_next_token(R), 0, NOW, &U), TK_OK);
    a = sent(TK_RAFT_MSG_APPEND, 2);
    cr_assert_eq(a->append.prev_index, 4, "pipelined: no wait for the first ack");
    /* A reject sends the leader back to probing from the hint. */
    struct tk_raft_msg m;
    memset(&m, 0, sizeof(m));
    m.type = TK_RAFT_MSG_APPEND_REPLY;
    m.from = 2;
    m.term = 3;
    m.append_reply.index = 4;
    m.append_reply.hint = 4;
    tk_raft_receive(R, &m, NOW, &U);
    a = sent(TK_RAFT_MSG_APPEND, 2);
    cr_assert_not_null(a);
    cr_assert_eq(a->append.prev_index, 3);
    cr_assert_eq(a->append.n, 2);
}

Test(raft_log, vote_once_per_term_and_only_for_up_to_date_logs)
{
    log_1222();
    NOW += SEC; /* the leader is silent past the election timeout */
    struct tk_raft_msg v;
    memset(&v, 0, sizeof(v));
    v.type = TK_RAFT_MSG_VOTE;
    v.from = 3;
    v.term = 5;
    v.vote.last_index = 3; /* shorter log, same last term */
    v.vote.last_term = 2;
    tk_raft_receive(R, &v, NOW, &U);
    cr_assert_eq(tk_raft_term(R), 5, "a higher term is adopted even without a vote");
    cr_assert_eq(sent(TK_RAFT_MSG_VOTE_REPLY, 3)->vote_reply.granted, 0);
    v.vote.last_index = 4;
    tk_raft_receive(R, &v, NOW, &U);
    cr_assert_eq(sent(TK_RAFT_MSG_VOTE_REPLY, 3)->vote_reply.granted, 1);
    v.from = 4;
    v.vote.last_term = 3;
    tk_raft_receive(R, &v, NOW, &U);
    cr_assert_eq(sent(TK_RAFT_MSG_VOTE_REPLY, 4)->vote_reply.granted, 0, "voted for 3 already");
    v.from = 3;
    tk_raft_receive(R, &v, NOW, &U);
    cr_assert_eq(sent(TK_RAFT_MSG_VOTE_REPLY, 3)->vote_reply.granted, 1, "the same again is fine");
}

Test(raft_log, leader_stickiness_and_prevote)
{
    log_1222();
    struct tk_raft_msg v;
    memset(&v, 0, sizeof(v));
    v.type = TK_RAFT_MSG_VOTE;
    v.from = 3;
    v.term = 5;
    v.vote.last_index = 9;
    v.vote.last_term = 4;
    /* Heard from leader 2 just now: ignore the vote, keep the term. */
    NOW += 100 * MS;
    tk_raft_receive(R, &v, NOW, &U);
    cr_assert_eq(tk_raft_term(R), 2);
    cr_assert_eq(U.n_msgs, 0);
    v.type = TK_RAFT_MSG_PREVOTE;
    tk_raft_receive(R, &v, NOW, &U);
    cr_assert_eq(U.n_msgs, 0, "no pre-vote while the leader is alive");
    /* ... unless the leader asked for it (TimeoutNow). */
    v.type = TK_RAFT_MSG_VOTE;
    v.vote.transfer = 1;
    tk_raft_receive(R, &v, NOW, &U);
    cr_assert_eq(tk_raft_term(R), 5);
    cr_assert_eq(sent(TK_RAFT_MSG_VOTE_REPLY, 3)->vote_reply.granted, 1);
}

/* A pre-vote from node 3 for term 3, its log ending at (last_index, 2). */
static struct tk_raft_msg prevote_from_3(uint64_t last_index)
{
    struct tk_raft_msg v;
    memset(&v, 0, sizeof(v));
    v.type = TK_RAFT_MSG_PREVOTE;
    v.from = 3;
    v.term = 3;
    v.vote.last_index = last_index;
    v.vote.last_term = 2;
    return v;
}

Test(raft_log, prevote_grants_without_changing_state)
{
    log_1222();
    NOW += SEC;
    struct tk_raft_msg v = prevote_from_3(4);
    tk_raft_receive(R, &v, NOW, &U);
    const struct tk_raft_msg *r = sent(TK_RAFT_MSG_VOTE_REPLY, 3);
    cr_assert_eq(r->vote_reply.pre, 1);
    cr_assert_eq(r->vote_reply.granted, 1);
    cr_assert_eq(r->term, 3, "answers in the term asked about");
    cr_assert_eq(tk_raft_term(R), 2);
    struct tk_raft_status st;
    tk_raft_status(R, &st);
    cr_assert_eq(st.voted_for, 0);
    v.vote.last_index = 3;
    tk_raft_receive(R, &v, NOW, &U);
    cr_assert_eq(sent(TK_RAFT_MSG_VOTE_REPLY, 3)->vote_reply.granted, 0, "log behind");
}

/* After a leader's crash, node 1 timed out first; its pre-vote reached a
 * voter whose clock still saw the leader and got no answer. That voter
 * times out in turn and asks node 1, whose log is longer: node 1 refuses
 * but asks again (once), instead of losing a whole election timeout. */
Test(raft_log, precandidate_asks_again_a_voter_that_lost_its_leader)
{
    log_1222();
    NOW += 3 * SEC;
    tk_raft_tick(R, NOW, &U);
    cr_assert_eq(tk_raft_role(R), TK_RAFT_PRECANDIDATE);
    struct tk_raft_msg v = prevote_from_3(3); /* behind node 1's 4 */
    tk_raft_receive(R, &v, NOW, &U);
    cr_assert_eq(sent(TK_RAFT_MSG_VOTE_REPLY, 3)->vote_reply.granted, 0);
    const struct tk_raft_msg *again = sent(TK_RAFT_MSG_PREVOTE, 3);
    cr_assert_not_null(again, "node 3 was not asked again");
    cr_assert_eq(again->term, 3);
    cr_assert_eq(again->vote.last_index, 4);
    cr_assert_eq(tk_raft_metrics(R)->prevotes_reasked, 1);
    /* Once per round: no ping-pong with a pre-candidate refusing back. */
    tk_raft_receive(R, &v, NOW, &U);
    cr_assert_null(sent(TK_RAFT_MSG_PREVOTE, 3));
    /* Its grant, with node 4's, makes a majority of 5: a real election. */
    grant_t3(3, true);
    grant_t3(4, true);
    cr_assert_eq(tk_raft_role(R), TK_RAFT_CANDIDATE);
    cr_assert_eq(tk_raft_term(R), 3);
}

/* A follower that refuses a pre-vote (log behind) asks nothing back: it
 * has no campaign of its own. A granted pre-vote is not asked back either. */
Test(raft_log, follower_refusing_a_prevote_asks_nothing)
{
    log_1222();
    NOW += SEC;
    struct tk_raft_msg v = prevote_from_3(3);
    tk_raft_receive(R, &v, NOW, &U);
    cr_assert_eq(sent(TK_RAFT_MSG_VOTE_REPLY, 3)->vote_reply.granted, 0);
    cr_assert_null(sent(TK_RAFT_MSG_PREVOTE, 0));
    NOW += 3 * SEC;
    tk_raft_tick(R, NOW, &U);
    cr_assert_eq(tk_raft_role(R), TK_RAFT_PRECANDIDATE);
    v.vote.last_index = 4;
    tk_raft_receive(R, &v, NOW, &U);
    cr_assert_eq(sent(TK_RAFT_MSG_VOTE_REPLY, 3)->vote_reply.granted, 1);
    cr_assert_null(sent(TK_RAFT_MSG_PREVOTE, 0));
    cr_assert_eq(tk_raft_metrics(R)->prevotes_reasked, 0);
}

static int chunk(uint64_t offset, const uint8_t *data, uint32_t len, uint64_t total)
{
    struct tk_raft_msg m;
    memset(&m, 0, sizeof(m));
    m.type = TK_RAFT_MSG_SNAPSHOT;
    m.from = CHUNK_FROM;
    m.term = CHUNK_TERM;
    m.snapshot.index = 50;
    m.snapshot.term = 3;
    m.snapshot.token_next = 5000;
    m.snapshot.total = total;
    m.snapshot.offset = offset;
    m.snapshot.age_ms = CHUNK_AGE_MS;
    m.snapshot.len = len;
    m.snapshot.data = data;
    m.snapshot.config = &CFG;
    return tk_raft_receive(R, &m, NOW, &U);
}

Test(raft_log, snapshot_chunks_assemble_in_order_and_install)
{
    log_1222();
    static const uint8_t blob[20] = "0123456789abcdefghij";
    chunk(8, blob + 8, 8, 20);
    const struct tk_raft_msg *r = sent(TK_RAFT_MSG_SNAPSHOT_REPLY, 2);
    cr_assert_eq(r->snapshot_reply.offset, 0, "out of order: start from 0");
    chunk(0, blob, 8, 20);
    cr_assert_eq(sent(TK_RAFT_MSG_SNAPSHOT_REPLY, 2)->snapshot_reply.offset, 8);
    chunk(0, blob, 8, 20); /* duplicate */
    cr_assert_eq(sent(TK_RAFT_MSG_SNAPSHOT_REPLY, 2)->snapshot_reply.offset, 8);
    chunk(8, blob + 8, 8, 20);
    cr_assert_eq(sent(TK_RAFT_MSG_SNAPSHOT_REPLY, 2)->snapshot_reply.offset, 16);
    cr_assert_eq(tk_raft_commit(R), 1);
    chunk(16, blob + 16, 4, 20);
    r = sent(TK_RAFT_MSG_SNAPSHOT_REPLY, 2);
    cr_assert_eq(r->snapshot_reply.done, 1);
    cr_assert(U.flags & TK_RAFT_UPDATE_SNAPSHOT_INSTALL);
    cr_assert_eq(U.install.index, 50);
    cr_assert_eq(U.install.term, 3);
    cr_assert_eq(U.install.token_next, 5000);
    cr_assert_eq(U.install.len, 20);
    cr_assert_eq(memcmp(U.install.data, blob, 20), 0);
    cr_assert_eq(tk_raft_commit(R), 50);
    cr_assert_eq(tk_raft_last_index(R), 50);
    cr_assert_null(tk_raft_entry(R, 4), "the old log is gone");
    cr_assert_eq(tk_raft_next_token(R), 5000);
    struct tk_raft_status st;
    tk_raft_status(R, &st);
    cr_assert_eq(st.applied, 50);
    cr_assert_eq(st.snapshot_index, 50);
    /* The log continues after the snapshot. */
    struct tk_raft_entry e = ent(51, 4, TK_RAFT_DATA, 5000);
    append(2, 4, 50, 3, 51, &e, 1);
    cr_assert_eq(reply()->append_reply.success, 1);
    cr_assert_eq(tk_raft_commit(R), 51);
    /* An older snapshot is acknowledged as covered. */
    chunk(0, blob, 8, 20);
    r = sent(TK_RAFT_MSG_SNAPSHOT_REPLY, 2);
    cr_assert_eq(r->snapshot_reply.done, 1);
    cr_assert_eq(tk_raft_metrics(R)->snapshots_installed, 1);
}

/* The install reports the age the last chunk carried (the leases in the
 * blob are that old), and the node counts its own copy's age from there. */
Test(raft_log, snapshot_install_carries_the_age_of_its_last_chunk)
{
    log_1222();
    static const uint8_t blob[20] = "0123456789abcdefghij";
    CHUNK_AGE_MS = 700;
    chunk(0, blob, 10, 20);
    cr_assert_eq(U.flags & TK_RAFT_UPDATE_SNAPSHOT_INSTALL, 0);
    NOW += 300 * MS;
    CHUNK_AGE_MS = 1000;
    chunk(10, blob + 10, 10, 20);
    CHUNK_AGE_MS = 0;
    cr_assert(U.flags & TK_RAFT_UPDATE_SNAPSHOT_INSTALL);
    cr_assert_eq(U.install.age_ms, 1000);
    cr_assert_eq(U.install.index, 50);
}

Test(raft_log, snapshot_chunks_of_another_leader_start_over)
{
    /* Found by sim_raft (seed 2806): two leaders' snapshots at the same
     * index and length but serialized differently must not be mixed. */
    log_1222();
    static const uint8_t a[16] = "AAAAAAAAaaaaaaaa";
    static const uint8_t b[16] = "BBBBBBBBbbbbbbbb";
    chunk(0, a, 8, 16);
    cr_assert_eq(sent(TK_RAFT_MSG_SNAPSHOT_REPLY, 2)->snapshot_reply.offset, 8);
    /* Leader 3 of term 5 sends its own blob for the same index. */
    CHUNK_FROM = 3;
    CHUNK_TERM = 5;
    chunk(8, b + 8, 8, 16);
    const struct tk_raft_msg *r = sent(TK_RAFT_MSG_SNAPSHOT_REPLY, 3);
    cr_assert_eq(r->snapshot_reply.offset, 0, "from the start, not from A's offset");
    cr_assert_eq(r->snapshot_reply.done, 0);
    chunk(0, b, 8, 16);
    chunk(8, b + 8, 8, 16);
    cr_assert(U.flags & TK_RAFT_UPDATE_SNAPSHOT_INSTALL);
    cr_assert_eq(memcmp(U.install.data, b, 16), 0);
}

Test(raft_log, snapshot_and_apply_bookkeeping)
{
    become_leader_t3();
    ack(2, 3);
    ack(3, 3);
    cr_assert_eq(tk_raft_commit(R), 3);
    cr_assert_eq(tk_raft_applied(R, 4, NOW, &U), TK_EINVAL, "beyond commit");
    cr_assert_eq(tk_raft_applied(R, 3, NOW, &U), TK_OK);
    uint8_t *blob = malloc(4);
    memcpy(blob, "snap", 4);
    cr_assert_eq(tk_raft_snapshot(R, 3, blob, 4, NOW, &U), TK_OK);
    struct tk_raft_status st;
    tk_raft_status(R, &st);
    cr_assert_eq(st.snapshot_index, 3);
    cr_assert_eq(st.snapshot_term, 3);
    blob = malloc(4);
    cr_assert_eq(tk_raft_snapshot(R, 3, blob, 4, NOW, &U), TK_EINVAL, "not newer");
}

Test(raft_log, bootstrap_only_on_a_fresh_node)
{
    struct tk_raft_config one = CFG;
    one.n = 1;
    cr_assert_eq(tk_raft_bootstrap(R, &one, 0, NOW, &U), TK_EINVAL, "token 0");
    cr_assert_eq(tk_raft_bootstrap(R, &one, 777, NOW, &U), TK_OK);
    cr_assert_eq(U.index, 1);
    cr_assert_eq(tk_raft_role(R), TK_RAFT_LEADER);
    cr_assert_eq(tk_raft_commit(R), 2);
    cr_assert_eq(tk_raft_entry(R, 1)->token_first, 777);
    cr_assert_eq(tk_raft_entry(R, 2)->token_first, 777);
    cr_assert_eq(tk_raft_next_token(R), 777);
    cr_assert_eq(tk_raft_bootstrap(R, &one, 777, NOW, &U), TK_EINVAL, "twice");
    struct tk_raft_config other = CFG;
    other.m[0].id = 9;
    other.n = 3;
    struct tk_raft_options o;
    tk_raft_options_default(&o, 1, 1);
    struct tk_raft *r2 = tk_raft_create(&o);
    cr_assert_eq(tk_raft_bootstrap(r2, &other, 777, NOW, &U), TK_EINVAL, "not a member");
    tk_raft_destroy(r2);
}

static bool vote_granted(uint64_t from, uint64_t term)
{
    struct tk_raft_msg v = {.type = TK_RAFT_MSG_VOTE, .from = from, .to = 1, .term = term};
    cr_assert_eq(tk_raft_receive(R, &v, NOW, &U), TK_OK);
    for (uint32_t i = 0; i < U.n_msgs; i++)
        if (U.msgs[i].type == TK_RAFT_MSG_VOTE_REPLY && U.msgs[i].to == from)
            return U.msgs[i].vote_reply.granted;
    cr_assert_fail("no vote reply");
    return false;
}

/* A partner that wrote entry 1 first may ask for this node's vote before
 * this node writes its own: the bootstrap still succeeds, in a later term
 * than the vote, and the vote stands. */
Test(raft_log, bootstrap_after_a_vote_keeps_the_term)
{
    cr_assert(vote_granted(2, 3));
    cr_assert(!vote_granted(3, 3), "one vote a term");
    cr_assert_eq(tk_raft_bootstrap(R, &CFG, 777, NOW, &U), TK_OK);
    cr_assert_eq(U.index, 1);
    cr_assert_eq(tk_raft_term(R), 4, "campaigns past the term it voted in");
    cr_assert_eq(tk_raft_role(R), TK_RAFT_CANDIDATE);
    cr_assert_eq(tk_raft_entry(R, 1)->term, 1);
    cr_assert_eq(tk_raft_bootstrap(R, &CFG, 777, NOW, &U), TK_EINVAL, "twice");
}

Test(raft_log, config_checks)
{
    struct tk_raft_config c = CFG;
    cr_assert_eq(tk_raft_config_check(&c), TK_OK);
    c.m[1].id = c.m[0].id;
    cr_assert_eq(tk_raft_config_check(&c), TK_EINVAL, "duplicate id");
    c = CFG;
    c.m[2].peer_addr[0] = '\0';
    cr_assert_eq(tk_raft_config_check(&c), TK_EINVAL, "empty address");
    c = CFG;
    c.m[2].client_addr[1] = ' ';
    cr_assert_eq(tk_raft_config_check(&c), TK_EINVAL, "space in address");
    c = CFG;
    for (uint32_t i = 0; i < c.n; i++)
        c.m[i].role = TK_RAFT_LEARNER;
    cr_assert_eq(tk_raft_config_check(&c), TK_EINVAL, "no voter");
    c = CFG;
    c.n = 0;
    cr_assert_eq(tk_raft_config_check(&c), TK_EINVAL);
    /* Round trip and truncation. */
    struct tk_raft_config d;
    size_t used = 0;
    cr_assert_eq(tk_raft_config_decode(CFG_BUF, CFG_LEN, &d, &used), TK_OK);
    cr_assert_eq(used, CFG_LEN);
    cr_assert_eq(d.n, 5);
    cr_assert_str_eq(d.m[4].peer_addr, "n5:7401");
    for (uint32_t n = 0; n < CFG_LEN; n++)
        cr_assert_eq(tk_raft_config_decode(CFG_BUF, n, &d, &used), TK_EPROTO);
}

static uint32_t appends_to(uint64_t to)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < U.n_msgs; i++)
        k += U.msgs[i].type == TK_RAFT_MSG_APPEND && U.msgs[i].to == to;
    return k;
}

/* Of five voters a commit needs the leader and two followers: those two get
 * each entry at once, the other two what accumulated once per
 * lazy_replicate_us. A quiet eager follower is replaced by one that has
 * acknowledged more. */
Test(raft_log, followers_beyond_a_quorum_get_entries_in_batches)
{
    become_leader_t3();
    for (uint64_t f = 2; f <= 5; f++)
        ack(f, 3);
    uint8_t d[8] = {0};
    cr_assert_eq(tk_raft_propose(R, d, 8, tk_raft_next_token(R), 1, NOW, &U), TK_OK);
    cr_assert_eq(appends_to(2) + appends_to(3) + appends_to(4) + appends_to(5), 2,
                 "two followers get the entry at once");
    uint64_t eager[2], n_eager = 0, lazy[2], n_lazy = 0;
    for (uint64_t f = 2; f <= 5; f++) {
        if (appends_to(f))
            eager[n_eager++] = f;
        else
            lazy[n_lazy++] = f;
    }
    cr_assert_eq(n_eager, 2);
    cr_assert_eq(tk_raft_propose(R, d, 8, tk_raft_next_token(R), 1, NOW, &U), TK_OK);
    cr_assert_eq(appends_to(lazy[0]) + appends_to(lazy[1]), 0);
    ack(eager[0], 5);
    ack(eager[1], 5);
    cr_assert_eq(tk_raft_commit(R), 5, "the two eager followers and the leader commit");
    cr_assert_leq(tk_raft_deadline(R), NOW + 1 * MS, "the others' turn is a deadline");
    NOW += 1 * MS;
    tk_raft_tick(R, NOW, &U);
    for (int i = 0; i < 2; i++) {
        const struct tk_raft_msg *a = sent(TK_RAFT_MSG_APPEND, lazy[i]);
        cr_assert_not_null(a, "follower %llu gets its batch", (unsigned long long)lazy[i]);
        cr_assert_eq(a->append.prev_index, 3);
        cr_assert_eq(a->append.n, 2, "both entries in one Append");
    }
    /* eager[0] goes quiet; the lazy followers acknowledge more than it. */
    NOW += 1 * MS;
    cr_assert_eq(tk_raft_propose(R, d, 8, tk_raft_next_token(R), 1, NOW, &U), TK_OK);
    ack(eager[1], 6);
    NOW += 1 * MS;
    tk_raft_tick(R, NOW, &U);
    ack(lazy[0], 6);
    cr_assert_eq(tk_raft_propose(R, d, 8, tk_raft_next_token(R), 1, NOW, &U), TK_OK);
    cr_assert_eq(appends_to(lazy[0]), 1, "the follower that caught up is eager now");
    cr_assert_eq(appends_to(eager[0]), 0, "the quiet one is not");
    ack(lazy[0], 7);
    ack(eager[1], 7);
    cr_assert_eq(tk_raft_commit(R), 7);
}

/* With lazy_replicate_us 0 every follower gets every entry at once. */
Test(raft_log, lazy_replication_can_be_turned_off)
{
    tk_raft_destroy(R);
    struct tk_raft_options o = test_options();
    o.lazy_replicate_us = 0;
    R = tk_raft_create(&o);
    become_leader_t3();
    for (uint64_t f = 2; f <= 5; f++)
        ack(f, 3);
    uint8_t d[8] = {0};
    cr_assert_eq(tk_raft_propose(R, d, 8, tk_raft_next_token(R), 1, NOW, &U), TK_OK);
    cr_assert_eq(appends_to(2) + appends_to(3) + appends_to(4) + appends_to(5), 4);
}

Test(raft_log, inflight_bytes_bound_pauses_a_follower)
{
    tk_raft_destroy(R);
    struct tk_raft_options o = test_options();
    o.inflight_bytes_max = 4 * (100 + 64); /* four 100-byte entries */
    R = tk_raft_create(&o);
    become_leader_t3();
    ack(2, 3);
    uint8_t d[100] = {0};
    uint32_t sent_total = 0;
    for (int i = 0; i < 10; i++) {
        cr_assert_eq(tk_raft_propose(R, d, sizeof(d), tk_raft_next_token(R), 0, NOW, &U), TK_OK);
        sent_total += appends_to(2);
    }
    cr_assert_eq(sent_total, 4, "the bound stops the pipeline after four entries");
    ack(2, 7);
    cr_assert_eq(appends_to(2), 1);
    const struct tk_raft_msg *a = sent(TK_RAFT_MSG_APPEND, 2);
    cr_assert_eq(a->append.prev_index, 7);
    cr_assert_eq(a->append.n, 4, "an ack frees room for four more, in one message");
}

Test(raft_log, log_bound_refuses_proposals)
{
    tk_raft_destroy(R);
    struct tk_raft_options o;
    tk_raft_options_default(&o, 1, 99);
    o.log_entries_max = 8;
    R = tk_raft_create(&o);
    become_leader_t3(); /* 3 entries */
    int rv = TK_OK;
    uint32_t ok = 0;
    for (int i = 0; i < 10 && rv == TK_OK; i++) {
        rv = tk_raft_propose(R, NULL, 0, tk_raft_next_token(R), 0, NOW, &U);
        ok += rv == TK_OK;
    }
    cr_assert_eq(ok, 5);
    cr_assert_eq(rv, TK_EFULL);
    cr_assert_eq(tk_raft_metrics(R)->proposals_refused, 1);
}

Test(raft_log, snapshot_is_asked_for_past_the_threshold)
{
    tk_raft_destroy(R);
    struct tk_raft_options o;
    tk_raft_options_default(&o, 1, 99);
    o.snapshot_entries = 4;
    o.snapshot_trailing = 1;
    R = tk_raft_create(&o);
    become_leader_t3();
    for (int i = 0; i < 3; i++)
        tk_raft_propose(R, NULL, 0, tk_raft_next_token(R), 0, NOW, &U);
    ack(2, 6);
    ack(3, 6);
    cr_assert_eq(tk_raft_commit(R), 6);
    tk_raft_applied(R, 3, NOW, &U);
    cr_assert_eq(U.flags & TK_RAFT_UPDATE_SNAPSHOT_WANTED, 0, "3 applied entries: not yet");
    tk_raft_applied(R, 6, NOW, &U);
    cr_assert(U.flags & TK_RAFT_UPDATE_SNAPSHOT_WANTED);
    cr_assert_eq(U.snapshot_index, 6);
    tk_raft_tick(R, NOW, &U);
    cr_assert_eq(U.flags & TK_RAFT_UPDATE_SNAPSHOT_WANTED, 0, "asked once per applied index");
    uint8_t *blob = malloc(3);
    memcpy(blob, "abc", 3);
    cr_assert_eq(tk_raft_snapshot(R, 6, blob, 3, NOW, &U), TK_OK);
    struct tk_raft_status st;
    tk_raft_status(R, &st);
    cr_assert_eq(st.snapshot_index, 6);
    cr_assert_eq(st.first_index, 6, "one trailing entry kept");
    cr_assert_null(tk_raft_entry(R, 5));
    cr_assert_not_null(tk_raft_entry(R, 6));
}

Test(raft_log, config_entry_takes_effect_when_appended_and_reverts_when_truncated)
{
    log_1222();
    struct tk_raft_config six = CFG;
    struct tk_raft_member *m = &six.m[six.n++];
    m->id = 6;
    m->role = TK_RAFT_LEARNER;
    strcpy(m->peer_addr, "n6:7401");
    strcpy(m->client_addr, "n6:7400");
    uint8_t buf[TK_RAFT_CONFIG_ENCODED_MAX];
    struct tk_raft_entry e = ent(5, 2, TK_RAFT_CONFIG, 102);
    e.data = buf;
    e.len = (uint32_t)tk_raft_config_encode(&six, buf, sizeof(buf));
    append(2, 2, 4, 2, 1, &e, 1);
    cr_assert(U.flags & TK_RAFT_UPDATE_CONFIG);
    cr_assert_eq(tk_raft_config(R)->n, 6, "in effect once appended, not committed");
    cr_assert_not_null(tk_raft_config_find(tk_raft_config(R), 6));
    /* A new leader never had it: the entry goes, the old config returns. */
    struct tk_raft_entry f = ent(5, 3, TK_RAFT_NOOP, 102);
    append(3, 3, 4, 2, 1, &f, 1);
    cr_assert(U.flags & TK_RAFT_UPDATE_CONFIG);
    cr_assert_eq(tk_raft_config(R)->n, 5);
    cr_assert_null(tk_raft_config_find(tk_raft_config(R), 6));
}

Test(raft_log, learners_do_not_count_toward_commit)
{
    become_leader_t3();
    ack(2, 3);
    ack(3, 3);
    cr_assert_eq(tk_raft_commit(R), 3);
    struct tk_raft_member l6 = {.id = 6, .role = TK_RAFT_VOTER};
    strcpy(l6.peer_addr, "n6:7401");
    strcpy(l6.client_addr, "n6:7400");
    cr_assert_eq(tk_raft_change(R, TK_RAFT_ADD_LEARNER, &l6, NOW, &U), TK_OK);
    cr_assert_eq(U.index, 4);
    cr_assert_eq(tk_raft_config(R)->m[5].role, TK_RAFT_LEARNER, "added as learner whatever asked");
    cr_assert_not_null(sent(TK_RAFT_MSG_APPEND, 6), "learners are replicated to");
    ack(6, 4);
    ack(2, 4);
    cr_assert_eq(tk_raft_commit(R), 3, "leader + 2 + learner are not 3 of 5 voters");
    ack(3, 4);
    cr_assert_eq(tk_raft_commit(R), 4);
    /* Promote needs the learner caught up to commit. */
    cr_assert_eq(tk_raft_change(R, TK_RAFT_PROMOTE, &l6, NOW, &U), TK_OK);
    cr_assert_eq(tk_raft_config_voters(tk_raft_config(R)), 6);
}

Test(raft_log, an_entry_whose_token_goes_back_is_refused_and_one_that_raises_the_counter_is_taken)
{
    log_1222(); /* counter after entry 4: 102 */
    struct tk_raft_entry back = ent(5, 2, TK_RAFT_DATA, 101);
    cr_assert_eq(append(2, 2, 4, 2, 1, &back, 1), TK_EPROTO);
    cr_assert_eq(tk_raft_last_index(R), 4);
    cr_assert_eq(count_sent(TK_RAFT_MSG_APPEND_REPLY), 0, "refused whole, not acknowledged");
    cr_assert_eq(tk_raft_metrics(R)->messages_invalid, 1);
    /* Above the counter: a claim of moved slots raised it (SPEC 15). */
    struct tk_raft_entry raise = ent(5, 2, TK_RAFT_DATA, 5000);
    cr_assert_eq(append(2, 2, 4, 2, 1, &raise, 1), TK_OK);
    cr_assert_eq(tk_raft_next_token(R), 5000 + raise.token_count);
    cr_assert_eq(reply()->append_reply.index, 5);
}

/* ------------------------------------------------------------------ */
/* The leader's window of snapshot chunks                              */

/* The Snapshot messages to `to` in the last update, in order. */
static uint32_t chunks_to(uint64_t to, const struct tk_raft_msg **out, uint32_t cap)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < U.n_msgs; i++)
        if (U.msgs[i].type == TK_RAFT_MSG_SNAPSHOT && U.msgs[i].to == to && k < cap)
            out[k++] = &U.msgs[i];
    return k;
}

/* Commits and applies one more entry, then hands a `len`-byte snapshot. */
static void leader_snapshot(size_t len)
{
    uint8_t d[4] = {0};
    cr_assert_eq(tk_raft_propose(R, d, 4, tk_raft_next_token(R), 0, NOW, &U), TK_OK);
    uint64_t last = tk_raft_last_index(R);
    ack(2, last);
    ack(3, last);
    cr_assert_eq(tk_raft_commit(R), last);
    cr_assert_eq(tk_raft_applied(R, last, NOW, &U), TK_OK);
    uint8_t *blob = malloc(len);
    for (size_t i = 0; i < len; i++)
        blob[i] = (uint8_t)(last + i);
    cr_assert_eq(tk_raft_snapshot(R, last, blob, len, NOW, &U), TK_OK);
}

Test(raft_log, snapshot_chunks_are_pipelined_and_resent_from_the_acknowledged_offset)
{
    tk_raft_destroy(R);
    struct tk_raft_options o = test_options();
    o.snapshot_chunk_bytes = 10;
    o.inflight_bytes_max = 40; /* a window of four chunks */
    o.snapshot_trailing = 0;
    R = tk_raft_create(&o);
    become_leader_t3();
    leader_snapshot(100); /* snapshot 4 */
    uint64_t cut = NOW;
    /* Follower 4 never answered the leader's first Append (prev 2): it
     * says it has nothing, and the entries it needs are gone. */
    struct tk_raft_msg rej;
    memset(&rej, 0, sizeof(rej));
    rej.type = TK_RAFT_MSG_APPEND_REPLY;
    rej.from = 4;
    rej.term = 3;
    rej.append_reply.index = 2;
    rej.append_reply.hint = 1;
    cr_assert_eq(tk_raft_receive(R, &rej, NOW, &U), TK_OK);
    const struct tk_raft_msg *c[16];
    cr_assert_eq(chunks_to(4, c, 16), 4, "a window of chunks, not one");
    for (uint32_t i = 0; i < 4; i++) {
        cr_assert_eq(c[i]->snapshot.index, 4);
        cr_assert_eq(c[i]->snapshot.offset, 10 * i);
        cr_assert_eq(c[i]->snapshot.len, 10);
        cr_assert_eq(c[i]->snapshot.total, 100);
        cr_assert_eq(c[i]->snapshot.data[0], (uint8_t)(4 + 10 * i));
    }
    /* Each ack slides the window; a lost ack is covered by the next. */
    snap_reply(4, 4, 10, false);
    cr_assert_eq(chunks_to(4, c, 16), 1);
    cr_assert_eq(c[0]->snapshot.offset, 40);
    snap_reply(4, 4, 30, false);
    cr_assert_eq(chunks_to(4, c, 16), 2);
    cr_assert_eq(c[0]->snapshot.offset, 50);
    cr_assert_eq(c[1]->snapshot.offset, 60);
    /* A stale ack changes nothing. */
    snap_reply(4, 4, 20, false);
    cr_assert_eq(chunks_to(4, c, 16), 0);
    /* The follower stays at 30 while chunks after it arrive: the chunk at
     * 30 was lost (or comes late), and it dropped the ones after it. */
    snap_reply(4, 4, 30, false);
    cr_assert_eq(chunks_to(4, c, 16), 4, "the window again, from 30");
    cr_assert_eq(c[0]->snapshot.offset, 30);
    cr_assert_eq(c[3]->snapshot.offset, 60);
    snap_reply(4, 4, 30, false);
    cr_assert_eq(chunks_to(4, c, 16), 0, "once per timeout");
    snap_reply(4, 4, 40, false);
    cr_assert_eq(chunks_to(4, c, 16), 1);
    cr_assert_eq(c[0]->snapshot.offset, 70);
    /* Another gap within the timeout: that one chunk, once. */
    snap_reply(4, 4, 40, false);
    cr_assert_eq(chunks_to(4, c, 16), 1, "the missing chunk again, alone");
    cr_assert_eq(c[0]->snapshot.offset, 40);
    cr_assert_eq(c[0]->snapshot.len, 10);
    snap_reply(4, 4, 40, false);
    cr_assert_eq(chunks_to(4, c, 16), 0, "once per offset");
    uint64_t resends = tk_raft_metrics(R)->snapshot_resends;
    cr_assert_eq(resends, 2);
    /* No ack moves the window for a resend timeout: the whole window again. */
    NOW += 20 * MS;
    tk_raft_tick(R, NOW, &U);
    cr_assert_eq(chunks_to(4, c, 16), 4);
    /* Each chunk says how old the leases in the blob are by now. */
    for (uint32_t i = 0; i < 4; i++)
        cr_assert_eq(c[i]->snapshot.age_ms, (NOW - cut) / 1000, "age %u", c[i]->snapshot.age_ms);
    cr_assert_eq(c[0]->snapshot.offset, 40);
    cr_assert_eq(c[3]->snapshot.offset, 70);
    cr_assert_eq(tk_raft_metrics(R)->snapshot_resends, resends + 1);
    /* Waiting on acks, the follower still hears from the leader at every
     * heartbeat: an empty Append after the last entry compacted. */
    NOW += 10 * MS;
    tk_raft_tick(R, NOW, &U);
    cr_assert_eq(chunks_to(4, c, 16), 0, "the timeout doubled");
    const struct tk_raft_msg *hb = sent(TK_RAFT_MSG_APPEND, 4);
    cr_assert_not_null(hb);
    cr_assert_eq(hb->append.n, 0);
    cr_assert_eq(hb->append.prev_index, 4);
    cr_assert_eq(hb->append.prev_term, 3);
    /* Its reply (a reject: the follower has none of it) changes nothing. */
    struct tk_raft_msg hr;
    memset(&hr, 0, sizeof(hr));
    hr.type = TK_RAFT_MSG_APPEND_REPLY;
    hr.from = 4;
    hr.term = 3;
    hr.append_reply.index = 4;
    hr.append_reply.hint = 1;
    cr_assert_eq(tk_raft_receive(R, &hr, NOW, &U), TK_OK);
    cr_assert_eq(chunks_to(4, c, 16), 0);
    /* A newer snapshot does not restart the transfer: the old blob stays
     * pinned until the follower has it. */
    leader_snapshot(50); /* snapshot 5 */
    snap_reply(4, 4, 70, false);
    cr_assert_eq(chunks_to(4, c, 16), 2);
    for (uint32_t i = 0; i < 2; i++) {
        cr_assert_eq(c[i]->snapshot.index, 4);
        cr_assert_eq(c[i]->snapshot.offset, 80 + 10 * i);
        cr_assert_eq(c[i]->snapshot.data[0], (uint8_t)(4 + 80 + 10 * i), "the old bytes");
    }
    /* Acks of more than the blob holds are refused. */
    uint64_t invalid = tk_raft_metrics(R)->messages_invalid;
    cr_assert_eq(snap_reply(4, 4, 101, false), TK_EPROTO);
    cr_assert_eq(tk_raft_metrics(R)->messages_invalid, invalid + 1);
    cr_assert_eq(snap_reply(4, 99, 0, true), TK_EPROTO, "done beyond the log");
    cr_assert_eq(tk_raft_metrics(R)->messages_invalid, invalid + 2);
    /* Installed: the log kept what follows the snapshot the follower was
     * being sent (snapshot 5 came while it was pinned), so it goes on with
     * an Append of entry 5, not with a transfer of the newer snapshot. */
    cr_assert_eq(snap_reply(4, 4, 100, true), TK_OK);
    cr_assert_eq(tk_raft_metrics(R)->snapshots_sent, 1);
    cr_assert_eq(chunks_to(4, c, 16), 0, "no second transfer");
    const struct tk_raft_msg *ap = sent(TK_RAFT_MSG_APPEND, 4);
    cr_assert_not_null(ap);
    cr_assert_eq(ap->append.prev_index, 4);
    cr_assert_eq(ap->append.n, 1);
    ack(4, 5);
    struct tk_raft_status st;
    tk_raft_status(R, &st);
    cr_assert_eq(st.members[3].match, 5);
    cr_assert_eq(tk_raft_metrics(R)->snapshots_sent, 1);
}

/* ------------------------------------------------------------------ */
/* Log bounds after a snapshot                                         */

static uint8_t MIB[1u << 20];

/* A standalone leader with a small log bound. */
static void standalone(uint64_t log_entries_max, uint64_t log_bytes_max, uint64_t snapshot_bytes)
{
    tk_raft_destroy(R);
    struct tk_raft_options o;
    tk_raft_options_default(&o, 1, 99);
    o.log_entries_max = log_entries_max;
    o.log_bytes_max = log_bytes_max;
    o.snapshot_bytes = snapshot_bytes;
    R = tk_raft_create(&o);
    struct tk_raft_config one = CFG;
    one.n = 1;
    cr_assert_eq(tk_raft_bootstrap(R, &one, 777, NOW, &U), TK_OK);
    cr_assert_eq(tk_raft_commit(R), 2);
}

/* The driver's part: apply what committed, hand the snapshot asked for. */
static bool apply_and_snapshot(void)
{
    cr_assert_eq(tk_raft_applied(R, tk_raft_commit(R), NOW, &U), TK_OK);
    if (!(U.flags & TK_RAFT_UPDATE_SNAPSHOT_WANTED))
        return false;
    uint8_t *blob = malloc(8);
    memcpy(blob, "snapshot", 8);
    cr_assert_eq(tk_raft_snapshot(R, U.snapshot_index, blob, 8, NOW, &U), TK_OK);
    return true;
}

Test(raft_log, trailing_entries_are_bounded_in_bytes_so_a_full_log_shrinks)
{
    /* 1 MiB entries, an 8 MiB log: the default 1024 trailing entries would
     * keep all of them after a snapshot. */
    standalone(1u << 20, 8u << 20, 2u << 20);
    int rv = TK_OK;
    uint32_t ok = 0;
    while (rv == TK_OK && ok < 100) {
        rv = tk_raft_propose(R, MIB, sizeof(MIB), tk_raft_next_token(R), 1, NOW, &U);
        ok += rv == TK_OK;
    }
    cr_assert_eq(rv, TK_EFULL);
    cr_assert_eq(ok, 7, "7 MiB and the CONFIG entry: no room for another MiB");
    cr_assert(apply_and_snapshot(), "the core asks for a snapshot");
    struct tk_raft_status st;
    tk_raft_status(R, &st);
    cr_assert_eq(st.snapshot_index, st.last_index);
    cr_assert_leq(st.log_bytes, 2u << 20, "a quarter of the bound at most: %llu",
                  (unsigned long long)st.log_bytes);
    cr_assert_eq(tk_raft_propose(R, MIB, sizeof(MIB), tk_raft_next_token(R), 1, NOW, &U), TK_OK,
                 "proposals are accepted again");
    /* And for good, with the driver taking snapshots as asked. */
    for (int i = 0; i < 100; i++) {
        rv = tk_raft_propose(R, MIB, sizeof(MIB), tk_raft_next_token(R), 1, NOW, &U);
        cr_assert_eq(rv, TK_OK, "proposal %d: %s", i, tk_strerror(rv));
        apply_and_snapshot();
        tk_raft_status(R, &st);
        cr_assert_lt(st.log_bytes, 8u << 20);
    }
}

Test(raft_log, snapshots_are_asked_for_below_the_log_bounds)
{
    /* snapshot_bytes (64 MiB by default) above an 8 MiB log bound: the
     * core still asks in time, at half the bound. */
    standalone(1u << 20, 8u << 20, 64u << 20);
    uint32_t asked = 0;
    for (int i = 0; i < 40; i++) {
        int rv = tk_raft_propose(R, MIB, sizeof(MIB), tk_raft_next_token(R), 1, NOW, &U);
        cr_assert_eq(rv, TK_OK, "proposal %d: %s", i, tk_strerror(rv));
        asked += apply_and_snapshot();
    }
    cr_assert_geq(asked, 8);
    /* Likewise in entries: 8 entries at most, 1024 trailing by default. */
    standalone(8, 8u << 20, 64u << 20);
    asked = 0;
    for (int i = 0; i < 40; i++) {
        int rv = tk_raft_propose(R, NULL, 0, tk_raft_next_token(R), 0, NOW, &U);
        cr_assert_eq(rv, TK_OK, "proposal %d: %s", i, tk_strerror(rv));
        asked += apply_and_snapshot();
        struct tk_raft_status st;
        tk_raft_status(R, &st);
        cr_assert_leq(st.log_entries, 6);
    }
    cr_assert_geq(asked, 8);
}
