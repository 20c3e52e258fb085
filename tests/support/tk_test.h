/* Test support: start real ticketingd processes on 127.0.0.1 and talk to
 * them over real sockets (line client, handshake, admin HTTP).
 *
 * Every helper is for tests only: failures return -1 / false and the test
 * asserts on them; nothing here hides an error.
 */
#ifndef TK_TEST_H
#define TK_TEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define TK_TEST_SECRET "integration-test-secret-0123456789"

struct tk_node {
    pid_t pid;
    uint32_t port; /* client port; peer = port+1, admin = port+2 */
    char dir[256]; /* temp dir with the secret files and the log */
    char secret_file[300];
    char peer_secret_file[300];
    char log_file[300];
};

/* Starts ticketingd on 127.0.0.1 with free ports, a fresh secret file and
 * the extra arguments (NULL-terminated list). Waits until the client port
 * accepts connections. Returns 0, or -1 if it did not come up. */
int tk_node_start(struct tk_node *n, const char *const *extra_args);
/* Starts with a chosen port (cluster tests pick ports for every member);
 * dir must be prepared (tk_node_prepare) and extra_args complete. Does not
 * wait for readiness. */
int tk_node_prepare(struct tk_node *n, uint32_t port);
int tk_node_spawn(struct tk_node *n, const char *const *extra_args);
/* When non-zero, nodes spawned from now on start with this descriptor
 * limit (soft and hard), as under `ulimit -n`. */
extern unsigned tk_test_nofile;
int tk_node_wait_port(struct tk_node *n, int timeout_ms);
/* Sends sig and waits up to timeout_ms for exit; returns the exit status as
 * from waitpid (or -1 on timeout, after which it is killed). */
int tk_node_stop(struct tk_node *n, int sig, int timeout_ms);
/* True while the process runs. */
bool tk_node_alive(struct tk_node *n);
/* SIGSTOP, then waits (up to 2 s) until every thread of pid has stopped:
 * the signal reaches each thread asynchronously, and a thread that was
 * running can still answer a request sent right after kill(). */
int tk_pause_pid(pid_t pid);
/* Removes the temp dir. */
void tk_node_cleanup(struct tk_node *n);
/* Polls GET /status on 127.0.0.1:admin_port until it says "serving":true
 * (tk_node_start() already waits so on port + 2). Returns 0, or -1 at the
 * timeout. */
int tk_node_wait_serving(uint32_t admin_port, int timeout_ms);

/* Picks a base port p such that p, p+1 and p+2 are free on 127.0.0.1, and
 * reserves them from every other test process until this one exits. */
uint32_t tk_free_port3(void);

/* A listening TCP socket on 127.0.0.1 at a port the kernel picks (a
 * scripted server's): its descriptor and *port, or -1. */
int tk_test_listen(uint32_t *port);

/* A plain line client. */
struct tk_tc {
    int fd;
    char buf[1 << 16];
    size_t len;
    uint64_t node_id;
    char ok_line[256];
};

/* TCP connect to 127.0.0.1:port. Returns 0 or -1. */
int tk_tc_connect(struct tk_tc *c, uint32_t port);
/* Connect and complete the handshake with the secret; checks the server's
 * proof. Returns 0, or -1 on any failure. */
int tk_tc_open(struct tk_tc *c, uint32_t port, const char *secret);
int tk_tc_handshake(struct tk_tc *c, const char *secret);
void tk_tc_close(struct tk_tc *c);
/* Sends raw bytes. */
int tk_tc_send_raw(struct tk_tc *c, const void *p, size_t n);
/* printf-style; the caller includes "\n". */
int tk_tc_send(struct tk_tc *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Reads one line (without "\n") into out. Returns its length, -1 on
 * timeout, -2 on EOF/error. */
int tk_tc_line(struct tk_tc *c, char *out, size_t cap, int timeout_ms);
/* True if the peer closed the connection within timeout_ms (all remaining
 * data is discarded). */
bool tk_tc_closed(struct tk_tc *c, int timeout_ms);

/* Starts ticketingd like tk_node_start, for a node whose client port
 * speaks TLS (no plaintext banner to wait for): ready once the client port
 * accepts a TCP connection and /status says it serves. */
int tk_node_start_tls(struct tk_node *n, const char *const *extra_args);

/* A TLS line client over a blocking TCP socket, on core/tls.h (not the
 * client library): for tests of the server's TLS. */
struct tk_tls_ctx;
struct tk_tls;
struct tk_test_tls {
    int fd;
    struct tk_tls_ctx *ctx;
    struct tk_tls *tls;
    char buf[1 << 16]; /* plaintext received, not yet read as lines */
    size_t len;
    uint64_t node_id;
    char err[512]; /* why the last call failed: core/tls's sentence, or EOF */
};
/* TCP connect to 127.0.0.1:port and the TLS handshake: the server is
 * verified with the CA file ca and, when server_name is not NULL, against
 * that name; cert/key (both or NULL) are presented when asked for.
 * Returns 0, or -1 with the reason in t->err (t is then closed). With TLS
 * 1.3 a client learns that the server refused its certificate only at
 * its first read. */
int tk_test_tls_dial(struct tk_test_tls *t,
                     uint32_t port,
                     const char *ca,
                     const char *cert,
                     const char *key,
                     const char *server_name);
/* The SPEC 2 challenge-response inside TLS (checks the server's proof).
 * Returns 0 or -1 (reason in t->err). */
int tk_test_tls_auth(struct tk_test_tls *t, const char *secret);
/* Bytes encrypted and sent. 0 or -1. */
int tk_test_tls_send_raw(struct tk_test_tls *t, const void *p, size_t n);
/* printf-style (up to 64 KiB), encrypted and sent; the caller includes
 * "\n". 0 or -1. */
int tk_test_tls_send(struct tk_test_tls *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* One line of plaintext (without "\n") into out: its length, -1 on
 * timeout, -2 on EOF or a TLS failure (reason in t->err). */
int tk_test_tls_line(struct tk_test_tls *t, char *out, size_t cap, int timeout_ms);
void tk_test_tls_close(struct tk_test_tls *t);

/* GET http://127.0.0.1:port/path; body into out. Returns the status code
 * or -1. */
int tk_http_get(uint32_t port, const char *path, char *out, size_t cap);

/* Runs argv (argv[0] a path, NULL-terminated) to completion with stdout
 * and stderr into out (NUL-terminated, cap bytes at most); its exit code,
 * 1000 + the signal that ended it, or -1 if it ran past timeout_ms (then
 * it is killed). */
int tk_run(const char *const *argv, char *out, size_t cap, int timeout_ms);

/* Milliseconds on a monotonic clock. */
uint64_t tk_test_ms(void);

#endif
