/* What the Raft thread publishes for the admin thread: the /status JSON
 * fields, the Raft and peer metrics, and two histograms (commands per
 * entry, time from proposal to commit). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "net/raftd.h"
#include "raft/members.h"

static const uint64_t batch_bounds[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096};
static const uint64_t latency_bounds_us[] = {10,   25,   50,    100,   250,   500,    1000,
                                             2500, 5000, 10000, 25000, 50000, 100000, 1000000};
#define NBATCH TK_ARRAY_LEN(batch_bounds)
#define NLAT TK_ARRAY_LEN(latency_bounds_us)

void raftd_hist_add(void *raftd, int which, uint64_t v)
{
    struct tk_raftd *r = raftd;
    if (which == RAFTD_HIST_BATCH)
        tk_hist_add(&r->batch_hist, batch_bounds, NBATCH, v);
    else
        tk_hist_add(&r->latency, latency_bounds_us, NLAT, v);
}

/* Per member, labelled with its NodeId: whether this node has an
 * authenticated link to it (every node), and on the leader how far it
 * trails the commit index and how long ago it was last heard from. */
static void member_metrics(struct tk_raftd *r,
                           const struct tk_raft_status *st,
                           char *buf,
                           size_t cap,
                           size_t *off)
{
    const struct tk_raft_config *cfg = tk_driver_config(r->d);
    bool leading = st->role == TK_RAFT_LEADER;
    if (cfg != NULL && r->peers != NULL) {
        tk_put(buf, cap, off,
               "# HELP ticketing_peer_link_up 1 while this node has an authenticated link to "
               "the member.\n# TYPE ticketing_peer_link_up gauge\n");
        for (uint32_t i = 0; i < cfg->n; i++) {
            const struct tk_raft_member *mb = &cfg->m[i];
            if (mb->id == r->s->node_id)
                continue;
            const struct tk_plink *l = tk_peers_find(r->peers, mb->peer_addr);
            bool up = l != NULL && tk_plink_ready(l) && tk_plink_remote_id(l) == mb->id;
            tk_put(buf, cap, off, "ticketing_peer_link_up{peer=\"%016llx\"} %d\n",
                   (unsigned long long)mb->id, up ? 1 : 0);
        }
    }
    if (!leading)
        return;
    tk_put(buf, cap, off,
           "# HELP ticketing_raft_member_lag_entries Committed entries a member has not "
           "acknowledged (leader's view).\n# TYPE ticketing_raft_member_lag_entries gauge\n");
    for (uint32_t i = 0; i < st->n_members; i++) {
        const struct tk_raft_member_status *ms = &st->members[i];
        tk_put(buf, cap, off,
               "ticketing_raft_member_lag_entries{peer=\"%016llx\",role=\"%s\"} %llu\n",
               (unsigned long long)ms->id, ms->role == TK_RAFT_VOTER ? "voter" : "learner",
               (unsigned long long)(st->commit > ms->match ? st->commit - ms->match : 0));
    }
    tk_put(buf, cap, off,
           "# HELP ticketing_raft_member_last_contact_seconds Time since the leader last heard "
           "from the member.\n# TYPE ticketing_raft_member_last_contact_seconds gauge\n");
    for (uint32_t i = 0; i < st->n_members; i++) {
        const struct tk_raft_member_status *ms = &st->members[i];
        if (ms->id == st->id)
            continue;
        uint64_t ago = r->now >= ms->last_heard_us ? r->now - ms->last_heard_us : 0;
        tk_put(buf, cap, off, "ticketing_raft_member_last_contact_seconds{peer=\"%016llx\"} %g\n",
               (unsigned long long)ms->id, (double)ago * 1e-6);
    }
}

/* What /status and /members are made of, read once a publish. */
struct pub {
    struct tk_raftd *r;
    const struct tk_raft_status *st;
    const struct tk_driver_members *dm;
    const struct tk_raft_config *cfg;    /* NULL before the first configuration */
    const struct tk_raft_member *leader; /* the known leader's entry, or NULL */
    bool ready;
};

/* The last contact with member ms in milliseconds, as the leader sees it
 * (0 for itself); -1 where this node does not know it (not leading). */
static int64_t member_contact_ms(const struct pub *p, const struct tk_raft_member_status *ms)
{
    if (p->st->role != TK_RAFT_LEADER)
        return -1;
    if (ms->id == p->st->id || p->r->now < ms->last_heard_us)
        return 0;
    return (int64_t)((p->r->now - ms->last_heard_us) / 1000u);
}

/* One member as /status and /members list it. typed (/members): what only
 * the leader knows is null elsewhere, and the role is a word; /status
 * keeps its older form (a voter flag, 0 and -1 for the unknown). */
static void member_json(struct tk_json *j,
                        const struct pub *p,
                        const struct tk_raft_member_status *ms,
                        bool typed)
{
    const struct tk_raft_member *mb = tk_raft_config_find(p->cfg, ms->id);
    bool leading = p->st->role == TK_RAFT_LEADER;
    uint64_t lag = leading && p->st->commit > ms->match ? p->st->commit - ms->match : 0;
    tk_json_obj_open(j);
    tk_json_khex64(j, "id", ms->id);
    if (typed)
        tk_json_kstr(j, "role", ms->role == TK_RAFT_VOTER ? "voter" : "learner");
    else
        tk_json_kbool(j, "voter", ms->role == TK_RAFT_VOTER);
    tk_json_kstr(j, "peer_addr", mb ? mb->peer_addr : typed ? NULL : "");
    tk_json_kstr(j, "client_addr", mb ? mb->client_addr : typed ? NULL : "");
    if (typed && !leading) {
        static const char *const unknown[] = {"match_index", "lag", "last_contact_ms"};
        for (size_t k = 0; k < TK_ARRAY_LEN(unknown); k++) {
            tk_json_key(j, unknown[k]);
            tk_json_null(j);
        }
    } else {
        tk_json_kuint(j, "match_index", ms->match);
        tk_json_kuint(j, "lag", lag);
        tk_json_kint(j, "last_contact_ms", member_contact_ms(p, ms));
    }
    tk_json_kbool(j, "leader", ms->id == p->st->leader_id);
    tk_json_obj_close(j);
}

/* The fields both texts end with: where this node stands, and the members. */
static void membership_json(struct tk_json *j, const struct pub *p, bool typed)
{
    tk_json_kstr(j, "membership", tk_driver_membership_name(p->dm->state));
    tk_json_kstr(j, "membership_note", p->dm->note);
    tk_json_kbool(j, "ready", p->ready);
    tk_json_key(j, "members");
    tk_json_arr_open(j);
    for (uint32_t i = 0; p->cfg && i < p->st->n_members; i++)
        member_json(j, p, &p->st->members[i], typed);
    tk_json_arr_close(j);
}

/* Keys held in slots first..last, over every worker's last publication. */
static uint64_t range_held(const struct tk_server *s, uint32_t first, uint32_t last)
{
    uint64_t n = 0;
    for (uint32_t w = 0; w < s->nworkers; w++)
        for (uint32_t i = first; i <= last; i++)
            n += atomic_load_explicit(&s->slot_held[w][i], memory_order_relaxed);
    return n;
}

/* SPEC 15: this node's group and what the committed ring gives it. */
static void ring_json(struct tk_json *j, const struct pub *p)
{
    const char *name;
    const struct tk_slot_ring *ring = tk_driver_ring(p->r->d, &name);
    const char *flag = p->r->s->opt.group;
    struct tk_driver_stats ds;
    tk_driver_stats(p->r->d, &ds);
    tk_json_kstr(j, "group", ring ? name : flag[0] ? flag : "default");
    tk_json_kuint(j, "ring_version", ds.ring_version);
    tk_json_kuint(j, "slots_owned", ds.slots_owned);
    tk_json_kuint(j, "slots_frozen", ds.slots_frozen);
    struct tk_driver_move mv[16];
    uint32_t nmv = tk_driver_moves(p->r->d, mv, 16);
    tk_json_key(j, "moves");
    tk_json_arr_open(j);
    for (uint32_t i = 0; i < nmv; i++) {
        tk_json_obj_open(j);
        tk_json_kuint(j, "first", mv[i].first);
        tk_json_kuint(j, "last", mv[i].last);
        tk_json_kstr(j, "state", mv[i].state);
        tk_json_kstr(j, mv[i].state[0] == 'c' ? "from" : "to", mv[i].peer);
        tk_json_kuint(j, "counter", mv[i].counter);
        if (mv[i].state[0] == 'f')
            tk_json_kuint(j, "held", range_held(p->r->s, mv[i].first, mv[i].last));
        tk_json_obj_close(j);
    }
    tk_json_arr_close(j);
    tk_json_key(j, "ranges_owned");
    tk_json_arr_open(j);
    if (!ring && !flag[0]) {
        tk_json_obj_open(j);
        tk_json_kuint(j, "first", 0);
        tk_json_kuint(j, "last", TK_SLOTS - 1);
        tk_json_obj_close(j);
    }
    for (uint32_t i = 0; ring && i < ring->nranges; i++) {
        const struct tk_slot_range *r = &ring->ranges[i];
        if (strcmp(ring->groups[r->group].name, name) != 0)
            continue;
        tk_json_obj_open(j);
        tk_json_kuint(j, "first", r->first);
        tk_json_kuint(j, "last", r->last);
        tk_json_kuint(j, "held", range_held(p->r->s, r->first, r->last));
        tk_json_obj_close(j);
    }
    tk_json_arr_close(j);
}

/* The Raft fields of /status: members of its object, without the braces
 * (net/admin.c puts them after the node's own). */
static size_t status_fields(const struct pub *p, char *buf, size_t cap)
{
    const struct tk_raft_status *st = p->st;
    struct tk_json j;
    tk_json_init_members(&j, buf, cap);
    tk_json_kstr(&j, "role", tk_raft_role_name(st->role));
    tk_json_kstr(&j, "mode", p->r->peers ? "cluster" : "standalone");
    tk_json_kuint(&j, "term", st->term);
    tk_json_khex64(&j, "leader", st->leader_id);
    tk_json_kstr(&j, "leader_addr", p->leader ? p->leader->client_addr : "");
    tk_json_kbool(&j, "serving", tk_driver_serving(p->r->d));
    tk_json_kuint(&j, "commit_index", st->commit);
    tk_json_kuint(&j, "applied_index", st->applied);
    tk_json_kuint(&j, "last_index", st->last_index);
    tk_json_kuint(&j, "snapshot_index", st->snapshot_index);
    tk_json_kuint(&j, "log_entries", st->log_entries);
    tk_json_kuint(&j, "next_token", st->token_next);
    ring_json(&j, p);
    membership_json(&j, p, false);
    /* raftd.h sizes the buffer for the longest addresses and note. */
    TK_ASSERT(tk_json_ok(&j));
    return j.len;
}

/* /members: the domain, the term, the leader as far as this node knows it,
 * and the members; match, lag and last contact only on the leader. */
static size_t members_doc(const struct pub *p, char *buf, size_t cap)
{
    const struct tk_raft_status *st = p->st;
    char domain[33];
    snprintf(domain, sizeof(domain), "%016llx%016llx",
             (unsigned long long)(p->cfg ? p->cfg->domain_hi : 0),
             (unsigned long long)(p->cfg ? p->cfg->domain_lo : 0));
    struct tk_json j;
    tk_json_init(&j, buf, cap);
    tk_json_obj_open(&j);
    tk_json_khex64(&j, "node_id", p->r->s->node_id);
    tk_json_kstr(&j, "domain", domain);
    tk_json_kstr(&j, "mode", p->r->peers ? "cluster" : "standalone");
    tk_json_kstr(&j, "role", tk_raft_role_name(st->role));
    tk_json_kuint(&j, "term", st->term);
    tk_json_kstr(&j, "view", st->role == TK_RAFT_LEADER ? "leader" : "member");
    tk_json_key(&j, "leader");
    if (st->leader_id == 0) {
        tk_json_null(&j);
    } else {
        tk_json_obj_open(&j);
        tk_json_khex64(&j, "id", st->leader_id);
        tk_json_kstr(&j, "peer_addr", p->leader ? p->leader->peer_addr : NULL);
        tk_json_kstr(&j, "client_addr", p->leader ? p->leader->client_addr : NULL);
        tk_json_obj_close(&j);
    }
    membership_json(&j, p, true);
    tk_json_obj_close(&j);
    size_t len = tk_json_end(&j);
    TK_ASSERT(len > 0); /* sized for the worst case in raftd.h */
    return len;
}

void raftd_publish(struct tk_raftd *r)
{
    struct tk_raft_status st;
    tk_driver_raft_status(r->d, &st);
    const struct tk_raft_metrics *m = tk_driver_raft_metrics(r->d);
    struct tk_driver_members dm;
    tk_driver_members(r->d, &dm);
    struct tk_driver_stats ds;
    tk_driver_stats(r->d, &ds);
    const struct tk_raft_config *cfg = tk_driver_config(r->d);
    struct pub p = {.r = r, .st = &st, .dm = &dm, .cfg = cfg};
    p.leader = st.leader_id && cfg ? tk_raft_config_find(cfg, st.leader_id) : NULL;
    if (cfg) {
        atomic_store(&r->s->domain_lo, cfg->domain_lo);
        atomic_store(&r->s->domain_hi, cfg->domain_hi);
    }
    /* Ready (SPEC 12, /readyz): a voter that knows its leader, has applied
     * what it knows committed, and whose predecessor at its address is out
     * of the configuration, so a rolling update may take the next member. */
    bool ready = cfg && st.leader_id != 0 && st.applied >= st.commit &&
                 !tk_members_replacing(cfg, r->s->node_id) && !r->removed;
    if (st.role == TK_RAFT_LEADER)
        ready = ready && tk_driver_serving(r->d);
    atomic_store(&r->ready, ready);
    p.ready = ready;
    uint32_t n_voters = 0, n_learners = 0;
    for (uint32_t i = 0; cfg && i < cfg->n; i++)
        *(cfg->m[i].role == TK_RAFT_VOTER ? &n_voters : &n_learners) += 1;
    char *buf = malloc(sizeof(r->status_json));
    char *mem = malloc(sizeof(r->members_json));
    TK_ASSERT(buf != NULL);
    TK_ASSERT(mem != NULL);
    size_t status_len = status_fields(&p, buf, sizeof(r->status_json));
    size_t members_len = members_doc(&p, mem, sizeof(r->members_json));
    struct tk_peer_stats ps = {0};
    if (r->peers)
        tk_peers_stats(r->peers, &ps);
    /* A name is a family and, for a family of several samples, its labels
     * in braces. Rows of one family are adjacent and the first carries the
     * help: HELP and TYPE come once, before the family's first sample. */
    const struct {
        const char *name, *type, *help;
        uint64_t v;
    } rows[] = {
        {"raft_term", "gauge", "Current Raft term", st.term},
        {"raft_voters", "gauge", "Voters in the configuration", n_voters},
        {"raft_learners", "gauge", "Learners in the configuration (joining members)", n_learners},
        {"raft_ready", "gauge", "1 while /readyz answers 200", ready},
        {"raft_joins_total", "counter", "Fresh NodeIds this node added as learners", dm.joins},
        {"raft_membership_changes_total", "counter",
         "Membership changes this node proposed as leader", dm.changes},
        {"raft_is_leader", "gauge", "1 while this node is the Raft leader",
         st.role == TK_RAFT_LEADER},
        {"raft_serving", "gauge", "1 while this node serves clients as leader",
         tk_driver_serving(r->d)},
        {"raft_commit_index", "gauge", "Index of the last committed log entry", st.commit},
        {"raft_applied_index", "gauge", "Index of the last applied log entry", st.applied},
        {"raft_log_entries", "gauge", "Log entries in memory", st.log_entries},
        {"raft_log_entries_max", "gauge", "Bound on log entries in memory (--max-log-entries)",
         r->s->opt.max_log_entries},
        {"raft_log_bytes", "gauge", "Bytes of log entry data in memory", st.log_bytes},
        {"raft_elections_total", "counter", "Elections this node started", m->elections_started},
        {"raft_prevotes_total", "counter", "Pre-votes this node started", m->prevotes_started},
        {"raft_prevotes_reasked_total", "counter",
         "Pre-votes asked again of a voter that had lost its leader too", m->prevotes_reasked},
        {"raft_leader_changes_total", "counter", "Changes of the known leader", m->leader_changes},
        {"raft_step_downs_total", "counter", "Check-quorum step-downs", m->step_downs_quorum},
        {"raft_transfers_total", "counter", "Leadership transfers (TimeoutNow sent)", m->transfers},
        {"raft_appends_sent_total", "counter", "Append messages sent (heartbeats included)",
         m->appends_sent},
        {"raft_append_entries_sent_total", "counter", "Entries carried by Append messages",
         m->entries_sent},
        {"raft_snapshots_total{event=\"taken\"}", "counter",
         "Snapshots by event (taken, sent to followers, installed)", m->snapshots_taken},
        {"raft_snapshots_total{event=\"sent\"}", "counter", NULL, m->snapshots_sent},
        {"raft_snapshots_total{event=\"installed\"}", "counter", NULL, m->snapshots_installed},
        {"raft_snapshot_bytes", "gauge", "Size of the last snapshot taken", ds.last_snapshot_bytes},
        {"raft_proposals_refused_total", "counter", "Proposals the core refused",
         m->proposals_refused},
        {"raft_messages_invalid_total", "counter",
         "Peer messages refused as malformed or contradicting the log", m->messages_invalid},
        {"raft_snapshot_resends_total", "counter",
         "Snapshot chunks sent again (lost or unacknowledged)", m->snapshot_resends},
        {"raft_entries_total", "counter", "Log entries proposed by this node", ds.entries},
        {"raft_commands_total", "counter", "Lock commands applied", ds.commands},
        {"raft_batches_waiting", "gauge", "Complete batches waiting for room in the log",
         ds.waiting_batches},
        {"raft_batches_refused_total", "counter",
         "Batches refused while leading (clients told to reconnect)", ds.refused_batches},
        {"fencing_next_token", "gauge", "Next fencing token", st.token_next},
        {"ring_version", "gauge", "Version of the committed ring (0: none; SPEC 15)",
         ds.ring_version},
        {"slots_owned", "gauge", "Slots this group owns in the committed ring", ds.slots_owned},
        {"ring_entries_total{result=\"applied\"}", "counter",
         "Ring entries applied (changed the ring) or refused at their apply", ds.rings_applied},
        {"ring_entries_total{result=\"refused\"}", "counter", NULL, ds.rings_refused},
        {"slots_frozen", "gauge", "Owned slots frozen for moves in progress", ds.slots_frozen},
        {"move_steps_total{step=\"freeze\"}", "counter",
         "Steps of slot moves committed in this group", ds.moves_frozen},
        {"move_steps_total{step=\"handover\"}", "counter", NULL, ds.moves_handed},
        {"move_steps_total{step=\"claim\"}", "counter", NULL, ds.moves_claimed},
        {"peer_frames_total{direction=\"in\"}", "counter",
         "Peer frames received (in) and sent (out)", ps.frames_in},
        {"peer_frames_total{direction=\"out\"}", "counter", NULL, ps.frames_out},
        {"peer_frames_dropped_total", "counter", "Peer frames dropped (link down or slow)",
         ps.frames_dropped},
        {"peer_frames_oversize_total", "counter", "Peer frames over --max-frame-bytes",
         ps.frames_oversize},
        {"peer_resolves_total", "counter", "Peer name lookups (off the Raft thread)", ps.resolves},
        {"peer_resolve_failures_total", "counter", "Peer name lookups that failed",
         ps.resolve_failures},
        {"peer_frames_malformed_total", "counter", "Malformed peer frames", ps.frames_malformed},
        {"peer_frame_bytes_max", "gauge", "Bound on peer frame size (--max-frame-bytes)",
         r->s->opt.max_frame_bytes},
        {"peer_handshakes_total", "counter", "Peer handshakes completed", ps.handshakes},
        {"peer_handshake_timeouts_total", "counter",
         "Peer links that did not finish the "
         "handshake in time",
         ps.handshake_timeouts},
        {"peer_auth_failures_total", "counter", "Failed peer handshakes", ps.auth_failures},
        {"peer_tls_failures_total", "counter",
         "Peer links closed by a TLS failure (handshake, certificate, plaintext peer)",
         ps.tls_failures},
        {"peer_dials_total", "counter", "Outbound peer connection attempts", ps.dials},
        {"peer_handshakes_evicted_total", "counter",
         "Unauthenticated peer links closed to admit a newer one", ps.handshakes_evicted},
        {"peer_links_evicted_total{reason=\"not_member\"}", "counter",
         "Peer links closed to keep the link table for members: outbound links to addresses "
         "no longer in --peers or the configuration (not_member), authenticated inbound links "
         "idle the longest when over the bound (idle)",
         ps.links_evicted},
        {"peer_links_evicted_total{reason=\"idle\"}", "counter", NULL, ps.inbound_evicted},
        {"peer_dials_refused_total", "counter",
         "Peer messages not sent because their address is neither in --peers nor the "
         "configuration",
         dm.dials_refused + ps.dials_refused},
        {"peer_certs_refused_total", "counter",
         "Peer TLS links closed because the certificate named no member (a client's "
         "certificate of the shared CA)",
         ps.certs_refused},
        {"peer_accepts_refused_total", "counter",
         "Peer connections closed at accept: every inbound link slot was taken",
         ps.accepts_refused},
        {"peer_accept_errors_total", "counter",
         "Peer accept errors (EMFILE and the like; retried with backoff)", ps.accept_errors},
    };
    char *mbuf = malloc(sizeof(r->raft_metrics));
    TK_ASSERT(mbuf != NULL);
    size_t moff = 0, mcap = sizeof(r->raft_metrics);
    for (size_t i = 0; i < TK_ARRAY_LEN(rows); i++) {
        int flen = (int)strcspn(rows[i].name, "{");
        if (i == 0 || strncmp(rows[i].name, rows[i - 1].name, (size_t)flen + 1) != 0)
            tk_put(mbuf, mcap, &moff, "# HELP ticketing_%.*s %s.\n# TYPE ticketing_%.*s %s\n", flen,
                   rows[i].name, rows[i].help, flen, rows[i].name, rows[i].type);
        tk_put(mbuf, mcap, &moff, "ticketing_%s %llu\n", rows[i].name,
               (unsigned long long)rows[i].v);
    }
    tk_put(mbuf, mcap, &moff,
           "# HELP ticketing_raft_snapshot_cut_seconds Time the last snapshot's incremental cut "
           "took, from asking the shards to the whole blob.\n"
           "# TYPE ticketing_raft_snapshot_cut_seconds gauge\n"
           "ticketing_raft_snapshot_cut_seconds %g\n",
           (double)ds.last_snapshot_cut_us / 1e6);
    member_metrics(r, &st, mbuf, mcap, &moff);
    moff = TK_MIN(moff, mcap - 1);
    pthread_mutex_lock(&r->pub_mu);
    memcpy(r->status_json, buf, status_len + 1);
    r->status_len = status_len;
    memcpy(r->members_json, mem, members_len + 1);
    r->members_len = members_len;
    memcpy(r->raft_metrics, mbuf, sizeof(r->raft_metrics));
    pthread_mutex_unlock(&r->pub_mu);
    free(buf);
    free(mem);
    free(mbuf);
    r->pub_at = r->now;
}

size_t tk_raftd_metrics(struct tk_server *s, char *buf, size_t cap)
{
    struct tk_raftd *r = s->raft;
    pthread_mutex_lock(&r->pub_mu);
    int n = snprintf(buf, cap, "%s", r->raft_metrics);
    pthread_mutex_unlock(&r->pub_mu);
    size_t off = n < 0 ? 0 : TK_MIN((size_t)n, cap);
    off += tk_hist_print(buf + off, cap - off, "ticketing_raft_batch_commands",
                         "Commands per log entry.", &r->batch_hist, 1, batch_bounds, NBATCH, 1.0);
    off += tk_hist_print(buf + off, cap - off, "ticketing_raft_commit_seconds",
                         "Time from the oldest proposal of an entry to its commit.", &r->latency, 1,
                         latency_bounds_us, NLAT, 1e-6);
    return off;
}

/* A copy of a published JSON text of len bytes, if it fits whole; else
 * nothing (a cut one would be no JSON). */
static size_t copy_published(struct tk_raftd *r,
                             const char *src,
                             const size_t *len,
                             char *buf,
                             size_t cap)
{
    pthread_mutex_lock(&r->pub_mu);
    size_t n = *len < cap ? *len : 0;
    memcpy(buf, src, n);
    pthread_mutex_unlock(&r->pub_mu);
    return n;
}

size_t tk_raftd_status(struct tk_server *s, char *buf, size_t cap)
{
    struct tk_raftd *r = s->raft;
    return copy_published(r, r->status_json, &r->status_len, buf, cap);
}

size_t tk_raftd_members(struct tk_server *s, char *buf, size_t cap)
{
    struct tk_raftd *r = s->raft;
    return copy_published(r, r->members_json, &r->members_len, buf, cap);
}
