/* Bounded single-producer single-consumer message rings between threads,
 * and the eventfd wakeup that goes with them.
 *
 * A ring carries variable-length messages (a u32 header plus payload, padded
 * to 8 bytes) in a power-of-two byte buffer. One thread writes, one reads;
 * the only shared state is two cache-line separated indices. A full ring
 * never grows: tk_ring_reserve() returns NULL and the producer pushes back.
 */
#ifndef TK_NET_RING_H
#define TK_NET_RING_H

#include <stdatomic.h>
#include <string.h>

#include "core/tk.h"

struct tk_ring {
    _Alignas(64) _Atomic uint64_t head; /* written by the producer */
    uint64_t cached_tail;               /* producer's copy of tail */
    _Alignas(64) _Atomic uint64_t tail; /* written by the consumer */
    uint64_t cached_head;               /* consumer's copy of head */
    _Alignas(64) uint8_t *buf;
    uint64_t mask;
    uint64_t pending; /* producer: bytes reserved, not yet published */
};

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
 * (the memory may be reused by the producer at once). */
const struct tk_ring_msg *tk_ring_peek(struct tk_ring *r);
void tk_ring_pop(struct tk_ring *r, const struct tk_ring_msg *m);

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
    bool touched;        /* something published since the last flush */
};
/* limit: the most messages that can ever wait in overflow, derived by the
 * producer from its own bounds (requests in flight, keys, log entries);
 * exceeding it means a bound is broken, so it panics. */
void tk_outbox_init(struct tk_outbox *o,
                    struct tk_ring *ring,
                    struct tk_wake *wake,
                    uint64_t limit);
/* Room for one message of len payload bytes: in the ring, or in overflow. */
void *tk_outbox_put(struct tk_outbox *o, uint32_t kind, uint32_t len);
/* Moves overflow into the ring as room allows, publishes, wakes the consumer. */
void tk_outbox_flush(struct tk_outbox *o);
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
};
int tk_wake_init(struct tk_wake *w);
void tk_wake_close(struct tk_wake *w);
/* Producer side: after publishing, wake the consumer (cheap if already woken). */
void tk_wake_signal(struct tk_wake *w);
/* Consumer side: call before draining the rings; after it, any new publish
 * signals again. */
void tk_wake_clear(struct tk_wake *w);

#endif
