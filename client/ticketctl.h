/* ticketctl's internal declarations, shared by ticketctl.c (commands on
 * the library, ring show), ticketctl_status.c (status, and the admin
 * port's reader), ticketctl_members.c (members, and finding the leader),
 * ticketctl_peer.c (remove-member and ring apply, over the leader's peer
 * port) and ticketctl_out.c (the --json output). */
#ifndef TK_TICKETCTL_H
#define TK_TICKETCTL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/addr.h"

enum {
    CTL_EXIT_OK = 0,
    CTL_EXIT_FAIL = 1,           /* anything else (client not created; run: waitpid failed;
                                    remove-member: the peer secret was rejected) */
    CTL_EXIT_USAGE = 64,         /* bad flags, missing --addr/--secret-file, bad secret,
                                    unusable TLS files */
    CTL_EXIT_BUSY = 80,          /* B: held and --wait 0, or a server bound */
    CTL_EXIT_TIMEOUT = 81,       /* T: --wait elapsed before our turn */
    CTL_EXIT_INDETERMINATE = 82, /* sent, no confirmed answer: the lock may be held */
    CTL_EXIT_UNAVAILABLE = 83,   /* nothing was sent: no usable server in time;
                                    status, members: no leader */
    CTL_EXIT_INVALID = 84,       /* the server (or ticketctl) rejected a field */
    CTL_EXIT_LEASE_LOST = 85,    /* run: the lease ran out; the command was stopped */
    CTL_EXIT_NOT_HELD = 86,      /* release: N (nothing held under that key/owner/token) */
    CTL_EXIT_UNCONFIRMED = 87,   /* release: no answer before the 5 s deadline */
    CTL_EXIT_DEGRADED = 88,      /* status: a leader, but a member did not answer */
};

struct ctl_opts {
    const char *cmd;
    const char *key; /* remove-member: the NODEID; ring: the subcommand, show or apply */
    const char *addr;
    const char *secret_file;
    const char *peer_secret_file; /* remove-member */
    const char *peers; /* remove-member, ring apply: peer addresses as the cluster's --peers */
    const char *group; /* ring apply: the group the ring is given to; slots move: the source */
    const char *file;  /* ring apply: the ring file; slots move: the RANGE */
    const char *to;    /* slots move: the target group, its peer addresses and secret */
    const char *to_peers;
    const char *to_peer_secret_file;
    const char *ring_file; /* slots move: the ring after the move */
    const char *owner;
    const char *tls_ca; /* TLS for the client port (libticketing's tls_* fields) */
    const char *tls_cert;
    const char *tls_key;
    const char *tls_server_name;
    unsigned admin_port; /* status, members, remove-member: 0 is each client port + 2 */
    bool json;
    bool verbose;
    bool have_token;
    uint64_t token;
    uint64_t lease_ms;
    uint64_t wait_ms;
    bool wait_given; /* --wait was given (slots move: the hand-over's budget) */
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
 * address's admin /status, and every member's the leader lists; the exit
 * code (83 if no member answered or none is the leader, 88 if one did not
 * answer). */
int ctl_status(const struct ctl_opts *o);
/* `ticketctl members`: the members as the leader's /members lists them; the exit code. */
int ctl_members(const struct ctl_opts *o);
/* `ticketctl ring apply FILE --group NAME` (client/ticketctl_peer.c): the
 * ring in o->file, given to group o->group over its leader's peer port;
 * asked again while the leader answers RETRY, until OK or REFUSED or
 * --timeout. The exit code: 0 committed (or already the group's ring), 84
 * refused (the leader's sentence printed) or a bad file, 83 no leader
 * answered, 82 sent and unanswered, 1 the peer secret was refused. */
int ctl_ring_apply(const struct ctl_opts *o);
/* `ticketctl slots move RANGE --group SRC --to DST --ring FILE`
 * (client/ticketctl_move.c): freeze, hand-over, claim, each asked until
 * done; run again, it resumes. The exit code: 0 moved, 84 a step refused
 * (or a bad RANGE or FILE), 83 no leader answered, 82 a step sent and
 * unanswered, 1 a peer secret was refused. */
int ctl_slots_move(const struct ctl_opts *o);
/* `ticketctl ring show` (client/ticketctl.c): the ring as the leader of
 * the group at --addr answers S, printed as a ring file (`ring apply`
 * takes it back) or as JSON. */
int ctl_ring_show(const struct ctl_opts *o);
/* ---- JSON output (ticketctl_out.c, on Jansson): every --json answer is
 * built as Jansson values and printed with ctl_json_print(), compact and
 * pure ASCII. */
/* n bytes of any content as a JSON string: bytes that are no part of a
 * well-formed UTF-8 sequence become U+FFFD. */
json_t *ctl_jstrn(const char *s, size_t n);
/* s as a JSON string (as ctl_jstrn); null if s is NULL. */
json_t *ctl_jstr(const char *s);
/* v as a JSON integer; null past 2^63 - 1 (Jansson's integers are signed). */
json_t *ctl_ju64(uint64_t v);
/* Prints v then end, escaped as ticketctl always has ('"' and '\' with a
 * backslash, controls and DEL as \u00XX, other non-ASCII as \uXXXX, hex in
 * lowercase), and releases v (NULL prints null). */
void ctl_json_print(FILE *f, json_t *v, const char *end);

/* `ticketctl remove-member NODEID`: the exit code. */
int ctl_remove_member(const struct ctl_opts *o);
/* The client addresses of the members a /status document lists (at most
 * max, each shorter than CTL_ADDR_CAP; longer ones are left out); their
 * count. */
#define CTL_ADDR_CAP 256
int ctl_member_addrs(const json_t *status, char (*addrs)[CTL_ADDR_CAP], int max);
/* The admin port of the node at client port port: --admin-port if given,
 * else port + 2; 0 if that is past 65535. */
unsigned ctl_admin_port(const struct ctl_opts *o, unsigned port);
/* ctl_parse_addrs() of --addr for status and members, each address also
 * shorter than CTL_ADDR_CAP and with an admin port; 0 or CTL_EXIT_USAGE. */
int ctl_check_admin_addrs(const struct ctl_opts *o, struct tk_addr *addrs, size_t *n);
/* --addr and --peers: at most this many addresses (libticketing's own bound). */
#define CTL_ADDRS_MAX 8
/* list (the value of flag, "--addr" or "--peers") as core/addr.h's comma
 * list into addrs[0..*n) (CTL_ADDRS_MAX of them); 0, or CTL_EXIT_USAGE
 * with the reason on stderr: "bad --addr: 'h:0': port out of range (1-65535)". */
int ctl_parse_addrs(const char *flag, const char *list, struct tk_addr *addrs, size_t *n);
/* GET path (/status, /members) from the admin port host:port, within
 * timeout_ms; the HTTP code or -1. On 200 with a JSON object for a body,
 * that object in *doc (the caller's to json_decref); else *doc is NULL. */
int ctl_http_json(const char *host, unsigned port, const char *path, int timeout_ms, json_t **doc);

#endif
