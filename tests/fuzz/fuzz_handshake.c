/* Fuzz target "handshake": the lines of the SPEC 2 handshake, both sides.
 *
 * The input is cut into lines at '\n' (each line in an exact-size heap
 * buffer), and every line goes through every handshake parser:
 *   tk_proto_parse_banner(client), tk_proto_parse_banner(peer) - what a
 *     client or a peer reads first from a server;
 *   tk_proto_parse_auth - what the client port reads;
 *   tk_proto_parse_peer_auth - what the peer port reads (TICKETING-PEER/2);
 *   tk_proto_parse_ok - what a client or a peer reads back;
 * and then through the handshake's state machine (core/handshake.c), both
 * variants (the client port's and the peer port's), in each state that
 * reads a line: a dialler waiting for the banner, a dialler waiting for
 * OK, a listener waiting for AUTH, the whole input also fed in order to
 * one dialler and one listener of each variant.
 * Checked: accepted lines format back to exactly themselves (less a final
 * "\r") with tk_proto_fmt_banner/auth/ok; returned pointers lie inside the
 * line with their 64 hex chars; the proofs feed tk_auth_proof() and
 * tk_auth_equal() as the servers do (ASan checks those reads); a line is
 * never both a client and a peer banner, nor two kinds of line at once;
 * the state machine only moves forward, answers with at most one line
 * ending in "\n", and never finishes a listener or an OK without the
 * secret (random input cannot make a proof).
 */
#include "tests/fuzz/fuzz.h"

#include "core/auth.h"
#include "core/handshake.h"
#include "core/proto.h"

static const uint8_t SECRET[] = "fuzzing-secret-0123456789";

static bool is_hex64(const char *s)
{
    for (size_t i = 0; i < TK_AUTH_HEX_LEN; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return true;
}

static void same_line(const char *out, size_t n, const char *line, size_t len)
{
    size_t bare = len > 0 && line[len - 1] == '\r' ? len - 1 : len;
    FUZZ_CHECK(n == bare + 1);
    FUZZ_CHECK(out[bare] == '\n');
    FUZZ_CHECK(memcmp(out, line, bare) == 0);
}

static void one_line(const char *line, size_t len)
{
    char out[TK_HS_LINE_MAX];
    char proof[TK_AUTH_HEX_LEN + 1] = {0};
    int kinds = 0;
    for (int peer = 0; peer <= 1; peer++) {
        const char *snonce = NULL;
        if (!tk_proto_parse_banner(line, len, peer, &snonce))
            continue;
        kinds++;
        FUZZ_CHECK(fuzz_inside(snonce, TK_AUTH_HEX_LEN, line, len));
        FUZZ_CHECK(is_hex64(snonce));
        same_line(out, tk_proto_fmt_banner(out, sizeof(out), peer, snonce), line, len);
        /* The client answers with a proof over the server's nonce. */
        tk_auth_proof(SECRET, sizeof(SECRET) - 1, false, snonce, snonce, proof);
    }

    const char *cnonce = NULL, *cproof = NULL;
    if (tk_proto_parse_auth(line, len, &cnonce, &cproof)) {
        kinds++;
        FUZZ_CHECK(fuzz_inside(cnonce, TK_AUTH_HEX_LEN, line, len));
        FUZZ_CHECK(fuzz_inside(cproof, TK_AUTH_HEX_LEN, line, len));
        FUZZ_CHECK(is_hex64(cnonce) && is_hex64(cproof));
        same_line(out, tk_proto_fmt_auth(out, sizeof(out), cnonce, cproof), line, len);
        /* The proofs a client-port listener checks and makes. */
        tk_auth_proof(SECRET, sizeof(SECRET) - 1, false, cnonce, cnonce, proof);
        (void)tk_auth_equal(proof, cproof, TK_AUTH_HEX_LEN);
        tk_auth_proof(SECRET, sizeof(SECRET) - 1, true, cnonce, cnonce, proof);
    }

    const char *to = NULL;
    size_t to_len = 0;
    if (tk_proto_parse_peer_auth(line, len, &cnonce, &cproof, &to, &to_len)) {
        kinds++;
        FUZZ_CHECK(fuzz_inside(cnonce, TK_AUTH_HEX_LEN, line, len));
        FUZZ_CHECK(fuzz_inside(to, to_len, line, len));
        FUZZ_CHECK(to_len >= 1 && to_len <= TK_PROTO_PEER_ADDR_MAX);
        same_line(out, tk_proto_fmt_peer_auth(out, sizeof(out), cnonce, cproof, to, to_len), line,
                  len);
    }

    const char *sproof = NULL;
    uint64_t node_id = 0, domain[2] = {0, 0};
    if (tk_proto_parse_ok(line, len, &sproof, &node_id, domain)) {
        kinds++;
        FUZZ_CHECK(fuzz_inside(sproof, TK_AUTH_HEX_LEN, line, len));
        FUZZ_CHECK(is_hex64(sproof));
        same_line(out, tk_proto_fmt_ok(out, sizeof(out), sproof, node_id, domain), line, len);
        (void)tk_auth_equal(proof, sproof, TK_AUTH_HEX_LEN);
    }
    FUZZ_CHECK(kinds <= 1);
}

/* One line into h (a state that reads lines); the state machine's own
 * promises checked. */
static void hs_step(struct tk_hs *h, const char *line, size_t len)
{
    if (h->state == TK_HS_DONE || h->state == TK_HS_FAILED)
        return;
    uint8_t before = h->state;
    char out[TK_HS_LINE_MAX];
    size_t n = 99999;
    enum tk_hs_state st = tk_hs_line(h, line, len, out, sizeof(out), &n);
    FUZZ_CHECK(st == h->state);
    FUZZ_CHECK(n == 0 || (n <= sizeof(out) && out[n - 1] == '\n'));
    FUZZ_CHECK(memchr(out, '\n', n > 0 ? n - 1 : 0) == NULL);
    /* Only a banner moves a dialler on without a proof; nothing random
     * finishes a handshake. */
    FUZZ_CHECK(st != TK_HS_DONE);
    FUZZ_CHECK(st == TK_HS_FAILED || (before == TK_HS_BANNER && st == TK_HS_OK));
    if (st == TK_HS_FAILED)
        FUZZ_CHECK(tk_hs_why(h)[0] != '\0');
}

#define HEX_Z "0000000000000000000000000000000000000000000000000000000000000000"

/* The three states of one variant (client: the client port's). */
static void hs_fresh(struct tk_hs *dial_banner,
                     struct tk_hs *dial_ok,
                     struct tk_hs *listen,
                     bool client)
{
    char out[TK_HS_LINE_MAX];
    size_t n;
    static const char peer_banner[] = "TICKETING-PEER/2 " HEX_Z;
    static const char client_banner[] = "TICKETING/1 " HEX_Z;
    if (client) {
        tk_hs_client_dial(dial_banner, SECRET, sizeof(SECRET) - 1, HEX_Z);
        tk_hs_client_dial(dial_ok, SECRET, sizeof(SECRET) - 1, HEX_Z);
        tk_hs_line(dial_ok, client_banner, sizeof(client_banner) - 1, out, sizeof(out), &n);
        tk_hs_client_listen(listen, SECRET, sizeof(SECRET) - 1, HEX_Z, out, sizeof(out));
    } else {
        tk_hs_dial(dial_banner, SECRET, sizeof(SECRET) - 1, "node-1:7401", HEX_Z);
        tk_hs_dial(dial_ok, SECRET, sizeof(SECRET) - 1, "node-1:7401", HEX_Z);
        tk_hs_line(dial_ok, peer_banner, sizeof(peer_banner) - 1, out, sizeof(out), &n);
        tk_hs_listen(listen, SECRET, sizeof(SECRET) - 1, "node-1:7401", HEX_Z, out, sizeof(out));
    }
    FUZZ_CHECK(dial_ok->state == TK_HS_OK);
    FUZZ_CHECK(dial_banner->client == client && listen->client == client);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct tk_hs dialler[2], listener[2], d, o, l;
    for (int v = 0; v <= 1; v++)
        hs_fresh(&dialler[v], &o, &listener[v], v);
    size_t pos = 0;
    while (pos <= size) {
        const uint8_t *nl = pos < size ? memchr(data + pos, '\n', size - pos) : NULL;
        size_t len = nl != NULL ? (size_t)(nl - (data + pos)) : size - pos;
        char *line = fuzz_dup(data + pos, len);
        one_line(line, len);
        for (int v = 0; v <= 1; v++) {
            hs_fresh(&d, &o, &l, v); /* this line alone, in each state */
            hs_step(&d, line, len);
            hs_step(&o, line, len);
            hs_step(&l, line, len);
            hs_step(&dialler[v], line, len); /* and the input in order */
            hs_step(&listener[v], line, len);
        }
        free(line);
        pos += len + 1;
    }
    return 0;
}
