/* Binary min-heap of deadlines with back-indices (see timer.h). */
#include "shard/timer.h"

#include <stdlib.h>

#define TIMER_CAP_MIN 64u

void tk_timer_init(struct tk_timer_heap *h)
{
    h->v = NULL;
    h->n = 0;
    h->cap = 0;
}

void tk_timer_fini(struct tk_timer_heap *h)
{
    free(h->v);
    tk_timer_init(h);
}

static int timer_resize(struct tk_timer_heap *h, uint32_t cap)
{
    TK_ASSERT(cap >= h->n);
    struct tk_timer *v = realloc(h->v, (size_t)cap * sizeof(*v));
    if (v == NULL)
        return TK_ENOMEM;
    h->v = v;
    h->cap = cap;
    return TK_OK;
}

int tk_timer_reserve(struct tk_timer_heap *h, uint64_t n)
{
    if (n <= h->cap)
        return TK_OK;
    if (n > TK_TIMER_MAX)
        return TK_EFULL;
    /* Doubling keeps the cost of growth amortized O(1) per push. */
    uint64_t cap = h->cap ? h->cap : TIMER_CAP_MIN;
    while (cap < n)
        cap *= 2;
    if (cap > TK_TIMER_MAX)
        cap = TK_TIMER_MAX;
    int rv = timer_resize(h, (uint32_t)cap); /* <= TK_TIMER_MAX, clamped above */
    TK_ASSERT(rv != TK_OK || h->cap >= n);
    return rv;
}

void tk_timer_trim(struct tk_timer_heap *h, uint64_t keep)
{
    if (h->cap <= TIMER_CAP_MIN || (uint64_t)h->cap / 4 <= TK_MAX(keep, h->n))
        return;
    /* Halving (not shrinking to fit) leaves slack, so a workload that hovers
     * around one size does not realloc back and forth. */
    (void)timer_resize(h, h->cap / 2);
    TK_ASSERT(h->cap >= h->n);
}

static void timer_place(struct tk_timer_heap *h, uint32_t i, struct tk_timer e)
{
    h->v[i] = e;
    *e.slot = i;
}

static void timer_sift_up(struct tk_timer_heap *h, uint32_t i)
{
    struct tk_timer e = h->v[i];
    while (i > 0) {
        uint32_t parent = (i - 1) / 2;
        if (h->v[parent].due_us <= e.due_us)
            break;
        timer_place(h, i, h->v[parent]);
        i = parent;
    }
    timer_place(h, i, e);
}

static void timer_sift_down(struct tk_timer_heap *h, uint32_t i)
{
    struct tk_timer e = h->v[i];
    for (;;) {
        uint64_t child = 2 * (uint64_t)i + 1;
        if (child >= h->n)
            break;
        if (child + 1 < h->n && h->v[child + 1].due_us < h->v[child].due_us)
            child++;
        if (e.due_us <= h->v[child].due_us)
            break;
        timer_place(h, i, h->v[child]);
        i = (uint32_t)child; /* child < h->n, a uint32_t */
    }
    timer_place(h, i, e);
}

void tk_timer_push(struct tk_timer_heap *h, uint64_t due_us, uint32_t *slot)
{
    TK_ASSERT(h->n < h->cap);
    TK_ASSERT(*slot == TK_TIMER_NONE);
    uint32_t i = h->n++;
    h->v[i] = (struct tk_timer){.due_us = due_us, .slot = slot};
    timer_sift_up(h, i);
    TK_ASSERT(*slot < h->n);
}

void tk_timer_remove(struct tk_timer_heap *h, uint32_t i)
{
    TK_ASSERT(i < h->n);
    TK_ASSERT(*h->v[i].slot == i);
    *h->v[i].slot = TK_TIMER_NONE;
    uint32_t last = --h->n;
    if (i == last)
        return;
    /* The last entry fills the hole and moves up or down from there. */
    timer_place(h, i, h->v[last]);
    if (i > 0 && h->v[(i - 1) / 2].due_us > h->v[i].due_us)
        timer_sift_up(h, i);
    else
        timer_sift_down(h, i);
}

void tk_timer_update(struct tk_timer_heap *h, uint32_t i, uint64_t due_us)
{
    TK_ASSERT(i < h->n);
    TK_ASSERT(*h->v[i].slot == i);
    uint64_t old = h->v[i].due_us;
    h->v[i].due_us = due_us;
    if (due_us < old)
        timer_sift_up(h, i);
    else
        timer_sift_down(h, i);
}

void tk_timer_check(const struct tk_timer_heap *h)
{
    TK_ASSERT(h->n <= h->cap);
    TK_ASSERT(h->cap == 0 || h->v != NULL);
    for (uint32_t i = 0; i < h->n; i++) {
        TK_ASSERT(h->v[i].slot != NULL);
        TK_ASSERT(*h->v[i].slot == i);
        if (i > 0)
            TK_ASSERT(h->v[(i - 1) / 2].due_us <= h->v[i].due_us);
    }
}
