/* Bounded single-producer single-consumer message rings between threads,
 * and the eventfd wakeup that goes with them.
 *
 * A ring carries variable-length messages (a u32 header plus payload, padded
 * to 8 bytes) in a power-of-two byte buffer. One thread writes, one reads;
 * the only shared state is two cache-line separated indices. A full ring
 * never grows: tk_ring_reserve() returns NULL and the producer pushes back.
 *
 * A producer whose outbox overflowed may sleep on its own tk_wake: it asks
 * for space through the ring's want_space flag (tk_outbox_set_producer()),
 * and the consumer, after freeing space, writes the producer's eventfd. The
 * flag is read once per drained batch, so the common case costs one fence
 * per batch and no syscall; the eventfd is written only while a producer
 * actually waits.
 */
#ifndef TK_NET_RING_H
#define TK_NET_RING_H

#include <stdatomic.h>
#include <string.h>

#include "core/tk.h"

struct tk_wake;

struct tk_ring {
    _Alignas(64) _Atomic uint64_t head; /* written by the producer */
    uint64_t cached_tail;               /* producer's copy of tail */
    _Alignas(64) _Atomic uint64_t tail; /* written by the consumer */
    uint64_t cached_head;               /* consumer's copy of head */
    bool freed;                         /* consumer: popped since the last want_space check */
    _Alignas(64) uint8_t *buf;
    uint64_t mask;
    uint64_t pending; /* producer: bytes reserved, not yet published */
    /* Its own line: written only when a producer starts or stops waiting
     * for space, so the per-message index traffic never touches it. */
    _Alignas(64) _Atomic uint32_t want_space; /* producer waits for the consumer to free space */
    /* The producer's own wakeup, written by the consumer when it frees
     * space while want_space is set. Set before the producer first sets
     * want_space (tk_outbox_set_producer()); the consumer reads it only
     * after it saw want_space set, which orders the two. NULL: the
     * producer never sleeps on a full ring (it polls, as before). */
    struct tk_wake *producer_wake;
};

/* Ring sizes from tk_ring_bytes_for(): the largest, for few threads, is the
 * 1 MiB every ring used to get; the smallest still carries every message
 * (a payload may use a quarter of the ring, 16 KiB at the minimum, and
 * TK_MSG_ENCODED_MAX of core/msg.h is under 1 KiB: ring.c asserts it). */
#define TK_RING_BYTES_MAX (1u << 20)
#define TK_RING_BYTES_MIN (64u << 10)
/* Memory the rings of a whole server aim at: n workers have n*(n-1)
 * worker-to-worker rings plus n to and n from the Raft thread. */
#define TK_RING_BUDGET_BYTES (128u << 20)
/* The largest payload a ring of any size from tk_ring_bytes_for() accepts. */
#define TK_RING_MSG_MAX (TK_RING_BYTES_MIN / 4u - 8u)

/* Bytes per ring for a server of nthreads workers (each pair of workers and
 * each worker and the Raft thread, n*(n+1) rings): the largest power of two
 * in [TK_RING_BYTES_MIN, TK_RING_BYTES_MAX] at which all rings together
 * stay within TK_RING_BUDGET_BYTES, or TK_RING_BYTES_MIN if none does. So
 * up to 10 workers keep 1 MiB rings (at most 110 MiB), 16 workers get
 * 256 KiB (68 MiB), 32 get 64 KiB (66 MiB), and the floor only exceeds the
 * budget from 45 workers on: 64 (TK_WORKERS_MAX) use 4160 * 64 KiB =
 * 260 MiB, not the 4 GiB of 1 MiB rings. A smaller ring only means the
 * outbox overflows sooner; with the producer wakeup that costs a copy,
 * not a stall. */
size_t tk_ring_bytes_for(uint32_t nthreads);

/* Header of every message. len is the payload length; the record occupies
 * 8 + round8(len) bytes. kind 0 marks padding up to the end of the buffer. */
struct tk_ring_msg {
    uint32_t len;
    uint32_t kind;
    uint8_t data[];
};

/* cap_bytes must be a power of two >= 4096. Returns TK_OK or TK_ENOMEM. */
int tk_ring_init(struct tk_ring *r, size_t cap_bytes);
void tk_ring_free(struct tk_ring *r);

/* Producer: reserves room for a message of len payload bytes and returns a
 * pointer to its payload, or NULL if the ring is full. Reservations become
 * visible to the consumer only at tk_ring_publish(), so a producer can
 * batch many messages behind one release store. */
void *tk_ring_reserve(struct tk_ring *r, uint32_t kind, uint32_t len);
void tk_ring_publish(struct tk_ring *r);

/* Consumer: the next message or NULL when empty. tk_ring_pop() releases it
 * (the memory may be reused by the producer at once). When tk_ring_peek()
 * finds the ring empty after pops, it does what tk_ring_pop_done() does, so
 * a consumer that drains to empty needs no other call. */
const struct tk_ring_msg *tk_ring_peek(struct tk_ring *r);
void tk_ring_pop(struct tk_ring *r, const struct tk_ring_msg *m);
/* Consumer: ends a batch of pops. If the producer waits for space
 * (want_space), wakes it through its eventfd (one write per wait). Cheap
 * when nothing was popped or nobody waits: call it after every drain loop
 * that may stop before the ring is empty. */
void tk_ring_pop_done(struct tk_ring *r);

/* Bytes in use, for metrics (approximate across threads). */
uint64_t tk_ring_used(struct tk_ring *r);

/* A producer's side of a ring plus an overflow list, so that a full ring
 * never drops a message. While anything waits in overflow the producer
 * pushes back on its own sources (a worker stops parsing client input). */
struct tk_outbox {
    struct tk_ring *ring;
    struct tk_wake *wake;
    struct tk_ovf *head, *tail;
    uint64_t queued;     /* messages in overflow */
    uint64_t limit;      /* bound on queued: the producer's own bounds imply it */
    uint64_t full_count; /* times the ring was found full */
    bool touched;        /* something reserved since the last flush */
    bool unsignaled;     /* published by tk_outbox_flush_quiet(), consumer not woken yet */
};
/* limit: the most messages that can ever wait in overflow, derived by the
 * producer from its own bounds (requests in flight, keys, log entries);
 * exceeding it means a bound is broken, so it panics. */
void tk_outbox_init(struct tk_outbox *o,
                    struct tk_ring *ring,
                    struct tk_wake *wake,
                    uint64_t limit);
/* self: the producer's own wakeup, which the consumer writes when it frees
 * space while this outbox holds overflow, so a producer that sleeps on self
 * resumes as soon as the ring has room (not at its next timer). Call after
 * tk_outbox_init() and before the producer thread first flushes; without
 * it the producer only retries when it runs anyway. */
void tk_outbox_set_producer(struct tk_outbox *o, struct tk_wake *self);
/* Room for one message of len payload bytes: in the ring, or in overflow. */
void *tk_outbox_put(struct tk_outbox *o, uint32_t kind, uint32_t len);
/* Moves overflow into the ring as room allows, publishes, wakes the consumer.
 * If overflow remains and a producer wake is set, asks the consumer to
 * write it once space is freed. */
void tk_outbox_flush(struct tk_outbox *o);
/* Like tk_outbox_flush(), but publishes without waking the consumer: the
 * messages wait until the consumer runs anyway or the next
 * tk_outbox_flush() wakes it. For messages nobody waits on (a follower's
 * committed commands), so that a busy stream costs no wakeup per batch. */
void tk_outbox_flush_quiet(struct tk_outbox *o);
static inline bool tk_outbox_busy(const struct tk_outbox *o)
{
    return o->head != NULL;
}
void tk_outbox_free(struct tk_outbox *o);

/* A thread's wakeup: an eventfd plus a flag so that many producers wake a
 * busy consumer at most once per round. */
struct tk_wake {
    int fd;
    _Atomic int pending;
    bool local; /* the consumer is the producer's own thread: signal is a no-op */
};
int tk_wake_init(struct tk_wake *w);
/* A wakeup for a consumer on the producer's thread: no eventfd. */
void tk_wake_init_local(struct tk_wake *w);
void tk_wake_close(struct tk_wake *w);
/* Producer side: after publishing, wake the consumer (cheap if already woken). */
void tk_wake_signal(struct tk_wake *w);
/* Consumer side: call before draining the rings; after it, any new publish
 * signals again. */
void tk_wake_clear(struct tk_wake *w);

#endif
