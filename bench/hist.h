/* A log-linear latency histogram in the manner of HdrHistogram: values in
 * nanoseconds, 128 linear sub-buckets per power of two, so any recorded
 * value is reported within 1/128 (< 0.8%) of its true value.
 *
 * Pure and single-threaded: each bench thread owns one and main.c merges
 * them after the threads have joined. Fixed size, no allocation.
 */
#ifndef TK_BENCH_HIST_H
#define TK_BENCH_HIST_H

#include <stdint.h>

#define BHIST_SUB_BITS 7 /* 128 sub-buckets per octave */
#define BHIST_SUB (1u << BHIST_SUB_BITS)
#define BHIST_MAX_BITS 42 /* values up to 2^42 ns (about 73 min) */
#define BHIST_BUCKETS (2u * BHIST_SUB + (BHIST_MAX_BITS - BHIST_SUB_BITS - 1u) * BHIST_SUB)

struct bhist {
    uint64_t count;
    uint64_t min, max; /* exact */
    uint64_t sum;      /* for the mean */
    uint64_t b[BHIST_BUCKETS];
};

void bhist_init(struct bhist *h);
/* Records v (ns); values above the range are clamped to its top bucket
 * (max stays exact). */
void bhist_record(struct bhist *h, uint64_t v);
void bhist_merge(struct bhist *into, const struct bhist *from);
/* The value at percentile p (0-100]: the highest value equivalent to the
 * bucket holding the ceil(p/100 * count)-th smallest value, capped at max.
 * 0 if the histogram is empty. */
uint64_t bhist_percentile(const struct bhist *h, double p);
/* Bucket index of v and the highest value that falls into a bucket. */
uint32_t bhist_index(uint64_t v);
uint64_t bhist_bucket_high(uint32_t idx);

#endif
