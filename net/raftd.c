/* The Raft thread: drains the proposals of every shard into log entries,
 * assigns fencing tokens in log order, commits, and hands committed
 * commands back to the shards that own their keys (ARCHITECTURE.md).
 *
 * This build runs the quorum of one of a standalone node (no --peers): an
 * entry is committed as soon as it is appended. The entry format, token
 * assignment and apply path are the ones the replicated cluster uses.
 *
 * Entry payload: u64 token_first | u32 token_count | u32 ncmds | commands
 * (tk_cmd encodings, tokens filled in).
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/auth.h"
#include "net/server.h"

#define BATCH_CMDS_MAX 4096                 /* commands per log entry */
#define ENTRY_BYTES_MAX (BATCH_CMDS_MAX * TK_CMD_ENCODED_MAX + 16)
#define TOKEN_EPOCH_US UINT64_C(1767225600000000) /* 2026-01-01T00:00:00Z */

/* Histogram buckets (upper bounds) for /metrics. */
static const uint64_t batch_bounds[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096};
static const uint64_t latency_bounds_us[] = {10,   25,   50,    100,   250,   500,    1000,
                                             2500, 5000, 10000, 25000, 50000, 100000, 1000000};
#define NBATCH TK_ARRAY_LEN(batch_bounds)
#define NLAT TK_ARRAY_LEN(latency_bounds_us)

struct hist {
    _Atomic uint64_t bucket[16]; /* cumulative counts are derived when printed */
    _Atomic uint64_t count, sum;
};

struct tk_raftd {
    struct tk_server *s;
    pthread_t thread;
    struct tk_wake wake;
    struct tk_outbox to_worker[TK_WORKERS_MAX];
    uint8_t *entry;          /* the entry being built */
    uint64_t next_token;     /* fencing counter: next token to assign */
    uint64_t last_index;     /* log index of the last entry */
    uint64_t first_token;

    _Atomic uint64_t m_commit_index;
    _Atomic uint64_t m_last_token;
    _Atomic uint64_t m_commands;
    _Atomic uint64_t m_entries;
    struct hist batch;
    struct hist latency;
};

static void hist_add(struct hist *h, const uint64_t *bounds, size_t n, uint64_t v)
{
    size_t i = 0;
    while (i < n && v > bounds[i])
        i++;
    atomic_fetch_add_explicit(&h->bucket[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->count, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum, v, memory_order_relaxed);
}

static void put_u64(uint8_t *p, uint64_t v)
{
    memcpy(p, &v, 8);
}

/* Hands every command of a committed entry to the shard owning its key. */
static void apply_entry(struct tk_raftd *r, const uint8_t *data, size_t len)
{
    uint64_t token_first, expect;
    uint32_t token_count, ncmds;
    TK_ASSERT(len >= 16);
    memcpy(&token_first, data, 8);
    memcpy(&token_count, data + 8, 4);
    memcpy(&ncmds, data + 12, 4);
    expect = token_first;
    size_t off = 16;
    for (uint32_t i = 0; i < ncmds; i++) {
        struct tk_cmd c;
        size_t used;
        TK_ASSERT(tk_cmd_decode(data + off, len - off, &c, &used) == TK_OK);
        if (tk_cmd_grants(&c)) {
            TK_ASSERT(c.token == expect);
            expect++;
        }
        uint32_t shard = tk_cmd_shard(c.key, c.key_len, r->s->nworkers);
        void *p = tk_outbox_put(&r->to_worker[shard], TK_MSG_APPLY, (uint32_t)used);
        memcpy(p, data + off, used);
        off += used;
    }
    TK_ASSERT(off == len);
    TK_ASSERT(expect == token_first + token_count);
}

/* Drains proposals from all shards into entries; commits each at once
 * (quorum of one) and applies it. Returns the number of commands. */
static uint64_t drain_proposals(struct tk_raftd *r, uint64_t now_us)
{
    struct tk_server *s = r->s;
    uint64_t total = 0;
    bool more = true;
    while (more) {
        more = false;
        uint32_t ncmds = 0, ntokens = 0;
        size_t off = 16;
        uint64_t token_first = r->next_token;
        for (uint32_t i = 0; i < s->nworkers && ncmds < BATCH_CMDS_MAX; i++) {
            struct tk_ring *ring = tk_worker_outbox_to_raft(s, i);
            const struct tk_ring_msg *m;
            while (ncmds < BATCH_CMDS_MAX && (m = tk_ring_peek(ring)) != NULL) {
                TK_ASSERT(m->kind == TK_MSG_PROPOSE);
                uint64_t proposed_us;
                memcpy(&proposed_us, m->data, 8);
                struct tk_cmd c;
                size_t used;
                TK_ASSERT(tk_cmd_decode(m->data + 8, m->len - 8, &c, &used) == TK_OK);
                TK_ASSERT(tk_cmd_shard(c.key, c.key_len, s->nworkers) == i);
                if (tk_cmd_grants(&c)) {
                    TK_ASSERT(c.token == 0);
                    c.token = r->next_token++;
                    ntokens++;
                }
                size_t n = tk_cmd_encode(&c, r->entry + off, ENTRY_BYTES_MAX - off);
                TK_ASSERT(n > 0);
                off += n;
                ncmds++;
                hist_add(&r->latency, latency_bounds_us, NLAT,
                         now_us > proposed_us ? now_us - proposed_us : 0);
                tk_ring_pop(ring, m);
            }
            if (ncmds == BATCH_CMDS_MAX)
                more = true;
        }
        if (ncmds == 0)
            break;
        put_u64(r->entry, token_first);
        memcpy(r->entry + 8, &ntokens, 4);
        memcpy(r->entry + 12, &ncmds, 4);
        /* Quorum of one: appended is committed. */
        r->last_index++;
        apply_entry(r, r->entry, off);
        total += ncmds;
        hist_add(&r->batch, batch_bounds, NBATCH, ncmds);
        atomic_store_explicit(&r->m_commit_index, r->last_index, memory_order_relaxed);
        atomic_store_explicit(&r->m_last_token, r->next_token - 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&r->m_entries, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&r->m_commands, ncmds, memory_order_relaxed);
    }
    return total;
}

static void flush_all(struct tk_raftd *r)
{
    for (uint32_t i = 0; i < r->s->nworkers; i++)
        tk_outbox_flush(&r->to_worker[i]);
}

static void send_role(struct tk_raftd *r, bool leader, const char *leader_addr)
{
    for (uint32_t i = 0; i < r->s->nworkers; i++) {
        struct tk_msg_role *m = tk_outbox_put(&r->to_worker[i], TK_MSG_ROLE, sizeof(*m));
        memset(m, 0, sizeof(*m));
        m->leader = leader;
        snprintf(m->leader_addr, sizeof(m->leader_addr), "%s", leader_addr);
    }
}

static void *raftd_main(void *arg)
{
    struct tk_raftd *r = arg;
    struct tk_server *s = r->s;
    pthread_setname_np(pthread_self(), "tk-raft");
    send_role(r, true, s->advertise);
    flush_all(r);
    while (!atomic_load_explicit(&s->stopping, memory_order_relaxed)) {
        struct pollfd pfd = {.fd = r->wake.fd, .events = POLLIN};
        int rc = poll(&pfd, 1, 100);
        if (rc > 0) {
            uint64_t v;
            ssize_t n = read(r->wake.fd, &v, sizeof(v));
            (void)n;
        }
        tk_wake_clear(&r->wake);
        drain_proposals(r, tk_now_us());
        flush_all(r);
    }
    return NULL;
}

/* A new fencing domain: 16 random bytes and a first token from the wall
 * clock (SPEC 7). Refuses a clock before 2026-01-01. */
static int new_domain(struct tk_raftd *r)
{
    char hex[TK_AUTH_HEX_LEN + 1];
    if (tk_auth_nonce(hex) != TK_OK)
        return TK_EIO;
    uint64_t d[2] = {0, 0};
    for (int i = 0; i < 32; i++) {
        char ch = hex[i];
        uint64_t v = (uint64_t)(ch <= '9' ? ch - '0' : ch - 'a' + 10);
        d[i / 16] = (d[i / 16] << 4) | v;
    }
    uint64_t wall = tk_wall_us();
    if (wall < TOKEN_EPOCH_US) {
        tk_log(TK_LOG_ERROR, "wall clock reads before 2026-01-01; refusing to start a domain");
        return TK_EINVAL;
    }
    atomic_store(&r->s->domain_lo, d[0]);
    atomic_store(&r->s->domain_hi, d[1]);
    r->first_token = wall;
    r->next_token = wall;
    atomic_store(&r->m_last_token, wall - 1);
    tk_log(TK_LOG_INFO, "new fencing domain %016llx%016llx, first token %llu",
           (unsigned long long)d[1], (unsigned long long)d[0], (unsigned long long)wall);
    return TK_OK;
}

int tk_raftd_create(struct tk_server *s)
{
    struct tk_raftd *r = calloc(1, sizeof(*r));
    if (!r)
        return TK_ENOMEM;
    s->raft = r;
    r->s = s;
    r->entry = malloc(ENTRY_BYTES_MAX);
    if (!r->entry)
        return TK_ENOMEM;
    if (tk_wake_init(&r->wake) != TK_OK)
        return TK_EIO;
    return new_domain(r);
}

int tk_raftd_start(struct tk_server *s)
{
    struct tk_raftd *r = s->raft;
    for (uint32_t i = 0; i < s->nworkers; i++)
        tk_outbox_init(&r->to_worker[i], tk_worker_inbox_from_raft(s, i), tk_worker_wake(s, i));
    if (pthread_create(&r->thread, NULL, raftd_main, r) != 0)
        return TK_EIO;
    return TK_OK;
}

void tk_raftd_join(struct tk_server *s)
{
    tk_wake_signal(&s->raft->wake);
    pthread_join(s->raft->thread, NULL);
}

void tk_raftd_destroy(struct tk_server *s)
{
    struct tk_raftd *r = s->raft;
    if (!r)
        return;
    for (uint32_t i = 0; i < s->nworkers; i++)
        tk_outbox_free(&r->to_worker[i]);
    tk_wake_close(&r->wake);
    free(r->entry);
    free(r);
    s->raft = NULL;
}

struct tk_wake *tk_raftd_wake(struct tk_server *s)
{
    return &s->raft->wake;
}

static size_t hist_print(char *buf, size_t cap, const char *name, const char *help,
                         const struct hist *h, const uint64_t *bounds, size_t n, double scale)
{
    size_t off = 0;
    off += (size_t)snprintf(buf + off, cap - off, "# HELP %s %s\n# TYPE %s histogram\n", name,
                            help, name);
    uint64_t cum = 0;
    for (size_t i = 0; i <= n && off < cap; i++) {
        cum += atomic_load_explicit(&h->bucket[i], memory_order_relaxed);
        if (i < n)
            off += (size_t)snprintf(buf + off, cap - off, "%s_bucket{le=\"%g\"} %llu\n", name,
                                    (double)bounds[i] * scale, (unsigned long long)cum);
        else
            off += (size_t)snprintf(buf + off, cap - off, "%s_bucket{le=\"+Inf\"} %llu\n", name,
                                    (unsigned long long)cum);
    }
    if (off < cap)
        off += (size_t)snprintf(
            buf + off, cap - off, "%s_sum %g\n%s_count %llu\n", name,
            (double)atomic_load_explicit(&h->sum, memory_order_relaxed) * scale, name,
            (unsigned long long)atomic_load_explicit(&h->count, memory_order_relaxed));
    return TK_MIN(off, cap);
}

size_t tk_raftd_metrics(struct tk_server *s, char *buf, size_t cap)
{
    struct tk_raftd *r = s->raft;
    size_t off = 0;
    off += (size_t)snprintf(
        buf + off, cap - off,
        "# HELP ticketing_raft_commit_index Index of the last committed log entry.\n"
        "# TYPE ticketing_raft_commit_index gauge\nticketing_raft_commit_index %llu\n"
        "# HELP ticketing_raft_entries_total Log entries appended.\n"
        "# TYPE ticketing_raft_entries_total counter\nticketing_raft_entries_total %llu\n"
        "# HELP ticketing_raft_commands_total Lock commands committed.\n"
        "# TYPE ticketing_raft_commands_total counter\nticketing_raft_commands_total %llu\n"
        "# HELP ticketing_fencing_last_token Last fencing token assigned.\n"
        "# TYPE ticketing_fencing_last_token gauge\nticketing_fencing_last_token %llu\n",
        (unsigned long long)atomic_load(&r->m_commit_index),
        (unsigned long long)atomic_load(&r->m_entries),
        (unsigned long long)atomic_load(&r->m_commands),
        (unsigned long long)atomic_load(&r->m_last_token));
    if (off >= cap)
        return cap;
    off += hist_print(buf + off, cap - off, "ticketing_raft_batch_commands",
                      "Commands per log entry.", &r->batch, batch_bounds, NBATCH, 1.0);
    off += hist_print(buf + off, cap - off, "ticketing_raft_commit_seconds",
                      "Time from a shard's proposal to its commit.", &r->latency,
                      latency_bounds_us, NLAT, 1e-6);
    return off;
}

size_t tk_raftd_status(struct tk_server *s, char *buf, size_t cap)
{
    struct tk_raftd *r = s->raft;
    int n = snprintf(buf, cap,
                     "\"role\":\"leader\",\"mode\":\"standalone\",\"term\":1,"
                     "\"leader\":\"%016llx\",\"leader_addr\":\"%s\",\"commit_index\":%llu,"
                     "\"applied_index\":%llu,\"first_token\":%llu,\"last_token\":%llu,"
                     "\"members\":[{\"id\":\"%016llx\",\"addr\":\"%s\",\"voter\":true,"
                     "\"match_index\":%llu}]",
                     (unsigned long long)s->node_id, s->advertise,
                     (unsigned long long)atomic_load(&r->m_commit_index),
                     (unsigned long long)atomic_load(&r->m_commit_index),
                     (unsigned long long)r->first_token,
                     (unsigned long long)atomic_load(&r->m_last_token),
                     (unsigned long long)s->node_id, s->advertise,
                     (unsigned long long)atomic_load(&r->m_commit_index));
    return n < 0 ? 0 : TK_MIN((size_t)n, cap);
}
