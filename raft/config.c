/* Membership configurations: checks, encoding, and which one is in effect.
 *
 * Thesis §4.1: a server uses the latest configuration in its log, whether
 * or not that entry is committed; when a conflicting suffix is truncated it
 * falls back to the previous one. Changes are single-server (one voter
 * added or removed per entry), so any two consecutive configurations have
 * overlapping majorities.
 */
#include "raft/internal.h"

#include <string.h>

static bool addr_valid(const char *s)
{
    size_t n = strnlen(s, TK_RAFT_ADDR_MAX + 1);
    if (n == 0 || n > TK_RAFT_ADDR_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x21 || (unsigned char)s[i] > 0x7e)
            return false;
    return true;
}

int tk_raft_config_check(const struct tk_raft_config *c)
{
    if (c->n < 1 || c->n > TK_RAFT_MEMBERS_MAX)
        return TK_EINVAL;
    for (uint32_t i = 0; i < c->n; i++) {
        const struct tk_raft_member *m = &c->m[i];
        if (m->id == 0)
            return TK_EINVAL;
        if (m->role != TK_RAFT_VOTER && m->role != TK_RAFT_LEARNER)
            return TK_EINVAL;
        if (!addr_valid(m->peer_addr) || !addr_valid(m->client_addr))
            return TK_EINVAL;
        for (uint32_t j = 0; j < i; j++)
            if (c->m[j].id == m->id)
                return TK_EINVAL;
    }
    uint32_t voters = tk_raft_config_voters(c);
    if (voters < 1 || voters > TK_RAFT_VOTERS_MAX)
        return TK_EINVAL;
    return TK_OK;
}

uint32_t tk_raft_config_voters(const struct tk_raft_config *c)
{
    uint32_t v = 0;
    for (uint32_t i = 0; i < c->n; i++)
        v += c->m[i].role == TK_RAFT_VOTER;
    return v;
}

const struct tk_raft_member *tk_raft_config_find(const struct tk_raft_config *c, uint64_t id)
{
    for (uint32_t i = 0; i < c->n; i++)
        if (c->m[i].id == id)
            return &c->m[i];
    return NULL;
}

bool tk_raft_config_is_voter(const struct tk_raft_config *c, uint64_t id)
{
    const struct tk_raft_member *m = tk_raft_config_find(c, id);
    return m != NULL && m->role == TK_RAFT_VOTER;
}

/* Little-endian fields: each (uint8_t) keeps one byte of v on purpose. */
static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static size_t put_str(uint8_t *p, const char *s)
{
    size_t n = strlen(s); /* <= TK_RAFT_ADDR_MAX (255), by tk_raft_config_check */
    p[0] = (uint8_t)n;    /* the u16 length, low byte then high byte */
    p[1] = (uint8_t)(n >> 8);
    memcpy(p + 2, s, n);
    return 2 + n;
}

size_t tk_raft_config_encode(const struct tk_raft_config *c, uint8_t *buf, size_t cap)
{
    TK_ASSERT(tk_raft_config_check(c) == TK_OK);
    size_t need = 17;
    for (uint32_t i = 0; i < c->n; i++)
        need += 9 + 4 + strlen(c->m[i].peer_addr) + strlen(c->m[i].client_addr);
    need += 8;
    TK_ASSERT(need <= TK_RAFT_CONFIG_ENCODED_MAX);
    if (need > cap)
        return 0;
    uint8_t *p = buf;
    put_u64(p, c->domain_lo);
    put_u64(p + 8, c->domain_hi);
    p[16] = (uint8_t)c->n; /* <= TK_RAFT_MEMBERS_MAX (8), by tk_raft_config_check */
    p += 17;
    for (uint32_t i = 0; i < c->n; i++) {
        put_u64(p, c->m[i].id);
        p[8] = c->m[i].role;
        p += 9;
        p += put_str(p, c->m[i].peer_addr);
        p += put_str(p, c->m[i].client_addr);
    }
    put_u64(p, c->serve_after_us);
    p += 8;
    TK_ASSERT((size_t)(p - buf) == need);
    return need;
}

static bool get_str(const uint8_t *buf, size_t len, size_t *pos, char *out)
{
    if (len - *pos < 2)
        return false;
    size_t n = (size_t)buf[*pos] | ((size_t)buf[*pos + 1] << 8);
    *pos += 2;
    if (n > TK_RAFT_ADDR_MAX || len - *pos < n)
        return false;
    memcpy(out, buf + *pos, n);
    out[n] = '\0';
    *pos += n;
    return true;
}

int tk_raft_config_decode(const uint8_t *buf, size_t len, struct tk_raft_config *c, size_t *used)
{
    if (len < 17)
        return TK_EPROTO;
    struct tk_raft_config d;
    memset(&d, 0, sizeof(d));
    d.domain_lo = get_u64(buf);
    d.domain_hi = get_u64(buf + 8);
    d.n = buf[16];
    if (d.n < 1 || d.n > TK_RAFT_MEMBERS_MAX)
        return TK_EPROTO;
    size_t pos = 17;
    for (uint32_t i = 0; i < d.n; i++) {
        if (len - pos < 9)
            return TK_EPROTO;
        d.m[i].id = get_u64(buf + pos);
        d.m[i].role = buf[pos + 8];
        pos += 9;
        if (!get_str(buf, len, &pos, d.m[i].peer_addr))
            return TK_EPROTO;
        if (!get_str(buf, len, &pos, d.m[i].client_addr))
            return TK_EPROTO;
    }
    if (len - pos < 8)
        return TK_EPROTO;
    d.serve_after_us = get_u64(buf + pos);
    pos += 8;
    /* An embedded NUL would make the C string shorter than the wire one;
     * addr_valid() rejects it through the length check. */
    for (uint32_t i = 0; i < d.n; i++) {
        if (strlen(d.m[i].peer_addr) == 0 || strlen(d.m[i].client_addr) == 0)
            return TK_EPROTO;
    }
    if (tk_raft_config_check(&d) != TK_OK)
        return TK_EPROTO;
    size_t check = 17;
    for (uint32_t i = 0; i < d.n; i++)
        check += 13 + strlen(d.m[i].peer_addr) + strlen(d.m[i].client_addr);
    check += 8;
    if (check != pos)
        return TK_EPROTO; /* an embedded NUL */
    *c = d;
    *used = pos;
    return TK_OK;
}

/* Decodes the data of a CONFIG entry that is already in the log: it was
 * validated before it got there, so failure is corruption. */
static void config_of_entry(const struct tk_raft_entry *e, struct tk_raft_config *out)
{
    size_t used = 0;
    TK_ASSERT(e->type == TK_RAFT_CONFIG);
    TK_ASSERT(tk_raft_config_decode(e->data, e->len, out, &used) == TK_OK);
    TK_ASSERT(used == e->len);
}

void raft_config_at(const struct tk_raft *r, uint64_t index, struct tk_raft_config *out)
{
    TK_ASSERT(index + 1 >= r->log.first);
    /* The latest config entry is at config_index: at or after it, that
     * config is in effect (the common case: no scan). */
    if (r->has_config && index >= r->config_index) {
        *out = r->config;
        return;
    }
    uint64_t last = raft_log_last(&r->log);
    for (uint64_t i = TK_MIN(index, last); i >= r->log.first && i > 0; i--) {
        const struct tk_raft_entry *e = raft_log_get(&r->log, i);
        if (e->type == TK_RAFT_CONFIG) {
            config_of_entry(e, out);
            return;
        }
    }
    TK_ASSERT(r->has_base_config);
    *out = r->base_config;
}

void raft_config_refresh(struct tk_raft *r)
{
    uint64_t last = raft_log_last(&r->log);
    for (uint64_t i = last; i >= r->log.first && i > 0; i--) {
        const struct tk_raft_entry *e = raft_log_get(&r->log, i);
        if (e->type == TK_RAFT_CONFIG) {
            if (i == r->config_index && r->has_config)
                return; /* unchanged */
            struct tk_raft_config c;
            config_of_entry(e, &c);
            raft_config_set(r, &c, i);
            return;
        }
    }
    if (r->has_base_config) {
        uint64_t base_index = r->log.first - 1;
        if (r->has_config && r->config_index <= base_index)
            return;
        struct tk_raft_config c = r->base_config;
        raft_config_set(r, &c, base_index);
        return;
    }
    /* Nothing left: a fresh node whose only config entry was truncated. */
    r->has_config = false;
    r->config_index = 0;
}

void raft_config_set(struct tk_raft *r, const struct tk_raft_config *c, uint64_t index)
{
    TK_ASSERT(tk_raft_config_check(c) == TK_OK);
    if (r->has_config) {
        /* One fencing domain per cluster, forever. */
        TK_ASSERT(c->domain_lo == r->config.domain_lo);
        TK_ASSERT(c->domain_hi == r->config.domain_hi);
    }
    struct raft_progress old[TK_RAFT_MEMBERS_MAX];
    struct tk_raft_config prev = r->config;
    bool had = r->has_config;
    bool was_voter = had && tk_raft_config_is_voter(&prev, r->id);
    memcpy(old, r->prog, sizeof(old));
    r->config = *c;
    r->config_index = index;
    r->has_config = true;
    if (r->role != TK_RAFT_LEADER) {
        /* Becoming a voter arms the election timer; ceasing to be one (a
         * promotion truncated away, a removal) disarms it. */
        if (tk_raft_config_is_voter(c, r->id) != was_voter)
            raft_reset_election_timer(r);
        return;
    }
    /* The leader keeps the progress of members that stay and starts new
     * ones probing from its last entry (Figure 2: nextIndex = last + 1). */
    for (uint32_t i = 0; i < c->n; i++) {
        const struct tk_raft_member *m = &c->m[i];
        const struct raft_progress *kept = NULL;
        for (uint32_t k = 0; had && k < prev.n; k++)
            if (prev.m[k].id == m->id)
                kept = &old[k];
        if (kept != NULL) {
            r->prog[i] = *kept;
            continue;
        }
        memset(&r->prog[i], 0, sizeof(r->prog[i]));
        r->prog[i].next = raft_log_last(&r->log) + 1;
        r->prog[i].state = PROGRESS_PROBE;
        r->prog[i].last_heard_us = r->now_us;
        if (m->id == r->id)
            r->prog[i].match = raft_log_last(&r->log);
    }
}
