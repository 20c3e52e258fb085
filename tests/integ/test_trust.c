/* Goal: the trust boundaries around the peer port hold. A peer proof
 * cannot be borrowed: a process that relays `ticketctl remove-member`'s
 * handshake to the leader gets no authenticated link and removes nothing,
 * and ticketctl reports success only on an answer the node it
 * authenticated signed.
 *
 * Method: a real 3-node cluster (fast timers) on 127.0.0.1, the real
 * ticketctl binary, and in the test process a relay: it listens where a
 * stale address of the operator's list points (a client port, its peer
 * port + 1 and its admin port + 2), answers /status there with the
 * leader's own /status rewritten to name the relay as the leader's peer
 * address (what an earlier ticketctl followed), and pumps the peer port's
 * bytes to and from the real leader. A second stand-in holds the peer
 * secret and completes the handshake, then answers the REMOVE with a
 * JOIN_REPLY whose MAC is wrong, as an attacker on the path of a
 * plaintext link could. */
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
#include <sys/wait.h>
#include <unistd.h>

#include "core/tk.h"
#include "tests/support/tk_cluster.h"
#include "tests/support/tk_peer.h"

#define TICKETCTL TK_BIN_DIR "/ticketctl"

static struct tk_cluster cl;

static void setup_cluster(void)
{
    static const char *const fast[] = {"--heartbeat-ms", "50", "--election-ms", "400", NULL};
    cr_assert_eq(tk_cluster_start(&cl, 3, fast), 0, "the cluster did not elect a leader");
}

static void teardown_cluster(void)
{
    tk_cluster_stop(&cl);
}

TestSuite(trust, .init = setup_cluster, .fini = teardown_cluster, .timeout = 120);

/* ---- helpers ------------------------------------------------------------------ */

/* Runs ticketctl with args (NULL-terminated) to completion, stdout and
 * stderr into out; its exit code, or -1 if it ran past 30 s. */
static int ctl(const char *const *args, char *out, size_t cap)
{
    const char *argv[32] = {TICKETCTL};
    for (int i = 0; args[i] != NULL && i < 30; i++)
        argv[i + 1] = args[i];
    return tk_run(argv, out, cap, 30000);
}

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

static int listen_on(uint32_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0, "bind %u", port);
    cr_assert_eq(listen(fd, 16), 0);
    return fd;
}

/* A NodeId as `members` and remove-member write it. */
static void hex_id(uint64_t v, char out[17])
{
    snprintf(out, 17, "%016llx", (unsigned long long)v);
}

/* Stops follower f long enough for the leader to stop hearing it: from
 * then on a removal of it would be accepted. */
static void stop_follower(int f)
{
    cr_assert_eq(tk_pause_pid(cl.node[f].pid), 0);
    usleep(1200 * 1000); /* past the election timeout (400-500 ms) */
}

static bool is_member(int leader, uint64_t id)
{
    struct tk_member m[TK_CLUSTER_MEMBERS_MAX];
    int n = tk_cluster_members(&cl, leader, m, TK_CLUSTER_MEMBERS_MAX, NULL);
    cr_assert_geq(n, 0);
    for (int i = 0; i < n; i++)
        if (m[i].id == id)
            return true;
    return false;
}

/* ---- the relay --------------------------------------------------------------------- */

struct relay {
    uint32_t base;   /* its "client port"; +1 peer, +2 admin */
    uint32_t leader; /* the real leader's client port */
    int peer_fd, admin_fd;
    atomic_bool stop;
    atomic_bool saw_ok;   /* the leader answered a relayed AUTH with OK */
    atomic_int relayed;   /* connections relayed to the leader */
    char leader_says[64]; /* the leader's first line after the AUTH */
};

/* /status of the leader, with its peer address replaced by ours: what a
 * process on a freed admin port can answer. */
static void relay_status(struct relay *r, int fd)
{
    static char body[1 << 16], out[(1 << 16) + 256];
    char buf[1024], real[32], fake[32];
    ssize_t got = recv(fd, buf, sizeof buf, 0);
    (void)got;
    if (tk_http_get(r->leader + 2, "/status", body, sizeof body) != 200)
        return;
    snprintf(real, sizeof real, "127.0.0.1:%u", r->leader + 1);
    snprintf(fake, sizeof fake, "127.0.0.1:%u", r->base + 1);
    size_t o = 0;
    for (const char *p = body; *p != '\0' && o < sizeof out - 64;) {
        if (strncmp(p, real, strlen(real)) == 0) {
            o += (size_t)snprintf(out + o, sizeof out - o, "%s", fake);
            p += strlen(real);
        } else {
            out[o++] = *p++;
        }
    }
    out[o] = '\0';
    char head[256];
    int h = snprintf(head, sizeof head,
                     "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                     o);
    if (send(fd, head, (size_t)h, MSG_NOSIGNAL) == h)
        send(fd, out, o, MSG_NOSIGNAL);
}

/* Bytes both ways between the dialler and the leader's peer port until
 * either side closes; notes whether the leader said OK. */
static void relay_pump(struct relay *r, int in)
{
    struct tk_tc up;
    if (tk_tc_connect(&up, r->leader + 1) != 0)
        return;
    atomic_fetch_add(&r->relayed, 1);
    char acc[1024]; /* the leader's first bytes: its banner, then its answer */
    size_t acc_len = 0;
    struct pollfd p[2] = {{.fd = in, .events = POLLIN}, {.fd = up.fd, .events = POLLIN}};
    while (!atomic_load(&r->stop) && poll(p, 2, 100) >= 0) {
        for (int i = 0; i < 2; i++) {
            if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            char buf[8192];
            ssize_t n = recv(p[i].fd, buf, sizeof buf, 0);
            if (n <= 0)
                goto done;
            if (i == 1 && r->leader_says[0] == '\0') {
                size_t k = TK_MIN((size_t)n, sizeof acc - 1 - acc_len);
                memcpy(acc + acc_len, buf, k);
                acc[acc_len += k] = '\0';
                char *nl = strchr(acc, '\n');
                char *second = nl ? nl + 1 : NULL;
                if (second && strchr(second, '\n')) {
                    snprintf(r->leader_says, sizeof r->leader_says, "%.*s",
                             (int)strcspn(second, "\n"), second);
                    atomic_store(&r->saw_ok, strncmp(second, "OK ", 3) == 0);
                }
            }
            send(p[1 - i].fd, buf, (size_t)n, MSG_NOSIGNAL);
        }
    }
done:
    tk_tc_close(&up);
}

static void *relay_main(void *arg)
{
    struct relay *r = arg;
    struct pollfd p[2] = {{.fd = r->peer_fd, .events = POLLIN},
                          {.fd = r->admin_fd, .events = POLLIN}};
    while (!atomic_load(&r->stop)) {
        if (poll(p, 2, 100) <= 0)
            continue;
        for (int i = 0; i < 2; i++) {
            if (!(p[i].revents & POLLIN))
                continue;
            int fd = accept(p[i].fd, NULL, NULL);
            if (fd < 0)
                continue;
            if (i == 0)
                relay_pump(r, fd);
            else
                relay_status(r, fd);
            close(fd);
        }
    }
    return NULL;
}

/* ---- tests -------------------------------------------------------------------------- */

Test(trust, a_relayed_remove_member_is_refused_and_removes_nothing)
{
    int l = tk_cluster_leader(&cl, 5000, 0);
    cr_assert_geq(l, 0);
    int f = (l + 1) % 3;
    uint64_t gone = tk_cluster_node_id(&cl, f);
    char id[17], addr[64], peer[400], out[4096];
    hex_id(gone, id);
    static struct relay r;
    r.base = tk_free_port3();
    r.leader = cl.node[l].port;
    r.peer_fd = listen_on(r.base + 1);
    r.admin_fd = listen_on(r.base + 2);
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, relay_main, &r), 0);
    stop_follower(f);

    /* The operator's list points at the relay (a stale address). */
    snprintf(addr, sizeof addr, "--addr=127.0.0.1:%u", r.base);
    snprintf(peer, sizeof peer, "--peer-secret-file=%s", cl.node[l].peer_secret_file);
    int code = ctl(ARGS(addr, "remove-member", id, peer, "--timeout", "4s"), out, sizeof out);
    atomic_store(&r.stop, true);
    pthread_join(t, NULL);
    close(r.peer_fd);
    close(r.admin_fd);
    kill(cl.node[f].pid, SIGCONT);

    cr_assert_gt(atomic_load(&r.relayed), 0, "ticketctl never reached the relay: %s", out);
    cr_assert_not(atomic_load(&r.saw_ok), "the leader authenticated a relayed proof (it said '%s')",
                  r.leader_says);
    cr_assert_str_eq(r.leader_says, "E - auth");
    cr_assert_neq(code, 0, "ticketctl reported success through a relay: %s", out);
    cr_assert(strstr(out, "removed ") == NULL, "%s", out);
    cr_assert(strstr(out, "another address") != NULL || strstr(out, "refused") != NULL, "%s", out);
    cr_assert(is_member(l, gone), "the member was removed through the relay");
    /* The leader says why in its log: the proof was meant for another address. */
    char cmd[512];
    snprintf(cmd, sizeof cmd, "grep -q 'meant for another address' %s", cl.node[l].log_file);
    cr_assert_eq(system(cmd), 0, "the leader's log does not name the relayed AUTH");
}

/* ---- a forged answer --------------------------------------------------------------- */

struct forger {
    int fd;
    uint32_t port;
    const char *secret_file;
    atomic_bool done;
};

/* Listens as a node whose peer address is 127.0.0.1:port would, holds the
 * peer secret, completes the handshake, then answers REMOVE "ok" with a
 * MAC of zeros. */
static void *forger_main(void *arg)
{
    struct forger *g = arg;
    static uint8_t secret[TK_AUTH_SECRET_MAX];
    size_t secret_len;
    char self[32], snonce[TK_AUTH_HEX_LEN + 1], line[TK_HS_LINE_MAX], out[TK_HS_LINE_MAX];
    snprintf(self, sizeof self, "127.0.0.1:%u", g->port);
    if (tk_auth_load_secret(g->secret_file, secret, sizeof secret, &secret_len) != TK_OK ||
        tk_auth_nonce(snonce) != TK_OK)
        return NULL;
    struct pollfd p = {.fd = g->fd, .events = POLLIN};
    if (poll(&p, 1, 10000) != 1)
        return NULL;
    static struct tk_tc c;
    c.fd = accept(g->fd, NULL, NULL);
    c.len = 0;
    struct tk_hs hs;
    size_t n = tk_hs_listen(&hs, secret, secret_len, self, snonce, out, sizeof out);
    hs.node_id = 0x5151515151515151ull;
    tk_tc_send_raw(&c, out, n);
    int k = tk_tc_line(&c, line, sizeof line, 5000);
    if (k < 0 || tk_hs_line(&hs, line, (size_t)k, out, sizeof out, &n) != TK_HS_DONE) {
        tk_tc_close(&c);
        return NULL;
    }
    tk_tc_send_raw(&c, out, n);
    /* The REMOVE frame (not read: any answer will do), then the forgery. */
    usleep(200 * 1000);
    struct tk_wire_frame f = {
        .msg = {.type = TK_RAFT_MSG_JOIN_REPLY, .from = 0x5151515151515151ull}};
    f.msg.join_reply.status = TK_RAFT_JOIN_OK;
    tk_peer_send(&c, &f);
    atomic_store(&g->done, true);
    usleep(500 * 1000);
    tk_tc_close(&c);
    return NULL;
}

Test(trust, an_answer_without_the_nodes_mac_is_not_believed)
{
    char peer[400], peers[64], out[4096];
    static struct forger g;
    uint32_t base = tk_free_port3();
    g.port = base + 1;
    g.fd = listen_on(g.port);
    g.secret_file = cl.node[0].peer_secret_file;
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, forger_main, &g), 0);
    snprintf(peer, sizeof peer, "--peer-secret-file=%s", g.secret_file);
    snprintf(peers, sizeof peers, "--peers=127.0.0.1:%u", g.port);
    int code = ctl(ARGS(peers, "remove-member", "0123456789abcdef", peer, "--timeout", "2s"), out,
                   sizeof out);
    pthread_join(t, NULL);
    close(g.fd);
    cr_assert(atomic_load(&g.done), "the stand-in never got to answer: %s", out);
    cr_assert_eq(code, 82, "exit %d: %s", code, out); /* sent, no authenticated answer */
    cr_assert(strstr(out, "without the node's MAC") != NULL, "%s", out);
}

/* ---- peer links bounded by membership ---------------------------------------------- */

/* A Probe naming addr as the prober's peer address: a node that believed
 * it would dial addr to answer. */
static int send_probe(struct tk_tc *c, const char *addr)
{
    struct tk_wire_frame f = {.msg = {.type = TK_RAFT_MSG_PROBE, .from = 0x7e57000000000001ull}};
    f.msg.probe.peer_addr = (struct tk_raft_str){addr, (uint16_t)strlen(addr)};
    f.msg.probe.client_addr = (struct tk_raft_str){addr, (uint16_t)strlen(addr)};
    return tk_peer_send(c, &f);
}

static uint64_t metric(int i, const char *name)
{
    static char text[1 << 20];
    uint64_t v = 0;
    cr_assert_eq(tk_http_get(cl.node[i].port + 2, "/metrics", text, sizeof text), 200);
    cr_assert(tk_metric_u64(text, name, &v), "no %s", name);
    return v;
}

static char self_addr[TK_CLUSTER_MAX][32];

static const char *peer_addr_of(int i)
{
    snprintf(self_addr[i], sizeof self_addr[i], "127.0.0.1:%u", cl.node[i].port + 1);
    return self_addr[i];
}

struct prober {
    atomic_bool stop;
    atomic_int sent;
    int rounds;
};

/* Keeps probing every member with addresses nobody lists, over links
 * authenticated with the peer secret, until stopped. */
static void *prober_main(void *arg)
{
    struct prober *pr = arg;
    static struct tk_tc c[TK_CLUSTER_MAX];
    struct tk_hs hs;
    bool open[TK_CLUSTER_MAX] = {false};
    for (int k = 0; !atomic_load(&pr->stop); k++, usleep(20 * 1000)) {
        for (int i = 0; i < cl.n; i++) {
            if (!open[i])
                open[i] = tk_peer_open(&c[i], &hs, cl.node[i].port + 1, peer_addr_of(i),
                                       cl.node[0].peer_secret_file, 1000) == 0;
            char bogus[32];
            snprintf(bogus, sizeof bogus, "192.0.2.%d:%d", k % 250 + 1, 7401 + k / 250);
            if (open[i] && send_probe(&c[i], bogus) != 0) {
                tk_tc_close(&c[i]);
                open[i] = false;
            } else if (open[i]) {
                atomic_fetch_add(&pr->sent, 1);
            }
        }
    }
    for (int i = 0; i < cl.n; i++)
        if (open[i])
            tk_tc_close(&c[i]);
    return NULL;
}

Test(trust, probes_naming_strangers_dial_nothing_and_a_restart_still_rejoins)
{
    int l = tk_cluster_leader(&cl, 5000, 0);
    cr_assert_geq(l, 0);
    /* 70 probes at the leader, each naming another address nobody lists. */
    static struct tk_tc c;
    struct tk_hs hs;
    cr_assert_eq(tk_peer_open(&c, &hs, cl.node[l].port + 1, peer_addr_of(l),
                              cl.node[l].peer_secret_file, 5000),
                 0, "the test's own peer link was refused");
    for (int k = 0; k < 70; k++) {
        char bogus[32];
        snprintf(bogus, sizeof bogus, "192.0.2.%d:7401", k + 1);
        cr_assert_eq(send_probe(&c, bogus), 0);
    }
    uint64_t refused = 0;
    for (uint64_t end = tk_test_ms() + 5000; tk_test_ms() < end && refused < 70; usleep(50000))
        refused = metric(l, "ticketing_peer_dials_refused_total");
    cr_assert_geq(refused, 70, "only %llu of 70 probes were refused a dial",
                  (unsigned long long)refused);
    /* The link table has room: new peer connections get their banner. */
    for (int k = 0; k < 5; k++)
        cr_assert(tk_peer_banner(cl.node[l].port + 1, 2000), "connection %d got no banner", k);
    tk_tc_close(&c);

    /* And while probes go on at every member, a follower restarted (a new
     * NodeId) rejoins as usual. */
    static struct prober pr;
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, prober_main, &pr), 0);
    usleep(500 * 1000);
    int f = (l + 1) % 3;
    cr_assert_geq(tk_node_stop(&cl.node[f], SIGKILL, 5000), 0);
    cr_assert_eq(tk_cluster_restart(&cl, f), 0);
    int waited = tk_cluster_wait_ready(&cl, f, 15000);
    atomic_store(&pr.stop, true);
    pthread_join(t, NULL);
    if (waited < 0)
        cl.keep_logs = true;
    cr_assert_geq(waited, 0, "the restarted follower did not rejoin within 15 s of probes");
    cr_assert_gt(atomic_load(&pr.sent), 100, "the prober sent only %d probes",
                 atomic_load(&pr.sent));
    fprintf(stderr, "trust: rejoined in %d ms under %d probes\n", waited, atomic_load(&pr.sent));
}

Test(trust, authenticated_links_cannot_fill_the_table)
{
    int l = tk_cluster_leader(&cl, 5000, 0);
    cr_assert_geq(l, 0);
    /* 60 authenticated inbound links, held open and idle. */
    static struct tk_tc c[60];
    struct tk_hs hs;
    int opened = 0;
    for (int k = 0; k < 60; k++)
        opened += tk_peer_open(&c[k], &hs, cl.node[l].port + 1, peer_addr_of(l),
                               cl.node[l].peer_secret_file, 2000) == 0;
    cr_assert_gt(opened, 30, "only %d links opened", opened);
    /* The table keeps 24 links; the rest are evicted as the others arrive
     * (/metrics is published every few ms). */
    uint64_t want = (uint64_t)opened - 24, evicted = 0;
    for (uint64_t end = tk_test_ms() + 5000; tk_test_ms() < end && evicted < want; usleep(50000))
        evicted = metric(l, "ticketing_peer_links_evicted_total{reason=\"idle\"}");
    cr_assert_geq(evicted, want, "%llu of %d idle links evicted", (unsigned long long)evicted,
                  opened);
    for (int k = 0; k < 5; k++)
        cr_assert(tk_peer_banner(cl.node[l].port + 1, 2000), "connection %d got no banner", k);
    /* The members' own links are not the idle ones: a follower restarted
     * now rejoins, and the leader keeps its quorum meanwhile. */
    int f = (l + 2) % 3;
    cr_assert_geq(tk_node_stop(&cl.node[f], SIGKILL, 5000), 0);
    cr_assert_eq(tk_cluster_restart(&cl, f), 0);
    int waited = tk_cluster_wait_ready(&cl, f, 15000);
    for (int k = 0; k < 60; k++)
        tk_tc_close(&c[k]);
    cr_assert_geq(waited, 0, "the restarted follower did not rejoin within 15 s");
    cr_assert_eq(tk_cluster_leader(&cl, 2000, 0), l, "the leader lost its office");
}

/* ---- a removed identity does not come back ------------------------------------------ */

/* Reads frames from c (what the handshake left in its buffer first) until
 * one of type `want` arrives, within timeout_ms; the others are skipped.
 * Returns 0 with *out decoded (pointing into scratch), or -1. */
static int read_frame(struct tk_tc *c,
                      uint8_t want,
                      struct tk_wire_frame *out,
                      struct tk_wire_scratch *scratch,
                      int timeout_ms)
{
    uint64_t end = tk_test_ms() + (uint64_t)timeout_ms;
    for (;;) {
        size_t flen = 0;
        if (tk_wire_frame_len((const uint8_t *)c->buf, c->len, &flen) != TK_OK)
            return -1;
        if (flen != 0 && flen <= c->len) {
            int rc = tk_wire_decode((const uint8_t *)c->buf, flen, out, scratch);
            bool hit = rc == TK_OK && out->msg.type == want;
            memmove(c->buf, c->buf + flen, c->len - flen);
            c->len -= flen;
            if (hit)
                return 0;
            continue;
        }
        uint64_t now = tk_test_ms();
        if (now >= end || c->len == sizeof(c->buf))
            return -1;
        struct pollfd p = {.fd = c->fd, .events = POLLIN};
        if (poll(&p, 1, (int)(end - now)) <= 0)
            continue;
        ssize_t n = recv(c->fd, c->buf + c->len, sizeof(c->buf) - c->len, 0);
        if (n <= 0)
            return -1;
        c->len += (size_t)n;
    }
}

/* An identity that was replaced (a learner that was paused, say, while a
 * newer process took its address) wakes up and asks to join with the
 * domain it had learned. Were it added again, its replacement would be
 * removed in turn and ask again: a ping-pong. The leader answers that it
 * was removed, and adds nothing. */
Test(trust, a_join_from_a_removed_identity_is_answered_removed)
{
    int l = tk_cluster_leader(&cl, 5000, 0);
    cr_assert_geq(l, 0);
    int f = (l + 1) % 3;
    uint64_t old_id = tk_cluster_node_id(&cl, f);
    cr_assert_geq(tk_node_stop(&cl.node[f], SIGKILL, 5000), 0);
    cr_assert_eq(tk_cluster_restart(&cl, f), 0);
    cr_assert_geq(tk_cluster_wait_ready(&cl, f, 15000), 0, "the restarted member did not rejoin");
    l = tk_cluster_leader(&cl, 5000, 0);
    cr_assert_geq(l, 0);
    static char body[16384];
    char old_hex[17];
    snprintf(old_hex, sizeof old_hex, "%016llx", (unsigned long long)old_id);
    for (int i = 0; i < 50; i++) { /* the old identity is removed after the promotion */
        cr_assert_eq(tk_cluster_status(&cl, l, body, sizeof body), 200);
        if (strstr(body, old_hex) == NULL)
            break;
        usleep(100 * 1000);
    }
    cr_assert_null(strstr(body, old_hex), "the replaced identity is still a member: %s", body);
    cr_assert_eq(tk_cluster_status(&cl, l, body, sizeof body), 200);
    const char *d = strstr(body, "\"domain\":\"");
    cr_assert_not_null(d, "%s", body);
    d += strlen("\"domain\":\"");
    char hi[17] = {0}, lo[17] = {0};
    memcpy(hi, d, 16);
    memcpy(lo, d + 16, 16);
    static struct tk_tc c;
    struct tk_hs hs;
    cr_assert_eq(tk_peer_open(&c, &hs, cl.node[l].port + 1, peer_addr_of(l),
                              cl.node[l].peer_secret_file, 5000),
                 0);
    const char *addr = peer_addr_of(f); /* the address it had */
    static const char client[] = "127.0.0.1:9";
    struct tk_wire_frame j = {.domain_lo = strtoull(lo, NULL, 16),
                              .domain_hi = strtoull(hi, NULL, 16),
                              .msg = {.type = TK_RAFT_MSG_JOIN, .from = old_id}};
    j.msg.join.peer_addr = (struct tk_raft_str){addr, (uint16_t)strlen(addr)};
    j.msg.join.client_addr = (struct tk_raft_str){client, (uint16_t)strlen(client)};
    cr_assert_eq(tk_peer_send(&c, &j), 0);
    static struct tk_wire_scratch scratch;
    struct tk_wire_frame reply;
    cr_assert_eq(read_frame(&c, TK_RAFT_MSG_JOIN_REPLY, &reply, &scratch, 5000), 0,
                 "no JoinReply came");
    cr_assert_eq(reply.msg.join_reply.status, TK_RAFT_JOIN_REMOVED, "status %u",
                 reply.msg.join_reply.status);
    tk_tc_close(&c);
    usleep(300 * 1000);
    cr_assert_eq(tk_cluster_status(&cl, l, body, sizeof body), 200);
    cr_assert_null(strstr(body, old_hex), "the removed identity was added again: %s", body);
}
