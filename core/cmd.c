/* Encoding of replicated lock commands: little-endian, fixed header, then
 * key and owner bytes. Decoding checks everything, since the bytes came
 * from a peer. */
#include "core/cmd.h"

#include <string.h>

static bool visible(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x21 || (unsigned char)s[i] > 0x7e)
            return false;
    return true;
}

int tk_cmd_check(const struct tk_cmd *c)
{
    if (c->key_len < 1 || c->key_len > TK_KEY_LEN_MAX || !visible(c->key, c->key_len))
        return TK_EINVAL;
    switch (c->type) {
        case TK_CMD_GRANT:
        case TK_CMD_HANDOFF:
            if (c->owner_len < 1 || c->owner_len > TK_OWNER_LEN_MAX)
                return TK_EINVAL;
            if (!visible(c->owner, c->owner_len))
                return TK_EINVAL;
            if (c->lease_ms < TK_LEASE_MS_MIN || c->lease_ms > TK_LEASE_MS_MAX)
                return TK_EINVAL;
            if (c->type == TK_CMD_HANDOFF && c->old_token == 0)
                return TK_EINVAL;
            if (c->type == TK_CMD_GRANT && (c->old_token != 0 || c->expired))
                return TK_EINVAL;
            if (c->expired > 1)
                return TK_EINVAL;
            return TK_OK;
        case TK_CMD_RELEASE:
        case TK_CMD_EXPIRE:
            if (c->owner_len != 0 || c->old_token == 0 || c->token != 0 || c->expired)
                return TK_EINVAL;
            return TK_OK;
        default:
            return TK_EINVAL;
    }
}

/* Little-endian fields: each (uint8_t) keeps one byte of v on purpose. */
static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_u32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}

static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

#define CMD_HEADER_LEN 24

size_t tk_cmd_size(const struct tk_cmd *c)
{
    return CMD_HEADER_LEN + (size_t)c->key_len + c->owner_len;
}

/* The one encoder of a command: the 24-byte header, the key, the owner. */
static size_t cmd_put(uint8_t *buf,
                      size_t cap,
                      uint8_t type,
                      uint8_t expired,
                      uint32_t lease_ms,
                      uint64_t old_token,
                      uint64_t token,
                      const char *key,
                      uint8_t key_len,
                      const char *owner,
                      uint8_t owner_len)
{
    size_t n = CMD_HEADER_LEN + (size_t)key_len + owner_len;
    if (n > cap)
        return 0;
    buf[0] = type;
    buf[1] = key_len;
    buf[2] = owner_len;
    buf[3] = expired;
    put_u32(buf + 4, lease_ms);
    put_u64(buf + 8, old_token);
    put_u64(buf + 16, token);
    memcpy(buf + CMD_HEADER_LEN, key, key_len);
    memcpy(buf + CMD_HEADER_LEN + key_len, owner, owner_len);
    return n;
}

size_t tk_cmd_encode(const struct tk_cmd *c, uint8_t *buf, size_t cap)
{
    TK_ASSERT(tk_cmd_check(c) == TK_OK);
    return cmd_put(buf, cap, c->type, c->expired, c->lease_ms, c->old_token, c->token, c->key,
                   c->key_len, c->owner, c->owner_len);
}

size_t tk_cmd_encode_grant(uint8_t *buf,
                           size_t cap,
                           const char *key,
                           uint8_t key_len,
                           const char *owner,
                           uint8_t owner_len,
                           uint32_t lease_ms,
                           uint64_t token)
{
    TK_ASSERT(key_len >= 1 && key_len <= TK_KEY_LEN_MAX);
    TK_ASSERT(owner_len >= 1 && owner_len <= TK_OWNER_LEN_MAX);
    TK_ASSERT(lease_ms >= TK_LEASE_MS_MIN && lease_ms <= TK_LEASE_MS_MAX);
    TK_ASSERT(token != 0);
    return cmd_put(buf, cap, TK_CMD_GRANT, 0, lease_ms, 0, token, key, key_len, owner, owner_len);
}

int tk_cmd_decode(const uint8_t *buf, size_t len, struct tk_cmd *c, size_t *used)
{
    if (len < CMD_HEADER_LEN)
        return TK_EPROTO;
    struct tk_cmd d;
    d.type = buf[0];
    d.key_len = buf[1];
    d.owner_len = buf[2];
    d.expired = buf[3];
    d.lease_ms = get_u32(buf + 4);
    d.old_token = get_u64(buf + 8);
    d.token = get_u64(buf + 16);
    if (d.key_len > TK_KEY_LEN_MAX || d.owner_len > TK_OWNER_LEN_MAX)
        return TK_EPROTO;
    size_t n = CMD_HEADER_LEN + (size_t)d.key_len + d.owner_len;
    if (n > len)
        return TK_EPROTO;
    memcpy(d.key, buf + CMD_HEADER_LEN, d.key_len);
    memcpy(d.owner, buf + CMD_HEADER_LEN + d.key_len, d.owner_len);
    if (tk_cmd_check(&d) != TK_OK)
        return TK_EPROTO;
    *c = d;
    *used = n;
    return TK_OK;
}

_Static_assert(CMD_HEADER_LEN + TK_KEY_LEN_MAX + TK_OWNER_LEN_MAX == TK_CMD_ENCODED_MAX,
               "TK_CMD_ENCODED_MAX must match the encoding");
