/* ticketing-bench: shared types of the load generator (threads, connections,
 * slots, the driver interface and the per-key checks).
 *
 * Ownership: one `struct bench` per process, built by main.c before any
 * thread starts and read-only afterwards except for the atomics in
 * `struct bkey` and the timeline. Each `struct bthread` owns its epoll
 * instance, its connections and their slots; nothing of a thread is touched
 * by another thread. Drivers see one connection at a time, on its thread.
 *
 * Vocabulary: a *slot* is one logical lock client (acquire, hold, release,
 * repeat). A connection carries `depth` slots (pipelining depth). Every
 * request a slot sends is recorded in its connection's in-flight ring so
 * that ordered protocols (RESP, HTTP/1.1) can match responses by position
 * and id-based ones (Ticketing) by id.
 */
#ifndef TK_BENCH_H
#define TK_BENCH_H

#include <netinet/in.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bench/hist.h"
#include "core/tk.h"

#define BENCH_ADDRS_MAX 5
#define BENCH_KEY_MAX 160 /* our key names stay far below SPEC 5's 250 */
#define BENCH_OWNER_MAX 48
#define BENCH_LOCKKEY_MAX 192 /* etcd's lock key, base64 */
#define BENCH_IN_CAP (256u << 10)
#define BENCH_REQ_MAX 640            /* one request, any driver (HTTP is the largest) */
#define BENCH_BACKLOG_MAX (1u << 20) /* open loop: arrivals waiting for a free slot */
#define BENCH_SLOT_BITS 16           /* Ticketing ids: slot index in the low bits */
#define BENCH_DEPTH_MAX (1u << BENCH_SLOT_BITS)

enum bench_scenario {
    SC_UNCONTENDED,
    SC_HOTKEY,
    SC_TICKETDROP,
    SC_FAILOVER,
    SC_MEMORY,
};

/* The outcome of one request, as a driver decoded it. */
enum bresp_kind {
    BR_GRANT,    /* acquired; token (0 if the system has none) */
    BR_TIMEOUT,  /* the wait elapsed: not acquired */
    BR_BUSY,     /* not acquired: held and no waiting asked, or a bound */
    BR_RELEASED, /* release done */
    BR_NOTHELD,  /* release found nothing to release */
    BR_ERROR,    /* the request was rejected (counted as an error) */
};

struct bresp {
    enum bresp_kind kind;
    bool has_id; /* id-matched protocol: id is valid */
    uint64_t id;
    uint64_t token; /* BR_GRANT: fencing token / revision, 0 if none */
};

enum slot_state {
    SL_IDLE,        /* nothing in flight; free for the next acquire */
    SL_ACQ,         /* acquire in flight */
    SL_RETRY,       /* client-side retry timer armed (Redis on a held key) */
    SL_HOLD,        /* granted; the critical section's timer is armed */
    SL_REL,         /* release in flight */
    SL_REL_PENDING, /* must (re)send a release once the connection is ready */
    SL_DONE,        /* memory scenario: keeps what it holds, sends nothing more */
};

struct bconn;

struct slot {
    struct bconn *conn;
    uint32_t index;  /* within its connection */
    uint32_t global; /* across the whole process */
    enum slot_state state;
    bool in_idle;        /* on its thread's idle list (open loop) */
    uint32_t key_gen;    /* bumped when an acquire became indeterminate */
    uint32_t bkey;       /* index into bench.keys, or UINT32_MAX */
    uint64_t seq;        /* request counter, for ids and owners */
    uint64_t req_id;     /* id of the request in flight */
    uint64_t acq_seq;    /* seq of the current acquire: the owner is o<global>.<acq_seq> */
    uint64_t key;        /* key number (meaning depends on the scenario) */
    uint64_t t_intended; /* ns: when the acquire should have been sent */
    uint64_t t_sent;     /* ns: when it was sent (the lease counts from here) */
    uint64_t t_granted;
    uint64_t t_rel_sent;
    uint64_t deadline;       /* ns: client-side wait deadline (Redis) */
    uint64_t grants_at_send; /* the key's grant count when the acquire was sent */
    uint64_t token;
    uint64_t timer_gen; /* invalidates armed timers */
    uint64_t probe_id;  /* FIFO probe in flight after the acquire, 0 = none */
    bool probed;        /* the probe came back before the grant */
};

/* A request in flight on a connection. */
struct inflight {
    uint32_t slot; /* index within the connection; UINT32_MAX: driver-internal */
    uint8_t op;    /* 'A' acquire, 'R' release, or a driver's own */
};

enum conn_state {
    CS_DOWN,       /* waiting for the reconnect timer */
    CS_CONNECTING, /* TCP connect in progress */
    CS_SETUP,      /* driver handshake / setup */
    CS_READY,
};

struct bthread;
struct tk_tls_ctx;
struct tk_tls;

struct bconn {
    struct bthread *th;
    uint32_t index; /* within the thread */
    uint32_t global;
    int fd;
    enum conn_state state;
    int addr;                    /* index into bench.addrs being used */
    struct sockaddr_in redirect; /* Ticketing M hint, if redirect_set */
    bool redirect_set;
    uint32_t backoff_ms;
    uint64_t timer_gen;
    char *in;
    size_t in_len;
    char *out;
    size_t out_len, out_cap, out_sent;
    bool want_write;       /* EPOLLOUT armed */
    bool dirty;            /* on the thread's flush list */
    struct inflight *ring; /* in-flight requests, FIFO */
    uint32_t ring_cap, ring_head, ring_len;
    struct slot *slots;
    uint32_t nslots;
    void *drv; /* driver state */
    uint64_t connects;
    bool closing; /* the driver asked for a redirect or close */
    bool warned;
    /* TLS (--tls-ca): made when TCP is up, freed with the connection. The
     * driver sees plaintext in `in` and writes plaintext to `out`; loop.c
     * moves ciphertext between this and the socket. */
    struct tk_tls *tls;
    bool tls_seen; /* the first byte received was looked at */
};

/* Counters of one thread; main.c sums them. Only events inside the
 * measurement window are counted, except the setup and error counters. */
struct bcount {
    uint64_t acquires; /* acquires sent */
    uint64_t grants;
    uint64_t timeouts;
    uint64_t busy;
    uint64_t released;
    uint64_t notheld;
    uint64_t errors;        /* E responses, bad responses */
    uint64_t retries;       /* client-side retries (Redis) */
    uint64_t indeterminate; /* acquires whose connection died */
    uint64_t unavailable;   /* answers saying "no leader now" (etcd) */
    uint64_t reconnects;
    uint64_t redirects;
    uint64_t dropped;     /* open loop: arrivals lost to a full backlog */
    uint64_t conn_errors; /* connections that failed or closed */
    /* checks */
    uint64_t double_holder; /* a key granted while another holder's lease ran */
    uint64_t token_order;   /* a token not above the key's previous one */
    uint64_t fifo_bypass;   /* waits that saw more grants than the queue allows */
    uint64_t bypass_max;
    uint64_t bypass_sum, bypass_n;
    uint64_t mem_acquired; /* memory scenario */
};

struct timer_ent {
    uint64_t at; /* ns */
    uint64_t gen;
    void *obj;    /* slot or conn */
    uint8_t kind; /* TM_* in loop.c */
};

struct bthread {
    struct bench *b;
    int index;
    int epfd;
    struct bconn *conns;
    uint32_t nconns;
    struct timer_ent *heap;
    uint32_t heap_len, heap_cap;
    struct bconn **flush; /* connections with output to send */
    uint32_t nflush;
    /* open loop */
    uint64_t *backlog; /* intended send times waiting for a slot */
    uint32_t bl_head, bl_len;
    uint32_t nidle;
    uint64_t next_arrival; /* ns */
    uint64_t arrival_ns;   /* interval between arrivals of this thread */
    struct bhist hist;     /* acquire latency */
    struct bhist hist_rel; /* release latency */
    struct bcount cnt;
    struct tk_prng prng;
    bool stopping;               /* no new acquires */
    atomic_uint_fast64_t active; /* slots with work outstanding (while stopping) */
    uint32_t nslots;             /* slots of this thread */
    struct slot **idle_ring;     /* open loop: free slots, FIFO */
    uint32_t idle_head;
};

/* Per-key shared state for the safety and FIFO checks. */
struct bkey {
    atomic_flag lock;      /* short spin lock around the fields below */
    uint32_t holder;       /* slot global id + 1, 0 = none */
    uint64_t holder_until; /* ns: holder's lease end as the client counts it */
    uint64_t last_token;
    atomic_uint_fast64_t grants;
};

struct bench_driver;

struct bench {
    const struct bench_driver *drv;
    enum bench_scenario scenario;
    const char *scenario_name;
    const char *label;
    const char *case_name;
    struct sockaddr_in addrs[BENCH_ADDRS_MAX];
    int naddrs;
    char addr_text[256];
    uint8_t secret[4096];
    size_t secret_len;
    /* TLS for the ticketing driver: NULL = plaintext. Read-only once the
     * threads run, except the first fatal TLS failure (certificates, a
     * plaintext server), which the first thread to meet it writes into
     * tls_error before it sets tls_failed; main.c then stops waiting. */
    struct tk_tls_ctx *tls_ctx;
    char tls_server_name[256]; /* "": the address dialled */
    atomic_bool tls_error_claimed;
    atomic_bool tls_failed;
    char tls_error[512];
    /* shape */
    uint32_t nthreads, nconns, depth;
    double rate; /* open loop: acquires per second in all; 0 = closed loop */
    double warmup_s, duration_s, drain_s;
    uint32_t lease_ms, wait_ms, hold_ms;
    uint64_t nkeys; /* ticketdrop, failover */
    double zipf_s;
    uint64_t mem_keys;    /* memory: keys to hold */
    uint64_t mem_waiters; /* memory (Ticketing): waiters to queue */
    uint32_t mem_waiter_keys;
    int rss_pid;
    uint32_t admin_port; /* Ticketing memory: poll /status "waiters" */
    char prefix[48];     /* key prefix unique to this run */
    /* --slots: keys only of slots slot_lo..slot_hi (one group's share of
     * the ring, docs/scaling.md), 0..TK_SLOTS-1 by default */
    uint32_t slot_lo, slot_hi;
    bool fifo_check;     /* judge the bypass count (FIFO) */
    bool fifo_probe;     /* follow each acquire by a ping that marks its arrival */
    uint32_t fifo_bound; /* most grants to others a waiter may see */
    /* derived */
    struct bthread *threads;
    struct bkey *keys;
    uint64_t nbkeys;
    double *zipf_cdf;
    uint64_t t_start, t_measure, t_end, t_stop; /* ns */
    atomic_uint_fast32_t *timeline;             /* grants per ms since t_start */
    uint64_t timeline_len;
    atomic_bool stop;
    atomic_bool hard_stop;
    atomic_uint_fast64_t ready_conns;
    /* memory scenario: waiters phase (ticketing) */
    atomic_bool go;                    /* setup done: slots may start */
    atomic_uint_fast64_t grants_total; /* progress, for main.c */
    atomic_uint_fast64_t busy_total;
    uint64_t nslots; /* conns * depth */
};

/* The seam between the load engine and a system under test. Every
 * function runs on the connection's thread. Drivers append requests with
 * bench_out() and report outcomes with bench_response(). */
struct bench_driver {
    const char *name;
    bool ordered;      /* responses arrive in request order */
    bool client_retry; /* no server-side queue: retry every 1 ms until the wait ends */
    bool has_token;    /* grants carry a token/revision that must increase per key */
    bool fifo;         /* judge the FIFO check (Ticketing's promise); others: report it */
    size_t req_max;    /* bytes of the largest request it writes */
    /* Called once per process before threads start (load secrets etc.).
     * Returns 0 or -1 with a message on stderr. */
    int (*init)(struct bench *b);
    /* The TCP connection is up: start the handshake/setup (write into
     * c->out). Allocate c->drv on first use; it lives as long as c. */
    void (*open)(struct bconn *c);
    /* Bytes arrived in c->in[0..in_len): consume complete messages and
     * return how many bytes were consumed, or -1 to close the connection
     * (bad input). During setup call bench_ready() when done, or
     * bench_redirect() on a redirect (then return at once). */
    long (*input)(struct bconn *c);
    void (*acquire)(struct bconn *c, struct slot *s, const char *key, size_t key_len);
    void (*release)(struct bconn *c, struct slot *s, const char *key, size_t key_len);
    /* Optional: a request answered at once, in order after the slot's
     * acquire (Ticketing: "P <id>"), whose answer the driver reports with
     * bench_probe_answer(); it tells that the acquire has reached the server. */
    void (*probe)(struct bconn *c, struct slot *s);
    /* The slot's acquire became indeterminate (its connection died). */
    void (*lost)(struct bconn *c, struct slot *s);
    void (*free)(struct bconn *c);
};

extern const struct bench_driver bench_drv_ticketing;
extern const struct bench_driver bench_drv_etcd;
extern const struct bench_driver bench_drv_redis;

/* ---- engine API for drivers (loop.c) ---- */

uint64_t bench_now(void);
/* Reserves n bytes at the end of c's output; returns where to write, and
 * bench_out_commit() adds what was written. */
char *bench_out(struct bconn *c, size_t n);
void bench_out_commit(struct bconn *c, size_t n);
/* Records a request in flight (ordered protocols match on it). */
void bench_inflight_push(struct bconn *c, uint32_t slot, uint8_t op);
/* The oldest request in flight, or NULL. */
struct inflight *bench_inflight_head(struct bconn *c);
void bench_inflight_pop(struct bconn *c);
/* A response to a slot's request. */
void bench_response(struct bconn *c, const struct bresp *r);
/* The answer to a FIFO probe (see bench_driver.probe). */
void bench_probe_answer(struct bconn *c, uint64_t id);
/* Setup finished: the connection carries traffic from now on. */
void bench_ready(struct bconn *c);
/* Ticketing: reconnect to addr ("host:port", NULL = no leader known). */
void bench_redirect(struct bconn *c, const char *addr, size_t len);
/* len bytes of text as core/addr.h's host:port whose host is a 127.x.x.x
 * literal (this tool never sends traffic anywhere else), into *sa; false
 * with the reason in *why otherwise. */
bool bench_loopback_addr(const char *text, size_t len, struct sockaddr_in *sa, const char **why);
/* Logs a connection-level problem once per connection (stderr). */
void bench_conn_warn(struct bconn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- loop.c ---- */
int bench_thread_init(struct bthread *t);
void *bench_thread_main(void *arg);
void bench_thread_free(struct bthread *t);

/* ---- scenario.c ---- */
/* Chooses the key of the slot's next acquire and writes its name into buf.
 * Returns the name's length, or 0 if the slot has nothing more to do. */
size_t bench_key_next(struct bench *b, struct bthread *t, struct slot *s, char *buf);
/* Writes the name of the key the slot currently uses (same as the last
 * bench_key_next()). */
size_t bench_key_name(struct bench *b, struct slot *s, char *buf);
/* Checks run when a grant is observed / before a release is sent. */
void bench_check_grant(struct bench *b, struct bthread *t, struct slot *s, uint64_t now);
void bench_check_release(struct bench *b, struct slot *s);
void bench_check_acquire_sent(struct bench *b, struct slot *s);
void bench_check_arrived(struct bench *b, struct slot *s);
int bench_scenario_init(struct bench *b);
uint64_t bench_rand(struct bthread *t);

#endif
