/* io_uring helpers both loops use (the workers' and the Raft thread's
 * peer ring): a submission entry that is always there, and the provided
 * buffer ring the workers' multishot recvs take their buffers from.
 * Header only; each ring belongs to the one thread that made it. */
#ifndef TK_NET_URING_H
#define TK_NET_URING_H

#include <liburing.h>

#include "core/tk.h"

/* A free SQE: when the SQ is full, what is queued is submitted first. */
static inline struct io_uring_sqe *tk_uring_sqe(struct io_uring *ring)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
    if (!sqe) {
        io_uring_submit(ring);
        sqe = io_uring_get_sqe(ring);
    }
    TK_ASSERT(sqe != NULL);
    return sqe;
}

/* The provided recv buffers of a worker's ring (group 0): count buffers
 * of size bytes each, one block of memory. */
#define TK_BUFRING_COUNT 512 /* power of two */
#define TK_BUFRING_SIZE 8192
_Static_assert((TK_BUFRING_COUNT & (TK_BUFRING_COUNT - 1)) == 0, "a power of two");

/* The buffer a recv CQE names (IORING_CQE_F_BUFFER set). */
static inline char *tk_bufring_data(char *bufs, uint32_t bid)
{
    TK_ASSERT(bid < TK_BUFRING_COUNT);
    return bufs + (size_t)bid * TK_BUFRING_SIZE;
}

/* Gives buffer bid back to the kernel once its bytes were taken. */
static inline void tk_bufring_recycle(struct io_uring_buf_ring *br, char *bufs, uint32_t bid)
{
    io_uring_buf_ring_add(br, tk_bufring_data(bufs, bid), TK_BUFRING_SIZE, (unsigned short)bid,
                          io_uring_buf_ring_mask(TK_BUFRING_COUNT), 0);
    io_uring_buf_ring_advance(br, 1);
}

#endif
