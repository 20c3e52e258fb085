/* Flag and environment parsing for ticketingd. One table lists every
 * option, its environment variable, its bounds and its help line, so the
 * three cannot drift apart. */
#include "net/config.h"
#include "core/addr.h"
#include "core/slots.h"
#include "net/log.h"
#include "tk_version.h"

#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* OPT_LEVEL and OPT_FORMAT: a uint32_t set from a name of their list (any
 * case) to its index in the list; when max is not 0, the index itself is
 * accepted too. */
enum opt_kind { OPT_STR, OPT_U32, OPT_U64, OPT_BOOL, OPT_LEVEL, OPT_FORMAT };

struct opt {
    const char *name; /* flag without "--"; env is TICKETING_ + upper(name) */
    enum opt_kind kind;
    size_t off;
    size_t size; /* strings: buffer size */
    uint64_t min, max;
    const char *help;
};

/* In the order of TK_LOG_ERROR.. and TK_LOG_TEXT.. (net/log.h). */
static const char *const level_names[] = {"error", "warn", "info", "debug", NULL};
static const char *const format_names[] = {"text", "json", NULL};

#define O(f) offsetof(struct tk_options, f)
#define S(f) sizeof(((struct tk_options *)0)->f)
static const struct opt opts[] = {
    {"bind", OPT_STR, O(bind), S(bind), 0, 0, "listen address (default 0.0.0.0)"},
    {"port", OPT_U32, O(port), 0, 1, 65533, "client port (default 7400)"},
    {"peer-port", OPT_U32, O(peer_port), 0, 1, 65535, "Raft peer port (default port+1)"},
    {"admin-port", OPT_U32, O(admin_port), 0, 1, 65535, "admin HTTP port (default port+2)"},
    {"advertise", OPT_STR, O(advertise), S(advertise), 0, 0,
     "client host:port as clients reach it"},
    {"peers", OPT_STR, O(peers), S(peers), 0, 0, "peer host:port of every member (3 or 5)"},
    {"group", OPT_STR, O(group), S(group), 0, 0,
     "this group's name among several (serves no slot until a ring names it)"},
    {"client-secret-file", OPT_STR, O(client_secret_file), S(client_secret_file), 0, 0,
     "file holding the client secret (required)"},
    {"peer-secret-file", OPT_STR, O(peer_secret_file), S(peer_secret_file), 0, 0,
     "file holding the peer secret (required with --peers)"},
    {"tls-cert", OPT_STR, O(tls_cert), S(tls_cert), 0, 0, "TLS certificate (PEM)"},
    {"tls-key", OPT_STR, O(tls_key), S(tls_key), 0, 0, "TLS private key (PEM)"},
    {"tls-ca", OPT_STR, O(tls_ca), S(tls_ca), 0, 0, "TLS CA bundle for peers/clients (PEM)"},
    {"tls-client-auth", OPT_BOOL, O(tls_client_auth), 0, 0, 1,
     "require client certificates signed by --tls-ca on the client port"},
    {"tls-peer-ca", OPT_STR, O(tls_peer_ca), S(tls_peer_ca), 0, 0,
     "CA bundle (PEM) of the peer port alone: only certificates it signed are peers "
     "(default --tls-ca, and then a peer's certificate must name a member)"},
    {"tls-peer-cert", OPT_STR, O(tls_peer_cert), S(tls_peer_cert), 0, 0,
     "this node's certificate on the peer port (default --tls-cert)"},
    {"tls-peer-key", OPT_STR, O(tls_peer_key), S(tls_peer_key), 0, 0,
     "its private key (default --tls-key)"},
    {"tls-peer-names", OPT_STR, O(tls_peer_names), S(tls_peer_names), 0, 0,
     "without --tls-peer-ca: names (comma list) a peer certificate may hold besides the "
     "hosts of --peers and the configuration"},
    {"threads", OPT_U32, O(threads), 0, 1, 64,
     "worker threads (default: 1 on 1-2 usable CPUs, else one per CPU)"},
    {"heartbeat-ms", OPT_U32, O(heartbeat_ms), 0, 1, 10000, "Raft heartbeat (default 100)"},
    {"election-ms", OPT_U32, O(election_ms), 0, 10, 60000,
     "Raft election timeout, drawn in [ms, ms+100] (default 2400)"},
    {"allow-same-secrets", OPT_BOOL, O(same_secrets_ok), 0, 0, 1,
     "accept one secret for clients and peers (then any client may act as a peer)"},
    {"force-new-domain", OPT_BOOL, O(force_new_domain), 0, 0, 1,
     "after a majority of members lost their state: once a majority of --peers are fresh and "
     "no member knows a leader, start a new fencing domain (held locks are forgotten); "
     "joins a live leader otherwise. Never leave it set"},
    {"new-domain-hold-ms", OPT_U32, O(new_domain_hold_ms), 0, 0, 3600000,
     "a forced new domain grants nothing this long (default 250000, the longest lease)"},
    {"max-clock-drift-ms", OPT_U32, O(max_clock_drift_ms), 0, 1, 60000,
     "the most two members' clocks may differ (wall clocks, and a monotonic clock's jumps "
     "within a lease); every time-based safety rule waits this much longer (default 50)"},
    {"log-level", OPT_LEVEL, O(log_level), 0, 0, 3,
     "error, warn, info or debug, or 0-3 in that order (default info)"},
    {"log-format", OPT_FORMAT, O(log_format), 0, 0, 0,
     "text or json: one JSON object per line (default text)"},
    {"max-connections", OPT_U32, O(max_connections), 0, 1, 1000000,
     "client connections (default 10000)"},
    {"max-handshakes", OPT_U32, O(max_handshakes), 0, 1, 1000000,
     "client connections still in the handshake; the oldest goes first (default 1024)"},
    {"max-admin-connections", OPT_U32, O(max_admin_connections), 0, 4, 65536,
     "admin HTTP connections open at once; past it the oldest goes (default 1024)"},
    {"max-inflight", OPT_U32, O(max_inflight), 0, 1, 1000000,
     "requests in flight per connection (default 4096)"},
    {"max-waiters-per-key", OPT_U32, O(max_waiters_per_key), 0, 1, 100000000,
     "queued acquires per key (default 4096)"},
    {"max-waiters", OPT_U64, O(max_waiters), 0, 1, UINT64_C(1) << 40,
     "queued acquires in all (default 1000000)"},
    {"max-keys", OPT_U64, O(max_keys), 0, 1, UINT64_C(1) << 40,
     "keys in the table (default 10000000)"},
    {"max-log-entries", OPT_U64, O(max_log_entries), 0, 16, UINT64_C(1) << 32,
     "Raft log entries kept in memory (default 65536)"},
    {"max-frame-bytes", OPT_U32, O(max_frame_bytes), 0, 8u << 20, 16u << 20,
     "largest peer frame (default 16 MiB)"},
    {"handshake-ms", OPT_U32, O(handshake_ms), 0, 100, 600000,
     "time allowed for the handshake (default 5000)"},
};
#undef O
#undef S

static void defaults(struct tk_options *o)
{
    memset(o, 0, sizeof(*o));
    strcpy(o->bind, "0.0.0.0");
    o->port = 7400;
    o->heartbeat_ms = 100;
    o->election_ms = 2400;
    o->new_domain_hold_ms = 250000;
    o->max_clock_drift_ms = 50;
    o->log_level = TK_LOG_INFO;
    o->log_format = TK_LOG_TEXT;
    o->max_connections = 10000;
    o->max_handshakes = 1024;
    o->max_admin_connections = 1024;
    o->max_inflight = 4096;
    o->max_waiters_per_key = 4096;
    o->max_waiters = 1000000;
    o->max_keys = 10000000;
    o->max_log_entries = 65536;
    o->max_frame_bytes = 16u << 20;
    o->handshake_ms = 5000;
}

/* An OPT_LEVEL or OPT_FORMAT value, one of names; the error lists the accepted values, e.g.
 * "expected error, warn, info or debug (or 0-3)". */
static int set_name(const struct opt *op,
                    const char *const *names,
                    uint32_t *out,
                    const char *val,
                    const char *src,
                    char *err,
                    size_t errlen)
{
    uint32_t count = 0;
    for (; names[count]; count++) {
        if (!strcasecmp(val, names[count])) {
            *out = count;
            return 0;
        }
    }
    if (op->max && val[0] >= '0' && val[0] <= '9' && !val[1] &&
        (uint32_t)(val[0] - '0') <= op->max) {
        *out = (uint32_t)(val[0] - '0');
        return 0;
    }
    char list[128] = "";
    size_t n = 0;
    for (uint32_t i = 0; i < count && n < sizeof(list); i++)
        n += (size_t)snprintf(list + n, sizeof(list) - n, "%s%s",
                              i == 0           ? ""
                              : i + 1 == count ? " or "
                                               : ", ",
                              names[i]);
    char nums[32] = "";
    if (op->max)
        snprintf(nums, sizeof(nums), " (or %llu-%llu)", (unsigned long long)op->min,
                 (unsigned long long)op->max);
    snprintf(err, errlen, "%s: expected %s%s, got '%.64s'", src, list, nums, val);
    return -1;
}

static int set(struct tk_options *o,
               const struct opt *op,
               const char *val,
               const char *src,
               char *err,
               size_t errlen)
{
    char *base = (char *)o + op->off;
    if (op->kind == OPT_STR) {
        if (strlen(val) >= op->size) {
            snprintf(err, errlen, "%s: value too long", src);
            return -1;
        }
        strcpy(base, val);
        return 0;
    }
    if (op->kind == OPT_BOOL) {
        if (!strcmp(val, "1") || !strcmp(val, "true") || !strcmp(val, "yes")) {
            *(bool *)base = true;
        } else if (!strcmp(val, "0") || !strcmp(val, "false") || !strcmp(val, "no")) {
            *(bool *)base = false;
        } else {
            snprintf(err, errlen, "%s: expected true or false, got '%s'", src, val);
            return -1;
        }
        return 0;
    }
    if (op->kind == OPT_LEVEL || op->kind == OPT_FORMAT)
        return set_name(op, op->kind == OPT_LEVEL ? level_names : format_names, (uint32_t *)base,
                        val, src, err, errlen);
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(val, &end, 10);
    if (errno || end == val || *end || val[0] == '-' || v < op->min || v > op->max) {
        snprintf(err, errlen, "%s: expected an integer in %llu..%llu, got '%s'", src,
                 (unsigned long long)op->min, (unsigned long long)op->max, val);
        return -1;
    }
    if (op->kind == OPT_U32)
        *(uint32_t *)base = (uint32_t)v;
    else
        *(uint64_t *)base = (uint64_t)v;
    return 0;
}

static void usage(void)
{
    printf(
        "usage: ticketingd [options]\n\n"
        "Every option can also be set by its environment variable, e.g. --peer-port\n"
        "as TICKETING_PEER_PORT; flags win over the environment.\n\n"
        "  --%-22s %s\n",
        "version", "print the version and the commit built, then exit");
    for (size_t i = 0; i < TK_ARRAY_LEN(opts); i++)
        printf("  --%-22s %s\n", opts[i].name, opts[i].help);
}

/* TLS flags that cannot work together are refused here, before any file
 * is read: a half-configured TLS must never fall back to plaintext. */
static int tls_check(const struct tk_options *o, char *err, size_t errlen)
{
    bool cert = o->tls_cert[0], key = o->tls_key[0];
    const char *why = NULL;
    if (cert != key)
        why = "--tls-cert and --tls-key go together: give both or neither";
    else if (o->tls_ca[0] && !cert)
        why =
            "--tls-ca needs --tls-cert and --tls-key (the client port speaks TLS only with a "
            "certificate)";
    else if (o->tls_client_auth && !cert)
        why = "--tls-client-auth needs --tls-cert, --tls-key and --tls-ca";
    else if (o->tls_client_auth && !o->tls_ca[0])
        why = "--tls-client-auth needs --tls-ca (the CA that signs client certificates)";
    else if (cert && o->peers[0] && !o->tls_ca[0] && !o->tls_peer_ca[0])
        why =
            "a cluster member with TLS needs --tls-ca (or --tls-peer-ca): peers verify each "
            "other's certificates";
    else if (!o->tls_peer_cert[0] != !o->tls_peer_key[0])
        why = "--tls-peer-cert and --tls-peer-key go together: give both or neither";
    else if ((o->tls_peer_ca[0] || o->tls_peer_cert[0] || o->tls_peer_names[0]) && !cert)
        why =
            "--tls-peer-ca, --tls-peer-cert, --tls-peer-key and --tls-peer-names need "
            "--tls-cert and --tls-key (TLS on)";
    else if (o->tls_peer_ca[0] && o->tls_peer_names[0])
        why =
            "--tls-peer-names is for a CA shared with clients; with --tls-peer-ca every "
            "certificate it signed is a peer";
    if (why) {
        snprintf(err, errlen, "%s", why);
        return -1;
    }
    return 0;
}

/* The address flags, in core/addr.h's forms: --bind a host alone,
 * --advertise one host:port that clients can reach, --peers a list of at
 * most TK_PEERS_MAX (its count, 3 or 5, is checked at start). A bracketed
 * --bind loses its brackets here, as the listeners' lookup wants it bare. */
static int addrs_check(struct tk_options *o, char *err, size_t errlen)
{
    struct tk_addr a, peers[TK_PEERS_MAX];
    const char *why = NULL;
    char list_why[256];
    size_t n;
    if (tk_addr_parse_host(o->bind, strlen(o->bind), &a, &why) != TK_OK) {
        snprintf(err, errlen, "--bind '%.64s': %s", o->bind, why);
        return -1;
    }
    snprintf(o->bind, sizeof(o->bind), "%s", a.host);
    if (o->group[0] && !tk_slots_name_ok(o->group, strlen(o->group))) {
        snprintf(err, errlen,
                 "--group '%.64s': not a group name (1-64 bytes 0x21-0x7E, no ';' or '@')",
                 o->group);
        return -1;
    }
    if (o->advertise[0] && tk_addr_parse(o->advertise, strlen(o->advertise), &a, &why) != TK_OK) {
        snprintf(err, errlen, "--advertise '%.64s': %s", o->advertise, why);
        return -1;
    }
    if (o->advertise[0] && (!strcmp(a.host, "0.0.0.0") || !strcmp(a.host, "::"))) {
        snprintf(err, errlen, "--advertise '%.64s': not an address clients can reach",
                 o->advertise);
        return -1;
    }
    if (o->peers[0] && tk_addr_parse_list(o->peers, strlen(o->peers), peers, TK_PEERS_MAX, &n,
                                          list_why, sizeof(list_why)) != TK_OK) {
        snprintf(err, errlen, "--peers: %s", list_why);
        return -1;
    }
    return 0;
}

int tk_options_parse(struct tk_options *o, int argc, char **argv, char *err, size_t errlen)
{
    defaults(o);
    for (size_t i = 0; i < TK_ARRAY_LEN(opts); i++) {
        char env[64] = "TICKETING_";
        size_t n = strlen(env);
        for (const char *p = opts[i].name; *p && n < sizeof(env) - 1; p++)
            env[n++] = *p == '-' ? '_' : (char)(*p >= 'a' && *p <= 'z' ? *p - 32 : *p);
        env[n] = 0;
        const char *v = getenv(env);
        if (v && set(o, &opts[i], v, env, err, errlen) < 0)
            return -1;
    }
    for (int a = 1; a < argc; a++) {
        const char *arg = argv[a];
        if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) {
            usage();
            return 1;
        }
        if (!strcmp(arg, "--version")) {
            printf("ticketingd %s (commit %s)\n", TK_VERSION, TK_COMMIT);
            return 1;
        }
        if (strncmp(arg, "--", 2) != 0) {
            snprintf(err, errlen, "unexpected argument '%s' (see --help)", arg);
            return -1;
        }
        const char *name = arg + 2;
        const char *eq = strchr(name, '=');
        size_t nlen = eq ? (size_t)(eq - name) : strlen(name);
        const struct opt *op = NULL;
        for (size_t i = 0; i < TK_ARRAY_LEN(opts); i++)
            if (strlen(opts[i].name) == nlen && !strncmp(opts[i].name, name, nlen))
                op = &opts[i];
        if (!op) {
            snprintf(err, errlen, "unknown option '%s' (see --help)", arg);
            return -1;
        }
        const char *val = eq ? eq + 1 : NULL;
        if (!val && op->kind == OPT_BOOL)
            val = "true";
        if (!val) {
            if (a + 1 >= argc) {
                snprintf(err, errlen, "option '%s' needs a value", arg);
                return -1;
            }
            val = argv[++a];
        }
        if (set(o, op, val, arg, err, errlen) < 0)
            return -1;
    }
    if (!o->peer_port)
        o->peer_port = o->port + 1;
    if (!o->admin_port)
        o->admin_port = o->port + 2;
    if (o->peer_port == o->port || o->admin_port == o->port || o->admin_port == o->peer_port) {
        snprintf(err, errlen, "client, peer and admin ports must differ");
        return -1;
    }
    if (!o->client_secret_file[0]) {
        snprintf(err, errlen, "--client-secret-file is required");
        return -1;
    }
    if (addrs_check(o, err, errlen) < 0)
        return -1;
    return tls_check(o, err, errlen);
}

/* ------------------------------------------------------------------ */
/* Usable CPUs                                                         */

bool tk_read_small(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return false;
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = 0;
    return n > 0;
}

/* path under root, in full (cap bytes); false if it does not fit. */
static bool under(const char *root, const char *path, char *full, size_t cap)
{
    int w = snprintf(full, cap, "%s%s", root, path);
    return w >= 0 && (size_t)w < cap;
}

/* tk_read_small of path under root. */
static bool read_small(const char *root, const char *path, char *buf, size_t cap)
{
    char full[TK_PATH_MAX * 4];
    return under(root, path, full, sizeof(full)) && tk_read_small(full, buf, cap);
}

/* Whether the comma list `list` holds `word`. */
static bool list_has(const char *list, size_t len, const char *word)
{
    size_t w = strlen(word);
    for (size_t i = 0; i < len;) {
        size_t j = i;
        while (j < len && list[j] != ',')
            j++;
        if (j - i == w && memcmp(list + i, word, w) == 0)
            return true;
        i = j + 1;
    }
    return false;
}

/* The directory of this process's cgroup in the hierarchy holding the cpu
 * controller: v2 (`v2` true) or v1. Found from /proc/self/cgroup (its path
 * in the hierarchy) and /proc/self/mountinfo (where the hierarchy is
 * mounted, and which part of it: a container sees its own subtree). */
static bool cgroup_dir(const char *root, bool v2, char *dir, size_t dirlen, size_t *mnt_len)
{
    char cg[8192], mpath[TK_PATH_MAX * 2];
    if (!read_small(root, "/proc/self/cgroup", cg, sizeof(cg)) ||
        !under(root, "/proc/self/mountinfo", mpath, sizeof(mpath)))
        return false;
    const char *path = NULL;
    size_t path_len = 0;
    for (char *line = cg; *line != 0;) {
        char *end = strchrnul(line, '\n');
        /* "id:controllers:path" */
        char *c1 = memchr(line, ':', (size_t)(end - line));
        char *c2 = c1 != NULL ? memchr(c1 + 1, ':', (size_t)(end - c1 - 1)) : NULL;
        if (c2 != NULL) {
            bool match = v2 ? (c1 - line == 1 && line[0] == '0' && c2 == c1 + 1)
                            : list_has(c1 + 1, (size_t)(c2 - c1 - 1), "cpu");
            if (match) {
                path = c2 + 1;
                path_len = (size_t)(end - path);
                break;
            }
        }
        line = *end != 0 ? end + 1 : end;
    }
    /* mountinfo can be long on a busy node: read it a line at a time. */
    FILE *f = path != NULL ? fopen(mpath, "re") : NULL;
    if (f == NULL)
        return false;
    bool found = false;
    char *line = NULL;
    size_t cap = 0;
    while (!found && getline(&line, &cap, f) > 0) {
        /* "id parent maj:min root mountpoint options [tags] - type source super" */
        char mroot[TK_PATH_MAX], mpoint[TK_PATH_MAX], fstype[64], super[512] = "";
        const char *dash = strstr(line, " - ");
        bool ok = dash != NULL && sscanf(line, "%*s %*s %*s %1023s %1023s", mroot, mpoint) == 2 &&
                  sscanf(dash + 3, "%63s %*s %511s", fstype, super) >= 1;
        if (!ok || !(v2 ? strcmp(fstype, "cgroup2") == 0
                        : strcmp(fstype, "cgroup") == 0 && list_has(super, strlen(super), "cpu")))
            continue;
        /* The part of the path below the mount's root ("/" mounts all). */
        size_t rl = strcmp(mroot, "/") == 0 ? 0 : strlen(mroot);
        const char *rest = path;
        size_t rest_len = path_len;
        if (rl > 0 && rest_len >= rl && memcmp(rest, mroot, rl) == 0 &&
            (rest_len == rl || rest[rl] == '/')) {
            rest += rl;
            rest_len -= rl;
        } else if (rl > 0) {
            rest_len = 0; /* another subtree: use the mount's own root */
        }
        *mnt_len = strlen(mpoint);
        int n = snprintf(dir, dirlen, "%s%.*s", mpoint, (int)rest_len, rest);
        if (n < 0 || (size_t)n >= dirlen)
            break;
        for (size_t l = strlen(dir); l > *mnt_len && dir[l - 1] == '/'; l--)
            dir[l - 1] = 0;
        found = true;
    }
    free(line);
    fclose(f);
    return found;
}

/* The lowest CPU quota of dir and its ancestors down to the mount point
 * (mnt_len characters), in CPUs; 0 when none is set. */
static double cgroup_quota(const char *root, bool v2, char *dir, size_t mnt_len)
{
    double best = 0;
    for (;;) {
        char path[TK_PATH_MAX * 2 + 32], a[64], b[64];
        double q = 0;
        if (v2) {
            snprintf(path, sizeof(path), "%s/cpu.max", dir);
            long long quota, period;
            if (read_small(root, path, a, sizeof(a)) &&
                sscanf(a, "%lld %lld", &quota, &period) == 2 && quota > 0 && period > 0)
                q = (double)quota / (double)period;
        } else {
            snprintf(path, sizeof(path), "%s/cpu.cfs_quota_us", dir);
            bool got = read_small(root, path, a, sizeof(a));
            snprintf(path, sizeof(path), "%s/cpu.cfs_period_us", dir);
            long long quota = got ? atoll(a) : -1;
            long long period = read_small(root, path, b, sizeof(b)) ? atoll(b) : 0;
            if (quota > 0 && period > 0)
                q = (double)quota / (double)period;
        }
        if (q > 0 && (best == 0 || q < best))
            best = q;
        /* Up one level, never above the mount point. */
        char *slash = strrchr(dir, '/');
        if (slash == NULL || (size_t)(slash - dir) < mnt_len)
            break;
        *slash = 0;
    }
    return best;
}

uint32_t tk_usable_cpus(const char *root, char *why, size_t whylen)
{
    cpu_set_t set;
    long cpus = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set)
                                                             : sysconf(_SC_NPROCESSORS_ONLN);
    if (cpus < 1)
        cpus = 1;
    snprintf(why, whylen, "%ld CPUs in the affinity mask", cpus);
    for (int v2 = 1; v2 >= 0; v2--) {
        char dir[TK_PATH_MAX * 2];
        size_t mnt_len = 0;
        if (!cgroup_dir(root, v2, dir, sizeof(dir), &mnt_len))
            continue;
        double q = cgroup_quota(root, v2, dir, mnt_len);
        if (q <= 0)
            continue;
        long up = (long)q; /* rounded up: 1.5 CPUs of quota can run 2 threads */
        if ((double)up < q - 1e-9 || up < 1)
            up++;
        if (up <= cpus) { /* as tight as the mask or tighter: name the quota */
            cpus = up;
            snprintf(why, whylen, "cgroup %s CPU quota of %.2f CPUs", v2 ? "v2" : "v1", q);
        }
        break;
    }
    return (uint32_t)cpus;
}

uint32_t tk_default_threads(uint32_t cpus)
{
    return cpus <= 2 ? 1 : TK_MIN(cpus, (uint32_t)64);
}
