/* The ring of core/slots.h (SPEC 15): the text parser of ring files and S
 * bodies, the binary encoding, and the lookups routing uses.
 *
 * Every parsed or decoded ring is built on a zeroed struct and written
 * field by field, so the bytes past name_len, past an address's NUL and
 * past ngroups and nranges stay zero. A file's ranges are sorted and its
 * groups renumbered in the order the sorted ranges first name them, so a
 * ring has one encoding whatever the order of its file's lines, and the
 * file form and the S form of a ring parse to the same struct.
 */
#include "core/slots.h"

#include <string.h>

#include "core/addr.h"
#include "core/proto.h"

/* Bytes of a bad field quoted in a sentence; longer ones end in "...". */
#define SLOTS_SHOW_MAX 64
#define SLOTS_VERSION_WORD "version "
#define SLOTS_VERSION_WORD_LEN (sizeof(SLOTS_VERSION_WORD) - 1)

_Static_assert(TK_SLOTS % 64 == 0, "the slot bitmap has whole words");
_Static_assert(TK_SLOTS <= 65536, "a slot fits the u16 of the encoding");
_Static_assert(TK_SLOTS_GROUPS_MAX <= 64, "a u64 marks the groups in use");
_Static_assert(TK_SLOTS_GROUPS_MAX <= 255, "a group index fits a u8");
_Static_assert(TK_SLOTS_RANGES_MAX <= 65535, "the range count fits a u16");
_Static_assert(TK_SLOTS_NAME_MAX <= 255, "a name length fits a u8");
_Static_assert(TK_SLOTS_ADDR_MAX <= 255, "an address length fits a u8");
_Static_assert(TK_SLOTS_ADDRS_MAX <= 255, "an address count fits a u8");

/* Where a refusal points: a line of a file (line > 0), or else the range
 * of a body by its position in the ring (1-based), since a body has no
 * lines of its own. */
struct slots_where {
    size_t line;
    size_t range;
};

struct slots_why {
    char *buf;
    size_t len;
};

/* Writes "line N: " or "range N: " and the sentence into why; returns
 * TK_EINVAL so a refusal is one statement. */
__attribute__((format(printf, 3, 4))) static int slots_refuse(const struct slots_why *why,
                                                              const struct slots_where *w,
                                                              const char *fmt,
                                                              ...)
{
    size_t off = 0;
    if (w != NULL && w->line > 0)
        off = tk_fmt(why->buf, why->len, "line %zu: ", w->line);
    else if (w != NULL)
        off = tk_fmt(why->buf, why->len, "range %zu: ", w->range);
    va_list ap;
    va_start(ap, fmt);
    tk_vfmt(why->buf + off, why->len - off, fmt, ap);
    va_end(ap);
    return TK_EINVAL;
}

/* The length of a field quoted in a sentence, and the "..." it needs. */
static int slots_show_len(size_t n)
{
    return (int)TK_MIN(n, SLOTS_SHOW_MAX);
}

static const char *slots_show_more(size_t n)
{
    return n > SLOTS_SHOW_MAX ? "..." : "";
}

bool tk_slots_name_ok(const char *name, size_t len)
{
    if (len == 0 || len > TK_SLOTS_NAME_MAX)
        return false;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)name[i];
        if (c < 0x21 || c > 0x7e || c == ';' || c == '@')
            return false;
    }
    return true;
}

/* ---- the text of one range --------------------------------------------- */

/* A slot number: decimal digits, no leading zero, at most TK_SLOTS - 1. */
static int slots_parse_slot(const char *s,
                            size_t n,
                            uint16_t *out,
                            const struct slots_why *why,
                            const struct slots_where *w)
{
    size_t digits = 0;
    while (digits < n && s[digits] >= '0' && s[digits] <= '9')
        digits++;
    if (n == 0 || digits != n || (n > 1 && s[0] == '0'))
        return slots_refuse(why, w, "slot '%.*s%s' not a number (decimal, no leading zeros)",
                            slots_show_len(n), s, slots_show_more(n));
    uint32_t v = 0;
    for (size_t i = 0; i < n && i < 5; i++) /* 5 digits cannot overflow */
        v = v * 10u + (uint32_t)(s[i] - '0');
    if (n > 5 || v >= TK_SLOTS)
        return slots_refuse(why, w, "slot %.*s%s out of range (0-%u)", slots_show_len(n), s,
                            slots_show_more(n), TK_SLOTS - 1);
    *out = (uint16_t)v;
    return TK_OK;
}

/* The address list after '@' into g: core/addr.h judges each address, and
 * its text (which formats back to exactly what was given) must fit. */
static int slots_parse_addrs(const char *s,
                             size_t n,
                             struct tk_slot_group *g,
                             const struct slots_why *why,
                             const struct slots_where *w)
{
    struct tk_addr addrs[TK_SLOTS_ADDRS_MAX];
    char sub[160];
    size_t count = 0;
    if (tk_addr_parse_list(s, n, addrs, TK_SLOTS_ADDRS_MAX, &count, sub, sizeof(sub)) != TK_OK)
        return slots_refuse(why, w, "%s", sub);
    TK_ASSERT(count >= 1);
    TK_ASSERT(count <= TK_SLOTS_ADDRS_MAX);
    for (size_t i = 0; i < count; i++) {
        size_t alen = tk_addr_format(&addrs[i], g->addr[i], sizeof(g->addr[i]));
        if (alen > TK_SLOTS_ADDR_MAX)
            return slots_refuse(why, w, "address '%.*s...' longer than %d bytes", SLOTS_SHOW_MAX,
                                g->addr[i], TK_SLOTS_ADDR_MAX);
    }
    g->naddrs = (uint8_t)count;
    return TK_OK;
}

/* One range's text "<first>-<last>=<group>@<addr>[,<addr>...]" (no ';')
 * into *rg (without its group index) and *g, which must be zeroed. */
static int slots_parse_range(const char *s,
                             size_t n,
                             struct tk_slot_range *rg,
                             struct tk_slot_group *g,
                             const struct slots_why *why,
                             const struct slots_where *w)
{
    if (n == 0)
        return slots_refuse(why, w, "empty range (a ';' at an end, or two together)");
    const char *dash = memchr(s, '-', n);
    if (dash == NULL)
        return slots_refuse(why, w, "missing '-'");
    const char *end = s + n;
    const char *eq = memchr(dash + 1, '=', (size_t)(end - dash - 1));
    if (eq == NULL)
        return slots_refuse(why, w, "missing '='");
    int rc = slots_parse_slot(s, (size_t)(dash - s), &rg->first, why, w);
    if (rc == TK_OK)
        rc = slots_parse_slot(dash + 1, (size_t)(eq - dash - 1), &rg->last, why, w);
    if (rc != TK_OK)
        return rc;
    if (rg->first > rg->last)
        return slots_refuse(why, w, "first slot after last");
    /* A name holds no '@', so the first '@' ends it. */
    const char *at = memchr(eq + 1, '@', (size_t)(end - eq - 1));
    if (at == NULL)
        return slots_refuse(why, w, "missing '@'");
    size_t name_len = (size_t)(at - eq - 1);
    if (!tk_slots_name_ok(eq + 1, name_len))
        return slots_refuse(
            why, w, "group name '%.*s%s' not valid (1-%d bytes 0x21-0x7E, no ';' or '@')",
            slots_show_len(name_len), eq + 1, slots_show_more(name_len), TK_SLOTS_NAME_MAX);
    memcpy(g->name, eq + 1, name_len);
    g->name_len = (uint8_t)name_len;
    return slots_parse_addrs(at + 1, (size_t)(end - at - 1), g, why, w);
}

static bool slots_group_same(const struct tk_slot_group *a, const struct tk_slot_group *b)
{
    if (a->name_len != b->name_len || a->naddrs != b->naddrs)
        return false;
    if (memcmp(a->name, b->name, a->name_len) != 0)
        return false;
    for (uint32_t i = 0; i < a->naddrs; i++) {
        if (strncmp(a->addr[i], b->addr[i], sizeof(a->addr[i])) != 0)
            return false;
    }
    return true;
}

/* Appends range rg of group g to r. ordered: rg must come after the ring's
 * last range (a body); a file's ranges are sorted and checked later. */
static int slots_add(struct tk_slot_ring *r,
                     const struct tk_slot_range *rg,
                     const struct tk_slot_group *g,
                     bool ordered,
                     const struct slots_why *why,
                     const struct slots_where *w)
{
    if (ordered && r->nranges > 0) {
        const struct tk_slot_range *prev = &r->ranges[r->nranges - 1];
        if (rg->first <= prev->last)
            return slots_refuse(why, w, "slots %u-%u do not come after %u-%u", rg->first, rg->last,
                                prev->first, prev->last);
    }
    if (r->nranges == TK_SLOTS_RANGES_MAX)
        return slots_refuse(why, w, "more than %d ranges", TK_SLOTS_RANGES_MAX);
    int gi = tk_slots_find(r, g->name, g->name_len);
    if (gi >= 0 && !slots_group_same(&r->groups[gi], g))
        return slots_refuse(why, w, "group '%s' is given two address lists", g->name);
    if (gi < 0) {
        if (r->ngroups == TK_SLOTS_GROUPS_MAX)
            return slots_refuse(why, w, "more than %d groups", TK_SLOTS_GROUPS_MAX);
        gi = (int)r->ngroups;
        r->groups[r->ngroups++] = *g; /* no padding: every byte of g is a field */
    }
    struct tk_slot_range *dst = &r->ranges[r->nranges++];
    dst->first = rg->first;
    dst->last = rg->last;
    dst->group = (uint8_t)gi;
    return TK_OK;
}

/* A body: "-", or ranges joined by ';'. w->line > 0 for a file's line. */
static int slots_body(struct tk_slot_ring *r,
                      const char *s,
                      size_t n,
                      bool ordered,
                      size_t line,
                      const struct slots_why *why)
{
    struct slots_where w = {line, r->nranges + 1};
    if (n == 1 && s[0] == '-')
        return TK_OK;
    if (n == 0)
        return slots_refuse(why, &w, "empty body (a ring without ranges is '-')");
    for (size_t i = 0; i <= n;) {
        const char *item = s + i;
        const char *semi = memchr(item, ';', n - i);
        size_t ilen = semi != NULL ? (size_t)(semi - item) : n - i;
        w.range = r->nranges + 1;
        if (ilen == 1 && item[0] == '-')
            return slots_refuse(why, &w, "'-' (no ranges) must be the whole body");
        struct tk_slot_range rg = {0, 0, 0};
        struct tk_slot_group g;
        memset(&g, 0, sizeof(g));
        int rc = slots_parse_range(item, ilen, &rg, &g, why, &w);
        if (rc == TK_OK)
            rc = slots_add(r, &rg, &g, ordered, why, &w);
        if (rc != TK_OK)
            return rc;
        i += ilen + 1;
    }
    return TK_OK;
}

/* ---- whole rings ------------------------------------------------------- */

#ifdef TK_DEBUG
/* Everything core/slots.h says a valid ring is (O(ranges + groups^2)):
 * only the debug assertions use it. */
static bool slots_valid(const struct tk_slot_ring *r)
{
    if (r->ngroups > TK_SLOTS_GROUPS_MAX || r->nranges > TK_SLOTS_RANGES_MAX)
        return false;
    uint64_t used = 0;
    for (uint32_t i = 0; i < r->nranges; i++) {
        const struct tk_slot_range *rg = &r->ranges[i];
        if (rg->first > rg->last || rg->last >= TK_SLOTS || rg->group >= r->ngroups)
            return false;
        if (i > 0 && rg->first <= r->ranges[i - 1].last)
            return false;
        used |= 1ull << rg->group;
    }
    for (uint32_t i = 0; i < r->ngroups; i++) {
        const struct tk_slot_group *g = &r->groups[i];
        if (!tk_slots_name_ok(g->name, g->name_len) ||
            tk_slots_find(r, g->name, g->name_len) != (int)i)
            return false;
        if (g->naddrs < 1 || g->naddrs > TK_SLOTS_ADDRS_MAX || !((used >> i) & 1u))
            return false;
    }
    return true;
}
#endif

static bool slots_blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (s[i] != ' ' && s[i] != '\t')
            return false;
    }
    return true;
}

static bool slots_starts(const char *s, size_t n, const char *word, size_t wlen)
{
    return n >= wlen && memcmp(s, word, wlen) == 0;
}

/* The line "version <u64>", version >= 1. */
static int slots_version(struct tk_slot_ring *r,
                         const char *s,
                         size_t n,
                         const struct slots_why *why,
                         const struct slots_where *w)
{
    if (!slots_starts(s, n, SLOTS_VERSION_WORD, SLOTS_VERSION_WORD_LEN))
        return slots_refuse(why, w, "expected 'version <n>'");
    const char *v = s + SLOTS_VERSION_WORD_LEN;
    size_t vlen = n - SLOTS_VERSION_WORD_LEN;
    uint64_t version = 0;
    if (!tk_proto_parse_u64(v, vlen, &version))
        return slots_refuse(why, w, "version '%.*s%s' not a number (decimal u64, no leading zeros)",
                            slots_show_len(vlen), v, slots_show_more(vlen));
    if (version == 0)
        return slots_refuse(why, w, "version 0 is not a ring version");
    r->version = version;
    return TK_OK;
}

/* Sorts r's ranges by first (insertion sort: stable, at most
 * TK_SLOTS_RANGES_MAX ranges), their lines with them. */
static void slots_sort(struct tk_slot_ring *r, uint32_t *line_of)
{
    for (uint32_t i = 1; i < r->nranges; i++) {
        struct tk_slot_range rg = r->ranges[i];
        uint32_t line = line_of[i];
        uint32_t j = i;
        for (; j > 0 && r->ranges[j - 1].first > rg.first; j--) {
            r->ranges[j] = r->ranges[j - 1];
            line_of[j] = line_of[j - 1];
        }
        r->ranges[j] = rg;
        line_of[j] = line;
    }
}

/* Refuses the first two sorted ranges that share a slot, naming the line
 * of the later one in the file. Sorted by first, any overlap shows between
 * neighbours: if i < j overlap, so do i and i + 1. */
static int slots_overlaps(const struct tk_slot_ring *r,
                          const uint32_t *line_of,
                          const struct slots_why *why)
{
    for (uint32_t i = 1; i < r->nranges; i++) {
        if (r->ranges[i].first > r->ranges[i - 1].last)
            continue;
        uint32_t a = line_of[i] >= line_of[i - 1] ? i : i - 1;
        uint32_t b = a == i ? i - 1 : i;
        struct slots_where w = {line_of[a], 0};
        return slots_refuse(why, &w, "slots %u-%u overlap %u-%u", r->ranges[a].first,
                            r->ranges[a].last, r->ranges[b].first, r->ranges[b].last);
    }
    return TK_OK;
}

/* Renumbers r's groups in the order its (sorted) ranges first name them. */
static void slots_renumber(struct tk_slot_ring *r)
{
    uint8_t to[TK_SLOTS_GROUPS_MAX];
    uint32_t next = 0;
    memset(to, 0xff, sizeof(to));
    for (uint32_t i = 0; i < r->nranges; i++) {
        uint8_t g = r->ranges[i].group;
        if (to[g] == 0xff)
            to[g] = (uint8_t)next++;
        r->ranges[i].group = to[g];
    }
    TK_ASSERT(next == r->ngroups); /* every group came with a range */
    /* Move group i to position to[i], cycle by cycle. */
    for (uint32_t i = 0; i < r->ngroups; i++) {
        while (to[i] != i) {
            uint8_t j = to[i];
            struct tk_slot_group tmp = r->groups[i];
            r->groups[i] = r->groups[j];
            r->groups[j] = tmp;
            to[i] = to[j];
            to[j] = j;
        }
    }
}

int tk_slots_parse_file(const char *text,
                        size_t len,
                        struct tk_slot_ring *r,
                        char *why,
                        size_t whylen)
{
    TK_ASSERT(whylen >= 1);
    struct slots_why y = {why, whylen};
    uint32_t line_of[TK_SLOTS_RANGES_MAX];
    bool have_version = false;
    size_t line = 0;
    memset(r, 0, sizeof(*r));
    why[0] = '\0';
    for (size_t i = 0; i < len;) {
        const char *s = text + i;
        const char *nl = memchr(s, '\n', len - i);
        size_t n = nl != NULL ? (size_t)(nl - s) : len - i;
        struct slots_where w = {++line, 0};
        i += n + 1;
        if (n > 0 && s[n - 1] == '\r')
            n--;
        if (slots_blank(s, n) || s[0] == '#')
            continue;
        if (!have_version) {
            int rc = slots_version(r, s, n, &y, &w);
            if (rc != TK_OK)
                return rc;
            have_version = true;
            continue;
        }
        if (slots_starts(s, n, SLOTS_VERSION_WORD, SLOTS_VERSION_WORD_LEN))
            return slots_refuse(&y, &w, "a second version line");
        uint32_t before = r->nranges;
        int rc = slots_body(r, s, n, false, line, &y);
        if (rc != TK_OK)
            return rc;
        for (uint32_t k = before; k < r->nranges; k++)
            line_of[k] = (uint32_t)TK_MIN(line, UINT32_MAX);
    }
    if (!have_version)
        return slots_refuse(&y, NULL, "no version line");
    slots_sort(r, line_of);
    int rc = slots_overlaps(r, line_of, &y);
    if (rc != TK_OK)
        return rc;
    slots_renumber(r);
    TK_DEBUG_ASSERT(slots_valid(r));
    return TK_OK;
}

int tk_slots_parse_body(const char *text,
                        size_t len,
                        struct tk_slot_ring *r,
                        char *why,
                        size_t whylen)
{
    TK_ASSERT(whylen >= 1);
    TK_ASSERT(r->ngroups <= TK_SLOTS_GROUPS_MAX);
    TK_ASSERT(r->nranges <= TK_SLOTS_RANGES_MAX);
    struct slots_why y = {why, whylen};
    uint32_t ngroups = r->ngroups, nranges = r->nranges;
    why[0] = '\0';
    int rc = slots_body(r, text, len, true, 0, &y);
    if (rc != TK_OK) {
        /* Beyond what the header promises: a refused body leaves the ring
         * as it was, unused bytes zeroed again. */
        memset(&r->groups[ngroups], 0, (r->ngroups - ngroups) * sizeof(r->groups[0]));
        memset(&r->ranges[nranges], 0, (r->nranges - nranges) * sizeof(r->ranges[0]));
        r->ngroups = ngroups;
        r->nranges = nranges;
    }
    TK_DEBUG_ASSERT(slots_valid(r));
    return rc;
}

size_t tk_slots_fmt_range(const struct tk_slot_ring *r, uint32_t i, char *buf, size_t cap)
{
    TK_ASSERT(i < r->nranges);
    TK_ASSERT(cap >= 1);
    const struct tk_slot_range *rg = &r->ranges[i];
    TK_ASSERT(rg->group < r->ngroups);
    const struct tk_slot_group *g = &r->groups[rg->group];
    size_t off = tk_fmt(buf, cap, "%u-%u=%.*s@", rg->first, rg->last, (int)g->name_len, g->name);
    for (uint32_t a = 0; a < g->naddrs; a++)
        off += tk_fmt(buf + off, cap - off, "%s%s", a > 0 ? "," : "", g->addr[a]);
    TK_ASSERT(off < cap);
    return off;
}

/* ---- the binary encoding ----------------------------------------------- */

struct slots_writer {
    uint8_t *buf;
    size_t cap, off;
    bool over;
};

static void slots_put(struct slots_writer *w, const void *p, size_t n)
{
    if (w->over || w->cap - w->off < n) {
        w->over = true;
        return;
    }
    if (n > 0)
        memcpy(w->buf + w->off, p, n);
    w->off += n;
}

static void slots_put_le(struct slots_writer *w, uint64_t v, size_t bytes)
{
    uint8_t b[8];
    for (size_t i = 0; i < bytes; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    slots_put(w, b, bytes);
}

size_t tk_slots_encode(const struct tk_slot_ring *r, uint8_t *buf, size_t cap)
{
    TK_ASSERT(r->ngroups <= TK_SLOTS_GROUPS_MAX);
    TK_ASSERT(r->nranges <= TK_SLOTS_RANGES_MAX);
    TK_DEBUG_ASSERT(slots_valid(r));
    struct slots_writer w = {buf, cap, 0, false};
    slots_put_le(&w, r->version, 8);
    slots_put_le(&w, r->ngroups, 2);
    for (uint32_t i = 0; i < r->ngroups; i++) {
        const struct tk_slot_group *g = &r->groups[i];
        TK_ASSERT(g->name_len >= 1 && g->name_len <= TK_SLOTS_NAME_MAX);
        TK_ASSERT(g->naddrs <= TK_SLOTS_ADDRS_MAX);
        slots_put_le(&w, g->name_len, 1);
        slots_put(&w, g->name, g->name_len);
        slots_put_le(&w, g->naddrs, 1);
        for (uint32_t a = 0; a < g->naddrs; a++) {
            size_t alen = strnlen(g->addr[a], sizeof(g->addr[a]));
            TK_ASSERT(alen <= TK_SLOTS_ADDR_MAX);
            slots_put_le(&w, alen, 1);
            slots_put(&w, g->addr[a], alen);
        }
    }
    slots_put_le(&w, r->nranges, 2);
    for (uint32_t i = 0; i < r->nranges; i++) {
        slots_put_le(&w, r->ranges[i].first, 2);
        slots_put_le(&w, r->ranges[i].last, 2);
        slots_put_le(&w, r->ranges[i].group, 1);
    }
    if (w.over)
        return 0;
    TK_ASSERT(w.off <= TK_SLOTS_ENCODED_MAX);
    return w.off;
}

/* Reads never go past len: a short read sets short_read and yields
 * zeros, and the decoder refuses at its next check. */
struct slots_reader {
    const uint8_t *buf;
    size_t len, off;
    bool short_read;
};

static const uint8_t *slots_get(struct slots_reader *rd, size_t n)
{
    if (rd->short_read || rd->len - rd->off < n) {
        rd->short_read = true;
        return NULL;
    }
    const uint8_t *p = rd->buf + rd->off;
    rd->off += n;
    return p;
}

static uint64_t slots_get_le(struct slots_reader *rd, size_t bytes)
{
    const uint8_t *p = slots_get(rd, bytes);
    uint64_t v = 0;
    for (size_t i = 0; p != NULL && i < bytes; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* One group into g (zeroed); a static phrase if it is not valid. */
static const char *slots_decode_group(struct slots_reader *rd, struct tk_slot_group *g)
{
    size_t name_len = (size_t)slots_get_le(rd, 1);
    const uint8_t *name = slots_get(rd, name_len);
    if (name == NULL)
        return "truncated";
    if (!tk_slots_name_ok((const char *)name, name_len))
        return "group name not valid";
    memcpy(g->name, name, name_len);
    g->name_len = (uint8_t)name_len;
    uint64_t naddrs = slots_get_le(rd, 1);
    if (rd->short_read)
        return "truncated";
    if (naddrs < 1 || naddrs > TK_SLOTS_ADDRS_MAX)
        return "address count not 1-5";
    for (uint64_t a = 0; a < naddrs; a++) {
        size_t alen = (size_t)slots_get_le(rd, 1);
        const uint8_t *addr = slots_get(rd, alen);
        struct tk_addr parsed;
        const char *w = NULL;
        if (addr == NULL)
            return "truncated";
        if (alen < 1 || alen > TK_SLOTS_ADDR_MAX)
            return "address length not 1-128";
        if (tk_addr_parse((const char *)addr, alen, &parsed, &w) != TK_OK)
            return "address not valid";
        memcpy(g->addr[a], addr, alen);
    }
    g->naddrs = (uint8_t)naddrs;
    return NULL;
}

/* The ranges into r, whose groups are decoded; a static phrase if the
 * ranges or the groups they name are not valid. */
static const char *slots_decode_ranges(struct slots_reader *rd, struct tk_slot_ring *r)
{
    uint64_t nranges = slots_get_le(rd, 2);
    uint64_t used = 0;
    if (rd->short_read)
        return "truncated";
    if (nranges > TK_SLOTS_RANGES_MAX)
        return "more than 1024 ranges";
    for (uint32_t i = 0; i < nranges; i++) {
        uint64_t first = slots_get_le(rd, 2), last = slots_get_le(rd, 2);
        uint64_t group = slots_get_le(rd, 1);
        if (rd->short_read)
            return "truncated";
        if (last >= TK_SLOTS)
            return "slot out of range";
        if (first > last)
            return "first slot after last";
        if (i > 0 && first <= r->ranges[i - 1].last)
            return "ranges out of order or overlapping";
        if (group >= r->ngroups)
            return "range names no group";
        r->ranges[i].first = (uint16_t)first;
        r->ranges[i].last = (uint16_t)last;
        r->ranges[i].group = (uint8_t)group;
        r->nranges = i + 1;
        used |= 1ull << group;
    }
    for (uint32_t g = 0; g < r->ngroups; g++) {
        if (!((used >> g) & 1u))
            return "group named by no range";
    }
    return NULL;
}

int tk_slots_decode(const uint8_t *buf, size_t len, struct tk_slot_ring *r, const char **why)
{
    struct slots_reader rd = {buf, len, 0, false};
    const char *bad = NULL;
    memset(r, 0, sizeof(*r));
    r->version = slots_get_le(&rd, 8);
    uint64_t ngroups = slots_get_le(&rd, 2);
    if (rd.short_read)
        bad = "truncated";
    else if (r->version == 0)
        bad = "ring version 0";
    else if (ngroups > TK_SLOTS_GROUPS_MAX)
        bad = "more than 64 groups";
    for (uint32_t i = 0; bad == NULL && i < ngroups; i++) {
        struct tk_slot_group *g = &r->groups[i];
        bad = slots_decode_group(&rd, g);
        if (bad == NULL && tk_slots_find(r, g->name, g->name_len) >= 0)
            bad = "two groups of one name";
        if (bad == NULL)
            r->ngroups = i + 1;
    }
    if (bad == NULL)
        bad = slots_decode_ranges(&rd, r);
    if (bad == NULL && rd.off != len)
        bad = "bytes after the ring";
    if (bad != NULL) {
        if (why != NULL)
            *why = bad;
        return TK_EPROTO;
    }
    TK_DEBUG_ASSERT(slots_valid(r));
    return TK_OK;
}

/* ---- comparison and lookups -------------------------------------------- */

/* Field by field. Groups are matched by name, not index: two rings that
 * give the same ranges to the same groups are equal whatever the order of
 * their groups[] (a parsed ring's order is canonical anyway). */
bool tk_slots_equal(const struct tk_slot_ring *a, const struct tk_slot_ring *b)
{
    if (a->version != b->version || a->ngroups != b->ngroups || a->nranges != b->nranges)
        return false;
    TK_ASSERT(a->nranges <= TK_SLOTS_RANGES_MAX);
    TK_ASSERT(a->ngroups <= TK_SLOTS_GROUPS_MAX);
    for (uint32_t i = 0; i < a->nranges; i++) {
        const struct tk_slot_range *ra = &a->ranges[i], *rb = &b->ranges[i];
        if (ra->first != rb->first || ra->last != rb->last)
            return false;
        TK_ASSERT(ra->group < a->ngroups);
        TK_ASSERT(rb->group < b->ngroups);
        if (!slots_group_same(&a->groups[ra->group], &b->groups[rb->group]))
            return false;
    }
    for (uint32_t i = 0; i < a->ngroups; i++) {
        const struct tk_slot_group *g = &a->groups[i];
        int j = tk_slots_find(b, g->name, g->name_len);
        if (j < 0 || !slots_group_same(g, &b->groups[j]))
            return false;
    }
    return true;
}

int tk_slots_owner(const struct tk_slot_ring *r, uint32_t slot)
{
    TK_ASSERT(slot < TK_SLOTS);
    TK_ASSERT(r->nranges <= TK_SLOTS_RANGES_MAX);
    /* The last range whose first is <= slot: lo ends as their count. */
    uint32_t lo = 0, hi = r->nranges;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (r->ranges[mid].first <= slot)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0 || r->ranges[lo - 1].last < slot)
        return -1;
    return r->ranges[lo - 1].group;
}

int tk_slots_find(const struct tk_slot_ring *r, const char *name, size_t len)
{
    TK_ASSERT(r->ngroups <= TK_SLOTS_GROUPS_MAX);
    for (uint32_t i = 0; i < r->ngroups; i++) {
        const struct tk_slot_group *g = &r->groups[i];
        if (g->name_len == len && memcmp(g->name, name, len) == 0)
            return (int)i;
    }
    return -1;
}

uint32_t tk_slots_owned(const struct tk_slot_ring *r,
                        const char *name,
                        size_t len,
                        uint64_t bits[TK_SLOTS_WORDS])
{
    memset(bits, 0, TK_SLOTS_WORDS * sizeof(bits[0]));
    int g = tk_slots_find(r, name, len);
    uint32_t count = 0;
    for (uint32_t i = 0; g >= 0 && i < r->nranges; i++) {
        const struct tk_slot_range *rg = &r->ranges[i];
        if (rg->group != g)
            continue;
        for (uint32_t s = rg->first; s <= rg->last; s++)
            bits[s / 64] |= 1ull << (s % 64);
        count += (uint32_t)(rg->last - rg->first) + 1;
    }
    TK_ASSERT(count <= TK_SLOTS);
    return count;
}
