/* Goal: the admin port's /members tells the membership as each node sees
 * it, agreeing with /status: on the leader its own view (match index, lag,
 * last contact for every member), on a follower what it knows (the leader,
 * the members, null where only the leader knows).
 *
 * Method: a real 3-node cluster (fast timers) on 127.0.0.1; every body is
 * parsed by a strict reader (Jansson). Addresses cannot hold what JSON
 * escapes (core/addr.h refuses it at the flags: test_hardening); the
 * writer's escaping of every byte is tests/unit/test_json.c's. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "tests/support/tk_cluster.h"

/* ---- fixture ------------------------------------------------------------------- */

static struct tk_cluster cl;

static void setup(void)
{
    static const char *const fast[] = {"--heartbeat-ms", "50", "--election-ms", "400", NULL};
    cr_assert_eq(tk_cluster_start(&cl, 3, fast), 0, "the cluster did not elect a leader");
}

static void teardown(void)
{
    tk_cluster_stop(&cl);
}

/* ---- helpers ------------------------------------------------------------------- */

/* GET path on the admin port, parsed; asserts a 200 with a JSON object. */
static json_t *get_json(uint32_t admin_port, const char *path)
{
    static char body[1 << 16];
    json_error_t err;
    int code = tk_http_get(admin_port, path, body, sizeof body);
    cr_assert_eq(code, 200, "%s: HTTP %d", path, code);
    json_t *v = json_loads(body, JSON_REJECT_DUPLICATES, &err);
    cr_assert(v != NULL, "%s is no JSON (%s): %s", path, err.text, body);
    cr_assert(json_is_object(v), "%s: %s", path, body);
    return v;
}

static const char *str(const json_t *o, const char *name)
{
    const char *s = json_string_value(json_object_get(o, name));
    cr_assert(s != NULL, "no string %s", name);
    return s;
}

/* The member of /members with NodeId id, or NULL. */
static json_t *member(const json_t *doc, const char *id)
{
    const json_t *ms = json_object_get(doc, "members");
    for (size_t i = 0; i < json_array_size(ms); i++)
        if (strcmp(str(json_array_get(ms, i), "id"), id) == 0)
            return json_array_get(ms, i);
    return NULL;
}

/* ---- tests ----------------------------------------------------------------------- */

TestSuite(members, .init = setup, .fini = teardown, .timeout = 180);

Test(members, every_node_lists_the_same_three_voters_and_one_leader)
{
    static char ids[3][17];
    json_t *status[3];
    int l = tk_cluster_leader(&cl, 5000, 0);
    cr_assert_geq(l, 0);
    for (int i = 0; i < 3; i++) {
        status[i] = get_json(cl.node[i].port + 2, "/status");
        snprintf(ids[i], sizeof ids[i], "%s", str(status[i], "node_id"));
    }
    /* A follower learns the leader's configuration with its first Append:
     * retry until every node has all three members in its view. */
    for (int i = 0; i < 3; i++) {
        json_t *doc = NULL;
        for (int tries = 0; tries < 100; tries++) {
            json_decref(doc);
            doc = get_json(cl.node[i].port + 2, "/members");
            if (json_array_size(json_object_get(doc, "members")) == 3 &&
                json_is_object(json_object_get(doc, "leader")))
                break;
            usleep(50000);
        }
        bool leading = i == l;
        cr_assert_str_eq(str(doc, "node_id"), ids[i]);
        cr_assert_str_eq(str(doc, "domain"), str(status[i], "domain"));
        cr_assert_str_eq(str(doc, "mode"), "cluster");
        cr_assert_str_eq(str(doc, "role"), leading ? "leader" : "follower");
        cr_assert_str_eq(str(doc, "view"), leading ? "leader" : "member");
        cr_assert(json_is_integer(json_object_get(doc, "term")));
        cr_assert_geq(json_integer_value(json_object_get(doc, "term")), 1);
        const json_t *leader = json_object_get(doc, "leader");
        cr_assert(json_is_object(leader), "node %d knows no leader", i);
        cr_assert_str_eq(str(leader, "id"), ids[l]);
        char want[64];
        snprintf(want, sizeof want, "127.0.0.1:%u", cl.node[l].port);
        cr_assert_str_eq(str(leader, "client_addr"), want);
        snprintf(want, sizeof want, "127.0.0.1:%u", cl.node[l].port + 1);
        cr_assert_str_eq(str(leader, "peer_addr"), want);
        cr_assert_eq(json_array_size(json_object_get(doc, "members")), 3);
        int leaders = 0;
        for (int k = 0; k < 3; k++) {
            const json_t *m = member(doc, ids[k]);
            cr_assert(m != NULL, "node %d does not list %s", i, ids[k]);
            cr_assert_str_eq(str(m, "role"), "voter");
            snprintf(want, sizeof want, "127.0.0.1:%u", cl.node[k].port);
            cr_assert_str_eq(str(m, "client_addr"), want);
            snprintf(want, sizeof want, "127.0.0.1:%u", cl.node[k].port + 1);
            cr_assert_str_eq(str(m, "peer_addr"), want);
            cr_assert(json_is_boolean(json_object_get(m, "leader")));
            leaders += json_is_true(json_object_get(m, "leader"));
            cr_assert_eq(json_is_true(json_object_get(m, "leader")), k == l);
            /* Only the leader tracks its followers' progress. */
            const char *const known[] = {"match_index", "lag", "last_contact_ms"};
            for (size_t f = 0; f < 3; f++) {
                const json_t *v = json_object_get(m, known[f]);
                if (leading)
                    cr_assert(json_is_integer(v) && json_integer_value(v) >= 0, "%s", known[f]);
                else
                    cr_assert(json_is_null(v), "a follower's %s is not null", known[f]);
            }
            if (leading && k == l)
                cr_assert_geq(json_integer_value(json_object_get(m, "match_index")), 1);
        }
        cr_assert_eq(leaders, 1);
        json_decref(doc);
    }
    for (int i = 0; i < 3; i++)
        json_decref(status[i]);
}
