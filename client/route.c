/* libticketing's routing by key across groups (SPEC 15; docs/client.md,
 * "Groups and the ring").
 *
 * The client object the caller holds is the seed: the client of the
 * group at the configured addresses. Every acquire, release and query
 * goes out wrapped in a hop, which remembers the call (key, lease, wait,
 * token, the time of the call) so that it can be sent again. A hop is
 * sent to the group the ring names for the key's slot (the seed while no
 * ring is known), through that group's client: the seed itself, or a
 * child made from the ring's addresses with the seed's settings. Answers
 * other than W go straight to the caller from the group's I/O thread. A W
 * goes to the routing thread, which fetches the ring from the group that
 * answered if the W names a newer version than ours (one fetch at a time,
 * only a newer ring is taken) and sends the hop again: at once to another group, after a pause (20
 * ms doubling to 200 ms) to the same one, while the request's budget lasts. A resent request keeps
 * the time of its call, so the group's client counts its budget (and the wait it writes) from
 * there.
 *
 * Locks: rt->mu guards the ring, the groups, the hops and the queue; it
 * is taken before a group client's own mu (a submit under rt->mu), never
 * after, and never held while a caller's callback runs.
 */
#include "client/internal.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RT_PAUSE_MIN_MS 20u
#define RT_PAUSE_MAX_MS 200u
#define RT_ADDRS_TEXT_MAX (TK_SLOTS_ADDRS_MAX * (TK_SLOTS_ADDR_MAX + 1))
#define RT_SPARE_MAX 1024u /* freed hops kept for reuse */

struct rt_group {
    char name[TK_SLOTS_NAME_MAX + 1];
    struct tk_client *c; /* the seed, a child, or NULL: not made yet */
};

struct hop {
    struct hop *prev, *next; /* the live list */
    struct hop *qnext;       /* the routing thread's queue, or the spares */
    struct cl_route *rt;
    uint64_t id; /* the caller's handle (acquires) */
    char type;   /* 'A' 'R' 'Q' */
    uint32_t slot;
    uint32_t lease_ms, wait_ms;
    uint64_t token;
    uint64_t call_us, end_us; /* the call, and the end of its budget */
    uint64_t due_us;          /* queued: when it may go again */
    uint32_t pause_ms;        /* the next pause before the same group */
    struct tk_client *at;     /* the group client it went to last */
    uint64_t at_handle;       /* its handle there (acquires) */
    bool queued;              /* on the routing thread's queue */
    bool cancel;              /* tk_client_cancel() reached it */
    void (*done)(void *arg, const struct tk_client_result *result);
    void *arg;
    /* Not zeroed for a new hop: written before they are read. */
    struct tk_client_result w; /* the last W answer (outcome 0: none yet) */
    char key[TK_KEY_LEN_MAX + 1];
};

struct cl_route {
    struct tk_client *seed;
    char seed_addrs[CL_ADDRS_MAX][CL_ADDR_TEXT_MAX];
    unsigned nseed_addrs;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    bool started;
    bool stopping;
    /* under mu */
    struct tk_slot_ring *ring;             /* NULL: none yet */
    uint8_t group_of[TK_SLOTS_GROUPS_MAX]; /* ring group index -> groups[] */
    struct rt_group groups[TK_SLOTS_GROUPS_MAX];
    uint32_t ngroups;
    struct hop *live;
    uint32_t nlive;
    uint32_t live_max;
    struct hop *qhead; /* answered W, or waiting for a group's client */
    bool fetch;        /* a W came since the last fetch began */
    struct tk_client *fetch_from;
    uint64_t next_id;
    struct hop *spare; /* freed hops, on qnext */
    uint32_t nspare;
    /* the routing thread's own */
    char *body; /* TK_CLIENT_RING_TEXT_MAX + 1, made at the first fetch */
    struct tk_slot_ring *parsed;
    /* statistics */
    atomic_uint_fast64_t st_rerouted;
    atomic_uint_fast64_t st_version;
};

static void *route_main(void *arg);

int cl_route_start(struct tk_client *seed)
{
    struct cl_route *rt = calloc(1, sizeof *rt);
    if (rt == NULL)
        return TK_CLIENT_ENOMEM;
    rt->seed = seed;
    /* The configured addresses as the seed's connections formatted them
     * (an accepted address formats back to its own text). */
    for (unsigned i = 0; i < seed->nconfigured && i < CL_ADDRS_MAX; i++) {
        bool dup = false;
        for (unsigned j = 0; j < rt->nseed_addrs; j++)
            dup |= strcmp(rt->seed_addrs[j], seed->conns[i]->addr) == 0;
        if (!dup)
            snprintf(rt->seed_addrs[rt->nseed_addrs++], CL_ADDR_TEXT_MAX, "%s",
                     seed->conns[i]->addr);
    }
    rt->live_max = seed->cfg.requests_max + seed->cfg.release_queue_max;
    pthread_mutex_init(&rt->mu, NULL);
    pthread_cond_init(&rt->cv, NULL);
    seed->route = rt;
    if (pthread_create(&rt->thread, NULL, route_main, rt) != 0)
        return TK_CLIENT_ESYSTEM;
    rt->started = true;
    return TK_CLIENT_ENONE;
}

/* ---- the ring -------------------------------------------------------- */

/* Whether a group of the ring is the seed: one of its addresses is one
 * the client was configured with. */
static bool is_seed(const struct cl_route *rt, const struct tk_slot_group *g)
{
    for (unsigned i = 0; i < g->naddrs; i++)
        for (unsigned j = 0; j < rt->nseed_addrs; j++)
            if (strcmp(g->addr[i], rt->seed_addrs[j]) == 0)
                return true;
    return false;
}

/* Takes ring r (newer than the one held) under mu: every group it names
 * gets an entry (its client made on first use), kept across rings by
 * name (a group keeps the client of the addresses it first had). */
static void ring_take(struct cl_route *rt, const struct tk_slot_ring *r)
{
    for (uint32_t i = 0; i < r->ngroups; i++) {
        const struct tk_slot_group *g = &r->groups[i];
        uint32_t k = 0;
        while (k < rt->ngroups && strcmp(rt->groups[k].name, g->name) != 0)
            k++;
        if (k == rt->ngroups) {
            /* Entries are never dropped: a ring names at most 64 groups,
             * and more names than that over the client's life are not
             * routed (their requests end WRONG_GROUP). */
            if (k == TK_SLOTS_GROUPS_MAX) {
                rt->group_of[i] = UINT8_MAX;
                continue;
            }
            snprintf(rt->groups[k].name, sizeof rt->groups[k].name, "%s", g->name);
            rt->ngroups++;
        }
        if (rt->groups[k].c == NULL && is_seed(rt, g))
            rt->groups[k].c = rt->seed;
        rt->group_of[i] = (uint8_t)k;
    }
    if (rt->ring == NULL)
        rt->ring = malloc(sizeof *rt->ring);
    TK_ASSERT(rt->ring != NULL);
    *rt->ring = *r;
    atomic_store(&rt->st_version, r->version);
}

/* Where a hop goes now, under mu: *gi is the group's entry (-1: the
 * seed, no ring known); NULL with *gi >= 0: its client is not made yet;
 * NULL with *gi == -2: the ring names no group for the slot. */
static struct tk_client *pick(struct cl_route *rt, uint32_t slot, int *gi)
{
    if (rt->ring == NULL) {
        *gi = -1;
        return rt->seed;
    }
    int o = tk_slots_owner(rt->ring, slot);
    if (o < 0 || rt->group_of[o] == UINT8_MAX) {
        *gi = -2;
        return NULL;
    }
    *gi = rt->group_of[o];
    return rt->groups[*gi].c;
}

/* ---- hops ------------------------------------------------------------ */

static void hop_done(void *arg, const struct tk_client_result *res);

static void live_remove(struct cl_route *rt, struct hop *h)
{
    if (h->prev != NULL)
        h->prev->next = h->next;
    else
        rt->live = h->next;
    if (h->next != NULL)
        h->next->prev = h->prev;
    rt->nlive--;
}

static void queue_push(struct cl_route *rt, struct hop *h, uint64_t due_us)
{
    TK_ASSERT(!h->queued);
    h->queued = true;
    h->due_us = due_us;
    h->qnext = rt->qhead;
    rt->qhead = h;
    pthread_cond_signal(&rt->cv);
}

/* Sends h to group client g, under mu. 0, or the submit's error. */
static int hop_send(struct hop *h, struct tk_client *g)
{
    struct cl_submit_args a = {.type = h->type,
                               .key = h->key,
                               .lease_ms = h->lease_ms,
                               .wait_ms = h->wait_ms,
                               .token = h->token,
                               .submit_us = h->call_us,
                               .done = hop_done,
                               .arg = h};
    h->at = g;
    h->at_handle = 0;
    return cl_submit(g, &a, h->type == 'A' ? &h->at_handle : NULL, NULL);
}

/* Gives the caller h's outcome and frees h (mu not held). */
static void hop_finish(struct hop *h, const struct tk_client_result *res)
{
    struct cl_route *rt = h->rt;
    void (*done)(void *, const struct tk_client_result *) = h->done;
    void *arg = h->arg;
    /* An end of the hop's own (res->key NULL) names the hop's key, so
     * the hop lives through the callback; an answer names the group
     * client's copy of the key, and the hop is given back first. Either
     * way its handle is spent before the callback runs. */
    struct tk_client_result own;
    if (res->key == NULL) {
        own = *res;
        own.key = h->key;
        res = &own;
    }
    pthread_mutex_lock(&rt->mu);
    live_remove(rt, h);
    bool keep = res == &own;
    if (!keep && rt->nspare < RT_SPARE_MAX) { /* kept for the next request: no malloc */
        h->qnext = rt->spare;
        rt->spare = h;
        rt->nspare++;
        h = NULL;
    }
    pthread_mutex_unlock(&rt->mu);
    done(arg, res);
    free(h);
}

/* A hop's end without an answer of its own: CANCELLED for an acquire
 * (cancelled, or the client stops), else the last W (or, for a hop that
 * never reached a group, a W of the client's own ring). */
static void hop_finish_w(struct hop *h, bool cancelled)
{
    struct tk_client_result res = h->w;
    if (res.outcome != TK_CLIENT_WRONG_GROUP) { /* it never reached a group */
        memset(&res, 0, sizeof res);
        res.outcome = TK_CLIENT_WRONG_GROUP;
        res.slot = h->slot;
        res.ring_version = atomic_load(&h->rt->st_version);
        if (h->type == 'R')
            res.token = h->token;
    }
    if (cancelled && h->type == 'A') {
        memset(&res, 0, sizeof res);
        res.outcome = TK_CLIENT_CANCELLED;
    }
    hop_finish(h, &res);
}

/* The group's answer (on its I/O thread). */
static void hop_done(void *arg, const struct tk_client_result *res)
{
    struct hop *h = arg;
    struct cl_route *rt = h->rt;
    if (res->outcome != TK_CLIENT_WRONG_GROUP) {
        hop_finish(h, res);
        return;
    }
    pthread_mutex_lock(&rt->mu);
    h->w = *res;
    h->w.key = NULL;
    h->at_handle = 0;
    bool stop = rt->stopping;
    if (!stop) {
        /* Only a group with a newer ring than ours has one to give. */
        if (res->ring_version > atomic_load(&rt->st_version)) {
            rt->fetch = true;
            rt->fetch_from = h->at;
        }
        queue_push(rt, h, 0);
    }
    pthread_mutex_unlock(&rt->mu);
    if (stop)
        hop_finish_w(h, true);
}

int cl_route_submit(struct tk_client *seed,
                    const struct cl_submit_args *a,
                    uint64_t *handle,
                    char *reason)
{
    struct cl_route *rt = seed->route;
    if (rt == NULL)
        return cl_submit(seed, a, handle, reason);
    size_t key_len;
    int rc = cl_submit_check(a, &key_len, reason);
    if (rc != 0)
        return rc;
    uint32_t slot = tk_slot(a->key, key_len);
    uint64_t now = cl_now_us();
    uint64_t budget_ms = a->type == 'A'   ? TK_MAX(a->wait_ms, seed->cfg.send_budget_min_ms)
                         : a->type == 'R' ? TK_CLIENT_RELEASE_DEADLINE_MS
                                          : seed->cfg.request_timeout_ms;
    /* One lock section: a spare hop (or a new one), the group, the send. */
    pthread_mutex_lock(&rt->mu);
    struct hop *h = NULL;
    if (rt->stopping) {
        rc = TK_CLIENT_ESHUTDOWN;
    } else if (rt->nlive >= rt->live_max) {
        rc = a->type == 'R' ? TK_CLIENT_EFULL : TK_CLIENT_ENOMEM;
    } else if ((h = rt->spare) != NULL) {
        rt->spare = h->qnext;
        rt->nspare--;
    } else if ((h = malloc(sizeof *h)) == NULL) {
        rc = TK_CLIENT_ENOMEM;
    }
    if (h != NULL) {
        memset(h, 0, offsetof(struct hop, w));
        h->w.outcome = 0;
        h->rt = rt;
        h->type = a->type;
        memcpy(h->key, a->key, key_len);
        h->key[key_len] = '\0';
        h->slot = slot;
        h->lease_ms = a->lease_ms;
        h->wait_ms = a->wait_ms;
        h->token = a->token;
        h->call_us = now;
        h->end_us = now + budget_ms * 1000u;
        h->pause_ms = RT_PAUSE_MIN_MS;
        h->done = a->done;
        h->arg = a->arg;
        int gi;
        struct tk_client *g = pick(rt, slot, &gi);
        /* No group for the slot: the seed answers W, and that outcome
         * stands (the routing thread finds no group either). */
        if (g == NULL && gi == -2)
            g = seed;
        if (g != NULL)
            rc = hop_send(h, g);
        if (rc == 0) {
            h->id = ++rt->next_id;
            h->next = rt->live;
            if (rt->live != NULL)
                rt->live->prev = h;
            rt->live = h;
            rt->nlive++;
            TK_ASSERT(rt->nlive <= rt->live_max); /* checked above, under the same lock */
            if (g == NULL)
                queue_push(rt, h, 0); /* the routing thread makes the group's client */
            if (handle != NULL)
                *handle = h->id;
        } else {
            h->qnext = rt->spare; /* back to the spares (the bound allows it) */
            rt->spare = h;
            rt->nspare++;
        }
    }
    pthread_mutex_unlock(&rt->mu);
    return rc;
}

int cl_route_cancel(struct tk_client *seed, uint64_t handle)
{
    struct cl_route *rt = seed->route;
    pthread_mutex_lock(&rt->mu);
    struct hop *h = rt->live;
    while (h != NULL && h->id != handle)
        h = h->next;
    int rc = TK_CLIENT_ENOTFOUND;
    if (rt->stopping) {
        rc = TK_CLIENT_ESHUTDOWN;
    } else if (h != NULL && h->type == 'A') {
        h->cancel = true;
        rc = TK_CLIENT_ENONE;
        if (h->queued) {
            pthread_cond_signal(&rt->cv); /* the routing thread ends it */
        } else if (h->at != NULL && h->at_handle != 0) {
            (void)cl_cancel(h->at, h->at_handle); /* ENOTFOUND: decided meanwhile */
        }
    }
    pthread_mutex_unlock(&rt->mu);
    return rc;
}

/* ---- the routing thread ---------------------------------------------- */

/* Fetches the ring from g and takes it if newer (mu not held). */
static void fetch_ring(struct cl_route *rt, struct tk_client *g)
{
    if (rt->body == NULL)
        rt->body = malloc(TK_CLIENT_RING_TEXT_MAX + 1);
    if (rt->parsed == NULL)
        rt->parsed = malloc(sizeof *rt->parsed);
    TK_ASSERT(rt->body != NULL && rt->parsed != NULL);
    struct cl_submit_args a = {
        .type = 'S', .ring_buf = rt->body, .ring_cap = TK_CLIENT_RING_TEXT_MAX + 1};
    struct tk_client_result res;
    if (cl_blocking(g, &a, &res) != TK_CLIENT_ANSWERED || res.ring_version == 0)
        return;
    char why[128];
    memset(rt->parsed, 0, sizeof *rt->parsed);
    rt->parsed->version = res.ring_version;
    if (tk_slots_parse_body(rt->body, strlen(rt->body), rt->parsed, why, sizeof why) != TK_OK) {
        cl_log(rt->seed, 1, "the ring (version %llu) does not read: %s",
               (unsigned long long)res.ring_version, why);
        return;
    }
    pthread_mutex_lock(&rt->mu);
    if (rt->ring == NULL || rt->parsed->version > rt->ring->version) {
        ring_take(rt, rt->parsed);
        cl_log(rt->seed, 2, "routing by ring version %llu (%u groups)",
               (unsigned long long)rt->parsed->version, rt->parsed->ngroups);
    }
    pthread_mutex_unlock(&rt->mu);
}

/* Makes the client of group entry gi (mu held; dropped while the client
 * starts). Its addresses are the ring's. */
static void make_group(struct cl_route *rt, int gi)
{
    int o = -1;
    for (uint32_t i = 0; i < rt->ring->ngroups && o < 0; i++)
        if (rt->group_of[i] == gi)
            o = (int)i;
    TK_ASSERT(o >= 0);
    const struct tk_slot_group *g = &rt->ring->groups[o];
    char addrs[RT_ADDRS_TEXT_MAX];
    size_t at = 0;
    for (unsigned i = 0; i < g->naddrs; i++)
        at += (size_t)snprintf(addrs + at, sizeof addrs - at, "%s%s", i ? "," : "", g->addr[i]);
    char name[TK_SLOTS_NAME_MAX + 1];
    snprintf(name, sizeof name, "%s", g->name);
    pthread_mutex_unlock(&rt->mu);
    struct tk_client *c = NULL;
    int rc = cl_child_create(rt->seed, addrs, &c);
    if (rc != 0)
        cl_log(rt->seed, 0, "group %s (%s): no client: %s", name, addrs, tk_client_strerror(rc));
    pthread_mutex_lock(&rt->mu);
    if (c != NULL)
        rt->groups[gi].c = c;
}

/* Ends h with its W (mu held, dropped meanwhile). */
static void route_end(struct cl_route *rt, struct hop *h, bool cancelled)
{
    pthread_mutex_unlock(&rt->mu);
    hop_finish_w(h, cancelled);
    pthread_mutex_lock(&rt->mu);
}

/* One queued hop, under mu: ends it, sends it, or queues it again. */
static void route_one(struct cl_route *rt, struct hop *h, uint64_t now)
{
    if (h->cancel || now >= h->end_us) {
        route_end(rt, h, h->cancel);
        return;
    }
    int gi;
    struct tk_client *g = pick(rt, h->slot, &gi);
    if (g == NULL && gi >= 0) {
        make_group(rt, gi);
        g = rt->groups[gi].c;
    }
    /* No group for the slot (a W from a group without a ring while we
     * have none either, a slot no range covers, a group without a
     * client): the W stands. A W naming a ring we could not fetch goes
     * back to the same group after a pause, whose next W fetches again. */
    bool was_w = h->w.outcome == TK_CLIENT_WRONG_GROUP;
    if (g == NULL || (was_w && gi == -1 && h->w.ring_version == 0)) {
        route_end(rt, h, false);
        return;
    }
    if (g == h->at && was_w && h->due_us == 0) {
        /* The same group again (a move in progress): after a pause. */
        uint64_t due = now + (uint64_t)h->pause_ms * 1000u;
        h->pause_ms = TK_MIN(2 * h->pause_ms, RT_PAUSE_MAX_MS);
        if (due >= h->end_us)
            route_end(rt, h, false);
        else
            queue_push(rt, h, due);
        return;
    }
    if (was_w)
        atomic_fetch_add_explicit(&rt->st_rerouted, 1, memory_order_relaxed);
    if (hop_send(h, g) != 0) /* the group's client is full or stopping */
        route_end(rt, h, true);
}

static void *route_main(void *arg)
{
    struct cl_route *rt = arg;
    cl_on_client_thread = true;
    pthread_mutex_lock(&rt->mu);
    for (;;) {
        /* A W asks for the ring first: the hops go by the newest. */
        while (rt->fetch && !rt->stopping) {
            struct tk_client *from = rt->fetch_from;
            rt->fetch = false;
            pthread_mutex_unlock(&rt->mu);
            fetch_ring(rt, from);
            pthread_mutex_lock(&rt->mu);
        }
        uint64_t now = cl_now_us();
        struct hop *due = NULL, **pp = &rt->qhead;
        while (*pp != NULL) {
            struct hop *h = *pp;
            if (rt->stopping || h->cancel || h->due_us <= now) {
                *pp = h->qnext;
                h->queued = false;
                h->qnext = due;
                due = h;
            } else {
                pp = &h->qnext;
            }
        }
        while (due != NULL) {
            struct hop *h = due;
            due = h->qnext;
            if (rt->stopping) {
                pthread_mutex_unlock(&rt->mu);
                hop_finish_w(h, true);
                pthread_mutex_lock(&rt->mu);
            } else {
                route_one(rt, h, now);
            }
        }
        if (rt->stopping && rt->qhead == NULL)
            break;
        if (rt->fetch || rt->stopping)
            continue;
        uint64_t next = UINT64_MAX;
        for (struct hop *h = rt->qhead; h != NULL; h = h->qnext)
            next = TK_MIN(next, h->cancel ? 0 : h->due_us);
        now = cl_now_us();
        if (next <= now)
            continue;
        if (next == UINT64_MAX) {
            pthread_cond_wait(&rt->cv, &rt->mu);
        } else {
            /* The condition variable waits on CLOCK_REALTIME. */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            uint64_t ns = (uint64_t)ts.tv_nsec + (next - now) * 1000u;
            ts.tv_sec += (time_t)(ns / 1000000000u);
            ts.tv_nsec = (long)(ns % 1000000000u);
            pthread_cond_timedwait(&rt->cv, &rt->mu, &ts);
        }
    }
    pthread_mutex_unlock(&rt->mu);
    return NULL;
}

/* ---- stop, stats ----------------------------------------------------- */

void cl_route_stop(struct tk_client *seed)
{
    struct cl_route *rt = seed->route;
    if (rt == NULL)
        return;
    pthread_mutex_lock(&rt->mu);
    rt->stopping = true;
    pthread_cond_signal(&rt->cv);
    pthread_mutex_unlock(&rt->mu);
    if (rt->started)
        pthread_join(rt->thread, NULL);
    rt->started = false;
    /* The children stop as a client does (their releases keep their
     * deadline); a W answered meanwhile ends at once (hop_done). */
    for (uint32_t i = 0; i < rt->ngroups; i++)
        if (rt->groups[i].c != NULL && rt->groups[i].c != seed) {
            tk_client_destroy(rt->groups[i].c);
            rt->groups[i].c = NULL;
        }
}

void cl_route_free(struct tk_client *seed)
{
    struct cl_route *rt = seed->route;
    if (rt == NULL)
        return;
    TK_ASSERT(rt->live == NULL); /* every hop was answered before the seed stopped */
    pthread_mutex_destroy(&rt->mu);
    pthread_cond_destroy(&rt->cv);
    while (rt->spare != NULL) {
        struct hop *h = rt->spare;
        rt->spare = h->qnext;
        free(h);
    }
    free(rt->ring);
    free(rt->parsed);
    free(rt->body);
    free(rt);
    seed->route = NULL;
}

void cl_route_stats(struct tk_client *seed, struct tk_client_stats *out)
{
    struct cl_route *rt = seed->route;
    struct tk_client *kids[TK_SLOTS_GROUPS_MAX];
    uint32_t n = 0, groups = 1;
    pthread_mutex_lock(&rt->mu);
    for (uint32_t i = 0; i < rt->ngroups; i++)
        if (rt->groups[i].c != NULL && rt->groups[i].c != seed)
            kids[n++] = rt->groups[i].c;
    /* Sum under mu: a child is destroyed only after the routing stops,
     * and stats are not asked during tk_client_destroy(). */
    for (uint32_t i = 0; i < n; i++) {
        struct tk_client_stats k;
        tk_client_stats(kids[i], &k);
        out->connections += k.connections;
        out->connections_ready += k.connections_ready;
        out->connect_attempts += k.connect_attempts;
        out->handshakes += k.handshakes;
        out->auth_failures += k.auth_failures;
        out->moved += k.moved;
        out->requests_written += k.requests_written;
        out->requests_in_progress += k.requests_in_progress;
        out->releases_queued += k.releases_queued;
        out->compensations += k.compensations;
        out->compensations_dropped += k.compensations_dropped;
        out->indeterminate += k.indeterminate;
        groups++;
    }
    /* Hops waiting for the routing thread are in progress too. */
    for (struct hop *h = rt->qhead; h != NULL; h = h->qnext)
        *(h->type == 'R' ? &out->releases_queued : &out->requests_in_progress) += 1;
    pthread_mutex_unlock(&rt->mu);
    out->groups = groups;
    out->ring_version = atomic_load(&rt->st_version);
    out->rerouted = atomic_load(&rt->st_rerouted);
}
