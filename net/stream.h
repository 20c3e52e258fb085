/* One byte stream over a socket, shared by the client connections of the
 * workers (net/conn.c) and the peer links of the Raft thread (net/peer.c):
 * its buffers, the plain and TLS transforms between the socket's bytes and
 * the plaintext the layers above read and write, the name of the other
 * end, the io_uring operations, the handshake deadlines with the budget of
 * unauthenticated streams, and rate-limited failure lines.
 *
 * The transform is an operations table, like Redis's ConnectionType:
 * tk_stream_plain passes bytes through; tk_stream_tls runs them through
 * core/tls.h (wolfSSL over memory). The caller does the I/O (its own
 * io_uring): received bytes go in through type->input, which appends the
 * plaintext they complete to s->in; what the layer above appended to
 * s->out leaves through type->output into s->snd, the bytes a send hands
 * the kernel. Line framing (client port) and frame reassembly (peer port)
 * sit above and see only plaintext.
 *
 * Memory: a stream is embedded in its connection and owned by the one
 * thread that runs that connection; its buffers grow by doubling and are
 * kept while the connection slot lives, so steady traffic allocates
 * nothing.
 */
#ifndef TK_NET_STREAM_H
#define TK_NET_STREAM_H

#include <string.h>

#include "core/tk.h"

struct tk_tls;

/* The operations of both io_uring loops, packed into user_data with a
 * slot and a generation (tk_ref_pack). Each loop uses some of them. */
enum tk_op {
    OP_ACCEPT = 1,
    OP_CONNECT,
    OP_RECV,
    OP_SEND,
    OP_WAKE,
    OP_TIMEOUT,
    OP_CANCEL,
    OP_POLL,
    OP_RAFT,
};

static inline uint64_t tk_ud(enum tk_op op, uint32_t slot, uint32_t gen)
{
    return tk_ref_pack((uint32_t)op, slot, gen);
}

/* A growable byte buffer: len bytes used of cap. */
struct tk_sbuf {
    char *p;
    uint32_t len, cap;
};

/* Room for extra more bytes (the capacity doubles, from 4 KiB). */
void tk_sbuf_grow(struct tk_sbuf *b, size_t extra);
static inline void tk_sbuf_reserve(struct tk_sbuf *b, size_t extra)
{
    if (b->len + extra > b->cap)
        tk_sbuf_grow(b, extra);
}
void tk_sbuf_free(struct tk_sbuf *b);

struct tk_stream;

struct tk_stream_type {
    /* n bytes from the socket; data may be the free tail of s->in, where
     * a recv put them. The plaintext they complete is appended to s->in.
     * in_max bounds s->in (0: no bound here), overshot by one TLS record
     * at most. TK_OK; TK_EFULL over in_max; TK_ECLOSED when the other end
     * closed cleanly (TLS close_notify); another code when the stream is
     * broken (tk_tls_error names the cause). */
    int (*input)(struct tk_stream *s, const char *data, size_t n, size_t in_max);
    /* s->snd is empty: moves what s->out holds (and, with TLS, every
     * message TLS has pending, its own handshake included) into s->snd.
     * Not TK_OK: TLS could not take the plaintext (s->out is dropped, and
     * what TLS had pending stays there: call again to take it). */
    int (*output)(struct tk_stream *s);
    /* Bytes held beneath s->out: ciphertext TLS has not handed over. */
    size_t (*pending)(const struct tk_stream *s);
    /* The other end is gone: s->out and what is pending are dropped. */
    void (*discard)(struct tk_stream *s);
};

extern const struct tk_stream_type tk_stream_plain, tk_stream_tls;

/* The calling thread runs TLS (it is about to make a tk_tls): what
 * wolfSSL keeps per thread is freed when the thread exits. Cheap after
 * the first call. */
void tk_stream_tls_thread(void);

struct tk_stream {
    int fd;
    const struct tk_stream_type *type;
    struct tk_tls *tls; /* tk_stream_tls only; NULL when plain */
    struct tk_sbuf in;  /* received plaintext, not yet parsed */
    struct tk_sbuf out; /* plaintext written, not yet handed to output */
    struct tk_sbuf snd; /* bytes being sent (ciphertext with TLS); snd_off done */
    uint32_t snd_off;
};

/* A stream over fd, with TLS when tls is not NULL (the stream owns it
 * from now on). Buffers kept from an earlier use of s are reused. */
void tk_stream_open(struct tk_stream *s, int fd, struct tk_tls *tls);
/* Frees the TLS state (fd is the caller's to close) and empties the
 * buffers; they are kept for the next tk_stream_open. */
void tk_stream_reset(struct tk_stream *s);
/* tk_stream_reset, and the buffers freed too. */
void tk_stream_free(struct tk_stream *s);

/* Appends n bytes of plaintext to s->out. Inline: the client port calls
 * it for every answer. */
static inline void tk_stream_write(struct tk_stream *s, const void *data, size_t n)
{
    tk_sbuf_reserve(&s->out, n);
    memcpy(s->out.p + s->out.len, data, n);
    s->out.len += (uint32_t)n;
}
/* Output not yet handed to the kernel, plaintext or ciphertext. */
bool tk_stream_has_output(const struct tk_stream *s);
/* Bytes of s->snd not yet sent. */
static inline uint32_t tk_stream_unsent(const struct tk_stream *s)
{
    return s->snd.len - s->snd_off;
}
/* A send of n bytes of s->snd completed. */
void tk_stream_sent(struct tk_stream *s, size_t n);
/* What lies pending beneath s->out (with TLS: an alert) straight to the
 * socket, best effort and without blocking, for a stream about to close,
 * so that the other end learns why rather than only that it ended. Not
 * while a send is in flight (the bytes would be reordered). */
void tk_stream_push_now(struct tk_stream *s, bool send_inflight);

/* "host:port" ("[v6]:port") of the other end of socket fd, for log lines;
 * a sentence when it is unknown. Returns buf. */
#define TK_STREAM_NAME_MAX 64
const char *tk_stream_peer_name(int fd, char *buf, size_t cap);

/* Failure lines of one kind, at most burst per window (a scan of a port
 * must not flood the log). Owned by one thread. */
struct tk_stream_log {
    uint64_t window_us; /* start of the current window, 0 before the first */
    uint32_t logged, unlogged;
};
/* Whether one more line may be written now; if so, *unlogged is how many
 * were held back since the last one written (the caller says so). */
bool tk_stream_log_take(struct tk_stream_log *ll,
                        uint64_t now_us,
                        uint64_t window_us,
                        uint32_t burst,
                        uint32_t *unlogged);

/* Handshake deadlines of a table of streams, in the order they began, and
 * the budget of streams that have not authenticated: when it is full the
 * oldest goes, so a flood of sockets that never authenticate can neither
 * take the slots of authenticated ones nor hold the handshake slots
 * against new ones. Entries name a stream by slot and generation; the
 * owner says through live() which still handshake (the others are
 * dropped as met). The queue holds cap entries, at least the table's
 * slots. */
struct tk_deadline {
    uint32_t slot, gen;
    uint64_t at_us;
};
struct tk_deadlines {
    struct tk_deadline *q;
    uint32_t head, len, cap;
    void *ctx;
    bool (*live)(void *ctx, uint32_t slot, uint32_t gen);
};
int tk_deadlines_init(struct tk_deadlines *d,
                      uint32_t cap,
                      void *ctx,
                      bool (*live)(void *ctx, uint32_t slot, uint32_t gen));
void tk_deadlines_free(struct tk_deadlines *d);
/* The stream slot/gen began its handshake, which must end by at_us. At
 * most cap live entries at once. */
void tk_deadlines_push(struct tk_deadlines *d, uint32_t slot, uint32_t gen, uint64_t at_us);
/* The oldest deadline queued (perhaps of a stream that finished since):
 * false if none. */
bool tk_deadlines_next(const struct tk_deadlines *d, uint64_t *at_us);
/* Calls expire() for every live stream whose deadline passed, oldest
 * first; the entry is dropped. expire() must end the handshake. */
void tk_deadlines_expire(struct tk_deadlines *d,
                         uint64_t now_us,
                         void (*expire)(void *ctx, uint32_t slot, uint32_t gen));
/* handshaking streams count towards the budget and are at or over it:
 * offers the oldest live ones to evict() until the count is under.
 * evict() ends the handshake of a stream that counts (true), or leaves
 * one that does not count alone (false). */
void tk_deadlines_budget(struct tk_deadlines *d,
                         uint32_t handshaking,
                         uint32_t budget,
                         bool (*evict)(void *ctx, uint32_t slot, uint32_t gen));

#endif
