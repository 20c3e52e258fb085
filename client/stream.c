/* The connection code client/ shares (see stream.h): the socket setup and
 * the line finder under libticketing's connections, and ticketctl's
 * blocking stream, which waits in poll() for each step until the
 * stream's deadline.
 */
#include "client/stream.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

#include "client/ticketing.h"
#include "core/tk.h"

#define STREAM_KEEPIDLE_S 10
#define STREAM_KEEPINTVL_S 3
#define STREAM_KEEPCNT 3
#define STREAM_RECV_SIZE 16384 /* ciphertext read per recv() */

int cl_socket_open(int family)
{
    int one = 1;
    int idle = STREAM_KEEPIDLE_S, intvl = STREAM_KEEPINTVL_S, cnt = STREAM_KEEPCNT;
    int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
    return fd;
}

int cl_socket_error(int fd)
{
    int err = 0;
    socklen_t len = sizeof err;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
        err = errno;
    return err;
}

/* ---- the blocking stream ------------------------------------------------------- */

/* Milliseconds left before the deadline (0 once it has passed). */
static int stream_left_ms(const struct cl_stream *s)
{
    uint64_t now = tk_client_now_us();
    return now >= s->deadline_us ? 0 : (int)((s->deadline_us - now + 999u) / 1000u);
}

/* Waits until fd is ready for events: false at the deadline. */
static bool stream_wait(const struct cl_stream *s, short events)
{
    struct pollfd p = {.fd = s->fd, .events = events};
    int ms = stream_left_ms(s);
    return ms > 0 && poll(&p, 1, ms) == 1;
}

void cl_stream_init(struct cl_stream *s, uint8_t *in, size_t in_cap)
{
    *s = (struct cl_stream){.fd = -1, .in = in, .in_cap = in_cap};
}

bool cl_stream_dial(struct cl_stream *s, const char *host, unsigned port)
{
    char ps[8];
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    TK_ASSERT(s->fd < 0);
    snprintf(ps, sizeof ps, "%u", port);
    if (getaddrinfo(host, ps, &hints, &res) != 0 || res == NULL)
        return false;
    for (struct addrinfo *a = res; a != NULL && s->fd < 0 && stream_left_ms(s) > 0;
         a = a->ai_next) {
        s->fd = cl_socket_open(a->ai_family);
        if (s->fd < 0)
            continue;
        if ((connect(s->fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) ||
            !stream_wait(s, POLLOUT) || cl_socket_error(s->fd) != 0) {
            close(s->fd);
            s->fd = -1;
        }
    }
    freeaddrinfo(res);
    s->in_len = 0;
    return s->fd >= 0;
}

static bool stream_send_raw(const struct cl_stream *s, const void *buf, size_t n)
{
    const uint8_t *p = buf;
    while (n > 0) {
        if (!stream_wait(s, POLLOUT))
            return false;
        ssize_t w = send(s->fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (w <= 0)
            return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

/* Sends what TLS has pending (handshake messages, records). */
static bool stream_tls_flush(const struct cl_stream *s)
{
    size_t n = 0;
    const uint8_t *c = tk_tls_pending(s->tls, &n);
    if (n == 0)
        return true;
    bool ok = stream_send_raw(s, c, n);
    tk_tls_sent(s->tls, n);
    return ok;
}

bool cl_stream_tls(struct cl_stream *s, struct tk_tls_ctx *ctx, const char *server_name)
{
    TK_ASSERT(s->tls == NULL);
    s->tls_seen = false;
    s->tls = tk_tls_new(ctx, server_name);
    return s->tls != NULL;
}

bool cl_stream_tls_hello(struct cl_stream *s)
{
    char none[1];
    size_t got = 0;
    return tk_tls_read(s->tls, none, 0, &got) == TK_OK && stream_tls_flush(s);
}

bool cl_stream_send(struct cl_stream *s, const void *buf, size_t n)
{
    if (s->tls == NULL)
        return stream_send_raw(s, buf, n);
    return tk_tls_write(s->tls, buf, n) == TK_OK && stream_tls_flush(s);
}

/* Bytes received under TLS: plaintext into s->in, the handshake driven
 * (its answers sent). The plaintext bytes (>= 0), or CL_STREAM_TLS /
 * CL_STREAM_PLAIN. */
static int stream_tls_take(struct cl_stream *s, const uint8_t *data, size_t n)
{
    if (!s->tls_seen) {
        s->tls_seen = true;
        if (data[0] != CL_TLS_RECORD_HANDSHAKE)
            return CL_STREAM_PLAIN;
    }
    size_t got = 0;
    int rc = tk_tls_feed(s->tls, data, n);
    if (rc == TK_OK)
        rc = tk_tls_read(s->tls, s->in + s->in_len, s->in_cap - s->in_len, &got);
    if (rc == TK_OK && !stream_tls_flush(s))
        rc = TK_EIO;
    if (rc != TK_OK) {
        s->tls_why = rc == TK_EIO ? "could not send" : tk_tls_error(s->tls);
        return CL_STREAM_TLS;
    }
    s->in_len += got;
    return (int)got;
}

int cl_stream_read_more(struct cl_stream *s)
{
    if (s->in_len == s->in_cap)
        return CL_STREAM_FULL;
    for (;;) {
        if (!stream_wait(s, POLLIN))
            return CL_STREAM_TIMEOUT;
        uint8_t raw[STREAM_RECV_SIZE];
        uint8_t *dst = s->tls ? raw : s->in + s->in_len;
        size_t cap = s->tls ? sizeof raw : s->in_cap - s->in_len;
        ssize_t got = recv(s->fd, dst, cap, 0);
        if (got < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (got <= 0)
            return got == 0 ? CL_STREAM_CLOSED : CL_STREAM_TIMEOUT;
        if (s->tls == NULL) {
            s->in_len += (size_t)got;
            return (int)got;
        }
        int n = stream_tls_take(s, raw, (size_t)got);
        if (n != 0)
            return n;
    }
}

void cl_stream_consume(struct cl_stream *s, size_t n)
{
    TK_ASSERT(n <= s->in_len);
    memmove(s->in, s->in + n, s->in_len - n);
    s->in_len -= n;
}

int cl_stream_read_line(struct cl_stream *s, char *line, size_t max)
{
    TK_ASSERT(max < s->in_cap);
    for (;;) {
        size_t len = 0;
        int found = cl_line_next(s->in, s->in_len, max, &len);
        if (found > 0) {
            memcpy(line, s->in, len);
            line[len] = '\0';
            cl_stream_consume(s, len + 1);
            return (int)len;
        }
        if (found < 0)
            return CL_STREAM_FULL;
        int got = cl_stream_read_more(s);
        if (got == CL_STREAM_TLS || got == CL_STREAM_PLAIN)
            return got;
        if (got <= 0)
            return CL_STREAM_TIMEOUT;
    }
}

void cl_stream_close(struct cl_stream *s)
{
    tk_tls_free(s->tls);
    s->tls = NULL;
    if (s->fd >= 0)
        close(s->fd);
    s->fd = -1;
    s->in_len = 0;
}
