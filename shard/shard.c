/* The shard runtime (shard/shard.h): routing, epochs, forwarded and early
 * requests, held reads, and the snapshot cut and install of one shard. */
#include <stdlib.h>
#include <string.h>

#include "core/slots.h"
#include "core/snap.h"
#include "shard/shard.h"

/* A Q or N reply held until a read barrier confirms this node still led
 * after computing it (linearizable reads, SPEC 3). */
struct held_reply {
    struct held_reply *next;
    uint64_t round;
    struct tk_msg_reply r;
    char owner[TK_OWNER_LEN_MAX];
};

/* A forwarded request whose epoch this shard has not reached yet: it waits
 * for our ROLE message. */
struct early_req {
    struct early_req *next;
    struct tk_msg_req q;
    char bytes[TK_KEY_LEN_MAX + TK_OWNER_LEN_MAX];
};

/* The shard's snapshot cut in progress: the piece being filled and what the
 * whole cut holds. */
struct shard_cut {
    bool running;
    uint64_t index;
    uint8_t *buf;
    size_t len, cap;
    uint64_t count;    /* records in buf */
    uint64_t sent_len; /* bytes in pieces already sent */
    uint64_t next_us;  /* when the next slice is due */
    uint64_t begin_us;
    uint64_t total_count, total_len;
};

struct tk_shard {
    struct tk_shard_options o;
    struct tk_msg_out out;
    struct tk_shard_client client;
    struct tk_lock_table *table;
    struct tk_lock_sink sink;
    uint64_t now_us; /* of the step in progress */
    bool leader;
    uint64_t epoch; /* of the last ROLE message */

    struct held_reply *held_head, *held_tail;
    uint64_t nheld;
    uint64_t read_round; /* tag of replies held in the current round */
    uint64_t read_barriers;
    struct early_req *early_head, *early_tail;
    uint64_t nearly;
    struct shard_cut cut;
    struct tk_slot_view *slots; /* NULL: no ring committed yet */
};

/* ------------------------------------------------------------------ */
/* Replies */

static void reply_now(struct tk_shard *sh, const struct tk_msg_reply *r)
{
    uint32_t dst = tk_client_shard(r->client);
    TK_ASSERT(dst < sh->o.nshards);
    if (dst == sh->o.idx) {
        sh->client.reply(sh->client.ctx, r);
        return;
    }
    struct tk_msg m = {.kind = TK_MSG_REPLY, .u.reply = *r};
    tk_msg_send(&sh->out, dst, &m);
}

static void refuse(struct tk_shard *sh, uint64_t client, uint64_t id, uint8_t reason)
{
    uint32_t dst = tk_client_shard(client);
    TK_ASSERT(dst < sh->o.nshards);
    if (dst == sh->o.idx) {
        sh->client.refuse(sh->client.ctx, client, id, reason);
        return;
    }
    struct tk_msg m = {.kind = TK_MSG_REFUSE, .u.refuse = {client, id, reason}};
    tk_msg_send(&sh->out, dst, &m);
}

static void sink_waited(void *ctx, uint64_t waited_us)
{
    struct tk_shard *sh = ctx;
    if (sh->client.waited != NULL)
        sh->client.waited(sh->client.ctx, waited_us);
}

static void sink_reply(void *ctx, const struct tk_lock_reply *lr)
{
    struct tk_shard *sh = ctx;
    struct tk_msg_reply r = {
        .client = lr->client,
        .id = lr->id,
        .token = lr->token,
        .arrived_us = lr->arrived_us,
        .waiters = lr->waiters,
        .type = lr->type,
        .owner_len = (uint8_t)lr->owner_len,
        .owner = lr->owner,
    };
    if (r.type != 'Q' && r.type != 'N') {
        reply_now(sh, &r);
        return;
    }
    /* A read: hold it until a barrier started after now confirms that this
     * node still led; a deposed leader must not answer from stale state.
     * Bounded: every held reply answers a request in flight. */
    TK_ASSERT(sh->nheld < sh->o.requests_max);
    struct held_reply *h = malloc(sizeof(*h));
    TK_ASSERT(h != NULL);
    h->next = NULL;
    h->round = sh->read_round;
    h->r = r;
    if (r.owner_len) {
        memcpy(h->owner, r.owner, r.owner_len);
        h->r.owner = h->owner;
    }
    if (sh->held_tail)
        sh->held_tail->next = h;
    else
        sh->held_head = h;
    sh->held_tail = h;
    sh->nheld++;
}

static void sink_propose(void *ctx, const struct tk_cmd *cmd)
{
    struct tk_shard *sh = ctx;
    struct tk_msg m = {.kind = TK_MSG_PROPOSE,
                       .u.propose = {.epoch = sh->epoch, .proposed_us = sh->now_us, .cmd = *cmd}};
    tk_msg_send(&sh->out, TK_MSG_TO_DRIVER, &m);
}

/* Releases held reads up to round (ok), or drops them (leadership lost:
 * the connections are closed with M). */
static void release_reads(struct tk_shard *sh, uint64_t round, bool ok)
{
    while (sh->held_head && sh->held_head->round <= round) {
        struct held_reply *h = sh->held_head;
        sh->held_head = h->next;
        if (!sh->held_head)
            sh->held_tail = NULL;
        if (ok)
            reply_now(sh, &h->r);
        sh->nheld--;
        free(h);
    }
}

void tk_shard_flush(struct tk_shard *sh)
{
    if (!sh->held_tail || sh->held_tail->round != sh->read_round)
        return;
    struct tk_msg m = {.kind = TK_MSG_READ, .u.read = {sh->read_round}};
    tk_msg_send(&sh->out, TK_MSG_TO_DRIVER, &m);
    sh->read_round++;
    sh->read_barriers++;
}

/* ------------------------------------------------------------------ */
/* Requests */

/* SPEC 15: whether this group serves the key's slot at its committed
 * state. With no ring, a group named by --group serves nothing yet and
 * one without serves every slot. A slot frozen for a move still takes the
 * release of a holder (the move waits for them), nothing else. */
static bool serves(const struct tk_shard *sh, const struct tk_msg_req *q, uint32_t *slot)
{
    if (!sh->slots) {
        *slot = sh->o.grouped ? tk_slot(q->key, q->key_len) : 0;
        return !sh->o.grouped;
    }
    *slot = tk_slot(q->key, q->key_len);
    return tk_slots_bit(q->type == 'R' ? sh->slots->own : sh->slots->serve, *slot);
}

static void local_request(struct tk_shard *sh, const struct tk_msg_req *q)
{
    uint32_t slot;
    /* A follower's table refuses with M (below): M before W. */
    if (sh->leader && !serves(sh, q, &slot)) {
        struct tk_msg_reply w = {.client = q->client,
                                 .id = q->id,
                                 .token = sh->slots ? sh->slots->version : 0,
                                 .waiters = slot,
                                 .type = 'W'};
        reply_now(sh, &w);
        return;
    }
    struct tk_lock_req lr = {
        .type = q->type,
        .client = q->client,
        .id = q->id,
        .key = q->key,
        .key_len = q->key_len,
        .owner = q->owner,
        .owner_len = q->owner_len,
        .lease_ms = q->lease_ms,
        .wait_ms = q->wait_ms,
        .token = q->token,
        .arrived_us = q->arrived_us,
    };
    int rc = tk_lock_request(sh->table, sh->now_us, &lr, &sh->sink);
    if (rc != TK_OK)
        refuse(sh, q->client, q->id, rc == TK_ENOTLEADER ? TK_REFUSE_MOVED : TK_REFUSE_OVERLOAD);
}

void tk_shard_request(struct tk_shard *sh, uint64_t now_us, const struct tk_msg_req *q)
{
    sh->now_us = now_us;
    TK_ASSERT(tk_client_shard(q->client) == sh->o.idx);
    uint32_t dst = tk_cmd_shard(q->key, q->key_len, sh->o.nshards);
    if (dst == sh->o.idx) {
        local_request(sh, q);
        return;
    }
    struct tk_msg m = {.kind = TK_MSG_REQ, .u.req = *q};
    m.u.req.epoch = sh->epoch;
    tk_msg_send(&sh->out, dst, &m);
}

/* A request forwarded by another shard, under its epoch. */
static void forwarded_request(struct tk_shard *sh, const struct tk_msg_req *q)
{
    if (q->epoch > sh->epoch) {
        /* The sender already read a ROLE message we have not read yet. */
        TK_ASSERT(sh->nearly < sh->o.requests_max);
        struct early_req *e = malloc(sizeof(*e));
        TK_ASSERT(e != NULL);
        e->next = NULL;
        e->q = *q;
        memcpy(e->bytes, q->key, q->key_len);
        if (q->owner_len)
            memcpy(e->bytes + q->key_len, q->owner, q->owner_len);
        e->q.key = e->bytes;
        e->q.owner = e->bytes + q->key_len;
        if (sh->early_tail)
            sh->early_tail->next = e;
        else
            sh->early_head = e;
        sh->early_tail = e;
        sh->nearly++;
        return;
    }
    if (q->epoch < sh->epoch || !sh->leader) {
        refuse(sh, q->client, q->id, TK_REFUSE_MOVED);
        return;
    }
    local_request(sh, q);
}

static void replay_early(struct tk_shard *sh)
{
    struct early_req *e = sh->early_head;
    sh->early_head = sh->early_tail = NULL;
    sh->nearly = 0;
    while (e) {
        struct early_req *next = e->next;
        forwarded_request(sh, &e->q); /* may queue it again for a later epoch */
        free(e);
        e = next;
    }
}

void tk_shard_client_closed(struct tk_shard *sh, uint64_t client)
{
    for (uint32_t j = 0; j < sh->o.nshards; j++) {
        if (j == sh->o.idx) {
            tk_lock_client_closed(sh->table, client);
            continue;
        }
        struct tk_msg m = {.kind = TK_MSG_CLOSED, .u.closed = {client}};
        tk_msg_send(&sh->out, j, &m);
    }
}

/* ------------------------------------------------------------------ */
/* From the driver */

static void set_role(struct tk_shard *sh, const struct tk_msg_role *m)
{
    TK_ASSERT(m->epoch > sh->epoch);
    sh->epoch = m->epoch;
    bool was_leader = sh->leader;
    sh->leader = m->lead;
    if (sh->leader) {
        TK_ASSERT(!was_leader);
        tk_lock_lead(sh->table, sh->now_us);
    } else {
        /* Stepped down (or a new leader is known): pending requests are
         * never answered with a guess; clients get M and reconnect. */
        tk_lock_follow(sh->table);
        release_reads(sh, UINT64_MAX, false);
    }
    sh->client.role(sh->client.ctx, sh->leader, m->leader_addr);
    replay_early(sh);
}

/* ------------------------------------------------------------------ */
/* Snapshot cut: incremental (shard/lock.h), sent in pieces */

static void cut_send(struct tk_shard *sh, bool final)
{
    struct shard_cut *c = &sh->cut;
    struct tk_msg m = {.kind = TK_MSG_SNAP_PART,
                       .u.snap_part = {.index = c->index,
                                       .count = c->count,
                                       .data = c->buf,
                                       .len = c->len,
                                       .total_count = c->total_count,
                                       .total_len = c->total_len,
                                       .final = final}};
    tk_msg_send(&sh->out, TK_MSG_TO_DRIVER, &m); /* the driver frees buf */
    c->sent_len += c->len;
    c->buf = NULL;
    c->len = c->cap = 0;
    c->count = 0;
    if (final) {
        TK_ASSERT(c->sent_len == c->total_len);
        c->running = false;
    }
}

/* One record of the cut, from a slice or from an apply that is about to
 * change a key the cut has not listed yet. */
static void cut_record(void *ctx, const struct tk_snap_holder *h)
{
    struct tk_shard *sh = ctx;
    struct shard_cut *c = &sh->cut;
    TK_ASSERT(c->running);
    if (c->cap - c->len < TK_SNAP_RECORD_MAX) {
        if (c->len > 0)
            cut_send(sh, false);
        c->cap = sh->o.cut_piece;
        c->buf = malloc(c->cap);
        TK_ASSERT(c->buf != NULL);
    }
    size_t n = tk_snap_put_holder(c->buf + c->len, c->cap - c->len, h);
    TK_ASSERT(n > 0);
    c->len += n;
    c->count++;
}

static void cut_abort(struct tk_shard *sh)
{
    struct shard_cut *c = &sh->cut;
    tk_lock_cut_abort(sh->table);
    free(c->buf);
    memset(c, 0, sizeof(*c));
}

/* One slice, if one is due; the last one sends the final piece. */
static void cut_step(struct tk_shard *sh)
{
    struct shard_cut *c = &sh->cut;
    if (!c->running || sh->now_us < c->next_us)
        return;
    c->next_us = sh->now_us + TK_SHARD_CUT_EVERY_US;
    /* Gentle first, then twice the slice for every second the cut has run:
     * a big table is still cut in seconds, before the log it lets shrink
     * reaches its bound. */
    uint64_t secs = (sh->now_us - TK_MIN(sh->now_us, c->begin_us)) / 1000000u;
    uint32_t slice = sh->o.cut_slice << TK_MIN(secs, (uint64_t)TK_SHARD_CUT_DOUBLINGS);
    if (tk_lock_cut_step(sh->table, slice))
        cut_send(sh, true);
}

/* Starts this shard's cut right after entry `index` was applied: the
 * driver queued the request behind it. A cut still running belongs to an
 * older request the driver has given up on (an install came between). */
static void snapshot_cut(struct tk_shard *sh, uint64_t index)
{
    cut_abort(sh);
    struct shard_cut *c = &sh->cut;
    struct tk_lock_cut_size size;
    tk_lock_cut_begin(sh->table, sh->now_us, cut_record, sh, &size);
    c->running = true;
    c->index = index;
    c->begin_us = sh->now_us;
    c->total_count = size.count;
    c->total_len = tk_snap_bytes(size.count, size.key_owner_bytes) - TK_SNAP_HEADER_LEN;
    /* The first piece goes at once, whatever it holds: it tells the driver
     * the cut's size, and the driver sizes the blob once every shard's has
     * come. */
    cut_send(sh, tk_lock_cut_step(sh->table, sh->o.cut_slice));
    c->next_us = sh->now_us + TK_SHARD_CUT_EVERY_US;
}

/* Replaces the table by the holders of a snapshot (this shard's keys). The
 * driver checked the whole blob before any shard dropped anything. */
static void install(struct tk_shard *sh, const struct tk_msg_install *in)
{
    TK_ASSERT(!sh->leader);
    cut_abort(sh);
    tk_lock_clear(sh->table);
    tk_lock_restore_reserve(sh->table, in->count);
    size_t pos = 0;
    for (uint64_t i = 0; i < in->count; i++) {
        struct tk_cmd c;
        uint32_t left = 0;
        TK_ASSERT(tk_snap_next(in->data, in->len, &pos, &c, &left) == TK_OK);
        TK_ASSERT(tk_cmd_shard(c.key, c.key_len, sh->o.nshards) == sh->o.idx);
        tk_lock_restore_left(sh->table, sh->now_us, &c, left);
    }
    TK_ASSERT(pos == in->len);
    free(in->data);
}

/* The ring changed (a committed entry, or after an install). Ownership
 * only changes at a committed entry, in the order of the commands around
 * it: a request read after this message is judged by the new view. */
static void set_slots(struct tk_shard *sh, struct tk_slot_view *v)
{
    if (v->version == 0) { /* the ring is gone (an install of a state without one) */
        free(v);
        v = NULL;
    }
    uint64_t gone[TK_SLOTS_WORDS], frozen[TK_SLOTS_WORDS];
    bool any_gone = false, any_frozen = false;
    for (uint32_t w = 0; w < TK_SLOTS_WORDS; w++) {
        uint64_t all = sh->o.grouped ? 0 : UINT64_MAX;
        uint64_t own = sh->slots ? sh->slots->own[w] : all;
        uint64_t serve = sh->slots ? sh->slots->serve[w] : all;
        gone[w] = own & ~(v ? v->own[w] : all);
        frozen[w] = serve & ~gone[w] & ~(v ? v->serve[w] : all);
        any_gone |= gone[w] != 0;
        any_frozen |= frozen[w] != 0;
    }
    /* A group gives slots away only by a move's hand-over, which the
     * leader commits once they hold nothing; every member applied the
     * same commands before it. Holders left behind would be stranded
     * while another group grants their keys: stop instead. */
    if (any_gone)
        TK_ASSERT(tk_lock_held_in(sh->table, gone) == 0 && "slots handed over with keys held");
    /* Waiters of newly frozen slots are answered W (SPEC 15); their
     * holders stay until they release or their leases run out. */
    if (any_frozen && sh->leader)
        tk_lock_move_waiters(sh->table, frozen, v ? v->version : 0, &sh->sink);
    free(sh->slots);
    sh->slots = v;
}

/* The driver asks what the frozen slots still hold (a move's hand-over
 * waits for nothing). */
static void held_answer(struct tk_shard *sh, const struct tk_msg_held *ask)
{
    uint64_t frozen[TK_SLOTS_WORDS];
    for (uint32_t w = 0; w < TK_SLOTS_WORDS; w++)
        frozen[w] = sh->slots ? sh->slots->own[w] & ~sh->slots->serve[w] : 0;
    struct tk_msg m = {
        .kind = TK_MSG_HELD,
        .u.held = {
            .epoch = sh->epoch, .seq = ask->seq, .count = tk_lock_held_in(sh->table, frozen)}};
    tk_msg_send(&sh->out, TK_MSG_TO_DRIVER, &m);
}

const struct tk_slot_view *tk_shard_slots(const struct tk_shard *sh)
{
    return sh->slots;
}

void tk_shard_message(struct tk_shard *sh,
                      uint64_t now_us,
                      uint32_t src,
                      uint32_t kind,
                      const uint8_t *data,
                      uint32_t len)
{
    sh->now_us = now_us;
    struct tk_msg m;
    TK_ASSERT(tk_msg_decode(kind, data, len, &m) == TK_OK);
    bool from_driver = src == TK_MSG_TO_DRIVER;
    TK_ASSERT(from_driver || (src < sh->o.nshards && src != sh->o.idx));
    switch (kind) {
        case TK_MSG_REQ:
            TK_ASSERT(!from_driver);
            forwarded_request(sh, &m.u.req);
            break;
        case TK_MSG_REPLY:
            TK_ASSERT(!from_driver && tk_client_shard(m.u.reply.client) == sh->o.idx);
            sh->client.reply(sh->client.ctx, &m.u.reply);
            break;
        case TK_MSG_REFUSE:
            TK_ASSERT(!from_driver && tk_client_shard(m.u.refuse.client) == sh->o.idx);
            sh->client.refuse(sh->client.ctx, m.u.refuse.client, m.u.refuse.id, m.u.refuse.reason);
            break;
        case TK_MSG_CLOSED:
            TK_ASSERT(!from_driver);
            tk_lock_client_closed(sh->table, m.u.closed.client);
            break;
        case TK_MSG_APPLY:
            TK_ASSERT(from_driver);
            TK_ASSERT(tk_cmd_shard(m.u.apply.cmd.key, m.u.apply.cmd.key_len, sh->o.nshards) ==
                      sh->o.idx);
            tk_lock_apply(sh->table, now_us, &m.u.apply.cmd, &sh->sink);
            break;
        case TK_MSG_ROLE:
            TK_ASSERT(from_driver);
            set_role(sh, &m.u.role);
            break;
        case TK_MSG_READ_DONE:
            TK_ASSERT(from_driver);
            release_reads(sh, m.u.read_done.round, m.u.read_done.ok);
            break;
        case TK_MSG_SNAP_REQ:
            TK_ASSERT(from_driver);
            snapshot_cut(sh, m.u.snap_req.index);
            break;
        case TK_MSG_INSTALL:
            TK_ASSERT(from_driver);
            install(sh, &m.u.install);
            break;
        case TK_MSG_SLOTS:
            TK_ASSERT(from_driver);
            set_slots(sh, m.u.slots.view);
            break;
        case TK_MSG_HELD:
            TK_ASSERT(from_driver);
            held_answer(sh, &m.u.held);
            break;
        default:
            TK_ASSERT(!"unexpected message kind for a shard");
    }
}

void tk_shard_tick(struct tk_shard *sh, uint64_t now_us)
{
    sh->now_us = now_us;
    if (tk_lock_next_deadline(sh->table) <= now_us)
        tk_lock_tick(sh->table, now_us, &sh->sink);
    cut_step(sh);
}

uint64_t tk_shard_deadline(const struct tk_shard *sh)
{
    uint64_t t = tk_lock_next_deadline(sh->table);
    return sh->cut.running ? TK_MIN(t, sh->cut.next_us) : t;
}

bool tk_shard_leads(const struct tk_shard *sh)
{
    return sh->leader;
}

void tk_shard_stats(const struct tk_shard *sh, struct tk_shard_stats *st)
{
    tk_lock_stats(sh->table, &st->lock);
    st->reads_held = sh->nheld;
    st->read_barriers = sh->read_barriers;
    st->early = sh->nearly;
    st->epoch = sh->epoch;
}

void tk_shard_check(const struct tk_shard *sh)
{
    tk_lock_check(sh->table);
    TK_ASSERT(sh->leader == tk_lock_is_leader(sh->table));
    TK_ASSERT(!sh->leader || sh->nheld == 0 || sh->held_head != NULL);
}

const struct tk_lock_table *tk_shard_table(const struct tk_shard *sh)
{
    return sh->table;
}

/* ------------------------------------------------------------------ */
/* Life */

struct tk_shard *tk_shard_create(const struct tk_shard_options *o,
                                 const struct tk_msg_out *out,
                                 const struct tk_shard_client *client)
{
    TK_ASSERT(o->nshards > 0 && o->idx < o->nshards && o->nshards <= 256);
    struct tk_shard *sh = calloc(1, sizeof(*sh));
    if (!sh)
        return NULL;
    sh->o = *o;
    if (sh->o.cut_slice == 0)
        sh->o.cut_slice = TK_SHARD_CUT_SLICE;
    if (sh->o.cut_piece == 0)
        sh->o.cut_piece = TK_SHARD_CUT_PIECE;
    sh->o.cut_piece = TK_MAX(sh->o.cut_piece, (size_t)TK_SNAP_RECORD_MAX);
    sh->out = *out;
    sh->client = *client;
    sh->read_round = 1;
    sh->table = tk_lock_create(&o->limits);
    if (!sh->table) {
        free(sh);
        return NULL;
    }
    sh->sink = (struct tk_lock_sink){
        .reply = sink_reply, .propose = sink_propose, .waited = sink_waited, .ctx = sh};
    return sh;
}

void tk_shard_destroy(struct tk_shard *sh)
{
    if (!sh)
        return;
    release_reads(sh, UINT64_MAX, false);
    for (struct early_req *e = sh->early_head; e;) {
        struct early_req *next = e->next;
        free(e);
        e = next;
    }
    cut_abort(sh);
    free(sh->slots);
    tk_lock_destroy(sh->table);
    free(sh);
}
