/* ticketctl members: the cluster's members as the leader sees them, from
 * its admin /status (client port + 2, or --admin-port) over plain HTTP, so no secret is
 * needed (the HTTP side is ticketctl_status.c's, shared with status). Only
 * the leader's match index (and lag, last contact) mean anything, so a
 * follower's answer is followed to its leader_addr. (remove-member does
 * not look here: plain HTTP can be answered by anyone, and it sends a
 * peer proof; see ticketctl_remove.c.)
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/ticketctl.h"
#include "client/ticketing.h"

/* ---- a small JSON reader --------------------------------------------------------- */

/* members reads the members array, which the string search of status's
 * json_field cannot tell from the top level, and /status keeps growing
 * (free text such as membership_note included): so a real, if small,
 * parser that skips every field it does not know. Strings are cut at
 * TEXT_MAX - 1 bytes, never inside a UTF-8 sequence. */
#define TEXT_MAX 256
#define JSON_DEPTH_MAX 32

struct jscan {
    const char *p;
};

struct jval {
    char kind; /* 's' string, 'n' number, 'b' bool, 'z' null, 'x' object or array */
    bool b;
    bool int_ok; /* a number that fits an int64_t */
    int64_t i;
    char s[TEXT_MAX];
};

static void jws(struct jscan *j)
{
    while (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')
        j->p++;
}

static bool jlit(struct jscan *j, char c)
{
    jws(j);
    if (*j->p != c)
        return false;
    j->p++;
    return true;
}

static int hex4(const char *p)
{
    int v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0)
            return -1;
        v = v * 16 + d;
    }
    return v;
}

/* Appends len bytes whole, or nothing ever again once one does not fit. */
static void put_bytes(char *out, size_t cap, size_t *n, const char *src, size_t len)
{
    if (out == NULL || *n >= cap)
        return;
    if (*n + len >= cap) {
        *n = cap; /* full: later (shorter) pieces must not follow a gap */
        return;
    }
    memcpy(out + *n, src, len);
    *n += len;
}

static void put_utf8(char *out, size_t cap, size_t *n, uint32_t cp)
{
    char b[4];
    size_t len;
    if (cp < 0x80) {
        b[0] = (char)cp;
        len = 1;
    } else if (cp < 0x800) {
        b[0] = (char)(0xC0 | cp >> 6);
        b[1] = (char)(0x80 | (cp & 0x3F));
        len = 2;
    } else if (cp < 0x10000) {
        b[0] = (char)(0xE0 | cp >> 12);
        b[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        b[2] = (char)(0x80 | (cp & 0x3F));
        len = 3;
    } else {
        b[0] = (char)(0xF0 | cp >> 18);
        b[1] = (char)(0x80 | (cp >> 12 & 0x3F));
        b[2] = (char)(0x80 | (cp >> 6 & 0x3F));
        b[3] = (char)(0x80 | (cp & 0x3F));
        len = 4;
    }
    put_bytes(out, cap, n, b, len);
}

/* The escape at *pp (its backslash) into *cp, and *pp past it; false if
 * it is none of JSON's. */
static bool jescape(const char **pp, uint32_t *cp)
{
    const char *p = *pp;
    char e = p[1];
    p += 2;
    switch (e) {
        case '"':
        case '\\':
        case '/':
            *cp = (uint32_t)e;
            break;
        case 'b':
            *cp = '\b';
            break;
        case 'f':
            *cp = '\f';
            break;
        case 'n':
            *cp = '\n';
            break;
        case 'r':
            *cp = '\r';
            break;
        case 't':
            *cp = '\t';
            break;
        case 'u': {
            int h = hex4(p);
            if (h < 0)
                return false;
            p += 4;
            *cp = (uint32_t)h;
            if (*cp >= 0xD800 && *cp < 0xDC00 && p[0] == '\\' && p[1] == 'u') {
                int lo = hex4(p + 2);
                if (lo >= 0xDC00 && lo < 0xE000) {
                    *cp = 0x10000 + ((*cp - 0xD800) << 10) + ((uint32_t)lo - 0xDC00);
                    p += 6;
                }
            }
            /* A lone surrogate is no character, and a NUL would end our C string. */
            if ((*cp >= 0xD800 && *cp < 0xE000) || *cp == 0)
                *cp = 0xFFFD;
            break;
        }
        default:
            return false;
    }
    *pp = p;
    return true;
}

/* A JSON string, unescaped, into out (NULL: skipped). */
static bool jstring(struct jscan *j, char *out, size_t cap)
{
    size_t n = 0;
    jws(j);
    if (*j->p != '"')
        return false;
    const char *p = j->p + 1;
    for (;;) {
        unsigned char ch = (unsigned char)*p;
        if (ch == '"')
            break;
        if (ch < 0x20) /* the end of the body included */
            return false;
        if (ch != '\\') {
            /* A raw UTF-8 sequence is copied whole, so a cut never splits it. */
            size_t len = ch >= 0xF0 ? 4 : ch >= 0xE0 ? 3 : ch >= 0xC0 ? 2 : 1;
            for (size_t k = 1; k < len; k++)
                if (((unsigned char)p[k] & 0xC0) != 0x80)
                    len = k; /* malformed: the bytes go one by one */
            put_bytes(out, cap, &n, p, len);
            p += len;
            continue;
        }
        uint32_t cp;
        if (!jescape(&p, &cp))
            return false;
        put_utf8(out, cap, &n, cp);
    }
    if (out != NULL)
        out[n < cap ? n : cap - 1] = '\0';
    j->p = p + 1;
    return true;
}

static bool jvalue(struct jscan *j, struct jval *v, int depth);

/* Skips an object or array. */
static bool jskip(struct jscan *j, int depth)
{
    char close = *j->p == '{' ? '}' : ']';
    if (depth > JSON_DEPTH_MAX)
        return false;
    j->p++;
    if (jlit(j, close))
        return true;
    do {
        struct jval v;
        if (close == '}' && (!jstring(j, NULL, 0) || !jlit(j, ':')))
            return false;
        if (!jvalue(j, &v, depth + 1))
            return false;
    } while (jlit(j, ','));
    return jlit(j, close);
}

static bool jdigits(const char **p)
{
    if (**p < '0' || **p > '9')
        return false;
    while (**p >= '0' && **p <= '9')
        (*p)++;
    return true;
}

static bool jvalue(struct jscan *j, struct jval *v, int depth)
{
    jws(j);
    const char *p = j->p;
    v->s[0] = '\0';
    v->int_ok = false;
    if (*p == '"') {
        v->kind = 's';
        return jstring(j, v->s, sizeof v->s);
    }
    if (*p == '{' || *p == '[') {
        v->kind = 'x';
        return jskip(j, depth);
    }
    static const struct {
        const char *word;
        char kind;
        bool b;
    } words[] = {{"true", 'b', true}, {"false", 'b', false}, {"null", 'z', false}};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
        size_t len = strlen(words[i].word);
        if (strncmp(p, words[i].word, len) == 0) {
            v->kind = words[i].kind;
            v->b = words[i].b;
            j->p = p + len;
            return true;
        }
    }
    bool integral = true;
    if (*p == '-')
        p++;
    if (!jdigits(&p))
        return false;
    if (*p == '.') {
        p++;
        integral = false;
        if (!jdigits(&p))
            return false;
    }
    if (*p == 'e' || *p == 'E') {
        p++;
        integral = false;
        if (*p == '+' || *p == '-')
            p++;
        if (!jdigits(&p))
            return false;
    }
    v->kind = 'n';
    if (integral) {
        errno = 0;
        v->i = strtoll(j->p, NULL, 10);
        v->int_ok = errno == 0;
    }
    j->p = p;
    return true;
}

/* Calls field(ctx, name, j) for each member of an object; field reads the value. */
static bool jobject(struct jscan *j, bool (*field)(void *, const char *, struct jscan *), void *ctx)
{
    if (!jlit(j, '{'))
        return false;
    if (jlit(j, '}'))
        return true;
    do {
        char name[32]; /* longer names are cut, and then match no field we know */
        if (!jstring(j, name, sizeof name) || !jlit(j, ':') || !field(ctx, name, j))
            return false;
    } while (jlit(j, ','));
    return jlit(j, '}');
}

/* ---- members --------------------------------------------------------------------- */

/* A cluster has 3 or 5 voters, plus a learner or two while one joins. */
#define MEMBERS_MAX 16
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

/* One node's /status, as far as members needs it; absent fields stay "" or -1. */
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

static void set_text(char *dst, const struct jval *x)
{
    if (x->kind == 's')
        memcpy(dst, x->s, TEXT_MAX);
}

static void set_int(bool *has, int64_t *dst, const struct jval *x)
{
    *has = x->kind == 'n' && x->int_ok;
    *dst = x->i;
}

static bool member_field(void *ctx, const char *name, struct jscan *j)
{
    struct member *m = ctx;
    struct jval x;
    if (!jvalue(j, &x, 2))
        return false;
    if (!strcmp(name, "id"))
        set_text(m->id, &x);
    else if (!strcmp(name, "peer_addr"))
        set_text(m->peer_addr, &x);
    else if (!strcmp(name, "client_addr"))
        set_text(m->client_addr, &x);
    else if (!strcmp(name, "voter"))
        m->voter = x.kind == 'b' ? x.b : -1;
    else if (!strcmp(name, "match_index"))
        set_int(&m->has_match, &m->match, &x);
    else if (!strcmp(name, "lag"))
        set_int(&m->has_lag, &m->lag, &x);
    else if (!strcmp(name, "last_contact_ms"))
        set_int(&m->has_contact, &m->contact_ms, &x);
    return true;
}

static bool members_array(struct jscan *j, struct view *v)
{
    struct jval x;
    jws(j);
    if (*j->p != '[') /* null or something new: no members, not an error */
        return jvalue(j, &x, 1);
    j->p++;
    if (jlit(j, ']'))
        return true;
    do {
        jws(j);
        if (*j->p == '{' && v->n < MEMBERS_MAX) {
            struct member *m = &v->m[v->n++];
            memset(m, 0, sizeof *m);
            m->voter = -1;
            if (!jobject(j, member_field, m))
                return false;
        } else {
            v->dropped += *j->p == '{';
            if (!jvalue(j, &x, 2))
                return false;
        }
    } while (jlit(j, ','));
    return jlit(j, ']');
}

static bool view_field(void *ctx, const char *name, struct jscan *j)
{
    struct view *v = ctx;
    struct jval x;
    if (!strcmp(name, "members"))
        return members_array(j, v);
    if (!jvalue(j, &x, 1))
        return false;
    if (!strcmp(name, "node_id"))
        set_text(v->node_id, &x);
    else if (!strcmp(name, "role"))
        set_text(v->role, &x);
    else if (!strcmp(name, "leader"))
        set_text(v->leader, &x);
    else if (!strcmp(name, "leader_addr"))
        set_text(v->leader_addr, &x);
    else if (!strcmp(name, "membership"))
        set_text(v->membership, &x);
    else if (!strcmp(name, "membership_note"))
        set_text(v->membership_note, &x);
    else if (!strcmp(name, "ready"))
        v->ready = x.kind == 'b' ? x.b : -1;
    return true;
}

static bool parse_view(const char *body, struct view *v)
{
    struct jscan j = {.p = body};
    memset(v, 0, sizeof *v);
    v->ready = -1;
    if (!jobject(&j, view_field, v))
        return false;
    jws(&j);
    return *j.p == '\0';
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
    uint64_t read_ms;     /* each /status read, at most */
    uint64_t deadline_us; /* and all of them (0: no bound) */
    char asked[ASK_MAX][TEXT_MAX];
    int n_asked;
    struct view got;      /* the last answer */
    struct view fallback; /* the first non-leader answer, with members if any had them */
    bool have_fallback;
};

/* Asks addr's admin /status; true if addr is the leader (its view in
 * h->got). A follower's answer is kept as the fallback, and its leader_addr
 * asked next, up to LEADER_HOPS_MAX hops (the leader may just have moved). */
static bool ask(struct hunt *h, const char *addr, int hops)
{
    struct tk_addr a;
    const char *why;
    static char body[1 << 16];
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
    int code = ctl_http_status(a.host, ctl_admin_port(h->o, a.port), body, sizeof body, (int)ms);
    if (code != 200 || !parse_view(body, &h->got)) {
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

int ctl_member_addrs(const char *body, char (*addrs)[CTL_ADDR_CAP], int max)
{
    static struct view v;
    int n = 0;
    if (!parse_view(body, &v))
        return 0;
    for (uint32_t i = 0; i < v.n && n < max; i++)
        if (v.m[i].client_addr[0] != '\0' && strlen(v.m[i].client_addr) < CTL_ADDR_CAP)
            snprintf(addrs[n++], CTL_ADDR_CAP, "%s", v.m[i].client_addr);
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
    if (o->json)
        printf("[");
    for (int c = 0; c < COLS; c++)
        width[c] = strlen(heads[c]);
    for (uint32_t i = 0; i < v->n; i++) {
        const struct member *m = &v->m[i];
        const char *role = m->voter < 0 ? "" : m->voter ? "voter" : "learner";
        mark[i] = leader[0] != '\0' && strcmp(m->id, leader) == 0;
        if (o->json) {
            bool first = true;
            printf("%s{", i ? "," : "");
            ctl_json_kstr(stdout, &first, "id", m->id);
            ctl_json_kbool(stdout, &first, "leader", mark[i]);
            ctl_json_kstr(stdout, &first, "role", role[0] ? role : NULL);
            ctl_json_kstr(stdout, &first, "peer_addr", m->peer_addr);
            ctl_json_kstr(stdout, &first, "client_addr", m->client_addr);
            /* -1 (unknown) and what a follower reports are null. */
            ctl_json_kint(stdout, &first, "match_index",
                          leader_view && m->has_match && m->match >= 0, m->match);
            ctl_json_kint(stdout, &first, "lag", leader_view && m->has_lag && m->lag >= 0, m->lag);
            ctl_json_kint(stdout, &first, "last_contact_ms",
                          leader_view && m->has_contact && m->contact_ms >= 0, m->contact_ms);
            printf("}");
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
    if (o->json) {
        printf("]\n");
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
