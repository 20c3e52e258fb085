/* libticketing: the official C client of Ticketing, a distributed FIFO lock
 * service (SPEC 2-5, 11 and 15; docs/client.md is the user's guide).
 *
 * Threads. A client object owns one background I/O thread (epoll) that keeps
 * the connections, sends and receives, and runs every timer; plus, only when
 * an address is a host name, one resolver thread (getaddrinfo blocks). Every
 * function below may be called from any thread at any time, except where it
 * says otherwise. Routing by key (docs/client.md, "Groups and the ring")
 * adds a routing thread and, per other group, that group's I/O thread.
 * Completion callbacks run on an I/O thread (or, for a request that ended
 * without an answer after a W, on the routing thread): they must be
 * short and must not block; they may call the *_async functions and
 * tk_client_cancel(), never the blocking ones (those return at once with
 * INVALID, reason "thread", there) nor tk_client_destroy().
 *
 * Memory. The client copies everything it is given (addresses, secret,
 * owner, keys); nothing the caller passes needs to outlive the call. A
 * result handed to a callback is valid only during the callback.
 *
 * Public names: tk_client_* functions, struct tk_client_*, TK_CLIENT_*
 * constants. Plain structs, no typedefs. This header needs only the C
 * standard library.
 */
#ifndef TICKETING_H
#define TICKETING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define TK_CLIENT_API __attribute__((visibility("default")))
#else
#define TK_CLIENT_API
#endif

/* Field limits of SPEC 5, as the client checks them before sending. */
#define TK_CLIENT_KEY_MAX 250  /* bytes; each 0x21-0x7E */
#define TK_CLIENT_OWNER_MAX 64 /* bytes; each 0x21-0x7E */
#define TK_CLIENT_LEASE_MS_MIN 1000u
#define TK_CLIENT_LEASE_MS_MAX 250000u
#define TK_CLIENT_WAIT_MS_MAX 250000u
/* The absolute deadline of a release, counted from its enqueue (seed). */
#define TK_CLIENT_RELEASE_DEADLINE_MS 5000u

/* Failures of the calls themselves (0 = no failure). Expected outcomes of
 * requests (BUSY, TIMEOUT, ...) are not failures: see enum
 * tk_client_outcome. */
enum tk_client_error {
    TK_CLIENT_ENONE = 0,
    TK_CLIENT_EINVAL,       /* bad argument: key, lease, wait, token, config field */
    TK_CLIENT_ENOMEM,       /* out of memory, or the client's request bound is reached */
    TK_CLIENT_EFULL,        /* the release queue is full (release_async only) */
    TK_CLIENT_ESECRET,      /* the secret file is unreadable, or the secret too short/long */
    TK_CLIENT_EUNSUPPORTED, /* no longer returned (it meant "TLS not built yet"); kept
                               so that the values after it do not move */
    TK_CLIENT_ESYSTEM,      /* a system call failed (threads, epoll, eventfd) */
    TK_CLIENT_ESHUTDOWN,    /* tk_client_destroy() has begun */
    TK_CLIENT_ENOTFOUND,    /* tk_client_cancel(): no such request in progress */
    TK_CLIENT_ETLS,         /* the TLS settings cannot work: a file unreadable or not PEM,
                               a key that does not match its certificate, an expired
                               certificate, a certificate without its key (or the reverse),
                               TLS fields without tls_ca_file. tk_client_tls_check() says
                               which, in a sentence */
};
TK_CLIENT_API const char *tk_client_strerror(int err);

/* The outcome of one request. Each says exactly what the caller knows; the
 * table in docs/client.md says what the caller must do. */
enum tk_client_outcome {
    /* acquire */
    TK_CLIENT_ACQUIRED = 1,  /* G: you hold the key until you release it or
                                lease_deadline_us, whichever comes first */
    TK_CLIENT_TIMEOUT,       /* T: the wait elapsed before your turn; not acquired */
    TK_CLIENT_BUSY,          /* B: held and wait was 0, or a server bound; not acquired */
    TK_CLIENT_INVALID,       /* E <id> <reason>, or refused locally; nothing changed */
    TK_CLIENT_UNAVAILABLE,   /* not one byte of the request was ever written within its
                                budget: definitely not acquired (for a query, a ping or
                                a ring: no answer came within the budget) */
    TK_CLIENT_INDETERMINATE, /* written, no confirmed answer: you may or may not hold
                                the key; do NOT enter the critical section. Also
                                (reason "lease") a G that came only after the lease
                                counted from the first write had run out; the client
                                releases that token itself */
    TK_CLIENT_CANCELLED,     /* tk_client_cancel() or tk_client_destroy() came first:
                                treat as not acquired; a late grant is released */
    /* release */
    TK_CLIENT_RELEASED,    /* R: released (the key went to the next waiter or is free) */
    TK_CLIENT_NOT_HELD,    /* N: nothing is held under exactly (key, owner, token):
                              expired, released earlier, or never granted */
    TK_CLIENT_UNCONFIRMED, /* no R or N before the absolute 5 s deadline: never
                              assume success; the server-side lease is the safety net */
    TK_CLIENT_QUEUE_FULL,  /* the release queue is full; nothing was enqueued */
    /* query, ping, ring */
    TK_CLIENT_ANSWERED, /* Q, P or S answered; the fields below hold the answer */
    /* acquire, release, query (SPEC 15) */
    TK_CLIENT_WRONG_GROUP, /* W: the group at the address does not serve the key's slot
                              (slot, ring_version below). Definite: nothing changed
                              (not acquired, not released); the connection stays open.
                              A release so answered is not retried */
    /* New values go last: the numbers above are ABI. */
};
TK_CLIENT_API const char *tk_client_outcome_str(enum tk_client_outcome o);

/* What a request came to. Filled by the blocking calls, or handed to a
 * completion callback (valid during the callback only). */
struct tk_client_result {
    enum tk_client_outcome outcome;
    /* ACQUIRED: the fencing token, to be passed to every protected write.
     * ANSWERED query: the holder's token (0 when the key is free).
     * release: the token that was released. */
    uint64_t token;
    /* ACQUIRED: CLOCK_MONOTONIC microseconds (see tk_client_now_us()) by
     * which the lease ends for certain. It counts from the moment the first
     * byte of the acquire was written (SPEC 3: earlier than the server's
     * commit, hence safe). Finish the critical section before it. */
    uint64_t lease_deadline_us;
    /* When the first byte of the request was written (CLOCK_MONOTONIC
     * microseconds), 0 if it never was. */
    uint64_t sent_us;
    /* INVALID: the reason word ("key", "owner", "lease", "wait", "token",
     * "syntax", ...; "thread" for a blocking call from a callback). A
     * blocking call refused locally also names its cause here: UNAVAILABLE
     * "requests_max", CANCELLED "shutdown". UNAVAILABLE "tls": decided
     * early because every connection's last attempt failed in TLS (see
     * tk_client_last_error()). INDETERMINATE "lease": a grant came, but
     * only after lease_deadline_us as counted here, so it is lost already
     * and the client releases it (a compensation). Empty otherwise. */
    char reason[16];
    /* ANSWERED query: held is false when the key is free; owner is the
     * holder (NUL-terminated), waiters the queue length. */
    bool held;
    char owner[TK_CLIENT_OWNER_MAX + 1];
    uint32_t waiters;
    /* release: true if the request was written more than once (its
     * connection died after a write). NOT_HELD then may mean that an earlier
     * attempt did release the key. */
    bool resent;
    /* ANSWERED ping: the round trip in microseconds. */
    uint64_t rtt_us;
    /* The request's key, NUL-terminated ("" for a ping or a ring). */
    const char *key;
    /* Fields added later go here, after the older ones. The blocking
     * calls fill a struct the caller allocated, so a field added changes
     * the library's soname (libticketing.so.2 added the three below). */
    /* WRONG_GROUP: the key's slot as the server computed it (tk_client_slot()
     * computes the same). */
    uint32_t slot;
    /* WRONG_GROUP: the version of the ring the group judged by (0: it has
     * none yet), so a caller holding an older ring knows to fetch it again.
     * ANSWERED ring: the ring's version (0: the group has no ring). */
    uint64_t ring_version;
    /* ANSWERED ring: the length of the ring's whole body. If it is cap or
     * more, the buffer given holds only its first cap - 1 bytes: ask again
     * with a larger one. */
    size_t ring_len;
};

/* Configuration. Fill it with tk_client_config_init() first, then set what
 * you need: a zero numeric field means "the default" too. */
struct tk_client_config {
    /* "host:port,host:port", at most 8 addresses, no spaces; "[v6addr]:port"
     * for IPv6; hosts are IPv4 or IPv6 literals or DNS names, ports 1-65535
     * (docs/client.md has the rules). Required; a bad list fails
     * tk_client_create() with EINVAL and its reason goes to log. With
     * exactly one address the client keeps two connections to it, else one
     * per address. */
    const char *addrs;
    /* The client secret: either a file (its bytes less one trailing "\n" or
     * "\r\n", SPEC 2) or the bytes themselves. One of the two is required. */
    const char *secret_file;
    const void *secret;
    size_t secret_len;
    /* This client's owner name (1-64 bytes, 0x21-0x7E). NULL: a unique one
     * is made from the host name, the pid and random bits. */
    const char *owner;
    /* How long one connection attempt (TCP connect + TLS + handshake) may take.
     * Default 5000 ms. */
    uint32_t connect_timeout_ms;
    /* After an acquire was written, the client waits for its answer until
     * wait_ms (as sent) + response_grace_ms; past that it is INDETERMINATE.
     * Default 2000 ms. */
    uint32_t response_grace_ms;
    /* An acquire that cannot be written at once (no usable connection) may
     * wait for one during max(wait_ms, send_budget_min_ms) from the call;
     * then it is UNAVAILABLE. The floor lets wait_ms = 0 on a client that is
     * still connecting get its one try. Default 1000 ms. */
    uint32_t send_budget_min_ms;
    /* Budget of a query, ping or ring, from the call. Default 5000 ms. */
    uint32_t request_timeout_ms;
    /* Bound of the release queue (explicit releases and compensations in
     * progress). Default 1024. */
    uint32_t release_queue_max;
    /* Requests in progress in this client (all kinds). Default 65536. */
    uint32_t requests_max;
    /* Requests in flight on one connection (SPEC 14: the server's default is
     * 4096). Default 4096. */
    uint32_t inflight_per_connection_max;
    /* Reconnect backoff (seed: 0.1 s doubling to at most 3.2 s, with jitter:
     * each delay is drawn in [3/4, 1] of the current step). Defaults 100 and
     * 3200 ms. */
    uint32_t backoff_min_ms;
    uint32_t backoff_max_ms;
    /* TLS (docs/operations.md, "TLS"). With tls_ca_file set, every
     * connection is TCP, then TLS (1.2 or 1.3), then the handshake of SPEC 2
     * inside it. The server's certificate must chain to tls_ca_file and name
     * tls_server_name, or else the host of the address dialled (a host name
     * against its DNS names, an IP literal against its IP addresses; an M
     * hint's address is checked the same way). tls_cert_file and
     * tls_key_file (both or neither) are this client's certificate, for
     * servers that require one. NULL: plaintext TCP. Setting any of the
     * other three without tls_ca_file is refused (TK_CLIENT_ETLS), so that
     * nobody believes a plaintext connection is encrypted.
     *
     * A connection whose TLS handshake fails on the certificates (not
     * signed by the CA, wrong name, expired, a client certificate refused)
     * or that meets a plaintext server is a configuration error: it is
     * retried only every backoff_max_ms, and while every connection's last
     * attempt failed that way, requests not yet written end UNAVAILABLE at
     * once with reason "tls" instead of waiting out their budget.
     * tk_client_last_error() names the cause. */
    const char *tls_ca_file;
    const char *tls_cert_file;
    const char *tls_key_file;
    const char *tls_server_name;
    /* Optional log sink for connection events (connects, handshake
     * failures, M hints, compensations); NULL: silent. level: 0 error,
     * 1 warn, 2 info, 3 debug. Called on the I/O thread. */
    void (*log)(void *arg, int level, const char *message);
    void *log_arg;
};

/* Sets every field to its default (addrs, secret and owner to NULL). */
TK_CLIENT_API void tk_client_config_init(struct tk_client_config *cfg);

struct tk_client;

/* Creates a client and starts its I/O thread, which begins connecting at
 * once; the call does not wait for a connection. Returns TK_CLIENT_ENONE and
 * *out, or an error (EINVAL: bad addrs, owner or field; ESECRET; ETLS: the
 * TLS files or fields cannot work, see tk_client_tls_check(); ENOMEM;
 * ESYSTEM). */
TK_CLIENT_API int tk_client_create(const struct tk_client_config *cfg, struct tk_client **out);

/* Checks cfg's TLS fields the way tk_client_create() does: the files are
 * read and parsed, the key must match the certificate, no certificate may
 * be expired. Returns TK_CLIENT_ENONE (also when TLS is not configured), or
 * TK_CLIENT_ETLS with a NUL-terminated sentence naming the file and the
 * problem in err (cut to cap bytes; err may be NULL when cap is 0).
 * Needs no client; any thread. */
TK_CLIENT_API int tk_client_tls_check(const struct tk_client_config *cfg, char *err, size_t cap);

/* Stops the client. Acquires, queries and pings not yet decided complete
 * with CANCELLED at once. Releases already queued (explicit ones and
 * compensations) keep their 5 s deadline: this blocks until the release
 * queue is empty, at most about 5 s, and returns at once when it is empty
 * (a grant arriving meanwhile for a cancelled acquire is released too).
 * Then every connection closes, which removes this client's queued waiters
 * on the server; a grant still on its way then is freed by its lease. Not
 * from a callback. */
TK_CLIENT_API void tk_client_destroy(struct tk_client *c);

/* The owner name the client sends (NUL-terminated, owned by the client). */
TK_CLIENT_API const char *tk_client_owner(const struct tk_client *c);

/* CLOCK_MONOTONIC in microseconds: the clock of lease_deadline_us. */
TK_CLIENT_API uint64_t tk_client_now_us(void);

/* ---- blocking calls (not from a callback) ------------------------------ */

/* Acquires key for lease_ms (1000-250000), waiting at most wait_ms
 * (0-250000; 0 = one immediate try) for its turn. Blocks until the outcome
 * is known: at most about max(wait_ms, send_budget_min_ms) +
 * response_grace_ms. Returns the outcome and fills *out (may be NULL). Bad
 * arguments give INVALID with the reason, without a round trip. A group
 * that does not serve the key's slot answers WRONG_GROUP at once. */
TK_CLIENT_API enum tk_client_outcome tk_client_acquire(struct tk_client *c,
                                                       const char *key,
                                                       uint32_t lease_ms,
                                                       uint32_t wait_ms,
                                                       struct tk_client_result *out);

/* Releases (key, this client's owner, token) through the release queue.
 * RELEASED, NOT_HELD, UNCONFIRMED (at the 5 s deadline at the latest),
 * QUEUE_FULL (at once), INVALID (bad key or token 0), or WRONG_GROUP (the
 * group does not serve the key's slot: nothing was released there, and
 * the release is not sent again). */
TK_CLIENT_API enum tk_client_outcome tk_client_release(struct tk_client *c,
                                                       const char *key,
                                                       uint64_t token,
                                                       struct tk_client_result *out);

/* The committed holder of key (linearizable read): ANSWERED with held,
 * owner, token and waiters; UNAVAILABLE if no answer came within
 * request_timeout_ms; INVALID for a bad key; WRONG_GROUP if the group does
 * not serve the key's slot. A query is a read, so it is resent on another
 * connection if its connection dies. */
TK_CLIENT_API enum tk_client_outcome tk_client_query(struct tk_client *c,
                                                     const char *key,
                                                     struct tk_client_result *out);

/* The slot of a key (SPEC 15): FNV-1a 64 of its len bytes modulo
 * TK_CLIENT_SLOTS. A deployment of several groups maps each slot to one
 * group; every client computes the same number, and routes each request
 * to the group its ring names for the slot (docs/client.md, "Groups and
 * the ring"). Needs no client object. */
#define TK_CLIENT_SLOTS 16384u
TK_CLIENT_API uint32_t tk_client_slot(const char *key, size_t len);

/* One round trip: ANSWERED with rtt_us, or UNAVAILABLE. */
TK_CLIENT_API enum tk_client_outcome tk_client_ping(struct tk_client *c,
                                                    struct tk_client_result *out);

/* The longest ring body (docs/protocol.md, "The ring"): 1,024 ranges of at
 * most 721 bytes each, joined by ';'. A buffer of TK_CLIENT_RING_TEXT_MAX + 1
 * bytes holds any ring. */
#define TK_CLIENT_RING_TEXT_MAX 739327u

/* The ring (SPEC 15) of the group at the configured addresses, as its
 * leader answers S: ANSWERED with ring_version (0: no ring) and ring_len,
 * and the body in buf, NUL-terminated and cut to cap - 1 bytes: the ranges
 * "<first>-<last>=<group>@<addr>[,<addr>...]" joined by ';' in increasing
 * order, or "-" for none (core/slots.h reads it; an answer of several
 * lines comes here joined into one body). UNAVAILABLE if no answer came
 * within request_timeout_ms; INVALID "command" from a server that predates
 * rings. Like a query, it is resent on another connection if its
 * connection dies. buf may be NULL if cap is 0 (only the version and the
 * length are wanted; a NULL buf with cap > 0 is INVALID "buffer"). On any
 * other outcome than ANSWERED buf holds "". */
TK_CLIENT_API enum tk_client_outcome tk_client_ring(struct tk_client *c,
                                                    char *buf,
                                                    size_t cap,
                                                    struct tk_client_result *out);

/* Waits up to timeout_ms until at least one connection is usable (its
 * handshake and first ping done). Returns true if one is. Not needed before
 * requests; useful for tools and tests. */
TK_CLIENT_API bool tk_client_wait_ready(struct tk_client *c, uint32_t timeout_ms);

/* ---- asynchronous calls ------------------------------------------------ */

/* Each returns TK_CLIENT_ENONE when the request was accepted: the
 * completion callback done(arg, result) will then be called exactly once,
 * on the I/O thread, never from inside this call. Any other return means
 * nothing was started and done will not be called: EINVAL (bad argument),
 * ENOMEM (requests_max reached), EFULL (release queue full), ESHUTDOWN.
 *
 * tk_client_acquire_async() writes a handle for tk_client_cancel() into
 * *handle if handle is not NULL. */
TK_CLIENT_API int tk_client_acquire_async(struct tk_client *c,
                                          const char *key,
                                          uint32_t lease_ms,
                                          uint32_t wait_ms,
                                          void (*done)(void *arg,
                                                       const struct tk_client_result *result),
                                          void *arg,
                                          uint64_t *handle);
TK_CLIENT_API int tk_client_release_async(struct tk_client *c,
                                          const char *key,
                                          uint64_t token,
                                          void (*done)(void *arg,
                                                       const struct tk_client_result *result),
                                          void *arg);
TK_CLIENT_API int tk_client_query_async(struct tk_client *c,
                                        const char *key,
                                        void (*done)(void *arg,
                                                     const struct tk_client_result *result),
                                        void *arg);
TK_CLIENT_API int tk_client_ping_async(struct tk_client *c,
                                       void (*done)(void *arg,
                                                    const struct tk_client_result *result),
                                       void *arg);
/* As tk_client_ring(); the body goes into buf, which must stay valid
 * until done has been called (EINVAL: buf NULL with cap > 0). */
TK_CLIENT_API int tk_client_ring_async(struct tk_client *c,
                                       char *buf,
                                       size_t cap,
                                       void (*done)(void *arg,
                                                    const struct tk_client_result *result),
                                       void *arg);

/* Gives up an acquire. If its outcome is not decided yet, its callback runs
 * (soon, on the I/O thread) with CANCELLED; if the request was already
 * written, a grant that still arrives is released at once (known-token
 * compensation). If the outcome was decided first, the cancellation changes
 * nothing: the callback reports that outcome (and an ACQUIRED caller must
 * release as usual). Returns ENONE if the handle named an acquire still in
 * the client, ENOTFOUND if it is stale (the request is long finished). */
TK_CLIENT_API int tk_client_cancel(struct tk_client *c, uint64_t handle);

/* ---- introspection ----------------------------------------------------- */

/* The most recent connection failure, as one sentence that starts with the
 * address, e.g. "127.0.0.1:7400: TLS handshake failed: the peer's
 * certificate is not signed by our CA (...)" or "db1:7400: connect:
 * Connection refused". Copied NUL-terminated into buf (cut to cap bytes);
 * returns its full length, 0 if no connection has failed yet. A later
 * successful connection does not clear it (an M redirect is not a
 * failure and does not set it). */
TK_CLIENT_API size_t tk_client_last_error(struct tk_client *c, char *buf, size_t cap);

struct tk_client_stats {
    uint32_t connections;       /* connection slots (configured, plus M-hinted) */
    uint32_t connections_ready; /* handshake and first ping done */
    uint64_t connect_attempts;  /* TCP connects started */
    uint64_t handshakes;        /* handshakes whose server proof checked out */
    uint64_t auth_failures;     /* "E - auth", or a wrong server proof */
    uint64_t moved;             /* M lines received (after a checked proof) */
    uint64_t requests_written;  /* request lines whose first byte was written */
    uint64_t requests_in_progress;
    uint64_t releases_queued;       /* in the release queue now */
    uint64_t compensations;         /* late grants released */
    uint64_t compensations_dropped; /* late grants not released: queue full */
    uint64_t indeterminate;         /* acquires that ended INDETERMINATE */
    char leader_hint[272];          /* the last M address ("" if none) */
    /* Routing by key (docs/client.md, "Groups and the ring"); the figures
     * above add up every group's connections. */
    uint64_t ring_version; /* of the ring requests are routed by (0: none yet) */
    uint64_t rerouted;     /* requests sent again after a W answer */
    uint32_t groups;       /* groups with a connection set, the seed's included */
};
TK_CLIENT_API void tk_client_stats(struct tk_client *c, struct tk_client_stats *out);

#ifdef __cplusplus
}
#endif

#endif
