/* The connection code every connection of client/ shares: the socket a
 * connection to a server is made on, the line finder, the TLS record
 * bytes that tell a TLS server from a plaintext one, and a short blocking
 * stream over them (TCP, TLS through core/tls.h, lines and bytes, all
 * within a deadline) for ticketctl's one-shot exchanges such as
 * remove-member.
 *
 * libticketing's connections (conn.c) run non-blocking inside the I/O
 * thread's epoll loop, so they share the socket, the line finder and the
 * record bytes, not the blocking calls: a request's path takes no extra
 * call or allocation for it.
 *
 * Memory: a struct cl_stream and its input buffer are the caller's; the
 * stream owns its socket and TLS session until cl_stream_close(). One
 * thread per stream.
 */
#ifndef TK_CLIENT_STREAM_H
#define TK_CLIENT_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/tls.h"

/* The first byte of a TLS record (RFC 8446 5.1): a TLS server answers a
 * ClientHello with a handshake record, or refuses it with an alert; any
 * other first byte is a plaintext server. */
#define CL_TLS_RECORD_ALERT 0x15
#define CL_TLS_RECORD_HANDSHAKE 0x16

/* A non-blocking, close-on-exec TCP socket of family, with the options
 * every connection to a server has: TCP_NODELAY (small lines leave at
 * once) and keepalive (a dead peer is noticed with nothing in flight).
 * The fd, or -1 with errno set. */
int cl_socket_open(int family);

/* The error of a non-blocking connect() on fd once it is writable: 0 if
 * it connected, else an errno value. */
int cl_socket_error(int fd);

/* The next line of the len bytes at p: 1 with *line_len set (the '\n' not
 * counted) if a '\n' is among the first max bytes, 0 if more bytes may
 * complete it, -1 if max bytes came without one (a line too long).
 * Inline: libticketing runs it on every answer. */
static inline int cl_line_next(const void *p, size_t len, size_t max, size_t *line_len)
{
    const char *nl = memchr(p, '\n', len < max ? len : max);
    if (nl != NULL) {
        *line_len = (size_t)(nl - (const char *)p);
        return 1;
    }
    return len >= max ? -1 : 0;
}

/* What a blocking read gave when it gave no bytes. */
enum {
    CL_STREAM_CLOSED = 0,   /* the server closed (read_more only) */
    CL_STREAM_TIMEOUT = -1, /* the deadline passed, or the socket failed (read_line:
                               or the server closed) */
    CL_STREAM_FULL = -2,    /* the input buffer is full (read_line: no line end in max) */
    CL_STREAM_TLS = -3,     /* TLS failed: cl_stream.tls_why says why */
    CL_STREAM_PLAIN = -4,   /* TLS was asked, the server answered in plaintext */
};

struct cl_stream {
    int fd;               /* -1: closed */
    struct tk_tls *tls;   /* NULL: plaintext */
    uint64_t deadline_us; /* every call gives up then (tk_client_now_us's clock) */
    uint8_t *in;          /* plaintext received, not consumed: the caller's buffer */
    size_t in_cap;
    size_t in_len;
    bool tls_seen;       /* the first byte under TLS was looked at */
    const char *tls_why; /* after CL_STREAM_TLS */
};

/* A closed stream over the caller's input buffer. */
void cl_stream_init(struct cl_stream *s, uint8_t *in, size_t in_cap);

/* Connects to host:port (looked up, every address tried in turn) before
 * s->deadline_us. true, or false when no address answered in time. */
bool cl_stream_dial(struct cl_stream *s, const char *host, unsigned port);

/* Runs the stream inside TLS from now on: a session of ctx (its CA,
 * certificate and key) that checks server_name, which also goes out as
 * SNI. false on allocation failure. cl_stream_tls_hello() then sends the
 * ClientHello: false if TLS could not start (tk_tls_error(s->tls)). */
bool cl_stream_tls(struct cl_stream *s, struct tk_tls_ctx *ctx, const char *server_name);
bool cl_stream_tls_hello(struct cl_stream *s);

/* Sends all n bytes (through TLS if on) before the deadline: false if
 * they could not all go (part of them may have). */
bool cl_stream_send(struct cl_stream *s, const void *buf, size_t n);

/* More plaintext into s->in: the bytes added (> 0), or one of
 * CL_STREAM_CLOSED .. CL_STREAM_PLAIN. */
int cl_stream_read_more(struct cl_stream *s);

/* One line of at most max bytes before its '\n' (max < s->in_cap) into
 * line (max + 1 bytes: NUL-terminated, without the '\n'), consumed: its
 * length (>= 0), CL_STREAM_FULL if max bytes came without a line end,
 * CL_STREAM_TIMEOUT if none came in time or the server closed, or
 * CL_STREAM_TLS / CL_STREAM_PLAIN. */
int cl_stream_read_line(struct cl_stream *s, char *line, size_t max);

/* Drops the first n bytes of s->in (n <= s->in_len). */
void cl_stream_consume(struct cl_stream *s, size_t n);

/* Closes the socket and frees the TLS session; the stream may dial again. */
void cl_stream_close(struct cl_stream *s);

#endif
