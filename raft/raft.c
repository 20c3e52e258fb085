/* The Raft core: creation, the step dispatcher, roles, timers and status.
 *
 * Every event goes through tk_raft_step(): it frees what the previous
 * update pointed to, handles the event, lets a leader send what became
 * sendable, and fills the update. Message handlers live in election.c,
 * replication.c and snapshot.c; leader-only requests in leader.c.
 */
#include "raft/internal.h"

#include <stdlib.h>
#include <string.h>

void tk_raft_options_default(struct tk_raft_options *o, uint64_t id, uint64_t seed)
{
    memset(o, 0, sizeof(*o));
    o->id = id;
    o->seed = seed;
    o->heartbeat_us = 100 * 1000;
    o->election_min_us = 2400 * 1000;
    o->election_max_us = 2500 * 1000;
    o->log_entries_max = 1u << 20;
    o->log_bytes_max = 1ull << 30;
    o->snapshot_entries = 1u << 16;
    o->snapshot_bytes = 64u << 20;
    o->snapshot_log_share = 4;
    o->snapshot_trailing = 1024;
    o->snapshot_bytes_max = 4ull << 30;
    o->snapshot_chunk_bytes = 1u << 20;
    o->append_bytes_max = 1u << 20;
    o->inflight_bytes_max = 8u << 20;
    o->reads_max = 1u << 16;
    o->lazy_replicate_us = 1000;
}

static bool options_valid(const struct tk_raft_options *o)
{
    if (o->id == 0 || o->heartbeat_us == 0)
        return false;
    if (o->election_min_us <= o->heartbeat_us || o->election_max_us < o->election_min_us)
        return false;
    if (o->log_entries_max < 4 || o->log_bytes_max < TK_RAFT_ENTRY_BYTES_MAX)
        return false;
    if (o->snapshot_entries == 0 || o->snapshot_bytes == 0)
        return false;
    if (o->snapshot_chunk_bytes == 0 || o->snapshot_chunk_bytes > (8u << 20))
        return false;
    if (o->append_bytes_max == 0 || o->append_bytes_max > (8u << 20))
        return false;
    if (o->inflight_bytes_max == 0 || o->reads_max == 0)
        return false;
    return true;
}

struct tk_raft *tk_raft_create(const struct tk_raft_options *opt)
{
    if (!options_valid(opt))
        return NULL;
    struct tk_raft *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return NULL;
    r->reads = calloc(opt->reads_max, sizeof(*r->reads));
    /* Read results must never be lost to allocation failure. */
    r->out.reads = calloc(opt->reads_max, sizeof(*r->out.reads));
    r->out.cap_reads = opt->reads_max;
    if (r->reads == NULL || r->out.reads == NULL) {
        free(r->out.reads);
        free(r->reads);
        free(r);
        return NULL;
    }
    r->opt = *opt;
    r->id = opt->id;
    tk_prng_seed(&r->prng, opt->seed);
    r->role = TK_RAFT_FOLLOWER;
    raft_log_init(&r->log);
    r->election_deadline_us = UINT64_MAX; /* no config, no election */
    return r;
}

void tk_raft_destroy(struct tk_raft *r)
{
    if (r == NULL)
        return;
    raft_log_free(&r->log);
    raft_snap_free(&r->snap);
    raft_snap_free(&r->snap_old);
    raft_incoming_free(&r->in);
    raft_out_free(&r->out);
    free(r->reads);
    free(r);
}

const char *tk_raft_role_name(uint8_t role)
{
    switch (role) {
        case TK_RAFT_FOLLOWER:
            return "follower";
        case TK_RAFT_PRECANDIDATE:
            return "precandidate";
        case TK_RAFT_CANDIDATE:
            return "candidate";
        case TK_RAFT_LEADER:
            return "leader";
        default:
            return "unknown";
    }
}

/* ------------------------------------------------------------------ */
/* Helpers shared by the handlers                                      */

int raft_member_slot(const struct tk_raft *r, uint64_t id)
{
    if (!r->has_config)
        return -1;
    for (uint32_t i = 0; i < r->config.n; i++)
        if (r->config.m[i].id == id)
            return (int)i; /* < TK_RAFT_MEMBERS_MAX (8) */
    return -1;
}

uint32_t raft_quorum(const struct tk_raft *r)
{
    uint32_t v = tk_raft_config_voters(&r->config);
    TK_ASSERT(v >= 1);
    return v / 2 + 1;
}

/* §5.4.1: a log is more up-to-date if its last term is higher, or the
 * terms are equal and it is at least as long. */
bool raft_log_up_to_date(const struct tk_raft *r, uint64_t last_index, uint64_t last_term)
{
    uint64_t my_term = raft_log_last_term(&r->log);
    if (last_term != my_term)
        return last_term > my_term;
    return last_index >= raft_log_last(&r->log);
}

void raft_reset_election_timer(struct tk_raft *r)
{
    if (!r->has_config || !tk_raft_config_is_voter(&r->config, r->id)) {
        r->election_deadline_us = UINT64_MAX;
        return;
    }
    uint64_t t = tk_prng_range(&r->prng, r->opt.election_min_us, r->opt.election_max_us);
    TK_ASSERT(t >= r->opt.election_min_us);
    TK_ASSERT(t <= r->opt.election_max_us);
    r->election_deadline_us = r->now_us + t;
}

static void set_leader(struct tk_raft *r, uint64_t leader_id)
{
    if (leader_id != 0 && leader_id != r->leader_id)
        r->metrics.leader_changes++;
    r->leader_id = leader_id;
}

void raft_become_follower(struct tk_raft *r, uint64_t term, uint64_t leader_id)
{
    TK_ASSERT(term >= r->term);
    if (term > r->term) {
        r->term = term;
        r->voted_for = 0;
    }
    if (r->role == TK_RAFT_LEADER) {
        raft_reads_fail_all(r);
        r->transfer_target = 0;
        r->term_start_index = 0;
    }
    r->role = TK_RAFT_FOLLOWER;
    set_leader(r, leader_id);
    raft_reset_election_timer(r);
}

void raft_become_leader(struct tk_raft *r)
{
    TK_ASSERT(r->role == TK_RAFT_CANDIDATE);
    TK_ASSERT(r->voted_for == r->id);
    TK_ASSERT(tk_raft_config_is_voter(&r->config, r->id));
    r->role = TK_RAFT_LEADER;
    set_leader(r, r->id);
    r->metrics.terms_led++;
    r->election_deadline_us = UINT64_MAX;
    r->transfer_target = 0;
    r->reads_n = 0;
    r->reads_head = 0;
    r->read_seq = 0;
    r->read_round = false;
    uint64_t last = raft_log_last(&r->log);
    for (uint32_t i = 0; i < r->config.n; i++) {
        struct raft_progress *p = &r->prog[i];
        memset(p, 0, sizeof(*p));
        p->next = last + 1;
        p->state = PROGRESS_PROBE;
        p->last_heard_us = r->now_us;
        if (r->config.m[i].id == r->id)
            p->match = last;
    }
    /* A NOOP opens the term: entries of earlier terms commit only through
     * an entry of the current one (§5.4.2), and the read index (§6.4)
     * needs it committed. Its token_first carries the counter, which is
     * already above every token in this log (SPEC 7). */
    if (raft_leader_append(r, TK_RAFT_NOOP, NULL, 0, 0, 0) != TK_OK) {
        raft_become_follower(r, r->term, 0);
        return;
    }
    r->term_start_index = raft_log_last(&r->log);
    r->heartbeat_due_us = r->now_us;
    raft_leader_commit(r);
}

void raft_commit_to(struct tk_raft *r, uint64_t index)
{
    TK_ASSERT(index >= r->commit);
    TK_ASSERT(index <= raft_log_last(&r->log));
    r->commit = index;
}

/* ------------------------------------------------------------------ */
/* Events                                                              */

/* A leader that has not heard from a majority of voters within an
 * election timeout steps down (thesis §6.2, check-quorum; SPEC 8). */
static bool leader_has_quorum(const struct tk_raft *r)
{
    uint32_t heard = 0;
    for (uint32_t i = 0; i < r->config.n; i++) {
        if (r->config.m[i].role != TK_RAFT_VOTER)
            continue;
        if (r->config.m[i].id == r->id ||
            r->now_us - r->prog[i].last_heard_us < r->opt.election_min_us)
            heard++;
    }
    return heard >= raft_quorum(r);
}

static void on_tick(struct tk_raft *r)
{
    if (r->role == TK_RAFT_LEADER) {
        if (!leader_has_quorum(r)) {
            r->metrics.step_downs_quorum++;
            raft_become_follower(r, r->term, 0);
            return;
        }
        raft_transfer_check(r);
        if (r->now_us >= r->heartbeat_due_us) {
            r->heartbeat_due_us = r->now_us + r->opt.heartbeat_us;
            raft_replicate_all(r, true);
        }
        return;
    }
    if (r->now_us < r->election_deadline_us)
        return;
    if (!r->has_config || !tk_raft_config_is_voter(&r->config, r->id)) {
        r->election_deadline_us = UINT64_MAX; /* learners never campaign */
        return;
    }
    raft_election_start(r, true, false);
}

static bool msg_type_core(uint8_t type)
{
    return type >= TK_RAFT_MSG_PREVOTE && type <= TK_RAFT_MSG_TIMEOUT_NOW;
}

/* What a message says, checked before it changes anything (the term
 * included): an authenticated peer may still be buggy, and its bytes must
 * cost the message, never the node. Values that only matter once the
 * message is known to be current (replies) are checked by the handlers,
 * still before they change anything. */
static bool msg_check(const struct tk_raft *r, const struct tk_raft_msg *m)
{
    /* Every core message comes from a node that joined a term. */
    if (m->term == 0 || m->term > RAFT_TERM_MAX)
        return false;
    switch (m->type) {
        case TK_RAFT_MSG_PREVOTE:
        case TK_RAFT_MSG_VOTE:
            /* A log ends at or below its owner's term; an empty one at 0. */
            return m->vote.last_index <= RAFT_INDEX_MAX && m->vote.last_term <= m->term &&
                   (m->vote.last_index == 0) == (m->vote.last_term == 0);
        case TK_RAFT_MSG_APPEND:
            return raft_append_check(r, m);
        case TK_RAFT_MSG_APPEND_REPLY:
            return m->append_reply.index <= RAFT_INDEX_MAX;
        case TK_RAFT_MSG_SNAPSHOT:
            return raft_snapshot_check(r, m);
        case TK_RAFT_MSG_SNAPSHOT_REPLY:
            return m->snapshot_reply.index <= RAFT_INDEX_MAX;
        default:
            return true;
    }
}

static int on_receive(struct tk_raft *r, const struct tk_raft_msg *m)
{
    if (!msg_type_core(m->type) || m->from == 0 || m->from == r->id ||
        (m->to != 0 && m->to != r->id) || !msg_check(r, m)) {
        r->metrics.messages_invalid++;
        return TK_EPROTO;
    }
    switch (m->type) {
        case TK_RAFT_MSG_PREVOTE:
        case TK_RAFT_MSG_VOTE:
            /* These decide themselves whether a higher term counts (§9.6). */
            raft_recv_vote(r, m);
            return TK_OK;
        default:
            break;
    }
    if (m->term > r->term) {
        /* A granted pre-vote carries the term the candidate would use,
         * not a term anyone is in. */
        if (m->type == TK_RAFT_MSG_VOTE_REPLY && m->vote_reply.pre && m->vote_reply.granted) {
            raft_recv_vote_reply(r, m);
            return TK_OK;
        }
        bool from_leader = m->type == TK_RAFT_MSG_APPEND || m->type == TK_RAFT_MSG_SNAPSHOT ||
                           m->type == TK_RAFT_MSG_TIMEOUT_NOW;
        raft_become_follower(r, m->term, from_leader ? m->from : 0);
    }
    int rv = TK_OK;
    switch (m->type) {
        case TK_RAFT_MSG_VOTE_REPLY:
            raft_recv_vote_reply(r, m);
            break;
        case TK_RAFT_MSG_APPEND:
            raft_recv_append(r, m);
            break;
        case TK_RAFT_MSG_APPEND_REPLY:
            if (m->term == r->term)
                rv = raft_recv_append_reply(r, m);
            break;
        case TK_RAFT_MSG_SNAPSHOT:
            raft_recv_snapshot(r, m);
            break;
        case TK_RAFT_MSG_SNAPSHOT_REPLY:
            if (m->term == r->term)
                rv = raft_recv_snapshot_reply(r, m);
            break;
        case TK_RAFT_MSG_TIMEOUT_NOW:
            raft_recv_timeout_now(r, m);
            break;
        default:
            TK_ASSERT(false);
    }
    if (rv != TK_OK)
        r->metrics.messages_invalid++;
    return rv;
}

static int on_applied(struct tk_raft *r, uint64_t index)
{
    if (index > r->commit)
        return TK_EINVAL;
    if (index > r->applied)
        r->applied = index;
    raft_log_trim(r);
    return TK_OK;
}

static int on_bootstrap(struct tk_raft *r,
                        const struct tk_raft_event *ev,
                        struct tk_raft_update *up)
{
    const struct tk_raft_config *c = ev->bootstrap.config;
    /* A term may have moved already: a fresh node answers the votes of
     * partners that wrote entry 1 before it did. It keeps that term (and
     * the vote it gave in it); only the log must be empty. */
    if (r->log.n != 0 || r->has_config || r->snap.index != 0)
        return TK_EINVAL;
    if (tk_raft_config_check(c) != TK_OK || !tk_raft_config_is_voter(c, r->id))
        return TK_EINVAL;
    if (ev->bootstrap.first_token == 0)
        return TK_EINVAL;
    uint8_t *buf = malloc(TK_RAFT_CONFIG_ENCODED_MAX);
    if (buf == NULL)
        return TK_ENOMEM;
    size_t len = tk_raft_config_encode(c, buf, TK_RAFT_CONFIG_ENCODED_MAX);
    TK_ASSERT(len > 0);
    struct tk_raft_entry e = {
        .term = 1,
        .index = 1,
        .token_first = ev->bootstrap.first_token,
        .token_count = 0,
        .type = TK_RAFT_CONFIG,
        .len = (uint32_t)len, /* <= TK_RAFT_CONFIG_ENCODED_MAX: fits */
        .data = buf,
    };
    uint64_t term0 = r->term;
    r->term = TK_MAX(r->term, 1);
    if (raft_log_append(&r->log, &e) != TK_OK) {
        free(buf);
        r->term = term0;
        return TK_ENOMEM;
    }
    raft_config_set(r, c, 1);
    up->index = 1;
    /* The others are fresh and have no leader to stick to: no pre-vote. */
    raft_election_start(r, false, false);
    return TK_OK;
}

static int dispatch(struct tk_raft *r, const struct tk_raft_event *ev, struct tk_raft_update *up)
{
    switch (ev->type) {
        case TK_RAFT_EV_TICK:
            on_tick(r);
            return TK_OK;
        case TK_RAFT_EV_RECEIVE:
            return on_receive(r, ev->receive);
        case TK_RAFT_EV_PROPOSE:
            return raft_propose(r, ev, up);
        case TK_RAFT_EV_CHANGE:
            return raft_change(r, ev, up);
        case TK_RAFT_EV_TRANSFER:
            return raft_transfer(r, ev->transfer.target);
        case TK_RAFT_EV_READ:
            return raft_read(r, ev->read.id);
        case TK_RAFT_EV_SNAPSHOT:
            return raft_snapshot_taken(r, ev->snapshot.index, ev->snapshot.data, ev->snapshot.len);
        case TK_RAFT_EV_APPLIED:
            return on_applied(r, ev->applied.index);
        case TK_RAFT_EV_BOOTSTRAP:
            return on_bootstrap(r, ev, up);
        default:
            return TK_EINVAL;
    }
}

int tk_raft_step(struct tk_raft *r, const struct tk_raft_event *ev, struct tk_raft_update *up)
{
    TK_ASSERT(ev->now_us >= r->now_us);
    raft_log_gc(&r->log);
    raft_out_reset(&r->out);
    /* At the start of a step, not at the end: the update of the step that
     * ended a transfer may still point into its pinned blob (chunk data,
     * config); it is dead now. */
    raft_snap_unpin(r);
    memset(up, 0, sizeof(*up));
    r->install_pending = false;
    uint8_t role0 = r->role;
    uint64_t term0 = r->term;
    uint64_t leader0 = r->leader_id;
    uint64_t commit0 = r->commit;
    uint64_t config0 = r->has_config ? r->config_index : UINT64_MAX;
    uint32_t members0 = r->config.n;
    r->now_us = ev->now_us;

    int rv = dispatch(r, ev, up);

    if (r->role == TK_RAFT_LEADER) {
        raft_replicate_all(r, false);
        raft_reads_confirm(r);
    }
    raft_snapshot_maybe_ask(r, up);
    raft_out_finish(&r->out);

    TK_ASSERT(r->term >= term0);
    TK_ASSERT(r->commit >= commit0);
    TK_ASSERT(r->commit <= raft_log_last(&r->log));
    TK_ASSERT(r->applied <= r->commit);
    up->role = r->role;
    up->term = r->term;
    up->leader_id = r->leader_id;
    up->commit = r->commit;
    if (r->role != role0 || r->term != term0 || r->leader_id != leader0)
        up->flags |= TK_RAFT_UPDATE_STATE;
    if (r->commit != commit0)
        up->flags |= TK_RAFT_UPDATE_COMMIT;
    if ((r->has_config ? r->config_index : UINT64_MAX) != config0 || r->config.n != members0)
        up->flags |= TK_RAFT_UPDATE_CONFIG;
    if (r->out.n_msgs > 0) {
        up->flags |= TK_RAFT_UPDATE_MESSAGES;
        up->msgs = r->out.msgs;
        up->n_msgs = r->out.n_msgs;
    }
    if (r->out.n_reads > 0) {
        up->flags |= TK_RAFT_UPDATE_READS;
        up->reads = r->out.reads;
        up->n_reads = r->out.n_reads;
    }
    if (r->install_pending) {
        up->flags |= TK_RAFT_UPDATE_SNAPSHOT_INSTALL;
        up->install.index = r->snap.index;
        up->install.term = r->snap.term;
        up->install.token_next = r->snap.token_next;
        up->install.data = r->snap.data;
        up->install.len = r->snap.len;
        up->install.age_ms =
            (uint32_t)TK_MIN((r->now_us - r->snap.taken_us) / 1000u, (uint64_t)UINT32_MAX);
    }
    return rv;
}

/* ------------------------------------------------------------------ */
/* Wrappers                                                            */

int tk_raft_tick(struct tk_raft *r, uint64_t now_us, struct tk_raft_update *up)
{
    struct tk_raft_event ev = {.type = TK_RAFT_EV_TICK, .now_us = now_us};
    return tk_raft_step(r, &ev, up);
}

int tk_raft_receive(struct tk_raft *r,
                    const struct tk_raft_msg *m,
                    uint64_t now_us,
                    struct tk_raft_update *up)
{
    struct tk_raft_event ev = {.type = TK_RAFT_EV_RECEIVE, .now_us = now_us, .receive = m};
    return tk_raft_step(r, &ev, up);
}

int tk_raft_propose(struct tk_raft *r,
                    const uint8_t *data,
                    uint32_t len,
                    uint64_t token_first,
                    uint32_t token_count,
                    uint64_t now_us,
                    struct tk_raft_update *up)
{
    struct tk_raft_event ev = {.type = TK_RAFT_EV_PROPOSE, .now_us = now_us};
    ev.propose.data = data;
    ev.propose.len = len;
    ev.propose.token_first = token_first;
    ev.propose.token_count = token_count;
    return tk_raft_step(r, &ev, up);
}

int tk_raft_change(struct tk_raft *r,
                   uint8_t type,
                   const struct tk_raft_member *member,
                   uint64_t now_us,
                   struct tk_raft_update *up)
{
    struct tk_raft_event ev = {.type = TK_RAFT_EV_CHANGE, .now_us = now_us};
    ev.change.type = type;
    ev.change.member = member;
    return tk_raft_step(r, &ev, up);
}

int tk_raft_transfer(struct tk_raft *r, uint64_t target, uint64_t now_us, struct tk_raft_update *up)
{
    struct tk_raft_event ev = {.type = TK_RAFT_EV_TRANSFER, .now_us = now_us};
    ev.transfer.target = target;
    return tk_raft_step(r, &ev, up);
}

int tk_raft_read(struct tk_raft *r, uint64_t id, uint64_t now_us, struct tk_raft_update *up)
{
    struct tk_raft_event ev = {.type = TK_RAFT_EV_READ, .now_us = now_us};
    ev.read.id = id;
    return tk_raft_step(r, &ev, up);
}

int tk_raft_snapshot(struct tk_raft *r,
                     uint64_t index,
                     uint8_t *data,
                     size_t len,
                     uint64_t now_us,
                     struct tk_raft_update *up)
{
    struct tk_raft_event ev = {.type = TK_RAFT_EV_SNAPSHOT, .now_us = now_us};
    ev.snapshot.index = index;
    ev.snapshot.data = data;
    ev.snapshot.len = len;
    return tk_raft_step(r, &ev, up);
}

int tk_raft_applied(struct tk_raft *r, uint64_t index, uint64_t now_us, struct tk_raft_update *up)
{
    struct tk_raft_event ev = {.type = TK_RAFT_EV_APPLIED, .now_us = now_us};
    ev.applied.index = index;
    return tk_raft_step(r, &ev, up);
}

int tk_raft_bootstrap(struct tk_raft *r,
                      const struct tk_raft_config *config,
                      uint64_t first_token,
                      uint64_t now_us,
                      struct tk_raft_update *up)
{
    struct tk_raft_event ev = {.type = TK_RAFT_EV_BOOTSTRAP, .now_us = now_us};
    ev.bootstrap.config = config;
    ev.bootstrap.first_token = first_token;
    return tk_raft_step(r, &ev, up);
}
