/* Read-only walks over the lock table: statistics, the holders for a
 * snapshot, and the O(n) consistency check the tests run after every step. */
#include "shard/lock_internal.h"

#include <stdlib.h>
#include <string.h>

void tk_lock_stats(const struct tk_lock_table *t, struct tk_lock_stats *out)
{
    *out = t->counters;
    out->keys = t->nkeys;
    out->held = t->nheld;
    out->waiters = t->nwaiters;
    out->deferred = t->ndeferred;
    out->in_flight = t->nflight;
    TK_ASSERT(out->held <= out->keys);
    TK_ASSERT(out->in_flight <= out->keys);
}

struct each_holder_ctx {
    void (*fn)(void *ctx, const struct tk_cmd *grant);
    void (*fn_left)(void *ctx, const struct tk_cmd *grant, uint32_t left_ms);
    uint64_t now_us, drift_us;
    void *ctx;
};

static void lock_key_grant(const struct lock_key *k, struct tk_cmd *c)
{
    TK_ASSERT(k->token != 0);
    memset(c, 0, sizeof(*c));
    c->type = TK_CMD_GRANT;
    c->key_len = k->key_len;
    c->owner_len = k->owner_len;
    c->lease_ms = k->lease_ms;
    c->token = k->token;
    memcpy(c->key, k->bytes, k->key_len);
    memcpy(c->owner, lock_key_owner(k), k->owner_len);
    TK_ASSERT(tk_cmd_check(c) == TK_OK);
}

/* What is left of the lease itself (the deadline less the drift margin it
 * was counted with: whoever restores it adds its own), rounded up, at least
 * 1 ms (an expiry may be due or in flight), at most the lease. */
uint32_t lock_key_left_ms(const struct lock_key *k, uint64_t now_us, uint64_t drift_us)
{
    uint64_t end =
        k->lease_due_us - TK_MIN(k->lease_due_us, TK_LOCK_DRIFT_WITH(k->lease_ms, drift_us));
    uint64_t left_us = end > now_us ? end - now_us : 0;
    uint64_t left = TK_MAX((left_us + 999u) / 1000u, 1u);
    return (uint32_t)TK_MIN(left, (uint64_t)k->lease_ms);
}

static void each_holder_one(void *ctx, struct lock_key *k)
{
    const struct each_holder_ctx *e = ctx;
    if (k->token == 0)
        return;
    struct tk_cmd c;
    lock_key_grant(k, &c);
    if (e->fn)
        e->fn(e->ctx, &c);
    else
        e->fn_left(e->ctx, &c, lock_key_left_ms(k, e->now_us, e->drift_us));
}

void tk_lock_each_holder(const struct tk_lock_table *t,
                         void (*fn)(void *ctx, const struct tk_cmd *grant),
                         void *ctx)
{
    struct each_holder_ctx e = {.fn = fn, .ctx = ctx};
    lock_keys_each(t, each_holder_one, &e);
}

void tk_lock_each_holder_left(const struct tk_lock_table *t,
                              uint64_t now_us,
                              void (*fn)(void *ctx, const struct tk_cmd *grant, uint32_t left_ms),
                              void *ctx)
{
    struct each_holder_ctx e = {
        .fn_left = fn, .now_us = now_us, .drift_us = t->limits.drift_us, .ctx = ctx};
    lock_keys_each(t, each_holder_one, &e);
}

/* ---- Consistency check --------------------------------------------------- */

struct check_ctx {
    const struct tk_lock_table *t;
    uint64_t keys, held, held_bytes, waiters, deferred, flight, leases, leads;
    uint32_t *slot_held; /* TK_SLOTS counts */
};

static uint64_t check_waiters(const struct tk_lock_table *t,
                              const struct lock_key *k,
                              const struct lock_lead *l)
{
    uint64_t n = 0;
    const struct lock_req *r = l->waiters;
    if (r != NULL) {
        do {
            TK_ASSERT(r->key == k);
            TK_ASSERT(r->type == 'A');
            TK_ASSERT(r->next->prev == r);
            TK_ASSERT(r->prev->next == r);
            TK_ASSERT(r->owner_len >= 1);
            TK_ASSERT(r->owner_len <= TK_OWNER_LEN_MAX);
            TK_ASSERT(r->lease_ms >= TK_LEASE_MS_MIN);
            TK_ASSERT(r->lease_ms <= TK_LEASE_MS_MAX);
            TK_ASSERT(r->wait_slot < t->waits.n);
            TK_ASSERT(tk_timer_slot(&t->waits, r->wait_slot) == &r->wait_slot);
            n++;
            TK_ASSERT(n <= l->nwaiters);
            r = r->next;
        } while (r != l->waiters);
    }
    TK_ASSERT(n == l->nwaiters);
    TK_ASSERT(n <= t->limits.waiters_per_key_max);
    return n;
}

static uint64_t check_deferred(const struct lock_key *k, const struct lock_lead *l)
{
    uint64_t n = 0;
    const struct lock_req *r = l->deferred;
    if (r != NULL) {
        do {
            TK_ASSERT(r->key == k);
            TK_ASSERT((r->type == 'R' || r->type == 'Q'));
            TK_ASSERT(r->next->prev == r);
            TK_ASSERT(r->prev->next == r);
            TK_ASSERT(r->wait_slot == TK_TIMER_NONE);
            n++;
            r = r->next;
        } while (r != l->deferred);
    }
    /* Deferred requests wait only behind a proposal in flight. */
    TK_ASSERT(n == 0 || k->flight != 0);
    return n;
}

static void check_flight(const struct tk_lock_table *t,
                         const struct lock_key *k,
                         const struct lock_lead *l)
{
    uint8_t type = LOCK_FLIGHT_TYPE(k->flight);
    bool expired = (k->flight & LOCK_FLIGHT_EXPIRED) != 0;
    if (k->flight == 0) {
        TK_ASSERT(l->flight_slot == LOCK_NONE);
        TK_ASSERT(l->grant_client == 0);
        TK_ASSERT(l->release_client == 0);
        TK_ASSERT(l->deferred == NULL);
        return;
    }
    TK_ASSERT(t->leader);
    TK_ASSERT(l->flight_slot < t->nflight);
    TK_ASSERT(t->flight[l->flight_slot] == k);
    TK_ASSERT(type >= TK_CMD_GRANT);
    TK_ASSERT(type <= TK_CMD_EXPIRE);
    TK_ASSERT(!expired || type == TK_CMD_HANDOFF);
    /* A GRANT needs a FREE key, the others remove the holder. */
    TK_ASSERT((type == TK_CMD_GRANT) == (k->token == 0));
    bool grants = type == TK_CMD_GRANT || type == TK_CMD_HANDOFF;
    bool released = type == TK_CMD_RELEASE || (type == TK_CMD_HANDOFF && !expired);
    TK_ASSERT((l->grant_client != 0) == grants);
    TK_ASSERT((l->release_client != 0) == released);
    /* A held key in flight has either its lease timer or a parked one. */
}

static void check_key(void *ctx, struct lock_key *k)
{
    struct check_ctx *c = ctx;
    const struct tk_lock_table *t = c->t;
    c->keys++;
    TK_ASSERT(k->key_len >= 1);
    TK_ASSERT(k->key_len <= TK_KEY_LEN_MAX);
    TK_ASSERT(k->hash == lock_hash(k->bytes, k->key_len));
    TK_ASSERT(k->owner_len <= k->owner_cap);
    if (k->token != 0) {
        c->held++;
        c->slot_held[tk_slot(k->bytes, k->key_len)]++;
        c->held_bytes += (uint64_t)k->key_len + k->owner_len;
        TK_ASSERT(k->token <= t->max_token);
        TK_ASSERT(k->owner_len >= 1);
        TK_ASSERT(k->owner_len <= TK_OWNER_LEN_MAX);
        TK_ASSERT(k->lease_ms >= TK_LEASE_MS_MIN);
        TK_ASSERT(k->lease_ms <= TK_LEASE_MS_MAX);
        /* Every HELD key not in flight has a running lease timer. */
        TK_ASSERT(k->flight != 0 || k->lease_slot != TK_TIMER_NONE);
    } else {
        TK_ASSERT(k->owner_len == 0);
        TK_ASSERT(k->lease_slot == TK_TIMER_NONE);
    }
    if (k->lease_slot != TK_TIMER_NONE) {
        c->leases++;
        TK_ASSERT(tk_timer_slot(&t->leases, k->lease_slot) == &k->lease_slot);
        TK_ASSERT(tk_timer_due(&t->leases, k->lease_slot) == k->lease_due_us);
    }
    if (k->flight != 0)
        c->flight++;
    /* A key holding nothing is not kept (so a free key has no waiters). */
    TK_ASSERT(k->token != 0 || k->flight != 0);
    const struct lock_lead *l = k->lead;
    if (l == NULL) {
        /* Idle: nothing in flight, no waiters or deferred requests. */
        TK_ASSERT(k->flight == 0);
        return;
    }
    /* A lead exists only on the leader, and only while it is needed. */
    TK_ASSERT(t->leader);
    c->leads++;
    check_flight(t, k, l);
    uint64_t waiters = check_waiters(t, k, l);
    uint64_t deferred = check_deferred(k, l);
    TK_ASSERT(k->flight != 0 || waiters != 0 || deferred != 0);
    c->waiters += waiters;
    c->deferred += deferred;
}

static void check_index(const struct tk_lock_table *t)
{
    uint64_t total = 0;
    TK_ASSERT(t->ht[0].size != 0 || t->nkeys == 0);
    TK_ASSERT((t->rehash >= 0) == (t->ht[1].size != 0));
    for (int i = 0; i < 2; i++) {
        const struct lock_ht *ht = &t->ht[i];
        uint64_t n = 0;
        TK_ASSERT((ht->size & (ht->size - 1)) == 0);
        for (uint64_t b = 0; b < ht->size; b++) {
            if (i == 0 && t->rehash >= 0 && b < (uint64_t)t->rehash)
                TK_ASSERT(ht->b[b] == NULL);
            for (const struct lock_key *k = ht->b[b]; k != NULL; k = k->next) {
                TK_ASSERT((k->hash & (ht->size - 1)) == b);
                n++;
            }
        }
        TK_ASSERT(n == ht->used);
        total += n;
    }
    TK_ASSERT(total == t->nkeys);
    TK_ASSERT(t->nkeys <= t->leases.cap);
}

static uint64_t check_clients(const struct tk_lock_table *t)
{
    const struct lock_clients *c = &t->clients;
    uint64_t used = 0;
    uint64_t reqs = 0;
    TK_ASSERT(c->used * 2 <= c->cap);
    for (uint64_t i = 0; i < c->cap; i++) {
        const struct lock_client *e = &c->v[i];
        if (e->client == 0)
            continue;
        used++;
        TK_ASSERT(lock_client_find((struct lock_clients *)c, e->client) == e);
        const struct lock_req *r = e->head;
        TK_ASSERT(r != NULL);
        do {
            TK_ASSERT(r->client == e->client);
            TK_ASSERT(r->cnext->cprev == r);
            TK_ASSERT(r->cprev->cnext == r);
            reqs++;
            r = r->cnext;
        } while (r != e->head);
    }
    TK_ASSERT(used == c->used);
    return reqs;
}

void tk_lock_check(const struct tk_lock_table *t)
{
    struct check_ctx c = {.t = t, .slot_held = calloc(TK_SLOTS, sizeof(uint32_t))};
    TK_ASSERT(c.slot_held != NULL);
    check_index(t);
    tk_timer_check(&t->leases);
    tk_timer_check(&t->waits);
    lock_keys_each(t, check_key, &c);
    TK_ASSERT(c.keys == t->nkeys);
    TK_ASSERT(c.held == t->nheld);
    TK_ASSERT(memcmp(c.slot_held, t->slot_held, sizeof(t->slot_held)) == 0);
    free(c.slot_held);
    TK_ASSERT(c.held_bytes == t->held_bytes);
    TK_ASSERT(c.waiters == t->nwaiters);
    TK_ASSERT(t->waits.n == t->nwaiters);
    TK_ASSERT(c.deferred == t->ndeferred);
    TK_ASSERT(c.flight == t->nflight);
    TK_ASSERT(c.leases == t->leases.n);
    TK_ASSERT(c.leads == t->nleads);
    TK_ASSERT(t->nflight <= t->nleads);
    TK_ASSERT(t->nleads <= t->flight_cap);
    TK_ASSERT(t->nwaiters <= t->limits.waiters_max);
    TK_ASSERT(t->ndeferred <= t->limits.waiters_max);
    for (uint64_t i = 0; i < t->nflight; i++) {
        TK_ASSERT(t->flight[i]->lead != NULL);
        TK_ASSERT(t->flight[i]->lead->flight_slot == i);
    }
    TK_ASSERT(check_clients(t) == t->nwaiters + t->ndeferred);
    if (!t->leader) {
        TK_ASSERT(t->nwaiters == 0);
        TK_ASSERT(t->ndeferred == 0);
        TK_ASSERT(t->nflight == 0);
        TK_ASSERT(t->nleads == 0);
    }
}
