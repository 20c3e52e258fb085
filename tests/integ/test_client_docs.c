/* Goal: every C example in docs/client.md compiles warning-free with the
 * system cc against the built libticketing.so and runs to success against
 * a real ticketingd, so the documentation cannot drift from the library.
 *
 * Method: extract each ```c block, write it to a temporary file, compile it
 * (-Wall -Wextra -Werror, plus -lsqlite3 when it includes sqlite3.h, and the
 * sanitizers when this build has them, since the library then needs their
 * runtime), run it with TICKETING_ADDR and TICKETING_SECRET_FILE pointing at
 * a fresh node, and expect exit status 0 within a generous time limit.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/support/tk_test.h"

#define DOCS_PATH TK_SRC_DIR "/docs/client.md"
#define EXAMPLES_MAX 16
#define RUN_LIMIT_MS 120000

static struct tk_node node;

static void setup(void)
{
    static const char *const args[] = {"--threads", "2", NULL};
    cr_assert_eq(tk_node_start(&node, args), 0, "ticketingd did not start");
}

static void teardown(void)
{
    if (node.pid > 0)
        tk_node_stop(&node, SIGTERM, 10000);
    tk_node_cleanup(&node);
}

struct example {
    char *code;
    char first_line[128];
};

static char *read_all(const char *path)
{
    FILE *f = fopen(path, "r");
    cr_assert(f != NULL, "cannot open %s", path);
    cr_assert_eq(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    cr_assert_gt(n, 0);
    rewind(f);
    char *buf = malloc((size_t)n + 1);
    cr_assert(buf);
    cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

/* The ```c ... ``` blocks of the markdown text. */
static size_t extract(char *md, struct example *ex, size_t max)
{
    size_t n = 0;
    char *p = md;
    while ((p = strstr(p, "\n```c\n")) != NULL && n < max) {
        char *start = p + strlen("\n```c\n");
        char *end = strstr(start, "\n```\n");
        cr_assert(end != NULL, "unterminated ```c block");
        *end = '\0';
        ex[n].code = start;
        const char *nl = strchr(start, '\n');
        snprintf(ex[n].first_line, sizeof ex[n].first_line, "%.*s",
                 (int)(nl ? nl - start : (long)strlen(start)), start);
        n++;
        p = end + 1;
    }
    return n;
}

/* Runs argv (with env extra entries) and returns its wait status, or -1 if
 * it ran over limit_ms (then it is killed). Its output goes to log. */
static int run(char *const argv[], char *const env_extra[], const char *log, int limit_ms)
{
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        for (int i = 0; env_extra && env_extra[i]; i++)
            putenv(env_extra[i]);
        execvp(argv[0], argv);
        _exit(127);
    }
    uint64_t end = tk_test_ms() + (uint64_t)limit_ms;
    for (;;) {
        int st;
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid)
            return st;
        if (tk_test_ms() >= end) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return -1;
        }
        usleep(10000);
    }
}

static void show_log(const char *log)
{
    char *text = read_all(log);
    fprintf(stderr, "---- %s ----\n%s\n----\n", log, text);
    free(text);
}

TestSuite(docs, .init = setup, .fini = teardown, .timeout = 600);

Test(docs, every_c_example_compiles_and_runs)
{
    struct example ex[EXAMPLES_MAX];
    char *md = read_all(DOCS_PATH);
    size_t n = extract(md, ex, EXAMPLES_MAX);
    cr_assert_geq(n, 2, "docs/client.md should have at least two C examples");
    char dir[] = "/tmp/tk-docs-XXXXXX";
    cr_assert(mkdtemp(dir) != NULL);
    char env_addr[64], env_secret[400];
    snprintf(env_addr, sizeof env_addr, "TICKETING_ADDR=127.0.0.1:%u", node.port);
    snprintf(env_secret, sizeof env_secret, "TICKETING_SECRET_FILE=%s", node.secret_file);
    char *env[] = {env_addr, env_secret, NULL};

    for (size_t i = 0; i < n; i++) {
        char src[300], bin[300], log[300];
        snprintf(src, sizeof src, "%s/example%zu.c", dir, i);
        snprintf(bin, sizeof bin, "%s/example%zu", dir, i);
        snprintf(log, sizeof log, "%s/example%zu.log", dir, i);
        FILE *f = fopen(src, "w");
        cr_assert(f);
        fputs(ex[i].code, f);
        fputc('\n', f);
        fclose(f);
        bool sqlite = strstr(ex[i].code, "#include <sqlite3.h>") != NULL;
        if (sqlite && access("/usr/include/sqlite3.h", R_OK) != 0)
            cr_skip_test("example '%s' needs libsqlite3-dev (sqlite3.h)", ex[i].first_line);

        char *cc[32];
        int a = 0;
        cc[a++] = "cc";
        cc[a++] = "-std=gnu11";
        cc[a++] = "-Wall";
        cc[a++] = "-Wextra";
        cc[a++] = "-Werror";
        cc[a++] = "-g";
#ifdef TK_SANITIZED
        cc[a++] = "-fsanitize=address,undefined";
#endif
        cc[a++] = "-I" TK_SRC_DIR "/client";
        cc[a++] = src;
        cc[a++] = "-o";
        cc[a++] = bin;
        cc[a++] = "-L" TK_BIN_DIR "/client";
        cc[a++] = "-Wl,-rpath," TK_BIN_DIR "/client";
        cc[a++] = "-lticketing";
        if (sqlite)
            cc[a++] = "-lsqlite3";
        cc[a++] = "-lpthread";
        cc[a] = NULL;
        int st = run(cc, NULL, log, RUN_LIMIT_MS);
        if (!(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0))
            show_log(log);
        cr_assert(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0,
                  "example %zu (%s) does not compile", i, ex[i].first_line);

        char *argv[] = {bin, NULL};
        uint64_t t0 = tk_test_ms();
        st = run(argv, env, log, RUN_LIMIT_MS);
        if (!(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0))
            show_log(log);
        cr_assert(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0,
                  "example %zu (%s) failed: status %d", i, ex[i].first_line, st);
        fprintf(stderr, "docs example %zu (%s): ok in %llu ms\n", i, ex[i].first_line,
                (unsigned long long)(tk_test_ms() - t0));
        unlink(src);
        unlink(bin);
        unlink(log);
    }
    rmdir(dir);
    free(md);
}
