/* SPSC message rings and eventfd wakeups. */
#include "net/ring.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define RING_HDR 8u

static uint64_t round8(uint64_t n)
{
    return (n + 7u) & ~(uint64_t)7u;
}

int tk_ring_init(struct tk_ring *r, size_t cap_bytes)
{
    TK_ASSERT(cap_bytes >= 4096);
    TK_ASSERT((cap_bytes & (cap_bytes - 1)) == 0);
    memset(r, 0, sizeof(*r));
    void *p = NULL;
    if (posix_memalign(&p, 64, cap_bytes) != 0)
        return TK_ENOMEM;
    r->buf = p;
    r->mask = cap_bytes - 1;
    atomic_init(&r->head, 0);
    atomic_init(&r->tail, 0);
    return TK_OK;
}

void tk_ring_free(struct tk_ring *r)
{
    free(r->buf);
    r->buf = NULL;
}

void *tk_ring_reserve(struct tk_ring *r, uint32_t kind, uint32_t len)
{
    TK_ASSERT(kind != 0);
    uint64_t cap = r->mask + 1;
    uint64_t need = RING_HDR + round8(len);
    TK_ASSERT(need <= cap / 4);
    uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed) + r->pending;
    uint64_t off = head & r->mask;
    uint64_t pad = (off + need > cap) ? cap - off : 0; /* messages never wrap */
    if (head + pad + need - r->cached_tail > cap) {
        r->cached_tail = atomic_load_explicit(&r->tail, memory_order_acquire);
        if (head + pad + need - r->cached_tail > cap)
            return NULL;
    }
    if (pad) {
        struct tk_ring_msg *m = (struct tk_ring_msg *)(r->buf + off);
        m->kind = 0;
        m->len = (uint32_t)(pad - RING_HDR);
        r->pending += pad;
        off = 0;
    }
    struct tk_ring_msg *m = (struct tk_ring_msg *)(r->buf + off);
    m->kind = kind;
    m->len = len;
    r->pending += need;
    return m->data;
}

void tk_ring_publish(struct tk_ring *r)
{
    if (r->pending == 0)
        return;
    uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
    atomic_store_explicit(&r->head, head + r->pending, memory_order_release);
    r->pending = 0;
}

const struct tk_ring_msg *tk_ring_peek(struct tk_ring *r)
{
    for (;;) {
        uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
        if (tail == r->cached_head) {
            r->cached_head = atomic_load_explicit(&r->head, memory_order_acquire);
            if (tail == r->cached_head)
                return NULL;
        }
        const struct tk_ring_msg *m = (const struct tk_ring_msg *)(r->buf + (tail & r->mask));
        if (m->kind != 0)
            return m;
        /* Padding to the end of the buffer: skip it. */
        atomic_store_explicit(&r->tail, tail + RING_HDR + m->len, memory_order_release);
    }
}

void tk_ring_pop(struct tk_ring *r, const struct tk_ring_msg *m)
{
    uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
    TK_ASSERT((const uint8_t *)m == r->buf + (tail & r->mask));
    atomic_store_explicit(&r->tail, tail + RING_HDR + round8(m->len), memory_order_release);
}

uint64_t tk_ring_used(struct tk_ring *r)
{
    return atomic_load_explicit(&r->head, memory_order_relaxed) -
           atomic_load_explicit(&r->tail, memory_order_relaxed);
}

struct tk_ovf {
    struct tk_ovf *next;
    uint32_t kind, len;
    _Alignas(8) uint8_t data[];
};

void tk_outbox_init(struct tk_outbox *o, struct tk_ring *ring, struct tk_wake *wake, uint64_t limit)
{
    memset(o, 0, sizeof(*o));
    o->ring = ring;
    o->wake = wake;
    o->limit = limit;
}

void *tk_outbox_put(struct tk_outbox *o, uint32_t kind, uint32_t len)
{
    if (!o->head) {
        void *p = tk_ring_reserve(o->ring, kind, len);
        if (p) {
            o->touched = true;
            return p;
        }
        o->full_count++;
    }
    TK_ASSERT(o->queued < o->limit);
    struct tk_ovf *m = malloc(sizeof(*m) + len);
    TK_ASSERT(m != NULL);
    m->next = NULL;
    m->kind = kind;
    m->len = len;
    if (o->tail)
        o->tail->next = m;
    else
        o->head = m;
    o->tail = m;
    o->queued++;
    return m->data;
}

void tk_outbox_flush(struct tk_outbox *o)
{
    while (o->head) {
        void *p = tk_ring_reserve(o->ring, o->head->kind, o->head->len);
        if (!p)
            break;
        memcpy(p, o->head->data, o->head->len);
        struct tk_ovf *m = o->head;
        o->head = m->next;
        if (!o->head)
            o->tail = NULL;
        o->queued--;
        free(m);
        o->touched = true;
    }
    if (o->touched) {
        tk_ring_publish(o->ring);
        tk_wake_signal(o->wake);
        o->touched = false;
    }
}

void tk_outbox_free(struct tk_outbox *o)
{
    while (o->head) {
        struct tk_ovf *m = o->head;
        o->head = m->next;
        free(m);
    }
    o->tail = NULL;
    o->queued = 0;
}

int tk_wake_init(struct tk_wake *w)
{
    w->fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    atomic_init(&w->pending, 0);
    return w->fd < 0 ? TK_EIO : TK_OK;
}

void tk_wake_close(struct tk_wake *w)
{
    if (w->fd >= 0)
        close(w->fd);
    w->fd = -1;
}

/* TSan does not model fences; under it a seq_cst read-modify-write of a
 * shared word gives the same full barrier and is visible to the tool. */
#ifdef TK_TSAN
static _Atomic uint64_t fence_word;
#define FULL_FENCE() atomic_fetch_add_explicit(&fence_word, 0, memory_order_seq_cst)
#else
#define FULL_FENCE() atomic_thread_fence(memory_order_seq_cst)
#endif

/* The fences pair up Dekker-style: either the consumer's drain after
 * tk_wake_clear() sees the producer's publish, or the producer's exchange
 * sees the cleared flag and writes the eventfd. */
void tk_wake_signal(struct tk_wake *w)
{
    FULL_FENCE();
    if (atomic_exchange_explicit(&w->pending, 1, memory_order_seq_cst) == 0) {
        uint64_t one = 1;
        ssize_t n;
        do {
            n = write(w->fd, &one, sizeof(one));
        } while (n < 0 && errno == EINTR);
        /* EAGAIN means the counter is saturated: the consumer is awake anyway. */
    }
}

void tk_wake_clear(struct tk_wake *w)
{
    atomic_store_explicit(&w->pending, 0, memory_order_seq_cst);
    FULL_FENCE();
}
