/* The Raft thread's side of the peers: frames in (domain checks, probes),
 * messages out (by NodeId, only to the process that is that NodeId), and
 * bootstrap of a new fencing domain by probing (SPEC 9, 10). */
#include <stdio.h>
#include <string.h>

#include "net/raftd.h"

const struct tk_raft_member *raftd_member(struct tk_raftd *r, uint64_t id)
{
    const struct tk_raft_config *c = tk_raft_config(r->core);
    return c ? tk_raft_config_find(c, id) : NULL;
}

void raftd_domain(struct tk_raftd *r, uint64_t *lo, uint64_t *hi)
{
    const struct tk_raft_config *c = tk_raft_config(r->core);
    *lo = c ? c->domain_lo : 0;
    *hi = c ? c->domain_hi : 0;
}

/* Sends a message to a member by NodeId over our outbound link to its
 * address, and only if the process there is that NodeId: a restarted node
 * (new NodeId) at the same address never receives an old identity's
 * traffic, so it stays out of the quorum (SPEC 8, 10). */
void raftd_send_msg(struct tk_raftd *r, const struct tk_raft_msg *m, const char *addr)
{
    if (!r->peers)
        return;
    if (!addr) {
        const struct tk_raft_member *mb = raftd_member(r, m->to);
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
    raftd_domain(r, &f.domain_lo, &f.domain_hi);
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
    raftd_domain(r, &lo, &hi);
    rep.probe_reply.flags = (lo || hi) ? TK_RAFT_PROBE_MEMBER : 0;
    if (tk_raft_role(r->core) == TK_RAFT_LEADER)
        rep.probe_reply.flags |= TK_RAFT_PROBE_LEADER;
    rep.probe_reply.peers_hash = r->peers_hash;
    uint64_t lid = tk_raft_leader(r->core);
    const struct tk_raft_member *lm = lid ? raftd_member(r, lid) : NULL;
    rep.probe_reply.leader_id = lm ? lid : 0;
    if (lm) {
        rep.probe_reply.leader_peer_addr = (struct tk_raft_str){lm->peer_addr,
                                                                (uint16_t)strlen(lm->peer_addr)};
        rep.probe_reply.leader_client_addr = (struct tk_raft_str){
            lm->client_addr, (uint16_t)strlen(lm->client_addr)};
    }
    raftd_send_msg(r, &rep, addr);
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
                raftd_send_role(r, false);
            }
        }
    }
}

void raftd_on_frame(void *ctx, struct tk_plink *l, const struct tk_wire_frame *f)
{
    struct tk_raftd *r = ctx;
    uint64_t lo, hi;
    raftd_domain(r, &lo, &hi);
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
    raftd_process(r, rc, &up);
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
    struct tk_raft_config c = {.domain_lo = raftd_random_u64(), .domain_hi = raftd_random_u64()};
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
    raftd_process(r, rc, &up);
}

void raftd_probe_peers(struct tk_raftd *r)
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
        raftd_send_msg(r, &m, r->peer_addr[i]);
    }
    maybe_bootstrap(r);
}

int raftd_parse_peers(struct tk_raftd *r)
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
