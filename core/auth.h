/* The challenge-response handshake's cryptography (SPEC 2): nonces from a
 * CSPRNG, HMAC-SHA256 proofs, constant-time comparison, secret files.
 *
 * Uses wolfCrypt. tk_auth_nonce() keeps one RNG per thread, so every
 * function may be called from any thread.
 */
#ifndef TK_CORE_AUTH_H
#define TK_CORE_AUTH_H

#include "core/tk.h"

#define TK_AUTH_NONCE_LEN 32    /* bytes */
#define TK_AUTH_HEX_LEN 64      /* hex chars of a nonce or a proof */
#define TK_AUTH_SECRET_MIN 16   /* bytes */
#define TK_AUTH_SECRET_MAX 4096 /* bytes */

/* Writes 64 lowercase hex chars of a fresh 32-byte CSPRNG nonce and a NUL.
 * Returns TK_OK or TK_EIO if the RNG failed. */
int tk_auth_nonce(char out[TK_AUTH_HEX_LEN + 1]);

/* Fills buf with len bytes from the same CSPRNG (NodeIds, domain ids).
 * Returns TK_OK or TK_EIO. */
#define TK_AUTH_RANDOM_MAX 1024
int tk_auth_random(void *buf, size_t len);

/* Writes the 64-hex-char proof and a NUL:
 *   client: HMAC-SHA256(secret, "ticketing/1 client " snonce " " cnonce)
 *   server: HMAC-SHA256(secret, "ticketing/1 server " snonce " " cnonce)
 * snonce and cnonce are 64-char hex strings (not NUL-terminated needed). */
void tk_auth_proof(const uint8_t *secret,
                   size_t secret_len,
                   bool server,
                   const char *snonce,
                   const char *cnonce,
                   char out[TK_AUTH_HEX_LEN + 1]);

/* HMAC-SHA256(key, msg) into out: the building block of tk_auth_proof(),
 * exported so that tests can check it against RFC 4231. Any key length
 * (keys over 64 bytes are hashed first, as RFC 2104 says). */
#define TK_AUTH_MAC_LEN 32 /* bytes */
void tk_auth_hmac_sha256(const uint8_t *key,
                         size_t key_len,
                         const void *msg,
                         size_t msg_len,
                         uint8_t out[TK_AUTH_MAC_LEN]);

/* n bytes as 2n lowercase hex chars and a NUL. */
void tk_auth_hex(const uint8_t *raw, size_t n, char *out);

/* Constant-time comparison of n bytes. */
bool tk_auth_equal(const void *a, const void *b, size_t n);

/* True if s is exactly TK_AUTH_HEX_LEN lowercase hex characters. */
bool tk_auth_is_hex64(const char *s, size_t len);

/* Reads a secret file: its bytes less one trailing "\n" or "\r\n" (only
 * one: "s\n\n" gives "s\n"). Fails with TK_EINVAL if the result is shorter
 * than TK_AUTH_SECRET_MIN or longer than cap or TK_AUTH_SECRET_MAX, TK_EIO if
 * the file cannot be opened or read. Wipes its own copy of the bytes. */
int tk_auth_load_secret(const char *path, uint8_t *buf, size_t cap, size_t *len);

#endif
