/* ticketctl status, and what it shares with members (ticketctl_members.c):
 * both read the admin port (client port + 2, or --admin-port; /status
 * here, /members there) over plain HTTP instead of the client protocol,
 * so they need no secret, and parse its JSON with Jansson.
 *
 * status prints each node's role, term, leader and commit index as far as
 * the node reports them (a standalone node has no cluster fields beyond its
 * own): the --addr nodes', then those of the members the leader lists that
 * --addr left out. Its exit code is the cluster's health: 0 with a leader
 * and every node answering, 88 (degraded) with a leader and a node silent,
 * 83 without a leader.
 */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "client/ticketctl.h"
#include "client/ticketing.h"

/* Members a leader's /status lists that status asks too. */
#define MEMBERS_LISTED_MAX 16

/* ---- the admin port, shared with members -------------------------------------- */

unsigned ctl_admin_port(const struct ctl_opts *o, unsigned port)
{
    if (o->admin_port != 0)
        return o->admin_port;
    return port + 2 <= 65535 ? port + 2 : 0;
}

int ctl_check_admin_addrs(const struct ctl_opts *o, struct tk_addr *addrs, size_t *n)
{
    int rc = ctl_parse_addrs("--addr", o->addr, addrs, n);
    for (size_t i = 0; rc == 0 && i < *n; i++) {
        char text[CTL_ADDR_CAP];
        if (tk_addr_format(&addrs[i], text, sizeof text) >= sizeof text)
            rc = ctl_die_usage("bad --addr: '%.64s...': longer than %d characters", text,
                               CTL_ADDR_CAP - 1);
        else if (ctl_admin_port(o, addrs[i].port) == 0)
            rc = ctl_die_usage(
                "bad --addr: '%s': its admin port (client port + 2) is past "
                "65535; give --admin-port",
                text);
    }
    return rc;
}

int ctl_parse_addrs(const char *flag, const char *list, struct tk_addr *addrs, size_t *n)
{
    char why[256];
    if (tk_addr_parse_list(list, strlen(list), addrs, CTL_ADDRS_MAX, n, why, sizeof why) != TK_OK)
        return ctl_die_usage("bad %s: %s", flag, why);
    return 0;
}

static int connect_timeout(const char *host, unsigned port, int timeout_ms)
{
    char ps[8];
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    snprintf(ps, sizeof ps, "%u", port);
    if (getaddrinfo(host, ps, &hints, &res) != 0 || res == NULL)
        return -1;
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) != 0 && errno != EINPROGRESS) {
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0)
        return -1;
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    int err = 0;
    socklen_t el = sizeof err;
    if (poll(&p, 1, timeout_ms) != 1 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0 ||
        err != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* GET path from host:port; the body (NUL-terminated) into body (cap
 * bytes). Returns the HTTP status code or -1. */
static int http_get(const char *host,
                    unsigned port,
                    const char *path,
                    char *body,
                    size_t cap,
                    int timeout_ms)
{
    static char buf[1 << 16];
    uint64_t end = tk_client_now_us() + (uint64_t)timeout_ms * 1000u;
    int fd = connect_timeout(host, port, timeout_ms);
    if (fd < 0)
        return -1;
    char req[512];
    int n = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n",
                     path, host);
    size_t len = 0;
    if (n < 0 || (size_t)n >= sizeof req || send(fd, req, (size_t)n, MSG_NOSIGNAL) != n) {
        close(fd);
        return -1;
    }
    for (;;) {
        uint64_t now = tk_client_now_us();
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (now >= end || len == sizeof buf - 1 || poll(&p, 1, (int)((end - now) / 1000 + 1)) <= 0)
            break;
        ssize_t got = recv(fd, buf + len, sizeof buf - 1 - len, 0);
        if (got <= 0)
            break;
        len += (size_t)got;
        buf[len] = '\0';
        const char *hdr_end = strstr(buf, "\r\n\r\n");
        const char *cl = strstr(buf, "Content-Length:");
        if (hdr_end && cl && cl < hdr_end &&
            len >= (size_t)(hdr_end + 4 - buf) + strtoull(cl + 15, NULL, 10))
            break;
    }
    close(fd);
    buf[len] = '\0';
    int code = -1;
    const char *hdr_end = strstr(buf, "\r\n\r\n");
    if (sscanf(buf, "HTTP/1.%*d %d", &code) != 1 || hdr_end == NULL)
        return -1;
    snprintf(body, cap, "%s", hdr_end + 4);
    return code;
}

int ctl_http_json(const char *host, unsigned port, const char *path, int timeout_ms, json_t **doc)
{
    static char body[1 << 16];
    *doc = NULL;
    int code = http_get(host, port, path, body, sizeof body, timeout_ms);
    if (code != 200)
        return code;
    /* Strict RFC 8259 (Jansson): one object, in UTF-8, nothing after it
     * but white space, no key twice. */
    json_error_t err;
    json_t *v = json_loads(body, JSON_REJECT_DUPLICATES, &err);
    if (v != NULL && !json_is_object(v)) {
        json_decref(v);
        v = NULL;
    }
    *doc = v;
    return code;
}

/* ---- status -------------------------------------------------------------------- */

/* The value of a top-level field as text: a string as it is (controls as
 * '?', so a server cannot steer the terminal), a number or word as JSON
 * writes it; "-" if absent. At most cap - 1 bytes. */
static void field_text(const json_t *doc, const char *name, char *out, size_t cap)
{
    const json_t *v = json_object_get(doc, name);
    if (v == NULL || json_is_object(v) || json_is_array(v))
        snprintf(out, cap, "-");
    else if (json_is_string(v))
        snprintf(out, cap, "%s", json_string_value(v));
    else if (json_is_integer(v))
        snprintf(out, cap, "%lld", (long long)json_integer_value(v));
    else if (json_is_real(v))
        snprintf(out, cap, "%g", json_real_value(v));
    else
        snprintf(out, cap, "%s", json_is_true(v) ? "true" : json_is_false(v) ? "false" : "null");
    for (char *c = out; *c != '\0'; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f)
            *c = '?';
}

static void status_human(const char *addr, const char *admin, int code, const json_t *doc)
{
    static const char *const fields[] = {"role",         "term", "leader", "leader_addr",
                                         "commit_index", "mode", "node_id"};
    if (doc == NULL) {
        printf("%s  unreachable (admin %s: %s)\n", addr, admin,
               code < 0 ? "no answer" : "bad answer");
        return;
    }
    printf("%s", addr);
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        char v[128];
        field_text(doc, fields[i], v, sizeof v);
        if (strcmp(v, "-") != 0 || i < 5) /* the first five always, others if present */
            printf("  %s=%s", fields[i], v);
    }
    /* A leader that lost its majority still calls itself one for a while. */
    printf("%s\n", json_is_false(json_object_get(doc, "serving")) ? "  serving=false" : "");
}

/* Nodes status asks at most: the --addr ones (at most 8 in the library),
 * the members the leader lists, and a leader a follower names. */
#define STATUS_NODES_MAX 24

struct probe {
    char addr[STATUS_NODES_MAX][CTL_ADDR_CAP];
    int n;
    int answered, leaders;
    bool members_added;
    char named_leader[CTL_ADDR_CAP]; /* the leader_addr a non-leader gave first */
    char missing[512];               /* the addresses that did not answer, for the last line */
};

/* Whether addr is listed already; else lists it (if there is room). */
static void add_addr(struct probe *pr, const char *addr, size_t len)
{
    for (int i = 0; i < pr->n; i++)
        if (strlen(pr->addr[i]) == len && memcmp(pr->addr[i], addr, len) == 0)
            return;
    if (pr->n < STATUS_NODES_MAX && len < CTL_ADDR_CAP)
        snprintf(pr->addr[pr->n++], CTL_ADDR_CAP, "%.*s", (int)len, addr);
}

/* Asks node i, prints its line (or JSON element), and lists the members
 * the first leader to answer names. */
static void probe_one(const struct ctl_opts *o, struct probe *pr, int i)
{
    static char more[MEMBERS_LISTED_MAX][CTL_ADDR_CAP];
    const char *addr = pr->addr[i];
    char admin[CTL_ADDR_CAP + 8];
    struct tk_addr a;
    const char *why;
    unsigned aport = 0;
    int code = -1;
    json_t *doc = NULL;
    /* Checked before anything was asked for --addr; a member's address
     * comes from a server, and a bad one is a node that did not answer. */
    if (tk_addr_parse(addr, strlen(addr), &a, &why) == TK_OK &&
        (aport = ctl_admin_port(o, a.port)) != 0) {
        a.port = (uint16_t)aport;
        tk_addr_format(&a, admin, sizeof admin);
        code = ctl_http_json(a.host, aport, "/status", (int)o->timeout_ms, &doc);
    } else {
        snprintf(admin, sizeof admin, "-");
    }
    if (o->json) {
        json_t *j = json_object();
        json_object_set_new(j, "addr", ctl_jstr(addr));
        json_object_set_new(j, "admin", ctl_jstr(admin));
        json_object_set_new(j, "ok", json_boolean(doc != NULL));
        json_object_set_new(j, "status", doc != NULL ? json_incref(doc) : json_null());
        if (i > 0)
            putchar(',');
        ctl_json_print(stdout, j, "");
    } else {
        status_human(addr, admin, code, doc);
    }
    if (doc == NULL) {
        size_t n = strlen(pr->missing);
        snprintf(pr->missing + n, sizeof pr->missing - n, "%s%s", n ? ", " : "", addr);
        return;
    }
    pr->answered++;
    const char *role = json_string_value(json_object_get(doc, "role"));
    if (role == NULL || strcmp(role, "leader") != 0 ||
        json_is_false(json_object_get(doc, "serving"))) {
        const char *la = json_string_value(json_object_get(doc, "leader_addr"));
        if (pr->named_leader[0] == '\0' && la != NULL && la[0] != '\0')
            snprintf(pr->named_leader, sizeof pr->named_leader, "%s", la);
    } else {
        pr->leaders++;
        if (!pr->members_added) {
            pr->members_added = true;
            int m = ctl_member_addrs(doc, more, MEMBERS_LISTED_MAX);
            for (int k = 0; k < m; k++)
                add_addr(pr, more[k], strlen(more[k]));
        }
    }
    json_decref(doc);
}

static int status_all(const struct ctl_opts *o)
{
    static struct probe pr;
    memset(&pr, 0, sizeof pr);
    /* Every address checked before any is asked: a typo is a usage error
     * whatever the network does, and no half-printed output precedes it. */
    struct tk_addr addrs[CTL_ADDRS_MAX];
    size_t n = 0;
    int rc = ctl_check_admin_addrs(o, addrs, &n);
    if (rc != 0)
        return rc;
    for (size_t i = 0; i < n; i++) {
        char text[CTL_ADDR_CAP];
        size_t len = tk_addr_format(&addrs[i], text, sizeof text);
        add_addr(&pr, text, len);
    }
    int given = pr.n;
    if (o->json)
        printf("[");
    for (int i = 0; i < pr.n; i++) {
        probe_one(o, &pr, i);
        /* No leader among the --addr nodes: the one the first of them
         * to name one names (its members come with it). */
        if (i == given - 1 && pr.leaders == 0 && pr.named_leader[0] != '\0')
            add_addr(&pr, pr.named_leader, strlen(pr.named_leader));
    }
    if (o->json)
        printf("]\n");
    fflush(stdout);
    if (pr.answered == 0) {
        fprintf(stderr,
                "ticketctl: no member answered /status on its admin port (client port + 2, or "
                "--admin-port)\n");
        return CTL_EXIT_UNAVAILABLE;
    }
    if (pr.leaders == 0) {
        fprintf(stderr,
                "ticketctl: no leader: none of the %d node%s that answered is a leader that "
                "serves%s%s\n",
                pr.answered, pr.answered == 1 ? "" : "s", pr.missing[0] ? "; no answer from " : "",
                pr.missing);
        return CTL_EXIT_UNAVAILABLE;
    }
    if (pr.missing[0]) {
        fprintf(stderr, "ticketctl: degraded: %d of %d members did not answer: %s\n",
                pr.n - pr.answered, pr.n, pr.missing);
        return CTL_EXIT_DEGRADED;
    }
    return CTL_EXIT_OK;
}

int ctl_status(const struct ctl_opts *o)
{
    return strcmp(o->cmd, "members") == 0 ? ctl_members(o) : status_all(o);
}
