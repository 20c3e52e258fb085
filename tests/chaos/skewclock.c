/* skewclock: an LD_PRELOAD library that gives one ticketingd a monotonic
 * clock of its own, for the fault harness (tests/chaos/).
 *
 * libfaketime cannot be used: preloaded into ticketingd it recurses into
 * clock_gettime() while jemalloc initialises and the process hangs at start
 * (Debian 12's libfaketime 0.9.10). This library does the one thing the
 * harness needs. Every timer in ticketingd is a relative timeout computed
 * from clock_gettime(CLOCK_MONOTONIC) (io_uring waits, poll), so a process
 * whose CLOCK_MONOTONIC runs at another rate, or jumps, counts its leases,
 * waits, heartbeats and elections on that clock.
 *
 * The file named by TK_SKEW_FILE holds "RATE OFFSET_US" (e.g. "1.0005 0"):
 *   fake(now) = a_fake + (now - a_real) * RATE, plus OFFSET_US added once
 * when it grows (a forward jump). It is read again at most every 20 ms, so
 * the harness can change the rate or jump the clock while the node runs.
 * The offset only ever grows, and the rate must be positive, so the clock
 * this library returns never goes back. CLOCK_MONOTONIC, its _RAW and
 * _COARSE variants and CLOCK_BOOTTIME are skewed; CLOCK_REALTIME is left
 * alone (it only seeds a new domain's first token and stamps log lines).
 * Real time is read with the raw system call, so nothing here calls back
 * into an interposed function or allocates.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int loaded;
static double rate = 1.0;
static int64_t offset_us;
static int64_t a_real, a_fake, last_read, last_out;

static int64_t real_us(clockid_t id)
{
    struct timespec ts;
    if (syscall(SYS_clock_gettime, id, &ts) != 0)
        return -1;
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void read_file(int64_t now)
{
    const char *path = getenv("TK_SKEW_FILE");
    last_read = now;
    if (!path)
        return;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    char buf[64];
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return;
    buf[n] = 0;
    char *end;
    double r = strtod(buf, &end);
    long long off = strtoll(end, NULL, 10);
    if (r <= 0.0 || r > 100.0)
        return;
    /* Re-anchor at now, so that a new rate applies from now on. */
    int64_t fake_now = a_fake + (int64_t)((double)(now - a_real) * rate);
    a_real = now;
    a_fake = fake_now;
    rate = r;
    if (off > offset_us) {
        a_fake += off - offset_us;
        offset_us = off;
    }
}

int clock_gettime(clockid_t id, struct timespec *ts)
{
    if (id != CLOCK_MONOTONIC && id != CLOCK_MONOTONIC_RAW && id != CLOCK_MONOTONIC_COARSE &&
        id != CLOCK_BOOTTIME)
        return (int)syscall(SYS_clock_gettime, id, ts);
    int64_t now = real_us(CLOCK_MONOTONIC);
    if (now < 0)
        return (int)syscall(SYS_clock_gettime, id, ts);
    pthread_mutex_lock(&mu);
    if (!loaded) {
        loaded = 1;
        a_real = a_fake = now;
        read_file(now);
    } else if (now - last_read >= 20000) {
        read_file(now);
    }
    int64_t fake = a_fake + (int64_t)((double)(now - a_real) * rate);
    if (fake < last_out)
        fake = last_out;
    last_out = fake;
    pthread_mutex_unlock(&mu);
    ts->tv_sec = (time_t)(fake / 1000000);
    ts->tv_nsec = (long)(fake % 1000000) * 1000;
    return 0;
}
