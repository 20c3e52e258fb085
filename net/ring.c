/* SPSC message rings and eventfd wakeups. */
#include "net/ring.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "core/msg.h"

#define RING_HDR 8u

/* Every message between the threads fits the smallest ring that
 * tk_ring_bytes_for() hands out. */
_Static_assert(TK_MSG_ENCODED_MAX <= TK_RING_MSG_MAX, "ring messages fit the smallest ring");

/* TSan does not model fences; under it a seq_cst read-modify-write of a
 * shared word gives the same full barrier and is visible to the tool. */
#ifdef TK_TSAN
static _Atomic uint64_t fence_word;
#define FULL_FENCE() atomic_fetch_add_explicit(&fence_word, 0, memory_order_seq_cst)
#else
#define FULL_FENCE() atomic_thread_fence(memory_order_seq_cst)
#endif

static uint64_t round8(uint64_t n)
{
    return (n + 7u) & ~(uint64_t)7u;
}

/* Adds one to an eventfd's counter. EAGAIN means the counter is saturated:
 * the reader is awake anyway. */
static void wake_write(int fd)
{
    uint64_t one = 1;
    ssize_t n;
    do {
        n = write(fd, &one, sizeof(one));
    } while (n < 0 && errno == EINTR);
}

size_t tk_ring_bytes_for(uint32_t nthreads)
{
    uint64_t n = nthreads ? nthreads : 1;
    uint64_t per_ring = TK_RING_BUDGET_BYTES / (n * (n + 1));
    size_t bytes = TK_RING_BYTES_MAX;
    while (bytes > TK_RING_BYTES_MIN && bytes > per_ring)
        bytes >>= 1;
    return bytes;
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
    atomic_init(&r->want_space, 0);
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
            if (tail == r->cached_head) {
                tk_ring_pop_done(r); /* drained: a waiting producer may refill */
                return NULL;
            }
        }
        const struct tk_ring_msg *m = (const struct tk_ring_msg *)(r->buf + (tail & r->mask));
        if (m->kind != 0)
            return m;
        /* Padding to the end of the buffer: skip it. */
        atomic_store_explicit(&r->tail, tail + RING_HDR + m->len, memory_order_release);
        r->freed = true;
    }
}

void tk_ring_pop(struct tk_ring *r, const struct tk_ring_msg *m)
{
    uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
    TK_ASSERT((const uint8_t *)m == r->buf + (tail & r->mask));
    atomic_store_explicit(&r->tail, tail + RING_HDR + round8(m->len), memory_order_release);
    r->freed = true;
}

/* The fence pairs Dekker-style with the one in tk_outbox_flush(): the
 * producer stores want_space, fences and reads tail; the consumer stores
 * tail, fences and reads want_space. So either the producer sees the space
 * freed here and uses it, or this sees want_space and writes its eventfd;
 * it cannot sleep on a ring that has room. The eventfd is written directly,
 * not through tk_wake_signal(): the producer's pending flag may still be
 * set from earlier work, and the producer clears it and sleeps without
 * looking at its outboxes; an eventfd count is never lost. */
void tk_ring_pop_done(struct tk_ring *r)
{
    if (!r->freed)
        return;
    r->freed = false;
    FULL_FENCE();
    if (atomic_load_explicit(&r->want_space, memory_order_relaxed) == 0)
        return;
    if (atomic_exchange_explicit(&r->want_space, 0, memory_order_acq_rel) == 0)
        return;
    TK_ASSERT(r->producer_wake != NULL); /* set before want_space */
    wake_write(r->producer_wake->fd);
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

void tk_outbox_set_producer(struct tk_outbox *o, struct tk_wake *self)
{
    o->ring->producer_wake = self;
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

/* Moves overflow into the ring while it has room. */
static void outbox_move(struct tk_outbox *o)
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
}

static void outbox_flush(struct tk_outbox *o, bool wake)
{
    outbox_move(o);
    struct tk_ring *r = o->ring;
    if (r->producer_wake) {
        bool asked = atomic_load_explicit(&r->want_space, memory_order_relaxed) != 0;
        if (o->head && !asked) {
            /* Still full: ask the consumer for a wakeup, then look once
             * more (see tk_ring_pop_done() for the pairing). If the flag
             * was already set, the consumer either has not checked it yet
             * or has cleared it and written the eventfd: both wake us. */
            atomic_store_explicit(&r->want_space, 1, memory_order_seq_cst);
            FULL_FENCE();
            outbox_move(o);
            asked = o->head == NULL;
        }
        /* Nothing waits any more: withdraw the request (if the consumer
         * saw it meanwhile, the result is one spurious wakeup). */
        if (!o->head && asked)
            atomic_store_explicit(&r->want_space, 0, memory_order_relaxed);
    }
    if (o->touched) {
        tk_ring_publish(o->ring);
        o->touched = false;
        o->unsignaled = true;
    }
    if (wake && o->unsignaled) {
        tk_wake_signal(o->wake);
        o->unsignaled = false;
    }
}

void tk_outbox_flush(struct tk_outbox *o)
{
    outbox_flush(o, true);
}

void tk_outbox_flush_quiet(struct tk_outbox *o)
{
    outbox_flush(o, false);
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
    w->local = false;
    return w->fd < 0 ? TK_EIO : TK_OK;
}

void tk_wake_init_local(struct tk_wake *w)
{
    w->fd = -1;
    atomic_init(&w->pending, 0);
    w->local = true;
}

void tk_wake_close(struct tk_wake *w)
{
    if (w->fd >= 0)
        close(w->fd);
    w->fd = -1;
}

/* The fences pair up Dekker-style: either the consumer's drain after
 * tk_wake_clear() sees the producer's publish, or the producer's exchange
 * sees the cleared flag and writes the eventfd. */
void tk_wake_signal(struct tk_wake *w)
{
    if (w->local)
        return;
    FULL_FENCE();
    if (atomic_exchange_explicit(&w->pending, 1, memory_order_seq_cst) == 0)
        wake_write(w->fd);
}

void tk_wake_clear(struct tk_wake *w)
{
    atomic_store_explicit(&w->pending, 0, memory_order_seq_cst);
    FULL_FENCE();
}
