/* The simulated cluster: network, drivers and safety checker (see
 * sim_cluster.h for the model and the properties checked). */
#include "tests/support/sim_cluster.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Noreturn void sim_fail(const struct sim_cluster *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr,
            "SIM FAILURE seed=%llu t=%llu.%06llu s step=%llu: ", (unsigned long long)c->opt.seed,
            (unsigned long long)(c->now / 1000000), (unsigned long long)(c->now % 1000000),
            (unsigned long long)c->steps);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    fflush(stderr);
    abort();
}

#define SIM_CHECK(c, cond, ...)         \
    do {                                \
        if (!(cond))                    \
            sim_fail((c), __VA_ARGS__); \
    } while (0)

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size);
    if (p == NULL) {
        fprintf(stderr, "sim: out of memory\n");
        abort();
    }
    return p;
}

static void *xrealloc(void *p, size_t size)
{
    p = realloc(p, size ? size : 1);
    if (p == NULL) {
        fprintf(stderr, "sim: out of memory\n");
        abort();
    }
    return p;
}

void sim_options_default(struct sim_options *o, uint64_t seed)
{
    memset(o, 0, sizeof(*o));
    o->seed = seed;
    tk_raft_options_default(&o->raft, 1, 1);
    /* Production ratios at a tenth of the scale: heartbeat 10 ms,
     * election 240-250 ms. */
    o->raft.heartbeat_us = 10000;
    o->raft.election_min_us = 240000;
    o->raft.election_max_us = 250000;
    o->raft.log_entries_max = 256;
    o->raft.log_bytes_max = 8u << 20;
    o->raft.snapshot_entries = 48;
    o->raft.snapshot_bytes = 4096;
    o->raft.snapshot_trailing = 8;
    o->raft.snapshot_chunk_bytes = 64;
    o->raft.append_bytes_max = 512;
    o->raft.inflight_bytes_max = 2048;
    o->raft.reads_max = 64;
    o->lat_min_us = 200;
    o->lat_max_us = 3000;
    o->check_every = 1;
}

/* ------------------------------------------------------------------ */
/* Nodes                                                               */

static uint64_t fresh_id(struct sim_cluster *c)
{
    for (;;) {
        uint64_t id = tk_prng_next(&c->prng);
        bool used = id == 0;
        for (uint32_t i = 0; i < c->n_nodes; i++)
            used |= c->nodes[i].id == id;
        if (!used)
            return id;
    }
}

int sim_add_node(struct sim_cluster *c)
{
    SIM_CHECK(c, c->n_nodes < SIM_NODES_MAX, "too many nodes");
    int slot = (int)c->n_nodes++;
    struct sim_node *n = &c->nodes[slot];
    memset(n, 0, sizeof(*n));
    n->slot = slot;
    n->addr = slot + 1;
    n->id = fresh_id(c);
    struct tk_raft_options o = c->opt.raft;
    o.id = n->id;
    o.seed = tk_prng_next(&c->prng);
    /* Its clock starts where the cluster's is (sim_local). */
    n->clk_base_g = n->clk_base_l = c->now;
    if (c->hooks.create != NULL) {
        n->driven = true;
        n->r = c->hooks.create(c->hooks.ctx, n, &o);
    } else {
        n->r = tk_raft_create(&o);
    }
    SIM_CHECK(c, n->r != NULL, "tk_raft_create failed");
    n->alive = true;
    n->role = TK_RAFT_FOLLOWER;
    n->sh_first = 1;
    for (uint32_t i = 0; i < SIM_NODES_MAX; i++) {
        c->cut[slot][i] = false;
        c->cut[i][slot] = false;
    }
    return slot;
}

void sim_init(struct sim_cluster *c, const struct sim_options *opt, uint32_t n)
{
    memset(c, 0, sizeof(*c));
    c->opt = *opt;
    tk_prng_seed(&c->prng, opt->seed);
    c->now = 1000000;
    c->scratch.entries_cap = TK_WIRE_ENTRIES_MAX;
    c->scratch.entries = xcalloc(c->scratch.entries_cap, sizeof(struct tk_raft_entry));
    for (uint32_t i = 0; i < n; i++)
        sim_add_node(c);
}

void sim_free(struct sim_cluster *c)
{
    for (uint32_t i = 0; i < c->n_nodes; i++) {
        if (c->nodes[i].driven)
            c->hooks.destroy(c->hooks.ctx, &c->nodes[i]);
        else
            tk_raft_destroy(c->nodes[i].r);
        free(c->nodes[i].sh_term);
        free(c->nodes[i].sh_hash);
    }
    for (uint64_t i = 0; i < c->heap_n; i++)
        free(c->heap[i].bytes);
    free(c->heap);
    free(c->scratch.entries);
    free(c->leader_of_term);
    for (uint64_t i = 0; i < c->recs_cap; i++)
        free(c->recs[i].seen);
    free(c->recs);
    memset(c, 0, sizeof(*c));
}

void sim_member(const struct sim_cluster *c, int slot, uint8_t role, struct tk_raft_member *m)
{
    memset(m, 0, sizeof(*m));
    m->id = c->nodes[slot].id;
    m->role = role;
    snprintf(m->peer_addr, sizeof(m->peer_addr), "10.0.0.%d:7401", c->nodes[slot].addr);
    snprintf(m->client_addr, sizeof(m->client_addr), "10.0.0.%d:7400", c->nodes[slot].addr);
}

int sim_slot_of(const struct sim_cluster *c, uint64_t id)
{
    for (uint32_t i = 0; i < c->n_nodes; i++)
        if (c->nodes[i].id == id)
            return (int)i;
    return -1;
}

/* ------------------------------------------------------------------ */
/* Records                                                             */

static struct sim_index_rec *rec_at(struct sim_cluster *c, uint64_t index)
{
    if (index >= c->recs_cap) {
        uint64_t cap = c->recs_cap ? c->recs_cap : 256;
        while (cap <= index)
            cap *= 2;
        c->recs = xrealloc(c->recs, cap * sizeof(*c->recs));
        memset(c->recs + c->recs_cap, 0, (cap - c->recs_cap) * sizeof(*c->recs));
        c->recs_cap = cap;
    }
    return &c->recs[index];
}

static uint64_t entry_hash(const struct tk_raft_entry *e)
{
    uint64_t b[5] = {e->type, e->token_first, e->token_count, e->len,
                     e->len ? tk_hash(e->data, e->len) : 0};
    return tk_hash(b, sizeof(b));
}

static uint64_t prefix_hash(uint64_t prev, uint64_t index, uint64_t term, uint64_t eh)
{
    uint64_t b[4] = {prev, index, term, eh};
    return tk_hash(b, sizeof(b));
}

static uint64_t chain_hash(uint64_t chain, uint64_t eh)
{
    uint64_t b[2] = {chain, eh};
    return tk_hash(b, sizeof(b));
}

/* Log Matching: one prefix hash per (index, term), across all nodes. */
static void record_seen(struct sim_cluster *c, uint64_t index, uint64_t term, uint64_t hash)
{
    struct sim_index_rec *rec = rec_at(c, index);
    for (uint32_t i = 0; i < rec->n_seen; i++) {
        if (rec->seen[2 * i] == term) {
            SIM_CHECK(c, rec->seen[2 * i + 1] == hash,
                      "Log Matching violated at index %llu term %llu", (unsigned long long)index,
                      (unsigned long long)term);
            return;
        }
    }
    if (rec->n_seen == rec->cap_seen) {
        rec->cap_seen = rec->cap_seen ? rec->cap_seen * 2 : 2;
        rec->seen = xrealloc(rec->seen, 2 * rec->cap_seen * sizeof(uint64_t));
    }
    rec->seen[2 * rec->n_seen] = term;
    rec->seen[2 * rec->n_seen + 1] = hash;
    rec->n_seen++;
}

/* ------------------------------------------------------------------ */
/* Shadow log of one node                                              */

static uint64_t sh_last(const struct sim_node *n)
{
    return n->sh_first + n->sh_n - 1;
}

static void sh_reserve(struct sim_node *n, uint64_t count)
{
    if (count <= n->sh_cap)
        return;
    uint64_t cap = n->sh_cap ? n->sh_cap : 64;
    while (cap < count)
        cap *= 2;
    n->sh_term = xrealloc(n->sh_term, cap * sizeof(uint64_t));
    n->sh_hash = xrealloc(n->sh_hash, cap * sizeof(uint64_t));
    n->sh_cap = cap;
}

static bool sh_hash_at(const struct sim_node *n, uint64_t index, uint64_t *hash)
{
    if (index + 1 == n->sh_first) {
        *hash = n->sh_prev_hash;
        return true;
    }
    if (index < n->sh_first || index > sh_last(n))
        return false;
    *hash = n->sh_hash[index - n->sh_first];
    return true;
}

static void shadow_sync(struct sim_cluster *c, struct sim_node *n, const struct tk_raft_status *st)
{
    uint64_t first = st->first_index;
    uint64_t last = st->last_index;
    SIM_CHECK(c, first >= n->sh_first, "log start moved back on node %d", n->slot);
    if (first > n->sh_first) {
        /* Compaction or snapshot install: the new edge is committed. */
        uint64_t edge = first - 1;
        struct sim_index_rec *rec = rec_at(c, edge);
        SIM_CHECK(c, rec->committed, "log of node %d starts after uncommitted index %llu", n->slot,
                  (unsigned long long)edge);
        uint64_t drop = TK_MIN(first - n->sh_first, n->sh_n);
        if (n->sh_n > drop) {
            memmove(n->sh_term, n->sh_term + drop, (n->sh_n - drop) * sizeof(uint64_t));
            memmove(n->sh_hash, n->sh_hash + drop, (n->sh_n - drop) * sizeof(uint64_t));
        }
        n->sh_n -= drop;
        n->sh_first = first;
        n->sh_prev_hash = rec->hash;
    }
    if (sh_last(n) > last && last + 1 >= n->sh_first)
        n->sh_n = last + 1 - n->sh_first;
    /* Entries keep their term while they stay; find where they changed. */
    uint64_t i = TK_MIN(sh_last(n), last);
    while (i >= first && n->sh_n > 0 && i >= n->sh_first &&
           n->sh_term[i - n->sh_first] != tk_raft_entry(n->r, i)->term)
        i--;
    if (i + 1 < n->sh_first)
        i = n->sh_first - 1;
    n->sh_n = i + 1 - n->sh_first;
    sh_reserve(n, last + 1 - n->sh_first);
    uint64_t prev = 0;
    SIM_CHECK(c, sh_hash_at(n, i, &prev), "shadow gap on node %d", n->slot);
    for (uint64_t j = i + 1; j <= last; j++) {
        const struct tk_raft_entry *e = tk_raft_entry(n->r, j);
        SIM_CHECK(c, e != NULL && e->index == j, "entry %llu missing on node %d",
                  (unsigned long long)j, n->slot);
        uint64_t h = prefix_hash(prev, j, e->term, entry_hash(e));
        n->sh_term[j - n->sh_first] = e->term;
        n->sh_hash[j - n->sh_first] = h;
        n->sh_n = j + 1 - n->sh_first;
        record_seen(c, j, e->term, h);
        prev = h;
    }
}

/* A node's commit index moved past index: record or compare. */
static void record_commit(struct sim_cluster *c, struct sim_node *n, uint64_t index)
{
    struct sim_index_rec *rec = rec_at(c, index);
    uint64_t h = 0;
    bool known = sh_hash_at(n, index, &h);
    const struct tk_raft_entry *e = tk_raft_entry(n->r, index);
    if (rec->committed) {
        SIM_CHECK(c, !known || h == rec->hash,
                  "State Machine Safety: node %d committed a different entry at %llu", n->slot,
                  (unsigned long long)index);
        return;
    }
    SIM_CHECK(c, index == c->committed_max + 1, "commit gap: node %d commits %llu, max %llu",
              n->slot, (unsigned long long)index, (unsigned long long)c->committed_max);
    SIM_CHECK(c, known && e != NULL, "node %d commits %llu it does not hold", n->slot,
              (unsigned long long)index);
    rec->committed = true;
    rec->term = e->term;
    rec->hash = h;
    rec->entry_hash = entry_hash(e);
    rec->token_first = e->token_first;
    rec->token_next = tk_raft_entry_token_next(e);
    if (index > 1) {
        const struct sim_index_rec *prev = &c->recs[index - 1];
        /* SPEC 7: tokens strictly increase along the committed log. */
        SIM_CHECK(c, rec->token_first >= prev->token_next, "token went back at %llu: %llu < %llu",
                  (unsigned long long)index, (unsigned long long)rec->token_first,
                  (unsigned long long)prev->token_next);
    }
    c->committed_max = index;
}

/* Leader Completeness: a new leader holds every committed entry. */
static void check_leader_complete(struct sim_cluster *c, struct sim_node *n)
{
    uint64_t k = c->committed_max;
    if (k == 0)
        return;
    uint64_t h = 0;
    SIM_CHECK(c, sh_hash_at(n, k, &h), "leader %d (term %llu) lacks committed index %llu", n->slot,
              (unsigned long long)n->term, (unsigned long long)k);
    SIM_CHECK(c, h == c->recs[k].hash,
              "Leader Completeness: leader %d has another entry at committed index %llu", n->slot,
              (unsigned long long)k);
}

static void node_check(struct sim_cluster *c, struct sim_node *n)
{
    struct tk_raft_status st;
    tk_raft_status(n->r, &st);
    SIM_CHECK(c, st.term >= n->term, "term went back on node %d", n->slot);
    SIM_CHECK(c, st.commit >= n->commit, "commit went back on node %d", n->slot);
    if (st.role == TK_RAFT_LEADER) {
        /* Election Safety */
        if (st.term >= c->terms_cap) {
            uint64_t cap = c->terms_cap ? c->terms_cap : 64;
            while (cap <= st.term)
                cap *= 2;
            c->leader_of_term = xrealloc(c->leader_of_term, cap * sizeof(uint64_t));
            memset(c->leader_of_term + c->terms_cap, 0, (cap - c->terms_cap) * sizeof(uint64_t));
            c->terms_cap = cap;
        }
        uint64_t *l = &c->leader_of_term[st.term];
        SIM_CHECK(c, *l == 0 || *l == n->id, "Election Safety: two leaders in term %llu",
                  (unsigned long long)st.term);
        *l = n->id;
    }
    shadow_sync(c, n, &st);
    for (uint64_t i = n->commit + 1; i <= st.commit; i++)
        record_commit(c, n, i);
    bool new_leader =
        st.role == TK_RAFT_LEADER && (n->role != TK_RAFT_LEADER || n->term != st.term);
    n->role = st.role;
    n->term = st.term;
    n->commit = st.commit;
    if (new_leader)
        check_leader_complete(c, n);
}

/* ------------------------------------------------------------------ */
/* Network                                                             */

static bool packet_before(const struct sim_packet *a, const struct sim_packet *b)
{
    return a->deliver_at < b->deliver_at || (a->deliver_at == b->deliver_at && a->seq < b->seq);
}

static void heap_push(struct sim_cluster *c, struct sim_packet p)
{
    if (c->heap_n == c->heap_cap) {
        c->heap_cap = c->heap_cap ? c->heap_cap * 2 : 256;
        c->heap = xrealloc(c->heap, c->heap_cap * sizeof(*c->heap));
    }
    uint64_t i = c->heap_n++;
    c->heap[i] = p;
    while (i > 0) {
        uint64_t parent = (i - 1) / 2;
        if (!packet_before(&c->heap[i], &c->heap[parent]))
            break;
        struct sim_packet t = c->heap[i];
        c->heap[i] = c->heap[parent];
        c->heap[parent] = t;
        i = parent;
    }
}

static struct sim_packet heap_pop(struct sim_cluster *c)
{
    struct sim_packet top = c->heap[0];
    c->heap[0] = c->heap[--c->heap_n];
    uint64_t i = 0;
    for (;;) {
        uint64_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < c->heap_n && packet_before(&c->heap[l], &c->heap[m]))
            m = l;
        if (r < c->heap_n && packet_before(&c->heap[r], &c->heap[m]))
            m = r;
        if (m == i)
            break;
        struct sim_packet t = c->heap[i];
        c->heap[i] = c->heap[m];
        c->heap[m] = t;
        i = m;
    }
    return top;
}

static bool chance(struct sim_cluster *c, uint32_t ppm)
{
    return ppm > 0 && tk_prng_range(&c->prng, 0, 999999) < ppm;
}

static void net_send(struct sim_cluster *c, int from, const struct tk_raft_msg *m)
{
    int to = sim_slot_of(c, m->to);
    if (to < 0 || !c->nodes[to].alive || c->cut[from][to] || chance(c, c->opt.drop_ppm)) {
        c->dropped++;
        return;
    }
    struct tk_wire_frame f = {.domain_lo = c->domain_lo, .domain_hi = c->domain_hi, .msg = *m};
    size_t len = tk_wire_encoded_len(&f);
    uint8_t *bytes = xcalloc(1, len);
    SIM_CHECK(c, tk_wire_encode(&f, bytes, len) == len, "encode failed");
    c->bytes_sent += len;
    int copies = chance(c, c->opt.dup_ppm) ? 2 : 1;
    for (int k = 0; k < copies; k++) {
        uint64_t lat = tk_prng_range(&c->prng, c->opt.lat_min_us, c->opt.lat_max_us);
        if (chance(c, c->opt.slow_ppm))
            lat = tk_prng_range(&c->prng, c->opt.slow_min_us, c->opt.slow_max_us);
        struct sim_packet p = {
            .deliver_at = c->now + c->delay_us[from][to] + lat,
            .seq = c->packet_seq++,
            .from = from,
            .to = to,
            .len = len,
            .bytes = bytes,
        };
        if (k == 1) {
            p.bytes = xcalloc(1, len);
            memcpy(p.bytes, bytes, len);
        }
        heap_push(c, p);
    }
}

static void net_deliver(struct sim_cluster *c)
{
    struct sim_packet p = heap_pop(c);
    struct sim_node *n = &c->nodes[p.to];
    if (!n->alive || n->paused || c->cut[p.from][p.to] || !c->nodes[p.from].alive) {
        c->dropped++;
        free(p.bytes);
        return;
    }
    struct tk_wire_frame f;
    int rv = tk_wire_decode(p.bytes, p.len, &f, &c->scratch);
    SIM_CHECK(c, rv == TK_OK, "a frame the core produced does not decode");
    SIM_CHECK(c, f.domain_lo == c->domain_lo && f.domain_hi == c->domain_hi, "domain");
    f.msg.to = n->id;
    struct tk_raft_event ev = {.type = TK_RAFT_EV_RECEIVE, .now_us = c->now, .receive = &f.msg};
    c->delivered++;
    /* Peers here are correct, only late, lost or duplicated: the core
     * must never take what they send for a protocol violation. */
    int erv = sim_event(c, p.to, &ev);
    SIM_CHECK(c, erv != TK_EPROTO, "a genuine message (type %u from %016llx) refused as invalid",
              (unsigned)f.msg.type, (unsigned long long)f.msg.from);
    free(p.bytes);
}

/* ------------------------------------------------------------------ */
/* Driver                                                              */

#define SNAP_HEADER 24

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static void apply_entry(struct sim_cluster *c, struct sim_node *n, uint64_t index)
{
    const struct tk_raft_entry *e = tk_raft_entry(n->r, index);
    SIM_CHECK(c, e != NULL, "node %d cannot read committed entry %llu", n->slot,
              (unsigned long long)index);
    struct sim_index_rec *rec = rec_at(c, index);
    uint64_t eh = entry_hash(e);
    SIM_CHECK(c, rec->committed && rec->entry_hash == eh,
              "State Machine Safety: node %d applies another entry at %llu", n->slot,
              (unsigned long long)index);
    SIM_CHECK(c, e->token_first >= n->token_next, "node %d applies a token going back", n->slot);
    n->token_next = tk_raft_entry_token_next(e);
    n->chain = chain_hash(n->chain, eh);
    if (rec->chain_known)
        SIM_CHECK(c, rec->chain == n->chain, "state diverged at %llu on node %d",
                  (unsigned long long)index, n->slot);
    rec->chain = n->chain;
    rec->chain_known = true;
    if (c->hooks.apply != NULL)
        c->hooks.apply(c->hooks.ctx, n, e);
    n->applied = index;
    c->applied_entries++;
}

static void install(struct sim_cluster *c, struct sim_node *n, const struct tk_raft_update *up)
{
    SIM_CHECK(c, up->install.len >= SNAP_HEADER, "snapshot too short");
    const uint8_t *d = up->install.data;
    uint64_t index = get64(d);
    uint64_t chain = get64(d + 8);
    uint64_t token_next = get64(d + 16);
    SIM_CHECK(c, index == up->install.index, "snapshot index mismatch");
    SIM_CHECK(c, token_next == up->install.token_next, "snapshot token mismatch");
    struct sim_index_rec *rec = rec_at(c, index);
    SIM_CHECK(c, rec->committed && rec->chain_known && rec->chain == chain,
              "State Machine Safety: snapshot at %llu carries another state",
              (unsigned long long)index);
    SIM_CHECK(c, index > n->applied, "snapshot %llu not ahead of applied %llu",
              (unsigned long long)index, (unsigned long long)n->applied);
    n->chain = chain;
    n->applied = index;
    n->token_next = token_next;
    n->snapshots_installed++;
    if (c->hooks.install != NULL)
        c->hooks.install(c->hooks.ctx, n, d + SNAP_HEADER, up->install.len - SNAP_HEADER);
}

static void take_snapshot(struct sim_cluster *c, struct sim_node *n)
{
    uint8_t *extra = NULL;
    size_t extra_len = 0;
    if (c->hooks.snapshot != NULL)
        extra_len = c->hooks.snapshot(c->hooks.ctx, n, &extra);
    uint8_t *blob = malloc(SNAP_HEADER + extra_len);
    SIM_CHECK(c, blob != NULL, "oom");
    put64(blob, n->applied);
    put64(blob + 8, n->chain);
    put64(blob + 16, n->token_next);
    if (extra_len > 0)
        memcpy(blob + SNAP_HEADER, extra, extra_len);
    free(extra);
    n->snapshots_taken++;
    struct tk_raft_event ev = {.type = TK_RAFT_EV_SNAPSHOT, .now_us = c->now};
    ev.snapshot.index = n->applied;
    ev.snapshot.data = blob;
    ev.snapshot.len = SNAP_HEADER + extra_len;
    int rv = sim_event(c, n->slot, &ev);
    SIM_CHECK(c, rv == TK_OK, "snapshot refused: %s", tk_strerror(rv));
}

static void process_update(struct sim_cluster *c,
                           struct sim_node *n,
                           const struct tk_raft_update *up)
{
    if (up->flags & TK_RAFT_UPDATE_SNAPSHOT_INSTALL)
        install(c, n, up);
    for (uint32_t i = 0; i < up->n_msgs; i++) {
        SIM_CHECK(c, up->msgs[i].from == n->id, "message from a stranger");
        net_send(c, n->slot, &up->msgs[i]);
    }
    for (uint32_t i = 0; i < up->n_reads; i++) {
        const struct tk_raft_read *rd = &up->reads[i];
        for (uint32_t k = 0; k < n->n_reads; k++) {
            struct sim_read *s = &n->reads[k];
            if (s->id != rd->id || s->done)
                continue;
            s->done = true;
            s->ok = rd->ok;
            s->index = rd->index;
            /* Linearizable reads (thesis §6.4). */
            SIM_CHECK(c, !rd->ok || rd->index >= s->committed_at_request,
                      "read %llu index %llu misses committed %llu", (unsigned long long)rd->id,
                      (unsigned long long)rd->index, (unsigned long long)s->committed_at_request);
        }
    }
    node_check(c, n);
    if (c->opt.check_every != 0 && (c->steps % c->opt.check_every) == 0)
        tk_raft_check(n->r);
    uint64_t applied0 = n->applied;
    for (uint64_t i = n->applied + 1; i <= up->commit; i++)
        apply_entry(c, n, i);
    bool want = (up->flags & TK_RAFT_UPDATE_SNAPSHOT_WANTED) != 0;
    if (c->hooks.after_step != NULL)
        c->hooks.after_step(c->hooks.ctx, n, up);
    /* `up` is dead past this point: the next steps reuse its buffers. */
    if (n->applied > applied0) {
        struct tk_raft_event ev = {.type = TK_RAFT_EV_APPLIED, .now_us = c->now};
        ev.applied.index = n->applied;
        int rv = sim_event(c, n->slot, &ev);
        SIM_CHECK(c, rv == TK_OK, "applied refused");
    }
    if (want && n->alive)
        take_snapshot(c, n);
}

/* A driven node's step: the same checks, then its driver performs the
 * update and reports back (sim_send, sim_applied, sim_installed). */
static void driven_update(struct sim_cluster *c,
                          struct sim_node *n,
                          int rv,
                          struct tk_raft_update *up)
{
    node_check(c, n);
    if (c->opt.check_every != 0 && (c->steps % c->opt.check_every) == 0)
        tk_raft_check(n->r);
    c->hooks.process(c->hooks.ctx, n, rv, up);
    sim_sync(c, n->slot);
}

int sim_event(struct sim_cluster *c, int slot, struct tk_raft_event *ev)
{
    struct sim_node *n = &c->nodes[slot];
    SIM_CHECK(c, n->alive, "event for a crashed node");
    ev->now_us = sim_local(c, slot);
    struct tk_raft_update up;
    int rv = tk_raft_step(n->r, ev, &up);
    if (n->driven)
        driven_update(c, n, rv, &up);
    else
        process_update(c, n, &up);
    return rv;
}

void sim_send(struct sim_cluster *c, int slot, const struct tk_raft_msg *m)
{
    SIM_CHECK(c, m->from == c->nodes[slot].id, "message from a stranger");
    net_send(c, slot, m);
}

/* Entries up to index count applied on a driven node (its driver reports
 * DATA entries only; NOOP and CONFIG entries before them go along). */
void sim_applied(struct sim_cluster *c, int slot, uint64_t index)
{
    struct sim_node *n = &c->nodes[slot];
    node_check(c, n); /* the commit that let it apply */
    for (uint64_t i = n->applied + 1; i <= index; i++)
        apply_entry(c, n, i);
}

/* The blob is the driver's (lock state, checked by the node simulation);
 * here the node's chain becomes the one recorded at that index. */
void sim_installed(struct sim_cluster *c, int slot, uint64_t index)
{
    struct sim_node *n = &c->nodes[slot];
    node_check(c, n);
    struct sim_index_rec *rec = rec_at(c, index);
    SIM_CHECK(c, rec->committed && rec->chain_known,
              "node %d installs a snapshot at %llu that nobody applied", n->slot,
              (unsigned long long)index);
    SIM_CHECK(c, index > n->applied, "snapshot %llu not ahead of applied %llu",
              (unsigned long long)index, (unsigned long long)n->applied);
    n->chain = rec->chain;
    n->applied = index;
    n->token_next = rec->token_next;
    n->snapshots_installed++;
}

void sim_sync(struct sim_cluster *c, int slot)
{
    struct sim_node *n = &c->nodes[slot];
    if (!n->alive)
        return;
    node_check(c, n);
    struct tk_raft_status st;
    tk_raft_status(n->r, &st);
    for (uint64_t i = n->applied + 1; i <= st.applied; i++)
        apply_entry(c, n, i);
}

uint64_t sim_local(const struct sim_cluster *c, int slot)
{
    const struct sim_node *n = &c->nodes[slot];
    uint64_t d = c->now - n->clk_base_g;
    /* |ppm| < 10^6: the scaled step never goes back. */
    int64_t skew = (int64_t)d * n->clk_ppm / 1000000;
    return n->clk_base_l + d + (uint64_t)skew;
}

uint64_t sim_global_at(const struct sim_cluster *c, int slot, uint64_t local)
{
    const struct sim_node *n = &c->nodes[slot];
    if (local <= n->clk_base_l)
        return n->clk_base_g;
    uint64_t x = local - n->clk_base_l;
    if (x > (UINT64_MAX >> 24))
        return UINT64_MAX; /* never, in a simulated run */
    uint64_t d = x * 1000000u / (uint64_t)(1000000 + n->clk_ppm);
    for (;;) {
        int64_t skew = (int64_t)d * n->clk_ppm / 1000000;
        if (d + (uint64_t)skew >= x)
            break;
        d++;
    }
    while (d > 0) {
        int64_t skew = (int64_t)(d - 1) * n->clk_ppm / 1000000;
        if (d - 1 + (uint64_t)skew < x)
            break;
        d--;
    }
    return n->clk_base_g + d;
}

static void clock_rebase(struct sim_cluster *c, int slot)
{
    struct sim_node *n = &c->nodes[slot];
    n->clk_base_l = sim_local(c, slot);
    n->clk_base_g = c->now;
}

void sim_clock_rate(struct sim_cluster *c, int slot, int32_t ppm)
{
    SIM_CHECK(c, ppm > -1000000 && ppm < 1000000, "clock rate out of range");
    clock_rebase(c, slot);
    c->nodes[slot].clk_ppm = ppm;
}

void sim_clock_jump(struct sim_cluster *c, int slot, uint64_t us)
{
    clock_rebase(c, slot);
    c->nodes[slot].clk_base_l += us;
    c->nodes[slot].clk_jumped_us += us;
}

int sim_propose(struct sim_cluster *c,
                int slot,
                const void *data,
                uint32_t len,
                uint32_t token_count)
{
    struct tk_raft_event ev = {.type = TK_RAFT_EV_PROPOSE};
    ev.propose.data = data;
    ev.propose.len = len;
    ev.propose.token_first = tk_raft_next_token(c->nodes[slot].r);
    ev.propose.token_count = token_count;
    return sim_event(c, slot, &ev);
}

int sim_change(struct sim_cluster *c, int slot, uint8_t type, int member_slot)
{
    struct tk_raft_member m;
    sim_member(c, member_slot, TK_RAFT_LEARNER, &m);
    struct tk_raft_event ev = {.type = TK_RAFT_EV_CHANGE};
    ev.change.type = type;
    ev.change.member = &m;
    return sim_event(c, slot, &ev);
}

int sim_transfer(struct sim_cluster *c, int slot, uint64_t target)
{
    struct tk_raft_event ev = {.type = TK_RAFT_EV_TRANSFER};
    ev.transfer.target = target;
    return sim_event(c, slot, &ev);
}

int sim_read(struct sim_cluster *c, int slot, uint64_t id)
{
    struct sim_node *n = &c->nodes[slot];
    if (n->n_reads == TK_ARRAY_LEN(n->reads)) {
        /* Forget finished reads to make room. */
        uint32_t k = 0;
        for (uint32_t i = 0; i < n->n_reads; i++)
            if (!n->reads[i].done)
                n->reads[k++] = n->reads[i];
        n->n_reads = k;
        if (k == TK_ARRAY_LEN(n->reads))
            return TK_EFULL;
    }
    struct sim_read *s = &n->reads[n->n_reads++];
    memset(s, 0, sizeof(*s));
    s->id = id;
    s->committed_at_request = c->committed_max;
    struct tk_raft_event ev = {.type = TK_RAFT_EV_READ};
    ev.read.id = id;
    int rv = sim_event(c, slot, &ev);
    if (rv != TK_OK)
        s->done = true;
    return rv;
}

void sim_bootstrap(struct sim_cluster *c, int slot)
{
    struct tk_raft_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    c->domain_lo = tk_prng_next(&c->prng);
    c->domain_hi = tk_prng_next(&c->prng);
    cfg.domain_lo = c->domain_lo;
    cfg.domain_hi = c->domain_hi;
    for (uint32_t i = 0; i < c->n_nodes; i++)
        sim_member(c, (int)i, TK_RAFT_VOTER, &cfg.m[cfg.n++]);
    struct tk_raft_event ev = {.type = TK_RAFT_EV_BOOTSTRAP};
    ev.bootstrap.config = &cfg;
    /* SPEC 7: the bootstrap's wall clock in microseconds (2026 and on). */
    ev.bootstrap.first_token = 1767225600000000ull + tk_prng_range(&c->prng, 0, 1u << 30);
    int rv = sim_event(c, slot, &ev);
    SIM_CHECK(c, rv == TK_OK, "bootstrap failed: %s", tk_strerror(rv));
}

/* ------------------------------------------------------------------ */
/* Scheduling                                                          */

bool sim_step(struct sim_cluster *c, uint64_t until)
{
    uint64_t t_msg = c->heap_n > 0 ? c->heap[0].deliver_at : UINT64_MAX;
    uint64_t t_tick = UINT64_MAX;
    int who = -1;
    for (uint32_t i = 0; i < c->n_nodes; i++) {
        struct sim_node *n = &c->nodes[i];
        if (!n->alive || n->paused)
            continue;
        uint64_t d = sim_global_at(c, (int)i, tk_raft_deadline(n->r));
        if (d < t_tick) {
            t_tick = d;
            who = (int)i;
        }
    }
    uint64_t t = TK_MIN(t_msg, t_tick);
    if (t > until) {
        if (until > c->now)
            c->now = until;
        return false;
    }
    if (t > c->now)
        c->now = t;
    c->steps++;
    if (t_msg <= t_tick) {
        net_deliver(c);
    } else {
        struct tk_raft_event ev = {.type = TK_RAFT_EV_TICK};
        sim_event(c, who, &ev);
        /* The deadline contract: a tick does the work that was due, so
         * the next deadline lies ahead (else a driver would spin). */
        SIM_CHECK(c, !c->nodes[who].alive || tk_raft_deadline(c->nodes[who].r) > sim_local(c, who),
                  "node %d still due after a tick", who);
    }
    return true;
}

void sim_run_until(struct sim_cluster *c, uint64_t t)
{
    while (sim_step(c, t)) {
    }
}

bool sim_run_while(struct sim_cluster *c,
                   uint64_t limit,
                   bool (*pred)(struct sim_cluster *c, void *arg),
                   void *arg)
{
    while (!pred(c, arg)) {
        if (!sim_step(c, limit))
            return pred(c, arg);
    }
    return true;
}

/* ------------------------------------------------------------------ */
/* Faults and queries                                                  */

void sim_crash(struct sim_cluster *c, int slot)
{
    c->nodes[slot].alive = false;
}

void sim_pause(struct sim_cluster *c, int slot, bool paused)
{
    c->nodes[slot].paused = paused;
}

void sim_cut(struct sim_cluster *c, int a, int b, bool down)
{
    c->cut[a][b] = down;
    c->cut[b][a] = down;
}

void sim_isolate(struct sim_cluster *c, int slot, bool down)
{
    for (uint32_t i = 0; i < c->n_nodes; i++)
        if ((int)i != slot)
            sim_cut(c, slot, (int)i, down);
}

void sim_heal(struct sim_cluster *c)
{
    memset(c->cut, 0, sizeof(c->cut));
}

void sim_delay(struct sim_cluster *c, int a, int b, uint64_t us)
{
    c->delay_us[a][b] = us;
    c->delay_us[b][a] = us;
}

int sim_leader(const struct sim_cluster *c)
{
    int best = -1;
    for (uint32_t i = 0; i < c->n_nodes; i++) {
        const struct sim_node *n = &c->nodes[i];
        if (!n->alive || tk_raft_role(n->r) != TK_RAFT_LEADER)
            continue;
        if (best < 0 || tk_raft_term(n->r) > tk_raft_term(c->nodes[best].r))
            best = (int)i;
    }
    return best;
}

uint32_t sim_leaders(const struct sim_cluster *c)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < c->n_nodes; i++)
        k += c->nodes[i].alive && tk_raft_role(c->nodes[i].r) == TK_RAFT_LEADER;
    return k;
}

void sim_dump(const struct sim_cluster *c)
{
    for (uint32_t i = 0; i < c->n_nodes; i++) {
        const struct sim_node *n = &c->nodes[i];
        struct tk_raft_status st;
        tk_raft_status(n->r, &st);
        fprintf(stderr,
                "  node %u id %016llx %s%s %s term %llu vote %016llx leader %016llx commit %llu "
                "applied %llu log [%llu, %llu] last_term %llu snap %llu deadline %lld\n",
                i, (unsigned long long)n->id, n->alive ? "alive" : "dead",
                n->paused ? " paused" : "", tk_raft_role_name(st.role), (unsigned long long)st.term,
                (unsigned long long)st.voted_for, (unsigned long long)st.leader_id,
                (unsigned long long)st.commit, (unsigned long long)st.applied,
                (unsigned long long)st.first_index, (unsigned long long)st.last_index,
                (unsigned long long)st.last_term, (unsigned long long)st.snapshot_index,
                tk_raft_deadline(n->r) == UINT64_MAX
                    ? -1ll
                    : (long long)(tk_raft_deadline(n->r) - sim_local(c, (int)i)));
        const struct tk_raft_config *cfg = tk_raft_config(n->r);
        for (uint32_t k = 0; cfg != NULL && k < cfg->n; k++)
            fprintf(stderr, "      member %016llx %s%s\n", (unsigned long long)cfg->m[k].id,
                    cfg->m[k].role == TK_RAFT_VOTER ? "voter" : "learner",
                    st.role == TK_RAFT_LEADER && k < st.n_members ? "" : "");
        if (st.role == TK_RAFT_LEADER)
            for (uint32_t k = 0; k < st.n_members; k++)
                fprintf(stderr, "      progress %016llx match %llu next %llu state %u heard %lld\n",
                        (unsigned long long)st.members[k].id,
                        (unsigned long long)st.members[k].match,
                        (unsigned long long)st.members[k].next, st.members[k].progress,
                        (long long)(c->now - st.members[k].last_heard_us));
    }
}

void sim_check_all(struct sim_cluster *c)
{
    for (uint32_t i = 0; i < c->n_nodes; i++) {
        if (!c->nodes[i].alive)
            continue;
        tk_raft_check(c->nodes[i].r);
        node_check(c, &c->nodes[i]);
    }
}
