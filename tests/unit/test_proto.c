/* Goal: the client line protocol obeys SPEC 2-5 exactly: every field rule on
 * both sides of every limit, each E reason word, the precedence between
 * several faults documented in core/proto.h, and format/parse round trips
 * for every request, response and handshake line.
 *
 * Method: each line is copied into a heap block of exactly its length before
 * it is parsed, so under ASan any read past len is caught. A randomized test
 * mutates valid lines and compares the parser with a slow reference
 * classifier written independently below; an accepted line must be in
 * canonical form, i.e. equal to what the formatter writes for its fields.
 * The seed comes from TK_SEED (a fresh one otherwise) and is printed with
 * every failure.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/cmd.h"
#include "core/proto.h"

/* ---- fixture ------------------------------------------------------------ */

/* Parsed key and owner are copied here, since the line copy they point into
 * is freed at once. */
static char key_seen[TK_LINE_MAX * 8];
static char owner_seen[TK_LINE_MAX * 8];

/* ---- parameters --------------------------------------------------------- */

#define U64_MAX_STR "18446744073709551615"
#define U64_OVER_STR "18446744073709551616" /* u64 max + 1 */
#define FUZZ_ROUNDS 200000
#define ANY_ID 0x5eed5eed5eed5eedull /* OK(): accepted, id not checked */

/* ---- helpers ------------------------------------------------------------ */

/* Printable form of a line for failure messages. */
static const char *show(const char *s, size_t n)
{
    static char out[4 * 1100 + 8];
    size_t o = 0;
    for (size_t i = 0; i < n && o + 8 < sizeof out; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c < 0x7f && c != '\\')
            out[o++] = (char)c;
        else
            o += (size_t)snprintf(out + o, sizeof out - o, "\\x%02x", c);
    }
    if (o + 8 >= sizeof out)
        o += (size_t)snprintf(out + o, sizeof out - o, "...");
    out[o] = '\0';
    return out;
}

/* Parses n bytes from an exactly sized heap copy. */
static enum tk_parse_status parse_n(const char *s, size_t n, struct tk_request *req)
{
    char *copy = malloc(n ? n : 1);
    cr_assert(copy != NULL);
    memcpy(copy, s, n);
    enum tk_parse_status st = tk_proto_parse(copy, n, req);
    if (st == TK_PARSE_OK && req->key != NULL) {
        cr_assert(req->key >= copy && req->key + req->key_len <= copy + n, "key outside line");
        memcpy(key_seen, req->key, req->key_len);
        req->key = key_seen;
    }
    if (st == TK_PARSE_OK && req->owner != NULL) {
        cr_assert(req->owner >= copy && req->owner + req->owner_len <= copy + n);
        memcpy(owner_seen, req->owner, req->owner_len);
        req->owner = owner_seen;
    }
    free(copy);
    return st;
}

static void check_n(const char *s,
                    size_t n,
                    enum tk_parse_status want,
                    uint64_t id,
                    enum tk_reason reason,
                    int at)
{
    struct tk_request req;
    enum tk_parse_status st = parse_n(s, n, &req);
    cr_assert_eq(st, want, "line %d: \"%s\": status %d, want %d (reason %s)", at, show(s, n), st,
                 want, tk_reason_str(req.reason));
    if (want == TK_PARSE_FATAL) {
        cr_assert_eq(req.reason, TK_REASON_SYNTAX, "line %d: \"%s\"", at, show(s, n));
        return;
    }
    if (want == TK_PARSE_OK && id == ANY_ID) {
        cr_assert_eq(req.reason, TK_REASON_NONE);
        return;
    }
    cr_assert_eq(req.id, id, "line %d: \"%s\": id %llu, want %llu", at, show(s, n),
                 (unsigned long long)req.id, (unsigned long long)id);
    cr_assert_eq(req.reason, reason, "line %d: \"%s\": reason %s, want %s", at, show(s, n),
                 tk_reason_str(req.reason), tk_reason_str(reason));
}

/* ---- assertion macros ------------------------------------------------------ */

#define OK(s) check_n((s), sizeof(s) - 1, TK_PARSE_OK, ANY_ID, TK_REASON_NONE, __LINE__)
#define OK_ID(s, id) check_n((s), sizeof(s) - 1, TK_PARSE_OK, (id), TK_REASON_NONE, __LINE__)
#define REJECT(s, id, r) check_n((s), sizeof(s) - 1, TK_PARSE_REJECT, (id), (r), __LINE__)
#define FATAL(s) check_n((s), sizeof(s) - 1, TK_PARSE_FATAL, 0, TK_REASON_NONE, __LINE__)
/* For lines built at run time. */
#define CHECK_BUF(b, n, st, id, r) check_n((b), (n), (st), (id), (r), __LINE__)

/* ---- slots ----------------------------------------------------------------- */

/* SPEC 15's test vectors: the slot of a key is part of the protocol. */
Test(proto_slot, spec_vectors)
{
    static const struct {
        const char *key;
        uint32_t slot;
    } v[] = {
        {"a", 11404},
        {"show-42", 11909},
        {"show-42:seat-17", 10735},
        {"inventory/2026-12-24/hall-B", 10740},
    };
    for (size_t i = 0; i < TK_ARRAY_LEN(v); i++)
        cr_expect_eq(tk_slot(v[i].key, strlen(v[i].key)), v[i].slot, "slot of %s", v[i].key);
    char tildes[TK_KEY_LEN_MAX];
    memset(tildes, '~', sizeof(tildes));
    cr_expect_eq(tk_slot(tildes, sizeof(tildes)), 9293);
    /* Every byte counts, the last one too. */
    cr_expect_neq(tk_slot("show-42", 7), tk_slot("show-43", 7));
}

/* ---- numbers --------------------------------------------------------------- */

Test(proto_u64, limits_and_shapes)
{
    uint64_t v = 7;
    cr_assert(tk_proto_parse_u64("0", 1, &v) && v == 0);
    cr_assert(tk_proto_parse_u64("1", 1, &v) && v == 1);
    cr_assert(tk_proto_parse_u64(U64_MAX_STR, 20, &v) && v == UINT64_MAX);
    cr_assert(tk_proto_parse_u64("9999999999999999999", 19, &v) && v == 9999999999999999999ull);
    cr_assert_not(tk_proto_parse_u64(U64_OVER_STR, 20, &v));
    cr_assert_not(tk_proto_parse_u64("99999999999999999999", 20, &v));
    cr_assert_not(tk_proto_parse_u64("100000000000000000000", 21, &v)); /* 21 digits */
    cr_assert_not(tk_proto_parse_u64("000000000000000000001", 21, &v));
    cr_assert_not(tk_proto_parse_u64("", 0, &v));
    cr_assert_not(tk_proto_parse_u64("01", 2, &v));
    cr_assert_not(tk_proto_parse_u64("00", 2, &v));
    cr_assert_not(tk_proto_parse_u64("+1", 2, &v));
    cr_assert_not(tk_proto_parse_u64("-1", 2, &v));
    cr_assert_not(tk_proto_parse_u64("-0", 2, &v));
    cr_assert_not(tk_proto_parse_u64("1 ", 2, &v));
    cr_assert_not(tk_proto_parse_u64("1\0", 2, &v));
    cr_assert_not(tk_proto_parse_u64("1a", 2, &v));
    cr_assert_not(tk_proto_parse_u64("0x1", 3, &v));
    cr_assert_not(tk_proto_parse_u64("/", 1, &v)); /* '0' - 1 */
    cr_assert_not(tk_proto_parse_u64(":", 1, &v)); /* '9' + 1 */
    /* Only len bytes are read: "12" of "123". */
    cr_assert(tk_proto_parse_u64("123", 2, &v) && v == 12);
    cr_assert_eq(v, 12);
}

Test(proto_u64, formats_every_magnitude)
{
    char buf[32];
    uint64_t v = 1;
    for (int i = 0; i < 20; i++, v *= 10) {
        for (uint64_t w = v - 1; w <= v; w++) {
            size_t n = tk_proto_u64(buf, w);
            uint64_t back;
            cr_assert(tk_proto_parse_u64(buf, n, &back), "%llu", (unsigned long long)w);
            cr_assert_eq(back, w);
        }
    }
    cr_assert_eq(tk_proto_u64(buf, UINT64_MAX), 20);
    cr_assert(memcmp(buf, U64_MAX_STR, 20) == 0);
    cr_assert_eq(tk_proto_u64(buf, 0), 1);
    cr_assert_eq(buf[0], '0');
}

/* ---- ids and whole-line faults ------------------------------------------- */

Test(proto_parse, id_limits)
{
    OK_ID("P 0", 0);
    OK_ID("P 1", 1);
    OK_ID("P 9999999999999999999", 9999999999999999999ull); /* 19 digits */
    OK_ID("P " U64_MAX_STR, UINT64_MAX);                    /* 20 digits */
    FATAL("P " U64_OVER_STR);                               /* u64 overflow */
    FATAL("P 99999999999999999999");
    FATAL("P 100000000000000000000"); /* 21 digits */
    FATAL("P 01");
    FATAL("P 00");
    FATAL("P +1");
    FATAL("P -1");
    FATAL("P 1a");
    FATAL("P 1\t");
    FATAL("P \t1");
    FATAL("P 1\x7f");
    FATAL("P 1\x80");
    FATAL("P 1\r\r"); /* only one \r is tolerated */
    FATAL("A 0x10 k o 1000 0");
}

Test(proto_parse, lines_without_an_id_are_fatal)
{
    FATAL("");
    FATAL("\r");
    FATAL(" ");
    FATAL("  ");
    FATAL(" \r");
    FATAL("A");
    FATAL("A ");
    FATAL("A  ");
    FATAL("A\r");
    FATAL("A \r");
    FATAL("P");
    FATAL("Q");
    FATAL("R");
    FATAL("X");
    FATAL("A\t1");   /* a tab is not a separator */
    FATAL("A\0001"); /* 'A', NUL, '1' */
    FATAL("\0");
    FATAL("\x7f");
    FATAL("GET / HTTP/1.1");
    FATAL("X -1");
    FATAL("A k o 1000 0"); /* id missing: the key is in its place */
    struct tk_request req;
    cr_assert_eq(tk_proto_parse(NULL, 0, &req), TK_PARSE_FATAL);
    cr_assert_eq(req.reason, TK_REASON_SYNTAX);
}

Test(proto_parse, unknown_commands)
{
    REJECT("X 1", 1, TK_REASON_COMMAND);
    REJECT("a 2 k o 1000 0", 2, TK_REASON_COMMAND); /* lowercase */
    REJECT("r 3 k o 1", 3, TK_REASON_COMMAND);
    REJECT("q 4 k", 4, TK_REASON_COMMAND);
    REJECT("p 5", 5, TK_REASON_COMMAND);
    REJECT("AA 6 k o 1000 0", 6, TK_REASON_COMMAND);
    REJECT("PING 7", 7, TK_REASON_COMMAND);
    REJECT("AUTH 8 x", 8, TK_REASON_COMMAND);
    REJECT("G 9 5", 9, TK_REASON_COMMAND); /* a response word is no request */
    REJECT("\0 10", 10, TK_REASON_COMMAND);
    REJECT("\x7f 11", 11, TK_REASON_COMMAND);
    REJECT("\xff 12", 12, TK_REASON_COMMAND);
    REJECT("\tA 13 k o 1000 0", 13, TK_REASON_COMMAND);
    REJECT("A\t 14", 14, TK_REASON_COMMAND);
    /* The command is judged before the shape and the fields. */
    REJECT("X 15 a b c d e f g h", 15, TK_REASON_COMMAND);
    REJECT("X 16 ", 16, TK_REASON_COMMAND);
    REJECT("X  17", 17, TK_REASON_COMMAND);
    REJECT(" X 18", 18, TK_REASON_COMMAND);
    struct tk_request req;
    cr_assert_eq(parse_n("X 1", 3, &req), TK_PARSE_REJECT);
    cr_assert_eq(req.type, 0);
}

Test(proto_parse, field_counts)
{
    OK("A 1 k o 1000 0");
    REJECT("A 1 k o 1000", 1, TK_REASON_SYNTAX);
    REJECT("A 1 k o", 1, TK_REASON_SYNTAX);
    REJECT("A 1 k", 1, TK_REASON_SYNTAX);
    REJECT("A 1", 1, TK_REASON_SYNTAX);
    REJECT("A 1 k o 1000 0 x", 1, TK_REASON_SYNTAX);
    REJECT("A 1 k o 1000 0 x y z w v u t", 1, TK_REASON_SYNTAX);
    OK("R 2 k o 1");
    REJECT("R 2 k o", 2, TK_REASON_SYNTAX);
    REJECT("R 2", 2, TK_REASON_SYNTAX);
    REJECT("R 2 k o 1 x", 2, TK_REASON_SYNTAX);
    OK("Q 3 k");
    REJECT("Q 3", 3, TK_REASON_SYNTAX);
    REJECT("Q 3 k x", 3, TK_REASON_SYNTAX);
    OK("P 4");
    REJECT("P 4 x", 4, TK_REASON_SYNTAX);
}

Test(proto_parse, empty_fields)
{
    REJECT("P 1 ", 1, TK_REASON_SYNTAX); /* trailing */
    REJECT("P 1  ", 1, TK_REASON_SYNTAX);
    REJECT("P 1 \r", 1, TK_REASON_SYNTAX); /* the \r goes, the space stays */
    REJECT(" P 1", 1, TK_REASON_SYNTAX);   /* leading */
    REJECT("   P 1", 1, TK_REASON_SYNTAX);
    REJECT("P  1", 1, TK_REASON_SYNTAX); /* doubled before the id */
    REJECT("Q 2  k", 2, TK_REASON_SYNTAX);
    REJECT("Q 2 k ", 2, TK_REASON_SYNTAX);
    REJECT("Q 2 ", 2, TK_REASON_SYNTAX);
    REJECT("A 3 k  o 1000 0", 3, TK_REASON_SYNTAX);
    REJECT("A 3 k o  1000 0", 3, TK_REASON_SYNTAX);
    REJECT("A 3 k o 1000  0", 3, TK_REASON_SYNTAX);
    REJECT("A 3 k o 1000 0 ", 3, TK_REASON_SYNTAX);
    REJECT("A 3  k o 1000", 3, TK_REASON_SYNTAX); /* empty field stands in for a missing one */
    REJECT("R 4 k o  ", 4, TK_REASON_SYNTAX);
    REJECT("R 4 k  o 1", 4, TK_REASON_SYNTAX);
}

/* The order of core/proto.h: id (fatal), command, shape, then fields left to
 * right. */
Test(proto_parse, precedence)
{
    FATAL("X 01 k");                                /* id before command */
    FATAL("A 01 \x01 o 1 1");                       /* id before fields */
    REJECT("X 1 \x01", 1, TK_REASON_COMMAND);       /* command before fields */
    REJECT("A 1 \x01 o 1000", 1, TK_REASON_SYNTAX); /* count before fields */
    REJECT("A 1 \x01 o 5 5 5", 1, TK_REASON_SYNTAX);
    REJECT("A 1 \x01  o 1000 0", 1, TK_REASON_SYNTAX); /* empty field before fields */
    REJECT("A 1 k\x7f o\x7f 999 250001", 1, TK_REASON_KEY);
    REJECT("A 1 k o\x7f 999 250001", 1, TK_REASON_OWNER);
    REJECT("A 1 k o 999 250001", 1, TK_REASON_LEASE);
    REJECT("A 1 k o 1000 250001", 1, TK_REASON_WAIT);
    REJECT("R 1 \x01 \x01 0", 1, TK_REASON_KEY);
    REJECT("R 1 k \x01 0", 1, TK_REASON_OWNER);
    REJECT("R 1 k o 0", 1, TK_REASON_TOKEN);
}

/* ---- key and owner ---------------------------------------------------------- */

static void build(char *buf, size_t *n, const char *pre, char fill, size_t count, const char *post)
{
    size_t o = strlen(pre);
    memcpy(buf, pre, o);
    memset(buf + o, fill, count);
    o += count;
    memcpy(buf + o, post, strlen(post));
    *n = o + strlen(post);
}

Test(proto_parse, key_length)
{
    char buf[2048];
    size_t n;
    struct tk_request req;
    size_t lens[] = {1, 2, 249, 250};
    for (size_t i = 0; i < TK_ARRAY_LEN(lens); i++) {
        build(buf, &n, "Q 7 ", 'k', lens[i], "");
        CHECK_BUF(buf, n, TK_PARSE_OK, 7, TK_REASON_NONE);
        cr_assert_eq(parse_n(buf, n, &req), TK_PARSE_OK);
        cr_assert_eq(req.key_len, lens[i]);
        build(buf, &n, "A 7 ", 'k', lens[i], " o 1000 0");
        CHECK_BUF(buf, n, TK_PARSE_OK, 7, TK_REASON_NONE);
        build(buf, &n, "R 7 ", 'k', lens[i], " o 1");
        CHECK_BUF(buf, n, TK_PARSE_OK, 7, TK_REASON_NONE);
    }
    build(buf, &n, "Q 7 ", 'k', 251, "");
    CHECK_BUF(buf, n, TK_PARSE_REJECT, 7, TK_REASON_KEY);
    build(buf, &n, "A 7 ", 'k', 251, " o 1000 0");
    CHECK_BUF(buf, n, TK_PARSE_REJECT, 7, TK_REASON_KEY);
    build(buf, &n, "R 7 ", 'k', 251, " o 1");
    CHECK_BUF(buf, n, TK_PARSE_REJECT, 7, TK_REASON_KEY);
    /* Length 0 is an empty field, a shape fault. */
    REJECT("Q 7  ", 7, TK_REASON_SYNTAX);
    cr_assert(tk_proto_key_ok("k", 1));
    cr_assert_not(tk_proto_key_ok("k", 0));
}

Test(proto_parse, owner_length)
{
    char buf[2048];
    size_t n;
    struct tk_request req;
    size_t lens[] = {1, 63, 64};
    for (size_t i = 0; i < TK_ARRAY_LEN(lens); i++) {
        build(buf, &n, "A 8 k ", 'o', lens[i], " 1000 0");
        cr_assert_eq(parse_n(buf, n, &req), TK_PARSE_OK);
        cr_assert_eq(req.owner_len, lens[i]);
        build(buf, &n, "R 8 k ", 'o', lens[i], " 1");
        CHECK_BUF(buf, n, TK_PARSE_OK, 8, TK_REASON_NONE);
    }
    build(buf, &n, "A 8 k ", 'o', 65, " 1000 0");
    CHECK_BUF(buf, n, TK_PARSE_REJECT, 8, TK_REASON_OWNER);
    build(buf, &n, "R 8 k ", 'o', 65, " 1");
    CHECK_BUF(buf, n, TK_PARSE_REJECT, 8, TK_REASON_OWNER);
    /* An owner of 65 bytes is fine as a key. */
    build(buf, &n, "Q 8 ", 'o', 65, "");
    CHECK_BUF(buf, n, TK_PARSE_OK, 8, TK_REASON_NONE);
}

/* Every byte value in the middle, at the start and at the end of a key and
 * an owner: 0x21-0x7E pass, the rest is that field's fault, except the space,
 * which splits the field and so changes the shape. */
Test(proto_parse, key_and_owner_bytes)
{
    for (int b = 0; b < 256; b++) {
        for (int pos = 0; pos < 3; pos++) {
            char f[3] = {'x', 'y', 'z'};
            f[pos] = (char)b;
            char buf[64];
            size_t n;
            bool good = b >= 0x21 && b <= 0x7e;
            enum tk_parse_status st = good ? TK_PARSE_OK : TK_PARSE_REJECT;
            /* A trailing \r at the very end is stripped: test the last
             * position of the owner in R only where it is not last. */
            n = (size_t)snprintf(buf, sizeof buf, "A 9 ");
            memcpy(buf + n, f, 3);
            n += 3;
            n += (size_t)snprintf(buf + n, sizeof buf - n, " o 1000 0");
            if (b == ' ')
                CHECK_BUF(buf, n, TK_PARSE_REJECT, 9, TK_REASON_SYNTAX);
            else
                CHECK_BUF(buf, n, st, 9, good ? TK_REASON_NONE : TK_REASON_KEY);

            n = (size_t)snprintf(buf, sizeof buf, "A 9 k ");
            memcpy(buf + n, f, 3);
            n += 3;
            n += (size_t)snprintf(buf + n, sizeof buf - n, " 1000 0");
            if (b == ' ')
                CHECK_BUF(buf, n, TK_PARSE_REJECT, 9, TK_REASON_SYNTAX);
            else
                CHECK_BUF(buf, n, st, 9, good ? TK_REASON_NONE : TK_REASON_OWNER);

            n = (size_t)snprintf(buf, sizeof buf, "R 9 k ");
            memcpy(buf + n, f, 3);
            n += 3;
            n += (size_t)snprintf(buf + n, sizeof buf - n, " 5");
            if (b == ' ')
                CHECK_BUF(buf, n, TK_PARSE_REJECT, 9, TK_REASON_SYNTAX);
            else
                CHECK_BUF(buf, n, st, 9, good ? TK_REASON_NONE : TK_REASON_OWNER);

            /* Q's key is the last field: a final \r is the tolerated one. */
            n = (size_t)snprintf(buf, sizeof buf, "Q 9 ");
            memcpy(buf + n, f, 3);
            n += 3;
            if (b == ' ')
                CHECK_BUF(buf, n, TK_PARSE_REJECT, 9, TK_REASON_SYNTAX);
            else if (b == '\r' && pos == 2)
                CHECK_BUF(buf, n, TK_PARSE_OK, 9, TK_REASON_NONE);
            else
                CHECK_BUF(buf, n, st, 9, good ? TK_REASON_NONE : TK_REASON_KEY);
        }
    }
    /* The named limits, spelled out. */
    REJECT("Q 1 a\040b", 1, TK_REASON_SYNTAX); /* octal escapes: 0x20 0x21 0x7e 0x7f */
    OK("Q 1 a\041b");
    OK("Q 1 a\176b");
    REJECT("Q 1 a\177b", 1, TK_REASON_KEY);
    REJECT("Q 1 \x7f", 1, TK_REASON_KEY);
    REJECT("Q 1 \x80", 1, TK_REASON_KEY);
    REJECT("Q 1 \xff", 1, TK_REASON_KEY);
    REJECT("Q 1 a\tb", 1, TK_REASON_KEY);
    REJECT("Q 1 a\0b", 1, TK_REASON_KEY);
    REJECT("Q 1 \0", 1, TK_REASON_KEY);
    REJECT("Q 1 k\rx", 1, TK_REASON_KEY);
    REJECT("A 1 k o\040p 1000 0", 1, TK_REASON_SYNTAX);
    OK("A 1 k o\x21 1000 0");
    OK("A 1 k \x7e 1000 0");
    REJECT("A 1 k o\x7f 1000 0", 1, TK_REASON_OWNER);
    REJECT("A 1 k o\0 1000 0", 1, TK_REASON_OWNER);
    REJECT("R 1 k \xc3\xa9 1", 1, TK_REASON_OWNER); /* UTF-8 is not ASCII */
}

/* ---- numbers in fields ------------------------------------------------------- */

Test(proto_parse, lease)
{
    REJECT("A 1 k o 0 0", 1, TK_REASON_LEASE);
    REJECT("A 1 k o 999 0", 1, TK_REASON_LEASE);
    OK("A 1 k o 1000 0");
    OK("A 1 k o 1001 0");
    OK("A 1 k o 249999 0");
    OK("A 1 k o 250000 0");
    REJECT("A 1 k o 250001 0", 1, TK_REASON_LEASE);
    REJECT("A 1 k o 01000 0", 1, TK_REASON_LEASE);
    REJECT("A 1 k o +1000 0", 1, TK_REASON_LEASE);
    REJECT("A 1 k o -1000 0", 1, TK_REASON_LEASE);
    REJECT("A 1 k o 1000.0 0", 1, TK_REASON_LEASE);
    REJECT("A 1 k o 1e3 0", 1, TK_REASON_LEASE);
    REJECT("A 1 k o 10s 0", 1, TK_REASON_LEASE);
    REJECT("A 1 k o 4294968296 0", 1, TK_REASON_LEASE); /* 2^32 + 1000: no u32 wrap */
    REJECT("A 1 k o " U64_MAX_STR " 0", 1, TK_REASON_LEASE);
    REJECT("A 1 k o " U64_OVER_STR " 0", 1, TK_REASON_LEASE);
    REJECT("A 1 k o x 0", 1, TK_REASON_LEASE);
    REJECT("A 1 k o 1000\t 0", 1, TK_REASON_LEASE);
}

Test(proto_parse, wait)
{
    OK("A 1 k o 1000 0");
    OK("A 1 k o 1000 1");
    OK("A 1 k o 1000 250000");
    REJECT("A 1 k o 1000 250001", 1, TK_REASON_WAIT);
    REJECT("A 1 k o 1000 00", 1, TK_REASON_WAIT);
    REJECT("A 1 k o 1000 01", 1, TK_REASON_WAIT);
    REJECT("A 1 k o 1000 -0", 1, TK_REASON_WAIT);
    REJECT("A 1 k o 1000 +0", 1, TK_REASON_WAIT);
    REJECT("A 1 k o 1000 -1", 1, TK_REASON_WAIT);
    REJECT("A 1 k o 1000 4294967296", 1, TK_REASON_WAIT); /* 2^32: no u32 wrap */
    REJECT("A 1 k o 1000 " U64_OVER_STR, 1, TK_REASON_WAIT);
    REJECT("A 1 k o 1000 0\0", 1, TK_REASON_WAIT);
    REJECT("A 1 k o 1000 0\r\r", 1, TK_REASON_WAIT);
    OK("A 1 k o 1000 0\r");
}

Test(proto_parse, token)
{
    REJECT("R 1 k o 0", 1, TK_REASON_TOKEN);
    OK("R 1 k o 1");
    OK("R 1 k o " U64_MAX_STR);
    REJECT("R 1 k o " U64_OVER_STR, 1, TK_REASON_TOKEN);
    REJECT("R 1 k o 100000000000000000000", 1, TK_REASON_TOKEN); /* 21 digits */
    REJECT("R 1 k o 01", 1, TK_REASON_TOKEN);
    REJECT("R 1 k o 00", 1, TK_REASON_TOKEN);
    REJECT("R 1 k o +1", 1, TK_REASON_TOKEN);
    REJECT("R 1 k o -1", 1, TK_REASON_TOKEN);
    REJECT("R 1 k o 1x", 1, TK_REASON_TOKEN);
    REJECT("R 1 k o 1\x7f", 1, TK_REASON_TOKEN);
    OK("R 1 k o 1\r");
}

/* ---- accepted requests carry their fields ------------------------------------ */

Test(proto_parse, fields_of_accepted_requests)
{
    struct tk_request req;
    const char a[] = "A 42 orders/7 worker-1 30000 250000\r";
    cr_assert_eq(parse_n(a, sizeof a - 1, &req), TK_PARSE_OK);
    cr_assert_eq(req.type, 'A');
    cr_assert_eq(req.id, 42);
    cr_assert(req.key_len == 8 && memcmp(req.key, "orders/7", 8) == 0);
    cr_assert(req.owner_len == 8 && memcmp(req.owner, "worker-1", 8) == 0);
    cr_assert_eq(req.lease_ms, 30000);
    cr_assert_eq(req.wait_ms, 250000);
    cr_assert_eq(req.reason, TK_REASON_NONE);

    const char r[] = "R 18446744073709551615 k o 1767225600000000";
    cr_assert_eq(parse_n(r, sizeof r - 1, &req), TK_PARSE_OK);
    cr_assert_eq(req.type, 'R');
    cr_assert_eq(req.id, UINT64_MAX);
    cr_assert_eq(req.token, 1767225600000000ull);
    cr_assert(req.owner_len == 1 && req.owner[0] == 'o');

    const char q[] = "Q 0 k\r";
    cr_assert_eq(parse_n(q, sizeof q - 1, &req), TK_PARSE_OK);
    cr_assert_eq(req.type, 'Q');
    cr_assert_eq(req.key_len, 1); /* the \r is not part of the key */
    cr_assert_null(req.owner);

    cr_assert_eq(parse_n("P 5", 3, &req), TK_PARSE_OK);
    cr_assert_eq(req.type, 'P');
    cr_assert_eq(req.id, 5);
    cr_assert_null(req.key);

    /* Rejected requests keep their type, so a reply can be logged with it. */
    cr_assert_eq(parse_n("A 5 k o 1 0", 11, &req), TK_PARSE_REJECT);
    cr_assert_eq(req.type, 'A');
    cr_assert_eq(req.reason, TK_REASON_LEASE);
}

/* The 1024-byte limit belongs to the connection reader; the parser takes any
 * length and still judges the fields. */
Test(proto_parse, long_lines)
{
    static char buf[200000];
    size_t n;
    /* 1023 and 1024 bytes of content. */
    build(buf, &n, "Q 3 ", 'k', 1019, "");
    cr_assert_eq(n, 1023);
    CHECK_BUF(buf, n, TK_PARSE_REJECT, 3, TK_REASON_KEY);
    build(buf, &n, "Q 3 ", 'k', 1020, "");
    cr_assert_eq(n, 1024);
    CHECK_BUF(buf, n, TK_PARSE_REJECT, 3, TK_REASON_KEY);
    build(buf, &n, "P 3 ", 'x', 1019, "");
    CHECK_BUF(buf, n, TK_PARSE_REJECT, 3, TK_REASON_SYNTAX);
    build(buf, &n, "P 3", ' ', 1020, "");
    CHECK_BUF(buf, n, TK_PARSE_REJECT, 3, TK_REASON_SYNTAX);
    build(buf, &n, "", ' ', 1023, "");
    CHECK_BUF(buf, n, TK_PARSE_FATAL, 0, TK_REASON_NONE);
    build(buf, &n, "", ' ', 1000, "P 4");
    CHECK_BUF(buf, n, TK_PARSE_REJECT, 4, TK_REASON_SYNTAX);
    build(buf, &n, "A 5 k o 1000 ", '9', 150000, "");
    CHECK_BUF(buf, n, TK_PARSE_REJECT, 5, TK_REASON_WAIT);
    build(buf, &n, "R 6 k ", 'o', 150000, " 1");
    CHECK_BUF(buf, n, TK_PARSE_REJECT, 6, TK_REASON_OWNER);
    build(buf, &n, "X ", '7', 150000, "");
    CHECK_BUF(buf, n, TK_PARSE_FATAL, 0, TK_REASON_NONE);
    /* The longest valid acquire fits a line with room to spare. */
    char key[TK_KEY_LEN_MAX], owner[TK_OWNER_LEN_MAX];
    memset(key, '~', sizeof key);
    memset(owner, '!', sizeof owner);
    n = tk_proto_fmt_acquire(buf, TK_LINE_MAX, UINT64_MAX, key, sizeof key, owner, sizeof owner,
                             TK_LEASE_MS_MAX, TK_WAIT_MS_MAX);
    cr_assert(n > 0 && n <= TK_LINE_MAX);
    CHECK_BUF(buf, n - 1, TK_PARSE_OK, UINT64_MAX, TK_REASON_NONE);
}

/* ---- formatting and round trips ---------------------------------------------- */

static void roundtrip_request(const struct tk_request *in)
{
    char buf[TK_LINE_MAX];
    size_t n = 0;
    switch (in->type) {
        case 'A':
            n = tk_proto_fmt_acquire(buf, sizeof buf, in->id, in->key, in->key_len, in->owner,
                                     in->owner_len, in->lease_ms, in->wait_ms);
            break;
        case 'R':
            n = tk_proto_fmt_release(buf, sizeof buf, in->id, in->key, in->key_len, in->owner,
                                     in->owner_len, in->token);
            break;
        case 'Q':
            n = tk_proto_fmt_qreq(buf, sizeof buf, in->id, in->key, in->key_len);
            break;
        case 'P':
            n = tk_proto_fmt_ping(buf, sizeof buf, in->id);
            break;
    }
    cr_assert(n > 0 && buf[n - 1] == '\n');
    struct tk_request out;
    cr_assert_eq(parse_n(buf, n - 1, &out), TK_PARSE_OK, "%s", show(buf, n));
    cr_assert_eq(out.type, in->type);
    cr_assert_eq(out.id, in->id);
    cr_assert_eq(out.key_len, in->key_len);
    cr_assert(in->key_len == 0 || memcmp(out.key, in->key, in->key_len) == 0);
    cr_assert_eq(out.owner_len, in->owner_len);
    cr_assert(in->owner_len == 0 || memcmp(out.owner, in->owner, in->owner_len) == 0);
    cr_assert_eq(out.lease_ms, in->lease_ms);
    cr_assert_eq(out.wait_ms, in->wait_ms);
    cr_assert_eq(out.token, in->token);
    /* Every formatter refuses a buffer one byte short, and fits exactly. */
    char small[TK_LINE_MAX];
    size_t m = 0;
    for (size_t cap = n - 1; cap <= n; cap++) {
        switch (in->type) {
            case 'A':
                m = tk_proto_fmt_acquire(small, cap, in->id, in->key, in->key_len, in->owner,
                                         in->owner_len, in->lease_ms, in->wait_ms);
                break;
            case 'R':
                m = tk_proto_fmt_release(small, cap, in->id, in->key, in->key_len, in->owner,
                                         in->owner_len, in->token);
                break;
            case 'Q':
                m = tk_proto_fmt_qreq(small, cap, in->id, in->key, in->key_len);
                break;
            case 'P':
                m = tk_proto_fmt_ping(small, cap, in->id);
                break;
        }
        cr_assert_eq(m, cap == n ? n : 0);
    }
}

Test(proto_format, request_roundtrips)
{
    char key[TK_KEY_LEN_MAX], owner[TK_OWNER_LEN_MAX];
    memset(key, 'K', sizeof key);
    memset(owner, '~', sizeof owner);
    uint64_t ids[] = {0, 1, 9, 10, UINT64_MAX};
    for (size_t i = 0; i < TK_ARRAY_LEN(ids); i++) {
        struct tk_request a = {.type = 'A',
                               .id = ids[i],
                               .key = key,
                               .key_len = 1,
                               .owner = owner,
                               .owner_len = 64,
                               .lease_ms = TK_LEASE_MS_MIN,
                               .wait_ms = 0};
        roundtrip_request(&a);
        a.key_len = TK_KEY_LEN_MAX;
        a.owner_len = 1;
        a.lease_ms = TK_LEASE_MS_MAX;
        a.wait_ms = TK_WAIT_MS_MAX;
        roundtrip_request(&a);
        struct tk_request r = {.type = 'R',
                               .id = ids[i],
                               .key = key,
                               .key_len = 17,
                               .owner = owner,
                               .owner_len = 3,
                               .token = 1};
        roundtrip_request(&r);
        r.token = UINT64_MAX;
        roundtrip_request(&r);
        struct tk_request q = {.type = 'Q', .id = ids[i], .key = key, .key_len = 250};
        roundtrip_request(&q);
        struct tk_request p = {.type = 'P', .id = ids[i]};
        roundtrip_request(&p);
    }
}

static void parse_rsp(const char *s, size_t n, struct tk_response *rsp, bool want)
{
    char *copy = malloc(n ? n : 1);
    memcpy(copy, s, n);
    bool ok = tk_proto_parse_response(copy, n, rsp);
    cr_assert_eq(ok, want, "response \"%s\": got %d", show(s, n), ok);
    /* Keep the pointers valid for the caller: point them into s. */
    if (rsp->owner)
        rsp->owner = s + (rsp->owner - copy);
    if (rsp->text)
        rsp->text = s + (rsp->text - copy);
    free(copy);
}

#define RSP_OK(s, rsp) parse_rsp((s), sizeof(s) - 1, (rsp), true)
#define RSP_BAD(s)                                   \
    do {                                             \
        struct tk_response bad_;                     \
        parse_rsp((s), sizeof(s) - 1, &bad_, false); \
    } while (0)

/* Formats with fmt, checks the exact-fit and one-short capacities, and parses
 * the line back (without its \n). */
#define FMT_PARSE(rsp, line, n, call_with_cap)                       \
    do {                                                             \
        size_t cap = sizeof(line);                                   \
        n = (call_with_cap);                                         \
        cr_assert(n > 0 && (line)[n - 1] == '\n');                   \
        size_t full_ = n;                                            \
        cap = full_ - 1;                                             \
        cr_assert_eq((call_with_cap), 0, "cap one short must fail"); \
        cap = full_;                                                 \
        cr_assert_eq((call_with_cap), full_);                        \
        parse_rsp((line), n - 1, (rsp), true);                       \
    } while (0)

Test(proto_format, response_roundtrips)
{
    char line[TK_LINE_MAX];
    size_t n;
    struct tk_response rsp;
    const char types[] = {'T', 'B', 'R', 'N', 'P'};
    for (size_t i = 0; i < sizeof types; i++) {
        FMT_PARSE(&rsp, line, n, tk_proto_fmt_id(line, cap, types[i], UINT64_MAX));
        cr_assert_eq(rsp.type, types[i]);
        cr_assert(rsp.has_id);
        cr_assert_eq(rsp.id, UINT64_MAX);
    }
    FMT_PARSE(&rsp, line, n, tk_proto_fmt_grant(line, cap, 3, 1767225600000001ull));
    cr_assert_eq(rsp.type, 'G');
    cr_assert_eq(rsp.id, 3);
    cr_assert_eq(rsp.token, 1767225600000001ull);

    FMT_PARSE(&rsp, line, n, tk_proto_fmt_query(line, cap, 4, "alice", 5, 99, 4096));
    cr_assert_eq(rsp.type, 'Q');
    cr_assert(rsp.owner_len == 5 && memcmp(rsp.owner, "alice", 5) == 0);
    cr_assert_eq(rsp.token, 99);
    cr_assert_eq(rsp.waiters, 4096);

    FMT_PARSE(&rsp, line, n, tk_proto_fmt_query(line, cap, 5, NULL, 0, 0, 0));
    cr_assert(n == 10 && memcmp(line, "Q 5 - 0 0\n", 10) == 0);
    cr_assert_null(rsp.owner);
    cr_assert_eq(rsp.token, 0);
    cr_assert_eq(rsp.waiters, 0);

    /* An owner named "-" holding the key is not the free key. */
    FMT_PARSE(&rsp, line, n, tk_proto_fmt_query(line, cap, 6, "-", 1, 7, UINT32_MAX));
    cr_assert(rsp.owner != NULL && rsp.owner_len == 1 && rsp.owner[0] == '-');
    cr_assert_eq(rsp.waiters, UINT32_MAX);

    for (int r = TK_REASON_SYNTAX; r <= TK_REASON_OVERLOAD; r++) {
        FMT_PARSE(&rsp, line, n, tk_proto_fmt_error(line, cap, true, 77, (enum tk_reason)r));
        cr_assert_eq(rsp.type, 'E');
        cr_assert(rsp.has_id);
        cr_assert_eq(rsp.id, 77);
        cr_assert_eq(rsp.reason, (enum tk_reason)r);
        cr_assert(rsp.text_len == strlen(tk_reason_str((enum tk_reason)r)) &&
                  memcmp(rsp.text, tk_reason_str((enum tk_reason)r), rsp.text_len) == 0);
        FMT_PARSE(&rsp, line, n, tk_proto_fmt_error(line, cap, false, 77, (enum tk_reason)r));
        cr_assert_not(rsp.has_id);
        cr_assert_eq(rsp.reason, (enum tk_reason)r);
    }
    FMT_PARSE(&rsp, line, n, tk_proto_fmt_moved(line, cap, "10.0.0.2:7400"));
    cr_assert_eq(rsp.type, 'M');
    cr_assert_not(rsp.has_id);
    cr_assert(rsp.text_len == 13 && memcmp(rsp.text, "10.0.0.2:7400", 13) == 0);
    FMT_PARSE(&rsp, line, n, tk_proto_fmt_moved(line, cap, NULL));
    cr_assert(n == 4 && memcmp(line, "M -\n", 4) == 0);
    cr_assert_null(rsp.text);
}

Test(proto_format, reason_words)
{
    const char *want[] = {"none",  "syntax",  "key",  "owner",   "lease",   "wait",
                          "token", "command", "auth", "toolong", "overload"};
    for (int r = 0; r <= TK_REASON_OVERLOAD; r++)
        cr_assert_str_eq(tk_reason_str((enum tk_reason)r), want[r]);
    cr_assert_str_eq(tk_reason_str((enum tk_reason)99), "unknown");
    char line[64];
    size_t n = tk_proto_fmt_error(line, sizeof line, true, 12, TK_REASON_COMMAND);
    cr_assert(n == 13 && memcmp(line, "E 12 command\n", 13) == 0);
    n = tk_proto_fmt_error(line, sizeof line, false, 12, TK_REASON_TOOLONG);
    cr_assert(n == 12 && memcmp(line, "E - toolong\n", 12) == 0);
}

Test(proto_format, reason_none_is_not_formatted, .signal = SIGABRT)
{
    char line[64];
    tk_proto_fmt_error(line, sizeof line, true, 1, TK_REASON_NONE);
}

Test(proto_response, strict_shapes)
{
    struct tk_response rsp;
    RSP_OK("G 1 1", &rsp);
    RSP_OK("G 1 1\r", &rsp);
    RSP_BAD("G 1 0");
    RSP_BAD("G 1");
    RSP_BAD("G 1 1 1");
    RSP_BAD("G 1 " U64_OVER_STR);
    RSP_BAD("G 01 1");
    RSP_BAD("G - 1");
    RSP_BAD("");
    RSP_BAD("\r");
    RSP_BAD("T");
    RSP_BAD("T ");
    RSP_BAD("T 1 ");
    RSP_BAD("T  1");
    RSP_BAD(" T 1");
    RSP_BAD("TT 1");
    RSP_BAD("t 1");
    RSP_BAD("X 1");
    RSP_BAD("A 1");
    RSP_BAD("T 1 x");
    RSP_BAD("T 1\r\r");
    RSP_BAD("T 1\0");
    RSP_BAD("T -");
    RSP_OK("Q 1 - 0 0", &rsp);
    cr_assert_null(rsp.owner);
    RSP_OK("Q 1 - 5 0", &rsp);
    cr_assert(rsp.owner && rsp.owner_len == 1);
    RSP_BAD("Q 1 - 0 3");   /* a free key has no waiters */
    RSP_BAD("Q 1 bob 0 0"); /* a holder has a token */
    RSP_BAD("Q 1 bob 5 4294967296");
    RSP_OK("Q 1 bob 5 4294967295", &rsp);
    RSP_BAD("Q 1 b\177b 5 0");
    RSP_BAD("Q 1 bob 5");
    RSP_BAD("Q 1 bob 5 0 0");
    RSP_OK("E - auth", &rsp);
    cr_assert_not(rsp.has_id);
    cr_assert_eq(rsp.reason, TK_REASON_AUTH);
    RSP_OK("E 9 shiny", &rsp); /* a reason from a newer server */
    cr_assert(rsp.has_id && rsp.id == 9);
    cr_assert_eq(rsp.reason, TK_REASON_NONE);
    cr_assert(rsp.text_len == 5);
    RSP_OK("E 9 key", &rsp);
    cr_assert_eq(rsp.reason, TK_REASON_KEY);
    RSP_BAD("E 9 keys\x01");
    RSP_BAD("E 9");
    RSP_BAD("E -");
    RSP_BAD("E 9 key x");
    RSP_BAD("E x key");
    RSP_OK("M -", &rsp);
    cr_assert_null(rsp.text);
    RSP_OK("M db-0.ticketing:7400", &rsp);
    RSP_OK("M [::1]:7400", &rsp);
    RSP_OK("M h:1", &rsp);
    RSP_OK("M h:65535", &rsp);
    RSP_BAD("M h:65536");
    RSP_BAD("M h:0");
    RSP_BAD("M h:07400");
    RSP_BAD("M h:");
    RSP_BAD("M :7400");
    RSP_BAD("M host");
    RSP_BAD("M");
    RSP_BAD("M 1");
    RSP_BAD("M - -");
    RSP_BAD("M h\x7f:1");
    /* M and "E -" never carry an id. */
    RSP_OK("M h:1", &rsp);
    cr_assert_not(rsp.has_id);
}

/* SPEC 15: W <id> <slot> <ring_version> and the S answer's two forms. */
Test(proto_response, wrong_group_and_ring)
{
    struct tk_response rsp;
    RSP_OK("W 7 11404 3", &rsp);
    cr_assert(rsp.type == 'W' && rsp.has_id && rsp.id == 7);
    cr_assert_eq(rsp.slot, 11404);
    cr_assert_eq(rsp.version, 3);
    RSP_OK("W 7 16383 0", &rsp);
    RSP_BAD("W 7 16384 3");
    RSP_BAD("W 7 11404");
    RSP_BAD("W 7 11404 3 1");
    RSP_BAD("W 7 011404 3");
    RSP_BAD("W - 1 3");
    RSP_OK("S 9 4 0-8191=a@h:1;8192-16383=b@h:2", &rsp);
    cr_assert(rsp.type == 'S' && rsp.id == 9 && rsp.version == 4);
    cr_assert(rsp.part == 1 && rsp.parts == 1);
    cr_assert(rsp.text_len == strlen("0-8191=a@h:1;8192-16383=b@h:2"));
    RSP_OK("S 9 0 -", &rsp);
    cr_assert(rsp.version == 0 && rsp.text_len == 1 && rsp.text[0] == '-');
    RSP_OK("S 9 4 2/3 8192-16383=b@h:2", &rsp);
    cr_assert(rsp.part == 2 && rsp.parts == 3);
    RSP_BAD("S 9 4 0/3 0-1=a@h:1");
    RSP_OK("S 9 4 1024/1024 0-1=a@h:1", &rsp);
    RSP_BAD("S 9 4 1/1025 0-1=a@h:1"); /* more parts than a ring has ranges */
    RSP_BAD("S 9 4 4/3 0-1=a@h:1");
    RSP_BAD("S 9 4 1/1 0-1=a@h:1"); /* a one-part answer has the one-line form */
    RSP_BAD("S 9 4 1-3 0-1=a@h:1");
    RSP_BAD("S 9 4");
    RSP_BAD("S 9 x -");
    RSP_BAD("S 9 4 -\x01");

    char line[TK_LINE_MAX];
    cr_assert_eq(tk_proto_fmt_wrong(line, sizeof(line), 7, 11404, 3), strlen("W 7 11404 3\n"));
    cr_assert_eq(memcmp(line, "W 7 11404 3\n", 12), 0);
    cr_assert_eq(tk_proto_fmt_wrong(line, 11, 7, 11404, 3), 0);
    size_t n = tk_proto_fmt_ring(line, sizeof(line), 9, 4, 2, 3, "0-1=a@h:1", 9);
    cr_assert_eq(n, strlen("S 9 4 2/3 0-1=a@h:1\n"));
    cr_assert_eq(memcmp(line, "S 9 4 2/3 0-1=a@h:1\n", n), 0);
    n = tk_proto_fmt_ring(line, sizeof(line), 9, 4, 1, 1, "-", 1);
    cr_assert_eq(memcmp(line, "S 9 4 -\n", n), 0);
    cr_assert_eq(tk_proto_fmt_ring_req(line, sizeof(line), 12), 5);
    cr_assert_eq(memcmp(line, "S 12\n", 5), 0);
    struct tk_request req;
    cr_assert_eq(parse_n("S 12", 4, &req), TK_PARSE_OK);
    cr_assert(req.type == 'S' && req.id == 12);
    REJECT("S 12 x", 12, TK_REASON_SYNTAX);
}

/* ---- handshake lines -------------------------------------------------------- */

#define HEX_A "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define HEX_B "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"

Test(proto_handshake, banner)
{
    char line[256];
    const char *nonce = NULL;
    size_t n = tk_proto_fmt_banner(line, sizeof line, false, HEX_A);
    cr_assert(n == 12 + 64 + 1 && memcmp(line, "TICKETING/1 " HEX_A "\n", n) == 0);
    cr_assert(tk_proto_parse_banner(line, n - 1, false, &nonce));
    cr_assert(nonce == line + 12);
    cr_assert_not(tk_proto_parse_banner(line, n - 1, true, &nonce));
    cr_assert_eq(tk_proto_fmt_banner(line, n - 1, false, HEX_A), 0);
    n = tk_proto_fmt_banner(line, sizeof line, true, HEX_B);
    cr_assert(memcmp(line, "TICKETING-PEER/2 " HEX_B "\n", n) == 0);
    cr_assert(tk_proto_parse_banner(line, n - 1, true, &nonce));
    cr_assert_not(tk_proto_parse_banner(line, n - 1, false, &nonce));
    const char cr[] = "TICKETING/1 " HEX_A "\r";
    cr_assert(tk_proto_parse_banner(cr, sizeof cr - 1, false, &nonce));
    const char upper[] =
        "TICKETING/1 0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef";
    cr_assert_not(tk_proto_parse_banner(upper, sizeof upper - 1, false, &nonce));
    const char short_[] = "TICKETING/1 " HEX_A;
    cr_assert_not(tk_proto_parse_banner(short_, sizeof short_ - 2, false, &nonce));
    const char extra[] = "TICKETING/1 " HEX_A " x";
    cr_assert_not(tk_proto_parse_banner(extra, sizeof extra - 1, false, &nonce));
    const char v2[] = "TICKETING/2 " HEX_A;
    cr_assert_not(tk_proto_parse_banner(v2, sizeof v2 - 1, false, &nonce));
    cr_assert_not(tk_proto_parse_banner("", 0, false, &nonce));
}

Test(proto_handshake, auth)
{
    char line[256];
    const char *cn = NULL, *cp = NULL;
    size_t n = tk_proto_fmt_auth(line, sizeof line, HEX_A, HEX_B);
    cr_assert(n == 5 + 64 + 1 + 64 + 1);
    cr_assert(tk_proto_parse_auth(line, n - 1, &cn, &cp));
    cr_assert(memcmp(cn, HEX_A, 64) == 0 && memcmp(cp, HEX_B, 64) == 0);
    cr_assert_eq(tk_proto_fmt_auth(line, n - 1, HEX_A, HEX_B), 0);
    const char bad1[] = "auth " HEX_A " " HEX_B;
    cr_assert_not(tk_proto_parse_auth(bad1, sizeof bad1 - 1, &cn, &cp));
    const char bad2[] = "AUTH " HEX_A "  " HEX_B;
    cr_assert_not(tk_proto_parse_auth(bad2, sizeof bad2 - 1, &cn, &cp));
    const char bad3[] = "AUTH " HEX_A;
    cr_assert_not(tk_proto_parse_auth(bad3, sizeof bad3 - 1, &cn, &cp));
    const char bad4[] = "AUTH " HEX_A " " HEX_B "0";
    cr_assert_not(tk_proto_parse_auth(bad4, sizeof bad4 - 1, &cn, &cp));
    const char bad5[] = "AUTH " HEX_A " " HEX_B " ";
    cr_assert_not(tk_proto_parse_auth(bad5, sizeof bad5 - 1, &cn, &cp));
    const char good_cr[] = "AUTH " HEX_A " " HEX_B "\r";
    cr_assert(tk_proto_parse_auth(good_cr, sizeof good_cr - 1, &cn, &cp));
}

Test(proto_handshake, peer_auth_names_the_address_meant)
{
    char line[512];
    const char *cn = NULL, *cp = NULL, *to = NULL;
    size_t to_len = 0;
    size_t n = tk_proto_fmt_peer_auth(line, sizeof line, HEX_A, HEX_B, "node-1:7401", 11);
    cr_assert(n == 5 + 64 + 1 + 64 + 1 + 11 + 1);
    cr_assert(tk_proto_parse_peer_auth(line, n - 1, &cn, &cp, &to, &to_len));
    cr_assert(memcmp(cn, HEX_A, 64) == 0 && memcmp(cp, HEX_B, 64) == 0);
    cr_assert(to_len == 11 && memcmp(to, "node-1:7401", 11) == 0);
    cr_assert_not(tk_proto_parse_auth(line, n - 1, &cn, &cp), "not a client AUTH");
    cr_assert_eq(tk_proto_fmt_peer_auth(line, n - 1, HEX_A, HEX_B, "node-1:7401", 11), 0);
    const char v1[] = "AUTH " HEX_A " " HEX_B;
    cr_assert_not(tk_proto_parse_peer_auth(v1, sizeof v1 - 1, &cn, &cp, &to, &to_len));
    const char ctl[] = "AUTH " HEX_A " " HEX_B " a\x7f:1";
    cr_assert_not(tk_proto_parse_peer_auth(ctl, sizeof ctl - 1, &cn, &cp, &to, &to_len));
    char lng[600];
    int k = snprintf(lng, sizeof lng, "AUTH %s %s ", HEX_A, HEX_B);
    memset(lng + k, 'h', 256);
    cr_assert_not(tk_proto_parse_peer_auth(lng, (size_t)k + 256, &cn, &cp, &to, &to_len),
                  "an address of 256 bytes");
    cr_assert(tk_proto_parse_peer_auth(lng, (size_t)k + 255, &cn, &cp, &to, &to_len));
}

Test(proto_handshake, ok)
{
    char line[256];
    const char *sp = NULL;
    uint64_t node = 0, dom[2] = {0, 0};
    const uint64_t want_dom[2] = {0x0123456789abcdefull, 0xfedcba9876543210ull};
    size_t n = tk_proto_fmt_ok(line, sizeof line, HEX_A, 0x00000000000000ffull, want_dom);
    const char want[] = "OK " HEX_A " 00000000000000ff fedcba98765432100123456789abcdef\n";
    cr_assert(n == sizeof want - 1 && memcmp(line, want, n) == 0, "%s", show(line, n));
    cr_assert(tk_proto_parse_ok(line, n - 1, &sp, &node, dom));
    cr_assert(sp == line + 3);
    cr_assert_eq(node, 0xff);
    cr_assert_eq(dom[0], want_dom[0]);
    cr_assert_eq(dom[1], want_dom[1]);
    cr_assert_eq(tk_proto_fmt_ok(line, n - 1, HEX_A, 1, want_dom), 0);
    const uint64_t max_dom[2] = {UINT64_MAX, UINT64_MAX};
    n = tk_proto_fmt_ok(line, sizeof line, HEX_B, UINT64_MAX, max_dom);
    cr_assert(tk_proto_parse_ok(line, n - 1, &sp, &node, dom));
    cr_assert(node == UINT64_MAX && dom[0] == UINT64_MAX && dom[1] == UINT64_MAX);
    const char upper[] = "OK " HEX_A " 00000000000000FF fedcba98765432100123456789abcdef";
    cr_assert_not(tk_proto_parse_ok(upper, sizeof upper - 1, &sp, &node, dom));
    const char short_node[] = "OK " HEX_A " 0000000000000ff fedcba98765432100123456789abcdef";
    cr_assert_not(tk_proto_parse_ok(short_node, sizeof short_node - 1, &sp, &node, dom));
    const char long_dom[] = "OK " HEX_A " 00000000000000ff fedcba98765432100123456789abcdef0";
    cr_assert_not(tk_proto_parse_ok(long_dom, sizeof long_dom - 1, &sp, &node, dom));
    const char missing[] = "OK " HEX_A " 00000000000000ff";
    cr_assert_not(tk_proto_parse_ok(missing, sizeof missing - 1, &sp, &node, dom));
    const char cr[] = "OK " HEX_A " 00000000000000ff fedcba98765432100123456789abcdef\r";
    cr_assert(tk_proto_parse_ok(cr, sizeof cr - 1, &sp, &node, dom));
}

/* ---- randomized ------------------------------------------------------------------ */

/* The reference classifier: slow and plain, sharing no code with the parser.
 * It splits the whole line into every space-separated token first. */
struct ref_result {
    enum tk_parse_status st;
    enum tk_reason reason;
    uint64_t id;
};

static bool ref_u64(const char *s, size_t n, uint64_t *out)
{
    if (n < 1 || n > 20)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!(s[i] >= '0' && s[i] <= '9'))
            return false;
    if (n > 1 && s[0] == '0')
        return false;
    if (n == 20 && memcmp(s, U64_MAX_STR, 20) > 0)
        return false;
    char tmp[24];
    memcpy(tmp, s, n);
    tmp[n] = '\0';
    *out = strtoull(tmp, NULL, 10);
    return true;
}

static bool ref_visible(const char *s, size_t n, size_t max)
{
    if (n < 1 || n > max)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((unsigned char)s[i] >= 0x21 && (unsigned char)s[i] <= 0x7e))
            return false;
    return true;
}

static struct ref_result ref_classify(const char *line, size_t len)
{
    struct ref_result res = {TK_PARSE_FATAL, TK_REASON_SYNTAX, 0};
    if (len > 0 && line[len - 1] == '\r')
        len--;
    enum { TOK_MAX = 8192 };
    static const char *ts[TOK_MAX];
    static size_t tl[TOK_MAX];
    size_t nt = 0, start = 0;
    for (size_t i = 0; i <= len; i++) {
        if (i == len || line[i] == ' ') {
            cr_assert(nt < TOK_MAX);
            ts[nt] = line + start;
            tl[nt] = i - start;
            nt++;
            start = i + 1;
        }
    }
    size_t ne[2], nne = 0;
    bool any_empty = false;
    for (size_t i = 0; i < nt; i++) {
        if (tl[i] == 0)
            any_empty = true;
        else if (nne < 2)
            ne[nne++] = i;
    }
    if (len == 0 || nne < 2 || !ref_u64(ts[ne[1]], tl[ne[1]], &res.id))
        return res;
    res.st = TK_PARSE_REJECT;
    const char *cmd = ts[ne[0]];
    size_t want;
    if (tl[ne[0]] != 1)
        want = 99;
    else if (cmd[0] == 'A')
        want = 6;
    else if (cmd[0] == 'R')
        want = 5;
    else if (cmd[0] == 'Q')
        want = 3;
    else if (cmd[0] == 'P' || cmd[0] == 'S')
        want = 2;
    else
        want = 99;
    if (want == 99) {
        res.reason = TK_REASON_COMMAND;
        return res;
    }
    if (any_empty || nt != want) {
        res.reason = TK_REASON_SYNTAX;
        return res;
    }
    uint64_t v;
    if (want >= 3 && !ref_visible(ts[2], tl[2], 250))
        res.reason = TK_REASON_KEY;
    else if (want >= 5 && !ref_visible(ts[3], tl[3], 64))
        res.reason = TK_REASON_OWNER;
    else if (want == 5 && !(ref_u64(ts[4], tl[4], &v) && v >= 1))
        res.reason = TK_REASON_TOKEN;
    else if (want == 6 && !(ref_u64(ts[4], tl[4], &v) && v >= 1000 && v <= 250000))
        res.reason = TK_REASON_LEASE;
    else if (want == 6 && !(ref_u64(ts[5], tl[5], &v) && v <= 250000))
        res.reason = TK_REASON_WAIT;
    else {
        res.st = TK_PARSE_OK;
        res.reason = TK_REASON_NONE;
    }
    return res;
}

static uint64_t fuzz_seed(void)
{
    const char *env = getenv("TK_SEED");
    if (env && *env)
        return strtoull(env, NULL, 0);
    return (uint64_t)time(NULL) ^ ((uint64_t)clock() << 32);
}

static uint64_t rnd_number(struct tk_prng *p)
{
    switch (tk_prng_range(p, 0, 5)) {
        case 0:
            return tk_prng_range(p, 0, 9);
        case 1:
            return tk_prng_range(p, 990, 1010);
        case 2:
            return tk_prng_range(p, 249990, 250010);
        case 3:
            return UINT64_MAX - tk_prng_range(p, 0, 3);
        case 4:
            return tk_prng_range(p, TK_LEASE_MS_MIN, TK_LEASE_MS_MAX);
        default:
            return tk_prng_next(p) >> tk_prng_range(p, 0, 63);
    }
}

static uint64_t rnd_token(struct tk_prng *p)
{
    uint64_t v = rnd_number(p);
    return v ? v : 1;
}

static void rnd_visible(struct tk_prng *p, char *out, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = (char)tk_prng_range(p, 0x21, 0x7e);
}

/* A request line (without \n) in buf; returns its length. Mostly valid, but
 * lengths and numbers are often drawn around their limits (key 250/251,
 * owner 64/65, lease 999-1001 and 249999-250001, wait 0 and 250001, token
 * 0, u64 max), so the comparison with the reference covers the boundaries
 * even before any mutation. */
static size_t rnd_line(struct tk_prng *p, char *buf, size_t cap)
{
    char key[TK_KEY_LEN_MAX + 1], owner[TK_OWNER_LEN_MAX + 1];
    bool edgy = tk_prng_range(p, 0, 3) == 0;
    size_t kl = edgy ? tk_prng_range(p, 245, TK_KEY_LEN_MAX + 1) : tk_prng_range(p, 1, 12);
    size_t ol = edgy ? tk_prng_range(p, 60, TK_OWNER_LEN_MAX + 1) : tk_prng_range(p, 1, 8);
    rnd_visible(p, key, kl);
    rnd_visible(p, owner, ol);
    uint64_t id = rnd_number(p);
    uint64_t lease = edgy ? rnd_number(p) : tk_prng_range(p, TK_LEASE_MS_MIN, TK_LEASE_MS_MAX);
    uint64_t wait = edgy ? rnd_number(p) : tk_prng_range(p, 0, TK_WAIT_MS_MAX);
    uint64_t token = edgy ? rnd_number(p) : rnd_token(p);
    int n = 0;
    switch (tk_prng_range(p, 0, 3)) {
        case 0:
            n = snprintf(buf, cap, "A %llu %.*s %.*s %llu %llu", (unsigned long long)id, (int)kl,
                         key, (int)ol, owner, (unsigned long long)lease, (unsigned long long)wait);
            break;
        case 1:
            n = snprintf(buf, cap, "R %llu %.*s %.*s %llu", (unsigned long long)id, (int)kl, key,
                         (int)ol, owner, (unsigned long long)token);
            break;
        case 2:
            n = snprintf(buf, cap, "Q %llu %.*s", (unsigned long long)id, (int)kl, key);
            break;
        default:
            n = snprintf(buf, cap, "P %llu", (unsigned long long)id);
            break;
    }
    cr_assert(n > 0 && (size_t)n < cap);
    return (size_t)n;
}

static const char interesting[] = {' ',        ' ',        ' ', '\r', '\0', '\t', '\n', 0x7f,
                                   (char)0x80, (char)0xff, '0', '1',  '9',  '-',  '+',  'A',
                                   'R',        'Q',        'P', 'a',  0x21, 0x7e, 0x20, 'S'};

static size_t mutate(struct tk_prng *p, char *buf, size_t n, size_t cap)
{
    size_t rounds = tk_prng_range(p, 0, 4);
    for (size_t r = 0; r < rounds; r++) {
        size_t at = n ? tk_prng_range(p, 0, n - 1) : 0;
        char c = tk_prng_range(p, 0, 3) == 0
                     ? (char)tk_prng_range(p, 0, 255)
                     : interesting[tk_prng_range(p, 0, sizeof interesting - 1)];
        switch (tk_prng_range(p, 0, 7)) {
            case 0: /* replace */
                if (n)
                    buf[at] = c;
                break;
            case 1: /* insert */
                if (n < cap) {
                    memmove(buf + at + 1, buf + at, n - at);
                    buf[at] = c;
                    n++;
                }
                break;
            case 2: /* delete */
                if (n) {
                    memmove(buf + at, buf + at + 1, n - at - 1);
                    n--;
                }
                break;
            case 3: /* truncate */
                n = at;
                break;
            case 4: { /* duplicate a span */
                size_t span = tk_prng_range(p, 0, 40);
                if (at + span <= n && n + span <= cap) {
                    memmove(buf + at + span, buf + at, n - at);
                    n += span;
                }
                break;
            }
            case 5: /* append \r or a space */
                if (n < cap)
                    buf[n++] = tk_prng_range(p, 0, 1) ? '\r' : ' ';
                break;
            case 6: { /* a run of digits, to cross the u64 and field limits */
                size_t run = tk_prng_range(p, 1, 22);
                if (n + run <= cap) {
                    memmove(buf + at + run, buf + at, n - at);
                    for (size_t i = 0; i < run; i++)
                        buf[at + i] = (char)('0' + tk_prng_range(p, 0, 9));
                    n += run;
                }
                break;
            }
            default: /* another command letter */
                if (n)
                    buf[0] = "ARQPXaG "[tk_prng_range(p, 0, 7)];
                break;
        }
    }
    return n;
}

Test(proto_fuzz, parser_matches_reference_and_canonical_form, .timeout = 300)
{
    uint64_t seed = fuzz_seed();
    struct tk_prng prng;
    tk_prng_seed(&prng, seed);
    static char buf[4096];
    static char again[TK_LINE_MAX + 8];
    size_t counts[3] = {0, 0, 0};
    for (int round = 0; round < FUZZ_ROUNDS; round++) {
        size_t n = rnd_line(&prng, buf, sizeof buf);
        n = mutate(&prng, buf, n, sizeof buf);
        struct tk_request req;
        enum tk_parse_status st = parse_n(buf, n, &req);
        struct ref_result ref = ref_classify(buf, n);
        counts[st]++;
        cr_assert_eq(st, ref.st, "TK_SEED=%llu round %d \"%s\": status %d, reference %d",
                     (unsigned long long)seed, round, show(buf, n), st, ref.st);
        cr_assert_eq(req.reason, ref.reason, "TK_SEED=%llu round %d \"%s\": %s, reference %s",
                     (unsigned long long)seed, round, show(buf, n), tk_reason_str(req.reason),
                     tk_reason_str(ref.reason));
        if (st != TK_PARSE_FATAL)
            cr_assert_eq(req.id, ref.id, "TK_SEED=%llu round %d", (unsigned long long)seed, round);
        if (st != TK_PARSE_OK)
            continue;
        /* Accepted lines are canonical: formatting the fields gives the
         * line back (less a tolerated \r), and that parses the same. */
        size_t m = 0;
        switch (req.type) {
            case 'A':
                m = tk_proto_fmt_acquire(again, sizeof again, req.id, req.key, req.key_len,
                                         req.owner, req.owner_len, req.lease_ms, req.wait_ms);
                break;
            case 'R':
                m = tk_proto_fmt_release(again, sizeof again, req.id, req.key, req.key_len,
                                         req.owner, req.owner_len, req.token);
                break;
            case 'Q':
                m = tk_proto_fmt_qreq(again, sizeof again, req.id, req.key, req.key_len);
                break;
            case 'P':
                m = tk_proto_fmt_ping(again, sizeof again, req.id);
                break;
            case 'S':
                m = tk_proto_fmt_ring_req(again, sizeof again, req.id);
                break;
            default:
                cr_assert_fail("TK_SEED=%llu: accepted type %d", (unsigned long long)seed,
                               req.type);
        }
        size_t stripped = n > 0 && buf[n - 1] == '\r' ? n - 1 : n;
        cr_assert(m == stripped + 1 && memcmp(again, buf, stripped) == 0,
                  "TK_SEED=%llu round %d: \"%s\" is not canonical", (unsigned long long)seed, round,
                  show(buf, n));
        struct tk_request req2;
        cr_assert_eq(parse_n(again, m - 1, &req2), TK_PARSE_OK);
        cr_assert(req2.type == req.type && req2.id == req.id && req2.key_len == req.key_len &&
                      req2.owner_len == req.owner_len && req2.lease_ms == req.lease_ms &&
                      req2.wait_ms == req.wait_ms && req2.token == req.token,
                  "TK_SEED=%llu round %d", (unsigned long long)seed, round);
    }
    /* The mutations must reach every outcome, or the test proves little. */
    cr_assert(counts[TK_PARSE_OK] > FUZZ_ROUNDS / 20, "TK_SEED=%llu", (unsigned long long)seed);
    cr_assert(counts[TK_PARSE_REJECT] > FUZZ_ROUNDS / 20, "TK_SEED=%llu", (unsigned long long)seed);
    cr_assert(counts[TK_PARSE_FATAL] > FUZZ_ROUNDS / 100, "TK_SEED=%llu", (unsigned long long)seed);
}

/* Responses and handshake lines: no crash, no read past len, and whatever
 * is accepted is in the canonical form the formatters write. */
Test(proto_fuzz, response_and_handshake_lines, .timeout = 300)
{
    uint64_t seed = fuzz_seed() ^ 0x5bd1e995u;
    struct tk_prng prng;
    tk_prng_seed(&prng, seed);
    static char buf[1024];
    static char again[1100];
    char owner[TK_OWNER_LEN_MAX];
    size_t accepted = 0;
    const uint64_t dom[2] = {0x1111, 0x2222};
    for (int round = 0; round < FUZZ_ROUNDS / 2; round++) {
        size_t ol = tk_prng_range(&prng, 1, 64);
        rnd_visible(&prng, owner, ol);
        uint64_t id = rnd_number(&prng);
        size_t n = 0;
        int kind = (int)tk_prng_range(&prng, 0, 10);
        switch (kind) {
            case 0:
                n = tk_proto_fmt_id(buf, sizeof buf, "TBRNP"[tk_prng_range(&prng, 0, 4)], id);
                break;
            case 1:
                n = tk_proto_fmt_grant(buf, sizeof buf, id, rnd_token(&prng));
                break;
            case 2:
                n = tk_proto_fmt_query(buf, sizeof buf, id, owner, ol, rnd_token(&prng),
                                       (uint32_t)tk_prng_range(&prng, 0, 5000));
                break;
            case 3:
                n = tk_proto_fmt_error(buf, sizeof buf, tk_prng_range(&prng, 0, 1), id,
                                       (enum tk_reason)tk_prng_range(&prng, 1, TK_REASON_OVERLOAD));
                break;
            case 4:
                n = tk_proto_fmt_moved(buf, sizeof buf,
                                       tk_prng_range(&prng, 0, 1) ? "h:7400" : NULL);
                break;
            case 5:
                n = tk_proto_fmt_banner(buf, sizeof buf, tk_prng_range(&prng, 0, 1), HEX_A);
                break;
            case 6:
                n = tk_proto_fmt_auth(buf, sizeof buf, HEX_A, HEX_B);
                break;
            case 7:
                n = tk_proto_fmt_ok(buf, sizeof buf, HEX_B, id, dom);
                break;
            case 9:
                n = tk_proto_fmt_wrong(buf, sizeof buf, id,
                                       (uint32_t)tk_prng_range(&prng, 0, 16383), rnd_number(&prng));
                break;
            case 10: {
                uint32_t parts = (uint32_t)tk_prng_range(&prng, 1, 3);
                n = tk_proto_fmt_ring(buf, sizeof buf, id, rnd_number(&prng),
                                      (uint32_t)tk_prng_range(&prng, 1, parts), parts, owner, ol);
                break;
            }
            default:
                n = tk_proto_fmt_query(buf, sizeof buf, id, NULL, 0, 0, 0);
                break;
        }
        n = mutate(&prng, buf, n - 1, sizeof buf);
        char *copy = malloc(n ? n : 1);
        memcpy(copy, buf, n);
        size_t stripped = n > 0 && copy[n - 1] == '\r' ? n - 1 : n;
        struct tk_response rsp;
        size_t m = 0;
        if (tk_proto_parse_response(copy, n, &rsp)) {
            accepted++;
            char addr[1100];
            switch (rsp.type) {
                case 'G':
                    m = tk_proto_fmt_grant(again, sizeof again, rsp.id, rsp.token);
                    break;
                case 'Q':
                    m = tk_proto_fmt_query(again, sizeof again, rsp.id, rsp.owner, rsp.owner_len,
                                           rsp.token, rsp.waiters);
                    break;
                case 'E':
                    if (rsp.reason == TK_REASON_NONE) { /* unknown word: no formatter */
                        cr_assert(rsp.text_len > 0);
                        memcpy(again, copy, stripped);
                        m = stripped + 1;
                    } else {
                        m = tk_proto_fmt_error(again, sizeof again, rsp.has_id, rsp.id, rsp.reason);
                    }
                    break;
                case 'M':
                    if (rsp.text) {
                        memcpy(addr, rsp.text, rsp.text_len);
                        addr[rsp.text_len] = '\0';
                    }
                    m = tk_proto_fmt_moved(again, sizeof again, rsp.text ? addr : NULL);
                    break;
                case 'W':
                    m = tk_proto_fmt_wrong(again, sizeof again, rsp.id, rsp.slot, rsp.version);
                    break;
                case 'S':
                    m = tk_proto_fmt_ring(again, sizeof again, rsp.id, rsp.version, rsp.part,
                                          rsp.parts, rsp.text, rsp.text_len);
                    break;
                default:
                    m = tk_proto_fmt_id(again, sizeof again, rsp.type, rsp.id);
                    break;
            }
            cr_assert(m == stripped + 1 && memcmp(again, copy, stripped) == 0,
                      "TK_SEED=%llu round %d: response \"%s\" is not canonical",
                      (unsigned long long)seed, round, show(buf, n));
        }
        const char *a, *b;
        uint64_t node, d[2];
        if (tk_proto_parse_banner(copy, n, false, &a)) {
            m = tk_proto_fmt_banner(again, sizeof again, false, a);
            cr_assert(m == stripped + 1 && memcmp(again, copy, stripped) == 0,
                      "TK_SEED=%llu round %d", (unsigned long long)seed, round);
        }
        if (tk_proto_parse_banner(copy, n, true, &a)) {
            m = tk_proto_fmt_banner(again, sizeof again, true, a);
            cr_assert(m == stripped + 1 && memcmp(again, copy, stripped) == 0,
                      "TK_SEED=%llu round %d", (unsigned long long)seed, round);
        }
        if (tk_proto_parse_auth(copy, n, &a, &b)) {
            m = tk_proto_fmt_auth(again, sizeof again, a, b);
            cr_assert(m == stripped + 1 && memcmp(again, copy, stripped) == 0,
                      "TK_SEED=%llu round %d", (unsigned long long)seed, round);
        }
        if (tk_proto_parse_ok(copy, n, &a, &node, d)) {
            m = tk_proto_fmt_ok(again, sizeof again, a, node, d);
            cr_assert(m == stripped + 1 && memcmp(again, copy, stripped) == 0,
                      "TK_SEED=%llu round %d", (unsigned long long)seed, round);
        }
        free(copy);
    }
    cr_assert(accepted > FUZZ_ROUNDS / 20, "TK_SEED=%llu", (unsigned long long)seed);
}

/* ---- Error names and committed-command validation ---- */

Test(core_edges, every_error_has_a_name_and_unknown_codes_say_so)
{
    for (int e = 0; e < TK_ERR_COUNT; e++) {
        cr_assert_not_null(tk_strerror(e));
        cr_assert_neq(strcmp(tk_strerror(e), "unknown error"), 0, "code %d", e);
    }
    cr_assert_str_eq(tk_strerror(-1), "unknown error");
    cr_assert_str_eq(tk_strerror(TK_ERR_COUNT), "unknown error");
}

static struct tk_cmd valid_grant(void)
{
    struct tk_cmd c = {.type = TK_CMD_GRANT, .key_len = 1, .owner_len = 1, .lease_ms = 1000};
    c.key[0] = 'k';
    c.owner[0] = 'o';
    return c;
}

Test(core_edges, tk_cmd_check_refuses_each_broken_field)
{
    struct tk_cmd c = valid_grant();
    cr_assert_eq(tk_cmd_check(&c), TK_OK);
    c.key[0] = ' ';
    cr_assert_eq(tk_cmd_check(&c), TK_EINVAL, "a space in the key");
    c = valid_grant();
    c.key_len = 0;
    cr_assert_eq(tk_cmd_check(&c), TK_EINVAL, "an empty key");
    c = valid_grant();
    c.owner_len = 0;
    cr_assert_eq(tk_cmd_check(&c), TK_EINVAL, "a grant without an owner");
    c = valid_grant();
    c.owner[0] = 0x7f;
    cr_assert_eq(tk_cmd_check(&c), TK_EINVAL, "DEL in the owner");
    c = valid_grant();
    c.lease_ms = TK_LEASE_MS_MAX + 1;
    cr_assert_eq(tk_cmd_check(&c), TK_EINVAL, "a lease over the limit");
    c = valid_grant();
    c.type = TK_CMD_HANDOFF;
    cr_assert_eq(tk_cmd_check(&c), TK_EINVAL, "a handoff without the old token");
    c = valid_grant();
    c.old_token = 7;
    cr_assert_eq(tk_cmd_check(&c), TK_EINVAL, "a grant with an old token");
    c = valid_grant();
    c.type = TK_CMD_HANDOFF;
    c.old_token = 7;
    c.expired = 2;
    cr_assert_eq(tk_cmd_check(&c), TK_EINVAL, "expired is a flag");
    c.expired = 1;
    cr_assert_eq(tk_cmd_check(&c), TK_OK, "an expiring handoff");
    struct tk_cmd r = {.type = TK_CMD_RELEASE, .key_len = 1, .old_token = 7};
    r.key[0] = 'k';
    cr_assert_eq(tk_cmd_check(&r), TK_OK);
    r.owner_len = 1;
    cr_assert_eq(tk_cmd_check(&r), TK_EINVAL, "a release with an owner");
    r.owner_len = 0;
    r.old_token = 0;
    cr_assert_eq(tk_cmd_check(&r), TK_EINVAL, "a release of token 0");
    r.old_token = 7;
    r.type = 99;
    cr_assert_eq(tk_cmd_check(&r), TK_EINVAL, "an unknown type");
}
