/* Test support: clusters of real ticketingd processes on 127.0.0.1, each
 * with its own client/peer/admin ports. */
#ifndef TK_CLUSTER_H
#define TK_CLUSTER_H

#include "tests/support/tk_test.h"

#define TK_CLUSTER_MAX 5

struct tk_cluster {
    int n;
    struct tk_node node[TK_CLUSTER_MAX];
    char peers[512];
    const char *const *extra;
};

/* Starts n (3 or 5) nodes with the extra arguments (NULL-terminated) and
 * waits until one of them serves as leader. Returns 0 or -1. */
int tk_cluster_start(struct tk_cluster *c, int n, const char *const *extra);
/* Stops every node (SIGKILL) and removes their files. */
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

#endif
