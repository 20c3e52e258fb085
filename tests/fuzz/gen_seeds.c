/* Writes the seed corpora of the fuzz targets: valid inputs built the way
 * the unit tests build them (tests/unit/test_proto.c, test_raft_wire.c,
 * test_lock_random.c, test_slots.c), a few small files per target.
 *
 *     make -f tests/fuzz/Makefile BUILD=/tmp/fz seeds
 *     /tmp/fz/gen_seeds tests/fuzz/corpus
 *
 * The output is deterministic; the files in tests/fuzz/corpus/ came from it.
 * run.sh never writes there: it fuzzes a copy.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/cmd.h"
#include "core/proto.h"
#include "core/slots.h"
#include "core/snap.h"
#include "raft/wire.h"
#include "tests/support/wire_sample.h"

static const char *root;

static void put(const char *target, const char *name, const void *data, size_t len)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", root, target);
    if (mkdir(path, 0755) != 0 && errno != EEXIST) {
        perror(path);
        exit(1);
    }
    snprintf(path, sizeof(path), "%s/%s/%s", root, target, name);
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(data, 1, len, f) != len || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
}

static void put_str(const char *target, const char *name, const char *s)
{
    put(target, name, s, strlen(s));
}

/* ---- text protocols ---- */

#define HEX_A "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define HEX_B "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"

/* An addr seed: the mode byte, then text. */
static void put_addr(const char *name, uint8_t mode, const char *text)
{
    uint8_t buf[128];
    size_t n = strlen(text);
    TK_ASSERT(n < sizeof(buf));
    buf[0] = mode;
    memcpy(buf + 1, text, n);
    put("addr", name, buf, n + 1);
}

static void text_seeds(void)
{
    put_str("request", "acquire", "A 42 orders/7 worker-1 30000 250000\n");
    put_str("request", "session",
            "A 1 show-42 alice 30000 5000\nQ 2 show-42\nR 3 show-42 alice 1796284995487521\nP 4\n");
    put_str("request", "rejects", "A 1 k o 999 0\nA 3  k o 1000\nX 5 k\nR 6 k o 0\r\nQ 7 k\x7f\n");
    put_str("request", "fatal", " P\n\nA\tx 1\n");

    put_str("handshake", "client", "TICKETING/1 " HEX_A "\nAUTH " HEX_A " " HEX_B "\n");
    put_str("handshake", "peer", "TICKETING-PEER/2 " HEX_B "\r\n");
    put_str("handshake", "peer_auth", "AUTH " HEX_A " " HEX_B " node-1.peers:7401\n");
    put_str("handshake", "ok", "OK " HEX_B " 00000000000000ab 0000000000000001000000000000000f\n");
    put_str("handshake", "refused", "E - auth\n");

    put_str("response", "answers",
            "G 1 1796284995487521\nT 2\nB 3\nR 4\nN 5\nP 0\nQ 6 alice 17 3\nQ 7 - 0 0\n");
    put_str("response", "errors", "E 12 command\nE - toolong\nE 9 shiny\r\n");
    put_str("response", "moved", "M 10.0.0.2:7400\nM [::1]:7410\nM -\n");
    put_str("response", "addr", "node-3.ticketing.svc:7400");

    /* addr: a mode byte (3: one address, 4: a host alone, 14: a list of
     * at most 5; fuzz_addr.c), then the text. */
    put_addr("v4", 3, "10.0.0.7:7400");
    put_addr("v6", 3, "[::ffff:10.0.0.1]:65535");
    put_addr("name", 3, "node-0.ticketing.svc.cluster.local:7401");
    put_addr("bind", 4, "::");
    put_addr("peers", 14, "a.example:7401,[fe80::1:2]:7401,10.1.2.3:7401");

    put_str("admin_http", "get", "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
    put_str("admin_http", "head", "HEAD /metrics?x=1 HTTP/1.0\n\n");
    put_str("admin_http", "post", "POST /status HTTP/1.1\r\n\r\n");
    put_str("admin_http", "readyz", "  GET\t/readyz");
}

/* ---- peer frames ---- */

static struct tk_raft_config cfg;

static struct tk_wire_frame sample(uint8_t type)
{
    return tk_wire_sample(type, &cfg);
}

static size_t encode(uint8_t type, uint8_t *buf, size_t cap)
{
    struct tk_wire_frame f = sample(type);
    size_t n = tk_wire_encode(&f, buf, cap);
    if (n == 0)
        abort();
    return n;
}

static void wire_seeds(void)
{
    tk_wire_sample_config(&cfg);
    uint8_t buf[4096];
    for (uint8_t t = 1; t <= TK_RAFT_MSG_TYPE_MAX; t++) {
        char name[32];
        snprintf(name, sizeof(name), "type-%02u", t);
        put("wire", name, buf, encode(t, buf, sizeof(buf)));
    }
    /* A stream: heartbeat, reply, then a frame cut short. */
    size_t n = encode(TK_RAFT_MSG_APPEND, buf, sizeof(buf));
    n += encode(TK_RAFT_MSG_APPEND_REPLY, buf + n, sizeof(buf) - n);
    size_t last = encode(TK_RAFT_MSG_PROBE, buf + n, sizeof(buf) - n);
    put("wire", "stream", buf, n + last / 2);
}

/* ---- commands, batches, snapshots ---- */

static struct tk_cmd grant(const char *key, const char *owner, uint64_t token)
{
    struct tk_cmd c;
    memset(&c, 0, sizeof(c));
    c.type = TK_CMD_GRANT;
    c.key_len = (uint8_t)strlen(key);
    memcpy(c.key, key, c.key_len);
    c.owner_len = (uint8_t)strlen(owner);
    memcpy(c.owner, owner, c.owner_len);
    c.lease_ms = 30000;
    c.token = token;
    return c;
}

static struct tk_cmd removal(uint8_t type, const char *key, uint64_t old_token)
{
    struct tk_cmd c;
    memset(&c, 0, sizeof(c));
    c.type = type;
    c.key_len = (uint8_t)strlen(key);
    memcpy(c.key, key, c.key_len);
    c.old_token = old_token;
    return c;
}

static size_t put_le(uint8_t *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        p[i] = (uint8_t)(v >> (8 * i));
    return (size_t)bytes;
}

/* cmd input: u64 token_first | u32 token_count | u32 ncmds | commands. */
static void batch(const char *name, uint64_t first, const struct tk_cmd *c, uint32_t n)
{
    uint8_t buf[4096];
    size_t off = 12;
    uint32_t tokens = 0;
    off += put_le(buf + off, n, 4);
    for (uint32_t i = 0; i < n; i++) {
        off += tk_cmd_encode(&c[i], buf + off, sizeof(buf) - off);
        tokens += tk_cmd_grants(&c[i]);
    }
    put_le(buf, first, 8);
    put_le(buf + 8, tokens, 4);
    put("cmd", name, buf, off);
}

static void snap(const char *name, const struct tk_cmd *c, uint64_t n)
{
    uint8_t buf[4096];
    memcpy(buf, TK_SNAP_MAGIC, TK_SNAP_MAGIC_LEN);
    memcpy(buf + TK_SNAP_MAGIC_LEN, &n, 8);
    size_t off = TK_SNAP_HEADER_LEN;
    for (uint64_t i = 0; i < n; i++) /* half of each lease left at the cut */
        off += tk_snap_put(buf + off, sizeof(buf) - off, &c[i], c[i].lease_ms / 2);
    put("snapshot", name, buf, off);
}

static void binary_seeds(void)
{
    const uint64_t t = 1796284995487521ull;
    struct tk_cmd one[1] = {grant("show-42", "alice", t)};
    batch("grant", t, one, 1);
    struct tk_cmd handoff = grant("show-42", "bob", t + 1);
    handoff.type = TK_CMD_HANDOFF;
    handoff.old_token = t;
    handoff.expired = 1;
    struct tk_cmd mixed[4] = {handoff, grant("seat/7", "carol", t + 2),
                              removal(TK_CMD_RELEASE, "seat/9", t - 5),
                              removal(TK_CMD_EXPIRE, "inventory", t - 9)};
    batch("mixed", t + 1, mixed, 4);
    batch("empty", t, NULL, 0);

    snap("empty", NULL, 0);
    snap("one", one, 1);
    struct tk_cmd held[3] = {grant("seat/7", "carol", t + 2), grant("show-42", "bob", t + 3),
                             grant("inventory", "a-rather-long-owner-name", t + 9)};
    snap("three", held, 3);
}

/* ---- rings: files, S bodies, encodings (tests/fuzz/fuzz_slots.c) ---- */

#define SLOTS_FILE                                                        \
    "# two groups\nversion 7\n\n0-8191=a@127.0.0.1:7001,127.0.0.1:7002\n" \
    "8192-16383=b@127.0.0.1:7101\n"

/* The entries of a ring and of each step of a move (fuzz_entry.c):
 * u64 token_first | u64 token_next | mark | op | name, then the step's. */
static void entry_seed(const char *name, uint8_t op, const uint8_t *ring, size_t ring_len)
{
    static uint8_t e[16 + 64 + TK_SLOTS_ENCODED_MAX];
    uint64_t t = 1796284995487521ull;
    uint32_t mark = UINT32_MAX;
    size_t n = 0;
    memcpy(e, &t, 8);
    memcpy(e + 8, &t, 8);
    n = 16;
    memcpy(e + n, &mark, 4);
    n += 4;
    e[n++] = op;
    e[n++] = 7;
    memcpy(e + n, "sales-a", 7);
    n += 7;
    if (op != 1) {
        const uint8_t range[] = {0, 0, 99, 0, 7, 's', 'a', 'l', 'e', 's', '-', 'b'};
        memcpy(e + n, range, sizeof(range));
        n += sizeof(range);
    }
    if (op == 4) {
        memcpy(e + n, &t, 8);
        n += 8;
    }
    if (op != 2) {
        memcpy(e + n, ring, ring_len);
        n += ring_len;
    }
    put("entry", name, e, n);
}

static void entry_seeds(const uint8_t *ring, size_t ring_len)
{
    entry_seed("ring", 1, ring, ring_len);
    entry_seed("freeze", 2, ring, ring_len);
    entry_seed("handover", 3, ring, ring_len);
    entry_seed("claim", 4, ring, ring_len);
}

static void slots_seeds(void)
{
    static struct tk_slot_ring r; /* about 50 KiB */
    static uint8_t buf[TK_SLOTS_ENCODED_MAX];
    char why[128];
    put_str("slots", "file", SLOTS_FILE);
    put_str("slots", "file-crlf",
            "version 3\r\n-\r\n200-299=g-2@[::1]:7400\r\n0-99=g1@node-0.svc:7401;100-199=g1@"
            "node-0.svc:7401");
    put_str("slots", "body", "0-8191=a@127.0.0.1:7001,127.0.0.1:7002;8192-16383=b@127.0.0.1:7101");
    put_str("slots", "empty", "version 1\n-\n");
    if (tk_slots_parse_file(SLOTS_FILE, strlen(SLOTS_FILE), &r, why, sizeof(why)) != TK_OK) {
        fprintf(stderr, "slots seed: %s\n", why);
        exit(1);
    }
    size_t n = tk_slots_encode(&r, buf, sizeof(buf));
    if (n == 0)
        abort();
    put("slots", "encoded", buf, n);
    entry_seeds(buf, n);
}

/* ---- lock model: choice bytes (tests/fuzz/fuzz_lock.c) ---- */

static void lock_seeds(void)
{
    static const uint64_t seeds[] = {1, 2, 3};
    for (size_t s = 0; s < sizeof(seeds) / sizeof(seeds[0]); s++) {
        struct tk_prng p;
        tk_prng_seed(&p, seeds[s]);
        uint8_t buf[512];
        for (size_t i = 0; i < sizeof(buf); i++)
            buf[i] = (uint8_t)tk_prng_next(&p);
        char name[32];
        snprintf(name, sizeof(name), "prng-%llu", (unsigned long long)seeds[s]);
        put("lock", name, buf, sizeof(buf));
    }
    /* A short hand-written sequence of choices. */
    static const uint8_t scripted[] = {0, 1,    0, 0, 0x10, 0,  0,  0,  0, 1,    1, 1,
                                       0, 0x20, 0, 5, 0,    60, 60, 80, 0, 0x40, 6};
    put("lock", "scripted", scripted, sizeof(scripted));
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s <corpus-dir>\n", argv[0]);
        return 2;
    }
    root = argv[1];
    if (mkdir(root, 0755) != 0 && errno != EEXIST) {
        perror(root);
        return 1;
    }
    text_seeds();
    wire_seeds();
    binary_seeds();
    lock_seeds();
    slots_seeds();
    return 0;
}
