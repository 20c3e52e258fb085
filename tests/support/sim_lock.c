/* The lock-table layer of the Raft simulation (see sim_lock.h). */
#include "tests/support/sim_lock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SIM_MS 1000ull

static void *xrealloc(void *p, size_t n)
{
    p = realloc(p, n ? n : 1);
    if (p == NULL) {
        fprintf(stderr, "sim_raft: out of memory\n");
        abort();
    }
    return p;
}

/* Keys are "k00".."k15". */
static int key_index(const char *k, size_t len)
{
    if (len != 3 || k[0] != 'k' || k[1] < '0' || k[1] > '9' || k[2] < '0' || k[2] > '9')
        return -1;
    int i = (k[1] - '0') * 10 + (k[2] - '0');
    return i < SIM_LOCK_KEYS ? i : -1;
}

/* Per token: when a node first applied its grant, and whether its expiry
 * committed. Tokens of one domain lie in a narrow range above the first. */
static void token_note(struct sim_lock *L, uint64_t token, uint64_t at, uint32_t lease_ms)
{
    if (L->token_base == 0)
        L->token_base = token;
    if (token < L->token_base)
        sim_fail(L->c, "token %llu below the first one", (unsigned long long)token);
    uint64_t i = token - L->token_base;
    if (i >= L->token_cap) {
        uint64_t cap = L->token_cap ? L->token_cap : 1024;
        while (cap <= i)
            cap *= 2;
        if (cap > (1u << 26))
            sim_fail(L->c, "token range too wide");
        L->grant_at = xrealloc(L->grant_at, cap * sizeof(uint64_t));
        L->grant_lease = xrealloc(L->grant_lease, cap * sizeof(uint32_t));
        L->expired = xrealloc(L->expired, cap);
        memset(L->grant_at + L->token_cap, 0, (cap - L->token_cap) * sizeof(uint64_t));
        memset(L->grant_lease + L->token_cap, 0, (cap - L->token_cap) * sizeof(uint32_t));
        memset(L->expired + L->token_cap, 0, cap - L->token_cap);
        L->token_cap = cap;
    }
    if (lease_ms != 0 && L->grant_at[i] == 0) {
        L->grant_at[i] = at;
        L->grant_lease[i] = lease_ms;
    }
}

static uint64_t token_slot(struct sim_lock *L, uint64_t token)
{
    token_note(L, token, 0, 0);
    return token - L->token_base;
}

/* The committed command at the model's next index, first application. */
static void model_apply(struct sim_lock *L, const struct tk_cmd *c)
{
    int k = key_index(c->key, c->key_len);
    if (k < 0)
        sim_fail(L->c, "unknown key in a committed command");
    struct sim_lock_model_key *m = &L->model[k];
    uint64_t now = L->c->now;
    switch (c->type) {
        case TK_CMD_GRANT:
            if (m->token != 0)
                sim_fail(L->c, "model: GRANT on a held key");
            break;
        case TK_CMD_HANDOFF:
        case TK_CMD_RELEASE:
        case TK_CMD_EXPIRE:
            if (m->token == 0 || m->token != c->old_token)
                sim_fail(L->c, "model: %d on the wrong holder", c->type);
            if (c->type == TK_CMD_EXPIRE || (c->type == TK_CMD_HANDOFF && c->expired)) {
                /* No early expiry: the lease ran out since the first apply of
                 * the grant (which is never before its commit). */
                uint64_t i = token_slot(L, c->old_token);
                if (L->grant_at[i] != 0 &&
                    now < L->grant_at[i] + (uint64_t)L->grant_lease[i] * SIM_MS)
                    sim_fail(L->c, "expiry of token %llu committed early",
                             (unsigned long long)c->old_token);
                L->expired[i] = 1;
            }
            break;
        default:
            sim_fail(L->c, "model: bad command");
    }
    if (tk_cmd_grants(c)) {
        if (c->token <= L->model_token)
            sim_fail(L->c, "model: token %llu not above %llu", (unsigned long long)c->token,
                     (unsigned long long)L->model_token);
        L->model_token = c->token;
        m->token = c->token;
        m->lease_ms = c->lease_ms;
        token_note(L, c->token, now, c->lease_ms);
    } else {
        m->token = 0;
    }
}

static void on_reply(void *ctx, const struct tk_lock_reply *r);
static void on_propose(void *ctx, const struct tk_cmd *c);

static struct tk_lock_sink sink_of(struct sim_lock *L)
{
    struct tk_lock_sink s = {.reply = on_reply, .propose = on_propose, .ctx = L};
    return s;
}

static struct sim_lock_node *lnode(struct sim_lock *L, struct sim_node *n)
{
    struct sim_lock_node *ln = &L->nodes[n->slot];
    if (ln->t == NULL) {
        struct tk_lock_limits lim = {.keys_max = 64, .waiters_per_key_max = 6, .waiters_max = 64};
        ln->t = tk_lock_create(&lim);
        if (ln->t == NULL)
            sim_fail(L->c, "tk_lock_create");
        n->user = ln;
    }
    return ln;
}

static void lock_follow(struct sim_lock *L, struct sim_lock_node *ln)
{
    (void)L;
    if (!tk_lock_is_leader(ln->t))
        return;
    tk_lock_follow(ln->t);
    ln->lead_term = 0;
    ln->n_batch = 0;
}

/* Keeps the table's role in line with the Raft role. */
static void lock_sync_role(struct sim_lock *L, struct sim_node *n)
{
    struct sim_lock_node *ln = lnode(L, n);
    uint8_t role = tk_raft_role(n->r);
    uint64_t term = tk_raft_term(n->r);
    if (tk_lock_is_leader(ln->t) && (role != TK_RAFT_LEADER || term != ln->lead_term))
        lock_follow(L, ln);
}

static void on_propose(void *ctx, const struct tk_cmd *c)
{
    struct sim_lock *L = ctx;
    struct sim_lock_node *ln = lnode(L, L->cur);
    if (ln->n_batch == SIM_LOCK_BATCH_MAX)
        sim_fail(L->c, "batch overflow");
    ln->batch[ln->n_batch++] = *c;
    L->proposals++;
}

static void on_reply(void *ctx, const struct tk_lock_reply *r)
{
    struct sim_lock *L = ctx;
    struct sim_cluster *c = L->c;
    if (r->id == 0 || r->id > L->n_reqs)
        sim_fail(c, "reply to an unknown request");
    struct sim_lock_req *q = &L->reqs[r->id - 1];
    struct sim_lock_node *ln = lnode(L, L->cur);
    if (q->answered)
        sim_fail(c, "request %llu answered twice", (unsigned long long)r->id);
    if (q->node != L->cur->slot || q->epoch != ln->epoch)
        sim_fail(c, "reply from another leadership");
    q->answered = true;
    switch (r->type) {
        case 'G': {
            L->g++;
            if (q->type != 'A')
                sim_fail(c, "G to a non-acquire");
            /* Tokens of one leadership rise in reply order (log order). */
            if (r->token <= ln->last_g_token)
                sim_fail(c, "G token %llu not above %llu", (unsigned long long)r->token,
                         (unsigned long long)ln->last_g_token);
            ln->last_g_token = r->token;
            /* FIFO within a leader's term. */
            if (q->arrival <= ln->last_g_arrival[q->key])
                sim_fail(c, "FIFO: request %llu granted after a later arrival",
                         (unsigned long long)r->id);
            ln->last_g_arrival[q->key] = q->arrival;
            uint64_t slot = token_slot(L, r->token);
            if (L->expired[slot])
                sim_fail(c, "G for token %llu whose expiry committed",
                         (unsigned long long)r->token);
            /* Mutual exclusion as the clients see it: a lease counted from the
             * request's sending; nobody else's window may still be open. */
            uint64_t end = q->sent_us + (uint64_t)q->lease_ms * SIM_MS;
            if (end <= c->now)
                break; /* too late to use: the client does not enter */
            for (int o = 0; o < SIM_LOCK_CLIENTS; o++) {
                struct sim_lock_holding *h = &L->hold[o][q->key];
                if (h->held && h->end_us > c->now && o != q->client)
                    sim_fail(c, "two holders of k%d: client %d (token %llu) and %d (token %llu)",
                             q->key, o, (unsigned long long)h->token, q->client,
                             (unsigned long long)r->token);
            }
            struct sim_lock_holding *h = &L->hold[q->client][q->key];
            h->held = true;
            h->token = r->token;
            h->end_us = end;
            break;
        }
        case 'R':
            L->r++;
            break;
        case 'T':
            L->t++;
            break;
        case 'B':
            L->b++;
            break;
        case 'N':
            L->n++;
            break;
        case 'Q':
            L->q++;
            break;
        default:
            sim_fail(c, "reply type %c", r->type);
    }
}

/* Hands the table's proposals to Raft as one DATA entry with tokens. */
static void lock_flush(struct sim_lock *L, struct sim_node *n)
{
    struct sim_lock_node *ln = lnode(L, n);
    if (ln->flushing)
        return;
    ln->flushing = true;
    while (ln->n_batch > 0 && n->alive) {
        if (!tk_lock_is_leader(ln->t) || tk_raft_role(n->r) != TK_RAFT_LEADER) {
            lock_follow(L, ln);
            break;
        }
        struct tk_cmd cmds[SIM_LOCK_BATCH_MAX];
        uint32_t count = ln->n_batch;
        memcpy(cmds, ln->batch, count * sizeof(cmds[0]));
        ln->n_batch = 0;
        uint64_t first = tk_raft_next_token(n->r);
        uint32_t tokens = 0;
        uint8_t buf[SIM_LOCK_BATCH_MAX * TK_CMD_ENCODED_MAX];
        size_t len = 0;
        for (uint32_t i = 0; i < count; i++) {
            if (tk_cmd_grants(&cmds[i]))
                cmds[i].token = first + tokens++;
            size_t w = tk_cmd_encode(&cmds[i], buf + len, sizeof(buf) - len);
            if (w == 0)
                sim_fail(L->c, "encode");
            len += w;
        }
        int rv = sim_propose(L->c, n->slot, buf, (uint32_t)len, tokens);
        if (rv != TK_OK) {
            /* Raft cannot take it: this table stops leading for the term. */
            ln->blocked_term = tk_raft_term(n->r);
            lock_follow(L, ln);
            break;
        }
        L->batches++;
    }
    ln->flushing = false;
}

static void hook_apply(void *ctx, struct sim_node *n, const struct tk_raft_entry *e)
{
    struct sim_lock *L = ctx;
    struct sim_lock_node *ln = lnode(L, n);
    lock_sync_role(L, n);
    bool first = e->index > L->model_index;
    if (first && e->index != L->model_index + 1)
        sim_fail(L->c, "model gap at %llu", (unsigned long long)e->index);
    if (first)
        L->model_index = e->index;
    if (e->type != TK_RAFT_DATA)
        return;
    struct tk_lock_sink sink = sink_of(L);
    struct sim_node *prev = L->cur;
    L->cur = n;
    size_t pos = 0;
    uint64_t token = e->token_first;
    while (pos < e->len) {
        struct tk_cmd c;
        size_t used = 0;
        if (tk_cmd_decode(e->data + pos, e->len - pos, &c, &used) != TK_OK)
            sim_fail(L->c, "a committed batch does not decode");
        pos += used;
        if (tk_cmd_grants(&c) && c.token != token++)
            sim_fail(L->c, "command token outside the entry's range");
        if (first)
            model_apply(L, &c);
        if (L->trace)
            fprintf(stderr, "t=%llu node %d apply %llu type %d %.*s old %llu new %llu%s\n",
                    (unsigned long long)L->c->now, n->slot, (unsigned long long)e->index, c.type,
                    (int)c.key_len, c.key, (unsigned long long)c.old_token,
                    (unsigned long long)c.token, tk_lock_is_leader(ln->t) ? " (leader)" : "");
        tk_lock_apply(ln->t, L->c->now, &c, &sink);
    }
    if (token != e->token_first + e->token_count)
        sim_fail(L->c, "entry token_count does not match its grants");
    L->cur = prev;
}

static size_t hook_snapshot(void *ctx, struct sim_node *n, uint8_t **out);

struct holder_buf {
    uint8_t *p;
    size_t len, cap;
    uint32_t count;
};

static void holder_add(void *ctx, const struct tk_cmd *grant)
{
    struct holder_buf *b = ctx;
    if (b->len + TK_CMD_ENCODED_MAX > b->cap) {
        b->cap = b->cap ? b->cap * 2 : 1024;
        b->p = xrealloc(b->p, b->cap);
    }
    b->len += tk_cmd_encode(grant, b->p + b->len, b->cap - b->len);
    b->count++;
}

static size_t hook_snapshot(void *ctx, struct sim_node *n, uint8_t **out)
{
    struct sim_lock *L = ctx;
    struct sim_lock_node *ln = lnode(L, n);
    struct holder_buf b = {0};
    tk_lock_each_holder(ln->t, holder_add, &b);
    if (L->trace) {
        fprintf(stderr, "t=%llu node %d snapshot at %llu:", (unsigned long long)L->c->now, n->slot,
                (unsigned long long)n->applied);
        size_t pos = 0;
        while (pos < b.len) {
            struct tk_cmd c;
            size_t used = 0;
            if (tk_cmd_decode(b.p + pos, b.len - pos, &c, &used) != TK_OK)
                break;
            fprintf(stderr, " %.*s=%llu", (int)c.key_len, c.key, (unsigned long long)c.token);
            pos += used;
        }
        fputc('\n', stderr);
    }
    *out = b.p;
    return b.len;
}

static void hook_install(void *ctx, struct sim_node *n, const uint8_t *data, size_t len)
{
    struct sim_lock *L = ctx;
    struct sim_lock_node *ln = lnode(L, n);
    lock_follow(L, ln);
    tk_lock_clear(ln->t);
    if (L->trace)
        fprintf(stderr, "t=%llu node %d install at %llu\n", (unsigned long long)L->c->now, n->slot,
                (unsigned long long)n->applied);
    size_t pos = 0;
    while (pos < len) {
        struct tk_cmd c;
        size_t used = 0;
        if (tk_cmd_decode(data + pos, len - pos, &c, &used) != TK_OK)
            sim_fail(L->c, "snapshot payload does not decode");
        tk_lock_restore(ln->t, L->c->now, &c);
        if (L->trace)
            fprintf(stderr, "    restore %.*s token %llu\n", (int)c.key_len, c.key,
                    (unsigned long long)c.token);
        pos += used;
    }
}

static void hook_after_step(void *ctx, struct sim_node *n, const struct tk_raft_update *up)
{
    struct sim_lock *L = ctx;
    struct sim_lock_node *ln = lnode(L, n);
    lock_sync_role(L, n);
    /* Lead once this term's NOOP is applied (every earlier entry too). */
    if (up->role == TK_RAFT_LEADER && !tk_lock_is_leader(ln->t) && up->term != ln->blocked_term) {
        struct tk_raft_status st;
        tk_raft_status(n->r, &st);
        if (n->applied >= st.term_start_index && st.transfer_target == 0) {
            tk_lock_lead(ln->t, L->c->now);
            ln->lead_term = up->term;
            ln->epoch++;
            ln->last_g_token = 0;
            memset(ln->last_g_arrival, 0, sizeof(ln->last_g_arrival));
            ln->wake_us = L->c->now;
        }
    }
    lock_flush(L, n);
}

/* A client sends a request to a node that leads. */
void sim_lock_client(struct sim_lock *L, int slot, int client)
{
    struct sim_node *n = &L->c->nodes[slot];
    struct sim_lock_node *ln = lnode(L, n);
    struct sim_cluster *c = L->c;
    int key = (int)tk_prng_range(&L->prng, 0, SIM_LOCK_KEYS - 1);
    struct sim_lock_holding *h = &L->hold[client][key];
    char owner[16], keyname[8];
    snprintf(owner, sizeof(owner), "owner-%d", client);
    snprintf(keyname, sizeof(keyname), "k%02d", key);
    struct tk_lock_req req;
    memset(&req, 0, sizeof(req));
    req.client = (uint64_t)client + 1;
    req.key = keyname;
    req.key_len = 3;
    req.owner = owner;
    req.owner_len = strlen(owner);
    uint64_t dice = tk_prng_range(&L->prng, 0, 99);
    if (h->held && (dice < 60 || h->end_us <= c->now)) {
        req.type = 'R';
        req.token = h->token;
        h->held = false; /* the client stops using it when it sends R */
    } else if (dice < 90) {
        req.type = 'A';
        req.lease_ms = (uint32_t)tk_prng_range(&L->prng, 1000, 3000);
        req.wait_ms =
            (uint32_t)(tk_prng_range(&L->prng, 0, 3) == 0 ? 0 : tk_prng_range(&L->prng, 1, 2500));
    } else if (dice < 95) {
        req.type = 'R'; /* a wrong token: N */
        req.token = tk_prng_range(&L->prng, 1, 1000);
    } else {
        req.type = 'Q';
        req.owner = NULL;
        req.owner_len = 0;
    }
    if (L->n_reqs == L->cap_reqs) {
        L->cap_reqs = L->cap_reqs ? L->cap_reqs * 2 : 1024;
        L->reqs = xrealloc(L->reqs, L->cap_reqs * sizeof(*L->reqs));
    }
    struct sim_lock_req *q = &L->reqs[L->n_reqs++];
    memset(q, 0, sizeof(*q));
    q->client = client;
    q->node = n->slot;
    q->epoch = ln->epoch;
    q->type = req.type;
    q->key = key;
    q->token = req.token;
    q->lease_ms = req.lease_ms;
    q->sent_us = c->now;
    q->arrival = ++L->arrivals;
    req.id = L->n_reqs;
    struct tk_lock_sink sink = sink_of(L);
    struct sim_node *prev = L->cur;
    L->cur = n;
    int rv = tk_lock_request(ln->t, c->now, &req, &sink);
    L->cur = prev;
    if (rv != TK_OK && rv != TK_EFULL)
        sim_fail(c, "tk_lock_request: %s", tk_strerror(rv));
    /* Often leave the proposal for the node's next step, as a Raft thread
     * draining shard queues would: entries then carry several commands
     * and several tokens. */
    if (tk_prng_range(&L->prng, 0, 2) == 0)
        lock_flush(L, n);
}

void sim_lock_tick_due(struct sim_lock *L)
{
    struct sim_cluster *c = L->c;
    for (uint32_t i = 0; i < c->n_nodes; i++) {
        struct sim_node *n = &c->nodes[i];
        struct sim_lock_node *ln = &L->nodes[i];
        if (!n->alive || n->paused || ln->t == NULL || !tk_lock_is_leader(ln->t))
            continue;
        if (ln->wake_us > c->now)
            continue;
        struct tk_lock_sink sink = sink_of(L);
        struct sim_node *prev = L->cur;
        L->cur = n;
        tk_lock_tick(ln->t, c->now, &sink);
        L->cur = prev;
        lock_flush(L, n);
        /* A deadline may stay due (a lease of a key in flight): poll. */
        uint64_t d = tk_lock_next_deadline(ln->t);
        ln->wake_us = d > c->now ? d : c->now + SIM_MS;
    }
}

uint64_t sim_lock_next_wake(struct sim_lock *L)
{
    uint64_t t = UINT64_MAX;
    struct sim_cluster *c = L->c;
    for (uint32_t i = 0; i < c->n_nodes; i++) {
        struct sim_lock_node *ln = &L->nodes[i];
        if (!c->nodes[i].alive || c->nodes[i].paused || ln->t == NULL || !tk_lock_is_leader(ln->t))
            continue;
        uint64_t d = tk_lock_next_deadline(ln->t);
        if (d < ln->wake_us)
            ln->wake_us = d > c->now ? d : c->now;
        t = TK_MIN(t, ln->wake_us);
    }
    return t;
}

/* Every live node at the model's index holds the model's state. */
struct cmp_ctx {
    struct sim_lock *L;
    uint32_t count;
};

static void cmp_holder(void *ctx, const struct tk_cmd *g)
{
    struct cmp_ctx *x = ctx;
    int k = key_index(g->key, g->key_len);
    if (k < 0 || x->L->model[k].token != g->token)
        sim_fail(x->L->c, "a node's lock table differs from the committed model at k%d", k);
    x->count++;
}

void sim_lock_compare(struct sim_lock *L)
{
    struct sim_cluster *c = L->c;
    uint32_t held = 0;
    for (int k = 0; k < SIM_LOCK_KEYS; k++)
        held += L->model[k].token != 0;
    for (uint32_t i = 0; i < c->n_nodes; i++) {
        struct sim_node *n = &c->nodes[i];
        if (!n->alive || L->nodes[i].t == NULL || n->applied != L->model_index)
            continue;
        struct cmp_ctx x = {L, 0};
        tk_lock_each_holder(L->nodes[i].t, cmp_holder, &x);
        if (x.count != held)
            sim_fail(c, "node %u holds %u keys, the model %u", i, x.count, held);
        tk_lock_check(L->nodes[i].t);
    }
}

void sim_lock_free(struct sim_lock *L)
{
    for (int i = 0; i < SIM_NODES_MAX; i++)
        tk_lock_destroy(L->nodes[i].t);
    free(L->reqs);
    free(L->grant_at);
    free(L->grant_lease);
    free(L->expired);
}

bool sim_lock_leads(struct sim_lock *L, int slot)
{
    struct sim_lock_node *ln = &L->nodes[slot];
    return ln->t != NULL && tk_lock_is_leader(ln->t);
}

void sim_lock_init(struct sim_lock *L, struct sim_cluster *c, uint64_t seed)
{
    memset(L, 0, sizeof(*L));
    L->c = c;
    L->trace = getenv("TK_SIM_TRACE") != NULL;
    tk_prng_seed(&L->prng, seed * 31 + 7);
    c->hooks.ctx = L;
    c->hooks.apply = hook_apply;
    c->hooks.snapshot = hook_snapshot;
    c->hooks.install = hook_install;
    c->hooks.after_step = hook_after_step;
}
