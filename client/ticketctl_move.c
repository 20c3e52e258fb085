/* `ticketctl slots move RANGE --to GROUP` (SPEC 15): moves slots from the
 * group that owns them (--group, its leader at --peers) to another (--to,
 * at --to-peers), in three steps, each committed in the group it concerns
 * and each asked as the same request until that group answers it done:
 *
 *   1. freeze at the source: it stops serving the range (acquires and
 *      reads answered W, waiters too; holders may still release);
 *   2. hand-over at the source, with the ring file (--ring: the ring after
 *      the move, which gives RANGE to --to): the source's leader answers
 *      RETRY "N keys are still held" until every holder released or its
 *      lease ran out, then commits the hand-over and answers its counter;
 *   3. claim at the target, with that counter and the same ring: the
 *      target owns the range, its fencing counter raised above the
 *      source's.
 *
 * Every step asked again once done is answered done (with the counter it
 * recorded), so the same command run again resumes a move that stopped
 * anywhere (a crash of ticketctl, of a leader, a timeout). Until the
 * claim, the range is served by no group; never by two.
 *
 * The other groups learn the new ring from `ticketctl ring apply` (until
 * then a client they send to the source is answered W and refreshes its
 * ring there). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/ticketctl_peer.h"
#include "client/ticketing.h"

/* The hand-over waits for holders whose leases may run 250 s (plus the
 * drift margin): its own budget, unless --wait says otherwise. It is
 * asked every HANDOVER_PAUSE_MS meanwhile: nobody is served in the range
 * until it and the claim are done, so the sooner the better (each ask
 * is one count by the leader's shards). */
#define HANDOVER_WAIT_MS (260u * 1000u)
#define HANDOVER_PAUSE_MS 20

struct move {
    const struct ctl_opts *o;
    uint16_t first, last;
    uint64_t counter, version;
    const char *step; /* the step that stopped the move */
};

/* "a-b" or "a" (decimal slots below TK_SLOTS). */
static bool parse_range(const char *s, uint16_t *first, uint16_t *last)
{
    char buf[32];
    if (strlen(s) >= sizeof buf)
        return false;
    strcpy(buf, s);
    char *dash = strchr(buf, '-');
    uint64_t a, b;
    if (dash != NULL)
        *dash = '\0';
    if (!ctl_parse_u64(buf, &a) || (dash != NULL && !ctl_parse_u64(dash + 1, &b)))
        return false;
    if (dash == NULL)
        b = a;
    if (a > b || b >= TK_SLOTS)
        return false;
    *first = (uint16_t)a;
    *last = (uint16_t)b;
    return true;
}

static int move_finish(const struct move *m, int code, const char *outcome, const char *text)
{
    const struct ctl_opts *o = m->o;
    char msg[2048] = "";
    if (text != NULL) {
        snprintf(msg, sizeof msg, "%s", text);
        printable(msg);
    }
    if (o->json) {
        json_t *j = json_object();
        json_object_set_new(j, "first", ctl_ju64(m->first));
        json_object_set_new(j, "last", ctl_ju64(m->last));
        json_object_set_new(j, "from", ctl_jstr(o->group));
        json_object_set_new(j, "to", ctl_jstr(o->to));
        json_object_set_new(j, "outcome", ctl_jstr(outcome));
        if (code == CTL_EXIT_OK) {
            json_object_set_new(j, "counter", ctl_ju64(m->counter));
            json_object_set_new(j, "version", ctl_ju64(m->version));
        } else {
            json_object_set_new(j, "step", ctl_jstr(m->step));
            json_object_set_new(j, "reason", ctl_jstr(msg));
        }
        ctl_json_print(stdout, j, "\n");
    } else if (code == CTL_EXIT_OK) {
        printf("slots %u-%u moved from group %s to group %s (counter %llu, ring version %llu)\n",
               m->first, m->last, o->group, o->to, (unsigned long long)m->counter,
               (unsigned long long)m->version);
    } else {
        fprintf(stderr, "ticketctl: slots move: %s: %s%s\n", m->step, msg,
                code == CTL_EXIT_INVALID || code == CTL_EXIT_FAIL
                    ? ""
                    : " (run the same command again to resume the move)");
    }
    return code;
}

/* One step: the request p describes, asked of the group in o. 0, or the
 * command's exit code (said). */
static int step(struct move *m,
                struct peer *p,
                const struct ctl_opts *o,
                const char *name,
                uint64_t budget_ms)
{
    m->step = name;
    p->maybe_sent = false;
    p->ntargets = 0; /* this group's */
    int rc = peer_open(p, o, &peer_ask_slots);
    if (rc != 0) {
        peer_close(p);
        return rc;
    }
    p->deadline_us = tk_client_now_us() + budget_ms * 1000u;
    snprintf(p->what, sizeof p->what, "%s slots %u-%u of group %s", name, p->first, p->last,
             o->group);
    enum attempt a = peer_loop(p);
    peer_close(p);
    char msg[2 * sizeof p->sent_why + 200];
    switch (a) {
        case AT_OK:
            fprintf(stderr, "ticketctl: %s: done in group %s\n", name, o->group);
            return 0;
        case AT_REFUSED:
            snprintf(msg, sizeof msg, "refused by group %s: %s", o->group, p->refusal);
            return move_finish(m, CTL_EXIT_INVALID, "refused", msg);
        case AT_AUTH:
            return move_finish(m, CTL_EXIT_FAIL, "auth", p->why);
        case AT_UNANSWERED:
            snprintf(msg, sizeof msg,
                     "sent to group %s, but no authenticated answer said it is done: %s. %s",
                     o->group, p->sent_why, p->why);
            return move_finish(m, CTL_EXIT_INDETERMINATE, "indeterminate", msg);
        default:
            snprintf(msg, sizeof msg, "no leader of group %s answered: %s", o->group, p->why);
            return move_finish(m, CTL_EXIT_UNAVAILABLE, "unavailable", msg);
    }
}

static int check_args(const struct ctl_opts *o, struct move *m)
{
    if (o->key == NULL || strcmp(o->key, "move") != 0)
        return ctl_die_usage("%s", "slots: the subcommand is move (slots move RANGE --to GROUP)");
    if (o->file == NULL || !parse_range(o->file, &m->first, &m->last))
        return ctl_die_usage("slots move needs RANGE: FIRST-LAST or one SLOT, 0-%u", TK_SLOTS - 1);
    if (o->group == NULL || !tk_slots_name_ok(o->group, strlen(o->group)))
        return ctl_die_usage("%s",
                             "slots move needs --group NAME (the group that owns RANGE): "
                             "1-64 bytes 0x21-0x7E, without ';' or '@'");
    if (o->to == NULL || !tk_slots_name_ok(o->to, strlen(o->to)))
        return ctl_die_usage("%s",
                             "slots move needs --to NAME (the group RANGE goes to): "
                             "1-64 bytes 0x21-0x7E, without ';' or '@'");
    if (strcmp(o->group, o->to) == 0)
        return ctl_die_usage("%s", "--group and --to name the same group");
    if (o->to_peers == NULL || o->to_peers[0] == '\0')
        return ctl_die_usage("%s",
                             "slots move needs --to-peers host:port,... (the peer "
                             "addresses of the group RANGE goes to)");
    if (o->ring_file == NULL || o->ring_file[0] == '\0')
        return ctl_die_usage("%s", "slots move needs --ring FILE (the ring after the move)");
    return 0;
}

int ctl_slots_move(const struct ctl_opts *o)
{
    static struct peer p;
    static struct tk_slot_ring r;
    struct move m = {.o = o, .step = "setup"};
    int rc = check_args(o, &m);
    if (rc != 0)
        return rc;
    memset(&p, 0, sizeof p);
    if ((rc = peer_ring_load(&p, o->ring_file, &r)) != 0)
        return rc;
    int to = tk_slots_find(&r, o->to, strlen(o->to));
    for (uint32_t i = m.first; i <= m.last; i++)
        if (to < 0 || tk_slots_owner(&r, i) != to) {
            fprintf(stderr,
                    "ticketctl: %s: slot %u is not group %s's: the ring file is the "
                    "ring after the move\n",
                    o->ring_file, i, o->to);
            return CTL_EXIT_INVALID;
        }
    m.version = p.version;
    uint32_t ring_len = p.ring_len;

    /* 1. Freeze at the source. */
    p.op = TK_RAFT_SLOTS_FREEZE;
    p.first = m.first;
    p.last = m.last;
    p.other = o->to;
    p.ring_len = 0;
    if ((rc = step(&m, &p, o, "freeze", o->timeout_ms)) != 0)
        return rc;
    /* 2. Hand-over at the source, once its frozen slots hold nothing. */
    p.op = TK_RAFT_SLOTS_HANDOVER;
    p.ring_len = ring_len;
    p.retry_pause_ms = HANDOVER_PAUSE_MS;
    uint64_t wait = o->wait_given ? o->wait_ms : HANDOVER_WAIT_MS;
    if ((rc = step(&m, &p, o, "hand-over", TK_MAX(wait, o->timeout_ms))) != 0)
        return rc;
    m.counter = p.got_counter;
    /* 3. Claim at the target, above the source's counter. */
    struct ctl_opts to_o = *o;
    to_o.group = o->to;
    to_o.peers = o->to_peers;
    if (o->to_peer_secret_file != NULL)
        to_o.peer_secret_file = o->to_peer_secret_file;
    p.retry_pause_ms = 0;
    p.op = TK_RAFT_SLOTS_CLAIM;
    p.other = o->group;
    p.counter = m.counter;
    if ((rc = step(&m, &p, &to_o, "claim", o->timeout_ms)) != 0)
        return rc;
    return move_finish(&m, CTL_EXIT_OK, "moved", NULL);
}
