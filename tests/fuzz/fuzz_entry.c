/* Fuzz target "entry": a committed DATA entry as a follower's Raft driver
 * judges it before applying it (tk_driver_check_entry, raft/driver.h): a
 * batch of lock commands, or a ring or a step of a slot move (the entries
 * of raft/driver_slots.c, docs/protocol.md "Frames").
 *
 * Input: u64 token_first | u64 token_next | entry data, little-endian.
 *
 * Checked: the check never crashes or reads outside the entry; an entry
 * marked as a ring or a move step is taken only with token_first equal to
 * token_next (it takes no token) and only if its op is 1-4; a batch is
 * taken only if its tokens end at token_next; whatever was taken is taken
 * again from an exact copy, and every strict prefix of a taken entry is
 * refused.
 */
#include "tests/fuzz/fuzz.h"

#include "raft/driver.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 16 || size - 16 > TK_RAFT_ENTRY_BYTES_MAX)
        return 0;
    uint64_t first, next;
    memcpy(&first, data, 8);
    memcpy(&next, data + 8, 8);
    uint32_t len = (uint32_t)(size - 16);
    uint8_t *e = (uint8_t *)fuzz_dup(data + 16, len);
    int rc = tk_driver_check_entry(e, len, first, next);
    FUZZ_CHECK(rc == TK_OK || rc == TK_EPROTO);
    if (rc == TK_OK) {
        uint32_t mark = 0;
        FUZZ_CHECK(len >= 4);
        memcpy(&mark, e, 4);
        if (mark == UINT32_MAX) {
            FUZZ_CHECK(first == next);
            FUZZ_CHECK(len >= 6 && e[4] >= 1 && e[4] <= 4);
        } else {
            FUZZ_CHECK(next >= first);
        }
        FUZZ_CHECK(tk_driver_check_entry(e, len, first, next) == TK_OK);
        for (uint32_t cut = 0; cut < len; cut += 1 + len / 64) {
            uint8_t *p = (uint8_t *)fuzz_dup(e, cut);
            FUZZ_CHECK(tk_driver_check_entry(p, cut, first, next) == TK_EPROTO);
            free(p);
        }
    }
    free(e);
    return 0;
}
