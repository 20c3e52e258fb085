/* One node's pure layers together (node_harness.h): routing, batches,
 * installs, forced domains, rings; message encodings. */
#include "node_harness.h"

Test(node, requests_cross_shards_and_tokens_increase)
{
    struct node n;
    node_init(&n, 1024);
    node_settle(&n);
    cr_assert(tk_driver_serving(n.d));
    char key[16];
    for (uint64_t i = 1; i <= 30; i++) {
        snprintf(key, sizeof(key), "seat-%llu", (unsigned long long)i);
        request(&n, (uint32_t)(i % NSHARDS), 'A', key, i);
    }
    node_settle(&n);
    /* Tokens follow the order of the log, not of the ids: distinct. */
    uint64_t tokens[31] = {0};
    for (uint64_t i = 1; i <= 30; i++) {
        const struct answer *a = answer_of(&n, i);
        cr_assert_not_null(a, "request %llu answered", (unsigned long long)i);
        cr_assert_eq(a->type, 'G');
        cr_assert_eq(tk_client_shard(a->client), i % NSHARDS, "reply reached the client's shard");
        for (uint64_t j = 1; j < i; j++)
            cr_assert_neq(tokens[j], a->token);
        tokens[i] = a->token;
    }
    cr_assert_eq(n.nans, 30, "one answer per request");
    node_free(&n);
}

/* A full log must not stop the driver from reading the shards' messages:
 * the snapshot parts that let the log shrink come behind proposals. */
Test(node, full_log_keeps_reading_and_catches_up)
{
    struct node n;
    node_init(&n, 8);
    node_settle(&n);
    n.hold_snap_req = true; /* shards do not cut yet: the log cannot shrink */
    char key[16];
    for (uint64_t i = 1; i <= 40; i++) {
        snprintf(key, sizeof(key), "k%llu", (unsigned long long)i);
        request(&n, 0, 'A', key, i);
        n.now += 1000;
        node_round(&n);
    }
    struct tk_driver_stats st;
    tk_driver_stats(n.d, &st);
    cr_assert_gt(st.waiting_batches, 0, "the log filled and batches wait");
    uint32_t granted = 0;
    for (uint32_t i = 0; i < n.nans; i++)
        granted += n.ans[i].type == 'G';
    cr_assert_lt(granted, 40);
    n.hold_snap_req = false;
    for (int i = 0; i < 200; i++) {
        n.now += 1000;
        node_round(&n);
    }
    tk_driver_stats(n.d, &st);
    cr_assert_eq(st.waiting_batches, 0);
    granted = 0;
    for (uint32_t i = 0; i < n.nans; i++)
        granted += n.ans[i].type == 'G';
    cr_assert_eq(granted, 40, "every acquire granted once the log shrank");
    node_free(&n);
}

/* --max-keys 10 over 3 shards is 4 keys per shard: 12 keys at once, so
 * one round can bring the driver 12 grants to batch (and, with the log
 * full, they all wait). The driver must have room for all of them: it had
 * for --max-keys + 1 = 11, and the 12th aborted the node. */
Test(node, every_shard_full_in_one_round)
{
    struct node n;
    node_init_keys(&n, 8, 10);
    node_settle(&n);
    n.hold_snap_req = true; /* and the log cannot shrink */
    char key[16];
    for (uint64_t i = 1; i <= 60; i++) {
        snprintf(key, sizeof(key), "full%llu", (unsigned long long)i);
        request(&n, (uint32_t)(i % NSHARDS), 'A', key, i);
    }
    for (int i = 0; i < 50; i++) {
        n.now += 1000;
        node_round(&n);
    }
    n.hold_snap_req = false;
    for (int i = 0; i < 300; i++) {
        n.now += 1000;
        node_round(&n);
    }
    uint32_t granted = 0, busy = 0;
    for (uint32_t i = 0; i < n.nans; i++) {
        granted += n.ans[i].type == 'G';
        busy += n.ans[i].type == 'B';
    }
    cr_assert_eq(granted, 12, "every shard's 4 keys granted, nothing more (%u)", granted);
    cr_assert_eq(busy, 48, "the rest refused: the table is full (%u)", busy);
    node_free(&n);
}

/* A standalone node whose client 0 holds show-42 (request id 1). */
static void holding_show_42(struct node *n)
{
    node_init(n, 1024);
    node_settle(n);
    request(n, 0, 'A', "show-42", 1);
    node_settle(n);
    cr_assert_eq(answer_of(n, 1)->type, 'G');
}

/* An install counts what was left of each lease at the cut, not a fresh
 * lease (else every install and failover stretches a holder's lease). */
Test(node, install_carries_the_lease_left)
{
    struct node n;
    holding_show_42(&n);
    uint32_t s = tk_cmd_shard("show-42", 7, NSHARDS);
    /* 7 s later the shard cuts its part: 3 s of the 10 s lease are left. */
    n.now += 7000000;
    struct tk_msg req = {.kind = TK_MSG_SNAP_REQ, .u.snap_req = {99}};
    uint8_t buf[TK_MSG_ENCODED_MAX];
    tk_msg_encode(&req, buf);
    tk_shard_message(n.sh[s], n.now, TK_MSG_TO_DRIVER, TK_MSG_SNAP_REQ, buf, tk_msg_size(&req));
    struct queue *q = &n.to_driver;
    struct qmsg *m = &q->m[(q->head + q->len - 1) % QMAX];
    cr_assert_eq(m->kind, TK_MSG_SNAP_PART);
    struct tk_msg part;
    cr_assert_eq(tk_msg_decode(m->kind, m->data, m->len, &part), TK_OK);
    q->len--;
    cr_assert_eq(part.u.snap_part.count, 1);
    struct tk_cmd g;
    uint32_t left = 0;
    size_t pos = 0;
    cr_assert_eq(tk_snap_next(part.u.snap_part.data, part.u.snap_part.len, &pos, &g, &left), TK_OK);
    cr_assert_eq(left, 3000);
    cr_assert_eq(g.lease_ms, 10000);

    /* A fresh shard installs the part and then leads: its lease deadline
     * is the 3 s left plus the lease's drift margin, not 10 s. */
    struct node f;
    node_init(&f, 1024);
    f.now = n.now;
    struct tk_msg role = {.kind = TK_MSG_ROLE, .u.role = {.epoch = 100, .lead = false}};
    tk_msg_encode(&role, buf);
    tk_shard_message(f.sh[s], f.now, TK_MSG_TO_DRIVER, TK_MSG_ROLE, buf, tk_msg_size(&role));
    struct tk_msg in = {
        .kind = TK_MSG_INSTALL,
        .u.install = {
            .index = 99, .count = 1, .data = part.u.snap_part.data, .len = part.u.snap_part.len}};
    tk_msg_encode(&in, buf);
    tk_shard_message(f.sh[s], f.now, TK_MSG_TO_DRIVER, TK_MSG_INSTALL, buf, tk_msg_size(&in));
    role.u.role = (struct tk_msg_role){.epoch = 101, .lead = true};
    tk_msg_encode(&role, buf);
    tk_shard_message(f.sh[s], f.now, TK_MSG_TO_DRIVER, TK_MSG_ROLE, buf, tk_msg_size(&role));
    uint64_t due = tk_shard_deadline(f.sh[s]);
    cr_assert_eq(due, f.now + 3000000 + TK_LOCK_DRIFT_US(10000), "due %llu",
                 (unsigned long long)(due - f.now));
    node_free(&f);
    node_free(&n);
}

/* The driver takes the snapshot's age off each lease it installs: a blob
 * cut with 3 s left and installed 2 s later restores 1 s, not 3 s (else the
 * time between a cut and its install stretches every lease it holds). */
Test(node, install_takes_the_snapshot_age_off_each_lease)
{
    struct node n;
    holding_show_42(&n);
    uint64_t token = answer_of(&n, 1)->token;
    /* The blob: one holder with 3,000 ms of its 10 s lease left. */
    struct tk_cmd g = {.type = TK_CMD_GRANT, .key_len = 7, .owner_len = 1, .lease_ms = 10000};
    g.token = token;
    memcpy(g.key, "show-42", 7);
    g.owner[0] = 'o';
    static uint8_t blob[TK_SNAP_HEADER_LEN + TK_SNAP_RECORD_MAX];
    memcpy(blob, TK_SNAP_MAGIC, TK_SNAP_MAGIC_LEN);
    uint64_t count = 1;
    memcpy(blob + TK_SNAP_MAGIC_LEN, &count, sizeof(count));
    size_t len = TK_SNAP_HEADER_LEN;
    len += tk_snap_put(blob + len, sizeof(blob) - len, &g, 3000);

    /* Another node past that token gets it as an install 2,000 ms old. */
    struct node f;
    node_init(&f, 1024);
    node_settle(&f);
    request(&f, 0, 'A', "other", 1);
    node_settle(&f);
    cr_assert_eq(answer_of(&f, 1)->type, 'G');
    /* (f's own grant took the same first token, so its counter is past
     * the blob's: the install's check passes.) */
    struct tk_raft_update up = {.flags = TK_RAFT_UPDATE_SNAPSHOT_INSTALL};
    up.install.index = 99;
    up.install.data = blob;
    up.install.len = len;
    up.install.age_ms = 2000;
    tk_driver_process(f.d, TK_OK, &up);
    uint32_t s = tk_cmd_shard("show-42", 7, NSHARDS);
    struct queue *q = &f.to_shard[s];
    bool seen = false;
    for (uint32_t i = 0; i < q->len; i++) {
        struct qmsg *m = &q->m[(q->head + i) % QMAX];
        if (m->kind != TK_MSG_INSTALL)
            continue;
        struct tk_msg in;
        cr_assert_eq(tk_msg_decode(m->kind, m->data, m->len, &in), TK_OK);
        cr_assert_eq(in.u.install.count, 1);
        struct tk_cmd got;
        uint32_t left = 0;
        size_t pos = 0;
        cr_assert_eq(tk_snap_next(in.u.install.data, in.u.install.len, &pos, &got, &left), TK_OK);
        cr_assert_eq(left, 1000, "left %u ms: the age was not taken off", left);
        cr_assert_eq(got.token, token);
        free(in.u.install.data); /* the shard would have */
        m->kind = UINT32_MAX;
        seen = true;
    }
    cr_assert(seen, "no install reached the key's shard");
    node_free(&f);
    node_free(&n);
}

/* Runs rounds for ms milliseconds of both clocks, 10 ms a round. */
/* Issue 22, defect 1: the hold of a forced new domain ends at serve_after
 * plus the drift bound on this node's wall clock, not at serve_after: a
 * node whose clock is ahead of the bootstrapper's by less than the bound
 * does not serve early. */
Test(node, a_forced_domain_waits_out_the_drift_bound)
{
    struct node n;
    struct forced f = {.serve_after_us = WALL + 1000000, .drift_us = 300000};
    node_init_forced(&n, 1024, 1000, &f);
    node_run_ms(&n, 1100);
    cr_assert_not(tk_driver_serving(n.d), "serving 100 ms after serve_after, inside the bound");
    node_run_ms(&n, 150);
    cr_assert_not(tk_driver_serving(n.d), "serving 50 ms before the bound is over");
    node_run_ms(&n, 100);
    cr_assert(tk_driver_serving(n.d), "serving once serve_after + drift passed");
    node_free(&n);
}

/* The voter that wrote entry 1 also counts the hold on its own monotonic
 * clock: its wall clock stepping far ahead does not end the hold. */
Test(node, a_forced_domain_counts_its_hold_on_the_monotonic_clock)
{
    struct node n;
    struct forced f = {.serve_after_us = WALL + 2000000, .drift_us = 50000};
    node_init_forced(&n, 1024, 1000, &f);
    n.wall += 3600u * 1000000u; /* an hour ahead, right after bootstrap */
    node_run_ms(&n, 1500);
    cr_assert_not(tk_driver_serving(n.d), "the wall clock's step ended the hold");
    node_run_ms(&n, 800);
    cr_assert(tk_driver_serving(n.d), "serving once the hold passed on the monotonic clock");
    node_free(&n);
}

/* ---- The ring (SPEC 15): an operator's SLOTS frame, its commit, W ---- */

/* Gives the node the ring in text (a ring file) for group `group`; returns
 * the answer's status (the why in last_why). */
static const char RING_ALL[] = "version 1\n0-16383=default@127.0.0.1:7000\n";
static const char RING_HALF[] =
    "version 2\n0-8191=default@127.0.0.1:7000\n"
    "8192-16383=sales-b@127.0.0.1:7100\n";

Test(node, a_group_without_a_name_takes_only_a_ring_that_keeps_every_slot)
{
    struct node n;
    node_init(&n, 1024);
    node_settle(&n);
    request(&n, 0, 'A', "show-42", 1);
    node_settle(&n);
    cr_assert_eq(answer_of(&n, 1)->type, 'G', "no ring: every slot is served");
    cr_assert_eq(commit_ring(&n, "default", RING_HALF + 0), TK_RAFT_SLOTS_REFUSED);
    cr_assert(strstr(last_why, "every slot"), "%s", last_why);
    cr_assert_eq(commit_ring(&n, "sales-a", RING_ALL), TK_RAFT_SLOTS_REFUSED);
    cr_assert(strstr(last_why, "'default'"), "%s", last_why);
    cr_assert_eq(give_ring(&n, "default", RING_ALL), TK_RAFT_SLOTS_RETRY, "being committed");
    node_settle(&n);
    cr_assert_eq(give_ring(&n, "default", RING_ALL), TK_RAFT_SLOTS_OK, "the same ring again");
    cr_assert_eq(last_reply.slots_reply.version, 1);
    for (uint32_t i = 0; i < NSHARDS; i++) {
        const struct tk_slot_view *v = tk_shard_slots(n.sh[i]);
        cr_assert_not_null(v);
        cr_assert_eq(v->version, 1);
        cr_assert_eq(served(v), TK_SLOTS);
        cr_assert_eq(v->body_len, strlen("0-16383=default@127.0.0.1:7000"));
        cr_assert_eq(memcmp(v->body, "0-16383=default@127.0.0.1:7000", v->body_len), 0);
    }
    /* Slots change groups only by a move. */
    cr_assert_eq(commit_ring(&n, "default", RING_HALF), TK_RAFT_SLOTS_REFUSED);
    cr_assert(strstr(last_why, "move"), "%s", last_why);
    /* Not newer: refused, and the committed ring stays. */
    cr_assert_eq(commit_ring(&n, "default", "version 1\n0-16383=default@127.0.0.1:7001\n"),
                 TK_RAFT_SLOTS_REFUSED);
    cr_assert(strstr(last_why, "not newer"), "%s", last_why);
    cr_assert_eq(commit_ring(&n, "default", "version 3\n0-16383=default@127.0.0.1:7001\n"),
                 TK_RAFT_SLOTS_OK, "new addresses, the same slots");
    cr_assert_eq(tk_shard_slots(n.sh[0])->version, 3);
    struct tk_driver_stats st;
    tk_driver_stats(n.d, &st);
    cr_assert_eq(st.ring_version, 3);
    cr_assert_eq(st.slots_owned, TK_SLOTS);
    cr_assert_eq(st.rings_applied, 2);
    request(&n, 1, 'A', "show-43", 2);
    node_settle(&n);
    cr_assert_eq(answer_of(&n, 2)->type, 'G');
    node_free(&n);
}

Test(node, a_named_group_serves_only_its_slots)
{
    struct node n;
    struct forced f = {.group = "sales-a"};
    node_init_forced(&n, 1024, 30000, &f);
    node_settle(&n);
    char ka[32], kb[32];
    key_in(0, 8191, ka, sizeof(ka));
    key_in(8192, 16383, kb, sizeof(kb));
    request(&n, 0, 'A', ka, 1);
    node_settle(&n);
    const struct answer *a = answer_of(&n, 1);
    cr_assert_eq(a->type, 'W', "a named group serves nothing before a ring");
    cr_assert_eq(a->token, 0, "ring version 0");
    cr_assert_eq(
        commit_ring(&n, "sales-b", "version 1\n0-8191=sales-a@h:1\n8192-16383=sales-b@h:2\n"),
        TK_RAFT_SLOTS_REFUSED, "not this group");
    cr_assert(strstr(last_why, "'sales-a'"), "%s", last_why);
    cr_assert_eq(
        commit_ring(&n, "sales-a", "version 1\n0-8191=sales-a@h:1\n8192-16383=sales-b@h:2\n"),
        TK_RAFT_SLOTS_OK);
    request(&n, 0, 'A', ka, 2);
    request(&n, 1, 'A', kb, 3);
    request(&n, 2, 'Q', kb, 4);
    node_settle(&n);
    cr_assert_eq(answer_of(&n, 2)->type, 'G', "its own slot");
    a = answer_of(&n, 3);
    cr_assert_eq(a->type, 'W', "another group's slot");
    cr_assert_eq(a->token, 1, "the ring's version");
    cr_assert_eq(answer_of(&n, 4)->type, 'W', "a query too");
    const struct tk_slot_view *v = tk_shard_slots(n.sh[1]);
    cr_assert_eq(served(v), 8192);
    cr_assert_eq(v->nranges, 2);
    cr_assert_eq(v->range_end[0], strlen("0-8191=sales-a@h:1"));
    /* A ring that names this group nowhere is refused. */
    cr_assert_eq(commit_ring(&n, "sales-a", "version 2\n0-16383=sales-b@h:2\n"),
                 TK_RAFT_SLOTS_REFUSED);
    node_free(&n);
}

/* A view that takes slots away from a group while it holds keys in them
 * would strand the holders: the shard crashes rather than go on. */
Test(node, a_shard_refuses_a_view_that_takes_away_slots_it_holds_keys_in, .signal = SIGABRT)
{
    struct node n;
    node_init(&n, 1024);
    node_settle(&n);
    request(&n, 0, 'A', "show-42", 1);
    node_settle(&n);
    cr_assert_eq(answer_of(&n, 1)->type, 'G');
    uint32_t sh = tk_cmd_shard("show-42", 7, NSHARDS);
    struct tk_slot_view *v = calloc(1, sizeof(*v) + 2);
    cr_assert_not_null(v);
    v->version = 1; /* owns nothing: every slot was owned before */
    v->body = (char *)(v + 1);
    v->body[0] = '-';
    v->body_len = 1;
    struct tk_msg m = {.kind = TK_MSG_SLOTS, .u.slots = {.view = v}};
    uint8_t buf[TK_MSG_ENCODED_MAX];
    tk_msg_encode(&m, buf);
    tk_shard_message(n.sh[sh], n.now, TK_MSG_TO_DRIVER, TK_MSG_SLOTS, buf, tk_msg_size(&m));
}

/* The entry's checks (tk_driver_check_entry): a ring entry takes no token
 * and must decode whole. */
Test(node, a_ring_entry_is_checked_whole)
{
    static struct tk_slot_ring r;
    char why[128];
    const char *text = "version 4\n0-99=g@h:1\n";
    cr_assert_eq(tk_slots_parse_file(text, strlen(text), &r, why, sizeof(why)), TK_OK);
    uint8_t e[256];
    uint32_t mark = UINT32_MAX;
    memcpy(e, &mark, 4);
    e[4] = 1;
    e[5] = 1;
    e[6] = 'g';
    size_t len = 7 + tk_slots_encode(&r, e + 7, sizeof(e) - 7);
    cr_assert_eq(tk_driver_check_entry(e, (uint32_t)len, 10, 10), TK_OK);
    cr_assert_eq(tk_driver_check_entry(e, (uint32_t)len, 10, 11), TK_EPROTO, "takes no token");
    for (size_t cut = 4; cut < len; cut++)
        cr_assert_eq(tk_driver_check_entry(e, (uint32_t)cut, 10, 10), TK_EPROTO, "cut %zu", cut);
    e[4] = 2;
    cr_assert_eq(tk_driver_check_entry(e, (uint32_t)len, 10, 10), TK_EPROTO, "unknown op");
    e[4] = 1;
    e[6] = ';';
    cr_assert_eq(tk_driver_check_entry(e, (uint32_t)len, 10, 10), TK_EPROTO, "a bad name");
}

Test(msg, every_kind_round_trips)
{
    struct tk_msg in[] = {
        {.kind = TK_MSG_REQ,
         .u.req = {.epoch = 3,
                   .client = 9,
                   .id = 4,
                   .type = 'A',
                   .key_len = 2,
                   .key = "k1",
                   .owner_len = 1,
                   .owner = "o",
                   .lease_ms = 1000,
                   .wait_ms = 5}},
        {.kind = TK_MSG_REPLY,
         .u.reply = {.client = 9,
                     .id = 4,
                     .token = 77,
                     .type = 'Q',
                     .owner_len = 1,
                     .owner = "o",
                     .waiters = 2}},
        {.kind = TK_MSG_REFUSE, .u.refuse = {9, 4, TK_REFUSE_OVERLOAD}},
        {.kind = TK_MSG_ROLE, .u.role = {.epoch = 5, .lead = false, .leader_addr = "h:1"}},
        {.kind = TK_MSG_READ_DONE, .u.read_done = {12, true}},
        {.kind = TK_MSG_REPLY,
         .u.reply = {.client = 9, .id = 5, .token = 3, .type = 'W', .waiters = 11404}},
        {.kind = TK_MSG_SLOTS, .u.slots = {.view = (struct tk_slot_view *)&in}},
    };
    for (size_t i = 0; i < TK_ARRAY_LEN(in); i++) {
        uint8_t buf[TK_MSG_ENCODED_MAX];
        uint32_t len = tk_msg_size(&in[i]);
        tk_msg_encode(&in[i], buf);
        struct tk_msg out;
        cr_assert_eq(tk_msg_decode(in[i].kind, buf, len, &out), TK_OK);
        uint8_t again[TK_MSG_ENCODED_MAX];
        cr_assert_eq(tk_msg_size(&out), len);
        tk_msg_encode(&out, again);
        cr_assert_eq(memcmp(buf, again, len), 0, "kind %u", in[i].kind);
        cr_assert_eq(tk_msg_decode(in[i].kind, buf, len - 1, &out), TK_EPROTO);
        if (in[i].kind != TK_MSG_REQ)
            cr_assert_eq(tk_msg_decode(TK_MSG_REQ, buf, len, &out), TK_EPROTO);
    }
}
