/* The in-memory Raft log: a growable ring of entries [first, last].
 *
 * Entries before `first` were compacted into a snapshot; the log remembers
 * the term, fencing counter and byte count of entry first - 1 so that the
 * consistency check of Append (Figure 2) and the token counter (SPEC 7)
 * still work at its edge. Data dropped by truncation or compaction is
 * parked in a trash list and freed at the next step (see raft.h, memory).
 */
#include "raft/internal.h"

#include <stdlib.h>
#include <string.h>

void raft_log_init(struct raft_log *l)
{
    memset(l, 0, sizeof(*l));
    l->first = 1;
}

void raft_log_gc(struct raft_log *l)
{
    for (uint64_t i = 0; i < l->trash_n; i++)
        free(l->trash[i]);
    l->trash_n = 0;
}

void raft_log_free(struct raft_log *l)
{
    raft_log_truncate(l, l->first);
    raft_log_gc(l);
    free(l->trash);
    free(l->ring);
    memset(l, 0, sizeof(*l));
}

static struct tk_raft_entry *log_slot(const struct raft_log *l, uint64_t index)
{
    TK_ASSERT(index >= l->first);
    TK_ASSERT(index - l->first < l->n);
    return &l->ring[(l->head + (index - l->first)) & (l->cap - 1)];
}

const struct tk_raft_entry *raft_log_get(const struct raft_log *l, uint64_t index)
{
    if (index < l->first || index - l->first >= l->n)
        return NULL;
    return log_slot(l, index);
}

uint64_t raft_log_last_term(const struct raft_log *l)
{
    if (l->n == 0)
        return l->prev_term;
    return log_slot(l, raft_log_last(l))->term;
}

uint64_t raft_log_term(const struct raft_log *l, uint64_t index, bool *known)
{
    *known = true;
    if (index == l->first - 1)
        return l->prev_term;
    const struct tk_raft_entry *e = raft_log_get(l, index);
    if (e != NULL)
        return e->term;
    *known = false;
    return 0;
}

uint64_t raft_log_token_next(const struct raft_log *l)
{
    if (l->n == 0)
        return l->prev_token_next;
    return tk_raft_entry_token_next(log_slot(l, raft_log_last(l)));
}

uint64_t raft_log_cum(const struct raft_log *l, uint64_t index)
{
    if (index < l->first || l->n == 0)
        return l->prev_cum;
    if (index > raft_log_last(l))
        index = raft_log_last(l);
    return log_slot(l, index)->cum_bytes;
}

/* Parks a pointer for freeing at the next step. On allocation failure the
 * data is leaked rather than freed early: a dangling pointer in an update
 * would be worse. */
static void log_trash(struct raft_log *l, const uint8_t *data)
{
    if (data == NULL)
        return;
    if (l->trash_n == l->trash_cap) {
        uint64_t cap = l->trash_cap ? l->trash_cap * 2 : 64;
        void **t = realloc(l->trash, cap * sizeof(*t));
        if (t == NULL)
            return;
        l->trash = t;
        l->trash_cap = cap;
    }
    l->trash[l->trash_n++] = (void *)(uintptr_t)data;
}

void raft_log_discard(struct raft_log *l, void *p)
{
    log_trash(l, p);
}

static int log_grow(struct raft_log *l)
{
    uint64_t cap = l->cap ? l->cap * 2 : 64;
    struct tk_raft_entry *ring = malloc(cap * sizeof(*ring));
    if (ring == NULL)
        return TK_ENOMEM;
    for (uint64_t i = 0; i < l->n; i++)
        ring[i] = l->ring[(l->head + i) & (l->cap - 1)];
    free(l->ring);
    l->ring = ring;
    l->cap = cap;
    l->head = 0;
    return TK_OK;
}

int raft_log_append(struct raft_log *l, const struct tk_raft_entry *e)
{
    uint64_t index = raft_log_last(l) + 1;
    /* Log order (Figure 2): consecutive indexes, terms never decrease, the
     * fencing counter never goes back (SPEC 7). */
    TK_ASSERT(e->index == index);
    TK_ASSERT(e->term >= raft_log_last_term(l));
    TK_ASSERT(e->term > 0);
    TK_ASSERT(e->token_first >= raft_log_token_next(l));
    TK_ASSERT(e->type == TK_RAFT_DATA || e->token_count == 0);
    TK_ASSERT(e->type >= TK_RAFT_NOOP && e->type <= TK_RAFT_CONFIG);
    TK_ASSERT((e->len == 0) == (e->data == NULL));
    if (l->n == l->cap && log_grow(l) != TK_OK)
        return TK_ENOMEM;
    struct tk_raft_entry *slot = &l->ring[(l->head + l->n) & (l->cap - 1)];
    uint64_t cum = raft_log_cum(l, index - 1);
    *slot = *e;
    slot->cum_bytes = cum + e->len;
    l->n++;
    l->bytes += e->len;
    return TK_OK;
}

void raft_log_truncate(struct raft_log *l, uint64_t index)
{
    TK_ASSERT(index >= l->first);
    while (l->n > 0 && raft_log_last(l) >= index) {
        struct tk_raft_entry *e = log_slot(l, raft_log_last(l));
        log_trash(l, e->data);
        l->bytes -= e->len;
        l->n--;
    }
}

void raft_log_compact(struct raft_log *l, uint64_t index)
{
    TK_ASSERT(index <= raft_log_last(l));
    while (l->n > 0 && l->first <= index) {
        struct tk_raft_entry *e = log_slot(l, l->first);
        l->prev_term = e->term;
        l->prev_token_next = tk_raft_entry_token_next(e);
        l->prev_cum = e->cum_bytes;
        log_trash(l, e->data);
        l->bytes -= e->len;
        l->head = (l->head + 1) & (l->cap - 1);
        l->first++;
        l->n--;
    }
}

void raft_log_reset(struct raft_log *l, uint64_t index, uint64_t term, uint64_t token_next)
{
    uint64_t cum = raft_log_cum(l, raft_log_last(l));
    raft_log_truncate(l, l->first);
    l->first = index + 1;
    l->head = 0;
    l->prev_term = term;
    l->prev_token_next = token_next;
    l->prev_cum = cum;
    TK_ASSERT(l->n == 0);
    TK_ASSERT(l->bytes == 0);
}
