/* Shared helpers of the libFuzzer targets (tests/fuzz/run.sh builds them).
 *
 * A target's property checks use FUZZ_CHECK: a failed check prints what
 * failed and aborts, which libFuzzer reports as a crash and saves the input.
 */
#ifndef TK_FUZZ_FUZZ_H
#define TK_FUZZ_FUZZ_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/tk.h"

#define FUZZ_CHECK(x)                                                                    \
    do {                                                                                 \
        if (!(x)) {                                                                      \
            fprintf(stderr, "fuzz check failed at %s:%d: %s\n", __FILE__, __LINE__, #x); \
            abort();                                                                     \
        }                                                                                \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A pointer p with n bytes lies inside [base, base + len). */
static inline int fuzz_inside(const void *p, size_t n, const void *base, size_t len)
{
    const char *c = p, *b = base;
    return c >= b && c <= b + len && n <= (size_t)(b + len - c);
}

/* A heap copy of the input, exactly size bytes, so ASan catches any read
 * past the end (libFuzzer's own buffer is exact too, but the targets pass
 * pieces of it around). Free with free(). */
static inline char *fuzz_dup(const uint8_t *data, size_t size)
{
    char *p = malloc(size > 0 ? size : 1);
    FUZZ_CHECK(p != NULL);
    if (size > 0)
        memcpy(p, data, size);
    return p;
}

#endif
