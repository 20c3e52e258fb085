/* Goal: core/addr.h accepts exactly the address forms its header lists and
 * refuses everything else with the sentence that names the fault: every
 * accepted form, every refusal, both sides of each bound (port 1-65535,
 * 63-character labels, 253-character names, list counts).
 *
 * Method: every text is copied into a heap block of exactly its length
 * before it is parsed, so under ASan a read past len is caught; every
 * accepted address must format back to its own text.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/addr.h"

/* ---- helpers ------------------------------------------------------------ */

/* fn (tk_addr_parse or tk_addr_parse_host) on an exactly sized heap copy of s. */
static int parse_copy(int (*fn)(const char *, size_t, struct tk_addr *, const char **),
                      const char *s,
                      struct tk_addr *a,
                      const char **why)
{
    size_t n = strlen(s);
    char *copy = malloc(n + 1);
    cr_assert_not_null(copy);
    memcpy(copy, s, n);
    *why = "(unset)";
    int rc = fn(copy, n, a, why);
    free(copy);
    return rc;
}

static int parse(const char *s, struct tk_addr *a, const char **why)
{
    return parse_copy(tk_addr_parse, s, a, why);
}

static int parse_host(const char *s, struct tk_addr *a, const char **why)
{
    return parse_copy(tk_addr_parse_host, s, a, why);
}

static int parse_list(const char *s, struct tk_addr *a, size_t max, size_t *count, char *why)
{
    size_t n = strlen(s);
    char *copy = malloc(n + 1);
    cr_assert_not_null(copy);
    memcpy(copy, s, n);
    int rc = tk_addr_parse_list(copy, n, a, max, count, why, 256);
    free(copy);
    return rc;
}

/* n copies of c. */
static char *repeat(char *buf, char c, size_t n)
{
    memset(buf, c, n);
    buf[n] = '\0';
    return buf;
}

/* ---- assertions --------------------------------------------------------- */

/* s is accepted as host, port and kind, and formats back to s. */
#define ACCEPT(s, host_, port_, kind_)                                                \
    do {                                                                              \
        struct tk_addr a_;                                                            \
        const char *why_;                                                             \
        char back_[TK_ADDR_TEXT_MAX + 1];                                             \
        cr_assert_eq(parse(s, &a_, &why_), TK_OK, "'%s' refused: %s", s, why_);       \
        cr_assert_str_eq(a_.host, host_, "'%s'", s);                                  \
        cr_assert_eq(a_.port, port_, "'%s'", s);                                      \
        cr_assert_eq(a_.kind, kind_, "'%s'", s);                                      \
        cr_assert_eq(tk_addr_format(&a_, back_, sizeof back_), strlen(s), "'%s'", s); \
        cr_assert_str_eq(back_, s);                                                   \
    } while (0)

/* s is refused with the sentence want. */
#define REFUSE(s, want)                                                    \
    do {                                                                   \
        struct tk_addr a_;                                                 \
        const char *why_;                                                  \
        cr_assert_eq(parse(s, &a_, &why_), TK_EINVAL, "'%s' accepted", s); \
        cr_assert_str_eq(why_, want, "'%s'", s);                           \
    } while (0)

#define WHY_V6_BRACKETS "an IPv6 address must be in brackets, as in [::1]:7400"
#define WHY_V4 "not an IPv4 address (four numbers 0-255, without leading zeros)"
#define WHY_PORT "port out of range (1-65535)"
#define WHY_LABEL_HYPHEN "a label of the host name starts or ends with '-'"
#define WHY_LABEL_EMPTY "empty label in the host name (a '.' at an end, or two together)"
#define WHY_CHARS "a host name holds only letters, digits, '-' and '.'"
#define WHY_SPACE "a space or control character in the address"

/* ---- accepted forms ----------------------------------------------------- */

Test(addr, ipv4_literals)
{
    ACCEPT("127.0.0.1:7400", "127.0.0.1", 7400, TK_ADDR_IPV4);
    ACCEPT("0.0.0.0:1", "0.0.0.0", 1, TK_ADDR_IPV4);
    ACCEPT("255.255.255.255:65535", "255.255.255.255", 65535, TK_ADDR_IPV4);
    ACCEPT("10.200.0.9:80", "10.200.0.9", 80, TK_ADDR_IPV4);
}

Test(addr, ipv6_literals_in_brackets)
{
    ACCEPT("[::1]:7400", "::1", 7400, TK_ADDR_IPV6);
    ACCEPT("[::]:7400", "::", 7400, TK_ADDR_IPV6);
    ACCEPT("[fe80::1:2]:1", "fe80::1:2", 1, TK_ADDR_IPV6);
    ACCEPT("[2001:db8:0:0:0:0:0:1]:7400", "2001:db8:0:0:0:0:0:1", 7400, TK_ADDR_IPV6);
    ACCEPT("[2001:DB8::]:7400", "2001:DB8::", 7400, TK_ADDR_IPV6);
    ACCEPT("[1:2:3:4:5:6:7::]:9", "1:2:3:4:5:6:7::", 9, TK_ADDR_IPV6);
    ACCEPT("[::2:3:4:5:6:7:8]:9", "::2:3:4:5:6:7:8", 9, TK_ADDR_IPV6);
    ACCEPT("[::ffff:10.0.0.1]:7400", "::ffff:10.0.0.1", 7400, TK_ADDR_IPV6);
    ACCEPT("[1:2:3:4:5:6:1.2.3.4]:7400", "1:2:3:4:5:6:1.2.3.4", 7400, TK_ADDR_IPV6);
    ACCEPT("[ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255]:65535",
           "ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255", 65535, TK_ADDR_IPV6);
}

Test(addr, dns_names)
{
    ACCEPT("localhost:7400", "localhost", 7400, TK_ADDR_NAME);
    ACCEPT("a:1", "a", 1, TK_ADDR_NAME);
    ACCEPT("node-0.ticketing.svc.cluster.local:7401", "node-0.ticketing.svc.cluster.local", 7401,
           TK_ADDR_NAME);
    ACCEPT("A.Example:7400", "A.Example", 7400, TK_ADDR_NAME);
    ACCEPT("1a.example:7400", "1a.example", 7400, TK_ADDR_NAME); /* RFC 1123: a digit may lead */
    ACCEPT("10.0.0.example:7400", "10.0.0.example", 7400, TK_ADDR_NAME);
    ACCEPT("x--y:7400", "x--y", 7400, TK_ADDR_NAME);
}

Test(addr, longest_label_and_name)
{
    char label[80], name[300], text[320];
    repeat(label, 'a', 63);
    snprintf(text, sizeof text, "%s:7400", label);
    ACCEPT(text, label, 7400, TK_ADDR_NAME);
    /* 253 characters: three 63-letter labels, one of 61, three dots. */
    snprintf(name, sizeof name, "%s.%s.%s.", label, label, label);
    repeat(name + strlen(name), 'b', 61);
    cr_assert_eq(strlen(name), 253);
    snprintf(text, sizeof text, "%s:65535", name);
    cr_assert_eq(strlen(text), TK_ADDR_TEXT_MAX);
    ACCEPT(text, name, 65535, TK_ADDR_NAME);
}

Test(addr, boundary_ports)
{
    ACCEPT("h:1", "h", 1, TK_ADDR_NAME);
    ACCEPT("h:9", "h", 9, TK_ADDR_NAME);
    ACCEPT("h:10", "h", 10, TK_ADDR_NAME);
    ACCEPT("h:65535", "h", 65535, TK_ADDR_NAME);
    REFUSE("h:0", WHY_PORT);
    REFUSE("h:65536", WHY_PORT);
    REFUSE("h:99999", WHY_PORT);
    REFUSE("h:4294967297", WHY_PORT); /* wraps a u32 to 1 */
    REFUSE("h:18446744073709551617", WHY_PORT);
}

/* ---- refusals ----------------------------------------------------------- */

Test(addr, missing_parts)
{
    REFUSE("", "empty address (want host:port)");
    REFUSE("127.0.0.1", "missing port (want host:port)");
    REFUSE("localhost", "missing port (want host:port)");
    REFUSE(":7400", "missing host (want host:port)");
    REFUSE("h:", "missing port after ':'");
    REFUSE("[::1]", "missing port after ']' (want [v6]:port)");
    REFUSE("[::1]:", "missing port after ':'");
    REFUSE("[]:7400", "empty IPv6 address in brackets");
    REFUSE("[::1:7400", "missing ']' after the IPv6 address");
    REFUSE("[::1]7400", "unexpected text after ']' (want [v6]:port)");
    REFUSE("[::1]]:7400", "unexpected text after ']' (want [v6]:port)");
}

Test(addr, ports_that_are_not_plain_numbers)
{
    REFUSE("h:07400", "the port has a leading zero");
    REFUSE("h:00", "the port has a leading zero");
    REFUSE("h:+7400", "the port is not a number");
    REFUSE("h:-1", "the port is not a number");
    REFUSE("h:74a0", "the port is not a number");
    REFUSE("h:0x1f", "the port is not a number");
    REFUSE("h:7400 ", WHY_SPACE);
    REFUSE("h: 7400", WHY_SPACE);
}

Test(addr, ipv6_without_brackets_or_malformed)
{
    REFUSE("::1:7400", WHY_V6_BRACKETS);
    REFUSE("fe80::1:7400", WHY_V6_BRACKETS);
    REFUSE("h:1:2", WHY_V6_BRACKETS);
    REFUSE("[fe80::1%eth0]:7400", "IPv6 zones (%) are not supported");
    REFUSE("[1.2.3.4]:7400", "not an IPv6 address");
    REFUSE("[localhost]:7400", "not an IPv6 address");
    REFUSE("[:]:7400", "not an IPv6 address");
    REFUSE("[:1]:7400", "not an IPv6 address");
    REFUSE("[1:]:7400", "not an IPv6 address");
    REFUSE("[1::2::3]:7400", "not an IPv6 address");
    REFUSE("[:::]:7400", "not an IPv6 address");
    REFUSE("[12345::]:7400", "not an IPv6 address");
    REFUSE("[1:2:3:4:5:6:7]:7400", "not an IPv6 address");         /* 7 groups, no :: */
    REFUSE("[1:2:3:4:5:6:7:8:9]:7400", "not an IPv6 address");     /* 9 groups */
    REFUSE("[1:2:3:4:5:6:7:8::]:7400", "not an IPv6 address");     /* :: standing for none */
    REFUSE("[1:2:3:4:5:6:7:1.2.3.4]:7400", "not an IPv6 address"); /* 9 groups' worth */
    REFUSE("[::1.2.3]:7400", "not an IPv6 address");
    REFUSE("[::1.2.3.4:5]:7400", "not an IPv6 address"); /* the IPv4 part must be last */
    REFUSE("[::g]:7400", "not an IPv6 address");
    REFUSE("[ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.2550]:1", "not an IPv6 address");
}

Test(addr, ipv4_look_alikes)
{
    REFUSE("256.0.0.1:7400", WHY_V4);
    REFUSE("1.2.3:7400", WHY_V4);
    REFUSE("127.1:7400", WHY_V4);
    REFUSE("1.2.3.4.5:7400", WHY_V4);
    REFUSE("01.2.3.4:7400", WHY_V4);
    REFUSE("1.2.3.0400:7400", WHY_V4);
    REFUSE("2130706433:7400", WHY_V4); /* inet_aton would take it as 127.0.0.1 */
    REFUSE("example.123:7400", WHY_V4);
}

Test(addr, dns_name_rules)
{
    char label[80], name[300], text[320];
    repeat(label, 'a', 64);
    snprintf(text, sizeof text, "%s:7400", label);
    REFUSE(text, "a label of the host name is longer than 63 characters");
    repeat(label, 'a', 63);
    snprintf(name, sizeof name, "%s.%s.%s.", label, label, label);
    repeat(name + strlen(name), 'b', 62); /* 254 characters */
    snprintf(text, sizeof text, "%s:1", name);
    REFUSE(text, "host name too long (at most 253 characters)");
    snprintf(text, sizeof text, "%s:65535", name);
    REFUSE(text, "address too long (at most 259 characters)");
    REFUSE("-a:7400", WHY_LABEL_HYPHEN);
    REFUSE("a-:7400", WHY_LABEL_HYPHEN);
    REFUSE("a.-b.c:7400", WHY_LABEL_HYPHEN);
    REFUSE("-:7400", WHY_LABEL_HYPHEN);
    REFUSE(".a:7400", WHY_LABEL_EMPTY);
    REFUSE("a.:7400", WHY_LABEL_EMPTY);
    REFUSE("a..b:7400", WHY_LABEL_EMPTY);
    REFUSE(".:7400", WHY_LABEL_EMPTY);
    REFUSE("a_b:7400", WHY_CHARS);
    REFUSE("a/b:7400", WHY_CHARS);
    REFUSE("h\xc3\xa9:7400", WHY_SPACE); /* bytes past ASCII: IDNs go in their xn-- form */
    REFUSE("a b:7400", WHY_SPACE);
    REFUSE("a\tb:7400", WHY_SPACE);
    REFUSE("a\nb:7400", WHY_SPACE);
    REFUSE("a b", WHY_SPACE);
}

Test(addr, refusal_leaves_no_partial_host)
{
    struct tk_addr a;
    const char *why;
    cr_assert_eq(parse("good.example:0", &a, &why), TK_EINVAL);
    cr_assert_eq(parse("good.example:7400", &a, &why), TK_OK);
    cr_assert_eq(parse("[::1]:99999", &a, &why), TK_EINVAL);
    cr_assert_eq(a.port, 0);
}

/* A NUL inside the given length is a control character, not the end. */
Test(addr, nul_inside_len)
{
    struct tk_addr a;
    const char *why;
    cr_assert_eq(tk_addr_parse("a\0b:1", 5, &a, &why), TK_EINVAL);
    cr_assert_str_eq(why, WHY_SPACE);
    cr_assert_eq(tk_addr_parse("a:1\0", 4, &a, &why), TK_EINVAL);
    cr_assert_eq(tk_addr_parse("a:12", 3, &a, &why), TK_OK); /* only len bytes are read */
    cr_assert_eq(a.port, 1);
}

/* ---- hosts without port (--bind) ------------------------------------------ */

Test(addr, hosts_alone)
{
    struct tk_addr a;
    const char *why;
    char back[64];
    cr_assert_eq(parse_host("0.0.0.0", &a, &why), TK_OK);
    cr_assert_eq(a.kind, TK_ADDR_IPV4);
    cr_assert_eq(a.port, 0);
    cr_assert_eq(parse_host("::", &a, &why), TK_OK);
    cr_assert_eq(a.kind, TK_ADDR_IPV6);
    cr_assert_str_eq(a.host, "::");
    cr_assert_eq(tk_addr_format(&a, back, sizeof back), 2);
    cr_assert_str_eq(back, "::");
    cr_assert_eq(parse_host("[::1]", &a, &why), TK_OK);
    cr_assert_str_eq(a.host, "::1");
    cr_assert_eq(parse_host("localhost", &a, &why), TK_OK);
    cr_assert_eq(a.kind, TK_ADDR_NAME);
    cr_assert_eq(parse_host("", &a, &why), TK_EINVAL);
    cr_assert_str_eq(why, "empty host");
    cr_assert_eq(parse_host("[]", &a, &why), TK_EINVAL);
    cr_assert_eq(parse_host("1.2.3.4:7400", &a, &why), TK_EINVAL);
    cr_assert_str_eq(why, "a host without a port is wanted here (host:port given)");
    cr_assert_eq(parse_host("1:2:3:4:5:6:7:8:9", &a, &why), TK_EINVAL);
    cr_assert_str_eq(why, "not an IPv6 address");
    cr_assert_eq(parse_host("fe80::1%lo", &a, &why), TK_EINVAL);
    cr_assert_str_eq(why, "IPv6 zones (%) are not supported");
    cr_assert_eq(parse_host("300.1.1.1", &a, &why), TK_EINVAL);
    cr_assert_str_eq(why, WHY_V4);
    cr_assert_eq(parse_host("bad_name", &a, &why), TK_EINVAL);
    cr_assert_str_eq(why, WHY_CHARS);
}

/* ---- lists -------------------------------------------------------------- */

Test(addr, lists)
{
    struct tk_addr a[5];
    size_t n = 99;
    char why[256];
    cr_assert_eq(parse_list("a:1", a, 5, &n, why), TK_OK);
    cr_assert_eq(n, 1);
    cr_assert_eq(parse_list("a:1,[::1]:2,10.0.0.3:3,b.example:4,c:65535", a, 5, &n, why), TK_OK);
    cr_assert_eq(n, 5);
    cr_assert_str_eq(a[1].host, "::1");
    cr_assert_eq(a[1].kind, TK_ADDR_IPV6);
    cr_assert_eq(a[2].kind, TK_ADDR_IPV4);
    cr_assert_eq(a[4].port, 65535);
}

Test(addr, list_refusals)
{
    struct tk_addr a[5];
    size_t n = 99;
    char why[256];
    cr_assert_eq(parse_list("", a, 5, &n, why), TK_EINVAL);
    cr_assert_str_eq(why, "no address given (want host:port[,host:port...])");
    cr_assert_eq(n, 0);
    cr_assert_eq(parse_list("a:1,b:2,c:3,d:4,e:5,f:6", a, 5, &n, why), TK_EINVAL);
    cr_assert_str_eq(why, "more than 5 addresses");
    cr_assert_eq(parse_list("a:1,b:2", a, 1, &n, why), TK_EINVAL);
    cr_assert_str_eq(why, "more than 1 address");
    const char *empty = "empty address in the list (a ',' at an end, or two together)";
    cr_assert_eq(parse_list("a:1,,b:2", a, 5, &n, why), TK_EINVAL);
    cr_assert_str_eq(why, empty);
    cr_assert_eq(parse_list("a:1,", a, 5, &n, why), TK_EINVAL);
    cr_assert_str_eq(why, empty);
    cr_assert_eq(parse_list(",a:1", a, 5, &n, why), TK_EINVAL);
    cr_assert_str_eq(why, empty);
    cr_assert_eq(parse_list(",", a, 5, &n, why), TK_EINVAL);
    cr_assert_str_eq(why, empty);
    cr_assert_eq(parse_list("a:1,b:0", a, 5, &n, why), TK_EINVAL);
    cr_assert_str_eq(why, "'b:0': " WHY_PORT);
    cr_assert_eq(parse_list("a:1, b:2", a, 5, &n, why), TK_EINVAL);
    cr_assert_str_eq(why, "' b:2': " WHY_SPACE);
    cr_assert_eq(parse_list("::1:7400", a, 5, &n, why), TK_EINVAL);
    cr_assert_str_eq(why, "'::1:7400': " WHY_V6_BRACKETS);
    cr_assert_eq(n, 0);
}

Test(addr, list_item_cut_in_the_reason)
{
    struct tk_addr a[2];
    size_t n;
    char why[256], text[300], label[80];
    snprintf(text, sizeof text, "%s:0", repeat(label, 'x', 70));
    cr_assert_eq(parse_list(text, a, 2, &n, why), TK_EINVAL);
    char want[200];
    snprintf(want, sizeof want, "'%.64s...': a label of the host name is longer than 63 characters",
             label);
    cr_assert_str_eq(why, want);
    /* A small buffer cuts the sentence, NUL-terminated. */
    cr_assert_eq(tk_addr_parse_list("a:0", 3, a, 2, &n, why, 8), TK_EINVAL);
    cr_assert_str_eq(why, "'a:0': ");
}

/* ---- formatting --------------------------------------------------------- */

Test(addr, format_reports_the_whole_length)
{
    struct tk_addr a;
    const char *why;
    char small[6];
    cr_assert_eq(parse("[::1]:7400", &a, &why), TK_OK);
    cr_assert_eq(tk_addr_format(&a, small, sizeof small), 10);
    cr_assert_str_eq(small, "[::1]");
    a.port = 7401; /* another port of the same host, as ticketctl derives them */
    char full[32];
    cr_assert_eq(tk_addr_format(&a, full, sizeof full), 10);
    cr_assert_str_eq(full, "[::1]:7401");
}
