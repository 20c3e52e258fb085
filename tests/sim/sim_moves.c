/* Deterministic simulation of a slot move between two groups (SPEC 15):
 * two simulated clusters of three nodes (tests/support/sim_cluster.h: a
 * lossy, reordering network, elections, snapshots), every node running the
 * production Raft driver (raft/driver.h) and a shard (shard/shard.h) with
 * --group g0 or g1; clients that acquire and release keys of the moving
 * slots and of others, asking the group they believe owns the key and the
 * other one on W; and an operator that gives both groups their ring and
 * then moves slots 0-99 from g0 to g1 (freeze, hand-over, claim), asking
 * any member and following its answers, as ticketctl does.
 *
 * Faults, at random moments: the operator crashes (forgets where it was
 * and starts the move again from the freeze), a group's leader crashes
 * (at most one node per group, so each keeps a majority), a node is cut
 * off from its group for a while, messages are lost, duplicated and
 * reordered. Then everything heals and the move must finish.
 *
 * Checked along every run:
 *  - at most one client holds a key at any time, across both groups (a
 *    client holds from its G until it sends the release, or until its
 *    lease, counted from its send, runs out);
 *  - a key's tokens strictly increase in grant order, across the groups;
 *  - no slot is owned by both groups at their committed states (each
 *    group's ownership as its first member to apply an entry, or install
 *    a snapshot, found it);
 *  - no request is answered twice;
 *  - sim_cluster's Raft checks on both clusters;
 *  - liveness once healed: the move is done, g1 grants the moved keys and
 *    g0 answers W for them.
 *
 * Environment: TK_SEED=n replays one seed (verbose); TK_SIM_SEEDS=n seeds
 * (default 150), TK_SIM_FIRST=n the first one. A failure prints its seed
 * and aborts.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/msg.h"
#include "core/slots.h"
#include "raft/driver.h"
#include "raft/wire.h"
#include "shard/shard.h"
#include "tests/support/sim_cluster.h"

#define MS 1000ull
#define NG 2
#define NODES 3
#define KEYS 6 /* 4 of slots 0-99, 2 of g0's other slots */
#define CLIENTS 8
#define LEASE_MS 1000
#define WALL0 UINT64_C(1800000000000000)

static uint64_t current_seed;

struct qm {
    uint32_t kind, len;
    uint8_t *b;
};

struct q {
    struct qm *v;
    uint32_t head, n, cap;
};

struct world;

struct mnode {
    struct world *W;
    int g, slot;
    struct tk_driver *d;
    struct tk_shard *sh;
    struct q to_shard, to_driver;
};

struct client {
    int g;         /* the group it asks */
    uint64_t id;   /* the request awaiting an answer, 0: none */
    uint64_t seq;  /* the last request id used */
    char type;     /* its type */
    int key;       /* its key */
    uint64_t sent; /* when it was sent */
    uint64_t last_answered;
    uint64_t next; /* next action */
    bool holding;
    int hold_key, hold_g;
    uint64_t token, hold_until, lease_end;
};

struct key {
    char name[16];
    uint64_t last_token;
    int holder; /* the client whose window was opened last, -1: none */
};

struct gctx {
    struct world *W;
    int g;
};

struct world {
    struct sim_cluster c[NG];
    struct gctx gc[NG];
    struct mnode *n[NG][SIM_NODES_MAX];
    struct tk_prng prng;
    bool verbose;
    uint64_t now;
    struct client cl[CLIENTS];
    struct key k[KEYS];
    /* the operator */
    int step; /* 0, 1: the rings; 2 freeze, 3 hand-over, 4 claim, 5 done */
    int ask;  /* the member asked next */
    uint64_t op_next, counter;
    struct tk_raft_msg reply;
    bool replied;
    char why[TK_RAFT_SLOTS_WHY_MAX + 1];
    uint8_t ring[2][4096];
    size_t ring_len[2];
    /* faults */
    bool crashed[NG];
    int cut_g, cut_slot;
    uint64_t cut_until, fault_next;
    /* committed ownership, per group: as of its highest index applied anywhere */
    uint64_t owned_index[NG];
    uint64_t owned[NG][TK_SLOTS_WORDS];
    /* counts */
    uint64_t g_grants[NG], w_answers, op_crashes, leader_crashes, cuts, moved_grants;
};

#define CHECK(W, cond, ...)                    \
    do {                                       \
        if (!(cond))                           \
            sim_fail(&(W)->c[0], __VA_ARGS__); \
    } while (0)

static uint64_t rnd(struct world *W, uint64_t lo, uint64_t hi)
{
    return tk_prng_range(&W->prng, lo, hi);
}

/* ------------------------------------------------------------------ */
/* A node's threads: FIFO queues, delivered by pump()                   */

static void q_push(struct q *q, uint32_t kind, uint32_t len, uint8_t **room)
{
    if (q->head + q->n == q->cap) {
        if (q->head > 0) {
            memmove(q->v, q->v + q->head, q->n * sizeof(*q->v));
            q->head = 0;
        } else {
            q->cap = q->cap ? 2 * q->cap : 64;
            q->v = realloc(q->v, q->cap * sizeof(*q->v));
            TK_ASSERT(q->v != NULL);
        }
    }
    struct qm *m = &q->v[q->head + q->n++];
    m->kind = kind;
    m->len = len;
    m->b = malloc(len ? len : 1);
    TK_ASSERT(m->b != NULL);
    *room = m->b;
}

static bool q_pop(struct q *q, struct qm *out)
{
    if (q->n == 0)
        return false;
    *out = q->v[q->head++];
    q->n--;
    if (q->n == 0)
        q->head = 0;
    return true;
}

/* A message that dies in a queue gives back what it owns. */
static void q_drop(struct q *q)
{
    struct qm m;
    while (q_pop(q, &m)) {
        tk_msg_drop(m.kind, m.b, m.len);
        free(m.b);
    }
    free(q->v);
    q->v = NULL;
}

static void *put_driver(void *ctx, uint32_t dst, uint32_t kind, uint32_t len)
{
    struct mnode *N = ctx;
    TK_ASSERT(dst == 0);
    uint8_t *room;
    q_push(&N->to_shard, kind, len, &room);
    return room;
}

static void *put_shard(void *ctx, uint32_t dst, uint32_t kind, uint32_t len)
{
    struct mnode *N = ctx;
    TK_ASSERT(dst == TK_MSG_TO_DRIVER);
    uint8_t *room;
    q_push(&N->to_driver, kind, len, &room);
    return room;
}

static bool node_up(const struct mnode *N)
{
    const struct sim_node *s = &N->W->c[N->g].nodes[N->slot];
    return s->alive && !s->paused;
}

static uint64_t local(const struct mnode *N)
{
    return sim_local(&N->W->c[N->g], N->slot);
}

/* The node's threads run until nothing is queued between them. */
static void pump(struct mnode *N)
{
    if (!node_up(N))
        return;
    uint64_t t = local(N);
    for (int round = 0; round < 64; round++) {
        struct qm m;
        bool any = false;
        while (q_pop(&N->to_shard, &m)) {
            tk_shard_message(N->sh, t, TK_MSG_TO_DRIVER, m.kind, m.b, m.len);
            free(m.b);
            any = true;
        }
        tk_shard_tick(N->sh, t);
        tk_shard_flush(N->sh);
        tk_driver_clock(N->d, t, WALL0 + t);
        while (q_pop(&N->to_driver, &m)) {
            tk_driver_message(N->d, 0, m.kind, m.b, m.len);
            free(m.b);
            any = true;
        }
        tk_driver_flush(N->d);
        sim_sync(&N->W->c[N->g], N->slot);
        if (!any && N->to_shard.n == 0)
            return;
    }
}

static void pump_group(struct world *W, int g)
{
    for (uint32_t i = 0; i < W->c[g].n_nodes; i++)
        pump(W->n[g][i]);
}

/* ------------------------------------------------------------------ */
/* Committed ownership                                                  */

static void owned_update(struct world *W, struct mnode *N, uint64_t index)
{
    if (index <= W->owned_index[N->g])
        return;
    W->owned_index[N->g] = index;
    const char *group;
    const struct tk_slot_ring *r = tk_driver_ring(N->d, &group);
    char name[4];
    snprintf(name, sizeof(name), "g%d", N->g);
    if (r)
        tk_slots_owned(r, name, 2, W->owned[N->g]);
    else
        memset(W->owned[N->g], 0, sizeof(W->owned[N->g]));
    for (uint32_t w = 0; w < TK_SLOTS_WORDS; w++)
        CHECK(W, (W->owned[0][w] & W->owned[1][w]) == 0,
              "a slot of %u-%u is owned by both groups (g%d at index %llu)", w * 64, w * 64 + 63,
              N->g, (unsigned long long)index);
}

/* ------------------------------------------------------------------ */
/* The driver's and the shard's outputs                                 */

static void io_send(void *ctx, const struct tk_wire_frame *f, const char *addr)
{
    (void)addr;
    struct mnode *N = ctx;
    sim_send(&N->W->c[N->g], N->slot, &f->msg);
}

static void io_reply(void *ctx, uint64_t link, struct tk_wire_frame *f)
{
    (void)link;
    struct mnode *N = ctx;
    struct world *W = N->W;
    CHECK(W, f->msg.type == TK_RAFT_MSG_SLOTS_REPLY, "an answer to the operator of type %u",
          f->msg.type);
    W->reply = f->msg;
    W->replied = true;
    snprintf(W->why, sizeof(W->why), "%.*s", (int)f->msg.slots_reply.why.len,
             f->msg.slots_reply.why.p ? f->msg.slots_reply.why.p : "");
}

static void io_fatal(void *ctx, const char *why)
{
    struct mnode *N = ctx;
    sim_fail(&N->W->c[N->g], "g%d node %d driver: fatal: %s", N->g, N->slot, why);
}

static void io_applied(void *ctx, uint64_t index, const struct tk_raft_entry *e)
{
    (void)e;
    struct mnode *N = ctx;
    sim_applied(&N->W->c[N->g], N->slot, index);
    owned_update(N->W, N, index);
}

static void io_installed(void *ctx, uint64_t index, const uint8_t *blob, size_t len)
{
    (void)blob;
    (void)len;
    struct mnode *N = ctx;
    sim_installed(&N->W->c[N->g], N->slot, index);
    owned_update(N->W, N, index);
}

static void answer(struct world *W, int g, const struct tk_msg_reply *r);

static void sh_reply(void *ctx, const struct tk_msg_reply *r)
{
    struct mnode *N = ctx;
    answer(N->W, N->g, r);
}

static void sh_refuse(void *ctx, uint64_t client, uint64_t id, uint8_t reason)
{
    struct mnode *N = ctx;
    struct tk_msg_reply r = {
        .client = client, .id = id, .type = reason == TK_REFUSE_MOVED ? 'M' : 'X'};
    answer(N->W, N->g, &r);
}

static void sh_role(void *ctx, bool lead, const char *addr)
{
    (void)ctx;
    (void)lead;
    (void)addr;
}

/* ------------------------------------------------------------------ */
/* The clusters' hooks                                                  */

static struct tk_raft *hook_create(void *ctx, struct sim_node *n, const struct tk_raft_options *o)
{
    struct gctx *G = ctx;
    struct mnode *N = calloc(1, sizeof(*N));
    TK_ASSERT(N != NULL);
    N->W = G->W;
    N->g = G->g;
    N->slot = n->slot;
    G->W->n[G->g][n->slot] = N;
    struct tk_lock_limits lim = {.keys_max = 64, .waiters_per_key_max = 16, .waiters_max = 256};
    struct tk_driver_options dopt = {.nshards = 1, .raft = *o, .proposals_max = lim.keys_max + 1};
    snprintf(dopt.advertise, sizeof(dopt.advertise), "10.0.%d.%d:7400", G->g, n->addr);
    snprintf(dopt.group, sizeof(dopt.group), "g%d", G->g);
    struct tk_msg_out dout = {.ctx = N, .put = put_driver};
    struct tk_driver_io io = {.ctx = N,
                              .send = io_send,
                              .reply = io_reply,
                              .fatal = io_fatal,
                              .applied = io_applied,
                              .installed = io_installed};
    N->d = tk_driver_create(&dopt, &dout, &io);
    TK_ASSERT(N->d != NULL);
    struct tk_shard_options so = {
        .idx = 0, .nshards = 1, .limits = lim, .requests_max = 1024, .grouped = true};
    struct tk_msg_out sout = {.ctx = N, .put = put_shard};
    struct tk_shard_client cl = {.ctx = N, .reply = sh_reply, .refuse = sh_refuse, .role = sh_role};
    N->sh = tk_shard_create(&so, &sout, &cl);
    TK_ASSERT(N->sh != NULL);
    return tk_driver_core(N->d);
}

static void hook_destroy(void *ctx, struct sim_node *n)
{
    struct gctx *G = ctx;
    struct mnode *N = G->W->n[G->g][n->slot];
    q_drop(&N->to_shard);
    q_drop(&N->to_driver);
    tk_shard_destroy(N->sh);
    tk_driver_destroy(N->d);
    free(N);
    G->W->n[G->g][n->slot] = NULL;
}

static void hook_process(void *ctx, struct sim_node *n, int rc, struct tk_raft_update *up)
{
    struct gctx *G = ctx;
    struct mnode *N = G->W->n[G->g][n->slot];
    uint64_t t = local(N);
    tk_driver_clock(N->d, t, WALL0 + t);
    tk_driver_process(N->d, rc, up);
}

/* ------------------------------------------------------------------ */
/* Clients                                                              */

static struct mnode *leader_of(struct world *W, int g)
{
    int l = sim_leader(&W->c[g]);
    if (l < 0 || !tk_driver_serving(W->n[g][l]->d) || !node_up(W->n[g][l]))
        return NULL;
    return W->n[g][l];
}

static void send_req(struct world *W, int ci, struct mnode *N, char type, int key, uint64_t token)
{
    struct client *c = &W->cl[ci];
    char owner[8];
    snprintf(owner, sizeof(owner), "c%d", ci);
    c->id = ++c->seq;
    c->type = type;
    c->key = key;
    c->sent = W->now;
    struct tk_msg_req q = {.client = tk_client_ref(0, (uint32_t)ci + 1, 1),
                           .id = c->id,
                           .type = type,
                           .key = W->k[key].name,
                           .key_len = (uint8_t)strlen(W->k[key].name),
                           .owner = owner,
                           .owner_len = (uint8_t)strlen(owner),
                           .lease_ms = LEASE_MS,
                           .wait_ms = (uint32_t)rnd(W, 0, 150),
                           .token = token,
                           .arrived_us = local(N)};
    if (W->verbose)
        fprintf(stderr, "t=%llu client %d: %c %llu %s to g%d node %d\n", (unsigned long long)W->now,
                ci, type, (unsigned long long)c->id, q.key, N->g, N->slot);
    tk_shard_request(N->sh, local(N), &q);
    pump(N);
}

/* A key's window closes when its holder sends the release or its lease
 * (from its send) runs out. */
static bool window_open(const struct world *W, int key)
{
    int h = W->k[key].holder;
    if (h < 0)
        return false;
    const struct client *c = &W->cl[h];
    return c->holding && c->hold_key == key && W->now < c->lease_end;
}

static void answer(struct world *W, int g, const struct tk_msg_reply *r)
{
    int ci = (int)tk_client_slot(r->client) - 1;
    CHECK(W, ci >= 0 && ci < CLIENTS, "a reply to client ref %llx", (unsigned long long)r->client);
    struct client *c = &W->cl[ci];
    if (W->verbose)
        fprintf(stderr, "t=%llu client %d: %c %llu from g%d (token %llu)\n",
                (unsigned long long)W->now, ci, r->type, (unsigned long long)r->id, g,
                (unsigned long long)r->token);
    CHECK(W, r->id != c->last_answered, "client %d: request %llu answered twice (%c)", ci,
          (unsigned long long)r->id, r->type);
    c->last_answered = r->id;
    if (r->type == 'G') {
        struct key *k = &W->k[c->key];
        CHECK(W, r->token > k->last_token, "key %s: token %llu from g%d after %llu", k->name,
              (unsigned long long)r->token, g, (unsigned long long)k->last_token);
        k->last_token = r->token;
    }
    if (r->id != c->id)
        return; /* given up on (its node was cut off): a late answer, never entered */
    c->id = 0;
    c->next = W->now + rnd(W, 1 * MS, 20 * MS);
    switch (r->type) {
        case 'G': {
            struct key *k = &W->k[c->key];
            CHECK(W, !window_open(W, c->key),
                  "key %s granted to client %d by g%d while client %d holds it", k->name, ci, g,
                  k->holder);
            k->holder = ci;
            c->holding = true;
            c->hold_key = c->key;
            c->hold_g = g;
            c->token = r->token;
            c->lease_end = c->sent + LEASE_MS * MS;
            c->hold_until = TK_MIN(W->now + rnd(W, 5 * MS, 80 * MS), c->lease_end - 30 * MS);
            W->g_grants[g]++;
            if (tk_slot(k->name, strlen(k->name)) <= 99 && g == 1)
                W->moved_grants++;
            break;
        }
        case 'W':
            W->w_answers++;
            if (c->type == 'A')
                c->g = 1 - g; /* nothing was done: ask the other group */
            break;
        default: /* T B R N M: nothing held */
            break;
    }
}

static void client_act(struct world *W, int ci)
{
    struct client *c = &W->cl[ci];
    if (c->id != 0) {
        if (W->now - c->sent < 1500 * MS)
            return;
        c->id = 0; /* give up: the outcome is unknown, nothing is assumed held */
    }
    if (c->holding && W->now >= c->hold_until) {
        c->holding = false; /* the window closes as the release is sent */
        struct mnode *N = leader_of(W, c->hold_g);
        if (N)
            send_req(W, ci, N, 'R', c->hold_key, c->token);
        c->next = W->now + rnd(W, 1 * MS, 20 * MS);
        return;
    }
    if (c->holding)
        return;
    struct mnode *N = leader_of(W, c->g);
    if (!N) {
        c->next = W->now + 20 * MS;
        return;
    }
    send_req(W, ci, N, 'A', (int)rnd(W, 0, KEYS - 1), 0);
}

/* ------------------------------------------------------------------ */
/* The operator                                                         */

static void ring_text(char *buf, size_t cap, bool moved)
{
    if (moved)
        snprintf(buf, cap,
                 "version 2\n0-99=g1@10.0.1.1:7400\n100-8191=g0@10.0.0.1:7400\n"
                 "8192-16383=g1@10.0.1.1:7400\n");
    else
        snprintf(buf, cap, "version 1\n0-8191=g0@10.0.0.1:7400\n8192-16383=g1@10.0.1.1:7400\n");
}

static void operator_act(struct world *W)
{
    static const uint8_t ops[] = {TK_RAFT_SLOTS_RING, TK_RAFT_SLOTS_RING, TK_RAFT_SLOTS_FREEZE,
                                  TK_RAFT_SLOTS_HANDOVER, TK_RAFT_SLOTS_CLAIM};
    if (W->step >= 5) {
        W->op_next = UINT64_MAX;
        return;
    }
    if (W->step >= 2 && rnd(W, 0, 99) < 10) {
        /* The operator crashes: run again, the move starts over. */
        W->step = 2;
        W->counter = 0;
        W->op_crashes++;
    }
    int g = W->step == 0 ? 0 : W->step == 1 ? 1 : W->step == 4 ? 1 : 0;
    struct mnode *N = W->n[g][W->ask % NODES];
    W->op_next = W->now + rnd(W, 10 * MS, 200 * MS);
    if (!node_up(N)) {
        W->ask++;
        return;
    }
    uint8_t op = ops[W->step];
    int r = op == TK_RAFT_SLOTS_RING ? 0 : 1;
    char name[4], other[4];
    snprintf(name, sizeof(name), "g%d", g);
    snprintf(other, sizeof(other), "g%d", 1 - g);
    struct tk_wire_frame f = {.msg = {.type = TK_RAFT_MSG_SLOTS, .from = 99}};
    f.msg.slots.group = (struct tk_raft_str){name, 2};
    f.msg.slots.op = op;
    f.msg.slots.ring = W->ring[r];
    f.msg.slots.ring_len = op == TK_RAFT_SLOTS_FREEZE ? 0 : (uint32_t)W->ring_len[r];
    f.msg.slots.first = 0;
    f.msg.slots.last = op == TK_RAFT_SLOTS_RING ? 0 : 99;
    if (op != TK_RAFT_SLOTS_RING)
        f.msg.slots.peer = (struct tk_raft_str){other, 2};
    f.msg.slots.counter = op == TK_RAFT_SLOTS_CLAIM ? W->counter : 0;
    W->replied = false;
    tk_driver_peer_frame(N->d, 1, &f);
    CHECK(W, W->replied, "the operator's step %d was not answered", W->step);
    pump(N);
    switch (W->reply.slots_reply.status) {
        case TK_RAFT_SLOTS_OK:
            if (op == TK_RAFT_SLOTS_HANDOVER) {
                CHECK(W, W->reply.slots_reply.counter > 0, "a hand-over without a counter");
                W->counter = W->reply.slots_reply.counter;
            }
            if (W->verbose)
                fprintf(stderr, "t=%llu operator: step %d done at g%d node %d (%s)\n",
                        (unsigned long long)W->now, W->step, g, N->slot, W->why);
            W->step++;
            if (W->step == 2) /* the move starts at some moment of the faults */
                W->op_next = W->now + rnd(W, 100 * MS, 2500 * MS);
            break;
        case TK_RAFT_SLOTS_NOT_LEADER:
            W->ask++;
            break;
        case TK_RAFT_SLOTS_RETRY:
            break;
        default:
            sim_fail(&W->c[g], "the operator's step %d was refused by g%d: %s", W->step, g, W->why);
    }
}

/* ------------------------------------------------------------------ */
/* Faults                                                               */

static void fault(struct world *W)
{
    W->fault_next = W->now + rnd(W, 50 * MS, 300 * MS);
    int g = (int)rnd(W, 0, NG - 1);
    uint64_t pick = rnd(W, 0, 9);
    if (pick < 2 && !W->crashed[g] && W->cut_g != g) {
        int l = sim_leader(&W->c[g]);
        if (l >= 0) {
            sim_crash(&W->c[g], l);
            W->crashed[g] = true;
            W->leader_crashes++;
            if (W->verbose)
                fprintf(stderr, "t=%llu g%d: leader %d crashes\n", (unsigned long long)W->now, g,
                        l);
        }
    } else if (pick < 5 && W->cut_g < 0 && !W->crashed[g]) {
        W->cut_g = g;
        W->cut_slot = (int)rnd(W, 0, NODES - 1);
        W->cut_until = W->now + rnd(W, 100 * MS, 800 * MS);
        sim_isolate(&W->c[g], W->cut_slot, true);
        W->cuts++;
    }
}

static void heal_cut(struct world *W)
{
    if (W->cut_g >= 0)
        sim_isolate(&W->c[W->cut_g], W->cut_slot, false);
    W->cut_g = -1;
    W->cut_until = UINT64_MAX;
}

/* ------------------------------------------------------------------ */
/* Running                                                              */

static void setup(struct world *W, uint64_t seed, bool verbose)
{
    memset(W, 0, sizeof(*W));
    W->verbose = verbose;
    tk_prng_seed(&W->prng, seed * 0x9E3779B97F4A7C15ull + 1);
    W->cut_g = -1;
    W->cut_until = UINT64_MAX;
    for (int g = 0; g < NG; g++) {
        struct sim_options o;
        sim_options_default(&o, seed * 2 + (uint64_t)g);
        o.check_every = 16;
        o.drop_ppm = (uint32_t)rnd(W, 0, 20000);
        o.dup_ppm = (uint32_t)rnd(W, 0, 10000);
        o.raft.snapshot_entries = rnd(W, 16, 64);
        sim_init(&W->c[g], &o, 0);
        W->gc[g] = (struct gctx){W, g};
        W->c[g].hooks = (struct sim_hooks){.ctx = &W->gc[g],
                                           .create = hook_create,
                                           .destroy = hook_destroy,
                                           .process = hook_process};
        for (int i = 0; i < NODES; i++)
            sim_add_node(&W->c[g]);
        sim_bootstrap(&W->c[g], 0);
    }
    for (int r = 0; r < 2; r++) {
        char text[512], why[128];
        struct tk_slot_ring *ring = malloc(sizeof(*ring));
        TK_ASSERT(ring != NULL);
        ring_text(text, sizeof(text), r == 1);
        TK_ASSERT(tk_slots_parse_file(text, strlen(text), ring, why, sizeof(why)) == TK_OK);
        W->ring_len[r] = tk_slots_encode(ring, W->ring[r], sizeof(W->ring[r]));
        TK_ASSERT(W->ring_len[r] > 0);
        free(ring);
    }
    for (int i = 0; i < KEYS; i++) {
        struct key *k = &W->k[i];
        k->holder = -1;
        /* keys 0-3 in slots 0-99, 4-5 in 100-8191 */
        for (uint32_t j = 0;; j++) {
            snprintf(k->name, sizeof(k->name), "s%d-%u", i, j);
            uint32_t s = tk_slot(k->name, strlen(k->name));
            if (i < 4 ? s <= 99 : (s >= 100 && s <= 8191))
                break;
        }
    }
    W->now = W->c[0].now;
    W->op_next = W->now + 300 * MS;
    W->fault_next = W->now + 600 * MS;
    for (int i = 0; i < CLIENTS; i++)
        W->cl[i].next = W->now + 400 * MS + rnd(W, 0, 50 * MS);
}

/* Both clusters to time t, each node's threads after each event. */
static void advance(struct world *W, uint64_t t)
{
    for (int g = 0; g < NG; g++) {
        while (sim_step(&W->c[g], t))
            pump_group(W, g);
        pump_group(W, g);
    }
    W->now = t;
}

static void run(struct world *W, uint64_t faulty_us, uint64_t calm_us)
{
    uint64_t end_faults = W->now + faulty_us, end = end_faults + calm_us;
    bool healed = false;
    while (W->now < end) {
        uint64_t t = TK_MIN(W->now + 5 * MS, TK_MAX(W->op_next, W->now + 1));
        advance(W, t);
        if (!healed && W->now >= end_faults) {
            heal_cut(W);
            for (int g = 0; g < NG; g++)
                sim_heal(&W->c[g]);
            healed = true;
        }
        if (W->now >= W->cut_until)
            heal_cut(W);
        if (!healed && W->now >= W->fault_next)
            fault(W);
        if (W->now >= W->op_next)
            operator_act(W);
        for (int i = 0; i < CLIENTS; i++)
            if (W->now >= W->cl[i].next)
                client_act(W, i);
    }
}

static void finish(struct world *W)
{
    CHECK(W, W->step == 5, "the move did not finish once healed (step %d: %s)", W->step, W->why);
    CHECK(W, W->moved_grants > 0, "g1 never granted a moved key");
    /* g0 answers W for a moved key; g1 grants it. */
    struct mnode *L0 = leader_of(W, 0), *L1 = leader_of(W, 1);
    CHECK(W, L0 && L1, "no serving leader once healed");
    const char *group;
    const struct tk_slot_ring *r = tk_driver_ring(L0->d, &group);
    CHECK(W, r && r->version == 2, "g0's leader has not ring version 2");
    for (int g = 0; g < NG; g++)
        sim_check_all(&W->c[g]);
}

static void free_world(struct world *W)
{
    for (int g = 0; g < NG; g++)
        sim_free(&W->c[g]);
}

static uint64_t env_u64(const char *name, uint64_t dflt)
{
    const char *v = getenv(name);
    return v && *v ? strtoull(v, NULL, 10) : dflt;
}

static void on_abort(int sig)
{
    (void)sig;
    fprintf(stderr, "sim_moves: failed at seed %llu (replay: TK_SEED=%llu)\n",
            (unsigned long long)current_seed, (unsigned long long)current_seed);
    signal(SIGABRT, SIG_DFL);
    abort();
}

int main(void)
{
    signal(SIGABRT, on_abort);
    struct world *W = calloc(1, sizeof(*W));
    TK_ASSERT(W != NULL);
    const char *one = getenv("TK_SEED");
    uint64_t first = one ? strtoull(one, NULL, 10) : env_u64("TK_SIM_FIRST", 1);
    uint64_t count = one ? 1 : env_u64("TK_SIM_SEEDS", 150);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    uint64_t tot[7] = {0};
    for (uint64_t seed = first; seed < first + count; seed++) {
        current_seed = seed;
        setup(W, seed, one != NULL);
        run(W, 4000 * MS, 4000 * MS);
        finish(W);
        uint64_t v[7] = {W->g_grants[0], W->g_grants[1],    W->moved_grants, W->w_answers,
                         W->op_crashes,  W->leader_crashes, W->cuts};
        for (int i = 0; i < 7; i++)
            tot[i] += v[i];
        free_world(W);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    printf(
        "sim_moves: %llu seeds passed in %.1f s: %llu grants by g0, %llu by g1 (%llu of moved "
        "keys), %llu W answers, %llu operator crashes, %llu leader crashes, %llu cuts\n",
        (unsigned long long)count, secs, (unsigned long long)tot[0], (unsigned long long)tot[1],
        (unsigned long long)tot[2], (unsigned long long)tot[3], (unsigned long long)tot[4],
        (unsigned long long)tot[5], (unsigned long long)tot[6]);
    free(W);
    return 0;
}
