/* Log-linear histogram (see hist.h).
 *
 * Layout: values below 2 * BHIST_SUB (256) have a bucket each. Above, the
 * value's top BHIST_SUB_BITS + 1 bits select the bucket: for v with its
 * highest set bit at position m (m >= 8), shift = m - BHIST_SUB_BITS puts
 * v >> shift in [128, 256), and each octave adds BHIST_SUB buckets. */
#include "bench/hist.h"

#include <math.h>
#include <string.h>

#include "core/tk.h"

void bhist_init(struct bhist *h)
{
    memset(h, 0, sizeof(*h));
    h->min = UINT64_MAX;
}

uint32_t bhist_index(uint64_t v)
{
    if (v < 2u * BHIST_SUB)
        return (uint32_t)v;
    uint32_t msb = 63u - (uint32_t)__builtin_clzll(v);
    if (msb >= BHIST_MAX_BITS)
        return BHIST_BUCKETS - 1u;
    uint32_t shift = msb - BHIST_SUB_BITS;
    uint32_t idx = 2u * BHIST_SUB + (shift - 1u) * BHIST_SUB + (uint32_t)((v >> shift) - BHIST_SUB);
    TK_ASSERT(idx < BHIST_BUCKETS);
    return idx;
}

uint64_t bhist_bucket_high(uint32_t idx)
{
    TK_ASSERT(idx < BHIST_BUCKETS);
    if (idx < 2u * BHIST_SUB)
        return idx;
    uint32_t shift = (idx - 2u * BHIST_SUB) / BHIST_SUB + 1u;
    uint64_t sub = (idx - 2u * BHIST_SUB) % BHIST_SUB + BHIST_SUB;
    return ((sub + 1u) << shift) - 1u;
}

void bhist_record(struct bhist *h, uint64_t v)
{
    h->b[bhist_index(v)]++;
    h->count++;
    h->sum += v;
    if (v < h->min)
        h->min = v;
    if (v > h->max)
        h->max = v;
}

void bhist_merge(struct bhist *into, const struct bhist *from)
{
    for (uint32_t i = 0; i < BHIST_BUCKETS; i++)
        into->b[i] += from->b[i];
    into->count += from->count;
    into->sum += from->sum;
    if (from->count && from->min < into->min)
        into->min = from->min;
    if (from->max > into->max)
        into->max = from->max;
}

uint64_t bhist_percentile(const struct bhist *h, double p)
{
    if (h->count == 0)
        return 0;
    double want = ceil(p / 100.0 * (double)h->count);
    uint64_t rank = want < 1.0 ? 1u : (uint64_t)want;
    if (rank > h->count)
        rank = h->count;
    uint64_t seen = 0;
    for (uint32_t i = 0; i < BHIST_BUCKETS; i++) {
        seen += h->b[i];
        if (seen >= rank)
            return TK_MIN(bhist_bucket_high(i), h->max);
    }
    return h->max;
}
