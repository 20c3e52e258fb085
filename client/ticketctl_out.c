/* ticketctl's --json output, on Jansson: every command builds its answer
 * as Jansson values and prints it with ctl_json_print().
 *
 * What goes into a string comes from the command line (a key, an owner),
 * from the library (a connection error) or from a server (addresses, a
 * membership note), and may hold any byte. Jansson takes UTF-8 only, so a
 * byte that is no part of a well-formed UTF-8 sequence is replaced by
 * U+FFFD first (core/json's test of a sequence, the server's own). The
 * output is compact and pure ASCII, and escaped as ticketctl always has:
 * '"' and '\' with a backslash, every control character and DEL as
 * \u00XX, any other non-ASCII character as \uXXXX (a surrogate pair past
 * U+FFFF), hex in lowercase.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/ticketctl.h"
#include "core/json.h"

json_t *ctl_jstrn(const char *s, size_t n)
{
    json_t *v = json_stringn(s, n);
    if (v != NULL)
        return v;
    /* Not UTF-8: at most 3 bytes (U+FFFD) for each byte replaced. */
    char *fixed = malloc(3 * n + 1);
    size_t len = 0;
    if (fixed == NULL)
        return json_null();
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        char esc[TK_JSON_ESCAPE_MAX];
        size_t used;
        size_t elen = tk_json_escape_char(p + i, n - i, esc, &used);
        if (p[i] >= 0x80 && used == 1 && elen == 6) { /* "\ufffd": no UTF-8 here */
            memcpy(fixed + len, "\xef\xbf\xbd", 3);
            len += 3;
        } else {
            memcpy(fixed + len, s + i, used);
            len += used;
        }
        i += used;
    }
    v = json_stringn(fixed, len);
    free(fixed);
    return v != NULL ? v : json_null();
}

json_t *ctl_jstr(const char *s)
{
    return s == NULL ? json_null() : ctl_jstrn(s, strlen(s));
}

json_t *ctl_ju64(uint64_t v)
{
    /* Jansson's integers are signed 64-bit; tokens, indexes and times
     * stay far below 2^63, and anything above would be no count we send. */
    return v <= (uint64_t)INT64_MAX ? json_integer((json_int_t)v) : json_null();
}

/* Writes Jansson's escapes as ticketctl's: lowercase hex, and \u00XX for
 * the controls Jansson writes as \b \f \n \r \t and for a raw DEL. */
static void put_escaped(FILE *f, const char *s)
{
    static const char shortcuts[] = "b\bf\fn\nr\rt\t";
    for (size_t i = 0; s[i] != '\0'; i++) {
        const char *sc;
        if (s[i] == 0x7f) {
            fputs("\\u007f", f);
        } else if (s[i] != '\\') {
            fputc(s[i], f);
        } else if (s[i + 1] == 'u') {
            fputs("\\u", f);
            for (size_t k = 2; k < 6 && s[i + k] != '\0'; k++)
                fputc(s[i + k] >= 'A' && s[i + k] <= 'F' ? s[i + k] - 'A' + 'a' : s[i + k], f);
            i += 5;
        } else if (s[i + 1] != '\0' && (sc = strchr(shortcuts, s[i + 1])) != NULL &&
                   (sc - shortcuts) % 2 == 0) {
            fprintf(f, "\\u%04x", (unsigned)(unsigned char)sc[1]);
            i++;
        } else {
            fputc(s[i], f);
            if (s[i + 1] != '\0')
                fputc(s[++i], f);
        }
    }
}

void ctl_json_print(FILE *f, json_t *v, const char *end)
{
    char *text =
        v != NULL ? json_dumps(v, JSON_COMPACT | JSON_ENSURE_ASCII | JSON_ENCODE_ANY) : NULL;
    put_escaped(f, text != NULL ? text : "null");
    fputs(end, f);
    free(text);
    json_decref(v);
}
