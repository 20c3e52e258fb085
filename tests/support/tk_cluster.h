/* Test support: clusters of real ticketingd processes on 127.0.0.1, each
 * with its own client/peer/admin ports. */
#ifndef TK_CLUSTER_H
#define TK_CLUSTER_H

#include "tests/support/tk_test.h"

#define TK_CLUSTER_MAX 5
#define TK_CLUSTER_MEMBERS_MAX 16

struct tk_cluster {
    int n;
    struct tk_node node[TK_CLUSTER_MAX];
    char peers[512];
    const char *const *extra;
    /* Set by a test (e.g. when it failed): tk_cluster_stop prints each
     * node's log tail and keeps the temp dirs instead of removing them. */
    bool keep_logs;
};

/* Starts n (3 or 5) nodes with the extra arguments (NULL-terminated) and
 * waits until one of them serves as leader. Returns 0 or -1. The extra
 * list must outlive the cluster (tk_cluster_restart uses it again). */
int tk_cluster_start(struct tk_cluster *c, int n, const char *const *extra);
/* The same, without waiting for anything: the members are starting. */
int tk_cluster_spawn(struct tk_cluster *c, int n, const char *const *extra);
/* Stops every node (SIGKILL) and removes their files (unless keep_logs). */
void tk_cluster_stop(struct tk_cluster *c);
/* Index of the node that serves as leader, waiting up to timeout_ms; -1 if
 * none. Nodes that are not alive or in skip_mask are not asked. */
int tk_cluster_leader(struct tk_cluster *c, int timeout_ms, unsigned skip_mask);
/* GET /status of node i into out; returns the HTTP status or -1. */
int tk_cluster_status(struct tk_cluster *c, int i, char *out, size_t cap);
/* A numeric field of a JSON object ("name":123) or a Prometheus line
 * ("name 123") from text; returns false if absent. */
bool tk_json_u64(const char *json, const char *name, uint64_t *out);
bool tk_metric_u64(const char *text, const char *name, uint64_t *out);
/* A string field ("name":"text") of a JSON object (the first occurrence);
 * false if absent or longer than cap - 1. */
bool tk_json_str(const char *json, const char *name, char *out, size_t cap);

/* Starts a fresh ticketingd for member i, which must not be running (kill
 * or stop it first), with exactly the arguments it had at cluster start:
 * the same ports, --peers, secret files and extra arguments; its log file
 * is appended to (a "restart" marker line first). Waits until its client
 * port answers. Returns 0 or -1. */
int tk_cluster_restart(struct tk_cluster *c, int i);
/* The same with more arguments after the cluster's (NULL-terminated). */
int tk_cluster_restart_with(struct tk_cluster *c, int i, const char *const *more);
/* The helpers below that read /status parse it in static buffers: call
 * them from one thread (the test's), not from load threads. */
/* Waits until GET /readyz of node i answers 200; returns the milliseconds
 * waited, or -1 after timeout_ms (or if the process exited). */
int tk_cluster_wait_ready(struct tk_cluster *c, int i, int timeout_ms);
/* The "node_id" of node i's /status (the NodeId of the running process);
 * 0 if it cannot be read. */
uint64_t tk_cluster_node_id(struct tk_cluster *c, int i);
/* The "domain" (32 hex digits) of node i's /status into out[33]; false if
 * it cannot be read. */
bool tk_cluster_domain(struct tk_cluster *c, int i, char out[33]);

/* One entry of the "members" array of a node's /status. */
struct tk_member {
    uint64_t id;
    bool voter;
    char peer_addr[64];
    uint64_t match_index;
    uint64_t lag;
};
/* Parses the "members" array of node i's /status into out (up to cap);
 * returns the number of members (and, if voters is not NULL, how many are
 * voters), or -1 if /status cannot be read. Ask the leader: its list is
 * the one with match/lag. */
int tk_cluster_members(struct tk_cluster *c, int i, struct tk_member *out, int cap, int *voters);
/* Counts of the same: members and voters in node i's /status; -1 on error. */
int tk_cluster_count_members(struct tk_cluster *c, int i, int *voters);
/* VmRSS of node i's process in KiB (from /proc/<pid>/status); -1 if it
 * cannot be read. */
long tk_cluster_rss_kib(struct tk_cluster *c, int i);
/* Prints the last `lines` lines of every node's log to stderr. */
void tk_cluster_dump_logs(struct tk_cluster *c, int lines);
/* "127.0.0.1:p0,127.0.0.1:p1,...": the members' client addresses. */
void tk_cluster_client_addrs(const struct tk_cluster *c, char *out, size_t cap);
/* Runs a shell command line made of our own words (no quoting), stderr
 * with stdout; its exit code (-1 if it did not run or exit), its output
 * in out (cut to cap - 1 bytes, NUL-terminated). */
int tk_run_cmd(char *out, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
