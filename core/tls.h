/* TLS over our own buffers (wolfSSL), for the server's io_uring loops and
 * the client library alike: the caller moves ciphertext between the socket
 * and a struct tk_tls, and plaintext between the tk_tls and its parser. No
 * call blocks or touches a socket.
 *
 *   bytes received      -> tk_tls_feed()
 *   plaintext to parse  <- tk_tls_read()   (also drives the handshake)
 *   plaintext to send   -> tk_tls_write()  (held until the handshake is done)
 *   bytes to send       <- tk_tls_pending() / tk_tls_sent()
 *
 * Contexts hold the certificates and are reference counted, so a reload
 * (SIGHUP) makes a new context for new connections while the connections
 * of the old one carry on. Errors come as a sentence naming the cause
 * (a file, an expired or untrusted certificate, a name mismatch, a
 * plaintext client on a TLS port).
 *
 * Threads: a context may be shared (reference counts are atomic); a
 * tk_tls belongs to one thread.
 */
#ifndef TK_CORE_TLS_H
#define TK_CORE_TLS_H

#include "core/tk.h"

#define TK_TLS_ERR_MAX 256

struct tk_tls_opts {
    bool server;
    const char *cert; /* PEM chain; required for a server, optional for a client */
    const char *key;  /* PEM private key, with cert */
    const char *ca;   /* PEM CA bundle: a client verifies the server with it; a
                         server verifies client certificates with it */
    bool verify_peer; /* server: require a client certificate signed by ca */
};

struct tk_tls_ctx;
struct tk_tls;

/* Loads the files and checks them (present, readable, a key that matches
 * the certificate, a certificate not expired). TK_OK, or TK_EINVAL with a
 * sentence in err. */
int tk_tls_ctx_new(const struct tk_tls_opts *o, struct tk_tls_ctx **out, char *err, size_t cap);
void tk_tls_ctx_ref(struct tk_tls_ctx *c);
void tk_tls_ctx_unref(struct tk_tls_ctx *c);

/* A connection. server_name (client side, may be NULL): sent as SNI and
 * checked against the server's certificate. NULL on allocation failure. */
struct tk_tls *tk_tls_new(struct tk_tls_ctx *c, const char *server_name);
void tk_tls_free(struct tk_tls *t);

/* Ciphertext received from the peer. TK_OK, or TK_EPROTO once the
 * connection failed (tk_tls_error() says why). */
int tk_tls_feed(struct tk_tls *t, const void *data, size_t len);

/* Advances the handshake and decrypts: up to cap bytes of plaintext into
 * out, *got bytes (0: nothing yet). TK_OK, TK_ECLOSED when the peer closed
 * the TLS session, or TK_EPROTO / TK_EAUTH on failure (tk_tls_error()). */
int tk_tls_read(struct tk_tls *t, void *out, size_t cap, size_t *got);

/* Plaintext to send: encrypted now, or held until the handshake is done.
 * TK_OK or TK_EPROTO (failed connection). */
int tk_tls_write(struct tk_tls *t, const void *data, size_t len);

/* Ciphertext waiting to be sent (handshake messages included), and how
 * much of it went out. */
const uint8_t *tk_tls_pending(const struct tk_tls *t, size_t *len);
void tk_tls_sent(struct tk_tls *t, size_t n);

bool tk_tls_ready(const struct tk_tls *t); /* handshake done */

/* Whether the certificate the other end presented names host: a DNS
 * name (wildcards as usual) or an IP literal (matched against IP
 * entries; "[v6]" brackets are dropped). False without a certificate.
 * For a server checking who its client is, beyond the CA's signature. */
bool tk_tls_peer_has_name(const struct tk_tls *t, const char *host);

/* host as a certificate's names are compared with it: brackets around an
 * IPv6 literal dropped and the literal expanded to 8 groups of 4 hex
 * digits (how wolfSSL compares IP entries); anything else as it is. */
void tk_tls_host_name(const char *host, char *out, size_t cap);

/* The channel binding of a finished handshake (RFC 9266 "tls-exporter":
 * 32 bytes exported under the label "EXPORTER-Channel-Binding", no
 * context): equal on both ends of one TLS session and different for any
 * other, so a proof that covers it cannot be relayed onto a second TLS
 * connection. TK_OK, or TK_EPROTO before the handshake is done or if the
 * library cannot export. */
#define TK_TLS_BINDING_LEN 32
int tk_tls_channel_binding(const struct tk_tls *t, uint8_t out[TK_TLS_BINDING_LEN]);

/* Frees what wolfSSL keeps per thread (its ECC fixed-point cache); a
 * thread that used TLS calls it before it exits, else the cache leaks. */
void tk_tls_thread_done(void);
const char *tk_tls_error(const struct tk_tls *t);
/* Plaintext held inside (decrypted, not yet read). */
bool tk_tls_has_plaintext(const struct tk_tls *t);

#endif
