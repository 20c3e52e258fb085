/* Logging, clocks and listening sockets: the small I/O helpers every
 * thread of ticketingd uses. */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "net/server.h"

static int log_level = TK_LOG_INFO;
static uint64_t log_node;

void tk_log_init(int level, uint64_t node_id)
{
    log_level = level;
    log_node = node_id;
}

void tk_accept_done(struct tk_accept *a, int res, bool more, uint64_t now_us, const char *what)
{
    if (res >= 0 || res == -ECANCELED) {
        a->backoff_us = 0;
    } else {
        a->errors++;
        if (a->backoff_us == 0)
            tk_log(TK_LOG_WARN, "%s: accept failed: %s; retrying with backoff", what,
                   strerror(-res));
        a->backoff_us = TK_MIN(TK_MAX(a->backoff_us * 2, 10000u), 1000000u);
    }
    if (!more) {
        a->armed = false;
        a->retry_at_us = res < 0 && res != -ECANCELED ? now_us + a->backoff_us : now_us;
    }
}

const char *tk_wall_str(uint64_t wall_us, char *buf, size_t cap)
{
    time_t sec = (time_t)(wall_us / 1000000u);
    struct tm tm;
    gmtime_r(&sec, &tm);
    snprintf(buf, cap, "%04d-%02d-%02dT%02d:%02d:%02dZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
    return buf;
}

void tk_log(int level, const char *fmt, ...)
{
    if (level > log_level)
        return;
    static const char *const names[] = {"error", "warn", "info", "debug"};
    char line[1024];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof(line), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s node=%016llx ",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     ts.tv_nsec / 1000000, names[level], (unsigned long long)log_node);
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m < 0 ? 0 : TK_MIN((size_t)m, sizeof(line) - (size_t)n - 2));
    line[len++] = '\n';
    /* One write per line keeps lines whole across threads. */
    ssize_t w = write(2, line, len);
    (void)w;
}

uint64_t tk_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

uint64_t tk_wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

int tk_listen(const char *host, uint32_t port, bool reuseport)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    char portstr[16];
    snprintf(portstr, sizeof(portstr), "%u", port);
    if (getaddrinfo(host, portstr, &hints, &res) != 0 || !res)
        return -1;
    /* A process restarted at once (a member coming back) may find its
     * predecessor's listener not yet released: the kernel frees a socket
     * that an io_uring accept held a moment after that process is gone.
     * Retry EADDRINUSE for up to 5 s rather than fail the restart. */
    int fd = -1;
    for (int attempt = 0; attempt < 100; attempt++) {
        fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
            break;
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (reuseport)
            setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
        if (bind(fd, res->ai_addr, res->ai_addrlen) == 0 && listen(fd, 4096) == 0)
            break;
        int err = errno;
        close(fd);
        fd = -1;
        if (err != EADDRINUSE)
            break;
        if (attempt == 0)
            tk_log(TK_LOG_WARN, "port %u still in use; retrying for up to 5 s", port);
        struct timespec pause = {.tv_sec = 0, .tv_nsec = 50 * 1000 * 1000};
        nanosleep(&pause, NULL);
    }
    freeaddrinfo(res);
    return fd;
}
