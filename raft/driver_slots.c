/* The ring in a group's replicated state (SPEC 15), and the moves that
 * change which group owns which slots: the entries that carry them, their
 * apply, the views the shards judge requests by, the operator's requests
 * that propose them, the shards' count of what frozen slots still hold,
 * and the ring's and moves' part of a snapshot.
 *
 * A move of slots [first, last] from group S to group T is three steps,
 * each one committed entry in the group it concerns, each idempotent (a
 * step asked again once done is answered OK, with what it recorded):
 *   freeze (at S): S stops serving the range: acquires and reads are
 *     answered W, its waiters too; its holders may still release.
 *   hand-over (at S): once no key of the frozen slots is held or being
 *     granted (the shards count; a lease that runs out is an expiry the
 *     leader commits), S gives the range away with its counter C (the
 *     hand-over's token_first: every token S issued is below it) and
 *     takes the next ring, which names T for the range.
 *   claim (at T): T owns the range under the same ring, its counter raised
 *     to C at least (the claim's token_first), so every token T issues
 *     for a moved key is above every token S issued for it.
 * Until the claim, the range is served by nobody; never by two.
 *
 * Every rule of the apply reads replicated state only (the ring and the
 * moves committed before, the group name the ring was given to, the
 * entry's own token_first), so every member takes or refuses an entry
 * alike. The leader checks more before it proposes (the --group of this
 * node, the shards' count for a hand-over), and answers the operator with
 * a sentence.
 */
#include <stdlib.h>
#include <string.h>

#include "raft/driver_internal.h"

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

/* One operator's step, as the entry (or the SLOTS frame) says it. */
struct step {
    uint8_t op; /* enum tk_raft_slots_op */
    const char *name, *peer;
    size_t name_len, peer_len;
    uint16_t first, last;
    uint64_t counter;
    struct tk_slot_ring *r; /* NULL for a freeze */
};

/* A scratch ring for a step (freed by step_free). */
static struct tk_slot_ring *ring_new(void)
{
    struct tk_slot_ring *r = malloc(sizeof(*r));
    TK_ASSERT(r != NULL);
    return r;
}

static void step_free(struct step *st)
{
    free(st->r);
    st->r = NULL;
}

static uint16_t get16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

/* Decodes an entry into *st (st->r allocated for every op but a freeze). */
static int entry_decode(const uint8_t *data, uint32_t len, struct step *st)
{
    memset(st, 0, sizeof(*st));
    if (!slots_entry_is(data, len) || len < ENTRY_FIXED || len < ENTRY_FIXED + (uint32_t)data[5])
        return TK_EPROTO;
    st->op = data[4];
    st->name = (const char *)data + 6;
    st->name_len = data[5];
    if (!tk_slots_name_ok(st->name, st->name_len))
        return TK_EPROTO;
    const uint8_t *p = data + 6 + st->name_len, *end = data + len;
    if (st->op != TK_RAFT_SLOTS_RING) {
        if (st->op < TK_RAFT_SLOTS_FREEZE || st->op > TK_RAFT_SLOTS_CLAIM || end - p < 5 ||
            end - p < 5 + p[4])
            return TK_EPROTO;
        st->first = get16(p);
        st->last = get16(p + 2);
        st->peer_len = p[4];
        st->peer = (const char *)p + 5;
        p += 5 + st->peer_len;
        if (st->first > st->last || st->last >= TK_SLOTS ||
            !tk_slots_name_ok(st->peer, st->peer_len))
            return TK_EPROTO;
        if (st->op == TK_RAFT_SLOTS_CLAIM) {
            if (end - p < 8)
                return TK_EPROTO;
            memcpy(&st->counter, p, 8);
            p += 8;
        }
        if (st->op == TK_RAFT_SLOTS_FREEZE)
            return p == end ? TK_OK : TK_EPROTO;
    }
    st->r = ring_new();
    int rc = tk_slots_decode(p, (size_t)(end - p), st->r, NULL);
    if (rc != TK_OK)
        step_free(st);
    return rc;
}

int slots_entry_check(const uint8_t *data, uint32_t len)
{
    struct step st;
    int rc = entry_decode(data, len, &st);
    step_free(&st);
    return rc;
}

/* The entry of a step whose ring is given encoded (ring, ring_len). */
static uint8_t *entry_make(const struct step *st,
                           const uint8_t *ring,
                           uint32_t ring_len,
                           uint32_t *len)
{
    uint32_t n = ENTRY_FIXED + (uint32_t)st->name_len + ring_len;
    if (st->op != TK_RAFT_SLOTS_RING)
        n += 5 + (uint32_t)st->peer_len + (st->op == TK_RAFT_SLOTS_CLAIM ? 8 : 0);
    uint8_t *e = malloc(n), *p = e;
    TK_ASSERT(e != NULL);
    uint32_t mark = TK_DRIVER_SLOTS_MARK;
    memcpy(p, &mark, 4);
    p[4] = st->op;
    p[5] = (uint8_t)st->name_len;
    memcpy(p + 6, st->name, st->name_len);
    p += 6 + st->name_len;
    if (st->op != TK_RAFT_SLOTS_RING) {
        p[0] = (uint8_t)st->first;
        p[1] = (uint8_t)(st->first >> 8);
        p[2] = (uint8_t)st->last;
        p[3] = (uint8_t)(st->last >> 8);
        p[4] = (uint8_t)st->peer_len;
        memcpy(p + 5, st->peer, st->peer_len);
        p += 5 + st->peer_len;
        if (st->op == TK_RAFT_SLOTS_CLAIM) {
            memcpy(p, &st->counter, 8);
            p += 8;
        }
    }
    if (ring_len)
        memcpy(p, ring, ring_len);
    p += ring_len;
    TK_ASSERT((uint32_t)(p - e) == n);
    *len = n;
    return e;
}

/* ------------------------------------------------------------------ */
/* Moves */

static bool named(const char *a, const char *b, size_t blen)
{
    return strlen(a) == blen && memcmp(a, b, blen) == 0;
}

/* The bits of slots [first, last]. */
static void range_bits(uint16_t first, uint16_t last, uint64_t bits[TK_SLOTS_WORDS])
{
    memset(bits, 0, TK_SLOTS_WORDS * sizeof(uint64_t));
    for (uint32_t i = first; i <= last; i++)
        bits[i / 64] |= UINT64_C(1) << (i % 64);
}

/* The slots frozen by moves in progress. */
static void frozen_bits(const struct slots *s, uint64_t bits[TK_SLOTS_WORDS])
{
    uint64_t r[TK_SLOTS_WORDS];
    memset(bits, 0, TK_SLOTS_WORDS * sizeof(uint64_t));
    for (uint32_t i = 0; i < s->nmoves; i++) {
        if (s->moves[i].state != MOVE_FROZEN)
            continue;
        range_bits(s->moves[i].first, s->moves[i].last, r);
        for (uint32_t w = 0; w < TK_SLOTS_WORDS; w++)
            bits[w] |= r[w];
    }
}

/* The move of this range with this peer in this state, or NULL. */
static struct slot_move *move_find(struct slots *s, const struct step *st, uint8_t state)
{
    for (uint32_t i = 0; i < s->nmoves; i++) {
        struct slot_move *m = &s->moves[i];
        if (m->state == state && m->first == st->first && m->last == st->last &&
            named(m->peer, st->peer, st->peer_len))
            return m;
    }
    return NULL;
}

/* Whether a new record fits (a finished one may be dropped for it). */
static bool move_room(const struct slots *s)
{
    for (uint32_t i = 0; i < s->nmoves && s->nmoves == MOVES_MAX; i++)
        if (s->moves[i].state != MOVE_FROZEN)
            return true;
    return s->nmoves < MOVES_MAX;
}

static struct slot_move *move_add(struct slots *s, const struct step *st, uint8_t state)
{
    if (s->nmoves == MOVES_MAX) {
        uint32_t i = 0;
        while (s->moves[i].state == MOVE_FROZEN)
            i++;
        TK_ASSERT(i < MOVES_MAX); /* move_room() said so */
        memmove(&s->moves[i], &s->moves[i + 1], (MOVES_MAX - 1 - i) * sizeof(s->moves[0]));
        s->nmoves--;
    }
    struct slot_move *m = &s->moves[s->nmoves++];
    memset(m, 0, sizeof(*m));
    m->first = st->first;
    m->last = st->last;
    m->state = state;
    memcpy(m->peer, st->peer, st->peer_len);
    return m;
}

/* ------------------------------------------------------------------ */
/* Views for the shards */

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

/* The view of the committed ring (none: version 0, "no ring", which the
 * shards read as having none) for this group. */
static struct tk_slot_view *view_make(const struct slots *s)
{
    const struct tk_slot_ring *r = s->ring;
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
        tk_slots_owned(r, s->group, strlen(s->group), v->own);
        uint64_t frozen[TK_SLOTS_WORDS];
        frozen_bits(s, frozen);
        for (uint32_t w = 0; w < TK_SLOTS_WORDS; w++)
            v->serve[w] = v->own[w] & ~frozen[w];
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
void slots_send_views(struct tk_driver *d)
{
    struct tk_slot_view *v = view_make(SL(d));
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
/* The rules */

/* Why a ring r given with a step may not follow the committed one for
 * group `name`, or NULL. It must be newer, or be the
 * committed ring itself (*same); the slots it gives the group must be
 * those the group owns now, less `minus` and plus `plus` (bitmaps, NULL:
 * none). A ring alone changes no ownership: slots change groups only by
 * a move. Replicated state only. */
static const char *ring_rule(struct tk_driver *d,
                             const struct step *st,
                             const uint64_t *minus,
                             const uint64_t *plus,
                             bool *same,
                             char *why,
                             size_t cap)
{
    const struct slots *s = SL(d);
    const struct tk_slot_ring *r = st->r;
    *same = false;
    if (s->ring && !named(s->group, st->name, st->name_len)) {
        tk_fmt(why, cap, "this group's ring is group '%s''s, not '%.*s''s", s->group,
               (int)st->name_len, st->name);
        return why;
    }
    if (s->ring && r->version == s->ring->version && tk_slots_equal(r, s->ring)) {
        *same = true;
        return NULL;
    }
    if (!s->ring && !minus && !plus)
        return NULL; /* a first ring alone: what the node's --group lets it take (below) */
    if (s->ring && r->version <= s->ring->version) {
        tk_fmt(why, cap, "version %llu is not newer than this group's ring (version %llu)",
               (unsigned long long)r->version, (unsigned long long)s->ring->version);
        return why;
    }
    uint64_t want[TK_SLOTS_WORDS] = {0}, now[TK_SLOTS_WORDS];
    if (s->ring)
        tk_slots_owned(s->ring, s->group, strlen(s->group), want);
    for (uint32_t w = 0; w < TK_SLOTS_WORDS; w++)
        want[w] = (want[w] & ~(minus ? minus[w] : 0)) | (plus ? plus[w] : 0);
    tk_slots_owned(r, st->name, st->name_len, now);
    if (memcmp(want, now, sizeof(want)) != 0) {
        const char *group = s->ring ? s->group : "";
        if (!minus && !plus)
            tk_fmt(why, cap,
                   "the ring changes the slots group '%s' owns: slots change groups only by a move",
                   group);
        else
            tk_fmt(why, cap,
                   "the ring must give group '%.*s' the slots it owns %s slots %u-%u, and no "
                   "others",
                   (int)st->name_len, st->name, minus ? "less" : "and", st->first, st->last);
        return why;
    }
    return NULL;
}

/* Why a step may not be taken now, or NULL; *same: it is done already
 * (then *done is its record, for a move). token_first: the entry's, at
 * the apply (a claim must have raised the counter to its counter);
 * UINT64_MAX when the leader judges a request. Replicated state only. */
static const char *judge(struct tk_driver *d,
                         const struct step *st,
                         uint64_t token_first,
                         bool *same,
                         const struct slot_move **done,
                         char *why,
                         size_t cap)
{
    struct slots *s = SL(d);
    *same = false;
    *done = NULL;
    if (st->op == TK_RAFT_SLOTS_RING)
        return ring_rule(d, st, NULL, NULL, same, why, cap);
    if ((*done = move_find(s, st, st->op == TK_RAFT_SLOTS_CLAIM ? MOVE_CLAIMED : MOVE_HANDED))) {
        /* Resumed: a claim is the same only with the same counter. */
        if (st->op != TK_RAFT_SLOTS_CLAIM || (*done)->counter == st->counter) {
            *same = true;
            return NULL;
        }
    }
    *done = NULL;
    /* The name is this group's (checked below once it has a ring). */
    if (st->name_len == st->peer_len && memcmp(st->name, st->peer, st->peer_len) == 0)
        return "a group cannot move slots to itself";
    if (st->op != TK_RAFT_SLOTS_CLAIM && !s->ring)
        return "this group has no ring: it owns no slots to move";
    if (s->ring && !named(s->group, st->name, st->name_len)) {
        tk_fmt(why, cap, "this is group '%s', not '%.*s'", s->group, (int)st->name_len, st->name);
        return why;
    }
    uint64_t range[TK_SLOTS_WORDS], frozen[TK_SLOTS_WORDS];
    range_bits(st->first, st->last, range);
    frozen_bits(s, frozen);
    int self = s->ring ? tk_slots_find(s->ring, s->group, strlen(s->group)) : -1;
    switch (st->op) {
        case TK_RAFT_SLOTS_FREEZE:
            if (move_find(s, st, MOVE_FROZEN)) {
                *same = true;
                return NULL;
            }
            for (uint32_t i = st->first; i <= st->last; i++) {
                if (tk_slots_owner(s->ring, i) != self || self < 0) {
                    tk_fmt(why, cap, "group '%s' does not own slot %u (of %u-%u)", s->group, i,
                           st->first, st->last);
                    return why;
                }
                if (tk_slots_bit(frozen, i)) {
                    tk_fmt(why, cap, "slot %u is frozen for another move already", i);
                    return why;
                }
            }
            return move_room(s) ? NULL : "too many moves are in progress in this group";
        case TK_RAFT_SLOTS_HANDOVER: {
            if (!move_find(s, st, MOVE_FROZEN)) {
                tk_fmt(why, cap, "slots %u-%u are not frozen for a move to group '%.*s'", st->first,
                       st->last, (int)st->peer_len, st->peer);
                return why;
            }
            int to = tk_slots_find(st->r, st->peer, st->peer_len);
            for (uint32_t i = st->first; i <= st->last; i++)
                if (to < 0 || tk_slots_owner(st->r, i) != to) {
                    tk_fmt(why, cap, "the ring does not give slots %u-%u to group '%.*s'",
                           st->first, st->last, (int)st->peer_len, st->peer);
                    return why;
                }
            bool ring_same;
            const char *no = ring_rule(d, st, range, NULL, &ring_same, why, cap);
            return no ? no : ring_same ? "the ring is this group's already" : NULL;
        }
        case TK_RAFT_SLOTS_CLAIM: {
            for (uint32_t i = st->first; i <= st->last && self >= 0; i++)
                if (tk_slots_owner(s->ring, i) == self) {
                    tk_fmt(why, cap, "group '%s' owns slot %u already", s->group, i);
                    return why;
                }
            if (!move_room(s))
                return "too many moves are in progress in this group";
            if (token_first < st->counter)
                return "the claim did not raise the fencing counter to the source's";
            bool ring_same;
            const char *no = ring_rule(d, st, NULL, range, &ring_same, why, cap);
            return no ? no : ring_same ? "the ring is this group's already" : NULL;
        }
    }
    return "unknown step";
}

/* ------------------------------------------------------------------ */
/* The apply */

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
}

static void log_info(struct tk_driver *d, const char *line)
{
    if (d->io.log)
        d->io.log(d->io.ctx, TK_DRIVER_LOG_INFO, line);
}

int slots_apply(struct tk_driver *d, uint64_t index, const struct tk_raft_entry *e)
{
    struct slots *s = SL(d);
    struct step st;
    if (entry_decode(e->data, e->len, &st) != TK_OK)
        return TK_EPROTO;
    char why[TK_RAFT_SLOTS_WHY_MAX + 1], line[TK_RAFT_SLOTS_WHY_MAX + 64];
    bool same;
    const struct slot_move *done;
    const char *no = judge(d, &st, e->token_first, &same, &done, why, sizeof(why));
    if (no) {
        s->rings_refused++;
        if (d->io.log)
            d->io.log(d->io.ctx, TK_DRIVER_LOG_WARN, no);
    }
    if (no || same) {
        step_free(&st);
        return TK_OK;
    }
    struct slot_move *m = NULL;
    switch (st.op) {
        case TK_RAFT_SLOTS_RING:
            s->rings_applied++;
            break;
        case TK_RAFT_SLOTS_FREEZE:
            m = move_add(s, &st, MOVE_FROZEN);
            s->moves_frozen++;
            break;
        case TK_RAFT_SLOTS_HANDOVER:
            m = move_find(s, &st, MOVE_FROZEN);
            m->state = MOVE_HANDED;
            m->counter = e->token_first; /* the entry takes no token */
            s->moves_handed++;
            break;
        case TK_RAFT_SLOTS_CLAIM:
            m = move_add(s, &st, MOVE_CLAIMED);
            m->counter = st.counter;
            s->moves_claimed++;
            break;
    }
    if (m)
        m->index = index;
    if (st.r) {
        set_ring(d, st.name, st.name_len, st.r);
        st.r = NULL;
    }
    slots_send_views(d);
    if (st.op == TK_RAFT_SLOTS_RING)
        tk_fmt(line, sizeof(line), "ring version %llu committed: group '%s' owns %u slots",
               (unsigned long long)s->ring->version, s->group, s->owned);
    else
        tk_fmt(line, sizeof(line),
               "slots %u-%u %s group '%s' (counter %llu); ring version %llu: this group owns %u "
               "slots",
               m->first, m->last,
               st.op == TK_RAFT_SLOTS_FREEZE     ? "frozen for a move to"
               : st.op == TK_RAFT_SLOTS_HANDOVER ? "handed over to"
                                                 : "claimed from",
               m->peer, (unsigned long long)m->counter, (unsigned long long)s->ring->version,
               s->owned);
    log_info(d, line);
    step_free(&st);
    return TK_OK;
}

/* ------------------------------------------------------------------ */
/* What the frozen slots hold (leader) */

/* Asks every shard to count, unless a count of this leadership is on its way. */
static void held_ask(struct tk_driver *d)
{
    struct slots *s = SL(d);
    if (s->held_epoch == d->epoch && s->held_replies < d->o.nshards)
        return;
    s->held_seq++;
    s->held_epoch = d->epoch;
    s->held_applied = d->applied;
    s->held_replies = 0;
    s->held_count = 0;
    for (uint32_t i = 0; i < d->o.nshards; i++) {
        struct tk_msg m = {.kind = TK_MSG_HELD, .u.held = {.epoch = d->epoch, .seq = s->held_seq}};
        driver_to_shard(d, i, &m);
    }
}

void slots_held(struct tk_driver *d, const struct tk_msg_held *h)
{
    struct slots *s = SL(d);
    if (h->epoch != d->epoch || h->epoch != s->held_epoch || h->seq != s->held_seq)
        return; /* asked under another leadership, or an older count */
    TK_ASSERT(s->held_replies < d->o.nshards);
    s->held_replies++;
    s->held_count += h->count;
}

/* Whether the last count says the range frozen at index `frozen_at` holds
 * nothing: asked in this leadership, after the freeze was applied, every
 * shard answered 0. After the freeze no key of a frozen slot is granted,
 * so 0 stays 0. Otherwise *why says what the count is at. */
static bool held_none(struct tk_driver *d, uint64_t frozen_at, char *why, size_t cap)
{
    struct slots *s = SL(d);
    bool fresh = s->held_epoch == d->epoch && s->held_applied >= frozen_at;
    if (fresh && s->held_replies == d->o.nshards && s->held_count == 0)
        return true;
    if (fresh && s->held_replies == d->o.nshards)
        tk_fmt(why, cap,
               "%llu keys are still held in the frozen slots (the move waits until they are "
               "released or their leases run out)",
               (unsigned long long)s->held_count);
    else
        tk_fmt(why, cap, "counting the keys held in the frozen slots");
    held_ask(d);
    return false;
}

/* ------------------------------------------------------------------ */
/* The operator's request (leader) */

static const char *step_of(const struct tk_raft_msg *msg, struct step *st, char *why, size_t cap)
{
    memset(st, 0, sizeof(*st));
    st->op = msg->slots.op;
    st->name = msg->slots.group.p;
    st->name_len = msg->slots.group.len;
    st->peer = msg->slots.peer.p;
    st->peer_len = msg->slots.peer.len;
    st->first = msg->slots.first;
    st->last = msg->slots.last;
    st->counter = msg->slots.counter;
    if (!tk_slots_name_ok(st->name, st->name_len))
        return "the group name is not valid";
    if (st->op != TK_RAFT_SLOTS_RING && !tk_slots_name_ok(st->peer, st->peer_len))
        return "the other group's name is not valid";
    if (st->op == TK_RAFT_SLOTS_FREEZE)
        return msg->slots.ring_len == 0 ? NULL : "a freeze carries no ring";
    const char *phrase = NULL;
    st->r = ring_new();
    if (tk_slots_decode(msg->slots.ring, msg->slots.ring_len, st->r, &phrase) != TK_OK) {
        tk_fmt(why, cap, "the ring is malformed: %s", phrase ? phrase : "?");
        return why;
    }
    return NULL;
}

/* What this node's --group lets it take. */
static const char *own_group(const struct tk_driver *d,
                             const struct step *st,
                             char *why,
                             size_t cap)
{
    if (d->o.group[0] && !named(d->o.group, st->name, st->name_len)) {
        tk_fmt(why, cap, "this is group '%s', not '%.*s'", d->o.group, (int)st->name_len, st->name);
        return why;
    }
    if (!d->o.group[0] && !named("default", st->name, st->name_len)) {
        tk_fmt(why, cap,
               "this node was started without --group: its group is 'default', not '%.*s'",
               (int)st->name_len, st->name);
        return why;
    }
    uint64_t bits[TK_SLOTS_WORDS];
    if (!d->sl.ring && !d->o.group[0] &&
        (st->op != TK_RAFT_SLOTS_RING ||
         tk_slots_owned(st->r, st->name, st->name_len, bits) != TK_SLOTS)) {
        /* It serves every slot now, and may hold keys in any. */
        return "a group started without --group serves every slot: its first ring must give it "
               "every slot";
    }
    return NULL;
}

void slots_request(struct tk_driver *d, uint64_t link, const struct tk_raft_msg *msg)
{
    struct slots *s = SL(d);
    if (s->pending_index > d->applied && s->pending_term == tk_raft_term(d->core)) {
        /* Ours is being committed: asked again, the same step is answered
         * OK once it is applied, another one judged against it. */
        members_slots_reply(d, link, msg->from, TK_RAFT_SLOTS_RETRY, "a ring is being committed",
                            0);
        return;
    }
    char why[TK_RAFT_SLOTS_WHY_MAX + 1];
    struct step st;
    bool same = false;
    const struct slot_move *done = NULL;
    const char *no = step_of(msg, &st, why, sizeof(why));
    if (!no)
        no = own_group(d, &st, why, sizeof(why));
    if (!no)
        no = judge(d, &st, UINT64_MAX, &same, &done, why, sizeof(why));
    if (no || same) {
        members_slots_reply(d, link, msg->from, no ? TK_RAFT_SLOTS_REFUSED : TK_RAFT_SLOTS_OK, no,
                            done ? done->counter : 0);
        step_free(&st);
        return;
    }
    uint64_t first = tk_raft_next_token(d->core);
    if (st.op == TK_RAFT_SLOTS_HANDOVER &&
        !held_none(d, move_find(s, &st, MOVE_FROZEN)->index, why, sizeof(why))) {
        members_slots_reply(d, link, msg->from, TK_RAFT_SLOTS_RETRY, why, 0);
        step_free(&st);
        return;
    }
    if (st.op == TK_RAFT_SLOTS_CLAIM) {
        /* Grants numbered from the counter go first; then the claim
         * raises it to the source's counter, if it is below. */
        driver_propose_batches(d);
        if (d->waiting_tokens > 0) {
            members_slots_reply(d, link, msg->from, TK_RAFT_SLOTS_RETRY,
                                "grants are waiting for room in the log", 0);
            step_free(&st);
            return;
        }
        first = TK_MAX(tk_raft_next_token(d->core), st.counter);
    }
    uint32_t len;
    uint8_t *e = entry_make(&st, msg->slots.ring, msg->slots.ring_len, &len);
    step_free(&st);
    struct tk_raft_update up;
    int rc = tk_raft_propose(d->core, e, len, first, 0, d->now, &up);
    free(e);
    if (rc != TK_OK) {
        members_slots_reply(d, link, msg->from,
                            rc == TK_EFULL ? TK_RAFT_SLOTS_RETRY : TK_RAFT_SLOTS_NOT_LEADER, NULL,
                            0);
        tk_driver_process(d, rc, &up);
        return;
    }
    s->pending_index = up.index;
    s->pending_term = tk_raft_term(d->core);
    members_slots_reply(d, link, msg->from, TK_RAFT_SLOTS_RETRY, "the ring is being committed", 0);
    tk_driver_process(d, rc, &up);
}

/* ------------------------------------------------------------------ */
/* Snapshots: u8 name_len | name | u32 ring_len | ring | u8 nmoves | per
 * move u16 first | u16 last | u8 state | u8 peer_len | peer | u64
 * counter | u64 index */

uint8_t *slots_state(const struct tk_driver *d, size_t *len)
{
    const struct slots *s = &d->sl;
    *len = 0;
    if (!s->ring)
        return NULL;
    size_t n = strlen(s->group);
    size_t cap = 1 + n + 4 + TK_SLOTS_ENCODED_MAX + 1 + MOVES_MAX * (6 + TK_SLOTS_NAME_MAX + 16);
    uint8_t *buf = malloc(cap), *p = buf;
    TK_ASSERT(buf != NULL);
    *p++ = (uint8_t)n;
    memcpy(p, s->group, n);
    p += n;
    uint32_t rl = (uint32_t)tk_slots_encode(s->ring, p + 4, TK_SLOTS_ENCODED_MAX);
    TK_ASSERT(rl > 0);
    memcpy(p, &rl, 4);
    p += 4 + rl;
    *p++ = (uint8_t)s->nmoves;
    for (uint32_t i = 0; i < s->nmoves; i++) {
        const struct slot_move *m = &s->moves[i];
        size_t pl = strlen(m->peer);
        memcpy(p, &m->first, 2);
        memcpy(p + 2, &m->last, 2);
        p[4] = m->state;
        p[5] = (uint8_t)pl;
        memcpy(p + 6, m->peer, pl);
        p += 6 + pl;
        memcpy(p, &m->counter, 8);
        memcpy(p + 8, &m->index, 8);
        p += 16;
    }
    *len = (size_t)(p - buf);
    TK_ASSERT(*len <= cap);
    return buf;
}

/* Decodes a state into a ring (allocated), its group name and moves. */
static int state_decode(const uint8_t *p,
                        size_t len,
                        struct slots *out,
                        const char **name,
                        size_t *name_len)
{
    const uint8_t *end = p + len;
    if (len < 1 || len < 1u + p[0] + 4)
        return TK_EPROTO;
    *name = (const char *)p + 1;
    *name_len = p[0];
    if (!tk_slots_name_ok(*name, *name_len))
        return TK_EPROTO;
    p += 1 + p[0];
    uint32_t rl;
    memcpy(&rl, p, 4);
    p += 4;
    if ((size_t)(end - p) < (size_t)rl + 1)
        return TK_EPROTO;
    out->ring = ring_new();
    if (tk_slots_decode(p, rl, out->ring, NULL) != TK_OK)
        return TK_EPROTO;
    p += rl;
    out->nmoves = *p++;
    if (out->nmoves > MOVES_MAX)
        return TK_EPROTO;
    for (uint32_t i = 0; i < out->nmoves; i++) {
        struct slot_move *m = &out->moves[i];
        memset(m, 0, sizeof(*m));
        if (end - p < 6 || end - p < 6 + p[5] + 16)
            return TK_EPROTO;
        memcpy(&m->first, p, 2);
        memcpy(&m->last, p + 2, 2);
        m->state = p[4];
        size_t pl = p[5];
        if (!tk_slots_name_ok((const char *)p + 6, pl) || m->first > m->last ||
            m->last >= TK_SLOTS || m->state < MOVE_FROZEN || m->state > MOVE_CLAIMED)
            return TK_EPROTO;
        memcpy(m->peer, p + 6, pl);
        p += 6 + pl;
        memcpy(&m->counter, p, 8);
        memcpy(&m->index, p + 8, 8);
        p += 16;
    }
    return p == end ? TK_OK : TK_EPROTO;
}

int slots_state_load(struct tk_driver *d, const uint8_t *state, size_t len)
{
    struct slots *s = SL(d);
    if (!state) {
        set_ring(d, "", 0, NULL);
        s->nmoves = 0;
        return TK_OK;
    }
    struct slots *in = calloc(1, sizeof(*in));
    TK_ASSERT(in != NULL);
    const char *name;
    size_t nlen;
    int rc = state_decode(state, len, in, &name, &nlen);
    if (rc == TK_OK) {
        set_ring(d, name, nlen, in->ring);
        memcpy(s->moves, in->moves, sizeof(s->moves));
        s->nmoves = in->nmoves;
    } else {
        free(in->ring);
    }
    free(in);
    return rc;
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
    st->moves_frozen = s->moves_frozen;
    st->moves_handed = s->moves_handed;
    st->moves_claimed = s->moves_claimed;
    uint64_t frozen[TK_SLOTS_WORDS];
    frozen_bits(s, frozen);
    st->slots_frozen = 0;
    for (uint32_t w = 0; w < TK_SLOTS_WORDS; w++)
        st->slots_frozen += (uint32_t)__builtin_popcountll(frozen[w]);
}

uint32_t tk_driver_moves(const struct tk_driver *d, struct tk_driver_move *out, uint32_t max)
{
    static const char *const names[] = {"", "frozen", "handed", "claimed"};
    const struct slots *s = &d->sl;
    uint32_t n = 0;
    for (uint32_t i = 0; i < s->nmoves && n < max; i++, n++)
        out[n] = (struct tk_driver_move){.first = s->moves[i].first,
                                         .last = s->moves[i].last,
                                         .state = names[s->moves[i].state],
                                         .peer = s->moves[i].peer,
                                         .counter = s->moves[i].counter};
    return n;
}

const struct tk_slot_ring *tk_driver_ring(const struct tk_driver *d, const char **group)
{
    *group = d->sl.group;
    return d->sl.ring;
}
