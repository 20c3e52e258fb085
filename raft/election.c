/* Elections: pre-vote, vote, and TimeoutNow (leadership transfer).
 *
 * Pre-vote (thesis §9.6): before raising its term, a node asks whether a
 * majority would vote for it. A node grants a pre-vote only if it has not
 * heard from a leader within the minimum election timeout and the
 * candidate's log is at least as up-to-date as its own; nobody's term
 * changes. So a node that was partitioned away cannot disrupt a healthy
 * leader when it comes back: its pre-votes fail and its term stays put.
 *
 * Leader stickiness (thesis §4.2.3): a node that heard from a leader within
 * the minimum election timeout ignores RequestVote entirely (no term
 * update, no vote), unless the candidate was told to campaign by the
 * leader itself (TimeoutNow, thesis §3.10).
 *
 * Asking again: a pre-vote that reached a voter whose clock still showed a
 * live leader got no answer. When that voter later asks for a pre-vote
 * itself, its leader is gone too; a pre-candidate that refuses it (the
 * asker's log is behind) asks it once more rather than wait a whole
 * election timeout, which on a log that followers hold unevenly (batched
 * replication) would otherwise cost a second round after a leader's crash.
 *
 * Election Safety: one vote per term (voted_for), votes counted only from
 * voters of the candidate's configuration, a majority of them to win.
 */
#include "raft/internal.h"

#include <string.h>

static uint32_t votes_count(const struct tk_raft *r)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < r->config.n; i++)
        if (r->votes[i] && r->config.m[i].role == TK_RAFT_VOTER)
            n++;
    return n;
}

static void election_ask(struct tk_raft *r, uint64_t to, bool pre, bool transfer)
{
    struct tk_raft_msg *msg = raft_out_msg(r, pre ? TK_RAFT_MSG_PREVOTE : TK_RAFT_MSG_VOTE, to);
    if (msg == NULL)
        return;
    /* A pre-vote asks about the term it would campaign in. */
    msg->term = pre ? r->term + 1 : r->term;
    msg->vote.last_index = raft_log_last(&r->log);
    msg->vote.last_term = raft_log_last_term(&r->log);
    msg->vote.transfer = transfer;
}

static void election_send(struct tk_raft *r, bool pre, bool transfer)
{
    for (uint32_t i = 0; i < r->config.n; i++) {
        const struct tk_raft_member *m = &r->config.m[i];
        if (m->role == TK_RAFT_VOTER && m->id != r->id)
            election_ask(r, m->id, pre, transfer);
    }
}

/* A pre-candidate refused the pre-vote of `from`, a voter that has lost its
 * leader too: asks it again, once per round (two pre-candidates that refuse
 * each other for different reasons must not bounce forever). */
static void election_reask(struct tk_raft *r, uint64_t from)
{
    int slot = raft_member_slot(r, from);
    if (r->role != TK_RAFT_PRECANDIDATE || slot < 0 || r->config.m[slot].role != TK_RAFT_VOTER ||
        r->votes[slot] || r->reasked[slot])
        return;
    r->reasked[slot] = true;
    r->metrics.prevotes_reasked++;
    election_ask(r, from, true, false);
}

/* A won pre-vote leads straight into the real election; a won election
 * (a single voter wins on its own vote) into leadership. */
static void election_tally(struct tk_raft *r)
{
    if (votes_count(r) < raft_quorum(r))
        return;
    if (r->role == TK_RAFT_PRECANDIDATE)
        raft_election_start(r, false, false);
    else if (r->role == TK_RAFT_CANDIDATE)
        raft_become_leader(r);
}

void raft_election_start(struct tk_raft *r, bool pre, bool transfer)
{
    TK_ASSERT(r->has_config);
    TK_ASSERT(tk_raft_config_is_voter(&r->config, r->id));
    TK_ASSERT(r->role != TK_RAFT_LEADER);
    memset(r->votes, 0, sizeof(r->votes));
    memset(r->reasked, 0, sizeof(r->reasked));
    if (pre) {
        r->role = TK_RAFT_PRECANDIDATE;
        r->metrics.prevotes_started++;
    } else {
        r->role = TK_RAFT_CANDIDATE;
        r->term++;
        r->voted_for = r->id;
        r->metrics.elections_started++;
    }
    r->leader_id = 0;
    r->campaign_transfer = transfer;
    raft_reset_election_timer(r);
    int self = raft_member_slot(r, r->id);
    TK_ASSERT(self >= 0);
    r->votes[self] = true;
    election_send(r, pre, transfer);
    election_tally(r);
}

void raft_recv_vote(struct tk_raft *r, const struct tk_raft_msg *m)
{
    bool pre = m->type == TK_RAFT_MSG_PREVOTE;
    bool leader_recent =
        r->role == TK_RAFT_LEADER ||
        (r->leader_id != 0 && r->now_us < r->leader_heard_us + r->opt.election_min_us);
    if (m->term > r->term && !m->vote.transfer && leader_recent)
        return; /* stickiness: keep the term, grant nothing, say nothing */
    bool up_to_date = raft_log_up_to_date(r, m->vote.last_index, m->vote.last_term);
    bool granted = false;
    uint64_t reply_term = r->term;
    if (pre) {
        /* Nobody's state changes for a pre-vote. */
        if (m->term > r->term)
            granted = up_to_date;
        else if (m->term == r->term)
            granted = up_to_date && r->role != TK_RAFT_LEADER &&
                      (r->voted_for == 0 || r->voted_for == m->from);
        if (granted)
            reply_term = m->term;
    } else if (m->term >= r->term) {
        if (m->term > r->term)
            raft_become_follower(r, m->term, 0);
        reply_term = r->term;
        /* A leader or candidate of this term voted for itself already. */
        if ((r->voted_for == 0 || r->voted_for == m->from) && up_to_date) {
            r->voted_for = m->from;
            granted = true;
            raft_reset_election_timer(r);
        }
    }
    struct tk_raft_msg *reply = raft_out_msg(r, TK_RAFT_MSG_VOTE_REPLY, m->from);
    if (reply != NULL) {
        reply->term = reply_term;
        reply->vote_reply.pre = pre;
        reply->vote_reply.granted = granted;
    }
    if (pre && !granted)
        election_reask(r, m->from);
}

void raft_recv_vote_reply(struct tk_raft *r, const struct tk_raft_msg *m)
{
    if (!m->vote_reply.granted)
        return; /* a higher term in a refusal was handled by the dispatcher */
    if (m->vote_reply.pre) {
        if (r->role != TK_RAFT_PRECANDIDATE || m->term != r->term + 1)
            return;
    } else if (r->role != TK_RAFT_CANDIDATE || m->term != r->term) {
        return;
    }
    int slot = raft_member_slot(r, m->from);
    if (slot < 0 || r->config.m[slot].role != TK_RAFT_VOTER)
        return;
    r->votes[slot] = true;
    election_tally(r);
}

void raft_recv_timeout_now(struct tk_raft *r, const struct tk_raft_msg *m)
{
    /* Only the current leader may hand over leadership (thesis §3.10). */
    if (m->term != r->term || r->role == TK_RAFT_LEADER || r->leader_id != m->from)
        return;
    if (!r->has_config || !tk_raft_config_is_voter(&r->config, r->id))
        return;
    raft_election_start(r, false, true);
}
