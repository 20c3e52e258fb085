/* The snapshot blob of the lock state: what the Raft thread cuts from every
 * shard and what a follower installs (raft/driver.c).
 *
 *     "TKSNAP02" | u64 count | count x (u32 left_ms | GRANT encoding)
 *
 * left_ms (little-endian) is what was left of the holder's lease when its
 * shard cut the snapshot, 1..lease_ms: an install counts that, not a fresh
 * lease, so a holder's lease is not stretched by install + failover.
 * count is in host byte order, as the Raft thread writes it (little-endian
 * on every supported target). One GRANT per held key, keys distinct, tokens
 * non-zero and strictly increasing (the blob is merged in token order), and
 * nothing after the last record.
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

#define TK_SNAP_MAGIC "TKSNAP02"
#define TK_SNAP_MAGIC_LEN 8
#define TK_SNAP_HEADER_LEN 16

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

/* Checks a whole blob: the header, exactly count records each accepted by
 * tk_snap_next(), tokens strictly increasing and all below token_next (the
 * fencing counter the snapshot's index carries; UINT64_MAX disables that
 * bound), no key twice, and no trailing bytes. On TK_OK stores the record
 * count in *count (may be NULL). Returns TK_OK, TK_EPROTO with *why (may be
 * NULL) set to a static phrase naming the first problem, or TK_ENOMEM if the
 * key index could not be allocated (*why says so too). */
int tk_snap_check(const uint8_t *blob,
                  size_t len,
                  uint64_t token_next,
                  uint64_t *count,
                  const char **why);

#endif
