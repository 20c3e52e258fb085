/* A min-heap of deadlines with back-indices: the lease and wait timers of the
 * lock table.
 *
 * Each entry carries its deadline inline (so sifting touches only the heap
 * array) and a pointer to a uint32_t back-index inside the object that owns
 * the timer. The heap keeps `*slot == index of the entry` at all times, so an
 * owner can cancel or move its timer in O(log n) without a search, and
 * recovers itself from the slot pointer with container_of arithmetic.
 *
 * Memory: 16 bytes per entry; the array grows only in tk_timer_reserve(), so
 * push never allocates and never fails. Pure: no clocks, no threads. The
 * heap belongs to one lock table and so to one thread.
 */
#ifndef TK_SHARD_TIMER_H
#define TK_SHARD_TIMER_H

#include "core/tk.h"

/* Back-index of an object that has no timer in the heap. */
#define TK_TIMER_NONE UINT32_MAX
/* Largest number of entries (indices must stay below TK_TIMER_NONE). */
#define TK_TIMER_MAX (UINT32_MAX - 1u)

struct tk_timer {
    uint64_t due_us;
    uint32_t *slot; /* the owner's back-index; *slot == this entry's index */
};

struct tk_timer_heap {
    struct tk_timer *v;
    uint32_t n;
    uint32_t cap;
};

void tk_timer_init(struct tk_timer_heap *h);
/* Frees the array; the owners' back-indices are not touched. */
void tk_timer_fini(struct tk_timer_heap *h);

/* Makes room for `n` entries in total. Returns TK_OK, TK_EFULL when n is over
 * TK_TIMER_MAX, or TK_ENOMEM (the heap is unchanged then). */
int tk_timer_reserve(struct tk_timer_heap *h, uint64_t n);

/* Gives memory back once the heap uses under a quarter of its array, keeping
 * room for at least `keep` entries. Never fails (a failed shrink is ignored). */
void tk_timer_trim(struct tk_timer_heap *h, uint64_t keep);

/* Adds a timer; requires room (tk_timer_reserve) and *slot == TK_TIMER_NONE. */
void tk_timer_push(struct tk_timer_heap *h, uint64_t due_us, uint32_t *slot);

/* Removes the entry at index i and sets its owner's back-index to
 * TK_TIMER_NONE. */
void tk_timer_remove(struct tk_timer_heap *h, uint32_t i);

/* Moves the entry at index i to a new deadline. */
void tk_timer_update(struct tk_timer_heap *h, uint32_t i, uint64_t due_us);

/* Earliest deadline, or UINT64_MAX when empty. O(1). */
static inline uint64_t tk_timer_next(const struct tk_timer_heap *h)
{
    return h->n ? h->v[0].due_us : UINT64_MAX;
}

/* Back-index slot of the earliest entry; requires a non-empty heap. */
static inline uint32_t *tk_timer_top(const struct tk_timer_heap *h)
{
    TK_ASSERT(h->n > 0);
    return h->v[0].slot;
}

/* Points the entry at index i to a new back-index (its owner moved in
 * memory); *slot must already hold i. */
static inline void tk_timer_rebind(struct tk_timer_heap *h, uint32_t i, uint32_t *slot)
{
    TK_ASSERT(i < h->n);
    TK_ASSERT(*slot == i);
    h->v[i].slot = slot;
}

/* Back-index slot of the entry at index i (for walking every entry). */
static inline uint32_t *tk_timer_slot(const struct tk_timer_heap *h, uint32_t i)
{
    TK_ASSERT(i < h->n);
    return h->v[i].slot;
}

/* Empties the heap without touching the owners' back-indices: for callers
 * that free or reset every owner themselves. */
static inline void tk_timer_clear(struct tk_timer_heap *h)
{
    h->n = 0;
}

/* Deadline of the entry at index i. */
static inline uint64_t tk_timer_due(const struct tk_timer_heap *h, uint32_t i)
{
    TK_ASSERT(i < h->n);
    return h->v[i].due_us;
}

/* O(n) check of the heap order and of every back-index; panics on corruption. */
void tk_timer_check(const struct tk_timer_heap *h);

#endif
