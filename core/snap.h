/* The snapshot blob of the lock state: what the Raft thread cuts from every
 * shard and what a follower installs (raft/driver.c).
 *
 *     "TKSNAP03" | u64 count | count x (u32 left_ms | GRANT encoding)
 *
 * left_ms (little-endian) is what was left of the holder's lease when its
 * shard cut the snapshot, 1..lease_ms: an install counts that, not a fresh
 * lease, so a holder's lease is not stretched by install + failover.
 * count is in host byte order, as the Raft thread writes it (little-endian
 * on every supported target). One GRANT per held key, keys distinct, tokens
 * distinct, non-zero and below the snapshot's fencing counter, in any order (each
 * shard's part in the order its incremental cut listed it), and nothing
 * after the last record. A blob of the previous layout, "TKSNAP02" (the same
 * records, merged in strictly increasing token order), is still read, so a
 * member of this version can install from a leader of the last one.
 *
 * A group that keeps more than its locks in its replicated state (the
 * ring of SPEC 15, raft/driver.h) writes "TKSNAP04": the same, with that
 * state between the header and the records,
 *
 *     "TKSNAP04" | u64 count | u32 state_len | state | records
 *
 * state_len 1..TK_SNAP_STATE_MAX (host byte order), the state opaque here
 * (the driver reads and checks it). A group with no such state writes
 * TKSNAP03 exactly as before, so members of the last version install it.
 *
 * The blob reaches a follower from its leader over the peer link, so a
 * follower checks all of it with tk_snap_check() before it drops its own
 * state: a malformed blob must never leave a half-restored table.
 *
 * Pure: no I/O, clocks or threads. tk_snap_check() allocates a scratch index
 * of the keys (freed before it returns); the other two allocate nothing.
 */
#ifndef TK_CORE_SNAP_H
#define TK_CORE_SNAP_H

#include "core/cmd.h"
#include "core/tk.h"

#define TK_SNAP_MAGIC "TKSNAP03"
#define TK_SNAP_MAGIC_V2 "TKSNAP02"
#define TK_SNAP_MAGIC_STATE "TKSNAP04"
#define TK_SNAP_STATE_MAX (1u << 20)
#define TK_SNAP_MAGIC_LEN 8
#define TK_SNAP_HEADER_LEN 16

/* Bytes of a blob of count records whose keys and owners take
 * key_owner_bytes together (what tk_lock_cut_begin() reports). */
size_t tk_snap_bytes(uint64_t count, uint64_t key_owner_bytes);
/* Writes the header (TK_SNAP_HEADER_LEN bytes) of a blob of count records. */
void tk_snap_put_header(uint8_t *blob, uint64_t count);
/* Bytes before the first record: TK_SNAP_HEADER_LEN, or with a state of
 * state_len > 0 bytes, its length field and the state too. */
size_t tk_snap_header_len(size_t state_len);
/* Writes the header and the state (tk_snap_header_len(state_len) bytes):
 * TKSNAP04 with a state, TKSNAP03 when state_len is 0. */
void tk_snap_put_header_state(uint8_t *blob,
                              uint64_t count,
                              const uint8_t *state,
                              size_t state_len);
/* tk_snap_header(), and the state: *state NULL and *state_len 0 when the
 * blob has none (state and state_len may be NULL). */
int tk_snap_state(const uint8_t *blob,
                  size_t len,
                  uint64_t *count,
                  size_t *pos,
                  const uint8_t **state,
                  size_t *state_len);

/* Reads the header: checks the magic and that the blob is long enough for
 * it, stores the record count in *count and sets *pos to the first record.
 * Returns TK_OK or TK_EPROTO (then *count and *pos are untouched). */
int tk_snap_header(const uint8_t *blob, size_t len, uint64_t *count, size_t *pos);

/* Decodes the record at *pos into *out and advances *pos past it. The record
 * must be a well-formed GRANT (tk_cmd_check) with a non-zero token and
 * 1 <= left_ms <= lease_ms; *left_ms (may be NULL) gets the latter. Returns
 * TK_OK, or TK_EPROTO for a truncated or malformed record or another command
 * type (then *pos and *out are untouched). *pos must be at most len. */
int tk_snap_next(const uint8_t *blob,
                 size_t len,
                 size_t *pos,
                 struct tk_cmd *out,
                 uint32_t *left_ms);

/* Writes one record (left_ms, then the GRANT) into buf; returns its length,
 * or 0 if cap is too small. */
size_t tk_snap_put(uint8_t *buf, size_t cap, const struct tk_cmd *grant, uint32_t left_ms);
#define TK_SNAP_RECORD_MAX (4 + TK_CMD_ENCODED_MAX)

/* One holder as its record needs it, pointing into the lock table: a cut
 * lists millions, so it builds no struct tk_cmd for each. */
struct tk_snap_holder {
    const char *key, *owner;
    uint8_t key_len, owner_len;
    uint32_t lease_ms, left_ms; /* 1 <= left_ms <= lease_ms */
    uint64_t token;
};
/* The same record as tk_snap_put() of that GRANT; 0 if cap is too small. */
size_t tk_snap_put_holder(uint8_t *buf, size_t cap, const struct tk_snap_holder *h);

/* Checks a whole blob: the header, exactly count records each accepted by
 * tk_snap_next(), tokens all below token_next (the fencing counter the
 * snapshot's index carries; UINT64_MAX disables that bound) and strictly
 * increasing in a TKSNAP02 blob, no key or token twice, and no trailing bytes. On TK_OK stores the
 * record count in *count (may be NULL). Returns TK_OK, TK_EPROTO with *why (may be NULL) set to a
 * static phrase naming the first problem, or TK_ENOMEM if the key index could not be allocated
 * (*why says so too). */
int tk_snap_check(const uint8_t *blob,
                  size_t len,
                  uint64_t token_next,
                  uint64_t *count,
                  const char **why);

#endif
