/* The lock table: client requests, committed commands, timers and role
 * changes (SPEC 4.5, 6). See lock.h for the contract and lock_internal.h for
 * the memory layout.
 *
 * Key states on the leader: FREE (no holder; such a key is not even in the
 * index unless a proposal is in flight for it), HELD (k->token != 0) and
 * IN-FLIGHT (k->flight != 0: one proposal for the key is in the Raft log and
 * not yet applied; its requesters wait in k->lead->grant_* / release_*). The
 * invariants tk_lock_check() verifies include: waiters only on a HELD or
 * IN-FLIGHT key (a free key never has waiters), deferred requests only on an
 * IN-FLIGHT key, a lease timer for every HELD key that is not IN-FLIGHT, and
 * a lead (k->lead) exactly on the keys that are IN-FLIGHT or have waiters or
 * deferred requests.
 *
 * Leads are allocated on the request paths, which may fail with TK_ENOMEM
 * and then change nothing, and by a lease running out on an idle key in
 * tk_lock_tick() (panics when out of memory, see lock_internal.h). Every
 * path that may leave a key idle ends in lock_key_tidy(), which frees the
 * lead and then the key if it holds nothing.
 */
#include "core/slots.h"
#include "shard/lock_internal.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define US_PER_MS 1000u

#define LOCK_CONTAINER(ptr, type, member) ((type *)(void *)((char *)(ptr)-offsetof(type, member)))

/* ---- Rings --------------------------------------------------------------- */

void lock_ring_append(struct lock_req **head, struct lock_req *r)
{
    if (*head == NULL) {
        r->prev = r->next = r;
        *head = r;
        return;
    }
    struct lock_req *h = *head;
    struct lock_req *tail = h->prev;
    r->prev = tail;
    r->next = h;
    tail->next = r;
    h->prev = r;
}

void lock_ring_remove(struct lock_req **head, struct lock_req *r)
{
    TK_ASSERT(*head != NULL);
    if (r->next == r) {
        TK_ASSERT(*head == r);
        *head = NULL;
    } else {
        r->prev->next = r->next;
        r->next->prev = r->prev;
        if (*head == r)
            *head = r->next;
    }
    r->prev = r->next = NULL;
}

/* ---- Small helpers ------------------------------------------------------- */

static void lock_reply(const struct tk_lock_sink *sink,
                       char type,
                       uint64_t client,
                       uint64_t id,
                       uint64_t token)
{
    struct tk_lock_reply r = {.type = type, .client = client, .id = id, .token = token};
    sink->reply(sink->ctx, &r);
}

/* G, with the request's arrival time for the latency metrics. */
static void lock_reply_grant(const struct tk_lock_sink *sink,
                             uint64_t client,
                             uint64_t id,
                             uint64_t token,
                             uint64_t arrived_us)
{
    struct tk_lock_reply r = {
        .type = 'G', .client = client, .id = id, .token = token, .arrived_us = arrived_us};
    sink->reply(sink->ctx, &r);
}

static void lock_reply_busy(struct tk_lock_table *t,
                            const struct tk_lock_req *req,
                            bool bound,
                            const struct tk_lock_sink *sink)
{
    t->counters.busy++;
    if (bound)
        t->counters.busy_bound++;
    lock_reply(sink, 'B', req->client, req->id, 0);
}

static uint32_t lock_key_nwaiters(const struct lock_key *k)
{
    return k->lead != NULL ? k->lead->nwaiters : 0;
}

/* After a step that may leave the key idle: an idle key (nothing in flight,
 * no waiters or deferred requests) loses its lead, and a key that then holds
 * nothing (no holder either) leaves the table. */
static void lock_key_tidy(struct tk_lock_table *t, struct lock_key *k)
{
    const struct lock_lead *l = k->lead;
    if (l != NULL) {
        if (k->flight != 0 || l->waiters != NULL || l->deferred != NULL)
            return;
        lock_lead_free(t, k);
    }
    TK_ASSERT(k->flight == 0); /* a key in flight always has a lead */
    if (k->token == 0)
        lock_key_free(t, k);
}

static bool lock_holder_is(const struct lock_key *k,
                           const char *owner,
                           size_t owner_len,
                           uint64_t token)
{
    return k->token != 0 && k->token == token && k->owner_len == owner_len &&
           memcmp(lock_key_owner(k), owner, owner_len) == 0;
}

static void lock_flight_end(struct tk_lock_table *t, struct lock_key *k)
{
    struct lock_lead *l = k->lead;
    TK_ASSERT(k->flight != 0);
    TK_ASSERT(l != NULL);
    TK_ASSERT(l->flight_slot < t->nflight);
    TK_ASSERT(t->flight[l->flight_slot] == k);
    struct lock_key *last = t->flight[--t->nflight];
    t->flight[l->flight_slot] = last;
    last->lead->flight_slot = l->flight_slot;
    l->flight_slot = LOCK_NONE;
    k->flight = 0;
}

/* Marks the key IN-FLIGHT and hands the command to the Raft side. The key
 * has a lead (whose room in the in-flight array was reserved with it) and
 * the caller has set the requesters (lead->grant_*, lead->release_*). */
static void lock_propose(struct tk_lock_table *t,
                         struct lock_key *k,
                         uint8_t type,
                         bool expired,
                         const char *owner,
                         size_t owner_len,
                         uint32_t lease_ms,
                         const struct tk_lock_sink *sink)
{
    TK_ASSERT(t->leader);
    TK_ASSERT(k->flight == 0);
    /* A grant needs a FREE key; the other three remove the current holder. */
    TK_ASSERT((type == TK_CMD_GRANT) == (k->token == 0));
    struct tk_cmd c = {0};
    c.type = type;
    c.key_len = k->key_len;
    c.expired = expired ? 1 : 0;
    c.old_token = k->token;
    memcpy(c.key, k->bytes, k->key_len);
    if (type == TK_CMD_GRANT || type == TK_CMD_HANDOFF) {
        c.owner_len = (uint8_t)owner_len; /* <= TK_OWNER_LEN_MAX (tk_lock_request) */
        c.lease_ms = lease_ms;
        memcpy(c.owner, owner, owner_len);
    }
    TK_DEBUG_ASSERT(tk_cmd_check(&c) == TK_OK);
    /* Room for every lead was reserved when the lead was allocated. */
    TK_ASSERT(k->lead != NULL);
    TK_ASSERT(t->nflight < t->nleads);
    TK_ASSERT(t->nleads <= t->flight_cap);
    /* Fits: type < 0x80 (enum tk_cmd_type) and EXPIRED is 0x80. */
    k->flight = (uint8_t)(type | (expired ? LOCK_FLIGHT_EXPIRED : 0));
    /* nflight < nleads <= nkeys <= TK_TIMER_MAX (the lease heap's bound),
     * so the slot fits and never equals LOCK_NONE. */
    k->lead->flight_slot = (uint32_t)t->nflight;
    t->flight[t->nflight++] = k;
    sink->propose(sink->ctx, &c);
}

static void lock_waiter_remove(struct tk_lock_table *t, struct lock_req *r)
{
    struct lock_lead *l = r->key->lead;
    TK_ASSERT(r->type == 'A');
    TK_ASSERT(l->nwaiters > 0);
    tk_timer_remove(&t->waits, r->wait_slot);
    lock_ring_remove(&l->waiters, r);
    lock_client_remove(&t->clients, r);
    l->nwaiters--;
    t->nwaiters--;
    tk_timer_trim(&t->waits, t->nwaiters);
}

/* Proposes GRANT (FREE key) or HANDOFF (HELD key) to the head waiter, who
 * stops being a waiter: its wait deadline no longer applies (SPEC 6). */
static void lock_grant_head(struct tk_lock_table *t,
                            uint64_t now_us,
                            struct lock_key *k,
                            bool expired,
                            const struct tk_lock_sink *sink)
{
    struct lock_lead *l = k->lead;
    struct lock_req *w = l->waiters;
    TK_ASSERT(w != NULL);
    lock_waiter_remove(t, w);
    l->grant_client = w->client;
    l->grant_id = w->id;
    l->grant_arrived_us = w->arrived_us;
    if (sink->waited != NULL)
        sink->waited(sink->ctx, now_us > w->queued_us ? now_us - w->queued_us : 0);
    uint8_t type = k->token == 0 ? TK_CMD_GRANT : TK_CMD_HANDOFF;
    lock_propose(t, k, type, expired, w->owner, w->owner_len, w->lease_ms, sink);
    free(w);
}

/* The holder's lease ran out (its timer is already off the heap). The key
 * has a lead. */
static void lock_expire(struct tk_lock_table *t,
                        uint64_t now_us,
                        struct lock_key *k,
                        const struct tk_lock_sink *sink)
{
    TK_ASSERT(k->token != 0);
    TK_ASSERT(k->flight == 0);
    TK_ASSERT(k->lease_slot == TK_TIMER_NONE);
    TK_ASSERT(k->lead != NULL);
    if (k->lead->waiters != NULL)
        lock_grant_head(t, now_us, k, true, sink);
    else
        lock_propose(t, k, TK_CMD_EXPIRE, false, NULL, 0, 0, sink);
}

/* R on a key that is not IN-FLIGHT; the key has a lead (a request that
 * finds an idle key gives it one first). */
static void lock_release_eval(struct tk_lock_table *t,
                              uint64_t now_us,
                              struct lock_key *k,
                              uint64_t client,
                              uint64_t id,
                              const char *owner,
                              size_t owner_len,
                              uint64_t token,
                              const struct tk_lock_sink *sink)
{
    struct lock_lead *l = k->lead;
    TK_ASSERT(k->flight == 0);
    TK_ASSERT(l != NULL);
    if (!lock_holder_is(k, owner, owner_len, token)) {
        lock_reply(sink, 'N', client, id, 0);
        return;
    }
    l->release_client = client;
    l->release_id = id;
    if (l->waiters != NULL)
        lock_grant_head(t, now_us, k, false, sink);
    else
        lock_propose(t, k, TK_CMD_RELEASE, false, NULL, 0, 0, sink);
    TK_ASSERT(k->flight != 0);
}

/* Q on a key that is not IN-FLIGHT (k may be NULL: not in the table). */
static void lock_query_eval(const struct lock_key *k,
                            uint64_t client,
                            uint64_t id,
                            const struct tk_lock_sink *sink)
{
    struct tk_lock_reply r = {.type = 'Q', .client = client, .id = id};
    if (k != NULL && k->token != 0) {
        r.token = k->token;
        r.waiters = lock_key_nwaiters(k);
        r.owner = lock_key_owner(k);
        r.owner_len = k->owner_len;
    } else {
        /* SPEC 3: a free key has no waiters. */
        TK_ASSERT(k == NULL || lock_key_nwaiters(k) == 0);
    }
    sink->reply(sink->ctx, &r);
}

static struct lock_req *lock_req_new(const struct tk_lock_req *req, struct lock_key *k)
{
    size_t owner_len = req->type == 'Q' ? 0 : req->owner_len;
    struct lock_req *r = malloc(sizeof(*r) + owner_len);
    if (r == NULL)
        return NULL;
    memset(r, 0, sizeof(*r));
    r->key = k;
    r->client = req->client;
    r->id = req->id;
    r->token = req->type == 'R' ? req->token : 0;
    r->wait_slot = TK_TIMER_NONE;
    r->lease_ms = req->type == 'A' ? req->lease_ms : 0;
    r->arrived_us = req->type == 'A' ? req->arrived_us : 0;
    r->type = req->type;
    /* <= TK_OWNER_LEN_MAX, asserted in tk_lock_request: fits. */
    r->owner_len = (uint8_t)owner_len;
    if (owner_len > 0) /* a Q has no owner, and memcpy from NULL is undefined */
        memcpy(r->owner, req->owner, owner_len);
    return r;
}

/* ---- Requests ------------------------------------------------------------ */

static int lock_defer(struct tk_lock_table *t, struct lock_key *k, const struct tk_lock_req *req)
{
    TK_ASSERT(k->flight != 0);
    TK_ASSERT(k->lead != NULL);
    if (t->ndeferred >= t->limits.waiters_max)
        return TK_EFULL;
    if (lock_clients_reserve(&t->clients) != TK_OK)
        return TK_ENOMEM;
    struct lock_req *r = lock_req_new(req, k);
    if (r == NULL)
        return TK_ENOMEM;
    lock_ring_append(&k->lead->deferred, r);
    lock_client_add(&t->clients, r);
    t->ndeferred++;
    return TK_OK;
}

static int lock_acquire(struct tk_lock_table *t,
                        uint64_t now_us,
                        const struct tk_lock_req *req,
                        uint32_t hash,
                        struct lock_key *k,
                        const struct tk_lock_sink *sink)
{
    if (k == NULL) {
        /* FREE: grant at once. */
        if (t->nkeys >= t->limits.keys_max) {
            lock_reply_busy(t, req, true, sink);
            return TK_OK;
        }
        k = lock_key_new(t, hash, req->key, req->key_len, req->owner_len);
        if (k == NULL)
            return TK_ENOMEM;
        struct lock_lead *l = lock_lead_get(t, k);
        if (l == NULL) {
            lock_key_free(t, k); /* nothing changed */
            return TK_ENOMEM;
        }
        l->grant_client = req->client;
        l->grant_id = req->id;
        l->grant_arrived_us = req->arrived_us;
        lock_propose(t, k, TK_CMD_GRANT, false, req->owner, req->owner_len, req->lease_ms, sink);
        return TK_OK;
    }
    /* A key in the index is HELD or IN-FLIGHT (a FREE one would be gone). */
    TK_ASSERT(k->token != 0 || k->flight != 0);
    if (req->wait_ms == 0) {
        lock_reply_busy(t, req, false, sink);
        return TK_OK;
    }
    if (lock_key_nwaiters(k) >= t->limits.waiters_per_key_max ||
        t->nwaiters >= t->limits.waiters_max) {
        lock_reply_busy(t, req, true, sink);
        return TK_OK;
    }
    if (tk_timer_reserve(&t->waits, t->nwaiters + 1) != TK_OK)
        return TK_ENOMEM;
    if (lock_clients_reserve(&t->clients) != TK_OK)
        return TK_ENOMEM;
    struct lock_lead *l = lock_lead_get(t, k);
    if (l == NULL)
        return TK_ENOMEM;
    struct lock_req *r = lock_req_new(req, k);
    if (r == NULL) {
        lock_key_tidy(t, k); /* a lead just given to an idle key goes again */
        return TK_ENOMEM;
    }
    r->queued_us = now_us;
    lock_ring_append(&l->waiters, r);
    l->nwaiters++;
    t->nwaiters++;
    tk_timer_push(&t->waits, now_us + (uint64_t)req->wait_ms * US_PER_MS, &r->wait_slot);
    lock_client_add(&t->clients, r);
    return TK_OK;
}

int tk_lock_request(struct tk_lock_table *t,
                    uint64_t now_us,
                    const struct tk_lock_req *req,
                    const struct tk_lock_sink *sink)
{
    /* The parser validated the fields (SPEC 5); a bad one here is a bug. */
    TK_ASSERT(req->client != 0);
    TK_ASSERT(req->key_len >= 1);
    TK_ASSERT(req->key_len <= TK_KEY_LEN_MAX);
    if (req->type != 'Q') {
        TK_ASSERT(req->owner_len >= 1);
        TK_ASSERT(req->owner_len <= TK_OWNER_LEN_MAX);
    }
    if (req->type == 'A') {
        TK_ASSERT(req->lease_ms >= TK_LEASE_MS_MIN);
        TK_ASSERT(req->lease_ms <= TK_LEASE_MS_MAX);
        TK_ASSERT(req->wait_ms <= TK_WAIT_MS_MAX);
    }
    if (!t->leader)
        return TK_ENOTLEADER;
    uint32_t hash = lock_hash(req->key, req->key_len);
    struct lock_key *k = lock_key_find(t, hash, req->key, req->key_len);
    switch (req->type) {
        case 'A':
            return lock_acquire(t, now_us, req, hash, k, sink);
        case 'R':
            if (k != NULL && k->flight != 0)
                return lock_defer(t, k, req);
            if (k == NULL || !lock_holder_is(k, req->owner, req->owner_len, req->token)) {
                lock_reply(sink, 'N', req->client, req->id, 0);
                return TK_OK;
            }
            /* The release is proposed: its requester needs a lead. */
            if (lock_lead_get(t, k) == NULL)
                return TK_ENOMEM;
            lock_release_eval(t, now_us, k, req->client, req->id, req->owner, req->owner_len,
                              req->token, sink);
            return TK_OK;
        case 'Q':
            if (k != NULL && k->flight != 0)
                return lock_defer(t, k, req);
            lock_query_eval(k, req->client, req->id, sink);
            return TK_OK;
        default:
            tk_panic(__FILE__, __LINE__, "unknown lock request type");
    }
}

/* ---- Committed commands -------------------------------------------------- */

/* Installs a holder from a GRANT or HANDOFF: a new token, owner and lease,
 * counted from now plus the drift margin. Returns the key,
 * which may have moved to fit a longer owner. */
static struct lock_key *lock_holder_set(struct tk_lock_table *t,
                                        struct lock_key *k,
                                        uint64_t now_us,
                                        const struct tk_cmd *c)
{
    k = lock_key_fit_owner(t, k, c->owner_len);
    TK_ASSERT(k != NULL && "out of memory applying a committed grant");
    if (k->token == 0) {
        t->nheld++;
        t->held_bytes += k->key_len;
        t->slot_held[tk_slot(k->bytes, k->key_len)]++;
    }
    t->held_bytes += (uint64_t)c->owner_len - k->owner_len;
    k->token = c->token;
    k->lease_ms = c->lease_ms & 0x7fffffffu; /* <= TK_LEASE_MS_MAX (tk_cmd_check) */
    k->owner_len = c->owner_len;
    memcpy(k->bytes + k->key_len, c->owner, c->owner_len);
    uint64_t due = now_us + (uint64_t)c->lease_ms * US_PER_MS +
                   TK_LOCK_DRIFT_WITH(c->lease_ms, t->limits.drift_us);
    k->lease_due_us = due;
    if (k->lease_slot == TK_TIMER_NONE)
        tk_timer_push(&t->leases, due, &k->lease_slot); /* room reserved per key */
    else
        tk_timer_update(&t->leases, k->lease_slot, due);
    TK_ASSERT(k->lease_slot != TK_TIMER_NONE);
    return k;
}

static void lock_holder_clear(struct tk_lock_table *t, struct lock_key *k)
{
    TK_ASSERT(k->token != 0);
    TK_ASSERT(t->nheld > 0);
    if (k->lease_slot != TK_TIMER_NONE)
        tk_timer_remove(&t->leases, k->lease_slot);
    TK_ASSERT(t->held_bytes >= (uint64_t)k->key_len + k->owner_len);
    t->held_bytes -= (uint64_t)k->key_len + k->owner_len;
    k->token = 0;
    k->lease_ms = 0;
    k->lease_due_us = 0;
    k->owner_len = 0;
    t->nheld--;
    uint32_t slot = tk_slot(k->bytes, k->key_len);
    TK_ASSERT(t->slot_held[slot] > 0);
    t->slot_held[slot]--;
}

/* After a proposal of this leader committed: the next step for the key.
 * The key still has its lead here, so whatever it proposes next allocates
 * nothing; lock_key_tidy() drops the lead at the end if the key went idle. */
static void lock_advance(struct tk_lock_table *t,
                         struct lock_key *k,
                         uint64_t now_us,
                         const struct tk_lock_sink *sink)
{
    struct lock_lead *l = k->lead;
    TK_ASSERT(k->flight == 0);
    TK_ASSERT(l != NULL);
    if (k->token == 0 && l->waiters != NULL) {
        /* Never leave a FREE key with waiters: the head gets it next. */
        lock_grant_head(t, now_us, k, false, sink);
    } else if (k->token != 0 && k->lease_due_us <= now_us) {
        if (k->lease_slot != TK_TIMER_NONE)
            tk_timer_remove(&t->leases, k->lease_slot);
        lock_expire(t, now_us, k, sink);
    }
    /* Deferred R/Q in arrival order, against the state just committed, until
     * one of them starts a new proposal (SPEC 4.5). */
    while (l->deferred != NULL && k->flight == 0) {
        struct lock_req *r = l->deferred;
        lock_ring_remove(&l->deferred, r);
        lock_client_remove(&t->clients, r);
        t->ndeferred--;
        if (r->type == 'R')
            lock_release_eval(t, now_us, k, r->client, r->id, r->owner, r->owner_len, r->token,
                              sink);
        else
            lock_query_eval(k, r->client, r->id, sink);
        free(r);
    }
    lock_key_tidy(t, k);
}

/* The leader's own proposal for k committed: answer its requesters. */
static void lock_settle(struct tk_lock_table *t,
                        struct lock_key *k,
                        uint64_t now_us,
                        const struct tk_cmd *c,
                        const struct tk_lock_sink *sink)
{
    struct lock_lead *l = k->lead;
    uint64_t rel_client = l->release_client;
    uint64_t rel_id = l->release_id;
    uint64_t grant_client = l->grant_client;
    uint64_t grant_id = l->grant_id;
    uint64_t arrived_us = l->grant_arrived_us;
    l->release_client = l->release_id = l->grant_client = l->grant_id = 0;
    l->grant_arrived_us = 0;
    lock_flight_end(t, k);
    bool released = c->type == TK_CMD_RELEASE || (c->type == TK_CMD_HANDOFF && !c->expired);
    TK_ASSERT((rel_client != 0) == released);
    TK_ASSERT((grant_client != 0) == tk_cmd_grants(c));
    if (rel_client != 0)
        lock_reply(sink, 'R', rel_client, rel_id, 0);
    if (grant_client != 0)
        lock_reply_grant(sink, grant_client, grant_id, c->token, arrived_us);
    lock_advance(t, k, now_us, sink);
}

void tk_lock_apply(struct tk_lock_table *t,
                   uint64_t now_us,
                   const struct tk_cmd *c,
                   const struct tk_lock_sink *sink)
{
    /* A command that contradicts the committed state means a corrupt log or
     * a bug upstream: crash rather than grant a key twice. */
    TK_ASSERT(tk_cmd_check(c) == TK_OK);
    bool grants = tk_cmd_grants(c);
    if (grants) {
        TK_ASSERT(c->token != 0);
        TK_ASSERT(c->token > t->max_token);
    }
    uint32_t hash = lock_hash(c->key, c->key_len);
    struct lock_key *k = lock_key_find(t, hash, c->key, c->key_len);
    if (k != NULL && t->cut.running)
        lock_cut_visit(t, k); /* the cut gets the holder before it changes */
    if (t->leader) {
        /* Only the leader proposes, and tk_lock_lead() comes after every
         * earlier entry was applied: this is the key's proposal in flight. */
        TK_ASSERT(k != NULL);
        TK_ASSERT(k->flight != 0);
        TK_ASSERT(LOCK_FLIGHT_TYPE(k->flight) == c->type);
        TK_ASSERT(((k->flight & LOCK_FLIGHT_EXPIRED) != 0) == (c->expired != 0));
    }
    switch (c->type) {
        case TK_CMD_GRANT:
            if (k == NULL) {
                k = lock_key_new(t, hash, c->key, c->key_len, c->owner_len);
                TK_ASSERT(k != NULL && "out of memory applying a committed grant");
            }
            TK_ASSERT(k->token == 0);
            k = lock_holder_set(t, k, now_us, c);
            break;
        case TK_CMD_HANDOFF:
            TK_ASSERT(k != NULL);
            TK_ASSERT(k->token != 0);
            TK_ASSERT(k->token == c->old_token);
            k = lock_holder_set(t, k, now_us, c);
            t->counters.handoffs++;
            t->counters.expiries += c->expired;
            break;
        default: /* RELEASE, EXPIRE (tk_cmd_check knows no other type) */
            TK_ASSERT(k != NULL);
            TK_ASSERT(k->token != 0);
            TK_ASSERT(k->token == c->old_token);
            lock_holder_clear(t, k);
            if (c->type == TK_CMD_RELEASE)
                t->counters.releases++;
            else
                t->counters.expiries++;
            break;
    }
    if (grants) {
        t->max_token = c->token;
        t->counters.grants++;
    }
    if (t->leader)
        lock_settle(t, k, now_us, c, sink); /* replies and the key's next step */
    else
        lock_key_tidy(t, k); /* a follower's apply is silent */
}

void tk_lock_restore_reserve(struct tk_lock_table *t, uint64_t n)
{
    TK_ASSERT(!t->leader);
    lock_keys_presize(t, TK_MIN(n, t->limits.keys_max));
}

void tk_lock_restore(struct tk_lock_table *t, uint64_t now_us, const struct tk_cmd *grant)
{
    tk_lock_restore_left(t, now_us, grant, grant->lease_ms);
}

void tk_lock_restore_left(struct tk_lock_table *t,
                          uint64_t now_us,
                          const struct tk_cmd *grant,
                          uint32_t left_ms)
{
    TK_ASSERT(left_ms >= 1 && left_ms <= grant->lease_ms);
    TK_ASSERT(!t->leader);
    TK_ASSERT(tk_cmd_check(grant) == TK_OK);
    TK_ASSERT(grant->type == TK_CMD_GRANT);
    TK_ASSERT(grant->token != 0);
    uint32_t hash = lock_hash(grant->key, grant->key_len);
    struct lock_key *k = lock_key_find(t, hash, grant->key, grant->key_len);
    TK_ASSERT(k == NULL && "snapshot lists a key twice");
    k = lock_key_new(t, hash, grant->key, grant->key_len, grant->owner_len);
    TK_ASSERT(k != NULL && "out of memory restoring a snapshot");
    lock_holder_set(t, k, now_us, grant);
    if (left_ms < grant->lease_ms) {
        /* Count what is left, not a fresh lease, with the lease's margin:
         * the deadline less that margin is what a later cut sends on. */
        k->lease_due_us = now_us + (uint64_t)left_ms * US_PER_MS +
                          TK_LOCK_DRIFT_WITH(grant->lease_ms, t->limits.drift_us);
        tk_timer_update(&t->leases, k->lease_slot, k->lease_due_us);
    }
    t->max_token = TK_MAX(t->max_token, grant->token);
}

/* ---- Timers -------------------------------------------------------------- */

static void lock_wait_fire(struct tk_lock_table *t, const struct tk_lock_sink *sink)
{
    struct lock_req *r = LOCK_CONTAINER(tk_timer_top(&t->waits), struct lock_req, wait_slot);
    struct lock_key *k = r->key;
    lock_waiter_remove(t, r);
    t->counters.timeouts++;
    lock_reply(sink, 'T', r->client, r->id, 0);
    free(r);
    lock_key_tidy(t, k);
}

static void lock_lease_fire(struct tk_lock_table *t,
                            uint64_t now_us,
                            const struct tk_lock_sink *sink)
{
    struct lock_key *k = LOCK_CONTAINER(tk_timer_top(&t->leases), struct lock_key, lease_slot);
    TK_ASSERT(k->token != 0);
    tk_timer_remove(&t->leases, k->lease_slot);
    if (k->flight == 0) {
        /* The EXPIRE (or HANDOFF) puts the key in flight, which takes a
         * lead; an idle key has none. Out of memory here cannot be answered
         * with an error: the holder must go, and a leader that cannot
         * propose that must stop leading (documented in lock.h). */
        if (lock_lead_get(t, k) == NULL)
            tk_panic(__FILE__, __LINE__, "out of memory proposing a lease expiry");
        lock_expire(t, now_us, k, sink);
        return;
    }
    /* IN-FLIGHT: the proposal removes this holder (RELEASE, HANDOFF or
     * EXPIRE; a GRANT is never in flight on a held key), so the expiry is
     * moot once it commits. The timer stays parked off the heap;
     * tk_lock_follow() re-arms it if the proposal is dropped. */
    TK_ASSERT(LOCK_FLIGHT_TYPE(k->flight) != TK_CMD_GRANT);
}

void tk_lock_tick(struct tk_lock_table *t, uint64_t now_us, const struct tk_lock_sink *sink)
{
    if (!t->leader)
        return;
    /* Every round removes one timer and adds none, so this ends. Timers fire
     * in deadline order; on a tie the waiter's T comes first. */
    for (;;) {
        uint64_t wait_due = tk_timer_next(&t->waits);
        uint64_t lease_due = tk_timer_next(&t->leases);
        if (TK_MIN(wait_due, lease_due) > now_us)
            break;
        if (wait_due <= lease_due)
            lock_wait_fire(t, sink);
        else
            lock_lease_fire(t, now_us, sink);
    }
    TK_ASSERT(tk_lock_next_deadline(t) > now_us);
}

/* ---- Slots (SPEC 15) ------------------------------------------------------ */

uint64_t tk_lock_held_in(const struct tk_lock_table *t, const uint64_t *slots)
{
    uint64_t n = 0;
    for (uint32_t s = 0; s < TK_SLOTS; s++)
        if (tk_slots_bit(slots, s))
            n += t->slot_held[s];
    /* A grant in flight on a free key holds it once it commits. */
    for (uint64_t i = 0; i < t->nflight; i++) {
        const struct lock_key *k = t->flight[i];
        if (k->token == 0 && tk_slots_bit(slots, tk_slot(k->bytes, k->key_len)))
            n++;
    }
    return n;
}

const uint32_t *tk_lock_slot_held(const struct tk_lock_table *t)
{
    return t->slot_held;
}

uint64_t tk_lock_move_waiters(struct tk_lock_table *t,
                              const uint64_t *slots,
                              uint64_t ring_version,
                              const struct tk_lock_sink *sink)
{
    if (t->nwaiters == 0)
        return 0;
    /* Collected first: removing from the heap reorders it. */
    struct lock_req **out = malloc(t->nwaiters * sizeof(*out));
    TK_ASSERT(out != NULL && "out of memory answering the waiters of frozen slots");
    uint64_t n = 0;
    for (uint32_t i = 0; i < t->waits.n; i++) {
        struct lock_req *r = LOCK_CONTAINER(t->waits.v[i].slot, struct lock_req, wait_slot);
        if (tk_slots_bit(slots, tk_slot(r->key->bytes, r->key->key_len)))
            out[n++] = r;
    }
    for (uint64_t i = 0; i < n; i++) {
        struct lock_req *r = out[i];
        struct lock_key *k = r->key;
        lock_waiter_remove(t, r);
        struct tk_lock_reply w = {.type = 'W',
                                  .client = r->client,
                                  .id = r->id,
                                  .token = ring_version,
                                  .waiters = tk_slot(k->bytes, k->key_len)};
        sink->reply(sink->ctx, &w);
        free(r);
        lock_key_tidy(t, k);
    }
    free(out);
    return n;
}

uint64_t tk_lock_next_deadline(const struct tk_lock_table *t)
{
    if (!t->leader)
        return UINT64_MAX;
    return TK_MIN(tk_timer_next(&t->waits), tk_timer_next(&t->leases));
}

/* ---- Clients and roles --------------------------------------------------- */

void tk_lock_client_closed(struct tk_lock_table *t, uint64_t client)
{
    TK_ASSERT(client != 0);
    struct lock_client *e = lock_client_find(&t->clients, client);
    if (e == NULL)
        return;
    /* Detach the whole ring first, then free its requests. */
    struct lock_req *head = e->head;
    lock_client_delete(&t->clients, e);
    struct lock_req *r = head;
    do {
        struct lock_req *next = r->cnext;
        struct lock_key *k = r->key;
        struct lock_lead *l = k->lead;
        TK_ASSERT(r->client == client);
        if (r->type == 'A') {
            tk_timer_remove(&t->waits, r->wait_slot);
            lock_ring_remove(&l->waiters, r);
            l->nwaiters--;
            t->nwaiters--;
        } else {
            lock_ring_remove(&l->deferred, r);
            t->ndeferred--;
        }
        free(r);
        /* A key with waiters is HELD or IN-FLIGHT and one with deferred
         * requests IN-FLIGHT, so no key becomes free here; a HELD key whose
         * last waiter left loses its lead. A later request of this client on
         * the same key still keeps that lead. */
        lock_key_tidy(t, k);
        r = next;
    } while (r != head);
    tk_timer_trim(&t->waits, t->nwaiters);
    TK_ASSERT(lock_client_find(&t->clients, client) == NULL);
}

/* Drops waiters, deferred requests and proposals in flight, without replies. */
static void lock_drop_leader_state(struct tk_lock_table *t)
{
    /* Every waiter has a wait timer: walk the heap instead of the keys. The
     * first waiter seen of a key empties the key's queue; a key that is not
     * in flight then has no deferred requests either and loses its lead (it
     * is HELD, so it stays), and its other waiters find k->lead NULL. */
    for (uint32_t i = 0; i < t->waits.n; i++) {
        struct lock_req *r =
            LOCK_CONTAINER(tk_timer_slot(&t->waits, i), struct lock_req, wait_slot);
        struct lock_key *k = r->key;
        free(r);
        struct lock_lead *l = k->lead;
        if (l == NULL || l->waiters == NULL)
            continue;
        l->waiters = NULL;
        l->nwaiters = 0;
        if (k->flight == 0) {
            TK_ASSERT(k->token != 0);
            lock_lead_free(t, k);
        }
    }
    tk_timer_clear(&t->waits);
    t->nwaiters = 0;
    /* Deferred requests exist only on keys in flight. */
    while (t->nflight > 0) {
        struct lock_key *k = t->flight[t->nflight - 1];
        struct lock_lead *l = k->lead;
        while (l->deferred != NULL) {
            struct lock_req *r = l->deferred;
            lock_ring_remove(&l->deferred, r);
            free(r);
            t->ndeferred--;
        }
        l->grant_client = l->grant_id = l->release_client = l->release_id = 0;
        l->grant_arrived_us = 0;
        lock_flight_end(t, k);
        /* The dropped proposal may have been an expiry, or the lease may
         * have come due meanwhile: put a parked lease timer back. */
        if (k->token != 0 && k->lease_slot == TK_TIMER_NONE)
            tk_timer_push(&t->leases, k->lease_due_us, &k->lease_slot);
        lock_key_tidy(t, k);
    }
    TK_ASSERT(t->ndeferred == 0);
    TK_ASSERT(t->nleads == 0);
    lock_clients_fini(&t->clients);
}

void tk_lock_lead(struct tk_lock_table *t, uint64_t now_us)
{
    (void)now_us; /* lease deadlines are already on this node's clock */
    if (t->leader)
        return;
    TK_ASSERT(t->nwaiters == 0);
    TK_ASSERT(t->ndeferred == 0);
    TK_ASSERT(t->nflight == 0);
    TK_ASSERT(t->nleads == 0);
    t->leader = true;
}

void tk_lock_follow(struct tk_lock_table *t)
{
    lock_drop_leader_state(t);
    t->leader = false;
    TK_ASSERT(t->nflight == 0);
    TK_ASSERT(t->nwaiters == 0);
}

bool tk_lock_is_leader(const struct tk_lock_table *t)
{
    return t->leader;
}

/* ---- Life cycle ---------------------------------------------------------- */

struct tk_lock_table *tk_lock_create(const struct tk_lock_limits *limits)
{
    TK_ASSERT(limits != NULL);
    struct tk_lock_table *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return NULL;
    t->limits = *limits;
    /* Timer back-indices are 32-bit. */
    t->limits.keys_max = TK_MIN(t->limits.keys_max, (uint64_t)TK_TIMER_MAX);
    t->limits.waiters_max = TK_MIN(t->limits.waiters_max, (uint64_t)TK_TIMER_MAX);
    if (t->limits.drift_us == 0)
        t->limits.drift_us = TK_LOCK_DRIFT_DEFAULT_US;
    lock_keys_init(t);
    tk_timer_init(&t->leases);
    tk_timer_init(&t->waits);
    TK_ASSERT(!t->leader);
    TK_ASSERT(t->nkeys == 0);
    return t;
}

void tk_lock_clear(struct tk_lock_table *t)
{
    tk_lock_cut_abort(t);
    lock_drop_leader_state(t);
    lock_keys_free_all(t);
    tk_timer_fini(&t->leases);
    free(t->flight);
    t->flight = NULL;
    t->flight_cap = 0;
    TK_ASSERT(t->nleads == 0);
    t->nheld = 0;
    t->held_bytes = 0;
    t->max_token = 0;
    memset(t->slot_held, 0, sizeof(t->slot_held));
    TK_ASSERT(t->nkeys == 0);
    TK_ASSERT(t->nflight == 0);
}

void tk_lock_destroy(struct tk_lock_table *t)
{
    if (t == NULL)
        return;
    tk_lock_clear(t);
    tk_timer_fini(&t->waits);
    free(t);
}
