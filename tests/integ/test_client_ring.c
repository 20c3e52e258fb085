/* Goal: libticketing's side of SPEC 15. W is a definite outcome,
 * WRONG_GROUP, carrying the key's slot and the ring's version, for an
 * acquire, a release (sent once, never again) and a query, and the
 * connection it came on stays in use; tk_client_ring() returns the ring's
 * version and its whole body, from one line or from an answer of several
 * lines joined by ';'; and the lines of such an answer are taken only in
 * order, all of one version and one count: anything else is a protocol
 * error that ends the connection, like a malformed line.
 *
 * Method: real ticketingd processes for what a server does today (a
 * standalone node answers S with "S <id> 0 -"; one started with --group
 * and no ring answers W to every request about a key). The many-line
 * answers, which need a ring larger than one line, come from a scripted
 * server in a thread of the test: it does the real handshake (right
 * proof), answers pings, and answers each S with the lines of a script,
 * one script for the first S it sees and another for every later one.
 */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "client/ticketing.h"
#include "core/auth.h"
#include "core/proto.h"
#include "core/slots.h"
#include "tests/support/tk_test.h"

/* ---- fixture ---------------------------------------------------------------- */

static struct tk_node node; /* standalone, no --group */
static struct tk_node group_node;

static void setup(void)
{
    static const char *const args[] = {"--threads", "2", NULL};
    cr_assert_eq(tk_node_start(&node, args), 0, "ticketingd did not start");
}

static void teardown(void)
{
    if (node.pid > 0)
        tk_node_stop(&node, SIGTERM, 10000);
    tk_node_cleanup(&node);
    if (group_node.pid > 0) {
        tk_node_stop(&group_node, SIGTERM, 10000);
        tk_node_cleanup(&group_node);
    }
}

/* ---- helpers ------------------------------------------------------------------ */

static struct tk_client *client_at(uint32_t port, uint32_t request_timeout_ms)
{
    char addr[64];
    struct tk_client_config cfg;
    tk_client_config_init(&cfg);
    snprintf(addr, sizeof addr, "127.0.0.1:%u", port);
    cfg.addrs = addr;
    cfg.secret = TK_TEST_SECRET;
    cfg.secret_len = strlen(TK_TEST_SECRET);
    cfg.request_timeout_ms = request_timeout_ms;
    struct tk_client *c = NULL;
    int rc = tk_client_create(&cfg, &c);
    cr_assert_eq(rc, TK_CLIENT_ENONE, "tk_client_create: %s", tk_client_strerror(rc));
    /* Both connections to the one address: a count taken now stays. */
    struct tk_client_stats st;
    for (int i = 0; i < 500; i++) {
        tk_client_stats(c, &st);
        if (st.connections_ready == 2)
            return c;
        usleep(10000);
    }
    cr_assert_fail("%u of 2 connections ready", st.connections_ready);
    return c;
}

/* ---- the scripted server ---------------------------------------------------- */

#define FAKE_CONNS_MAX 8
#define FAKE_SCRIPT_MAX 8

/* Script lines are answers with '#' where the request's id goes. */
struct fake {
    int lfd;
    uint32_t port;
    pthread_t thread;
    atomic_bool stop;
    const char *first[FAKE_SCRIPT_MAX]; /* the answer to the first S, NULL-ended */
    const char *later[FAKE_SCRIPT_MAX]; /* to every later S */
    /* When set, the first S is answered with big_parts parts of big_len
     * bytes each instead of first. */
    size_t big_parts, big_len;
    atomic_int rings; /* S requests seen */
    atomic_int accepted;
};

struct fake_conn {
    int fd;
    bool authed;
    char snonce[TK_AUTH_HEX_LEN + 1];
    char buf[4096];
    size_t len;
};

static void fake_write(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w <= 0)
            return; /* the client went: nothing to do */
        p += w;
        n -= (size_t)w;
    }
}

/* Writes a script line with the id in place of '#'. */
static void fake_answer(int fd, const char *script, const char *id, size_t id_len)
{
    char out[TK_LINE_MAX + 32];
    size_t n = 0;
    for (const char *s = script; *s && n + id_len + 2 < sizeof out; s++) {
        if (*s == '#') {
            memcpy(out + n, id, id_len);
            n += id_len;
        } else {
            out[n++] = *s;
        }
    }
    out[n++] = '\n';
    fake_write(fd, out, n);
}

/* An answer of f->big_parts parts of f->big_len bytes ('x'). */
static void fake_big(const struct fake *f, int fd, const char *id, size_t id_len)
{
    static char text[TK_LINE_MAX];
    static char out[TK_LINE_MAX + 64];
    cr_assert_lt(f->big_len, sizeof text);
    memset(text, 'x', f->big_len);
    text[f->big_len] = '\0';
    for (size_t i = 1; i <= f->big_parts; i++) {
        int n = snprintf(out, sizeof out, "S %.*s 5 %zu/%zu %s\n", (int)id_len, id, i, f->big_parts,
                         text);
        cr_assert(n > 0 && n <= TK_LINE_MAX, "a line of %d bytes", n);
        fake_write(fd, out, (size_t)n);
    }
}

static void fake_line(struct fake *f, struct fake_conn *k, const char *line, size_t len)
{
    if (!k->authed) {
        const char *cn, *cp;
        char out[512], cnonce[TK_AUTH_HEX_LEN + 1], proof[TK_AUTH_HEX_LEN + 1];
        cr_assert(tk_proto_parse_auth(line, len, &cn, &cp), "not an AUTH line");
        memcpy(cnonce, cn, TK_AUTH_HEX_LEN);
        cnonce[TK_AUTH_HEX_LEN] = '\0';
        tk_auth_proof((const uint8_t *)TK_TEST_SECRET, strlen(TK_TEST_SECRET), true, k->snonce,
                      cnonce, proof);
        proof[TK_AUTH_HEX_LEN] = '\0';
        uint64_t dom[2] = {1, 2};
        size_t n = tk_proto_fmt_ok(out, sizeof out, proof, 7, dom);
        fake_write(k->fd, out, n);
        k->authed = true;
        return;
    }
    cr_assert(len >= 3 && line[1] == ' ', "request '%.*s'", (int)len, line);
    const char *id = line + 2;
    size_t id_len = len - 2;
    if (line[0] == 'P') {
        char out[64];
        snprintf(out, sizeof out, "P %.*s\n", (int)id_len, id);
        fake_write(k->fd, out, strlen(out));
    } else if (line[0] == 'S') {
        bool first = atomic_fetch_add(&f->rings, 1) == 0;
        if (first && f->big_parts > 0) {
            fake_big(f, k->fd, id, id_len);
            return;
        }
        const char *const *script = first ? f->first : f->later;
        for (int i = 0; i < FAKE_SCRIPT_MAX && script[i] != NULL; i++)
            fake_answer(k->fd, script[i], id, id_len);
    }
    /* Anything else (an "X" line of a request given up): no answer. */
}

/* Reads what a connection has; false when it is gone. */
static bool fake_input(struct fake *f, struct fake_conn *k)
{
    ssize_t got = read(k->fd, k->buf + k->len, sizeof k->buf - k->len);
    if (got <= 0)
        return false;
    k->len += (size_t)got;
    char *nl;
    while ((nl = memchr(k->buf, '\n', k->len)) != NULL) {
        size_t len = (size_t)(nl - k->buf);
        fake_line(f, k, k->buf, len);
        memmove(k->buf, nl + 1, k->len - len - 1);
        k->len -= len + 1;
    }
    return k->len < sizeof k->buf;
}

static void *fake_main(void *arg)
{
    struct fake *f = arg;
    struct fake_conn conns[FAKE_CONNS_MAX];
    int n = 0;
    while (!atomic_load(&f->stop)) {
        struct pollfd p[FAKE_CONNS_MAX + 1];
        p[0] = (struct pollfd){.fd = f->lfd, .events = POLLIN};
        for (int i = 0; i < n; i++)
            p[i + 1] = (struct pollfd){.fd = conns[i].fd, .events = POLLIN};
        if (poll(p, (nfds_t)n + 1, 50) <= 0)
            continue;
        for (int i = n - 1; i >= 0; i--) {
            if (p[i + 1].revents == 0 || fake_input(f, &conns[i]))
                continue;
            close(conns[i].fd);
            conns[i] = conns[--n];
        }
        if ((p[0].revents & POLLIN) && n < FAKE_CONNS_MAX) {
            int fd = accept(f->lfd, NULL, NULL);
            if (fd < 0)
                continue;
            struct fake_conn *k = &conns[n++];
            memset(k, 0, sizeof *k);
            k->fd = fd;
            cr_assert_eq(tk_auth_nonce(k->snonce), TK_OK);
            char out[256];
            size_t len = tk_proto_fmt_banner(out, sizeof out, false, k->snonce);
            fake_write(fd, out, len);
            atomic_fetch_add(&f->accepted, 1);
        }
    }
    for (int i = 0; i < n; i++)
        close(conns[i].fd);
    return NULL;
}

static void fake_start(struct fake *f)
{
    f->lfd = tk_test_listen(&f->port);
    cr_assert(f->lfd >= 0);
    cr_assert_eq(pthread_create(&f->thread, NULL, fake_main, f), 0);
}

static void fake_stop(struct fake *f)
{
    atomic_store(&f->stop, true);
    pthread_join(f->thread, NULL);
    close(f->lfd);
}

/* ---- assertion helpers ----------------------------------------------------- */

#define expect_outcome(got, want)                                                    \
    cr_assert_eq((got), (want), "outcome %s, wanted %s", tk_client_outcome_str(got), \
                 tk_client_outcome_str(want))

/* A ring in three parts, as a server cuts one too long for a line (the
 * ranges are short here: the client does not care why there are parts). */
#define PART1 "0-99=sales-a@127.0.0.1:7400,127.0.0.1:7410"
#define PART2 "100-199=sales-b@127.0.0.1:7500;200-299=sales-a@127.0.0.1:7400,127.0.0.1:7410"
#define PART3 "300-16383=sales-c@[::1]:7600"
#define BODY PART1 ";" PART2 ";" PART3

static const char *const three_parts[] = {"S # 5 1/3 " PART1, "S # 5 2/3 " PART2,
                                          "S # 5 3/3 " PART3, NULL};

/* ---- W -------------------------------------------------------------------------- */

TestSuite(client_ring, .init = setup, .fini = teardown, .timeout = 120);

Test(client_ring, a_group_without_a_ring_answers_wrong_group_and_the_connection_stays)
{
    static const char *const args[] = {"--threads", "2", "--group", "g1", NULL};
    static const char *const keys[] = {"a", "show-42", "show-42:seat-17",
                                       "inventory/2026-12-24/hall-B"};
    cr_assert_eq(tk_node_start(&group_node, args), 0, "ticketingd --group g1 did not start");
    struct tk_client *c = client_at(group_node.port, 5000);
    struct tk_client_result r;
    struct tk_client_stats before, after;
    tk_client_stats(c, &before);
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        uint32_t slot = tk_client_slot(keys[i], strlen(keys[i]));
        expect_outcome(tk_client_acquire(c, keys[i], 30000, 0, &r), TK_CLIENT_WRONG_GROUP);
        cr_assert_str_eq(tk_client_outcome_str(r.outcome), "wrong_group");
        cr_assert_eq(r.slot, slot, "%s: slot %u, wanted %u", keys[i], r.slot, slot);
        cr_assert_eq(r.ring_version, 0);
        cr_assert_eq(r.token, 0, "nothing was granted");
        cr_assert_str_eq(r.key, keys[i]);
        cr_assert_gt(r.sent_us, 0);
        /* A wait does not change it: W comes at once, not after the wait. */
        uint64_t t0 = tk_test_ms();
        expect_outcome(tk_client_acquire(c, keys[i], 30000, 3000, &r), TK_CLIENT_WRONG_GROUP);
        cr_assert_lt(tk_test_ms() - t0, 2000, "W must come at once");
        expect_outcome(tk_client_query(c, keys[i], &r), TK_CLIENT_WRONG_GROUP);
        cr_assert_eq(r.slot, slot);
        cr_assert_eq(r.ring_version, 0);
        cr_assert(!r.held);
    }
    /* A release so answered is decided: written once, not queued again
     * (its W names ring version 0: nothing newer to fetch, no group to
     * send it to). */
    tk_client_stats(c, &after);
    uint64_t written = after.requests_written;
    expect_outcome(tk_client_release(c, "show-42", 7, &r), TK_CLIENT_WRONG_GROUP);
    cr_assert_eq(r.slot, 11909);
    cr_assert_eq(r.token, 7);
    cr_assert(!r.resent);
    expect_outcome(tk_client_ping(c, &r), TK_CLIENT_ANSWERED);
    tk_client_stats(c, &after);
    cr_assert_eq(after.requests_written, written + 2, "the release and the ping, once each");
    cr_assert_eq(after.ring_version, 0, "no ring to route by");
    cr_assert_eq(after.rerouted, 0, "nothing was sent again");
    cr_assert_eq(after.groups, 1);
    cr_assert_eq(after.releases_queued, 0);
    /* The connections the Ws came on are the ones there were: none closed. */
    cr_assert_eq(after.connect_attempts, before.connect_attempts, "a connection was closed");
    cr_assert_eq(after.connections_ready, before.connections_ready);
    /* Its ring: none yet. */
    char body[64];
    expect_outcome(tk_client_ring(c, body, sizeof body, &r), TK_CLIENT_ANSWERED);
    cr_assert_eq(r.ring_version, 0);
    cr_assert_str_eq(body, "-");
    tk_client_destroy(c);
}

/* ---- S from a real server ---------------------------------------------------- */

Test(client_ring, a_standalone_node_answers_version_0_and_no_ranges)
{
    struct tk_client *c = client_at(node.port, 5000);
    struct tk_client_result r;
    char body[64];
    memset(body, 'x', sizeof body);
    expect_outcome(tk_client_ring(c, body, sizeof body, &r), TK_CLIENT_ANSWERED);
    cr_assert_eq(r.ring_version, 0);
    cr_assert_eq(r.ring_len, 1);
    cr_assert_str_eq(body, "-");
    cr_assert_str_eq(r.key, "");
    cr_assert_gt(r.sent_us, 0);
    /* Only the version and the length. */
    expect_outcome(tk_client_ring(c, NULL, 0, &r), TK_CLIENT_ANSWERED);
    cr_assert_eq(r.ring_len, 1);
    /* A buffer of one byte holds the NUL only. */
    expect_outcome(tk_client_ring(c, body, 1, &r), TK_CLIENT_ANSWERED);
    cr_assert_eq(r.ring_len, 1);
    cr_assert_str_eq(body, "");
    /* No buffer for a length: refused without a round trip. */
    expect_outcome(tk_client_ring(c, NULL, 8, &r), TK_CLIENT_INVALID);
    cr_assert_str_eq(r.reason, "buffer");
    cr_assert_eq(tk_client_ring_async(c, NULL, 8, NULL, NULL), TK_CLIENT_EINVAL);
    /* The standalone node serves every slot: acquires are as ever. */
    expect_outcome(tk_client_acquire(c, "show-42", 30000, 0, &r), TK_CLIENT_ACQUIRED);
    expect_outcome(tk_client_release(c, "show-42", r.token, &r), TK_CLIENT_RELEASED);
    tk_client_destroy(c);
}

/* ---- S in several lines ------------------------------------------------------- */

Test(client_ring, an_answer_in_three_parts_is_one_body)
{
    struct fake f = {0};
    memcpy(f.first, three_parts, sizeof three_parts);
    memcpy(f.later, three_parts, sizeof three_parts);
    fake_start(&f);
    struct tk_client *c = client_at(f.port, 5000);
    struct tk_client_result r;
    static char body[TK_CLIENT_RING_TEXT_MAX + 1];
    expect_outcome(tk_client_ring(c, body, sizeof body, &r), TK_CLIENT_ANSWERED);
    cr_assert_eq(r.ring_version, 5);
    cr_assert_str_eq(body, BODY);
    cr_assert_eq(r.ring_len, strlen(BODY));
    /* The joined body is a ring core/slots.h reads. */
    static struct tk_slot_ring ring;
    char why[256];
    ring.version = r.ring_version;
    cr_assert_eq(tk_slots_parse_body(body, r.ring_len, &ring, why, sizeof why), TK_OK, "%s", why);
    cr_assert_eq(ring.nranges, 4);
    cr_assert_eq(ring.ngroups, 3);
    cr_assert_eq(ring.ranges[3].first, 300);
    cr_assert_eq(ring.ranges[3].last, 16383);
    /* A short buffer gets the body's start, and its whole length. */
    char small[11];
    expect_outcome(tk_client_ring(c, small, sizeof small, &r), TK_CLIENT_ANSWERED);
    cr_assert_eq(r.ring_len, strlen(BODY));
    cr_assert_str_eq(small, "0-99=sales");
    /* Nothing was wrong: the connections are the first ones. */
    struct tk_client_stats st;
    tk_client_stats(c, &st);
    cr_assert_eq(atomic_load(&f.accepted), 2);
    cr_assert_eq(st.connections_ready, 2);
    tk_client_destroy(c);
    fake_stop(&f);
}

/* Each script is the answer to the first S; the answer to the resend (on
 * the other connection, the first having been closed) is right. */
Test(client_ring, parts_out_of_order_end_the_connection)
{
    static const struct {
        const char *name;
        const char *script[FAKE_SCRIPT_MAX];
        const char *why;
    } cases[] = {
        {"a part skipped", {"S # 5 1/3 " PART1, "S # 5 3/3 " PART3, NULL}, "out of order"},
        {"starts at part 2", {"S # 5 2/3 " PART2, NULL}, "out of order"},
        {"a part again", {"S # 5 1/3 " PART1, "S # 5 1/3 " PART1, NULL}, "out of order"},
        {"a one-line answer after part 1",
         {"S # 5 1/3 " PART1, "S # 5 " PART2, NULL},
         "out of order"},
        {"the version changes", {"S # 5 1/3 " PART1, "S # 6 2/3 " PART2, NULL}, "disagree"},
        {"the count changes", {"S # 5 1/3 " PART1, "S # 5 2/4 " PART2, NULL}, "disagree"},
        {"a part without ranges", {"S # 5 1/2 " PART1, "S # 5 2/2 -", NULL}, "without ranges"},
        /* A part holds a range: core/proto.c refuses a count past 1,024. */
        {"more parts than ranges", {"S # 5 1/1025 " PART1, NULL}, "malformed line"},
        {"an E after part 1", {"S # 5 1/3 " PART1, "E # syntax", NULL}, "does not fit"},
        {"a P for the S", {"P #", NULL}, "does not fit"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct fake f = {0};
        memcpy(f.first, cases[i].script, sizeof cases[i].script);
        memcpy(f.later, three_parts, sizeof three_parts);
        fake_start(&f);
        struct tk_client *c = client_at(f.port, 5000);
        struct tk_client_result r;
        static char body[TK_CLIENT_RING_TEXT_MAX + 1];
        expect_outcome(tk_client_ring(c, body, sizeof body, &r), TK_CLIENT_ANSWERED);
        cr_assert_str_eq(body, BODY, "%s: the resend's body, not the bad one's", cases[i].name);
        cr_assert_eq(r.ring_version, 5, "%s", cases[i].name);
        cr_assert_eq(atomic_load(&f.rings), 2, "%s: asked twice", cases[i].name);
        char err[512];
        cr_assert_gt(tk_client_last_error(c, err, sizeof err), 0, "%s", cases[i].name);
        cr_assert(strstr(err, "protocol") != NULL && strstr(err, cases[i].why) != NULL,
                  "%s: last error '%s'", cases[i].name, err);
        /* The bad connection was closed and is made again. */
        for (int t = 0; t < 300 && atomic_load(&f.accepted) < 3; t++)
            usleep(10000);
        cr_assert_eq(atomic_load(&f.accepted), 3, "%s: reconnected", cases[i].name);
        tk_client_destroy(c);
        fake_stop(&f);
    }
}

Test(client_ring, a_server_that_never_answers_in_order_is_unavailable)
{
    struct fake f = {0};
    static const char *const bad[] = {"S # 5 1/3 " PART1, "S # 5 3/3 " PART3, NULL};
    memcpy(f.first, bad, sizeof bad);
    memcpy(f.later, bad, sizeof bad);
    fake_start(&f);
    struct tk_client *c = client_at(f.port, 1500);
    struct tk_client_result r;
    static char body[TK_CLIENT_RING_TEXT_MAX + 1];
    uint64_t t0 = tk_test_ms();
    expect_outcome(tk_client_ring(c, body, sizeof body, &r), TK_CLIENT_UNAVAILABLE);
    cr_assert_geq(tk_test_ms() - t0, 1000);
    cr_assert_str_eq(body, "", "a part of a refused answer is not left in the buffer");
    cr_assert_eq(r.ring_len, 0);
    cr_assert_geq(atomic_load(&f.rings), 2, "resent on every new connection");
    tk_client_destroy(c);
    fake_stop(&f);
}

/* The longest body a ring can have is taken; one that is longer is not,
 * however it is cut (the client bounds the total; core/slots.h reads the
 * content, which here is no ring at all). */
Test(client_ring, a_body_past_the_longest_ring_is_refused)
{
    static char body[TK_CLIENT_RING_TEXT_MAX + 1];
    struct tk_client_result r;
    /* 739 parts of 999 bytes, joined: 738,999 bytes, at the bound or below. */
    struct fake f = {.big_parts = 739, .big_len = 999};
    memcpy(f.later, three_parts, sizeof three_parts);
    cr_assert_leq(739 * 999 + 738, TK_CLIENT_RING_TEXT_MAX);
    fake_start(&f);
    struct tk_client *c = client_at(f.port, 10000);
    expect_outcome(tk_client_ring(c, body, sizeof body, &r), TK_CLIENT_ANSWERED);
    cr_assert_eq(r.ring_len, 739 * 999 + 738);
    cr_assert_eq(strlen(body), r.ring_len);
    cr_assert_eq(body[999], ';');
    cr_assert_eq(atomic_load(&f.rings), 1);
    tk_client_destroy(c);
    fake_stop(&f);

    /* 740 parts of 1000 bytes: 740,739 bytes, past it. */
    struct fake g = {.big_parts = 740, .big_len = 1000};
    memcpy(g.later, three_parts, sizeof three_parts);
    cr_assert_gt(740 * 1000 + 739, TK_CLIENT_RING_TEXT_MAX);
    fake_start(&g);
    c = client_at(g.port, 10000);
    expect_outcome(tk_client_ring(c, body, sizeof body, &r), TK_CLIENT_ANSWERED);
    cr_assert_str_eq(body, BODY, "the resend's answer");
    cr_assert_eq(atomic_load(&g.rings), 2);
    char err[512];
    tk_client_last_error(c, err, sizeof err);
    cr_assert(strstr(err, "longer than any ring") != NULL, "last error '%s'", err);
    tk_client_destroy(c);
    fake_stop(&g);
}
