/* The bootstrap agreement (raft/boot.h). */
#include "raft/boot.h"

#include <string.h>

enum { STAGE_IDLE, STAGE_PREPARING, STAGE_ACCEPTING, STAGE_DONE };

int tk_boot_ballot_cmp(struct tk_boot_ballot a, struct tk_boot_ballot b)
{
    if (a.round != b.round)
        return a.round < b.round ? -1 : 1;
    if (a.id != b.id)
        return a.id < b.id ? -1 : 1;
    return 0;
}

static bool ballot_zero(struct tk_boot_ballot a)
{
    return a.round == 0 && a.id == 0;
}

static uint32_t majority(const struct tk_boot *b)
{
    return b->n / 2 + 1;
}

static uint32_t count(const uint64_t *ids, uint32_t n)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < n; i++)
        k += ids[i] != 0;
    return k;
}

static void see_round(struct tk_boot *b, uint64_t round)
{
    if (round > b->round_seen)
        b->round_seen = round;
}

/* A message to peer i (its NodeId as we know it), of the current ballot
 * unless the caller changes it. */
static struct tk_raft_msg *emit(struct tk_boot *b,
                                const struct tk_boot_peer *peers,
                                uint32_t i,
                                uint8_t phase,
                                struct tk_boot_out *out)
{
    TK_ASSERT(i < b->n);
    if (i == b->self_index || peers[i].id == 0 || out->n == TK_BOOT_OUT_MAX)
        return NULL;
    struct tk_boot_send *s = &out->sends[out->n++];
    memset(s, 0, sizeof(*s));
    s->peer = i;
    s->m.type = TK_RAFT_MSG_BOOT;
    s->m.from = b->self;
    s->m.to = peers[i].id;
    s->m.boot.phase = phase;
    s->m.boot.round = b->mine.round;
    s->m.boot.ballot_id = b->mine.id;
    s->m.boot.peers_hash = b->peers_hash;
    return &s->m;
}

static void with_value(struct tk_raft_msg *m, const struct tk_boot_value *v)
{
    if (m == NULL)
        return;
    m->boot.config = &v->config;
    m->boot.token_first = v->token_first;
}

/* The proposer's stage, to every other peer (first time or again). */
static void broadcast(struct tk_boot *b, const struct tk_boot_peer *peers, struct tk_boot_out *out)
{
    for (uint32_t i = 0; i < b->n; i++) {
        if (b->stage == STAGE_PREPARING && b->promisers[i] == 0)
            emit(b, peers, i, TK_BOOT_PREPARE, out);
        else if (b->stage == STAGE_ACCEPTING && b->acceptors[i] == 0)
            with_value(emit(b, peers, i, TK_BOOT_ACCEPT, out), &b->value);
        else if (b->stage == STAGE_DONE && i != b->self_index)
            with_value(emit(b, peers, i, TK_BOOT_CHOSEN, out), &b->value);
    }
}

/* The acceptor's own rules, applied to its own ballot too. */
static bool accept_promise(struct tk_boot *b, struct tk_boot_ballot bal)
{
    int c = tk_boot_ballot_cmp(bal, b->promised);
    if (c < 0)
        return false;
    /* The same ballot again (a retransmission): the same promise again,
     * unless this node has accepted a value of it since: then the PROMISE
     * carries that value, which is as good. */
    b->promised = bal;
    return true;
}

static bool accept_value(struct tk_boot *b,
                         struct tk_boot_ballot bal,
                         const struct tk_boot_value *v)
{
    if (tk_boot_ballot_cmp(bal, b->promised) < 0)
        return false;
    b->promised = bal;
    b->accepted = bal;
    b->acc = *v;
    b->has_accepted = true;
    return true;
}

/* A fresh ballot above every round seen; this node promises it first. */
static void start_round(struct tk_boot *b, const struct tk_boot_peer *peers, uint64_t now_us)
{
    b->mine = (struct tk_boot_ballot){.round = b->round_seen + 1, .id = b->self};
    see_round(b, b->mine.round);
    memset(b->promisers, 0, sizeof(b->promisers));
    memset(b->acceptors, 0, sizeof(b->acceptors));
    b->best_has = false;
    b->floor_seen = 0;
    b->rounds++;
    b->stage = STAGE_PREPARING;
    b->stage_end_us = now_us + TK_BOOT_ROUND_US;
    if (accept_promise(b, b->mine)) {
        b->promisers[b->self_index] = b->self;
        if (b->has_accepted) {
            b->best_has = true;
            b->best = b->accepted;
            b->best_value = b->acc;
        }
    }
    (void)peers;
}

static void give_up(struct tk_boot *b, uint64_t now_us)
{
    b->stage = STAGE_IDLE;
    b->retry_at_us =
        now_us + TK_BOOT_RETRY_MIN_US + tk_prng_range(&b->prng, 0, TK_BOOT_RETRY_SPREAD_US - 1);
}

/* Enough promises: fix the value (the highest accepted one reported, else
 * the offer with the promisers as voters and a first token above every
 * counter any of them saw), accept it here, ask the rest. False if the
 * promisers do not make a valid configuration (an address not known yet):
 * the round is dropped, a later one tries again. */
static bool fix_value(struct tk_boot *b,
                      const struct tk_boot_peer *peers,
                      const struct tk_boot_offer *offer,
                      uint64_t now_us)
{
    if (b->best_has) {
        b->value = b->best_value;
    } else {
        struct tk_boot_value *v = &b->value;
        memset(v, 0, sizeof(*v));
        v->config.domain_lo = offer->domain_lo;
        v->config.domain_hi = offer->domain_hi;
        v->config.serve_after_us = offer->serve_after_us;
        v->token_first = TK_MAX(offer->token_first, b->floor_seen + 1);
        for (uint32_t i = 0; i < b->n; i++) {
            if (b->promisers[i] == 0)
                continue;
            struct tk_raft_member *m = &v->config.m[v->config.n++];
            m->id = b->promisers[i];
            m->role = TK_RAFT_VOTER;
            memcpy(m->peer_addr, peers[i].peer_addr, sizeof(m->peer_addr));
            memcpy(m->client_addr, peers[i].client_addr, sizeof(m->client_addr));
        }
        if (tk_raft_config_check(&v->config) != TK_OK)
            return false;
    }
    b->stage = STAGE_ACCEPTING;
    b->stage_end_us = now_us + TK_BOOT_ROUND_US;
    if (accept_value(b, b->mine, &b->value))
        b->acceptors[b->self_index] = b->self;
    return true;
}

/* The value is chosen (a majority accepted it). Every one of its voters
 * that learns it writes entry 1, the same entry everywhere: the first to
 * campaign leads, the others' identical logs change nothing. */
static void learn_chosen(struct tk_boot *b, const struct tk_boot_value *v, struct tk_boot_out *out)
{
    if (b->chosen) {
        /* One value only, ever: the agreement's whole point. */
        TK_ASSERT(b->chosen_value.config.domain_lo == v->config.domain_lo);
        TK_ASSERT(b->chosen_value.config.domain_hi == v->config.domain_hi);
        TK_ASSERT(b->chosen_value.token_first == v->token_first);
    } else {
        b->chosen = true;
        b->chosen_value = *v;
    }
    if (!b->written && tk_raft_config_is_voter(&b->chosen_value.config, b->self)) {
        b->written = true;
        out->write = &b->chosen_value;
    }
}

void tk_boot_init(struct tk_boot *b,
                  uint64_t self,
                  uint32_t self_index,
                  uint32_t n,
                  uint64_t peers_hash,
                  uint64_t seed)
{
    TK_ASSERT(self != 0);
    TK_ASSERT(n >= 1 && n <= TK_BOOT_PEERS_MAX && self_index < n);
    memset(b, 0, sizeof(*b));
    b->self = self;
    b->self_index = self_index;
    b->n = n;
    b->peers_hash = peers_hash;
    tk_prng_seed(&b->prng, seed);
}

/* The proposer's transitions once enough answers came: promises to a
 * fixed value, acceptances to chosen. True if the stage changed (its new
 * messages are out). */
static bool advance(struct tk_boot *b,
                    const struct tk_boot_peer *peers,
                    uint64_t now_us,
                    struct tk_boot_out *out)
{
    if (!b->offering)
        return false;
    uint8_t was = b->stage;
    if (b->stage == STAGE_PREPARING && count(b->promisers, b->n) >= b->offer.quorum &&
        !fix_value(b, peers, &b->offer, now_us))
        give_up(b, now_us);
    if (b->stage == STAGE_ACCEPTING && count(b->acceptors, b->n) >= majority(b)) {
        b->stage = STAGE_DONE;
        learn_chosen(b, &b->value, out);
    }
    if (b->stage == was)
        return false;
    if (b->stage != STAGE_IDLE)
        broadcast(b, peers, out);
    return true;
}

void tk_boot_step(struct tk_boot *b,
                  const struct tk_boot_peer *peers,
                  const struct tk_boot_offer *offer,
                  uint64_t now_us,
                  struct tk_boot_out *out)
{
    memset(out, 0, sizeof(*out));
    if (offer == NULL) {
        b->offering = false;
        if (b->stage != STAGE_DONE)
            b->stage = STAGE_IDLE;
        return;
    }
    TK_ASSERT(offer->quorum >= majority(b) && offer->quorum <= b->n);
    b->offer = *offer;
    b->offering = true;
    if (b->stage == STAGE_IDLE && now_us >= b->retry_at_us)
        start_round(b, peers, now_us);
    else if ((b->stage == STAGE_PREPARING || b->stage == STAGE_ACCEPTING) &&
             now_us >= b->stage_end_us)
        give_up(b, now_us);
    if (!advance(b, peers, now_us, out) && b->stage != STAGE_IDLE)
        broadcast(b, peers, out); /* the current stage again: answers get lost */
}

/* Acceptor: PREPARE, ACCEPT, CHOSEN from a proposer. */
static void as_acceptor(struct tk_boot *b,
                        const struct tk_boot_peer *peers,
                        uint32_t from,
                        const struct tk_raft_msg *m,
                        uint64_t token_floor,
                        struct tk_boot_out *out)
{
    struct tk_boot_ballot bal = {.round = m->boot.round, .id = m->boot.ballot_id};
    struct tk_boot_ballot mine = b->mine; /* emit() stamps the current ballot: answer theirs */
    b->mine = bal;
    struct tk_raft_msg *r = NULL;
    if (m->boot.phase == TK_BOOT_PREPARE) {
        if (accept_promise(b, bal)) {
            r = emit(b, peers, from, TK_BOOT_PROMISE, out);
            if (r)
                r->boot.token_floor = token_floor;
            if (r && b->has_accepted) {
                r->boot.acc_round = b->accepted.round;
                r->boot.acc_id = b->accepted.id;
                with_value(r, &b->acc);
            }
        } else {
            r = emit(b, peers, from, TK_BOOT_NACK, out);
        }
    } else if (m->boot.phase == TK_BOOT_ACCEPT) {
        struct tk_boot_value v = {.config = *m->boot.config, .token_first = m->boot.token_first};
        r = emit(b, peers, from, accept_value(b, bal, &v) ? TK_BOOT_ACCEPTED : TK_BOOT_NACK, out);
    } else { /* CHOSEN */
        struct tk_boot_value v = {.config = *m->boot.config, .token_first = m->boot.token_first};
        learn_chosen(b, &v, out);
    }
    if (r && r->boot.phase == TK_BOOT_NACK) {
        r->boot.acc_round = b->promised.round;
        r->boot.acc_id = b->promised.id;
        b->nacks++;
    }
    b->mine = mine;
}

/* Proposer: PROMISE, ACCEPTED, NACK for its ballot. */
static void as_proposer(struct tk_boot *b,
                        uint32_t from,
                        const struct tk_raft_msg *m,
                        uint64_t now_us)
{
    struct tk_boot_ballot bal = {.round = m->boot.round, .id = m->boot.ballot_id};
    if (ballot_zero(b->mine) || tk_boot_ballot_cmp(bal, b->mine) != 0)
        return; /* an answer to an older ballot of ours */
    if (m->boot.phase == TK_BOOT_NACK) {
        struct tk_boot_ballot higher = {.round = m->boot.acc_round, .id = m->boot.acc_id};
        if (tk_boot_ballot_cmp(higher, b->mine) <= 0)
            return; /* not a refusal of mine */
        see_round(b, m->boot.acc_round);
        if (b->stage == STAGE_PREPARING || b->stage == STAGE_ACCEPTING)
            give_up(b, now_us);
        return;
    }
    if (m->boot.phase == TK_BOOT_PROMISE && b->stage == STAGE_PREPARING) {
        b->promisers[from] = m->from;
        b->floor_seen = TK_MAX(b->floor_seen, m->boot.token_floor);
        struct tk_boot_ballot acc = {.round = m->boot.acc_round, .id = m->boot.acc_id};
        if (m->boot.config != NULL && !ballot_zero(acc) &&
            (!b->best_has || tk_boot_ballot_cmp(acc, b->best) > 0)) {
            b->best_has = true;
            b->best = acc;
            b->best_value.config = *m->boot.config;
            b->best_value.token_first = m->boot.token_first;
        }
    } else if (m->boot.phase == TK_BOOT_ACCEPTED && b->stage == STAGE_ACCEPTING) {
        b->acceptors[from] = m->from;
    }
}

void tk_boot_receive(struct tk_boot *b,
                     const struct tk_boot_peer *peers,
                     uint32_t from,
                     const struct tk_raft_msg *m,
                     bool willing,
                     uint64_t token_floor,
                     uint64_t now_us,
                     struct tk_boot_out *out)
{
    memset(out, 0, sizeof(*out));
    TK_ASSERT(m->type == TK_RAFT_MSG_BOOT);
    if (from >= b->n || from == b->self_index || peers[from].id != m->from ||
        m->boot.peers_hash != b->peers_hash)
        return; /* not the process at that address, or another --peers */
    see_round(b, m->boot.round);
    uint8_t ph = m->boot.phase;
    bool carries = ph == TK_BOOT_ACCEPT || ph == TK_BOOT_CHOSEN;
    if (carries && (m->boot.config == NULL || tk_raft_config_check(m->boot.config) != TK_OK))
        return;
    if (ph == TK_BOOT_PREPARE || ph == TK_BOOT_ACCEPT || ph == TK_BOOT_CHOSEN) {
        if (willing || ph == TK_BOOT_CHOSEN)
            as_acceptor(b, peers, from, m, token_floor, out);
    } else {
        as_proposer(b, from, m, now_us);
        advance(b, peers, now_us, out);
    }
}

bool tk_boot_knows_domain(const struct tk_boot *b, uint64_t lo, uint64_t hi)
{
    if (lo == 0 && hi == 0)
        return false;
    if (b->chosen && b->chosen_value.config.domain_lo == lo &&
        b->chosen_value.config.domain_hi == hi)
        return true;
    return b->has_accepted && b->acc.config.domain_lo == lo && b->acc.config.domain_hi == hi;
}
