/* ticketctl's internal declarations, shared by ticketctl.c (commands on
 * the library) and ticketctl_status.c (the admin /status reader). */
#ifndef TK_TICKETCTL_H
#define TK_TICKETCTL_H

#include <stdbool.h>
#include <stdint.h>

enum {
    CTL_EXIT_OK = 0,
    CTL_EXIT_FAIL = 1,           /* anything else (fork failed, no member answered status) */
    CTL_EXIT_USAGE = 64,         /* bad flags, missing --addr/--secret-file, bad secret */
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
    const char *key;
    const char *addr;
    const char *secret_file;
    const char *owner;
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
/* `ticketctl status`: every address's admin /status; returns the exit code. */
int ctl_status(const struct ctl_opts *o);

#endif
