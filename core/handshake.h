/* The SPEC 2 challenge-response handshake as a pure state machine: lines
 * in, lines out, no socket, clock or thread. Two variants share it.
 *
 * The client port (TICKETING/1, the client secret): the server side runs
 * in net/conn.c, the client side in libticketing (client/conn.c, and so in
 * ticketctl), so the two cannot drift:
 *
 *   server: TICKETING/1 <snonce>
 *   client: AUTH <cnonce> <cproof>
 *   server: OK <sproof> <node-id> <domain-id>          (or E - auth, close)
 *
 *   cproof = HMAC-SHA256(client secret, "ticketing/1 client " snonce " "
 *                        cnonce), sproof the same with "server"
 *                        (tk_auth_proof).
 *
 * The peer port (TICKETING-PEER/2, the peer secret): the Raft thread's
 * peer links (net/peer.c) and `ticketctl remove-member`
 * (client/ticketctl_peer.c) run it:
 *
 *   listener: TICKETING-PEER/2 <snonce>
 *   dialler:  AUTH <cnonce> <cproof> <to>
 *   listener: OK <sproof> <node-id> <domain-id>       (or E - auth, close)
 *
 * `to` is the peer address the dialler meant to reach, as it dialled it
 * (an entry of --peers or of the configuration). Both proofs cover it and,
 * on a TLS link, the channel binding of that TLS session
 * (tk_tls_channel_binding):
 *
 *   cproof = HMAC-SHA256(peer secret, "ticketing-peer/2 client " snonce
 *                        " " cnonce " " to " " binding)
 *   sproof = the same with "server"
 *
 * where binding is the 64 hex chars of the exporter, or "-" without TLS.
 * The listener accepts only its own peer address as `to`. So a proof is
 * good for one connection only: a process that relays a dialler's AUTH to
 * another node (the dialler meant to reach the relay) is refused, and a
 * relay between two TLS sessions cannot make the bindings agree. Version 1
 * of the banner had neither and could be relayed; the two versions do not
 * speak to each other, and each side names the other's version when it
 * meets it.
 *
 * Both variants check the client's proof before anything else and answer
 * every refusal on the server side with "E - auth" (h->tell); a client
 * believes nothing a server says before its proof checked out.
 *
 * Memory: a struct tk_hs is the caller's; it points at the secret, which
 * must outlive it. Any thread may run its own tk_hs.
 */
#ifndef TK_CORE_HANDSHAKE_H
#define TK_CORE_HANDSHAKE_H

#include "core/auth.h"

#define TK_HS_ADDR_MAX 255 /* bytes of `to`: a host:port of --peers */
#define TK_HS_LINE_MAX 512 /* a handshake line this module writes, "\n" included */

enum tk_hs_state {
    TK_HS_BANNER, /* dialler (client): waits for the banner */
    TK_HS_OK,     /* dialler: sent AUTH, waits for OK */
    TK_HS_AUTH,   /* listener (server): sent the banner, waits for AUTH */
    TK_HS_DONE,   /* both proofs checked: frames may flow */
    TK_HS_FAILED, /* see tk_hs_why(); the link must close */
};

/* Why a handshake failed: one sentence each, for logs and ticketctl. The
 * client port's are the words its logs and libticketing's errors have
 * always used. */
#define TK_HS_FAIL_MAP(X)                                                                       \
    X(TK_HS_FINE, "no failure")                                                                 \
    X(TK_HS_E_BANNER, "not a Ticketing peer port (unexpected banner)")                          \
    X(TK_HS_E_CLIENT_PORT, "that is a client port, not a peer port (client port + 1)")          \
    X(TK_HS_E_OLD_BANNER,                                                                       \
      "the peer speaks TICKETING-PEER/1, an older release: every member must run the same "     \
      "peer protocol (TICKETING-PEER/2)")                                                       \
    X(TK_HS_E_AUTH_LINE, "malformed AUTH line")                                                 \
    X(TK_HS_E_OLD_AUTH,                                                                         \
      "an AUTH line without the address it was meant for: the dialler runs an older release "   \
      "(TICKETING-PEER/1)")                                                                     \
    X(TK_HS_E_TARGET,                                                                           \
      "the AUTH was meant for another address than this node's peer address (relayed, or "      \
      "dialled by a name this node does not know itself by)")                                   \
    X(TK_HS_E_PROOF, "bad proof (another peer secret, or a proof made for another connection)") \
    X(TK_HS_E_REFUSED,                                                                          \
      "refused by the peer (E - auth): another peer secret, or it does not know itself by the " \
      "address dialled (its log says which)")                                                   \
    X(TK_HS_E_OK_LINE, "a malformed answer to AUTH")                                            \
    X(TK_HS_E_SPROOF,                                                                           \
      "the peer's proof is wrong: it does not hold this peer secret, or the connection was "    \
      "relayed")                                                                                \
    X(TK_HS_E_CLIENT_BANNER, "not a Ticketing client port")                                     \
    X(TK_HS_E_EARLY_E, "refused (E before the banner)")                                         \
    X(TK_HS_E_CLIENT_PROOF, "bad proof")                                                        \
    X(TK_HS_E_AUTH_REFUSED, "authentication refused")                                           \
    X(TK_HS_E_ANSWER, "bad handshake answer")                                                   \
    X(TK_HS_E_SERVER_PROOF, "wrong server proof")
#define TK_HS_FAIL_ENUM(name, text) name,
enum tk_hs_fail { TK_HS_FAIL_MAP(TK_HS_FAIL_ENUM) TK_HS_FAIL_COUNT };

struct tk_hs {
    uint8_t state; /* enum tk_hs_state */
    uint8_t fail;  /* enum tk_hs_fail, once FAILED */
    bool tell;     /* FAILED listener: send "E - auth" before closing */
    bool client;   /* the client port's variant (TICKETING/1), else the peer's */
    const uint8_t *secret;
    size_t secret_len;
    char snonce[TK_AUTH_HEX_LEN + 1], cnonce[TK_AUTH_HEX_LEN + 1];
    char to[TK_HS_ADDR_MAX + 1];       /* peer dialler: the address dialled; listener: its own */
    char binding[TK_AUTH_HEX_LEN + 1]; /* hex of the TLS channel binding, or "-" */
    uint64_t node_id;                  /* listener: its own; dialler: the peer's, once DONE */
    uint64_t domain[2];                /* likewise: domain[0] low, domain[1] high */
};

/* The client port: a client with a fresh nonce of its own
 * (tk_auth_nonce), before the banner comes. */
void tk_hs_client_dial(struct tk_hs *h,
                       const uint8_t *secret,
                       size_t secret_len,
                       const char cnonce[TK_AUTH_HEX_LEN + 1]);

/* The client port: a server with a fresh nonce; writes the banner line
 * ("\n" included) into out and returns its length (0 if cap is too
 * small). node_id and domain go into the OK line, as in tk_hs_listen. */
size_t tk_hs_client_listen(struct tk_hs *h,
                           const uint8_t *secret,
                           size_t secret_len,
                           const char snonce[TK_AUTH_HEX_LEN + 1],
                           char *out,
                           size_t cap);

/* The peer port: a dialler that meant to reach `to` (1-TK_HS_ADDR_MAX bytes, visible
 * ASCII), with a fresh nonce of its own (tk_auth_nonce). */
void tk_hs_dial(struct tk_hs *h,
                const uint8_t *secret,
                size_t secret_len,
                const char *to,
                const char cnonce[TK_AUTH_HEX_LEN + 1]);

/* The peer port: a listener whose own peer address is self, with a fresh nonce; writes
 * the banner line ("\n" included) into out and returns its length (0 if
 * cap is too small). node_id and domain go into the OK line: the caller
 * may update h->node_id and h->domain until the AUTH line comes. */
size_t tk_hs_listen(struct tk_hs *h,
                    const uint8_t *secret,
                    size_t secret_len,
                    const char *self,
                    const char snonce[TK_AUTH_HEX_LEN + 1],
                    char *out,
                    size_t cap);

/* A TLS peer link: its channel binding, once the TLS handshake is done
 * and before the first line is handed to tk_hs_line (the client port's
 * TICKETING/1 has none). */
void tk_hs_bind(struct tk_hs *h, const uint8_t binding[TK_AUTH_MAC_LEN]);

/* One received line (without its "\n"; a final "\r" is tolerated). Writes
 * the answer line, if any, into out (*out_len bytes, "\n" included; cap at
 * least TK_HS_LINE_MAX) and returns the new state. A line in DONE or
 * FAILED is a caller's bug. */
enum tk_hs_state tk_hs_line(struct tk_hs *h,
                            const char *line,
                            size_t len,
                            char *out,
                            size_t cap,
                            size_t *out_len);

/* The sentence for h->fail. */
const char *tk_hs_why(const struct tk_hs *h);

/* A MAC that only the two ends of this handshake can make: HMAC-SHA256
 * over "ticketing-peer/2 <label> " snonce " " cnonce " " to " " binding
 * " " and data. A peer answers an operator's request with it (the Remove
 * answer), so that a reply cannot be forged by whoever carries the bytes.
 * h must be a DONE peer handshake. */
void tk_hs_mac(const struct tk_hs *h,
               const char *label,
               const void *data,
               size_t len,
               uint8_t out[TK_AUTH_MAC_LEN]);

#endif
