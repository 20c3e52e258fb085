/* Goal: the handshake's cryptography (SPEC 2) is right: HMAC-SHA256 matches
 * RFC 4231, proofs match values computed independently with openssl, nonces
 * are 64 lowercase hex chars and never repeat (across threads and across
 * fork()), comparison is exact, and secret files are read by SPEC 2's rules.
 *
 * Method: known-answer tests for the HMAC and the proofs; a few thousand
 * nonces sorted and checked for duplicates; secret files written into a
 * fresh temporary directory per test.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/auth.h"

/* ---- fixture ------------------------------------------------------------- */

static char dir[64];
static char path[128];

static void dir_setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/tk_test_auth_XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

static void dir_teardown(void)
{
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}

/* ---- parameters ---------------------------------------------------------- */

#define NONCE_THREADS 4
#define NONCES_PER_THREAD 500
#define SECRET16 "0123456789abcdef"

/* ---- helpers ------------------------------------------------------------- */

static void hex_of(const uint8_t *raw, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        snprintf(out + 2 * i, 3, "%02x", raw[i]);
}

static const char *write_secret(const void *bytes, size_t n)
{
    snprintf(path, sizeof path, "%s/secret", dir);
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(bytes, 1, n, f), n);
    cr_assert_eq(fclose(f), 0);
    return path;
}

static int cmp_nonce(const void *a, const void *b)
{
    return memcmp(a, b, TK_AUTH_HEX_LEN + 1);
}

/* ---- assertion macros ---------------------------------------------------- */

#define ASSERT_HMAC(key, key_len, msg, msg_len, want_hex)              \
    do {                                                               \
        uint8_t mac_[TK_AUTH_MAC_LEN];                                 \
        char hex_[2 * TK_AUTH_MAC_LEN + 1];                            \
        tk_auth_hmac_sha256((key), (key_len), (msg), (msg_len), mac_); \
        hex_of(mac_, sizeof mac_, hex_);                               \
        cr_assert_str_eq(hex_, (want_hex));                            \
    } while (0)

#define ASSERT_SECRET(content, want_rc, want_bytes)                                       \
    do {                                                                                  \
        uint8_t got_[TK_AUTH_SECRET_MAX];                                                 \
        size_t len_ = 12345;                                                              \
        int rc_ = tk_auth_load_secret(write_secret((content), sizeof(content) - 1), got_, \
                                      sizeof got_, &len_);                                \
        cr_assert_eq(rc_, (want_rc), "rc %d (%s)", rc_, tk_strerror(rc_));                \
        if ((want_rc) == TK_OK) {                                                         \
            cr_assert_eq(len_, sizeof(want_bytes) - 1);                                   \
            cr_assert(memcmp(got_, (want_bytes), len_) == 0);                             \
        }                                                                                 \
    } while (0)

/* ---- HMAC and proofs ------------------------------------------------------ */

/* RFC 4231 section 4, test cases 1, 2 and 6 (HMAC-SHA-256 lines). */
Test(auth_hmac, rfc4231)
{
    uint8_t key1[20];
    memset(key1, 0x0b, sizeof key1);
    ASSERT_HMAC(key1, sizeof key1, "Hi There", 8,
                "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
    const char msg2[] = "what do ya want for nothing?";
    ASSERT_HMAC((const uint8_t *)"Jefe", 4, msg2, sizeof msg2 - 1,
                "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    uint8_t key6[131]; /* longer than the block: hashed first */
    memset(key6, 0xaa, sizeof key6);
    const char msg6[] = "Test Using Larger Than Block-Size Key - Hash Key First";
    ASSERT_HMAC(key6, sizeof key6, msg6, sizeof msg6 - 1,
                "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

#define SNONCE "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define CNONCE "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"
#define SECRET "correct horse battery staple"

/* Expected values computed once, independently of this code, with:
 *   printf 'ticketing/1 client %s %s' $SNONCE $CNONCE \
 *       | openssl dgst -sha256 -hmac 'correct horse battery staple'
 * and the same with "server". */
Test(auth_proof, matches_openssl)
{
    char out[TK_AUTH_HEX_LEN + 1];
    memset(out, 'X', sizeof out);
    tk_auth_proof((const uint8_t *)SECRET, strlen(SECRET), false, SNONCE, CNONCE, out);
    cr_assert_str_eq(out, "230343a4f807550f5813345a0fb47bac0f2033a9d3927eb465f5d34f45b1be61");
    tk_auth_proof((const uint8_t *)SECRET, strlen(SECRET), true, SNONCE, CNONCE, out);
    cr_assert_str_eq(out, "8a41b2cf1de6e44ed24ef987b59fc3a10966d99e9ec55cd439ce3f5cec78fa82");
    cr_assert(tk_auth_is_hex64(out, strlen(out)));
}

Test(auth_proof, depends_on_every_input)
{
    char base[TK_AUTH_HEX_LEN + 1], other[TK_AUTH_HEX_LEN + 1];
    const uint8_t *s = (const uint8_t *)SECRET;
    tk_auth_proof(s, strlen(SECRET), false, SNONCE, CNONCE, base);
    tk_auth_proof(s, strlen(SECRET) - 1, false, SNONCE, CNONCE, other);
    cr_assert_str_neq(base, other);
    tk_auth_proof(s, strlen(SECRET), true, SNONCE, CNONCE, other);
    cr_assert_str_neq(base, other);
    tk_auth_proof(s, strlen(SECRET), false, CNONCE, SNONCE, other); /* swapped nonces */
    cr_assert_str_neq(base, other);
    /* Only 64 chars of each nonce are used, NUL or not after them. */
    char longer[] = SNONCE "zzzz";
    tk_auth_proof(s, strlen(SECRET), false, longer, CNONCE, other);
    cr_assert_str_eq(base, other);
}

/* ---- nonces ---------------------------------------------------------------- */

Test(auth_nonce, lowercase_hex_and_fresh)
{
    static char n[1000][TK_AUTH_HEX_LEN + 1];
    for (int i = 0; i < 1000; i++) {
        memset(n[i], 'X', sizeof n[i]);
        cr_assert_eq(tk_auth_nonce(n[i]), TK_OK);
        cr_assert_eq(n[i][TK_AUTH_HEX_LEN], '\0');
        cr_assert_eq(strlen(n[i]), 64);
        cr_assert(tk_auth_is_hex64(n[i], 64), "%s", n[i]);
    }
    qsort(n, 1000, sizeof n[0], cmp_nonce);
    for (int i = 1; i < 1000; i++)
        cr_assert_str_neq(n[i - 1], n[i]);
    /* Over 1000 nonces every hex digit shows up (a stuck nibble would not). */
    bool seen[16] = {false};
    for (int i = 0; i < 1000; i++)
        for (int j = 0; j < 64; j++)
            seen[n[i][j] <= '9' ? n[i][j] - '0' : n[i][j] - 'a' + 10] = true;
    for (int d = 0; d < 16; d++)
        cr_assert(seen[d], "digit %x never drawn", d);
}

static char thread_nonces[NONCE_THREADS * NONCES_PER_THREAD][TK_AUTH_HEX_LEN + 1];

static void *nonce_thread(void *arg)
{
    size_t t = (size_t)(uintptr_t)arg;
    for (size_t i = 0; i < NONCES_PER_THREAD; i++)
        if (tk_auth_nonce(thread_nonces[t * NONCES_PER_THREAD + i]) != TK_OK)
            return (void *)1;
    return NULL;
}

/* Each thread has its own DRBG; together they still never repeat, and each
 * thread's DRBG is freed at its exit (ASan would report the leak). */
Test(auth_nonce, per_thread_rngs_do_not_repeat)
{
    pthread_t th[NONCE_THREADS];
    for (size_t t = 0; t < NONCE_THREADS; t++)
        cr_assert_eq(pthread_create(&th[t], NULL, nonce_thread, (void *)(uintptr_t)t), 0);
    for (size_t t = 0; t < NONCE_THREADS; t++) {
        void *rv;
        cr_assert_eq(pthread_join(th[t], &rv), 0);
        cr_assert_null(rv);
    }
    size_t total = NONCE_THREADS * NONCES_PER_THREAD;
    for (size_t i = 0; i < total; i++)
        cr_assert(tk_auth_is_hex64(thread_nonces[i], strlen(thread_nonces[i])));
    qsort(thread_nonces, total, sizeof thread_nonces[0], cmp_nonce);
    for (size_t i = 1; i < total; i++)
        cr_assert_str_neq(thread_nonces[i - 1], thread_nonces[i]);
}

/* A forked child inherits its parent's DRBG state: without a reseed both
 * would draw the same next nonce. */
Test(auth_nonce, fork_child_reseeds)
{
    char first[TK_AUTH_HEX_LEN + 1], parent[TK_AUTH_HEX_LEN + 1], child[TK_AUTH_HEX_LEN + 1];
    int fds[2];
    cr_assert_eq(tk_auth_nonce(first), TK_OK); /* the DRBG exists before fork */
    cr_assert_eq(pipe(fds), 0);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        char c[TK_AUTH_HEX_LEN + 1];
        int rc = tk_auth_nonce(c);
        ssize_t w = write(fds[1], c, sizeof c);
        _exit(rc == TK_OK && w == (ssize_t)sizeof c ? 0 : 1);
    }
    close(fds[1]);
    cr_assert_eq(tk_auth_nonce(parent), TK_OK);
    cr_assert_eq(read(fds[0], child, sizeof child), (ssize_t)sizeof child);
    close(fds[0]);
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    cr_assert_str_neq(parent, child);
    cr_assert_str_neq(first, child);
}

/* ---- comparison and hex ------------------------------------------------------ */

Test(auth_equal, exact)
{
    uint8_t a[64], b[64];
    for (int i = 0; i < 64; i++)
        a[i] = b[i] = (uint8_t)(i * 37);
    cr_assert(tk_auth_equal(a, b, sizeof a));
    cr_assert(tk_auth_equal(a, b, 0));
    for (size_t i = 0; i < sizeof a; i++) {
        for (int bit = 0; bit < 8; bit++) {
            b[i] ^= (uint8_t)(1u << bit);
            cr_assert_not(tk_auth_equal(a, b, sizeof a), "byte %zu bit %d", i, bit);
            cr_assert(tk_auth_equal(a, b, i), "prefix before byte %zu", i);
            b[i] ^= (uint8_t)(1u << bit);
        }
    }
    cr_assert(tk_auth_equal(a, b, sizeof a));
    cr_assert_not(tk_auth_equal("ab", "ba", 2));
}

Test(auth_hex, is_hex64)
{
    const char good[] = SNONCE;
    cr_assert(tk_auth_is_hex64(good, 64));
    cr_assert_not(tk_auth_is_hex64(good, 63));
    cr_assert_not(tk_auth_is_hex64(SNONCE "0", 65));
    cr_assert_not(tk_auth_is_hex64("", 0));
    char bad[65];
    const char probes[] = {'A', 'F', 'g', 'G', '/', ':', '`', ' ', '\0', (char)0xff};
    for (size_t p = 0; p < sizeof probes; p++) {
        for (size_t at = 0; at < 64; at += 21) {
            memcpy(bad, good, sizeof bad);
            bad[at] = probes[p];
            cr_assert_not(tk_auth_is_hex64(bad, 64), "0x%02x at %zu", (unsigned char)probes[p], at);
        }
    }
}

/* ---- secret files -------------------------------------------------------------- */

Test(auth_secret, newline_rules, .init = dir_setup, .fini = dir_teardown)
{
    ASSERT_SECRET(SECRET16, TK_OK, SECRET16);
    ASSERT_SECRET(SECRET16 "\n", TK_OK, SECRET16);
    ASSERT_SECRET(SECRET16 "\r\n", TK_OK, SECRET16);
    ASSERT_SECRET(SECRET16 "\n\n", TK_OK, SECRET16 "\n"); /* only one goes */
    ASSERT_SECRET(SECRET16 "\r\n\r\n", TK_OK, SECRET16 "\r\n");
    ASSERT_SECRET(SECRET16 "\n\r\n", TK_OK, SECRET16 "\n");
    ASSERT_SECRET(SECRET16 "\r", TK_OK, SECRET16 "\r"); /* a lone \r stays */
    ASSERT_SECRET(SECRET16 "\n\r", TK_OK, SECRET16 "\n\r");
    ASSERT_SECRET("\n" SECRET16, TK_OK, "\n" SECRET16); /* leading bytes stay */
    ASSERT_SECRET(" " SECRET16 " ", TK_OK, " " SECRET16 " ");
    ASSERT_SECRET("\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n", TK_OK, "\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n");
    ASSERT_SECRET("0123456789abcd\0f", TK_OK, "0123456789abcd\0f"); /* bytes, NUL too */
}

Test(auth_secret, length_limits, .init = dir_setup, .fini = dir_teardown)
{
    ASSERT_SECRET("0123456789abcde", TK_EINVAL, "");   /* 15 bytes */
    ASSERT_SECRET("0123456789abcde\n", TK_EINVAL, ""); /* 15 after stripping */
    ASSERT_SECRET("0123456789abcde\r\n", TK_EINVAL, "");
    ASSERT_SECRET("0123456789abcdef", TK_OK, SECRET16); /* 16 bytes */
    ASSERT_SECRET("", TK_EINVAL, "");
    ASSERT_SECRET("\n", TK_EINVAL, "");

    static uint8_t big[TK_AUTH_SECRET_MAX + 8];
    uint8_t got[TK_AUTH_SECRET_MAX + 8];
    size_t len = 0;
    memset(big, 's', sizeof big);
    /* TK_AUTH_SECRET_MAX bytes fit, with or without a newline; one more does not. */
    cr_assert_eq(tk_auth_load_secret(write_secret(big, TK_AUTH_SECRET_MAX), got, sizeof got, &len),
                 TK_OK);
    cr_assert_eq(len, TK_AUTH_SECRET_MAX);
    big[TK_AUTH_SECRET_MAX] = '\r';
    big[TK_AUTH_SECRET_MAX + 1] = '\n';
    cr_assert_eq(
        tk_auth_load_secret(write_secret(big, TK_AUTH_SECRET_MAX + 2), got, sizeof got, &len),
        TK_OK);
    cr_assert_eq(len, TK_AUTH_SECRET_MAX);
    big[TK_AUTH_SECRET_MAX] = 's';
    cr_assert_eq(
        tk_auth_load_secret(write_secret(big, TK_AUTH_SECRET_MAX + 1), got, sizeof got, &len),
        TK_EINVAL);
    cr_assert_eq(
        tk_auth_load_secret(write_secret(big, TK_AUTH_SECRET_MAX + 2), got, sizeof got, &len),
        TK_EINVAL);
    cr_assert_eq(tk_auth_load_secret(write_secret(big, sizeof big), got, sizeof got, &len),
                 TK_EINVAL);
    /* The caller's capacity also bounds the result. */
    cr_assert_eq(tk_auth_load_secret(write_secret(SECRET16 "xx\n", 19), got, 17, &len), TK_EINVAL);
    cr_assert_eq(tk_auth_load_secret(write_secret(SECRET16 "x\n", 18), got, 17, &len), TK_OK);
    cr_assert_eq(len, 17);
}

Test(auth_secret, unreadable, .init = dir_setup, .fini = dir_teardown)
{
    uint8_t got[64];
    size_t len = 0;
    char missing[160];
    snprintf(missing, sizeof missing, "%s/does-not-exist", dir);
    cr_assert_eq(tk_auth_load_secret(missing, got, sizeof got, &len), TK_EIO);
    cr_assert_eq(tk_auth_load_secret(dir, got, sizeof got, &len), TK_EIO); /* a directory */
    if (geteuid() != 0) {                                                  /* root reads anything */
        write_secret(SECRET16, 16);
        cr_assert_eq(chmod(path, 0), 0);
        cr_assert_eq(tk_auth_load_secret(path, got, sizeof got, &len), TK_EIO);
    }
}
