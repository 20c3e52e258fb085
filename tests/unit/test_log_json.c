/* The log line encoder of net/log.c (tk_log_format_line), without a
 * server: JSON lines must be one valid JSON object whatever the message
 * holds (quotes, backslashes, control bytes, bytes that are not UTF-8,
 * too many bytes), and text lines one line.
 *
 * The check is a strict decoder written here, independent of the
 * encoder: it accepts exactly {"ts":"..","level":"..","node":"..",
 * "msg":".."} and a "\n", JSON escapes only, well-formed UTF-8 only (no
 * overlong forms, surrogates or code points above U+10FFFF), and hands
 * back the decoded message for comparison. */
#include <criterion/criterion.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "net/log.h"

#define WALL_US UINT64_C(1767225600123456) /* 2026-01-01T00:00:00.123456Z */
#define NODE UINT64_C(0x00ab12cd34ef5678)

/* Appends code point cp as UTF-8. */
static size_t put_utf8(char *out, uint32_t cp)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | cp >> 12);
        out[1] = (char)(0x80 | (cp >> 6 & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | cp >> 18);
    out[1] = (char)(0x80 | (cp >> 12 & 0x3f));
    out[2] = (char)(0x80 | (cp >> 6 & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* Decodes one UTF-8 character at s (n bytes left) into *cp; its length or
 * 0 if it is not well-formed. */
static size_t get_utf8(const unsigned char *s, size_t n, uint32_t *cp)
{
    size_t len = s[0] < 0x80 ? 1 : s[0] >= 0xf0 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc0 ? 2 : 0;
    if (len == 0 || len > n)
        return 0;
    uint32_t v = len == 1 ? s[0] : (uint32_t)(s[0] & (0x7f >> len));
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        v = v << 6 | (s[i] & 0x3f);
    }
    static const uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
    if (v < min[len] || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
        return 0;
    *cp = v;
    return len;
}

/* Parses a JSON string at *p (after its opening quote) into out (decoded
 * UTF-8, NUL-terminated); advances *p past the closing quote. */
static bool get_string(const char **p, char *out, size_t cap)
{
    const unsigned char *s = (const unsigned char *)*p;
    size_t o = 0;
    while (*s != '"') {
        char tmp[4];
        size_t tlen;
        if (*s < 0x20) {
            return false;
        } else if (*s == '\\') {
            static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
            const char *e = s[1] ? strchr(from, s[1]) : NULL;
            if (e) {
                tmp[0] = to[e - from];
                tlen = 1;
                s += 2;
            } else if (s[1] == 'u') {
                uint32_t cp = 0;
                for (int i = 2; i < 6; i++) {
                    unsigned char h = s[i];
                    int d = h >= '0' && h <= '9'   ? h - '0'
                            : h >= 'a' && h <= 'f' ? h - 'a' + 10
                            : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                                   : -1;
                    if (d < 0)
                        return false;
                    cp = cp << 4 | (uint32_t)d;
                }
                if (cp >= 0xd800 && cp <= 0xdfff) /* the encoder never pairs */
                    return false;
                tlen = put_utf8(tmp, cp);
                s += 6;
            } else {
                return false;
            }
        } else {
            uint32_t cp;
            tlen = get_utf8(s, strlen((const char *)s), &cp);
            if (tlen == 0)
                return false;
            memcpy(tmp, s, tlen);
            s += tlen;
        }
        if (o + tlen >= cap)
            return false;
        memcpy(out + o, tmp, tlen);
        o += tlen;
    }
    out[o] = 0;
    *p = (const char *)s + 1;
    return true;
}

struct parsed {
    char ts[64], level[16], node[32], msg[4096];
};

/* The strict check of one line of len bytes; fills r. */
static bool parse_line(const char *line, size_t len, struct parsed *r)
{
    static char buf[8192];
    if (len == 0 || len >= sizeof(buf) || line[len - 1] != '\n' || memchr(line, 0, len))
        return false;
    memcpy(buf, line, len);
    buf[len] = 0;
    if (strchr(buf, '\n') != buf + len - 1)
        return false;
    static const char *const keys[] = {"ts", "level", "node", "msg"};
    char *vals[] = {r->ts, r->level, r->node, r->msg};
    size_t caps[] = {sizeof(r->ts), sizeof(r->level), sizeof(r->node), sizeof(r->msg)};
    const char *p = buf;
    if (*p++ != '{')
        return false;
    for (int i = 0; i < 4; i++) {
        char key[16];
        if ((i > 0 && *p++ != ',') || *p++ != '"' || !get_string(&p, key, sizeof(key)) ||
            strcmp(key, keys[i]) != 0 || *p++ != ':' || *p++ != '"' ||
            !get_string(&p, vals[i], caps[i]))
            return false;
    }
    return p[0] == '}' && p[1] == '\n' && p[2] == 0;
}

static size_t json(char *out, size_t cap, const char *msg, size_t len)
{
    return tk_log_format_line(out, cap, TK_LOG_JSON, WALL_US, TK_LOG_WARN, NODE, msg, len);
}

/* Encodes msg, checks the line, returns the decoded message. */
static const char *roundtrip(const char *msg, size_t len)
{
    static char line[TK_LOG_LINE_MAX];
    static struct parsed r;
    size_t n = json(line, sizeof(line), msg, len);
    cr_assert_leq(n, TK_LOG_LINE_MAX);
    cr_assert(parse_line(line, n, &r), "not a valid log line: %.*s", (int)n, line);
    cr_assert_str_eq(r.ts, "2026-01-01T00:00:00.123Z");
    cr_assert_str_eq(r.level, "warn");
    cr_assert_str_eq(r.node, "00ab12cd34ef5678");
    return r.msg;
}

Test(log_json, a_plain_message_as_is)
{
    char line[TK_LOG_LINE_MAX];
    const char *msg = "leading term 2 from index 2";
    size_t n = json(line, sizeof(line), msg, strlen(msg));
    const char *want =
        "{\"ts\":\"2026-01-01T00:00:00.123Z\",\"level\":\"warn\",\"node\":\"00ab12cd34ef5678\","
        "\"msg\":\"leading term 2 from index 2\"}\n";
    cr_assert_eq(n, strlen(want));
    cr_assert(memcmp(line, want, n) == 0, "%.*s", (int)n, line);
    cr_assert_str_eq(roundtrip(msg, strlen(msg)), msg);
}

Test(log_json, quotes_and_backslashes_are_escaped)
{
    const char *msg = "peer \"a\\b\" said \\\"";
    cr_assert_str_eq(roundtrip(msg, strlen(msg)), msg);
    char line[TK_LOG_LINE_MAX];
    size_t n = json(line, sizeof(line), "\"\\", 2);
    cr_assert(memmem(line, n, "\"msg\":\"\\\"\\\\\"}", 13) != NULL, "%.*s", (int)n, line);
}

Test(log_json, control_bytes_as_u00xx)
{
    const char msg[] = "a\x01\n\t\r\x1f\x7f\x00z";
    size_t len = sizeof(msg) - 1;
    char line[TK_LOG_LINE_MAX];
    size_t n = json(line, sizeof(line), msg, len);
    const char *want = "\"msg\":\"a\\u0001\\u000a\\u0009\\u000d\\u001f\\u007f\\u0000z\"}\n";
    cr_assert(memmem(line, n, want, strlen(want)) != NULL, "%.*s", (int)n, line);
    struct parsed r;
    cr_assert(parse_line(line, n, &r));
}

Test(log_json, invalid_utf8_becomes_u_fffd)
{
    static const struct {
        const char *in, *out;
    } cases[] = {
        {"\xff", "\xef\xbf\xbd"},                                                 /* never valid */
        {"\xc0\xaf", "\xef\xbf\xbd\xef\xbf\xbd"},                                 /* overlong '/' */
        {"\xe0\x80\xaf", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},                 /* overlong */
        {"\xed\xa0\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},                 /* surrogate */
        {"\xf4\x90\x80\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, /* > U+10FFFF */
        {"x\xe2\x82", "x\xef\xbf\xbd\xef\xbf\xbd"},                               /* cut short */
        {"\x80z", "\xef\xbf\xbdz"}, /* lone continuation */
        {"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        cr_assert_str_eq(roundtrip(cases[i].in, strlen(cases[i].in)), cases[i].out, "case %zu", i);
}

Test(log_json, an_overlong_message_is_cut_whole)
{
    static char msg[5000];
    /* Plain bytes, bytes that double when escaped, six-fold ones, and
     * multi-byte characters: the cut never splits an escape or a
     * character, and the line stays within TK_LOG_LINE_MAX. */
    const char *fills[] = {"a", "\"", "\\", "\x01", "\xe2\x82\xac", "\xff", "\xf0\x9f\x98\x80"};
    for (size_t f = 0; f < sizeof(fills) / sizeof(fills[0]); f++) {
        size_t flen = strlen(fills[f]), len = 0;
        while (len + flen <= sizeof(msg)) {
            memcpy(msg + len, fills[f], flen);
            len += flen;
        }
        const char *got = roundtrip(msg, len);
        size_t glen = strlen(got);
        cr_assert_gt(glen, 100, "fill %zu: only %zu bytes kept", f, glen);
        cr_assert_str_eq(got + glen - 3, "...", "fill %zu", f);
    }
}

Test(log_json, random_bytes_always_give_a_valid_line)
{
    uint64_t x = 0x9e3779b97f4a7c15u;
    static char msg[1600];
    for (int iter = 0; iter < 20000; iter++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        size_t len = (size_t)(x % sizeof(msg));
        bool ascii = iter % 2 == 0;
        for (size_t i = 0; i < len; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            msg[i] = ascii ? (char)(0x20 + x % 95) : (char)(x >> 24);
        }
        const char *got = roundtrip(msg, len);
        if (!ascii)
            continue;
        /* Printable ASCII comes back as it was, or cut with "...". */
        size_t glen = strlen(got);
        if (glen == len && memcmp(got, msg, len) == 0)
            continue;
        cr_assert(glen >= 3 && !strcmp(got + glen - 3, "...") && glen - 3 < len &&
                      memcmp(got, msg, glen - 3) == 0,
                  "iteration %d: message changed", iter);
    }
}

Test(log_json, a_small_buffer_still_gives_a_valid_line)
{
    char line[128];
    const char *msg =
        "a message longer than what is left of a 128-byte buffer after the "
        "keys, the time stamp and the node id";
    size_t n = json(line, sizeof(line), msg, strlen(msg));
    cr_assert_leq(n, sizeof(line));
    struct parsed r;
    cr_assert(parse_line(line, n, &r), "%.*s", (int)n, line);
}

Test(log_text, one_event_one_line)
{
    char line[TK_LOG_LINE_MAX];
    const char msg[] = "two\nlines\x1b[31m \"quoted\"";
    size_t n = tk_log_format_line(line, sizeof(line), TK_LOG_TEXT, WALL_US, TK_LOG_INFO, NODE, msg,
                                  sizeof(msg) - 1);
    const char *want =
        "2026-01-01T00:00:00.123Z info node=00ab12cd34ef5678 two\\x0alines\\x1b[31m \"quoted\"\n";
    cr_assert_eq(n, strlen(want), "%.*s", (int)n, line);
    cr_assert(memcmp(line, want, n) == 0, "%.*s", (int)n, line);

    static char big[3000];
    memset(big, 'x', sizeof(big));
    n = tk_log_format_line(line, sizeof(line), TK_LOG_TEXT, WALL_US, TK_LOG_INFO, NODE, big,
                           sizeof(big));
    cr_assert_leq(n, TK_LOG_LINE_MAX);
    cr_assert_eq(memchr(line, '\n', n), line + n - 1);
    cr_assert(memcmp(line + n - 4, "...\n", 4) == 0);
}
