/* ticketctl's internal declarations, shared by ticketctl.c (commands on
 * the library), ticketctl_status.c (status, and the admin /status reader),
 * ticketctl_members.c (members, and finding the leader) and
 * ticketctl_remove.c (remove-member, over the leader's peer port). */
#ifndef TK_TICKETCTL_H
#define TK_TICKETCTL_H

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
    const char *key; /* remove-member: the NODEID */
    const char *addr;
    const char *secret_file;
    const char *peer_secret_file; /* remove-member */
    const char *peers;            /* remove-member: peer addresses as the cluster's --peers */
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
/* `ticketctl members`: the members as the leader's /status lists them; the exit code. */
int ctl_members(const struct ctl_opts *o);
/* ---- JSON output (ticketctl_json.c): every --json line is written with these.
 * Strings may hold any byte and come out as valid, pure-ASCII JSON: '"' and
 * '\' escaped, controls and DEL as \u00XX, well-formed UTF-8 as \uXXXX
 * escapes, any other byte as \ufffd. The k* functions write one member of an
 * object, `"name":value`, after a comma unless *first (which they clear). */
/* n bytes of s as a JSON string, quotes included. */
void ctl_json_strn(FILE *f, const char *s, size_t n);
/* s as a JSON string; null if s is NULL. */
void ctl_json_str(FILE *f, const char *s);
void ctl_json_kstr(FILE *f, bool *first, const char *name, const char *value);
void ctl_json_ku64(FILE *f, bool *first, const char *name, uint64_t value);
/* value, or null if !has. */
void ctl_json_kint(FILE *f, bool *first, const char *name, bool has, int64_t value);
void ctl_json_kbool(FILE *f, bool *first, const char *name, bool value);
/* json copied as it is if ctl_json_valid() takes it, else null. */
void ctl_json_kraw(FILE *f, bool *first, const char *name, const char *json);
/* Whether s is exactly one JSON value (RFC 8259, strings in UTF-8, nesting
 * at most 64 deep), with whitespace around it at most. */
bool ctl_json_valid(const char *s);

/* `ticketctl remove-member NODEID`: the exit code. */
int ctl_remove_member(const struct ctl_opts *o);
/* The client addresses of the members a /status body lists (at most max,
 * each shorter than CTL_ADDR_CAP; longer ones are left out); their count,
 * 0 if the body does not parse. */
#define CTL_ADDR_CAP 256
int ctl_member_addrs(const char *body, char (*addrs)[CTL_ADDR_CAP], int max);
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
/* GET /status from host:port, the body (NUL-terminated) into body; the HTTP code or -1. */
int ctl_http_status(const char *host, unsigned port, char *body, size_t cap, int timeout_ms);

#endif
