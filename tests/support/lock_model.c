/* The lock-table reference model: see lock_model.h. */
#include "tests/support/lock_model.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NKEYS 6
#define NOWNERS 4
#define KEYS_MAX 4
#define PER_KEY_MAX 3
#define WAITERS_MAX 6

static const char *const key_names[NKEYS] = {"k0", "k1", "k2", "k3", "k4", "k5"};
static const char *const owner_names[NOWNERS] = {
    "alice", "bob", "c", "a-rather-long-owner-name-so-that-the-key-must-move-0123456789abc"};

static const struct lock_model_cfg *cfg;
static int step;
static uint64_t deferred, refused, leader_changes;

int lock_model_step(void)
{
    return step;
}

static uint64_t choose(uint64_t lo, uint64_t hi)
{
    return cfg->choose(cfg->ctx, lo, hi);
}

/* A failed check: the driver's hook, else print and abort. */
__attribute__((format(printf, 2, 3), noreturn)) static void model_fail(int line,
                                                                       const char *fmt,
                                                                       ...)
{
    char msg[256];
    int n = snprintf(msg, sizeof(msg), "step=%d: ", step);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg + n, sizeof(msg) - (size_t)n, fmt, ap);
    va_end(ap);
    size_t len = strlen(msg);
    snprintf(msg + len, sizeof(msg) - len, " (lock_model.c:%d)", line);
    if (cfg != NULL && cfg->fail != NULL)
        cfg->fail(cfg->ctx, msg);
    fprintf(stderr, "lock model: %s\n", msg);
    abort();
}

#define M_FAIL(...) model_fail(__LINE__, __VA_ARGS__)
#define M_ASSERTF(cond, ...)     \
    do {                         \
        if (!(cond))             \
            M_FAIL(__VA_ARGS__); \
    } while (0)
#define M_ASSERT(cond) M_ASSERTF((cond), "%s", #cond)

/* ---- Model ---- */

enum mstate { M_NONE, M_QUEUED, M_DEFERRED, M_GRANTEE, M_RELEASER, M_DONE, M_DROPPED, M_REFUSED };

struct mreq {
    uint64_t client;
    char type;
    int key;
    int owner;
    uint32_t lease_ms;
    uint64_t deadline; /* A queued: wait deadline */
    uint64_t token;    /* R */
    enum mstate state;
};

struct mkey {
    bool held;
    int owner;
    uint64_t token;
    uint32_t lease_ms;
    uint64_t due;
    bool armed;     /* the table still has this lease's timer */
    uint8_t flight; /* command type in flight, 0 none */
    bool flight_expired;
    int grantee;  /* request id or 0 */
    int releaser; /* request id or 0 */
    int q[16], nq;
    int d[16], nd;
};

struct ev {
    bool is_reply;
    struct tk_lock_reply r;
    char owner[TK_OWNER_LEN_MAX + 1];
    struct tk_cmd c;
};

static struct {
    struct tk_lock_table *t;
    struct tk_lock_sink sink;
    uint64_t now;
    uint64_t next_token;
    uint64_t last_g;
    uint64_t last_applied;
    bool leader;
    struct mreq req[LOCK_MODEL_REQ_MAX];
    int nreq;
    struct mkey key[NKEYS];
    uint64_t clients[4]; /* live connections */
    uint64_t next_client;
    struct tk_cmd raft[64];
    int raft_head, raft_tail;
    struct ev ev[64];
    int nev, evi;
} m;

static void on_reply(void *ctx, const struct tk_lock_reply *r)
{
    (void)ctx;
    M_ASSERT(m.nev < 64);
    struct ev *e = &m.ev[m.nev++];
    memset(e, 0, sizeof(*e));
    e->is_reply = true;
    e->r = *r;
    if (r->owner != NULL)
        memcpy(e->owner, r->owner, r->owner_len);
    e->r.owner = r->owner != NULL ? e->owner : NULL;
}

static void on_propose(void *ctx, const struct tk_cmd *c)
{
    (void)ctx;
    M_ASSERT(m.nev < 64);
    M_ASSERT(tk_cmd_check(c) == TK_OK);
    struct ev *e = &m.ev[m.nev++];
    memset(e, 0, sizeof(*e));
    e->c = *c;
    M_ASSERT(m.raft_tail - m.raft_head < 64);
    m.raft[m.raft_tail++ % 64] = *c;
}

/* The index of name s[0..n) in names[0..count), which must have it. */
static int name_index(const char *const *names,
                      int count,
                      const char *what,
                      const char *s,
                      size_t n)
{
    for (int i = 0; i < count; i++)
        if (strlen(names[i]) == n && memcmp(names[i], s, n) == 0)
            return i;
    M_FAIL("unknown %s", what);
}

static int owner_index(const char *s, size_t n)
{
    return name_index(owner_names, NOWNERS, "owner", s, n);
}

static int key_index(const char *s, size_t n)
{
    return name_index(key_names, NKEYS, "key", s, n);
}

static bool m_present(const struct mkey *k)
{
    return k->held || k->flight != 0 || k->nq > 0 || k->nd > 0;
}

static int m_count(int what)
{
    int n = 0;
    for (int i = 0; i < NKEYS; i++) {
        const struct mkey *k = &m.key[i];
        n += what == 0   ? m_present(k)
             : what == 1 ? k->held
             : what == 2 ? k->nq
             : what == 3 ? k->nd
                         : (k->flight != 0);
    }
    return n;
}

static uint64_t m_min_wait(void)
{
    uint64_t min = UINT64_MAX;
    for (int i = 0; i < NKEYS; i++)
        for (int j = 0; j < m.key[i].nq; j++)
            min = TK_MIN(min, m.req[m.key[i].q[j]].deadline);
    return min;
}

/* Leases with a running timer: held keys not in flight. */
static uint64_t m_min_lease(void)
{
    uint64_t min = UINT64_MAX;
    for (int i = 0; i < NKEYS; i++)
        if (m.key[i].held && m.key[i].flight == 0)
            min = TK_MIN(min, m.key[i].due);
    return min;
}

static void list_remove(int *v, int *n, int at)
{
    memmove(v + at, v + at + 1, (size_t)(*n - at - 1) * sizeof(*v));
    (*n)--;
}

/* ---- Events ---- */

static struct ev *ev_take(void)
{
    M_ASSERT(m.evi < m.nev);
    return &m.ev[m.evi++];
}

static void ev_reply(char type, int id)
{
    struct ev *e = ev_take();
    M_ASSERTF(e->is_reply, "expected reply %c to %d, got a proposal", type, id);
    M_ASSERTF(e->r.type == type, "expected %c to %d, got %c to %llu", type, id, e->r.type,
              (unsigned long long)e->r.id);
    M_ASSERT(e->r.id == (uint64_t)id);
    M_ASSERT(e->r.client == m.req[id].client);
    M_ASSERT(m.req[id].state != M_DONE && m.req[id].state != M_DROPPED);
    m.req[id].state = M_DONE;
}

static const struct tk_cmd *ev_propose(uint8_t type, int k)
{
    struct ev *e = ev_take();
    M_ASSERTF(!e->is_reply, "expected a proposal, got reply %c to %llu", e->r.type,
              (unsigned long long)e->r.id);
    M_ASSERTF(e->c.type == type, "proposal type %d, expected %d", e->c.type, type);
    M_ASSERT(key_index(e->c.key, e->c.key_len) == k);
    M_ASSERT(e->c.old_token == (type == TK_CMD_GRANT ? 0 : m.key[k].token));
    M_ASSERT(m.key[k].flight == 0);
    m.key[k].flight = type;
    m.key[k].flight_expired = e->c.expired != 0;
    return &e->c;
}

static void ev_done(void)
{
    M_ASSERTF(m.evi == m.nev, "%d unexpected events", m.nev - m.evi);
    m.nev = m.evi = 0;
}

/* ---- Model transitions (predict the table's events) ---- */

static void m_grant_head(int k, bool expired)
{
    struct mkey *mk = &m.key[k];
    M_ASSERT(mk->nq > 0);
    int head = mk->q[0];
    list_remove(mk->q, &mk->nq, 0);
    uint8_t type = mk->held ? TK_CMD_HANDOFF : TK_CMD_GRANT;
    const struct tk_cmd *c = ev_propose(type, k);
    /* FIFO: the grant goes to the head, with the head's owner and lease. */
    M_ASSERT(owner_index(c->owner, c->owner_len) == m.req[head].owner);
    M_ASSERT(c->lease_ms == m.req[head].lease_ms);
    M_ASSERT(c->expired == (expired ? 1 : 0));
    mk->grantee = head;
    m.req[head].state = M_GRANTEE;
}

static void m_release_eval(int k, int id)
{
    struct mkey *mk = &m.key[k];
    const struct mreq *r = &m.req[id];
    if (!(mk->held && mk->owner == r->owner && mk->token == r->token)) {
        ev_reply('N', id);
        return;
    }
    mk->releaser = id;
    m.req[id].state = M_RELEASER;
    if (mk->nq > 0)
        m_grant_head(k, false);
    else
        ev_propose(TK_CMD_RELEASE, k);
}

static void m_query_eval(int k, int id)
{
    const struct mkey *mk = &m.key[k];
    struct ev *e = ev_take();
    M_ASSERT(e->is_reply && e->r.type == 'Q');
    M_ASSERT(e->r.id == (uint64_t)id && e->r.client == m.req[id].client);
    if (mk->held) {
        M_ASSERT(e->r.owner != NULL);
        M_ASSERT(owner_index(e->r.owner, e->r.owner_len) == mk->owner);
        M_ASSERT(e->r.token == mk->token);
        M_ASSERT(e->r.waiters == (uint32_t)mk->nq);
    } else {
        M_ASSERT(e->r.owner == NULL && e->r.token == 0 && e->r.waiters == 0);
        M_ASSERT(mk->nq == 0); /* a free key never has waiters */
    }
    m.req[id].state = M_DONE;
}

/* Committed state; every node. */
static void m_apply(const struct tk_cmd *c)
{
    int k = key_index(c->key, c->key_len);
    struct mkey *mk = &m.key[k];
    if (tk_cmd_grants(c)) {
        M_ASSERT(c->token > m.last_applied); /* tokens strictly increase */
        m.last_applied = c->token;
        if (c->type == TK_CMD_GRANT)
            M_ASSERT(!mk->held); /* one holder per key */
        else
            M_ASSERT(mk->held && mk->token == c->old_token);
        M_ASSERT(c->token > mk->token);
        mk->held = true;
        mk->owner = owner_index(c->owner, c->owner_len);
        mk->token = c->token;
        mk->lease_ms = c->lease_ms;
        mk->due = m.now + c->lease_ms * 1000ull + TK_LOCK_DRIFT_US(c->lease_ms);
        mk->armed = true;
    } else {
        M_ASSERT(mk->held && mk->token == c->old_token);
        mk->held = false;
        mk->armed = false;
        mk->token = 0;
    }
}

/* When the table wakes up next: waits, and leases whose timer has not
 * fired yet (one that fires while its key is in flight is parked). */
static uint64_t m_next_deadline(void)
{
    uint64_t min = m_min_wait();
    for (int i = 0; i < NKEYS; i++)
        if (m.key[i].armed)
            min = TK_MIN(min, m.key[i].due);
    return m.leader ? min : UINT64_MAX;
}

static void m_check_stats(void)
{
    tk_lock_check(m.t);
    struct tk_lock_stats s;
    tk_lock_stats(m.t, &s);
    M_ASSERT(s.keys == (uint64_t)m_count(0));
    M_ASSERT(s.held == (uint64_t)m_count(1));
    M_ASSERT(s.waiters == (uint64_t)m_count(2));
    M_ASSERT(s.deferred == (uint64_t)m_count(3));
    M_ASSERT(s.in_flight == (uint64_t)m_count(4));
    M_ASSERT(tk_lock_next_deadline(m.t) == m_next_deadline());
}

struct holders {
    int n;
};

static void holder_seen(void *ctx, const struct tk_cmd *c)
{
    struct holders *h = ctx;
    int k = key_index(c->key, c->key_len);
    M_ASSERT(m.key[k].held);
    M_ASSERT(m.key[k].token == c->token);
    M_ASSERT(m.key[k].owner == owner_index(c->owner, c->owner_len));
    M_ASSERT(m.key[k].lease_ms == c->lease_ms);
    h->n++;
}

/* ---- Operations ---- */

static int new_req(char type, int k)
{
    M_ASSERT(m.nreq < cfg->max_requests);
    int id = m.nreq++;
    struct mreq *r = &m.req[id];
    memset(r, 0, sizeof(*r));
    r->client = m.clients[choose(0, 3)];
    r->type = type;
    r->key = k;
    return id;
}

static int do_request(struct mreq *r, int id)
{
    struct tk_lock_req q = {.type = r->type,
                            .client = r->client,
                            .id = (uint64_t)id,
                            .key = key_names[r->key],
                            .key_len = strlen(key_names[r->key])};
    if (r->type != 'Q') {
        q.owner = owner_names[r->owner];
        q.owner_len = strlen(q.owner);
    }
    q.lease_ms = r->lease_ms;
    q.wait_ms = r->type == 'A' ? (uint32_t)((r->deadline - m.now) / 1000u) : 0;
    q.token = r->token;
    return tk_lock_request(m.t, m.now, &q, &m.sink);
}

static void op_acquire(void)
{
    int k = (int)choose(0, NKEYS - 1);
    int id = new_req('A', k);
    struct mreq *r = &m.req[id];
    r->owner = (int)choose(0, NOWNERS - 1);
    r->lease_ms = (uint32_t)choose(1000, 4000);
    uint32_t wait = choose(0, 2) == 0 ? 0 : (uint32_t)choose(1, 3000);
    r->deadline = m.now + wait * 1000ull;
    int rc = do_request(r, id);
    if (!m.leader) {
        M_ASSERT(rc == TK_ENOTLEADER);
        r->state = M_REFUSED;
        return;
    }
    M_ASSERT(rc == TK_OK);
    struct mkey *mk = &m.key[k];
    if (!m_present(mk)) {
        if (m_count(0) >= KEYS_MAX) {
            ev_reply('B', id);
            return;
        }
        const struct tk_cmd *c = ev_propose(TK_CMD_GRANT, k);
        M_ASSERT(owner_index(c->owner, c->owner_len) == r->owner);
        M_ASSERT(c->lease_ms == r->lease_ms);
        mk->grantee = id;
        r->state = M_GRANTEE;
    } else if (wait == 0 || mk->nq >= PER_KEY_MAX || m_count(2) >= WAITERS_MAX) {
        ev_reply('B', id);
    } else {
        mk->q[mk->nq++] = id;
        r->state = M_QUEUED;
    }
}

static void op_release_or_query(char type)
{
    int k = (int)choose(0, NKEYS - 1);
    int id = new_req(type, k);
    struct mreq *r = &m.req[id];
    struct mkey *mk = &m.key[k];
    if (type == 'R') {
        /* Mostly the holder's exact triple (sometimes the one about to be
         * granted), else a near miss. */
        uint64_t pick = choose(0, 9);
        r->owner = mk->held && pick < 6 ? mk->owner : (int)choose(0, NOWNERS - 1);
        r->token = pick < 5 ? mk->token : pick < 7 ? m.next_token + 1 : mk->token + 1;
        if (r->token == 0)
            r->token = 1;
    }
    int rc = do_request(r, id);
    if (!m.leader) {
        M_ASSERT(rc == TK_ENOTLEADER);
        r->state = M_REFUSED;
        return;
    }
    if (mk->flight != 0) {
        if (m_count(3) >= WAITERS_MAX) {
            M_ASSERT(rc == TK_EFULL);
            r->state = M_REFUSED;
            refused++;
            return;
        }
        M_ASSERT(rc == TK_OK);
        mk->d[mk->nd++] = id;
        r->state = M_DEFERRED;
        deferred++;
        return;
    }
    M_ASSERT(rc == TK_OK);
    if (type == 'R')
        m_release_eval(k, id);
    else
        m_query_eval(k, id);
}

static void op_commit(void)
{
    if (m.raft_head == m.raft_tail)
        return;
    struct tk_cmd c = m.raft[m.raft_head++ % 64];
    if (tk_cmd_grants(&c))
        c.token = ++m.next_token;
    int k = key_index(c.key, c.key_len);
    struct mkey *mk = &m.key[k];
    M_ASSERT(mk->flight == c.type);
    tk_lock_apply(m.t, m.now, &c, &m.sink);
    m_apply(&c);
    int rel = mk->releaser;
    int gr = mk->grantee;
    mk->releaser = mk->grantee = 0;
    mk->flight = 0;
    if (rel != 0)
        ev_reply('R', rel);
    if (gr != 0) {
        const struct ev *e = &m.ev[m.evi];
        ev_reply('G', gr);
        M_ASSERT(e->r.token == c.token); /* the committed token */
        M_ASSERT(e->r.token > m.last_g); /* tokens strictly increase */
        m.last_g = e->r.token;
    }
    if (!mk->held && mk->nq > 0) {
        m_grant_head(k, false);
    } else if (mk->held && mk->due <= m.now) {
        mk->armed = false;
        if (mk->nq > 0)
            m_grant_head(k, true);
        else
            ev_propose(TK_CMD_EXPIRE, k);
    }
    while (mk->nd > 0 && mk->flight == 0) {
        int id = mk->d[0];
        list_remove(mk->d, &mk->nd, 0);
        if (m.req[id].type == 'R')
            m_release_eval(k, id);
        else
            m_query_eval(k, id);
    }
}

static void op_tick(uint64_t dt_us)
{
    m.now += dt_us;
    tk_lock_tick(m.t, m.now, &m.sink);
    if (!m.leader)
        return;
    /* Each firing must be the earliest timer due; on a tie waits go first. */
    while (m.evi < m.nev) {
        struct ev *e = &m.ev[m.evi];
        if (e->is_reply) {
            M_ASSERT(e->r.type == 'T');
            int id = (int)e->r.id;
            struct mreq *r = &m.req[id];
            M_ASSERT(r->state == M_QUEUED);
            M_ASSERT(r->deadline <= m.now);
            M_ASSERT(r->deadline == m_min_wait());
            M_ASSERT(r->deadline <= m_min_lease());
            struct mkey *mk = &m.key[r->key];
            int at = 0;
            while (mk->q[at] != id)
                at++;
            list_remove(mk->q, &mk->nq, at);
            ev_reply('T', id);
        } else {
            int k = key_index(e->c.key, e->c.key_len);
            struct mkey *mk = &m.key[k];
            M_ASSERT(mk->held && mk->flight == 0);
            M_ASSERT(mk->due <= m.now); /* never early */
            M_ASSERT(mk->due == m_min_lease());
            M_ASSERT(mk->due < m_min_wait());
            if (mk->nq > 0)
                m_grant_head(k, true);
            else
                ev_propose(TK_CMD_EXPIRE, k);
        }
    }
    M_ASSERT(m_min_wait() > m.now);
    M_ASSERT(m_min_lease() > m.now);
    for (int k = 0; k < NKEYS; k++)
        if (m.key[k].armed && m.key[k].due <= m.now)
            m.key[k].armed = false;
}

static void op_close(void)
{
    int slot = (int)choose(0, 3);
    uint64_t client = m.clients[slot];
    tk_lock_client_closed(m.t, client);
    for (int k = 0; k < NKEYS; k++) {
        struct mkey *mk = &m.key[k];
        for (int i = mk->nq - 1; i >= 0; i--)
            if (m.req[mk->q[i]].client == client) {
                m.req[mk->q[i]].state = M_DROPPED;
                list_remove(mk->q, &mk->nq, i);
            }
        for (int i = mk->nd - 1; i >= 0; i--)
            if (m.req[mk->d[i]].client == client) {
                m.req[mk->d[i]].state = M_DROPPED;
                list_remove(mk->d, &mk->nd, i);
            }
    }
    /* Its G/R for proposals already in flight may still come (the glue
     * drops replies for a closed connection); the model expects them. */
    m.clients[slot] = m.next_client++;
}

static void op_leader_change(void)
{
    tk_lock_follow(m.t);
    m.leader = false;
    leader_changes++;
    for (int k = 0; k < NKEYS; k++) {
        struct mkey *mk = &m.key[k];
        for (int i = 0; i < mk->nq; i++)
            m.req[mk->q[i]].state = M_DROPPED;
        for (int i = 0; i < mk->nd; i++)
            m.req[mk->d[i]].state = M_DROPPED;
        if (mk->grantee)
            m.req[mk->grantee].state = M_DROPPED;
        if (mk->releaser)
            m.req[mk->releaser].state = M_DROPPED;
        mk->nq = mk->nd = 0;
        mk->grantee = mk->releaser = 0;
        mk->flight = 0;
        mk->armed = mk->held; /* parked lease timers come back */
    }
    ev_done();
    m_check_stats();
    /* Another leader commits a prefix of what this one proposed; the rest
     * is truncated. This node applies it as a follower: silently. */
    int commit = (int)choose(0, (uint64_t)(m.raft_tail - m.raft_head));
    for (int i = 0; i < commit; i++) {
        struct tk_cmd c = m.raft[m.raft_head++ % 64];
        if (tk_cmd_grants(&c))
            c.token = ++m.next_token;
        tk_lock_apply(m.t, m.now, &c, &m.sink);
        m_apply(&c);
        ev_done();
        m_check_stats();
    }
    m.raft_head = m.raft_tail;
    /* A while as a follower: requests refused, timers idle. */
    int idle = (int)choose(0, 3);
    for (int i = 0; i < idle; i++) {
        if (choose(0, 1))
            op_acquire();
        else
            op_tick(choose(0, 2000000));
        ev_done();
        m_check_stats();
    }
    tk_lock_lead(m.t, m.now);
    m.leader = true;
    m_check_stats();
}

void lock_model_run(const struct lock_model_cfg *config, struct lock_model_result *out)
{
    memset(&m, 0, sizeof(m));
    cfg = config;
    deferred = refused = leader_changes = 0;
    M_ASSERT(cfg->steps <= LOCK_MODEL_STEPS_MAX && cfg->max_requests <= LOCK_MODEL_REQ_MAX);
    struct tk_lock_limits lim = {
        .keys_max = KEYS_MAX, .waiters_per_key_max = PER_KEY_MAX, .waiters_max = WAITERS_MAX};
    m.t = tk_lock_create(&lim);
    M_ASSERT(m.t != NULL);
    m.sink = (struct tk_lock_sink){.reply = on_reply, .propose = on_propose, .ctx = NULL};
    m.now = 5000000;
    m.next_token = 1000000;
    m.nreq = 1; /* ids start at 1 */
    m.next_client = 1;
    for (int i = 0; i < 4; i++)
        m.clients[i] = m.next_client++;
    tk_lock_lead(m.t, m.now);
    m.leader = true;
    for (step = 0; step < cfg->steps && (cfg->more == NULL || cfg->more(cfg->ctx)); step++) {
        uint64_t r = choose(0, 99);
        if (r < 30)
            op_acquire();
        else if (r < 45)
            op_release_or_query('R');
        else if (r < 52)
            op_release_or_query('Q');
        else if (r < 75)
            op_commit();
        else if (r < 93)
            op_tick(choose(0, 700000));
        else if (r < 98)
            op_close();
        else
            op_leader_change();
        ev_done();
        m_check_stats();
        if (step % cfg->holder_every == 0) {
            struct holders h = {0};
            tk_lock_each_holder(m.t, holder_seen, &h);
            M_ASSERT(h.n == m_count(1));
        }
    }
    /* Drain: commit everything and let every wait run out. */
    for (int round = 0; m.raft_head != m.raft_tail || m_count(2) > 0 || m_count(3) > 0; round++) {
        M_ASSERT(round < 10000);
        while (m.raft_head != m.raft_tail) {
            op_commit();
            ev_done();
            m_check_stats();
        }
        op_tick(1000000);
        ev_done();
        m_check_stats();
    }
    for (int i = 1; i < m.nreq; i++)
        M_ASSERT(m.req[i].state == M_DONE || m.req[i].state == M_DROPPED ||
                 m.req[i].state == M_REFUSED);
    /* Then let every lease run out: the table empties. */
    for (int round = 0; m_count(1) > 0 || m.raft_head != m.raft_tail; round++) {
        M_ASSERT(round < 1000);
        op_tick(5000000);
        while (m.raft_head != m.raft_tail)
            op_commit();
        ev_done();
        m_check_stats();
    }
    struct tk_lock_stats s;
    tk_lock_stats(m.t, &s);
    M_ASSERT(s.keys == 0);
    if (out != NULL) {
        out->stats = s;
        out->deferred = deferred;
        out->refused = refused;
        out->leader_changes = leader_changes;
    }
    tk_lock_destroy(m.t);
}
