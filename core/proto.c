/* The client line protocol (SPEC 2-5): request parsing with every field rule
 * of SPEC 5, response formatting, response parsing for the client library,
 * and the handshake lines.
 *
 * Everything here runs once per request or response, so nothing allocates,
 * nothing reads past len (lines are not NUL-terminated and may contain NUL
 * bytes), and a line is scanned about once: memchr() finds the separators,
 * then each field is checked in place.
 */
#include "core/proto.h"

#include <string.h>

#include "core/auth.h"

#define PROTO_U64_DIGITS_MAX 20
#define PROTO_WORDS_MAX 5 /* the longest response, Q, has 5 words */

static const char *const reason_words[] = {
    [TK_REASON_NONE] = "none",       [TK_REASON_SYNTAX] = "syntax",     [TK_REASON_KEY] = "key",
    [TK_REASON_OWNER] = "owner",     [TK_REASON_LEASE] = "lease",       [TK_REASON_WAIT] = "wait",
    [TK_REASON_TOKEN] = "token",     [TK_REASON_COMMAND] = "command",   [TK_REASON_AUTH] = "auth",
    [TK_REASON_TOOLONG] = "toolong", [TK_REASON_OVERLOAD] = "overload",
};
_Static_assert(TK_ARRAY_LEN(reason_words) == TK_REASON_OVERLOAD + 1,
               "reason_words must name every enum tk_reason value");
_Static_assert(TK_LINE_MAX > 1 + 1 + PROTO_U64_DIGITS_MAX + 1 + TK_KEY_LEN_MAX + 1 +
                                 TK_OWNER_LEN_MAX + 1 + 6 + 1 + 6 + 1,
               "the longest valid acquire must fit in one line");

const char *tk_reason_str(enum tk_reason r)
{
    if ((unsigned)r >= TK_ARRAY_LEN(reason_words)) /* any out-of-range value fails */
        return "unknown";
    return reason_words[r];
}

/* ---- small helpers ---------------------------------------------------- */

/* True if every byte is visible ASCII (0x21-0x7E). Accumulates without an
 * early exit so the compiler can vectorise the loop over a 250-byte key. */
static bool proto_visible(const char *s, size_t len)
{
    unsigned bad = 0;
    for (size_t i = 0; i < len; i++)
        bad |= (unsigned)((unsigned char)s[i] - 0x21u) > (0x7Eu - 0x21u);
    return bad == 0;
}

bool tk_proto_key_ok(const char *key, size_t len)
{
    return len >= 1 && len <= TK_KEY_LEN_MAX && proto_visible(key, len);
}

bool tk_proto_owner_ok(const char *owner, size_t len)
{
    return len >= 1 && len <= TK_OWNER_LEN_MAX && proto_visible(owner, len);
}

bool tk_proto_parse_u64(const char *s, size_t len, uint64_t *out)
{
    if (len == 0 || len > PROTO_U64_DIGITS_MAX)
        return false;
    if (s[0] == '0' && len > 1)
        return false; /* leading zero */
    /* 19 digits never overflow (10^19 - 1 < 2^64), so only a 20th digit
     * needs the overflow checks. */
    size_t safe = TK_MIN(len, PROTO_U64_DIGITS_MAX - 1);
    uint64_t v = 0;
    for (size_t i = 0; i < safe; i++) {
        /* Below '0' wraps to a large value on purpose: d > 9 catches it. */
        unsigned d = (unsigned)((unsigned char)s[i] - '0');
        if (d > 9)
            return false; /* sign, space, any non-digit */
        v = v * 10 + d;
    }
    if (len == PROTO_U64_DIGITS_MAX) {
        unsigned d = (unsigned)((unsigned char)s[safe] - '0');
        if (d > 9 || __builtin_mul_overflow(v, 10u, &v) || __builtin_add_overflow(v, d, &v))
            return false;
    }
    *out = v;
    return true;
}

static bool proto_word_is(const char *s, size_t len, const char *lit)
{
    size_t n = strlen(lit);
    return len == n && memcmp(s, lit, n) == 0;
}

/* Lowercase hex of exactly n chars (n <= 16) into *out. */
static bool proto_hex_u64(const char *s, size_t n, uint64_t *out)
{
    TK_ASSERT(n <= 16);
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        unsigned d;
        if (c >= '0' && c <= '9')
            d = (unsigned)(c - '0'); /* 0..9 by the range check */
        else if (c >= 'a' && c <= 'f')
            d = (unsigned)(c - 'a' + 10); /* 10..15 */
        else
            return false;
        v = (v << 4) | d;
    }
    *out = v;
    return true;
}

static bool proto_hex64(const char *s, size_t len)
{
    uint64_t ignored;
    if (len != TK_AUTH_HEX_LEN)
        return false;
    for (size_t i = 0; i < len; i += 16)
        if (!proto_hex_u64(s + i, 16, &ignored))
            return false;
    return true;
}

static const char *proto_word_end(const char *p, const char *end)
{
    const char *sp = p < end ? memchr(p, ' ', (size_t)(end - p)) : NULL;
    return sp ? sp : end;
}

static size_t proto_strip_cr(const char *line, size_t len)
{
    return len > 0 && line[len - 1] == '\r' ? len - 1 : len;
}

struct proto_word {
    const char *s;
    size_t len;
};

/* Strict split for the lines the server and client produce: words separated
 * by exactly one space, none empty. Returns the number of words, or 0 if a
 * word is empty or there are more than max. */
static size_t proto_split(const char *line, size_t len, struct proto_word *w, size_t max)
{
    if (len == 0)
        return 0;
    const char *p = line;
    const char *end = line + len;
    size_t n = 0;
    for (;;) {
        const char *e = proto_word_end(p, end);
        if (e == p || n == max)
            return 0;
        w[n].s = p;
        w[n].len = (size_t)(e - p);
        n++;
        if (e == end)
            return n;
        p = e + 1; /* past the space; an empty word after it fails above */
    }
}

/* ---- request parser (server side) ---------------------------------- */

static enum tk_parse_status proto_reject(struct tk_request *req, enum tk_reason r)
{
    req->reason = r;
    return TK_PARSE_REJECT;
}

static enum tk_parse_status proto_fatal(struct tk_request *req)
{
    req->type = 0;
    req->id = 0;
    req->reason = TK_REASON_SYNTAX;
    return TK_PARSE_FATAL;
}

/* Step 4 of the precedence in proto.h: the fields after the id, left to
 * right. f holds exactly as many non-empty fields as the command takes. */
static enum tk_parse_status proto_fields(struct tk_request *req, const struct proto_word *f)
{
    uint64_t v;
    if (req->type == 'P' || req->type == 'S')
        return TK_PARSE_OK;
    if (!tk_proto_key_ok(f[0].s, f[0].len))
        return proto_reject(req, TK_REASON_KEY);
    req->key = f[0].s;
    req->key_len = f[0].len;
    if (req->type == 'Q')
        return TK_PARSE_OK;
    if (!tk_proto_owner_ok(f[1].s, f[1].len))
        return proto_reject(req, TK_REASON_OWNER);
    req->owner = f[1].s;
    req->owner_len = f[1].len;
    if (req->type == 'R') {
        if (!tk_proto_parse_u64(f[2].s, f[2].len, &v) || v == 0)
            return proto_reject(req, TK_REASON_TOKEN);
        req->token = v;
        return TK_PARSE_OK;
    }
    TK_ASSERT(req->type == 'A');
    if (!tk_proto_parse_u64(f[2].s, f[2].len, &v) || v < TK_LEASE_MS_MIN || v > TK_LEASE_MS_MAX)
        return proto_reject(req, TK_REASON_LEASE);
    req->lease_ms = (uint32_t)v; /* <= TK_LEASE_MS_MAX, checked above */
    if (!tk_proto_parse_u64(f[3].s, f[3].len, &v) || v > TK_WAIT_MS_MAX)
        return proto_reject(req, TK_REASON_WAIT);
    req->wait_ms = (uint32_t)v; /* <= TK_WAIT_MS_MAX, checked above */
    return TK_PARSE_OK;
}

enum tk_parse_status tk_proto_parse(const char *line, size_t len, struct tk_request *req)
{
    TK_ASSERT(req != NULL);
    TK_ASSERT(line != NULL || len == 0);
    *req = (struct tk_request){0};
    len = proto_strip_cr(line, len);
    if (len == 0)
        return proto_fatal(req);

    const char *p = line;
    const char *end = line + len;
    bool empty_field = false; /* a leading, doubled or trailing space */

    /* Steps 1-2: the first two non-empty words are the command and the id.
     * Skipping empty words here lets " P 1" and "P  1" be answered with
     * "E 1 syntax" as SPEC 5 asks, instead of closing the connection. */
    while (p < end && *p == ' ')
        p++;
    empty_field |= p != line;
    const char *cmd = p;
    p = proto_word_end(p, end);
    size_t cmd_len = (size_t)(p - cmd);
    if (p < end)
        p++;
    const char *id_start = p;
    while (p < end && *p == ' ')
        p++;
    empty_field |= p != id_start;
    const char *id = p;
    p = proto_word_end(p, end);
    if (cmd_len == 0 || !tk_proto_parse_u64(id, (size_t)(p - id), &req->id))
        return proto_fatal(req);

    size_t want;
    switch (cmd_len == 1 ? cmd[0] : 0) {
        case 'A':
            want = 4;
            break;
        case 'R':
            want = 3;
            break;
        case 'Q':
            want = 1;
            break;
        case 'P':
        case 'S':
            want = 0;
            break;
        default:
            return proto_reject(req, TK_REASON_COMMAND);
    }
    req->type = cmd[0];

    /* Step 3: the shape. p is at the space after the id or at the end.
     * Scanning stops at the first field too many. */
    struct proto_word f[4];
    size_t n = 0;
    while (p < end) {
        TK_DEBUG_ASSERT(*p == ' ');
        const char *s = ++p;
        p = proto_word_end(p, end);
        if (n == want) {
            n++;
            break;
        }
        f[n].s = s;
        f[n].len = (size_t)(p - s);
        empty_field |= f[n].len == 0;
        n++;
    }
    if (empty_field || n != want)
        return proto_reject(req, TK_REASON_SYNTAX);
    return proto_fields(req, f);
}

/* ---- formatting ------------------------------------------------------ */

size_t tk_proto_u64(char *buf, uint64_t v)
{
    char tmp[PROTO_U64_DIGITS_MAX];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10); /* one digit, '0'..'9' */
        v /= 10;
    } while (v != 0);
    TK_ASSERT(n <= PROTO_U64_DIGITS_MAX);
    for (size_t i = 0; i < n; i++)
        buf[i] = tmp[n - 1 - i];
    return n;
}

/* A bounded line writer: once something does not fit, every later write is
 * dropped and the line's length comes out as 0. */
struct proto_out {
    char *buf;
    size_t cap;
    size_t len;
    bool overflow;
};

static void out_bytes(struct proto_out *o, const char *s, size_t n)
{
    if (o->overflow || n > o->cap - o->len) {
        o->overflow = true;
        return;
    }
    memcpy(o->buf + o->len, s, n);
    o->len += n;
}

static void out_char(struct proto_out *o, char c)
{
    out_bytes(o, &c, 1);
}

static void out_u64(struct proto_out *o, uint64_t v)
{
    char tmp[PROTO_U64_DIGITS_MAX];
    out_bytes(o, tmp, tk_proto_u64(tmp, v));
}

static void out_hex16(struct proto_out *o, uint64_t v)
{
    static const char digits[] = "0123456789abcdef";
    char tmp[16];
    for (int i = 15; i >= 0; i--) {
        tmp[i] = digits[v & 0xf];
        v >>= 4;
    }
    out_bytes(o, tmp, sizeof tmp);
}

/* "<type> <id>" starts most lines. */
static struct proto_out out_start(char *buf, size_t cap, char type, uint64_t id)
{
    TK_ASSERT(buf != NULL || cap == 0);
    struct proto_out o = {.buf = buf, .cap = cap};
    out_char(&o, type);
    out_char(&o, ' ');
    out_u64(&o, id);
    return o;
}

static size_t out_finish(struct proto_out *o)
{
    out_char(o, '\n');
    TK_ASSERT(o->overflow || o->len <= o->cap);
    return o->overflow ? 0 : o->len;
}

size_t tk_proto_fmt_id(char *buf, size_t cap, char type, uint64_t id)
{
    TK_ASSERT(type == 'T' || type == 'B' || type == 'R' || type == 'N' || type == 'P');
    struct proto_out o = out_start(buf, cap, type, id);
    return out_finish(&o);
}

size_t tk_proto_fmt_grant(char *buf, size_t cap, uint64_t id, uint64_t token)
{
    TK_ASSERT(token >= 1);
    struct proto_out o = out_start(buf, cap, 'G', id);
    out_char(&o, ' ');
    out_u64(&o, token);
    return out_finish(&o);
}

size_t tk_proto_fmt_query(char *buf,
                          size_t cap,
                          uint64_t id,
                          const char *owner,
                          size_t owner_len,
                          uint64_t token,
                          uint32_t waiters)
{
    struct proto_out o = out_start(buf, cap, 'Q', id);
    if (owner == NULL) {
        /* SPEC 3: a free key has no holder, no token and no waiters. */
        TK_DEBUG_ASSERT(token == 0);
        TK_DEBUG_ASSERT(waiters == 0);
        out_bytes(&o, " - 0 0", 6);
        return out_finish(&o);
    }
    TK_ASSERT(token >= 1); /* token 0 with owner "-" would read as free */
    TK_DEBUG_ASSERT(tk_proto_owner_ok(owner, owner_len));
    out_char(&o, ' ');
    out_bytes(&o, owner, owner_len);
    out_char(&o, ' ');
    out_u64(&o, token);
    out_char(&o, ' ');
    out_u64(&o, waiters);
    return out_finish(&o);
}

size_t tk_proto_fmt_error(char *buf, size_t cap, bool has_id, uint64_t id, enum tk_reason r)
{
    TK_ASSERT(r > TK_REASON_NONE);
    TK_ASSERT(r <= TK_REASON_OVERLOAD);
    struct proto_out o = {.buf = buf, .cap = cap};
    if (has_id) {
        o = out_start(buf, cap, 'E', id);
    } else {
        out_bytes(&o, "E -", 3);
    }
    out_char(&o, ' ');
    out_bytes(&o, reason_words[r], strlen(reason_words[r]));
    return out_finish(&o);
}

size_t tk_proto_fmt_wrong(char *buf, size_t cap, uint64_t id, uint32_t slot, uint64_t version)
{
    TK_ASSERT(slot < TK_SLOTS);
    struct proto_out o = out_start(buf, cap, 'W', id);
    out_char(&o, ' ');
    out_u64(&o, slot);
    out_char(&o, ' ');
    out_u64(&o, version);
    return out_finish(&o);
}

size_t tk_proto_fmt_ring(char *buf,
                         size_t cap,
                         uint64_t id,
                         uint64_t version,
                         uint32_t part,
                         uint32_t parts,
                         const char *body,
                         size_t body_len)
{
    TK_ASSERT(body_len > 0 && part >= 1 && part <= parts);
    TK_DEBUG_ASSERT(proto_visible(body, body_len));
    struct proto_out o = out_start(buf, cap, 'S', id);
    out_char(&o, ' ');
    out_u64(&o, version);
    out_char(&o, ' ');
    if (parts > 1) {
        out_u64(&o, part);
        out_char(&o, '/');
        out_u64(&o, parts);
        out_char(&o, ' ');
    }
    out_bytes(&o, body, body_len);
    return out_finish(&o);
}

size_t tk_proto_fmt_moved(char *buf, size_t cap, const char *addr)
{
    struct proto_out o = {.buf = buf, .cap = cap};
    out_bytes(&o, "M ", 2);
    if (addr == NULL) {
        out_char(&o, '-');
    } else {
        size_t n = strlen(addr);
        TK_DEBUG_ASSERT(n > 0 && proto_visible(addr, n));
        out_bytes(&o, addr, n);
    }
    return out_finish(&o);
}

size_t tk_proto_fmt_acquire(char *buf,
                            size_t cap,
                            uint64_t id,
                            const char *key,
                            size_t key_len,
                            const char *owner,
                            size_t owner_len,
                            uint32_t lease_ms,
                            uint32_t wait_ms)
{
    TK_DEBUG_ASSERT(tk_proto_key_ok(key, key_len));
    TK_DEBUG_ASSERT(tk_proto_owner_ok(owner, owner_len));
    TK_DEBUG_ASSERT(lease_ms >= TK_LEASE_MS_MIN && lease_ms <= TK_LEASE_MS_MAX);
    TK_DEBUG_ASSERT(wait_ms <= TK_WAIT_MS_MAX);
    struct proto_out o = out_start(buf, cap, 'A', id);
    out_char(&o, ' ');
    out_bytes(&o, key, key_len);
    out_char(&o, ' ');
    out_bytes(&o, owner, owner_len);
    out_char(&o, ' ');
    out_u64(&o, lease_ms);
    out_char(&o, ' ');
    out_u64(&o, wait_ms);
    return out_finish(&o);
}

size_t tk_proto_fmt_release(char *buf,
                            size_t cap,
                            uint64_t id,
                            const char *key,
                            size_t key_len,
                            const char *owner,
                            size_t owner_len,
                            uint64_t token)
{
    TK_DEBUG_ASSERT(tk_proto_key_ok(key, key_len));
    TK_DEBUG_ASSERT(tk_proto_owner_ok(owner, owner_len));
    TK_DEBUG_ASSERT(token >= 1);
    struct proto_out o = out_start(buf, cap, 'R', id);
    out_char(&o, ' ');
    out_bytes(&o, key, key_len);
    out_char(&o, ' ');
    out_bytes(&o, owner, owner_len);
    out_char(&o, ' ');
    out_u64(&o, token);
    return out_finish(&o);
}

size_t tk_proto_fmt_qreq(char *buf, size_t cap, uint64_t id, const char *key, size_t key_len)
{
    TK_DEBUG_ASSERT(tk_proto_key_ok(key, key_len));
    struct proto_out o = out_start(buf, cap, 'Q', id);
    out_char(&o, ' ');
    out_bytes(&o, key, key_len);
    return out_finish(&o);
}

size_t tk_proto_fmt_ping(char *buf, size_t cap, uint64_t id)
{
    struct proto_out o = out_start(buf, cap, 'P', id);
    return out_finish(&o);
}

size_t tk_proto_fmt_ring_req(char *buf, size_t cap, uint64_t id)
{
    struct proto_out o = out_start(buf, cap, 'S', id);
    return out_finish(&o);
}

/* ---- response parser (client side) --------------------------------- */

/* "host:port": visible bytes, a non-empty host before the last ':' (which
 * may itself contain ':' as in "[::1]:7400") and a port 1-65535. */
static bool proto_addr_ok(const char *s, size_t len)
{
    if (len == 0 || !proto_visible(s, len))
        return false;
    size_t colon = len;
    while (colon > 0 && s[colon - 1] != ':')
        colon--;
    if (colon < 2) /* no ':' at all, or an empty host */
        return false;
    uint64_t port;
    return tk_proto_parse_u64(s + colon, len - colon, &port) && port >= 1 && port <= 65535;
}

static bool proto_parse_q(const struct proto_word *w, struct tk_response *rsp)
{
    uint64_t waiters;
    if (!tk_proto_owner_ok(w[2].s, w[2].len) ||
        !tk_proto_parse_u64(w[3].s, w[3].len, &rsp->token) ||
        !tk_proto_parse_u64(w[4].s, w[4].len, &waiters) || waiters > UINT32_MAX)
        return false;
    rsp->waiters = (uint32_t)waiters; /* <= UINT32_MAX, checked above */
    /* Tokens are >= 1, so token 0 marks the free key and tells the free
     * "-" apart from an owner literally named "-". */
    if (rsp->token == 0)
        return proto_word_is(w[2].s, w[2].len, "-") && waiters == 0;
    rsp->owner = w[2].s;
    rsp->owner_len = w[2].len;
    return true;
}

/* "S <id> <version> [<k>/<n>] <body>": the body's ranges are for
 * core/slots.h to read; here only that it is visible text. */
static bool proto_parse_ring(const struct proto_word *w, size_t n, struct tk_response *rsp)
{
    if (!tk_proto_parse_u64(w[2].s, w[2].len, &rsp->version))
        return false;
    rsp->part = rsp->parts = 1;
    if (n == 5) {
        const char *slash = memchr(w[3].s, '/', w[3].len);
        uint64_t k, of;
        if (!slash || !tk_proto_parse_u64(w[3].s, (size_t)(slash - w[3].s), &k) ||
            !tk_proto_parse_u64(slash + 1, w[3].len - (size_t)(slash + 1 - w[3].s), &of) || k < 1 ||
            k > of || of < 2 || of > TK_PROTO_RING_PARTS_MAX)
            return false;
        rsp->part = (uint32_t)k;
        rsp->parts = (uint32_t)of;
    }
    const struct proto_word *b = &w[n - 1];
    if (!proto_visible(b->s, b->len))
        return false;
    rsp->text = b->s;
    rsp->text_len = b->len;
    return true;
}

bool tk_proto_parse_response(const char *line, size_t len, struct tk_response *rsp)
{
    TK_ASSERT(rsp != NULL);
    TK_ASSERT(line != NULL || len == 0);
    *rsp = (struct tk_response){0};
    struct proto_word w[PROTO_WORDS_MAX];
    size_t n = proto_split(line, proto_strip_cr(line, len), w, PROTO_WORDS_MAX);
    if (n < 2 || w[0].len != 1)
        return false;
    rsp->type = w[0].s[0];
    if (rsp->type == 'M') {
        if (n != 2)
            return false;
        if (proto_word_is(w[1].s, w[1].len, "-"))
            return true;
        rsp->text = w[1].s;
        rsp->text_len = w[1].len;
        return proto_addr_ok(w[1].s, w[1].len);
    }
    if (rsp->type == 'E' && proto_word_is(w[1].s, w[1].len, "-")) {
        rsp->has_id = false;
    } else {
        if (!tk_proto_parse_u64(w[1].s, w[1].len, &rsp->id))
            return false;
        rsp->has_id = true;
    }
    switch (rsp->type) {
        case 'T':
        case 'B':
        case 'R':
        case 'N':
        case 'P':
            return n == 2;
        case 'G':
            return n == 3 && tk_proto_parse_u64(w[2].s, w[2].len, &rsp->token) && rsp->token >= 1;
        case 'Q':
            return n == 5 && proto_parse_q(w, rsp);
        case 'W': {
            uint64_t slot;
            if (n != 4 || !tk_proto_parse_u64(w[2].s, w[2].len, &slot) || slot >= TK_SLOTS)
                return false;
            rsp->slot = (uint32_t)slot;
            return tk_proto_parse_u64(w[3].s, w[3].len, &rsp->version);
        }
        case 'S':
            return (n == 4 || n == 5) && proto_parse_ring(w, n, rsp);
        case 'E':
            if (n != 3 || !proto_visible(w[2].s, w[2].len))
                return false;
            rsp->text = w[2].s;
            rsp->text_len = w[2].len;
            for (enum tk_reason r = TK_REASON_NONE + 1; r < TK_ARRAY_LEN(reason_words); r++)
                if (proto_word_is(w[2].s, w[2].len, reason_words[r]))
                    rsp->reason = r;
            return true;
        default:
            return false;
    }
}

/* ---- handshake (SPEC 2) -------------------------------------------- */

#define PROTO_BANNER_CLIENT "TICKETING/1"
#define PROTO_BANNER_PEER "TICKETING-PEER/2"

bool tk_proto_parse_banner(const char *line, size_t len, bool peer, const char **snonce)
{
    TK_ASSERT(line != NULL || len == 0);
    struct proto_word w[2];
    if (proto_split(line, proto_strip_cr(line, len), w, 2) != 2)
        return false;
    if (!proto_word_is(w[0].s, w[0].len, peer ? PROTO_BANNER_PEER : PROTO_BANNER_CLIENT))
        return false;
    if (!proto_hex64(w[1].s, w[1].len))
        return false;
    *snonce = w[1].s;
    return true;
}

bool tk_proto_parse_auth(const char *line, size_t len, const char **cnonce, const char **cproof)
{
    TK_ASSERT(line != NULL || len == 0);
    struct proto_word w[3];
    if (proto_split(line, proto_strip_cr(line, len), w, 3) != 3)
        return false;
    if (!proto_word_is(w[0].s, w[0].len, "AUTH") || !proto_hex64(w[1].s, w[1].len) ||
        !proto_hex64(w[2].s, w[2].len))
        return false;
    *cnonce = w[1].s;
    *cproof = w[2].s;
    return true;
}

bool tk_proto_parse_peer_auth(const char *line,
                              size_t len,
                              const char **cnonce,
                              const char **cproof,
                              const char **to,
                              size_t *to_len)
{
    TK_ASSERT(line != NULL || len == 0);
    struct proto_word w[4];
    if (proto_split(line, proto_strip_cr(line, len), w, 4) != 4)
        return false;
    if (!proto_word_is(w[0].s, w[0].len, "AUTH") || !proto_hex64(w[1].s, w[1].len) ||
        !proto_hex64(w[2].s, w[2].len) || w[3].len > TK_PROTO_PEER_ADDR_MAX ||
        !proto_visible(w[3].s, w[3].len))
        return false;
    *cnonce = w[1].s;
    *cproof = w[2].s;
    *to = w[3].s;
    *to_len = w[3].len;
    return true;
}

bool tk_proto_parse_ok(const char *line,
                       size_t len,
                       const char **sproof,
                       uint64_t *node_id,
                       uint64_t domain[2])
{
    TK_ASSERT(line != NULL || len == 0);
    struct proto_word w[4];
    uint64_t node, hi, lo;
    if (proto_split(line, proto_strip_cr(line, len), w, 4) != 4)
        return false;
    if (!proto_word_is(w[0].s, w[0].len, "OK") || !proto_hex64(w[1].s, w[1].len))
        return false;
    if (w[2].len != 16 || !proto_hex_u64(w[2].s, 16, &node))
        return false;
    if (w[3].len != 32 || !proto_hex_u64(w[3].s, 16, &hi) || !proto_hex_u64(w[3].s + 16, 16, &lo))
        return false;
    *sproof = w[1].s;
    *node_id = node;
    domain[1] = hi;
    domain[0] = lo;
    return true;
}

size_t tk_proto_fmt_banner(char *buf, size_t cap, bool peer, const char *snonce)
{
    TK_DEBUG_ASSERT(proto_hex64(snonce, TK_AUTH_HEX_LEN));
    struct proto_out o = {.buf = buf, .cap = cap};
    const char *b = peer ? PROTO_BANNER_PEER : PROTO_BANNER_CLIENT;
    out_bytes(&o, b, strlen(b));
    out_char(&o, ' ');
    out_bytes(&o, snonce, TK_AUTH_HEX_LEN);
    return out_finish(&o);
}

size_t tk_proto_fmt_auth(char *buf, size_t cap, const char *cnonce, const char *cproof)
{
    TK_DEBUG_ASSERT(proto_hex64(cnonce, TK_AUTH_HEX_LEN));
    TK_DEBUG_ASSERT(proto_hex64(cproof, TK_AUTH_HEX_LEN));
    struct proto_out o = {.buf = buf, .cap = cap};
    out_bytes(&o, "AUTH ", 5);
    out_bytes(&o, cnonce, TK_AUTH_HEX_LEN);
    out_char(&o, ' ');
    out_bytes(&o, cproof, TK_AUTH_HEX_LEN);
    return out_finish(&o);
}

size_t tk_proto_fmt_peer_auth(char *buf,
                              size_t cap,
                              const char *cnonce,
                              const char *cproof,
                              const char *to,
                              size_t to_len)
{
    TK_DEBUG_ASSERT(to_len >= 1 && to_len <= TK_PROTO_PEER_ADDR_MAX);
    TK_DEBUG_ASSERT(proto_visible(to, to_len));
    size_t n = tk_proto_fmt_auth(buf, cap, cnonce, cproof);
    if (n == 0)
        return 0;
    struct proto_out o = {.buf = buf, .cap = cap, .len = n - 1}; /* over the "\n" */
    out_char(&o, ' ');
    out_bytes(&o, to, to_len);
    return out_finish(&o);
}

size_t tk_proto_fmt_ok(char *buf,
                       size_t cap,
                       const char *sproof,
                       uint64_t node_id,
                       const uint64_t domain[2])
{
    TK_DEBUG_ASSERT(proto_hex64(sproof, TK_AUTH_HEX_LEN));
    struct proto_out o = {.buf = buf, .cap = cap};
    out_bytes(&o, "OK ", 3);
    out_bytes(&o, sproof, TK_AUTH_HEX_LEN);
    out_char(&o, ' ');
    out_hex16(&o, node_id);
    out_char(&o, ' ');
    out_hex16(&o, domain[1]);
    out_hex16(&o, domain[0]);
    return out_finish(&o);
}
