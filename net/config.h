/* ticketingd configuration: flags, matching TICKETING_* environment
 * variables, and their defaults (SPEC 1, 12-14). */
#ifndef TK_NET_CONFIG_H
#define TK_NET_CONFIG_H

#include "core/tk.h"

#define TK_ADDR_MAX 256
#define TK_PATH_MAX 1024
#define TK_PEERS_MAX 5

struct tk_options {
    char bind[TK_ADDR_MAX];      /* listen address for all three ports */
    uint32_t port;               /* client port */
    uint32_t peer_port;          /* 0: port + 1 */
    uint32_t admin_port;         /* 0: port + 2 */
    char advertise[TK_ADDR_MAX]; /* host:port clients reach; "" = bind:port unless 0.0.0.0 */
    char peers[TK_ADDR_MAX * TK_PEERS_MAX + 8]; /* comma list of peer addresses */
    char group[65];                             /* --group: this group's name (SPEC 15), "" none */
    char client_secret_file[TK_PATH_MAX];
    char peer_secret_file[TK_PATH_MAX];
    char tls_cert[TK_PATH_MAX];
    char tls_key[TK_PATH_MAX];
    char tls_ca[TK_PATH_MAX];
    bool tls_client_auth; /* client port: require certificates signed by tls_ca */
    /* The peer port: its own CA and certificate (default: the three above),
     * and names a peer certificate may carry besides members' hosts. */
    char tls_peer_ca[TK_PATH_MAX];
    char tls_peer_cert[TK_PATH_MAX];
    char tls_peer_key[TK_PATH_MAX];
    char tls_peer_names[TK_ADDR_MAX];
    uint32_t threads; /* 0: tk_default_threads(tk_usable_cpus()) */
    uint32_t heartbeat_ms;
    uint32_t election_ms; /* lower bound; the timeout is drawn in [ms, ms + 100] */
    bool force_new_domain;
    bool same_secrets_ok;        /* allow one secret for clients and peers */
    uint32_t new_domain_hold_ms; /* a forced domain serves nothing this long */
    uint32_t max_clock_drift_ms; /* the margin of every time-based safety rule */
    uint32_t log_level;          /* TK_LOG_ERROR (0) .. TK_LOG_DEBUG (3) */
    uint32_t log_format;         /* TK_LOG_TEXT or TK_LOG_JSON */

    /* Bounds (SPEC 14). */
    uint32_t max_connections;
    uint32_t max_handshakes; /* connections not yet authenticated */
    uint32_t max_inflight;   /* per connection */
    uint32_t max_waiters_per_key;
    uint64_t max_waiters;
    uint64_t max_keys;
    uint64_t max_log_entries;
    uint32_t max_frame_bytes;
    uint32_t handshake_ms;
    uint32_t max_admin_connections; /* open admin HTTP connections */
};

/* Fills defaults, then the environment, then argv. Returns 0 on success,
 * 1 if --help was printed, or -1 with a message in err. */
int tk_options_parse(struct tk_options *o, int argc, char **argv, char *err, size_t errlen);

/* Reads a small file (/proc, /sys) into buf, NUL-terminated; false if it
 * is missing, unreadable or empty. */
bool tk_read_small(const char *path, char *buf, size_t cap);

/* The CPUs this process may use: its affinity mask (a container's cpuset),
 * lowered to a cgroup CPU quota rounded up (cgroup v2 cpu.max or v1
 * cpu.cfs_quota_us, on the process's cgroup and each ancestor). `root`
 * prefixes the /proc and /sys paths read ("" in production, a directory
 * tree in tests). `why` gets what set the figure, for the log. */
uint32_t tk_usable_cpus(const char *root, char *why, size_t whylen);

/* The default --threads on that many CPUs: one worker running the Raft
 * loop inline on 1-2 CPUs (a separate Raft thread and a second worker
 * would share two CPUs with every commit crossing threads), else one
 * worker per CPU. */
uint32_t tk_default_threads(uint32_t cpus);

#endif
