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
 * Transfer, leader side, per follower: a window of chunks. Chunks go out
 * back to back while the bytes sent and not yet acknowledged stay under
 * inflight_bytes_max (at least one chunk), the bound Appends use; every
 * reply says how many bytes arrived in order and slides the window. The
 * follower takes only the chunk at the offset it expects, so a lost,
 * duplicated or reordered chunk shows up as a reply that stays at an
 * offset the leader sent past: the chunks after it that arrived first were
 * dropped, so the leader sends the window again from there, or, if it did
 * so less than a resend timeout ago, just the missing chunk (once per
 * offset and timeout; the next gap, if any, shows the same way). When no
 * reply moved the window for a resend timeout (checked at heartbeats:
 * twice the last measured round trip, doubled at each expiry), the whole
 * window goes again from the acknowledged offset.
 * While the window waits, a heartbeat Append keeps the follower's election
 * timer and our check-quorum fed; its reply is an AppendReply, so it never
 * reads as a chunk ack. Peer links are TCP streams: chunks go missing only
 * with a connection, and they never arrive out of order (the simulator
 * reorders them, which costs a round trip per chunk out of place).
 *
 * A transfer keeps the blob it started with until it completes: taking a
 * newer snapshot while a transfer runs pins the older blob (snap_old)
 * instead of freeing it, so a follower that needs longer than the snapshot
 * interval still gets a whole snapshot. Memory stays bounded: one pinned
 * blob at most besides the current one. If the current blob is in use too
 * when yet another snapshot is taken, the pinned transfer keeps its blob
 * (transfers finish in the order they started) and the followers on the
 * middle one start over with the newest; unless no follower on the pinned
 * blob was heard from for an election timeout: a crashed follower must
 * not hold the pin that live ones need.
 *
 * Follower side: a chunk is checked before anything changes (raft.c calls
 * raft_snapshot_check first), chunks join only at the expected offset, and
 * a late chunk of a snapshot the same leader replaced is ignored.
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

/* The lowest snapshot index a live follower is being sent, when the log
 * after it fits half the log bounds; UINT64_MAX otherwise. Keeping those
 * entries lets the follower go on with Appends once it installs, instead
 * of chasing every newer snapshot over a slow link. end is the log's
 * cumulative bytes at the current snapshot. */
static uint64_t transfer_floor(const struct tk_raft *r, uint64_t end)
{
    if (r->role != TK_RAFT_LEADER)
        return UINT64_MAX; /* progress is a leader's */
    uint64_t floor = UINT64_MAX;
    for (uint32_t i = 0; i < r->config.n; i++) {
        const struct raft_progress *p = &r->prog[i];
        if (r->config.m[i].id != r->id && p->state == PROGRESS_SNAPSHOT && p->snap_index != 0 &&
            r->now_us - p->last_heard_us < r->opt.election_min_us)
            floor = TK_MIN(floor, p->snap_index);
    }
    if (floor == UINT64_MAX || floor < r->log.first - 1 || floor >= r->snap.index ||
        r->snap.index - floor > r->opt.log_entries_max / 2 ||
        end - raft_log_cum(&r->log, floor) > r->opt.log_bytes_max / 2)
        return UINT64_MAX;
    return floor;
}

void raft_log_trim(struct tk_raft *r)
{
    if (r->snap.index == 0)
        return;
    /* Never drop what the driver has not applied yet. */
    TK_ASSERT(r->snap.index <= r->applied);
    if (r->log.n == 0 || r->snap.index < r->log.first)
        return;
    /* The trailing entries let a follower just behind the snapshot catch up
     * with Appends. They are bounded in entries and in bytes (raft.h): by
     * count alone, 1024 entries of 1 MiB would fill the 1 GiB log bound,
     * and the leader would refuse every proposal forever. */
    uint64_t keep = TK_MIN(r->opt.snapshot_trailing, r->opt.log_entries_max / 4);
    uint64_t bytes_max = TK_MIN(r->opt.log_bytes_max / 4, r->opt.snapshot_bytes);
    uint64_t end = raft_log_cum(&r->log, r->snap.index);
    /* The lowest `to` that keeps at most `keep` entries and `bytes_max`
     * bytes after it: cum_bytes grows along the log, so bisect. */
    uint64_t lo = r->snap.index > keep ? r->snap.index - keep : 0;
    lo = TK_MAX(lo, r->log.first - 1);
    uint64_t hi = r->snap.index;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (end - raft_log_cum(&r->log, mid) <= bytes_max)
            hi = mid;
        else
            lo = mid + 1;
    }
    uint64_t to = TK_MIN(lo, transfer_floor(r, end));
    if (to < r->log.first)
        return;
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
    /* At half the log bounds in any case, so that the log can shrink
     * before a leader has to refuse proposals, whatever the options say. */
    bool hard = entries >= r->opt.log_entries_max / 2 || bytes >= r->opt.log_bytes_max / 2;
    if (!hard) {
        if (entries < r->opt.snapshot_entries && bytes < r->opt.snapshot_bytes)
            return;
        /* A cut lists the whole state: while the log since the last one
         * holds less than a share of that snapshot's bytes, the next waits
         * (for the hard bounds at the latest), so that a large table with
         * a busy log is not cut over and over for little. */
        if (r->opt.snapshot_log_share != 0 && bytes < r->snap.len / r->opt.snapshot_log_share)
            return;
    }
    r->snapshot_asked_index = r->applied;
    up->flags |= TK_RAFT_UPDATE_SNAPSHOT_WANTED;
    up->snapshot_index = r->applied;
}

/* Whether a transfer to some follower sends the snapshot at index; with
 * `live`, to a follower heard from within an election timeout (a crashed
 * or cut-off follower must not keep its blob from the live ones). */
static bool snap_in_use(const struct tk_raft *r, uint64_t index, bool live)
{
    if (r->role != TK_RAFT_LEADER || index == 0)
        return false;
    for (uint32_t i = 0; i < r->config.n; i++) {
        const struct raft_progress *p = &r->prog[i];
        if (r->config.m[i].id == r->id || p->state != PROGRESS_SNAPSHOT || p->snap_index != index)
            continue;
        if (!live || r->now_us - p->last_heard_us < r->opt.election_min_us)
            return true;
    }
    return false;
}

/* Chunks of a dropped blob may sit in this step's update: free it later. */
static void snap_discard(struct tk_raft *r, struct raft_snap *s)
{
    raft_log_discard(&r->log, s->data);
    memset(s, 0, sizeof(*s));
}

void raft_snap_unpin(struct tk_raft *r)
{
    if (r->snap_old.index != 0 && !snap_in_use(r, r->snap_old.index, false))
        snap_discard(r, &r->snap_old);
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
    /* A transfer that started with the current blob keeps it (pinned),
     * unless the one older blob allowed is in use by a live follower as
     * well: then that transfer keeps its blob (transfers finish in the
     * order they started), and the others start over with this one. */
    if (snap_in_use(r, r->snap.index, false) && !snap_in_use(r, r->snap_old.index, true)) {
        snap_discard(r, &r->snap_old);
        r->snap_old = r->snap;
    } else {
        raft_log_discard(&r->log, r->snap.data); /* chunks may sit in this step's update */
    }
    r->snap.index = index;
    r->snap.term = term;
    r->snap.token_next = token_next;
    r->snap.config = config;
    r->snap.data = len > 0 ? data : NULL;
    r->snap.len = len;
    r->snap.taken_us = r->now_us;
    if (len == 0)
        free(data);
    r->metrics.snapshots_taken++;
    raft_log_trim(r);
    return TK_OK;
}

/* The blob a transfer sends, or NULL if it gave way to a newer one. */
static const struct raft_snap *snap_of(const struct tk_raft *r, uint64_t index)
{
    if (index == 0)
        return NULL;
    if (index == r->snap.index)
        return &r->snap;
    if (index == r->snap_old.index)
        return &r->snap_old;
    return NULL;
}

/* Twice the last round trip measured (at least a heartbeat), doubled at
 * each expiry; two heartbeats until measured. */
static uint64_t snap_rto(const struct tk_raft *r, const struct raft_progress *p)
{
    return p->snap_rto_us != 0 ? p->snap_rto_us : 2 * r->opt.heartbeat_us;
}

/* Sends the chunk of s at offset to the follower in slot; returns its
 * length, or -1 if the message could not be allocated (lost like a
 * dropped one: the resend timeout covers it). */
static int64_t snap_send_chunk(struct tk_raft *r,
                               int slot,
                               const struct raft_snap *s,
                               uint64_t offset)
{
    TK_ASSERT(offset <= s->len);
    /* At most snapshot_chunk_bytes, a uint32_t: fits. */
    uint32_t len = (uint32_t)TK_MIN(s->len - offset, (uint64_t)r->opt.snapshot_chunk_bytes);
    struct tk_raft_msg *m = raft_out_msg(r, TK_RAFT_MSG_SNAPSHOT, r->config.m[slot].id);
    if (m == NULL)
        return -1;
    m->snapshot.index = s->index;
    m->snapshot.term = s->term;
    m->snapshot.token_next = s->token_next;
    m->snapshot.total = s->len;
    m->snapshot.offset = offset;
    /* Rounded down: a receiver that takes off too little keeps a lease a
     * little longer than this node would, never shorter. */
    uint64_t age_ms = (r->now_us - TK_MIN(r->now_us, s->taken_us)) / 1000u;
    m->snapshot.age_ms = (uint32_t)TK_MIN(age_ms, (uint64_t)UINT32_MAX);
    m->snapshot.len = len;
    m->snapshot.data = len > 0 ? s->data + offset : NULL;
    m->snapshot.config = &s->config;
    /* Only committed state goes out, so a "done" for any snapshot this
     * leader sent is within its commit (raft_recv_snapshot_reply). */
    TK_ASSERT(s->index <= r->commit);
    struct raft_progress *p = &r->prog[slot];
    p->snap_sent_us = r->now_us;
    p->snap_sent_hi = TK_MAX(p->snap_sent_hi, s->index);
    r->metrics.snapshot_chunks_sent++;
    return len;
}

void raft_send_snapshot(struct tk_raft *r, int slot, bool heartbeat)
{
    struct raft_progress *p = &r->prog[slot];
    TK_ASSERT(p->state == PROGRESS_SNAPSHOT);
    TK_ASSERT(r->snap.index > 0);
    const struct raft_snap *s = snap_of(r, p->snap_index);
    bool out = p->snap_end_sent || p->snap_next > p->snap_offset;
    if (s == NULL) {
        /* A new transfer, or its blob gave way: send the current one. */
        s = &r->snap;
        p->snap_index = s->index;
        p->snap_offset = 0;
        p->snap_next = 0;
        p->snap_sent_max = 0;
        p->snap_end_sent = false;
        p->snap_moved_us = r->now_us;
        p->snap_back_us = 0;
        p->snap_resent_off = UINT64_MAX;
        p->snap_rtt_off = 0;
    } else if (heartbeat && out && r->now_us - p->snap_moved_us >= snap_rto(r, p)) {
        /* Nothing moved for a timeout: whatever is out was lost (a link
         * that went down, say). Send the window again. */
        p->snap_rto_us = TK_MIN(2 * snap_rto(r, p), r->opt.election_max_us);
        p->snap_next = p->snap_offset;
        p->snap_end_sent = false;
        p->snap_moved_us = r->now_us;
        p->snap_back_us = r->now_us;
        r->metrics.snapshot_resends++;
    } else if (heartbeat && r->now_us - p->snap_sent_us >= r->opt.heartbeat_us) {
        /* Nothing went to the follower for a heartbeat: the window waits
         * for acks. */
        raft_send_heartbeat(r, slot);
        p->snap_sent_us = r->now_us;
    }
    TK_ASSERT(p->snap_offset <= p->snap_next);
    TK_ASSERT(p->snap_next <= s->len);
    uint64_t window = TK_MAX(r->opt.inflight_bytes_max, (uint64_t)r->opt.snapshot_chunk_bytes);
    while (!p->snap_end_sent && p->snap_next - p->snap_offset < window) {
        int64_t len = snap_send_chunk(r, slot, s, p->snap_next);
        if (len < 0)
            return;
        p->snap_next += (uint64_t)len;
        if (p->snap_next > p->snap_sent_max) {
            /* Sent for the first time: its ack may time the round trip.
             * An ack past it cannot come sooner than one round trip after
             * this, so the sample never underestimates. */
            if (p->snap_rtt_off == 0) {
                p->snap_rtt_off = p->snap_next;
                p->snap_rtt_us = r->now_us;
            }
            p->snap_sent_max = p->snap_next;
        }
        p->snap_end_sent = p->snap_next == s->len;
    }
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

/* What a chunk says about itself. The wire decoder checked the same
 * bounds, but the core takes messages from any driver. */
static bool snapshot_valid(const struct tk_raft *r, const struct tk_raft_msg *m)
{
    const struct tk_raft_config *c = m->snapshot.config;
    if (m->snapshot.index == 0 || m->snapshot.index > RAFT_INDEX_MAX)
        return false;
    if (m->snapshot.term == 0 || m->snapshot.term > m->term)
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

bool raft_snapshot_check(const struct tk_raft *r, const struct tk_raft_msg *m)
{
    if (!snapshot_valid(r, m))
        return false;
    if (m->term < r->term)
        return true; /* only answered with our term */
    if (raft_other_leader(r, m))
        return false;
    if (m->snapshot.index <= r->commit)
        return true; /* covered: acknowledged as done */
    /* SPEC 7: the fencing counter never goes back, so a snapshot past our
     * commit index continues the tokens of our committed entries. */
    const struct tk_raft_entry *e = raft_log_get(&r->log, r->commit);
    uint64_t token = e != NULL ? tk_raft_entry_token_next(e) : r->log.prev_token_next;
    return m->snapshot.token_next >= token;
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
    r->snap.taken_us = r->now_us - TK_MIN(r->now_us, (uint64_t)m->snapshot.age_ms * 1000u);
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
    raft_follow_leader(r, m->from);
    if (m->snapshot.index <= r->commit) {
        /* Everything it covers is committed here already. */
        if (r->in.index != 0 && r->in.index <= r->commit)
            raft_incoming_free(&r->in);
        reply_snapshot(r, m, m->snapshot.total, true);
        return;
    }
    struct raft_incoming *in = &r->in;
    bool same_leader = in->index != 0 && in->from == m->from && in->msg_term == m->term;
    if (same_leader && m->snapshot.index < in->index) {
        /* A leader moves a follower only to newer snapshots: this chunk is
         * a late one of a transfer it replaced; keep the newer one. */
        reply_snapshot(r, m, 0, false);
        return;
    }
    if (!same_leader || in->index != m->snapshot.index || in->term != m->snapshot.term ||
        in->total != m->snapshot.total) {
        if (m->snapshot.offset != 0) {
            reply_snapshot(r, m, 0, false);
            return;
        }
        raft_incoming_free(in);
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
    /* The buffer grows with the chunks that really arrive (doubling, up to
     * the announced total): a size announced in the first chunk is only a
     * claim, and a transfer that stops early holds what it got. */
    uint64_t need = in->received + m->snapshot.len;
    if (need > in->cap || in->buf == NULL) {
        uint64_t want = TK_MAX(need, TK_MIN(TK_MAX(in->cap * 2, (uint64_t)64 << 10), in->total));
        uint8_t *nb = realloc(in->buf, want > 0 ? (size_t)want : 1);
        if (nb == NULL)
            return; /* lost like a dropped message; the leader resends */
        in->buf = nb;
        in->cap = want;
    }
    /* The chunk fits, and the buffer never outgrows the announced total
     * (snapshot_bytes_max bounds that). */
    TK_ASSERT(need <= in->cap && in->cap <= in->total);
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

int raft_recv_snapshot_reply(struct tk_raft *r, const struct tk_raft_msg *m)
{
    if (r->role != TK_RAFT_LEADER)
        return TK_OK;
    int slot = raft_member_slot(r, m->from);
    if (slot < 0 || m->from == r->id)
        return TK_OK;
    struct raft_progress *p = &r->prog[slot];
    if (m->snapshot_reply.done) {
        /* It holds everything up to that index: its log matches there. A
         * follower answers "done" with the index of a chunk it was sent,
         * and only committed snapshots are sent (asserted there), so this
         * bound keeps the index within the commit too. A "done" for a
         * snapshot never sent to it is a claim nothing backs: counted as a
         * match, it could commit entries no majority holds, or pass a
         * learner as caught up. */
        uint64_t index = m->snapshot_reply.index;
        if (index > p->snap_sent_hi)
            return TK_EPROTO;
        p->last_heard_us = r->now_us;
        if (p->state == PROGRESS_SNAPSHOT && index >= p->snap_index) {
            r->metrics.snapshots_sent++;
            p->state = PROGRESS_PROBE;
            p->paused = false;
            p->next = index + 1;
        }
        raft_leader_progress(r, slot, index);
        return TK_OK;
    }
    const struct raft_snap *s = snap_of(r, p->snap_index);
    bool current =
        p->state == PROGRESS_SNAPSHOT && s != NULL && m->snapshot_reply.index == p->snap_index;
    uint64_t off = m->snapshot_reply.offset;
    if (current && off > s->len)
        return TK_EPROTO; /* more bytes than the blob has */
    p->last_heard_us = r->now_us;
    if (!current)
        return TK_OK; /* about a transfer that is over */
    if (off > p->snap_offset) {
        if (p->snap_rtt_off != 0 && off >= p->snap_rtt_off) {
            uint64_t rtt = r->now_us - p->snap_rtt_us;
            p->snap_rto_us = TK_MAX(TK_MIN(2 * rtt, r->opt.election_max_us), r->opt.heartbeat_us);
            p->snap_rtt_off = 0;
        }
        p->snap_offset = off;
        p->snap_moved_us = r->now_us;
        if (p->snap_next < off)
            p->snap_next = off; /* acks of chunks sent before the window was resent */
        return TK_OK;
    }
    uint64_t rto = snap_rto(r, p);
    if (off != p->snap_offset || !(p->snap_end_sent || p->snap_next > off))
        return TK_OK;
    /* A chunk after `off` arrived and `off` did not move: the chunk at
     * `off` was lost or comes late, and the ones after it that arrived
     * first were dropped (a follower takes chunks in order only). */
    if (r->now_us - p->snap_back_us >= rto) {
        /* Send the window again from there (at most once per timeout:
         * the duplicates it makes answer with offsets that do not move
         * either). */
        p->snap_next = off;
        p->snap_end_sent = false;
        p->snap_back_us = r->now_us;
        p->snap_resent_off = off;
        p->snap_resent_us = r->now_us;
        r->metrics.snapshot_resends++;
    } else if (off != p->snap_resent_off || r->now_us - p->snap_resent_us >= rto) {
        /* In between, the one chunk, once per offset and timeout (the
         * dropped chunks all answer with the same offset). */
        if (snap_send_chunk(r, slot, s, off) >= 0) {
            p->snap_resent_off = off;
            p->snap_resent_us = r->now_us;
            r->metrics.snapshot_resends++;
        }
    }
    return TK_OK;
}
