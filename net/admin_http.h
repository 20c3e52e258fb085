/* The admin listener's HTTP request parsing (net/admin.c), kept apart from
 * its sockets so that it can be tested and fuzzed on its own.
 *
 * Pure: no I/O, no allocation. A request is the bytes received so far,
 * (req, len); like the C string functions the listener used before, both
 * functions stop at the first NUL byte, and nothing past len is read.
 */
#ifndef TK_NET_ADMIN_HTTP_H
#define TK_NET_ADMIN_HTTP_H

#include <stdbool.h>
#include <stddef.h>

/* What the listener answers. */
enum tk_admin_route {
    TK_ADMIN_BAD_REQUEST = 0, /* 400: no method and path */
    TK_ADMIN_BAD_METHOD,      /* 405: neither GET nor HEAD */
    TK_ADMIN_HEALTHZ,         /* 200 */
    TK_ADMIN_READYZ,          /* 200 or 503 */
    TK_ADMIN_STATUS,          /* 200, JSON */
    TK_ADMIN_MEMBERS,         /* 200, JSON */
    TK_ADMIN_METRICS,         /* 200, Prometheus text */
    TK_ADMIN_NOT_FOUND,       /* 404 */
};

/* True once the request's head is complete: "\r\n\r\n" or "\n\n" occurs
 * before the first NUL. */
bool tk_admin_http_complete(const char *req, size_t len);

/* Parses the request line as `sscanf(req, "%7s %255s", method, path)` did:
 * after optional white space (" \t\n\v\f\r"), the method is at most 7
 * non-white bytes and the path the next run of at most 255 non-white bytes
 * (a longer method runs on into the path); the path ends at its first '?'.
 * Returns TK_ADMIN_BAD_REQUEST if there is no path; else sets *head_only
 * (method HEAD: answer without the body) and returns BAD_METHOD unless the
 * method is GET or HEAD, then the route of the path. *head_only is left
 * untouched on TK_ADMIN_BAD_REQUEST. */
enum tk_admin_route tk_admin_http_parse(const char *req, size_t len, bool *head_only);

#endif
