/* Membership decisions of the leader: joins and the two-step replacement
 * of a restarted member (SPEC 10). See raft/members.h. */
#include "raft/members.h"

#include <string.h>

static bool same_addr(const struct tk_raft_member *a, const struct tk_raft_member *b)
{
    return strcmp(a->peer_addr, b->peer_addr) == 0;
}

/* Index of the newest member at m[i]'s address (i itself if none later). */
static uint32_t newest_at(const struct tk_raft_config *c, uint32_t i)
{
    uint32_t newest = i;
    for (uint32_t j = i + 1; j < c->n; j++)
        if (same_addr(&c->m[j], &c->m[i]))
            newest = j;
    return newest;
}

static const struct tk_raft_member_status *progress(const struct tk_raft_status *st, uint64_t id)
{
    for (uint32_t i = 0; i < st->n_members; i++)
        if (st->members[i].id == id)
            return &st->members[i];
    return NULL;
}

uint8_t tk_members_join(const struct tk_raft_config *c,
                        const struct tk_raft_member *joiner,
                        bool addr_listed)
{
    TK_ASSERT(joiner->id != 0);
    if (tk_raft_config_find(c, joiner->id))
        return TK_MEMBERS_ALREADY;
    bool addr_member = false;
    for (uint32_t i = 0; i < c->n; i++)
        addr_member |= same_addr(&c->m[i], joiner);
    if (!addr_member && !addr_listed)
        return TK_MEMBERS_REFUSE;
    /* Room for the newcomer, and for one more after it: a full config
     * could not take the learner that replaces a member that dies next. */
    if (c->n >= TK_RAFT_MEMBERS_MAX - 1)
        return TK_MEMBERS_WAIT;
    return TK_MEMBERS_ADD;
}

uint8_t tk_members_next(const struct tk_raft_config *c,
                        const struct tk_raft_status *st,
                        uint32_t voters_target,
                        uint64_t *id)
{
    *id = 0;
    _Static_assert(TK_MEMBERS_TRANSFER != TK_RAFT_ADD_LEARNER &&
                       TK_MEMBERS_TRANSFER != TK_RAFT_PROMOTE &&
                       TK_MEMBERS_TRANSFER != TK_RAFT_REMOVE,
                   "a transfer is not a change");
    /* 0. The leader itself was replaced: only another leader can finish. */
    for (uint32_t i = 0; i < c->n; i++) {
        if (c->m[i].id == st->id && newest_at(c, i) != i)
            return TK_MEMBERS_TRANSFER;
    }
    /* 1. Superseded learners: their process is gone. */
    for (uint32_t i = 0; i < c->n; i++) {
        if (c->m[i].role == TK_RAFT_LEARNER && newest_at(c, i) != i) {
            *id = c->m[i].id;
            return TK_RAFT_REMOVE;
        }
    }
    /* 2. Replaced voters, once the newcomer votes in their place. */
    for (uint32_t i = 0; i < c->n; i++) {
        uint32_t j = newest_at(c, i);
        if (j != i && c->m[i].role == TK_RAFT_VOTER && c->m[j].role == TK_RAFT_VOTER &&
            c->m[i].id != st->id) {
            *id = c->m[i].id;
            return TK_RAFT_REMOVE;
        }
    }
    /* 3. Caught-up learners take their predecessor's vote, or a free seat. */
    uint32_t voters = tk_raft_config_voters(c);
    for (uint32_t i = 0; i < c->n; i++) {
        const struct tk_raft_member *m = &c->m[i];
        if (m->role != TK_RAFT_LEARNER || newest_at(c, i) != i)
            continue;
        bool replaces = false, replaces_leader = false;
        for (uint32_t k = 0; k < i; k++) {
            if (same_addr(&c->m[k], m) && c->m[k].role == TK_RAFT_VOTER) {
                replaces = true;
                replaces_leader |= c->m[k].id == st->id;
            }
        }
        /* Two processes claim the leader's own address: promoting the
         * newcomer would leave a voter that can never be removed. */
        if (replaces_leader || (!replaces && voters >= voters_target))
            continue;
        const struct tk_raft_member_status *p = progress(st, m->id);
        if (p && p->match >= st->commit) {
            *id = m->id;
            return TK_RAFT_PROMOTE;
        }
    }
    return 0;
}

bool tk_members_replacing(const struct tk_raft_config *c, uint64_t id)
{
    const struct tk_raft_member *me = tk_raft_config_find(c, id);
    if (!me || me->role != TK_RAFT_VOTER)
        return true;
    for (uint32_t i = 0; i < c->n && c->m[i].id != id; i++)
        if (same_addr(&c->m[i], me))
            return true;
    return false;
}

uint8_t tk_members_bootstrap(uint64_t self_id,
                             bool self_forced,
                             const struct tk_members_peer *peers,
                             uint32_t n,
                             uint32_t npeers,
                             struct tk_members_boot *out)
{
    bool all = true, member_seen = false, leader_seen = false;
    uint64_t lowest = self_id, token_floor = 0;
    /* A forced domain is written by the lowest NodeId among the fresh
     * nodes run with --force-new-domain: its hold applies. */
    uint64_t lowest_forced = self_forced ? self_id : UINT64_MAX;
    uint32_t fresh = 1;
    for (uint32_t i = 0; i < n; i++) {
        const struct tk_members_peer *p = &peers[i];
        member_seen |= p->fresh && p->member;
        leader_seen |= p->fresh && p->member && p->leader_known;
        all &= p->partner;
        if (p->fresh)
            token_floor = TK_MAX(token_floor, p->token_next);
        if (p->partner) {
            fresh++;
            if (p->forced)
                lowest_forced = TK_MIN(lowest_forced, p->id);
        }
        if (p->id && p->id < lowest)
            lowest = p->id;
    }
    out->token_floor = token_floor;
    out->fresh = fresh;
    if (member_seen) {
        if (leader_seen)
            out->verdict = TK_MEMBERS_BOOT_JOIN;
        else if (fresh < npeers / 2 + 1 || lowest_forced != self_id)
            out->verdict = TK_MEMBERS_BOOT_NO_LEADER;
        else
            out->verdict = TK_MEMBERS_BOOT_FORCE;
    } else {
        out->verdict = all && lowest == self_id ? TK_MEMBERS_BOOT_NOW : TK_MEMBERS_BOOT_WAIT;
    }
    return out->verdict;
}
