/* ticketctl's requests over a leader's peer port (client/ticketctl_peer.c):
 * the shared part of remove-member, ring apply (ticketctl_peer.c) and
 * slots move (ticketctl_move.c). A struct peer holds the targets, one
 * attempt's connection and what the request says; peer_loop() asks until
 * an authenticated answer settles it or the deadline passes. */
#ifndef TK_TICKETCTL_PEER_H
#define TK_TICKETCTL_PEER_H

#include "client/stream.h"
#include "client/ticketctl.h"
#include "core/auth.h"
#include "core/handshake.h"
#include "core/slots.h"
#include "core/tls.h"
#include "raft/wire.h"

#define TARGETS_MAX 8
#define ADDR_CAP 256
#define IN_CAP (64u << 10) /* a JOIN_REPLY or SLOTS_REPLY is under 900 bytes */
/* The largest request: a SLOTS frame with the longest names and ring. */
#define OUT_CAP                                                                                   \
    (TK_WIRE_LENGTH_LEN + TK_WIRE_HEADER_LEN + 2 + TK_SLOTS_NAME_MAX + 4 + TK_SLOTS_ENCODED_MAX + \
     1 + 4 + 2 + TK_SLOTS_NAME_MAX + 8)

/* How one attempt (dial, handshake, request, answer) ended. */
enum attempt {
    AT_NO_CONN,    /* the peer port did not answer, or closed before the handshake ended */
    AT_BAD,        /* not a peer port, TLS failed, or a malformed answer */
    AT_AUTH,       /* the peer refused our proof, or its own proof was wrong */
    AT_UNANSWERED, /* request sent, no authenticated answer: it may or may not be taken */
    AT_OK,
    AT_NOT_LEADER,
    AT_RETRY,
    AT_REFUSED,
};

struct peer;

/* What one command asks, and how it reads the answer. */
struct peer_ask {
    const char *frame;  /* the request in sentences: "REMOVE", "SLOTS" */
    uint8_t reply_type; /* the answer's frame type */
    /* Fills m's type and payload; the sender and term are peer_send()'s. */
    void (*fill)(const struct peer *p, struct tk_raft_msg *m);
    /* An authenticated answer's meaning (p->next set for NOT_LEADER). */
    enum attempt (*status)(struct peer *p, const char *addr, const struct tk_raft_msg *m);
};

struct peer {
    const struct ctl_opts *o;
    const struct peer_ask *ask;
    char what[160]; /* what we ask, for --verbose: "remove 0123456789abcdef" */
    uint8_t secret[TK_AUTH_SECRET_MAX];
    size_t secret_len;
    uint64_t deadline_us;       /* the whole of --timeout */
    struct tk_tls_ctx *tls_ctx; /* --tls-ca: the peer port runs TLS */
    /* The given peer addresses, tried in turn. */
    char targets[TARGETS_MAX][ADDR_CAP];
    int ntargets;
    char target[ADDR_CAP]; /* the address asked last */
    /* One attempt's connection. */
    struct cl_stream s;
    struct tk_hs hs;
    uint8_t in[IN_CAP];   /* plaintext: p->s's input */
    uint8_t out[OUT_CAP]; /* the request frame */
    char next[ADDR_CAP];  /* NOT_LEADER: the leader's peer address, "" if unknown */
    uint64_t next_id;
    bool maybe_sent;    /* a request may have been taken: the outcome is unknown */
    char why[768];      /* what went wrong last, for the final message */
    char sent_why[768]; /* why the outcome became unknown */
    /* remove-member */
    uint64_t id;
    char id_text[17];
    /* ring apply, slots move: the SLOTS request (op TK_RAFT_SLOTS_*;
     * group is o->group) and what its answer said */
    uint8_t op;
    uint16_t first, last;
    const char *other; /* freeze, hand-over: the target; claim: the source */
    uint64_t counter;  /* claim: the source's */
    uint64_t version;  /* the ring's */
    uint32_t ring_len;
    uint8_t ring[TK_SLOTS_ENCODED_MAX];
    char refusal[TK_RAFT_SLOTS_WHY_MAX + 1];
    uint64_t got_counter; /* an OK's counter (a hand-over's: the source's) */
    uint64_t got_version; /* an OK's ring version */
    int retry_pause_ms;   /* between asks after a RETRY (0: 200 ms) */
};

/* A closed stream, the peer secret, the targets (o->peers, else each
 * --addr at its client port + 1) and TLS: 0, or CTL_EXIT_USAGE (said on
 * stderr). peer_close() afterwards either way. */
int peer_open(struct peer *p, const struct ctl_opts *o, const struct peer_ask *ask);
void peer_close(struct peer *p);
/* Asks until an answer settles it or p->deadline_us passes: AT_OK,
 * AT_REFUSED or AT_AUTH (p->target the address that answered), else at
 * the deadline AT_UNANSWERED if p->maybe_sent (p->sent_why says why) or
 * AT_NO_CONN (p->why says what went wrong last). */
enum attempt peer_loop(struct peer *p);
/* The SLOTS request of p (op, range, other group, counter, ring). */
extern const struct peer_ask peer_ask_slots;
/* The ring file at path into p->ring (encoded) and p->version, r the
 * ring parsed: 0, or the exit code (said on stderr): 64 if it cannot be
 * read, 84 if it is no ring. */
int peer_ring_load(struct peer *p, const char *path, struct tk_slot_ring *r);
/* Text that may come from a server (or a file), made one printable line. */
void printable(char *s);

#endif
