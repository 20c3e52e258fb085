/* Goal: core/json's writer always produces valid JSON whatever its strings
 * hold, escapes exactly as json.h says, and on overflow keeps a whole-token
 * prefix and writes nothing more.
 *
 * Method: exact expected bytes for the escapes; every byte value 0..255 in
 * keys and values, checked by a strict reader (Jansson, which rejects
 * invalid UTF-8 and raw control characters) and decoded back; documents
 * written into every buffer size from 1 up to their length, each either
 * whole or failed with a prefix of the whole one. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <signal.h>
#include <string.h>

#include "core/json.h"

/* ---- fixture ------------------------------------------------------------------- */

static char buf[8192];
static struct tk_json j;

/* ---- helpers ------------------------------------------------------------------- */

/* s (n bytes) as a JSON document of one string; its length, 0 if it failed. */
static size_t one_string(const char *s, size_t n)
{
    tk_json_init(&j, buf, sizeof(buf));
    tk_json_stringn(&j, s, n);
    return tk_json_end(&j);
}

/* A document with every kind of value, nested, into cap bytes of buf. */
static size_t sample(size_t cap)
{
    tk_json_init(&j, buf, cap);
    tk_json_obj_open(&j);
    tk_json_khex64(&j, "id", 0x00ab12cd34ef5678u);
    tk_json_kstr(&j, "addr", "h\"o\\st:7400");
    tk_json_kuint(&j, "big", UINT64_MAX);
    tk_json_kint(&j, "neg", INT64_MIN);
    tk_json_kbool(&j, "ok", true);
    tk_json_key(&j, "none");
    tk_json_null(&j);
    tk_json_key(&j, "list");
    tk_json_arr_open(&j);
    tk_json_uint(&j, 1);
    tk_json_string(&j, "\x01\n");
    tk_json_obj_open(&j);
    tk_json_obj_close(&j);
    tk_json_arr_close(&j);
    tk_json_obj_close(&j);
    return tk_json_end(&j);
}

/* ---- assertion macros ---------------------------------------------------------- */

#define assert_doc(want)                                                \
    do {                                                                \
        size_t len_ = tk_json_end(&j);                                  \
        cr_assert_eq(len_, strlen(want), "got %s, want %s", buf, want); \
        cr_assert_str_eq(buf, want);                                    \
    } while (0)

/* ---- tests ----------------------------------------------------------------------- */

Test(json, escapes_quotes_backslashes_and_controls)
{
    one_string("a\"b\\c/d", 7);
    assert_doc("\"a\\\"b\\\\c/d\"");
    one_string("\x00\x01\n\t\x1f\x7f", 6);
    assert_doc("\"\\u0000\\u0001\\u000a\\u0009\\u001f\\u007f\"");
}

Test(json, utf8_passes_and_other_high_bytes_become_replacement)
{
    /* é, €, U+1F600: well-formed, kept as they are. */
    one_string("\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 9);
    assert_doc("\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"");
    /* A lone continuation byte, an overlong '/', a surrogate, past U+10FFFF,
     * a sequence cut short by the end. */
    one_string("\x80|\xc0\xaf|\xed\xa0\x80|\xf4\x90\x80\x80|\xe2\x82", 16);
    assert_doc(
        "\"\\ufffd|\\ufffd\\ufffd|\\ufffd\\ufffd\\ufffd|\\ufffd\\ufffd\\ufffd\\ufffd|"
        "\\ufffd\\ufffd\"");
}

Test(json, every_byte_in_keys_and_values_reads_back)
{
    for (int c = 0; c < 256; c++) {
        char s[3] = {'x', (char)c, 'y'};
        tk_json_init(&j, buf, sizeof(buf));
        tk_json_obj_open(&j);
        tk_json_key(&j, (char[]){(char)(c ? c : 'k'), 0});
        tk_json_stringn(&j, s, 3);
        tk_json_obj_close(&j);
        size_t len = tk_json_end(&j);
        cr_assert_gt(len, 0);
        json_error_t err;
        json_t *v = json_loadb(buf, len, JSON_ALLOW_NUL, &err);
        cr_assert(v != NULL, "byte %#x: %s: %s", c, err.text, buf);
        const char *key;
        json_t *val;
        json_object_foreach(v, key, val)
        {
            const char *got = json_string_value(val);
            size_t n = json_string_length(val);
            if (c < 0x80) {
                cr_assert_eq(n, 3);
                cr_assert_eq(memcmp(got, s, 3), 0, "byte %#x", c);
                cr_assert_eq((unsigned char)key[0], c ? c : 'k');
            } else {
                cr_assert_str_eq(got, "x\xef\xbf\xbdy", "byte %#x", c);
            }
        }
        json_decref(v);
    }
}

Test(json, values_and_containers)
{
    size_t len = sample(sizeof(buf));
    cr_assert_gt(len, 0);
    assert_doc(
        "{\"id\":\"00ab12cd34ef5678\",\"addr\":\"h\\\"o\\\\st:7400\","
        "\"big\":18446744073709551615,\"neg\":-9223372036854775808,\"ok\":true,"
        "\"none\":null,\"list\":[1,\"\\u0001\\u000a\",{}]}");
}

Test(json, members_spliced_into_an_object)
{
    static char part[256];
    struct tk_json m;
    tk_json_init_members(&m, part, sizeof(part));
    tk_json_kstr(&m, "role", "leader");
    tk_json_kuint(&m, "term", 3);
    tk_json_init(&j, buf, sizeof(buf));
    tk_json_obj_open(&j);
    tk_json_kstr(&j, "node", "a");
    tk_json_raw(&j, part, m.len);
    tk_json_raw(&j, "", 0);
    tk_json_key(&j, "x");
    tk_json_raw(&j, "[1]", 3);
    tk_json_obj_close(&j);
    assert_doc("{\"node\":\"a\",\"role\":\"leader\",\"term\":3,\"x\":[1]}");
}

Test(json, overflow_keeps_a_whole_token_prefix_and_stops)
{
    static char whole[8192];
    size_t len = sample(sizeof(buf));
    memcpy(whole, buf, len + 1);
    for (size_t cap = 1; cap <= len + 1; cap++) {
        memset(buf, 'Z', sizeof(buf));
        size_t got = sample(cap);
        size_t at = strlen(buf);
        cr_assert_lt(at, cap, "cap %zu: past the buffer", cap);
        cr_assert_eq(memcmp(buf, whole, at), 0, "cap %zu: %s is no prefix", cap, buf);
        if (cap == len + 1) {
            cr_assert_eq(got, len, "cap %zu: did not fit exactly", cap);
            cr_assert(tk_json_ok(&j));
            continue;
        }
        cr_assert_eq(got, 0, "cap %zu: a cut document counted as whole", cap);
        cr_assert(!tk_json_ok(&j));
        cr_assert_eq(buf[cap], 'Z', "cap %zu: wrote past cap", cap);
        /* A whole token: never inside a string (its quotes pair up) or a number. */
        int quotes = 0;
        for (size_t k = 0; k < at; k++)
            if (buf[k] == '\\')
                k++;
            else
                quotes += buf[k] == '"';
        cr_assert_eq(quotes % 2, 0, "cap %zu: cut inside a string: %s", cap, buf);
        bool digit_before = at > 0 && buf[at - 1] >= '0' && buf[at - 1] <= '9';
        cr_assert(!digit_before || whole[at] < '0' || whole[at] > '9',
                  "cap %zu: cut inside a number: %s", cap, buf);
    }
}

Test(json, nothing_after_a_failure)
{
    tk_json_init(&j, buf, 8);
    tk_json_arr_open(&j);
    tk_json_string(&j, "too long for it");
    cr_assert(!tk_json_ok(&j));
    tk_json_uint(&j, 1); /* would fit, but the writer failed */
    cr_assert_str_eq(buf, "[");
    cr_assert_eq(tk_json_end(&j), 0);
}

Test(json, a_string_that_does_not_fit_leaves_nothing)
{
    tk_json_init(&j, buf, 12);
    tk_json_arr_open(&j);
    tk_json_uint(&j, 7);
    tk_json_stringn(&j, "\x01\x02", 2); /* ,"\u0001\u0002" is 15 bytes */
    cr_assert_str_eq(buf, "[7");
    cr_assert(!tk_json_ok(&j));
}

Test(json, unclosed_is_not_a_document)
{
    tk_json_init(&j, buf, sizeof(buf));
    tk_json_obj_open(&j);
    tk_json_kstr(&j, "a", "b");
    cr_assert(tk_json_ok(&j));
    cr_assert_eq(tk_json_end(&j), 0);
}

Test(json, a_value_without_its_key_in_an_object_asserts, .signal = SIGABRT)
{
    tk_json_init(&j, buf, sizeof(buf));
    tk_json_obj_open(&j);
    tk_json_uint(&j, 1);
}

Test(json, nesting_past_the_bound_asserts, .signal = SIGABRT)
{
    tk_json_init(&j, buf, sizeof(buf));
    for (int i = 0; i <= TK_JSON_DEPTH_MAX; i++)
        tk_json_arr_open(&j);
}

Test(json, escape_char_bounds)
{
    char out[TK_JSON_ESCAPE_MAX];
    size_t used;
    cr_assert_eq(tk_json_escape_char((const unsigned char *)"\xf0\x9f\x98\x80", 4, out, &used), 4);
    cr_assert_eq(used, 4);
    cr_assert_eq(tk_json_escape_char((const unsigned char *)"\xf0\x9f\x98\x80", 3, out, &used), 6);
    cr_assert_eq(used, 1);
    cr_assert_eq(TK_JSON_STR_MAX(3), 20);
}
