/* Read-only views of the Raft core: queries for the driver, the status
 * behind /status, metrics, and the O(log) consistency check for tests.
 * None of these changes state; pointers they return follow the rule of
 * raft.h (valid until the next step).
 */
#include "raft/internal.h"

#include <string.h>

uint64_t tk_raft_next_token(const struct tk_raft *r)
{
    return raft_log_token_next(&r->log);
}

const struct tk_raft_entry *tk_raft_entry(const struct tk_raft *r, uint64_t index)
{
    return raft_log_get(&r->log, index);
}

uint64_t tk_raft_deadline(const struct tk_raft *r)
{
    if (r->role != TK_RAFT_LEADER)
        return r->election_deadline_us;
    uint64_t d = r->heartbeat_due_us;
    if (r->lazy_pending)
        d = TK_MIN(d, r->lazy_due_us);
    /* Check-quorum: the moment the quorum-th most recent voter contact
     * (this node counting as now) goes stale. A dead follower's old
     * contact alone does not make the leader tick in a loop. */
    uint64_t heard[TK_RAFT_MEMBERS_MAX] = {0};
    uint32_t n = 0;
    for (uint32_t i = 0; i < r->config.n; i++) {
        if (r->config.m[i].role != TK_RAFT_VOTER)
            continue;
        heard[n++] = r->config.m[i].id == r->id ? UINT64_MAX - r->opt.election_min_us
                                                : r->prog[i].last_heard_us;
    }
    for (uint32_t i = 1; i < n; i++)
        for (uint32_t j = i; j > 0 && heard[j] > heard[j - 1]; j--) {
            uint64_t t = heard[j];
            heard[j] = heard[j - 1];
            heard[j - 1] = t;
        }
    TK_ASSERT(n >= raft_quorum(r));
    d = TK_MIN(d, heard[raft_quorum(r) - 1] + r->opt.election_min_us);
    if (r->transfer_target != 0)
        d = TK_MIN(d, r->transfer_deadline_us);
    return d;
}

void tk_raft_status(const struct tk_raft *r, struct tk_raft_status *st)
{
    memset(st, 0, sizeof(*st));
    st->id = r->id;
    st->role = r->role;
    st->term = r->term;
    st->voted_for = r->voted_for;
    st->leader_id = r->leader_id;
    st->commit = r->commit;
    st->applied = r->applied;
    st->first_index = r->log.first;
    st->last_index = raft_log_last(&r->log);
    st->last_term = raft_log_last_term(&r->log);
    st->snapshot_index = r->snap.index;
    st->snapshot_term = r->snap.term;
    st->term_start_index = r->term_start_index;
    st->token_next = raft_log_token_next(&r->log);
    st->log_entries = r->log.n;
    st->log_bytes = r->log.bytes;
    st->transfer_target = r->transfer_target;
    if (!r->has_config)
        return;
    st->domain_lo = r->config.domain_lo;
    st->domain_hi = r->config.domain_hi;
    st->n_members = r->config.n;
    for (uint32_t i = 0; i < r->config.n; i++) {
        struct tk_raft_member_status *m = &st->members[i];
        m->id = r->config.m[i].id;
        m->role = r->config.m[i].role;
        if (r->role != TK_RAFT_LEADER)
            continue;
        m->match = r->config.m[i].id == r->id ? raft_log_last(&r->log) : r->prog[i].match;
        m->next = r->config.m[i].id == r->id ? raft_log_last(&r->log) + 1 : r->prog[i].next;
        m->progress = r->prog[i].state;
        m->last_heard_us = r->prog[i].last_heard_us;
    }
}

const struct tk_raft_metrics *tk_raft_metrics(const struct tk_raft *r)
{
    return &r->metrics;
}

const struct tk_raft_config *tk_raft_config(const struct tk_raft *r)
{
    return r->has_config ? &r->config : NULL;
}

uint64_t tk_raft_id(const struct tk_raft *r)
{
    return r->id;
}

uint8_t tk_raft_role(const struct tk_raft *r)
{
    return r->role;
}

uint64_t tk_raft_term(const struct tk_raft *r)
{
    return r->term;
}

uint64_t tk_raft_leader(const struct tk_raft *r)
{
    return r->leader_id;
}

uint64_t tk_raft_commit(const struct tk_raft *r)
{
    return r->commit;
}

uint64_t tk_raft_last_index(const struct tk_raft *r)
{
    return raft_log_last(&r->log);
}

void tk_raft_check(const struct tk_raft *r)
{
    const struct raft_log *l = &r->log;
    uint64_t last = raft_log_last(l);
    TK_ASSERT(l->first >= 1);
    TK_ASSERT(r->applied <= r->commit);
    TK_ASSERT(r->commit <= last);
    TK_ASSERT(l->first - 1 <= r->commit);
    TK_ASSERT(r->snap.index <= r->commit);
    TK_ASSERT(r->voted_for == 0 || r->term > 0);
    uint64_t term = l->prev_term;
    uint64_t token = l->prev_token_next;
    uint64_t cum = l->prev_cum;
    uint64_t bytes = 0;
    for (uint64_t i = l->first; i <= last; i++) {
        const struct tk_raft_entry *e = raft_log_get(l, i);
        TK_ASSERT(e != NULL);
        TK_ASSERT(e->index == i);
        TK_ASSERT(e->term >= term);
        TK_ASSERT(e->term <= r->term);
        TK_ASSERT(e->token_first >= token);
        TK_ASSERT(e->cum_bytes == cum + e->len);
        term = e->term;
        token = tk_raft_entry_token_next(e);
        cum = e->cum_bytes;
        bytes += e->len;
    }
    TK_ASSERT(bytes == l->bytes);
    if (r->has_config) {
        /* The config in effect is the latest CONFIG entry, else the base. */
        TK_ASSERT(tk_raft_config_check(&r->config) == TK_OK);
        struct tk_raft_config c;
        uint64_t at = 0;
        for (uint64_t i = last; i >= l->first && i > 0 && at == 0; i--) {
            const struct tk_raft_entry *e = raft_log_get(l, i);
            size_t used = 0;
            if (e->type != TK_RAFT_CONFIG)
                continue;
            TK_ASSERT(tk_raft_config_decode(e->data, e->len, &c, &used) == TK_OK);
            at = i;
        }
        if (at == 0) {
            TK_ASSERT(r->has_base_config);
            TK_ASSERT(r->config_index <= l->first - 1);
            c = r->base_config;
        } else {
            TK_ASSERT(r->config_index == at);
        }
        TK_ASSERT(c.n == r->config.n);
        for (uint32_t i = 0; i < c.n; i++) {
            TK_ASSERT(c.m[i].id == r->config.m[i].id);
            TK_ASSERT(c.m[i].role == r->config.m[i].role);
        }
    }
    if (r->role == TK_RAFT_LEADER) {
        TK_ASSERT(r->leader_id == r->id);
        TK_ASSERT(r->voted_for == r->id);
        TK_ASSERT(r->term_start_index >= l->first || r->term_start_index <= r->commit);
        for (uint32_t i = 0; i < r->config.n; i++) {
            if (r->config.m[i].id == r->id)
                continue;
            TK_ASSERT(r->prog[i].match <= last);
            TK_ASSERT(r->prog[i].next > r->prog[i].match);
            TK_ASSERT(r->prog[i].next <= last + 1);
        }
    }
    if (r->role == TK_RAFT_CANDIDATE)
        TK_ASSERT(r->voted_for == r->id);
}
