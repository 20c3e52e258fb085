/* The SPEC 2 handshake as a pure state machine (core/handshake.h): the
 * client port's and the peer port's variants share every step and differ
 * only in their lines and proofs. */
#include "core/handshake.h"

#include <stdio.h>
#include <string.h>

#include "core/proto.h"

#define HS_LABEL "ticketing-peer/2 "
#define HS_NO_BINDING "-"
/* The banner of the earlier peer protocol and of the client port, named
 * when met rather than called "unexpected". */
#define HS_OLD_BANNER "TICKETING-PEER/1 "
#define HS_CLIENT_BANNER "TICKETING/1 "

static const char *const hs_fail_text[] = {
#define TK_HS_FAIL_TEXT(name, text) [name] = text,
    TK_HS_FAIL_MAP(TK_HS_FAIL_TEXT)
#undef TK_HS_FAIL_TEXT
};

/* The MAC of one of the handshake's statements: HMAC(secret, "ticketing-
 * peer/2 <what> <snonce> <cnonce> <to> <binding>" + data). */
static void hs_hmac(const struct tk_hs *h,
                    const char *what,
                    const void *data,
                    size_t len,
                    uint8_t out[TK_AUTH_MAC_LEN])
{
    char msg[TK_HS_LINE_MAX + 64];
    int n = snprintf(msg, sizeof msg, HS_LABEL "%s %s %s %s %s", what, h->snonce, h->cnonce, h->to,
                     h->binding);
    TK_ASSERT(n > 0 && (size_t)n < sizeof msg);
    if (len == 0) {
        tk_auth_hmac_sha256(h->secret, h->secret_len, msg, (size_t)n, out);
        return;
    }
    /* data follows after one space; it is short (a reply's fields). */
    char all[sizeof msg + TK_HS_LINE_MAX];
    TK_ASSERT(len <= TK_HS_LINE_MAX);
    memcpy(all, msg, (size_t)n);
    all[n] = ' ';
    memcpy(all + n + 1, data, len);
    tk_auth_hmac_sha256(h->secret, h->secret_len, all, (size_t)n + 1 + len, out);
}

static void hs_proof(const struct tk_hs *h, bool server, char out[TK_AUTH_HEX_LEN + 1])
{
    if (h->client) {
        tk_auth_proof(h->secret, h->secret_len, server, h->snonce, h->cnonce, out);
        return;
    }
    uint8_t mac[TK_AUTH_MAC_LEN];
    hs_hmac(h, server ? "server" : "client", NULL, 0, mac);
    tk_auth_hex(mac, sizeof mac, out);
}

static enum tk_hs_state hs_fail(struct tk_hs *h, enum tk_hs_fail why, bool tell)
{
    h->state = TK_HS_FAILED;
    h->fail = (uint8_t)why;
    h->tell = tell;
    return TK_HS_FAILED;
}

static bool hs_starts(const char *line, size_t len, const char *lit)
{
    size_t n = strlen(lit);
    return len >= n && memcmp(line, lit, n) == 0;
}

/* ASCII case-insensitive: host names are (the port is digits). */
static bool hs_same_addr(const char *a, size_t alen, const char *b)
{
    if (alen != strlen(b))
        return false;
    for (size_t i = 0; i < alen; i++) {
        unsigned char x = (unsigned char)a[i], y = (unsigned char)b[i];
        if (x >= 'A' && x <= 'Z')
            x = (unsigned char)(x - 'A' + 'a');
        if (y >= 'A' && y <= 'Z')
            y = (unsigned char)(y - 'A' + 'a');
        if (x != y)
            return false;
    }
    return true;
}

/* to: the peer address (the peer port), or NULL for the client port. */
static void hs_init(struct tk_hs *h, const uint8_t *secret, size_t secret_len, const char *to)
{
    TK_ASSERT(secret != NULL);
    memset(h, 0, sizeof *h);
    h->secret = secret;
    h->secret_len = secret_len;
    h->client = to == NULL;
    if (to) {
        size_t n = strlen(to);
        TK_ASSERT(n >= 1 && n <= TK_HS_ADDR_MAX);
        memcpy(h->to, to, n + 1);
    }
    memcpy(h->binding, HS_NO_BINDING, sizeof HS_NO_BINDING);
}

static void hs_dial(struct tk_hs *h,
                    const uint8_t *secret,
                    size_t secret_len,
                    const char *to,
                    const char cnonce[TK_AUTH_HEX_LEN + 1])
{
    TK_ASSERT(tk_auth_is_hex64(cnonce, TK_AUTH_HEX_LEN));
    hs_init(h, secret, secret_len, to);
    memcpy(h->cnonce, cnonce, TK_AUTH_HEX_LEN + 1);
    h->state = TK_HS_BANNER;
}

static size_t hs_listen(struct tk_hs *h,
                        const uint8_t *secret,
                        size_t secret_len,
                        const char *self,
                        const char snonce[TK_AUTH_HEX_LEN + 1],
                        char *out,
                        size_t cap)
{
    TK_ASSERT(tk_auth_is_hex64(snonce, TK_AUTH_HEX_LEN));
    hs_init(h, secret, secret_len, self);
    memcpy(h->snonce, snonce, TK_AUTH_HEX_LEN + 1);
    h->state = TK_HS_AUTH;
    return tk_proto_fmt_banner(out, cap, !h->client, h->snonce);
}

void tk_hs_client_dial(struct tk_hs *h,
                       const uint8_t *secret,
                       size_t secret_len,
                       const char cnonce[TK_AUTH_HEX_LEN + 1])
{
    hs_dial(h, secret, secret_len, NULL, cnonce);
}

size_t tk_hs_client_listen(struct tk_hs *h,
                           const uint8_t *secret,
                           size_t secret_len,
                           const char snonce[TK_AUTH_HEX_LEN + 1],
                           char *out,
                           size_t cap)
{
    return hs_listen(h, secret, secret_len, NULL, snonce, out, cap);
}

void tk_hs_dial(struct tk_hs *h,
                const uint8_t *secret,
                size_t secret_len,
                const char *to,
                const char cnonce[TK_AUTH_HEX_LEN + 1])
{
    TK_ASSERT(to != NULL);
    hs_dial(h, secret, secret_len, to, cnonce);
}

size_t tk_hs_listen(struct tk_hs *h,
                    const uint8_t *secret,
                    size_t secret_len,
                    const char *self,
                    const char snonce[TK_AUTH_HEX_LEN + 1],
                    char *out,
                    size_t cap)
{
    TK_ASSERT(self != NULL);
    return hs_listen(h, secret, secret_len, self, snonce, out, cap);
}

void tk_hs_bind(struct tk_hs *h, const uint8_t binding[TK_AUTH_MAC_LEN])
{
    TK_ASSERT(!h->client);
    TK_ASSERT(h->state == TK_HS_BANNER || h->state == TK_HS_AUTH);
    tk_auth_hex(binding, TK_AUTH_MAC_LEN, h->binding);
}

/* Dialler: the banner; answers AUTH. */
static enum tk_hs_state hs_banner(struct tk_hs *h,
                                  const char *line,
                                  size_t len,
                                  char *out,
                                  size_t cap,
                                  size_t *out_len)
{
    const char *sn;
    if (!tk_proto_parse_banner(line, len, !h->client, &sn)) {
        if (h->client)
            return hs_fail(h, len >= 2 && line[0] == 'E' ? TK_HS_E_EARLY_E : TK_HS_E_CLIENT_BANNER,
                           false);
        if (hs_starts(line, len, HS_OLD_BANNER))
            return hs_fail(h, TK_HS_E_OLD_BANNER, false);
        if (hs_starts(line, len, HS_CLIENT_BANNER))
            return hs_fail(h, TK_HS_E_CLIENT_PORT, false);
        return hs_fail(h, TK_HS_E_BANNER, false);
    }
    memcpy(h->snonce, sn, TK_AUTH_HEX_LEN);
    h->snonce[TK_AUTH_HEX_LEN] = '\0';
    char proof[TK_AUTH_HEX_LEN + 1];
    hs_proof(h, false, proof);
    *out_len = h->client ? tk_proto_fmt_auth(out, cap, h->cnonce, proof)
                         : tk_proto_fmt_peer_auth(out, cap, h->cnonce, proof, h->to, strlen(h->to));
    TK_ASSERT(*out_len > 0);
    h->state = TK_HS_OK;
    return TK_HS_OK;
}

/* Dialler: the listener's OK (or its refusal). A client takes only the
 * exact refusal line as one; a peer any E line. */
static enum tk_hs_state hs_ok(struct tk_hs *h, const char *line, size_t len)
{
    static const char refusal[] = "E - auth";
    const char *sproof;
    uint64_t id, dom[2];
    if (!tk_proto_parse_ok(line, len, &sproof, &id, dom)) {
        if (h->client)
            return hs_fail(h,
                           len == sizeof refusal - 1 && memcmp(line, refusal, len) == 0
                               ? TK_HS_E_AUTH_REFUSED
                               : TK_HS_E_ANSWER,
                           false);
        return hs_fail(h, hs_starts(line, len, "E ") ? TK_HS_E_REFUSED : TK_HS_E_OK_LINE, false);
    }
    char proof[TK_AUTH_HEX_LEN + 1];
    hs_proof(h, true, proof);
    if (!tk_auth_equal(proof, sproof, TK_AUTH_HEX_LEN))
        return hs_fail(h, h->client ? TK_HS_E_SERVER_PROOF : TK_HS_E_SPROOF, false);
    h->node_id = id;
    h->domain[0] = dom[0];
    h->domain[1] = dom[1];
    h->state = TK_HS_DONE;
    return TK_HS_DONE;
}

/* Listener, both variants: checks the dialler's proof, then (the peer
 * port) whether it was meant for this node, and answers OK with the
 * server proof. */
static enum tk_hs_state hs_answer(struct tk_hs *h,
                                  const char *cproof,
                                  bool target_ok,
                                  char *out,
                                  size_t cap,
                                  size_t *out_len)
{
    char proof[TK_AUTH_HEX_LEN + 1];
    hs_proof(h, false, proof);
    if (!tk_auth_equal(proof, cproof, TK_AUTH_HEX_LEN))
        return hs_fail(h, h->client ? TK_HS_E_CLIENT_PROOF : TK_HS_E_PROOF, true);
    if (!target_ok)
        return hs_fail(h, TK_HS_E_TARGET, true);
    hs_proof(h, true, proof);
    *out_len = tk_proto_fmt_ok(out, cap, proof, h->node_id, h->domain);
    TK_ASSERT(*out_len > 0);
    h->state = TK_HS_DONE;
    return TK_HS_DONE;
}

/* Client port listener: the client's AUTH; answers OK. */
static enum tk_hs_state hs_client_auth(struct tk_hs *h,
                                       const char *line,
                                       size_t len,
                                       char *out,
                                       size_t cap,
                                       size_t *out_len)
{
    const char *cn, *cproof;
    if (!tk_proto_parse_auth(line, len, &cn, &cproof))
        return hs_fail(h, TK_HS_E_AUTH_LINE, true);
    memcpy(h->cnonce, cn, TK_AUTH_HEX_LEN);
    h->cnonce[TK_AUTH_HEX_LEN] = '\0';
    return hs_answer(h, cproof, true, out, cap, out_len);
}

/* Peer port listener: the dialler's AUTH; answers OK. */
static enum tk_hs_state hs_auth(struct tk_hs *h,
                                const char *line,
                                size_t len,
                                char *out,
                                size_t cap,
                                size_t *out_len)
{
    const char *cn, *cproof, *to;
    size_t to_len;
    if (!tk_proto_parse_peer_auth(line, len, &cn, &cproof, &to, &to_len))
        return hs_fail(
            h, tk_proto_parse_auth(line, len, &cn, &cproof) ? TK_HS_E_OLD_AUTH : TK_HS_E_AUTH_LINE,
            true);
    /* The proof first: an address check that came before it would tell
     * anyone without the secret which names this node answers to. */
    memcpy(h->cnonce, cn, TK_AUTH_HEX_LEN);
    h->cnonce[TK_AUTH_HEX_LEN] = '\0';
    char self[TK_HS_ADDR_MAX + 1];
    memcpy(self, h->to, sizeof self);
    memcpy(h->to, to, to_len);
    h->to[to_len] = '\0';
    return hs_answer(h, cproof, hs_same_addr(to, to_len, self), out, cap, out_len);
}

enum tk_hs_state tk_hs_line(struct tk_hs *h,
                            const char *line,
                            size_t len,
                            char *out,
                            size_t cap,
                            size_t *out_len)
{
    TK_ASSERT(cap >= TK_HS_LINE_MAX);
    *out_len = 0;
    switch (h->state) {
        case TK_HS_BANNER:
            return hs_banner(h, line, len, out, cap, out_len);
        case TK_HS_OK:
            return hs_ok(h, line, len);
        case TK_HS_AUTH:
            return h->client ? hs_client_auth(h, line, len, out, cap, out_len)
                             : hs_auth(h, line, len, out, cap, out_len);
        default:
            TK_ASSERT(!"a handshake line after the handshake ended");
            return TK_HS_FAILED;
    }
}

const char *tk_hs_why(const struct tk_hs *h)
{
    TK_ASSERT(h->fail < TK_HS_FAIL_COUNT);
    return hs_fail_text[h->fail];
}

void tk_hs_mac(const struct tk_hs *h,
               const char *label,
               const void *data,
               size_t len,
               uint8_t out[TK_AUTH_MAC_LEN])
{
    TK_ASSERT(h->state == TK_HS_DONE);
    TK_ASSERT(!h->client);
    TK_ASSERT(strcmp(label, "client") != 0 && strcmp(label, "server") != 0);
    hs_hmac(h, label, data, len, out);
}
