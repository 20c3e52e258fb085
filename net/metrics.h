/* Helpers for /metrics (Prometheus text format): histograms that one
 * thread records into and the admin thread renders, and the process
 * metrics read from /proc.
 *
 * A histogram has fixed bucket bounds (at most TK_HIST_BOUNDS_MAX) chosen
 * by its owner. Each struct tk_hist has exactly one writer thread (a
 * worker, the Raft thread), so recording is a relaxed load and store per
 * field, no locked instruction; the admin thread reads with relaxed loads
 * and may see one bucket moved before another's sample (a scrape is not
 * atomic, which Prometheus tolerates). Several histograms of one family (one per
 * worker) are summed when rendered.
 */
#ifndef TK_NET_METRICS_H
#define TK_NET_METRICS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define TK_HIST_BOUNDS_MAX 16

struct tk_hist {
    _Atomic uint64_t bucket[TK_HIST_BOUNDS_MAX + 1]; /* last: +Inf */
    _Atomic uint64_t sum;
};

/* Bucket bounds in microseconds for request latencies: 100 us .. 10 s. */
extern const uint64_t tk_hist_latency_us[];
extern const size_t tk_hist_latency_n;

/* snprintf at buf + *off; *off advances, never past cap (output that
 * does not fit is cut short). */
void tk_put(char *buf, size_t cap, size_t *off, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Records v (the histogram's single writer only). bounds: n <=
 * TK_HIST_BOUNDS_MAX ascending upper bounds, in the unit of v. */
void tk_hist_add(struct tk_hist *h, const uint64_t *bounds, size_t n, uint64_t v);

/* Appends family `name` (HELP, TYPE, buckets, _sum, _count) summing nh
 * histograms; bounds and sums are multiplied by scale (1e-6: us to s).
 * Returns the bytes written (<= cap; output cut short when cap is hit). */
size_t tk_hist_print(char *buf,
                     size_t cap,
                     const char *name,
                     const char *help,
                     const struct tk_hist *h,
                     size_t nh,
                     const uint64_t *bounds,
                     size_t n,
                     double scale);

/* Appends the process_* families (CPU, memory, descriptors, start time)
 * from /proc/self. Bounded work: a few small reads and one pass over
 * /proc/self/fd (at most the descriptor limit). Returns bytes written. */
size_t tk_process_metrics(char *buf, size_t cap);

#endif
