/* The snapshot blob (layout in snap.h): header and record decoding, and the
 * whole-blob check a follower runs before it replaces its lock state. The
 * bytes come from a peer, so every length is checked before it is used. */
#include "core/snap.h"

#include <stdlib.h>
#include <string.h>

/* Bytes of a command's fixed header (core/cmd.c), and of the shortest GRANT:
 * that header, a one-byte key and a one-byte owner. */
#define SNAP_CMD_HEADER_LEN (TK_CMD_ENCODED_MAX - TK_KEY_LEN_MAX - TK_OWNER_LEN_MAX)
#define SNAP_RECORD_MIN (4 + SNAP_CMD_HEADER_LEN + 2)

_Static_assert(sizeof(TK_SNAP_MAGIC) - 1 == TK_SNAP_MAGIC_LEN, "magic length");
_Static_assert(TK_SNAP_HEADER_LEN == TK_SNAP_MAGIC_LEN + 8, "magic and u64 count");
_Static_assert(sizeof(TK_SNAP_MAGIC_STATE) - 1 == TK_SNAP_MAGIC_LEN, "magic length");

int tk_snap_state(const uint8_t *blob,
                  size_t len,
                  uint64_t *count,
                  size_t *pos,
                  const uint8_t **state,
                  size_t *state_len)
{
    TK_ASSERT(blob != NULL || len == 0);
    if (len < TK_SNAP_HEADER_LEN)
        return TK_EPROTO;
    bool with_state = memcmp(blob, TK_SNAP_MAGIC_STATE, TK_SNAP_MAGIC_LEN) == 0;
    if (!with_state && memcmp(blob, TK_SNAP_MAGIC, TK_SNAP_MAGIC_LEN) != 0 &&
        memcmp(blob, TK_SNAP_MAGIC_V2, TK_SNAP_MAGIC_LEN) != 0)
        return TK_EPROTO;
    uint32_t n = 0;
    if (with_state) {
        if (len < TK_SNAP_HEADER_LEN + 4)
            return TK_EPROTO;
        memcpy(&n, blob + TK_SNAP_HEADER_LEN, 4);
        if (n == 0 || n > TK_SNAP_STATE_MAX || n > len - TK_SNAP_HEADER_LEN - 4)
            return TK_EPROTO;
    }
    memcpy(count, blob + TK_SNAP_MAGIC_LEN, 8);
    *pos = tk_snap_header_len(n);
    if (state) {
        *state = with_state ? blob + TK_SNAP_HEADER_LEN + 4 : NULL;
        *state_len = n;
    }
    return TK_OK;
}

int tk_snap_header(const uint8_t *blob, size_t len, uint64_t *count, size_t *pos)
{
    return tk_snap_state(blob, len, count, pos, NULL, NULL);
}

size_t tk_snap_header_len(size_t state_len)
{
    TK_ASSERT(state_len <= TK_SNAP_STATE_MAX);
    return state_len ? TK_SNAP_HEADER_LEN + 4 + state_len : TK_SNAP_HEADER_LEN;
}

int tk_snap_next(const uint8_t *blob,
                 size_t len,
                 size_t *pos,
                 struct tk_cmd *out,
                 uint32_t *left_ms)
{
    TK_ASSERT(*pos <= len);
    if (len - *pos < 4)
        return TK_EPROTO;
    const uint8_t *p = blob + *pos;
    uint32_t left =
        (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    struct tk_cmd c;
    size_t used = 0;
    if (tk_cmd_decode(p + 4, len - *pos - 4, &c, &used) != TK_OK)
        return TK_EPROTO;
    if (c.type != TK_CMD_GRANT || c.token == 0 || left < 1 || left > c.lease_ms)
        return TK_EPROTO;
    *out = c;
    if (left_ms != NULL)
        *left_ms = left;
    *pos += 4 + used;
    return TK_OK;
}

static void snap_put_left(uint8_t *buf, uint32_t left_ms)
{
    for (int i = 0; i < 4; i++)
        buf[i] = (uint8_t)(left_ms >> (8 * i));
}

size_t tk_snap_put(uint8_t *buf, size_t cap, const struct tk_cmd *grant, uint32_t left_ms)
{
    TK_ASSERT(grant->type == TK_CMD_GRANT && grant->token != 0);
    TK_ASSERT(left_ms >= 1 && left_ms <= grant->lease_ms);
    if (cap < 4)
        return 0;
    size_t n = tk_cmd_encode(grant, buf + 4, cap - 4);
    if (n == 0)
        return 0;
    snap_put_left(buf, left_ms);
    return n + 4;
}

size_t tk_snap_put_holder(uint8_t *buf, size_t cap, const struct tk_snap_holder *h)
{
    TK_ASSERT(h->left_ms >= 1 && h->left_ms <= h->lease_ms);
    if (cap < 4)
        return 0;
    size_t n = tk_cmd_encode_grant(buf + 4, cap - 4, h->key, h->key_len, h->owner, h->owner_len,
                                   h->lease_ms, h->token);
    if (n == 0)
        return 0;
    snap_put_left(buf, h->left_ms);
    return n + 4;
}

size_t tk_snap_bytes(uint64_t count, uint64_t key_owner_bytes)
{
    return TK_SNAP_HEADER_LEN + (size_t)count * (4 + SNAP_CMD_HEADER_LEN) + (size_t)key_owner_bytes;
}

void tk_snap_put_header(uint8_t *blob, uint64_t count)
{
    tk_snap_put_header_state(blob, count, NULL, 0);
}

void tk_snap_put_header_state(uint8_t *blob, uint64_t count, const uint8_t *state, size_t state_len)
{
    TK_ASSERT(state_len <= TK_SNAP_STATE_MAX && (state_len == 0 || state != NULL));
    memcpy(blob, state_len ? TK_SNAP_MAGIC_STATE : TK_SNAP_MAGIC, TK_SNAP_MAGIC_LEN);
    memcpy(blob + TK_SNAP_MAGIC_LEN, &count, 8);
    if (state_len) {
        uint32_t n = (uint32_t)state_len;
        memcpy(blob + TK_SNAP_HEADER_LEN, &n, 4);
        memcpy(blob + TK_SNAP_HEADER_LEN + 4, state, state_len);
    }
}

/* The key index of tk_snap_check(): open addressing over record offsets
 * (offset + 1, so 0 marks a free slot). */
struct snap_keys {
    size_t *slot;
    size_t mask;
};

/* Adds the key of the record at `at`; false if the index already has it. */
static bool snap_keys_add(struct snap_keys *k,
                          const uint8_t *blob,
                          size_t at,
                          const struct tk_cmd *c)
{
    size_t h = (size_t)tk_hash(c->key, c->key_len) & k->mask;
    while (k->slot[h] != 0) {
        const uint8_t *o = blob + k->slot[h] - 1 + 4;
        if (o[1] == c->key_len && memcmp(o + SNAP_CMD_HEADER_LEN, c->key, c->key_len) == 0)
            return false;
        h = (h + 1) & k->mask;
    }
    k->slot[h] = at + 1;
    return true;
}

/* The token index of tk_snap_check(): open addressing over the tokens
 * themselves (never 0 in a record that got this far). */
struct snap_tokens {
    uint64_t *slot;
    size_t mask;
};

static bool snap_tokens_add(struct snap_tokens *t, uint64_t token)
{
    size_t h = (size_t)(token * UINT64_C(0x9e3779b97f4a7c15) >> 17) & t->mask;
    while (t->slot[h] != 0) {
        if (t->slot[h] == token)
            return false;
        h = (h + 1) & t->mask;
    }
    t->slot[h] = token;
    return true;
}

int tk_snap_check(const uint8_t *blob,
                  size_t len,
                  uint64_t token_next,
                  uint64_t *count,
                  const char **why)
{
    const char *ignored;
    if (why == NULL)
        why = &ignored;
    uint64_t n = 0;
    size_t pos = 0;
    if (tk_snap_header(blob, len, &n, &pos) != TK_OK) {
        *why = "no " TK_SNAP_MAGIC " header";
        return TK_EPROTO;
    }
    /* The count bounds the key index, so it is checked against what the
     * bytes can hold before anything is allocated. */
    if (n > (len - pos) / SNAP_RECORD_MIN) {
        *why = "record count larger than the blob can hold";
        return TK_EPROTO;
    }
    struct snap_keys keys = {NULL, 0};
    struct snap_tokens tokens = {NULL, 0};
    if (n > 0) {
        size_t cap = 2;
        while (cap < 2 * n)
            cap <<= 1; /* n <= len / 26: no overflow */
        keys.slot = calloc(cap, sizeof(*keys.slot));
        tokens.slot = calloc(cap, sizeof(*tokens.slot));
        if (keys.slot == NULL || tokens.slot == NULL) {
            free(keys.slot);
            free(tokens.slot);
            *why = "out of memory checking the keys";
            return TK_ENOMEM;
        }
        keys.mask = tokens.mask = cap - 1;
    }
    int rc = TK_OK;
    /* The older layout lists its records in token order; the current one
     * in any order (each shard's cut in its table order). */
    bool ordered = memcmp(blob, TK_SNAP_MAGIC_V2, TK_SNAP_MAGIC_LEN) == 0;
    uint64_t last = 0;
    for (uint64_t i = 0; i < n && rc == TK_OK; i++) {
        size_t at = pos;
        struct tk_cmd c;
        if (tk_snap_next(blob, len, &pos, &c, NULL) != TK_OK) {
            *why = "a record is not a valid GRANT with a token and the lease left";
            rc = TK_EPROTO;
        } else if (ordered && c.token <= last) {
            *why = "tokens not strictly increasing";
            rc = TK_EPROTO;
        } else if (c.token >= token_next) {
            *why = "a token at or above the snapshot's fencing counter";
            rc = TK_EPROTO;
        } else if (!snap_keys_add(&keys, blob, at, &c)) {
            *why = "a key listed twice";
            rc = TK_EPROTO;
        } else if (!snap_tokens_add(&tokens, c.token)) {
            *why = "a token listed twice";
            rc = TK_EPROTO;
        } else {
            last = c.token;
        }
    }
    free(keys.slot);
    free(tokens.slot);
    if (rc != TK_OK)
        return rc;
    if (pos != len) {
        *why = "bytes after the last record";
        return TK_EPROTO;
    }
    if (count != NULL)
        *count = n;
    return TK_OK;
}
