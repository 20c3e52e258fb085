/* The Raft thread's side of the peers: frames in (domain checks, probes),
 * messages out (by NodeId, only to the process that is that NodeId), and
 * bootstrap of a new fencing domain by probing (SPEC 9, 10). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/tls.h"
#include "net/raftd.h"
#include "raft/members.h"

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

static int peer_index(struct tk_raftd *r, const char *addr, size_t len);

/* Whether this node may dial addr: an entry of --peers or the peer
 * address of a member of its configuration. Nothing a frame says adds to
 * that list, so no peer (authenticated or not) can make this node dial
 * elsewhere, and the outbound links stay as few as the members. */
bool raftd_dial_ok(void *ctx, const char *addr)
{
    struct tk_raftd *r = ctx;
    if (peer_index(r, addr, strlen(addr)) >= 0)
        return true;
    const struct tk_raft_config *c = tk_raft_config(r->core);
    for (uint32_t i = 0; c && i < c->n; i++)
        if (!strcmp(c->m[i].peer_addr, addr))
            return true;
    return false;
}

/* Whether the host part of addr is a name the certificate holds. */
static bool cert_names_host(const struct tk_tls *tls, const char *addr)
{
    char host[TK_ADDR_MAX];
    uint32_t port;
    return tk_addr_split(addr, host, sizeof(host), &port) == TK_OK &&
           tk_tls_peer_has_name(tls, host);
}

bool raftd_peer_cert(void *ctx, const struct tk_tls *tls)
{
    struct tk_raftd *r = ctx;
    for (uint32_t i = 0; i < r->npeers; i++)
        if (cert_names_host(tls, r->peer_addr[i]))
            return true;
    const struct tk_raft_config *c = tk_raft_config(r->core);
    for (uint32_t i = 0; c && i < c->n; i++)
        if (cert_names_host(tls, c->m[i].peer_addr))
            return true;
    char names[sizeof(r->s->opt.tls_peer_names)];
    snprintf(names, sizeof(names), "%s", r->s->opt.tls_peer_names);
    for (char *save = NULL, *n = strtok_r(names, ",", &save); n; n = strtok_r(NULL, ",", &save))
        if (tk_tls_peer_has_name(tls, n))
            return true;
    return false;
}

/* Sends a message to a member by NodeId over our outbound link to its
 * address, and only if the process there is that NodeId: a restarted node
 * (new NodeId) at the same address never receives an old identity's
 * traffic, so it stays out of the quorum (SPEC 8, 10). An address that is
 * not a member's (raftd_dial_ok) is not dialled: counted, logged at most
 * once a second. */
void raftd_send_msg(struct tk_raftd *r, const struct tk_raft_msg *m, const char *addr)
{
    if (!r->peers)
        return;
    bool listed = false; /* addr is a member's or a --peers entry: no need to check */
    if (!addr) {
        const struct tk_raft_member *mb = raftd_member(r, m->to);
        if (mb)
            addr = mb->peer_addr;
        /* A fresh node knows its bootstrap partners only from probes, and
         * the leader it joins from the Join's answers, until the log or a
         * snapshot brings the configuration. */
        for (uint32_t i = 0; !addr && i < r->npeers; i++)
            if (i != r->self && r->info[i].id == m->to)
                addr = r->peer_addr[i];
        listed = addr != NULL; /* the hot path: a member's messages */
        if (!addr && m->to == r->join_leader_id && r->join_leader_addr[0])
            addr = r->join_leader_addr;
        if (!addr)
            return;
    }
    if (!listed && !raftd_dial_ok(r, addr)) {
        r->dials_refused++;
        if (r->now >= r->refused_log_at) {
            r->refused_log_at = r->now + 1000000u;
            char safe[TK_ADDR_MAX];
            snprintf(safe, sizeof(safe), "%s", addr);
            for (char *c = safe; *c; c++)
                if ((unsigned char)*c < 0x21 || *c == 0x7f)
                    *c = '?';
            tk_log(TK_LOG_WARN,
                   "not dialling %s for a message of type %u: neither --peers nor the "
                   "configuration lists it (peer_dials_refused_total counts these)",
                   safe, (unsigned)m->type);
        }
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

/* The leader this node can vouch for: itself, or one it heard from within
 * an election timeout. (A learner never times out, so the core may name a
 * leader long gone; a fresh node must not be sent to it.) */
static uint64_t live_leader(struct tk_raftd *r)
{
    if (tk_raft_role(r->core) == TK_RAFT_LEADER)
        return r->s->node_id;
    uint64_t lid = tk_raft_leader(r->core);
    uint64_t fresh_us = (uint64_t)r->s->opt.election_ms * 1000u;
    return lid && r->leader_heard_us && r->now - r->leader_heard_us < fresh_us ? lid : 0;
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
        pi->forced = (m->probe.flags & TK_RAFT_PROBE_FORCE) != 0;
    }
    /* Answer on our link to the prober's address. */
    char addr[TK_ADDR_MAX];
    copy_str(addr, sizeof(addr), &m->probe.peer_addr);
    struct tk_raft_msg rep = {.type = TK_RAFT_MSG_PROBE_REPLY,
                              .from = r->s->node_id,
                              .to = m->from,
                              .term = tk_raft_term(r->core)};
    uint64_t lo, hi;
    raftd_domain(r, &lo, &hi);
    rep.probe_reply.flags = (lo || hi) ? TK_RAFT_PROBE_MEMBER : 0;
    if (tk_raft_role(r->core) == TK_RAFT_LEADER)
        rep.probe_reply.flags |= TK_RAFT_PROBE_LEADER;
    rep.probe_reply.peers_hash = r->peers_hash;
    uint64_t lid = live_leader(r);
    const struct tk_raft_member *lm = lid ? raftd_member(r, lid) : NULL;
    rep.probe_reply.leader_id = lm ? lid : 0;
    if (lm) {
        rep.probe_reply.leader_peer_addr =
            (struct tk_raft_str){lm->peer_addr, (uint16_t)strlen(lm->peer_addr)};
        rep.probe_reply.leader_client_addr =
            (struct tk_raft_str){lm->client_addr, (uint16_t)strlen(lm->client_addr)};
    }
    rep.probe_reply.token_next = (lo || hi) ? tk_raft_next_token(r->core) : 0;
    raftd_send_msg(r, &rep, addr);
}

/* Where we stand, for /status and the log: a changed note is logged once. */
static void set_note(struct tk_raftd *r, uint8_t membership, int level, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void set_note(struct tk_raftd *r, uint8_t membership, int level, const char *fmt, ...)
{
    char note[sizeof(r->note)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(note, sizeof(note), fmt, ap);
    va_end(ap);
    /* Addresses in it come from peers: keep /status valid JSON. */
    for (char *c = note; *c; c++)
        if (*c == '"' || *c == '\\' || (unsigned char)*c < 0x20)
            *c = '?';
    r->membership = membership;
    if (strcmp(note, r->note) != 0) {
        memcpy(r->note, note, sizeof(note));
        tk_log(level, "membership: %s", note);
    }
}

static void on_probe_reply(struct tk_raftd *r, const struct tk_wire_frame *f)
{
    const struct tk_raft_msg *m = &f->msg;
    for (uint32_t i = 0; i < r->npeers; i++) {
        struct tk_plink *l = tk_peers_find(r->peers, r->peer_addr[i]);
        if (i == r->self || !l || tk_plink_remote_id(l) != m->from)
            continue;
        struct peer_info *pi = &r->info[i];
        pi->id = m->from;
        pi->replied_us = r->now;
        pi->member = (m->probe_reply.flags & TK_RAFT_PROBE_MEMBER) != 0;
        pi->peers_hash = m->probe_reply.peers_hash;
        pi->leader_known = m->probe_reply.leader_id != 0;
        pi->token_next = m->probe_reply.token_next;
        if (!pi->member && pi->peers_hash == r->peers_hash)
            pi->agreed = true;
        if (!pi->member || tk_raft_config(r->core))
            continue;
        /* A live domain: the one we will join, through its leader. */
        if (!r->join_domain_lo && !r->join_domain_hi) {
            r->join_domain_lo = f->domain_lo;
            r->join_domain_hi = f->domain_hi;
        }
        bool led = m->probe_reply.leader_id && m->probe_reply.leader_peer_addr.len;
        if (f->domain_lo != r->join_domain_lo || f->domain_hi != r->join_domain_hi) {
            /* Peers of two domains: the first one seen is kept while it has
             * a leader. One without (a lost domain that a forced one
             * replaced) gives way to one whose member names its leader. */
            if (!led || r->join_leader_id)
                continue;
            r->join_domain_lo = f->domain_lo;
            r->join_domain_hi = f->domain_hi;
        }
        if (led) {
            if (!r->join_leader_id)
                r->probe_at = r->now; /* ask to join now, not a probe period later */
            r->join_leader_id = m->probe_reply.leader_id;
            copy_str(r->join_leader_addr, sizeof(r->join_leader_addr),
                     &m->probe_reply.leader_peer_addr);
        }
        if (m->probe_reply.leader_client_addr.len) {
            /* Until we are in: point clients at that domain's leader. */
            char addr[TK_ADDR_MAX];
            copy_str(addr, sizeof(addr), &m->probe_reply.leader_client_addr);
            tk_driver_point_clients(r->d, addr);
        }
    }
}

static void send_join_reply(struct tk_raftd *r, struct tk_plink *l, uint64_t to, uint8_t status)
{
    struct tk_raft_msg rep = {.type = TK_RAFT_MSG_JOIN_REPLY,
                              .from = r->s->node_id,
                              .to = to,
                              .term = tk_raft_term(r->core)};
    rep.join_reply.status = status;
    uint64_t lid = live_leader(r);
    const struct tk_raft_member *lm = lid ? raftd_member(r, lid) : NULL;
    if (lm) {
        rep.join_reply.leader_id = lid;
        rep.join_reply.leader_peer_addr =
            (struct tk_raft_str){lm->peer_addr, (uint16_t)strlen(lm->peer_addr)};
    }
    /* Signed for this link's handshake alone: ticketctl believes only an
     * answer that the node it authenticated made. */
    char text[TK_WIRE_REPLY_TEXT_MAX];
    size_t n = tk_wire_join_reply_text(&rep, text, sizeof(text));
    tk_plink_mac(l, "reply", text, n, rep.join_reply.mac);
    /* On the link the request came in on: the joiner reads every link it
     * dialled, and its address is not a member's yet. */
    struct tk_wire_frame f = {.msg = rep};
    raftd_domain(r, &f.domain_lo, &f.domain_hi);
    tk_peers_send(r->peers, l, &f);
}

void raftd_note_gone(struct tk_raftd *r)
{
    const struct tk_raft_config *c = tk_raft_config(r->core);
    if (c == NULL)
        return;
    for (uint32_t i = 0; i < r->seen_n; i++)
        if (tk_raft_config_find(c, r->seen_ids[i]) == NULL && !raftd_was_removed(r, r->seen_ids[i]))
            r->gone[r->gone_next++ % RAFTD_GONE_MAX] = r->seen_ids[i];
    r->seen_n = c->n;
    for (uint32_t i = 0; i < c->n; i++)
        r->seen_ids[i] = c->m[i].id;
}

bool raftd_was_removed(const struct tk_raftd *r, uint64_t id)
{
    for (uint32_t i = 0; i < RAFTD_GONE_MAX; i++)
        if (id != 0 && r->gone[i] == id)
            return true;
    return false;
}

/* Leader: a fresh NodeId asks to be added (SPEC 10). It becomes a learner
 * at once if the core takes the change; the rest of the replacement
 * (promote, remove the old identity) is raftd_members_step's. */
static void on_join(struct tk_raftd *r, struct tk_plink *l, const struct tk_wire_frame *f)
{
    const struct tk_raft_msg *m = &f->msg;
    const struct tk_raft_config *c = tk_raft_config(r->core);
    if (tk_raft_role(r->core) != TK_RAFT_LEADER || !c) {
        send_join_reply(r, l, m->from, TK_RAFT_JOIN_NOT_LEADER);
        return;
    }
    /* A Join in this domain (only a node once added to it knows it) from a
     * NodeId this node saw leave the configuration: a removed or replaced
     * learner that woke up. Adding it again would remove its replacement,
     * which would then ask again, and so on: tell it instead, so it exits
     * (SPEC 10). A learner whose addition a new leader truncated was never
     * seen leaving here, and is added again. */
    if ((f->domain_lo | f->domain_hi) != 0 && f->domain_lo == c->domain_lo &&
        f->domain_hi == c->domain_hi && tk_raft_config_find(c, m->from) == NULL &&
        raftd_was_removed(r, m->from)) {
        tk_log(TK_LOG_WARN, "join of %016llx refused: it was removed from this domain",
               (unsigned long long)m->from);
        send_join_reply(r, l, m->from, TK_RAFT_JOIN_REMOVED);
        return;
    }
    struct tk_raft_member j = {.id = m->from, .role = TK_RAFT_LEARNER};
    copy_str(j.peer_addr, sizeof(j.peer_addr), &m->join.peer_addr);
    copy_str(j.client_addr, sizeof(j.client_addr), &m->join.client_addr);
    bool listed = peer_index(r, m->join.peer_addr.p, m->join.peer_addr.len) >= 0;
    uint8_t verdict = tk_members_join(c, &j, listed);
    uint8_t status = TK_RAFT_JOIN_OK;
    if (verdict == TK_MEMBERS_REFUSE) {
        status = TK_RAFT_JOIN_REFUSED;
        tk_log(TK_LOG_WARN, "join of %016llx at %s refused: that address is not in --peers",
               (unsigned long long)j.id, j.peer_addr);
    } else if (verdict == TK_MEMBERS_WAIT) {
        status = TK_RAFT_JOIN_RETRY; /* stale learners go first (raftd_members_step) */
    } else if (verdict == TK_MEMBERS_ADD) {
        struct tk_raft_update up;
        int rc = tk_raft_change(r->core, TK_RAFT_ADD_LEARNER, &j, r->now, &up);
        if (rc == TK_OK) {
            tk_log(TK_LOG_INFO, "adding %016llx at %s as a learner (index %llu)",
                   (unsigned long long)j.id, j.peer_addr, (unsigned long long)up.index);
            atomic_fetch_add(&r->m_joins, 1);
            atomic_fetch_add(&r->m_changes, 1);
        }
        status = rc == TK_OK                             ? TK_RAFT_JOIN_OK
                 : rc == TK_EFULL || rc == TK_ENOTLEADER ? TK_RAFT_JOIN_RETRY
                                                         : TK_RAFT_JOIN_REFUSED;
        raftd_process(r, rc, &up);
    }
    send_join_reply(r, l, m->from, status);
}

/* Leader: an operator removes a member that is gone for good (ticketctl
 * remove-member, authenticated by the peer secret like every peer link).
 * A member heard from within an election timeout is alive: refused, so a
 * typo cannot take a live voter out. */
static void on_remove(struct tk_raftd *r, struct tk_plink *l, const struct tk_raft_msg *m)
{
    const struct tk_raft_config *c = tk_raft_config(r->core);
    if (tk_raft_role(r->core) != TK_RAFT_LEADER || !c || !tk_driver_serving(r->d)) {
        send_join_reply(r, l, m->from, TK_RAFT_JOIN_NOT_LEADER);
        return;
    }
    uint64_t id = m->remove.id;
    const struct tk_raft_member *mb = tk_raft_config_find(c, id);
    if (!mb) {
        send_join_reply(r, l, m->from, TK_RAFT_JOIN_OK); /* gone already */
        return;
    }
    if (id == r->s->node_id) {
        /* The leader is alive by definition: not a member gone for good. */
        tk_log(TK_LOG_WARN, "removal of %016llx refused: it is this leader",
               (unsigned long long)id);
        send_join_reply(r, l, m->from, TK_RAFT_JOIN_REFUSED);
        return;
    }
    struct tk_raft_update up;
    struct tk_raft_status st;
    tk_raft_status(r->core, &st);
    uint64_t heard = 0;
    for (uint32_t i = 0; i < st.n_members; i++)
        if (st.members[i].id == id)
            heard = st.members[i].last_heard_us;
    uint64_t alive_us = (uint64_t)r->s->opt.election_ms * 1000u;
    bool alive = heard && r->now - heard < alive_us;
    uint32_t voters = tk_raft_config_voters(c);
    if (alive || (mb->role == TK_RAFT_VOTER && voters <= 1)) {
        tk_log(TK_LOG_WARN, "removal of %016llx refused: %s", (unsigned long long)id,
               alive ? "it answered within an election timeout" : "it is the last voter");
        send_join_reply(r, l, m->from, TK_RAFT_JOIN_REFUSED);
        return;
    }
    struct tk_raft_member gone = *mb;
    int rc = tk_raft_change(r->core, TK_RAFT_REMOVE, &gone, r->now, &up);
    if (rc == TK_OK) {
        tk_log(TK_LOG_WARN, "removing %016llx at %s on an operator's request (index %llu)",
               (unsigned long long)id, gone.peer_addr, (unsigned long long)up.index);
        atomic_fetch_add(&r->m_changes, 1);
    }
    raftd_process(r, rc, &up);
    send_join_reply(r, l, m->from,
                    rc == TK_OK                             ? TK_RAFT_JOIN_OK
                    : rc == TK_EFULL || rc == TK_ENOTLEADER ? TK_RAFT_JOIN_RETRY
                                                            : TK_RAFT_JOIN_REFUSED);
}

/* A fresh node or a learner: what the leader said of our Join; a member:
 * the leader says we are no longer one. */
static void on_join_reply(struct tk_raftd *r, const struct tk_wire_frame *f)
{
    const struct tk_raft_msg *m = &f->msg;
    uint64_t lo, hi;
    raftd_domain(r, &lo, &hi);
    if (m->join_reply.status == TK_RAFT_JOIN_REMOVED) {
        const struct tk_raft_config *c = tk_raft_config(r->core);
        if (!c || f->domain_lo != lo || f->domain_hi != hi || r->removed)
            return;
        if (tk_raft_config_find(c, m->from) == NULL || m->term < tk_raft_term(r->core))
            return; /* only a member leading a term we know counts */
        r->removed = true;
        set_note(r, RAFTD_REMOVED, TK_LOG_ERROR,
                 "leader %016llx says NodeId %016llx is no longer in the configuration "
                 "(replaced or removed); exiting with status 3 (restarted at an address of "
                 "--peers, a process joins again under a new NodeId)",
                 (unsigned long long)m->from, (unsigned long long)r->s->node_id);
        atomic_store(&r->s->removed, 1);
        return;
    }
    r->join_reply = m->join_reply.status;
    if (m->join_reply.status == TK_RAFT_JOIN_NOT_LEADER && m->join_reply.leader_id &&
        m->join_reply.leader_peer_addr.len) {
        r->join_leader_id = m->join_reply.leader_id;
        copy_str(r->join_leader_addr, sizeof(r->join_leader_addr), &m->join_reply.leader_peer_addr);
    }
}

/* Leader: a vote request from a NodeId that its configuration no longer
 * lists comes from a replaced or removed identity that woke up. Tell it,
 * so it stops campaigning and exits (SPEC 10). Only votes: learners send
 * none, and a voter missing from the leader's latest configuration can
 * only have been removed by it or an earlier leader. */
static bool answer_stranger(struct tk_raftd *r, struct tk_plink *l, const struct tk_raft_msg *m)
{
    if (m->type != TK_RAFT_MSG_PREVOTE && m->type != TK_RAFT_MSG_VOTE)
        return false;
    const struct tk_raft_config *c = tk_raft_config(r->core);
    if (tk_raft_role(r->core) != TK_RAFT_LEADER || !c || tk_raft_config_find(c, m->from))
        return false;
    send_join_reply(r, l, m->from, TK_RAFT_JOIN_REMOVED);
    return true;
}

static void on_boot(struct tk_raftd *r, const struct tk_raft_msg *m);

void raftd_on_frame(void *ctx, struct tk_plink *l, const struct tk_wire_frame *f)
{
    struct tk_raftd *r = ctx;
    uint64_t lo, hi;
    raftd_domain(r, &lo, &hi);
    bool mine = lo || hi;
    bool theirs = f->domain_lo || f->domain_hi;
    uint8_t type = f->msg.type;
    switch (type) {
        case TK_RAFT_MSG_PROBE:
            on_probe(r, &f->msg);
            return;
        case TK_RAFT_MSG_PROBE_REPLY:
            on_probe_reply(r, f);
            return;
        case TK_RAFT_MSG_JOIN:
            on_join(r, l, f);
            return;
        case TK_RAFT_MSG_JOIN_REPLY:
            on_join_reply(r, f);
            return;
        case TK_RAFT_MSG_REMOVE:
            on_remove(r, l, &f->msg);
            return;
        case TK_RAFT_MSG_BOOT:
            on_boot(r, &f->msg);
            return;
        default:
            break;
    }
    if (mine && theirs && (f->domain_lo != lo || f->domain_hi != hi)) {
        tk_log(TK_LOG_WARN, "peer frame from another fencing domain; closing link");
        tk_plink_close(r->peers, l);
        return;
    }
    /* Replies from a fresh learner carry no domain until it learns one. */
    if (!theirs && type != TK_RAFT_MSG_VOTE_REPLY && type != TK_RAFT_MSG_APPEND_REPLY &&
        type != TK_RAFT_MSG_SNAPSHOT_REPLY)
        return;
    if (!mine) {
        /* A fresh node takes Raft traffic only of the new domain the
         * agreement gave it (accepted or chosen here), or of the domain it
         * asked to join. */
        bool known =
            theirs && f->domain_lo == r->join_domain_lo && f->domain_hi == r->join_domain_hi;
        known |=
            theirs && r->boot_ready && tk_boot_knows_domain(&r->boot, f->domain_lo, f->domain_hi);
        if (!known)
            return;
    }
    if (mine && answer_stranger(r, l, &f->msg))
        return;
    if (type == TK_RAFT_MSG_APPEND || type == TK_RAFT_MSG_SNAPSHOT)
        r->leader_heard_us = r->now;
    struct tk_raft_msg m = f->msg;
    m.to = r->s->node_id;
    struct tk_raft_update up;
    int rc = tk_raft_receive(r->core, &m, r->now, &up);
    if (rc == TK_EPROTO && r->now >= r->invalid_log_at) {
        /* Refused whole, nothing changed; a peer that sends these is
         * broken or not what it claims: say so, at most once a second. */
        r->invalid_log_at = r->now + 1000000u;
        tk_log(TK_LOG_WARN,
               "refused an invalid Raft message (type %u) from %016llx: it contradicts the "
               "log or the protocol (raft_messages_invalid_total counts them)",
               (unsigned)m.type, (unsigned long long)m.from);
    }
    raftd_process(r, rc, &up);
}

/* Writes entry 1 of the new fencing domain the agreement chose (SPEC 7,
 * 10): this node is one of its voters. */
static void bootstrap(struct tk_raftd *r, const struct tk_boot_value *v)
{
    tk_log(TK_LOG_INFO,
           "bootstrapping fencing domain %016llx%016llx with %u voters (agreed by a majority "
           "of --peers), first token %llu",
           (unsigned long long)v->config.domain_hi, (unsigned long long)v->config.domain_lo,
           v->config.n, (unsigned long long)v->token_first);
    /* A refusal (the wall clock, a configuration the core rejects) is
     * logged by the driver and changes nothing; the domain's other voters
     * write the same entry, or this node joins it later. */
    (void)tk_driver_bootstrap(r->d, &v->config, v->token_first);
    r->boot_linger_until = r->now + BOOT_LINGER_US;
}

/* --peers as the agreement sees it: each entry's NodeId and client
 * address as its probes gave them, once it probed us with the same
 * --peers and is fresh (no domain); 0 otherwise, so nothing is sent to it. */
static void boot_peers(struct tk_raftd *r, struct tk_boot_peer *out)
{
    for (uint32_t i = 0; i < r->npeers; i++) {
        struct tk_boot_peer *p = &out[i];
        memset(p, 0, sizeof(*p));
        snprintf(p->peer_addr, sizeof(p->peer_addr), "%s", r->peer_addr[i]);
        if (i == r->self) {
            p->id = r->s->node_id;
            snprintf(p->client_addr, sizeof(p->client_addr), "%s", r->s->advertise);
            continue;
        }
        const struct peer_info *pi = &r->info[i];
        if (pi->id && pi->probed_us && !pi->member && pi->peers_hash == r->peers_hash &&
            pi->client_addr[0]) {
            p->id = pi->id;
            snprintf(p->client_addr, sizeof(p->client_addr), "%s", pi->client_addr);
        }
    }
}

/* What one call of the agreement asks for: its messages, and entry 1. */
static void boot_out(struct tk_raftd *r, const struct tk_boot_out *out)
{
    for (uint32_t i = 0; i < out->n; i++)
        raftd_send_msg(r, &out->sends[i].m, r->peer_addr[out->sends[i].peer]);
    if (out->write && !tk_raft_config(r->core))
        bootstrap(r, out->write);
}

static void boot_start(struct tk_raftd *r)
{
    if (r->boot_ready)
        return;
    tk_boot_init(&r->boot, r->s->node_id, r->self, r->npeers, r->peers_hash, raftd_random_u64());
    r->boot_ready = true;
}

/* A BOOT message: a fresh node takes part in the agreement; a member has
 * nothing to say (its domain exists). */
static void on_boot(struct tk_raftd *r, const struct tk_raft_msg *m)
{
    if (tk_raft_config(r->core) || r->npeers < 3)
        return;
    boot_start(r);
    int from = -1;
    for (uint32_t i = 0; i < r->npeers && from < 0; i++)
        if (i != r->self && r->info[i].id == m->from)
            from = (int)i;
    if (from < 0)
        return;
    struct tk_boot_peer peers[TK_PEERS_MAX];
    boot_peers(r, peers);
    struct tk_boot_out out;
    tk_boot_receive(&r->boot, peers, (uint32_t)from, m, r->boot_willing, r->boot_floor, r->now,
                    &out);
    boot_out(r, &out);
}

/* Bootstrap (SPEC 10). A fresh node whose view says a new domain is due
 * (every peer of --peers fresh with the same --peers, and it is the
 * lowest NodeId; or --force-new-domain over a lost majority: a majority
 * fresh, no survivor knowing a leader, and it is the lowest NodeId of the
 * fresh nodes so run) does not write it from that view: it proposes it to
 * the agreement (raft/boot.h), and only a value a majority of --peers
 * accepted is written, so two views can never start two domains. While a
 * configured peer belongs to a live domain, a fresh node joins it instead
 * (maybe_join) and promises nothing. A forced domain's first token is
 * above every counter a promiser's probes saw, and it serves nothing for
 * --new-domain-hold-ms, so that the lost domain's holders run out first. */
static void maybe_bootstrap(struct tk_raftd *r)
{
    boot_start(r);
    struct tk_boot_peer bpeers[TK_PEERS_MAX];
    boot_peers(r, bpeers);
    if (tk_raft_config(r->core)) {
        /* Entry 1 is written: keep telling the other voters for a while,
         * in case they missed the CHOSEN (they would join otherwise). */
        if (r->offering && r->now < r->boot_linger_until) {
            struct tk_boot_out out;
            tk_boot_step(&r->boot, bpeers, &r->offer, r->now, &out);
            boot_out(r, &out);
        }
        return;
    }
    struct tk_members_peer peers[TK_PEERS_MAX];
    uint32_t n = 0;
    for (uint32_t i = 0; i < r->npeers; i++) {
        if (i == r->self)
            continue;
        struct peer_info *pi = &r->info[i];
        bool fresh = pi->replied_us && r->now - pi->replied_us < PROBE_FRESH_US;
        peers[n++] = (struct tk_members_peer){
            .id = pi->id,
            .fresh = fresh,
            .partner = fresh && !pi->member && pi->peers_hash == r->peers_hash && pi->id &&
                       pi->probed_us && pi->client_addr[0],
            .member = pi->member && !pi->agreed,
            .leader_known = pi->leader_known,
            .forced = pi->forced,
            .token_next = pi->token_next,
        };
    }
    struct tk_members_boot b;
    uint8_t v =
        tk_members_bootstrap(r->s->node_id, r->s->opt.force_new_domain, peers, n, r->npeers, &b);
    bool member_seen =
        v == TK_MEMBERS_BOOT_JOIN || v == TK_MEMBERS_BOOT_NO_LEADER || v == TK_MEMBERS_BOOT_FORCE;
    r->domain_seen = member_seen;
    if (member_seen && v != TK_MEMBERS_BOOT_JOIN)
        r->join_leader_id = 0; /* the leader we knew is gone: wait, say why */
    if (v != TK_MEMBERS_BOOT_JOIN)
        r->leader_seen_us = 0;
    else if (!r->leader_seen_us)
        r->leader_seen_us = r->now;
    /* A node that sees a live domain promises nothing: it joins it. */
    r->boot_willing = v != TK_MEMBERS_BOOT_JOIN;
    r->boot_floor = b.token_floor;
    bool offer = v == TK_MEMBERS_BOOT_NOW || v == TK_MEMBERS_BOOT_FORCE;
    if (offer && !r->offering) {
        /* A new offer: a domain id, a first token, a hold of its own. It
         * stays while this node offers, so retries propose the same. */
        uint64_t wall = tk_wall_us();
        uint64_t hold_us = (uint64_t)r->s->opt.new_domain_hold_ms * 1000u;
        uint64_t drift_us = (uint64_t)r->s->opt.max_clock_drift_ms * 1000u;
        uint32_t majority = r->npeers / 2 + 1;
        r->offer = (struct tk_boot_offer){
            .domain_lo = raftd_random_u64(),
            .domain_hi = raftd_random_u64(),
            /* Above every token the lost domain granted: its counter
             * starts at a wall clock at most the drift bound ahead of this
             * one and gains a token a grant, so only a domain that granted
             * more than one a microsecond on average runs ahead of its
             * wall clock; the counters the promisers' probes saw cover it. */
            .token_first = TK_MAX(wall + drift_us, b.token_floor),
            .serve_after_us = v == TK_MEMBERS_BOOT_FORCE ? wall + hold_us : 0,
            /* A first domain has every peer; a forced one every fresh
             * node this one sees, and a majority at least. */
            .quorum = v == TK_MEMBERS_BOOT_NOW ? r->npeers : TK_MAX(majority, b.fresh),
        };
        if (v == TK_MEMBERS_BOOT_FORCE)
            tk_log(TK_LOG_WARN,
                   "forcing a new fencing domain: %u of %u members are fresh and the old "
                   "domain has no leader; proposed to --peers, and once a majority agrees "
                   "every lock of the old domain is forgotten, and the new one grants nothing "
                   "for %llu ms",
                   b.fresh, r->npeers, (unsigned long long)r->s->opt.new_domain_hold_ms);
    }
    r->offering = offer;
    struct tk_boot_out out;
    tk_boot_step(&r->boot, bpeers, offer ? &r->offer : NULL, r->now, &out);
    boot_out(r, &out);
    if (member_seen)
        return;
    set_note(r, RAFTD_BOOTSTRAPPING, TK_LOG_INFO,
             "fresh, waiting for every peer of --peers to be reachable and fresh");
}

static void send_join(struct tk_raftd *r, const char *addr, uint64_t to)
{
    struct tk_raft_msg m = {
        .type = TK_RAFT_MSG_JOIN, .from = r->s->node_id, .to = to, .term = tk_raft_term(r->core)};
    m.join.peer_addr =
        (struct tk_raft_str){r->peer_addr[r->self], (uint16_t)strlen(r->peer_addr[r->self])};
    m.join.client_addr = (struct tk_raft_str){r->s->advertise, (uint16_t)strlen(r->s->advertise)};
    raftd_send_msg(r, &m, addr);
}

/* A fresh node whose peers belong to a domain asks that domain's leader
 * to add it (SPEC 10); without a leader it waits, and never bootstraps. */
static void maybe_join(struct tk_raftd *r)
{
    if (!r->domain_seen || tk_raft_config(r->core))
        return;
    if (!r->join_leader_id) {
        set_note(r, RAFTD_WAITING, TK_LOG_WARN,
                 "peers belong to fencing domain %016llx%016llx but none knows a leader; "
                 "waiting to join. If a majority of members lost their state, that domain "
                 "cannot recover: restart the members with --force-new-domain",
                 (unsigned long long)r->join_domain_hi, (unsigned long long)r->join_domain_lo);
        return;
    }
    /* Run to recover from a lost majority, a node joins only a leader that
     * stays in office: one about to step down (check-quorum) would leave
     * it a learner of a dead domain, unable to form the new one. */
    uint64_t confirm_us = 2u * (uint64_t)r->s->opt.election_ms * 1000u;
    if (r->s->opt.force_new_domain && r->now - r->leader_seen_us < confirm_us) {
        set_note(r, RAFTD_WAITING, TK_LOG_INFO,
                 "--force-new-domain: a leader of domain %016llx%016llx answers; joining it "
                 "once it has stayed in office for two election timeouts",
                 (unsigned long long)r->join_domain_hi, (unsigned long long)r->join_domain_lo);
        return;
    }
    send_join(r, r->join_leader_addr, r->join_leader_id);
    const char *why = r->join_reply == TK_RAFT_JOIN_REFUSED ? "refused: the leader's --peers "
                                                              "does not list this address"
                      : r->join_reply == TK_RAFT_JOIN_RETRY ? "asked to retry (a change runs)"
                                                            : "asked";
    set_note(r, RAFTD_JOINING, r->join_reply == TK_RAFT_JOIN_REFUSED ? TK_LOG_WARN : TK_LOG_INFO,
             "joining fencing domain %016llx%016llx through leader %016llx at %s: %s",
             (unsigned long long)r->join_domain_hi, (unsigned long long)r->join_domain_lo,
             (unsigned long long)r->join_leader_id, r->join_leader_addr, why);
}

/* A member: where it stands. A learner (or a node whose configuration
 * lost it, e.g. its addition was truncated by a new leader) that hears
 * no leader for two election timeouts asks again. */
static void member_state(struct tk_raftd *r, const struct tk_raft_config *c, bool probe_due)
{
    if (r->removed)
        return;
    uint64_t self = r->s->node_id;
    if (tk_raft_config_is_voter(c, self)) {
        uint64_t wall = tk_wall_us();
        char when[40];
        uint64_t serve_at = c->serve_after_us
                                ? c->serve_after_us + (uint64_t)r->s->opt.max_clock_drift_ms * 1000u
                                : 0;
        if (serve_at > wall)
            set_note(r, RAFTD_VOTER, TK_LOG_WARN,
                     "voter of a forced new fencing domain: nothing is served until %s "
                     "(--new-domain-hold-ms and --max-clock-drift-ms), so that the lost "
                     "domain's leases run out first",
                     tk_wall_str(serve_at, when, sizeof(when)));
        else if (tk_members_replacing(c, self))
            set_note(r, RAFTD_VOTER, TK_LOG_INFO,
                     "voter; the identity this node replaces is still being removed");
        else if (!tk_raft_leader(r->core))
            set_note(r, RAFTD_VOTER, TK_LOG_INFO, "voter; no leader known (no quorum yet)");
        else
            set_note(r, RAFTD_VOTER, TK_LOG_INFO, "voter");
        return;
    }
    uint64_t silence = 2u * (uint64_t)r->s->opt.election_ms * 1000u;
    if (r->now - r->leader_heard_us < silence) {
        set_note(r, RAFTD_LEARNER, TK_LOG_INFO, "learner: catching up before promotion to voter");
        return;
    }
    set_note(r, RAFTD_LEARNER, TK_LOG_WARN,
             "learner without a leader: asking to join again. If a majority of members lost "
             "their state, that domain cannot recover: restart the lost members with "
             "--force-new-domain");
    if (!probe_due)
        return;
    uint64_t lid = tk_raft_leader(r->core);
    const struct tk_raft_member *lm = lid ? tk_raft_config_find(c, lid) : NULL;
    if (lm)
        send_join(r, lm->peer_addr, lid);
    else if (r->join_leader_id)
        send_join(r, r->join_leader_addr, r->join_leader_id);
}

void raftd_probe_peers(struct tk_raftd *r)
{
    if (!r->peers)
        return;
    bool due = r->now >= r->probe_at;
    if (due) {
        r->probe_at = r->now + PROBE_PERIOD_US;
        tk_peers_prune(r->peers, raftd_dial_ok, r); /* members that left */
    }
    const struct tk_raft_config *c = tk_raft_config(r->core);
    if (c) {
        /* A member: probes are for fresh nodes. Its note is kept current
         * (every 20 ms, off the hot path), its Join resends are periodic. */
        if (due || r->now - r->note_us >= 20000u) {
            r->note_us = r->now;
            member_state(r, c, due);
        }
        return;
    }
    if (!due)
        return;
    for (uint32_t i = 0; i < r->npeers; i++) {
        if (i == r->self)
            continue;
        struct tk_raft_msg m = {.type = TK_RAFT_MSG_PROBE, .from = r->s->node_id, .to = 0};
        m.probe.peers_hash = r->peers_hash;
        m.probe.peer_addr =
            (struct tk_raft_str){r->peer_addr[r->self], (uint16_t)strlen(r->peer_addr[r->self])};
        m.probe.client_addr =
            (struct tk_raft_str){r->s->advertise, (uint16_t)strlen(r->s->advertise)};
        m.probe.flags = r->s->opt.force_new_domain ? TK_RAFT_PROBE_FORCE : 0;
        raftd_send_msg(r, &m, r->peer_addr[i]);
    }
    maybe_bootstrap(r);
    maybe_join(r);
}

/* Leader: one step of every replacement in progress (SPEC 10), as
 * tk_members_next decides; the core refuses what must wait. */
void raftd_members_step(struct tk_raftd *r)
{
    if (!r->peers || r->now < r->members_at || tk_raft_role(r->core) != TK_RAFT_LEADER ||
        !tk_driver_serving(r->d))
        return;
    r->members_at = r->now + MEMBERS_PERIOD_US;
    const struct tk_raft_config *c = tk_raft_config(r->core);
    struct tk_raft_status st;
    tk_raft_status(r->core, &st);
    uint64_t id;
    uint8_t type = tk_members_next(c, &st, r->npeers, &id);
    if (!type)
        return;
    struct tk_raft_update up;
    if (type == TK_MEMBERS_TRANSFER) {
        tk_log(TK_LOG_WARN,
               "a newer process joined at this leader's address; handing "
               "leadership over so that another leader replaces this identity");
        int rc = tk_raft_transfer(r->core, 0, r->now, &up);
        raftd_process(r, rc, &up);
        r->members_at = r->now + 1000000u;
        return;
    }
    const struct tk_raft_member *mb = tk_raft_config_find(c, id);
    TK_ASSERT(mb != NULL);
    struct tk_raft_member m = *mb;
    int rc = tk_raft_change(r->core, type, &m, r->now, &up);
    if (rc == TK_OK) {
        tk_log(TK_LOG_INFO, "%s %016llx at %s (index %llu)",
               type == TK_RAFT_PROMOTE ? "promoting to voter" : "removing",
               (unsigned long long)m.id, m.peer_addr, (unsigned long long)up.index);
        atomic_fetch_add(&r->m_changes, 1);
    } else if (rc != TK_EFULL && rc != TK_ENOTLEADER) {
        tk_log(TK_LOG_WARN, "membership change on %016llx refused: %s", (unsigned long long)m.id,
               tk_strerror(rc));
        r->members_at = r->now + 1000000u;
    }
    raftd_process(r, rc, &up);
}

const char *raftd_membership_name(uint8_t m)
{
    static const char *const names[] = {"standalone", "bootstrapping", "joining", "waiting",
                                        "learner",    "voter",         "removed"};
    return m < TK_ARRAY_LEN(names) ? names[m] : "?";
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
        tk_log(TK_LOG_ERROR,
               "--peers must include this node's peer address %s "
               "(advertised host and --peer-port)",
               self);
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
