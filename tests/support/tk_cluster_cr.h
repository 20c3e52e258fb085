/* Criterion helpers for tests against real clusters (tests/integ): open a
 * line client on a member, close it, read a grant. Header-only because the
 * support library does not link Criterion; a failure fails the test. */
#ifndef TK_CLUSTER_CR_H
#define TK_CLUSTER_CR_H

#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "tests/support/tk_cluster.h"

/* A handshaken line client on member i. */
static inline struct tk_tc *cr_open_node(struct tk_cluster *cl, int i)
{
    struct tk_tc *c = malloc(sizeof(*c));
    cr_assert(c);
    cr_assert_eq(tk_tc_open(c, cl->node[i].port, TK_TEST_SECRET), 0, "handshake with node %d", i);
    return c;
}

/* A numeric field of node i's /status (asserted present). */
static inline uint64_t cr_status_u64(struct tk_cluster *c, int i, const char *name)
{
    static char st[1 << 17];
    cr_assert_eq(tk_cluster_status(c, i, st, sizeof(st)), 200, "status of node %d", i);
    uint64_t v = UINT64_MAX;
    cr_assert(tk_json_u64(st, name, &v), "%s in /status of node %d", name, i);
    return v;
}

static inline void cr_drop(struct tk_tc *c)
{
    tk_tc_close(c);
    free(c);
}

/* Reads "G id token" for request id and returns the token. */
static inline uint64_t cr_grant(struct tk_tc *c, uint64_t id)
{
    char line[256];
    cr_assert(tk_tc_line(c, line, sizeof(line), 10000) >= 0, "no answer to %" PRIu64, id);
    uint64_t gid, token;
    cr_assert_eq(sscanf(line, "G %" SCNu64 " %" SCNu64, &gid, &token), 2, "got '%s'", line);
    cr_assert_eq(gid, id);
    return token;
}

#endif
