/* ticketingd: parses the configuration, loads secrets and TLS material,
 * starts the worker, Raft and admin threads, reloads the TLS certificate
 * on SIGHUP, and stops them cleanly on SIGTERM or SIGINT. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/addr.h"
#include "core/auth.h"
#include "core/tls.h"
#include "net/server.h"

static struct tk_server server;

static int count_peers(const char *peers)
{
    if (!peers[0])
        return 0;
    int n = 1;
    for (const char *p = peers; *p; p++)
        n += *p == ',';
    return n;
}

/* s->advertise: --advertise (tk_options_parse checked it), else --bind
 * and --port when --bind is one address, else this host's name and --port;
 * a name that is not a host name is refused, as the peers could not dial
 * it and clients would not follow a redirect to it. 0, or -1 (logged). */
static int advertise_default(struct tk_server *s)
{
    struct tk_addr a;
    const char *why = NULL;
    if (s->opt.advertise[0]) {
        snprintf(s->advertise, sizeof(s->advertise), "%s", s->opt.advertise);
        return 0;
    }
    if (strcmp(s->opt.bind, "0.0.0.0") != 0 && strcmp(s->opt.bind, "::") != 0) {
        /* Checked by tk_options_parse; parsed again for its kind ([v6]:port). */
        int rc = tk_addr_parse_host(s->opt.bind, strlen(s->opt.bind), &a, &why);
        TK_ASSERT(rc == TK_OK);
    } else {
        char host[TK_ADDR_MAX - 8] = "localhost";
        gethostname(host, sizeof(host));
        host[sizeof(host) - 1] = 0;
        if (tk_addr_parse_host(host, strlen(host), &a, &why) != TK_OK) {
            if (s->opt.peers[0]) {
                tk_log(TK_LOG_ERROR,
                       "this host's name '%.64s' cannot be advertised (%s): set --advertise", host,
                       why);
                return -1;
            }
            /* Standalone, nobody is sent to it: say so, and go on. */
            tk_log(TK_LOG_WARN,
                   "this host's name '%.64s' cannot be advertised (%s): advertising localhost; "
                   "set --advertise if clients should be told another name",
                   host, why);
            int rc = tk_addr_parse_host("localhost", 9, &a, &why);
            TK_ASSERT(rc == TK_OK);
        }
    }
    a.port = (uint16_t)s->opt.port;
    if (tk_addr_format(&a, s->advertise, sizeof(s->advertise)) >= sizeof(s->advertise)) {
        tk_log(TK_LOG_ERROR, "--bind '%.64s...' is too long to advertise: set --advertise",
               s->opt.bind);
        return -1;
    }
    return 0;
}

/* A NodeId: random at every process start, never reused (SPEC 10). */
static uint64_t random_node_id(void)
{
    uint64_t v = 0;
    TK_ASSERT(tk_auth_random(&v, sizeof(v)) == TK_OK);
    return v ? v : 1;
}

/* Reads a secret file, naming the real error; warns when the file is
 * readable by group or others (Kubernetes mounts secrets 0644 unless told
 * otherwise: defaultMode 0400 is the fix). Returns 0 or -1 (logged). */
static int load_secret(const char *what, const char *path, uint8_t *buf, size_t cap, size_t *len)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        tk_log(TK_LOG_ERROR, "%s secret %s: %s", what, path, strerror(errno));
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        tk_log(TK_LOG_ERROR, "%s secret %s: not a regular file", what, path);
        return -1;
    }
    int rc = tk_auth_load_secret(path, buf, cap, len);
    if (rc == TK_EIO) {
        tk_log(TK_LOG_ERROR, "%s secret %s: %s", what, path, strerror(errno ? errno : EIO));
        return -1;
    }
    if (rc != TK_OK) {
        tk_log(TK_LOG_ERROR, "%s secret %s: %s (a secret is %d to %d bytes)", what, path,
               tk_strerror(rc), TK_AUTH_SECRET_MIN, TK_AUTH_SECRET_MAX);
        return -1;
    }
    if (st.st_mode & (S_IRWXG | S_IRWXO))
        tk_log(TK_LOG_WARN,
               "%s secret %s is readable by group or others (mode %03o); "
               "chmod 600 it",
               what, path, (unsigned)(st.st_mode & 0777));
    return 0;
}

/* A client-port TLS context from the files the flags name (read again at
 * every reload, so replaced files take effect). */
static int tls_load(struct tk_server *s, struct tk_tls_ctx **out, char *why, size_t cap)
{
    struct tk_tls_opts o = {
        .server = true,
        .cert = s->opt.tls_cert,
        .key = s->opt.tls_key,
        .ca = s->opt.tls_ca[0] ? s->opt.tls_ca : NULL,
        .verify_peer = s->opt.tls_client_auth,
    };
    return tk_tls_ctx_new(&o, out, why, cap);
}

/* SIGHUP: new connections get a context made from the files as they are
 * now; connections already open keep theirs (each holds a reference). A
 * reload that fails keeps the old context and says why. */
static void tls_reload(struct tk_server *s)
{
    if (!s->tls) {
        tk_log(TK_LOG_INFO, "SIGHUP: no TLS configured, nothing to reload");
        return;
    }
    struct tk_tls_ctx *fresh = NULL;
    char why[TK_TLS_ERR_MAX];
    if (tls_load(s, &fresh, why, sizeof(why)) != TK_OK) {
        tk_log(TK_LOG_ERROR, "TLS reload failed, keeping the previous certificate: %s", why);
        return;
    }
    pthread_mutex_lock(&s->tls_lock);
    struct tk_tls_ctx *old = s->tls_ctx;
    s->tls_ctx = fresh;
    pthread_mutex_unlock(&s->tls_lock);
    tk_tls_ctx_unref(old);
    tk_log(TK_LOG_INFO, "TLS: reloaded %s for new connections", s->opt.tls_cert);
}

static int setup(struct tk_server *s, int argc, char **argv)
{
    char err[512];
    int rc = tk_options_parse(&s->opt, argc, argv, err, sizeof(err));
    if (rc == 1)
        exit(0);
    if (rc < 0) {
        fprintf(stderr, "ticketingd: %s\n", err);
        return 2;
    }
    s->node_id = random_node_id();
    tk_log_init((int)s->opt.log_level, (int)s->opt.log_format, s->node_id);
    int npeers = count_peers(s->opt.peers);
    if (npeers != 0 && npeers != 3 && npeers != 5) {
        tk_log(TK_LOG_ERROR,
               "--peers lists %d members; a cluster has exactly 3 or 5 "
               "(an even count adds cost without fault tolerance)",
               npeers);
        return 2;
    }
    if (npeers != 0 && !s->opt.peer_secret_file[0]) {
        tk_log(TK_LOG_ERROR, "--peer-secret-file is required with --peers");
        return 2;
    }
    pthread_mutex_init(&s->tls_lock, NULL);
    if (s->opt.tls_cert[0]) {
        /* tk_options_parse checked the flags go together; the files are
         * checked here, so a bad certificate stops the start. */
        char why[TK_TLS_ERR_MAX];
        if (tls_load(s, &s->tls_ctx, why, sizeof(why)) != TK_OK) {
            tk_log(TK_LOG_ERROR, "TLS: %s", why);
            return 2;
        }
        s->tls = true;
    }
    if (load_secret("client", s->opt.client_secret_file, s->client_secret, sizeof(s->client_secret),
                    &s->client_secret_len) != 0)
        return 2;
    if (s->opt.peer_secret_file[0]) {
        if (load_secret("peer", s->opt.peer_secret_file, s->peer_secret, sizeof(s->peer_secret),
                        &s->peer_secret_len) != 0)
            return 2;
        /* With one secret for both, any client could authenticate on the
         * peer port and speak Raft. */
        if (s->peer_secret_len == s->client_secret_len &&
            tk_auth_equal(s->peer_secret, s->client_secret, s->peer_secret_len)) {
            if (!s->opt.same_secrets_ok) {
                tk_log(TK_LOG_ERROR,
                       "the client and peer secrets are the same: any client "
                       "could act as a cluster member; use two secrets (or "
                       "--allow-same-secrets)");
                return 2;
            }
            tk_log(TK_LOG_WARN,
                   "the client and peer secrets are the same "
                   "(--allow-same-secrets): any client can act as a peer");
        }
    }
    if (advertise_default(s) != 0)
        return 2;
    /* Default: from the CPUs this process may use (affinity, e.g. a
     * container's cpuset, and a cgroup CPU quota), not every CPU of the
     * machine. */
    char cpus_why[96] = "--threads";
    s->nworkers = s->opt.threads
                      ? s->opt.threads
                      : tk_default_threads(tk_usable_cpus("", cpus_why, sizeof(cpus_why)));
    if (s->nworkers > TK_WORKERS_MAX)
        s->nworkers = TK_WORKERS_MAX;
    /* One worker: it runs the Raft loop too, so a commit costs no wakeup
     * between two threads (most of a round's cost on a busy machine). */
    s->raft_inline = s->nworkers == 1;
    /* Descriptors beyond the client and admin connections: 64 peer links,
     * the listeners, rings, eventfds and log: 128 covers them with room. */
    rlim_t want = (rlim_t)s->opt.max_connections + s->opt.max_admin_connections + 128u;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < want) {
        rl.rlim_cur = TK_MIN(rl.rlim_max, want);
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
        if (rl.rlim_cur < want)
            tk_log(TK_LOG_WARN,
                   "open-file limit %llu is below --max-connections %u + "
                   "--max-admin-connections %u + 128 for peers and the process itself: "
                   "accepts will fail with EMFILE before the bounds (raise the hard "
                   "limit, ulimit -Hn)",
                   (unsigned long long)rl.rlim_cur, s->opt.max_connections,
                   s->opt.max_admin_connections);
    }
    const struct tk_options *o = &s->opt;
    tk_log(TK_LOG_DEBUG,
           "settings: %u workers (%s), heartbeat %u ms, election %u ms, handshake %u ms, "
           "max connections %u, handshakes %u, in flight %u, waiters per key %u, waiters %llu, "
           "keys %llu, log entries %llu, frame bytes %u",
           s->nworkers, cpus_why, o->heartbeat_ms, o->election_ms, o->handshake_ms,
           o->max_connections, o->max_handshakes, o->max_inflight, o->max_waiters_per_key,
           (unsigned long long)o->max_waiters, (unsigned long long)o->max_keys,
           (unsigned long long)o->max_log_entries, o->max_frame_bytes);
    return 0;
}

int main(int argc, char **argv)
{
    struct tk_server *s = &server;
    int rc = setup(s, argc, argv);
    if (rc != 0)
        return rc;

    /* Signals are taken synchronously by the main thread: block them before
     * any thread starts so every thread inherits the mask. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    int err = TK_OK;
    for (uint32_t i = 0; i < s->nworkers && err == TK_OK; i++)
        err = tk_worker_create(s, i);
    if (err == TK_OK)
        err = tk_raftd_create(s);
    if (err != TK_OK) {
        tk_log(TK_LOG_ERROR, "startup failed: %s", tk_strerror(err));
        return 1;
    }
    uint32_t started = 0;
    bool admin_started = false, raft_started = false;
    err = tk_admin_start(s);
    admin_started = err == TK_OK;
    if (err == TK_OK)
        err = tk_raftd_start(s);
    raft_started = admin_started && err == TK_OK;
    /* started counts the workers whose thread runs: a worker that could
     * not start (its port taken) is neither joined nor, inline, waited for
     * to end the Raft loop. */
    while (started < s->nworkers && err == TK_OK) {
        err = tk_worker_start(s, started);
        if (err == TK_OK)
            started++;
    }
    if (err == TK_OK) {
        tk_log(TK_LOG_INFO,
               "ticketingd listening on %s:%u (peer %u, admin %u), %u workers%s, %s, "
               "advertised as %s, client port %s",
               s->opt.bind, s->opt.port, s->opt.peer_port, s->opt.admin_port, s->nworkers,
               s->raft_inline ? " (Raft on the worker)" : " and a Raft thread",
               s->opt.peers[0] ? "cluster" : "standalone", s->advertise,
               !s->tls                  ? "plaintext"
               : s->opt.tls_client_auth ? "TLS with client certificates"
                                        : "TLS");
        /* Wait for a signal, or for a thread that could not run. */
        struct timespec tick = {.tv_sec = 0, .tv_nsec = 100 * 1000 * 1000};
        for (;;) {
            int sig = sigtimedwait(&set, NULL, &tick);
            if (sig == SIGHUP) {
                tls_reload(s);
                if (s->tls && s->opt.peers[0]) { /* the peer port's, on the Raft thread */
                    atomic_store(&s->peer_tls_reload, 1);
                    tk_raftd_poke(s);
                }
                continue;
            }
            if (sig > 0) {
                tk_log(TK_LOG_INFO, "signal %d: shutting down", sig);
                break;
            }
            if (atomic_load(&s->removed)) {
                err = TK_EINVAL;
                break;
            }
            if (atomic_load(&s->failed)) {
                tk_log(TK_LOG_ERROR, "a worker could not start; shutting down");
                err = TK_EUNSUPPORTED;
                break;
            }
        }
    }
    /* The Raft thread hands leadership over first (SIGTERM on a leader),
     * then sets stopping, which ends the workers. */
    atomic_store(&s->draining, 1);
    if (raft_started)
        tk_raftd_join(s, started > 0);
    atomic_store(&s->stopping, 1);
    for (uint32_t i = 0; i < started; i++)
        tk_worker_join(s, i);
    if (admin_started)
        tk_admin_join(s);
    for (uint32_t i = 0; i < s->nworkers; i++)
        tk_worker_destroy(s, i);
    tk_raftd_destroy(s);
    tk_tls_ctx_unref(s->tls_ctx); /* the connections dropped theirs */
    tk_log(TK_LOG_INFO, "stopped");
    if (atomic_load(&s->removed))
        return 3; /* replaced or removed: a restart rejoins under a new NodeId */
    return err == TK_OK ? 0 : 1;
}
