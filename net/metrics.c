/* Histograms and process metrics for /metrics (net/metrics.h). */
#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "core/tk.h"
#include "net/config.h"
#include "net/metrics.h"

const uint64_t tk_hist_latency_us[] = {100,     250,     500,     1000,    2500,   5000,
                                       10000,   25000,   50000,   100000,  250000, 500000,
                                       1000000, 2500000, 5000000, 10000000};
const size_t tk_hist_latency_n = TK_ARRAY_LEN(tk_hist_latency_us);
_Static_assert(TK_ARRAY_LEN(tk_hist_latency_us) <= TK_HIST_BOUNDS_MAX, "latency bounds fit");

static void bump(_Atomic uint64_t *a, uint64_t v)
{
    uint64_t old = atomic_load_explicit(a, memory_order_relaxed);
    atomic_store_explicit(a, old + v, memory_order_relaxed);
}

void tk_hist_add(struct tk_hist *h, const uint64_t *bounds, size_t n, uint64_t v)
{
    TK_ASSERT(n <= TK_HIST_BOUNDS_MAX);
    size_t i = 0;
    while (i < n && v > bounds[i])
        i++;
    bump(&h->bucket[i], 1);
    bump(&h->sum, v);
}

void tk_put(char *buf, size_t cap, size_t *off, const char *fmt, ...)
{
    if (*off >= cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + *off, cap - *off, fmt, ap);
    va_end(ap);
    if (n > 0)
        *off = TK_MIN(*off + (size_t)n, cap);
}

size_t tk_hist_print(char *buf,
                     size_t cap,
                     const char *name,
                     const char *help,
                     const struct tk_hist *h,
                     size_t nh,
                     const uint64_t *bounds,
                     size_t n,
                     double scale)
{
    TK_ASSERT(n <= TK_HIST_BOUNDS_MAX);
    size_t off = 0;
    tk_put(buf, cap, &off, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0, sum = 0;
    for (size_t i = 0; i <= n; i++) {
        for (size_t j = 0; j < nh; j++)
            cum += atomic_load_explicit(&h[j].bucket[i], memory_order_relaxed);
        if (i < n)
            tk_put(buf, cap, &off, "%s_bucket{le=\"%g\"} %llu\n", name, (double)bounds[i] * scale,
                   (unsigned long long)cum);
        else
            tk_put(buf, cap, &off, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)cum);
    }
    for (size_t j = 0; j < nh; j++)
        sum += atomic_load_explicit(&h[j].sum, memory_order_relaxed);
    /* _count is the +Inf bucket by definition, so it is not kept apart. */
    tk_put(buf, cap, &off, "%s_sum %g\n%s_count %llu\n", name, (double)sum * scale, name,
           (unsigned long long)cum);
    return off;
}

/* Seconds since the epoch at which the system booted (/proc/stat btime). */
static unsigned long long boot_time(void)
{
    FILE *f = fopen("/proc/stat", "re");
    if (f == NULL)
        return 0;
    char line[256];
    unsigned long long btime = 0;
    /* The line comes after one per CPU: bounded by the CPUs, not by input. */
    while (fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "btime %llu", &btime) == 1)
            break;
    fclose(f);
    return btime;
}

static unsigned long long open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL)
        return 0;
    unsigned long long n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.' && atoi(e->d_name) != dirfd(d))
            n++;
    closedir(d);
    return n;
}

size_t tk_process_metrics(char *buf, size_t cap)
{
    size_t off = 0;
    char stat[1024];
    /* /proc/self/stat: the fields after the command name, which is in
     * parentheses and may itself hold spaces or parentheses. */
    const char *p =
        tk_read_small("/proc/self/stat", stat, sizeof(stat)) ? strrchr(stat, ')') : NULL;
    unsigned long long utime = 0, stime = 0, start = 0, vsize = 0;
    long long rss = 0;
    if (p == NULL || sscanf(p + 1,
                            " %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %llu %llu"
                            " %*s %*s %*s %*s %*s %*s %llu %llu %lld",
                            &utime, &stime, &start, &vsize, &rss) != 5)
        return 0;
    double hz = (double)sysconf(_SC_CLK_TCK);
    double page = (double)sysconf(_SC_PAGESIZE);
    struct rlimit rl = {0};
    getrlimit(RLIMIT_NOFILE, &rl);
    double max_fds = rl.rlim_cur == RLIM_INFINITY ? -1.0 : (double)rl.rlim_cur;
    tk_put(buf, cap, &off,
           "# HELP process_cpu_seconds_total User and system CPU time spent, in seconds.\n"
           "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total %g\n"
           "# HELP process_resident_memory_bytes Resident memory size in bytes.\n"
           "# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes %.0f\n"
           "# HELP process_virtual_memory_bytes Virtual memory size in bytes.\n"
           "# TYPE process_virtual_memory_bytes gauge\nprocess_virtual_memory_bytes %llu\n"
           "# HELP process_open_fds Open file descriptors.\n"
           "# TYPE process_open_fds gauge\nprocess_open_fds %llu\n"
           "# HELP process_max_fds Limit on open file descriptors (-1: none).\n"
           "# TYPE process_max_fds gauge\nprocess_max_fds %.0f\n"
           "# HELP process_start_time_seconds Start time of the process since the epoch, in "
           "seconds.\n"
           "# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds %.2f\n",
           (double)(utime + stime) / hz, (double)rss * page, vsize, open_fds(), max_fds,
           (double)boot_time() + (double)start / hz);
    return off;
}
