/* Regression tests for what the fuzz targets (tests/fuzz/) guard: the
 * snapshot blob check a follower runs before installing (core/snap.h) and
 * the admin listener's request parser (net/admin_http.h), which must
 * answer exactly as the sscanf()-based code it replaced.
 *
 * Inputs a fuzz target ever crashes on go here too, as plain cases, so the
 * normal test suite keeps them fixed without a fuzzer.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "core/snap.h"

/* The admin parser lives in net/, which unit tests do not link: it is pure,
 * so it is compiled into this test directly. */
#include "net/admin_http.c"

/* ---- snapshot blobs ------------------------------------------------------ */

#define T0 UINT64_C(1796284995487521)

static uint8_t blob[4096];
static const char *magic = TK_SNAP_MAGIC; /* the layout make() writes */

static struct tk_cmd grant(const char *key, uint64_t token)
{
    struct tk_cmd c;
    memset(&c, 0, sizeof(c));
    c.type = TK_CMD_GRANT;
    c.key_len = (uint8_t)strlen(key);
    memcpy(c.key, key, c.key_len);
    c.owner_len = 5;
    memcpy(c.owner, "alice", 5);
    c.lease_ms = 30000;
    c.token = token;
    return c;
}

/* Header with `count`, then the records; returns the blob's length. */
static size_t make(uint64_t count, const struct tk_cmd *c, size_t n)
{
    memcpy(blob, magic, 8);
    memcpy(blob + 8, &count, 8);
    size_t off = 16;
    for (size_t i = 0; i < n; i++) {
        size_t w = tk_cmd_encode(&c[i], blob + off + 4, sizeof(blob) - off - 4);
        cr_assert_gt(w, 0);
        uint32_t left = c[i].lease_ms / 2; /* what was left at the cut */
        memcpy(blob + off, &left, 4);
        off += 4 + w;
    }
    return off;
}

static void refused(size_t len, const char *what)
{
    uint64_t count = 99;
    const char *why = NULL;
    cr_assert_eq(tk_snap_check(blob, len, T0 + 100, &count, &why), TK_EPROTO, "%s", what);
    cr_assert_not_null(why, "%s", what);
    cr_assert_eq(count, 99, "%s: count untouched", what);
}

Test(snap, valid_blobs_pass_and_walk)
{
    struct tk_cmd c[3] = {grant("seat/7", T0), grant("show-42", T0 + 1), grant("inv", T0 + 9)};
    size_t len = make(3, c, 3);
    uint64_t count = 0;
    cr_assert_eq(tk_snap_check(blob, len, T0 + 10, &count, NULL), TK_OK);
    cr_assert_eq(count, 3);
    size_t pos = 0;
    uint64_t n = 0;
    cr_assert_eq(tk_snap_header(blob, len, &n, &pos), TK_OK);
    cr_assert_eq(n, 3);
    cr_assert_eq(pos, TK_SNAP_HEADER_LEN);
    for (int i = 0; i < 3; i++) {
        struct tk_cmd got;
        uint32_t left = 0;
        cr_assert_eq(tk_snap_next(blob, len, &pos, &got, &left), TK_OK);
        cr_assert_eq(left, c[i].lease_ms / 2);
        cr_assert_eq(got.token, c[i].token);
        cr_assert_eq(got.key_len, c[i].key_len);
        cr_assert_eq(memcmp(got.key, c[i].key, got.key_len), 0);
    }
    cr_assert_eq(pos, len);
    /* An empty table is a valid snapshot too. */
    cr_assert_eq(tk_snap_check(blob, make(0, NULL, 0), T0, &count, NULL), TK_OK);
    cr_assert_eq(count, 0);
}

Test(snap, malformed_blobs_are_refused)
{
    struct tk_cmd c[2] = {grant("a", T0), grant("b", T0 + 1)};
    size_t len = make(2, c, 2);

    refused(0, "empty");
    refused(15, "short header");
    blob[0] = 'X';
    refused(len, "bad magic");
    len = make(3, c, 2);
    refused(len, "count above the records");
    len = make(1, c, 2);
    refused(len, "count below the records (trailing record)");
    len = make(UINT64_MAX, c, 2);
    refused(len, "huge count");
    len = make(2, c, 2);
    blob[len] = 0;
    refused(len + 1, "a trailing byte");
    for (size_t cut = 17; cut < len; cut++)
        refused(cut, "truncated record");

    struct tk_cmd bad[2] = {grant("a", T0), grant("b", T0 + 1)};
    bad[1].type = TK_CMD_HANDOFF;
    bad[1].old_token = T0;
    refused(make(2, bad, 2), "a HANDOFF record");
    bad[1] = grant("b", 0);
    refused(make(2, bad, 2), "token 0");
    bad[1] = grant("b", T0);
    refused(make(2, bad, 2), "a repeated token");
    bad[1] = grant("b", T0 - 1);
    /* Any order in the current layout; token order in the previous one. */
    cr_assert_eq(tk_snap_check(blob, make(2, bad, 2), T0 + 100, NULL, NULL), TK_OK);
    magic = TK_SNAP_MAGIC_V2;
    refused(make(2, bad, 2), "tokens going down in a TKSNAP02 blob");
    bad[1] = grant("b", T0 + 1);
    cr_assert_eq(tk_snap_check(blob, make(2, bad, 2), T0 + 100, NULL, NULL), TK_OK);
    magic = TK_SNAP_MAGIC;
    bad[1] = grant("a", T0 + 1);
    refused(make(2, bad, 2), "a key listed twice");
    bad[1] = grant("b", T0 + 100);
    refused(make(2, bad, 2), "a token at the snapshot's fencing counter");

    /* A record whose bytes are not a command at all. */
    len = make(1, c, 1);
    blob[20] = 9; /* type */
    refused(len, "unknown command type");

    /* The lease left must be 1..lease_ms. */
    len = make(1, c, 1);
    memset(blob + 16, 0, 4);
    refused(len, "no lease left");
    uint32_t over = c[0].lease_ms + 1;
    memcpy(blob + 16, &over, 4);
    refused(len, "more lease left than the lease");
}

Test(snap, next_leaves_position_on_failure)
{
    struct tk_cmd c[1] = {grant("a", T0)};
    size_t len = make(1, c, 1);
    size_t pos = 16;
    struct tk_cmd out;
    cr_assert_eq(tk_snap_next(blob, len - 1, &pos, &out, NULL), TK_EPROTO);
    cr_assert_eq(pos, 16);
    cr_assert_eq(tk_snap_next(blob, len, &pos, &out, NULL), TK_OK);
    cr_assert_eq(pos, len);
}

/* ---- admin HTTP request parsing ------------------------------------------ */

static enum tk_admin_route route(const char *req, bool *head)
{
    return tk_admin_http_parse(req, strlen(req), head);
}

Test(admin_http, routes)
{
    bool head = true;
    cr_assert_eq(route("GET /healthz HTTP/1.1\r\n\r\n", &head), TK_ADMIN_HEALTHZ);
    cr_assert(!head);
    cr_assert_eq(route("HEAD /metrics HTTP/1.1\r\n\r\n", &head), TK_ADMIN_METRICS);
    cr_assert(head);
    cr_assert_eq(route("GET /readyz?verbose=1 HTTP/1.1", &head), TK_ADMIN_READYZ);
    cr_assert_eq(route("GET /status", &head), TK_ADMIN_STATUS);
    cr_assert_eq(route("GET /members HTTP/1.1\r\n\r\n", &head), TK_ADMIN_MEMBERS);
    cr_assert_eq(route("GET /statusx", &head), TK_ADMIN_NOT_FOUND);
    cr_assert_eq(route("GET ?x", &head), TK_ADMIN_NOT_FOUND, "empty path after the '?'");
    cr_assert_eq(route("POST /status HTTP/1.1", &head), TK_ADMIN_BAD_METHOD);
    cr_assert(!head);
    cr_assert_eq(route("get /status", &head), TK_ADMIN_BAD_METHOD);
}

Test(admin_http, sscanf_corners)
{
    bool head = true;
    /* No path: 400, and head_only keeps the previous request's value. */
    cr_assert_eq(route("", &head), TK_ADMIN_BAD_REQUEST);
    cr_assert_eq(route(" \r\n\t", &head), TK_ADMIN_BAD_REQUEST);
    cr_assert_eq(route("GET", &head), TK_ADMIN_BAD_REQUEST);
    cr_assert_eq(route("GET \r\n", &head), TK_ADMIN_BAD_REQUEST);
    cr_assert(head);
    /* White space is any of " \t\n\v\f\r", leading included. */
    cr_assert_eq(route("\v\fGET\t\n/healthz", &head), TK_ADMIN_HEALTHZ);
    /* A method over 7 bytes runs on into the path, as %7s did. */
    cr_assert_eq(route("GETGETGET/healthz", &head), TK_ADMIN_BAD_METHOD);
    cr_assert_eq(route("HEADXXXX", &head), TK_ADMIN_BAD_METHOD);
    /* The path is cut at 255 bytes before the query is dropped. */
    char req[600] = "GET /healthz?";
    memset(req + strlen(req), 'q', 400);
    cr_assert_eq(route(req, &head), TK_ADMIN_HEALTHZ);
    /* The first NUL ends the request. */
    cr_assert_eq(tk_admin_http_parse("GET\0 /healthz", 13, &head), TK_ADMIN_BAD_REQUEST);
    cr_assert_eq(tk_admin_http_parse("GET /healthz\0x", 14, &head), TK_ADMIN_HEALTHZ);
}

Test(admin_http, complete)
{
    cr_assert(tk_admin_http_complete("GET / HTTP/1.1\r\n\r\n", 18));
    cr_assert(tk_admin_http_complete("GET /\n\n", 7));
    cr_assert(!tk_admin_http_complete("GET / HTTP/1.1\r\n", 16));
    cr_assert(!tk_admin_http_complete("GET /\r\n\r", 8));
    cr_assert(!tk_admin_http_complete("GET /\0\n\n", 8), "not past a NUL");
    cr_assert(!tk_admin_http_complete("", 0));
}
