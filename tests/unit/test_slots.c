/* Goal: core/slots.h reads exactly the ring texts its header describes
 * (ring files and S bodies), refuses everything else with a sentence that
 * names the fault and where it is, and its binary encoding round-trips and
 * refuses every corruption a valid ring cannot have. Both sides of each
 * limit are filled: 64 groups, 1,024 ranges, 5 addresses of 128 bytes,
 * 64-byte names, slot 16383.
 *
 * Method: every text and encoding is copied into a heap block of exactly
 * its length before it is parsed or decoded, so under ASan a read past len
 * is caught. Rings (about 50 KiB each) live on the heap, in the fixture.
 */
#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/slots.h"

/* ---- fixture ------------------------------------------------------------ */

static struct tk_slot_ring *ra, *rb;
static uint8_t *enc; /* TK_SLOTS_ENCODED_MAX bytes */
static char *text;   /* TEXT_CAP bytes, built by add() */
static size_t text_len;

#define TEXT_CAP (1024u * 1024u)

static void setup(void)
{
    ra = calloc(1, sizeof(*ra));
    rb = calloc(1, sizeof(*rb));
    enc = calloc(1, TK_SLOTS_ENCODED_MAX);
    text = calloc(1, TEXT_CAP);
    text_len = 0;
    cr_assert(ra != NULL && rb != NULL && enc != NULL && text != NULL);
}

static void teardown(void)
{
    free(ra);
    free(rb);
    free(enc);
    free(text);
}

TestSuite(slots, .init = setup, .fini = teardown);

/* ---- parameters --------------------------------------------------------- */

#define TWO_GROUPS                                         \
    "# two groups, as `ticketctl ring apply` takes them\n" \
    "version 7\n"                                          \
    "\n"                                                   \
    "0-8191=a@127.0.0.1:7001,127.0.0.1:7002\n"             \
    "8192-16383=b@127.0.0.1:7101\n"
#define TWO_GROUPS_BODY "0-8191=a@127.0.0.1:7001,127.0.0.1:7002;8192-16383=b@127.0.0.1:7101"
#define WHY_NAME "not valid (1-64 bytes 0x21-0x7E, no ';' or '@')"

/* ---- helpers ------------------------------------------------------------ */

/* An exactly sized heap copy of n bytes. */
static char *copy_of(const void *s, size_t n)
{
    char *c = malloc(n > 0 ? n : 1);
    cr_assert_not_null(c);
    if (n > 0)
        memcpy(c, s, n);
    return c;
}

static int parse_file_n(const char *s, size_t n, struct tk_slot_ring *r, char *why, size_t whylen)
{
    char *c = copy_of(s, n);
    int rc = tk_slots_parse_file(c, n, r, why, whylen);
    free(c);
    return rc;
}

static int parse_file(const char *s, struct tk_slot_ring *r, char *why)
{
    return parse_file_n(s, strlen(s), r, why, 256);
}

static int parse_body(const char *s, struct tk_slot_ring *r, char *why)
{
    size_t n = strlen(s);
    char *c = copy_of(s, n);
    int rc = tk_slots_parse_body(c, n, r, why, 256);
    free(c);
    return rc;
}

static int decode(const uint8_t *b, size_t n, struct tk_slot_ring *r, const char **why)
{
    char *c = copy_of(b, n);
    *why = "(unset)";
    int rc = tk_slots_decode((const uint8_t *)c, n, r, why);
    free(c);
    return rc;
}

/* Appends to the fixture's text. */
__attribute__((format(printf, 1, 2))) static void add(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(text + text_len, TEXT_CAP - text_len, fmt, ap);
    va_end(ap);
    cr_assert(n >= 0 && (size_t)n < TEXT_CAP - text_len);
    text_len += (size_t)n;
}

/* A valid DNS name of n characters: labels of 'a' (63 at most) joined by
 * '.', ending in a letter for n % 64 != 0. */
static char *host_of_len(char *buf, size_t n)
{
    for (size_t i = 0; i < n; i++)
        buf[i] = (i + 1) % 64 == 0 ? '.' : 'a';
    buf[n] = '\0';
    return buf;
}

/* A file of n ranges "i-i=g<i % groups>@h:7001". */
static void many(uint32_t n, uint32_t groups)
{
    add("version 1\n");
    for (uint32_t i = 0; i < n; i++)
        add("%u-%u=g%u@h:7001\n", i, i, i % groups);
}

/* ---- assertions --------------------------------------------------------- */

#define FILE_OK(s, r)                                                     \
    do {                                                                  \
        char why_[256];                                                   \
        cr_assert_eq(parse_file(s, r, why_), TK_OK, "refused: %s", why_); \
    } while (0)

/* The file s is refused with a sentence holding want. */
#define FILE_REFUSE(s, want)                                                      \
    do {                                                                          \
        char why_[256];                                                           \
        cr_assert_eq(parse_file(s, ra, why_), TK_EINVAL, "accepted: %s", s);      \
        cr_assert(strstr(why_, want) != NULL, "why '%s', want '%s'", why_, want); \
    } while (0)

/* The body s is refused on a fresh ring with a sentence holding want. */
#define BODY_REFUSE(s, want)                                                      \
    do {                                                                          \
        char why_[256];                                                           \
        memset(rb, 0, sizeof(*rb));                                               \
        rb->version = 1;                                                          \
        cr_assert_eq(parse_body(s, rb, why_), TK_EINVAL, "accepted: %s", s);      \
        cr_assert(strstr(why_, want) != NULL, "why '%s', want '%s'", why_, want); \
    } while (0)

/* The encoding b (n bytes) is refused with the phrase want. */
#define DECODE_REFUSE(b, n, want)                         \
    do {                                                  \
        const char *why_;                                 \
        cr_assert_eq(decode(b, n, rb, &why_), TK_EPROTO); \
        cr_assert_str_eq(why_, want);                     \
    } while (0)

/* ---- the text of a ring ------------------------------------------------- */

Test(slots, two_groups_every_field)
{
    FILE_OK(TWO_GROUPS, ra);
    cr_assert_eq(ra->version, 7);
    cr_assert_eq(ra->ngroups, 2);
    cr_assert_eq(ra->nranges, 2);
    const struct tk_slot_group *a = &ra->groups[0], *b = &ra->groups[1];
    cr_assert_eq(a->name_len, 1);
    cr_assert_str_eq(a->name, "a");
    cr_assert_eq(a->naddrs, 2);
    cr_assert_str_eq(a->addr[0], "127.0.0.1:7001");
    cr_assert_str_eq(a->addr[1], "127.0.0.1:7002");
    cr_assert_eq(b->name_len, 1);
    cr_assert_str_eq(b->name, "b");
    cr_assert_eq(b->naddrs, 1);
    cr_assert_str_eq(b->addr[0], "127.0.0.1:7101");
    cr_assert_eq(ra->ranges[0].first, 0);
    cr_assert_eq(ra->ranges[0].last, 8191);
    cr_assert_eq(ra->ranges[0].group, 0);
    cr_assert_eq(ra->ranges[1].first, 8192);
    cr_assert_eq(ra->ranges[1].last, 16383);
    cr_assert_eq(ra->ranges[1].group, 1);
    /* Unused bytes stay zero. */
    static const struct tk_slot_group zero_group;
    cr_assert_eq(memcmp(&ra->groups[2], &zero_group, sizeof(zero_group)), 0);
    cr_assert_eq(a->name[1], '\0');
    cr_assert_eq(a->addr[2][0], '\0');
    cr_assert_eq(ra->ranges[2].first + ra->ranges[2].last + ra->ranges[2].group, 0);
}

Test(slots, crlf_and_last_line_without_newline)
{
    FILE_OK(TWO_GROUPS, rb);
    FILE_OK(
        "version 7\r\n\r\n# c\r\n0-8191=a@127.0.0.1:7001,127.0.0.1:7002\r\n"
        "8192-16383=b@127.0.0.1:7101",
        ra);
    cr_assert(tk_slots_equal(ra, rb));
    FILE_OK("version 7\n  \t\n0-8191=a@127.0.0.1:7001,127.0.0.1:7002;8192-16383=b@127.0.0.1:7101\r",
            ra);
    cr_assert(tk_slots_equal(ra, rb));
}

Test(slots, file_order_does_not_matter)
{
    size_t n1, n2;
    FILE_OK(TWO_GROUPS, ra);
    n1 = tk_slots_encode(ra, enc, TK_SLOTS_ENCODED_MAX);
    uint8_t *first = (uint8_t *)copy_of(enc, n1);
    /* b first in the file: the ring still lists a (slot 0) first. */
    FILE_OK("version 7\n8192-16383=b@127.0.0.1:7101\n-\n0-8191=a@127.0.0.1:7001,127.0.0.1:7002\n",
            rb);
    cr_assert_str_eq(rb->groups[0].name, "a");
    cr_assert_eq(rb->ranges[0].first, 0);
    cr_assert(tk_slots_equal(ra, rb));
    n2 = tk_slots_encode(rb, enc, TK_SLOTS_ENCODED_MAX);
    cr_assert_eq(n1, n2);
    cr_assert_eq(memcmp(first, enc, n1), 0);
    free(first);
}

Test(slots, version_only_and_dash)
{
    FILE_OK("version 18446744073709551615\n", ra);
    cr_assert_eq(ra->version, UINT64_MAX);
    cr_assert_eq(ra->nranges, 0);
    cr_assert_eq(ra->ngroups, 0);
    FILE_OK("version 3\n-\n", rb);
    cr_assert_eq(rb->nranges, 0);
    cr_assert_eq(tk_slots_owner(rb, 0), -1);
}

Test(slots, round_trip)
{
    const char *why = NULL;
    FILE_OK(TWO_GROUPS, ra);
    size_t n = tk_slots_encode(ra, enc, TK_SLOTS_ENCODED_MAX);
    cr_assert_gt(n, 0);
    cr_assert_eq(decode(enc, n, rb, &why), TK_OK, "%s", why);
    cr_assert(tk_slots_equal(ra, rb));
    cr_assert(tk_slots_equal(rb, ra));
    /* Decoded, the ring encodes to the same bytes. */
    uint8_t *again = calloc(1, TK_SLOTS_ENCODED_MAX);
    cr_assert_eq(tk_slots_encode(rb, again, TK_SLOTS_ENCODED_MAX), n);
    cr_assert_eq(memcmp(enc, again, n), 0);
    free(again);
    /* Too small a buffer: 0, whatever the shortfall. */
    for (size_t cap = 0; cap < n; cap++)
        cr_assert_eq(tk_slots_encode(ra, enc, cap), 0, "cap %zu", cap);
}

Test(slots, fmt_range_text)
{
    char buf[TK_SLOTS_RANGE_TEXT_MAX + 1];
    FILE_OK(TWO_GROUPS, ra);
    cr_assert_eq(tk_slots_fmt_range(ra, 0, buf, sizeof(buf)),
                 strlen("0-8191=a@127.0.0.1:7001,127.0.0.1:7002"));
    cr_assert_str_eq(buf, "0-8191=a@127.0.0.1:7001,127.0.0.1:7002");
    cr_assert_eq(tk_slots_fmt_range(ra, 1, buf, sizeof(buf)),
                 strlen("8192-16383=b@127.0.0.1:7101"));
    cr_assert_str_eq(buf, "8192-16383=b@127.0.0.1:7101");
    /* Cut to cap, NUL-terminated. */
    cr_assert_eq(tk_slots_fmt_range(ra, 1, buf, 6), 5);
    cr_assert_str_eq(buf, "8192-");
}

/* ---- bodies (S answers) ------------------------------------------------- */

Test(slots, body_equals_file)
{
    char why[256];
    FILE_OK(TWO_GROUPS, ra);
    rb->version = 7;
    cr_assert_eq(parse_body(TWO_GROUPS_BODY, rb, why), TK_OK, "%s", why);
    cr_assert(tk_slots_equal(ra, rb));
    size_t n = tk_slots_encode(ra, enc, TK_SLOTS_ENCODED_MAX);
    uint8_t *other = calloc(1, TK_SLOTS_ENCODED_MAX);
    cr_assert_eq(tk_slots_encode(rb, other, TK_SLOTS_ENCODED_MAX), n);
    cr_assert_eq(memcmp(enc, other, n), 0);
    free(other);
}

Test(slots, bodies_continue_one_another)
{
    char why[256];
    FILE_OK(TWO_GROUPS, ra);
    rb->version = 7;
    cr_assert_eq(parse_body("-", rb, why), TK_OK, "%s", why);
    cr_assert_eq(parse_body("0-8191=a@127.0.0.1:7001,127.0.0.1:7002", rb, why), TK_OK, "%s", why);
    cr_assert_eq(parse_body("8192-16383=b@127.0.0.1:7101", rb, why), TK_OK, "%s", why);
    cr_assert(tk_slots_equal(ra, rb));
}

Test(slots, body_refusals)
{
    char why[256];
    BODY_REFUSE("", "empty body (a ring without ranges is '-')");
    BODY_REFUSE("-;0-1=a@h:1", "range 1: '-' (no ranges) must be the whole body");
    BODY_REFUSE("0-1=a@h:1;-", "range 2: '-' (no ranges) must be the whole body");
    BODY_REFUSE("2-3=a@h:1;0-1=a@h:1", "range 2: slots 0-1 do not come after 2-3");
    BODY_REFUSE("0-5=a@h:1;5-6=a@h:1", "range 2: slots 5-6 do not come after 0-5");
    BODY_REFUSE("0-1=a@h:1;2-3=a@h:1;4-5=a@h:1;6-7=a@h:1;8-9=a@h:1;10-11=a@h:1;12-13=ah:1",
                "range 7: missing '@'");
    BODY_REFUSE("0-1=a@h:1;", "range 2: empty range (a ';' at an end, or two together)");
    BODY_REFUSE("0-1=a@h:1;2-3=a@h:2", "range 2: group 'a' is given two address lists");
    /* A refused body leaves the ring as it was; the next body continues
     * after the ring's last range. */
    FILE_OK(TWO_GROUPS, ra);
    memset(rb, 0, sizeof(*rb));
    rb->version = 7;
    cr_assert_eq(parse_body("0-8191=a@127.0.0.1:7001,127.0.0.1:7002", rb, why), TK_OK);
    cr_assert_eq(parse_body("8192-9000=c@h:1;9000-9001=c@h:1", rb, why), TK_EINVAL);
    cr_assert_str_eq(why, "range 3: slots 9000-9001 do not come after 8192-9000");
    cr_assert_eq(rb->nranges, 1);
    cr_assert_eq(rb->ngroups, 1);
    cr_assert_eq(rb->groups[1].name[0], '\0');
    cr_assert_eq(parse_body("100-200=a@127.0.0.1:7001,127.0.0.1:7002", rb, why), TK_EINVAL);
    cr_assert_str_eq(why, "range 2: slots 100-200 do not come after 0-8191");
    cr_assert_eq(parse_body("8192-16383=b@127.0.0.1:7101", rb, why), TK_OK, "%s", why);
    cr_assert(tk_slots_equal(ra, rb));
}

/* ---- lookups ------------------------------------------------------------ */

Test(slots, owned_counts_and_bits)
{
    uint64_t bits[TK_SLOTS_WORDS];
    FILE_OK(TWO_GROUPS, ra);
    memset(bits, 0xff, sizeof(bits));
    cr_assert_eq(tk_slots_owned(ra, "a", 1, bits), 8192);
    for (uint32_t s = 0; s < TK_SLOTS; s++)
        cr_assert_eq(tk_slots_bit(bits, s), s < 8192, "slot %u", s);
    cr_assert_eq(tk_slots_owned(ra, "b", 1, bits), 8192);
    for (uint32_t s = 0; s < TK_SLOTS; s++)
        cr_assert_eq(tk_slots_bit(bits, s), s >= 8192, "slot %u", s);
    memset(bits, 0xff, sizeof(bits));
    cr_assert_eq(tk_slots_owned(ra, "c", 1, bits), 0);
    for (uint32_t w = 0; w < TK_SLOTS_WORDS; w++)
        cr_assert_eq(bits[w], 0);
    /* Several ranges of one group. */
    FILE_OK("version 1\n0-9=x@h:1;10-19=y@h:2;20-29=x@h:1;16383-16383=x@h:1\n", rb);
    cr_assert_eq(tk_slots_owned(rb, "x", 1, bits), 21);
    cr_assert(tk_slots_bit(bits, 9) && !tk_slots_bit(bits, 10) && tk_slots_bit(bits, 20));
    cr_assert(tk_slots_bit(bits, 16383) && !tk_slots_bit(bits, 16382));
}

Test(slots, owner_at_edges_and_gaps)
{
    FILE_OK(TWO_GROUPS, ra);
    cr_assert_eq(tk_slots_owner(ra, 0), 0);
    cr_assert_eq(tk_slots_owner(ra, 8191), 0);
    cr_assert_eq(tk_slots_owner(ra, 8192), 1);
    cr_assert_eq(tk_slots_owner(ra, 16383), 1);
    FILE_OK("version 1\n200-299=b@h:2\n100-100=a@h:1\n", rb);
    cr_assert_eq(tk_slots_owner(rb, 0), -1);
    cr_assert_eq(tk_slots_owner(rb, 99), -1);
    cr_assert_eq(tk_slots_owner(rb, 100), 0);
    cr_assert_eq(tk_slots_owner(rb, 101), -1);
    cr_assert_eq(tk_slots_owner(rb, 199), -1);
    cr_assert_eq(tk_slots_owner(rb, 200), 1);
    cr_assert_eq(tk_slots_owner(rb, 299), 1);
    cr_assert_eq(tk_slots_owner(rb, 300), -1);
    cr_assert_eq(tk_slots_owner(rb, 16383), -1);
}

Test(slots, find_and_name_rules)
{
    char name[TK_SLOTS_NAME_MAX + 2];
    FILE_OK("version 1\n0-1=ab@h:1;2-3=a@h:2\n", ra);
    cr_assert_eq(tk_slots_find(ra, "ab", 2), 0);
    cr_assert_eq(tk_slots_find(ra, "a", 1), 1);
    cr_assert_eq(tk_slots_find(ra, "abc", 3), -1);
    cr_assert_eq(tk_slots_find(ra, "", 0), -1);
    memset(name, 'n', sizeof(name));
    cr_assert(tk_slots_name_ok(name, TK_SLOTS_NAME_MAX));
    cr_assert(!tk_slots_name_ok(name, TK_SLOTS_NAME_MAX + 1));
    cr_assert(!tk_slots_name_ok(name, 0));
    cr_assert(tk_slots_name_ok("!~=-,#", 6));
    cr_assert(!tk_slots_name_ok("a b", 3));
    cr_assert(!tk_slots_name_ok("a;b", 3));
    cr_assert(!tk_slots_name_ok("a@b", 3));
    cr_assert(!tk_slots_name_ok("a\x7f", 2));
    cr_assert(!tk_slots_name_ok("a\0b", 3));
}

/* ---- refusals of a file ------------------------------------------------- */

Test(slots, file_refusals)
{
    FILE_REFUSE("version 1\n150-300=b@h:2\n100-200=a@h:1\n",
                "line 3: slots 100-200 overlap 150-300");
    FILE_REFUSE("version 1\n100-200=a@h:1\n150-300=b@h:2\n",
                "line 3: slots 150-300 overlap 100-200");
    FILE_REFUSE("version 1\n0-5=a@h:1;5-5=b@h:2\n", "line 2: slots 5-5 overlap 0-5");
    FILE_REFUSE("version 1\n7-7=a@h:1\n\n7-7=a@h:1\n", "line 4: slots 7-7 overlap 7-7");
    FILE_REFUSE("version 1\n0-1=a@h:1;2-3=a@h:2\n", "line 2: group 'a' is given two address lists");
    FILE_REFUSE("version 1\n0-1=a@h:1,h:2\n2-3=a@h:2,h:1\n",
                "line 3: group 'a' is given two address lists");
    FILE_REFUSE("hello\n", "line 1: expected 'version <n>'");
    FILE_REFUSE("# c\n\nversion\n", "line 3: expected 'version <n>'");
    FILE_REFUSE("0-1=a@h:1\nversion 1\n", "line 1: expected 'version <n>'");
    FILE_REFUSE("version 0\n", "line 1: version 0 is not a ring version");
    FILE_REFUSE("version 01\n", "line 1: version '01' not a number");
    FILE_REFUSE("version 18446744073709551616\n", "not a number");
    FILE_REFUSE("version  1\n", "line 1: version ' 1' not a number");
    FILE_REFUSE("version 1\n0-1=a@h:1\nversion 2\n", "line 3: a second version line");
    FILE_REFUSE("", "no version line");
    FILE_REFUSE("# nothing\n\n  \n", "no version line");
    FILE_REFUSE("version 1\n#\n\n\n16384-16384=a@h:1\n",
                "line 5: slot 16384 out of range (0-16383)");
    FILE_REFUSE("version 1\n0-99999999999999999999=a@h:1\n",
                "slot 99999999999999999999 out of range");
    FILE_REFUSE("version 1\n\n\n\n200-100=a@h:1\n", "line 5: first slot after last");
    FILE_REFUSE("version 1\n0-01=a@h:1\n",
                "line 2: slot '01' not a number (decimal, no leading zeros)");
    FILE_REFUSE("version 1\n+1-2=a@h:1\n", "slot '+1' not a number");
    FILE_REFUSE("version 1\n-1=a@h:1\n", "slot '' not a number");
    FILE_REFUSE("version 1\n1=a@h:1\n", "line 2: missing '-'");
    FILE_REFUSE("version 1\n1-2a@h:1\n", "line 2: missing '='");
    FILE_REFUSE("version 1\n1-2=a:h:1\n", "line 2: missing '@'");
    FILE_REFUSE("version 1\n\n\n\n\n0-1=x y@h:1\n", "line 6: group name 'x y' " WHY_NAME);
    FILE_REFUSE("version 1\n0-1=@h:1\n", "group name '' " WHY_NAME);
    FILE_REFUSE("version 1\n0-1=a\tb@h:1\n", "group name 'a\tb' " WHY_NAME);
    FILE_REFUSE("version 1\n0-1=a;2-3=b@h:1\n", "line 2: missing '@'");
    FILE_REFUSE("version 1\n\n\n0-1=a@10.0.0.1:0\n",
                "line 4: '10.0.0.1:0': port out of range (1-65535)");
    FILE_REFUSE("version 1\n0-1=a@\n", "line 2: no address given");
    FILE_REFUSE("version 1\n0-1=a@h:1,\n", "line 2: empty address in the list");
    FILE_REFUSE("version 1\n0-1=a@h:1,h:2,h:3,h:4,h:5,h:6\n", "line 2: more than 5 addresses");
    FILE_REFUSE("version 1\n0-1=a@h:1 \n", "a space or control character in the address");
    FILE_REFUSE("version 1\n0-1=a@h:1;;2-3=a@h:1\n",
                "empty range (a ';' at an end, or two together)");
    FILE_REFUSE("version 1\n0-1=a@h:1;-\n", "line 2: '-' (no ranges) must be the whole body");
    FILE_REFUSE("version 1\n0-1=a@h:1\r\r\n", "a space or control character");
}

Test(slots, file_refusals_with_nul_bytes)
{
    char why[256];
    static const char nul_name[] = "version 1\n0-1=a\0b@h:1\n";
    cr_assert_eq(parse_file_n(nul_name, sizeof(nul_name) - 1, ra, why, sizeof(why)), TK_EINVAL);
    cr_assert(strstr(why, "line 2: group name") != NULL, "%s", why);
    static const char nul_version[] = "version 1\0\n";
    cr_assert_eq(parse_file_n(nul_version, sizeof(nul_version) - 1, ra, why, sizeof(why)),
                 TK_EINVAL);
    cr_assert(strstr(why, "line 1: version") != NULL, "%s", why);
}

Test(slots, why_is_cut_to_whylen)
{
    char why[8];
    memset(why, 'x', sizeof(why));
    cr_assert_eq(parse_file_n("hello", 5, ra, why, sizeof(why)), TK_EINVAL);
    cr_assert_str_eq(why, "line 1:");
    cr_assert_eq(parse_file_n("hello", 5, ra, why, 1), TK_EINVAL);
    cr_assert_str_eq(why, "");
}

Test(slots, long_names_and_addresses)
{
    char host[200], name[TK_SLOTS_NAME_MAX + 2];
    memset(name, 'n', TK_SLOTS_NAME_MAX);
    name[TK_SLOTS_NAME_MAX] = '\0';
    /* A 128-byte address (123-byte host and ":7001") and a 64-byte name. */
    add("version 1\n0-1=%s@%s:7001\n", name, host_of_len(host, 123));
    FILE_OK(text, ra);
    cr_assert_eq(strlen(ra->groups[0].addr[0]), TK_SLOTS_ADDR_MAX);
    cr_assert_eq(ra->groups[0].name_len, TK_SLOTS_NAME_MAX);
    text_len = 0;
    add("version 1\n0-1=a@%s:7001\n", host_of_len(host, 124));
    FILE_REFUSE(text, "line 2: address '");
    FILE_REFUSE(text, "...' longer than 128 bytes");
    text_len = 0;
    name[TK_SLOTS_NAME_MAX] = 'n';
    name[TK_SLOTS_NAME_MAX + 1] = '\0';
    add("version 1\n0-1=%s@h:1\n", name);
    FILE_REFUSE(text, "...' " WHY_NAME);
}

/* ---- the binary encoding ------------------------------------------------ */

/* The two-group ring with longer names, encoded into enc; returns its
 * length. */
static size_t two_encoded(void)
{
    FILE_OK("version 9\n0-99=alpha@127.0.0.1:7001,[::1]:7002\n100-16383=beta@h.example:7101\n", ra);
    size_t n = tk_slots_encode(ra, enc, TK_SLOTS_ENCODED_MAX);
    cr_assert_gt(n, 10);
    return n;
}

static size_t offset_of(const uint8_t *b, size_t n, const char *s)
{
    const uint8_t *p = memmem(b, n, s, strlen(s));
    cr_assert_not_null(p, "'%s' not in the encoding", s);
    return (size_t)(p - b);
}

Test(slots, decode_refuses_every_truncation)
{
    size_t n = two_encoded();
    for (size_t len = 0; len < n; len++) {
        const char *why;
        cr_assert_eq(decode(enc, len, rb, &why), TK_EPROTO, "len %zu", len);
        cr_assert(why != NULL && why[0] != '\0');
    }
    const char *why;
    cr_assert_eq(decode(enc, n, rb, &why), TK_OK, "%s", why);
    cr_assert(tk_slots_equal(ra, rb));
    cr_assert_eq(tk_slots_decode(enc, 0, rb, NULL), TK_EPROTO); /* why may be NULL */
}

Test(slots, decode_refuses_corruptions)
{
    size_t n = two_encoded();
    uint8_t *b = calloc(1, n + 1);
    cr_assert_not_null(b);
    /* The ranges are the last 10 bytes: swap them. */
    memcpy(b, enc, n);
    memcpy(b + n - 10, enc + n - 5, 5);
    memcpy(b + n - 5, enc + n - 10, 5);
    DECODE_REFUSE(b, n, "ranges out of order or overlapping");
    memcpy(b, enc, n);
    b[n] = 0;
    DECODE_REFUSE(b, n + 1, "bytes after the ring");
    memcpy(b, enc, n);
    memset(b, 0, 8);
    DECODE_REFUSE(b, n, "ring version 0");
    memcpy(b, enc, n);
    b[8] = 65;
    DECODE_REFUSE(b, n, "more than 64 groups");
    memcpy(b, enc, n);
    b[n - 1] = 2; /* the second range names group 2 of 2 */
    DECODE_REFUSE(b, n, "range names no group");
    memcpy(b, enc, n);
    b[n - 1] = 0; /* both ranges name alpha: beta is left over */
    DECODE_REFUSE(b, n, "group named by no range");
    memcpy(b, enc, n);
    b[n - 3] = 0x00; /* the second range ends at slot 16384 */
    b[n - 2] = 0x40;
    DECODE_REFUSE(b, n, "slot out of range");
    memcpy(b, enc, n);
    b[n - 5] = 0xff; /* the second range starts after it ends */
    b[n - 4] = 0x3f;
    b[n - 3] = 0xfe;
    DECODE_REFUSE(b, n, "first slot after last");
    memcpy(b, enc, n);
    b[n - 11] = 0x04; /* 1024 ranges announced */
    b[n - 12] = 0x01;
    DECODE_REFUSE(b, n, "more than 1024 ranges");
    memcpy(b, enc, n);
    b[offset_of(enc, n, "beta") - 1] = 0; /* a name of no bytes */
    DECODE_REFUSE(b, n, "group name not valid");
    memcpy(b, enc, n);
    b[offset_of(enc, n, "beta")] = ' ';
    DECODE_REFUSE(b, n, "group name not valid");
    memcpy(b, enc, n);
    b[offset_of(enc, n, "[::1]") + 1] = 'x';
    DECODE_REFUSE(b, n, "address not valid");
    memcpy(b, enc, n);
    b[offset_of(enc, n, "[::1]") - 1] = 0;
    DECODE_REFUSE(b, n, "address length not 1-128");
    memcpy(b, enc, n);
    b[offset_of(enc, n, "127.0.0.1") - 2] = 0; /* alpha's address count */
    DECODE_REFUSE(b, n, "address count not 1-5");
    memcpy(b, enc, n);
    b[offset_of(enc, n, "127.0.0.1") - 2] = 6;
    DECODE_REFUSE(b, n, "address count not 1-5");
    free(b);
}

Test(slots, decode_refuses_two_groups_of_one_name)
{
    const char *w;
    FILE_OK("version 9\n0-1=ab@h:1\n2-3=cd@h:2\n", ra);
    size_t n = tk_slots_encode(ra, enc, TK_SLOTS_ENCODED_MAX);
    memcpy(enc + offset_of(enc, n, "cd"), "ab", 2);
    DECODE_REFUSE(enc, n, "two groups of one name");
    /* An encoding of no groups and no ranges is a valid (empty) ring. */
    FILE_OK("version 2\n", ra);
    n = tk_slots_encode(ra, enc, TK_SLOTS_ENCODED_MAX);
    cr_assert_eq(n, 12);
    cr_assert_eq(decode(enc, n, rb, &w), TK_OK, "%s", w);
    cr_assert(tk_slots_equal(ra, rb));
}

/* ---- equality ----------------------------------------------------------- */

Test(slots, equal_field_by_field)
{
    FILE_OK(TWO_GROUPS, ra);
    memcpy(rb, ra, sizeof(*rb));
    cr_assert(tk_slots_equal(ra, rb));
    rb->groups[0].addr[1][13] = '3'; /* 127.0.0.1:7003 */
    cr_assert(!tk_slots_equal(ra, rb));
    cr_assert(!tk_slots_equal(rb, ra));
    memcpy(rb, ra, sizeof(*rb));
    rb->version = 8;
    cr_assert(!tk_slots_equal(ra, rb));
    memcpy(rb, ra, sizeof(*rb));
    rb->ranges[0].last = 8190;
    cr_assert(!tk_slots_equal(ra, rb));
    memcpy(rb, ra, sizeof(*rb));
    rb->groups[1].name[0] = 'c';
    cr_assert(!tk_slots_equal(ra, rb));
    /* The same ranges of the same groups, groups[] in the other order. */
    memcpy(rb, ra, sizeof(*rb));
    rb->groups[0] = ra->groups[1];
    rb->groups[1] = ra->groups[0];
    rb->ranges[0].group = 1;
    rb->ranges[1].group = 0;
    cr_assert(tk_slots_equal(ra, rb));
    /* Bytes past a NUL do not count. */
    memcpy(rb, ra, sizeof(*rb));
    rb->groups[0].addr[0][100] = 'z';
    cr_assert(tk_slots_equal(ra, rb));
}

/* ---- limits ------------------------------------------------------------- */

Test(slots, exactly_64_groups)
{
    many(64, 64);
    FILE_OK(text, ra);
    cr_assert_eq(ra->ngroups, 64);
    cr_assert_eq(ra->nranges, 64);
    cr_assert_str_eq(ra->groups[63].name, "g63");
    text_len = 0;
    many(65, 65);
    FILE_REFUSE(text, "line 66: more than 64 groups");
}

Test(slots, exactly_1024_ranges)
{
    char why[256];
    many(1024, 7);
    FILE_OK(text, ra);
    cr_assert_eq(ra->nranges, 1024);
    cr_assert_eq(ra->ngroups, 7);
    text_len = 0;
    many(1025, 7);
    FILE_REFUSE(text, "line 1026: more than 1024 ranges");
    /* The same bound on bodies. */
    text_len = 0;
    for (uint32_t i = 0; i < 1025; i++)
        add("%s%u-%u=g@h:1", i > 0 ? ";" : "", i, i);
    rb->version = 1;
    cr_assert_eq(parse_body(text, rb, why), TK_EINVAL);
    cr_assert_str_eq(why, "range 1025: more than 1024 ranges");
    cr_assert_eq(rb->nranges, 0);
}

/* Every field at its largest: 64 groups with 64-byte names and 5 addresses
 * of 128 bytes, 1024 ranges, one of them 16383-16383. The encoding fills
 * TK_SLOTS_ENCODED_MAX and that range's text TK_SLOTS_RANGE_TEXT_MAX. */
Test(slots, largest_ring)
{
    char host[200], list[5 * 200 + 40], buf[TK_SLOTS_RANGE_TEXT_MAX + 1];
    const char *why;
    host_of_len(host, 123);
    snprintf(list, sizeof(list), "%s:7001,%s:7002,%s:7003,%s:7004,%s:7005", host, host, host, host,
             host);
    add("version 18446744073709551615\n");
    for (uint32_t i = 0; i < 1024; i++) {
        uint32_t slot = i < 1023 ? i : 16383;
        add("%u-%u=g%02u%061u@%s\n", slot, slot, i % 64, 0u, list);
    }
    FILE_OK(text, ra);
    cr_assert_eq(ra->ngroups, 64);
    cr_assert_eq(ra->nranges, 1024);
    size_t n = tk_slots_encode(ra, enc, TK_SLOTS_ENCODED_MAX);
    cr_assert_eq(n, TK_SLOTS_ENCODED_MAX);
    cr_assert_eq(decode(enc, n, rb, &why), TK_OK, "%s", why);
    cr_assert(tk_slots_equal(ra, rb));
    cr_assert_eq(tk_slots_fmt_range(ra, 1023, buf, sizeof(buf)), TK_SLOTS_RANGE_TEXT_MAX);
    cr_assert_eq(tk_slots_owner(ra, 16383), 1023 % 64);
}
