/* Fuzz target "slots": the ring of core/slots.h (SPEC 15) as ticketctl
 * reads a ring file (`ring apply`), as libticketing reads an S answer's
 * body, and as ticketingd decodes the ring of its replicated state.
 *
 * The whole input is fed three ways: to tk_slots_parse_file, to
 * tk_slots_parse_body (on an empty ring) and to tk_slots_decode.
 *
 * Checked: every refusal has a sentence (a phrase for decode) that fits;
 * a refused body leaves the ring empty; every accepted ring is valid by an
 * independent reading of the header's rules; it encodes within
 * TK_SLOTS_ENCODED_MAX, decodes back equal, and encodes again to the same
 * bytes (a decoded input re-encodes to exactly the input); each range
 * formats within TK_SLOTS_RANGE_TEXT_MAX, and the ranges' texts, parsed as
 * bodies one after another and joined by ';' into one body, give an equal
 * ring; tk_slots_owner and tk_slots_owned agree with the ranges.
 */
#include "tests/fuzz/fuzz.h"

#include "core/slots.h"

#define INPUT_MAX 65536
#define WHY_LEN 200

/* Static: a ring is about 50 KiB, and libFuzzer runs one input at a time. */
static struct tk_slot_ring ring, other, again;
static uint8_t enc[TK_SLOTS_ENCODED_MAX], enc2[TK_SLOTS_ENCODED_MAX];
static char body[TK_SLOTS_RANGES_MAX * (TK_SLOTS_RANGE_TEXT_MAX + 1) + 2];

/* The header's rules, read again. */
static void check_valid(const struct tk_slot_ring *r)
{
    FUZZ_CHECK(r->version >= 1);
    FUZZ_CHECK(r->ngroups <= TK_SLOTS_GROUPS_MAX);
    FUZZ_CHECK(r->nranges <= TK_SLOTS_RANGES_MAX);
    bool used[TK_SLOTS_GROUPS_MAX] = {false};
    for (uint32_t i = 0; i < r->nranges; i++) {
        const struct tk_slot_range *rg = &r->ranges[i];
        FUZZ_CHECK(rg->first <= rg->last && rg->last < TK_SLOTS);
        FUZZ_CHECK(rg->group < r->ngroups);
        FUZZ_CHECK(i == 0 || rg->first > r->ranges[i - 1].last);
        used[rg->group] = true;
    }
    for (uint32_t i = 0; i < r->ngroups; i++) {
        const struct tk_slot_group *g = &r->groups[i];
        FUZZ_CHECK(used[i]);
        FUZZ_CHECK(g->name_len >= 1 && g->name_len <= TK_SLOTS_NAME_MAX);
        FUZZ_CHECK(g->name[g->name_len] == '\0');
        for (uint32_t k = 0; k < g->name_len; k++) {
            unsigned char c = (unsigned char)g->name[k];
            FUZZ_CHECK(c >= 0x21 && c <= 0x7e && c != ';' && c != '@');
        }
        for (uint32_t j = 0; j < i; j++)
            FUZZ_CHECK(g->name_len != r->groups[j].name_len ||
                       memcmp(g->name, r->groups[j].name, g->name_len) != 0);
        FUZZ_CHECK(g->naddrs >= 1 && g->naddrs <= TK_SLOTS_ADDRS_MAX);
        for (uint32_t a = 0; a < g->naddrs; a++) {
            size_t n = strnlen(g->addr[a], sizeof(g->addr[a]));
            FUZZ_CHECK(n >= 1 && n <= TK_SLOTS_ADDR_MAX);
            FUZZ_CHECK(strpbrk(g->addr[a], ",;@ ") == NULL);
        }
    }
}

/* Encode, decode, compare, encode again. */
static void check_round_trip(const struct tk_slot_ring *r)
{
    const char *why = NULL;
    size_t n = tk_slots_encode(r, enc, sizeof(enc));
    FUZZ_CHECK(n >= 12 && n <= TK_SLOTS_ENCODED_MAX);
    FUZZ_CHECK(tk_slots_encode(r, enc2, n - 1) == 0);
    uint8_t *copy = (uint8_t *)fuzz_dup(enc, n);
    FUZZ_CHECK(tk_slots_decode(copy, n, &again, &why) == TK_OK);
    FUZZ_CHECK(tk_slots_equal(r, &again));
    FUZZ_CHECK(tk_slots_equal(&again, r));
    FUZZ_CHECK(tk_slots_encode(&again, enc2, sizeof(enc2)) == n);
    FUZZ_CHECK(memcmp(enc, enc2, n) == 0);
    free(copy);
}

/* Each range's text as a body of its own, then all of them as one. */
static void check_texts(const struct tk_slot_ring *r)
{
    char why[WHY_LEN];
    size_t off = 0;
    memset(&other, 0, sizeof(other));
    other.version = r->version;
    for (uint32_t i = 0; i < r->nranges; i++) {
        char *t = body + off + (i > 0);
        size_t n = tk_slots_fmt_range(r, i, t, TK_SLOTS_RANGE_TEXT_MAX + 1);
        FUZZ_CHECK(n == strlen(t) && n <= TK_SLOTS_RANGE_TEXT_MAX);
        char *copy = fuzz_dup((const uint8_t *)t, n);
        FUZZ_CHECK(tk_slots_parse_body(copy, n, &other, why, sizeof(why)) == TK_OK);
        free(copy);
        if (i > 0)
            body[off] = ';';
        off += n + (i > 0);
    }
    FUZZ_CHECK(tk_slots_equal(r, &other));
    if (r->nranges == 0)
        body[off++] = '-';
    char *copy = fuzz_dup((const uint8_t *)body, off);
    memset(&other, 0, sizeof(other));
    other.version = r->version;
    FUZZ_CHECK(tk_slots_parse_body(copy, off, &other, why, sizeof(why)) == TK_OK);
    FUZZ_CHECK(tk_slots_equal(r, &other));
    free(copy);
}

/* owner() of every slot against owned() of each group: each group's bits
 * count what owned() returns, those counts add up to the slots the ranges
 * cover, and every owned slot is set in its owner's bits (so no other bit
 * is set anywhere). */
static void check_lookups(const struct tk_slot_ring *r)
{
    static uint64_t bits[TK_SLOTS_GROUPS_MAX][TK_SLOTS_WORDS];
    uint32_t total = 0, covered = 0, owned = 0;
    for (uint32_t g = 0; g < r->ngroups; g++) {
        FUZZ_CHECK(tk_slots_find(r, r->groups[g].name, r->groups[g].name_len) == (int)g);
        uint32_t n = tk_slots_owned(r, r->groups[g].name, r->groups[g].name_len, bits[g]);
        uint32_t set = 0;
        for (uint32_t w = 0; w < TK_SLOTS_WORDS; w++)
            set += (uint32_t)__builtin_popcountll(bits[g][w]);
        FUZZ_CHECK(set == n);
        total += n;
    }
    for (uint32_t i = 0; i < r->nranges; i++)
        covered += (uint32_t)(r->ranges[i].last - r->ranges[i].first) + 1;
    FUZZ_CHECK(total == covered);
    for (uint32_t s = 0; s < TK_SLOTS; s++) {
        int o = tk_slots_owner(r, s);
        FUZZ_CHECK(o >= -1 && o < (int)r->ngroups);
        if (o >= 0) {
            FUZZ_CHECK(tk_slots_bit(bits[o], s));
            owned++;
        }
    }
    FUZZ_CHECK(owned == covered);
}

static void check_accepted(const struct tk_slot_ring *r)
{
    check_valid(r);
    check_round_trip(r);
    check_texts(r);
    check_lookups(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > INPUT_MAX)
        return 0;
    char why[WHY_LEN];
    char *x = fuzz_dup(data, size); /* exactly size: ASan catches a read past it */

    memset(why, 'x', sizeof(why));
    if (tk_slots_parse_file(x, size, &ring, why, sizeof(why)) == TK_OK)
        check_accepted(&ring);
    else
        FUZZ_CHECK(why[0] != '\0' && strlen(why) < sizeof(why));

    memset(&ring, 0, sizeof(ring));
    ring.version = 1;
    if (tk_slots_parse_body(x, size, &ring, why, sizeof(why)) == TK_OK) {
        check_accepted(&ring);
    } else {
        FUZZ_CHECK(why[0] != '\0' && strlen(why) < sizeof(why));
        FUZZ_CHECK(ring.nranges == 0 && ring.ngroups == 0);
    }

    const char *phrase = NULL;
    if (tk_slots_decode((const uint8_t *)x, size, &ring, &phrase) == TK_OK) {
        check_accepted(&ring);
        /* One encoding per ring: the input is it. */
        FUZZ_CHECK(tk_slots_encode(&ring, enc, sizeof(enc)) == size);
        FUZZ_CHECK(memcmp(enc, data, size) == 0);
    } else {
        FUZZ_CHECK(phrase != NULL && phrase[0] != '\0');
    }
    free(x);
    return 0;
}
