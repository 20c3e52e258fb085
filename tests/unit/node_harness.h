/* One node's pure layers together, for the unit tests of test_node.c and
 * test_moves.c: a Raft driver (raft/driver.h) and its shards
 * (shard/shard.h) joined by FIFO queues the test pumps by hand, the way
 * the server's rings join its threads. Standalone (one voter), so every
 * entry commits as soon as it is proposed. Functions are static inline:
 * each test file uses what it needs. */
#ifndef TK_TESTS_NODE_HARNESS_H
#define TK_TESTS_NODE_HARNESS_H

#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/slots.h"
#include "core/snap.h"
#include "raft/driver.h"
#include "shard/shard.h"

#define NSHARDS 3
#define QMAX 4096
#define T0 UINT64_C(1000000000)
#define WALL UINT64_C(1800000000000000)

struct qmsg {
    uint32_t src, kind, len;
    uint8_t data[TK_MSG_ENCODED_MAX];
};

struct queue {
    struct qmsg *m;
    uint32_t head, len;
};

struct node;
struct ctx {
    struct node *n;
    uint32_t idx; /* shard index, or TK_MSG_TO_DRIVER */
};

struct answer {
    uint64_t client, id, token;
    char type;
};

struct node {
    struct tk_driver *d;
    struct tk_shard *sh[NSHARDS];
    struct ctx cx[NSHARDS + 1];
    struct queue to_shard[NSHARDS]; /* from the driver and other shards */
    struct queue to_driver;
    uint64_t now, wall;
    bool hold_snap_req; /* keep SNAP_REQ in the shards' queues */
    struct answer ans[QMAX];
    uint32_t nans;
};

static inline void q_push(struct queue *q, uint32_t src, uint32_t kind, uint32_t len, void **room)
{
    cr_assert_lt(q->len, QMAX);
    struct qmsg *m = &q->m[(q->head + q->len++) % QMAX];
    m->src = src;
    m->kind = kind;
    m->len = len;
    *room = m->data;
}

static inline void *put(void *c, uint32_t dst, uint32_t kind, uint32_t len)
{
    struct ctx *cx = c;
    void *room;
    if (dst == TK_MSG_TO_DRIVER)
        q_push(&cx->n->to_driver, cx->idx, kind, len, &room);
    else
        q_push(&cx->n->to_shard[dst], cx->idx, kind, len, &room);
    return room;
}

static inline void on_reply(void *c, const struct tk_msg_reply *r)
{
    struct node *n = ((struct ctx *)c)->n;
    n->ans[n->nans++] = (struct answer){r->client, r->id, r->token, r->type};
}

static inline void on_refuse(void *c, uint64_t client, uint64_t id, uint8_t reason)
{
    struct node *n = ((struct ctx *)c)->n;
    n->ans[n->nans++] = (struct answer){client, id, 0, reason == TK_REFUSE_MOVED ? 'M' : 'X'};
}

static inline void on_role(void *c, bool lead, const char *addr)
{
    (void)c;
    (void)lead;
    (void)addr;
}

static inline void on_send(void *c, const struct tk_wire_frame *f, const char *addr)
{
    (void)c;
    (void)f;
    (void)addr;
    cr_assert_fail("a standalone node sends nothing");
}

/* The driver's answer to a peer frame (an operator's SLOTS). */
static struct tk_raft_msg last_reply;
static char last_why[TK_RAFT_SLOTS_WHY_MAX + 1];

static inline void on_peer_reply(void *c, uint64_t link, struct tk_wire_frame *f)
{
    (void)c;
    cr_assert_eq(link, 5, "answered on the link the request came in on");
    last_reply = f->msg;
    snprintf(last_why, sizeof(last_why), "%.*s", (int)f->msg.slots_reply.why.len,
             f->msg.slots_reply.why.p ? f->msg.slots_reply.why.p : "");
}

static inline void on_fatal(void *c, const char *why)
{
    (void)c;
    cr_assert_fail("fatal: %s", why);
}

/* keys_total: the server's --max-keys, shared among the shards and sized
 * for in the driver as the server does. */
/* A forced new domain's entry 1 (serve_after_us) and the driver's
 * --max-clock-drift-ms. */
struct forced {
    uint64_t serve_after_us, drift_us;
    const char *group;       /* --group, or NULL */
    uint64_t wall_behind_us; /* the wall clock (and first token) this far behind WALL */
};

static inline void node_init_forced(struct node *n,
                                    uint64_t log_entries_max,
                                    uint64_t keys_total,
                                    const struct forced *f)
{
    memset(n, 0, sizeof(*n));
    n->now = T0;
    n->wall = WALL - (f ? f->wall_behind_us : 0);
    for (uint32_t i = 0; i < NSHARDS; i++)
        n->to_shard[i].m = calloc(QMAX, sizeof(struct qmsg));
    n->to_driver.m = calloc(QMAX, sizeof(struct qmsg));
    uint64_t keys_share = tk_shard_share(keys_total, NSHARDS);
    struct tk_driver_options o = {.nshards = NSHARDS,
                                  .proposals_max = tk_driver_proposals_for(keys_share, NSHARDS)};
    tk_raft_options_default(&o.raft, 7, 42);
    o.raft.log_entries_max = log_entries_max;
    o.raft.snapshot_entries = TK_MAX(log_entries_max / 4, 2);
    o.raft.snapshot_trailing = 1;
    strcpy(o.advertise, "127.0.0.1:7000");
    if (f)
        o.drift_us = f->drift_us;
    if (f && f->group)
        snprintf(o.group, sizeof(o.group), "%s", f->group);
    n->cx[NSHARDS] = (struct ctx){n, TK_MSG_TO_DRIVER};
    struct tk_msg_out dout = {.ctx = &n->cx[NSHARDS], .put = put};
    struct tk_driver_io io = {.ctx = n, .send = on_send, .reply = on_peer_reply, .fatal = on_fatal};
    n->d = tk_driver_create(&o, &dout, &io);
    cr_assert_not_null(n->d);
    for (uint32_t i = 0; i < NSHARDS; i++) {
        n->cx[i] = (struct ctx){n, i};
        struct tk_shard_options so = {
            .idx = i,
            .nshards = NSHARDS,
            .limits = {.keys_max = keys_share, .waiters_per_key_max = 64, .waiters_max = 10000},
            .requests_max = 10000,
            .grouped = f && f->group};
        struct tk_msg_out out = {.ctx = &n->cx[i], .put = put};
        struct tk_shard_client cl = {
            .ctx = &n->cx[i], .reply = on_reply, .refuse = on_refuse, .role = on_role};
        n->sh[i] = tk_shard_create(&so, &out, &cl);
        cr_assert_not_null(n->sh[i]);
    }
    tk_driver_clock(n->d, n->now, n->wall);
    struct tk_raft_config c = {
        .domain_lo = 1, .domain_hi = 2, .n = 1, .serve_after_us = f ? f->serve_after_us : 0};
    c.m[0] = (struct tk_raft_member){.id = 7, .role = TK_RAFT_VOTER};
    strcpy(c.m[0].peer_addr, "127.0.0.1:7100");
    strcpy(c.m[0].client_addr, "127.0.0.1:7000");
    cr_assert_eq(tk_driver_bootstrap(n->d, &c, 0), TK_OK);
}

static inline void node_init_keys(struct node *n, uint64_t log_entries_max, uint64_t keys_total)
{
    node_init_forced(n, log_entries_max, keys_total, NULL);
}

static inline void node_init(struct node *n, uint64_t log_entries_max)
{
    node_init_keys(n, log_entries_max, 30000);
}

static inline void node_free(struct node *n)
{
    for (uint32_t i = 0; i < NSHARDS; i++) {
        tk_shard_destroy(n->sh[i]);
        free(n->to_shard[i].m);
    }
    tk_driver_destroy(n->d);
    free(n->to_driver.m);
}

/* One round: every shard reads its queue (SNAP_REQ held back if asked),
 * ends its round; the driver reads its queue and ends its round. Returns
 * the messages handled. */
static inline uint32_t node_round(struct node *n)
{
    uint32_t handled = 0;
    for (uint32_t i = 0; i < NSHARDS; i++) {
        struct queue *q = &n->to_shard[i];
        while (q->len > 0) {
            struct qmsg *m = &q->m[q->head];
            if (n->hold_snap_req && m->kind == TK_MSG_SNAP_REQ)
                break; /* FIFO: nothing behind it is read either */
            tk_shard_message(n->sh[i], n->now, m->src, m->kind, m->data, m->len);
            q->head = (q->head + 1) % QMAX;
            q->len--;
            handled++;
        }
        tk_shard_tick(n->sh[i], n->now);
        tk_shard_flush(n->sh[i]);
    }
    tk_driver_clock(n->d, n->now, n->wall);
    tk_driver_tick(n->d);
    struct queue *q = &n->to_driver;
    while (q->len > 0) {
        struct qmsg *m = &q->m[q->head];
        tk_driver_message(n->d, m->src, m->kind, m->data, m->len);
        q->head = (q->head + 1) % QMAX;
        q->len--;
        handled++;
    }
    tk_driver_flush(n->d);
    return handled;
}

static inline void node_settle(struct node *n)
{
    for (int i = 0; i < 100 && node_round(n) > 0; i++)
        ;
}

/* A request of client (shard, 1, 1): an acquire with a 10 s lease waits
 * wait_ms; a release names token. */
static inline void request_ex(struct node *n,
                              uint32_t shard,
                              char type,
                              const char *key,
                              uint64_t id,
                              uint64_t token,
                              uint32_t wait_ms)
{
    struct tk_msg_req q = {
        .client = tk_client_ref(shard, 1, 1),
        .id = id,
        .type = type,
        .key = key,
        .key_len = (uint8_t)strlen(key),
        .owner = "alice",
        .owner_len = 5,
        .lease_ms = 10000,
        .wait_ms = wait_ms,
        .token = token,
    };
    tk_shard_request(n->sh[shard], n->now, &q);
}

static inline void request(struct node *n, uint32_t shard, char type, const char *key, uint64_t id)
{
    request_ex(n, shard, type, key, id, 0, 0);
}

static inline const struct answer *answer_of(const struct node *n, uint64_t id)
{
    for (uint32_t i = 0; i < n->nans; i++)
        if (n->ans[i].id == id)
            return &n->ans[i];
    return NULL;
}

static inline void node_run_ms(struct node *n, uint64_t ms)
{
    for (uint64_t i = 0; i < ms / 10; i++) {
        n->now += 10000;
        n->wall += 10000;
        node_round(n);
    }
}

/* An operator's SLOTS frame: op with a ring file's text (NULL: none),
 * the range, the other group and the counter. Answered at once. */
static inline uint8_t give_step(struct node *n,
                                uint8_t op,
                                const char *group,
                                const char *text,
                                uint16_t first,
                                uint16_t last,
                                const char *peer,
                                uint64_t counter)
{
    static struct tk_slot_ring r;
    static uint8_t enc[TK_SLOTS_ENCODED_MAX];
    size_t len = 0;
    if (text) {
        char why[256];
        cr_assert_eq(tk_slots_parse_file(text, strlen(text), &r, why, sizeof(why)), TK_OK, "%s",
                     why);
        len = tk_slots_encode(&r, enc, sizeof(enc));
        cr_assert_gt(len, 0);
    }
    struct tk_wire_frame f = {.msg = {.type = TK_RAFT_MSG_SLOTS, .from = 99}};
    f.msg.slots.group = (struct tk_raft_str){group, (uint16_t)strlen(group)};
    f.msg.slots.ring = enc;
    f.msg.slots.ring_len = (uint32_t)len;
    f.msg.slots.op = op;
    f.msg.slots.first = first;
    f.msg.slots.last = last;
    f.msg.slots.peer = (struct tk_raft_str){peer, (uint16_t)(peer ? strlen(peer) : 0)};
    f.msg.slots.counter = counter;
    memset(&last_reply, 0, sizeof(last_reply));
    tk_driver_peer_frame(n->d, 5, &f);
    cr_assert_eq(last_reply.type, TK_RAFT_MSG_SLOTS_REPLY, "answered at once");
    return last_reply.slots_reply.status;
}

static inline uint8_t give_ring(struct node *n, const char *group, const char *text)
{
    return give_step(n, TK_RAFT_SLOTS_RING, group, text, 0, 0, NULL, 0);
}

/* Given until it is no longer RETRY (the commit takes a round here). */
static inline uint8_t commit_ring(struct node *n, const char *group, const char *text)
{
    uint8_t st = give_ring(n, group, text);
    for (int i = 0; i < 10 && st == TK_RAFT_SLOTS_RETRY; i++) {
        node_settle(n);
        st = give_ring(n, group, text);
    }
    return st;
}

static inline uint32_t served(const struct tk_slot_view *v)
{
    uint32_t n = 0;
    for (uint32_t w = 0; w < TK_SLOTS_WORDS; w++)
        n += (uint32_t)__builtin_popcountll(v->serve[w]);
    return n;
}

static inline const char *key_in(uint32_t lo, uint32_t hi, char *buf, size_t cap)
{
    for (uint32_t i = 0;; i++) {
        snprintf(buf, cap, "show-%u", i);
        uint32_t s = tk_slot(buf, strlen(buf));
        if (s >= lo && s <= hi)
            return buf;
    }
}

#endif
