/* ticketctl's JSON output: the one encoder every --json command prints
 * through, and the check that a server's /status body is JSON before
 * status copies it into its own output.
 *
 * What goes into a string comes from the command line (a key, an owner),
 * from the library (a connection error) or from a server (addresses, a
 * membership note), and may hold any byte. The output stays valid JSON
 * whatever they hold, and pure ASCII: '"' and '\' are escaped, control
 * characters and DEL become \u00XX, a well-formed UTF-8 sequence becomes
 * its \uXXXX escape (a surrogate pair past U+FFFF), and a byte that is no
 * part of one becomes \ufffd (the replacement character).
 */
#include <stdio.h>
#include <string.h>

#include "client/ticketctl.h"

/* The code point of the UTF-8 sequence at s (at most n bytes) and its
 * length; 0 if it is not a well-formed one (overlong forms, surrogates
 * and code points past U+10FFFF are not). */
static size_t utf8_seq(const unsigned char *s, size_t n, uint32_t *cp)
{
    size_t len;
    uint32_t v, min;
    if (s[0] >= 0xC2 && s[0] <= 0xDF) {
        len = 2;
        v = s[0] & 0x1Fu;
        min = 0x80;
    } else if (s[0] >= 0xE0 && s[0] <= 0xEF) {
        len = 3;
        v = s[0] & 0x0Fu;
        min = 0x800;
    } else if (s[0] >= 0xF0 && s[0] <= 0xF4) {
        len = 4;
        v = s[0] & 0x07u;
        min = 0x10000;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        v = v << 6 | (s[i] & 0x3Fu);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v < 0xE000))
        return 0;
    *cp = v;
    return len;
}

void ctl_json_strn(FILE *f, const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    fputc('"', f);
    for (size_t i = 0; i < n;) {
        unsigned char c = p[i];
        uint32_t cp;
        size_t len;
        if (c == '"' || c == '\\') {
            fputc('\\', f);
            fputc(c, f);
            i++;
        } else if (c >= 0x20 && c < 0x7F) {
            fputc(c, f);
            i++;
        } else if (c < 0x80) { /* controls and DEL */
            fprintf(f, "\\u%04x", c);
            i++;
        } else if ((len = utf8_seq(p + i, n - i, &cp)) == 0) {
            fputs("\\ufffd", f);
            i++;
        } else {
            if (cp >= 0x10000)
                fprintf(f, "\\u%04x\\u%04x", 0xD800u + ((cp - 0x10000) >> 10),
                        0xDC00u + ((cp - 0x10000) & 0x3FFu));
            else
                fprintf(f, "\\u%04x", cp);
            i += len;
        }
    }
    fputc('"', f);
}

void ctl_json_str(FILE *f, const char *s)
{
    if (s == NULL)
        fputs("null", f);
    else
        ctl_json_strn(f, s, strlen(s));
}

/* The name of the next member of an object, after a comma unless it is the first. */
static void key(FILE *f, bool *first, const char *name)
{
    if (!*first)
        fputc(',', f);
    *first = false;
    ctl_json_str(f, name);
    fputc(':', f);
}

void ctl_json_kstr(FILE *f, bool *first, const char *name, const char *value)
{
    key(f, first, name);
    ctl_json_str(f, value);
}

void ctl_json_ku64(FILE *f, bool *first, const char *name, uint64_t value)
{
    key(f, first, name);
    fprintf(f, "%llu", (unsigned long long)value);
}

void ctl_json_kint(FILE *f, bool *first, const char *name, bool has, int64_t value)
{
    key(f, first, name);
    if (has)
        fprintf(f, "%lld", (long long)value);
    else
        fputs("null", f);
}

void ctl_json_kbool(FILE *f, bool *first, const char *name, bool value)
{
    key(f, first, name);
    fputs(value ? "true" : "false", f);
}

void ctl_json_kraw(FILE *f, bool *first, const char *name, const char *json)
{
    key(f, first, name);
    fputs(ctl_json_valid(json) ? json : "null", f);
}

/* ---- the check -------------------------------------------------------------------- */

/* RFC 8259 to the letter, recursion bounded: a server's body is copied
 * only if a strict reader would take it. */
#define VALID_DEPTH_MAX 64

static const char *v_value(const char *p, int depth);

static const char *v_ws(const char *p)
{
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
        p++;
    return p;
}

static const char *v_string(const char *p)
{
    const unsigned char *u = (const unsigned char *)p + 1;
    for (;;) {
        uint32_t cp;
        size_t len;
        if (*u == '"')
            return (const char *)u + 1;
        if (*u < 0x20)
            return NULL; /* a control, or the end of the text */
        if (*u == '\\') {
            u++;
            if (*u == 'u') {
                for (int i = 1; i <= 4; i++)
                    if (strchr("0123456789abcdefABCDEF", u[i]) == NULL || u[i] == '\0')
                        return NULL;
                u += 5;
            } else if (*u != '\0' && strchr("\"\\/bfnrt", *u) != NULL) {
                u++;
            } else {
                return NULL;
            }
        } else if (*u < 0x80) {
            u++;
        } else if ((len = utf8_seq(u, strlen((const char *)u), &cp)) != 0) {
            u += len;
        } else {
            return NULL;
        }
    }
}

static const char *v_digits(const char *p)
{
    if (*p < '0' || *p > '9')
        return NULL;
    while (*p >= '0' && *p <= '9')
        p++;
    return p;
}

static const char *v_number(const char *p)
{
    if (*p == '-')
        p++;
    if (*p == '0')
        p++;
    else if ((p = v_digits(p)) == NULL)
        return NULL;
    if (*p == '.' && (p = v_digits(p + 1)) == NULL)
        return NULL;
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-')
            p++;
        p = v_digits(p);
    }
    return p;
}

/* An object or an array, at its opening bracket. */
static const char *v_container(const char *p, int depth)
{
    char close = *p == '{' ? '}' : ']';
    p = v_ws(p + 1);
    if (*p == close)
        return p + 1;
    for (;;) {
        if (close == '}') {
            if (*p != '"' || (p = v_string(p)) == NULL)
                return NULL;
            p = v_ws(p);
            if (*p != ':')
                return NULL;
            p++;
        }
        if ((p = v_value(p, depth + 1)) == NULL)
            return NULL;
        if (*p == close)
            return p + 1;
        if (*p != ',')
            return NULL;
        p = v_ws(p + 1);
    }
}

/* A value and the whitespace after it; NULL if there is none. */
static const char *v_value(const char *p, int depth)
{
    p = v_ws(p);
    if (depth > VALID_DEPTH_MAX)
        return NULL;
    if (*p == '"')
        p = v_string(p);
    else if (*p == '{' || *p == '[')
        p = v_container(p, depth);
    else if (!strncmp(p, "true", 4))
        p += 4;
    else if (!strncmp(p, "false", 5))
        p += 5;
    else if (!strncmp(p, "null", 4))
        p += 4;
    else
        p = v_number(p);
    return p == NULL ? NULL : v_ws(p);
}

bool ctl_json_valid(const char *s)
{
    const char *end = v_value(s, 0);
    return end != NULL && *end == '\0';
}
