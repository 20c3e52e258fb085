/* Network addresses as text: the one parser of "host:port", "[v6]:port" and
 * comma lists of them that ticketingd's flags, libticketing and ticketctl
 * share, so that every program accepts and refuses the same text with the
 * same sentence.
 *
 * Pure: no lookups, no sockets, no state. Any thread may call these
 * functions; every output goes to buffers the caller owns.
 *
 * Accepted hosts:
 * - an IPv4 literal: four decimal numbers 0-255 without leading zeros
 *   ("10.0.0.7"); a name whose last label is all digits must be one (so
 *   that "10.0.0.256" or "127.1" is refused, not looked up as a name);
 * - an IPv6 literal (RFC 4291 text: 8 groups of 1-4 hex digits, one "::",
 *   an IPv4 tail) in brackets ("[::1]:7400"); no zone ("%eth0");
 * - a DNS name (RFC 1123): labels of 1-63 letters, digits and '-', not
 *   starting or ending with '-', joined by '.', at most 253 characters, no
 *   trailing '.'.
 * Ports: decimal 1-65535, without sign, spaces or leading zeros, so an
 * accepted address formats back (tk_addr_format) to exactly its text. */
#ifndef TK_CORE_ADDR_H
#define TK_CORE_ADDR_H

#include "core/tk.h"

#define TK_ADDR_HOST_MAX 253 /* a DNS name's longest text (RFC 1035) */
#define TK_ADDR_LABEL_MAX 63
#define TK_ADDR_V6_MAX 45 /* "ffff:...:ffff:255.255.255.255" */
/* The longest address text, without NUL: a longest name, ':' and 5 digits
 * ("[v6]:port" is shorter). */
#define TK_ADDR_TEXT_MAX (TK_ADDR_HOST_MAX + 6)
_Static_assert(TK_ADDR_V6_MAX + 8 < TK_ADDR_TEXT_MAX, "a bracketed IPv6 address fits");

enum tk_addr_kind {
    TK_ADDR_NAME, /* a DNS name, to be looked up */
    TK_ADDR_IPV4,
    TK_ADDR_IPV6, /* written in brackets with a port */
};

struct tk_addr {
    char host[TK_ADDR_HOST_MAX + 1]; /* NUL-terminated; an IPv6 literal without brackets */
    uint16_t port;                   /* 1-65535; 0 from tk_addr_parse_host() */
    enum tk_addr_kind kind;
};

/* Parses the len bytes of text (no NUL needed) as "host:port" or
 * "[v6]:port" into *a. Returns TK_OK, or TK_EINVAL with *why set to a
 * sentence saying what is wrong (static, no trailing period), e.g.
 * "port out of range (1-65535)". *a is unspecified after a refusal. */
int tk_addr_parse(const char *text, size_t len, struct tk_addr *a, const char **why);

/* A host alone, without port (a listen address such as ticketingd's
 * --bind): an IPv4 literal, an IPv6 literal with or without brackets, or a
 * DNS name. a->port is 0. Returns TK_OK or TK_EINVAL with *why. */
int tk_addr_parse_host(const char *text, size_t len, struct tk_addr *a, const char **why);

/* A comma list "a:1,b:2" of at most max addresses (no spaces, no empty
 * items), into addrs[0..*count). Returns TK_OK, or TK_EINVAL with a
 * sentence in why (cut to whylen bytes, NUL-terminated)
 * naming the item at fault: "'b:0': port out of range (1-65535)", "more
 * than 5 addresses". Requires max >= 1 and whylen >= 1. */
int tk_addr_parse_list(const char *text,
                       size_t len,
                       struct tk_addr *addrs,
                       size_t max,
                       size_t *count,
                       char *why,
                       size_t whylen);

/* a as text: "host:port", "[v6]:port", or the host alone when a->port is
 * 0, into buf (cap >= 1 bytes, always NUL-terminated). Returns the length
 * of the whole text; it was cut if that is >= cap. */
size_t tk_addr_format(const struct tk_addr *a, char *buf, size_t cap);

#endif
