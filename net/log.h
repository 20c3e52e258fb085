/* ticketingd's log (net/log.c): one event per line on stderr, written with
 * one write() so lines from several threads never interleave, as text or
 * as JSON (docs/logging.md), and a rate limiter for events that a remote
 * peer can cause at will (failed logins).
 *
 * tk_log_init runs once, before any thread starts; after that every
 * function here may be called from any thread. */
#ifndef TK_NET_LOG_H
#define TK_NET_LOG_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

enum { TK_LOG_ERROR, TK_LOG_WARN, TK_LOG_INFO, TK_LOG_DEBUG };
enum { TK_LOG_TEXT, TK_LOG_JSON };

/* The longest line, "\n" included; a longer message is cut and ends in
 * "...". */
#define TK_LOG_LINE_MAX 1024

void tk_log_init(int level, int format, uint64_t node_id);
void tk_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* One log line, "\n" included, into out (cap at least 128 bytes; at most
 * TK_LOG_LINE_MAX bytes are used); returns its length. msg is len bytes of
 * any content: in JSON, quotes, backslashes and control bytes are escaped
 * and bytes that are not UTF-8 become U+FFFD, so the line is always one
 * valid JSON object; in text, control bytes are written as \xNN, so the
 * event stays on one line. */
size_t tk_log_format_line(char *out,
                          size_t cap,
                          int format,
                          uint64_t wall_us,
                          int level,
                          uint64_t node_id,
                          const char *msg,
                          size_t len);

/* At most TK_LOG_LIMIT_BURST lines per TK_LOG_LIMIT_WINDOW_US for one
 * kind of event; the lines over the limit are counted, and the next line
 * written ends in " (N more since last line)". Thread-safe: one limiter
 * may be shared by every thread that reports that kind of event. */
#define TK_LOG_LIMIT_BURST 5
#define TK_LOG_LIMIT_WINDOW_US 1000000u
struct tk_log_limit {
    pthread_mutex_t lock;
    uint64_t window_start_us;
    uint32_t lines;      /* written in the current window */
    uint64_t suppressed; /* not written since the last line that was */
};
#define TK_LOG_LIMIT_INIT                 \
    {                                     \
        .lock = PTHREAD_MUTEX_INITIALIZER \
    }
void tk_log_limited(struct tk_log_limit *ll, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
