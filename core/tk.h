/* Basics shared by every layer: assertions, error codes, the PRNG, limits.
 *
 * Pure layers (shard/, raft/) include only this header and core/cmd.h from
 * core/: no clocks, sockets or threads. Time is always passed in as a
 * uint64_t count of microseconds on a monotonic clock, named `now_us`.
 */
#ifndef TK_CORE_TK_H
#define TK_CORE_TK_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TK_LIKELY(x) __builtin_expect(!!(x), 1)
#define TK_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define TK_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define TK_MIN(a, b) ((a) < (b) ? (a) : (b))
#define TK_MAX(a, b) ((a) > (b) ? (a) : (b))

/* Crashes with file and line. Assertions stay on in release builds: a
 * corrupt lock table must crash, never grant a key twice. */
_Noreturn void tk_panic(const char *file, int line, const char *what);
#define TK_ASSERT(x)                          \
    do {                                      \
        if (TK_UNLIKELY(!(x)))                \
            tk_panic(__FILE__, __LINE__, #x); \
    } while (0)
#ifdef TK_DEBUG
#define TK_DEBUG_ASSERT(x) TK_ASSERT(x)
#else
#define TK_DEBUG_ASSERT(x) ((void)0)
#endif

/* Failure codes (0 = ok). Expected outcomes such as BUSY or TIMEOUT are not
 * failures and live in the enums of their modules. */
#define TK_ERR_MAP(X)                             \
    X(TK_OK, "ok")                                \
    X(TK_ENOMEM, "out of memory")                 \
    X(TK_EFULL, "bounded queue or table is full") \
    X(TK_EINVAL, "invalid argument")              \
    X(TK_EIO, "input/output error")               \
    X(TK_ECLOSED, "connection closed")            \
    X(TK_EAUTH, "authentication failed")          \
    X(TK_EPROTO, "protocol violation")            \
    X(TK_ETIMEDOUT, "timed out")                  \
    X(TK_ENOTLEADER, "not the leader")            \
    X(TK_EUNSUPPORTED, "unsupported by this kernel or build")
#define TK_ERR_ENUM(name, msg) name,
enum tk_err { TK_ERR_MAP(TK_ERR_ENUM) TK_ERR_COUNT };
#undef TK_ERR_ENUM
const char *tk_strerror(int err);

/* Field limits of SPEC 5. */
#define TK_KEY_LEN_MAX 250
#define TK_OWNER_LEN_MAX 64
#define TK_LEASE_MS_MIN 1000u
#define TK_LEASE_MS_MAX 250000u
#define TK_WAIT_MS_MAX 250000u
#define TK_LINE_MAX 1024

/* A 64-bit reference: 8-bit tag | 24-bit slot | 32-bit generation. Used
 * for io_uring user data (tag: the operation) and client connection
 * references (tag: the worker). A slot's generation changes on reuse, so a
 * stale reference never reaches a new occupant. */
struct tk_ref {
    uint32_t tag, slot, gen;
};
static inline uint64_t tk_ref_pack(uint32_t tag, uint32_t slot, uint32_t gen)
{
    return ((uint64_t)(tag & 0xffu) << 56) | ((uint64_t)(slot & 0xffffffu) << 32) | gen;
}
static inline struct tk_ref tk_ref_unpack(uint64_t v)
{
    struct tk_ref r = {(uint32_t)(v >> 56), (uint32_t)(v >> 32) & 0xffffffu, (uint32_t)v};
    return r;
}

/* Deterministic PRNG (xoshiro256**), seeded explicitly; never rand(). */
struct tk_prng {
    uint64_t s[4];
};
void tk_prng_seed(struct tk_prng *p, uint64_t seed);
uint64_t tk_prng_next(struct tk_prng *p);
/* Uniform in [lo, hi] inclusive. Requires lo <= hi. */
uint64_t tk_prng_range(struct tk_prng *p, uint64_t lo, uint64_t hi);

/* 64-bit hash of a byte string (xxHash XXH3), used to route keys to shards
 * and to index hash tables. */
uint64_t tk_hash(const void *data, size_t len);

/* The slot of a key (SPEC 15, groups and slots): FNV-1a 64 of its bytes
 * modulo TK_SLOTS. Every client computes the same function; unlike
 * tk_hash it is part of the protocol and never changes. */
#define TK_SLOTS 16384u
uint32_t tk_slot(const void *key, size_t len);

/* snprintf and vsnprintf for the pure cores (which include no stdio):
 * the length written, less than cap, always NUL-terminated (cap > 0). */
size_t tk_fmt(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
size_t tk_vfmt(char *buf, size_t cap, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));
/* A wall-clock time (us since the Unix epoch) as "YYYY-MM-DDTHH:MM:SSZ"
 * in buf; returns buf. */
const char *tk_wall_str(uint64_t wall_us, char *buf, size_t cap);

#endif
