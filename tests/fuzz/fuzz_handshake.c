/* Fuzz target "handshake": the lines of the SPEC 2 handshake, both sides.
 *
 * The input is cut into lines at '\n' (each line in an exact-size heap
 * buffer), and every line goes through every handshake parser:
 *   tk_proto_parse_banner(client), tk_proto_parse_banner(peer) - what a
 *     client or a peer reads first from a server;
 *   tk_proto_parse_auth - what a server (client port or peer port) reads;
 *   tk_proto_parse_ok - what a client or a peer reads back.
 * Checked: accepted lines format back to exactly themselves (less a final
 * "\r") with tk_proto_fmt_banner/auth/ok; returned pointers lie inside the
 * line with their 64 hex chars; the proofs feed tk_auth_proof() and
 * tk_auth_equal() as the servers do (ASan checks those reads); a line is
 * never both a client and a peer banner, nor two kinds of line at once.
 */
#include "tests/fuzz/fuzz.h"

#include "core/auth.h"
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
    char out[256];
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
        /* net/conn.c handle_auth_line(): proof check, then the server proof. */
        tk_auth_proof(SECRET, sizeof(SECRET) - 1, false, cnonce, cnonce, proof);
        (void)tk_auth_equal(proof, cproof, TK_AUTH_HEX_LEN);
        tk_auth_proof(SECRET, sizeof(SECRET) - 1, true, cnonce, cnonce, proof);
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t pos = 0;
    while (pos <= size) {
        const uint8_t *nl = pos < size ? memchr(data + pos, '\n', size - pos) : NULL;
        size_t len = nl != NULL ? (size_t)(nl - (data + pos)) : size - pos;
        char *line = fuzz_dup(data + pos, len);
        one_line(line, len);
        free(line);
        pos += len + 1;
    }
    return 0;
}
