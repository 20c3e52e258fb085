/* Peer frames (SPEC 9): encode/decode round trips and malformed input.
 *
 * Goal: every message type survives encode -> decode unchanged, and the
 * decoder refuses everything else without crashing: every truncation of a
 * valid frame, lengths over 16 MiB or below the header, unknown types,
 * trailing bytes, out-of-range flags, bad strings, bad entry types, more
 * entries than the scratch holds. The domain is decoded, not judged: the
 * caller compares it (shown in one test). A small random mutation loop
 * finishes the job (the fuzzer's poor cousin; it runs under ASan too).
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "raft/wire.h"
#include "tests/support/wire_sample.h"

static struct tk_raft_entry ENTRIES[16];
static struct tk_wire_scratch S;
static uint8_t BUF[1 << 16];
static struct tk_raft_config CFG;

static void setup(void)
{
    S.entries = ENTRIES;
    S.entries_cap = 16;
    tk_wire_sample_config(&CFG);
}

TestSuite(raft_wire, .init = setup);

static struct tk_raft_str str(const char *s)
{
    struct tk_raft_str r = {s, (uint16_t)strlen(s)};
    return r;
}

static struct tk_wire_frame sample(uint8_t type)
{
    return tk_wire_sample(type, &CFG);
}

static size_t encode(const struct tk_wire_frame *f)
{
    size_t n = tk_wire_encode(f, BUF, sizeof(BUF));
    cr_assert_gt(n, 0);
    cr_assert_eq(n, tk_wire_encoded_len(f));
    return n;
}

static bool str_eq(struct tk_raft_str a, struct tk_raft_str b)
{
    return a.len == b.len && (a.len == 0 || memcmp(a.p, b.p, a.len) == 0);
}

static void assert_same(const struct tk_wire_frame *a, const struct tk_wire_frame *b)
{
    const struct tk_raft_msg *x = &a->msg, *y = &b->msg;
    cr_assert_eq(a->domain_lo, b->domain_lo);
    cr_assert_eq(a->domain_hi, b->domain_hi);
    cr_assert_eq(x->type, y->type);
    cr_assert_eq(x->from, y->from);
    cr_assert_eq(x->term, y->term);
    cr_assert_eq(y->to, 0);
    switch (x->type) {
        case TK_RAFT_MSG_PREVOTE:
        case TK_RAFT_MSG_VOTE:
            cr_assert_eq(x->vote.last_index, y->vote.last_index);
            cr_assert_eq(x->vote.last_term, y->vote.last_term);
            cr_assert_eq(x->vote.transfer, y->vote.transfer);
            break;
        case TK_RAFT_MSG_VOTE_REPLY:
            cr_assert_eq(x->vote_reply.pre, y->vote_reply.pre);
            cr_assert_eq(x->vote_reply.granted, y->vote_reply.granted);
            break;
        case TK_RAFT_MSG_APPEND:
            cr_assert_eq(x->append.prev_index, y->append.prev_index);
            cr_assert_eq(x->append.prev_term, y->append.prev_term);
            cr_assert_eq(x->append.commit, y->append.commit);
            cr_assert_eq(x->append.seq, y->append.seq);
            cr_assert_eq(x->append.n, y->append.n);
            for (uint32_t i = 0; i < x->append.n; i++) {
                const struct tk_raft_entry *e = &x->append.entries[i], *f = &y->append.entries[i];
                cr_assert_eq(e->index, f->index);
                cr_assert_eq(e->term, f->term);
                cr_assert_eq(e->type, f->type);
                cr_assert_eq(e->token_first, f->token_first);
                cr_assert_eq(e->token_count, f->token_count);
                cr_assert_eq(e->len, f->len);
                cr_assert_eq(e->len == 0, f->data == NULL);
                if (e->len)
                    cr_assert_eq(memcmp(e->data, f->data, e->len), 0);
            }
            break;
        case TK_RAFT_MSG_APPEND_REPLY:
            cr_assert_eq(x->append_reply.success, y->append_reply.success);
            cr_assert_eq(x->append_reply.index, y->append_reply.index);
            cr_assert_eq(x->append_reply.hint, y->append_reply.hint);
            cr_assert_eq(x->append_reply.seq, y->append_reply.seq);
            break;
        case TK_RAFT_MSG_SNAPSHOT:
            cr_assert_eq(x->snapshot.index, y->snapshot.index);
            cr_assert_eq(x->snapshot.term, y->snapshot.term);
            cr_assert_eq(x->snapshot.token_next, y->snapshot.token_next);
            cr_assert_eq(x->snapshot.total, y->snapshot.total);
            cr_assert_eq(x->snapshot.offset, y->snapshot.offset);
            cr_assert_eq(x->snapshot.age_ms, y->snapshot.age_ms);
            cr_assert_eq(x->snapshot.len, y->snapshot.len);
            cr_assert_eq(memcmp(x->snapshot.data, y->snapshot.data, x->snapshot.len), 0);
            cr_assert_eq(y->snapshot.config->n, 2);
            cr_assert_eq(y->snapshot.config->domain_hi, 8);
            cr_assert_str_eq(y->snapshot.config->m[1].client_addr, "b:2");
            cr_assert_eq(y->snapshot.config->m[1].role, TK_RAFT_LEARNER);
            cr_assert_eq(y->snapshot.config->serve_after_us, CFG.serve_after_us);
            break;
        case TK_RAFT_MSG_SNAPSHOT_REPLY:
            cr_assert_eq(x->snapshot_reply.index, y->snapshot_reply.index);
            cr_assert_eq(x->snapshot_reply.offset, y->snapshot_reply.offset);
            cr_assert_eq(x->snapshot_reply.done, y->snapshot_reply.done);
            break;
        case TK_RAFT_MSG_JOIN:
            cr_assert(str_eq(x->join.peer_addr, y->join.peer_addr));
            cr_assert(str_eq(x->join.client_addr, y->join.client_addr));
            break;
        case TK_RAFT_MSG_JOIN_REPLY:
            cr_assert_eq(x->join_reply.status, y->join_reply.status);
            cr_assert_eq(x->join_reply.leader_id, y->join_reply.leader_id);
            cr_assert(str_eq(x->join_reply.leader_peer_addr, y->join_reply.leader_peer_addr));
            break;
        case TK_RAFT_MSG_PROBE:
            cr_assert_eq(x->probe.peers_hash, y->probe.peers_hash);
            cr_assert(str_eq(x->probe.peer_addr, y->probe.peer_addr));
            cr_assert(str_eq(x->probe.client_addr, y->probe.client_addr));
            cr_assert_eq(x->probe.flags, y->probe.flags);
            break;
        case TK_RAFT_MSG_PROBE_REPLY:
            cr_assert_eq(x->probe_reply.flags, y->probe_reply.flags);
            cr_assert_eq(x->probe_reply.peers_hash, y->probe_reply.peers_hash);
            cr_assert_eq(x->probe_reply.leader_id, y->probe_reply.leader_id);
            cr_assert(str_eq(x->probe_reply.leader_peer_addr, y->probe_reply.leader_peer_addr));
            cr_assert(str_eq(x->probe_reply.leader_client_addr, y->probe_reply.leader_client_addr));
            cr_assert_eq(x->probe_reply.token_next, y->probe_reply.token_next);
            break;
        case TK_RAFT_MSG_REMOVE:
            cr_assert_eq(x->remove.id, y->remove.id);
            break;
        case TK_RAFT_MSG_SLOTS:
            cr_assert(str_eq(x->slots.group, y->slots.group));
            cr_assert_eq(x->slots.ring_len, y->slots.ring_len);
            cr_assert_eq(memcmp(x->slots.ring, y->slots.ring, x->slots.ring_len), 0);
            cr_assert_eq(x->slots.op, y->slots.op);
            cr_assert_eq(x->slots.first, y->slots.first);
            cr_assert_eq(x->slots.last, y->slots.last);
            cr_assert(str_eq(x->slots.peer, y->slots.peer));
            cr_assert_eq(x->slots.counter, y->slots.counter);
            break;
        case TK_RAFT_MSG_SLOTS_REPLY:
            cr_assert_eq(x->slots_reply.status, y->slots_reply.status);
            cr_assert_eq(x->slots_reply.version, y->slots_reply.version);
            cr_assert_eq(x->slots_reply.leader_id, y->slots_reply.leader_id);
            cr_assert(str_eq(x->slots_reply.leader_peer_addr, y->slots_reply.leader_peer_addr));
            cr_assert(str_eq(x->slots_reply.why, y->slots_reply.why));
            cr_assert_eq(x->slots_reply.counter, y->slots_reply.counter);
            cr_assert_eq(memcmp(x->slots_reply.mac, y->slots_reply.mac, 32), 0);
            break;
        case TK_RAFT_MSG_BOOT:
            cr_assert_eq(x->boot.phase, y->boot.phase);
            cr_assert_eq(x->boot.round, y->boot.round);
            cr_assert_eq(x->boot.ballot_id, y->boot.ballot_id);
            cr_assert_eq(x->boot.peers_hash, y->boot.peers_hash);
            cr_assert_eq(x->boot.acc_round, y->boot.acc_round);
            cr_assert_eq(x->boot.acc_id, y->boot.acc_id);
            cr_assert_eq(x->boot.token_floor, y->boot.token_floor);
            cr_assert_eq(x->boot.token_first, y->boot.token_first);
            cr_assert_eq(y->boot.config->n, 2);
            cr_assert_eq(y->boot.config->domain_hi, 8);
            cr_assert_eq(y->boot.config->serve_after_us, CFG.serve_after_us);
            break;
        case TK_RAFT_MSG_TIMEOUT_NOW:
            break; /* no payload */
        default:
            cr_assert(false, "type %u has no round-trip check", x->type);
    }
}

/* A BOOT without a value (PREPARE, a PROMISE with nothing accepted), and
 * the fields a BOOT must not have. */
Test(raft_wire, boot_without_a_value_and_refusals)
{
    struct tk_wire_frame f = sample(TK_RAFT_MSG_BOOT);
    f.msg.boot.config = NULL;
    f.msg.boot.phase = TK_BOOT_PREPARE;
    size_t n = encode(&f);
    struct tk_wire_frame g;
    cr_assert_eq(tk_wire_decode(BUF, n, &g, &S), TK_OK);
    cr_assert_null(g.msg.boot.config);
    cr_assert_eq(g.msg.boot.phase, TK_BOOT_PREPARE);
    for (int bad = 0; bad < 3; bad++) {
        struct tk_wire_frame h = f;
        if (bad == 0)
            h.msg.boot.phase = 7;
        else if (bad == 1)
            h.msg.boot.round = 0;
        else
            h.msg.boot.ballot_id = 0;
        n = encode(&h);
        cr_assert_eq(tk_wire_decode(BUF, n, &g, &S), TK_EPROTO, "case %d", bad);
    }
}

Test(raft_wire, round_trip_every_type)
{
    for (uint8_t t = 1; t <= TK_RAFT_MSG_TYPE_MAX; t++) {
        struct tk_wire_frame f = sample(t);
        size_t n = encode(&f);
        size_t frame_len = 0;
        cr_assert_eq(tk_wire_frame_len(BUF, n, &frame_len), TK_OK);
        cr_assert_eq(frame_len, n);
        struct tk_wire_frame g;
        cr_assert_eq(tk_wire_decode(BUF, n, &g, &S), TK_OK, "type %u", t);
        assert_same(&f, &g);
        /* Re-encoding the decoded frame gives the same bytes. */
        uint8_t again[1 << 12];
        cr_assert_eq(tk_wire_encode(&g, again, sizeof(again)), n);
        cr_assert_eq(memcmp(again, BUF, n), 0);
    }
}

Test(raft_wire, header_layout_is_little_endian)
{
    struct tk_wire_frame f = sample(TK_RAFT_MSG_TIMEOUT_NOW);
    size_t n = encode(&f);
    cr_assert_eq(n, 4 + 33);
    cr_assert_eq(BUF[0], 33);
    cr_assert_eq(BUF[1] | BUF[2] | BUF[3], 0);
    cr_assert_eq(BUF[4], TK_RAFT_MSG_TIMEOUT_NOW);
    cr_assert_eq(BUF[5], 0x08, "domain_lo, low byte first");
    cr_assert_eq(BUF[12], 0x01);
    cr_assert_eq(BUF[13], 0x18);
    cr_assert_eq(BUF[21], 0xef, "sender");
    cr_assert_eq(BUF[29], 77, "term");
}

Test(raft_wire, every_truncation_is_rejected)
{
    for (uint8_t t = 1; t <= TK_RAFT_MSG_TYPE_MAX; t++) {
        struct tk_wire_frame f = sample(t);
        size_t n = encode(&f);
        struct tk_wire_frame g;
        for (size_t k = 0; k < n; k++) {
            /* The whole buffer, cut short... */
            cr_assert_eq(tk_wire_decode(BUF, k, &g, &S), TK_EPROTO, "type %u len %zu", t, k);
            /* ... and a consistent length field over a shorter payload. */
            if (k >= 4 + 33 && k < n) {
                uint8_t copy[1 << 12];
                memcpy(copy, BUF, k);
                uint32_t len = (uint32_t)(k - 4);
                copy[0] = (uint8_t)len;
                copy[1] = (uint8_t)(len >> 8);
                copy[2] = (uint8_t)(len >> 16);
                copy[3] = (uint8_t)(len >> 24);
                cr_assert_eq(tk_wire_decode(copy, k, &g, &S), TK_EPROTO, "type %u len %zu", t, k);
            }
        }
    }
}

Test(raft_wire, trailing_bytes_are_rejected)
{
    struct tk_wire_frame f = sample(TK_RAFT_MSG_VOTE);
    size_t n = encode(&f);
    BUF[n] = 0;
    uint32_t len = (uint32_t)(n + 1 - 4);
    BUF[0] = (uint8_t)len;
    struct tk_wire_frame g;
    cr_assert_eq(tk_wire_decode(BUF, n + 1, &g, &S), TK_EPROTO);
}

Test(raft_wire, oversize_and_undersize_lengths)
{
    uint8_t hdr[4];
    size_t frame_len = 99;
    uint32_t too_big = TK_WIRE_FRAME_MAX + 1;
    for (int i = 0; i < 4; i++)
        hdr[i] = (uint8_t)(too_big >> (8 * i));
    cr_assert_eq(tk_wire_frame_len(hdr, 4, &frame_len), TK_EPROTO);
    uint32_t max = TK_WIRE_FRAME_MAX;
    for (int i = 0; i < 4; i++)
        hdr[i] = (uint8_t)(max >> (8 * i));
    cr_assert_eq(tk_wire_frame_len(hdr, 4, &frame_len), TK_OK);
    cr_assert_eq(frame_len, 4 + (size_t)TK_WIRE_FRAME_MAX);
    uint32_t small = 32;
    for (int i = 0; i < 4; i++)
        hdr[i] = (uint8_t)(small >> (8 * i));
    cr_assert_eq(tk_wire_frame_len(hdr, 4, &frame_len), TK_EPROTO);
    cr_assert_eq(tk_wire_frame_len(hdr, 3, &frame_len), TK_OK);
    cr_assert_eq(frame_len, 0, "not enough bytes to tell yet");
}

Test(raft_wire, bad_type_and_flags)
{
    struct tk_wire_frame g;
    struct tk_wire_frame f = sample(TK_RAFT_MSG_TIMEOUT_NOW);
    size_t n = encode(&f);
    BUF[4] = 0;
    cr_assert_eq(tk_wire_decode(BUF, n, &g, &S), TK_EPROTO);
    BUF[4] = TK_RAFT_MSG_TYPE_MAX + 1;
    cr_assert_eq(tk_wire_decode(BUF, n, &g, &S), TK_EPROTO);
    BUF[4] = 0xff;
    cr_assert_eq(tk_wire_decode(BUF, n, &g, &S), TK_EPROTO);
    /* sender 0 */
    f = sample(TK_RAFT_MSG_TIMEOUT_NOW);
    n = encode(&f);
    memset(BUF + 21, 0, 8);
    cr_assert_eq(tk_wire_decode(BUF, n, &g, &S), TK_EPROTO);
    /* A boolean that is not 0 or 1. */
    f = sample(TK_RAFT_MSG_VOTE_REPLY);
    n = encode(&f);
    BUF[n - 1] = 2;
    cr_assert_eq(tk_wire_decode(BUF, n, &g, &S), TK_EPROTO);
    /* Unknown probe flags. */
    f = sample(TK_RAFT_MSG_PROBE_REPLY);
    n = encode(&f);
    BUF[37] = 0x80;
    cr_assert_eq(tk_wire_decode(BUF, n, &g, &S), TK_EPROTO);
    /* An unknown join status. */
    f = sample(TK_RAFT_MSG_JOIN_REPLY);
    n = encode(&f);
    BUF[37] = 9;
    cr_assert_eq(tk_wire_decode(BUF, n, &g, &S), TK_EPROTO);
    BUF[37] = TK_RAFT_JOIN_REMOVED + 1;
    cr_assert_eq(tk_wire_decode(BUF, n, &g, &S), TK_EPROTO);
    /* Unknown flags of a probe (its last byte). */
    f = sample(TK_RAFT_MSG_PROBE);
    n = encode(&f);
    BUF[n - 1] = TK_RAFT_PROBE_LEADER;
    cr_assert_eq(tk_wire_decode(BUF, n, &g, &S), TK_EPROTO);
    /* A removal of NodeId 0. */
    f = sample(TK_RAFT_MSG_REMOVE);
    n = encode(&f);
    memset(BUF + n - 8, 0, 8);
    cr_assert_eq(tk_wire_decode(BUF, n, &g, &S), TK_EPROTO);
}

Test(raft_wire, bad_entries)
{
    struct tk_wire_frame g;
    struct tk_wire_frame f = sample(TK_RAFT_MSG_APPEND);
    size_t n = encode(&f);
    size_t first_entry = 37 + 36;
    /* entry type */
    BUF[first_entry + 8] = 9;
    cr_assert_eq(tk_wire_decode(BUF, n, &g, &S), TK_EPROTO);
    /* entry length beyond the frame */
    n = encode(&f);
    BUF[first_entry + 21] = 0xff;
    cr_assert_eq(tk_wire_decode(BUF, n, &g, &S), TK_EPROTO);
    /* entry count beyond the frame */
    n = encode(&f);
    BUF[37 + 32] = 0xff;
    cr_assert_eq(tk_wire_decode(BUF, n, &g, &S), TK_EPROTO);
    /* more entries than the scratch holds */
    n = encode(&f);
    S.entries_cap = 2;
    cr_assert_eq(tk_wire_decode(BUF, n, &g, &S), TK_EPROTO);
}

Test(raft_wire, bad_strings_and_config)
{
    struct tk_wire_frame g;
    struct tk_wire_frame f = sample(TK_RAFT_MSG_JOIN);
    size_t n = encode(&f);
    BUF[37 + 2] = ' '; /* a space in the peer address */
    cr_assert_eq(tk_wire_decode(BUF, n, &g, &S), TK_EPROTO);
    f.msg.join.peer_addr = str("");
    n = encode(&f);
    cr_assert_eq(tk_wire_decode(BUF, n, &g, &S), TK_EPROTO, "empty own address");
    /* A snapshot whose config has a duplicate id. */
    f = sample(TK_RAFT_MSG_SNAPSHOT);
    n = encode(&f);
    size_t cfg_at = 37 + 40;
    /* second member id: after 17 bytes of header and the first member */
    size_t second = cfg_at + 17 + 9 + 2 + 3 + 2 + 3;
    BUF[second] = 11;
    cr_assert_eq(tk_wire_decode(BUF, n, &g, &S), TK_EPROTO);
    /* chunk beyond the total */
    f = sample(TK_RAFT_MSG_SNAPSHOT);
    f.msg.snapshot.offset = 90;
    n = encode(&f);
    cr_assert_eq(tk_wire_decode(BUF, n, &g, &S), TK_EPROTO);
    /* offset itself beyond the total, with an empty chunk */
    f = sample(TK_RAFT_MSG_SNAPSHOT);
    f.msg.snapshot.offset = 101;
    f.msg.snapshot.len = 0;
    f.msg.snapshot.data = NULL;
    n = encode(&f);
    cr_assert_eq(tk_wire_decode(BUF, n, &g, &S), TK_EPROTO);
    /* an empty chunk at the total is well-formed (the leader's keepalive
     * of a finished window) */
    f.msg.snapshot.offset = 100;
    n = encode(&f);
    cr_assert_eq(tk_wire_decode(BUF, n, &g, &S), TK_OK);
}

Test(raft_wire, domain_is_reported_for_the_caller_to_judge)
{
    struct tk_wire_frame f = sample(TK_RAFT_MSG_PROBE);
    f.domain_lo = 0;
    f.domain_hi = 0;
    size_t n = encode(&f);
    struct tk_wire_frame g;
    cr_assert_eq(tk_wire_decode(BUF, n, &g, &S), TK_OK);
    cr_assert_eq(g.domain_lo, 0, "a fresh node's probe");
    f = sample(TK_RAFT_MSG_APPEND);
    f.domain_hi ^= 1;
    n = encode(&f);
    cr_assert_eq(tk_wire_decode(BUF, n, &g, &S), TK_OK);
    cr_assert_neq(g.domain_hi, sample(TK_RAFT_MSG_APPEND).domain_hi,
                  "another domain decodes; the connection owner closes it");
}

Test(raft_wire, random_mutations_never_crash)
{
    struct tk_prng p;
    tk_prng_seed(&p, 12345);
    uint64_t ok = 0, bad = 0;
    for (int iter = 0; iter < 20000; iter++) {
        uint8_t t = (uint8_t)tk_prng_range(&p, 1, TK_RAFT_MSG_TYPE_MAX);
        struct tk_wire_frame f = sample(t);
        size_t n = encode(&f);
        int flips = (int)tk_prng_range(&p, 1, 4);
        for (int k = 0; k < flips; k++) {
            size_t at = tk_prng_range(&p, 4, n - 1);
            BUF[at] = (uint8_t)tk_prng_next(&p);
        }
        size_t cut = tk_prng_range(&p, 0, 3) == 0 ? tk_prng_range(&p, 0, n) : n;
        /* Decode from a heap copy of exactly cut bytes so ASan sees overreads. */
        uint8_t *copy = malloc(cut ? cut : 1);
        memcpy(copy, BUF, cut);
        struct tk_wire_frame g;
        if (tk_wire_decode(copy, cut, &g, &S) == TK_OK) {
            ok++;
            /* Whatever decodes re-encodes to the same bytes. */
            uint8_t again[1 << 12];
            cr_assert_eq(tk_wire_encode(&g, again, sizeof(again)), cut);
            cr_assert_eq(memcmp(again, copy, cut), 0);
        } else {
            bad++;
        }
        free(copy);
    }
    cr_assert_gt(ok, 100);
    cr_assert_gt(bad, 100);
}
