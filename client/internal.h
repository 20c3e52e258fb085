/* libticketing internals: the client object, its requests and connections,
 * shared by client.c (public calls, request pool), loop.c (the I/O thread:
 * timers, dispatch, outcomes), conn.c (one connection's life and output,
 * TLS included), conn_read.c (its input: lines, the handshake, answers)
 * and resolve.c (host names). stream.c (client/stream.h) holds the
 * connection code they share with ticketctl.
 *
 * Ownership. Fields under "shared" are guarded by client->mu and touched by
 * API threads and the I/O thread alike; everything under "I/O thread" is
 * touched by the I/O thread only, so it needs no lock. A request is owned by
 * the API side until it is on the submission list, by the I/O thread from
 * then until it is freed back to the pool (under mu).
 */
#ifndef TK_CLIENT_INTERNAL_H
#define TK_CLIENT_INTERNAL_H

#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>

#include "client/ticketing.h"
#include "core/auth.h"
#include "core/handshake.h"
#include "core/proto.h"
#include "core/slots.h"
#include "core/tk.h"
#include "core/tls.h"

#define CL_ADDRS_MAX 8 /* configured addresses */
#define CL_EXTRA_MAX 4 /* connections to M-hinted addresses not configured */
#define CL_CONNS_MAX (CL_ADDRS_MAX + CL_EXTRA_MAX)
#define CL_HOST_MAX 255
#define CL_ADDR_TEXT_MAX (CL_HOST_MAX + 2 + 1 + 5 + 1) /* "[host]:port" + NUL */
#define CL_POOL_CHUNK 256                              /* requests per pool chunk */
#define CL_RBUF_SIZE (64 * 1024)
#define CL_WBUF_HIGH (64 * 1024) /* no new request is queued above this */
#define CL_WBUF_SIZE (CL_WBUF_HIGH + 2 * TK_LINE_MAX)
#define CL_PROBE_ID 0 /* the wire id of the probe ping; requests start at 1 */
#define CL_ZOMBIE_LINGER_US (30u * 1000000u)
#define CL_ERR_MAX 512         /* tk_client_last_error()'s sentence */
#define CL_TLS_RECV_SIZE 16384 /* ciphertext read per recv() */
#define CL_TLS_WRITE_MAX 16384 /* plaintext handed to TLS at once: one record */

_Static_assert(CL_ADDR_TEXT_MAX <= sizeof(((struct tk_client_stats *)0)->leader_hint),
               "the leader hint fits in the stats");
_Static_assert(TK_CLIENT_KEY_MAX == TK_KEY_LEN_MAX, "public and core limits agree");
_Static_assert(TK_CLIENT_OWNER_MAX == TK_OWNER_LEN_MAX, "public and core limits agree");
_Static_assert(TK_CLIENT_RING_TEXT_MAX == TK_SLOTS_RANGES_MAX * (TK_SLOTS_RANGE_TEXT_MAX + 1) - 1,
               "the longest body: every range at its longest, joined by ';'");

/* Where a request is on its way to the server. */
enum cl_wire {
    CL_WIRE_NONE = 0, /* submitted or pending: on no connection */
    CL_WIRE_QUEUED,   /* formatted into a connection's write buffer, no byte written */
    CL_WIRE_SENT,     /* at least one byte written: holds its id until answered */
};

struct cl_conn;

struct cl_req {
    struct cl_req *next; /* submission list, pending list or a conn's unsent list */
    struct cl_req *prev;
    uint32_t index;    /* in the pool */
    uint32_t gen;      /* bumped at every free: stale handles don't match */
    char type;         /* 'A' 'R' 'Q' 'P' 'S' */
    uint8_t wire;      /* enum cl_wire */
    bool pending;      /* on a pending list */
    bool decided;      /* outcome delivered; on the wire it is a zombie */
    bool neutered;     /* its unsent line was turned into "X ..." (answered E) */
    bool compensation; /* an internal release of a late grant */
    bool resent;       /* a release written a second time */
    bool cancel;       /* tk_client_cancel() reached it */
    uint16_t key_len;
    char key[TK_KEY_LEN_MAX + 1];
    uint32_t lease_ms;
    uint32_t wait_ms;      /* as asked */
    uint32_t wait_sent_ms; /* as written: what was left of the budget */
    uint64_t token;        /* R */
    uint64_t submit_us;
    uint64_t sent_us;     /* first byte written, 0 if never */
    uint64_t deadline_us; /* the heap key */
    uint32_t heap_idx;    /* UINT32_MAX when not in the heap */
    struct cl_conn *conn; /* while wire != NONE */
    uint64_t wire_id;
    uint64_t stream_pos; /* offset of the line's first byte in the conn's output */
    /* S: the caller's buffer (NULL once decided: the caller may have
     * freed it) and what the answer's lines gave so far on this attempt;
     * ring_len counts the whole body, also past ring_cap. conn_read.c
     * checks the parts' order. */
    char *ring_buf;
    size_t ring_cap;
    size_t ring_len;
    uint64_t ring_version; /* of part 1 */
    uint32_t ring_part;    /* parts received */
    uint32_t ring_parts;   /* n, as part 1 said */
    void (*done)(void *arg, const struct tk_client_result *result);
    void *arg;
};

struct cl_list {
    struct cl_req *head;
    struct cl_req *tail;
};

enum cl_conn_state {
    CL_CONN_IDLE = 0,   /* waiting for next_attempt_us */
    CL_CONN_RESOLVING,  /* host name lookup on the resolver thread */
    CL_CONN_CONNECTING, /* non-blocking connect in progress */
    CL_CONN_TLS,        /* TLS handshake in progress (tls_ca_file set) */
    CL_CONN_BANNER,     /* waiting for "TICKETING/1 <snonce>" */
    CL_CONN_AUTH,       /* AUTH sent, waiting for OK (or E - auth) */
    CL_CONN_PROBE,      /* server proof checked, "P 0" sent: an M may still come */
    CL_CONN_READY,      /* the probe was answered: requests may go here */
    CL_CONN_RETIRED,    /* an extra connection whose hint moved on */
};

struct cl_conn {
    struct tk_client *client;
    unsigned index;
    bool extra;    /* made for an M hint, not configured */
    uint8_t state; /* enum cl_conn_state */
    int fd;
    uint32_t epoll_events;       /* what fd is registered for (0: not registered) */
    char addr[CL_ADDR_TEXT_MAX]; /* as configured or as the M line said */
    char host[CL_HOST_MAX + 1];
    char port[6];
    bool numeric; /* host is an IP literal: no lookup needed */
    struct sockaddr_storage sa;
    socklen_t sa_len;
    uint32_t backoff_ms;          /* the next failure waits about this long */
    uint64_t next_attempt_us;     /* IDLE */
    uint64_t attempt_deadline_us; /* RESOLVING .. PROBE */
    struct tk_hs hs;              /* BANNER and AUTH: the SPEC 2 handshake (core/handshake.h) */
    uint64_t probe_sent_us;
    /* TLS (NULL: plaintext): made at TCP connect, freed at teardown. Bytes
     * from the socket go in as ciphertext; rbuf receives the plaintext.
     * wbuf holds plaintext that TLS has not taken yet, so "written" below
     * means "handed to TLS" (which happens only once the ciphertext before
     * it has left): a request is never believed unsent when it may have
     * left. */
    struct tk_tls *tls;
    bool tls_seen;    /* the first byte of this attempt was looked at */
    bool tls_refused; /* the last attempt failed on certificates or met a
                         plaintext server: a configuration error */
    bool got_bytes;   /* this attempt received something (timeout hint) */
    /* input */
    char *rbuf;
    size_t rlen;
    /* output: bytes [whead, whead + wlen) of wbuf sit at stream offsets
     * [out_written, out_appended) */
    char *wbuf;
    size_t whead;
    size_t wlen;
    uint64_t out_appended;
    uint64_t out_written;
    struct cl_list unsent; /* QUEUED requests in stream order */
    /* requests on this connection by wire id: slot = id & mask */
    struct cl_req **slots;
    uint32_t mask;
    uint32_t inflight;
    uint64_t next_id;
};

/* A host name lookup handed to the resolver thread (one per conn). */
struct cl_lookup {
    uint8_t state; /* 0 idle, 1 asked, 2 answered */
    bool ok;
    char host[CL_HOST_MAX + 1];
    char port[6];
    struct sockaddr_storage sa;
    socklen_t sa_len;
};

struct tk_client {
    /* ---- immutable after create ---- */
    struct tk_client_config cfg; /* numbers with defaults applied; strings not kept */
    char owner[TK_OWNER_LEN_MAX + 1];
    size_t owner_len;
    uint8_t secret[TK_AUTH_SECRET_MAX];
    size_t secret_len;
    uint32_t pool_cap;
    struct tk_tls_ctx *tls_ctx;            /* NULL: plaintext */
    char tls_server_name[CL_HOST_MAX + 1]; /* "" : the host dialled */
    char tls_ca_file[256];                 /* for error messages */
    bool tls_client_cert;                  /* a client certificate is configured */
    int efd; /* eventfd: API threads and the resolver wake the I/O thread */
    int epfd;
    pthread_t io_thread;
    bool io_started;

    /* ---- shared, under mu ---- */
    pthread_mutex_t mu;
    pthread_cond_t ready_cond;   /* connections_ready went above 0 */
    char last_error[CL_ERR_MAX]; /* tk_client_last_error() */
    struct cl_req **chunks;
    uint32_t nchunks;
    uint32_t pool_len; /* requests ever carved from chunks */
    struct cl_req *free_list;
    struct cl_list submitted;
    uint64_t *cancels;
    size_t ncancels;
    size_t cancels_cap;
    uint32_t live_requests; /* acquire, query, ping: <= requests_max */
    uint32_t live_releases; /* releases and compensations: <= release_queue_max */
    bool stopping;
    uint32_t ready_count;
    char leader_hint[CL_ADDR_TEXT_MAX];
    atomic_bool wake_pending;

    /* ---- resolver thread, under rmu ---- */
    pthread_mutex_t rmu;
    pthread_cond_t rcond;
    pthread_t resolver;
    bool resolver_started;
    bool resolver_stop;
    struct cl_lookup lookups[CL_CONNS_MAX];

    /* ---- statistics: written by the I/O thread, read by anyone ---- */
    atomic_uint_fast64_t st_connect_attempts;
    atomic_uint_fast64_t st_handshakes;
    atomic_uint_fast64_t st_auth_failures;
    atomic_uint_fast64_t st_moved;
    atomic_uint_fast64_t st_written;
    atomic_uint_fast64_t st_compensations;
    atomic_uint_fast64_t st_compensations_dropped;
    atomic_uint_fast64_t st_indeterminate;
    atomic_uint nconns_pub;

    /* ---- I/O thread only ---- */
    struct cl_conn *conns[CL_CONNS_MAX];
    unsigned nconns;
    unsigned nconfigured;
    unsigned rr;                /* round-robin cursor */
    int leader;                 /* index of the conn the last M named, -1 if none */
    struct cl_list pending_rel; /* the release queue's requests not on a wire */
    struct cl_list pending;     /* acquires, queries, pings not on a wire */
    struct cl_req **heap;       /* by deadline_us */
    uint32_t heap_len;
    uint32_t heap_cap;
    struct cl_req *to_free; /* freed this round; returned to the pool under mu */
    struct tk_prng prng;
    bool draining; /* stopping seen: only releases go on */
    uint64_t drain_deadline_us;
    uint32_t wire_acquires; /* acquires holding an id on some connection */

    /* ---- routing (client/route.c): the seed's only; NULL in a child ---- */
    struct cl_route *route;
};

/* What a call asks for (client.c's submission). submit_us 0: now; a
 * request resent after W keeps its first call's time, so its budget
 * counts from there (client/route.c). */
struct cl_submit_args {
    char type;
    const char *key;
    uint32_t lease_ms;
    uint32_t wait_ms;
    uint64_t token;
    char *ring_buf; /* S */
    size_t ring_cap;
    uint64_t submit_us;
    void (*done)(void *arg, const struct tk_client_result *result);
    void *arg;
};

/* Set on every thread the library runs callbacks on (I/O threads, the
 * routing thread): the blocking calls refuse to run there. */
extern _Thread_local bool cl_on_client_thread;

/* client.c */
uint64_t cl_now_us(void);
/* Checks a's fields as the server would (reason: the bad one's word),
 * and that it has a callback. */
int cl_submit_check(const struct cl_submit_args *a, size_t *key_len, char *reason);
/* Hands one request to c's I/O thread (no routing); *handle for cancel. */
int cl_submit(struct tk_client *c, const struct cl_submit_args *a, uint64_t *handle, char *reason);
/* tk_client_cancel without routing (a handle of c's own pool). */
int cl_cancel(struct tk_client *c, uint64_t handle);
/* Runs a to its outcome on c (keyed requests routed; no thread check). */
enum tk_client_outcome cl_blocking(struct tk_client *c,
                                   struct cl_submit_args *a,
                                   struct tk_client_result *out);
/* A client of another group for the routing of seed: seed's settings
 * (numbers, owner, secret, TLS, log) and addrs. */
int cl_child_create(const struct tk_client *seed, const char *addrs, struct tk_client **out);
/* client_cfg.c: checks cfg and keeps it in c (numbers, TLS, secret,
 * owner, addresses); TK_CLIENT_ENONE or the error, its reason logged. */
int cl_configure(struct tk_client *c, const struct tk_client_config *cfg);
/* The same for a child of seed (cl_child_create). */
int cl_configure_child(struct tk_client *c, const struct tk_client *seed, const char *addrs);
void cl_log(struct tk_client *c, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
struct cl_req *cl_req_at(struct tk_client *c, uint32_t index); /* under mu */
/* Allocates a compensation release (I/O thread); NULL if the queue is full. */
struct cl_req *cl_compensation_new(struct tk_client *c,
                                   const char *key,
                                   size_t key_len,
                                   uint64_t token);
void cl_wake(struct tk_client *c);
/* Gives this round's freed requests (c->to_free) back to the pool. */
void cl_pool_return(struct tk_client *c);

/* loop.c */
void *cl_io_main(void *arg);
void cl_list_push_back(struct cl_list *l, struct cl_req *r);
void cl_list_push_front(struct cl_list *l, struct cl_req *r);
void cl_list_remove(struct cl_list *l, struct cl_req *r);
void cl_heap_set(struct tk_client *c, struct cl_req *r, uint64_t deadline_us);
void cl_heap_remove(struct tk_client *c, struct cl_req *r);
/* Decides a request's outcome and runs its callback. */
void cl_decide(struct tk_client *c, struct cl_req *r, struct tk_client_result *res);
/* Puts a request that holds no connection back on its pending list. */
void cl_repend(struct tk_client *c, struct cl_req *r, bool front);
/* Frees a decided request that holds no connection (end of the round). */
void cl_release_req(struct tk_client *c, struct cl_req *r);
/* An answer (or its absence) for a request on a connection. */
void cl_on_response(struct tk_client *c, struct cl_req *r, const struct tk_response *rsp);
void cl_on_sent(struct tk_client *c, struct cl_req *r, uint64_t now_us);
void cl_on_conn_lost(struct tk_client *c, struct cl_req *r); /* r was on a dead conn */
void cl_on_moved(struct tk_client *c, const char *addr, size_t len, uint64_t now_us);
/* Whether an answer of type rsp_type may answer r (else: protocol error). */
bool cl_response_fits(const struct cl_req *r, char rsp_type);
void cl_on_ready_change(struct tk_client *c, int delta);

/* conn.c */
struct cl_conn *cl_conn_new(struct tk_client *c, const char *addr, bool extra);
/* Points a closed (retired or new) connection at another address; it will
 * connect at next_attempt_us. Returns 0, or -1 for a bad address. */
int cl_conn_set_addr(struct cl_conn *k, const char *addr, uint64_t now_us);
void cl_conn_free(struct cl_conn *k);
void cl_conn_start(struct cl_conn *k, uint64_t now_us); /* an attempt now */
void cl_conn_event(struct cl_conn *k, uint32_t events, uint64_t now_us);
void cl_conn_timer(struct cl_conn *k, uint64_t now_us);
uint64_t cl_conn_next_timer(const struct cl_conn *k); /* UINT64_MAX if none */
void cl_conn_fail(struct cl_conn *k, const char *why, uint64_t now_us);
/* Every connection (not retired) failed its last attempt in TLS. */
bool cl_conns_tls_refused(const struct tk_client *c);
void cl_conn_retire(struct cl_conn *k, uint64_t now_us);
bool cl_conn_has_room(const struct cl_conn *k);
void cl_conn_queue(struct cl_conn *k, struct cl_req *r, uint64_t now_us);
void cl_conn_flush(struct cl_conn *k, uint64_t now_us);
void cl_conn_neuter(struct cl_conn *k, struct cl_req *r);
void cl_conn_drop_slot(struct cl_conn *k, struct cl_req *r);
void cl_conn_lookup_done(struct cl_conn *k, const struct cl_lookup *l, uint64_t now_us);
/* The I/O thread's TLS memory (wolfSSL's per-thread caches); called as it ends. */
void cl_tls_thread_end(void);
/* Between conn.c and conn_read.c. cl_conn_down closes the connection and
 * schedules the next attempt (record: a failure for tk_client_last_error();
 * tls_refused: a TLS configuration error); cl_conn_fail_tls does so with a
 * sentence for a TLS failure (rc from core/tls.h); cl_conn_tail gives room
 * for one more line at the end of wbuf, cl_conn_append counts the n bytes
 * written there. */
void cl_conn_down(struct cl_conn *k,
                  const char *why,
                  bool record,
                  bool tls_refused,
                  uint64_t now_us);
void cl_conn_fail_tls(struct cl_conn *k, int rc, uint64_t now_us);
char *cl_conn_tail(struct cl_conn *k, size_t *cap);
void cl_conn_append(struct cl_conn *k, size_t n);

/* conn_read.c */
/* Reads what the socket holds and handles every complete line. */
void cl_conn_read(struct cl_conn *k, uint64_t now_us);

/* route.c: routing by key across groups (docs/client.md, "Groups and
 * the ring"). Every keyed request goes through cl_route_submit; W answers
 * come back to the routing thread, which fetches the ring and resends. */
int cl_route_start(struct tk_client *seed);
int cl_route_submit(struct tk_client *seed,
                    const struct cl_submit_args *a,
                    uint64_t *handle,
                    char *reason);
int cl_route_cancel(struct tk_client *seed, uint64_t handle);
/* Stops the routing thread and the children (before seed's own stop). */
void cl_route_stop(struct tk_client *seed);
void cl_route_free(struct tk_client *seed);
/* Adds the children's figures and the routing's to *out. */
void cl_route_stats(struct tk_client *seed, struct tk_client_stats *out);

/* resolve.c */
int cl_resolve_ask(struct tk_client *c, unsigned index, const char *host, const char *port);
void cl_resolve_collect(struct tk_client *c, uint64_t now_us);
void cl_resolve_stop(struct tk_client *c);

#endif
