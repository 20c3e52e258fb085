/* Fuzz target "request": the client request line, as the server reads it.
 *
 * The input is a client's byte stream after the handshake. It is cut into
 * lines the way net/conn.c does (a '\n' within TK_LINE_MAX bytes, else the
 * connection ends with "E - toolong"; a last line without '\n' is taken as
 * if one followed), and each line goes through tk_proto_parse().
 *
 * Checked for every line:
 *  - the result equals that of an independent, deliberately plain reference
 *    parser written from the rules in core/proto.h (status, reason, type,
 *    id, every field, and the field pointers);
 *  - the reply the server would write formats (E with a real reason, P);
 *  - an accepted request formats back to exactly the same line
 *    (tk_proto_fmt_acquire/release/qreq/ping; the format is canonical);
 *  - an accepted A/R/Q is valid input for the lock table: tk_lock_request()
 *    on a leader table asserts SPEC 5 and must not panic.
 */
#include "tests/fuzz/fuzz.h"

#include "core/proto.h"
#include "shard/lock.h"

/* ---- reference parser ------------------------------------------------- */

struct ref_field {
    const char *s;
    size_t len;
};

static bool ref_visible(const char *s, size_t len, size_t max)
{
    if (len < 1 || len > max)
        return false;
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)s[i] < 0x21 || (unsigned char)s[i] > 0x7e)
            return false;
    return true;
}

static bool ref_u64(const char *s, size_t len, uint64_t *out)
{
    static const char max[] = "18446744073709551615";
    if (len < 1 || len > 20 || (len > 1 && s[0] == '0'))
        return false;
    for (size_t i = 0; i < len; i++)
        if (s[i] < '0' || s[i] > '9')
            return false;
    if (len == 20 && memcmp(s, max, 20) > 0)
        return false;
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++)
        v = v * 10 + (uint64_t)(s[i] - '0');
    *out = v;
    return true;
}

static enum tk_parse_status ref_parse(const char *line,
                                      size_t len,
                                      struct tk_request *r,
                                      struct ref_field *f)
{
    memset(r, 0, sizeof(*r));
    if (len > 0 && line[len - 1] == '\r')
        len--;
    /* Every field between single spaces, empty ones included. */
    size_t n = 0;
    size_t start = 0;
    for (size_t i = 0; i <= len; i++) {
        if (i == len || line[i] == ' ') {
            f[n].s = line + start;
            f[n].len = i - start;
            n++;
            start = i + 1;
        }
    }
    size_t c = 0;
    while (c < n && f[c].len == 0)
        c++;
    size_t d = c + 1;
    while (d < n && f[d].len == 0)
        d++;
    if (len == 0 || c >= n || d >= n || !ref_u64(f[d].s, f[d].len, &r->id)) {
        r->id = 0;
        r->reason = TK_REASON_SYNTAX;
        return TK_PARSE_FATAL;
    }
    size_t want;
    if (f[c].len == 1 && f[c].s[0] == 'A')
        want = 4;
    else if (f[c].len == 1 && f[c].s[0] == 'R')
        want = 3;
    else if (f[c].len == 1 && f[c].s[0] == 'Q')
        want = 1;
    else if (f[c].len == 1 && (f[c].s[0] == 'P' || f[c].s[0] == 'S'))
        want = 0;
    else {
        r->reason = TK_REASON_COMMAND;
        return TK_PARSE_REJECT;
    }
    r->type = f[c].s[0];
    bool empty = c > 0 || d > c + 1;
    size_t rest = n - d - 1;
    for (size_t i = d + 1; i < n; i++)
        empty |= f[i].len == 0;
    if (empty || rest != want) {
        r->reason = TK_REASON_SYNTAX;
        return TK_PARSE_REJECT;
    }
    const struct ref_field *a = f + d + 1;
    if (want >= 1) {
        if (!ref_visible(a[0].s, a[0].len, TK_KEY_LEN_MAX)) {
            r->reason = TK_REASON_KEY;
            return TK_PARSE_REJECT;
        }
        r->key = a[0].s;
        r->key_len = a[0].len;
    }
    if (want >= 3) {
        if (!ref_visible(a[1].s, a[1].len, TK_OWNER_LEN_MAX)) {
            r->reason = TK_REASON_OWNER;
            return TK_PARSE_REJECT;
        }
        r->owner = a[1].s;
        r->owner_len = a[1].len;
    }
    uint64_t v = 0;
    if (want == 3) {
        if (!ref_u64(a[2].s, a[2].len, &v) || v == 0) {
            r->reason = TK_REASON_TOKEN;
            return TK_PARSE_REJECT;
        }
        r->token = v;
    }
    if (want == 4) {
        if (!ref_u64(a[2].s, a[2].len, &v) || v < 1000 || v > 250000) {
            r->reason = TK_REASON_LEASE;
            return TK_PARSE_REJECT;
        }
        r->lease_ms = (uint32_t)v;
        if (!ref_u64(a[3].s, a[3].len, &v) || v > 250000) {
            r->reason = TK_REASON_WAIT;
            return TK_PARSE_REJECT;
        }
        r->wait_ms = (uint32_t)v;
    }
    return TK_PARSE_OK;
}

/* ---- the target ------------------------------------------------------- */

static void on_reply(void *ctx, const struct tk_lock_reply *r)
{
    (void)ctx;
    (void)r;
}

static void on_propose(void *ctx, const struct tk_cmd *c)
{
    (void)ctx;
    FUZZ_CHECK(tk_cmd_check(c) == TK_OK);
}

static void one_line(const char *line,
                     size_t len,
                     struct ref_field *fields,
                     struct tk_lock_table *t,
                     uint64_t *now)
{
    struct tk_request req, ref;
    enum tk_parse_status st = tk_proto_parse(line, len, &req);
    enum tk_parse_status want = ref_parse(line, len, &ref, fields);
    FUZZ_CHECK(st == want);
    FUZZ_CHECK(req.type == ref.type);
    FUZZ_CHECK(req.id == ref.id);
    FUZZ_CHECK(req.reason == ref.reason);
    char out[TK_LINE_MAX + 2];
    if (st == TK_PARSE_FATAL) {
        FUZZ_CHECK(req.reason == TK_REASON_SYNTAX);
        FUZZ_CHECK(tk_proto_fmt_error(out, sizeof(out), false, 0, req.reason) > 0);
        return;
    }
    if (st == TK_PARSE_REJECT) {
        FUZZ_CHECK(req.reason != TK_REASON_NONE);
        FUZZ_CHECK(tk_proto_fmt_error(out, sizeof(out), true, req.id, req.reason) > 0);
        return;
    }
    FUZZ_CHECK(req.reason == TK_REASON_NONE);
    FUZZ_CHECK(req.key == ref.key && req.key_len == ref.key_len);
    FUZZ_CHECK(req.owner == ref.owner && req.owner_len == ref.owner_len);
    FUZZ_CHECK(req.lease_ms == ref.lease_ms && req.wait_ms == ref.wait_ms);
    FUZZ_CHECK(req.token == ref.token);
    if (req.key != NULL)
        FUZZ_CHECK(fuzz_inside(req.key, req.key_len, line, len));
    if (req.owner != NULL)
        FUZZ_CHECK(fuzz_inside(req.owner, req.owner_len, line, len));

    /* Canonical: the request formats back to the very same line. */
    size_t n = 0;
    switch (req.type) {
        case 'A':
            n = tk_proto_fmt_acquire(out, sizeof(out), req.id, req.key, req.key_len, req.owner,
                                     req.owner_len, req.lease_ms, req.wait_ms);
            break;
        case 'R':
            n = tk_proto_fmt_release(out, sizeof(out), req.id, req.key, req.key_len, req.owner,
                                     req.owner_len, req.token);
            break;
        case 'Q':
            n = tk_proto_fmt_qreq(out, sizeof(out), req.id, req.key, req.key_len);
            break;
        case 'P':
            n = tk_proto_fmt_ping(out, sizeof(out), req.id);
            break;
        case 'S':
            n = tk_proto_fmt_ring_req(out, sizeof(out), req.id);
            break;
        default:
            FUZZ_CHECK(!"type of an accepted request");
    }
    size_t bare = len > 0 && line[len - 1] == '\r' ? len - 1 : len;
    FUZZ_CHECK(n == bare + 1 && out[bare] == '\n' && memcmp(out, line, bare) == 0);
    if (req.type == 'P') {
        FUZZ_CHECK(tk_proto_fmt_id(out, sizeof(out), 'P', req.id) > 0);
        return;
    }
    if (req.type == 'S')
        return; /* answered by the connection's worker, no lock table */

    /* What the worker hands the lock table must satisfy its asserts. */
    struct tk_lock_req lr = {
        .type = req.type,
        .client = 1 + (req.id & 3),
        .id = req.id,
        .key = req.key,
        .key_len = req.key_len,
        .owner = req.owner,
        .owner_len = req.owner_len,
        .lease_ms = req.lease_ms,
        .wait_ms = req.wait_ms,
        .token = req.token,
    };
    struct tk_lock_sink sink = {.reply = on_reply, .propose = on_propose, .ctx = NULL};
    *now += 1000;
    int rc = tk_lock_request(t, *now, &lr, &sink);
    FUZZ_CHECK(rc == TK_OK || rc == TK_EFULL);
    tk_lock_check(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *in = fuzz_dup(data, size);
    struct ref_field *fields = malloc((size + 2) * sizeof(*fields));
    FUZZ_CHECK(fields != NULL);
    struct tk_lock_limits lim = {.keys_max = 64, .waiters_per_key_max = 8, .waiters_max = 64};
    struct tk_lock_table *t = tk_lock_create(&lim);
    FUZZ_CHECK(t != NULL);
    uint64_t now = 1000000;
    tk_lock_lead(t, now);

    size_t pos = 0;
    while (pos < size) {
        size_t avail = size - pos;
        const char *start = in + pos;
        const char *nl = memchr(start, '\n', TK_MIN(avail, (size_t)TK_LINE_MAX));
        size_t len;
        if (nl != NULL) {
            len = (size_t)(nl - start);
        } else if (avail >= TK_LINE_MAX) {
            break; /* E - toolong, and the connection closes */
        } else {
            len = avail; /* the last line, as if its '\n' followed */
        }
        /* Each line in a buffer of its own size: a read past it is caught. */
        char *line = fuzz_dup((const uint8_t *)start, len);
        one_line(line, len, fields, t, &now);
        free(line);
        pos += len + 1;
    }
    tk_lock_destroy(t);
    free(fields);
    free(in);
    return 0;
}
