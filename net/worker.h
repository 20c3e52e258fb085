/* Internals of a worker thread, shared by net/worker.c (the loop, the
 * shard and the messages between threads) and net/conn.c (client
 * connections). Only the worker's own thread touches any of this. */
#ifndef TK_NET_WORKER_H
#define TK_NET_WORKER_H

#include <liburing.h>
#include <pthread.h>

#include "core/auth.h"
#include "core/handshake.h"
#include "core/proto.h"
#include "core/tls.h"
#include "net/server.h"
#include "net/stream.h"
#include "net/uring.h"
#include "shard/shard.h"

enum conn_state { CONN_FREE, CONN_HANDSHAKE, CONN_READY, CONN_CLOSING };

struct conn {
    struct tk_stream st; /* the socket, TLS and buffers (net/stream.h) */
    uint32_t slot, gen;
    uint8_t state;
    bool recv_armed;   /* a multishot recv is outstanding */
    bool recv_stopped; /* paused: recv cancelled until resumed */
    bool send_inflight;
    bool cancel_inflight;
    bool poll_armed;    /* paused: a poll watches for the peer going away */
    bool poll_removing; /* closing: the poll's removal is submitted */
    bool dirty;         /* on the worker's flush list */
    bool resume;        /* on the worker's resume list */
    uint32_t inflight;  /* requests without a reply yet */
    struct conn *next_dirty, *next_resume;
    /* CONN_HANDSHAKE only: SPEC 2 (core/handshake.h), allocated at accept
     * and freed once the client is in, so a ready connection does not
     * carry it (it is most of a connection's size). */
    struct tk_hs *hs;
};

struct tk_worker {
    struct tk_server *s;
    uint32_t idx;
    pthread_t thread;
    struct io_uring ring;
    struct tk_wake wake;
    uint64_t wake_buf;
    int raft_fd; /* inline Raft: the peer ring's file, polled here (-1: none) */
    int listen_fd;
    struct tk_accept accept;

    struct io_uring_buf_ring *br;
    char *bufs;

    struct conn **conns; /* slot -> connection (allocated on first use) */
    uint32_t nconns_alloc;
    uint32_t *free_slots;
    uint32_t nfree;
    struct tk_deadlines hs; /* handshake deadlines (accept order) */
    uint32_t handshaking;   /* connections in CONN_HANDSHAKE */
    struct conn *dirty, *resume;

    /* Rings: inbox[j] is written by worker j (j != idx); from_raft by raft. */
    struct tk_ring inbox[TK_WORKERS_MAX];
    struct tk_ring from_raft;
    struct tk_ring to_raft_ring;
    struct tk_outbox to_worker[TK_WORKERS_MAX];
    struct tk_outbox to_raft;
    bool backlogged; /* some outbox has overflow: stop parsing input */

    struct tk_shard *shard;
    bool leader;                   /* the shard leads: connections are served */
    char leader_addr[TK_ADDR_MAX]; /* where M sends clients ("" unknown) */

    uint64_t now_us;
    uint64_t stats_at;
    /* TLS failures are logged at most TLS_LOG_PER_SEC a second (a scan of
     * the port must not flood the log); the counter has them all. */
    struct tk_stream_log tls_log;
    uint64_t stat[TK_WSTAT_COUNT];
};

/* net/conn.c */
void conn_on_accept(struct tk_worker *w, int fd);
void conn_on_recv(struct tk_worker *w, struct conn *c, struct io_uring_cqe *cqe);
void conn_on_send(struct tk_worker *w, struct conn *c, int res);
void conn_on_cancel(struct tk_worker *w, struct conn *c);
void conn_on_poll(struct tk_worker *w, struct conn *c, int res);
struct conn *conn_get(struct tk_worker *w, uint32_t slot, uint32_t gen);
void conn_deliver(struct tk_worker *w, const struct tk_msg_reply *r);
void conn_refused(struct tk_worker *w, uint64_t client, uint8_t reason);
void conn_moved(struct tk_worker *w, struct conn *c);
void conn_overload(struct tk_worker *w, struct conn *c);
void conn_close(struct tk_worker *w, struct conn *c);
void conn_flush_round(struct tk_worker *w);
void conn_flush_sends(struct tk_worker *w);
void conn_expire_handshakes(struct tk_worker *w);
/* The handshake deadlines of n connection slots (w->hs). */
int conn_deadlines_init(struct tk_worker *w, uint32_t n);
void conn_resume_all(struct tk_worker *w);
void conn_free_all(struct tk_worker *w);

#endif
