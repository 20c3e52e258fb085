/* The Raft thread: the driver of the pure Raft core (raft/raft.h).
 *
 * It drains the proposals of every shard into one DATA entry per round,
 * numbers their grants with the fencing counter (SPEC 7), proposes, sends
 * the core's messages to peers (net/peer.c), and hands committed commands
 * to the shards that own their keys, on every node (ARCHITECTURE.md).
 *
 * A standalone node (no --peers) runs the same path with a configuration
 * of one voter: it bootstraps at start and every entry commits at once.
 *
 * Roles reach the workers as TK_MSG_ROLE messages on the same rings as the
 * committed commands, so a worker has applied every earlier entry when it
 * learns that it leads. A new leader announces itself only after its term's
 * first entry is committed and applied (SPEC 6: it serves from committed
 * state). Every role message carries a new epoch; proposals from an older
 * epoch are discarded, never proposed under a newer leadership.
 *
 * DATA entry payload: u32 ncmds | tk_cmd encodings (tokens filled in).
 * Snapshot blob: "TKSNAP01" | u64 count | GRANT encodings in token order.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/auth.h"
#include "net/peer.h"
#include "net/server.h"
#include "raft/raft.h"

#define BATCH_CMDS_MAX 4096
#define BATCH_BYTES_MAX (4 + BATCH_CMDS_MAX * TK_CMD_ENCODED_MAX)
#define TOKEN_EPOCH_US UINT64_C(1767225600000000) /* 2026-01-01T00:00:00Z */
#define PROBE_PERIOD_US 250000u
#define PROBE_FRESH_US 1500000u
#define STATUS_PERIOD_US 100000u
#define READ_GROUPS_MAX 1024
#define PENDING_MAX 8192
#define SNAP_MAGIC "TKSNAP01"
#define DRAIN_TRANSFER_US 3000000u

_Static_assert(BATCH_BYTES_MAX <= TK_RAFT_ENTRY_BYTES_MAX, "a full batch must fit one entry");

static const uint64_t batch_bounds[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096};
static const uint64_t latency_bounds_us[] = {10,   25,   50,    100,   250,   500,    1000,
                                             2500, 5000, 10000, 25000, 50000, 100000, 1000000};
#define NBATCH TK_ARRAY_LEN(batch_bounds)
#define NLAT TK_ARRAY_LEN(latency_bounds_us)

struct hist {
    _Atomic uint64_t bucket[16];
    _Atomic uint64_t count, sum;
};

struct peer_info { /* what probes told us about a configured peer (bootstrap) */
    uint64_t id;
    char client_addr[TK_ADDR_MAX];
    uint64_t peers_hash;
    uint64_t probed_us;   /* its PROBE reached us */
    uint64_t replied_us;  /* its PROBE_REPLY reached us */
    bool member;          /* it belongs to a domain */
    bool agreed;          /* it was seen fresh with our --peers: a bootstrap partner */
};

struct read_group {
    uint64_t id;
    uint64_t round[TK_WORKERS_MAX];
};

struct pending_entry { /* commit-latency bookkeeping of entries this leader proposed */
    uint64_t index;
    uint64_t proposed_us;
};

struct tk_raftd {
    struct tk_server *s;
    pthread_t thread;
    struct tk_wake wake;
    struct tk_outbox to_worker[TK_WORKERS_MAX];
    struct tk_raft *core;
    struct tk_peers *peers; /* NULL when standalone */

    /* Membership from --peers. */
    uint32_t npeers;
    char peer_addr[TK_PEERS_MAX][TK_ADDR_MAX];
    uint32_t self;
    uint64_t peers_hash;
    struct peer_info info[TK_PEERS_MAX];
    uint64_t probe_at;
    bool domain_seen; /* a peer reported membership of a domain (warned once) */

    /* Driver state. */
    uint64_t now;
    uint64_t applied;
    bool leader_ready;
    uint64_t epoch;
    uint64_t role_leader_id; /* leader announced to the workers */
    char leader_client[TK_ADDR_MAX];

    /* The batch being built. */
    uint8_t *batch;
    size_t batch_len;
    uint32_t batch_cmds, batch_tokens;
    uint64_t batch_oldest_us;
    uint64_t batch_epoch;

    /* Read barriers. */
    uint64_t want_round[TK_WORKERS_MAX];
    struct read_group groups[READ_GROUPS_MAX];
    uint32_t groups_head, groups_len;
    uint64_t next_read_id;

    /* Snapshot in progress. */
    bool snap_busy;
    uint64_t snap_index;
    uint32_t snap_parts;
    struct tk_msg_snap_part parts[TK_WORKERS_MAX];

    struct pending_entry pending[PENDING_MAX];
    uint32_t pend_head, pend_len;

    /* Published for the admin thread. */
    pthread_mutex_t pub_mu;
    char status_json[16384];
    char raft_metrics[8192];
    uint64_t pub_at;
    _Atomic int ready;
    _Atomic uint64_t m_commands, m_entries, m_last_snapshot_bytes;
    struct hist batch_hist;
    struct hist latency;
};

static void hist_add(struct hist *h, const uint64_t *bounds, size_t n, uint64_t v)
{
    size_t i = 0;
    while (i < n && v > bounds[i])
        i++;
    atomic_fetch_add_explicit(&h->bucket[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->count, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum, v, memory_order_relaxed);
}

static uint64_t random_u64(void)
{
    uint64_t v = 0;
    TK_ASSERT(tk_auth_random(&v, sizeof(v)) == TK_OK);
    return v;
}

/* ------------------------------------------------------------------ */
/* To the workers */

static void send_role(struct tk_raftd *r, bool leader)
{
    r->epoch++;
    for (uint32_t i = 0; i < r->s->nworkers; i++) {
        struct tk_msg_role *m = tk_outbox_put(&r->to_worker[i], TK_MSG_ROLE, sizeof(*m));
        memset(m, 0, sizeof(*m));
        m->epoch = r->epoch;
        m->leader = leader;
        snprintf(m->leader_addr, sizeof(m->leader_addr), "%s", r->leader_client);
    }
}

static void send_u64s(struct tk_raftd *r, uint32_t worker, uint32_t kind, uint64_t a, uint64_t b,
                      uint32_t n)
{
    uint64_t *p = tk_outbox_put(&r->to_worker[worker], kind, n * 8);
    p[0] = a;
    if (n > 1)
        p[1] = b;
}

/* Hands every command of a committed DATA entry to the shard of its key. */
static void apply_entry(struct tk_raftd *r, const struct tk_raft_entry *e)
{
    TK_ASSERT(e->len >= 4);
    uint32_t ncmds;
    memcpy(&ncmds, e->data, 4);
    uint64_t expect = e->token_first;
    size_t off = 4;
    for (uint32_t i = 0; i < ncmds; i++) {
        struct tk_cmd c;
        size_t used;
        TK_ASSERT(tk_cmd_decode(e->data + off, e->len - off, &c, &used) == TK_OK);
        if (tk_cmd_grants(&c)) {
            TK_ASSERT(c.token == expect); /* tokens strictly increase in log order */
            expect++;
        }
        uint32_t shard = tk_cmd_shard(c.key, c.key_len, r->s->nworkers);
        void *p = tk_outbox_put(&r->to_worker[shard], TK_MSG_APPLY, (uint32_t)used);
        memcpy(p, e->data + off, used);
        off += used;
    }
    TK_ASSERT(off == e->len);
    TK_ASSERT(expect == tk_raft_entry_token_next(e));
    atomic_fetch_add_explicit(&r->m_commands, ncmds, memory_order_relaxed);
}

static void install_snapshot(struct tk_raftd *r, const uint8_t *data, size_t len)
{
    uint64_t count;
    TK_ASSERT(len >= 16 && memcmp(data, SNAP_MAGIC, 8) == 0);
    memcpy(&count, data + 8, 8);
    for (uint32_t i = 0; i < r->s->nworkers; i++)
        tk_outbox_put(&r->to_worker[i], TK_MSG_CLEAR, 8);
    size_t off = 16;
    for (uint64_t i = 0; i < count; i++) {
        struct tk_cmd c;
        size_t used;
        TK_ASSERT(tk_cmd_decode(data + off, len - off, &c, &used) == TK_OK);
        TK_ASSERT(c.type == TK_CMD_GRANT && c.token != 0);
        uint32_t shard = tk_cmd_shard(c.key, c.key_len, r->s->nworkers);
        void *p = tk_outbox_put(&r->to_worker[shard], TK_MSG_RESTORE, (uint32_t)used);
        memcpy(p, data + off, used);
        off += used;
    }
    TK_ASSERT(off == len);
    tk_log(TK_LOG_INFO, "installed snapshot: %llu held keys, %zu bytes",
           (unsigned long long)count, len);
}

/* ------------------------------------------------------------------ */
/* Peers */

static const struct tk_raft_member *member(struct tk_raftd *r, uint64_t id)
{
    const struct tk_raft_config *c = tk_raft_config(r->core);
    return c ? tk_raft_config_find(c, id) : NULL;
}

static void domain_of(struct tk_raftd *r, uint64_t *lo, uint64_t *hi)
{
    const struct tk_raft_config *c = tk_raft_config(r->core);
    *lo = c ? c->domain_lo : 0;
    *hi = c ? c->domain_hi : 0;
}

/* Sends a message to a member by NodeId over our outbound link to its
 * address, and only if the process there is that NodeId: a restarted node
 * (new NodeId) at the same address never receives an old identity's
 * traffic, so it stays out of the quorum (SPEC 8, 10). */
static void send_msg(struct tk_raftd *r, const struct tk_raft_msg *m, const char *addr)
{
    if (!r->peers)
        return;
    if (!addr) {
        const struct tk_raft_member *mb = member(r, m->to);
        if (mb)
            addr = mb->peer_addr;
        /* A fresh node knows its bootstrap partners only from probes. */
        for (uint32_t i = 0; !addr && i < r->npeers; i++)
            if (i != r->self && r->info[i].id == m->to && r->info[i].agreed)
                addr = r->peer_addr[i];
        if (!addr)
            return;
    }
    struct tk_plink *l = tk_peers_dial(r->peers, addr);
    if (!l || !tk_plink_ready(l))
        return;
    if (m->to && tk_plink_remote_id(l) != m->to)
        return;
    struct tk_wire_frame f = {.msg = *m};
    domain_of(r, &f.domain_lo, &f.domain_hi);
    tk_peers_send(r->peers, l, &f);
}

static int peer_index(struct tk_raftd *r, const char *addr, size_t len)
{
    for (uint32_t i = 0; i < r->npeers; i++)
        if (strlen(r->peer_addr[i]) == len && !memcmp(r->peer_addr[i], addr, len))
            return (int)i;
    return -1;
}

static void copy_str(char *dst, size_t cap, const struct tk_raft_str *s)
{
    size_t n = TK_MIN((size_t)s->len, cap - 1);
    memcpy(dst, s->p, n);
    dst[n] = 0;
}

static void on_probe(struct tk_raftd *r, const struct tk_raft_msg *m)
{
    int i = peer_index(r, m->probe.peer_addr.p, m->probe.peer_addr.len);
    if (i >= 0 && (uint32_t)i != r->self) {
        struct peer_info *pi = &r->info[i];
        pi->id = m->from;
        copy_str(pi->client_addr, sizeof(pi->client_addr), &m->probe.client_addr);
        pi->peers_hash = m->probe.peers_hash;
        pi->probed_us = r->now;
    }
    /* Answer on our link to the prober's address. */
    char addr[TK_ADDR_MAX];
    copy_str(addr, sizeof(addr), &m->probe.peer_addr);
    struct tk_raft_msg rep = {.type = TK_RAFT_MSG_PROBE_REPLY, .from = r->s->node_id,
                              .to = m->from, .term = tk_raft_term(r->core)};
    uint64_t lo, hi;
    domain_of(r, &lo, &hi);
    rep.probe_reply.flags = (lo || hi) ? TK_RAFT_PROBE_MEMBER : 0;
    if (tk_raft_role(r->core) == TK_RAFT_LEADER)
        rep.probe_reply.flags |= TK_RAFT_PROBE_LEADER;
    rep.probe_reply.peers_hash = r->peers_hash;
    uint64_t lid = tk_raft_leader(r->core);
    const struct tk_raft_member *lm = lid ? member(r, lid) : NULL;
    rep.probe_reply.leader_id = lm ? lid : 0;
    if (lm) {
        rep.probe_reply.leader_peer_addr = (struct tk_raft_str){lm->peer_addr,
                                                                (uint16_t)strlen(lm->peer_addr)};
        rep.probe_reply.leader_client_addr = (struct tk_raft_str){
            lm->client_addr, (uint16_t)strlen(lm->client_addr)};
    }
    send_msg(r, &rep, addr);
}

static void on_probe_reply(struct tk_raftd *r, const struct tk_raft_msg *m)
{
    for (uint32_t i = 0; i < r->npeers; i++) {
        struct tk_plink *l = tk_peers_find(r->peers, r->peer_addr[i]);
        if (i == r->self || !l || tk_plink_remote_id(l) != m->from)
            continue;
        struct peer_info *pi = &r->info[i];
        pi->id = m->from;
        pi->replied_us = r->now;
        pi->member = (m->probe_reply.flags & TK_RAFT_PROBE_MEMBER) != 0;
        pi->peers_hash = m->probe_reply.peers_hash;
        if (!pi->member && pi->peers_hash == r->peers_hash)
            pi->agreed = true;
        if (pi->member && m->probe_reply.leader_client_addr.len &&
            !tk_raft_config(r->core)) {
            /* Not ours to join yet: point clients at that domain's leader. */
            char addr[TK_ADDR_MAX];
            copy_str(addr, sizeof(addr), &m->probe_reply.leader_client_addr);
            if (strcmp(addr, r->leader_client) != 0) {
                snprintf(r->leader_client, sizeof(r->leader_client), "%s", addr);
                send_role(r, false);
            }
        }
    }
}

static void process(struct tk_raftd *r, int rc, struct tk_raft_update *up);

static void on_frame(void *ctx, struct tk_plink *l, const struct tk_wire_frame *f)
{
    struct tk_raftd *r = ctx;
    uint64_t lo, hi;
    domain_of(r, &lo, &hi);
    bool mine = lo || hi;
    bool theirs = f->domain_lo || f->domain_hi;
    uint8_t type = f->msg.type;
    if (type == TK_RAFT_MSG_PROBE) {
        on_probe(r, &f->msg);
        return;
    }
    if (type == TK_RAFT_MSG_PROBE_REPLY) {
        on_probe_reply(r, &f->msg);
        return;
    }
    if (type == TK_RAFT_MSG_JOIN || type == TK_RAFT_MSG_JOIN_REPLY)
        return; /* replacement of restarted nodes is not built yet */
    if (mine && theirs && (f->domain_lo != lo || f->domain_hi != hi)) {
        tk_log(TK_LOG_WARN, "peer frame from another fencing domain; closing link");
        tk_plink_close(r->peers, l);
        return;
    }
    if (!theirs && type != TK_RAFT_MSG_VOTE_REPLY && type != TK_RAFT_MSG_APPEND_REPLY)
        return;
    if (!mine) {
        /* A fresh node takes Raft traffic only from the peers it agreed to
         * bootstrap with (probed fresh, same --peers). */
        bool known = false;
        for (uint32_t i = 0; i < r->npeers; i++)
            known |= i != r->self && r->info[i].id == f->msg.from && r->info[i].agreed;
        if (!known)
            return;
    }
    struct tk_raft_msg m = f->msg;
    m.to = r->s->node_id;
    struct tk_raft_update up;
    int rc = tk_raft_receive(r->core, &m, r->now, &up);
    process(r, rc, &up);
}

/* Bootstrap (SPEC 10): once every configured peer answered our probes as
 * fresh with the same --peers, the lowest NodeId writes the initial
 * configuration of a new fencing domain. */
static void maybe_bootstrap(struct tk_raftd *r)
{
    if (tk_raft_config(r->core))
        return;
    bool all = true, member_seen = false;
    uint64_t lowest = r->s->node_id;
    for (uint32_t i = 0; i < r->npeers; i++) {
        if (i == r->self)
            continue;
        struct peer_info *pi = &r->info[i];
        bool fresh_reply = pi->replied_us && r->now - pi->replied_us < PROBE_FRESH_US;
        member_seen |= fresh_reply && pi->member && !pi->agreed;
        all &= fresh_reply && !pi->member && pi->peers_hash == r->peers_hash && pi->id &&
               pi->probed_us && pi->client_addr[0];
        if (pi->id && pi->id < lowest)
            lowest = pi->id;
    }
    /* A fresh node never starts a new domain while a configured peer still
     * belongs to one (SPEC 10): it would recover that domain's keys under a
     * new identity. Once every member has restarted (all fresh), they
     * bootstrap a new domain; a node that rejoins a live domain as a
     * learner is not built yet, so it stays out meanwhile. */
    if (member_seen) {
        if (!r->domain_seen)
            tk_log(TK_LOG_WARN, "a peer belongs to a fencing domain: this fresh node stays out "
                                "(rejoining as a learner is not built yet)");
        r->domain_seen = true;
        return;
    }
    if (!all || lowest != r->s->node_id)
        return;
    uint64_t wall = tk_wall_us();
    if (wall < TOKEN_EPOCH_US) {
        tk_log(TK_LOG_ERROR, "wall clock reads before 2026-01-01; refusing to bootstrap");
        return;
    }
    struct tk_raft_config c = {.domain_lo = random_u64(), .domain_hi = random_u64()};
    for (uint32_t i = 0; i < r->npeers; i++) {
        struct tk_raft_member *mb = &c.m[c.n++];
        mb->role = TK_RAFT_VOTER;
        mb->id = i == r->self ? r->s->node_id : r->info[i].id;
        snprintf(mb->peer_addr, sizeof(mb->peer_addr), "%s", r->peer_addr[i]);
        snprintf(mb->client_addr, sizeof(mb->client_addr), "%s",
                 i == r->self ? r->s->advertise : r->info[i].client_addr);
    }
    tk_log(TK_LOG_INFO, "bootstrapping fencing domain %016llx%016llx with %u voters, "
                        "first token %llu",
           (unsigned long long)c.domain_hi, (unsigned long long)c.domain_lo, c.n,
           (unsigned long long)wall);
    struct tk_raft_update up;
    int rc = tk_raft_bootstrap(r->core, &c, wall, r->now, &up);
    process(r, rc, &up);
}

static void probe_peers(struct tk_raftd *r)
{
    if (!r->peers || r->now < r->probe_at)
        return;
    r->probe_at = r->now + PROBE_PERIOD_US;
    if (tk_raft_config(r->core))
        return; /* a member: probes are for fresh nodes */
    for (uint32_t i = 0; i < r->npeers; i++) {
        if (i == r->self)
            continue;
        struct tk_raft_msg m = {.type = TK_RAFT_MSG_PROBE, .from = r->s->node_id, .to = 0};
        m.probe.peers_hash = r->peers_hash;
        m.probe.peer_addr = (struct tk_raft_str){r->peer_addr[r->self],
                                                 (uint16_t)strlen(r->peer_addr[r->self])};
        m.probe.client_addr = (struct tk_raft_str){r->s->advertise,
                                                   (uint16_t)strlen(r->s->advertise)};
        send_msg(r, &m, r->peer_addr[i]);
    }
    maybe_bootstrap(r);
}

/* ------------------------------------------------------------------ */
/* Updates of the core */

static void update_roles(struct tk_raftd *r, const struct tk_raft_update *up)
{
    if (up->role != TK_RAFT_LEADER && r->leader_ready) {
        r->leader_ready = false;
        tk_log(TK_LOG_INFO, "stepped down in term %llu", (unsigned long long)up->term);
    }
    if (up->role == TK_RAFT_LEADER) {
        struct tk_raft_status st;
        tk_raft_status(r->core, &st);
        if (!r->leader_ready && r->applied >= st.term_start_index && st.term_start_index &&
            r->applied >= up->commit) {
            r->leader_ready = true;
            snprintf(r->leader_client, sizeof(r->leader_client), "%s", r->s->advertise);
            r->role_leader_id = r->s->node_id;
            send_role(r, true);
            tk_log(TK_LOG_INFO, "leading term %llu from index %llu",
                   (unsigned long long)up->term, (unsigned long long)st.term_start_index);
        }
        return;
    }
    /* Follower or candidate: tell the workers where clients should go. */
    const struct tk_raft_member *lm = up->leader_id ? member(r, up->leader_id) : NULL;
    const char *addr = lm ? lm->client_addr : "";
    if (r->role_leader_id == up->leader_id && !strcmp(addr, r->leader_client) && r->epoch)
        return;
    r->role_leader_id = up->leader_id;
    snprintf(r->leader_client, sizeof(r->leader_client), "%s", addr);
    send_role(r, false);
}

static void resolve_reads(struct tk_raftd *r, const struct tk_raft_update *up)
{
    for (uint32_t k = 0; k < up->n_reads; k++) {
        const struct tk_raft_read *rd = &up->reads[k];
        while (r->groups_len > 0) {
            struct read_group *g = &r->groups[r->groups_head];
            if (g->id > rd->id)
                break;
            bool ok = g->id == rd->id && rd->ok;
            for (uint32_t w = 0; w < r->s->nworkers; w++)
                if (g->round[w])
                    send_u64s(r, w, TK_MSG_READ_DONE, g->round[w], ok, 2);
            r->groups_head = (r->groups_head + 1) % READ_GROUPS_MAX;
            r->groups_len--;
            if (g->id == rd->id)
                break;
        }
    }
}

static void request_snapshot(struct tk_raftd *r, uint64_t index)
{
    if (r->snap_busy)
        return;
    TK_ASSERT(index == r->applied);
    r->snap_busy = true;
    r->snap_index = index;
    r->snap_parts = 0;
    for (uint32_t w = 0; w < r->s->nworkers; w++)
        send_u64s(r, w, TK_MSG_SNAP_REQ, index, 0, 1);
}

static void observe_commits(struct tk_raftd *r, uint64_t commit)
{
    while (r->pend_len > 0 && r->pending[r->pend_head].index <= commit) {
        struct pending_entry *pe = &r->pending[r->pend_head];
        hist_add(&r->latency, latency_bounds_us, NLAT,
                 r->now > pe->proposed_us ? r->now - pe->proposed_us : 0);
        r->pend_head = (r->pend_head + 1) % PENDING_MAX;
        r->pend_len--;
    }
}

/* Performs one update, then reports applied entries to the core and
 * performs what that returns, until nothing is left. */
static void process(struct tk_raftd *r, int rc, struct tk_raft_update *up)
{
    (void)rc; /* failures of the event itself change nothing; the update stays valid */
    for (;;) {
        if (up->flags & TK_RAFT_UPDATE_SNAPSHOT_INSTALL) {
            install_snapshot(r, up->install.data, up->install.len);
            r->applied = up->install.index;
        }
        for (uint32_t i = 0; i < up->n_msgs; i++)
            send_msg(r, &up->msgs[i], NULL);
        if (up->flags & TK_RAFT_UPDATE_READS)
            resolve_reads(r, up);
        if (up->role != TK_RAFT_LEADER && r->pend_len)
            r->pend_len = 0;
        uint64_t commit = up->commit;
        bool advanced = commit > r->applied;
        for (uint64_t i = r->applied + 1; i <= commit; i++) {
            const struct tk_raft_entry *e = tk_raft_entry(r->core, i);
            TK_ASSERT(e != NULL);
            if (e->type == TK_RAFT_DATA)
                apply_entry(r, e);
        }
        if (advanced) {
            r->applied = commit;
            observe_commits(r, commit);
        }
        update_roles(r, up);
        if (up->flags & TK_RAFT_UPDATE_SNAPSHOT_WANTED)
            request_snapshot(r, up->snapshot_index);
        if (!advanced)
            return;
        rc = tk_raft_applied(r->core, r->applied, r->now, up);
    }
}

/* ------------------------------------------------------------------ */
/* Proposals, reads and snapshot parts from the workers */

static void propose_batch(struct tk_raftd *r)
{
    if (r->batch_cmds == 0)
        return;
    memcpy(r->batch, &r->batch_cmds, 4);
    struct tk_raft_update up;
    if (!r->leader_ready || r->batch_epoch != r->epoch) {
        /* Leadership changed since the batch was built: its commands and
         * token numbers belong to an older epoch; drop it. */
        r->batch_cmds = r->batch_tokens = 0;
        r->batch_len = 4;
        return;
    }
    uint64_t first = tk_raft_next_token(r->core);
    int rc = tk_raft_propose(r->core, r->batch, (uint32_t)r->batch_len, first, r->batch_tokens,
                             r->now, &up);
    if (rc == TK_EFULL)
        return; /* the log is at its bound: keep the batch, try next round */
    TK_ASSERT(rc == TK_OK || rc == TK_ENOTLEADER);
    if (rc == TK_OK) {
        hist_add(&r->batch_hist, batch_bounds, NBATCH, r->batch_cmds);
        atomic_fetch_add_explicit(&r->m_entries, 1, memory_order_relaxed);
        if (r->pend_len < PENDING_MAX) {
            r->pending[(r->pend_head + r->pend_len) % PENDING_MAX] =
                (struct pending_entry){up.index, r->batch_oldest_us};
            r->pend_len++;
        }
    }
    /* Not leader any more: the workers learn it from the update and drop
     * their in-flight state; the batch is discarded. */
    r->batch_cmds = r->batch_tokens = 0;
    r->batch_len = 4;
    process(r, rc, &up);
}

/* Adds one proposal to the batch, numbering its grant with the counter. */
static void batch_add(struct tk_raftd *r, const uint8_t *data, uint32_t len)
{
    uint64_t epoch, proposed_us;
    memcpy(&epoch, data, 8);
    memcpy(&proposed_us, data + 8, 8);
    if (!r->leader_ready || epoch != r->epoch)
        return; /* made under an older leadership: never proposed now */
    struct tk_cmd c;
    size_t used;
    TK_ASSERT(tk_cmd_decode(data + 16, len - 16, &c, &used) == TK_OK);
    if (r->batch_cmds == 0) {
        r->batch_oldest_us = proposed_us;
        r->batch_epoch = r->epoch;
    }
    if (tk_cmd_grants(&c)) {
        TK_ASSERT(c.token == 0);
        c.token = tk_raft_next_token(r->core) + r->batch_tokens;
        r->batch_tokens++;
    }
    size_t n = tk_cmd_encode(&c, r->batch + r->batch_len, BATCH_BYTES_MAX - r->batch_len);
    TK_ASSERT(n > 0);
    r->batch_len += n;
    r->batch_cmds++;
}

static void snapshot_part(struct tk_raftd *r, const struct tk_msg_snap_part *part)
{
    if (!r->snap_busy || part->index != r->snap_index) {
        free(part->data);
        return;
    }
    r->parts[r->snap_parts++] = *part;
    if (r->snap_parts < r->s->nworkers)
        return;
    /* Every shard cut at the same index, each part in token order: merge
     * them into one blob in token order (restore applies in that order). */
    uint64_t count = 0;
    size_t bytes = 16;
    for (uint32_t w = 0; w < r->snap_parts; w++) {
        count += r->parts[w].count;
        bytes += r->parts[w].len;
    }
    uint8_t *blob = malloc(bytes);
    TK_ASSERT(blob != NULL);
    memcpy(blob, SNAP_MAGIC, 8);
    memcpy(blob + 8, &count, 8);
    size_t off = 16;
    size_t pos[TK_WORKERS_MAX] = {0};
    uint64_t last = 0;
    for (uint64_t k = 0; k < count; k++) {
        int best = -1;
        uint64_t best_token = UINT64_MAX;
        size_t best_len = 0;
        for (uint32_t w = 0; w < r->snap_parts; w++) {
            if (pos[w] == r->parts[w].len)
                continue;
            struct tk_cmd c;
            size_t used;
            TK_ASSERT(tk_cmd_decode(r->parts[w].data + pos[w], r->parts[w].len - pos[w], &c,
                                    &used) == TK_OK);
            if (c.token < best_token) {
                best = (int)w;
                best_token = c.token;
                best_len = used;
            }
        }
        TK_ASSERT(best >= 0);
        TK_ASSERT(best_token > last); /* tokens are unique and parts sorted */
        last = best_token;
        memcpy(blob + off, r->parts[best].data + pos[best], best_len);
        off += best_len;
        pos[best] += best_len;
    }
    TK_ASSERT(off == bytes);
    for (uint32_t w = 0; w < r->snap_parts; w++) {
        free(r->parts[w].data);
        r->parts[w].data = NULL;
    }
    r->snap_parts = 0;
    r->snap_busy = false;
    atomic_store(&r->m_last_snapshot_bytes, bytes);
    struct tk_raft_update up;
    int rc = tk_raft_snapshot(r->core, r->snap_index, blob, bytes, r->now, &up);
    if (rc != TK_OK)
        tk_log(TK_LOG_WARN, "snapshot at %llu refused: %s", (unsigned long long)r->snap_index,
               tk_strerror(rc));
    process(r, rc, &up);
}

static void drain_workers(struct tk_raftd *r)
{
    struct tk_server *s = r->s;
    for (uint32_t i = 0; i < s->nworkers; i++) {
        struct tk_ring *ring = tk_worker_outbox_to_raft(s, i);
        const struct tk_ring_msg *m;
        while ((m = tk_ring_peek(ring)) != NULL) {
            if (m->kind == TK_MSG_PROPOSE) {
                if (r->batch_cmds == BATCH_CMDS_MAX)
                    propose_batch(r);
                if (r->batch_cmds == BATCH_CMDS_MAX)
                    break; /* log full: leave the rest in the ring (push back) */
                batch_add(r, m->data, m->len);
            } else if (m->kind == TK_MSG_READ) {
                uint64_t round;
                memcpy(&round, m->data, 8);
                if (r->leader_ready)
                    r->want_round[i] = round;
                else
                    send_u64s(r, i, TK_MSG_READ_DONE, round, 0, 2);
            } else if (m->kind == TK_MSG_SNAP_PART) {
                struct tk_msg_snap_part part;
                memcpy(&part, m->data, sizeof(part));
                snapshot_part(r, &part);
            } else {
                TK_ASSERT(!"unexpected message kind to raft");
            }
            tk_ring_pop(ring, m);
        }
    }
    propose_batch(r);
    /* One read barrier covers every read the workers asked for so far. */
    bool any = false;
    for (uint32_t i = 0; i < s->nworkers; i++)
        any |= r->want_round[i] != 0;
    if (any && r->groups_len < READ_GROUPS_MAX) {
        struct read_group *g = &r->groups[(r->groups_head + r->groups_len) % READ_GROUPS_MAX];
        g->id = ++r->next_read_id;
        memcpy(g->round, r->want_round, sizeof(g->round));
        struct tk_raft_update up;
        int rc = tk_raft_read(r->core, g->id, r->now, &up);
        if (rc == TK_EFULL) {
            r->next_read_id--;
        } else {
            r->groups_len++;
            memset(r->want_round, 0, sizeof(r->want_round));
            if (rc != TK_OK) { /* not leader: these reads fail */
                struct tk_raft_read fail = {.id = g->id, .ok = 0};
                struct tk_raft_update fu = {.reads = &fail, .n_reads = 1};
                resolve_reads(r, &fu);
            }
            process(r, rc, &up);
        }
    }
}

/* ------------------------------------------------------------------ */
/* Status for the admin thread */

static void publish(struct tk_raftd *r)
{
    struct tk_raft_status st;
    tk_raft_status(r->core, &st);
    const struct tk_raft_metrics *m = tk_raft_metrics(r->core);
    const struct tk_raft_config *cfg = tk_raft_config(r->core);
    if (cfg) {
        atomic_store(&r->s->domain_lo, cfg->domain_lo);
        atomic_store(&r->s->domain_hi, cfg->domain_hi);
    }
    bool member_here = cfg && tk_raft_config_find(cfg, r->s->node_id);
    atomic_store(&r->ready, member_here && st.leader_id != 0);
    char *buf = malloc(sizeof(r->status_json));
    TK_ASSERT(buf != NULL);
    size_t cap = sizeof(r->status_json), off = 0;
    const struct tk_raft_member *lm = st.leader_id ? member(r, st.leader_id) : NULL;
    off += (size_t)snprintf(
        buf + off, cap - off,
        "\"role\":\"%s\",\"mode\":\"%s\",\"term\":%llu,\"leader\":\"%016llx\","
        "\"leader_addr\":\"%s\",\"serving\":%s,\"commit_index\":%llu,\"applied_index\":%llu,"
        "\"last_index\":%llu,\"snapshot_index\":%llu,\"log_entries\":%llu,\"next_token\":%llu,"
        "\"members\":[",
        tk_raft_role_name(st.role), r->peers ? "cluster" : "standalone",
        (unsigned long long)st.term, (unsigned long long)st.leader_id,
        lm ? lm->client_addr : "", r->leader_ready ? "true" : "false",
        (unsigned long long)st.commit, (unsigned long long)st.applied,
        (unsigned long long)st.last_index, (unsigned long long)st.snapshot_index,
        (unsigned long long)st.log_entries, (unsigned long long)st.token_next);
    for (uint32_t i = 0; cfg && i < st.n_members && off < cap; i++) {
        const struct tk_raft_member_status *ms = &st.members[i];
        const struct tk_raft_member *mb = tk_raft_config_find(cfg, ms->id);
        off += (size_t)snprintf(buf + off, cap - off,
                                "%s{\"id\":\"%016llx\",\"voter\":%s,\"peer_addr\":\"%s\","
                                "\"client_addr\":\"%s\",\"match_index\":%llu}",
                                i ? "," : "", (unsigned long long)ms->id,
                                ms->role == TK_RAFT_VOTER ? "true" : "false",
                                mb ? mb->peer_addr : "", mb ? mb->client_addr : "",
                                (unsigned long long)ms->match);
    }
    if (off < cap)
        off += (size_t)snprintf(buf + off, cap - off, "]");
    struct tk_peer_stats ps = {0};
    if (r->peers)
        tk_peers_stats(r->peers, &ps);
    const struct {
        const char *name, *type, *help;
        uint64_t v;
    } rows[] = {
        {"raft_term", "gauge", "Current Raft term", st.term},
        {"raft_is_leader", "gauge", "1 while this node is the Raft leader",
         st.role == TK_RAFT_LEADER},
        {"raft_serving", "gauge", "1 while this node serves clients as leader", r->leader_ready},
        {"raft_commit_index", "gauge", "Index of the last committed log entry", st.commit},
        {"raft_applied_index", "gauge", "Index of the last applied log entry", st.applied},
        {"raft_log_entries", "gauge", "Log entries in memory", st.log_entries},
        {"raft_log_entries_max", "gauge", "Bound on log entries in memory (--max-log-entries)",
         r->s->opt.max_log_entries},
        {"raft_log_bytes", "gauge", "Bytes of log entry data in memory", st.log_bytes},
        {"raft_elections_total", "counter", "Elections this node started", m->elections_started},
        {"raft_prevotes_total", "counter", "Pre-votes this node started", m->prevotes_started},
        {"raft_leader_changes_total", "counter", "Changes of the known leader",
         m->leader_changes},
        {"raft_step_downs_total", "counter", "Check-quorum step-downs", m->step_downs_quorum},
        {"raft_transfers_total", "counter", "Leadership transfers (TimeoutNow sent)",
         m->transfers},
        {"raft_appends_sent_total", "counter", "Append messages sent (heartbeats included)",
         m->appends_sent},
        {"raft_append_entries_sent_total", "counter", "Entries carried by Append messages",
         m->entries_sent},
        {"raft_snapshots_taken_total", "counter", "Snapshots taken", m->snapshots_taken},
        {"raft_snapshots_sent_total", "counter", "Snapshots sent to followers",
         m->snapshots_sent},
        {"raft_snapshots_installed_total", "counter", "Snapshots installed",
         m->snapshots_installed},
        {"raft_snapshot_bytes", "gauge", "Size of the last snapshot taken",
         atomic_load(&r->m_last_snapshot_bytes)},
        {"raft_proposals_refused_total", "counter", "Proposals the core refused",
         m->proposals_refused},
        {"raft_entries_total", "counter", "Log entries proposed by this node",
         atomic_load(&r->m_entries)},
        {"raft_commands_total", "counter", "Lock commands applied", atomic_load(&r->m_commands)},
        {"fencing_next_token", "gauge", "Next fencing token", st.token_next},
        {"peer_frames_in_total", "counter", "Peer frames received", ps.frames_in},
        {"peer_frames_out_total", "counter", "Peer frames sent", ps.frames_out},
        {"peer_frames_dropped_total", "counter", "Peer frames dropped (link down or slow)",
         ps.frames_dropped},
        {"peer_frames_oversize_total", "counter", "Peer frames over --max-frame-bytes",
         ps.frames_oversize},
        {"peer_frames_malformed_total", "counter", "Malformed peer frames", ps.frames_malformed},
        {"peer_frame_bytes_max", "gauge", "Bound on peer frame size (--max-frame-bytes)",
         r->s->opt.max_frame_bytes},
        {"peer_handshakes_total", "counter", "Peer handshakes completed", ps.handshakes},
        {"peer_handshake_timeouts_total", "counter", "Peer links that did not finish the "
         "handshake in time", ps.handshake_timeouts},
        {"peer_auth_failures_total", "counter", "Failed peer handshakes", ps.auth_failures},
        {"peer_dials_total", "counter", "Outbound peer connection attempts", ps.dials},
    };
    char *mbuf = malloc(sizeof(r->raft_metrics));
    TK_ASSERT(mbuf != NULL);
    size_t moff = 0, mcap = sizeof(r->raft_metrics);
    for (size_t i = 0; i < TK_ARRAY_LEN(rows) && moff < mcap; i++) {
        int n = snprintf(mbuf + moff, mcap - moff,
                         "# HELP ticketing_%s %s.\n# TYPE ticketing_%s %s\nticketing_%s %llu\n",
                         rows[i].name, rows[i].help, rows[i].name, rows[i].type, rows[i].name,
                         (unsigned long long)rows[i].v);
        if (n < 0)
            break;
        moff += (size_t)n;
    }
    pthread_mutex_lock(&r->pub_mu);
    memcpy(r->status_json, buf, sizeof(r->status_json));
    r->status_json[sizeof(r->status_json) - 1] = 0;
    memcpy(r->raft_metrics, mbuf, sizeof(r->raft_metrics));
    pthread_mutex_unlock(&r->pub_mu);
    free(buf);
    free(mbuf);
    r->pub_at = r->now;
}

/* ------------------------------------------------------------------ */
/* The thread */

static void flush_all(struct tk_raftd *r)
{
    for (uint32_t i = 0; i < r->s->nworkers; i++)
        tk_outbox_flush(&r->to_worker[i]);
}

static void bootstrap_standalone(struct tk_raftd *r)
{
    uint64_t wall = tk_wall_us();
    TK_ASSERT(wall >= TOKEN_EPOCH_US); /* checked before the threads start */
    struct tk_raft_config c = {.domain_lo = random_u64(), .domain_hi = random_u64(), .n = 1};
    c.m[0].id = r->s->node_id;
    c.m[0].role = TK_RAFT_VOTER;
    snprintf(c.m[0].peer_addr, sizeof(c.m[0].peer_addr), "%s", r->peer_addr[0]);
    snprintf(c.m[0].client_addr, sizeof(c.m[0].client_addr), "%s", r->s->advertise);
    struct tk_raft_update up;
    int rc = tk_raft_bootstrap(r->core, &c, wall, r->now, &up);
    TK_ASSERT(rc == TK_OK);
    tk_log(TK_LOG_INFO, "standalone fencing domain %016llx%016llx, first token %llu",
           (unsigned long long)c.domain_hi, (unsigned long long)c.domain_lo,
           (unsigned long long)wall);
    process(r, rc, &up);
}

/* Standalone: no peer sockets, so a plain wait on the wake eventfd. */
static void wait_standalone(struct tk_raftd *r, uint64_t timeout_us)
{
    struct pollfd pfd = {.fd = r->wake.fd, .events = POLLIN};
    int ms = (int)((timeout_us + 999u) / 1000u);
    if (poll(&pfd, 1, ms) > 0) {
        uint64_t v;
        ssize_t n = read(r->wake.fd, &v, sizeof(v));
        (void)n;
    }
}

static void *raftd_main(void *arg)
{
    struct tk_raftd *r = arg;
    struct tk_server *s = r->s;
    pthread_setname_np(pthread_self(), "tk-raft");
    r->now = tk_now_us();
    if (!r->peers)
        bootstrap_standalone(r);
    flush_all(r);
    uint64_t drain_deadline = 0;
    for (;;) {
        uint64_t deadline = TK_MIN(tk_raft_deadline(r->core), r->now + 50000u);
        if (r->peers)
            deadline = TK_MIN(deadline, r->probe_at);
        uint64_t wait = deadline > r->now ? deadline - r->now : 0;
        if (r->peers)
            tk_peers_run(r->peers, wait);
        else if (wait)
            wait_standalone(r, wait);
        tk_wake_clear(&r->wake);
        r->now = tk_now_us();
        if (tk_raft_deadline(r->core) <= r->now) {
            struct tk_raft_update up;
            int rc = tk_raft_tick(r->core, r->now, &up);
            process(r, rc, &up);
        }
        drain_workers(r);
        probe_peers(r);
        if (r->now - r->pub_at >= STATUS_PERIOD_US)
            publish(r);
        flush_all(r);
        if (atomic_load_explicit(&s->draining, memory_order_relaxed)) {
            /* SIGTERM: hand leadership to the most up-to-date voter first,
             * so a rolling restart causes no election gap (SPEC 8). */
            if (!drain_deadline) {
                drain_deadline = r->now + DRAIN_TRANSFER_US;
                if (r->peers && tk_raft_role(r->core) == TK_RAFT_LEADER) {
                    struct tk_raft_update up;
                    int rc = tk_raft_transfer(r->core, 0, r->now, &up);
                    tk_log(TK_LOG_INFO, "shutting down: transferring leadership (%s)",
                           tk_strerror(rc));
                    process(r, rc, &up);
                    flush_all(r);
                }
            }
            bool leading = r->peers && tk_raft_role(r->core) == TK_RAFT_LEADER;
            if (!leading || r->now >= drain_deadline)
                break;
        }
        if (atomic_load_explicit(&s->stopping, memory_order_relaxed))
            break;
    }
    /* Let the peers see our last messages (TimeoutNow) before we go. */
    if (r->peers)
        tk_peers_run(r->peers, 20000);
    publish(r);
    atomic_store(&s->stopping, 1);
    for (uint32_t i = 0; i < s->nworkers; i++)
        tk_wake_signal(tk_worker_wake(s, i));
    return NULL;
}

/* ------------------------------------------------------------------ */
/* Setup */

static int parse_peers(struct tk_raftd *r)
{
    struct tk_server *s = r->s;
    char host[TK_ADDR_MAX];
    uint32_t port;
    if (tk_addr_split(s->advertise, host, sizeof(host), &port) != TK_OK)
        return TK_EINVAL;
    char self[TK_ADDR_MAX + 16];
    int n = snprintf(self, sizeof(self), "%s:%u", host, s->opt.peer_port);
    if (n < 0 || n >= TK_ADDR_MAX) {
        tk_log(TK_LOG_ERROR, "advertised host name too long");
        return TK_EINVAL;
    }
    if (!s->opt.peers[0]) {
        r->npeers = 1;
        r->self = 0;
        memcpy(r->peer_addr[0], self, (size_t)n + 1);
        return TK_OK;
    }
    char list[sizeof(s->opt.peers)];
    snprintf(list, sizeof(list), "%s", s->opt.peers);
    bool found = false;
    for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        char h[TK_ADDR_MAX];
        uint32_t pp;
        if (r->npeers == TK_PEERS_MAX || tk_addr_split(tok, h, sizeof(h), &pp) != TK_OK) {
            tk_log(TK_LOG_ERROR, "--peers: bad address '%s' (want host:port)", tok);
            return TK_EINVAL;
        }
        if (peer_index(r, tok, strlen(tok)) >= 0) {
            tk_log(TK_LOG_ERROR, "--peers lists %s twice", tok);
            return TK_EINVAL;
        }
        if (!strcmp(tok, self)) {
            r->self = r->npeers;
            found = true;
        }
        snprintf(r->peer_addr[r->npeers++], TK_ADDR_MAX, "%s", tok);
    }
    if (!found) {
        tk_log(TK_LOG_ERROR, "--peers must include this node's peer address %s "
                             "(advertised host and --peer-port)", self);
        return TK_EINVAL;
    }
    /* Peers agree when their sorted lists are equal. */
    char sorted[TK_PEERS_MAX][TK_ADDR_MAX];
    memcpy(sorted, r->peer_addr, sizeof(sorted));
    for (uint32_t i = 0; i < r->npeers; i++)
        for (uint32_t j = i + 1; j < r->npeers; j++)
            if (strcmp(sorted[j], sorted[i]) < 0) {
                char t[TK_ADDR_MAX];
                memcpy(t, sorted[i], TK_ADDR_MAX);
                memcpy(sorted[i], sorted[j], TK_ADDR_MAX);
                memcpy(sorted[j], t, TK_ADDR_MAX);
            }
    uint64_t h = 0;
    for (uint32_t i = 0; i < r->npeers; i++)
        h = tk_hash(sorted[i], strlen(sorted[i])) ^ (h * 31);
    r->peers_hash = h ? h : 1;
    return TK_OK;
}

int tk_raftd_create(struct tk_server *s)
{
    struct tk_raftd *r = calloc(1, sizeof(*r));
    if (!r)
        return TK_ENOMEM;
    s->raft = r;
    r->s = s;
    pthread_mutex_init(&r->pub_mu, NULL);
    r->batch = malloc(BATCH_BYTES_MAX);
    if (!r->batch)
        return TK_ENOMEM;
    r->batch_len = 4;
    if (tk_wake_init(&r->wake) != TK_OK)
        return TK_EIO;
    if (tk_wall_us() < TOKEN_EPOCH_US) {
        tk_log(TK_LOG_ERROR, "wall clock reads before 2026-01-01; refusing to start a domain");
        return TK_EINVAL;
    }
    int rc = parse_peers(r);
    if (rc != TK_OK)
        return rc;
    struct tk_raft_options o;
    tk_raft_options_default(&o, s->node_id, random_u64());
    o.heartbeat_us = (uint64_t)s->opt.heartbeat_ms * 1000u;
    o.election_min_us = (uint64_t)s->opt.election_ms * 1000u;
    o.election_max_us = o.election_min_us + 100000u;
    if (o.election_min_us <= o.heartbeat_us) {
        tk_log(TK_LOG_ERROR, "--election-ms must exceed --heartbeat-ms");
        return TK_EINVAL;
    }
    o.log_entries_max = s->opt.max_log_entries;
    o.snapshot_entries = TK_MAX(s->opt.max_log_entries / 4, 8);
    o.snapshot_trailing = TK_MIN(o.snapshot_entries / 2, 1024);
    r->core = tk_raft_create(&o);
    if (!r->core)
        return TK_ENOMEM;
    if (s->opt.peers[0]) {
        struct tk_peer_cb cb = {.frame = on_frame, .ctx = r};
        rc = tk_peers_create(s, &cb, r->wake.fd, &r->peers);
        if (rc != TK_OK)
            return rc;
        for (uint32_t i = 0; i < r->npeers; i++)
            if (i != r->self)
                tk_peers_dial(r->peers, r->peer_addr[i]);
    }
    publish(r);
    return TK_OK;
}

int tk_raftd_start(struct tk_server *s)
{
    struct tk_raftd *r = s->raft;
    for (uint32_t i = 0; i < s->nworkers; i++)
        tk_outbox_init(&r->to_worker[i], tk_worker_inbox_from_raft(s, i), tk_worker_wake(s, i));
    if (pthread_create(&r->thread, NULL, raftd_main, r) != 0)
        return TK_EIO;
    return TK_OK;
}

void tk_raftd_join(struct tk_server *s)
{
    tk_wake_signal(&s->raft->wake);
    pthread_join(s->raft->thread, NULL);
}

void tk_raftd_destroy(struct tk_server *s)
{
    struct tk_raftd *r = s->raft;
    if (!r)
        return;
    for (uint32_t i = 0; i < s->nworkers; i++)
        tk_outbox_free(&r->to_worker[i]);
    for (uint32_t w = 0; w < r->snap_parts; w++)
        free(r->parts[w].data);
    tk_peers_destroy(r->peers);
    if (r->core)
        tk_raft_destroy(r->core);
    tk_wake_close(&r->wake);
    pthread_mutex_destroy(&r->pub_mu);
    free(r->batch);
    free(r);
    s->raft = NULL;
}

struct tk_wake *tk_raftd_wake(struct tk_server *s)
{
    return &s->raft->wake;
}

bool tk_raftd_ready(struct tk_server *s)
{
    return atomic_load(&s->raft->ready) != 0;
}

static size_t hist_print(char *buf, size_t cap, const char *name, const char *help,
                         const struct hist *h, const uint64_t *bounds, size_t n, double scale)
{
    size_t off = 0;
    off += (size_t)snprintf(buf + off, cap - off, "# HELP %s %s\n# TYPE %s histogram\n", name,
                            help, name);
    uint64_t cum = 0;
    for (size_t i = 0; i <= n && off < cap; i++) {
        cum += atomic_load_explicit(&h->bucket[i], memory_order_relaxed);
        if (i < n)
            off += (size_t)snprintf(buf + off, cap - off, "%s_bucket{le=\"%g\"} %llu\n", name,
                                    (double)bounds[i] * scale, (unsigned long long)cum);
        else
            off += (size_t)snprintf(buf + off, cap - off, "%s_bucket{le=\"+Inf\"} %llu\n", name,
                                    (unsigned long long)cum);
    }
    if (off < cap)
        off += (size_t)snprintf(
            buf + off, cap - off, "%s_sum %g\n%s_count %llu\n", name,
            (double)atomic_load_explicit(&h->sum, memory_order_relaxed) * scale, name,
            (unsigned long long)atomic_load_explicit(&h->count, memory_order_relaxed));
    return TK_MIN(off, cap);
}

size_t tk_raftd_metrics(struct tk_server *s, char *buf, size_t cap)
{
    struct tk_raftd *r = s->raft;
    pthread_mutex_lock(&r->pub_mu);
    int n = snprintf(buf, cap, "%s", r->raft_metrics);
    pthread_mutex_unlock(&r->pub_mu);
    size_t off = n < 0 ? 0 : TK_MIN((size_t)n, cap);
    off += hist_print(buf + off, cap - off, "ticketing_raft_batch_commands",
                      "Commands per log entry.", &r->batch_hist, batch_bounds, NBATCH, 1.0);
    off += hist_print(buf + off, cap - off, "ticketing_raft_commit_seconds",
                      "Time from the oldest proposal of an entry to its commit.", &r->latency,
                      latency_bounds_us, NLAT, 1e-6);
    return off;
}

size_t tk_raftd_status(struct tk_server *s, char *buf, size_t cap)
{
    struct tk_raftd *r = s->raft;
    pthread_mutex_lock(&r->pub_mu);
    int n = snprintf(buf, cap, "%s", r->status_json);
    pthread_mutex_unlock(&r->pub_mu);
    return n < 0 ? 0 : TK_MIN((size_t)n, cap);
}
