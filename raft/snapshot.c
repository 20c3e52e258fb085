/* Snapshots: asking for one, taking it, trimming the log, sending it in
 * chunks, and assembling and installing it on the follower (§7, thesis §5).
 *
 * The core never looks inside a snapshot: the driver cuts it from its
 * state machine at an applied index and hands the blob over; the core
 * keeps it with the metadata a follower needs to continue the log after
 * it (last index and term, config, fencing counter) and sends it to a
 * follower whose next entry was compacted away.
 *
 * Chunks join only if they come from the same leader and term: two nodes
 * may serialize the same state differently.
 *
 * Transfer is stop-and-wait per follower: one chunk out, the reply says
 * how many bytes arrived, the next chunk follows; a chunk without a reply
 * is resent at the next heartbeat. A follower that is sent a newer
 * snapshot, or a chunk at an offset it did not expect, says where it
 * stands and the leader continues from there.
 */
#include "raft/internal.h"

#include <stdlib.h>
#include <string.h>

void raft_snap_free(struct raft_snap *s)
{
    free(s->data);
    memset(s, 0, sizeof(*s));
}

void raft_incoming_free(struct raft_incoming *in)
{
    free(in->buf);
    memset(in, 0, sizeof(*in));
}

void raft_log_trim(struct tk_raft *r)
{
    if (r->snap.index == 0)
        return;
    uint64_t keep = r->opt.snapshot_trailing;
    uint64_t to = r->snap.index > keep ? r->snap.index - keep : 0;
    /* Never drop what the driver has not applied yet. */
    TK_ASSERT(r->snap.index <= r->applied);
    if (to < r->log.first || r->log.n == 0)
        return;
    to = TK_MIN(to, raft_log_last(&r->log));
    raft_config_at(r, to, &r->base_config);
    r->has_base_config = true;
    raft_log_compact(&r->log, to);
}

void raft_snapshot_maybe_ask(struct tk_raft *r, struct tk_raft_update *up)
{
    if (r->applied <= r->snap.index || r->applied == r->snapshot_asked_index)
        return;
    uint64_t entries = r->applied - r->snap.index;
    uint64_t bytes = raft_log_cum(&r->log, r->applied) - raft_log_cum(&r->log, r->snap.index);
    if (entries < r->opt.snapshot_entries && bytes < r->opt.snapshot_bytes)
        return;
    r->snapshot_asked_index = r->applied;
    up->flags |= TK_RAFT_UPDATE_SNAPSHOT_WANTED;
    up->snapshot_index = r->applied;
}

int raft_snapshot_taken(struct tk_raft *r, uint64_t index, uint8_t *data, size_t len)
{
    bool known = false;
    uint64_t term = raft_log_term(&r->log, index, &known);
    if (index <= r->snap.index || index > r->commit || !known || (len > 0 && data == NULL)) {
        free(data);
        return TK_EINVAL;
    }
    /* The blob reflects every entry up to index: that is an apply report. */
    if (index > r->applied)
        r->applied = index;
    const struct tk_raft_entry *e = raft_log_get(&r->log, index);
    uint64_t token_next = e != NULL ? tk_raft_entry_token_next(e) : r->log.prev_token_next;
    struct tk_raft_config config;
    raft_config_at(r, index, &config);
    /* Chunks of the old snapshot may sit in this step's update. */
    raft_log_discard(&r->log, r->snap.data);
    r->snap.index = index;
    r->snap.term = term;
    r->snap.token_next = token_next;
    r->snap.config = config;
    r->snap.data = len > 0 ? data : NULL;
    r->snap.len = len;
    if (len == 0)
        free(data);
    r->metrics.snapshots_taken++;
    raft_log_trim(r);
    return TK_OK;
}

void raft_send_snapshot_chunk(struct tk_raft *r, int slot)
{
    struct raft_progress *p = &r->prog[slot];
    TK_ASSERT(p->state == PROGRESS_SNAPSHOT);
    TK_ASSERT(r->snap.index > 0);
    if (p->snap_index != r->snap.index) {
        /* A newer snapshot replaced the one being sent: start over. */
        p->snap_index = r->snap.index;
        p->snap_offset = 0;
    }
    TK_ASSERT(p->snap_offset <= r->snap.len);
    uint64_t left = r->snap.len - p->snap_offset;
    /* At most snapshot_chunk_bytes, a uint32_t: fits. */
    uint32_t len = (uint32_t)TK_MIN(left, (uint64_t)r->opt.snapshot_chunk_bytes);
    struct tk_raft_msg *m = raft_out_msg(r, TK_RAFT_MSG_SNAPSHOT, r->config.m[slot].id);
    if (m == NULL)
        return;
    m->snapshot.index = r->snap.index;
    m->snapshot.term = r->snap.term;
    m->snapshot.token_next = r->snap.token_next;
    m->snapshot.total = r->snap.len;
    m->snapshot.offset = p->snap_offset;
    m->snapshot.len = len;
    m->snapshot.data = len > 0 ? r->snap.data + p->snap_offset : NULL;
    m->snapshot.config = &r->snap.config;
    p->snap_waiting = true;
    r->metrics.snapshot_chunks_sent++;
}

/* ------------------------------------------------------------------ */
/* Follower                                                            */

static void reply_snapshot(struct tk_raft *r,
                           const struct tk_raft_msg *m,
                           uint64_t offset,
                           bool done)
{
    struct tk_raft_msg *reply = raft_out_msg(r, TK_RAFT_MSG_SNAPSHOT_REPLY, m->from);
    if (reply == NULL)
        return;
    reply->snapshot_reply.index = m->snapshot.index;
    reply->snapshot_reply.offset = offset;
    reply->snapshot_reply.done = done;
}

static bool snapshot_valid(const struct tk_raft *r, const struct tk_raft_msg *m)
{
    const struct tk_raft_config *c = m->snapshot.config;
    if (m->snapshot.index == 0 || m->snapshot.term == 0 || m->snapshot.term > m->term)
        return false;
    if (m->snapshot.total > r->opt.snapshot_bytes_max || m->snapshot.offset > m->snapshot.total)
        return false;
    if (m->snapshot.len > m->snapshot.total - m->snapshot.offset)
        return false;
    if (m->snapshot.len > 0 && m->snapshot.data == NULL)
        return false;
    if (c == NULL || tk_raft_config_check(c) != TK_OK)
        return false;
    if (r->has_config &&
        (c->domain_lo != r->config.domain_lo || c->domain_hi != r->config.domain_hi))
        return false;
    return true;
}

/* The last chunk arrived: replace the log and the state machine. */
static void snapshot_install(struct tk_raft *r, const struct tk_raft_msg *m)
{
    uint64_t index = m->snapshot.index;
    uint64_t term = m->snapshot.term;
    TK_ASSERT(index > r->commit);
    bool known = false;
    uint64_t have = raft_log_term(&r->log, index, &known);
    if (known && have == term) {
        /* Thesis §5.3: the log already has the entry the snapshot ends
         * with, so it has everything before it too; keep the log and let
         * commit catch up through it. */
        raft_commit_to(r, index);
        raft_incoming_free(&r->in);
        return;
    }
    /* Whatever follows commit is discarded; entries up to commit were
     * committed here and are covered by the snapshot. */
    raft_log_reset(&r->log, index, term, m->snapshot.token_next);
    raft_log_discard(&r->log, r->snap.data);
    r->snap.index = index;
    r->snap.term = term;
    r->snap.token_next = m->snapshot.token_next;
    r->snap.config = *m->snapshot.config;
    r->snap.data = r->in.total > 0 ? r->in.buf : NULL;
    r->snap.len = r->in.total;
    if (r->in.total == 0)
        free(r->in.buf);
    memset(&r->in, 0, sizeof(r->in));
    r->base_config = r->snap.config;
    r->has_base_config = true;
    raft_config_set(r, &r->snap.config, index);
    raft_commit_to(r, index);
    r->applied = index;
    r->install_pending = true;
    r->metrics.snapshots_installed++;
    raft_reset_election_timer(r); /* it may have just learned it is a voter */
}

void raft_recv_snapshot(struct tk_raft *r, const struct tk_raft_msg *m)
{
    if (m->term < r->term) {
        reply_snapshot(r, m, 0, false); /* tells the stale leader our term */
        return;
    }
    TK_ASSERT(m->term == r->term);
    if (!snapshot_valid(r, m)) {
        r->metrics.messages_invalid++;
        return;
    }
    raft_follow_leader(r, m->from);
    if (m->snapshot.index <= r->commit) {
        /* Everything it covers is committed here already. */
        if (r->in.index != 0 && r->in.index <= r->commit)
            raft_incoming_free(&r->in);
        reply_snapshot(r, m, m->snapshot.total, true);
        return;
    }
    struct raft_incoming *in = &r->in;
    if (in->index != m->snapshot.index || in->term != m->snapshot.term ||
        in->total != m->snapshot.total || in->from != m->from || in->msg_term != m->term) {
        if (m->snapshot.offset != 0) {
            reply_snapshot(r, m, 0, false);
            return;
        }
        raft_incoming_free(in);
        in->buf = malloc(m->snapshot.total > 0 ? m->snapshot.total : 1);
        if (in->buf == NULL)
            return; /* lost like a dropped message; the leader resends */
        in->index = m->snapshot.index;
        in->term = m->snapshot.term;
        in->total = m->snapshot.total;
        in->from = m->from;
        in->msg_term = m->term;
        in->received = 0;
    }
    if (m->snapshot.offset != in->received) {
        reply_snapshot(r, m, in->received, false);
        return;
    }
    if (m->snapshot.len > 0)
        memcpy(in->buf + in->received, m->snapshot.data, m->snapshot.len);
    in->received += m->snapshot.len;
    if (in->received < in->total) {
        reply_snapshot(r, m, in->received, false);
        return;
    }
    snapshot_install(r, m);
    reply_snapshot(r, m, m->snapshot.total, true);
}

/* ------------------------------------------------------------------ */
/* Leader                                                              */

void raft_recv_snapshot_reply(struct tk_raft *r, const struct tk_raft_msg *m)
{
    if (r->role != TK_RAFT_LEADER)
        return;
    int slot = raft_member_slot(r, m->from);
    if (slot < 0 || m->from == r->id)
        return;
    struct raft_progress *p = &r->prog[slot];
    p->last_heard_us = r->now_us;
    if (m->snapshot_reply.done) {
        /* It holds everything up to that index: its log matches there. */
        uint64_t index = m->snapshot_reply.index;
        if (index > raft_log_last(&r->log)) {
            r->metrics.messages_invalid++;
            return;
        }
        if (p->state == PROGRESS_SNAPSHOT && index >= p->snap_index) {
            r->metrics.snapshots_sent++;
            p->state = PROGRESS_PROBE;
            p->paused = false;
            p->snap_waiting = false;
            p->next = index + 1;
        }
        raft_leader_progress(r, slot, index);
        return;
    }
    if (p->state != PROGRESS_SNAPSHOT || m->snapshot_reply.index != p->snap_index)
        return;
    p->snap_waiting = false;
    if (p->snap_index != r->snap.index)
        return; /* the next chunk goes out with the new snapshot, from 0 */
    p->snap_offset = TK_MIN(m->snapshot_reply.offset, (uint64_t)r->snap.len);
}
