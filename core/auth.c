/* The handshake's cryptography (SPEC 2) on wolfCrypt: nonces, HMAC-SHA256
 * proofs, constant-time comparison and secret files.
 *
 * Each thread draws nonces from its own wolfCrypt DRBG, created on first use
 * and freed when the thread exits (a pthread key destructor), so there is no
 * lock on the handshake path. A forked child reseeds before its first nonce:
 * otherwise parent and child would hand out the same "fresh" nonces.
 */

/* TOOLCHAIN.md: options.h must come before any other wolfSSL header, or
 * struct sizes (Hmac: 296 instead of 896 bytes) disagree with the library. */
#include <wolfssl/options.h>
#include <wolfssl/wolfcrypt/hmac.h>
#include <wolfssl/wolfcrypt/random.h>
#include <wolfssl/wolfcrypt/wc_port.h>

#include "core/auth.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

_Static_assert(TK_AUTH_HEX_LEN == 2 * TK_AUTH_NONCE_LEN, "a nonce is sent as hex");
_Static_assert(TK_AUTH_HEX_LEN == 2 * TK_AUTH_MAC_LEN, "a proof is sent as hex");
_Static_assert(TK_AUTH_MAC_LEN == WC_SHA256_DIGEST_SIZE, "proofs are HMAC-SHA256");

void tk_auth_hex(const uint8_t *raw, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[raw[i] >> 4];
        out[2 * i + 1] = digits[raw[i] & 0xf];
    }
    out[2 * n] = '\0';
}

/* ---- nonces ------------------------------------------------------------ */

struct auth_rng {
    WC_RNG rng;
    unsigned fork_gen; /* auth_fork_gen when this DRBG was seeded */
    bool ready;
};

static _Thread_local struct auth_rng auth_thread_rng;
static pthread_once_t auth_once = PTHREAD_ONCE_INIT;
static pthread_key_t auth_rng_key;
static int auth_init_rc = -1;
static atomic_uint auth_fork_gen;

static void auth_rng_release(void *arg)
{
    struct auth_rng *r = arg;
    if (r->ready)
        wc_FreeRng(&r->rng);
    r->ready = false;
}

/* Runs in the child of fork(): every DRBG inherited from the parent is now
 * shared state, so each thread's next nonce reseeds first. */
static void auth_after_fork_child(void)
{
    atomic_fetch_add_explicit(&auth_fork_gen, 1, memory_order_relaxed);
}

static void auth_global_init(void)
{
    if (wolfCrypt_Init() != 0)
        return;
    if (pthread_key_create(&auth_rng_key, auth_rng_release) != 0)
        return;
    if (pthread_atfork(NULL, NULL, auth_after_fork_child) != 0)
        return;
    auth_init_rc = 0;
}

int tk_auth_random(void *buf, size_t len)
{
    struct auth_rng *r = &auth_thread_rng;
    unsigned gen;

    TK_ASSERT(buf != NULL);
    TK_ASSERT(len <= TK_AUTH_RANDOM_MAX);
    if (pthread_once(&auth_once, auth_global_init) != 0 || auth_init_rc != 0)
        return TK_EIO;
    gen = atomic_load_explicit(&auth_fork_gen, memory_order_relaxed);
    if (r->ready && r->fork_gen != gen)
        auth_rng_release(r);
    if (!r->ready) {
        if (wc_InitRng(&r->rng) != 0)
            return TK_EIO;
        r->ready = true;
        r->fork_gen = gen;
        if (pthread_setspecific(auth_rng_key, r) != 0) {
            auth_rng_release(r);
            return TK_EIO;
        }
    }
    if (wc_RNG_GenerateBlock(&r->rng, buf, (word32)len) != 0) {
        /* A failed DRBG stays failed; start over with a fresh one next time. */
        auth_rng_release(r);
        return TK_EIO;
    }
    return TK_OK;
}

int tk_auth_nonce(char out[TK_AUTH_HEX_LEN + 1])
{
    uint8_t raw[TK_AUTH_NONCE_LEN];

    TK_ASSERT(out != NULL);
    int rc = tk_auth_random(raw, sizeof raw);
    if (rc != TK_OK)
        return rc;
    tk_auth_hex(raw, sizeof raw, out);
    TK_DEBUG_ASSERT(tk_auth_is_hex64(out, TK_AUTH_HEX_LEN));
    return TK_OK;
}

/* ---- proofs ------------------------------------------------------------ */

void tk_auth_hmac_sha256(const uint8_t *key,
                         size_t key_len,
                         const void *msg,
                         size_t msg_len,
                         uint8_t out[TK_AUTH_MAC_LEN])
{
    Hmac hmac;
    TK_ASSERT(key_len <= UINT32_MAX);
    TK_ASSERT(msg_len <= UINT32_MAX);
    /* None of these can fail with valid arguments and a matching wolfSSL
     * build; if one does, no answer (accept or refuse) would be right. */
    int rc = wc_HmacInit(&hmac, NULL, INVALID_DEVID);
    TK_ASSERT(rc == 0);
    rc = wc_HmacSetKey(&hmac, WC_SHA256, key, (word32)key_len);
    TK_ASSERT(rc == 0);
    rc = wc_HmacUpdate(&hmac, msg, (word32)msg_len);
    TK_ASSERT(rc == 0);
    rc = wc_HmacFinal(&hmac, out);
    TK_ASSERT(rc == 0);
    wc_HmacFree(&hmac);
    /* The HMAC state holds the key's inner and outer pads. */
    explicit_bzero(&hmac, sizeof hmac);
}

#define AUTH_PREFIX_CLIENT "ticketing/1 client "
#define AUTH_PREFIX_SERVER "ticketing/1 server "
#define AUTH_PREFIX_LEN (sizeof(AUTH_PREFIX_CLIENT) - 1)
_Static_assert(sizeof(AUTH_PREFIX_CLIENT) == sizeof(AUTH_PREFIX_SERVER), "same prefix length");

void tk_auth_proof(const uint8_t *secret,
                   size_t secret_len,
                   bool server,
                   const char *snonce,
                   const char *cnonce,
                   char out[TK_AUTH_HEX_LEN + 1])
{
    char msg[AUTH_PREFIX_LEN + TK_AUTH_HEX_LEN + 1 + TK_AUTH_HEX_LEN];
    uint8_t mac[TK_AUTH_MAC_LEN];

    TK_ASSERT(secret != NULL);
    TK_ASSERT(snonce != NULL && cnonce != NULL);
    memcpy(msg, server ? AUTH_PREFIX_SERVER : AUTH_PREFIX_CLIENT, AUTH_PREFIX_LEN);
    memcpy(msg + AUTH_PREFIX_LEN, snonce, TK_AUTH_HEX_LEN);
    msg[AUTH_PREFIX_LEN + TK_AUTH_HEX_LEN] = ' ';
    memcpy(msg + AUTH_PREFIX_LEN + TK_AUTH_HEX_LEN + 1, cnonce, TK_AUTH_HEX_LEN);
    tk_auth_hmac_sha256(secret, secret_len, msg, sizeof msg, mac);
    tk_auth_hex(mac, sizeof mac, out);
}

bool tk_auth_equal(const void *a, const void *b, size_t n)
{
    /* volatile keeps the compiler from turning the loop into memcmp() or
     * adding an early exit: the time must not depend on where a and b
     * first differ. */
    const volatile unsigned char *x = a;
    const volatile unsigned char *y = b;
    unsigned char diff = 0;
    for (size_t i = 0; i < n; i++)
        diff |= (unsigned char)(x[i] ^ y[i]);
    return diff == 0;
}

bool tk_auth_is_hex64(const char *s, size_t len)
{
    if (len != TK_AUTH_HEX_LEN)
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
            return false;
    }
    return true;
}

/* ---- secret files ------------------------------------------------------ */

int tk_auth_load_secret(const char *path, uint8_t *buf, size_t cap, size_t *len)
{
    /* Room for the longest secret, its "\r\n", and one byte more to tell a
     * file that is too long. */
    uint8_t raw[TK_AUTH_SECRET_MAX + 3];
    size_t n = 0;
    int rc = TK_OK;
    int fd;

    TK_ASSERT(path != NULL);
    TK_ASSERT(buf != NULL || cap == 0);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return TK_EIO;
    while (n < sizeof raw) {
        ssize_t got = read(fd, raw + n, sizeof raw - n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            rc = TK_EIO;
            goto out;
        }
        if (got == 0)
            break;
        n += (size_t)got;
    }
    /* SPEC 2: one trailing "\r\n" or "\n" goes, never more, since the
     * secret's own bytes may end in a newline. */
    if (n >= 2 && raw[n - 2] == '\r' && raw[n - 1] == '\n')
        n -= 2;
    else if (n >= 1 && raw[n - 1] == '\n')
        n -= 1;
    if (n < TK_AUTH_SECRET_MIN || n > TK_AUTH_SECRET_MAX || n > cap) {
        rc = TK_EINVAL;
        goto out;
    }
    memcpy(buf, raw, n);
    *len = n;
out:
    explicit_bzero(raw, sizeof raw);
    close(fd);
    return rc;
}
