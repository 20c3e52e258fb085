/* The Raft driver (raft/driver.h): batching, token numbering, roles and
 * epochs, read groups, snapshot assembly and install, around the Raft core. */
#include <stdlib.h>
#include <string.h>

#include "core/snap.h"
#include "raft/driver_internal.h"

void driver_event(struct tk_driver *d, int ev, uint64_t a, uint64_t b)
{
    if (d->io.event)
        d->io.event(d->io.ctx, ev, a, b);
}

static void sample(struct tk_driver *d, int which, uint64_t v)
{
    if (d->io.sample)
        d->io.sample(d->io.ctx, which, v);
}

void driver_to_shard(struct tk_driver *d, uint32_t shard, const struct tk_msg *m)
{
    tk_msg_send(&d->out, shard, m);
}

static void send_role(struct tk_driver *d, bool lead)
{
    d->epoch++;
    struct tk_msg m = {.kind = TK_MSG_ROLE, .u.role = {.epoch = d->epoch, .lead = lead}};
    memcpy(m.u.role.leader_addr, d->leader_client, sizeof(d->leader_client));
    for (uint32_t i = 0; i < d->o.nshards; i++)
        driver_to_shard(d, i, &m);
}

static void read_done(struct tk_driver *d, uint32_t shard, uint64_t round, bool ok)
{
    struct tk_msg m = {.kind = TK_MSG_READ_DONE, .u.read_done = {round, ok}};
    driver_to_shard(d, shard, &m);
}

/* ------------------------------------------------------------------ */
/* Committed entries and snapshots */

int tk_driver_check_entry(const uint8_t *data,
                          uint32_t len,
                          uint64_t token_first,
                          uint64_t token_next)
{
    if (len < 4)
        return TK_EPROTO;
    if (slots_entry_is(data, len))
        return token_first == token_next ? slots_entry_check(data, len) : TK_EPROTO;
    uint32_t ncmds;
    memcpy(&ncmds, data, 4);
    uint64_t expect = token_first;
    size_t off = 4;
    for (uint32_t i = 0; i < ncmds; i++) {
        struct tk_cmd c;
        size_t used;
        if (tk_cmd_decode(data + off, len - off, &c, &used) != TK_OK)
            return TK_EPROTO;
        if (tk_cmd_grants(&c)) {
            if (c.token != expect)
                return TK_EPROTO;
            expect++;
        }
        off += used;
    }
    return off == len && expect == token_next ? TK_OK : TK_EPROTO;
}

/* Hands every command of a committed DATA entry to the shard of its key.
 * The payload came from a leader over the network: it is checked whole
 * first, and a node that cannot apply a committed entry cannot follow. */
static void apply_entry(struct tk_driver *d, uint64_t index, const struct tk_raft_entry *e)
{
    if (slots_entry_is(e->data, e->len)) {
        /* Decoded once, by the apply; a ring takes no token. */
        if (e->token_count != 0 || slots_apply(d, index, e) != TK_OK) {
            d->io.fatal(d->io.ctx, "a committed ring entry is malformed");
            return;
        }
        if (d->io.applied)
            d->io.applied(d->io.ctx, index, e);
        return;
    }
    if (tk_driver_check_entry(e->data, e->len, e->token_first, tk_raft_entry_token_next(e)) !=
        TK_OK) {
        d->io.fatal(d->io.ctx, "a committed entry is malformed");
        return;
    }
    uint32_t ncmds;
    memcpy(&ncmds, e->data, 4);
    size_t off = 4;
    for (uint32_t i = 0; i < ncmds; i++) {
        struct tk_msg m = {.kind = TK_MSG_APPLY};
        size_t used;
        TK_ASSERT(tk_cmd_decode(e->data + off, e->len - off, &m.u.apply.cmd, &used) == TK_OK);
        driver_to_shard(d, tk_cmd_shard(m.u.apply.cmd.key, m.u.apply.cmd.key_len, d->o.nshards),
                        &m);
        off += used;
    }
    d->m_commands += ncmds;
    if (d->io.applied)
        d->io.applied(d->io.ctx, index, e);
}

/* A follower replaces its lock state with the leader's snapshot. The core
 * has already accepted it, so a blob this node cannot load cannot be
 * refused here: it is checked whole before any shard drops its state, and
 * a malformed one stops the node (fatal) before anything changed. Each
 * shard gets its records in one message, each lease's time left less the
 * snapshot's age (at least 1 ms: an expiry is then due), so that neither
 * the time between the cut and the install nor a failover after it
 * stretches a lease. */
static void snapshot_reset(struct tk_driver *d);

static void install_snapshot(struct tk_driver *d, const struct tk_raft_update_install *inst)
{
    uint64_t index = inst->index;
    const uint8_t *data = inst->data;
    size_t len = inst->len;
    uint64_t count = 0;
    const char *why = NULL;
    if (tk_snap_check(data, len, tk_raft_next_token(d->core), &count, &why) != TK_OK) {
        d->io.fatal(d->io.ctx, why);
        return;
    }
    const uint8_t *state;
    size_t state_len, pos;
    uint64_t header_count;
    TK_ASSERT(tk_snap_state(data, len, &header_count, &pos, &state, &state_len) == TK_OK);
    /* The ring first (at the snapshot's index it was this one); the
     * shards' views after their installs. */
    if (slots_state_load(d, state, state_len) != TK_OK) {
        d->io.fatal(d->io.ctx, "the snapshot's ring does not decode");
        return;
    }
    /* A cut still running is of a state this install replaces: the shards
     * end theirs when they get the install. */
    snapshot_reset(d);
    d->snap_again = false;
    uint32_t n = d->o.nshards;
    struct tk_msg_install *in = calloc(n, sizeof(*in));
    size_t *cap = calloc(n, sizeof(*cap));
    TK_ASSERT(in != NULL && cap != NULL);
    for (uint64_t i = 0; i < count; i++) {
        struct tk_cmd c;
        uint32_t left = 0;
        size_t at = pos;
        TK_ASSERT(tk_snap_next(data, len, &pos, &c, &left) == TK_OK);
        struct tk_msg_install *s = &in[tk_cmd_shard(c.key, c.key_len, n)];
        size_t rec = pos - at;
        if (cap[s - in] - s->len < rec) {
            size_t want = TK_MAX(cap[s - in] * 2, TK_MAX(rec, len / n + rec));
            s->data = realloc(s->data, want);
            TK_ASSERT(s->data != NULL);
            cap[s - in] = want;
        }
        left = left > inst->age_ms ? left - inst->age_ms : 1;
        TK_ASSERT(tk_snap_put(s->data + s->len, rec, &c, left) == rec);
        s->len += rec;
        s->count++;
    }
    TK_ASSERT(pos == len);
    for (uint32_t i = 0; i < n; i++) {
        struct tk_msg m = {.kind = TK_MSG_INSTALL, .u.install = in[i]};
        m.u.install.index = index;
        driver_to_shard(d, i, &m); /* the shard frees data */
    }
    slots_send_views(d);
    free(cap);
    free(in);
    driver_event(d, TK_DRIVER_EV_INSTALLED, count, len);
    if (d->io.installed)
        d->io.installed(d->io.ctx, index, data, len);
}

/* ------------------------------------------------------------------ */
/* Roles */

static void drop_batches(struct tk_driver *d);

/* Follower or candidate: step the shards down at once, before anything of
 * another leadership is applied, and tell them where clients should go. */
static void follow(struct tk_driver *d, const struct tk_raft_update *up)
{
    if (d->leader_ready) {
        d->leader_ready = false;
        driver_event(d, TK_DRIVER_EV_STEPPED_DOWN, up->term, 0);
    }
    drop_batches(d);
    const struct tk_raft_config *c = tk_raft_config(d->core);
    const struct tk_raft_member *lm =
        up->leader_id && c ? tk_raft_config_find(c, up->leader_id) : NULL;
    const char *addr = lm ? lm->client_addr : "";
    if (d->role_leader_id == up->leader_id && !strcmp(addr, d->leader_client) && d->epoch)
        return;
    d->role_leader_id = up->leader_id;
    size_t n = strnlen(addr, TK_MSG_ADDR_MAX - 1);
    memcpy(d->leader_client, addr, n);
    d->leader_client[n] = 0;
    send_role(d, false);
}

/* Leader: serve once the term's first entry and everything committed
 * before it is applied, no transfer is running after a refused batch, and
 * a forced new domain's hold is over. */
static void maybe_lead(struct tk_driver *d, const struct tk_raft_update *up)
{
    if (d->leader_ready)
        return;
    struct tk_raft_status st;
    tk_raft_status(d->core, &st);
    if (d->refused) {
        if (st.transfer_target)
            return;
        d->refused = false;
    }
    const struct tk_raft_config *c = tk_raft_config(d->core);
    uint64_t serve_at = c && c->serve_after_us ? c->serve_after_us + d->o.drift_us : 0;
    if (serve_at > d->wall || d->now < d->hold_until) {
        if (!d->held_noted)
            driver_event(d, TK_DRIVER_EV_HELD, serve_at,
                         d->hold_until - TK_MIN(d->hold_until, d->now));
        d->held_noted = true;
        return;
    }
    /* Everything in the log applied, not only what is committed: after a
     * refused batch the term goes on, and entries proposed before the
     * shards stepped down may still commit; a leading table applies only
     * its own proposals (lock.h), so they must reach the shards first. */
    if (!st.term_start_index || d->applied < st.term_start_index || d->applied < up->commit ||
        d->applied < st.last_index)
        return;
    d->leader_ready = true;
    size_t n = strnlen(d->o.advertise, TK_MSG_ADDR_MAX - 1);
    memcpy(d->leader_client, d->o.advertise, n);
    d->leader_client[n] = 0;
    d->role_leader_id = tk_raft_id(d->core);
    send_role(d, true);
    driver_event(d, TK_DRIVER_EV_LEADING, up->term, st.term_start_index);
}

static void resolve_reads(struct tk_driver *d, const struct tk_raft_read *reads, uint32_t n)
{
    for (uint32_t k = 0; k < n; k++) {
        const struct tk_raft_read *rd = &reads[k];
        while (d->groups_len > 0) {
            struct read_group *g = &d->groups[d->groups_head];
            if (g->id > rd->id)
                break;
            bool ok = g->id == rd->id && rd->ok;
            for (uint32_t w = 0; w < d->o.nshards; w++)
                if (g->round[w])
                    read_done(d, w, g->round[w], ok);
            d->groups_head = (d->groups_head + 1) % TK_DRIVER_READ_GROUPS_MAX;
            d->groups_len--;
            if (g->id == rd->id)
                break;
        }
    }
}

static void request_snapshot(struct tk_driver *d, uint64_t index)
{
    if (d->snap_busy) {
        d->snap_again = true; /* after this cut (snapshot_done) */
        return;
    }
    TK_ASSERT(index == d->applied);
    snapshot_reset(d);
    d->snap_busy = true;
    d->snap_index = index;
    d->snap_asked_us = d->now;
    /* The ring as it stands at index, for the blob's state. */
    d->snap_state = slots_state(d, &d->snap_state_len);
    struct tk_msg m = {.kind = TK_MSG_SNAP_REQ, .u.snap_req = {index}};
    for (uint32_t w = 0; w < d->o.nshards; w++)
        driver_to_shard(d, w, &m);
}

static void observe_commits(struct tk_driver *d, uint64_t commit)
{
    while (d->pend_len > 0 && d->pending[d->pend_head].index <= commit) {
        struct pending_entry *pe = &d->pending[d->pend_head];
        sample(d, TK_DRIVER_SAMPLE_LATENCY,
               d->now > pe->proposed_us ? d->now - pe->proposed_us : 0);
        d->pend_head = (d->pend_head + 1) % PENDING_MAX;
        d->pend_len--;
    }
}

void tk_driver_process(struct tk_driver *d, int rc, struct tk_raft_update *up)
{
    (void)rc; /* failures of the event itself change nothing; the update stays valid */
    for (;;) {
        if (up->role != TK_RAFT_LEADER) {
            follow(d, up);
            d->pend_len = 0;
        }
        if (up->flags & TK_RAFT_UPDATE_SNAPSHOT_INSTALL) {
            install_snapshot(d, &up->install);
            d->applied = up->install.index;
        }
        for (uint32_t i = 0; i < up->n_msgs; i++)
            members_send_msg(d, &up->msgs[i], NULL);
        if (up->flags & TK_RAFT_UPDATE_READS)
            resolve_reads(d, up->reads, up->n_reads);
        uint64_t commit = up->commit;
        bool advanced = commit > d->applied;
        for (uint64_t i = d->applied + 1; i <= commit; i++) {
            const struct tk_raft_entry *e = tk_raft_entry(d->core, i);
            TK_ASSERT(e != NULL);
            if (e->type == TK_RAFT_DATA)
                apply_entry(d, i, e);
        }
        if (advanced) {
            d->applied = commit;
            observe_commits(d, commit);
        }
        if (up->role == TK_RAFT_LEADER)
            maybe_lead(d, up);
        if (up->flags & TK_RAFT_UPDATE_SNAPSHOT_WANTED)
            request_snapshot(d, up->snapshot_index);
        if (!advanced)
            return;
        rc = tk_raft_applied(d->core, d->applied, d->now, up);
    }
}

void tk_driver_tick(struct tk_driver *d)
{
    /* A leader ticks every heartbeat: a forced domain's hold ending or a
     * transfer giving up is seen through the update (maybe_lead). */
    if (tk_raft_deadline(d->core) <= d->now) {
        struct tk_raft_update up;
        int rc = tk_raft_tick(d->core, d->now, &up);
        tk_driver_process(d, rc, &up);
    }
    members_tick(d);
}

uint64_t tk_driver_deadline(const struct tk_driver *d)
{
    return TK_MIN(tk_raft_deadline(d->core), members_deadline(d));
}

/* ------------------------------------------------------------------ */
/* Batches */

static struct batch *batch_new(struct tk_driver *d)
{
    struct batch *b = d->spare;
    if (b) {
        d->spare = NULL;
    } else {
        b = malloc(sizeof(*b));
        TK_ASSERT(b != NULL);
        b->buf = malloc(BATCH_BYTES_MAX);
        TK_ASSERT(b->buf != NULL);
    }
    b->next = NULL;
    b->len = 4;
    b->cmds = b->tokens = 0;
    b->oldest_us = 0;
    if (d->tail)
        d->tail->next = b;
    else
        d->head = b;
    d->tail = b;
    d->nbatches++;
    return b;
}

static void batch_pop(struct tk_driver *d)
{
    struct batch *b = d->head;
    d->head = b->next;
    if (!d->head)
        d->tail = NULL;
    d->waiting_cmds -= b->cmds;
    d->waiting_tokens -= b->tokens;
    d->nbatches--;
    if (!d->spare) {
        d->spare = b;
    } else {
        free(b->buf);
        free(b);
    }
}

static void drop_batches(struct tk_driver *d)
{
    while (d->head)
        batch_pop(d);
}

/* Adds one proposal, numbering its grant after every token of the batches
 * already waiting. Made under an older leadership: never proposed now. */
static void batch_add(struct tk_driver *d, const struct tk_msg_propose *p)
{
    if (!d->leader_ready || p->epoch != d->epoch)
        return;
    TK_ASSERT(d->waiting_cmds < d->o.proposals_max);
    struct batch *b = d->tail;
    if (!b || b->cmds == TK_DRIVER_BATCH_CMDS_MAX)
        b = batch_new(d);
    if (b->cmds == 0)
        b->oldest_us = p->proposed_us;
    struct tk_cmd c = p->cmd;
    if (tk_cmd_grants(&c)) {
        TK_ASSERT(c.token == 0);
        c.token = tk_raft_next_token(d->core) + d->waiting_tokens;
        b->tokens++;
        d->waiting_tokens++;
    }
    size_t n = tk_cmd_encode(&c, b->buf + b->len, BATCH_BYTES_MAX - b->len);
    TK_ASSERT(n > 0);
    b->len += n;
    b->cmds++;
    d->waiting_cmds++;
}

/* Proposes the waiting batches in order until the log is full. A refusal
 * other than a full log while leading (a leadership transfer) drops every
 * batch and steps the shards down, so their keys in flight are released
 * and their clients told (M) instead of waiting forever. */
void driver_propose_batches(struct tk_driver *d)
{
    while (d->head && d->head->cmds > 0) {
        struct batch *b = d->head;
        memcpy(b->buf, &b->cmds, 4);
        uint64_t first = tk_raft_next_token(d->core);
        struct tk_raft_update up;
        int rc = tk_raft_propose(d->core, b->buf, (uint32_t)b->len, first, b->tokens, d->now, &up);
        if (rc == TK_EFULL)
            return; /* the log is at its bound: keep them, try next round */
        if (rc != TK_OK) {
            uint64_t cmds = d->waiting_cmds;
            drop_batches(d);
            if (d->leader_ready) {
                d->leader_ready = false;
                d->refused = true;
                d->m_refused++;
                driver_event(d, TK_DRIVER_EV_BATCH_REFUSED, cmds, (uint64_t)rc);
                send_role(d, false);
            }
            tk_driver_process(d, rc, &up);
            return;
        }
        sample(d, TK_DRIVER_SAMPLE_BATCH, b->cmds);
        d->m_entries++;
        if (d->pend_len < PENDING_MAX) {
            d->pending[(d->pend_head + d->pend_len) % PENDING_MAX] =
                (struct pending_entry){up.index, b->oldest_us};
            d->pend_len++;
        }
        batch_pop(d);
        tk_driver_process(d, rc, &up);
    }
}

/* ------------------------------------------------------------------ */
/* Snapshot pieces */

/* Drops the snapshot being assembled (done, or given up for an install). */
static void snapshot_reset(struct tk_driver *d)
{
    for (uint32_t i = 0; i < d->snap_nearly; i++)
        free(d->snap_early[i].part.data);
    free(d->snap_early);
    free(d->snap_blob);
    free(d->snap_state);
    d->snap_state = NULL;
    d->snap_state_len = 0;
    d->snap_early = NULL;
    d->snap_nearly = d->snap_early_cap = 0;
    d->snap_blob = NULL;
    d->snap_len = 0;
    d->snap_known = d->snap_finals = 0;
    memset(d->snap_sh, 0, sizeof(d->snap_sh));
    d->snap_busy = false;
}

/* Every shard's final piece came: the blob is whole. */
static void snapshot_done(struct tk_driver *d)
{
    uint64_t count = 0;
    for (uint32_t w = 0; w < d->o.nshards; w++) {
        const struct snap_region *r = &d->snap_sh[w];
        TK_ASSERT(r->final && r->count == r->total_count && r->len == r->total_len);
        count += r->count;
    }
    tk_snap_put_header_state(d->snap_blob, count, d->snap_state, d->snap_state_len);
    uint8_t *blob = d->snap_blob;
    size_t bytes = d->snap_len;
    uint64_t index = d->snap_index;
    d->snap_blob = NULL; /* the core owns it now */
    snapshot_reset(d);
    d->m_snapshot_bytes = bytes;
    d->m_snapshot_cut_us = d->now - TK_MIN(d->now, d->snap_asked_us);
    struct tk_raft_update up;
    int rc = tk_raft_snapshot(d->core, index, blob, bytes, d->now, &up);
    if (rc != TK_OK)
        driver_event(d, TK_DRIVER_EV_SNAPSHOT_REFUSED, index, (uint64_t)rc);
    tk_driver_process(d, rc, &up);
    /* The core asks once per applied index: a request that came during
     * this cut is made now. Dropping it could stall a node for good: a
     * follower whose log is at its bound takes no more entries, so its
     * applied index, and the core's asking, would never move again. */
    if (d->snap_again && !d->snap_busy) {
        d->snap_again = false;
        struct tk_raft_status st;
        tk_raft_status(d->core, &st);
        if (d->applied > st.snapshot_index)
            request_snapshot(d, d->applied);
    }
}

/* Copies a piece into its shard's region of the blob. */
static void snapshot_place(struct tk_driver *d, uint32_t src, struct tk_msg_snap_part *part)
{
    struct snap_region *r = &d->snap_sh[src];
    TK_ASSERT(!r->final);
    TK_ASSERT(r->len + part->len <= r->total_len && r->count + part->count <= r->total_count);
    if (part->len > 0)
        memcpy(d->snap_blob + r->off + r->len, part->data, part->len);
    free(part->data);
    part->data = NULL;
    r->len += part->len;
    r->count += part->count;
    if (part->final) {
        r->final = true;
        d->snap_finals++;
    }
}

/* Every shard's size is known: one blob, the shards' regions in shard
 * order after the header, and the pieces that came early copied in. */
static void snapshot_alloc(struct tk_driver *d)
{
    size_t off = tk_snap_header_len(d->snap_state_len);
    for (uint32_t w = 0; w < d->o.nshards; w++) {
        d->snap_sh[w].off = off;
        off += d->snap_sh[w].total_len;
    }
    d->snap_len = off;
    d->snap_blob = malloc(off);
    TK_ASSERT(d->snap_blob != NULL);
    for (uint32_t i = 0; i < d->snap_nearly; i++)
        snapshot_place(d, d->snap_early[i].src, &d->snap_early[i].part);
    free(d->snap_early);
    d->snap_early = NULL;
    d->snap_nearly = d->snap_early_cap = 0;
}

static void snapshot_part(struct tk_driver *d, uint32_t src, const struct tk_msg_snap_part *part)
{
    if (!d->snap_busy || part->index != d->snap_index) {
        free(part->data); /* a cut given up on (an install came between) */
        return;
    }
    struct snap_region *r = &d->snap_sh[src];
    if (!r->known) {
        r->known = true;
        r->total_count = part->total_count;
        r->total_len = part->total_len;
        d->snap_known++;
    }
    TK_ASSERT(r->total_count == part->total_count && r->total_len == part->total_len);
    struct tk_msg_snap_part p = *part;
    if (d->snap_blob == NULL && d->snap_known < d->o.nshards) {
        if (d->snap_nearly == d->snap_early_cap) {
            d->snap_early_cap = TK_MAX(2 * d->snap_early_cap, 8u);
            d->snap_early = realloc(d->snap_early, d->snap_early_cap * sizeof(*d->snap_early));
            TK_ASSERT(d->snap_early != NULL);
        }
        d->snap_early[d->snap_nearly++] = (struct snap_early){src, p};
        return;
    }
    if (d->snap_blob == NULL)
        snapshot_alloc(d);
    snapshot_place(d, src, &p);
    if (d->snap_finals == d->o.nshards)
        snapshot_done(d);
}

/* ------------------------------------------------------------------ */
/* From the shards */

void tk_driver_message(struct tk_driver *d,
                       uint32_t src,
                       uint32_t kind,
                       const uint8_t *data,
                       uint32_t len)
{
    TK_ASSERT(src < d->o.nshards);
    struct tk_msg m;
    TK_ASSERT(tk_msg_decode(kind, data, len, &m) == TK_OK);
    switch (kind) {
        case TK_MSG_PROPOSE:
            batch_add(d, &m.u.propose);
            if (d->tail && d->tail->cmds == TK_DRIVER_BATCH_CMDS_MAX)
                driver_propose_batches(d); /* a full batch goes at once */
            break;
        case TK_MSG_READ:
            if (d->leader_ready)
                d->want_round[src] = m.u.read.round;
            else
                read_done(d, src, m.u.read.round, false);
            break;
        case TK_MSG_SNAP_PART:
            snapshot_part(d, src, &m.u.snap_part);
            break;
        case TK_MSG_HELD:
            slots_held(d, &m.u.held);
            break;
        default:
            TK_ASSERT(!"unexpected message kind for the driver");
    }
}

void tk_driver_flush(struct tk_driver *d)
{
    driver_propose_batches(d);
    /* One read barrier covers every read the shards asked for so far. */
    bool any = false;
    for (uint32_t i = 0; i < d->o.nshards; i++)
        any |= d->want_round[i] != 0;
    if (!any || d->groups_len == TK_DRIVER_READ_GROUPS_MAX)
        return;
    struct read_group *g = &d->groups[(d->groups_head + d->groups_len) % TK_DRIVER_READ_GROUPS_MAX];
    g->id = ++d->next_read_id;
    memcpy(g->round, d->want_round, sizeof(g->round));
    struct tk_raft_update up;
    int rc = tk_raft_read(d->core, g->id, d->now, &up);
    if (rc == TK_EFULL) {
        d->next_read_id--;
        return;
    }
    d->groups_len++;
    memset(d->want_round, 0, sizeof(d->want_round));
    if (rc != TK_OK) { /* not leader: these reads fail */
        struct tk_raft_read fail = {.id = g->id, .ok = 0};
        resolve_reads(d, &fail, 1);
    }
    tk_driver_process(d, rc, &up);
}

/* ------------------------------------------------------------------ */
/* Life */

int tk_driver_bootstrap(struct tk_driver *d, const struct tk_raft_config *c, uint64_t first_token)
{
    uint64_t first = first_token ? first_token : d->wall;
    if (d->wall < TK_DRIVER_TOKEN_EPOCH_US || first < TK_DRIVER_TOKEN_EPOCH_US) {
        driver_event(d, TK_DRIVER_EV_BOOTSTRAP_FAILED, TK_EINVAL, 0);
        return TK_EINVAL;
    }
    struct tk_raft_update up;
    int rc = tk_raft_bootstrap(d->core, c, first, d->now, &up);
    if (rc != TK_OK) {
        driver_event(d, TK_DRIVER_EV_BOOTSTRAP_FAILED, (uint64_t)rc, 0);
        return rc;
    }
    driver_event(d, TK_DRIVER_EV_BOOTSTRAP, first, c->n);
    if (c->serve_after_us) {
        /* What is left of the hold by this clock, now, counted on the
         * monotonic clock from here: a later step of the wall clock does
         * not shorten it. */
        uint64_t end = c->serve_after_us + d->o.drift_us;
        d->hold_until = d->now + (end > d->wall ? end - d->wall : 0);
    }
    tk_driver_process(d, rc, &up);
    return rc;
}

int tk_driver_transfer(struct tk_driver *d)
{
    struct tk_raft_update up;
    int rc = tk_raft_transfer(d->core, 0, d->now, &up);
    tk_driver_process(d, rc, &up);
    return rc;
}

struct tk_driver *tk_driver_create(const struct tk_driver_options *o,
                                   const struct tk_msg_out *out,
                                   const struct tk_driver_io *io)
{
    TK_ASSERT(o->nshards > 0 && o->nshards <= TK_DRIVER_SHARDS_MAX);
    TK_ASSERT(io->send && io->fatal);
    struct tk_driver *d = calloc(1, sizeof(*d));
    if (!d)
        return NULL;
    d->o = *o;
    d->o.advertise[TK_MSG_ADDR_MAX - 1] = 0;
    d->o.group[TK_SLOTS_NAME_MAX] = 0;
    d->out = *out;
    d->io = *io;
    d->core = tk_raft_create(&o->raft);
    if (!d->core) {
        free(d);
        return NULL;
    }
    members_init(d);
    return d;
}

void tk_driver_destroy(struct tk_driver *d)
{
    if (!d)
        return;
    drop_batches(d);
    if (d->spare) {
        free(d->spare->buf);
        free(d->spare);
    }
    snapshot_reset(d);
    slots_free(d);
    tk_raft_destroy(d->core);
    free(d);
}

struct tk_raft *tk_driver_core(struct tk_driver *d)
{
    return d->core;
}

const struct tk_raft_config *tk_driver_config(const struct tk_driver *d)
{
    return tk_raft_config(d->core);
}

void tk_driver_raft_status(const struct tk_driver *d, struct tk_raft_status *st)
{
    tk_raft_status(d->core, st);
}

const struct tk_raft_metrics *tk_driver_raft_metrics(const struct tk_driver *d)
{
    return tk_raft_metrics(d->core);
}

int tk_driver_role(const struct tk_driver *d)
{
    return (int)tk_raft_role(d->core);
}

uint64_t tk_driver_leader_id(const struct tk_driver *d)
{
    return tk_raft_leader(d->core);
}

void tk_driver_clock(struct tk_driver *d, uint64_t now_us, uint64_t wall_us)
{
    TK_ASSERT(now_us >= d->now);
    d->now = now_us;
    d->wall = wall_us;
}

void tk_driver_point_clients(struct tk_driver *d, const char *addr)
{
    size_t n = strnlen(addr, TK_MSG_ADDR_MAX - 1);
    if (d->leader_ready || (!strncmp(addr, d->leader_client, n) && d->leader_client[n] == 0))
        return;
    memcpy(d->leader_client, addr, n);
    d->leader_client[n] = 0;
    send_role(d, false);
}

bool tk_driver_serving(const struct tk_driver *d)
{
    return d->leader_ready;
}

const char *tk_driver_leader_addr(const struct tk_driver *d)
{
    return d->leader_client;
}

void tk_driver_stats(const struct tk_driver *d, struct tk_driver_stats *st)
{
    st->commands = d->m_commands;
    st->entries = d->m_entries;
    st->last_snapshot_bytes = d->m_snapshot_bytes;
    st->last_snapshot_cut_us = d->m_snapshot_cut_us;
    st->waiting_batches = d->nbatches;
    st->refused_batches = d->m_refused;
    st->epoch = d->epoch;
    st->applied = d->applied;
    st->serving = d->leader_ready;
    slots_stats(d, st);
}
