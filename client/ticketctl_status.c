/* ticketctl status, and what it shares with members (ticketctl_members.c):
 * both read the admin /status (client port + 2) over plain HTTP instead of
 * the client protocol, so they need no secret.
 *
 * status prints each configured node's role, term, leader and commit index
 * as far as the node reports them (a standalone node has no cluster fields
 * beyond its own).
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

/* ---- the admin /status, shared with members -------------------------------------- */

/* Splits "host:port" or "[v6]:port"; false if malformed. */
bool ctl_split_addr(const char *a, size_t len, char *host, size_t hcap, unsigned *port)
{
    const char *colon = NULL, *h = a, *hend;
    if (len > 0 && a[0] == '[') {
        const char *close = memchr(a, ']', len);
        if (close == NULL || close + 1 >= a + len || close[1] != ':')
            return false;
        h = a + 1;
        hend = close;
        colon = close + 1;
    } else {
        for (size_t i = 0; i < len; i++)
            if (a[i] == ':')
                colon = a + i;
        if (colon == NULL)
            return false;
        hend = colon;
    }
    size_t hl = (size_t)(hend - h);
    char pbuf[8];
    size_t pl = (size_t)(a + len - colon - 1);
    uint64_t p;
    if (hl == 0 || hl >= hcap || pl == 0 || pl >= sizeof pbuf)
        return false;
    memcpy(pbuf, colon + 1, pl);
    pbuf[pl] = '\0';
    if (!ctl_parse_u64(pbuf, &p) || p == 0 || p > 65535)
        return false;
    memcpy(host, h, hl);
    host[hl] = '\0';
    *port = (unsigned)p;
    return true;
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

/* GET /status from host:port; the body (NUL-terminated) into body.
 * Returns the HTTP status code or -1. */
int ctl_http_status(const char *host, unsigned port, char *body, size_t cap, int timeout_ms)
{
    static char buf[1 << 16];
    uint64_t end = tk_client_now_us() + (uint64_t)timeout_ms * 1000u;
    int fd = connect_timeout(host, port, timeout_ms);
    if (fd < 0)
        return -1;
    char req[512];
    int n = snprintf(req, sizeof req,
                     "GET /status HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", host);
    size_t len = 0;
    if (send(fd, req, (size_t)n, MSG_NOSIGNAL) != n) {
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
    for (size_t l = strlen(body); l > 0 && (body[l - 1] == '\n' || body[l - 1] == '\r'); l--)
        body[l - 1] = '\0';
    return code;
}

/* ---- status -------------------------------------------------------------------- */

/* The value of a top-level-looking "name": field (a string without its
 * quotes, or a bare number/word); "-" if absent. Good enough for the flat
 * fields of /status, which may or may not carry the cluster fields yet. */
static void json_field(const char *json, const char *name, char *out, size_t cap)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", name);
    const char *p = strstr(json, pat);
    snprintf(out, cap, "-");
    if (p == NULL)
        return;
    p += strlen(pat);
    size_t n = 0;
    if (*p == '"') {
        p++;
        while (p[n] && p[n] != '"')
            n++;
    } else {
        while (p[n] && p[n] != ',' && p[n] != '}' && p[n] != ']')
            n++;
    }
    if (n >= cap)
        n = cap - 1;
    memcpy(out, p, n);
    out[n] = '\0';
}

static void status_human(const char *addr, const char *admin, int code, const char *body)
{
    static const char *const fields[] = {"role",         "term", "leader", "leader_addr",
                                         "commit_index", "mode", "node_id"};
    if (code != 200 || body[0] != '{') {
        printf("%s  unreachable (admin %s: %s)\n", addr, admin,
               code < 0 ? "no answer" : "bad answer");
        return;
    }
    printf("%s", addr);
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        char v[128];
        json_field(body, fields[i], v, sizeof v);
        if (strcmp(v, "-") != 0 || i < 5) /* the first five always, others if present */
            printf("  %s=%s", fields[i], v);
    }
    printf("\n");
}

static int status_all(const struct ctl_opts *o)
{
    static char body[1 << 16];
    const char *p = o->addr;
    int answered = 0;
    bool first = true;
    if (o->json)
        printf("[");
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char host[256], addr[300], admin[300];
        unsigned port;
        if (!ctl_split_addr(p, len, host, sizeof host, &port) || port + 2 > 65535)
            return ctl_die_usage("bad address in --addr '%s'", o->addr);
        snprintf(addr, sizeof addr, "%.*s", (int)len, p);
        snprintf(admin, sizeof admin, strchr(host, ':') ? "[%s]:%u" : "%s:%u", host, port + 2);
        int code = ctl_http_status(host, port + 2, body, sizeof body, (int)o->timeout_ms);
        bool ok = code == 200 && body[0] == '{';
        answered += ok;
        if (o->json)
            printf("%s{\"addr\":\"%s\",\"admin\":\"%s\",\"ok\":%s,\"status\":%s}", first ? "" : ",",
                   addr, admin, ok ? "true" : "false", ok ? body : "null");
        else
            status_human(addr, admin, code, body);
        first = false;
        if (comma == NULL)
            break;
        p = comma + 1;
    }
    if (o->json)
        printf("]\n");
    return answered > 0 ? CTL_EXIT_OK : CTL_EXIT_UNAVAILABLE;
}

int ctl_status(const struct ctl_opts *o)
{
    return strcmp(o->cmd, "members") == 0 ? ctl_members(o) : status_all(o);
}
