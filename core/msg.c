/* Encoding of the messages between a node's threads (core/msg.h).
 *
 * Fields in declaration order, native byte order (the bytes never leave the
 * process), variable parts last. Each kind has a fixed part whose size is
 * checked at compile time against the fields it holds.
 */
#include <stdlib.h>
#include <string.h>

#include "core/msg.h"

struct wr {
    uint8_t *p;
};
struct rd {
    const uint8_t *p;
    size_t left;
    bool bad;
};

#define PUT(w, v)                        \
    do {                                 \
        memcpy((w)->p, &(v), sizeof(v)); \
        (w)->p += sizeof(v);             \
    } while (0)
#define GET(r, v)                        \
    do {                                 \
        if ((r)->left < sizeof(v)) {     \
            (r)->bad = true;             \
            break;                       \
        }                                \
        memcpy(&(v), (r)->p, sizeof(v)); \
        (r)->p += sizeof(v);             \
        (r)->left -= sizeof(v);          \
    } while (0)

static void put_bytes(struct wr *w, const void *b, size_t n)
{
    if (n)
        memcpy(w->p, b, n);
    w->p += n;
}

static const void *get_bytes(struct rd *r, size_t n)
{
    if (r->left < n) {
        r->bad = true;
        return NULL;
    }
    const void *b = r->p;
    r->p += n;
    r->left -= n;
    return b;
}

/* Fixed parts, in bytes. */
#define REQ_FIXED (8 * 5 + 4 * 2 + 3)
#define REPLY_FIXED (8 * 4 + 4 + 2)
#define REFUSE_FIXED (8 * 2 + 1)
#define PROPOSE_FIXED (8 * 2)
#define SNAP_PART_FIXED (8 * 2 + sizeof(void *) + sizeof(size_t) + 8 * 2 + 1)
#define ROLE_FIXED (8 + 1 + 2)
#define INSTALL_FIXED (8 * 2 + sizeof(void *) + sizeof(size_t))
_Static_assert(REQ_FIXED + TK_KEY_LEN_MAX + TK_OWNER_LEN_MAX <= TK_MSG_ENCODED_MAX, "req fits");
_Static_assert(ROLE_FIXED + TK_MSG_ADDR_MAX <= TK_MSG_ENCODED_MAX, "role fits");
_Static_assert(PROPOSE_FIXED + TK_CMD_ENCODED_MAX <= TK_MSG_ENCODED_MAX, "propose fits");
_Static_assert(TK_KEY_LEN_MAX <= UINT8_MAX && TK_OWNER_LEN_MAX <= UINT8_MAX, "u8 lengths");

static uint32_t role_addr_len(const struct tk_msg_role *m)
{
    size_t n = strnlen(m->leader_addr, TK_MSG_ADDR_MAX);
    TK_ASSERT(n < TK_MSG_ADDR_MAX);
    return (uint32_t)n;
}

uint32_t tk_msg_size(const struct tk_msg *m)
{
    size_t n = 0;
    switch (m->kind) {
        case TK_MSG_REQ:
            n = REQ_FIXED + (size_t)m->u.req.key_len + m->u.req.owner_len;
            break;
        case TK_MSG_REPLY:
            n = REPLY_FIXED + (size_t)m->u.reply.owner_len;
            break;
        case TK_MSG_REFUSE:
            n = REFUSE_FIXED;
            break;
        case TK_MSG_CLOSED:
        case TK_MSG_READ:
        case TK_MSG_SNAP_REQ:
            n = 8;
            break;
        case TK_MSG_PROPOSE:
            n = PROPOSE_FIXED + tk_cmd_size(&m->u.propose.cmd);
            break;
        case TK_MSG_APPLY:
            n = tk_cmd_size(&m->u.apply.cmd);
            break;
        case TK_MSG_SNAP_PART:
            n = SNAP_PART_FIXED;
            break;
        case TK_MSG_ROLE:
            n = ROLE_FIXED + role_addr_len(&m->u.role);
            break;
        case TK_MSG_READ_DONE:
            n = 9;
            break;
        case TK_MSG_INSTALL:
            n = INSTALL_FIXED;
            break;
        case TK_MSG_SLOTS:
            n = sizeof(void *);
            break;
        case TK_MSG_HELD:
            n = 24;
            break;
        default:
            TK_ASSERT(!"unknown message kind");
    }
    TK_ASSERT(n > 0 && n <= TK_MSG_ENCODED_MAX);
    return (uint32_t)n;
}

static void put_cmd(struct wr *w, const struct tk_cmd *c)
{
    size_t n = tk_cmd_encode(c, w->p, TK_CMD_ENCODED_MAX);
    TK_ASSERT(n > 0);
    w->p += n;
}

void tk_msg_encode(const struct tk_msg *m, uint8_t *out)
{
    struct wr w = {out};
    uint8_t u8;
    switch (m->kind) {
        case TK_MSG_REQ: {
            const struct tk_msg_req *q = &m->u.req;
            PUT(&w, q->epoch);
            PUT(&w, q->arrived_us);
            PUT(&w, q->client);
            PUT(&w, q->id);
            PUT(&w, q->token);
            PUT(&w, q->lease_ms);
            PUT(&w, q->wait_ms);
            PUT(&w, q->type);
            PUT(&w, q->key_len);
            PUT(&w, q->owner_len);
            put_bytes(&w, q->key, q->key_len);
            put_bytes(&w, q->owner, q->owner_len);
            break;
        }
        case TK_MSG_REPLY: {
            const struct tk_msg_reply *r = &m->u.reply;
            PUT(&w, r->client);
            PUT(&w, r->id);
            PUT(&w, r->token);
            PUT(&w, r->arrived_us);
            PUT(&w, r->waiters);
            PUT(&w, r->type);
            PUT(&w, r->owner_len);
            put_bytes(&w, r->owner, r->owner_len);
            break;
        }
        case TK_MSG_REFUSE:
            PUT(&w, m->u.refuse.client);
            PUT(&w, m->u.refuse.id);
            PUT(&w, m->u.refuse.reason);
            break;
        case TK_MSG_CLOSED:
            PUT(&w, m->u.closed.client);
            break;
        case TK_MSG_READ:
            PUT(&w, m->u.read.round);
            break;
        case TK_MSG_SNAP_REQ:
            PUT(&w, m->u.snap_req.index);
            break;
        case TK_MSG_PROPOSE:
            PUT(&w, m->u.propose.epoch);
            PUT(&w, m->u.propose.proposed_us);
            put_cmd(&w, &m->u.propose.cmd);
            break;
        case TK_MSG_APPLY:
            put_cmd(&w, &m->u.apply.cmd);
            break;
        case TK_MSG_SNAP_PART: {
            const struct tk_msg_snap_part *s = &m->u.snap_part;
            PUT(&w, s->index);
            PUT(&w, s->count);
            PUT(&w, s->data);
            PUT(&w, s->len);
            PUT(&w, s->total_count);
            PUT(&w, s->total_len);
            u8 = s->final;
            PUT(&w, u8);
            break;
        }
        case TK_MSG_ROLE: {
            uint16_t alen = (uint16_t)role_addr_len(&m->u.role);
            PUT(&w, m->u.role.epoch);
            u8 = m->u.role.lead;
            PUT(&w, u8);
            PUT(&w, alen);
            put_bytes(&w, m->u.role.leader_addr, alen);
            break;
        }
        case TK_MSG_READ_DONE:
            PUT(&w, m->u.read_done.round);
            u8 = m->u.read_done.ok;
            PUT(&w, u8);
            break;
        case TK_MSG_INSTALL: {
            const struct tk_msg_install *s = &m->u.install;
            PUT(&w, s->index);
            PUT(&w, s->count);
            PUT(&w, s->data);
            PUT(&w, s->len);
            break;
        }
        case TK_MSG_SLOTS:
            TK_ASSERT(m->u.slots.view != NULL);
            PUT(&w, m->u.slots.view);
            break;
        case TK_MSG_HELD:
            PUT(&w, m->u.held.epoch);
            PUT(&w, m->u.held.seq);
            PUT(&w, m->u.held.count);
            break;
        default:
            TK_ASSERT(!"unknown message kind");
    }
    TK_ASSERT((size_t)(w.p - out) == tk_msg_size(m));
}

static void get_cmd(struct rd *r, struct tk_cmd *c)
{
    size_t used = 0;
    if (r->bad || tk_cmd_decode(r->p, r->left, c, &used) != TK_OK) {
        r->bad = true;
        return;
    }
    r->p += used;
    r->left -= used;
}

static bool lock_reply_type(char t)
{
    return t == 'G' || t == 'T' || t == 'B' || t == 'R' || t == 'N' || t == 'Q' || t == 'W';
}

int tk_msg_decode(uint32_t kind, const uint8_t *buf, size_t len, struct tk_msg *m)
{
    struct rd r = {buf, len, false};
    uint8_t u8 = 0;
    memset(m, 0, sizeof(*m));
    m->kind = kind;
    switch (kind) {
        case TK_MSG_REQ: {
            struct tk_msg_req *q = &m->u.req;
            GET(&r, q->epoch);
            GET(&r, q->arrived_us);
            GET(&r, q->client);
            GET(&r, q->id);
            GET(&r, q->token);
            GET(&r, q->lease_ms);
            GET(&r, q->wait_ms);
            GET(&r, q->type);
            GET(&r, q->key_len);
            GET(&r, q->owner_len);
            q->key = get_bytes(&r, q->key_len);
            q->owner = get_bytes(&r, q->owner_len);
            if (q->type != 'A' && q->type != 'R' && q->type != 'Q')
                r.bad = true;
            if (q->key_len == 0 || q->key_len > TK_KEY_LEN_MAX || q->owner_len > TK_OWNER_LEN_MAX)
                r.bad = true;
            break;
        }
        case TK_MSG_REPLY: {
            struct tk_msg_reply *p = &m->u.reply;
            GET(&r, p->client);
            GET(&r, p->id);
            GET(&r, p->token);
            GET(&r, p->arrived_us);
            GET(&r, p->waiters);
            GET(&r, p->type);
            GET(&r, p->owner_len);
            p->owner = p->owner_len ? get_bytes(&r, p->owner_len) : NULL;
            if (!lock_reply_type(p->type) || p->owner_len > TK_OWNER_LEN_MAX)
                r.bad = true;
            break;
        }
        case TK_MSG_REFUSE:
            GET(&r, m->u.refuse.client);
            GET(&r, m->u.refuse.id);
            GET(&r, m->u.refuse.reason);
            if (m->u.refuse.reason != TK_REFUSE_MOVED && m->u.refuse.reason != TK_REFUSE_OVERLOAD)
                r.bad = true;
            break;
        case TK_MSG_CLOSED:
            GET(&r, m->u.closed.client);
            break;
        case TK_MSG_READ:
            GET(&r, m->u.read.round);
            break;
        case TK_MSG_SNAP_REQ:
            GET(&r, m->u.snap_req.index);
            break;
        case TK_MSG_PROPOSE:
            GET(&r, m->u.propose.epoch);
            GET(&r, m->u.propose.proposed_us);
            get_cmd(&r, &m->u.propose.cmd);
            break;
        case TK_MSG_APPLY:
            get_cmd(&r, &m->u.apply.cmd);
            break;
        case TK_MSG_SNAP_PART: {
            struct tk_msg_snap_part *s = &m->u.snap_part;
            GET(&r, s->index);
            GET(&r, s->count);
            GET(&r, s->data);
            GET(&r, s->len);
            GET(&r, s->total_count);
            GET(&r, s->total_len);
            GET(&r, u8);
            s->final = u8 != 0;
            break;
        }
        case TK_MSG_ROLE: {
            uint16_t alen = 0;
            GET(&r, m->u.role.epoch);
            GET(&r, u8);
            GET(&r, alen);
            m->u.role.lead = u8 != 0;
            const void *a = alen < TK_MSG_ADDR_MAX ? get_bytes(&r, alen) : NULL;
            if (!a && alen)
                r.bad = true;
            else if (alen)
                memcpy(m->u.role.leader_addr, a, alen);
            break;
        }
        case TK_MSG_READ_DONE:
            GET(&r, m->u.read_done.round);
            GET(&r, u8);
            m->u.read_done.ok = u8 != 0;
            break;
        case TK_MSG_INSTALL: {
            struct tk_msg_install *s = &m->u.install;
            GET(&r, s->index);
            GET(&r, s->count);
            GET(&r, s->data);
            GET(&r, s->len);
            break;
        }
        case TK_MSG_SLOTS:
            GET(&r, m->u.slots.view);
            if (m->u.slots.view == NULL)
                r.bad = true;
            break;
        case TK_MSG_HELD:
            GET(&r, m->u.held.epoch);
            GET(&r, m->u.held.seq);
            GET(&r, m->u.held.count);
            break;
        default:
            return TK_EPROTO;
    }
    return r.bad || r.left != 0 ? TK_EPROTO : TK_OK;
}

void tk_msg_drop(uint32_t kind, const uint8_t *buf, size_t len)
{
    struct tk_msg m;
    if (tk_msg_decode(kind, buf, len, &m) != TK_OK)
        return;
    if (kind == TK_MSG_SNAP_PART)
        free(m.u.snap_part.data);
    else if (kind == TK_MSG_INSTALL)
        free(m.u.install.data);
    else if (kind == TK_MSG_SLOTS)
        free(m.u.slots.view);
}

void tk_msg_send(const struct tk_msg_out *out, uint32_t dst, const struct tk_msg *m)
{
    uint32_t n = tk_msg_size(m);
    uint8_t *p = out->put(out->ctx, dst, m->kind, n);
    TK_ASSERT(p != NULL);
    tk_msg_encode(m, p);
}
