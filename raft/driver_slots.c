/* The ring in a group's replicated state (SPEC 15): the entry that carries
 * it, its apply, the views the shards judge requests by, the operator's
 * request that proposes one, and the ring's part of a snapshot.
 *
 * Every rule of the apply reads replicated state only (the ring committed
 * before, the group name it was given to), so every member takes or
 * refuses an entry alike. The leader checks more before it proposes (the
 * --group of this node, a first ring of a group without a name), and
 * answers the operator with a sentence.
 */
#include <stdlib.h>
#include <string.h>

#include "raft/driver_internal.h"

#define OP_RING 1
#define ENTRY_FIXED (4 + 1 + 1)

static struct slots *SL(struct tk_driver *d)
{
    return &d->sl;
}

bool slots_entry_is(const uint8_t *data, uint32_t len)
{
    uint32_t mark;
    if (len < 4)
        return false;
    memcpy(&mark, data, 4);
    return mark == TK_DRIVER_SLOTS_MARK;
}

/* The group name and the ring of an entry, or of a snapshot's state (the
 * same bytes without the mark and op). */
static int state_decode(const uint8_t *p,
                        size_t len,
                        const char **name,
                        size_t *name_len,
                        struct tk_slot_ring *r)
{
    if (len < 1 || len < 1u + p[0])
        return TK_EPROTO;
    *name = (const char *)p + 1;
    *name_len = p[0];
    if (!tk_slots_name_ok(*name, *name_len))
        return TK_EPROTO;
    return tk_slots_decode(p + 1 + p[0], len - 1 - p[0], r, NULL);
}

static int entry_decode(const uint8_t *data,
                        uint32_t len,
                        const char **name,
                        size_t *name_len,
                        struct tk_slot_ring *r)
{
    if (!slots_entry_is(data, len) || len < ENTRY_FIXED || data[4] != OP_RING)
        return TK_EPROTO;
    return state_decode(data + 5, len - 5, name, name_len, r);
}

/* Whether the bytes of a state (no mark, no op) decode, on a scratch ring. */
static int state_check(const uint8_t *p, size_t len)
{
    struct tk_slot_ring *r = malloc(sizeof(*r));
    TK_ASSERT(r != NULL);
    const char *name;
    size_t nlen;
    int rc = state_decode(p, len, &name, &nlen, r);
    free(r);
    return rc;
}

int slots_entry_check(const uint8_t *data, uint32_t len)
{
    if (!slots_entry_is(data, len) || len < ENTRY_FIXED || data[4] != OP_RING)
        return TK_EPROTO;
    return state_check(data + 5, len - 5);
}

/* ------------------------------------------------------------------ */
/* Views for the shards */

static bool named(const char *a, const char *b, size_t blen)
{
    return strlen(a) == blen && memcmp(a, b, blen) == 0;
}

/* The block of a view (core/msg.h) for nranges ranges and a body of
 * body_len bytes: the struct, the range ends, the body. */
static size_t view_size(uint32_t nranges, size_t body_len)
{
    return sizeof(struct tk_slot_view) + nranges * sizeof(uint32_t) + body_len;
}

static void view_point(struct tk_slot_view *v)
{
    v->range_end = (uint32_t *)(v + 1);
    v->body = (char *)(v->range_end + v->nranges);
}

/* The view of ring r (NULL: version 0, "no ring", which the shards read
 * as having none) for group `group`. */
static struct tk_slot_view *view_make(const struct tk_slot_ring *r, const char *group)
{
    char text[TK_SLOTS_RANGE_TEXT_MAX + 1];
    uint32_t nr = r ? r->nranges : 0;
    size_t body = nr == 0 ? 1 : nr - 1; /* "-", or the ';' between ranges */
    for (uint32_t i = 0; i < nr; i++)
        body += tk_slots_fmt_range(r, i, text, sizeof(text));
    /* One byte more: the formatter ends each range with a NUL. */
    struct tk_slot_view *v = calloc(1, view_size(nr, body) + 1);
    TK_ASSERT(v != NULL);
    v->nranges = nr;
    view_point(v);
    if (r) {
        v->version = r->version;
        tk_slots_owned(r, group, strlen(group), v->serve);
    }
    size_t at = 0;
    for (uint32_t i = 0; i < nr; i++) {
        if (i > 0)
            v->body[at++] = ';';
        at += tk_slots_fmt_range(r, i, v->body + at, body + 1 - at);
        v->range_end[i] = (uint32_t)at;
    }
    if (nr == 0)
        v->body[at++] = '-';
    TK_ASSERT(at == body);
    v->body_len = at;
    return v;
}

/* Every shard gets its own copy of one view (it frees it). */
static void send_views(struct tk_driver *d)
{
    struct tk_slot_view *v = view_make(SL(d)->ring, SL(d)->group);
    size_t size = view_size(v->nranges, v->body_len) + 1;
    for (uint32_t i = 0; i < d->o.nshards; i++) {
        struct tk_msg m = {.kind = TK_MSG_SLOTS};
        if (i + 1 == d->o.nshards) {
            m.u.slots.view = v;
        } else {
            m.u.slots.view = malloc(size);
            TK_ASSERT(m.u.slots.view != NULL);
            memcpy(m.u.slots.view, v, size);
            view_point(m.u.slots.view);
        }
        driver_to_shard(d, i, &m);
    }
}

/* ------------------------------------------------------------------ */
/* The apply */

/* Whether ring r may follow the committed one for group `name`; NULL if
 * so, else why not. *same: r is the committed ring itself (nothing to
 * do). Replicated state only. */
static const char *successor(struct tk_driver *d,
                             const char *name,
                             size_t name_len,
                             const struct tk_slot_ring *r,
                             bool *same,
                             char *why,
                             size_t cap)
{
    const struct slots *s = SL(d);
    *same = false;
    if (tk_slots_find(r, name, name_len) < 0) {
        tk_fmt(why, cap, "the ring does not name group '%.*s'", (int)name_len, name);
        return why;
    }
    if (!s->ring)
        return NULL;
    if (!named(s->group, name, name_len)) {
        tk_fmt(why, cap, "this group's ring is group '%s''s, not '%.*s''s", s->group, (int)name_len,
               name);
        return why;
    }
    if (r->version == s->ring->version && tk_slots_equal(r, s->ring)) {
        *same = true;
        return NULL;
    }
    if (r->version <= s->ring->version) {
        tk_fmt(why, cap, "version %llu is not newer than this group's ring (version %llu)",
               (unsigned long long)r->version, (unsigned long long)s->ring->version);
        return why;
    }
    uint64_t was[TK_SLOTS_WORDS], now[TK_SLOTS_WORDS];
    tk_slots_owned(s->ring, s->group, strlen(s->group), was);
    tk_slots_owned(r, name, name_len, now);
    if (memcmp(was, now, sizeof(was)) != 0) {
        tk_fmt(why, cap,
               "the ring changes the slots group '%s' owns: slots change groups only by a move",
               s->group);
        return why;
    }
    return NULL;
}

/* The ring becomes r (owned from now on) for group `name`; NULL: none. */
static void set_ring(struct tk_driver *d, const char *name, size_t name_len, struct tk_slot_ring *r)
{
    struct slots *s = SL(d);
    free(s->ring);
    s->ring = r;
    memcpy(s->group, name, name_len);
    s->group[name_len] = 0;
    uint64_t bits[TK_SLOTS_WORDS];
    s->owned = r ? tk_slots_owned(r, s->group, name_len, bits) : 0;
    send_views(d);
}

int slots_apply(struct tk_driver *d, const uint8_t *data, uint32_t len)
{
    struct slots *s = SL(d);
    struct tk_slot_ring *r = malloc(sizeof(*r));
    TK_ASSERT(r != NULL);
    const char *name;
    size_t nlen;
    if (entry_decode(data, len, &name, &nlen, r) != TK_OK) {
        free(r);
        return TK_EPROTO;
    }
    char why[TK_RAFT_SLOTS_WHY_MAX + 1];
    bool same;
    const char *no = successor(d, name, nlen, r, &same, why, sizeof(why));
    if (no || same) {
        free(r);
        if (no) {
            s->rings_refused++;
            if (d->io.log)
                d->io.log(d->io.ctx, TK_DRIVER_LOG_WARN, why);
        }
    } else {
        set_ring(d, name, nlen, r);
        s->rings_applied++;
        if (d->io.log) {
            char line[128];
            tk_fmt(line, sizeof(line), "ring version %llu committed: group '%s' owns %u slots",
                   (unsigned long long)s->ring->version, s->group, s->owned);
            d->io.log(d->io.ctx, TK_DRIVER_LOG_INFO, line);
        }
    }
    return TK_OK;
}

/* ------------------------------------------------------------------ */
/* The operator's request (leader) */

void slots_request(struct tk_driver *d, uint64_t link, const struct tk_raft_msg *msg)
{
    struct slots *s = SL(d);
    if (s->pending_index > d->applied && s->pending_term == tk_raft_term(d->core)) {
        /* Ours is being committed: asked again, the same ring is answered
         * OK once it is applied, another one judged against it. */
        members_slots_reply(d, link, msg->from, TK_RAFT_SLOTS_RETRY, "a ring is being committed");
        return;
    }
    const char *name = msg->slots.group.p;
    size_t nlen = msg->slots.group.len;
    char why[TK_RAFT_SLOTS_WHY_MAX + 1];
    const char *no = NULL;
    const char *phrase = NULL;
    struct tk_slot_ring *r = malloc(sizeof(*r));
    TK_ASSERT(r != NULL);
    bool same = false;
    if (!tk_slots_name_ok(name, nlen)) {
        no = "the group name is not valid";
    } else if (tk_slots_decode(msg->slots.ring, msg->slots.ring_len, r, &phrase) != TK_OK) {
        tk_fmt(why, sizeof(why), "the ring is malformed: %s", phrase ? phrase : "?");
        no = why;
    } else if (d->o.group[0] && !named(d->o.group, name, nlen)) {
        tk_fmt(why, sizeof(why), "this is group '%s', not '%.*s'", d->o.group, (int)nlen, name);
        no = why;
    } else if (!d->o.group[0] && !named("default", name, nlen)) {
        tk_fmt(why, sizeof(why),
               "this node was started without --group: its group is 'default', not '%.*s'",
               (int)nlen, name);
        no = why;
    } else {
        no = successor(d, name, nlen, r, &same, why, sizeof(why));
        uint64_t bits[TK_SLOTS_WORDS];
        if (!no && !s->ring && !d->o.group[0] && tk_slots_owned(r, name, nlen, bits) != TK_SLOTS) {
            /* It serves every slot now, and may hold keys in any. */
            no = "a group started without --group serves every slot: its first ring must give it "
                 "every slot";
        }
    }
    free(r);
    if (no || same) {
        members_slots_reply(d, link, msg->from, no ? TK_RAFT_SLOTS_REFUSED : TK_RAFT_SLOTS_OK, no);
        return;
    }
    uint32_t len = ENTRY_FIXED + (uint32_t)nlen + msg->slots.ring_len;
    uint8_t *e = malloc(len);
    TK_ASSERT(e != NULL);
    uint32_t mark = TK_DRIVER_SLOTS_MARK;
    memcpy(e, &mark, 4);
    e[4] = OP_RING;
    e[5] = (uint8_t)nlen;
    memcpy(e + 6, name, nlen);
    memcpy(e + 6 + nlen, msg->slots.ring, msg->slots.ring_len);
    struct tk_raft_update up;
    int rc = tk_raft_propose(d->core, e, len, tk_raft_next_token(d->core), 0, d->now, &up);
    free(e);
    if (rc != TK_OK) {
        members_slots_reply(d, link, msg->from,
                            rc == TK_EFULL ? TK_RAFT_SLOTS_RETRY : TK_RAFT_SLOTS_NOT_LEADER, NULL);
        tk_driver_process(d, rc, &up);
        return;
    }
    s->pending_index = up.index;
    s->pending_term = tk_raft_term(d->core);
    members_slots_reply(d, link, msg->from, TK_RAFT_SLOTS_RETRY, "the ring is being committed");
    tk_driver_process(d, rc, &up);
}

/* ------------------------------------------------------------------ */
/* Snapshots */

uint8_t *slots_state(const struct tk_driver *d, size_t *len)
{
    const struct slots *s = &d->sl;
    *len = 0;
    if (!s->ring)
        return NULL;
    size_t n = strlen(s->group);
    uint8_t *buf = malloc(1 + n + TK_SLOTS_ENCODED_MAX);
    TK_ASSERT(buf != NULL);
    buf[0] = (uint8_t)n;
    memcpy(buf + 1, s->group, n);
    size_t rl = tk_slots_encode(s->ring, buf + 1 + n, TK_SLOTS_ENCODED_MAX);
    TK_ASSERT(rl > 0);
    *len = 1 + n + rl;
    return buf;
}

int slots_state_load(struct tk_driver *d, const uint8_t *state, size_t len)
{
    if (!state) {
        if (SL(d)->ring)
            set_ring(d, "", 0, NULL);
        return TK_OK;
    }
    struct tk_slot_ring *r = malloc(sizeof(*r));
    TK_ASSERT(r != NULL);
    const char *name;
    size_t nlen;
    if (state_decode(state, len, &name, &nlen, r) != TK_OK) {
        free(r);
        return TK_EPROTO;
    }
    set_ring(d, name, nlen, r);
    return TK_OK;
}

void slots_free(struct tk_driver *d)
{
    free(SL(d)->ring);
    SL(d)->ring = NULL;
}

void slots_stats(const struct tk_driver *d, struct tk_driver_stats *st)
{
    const struct slots *s = &d->sl;
    st->ring_version = s->ring ? s->ring->version : 0;
    st->slots_owned = s->ring ? s->owned : d->o.group[0] ? 0 : TK_SLOTS;
    st->rings_applied = s->rings_applied;
    st->rings_refused = s->rings_refused;
}

const struct tk_slot_ring *tk_driver_ring(const struct tk_driver *d, const char **group)
{
    *group = d->sl.group;
    return d->sl.ring;
}
