/* Fuzz target "wire": peer frames (raft/wire.h), every frame type.
 *
 * The input is what a peer link receives: a stream of frames. It is
 * reassembled the way the peer code does, with tk_wire_frame_len() on what
 * is left (a bad length ends the link; an incomplete frame waits, and here
 * ends the input), and each whole frame is decoded from an exact-size heap
 * copy with tk_wire_decode() and a scratch for TK_WIRE_ENTRIES_MAX entries.
 *
 * Checked for every frame that decodes: the fields obey wire.h (type and
 * sender, implicit entry indexes, data and strings inside the frame,
 * visible-ASCII strings, a config that passes tk_raft_config_check()), and
 * the format is canonical: tk_wire_encoded_len() is the frame's length and
 * tk_wire_encode() gives back exactly the same bytes. A frame cut short
 * never decodes.
 */
#include "tests/fuzz/fuzz.h"

#include "core/slots.h"
#include "raft/wire.h"

static struct tk_raft_entry entries[TK_WIRE_ENTRIES_MAX];

static void check_str(struct tk_raft_str s, bool empty_ok, const uint8_t *buf, size_t len)
{
    FUZZ_CHECK(s.len <= TK_RAFT_ADDR_MAX);
    FUZZ_CHECK(s.len > 0 || empty_ok);
    if (s.len == 0)
        return;
    FUZZ_CHECK(fuzz_inside(s.p, s.len, buf, len));
    for (uint16_t i = 0; i < s.len; i++)
        FUZZ_CHECK(s.p[i] >= 0x21 && s.p[i] <= 0x7e);
}

static void check_frame(const struct tk_wire_frame *f, const uint8_t *buf, size_t len)
{
    const struct tk_raft_msg *m = &f->msg;
    FUZZ_CHECK(m->type >= 1 && m->type <= TK_RAFT_MSG_TYPE_MAX);
    FUZZ_CHECK(m->from != 0);
    FUZZ_CHECK(m->to == 0);
    switch (m->type) {
        case TK_RAFT_MSG_PREVOTE:
        case TK_RAFT_MSG_VOTE:
            FUZZ_CHECK(m->vote.transfer <= 1);
            break;
        case TK_RAFT_MSG_VOTE_REPLY:
            FUZZ_CHECK(m->vote_reply.pre <= 1 && m->vote_reply.granted <= 1);
            break;
        case TK_RAFT_MSG_APPEND:
            FUZZ_CHECK(m->append.n <= TK_WIRE_ENTRIES_MAX);
            FUZZ_CHECK((m->append.n == 0) == (m->append.entries == NULL));
            for (uint32_t i = 0; i < m->append.n; i++) {
                const struct tk_raft_entry *e = &m->append.entries[i];
                FUZZ_CHECK(e->index == m->append.prev_index + 1 + i);
                FUZZ_CHECK(e->type >= TK_RAFT_NOOP && e->type <= TK_RAFT_CONFIG);
                FUZZ_CHECK(e->len <= TK_RAFT_ENTRY_BYTES_MAX);
                FUZZ_CHECK((e->len == 0) == (e->data == NULL));
                if (e->len > 0)
                    FUZZ_CHECK(fuzz_inside(e->data, e->len, buf, len));
            }
            break;
        case TK_RAFT_MSG_APPEND_REPLY:
            FUZZ_CHECK(m->append_reply.success <= 1);
            break;
        case TK_RAFT_MSG_SNAPSHOT:
            FUZZ_CHECK(m->snapshot.config != NULL);
            FUZZ_CHECK(tk_raft_config_check(m->snapshot.config) == TK_OK);
            FUZZ_CHECK(m->snapshot.offset <= m->snapshot.total);
            FUZZ_CHECK(m->snapshot.len <= m->snapshot.total - m->snapshot.offset);
            FUZZ_CHECK((m->snapshot.len == 0) == (m->snapshot.data == NULL));
            if (m->snapshot.len > 0)
                FUZZ_CHECK(fuzz_inside(m->snapshot.data, m->snapshot.len, buf, len));
            break;
        case TK_RAFT_MSG_SNAPSHOT_REPLY:
            FUZZ_CHECK(m->snapshot_reply.done <= 1);
            break;
        case TK_RAFT_MSG_TIMEOUT_NOW:
            break;
        case TK_RAFT_MSG_JOIN:
            check_str(m->join.peer_addr, false, buf, len);
            check_str(m->join.client_addr, false, buf, len);
            break;
        case TK_RAFT_MSG_JOIN_REPLY:
            FUZZ_CHECK(m->join_reply.status <= TK_RAFT_JOIN_REMOVED);
            check_str(m->join_reply.leader_peer_addr, true, buf, len);
            break;
        case TK_RAFT_MSG_PROBE:
            FUZZ_CHECK((m->probe.flags & ~TK_RAFT_PROBE_FORCE) == 0);
            check_str(m->probe.peer_addr, false, buf, len);
            check_str(m->probe.client_addr, false, buf, len);
            break;
        case TK_RAFT_MSG_PROBE_REPLY:
            FUZZ_CHECK((m->probe_reply.flags & ~(TK_RAFT_PROBE_MEMBER | TK_RAFT_PROBE_LEADER)) ==
                       0);
            check_str(m->probe_reply.leader_peer_addr, true, buf, len);
            check_str(m->probe_reply.leader_client_addr, true, buf, len);
            break;
        case TK_RAFT_MSG_REMOVE:
            FUZZ_CHECK(m->remove.id != 0);
            break;
        case TK_RAFT_MSG_BOOT:
            FUZZ_CHECK(m->boot.phase >= 1 && m->boot.phase <= 6);
            FUZZ_CHECK(m->boot.round != 0 && m->boot.ballot_id != 0);
            if (m->boot.config)
                FUZZ_CHECK(tk_raft_config_check(m->boot.config) == TK_OK);
            break;
        case TK_RAFT_MSG_SLOTS:
            check_str(m->slots.group, false, buf, len);
            FUZZ_CHECK(m->slots.ring_len <= TK_SLOTS_ENCODED_MAX);
            if (m->slots.ring_len > 0)
                FUZZ_CHECK(fuzz_inside(m->slots.ring, m->slots.ring_len, buf, len));
            FUZZ_CHECK(m->slots.op >= TK_RAFT_SLOTS_RING && m->slots.op <= TK_RAFT_SLOTS_CLAIM);
            FUZZ_CHECK(m->slots.first <= m->slots.last && m->slots.last < TK_SLOTS);
            check_str(m->slots.peer, true, buf, len);
            break;
        case TK_RAFT_MSG_SLOTS_REPLY: {
            const struct tk_raft_str *w = &m->slots_reply.why;
            FUZZ_CHECK(m->slots_reply.status <= TK_RAFT_SLOTS_REFUSED);
            check_str(m->slots_reply.leader_peer_addr, true, buf, len);
            FUZZ_CHECK(w->len <= TK_RAFT_SLOTS_WHY_MAX);
            if (w->len > 0)
                FUZZ_CHECK(fuzz_inside(w->p, w->len, buf, len));
            for (uint16_t i = 0; i < w->len; i++)
                FUZZ_CHECK(w->p[i] >= 0x20 && w->p[i] <= 0x7e);
            break;
        }
        default:
            FUZZ_CHECK(!"decoded an unknown type");
    }
}

static void one_frame(const uint8_t *buf, size_t len)
{
    struct tk_wire_scratch scratch = {.entries = entries, .entries_cap = TK_WIRE_ENTRIES_MAX};
    struct tk_wire_frame f;
    if (tk_wire_decode(buf, len, &f, &scratch) != TK_OK)
        return;
    check_frame(&f, buf, len);
    /* Canonical format: the decoded frame encodes to the same bytes. */
    FUZZ_CHECK(tk_wire_encoded_len(&f) == len);
    uint8_t *again = malloc(len);
    FUZZ_CHECK(again != NULL);
    FUZZ_CHECK(tk_wire_encode(&f, again, len - 1) == 0); /* one byte short: refused */
    FUZZ_CHECK(tk_wire_encode(&f, again, len) == len);
    FUZZ_CHECK(memcmp(again, buf, len) == 0);
    free(again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t pos = 0;
    while (pos < size) {
        size_t left = size - pos;
        size_t frame_len = 99;
        int rc = tk_wire_frame_len(data + pos, left, &frame_len);
        if (left < TK_WIRE_LENGTH_LEN) {
            FUZZ_CHECK(rc == TK_OK && frame_len == 0);
            break;
        }
        if (rc != TK_OK) {
            FUZZ_CHECK(frame_len == 0);
            break; /* the link closes */
        }
        FUZZ_CHECK(frame_len >= TK_WIRE_LENGTH_LEN + TK_WIRE_HEADER_LEN);
        FUZZ_CHECK(frame_len <= TK_WIRE_LENGTH_LEN + TK_WIRE_FRAME_MAX);
        size_t n = TK_MIN(frame_len, left);
        uint8_t *frame = (uint8_t *)fuzz_dup(data + pos, n);
        struct tk_wire_scratch scratch = {.entries = entries, .entries_cap = TK_WIRE_ENTRIES_MAX};
        struct tk_wire_frame f;
        if (n < frame_len) {
            /* Incomplete: the link would wait. A short frame never decodes. */
            FUZZ_CHECK(tk_wire_decode(frame, n, &f, &scratch) == TK_EPROTO);
            free(frame);
            break;
        }
        one_frame(frame, n);
        free(frame);
        pos += n;
    }
    return 0;
}
