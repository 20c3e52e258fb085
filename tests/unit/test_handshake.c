/* core/handshake.c: both variants of the SPEC 2 handshake between two
 * state machines in memory, one line at a time, and every refusal. The
 * peer port (TICKETING-PEER/2): a relayed AUTH, another secret, another
 * TLS session, the earlier protocol, a client port, forged answers. The
 * client port (TICKETING/1): lines and proofs exactly as SPEC 2 writes
 * them (checked against tk_auth_proof), a malformed AUTH, another secret
 * either way, a peer port, an E before the banner, a refusal and a
 * malformed answer. */
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
        cr_assert_gt(strlen(why), 8, "failure %d", f);
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

/* ---- the client port (TICKETING/1) ---------------------------------- */

static const uint8_t CSECRET[] = "client secret of the test cluster";

/* A server and a client of the client port, the client with dsecret. */
static void crun(struct pair *p, const uint8_t *dsecret)
{
    memset(p, 0, sizeof *p);
    p->banner_len = tk_hs_client_listen(&p->listener, CSECRET, sizeof CSECRET - 1, SN, p->banner,
                                        sizeof p->banner);
    p->listener.node_id = 0x1122334455667788ull;
    p->listener.domain[0] = 7;
    p->listener.domain[1] = 9;
    cr_assert_gt(p->banner_len, 1);
    tk_hs_client_dial(&p->dialler, dsecret, strlen((const char *)dsecret), CN);
}

/* One line into h; returns its state. */
static enum tk_hs_state cline(struct tk_hs *h, const char *line)
{
    char out[TK_HS_LINE_MAX];
    size_t n;
    return tk_hs_line(h, line, strlen(line), out, sizeof out, &n);
}

Test(handshake_client, the_lines_and_proofs_are_spec_2s)
{
    struct pair p;
    crun(&p, CSECRET);
    cr_assert(memcmp(p.banner, "TICKETING/1 " SN "\n", p.banner_len) == 0);
    talk(&p);
    cr_assert_eq(p.listener.state, TK_HS_DONE);
    cr_assert_eq(p.dialler.state, TK_HS_DONE);
    char cproof[TK_AUTH_HEX_LEN + 1], sproof[TK_AUTH_HEX_LEN + 1];
    tk_auth_proof(CSECRET, sizeof CSECRET - 1, false, SN, CN, cproof);
    tk_auth_proof(CSECRET, sizeof CSECRET - 1, true, SN, CN, sproof);
    char want[TK_HS_LINE_MAX];
    size_t n = tk_proto_fmt_auth(want, sizeof want, CN, cproof);
    cr_assert_eq(p.auth_len, n);
    cr_assert(memcmp(p.auth, want, n) == 0);
    uint64_t dom[2] = {7, 9};
    n = tk_proto_fmt_ok(want, sizeof want, sproof, 0x1122334455667788ull, dom);
    cr_assert_eq(p.ok_len, n);
    cr_assert(memcmp(p.ok, want, n) == 0);
    cr_assert_eq(p.dialler.node_id, 0x1122334455667788ull);
    cr_assert_eq(p.dialler.domain[1], 9);
}

Test(handshake_client, a_final_cr_is_tolerated)
{
    struct pair p;
    crun(&p, CSECRET);
    char line[TK_HS_LINE_MAX + 1];
    memcpy(line, p.banner, p.banner_len - 1);
    memcpy(line + p.banner_len - 1, "\r", 2);
    cr_assert_eq(cline(&p.dialler, line), TK_HS_OK);
}

Test(handshake_client, a_malformed_auth_is_refused_and_told)
{
    static const char *const bad[] = {
        "AUTH " CN,
        "AUTH " CN " " SN " 127.0.0.1:7401", /* a peer's AUTH on the client port */
        "HELLO",
        "",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct pair p;
        crun(&p, CSECRET);
        cr_assert_eq(cline(&p.listener, bad[i]), TK_HS_FAILED, "%s", bad[i]);
        cr_assert_eq(p.listener.fail, TK_HS_E_AUTH_LINE);
        cr_assert(p.listener.tell);
        cr_assert_str_eq(tk_hs_why(&p.listener), "malformed AUTH line");
    }
}

Test(handshake_client, another_secret_is_refused_both_ways)
{
    struct pair p;
    crun(&p, (const uint8_t *)"not the client secret at all");
    talk(&p);
    cr_assert_eq(p.listener.state, TK_HS_FAILED);
    cr_assert_eq(p.listener.fail, TK_HS_E_CLIENT_PROOF);
    cr_assert(p.listener.tell);
    cr_assert_str_eq(tk_hs_why(&p.listener), "bad proof");

    /* A server without our secret: its OK is not believed. */
    struct pair q;
    crun(&q, CSECRET);
    struct tk_hs fake;
    char banner[TK_HS_LINE_MAX];
    static const uint8_t other[] = "a server that does not know it";
    tk_hs_client_listen(&fake, other, sizeof other - 1, SN, banner, sizeof banner);
    q.listener = fake;
    talk(&q);
    cr_assert_eq(q.listener.state, TK_HS_FAILED); /* it refuses our proof */
    char sproof[TK_AUTH_HEX_LEN + 1], ok[TK_HS_LINE_MAX];
    tk_auth_proof(other, sizeof other - 1, true, SN, CN, sproof);
    uint64_t dom[2] = {1, 2};
    size_t n = tk_proto_fmt_ok(ok, sizeof ok, sproof, 5, dom);
    ok[n - 1] = '\0';
    cr_assert_eq(cline(&q.dialler, ok), TK_HS_FAILED);
    cr_assert_eq(q.dialler.fail, TK_HS_E_SERVER_PROOF);
    cr_assert_str_eq(tk_hs_why(&q.dialler), "wrong server proof");
    cr_assert_eq(q.dialler.node_id, 0); /* nothing it said was taken */
}

Test(handshake_client, a_peer_port_or_another_service_is_not_a_client_port)
{
    static const char *const bad[] = {"TICKETING-PEER/2 " SN, "TICKETING-PEER/1 " SN,
                                      "TICKETING/2 " SN, "SSH-2.0-OpenSSH_9.2", "E"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct pair p;
        crun(&p, CSECRET);
        cr_assert_eq(cline(&p.dialler, bad[i]), TK_HS_FAILED, "%s", bad[i]);
        cr_assert_eq(p.dialler.fail, TK_HS_E_CLIENT_BANNER, "%s", bad[i]);
        cr_assert(!p.dialler.tell);
        cr_assert_str_eq(tk_hs_why(&p.dialler), "not a Ticketing client port");
    }
}

Test(handshake_client, an_e_before_the_banner_is_a_refusal)
{
    struct pair p;
    crun(&p, CSECRET);
    cr_assert_eq(cline(&p.dialler, "E - overload"), TK_HS_FAILED);
    cr_assert_eq(p.dialler.fail, TK_HS_E_EARLY_E);
    cr_assert_str_eq(tk_hs_why(&p.dialler), "refused (E before the banner)");
}

Test(handshake_client, a_refusal_and_a_malformed_answer_are_told_apart)
{
    static const char *const answers[] = {"E - auth", "E - auth ", "E - overload", "OK nope", ""};
    static const uint8_t want[] = {TK_HS_E_AUTH_REFUSED, TK_HS_E_ANSWER, TK_HS_E_ANSWER,
                                   TK_HS_E_ANSWER, TK_HS_E_ANSWER};
    for (size_t i = 0; i < sizeof answers / sizeof answers[0]; i++) {
        struct pair p;
        crun(&p, CSECRET);
        cr_assert_eq(cline(&p.dialler, "TICKETING/1 " SN), TK_HS_OK);
        cr_assert_eq(cline(&p.dialler, answers[i]), TK_HS_FAILED);
        cr_assert_eq(p.dialler.fail, want[i], "%s", answers[i]);
    }
    struct pair p;
    crun(&p, CSECRET);
    cline(&p.dialler, "TICKETING/1 " SN);
    cline(&p.dialler, "E - auth");
    cr_assert_str_eq(tk_hs_why(&p.dialler), "authentication refused");
    crun(&p, CSECRET);
    cline(&p.dialler, "TICKETING/1 " SN);
    cline(&p.dialler, "OK nope");
    cr_assert_str_eq(tk_hs_why(&p.dialler), "bad handshake answer");
}

Test(handshake_client, the_two_variants_do_not_mix)
{
    /* A peer dialler's proof on the client port, with the same secret:
     * another label, so refused even with the right secret. */
    struct tk_hs peer, server;
    char line[TK_HS_LINE_MAX], banner[TK_HS_LINE_MAX];
    size_t n;
    tk_hs_client_listen(&server, CSECRET, sizeof CSECRET - 1, SN, banner, sizeof banner);
    tk_hs_dial(&peer, CSECRET, sizeof CSECRET - 1, "127.0.0.1:7401", CN);
    tk_hs_line(&peer, "TICKETING-PEER/2 " SN, strlen("TICKETING-PEER/2 " SN), line, sizeof line,
               &n);
    const char *cn, *cp, *to;
    size_t to_len;
    cr_assert(tk_proto_parse_peer_auth(line, n - 1, &cn, &cp, &to, &to_len));
    char auth[TK_HS_LINE_MAX];
    n = tk_proto_fmt_auth(auth, sizeof auth, cn, cp);
    auth[n - 1] = '\0';
    cr_assert_eq(cline(&server, auth), TK_HS_FAILED);
    cr_assert_eq(server.fail, TK_HS_E_CLIENT_PROOF);
}

Test(handshake_client, a_mac_on_the_client_port_is_a_bug, .signal = SIGABRT)
{
    struct pair p;
    crun(&p, CSECRET);
    talk(&p);
    uint8_t m[TK_AUTH_MAC_LEN];
    tk_hs_mac(&p.dialler, "remove", "x", 1, m);
}

Test(handshake_client, a_channel_binding_on_the_client_port_is_a_bug, .signal = SIGABRT)
{
    struct tk_hs h;
    uint8_t b[TK_AUTH_MAC_LEN] = {0};
    tk_hs_client_dial(&h, CSECRET, sizeof CSECRET - 1, CN);
    tk_hs_bind(&h, b);
}
