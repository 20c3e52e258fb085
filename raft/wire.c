/* Peer frames: encoding and validating decoding (layouts in wire.h).
 *
 * The writer asserts what the core promises (sizes, string rules); the
 * reader trusts nothing, checks every length before reading, and rejects
 * trailing bytes, unknown types and out-of-range flags, so a frame decodes
 * to exactly one message or to TK_EPROTO.
 */
#include "raft/wire.h"
#include "core/slots.h"

#include <string.h>

/* BOOT without its optional config: phase, seven u64, has_config. */
#define BOOT_FIXED_LEN (1 + 7 * 8 + 1)

/* ------------------------------------------------------------------ */
/* Writer                                                              */

struct wbuf {
    uint8_t *p;
    size_t n;
};

static void w_u8(struct wbuf *w, uint8_t v)
{
    w->p[w->n++] = v;
}

/* Little-endian fields: each (uint8_t) keeps one byte of v on purpose. */
static void w_u16(struct wbuf *w, uint16_t v)
{
    w->p[w->n++] = (uint8_t)v;
    w->p[w->n++] = (uint8_t)(v >> 8);
}

static void w_u32(struct wbuf *w, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        w->p[w->n++] = (uint8_t)(v >> (8 * i));
}

static void w_u64(struct wbuf *w, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        w->p[w->n++] = (uint8_t)(v >> (8 * i));
}

static void w_bytes(struct wbuf *w, const void *p, size_t n)
{
    if (n > 0)
        memcpy(w->p + w->n, p, n);
    w->n += n;
}

static void w_str(struct wbuf *w, struct tk_raft_str s)
{
    TK_ASSERT(s.len <= TK_RAFT_ADDR_MAX);
    TK_ASSERT(s.len == 0 || s.p != NULL);
    w_u16(w, s.len);
    w_bytes(w, s.p, s.len);
}

static size_t config_len(const struct tk_raft_config *c)
{
    uint8_t tmp[TK_RAFT_CONFIG_ENCODED_MAX];
    size_t n = tk_raft_config_encode(c, tmp, sizeof(tmp));
    TK_ASSERT(n > 0);
    return n;
}

static size_t payload_len(const struct tk_raft_msg *m)
{
    size_t n = 0;
    switch (m->type) {
        case TK_RAFT_MSG_PREVOTE:
        case TK_RAFT_MSG_VOTE:
            return 17;
        case TK_RAFT_MSG_VOTE_REPLY:
            return 2;
        case TK_RAFT_MSG_APPEND:
            n = 36;
            for (uint32_t i = 0; i < m->append.n; i++)
                n += TK_WIRE_ENTRY_HEADER_LEN + m->append.entries[i].len;
            return n;
        case TK_RAFT_MSG_APPEND_REPLY:
            return 25;
        case TK_RAFT_MSG_SNAPSHOT:
            return 44 + config_len(m->snapshot.config) + 4 + m->snapshot.len;
        case TK_RAFT_MSG_SNAPSHOT_REPLY:
            return 17;
        case TK_RAFT_MSG_TIMEOUT_NOW:
            return 0;
        case TK_RAFT_MSG_JOIN:
            return 4 + (size_t)m->join.peer_addr.len + m->join.client_addr.len;
        case TK_RAFT_MSG_JOIN_REPLY:
            return 11 + (size_t)m->join_reply.leader_peer_addr.len + sizeof(m->join_reply.mac);
        case TK_RAFT_MSG_PROBE:
            return 13 + (size_t)m->probe.peer_addr.len + m->probe.client_addr.len;
        case TK_RAFT_MSG_PROBE_REPLY:
            return 29 + (size_t)m->probe_reply.leader_peer_addr.len +
                   m->probe_reply.leader_client_addr.len;
        case TK_RAFT_MSG_REMOVE:
            return 8;
        case TK_RAFT_MSG_SLOTS:
            return 2 + (size_t)m->slots.group.len + 4 + m->slots.ring_len + 1 + 2 + 2 + 2 +
                   m->slots.peer.len + 8;
        case TK_RAFT_MSG_SLOTS_REPLY:
            return 1 + 8 + 8 + 2 + (size_t)m->slots_reply.leader_peer_addr.len + 2 +
                   m->slots_reply.why.len + 8 + sizeof(m->slots_reply.mac);
        case TK_RAFT_MSG_BOOT:
            return BOOT_FIXED_LEN + (m->boot.config ? config_len(m->boot.config) : 0);
        default:
            TK_ASSERT(false);
            return 0;
    }
}

size_t tk_wire_encoded_len(const struct tk_wire_frame *f)
{
    return TK_WIRE_LENGTH_LEN + TK_WIRE_HEADER_LEN + payload_len(&f->msg);
}

static void encode_append(struct wbuf *w, const struct tk_raft_msg *m)
{
    w_u64(w, m->append.prev_index);
    w_u64(w, m->append.prev_term);
    w_u64(w, m->append.commit);
    w_u64(w, m->append.seq);
    w_u32(w, m->append.n);
    for (uint32_t i = 0; i < m->append.n; i++) {
        const struct tk_raft_entry *e = &m->append.entries[i];
        TK_ASSERT(e->index == m->append.prev_index + 1 + i);
        w_u64(w, e->term);
        w_u8(w, e->type);
        w_u64(w, e->token_first);
        w_u32(w, e->token_count);
        w_u32(w, e->len);
        w_bytes(w, e->data, e->len);
    }
}

/* The caller checked the whole frame fits (tk_wire_encoded_len). */
static void w_config(struct wbuf *w, const struct tk_raft_config *c)
{
    size_t n = tk_raft_config_encode(c, w->p + w->n, TK_RAFT_CONFIG_ENCODED_MAX);
    TK_ASSERT(n > 0);
    w->n += n;
}

static void encode_snapshot(struct wbuf *w, const struct tk_raft_msg *m)
{
    w_u64(w, m->snapshot.index);
    w_u64(w, m->snapshot.term);
    w_u64(w, m->snapshot.token_next);
    w_u64(w, m->snapshot.total);
    w_u64(w, m->snapshot.offset);
    w_u32(w, m->snapshot.age_ms);
    w_config(w, m->snapshot.config);
    w_u32(w, m->snapshot.len);
    w_bytes(w, m->snapshot.data, m->snapshot.len);
}

static void encode_boot(struct wbuf *w, const struct tk_raft_msg *m)
{
    w_u8(w, m->boot.phase);
    w_u64(w, m->boot.round);
    w_u64(w, m->boot.ballot_id);
    w_u64(w, m->boot.peers_hash);
    w_u64(w, m->boot.acc_round);
    w_u64(w, m->boot.acc_id);
    w_u64(w, m->boot.token_floor);
    w_u64(w, m->boot.token_first);
    w_u8(w, m->boot.config ? 1 : 0);
    if (m->boot.config)
        w_config(w, m->boot.config);
}

static void encode_payload(struct wbuf *w, const struct tk_raft_msg *m)
{
    switch (m->type) {
        case TK_RAFT_MSG_PREVOTE:
        case TK_RAFT_MSG_VOTE:
            w_u64(w, m->vote.last_index);
            w_u64(w, m->vote.last_term);
            w_u8(w, m->vote.transfer ? 1 : 0);
            break;
        case TK_RAFT_MSG_VOTE_REPLY:
            w_u8(w, m->vote_reply.pre ? 1 : 0);
            w_u8(w, m->vote_reply.granted ? 1 : 0);
            break;
        case TK_RAFT_MSG_APPEND:
            encode_append(w, m);
            break;
        case TK_RAFT_MSG_APPEND_REPLY:
            w_u8(w, m->append_reply.success ? 1 : 0);
            w_u64(w, m->append_reply.index);
            w_u64(w, m->append_reply.hint);
            w_u64(w, m->append_reply.seq);
            break;
        case TK_RAFT_MSG_SNAPSHOT:
            encode_snapshot(w, m);
            break;
        case TK_RAFT_MSG_SNAPSHOT_REPLY:
            w_u64(w, m->snapshot_reply.index);
            w_u64(w, m->snapshot_reply.offset);
            w_u8(w, m->snapshot_reply.done ? 1 : 0);
            break;
        case TK_RAFT_MSG_TIMEOUT_NOW:
            break;
        case TK_RAFT_MSG_JOIN:
            w_str(w, m->join.peer_addr);
            w_str(w, m->join.client_addr);
            break;
        case TK_RAFT_MSG_JOIN_REPLY:
            w_u8(w, m->join_reply.status);
            w_u64(w, m->join_reply.leader_id);
            w_str(w, m->join_reply.leader_peer_addr);
            w_bytes(w, m->join_reply.mac, sizeof(m->join_reply.mac));
            break;
        case TK_RAFT_MSG_PROBE:
            w_u64(w, m->probe.peers_hash);
            w_str(w, m->probe.peer_addr);
            w_str(w, m->probe.client_addr);
            w_u8(w, m->probe.flags);
            break;
        case TK_RAFT_MSG_PROBE_REPLY:
            w_u8(w, m->probe_reply.flags);
            w_u64(w, m->probe_reply.peers_hash);
            w_u64(w, m->probe_reply.leader_id);
            w_str(w, m->probe_reply.leader_peer_addr);
            w_str(w, m->probe_reply.leader_client_addr);
            w_u64(w, m->probe_reply.token_next);
            break;
        case TK_RAFT_MSG_REMOVE:
            w_u64(w, m->remove.id);
            break;
        case TK_RAFT_MSG_SLOTS:
            TK_ASSERT(m->slots.ring_len <= TK_SLOTS_ENCODED_MAX);
            w_str(w, m->slots.group);
            w_u32(w, m->slots.ring_len);
            w_bytes(w, m->slots.ring, m->slots.ring_len);
            w_u8(w, m->slots.op);
            w_u16(w, m->slots.first);
            w_u16(w, m->slots.last);
            w_str(w, m->slots.peer);
            w_u64(w, m->slots.counter);
            break;
        case TK_RAFT_MSG_SLOTS_REPLY:
            w_u8(w, m->slots_reply.status);
            w_u64(w, m->slots_reply.version);
            w_u64(w, m->slots_reply.leader_id);
            w_str(w, m->slots_reply.leader_peer_addr);
            w_str(w, m->slots_reply.why);
            w_u64(w, m->slots_reply.counter);
            w_bytes(w, m->slots_reply.mac, sizeof(m->slots_reply.mac));
            break;
        case TK_RAFT_MSG_BOOT:
            encode_boot(w, m);
            break;
        default:
            TK_ASSERT(false);
    }
}

size_t tk_wire_encode(const struct tk_wire_frame *f, uint8_t *buf, size_t cap)
{
    const struct tk_raft_msg *m = &f->msg;
    TK_ASSERT(m->type >= 1 && m->type <= TK_RAFT_MSG_TYPE_MAX);
    TK_ASSERT(m->from != 0);
    size_t total = tk_wire_encoded_len(f);
    TK_ASSERT(total - TK_WIRE_LENGTH_LEN <= TK_WIRE_FRAME_MAX);
    if (total > cap)
        return 0;
    struct wbuf w = {.p = buf, .n = 0};
    w_u32(&w, (uint32_t)(total - TK_WIRE_LENGTH_LEN)); /* <= TK_WIRE_FRAME_MAX, asserted above */
    w_u8(&w, m->type);
    w_u64(&w, f->domain_lo);
    w_u64(&w, f->domain_hi);
    w_u64(&w, m->from);
    w_u64(&w, m->term);
    encode_payload(&w, m);
    TK_ASSERT(w.n == total);
    return total;
}

/* ------------------------------------------------------------------ */
/* Reader                                                              */

struct rbuf {
    const uint8_t *p;
    size_t n;
    size_t pos;
    bool bad; /* sticky: any short read marks the frame malformed */
};

static bool r_need(struct rbuf *r, size_t n)
{
    if (r->bad || r->n - r->pos < n) {
        r->bad = true;
        return false;
    }
    return true;
}

static uint8_t r_u8(struct rbuf *r)
{
    if (!r_need(r, 1))
        return 0;
    return r->p[r->pos++];
}

static uint16_t r_u16(struct rbuf *r)
{
    if (!r_need(r, 2))
        return 0;
    uint16_t v = (uint16_t)(r->p[r->pos] | (r->p[r->pos + 1] << 8)); /* two bytes: fits */
    r->pos += 2;
    return v;
}

static uint32_t r_u32(struct rbuf *r)
{
    if (!r_need(r, 4))
        return 0;
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)r->p[r->pos + (size_t)i] << (8 * i);
    r->pos += 4;
    return v;
}

static uint64_t r_u64(struct rbuf *r)
{
    if (!r_need(r, 8))
        return 0;
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)r->p[r->pos + (size_t)i] << (8 * i);
    r->pos += 8;
    return v;
}

static const uint8_t *r_bytes(struct rbuf *r, size_t n)
{
    if (!r_need(r, n))
        return NULL;
    const uint8_t *p = r->p + r->pos;
    r->pos += n;
    return n > 0 ? p : NULL;
}

static uint8_t r_bool(struct rbuf *r)
{
    uint8_t v = r_u8(r);
    if (v > 1)
        r->bad = true;
    return v;
}

/* A string: visible ASCII, at most TK_RAFT_ADDR_MAX, empty only if allowed. */
/* A string of at most TK_RAFT_ADDR_MAX bytes from lo to 0x7E (0x21: a
 * word, 0x20: a sentence). */
static struct tk_raft_str r_text(struct rbuf *r, bool empty_ok, uint8_t lo)
{
    struct tk_raft_str s = {NULL, 0};
    uint16_t n = r_u16(r);
    if (r->bad)
        return s;
    if (n > TK_RAFT_ADDR_MAX || (n == 0 && !empty_ok)) {
        r->bad = true;
        return s;
    }
    const uint8_t *p = r_bytes(r, n);
    for (uint16_t i = 0; p != NULL && i < n; i++)
        if (p[i] < lo || p[i] > 0x7e)
            r->bad = true;
    s.p = (const char *)p;
    s.len = n;
    return s;
}

static struct tk_raft_str r_str(struct rbuf *r, bool empty_ok)
{
    return r_text(r, empty_ok, 0x21);
}

static void decode_append(struct rbuf *r, struct tk_raft_msg *m, struct tk_wire_scratch *s)
{
    m->append.prev_index = r_u64(r);
    m->append.prev_term = r_u64(r);
    m->append.commit = r_u64(r);
    m->append.seq = r_u64(r);
    uint32_t n = r_u32(r);
    if (r->bad)
        return;
    if (n > s->entries_cap || n > (r->n - r->pos) / TK_WIRE_ENTRY_HEADER_LEN ||
        m->append.prev_index > UINT64_MAX - n - 1) {
        r->bad = true;
        return;
    }
    for (uint32_t i = 0; i < n && !r->bad; i++) {
        struct tk_raft_entry *e = &s->entries[i];
        memset(e, 0, sizeof(*e));
        e->index = m->append.prev_index + 1 + i;
        e->term = r_u64(r);
        e->type = r_u8(r);
        e->token_first = r_u64(r);
        e->token_count = r_u32(r);
        e->len = r_u32(r);
        if (e->type < TK_RAFT_NOOP || e->type > TK_RAFT_CONFIG ||
            e->len > TK_RAFT_ENTRY_BYTES_MAX) {
            r->bad = true;
            return;
        }
        e->data = r_bytes(r, e->len);
    }
    m->append.n = n;
    m->append.entries = n > 0 ? s->entries : NULL;
}

/* A membership config, decoded into the scratch. */
static const struct tk_raft_config *r_config(struct rbuf *r, struct tk_wire_scratch *s)
{
    size_t used = 0;
    if (r->bad || tk_raft_config_decode(r->p + r->pos, r->n - r->pos, &s->config, &used) != TK_OK) {
        r->bad = true;
        return NULL;
    }
    r->pos += used;
    return &s->config;
}

static void decode_snapshot(struct rbuf *r, struct tk_raft_msg *m, struct tk_wire_scratch *s)
{
    m->snapshot.index = r_u64(r);
    m->snapshot.term = r_u64(r);
    m->snapshot.token_next = r_u64(r);
    m->snapshot.total = r_u64(r);
    m->snapshot.offset = r_u64(r);
    m->snapshot.age_ms = r_u32(r);
    m->snapshot.config = r_config(r, s);
    if (r->bad)
        return;
    m->snapshot.len = r_u32(r);
    m->snapshot.data = r_bytes(r, m->snapshot.len);
    if (m->snapshot.offset > m->snapshot.total ||
        m->snapshot.len > m->snapshot.total - m->snapshot.offset)
        r->bad = true;
}

static void decode_boot(struct rbuf *r, struct tk_raft_msg *m, struct tk_wire_scratch *s)
{
    m->boot.phase = r_u8(r);
    m->boot.round = r_u64(r);
    m->boot.ballot_id = r_u64(r);
    m->boot.peers_hash = r_u64(r);
    m->boot.acc_round = r_u64(r);
    m->boot.acc_id = r_u64(r);
    m->boot.token_floor = r_u64(r);
    m->boot.token_first = r_u64(r);
    bool has_config = r_bool(r);
    if (r->bad)
        return;
    if (m->boot.phase < 1 || m->boot.phase > 6 || m->boot.round == 0 || m->boot.ballot_id == 0) {
        r->bad = true;
        return;
    }
    m->boot.config = has_config ? r_config(r, s) : NULL;
}

static void decode_payload(struct rbuf *r, struct tk_raft_msg *m, struct tk_wire_scratch *s)
{
    switch (m->type) {
        case TK_RAFT_MSG_PREVOTE:
        case TK_RAFT_MSG_VOTE:
            m->vote.last_index = r_u64(r);
            m->vote.last_term = r_u64(r);
            m->vote.transfer = r_bool(r);
            break;
        case TK_RAFT_MSG_VOTE_REPLY:
            m->vote_reply.pre = r_bool(r);
            m->vote_reply.granted = r_bool(r);
            break;
        case TK_RAFT_MSG_APPEND:
            decode_append(r, m, s);
            break;
        case TK_RAFT_MSG_APPEND_REPLY:
            m->append_reply.success = r_bool(r);
            m->append_reply.index = r_u64(r);
            m->append_reply.hint = r_u64(r);
            m->append_reply.seq = r_u64(r);
            break;
        case TK_RAFT_MSG_SNAPSHOT:
            decode_snapshot(r, m, s);
            break;
        case TK_RAFT_MSG_SNAPSHOT_REPLY:
            m->snapshot_reply.index = r_u64(r);
            m->snapshot_reply.offset = r_u64(r);
            m->snapshot_reply.done = r_bool(r);
            break;
        case TK_RAFT_MSG_TIMEOUT_NOW:
            break;
        case TK_RAFT_MSG_JOIN:
            m->join.peer_addr = r_str(r, false);
            m->join.client_addr = r_str(r, false);
            break;
        case TK_RAFT_MSG_JOIN_REPLY:
            m->join_reply.status = r_u8(r);
            m->join_reply.leader_id = r_u64(r);
            m->join_reply.leader_peer_addr = r_str(r, true);
            const uint8_t *mac = r_bytes(r, sizeof(m->join_reply.mac));
            if (mac)
                memcpy(m->join_reply.mac, mac, sizeof(m->join_reply.mac));
            if (m->join_reply.status > TK_RAFT_JOIN_REMOVED)
                r->bad = true;
            break;
        case TK_RAFT_MSG_PROBE:
            m->probe.peers_hash = r_u64(r);
            m->probe.peer_addr = r_str(r, false);
            m->probe.client_addr = r_str(r, false);
            m->probe.flags = r_u8(r);
            if (m->probe.flags & ~TK_RAFT_PROBE_FORCE)
                r->bad = true;
            break;
        case TK_RAFT_MSG_PROBE_REPLY:
            m->probe_reply.flags = r_u8(r);
            m->probe_reply.peers_hash = r_u64(r);
            m->probe_reply.leader_id = r_u64(r);
            m->probe_reply.leader_peer_addr = r_str(r, true);
            m->probe_reply.leader_client_addr = r_str(r, true);
            m->probe_reply.token_next = r_u64(r);
            if (m->probe_reply.flags & ~(TK_RAFT_PROBE_MEMBER | TK_RAFT_PROBE_LEADER))
                r->bad = true;
            break;
        case TK_RAFT_MSG_REMOVE:
            m->remove.id = r_u64(r);
            if (m->remove.id == 0)
                r->bad = true;
            break;
        case TK_RAFT_MSG_SLOTS:
            m->slots.group = r_str(r, false);
            m->slots.ring_len = r_u32(r);
            if (m->slots.ring_len > TK_SLOTS_ENCODED_MAX)
                r->bad = true;
            else
                m->slots.ring = r_bytes(r, m->slots.ring_len);
            m->slots.op = r_u8(r);
            m->slots.first = r_u16(r);
            m->slots.last = r_u16(r);
            m->slots.peer = r_str(r, true);
            m->slots.counter = r_u64(r);
            if (m->slots.op < TK_RAFT_SLOTS_RING || m->slots.op > TK_RAFT_SLOTS_CLAIM ||
                m->slots.first > m->slots.last || m->slots.last >= TK_SLOTS)
                r->bad = true;
            break;
        case TK_RAFT_MSG_SLOTS_REPLY: {
            m->slots_reply.status = r_u8(r);
            m->slots_reply.version = r_u64(r);
            m->slots_reply.leader_id = r_u64(r);
            m->slots_reply.leader_peer_addr = r_str(r, true);
            m->slots_reply.why = r_text(r, true, 0x20);
            m->slots_reply.counter = r_u64(r);
            const uint8_t *smac = r_bytes(r, sizeof(m->slots_reply.mac));
            if (smac)
                memcpy(m->slots_reply.mac, smac, sizeof(m->slots_reply.mac));
            if (m->slots_reply.status > TK_RAFT_SLOTS_REFUSED)
                r->bad = true;
            break;
        }
        case TK_RAFT_MSG_BOOT:
            decode_boot(r, m, s);
            break;
        default:
            r->bad = true;
    }
}

int tk_wire_frame_len(const uint8_t *buf, size_t len, size_t *frame_len)
{
    *frame_len = 0;
    if (len < TK_WIRE_LENGTH_LEN)
        return TK_OK;
    uint32_t n = (uint32_t)buf[0] | ((uint32_t)buf[1] << 8) | ((uint32_t)buf[2] << 16) |
                 ((uint32_t)buf[3] << 24);
    if (n < TK_WIRE_HEADER_LEN || n > TK_WIRE_FRAME_MAX)
        return TK_EPROTO;
    *frame_len = TK_WIRE_LENGTH_LEN + (size_t)n;
    return TK_OK;
}

int tk_wire_decode(const uint8_t *buf,
                   size_t len,
                   struct tk_wire_frame *f,
                   struct tk_wire_scratch *scratch)
{
    size_t frame_len = 0;
    if (tk_wire_frame_len(buf, len, &frame_len) != TK_OK || frame_len == 0 || frame_len != len)
        return TK_EPROTO;
    struct rbuf r = {.p = buf, .n = len, .pos = TK_WIRE_LENGTH_LEN, .bad = false};
    struct tk_wire_frame d;
    memset(&d, 0, sizeof(d));
    d.msg.type = r_u8(&r);
    d.domain_lo = r_u64(&r);
    d.domain_hi = r_u64(&r);
    d.msg.from = r_u64(&r);
    d.msg.term = r_u64(&r);
    if (r.bad || d.msg.type < 1 || d.msg.type > TK_RAFT_MSG_TYPE_MAX || d.msg.from == 0)
        return TK_EPROTO;
    decode_payload(&r, &d.msg, scratch);
    if (r.bad || r.pos != r.n)
        return TK_EPROTO;
    *f = d;
    return TK_OK;
}

static size_t put_hex16(char *out, uint64_t v)
{
    static const char hex[] = "0123456789abcdef";
    for (int i = 15; i >= 0; i--)
        *out++ = hex[(v >> (4 * i)) & 15];
    return 16;
}

static size_t put_str(char *out, const struct tk_raft_str *a)
{
    TK_ASSERT(a->len <= TK_RAFT_ADDR_MAX);
    if (a->len == 0) {
        out[0] = '-';
        return 1;
    }
    memcpy(out, a->p, a->len);
    return a->len;
}

size_t tk_wire_reply_text(const struct tk_raft_msg *m, char *out, size_t cap)
{
    TK_ASSERT(cap >= TK_WIRE_REPLY_TEXT_MAX);
    size_t n = 0;
    if (m->type == TK_RAFT_MSG_JOIN_REPLY) {
        uint8_t st = m->join_reply.status;
        TK_ASSERT(st < 10);
        out[n++] = (char)('0' + st);
        out[n++] = ' ';
        n += put_hex16(out + n, m->join_reply.leader_id);
        out[n++] = ' ';
        n += put_str(out + n, &m->join_reply.leader_peer_addr);
    } else {
        TK_ASSERT(m->type == TK_RAFT_MSG_SLOTS_REPLY);
        uint8_t st = m->slots_reply.status;
        TK_ASSERT(st < 10);
        memcpy(out, "slots ", 6);
        n = 6;
        out[n++] = (char)('0' + st);
        out[n++] = ' ';
        n += put_hex16(out + n, m->slots_reply.version);
        out[n++] = ' ';
        n += put_hex16(out + n, m->slots_reply.leader_id);
        out[n++] = ' ';
        n += put_str(out + n, &m->slots_reply.leader_peer_addr);
        out[n++] = ' ';
        n += put_str(out + n, &m->slots_reply.why);
        out[n++] = ' ';
        n += put_hex16(out + n, m->slots_reply.counter);
    }
    TK_ASSERT(n <= cap);
    return n;
}
