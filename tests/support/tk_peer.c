/* Test support: a test's own peer link (tests/support/tk_peer.h). */
#include "tests/support/tk_peer.h"

#include <string.h>

#include "core/proto.h"

int tk_peer_open(struct tk_tc *c,
                 struct tk_hs *hs,
                 uint32_t port,
                 const char *to,
                 const char *secret_file,
                 int timeout_ms)
{
    static uint8_t secret[TK_AUTH_SECRET_MAX];
    size_t secret_len;
    char cnonce[TK_AUTH_HEX_LEN + 1], line[TK_HS_LINE_MAX], out[TK_HS_LINE_MAX];
    if (tk_auth_load_secret(secret_file, secret, sizeof secret, &secret_len) != TK_OK ||
        tk_auth_nonce(cnonce) != TK_OK || tk_tc_connect(c, port) != 0)
        return -1;
    tk_hs_dial(hs, secret, secret_len, to, cnonce);
    while (hs->state != TK_HS_DONE && hs->state != TK_HS_FAILED) {
        int n = tk_tc_line(c, line, sizeof line, timeout_ms);
        size_t k = 0;
        if (n < 0) {
            tk_tc_close(c);
            return -1;
        }
        tk_hs_line(hs, line, (size_t)n, out, sizeof out, &k);
        if (k > 0 && tk_tc_send_raw(c, out, k) != 0) {
            tk_tc_close(c);
            return -1;
        }
    }
    if (hs->state == TK_HS_FAILED) {
        tk_tc_close(c);
        return -2;
    }
    return 0;
}

int tk_peer_send(struct tk_tc *c, const struct tk_wire_frame *f)
{
    uint8_t buf[4096];
    size_t n = tk_wire_encode(f, buf, sizeof buf);
    return n == 0 ? -1 : tk_tc_send_raw(c, buf, n);
}

bool tk_peer_banner(uint32_t port, int timeout_ms)
{
    static struct tk_tc c;
    char line[TK_HS_LINE_MAX];
    const char *sn;
    if (tk_tc_connect(&c, port) != 0)
        return false;
    int n = tk_tc_line(&c, line, sizeof line, timeout_ms);
    tk_tc_close(&c);
    return n > 0 && tk_proto_parse_banner(line, (size_t)n, true, &sn);
}
