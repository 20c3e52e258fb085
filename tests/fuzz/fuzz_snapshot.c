/* Fuzz target "snapshot": the TKSNAP03 blob a follower installs, and the
 * TKSNAP02 one it still reads (core/snap.h; raft/driver.c
 * install_snapshot()).
 *
 * The input is the blob. tk_snap_check() must accept exactly the blobs an
 * independent oracle accepts: the header, then records walked with
 * tk_snap_header()/tk_snap_next() until none is left, count equal to the
 * header's, tokens below the bound (and strictly increasing in a TKSNAP02
 * blob), keys and tokens pairwise distinct (a plain quadratic comparison). For an accepted blob:
 *  - the blob is canonical: the header plus tk_snap_put() of every record
 *    gives back the same bytes;
 *  - installing it as a follower does (tk_lock_clear(), tk_lock_restore()
 *    per record) never panics, tk_lock_check() passes, and the table lists
 *    exactly those holders; releasing each one afterwards empties it, and a
 *    grant with the snapshot's next token is accepted.
 */
#include "tests/fuzz/fuzz.h"

#include "core/snap.h"
#include "shard/lock.h"

#define RECORDS_MAX 4096
#define TOKEN_NEXT (UINT64_C(1) << 56) /* the bound passed as the snapshot's fencing counter */

static struct tk_cmd recs[RECORDS_MAX];
static uint32_t left[RECORDS_MAX];

static void no_reply(void *ctx, const struct tk_lock_reply *r)
{
    (void)ctx;
    (void)r;
    FUZZ_CHECK(!"a follower replies to nobody");
}

static void no_propose(void *ctx, const struct tk_cmd *c)
{
    (void)ctx;
    (void)c;
    FUZZ_CHECK(!"a follower proposes nothing");
}

static void count_holder(void *ctx, const struct tk_cmd *c)
{
    size_t *n = ctx;
    FUZZ_CHECK(c->type == TK_CMD_GRANT && c->token != 0);
    (*n)++;
}

static void install(size_t n)
{
    struct tk_lock_limits lim = {
        .keys_max = RECORDS_MAX + 1, .waiters_per_key_max = 4, .waiters_max = 16};
    struct tk_lock_table *t = tk_lock_create(&lim);
    FUZZ_CHECK(t != NULL);
    struct tk_lock_sink sink = {.reply = no_reply, .propose = no_propose, .ctx = NULL};
    uint64_t now = 1000000;
    tk_lock_clear(t);
    for (size_t i = 0; i < n; i++)
        tk_lock_restore_left(t, now, &recs[i], left[i]);
    tk_lock_check(t);
    size_t seen = 0;
    tk_lock_each_holder(t, count_holder, &seen);
    FUZZ_CHECK(seen == n);
    struct tk_lock_stats st;
    tk_lock_stats(t, &st);
    FUZZ_CHECK(st.held == n && st.keys == n);
    /* The log goes on after the snapshot: releases, then a new grant. */
    for (size_t i = 0; i < n; i++) {
        struct tk_cmd rel;
        memset(&rel, 0, sizeof(rel));
        rel.type = TK_CMD_RELEASE;
        rel.key_len = recs[i].key_len;
        memcpy(rel.key, recs[i].key, rel.key_len);
        rel.old_token = recs[i].token;
        tk_lock_apply(t, ++now, &rel, &sink);
    }
    tk_lock_check(t);
    tk_lock_stats(t, &st);
    FUZZ_CHECK(st.held == 0 && st.keys == 0);
    struct tk_cmd g;
    memset(&g, 0, sizeof(g));
    g.type = TK_CMD_GRANT;
    g.key_len = 1;
    g.key[0] = 'k';
    g.owner_len = 1;
    g.owner[0] = 'o';
    g.lease_ms = TK_LEASE_MS_MIN;
    g.token = TOKEN_NEXT;
    tk_lock_apply(t, ++now, &g, &sink);
    tk_lock_check(t);
    tk_lock_destroy(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *blob = (uint8_t *)fuzz_dup(data, size);
    uint64_t count = 0;
    const char *why = NULL;
    int rc = tk_snap_check(blob, size, TOKEN_NEXT, &count, &why);
    FUZZ_CHECK(rc == TK_OK || rc == TK_EPROTO);
    FUZZ_CHECK(rc == TK_OK || why != NULL);

    /* The oracle. */
    bool ok = false;
    size_t n = 0;
    uint64_t header = 0;
    size_t pos = 0;
    const uint8_t *state = NULL;
    size_t state_len = 0;
    if (tk_snap_state(blob, size, &header, &pos, &state, &state_len) == TK_OK) {
        bool v2 = memcmp(blob, TK_SNAP_MAGIC_V2, 8) == 0;
        bool v4 = memcmp(blob, TK_SNAP_MAGIC_STATE, 8) == 0;
        FUZZ_CHECK(v2 || v4 || memcmp(blob, TK_SNAP_MAGIC, 8) == 0);
        FUZZ_CHECK(v4 == (state != NULL) && v4 == (state_len > 0));
        FUZZ_CHECK(pos == tk_snap_header_len(state_len) && pos <= size);
        FUZZ_CHECK(!v4 ||
                   (state == blob + TK_SNAP_HEADER_LEN + 4 && state_len <= TK_SNAP_STATE_MAX));
        ok = true;
        while (pos < size && ok) {
            size_t before = pos;
            if (n == RECORDS_MAX || tk_snap_next(blob, size, &pos, &recs[n], &left[n]) != TK_OK) {
                FUZZ_CHECK(n == RECORDS_MAX || pos == before);
                ok = false;
                break;
            }
            FUZZ_CHECK(pos > before && pos <= size);
            const struct tk_cmd *c = &recs[n];
            FUZZ_CHECK(c->type == TK_CMD_GRANT && c->token != 0 && tk_cmd_check(c) == TK_OK);
            FUZZ_CHECK(left[n] >= 1 && left[n] <= c->lease_ms);
            if (c->token >= TOKEN_NEXT || (v2 && n > 0 && c->token <= recs[n - 1].token))
                ok = false;
            for (size_t j = 0; j < n && ok; j++)
                if ((recs[j].key_len == c->key_len &&
                     memcmp(recs[j].key, c->key, c->key_len) == 0) ||
                    recs[j].token == c->token)
                    ok = false;
            n++;
        }
        ok = ok && pos == size && header == n;
    }
    FUZZ_CHECK((rc == TK_OK) == ok);
    if (rc != TK_OK) {
        free(blob);
        return 0;
    }
    FUZZ_CHECK(count == n);

    /* Canonical: header and records encode back to the very same blob. */
    uint8_t *again = malloc(size);
    FUZZ_CHECK(again != NULL);
    if (state_len) {
        tk_snap_put_header_state(again, count, state, state_len);
    } else {
        memcpy(again, blob, TK_SNAP_MAGIC_LEN); /* either layout's magic */
        memcpy(again + TK_SNAP_MAGIC_LEN, &count, 8);
    }
    size_t off = tk_snap_header_len(state_len);
    for (size_t i = 0; i < n; i++) {
        size_t w = tk_snap_put(again + off, size - off, &recs[i], left[i]);
        FUZZ_CHECK(w > 0);
        off += w;
    }
    FUZZ_CHECK(off == size && memcmp(again, blob, size) == 0);
    free(again);

    install(n);
    free(blob);
    return 0;
}
