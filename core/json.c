/* The JSON writer (see json.h). */
#include "core/json.h"

#include <string.h>

#include "core/tk.h"

static const char hex_digits[] = "0123456789abcdef";

/* The length of the UTF-8 sequence at p (n bytes left): 2 to 4, or 0 if
 * it is not a well-formed one (RFC 3629: no overlong forms, no
 * surrogates, nothing above U+10FFFF, no sequence cut short). */
static size_t json_utf8_len(const unsigned char *p, size_t n)
{
    unsigned char c = p[0];
    size_t len;
    unsigned char lo = 0x80, hi = 0xbf; /* bounds of the second byte */
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        if (c == 0xe0)
            lo = 0xa0;
        else if (c == 0xed)
            hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        if (c == 0xf0)
            lo = 0x90;
        else if (c == 0xf4)
            hi = 0x8f;
    } else {
        return 0;
    }
    if (n < len || p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if (p[i] < 0x80 || p[i] > 0xbf)
            return 0;
    return len;
}

size_t tk_json_escape_char(const unsigned char *p, size_t n, char *out, size_t *used)
{
    TK_ASSERT(n >= 1);
    unsigned char c = p[0];
    size_t len;
    *used = 1;
    if (c == '"' || c == '\\') {
        out[0] = '\\';
        out[1] = (char)c;
        return 2;
    }
    if (c < 0x20 || c == 0x7f) {
        memcpy(out, "\\u00", 4);
        out[4] = hex_digits[c >> 4];
        out[5] = hex_digits[c & 15];
        return 6;
    }
    if (c < 0x80) {
        out[0] = (char)c;
        return 1;
    }
    len = json_utf8_len(p, n);
    if (len == 0) {
        memcpy(out, "\\ufffd", 6);
        return 6;
    }
    memcpy(out, p, len);
    *used = len;
    return len;
}

/* ---- the buffer ------------------------------------------------------------------ */

/* Whether n more bytes fit (the NUL stays); fails the writer if not. */
static bool json_room(struct tk_json *j, size_t n)
{
    if (j->failed)
        return false;
    if (n >= j->cap - j->len) {
        j->failed = true;
        return false;
    }
    return true;
}

static void json_put(struct tk_json *j, const char *s, size_t n)
{
    memcpy(j->buf + j->len, s, n);
    j->len += n;
    j->buf[j->len] = '\0';
}

/* A value comes next: checks that one may, marks its level as having one,
 * and returns whether the comma before it is due. The structure is kept
 * whether or not the writer failed, so misuse asserts either way. */
static bool json_value_next(struct tk_json *j)
{
    /* A bare value inside an object would be no JSON: a key comes first;
     * and a document holds one value. */
    TK_ASSERT(j->after_key || j->close[j->depth] != '}');
    TK_ASSERT(j->depth > 0 || j->first[0]);
    bool comma = !j->after_key && !j->first[j->depth];
    j->first[j->depth] = false;
    j->after_key = false;
    return comma;
}

/* n plain bytes (a number, a literal, raw JSON, a bracket) after a comma
 * if due, all or nothing. */
static void json_write(struct tk_json *j, bool comma, const char *s, size_t n)
{
    if (!json_room(j, n + (size_t)comma))
        return;
    if (comma)
        json_put(j, ",", 1);
    json_put(j, s, n);
}

void tk_json_init(struct tk_json *j, char *buf, size_t cap)
{
    TK_ASSERT(buf != NULL);
    TK_ASSERT(cap >= 1);
    memset(j, 0, sizeof(*j));
    j->buf = buf;
    j->cap = cap;
    j->first[0] = true;
    buf[0] = '\0';
}

void tk_json_init_members(struct tk_json *j, char *buf, size_t cap)
{
    tk_json_init(j, buf, cap);
    j->depth = 1;
    j->first[1] = true;
    j->close[1] = '}';
}

/* ---- containers and keys ------------------------------------------------------- */

static void json_open(struct tk_json *j, char open, char close)
{
    TK_ASSERT(j->depth < TK_JSON_DEPTH_MAX);
    json_write(j, json_value_next(j), &open, 1);
    j->depth++;
    j->first[j->depth] = true;
    j->close[j->depth] = close;
}

static void json_close(struct tk_json *j, char close)
{
    TK_ASSERT(j->depth > 0);
    TK_ASSERT(j->close[j->depth] == close);
    TK_ASSERT(!j->after_key);
    json_write(j, false, &close, 1);
    j->depth--;
}

void tk_json_obj_open(struct tk_json *j)
{
    json_open(j, '{', '}');
}

void tk_json_obj_close(struct tk_json *j)
{
    json_close(j, '}');
}

void tk_json_arr_open(struct tk_json *j)
{
    json_open(j, '[', ']');
}

void tk_json_arr_close(struct tk_json *j)
{
    json_close(j, ']');
}

/* The escaped string, quotes included, after a comma if due and before
 * suffix (0: none), if it all fits; else nothing of it stays and the
 * writer fails. */
static void json_string(struct tk_json *j, bool comma, const char *s, size_t n, char suffix)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t at = j->len, tail = 1 + (suffix != 0); /* the closing quote and suffix */
    if (!json_room(j, (size_t)comma + 1 + tail))
        return;
    if (comma)
        json_put(j, ",", 1);
    json_put(j, "\"", 1);
    for (size_t i = 0; i < n;) {
        char esc[TK_JSON_ESCAPE_MAX];
        size_t used, elen = tk_json_escape_char(p + i, n - i, esc, &used);
        if (elen + tail >= j->cap - j->len) {
            j->len = at;
            j->buf[at] = '\0';
            j->failed = true;
            return;
        }
        json_put(j, esc, elen);
        i += used;
    }
    json_put(j, "\"", 1);
    if (suffix != 0)
        json_put(j, &suffix, 1);
}

void tk_json_key(struct tk_json *j, const char *name)
{
    TK_ASSERT(j->close[j->depth] == '}');
    TK_ASSERT(!j->after_key);
    bool comma = !j->first[j->depth];
    json_string(j, comma, name, strlen(name), ':');
    j->first[j->depth] = false;
    j->after_key = true;
}

/* ---- values ------------------------------------------------------------------------ */

/* A value made of n plain bytes (a number, a literal, raw JSON). */
static void json_plain(struct tk_json *j, const char *s, size_t n)
{
    json_write(j, json_value_next(j), s, n);
}

void tk_json_stringn(struct tk_json *j, const char *s, size_t n)
{
    json_string(j, json_value_next(j), s, n, 0);
}

void tk_json_string(struct tk_json *j, const char *s)
{
    if (s == NULL)
        tk_json_null(j);
    else
        tk_json_stringn(j, s, strlen(s));
}

void tk_json_uint(struct tk_json *j, uint64_t v)
{
    char d[20];
    size_t n = sizeof(d);
    do {
        d[--n] = (char)('0' + v % 10u);
        v /= 10u;
    } while (v != 0);
    json_plain(j, d + n, sizeof(d) - n);
}

void tk_json_int(struct tk_json *j, int64_t v)
{
    char d[21];
    size_t n = sizeof(d);
    /* The magnitude as unsigned: -INT64_MIN does not fit an int64_t. */
    uint64_t m = v < 0 ? 0u - (uint64_t)v : (uint64_t)v;
    do {
        d[--n] = (char)('0' + m % 10u);
        m /= 10u;
    } while (m != 0);
    if (v < 0)
        d[--n] = '-';
    json_plain(j, d + n, sizeof(d) - n);
}

void tk_json_bool(struct tk_json *j, bool v)
{
    if (v)
        json_plain(j, "true", 4);
    else
        json_plain(j, "false", 5);
}

void tk_json_null(struct tk_json *j)
{
    json_plain(j, "null", 4);
}

void tk_json_hex64(struct tk_json *j, uint64_t v)
{
    char d[18];
    d[0] = d[17] = '"';
    for (int i = 16; i >= 1; i--, v >>= 4)
        d[i] = hex_digits[v & 15u];
    json_plain(j, d, sizeof(d));
}

void tk_json_raw(struct tk_json *j, const char *json, size_t n)
{
    if (n == 0)
        return;
    if (j->after_key || j->close[j->depth] != '}') {
        json_plain(j, json, n);
        return;
    }
    /* Members of an object: a comma if this object has some already. */
    bool comma = !j->first[j->depth];
    j->first[j->depth] = false;
    json_write(j, comma, json, n);
}

void tk_json_kstr(struct tk_json *j, const char *name, const char *s)
{
    tk_json_key(j, name);
    tk_json_string(j, s);
}

void tk_json_kuint(struct tk_json *j, const char *name, uint64_t v)
{
    tk_json_key(j, name);
    tk_json_uint(j, v);
}

void tk_json_kint(struct tk_json *j, const char *name, int64_t v)
{
    tk_json_key(j, name);
    tk_json_int(j, v);
}

void tk_json_kbool(struct tk_json *j, const char *name, bool v)
{
    tk_json_key(j, name);
    tk_json_bool(j, v);
}

void tk_json_khex64(struct tk_json *j, const char *name, uint64_t v)
{
    tk_json_key(j, name);
    tk_json_hex64(j, v);
}

bool tk_json_ok(const struct tk_json *j)
{
    return !j->failed;
}

size_t tk_json_end(const struct tk_json *j)
{
    return j->failed || j->depth != 0 || j->after_key ? 0 : j->len;
}
