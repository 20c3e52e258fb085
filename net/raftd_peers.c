/* The Raft thread's side of the peer links: frames in to the driver,
 * frames out over the link to an address (only to the process that is
 * the NodeId they name), JoinReply signatures, the peer certificate check,
 * --peers parsing, and what the driver's membership outputs mean for the
 * process (raftd_after_driver). The membership protocol itself (probes, joins,
 * removals, the new-domain agreement) is the driver's (raft/membership.c);
 * this file is I/O only. */
#include <stdio.h>
#include <string.h>

#include "core/addr.h"
#include "core/tls.h"
#include "net/raftd.h"

static int peer_index(const struct tk_raftd *r, const char *addr)
{
    for (uint32_t i = 0; i < r->npeers; i++)
        if (!strcmp(r->peer_addr[i], addr))
            return (int)i;
    return -1;
}

bool raftd_dial_ok(void *ctx, const char *addr)
{
    struct tk_raftd *r = ctx;
    return tk_driver_dial_ok(r->d, addr);
}

/* Whether the host part of addr is a name the certificate holds. */
static bool cert_names_host(const struct tk_tls *tls, const char *addr)
{
    struct tk_addr a;
    const char *why;
    return tk_addr_parse(addr, strlen(addr), &a, &why) == TK_OK &&
           tk_tls_peer_has_name(tls, a.host);
}

bool raftd_peer_cert(void *ctx, const struct tk_tls *tls)
{
    struct tk_raftd *r = ctx;
    for (uint32_t i = 0; i < r->npeers; i++)
        if (cert_names_host(tls, r->peer_addr[i]))
            return true;
    const struct tk_raft_config *c = tk_driver_config(r->d);
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

/* tk_driver_io.send: over our outbound link to addr, and only if the
 * process there proved to be the NodeId the message is for. */
void raftd_io_send(void *ctx, const struct tk_wire_frame *f, const char *addr)
{
    struct tk_raftd *r = ctx;
    if (!r->peers)
        return;
    struct tk_plink *l = tk_peers_dial(r->peers, addr);
    if (!l || !tk_plink_ready(l))
        return;
    if (f->msg.to && tk_plink_remote_id(l) != f->msg.to)
        return;
    tk_peers_send(r->peers, l, f);
}

/* tk_driver_io.reply: on the link the frame came in on; a JoinReply is
 * signed for that link's handshake alone, so that ticketctl believes only
 * an answer that the node it authenticated made. */
void raftd_io_reply(void *ctx, uint64_t link, struct tk_wire_frame *f)
{
    struct tk_raftd *r = ctx;
    struct tk_plink *l = (struct tk_plink *)(uintptr_t)link;
    if (f->msg.type == TK_RAFT_MSG_JOIN_REPLY || f->msg.type == TK_RAFT_MSG_SLOTS_REPLY) {
        char text[TK_WIRE_REPLY_TEXT_MAX];
        size_t n = tk_wire_reply_text(&f->msg, text, sizeof(text));
        tk_plink_mac(
            l, "reply", text, n,
            f->msg.type == TK_RAFT_MSG_JOIN_REPLY ? f->msg.join_reply.mac : f->msg.slots_reply.mac);
    }
    tk_peers_send(r->peers, l, f);
}

void raftd_io_close_link(void *ctx, uint64_t link)
{
    struct tk_raftd *r = ctx;
    tk_plink_close(r->peers, (struct tk_plink *)(uintptr_t)link);
}

uint64_t raftd_io_link_id(void *ctx, const char *addr)
{
    struct tk_raftd *r = ctx;
    struct tk_plink *l = tk_peers_find(r->peers, addr);
    return l ? tk_plink_remote_id(l) : 0;
}

void raftd_on_frame(void *ctx, struct tk_plink *l, const struct tk_wire_frame *f)
{
    struct tk_raftd *r = ctx;
    tk_driver_peer_frame(r->d, (uint64_t)(uintptr_t)l, f);
    raftd_after_driver(r);
}

/* The peer addresses: --peers (tk_options_parse checked its forms), or
 * this node's alone; this node's own is the host it advertises at
 * --peer-port. */
int raftd_parse_peers(struct tk_raftd *r)
{
    struct tk_server *s = r->s;
    struct tk_addr self, peers[TK_PEERS_MAX];
    const char *why = NULL;
    char list_why[256], self_text[TK_ADDR_MAX];
    size_t n = 0;
    if (tk_addr_parse(s->advertise, strlen(s->advertise), &self, &why) != TK_OK) {
        tk_log(TK_LOG_ERROR, "advertised address '%s': %s", s->advertise, why);
        return TK_EINVAL;
    }
    self.port = (uint16_t)s->opt.peer_port;
    if (tk_addr_format(&self, self_text, sizeof(self_text)) >= sizeof(self_text)) {
        tk_log(TK_LOG_ERROR, "advertised host name too long");
        return TK_EINVAL;
    }
    if (!s->opt.peers[0]) {
        r->npeers = 1;
        r->self = 0;
        snprintf(r->peer_addr[0], TK_ADDR_MAX, "%s", self_text);
        return TK_OK;
    }
    if (tk_addr_parse_list(s->opt.peers, strlen(s->opt.peers), peers, TK_PEERS_MAX, &n, list_why,
                           sizeof(list_why)) != TK_OK) {
        tk_log(TK_LOG_ERROR, "--peers: %s", list_why);
        return TK_EINVAL;
    }
    bool found = false;
    for (size_t i = 0; i < n; i++) {
        /* Formats back to the text --peers gave (core/addr.h). */
        char text[TK_ADDR_MAX];
        if (tk_addr_format(&peers[i], text, sizeof(text)) >= sizeof(text)) {
            tk_log(TK_LOG_ERROR, "--peers: '%.64s...' is longer than %d characters", text,
                   TK_ADDR_MAX - 1);
            return TK_EINVAL;
        }
        if (peer_index(r, text) >= 0) {
            tk_log(TK_LOG_ERROR, "--peers lists %s twice", text);
            return TK_EINVAL;
        }
        if (!strcmp(text, self_text)) {
            r->self = r->npeers;
            found = true;
        }
        snprintf(r->peer_addr[r->npeers++], TK_ADDR_MAX, "%s", text);
    }
    if (!found) {
        tk_log(TK_LOG_ERROR,
               "--peers must include this node's peer address %s "
               "(advertised host and --peer-port)",
               self_text);
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

void raftd_after_driver(struct tk_raftd *r)
{
    const struct tk_raft_config *c = tk_driver_config(r->d);
    if (c && (atomic_load_explicit(&r->s->domain_lo, memory_order_relaxed) != c->domain_lo ||
              atomic_load_explicit(&r->s->domain_hi, memory_order_relaxed) != c->domain_hi)) {
        /* The workers learn that they lead through their rings, after
         * this store; /status shows the domain with the membership it
         * brings, not a fresh node's note of a moment ago. */
        atomic_store(&r->s->domain_lo, c->domain_lo);
        atomic_store(&r->s->domain_hi, c->domain_hi);
        raftd_publish(r);
    }
    if (r->peers && !r->removed) {
        struct tk_driver_members dm;
        tk_driver_members(r->d, &dm);
        if (dm.state == TK_DRIVER_REMOVED) {
            r->removed = true;
            raftd_publish(r);
            atomic_store(&r->s->removed, 1);
        }
    }
}
