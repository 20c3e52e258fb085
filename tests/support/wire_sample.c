/* Test support: one valid peer frame of each type (the wire unit tests
 * round-trip them; tests/fuzz/gen_seeds.c writes them as seeds). */
#include "tests/support/wire_sample.h"

#include <string.h>

void tk_wire_sample_config(struct tk_raft_config *c)
{
    memset(c, 0, sizeof(*c));
    c->domain_lo = 7;
    c->domain_hi = 8;
    c->serve_after_us = 1796285189000000ull;
    c->n = 2;
    c->m[0].id = 11;
    c->m[0].role = TK_RAFT_VOTER;
    strcpy(c->m[0].peer_addr, "a:1");
    strcpy(c->m[0].client_addr, "a:2");
    c->m[1].id = 12;
    c->m[1].role = TK_RAFT_LEARNER;
    strcpy(c->m[1].peer_addr, "b:1");
    strcpy(c->m[1].client_addr, "b:2");
}

static struct tk_raft_str sample_str(const char *s)
{
    struct tk_raft_str r = {s, (uint16_t)strlen(s)};
    return r;
}

static const uint8_t DATA[] = "some batch bytes";
static struct tk_raft_entry SRC_ENTRIES[3];

struct tk_wire_frame tk_wire_sample(uint8_t type, const struct tk_raft_config *cfg)
{
    struct tk_wire_frame f;
    memset(&f, 0, sizeof(f));
    f.domain_lo = 0x0102030405060708ull;
    f.domain_hi = 0x1112131415161718ull;
    f.msg.type = type;
    f.msg.from = 0xabcdef;
    f.msg.term = 77;
    struct tk_raft_msg *m = &f.msg;
    switch (type) {
        case TK_RAFT_MSG_PREVOTE:
        case TK_RAFT_MSG_VOTE:
            m->vote.last_index = 1000;
            m->vote.last_term = 76;
            m->vote.transfer = 1;
            break;
        case TK_RAFT_MSG_VOTE_REPLY:
            m->vote_reply.pre = 1;
            m->vote_reply.granted = 1;
            break;
        case TK_RAFT_MSG_APPEND:
            m->append.prev_index = 41;
            m->append.prev_term = 70;
            m->append.commit = 40;
            m->append.seq = 5;
            for (uint32_t i = 0; i < 3; i++) {
                struct tk_raft_entry *e = &SRC_ENTRIES[i];
                memset(e, 0, sizeof(*e));
                e->index = 42 + i;
                e->term = 77;
                e->type = i == 0 ? TK_RAFT_NOOP : TK_RAFT_DATA;
                e->token_first = 900 + i;
                e->token_count = i == 0 ? 0 : 1;
                e->len = i == 0 ? 0 : (uint32_t)sizeof(DATA);
                e->data = i == 0 ? NULL : DATA;
            }
            m->append.n = 3;
            m->append.entries = SRC_ENTRIES;
            break;
        case TK_RAFT_MSG_APPEND_REPLY:
            m->append_reply.success = 1;
            m->append_reply.index = 44;
            m->append_reply.hint = 3;
            m->append_reply.seq = 5;
            break;
        case TK_RAFT_MSG_SNAPSHOT:
            m->snapshot.index = 500;
            m->snapshot.term = 70;
            m->snapshot.token_next = 123456;
            m->snapshot.total = 100;
            m->snapshot.offset = 50;
            m->snapshot.age_ms = 4321;
            m->snapshot.len = sizeof(DATA);
            m->snapshot.data = DATA;
            m->snapshot.config = cfg;
            break;
        case TK_RAFT_MSG_SNAPSHOT_REPLY:
            m->snapshot_reply.index = 500;
            m->snapshot_reply.offset = 67;
            m->snapshot_reply.done = 1;
            break;
        case TK_RAFT_MSG_TIMEOUT_NOW:
            break;
        case TK_RAFT_MSG_JOIN:
            m->join.peer_addr = sample_str("10.0.0.9:7401");
            m->join.client_addr = sample_str("10.0.0.9:7400");
            break;
        case TK_RAFT_MSG_JOIN_REPLY:
            m->join_reply.status = TK_RAFT_JOIN_REMOVED;
            m->join_reply.leader_id = 99;
            m->join_reply.leader_peer_addr = sample_str("leader:7401");
            break;
        case TK_RAFT_MSG_PROBE:
            m->probe.peers_hash = 0xfeed;
            m->probe.peer_addr = sample_str("me:7401");
            m->probe.client_addr = sample_str("me:7400");
            m->probe.flags = TK_RAFT_PROBE_FORCE;
            break;
        case TK_RAFT_MSG_PROBE_REPLY:
            m->probe_reply.flags = TK_RAFT_PROBE_MEMBER;
            m->probe_reply.peers_hash = 0xfeed;
            m->probe_reply.leader_id = 99;
            m->probe_reply.leader_peer_addr = sample_str("leader:7401");
            m->probe_reply.leader_client_addr = sample_str("");
            m->probe_reply.token_next = 1796284995487521ull;
            break;
        case TK_RAFT_MSG_REMOVE:
            m->remove.id = 0x1234567890abcdefull;
            break;
        case TK_RAFT_MSG_SLOTS: {
            static const uint8_t ring[] = {1, 2, 3, 4, 5, 6, 7};
            m->slots.group = sample_str("sales-b");
            m->slots.ring = ring;
            m->slots.ring_len = sizeof(ring);
            m->slots.op = TK_RAFT_SLOTS_CLAIM;
            m->slots.first = 100;
            m->slots.last = 8191;
            m->slots.peer = sample_str("sales-a");
            m->slots.counter = 1796284995487521ull;
            break;
        }
        case TK_RAFT_MSG_SLOTS_REPLY:
            m->slots_reply.status = TK_RAFT_SLOTS_REFUSED;
            m->slots_reply.version = 7;
            m->slots_reply.leader_id = 99;
            m->slots_reply.leader_peer_addr = sample_str("leader:7401");
            m->slots_reply.why = sample_str("version 7 is not newer than this group's ring");
            m->slots_reply.counter = 1796284995487522ull;
            break;
        case TK_RAFT_MSG_BOOT:
            m->boot.phase = TK_BOOT_ACCEPT;
            m->boot.round = 3;
            m->boot.ballot_id = 0x77;
            m->boot.peers_hash = 0xfeed;
            m->boot.acc_round = 2;
            m->boot.acc_id = 0x55;
            m->boot.token_floor = 1796284995487521ull;
            m->boot.token_first = 1796284995487522ull;
            m->boot.config = cfg;
            break;
        default:
            TK_ASSERT(!"no sample of this type");
    }
    return f;
}
