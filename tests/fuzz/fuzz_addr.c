/* Fuzz target "addr": the address parser of core/addr.h, as ticketingd's
 * --bind, --advertise and --peers, libticketing's addrs and ticketctl's
 * --addr and --peers take it.
 *
 * The input's first byte picks the entry point (tk_addr_parse,
 * tk_addr_parse_host, or tk_addr_parse_list with a bound of 1-8 taken from
 * the same byte); the rest is the text.
 *
 * Checked: the verdict equals an independent reference written below (the
 * IP literals judged by the C library's inet_pton(), which the client uses
 * to connect, names by RFC 1123's rules written out again); every refusal
 * has a sentence; an accepted address formats back to exactly its text (a
 * list to its items joined by ','), and its kind says what its host is.
 */
#include "tests/fuzz/fuzz.h"

#include <arpa/inet.h>

#include "core/addr.h"

/* ---- the reference ----------------------------------------------------- */

static bool ref_v4(const char *h)
{
    struct in_addr a4;
    return inet_pton(AF_INET, h, &a4) == 1;
}

static bool ref_v6(const char *h)
{
    struct in6_addr a6;
    return inet_pton(AF_INET6, h, &a6) == 1;
}

/* RFC 1123 host name whose last label is not all digits. */
static bool ref_name(const char *h)
{
    size_t n = strlen(h);
    if (n == 0 || n > 253)
        return false;
    const char *label = h;
    bool last_digits = true;
    for (;;) {
        size_t l = strcspn(label, ".");
        if (l == 0 || l > 63 || label[0] == '-' || label[l - 1] == '-')
            return false;
        last_digits = true;
        for (size_t i = 0; i < l; i++) {
            char c = label[i];
            bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
            if (!alnum && c != '-')
                return false;
            last_digits = last_digits && c >= '0' && c <= '9';
        }
        if (label[l] == '\0')
            break;
        label += l + 1;
    }
    return !last_digits;
}

/* The kind the reference gives host (bare), or -1 if it refuses it. */
static int ref_host(const char *h, bool bracketed)
{
    if (bracketed)
        return strchr(h, ':') != NULL && ref_v6(h) ? TK_ADDR_IPV6 : -1;
    if (ref_v4(h))
        return TK_ADDR_IPV4;
    return ref_name(h) ? TK_ADDR_NAME : -1;
}

/* 1-65535, digits only, no leading zero. */
static bool ref_port(const char *p)
{
    size_t n = strlen(p);
    if (n == 0 || n > 5 || p[0] == '0' || strspn(p, "0123456789") != n)
        return false;
    return atoi(p) <= 65535;
}

/* The reference verdict on one "host:port" text (NUL-free, NUL-terminated). */
static int ref_addr(const char *t)
{
    char host[300];
    const char *colon;
    bool bracketed = t[0] == '[';
    if (bracketed) {
        const char *close = strchr(t, ']');
        if (close == NULL || close[1] != ':')
            return -1;
        colon = close + 1;
        size_t hl = (size_t)(close - t - 1);
        if (hl >= sizeof(host))
            return -1;
        memcpy(host, t + 1, hl);
        host[hl] = '\0';
    } else {
        colon = strrchr(t, ':');
        if (colon == NULL || (size_t)(colon - t) >= sizeof(host))
            return -1;
        memcpy(host, t, (size_t)(colon - t));
        host[colon - t] = '\0';
        if (strchr(host, ':') != NULL)
            return -1;
    }
    return ref_port(colon + 1) ? ref_host(host, bracketed) : -1;
}

/* ---- the target -------------------------------------------------------- */

/* t: the text, NUL-terminated for the reference; x: the same n bytes in a
 * block of exactly n, for the parser. */
static void one(const char *t, const char *x, size_t n)
{
    struct tk_addr a;
    const char *why = NULL;
    char back[TK_ADDR_TEXT_MAX + 1];
    int rc = tk_addr_parse(x, n, &a, &why);
    bool has_nul = memchr(t, '\0', n) != NULL;
    int ref = has_nul ? -1 : ref_addr(t);
    FUZZ_CHECK((rc == TK_OK) == (ref >= 0));
    if (rc != TK_OK) {
        FUZZ_CHECK(why != NULL && why[0] != '\0');
        return;
    }
    FUZZ_CHECK((int)a.kind == ref);
    FUZZ_CHECK(a.port >= 1);
    FUZZ_CHECK(tk_addr_format(&a, back, sizeof(back)) == n);
    FUZZ_CHECK(memcmp(back, t, n) == 0);
}

static void host_alone(const char *t, const char *x, size_t n)
{
    struct tk_addr a;
    const char *why = NULL;
    int rc = tk_addr_parse_host(x, n, &a, &why);
    int ref = -1;
    if (memchr(t, '\0', n) == NULL && n < 300) {
        char h[300];
        bool br = n >= 2 && t[0] == '[' && t[n - 1] == ']';
        memcpy(h, t + br, n - 2 * br);
        h[n - 2 * br] = '\0';
        ref = ref_host(h, br || strchr(h, ':') != NULL);
    }
    FUZZ_CHECK((rc == TK_OK) == (ref >= 0));
    if (rc != TK_OK) {
        FUZZ_CHECK(why != NULL && why[0] != '\0');
        return;
    }
    FUZZ_CHECK((int)a.kind == ref);
    FUZZ_CHECK(a.port == 0);
}

static void list(const char *t, const char *x, size_t n, size_t max)
{
    struct tk_addr addrs[8];
    char why[128], back[8 * (TK_ADDR_TEXT_MAX + 1) + 1];
    size_t count = 99, off = 0;
    int rc = tk_addr_parse_list(x, n, addrs, max, &count, why, sizeof(why));
    if (rc != TK_OK) {
        FUZZ_CHECK(count == 0);
        FUZZ_CHECK(why[0] != '\0' && strlen(why) < sizeof(why));
        return;
    }
    FUZZ_CHECK(count >= 1 && count <= max);
    for (size_t i = 0; i < count; i++) {
        if (i > 0)
            back[off++] = ',';
        off += tk_addr_format(&addrs[i], back + off, sizeof(back) - off);
        FUZZ_CHECK(off < sizeof(back));
    }
    FUZZ_CHECK(off == n && memcmp(back, t, n) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 2200)
        return 0;
    uint8_t mode = data[0];
    size_t n = size - 1;
    char *t = malloc(n + 1); /* n bytes and a NUL, for the reference */
    FUZZ_CHECK(t != NULL);
    memcpy(t, data + 1, n);
    t[n] = '\0';
    char *x = fuzz_dup(data + 1, n); /* exactly n: ASan catches a read past them */
    switch (mode % 3) {
        case 0:
            one(t, x, n);
            break;
        case 1:
            host_alone(t, x, n);
            break;
        default:
            list(t, x, n, 1u + (mode / 3u) % 8u);
            break;
    }
    free(x);
    free(t);
    return 0;
}
