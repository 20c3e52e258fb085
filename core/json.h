/* The JSON writer every JSON text of ticketingd goes through (/status,
 * /members, the JSON log lines): values appended to a caller's bounded
 * buffer, strings always escaped.
 *
 * Pure: no I/O, no allocation; the caller owns the buffer and the writer,
 * and one writer belongs to one thread at a time.
 *
 * Strings. Any bytes go in and valid JSON in UTF-8 comes out: '"' and '\'
 * are escaped with a backslash, the control characters U+0000..U+001F and
 * DEL become \u00XX (lowercase hex), a well-formed UTF-8 sequence (RFC 3629:
 * no overlong forms, no surrogates, nothing past U+10FFFF) passes through
 * as it is, and any other byte of 0x80 or more becomes \ufffd, the
 * replacement character. So a string is never cut inside a character and a
 * reader that wants UTF-8 always gets it; '/' is not escaped.
 *
 * Overflow. Each append is all or nothing: a value, key or piece of raw
 * JSON that does not fit whole is not written, and from then on the
 * writer is failed (tk_json_ok() false) and writes nothing more. The
 * buffer then holds a prefix of the document that ends on a whole token
 * (still NUL-terminated), which is not valid JSON: a caller that sized its
 * buffer for the worst case asserts tk_json_ok(); any other caller must
 * not send a failed document.
 */
#ifndef TK_CORE_JSON_H
#define TK_CORE_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Objects and arrays nest at most this deep. */
#define TK_JSON_DEPTH_MAX 16
/* The longest escape of one input byte ("\u00XX"). */
#define TK_JSON_ESCAPE_MAX 6
/* Bytes a string of n input bytes takes at most, quotes included. */
#define TK_JSON_STR_MAX(n) (TK_JSON_ESCAPE_MAX * (size_t)(n) + 2)

struct tk_json {
    char *buf;
    size_t cap; /* buf's size; one byte is kept for the NUL */
    size_t len; /* bytes written, the NUL not counted */
    bool failed;
    bool after_key;                    /* a key was written; its value comes next */
    uint32_t depth;                    /* containers open */
    bool first[TK_JSON_DEPTH_MAX + 1]; /* per level: nothing written in it yet */
    char close[TK_JSON_DEPTH_MAX + 1]; /* per level: '}' or ']' (0 at the top) */
};

/* A writer of one document into buf (cap >= 1 bytes, kept NUL-terminated). */
void tk_json_init(struct tk_json *j, char *buf, size_t cap);
/* A writer of the members of an object without its braces, for
 * tk_json_raw() to put into an object later: keys and values as inside an
 * open object, at level 1; tk_json_end() is not called on it. */
void tk_json_init_members(struct tk_json *j, char *buf, size_t cap);

void tk_json_obj_open(struct tk_json *j);
void tk_json_obj_close(struct tk_json *j);
void tk_json_arr_open(struct tk_json *j);
void tk_json_arr_close(struct tk_json *j);
/* The name of the next member of the open object. */
void tk_json_key(struct tk_json *j, const char *name);

/* Values: in an array, or after tk_json_key(), or alone at the top. */
void tk_json_stringn(struct tk_json *j, const char *s, size_t n);
void tk_json_string(struct tk_json *j, const char *s); /* NULL: null */
void tk_json_uint(struct tk_json *j, uint64_t v);
void tk_json_int(struct tk_json *j, int64_t v);
void tk_json_bool(struct tk_json *j, bool v);
void tk_json_null(struct tk_json *j);
/* v as a string of 16 lowercase hex digits (how NodeIds are written). */
void tk_json_hex64(struct tk_json *j, uint64_t v);
/* n bytes of JSON written elsewhere, copied as they are: one value where a
 * value goes, or (inside an object, no key pending) the members another
 * writer made with tk_json_init_members(); n == 0 writes nothing. The
 * caller vouches for them; the writer only adds the comma. */
void tk_json_raw(struct tk_json *j, const char *json, size_t n);

/* Key and value in one call. */
void tk_json_kstr(struct tk_json *j, const char *name, const char *s);
void tk_json_kuint(struct tk_json *j, const char *name, uint64_t v);
void tk_json_kint(struct tk_json *j, const char *name, int64_t v);
void tk_json_kbool(struct tk_json *j, const char *name, bool v);
void tk_json_khex64(struct tk_json *j, const char *name, uint64_t v);

/* Whether everything so far fit. */
bool tk_json_ok(const struct tk_json *j);
/* The document's length if it is whole (every container closed) and
 * everything fit; 0 otherwise. */
size_t tk_json_end(const struct tk_json *j);

/* The escape of the character at p (n >= 1 bytes left) into out, as the
 * strings above are escaped: returns the escape's length (1 to
 * TK_JSON_ESCAPE_MAX) and sets *used to the input bytes it stands for (1
 * to 4). For writers that cut a string at a whole character (the log). */
size_t tk_json_escape_char(const unsigned char *p, size_t n, char *out, size_t *used);

#endif
