/* ticketctl's internal declarations, shared by ticketctl.c (commands on
 * the library), ticketctl_status.c (status, and the admin /status reader),
 * ticketctl_members.c (members, and finding the leader) and
 * ticketctl_remove.c (remove-member, over the leader's peer port). */
#ifndef TK_TICKETCTL_H
#define TK_TICKETCTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
    CTL_EXIT_OK = 0,
    CTL_EXIT_FAIL = 1,           /* anything else (client not created; run: waitpid failed;
                                    remove-member: the peer secret was rejected) */
    CTL_EXIT_USAGE = 64,         /* bad flags, missing --addr/--secret-file, bad secret,
                                    unusable TLS files */
    CTL_EXIT_BUSY = 80,          /* B: held and --wait 0, or a server bound */
    CTL_EXIT_TIMEOUT = 81,       /* T: --wait elapsed before our turn */
    CTL_EXIT_INDETERMINATE = 82, /* sent, no confirmed answer: the lock may be held */
    CTL_EXIT_UNAVAILABLE = 83,   /* nothing was sent: no usable server in time */
    CTL_EXIT_INVALID = 84,       /* the server (or ticketctl) rejected a field */
    CTL_EXIT_LEASE_LOST = 85,    /* run: the lease ran out; the command was stopped */
    CTL_EXIT_NOT_HELD = 86,      /* release: N (nothing held under that key/owner/token) */
    CTL_EXIT_UNCONFIRMED = 87,   /* release: no answer before the 5 s deadline */
};

struct ctl_opts {
    const char *cmd;
    const char *key; /* remove-member: the NODEID */
    const char *addr;
    const char *secret_file;
    const char *peer_secret_file; /* remove-member */
    const char *owner;
    const char *tls_ca; /* TLS for the client port (libticketing's tls_* fields) */
    const char *tls_cert;
    const char *tls_key;
    const char *tls_server_name;
    bool json;
    bool verbose;
    bool have_token;
    uint64_t token;
    uint64_t lease_ms;
    uint64_t wait_ms;
    uint64_t timeout_ms;
    uint64_t grace_ms;
    uint64_t count;
    char **argv_cmd; /* run: the command */
};

/* Prints "ticketctl: <message>" and the usage hint; returns CTL_EXIT_USAGE. */
__attribute__((format(printf, 1, 2))) int ctl_die_usage(const char *fmt, ...);
/* A decimal u64 (digits only); false otherwise. */
bool ctl_parse_u64(const char *s, uint64_t *v);
/* `ticketctl status`, or members (ctl_members) if o->cmd says so: every
 * address's admin /status; the exit code (83 if no member answered). */
int ctl_status(const struct ctl_opts *o);
/* `ticketctl members`: the members as the leader's /status lists them; the exit code. */
int ctl_members(const struct ctl_opts *o);
/* The leader's NodeId and peer address (each cap bytes), found as members
 * finds the leader: the --addr nodes' /status, a follower's leader_addr
 * followed; failing the leader's own answer, the leader a follower names.
 * Each /status read is bounded by read_ms, and all of them by deadline_us
 * (tk_client_now_us() time). Returns 0, CTL_EXIT_USAGE (a bad --addr, said
 * on stderr) or CTL_EXIT_UNAVAILABLE. */
int ctl_find_leader(const struct ctl_opts *o,
                    uint64_t read_ms,
                    uint64_t deadline_us,
                    char *id,
                    char *peer_addr,
                    size_t cap);
/* `ticketctl remove-member NODEID`: the exit code. */
int ctl_remove_member(const struct ctl_opts *o);
/* Splits "host:port" or "[v6]:port" (len bytes of a) into host and *port; false if malformed. */
bool ctl_split_addr(const char *a, size_t len, char *host, size_t hcap, unsigned *port);
/* GET /status from host:port, the body (NUL-terminated) into body; the HTTP code or -1. */
int ctl_http_status(const char *host, unsigned port, char *body, size_t cap, int timeout_ms);

#endif
