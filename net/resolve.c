/* Name lookups off the calling thread (net/resolve.h). */
#include "net/resolve.h"

#include <netdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* One job per caller's number, so at most one lookup per peer address is
 * outstanding and the queue is bounded by TK_RESOLVE_JOBS_MAX. A finished
 * job is marked done and the owner's wake eventfd written; the owner
 * collects it.
 *
 * Shared by the owner and the resolver threads under mu; freed by
 * whichever lets go of it last (refs). After stop is set (under mu) no
 * thread touches wake_fd, which the owner closes after releasing. */
enum { RJ_FREE, RJ_QUEUED, RJ_RUNNING, RJ_DONE };

struct resolve_job {
    uint8_t state;
    int rc; /* TK_OK or TK_EIO */
    char host[TK_ADDR_MAX];
    char port[8];
    struct sockaddr_storage sa;
    socklen_t salen;
};

struct tk_resolver {
    pthread_mutex_t mu;
    pthread_cond_t work;    /* a job was queued, or stop */
    pthread_cond_t stopped; /* stop (ends the test delay early) */
    uint32_t refs;          /* the owner plus each thread */
    uint32_t threads, idle;
    bool stop;
    uint32_t queue[TK_RESOLVE_JOBS_MAX]; /* numbers of RJ_QUEUED jobs, FIFO */
    uint32_t q_head, q_len;
    struct resolve_job jobs[TK_RESOLVE_JOBS_MAX];
    _Atomic uint32_t done; /* jobs in RJ_DONE: the owner's cheap check */
    int wake_fd;
    uint32_t delay_ms; /* the test hook's delay */
};

static void resolver_free(struct tk_resolver *rs)
{
    pthread_mutex_destroy(&rs->mu);
    pthread_cond_destroy(&rs->work);
    pthread_cond_destroy(&rs->stopped);
    free(rs);
}

/* Drops one reference under rs->mu (which it releases); frees on the last. */
static void resolver_unref_unlock(struct tk_resolver *rs)
{
    bool last = --rs->refs == 0;
    pthread_mutex_unlock(&rs->mu);
    if (last)
        resolver_free(rs);
}

/* The blocking lookup: the first address getaddrinfo() gives for a TCP
 * connection, as the dialler always used. */
static int lookup(const char *host, const char *port, struct sockaddr_storage *sa, socklen_t *salen)
{
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    if (getaddrinfo(host, port, &hints, &res) != 0 || !res)
        return TK_EIO;
    int rc = TK_EIO;
    if (res->ai_addrlen <= sizeof(*sa)) {
        memcpy(sa, res->ai_addr, res->ai_addrlen);
        *salen = res->ai_addrlen;
        rc = TK_OK;
    }
    freeaddrinfo(res);
    return rc;
}

static void *resolver_main(void *arg)
{
    struct tk_resolver *rs = arg;
    pthread_setname_np(pthread_self(), "tk-resolve");
    pthread_mutex_lock(&rs->mu);
    for (;;) {
        while (!rs->stop && rs->q_len == 0) {
            rs->idle++;
            pthread_cond_wait(&rs->work, &rs->mu);
            rs->idle--;
        }
        if (rs->stop)
            break;
        uint32_t slot = rs->queue[rs->q_head];
        rs->q_head = (rs->q_head + 1) % TK_RESOLVE_JOBS_MAX;
        rs->q_len--;
        struct resolve_job *j = &rs->jobs[slot];
        TK_ASSERT(j->state == RJ_QUEUED);
        j->state = RJ_RUNNING;
        if (rs->delay_ms) {
            struct timespec until;
            clock_gettime(CLOCK_MONOTONIC, &until);
            until.tv_sec += rs->delay_ms / 1000u;
            until.tv_nsec += (long)(rs->delay_ms % 1000u) * 1000000L;
            if (until.tv_nsec >= 1000000000L) {
                until.tv_sec++;
                until.tv_nsec -= 1000000000L;
            }
            while (!rs->stop && pthread_cond_timedwait(&rs->stopped, &rs->mu, &until) == 0) {
            }
            if (rs->stop)
                break;
        }
        char host[TK_ADDR_MAX], port[sizeof(j->port)];
        memcpy(host, j->host, sizeof(host));
        memcpy(port, j->port, sizeof(port));
        pthread_mutex_unlock(&rs->mu);
        struct sockaddr_storage sa;
        socklen_t salen = 0;
        int rc = lookup(host, port, &sa, &salen);
        pthread_mutex_lock(&rs->mu);
        if (rs->stop)
            break;
        j->rc = rc;
        if (rc == TK_OK) {
            j->sa = sa;
            j->salen = salen;
        }
        j->state = RJ_DONE;
        atomic_fetch_add_explicit(&rs->done, 1, memory_order_release);
        /* Under mu: tk_peers_destroy() sets stop under mu before the fd
         * can be closed. A direct write: an eventfd count is never lost. */
        uint64_t one = 1;
        ssize_t n = write(rs->wake_fd, &one, sizeof(one));
        (void)n; /* EAGAIN: the counter is saturated, the Raft thread wakes anyway */
    }
    rs->threads--;
    resolver_unref_unlock(rs);
    return NULL;
}

struct tk_resolver *tk_resolver_create(int wake_fd, uint32_t delay_ms)
{
    struct tk_resolver *rs = calloc(1, sizeof(*rs));
    if (!rs)
        return NULL;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&rs->mu, NULL);
    pthread_cond_init(&rs->work, NULL);
    pthread_cond_init(&rs->stopped, &ca);
    pthread_condattr_destroy(&ca);
    rs->refs = 1;
    rs->wake_fd = wake_fd;
    rs->delay_ms = delay_ms;
    atomic_init(&rs->done, 0);
    return rs;
}

int tk_resolver_submit(struct tk_resolver *rs, uint32_t job, const char *host, uint32_t port)
{
    TK_ASSERT(job < TK_RESOLVE_JOBS_MAX);
    int rc = TK_OK;
    pthread_mutex_lock(&rs->mu);
    struct resolve_job *j = &rs->jobs[job];
    TK_ASSERT(j->state == RJ_FREE && rs->q_len < TK_RESOLVE_JOBS_MAX);
    snprintf(j->host, sizeof(j->host), "%s", host);
    snprintf(j->port, sizeof(j->port), "%u", port);
    j->state = RJ_QUEUED;
    rs->queue[(rs->q_head + rs->q_len) % TK_RESOLVE_JOBS_MAX] = job;
    rs->q_len++;
    if (rs->q_len > rs->idle && rs->threads < TK_RESOLVE_THREADS_MAX) {
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_t t;
        if (pthread_create(&t, &attr, resolver_main, rs) == 0) {
            rs->threads++;
            rs->refs++;
        } else if (rs->threads == 0) {
            rs->q_len--; /* nobody would ever take it */
            j->state = RJ_FREE;
            rc = TK_EIO;
        }
        pthread_attr_destroy(&attr);
    }
    pthread_cond_signal(&rs->work);
    pthread_mutex_unlock(&rs->mu);
    return rc;
}

void tk_resolver_collect(struct tk_resolver *rs,
                         void *ctx,
                         void (*done)(void *ctx,
                                      uint32_t job,
                                      int rc,
                                      const struct sockaddr_storage *sa,
                                      socklen_t salen))
{
    if (!rs || atomic_load_explicit(&rs->done, memory_order_acquire) == 0)
        return;
    pthread_mutex_lock(&rs->mu);
    for (uint32_t job = 0; job < TK_RESOLVE_JOBS_MAX; job++) {
        struct resolve_job *j = &rs->jobs[job];
        if (j->state != RJ_DONE)
            continue;
        j->state = RJ_FREE;
        atomic_fetch_sub_explicit(&rs->done, 1, memory_order_relaxed);
        done(ctx, job, j->rc, &j->sa, j->salen);
    }
    pthread_mutex_unlock(&rs->mu);
}

void tk_resolver_release(struct tk_resolver *rs)
{
    if (!rs)
        return;
    pthread_mutex_lock(&rs->mu);
    rs->stop = true;
    pthread_cond_broadcast(&rs->work);
    pthread_cond_broadcast(&rs->stopped);
    resolver_unref_unlock(rs);
}

bool tk_resolve_numeric(const char *host,
                        uint32_t port,
                        struct sockaddr_storage *sa,
                        socklen_t *salen)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    char portstr[16];
    snprintf(portstr, sizeof(portstr), "%u", port);
    if (getaddrinfo(host, portstr, &hints, &res) != 0 || !res)
        return false;
    bool ok = res->ai_addrlen <= sizeof(*sa);
    if (ok) {
        memcpy(sa, res->ai_addr, res->ai_addrlen);
        *salen = res->ai_addrlen;
    }
    freeaddrinfo(res);
    return ok;
}
