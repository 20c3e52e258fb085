/* The node-level simulation (see sim_node.h): node processes made of the
 * production driver and shards, their thread queues, clients, and the
 * lock-model checks. */
#include "tests/support/sim_node.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/snap.h"

#define MS 1000ull
#define SEC 1000000ull
/* The Raft thread runs a round at least this often (net/raftd.c). */
#define DRIVER_ROUND_US 50000u
/* Client socket events, beside the tk_msg kinds in a shard's socket queue. */
enum { SOCK_CONNECT = 1000, SOCK_REQ, SOCK_CLOSE };
enum { CL_DISC, CL_CONNECTING, CL_READY };
enum { REQ_PENDING, REQ_DONE, REQ_LOST };

#define CHECK(S, cond, ...)                \
    do {                                   \
        if (!(cond))                       \
            sim_fail((S)->c, __VA_ARGS__); \
    } while (0)

static void *xrealloc(void *p, size_t n)
{
    p = realloc(p, n ? n : 1);
    if (p == NULL) {
        fprintf(stderr, "sim_node: out of memory\n");
        abort();
    }
    return p;
}

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (p == NULL) {
        fprintf(stderr, "sim_node: out of memory\n");
        abort();
    }
    return p;
}

#define GROW(arr, n, cap)                                            \
    do {                                                             \
        if ((n) == (cap)) {                                          \
            (cap) = (cap) ? (cap)*2 : 16;                            \
            (arr) = xrealloc((arr), (size_t)(cap) * sizeof(*(arr))); \
        }                                                            \
    } while (0)

/* ------------------------------------------------------------------ */
/* Types                                                               */

/* A message between two threads of a node, or a client socket event. */
struct qmsg {
    uint64_t ready; /* cluster time it can be read */
    uint32_t kind, len;
    uint64_t a, b; /* socket events: client and gen, or request id */
    uint8_t *bytes;
};

struct queue {
    struct qmsg *v;
    uint32_t head, n, cap;
    uint64_t last_ready;
};

/* One committed state of a key: what the command at `index` made it. */
struct kstate {
    uint64_t index;
    uint64_t token; /* 0: free */
    uint64_t old_token;
    uint64_t commit_us;  /* first apply anywhere (the commit) */
    uint64_t visible_us; /* first moment a leading shard had it */
    int32_t owner;       /* client, -1 when free */
    uint32_t lease_ms;
    uint8_t type, expired;
};

struct skey {
    struct kstate *v;
    uint32_t n, cap;
    char name[12];
    /* The client holding it by its lease clock (the last G). */
    bool held;
    int holder;
    uint64_t hold_token;
    int hold_node;     /* its clock, unless client_true_clock */
    uint64_t hold_end; /* on that clock (or the true one) */
};

struct sim_req {
    int client;
    uint32_t gen;
    int node;
    uint32_t shard; /* the client's (its connection's) */
    char type;
    uint32_t key;
    uint64_t token;
    uint32_t lease_ms, wait_ms;
    uint64_t sent_us, sent_local;
    uint64_t arrival, arr_epoch; /* at the shard owning the key */
    int arr_node;
    uint8_t state;
};

struct hold {
    uint32_t key;
    uint64_t token;
};

struct client {
    int id;
    char owner[8];
    uint8_t owner_len;
    uint8_t state;
    int node;
    uint32_t shard, gen;
    uint64_t since;
    int hint;          /* node an M pointed to, -1 */
    uint64_t grace_us; /* gives up on a connection whose answer is this late */
    uint64_t *out;     /* requests in flight on the current connection */
    uint32_t n_out, cap_out;
    struct hold *holds;
    uint32_t n_holds, cap_holds;
};

struct thr {
    struct sim_proc *P;
    uint32_t idx; /* shard, or nshards for the driver */
};

struct early {
    uint64_t req, epoch;
};

/* One node process: a driver, its shards, the queues between them. */
struct sim_proc {
    struct sim_nodes *S;
    int slot;
    bool dead;
    uint32_t nshards;
    struct tk_driver *d;
    struct tk_shard *sh[SIM_SHARDS_MAX];
    struct thr thr[SIM_SHARDS_MAX + 1];
    /* q[dst][src]; q[i][i] is shard i's client sockets. */
    struct queue q[SIM_SHARDS_MAX + 1][SIM_SHARDS_MAX + 1];
    uint64_t wake[SIM_SHARDS_MAX + 1];
    uint64_t poke[SIM_SHARDS_MAX + 1];
    uint64_t stalled[SIM_SHARDS_MAX + 1];
    uint64_t wake_min;
    uint64_t driver_round_local;
    uint64_t epoch[SIM_SHARDS_MAX];
    char leader_addr[SIM_SHARDS_MAX][TK_MSG_ADDR_MAX];
    uint32_t *wgen[SIM_SHARDS_MAX]; /* per client: open connection gen as the worker sees it */
    struct early *early[SIM_SHARDS_MAX];
    uint32_t n_early[SIM_SHARDS_MAX], cap_early[SIM_SHARDS_MAX];
    /* Per key: the state its shard applied, lease due on this clock, last G. */
    uint32_t *pos;
    uint64_t *due_local;
    uint64_t *g_arrival, *g_epoch;
    uint64_t last_g_token[SIM_SHARDS_MAX];
    bool delivering_reply;
    /* A message just put whose bytes are written after put returns. */
    struct qmsg *pend;
    uint32_t pend_src;
    /* Jumps of this node's clock: time and size, for the budget. */
    uint64_t jump_at[64], jump_us[64];
    uint32_t n_jumps;
};

struct sim_nodes {
    struct sim_cluster *c;
    struct sim_nodes_options o;
    struct tk_prng prng;
    bool trace;
    bool clocks_perfect;
    struct sim_proc *procs[SIM_NODES_MAX];
    uint32_t nkeys; /* clients' keys, plus one for the final probe */
    struct skey *keys;
    uint8_t *key_shard[SIM_SHARDS_MAX + 1];     /* [nshards][key] */
    struct client clients[SIM_CLIENTS_MAX + 1]; /* the last one probes */
    uint32_t nclients;
    bool finishing; /* clients wait for every answer */
    struct sim_req *reqs;
    uint64_t n_reqs, cap_reqs;
    uint64_t arrivals, gens;
    uint64_t model_index, model_token;
    uint64_t held_now;
    struct sim_nodes_stats st;
};

/* ------------------------------------------------------------------ */
/* Names                                                               */

static int key_index(const struct sim_nodes *S, const char *k, size_t len)
{
    if (len != 6 || k[0] != 'k')
        return -1;
    int v = 0;
    for (size_t i = 1; i < 6; i++) {
        if (k[i] < '0' || k[i] > '9')
            return -1;
        v = v * 10 + (k[i] - '0');
    }
    return v < (int)S->nkeys ? v : -1;
}

static int owner_index(const char *o, size_t len)
{
    if (len != 4 || o[0] != 'c')
        return -1;
    int v = 0;
    for (size_t i = 1; i < 4; i++) {
        if (o[i] < '0' || o[i] > '9')
            return -1;
        v = v * 10 + (o[i] - '0');
    }
    return v;
}

/* "10.0.0.<addr>:7400" -> the newest live node at that address, or -1. */
static int node_of_addr(struct sim_nodes *S, const char *a)
{
    int addr = -1;
    if (sscanf(a, "10.0.0.%d:7400", &addr) != 1)
        return -1;
    for (int i = (int)S->c->n_nodes - 1; i >= 0; i--)
        if (S->c->nodes[i].addr == addr && S->c->nodes[i].alive)
            return i;
    return -1;
}

static uint64_t rnd(struct sim_nodes *S, uint64_t lo, uint64_t hi)
{
    return tk_prng_range(&S->prng, lo, hi);
}

/* ------------------------------------------------------------------ */
/* Queues                                                              */

static struct qmsg *q_push(struct queue *q)
{
    if (q->n == q->cap) {
        uint32_t cap = q->cap ? q->cap * 2 : 16;
        struct qmsg *v = xcalloc(cap, sizeof(*v));
        for (uint32_t i = 0; i < q->n; i++)
            v[i] = q->v[(q->head + i) % q->cap];
        free(q->v);
        q->v = v;
        q->head = 0;
        q->cap = cap;
    }
    struct qmsg *m = &q->v[(q->head + q->n) % q->cap];
    q->n++;
    memset(m, 0, sizeof(*m));
    return m;
}

static struct qmsg *q_head(struct queue *q)
{
    return q->n ? &q->v[q->head] : NULL;
}

static void q_pop(struct queue *q)
{
    free(q->v[q->head].bytes);
    q->head = (q->head + 1) % q->cap;
    q->n--;
}

/* ------------------------------------------------------------------ */
/* The model                                                           */

static struct kstate *kcur(struct skey *k)
{
    return &k->v[k->n - 1];
}

/* The state of key k at log index `index`: the last one made at or before. */
static uint32_t state_at(const struct skey *k, uint64_t index)
{
    uint32_t lo = 0, hi = k->n - 1;
    while (lo < hi) {
        uint32_t mid = (lo + hi + 1) / 2;
        if (k->v[mid].index <= index)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* Where the state after j stopped being the visible one, at the latest:
 * the first moment any later state was visible. */
static uint64_t visible_end(const struct skey *k, uint32_t j)
{
    uint64_t end = UINT64_MAX;
    for (uint32_t m = j + 1; m < k->n; m++)
        end = TK_MIN(end, k->v[m].visible_us);
    return end;
}

static void model_feed(struct sim_nodes *S, uint64_t index, const struct tk_raft_entry *e)
{
    if (index <= S->model_index)
        return; /* sim_cluster checked that it is the same entry */
    S->model_index = index;
    S->st.entries++;
    uint64_t now = S->c->now;
    uint32_t ncmds;
    CHECK(S, e->len >= 4, "a committed DATA entry without a count");
    memcpy(&ncmds, e->data, 4);
    size_t pos = 4;
    uint64_t token = e->token_first;
    for (uint32_t i = 0; i < ncmds; i++) {
        struct tk_cmd c;
        size_t used = 0;
        CHECK(S, tk_cmd_decode(e->data + pos, e->len - pos, &c, &used) == TK_OK,
              "a committed batch does not decode");
        pos += used;
        int ki = key_index(S, c.key, c.key_len);
        CHECK(S, ki >= 0, "unknown key in a committed command");
        struct skey *k = &S->keys[ki];
        struct kstate *cur = kcur(k);
        if (c.type == TK_CMD_GRANT)
            CHECK(S, cur->token == 0, "model: GRANT of %s, held by token %llu", k->name,
                  (unsigned long long)cur->token);
        else
            CHECK(S, cur->token != 0 && cur->token == c.old_token,
                  "model: command %d on %s for token %llu, holder %llu", c.type, k->name,
                  (unsigned long long)c.old_token, (unsigned long long)cur->token);
        bool expiry = c.type == TK_CMD_EXPIRE || (c.type == TK_CMD_HANDOFF && c.expired);
        if (expiry && S->clocks_perfect)
            CHECK(S, now >= cur->commit_us + (uint64_t)cur->lease_ms * MS,
                  "expiry of token %llu committed early: %llu us after its grant, lease %u ms",
                  (unsigned long long)cur->token, (unsigned long long)(now - cur->commit_us),
                  cur->lease_ms);
        struct kstate ns = {.index = index,
                            .old_token = c.old_token,
                            .commit_us = now,
                            .visible_us = UINT64_MAX,
                            .owner = -1,
                            .type = c.type,
                            .expired = c.expired};
        if (tk_cmd_grants(&c)) {
            CHECK(S, c.token == token, "command token outside the entry's range");
            token++;
            CHECK(S, c.token > S->model_token, "model: token %llu not above %llu",
                  (unsigned long long)c.token, (unsigned long long)S->model_token);
            S->model_token = c.token;
            ns.token = c.token;
            ns.owner = owner_index(c.owner, c.owner_len);
            ns.lease_ms = c.lease_ms;
            CHECK(S, ns.owner >= 0, "unknown owner in a committed grant");
        }
        if (cur->token == 0 && ns.token != 0)
            S->held_now++;
        if (cur->token != 0 && ns.token == 0)
            S->held_now--;
        GROW(k->v, k->n, k->cap);
        k->v[k->n++] = ns;
        S->st.commands++;
    }
    CHECK(S, pos == e->len, "bytes after the last command of an entry");
    CHECK(S, token == tk_raft_entry_token_next(e), "entry token_count does not match its grants");
    S->st.held_max = TK_MAX(S->st.held_max, S->held_now);
}

/* A snapshot installed at index holds exactly the model's holders there. */
static void check_blob(struct sim_nodes *S, int slot, uint64_t index, const uint8_t *b, size_t len)
{
    uint64_t count = 0;
    const char *why = NULL;
    CHECK(S, tk_snap_check(b, len, UINT64_MAX, &count, &why) == TK_OK,
          "node %d installs a bad snapshot: %s", slot, why);
    CHECK(S, index <= S->c->committed_max, "snapshot at %llu beyond the commit",
          (unsigned long long)index);
    size_t pos = 0;
    uint64_t header_count = 0;
    CHECK(S, tk_snap_header(b, len, &header_count, &pos) == TK_OK, "snapshot header");
    for (uint64_t i = 0; i < count; i++) {
        struct tk_cmd c;
        uint32_t left = 0;
        CHECK(S, tk_snap_next(b, len, &pos, &c, &left) == TK_OK, "snapshot record");
        int ki = key_index(S, c.key, c.key_len);
        CHECK(S, ki >= 0, "unknown key in a snapshot");
        const struct kstate *st = &S->keys[ki].v[state_at(&S->keys[ki], index)];
        CHECK(S,
              st->token == c.token && st->lease_ms == c.lease_ms &&
                  st->owner == owner_index(c.owner, c.owner_len),
              "snapshot at %llu: %s token %llu, the model has %llu", (unsigned long long)index,
              S->keys[ki].name, (unsigned long long)c.token, (unsigned long long)st->token);
    }
    uint64_t held = 0;
    for (uint32_t k = 0; k < S->nkeys; k++)
        held += S->keys[k].v[state_at(&S->keys[k], index)].token != 0;
    CHECK(S, held == count, "snapshot at %llu holds %llu keys, the model %llu",
          (unsigned long long)index, (unsigned long long)count, (unsigned long long)held);
    S->st.installs++;
    S->st.snapshot_keys_max = TK_MAX(S->st.snapshot_keys_max, count);
    S->st.snapshot_bytes_max = TK_MAX(S->st.snapshot_bytes_max, len);
}

/* ------------------------------------------------------------------ */
/* Scheduling                                                          */

static bool proc_runs(const struct sim_proc *P)
{
    const struct sim_node *n = &P->S->c->nodes[P->slot];
    return !P->dead && n->alive && !n->paused;
}

static uint64_t thread_wake(struct sim_proc *P, uint32_t t)
{
    struct sim_cluster *c = P->S->c;
    uint64_t w = P->poke[t];
    for (uint32_t s = 0; s <= P->nshards; s++) {
        const struct qmsg *m = q_head(&P->q[t][s]);
        if (m)
            w = TK_MIN(w, m->ready);
    }
    if (t < P->nshards) {
        uint64_t d = tk_shard_deadline(P->sh[t]);
        if (d != UINT64_MAX)
            w = TK_MIN(w, sim_global_at(c, P->slot, d));
    } else {
        w = TK_MIN(w, sim_global_at(c, P->slot, P->driver_round_local + DRIVER_ROUND_US));
    }
    if (w != UINT64_MAX)
        w = TK_MAX(w, P->stalled[t]);
    return w;
}

static void proc_rewake(struct sim_proc *P)
{
    P->wake_min = UINT64_MAX;
    for (uint32_t t = 0; t <= P->nshards; t++)
        P->wake_min = TK_MIN(P->wake_min, P->wake[t]);
}

static void thread_rewake(struct sim_proc *P, uint32_t t)
{
    P->wake[t] = thread_wake(P, t);
    proc_rewake(P);
}

static void proc_rewake_all(struct sim_proc *P)
{
    for (uint32_t t = 0; t <= P->nshards; t++)
        P->wake[t] = thread_wake(P, t);
    proc_rewake(P);
}

static uint64_t qdelay(struct sim_nodes *S)
{
    return rnd(S, 1, S->o.qdelay_max_us);
}

/* A message (or socket event) for thread dst, readable after a delay. */
static struct qmsg *enqueue(struct sim_proc *P, uint32_t dst, uint32_t src, uint32_t kind)
{
    struct sim_nodes *S = P->S;
    struct queue *q = &P->q[dst][src];
    CHECK(S, q->n < 1000000u, "node %d: a million messages wait for thread %u", P->slot, dst);
    struct qmsg *m = q_push(q);
    m->ready = TK_MAX(q->last_ready, S->c->now + qdelay(S));
    q->last_ready = m->ready;
    m->kind = kind;
    uint64_t w = TK_MAX(m->ready, P->stalled[dst]);
    if (w < P->wake[dst]) {
        P->wake[dst] = w;
        proc_rewake(P);
    }
    S->st.messages++;
    return m;
}

/* ------------------------------------------------------------------ */
/* Requests and replies                                                */

static struct sim_req *req_of(struct sim_nodes *S, uint64_t id)
{
    CHECK(S, id >= 1 && id <= S->n_reqs, "reply to unknown request %llu", (unsigned long long)id);
    return &S->reqs[id - 1];
}

static void arrive(struct sim_proc *P, uint32_t shard, struct sim_req *q)
{
    q->arrival = ++P->S->arrivals;
    q->arr_epoch = P->epoch[shard];
    q->arr_node = P->slot;
}

static void client_out_remove(struct client *cl, uint64_t id)
{
    for (uint32_t i = 0; i < cl->n_out; i++) {
        if (cl->out[i] == id) {
            memmove(cl->out + i, cl->out + i + 1, (cl->n_out - i - 1) * sizeof(*cl->out));
            cl->n_out--;
            return;
        }
    }
}

/* The client's connection is gone (an M, an overload, or it gave up):
 * whatever it had in flight has an unknown outcome. */
static void client_lost(struct sim_nodes *S, struct client *cl)
{
    for (uint32_t i = 0; i < cl->n_out; i++) {
        struct sim_req *q = &S->reqs[cl->out[i] - 1];
        if (q->state == REQ_PENDING) {
            q->state = REQ_LOST;
            S->st.lost++;
        }
    }
    cl->n_out = 0;
    cl->state = CL_DISC;
}

/* Is the lease window of this hold still open (by its lease clock)? */
static bool window_open(struct sim_nodes *S, int node, uint64_t end)
{
    if (S->o.client_true_clock)
        return S->c->now < end;
    return sim_local(S->c, node) < end;
}

/* A reply leaves the shard owning the key (node P, shard j). */
static void reply_emitted(struct sim_proc *P, uint32_t j, const struct tk_msg_reply *r)
{
    struct sim_nodes *S = P->S;
    struct sim_req *q = req_of(S, r->id);
    struct skey *k = &S->keys[q->key];
    CHECK(S, q->arr_node == P->slot && q->arr_epoch == P->epoch[j] && q->arrival != 0,
          "reply %c to request %llu from node %d shard %u epoch %llu; it arrived at node %d "
          "epoch %llu",
          r->type, (unsigned long long)r->id, P->slot, j, (unsigned long long)P->epoch[j],
          q->arr_node, (unsigned long long)q->arr_epoch);
    if (r->type != 'G')
        return;
    CHECK(S, q->type == 'A', "G to a %c", q->type);
    CHECK(S, r->token > P->last_g_token[j], "node %d shard %u: G token %llu not above %llu",
          P->slot, j, (unsigned long long)r->token, (unsigned long long)P->last_g_token[j]);
    P->last_g_token[j] = r->token;
    /* FIFO within a leadership: grants in arrival order. */
    if (P->g_epoch[q->key] == q->arr_epoch)
        CHECK(S, q->arrival > P->g_arrival[q->key],
              "FIFO: request %llu on %s granted after a later arrival", (unsigned long long)r->id,
              k->name);
    P->g_epoch[q->key] = q->arr_epoch;
    P->g_arrival[q->key] = q->arrival;
    /* A committed grant of this client, whose expiry did not commit. */
    uint32_t j2 = k->n;
    for (uint32_t m = k->n; m-- > 0;) {
        if (k->v[m].token == r->token) {
            j2 = m;
            break;
        }
    }
    CHECK(S, j2 < k->n && k->v[j2].owner == q->client,
          "G %llu on %s is no committed grant of client %d", (unsigned long long)r->token, k->name,
          q->client);
    /* A G may come late (a deposed leader's shard reading an APPLY that
     * waited in its queue through a stall) but never for a lease that was
     * expired while its client still counts it. */
    uint64_t end = S->o.client_true_clock ? q->sent_us : q->sent_local;
    end += (uint64_t)q->lease_ms * MS;
    for (uint32_t m = j2 + 1; m < k->n; m++) {
        const struct kstate *x = &k->v[m];
        bool expiry = x->type == TK_CMD_EXPIRE || (x->type == TK_CMD_HANDOFF && x->expired);
        CHECK(S, !(expiry && x->old_token == r->token && window_open(S, q->node, end)),
              "G for token %llu whose expiry committed while its client counts the lease",
              (unsigned long long)r->token);
    }
}

static void check_query(struct sim_nodes *S, const struct sim_req *q, const struct tk_msg_reply *r)
{
    const struct skey *k = &S->keys[q->key];
    int owner = r->token ? owner_index(r->owner, r->owner_len) : -1;
    uint64_t now = S->c->now;
    uint64_t end = UINT64_MAX; /* suffix minimum of visible times */
    for (uint32_t j = k->n; j-- > 0;) {
        const struct kstate *st = &k->v[j];
        bool same = st->token == r->token && (r->token == 0 || st->owner == owner);
        if (same && st->visible_us <= now && end > q->sent_us)
            return;
        end = TK_MIN(end, st->visible_us);
    }
    sim_fail(S->c,
             "Q %llu on %s answered token %llu, no state visible between its send (%llu) and "
             "the answer",
             (unsigned long long)(q - S->reqs + 1), k->name, (unsigned long long)r->token,
             (unsigned long long)q->sent_us);
}

/* N: (owner, token) must not have been the visible holder all along. */
static void check_not_held(struct sim_nodes *S, const struct sim_req *q)
{
    const struct skey *k = &S->keys[q->key];
    for (uint32_t j = 0; j < k->n; j++) {
        const struct kstate *st = &k->v[j];
        if (st->token != q->token || st->owner != q->client)
            continue;
        CHECK(S, !(st->visible_us <= q->sent_us && visible_end(k, j) > S->c->now),
              "N to release %llu of %s token %llu, held all along",
              (unsigned long long)(q - S->reqs + 1), k->name, (unsigned long long)q->token);
    }
}

static void check_released(struct sim_nodes *S, const struct sim_req *q)
{
    const struct skey *k = &S->keys[q->key];
    for (uint32_t j = 1; j < k->n; j++) {
        const struct kstate *st = &k->v[j];
        bool rel = st->type == TK_CMD_RELEASE || (st->type == TK_CMD_HANDOFF && !st->expired);
        if (rel && st->old_token == q->token && k->v[j - 1].owner == q->client &&
            st->visible_us <= S->c->now)
            return;
    }
    sim_fail(S->c, "R to release of %s token %llu: no such committed release", k->name,
             (unsigned long long)q->token);
}

/* A G reached its client. */
static void got_grant(struct sim_nodes *S, struct client *cl, struct sim_req *q, uint64_t token)
{
    struct skey *k = &S->keys[q->key];
    uint64_t end = S->o.client_true_clock ? q->sent_us : q->sent_local;
    end += (uint64_t)q->lease_ms * MS;
    if (!window_open(S, q->node, end))
        return; /* too late to use: the client does not enter */
    if (k->held && window_open(S, k->hold_node, k->hold_end))
        CHECK(S, k->holder == cl->id && k->hold_token == token,
              "two holders of %s: client %d (token %llu) and client %d (token %llu)", k->name,
              k->holder, (unsigned long long)k->hold_token, cl->id, (unsigned long long)token);
    k->held = true;
    k->holder = cl->id;
    k->hold_token = token;
    k->hold_node = q->node;
    k->hold_end = end;
    GROW(cl->holds, cl->n_holds, cl->cap_holds);
    cl->holds[cl->n_holds++] = (struct hold){q->key, token};
}

/* A reply reached the worker holding the client's connection. */
static void reply_received(struct sim_proc *P, uint32_t i, const struct tk_msg_reply *r)
{
    struct sim_nodes *S = P->S;
    CHECK(S, tk_client_shard(r->client) == i, "reply on the wrong shard");
    uint32_t cid = tk_client_slot(r->client), gen = tk_client_gen(r->client);
    CHECK(S, cid <= S->nclients, "reply to an unknown client");
    if (P->wgen[i][cid] != gen)
        return; /* the connection closed: the server drops it */
    struct client *cl = &S->clients[cid];
    struct sim_req *q = req_of(S, r->id);
    CHECK(S, q->client == (int)cid && q->gen == gen, "reply %llu on another connection",
          (unsigned long long)r->id);
    if (cl->state != CL_READY || cl->gen != gen) {
        CHECK(S, q->state != REQ_PENDING, "a reply on a closed connection");
        return; /* the client closed it: never read */
    }
    CHECK(S, q->state == REQ_PENDING, "request %llu answered twice", (unsigned long long)r->id);
    q->state = REQ_DONE;
    client_out_remove(cl, r->id);
    switch (r->type) {
        case 'G':
            S->st.g++;
            got_grant(S, cl, q, r->token);
            break;
        case 'R':
            S->st.r++;
            CHECK(S, q->type == 'R', "R to a %c", q->type);
            check_released(S, q);
            break;
        case 'N':
            S->st.n++;
            CHECK(S, q->type == 'R', "N to a %c", q->type);
            check_not_held(S, q);
            break;
        case 'Q':
            S->st.q++;
            CHECK(S, q->type == 'Q', "Q to a %c", q->type);
            check_query(S, q, r);
            break;
        case 'T':
            S->st.t++;
            CHECK(S, q->type == 'A' && q->wait_ms > 0, "T to a %c", q->type);
            break;
        case 'B':
            S->st.b++;
            CHECK(S, q->type == 'A', "B to a %c", q->type);
            break;
        default:
            sim_fail(S->c, "reply type %c", r->type);
    }
    if (S->trace)
        fprintf(stderr, "t=%llu node %d client %u gets %c for %llu (%c %s)\n",
                (unsigned long long)S->c->now, P->slot, cid, r->type, (unsigned long long)r->id,
                q->type, S->keys[q->key].name);
}

/* ------------------------------------------------------------------ */
/* What the shards and the driver say                                  */

/* Decodes a message put in the previous call (its bytes are written once
 * put returns) and checks what leaves a shard: replies and expiries. */
static void observe(struct sim_proc *P)
{
    struct qmsg *qm = P->pend;
    if (qm == NULL)
        return;
    P->pend = NULL;
    struct sim_nodes *S = P->S;
    struct tk_msg m;
    CHECK(S, tk_msg_decode(qm->kind, qm->bytes, qm->len, &m) == TK_OK, "a message does not decode");
    if (qm->kind == TK_MSG_REPLY) {
        reply_emitted(P, P->pend_src, &m.u.reply);
        return;
    }
    const struct tk_cmd *c = &m.u.propose.cmd;
    if (S->trace)
        fprintf(stderr, "t=%llu node %d shard %u epoch %llu proposes %.*s type %u old %llu\n",
                (unsigned long long)S->c->now, P->slot, P->pend_src,
                (unsigned long long)m.u.propose.epoch, (int)c->key_len, c->key, c->type,
                (unsigned long long)c->old_token);
    bool expiry = c->type == TK_CMD_EXPIRE || (c->type == TK_CMD_HANDOFF && c->expired);
    if (!expiry)
        return;
    int ki = key_index(S, c->key, c->key_len);
    CHECK(S, ki >= 0, "proposal of an unknown key");
    uint64_t local = sim_local(S->c, P->slot);
    CHECK(S, local >= P->due_local[ki],
          "node %d proposes the expiry of %s token %llu %llu us before its lease ends", P->slot,
          S->keys[ki].name, (unsigned long long)c->old_token,
          (unsigned long long)(P->due_local[ki] - local));
}

static void *put(void *ctx, uint32_t dst, uint32_t kind, uint32_t len)
{
    struct thr *t = ctx;
    struct sim_proc *P = t->P;
    observe(P);
    uint32_t d = dst == TK_MSG_TO_DRIVER ? P->nshards : dst;
    CHECK(P->S, d <= P->nshards && d != t->idx, "message to a bad destination");
    struct qmsg *m = enqueue(P, d, t->idx, kind);
    m->len = len;
    m->bytes = xcalloc(1, len);
    if (kind == TK_MSG_REPLY || kind == TK_MSG_PROPOSE) {
        P->pend = m;
        P->pend_src = t->idx;
    }
    return m->bytes;
}

/* The worker closes one of its connections (M or overload), as
 * net/conn.c does: the shard is told at once. */
static void worker_close(struct sim_proc *P, uint32_t i, uint32_t cid, bool moved)
{
    struct sim_nodes *S = P->S;
    uint32_t gen = P->wgen[i][cid];
    P->wgen[i][cid] = 0;
    tk_shard_client_closed(P->sh[i], tk_client_ref(i, cid, gen));
    struct client *cl = &S->clients[cid];
    if (cl->state != CL_DISC && cl->node == P->slot && cl->shard == i && cl->gen == gen) {
        if (moved) {
            S->st.moved++;
            cl->hint = node_of_addr(S, P->leader_addr[i]);
        } else {
            S->st.overload++;
        }
        client_lost(S, cl);
    }
}

static void sh_reply(void *ctx, const struct tk_msg_reply *r)
{
    struct thr *t = ctx;
    if (!t->P->delivering_reply)
        reply_emitted(t->P, t->idx, r); /* computed on this shard */
    reply_received(t->P, t->idx, r);
}

static void sh_refuse(void *ctx, uint64_t client, uint64_t id, uint8_t reason)
{
    (void)id;
    struct thr *t = ctx;
    uint32_t cid = tk_client_slot(client);
    if (t->P->wgen[t->idx][cid] == tk_client_gen(client))
        worker_close(t->P, t->idx, cid, reason == TK_REFUSE_MOVED);
}

static void sh_role(void *ctx, bool lead, const char *leader_addr)
{
    struct thr *t = ctx;
    struct sim_proc *P = t->P;
    snprintf(P->leader_addr[t->idx], TK_MSG_ADDR_MAX, "%s", leader_addr);
    if (lead)
        return;
    for (uint32_t cid = 0; cid <= P->S->nclients; cid++)
        if (P->wgen[t->idx][cid])
            worker_close(P, t->idx, cid, true);
}

static struct sim_proc *proc_of(struct sim_nodes *S, int slot)
{
    struct sim_proc *P = S->procs[slot];
    CHECK(S, P != NULL, "node %d has no process", slot);
    return P;
}

static void io_send(void *ctx, const struct tk_wire_frame *f, const char *addr)
{
    (void)addr; /* the cluster delivers by NodeId */
    struct sim_proc *P = ctx;
    sim_send(P->S->c, P->slot, &f->msg);
}

static void io_event(void *ctx, int ev, uint64_t a, uint64_t b)
{
    struct sim_proc *P = ctx;
    struct sim_nodes *S = P->S;
    if (ev == TK_DRIVER_EV_LEADING)
        S->st.leading++;
    if (ev == TK_DRIVER_EV_BATCH_REFUSED)
        S->st.batches_refused++;
    if (S->trace)
        fprintf(stderr, "t=%llu node %d driver event %d %llu %llu\n", (unsigned long long)S->c->now,
                P->slot, ev, (unsigned long long)a, (unsigned long long)b);
}

static void io_fatal(void *ctx, const char *why)
{
    struct sim_proc *P = ctx;
    sim_fail(P->S->c, "node %d driver: fatal: %s", P->slot, why);
}

static void io_applied(void *ctx, uint64_t index, const struct tk_raft_entry *e)
{
    struct sim_proc *P = ctx;
    if (P->S->trace)
        fprintf(stderr, "t=%llu node %d driver applies %llu (term %llu, %u bytes)%s\n",
                (unsigned long long)P->S->c->now, P->slot, (unsigned long long)index,
                (unsigned long long)e->term, e->len, tk_driver_serving(P->d) ? " serving" : "");
    sim_applied(P->S->c, P->slot, index);
    model_feed(P->S, index, e);
}

static void io_installed(void *ctx, uint64_t index, const uint8_t *blob, size_t len)
{
    struct sim_proc *P = ctx;
    sim_installed(P->S->c, P->slot, index);
    check_blob(P->S, P->slot, index, blob, len);
}

/* ------------------------------------------------------------------ */
/* Delivery to a shard                                                 */

static void deliver_socket(struct sim_proc *P, uint32_t i, const struct qmsg *m, uint64_t local)
{
    struct sim_nodes *S = P->S;
    struct tk_shard *sh = P->sh[i];
    switch (m->kind) {
        case SOCK_CONNECT: {
            struct client *cl = &S->clients[m->a];
            bool mine = cl->state == CL_CONNECTING && cl->gen == m->b && cl->node == P->slot;
            if (!tk_shard_leads(sh)) {
                if (mine) {
                    S->st.moved++;
                    cl->hint = node_of_addr(S, P->leader_addr[i]);
                    client_lost(S, cl);
                }
                return;
            }
            CHECK(S, P->wgen[i][m->a] == 0, "client %llu has two connections",
                  (unsigned long long)m->a);
            P->wgen[i][m->a] = (uint32_t)m->b;
            if (mine)
                cl->state = CL_READY;
            return;
        }
        case SOCK_CLOSE:
            if (P->wgen[i][m->a] == m->b) {
                P->wgen[i][m->a] = 0;
                tk_shard_client_closed(sh, tk_client_ref(i, (uint32_t)m->a, (uint32_t)m->b));
            }
            return;
        case SOCK_REQ: {
            struct sim_req *q = &S->reqs[m->a - 1];
            if (P->wgen[i][q->client] != q->gen)
                return; /* the connection closed before the worker read it */
            const struct skey *k = &S->keys[q->key];
            const struct client *cl = &S->clients[q->client];
            struct tk_msg_req r = {
                .client = tk_client_ref(i, (uint32_t)q->client, q->gen),
                .id = m->a,
                .token = q->token,
                .lease_ms = q->lease_ms,
                .wait_ms = q->wait_ms,
                .type = q->type,
                .key_len = 6,
                .owner_len = q->type == 'Q' ? 0 : cl->owner_len,
                .key = k->name,
                .owner = q->type == 'Q' ? NULL : cl->owner,
            };
            if (S->key_shard[P->nshards][q->key] == i)
                arrive(P, i, q);
            tk_shard_request(sh, local, &r);
            return;
        }
        default:
            sim_fail(S->c, "bad socket event");
    }
}

/* An APPLY for shard i: the next command of its key in the model. */
static void before_apply(struct sim_proc *P, uint32_t i, const struct tk_cmd *c, uint64_t local)
{
    struct sim_nodes *S = P->S;
    int ki = key_index(S, c->key, c->key_len);
    CHECK(S, ki >= 0, "APPLY of an unknown key");
    struct skey *k = &S->keys[ki];
    uint32_t p = ++P->pos[ki];
    CHECK(S, p < k->n, "node %d shard %u applies a command on %s the model lacks", P->slot, i,
          k->name);
    const struct kstate *st = &k->v[p];
    CHECK(S, st->type == c->type && st->old_token == c->old_token && st->token == c->token,
          "node %d shard %u applies another command on %s than the committed one", P->slot, i,
          k->name);
    bool leads = tk_shard_leads(P->sh[i]);
    if (S->trace)
        fprintf(stderr, "t=%llu node %d shard %u%s applies %s type %u old %llu new %llu\n",
                (unsigned long long)S->c->now, P->slot, i, leads ? " (leading)" : "", k->name,
                c->type, (unsigned long long)c->old_token, (unsigned long long)c->token);
    if (leads)
        k->v[p].visible_us = TK_MIN(k->v[p].visible_us, P->S->c->now);
    if (tk_cmd_grants(c))
        P->due_local[ki] = local + (uint64_t)c->lease_ms * MS + TK_LOCK_DRIFT_US(c->lease_ms);
}

/* An INSTALL for shard i: its keys take their state at the index. */
static void before_install(struct sim_proc *P,
                           uint32_t i,
                           const struct tk_msg_install *in,
                           uint64_t local)
{
    struct sim_nodes *S = P->S;
    CHECK(S, !tk_shard_leads(P->sh[i]), "a leading shard installs");
    uint8_t *own = S->key_shard[P->nshards];
    for (uint32_t k = 0; k < S->nkeys; k++)
        if (own[k] == i)
            P->pos[k] = state_at(&S->keys[k], in->index);
    size_t pos = 0;
    uint64_t n = 0;
    while (pos < in->len) {
        struct tk_cmd c;
        uint32_t left = 0;
        CHECK(S, tk_snap_next(in->data, in->len, &pos, &c, &left) == TK_OK, "INSTALL record");
        int ki = key_index(S, c.key, c.key_len);
        CHECK(S, ki >= 0 && own[ki] == i, "INSTALL of a key of another shard");
        CHECK(S, S->keys[ki].v[P->pos[ki]].token == c.token, "INSTALL of %s: not the model's",
              S->keys[ki].name);
        P->due_local[ki] = local + (uint64_t)left * MS + TK_LOCK_DRIFT_US(c.lease_ms);
        n++;
    }
    CHECK(S, n == in->count, "INSTALL count");
}

/* Shard i reads a ROLE: a new epoch, in which the requests that waited
 * for it arrive (the shard replays them while it reads the ROLE). */
static void before_role(struct sim_proc *P, uint32_t i, const struct tk_msg_role *r)
{
    struct sim_nodes *S = P->S;
    if (S->trace)
        fprintf(stderr, "t=%llu node %d shard %u reads ROLE epoch %llu %s\n",
                (unsigned long long)S->c->now, P->slot, i, (unsigned long long)r->epoch,
                r->lead ? "lead" : "follow");
    CHECK(S, r->epoch > P->epoch[i], "ROLE epochs go back");
    P->epoch[i] = r->epoch;
    uint32_t kept = 0;
    for (uint32_t e = 0; e < P->n_early[i]; e++) {
        struct early x = P->early[i][e];
        if (x.epoch == r->epoch)
            arrive(P, i, &S->reqs[x.req - 1]);
        else if (x.epoch > r->epoch)
            P->early[i][kept++] = x;
    }
    P->n_early[i] = kept;
}

/* Once it leads, the states of its keys are visible. */
static void after_role(struct sim_proc *P, uint32_t i, const struct tk_msg_role *r)
{
    struct sim_nodes *S = P->S;
    CHECK(S, tk_shard_leads(P->sh[i]) == r->lead, "shard role");
    if (!r->lead)
        return;
    uint8_t *own = S->key_shard[P->nshards];
    for (uint32_t k = 0; k < S->nkeys; k++)
        if (own[k] == i) {
            struct kstate *st = &S->keys[k].v[P->pos[k]];
            st->visible_us = TK_MIN(st->visible_us, S->c->now);
        }
}

static void deliver_shard(struct sim_proc *P,
                          uint32_t i,
                          uint32_t src,
                          struct qmsg *qm,
                          uint64_t local)
{
    struct sim_nodes *S = P->S;
    if (src == i) {
        deliver_socket(P, i, qm, local);
        observe(P);
        return;
    }
    struct tk_msg m;
    CHECK(S, tk_msg_decode(qm->kind, qm->bytes, qm->len, &m) == TK_OK, "a message does not decode");
    switch (qm->kind) {
        case TK_MSG_REQ: {
            struct sim_req *q = req_of(S, m.u.req.id);
            if (m.u.req.epoch == P->epoch[i]) {
                arrive(P, i, q);
            } else if (m.u.req.epoch > P->epoch[i]) {
                GROW(P->early[i], P->n_early[i], P->cap_early[i]);
                P->early[i][P->n_early[i]++] = (struct early){m.u.req.id, m.u.req.epoch};
            }
            break;
        }
        case TK_MSG_APPLY:
            before_apply(P, i, &m.u.apply.cmd, local);
            break;
        case TK_MSG_INSTALL:
            before_install(P, i, &m.u.install, local);
            break;
        case TK_MSG_ROLE:
            before_role(P, i, &m.u.role);
            break;
        default:
            break;
    }
    P->delivering_reply = qm->kind == TK_MSG_REPLY;
    tk_shard_message(P->sh[i], local, src == P->nshards ? TK_MSG_TO_DRIVER : src, qm->kind,
                     qm->bytes, qm->len);
    P->delivering_reply = false;
    observe(P);
    if (qm->kind == TK_MSG_ROLE)
        after_role(P, i, &m.u.role);
}

/* ------------------------------------------------------------------ */
/* Thread rounds                                                       */

static uint64_t wall_of(uint64_t local)
{
    return TK_DRIVER_TOKEN_EPOCH_US + 86400 * SEC + local;
}

/* Reads up to `cap` messages that are ready, picking the queue at random
 * each time (FIFO within each). */
static struct queue *pick_ready(struct sim_proc *P, uint32_t t, uint32_t *src)
{
    struct sim_nodes *S = P->S;
    uint32_t cand[SIM_SHARDS_MAX + 1], k = 0;
    for (uint32_t s = 0; s <= P->nshards; s++) {
        const struct qmsg *m = q_head(&P->q[t][s]);
        if (m && m->ready <= S->c->now)
            cand[k++] = s;
    }
    if (k == 0)
        return NULL;
    *src = cand[rnd(S, 0, k - 1)];
    return &P->q[t][*src];
}

static uint32_t round_cap(struct sim_nodes *S)
{
    return rnd(S, 0, 1) ? UINT32_MAX : (uint32_t)rnd(S, 1, 3);
}

static void run_shard(struct sim_proc *P, uint32_t i)
{
    struct sim_nodes *S = P->S;
    uint64_t local = sim_local(S->c, P->slot);
    uint32_t cap = round_cap(S), src;
    struct queue *q;
    for (uint32_t n = 0; n < cap && (q = pick_ready(P, i, &src)) != NULL; n++) {
        struct qmsg m = *q_head(q);
        q->v[q->head].bytes = NULL; /* ours until the delivery is done */
        q_pop(q);
        deliver_shard(P, i, src, &m, local);
        free(m.bytes);
        if (P->dead)
            return;
    }
    tk_shard_tick(P->sh[i], local);
    observe(P);
    tk_shard_flush(P->sh[i]);
    observe(P);
}

static void run_driver(struct sim_proc *P)
{
    struct sim_nodes *S = P->S;
    uint32_t nd = P->nshards;
    uint64_t local = sim_local(S->c, P->slot);
    tk_driver_clock(P->d, local, wall_of(local));
    uint32_t cap = round_cap(S), src;
    struct queue *q;
    for (uint32_t n = 0; n < cap && (q = pick_ready(P, nd, &src)) != NULL; n++) {
        struct qmsg m = *q_head(q);
        q->v[q->head].bytes = NULL;
        q_pop(q);
        tk_driver_message(P->d, src, m.kind, m.bytes, m.len);
        free(m.bytes);
        observe(P);
        sim_sync(S->c, P->slot);
    }
    tk_driver_flush(P->d);
    observe(P);
    sim_sync(S->c, P->slot);
    struct tk_driver_stats ds;
    tk_driver_stats(P->d, &ds);
    if (ds.waiting_batches > 0)
        S->st.batches_waited++;
    P->driver_round_local = local;
}

static void run_thread(struct sim_proc *P, uint32_t t)
{
    struct sim_nodes *S = P->S;
    P->poke[t] = UINT64_MAX;
    S->st.rounds++;
    if (t == P->nshards)
        run_driver(P);
    else
        run_shard(P, t);
    if (S->o.stall_ppm && rnd(S, 0, 999999) < S->o.stall_ppm) {
        P->stalled[t] = S->c->now + rnd(S, MS, S->o.stall_max_us);
        S->st.stalls++;
    }
    thread_rewake(P, t);
}

static void proc_kill(struct sim_proc *P)
{
    struct sim_nodes *S = P->S;
    P->dead = true;
    for (uint32_t cid = 0; cid <= S->nclients; cid++) {
        struct client *cl = &S->clients[cid];
        if (cl->state != CL_DISC && cl->node == P->slot)
            client_lost(S, cl);
    }
    for (uint32_t d = 0; d <= P->nshards; d++)
        for (uint32_t s = 0; s <= P->nshards; s++) {
            struct queue *q = &P->q[d][s];
            while (q->n) {
                struct qmsg *m = q_head(q);
                tk_msg_drop(m->kind, m->bytes, m->len);
                q_pop(q);
            }
        }
    P->wake_min = UINT64_MAX;
}

uint64_t sim_nodes_next(struct sim_nodes *S)
{
    uint64_t t = UINT64_MAX;
    for (uint32_t i = 0; i < S->c->n_nodes; i++) {
        struct sim_proc *P = S->procs[i];
        if (P && proc_runs(P))
            t = TK_MIN(t, P->wake_min);
    }
    return t;
}

void sim_nodes_run(struct sim_nodes *S)
{
    struct sim_cluster *c = S->c;
    for (;;) {
        struct {
            struct sim_proc *P;
            uint32_t t;
        } due[SIM_NODES_MAX * (SIM_SHARDS_MAX + 1)];
        uint32_t k = 0;
        for (uint32_t i = 0; i < c->n_nodes; i++) {
            struct sim_proc *P = S->procs[i];
            if (P == NULL || P->dead)
                continue;
            if (!c->nodes[i].alive) {
                proc_kill(P);
                continue;
            }
            if (c->nodes[i].paused || P->wake_min > c->now)
                continue;
            for (uint32_t t = 0; t <= P->nshards; t++)
                if (P->wake[t] <= c->now) {
                    due[k].P = P;
                    due[k].t = t;
                    k++;
                }
        }
        if (k == 0)
            return;
        uint32_t pick = (uint32_t)rnd(S, 0, k - 1);
        run_thread(due[pick].P, due[pick].t);
    }
}

/* ------------------------------------------------------------------ */
/* The cluster's hooks                                                 */

static struct tk_raft *hook_create(void *ctx, struct sim_node *n, const struct tk_raft_options *o)
{
    struct sim_nodes *S = ctx;
    struct sim_proc *P = xcalloc(1, sizeof(*P));
    S->procs[n->slot] = P;
    P->S = S;
    P->slot = n->slot;
    P->nshards = (uint32_t)rnd(S, 1, S->o.shards_max);
    struct tk_driver_options dopt = {.nshards = P->nshards, .raft = *o};
    dopt.proposals_max = (uint64_t)P->nshards * S->o.limits.keys_max + 1;
    snprintf(dopt.advertise, sizeof(dopt.advertise), "10.0.0.%d:7400", n->addr);
    for (uint32_t t = 0; t <= P->nshards; t++) {
        P->thr[t].P = P;
        P->thr[t].idx = t;
        P->poke[t] = UINT64_MAX;
    }
    struct tk_msg_out dout = {.ctx = &P->thr[P->nshards], .put = put};
    struct tk_driver_io io = {.ctx = P,
                              .send = io_send,
                              .event = io_event,
                              .fatal = io_fatal,
                              .applied = io_applied,
                              .installed = io_installed};
    P->d = tk_driver_create(&dopt, &dout, &io);
    CHECK(S, P->d != NULL, "tk_driver_create");
    for (uint32_t i = 0; i < P->nshards; i++) {
        struct tk_shard_options so = {.idx = i,
                                      .nshards = P->nshards,
                                      .limits = S->o.limits,
                                      .requests_max = 1u << 20,
                                      .cut_slice = S->o.cut_slice,
                                      .cut_piece = S->o.cut_piece};
        struct tk_msg_out out = {.ctx = &P->thr[i], .put = put};
        struct tk_shard_client cl = {
            .ctx = &P->thr[i], .reply = sh_reply, .refuse = sh_refuse, .role = sh_role};
        P->sh[i] = tk_shard_create(&so, &out, &cl);
        CHECK(S, P->sh[i] != NULL, "tk_shard_create");
        P->wgen[i] = xcalloc(S->nclients + 1, sizeof(uint32_t));
    }
    P->pos = xcalloc(S->nkeys, sizeof(*P->pos));
    P->due_local = xcalloc(S->nkeys, sizeof(*P->due_local));
    P->g_arrival = xcalloc(S->nkeys, sizeof(*P->g_arrival));
    P->g_epoch = xcalloc(S->nkeys, sizeof(*P->g_epoch));
    if (S->o.drift_ppm_max)
        sim_clock_rate(S->c, n->slot,
                       (int32_t)rnd(S, 0, 2 * (uint64_t)S->o.drift_ppm_max) - S->o.drift_ppm_max);
    P->driver_round_local = sim_local(S->c, n->slot);
    for (uint32_t t = 0; t <= P->nshards; t++)
        P->wake[t] = UINT64_MAX;
    P->wake[P->nshards] = S->c->now + qdelay(S);
    proc_rewake(P);
    return tk_driver_core(P->d);
}

static void hook_destroy(void *ctx, struct sim_node *n)
{
    struct sim_nodes *S = ctx;
    struct sim_proc *P = S->procs[n->slot];
    if (P == NULL)
        return;
    proc_kill(P);
    for (uint32_t i = 0; i < P->nshards; i++) {
        tk_shard_destroy(P->sh[i]);
        free(P->wgen[i]);
        free(P->early[i]);
    }
    tk_driver_destroy(P->d);
    for (uint32_t d = 0; d <= P->nshards; d++)
        for (uint32_t s = 0; s <= P->nshards; s++)
            free(P->q[d][s].v);
    free(P->pos);
    free(P->due_local);
    free(P->g_arrival);
    free(P->g_epoch);
    free(P);
    S->procs[n->slot] = NULL;
}

static void hook_process(void *ctx, struct sim_node *n, int rc, struct tk_raft_update *up)
{
    struct sim_nodes *S = ctx;
    struct sim_proc *P = proc_of(S, n->slot);
    uint64_t local = sim_local(S->c, n->slot);
    tk_driver_clock(P->d, local, wall_of(local));
    tk_driver_process(P->d, rc, up);
    observe(P);
    /* The Raft thread runs its round (tk_driver_flush) after peer I/O. */
    uint32_t t = P->nshards;
    P->poke[t] = TK_MIN(P->poke[t], S->c->now + qdelay(S));
    thread_rewake(P, t);
}

/* ------------------------------------------------------------------ */
/* Clients                                                             */

static void client_connect(struct sim_nodes *S, struct client *cl)
{
    struct sim_cluster *c = S->c;
    int node = cl->hint;
    if (node < 0 || !c->nodes[node].alive || S->procs[node] == NULL || rnd(S, 0, 9) == 0) {
        int cand[SIM_NODES_MAX], k = 0;
        for (uint32_t i = 0; i < c->n_nodes; i++)
            if (c->nodes[i].alive && S->procs[i] != NULL)
                cand[k++] = (int)i;
        if (k == 0)
            return;
        node = cand[rnd(S, 0, (uint64_t)k - 1)];
    }
    cl->hint = -1;
    struct sim_proc *P = S->procs[node];
    cl->state = CL_CONNECTING;
    cl->node = node;
    cl->shard = (uint32_t)rnd(S, 0, P->nshards - 1);
    cl->gen = (uint32_t)++S->gens;
    cl->since = c->now;
    S->st.connects++;
    struct qmsg *m = enqueue(P, cl->shard, cl->shard, SOCK_CONNECT);
    m->a = (uint64_t)cl->id;
    m->b = cl->gen;
}

/* The client closes its connection (gives up, or at random). */
static void client_close(struct sim_nodes *S, struct client *cl)
{
    struct sim_proc *P = S->procs[cl->node];
    if (P != NULL && !P->dead) {
        struct qmsg *m = enqueue(P, cl->shard, cl->shard, SOCK_CLOSE);
        m->a = (uint64_t)cl->id;
        m->b = cl->gen;
    }
    client_lost(S, cl);
}

static void client_send(struct sim_nodes *S,
                        struct client *cl,
                        char type,
                        uint32_t key,
                        uint64_t token,
                        uint32_t lease_ms,
                        uint32_t wait_ms)
{
    struct sim_proc *P = S->procs[cl->node];
    GROW(S->reqs, S->n_reqs, S->cap_reqs);
    struct sim_req *q = &S->reqs[S->n_reqs++];
    memset(q, 0, sizeof(*q));
    q->client = cl->id;
    q->gen = cl->gen;
    q->node = cl->node;
    q->shard = cl->shard;
    q->type = type;
    q->key = key;
    q->token = token;
    q->lease_ms = lease_ms;
    q->wait_ms = wait_ms;
    q->sent_us = S->c->now;
    q->sent_local = sim_local(S->c, cl->node);
    q->arr_node = -1;
    GROW(cl->out, cl->n_out, cl->cap_out);
    cl->out[cl->n_out++] = S->n_reqs;
    S->st.requests++;
    struct qmsg *m = enqueue(P, cl->shard, cl->shard, SOCK_REQ);
    m->a = S->n_reqs;
    if (S->trace)
        fprintf(stderr, "t=%llu client %d sends %c %s (req %llu) to node %d shard %u\n",
                (unsigned long long)S->c->now, cl->id, type, S->keys[key].name,
                (unsigned long long)S->n_reqs, cl->node, cl->shard);
}

/* Drops holds whose window closed or that another grant replaced. */
static void client_tidy_holds(struct sim_nodes *S, struct client *cl)
{
    uint32_t kept = 0;
    for (uint32_t i = 0; i < cl->n_holds; i++) {
        struct hold h = cl->holds[i];
        const struct skey *k = &S->keys[h.key];
        if (k->held && k->holder == cl->id && k->hold_token == h.token &&
            window_open(S, k->hold_node, k->hold_end))
            cl->holds[kept++] = h;
    }
    cl->n_holds = kept;
}

static void client_request(struct sim_nodes *S, struct client *cl)
{
    uint32_t nkeys = S->nkeys - 1; /* the last key is the probe's */
    uint64_t dice = rnd(S, 0, 99);
    if (cl->n_holds > 0 && dice < S->o.release_pct) {
        uint32_t i = (uint32_t)rnd(S, 0, cl->n_holds - 1);
        struct hold h = cl->holds[i];
        cl->holds[i] = cl->holds[--cl->n_holds];
        struct skey *k = &S->keys[h.key];
        if (k->held && k->holder == cl->id && k->hold_token == h.token)
            k->held = false; /* it stops using the key when it sends R */
        client_send(S, cl, 'R', h.key, h.token, 0, 0);
        return;
    }
    uint32_t key = (uint32_t)rnd(S, 0, nkeys - 1);
    dice = rnd(S, 0, 99);
    if (dice < 85) {
        uint32_t lease = (uint32_t)rnd(S, S->o.lease_min_ms, S->o.lease_max_ms);
        uint32_t wait = rnd(S, 0, 3) == 0 ? 0 : (uint32_t)rnd(S, 1, 2500);
        client_send(S, cl, 'A', key, 0, lease, wait);
    } else if (dice < 92) {
        client_send(S, cl, 'R', key, rnd(S, 1, 1000), 0, 0); /* a token never granted: N */
    } else {
        client_send(S, cl, 'Q', key, 0, 0, 0);
    }
}

/* A client whose oldest request waited longer than it would for any
 * answer gives up on the connection (libticketing's response grace). Odd
 * clients are patient with a paused node (its sockets stay open): their
 * requests wait in its sockets, and a deposed leader reads them first
 * thing when it resumes, before it learns that it was deposed. */
static void client_timeouts(struct sim_nodes *S, struct client *cl)
{
    uint64_t now = S->c->now;
    if ((cl->id & 1) && cl->state != CL_DISC && S->c->nodes[cl->node].paused)
        return;
    if (cl->state == CL_CONNECTING && now - cl->since > SEC) {
        client_close(S, cl);
        return;
    }
    if (cl->state != CL_READY || cl->n_out == 0 || S->finishing)
        return;
    const struct sim_req *q = &S->reqs[cl->out[0] - 1];
    if (now - q->sent_us > (uint64_t)q->wait_ms * MS + cl->grace_us)
        client_close(S, cl);
}

void sim_nodes_clients(struct sim_nodes *S)
{
    for (uint32_t i = 0; i < S->nclients; i++)
        client_timeouts(S, &S->clients[i]);
    struct client *cl = &S->clients[rnd(S, 0, S->nclients - 1)];
    if (cl->state == CL_DISC) {
        client_connect(S, cl);
        return;
    }
    if (cl->state != CL_READY)
        return;
    if (rnd(S, 0, 99) == 0) {
        client_close(S, cl);
        return;
    }
    client_tidy_holds(S, cl);
    uint64_t burst = rnd(S, 1, S->o.burst_max);
    for (uint64_t i = 0; i < burst && cl->n_out < S->o.inflight_max; i++)
        client_request(S, cl);
}

/* A client of a node that just resumed asks about a key that changed
 * lately (elsewhere, if the node was deposed meanwhile): a stale answer
 * shows there. It may exceed its in-flight bound by one. */
void sim_nodes_resumed(struct sim_nodes *S, int slot)
{
    for (uint32_t i = 0; i < S->nclients; i++) {
        struct client *cl = &S->clients[i];
        if (cl->state != CL_READY || cl->node != slot || cl->n_out > S->o.inflight_max)
            continue;
        uint32_t key = (uint32_t)rnd(S, 0, S->nkeys - 2);
        for (int k = 0; k < 8; k++) {
            uint32_t x = (uint32_t)rnd(S, 0, S->nkeys - 2);
            const struct kstate *a = kcur(&S->keys[x]), *b = kcur(&S->keys[key]);
            if (a->visible_us != UINT64_MAX &&
                (b->visible_us == UINT64_MAX || a->visible_us > b->visible_us))
                key = x;
        }
        client_send(S, cl, 'Q', key, 0, 0, 0);
        return;
    }
}

/* ------------------------------------------------------------------ */
/* Clock faults                                                        */

void sim_nodes_clock_fault(struct sim_nodes *S)
{
    struct sim_cluster *c = S->c;
    int cand[SIM_NODES_MAX], k = 0;
    for (uint32_t i = 0; i < c->n_nodes; i++)
        if (c->nodes[i].alive && S->procs[i] != NULL)
            cand[k++] = (int)i;
    if (k == 0)
        return;
    int slot = cand[rnd(S, 0, (uint64_t)k - 1)];
    struct sim_proc *P = S->procs[slot];
    if (S->o.drift_ppm_max && (S->o.jump_max_us == 0 || rnd(S, 0, 2) == 0)) {
        sim_clock_rate(c, slot,
                       (int32_t)rnd(S, 0, 2 * (uint64_t)S->o.drift_ppm_max) - S->o.drift_ppm_max);
    } else if (S->o.jump_max_us) {
        /* Within the budget: the jumps of the last window add up to at
         * most jump_max_us, so the margin's constant part covers them. */
        uint64_t sum = 0;
        uint32_t kept = 0;
        for (uint32_t i = 0; i < P->n_jumps; i++) {
            if (c->now - P->jump_at[i] < S->o.jump_window_us) {
                sum += P->jump_us[i];
                P->jump_at[kept] = P->jump_at[i];
                P->jump_us[kept++] = P->jump_us[i];
            }
        }
        P->n_jumps = kept;
        if (sum >= S->o.jump_max_us || kept == TK_ARRAY_LEN(P->jump_at))
            return;
        uint64_t us = rnd(S, 1, S->o.jump_max_us - sum);
        sim_clock_jump(c, slot, us);
        P->jump_at[P->n_jumps] = c->now;
        P->jump_us[P->n_jumps++] = us;
        S->st.jumps++;
    }
    proc_rewake_all(P);
}

/* ------------------------------------------------------------------ */
/* Table checks                                                        */

struct cmp_ctx {
    struct sim_nodes *S;
    struct sim_proc *P;
    uint32_t shard;
    uint64_t count;
};

static void cmp_holder(void *ctx, const struct tk_cmd *g)
{
    struct cmp_ctx *x = ctx;
    struct sim_nodes *S = x->S;
    int ki = key_index(S, g->key, g->key_len);
    CHECK(S, ki >= 0 && S->key_shard[x->P->nshards][ki] == x->shard,
          "node %d shard %u holds a key it does not own", x->P->slot, x->shard);
    const struct kstate *st = &S->keys[ki].v[x->P->pos[ki]];
    CHECK(S,
          st->token == g->token && st->lease_ms == g->lease_ms &&
              st->owner == owner_index(g->owner, g->owner_len),
          "node %d shard %u: %s token %llu, the model %llu", x->P->slot, x->shard, S->keys[ki].name,
          (unsigned long long)g->token, (unsigned long long)st->token);
    x->count++;
}

static void proc_check(struct sim_proc *P)
{
    struct sim_nodes *S = P->S;
    struct tk_driver_stats ds;
    tk_driver_stats(P->d, &ds);
    for (uint32_t i = 0; i < P->nshards; i++) {
        tk_shard_check(P->sh[i]);
        struct cmp_ctx x = {S, P, i, 0};
        tk_lock_each_holder(tk_shard_table(P->sh[i]), cmp_holder, &x);
        bool caught_up = P->q[i][P->nshards].n == 0;
        uint64_t held = 0;
        for (uint32_t k = 0; k < S->nkeys; k++) {
            if (S->key_shard[P->nshards][k] != i)
                continue;
            const struct skey *key = &S->keys[k];
            held += key->v[P->pos[k]].token != 0;
            if (caught_up)
                CHECK(S, P->pos[k] == state_at(key, ds.applied),
                      "node %d shard %u has %s at index %llu, its driver applied %llu", P->slot, i,
                      key->name, (unsigned long long)key->v[P->pos[k]].index,
                      (unsigned long long)ds.applied);
        }
        CHECK(S, held == x.count, "node %d shard %u holds %llu keys, the model %llu", P->slot, i,
              (unsigned long long)x.count, (unsigned long long)held);
    }
}

void sim_nodes_check(struct sim_nodes *S)
{
    for (uint32_t i = 0; i < S->c->n_nodes; i++) {
        struct sim_proc *P = S->procs[i];
        if (P != NULL && !P->dead && S->c->nodes[i].alive)
            proc_check(P);
    }
}

/* ------------------------------------------------------------------ */
/* The end                                                             */

static bool idle(struct sim_nodes *S)
{
    for (uint32_t i = 0; i < S->c->n_nodes; i++) {
        struct sim_proc *P = S->procs[i];
        if (P == NULL || !proc_runs(P))
            continue;
        for (uint32_t d = 0; d <= P->nshards; d++)
            for (uint32_t s = 0; s <= P->nshards; s++)
                if (P->q[d][s].n)
                    return false;
    }
    return true;
}

/* Runs the cluster and the nodes until `until`, or pred. */
static bool run_until(struct sim_nodes *S, uint64_t until, bool (*pred)(struct sim_nodes *S))
{
    struct sim_cluster *c = S->c;
    while (c->now < until) {
        if (pred && pred(S))
            return true;
        uint64_t t = TK_MIN(until, sim_nodes_next(S));
        t = TK_MIN(t, c->now + 10 * MS);
        while (sim_step(c, t)) {
            CHECK(S, c->heap_n < 200000u, "message storm: %llu messages in flight",
                  (unsigned long long)c->heap_n);
            t = TK_MIN(t, sim_nodes_next(S));
        }
        sim_nodes_run(S);
    }
    return pred && pred(S);
}

static bool probe_ready(struct sim_nodes *S)
{
    return S->clients[S->nclients].state == CL_READY;
}

static bool probe_answered(struct sim_nodes *S)
{
    return S->reqs[S->n_reqs - 1].state != REQ_PENDING;
}

void sim_nodes_finish(struct sim_nodes *S)
{
    struct sim_cluster *c = S->c;
    S->finishing = true;
    /* Every request on an open connection gets its answer: waits end
     * within 2.5 s, proposals commit once the cluster is whole. */
    run_until(S, c->now + 8 * SEC, NULL);
    for (uint32_t i = 0; i < S->nclients; i++) {
        const struct client *cl = &S->clients[i];
        if (cl->state != CL_READY)
            continue;
        for (uint32_t k = 0; k < cl->n_out; k++) {
            const struct sim_req *q = &S->reqs[cl->out[k] - 1];
            if (q->state == REQ_PENDING)
                sim_fail(c,
                         "request %llu (%c %s from client %d on node %d shard %u, sent at %llu) "
                         "never answered",
                         (unsigned long long)cl->out[k], q->type, S->keys[q->key].name, q->client,
                         q->node, q->shard, (unsigned long long)q->sent_us);
        }
    }
    /* A fresh client acquires a free key on the leader. */
    struct client *p = &S->clients[S->nclients];
    int l = sim_leader(c);
    uint64_t limit = c->now + 5 * SEC;
    while (p->state != CL_READY && c->now < limit) {
        if (p->state == CL_DISC) {
            p->hint = l;
            client_connect(S, p);
        }
        run_until(S, TK_MIN(limit, c->now + 200 * MS), probe_ready);
        if (p->state == CL_CONNECTING)
            client_close(S, p);
    }
    if (p->state != CL_READY) {
        sim_dump(c);
        sim_fail(c, "no shard of the leader (node %d) takes a connection after healing", l);
    }
    /* A long lease: a thread may stall for most of a second on the way. */
    client_send(S, p, 'A', S->nkeys - 1, 0, 60000, 0);
    if (!run_until(S, c->now + 5 * SEC, probe_answered) || S->reqs[S->n_reqs - 1].state != REQ_DONE)
        sim_fail(c, "the leader does not answer an acquire after healing");
    CHECK(S, S->keys[S->nkeys - 1].held && S->keys[S->nkeys - 1].holder == p->id,
          "the acquire of a free key after healing is not granted");
    run_until(S, c->now + 2 * SEC, idle);
    CHECK(S, idle(S), "queues still busy after healing");
    sim_nodes_check(S);
}

/* ------------------------------------------------------------------ */
/* Life                                                                */

struct sim_nodes *sim_nodes_create(struct sim_cluster *c,
                                   const struct sim_nodes_options *o,
                                   uint64_t seed)
{
    if (c->n_nodes != 0 || o->clients == 0 || o->clients >= SIM_CLIENTS_MAX || o->keys == 0 ||
        o->shards_max == 0 || o->shards_max > SIM_SHARDS_MAX)
        sim_fail(c, "sim_nodes_create: bad options");
    struct sim_nodes *S = xcalloc(1, sizeof(*S));
    S->c = c;
    S->o = *o;
    if (S->o.qdelay_max_us == 0)
        S->o.qdelay_max_us = 1;
    if (S->o.burst_max == 0)
        S->o.burst_max = 1;
    S->trace = getenv("TK_SIM_TRACE") != NULL;
    S->clocks_perfect = o->drift_ppm_max == 0 && o->jump_max_us == 0;
    tk_prng_seed(&S->prng, seed * 0x9e3779b97f4a7c15ull + 11);
    S->nkeys = o->keys + 1;
    S->keys = xcalloc(S->nkeys, sizeof(*S->keys));
    for (uint32_t k = 0; k < S->nkeys; k++) {
        struct skey *key = &S->keys[k];
        snprintf(key->name, sizeof(key->name), "k%05u", k);
        key->cap = 4;
        key->v = xcalloc(key->cap, sizeof(*key->v));
        key->v[0] = (struct kstate){.owner = -1}; /* free since the start: visible at 0 */
        key->n = 1;
    }
    for (uint32_t n = 1; n <= SIM_SHARDS_MAX; n++) {
        S->key_shard[n] = xcalloc(S->nkeys, 1);
        for (uint32_t k = 0; k < S->nkeys; k++)
            S->key_shard[n][k] = (uint8_t)tk_cmd_shard(S->keys[k].name, 6, n);
    }
    S->nclients = o->clients;
    for (uint32_t i = 0; i <= S->nclients; i++) {
        struct client *cl = &S->clients[i];
        cl->id = (int)i;
        snprintf(cl->owner, sizeof(cl->owner), "c%03u", i);
        cl->owner_len = 4;
        cl->hint = -1;
        cl->grace_us = rnd(S, 200 * MS, 3 * SEC);
    }
    c->hooks.ctx = S;
    c->hooks.create = hook_create;
    c->hooks.destroy = hook_destroy;
    c->hooks.process = hook_process;
    return S;
}

void sim_nodes_destroy(struct sim_nodes *S)
{
    if (S == NULL)
        return;
    for (uint32_t i = 0; i < SIM_NODES_MAX; i++)
        if (S->procs[i] != NULL) {
            struct sim_node n = {.slot = (int)i};
            hook_destroy(S, &n);
        }
    for (uint32_t k = 0; k < S->nkeys; k++)
        free(S->keys[k].v);
    free(S->keys);
    for (uint32_t n = 1; n <= SIM_SHARDS_MAX; n++)
        free(S->key_shard[n]);
    for (uint32_t i = 0; i <= S->nclients; i++) {
        free(S->clients[i].out);
        free(S->clients[i].holds);
    }
    free(S->reqs);
    free(S);
}

void sim_nodes_stats(const struct sim_nodes *S, struct sim_nodes_stats *st)
{
    *st = S->st;
}
