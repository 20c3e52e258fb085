/* Replicated lock commands: what a Raft log entry carries (SPEC 6-8).
 *
 * A shard proposes commands; the Raft thread batches the proposals of all
 * shards into one log entry, assigns fencing tokens to GRANT and HANDOFF in
 * log order, and after commit hands each command to the shard that owns its
 * key, on every node. The same encoding serves snapshots: a snapshot is a
 * header plus one GRANT per held key.
 *
 * Pure: no I/O. Any thread may call these functions on its own buffers.
 */
#ifndef TK_CORE_CMD_H
#define TK_CORE_CMD_H

#include "core/tk.h"

enum tk_cmd_type {
    TK_CMD_GRANT = 1,   /* FREE key -> holder (owner, token, lease) */
    TK_CMD_RELEASE = 2, /* holder old_token released -> FREE */
    TK_CMD_HANDOFF = 3, /* holder old_token released or expired, same entry grants owner/token */
    TK_CMD_EXPIRE = 4,  /* holder old_token's lease ran out -> FREE */
};

struct tk_cmd {
    uint8_t type;       /* enum tk_cmd_type */
    uint8_t key_len;    /* 1..TK_KEY_LEN_MAX */
    uint8_t owner_len;  /* GRANT/HANDOFF: the new holder, 1..TK_OWNER_LEN_MAX; else 0 */
    uint8_t expired;    /* HANDOFF only: 1 if the old holder's lease ran out */
    uint32_t lease_ms;  /* GRANT/HANDOFF */
    uint64_t old_token; /* RELEASE/EXPIRE/HANDOFF: token of the holder being removed */
    uint64_t token;     /* GRANT/HANDOFF: the new token (0 until the Raft thread assigns it) */
    char key[TK_KEY_LEN_MAX];
    char owner[TK_OWNER_LEN_MAX];
};

/* True for the commands that consume a fencing token. */
static inline bool tk_cmd_grants(const struct tk_cmd *c)
{
    return c->type == TK_CMD_GRANT || c->type == TK_CMD_HANDOFF;
}

/* Largest encoding of one command. */
#define TK_CMD_ENCODED_MAX (1 + 1 + 1 + 1 + 4 + 8 + 8 + TK_KEY_LEN_MAX + TK_OWNER_LEN_MAX)

/* Checks the field rules of a command (type known, lengths in range, tokens
 * present where the type needs them). Returns TK_OK or TK_EINVAL. */
int tk_cmd_check(const struct tk_cmd *c);

/* Bytes tk_cmd_encode() writes for a valid command. */
size_t tk_cmd_size(const struct tk_cmd *c);

/* Appends the encoding of a valid command to buf. Returns the number of bytes
 * written, or 0 if cap is too small. */
size_t tk_cmd_encode(const struct tk_cmd *c, uint8_t *buf, size_t cap);
/* The same bytes as tk_cmd_encode() of a valid GRANT with these fields,
 * without building a struct tk_cmd (a snapshot cut lists millions). */
size_t tk_cmd_encode_grant(uint8_t *buf,
                           size_t cap,
                           const char *key,
                           uint8_t key_len,
                           const char *owner,
                           uint8_t owner_len,
                           uint32_t lease_ms,
                           uint64_t token);

/* Decodes one command from buf. On success stores it in *c, the bytes used in
 * *used, and returns TK_OK; on malformed or truncated input returns
 * TK_EPROTO and leaves *used untouched. */
int tk_cmd_decode(const uint8_t *buf, size_t len, struct tk_cmd *c, size_t *used);

/* The shard that owns a key, given the node's shard count. */
static inline uint32_t tk_cmd_shard(const char *key, size_t key_len, uint32_t nshards)
{
    return (uint32_t)(tk_hash(key, key_len) % nshards); /* < nshards: fits */
}

#endif
