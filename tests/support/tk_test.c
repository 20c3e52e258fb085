/* Test support: real ticketingd processes and a line client. */
#include "tests/support/tk_test.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/auth.h"
#include "core/proto.h"
#include "core/tls.h"

uint64_t tk_test_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static bool port_free(uint32_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return false;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bool ok = bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
    close(fd);
    return ok;
}

/* The first port the kernel hands out for outgoing connections: a port
 * chosen below it cannot be taken by some test's client socket between
 * the check here and the member's bind (CI saw that happen). */
static uint32_t ephemeral_low(void)
{
    unsigned lo = 32768, hi = 60999;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    if (f) {
        if (fscanf(f, "%u %u", &lo, &hi) != 2)
            lo = 32768;
        fclose(f);
    }
    return lo;
}

/* Holds the lock of the 4-port block that starts at p (p % 4 == 0) for the
 * rest of this process, or says it is another process's. Every harness
 * (C, the conformance runner, the Python and Go client tests, the shell
 * scripts) locks blocks the same way, so two tests running at once never
 * pick the same ports between checking them and a member binding them. */
static bool lock_block(uint32_t p)
{
    const char *dir = "/tmp/ticketing-test-ports";
    if (mkdir(dir, 0777) < 0 && errno != EEXIST)
        return true; /* no lock directory: the bind check alone */
    char path[64];
    snprintf(path, sizeof(path), "%s/%u", dir, p);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0)
        return true;
    if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
        close(fd);
        return false;
    }
    return true; /* fd stays open: the lock is this process's until it exits */
}

int tk_test_listen(uint32_t *port)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t al = sizeof a;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 16) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &al) != 0) {
        close(fd);
        return -1;
    }
    *port = ntohs(a.sin_port);
    return fd;
}

uint32_t tk_free_port3(void)
{
    static uint64_t state;
    static uint32_t base, span;
    if (!state) {
        state = (uint64_t)getpid() * 2654435761u ^ tk_test_ms();
        uint32_t lo = ephemeral_low();
        base = lo >= 14000u ? 10000u : 20000u; /* a tiny range: take the chance */
        span = lo >= 14000u ? lo - 4u - base : 40000u;
    }
    for (int tries = 0; tries < 1000; tries++) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t p = (base + (uint32_t)((state >> 33) % span)) & ~3u;
        if (port_free(p) && port_free(p + 1) && port_free(p + 2) && lock_block(p))
            return p;
    }
    return 0;
}

/* Every thread of pid is in state T (stopped) or t (traced). */
static bool all_threads_stopped(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    if (!d)
        return false;
    bool all = true;
    int seen = 0;
    struct dirent *e;
    while (all && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char stat[600], buf[512];
        snprintf(stat, sizeof(stat), "%s/%s/stat", path, e->d_name);
        FILE *f = fopen(stat, "r");
        size_t got = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
        if (f)
            fclose(f);
        buf[got] = 0;
        const char *p = strrchr(buf, ')'); /* the name may hold spaces */
        all = p && p[1] == ' ' && (p[2] == 'T' || p[2] == 't');
        seen++;
    }
    closedir(d);
    return all && seen > 0;
}

int tk_pause_pid(pid_t pid)
{
    if (kill(pid, SIGSTOP) != 0)
        return -1;
    for (uint64_t end = tk_test_ms() + 2000; tk_test_ms() < end; usleep(1000))
        if (all_threads_stopped(pid))
            return 0;
    return -1;
}

static int write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fputs(text, f);
    fclose(f);
    chmod(path, 0600);
    return 0;
}

int tk_node_prepare(struct tk_node *n, uint32_t port)
{
    memset(n, 0, sizeof(*n));
    n->pid = -1;
    n->port = port;
    snprintf(n->dir, sizeof(n->dir), "/tmp/tk-test-XXXXXX");
    if (!mkdtemp(n->dir))
        return -1;
    snprintf(n->secret_file, sizeof(n->secret_file), "%s/client.secret", n->dir);
    snprintf(n->peer_secret_file, sizeof(n->peer_secret_file), "%s/peer.secret", n->dir);
    snprintf(n->log_file, sizeof(n->log_file), "%s/ticketingd.log", n->dir);
    if (write_file(n->secret_file, TK_TEST_SECRET "\n") < 0 ||
        write_file(n->peer_secret_file, "peer-secret-for-tests-0123456789\n") < 0)
        return -1;
    return 0;
}

unsigned tk_test_nofile;

int tk_node_spawn(struct tk_node *n, const char *const *extra_args)
{
    char port[16];
    snprintf(port, sizeof(port), "%u", n->port);
    const char *argv[64];
    int a = 0;
    argv[a++] = TK_BIN_DIR "/ticketingd";
    argv[a++] = "--bind";
    argv[a++] = "127.0.0.1";
    argv[a++] = "--port";
    argv[a++] = port;
    argv[a++] = "--client-secret-file";
    argv[a++] = n->secret_file;
    for (int i = 0; extra_args && extra_args[i] && a < 62; i++)
        argv[a++] = extra_args[i];
    argv[a] = NULL;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        int fd = open(n->log_file, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, 2);
            dup2(fd, 1);
            close(fd);
        }
        if (tk_test_nofile) {
            struct rlimit rl = {.rlim_cur = tk_test_nofile, .rlim_max = tk_test_nofile};
            if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
                _exit(126);
        }
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    n->pid = pid;
    return 0;
}

bool tk_node_alive(struct tk_node *n)
{
    if (n->pid <= 0)
        return false;
    int st;
    pid_t r = waitpid(n->pid, &st, WNOHANG);
    if (r == n->pid) {
        n->pid = -1;
        return false;
    }
    return true;
}

int tk_node_wait_port(struct tk_node *n, int timeout_ms)
{
    uint64_t end = tk_test_ms() + (uint64_t)timeout_ms;
    while (tk_test_ms() < end) {
        if (!tk_node_alive(n))
            return -1;
        struct tk_tc c;
        if (tk_tc_connect(&c, n->port) == 0) {
            char line[256];
            int r = tk_tc_line(&c, line, sizeof(line), 500);
            tk_tc_close(&c);
            if (r > 0)
                return 0;
        }
        usleep(20000);
    }
    return -1;
}

/* A standalone node accepts connections a moment before its Raft thread
 * has bootstrapped and applied its first entry; until then it answers
 * `M -`. Tests of the protocol start once it serves. */
int tk_node_wait_serving(uint32_t admin_port, int timeout_ms)
{
    static char body[16384];
    uint64_t end = tk_test_ms() + (uint64_t)timeout_ms;
    do {
        if (tk_http_get(admin_port, "/status", body, sizeof(body)) == 200 &&
            strstr(body, "\"serving\":true"))
            return 0;
        usleep(5000);
    } while (tk_test_ms() < end);
    return -1;
}

int tk_node_start(struct tk_node *n, const char *const *extra_args)
{
    for (int attempt = 0; attempt < 5; attempt++) {
        uint32_t port = tk_free_port3();
        if (!port || tk_node_prepare(n, port) < 0)
            return -1;
        if (tk_node_spawn(n, extra_args) < 0)
            return -1;
        if (tk_node_wait_port(n, 10000) == 0 && tk_node_wait_serving(n->port + 2, 10000) == 0)
            return 0;
        tk_node_stop(n, SIGKILL, 2000);
        tk_node_cleanup(n); /* maybe a port race: try other ports */
    }
    return -1;
}

int tk_node_stop(struct tk_node *n, int sig, int timeout_ms)
{
    if (n->pid <= 0)
        return -1;
    kill(n->pid, sig);
    uint64_t end = tk_test_ms() + (uint64_t)timeout_ms;
    int st = 0;
    for (;;) {
        pid_t r = waitpid(n->pid, &st, WNOHANG);
        if (r == n->pid)
            break;
        if (tk_test_ms() >= end) {
            kill(n->pid, SIGKILL);
            waitpid(n->pid, &st, 0);
            n->pid = -1;
            return -1;
        }
        usleep(5000);
    }
    n->pid = -1;
    return st;
}

void tk_node_cleanup(struct tk_node *n)
{
    if (n->pid > 0)
        tk_node_stop(n, SIGKILL, 2000);
    if (!n->dir[0])
        return;
    if (getenv("TK_KEEP_LOGS")) {
        fprintf(stderr, "node logs kept in %s\n", n->dir);
        return;
    }
    unlink(n->secret_file);
    unlink(n->peer_secret_file);
    unlink(n->log_file);
    rmdir(n->dir);
    n->dir[0] = 0;
}

int tk_tc_connect(struct tk_tc *c, uint32_t port)
{
    memset(c, 0, sizeof(*c) - sizeof(c->buf));
    c->len = 0;
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c->fd < 0)
        return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(c->fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
        close(c->fd);
        c->fd = -1;
        return -1;
    }
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return 0;
}

void tk_tc_close(struct tk_tc *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
}

int tk_tc_send_raw(struct tk_tc *c, const void *p, size_t n)
{
    const char *q = p;
    while (n > 0) {
        ssize_t w = send(c->fd, q, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        q += w;
        n -= (size_t)w;
    }
    return 0;
}

int tk_tc_send(struct tk_tc *c, const char *fmt, ...)
{
    char line[4096];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof(line))
        return -1;
    return tk_tc_send_raw(c, line, (size_t)n);
}

int tk_tc_line(struct tk_tc *c, char *out, size_t cap, int timeout_ms)
{
    uint64_t end = tk_test_ms() + (uint64_t)timeout_ms;
    for (;;) {
        char *nl = memchr(c->buf, '\n', c->len);
        if (nl) {
            size_t n = (size_t)(nl - c->buf);
            size_t k = n < cap - 1 ? n : cap - 1;
            memcpy(out, c->buf, k);
            out[k] = 0;
            memmove(c->buf, nl + 1, c->len - n - 1);
            c->len -= n + 1;
            return (int)k;
        }
        uint64_t now = tk_test_ms();
        if (now >= end)
            return -1;
        if (c->len == sizeof(c->buf))
            return -2;
        struct pollfd pfd = {.fd = c->fd, .events = POLLIN};
        int r = poll(&pfd, 1, (int)(end - now));
        if (r <= 0)
            continue;
        ssize_t got = recv(c->fd, c->buf + c->len, sizeof(c->buf) - c->len, 0);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return -2;
        c->len += (size_t)got;
    }
}

bool tk_tc_closed(struct tk_tc *c, int timeout_ms)
{
    uint64_t end = tk_test_ms() + (uint64_t)timeout_ms;
    char tmp[4096];
    for (;;) {
        uint64_t now = tk_test_ms();
        if (now >= end)
            return false;
        struct pollfd pfd = {.fd = c->fd, .events = POLLIN};
        if (poll(&pfd, 1, (int)(end - now)) <= 0)
            continue;
        ssize_t got = recv(c->fd, tmp, sizeof(tmp), 0);
        if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN))
            return true;
    }
}

int tk_tc_handshake(struct tk_tc *c, const char *secret)
{
    char line[512];
    if (tk_tc_line(c, line, sizeof(line), 5000) < 0)
        return -1;
    const char *snonce;
    if (!tk_proto_parse_banner(line, strlen(line), false, &snonce))
        return -1;
    char sn[TK_AUTH_HEX_LEN + 1], cn[TK_AUTH_HEX_LEN + 1], proof[TK_AUTH_HEX_LEN + 1];
    memcpy(sn, snonce, TK_AUTH_HEX_LEN);
    sn[TK_AUTH_HEX_LEN] = 0;
    if (tk_auth_nonce(cn) != TK_OK)
        return -1;
    tk_auth_proof((const uint8_t *)secret, strlen(secret), false, sn, cn, proof);
    if (tk_tc_send(c, "AUTH %s %s\n", cn, proof) < 0)
        return -1;
    if (tk_tc_line(c, line, sizeof(line), 5000) < 0)
        return -1;
    size_t n = strnlen(line, sizeof(c->ok_line) - 1);
    memcpy(c->ok_line, line, n);
    c->ok_line[n] = 0;
    const char *sproof;
    uint64_t domain[2];
    if (!tk_proto_parse_ok(line, strlen(line), &sproof, &c->node_id, domain))
        return -1;
    char expect[TK_AUTH_HEX_LEN + 1];
    tk_auth_proof((const uint8_t *)secret, strlen(secret), true, sn, cn, expect);
    if (memcmp(expect, sproof, TK_AUTH_HEX_LEN) != 0)
        return -1;
    return 0;
}

int tk_tc_open(struct tk_tc *c, uint32_t port, const char *secret)
{
    if (tk_tc_connect(c, port) < 0)
        return -1;
    if (tk_tc_handshake(c, secret) < 0) {
        tk_tc_close(c);
        return -1;
    }
    return 0;
}

int tk_http_get(uint32_t port, const char *path, char *out, size_t cap)
{
    struct tk_tc *c = malloc(sizeof(*c));
    if (!c)
        return -1;
    int status = -1;
    if (tk_tc_connect(c, port) == 0 &&
        tk_tc_send(c, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", path) == 0) {
        size_t len = 0;
        char *resp = malloc(1 << 20);
        uint64_t end = tk_test_ms() + 5000;
        while (resp && len < (1 << 20) - 1 && tk_test_ms() < end) {
            struct pollfd pfd = {.fd = c->fd, .events = POLLIN};
            if (poll(&pfd, 1, 100) <= 0)
                continue;
            ssize_t got = recv(c->fd, resp + len, (1 << 20) - 1 - len, 0);
            if (got <= 0)
                break;
            len += (size_t)got;
        }
        if (resp) {
            resp[len] = 0;
            if (sscanf(resp, "HTTP/1.1 %d", &status) != 1)
                status = -1;
            char *body = strstr(resp, "\r\n\r\n");
            if (body && cap) {
                snprintf(out, cap, "%s", body + 4);
            }
            free(resp);
        }
    }
    tk_tc_close(c);
    free(c);
    return status;
}

/* ---- TLS nodes and a TLS line client ------------------------------------ */

/* True once the client port takes a TCP connection (nothing is read: a
 * TLS port sends nothing before the client's hello). */
static int wait_accepts(struct tk_node *n, int timeout_ms)
{
    uint64_t end = tk_test_ms() + (uint64_t)timeout_ms;
    while (tk_test_ms() < end) {
        if (!tk_node_alive(n))
            return -1;
        struct tk_tc c;
        if (tk_tc_connect(&c, n->port) == 0) {
            tk_tc_close(&c);
            return 0;
        }
        usleep(20000);
    }
    return -1;
}

int tk_node_start_tls(struct tk_node *n, const char *const *extra_args)
{
    for (int attempt = 0; attempt < 5; attempt++) {
        uint32_t port = tk_free_port3();
        if (!port || tk_node_prepare(n, port) < 0)
            return -1;
        if (tk_node_spawn(n, extra_args) < 0)
            return -1;
        if (wait_accepts(n, 10000) == 0 && tk_node_wait_serving(n->port + 2, 10000) == 0)
            return 0;
        bool died = !tk_node_alive(n);
        tk_node_stop(n, SIGKILL, 2000);
        if (died)
            return -1; /* refused to start: the log says why (kept) */
        tk_node_cleanup(n);
    }
    return -1;
}

/* Records why the client failed; returns rc. */
static int tls_fail_rc(struct tk_test_tls *t, const char *why, int rc)
{
    snprintf(t->err, sizeof(t->err), "%s", why);
    return rc;
}

static int tls_fail(struct tk_test_tls *t, const char *why)
{
    return tls_fail_rc(t, why, -1);
}

/* Sends all ciphertext TLS has pending. */
static int tls_flush(struct tk_test_tls *t)
{
    size_t n;
    const uint8_t *p = tk_tls_pending(t->tls, &n);
    while (n > 0) {
        ssize_t w = send(t->fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return tls_fail(t, "send failed: the server closed the connection");
        tk_tls_sent(t->tls, (size_t)w);
        p = tk_tls_pending(t->tls, &n);
    }
    return 0;
}

/* One step: drive TLS (handshake, decryption into t->buf), send what it
 * produced, and, when nothing new came out, wait up to the deadline for
 * bytes from the server. 0 on progress or more to wait for, -1 on timeout,
 * -2 on EOF or failure. */
static int tls_step(struct tk_test_tls *t, uint64_t end)
{
    bool was_ready = tk_tls_ready(t->tls);
    size_t got = 0, total = 0;
    int rc;
    do {
        rc = tk_tls_read(t->tls, t->buf + t->len, sizeof(t->buf) - t->len, &got);
        t->len += got;
        total += got;
    } while (rc == TK_OK && got > 0 && t->len < sizeof(t->buf));
    int sent = tls_flush(t); /* after a failure: the alert, if any */
    if (rc == TK_ECLOSED)
        return tls_fail_rc(t, "the server closed the TLS session", -2);
    if (rc != TK_OK)
        return tls_fail_rc(t, tk_tls_error(t->tls), -2);
    if (sent != 0)
        return -2;
    if (total > 0 || tk_tls_ready(t->tls) != was_ready)
        return 0;
    uint64_t now = tk_test_ms();
    if (now >= end)
        return -1;
    struct pollfd pfd = {.fd = t->fd, .events = POLLIN};
    if (poll(&pfd, 1, (int)(end - now)) <= 0)
        return 0;
    char in[16384];
    ssize_t r = recv(t->fd, in, sizeof(in), 0);
    if (r < 0 && errno == EINTR)
        return 0;
    if (r <= 0)
        return tls_fail_rc(
            t,
            r == 0 ? "the server closed the connection" : "the connection was reset by the server",
            -2);
    if (tk_tls_feed(t->tls, in, (size_t)r) != TK_OK)
        return tls_fail_rc(t, tk_tls_error(t->tls), -2);
    return 0;
}

void tk_test_tls_close(struct tk_test_tls *t)
{
    if (t->tls)
        tk_tls_free(t->tls);
    if (t->ctx)
        tk_tls_ctx_unref(t->ctx);
    if (t->fd >= 0)
        close(t->fd);
    t->tls = NULL;
    t->ctx = NULL;
    t->fd = -1;
}

int tk_test_tls_dial(struct tk_test_tls *t,
                     uint32_t port,
                     const char *ca,
                     const char *cert,
                     const char *key,
                     const char *server_name)
{
    memset(t, 0, offsetof(struct tk_test_tls, buf));
    t->len = 0;
    t->node_id = 0;
    t->err[0] = 0;
    t->fd = -1;
    struct tk_tls_opts o = {.server = false, .cert = cert, .key = key, .ca = ca};
    if (tk_tls_ctx_new(&o, &t->ctx, t->err, sizeof(t->err)) != TK_OK)
        return -1;
    t->tls = tk_tls_new(t->ctx, server_name);
    struct tk_tc c;
    if (!t->tls || tk_tc_connect(&c, port) != 0) {
        tls_fail(t, t->tls ? "cannot connect" : "out of memory");
        tk_test_tls_close(t);
        return -1;
    }
    t->fd = c.fd;
    uint64_t end = tk_test_ms() + 5000;
    while (!tk_tls_ready(t->tls)) {
        int r = tls_step(t, end);
        if (r < 0) {
            if (r == -1)
                tls_fail(t, "the TLS handshake timed out");
            tk_test_tls_close(t);
            return -1;
        }
    }
    return 0;
}

int tk_test_tls_send_raw(struct tk_test_tls *t, const void *p, size_t n)
{
    if (tk_tls_write(t->tls, p, n) != TK_OK)
        return tls_fail(t, tk_tls_error(t->tls));
    return tls_flush(t);
}

int tk_test_tls_send(struct tk_test_tls *t, const char *fmt, ...)
{
    char line[1 << 16];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof(line))
        return -1;
    return tk_test_tls_send_raw(t, line, (size_t)n);
}

int tk_test_tls_line(struct tk_test_tls *t, char *out, size_t cap, int timeout_ms)
{
    uint64_t end = tk_test_ms() + (uint64_t)timeout_ms;
    for (;;) {
        char *nl = memchr(t->buf, '\n', t->len);
        if (nl) {
            size_t n = (size_t)(nl - t->buf);
            size_t k = n < cap - 1 ? n : cap - 1;
            memcpy(out, t->buf, k);
            out[k] = 0;
            memmove(t->buf, nl + 1, t->len - n - 1);
            t->len -= n + 1;
            return (int)k;
        }
        if (t->len == sizeof(t->buf))
            return tls_fail_rc(t, "line longer than the buffer", -2);
        int r = tls_step(t, end);
        if (r < 0)
            return r;
    }
}

int tk_test_tls_auth(struct tk_test_tls *t, const char *secret)
{
    char line[512];
    if (tk_test_tls_line(t, line, sizeof(line), 5000) < 0)
        return -1;
    const char *snonce;
    if (!tk_proto_parse_banner(line, strlen(line), false, &snonce))
        return tls_fail(t, "no banner");
    char sn[TK_AUTH_HEX_LEN + 1], cn[TK_AUTH_HEX_LEN + 1], proof[TK_AUTH_HEX_LEN + 1];
    memcpy(sn, snonce, TK_AUTH_HEX_LEN);
    sn[TK_AUTH_HEX_LEN] = 0;
    if (tk_auth_nonce(cn) != TK_OK)
        return tls_fail(t, "no nonce");
    tk_auth_proof((const uint8_t *)secret, strlen(secret), false, sn, cn, proof);
    if (tk_test_tls_send(t, "AUTH %s %s\n", cn, proof) < 0)
        return -1;
    if (tk_test_tls_line(t, line, sizeof(line), 5000) < 0)
        return -1;
    const char *sproof;
    uint64_t domain[2];
    if (!tk_proto_parse_ok(line, strlen(line), &sproof, &t->node_id, domain))
        return tls_fail(t, "no OK line");
    char expect[TK_AUTH_HEX_LEN + 1];
    tk_auth_proof((const uint8_t *)secret, strlen(secret), true, sn, cn, expect);
    if (memcmp(expect, sproof, TK_AUTH_HEX_LEN) != 0)
        return tls_fail(t, "the server's proof is wrong");
    return 0;
}

int tk_run(const char *const *argv, char *out, size_t cap, int timeout_ms)
{
    char path[] = "/tmp/tk-run-out-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return -1;
    unlink(path);
    pid_t pid = fork();
    if (pid < 0) {
        close(fd);
        return -1;
    }
    if (pid == 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    int st = 0, code = -1;
    for (uint64_t end = tk_test_ms() + (uint64_t)timeout_ms; tk_test_ms() < end; usleep(10000))
        if (waitpid(pid, &st, WNOHANG) == pid) {
            code = WIFEXITED(st) ? WEXITSTATUS(st) : 1000 + WTERMSIG(st);
            break;
        }
    if (code == -1) {
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
    }
    ssize_t n = cap > 0 ? pread(fd, out, cap - 1, 0) : 0;
    if (cap > 0)
        out[n > 0 ? n : 0] = '\0';
    close(fd);
    return code;
}
