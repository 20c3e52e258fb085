/* Log replication: Append (AppendEntries), its reply, and the commit rule.
 *
 * Leader side, per follower (as in etcd's progress tracker):
 *  - PROBE: one Append at a time, starting at next; a reject moves next
 *    back (to the follower's hint: the first index of the conflicting
 *    term, or its last index + 1), a success switches to REPLICATE.
 *  - REPLICATE: Appends are pipelined: next moves forward as soon as a
 *    message is out, as long as the bytes sent and not yet acknowledged
 *    stay under inflight_bytes_max. Any reject falls back to PROBE.
 *  - SNAPSHOT: next is below the first entry in memory (snapshot.c).
 * Every heartbeat is an Append from next - 1, so a lost message shows up
 * as a reject within one heartbeat and is resent.
 *
 * Follower side: Figure 2's receiver rules, plus: entries at or below the
 * follower's own snapshot are skipped (they are committed, hence equal),
 * and a follower out of memory stores a prefix and acknowledges only it.
 * Before anything changes, raft_append_check() refuses what no correct
 * leader sends: index gaps, terms going down, tokens that go back (SPEC
 * 7: each entry's token_first is at least the previous entry's
 * token_first + token_count; above it only where a claim raised the
 * counter, SPEC 15), configs that do not decode or belong to
 * another domain, a second leader in one term, and a log that contradicts
 * a committed entry. Such a message is dropped and counted; the node goes
 * on (a peer's bug must not take it down).
 *
 * Commit (§5.3, §5.4.2): the leader advances commit to the highest index
 * stored on a majority of voters whose entry is of the current term.
 */
#include "raft/internal.h"

#include <stdlib.h>
#include <string.h>

/* Bytes counted per entry on top of its data, so that empty entries also
 * weigh on the in-flight bound. */
#define ENTRY_OVERHEAD 64

int raft_leader_append(struct tk_raft *r,
                       uint8_t type,
                       uint8_t *data,
                       uint32_t len,
                       uint64_t token_first,
                       uint32_t token_count)
{
    TK_ASSERT(r->role == TK_RAFT_LEADER);
    TK_ASSERT(type == TK_RAFT_DATA || (token_count == 0 && token_first == 0));
    uint64_t next = raft_log_token_next(&r->log);
    TK_ASSERT(token_first == 0 || token_first >= next);
    struct tk_raft_entry e = {
        .term = r->term,
        .index = raft_log_last(&r->log) + 1,
        .token_first = token_first ? token_first : next,
        .token_count = token_count,
        .type = type,
        .len = len,
        .data = data,
    };
    int rv = raft_log_append(&r->log, &e);
    if (rv != TK_OK)
        return rv;
    if (type == TK_RAFT_CONFIG) {
        struct tk_raft_config c;
        size_t used = 0;
        TK_ASSERT(tk_raft_config_decode(data, len, &c, &used) == TK_OK);
        raft_config_set(r, &c, e.index);
    }
    int self = raft_member_slot(r, r->id);
    if (self >= 0)
        r->prog[self].match = e.index;
    return TK_OK;
}

static uint64_t inflight_bytes(const struct tk_raft *r, const struct raft_progress *p)
{
    if (p->next <= p->match + 1)
        return 0;
    uint64_t hi = p->next - 1;
    uint64_t lo = p->match;
    uint64_t bytes = raft_log_cum(&r->log, hi) - raft_log_cum(&r->log, lo);
    return bytes + (hi - lo) * ENTRY_OVERHEAD;
}

/* How many entries from `from` fit in one Append: at least one if any,
 * then up to `budget` bytes (entry overhead included). */
static uint32_t append_batch(const struct tk_raft *r, uint64_t from, uint64_t budget)
{
    uint64_t last = raft_log_last(&r->log);
    uint32_t n = 0;
    uint64_t bytes = 0;
    for (uint64_t i = from; i <= last && n < TK_RAFT_APPEND_ENTRIES_MAX; i++) {
        const struct tk_raft_entry *e = raft_log_get(&r->log, i);
        if (n > 0 && bytes + e->len + ENTRY_OVERHEAD > budget)
            break;
        bytes += e->len + ENTRY_OVERHEAD;
        n++;
    }
    return n;
}

void raft_send_append(struct tk_raft *r, int slot, bool heartbeat)
{
    struct raft_progress *p = &r->prog[slot];
    uint64_t to = r->config.m[slot].id;
    TK_ASSERT(to != r->id);
    TK_ASSERT(p->state != PROGRESS_SNAPSHOT);
    uint64_t prev = p->next - 1;
    bool known = false;
    uint64_t prev_term = raft_log_term(&r->log, prev, &known);
    if (!known) {
        /* The entries it needs were compacted: send the snapshot. */
        TK_ASSERT(prev < r->log.first);
        TK_ASSERT(r->snap.index > 0);
        p->state = PROGRESS_SNAPSHOT;
        p->snap_index = 0; /* a new transfer, of the current snapshot */
        raft_send_snapshot(r, slot, false);
        return;
    }
    /* A pipelined Append also stays within what the in-flight bound has
     * left, so the bound holds to within one entry. */
    uint64_t budget = r->opt.append_bytes_max;
    if (p->state == PROGRESS_REPLICATE) {
        uint64_t used = inflight_bytes(r, p);
        uint64_t left = used < r->opt.inflight_bytes_max ? r->opt.inflight_bytes_max - used : 0;
        budget = TK_MIN(budget, left);
    }
    uint32_t n = budget > 0 ? append_batch(r, p->next, budget) : 0;
    if (n == 0 && !heartbeat && p->state == PROGRESS_REPLICATE)
        return;
    struct tk_raft_msg *m = raft_out_msg(r, TK_RAFT_MSG_APPEND, to);
    if (m == NULL)
        return;
    m->append.prev_index = prev;
    m->append.prev_term = prev_term;
    m->append.commit = r->commit;
    m->append.seq = r->read_seq;
    if (!raft_out_append_entries(r, m, p->next, n)) {
        r->out.n_msgs--; /* drop it: Raft tolerates a lost message */
        return;
    }
    r->metrics.appends_sent++;
    r->metrics.entries_sent += n;
    if (p->state == PROGRESS_REPLICATE)
        p->next += n;
    else
        p->paused = true;
}

void raft_send_heartbeat(struct tk_raft *r, int slot)
{
    struct tk_raft_msg *m = raft_out_msg(r, TK_RAFT_MSG_APPEND, r->config.m[slot].id);
    if (m == NULL)
        return;
    m->append.prev_index = r->log.first - 1;
    m->append.prev_term = r->log.prev_term;
    m->append.commit = r->commit;
    m->append.seq = r->read_seq;
    if (!raft_out_append_entries(r, m, r->log.first, 0)) {
        r->out.n_msgs--; /* drop it: Raft tolerates a lost message */
        return;
    }
    r->metrics.appends_sent++;
}

/* The followers that get each new entry at once: quorum - 1 voters, the
 * leader being the last vote a commit needs. They stay eager while they
 * keep up; an eager one is replaced as soon as another voter has
 * acknowledged strictly more (a dead or slow follower stops acknowledging,
 * and the others catch up at least every lazy_replicate_us), so a commit
 * waits at most that long for a follower that fails. Learners do not
 * count towards a commit, so none is chosen, but they get every entry at
 * once: a learner is promoted only once it holds the commit index, which a
 * batched learner would keep missing under load. So does the target of a
 * leadership transfer. */
static bool voter_follower(const struct tk_raft *r, uint32_t i)
{
    return r->config.m[i].id != r->id && r->config.m[i].role == TK_RAFT_VOTER;
}

static void choose_eager(struct tk_raft *r)
{
    uint32_t want = raft_quorum(r) - 1;
    uint32_t have = 0;
    for (uint32_t i = 0; i < r->config.n; i++) {
        struct raft_progress *p = &r->prog[i];
        if (!voter_follower(r, i))
            p->eager = false;
        have += p->eager;
    }
    for (;;) {
        /* The eager follower furthest behind, the other voter furthest ahead. */
        int lo = -1, hi = -1;
        for (uint32_t i = 0; i < r->config.n; i++) {
            if (!voter_follower(r, i))
                continue;
            const struct raft_progress *p = &r->prog[i];
            if (p->eager && (lo < 0 || p->match < r->prog[lo].match))
                lo = (int)i;
            if (!p->eager && (hi < 0 || p->match > r->prog[hi].match))
                hi = (int)i;
        }
        if (have > want) {
            r->prog[lo].eager = false;
            have--;
        } else if (have < want && hi >= 0) {
            r->prog[hi].eager = true;
            have++;
        } else if (lo >= 0 && hi >= 0 && r->prog[hi].match > r->prog[lo].match) {
            r->prog[lo].eager = false;
            r->prog[hi].eager = true;
        } else {
            /* A commit can always be reached through the eager followers:
             * as many as it needs, or every other voter there is. */
            TK_ASSERT(have == want || (have < want && hi < 0));
            return;
        }
    }
}

void raft_replicate_all(struct tk_raft *r, bool heartbeat)
{
    TK_ASSERT(r->role == TK_RAFT_LEADER);
    bool round = r->read_round;
    r->read_round = false;
    uint64_t last = raft_log_last(&r->log);
    choose_eager(r);
    /* The others' turn: after an idle spell at once, then at most every
     * lazy_replicate_us. */
    bool lazy_turn = heartbeat || round || r->now_us >= r->lazy_due_us;
    r->lazy_pending = false;
    for (uint32_t i = 0; i < r->config.n; i++) {
        if (r->config.m[i].id == r->id)
            continue;
        struct raft_progress *p = &r->prog[i];
        int slot = (int)i; /* < TK_RAFT_MEMBERS_MAX (8) */
        if (p->state == PROGRESS_REPLICATE && !p->eager && !lazy_turn && voter_follower(r, i) &&
            r->config.m[i].id != r->transfer_target) {
            r->lazy_pending |= p->next <= last;
            continue;
        }
        switch (p->state) {
            case PROGRESS_SNAPSHOT:
                raft_send_snapshot(r, slot, heartbeat);
                break;
            case PROGRESS_PROBE:
                if (heartbeat)
                    p->paused = false;
                if (!p->paused || round)
                    raft_send_append(r, slot, true);
                break;
            case PROGRESS_REPLICATE: {
                bool sent = false;
                while (p->state == PROGRESS_REPLICATE && p->next <= last &&
                       inflight_bytes(r, p) < r->opt.inflight_bytes_max) {
                    uint64_t next0 = p->next;
                    raft_send_append(r, slot, false);
                    sent = true;
                    if (p->next == next0)
                        break; /* out of memory, or switched to snapshot */
                }
                if (!sent && (heartbeat || round) && p->state == PROGRESS_REPLICATE)
                    raft_send_append(r, slot, true);
                break;
            }
            default:
                TK_ASSERT(false);
        }
    }
    if (lazy_turn)
        r->lazy_due_us = r->now_us + r->opt.lazy_replicate_us;
}

/* ------------------------------------------------------------------ */
/* Follower                                                            */

static void reply_append(struct tk_raft *r,
                         const struct tk_raft_msg *m,
                         bool success,
                         uint64_t index,
                         uint64_t hint)
{
    struct tk_raft_msg *reply = raft_out_msg(r, TK_RAFT_MSG_APPEND_REPLY, m->from);
    if (reply == NULL)
        return;
    reply->append_reply.success = success;
    reply->append_reply.index = index;
    reply->append_reply.hint = hint;
    reply->append_reply.seq = m->append.seq;
}

/* What an Append says about itself: the bytes came from the network.
 * Indexes follow prev_index, terms never decrease and never exceed the
 * message's term, each entry's tokens continue the previous entry's, and
 * CONFIG entries decode and stay in one domain. */
static bool append_valid(const struct tk_raft *r, const struct tk_raft_msg *m)
{
    uint64_t term = m->append.prev_term;
    uint64_t token = 0;
    bool domain_known = r->has_config;
    uint64_t domain_lo = r->config.domain_lo;
    uint64_t domain_hi = r->config.domain_hi;
    if (m->append.prev_index > RAFT_INDEX_MAX || m->append.prev_term > m->term)
        return false;
    if (m->append.n > 0 && m->append.entries == NULL)
        return false;
    /* Entry 1 is the bootstrap's CONFIG (SPEC 10), never compacted away
     * while a leader sends from index 0. */
    if (m->append.prev_index == 0 && m->append.n > 0 && m->append.entries[0].type != TK_RAFT_CONFIG)
        return false;
    for (uint32_t i = 0; i < m->append.n; i++) {
        const struct tk_raft_entry *e = &m->append.entries[i];
        if (e->index != m->append.prev_index + 1 + i)
            return false;
        if (e->term < term || e->term > m->term || e->term == 0)
            return false;
        if (e->type < TK_RAFT_NOOP || e->type > TK_RAFT_CONFIG)
            return false;
        if (e->type != TK_RAFT_DATA && e->token_count != 0)
            return false;
        if (e->len > TK_RAFT_ENTRY_BYTES_MAX || (e->len > 0) != (e->data != NULL))
            return false;
        if (e->token_first > UINT64_MAX - e->token_count)
            return false;
        if (i > 0 && e->token_first < token) /* a raise (SPEC 15) may skip tokens */
            return false;
        if (e->type == TK_RAFT_CONFIG) {
            struct tk_raft_config c;
            size_t used = 0;
            if (tk_raft_config_decode(e->data, e->len, &c, &used) != TK_OK || used != e->len)
                return false;
            /* One fencing domain per cluster, forever. */
            if (domain_known && (c.domain_lo != domain_lo || c.domain_hi != domain_hi))
                return false;
            domain_known = true;
            domain_lo = c.domain_lo;
            domain_hi = c.domain_hi;
        }
        term = e->term;
        token = tk_raft_entry_token_next(e);
    }
    return true;
}

bool raft_other_leader(const struct tk_raft *r, const struct tk_raft_msg *m)
{
    return m->term == r->term &&
           (r->role == TK_RAFT_LEADER || (r->leader_id != 0 && r->leader_id != m->from));
}

/* The fencing counter after index, which is in memory or first - 1. */
static uint64_t token_after(const struct tk_raft *r, uint64_t index)
{
    const struct tk_raft_entry *e = raft_log_get(&r->log, index);
    return e != NULL ? tk_raft_entry_token_next(e) : r->log.prev_token_next;
}

bool raft_append_check(const struct tk_raft *r, const struct tk_raft_msg *m)
{
    if (!append_valid(r, m))
        return false;
    if (m->term < r->term)
        return true; /* only answered with our term */
    if (raft_other_leader(r, m))
        return false; /* Election Safety: one leader per term */
    /* Walk the message the way raft_recv_append() and append_store() will,
     * and refuse where they would have to break a committed entry. */
    uint64_t prev = m->append.prev_index;
    const struct tk_raft_entry *ents = m->append.entries;
    uint32_t n = m->append.n;
    uint64_t base = r->log.first - 1; /* everything up to here is committed */
    bool skipped = false;
    if (prev < base) {
        uint64_t skip = base - prev;
        if (skip >= n)
            return true;
        /* Log Matching for committed entries: its entry at base is ours. */
        const struct tk_raft_entry *at_base = &ents[skip - 1];
        if (at_base->term != r->log.prev_term ||
            tk_raft_entry_token_next(at_base) != r->log.prev_token_next)
            return false;
        ents += skip;
        n -= (uint32_t)skip; /* skip < n, checked above */
        prev = base;
        skipped = true;
    }
    uint64_t last = raft_log_last(&r->log);
    if (prev > last)
        return true; /* rejected with a hint */
    bool known = false;
    uint64_t t = raft_log_term(&r->log, prev, &known);
    TK_ASSERT(known); /* first - 1 <= prev <= last */
    if (!skipped && t != m->append.prev_term)
        return prev > r->commit; /* a committed entry of another term: no leader's log */
    for (uint32_t i = 0; i < n; i++) {
        uint64_t index = prev + 1 + i;
        const struct tk_raft_entry *e = &ents[i];
        const struct tk_raft_entry *have = raft_log_get(&r->log, index);
        if (have != NULL && have->term == e->term) {
            /* Log Matching: same index and term, same entry. */
            if (have->type != e->type || have->token_first != e->token_first ||
                have->token_count != e->token_count || have->len != e->len)
                return false;
            continue;
        }
        if (have != NULL && index <= r->commit)
            return false; /* would overwrite a committed entry */
        /* The first entry stored continues the counter of the entry before
         * it, which is ours and matches (entry 1 starts the counter). */
        uint64_t before = i == 0 ? token_after(r, prev) : tk_raft_entry_token_next(&ents[i - 1]);
        return index == 1 || e->token_first >= before;
    }
    return true;
}

static bool log_has_room(const struct tk_raft *r, uint32_t len)
{
    /* Followers get twice the leader's bound: their log may start earlier
     * (they compact on their own schedule), and refusing here only slows
     * replication down. */
    return r->log.n < 2 * r->opt.log_entries_max && r->log.bytes + len <= 2 * r->opt.log_bytes_max;
}

/* A leader of the current term spoke: follow it. */
static void follow(struct tk_raft *r, uint64_t leader)
{
    TK_ASSERT(r->role != TK_RAFT_LEADER); /* Election Safety: one leader per term */
    if (r->role != TK_RAFT_FOLLOWER)
        raft_become_follower(r, r->term, leader);
    TK_ASSERT(r->leader_id == 0 || r->leader_id == leader);
    if (r->leader_id != leader) {
        r->leader_id = leader;
        r->metrics.leader_changes++;
    }
    r->leader_heard_us = r->now_us;
    raft_reset_election_timer(r);
}

void raft_follow_leader(struct tk_raft *r, uint64_t leader)
{
    follow(r, leader);
}

/* Stores entries after prev (which matches). Returns the last index known
 * to match the leader's log. */
static uint64_t append_store(struct tk_raft *r,
                             uint64_t prev,
                             const struct tk_raft_entry *ents,
                             uint32_t n)
{
    uint64_t stored = prev;
    bool config_touched = false;
    for (uint32_t i = 0; i < n; i++) {
        const struct tk_raft_entry *e = &ents[i];
        uint64_t index = prev + 1 + i;
        TK_ASSERT(e->index == index);
        if (index <= raft_log_last(&r->log)) {
            bool known = false;
            uint64_t t = raft_log_term(&r->log, index, &known);
            TK_ASSERT(known);
            if (t == e->term) {
                stored = index;
                continue;
            }
            /* A conflict: never below commit (Log Matching + Leader
             * Completeness, checked by raft_append_check), so never below
             * what was applied. */
            TK_ASSERT(index > r->commit);
            raft_log_truncate(&r->log, index);
            /* The config in effect came from a dropped entry: fall back. */
            if (r->has_config && r->config_index >= index)
                config_touched = true;
        }
        if (!log_has_room(r, e->len))
            break;
        uint8_t *data = NULL;
        if (e->len > 0) {
            data = malloc(e->len);
            if (data == NULL)
                break;
            memcpy(data, e->data, e->len);
        }
        struct tk_raft_entry copy = *e;
        copy.data = data;
        if (raft_log_append(&r->log, &copy) != TK_OK) {
            free(data);
            break;
        }
        config_touched |= e->type == TK_RAFT_CONFIG;
        stored = index;
    }
    if (config_touched)
        raft_config_refresh(r);
    return stored;
}

void raft_recv_append(struct tk_raft *r, const struct tk_raft_msg *m)
{
    if (m->term < r->term) {
        /* A stale leader: tell it the term so it steps down. Nothing else:
         * the index and round it sent belong to its old leadership, and if
         * it leads this node's term by the time the reply arrives, the
         * reply must read as nothing (index 0 is matched everywhere), not
         * as a rejection or an acknowledgement of a round of this term. */
        (void)raft_out_msg(r, TK_RAFT_MSG_APPEND_REPLY, m->from); /* all zero */
        return;
    }
    TK_ASSERT(m->term == r->term);
    follow(r, m->from);

    uint64_t prev = m->append.prev_index;
    uint64_t prev_term = m->append.prev_term;
    const struct tk_raft_entry *ents = m->append.entries;
    uint32_t n = m->append.n;
    uint64_t base = r->log.first - 1; /* everything up to here is committed */
    if (prev < base) {
        uint64_t skip = base - prev;
        if (skip >= n) {
            reply_append(r, m, true, prev + n, 0);
            return;
        }
        /* Log Matching for committed entries: the leader's entry at base
         * is ours (raft_append_check). */
        TK_ASSERT(ents[skip - 1].term == r->log.prev_term);
        ents += skip;
        n -= (uint32_t)skip; /* skip < n, checked above */
        prev = base;
        prev_term = r->log.prev_term;
    }
    uint64_t last = raft_log_last(&r->log);
    if (prev > last) {
        reply_append(r, m, false, m->append.prev_index, last + 1);
        return;
    }
    bool known = false;
    uint64_t t = raft_log_term(&r->log, prev, &known);
    TK_ASSERT(known);
    if (t != prev_term) {
        TK_ASSERT(prev > r->commit); /* raft_append_check */
        /* Skip the whole conflicting term in one round trip (§5.3). */
        uint64_t hint = prev;
        while (hint - 1 > r->commit && hint - 1 >= r->log.first &&
               raft_log_term(&r->log, hint - 1, &known) == t)
            hint--;
        reply_append(r, m, false, m->append.prev_index, hint);
        return;
    }
    uint64_t stored = append_store(r, prev, ents, n);
    /* Figure 2: commit = min(leaderCommit, index of last new entry). */
    uint64_t commit = TK_MIN(m->append.commit, stored);
    if (commit > r->commit)
        raft_commit_to(r, commit);
    reply_append(r, m, true, stored, 0);
}

/* ------------------------------------------------------------------ */
/* Leader                                                              */

void raft_transfer_maybe_send(struct tk_raft *r, int slot)
{
    if (r->transfer_target == 0 || r->transfer_sent)
        return;
    if (r->config.m[slot].id != r->transfer_target)
        return;
    if (r->prog[slot].match != raft_log_last(&r->log))
        return;
    struct tk_raft_msg *m = raft_out_msg(r, TK_RAFT_MSG_TIMEOUT_NOW, r->transfer_target);
    if (m == NULL)
        return;
    r->transfer_sent = true;
    r->metrics.transfers++;
}

void raft_leader_progress(struct tk_raft *r, int slot, uint64_t match)
{
    struct raft_progress *p = &r->prog[slot];
    if (match > p->match)
        p->match = match;
    if (p->next <= p->match)
        p->next = p->match + 1;
    raft_leader_commit(r);
    raft_transfer_maybe_send(r, slot);
}

int raft_recv_append_reply(struct tk_raft *r, const struct tk_raft_msg *m)
{
    if (r->role != TK_RAFT_LEADER)
        return TK_OK;
    int slot = raft_member_slot(r, m->from);
    if (slot < 0 || m->from == r->id)
        return TK_OK;
    struct raft_progress *p = &r->prog[slot];
    uint64_t last = raft_log_last(&r->log);
    if (m->append_reply.seq > r->read_seq || m->append_reply.index > last)
        return TK_EPROTO; /* a round or entries this leader never sent */
    p->last_heard_us = r->now_us;
    if (m->append_reply.seq > p->ack_seq)
        p->ack_seq = m->append_reply.seq;
    if (p->state == PROGRESS_SNAPSHOT)
        return TK_OK; /* the snapshot reply moves it on */
    if (m->append_reply.success) {
        uint64_t index = m->append_reply.index;
        if (p->state == PROGRESS_PROBE && index >= p->match) {
            if (index > p->match || index == last) {
                p->state = PROGRESS_REPLICATE;
                p->paused = false;
                p->next = TK_MAX(p->next, index + 1);
            } else {
                /* It took none of what we sent: its log has no room
                 * until it compacts. Pipelining now would only draw a
                 * reject per Append and a new probe per reject, growing
                 * the traffic every round trip: probe again at the next
                 * heartbeat instead. */
                p->paused = true;
            }
        }
        raft_leader_progress(r, slot, index);
        return TK_OK;
    }
    uint64_t rejected = m->append_reply.index;
    if (rejected <= p->match)
        return TK_OK; /* stale: that prefix matched since */
    if (p->state == PROGRESS_PROBE && rejected != p->next - 1)
        return TK_OK; /* stale probe */
    uint64_t next = TK_MIN(rejected, TK_MAX(m->append_reply.hint, 1));
    p->next = TK_MAX(next, p->match + 1);
    p->state = PROGRESS_PROBE;
    p->paused = false;
    return TK_OK;
}

static int cmp_desc(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a;
    uint64_t y = *(const uint64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

void raft_leader_commit(struct tk_raft *r)
{
    TK_ASSERT(r->role == TK_RAFT_LEADER);
    uint64_t match[TK_RAFT_MEMBERS_MAX] = {0};
    uint32_t n = 0;
    uint64_t last = raft_log_last(&r->log);
    for (uint32_t i = 0; i < r->config.n; i++) {
        if (r->config.m[i].role != TK_RAFT_VOTER)
            continue;
        match[n++] = r->config.m[i].id == r->id ? last : r->prog[i].match;
    }
    TK_ASSERT(n >= 1);
    qsort(match, n, sizeof(match[0]), cmp_desc);
    uint64_t index = match[raft_quorum(r) - 1];
    if (index <= r->commit)
        return;
    bool known = false;
    uint64_t term = raft_log_term(&r->log, index, &known);
    TK_ASSERT(known);
    /* §5.4.2 (Figure 8): only entries of the current term commit by
     * counting replicas; earlier ones commit along with them. */
    if (term != r->term)
        return;
    raft_commit_to(r, index);
}
