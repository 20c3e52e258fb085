/* Basics: panic, error strings, PRNG, key hash. */
#include "core/tk.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

void tk_panic(const char *file, int line, const char *what)
{
    fprintf(stderr, "ticketing: assertion failed at %s:%d: %s\n", file, line, what);
    fflush(stderr);
    abort();
}

#define TK_ERR_STR(name, msg) [name] = msg,
static const char *const err_strings[TK_ERR_COUNT] = {TK_ERR_MAP(TK_ERR_STR)};
#undef TK_ERR_STR

const char *tk_strerror(int err)
{
    if (err < 0 || err >= TK_ERR_COUNT)
        return "unknown error";
    return err_strings[err];
}

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void tk_prng_seed(struct tk_prng *p, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        p->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t tk_prng_next(struct tk_prng *p)
{
    uint64_t *s = p->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

uint64_t tk_prng_range(struct tk_prng *p, uint64_t lo, uint64_t hi)
{
    TK_ASSERT(lo <= hi);
    uint64_t span = hi - lo;
    if (span == UINT64_MAX)
        return tk_prng_next(p);
    /* Rejection sampling keeps the draw unbiased. */
    uint64_t n = span + 1;
    uint64_t limit = UINT64_MAX - (UINT64_MAX % n);
    uint64_t v;
    do {
        v = tk_prng_next(p);
    } while (v >= limit);
    return lo + v % n;
}

uint64_t tk_hash(const void *data, size_t len)
{
    return XXH3_64bits(data, len);
}

uint32_t tk_slot(const void *key, size_t len)
{
    const uint8_t *b = key;
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a 64 offset basis */
    for (size_t i = 0; i < len; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull; /* FNV 64 prime, mod 2^64 */
    }
    return (uint32_t)(h % TK_SLOTS);
}

size_t tk_vfmt(char *buf, size_t cap, const char *fmt, va_list ap)
{
    TK_ASSERT(cap > 0);
    int n = vsnprintf(buf, cap, fmt, ap);
    return n < 0 ? 0 : TK_MIN((size_t)n, cap - 1);
}

size_t tk_fmt(char *buf, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t n = tk_vfmt(buf, cap, fmt, ap);
    va_end(ap);
    return n;
}

const char *tk_wall_str(uint64_t wall_us, char *buf, size_t cap)
{
    time_t sec = (time_t)(wall_us / 1000000u);
    struct tm tm;
    gmtime_r(&sec, &tm);
    snprintf(buf, cap, "%04d-%02d-%02dT%02d:%02d:%02dZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
    return buf;
}
