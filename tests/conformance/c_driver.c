/* The conformance driver of libticketing: one client, driven by JSON lines.
 *
 * tests/conformance/run.py starts it with the cluster's addresses and the
 * client knobs, writes one command object per line on stdin and reads one
 * reply object per line on stdout (docs/testing.md, "Client conformance").
 * The same protocol is spoken by the driver of every other client, so one
 * list of scenarios checks them all.
 *
 * The parser takes only what the commands need: one flat object of string,
 * non-negative integer, true/false/null members, on a line of at most
 * LINE_MAX_BYTES. Anything else is answered with DRIVER_ERROR.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client/ticketing.h"

#define LINE_MAX_BYTES 8192
#define FIELDS_MAX 16
#define STR_MAX 1024

static const char *const outcome_names[] = {
    [TK_CLIENT_ACQUIRED] = "ACQUIRED",
    [TK_CLIENT_TIMEOUT] = "TIMEOUT",
    [TK_CLIENT_BUSY] = "BUSY",
    [TK_CLIENT_INVALID] = "INVALID",
    [TK_CLIENT_UNAVAILABLE] = "UNAVAILABLE",
    [TK_CLIENT_INDETERMINATE] = "INDETERMINATE",
    [TK_CLIENT_CANCELLED] = "CANCELLED",
    [TK_CLIENT_RELEASED] = "RELEASED",
    [TK_CLIENT_NOT_HELD] = "NOT_HELD",
    [TK_CLIENT_UNCONFIRMED] = "UNCONFIRMED",
    [TK_CLIENT_QUEUE_FULL] = "QUEUE_FULL",
    [TK_CLIENT_ANSWERED] = "ANSWERED",
    [TK_CLIENT_WRONG_GROUP] = "WRONG_GROUP",
};

static const char *outcome_name(enum tk_client_outcome o)
{
    if ((unsigned)o >= sizeof outcome_names / sizeof outcome_names[0] || !outcome_names[o])
        return "UNKNOWN";
    return outcome_names[o];
}

/* ---- a bounded parser for one flat JSON object ------------------------------ */

enum jtype { J_STR, J_NUM, J_BOOL, J_NULL };

struct jfield {
    char name[32];
    enum jtype type;
    char str[STR_MAX + 1];
    uint64_t num;
    bool b;
};

struct jobj {
    struct jfield f[FIELDS_MAX];
    int n;
};

static void skip_ws(const char **p)
{
    while (**p == ' ' || **p == '\t' || **p == '\r')
        (*p)++;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* A string into out (cap bytes with the NUL). Only ASCII: a \u escape
 * above 0x7F and raw bytes above 0x7E are refused (no key or owner may
 * hold them anyway). */
static const char *parse_string(const char *p, char *out, size_t cap, const char **err)
{
    size_t n = 0;
    if (*p != '"') {
        *err = "expected a string";
        return NULL;
    }
    p++;
    for (;;) {
        unsigned char c = (unsigned char)*p;
        if (c == '"')
            break;
        if (c == '\0' || c < 0x20 || c > 0x7E) {
            *err = "bad character in a string";
            return NULL;
        }
        if (c == '\\') {
            p++;
            switch (*p) {
                case '"':
                    c = '"';
                    break;
                case '\\':
                    c = '\\';
                    break;
                case '/':
                    c = '/';
                    break;
                case 'b':
                    c = '\b';
                    break;
                case 'f':
                    c = '\f';
                    break;
                case 'n':
                    c = '\n';
                    break;
                case 'r':
                    c = '\r';
                    break;
                case 't':
                    c = '\t';
                    break;
                case 'u': {
                    int v = 0;
                    for (int i = 1; i <= 4; i++) {
                        int h = hexval(p[i]);
                        if (h < 0) {
                            *err = "bad \\u escape";
                            return NULL;
                        }
                        v = v * 16 + h;
                    }
                    if (v > 0x7F) {
                        *err = "non-ASCII \\u escape";
                        return NULL;
                    }
                    c = (unsigned char)v;
                    p += 4;
                    break;
                }
                default:
                    *err = "bad escape";
                    return NULL;
            }
        }
        if (n + 1 >= cap) {
            *err = "string too long";
            return NULL;
        }
        out[n++] = (char)c;
        p++;
    }
    out[n] = '\0';
    return p + 1;
}

static const char *parse_object(const char *p, struct jobj *o, const char **err)
{
    o->n = 0;
    skip_ws(&p);
    if (*p++ != '{') {
        *err = "not a JSON object";
        return NULL;
    }
    skip_ws(&p);
    if (*p == '}')
        return p + 1;
    for (;;) {
        if (o->n == FIELDS_MAX) {
            *err = "too many members";
            return NULL;
        }
        struct jfield *f = &o->f[o->n];
        skip_ws(&p);
        p = parse_string(p, f->name, sizeof f->name, err);
        if (p == NULL)
            return NULL;
        for (int i = 0; i < o->n; i++)
            if (strcmp(o->f[i].name, f->name) == 0) {
                *err = "duplicate member";
                return NULL;
            }
        skip_ws(&p);
        if (*p++ != ':') {
            *err = "expected ':'";
            return NULL;
        }
        skip_ws(&p);
        if (*p == '"') {
            f->type = J_STR;
            p = parse_string(p, f->str, sizeof f->str, err);
            if (p == NULL)
                return NULL;
        } else if (*p >= '0' && *p <= '9') {
            uint64_t v = 0;
            if (*p == '0' && p[1] >= '0' && p[1] <= '9') {
                *err = "leading zero";
                return NULL;
            }
            while (*p >= '0' && *p <= '9') {
                uint64_t d = (uint64_t)(*p - '0');
                if (v > (UINT64_MAX - d) / 10) {
                    *err = "number out of range";
                    return NULL;
                }
                v = v * 10 + d;
                p++;
            }
            if (*p == '.' || *p == 'e' || *p == 'E') {
                *err = "not an integer";
                return NULL;
            }
            f->type = J_NUM;
            f->num = v;
        } else if (strncmp(p, "true", 4) == 0 || strncmp(p, "false", 5) == 0) {
            f->type = J_BOOL;
            f->b = *p == 't';
            p += f->b ? 4 : 5;
        } else if (strncmp(p, "null", 4) == 0) {
            f->type = J_NULL;
            p += 4;
        } else {
            *err = "unsupported value (strings, non-negative integers, booleans, null)";
            return NULL;
        }
        o->n++;
        skip_ws(&p);
        if (*p == ',') {
            p++;
            continue;
        }
        if (*p == '}')
            return p + 1;
        *err = "expected ',' or '}'";
        return NULL;
    }
}

static const struct jfield *get(const struct jobj *o, const char *name)
{
    for (int i = 0; i < o->n; i++)
        if (strcmp(o->f[i].name, name) == 0)
            return &o->f[i];
    return NULL;
}

static const char *get_str(const struct jobj *o, const char *name, const char **err)
{
    const struct jfield *f = get(o, name);
    if (f == NULL || f->type != J_STR) {
        *err = name;
        return NULL;
    }
    return f->str;
}

static bool get_num(const struct jobj *o,
                    const char *name,
                    uint64_t max,
                    uint64_t *out,
                    const char **err)
{
    const struct jfield *f = get(o, name);
    if (f == NULL || f->type != J_NUM || f->num > max) {
        *err = name;
        return false;
    }
    *out = f->num;
    return true;
}

/* ---- output -------------------------------------------------------------------- */

static void put_str(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c < 0x20 || c > 0x7E)
            printf("\\u%04x", c);
        else
            putchar(c);
    }
    putchar('"');
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void end_reply(uint64_t t0)
{
    printf(",\"elapsed_ms\":%" PRIu64 "}\n", now_ms() - t0);
    fflush(stdout);
}

static void driver_error(const char *what, const char *detail)
{
    char msg[256];
    snprintf(msg, sizeof msg, "%s%s%s", what, detail ? ": " : "", detail ? detail : "");
    printf("{\"outcome\":\"DRIVER_ERROR\",\"message\":");
    put_str(msg);
    printf("}\n");
    fflush(stdout);
}

/* ---- the session ------------------------------------------------------------------ */

static void usage(void)
{
    fprintf(stderr,
            "usage: ticketing-c-driver --addrs HOST:PORT[,...] --secret-file PATH --owner NAME\n"
            "       [--response-grace-ms N] [--connect-timeout-ms N] [--send-budget-min-ms N]\n"
            "       [--request-timeout-ms N] [--backoff-min-ms N] [--backoff-max-ms N]\n"
            "       [--release-queue-max N] [--tls-ca-file PATH] [--tls-cert-file PATH]\n"
            "       [--tls-key-file PATH] [--tls-server-name NAME]\n");
    exit(2);
}

static uint32_t knob(const char *name, const char *v)
{
    char *end;
    errno = 0;
    unsigned long n = strtoul(v, &end, 10);
    if (errno || *end || end == v || n > UINT32_MAX || v[0] == '-') {
        fprintf(stderr, "ticketing-c-driver: bad %s: %s\n", name, v);
        exit(2);
    }
    return (uint32_t)n;
}

/* One command; returns false after "close". */
static bool run(struct tk_client *c, const char *line)
{
    static struct jobj o; /* big: not on the stack */
    const char *err = NULL, *p;
    uint64_t t0 = now_ms();
    p = parse_object(line, &o, &err);
    if (p == NULL) {
        driver_error("malformed command", err);
        return true;
    }
    skip_ws(&p);
    if (*p != '\0') {
        driver_error("malformed command", "bytes after the object");
        return true;
    }
    const char *op = get_str(&o, "op", &err);
    if (op == NULL) {
        driver_error("missing or bad member", "op");
        return true;
    }
    struct tk_client_result r;
    memset(&r, 0, sizeof r);
    bool result = true; /* a client call's reply, which names its reason */
    if (strcmp(op, "acquire") == 0) {
        uint64_t lease, wait;
        const char *key = get_str(&o, "key", &err);
        if (key == NULL || !get_num(&o, "lease_ms", UINT32_MAX, &lease, &err) ||
            !get_num(&o, "wait_ms", UINT32_MAX, &wait, &err)) {
            driver_error("missing or bad member", err);
            return true;
        }
        enum tk_client_outcome got = tk_client_acquire(c, key, (uint32_t)lease, (uint32_t)wait, &r);
        printf("{\"outcome\":\"%s\",\"token\":%" PRIu64, outcome_name(got),
               got == TK_CLIENT_ACQUIRED ? r.token : 0);
    } else if (strcmp(op, "release") == 0) {
        uint64_t token;
        const char *key = get_str(&o, "key", &err);
        if (key == NULL || !get_num(&o, "token", UINT64_MAX, &token, &err)) {
            driver_error("missing or bad member", err);
            return true;
        }
        enum tk_client_outcome got = tk_client_release(c, key, token, &r);
        printf("{\"outcome\":\"%s\",\"resent\":%s", outcome_name(got), r.resent ? "true" : "false");
    } else if (strcmp(op, "query") == 0) {
        const char *key = get_str(&o, "key", &err);
        if (key == NULL) {
            driver_error("missing or bad member", err);
            return true;
        }
        enum tk_client_outcome got = tk_client_query(c, key, &r);
        bool answered = got == TK_CLIENT_ANSWERED;
        printf("{\"outcome\":\"%s\",\"held\":%s,\"owner\":", outcome_name(got),
               answered && r.held ? "true" : "false");
        if (answered && r.held)
            put_str(r.owner);
        else
            printf("null");
        printf(",\"token\":%" PRIu64 ",\"waiters\":%u", answered ? r.token : 0,
               answered ? r.waiters : 0);
    } else if (strcmp(op, "ping") == 0) {
        printf("{\"outcome\":\"%s\"", outcome_name(tk_client_ping(c, &r)));
    } else if (strcmp(op, "ring") == 0) {
        static char body[TK_CLIENT_RING_TEXT_MAX + 1]; /* big: not on the stack */
        enum tk_client_outcome got = tk_client_ring(c, body, sizeof body, &r);
        bool answered = got == TK_CLIENT_ANSWERED;
        printf("{\"outcome\":\"%s\",\"version\":%" PRIu64 ",\"body\":", outcome_name(got),
               answered ? r.ring_version : 0);
        put_str(answered ? body : "");
    } else if (strcmp(op, "sleep") == 0) {
        uint64_t ms;
        if (!get_num(&o, "ms", 600000, &ms, &err)) {
            driver_error("missing or bad member", err);
            return true;
        }
        struct timespec ts = {.tv_sec = (time_t)(ms / 1000),
                              .tv_nsec = (long)(ms % 1000) * 1000000};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
        printf("{\"outcome\":\"OK\"");
        result = false;
    } else if (strcmp(op, "stats") == 0) {
        struct tk_client_stats st;
        tk_client_stats(c, &st);
        printf("{\"outcome\":\"OK\",\"compensations\":%" PRIu64 ",\"indeterminate\":%" PRIu64
               ",\"moved\":%" PRIu64 ",\"releases_queued\":%" PRIu64 ",\"ring_version\":%" PRIu64
               ",\"rerouted\":%" PRIu64,
               st.compensations, st.indeterminate, st.moved, st.releases_queued, st.ring_version,
               st.rerouted);
        result = false;
    } else if (strcmp(op, "slot") == 0) {
        const char *key = get_str(&o, "key", &err);
        if (key == NULL) {
            driver_error("missing or bad member", err);
            return true;
        }
        printf("{\"outcome\":\"OK\",\"slot\":%" PRIu32, tk_client_slot(key, strlen(key)));
        result = false;
    } else if (strcmp(op, "close") == 0) {
        tk_client_destroy(c);
        printf("{\"outcome\":\"OK\"");
        end_reply(t0);
        return false;
    } else {
        driver_error("unknown op", op);
        return true;
    }
    if (result) {
        printf(",\"reason\":");
        put_str(r.reason);
        if (r.outcome == TK_CLIENT_WRONG_GROUP)
            printf(",\"slot\":%" PRIu32 ",\"ring_version\":%" PRIu64, r.slot, r.ring_version);
    }
    end_reply(t0);
    return true;
}

int main(int argc, char **argv)
{
    struct tk_client_config cfg;
    tk_client_config_init(&cfg);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (i + 1 >= argc)
            usage();
        const char *v = argv[++i];
        if (strcmp(a, "--addrs") == 0)
            cfg.addrs = v;
        else if (strcmp(a, "--secret-file") == 0)
            cfg.secret_file = v;
        else if (strcmp(a, "--owner") == 0)
            cfg.owner = v;
        else if (strcmp(a, "--response-grace-ms") == 0)
            cfg.response_grace_ms = knob(a, v);
        else if (strcmp(a, "--connect-timeout-ms") == 0)
            cfg.connect_timeout_ms = knob(a, v);
        else if (strcmp(a, "--send-budget-min-ms") == 0)
            cfg.send_budget_min_ms = knob(a, v);
        else if (strcmp(a, "--request-timeout-ms") == 0)
            cfg.request_timeout_ms = knob(a, v);
        else if (strcmp(a, "--backoff-min-ms") == 0)
            cfg.backoff_min_ms = knob(a, v);
        else if (strcmp(a, "--backoff-max-ms") == 0)
            cfg.backoff_max_ms = knob(a, v);
        else if (strcmp(a, "--release-queue-max") == 0)
            cfg.release_queue_max = knob(a, v);
        else if (strcmp(a, "--tls-ca-file") == 0)
            cfg.tls_ca_file = v;
        else if (strcmp(a, "--tls-cert-file") == 0)
            cfg.tls_cert_file = v;
        else if (strcmp(a, "--tls-key-file") == 0)
            cfg.tls_key_file = v;
        else if (strcmp(a, "--tls-server-name") == 0)
            cfg.tls_server_name = v;
        else
            usage();
    }
    if (cfg.addrs == NULL || cfg.secret_file == NULL || cfg.owner == NULL)
        usage();
    struct tk_client *c = NULL;
    int rc = tk_client_create(&cfg, &c);
    if (rc != TK_CLIENT_ENONE) {
        fprintf(stderr, "ticketing-c-driver: %s\n", tk_client_strerror(rc));
        return 1;
    }
    static char line[LINE_MAX_BYTES + 2];
    while (fgets(line, sizeof line, stdin) != NULL) {
        size_t n = strlen(line);
        if (n > 0 && line[n - 1] == '\n') {
            line[--n] = '\0';
        } else if (n == sizeof line - 1) {
            int ch; /* too long: drop the rest of the line */
            while ((ch = getchar()) != EOF && ch != '\n') {
            }
            driver_error("malformed command", "line too long");
            continue;
        }
        if (!run(c, line))
            return 0;
    }
    /* stdin closed without "close": end the session all the same. */
    tk_client_destroy(c);
    return 0;
}
