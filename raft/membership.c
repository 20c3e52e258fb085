/* The membership protocol of a cluster node (SPEC 9, 10), inside the
 * driver: frames from peers in (domain checks, probes, joins, removals,
 * the new-domain agreement, Raft messages for the core), frames out by
 * address (only to the process that is the NodeId they name), and the
 * leader's replacement steps. Pure: the time, the wall clock and the
 * identity each link proved come in through the driver (tk_driver_clock,
 * tk_driver_io.link_id); the server and the simulation run this code. */
#include <string.h>

#include "raft/driver_internal.h"
#include "raft/members.h"

#define M(d) (&(d)->m)

static void mlog(struct tk_driver *d, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void mlog(struct tk_driver *d, int level, const char *fmt, ...)
{
    if (!d->io.log)
        return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    tk_vfmt(line, sizeof(line), fmt, ap);
    va_end(ap);
    d->io.log(d->io.ctx, level, line);
}

static const struct tk_raft_member *member_of(const struct tk_driver *d, uint64_t id)
{
    const struct tk_raft_config *c = tk_raft_config(d->core);
    return c ? tk_raft_config_find(c, id) : NULL;
}

static void domain_of(const struct tk_driver *d, uint64_t *lo, uint64_t *hi)
{
    const struct tk_raft_config *c = tk_raft_config(d->core);
    *lo = c ? c->domain_lo : 0;
    *hi = c ? c->domain_hi : 0;
}

static int peer_index(const struct tk_driver *d, const char *addr, size_t len)
{
    const struct members *m = M(d);
    for (uint32_t i = 0; i < m->c.npeers; i++)
        if (strlen(m->c.peer_addr[i]) == len && !memcmp(m->c.peer_addr[i], addr, len))
            return (int)i;
    return -1;
}

static void copy_str(char *dst, size_t cap, const struct tk_raft_str *s)
{
    size_t n = TK_MIN((size_t)s->len, cap - 1);
    memcpy(dst, s->p, n);
    dst[n] = 0;
}

static struct tk_raft_str str_of(const char *s)
{
    return (struct tk_raft_str){s, (uint16_t)strlen(s)};
}

bool tk_driver_dial_ok(const struct tk_driver *d, const char *addr)
{
    if (peer_index(d, addr, strlen(addr)) >= 0)
        return true;
    const struct tk_raft_config *c = tk_raft_config(d->core);
    for (uint32_t i = 0; c && i < c->n; i++)
        if (!strcmp(c->m[i].peer_addr, addr))
            return true;
    return false;
}

/* Sends a message to a member by NodeId over this node's link to its
 * address (the sender checks that the process there is that NodeId: a
 * restarted node at the same address never receives an old identity's
 * traffic, SPEC 8, 10). An address that is not a member's is not dialled:
 * counted, logged at most once a second. */
void members_send_msg(struct tk_driver *d, const struct tk_raft_msg *msg, const char *addr)
{
    struct members *m = M(d);
    bool listed = false; /* addr is a member's or a --peers entry: no need to check */
    if (!addr) {
        const struct tk_raft_member *mb = member_of(d, msg->to);
        if (mb)
            addr = mb->peer_addr;
        /* A fresh node knows its bootstrap partners only from probes, and
         * the leader it joins from the Join's answers, until the log or a
         * snapshot brings the configuration. */
        for (uint32_t i = 0; !addr && i < m->c.npeers; i++)
            if (i != m->c.self && m->info[i].id == msg->to)
                addr = m->c.peer_addr[i];
        listed = addr != NULL; /* the hot path: a member's messages */
        if (!addr && msg->to == m->join_leader_id && m->join_leader_addr[0])
            addr = m->join_leader_addr;
        if (!addr && m->c.npeers == 0) {
            /* No --peers: no membership protocol either, so the transport
             * routes by NodeId alone (the simulation's cluster). */
            struct tk_wire_frame f = {.msg = *msg};
            domain_of(d, &f.domain_lo, &f.domain_hi);
            d->io.send(d->io.ctx, &f, NULL);
            return;
        }
        if (!addr)
            return;
    }
    if (!listed && !tk_driver_dial_ok(d, addr)) {
        m->dials_refused++;
        if (d->now >= m->refused_log_at) {
            m->refused_log_at = d->now + 1000000u;
            char safe[TK_RAFT_ADDR_MAX + 1];
            tk_fmt(safe, sizeof(safe), "%s", addr);
            for (char *c = safe; *c; c++)
                if ((unsigned char)*c < 0x21 || *c == 0x7f)
                    *c = '?';
            mlog(d, TK_DRIVER_LOG_WARN,
                 "not dialling %s for a message of type %u: neither --peers nor the "
                 "configuration lists it (peer_dials_refused_total counts these)",
                 safe, (unsigned)msg->type);
        }
        return;
    }
    struct tk_wire_frame f = {.msg = *msg};
    domain_of(d, &f.domain_lo, &f.domain_hi);
    d->io.send(d->io.ctx, &f, addr);
}

/* The leader this node can vouch for: itself, or one it heard from within
 * an election timeout. (A learner never times out, so the core may name a
 * leader long gone; a fresh node must not be sent to it.) */
static uint64_t live_leader(const struct tk_driver *d)
{
    if (tk_raft_role(d->core) == TK_RAFT_LEADER)
        return M(d)->self_id;
    uint64_t lid = tk_raft_leader(d->core);
    uint64_t heard = M(d)->leader_heard_us;
    return lid && heard && d->now - heard < d->o.raft.election_min_us ? lid : 0;
}

/* The process at a peer's address is id: another one than before is no
 * bootstrap partner of ours until it says so itself. */
static void peer_is(struct peer_info *pi, uint64_t id)
{
    if (pi->id != id)
        pi->agreed = false;
    pi->id = id;
}

static void on_probe(struct tk_driver *d, const struct tk_raft_msg *msg)
{
    struct members *m = M(d);
    int i = peer_index(d, msg->probe.peer_addr.p, msg->probe.peer_addr.len);
    if (i >= 0 && (uint32_t)i != m->c.self) {
        struct peer_info *pi = &m->info[i];
        peer_is(pi, msg->from);
        copy_str(pi->client_addr, sizeof(pi->client_addr), &msg->probe.client_addr);
        pi->peers_hash = msg->probe.peers_hash;
        pi->probed_us = d->now;
        pi->forced = (msg->probe.flags & TK_RAFT_PROBE_FORCE) != 0;
    }
    /* Answer on our link to the prober's address. */
    char addr[TK_RAFT_ADDR_MAX + 1];
    copy_str(addr, sizeof(addr), &msg->probe.peer_addr);
    struct tk_raft_msg rep = {.type = TK_RAFT_MSG_PROBE_REPLY,
                              .from = m->self_id,
                              .to = msg->from,
                              .term = tk_raft_term(d->core)};
    uint64_t lo, hi;
    domain_of(d, &lo, &hi);
    rep.probe_reply.flags = (lo || hi) ? TK_RAFT_PROBE_MEMBER : 0;
    if (tk_raft_role(d->core) == TK_RAFT_LEADER)
        rep.probe_reply.flags |= TK_RAFT_PROBE_LEADER;
    rep.probe_reply.peers_hash = m->c.peers_hash;
    uint64_t lid = live_leader(d);
    const struct tk_raft_member *lm = lid ? member_of(d, lid) : NULL;
    rep.probe_reply.leader_id = lm ? lid : 0;
    if (lm) {
        rep.probe_reply.leader_peer_addr = str_of(lm->peer_addr);
        rep.probe_reply.leader_client_addr = str_of(lm->client_addr);
    }
    rep.probe_reply.token_next = (lo || hi) ? tk_raft_next_token(d->core) : 0;
    members_send_msg(d, &rep, addr);
}

/* Where we stand, for /status and the log: a changed note is logged once. */
static void set_note(struct tk_driver *d, uint8_t state, int level, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void set_note(struct tk_driver *d, uint8_t state, int level, const char *fmt, ...)
{
    struct members *m = M(d);
    char note[sizeof(m->note)];
    va_list ap;
    va_start(ap, fmt);
    tk_vfmt(note, sizeof(note), fmt, ap);
    va_end(ap);
    /* Addresses in it come from peers and may hold any byte: /status and
     * the log escape it when they write it (core/json.h), so it is kept
     * as it is. */
    m->state = state;
    if (strcmp(note, m->note) != 0) {
        memcpy(m->note, note, sizeof(note));
        mlog(d, level, "membership: %s", note);
    }
}

static void on_probe_reply(struct tk_driver *d, const struct tk_wire_frame *f)
{
    struct members *m = M(d);
    const struct tk_raft_msg *msg = &f->msg;
    for (uint32_t i = 0; i < m->c.npeers; i++) {
        /* The sender is the process this node's own link to peer i proved
         * to be: the reply tells about that address, not the one it names. */
        if (i == m->c.self || d->io.link_id(d->io.ctx, m->c.peer_addr[i]) != msg->from)
            continue;
        struct peer_info *pi = &m->info[i];
        peer_is(pi, msg->from);
        pi->replied_us = d->now;
        pi->member = (msg->probe_reply.flags & TK_RAFT_PROBE_MEMBER) != 0;
        pi->peers_hash = msg->probe_reply.peers_hash;
        pi->leader_known = msg->probe_reply.leader_id != 0;
        pi->token_next = msg->probe_reply.token_next;
        if (!pi->member && pi->peers_hash == m->c.peers_hash)
            pi->agreed = true;
        if (!pi->member || tk_raft_config(d->core))
            continue;
        /* A live domain: the one we will join, through its leader. */
        if (!m->join_domain_lo && !m->join_domain_hi) {
            m->join_domain_lo = f->domain_lo;
            m->join_domain_hi = f->domain_hi;
        }
        bool led = msg->probe_reply.leader_id && msg->probe_reply.leader_peer_addr.len;
        if (f->domain_lo != m->join_domain_lo || f->domain_hi != m->join_domain_hi) {
            /* Peers of two domains: the first one seen is kept while it has
             * a leader. One without (a lost domain that a forced one
             * replaced) gives way to one whose member names its leader. */
            if (!led || m->join_leader_id)
                continue;
            m->join_domain_lo = f->domain_lo;
            m->join_domain_hi = f->domain_hi;
        }
        if (led) {
            if (!m->join_leader_id)
                m->probe_at = d->now; /* ask to join now, not a probe period later */
            m->join_leader_id = msg->probe_reply.leader_id;
            copy_str(m->join_leader_addr, sizeof(m->join_leader_addr),
                     &msg->probe_reply.leader_peer_addr);
        }
        if (msg->probe_reply.leader_client_addr.len) {
            /* Until we are in: point clients at that domain's leader. */
            char addr[TK_RAFT_ADDR_MAX + 1];
            copy_str(addr, sizeof(addr), &msg->probe_reply.leader_client_addr);
            tk_driver_point_clients(d, addr);
        }
    }
}

static void send_join_reply(struct tk_driver *d, uint64_t link, uint64_t to, uint8_t status)
{
    struct tk_raft_msg rep = {.type = TK_RAFT_MSG_JOIN_REPLY,
                              .from = M(d)->self_id,
                              .to = to,
                              .term = tk_raft_term(d->core)};
    rep.join_reply.status = status;
    uint64_t lid = live_leader(d);
    const struct tk_raft_member *lm = lid ? member_of(d, lid) : NULL;
    if (lm) {
        rep.join_reply.leader_id = lid;
        rep.join_reply.leader_peer_addr = str_of(lm->peer_addr);
    }
    /* On the link the request came in on (the joiner reads every link it
     * dialled, and its address is not a member's yet), signed there for
     * that link's handshake: ticketctl believes only an answer that the
     * node it authenticated made. */
    struct tk_wire_frame f = {.msg = rep};
    domain_of(d, &f.domain_lo, &f.domain_hi);
    d->io.reply(d->io.ctx, link, &f);
}

void members_slots_reply(struct tk_driver *d,
                         uint64_t link,
                         uint64_t to,
                         uint8_t status,
                         const char *why,
                         uint64_t counter)
{
    struct tk_raft_msg rep = {.type = TK_RAFT_MSG_SLOTS_REPLY,
                              .from = M(d)->self_id,
                              .to = to,
                              .term = tk_raft_term(d->core)};
    rep.slots_reply.status = status;
    rep.slots_reply.counter = counter;
    rep.slots_reply.version = d->sl.ring ? d->sl.ring->version : 0;
    uint64_t lid = live_leader(d);
    const struct tk_raft_member *lm = lid ? member_of(d, lid) : NULL;
    if (lm && status == TK_RAFT_SLOTS_NOT_LEADER) {
        rep.slots_reply.leader_id = lid;
        rep.slots_reply.leader_peer_addr = str_of(lm->peer_addr);
    }
    if (why) {
        size_t n = strnlen(why, TK_RAFT_SLOTS_WHY_MAX);
        rep.slots_reply.why = (struct tk_raft_str){why, (uint16_t)n};
    }
    struct tk_wire_frame f = {.msg = rep};
    domain_of(d, &f.domain_lo, &f.domain_hi);
    d->io.reply(d->io.ctx, link, &f);
}

/* Notes the NodeIds that left the configuration since the last call. */
static void note_gone(struct tk_driver *d)
{
    struct members *m = M(d);
    const struct tk_raft_config *c = tk_raft_config(d->core);
    if (c == NULL)
        return;
    for (uint32_t i = 0; i < m->seen_n; i++) {
        bool known = false;
        for (uint32_t j = 0; j < GONE_MAX; j++)
            known |= m->gone[j] == m->seen_ids[i];
        if (tk_raft_config_find(c, m->seen_ids[i]) == NULL && !known)
            m->gone[m->gone_next++ % GONE_MAX] = m->seen_ids[i];
    }
    m->seen_n = c->n;
    for (uint32_t i = 0; i < c->n; i++)
        m->seen_ids[i] = c->m[i].id;
}

static bool was_removed(const struct tk_driver *d, uint64_t id)
{
    for (uint32_t i = 0; i < GONE_MAX; i++)
        if (id != 0 && M(d)->gone[i] == id)
            return true;
    return false;
}

static uint8_t change_status(int rc)
{
    return rc == TK_OK                             ? TK_RAFT_JOIN_OK
           : rc == TK_EFULL || rc == TK_ENOTLEADER ? TK_RAFT_JOIN_RETRY
                                                   : TK_RAFT_JOIN_REFUSED;
}

/* Leader: a fresh NodeId asks to be added (SPEC 10). It becomes a learner
 * at once if the core takes the change; the rest of the replacement
 * (promote, remove the old identity) is members_step's. */
static void on_join(struct tk_driver *d, uint64_t link, const struct tk_wire_frame *f)
{
    const struct tk_raft_msg *msg = &f->msg;
    const struct tk_raft_config *c = tk_raft_config(d->core);
    if (tk_raft_role(d->core) != TK_RAFT_LEADER || !c) {
        send_join_reply(d, link, msg->from, TK_RAFT_JOIN_NOT_LEADER);
        return;
    }
    /* A Join in this domain (only a node once added to it knows it) from a
     * NodeId this node saw leave the configuration: a removed or replaced
     * learner that woke up. Adding it again would remove its replacement,
     * which would then ask again, and so on: tell it instead, so it exits
     * (SPEC 10). A learner whose addition a new leader truncated was never
     * seen leaving here, and is added again. */
    if ((f->domain_lo | f->domain_hi) != 0 && f->domain_lo == c->domain_lo &&
        f->domain_hi == c->domain_hi && tk_raft_config_find(c, msg->from) == NULL &&
        was_removed(d, msg->from)) {
        mlog(d, TK_DRIVER_LOG_WARN, "join of %016llx refused: it was removed from this domain",
             (unsigned long long)msg->from);
        send_join_reply(d, link, msg->from, TK_RAFT_JOIN_REMOVED);
        return;
    }
    struct tk_raft_member j = {.id = msg->from, .role = TK_RAFT_LEARNER};
    copy_str(j.peer_addr, sizeof(j.peer_addr), &msg->join.peer_addr);
    copy_str(j.client_addr, sizeof(j.client_addr), &msg->join.client_addr);
    bool listed = peer_index(d, msg->join.peer_addr.p, msg->join.peer_addr.len) >= 0;
    uint8_t verdict = tk_members_join(c, &j, listed);
    uint8_t status = TK_RAFT_JOIN_OK;
    if (verdict == TK_MEMBERS_REFUSE) {
        status = TK_RAFT_JOIN_REFUSED;
        mlog(d, TK_DRIVER_LOG_WARN, "join of %016llx at %s refused: that address is not in --peers",
             (unsigned long long)j.id, j.peer_addr);
    } else if (verdict == TK_MEMBERS_WAIT) {
        status = TK_RAFT_JOIN_RETRY; /* stale learners go first (members_step) */
    } else if (verdict == TK_MEMBERS_ADD) {
        struct tk_raft_update up;
        int rc = tk_raft_change(d->core, TK_RAFT_ADD_LEARNER, &j, d->now, &up);
        if (rc == TK_OK) {
            mlog(d, TK_DRIVER_LOG_INFO, "adding %016llx at %s as a learner (index %llu)",
                 (unsigned long long)j.id, j.peer_addr, (unsigned long long)up.index);
            M(d)->joins++;
            M(d)->changes++;
        }
        status = change_status(rc);
        tk_driver_process(d, rc, &up);
    }
    send_join_reply(d, link, msg->from, status);
}

/* Leader: an operator removes a member that is gone for good (ticketctl
 * remove-member, authenticated by the peer secret like every peer link).
 * A member heard from within an election timeout is alive: refused, so a
 * typo cannot take a live voter out. */
static void on_remove(struct tk_driver *d, uint64_t link, const struct tk_raft_msg *msg)
{
    const struct tk_raft_config *c = tk_raft_config(d->core);
    if (tk_raft_role(d->core) != TK_RAFT_LEADER || !c || !d->leader_ready) {
        send_join_reply(d, link, msg->from, TK_RAFT_JOIN_NOT_LEADER);
        return;
    }
    uint64_t id = msg->remove.id;
    const struct tk_raft_member *mb = tk_raft_config_find(c, id);
    if (!mb) {
        send_join_reply(d, link, msg->from, TK_RAFT_JOIN_OK); /* gone already */
        return;
    }
    if (id == M(d)->self_id) {
        /* The leader is alive by definition: not a member gone for good. */
        mlog(d, TK_DRIVER_LOG_WARN, "removal of %016llx refused: it is this leader",
             (unsigned long long)id);
        send_join_reply(d, link, msg->from, TK_RAFT_JOIN_REFUSED);
        return;
    }
    struct tk_raft_status st;
    tk_raft_status(d->core, &st);
    uint64_t heard = 0;
    for (uint32_t i = 0; i < st.n_members; i++)
        if (st.members[i].id == id)
            heard = st.members[i].last_heard_us;
    bool alive = heard && d->now - heard < d->o.raft.election_min_us;
    uint32_t voters = tk_raft_config_voters(c);
    if (alive || (mb->role == TK_RAFT_VOTER && voters <= 1)) {
        mlog(d, TK_DRIVER_LOG_WARN, "removal of %016llx refused: %s", (unsigned long long)id,
             alive ? "it answered within an election timeout" : "it is the last voter");
        send_join_reply(d, link, msg->from, TK_RAFT_JOIN_REFUSED);
        return;
    }
    struct tk_raft_member gone = *mb;
    struct tk_raft_update up;
    int rc = tk_raft_change(d->core, TK_RAFT_REMOVE, &gone, d->now, &up);
    if (rc == TK_OK) {
        mlog(d, TK_DRIVER_LOG_WARN, "removing %016llx at %s on an operator's request (index %llu)",
             (unsigned long long)id, gone.peer_addr, (unsigned long long)up.index);
        M(d)->changes++;
    }
    tk_driver_process(d, rc, &up);
    send_join_reply(d, link, msg->from, change_status(rc));
}

/* A fresh node or a learner: what the leader said of our Join; a member:
 * the leader says we are no longer one. */
static void on_join_reply(struct tk_driver *d, const struct tk_wire_frame *f)
{
    struct members *m = M(d);
    const struct tk_raft_msg *msg = &f->msg;
    uint64_t lo, hi;
    domain_of(d, &lo, &hi);
    if (msg->join_reply.status == TK_RAFT_JOIN_REMOVED) {
        const struct tk_raft_config *c = tk_raft_config(d->core);
        if (!c || f->domain_lo != lo || f->domain_hi != hi || m->state == TK_DRIVER_REMOVED)
            return;
        if (tk_raft_config_find(c, msg->from) == NULL || msg->term < tk_raft_term(d->core))
            return; /* only a member leading a term we know counts */
        set_note(d, TK_DRIVER_REMOVED, TK_DRIVER_LOG_ERROR,
                 "leader %016llx says NodeId %016llx is no longer in the configuration "
                 "(replaced or removed); exiting with status 3 (restarted at an address of "
                 "--peers, a process joins again under a new NodeId)",
                 (unsigned long long)msg->from, (unsigned long long)m->self_id);
        return;
    }
    m->join_reply = msg->join_reply.status;
    if (msg->join_reply.status == TK_RAFT_JOIN_NOT_LEADER && msg->join_reply.leader_id &&
        msg->join_reply.leader_peer_addr.len) {
        m->join_leader_id = msg->join_reply.leader_id;
        copy_str(m->join_leader_addr, sizeof(m->join_leader_addr),
                 &msg->join_reply.leader_peer_addr);
    }
}

/* Leader: a vote request from a NodeId that its configuration no longer
 * lists comes from a replaced or removed identity that woke up. Tell it,
 * so it stops campaigning and exits (SPEC 10). Only votes: learners send
 * none, and a voter missing from the leader's latest configuration can
 * only have been removed by it or an earlier leader. */
static bool answer_stranger(struct tk_driver *d, uint64_t link, const struct tk_raft_msg *msg)
{
    if (msg->type != TK_RAFT_MSG_PREVOTE && msg->type != TK_RAFT_MSG_VOTE)
        return false;
    const struct tk_raft_config *c = tk_raft_config(d->core);
    if (tk_raft_role(d->core) != TK_RAFT_LEADER || !c || tk_raft_config_find(c, msg->from))
        return false;
    send_join_reply(d, link, msg->from, TK_RAFT_JOIN_REMOVED);
    return true;
}

/* ------------------------------------------------------------------ */
/* The new-domain agreement (raft/boot.h) */

/* Writes entry 1 of the new fencing domain the agreement chose (SPEC 7,
 * 10): this node is one of its voters. */
static void bootstrap(struct tk_driver *d, const struct tk_boot_value *v)
{
    mlog(d, TK_DRIVER_LOG_INFO,
         "bootstrapping fencing domain %016llx%016llx with %u voters (agreed by a majority "
         "of --peers), first token %llu",
         (unsigned long long)v->config.domain_hi, (unsigned long long)v->config.domain_lo,
         v->config.n, (unsigned long long)v->token_first);
    /* A refusal (the wall clock, a configuration the core rejects) is
     * reported as an event and changes nothing; the domain's other voters
     * write the same entry, or this node joins it later. */
    (void)tk_driver_bootstrap(d, &v->config, v->token_first);
    M(d)->boot_linger_until = d->now + BOOT_LINGER_US;
}

/* --peers as the agreement sees it: each entry's NodeId and client
 * address as its probes gave them, once it probed us with the same
 * --peers and is fresh (no domain); 0 otherwise, so nothing is sent to it. */
static void boot_peers(const struct tk_driver *d, struct tk_boot_peer *out)
{
    const struct members *m = M(d);
    for (uint32_t i = 0; i < m->c.npeers; i++) {
        struct tk_boot_peer *p = &out[i];
        memset(p, 0, sizeof(*p));
        tk_fmt(p->peer_addr, sizeof(p->peer_addr), "%s", m->c.peer_addr[i]);
        if (i == m->c.self) {
            p->id = m->self_id;
            tk_fmt(p->client_addr, sizeof(p->client_addr), "%s", d->o.advertise);
            continue;
        }
        const struct peer_info *pi = &m->info[i];
        if (pi->id && pi->probed_us && !pi->member && pi->peers_hash == m->c.peers_hash &&
            pi->client_addr[0]) {
            p->id = pi->id;
            tk_fmt(p->client_addr, sizeof(p->client_addr), "%s", pi->client_addr);
        }
    }
}

/* What one call of the agreement asks for: its messages, and entry 1. */
static void boot_out(struct tk_driver *d, const struct tk_boot_out *out)
{
    for (uint32_t i = 0; i < out->n; i++)
        members_send_msg(d, &out->sends[i].m, M(d)->c.peer_addr[out->sends[i].peer]);
    if (out->write && !tk_raft_config(d->core))
        bootstrap(d, out->write);
}

static void boot_start(struct tk_driver *d)
{
    struct members *m = M(d);
    if (m->boot_ready)
        return;
    tk_boot_init(&m->boot, m->self_id, m->c.self, m->c.npeers, m->c.peers_hash,
                 tk_prng_next(&m->prng));
    m->boot_ready = true;
}

/* A BOOT message: a fresh node takes part in the agreement; a member has
 * nothing to say (its domain exists). */
static void on_boot(struct tk_driver *d, const struct tk_raft_msg *msg)
{
    struct members *m = M(d);
    if (tk_raft_config(d->core) || m->c.npeers < 3)
        return;
    boot_start(d);
    int from = -1;
    for (uint32_t i = 0; i < m->c.npeers && from < 0; i++)
        if (i != m->c.self && m->info[i].id == msg->from)
            from = (int)i;
    if (from < 0)
        return;
    struct tk_boot_peer peers[TK_DRIVER_PEERS_MAX];
    boot_peers(d, peers);
    struct tk_boot_out out;
    tk_boot_receive(&m->boot, peers, (uint32_t)from, msg, m->boot_willing, m->boot_floor, d->now,
                    &out);
    boot_out(d, &out);
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
 * above every counter a promiser's probes saw and the wall clock plus the
 * drift bound, and it serves nothing for the hold (raft/driver.h), so
 * that the lost domain's holders run out first. */
static void maybe_bootstrap(struct tk_driver *d)
{
    struct members *m = M(d);
    boot_start(d);
    struct tk_boot_peer bpeers[TK_DRIVER_PEERS_MAX];
    boot_peers(d, bpeers);
    if (tk_raft_config(d->core)) {
        /* Entry 1 is written: keep telling the other voters for a while,
         * in case they missed the CHOSEN (they would join otherwise). */
        if (m->offering && d->now < m->boot_linger_until) {
            struct tk_boot_out out;
            tk_boot_step(&m->boot, bpeers, &m->offer, d->now, &out);
            boot_out(d, &out);
        }
        return;
    }
    struct tk_members_peer peers[TK_DRIVER_PEERS_MAX];
    uint32_t n = 0;
    for (uint32_t i = 0; i < m->c.npeers; i++) {
        if (i == m->c.self)
            continue;
        struct peer_info *pi = &m->info[i];
        bool fresh = pi->replied_us && d->now - pi->replied_us < PROBE_FRESH_US;
        peers[n++] = (struct tk_members_peer){
            .id = pi->id,
            .fresh = fresh,
            .partner = fresh && !pi->member && pi->peers_hash == m->c.peers_hash && pi->id &&
                       pi->probed_us && pi->client_addr[0],
            /* A partner that wrote entry 1 is not a domain to join while
             * the round may still include us; once it names a leader, the
             * domain is live, with or without this node. */
            .member = pi->member && (!pi->agreed || pi->leader_known),
            .leader_known = pi->leader_known,
            .forced = pi->forced,
            .token_next = pi->token_next,
        };
    }
    struct tk_members_boot b;
    uint8_t v = tk_members_bootstrap(m->self_id, m->c.force_new_domain, peers, n, m->c.npeers, &b);
    bool member_seen =
        v == TK_MEMBERS_BOOT_JOIN || v == TK_MEMBERS_BOOT_NO_LEADER || v == TK_MEMBERS_BOOT_FORCE;
    m->domain_seen = member_seen;
    if (member_seen && v != TK_MEMBERS_BOOT_JOIN)
        m->join_leader_id = 0; /* the leader we knew is gone: wait, say why */
    if (v != TK_MEMBERS_BOOT_JOIN)
        m->leader_seen_us = 0;
    else if (!m->leader_seen_us)
        m->leader_seen_us = d->now;
    /* A node that sees a live domain promises nothing: it joins it. */
    m->boot_willing = v != TK_MEMBERS_BOOT_JOIN;
    m->boot_floor = b.token_floor;
    bool offer = v == TK_MEMBERS_BOOT_NOW || v == TK_MEMBERS_BOOT_FORCE;
    if (offer && !m->offering) {
        /* A new offer: a domain id, a first token, a hold of its own. It
         * stays while this node offers, so retries propose the same. */
        uint32_t majority = m->c.npeers / 2 + 1;
        m->offer = (struct tk_boot_offer){
            .domain_lo = tk_prng_next(&m->prng),
            .domain_hi = tk_prng_next(&m->prng),
            /* Above every token the lost domain granted: its counter
             * starts at a wall clock at most the drift bound ahead of this
             * one and gains a token a grant, so only a domain that granted
             * more than one a microsecond on average runs ahead of its
             * wall clock; the counters the promisers' probes saw cover it. */
            .token_first = TK_MAX(d->wall + d->o.drift_us, b.token_floor),
            .serve_after_us = v == TK_MEMBERS_BOOT_FORCE ? d->wall + d->o.hold_us : 0,
            /* A first domain has every peer; a forced one every fresh
             * node this one sees, and a majority at least. */
            .quorum = v == TK_MEMBERS_BOOT_NOW ? m->c.npeers : TK_MAX(majority, b.fresh),
        };
        if (v == TK_MEMBERS_BOOT_FORCE)
            mlog(d, TK_DRIVER_LOG_WARN,
                 "forcing a new fencing domain: %u of %u members are fresh and the old "
                 "domain has no leader; proposed to --peers, and once a majority agrees "
                 "every lock of the old domain is forgotten, and the new one grants nothing "
                 "for %llu ms",
                 b.fresh, m->c.npeers, (unsigned long long)(d->o.hold_us / 1000u));
    }
    m->offering = offer;
    struct tk_boot_out out;
    tk_boot_step(&m->boot, bpeers, offer ? &m->offer : NULL, d->now, &out);
    boot_out(d, &out);
    if (member_seen)
        return;
    set_note(d, TK_DRIVER_BOOTSTRAPPING, TK_DRIVER_LOG_INFO,
             "fresh, waiting for every peer of --peers to be reachable and fresh");
}

/* ------------------------------------------------------------------ */
/* Joining, probing, replacing */

static void send_join(struct tk_driver *d, const char *addr, uint64_t to)
{
    struct members *m = M(d);
    struct tk_raft_msg msg = {
        .type = TK_RAFT_MSG_JOIN, .from = m->self_id, .to = to, .term = tk_raft_term(d->core)};
    msg.join.peer_addr = str_of(m->c.peer_addr[m->c.self]);
    msg.join.client_addr = str_of(d->o.advertise);
    members_send_msg(d, &msg, addr);
}

/* A fresh node whose peers belong to a domain asks that domain's leader
 * to add it (SPEC 10); without a leader it waits, and never bootstraps. */
static void maybe_join(struct tk_driver *d)
{
    struct members *m = M(d);
    if (!m->domain_seen || tk_raft_config(d->core))
        return;
    if (!m->join_leader_id) {
        set_note(d, TK_DRIVER_WAITING, TK_DRIVER_LOG_WARN,
                 "peers belong to fencing domain %016llx%016llx but none knows a leader; "
                 "waiting to join. If a majority of members lost their state, that domain "
                 "cannot recover: restart the members with --force-new-domain",
                 (unsigned long long)m->join_domain_hi, (unsigned long long)m->join_domain_lo);
        return;
    }
    /* Run to recover from a lost majority, a node joins only a leader that
     * stays in office: one about to step down (check-quorum) would leave
     * it a learner of a dead domain, unable to form the new one. */
    uint64_t confirm_us = 2u * d->o.raft.election_min_us;
    if (m->c.force_new_domain && d->now - m->leader_seen_us < confirm_us) {
        set_note(d, TK_DRIVER_WAITING, TK_DRIVER_LOG_INFO,
                 "--force-new-domain: a leader of domain %016llx%016llx answers; joining it "
                 "once it has stayed in office for two election timeouts",
                 (unsigned long long)m->join_domain_hi, (unsigned long long)m->join_domain_lo);
        return;
    }
    send_join(d, m->join_leader_addr, m->join_leader_id);
    const char *why = m->join_reply == TK_RAFT_JOIN_REFUSED ? "refused: the leader's --peers "
                                                              "does not list this address"
                      : m->join_reply == TK_RAFT_JOIN_RETRY ? "asked to retry (a change runs)"
                                                            : "asked";
    set_note(d, TK_DRIVER_JOINING,
             m->join_reply == TK_RAFT_JOIN_REFUSED ? TK_DRIVER_LOG_WARN : TK_DRIVER_LOG_INFO,
             "joining fencing domain %016llx%016llx through leader %016llx at %s: %s",
             (unsigned long long)m->join_domain_hi, (unsigned long long)m->join_domain_lo,
             (unsigned long long)m->join_leader_id, m->join_leader_addr, why);
}

/* A fresh peer of --peers that runs --force-new-domain probed us lately. */
static bool forced_peer_probing(const struct tk_driver *d)
{
    const struct members *m = M(d);
    for (uint32_t i = 0; i < m->c.npeers; i++) {
        const struct peer_info *pi = &m->info[i];
        if (i != m->c.self && pi->forced && pi->probed_us &&
            d->now - pi->probed_us < PROBE_FRESH_US)
            return true;
    }
    return false;
}

/* A member: where it stands. A learner (or a node whose configuration
 * lost it, e.g. its addition was truncated by a new leader) that hears
 * no leader for two election timeouts asks again. */
static void member_state(struct tk_driver *d, const struct tk_raft_config *c, bool probe_due)
{
    struct members *m = M(d);
    if (m->state == TK_DRIVER_REMOVED)
        return;
    if (tk_raft_config_is_voter(c, m->self_id)) {
        char when[40];
        uint64_t serve_at = c->serve_after_us ? c->serve_after_us + d->o.drift_us : 0;
        if (serve_at > d->wall)
            set_note(d, TK_DRIVER_VOTER, TK_DRIVER_LOG_WARN,
                     "voter of a forced new fencing domain: nothing is served until %s "
                     "(--new-domain-hold-ms and --max-clock-drift-ms), so that the lost "
                     "domain's leases run out first",
                     tk_wall_str(serve_at, when, sizeof(when)));
        else if (tk_members_replacing(c, m->self_id))
            set_note(d, TK_DRIVER_VOTER, TK_DRIVER_LOG_INFO,
                     "voter; the identity this node replaces is still being removed");
        else if (!tk_raft_leader(d->core))
            set_note(d, TK_DRIVER_VOTER, TK_DRIVER_LOG_INFO,
                     "voter; no leader known (no quorum yet)");
        else
            set_note(d, TK_DRIVER_VOTER, TK_DRIVER_LOG_INFO, "voter");
        return;
    }
    if (d->now - m->leader_heard_us < 2u * d->o.raft.election_min_us) {
        set_note(d, TK_DRIVER_LEARNER, TK_DRIVER_LOG_INFO,
                 "learner: catching up before promotion to voter");
        return;
    }
    if (forced_peer_probing(d)) {
        TK_ASSERT(!tk_raft_config_is_voter(c, m->self_id)); /* a voter's vote counts: it stays */
        /* A recovery from a lost majority runs, and this learner (no vote,
         * nothing the old domain needs) would keep the fresh majority it
         * needs from forming: it comes back fresh instead. */
        set_note(d, TK_DRIVER_REMOVED, TK_DRIVER_LOG_ERROR,
                 "learner of a domain without a leader while a fresh member of --peers runs "
                 "--force-new-domain: exiting with status 3, to come back fresh under a new "
                 "NodeId and take part in the new domain");
        return;
    }
    set_note(d, TK_DRIVER_LEARNER, TK_DRIVER_LOG_WARN,
             "learner without a leader: asking to join again. If a majority of members lost "
             "their state, that domain cannot recover: restart the lost members with "
             "--force-new-domain");
    if (!probe_due)
        return;
    uint64_t lid = tk_raft_leader(d->core);
    const struct tk_raft_member *lm = lid ? tk_raft_config_find(c, lid) : NULL;
    if (lm)
        send_join(d, lm->peer_addr, lid);
    else if (m->join_leader_id)
        send_join(d, m->join_leader_addr, m->join_leader_id);
}

static void probe_peers(struct tk_driver *d)
{
    struct members *m = M(d);
    bool due = d->now >= m->probe_at;
    if (due)
        m->probe_at = d->now + PROBE_PERIOD_US;
    const struct tk_raft_config *c = tk_raft_config(d->core);
    if (c) {
        /* A member: probes are for fresh nodes. Its note is kept current
         * (every 20 ms, off the hot path), its Join resends are periodic. */
        if (due || d->now - m->note_us >= NOTE_PERIOD_US) {
            m->note_us = d->now;
            member_state(d, c, due);
        }
        return;
    }
    if (!due)
        return;
    for (uint32_t i = 0; i < m->c.npeers; i++) {
        if (i == m->c.self)
            continue;
        struct tk_raft_msg msg = {.type = TK_RAFT_MSG_PROBE, .from = m->self_id, .to = 0};
        msg.probe.peers_hash = m->c.peers_hash;
        msg.probe.peer_addr = str_of(m->c.peer_addr[m->c.self]);
        msg.probe.client_addr = str_of(d->o.advertise);
        msg.probe.flags = m->c.force_new_domain ? TK_RAFT_PROBE_FORCE : 0;
        members_send_msg(d, &msg, m->c.peer_addr[i]);
    }
    maybe_bootstrap(d);
    maybe_join(d);
}

/* Leader: one step of every replacement in progress (SPEC 10), as
 * tk_members_next decides; the core refuses what must wait. */
static void members_step(struct tk_driver *d)
{
    struct members *m = M(d);
    if (d->now < m->members_at || tk_raft_role(d->core) != TK_RAFT_LEADER || !d->leader_ready)
        return;
    m->members_at = d->now + MEMBERS_PERIOD_US;
    const struct tk_raft_config *c = tk_raft_config(d->core);
    struct tk_raft_status st;
    tk_raft_status(d->core, &st);
    uint64_t id;
    uint8_t type = tk_members_next(c, &st, m->c.npeers, &id);
    if (!type)
        return;
    struct tk_raft_update up;
    if (type == TK_MEMBERS_TRANSFER) {
        mlog(d, TK_DRIVER_LOG_WARN,
             "a newer process joined at this leader's address; handing "
             "leadership over so that another leader replaces this identity");
        int rc = tk_raft_transfer(d->core, 0, d->now, &up);
        tk_driver_process(d, rc, &up);
        m->members_at = d->now + 1000000u;
        return;
    }
    const struct tk_raft_member *mb = tk_raft_config_find(c, id);
    TK_ASSERT(mb != NULL);
    struct tk_raft_member one = *mb;
    int rc = tk_raft_change(d->core, type, &one, d->now, &up);
    if (rc == TK_OK) {
        mlog(d, TK_DRIVER_LOG_INFO, "%s %016llx at %s (index %llu)",
             type == TK_RAFT_PROMOTE ? "promoting to voter" : "removing",
             (unsigned long long)one.id, one.peer_addr, (unsigned long long)up.index);
        m->changes++;
    } else if (rc != TK_EFULL && rc != TK_ENOTLEADER) {
        mlog(d, TK_DRIVER_LOG_WARN, "membership change on %016llx refused: %s",
             (unsigned long long)one.id, tk_strerror(rc));
        m->members_at = d->now + 1000000u;
    }
    tk_driver_process(d, rc, &up);
}

/* ------------------------------------------------------------------ */
/* The driver's side */

void members_init(struct tk_driver *d)
{
    struct members *m = M(d);
    m->c = d->o.cluster;
    TK_ASSERT(m->c.npeers <= TK_DRIVER_PEERS_MAX && (m->c.npeers == 0 || m->c.self < m->c.npeers));
    TK_ASSERT(m->c.npeers == 0 || (d->io.reply && d->io.close_link && d->io.link_id));
    m->self_id = d->o.raft.id;
    tk_prng_seed(&m->prng, m->c.seed ? m->c.seed : d->o.raft.seed ^ d->o.raft.id);
    m->join_reply = 0xff;
    m->state = m->c.npeers ? TK_DRIVER_BOOTSTRAPPING : TK_DRIVER_STANDALONE;
}

void members_tick(struct tk_driver *d)
{
    if (M(d)->c.npeers == 0)
        return;
    probe_peers(d);
    note_gone(d);
    members_step(d);
}

uint64_t members_deadline(const struct tk_driver *d)
{
    const struct members *m = M(d);
    if (m->c.npeers == 0)
        return UINT64_MAX;
    uint64_t t = m->probe_at;
    if (tk_raft_config(d->core))
        t = TK_MIN(t, m->note_us + NOTE_PERIOD_US);
    if (tk_raft_role(d->core) == TK_RAFT_LEADER && d->leader_ready)
        t = TK_MIN(t, m->members_at);
    return t;
}

void tk_driver_peer_frame(struct tk_driver *d, uint64_t link, const struct tk_wire_frame *f)
{
    struct members *m = M(d);
    if (f->msg.type == TK_RAFT_MSG_SLOTS) {
        /* Not membership, but an operator's request like REMOVE: the
         * ring (raft/driver_slots.c). A standalone driver takes it too
         * (the simulation's), though ticketingd has no peer port then. */
        if (tk_raft_role(d->core) != TK_RAFT_LEADER || !d->leader_ready)
            members_slots_reply(d, link, f->msg.from, TK_RAFT_SLOTS_NOT_LEADER, NULL, 0);
        else
            slots_request(d, link, &f->msg);
        return;
    }
    if (m->c.npeers == 0)
        return;
    uint64_t lo, hi;
    domain_of(d, &lo, &hi);
    bool mine = lo || hi;
    bool theirs = f->domain_lo || f->domain_hi;
    uint8_t type = f->msg.type;
    switch (type) {
        case TK_RAFT_MSG_PROBE:
            on_probe(d, &f->msg);
            return;
        case TK_RAFT_MSG_PROBE_REPLY:
            on_probe_reply(d, f);
            return;
        case TK_RAFT_MSG_JOIN:
            on_join(d, link, f);
            return;
        case TK_RAFT_MSG_JOIN_REPLY:
            on_join_reply(d, f);
            return;
        case TK_RAFT_MSG_REMOVE:
            on_remove(d, link, &f->msg);
            return;
        case TK_RAFT_MSG_SLOTS_REPLY:
            return; /* for ticketctl */
        case TK_RAFT_MSG_BOOT:
            on_boot(d, &f->msg);
            return;
        default:
            break;
    }
    if (mine && theirs && (f->domain_lo != lo || f->domain_hi != hi)) {
        mlog(d, TK_DRIVER_LOG_WARN, "peer frame from another fencing domain; closing link");
        d->io.close_link(d->io.ctx, link);
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
            theirs && f->domain_lo == m->join_domain_lo && f->domain_hi == m->join_domain_hi;
        known |=
            theirs && m->boot_ready && tk_boot_knows_domain(&m->boot, f->domain_lo, f->domain_hi);
        if (!known)
            return;
    }
    if (mine && answer_stranger(d, link, &f->msg))
        return;
    if (type == TK_RAFT_MSG_APPEND || type == TK_RAFT_MSG_SNAPSHOT)
        m->leader_heard_us = d->now;
    struct tk_raft_msg msg = f->msg;
    msg.to = m->self_id;
    struct tk_raft_update up;
    int rc = tk_raft_receive(d->core, &msg, d->now, &up);
    if (rc == TK_EPROTO && d->now >= m->invalid_log_at) {
        /* Refused whole, nothing changed; a peer that sends these is
         * broken or not what it claims: say so, at most once a second. */
        m->invalid_log_at = d->now + 1000000u;
        mlog(d, TK_DRIVER_LOG_WARN,
             "refused an invalid Raft message (type %u) from %016llx: it contradicts the "
             "log or the protocol (raft_messages_invalid_total counts them)",
             (unsigned)msg.type, (unsigned long long)msg.from);
    }
    tk_driver_process(d, rc, &up);
}

void tk_driver_members(const struct tk_driver *d, struct tk_driver_members *out)
{
    const struct members *m = M(d);
    out->state = m->state;
    /* The configuration decides at once, not at the next note. */
    const struct tk_raft_config *c = tk_raft_config(d->core);
    if (c && m->c.npeers && m->state != TK_DRIVER_REMOVED)
        out->state = tk_raft_config_is_voter(c, m->self_id) ? TK_DRIVER_VOTER : TK_DRIVER_LEARNER;
    memcpy(out->note, m->note, sizeof(out->note));
    out->joins = m->joins;
    out->changes = m->changes;
    out->dials_refused = m->dials_refused;
}

const char *tk_driver_membership_name(uint8_t s)
{
    static const char *const names[] = {"standalone", "bootstrapping", "joining", "waiting",
                                        "learner",    "voter",         "removed"};
    return s < TK_ARRAY_LEN(names) ? names[s] : "?";
}
