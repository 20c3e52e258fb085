/* Fuzz target "cmd": replicated lock commands (core/cmd.h) inside the DATA
 * entry batch format, as the Raft thread decodes a committed entry
 * (net/raftd.c apply_entry()).
 *
 * Input: u64 token_first | u32 token_count | entry data, where the entry
 * data is u32 ncmds | ncmds tk_cmd encodings (tokens filled in), all
 * little-endian. The walk is apply_entry()'s, with each of its assertions
 * turned into "malformed": every command decodes, GRANT/HANDOFF tokens are
 * token_first, token_first + 1, ..., nothing follows the last command, and
 * the tokens used are token_count.
 *
 * Checked for every command: tk_cmd_decode() accepts exactly what an
 * independent reading of the field rules in core/cmd.h accepts, leaves
 * *used alone when it refuses, refuses every truncation of an accepted
 * command, and an accepted command encodes back to the same bytes.
 */
#include "tests/fuzz/fuzz.h"

#include "core/cmd.h"

#define HEADER 24

static uint64_t le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static bool visible(const uint8_t *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] < 0x21 || s[i] > 0x7e)
            return false;
    return true;
}

/* The rules of core/cmd.h, read independently of tk_cmd_check(). Returns
 * the encoded size, or 0 if the bytes are not one valid command. */
static size_t ref_cmd(const uint8_t *p, size_t len)
{
    if (len < HEADER)
        return 0;
    uint8_t type = p[0], key_len = p[1], owner_len = p[2], expired = p[3];
    uint64_t lease = le(p + 4, 4), old_token = le(p + 8, 8), token = le(p + 16, 8);
    size_t n = HEADER + (size_t)key_len + owner_len;
    if (n > len || key_len < 1 || key_len > TK_KEY_LEN_MAX || !visible(p + HEADER, key_len))
        return 0;
    switch (type) {
        case TK_CMD_GRANT:
        case TK_CMD_HANDOFF:
            if (owner_len < 1 || owner_len > TK_OWNER_LEN_MAX ||
                !visible(p + HEADER + key_len, owner_len))
                return 0;
            if (lease < TK_LEASE_MS_MIN || lease > TK_LEASE_MS_MAX)
                return 0;
            if (type == TK_CMD_GRANT && (old_token != 0 || expired != 0))
                return 0;
            if (type == TK_CMD_HANDOFF && (old_token == 0 || expired > 1))
                return 0;
            return n;
        case TK_CMD_RELEASE:
        case TK_CMD_EXPIRE:
            if (owner_len != 0 || old_token == 0 || token != 0 || expired != 0)
                return 0;
            return n;
        default:
            return 0;
    }
}

/* One command at p: decode, compare with the reference, round trip. */
static int one_cmd(const uint8_t *p, size_t len, struct tk_cmd *c, size_t *used)
{
    size_t want = ref_cmd(p, len);
    size_t got = 12345;
    int rc = tk_cmd_decode(p, len, c, &got);
    if (rc != TK_OK) {
        FUZZ_CHECK(rc == TK_EPROTO && want == 0 && got == 12345);
        return rc;
    }
    FUZZ_CHECK(want == got);
    FUZZ_CHECK(tk_cmd_check(c) == TK_OK);
    FUZZ_CHECK(got <= TK_CMD_ENCODED_MAX);
    uint8_t again[TK_CMD_ENCODED_MAX];
    FUZZ_CHECK(tk_cmd_encode(c, again, got - 1) == 0);
    FUZZ_CHECK(tk_cmd_encode(c, again, sizeof(again)) == got);
    FUZZ_CHECK(memcmp(again, p, got) == 0);
    /* Every truncation is refused (exact-size copies, so ASan sees reads). */
    for (size_t cut = 0; cut < got; cut += 1 + cut / 4) {
        uint8_t *short_copy = (uint8_t *)fuzz_dup(p, cut);
        struct tk_cmd d;
        size_t u = 777;
        FUZZ_CHECK(tk_cmd_decode(short_copy, cut, &d, &u) == TK_EPROTO && u == 777);
        free(short_copy);
    }
    *used = got;
    return TK_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 12)
        return 0;
    uint64_t token_first = le(data, 8);
    uint32_t token_count = (uint32_t)le(data + 8, 4);
    size_t len = size - 12;
    uint8_t *e = (uint8_t *)fuzz_dup(data + 12, len);

    /* apply_entry(), asserting nothing. */
    bool ok = len >= 4;
    uint32_t ncmds = ok ? (uint32_t)le(e, 4) : 0;
    size_t off = 4;
    uint64_t expect = token_first;
    for (uint32_t i = 0; ok && i < ncmds; i++) {
        struct tk_cmd c;
        size_t used = 0;
        if (one_cmd(e + off, len - off, &c, &used) != TK_OK) {
            ok = false;
            break;
        }
        if (tk_cmd_grants(&c)) {
            ok = c.token == expect;
            expect++;
        }
        FUZZ_CHECK(tk_cmd_shard(c.key, c.key_len, 7) < 7);
        off += used;
        FUZZ_CHECK(off <= len);
    }
    ok = ok && off == len && expect == token_first + token_count;
    (void)ok; /* a malformed entry would have stopped apply_entry() with an assertion */

    free(e);
    return 0;
}
