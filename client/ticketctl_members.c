/* ticketctl members: the cluster's members as the leader sees them, from
 * its admin /members (client port + 2, or --admin-port) over plain HTTP,
 * so no secret is needed (the HTTP side is ticketctl_status.c's, shared
 * with status). Only the leader's match index (and lag, last contact)
 * mean anything, so a follower's answer is followed to its leader's
 * client address. (remove-member does not look here: plain HTTP can be
 * answered by anyone, and it sends a peer proof; see ticketctl_peer.c.)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/ticketctl.h"
#include "client/ticketing.h"

/* ---- members --------------------------------------------------------------------- */

/* A cluster has 3 or 5 voters, plus a learner or two while one joins. */
#define MEMBERS_MAX 16
/* Text fields are cut at TEXT_MAX - 1 bytes, never inside a UTF-8 sequence. */
#define TEXT_MAX 256
/* Addresses asked at most: --addr's (at most 8 in the library) and a few
 * hops to a leader that has just moved. */
#define ASK_MAX 16
#define LEADER_HOPS_MAX 3

struct member {
    char id[TEXT_MAX];
    char peer_addr[TEXT_MAX];
    char client_addr[TEXT_MAX];
    int voter; /* 1, 0, or -1 if absent */
    bool has_match, has_lag, has_contact;
    int64_t match, lag, contact_ms;
};

/* One node's /members, as far as members needs it; absent fields stay "" or -1. */
struct view {
    char addr[TEXT_MAX]; /* the client address we asked */
    char node_id[TEXT_MAX];
    char role[TEXT_MAX];
    char leader[TEXT_MAX];
    char leader_addr[TEXT_MAX];
    char membership[TEXT_MAX];
    char membership_note[TEXT_MAX];
    int ready; /* 1, 0, or -1 if absent */
    uint32_t n;
    uint32_t dropped; /* members past MEMBERS_MAX */
    struct member m[MEMBERS_MAX];
};

/* A string field of o into dst (TEXT_MAX bytes), cut at a character;
 * dst is left as it is if the field is no string. */
static void set_text(char *dst, const json_t *o, const char *name)
{
    const char *s = json_string_value(json_object_get(o, name));
    if (s == NULL)
        return;
    size_t n = strlen(s);
    if (n >= TEXT_MAX) {
        n = TEXT_MAX - 1;
        while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
            n--; /* s[n] would continue the character before the cut */
    }
    memcpy(dst, s, n);
    dst[n] = '\0';
}

/* An integer field of o that fits an int64_t; false if absent or null. */
static bool set_int(int64_t *dst, const json_t *o, const char *name)
{
    const json_t *v = json_object_get(o, name);
    if (!json_is_integer(v))
        return false;
    *dst = (int64_t)json_integer_value(v);
    return true;
}

/* 1 for true, 0 for false, -1 for anything else. */
static int tri(const json_t *v)
{
    return json_is_boolean(v) ? json_is_true(v) : -1;
}

static void parse_member(const json_t *o, struct member *m)
{
    memset(m, 0, sizeof *m);
    set_text(m->id, o, "id");
    set_text(m->peer_addr, o, "peer_addr");
    set_text(m->client_addr, o, "client_addr");
    const char *role = json_string_value(json_object_get(o, "role"));
    if (role == NULL) /* /status: a voter flag */
        m->voter = tri(json_object_get(o, "voter"));
    else
        m->voter = !strcmp(role, "voter") ? 1 : !strcmp(role, "learner") ? 0 : -1;
    m->has_match = set_int(&m->match, o, "match_index");
    m->has_lag = set_int(&m->lag, o, "lag");
    m->has_contact = set_int(&m->contact_ms, o, "last_contact_ms");
}

/* A /members document into v, or the /status of a server older than
 * /members (the leader as an id and leader_addr, each member's voter
 * flag); false if it is neither (no members array). */
static bool parse_view(const json_t *doc, struct view *v)
{
    const json_t *ms = json_object_get(doc, "members");
    const json_t *leader = json_object_get(doc, "leader");
    memset(v, 0, sizeof *v);
    if (!json_is_array(ms))
        return false;
    set_text(v->node_id, doc, "node_id");
    set_text(v->role, doc, "role");
    set_text(v->membership, doc, "membership");
    set_text(v->membership_note, doc, "membership_note");
    v->ready = tri(json_object_get(doc, "ready"));
    if (json_is_object(leader)) {
        set_text(v->leader, leader, "id");
        set_text(v->leader_addr, leader, "client_addr");
    } else {
        set_text(v->leader, doc, "leader");
        set_text(v->leader_addr, doc, "leader_addr");
    }
    for (size_t i = 0; i < json_array_size(ms); i++) {
        const json_t *o = json_array_get(ms, i);
        if (!json_is_object(o))
            continue;
        if (v->n < MEMBERS_MAX)
            parse_member(o, &v->m[v->n++]);
        else
            v->dropped++;
    }
    return true;
}

/* A NodeId other than "" and 0000000000000000 (what /status says when it
 * knows no leader). */
static bool id_known(const char *id)
{
    return id[0] != '\0' && id[strspn(id, "0")] != '\0';
}

static bool is_leader(const struct view *v)
{
    return strcmp(v->role, "leader") == 0;
}

struct hunt {
    const struct ctl_opts *o;
    uint64_t read_ms;     /* each /members read, at most */
    uint64_t deadline_us; /* and all of them (0: no bound) */
    char asked[ASK_MAX][TEXT_MAX];
    int n_asked;
    struct view got;      /* the last answer */
    struct view fallback; /* the first non-leader answer, with members if any had them */
    bool have_fallback;
};

/* Asks addr's admin /members; true if addr is the leader (its view in
 * h->got). A follower's answer is kept as the fallback, and its leader_addr
 * asked next, up to LEADER_HOPS_MAX hops (the leader may just have moved). */
static bool ask(struct hunt *h, const char *addr, int hops)
{
    struct tk_addr a;
    const char *why;
    for (int i = 0; i < h->n_asked; i++)
        if (!strcmp(h->asked[i], addr))
            return false;
    if (h->n_asked == ASK_MAX)
        return false;
    snprintf(h->asked[h->n_asked++], TEXT_MAX, "%s", addr);
    /* leader_addr comes from the server: a bad one is a bad answer, not a usage error. */
    if (tk_addr_parse(addr, strlen(addr), &a, &why) != TK_OK || ctl_admin_port(h->o, a.port) == 0)
        return false;
    uint64_t ms = h->read_ms, now = tk_client_now_us();
    if (h->deadline_us != 0 && h->deadline_us <= now)
        return false;
    if (h->deadline_us != 0 && (h->deadline_us - now) / 1000u < ms)
        ms = (h->deadline_us - now) / 1000u;
    json_t *doc;
    unsigned aport = ctl_admin_port(h->o, a.port);
    int code = ctl_http_json(a.host, aport, "/members", (int)ms, &doc);
    /* A server older than /members: its /status has the same members. */
    if (code == 404)
        code = ctl_http_json(a.host, aport, "/status", (int)ms, &doc);
    bool parsed = doc != NULL && parse_view(doc, &h->got);
    json_decref(doc);
    if (!parsed) {
        if (h->o->verbose)
            fprintf(stderr, "ticketctl: %s: %s from the admin port\n", addr,
                    code < 0 ? "no answer" : "bad answer");
        return false;
    }
    snprintf(h->got.addr, TEXT_MAX, "%s", addr);
    if (h->o->verbose)
        fprintf(stderr, "ticketctl: %s: node %s, %s, leader at %s\n", addr, h->got.node_id,
                h->got.role[0] ? h->got.role : "-",
                h->got.leader_addr[0] ? h->got.leader_addr : "-");
    if (is_leader(&h->got))
        return true;
    if (!h->have_fallback || (h->fallback.n == 0 && h->got.n > 0)) {
        h->fallback = h->got;
        h->have_fallback = true;
    }
    char next[TEXT_MAX];
    snprintf(next, sizeof next, "%s", h->got.leader_addr);
    return next[0] != '\0' && hops < LEADER_HOPS_MAX && ask(h, next, hops + 1);
}

int ctl_member_addrs(const json_t *status, char (*addrs)[CTL_ADDR_CAP], int max)
{
    const json_t *ms = json_object_get(status, "members");
    int n = 0;
    for (size_t i = 0; i < json_array_size(ms) && n < max; i++) {
        const char *a = json_string_value(json_object_get(json_array_get(ms, i), "client_addr"));
        if (a != NULL && a[0] != '\0' && strlen(a) < CTL_ADDR_CAP)
            snprintf(addrs[n++], CTL_ADDR_CAP, "%s", a);
    }
    return n;
}

/* Text for a terminal: control characters (from the server) become '?'. */
static void cell_text(char *out, const char *s)
{
    size_t n = 0;
    for (; s[n] != '\0' && n < TEXT_MAX - 1; n++)
        out[n] = (unsigned char)s[n] < 0x20 || s[n] == 0x7f ? '?' : s[n];
    out[n] = '\0';
    if (n == 0)
        snprintf(out, TEXT_MAX, "-");
}

/* A count, or "-" if absent or negative (last_contact_ms -1: unknown). */
static void cell_int(char *out, size_t cap, bool has, int64_t v, const char *unit)
{
    if (has && v >= 0)
        snprintf(out, cap, "%lld%s", (long long)v, unit);
    else
        snprintf(out, cap, "-");
}

/* v as a JSON integer if has and v >= 0, else null. */
static json_t *count_or_null(bool has, int64_t v)
{
    return has && v >= 0 ? json_integer(v) : json_null();
}

/* The table (or JSON array) of v's members. Match, lag and last contact
 * are shown only from the leader: a follower tracks none of them. */
static void print_members(const struct ctl_opts *o, const struct view *v, bool leader_view)
{
    enum { COLS = 7 };
    static const char *const heads[COLS] = {"NODE-ID", "PEER-ADDR", "CLIENT-ADDR", "ROLE",
                                            "MATCH",   "LAG",       "LAST-CONTACT"};
    static char cells[MEMBERS_MAX][COLS][TEXT_MAX];
    bool mark[MEMBERS_MAX];
    const char *leader = leader_view ? v->node_id : id_known(v->leader) ? v->leader : "";
    size_t width[COLS];
    json_t *list = o->json ? json_array() : NULL;
    for (int c = 0; c < COLS; c++)
        width[c] = strlen(heads[c]);
    for (uint32_t i = 0; i < v->n; i++) {
        const struct member *m = &v->m[i];
        const char *role = m->voter < 0 ? "" : m->voter ? "voter" : "learner";
        mark[i] = leader[0] != '\0' && strcmp(m->id, leader) == 0;
        if (list != NULL) {
            json_t *j = json_object();
            json_object_set_new(j, "id", ctl_jstr(m->id));
            json_object_set_new(j, "leader", json_boolean(mark[i]));
            json_object_set_new(j, "role", ctl_jstr(role[0] ? role : NULL));
            json_object_set_new(j, "peer_addr", ctl_jstr(m->peer_addr));
            json_object_set_new(j, "client_addr", ctl_jstr(m->client_addr));
            /* -1 (unknown) and what a follower reports are null. */
            json_object_set_new(j, "match_index",
                                count_or_null(leader_view && m->has_match, m->match));
            json_object_set_new(j, "lag", count_or_null(leader_view && m->has_lag, m->lag));
            json_object_set_new(j, "last_contact_ms",
                                count_or_null(leader_view && m->has_contact, m->contact_ms));
            json_array_append_new(list, j);
            continue;
        }
        cell_text(cells[i][0], m->id);
        cell_text(cells[i][1], m->peer_addr);
        cell_text(cells[i][2], m->client_addr);
        cell_text(cells[i][3], role);
        cell_int(cells[i][4], TEXT_MAX, leader_view && m->has_match, m->match, "");
        cell_int(cells[i][5], TEXT_MAX, leader_view && m->has_lag, m->lag, "");
        cell_int(cells[i][6], TEXT_MAX, leader_view && m->has_contact, m->contact_ms, "ms");
        for (int c = 0; c < COLS; c++)
            if (strlen(cells[i][c]) > width[c])
                width[c] = strlen(cells[i][c]);
    }
    if (list != NULL) {
        ctl_json_print(stdout, list, "\n");
        return;
    }
    printf(" ");
    for (int c = 0; c < COLS; c++)
        printf(" %-*s%s", c < COLS - 1 ? (int)width[c] : 0, heads[c], c < COLS - 1 ? " " : "\n");
    for (uint32_t i = 0; i < v->n; i++) {
        printf("%c", mark[i] ? '*' : ' ');
        for (int c = 0; c < COLS; c++)
            printf(" %-*s%s", c < COLS - 1 ? (int)width[c] : 0, cells[i][c],
                   c < COLS - 1 ? " " : "\n");
    }
}

/* Why there is no leader's view, on stderr, with what the node we did
 * read says about itself. */
static void explain_no_leader(const struct view *v)
{
    char msg[2048];
    size_t n = 0;
    if (id_known(v->leader))
        n += (size_t)snprintf(msg, sizeof msg, "the leader %s (%s) did not answer", v->leader,
                              v->leader_addr[0] ? v->leader_addr : "address unknown");
    else
        n += (size_t)snprintf(msg, sizeof msg, "no leader known");
    n += (size_t)snprintf(msg + n, sizeof msg - n,
                          "; members as node %s at %s (%s) sees them; match, lag and last "
                          "contact only the leader knows",
                          v->node_id[0] ? v->node_id : "-", v->addr,
                          v->role[0] ? v->role : "role unknown");
    if (v->membership[0] && n < sizeof msg)
        n += (size_t)snprintf(msg + n, sizeof msg - n, "; its membership: %s", v->membership);
    if (v->membership_note[0] && n < sizeof msg)
        n += (size_t)snprintf(msg + n, sizeof msg - n, " (%s)", v->membership_note);
    if (v->ready >= 0 && n < sizeof msg)
        snprintf(msg + n, sizeof msg - n, "; ready: %s", v->ready ? "yes" : "no");
    /* The fields come from the server: one line, whatever they hold. */
    for (char *c = msg; *c != '\0'; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f)
            *c = '?';
    fprintf(stderr, "ticketctl: %s\n", msg);
}

/* Asks the --addr nodes (and the leaders they name) until one is the
 * leader; true if found (its view in h->got), else the first follower's
 * view in h->fallback if any answered. CTL_EXIT_USAGE in *rc on a
 * bad --addr: every address is checked before any is asked, so a typo is
 * a usage error whatever the network does. */
static bool hunt_leader(struct hunt *h,
                        const struct ctl_opts *o,
                        uint64_t read_ms,
                        uint64_t deadline_us,
                        int *rc)
{
    struct tk_addr addrs[CTL_ADDRS_MAX];
    size_t n = 0;
    bool found = false;
    memset(h, 0, sizeof *h);
    h->o = o;
    h->read_ms = read_ms;
    h->deadline_us = deadline_us;
    *rc = ctl_check_admin_addrs(o, addrs, &n);
    for (size_t i = 0; *rc == 0 && !found && i < n; i++) {
        char addr[TEXT_MAX];
        tk_addr_format(&addrs[i], addr, sizeof addr); /* fits: checked above */
        found = ask(h, addr, 0);
    }
    return found;
}

int ctl_members(const struct ctl_opts *o)
{
    static struct hunt h;
    int rc;
    bool found = hunt_leader(&h, o, o->timeout_ms, 0, &rc);
    if (rc != 0)
        return rc;
    const struct view *v = found ? &h.got : h.have_fallback ? &h.fallback : NULL;
    if (v == NULL) {
        if (o->json)
            printf("[]\n");
        fprintf(stderr,
                "ticketctl: no member answered /status on its admin port "
                "(client port + 2, or --admin-port)\n");
        return CTL_EXIT_UNAVAILABLE;
    }
    print_members(o, v, found);
    if (v->dropped > 0)
        fprintf(stderr, "ticketctl: %u more members not shown\n", v->dropped);
    if (found)
        return CTL_EXIT_OK;
    explain_no_leader(v);
    return CTL_EXIT_UNAVAILABLE;
}
