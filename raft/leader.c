/* Leader-only requests: proposals, membership changes, leadership
 * transfer, read barriers.
 *
 * Proposals (SPEC 7): the driver reads tk_raft_next_token(), numbers the
 * grants of its batch from it, and proposes with token_first equal to it
 * (or above it, to raise the counter for claimed slots, SPEC 15);
 * the leader appends the batch as one DATA entry whose tokens follow the
 * log's counter. A new leader's counter is the one after its last entry,
 * hence above every token in its log, committed or not.
 *
 * Membership (thesis §4.1-4.4, SPEC 10): one single-server change at a
 * time, only after the leader committed an entry of its own term (the fix
 * to the single-server bug Ongaro posted in 2015), and only once the
 * previous change committed. A learner is promoted only when it has
 * caught up to the commit index.
 *
 * Transfer (thesis §3.10): proposals stop, the target is brought up to
 * date, then gets TimeoutNow and campaigns at once; the transfer is
 * abandoned after an election timeout.
 *
 * Read barriers (thesis §6.4): a barrier gets the read index
 * max(commit, term_start_index) and the next heartbeat round; it is
 * confirmed when a majority of voters acknowledged an Append of that round
 * or later, which proves this node was still leader after the request.
 */
#include "raft/internal.h"

#include <stdlib.h>
#include <string.h>

int raft_propose(struct tk_raft *r, const struct tk_raft_event *ev, struct tk_raft_update *up)
{
    uint32_t len = ev->propose.len;
    if (r->role != TK_RAFT_LEADER || r->transfer_target != 0) {
        r->metrics.proposals_refused++;
        return TK_ENOTLEADER;
    }
    if (len > TK_RAFT_ENTRY_BYTES_MAX || (len > 0 && ev->propose.data == NULL))
        return TK_EINVAL;
    /* Above the counter only to raise it (a claimed slot range, SPEC 15). */
    if (ev->propose.token_first < raft_log_token_next(&r->log))
        return TK_EINVAL;
    if (ev->propose.token_first > UINT64_MAX - ev->propose.token_count)
        return TK_EINVAL;
    if (r->log.n >= r->opt.log_entries_max || r->log.bytes + len > r->opt.log_bytes_max) {
        r->metrics.proposals_refused++;
        return TK_EFULL;
    }
    uint8_t *data = NULL;
    if (len > 0) {
        data = malloc(len);
        if (data == NULL)
            return TK_ENOMEM;
        memcpy(data, ev->propose.data, len);
    }
    int rv = raft_leader_append(r, TK_RAFT_DATA, data, len, ev->propose.token_first,
                                ev->propose.token_count);
    if (rv != TK_OK) {
        free(data);
        return rv;
    }
    r->metrics.entries_proposed++;
    up->index = raft_log_last(&r->log);
    raft_leader_commit(r);
    return TK_OK;
}

static int change_config(struct tk_raft *r,
                         const struct tk_raft_event *ev,
                         struct tk_raft_config *c)
{
    const struct tk_raft_member *m = ev->change.member;
    if (m == NULL || m->id == 0)
        return TK_EINVAL;
    int slot = raft_member_slot(r, m->id);
    switch (ev->change.type) {
        case TK_RAFT_ADD_LEARNER:
            if (slot >= 0 || c->n == TK_RAFT_MEMBERS_MAX)
                return TK_EINVAL;
            c->m[c->n] = *m;
            c->m[c->n].role = TK_RAFT_LEARNER;
            c->n++;
            return TK_OK;
        case TK_RAFT_PROMOTE:
            if (slot < 0 || c->m[slot].role != TK_RAFT_LEARNER)
                return TK_EINVAL;
            if (r->prog[slot].match < r->commit)
                return TK_EFULL; /* not caught up yet */
            c->m[slot].role = TK_RAFT_VOTER;
            return TK_OK;
        case TK_RAFT_REMOVE:
            if (slot < 0 || m->id == r->id)
                return TK_EINVAL; /* transfer leadership first */
            /* slot >= 0, checked above: the cast keeps its value. */
            for (uint32_t i = (uint32_t)slot; i + 1 < c->n; i++)
                c->m[i] = c->m[i + 1];
            c->n--;
            return TK_OK;
        default:
            return TK_EINVAL;
    }
}

int raft_change(struct tk_raft *r, const struct tk_raft_event *ev, struct tk_raft_update *up)
{
    if (r->role != TK_RAFT_LEADER || r->transfer_target != 0)
        return TK_ENOTLEADER;
    /* An entry of this term must commit first, and the previous change. */
    if (r->commit < r->term_start_index || r->config_index > r->commit)
        return TK_EFULL;
    struct tk_raft_config c = r->config;
    int rv = change_config(r, ev, &c);
    if (rv != TK_OK)
        return rv;
    if (tk_raft_config_check(&c) != TK_OK)
        return TK_EINVAL;
    uint8_t *buf = malloc(TK_RAFT_CONFIG_ENCODED_MAX);
    if (buf == NULL)
        return TK_ENOMEM;
    size_t len = tk_raft_config_encode(&c, buf, TK_RAFT_CONFIG_ENCODED_MAX);
    TK_ASSERT(len > 0);
    /* len <= TK_RAFT_CONFIG_ENCODED_MAX (a few KiB): fits. */
    rv = raft_leader_append(r, TK_RAFT_CONFIG, buf, (uint32_t)len, 0, 0);
    if (rv != TK_OK) {
        free(buf);
        return rv;
    }
    up->index = raft_log_last(&r->log);
    /* A removal can shrink the quorum enough to commit at once. */
    raft_leader_commit(r);
    return TK_OK;
}

int raft_transfer(struct tk_raft *r, uint64_t target)
{
    if (r->role != TK_RAFT_LEADER)
        return TK_ENOTLEADER;
    if (target == 0) {
        /* The most up-to-date voter needs the shortest catch-up. */
        uint64_t best = 0;
        for (uint32_t i = 0; i < r->config.n; i++) {
            const struct tk_raft_member *m = &r->config.m[i];
            if (m->role != TK_RAFT_VOTER || m->id == r->id)
                continue;
            if (target == 0 || r->prog[i].match > best) {
                target = m->id;
                best = r->prog[i].match;
            }
        }
    }
    if (target == 0 || target == r->id || !tk_raft_config_is_voter(&r->config, target))
        return TK_EINVAL;
    r->transfer_target = target;
    r->transfer_deadline_us = r->now_us + r->opt.election_max_us;
    r->transfer_sent = false;
    raft_transfer_maybe_send(r, raft_member_slot(r, target));
    return TK_OK;
}

void raft_transfer_check(struct tk_raft *r)
{
    if (r->transfer_target != 0 && r->now_us >= r->transfer_deadline_us)
        r->transfer_target = 0; /* the target did not take over: lead on */
}

int raft_read(struct tk_raft *r, uint64_t id)
{
    if (r->role != TK_RAFT_LEADER)
        return TK_ENOTLEADER;
    if (r->reads_n == r->opt.reads_max)
        return TK_EFULL;
    uint32_t at = (r->reads_head + r->reads_n) % r->opt.reads_max;
    r->read_seq++;
    r->reads[at].id = id;
    r->reads[at].seq = r->read_seq;
    r->reads[at].index = TK_MAX(r->commit, r->term_start_index);
    r->reads_n++;
    r->read_round = true;
    return TK_OK;
}

/* The highest heartbeat round a majority of voters acknowledged. */
static uint64_t reads_acked_seq(const struct tk_raft *r)
{
    uint64_t acks[TK_RAFT_MEMBERS_MAX] = {0};
    uint32_t n = 0;
    for (uint32_t i = 0; i < r->config.n; i++) {
        if (r->config.m[i].role != TK_RAFT_VOTER)
            continue;
        acks[n++] = r->config.m[i].id == r->id ? r->read_seq : r->prog[i].ack_seq;
    }
    /* n is at most TK_RAFT_MEMBERS_MAX: a selection by insertion sort. */
    for (uint32_t i = 1; i < n; i++)
        for (uint32_t j = i; j > 0 && acks[j] > acks[j - 1]; j--) {
            uint64_t t = acks[j];
            acks[j] = acks[j - 1];
            acks[j - 1] = t;
        }
    TK_ASSERT(n >= raft_quorum(r));
    return acks[raft_quorum(r) - 1];
}

void raft_reads_confirm(struct tk_raft *r)
{
    if (r->role != TK_RAFT_LEADER || r->reads_n == 0)
        return;
    uint64_t acked = reads_acked_seq(r);
    while (r->reads_n > 0) {
        struct raft_read_pending *p = &r->reads[r->reads_head];
        if (p->seq > acked)
            break;
        raft_out_read(r, p->id, p->index, true);
        r->reads_head = (r->reads_head + 1) % r->opt.reads_max;
        r->reads_n--;
    }
}

void raft_reads_fail_all(struct tk_raft *r)
{
    while (r->reads_n > 0) {
        struct raft_read_pending *p = &r->reads[r->reads_head];
        raft_out_read(r, p->id, 0, false);
        r->reads_head = (r->reads_head + 1) % r->opt.reads_max;
        r->reads_n--;
    }
    r->reads_head = 0;
}
