/* ticketing-bench: a load generator for lock services (Ticketing, etcd v3,
 * Redis), one scenario per run.
 *
 * Method: --conns connections over --threads epoll threads, --depth slots
 * (pipelined lock clients) per connection. Closed loop by default; with
 * --rate, open loop at a fixed arrival rate with latency counted from each
 * arrival's intended time. After --warmup seconds, --duration seconds are
 * measured; then no new acquires start and the run drains. One JSON object
 * (one line) goes to stdout or --json-out, a summary to stderr.
 *
 * Exit status: 0 ok, 1 setup failure, 2 a safety or FIFO check failed,
 * 3 requests were rejected or answered wrongly, 4 fewer than --min-pairs.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "bench/bench.h"
#include "core/auth.h"
#include "core/tls.h"
#include "tk_version.h"

#define READY_TIMEOUT_S 60.0
#define MEM_TIMEOUT_S 600.0
#define MEM_STALL_NS (20ull * 1000000000ull)

struct result {
    struct bcount cnt;
    struct bhist hist, hist_rel;
    double window_s;
    double setup_s; /* from the first connect to the last connection ready */
    uint64_t max_gap_ms;
    double max_gap_at_s;
    uint64_t rss_before_kb, rss_after_kb;
    uint64_t mem_items;
    uint64_t server_waiters;
    uint64_t snapshot_bytes;
    uint64_t log_bytes;
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: ticketing-bench --driver ticketing|etcd|redis --addr 127.0.0.1:PORT[,...]\n"
            "                       --scenario uncontended|hotkey|ticketdrop|failover|memory "
            "[options]\n"
            "  --secret-file F     client secret (ticketing)\n"
            "  --tls-ca F          ticketing over TLS: the CA of the servers' certificates\n"
            "  --tls-cert F --tls-key F  ticketing over TLS: a client certificate and its key\n"
            "  --tls-server-name N the name the servers' certificates must hold (default:\n"
            "                      the address dialled, 127.x.x.x, checked as an IP SAN)\n"
            "  --conns N           connections (64)        --threads N   epoll threads (1)\n"
            "  --depth N           slots (pipelined lock clients) per connection (1)\n"
            "  --rate R            open loop: acquires/s in all (0 = closed loop)\n"
            "  --warmup S (1)  --duration S (5)  --drain S (wait + 2)\n"
            "  --lease-ms N (10000)  --wait-ms N (1000; hotkey 10000)  --hold-ms N (0)\n"
            "  --keys K            ticketdrop/failover key count (100 / 1024)\n"
            "  --zipf S            ticketdrop skew (0.99)\n"
            "  --mem-keys N        memory: hold N keys (wait 0, never released)\n"
            "  --mem-waiters N     memory: queue N acquires (one per slot) on held keys\n"
            "  --mem-waiter-keys K keys the waiters queue on (1000)\n"
            "  --prefix P          key prefix (default: unique per run)\n"
            "  --slots LO-HI       only keys of slots LO..HI (one group's share of a ring)\n"
            "  --rss-pid PID       memory: read this process's VmRSS before and after\n"
            "  --admin-port P      memory (ticketing): admin port of --rss-pid (waiters from\n"
            "                      /status, the Raft snapshot size from /metrics)\n"
            "  --label L           free text copied to the JSON (e.g. 'etcd-tmpfs')\n"
            "  --case C            free text copied to the JSON (e.g. 'hotkey-64')\n"
            "  --json-out FILE     append the JSON object to FILE (default stdout)\n"
            "  --min-pairs N       exit 4 unless at least N pairs (or memory items) completed\n"
            "  --fifo-probe        ticketing: a ping behind each acquire marks its arrival, and\n"
            "                      the FIFO bound is judged (exit 2 if a waiter was overtaken)\n"
            "  --progress          print grants per second while running\n");
}

static int parse_addrs(struct bench *b, const char *list)
{
    snprintf(b->addr_text, sizeof(b->addr_text), "%s", list);
    for (const char *p = list;; p++) {
        const char *comma = strchr(p, ',');
        size_t len = comma != NULL ? (size_t)(comma - p) : strlen(p);
        const char *why = "more than 5 addresses";
        if (b->naddrs >= BENCH_ADDRS_MAX ||
            !bench_loopback_addr(p, len, &b->addrs[b->naddrs], &why)) {
            fprintf(stderr, "ticketing-bench: --addr: '%.*s': %s\n", (int)TK_MIN(len, 64u), p, why);
            return -1;
        }
        b->naddrs++;
        if (comma == NULL)
            break;
        p = comma;
    }
    return 0;
}

static uint64_t read_rss_kb(int pid)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    uint64_t kb = 0;
    while (fgets(line, sizeof(line), f))
        if (strncmp(line, "VmRSS:", 6) == 0)
            kb = strtoull(line + 6, NULL, 10);
    fclose(f);
    return kb;
}

/* GET path from the admin port and read a number from it: "name":N in
 * JSON (/status) or "name N" on a line of Prometheus text (/metrics). */
static bool admin_u64(uint32_t port, const char *path, const char *name, uint64_t *out)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return false;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bool ok = false;
    static char resp[1 << 18];
    size_t len = 0;
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
        char req[160];
        int rl = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", path);
        if (rl > 0 && send(fd, req, (size_t)rl, MSG_NOSIGNAL) == rl) {
            for (;;) {
                struct pollfd p = {.fd = fd, .events = POLLIN};
                if (poll(&p, 1, 2000) <= 0 || len >= sizeof(resp) - 1)
                    break;
                ssize_t n = recv(fd, resp + len, sizeof(resp) - 1 - len, 0);
                if (n <= 0)
                    break;
                len += (size_t)n;
            }
            resp[len] = 0;
            char pat[96];
            snprintf(pat, sizeof(pat), "\"%s\":", name);
            const char *p = strstr(resp, pat);
            if (p == NULL) {
                snprintf(pat, sizeof(pat), "\n%s ", name);
                p = strstr(resp, pat);
            }
            if (p != NULL) {
                *out = strtoull(p + strlen(pat), NULL, 10);
                ok = true;
            }
        }
    }
    close(fd);
    return ok;
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static double secs(uint64_t ns)
{
    return (double)ns / 1e9;
}

static int build(struct bench *b)
{
    b->nslots = (uint64_t)b->nconns * b->depth;
    if (b->nslots > UINT32_MAX / 2)
        return -1;
    b->threads = calloc(b->nthreads, sizeof(*b->threads));
    if (b->threads == NULL)
        return -1;
    uint32_t slot_global = 0;
    for (uint32_t i = 0; i < b->nthreads; i++) {
        struct bthread *t = &b->threads[i];
        t->b = b;
        t->index = (int)i;
        t->epfd = -1;
        t->nconns = b->nconns / b->nthreads + (i < b->nconns % b->nthreads);
        t->nslots = t->nconns * b->depth;
        t->conns = calloc(t->nconns ? t->nconns : 1, sizeof(*t->conns));
        if (t->conns == NULL)
            return -1;
    }
    for (uint32_t g = 0; g < b->nconns; g++) {
        struct bthread *t = &b->threads[g % b->nthreads];
        struct bconn *c = &t->conns[g / b->nthreads];
        c->th = t;
        c->index = g / b->nthreads;
        c->global = g;
        c->fd = -1;
        c->addr = (int)(g % (uint32_t)b->naddrs);
        c->nslots = b->depth;
        c->slots = calloc(b->depth, sizeof(*c->slots));
        if (c->slots == NULL)
            return -1;
        for (uint32_t j = 0; j < b->depth; j++) {
            struct slot *s = &c->slots[j];
            s->conn = c;
            s->index = j;
            s->global = slot_global++;
            s->bkey = UINT32_MAX;
        }
    }
    for (uint32_t i = 0; i < b->nthreads; i++)
        if (bench_thread_init(&b->threads[i]) != 0)
            return -1;
    double total_s = b->warmup_s + b->duration_s + b->drain_s + 30.0;
    if (b->scenario == SC_MEMORY)
        total_s = MEM_TIMEOUT_S + 60.0;
    b->timeline_len = (uint64_t)(total_s * 1000.0);
    b->timeline = calloc(b->timeline_len, sizeof(*b->timeline));
    return b->timeline ? 0 : -1;
}

static uint64_t sum_active(struct bench *b)
{
    uint64_t n = 0;
    for (uint32_t i = 0; i < b->nthreads; i++)
        n += atomic_load(&b->threads[i].active);
    return n;
}

/* Waits out the scenario; returns once the measurement is over. */
static void run_window(struct bench *b, struct result *res, bool progress)
{
    uint64_t last_g = 0, next_print = b->t_start + 1000000000ull;
    uint64_t mem_last = 0, mem_last_change = b->t_start;
    for (;;) {
        uint64_t now = bench_now();
        if (b->scenario == SC_MEMORY) {
            uint64_t got = atomic_load(&b->grants_total) + atomic_load(&b->busy_total);
            if (got != mem_last) {
                mem_last = got;
                mem_last_change = now;
            } else if (b->mem_waiters == 0 && now - mem_last_change > MEM_STALL_NS) {
                fprintf(stderr, "ticketing-bench: no progress for %.0f s, stopping at %llu\n",
                        secs(MEM_STALL_NS), (unsigned long long)got);
                break;
            }
            if (b->mem_waiters > 0) {
                uint64_t w = 0;
                if (b->admin_port && admin_u64(b->admin_port, "/status", "waiters", &w))
                    res->server_waiters = w;
                if (res->server_waiters >= b->mem_waiters)
                    break;
                sleep_ms(200);
            } else if (got >= b->mem_keys) {
                break;
            }
            if (now - b->t_start > (uint64_t)(MEM_TIMEOUT_S * 1e9)) {
                fprintf(stderr, "ticketing-bench: memory phase timed out\n");
                break;
            }
        } else if (now >= b->t_end) {
            break;
        }
        if (progress && now >= next_print) {
            uint64_t g = atomic_load(&b->grants_total);
            fprintf(stderr, "[%5.1fs] %llu grants/s, %llu connections ready\n",
                    secs(now - b->t_start), (unsigned long long)(g - last_g),
                    (unsigned long long)atomic_load(&b->ready_conns));
            last_g = g;
            next_print += 1000000000ull;
        }
        sleep_ms(10);
    }
}

static void compute_gap(struct bench *b, struct result *res)
{
    uint64_t from = (b->t_measure - b->t_start) / 1000000ull;
    uint64_t to = (TK_MIN(b->t_end, b->t_stop) - b->t_start) / 1000000ull;
    if (to > b->timeline_len)
        to = b->timeline_len;
    uint64_t run = 0, best = 0, best_end = from;
    for (uint64_t i = from; i < to; i++) {
        if (atomic_load_explicit(&b->timeline[i], memory_order_relaxed) == 0) {
            run++;
            if (run > best) {
                best = run;
                best_end = i;
            }
        } else {
            run = 0;
        }
    }
    res->max_gap_ms = best;
    res->max_gap_at_s = (double)(best_end + 1 - best - from) / 1000.0;
}

static void add_counts(struct bcount *a, const struct bcount *c)
{
    a->acquires += c->acquires;
    a->grants += c->grants;
    a->timeouts += c->timeouts;
    a->busy += c->busy;
    a->released += c->released;
    a->notheld += c->notheld;
    a->errors += c->errors;
    a->retries += c->retries;
    a->indeterminate += c->indeterminate;
    a->unavailable += c->unavailable;
    a->reconnects += c->reconnects;
    a->redirects += c->redirects;
    a->dropped += c->dropped;
    a->conn_errors += c->conn_errors;
    a->double_holder += c->double_holder;
    a->token_order += c->token_order;
    a->fifo_bypass += c->fifo_bypass;
    a->bypass_max = TK_MAX(a->bypass_max, c->bypass_max);
    a->bypass_sum += c->bypass_sum;
    a->bypass_n += c->bypass_n;
    a->mem_acquired += c->mem_acquired;
}

static double us(uint64_t ns)
{
    return (double)ns / 1000.0;
}

static void print_json(FILE *f, struct bench *b, struct result *r, bool checks_ok)
{
    const struct bcount *c = &r->cnt;
    double w = r->window_s > 0 ? r->window_s : 1;
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    char when[32];
    strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
    fprintf(
        f,
        "{\"system\":\"%s\",\"label\":\"%s\",\"case\":\"%s\",\"scenario\":\"%s\",\"time\":\"%s\","
        "\"conns\":%u,\"depth\":%u,\"threads\":%u,\"clients\":%llu,\"mode\":\"%s\","
        "\"rate_target\":%.1f,\"warmup_s\":%.1f,\"duration_s\":%.3f,"
        "\"lease_ms\":%u,\"wait_ms\":%u,\"hold_ms\":%u,\"keys\":%llu,\"zipf\":%.2f,\"tls\":%s,",
        b->drv->name, b->label, b->case_name, b->scenario_name, when, b->nconns, b->depth,
        b->nthreads, (unsigned long long)b->nslots, b->rate > 0 ? "open" : "closed", b->rate,
        b->warmup_s, r->window_s, b->lease_ms, b->wait_ms, b->hold_ms,
        (unsigned long long)(b->scenario == SC_HOTKEY ? 1 : b->nkeys), b->zipf_s,
        b->tls_ctx ? "true" : "false");
    fprintf(f,
            "\"acquires\":%llu,\"grants\":%llu,\"pairs\":%llu,\"timeouts\":%llu,\"busy\":%llu,"
            "\"notheld\":%llu,\"errors\":%llu,\"retries\":%llu,\"indeterminate\":%llu,"
            "\"unavailable\":%llu,\"reconnects\":%llu,\"redirects\":%llu,\"dropped\":%llu,"
            "\"grants_per_s\":%.1f,\"pairs_per_s\":%.1f,\"timeouts_per_s\":%.1f,"
            "\"offered_per_s\":%.1f,",
            (unsigned long long)c->acquires, (unsigned long long)c->grants,
            (unsigned long long)c->released, (unsigned long long)c->timeouts,
            (unsigned long long)c->busy, (unsigned long long)c->notheld,
            (unsigned long long)c->errors, (unsigned long long)c->retries,
            (unsigned long long)c->indeterminate, (unsigned long long)c->unavailable,
            (unsigned long long)c->reconnects, (unsigned long long)c->redirects,
            (unsigned long long)c->dropped, (double)c->grants / w, (double)c->released / w,
            (double)c->timeouts / w, (double)c->acquires / w);
    const struct bhist *h = &r->hist;
    fprintf(f,
            "\"latency_us\":{\"count\":%llu,\"mean\":%.1f,\"p50\":%.1f,\"p90\":%.1f,\"p99\":%.1f,"
            "\"p999\":%.1f,\"max\":%.1f},",
            (unsigned long long)h->count, h->count ? us(h->sum / h->count) : 0.0,
            us(bhist_percentile(h, 50)), us(bhist_percentile(h, 90)), us(bhist_percentile(h, 99)),
            us(bhist_percentile(h, 99.9)), us(h->max));
    h = &r->hist_rel;
    fprintf(f, "\"release_latency_us\":{\"count\":%llu,\"p50\":%.1f,\"p99\":%.1f,\"max\":%.1f},",
            (unsigned long long)h->count, us(bhist_percentile(h, 50)), us(bhist_percentile(h, 99)),
            us(h->max));
    fprintf(f,
            "\"checks\":{\"ok\":%s,\"double_holder\":%llu,\"token_order\":%llu,"
            "\"fifo_checked\":%s,\"fifo_probe\":%s,\"fifo_bound\":%u,\"fifo_bypass\":%llu,\"bypass_"
            "max\":%llu,"
            "\"bypass_mean\":%.2f},",
            checks_ok ? "true" : "false", (unsigned long long)c->double_holder,
            (unsigned long long)c->token_order, b->fifo_check ? "true" : "false",
            b->fifo_probe ? "true" : "false", b->fifo_bound, (unsigned long long)c->fifo_bypass,
            (unsigned long long)c->bypass_max,
            c->bypass_n ? (double)c->bypass_sum / (double)c->bypass_n : 0.0);
    fprintf(f, "\"setup_s\":%.3f,\"max_gap_ms\":%llu,\"max_gap_at_s\":%.3f", r->setup_s,
            (unsigned long long)r->max_gap_ms, r->max_gap_at_s);
    if (b->scenario == SC_MEMORY) {
        double items = r->mem_items ? (double)r->mem_items : 1.0;
        double per = r->rss_after_kb > r->rss_before_kb
                         ? (double)(r->rss_after_kb - r->rss_before_kb) * 1024.0 / items
                         : 0.0;
        char key[BENCH_KEY_MAX];
        int klen = snprintf(key, sizeof(key), "%sm%llu", b->prefix,
                            (unsigned long long)(r->mem_items / 2));
        char owner[BENCH_OWNER_MAX];
        int olen = snprintf(owner, sizeof(owner), "o%llu.%llu", (unsigned long long)(b->nslots / 2),
                            (unsigned long long)(r->mem_items / TK_MAX(b->nslots, 1u)));
        fprintf(f,
                ",\"memory\":{\"what\":\"%s\",\"items\":%llu,\"rss_pid\":%d,"
                "\"rss_before_kb\":%llu,\"rss_after_kb\":%llu,\"bytes_per_item\":%.1f,"
                "\"key_bytes\":%d,\"owner_bytes\":%d,\"server_waiters\":%llu,"
                "\"raft_snapshot_bytes\":%llu,\"raft_log_bytes\":%llu}",
                b->mem_waiters ? "waiters" : "held_keys", (unsigned long long)r->mem_items,
                b->rss_pid, (unsigned long long)r->rss_before_kb,
                (unsigned long long)r->rss_after_kb, per, klen, olen,
                (unsigned long long)r->server_waiters, (unsigned long long)r->snapshot_bytes,
                (unsigned long long)r->log_bytes);
    }
    if (b->scenario == SC_FAILOVER) {
        fprintf(f, ",\"timeline_100ms\":[");
        uint64_t from = (b->t_measure - b->t_start) / 1000000ull;
        uint64_t to = TK_MIN((b->t_end - b->t_start) / 1000000ull, b->timeline_len);
        bool first = true;
        for (uint64_t i = from; i + 100 <= to; i += 100) {
            uint64_t sum = 0;
            for (uint64_t j = i; j < i + 100; j++)
                sum += atomic_load_explicit(&b->timeline[j], memory_order_relaxed);
            fprintf(f, "%s%llu", first ? "" : ",", (unsigned long long)sum);
            first = false;
        }
        fprintf(f, "]");
    }
    fprintf(f, "}\n");
}

static void print_summary(struct bench *b, struct result *r, bool checks_ok)
{
    const struct bcount *c = &r->cnt;
    const struct bhist *h = &r->hist;
    double w = r->window_s > 0 ? r->window_s : 1;
    fprintf(stderr,
            "%-9s %-11s %-12s conns=%u depth=%u %s%s: %.0f grants/s, %.0f pairs/s, "
            "%.1f timeouts/s | acquire p50 %.0fus p99 %.0fus p99.9 %.0fus max %.0fus | "
            "gap %llums, setup %.1fs | errors %llu, indeterminate %llu | checks %s",
            b->drv->name, b->label, b->scenario_name, b->nconns, b->depth,
            b->rate > 0 ? "open " : "closed", b->tls_ctx ? " tls" : "", (double)c->grants / w,
            (double)c->released / w, (double)c->timeouts / w, us(bhist_percentile(h, 50)),
            us(bhist_percentile(h, 99)), us(bhist_percentile(h, 99.9)), us(h->max),
            (unsigned long long)r->max_gap_ms, r->setup_s, (unsigned long long)c->errors,
            (unsigned long long)c->indeterminate, checks_ok ? "ok" : "FAILED");
    if (c->bypass_n)
        fprintf(stderr, " (bypass max %llu, bound %u)", (unsigned long long)c->bypass_max,
                b->fifo_bound);
    if (b->scenario == SC_MEMORY && r->mem_items)
        fprintf(stderr, " | %llu %s, RSS %llu -> %llu kB, %.1f B each",
                (unsigned long long)r->mem_items, b->mem_waiters ? "waiters" : "keys",
                (unsigned long long)r->rss_before_kb, (unsigned long long)r->rss_after_kb,
                r->rss_after_kb > r->rss_before_kb
                    ? (double)(r->rss_after_kb - r->rss_before_kb) * 1024.0 / (double)r->mem_items
                    : 0.0);
    fprintf(stderr, "\n");
}

enum {
    OPT_DRIVER = 256,
    OPT_ADDR,
    OPT_SECRET,
    OPT_SCENARIO,
    OPT_CONNS,
    OPT_THREADS,
    OPT_DEPTH,
    OPT_RATE,
    OPT_WARMUP,
    OPT_DURATION,
    OPT_DRAIN,
    OPT_LEASE,
    OPT_WAIT,
    OPT_HOLD,
    OPT_KEYS,
    OPT_ZIPF,
    OPT_MEMKEYS,
    OPT_MEMWAITERS,
    OPT_MEMWKEYS,
    OPT_PREFIX,
    OPT_SLOTS,
    OPT_RSSPID,
    OPT_ADMIN,
    OPT_LABEL,
    OPT_JSON,
    OPT_MINPAIRS,
    OPT_PROGRESS,
    OPT_HELP,
    OPT_VERSION,
    OPT_CASE,
    OPT_PROBE,
    OPT_TLS_CA,
    OPT_TLS_CERT,
    OPT_TLS_KEY,
    OPT_TLS_NAME,
};

static const struct option long_opts[] = {
    {"driver", required_argument, NULL, OPT_DRIVER},
    {"addr", required_argument, NULL, OPT_ADDR},
    {"secret-file", required_argument, NULL, OPT_SECRET},
    {"scenario", required_argument, NULL, OPT_SCENARIO},
    {"conns", required_argument, NULL, OPT_CONNS},
    {"threads", required_argument, NULL, OPT_THREADS},
    {"depth", required_argument, NULL, OPT_DEPTH},
    {"rate", required_argument, NULL, OPT_RATE},
    {"warmup", required_argument, NULL, OPT_WARMUP},
    {"duration", required_argument, NULL, OPT_DURATION},
    {"drain", required_argument, NULL, OPT_DRAIN},
    {"lease-ms", required_argument, NULL, OPT_LEASE},
    {"wait-ms", required_argument, NULL, OPT_WAIT},
    {"hold-ms", required_argument, NULL, OPT_HOLD},
    {"keys", required_argument, NULL, OPT_KEYS},
    {"zipf", required_argument, NULL, OPT_ZIPF},
    {"mem-keys", required_argument, NULL, OPT_MEMKEYS},
    {"mem-waiters", required_argument, NULL, OPT_MEMWAITERS},
    {"mem-waiter-keys", required_argument, NULL, OPT_MEMWKEYS},
    {"prefix", required_argument, NULL, OPT_PREFIX},
    {"slots", required_argument, NULL, OPT_SLOTS},
    {"rss-pid", required_argument, NULL, OPT_RSSPID},
    {"admin-port", required_argument, NULL, OPT_ADMIN},
    {"label", required_argument, NULL, OPT_LABEL},
    {"case", required_argument, NULL, OPT_CASE},
    {"json-out", required_argument, NULL, OPT_JSON},
    {"min-pairs", required_argument, NULL, OPT_MINPAIRS},
    {"progress", no_argument, NULL, OPT_PROGRESS},
    {"fifo-probe", no_argument, NULL, OPT_PROBE},
    {"tls-ca", required_argument, NULL, OPT_TLS_CA},
    {"tls-cert", required_argument, NULL, OPT_TLS_CERT},
    {"tls-key", required_argument, NULL, OPT_TLS_KEY},
    {"tls-server-name", required_argument, NULL, OPT_TLS_NAME},
    {"help", no_argument, NULL, OPT_HELP},
    {"version", no_argument, NULL, OPT_VERSION},
    {NULL, 0, NULL, 0},
};

static bool parse_num(const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi))
        return false;
    *out = v;
    return true;
}

/* What the command line asks for beyond struct bench. */
struct cli {
    const char *secret_file, *json_out, *scenario, *driver, *addrs;
    const char *tls_ca, *tls_cert, *tls_key, *tls_name;
    uint64_t min_pairs;
    bool progress;
    int64_t wait_ms, keys; /* -1: the scenario's default */
};

static void defaults(struct bench *b, struct cli *o)
{
    b->nthreads = 1;
    b->slot_hi = TK_SLOTS - 1;
    b->nconns = 64;
    b->depth = 1;
    b->warmup_s = 1;
    b->duration_s = 5;
    b->drain_s = -1;
    b->lease_ms = 10000;
    b->zipf_s = 0.99;
    b->mem_waiter_keys = 1000;
    b->label = "";
    b->case_name = "";
    memset(o, 0, sizeof(*o));
    o->wait_ms = -1;
    o->keys = -1;
}

/* Returns 0 to go on, 1 on a bad command line, -1 after --help. */
static int parse_args(int argc, char **argv, struct bench *b, struct cli *o)
{
    int opt;
    while ((opt = getopt_long(argc, argv, "h", long_opts, NULL)) != -1) {
        double v = 0;
        bool ok = true;
        switch (opt) {
            case OPT_DRIVER:
                o->driver = optarg;
                break;
            case OPT_ADDR:
                o->addrs = optarg;
                break;
            case OPT_SECRET:
                o->secret_file = optarg;
                break;
            case OPT_SCENARIO:
                o->scenario = optarg;
                break;
            case OPT_CONNS:
                ok = parse_num(optarg, 1, 100000, &v);
                b->nconns = (uint32_t)v;
                break;
            case OPT_THREADS:
                ok = parse_num(optarg, 1, 64, &v);
                b->nthreads = (uint32_t)v;
                break;
            case OPT_DEPTH:
                ok = parse_num(optarg, 1, BENCH_DEPTH_MAX, &v);
                b->depth = (uint32_t)v;
                break;
            case OPT_RATE:
                ok = parse_num(optarg, 0, 1e9, &b->rate);
                break;
            case OPT_WARMUP:
                ok = parse_num(optarg, 0, 3600, &b->warmup_s);
                break;
            case OPT_DURATION:
                ok = parse_num(optarg, 0.1, 3600, &b->duration_s);
                break;
            case OPT_DRAIN:
                ok = parse_num(optarg, 0, 3600, &b->drain_s);
                break;
            case OPT_LEASE:
                ok = parse_num(optarg, 1, 1e7, &v);
                b->lease_ms = (uint32_t)v;
                break;
            case OPT_WAIT:
                ok = parse_num(optarg, 0, 1e7, &v);
                o->wait_ms = (int64_t)v;
                break;
            case OPT_HOLD:
                ok = parse_num(optarg, 0, 1e7, &v);
                b->hold_ms = (uint32_t)v;
                break;
            case OPT_KEYS:
                ok = parse_num(optarg, 1, 1e8, &v);
                o->keys = (int64_t)v;
                break;
            case OPT_ZIPF:
                ok = parse_num(optarg, 0, 10, &b->zipf_s);
                break;
            case OPT_MEMKEYS:
                ok = parse_num(optarg, 1, 1e9, &v);
                b->mem_keys = (uint64_t)v;
                break;
            case OPT_MEMWAITERS:
                ok = parse_num(optarg, 1, 1e9, &v);
                b->mem_waiters = (uint64_t)v;
                break;
            case OPT_MEMWKEYS:
                ok = parse_num(optarg, 1, 1e8, &v);
                b->mem_waiter_keys = (uint32_t)v;
                break;
            case OPT_PREFIX:
                snprintf(b->prefix, sizeof(b->prefix), "%s", optarg);
                break;
            case OPT_SLOTS: {
                int used = 0;
                ok = sscanf(optarg, "%u-%u%n", &b->slot_lo, &b->slot_hi, &used) == 2 &&
                     optarg[used] == '\0' && b->slot_lo <= b->slot_hi && b->slot_hi < TK_SLOTS;
                break;
            }
            case OPT_RSSPID:
                ok = parse_num(optarg, 1, 1e9, &v);
                b->rss_pid = (int)v;
                break;
            case OPT_ADMIN:
                ok = parse_num(optarg, 1, 65535, &v);
                b->admin_port = (uint32_t)v;
                break;
            case OPT_LABEL:
                b->label = optarg;
                break;
            case OPT_CASE:
                b->case_name = optarg;
                break;
            case OPT_JSON:
                o->json_out = optarg;
                break;
            case OPT_MINPAIRS:
                ok = parse_num(optarg, 0, 1e12, &v);
                o->min_pairs = (uint64_t)v;
                break;
            case OPT_PROGRESS:
                o->progress = true;
                break;
            case OPT_PROBE:
                b->fifo_probe = true;
                break;
            case OPT_TLS_CA:
                o->tls_ca = optarg;
                break;
            case OPT_TLS_CERT:
                o->tls_cert = optarg;
                break;
            case OPT_TLS_KEY:
                o->tls_key = optarg;
                break;
            case OPT_TLS_NAME:
                o->tls_name = optarg;
                ok = strlen(optarg) < sizeof(b->tls_server_name);
                break;
            case OPT_HELP:
            case 'h':
                usage(stdout);
                return -1;
            case OPT_VERSION:
                printf("ticketing-bench %s (commit %s)\n", TK_VERSION, TK_COMMIT);
                return -1;
            default:
                usage(stderr);
                return 1;
        }
        if (!ok) {
            fprintf(stderr, "ticketing-bench: bad value '%s'\n", optarg);
            return 1;
        }
    }
    if (!o->driver || !o->addrs || !o->scenario) {
        usage(stderr);
        return 1;
    }
    return 0;
}

/* The TLS context for the ticketing driver, from --tls-*; 0, or 1 with one
 * line on stderr. */
static int configure_tls(struct bench *b, const struct cli *o)
{
    if (!o->tls_ca && !o->tls_cert && !o->tls_key && !o->tls_name)
        return 0;
    const char *why = NULL;
    if (b->drv != &bench_drv_ticketing)
        why = "the --tls-* options are for --driver ticketing";
    else if (!o->tls_ca)
        why = "TLS needs --tls-ca (the CA that signed the servers' certificates)";
    else if (!o->tls_cert != !o->tls_key)
        why = "--tls-cert and --tls-key go together";
    if (why) {
        fprintf(stderr, "ticketing-bench: %s\n", why);
        return 1;
    }
    char err[TK_TLS_ERR_MAX];
    if (o->tls_cert) {
        /* A server context proves cert and key belong together (one
         * handshake in memory), which a client context does not. */
        struct tk_tls_opts pair = {.server = true, .cert = o->tls_cert, .key = o->tls_key};
        struct tk_tls_ctx *pc = NULL;
        if (tk_tls_ctx_new(&pair, &pc, err, sizeof(err)) != TK_OK) {
            fprintf(stderr, "ticketing-bench: TLS: %s\n", err);
            return 1;
        }
        tk_tls_ctx_unref(pc);
    }
    struct tk_tls_opts t = {
        .server = false, .cert = o->tls_cert, .key = o->tls_key, .ca = o->tls_ca};
    if (tk_tls_ctx_new(&t, &b->tls_ctx, err, sizeof(err)) != TK_OK) {
        fprintf(stderr, "ticketing-bench: TLS: %s\n", err);
        return 1;
    }
    if (o->tls_name)
        snprintf(b->tls_server_name, sizeof(b->tls_server_name), "%s", o->tls_name);
    return 0;
}

/* Driver, scenario, addresses and the defaults that depend on them. */
static int configure(struct bench *b, const struct cli *o)
{
    static const struct bench_driver *const drivers[] = {&bench_drv_ticketing, &bench_drv_etcd,
                                                         &bench_drv_redis};
    static const char *const names[] = {"uncontended", "hotkey", "ticketdrop", "failover",
                                        "memory"};
    for (size_t i = 0; i < TK_ARRAY_LEN(drivers); i++)
        if (!strcmp(o->driver, drivers[i]->name))
            b->drv = drivers[i];
    for (size_t i = 0; i < TK_ARRAY_LEN(names); i++)
        if (!strcmp(o->scenario, names[i])) {
            b->scenario = (enum bench_scenario)i;
            b->scenario_name = names[i];
        }
    if (b->drv == NULL || b->scenario_name == NULL || parse_addrs(b, o->addrs) != 0) {
        fprintf(stderr, "ticketing-bench: bad --driver, --scenario or --addr\n");
        return 1;
    }
    if (configure_tls(b, o) != 0)
        return 1;
    uint32_t wait_default = b->scenario == SC_HOTKEY                         ? 10000u
                            : b->scenario == SC_MEMORY && b->mem_waiters > 0 ? 250000u
                            : b->scenario == SC_MEMORY                       ? 0u
                                                                             : 1000u;
    b->wait_ms = o->wait_ms >= 0 ? (uint32_t)o->wait_ms : wait_default;
    b->nkeys = o->keys > 0 ? (uint64_t)o->keys : (b->scenario == SC_FAILOVER ? 1024u : 100u);
    if (b->drain_s < 0)
        b->drain_s = b->wait_ms / 1000.0 + b->hold_ms / 1000.0 + 2.0;
    if (b->scenario == SC_MEMORY) {
        if (!b->mem_keys && !b->mem_waiters) {
            fprintf(stderr, "ticketing-bench: memory needs --mem-keys or --mem-waiters\n");
            return 1;
        }
        if (b->mem_waiters && b->mem_waiters > (uint64_t)b->nconns * b->depth) {
            fprintf(stderr, "ticketing-bench: --mem-waiters needs conns x depth >= waiters\n");
            return 1;
        }
        b->warmup_s = 0;
        b->rate = 0;
    }
    if (!b->prefix[0])
        snprintf(b->prefix, sizeof(b->prefix), "b%x%llx-", (unsigned)getpid(),
                 (unsigned long long)(bench_now() / 1000000ull % 0xffffff));
    if (o->secret_file) {
        int rc = tk_auth_load_secret(o->secret_file, b->secret, sizeof(b->secret), &b->secret_len);
        if (rc != TK_OK) {
            fprintf(stderr, "ticketing-bench: cannot load %s: %s\n", o->secret_file,
                    tk_strerror(rc));
            return 1;
        }
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < b->nconns + 64u) {
        rl.rlim_cur = TK_MIN(rl.rlim_max, (rlim_t)b->nconns + 64u);
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    b->nslots = (uint64_t)b->nconns * b->depth;
    if (b->drv->init(b) != 0 || bench_scenario_init(b) != 0 || build(b) != 0) {
        fprintf(stderr, "ticketing-bench: setup failed\n");
        return 1;
    }
    return 0;
}

/* The memory scenario's readings after the last grant. */
static void memory_after(struct bench *b, struct result *res)
{
    sleep_ms(1000);
    if (b->rss_pid)
        res->rss_after_kb = read_rss_kb(b->rss_pid);
    /* Ticketing keeps its Raft log (until a snapshot truncates it) and its
     * latest snapshot in memory: part of what a held key costs, reported so
     * that the lock table can be told apart. */
    if (b->admin_port) {
        admin_u64(b->admin_port, "/metrics", "ticketing_raft_snapshot_bytes", &res->snapshot_bytes);
        admin_u64(b->admin_port, "/metrics", "ticketing_raft_log_bytes", &res->log_bytes);
    }
}

/* Starts the threads, waits for every connection, measures, drains and
 * joins. Returns 0, or 1 if the connections did not come up. */
static int measure(struct bench *b, struct result *res, bool progress)
{
    pthread_t *tids = calloc(b->nthreads, sizeof(*tids));
    TK_ASSERT(tids != NULL);
    for (uint32_t i = 0; i < b->nthreads; i++)
        TK_ASSERT(pthread_create(&tids[i], NULL, bench_thread_main, &b->threads[i]) == 0);
    uint64_t t0 = bench_now();
    while (atomic_load(&b->ready_conns) < b->nconns &&
           !atomic_load_explicit(&b->tls_failed, memory_order_acquire) &&
           bench_now() - t0 < (uint64_t)(READY_TIMEOUT_S * 1e9))
        sleep_ms(5);
    res->setup_s = secs(bench_now() - t0);
    int status = 0;
    if (atomic_load_explicit(&b->tls_failed, memory_order_acquire)) {
        /* Certificates or a plaintext server: no retry will fix it. */
        fprintf(stderr, "ticketing-bench: TLS: %s\n", b->tls_error);
        status = 1;
    } else if (atomic_load(&b->ready_conns) < b->nconns) {
        fprintf(stderr, "ticketing-bench: only %llu of %u connections came up within %.0f s\n",
                (unsigned long long)atomic_load(&b->ready_conns), b->nconns, READY_TIMEOUT_S);
        status = 1;
    } else {
        if (b->scenario == SC_MEMORY && b->rss_pid) {
            sleep_ms(500);
            res->rss_before_kb = read_rss_kb(b->rss_pid);
        }
        b->t_start = bench_now();
        b->t_measure = b->t_start + (uint64_t)(b->warmup_s * 1e9);
        b->t_end =
            b->scenario == SC_MEMORY ? UINT64_MAX : b->t_measure + (uint64_t)(b->duration_s * 1e9);
        atomic_store_explicit(&b->go, true, memory_order_release);
        run_window(b, res, progress);
        if (b->scenario == SC_MEMORY)
            memory_after(b, res);
    }
    b->t_stop = bench_now();
    atomic_store(&b->stop, true);
    if (status == 0 && b->scenario != SC_MEMORY) {
        uint64_t until = b->t_stop + (uint64_t)(b->drain_s * 1e9);
        sleep_ms(50);
        while (sum_active(b) > 0 && bench_now() < until)
            sleep_ms(10);
        if (sum_active(b) > 0)
            fprintf(stderr, "ticketing-bench: %llu slots still busy after the drain\n",
                    (unsigned long long)sum_active(b));
    }
    atomic_store(&b->hard_stop, true);
    for (uint32_t i = 0; i < b->nthreads; i++)
        pthread_join(tids[i], NULL);
    free(tids);
    return status;
}

/* Merges the threads' results, writes the JSON and the summary, and turns
 * the outcome into the exit status. */
static int report(struct bench *b, struct result *res, const struct cli *o)
{
    for (uint32_t i = 0; i < b->nthreads; i++) {
        add_counts(&res->cnt, &b->threads[i].cnt);
        bhist_merge(&res->hist, &b->threads[i].hist);
        bhist_merge(&res->hist_rel, &b->threads[i].hist_rel);
    }
    res->window_s = secs(TK_MIN(b->t_end, b->t_stop) - b->t_measure);
    compute_gap(b, res);
    if (b->scenario == SC_MEMORY)
        res->mem_items = b->mem_waiters ? res->server_waiters : res->cnt.mem_acquired;
    bool checks_ok = res->cnt.double_holder == 0 && res->cnt.token_order == 0 &&
                     (!b->fifo_check || res->cnt.fifo_bypass == 0);
    FILE *f = stdout;
    if (o->json_out && (f = fopen(o->json_out, "a")) == NULL) {
        fprintf(stderr, "ticketing-bench: cannot open %s\n", o->json_out);
        f = stdout;
    }
    print_json(f, b, res, checks_ok);
    if (f != stdout)
        fclose(f);
    print_summary(b, res, checks_ok);
    if (!checks_ok)
        return 2;
    if (res->cnt.errors > 0)
        return 3;
    uint64_t done = b->scenario == SC_MEMORY ? res->mem_items : res->cnt.released;
    if (done < o->min_pairs) {
        fprintf(stderr, "ticketing-bench: only %llu completed, wanted %llu\n",
                (unsigned long long)done, (unsigned long long)o->min_pairs);
        return 4;
    }
    return 0;
}

int main(int argc, char **argv)
{
    static struct bench bench;
    static struct result res;
    struct bench *b = &bench;
    struct cli o;
    defaults(b, &o);
    int rc = parse_args(argc, argv, b, &o);
    if (rc != 0)
        return rc < 0 ? 0 : 1;
    if (configure(b, &o) != 0)
        return 1;
    bhist_init(&res.hist);
    bhist_init(&res.hist_rel);
    if (measure(b, &res, o.progress) != 0)
        return 1;
    rc = report(b, &res, &o);
    for (uint32_t i = 0; i < b->nthreads; i++)
        bench_thread_free(&b->threads[i]);
    tk_tls_ctx_unref(b->tls_ctx);
    return rc;
}
