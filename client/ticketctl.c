/* ticketctl: the command-line client of Ticketing, built on libticketing.
 * `run` holds a lock while a command runs (like flock(1) or `etcdctl
 * lock`); acquire, release, query and ping make one request each; status
 * reads every member's admin /status (client port + 2, or --admin-port)
 * and says in its exit code whether the cluster is whole; members reads
 * the leader's /members (found through any member's), and remove-member asks the
 * leader, over its peer port and with the peer secret, to drop a member
 * that is gone for good. `ring show` prints a group's ring (SPEC 15) as a
 * ring file; `ring apply` (ticketctl_peer.c) gives a group its ring.
 *
 * Output is for people by default and JSON with --json (ticketctl_out.c
 * writes all of it). Exit codes are fixed (usage() prints them) so scripts
 * can tell the outcomes apart. A failure is one line on stderr that names
 * its cause (the library's last connection error), with no -v needed.
 */
#include <errno.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "client/ticketctl.h"
#include "client/ticketing.h"
#include "core/slots.h"
#include "tk_version.h"

extern char **environ;

static void usage(FILE *f)
{
    fputs(
        "usage: ticketctl [flags] COMMAND [args]\n"
        "\n"
        "commands:\n"
        "  run KEY [--lease 30s] [--wait 5s] [--] CMD [ARG...]\n"
        "        hold KEY while CMD runs; CMD sees TICKETING_TOKEN, TICKETING_KEY and\n"
        "        TICKETING_OWNER; the lock is released after; CMD's exit code is passed\n"
        "        through. CMD gets SIGTERM shortly before the lease ends, SIGKILL at it.\n"
        "  acquire KEY [--lease 30s] [--wait 5s]   prints the token; the lock stays held\n"
        "  release KEY --token N --owner OWNER\n"
        "  query KEY                               the committed holder and waiters\n"
        "  ping [--count N]                        round trips through the client\n"
        "  status                                  each member's admin /status, and the\n"
        "        cluster's health in the exit code (0, 88 degraded, 83 no leader)\n"
        "  members                                 every member as the leader sees it: ids,\n"
        "        addresses, voter or learner, match index, lag, last contact; * the leader\n"
        "  remove-member NODEID --peer-secret-file PATH [--peers host:port,...]\n"
        "        remove a member that is gone for good (NODEID: 16 hex digits, as members\n"
        "        shows); the leader refuses a member it still hears from. Needs the\n"
        "        cluster's PEER secret (env TICKETING_PEER_SECRET_FILE), not the client's,\n"
        "        and asks the peer ports: --peers as the cluster's --peers lists them\n"
        "        (env TICKETING_PEERS), else each --addr host at its client port + 1\n"
        "  ring show                               the ring (SPEC 15) of the group at --addr,\n"
        "        as a ring file that ring apply takes back; --json: as JSON\n"
        "  ring apply FILE --group NAME --peer-secret-file PATH [--peers host:port,...]\n"
        "        give the ring in FILE to the group NAME, over its leader's peer port and\n"
        "        with the PEER secret (as remove-member); the leader refuses a ring that\n"
        "        changes the slots the group owns (slots change groups only by a move)\n"
        "  slots move RANGE --group SRC --to DST --ring FILE --peers host:port,...\n"
        "        --to-peers host:port,... --peer-secret-file PATH [--to-peer-secret-file P]\n"
        "        move slots RANGE (FIRST-LAST) from group SRC to group DST: SRC freezes\n"
        "        them, hands them over once no key in them is held (waits up to --wait,\n"
        "        default 260s), DST claims them; FILE is the ring after the move. Run\n"
        "        again, it resumes where it stopped\n"
        "\n",
        f);
    /* Two strings: ISO C promises only 4095 bytes to one literal. */
    fputs(
        "flags:\n"
        "  --addr host:port[,host:port...]   cluster addresses (env TICKETING_ADDR)\n"
        "  --secret-file PATH                client secret (env TICKETING_SECRET_FILE)\n"
        "  --peer-secret-file PATH           peer secret, for remove-member and ring apply\n"
        "                                    (env TICKETING_PEER_SECRET_FILE)\n"
        "  --group NAME                      ring apply: the group the ring is given to\n"
        "  --owner NAME                      owner (env TICKETING_OWNER; default unique)\n"
        "  --tls-ca FILE                     TLS: the CA that signed the servers' certificates;\n"
        "                                    turns TLS on (env TICKETING_TLS_CA)\n"
        "  --tls-cert FILE --tls-key FILE    TLS: our client certificate and key, for servers\n"
        "                                    that require one (env TICKETING_TLS_CERT,\n"
        "                                    TICKETING_TLS_KEY)\n"
        "  --tls-server-name NAME            TLS: the name the servers' certificates must hold\n"
        "                                    (default: each --addr host; env\n"
        "                                    TICKETING_TLS_SERVER_NAME). TLS is for the client\n"
        "                                    port (run, acquire, release, query, ping, ring\n"
        "                                    show) and, for remove-member and ring apply, the\n"
        "                                    peer port\n"
        "  --lease D  --wait D               durations: 500ms, 30s, 2m (0 needs no unit)\n"
        "  --admin-port N                    the admin port of every --addr node, for status,\n"
        "                                    members, remove-member (default: each client\n"
        "                                    port + 2; env TICKETING_ADMIN_PORT)\n"
        "  --timeout D                       budget of query, ping, ring show and each admin\n"
        "                                    port read of status/members, and the whole of\n"
        "                                    remove-member and ring apply (default 5s)\n"
        "  --grace D                         wait for an answer past --wait (default 2s)\n"
        "  --json                            machine-readable output (valid JSON, ASCII only)\n"
        "  -v, --verbose                     log connection events to stderr\n"
        "  --version                         print the version and the commit built\n"
        "\n"
        "exit codes: 0 ok (run: the command's own code), 64 usage (also an unusable\n"
        "  secret or TLS file), 80 busy, 81 timeout, 82 indeterminate (do not assume the\n"
        "  lock is held or free; remove-member, ring apply: sent, unanswered), 83\n"
        "  unavailable (status: no member answered, or none is the leader; members,\n"
        "  remove-member, ring apply: no leader known or it did not answer), 84 invalid\n"
        "  (also wrong group: no group serves the key's slot; remove-member:\n"
        "  refused, the member is alive or the last voter; ring apply: refused, or a\n"
        "  bad FILE), 85 lease lost during run, 86\n"
        "  release: not held, 87 release: unconfirmed, 88 status: degraded (a leader,\n"
        "  but a member did not answer), 1 other failure (remove-member: the peer\n"
        "  secret was rejected; ring show: the answer does not read as a ring).\n",
        f);
}

int ctl_die_usage(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "ticketctl: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n(ticketctl --help for usage)\n");
    return CTL_EXIT_USAGE;
}

/* "500ms", "30s", "2m" or "0" into milliseconds. */
static bool parse_duration(const char *s, uint64_t *ms)
{
    char *end;
    errno = 0;
    if (*s < '0' || *s > '9')
        return false;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || v > 1000000000ull)
        return false;
    if (strcmp(end, "ms") == 0)
        *ms = v;
    else if (strcmp(end, "s") == 0)
        *ms = v * 1000u;
    else if (strcmp(end, "m") == 0)
        *ms = v * 60000u;
    else if (*end == '\0' && v == 0)
        *ms = 0;
    else
        return false;
    return true;
}

bool ctl_parse_u64(const char *s, uint64_t *v)
{
    char *end;
    errno = 0;
    if (*s < '0' || *s > '9')
        return false;
    *v = strtoull(s, &end, 10);
    return errno == 0 && *end == '\0';
}

/* One flag with its value; returns 0, or an exit code. */
static int parse_flag(struct ctl_opts *o, const char *name, const char *val)
{
    if (!strcmp(name, "--addr"))
        o->addr = val;
    else if (!strcmp(name, "--secret-file"))
        o->secret_file = val;
    else if (!strcmp(name, "--peer-secret-file"))
        o->peer_secret_file = val;
    else if (!strcmp(name, "--peers"))
        o->peers = val;
    else if (!strcmp(name, "--group"))
        o->group = val;
    else if (!strcmp(name, "--to"))
        o->to = val;
    else if (!strcmp(name, "--to-peers"))
        o->to_peers = val;
    else if (!strcmp(name, "--to-peer-secret-file"))
        o->to_peer_secret_file = val;
    else if (!strcmp(name, "--ring"))
        o->ring_file = val;
    else if (!strcmp(name, "--owner"))
        o->owner = val;
    else if (!strcmp(name, "--tls-ca"))
        o->tls_ca = val;
    else if (!strcmp(name, "--tls-cert"))
        o->tls_cert = val;
    else if (!strcmp(name, "--tls-key"))
        o->tls_key = val;
    else if (!strcmp(name, "--tls-server-name"))
        o->tls_server_name = val;
    else if (!strcmp(name, "--token")) {
        if (!ctl_parse_u64(val, &o->token) || o->token == 0)
            return ctl_die_usage("bad --token '%s'", val);
        o->have_token = true;
    } else if (!strcmp(name, "--admin-port")) {
        uint64_t v;
        if (!ctl_parse_u64(val, &v) || v == 0 || v > 65535)
            return ctl_die_usage("bad --admin-port '%s' (1-65535)", val);
        o->admin_port = (unsigned)v;
    } else if (!strcmp(name, "--count")) {
        if (!ctl_parse_u64(val, &o->count) || o->count == 0 || o->count > 1000000)
            return ctl_die_usage("bad --count '%s'", val);
    } else {
        uint64_t *dst = !strcmp(name, "--lease")     ? &o->lease_ms
                        : !strcmp(name, "--wait")    ? &o->wait_ms
                        : !strcmp(name, "--timeout") ? &o->timeout_ms
                        : !strcmp(name, "--grace")   ? &o->grace_ms
                                                     : NULL;
        if (dst == NULL)
            return ctl_die_usage("unknown flag '%s'", name);
        if (!parse_duration(val, dst))
            return ctl_die_usage("bad duration '%s' (use 500ms, 30s, 2m)", val);
        o->wait_given |= dst == &o->wait_ms;
    }
    return 0;
}

static bool flag_takes_value(const char *name)
{
    static const char *const with[] = {"--addr",
                                       "--secret-file",
                                       "--peer-secret-file",
                                       "--peers",
                                       "--owner",
                                       "--token",
                                       "--count",
                                       "--lease",
                                       "--wait",
                                       "--timeout",
                                       "--grace",
                                       "--tls-ca",
                                       "--tls-cert",
                                       "--tls-key",
                                       "--tls-server-name",
                                       "--admin-port",
                                       "--group",
                                       "--to",
                                       "--to-peers",
                                       "--to-peer-secret-file",
                                       "--ring"};
    for (size_t i = 0; i < sizeof with / sizeof with[0]; i++)
        if (!strcmp(name, with[i]))
            return true;
    return false;
}

static int parse_args(struct ctl_opts *o, int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        char *a = argv[i];
        bool run_key_seen = o->cmd && !strcmp(o->cmd, "run") && o->key;
        if (!strcmp(a, "--") || (run_key_seen && a[0] != '-')) {
            if (!run_key_seen)
                return ctl_die_usage("'%s' is only for run KEY -- CMD", a);
            o->argv_cmd = &argv[i + (a[0] == '-' ? 1 : 0)];
            break;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            exit(CTL_EXIT_OK);
        }
        if (!strcmp(a, "--version")) {
            printf("ticketctl %s (commit %s)\n", TK_VERSION, TK_COMMIT);
            exit(CTL_EXIT_OK);
        }
        if (!strcmp(a, "--json")) {
            o->json = true;
        } else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
            o->verbose = true;
        } else if (a[0] == '-' && a[1] == '-') {
            char name[32];
            const char *eq = strchr(a, '=');
            const char *val;
            size_t n = eq ? (size_t)(eq - a) : strlen(a);
            if (n >= sizeof name)
                return ctl_die_usage("unknown flag '%s'", a);
            memcpy(name, a, n);
            name[n] = '\0';
            if (!flag_takes_value(name))
                return ctl_die_usage("unknown flag '%s'", a);
            if (eq)
                val = eq + 1;
            else if (i + 1 < argc)
                val = argv[++i];
            else
                return ctl_die_usage("flag %s needs a value", name);
            int rc = parse_flag(o, name, val);
            if (rc != 0)
                return rc;
        } else if (a[0] == '-' && a[1] != '\0') {
            return ctl_die_usage("unknown flag '%s'", a);
        } else if (o->cmd == NULL) {
            o->cmd = a;
        } else if (o->key == NULL) {
            o->key = a;
        } else if ((!strcmp(o->cmd, "ring") || !strcmp(o->cmd, "slots")) && o->file == NULL) {
            o->file = a; /* ring apply FILE, slots move RANGE */
        } else {
            return ctl_die_usage("unexpected argument '%s'", a);
        }
    }
    return 0;
}

/* ---- client ------------------------------------------------------------------ */

static void log_stderr(void *arg, int level, const char *message)
{
    static const char *const names[] = {"error", "warn", "info", "debug"};
    (void)arg;
    fprintf(stderr, "ticketctl: %s: %s\n", names[level < 0 || level > 3 ? 3 : level], message);
}

/* The library names its config fields in its sentences; ticketctl's users
 * know the flags. Rewrites s in place (cap bytes). */
static void flag_names(char *s, size_t cap)
{
    static const char *const map[][2] = {{"tls_cert_file", "--tls-cert"},
                                         {"tls_key_file", "--tls-key"},
                                         {"tls_ca_file", "--tls-ca"},
                                         {"tls_server_name", "--tls-server-name"}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        char *p;
        size_t from = strlen(map[i][0]), to = strlen(map[i][1]);
        while ((p = strstr(s, map[i][0])) != NULL) {
            size_t tail = strlen(p + from) + 1;
            if ((size_t)(p - s) + to + tail > cap)
                break;
            memmove(p + to, p + from, tail);
            memcpy(p, map[i][1], to);
        }
    }
}

/* The most recent connection failure, for the one line that reports an
 * UNAVAILABLE outcome (a TLS refusal, a refused connect...). */
static struct tk_client *ctl_client;

static int make_client(const struct ctl_opts *o, struct tk_client **c)
{
    /* Said in flag names here; the library would say its field names. */
    if ((o->tls_cert == NULL) != (o->tls_key == NULL)) {
        fprintf(stderr, "ticketctl: TLS: --tls-cert and --tls-key go together (%s is missing)\n",
                o->tls_cert ? "--tls-key" : "--tls-cert");
        return CTL_EXIT_USAGE;
    }
    if (o->tls_ca == NULL && (o->tls_cert || o->tls_server_name)) {
        fprintf(stderr,
                "ticketctl: TLS: --tls-ca is needed with --tls-cert or --tls-server-name "
                "(without it the connection would be plaintext)\n");
        return CTL_EXIT_USAGE;
    }
    struct tk_client_config cfg;
    tk_client_config_init(&cfg);
    cfg.addrs = o->addr;
    cfg.secret_file = o->secret_file;
    cfg.owner = o->owner;
    cfg.tls_ca_file = o->tls_ca;
    cfg.tls_cert_file = o->tls_cert;
    cfg.tls_key_file = o->tls_key;
    cfg.tls_server_name = o->tls_server_name;
    cfg.request_timeout_ms = (uint32_t)o->timeout_ms;
    cfg.response_grace_ms = (uint32_t)o->grace_ms;
    if (o->verbose)
        cfg.log = log_stderr;
    int rc = tk_client_create(&cfg, c);
    if (rc == TK_CLIENT_ENONE) {
        ctl_client = *c;
        return 0;
    }
    if (rc == TK_CLIENT_ETLS) {
        char why[512];
        tk_client_tls_check(&cfg, why, sizeof why);
        flag_names(why, sizeof why);
        fprintf(stderr, "ticketctl: TLS: %s\n", why);
        return CTL_EXIT_USAGE;
    }
    if (rc == TK_CLIENT_ESECRET)
        return ctl_die_usage("cannot use the secret file '%s' (readable, 16-4096 bytes?)",
                             o->secret_file);
    if (rc == TK_CLIENT_EINVAL)
        return ctl_die_usage("bad --addr or --owner ('%s')", o->addr);
    fprintf(stderr, "ticketctl: %s\n", tk_client_strerror(rc));
    return CTL_EXIT_FAIL;
}

static int outcome_exit(enum tk_client_outcome o)
{
    switch (o) {
        case TK_CLIENT_ACQUIRED:
        case TK_CLIENT_RELEASED:
        case TK_CLIENT_ANSWERED:
            return CTL_EXIT_OK;
        case TK_CLIENT_BUSY:
            return CTL_EXIT_BUSY;
        case TK_CLIENT_TIMEOUT:
            return CTL_EXIT_TIMEOUT;
        case TK_CLIENT_INDETERMINATE:
        case TK_CLIENT_CANCELLED:
            return CTL_EXIT_INDETERMINATE;
        case TK_CLIENT_INVALID:
        case TK_CLIENT_WRONG_GROUP: /* the request was fine, the group is not */
            return CTL_EXIT_INVALID;
        case TK_CLIENT_NOT_HELD:
            return CTL_EXIT_NOT_HELD;
        case TK_CLIENT_UNCONFIRMED:
        case TK_CLIENT_QUEUE_FULL:
            return CTL_EXIT_UNCONFIRMED;
        default:
            return CTL_EXIT_UNAVAILABLE;
    }
}

static const char *outcome_text(enum tk_client_outcome o)
{
    switch (o) {
        case TK_CLIENT_BUSY:
            return "busy: the key is held (or a server bound was reached); not acquired";
        case TK_CLIENT_TIMEOUT:
            return "timeout: the wait ran out before our turn; not acquired";
        case TK_CLIENT_INDETERMINATE:
            return "indeterminate: sent, but no confirmed answer; the lock may or may not be "
                   "held (the lease will free it)";
        case TK_CLIENT_UNAVAILABLE:
            return "unavailable: no server could take the request in time; nothing was sent";
        case TK_CLIENT_INVALID:
            return "invalid: rejected";
        case TK_CLIENT_NOT_HELD:
            return "not held: nothing is held under that key, owner and token";
        case TK_CLIENT_UNCONFIRMED:
            return "unconfirmed: no answer before the deadline; do not assume it was released";
        case TK_CLIENT_WRONG_GROUP:
            return "wrong group: no group serves the key's slot; nothing changed";
        default:
            return tk_client_outcome_str(o);
    }
}

/* What the operator most likely has to fix, after the library's sentence
 * for the last connection failure (client/conn.c words them); "" if
 * nothing more can be said. */
static const char *cause_hint(const char *cause)
{
    static const char *const hints[][2] = {
        {"authentication refused", " (wrong --secret-file?)"},
        {"wrong server proof", " (not this cluster, or it has another client secret)"},
        {"host name lookup failed", " (check the host name in --addr)"},
        {"Connection refused", " (nothing listens there: check the port in --addr)"},
    };
    for (size_t i = 0; i < sizeof hints / sizeof hints[0]; i++)
        if (strstr(cause, hints[i][0]) != NULL)
            return hints[i][1];
    return "";
}

/* Prints a failed outcome (human: stderr; JSON: stdout) and returns its exit code.
 * UNAVAILABLE says why no connection could take the request, on the same
 * line and first: the last connection failure ("127.0.0.1:7400:
 * authentication refused (wrong --secret-file?)", a refused connect, a
 * failed lookup, a TLS refusal), so no -v is needed to see it. */
static int report_failure(const struct ctl_opts *o, const struct tk_client_result *r)
{
    const char *key = o->key ? o->key : "", *sep = *key ? ": " : "";
    char cause[640] = "", reason[48] = "";
    if (r->outcome == TK_CLIENT_UNAVAILABLE && ctl_client != NULL) {
        struct tk_client_stats st;
        tk_client_stats(ctl_client, &st);
        if (tk_client_last_error(ctl_client, cause, 512) > 0) {
            flag_names(cause, 512);
            size_t n = strlen(cause);
            snprintf(cause + n, sizeof cause - n, "%s", cause_hint(cause));
        } else if (st.handshakes == 0) {
            /* Connected, yet no banner: a TLS port waits for our hello
             * as we wait for its banner, until one side gives up. */
            snprintf(cause, sizeof cause, "no server completed a handshake in time%s",
                     o->tls_ca ? "" : " (a TLS port? then give --tls-ca)");
        }
    }
    if (r->reason[0])
        snprintf(reason, sizeof reason, " (reason: %s)", r->reason);
    bool wrong = r->outcome == TK_CLIENT_WRONG_GROUP;
    if (o->json) {
        json_t *j = json_object();
        json_object_set_new(j, "outcome", ctl_jstr(tk_client_outcome_str(r->outcome)));
        json_object_set_new(j, "key", ctl_jstr(key));
        json_object_set_new(j, "reason", ctl_jstr(r->reason));
        if (cause[0])
            json_object_set_new(j, "error", ctl_jstr(cause));
        if (wrong) {
            json_object_set_new(j, "slot", ctl_ju64(r->slot));
            json_object_set_new(j, "ring_version", ctl_ju64(r->ring_version));
        }
        ctl_json_print(stdout, j, "\n");
    } else if (wrong && r->ring_version == 0) {
        fprintf(stderr,
                "ticketctl: %s%swrong group: the group at --addr does not serve the key's slot "
                "%u; it has no ring yet (ring version 0), so another group serves it or none "
                "does; nothing changed\n",
                key, sep, (unsigned)r->slot);
    } else if (wrong) {
        fprintf(stderr,
                "ticketctl: %s%swrong group: no group serves the key's slot %u by ring "
                "version %llu (no range covers it, or a move of it did not end within the "
                "budget: ticketctl ring show says which); nothing changed\n",
                key, sep, (unsigned)r->slot, (unsigned long long)r->ring_version);
    } else if (cause[0]) {
        fprintf(stderr, "ticketctl: %s%sunavailable: %s%s; nothing was sent\n", key, sep,
                strcmp(r->reason, "tls") == 0 ? "TLS refused: " : "", cause);
    } else {
        fprintf(stderr, "ticketctl: %s%s%s%s\n", key, sep, outcome_text(r->outcome), reason);
    }
    return outcome_exit(r->outcome);
}

static uint32_t clamp32(uint64_t v)
{
    return v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
}

/* ---- run --------------------------------------------------------------------- */

static volatile sig_atomic_t pending_signal;

static void on_signal(int sig)
{
    pending_signal = sig;
}

/* The caller's environment less any TICKETING_TOKEN/KEY/OWNER, plus ours. */
static char **child_env(const char *key, const char *owner, uint64_t token)
{
    size_t n = 0;
    while (environ[n] != NULL)
        n++;
    char **env = calloc(n + 4, sizeof *env);
    if (env == NULL)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "TICKETING_TOKEN=", 16) != 0 &&
            strncmp(environ[i], "TICKETING_KEY=", 14) != 0 &&
            strncmp(environ[i], "TICKETING_OWNER=", 16) != 0)
            env[k++] = environ[i];
    char tok[64];
    snprintf(tok, sizeof tok, "TICKETING_TOKEN=%llu", (unsigned long long)token);
    size_t klen = strlen("TICKETING_KEY=") + strlen(key) + 1;
    size_t olen = strlen("TICKETING_OWNER=") + strlen(owner) + 1;
    env[k] = strdup(tok);
    env[k + 1] = malloc(klen);
    env[k + 2] = malloc(olen);
    if (env[k] == NULL || env[k + 1] == NULL || env[k + 2] == NULL) {
        free(env[k]);
        free(env[k + 1]);
        free(env[k + 2]);
        free(env);
        return NULL;
    }
    snprintf(env[k + 1], klen, "TICKETING_KEY=%s", key);
    snprintf(env[k + 2], olen, "TICKETING_OWNER=%s", owner);
    return env;
}

static void free_env(char **env)
{
    if (env == NULL)
        return;
    size_t n = 0;
    while (env[n] != NULL)
        n++;
    /* The last three are ours; the rest belong to environ. */
    for (size_t i = n >= 3 ? n - 3 : 0; i < n; i++)
        free(env[i]);
    free(env);
}

/* Waits for the command, forwarding SIGINT/SIGTERM/SIGHUP. The lease is the
 * lock's end, whatever the command is doing: SIGTERM a little before it
 * (a tenth of the lease, at most 2 s), SIGKILL at it, since past it another
 * holder may already be inside. Returns the wait status. */
static int wait_child(pid_t pid, uint64_t lease_ms, uint64_t deadline_us, bool *lease_lost)
{
    uint64_t margin_us = (lease_ms / 10 < 2000 ? lease_ms / 10 : 2000) * 1000u;
    bool termed = false, killed = false;
    for (;;) {
        int st;
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid)
            return st;
        if (r < 0 && errno != EINTR)
            return -1;
        if (pending_signal != 0) {
            kill(pid, pending_signal);
            pending_signal = 0;
        }
        uint64_t now = tk_client_now_us();
        if (!termed && now + margin_us >= deadline_us) {
            fprintf(stderr, "ticketctl: the lease is running out: stopping the command\n");
            kill(pid, SIGTERM);
            termed = true;
            *lease_lost = true;
        }
        if (!killed && now >= deadline_us) {
            kill(pid, SIGKILL);
            killed = true;
        }
        struct timespec ts = {.tv_sec = 0, .tv_nsec = 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

static void release_after(const struct ctl_opts *o, struct tk_client *c, uint64_t token)
{
    struct tk_client_result rr;
    enum tk_client_outcome out = tk_client_release(c, o->key, token, &rr);
    if (out == TK_CLIENT_RELEASED) {
        if (o->verbose)
            fprintf(stderr, "ticketctl: released %s token %llu\n", o->key,
                    (unsigned long long)token);
        return;
    }
    fprintf(stderr, "ticketctl: warning: release of %s token %llu: %s\n", o->key,
            (unsigned long long)token, outcome_text(out));
}

static int cmd_run(const struct ctl_opts *o, struct tk_client *c)
{
    struct tk_client_result r;
    if (tk_client_acquire(c, o->key, clamp32(o->lease_ms), clamp32(o->wait_ms), &r) !=
        TK_CLIENT_ACQUIRED)
        return report_failure(o, &r);
    if (o->verbose)
        fprintf(stderr, "ticketctl: acquired %s token %llu\n", o->key, (unsigned long long)r.token);
    char **env = child_env(o->key, tk_client_owner(c), r.token);
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    pid_t pid;
    int rc = env ? posix_spawnp(&pid, o->argv_cmd[0], NULL, NULL, o->argv_cmd, env) : ENOMEM;
    free_env(env);
    int code;
    bool lease_lost = false;
    if (rc != 0) {
        fprintf(stderr, "ticketctl: cannot run %s: %s\n", o->argv_cmd[0], strerror(rc));
        code = rc == ENOENT ? 127 : 126; /* as a shell would say */
    } else {
        int st = wait_child(pid, o->lease_ms, r.lease_deadline_us, &lease_lost);
        if (lease_lost)
            code = CTL_EXIT_LEASE_LOST;
        else if (st >= 0 && WIFEXITED(st))
            code = WEXITSTATUS(st);
        else if (st >= 0 && WIFSIGNALED(st))
            code = 128 + WTERMSIG(st);
        else
            code = CTL_EXIT_FAIL;
    }
    release_after(o, c, r.token);
    if (o->json) {
        json_t *j = json_object();
        json_object_set_new(j, "outcome", json_string("acquired"));
        json_object_set_new(j, "key", ctl_jstr(o->key));
        json_object_set_new(j, "token", ctl_ju64(r.token));
        json_object_set_new(j, "exit", json_integer(code));
        json_object_set_new(j, "lease_lost", json_boolean(lease_lost));
        ctl_json_print(stderr, j, "\n");
    }
    return code;
}

/* ---- one request each ------------------------------------------------------------ */

static int cmd_acquire(const struct ctl_opts *o, struct tk_client *c)
{
    struct tk_client_result r;
    if (tk_client_acquire(c, o->key, clamp32(o->lease_ms), clamp32(o->wait_ms), &r) !=
        TK_CLIENT_ACQUIRED)
        return report_failure(o, &r);
    if (o->json) {
        json_t *j = json_object();
        json_object_set_new(j, "outcome", json_string("acquired"));
        json_object_set_new(j, "key", ctl_jstr(o->key));
        json_object_set_new(j, "token", ctl_ju64(r.token));
        json_object_set_new(j, "owner", ctl_jstr(tk_client_owner(c)));
        json_object_set_new(j, "lease_ms", ctl_ju64(o->lease_ms));
        ctl_json_print(stdout, j, "\n");
    } else
        printf(
            "acquired %s token %llu owner %s lease %llums\n"
            "release with: ticketctl release %s --token %llu --owner %s\n",
            o->key, (unsigned long long)r.token, tk_client_owner(c),
            (unsigned long long)o->lease_ms, o->key, (unsigned long long)r.token,
            tk_client_owner(c));
    return CTL_EXIT_OK;
}

static int cmd_release(const struct ctl_opts *o, struct tk_client *c)
{
    struct tk_client_result r;
    if (tk_client_release(c, o->key, o->token, &r) != TK_CLIENT_RELEASED)
        return report_failure(o, &r);
    if (o->json) {
        json_t *j = json_object();
        json_object_set_new(j, "outcome", json_string("released"));
        json_object_set_new(j, "key", ctl_jstr(o->key));
        json_object_set_new(j, "token", ctl_ju64(o->token));
        ctl_json_print(stdout, j, "\n");
    } else
        printf("released %s token %llu\n", o->key, (unsigned long long)o->token);
    return CTL_EXIT_OK;
}

static int cmd_query(const struct ctl_opts *o, struct tk_client *c)
{
    struct tk_client_result r;
    if (tk_client_query(c, o->key, &r) != TK_CLIENT_ANSWERED)
        return report_failure(o, &r);
    if (o->json) {
        json_t *j = json_object();
        json_object_set_new(j, "key", ctl_jstr(o->key));
        json_object_set_new(j, "held", json_boolean(r.held));
        json_object_set_new(j, "owner", ctl_jstr(r.held ? r.owner : NULL));
        json_object_set_new(j, "token", ctl_ju64(r.held ? r.token : 0));
        json_object_set_new(j, "waiters", ctl_ju64(r.held ? r.waiters : 0));
        ctl_json_print(stdout, j, "\n");
    } else if (r.held)
        printf("%s: held by %s token %llu, %u waiting\n", o->key, r.owner,
               (unsigned long long)r.token, r.waiters);
    else
        printf("%s: free\n", o->key);
    return CTL_EXIT_OK;
}

static int cmd_ping(const struct ctl_opts *o, struct tk_client *c)
{
    int code = CTL_EXIT_OK;
    for (uint64_t i = 0; i < o->count; i++) {
        struct tk_client_result r;
        if (tk_client_ping(c, &r) != TK_CLIENT_ANSWERED) {
            code = report_failure(o, &r);
            continue;
        }
        if (o->json) {
            json_t *j = json_object();
            json_object_set_new(j, "outcome", json_string("answered"));
            json_object_set_new(j, "rtt_us", ctl_ju64(r.rtt_us));
            ctl_json_print(stdout, j, "\n");
        } else
            printf("pong: %.3f ms\n", (double)r.rtt_us / 1000.0);
    }
    return code;
}

/* ---- ring show --------------------------------------------------------------------- */

/* {"version":N,"ranges":[{"first":F,"last":L,"group":"G","addrs":["h:p",...]},...]} */
static void ring_print_json(const struct tk_slot_ring *ring)
{
    json_t *ranges = json_array();
    for (uint32_t i = 0; i < ring->nranges; i++) {
        const struct tk_slot_range *rg = &ring->ranges[i];
        const struct tk_slot_group *g = &ring->groups[rg->group];
        json_t *addrs = json_array();
        for (uint32_t a = 0; a < g->naddrs; a++)
            json_array_append_new(addrs, ctl_jstr(g->addr[a]));
        json_t *j = json_object();
        json_object_set_new(j, "first", ctl_ju64(rg->first));
        json_object_set_new(j, "last", ctl_ju64(rg->last));
        json_object_set_new(j, "group", ctl_jstrn(g->name, g->name_len));
        json_object_set_new(j, "addrs", addrs);
        json_array_append_new(ranges, j);
    }
    json_t *j = json_object();
    json_object_set_new(j, "version", ctl_ju64(ring->version));
    json_object_set_new(j, "ranges", ranges);
    ctl_json_print(stdout, j, "\n");
}

/* As a ring file (core/slots.h), which `ring apply` reads back: "version
 * N", then one range a line in increasing order. Version 0 is "no ring",
 * which no file can give: said in a comment. */
static void ring_print_file(const struct tk_slot_ring *ring, const char *addr)
{
    char line[TK_SLOTS_RANGE_TEXT_MAX + 1];
    printf("version %llu\n", (unsigned long long)ring->version);
    if (ring->version == 0)
        printf(
            "# no ring: the group at %s has none yet (started without --group it serves "
            "every slot, with --group none); give it one with ticketctl ring apply\n",
            addr);
    else if (ring->nranges == 0)
        printf("# no ranges: no group serves any slot\n");
    for (uint32_t i = 0; i < ring->nranges; i++) {
        tk_slots_fmt_range(ring, i, line, sizeof line);
        printf("%s\n", line);
    }
}

int ctl_ring_show(const struct ctl_opts *o)
{
    struct ctl_opts q = *o;
    q.key = NULL; /* "show" is no key: a failure is reported without one */
    struct tk_client *c;
    int rc = make_client(&q, &c);
    if (rc != 0)
        return rc;
    /* About 720 KiB and 50 KiB at most: on the heap, once. */
    size_t cap = TK_CLIENT_RING_TEXT_MAX + 1;
    char *body = malloc(cap);
    struct tk_slot_ring *ring = calloc(1, sizeof *ring);
    struct tk_client_result r;
    char why[256];
    if (body == NULL || ring == NULL) {
        fprintf(stderr, "ticketctl: out of memory\n");
        rc = CTL_EXIT_FAIL;
    } else if (tk_client_ring(c, body, cap, &r) != TK_CLIENT_ANSWERED) {
        rc = report_failure(&q, &r);
    } else if (r.ring_len >= cap) { /* the library bounds it: never */
        fprintf(stderr, "ticketctl: the ring from %s is longer than any ring can be\n", o->addr);
        rc = CTL_EXIT_FAIL;
    } else {
        ring->version = r.ring_version;
        if (tk_slots_parse_body(body, r.ring_len, ring, why, sizeof why) != TK_OK) {
            fprintf(stderr, "ticketctl: the ring from %s does not read as a ring: %s\n", o->addr,
                    why);
            rc = CTL_EXIT_FAIL;
        } else if (o->json) {
            ring_print_json(ring);
        } else {
            ring_print_file(ring, o->addr);
        }
    }
    fflush(stdout);
    free(ring);
    free(body);
    tk_client_destroy(c);
    return rc;
}

/* ---- main ------------------------------------------------------------------------ */

/* status and members read the admin port (/status, /members), not the client protocol. */
static bool admin_cmd(const char *cmd)
{
    return strcmp(cmd, "status") == 0 || strcmp(cmd, "members") == 0;
}

/* `ring show`, or `ring apply FILE --group NAME` (o->key is the subcommand). */
static int check_ring(const struct ctl_opts *o)
{
    bool show = o->key != NULL && strcmp(o->key, "show") == 0;
    bool apply = o->key != NULL && strcmp(o->key, "apply") == 0;
    if (!show && !apply)
        return ctl_die_usage("ring needs show or apply%s%s%s", o->key ? " (not '" : "",
                             o->key ? o->key : "", o->key ? "')" : "");
    if (show && o->file != NULL)
        return ctl_die_usage("unexpected argument '%s'", o->file);
    if (show && o->group != NULL)
        return ctl_die_usage(
            "%s", "ring show takes no --group: it shows the ring of the group at --addr");
    if (apply && o->file == NULL)
        return ctl_die_usage("%s", "ring apply needs a FILE: ring apply FILE --group NAME");
    if (apply && (o->group == NULL || o->group[0] == '\0'))
        return ctl_die_usage("%s", "ring apply needs --group NAME: the group the ring is for");
    if (apply && !tk_slots_name_ok(o->group, strlen(o->group)))
        return ctl_die_usage("bad --group '%s' (1-64 bytes 0x21-0x7E, no ';' or '@')", o->group);
    return 0;
}

static int check_needs(const struct ctl_opts *o)
{
    bool ring = strcmp(o->cmd, "ring") == 0;
    int rc;
    if (ring && (rc = check_ring(o)) != 0)
        return rc;
    bool slots = strcmp(o->cmd, "slots") == 0;
    if (slots && o->key == NULL)
        return ctl_die_usage("%s", "slots needs a subcommand: slots move RANGE --to GROUP ...");
    bool needs_key = strcmp(o->cmd, "ping") != 0 && !admin_cmd(o->cmd) && !ring && !slots;
    bool remove = strcmp(o->cmd, "remove-member") == 0;
    /* The commands on a leader's peer port, with the peer secret. */
    bool peer_cmd = remove || slots || (ring && strcmp(o->key, "apply") == 0);
    if (needs_key && o->key == NULL)
        return ctl_die_usage("%s needs a %s", o->cmd, remove ? "NODEID" : "KEY");
    if (!needs_key && !ring && !slots && o->key != NULL)
        return ctl_die_usage("unexpected argument '%s'", o->key);
    if (!strcmp(o->cmd, "run") && (o->argv_cmd == NULL || o->argv_cmd[0] == NULL))
        return ctl_die_usage("%s needs a command: run KEY [flags] -- CMD [ARG...]", o->cmd);
    if (!strcmp(o->cmd, "release") && !o->have_token)
        return ctl_die_usage("%s needs --token (and the owner that acquired it)", o->cmd);
    if (!strcmp(o->cmd, "release") && o->owner == NULL)
        return ctl_die_usage("%s needs --owner (or TICKETING_OWNER): the acquirer's owner", o->cmd);
    bool peers = peer_cmd && o->peers != NULL && o->peers[0] != '\0';
    if (!peers && (o->addr == NULL || o->addr[0] == '\0'))
        return ctl_die_usage("%s", "no cluster address: --addr host:port or TICKETING_ADDR");
    /* The lists, checked before anything is asked, whatever the command:
     * the same forms and reasons as libticketing's addrs. */
    struct tk_addr addrs[CTL_ADDRS_MAX];
    size_t n;
    rc = peers ? ctl_parse_addrs("--peers", o->peers, addrs, &n)
               : ctl_parse_addrs("--addr", o->addr, addrs, &n);
    if (rc != 0)
        return rc;
    /* remove-member and ring apply check their NODEID, FILE and peer
     * secret themselves. */
    if (!admin_cmd(o->cmd) && !peer_cmd && (o->secret_file == NULL || o->secret_file[0] == '\0'))
        return ctl_die_usage("%s", "no secret: --secret-file PATH or TICKETING_SECRET_FILE");
    return 0;
}

int main(int argc, char **argv)
{
    static const char *const cmds[] = {"run",    "acquire", "release",       "query", "ping",
                                       "status", "members", "remove-member", "ring",  "slots"};
    struct ctl_opts o = {
        .lease_ms = 30000, .wait_ms = 5000, .timeout_ms = 5000, .grace_ms = 2000, .count = 1};
    int rc = parse_args(&o, argc, argv);
    if (rc != 0)
        return rc;
    if (o.addr == NULL)
        o.addr = getenv("TICKETING_ADDR");
    if (o.secret_file == NULL)
        o.secret_file = getenv("TICKETING_SECRET_FILE");
    if (o.peer_secret_file == NULL)
        o.peer_secret_file = getenv("TICKETING_PEER_SECRET_FILE");
    if (o.peers == NULL)
        o.peers = getenv("TICKETING_PEERS");
    if (o.owner == NULL)
        o.owner = getenv("TICKETING_OWNER");
    if (o.tls_ca == NULL)
        o.tls_ca = getenv("TICKETING_TLS_CA");
    if (o.tls_cert == NULL)
        o.tls_cert = getenv("TICKETING_TLS_CERT");
    if (o.tls_key == NULL)
        o.tls_key = getenv("TICKETING_TLS_KEY");
    if (o.tls_server_name == NULL)
        o.tls_server_name = getenv("TICKETING_TLS_SERVER_NAME");
    const char *admin = getenv("TICKETING_ADMIN_PORT");
    if (o.admin_port == 0 && admin != NULL && admin[0] != '\0' &&
        (rc = parse_flag(&o, "--admin-port", admin)) != 0)
        return rc;
    if (o.cmd == NULL) {
        usage(stderr);
        return CTL_EXIT_USAGE;
    }
    bool known = false;
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        known |= strcmp(o.cmd, cmds[i]) == 0;
    if (!known)
        return ctl_die_usage("unknown command '%s'", o.cmd);
    if ((rc = check_needs(&o)) != 0)
        return rc;
    if (admin_cmd(o.cmd))
        return ctl_status(&o); /* both: it tells them apart by o.cmd */
    if (!strcmp(o.cmd, "remove-member"))
        return ctl_remove_member(&o);
    if (!strcmp(o.cmd, "ring"))
        return !strcmp(o.key, "show") ? ctl_ring_show(&o) : ctl_ring_apply(&o);
    if (!strcmp(o.cmd, "slots"))
        return ctl_slots_move(&o);

    struct tk_client *c;
    if ((rc = make_client(&o, &c)) != 0)
        return rc;
    if (!strcmp(o.cmd, "run"))
        rc = cmd_run(&o, c);
    else if (!strcmp(o.cmd, "acquire"))
        rc = cmd_acquire(&o, c);
    else if (!strcmp(o.cmd, "release"))
        rc = cmd_release(&o, c);
    else if (!strcmp(o.cmd, "query"))
        rc = cmd_query(&o, c);
    else
        rc = cmd_ping(&o, c);
    fflush(stdout);
    tk_client_destroy(c);
    return rc;
}
