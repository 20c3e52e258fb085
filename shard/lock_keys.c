/* Key memory and the two indexes of the lock table: keys by name (chained
 * hash table with incremental rehash) and pending requests by client
 * (open addressing). See lock_internal.h for the layout.
 *
 * The key index resizes the way redis's dict does: a resize allocates the
 * new bucket array and every later insert or removal moves a few buckets,
 * so no single request pays for rehashing a million keys. Lookups check the
 * old array (buckets not yet moved) and then the new one.
 */
#include "shard/lock_internal.h"

#include <stdlib.h>
#include <string.h>

#define HT_SIZE_MIN 16u
#define HT_SIZE_MAX ((uint64_t)1 << 32) /* bucket numbers come from a 32-bit hash */
#define HT_STEP_BUCKETS 2u              /* non-empty buckets moved per insert/removal */
#define HT_STEP_EMPTY 20u               /* empty buckets skipped at most per step */
#define CLIENTS_CAP_MIN 16u

uint32_t lock_hash(const char *key, size_t key_len)
{
    return (uint32_t)tk_hash(key, key_len); /* the low 32 bits, on purpose */
}

void lock_keys_init(struct tk_lock_table *t)
{
    memset(t->ht, 0, sizeof(t->ht));
    t->rehash = -1;
    t->nkeys = 0;
    t->size_floor = 0;
}

/* Allocation size of a key: rounded to 16 bytes, the granularity of the
 * common allocators' small size classes, so the rounding is free room for a
 * longer owner later. */
static size_t keys_alloc_size(size_t key_len, size_t owner_len)
{
    return (sizeof(struct lock_key) + key_len + owner_len + 15u) & ~(size_t)15u;
}

struct lock_key *lock_key_find(struct tk_lock_table *t,
                               uint32_t hash,
                               const char *key,
                               size_t key_len)
{
    for (int i = 0; i < 2; i++) {
        const struct lock_ht *ht = &t->ht[i];
        if (ht->size == 0)
            continue;
        uint64_t b = hash & (ht->size - 1);
        if (i == 0 && t->rehash >= 0 && b < (uint64_t)t->rehash)
            continue; /* this bucket has moved to ht[1] */
        for (struct lock_key *k = ht->b[b]; k != NULL; k = k->next)
            if (k->hash == hash && k->key_len == key_len && memcmp(k->bytes, key, key_len) == 0)
                return k;
    }
    return NULL;
}

static void keys_rehash_step(struct tk_lock_table *t)
{
    /* Paused while a snapshot cut runs: its cursor walks the arrays. */
    if (t->rehash < 0 || t->cut.running)
        return;
    struct lock_ht *from = &t->ht[0];
    struct lock_ht *to = &t->ht[1];
    unsigned moved = 0;
    unsigned empty = 0;
    while ((uint64_t)t->rehash < from->size && moved < HT_STEP_BUCKETS && empty < HT_STEP_EMPTY) {
        struct lock_key *k = from->b[t->rehash];
        if (k == NULL)
            empty++;
        else
            moved++;
        while (k != NULL) {
            struct lock_key *next = k->next;
            uint64_t b = k->hash & (to->size - 1);
            k->next = to->b[b];
            to->b[b] = k;
            from->used--;
            to->used++;
            k = next;
        }
        from->b[t->rehash] = NULL;
        t->rehash++;
    }
    if ((uint64_t)t->rehash == from->size) {
        TK_ASSERT(from->used == 0);
        free(from->b);
        *from = *to;
        memset(to, 0, sizeof(*to));
        t->rehash = -1;
    }
}

/* Starts moving to a bucket array of `size`. If the allocation fails the
 * table keeps working with longer chains and tries again on a later insert. */
static void keys_resize(struct tk_lock_table *t, uint64_t size)
{
    TK_ASSERT(t->rehash < 0);
    TK_ASSERT(size >= HT_SIZE_MIN);
    TK_ASSERT(size <= HT_SIZE_MAX);
    struct lock_key **b = calloc(size, sizeof(*b));
    if (b == NULL)
        return;
    if (t->ht[0].size == 0) {
        TK_ASSERT(t->nkeys == 0);
        t->ht[0] = (struct lock_ht){.b = b, .size = size, .used = 0};
        return;
    }
    t->ht[1] = (struct lock_ht){.b = b, .size = size, .used = 0};
    t->rehash = 0;
}

/* Grows at load factor 1, shrinks below 1/8 (to load 1/2), one resize at a
 * time. An insert moves at least two buckets, so a doubling completes
 * before the old array's size in inserts: chains stay short meanwhile. */
static void keys_maybe_resize(struct tk_lock_table *t)
{
    if (t->rehash >= 0)
        return;
    uint64_t size = t->ht[0].size;
    if (size == 0) {
        keys_resize(t, HT_SIZE_MIN);
    } else if (t->nkeys >= size && size < HT_SIZE_MAX) {
        keys_resize(t, size * 2);
    } else if (size > TK_MAX((uint64_t)HT_SIZE_MIN, t->size_floor) && t->nkeys < size / 8) {
        uint64_t n = HT_SIZE_MIN;
        while (n < t->nkeys * 2)
            n *= 2;
        keys_resize(t, n);
    }
}

void lock_keys_presize(struct tk_lock_table *t, uint64_t n)
{
    if (t->nkeys != 0 || t->ht[0].size != 0 || n == 0)
        return;
    uint64_t size = HT_SIZE_MIN;
    while (size < n && size < HT_SIZE_MAX)
        size *= 2;
    keys_resize(t, size);          /* on failure the table grows as it goes */
    t->size_floor = t->ht[0].size; /* no shrinking while the keys come in */
    (void)tk_timer_reserve(&t->leases, n);
}

static void keys_link(struct tk_lock_table *t, struct lock_key *k)
{
    /* During a rehash new keys go to the new array only. */
    struct lock_ht *ht = &t->ht[t->rehash >= 0 ? 1 : 0];
    TK_ASSERT(ht->size > 0);
    uint64_t b = k->hash & (ht->size - 1);
    k->next = ht->b[b];
    ht->b[b] = k;
    ht->used++;
}

static void keys_unlink(struct tk_lock_table *t, struct lock_key *k)
{
    for (int i = 0; i < 2; i++) {
        struct lock_ht *ht = &t->ht[i];
        if (ht->size == 0)
            continue;
        uint64_t b = k->hash & (ht->size - 1);
        if (i == 0 && t->rehash >= 0 && b < (uint64_t)t->rehash)
            continue;
        for (struct lock_key **pp = &ht->b[b]; *pp != NULL; pp = &(*pp)->next) {
            if (*pp == k) {
                *pp = k->next;
                k->next = NULL;
                ht->used--;
                return;
            }
        }
    }
    tk_panic(__FILE__, __LINE__, "lock key not in the index");
}

/* Keeps the in-flight array able to hold every key that has a lead, so
 * marking a key in flight never allocates (it happens inside apply, which
 * cannot fail). */
static int keys_flight_reserve(struct tk_lock_table *t, uint64_t n)
{
    if (n <= t->flight_cap)
        return TK_OK;
    uint64_t cap = t->flight_cap ? t->flight_cap * 2 : 64;
    while (cap < n)
        cap *= 2;
    struct lock_key **v = realloc(t->flight, cap * sizeof(*v));
    if (v == NULL)
        return TK_ENOMEM;
    t->flight = v;
    t->flight_cap = cap;
    return TK_OK;
}

/* Halves the in-flight array once leads use under a quarter of it (halving,
 * not shrinking to fit, so a count that hovers does not realloc back and
 * forth). A failed shrink is ignored. */
static void keys_flight_trim(struct tk_lock_table *t)
{
    if (t->flight_cap <= 64 || t->nleads >= t->flight_cap / 4)
        return;
    TK_ASSERT(t->nflight <= t->nleads);
    struct lock_key **v = realloc(t->flight, t->flight_cap / 2 * sizeof(*v));
    if (v != NULL) {
        t->flight = v;
        t->flight_cap /= 2;
    }
}

struct lock_lead *lock_lead_get(struct tk_lock_table *t, struct lock_key *k)
{
    TK_ASSERT(t->leader);
    if (k->lead != NULL)
        return k->lead;
    /* Room first, so a failure changes nothing. */
    if (keys_flight_reserve(t, t->nleads + 1) != TK_OK)
        return NULL;
    struct lock_lead *l = calloc(1, sizeof(*l));
    if (l == NULL)
        return NULL;
    l->flight_slot = LOCK_NONE;
    k->lead = l;
    t->nleads++;
    TK_ASSERT(t->nleads <= t->flight_cap);
    return l;
}

void lock_lead_free(struct tk_lock_table *t, struct lock_key *k)
{
    struct lock_lead *l = k->lead;
    TK_ASSERT(l != NULL);
    TK_ASSERT(k->flight == 0);
    TK_ASSERT(l->flight_slot == LOCK_NONE);
    TK_ASSERT(l->waiters == NULL);
    TK_ASSERT(l->nwaiters == 0);
    TK_ASSERT(l->deferred == NULL);
    TK_ASSERT(t->nleads > 0);
    free(l);
    k->lead = NULL;
    t->nleads--;
    keys_flight_trim(t);
}

struct lock_key *lock_key_new(struct tk_lock_table *t,
                              uint32_t hash,
                              const char *key,
                              size_t key_len,
                              size_t owner_len)
{
    TK_ASSERT(key_len >= 1);
    TK_ASSERT(key_len <= TK_KEY_LEN_MAX);
    TK_ASSERT(owner_len <= TK_OWNER_LEN_MAX);
    /* Room first, so a failure changes nothing. */
    if (tk_timer_reserve(&t->leases, t->nkeys + 1) != TK_OK)
        return NULL;
    keys_rehash_step(t);
    keys_maybe_resize(t);
    if (t->ht[0].size == 0)
        return NULL;
    size_t size = keys_alloc_size(key_len, owner_len);
    struct lock_key *k = malloc(size);
    if (k == NULL)
        return NULL;
    memset(k, 0, sizeof(*k));
    k->hash = hash;
    k->lease_slot = TK_TIMER_NONE;
    k->cut_mark = t->cut.mark & 1u; /* new: a running cut does not list it */
    /* key_len <= 250 and owner_cap <= TK_OWNER_LEN_MAX + 15 (the rounding
     * of keys_alloc_size), both asserted or bounded above: they fit. */
    k->key_len = (uint8_t)key_len;
    k->owner_cap = (uint8_t)(size - sizeof(*k) - key_len);
    memcpy(k->bytes, key, key_len);
    keys_link(t, k);
    t->nkeys++;
    TK_ASSERT(k->owner_cap >= owner_len);
    return k;
}

/* Points the in-flight entry, the waiters and the deferred requests of a
 * key with a lead at the key's new address. */
static void keys_lead_rebind(struct tk_lock_table *t, struct lock_key *n)
{
    const struct lock_lead *l = n->lead;
    if (l->flight_slot != LOCK_NONE)
        t->flight[l->flight_slot] = n;
    struct lock_req *r = l->waiters;
    for (uint32_t i = 0; i < l->nwaiters; i++, r = r->next)
        r->key = n;
    if (l->deferred != NULL) {
        r = l->deferred;
        do {
            r->key = n;
            r = r->next;
        } while (r != l->deferred);
    }
}

struct lock_key *lock_key_fit_owner(struct tk_lock_table *t, struct lock_key *k, size_t owner_len)
{
    TK_ASSERT(owner_len <= TK_OWNER_LEN_MAX);
    if (owner_len <= k->owner_cap)
        return k;
    size_t size = keys_alloc_size(k->key_len, owner_len);
    /* Unlink before the move and relink after it: the chain then never
     * holds a stale address. */
    keys_unlink(t, k);
    struct lock_key *n = realloc(k, size);
    if (n == NULL) {
        keys_link(t, k);
        return NULL;
    }
    keys_link(t, n);
    n->owner_cap = (uint8_t)(size - sizeof(*n) - n->key_len); /* <= 64 + 15: fits */
    /* Everything that points at the key follows it. The old address is not
     * compared (that would read a freed pointer): the fix-up always runs; it
     * costs O(waiters) at most a few times per key, as owner_cap only grows. */
    if (n->lease_slot != TK_TIMER_NONE)
        tk_timer_rebind(&t->leases, n->lease_slot, &n->lease_slot);
    if (n->lead != NULL)
        keys_lead_rebind(t, n);
    TK_ASSERT(n->owner_cap >= owner_len);
    return n;
}

void lock_key_free(struct tk_lock_table *t, struct lock_key *k)
{
    TK_ASSERT(k->token == 0);
    TK_ASSERT(k->flight == 0);
    TK_ASSERT(k->lead == NULL);
    TK_ASSERT(k->lease_slot == TK_TIMER_NONE);
    keys_unlink(t, k);
    free(k);
    t->nkeys--;
    t->size_floor = 0; /* the first removal ends an install's sizing */
    keys_rehash_step(t);
    keys_maybe_resize(t);
    tk_timer_trim(&t->leases, t->nkeys);
}

void lock_keys_each(const struct tk_lock_table *t,
                    void (*fn)(void *ctx, struct lock_key *k),
                    void *ctx)
{
    for (int i = 0; i < 2; i++) {
        const struct lock_ht *ht = &t->ht[i];
        for (uint64_t b = 0; b < ht->size; b++) {
            struct lock_key *k = ht->b[b];
            while (k != NULL) {
                struct lock_key *next = k->next;
                fn(ctx, k);
                k = next;
            }
        }
    }
}

static void keys_free_one(void *ctx, struct lock_key *k)
{
    (void)ctx;
    TK_ASSERT(k->lead == NULL); /* leader state is dropped first */
    free(k);
}

void lock_keys_free_all(struct tk_lock_table *t)
{
    lock_keys_each(t, keys_free_one, NULL);
    free(t->ht[0].b);
    free(t->ht[1].b);
    lock_keys_init(t);
}

/* ---- Snapshot cut (lock.h) ----------------------------------------------- */

#define CUT_STEP_EMPTY 4096u /* empty buckets skipped per step, at most */
#define CUT_PREFETCH 8u      /* buckets ahead whose key is fetched early */

void lock_cut_visit(struct tk_lock_table *t, struct lock_key *k)
{
    struct lock_cut *c = &t->cut;
    TK_ASSERT(c->running);
    if (k->cut_mark == c->mark)
        return;
    k->cut_mark = c->mark & 1u;
    if (k->token == 0)
        return;
    c->done.count++;
    c->done.key_owner_bytes += (uint64_t)k->key_len + k->owner_len;
    TK_ASSERT(c->done.count <= c->want.count);
    TK_ASSERT(c->done.key_owner_bytes <= c->want.key_owner_bytes);
    struct tk_snap_holder h = {.key = k->bytes,
                               .owner = lock_key_owner(k),
                               .key_len = k->key_len,
                               .owner_len = k->owner_len,
                               .lease_ms = k->lease_ms,
                               .left_ms = lock_key_left_ms(k, c->begin_us, t->limits.drift_us),
                               .token = k->token};
    c->fn(c->ctx, &h);
}

void tk_lock_cut_begin(struct tk_lock_table *t,
                       uint64_t now_us,
                       tk_lock_cut_fn fn,
                       void *ctx,
                       struct tk_lock_cut_size *size)
{
    struct lock_cut *c = &t->cut;
    TK_ASSERT(!c->running);
    TK_ASSERT(fn != NULL);
    uint8_t mark = (uint8_t)((c->mark ^ 1u) & 1u); /* every key is unlisted now */
    *c = (struct lock_cut){.running = true,
                           .mark = mark,
                           .begin_us = now_us,
                           .want = {t->nheld, t->held_bytes},
                           .fn = fn,
                           .ctx = ctx};
    if (size != NULL)
        *size = c->want;
}

static void cut_end(struct tk_lock_table *t)
{
    struct lock_cut *c = &t->cut;
    c->running = false;
    c->fn = NULL;
    c->ctx = NULL;
}

bool tk_lock_cut_step(struct tk_lock_table *t, uint32_t budget)
{
    struct lock_cut *c = &t->cut;
    TK_ASSERT(c->running);
    uint32_t keys = 0, empty = 0;
    while (c->arr < 2 && keys < budget && empty < CUT_STEP_EMPTY) {
        const struct lock_ht *ht = &t->ht[c->arr];
        if (c->bucket >= ht->size) {
            c->arr++;
            c->bucket = 0;
            continue;
        }
        /* Buckets of ht[0] below `rehash` have moved (and are empty). The
         * keys sit anywhere in memory: fetch one a few buckets ahead. */
        if (c->bucket + CUT_PREFETCH < ht->size && ht->b[c->bucket + CUT_PREFETCH] != NULL)
            __builtin_prefetch(ht->b[c->bucket + CUT_PREFETCH]);
        struct lock_key *k = ht->b[c->bucket++];
        if (k == NULL)
            empty++;
        for (; k != NULL; k = k->next, keys++)
            lock_cut_visit(t, k); /* lists; never adds or removes keys */
    }
    if (c->arr < 2)
        return false;
    /* Every holder at the begin was listed, here or before its change. */
    TK_ASSERT(c->done.count == c->want.count);
    TK_ASSERT(c->done.key_owner_bytes == c->want.key_owner_bytes);
    cut_end(t);
    return true;
}

bool tk_lock_cut_running(const struct tk_lock_table *t)
{
    return t->cut.running;
}

void tk_lock_cut_abort(struct tk_lock_table *t)
{
    if (t->cut.running)
        cut_end(t);
}

/* ---- Client index -------------------------------------------------------- */

static uint64_t clients_mix(uint64_t x)
{
    /* Client references are often small or sequential integers; the
     * splitmix64 finalizer spreads them over the table. */
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

struct lock_client *lock_client_find(struct lock_clients *c, uint64_t client)
{
    TK_ASSERT(client != 0);
    if (c->cap == 0)
        return NULL;
    uint64_t mask = c->cap - 1;
    for (uint64_t i = clients_mix(client) & mask;; i = (i + 1) & mask) {
        if (c->v[i].client == client)
            return &c->v[i];
        if (c->v[i].client == 0)
            return NULL;
    }
}

static struct lock_client *clients_slot(struct lock_clients *c, uint64_t client)
{
    uint64_t mask = c->cap - 1;
    uint64_t i = clients_mix(client) & mask;
    while (c->v[i].client != 0)
        i = (i + 1) & mask;
    return &c->v[i];
}

int lock_clients_reserve(struct lock_clients *c)
{
    /* Load factor at most 1/2 keeps probes short. */
    if ((c->used + 1) * 2 <= c->cap)
        return TK_OK;
    uint64_t cap = c->cap ? c->cap * 2 : CLIENTS_CAP_MIN;
    struct lock_client *v = calloc(cap, sizeof(*v));
    if (v == NULL)
        return TK_ENOMEM;
    struct lock_clients n = {.v = v, .cap = cap, .used = c->used};
    for (uint64_t i = 0; i < c->cap; i++)
        if (c->v[i].client != 0)
            *clients_slot(&n, c->v[i].client) = c->v[i];
    free(c->v);
    *c = n;
    TK_ASSERT((c->used + 1) * 2 <= c->cap);
    return TK_OK;
}

void lock_client_add(struct lock_clients *c, struct lock_req *r)
{
    struct lock_client *e = lock_client_find(c, r->client);
    if (e == NULL) {
        TK_ASSERT((c->used + 1) * 2 <= c->cap);
        e = clients_slot(c, r->client);
        e->client = r->client;
        e->head = r;
        r->cprev = r->cnext = r;
        c->used++;
        return;
    }
    struct lock_req *tail = e->head->cprev;
    r->cprev = tail;
    r->cnext = e->head;
    tail->cnext = r;
    e->head->cprev = r;
}

void lock_client_remove(struct lock_clients *c, struct lock_req *r)
{
    struct lock_client *e = lock_client_find(c, r->client);
    TK_ASSERT(e != NULL);
    if (r->cnext == r) {
        TK_ASSERT(e->head == r);
        lock_client_delete(c, e);
    } else {
        r->cprev->cnext = r->cnext;
        r->cnext->cprev = r->cprev;
        if (e->head == r)
            e->head = r->cnext;
    }
    r->cprev = r->cnext = NULL;
}

void lock_client_delete(struct lock_clients *c, struct lock_client *e)
{
    TK_ASSERT(e->client != 0);
    TK_ASSERT(c->used > 0);
    /* Backward-shift deletion: later entries of the probe run move into the
     * hole unless their home slot lies after it, so lookups never need
     * tombstones. */
    uint64_t mask = c->cap - 1;
    uint64_t hole = (uint64_t)(e - c->v);
    uint64_t j = hole;
    c->v[hole].client = 0;
    c->v[hole].head = NULL;
    for (;;) {
        j = (j + 1) & mask;
        if (c->v[j].client == 0)
            break;
        uint64_t home = clients_mix(c->v[j].client) & mask;
        bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
        if (stays)
            continue;
        c->v[hole] = c->v[j];
        c->v[j].client = 0;
        c->v[j].head = NULL;
        hole = j;
    }
    c->used--;
}

void lock_clients_fini(struct lock_clients *c)
{
    free(c->v);
    memset(c, 0, sizeof(*c));
}
