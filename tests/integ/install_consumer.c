/* A program outside the tree that uses an installed libticketing: built by
 * tests/integ/test_install.sh against the installed header and library only
 * (through pkg-config, shared and static, and through find_package), then
 * run against an installed ticketingd.
 *
 * It connects, acquires the key named by argv[1], checks that the grant has
 * a token and that the server reports this client as the holder with that
 * token, releases it, and checks that the key is then free. Exit 0 when all
 * of that held, 1 otherwise (with the reason on stderr).
 *
 * Usage: TICKETING_ADDR=host:port TICKETING_SECRET_FILE=file install_consumer KEY */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ticketing.h>

static int fail(struct tk_client *c, const char *what, enum tk_client_outcome got)
{
    fprintf(stderr, "install_consumer: %s: %s\n", what, tk_client_outcome_str(got));
    tk_client_destroy(c);
    return 1;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: install_consumer KEY\n");
        return 1;
    }
    const char *key = argv[1];

    struct tk_client_config cfg;
    tk_client_config_init(&cfg);
    cfg.addrs = getenv("TICKETING_ADDR");
    cfg.secret_file = getenv("TICKETING_SECRET_FILE");
    if (cfg.addrs == NULL || cfg.secret_file == NULL) {
        fprintf(stderr, "install_consumer: set TICKETING_ADDR and TICKETING_SECRET_FILE\n");
        return 1;
    }

    struct tk_client *c;
    int rc = tk_client_create(&cfg, &c);
    if (rc != TK_CLIENT_ENONE) {
        fprintf(stderr, "install_consumer: client: %s\n", tk_client_strerror(rc));
        return 1;
    }

    struct tk_client_result lock;
    enum tk_client_outcome got = tk_client_acquire(c, key, 30000, 5000, &lock);
    if (got != TK_CLIENT_ACQUIRED)
        return fail(c, "acquire", got);
    if (lock.token == 0) {
        fprintf(stderr, "install_consumer: acquired with token 0\n");
        tk_client_destroy(c);
        return 1;
    }

    struct tk_client_result q;
    got = tk_client_query(c, key, &q);
    if (got != TK_CLIENT_ANSWERED)
        return fail(c, "query while held", got);
    if (!q.held || q.token != lock.token || strcmp(q.owner, tk_client_owner(c)) != 0) {
        fprintf(stderr, "install_consumer: query says held=%d owner=%s token=%llu\n", q.held,
                q.owner, (unsigned long long)q.token);
        tk_client_destroy(c);
        return 1;
    }

    struct tk_client_result rel;
    got = tk_client_release(c, key, lock.token, &rel);
    if (got != TK_CLIENT_RELEASED)
        return fail(c, "release", got);

    got = tk_client_query(c, key, &q);
    if (got != TK_CLIENT_ANSWERED)
        return fail(c, "query after release", got);
    if (q.held) {
        fprintf(stderr, "install_consumer: still held by %s after the release\n", q.owner);
        tk_client_destroy(c);
        return 1;
    }

    printf("install_consumer: %s acquired with token %llu and released\n", key,
           (unsigned long long)lock.token);
    tk_client_destroy(c);
    return 0;
}
