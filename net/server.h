/* The ticketingd process: worker threads (io_uring loop + connections +
 * one lock-table shard each), the Raft thread, the admin thread, and the
 * bounded rings between them (ARCHITECTURE.md "Threads and ownership").
 *
 * Ownership: a worker touches only its own connections and shard; the Raft
 * thread only the log and peer sockets. They talk through SPSC rings:
 *   workers[i]->to_worker[j]  requests, replies, closes between shards
 *   workers[i]->to_raft       proposals            (worker i -> raft)
 *   raft->to_worker[i]        committed commands and role changes
 * The admin thread reads published counters (relaxed atomics) only.
 */
#ifndef TK_NET_SERVER_H
#define TK_NET_SERVER_H

#include <pthread.h>
#include <stdatomic.h>

#include "core/cmd.h"
#include "core/msg.h"
#include "net/config.h"
#include "net/log.h"
#include "net/metrics.h"
#include "net/ring.h"

#define TK_WORKERS_MAX 64

/* Counters a worker publishes for /metrics (relaxed atomics), rendered as
 * ticketing_<family>[_total]{<label>}. Rows of one family are adjacent and
 * the first carries its help; label is "" for a family of one sample. */
#define TK_WSTAT_MAP(X)                                                                            \
    X(conns_open, gauge, conns_open, "", "Client connections open")                                \
    X(conns_accepted, counter, conns_accepted, "", "Client connections accepted")                  \
    X(conns_rejected, counter, conns_rejected, "", "Connections refused by the connection bound")  \
    X(accept_errors, counter, accept_errors, "",                                                   \
      "Client accept errors (EMFILE and the like; retried with backoff)")                          \
    X(auth_failures, counter, auth_failures, "", "Failed handshakes")                              \
    X(tls_failures, counter, tls_failures, "",                                                     \
      "Client connections closed by a TLS failure (handshake or record)")                          \
    X(handshaking, gauge, handshaking, "", "Client connections still in the handshake")            \
    X(handshakes_evicted, counter, handshakes_evicted, "",                                         \
      "Unauthenticated connections closed to admit a newer one")                                   \
    X(handshake_timeouts, counter, handshake_timeouts, "", "Handshakes not finished in time")      \
    X(req_acquire, counter, requests, "type=\"acquire\"",                                          \
      "Client requests by type (invalid: answered E)")                                             \
    X(req_release, counter, requests, "type=\"release\"", "")                                      \
    X(req_query, counter, requests, "type=\"query\"", "")                                          \
    X(req_ping, counter, requests, "type=\"ping\"", "")                                            \
    X(req_ring, counter, requests, "type=\"ring\"", "")                                            \
    X(req_invalid, counter, requests, "type=\"invalid\"", "")                                      \
    X(res_granted, counter, responses, "result=\"granted\"",                                       \
      "Responses to clients by result (moved: connections answered M)")                            \
    X(res_released, counter, responses, "result=\"released\"", "")                                 \
    X(res_busy, counter, responses, "result=\"busy\"", "")                                         \
    X(res_timeout, counter, responses, "result=\"timeout\"", "")                                   \
    X(res_not_held, counter, responses, "result=\"not_held\"", "")                                 \
    X(res_query, counter, responses, "result=\"query\"", "")                                       \
    X(res_wrong_group, counter, responses, "result=\"wrong_group\"", "")                           \
    X(moved, counter, responses, "result=\"moved\"", "")                                           \
    X(conn_errors, counter, conn_errors, "", "Connections closed by a connection-level error")     \
    X(inflight_paused, counter, inflight_paused, "", "Times a connection hit the in-flight bound") \
    X(keys, gauge, keys, "", "Keys in the lock table")                                             \
    X(held, gauge, held, "", "Keys held")                                                          \
    X(waiters, gauge, waiters, "", "Queued acquires")                                              \
    X(deferred, gauge, deferred, "", "Requests waiting behind an in-flight proposal")              \
    X(in_flight, gauge, in_flight, "", "Keys with a proposal in flight")                           \
    X(grants, counter, grants, "", "Grants applied (handoffs included)")                           \
    X(handoffs, counter, handoffs, "", "Handoffs applied")                                         \
    X(releases, counter, releases, "", "Releases applied")                                         \
    X(expiries, counter, expiries, "", "Lease expiries applied")                                   \
    X(busy_bound, counter, busy_bound, "", "B answers caused by a bound")                          \
    X(ring_full, counter, ring_full, "", "Times a ring was full and a message waited in overflow") \
    X(reads_held, gauge, reads_held, "", "Q/N replies waiting for a read barrier")                 \
    X(read_barriers, counter, read_barriers, "", "Read barriers asked of the Raft thread")

#define TK_WSTAT_ENUM(name, type, family, label, help) TK_WSTAT_##name,
enum { TK_WSTAT_MAP(TK_WSTAT_ENUM) TK_WSTAT_COUNT };
#undef TK_WSTAT_ENUM

struct tk_worker;
struct tk_raftd;
struct tk_tls_ctx;

struct tk_server {
    struct tk_options opt;
    uint8_t client_secret[4096];
    size_t client_secret_len;
    uint8_t peer_secret[4096];
    size_t peer_secret_len;
    uint64_t node_id;
    char advertise[TK_ADDR_MAX];

    /* TLS on the client port: tls is fixed before the threads start. The
     * context is swapped by a reload (SIGHUP, main thread) while workers
     * take references to it at accept; tls_lock guards the pointer so a
     * reference is never taken on a context the reload just released.
     * Connections keep the context they started with. */
    bool tls;
    pthread_mutex_t tls_lock;
    struct tk_tls_ctx *tls_ctx;  /* guarded by tls_lock; NULL without TLS */
    _Atomic int peer_tls_reload; /* SIGHUP: the Raft thread reloads the peer port's */

    uint32_t nworkers;
    struct tk_worker *workers[TK_WORKERS_MAX];
    struct tk_raftd *raft;
    /* The rings and wakeups between the workers and the Raft thread,
     * published by the side that owns each when it is created (the
     * workers' first): the other side reads them here and never calls
     * into its peer's file. */
    struct tk_ring *from_raft[TK_WORKERS_MAX]; /* Raft thread -> worker i */
    struct tk_ring *to_raft[TK_WORKERS_MAX];   /* worker i -> Raft thread */
    struct tk_wake *worker_wake[TK_WORKERS_MAX];
    struct tk_wake *raft_wake;      /* what the workers' proposals signal */
    struct tk_wake *raft_loop_wake; /* wakes the thread that runs the Raft loop */
    /* --threads 1: worker 0 runs the Raft loop between its own rounds
     * (tk_raftd_inline_*), so a commit costs no wakeup between threads. */
    bool raft_inline;

    _Atomic int draining; /* SIGTERM: hand leadership over, then stop */
    _Atomic int stopping;
    _Atomic int failed;                    /* a thread could not run: exit non-zero */
    _Atomic int removed;                   /* no longer a member (SPEC 10): exit 3 */
    _Atomic uint64_t conns;                /* client connections open (bound) */
    _Atomic uint64_t domain_lo, domain_hi; /* fencing domain, 0 until known */
    /* Monotonic time of each loop's latest round: workers 0..n-1, the Raft
     * thread at TK_WORKERS_MAX. /healthz fails when one stops moving. */
    _Atomic uint64_t progress_us[TK_WORKERS_MAX + 1];
    _Atomic uint64_t wstats[TK_WORKERS_MAX][TK_WSTAT_COUNT];
    /* Keys held per slot in each worker's shard, published with wstats
     * once a ring is committed (/status: keys held per range). Rows of
     * workers that do not exist stay untouched (no memory). */
    _Atomic uint32_t slot_held[TK_WORKERS_MAX][TK_SLOTS];
    /* Per worker, written by that worker only (us): acquire_hist as it
     * sends a G (from reading the acquire), wait_hist as a waiter of its
     * shard leaves the queue for its grant. */
    struct tk_hist acquire_hist[TK_WORKERS_MAX];
    struct tk_hist wait_hist[TK_WORKERS_MAX];
};

/* Workers (net/worker.c). */
int tk_worker_create(struct tk_server *s, uint32_t idx);
int tk_worker_start(struct tk_server *s, uint32_t idx);
void tk_worker_join(struct tk_server *s, uint32_t idx);
void tk_worker_destroy(struct tk_server *s, uint32_t idx);
/* The ring and wakeup a producer uses to reach worker idx (published at
 * tk_worker_create). */
static inline struct tk_ring *tk_worker_inbox_from_raft(struct tk_server *s, uint32_t idx)
{
    return s->from_raft[idx];
}
static inline struct tk_ring *tk_worker_outbox_to_raft(struct tk_server *s, uint32_t idx)
{
    return s->to_raft[idx];
}
static inline struct tk_wake *tk_worker_wake(struct tk_server *s, uint32_t idx)
{
    return s->worker_wake[idx];
}

/* The Raft thread (net/raftd.c). */
int tk_raftd_create(struct tk_server *s);
int tk_raftd_start(struct tk_server *s);
/* Waits for the Raft loop to end (it hands leadership over first when
 * draining). Inline, it ends on worker 0: workers_running says whether
 * that worker runs at all. */
void tk_raftd_join(struct tk_server *s, bool workers_running);
void tk_raftd_destroy(struct tk_server *s);
/* The wakeup a worker's proposals signal: the Raft thread's, or, inline, a
 * local one that costs nothing (the same thread reads them). Published
 * at tk_raftd_create. */
static inline struct tk_wake *tk_raftd_wake(struct tk_server *s)
{
    return s->raft_wake;
}
/* Wakes the thread that runs the Raft loop (any thread). */
static inline void tk_raftd_poke(struct tk_server *s)
{
    tk_wake_signal(s->raft_loop_wake);
}
/* Inline Raft loop (s->raft_inline), called by worker 0 only.
 * fd: a file that turns readable when peer I/O completed (-1: none); the
 * worker polls it in its own ring. io: reaps peer I/O and publishes what
 * committed, before the worker drains its rings. round: the rest of a
 * Raft round after the worker's flush (proposals, timers, sends); false
 * once the loop has ended. wait_us: before the worker sleeps, clears the
 * loop's wakeup and says how long it may sleep (0: work is waiting). */
int tk_raftd_inline_fd(struct tk_server *s);
unsigned tk_raftd_inline_io(struct tk_server *s);
bool tk_raftd_inline_round(struct tk_server *s, unsigned *work);
uint64_t tk_raftd_inline_wait_us(struct tk_server *s);
/* A member of a domain that knows its leader (/readyz). */
bool tk_raftd_ready(struct tk_server *s);
/* Thread-safe readers of what the Raft thread published last (at most
 * 100 ms ago), into buf (cap bytes); their length. tk_raftd_metrics: the
 * Raft metrics (cut at cap). tk_raftd_status: /status's Raft fields, the
 * members of its object without the braces; tk_raftd_members: the whole
 * /members document. Both JSON texts come whole or not at all (0). */
size_t tk_raftd_metrics(struct tk_server *s, char *buf, size_t cap);
size_t tk_raftd_status(struct tk_server *s, char *buf, size_t cap);
size_t tk_raftd_members(struct tk_server *s, char *buf, size_t cap);

/* The admin HTTP thread (net/admin.c). */
int tk_admin_start(struct tk_server *s);
void tk_admin_join(struct tk_server *s);

/* Monotonic and wall clocks in microseconds (net/log.c). */
uint64_t tk_now_us(void);
uint64_t tk_wall_us(void);

/* How a listening port is held. The workers share the client port through
 * SO_REUSEPORT; the first of them checks that no other socket holds it,
 * since the kernel would otherwise let a second process of the same user
 * (or a predecessor's listener not yet released) share it silently and
 * take some of its connections. */
enum tk_listen_share {
    TK_LISTEN_ALONE,       /* no SO_REUSEPORT */
    TK_LISTEN_SHARE_FIRST, /* SO_REUSEPORT, and nobody else holds the port */
    TK_LISTEN_SHARE_MORE,  /* SO_REUSEPORT beside this process's first */
};

/* Listening socket helper: SO_REUSEADDR, the sharing above, backlog; a
 * port in use is retried for up to 5 s. Returns the fd, or -1. */
int tk_listen(const char *host, uint32_t port, enum tk_listen_share share);

/* A multishot accept that must never stay disarmed: after a completion
 * without IORING_CQE_F_MORE it is re-armed, at once after a success and
 * after a backoff (10 ms doubling to 1 s) after an error such as EMFILE,
 * so a listener neither dies nor spins while descriptors are short. */
struct tk_accept {
    bool armed;
    uint64_t retry_at_us;
    uint64_t backoff_us;
    uint64_t errors; /* accept errors, for /metrics */
};
/* Records one accept completion (res as in the CQE); what names the
 * listener in the log line, written once per run of errors. */
void tk_accept_done(struct tk_accept *a, int res, bool more, uint64_t now_us, const char *what);
/* True when the accept is disarmed and may be armed again now. */
static inline bool tk_accept_due(const struct tk_accept *a, uint64_t now_us)
{
    return !a->armed && now_us >= a->retry_at_us;
}

#endif
