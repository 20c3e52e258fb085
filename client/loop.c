/* The I/O thread: one epoll loop per client that owns every connection,
 * every timer and every outcome (SPEC 11).
 *
 * Each round: wait for sockets, the eventfd or the nearest deadline; take
 * new requests and cancellations from the API side; run expired deadlines;
 * put pending requests on connections (releases first, leader first, then
 * round-robin); write; hand freed requests back to the pool.
 *
 * A request's deadline (the heap key) depends on where it is:
 *   acquire, not yet written: submit + max(wait_ms, send_budget_min_ms),
 *     then UNAVAILABLE (an untouched line still in a write buffer is
 *     neutered first, so it can never be granted);
 *   acquire, written: first write + wait as sent + response_grace_ms, then
 *     INDETERMINATE (a G that comes after first write + lease_ms is
 *     INDETERMINATE too, reason "lease", and compensated);
 *   release (explicit or compensation): enqueue + 5 s, then UNCONFIRMED;
 *   query, ping, ring: submit + request_timeout_ms, then UNAVAILABLE;
 *   decided but still holding an id on a connection (a "zombie"): a linger
 *     time, after which its id is forgotten. A grant for a zombie acquire is
 *     released at once (known-token compensation).
 */
#include "client/internal.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "core/proto.h"

#define LOOP_EVENTS_MAX 64

/* ---- intrusive lists ------------------------------------------------------ */

void cl_list_push_back(struct cl_list *l, struct cl_req *r)
{
    r->next = NULL;
    r->prev = l->tail;
    if (l->tail != NULL)
        l->tail->next = r;
    else
        l->head = r;
    l->tail = r;
}

void cl_list_push_front(struct cl_list *l, struct cl_req *r)
{
    r->prev = NULL;
    r->next = l->head;
    if (l->head != NULL)
        l->head->prev = r;
    else
        l->tail = r;
    l->head = r;
}

void cl_list_remove(struct cl_list *l, struct cl_req *r)
{
    if (r->prev != NULL)
        r->prev->next = r->next;
    else
        l->head = r->next;
    if (r->next != NULL)
        r->next->prev = r->prev;
    else
        l->tail = r->prev;
    r->next = r->prev = NULL;
}

/* ---- the deadline heap ------------------------------------------------------ */

static void heap_put(struct tk_client *c, uint32_t i, struct cl_req *r)
{
    c->heap[i] = r;
    r->heap_idx = i;
}

static void heap_up(struct tk_client *c, uint32_t i)
{
    struct cl_req *r = c->heap[i];
    while (i > 0) {
        uint32_t parent = (i - 1) / 2;
        if (c->heap[parent]->deadline_us <= r->deadline_us)
            break;
        heap_put(c, i, c->heap[parent]);
        i = parent;
    }
    heap_put(c, i, r);
}

static void heap_down(struct tk_client *c, uint32_t i)
{
    struct cl_req *r = c->heap[i];
    for (;;) {
        uint32_t child = 2 * i + 1;
        if (child >= c->heap_len)
            break;
        if (child + 1 < c->heap_len &&
            c->heap[child + 1]->deadline_us < c->heap[child]->deadline_us)
            child++;
        if (r->deadline_us <= c->heap[child]->deadline_us)
            break;
        heap_put(c, i, c->heap[child]);
        i = child;
    }
    heap_put(c, i, r);
}

void cl_heap_set(struct tk_client *c, struct cl_req *r, uint64_t deadline_us)
{
    if (r->heap_idx != UINT32_MAX) {
        uint64_t old = r->deadline_us;
        r->deadline_us = deadline_us;
        if (deadline_us < old)
            heap_up(c, r->heap_idx);
        else
            heap_down(c, r->heap_idx);
        return;
    }
    if (c->heap_len == c->heap_cap) {
        /* Grows by doubling up to the pool's size, the most requests that
         * can exist: rare, and never in the steady state. */
        uint32_t cap = c->heap_cap ? 2 * c->heap_cap : 1024;
        struct cl_req **h = realloc(c->heap, (size_t)cap * sizeof *h);
        TK_ASSERT(h != NULL); /* no safe way on: a request without a deadline */
        c->heap = h;
        c->heap_cap = cap;
    }
    r->deadline_us = deadline_us;
    c->heap[c->heap_len] = r;
    r->heap_idx = c->heap_len++;
    heap_up(c, r->heap_idx);
}

void cl_heap_remove(struct tk_client *c, struct cl_req *r)
{
    uint32_t i = r->heap_idx;
    if (i == UINT32_MAX)
        return;
    TK_DEBUG_ASSERT(c->heap[i] == r);
    r->heap_idx = UINT32_MAX;
    struct cl_req *last = c->heap[--c->heap_len];
    if (i == c->heap_len)
        return;
    heap_put(c, i, last);
    heap_up(c, i);
    heap_down(c, last->heap_idx);
}

/* ---- outcomes -------------------------------------------------------------- */

void cl_decide(struct tk_client *c, struct cl_req *r, struct tk_client_result *res)
{
    TK_ASSERT(!r->decided);
    r->decided = true;
    res->key = r->key;
    res->sent_us = r->sent_us;
    if (r->type == 'S') {
        /* A ring that did not come leaves "" rather than the parts of an
         * attempt; after the callback the buffer is the caller's again,
         * and late lines for this id (a zombie's) are only checked. */
        if (res->outcome != TK_CLIENT_ANSWERED && r->ring_cap > 0)
            r->ring_buf[0] = '\0';
        r->ring_buf = NULL;
        r->ring_cap = 0;
    }
    if (res->outcome == TK_CLIENT_INDETERMINATE)
        atomic_fetch_add_explicit(&c->st_indeterminate, 1, memory_order_relaxed);
    if (r->compensation) {
        cl_log(c, res->outcome == TK_CLIENT_RELEASED || res->outcome == TK_CLIENT_NOT_HELD ? 2 : 1,
               "compensation release of %s token %llu: %s", r->key, (unsigned long long)r->token,
               tk_client_outcome_str(res->outcome));
        return;
    }
    TK_ASSERT(r->done != NULL);
    r->done(r->arg, res);
}

/* Decides r with a bare outcome (and a reason word, or NULL); r holds no
 * connection and is freed. */
static void finish_why(struct tk_client *c,
                       struct cl_req *r,
                       enum tk_client_outcome o,
                       const char *reason)
{
    struct tk_client_result res = {.outcome = o};
    TK_ASSERT(r->wire == CL_WIRE_NONE);
    if (reason != NULL)
        snprintf(res.reason, sizeof res.reason, "%s", reason);
    if (r->type == 'R')
        res.token = r->token;
    if (r->pending) {
        cl_list_remove(r->type == 'R' ? &c->pending_rel : &c->pending, r);
        r->pending = false;
    }
    cl_heap_remove(c, r);
    cl_decide(c, r, &res);
    cl_release_req(c, r);
}

static void finish(struct tk_client *c, struct cl_req *r, enum tk_client_outcome o)
{
    finish_why(c, r, o, NULL);
}

void cl_repend(struct tk_client *c, struct cl_req *r, bool front)
{
    struct cl_list *l = r->type == 'R' ? &c->pending_rel : &c->pending;
    TK_ASSERT(r->wire == CL_WIRE_NONE);
    TK_ASSERT(!r->pending);
    if (front)
        cl_list_push_front(l, r);
    else
        cl_list_push_back(l, r);
    r->pending = true;
}

/* A new request (from the API, or a compensation): its first deadline. */
static void accept_req(struct tk_client *c, struct cl_req *r)
{
    uint64_t budget_ms;
    switch (r->type) {
        case 'A':
            budget_ms = TK_MAX(r->wait_ms, c->cfg.send_budget_min_ms);
            break;
        case 'R':
            budget_ms = TK_CLIENT_RELEASE_DEADLINE_MS;
            break;
        default:
            budget_ms = c->cfg.request_timeout_ms;
            break;
    }
    cl_heap_set(c, r, r->submit_us + budget_ms * 1000u);
    cl_repend(c, r, false);
}

static void compensate(struct tk_client *c, const struct cl_req *r, uint64_t token)
{
    struct cl_req *comp = cl_compensation_new(c, r->key, r->key_len, token);
    if (comp == NULL) {
        atomic_fetch_add_explicit(&c->st_compensations_dropped, 1, memory_order_relaxed);
        cl_log(c, 1,
               "late grant of %s token %llu not released: release queue full "
               "(the lease will free it)",
               r->key, (unsigned long long)token);
        return;
    }
    atomic_fetch_add_explicit(&c->st_compensations, 1, memory_order_relaxed);
    cl_log(c, 2, "late grant of %s token %llu: releasing it", r->key, (unsigned long long)token);
    accept_req(c, comp);
}

/* A decided request that still holds an id: keep the id until an answer
 * comes or the linger ends, so a late grant can be compensated. */
static void zombie(struct tk_client *c, struct cl_req *r, uint64_t now_us)
{
    uint64_t until = now_us + CL_ZOMBIE_LINGER_US;
    if (r->type == 'A' && r->wire == CL_WIRE_SENT)
        until += (uint64_t)r->wait_sent_ms * 1000u;
    cl_heap_set(c, r, until);
}

void cl_on_sent(struct tk_client *c, struct cl_req *r, uint64_t now_us)
{
    TK_ASSERT(r->wire == CL_WIRE_QUEUED);
    r->wire = CL_WIRE_SENT;
    if (r->sent_us != 0 && r->type == 'R')
        r->resent = true;
    r->sent_us = now_us;
    atomic_fetch_add_explicit(&c->st_written, 1, memory_order_relaxed);
    if (!r->decided && r->type == 'A')
        cl_heap_set(c, r, now_us + ((uint64_t)r->wait_sent_ms + c->cfg.response_grace_ms) * 1000u);
}

/* Which answers a request takes (SPEC 3, 15): W for any request about a
 * key, E for any request at all. */
static bool response_fits(char req, char rsp)
{
    switch (req) {
        case 'A':
            return rsp == 'G' || rsp == 'T' || rsp == 'B' || rsp == 'W' || rsp == 'E';
        case 'R':
            return rsp == 'R' || rsp == 'N' || rsp == 'W' || rsp == 'E';
        case 'Q':
            return rsp == 'Q' || rsp == 'W' || rsp == 'E';
        case 'S':
            return rsp == 'S' || rsp == 'E';
        default:
            return rsp == 'P' || rsp == 'E';
    }
}

bool cl_response_fits(const struct cl_req *r, char rsp_type)
{
    return r->neutered ? rsp_type == 'E' : response_fits(r->type, rsp_type);
}

static void response_result(const struct cl_req *r,
                            const struct tk_response *rsp,
                            struct tk_client_result *res,
                            uint64_t now_us)
{
    switch (rsp->type) {
        case 'G':
            res->outcome = TK_CLIENT_ACQUIRED;
            res->token = rsp->token;
            /* SPEC 3: the lease counts from the commit; the first write is
             * earlier, so this deadline is never late. */
            res->lease_deadline_us = r->sent_us + (uint64_t)r->lease_ms * 1000u;
            break;
        case 'T':
            res->outcome = TK_CLIENT_TIMEOUT;
            break;
        case 'B':
            res->outcome = TK_CLIENT_BUSY;
            break;
        case 'R':
            res->outcome = TK_CLIENT_RELEASED;
            break;
        case 'N':
            res->outcome = TK_CLIENT_NOT_HELD;
            break;
        case 'Q':
            res->outcome = TK_CLIENT_ANSWERED;
            res->held = rsp->owner != NULL;
            res->token = rsp->token;
            res->waiters = rsp->waiters;
            if (rsp->owner != NULL) {
                size_t n = TK_MIN(rsp->owner_len, sizeof res->owner - 1);
                memcpy(res->owner, rsp->owner, n);
                res->owner[n] = '\0';
            }
            break;
        case 'P':
            res->outcome = TK_CLIENT_ANSWERED;
            res->rtt_us = now_us > r->sent_us ? now_us - r->sent_us : 0;
            break;
        case 'W':
            /* Definite: the group did nothing (SPEC 15). A release so
             * answered is decided here like an N, so the release queue
             * does not send it again. */
            res->outcome = TK_CLIENT_WRONG_GROUP;
            res->slot = rsp->slot;
            res->ring_version = rsp->version;
            break;
        case 'S':
            /* Its last part: the body is in the caller's buffer
             * (conn_read.c put every part there). */
            TK_ASSERT(r->ring_part == r->ring_parts);
            res->outcome = TK_CLIENT_ANSWERED;
            res->ring_version = r->ring_version;
            res->ring_len = r->ring_len;
            if (r->ring_cap > 0)
                r->ring_buf[TK_MIN(r->ring_len, r->ring_cap - 1)] = '\0';
            break;
        default: /* 'E' with an id */
            res->outcome = TK_CLIENT_INVALID;
            snprintf(res->reason, sizeof res->reason, "%.*s",
                     (int)TK_MIN(rsp->text_len, sizeof res->reason - 1), rsp->text);
            break;
    }
    if (r->type == 'R') {
        res->token = r->token;
        res->resent = r->resent;
    }
}

/* A G for a pending acquire that arrives at or after the lease deadline the
 * client counts from its first write (SPEC 3: "count it from the moment it
 * sent the acquire"): the lease it grants may already be someone else's, so
 * the caller must not enter. It is INDETERMINATE with reason "lease" (a grant
 * came, but too late to be used), and the token is released at once as a
 * known-token compensation, as for a G that comes after the caller was told. */
static void grant_too_late(struct tk_client *c,
                           const struct cl_req *r,
                           struct tk_client_result *res)
{
    TK_ASSERT(r->type == 'A');
    TK_ASSERT(res->token != 0);
    cl_log(c, 1, "grant of %s token %llu came after its lease had run out", r->key,
           (unsigned long long)res->token);
    compensate(c, r, res->token);
    *res = (struct tk_client_result){.outcome = TK_CLIENT_INDETERMINATE};
    snprintf(res->reason, sizeof res->reason, "lease");
}

void cl_on_response(struct tk_client *c, struct cl_req *r, const struct tk_response *rsp)
{
    TK_ASSERT(r->wire == CL_WIRE_NONE); /* the connection let go of it */
    if (r->type == 'A')
        c->wire_acquires--;
    if (r->decided) {
        if (r->type == 'A' && rsp->type == 'G')
            compensate(c, r, rsp->token);
        cl_heap_remove(c, r);
        cl_release_req(c, r);
        return;
    }
    struct tk_client_result res = {0};
    uint64_t now_us = cl_now_us();
    if (rsp->type == 'W' && rsp->slot != tk_slot(r->key, r->key_len))
        cl_log(c, 1, "%s: the server says slot %u, we compute %u (SPEC 15)", r->key,
               (unsigned)rsp->slot, (unsigned)tk_slot(r->key, r->key_len));
    response_result(r, rsp, &res, now_us);
    if (res.outcome == TK_CLIENT_ACQUIRED && now_us >= res.lease_deadline_us)
        grant_too_late(c, r, &res);
    cl_heap_remove(c, r);
    cl_decide(c, r, &res);
    cl_release_req(c, r);
}

void cl_on_conn_lost(struct tk_client *c, struct cl_req *r)
{
    bool sent = r->wire == CL_WIRE_SENT;
    TK_ASSERT(r->wire != CL_WIRE_NONE);
    r->wire = CL_WIRE_NONE;
    r->conn = NULL;
    if (r->type == 'A')
        c->wire_acquires--;
    if (r->decided) { /* a zombie: its answer is gone with the connection */
        cl_heap_remove(c, r);
        cl_release_req(c, r);
    } else if (!sent || r->type != 'A') {
        /* Not one byte written: the same logical request may go elsewhere
         * (seed). A written release or read is safe to repeat: the release
         * queue retries releases (SPEC 4.3), reads change nothing. */
        r->neutered = false;
        cl_repend(c, r, true);
    } else {
        /* Written, no answer: nobody knows whether it was granted. Never
         * resent; M or a close is no ground for it (seed). */
        finish(c, r, TK_CLIENT_INDETERMINATE);
    }
}

/* A deadline passed. */
static void expire(struct tk_client *c, struct cl_req *r, uint64_t now_us)
{
    if (r->decided) { /* the linger of a zombie ended: forget its id */
        TK_ASSERT(r->wire != CL_WIRE_NONE);
        cl_conn_drop_slot(r->conn, r);
        if (r->type == 'A')
            c->wire_acquires--;
        cl_release_req(c, r);
        return;
    }
    enum tk_client_outcome o;
    if (r->type == 'R')
        o = TK_CLIENT_UNCONFIRMED;
    else if (r->type == 'A' && r->wire == CL_WIRE_SENT)
        o = TK_CLIENT_INDETERMINATE;
    else
        o = TK_CLIENT_UNAVAILABLE;
    if (r->wire == CL_WIRE_NONE) {
        finish(c, r, o);
        return;
    }
    if (r->wire == CL_WIRE_QUEUED)
        cl_conn_neuter(r->conn, r); /* "X <id> ...": answered E, changes nothing */
    struct tk_client_result res = {.outcome = o};
    if (r->type == 'R')
        res.token = r->token;
    cl_decide(c, r, &res);
    zombie(c, r, now_us);
}

static void cancel_one(struct tk_client *c, struct cl_req *r, uint64_t now_us)
{
    if (r->decided || r->type != 'A')
        return;
    if (r->wire == CL_WIRE_NONE) {
        finish(c, r, TK_CLIENT_CANCELLED);
        return;
    }
    if (r->wire == CL_WIRE_QUEUED)
        cl_conn_neuter(r->conn, r);
    struct tk_client_result res = {.outcome = TK_CLIENT_CANCELLED};
    cl_decide(c, r, &res);
    zombie(c, r, now_us);
}

/* ---- M hints ----------------------------------------------------------------- */

void cl_on_ready_change(struct tk_client *c, int delta)
{
    pthread_mutex_lock(&c->mu);
    TK_ASSERT(delta > 0 || c->ready_count > 0);
    c->ready_count = (uint32_t)((int)c->ready_count + delta);
    if (c->ready_count > 0)
        pthread_cond_broadcast(&c->ready_cond);
    pthread_mutex_unlock(&c->mu);
}

/* The slot for a new extra connection: a free one, a retired one, or the
 * oldest extra that is not ready. -1 if every extra is busy serving. */
static int extra_slot(struct tk_client *c)
{
    if (c->nconns < CL_CONNS_MAX)
        return -1 - (int)c->nconns; /* "new at index nconns" */
    for (unsigned i = c->nconfigured; i < c->nconns; i++)
        if (c->conns[i]->state == CL_CONN_RETIRED)
            return (int)i;
    for (unsigned i = c->nconfigured; i < c->nconns; i++)
        if (c->conns[i]->state != CL_CONN_READY)
            return (int)i;
    return INT_MIN;
}

void cl_on_moved(struct tk_client *c, const char *addr, size_t len, uint64_t now_us)
{
    char text[CL_ADDR_TEXT_MAX];
    atomic_fetch_add_explicit(&c->st_moved, 1, memory_order_relaxed);
    if (addr == NULL || len == 0 || len >= sizeof text)
        text[0] = '\0';
    else {
        memcpy(text, addr, len);
        text[len] = '\0';
    }
    pthread_mutex_lock(&c->mu);
    bool same = strcmp(text, c->leader_hint) == 0;
    memcpy(c->leader_hint, text, sizeof text);
    pthread_mutex_unlock(&c->mu);
    if (text[0] == '\0') {
        c->leader = -1; /* "M -": no leader known now */
        return;
    }
    if (!same)
        cl_log(c, 2, "leader hint: %s", text);
    for (unsigned i = 0; i < c->nconns; i++) {
        struct cl_conn *k = c->conns[i];
        if (strcmp(k->addr, text) == 0) {
            c->leader = (int)i;
            if (k->state == CL_CONN_RETIRED) { /* an extra retired by an earlier hint */
                k->state = CL_CONN_IDLE;
                k->backoff_ms = c->cfg.backoff_min_ms;
                k->next_attempt_us = UINT64_MAX; /* set just below */
            }
            /* Try it soon, but not sooner than the shortest backoff: two
             * nodes naming each other during an election must not make a
             * tight loop. */
            if (k->state == CL_CONN_IDLE)
                k->next_attempt_us =
                    TK_MIN(k->next_attempt_us, now_us + c->cfg.backoff_min_ms * 1000u);
            return;
        }
    }
    /* A member we were not configured with: connect to it too (only once
     * the server's proof checked out is an M believed at all). */
    int slot = extra_slot(c);
    if (slot == INT_MIN) {
        cl_log(c, 1, "no room for a connection to hinted leader %s", text);
        return;
    }
    unsigned i = slot < 0 ? (unsigned)(-1 - slot) : (unsigned)slot;
    if (slot < 0) {
        struct cl_conn *k = cl_conn_new(c, text, true);
        if (k == NULL) {
            cl_log(c, 1, "cannot connect to hinted leader %s (bad address or no memory)", text);
            return;
        }
        k->index = i;
        k->next_attempt_us = now_us;
        c->conns[i] = k;
        c->nconns++;
        atomic_store(&c->nconns_pub, c->nconns);
    } else {
        /* Reused in place, never freed here: an event for it may still be
         * in this round's batch (it sees fd -1 and is ignored). */
        cl_conn_retire(c->conns[i], now_us);
        if (cl_conn_set_addr(c->conns[i], text, now_us) != 0) {
            cl_log(c, 1, "cannot connect to hinted leader %s (bad address)", text);
            return;
        }
    }
    c->leader = (int)i;
}

/* ---- the loop ----------------------------------------------------------------- */

static struct cl_conn *pick_conn(struct tk_client *c)
{
    if (c->leader >= 0 && cl_conn_has_room(c->conns[c->leader]))
        return c->conns[c->leader];
    for (unsigned n = 0; n < c->nconns; n++) {
        unsigned i = (c->rr + n) % c->nconns;
        if (cl_conn_has_room(c->conns[i])) {
            c->rr = (i + 1) % c->nconns;
            return c->conns[i];
        }
    }
    return NULL;
}

static void dispatch(struct tk_client *c, uint64_t now_us)
{
    struct cl_list *lists[2] = {&c->pending_rel, &c->pending};
    for (int l = 0; l < 2; l++) {
        while (lists[l]->head != NULL) {
            struct cl_conn *k = pick_conn(c);
            if (k == NULL)
                return;
            struct cl_req *r = lists[l]->head;
            cl_list_remove(lists[l], r);
            r->pending = false;
            if (r->type == 'A')
                c->wire_acquires++;
            cl_conn_queue(k, r, now_us);
        }
    }
}

/* Every connection's last attempt was refused in TLS (certificates, or a
 * plaintext server): a configuration error that waiting will not fix. The
 * acquires, queries and pings that no connection took end UNAVAILABLE
 * "tls" now rather than at their budget; nothing of them was written.
 * Releases keep their deadline: the release queue retries until it. */
static void fail_tls_refused(struct tk_client *c)
{
    if (c->pending.head == NULL || !cl_conns_tls_refused(c))
        return;
    while (c->pending.head != NULL)
        finish_why(c, c->pending.head, TK_CLIENT_UNAVAILABLE, "tls");
}

static void drain_begin(struct tk_client *c, uint64_t now_us)
{
    c->draining = true;
    c->drain_deadline_us = now_us + TK_CLIENT_RELEASE_DEADLINE_MS * 1000u;
    while (c->pending.head != NULL)
        finish(c, c->pending.head, TK_CLIENT_CANCELLED);
    for (unsigned i = 0; i < c->nconns; i++) {
        struct cl_conn *k = c->conns[i];
        for (uint32_t s = 0; k->slots != NULL && s <= k->mask; s++) {
            struct cl_req *r = k->slots[s];
            if (r != NULL && !r->decided && r->type != 'R') {
                if (r->wire == CL_WIRE_QUEUED)
                    cl_conn_neuter(k, r);
                struct tk_client_result res = {.outcome = TK_CLIENT_CANCELLED};
                cl_decide(c, r, &res);
                zombie(c, r, now_us);
            }
        }
    }
}

/* Takes what API threads left: new requests, cancellations, the stop. */
static void drain_inbox(struct tk_client *c, uint64_t now_us)
{
    uint64_t count;
    /* Order matters: consume the eventfd, then clear the flag, then take
     * the lists. A waker that saw the flag set pushed before this clear,
     * hence before the take; one that sees it clear writes the eventfd
     * again. (Clearing first could let this read swallow the write of a
     * waker that then left the flag set for good: a lost wake-up.) */
    ssize_t got = read(c->efd, &count, sizeof count);
    (void)got; /* EAGAIN: a wake already consumed; nothing else can fail */
    atomic_store_explicit(&c->wake_pending, false, memory_order_seq_cst);

    pthread_mutex_lock(&c->mu);
    struct cl_list sub = c->submitted;
    c->submitted = (struct cl_list){0};
    uint64_t *cancels = c->cancels;
    size_t ncancels = c->ncancels;
    c->cancels = NULL;
    c->ncancels = 0;
    c->cancels_cap = 0;
    bool stopping = c->stopping;
    uint32_t pool_len = c->pool_len;
    pthread_mutex_unlock(&c->mu);

    while (sub.head != NULL) {
        struct cl_req *r = sub.head;
        cl_list_remove(&sub, r);
        accept_req(c, r);
    }
    /* A request's generation changes only when this thread frees it, so the
     * check below is exact here. */
    for (size_t i = 0; i < ncancels; i++) {
        uint32_t index = (uint32_t)cancels[i], gen = (uint32_t)(cancels[i] >> 32);
        if (index < pool_len) {
            pthread_mutex_lock(&c->mu);
            struct cl_req *r = cl_req_at(c, index);
            pthread_mutex_unlock(&c->mu);
            if (r->gen == gen)
                cancel_one(c, r, now_us);
        }
    }
    free(cancels);
    if (stopping && !c->draining)
        drain_begin(c, now_us);
    cl_resolve_collect(c, now_us);
}

static void run_timers(struct tk_client *c, uint64_t now_us)
{
    for (unsigned i = 0; i < c->nconns; i++)
        if (cl_conn_next_timer(c->conns[i]) <= now_us)
            cl_conn_timer(c->conns[i], now_us);
    while (c->heap_len > 0 && c->heap[0]->deadline_us <= now_us) {
        struct cl_req *r = c->heap[0];
        cl_heap_remove(c, r);
        expire(c, r, now_us);
    }
}

static int loop_timeout_ms(struct tk_client *c, uint64_t now_us)
{
    uint64_t next = UINT64_MAX;
    if (c->heap_len > 0)
        next = c->heap[0]->deadline_us;
    for (unsigned i = 0; i < c->nconns; i++)
        next = TK_MIN(next, cl_conn_next_timer(c->conns[i]));
    if (c->draining)
        next = TK_MIN(next, c->drain_deadline_us);
    if (next == UINT64_MAX)
        return -1;
    if (next <= now_us)
        return 0;
    uint64_t ms = (next - now_us + 999) / 1000; /* round up: never wake early */
    return ms > INT_MAX ? INT_MAX : (int)ms;
}

/* Destroy waits for the release queue only. Acquires still on a wire are
 * not waited for: closing their connection removes a queued waiter on the
 * server (SPEC 6), and a grant already on its way is freed by its lease. */
static bool drain_done(struct tk_client *c, uint64_t now_us)
{
    if (now_us >= c->drain_deadline_us)
        return true;
    pthread_mutex_lock(&c->mu);
    uint32_t releases = c->live_releases;
    pthread_mutex_unlock(&c->mu);
    return releases == 0;
}

/* The end: every connection closed, every request decided and freed. */
static void final_sweep(struct tk_client *c, uint64_t now_us)
{
    for (unsigned i = 0; i < c->nconns; i++)
        cl_conn_retire(c->conns[i], now_us);
    while (c->pending_rel.head != NULL)
        finish(c, c->pending_rel.head, TK_CLIENT_UNCONFIRMED);
    while (c->pending.head != NULL)
        finish(c, c->pending.head, TK_CLIENT_CANCELLED);
    TK_ASSERT(c->wire_acquires == 0);
    /* Zombies that lost their connection above are freed; what is left in
     * the heap is nothing. */
    TK_ASSERT(c->heap_len == 0);
    cl_pool_return(c);
}

void *cl_io_main(void *arg)
{
    struct tk_client *c = arg;
    struct epoll_event evs[LOOP_EVENTS_MAX];
    cl_on_client_thread = true;
    uint64_t now = cl_now_us();
    for (unsigned i = 0; i < c->nconns; i++)
        c->conns[i]->next_attempt_us = now;
    drain_inbox(c, now);
    for (;;) {
        run_timers(c, now);
        dispatch(c, now);
        fail_tls_refused(c);
        for (unsigned i = 0; i < c->nconns; i++)
            cl_conn_flush(c->conns[i], now);
        cl_pool_return(c);
        if (c->draining && drain_done(c, now))
            break;
        int n = epoll_wait(c->epfd, evs, LOOP_EVENTS_MAX, loop_timeout_ms(c, now));
        if (n < 0 && errno != EINTR)
            cl_log(c, 0, "epoll_wait: %s", strerror(errno));
        now = cl_now_us();
        bool inbox = false;
        for (int i = 0; i < n; i++) {
            if (evs[i].data.ptr == NULL)
                inbox = true;
            else
                cl_conn_event(evs[i].data.ptr, evs[i].events, now);
        }
        if (inbox)
            drain_inbox(c, now);
    }
    final_sweep(c, now);
    cl_tls_thread_end();
    return NULL;
}
