/* The address parser of core/addr.h. Every check runs on the text as
 * given: nothing is looked up, so a name that parses may still not
 * resolve, but a text refused here would never have worked (or would have
 * worked by accident, as "127.1" does with inet_aton). */
#include "core/addr.h"

#include <string.h>

/* Sentences shared by more than one check. */
#define WHY_V6_BRACKETS "an IPv6 address must be in brackets, as in [::1]:7400"
#define WHY_V6_BAD "not an IPv6 address"
#define WHY_V4_BAD "not an IPv4 address (four numbers 0-255, without leading zeros)"
#define WHY_SPACE "a space or control character in the address"

static bool addr_digit(char c)
{
    return c >= '0' && c <= '9';
}

static bool addr_hex(char c)
{
    return addr_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static bool addr_letter(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static bool addr_control(char c)
{
    return (unsigned char)c <= 0x20 || (unsigned char)c >= 0x7f;
}

/* Four decimal numbers 0-255 joined by '.', no leading zeros. */
static bool addr_v4_ok(const char *s, size_t n)
{
    size_t parts = 0, i = 0;
    while (parts < 4) {
        size_t start = i;
        unsigned v = 0;
        while (i < n && addr_digit(s[i]) && i - start < 3)
            v = v * 10 + (unsigned)(s[i++] - '0');
        size_t digits = i - start;
        if (digits == 0 || v > 255 || (digits > 1 && s[start] == '0'))
            return false;
        parts++;
        if (i == n)
            break;
        if (s[i] != '.' || parts == 4)
            return false;
        i++;
    }
    return parts == 4 && i == n;
}

/* RFC 4291 section 2.2 text: up to 8 groups of 1-4 hex digits joined by
 * ':', at most one "::" standing for one or more zero groups, and an IPv4
 * address in place of the last two groups. */
static bool addr_v6_ok(const char *s, size_t n)
{
    size_t groups = 0, i = 0;
    bool gap = false;
    if (n < 2 || n > TK_ADDR_V6_MAX)
        return false;
    if (s[0] == ':') {
        if (s[1] != ':')
            return false;
        gap = true;
        i = 2;
    }
    while (i < n) {
        size_t j = i;
        while (j < n && addr_hex(s[j]))
            j++;
        if (j < n && s[j] == '.') { /* the IPv4 tail, to the end */
            if (!addr_v4_ok(s + i, n - i))
                return false;
            groups += 2;
            break;
        }
        if (j == i || j - i > 4)
            return false;
        groups++;
        if (j == n)
            break;
        if (s[j] != ':' || j + 1 == n) /* another character, or a lone ':' at the end */
            return false;
        i = j + 1;
        if (s[i] == ':') {
            if (gap)
                return false; /* a second "::" */
            gap = true;
            i++;
        }
    }
    return gap ? groups <= 7 : groups == 8;
}

/* A DNS name as RFC 1123 section 2.1 allows it, or an IPv4 literal when its
 * last label is all digits (no top-level domain is). */
static const char *addr_name_check(const char *s, size_t n, enum tk_addr_kind *kind)
{
    if (n > TK_ADDR_HOST_MAX)
        return "host name too long (at most 253 characters)";
    size_t label = 0;
    bool digits_only = true;
    for (size_t i = 0; i <= n; i++) {
        char c = i < n ? s[i] : '.';
        if (c == '.') {
            if (label == 0)
                return "empty label in the host name (a '.' at an end, or two together)";
            if (label > TK_ADDR_LABEL_MAX)
                return "a label of the host name is longer than 63 characters";
            if (s[i - label] == '-' || s[i - 1] == '-')
                return "a label of the host name starts or ends with '-'";
            if (i < n)
                digits_only = true;
            label = 0;
            continue;
        }
        if (addr_control(c))
            return WHY_SPACE;
        if (!addr_letter(c) && !addr_digit(c) && c != '-')
            return "a host name holds only letters, digits, '-' and '.'";
        digits_only = digits_only && addr_digit(c);
        label++;
    }
    if (!digits_only) {
        *kind = TK_ADDR_NAME;
        return NULL;
    }
    if (!addr_v4_ok(s, n))
        return WHY_V4_BAD;
    *kind = TK_ADDR_IPV4;
    return NULL;
}

/* The host part (brackets already taken off when bracketed). */
static const char *addr_host_check(const char *s, size_t n, bool bracketed, struct tk_addr *a)
{
    if (n == 0)
        return bracketed ? "empty IPv6 address in brackets" : "missing host (want host:port)";
    const char *why = NULL;
    if (memchr(s, '%', n) != NULL && memchr(s, ':', n) != NULL)
        why = "IPv6 zones (%) are not supported";
    else if (bracketed)
        why = addr_v6_ok(s, n) ? NULL : WHY_V6_BAD;
    else
        why = addr_name_check(s, n, &a->kind);
    if (why != NULL)
        return why;
    if (bracketed)
        a->kind = TK_ADDR_IPV6;
    TK_ASSERT(n <= TK_ADDR_HOST_MAX);
    memcpy(a->host, s, n);
    a->host[n] = '\0';
    return NULL;
}

static const char *addr_port_check(const char *s, size_t n, uint16_t *port)
{
    if (n == 0)
        return "missing port after ':'";
    for (size_t i = 0; i < n; i++) {
        if (addr_control(s[i]))
            return WHY_SPACE;
        if (!addr_digit(s[i]))
            return "the port is not a number";
    }
    if (n > 1 && s[0] == '0')
        return "the port has a leading zero";
    uint32_t v = 0;
    for (size_t i = 0; i < n && v <= 65535; i++)
        v = v * 10 + (uint32_t)(s[i] - '0');
    if (v == 0 || v > 65535)
        return "port out of range (1-65535)";
    *port = (uint16_t)v;
    return NULL;
}

int tk_addr_parse(const char *text, size_t len, struct tk_addr *a, const char **why)
{
    const char *w = NULL, *host = text, *colon = NULL;
    size_t hlen = 0;
    bool bracketed = len > 0 && text[0] == '[';
    memset(a, 0, sizeof(*a));
    if (len == 0) {
        w = "empty address (want host:port)";
    } else if (len > TK_ADDR_TEXT_MAX) {
        w = "address too long (at most 259 characters)";
    } else if (bracketed) {
        const char *close = memchr(text, ']', len);
        host = text + 1;
        hlen = close != NULL ? (size_t)(close - host) : 0;
        if (close == NULL)
            w = "missing ']' after the IPv6 address";
        else if (close + 1 == text + len)
            w = "missing port after ']' (want [v6]:port)";
        else if (close[1] != ':')
            w = "unexpected text after ']' (want [v6]:port)";
        else
            colon = close + 1;
    } else {
        for (size_t i = len; i > 0 && colon == NULL; i--)
            if (text[i - 1] == ':')
                colon = text + i - 1;
        hlen = colon != NULL ? (size_t)(colon - text) : 0;
        if (colon == NULL)
            w = memchr(text, ' ', len) ? WHY_SPACE : "missing port (want host:port)";
        else if (memchr(text, ':', hlen) != NULL)
            w = WHY_V6_BRACKETS;
    }
    if (w == NULL)
        w = addr_host_check(host, hlen, bracketed, a);
    if (w == NULL)
        w = addr_port_check(colon + 1, (size_t)(text + len - colon - 1), &a->port);
    *why = w;
    return w == NULL ? TK_OK : TK_EINVAL;
}

int tk_addr_parse_host(const char *text, size_t len, struct tk_addr *a, const char **why)
{
    const char *w = NULL;
    memset(a, 0, sizeof(*a));
    if (len >= 2 && text[0] == '[' && text[len - 1] == ']')
        w = addr_host_check(text + 1, len - 2, true, a);
    else if (len > 0 && memchr(text, ':', len) != NULL) { /* a bare IPv6 literal */
        w = addr_host_check(text, len, true, a);
        /* One colon after a name or IPv4 address: a host:port, not a host. */
        const char *colon = memchr(text, ':', len);
        if (w != NULL && memchr(colon + 1, ':', len - (size_t)(colon - text) - 1) == NULL)
            w = "a host without a port is wanted here (host:port given)";
    } else if (len == 0)
        w = "empty host";
    else
        w = addr_host_check(text, len, false, a);
    *why = w;
    return w == NULL ? TK_OK : TK_EINVAL;
}

int tk_addr_parse_list(const char *text,
                       size_t len,
                       struct tk_addr *addrs,
                       size_t max,
                       size_t *count,
                       char *why,
                       size_t whylen)
{
    TK_ASSERT(max >= 1);
    TK_ASSERT(whylen > 0);
    size_t n = 0;
    *count = 0;
    if (len == 0) {
        tk_fmt(why, whylen, "no address given (want host:port[,host:port...])");
        return TK_EINVAL;
    }
    for (size_t i = 0; i <= len;) {
        const char *item = text + i;
        const char *comma = memchr(item, ',', len - i);
        size_t ilen = comma != NULL ? (size_t)(comma - item) : len - i;
        const char *w = NULL;
        if (ilen == 0) {
            tk_fmt(why, whylen, "empty address in the list (a ',' at an end, or two together)");
            return TK_EINVAL;
        }
        if (n == max) {
            tk_fmt(why, whylen, "more than %zu address%s", max, max == 1 ? "" : "es");
            return TK_EINVAL;
        }
        if (tk_addr_parse(item, ilen, &addrs[n], &w) != TK_OK) {
            /* The item cut to 64 bytes, so the reason always fits. */
            tk_fmt(why, whylen, "'%.*s%s': %s", (int)TK_MIN(ilen, 64), item, ilen > 64 ? "..." : "",
                   w);
            return TK_EINVAL;
        }
        n++;
        i += ilen + 1;
    }
    TK_ASSERT(n >= 1);
    TK_ASSERT(n <= max);
    *count = n;
    return TK_OK;
}

size_t tk_addr_format(const struct tk_addr *a, char *buf, size_t cap)
{
    bool v6 = a->kind == TK_ADDR_IPV6 && a->port != 0;
    size_t need = strnlen(a->host, sizeof(a->host));
    TK_ASSERT(need < sizeof(a->host));
    if (a->port != 0)
        need += 1; /* ':' */
    for (unsigned p = a->port; p > 0; p /= 10)
        need++;
    if (v6)
        need += 2;
    size_t n = a->port == 0
                   ? tk_fmt(buf, cap, "%s", a->host)
                   : tk_fmt(buf, cap, v6 ? "[%s]:%u" : "%s:%u", a->host, (unsigned)a->port);
    TK_ASSERT(n == need || n == cap - 1);
    return need;
}
