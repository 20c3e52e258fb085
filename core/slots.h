/* The ring of a deployment of several groups (SPEC 15): which group owns
 * which slots (core/tk.h, tk_slot), and where each group's nodes take
 * clients. One parser, one encoding and one text form, shared by
 * ticketingd (the ring in a group's replicated state, the S answer),
 * ticketctl (`ring apply`, `ring show`) and libticketing (routing).
 *
 * The text of one range:
 *
 *     <first>-<last>=<group>@<addr>[,<addr>...]
 *
 * first <= last <= 16383 in decimal without leading zeros, a group name of
 * 1-64 bytes 0x21-0x7E except ';' and '@', and 1-5 client addresses
 * ("host:port", core/addr.h) of at most TK_SLOTS_ADDR_MAX bytes each,
 * joined by ','. The ranges of a ring, joined by ';' in increasing order
 * of first, are its body; the body of a ring without ranges is "-".
 *
 * A ring file (`ticketctl ring apply FILE`) is lines: blank lines and
 * lines starting with '#' are skipped, the first other line is
 * "version <u64>", every other line is a body (one range, or several
 * joined by ';'). Ranges may come in any order in a file; the ring keeps
 * them sorted.
 *
 * What a valid ring is: version >= 1 (0 is "no ring yet", never written),
 * at most TK_SLOTS_GROUPS_MAX groups and TK_SLOTS_RANGES_MAX ranges, no
 * two ranges sharing a slot, and each group named with one address list
 * wherever it appears. Slots no range covers are owned by no group.
 *
 * Pure: no I/O, no allocation; any thread may call these on its own
 * structs. A struct tk_slot_ring is about 50 KiB: allocate it, do not
 * put it on a small stack.
 */
#ifndef TK_CORE_SLOTS_H
#define TK_CORE_SLOTS_H

#include "core/tk.h"

#define TK_SLOTS_GROUPS_MAX 64
#define TK_SLOTS_RANGES_MAX 1024
#define TK_SLOTS_NAME_MAX 64
#define TK_SLOTS_ADDRS_MAX 5
#define TK_SLOTS_ADDR_MAX 128
/* Words of a bitmap of every slot. */
#define TK_SLOTS_WORDS (TK_SLOTS / 64)
/* Longest text of one range: "16383-16383=" name "@" 5 addresses and
 * 4 commas. */
#define TK_SLOTS_RANGE_TEXT_MAX \
    (12 + TK_SLOTS_NAME_MAX + 1 + TK_SLOTS_ADDRS_MAX * (TK_SLOTS_ADDR_MAX + 1) - 1)
/* Longest binary encoding of a ring (tk_slots_encode). */
#define TK_SLOTS_ENCODED_MAX                                                          \
    (8 + 2 +                                                                          \
     TK_SLOTS_GROUPS_MAX *                                                            \
         (1 + TK_SLOTS_NAME_MAX + 1 + TK_SLOTS_ADDRS_MAX * (1 + TK_SLOTS_ADDR_MAX)) + \
     2 + TK_SLOTS_RANGES_MAX * 5)

struct tk_slot_group {
    uint8_t name_len, naddrs;
    char name[TK_SLOTS_NAME_MAX + 1];                     /* NUL-terminated */
    char addr[TK_SLOTS_ADDRS_MAX][TK_SLOTS_ADDR_MAX + 1]; /* NUL-terminated */
};

struct tk_slot_range {
    uint16_t first, last; /* first <= last < TK_SLOTS */
    uint8_t group;        /* index into groups */
};

/* A ring: ranges sorted by first and disjoint; every group is named by at
 * least one range (a parsed or decoded ring lists no other). */
struct tk_slot_ring {
    uint64_t version;
    uint32_t ngroups, nranges;
    struct tk_slot_group groups[TK_SLOTS_GROUPS_MAX];
    struct tk_slot_range ranges[TK_SLOTS_RANGES_MAX];
};

/* Whether name (len bytes) is a valid group name. */
bool tk_slots_name_ok(const char *name, size_t len);

/* Parses a ring file (format above) of len bytes into *r. Returns TK_OK,
 * or TK_EINVAL with a sentence in why (cut to whylen >= 1 bytes,
 * NUL-terminated) that names the line at fault, e.g. "line 3: slots
 * 100-200 overlap 150-300". *r is unspecified after a refusal. */
int tk_slots_parse_file(const char *text,
                        size_t len,
                        struct tk_slot_ring *r,
                        char *why,
                        size_t whylen);
/* Parses a body ("-" or ranges joined by ';', which must be in increasing
 * order: an S answer) and adds its ranges to *r, whose version the caller
 * sets. Several bodies (the lines of a many-line S answer) may be added
 * to one ring in turn, each continuing after the last. Returns TK_OK or
 * TK_EINVAL with why as above (no line number). */
int tk_slots_parse_body(const char *text,
                        size_t len,
                        struct tk_slot_ring *r,
                        char *why,
                        size_t whylen);

/* The text of range i of r into buf (cap >= TK_SLOTS_RANGE_TEXT_MAX + 1
 * always suffices), NUL-terminated; returns its length. */
size_t tk_slots_fmt_range(const struct tk_slot_ring *r, uint32_t i, char *buf, size_t cap);

/* Binary encoding (little-endian): u64 version | u16 ngroups | per group
 * (u8 name_len | name | u8 naddrs | per address u8 len | bytes) | u16
 * nranges | per range (u16 first | u16 last | u8 group). Returns the
 * length, at most TK_SLOTS_ENCODED_MAX, or 0 if cap is too small. */
size_t tk_slots_encode(const struct tk_slot_ring *r, uint8_t *buf, size_t cap);
/* Decodes and checks everything a valid ring must be (above), and that
 * every group is named by some range and nothing follows the ring.
 * Returns TK_OK, or TK_EPROTO with *why (may be NULL) set to a static
 * phrase. */
int tk_slots_decode(const uint8_t *buf, size_t len, struct tk_slot_ring *r, const char **why);

/* Whether a and b say the same (version, ranges, groups and addresses). */
bool tk_slots_equal(const struct tk_slot_ring *a, const struct tk_slot_ring *b);

/* The group index owning slot (-1: none). */
int tk_slots_owner(const struct tk_slot_ring *r, uint32_t slot);
/* The group index named name (-1: none). */
int tk_slots_find(const struct tk_slot_ring *r, const char *name, size_t len);
/* Sets bits[slot / 64] bit slot % 64 for every slot group `name` owns in
 * r, clears every other; returns how many slots it owns. */
uint32_t tk_slots_owned(const struct tk_slot_ring *r,
                        const char *name,
                        size_t len,
                        uint64_t bits[TK_SLOTS_WORDS]);

static inline bool tk_slots_bit(const uint64_t *bits, uint32_t slot)
{
    return (bits[slot / 64] >> (slot % 64)) & 1u;
}

#endif
