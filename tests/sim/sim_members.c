/* Deterministic simulation of the membership protocol: 3 or 5 addresses of
 * --peers, a process at each running the production node code (a Raft
 * driver, raft/driver.h, with its membership protocol, raft/membership.c,
 * and one shard, shard/shard.h), over a network of authenticated links by
 * address, with clients that acquire and release keys.
 *
 * What happens, per seed:
 *  - every process starts fresh: the first domain must come from the
 *    agreement of all of --peers (raft/boot.h), with links cut at random
 *    while it runs;
 *  - faults, at random moments: a member restarts under a fresh NodeId at
 *    its address (it joins, is promoted, its old identity is removed), a
 *    process pauses, a paused member is replaced while paused and wakes up
 *    later (a removed identity that comes back), links are cut one way or
 *    both and healed, wall clocks step (within --max-clock-drift-ms of one
 *    another) and monotonic clocks jump forward a little; joins race with
 *    elections because restarts come at any time;
 *  - in half the seeds, a majority loss: a majority of the processes
 *    restart fresh at once with --force-new-domain (in half of those one
 *    of them without the flag: an operator's slip), while a survivor may
 *    be paused and links between some of the fresh nodes are cut and
 *    flap; once the new domain exists the survivors restart fresh (the
 *    operator's steps of docs/operations.md);
 *  - then every fault heals and the cluster must serve again.
 *
 * Checked along every run, across every domain ever bootstrapped:
 *  - at most one client holds a key at any real time (a client holds from
 *    its G until it sends the release, or until its lease, counted from
 *    its send on the true clock, runs out);
 *  - tokens of a key strictly increase in grant order, and no token is
 *    granted twice, whatever the domain;
 *  - at most one process serves per (domain, term);
 *  - at most one domain grants at a time: once a newer domain granted, an
 *    older one never grants again;
 *  - every configuration a driver holds passes tk_raft_config_check, a
 *    process never changes domain, and the core's invariants hold
 *    (tk_raft_check: one membership change in flight among them);
 *  - liveness once healed: a serving leader, a grant, and --peers-many
 *    voters.
 *
 * Environment: TK_SEED=n replays one seed (verbose); TK_SIM_SEEDS=n seeds
 * (default 400), TK_SIM_FIRST=n the first one. Exit 0 when every seed
 * passes; a failure prints its seed and aborts.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "raft/driver.h"
#include "raft/wire.h"
#include "shard/shard.h"

#define MS 1000ull
#define SEC 1000000ull
#define ADDRS_MAX 5
#define PROCS_MAX 96
#define KEYS 6
#define CLIENTS 8
#define QMAX 8192
#define PKTS_MAX 200000
#define GRANTS_MAX 20000
#define T0_MONO (1000 * SEC)
#define WALL0 UINT64_C(1800000000000000)
#define DRIFT_US (50 * MS)
#define HOLD_US (2500 * MS)
#define LEASE_MAX_MS 2500
#define FAULTS_END (24 * SEC)
#define RUN_END (48 * SEC)

static volatile uint64_t current_seed;

static void on_abort(int sig)
{
    (void)sig;
    char buf[96];
    int n =
        snprintf(buf, sizeof(buf), "sim_members: aborted while running seed %llu (TK_SEED=%llu)\n",
                 (unsigned long long)current_seed, (unsigned long long)current_seed);
    if (n > 0)
        (void)!write(2, buf, (size_t)n);
}

struct qmsg {
    uint32_t src, kind, len;
    uint8_t data[TK_MSG_ENCODED_MAX];
};

struct queue {
    struct qmsg *m;
    uint32_t head, len;
};

struct sim;

struct proc {
    struct sim *S;
    int idx, addr;
    uint64_t id;
    bool alive, paused, forced, zombie;
    struct tk_driver *d;
    struct tk_shard *sh;
    struct queue to_shard, to_driver;
    int32_t rate_ppm;
    uint64_t mono_jump;
    int64_t wall_off;
    uint64_t last_mono;
    bool has_cfg; /* a domain seen: cfg_domain_* */
    uint64_t cfg_domain_lo, cfg_domain_hi;
};

struct pkt {
    uint64_t at, seq;
    int from, to; /* processes */
    uint32_t len;
    uint8_t *bytes;
};

enum { C_IDLE, C_ASKING, C_HOLDING, C_RELEASING };

struct client {
    int state;
    int proc;
    uint32_t gen;
    uint64_t id, sent_at, lease_end, release_at, token;
    int key;
};

struct grant {
    uint64_t token, at, end; /* end: when the holder stopped (or its lease) */
    uint64_t domain_lo, domain_hi;
    int key, client;
};

struct term_leader {
    uint64_t domain_lo, domain_hi, term, id;
};

struct sim {
    struct tk_prng prng;
    bool verbose;
    uint64_t now; /* true time since the start */
    uint32_t naddrs;
    struct proc procs[PROCS_MAX];
    int nprocs;
    int at_addr[ADDRS_MAX];                   /* the newest process at each address, -1: none */
    uint64_t cut_until[ADDRS_MAX][ADDRS_MAX]; /* a link is cut until then (true time) */
    struct pkt *heap;
    uint32_t heap_n;
    uint64_t seq, idgen;
    uint64_t fifo_at[PROCS_MAX][PROCS_MAX];
    struct tk_wire_scratch scratch;
    struct client clients[CLIENTS];
    struct grant *grants;
    uint32_t ngrants;
    struct term_leader *leaders;
    uint32_t nleaders;
    uint64_t domains[64][2]; /* in the order of their first grant */
    uint32_t ndomains;
    uint64_t last_serving_at, checks;
    /* the scenario */
    uint64_t next_fault, loss_at, survivors_restart_at;
    int loss_first_proc; /* the first process started at the majority loss */
    bool loss_done;
    /* counters */
    uint64_t restarts, zombies, pauses, cuts, clock_steps, losses, forced_domains, g, joins,
        removed_exits, bootstraps;
};

#define FAIL(S, ...)                                                                          \
    do {                                                                                      \
        fprintf(stderr, "SIM FAILURE seed=%llu t=%.3f s: ", (unsigned long long)current_seed, \
                (double)(S)->now / 1e6);                                                      \
        fprintf(stderr, __VA_ARGS__);                                                         \
        fprintf(stderr, "\n");                                                                \
        abort();                                                                              \
    } while (0)

static uint64_t rnd(struct sim *S, uint64_t lo, uint64_t hi)
{
    return tk_prng_range(&S->prng, lo, hi);
}

static bool chance(struct sim *S, uint32_t one_in)
{
    return rnd(S, 0, one_in - 1) == 0;
}

/* ---- clocks ------------------------------------------------------------ */

static uint64_t mono_of(struct proc *P)
{
    int64_t skew = (int64_t)P->S->now * P->rate_ppm / 1000000;
    uint64_t t = T0_MONO + P->S->now + (uint64_t)((int64_t)P->mono_jump + skew);
    if (t < P->last_mono)
        t = P->last_mono;
    P->last_mono = t;
    return t;
}

static uint64_t wall_of(const struct proc *P)
{
    return (uint64_t)((int64_t)(WALL0 + P->S->now) + P->wall_off);
}

static void clock_in(struct proc *P)
{
    tk_driver_clock(P->d, mono_of(P), wall_of(P));
}

/* ---- the network ------------------------------------------------------- */

static bool is_cut(const struct sim *S, int a, int b)
{
    return S->now < S->cut_until[a][b];
}

static bool pkt_less(const struct pkt *a, const struct pkt *b)
{
    return a->at < b->at || (a->at == b->at && a->seq < b->seq);
}

static void heap_push(struct sim *S, struct pkt p)
{
    if (S->heap_n >= PKTS_MAX)
        FAIL(S, "the network holds %u packets: a message storm", S->heap_n);
    uint32_t i = S->heap_n++;
    S->heap[i] = p;
    while (i > 0 && pkt_less(&S->heap[i], &S->heap[(i - 1) / 2])) {
        struct pkt t = S->heap[i];
        S->heap[i] = S->heap[(i - 1) / 2];
        S->heap[(i - 1) / 2] = t;
        i = (i - 1) / 2;
    }
}

static struct pkt heap_pop(struct sim *S)
{
    struct pkt top = S->heap[0];
    S->heap[0] = S->heap[--S->heap_n];
    uint32_t i = 0;
    for (;;) {
        uint32_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < S->heap_n && pkt_less(&S->heap[l], &S->heap[m]))
            m = l;
        if (r < S->heap_n && pkt_less(&S->heap[r], &S->heap[m]))
            m = r;
        if (m == i)
            break;
        struct pkt t = S->heap[i];
        S->heap[i] = S->heap[m];
        S->heap[m] = t;
        i = m;
    }
    return top;
}

static int addr_of(const char *addr)
{
    int a = -1;
    if (addr == NULL || sscanf(addr, "10.0.0.%d:7100", &a) != 1 || a < 0 || a >= ADDRS_MAX)
        return -1;
    return a;
}

/* A frame from process `from` to process `to` over their link: FIFO per
 * pair, a few milliseconds, sometimes much more. */
static void transmit(struct sim *S, int from, int to, const struct tk_wire_frame *f)
{
    struct proc *A = &S->procs[from], *B = &S->procs[to];
    if (!B->alive || is_cut(S, A->addr, B->addr))
        return;
    size_t len = tk_wire_encoded_len(f);
    uint8_t *bytes = malloc(len);
    if (bytes == NULL || tk_wire_encode(f, bytes, len) != len)
        FAIL(S, "a frame does not encode");
    uint64_t lat = chance(S, 50) ? rnd(S, 20 * MS, 300 * MS) : rnd(S, 200, 4 * MS);
    uint64_t at = TK_MAX(S->now + lat, S->fifo_at[from][to]);
    S->fifo_at[from][to] = at;
    heap_push(S, (struct pkt){.at = at,
                              .seq = S->seq++,
                              .from = from,
                              .to = to,
                              .len = (uint32_t)len,
                              .bytes = bytes});
}

static void io_send(void *ctx, const struct tk_wire_frame *f, const char *addr)
{
    struct proc *P = ctx;
    struct sim *S = P->S;
    int a = addr_of(addr);
    if (a < 0 || a >= (int)S->naddrs)
        FAIL(S, "process %d sent to an address outside --peers: %s", P->idx,
             addr ? addr : "(null)");
    int to = S->at_addr[a];
    if (to < 0 || to == P->idx)
        return;
    /* The link to an address proved who is there: an old identity's
     * traffic never reaches a new process. */
    if (f->msg.to && S->procs[to].id != f->msg.to)
        return;
    transmit(S, P->idx, to, f);
}

static void io_reply(void *ctx, uint64_t link, struct tk_wire_frame *f)
{
    struct proc *P = ctx;
    transmit(P->S, P->idx, (int)link - 1, f);
}

static void io_close_link(void *ctx, uint64_t link)
{
    (void)ctx;
    (void)link;
}

static uint64_t io_link_id(void *ctx, const char *addr)
{
    struct proc *P = ctx;
    struct sim *S = P->S;
    int a = addr_of(addr);
    if (a < 0 || a >= (int)S->naddrs || S->at_addr[a] < 0 || is_cut(S, P->addr, a))
        return 0;
    return S->procs[S->at_addr[a]].id;
}

static void io_log(void *ctx, int level, const char *line)
{
    struct proc *P = ctx;
    if (P->S->verbose)
        fprintf(stderr, "t=%.3f p%d@%d %016llx [%d] %s\n", (double)P->S->now / 1e6, P->idx, P->addr,
                (unsigned long long)P->id, level, line);
}

static void io_event(void *ctx, int ev, uint64_t a, uint64_t b)
{
    struct proc *P = ctx;
    if (ev == TK_DRIVER_EV_BOOTSTRAP)
        P->S->bootstraps++;
    if (P->S->verbose)
        fprintf(stderr, "t=%.3f p%d event %d %llu %llu\n", (double)P->S->now / 1e6, P->idx, ev,
                (unsigned long long)a, (unsigned long long)b);
}

static void io_fatal(void *ctx, const char *why)
{
    struct proc *P = ctx;
    FAIL(P->S, "process %d cannot load a snapshot: %s", P->idx, why);
}

/* ---- a process: driver and shard joined by FIFO queues ----------------- */

struct qctx {
    struct proc *P;
    uint32_t idx;
};
static struct qctx qctx_of[PROCS_MAX][2];

static void *q_put(void *c, uint32_t dst, uint32_t kind, uint32_t len)
{
    struct qctx *cx = c;
    struct queue *q = dst == TK_MSG_TO_DRIVER ? &cx->P->to_driver : &cx->P->to_shard;
    if (q->len >= QMAX)
        FAIL(cx->P->S, "a queue of process %d overflows", cx->P->idx);
    struct qmsg *m = &q->m[(q->head + q->len++) % QMAX];
    m->src = cx->idx;
    m->kind = kind;
    m->len = len;
    return m->data;
}

static void check_grant(struct sim *S, struct proc *P, struct client *c, uint64_t token);

static void sh_reply(void *ctx, const struct tk_msg_reply *r)
{
    struct proc *P = ((struct qctx *)ctx)->P;
    struct sim *S = P->S;
    uint32_t ci = tk_client_slot(r->client) - 1;
    struct client *c = &S->clients[ci];
    if (tk_client_gen(r->client) != c->gen || c->proc != P->idx)
        return; /* a connection closed since */
    if (c->state == C_ASKING && r->id == c->id) {
        if (r->type == 'G' && S->now >= c->lease_end)
            c->state = C_IDLE; /* late: the client reports the lease as already lost */
        else if (r->type == 'G')
            check_grant(S, P, c, r->token);
        else
            c->state = C_IDLE;
    } else if (c->state == C_RELEASING && r->id == c->id) {
        c->state = C_IDLE;
    }
}

static void client_lost(struct sim *S, struct client *c)
{
    /* Connection gone: an acquire in flight is indeterminate (never
     * entered), a holder keeps its lease until it runs out. */
    c->gen++;
    if (c->state == C_ASKING || c->state == C_RELEASING)
        c->state = C_IDLE;
    (void)S;
}

static void sh_refuse(void *ctx, uint64_t client, uint64_t id, uint8_t reason)
{
    (void)id;
    (void)reason;
    struct proc *P = ((struct qctx *)ctx)->P;
    struct client *c = &P->S->clients[tk_client_slot(client) - 1];
    if (tk_client_gen(client) == c->gen && c->proc == P->idx)
        client_lost(P->S, c);
}

static void sh_role(void *ctx, bool lead, const char *addr)
{
    (void)addr;
    struct proc *P = ((struct qctx *)ctx)->P;
    if (lead)
        return;
    for (int i = 0; i < CLIENTS; i++)
        if (P->S->clients[i].proc == P->idx && P->S->clients[i].state != C_HOLDING)
            client_lost(P->S, &P->S->clients[i]);
}

static uint64_t peers_hash(void)
{
    return UINT64_C(0x5eed5eed5eed5eed);
}

static int proc_start(struct sim *S, int addr, bool forced)
{
    if (S->nprocs >= PROCS_MAX)
        return -1;
    int i = S->nprocs++;
    struct proc *P = &S->procs[i];
    memset(P, 0, sizeof(*P));
    P->S = S;
    P->idx = i;
    P->addr = addr;
    P->id = (tk_prng_next(&S->prng) | 1) ^ ((uint64_t)++S->idgen << 48);
    P->alive = true;
    P->forced = forced;
    P->rate_ppm = (int32_t)rnd(S, 0, 800) - 400;
    P->wall_off = (int64_t)rnd(S, 0, DRIFT_US) - (int64_t)(DRIFT_US / 2);
    P->to_shard.m = calloc(QMAX, sizeof(struct qmsg));
    P->to_driver.m = calloc(QMAX, sizeof(struct qmsg));
    struct tk_driver_options o = {.nshards = 1, .proposals_max = tk_driver_proposals_for(64, 1)};
    tk_raft_options_default(&o.raft, P->id, tk_prng_next(&S->prng));
    o.raft.heartbeat_us = 50 * MS;
    o.raft.election_min_us = 500 * MS;
    o.raft.election_max_us = 600 * MS;
    o.raft.log_entries_max = 2048;
    o.raft.snapshot_entries = 256;
    o.raft.snapshot_trailing = 64;
    snprintf(o.advertise, sizeof(o.advertise), "10.0.0.%d:7400", addr);
    o.drift_us = DRIFT_US;
    o.hold_us = HOLD_US;
    o.cluster.npeers = S->naddrs;
    o.cluster.self = (uint32_t)addr;
    for (uint32_t a = 0; a < S->naddrs; a++)
        snprintf(o.cluster.peer_addr[a], sizeof(o.cluster.peer_addr[a]), "10.0.0.%u:7100", a);
    o.cluster.peers_hash = peers_hash();
    o.cluster.force_new_domain = forced;
    o.cluster.seed = tk_prng_next(&S->prng);
    qctx_of[i][0] = (struct qctx){P, 0};
    qctx_of[i][1] = (struct qctx){P, TK_MSG_TO_DRIVER};
    struct tk_msg_out dout = {.ctx = &qctx_of[i][1], .put = q_put};
    struct tk_driver_io io = {.ctx = P,
                              .send = io_send,
                              .reply = io_reply,
                              .close_link = io_close_link,
                              .link_id = io_link_id,
                              .log = io_log,
                              .event = io_event,
                              .fatal = io_fatal};
    P->d = tk_driver_create(&o, &dout, &io);
    struct tk_shard_options so = {.idx = 0,
                                  .nshards = 1,
                                  .limits = {.keys_max = 64,
                                             .waiters_per_key_max = 8,
                                             .waiters_max = 64,
                                             .drift_us = DRIFT_US},
                                  .requests_max = 1u << 16,
                                  /* every cut spans rounds, in pieces of one record */
                                  .cut_slice = 3,
                                  .cut_piece = 1};
    struct tk_msg_out sout = {.ctx = &qctx_of[i][0], .put = q_put};
    struct tk_shard_client cl = {
        .ctx = &qctx_of[i][0], .reply = sh_reply, .refuse = sh_refuse, .role = sh_role};
    P->sh = tk_shard_create(&so, &sout, &cl);
    if (P->d == NULL || P->sh == NULL)
        FAIL(S, "cannot create a process");
    S->at_addr[addr] = i;
    if (S->verbose)
        fprintf(stderr, "t=%.3f start p%d at %d id %016llx%s\n", (double)S->now / 1e6, i, addr,
                (unsigned long long)P->id, forced ? " --force-new-domain" : "");
    return i;
}

static void proc_kill(struct sim *S, int i)
{
    struct proc *P = &S->procs[i];
    if (!P->alive)
        return;
    P->alive = false;
    tk_shard_destroy(P->sh);
    tk_driver_destroy(P->d);
    free(P->to_shard.m);
    free(P->to_driver.m);
    P->sh = NULL;
    P->d = NULL;
    if (S->at_addr[P->addr] == i)
        S->at_addr[P->addr] = -1;
    for (int c = 0; c < CLIENTS; c++)
        if (S->clients[c].proc == i && S->clients[c].state != C_HOLDING)
            client_lost(S, &S->clients[c]);
}

/* A fresh process at addr (a restart: new NodeId, no state). */
static int proc_restart(struct sim *S, int addr, bool forced)
{
    if (S->at_addr[addr] >= 0)
        proc_kill(S, S->at_addr[addr]);
    return proc_start(S, addr, forced);
}

/* ---- checks ------------------------------------------------------------- */

static void check_proc(struct sim *S, struct proc *P)
{
    const struct tk_raft_config *c = tk_driver_config(P->d);
    if (c != NULL) {
        if (tk_raft_config_check(c) != TK_OK)
            FAIL(S, "process %d holds an invalid configuration", P->idx);
        /* A process belongs to one domain for life. */
        if (P->has_cfg && (P->cfg_domain_lo != c->domain_lo || P->cfg_domain_hi != c->domain_hi))
            FAIL(S, "process %d changed fencing domain", P->idx);
        P->has_cfg = true;
        P->cfg_domain_lo = c->domain_lo;
        P->cfg_domain_hi = c->domain_hi;
    }
    /* The core's own invariants, one change in flight among them. */
    if ((++S->checks & 15) == 0)
        tk_raft_check(tk_driver_core(P->d));
    if (!tk_driver_serving(P->d))
        return;
    S->last_serving_at = S->now;
    struct tk_raft_status st;
    tk_driver_raft_status(P->d, &st);
    for (uint32_t i = 0; i < S->nleaders; i++) {
        struct term_leader *t = &S->leaders[i];
        if (t->domain_lo == c->domain_lo && t->domain_hi == c->domain_hi && t->term == st.term) {
            if (t->id != P->id)
                FAIL(S, "two processes serve term %llu of one domain: %016llx and %016llx",
                     (unsigned long long)st.term, (unsigned long long)t->id,
                     (unsigned long long)P->id);
            return;
        }
    }
    if (S->nleaders < 4096)
        S->leaders[S->nleaders++] =
            (struct term_leader){c->domain_lo, c->domain_hi, st.term, P->id};
}

static void check_grant(struct sim *S, struct proc *P, struct client *c, uint64_t token)
{
    const struct tk_raft_config *cfg = tk_driver_config(P->d);
    if (cfg == NULL)
        FAIL(S, "a grant from a process without a domain");
    uint64_t lo = cfg->domain_lo, hi = cfg->domain_hi;
    if (S->verbose)
        fprintf(stderr, "t=%.3f p%d grants key %d token %llu to client %d (lease end %.3f)\n",
                (double)S->now / 1e6, P->idx, c->key, (unsigned long long)token,
                (int)(c - S->clients), (double)c->lease_end / 1e6);
    /* One domain grants at a time: a newer one's grants end the older's. */
    uint32_t di = S->ndomains;
    for (uint32_t i = 0; i < S->ndomains; i++)
        if (S->domains[i][0] == lo && S->domains[i][1] == hi)
            di = i;
    if (di == S->ndomains) {
        if (S->ndomains == 64)
            FAIL(S, "too many domains");
        S->domains[S->ndomains][0] = lo;
        S->domains[S->ndomains][1] = hi;
        S->ndomains++;
    } else if (di != S->ndomains - 1) {
        FAIL(S, "domain %016llx%016llx granted after a newer domain did", (unsigned long long)hi,
             (unsigned long long)lo);
    }
    for (uint32_t i = 0; i < S->ngrants; i++) {
        struct grant *g = &S->grants[i];
        if (g->token == token)
            FAIL(S, "token %llu granted twice", (unsigned long long)token);
        if (g->key != c->key)
            continue;
        if (g->token > token)
            FAIL(S, "key %d: token %llu granted after %llu", c->key, (unsigned long long)token,
                 (unsigned long long)g->token);
        if (g->end > S->now)
            FAIL(S,
                 "key %d held twice: client %d (token %llu) until %.3f s, client %d now "
                 "(token %llu)",
                 c->key, g->client, (unsigned long long)g->token, (double)g->end / 1e6,
                 (int)(c - S->clients), (unsigned long long)token);
    }
    if (S->ngrants == GRANTS_MAX)
        FAIL(S, "too many grants");
    c->state = C_HOLDING;
    c->token = token;
    c->release_at = S->now + rnd(S, 0, (c->lease_end - S->now) * 3 / 2);
    S->grants[S->ngrants++] = (struct grant){.token = token,
                                             .at = S->now,
                                             .end = c->lease_end,
                                             .domain_lo = lo,
                                             .domain_hi = hi,
                                             .key = c->key,
                                             .client = (int)(c - S->clients)};
    S->g++;
}

/* The holder stops: its interval ends now (if its lease had not already). */
static void holder_stops(struct sim *S, struct client *c)
{
    for (uint32_t i = S->ngrants; i-- > 0;)
        if (S->grants[i].token == c->token) {
            S->grants[i].end = TK_MIN(S->grants[i].end, S->now);
            break;
        }
}

/* ---- rounds ------------------------------------------------------------- */

static void proc_round(struct sim *S, struct proc *P)
{
    clock_in(P);
    uint64_t now = P->last_mono;
    while (P->to_shard.len) {
        struct qmsg *m = &P->to_shard.m[P->to_shard.head];
        tk_shard_message(P->sh, now, m->src, m->kind, m->data, m->len);
        P->to_shard.head = (P->to_shard.head + 1) % QMAX;
        P->to_shard.len--;
    }
    tk_shard_tick(P->sh, now);
    tk_shard_flush(P->sh);
    tk_driver_tick(P->d);
    while (P->to_driver.len) {
        struct qmsg *m = &P->to_driver.m[P->to_driver.head];
        tk_driver_message(P->d, m->src, m->kind, m->data, m->len);
        P->to_driver.head = (P->to_driver.head + 1) % QMAX;
        P->to_driver.len--;
    }
    tk_driver_flush(P->d);
    check_proc(S, P);
    struct tk_driver_members dm;
    tk_driver_members(P->d, &dm);
    if (dm.state == TK_DRIVER_REMOVED) {
        /* It exits (status 3); its supervisor starts a fresh process if
         * it still held the address. */
        S->removed_exits++;
        if (S->verbose)
            fprintf(stderr, "t=%.3f p%d exits: removed\n", (double)S->now / 1e6, P->idx);
        bool current = S->at_addr[P->addr] == P->idx;
        int addr = P->addr;
        proc_kill(S, P->idx);
        if (current)
            proc_start(S, addr, false);
    }
}

static void deliver(struct sim *S)
{
    struct pkt p = heap_pop(S);
    struct proc *B = &S->procs[p.to];
    if (!B->alive || is_cut(S, S->procs[p.from].addr, B->addr)) {
        free(p.bytes);
        return;
    }
    if (B->paused) {
        /* The socket buffers it until the process runs again. */
        p.at = S->now + 5 * MS;
        p.seq = S->seq++;
        heap_push(S, p);
        return;
    }
    struct tk_wire_frame f;
    if (tk_wire_decode(p.bytes, p.len, &f, &S->scratch) != TK_OK)
        FAIL(S, "a frame does not decode");
    if (f.msg.type == TK_RAFT_MSG_JOIN)
        S->joins++;
    clock_in(B);
    tk_driver_peer_frame(B->d, (uint64_t)p.from + 1, &f);
    free(p.bytes);
    check_proc(S, B);
}

static int leader_proc(struct sim *S)
{
    for (int i = 0; i < S->nprocs; i++)
        if (S->procs[i].alive && !S->procs[i].paused && tk_driver_serving(S->procs[i].d))
            return i;
    return -1;
}

static void clients_step(struct sim *S, bool load)
{
    for (int i = 0; i < CLIENTS; i++) {
        struct client *c = &S->clients[i];
        if (c->state == C_HOLDING && S->now >= TK_MIN(c->release_at, c->lease_end)) {
            holder_stops(S, c);
            struct proc *P = c->proc >= 0 ? &S->procs[c->proc] : NULL;
            if (S->now < c->lease_end && P && P->alive && !P->paused) {
                c->state = C_RELEASING;
                c->id++;
                char key = (char)('a' + c->key);
                struct tk_msg_req q = {.client = tk_client_ref(0, (uint32_t)i + 1, c->gen),
                                       .id = c->id,
                                       .type = 'R',
                                       .key = &key,
                                       .key_len = 1,
                                       .owner = "c",
                                       .owner_len = 1,
                                       .token = c->token};
                tk_shard_request(P->sh, P->last_mono, &q);
            } else {
                c->state = C_IDLE;
            }
            continue;
        }
        if (c->state != C_IDLE || !load || !chance(S, 20))
            continue;
        /* A client asks whoever serves, or any process (M then). */
        int p = chance(S, 4) ? (int)rnd(S, 0, (uint64_t)S->nprocs - 1) : leader_proc(S);
        if (p < 0 || !S->procs[p].alive || S->procs[p].paused)
            continue;
        struct proc *P = &S->procs[p];
        c->gen++;
        c->proc = p;
        c->key = (int)rnd(S, 0, KEYS - 1);
        c->id++;
        c->state = C_ASKING;
        c->sent_at = S->now;
        uint32_t lease = (uint32_t)rnd(S, TK_LEASE_MS_MIN, LEASE_MAX_MS);
        c->lease_end = S->now + (uint64_t)lease * MS;
        char key = (char)('a' + c->key);
        struct tk_msg_req q = {.client = tk_client_ref(0, (uint32_t)i + 1, c->gen),
                               .id = c->id,
                               .type = 'A',
                               .key = &key,
                               .key_len = 1,
                               .owner = "c",
                               .owner_len = 1,
                               .lease_ms = lease,
                               .wait_ms = 0};
        clock_in(P);
        tk_shard_request(P->sh, P->last_mono, &q);
    }
}

/* ---- the scenario ------------------------------------------------------- */

/* The serving leader's configuration is settled: every address has one
 * voter, the process running there, and nothing else is in it. */
static bool settled(struct sim *S)
{
    int l = leader_proc(S);
    if (l < 0)
        return false;
    const struct tk_raft_config *c = tk_driver_config(S->procs[l].d);
    if (c == NULL || c->n != S->naddrs || tk_raft_config_voters(c) != S->naddrs)
        return false;
    for (uint32_t i = 0; i < c->n; i++) {
        bool found = false;
        for (int p = 0; p < S->nprocs; p++)
            found |= S->procs[p].alive && !S->procs[p].paused && S->procs[p].id == c->m[i].id &&
                     S->at_addr[S->procs[p].addr] == p;
        if (!found)
            return false;
    }
    return true;
}

static void fault(struct sim *S)
{
    uint32_t kind = (uint32_t)rnd(S, 0, 9);
    int a = (int)rnd(S, 0, S->naddrs - 1);
    int p = S->at_addr[a];
    if (kind <= 1 && settled(S)) {
        /* A member restarts under a fresh NodeId. */
        proc_restart(S, a, false);
        S->restarts++;
    } else if (kind == 2 && settled(S) && p >= 0) {
        /* Paused long enough to be replaced: the new process takes its
         * address; the old one wakes up later, a removed identity. */
        S->procs[p].paused = true;
        S->procs[p].zombie = true;
        S->at_addr[a] = -1;
        proc_start(S, a, false);
        S->zombies++;
    } else if (kind == 3) {
        for (int i = 0; i < S->nprocs; i++)
            if (S->procs[i].alive && S->procs[i].zombie && S->procs[i].paused)
                S->procs[i].paused = false;
        if (p >= 0 && !S->procs[p].paused) {
            S->procs[p].paused = true;
            S->pauses++;
        }
    } else if (kind == 4) {
        for (int i = 0; i < S->nprocs; i++)
            if (!S->procs[i].zombie)
                S->procs[i].paused = false;
    } else if (kind <= 6) {
        int b = (int)rnd(S, 0, S->naddrs - 1);
        if (a != b) {
            uint64_t until = S->now + rnd(S, 200 * MS, 4 * SEC);
            S->cut_until[a][b] = until;
            if (chance(S, 2))
                S->cut_until[b][a] = until;
            S->cuts++;
        }
    } else if (kind == 7) {
        memset(S->cut_until, 0, sizeof(S->cut_until));
    } else if (p >= 0) {
        /* Clocks: a wall clock steps (all stay within the drift bound of
         * one another), a monotonic clock jumps forward a little. */
        struct proc *P = &S->procs[p];
        if (chance(S, 2))
            P->wall_off = (int64_t)rnd(S, 0, DRIFT_US) - (int64_t)(DRIFT_US / 2);
        else
            P->mono_jump += rnd(S, 0, 20 * MS);
        S->clock_steps++;
    }
}

/* A majority of the processes lose their state at once and restart with
 * --force-new-domain, a survivor may be paused, links between fresh nodes
 * are cut and flap. */
static void majority_loss(struct sim *S)
{
    uint32_t majority = S->naddrs / 2 + 1;
    uint32_t lose = majority + (uint32_t)rnd(S, 0, S->naddrs - 1 - majority); /* a survivor stays */
    bool lost[ADDRS_MAX] = {0};
    for (uint32_t n = 0; n < lose;) {
        int a = (int)rnd(S, 0, S->naddrs - 1);
        if (!lost[a]) {
            lost[a] = true;
            n++;
        }
    }
    /* The operator's procedure (docs/operations.md): every member that
     * lost its state restarts with --force-new-domain. */
    S->loss_first_proc = S->nprocs;
    bool one_plain = chance(S, 2);
    for (uint32_t a = 0; a < S->naddrs; a++)
        if (lost[a]) {
            proc_restart(S, (int)a, !one_plain);
            one_plain = false;
        }
    for (uint32_t a = 0; a < S->naddrs; a++)
        if (!lost[a] && S->at_addr[a] >= 0 && chance(S, 2))
            S->procs[S->at_addr[a]].paused = true;
    for (uint32_t k = 0; k < 3; k++) {
        int a = (int)rnd(S, 0, S->naddrs - 1), b = (int)rnd(S, 0, S->naddrs - 1);
        if (a != b && lost[a] && lost[b])
            S->cut_until[a][b] = S->cut_until[b][a] = S->now + rnd(S, 500 * MS, 3 * SEC);
    }
    S->losses++;
    S->survivors_restart_at = S->now + HOLD_US + rnd(S, 2 * SEC, 5 * SEC);
}

static void restart_survivors(struct sim *S)
{
    /* Once the new domain exists (a process started at the loss holds
     * it: a forced domain, so it has a hold; a learner of the old one does
     * not count), the operator restarts the members of the old one, fresh. */
    const struct tk_raft_config *c = NULL;
    for (int p = S->loss_first_proc; p < S->nprocs && c == NULL; p++)
        if (S->procs[p].alive) {
            c = tk_driver_config(S->procs[p].d);
            if (c && !c->serve_after_us)
                c = NULL;
        }
    if (c == NULL)
        return;
    uint64_t lo = c->domain_lo, hi = c->domain_hi;
    if (S->verbose)
        fprintf(stderr, "t=%.3f the operator restarts the survivors\n", (double)S->now / 1e6);
    for (uint32_t a = 0; a < S->naddrs; a++) {
        int p = S->at_addr[a];
        if (p < 0)
            continue;
        const struct tk_raft_config *pc = tk_driver_config(S->procs[p].d);
        if (pc && (pc->domain_lo != lo || pc->domain_hi != hi))
            proc_restart(S, (int)a, false);
    }
    S->survivors_restart_at = 0;
}

static void sim_setup(struct sim *S, uint64_t seed, bool verbose)
{
    for (int i = 0; i < S->nprocs; i++)
        proc_kill(S, i);
    while (S->heap_n)
        free(heap_pop(S).bytes);
    struct pkt *heap = S->heap;
    struct grant *grants = S->grants;
    struct term_leader *leaders = S->leaders;
    struct tk_wire_scratch scratch = S->scratch;
    memset(S, 0, sizeof(*S));
    S->heap = heap;
    S->grants = grants;
    S->leaders = leaders;
    S->scratch = scratch;
    S->verbose = verbose;
    tk_prng_seed(&S->prng, seed * 0x9e3779b97f4a7c15ull + 1);
    S->naddrs = chance(S, 2) ? 3 : 5;
    for (int a = 0; a < ADDRS_MAX; a++)
        S->at_addr[a] = -1;
    for (int i = 0; i < CLIENTS; i++)
        S->clients[i].proc = -1;
    for (uint32_t a = 0; a < S->naddrs; a++)
        proc_start(S, (int)a, false);
    /* Links cut while the first domain is agreed. */
    for (uint32_t k = 0; k < 2; k++) {
        int a = (int)rnd(S, 0, S->naddrs - 1), b = (int)rnd(S, 0, S->naddrs - 1);
        if (a != b)
            S->cut_until[a][b] = rnd(S, 500 * MS, 3 * SEC);
    }
    S->next_fault = rnd(S, 1 * SEC, 3 * SEC);
    S->loss_at = chance(S, 2) ? rnd(S, 5 * SEC, 10 * SEC) : 0;
}

static void sim_run(struct sim *S)
{
    uint64_t healed_at = 0, first_g_after_heal = 0;
    uint64_t g_at_heal = 0;
    while (S->now < RUN_END) {
        S->now += 1 * MS;
        while (S->heap_n && S->heap[0].at <= S->now)
            deliver(S);
        for (int i = 0; i < S->nprocs; i++)
            if (S->procs[i].alive && !S->procs[i].paused && !chance(S, 10))
                proc_round(S, &S->procs[i]);
        clients_step(S, true);
        if (S->now < FAULTS_END) {
            if (S->loss_at && !S->loss_done && S->now >= S->loss_at &&
                S->now < FAULTS_END - 6 * SEC && settled(S)) {
                majority_loss(S);
                S->loss_done = true;
                S->next_fault = S->now + rnd(S, 1 * SEC, 3 * SEC);
            } else if (S->now >= S->next_fault && (!S->loss_done || !S->survivors_restart_at)) {
                fault(S);
                S->next_fault = S->now + rnd(S, 300 * MS, 2 * SEC);
            }
            if (S->loss_done && S->survivors_restart_at && S->now >= S->survivors_restart_at) {
                for (int i = 0; i < S->nprocs; i++)
                    if (S->procs[i].alive)
                        S->procs[i].paused = false;
                memset(S->cut_until, 0, sizeof(S->cut_until));
                restart_survivors(S);
            }
        } else if (!healed_at) {
            healed_at = S->now;
            for (int i = 0; i < S->nprocs; i++)
                if (S->procs[i].alive)
                    S->procs[i].paused = false;
            memset(S->cut_until, 0, sizeof(S->cut_until));
            if (S->survivors_restart_at)
                restart_survivors(S);
            g_at_heal = S->g;
        }
        if (healed_at && S->survivors_restart_at)
            restart_survivors(S);
        if (healed_at && !first_g_after_heal && S->g > g_at_heal)
            first_g_after_heal = S->now;
        if (healed_at && first_g_after_heal && settled(S) && S->now > healed_at + 2 * SEC)
            return;
    }
    for (int i = 0; i < S->nprocs; i++) {
        struct proc *P = &S->procs[i];
        if (!P->alive)
            continue;
        struct tk_driver_members dm;
        tk_driver_members(P->d, &dm);
        const struct tk_raft_config *c = tk_driver_config(P->d);
        fprintf(stderr, "p%d@%d %016llx%s term %llu, domain %016llx, state %u: %s\n", i, P->addr,
                (unsigned long long)P->id, P->paused ? " paused" : "",
                (unsigned long long)tk_raft_term(tk_driver_core(P->d)),
                c ? (unsigned long long)c->domain_lo : 0ull, dm.state, dm.note);
    }
    FAIL(S, "no convergence after healing at %.3f s (leader %d, grants since %llu, settled %d)",
         (double)healed_at / 1e6, leader_proc(S), (unsigned long long)(S->g - g_at_heal),
         settled(S));
}

static uint64_t env_u64(const char *name, uint64_t dflt)
{
    const char *v = getenv(name);
    return v ? strtoull(v, NULL, 10) : dflt;
}

int main(void)
{
    signal(SIGABRT, on_abort);
    struct sim *S = calloc(1, sizeof(*S));
    S->heap = calloc(PKTS_MAX, sizeof(struct pkt));
    S->grants = calloc(GRANTS_MAX, sizeof(struct grant));
    S->leaders = calloc(4096, sizeof(struct term_leader));
    S->scratch.entries_cap = TK_WIRE_ENTRIES_MAX;
    S->scratch.entries = calloc(TK_WIRE_ENTRIES_MAX, sizeof(struct tk_raft_entry));
    const char *one = getenv("TK_SEED");
    uint64_t first = one ? strtoull(one, NULL, 10) : env_u64("TK_SIM_FIRST", 1);
    uint64_t count = one ? 1 : env_u64("TK_SIM_SEEDS", 400);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    uint64_t tot[12] = {0};
    for (uint64_t seed = first; seed < first + count; seed++) {
        current_seed = seed;
        sim_setup(S, seed, one != NULL);
        sim_run(S);
        uint64_t v[12] = {S->restarts,      S->zombies,    S->pauses,   S->cuts,
                          S->clock_steps,   S->losses,     S->g,        S->joins,
                          S->removed_exits, S->bootstraps, S->ndomains, S->naddrs == 5};
        for (int i = 0; i < 12; i++)
            tot[i] += v[i];
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    printf(
        "sim_members: %llu seeds passed in %.1f s (%llu of 5 members): %llu restarts under "
        "fresh NodeIds, %llu replaced while paused (woke up removed), %llu pauses, %llu link "
        "cuts, %llu clock steps, %llu majority losses, %llu domains that granted, %llu grants, "
        "%llu joins, %llu removed processes exited, %llu entry-1 writes\n",
        (unsigned long long)count, secs, (unsigned long long)tot[11], (unsigned long long)tot[0],
        (unsigned long long)tot[1], (unsigned long long)tot[2], (unsigned long long)tot[3],
        (unsigned long long)tot[4], (unsigned long long)tot[5], (unsigned long long)tot[10],
        (unsigned long long)tot[6], (unsigned long long)tot[7], (unsigned long long)tot[8],
        (unsigned long long)tot[9]);
    for (int i = 0; i < S->nprocs; i++)
        proc_kill(S, i);
    free(S->heap);
    free(S->grants);
    free(S->leaders);
    free(S->scratch.entries);
    free(S);
    return 0;
}
