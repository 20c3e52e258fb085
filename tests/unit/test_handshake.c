/* core/handshake.c: the peer handshake (TICKETING-PEER/2) between two
 * state machines in memory, one line at a time, and every refusal: a
 * relayed AUTH, another secret, another TLS session, the earlier protocol,
 * a client port, forged answers. */
#include <criterion/criterion.h>
#include <signal.h>
#include <string.h>

#include "core/handshake.h"
#include "core/proto.h"

static const uint8_t SECRET[] = "peer secret of the test cluster";
static const uint8_t OTHER[] = "another cluster's peer secret!!";
#define SN "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define CN "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"

struct pair {
    struct tk_hs dialler, listener;
    char banner[TK_HS_LINE_MAX], auth[TK_HS_LINE_MAX], ok[TK_HS_LINE_MAX];
    size_t banner_len, auth_len, ok_len;
};

/* A listener at self and a dialler that meant to reach to. */
static void run(struct pair *p, const uint8_t *dsecret, const char *to, const char *self)
{
    memset(p, 0, sizeof *p);
    p->banner_len = tk_hs_listen(&p->listener, SECRET, sizeof SECRET - 1, self, SN, p->banner,
                                 sizeof p->banner);
    p->listener.node_id = 0x1122334455667788ull;
    p->listener.domain[0] = 7;
    p->listener.domain[1] = 9;
    cr_assert_gt(p->banner_len, 1);
    cr_assert_eq(p->banner[p->banner_len - 1], '\n');
    tk_hs_dial(&p->dialler, dsecret, strlen((const char *)dsecret), to, CN);
}

/* The three lines, each side reading what the other wrote. */
static void talk(struct pair *p)
{
    cr_assert_eq(tk_hs_line(&p->dialler, p->banner, p->banner_len - 1, p->auth, sizeof p->auth,
                            &p->auth_len),
                 TK_HS_OK);
    cr_assert_gt(p->auth_len, 0);
    tk_hs_line(&p->listener, p->auth, p->auth_len - 1, p->ok, sizeof p->ok, &p->ok_len);
    if (p->listener.state == TK_HS_DONE)
        cr_assert_eq(tk_hs_line(&p->dialler, p->ok, p->ok_len - 1, p->banner, sizeof p->banner,
                                &p->banner_len),
                     p->dialler.state);
}

Test(handshake, the_auth_names_the_address_and_both_finish)
{
    struct pair p;
    run(&p, SECRET, "node-1.peers:7401", "node-1.peers:7401");
    cr_assert(memcmp(p.banner, "TICKETING-PEER/2 " SN "\n", p.banner_len) == 0);
    talk(&p);
    const char *cn, *cp, *to;
    size_t to_len;
    cr_assert(tk_proto_parse_peer_auth(p.auth, p.auth_len - 1, &cn, &cp, &to, &to_len));
    cr_assert_eq(to_len, strlen("node-1.peers:7401"));
    cr_assert(memcmp(to, "node-1.peers:7401", to_len) == 0);
    cr_assert_eq(p.listener.state, TK_HS_DONE);
    cr_assert_eq(p.dialler.state, TK_HS_DONE);
    cr_assert_eq(p.dialler.node_id, 0x1122334455667788ull);
    cr_assert_eq(p.dialler.domain[0], 7);
    cr_assert_eq(p.dialler.domain[1], 9);
}

Test(handshake, host_names_compare_without_case)
{
    struct pair p;
    run(&p, SECRET, "Node-1.Peers:7401", "node-1.peers:7401");
    talk(&p);
    cr_assert_eq(p.dialler.state, TK_HS_DONE);
}

/* The relay: the dialler meant to reach the relay, which hands its AUTH
 * line to the real node. The proof is good, the address is not this
 * node's: refused, with E - auth, and the dialler learns nothing. */
Test(handshake, an_auth_relayed_from_another_address_is_refused)
{
    struct pair p;
    run(&p, SECRET, "127.0.0.1:7412", "127.0.0.1:7401");
    talk(&p);
    cr_assert_eq(p.listener.state, TK_HS_FAILED);
    cr_assert_eq(p.listener.fail, TK_HS_E_TARGET);
    cr_assert(p.listener.tell, "the dialler is told");
    cr_assert_eq(p.ok_len, 0, "no OK line, so no server proof to carry back");
    cr_assert(strstr(tk_hs_why(&p.listener), "another address") != NULL);
}

/* The relay rewrites the address to the real node's: the proof no
 * longer matches. */
Test(handshake, an_auth_with_its_address_rewritten_is_refused)
{
    struct pair p;
    run(&p, SECRET, "127.0.0.1:7412", "127.0.0.1:7401");
    cr_assert_eq(
        tk_hs_line(&p.dialler, p.banner, p.banner_len - 1, p.auth, sizeof p.auth, &p.auth_len),
        TK_HS_OK);
    char *at = strstr(p.auth, "127.0.0.1:7412");
    cr_assert_not_null(at);
    memcpy(at, "127.0.0.1:7401", 14);
    tk_hs_line(&p.listener, p.auth, p.auth_len - 1, p.ok, sizeof p.ok, &p.ok_len);
    cr_assert_eq(p.listener.fail, TK_HS_E_PROOF);
}

Test(handshake, another_secret_is_refused_both_ways)
{
    struct pair p;
    run(&p, OTHER, "127.0.0.1:7401", "127.0.0.1:7401");
    talk(&p);
    cr_assert_eq(p.listener.fail, TK_HS_E_PROOF);
    cr_assert(p.listener.tell);
    /* And an OK whose proof was not made with this secret fails the
     * dialler, whatever the rest of the line says. */
    run(&p, SECRET, "127.0.0.1:7401", "127.0.0.1:7401");
    tk_hs_line(&p.dialler, p.banner, p.banner_len - 1, p.auth, sizeof p.auth, &p.auth_len);
    char fake[TK_HS_LINE_MAX];
    uint64_t dom[2] = {1, 2};
    size_t k = tk_proto_fmt_ok(fake, sizeof fake, CN, 5, dom);
    cr_assert_eq(tk_hs_line(&p.dialler, fake, k - 1, p.ok, sizeof p.ok, &p.ok_len), TK_HS_FAILED);
    cr_assert_eq(p.dialler.fail, TK_HS_E_SPROOF);
}

/* TLS: the proofs cover the channel binding. A relay between two TLS
 * sessions has two different bindings; a binding on one side only (a
 * relay that terminates TLS towards one end) fails the same way. */
Test(handshake, another_tls_session_is_refused)
{
    uint8_t b1[TK_AUTH_MAC_LEN], b2[TK_AUTH_MAC_LEN];
    memset(b1, 1, sizeof b1);
    memset(b2, 2, sizeof b2);
    struct pair p;
    run(&p, SECRET, "127.0.0.1:7401", "127.0.0.1:7401");
    tk_hs_bind(&p.dialler, b1);
    tk_hs_bind(&p.listener, b2);
    talk(&p);
    cr_assert_eq(p.listener.fail, TK_HS_E_PROOF);

    run(&p, SECRET, "127.0.0.1:7401", "127.0.0.1:7401");
    tk_hs_bind(&p.listener, b1);
    talk(&p);
    cr_assert_eq(p.listener.fail, TK_HS_E_PROOF);

    run(&p, SECRET, "127.0.0.1:7401", "127.0.0.1:7401");
    tk_hs_bind(&p.dialler, b1);
    tk_hs_bind(&p.listener, b1);
    talk(&p);
    cr_assert_eq(p.dialler.state, TK_HS_DONE, "one session: both bindings agree");
}

Test(handshake, the_banner_of_the_earlier_protocol_is_named)
{
    struct tk_hs d;
    char out[TK_HS_LINE_MAX];
    size_t n;
    static const char v1[] = "TICKETING-PEER/1 " SN;
    tk_hs_dial(&d, SECRET, sizeof SECRET - 1, "a:1", CN);
    cr_assert_eq(tk_hs_line(&d, v1, sizeof v1 - 1, out, sizeof out, &n), TK_HS_FAILED);
    cr_assert_eq(d.fail, TK_HS_E_OLD_BANNER);
    cr_assert_eq(n, 0);
    cr_assert_not(d.tell, "a dialler tells nobody");

    static const char client[] = "TICKETING/1 " SN;
    tk_hs_dial(&d, SECRET, sizeof SECRET - 1, "a:1", CN);
    tk_hs_line(&d, client, sizeof client - 1, out, sizeof out, &n);
    cr_assert_eq(d.fail, TK_HS_E_CLIENT_PORT);

    static const char junk[] = "SSH-2.0-OpenSSH_9.2";
    tk_hs_dial(&d, SECRET, sizeof SECRET - 1, "a:1", CN);
    tk_hs_line(&d, junk, sizeof junk - 1, out, sizeof out, &n);
    cr_assert_eq(d.fail, TK_HS_E_BANNER);
}

Test(handshake, the_auth_of_the_earlier_protocol_is_named)
{
    struct pair p;
    run(&p, SECRET, "127.0.0.1:7401", "127.0.0.1:7401");
    char v1[TK_HS_LINE_MAX];
    size_t n = tk_proto_fmt_auth(v1, sizeof v1, CN, SN);
    tk_hs_line(&p.listener, v1, n - 1, p.ok, sizeof p.ok, &p.ok_len);
    cr_assert_eq(p.listener.fail, TK_HS_E_OLD_AUTH);
    cr_assert(p.listener.tell);

    run(&p, SECRET, "127.0.0.1:7401", "127.0.0.1:7401");
    static const char bad[] = "AUTH " CN " " SN " two words";
    tk_hs_line(&p.listener, bad, sizeof bad - 1, p.ok, sizeof p.ok, &p.ok_len);
    cr_assert_eq(p.listener.fail, TK_HS_E_AUTH_LINE);
}

Test(handshake, a_refusal_and_a_malformed_answer_are_told_apart)
{
    struct pair p;
    run(&p, SECRET, "127.0.0.1:7401", "127.0.0.1:7401");
    tk_hs_line(&p.dialler, p.banner, p.banner_len - 1, p.auth, sizeof p.auth, &p.auth_len);
    static const char refused[] = "E - auth";
    tk_hs_line(&p.dialler, refused, sizeof refused - 1, p.ok, sizeof p.ok, &p.ok_len);
    cr_assert_eq(p.dialler.fail, TK_HS_E_REFUSED);

    run(&p, SECRET, "127.0.0.1:7401", "127.0.0.1:7401");
    tk_hs_line(&p.dialler, p.banner, p.banner_len - 1, p.auth, sizeof p.auth, &p.auth_len);
    static const char odd[] = "OK nope";
    tk_hs_line(&p.dialler, odd, sizeof odd - 1, p.ok, sizeof p.ok, &p.ok_len);
    cr_assert_eq(p.dialler.fail, TK_HS_E_OK_LINE);
}

/* Every failure has its own sentence. */
Test(handshake, every_failure_is_named)
{
    struct tk_hs h = {0};
    for (int f = TK_HS_E_BANNER; f < TK_HS_FAIL_COUNT; f++) {
        h.fail = (uint8_t)f;
        const char *why = tk_hs_why(&h);
        cr_assert_gt(strlen(why), 10, "failure %d", f);
        for (int g = TK_HS_E_BANNER; g < f; g++) {
            struct tk_hs o = {.fail = (uint8_t)g};
            cr_assert_str_neq(why, tk_hs_why(&o));
        }
    }
}

/* A reply MAC: the same on both ends of one handshake, another for other
 * data, another label, or another handshake (other nonces). */
Test(handshake, reply_macs_belong_to_one_handshake)
{
    struct pair p;
    run(&p, SECRET, "127.0.0.1:7401", "127.0.0.1:7401");
    talk(&p);
    uint8_t a[TK_AUTH_MAC_LEN], b[TK_AUTH_MAC_LEN], c[TK_AUTH_MAC_LEN], d[TK_AUTH_MAC_LEN];
    tk_hs_mac(&p.listener, "remove", "1 00ab", 6, a);
    tk_hs_mac(&p.dialler, "remove", "1 00ab", 6, b);
    cr_assert(memcmp(a, b, sizeof a) == 0);
    tk_hs_mac(&p.dialler, "remove", "2 00ab", 6, c);
    cr_assert(memcmp(a, c, sizeof a) != 0);
    tk_hs_mac(&p.dialler, "join", "1 00ab", 6, c);
    cr_assert(memcmp(a, c, sizeof a) != 0);
    struct pair q;
    run(&q, SECRET, "127.0.0.1:7401", "127.0.0.1:7401");
    memset(q.listener.snonce, 'c', TK_AUTH_HEX_LEN); /* another connection's nonce */
    q.banner_len = tk_proto_fmt_banner(q.banner, sizeof q.banner, true, q.listener.snonce);
    talk(&q);
    tk_hs_mac(&q.dialler, "remove", "1 00ab", 6, d);
    cr_assert(memcmp(a, d, sizeof a) != 0);
}

Test(handshake, a_mac_before_the_end_is_a_bug, .signal = SIGABRT)
{
    struct tk_hs h;
    uint8_t m[TK_AUTH_MAC_LEN];
    tk_hs_dial(&h, SECRET, sizeof SECRET - 1, "a:1", CN);
    tk_hs_mac(&h, "remove", "x", 1, m);
}
