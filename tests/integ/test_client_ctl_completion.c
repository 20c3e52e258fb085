/* Goal: the bash completion of ticketctl (client/completion/ticketctl.bash)
 * offers the commands, the flags and file names where ticketctl takes
 * them, as docs/client.md says.
 *
 * Method: bash sources the script, fills COMP_WORDS and COMP_CWORD as
 * bash's own completion would for a command line, calls the function the
 * script registered for ticketctl (asked of `complete -p`, not assumed)
 * and prints COMPREPLY, one word a line; the test compares the words.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define SCRIPT TK_SRC_DIR "/client/completion/ticketctl.bash"

static char dir[] = "/tmp/tk-ctlcomp-XXXXXX";

static void setup(void)
{
    cr_assert(mkdtemp(dir) != NULL);
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

/* The completions of a command line of n words, the last being completed
 * (each word of words as bash would split it; "" for an empty last word),
 * run in cwd; sorted, one a line, into out. */
static void complete(const char *const *words, int n, const char *cwd, char *out, size_t cap)
{
    char script[4096], path[300], cmd[400];
    size_t off =
        (size_t)snprintf(script, sizeof script,
                         "source '%s' || exit 3\n"
                         "fn=$(complete -p ticketctl | sed -n 's/.*-F \\([^ ]*\\) .*/\\1/p')\n"
                         "[ -n \"$fn\" ] || exit 4\n"
                         "cd '%s' || exit 5\n"
                         "COMP_WORDS=(",
                         SCRIPT, cwd);
    for (int i = 0; i < n; i++)
        off += (size_t)snprintf(script + off, sizeof script - off, " '%s'", words[i]);
    snprintf(script + off, sizeof script - off,
             " )\nCOMP_CWORD=%d\nCOMPREPLY=()\n\"$fn\" ticketctl \"${COMP_WORDS[COMP_CWORD]}\" "
             "\"${COMP_WORDS[COMP_CWORD-1]}\" || exit 6\n"
             "((${#COMPREPLY[@]} == 0)) || printf '%%s\\n' \"${COMPREPLY[@]}\" | sort\n",
             n - 1);
    snprintf(path, sizeof path, "%s/complete.sh", dir);
    FILE *f = fopen(path, "w");
    cr_assert(f != NULL);
    fputs(script, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "bash --norc --noprofile %s", path);
    FILE *p = popen(cmd, "r");
    cr_assert(p != NULL);
    size_t len = fread(out, 1, cap - 1, p);
    out[len] = '\0';
    int st = pclose(p);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "bash failed (status %#x):\n%s\n%s", st,
              script, out);
}

#define WORDS(...)                        \
    ((const char *const[]){__VA_ARGS__}), \
        (int)(sizeof((const char *const[]){__VA_ARGS__}) / sizeof(const char *))

TestSuite(ctl_completion, .init = setup, .fini = teardown, .timeout = 60);

Test(ctl_completion, commands_flags_and_files)
{
    char out[8192], file[300];
    complete(WORDS("ticketctl", ""), dir, out, sizeof out);
    cr_assert_str_eq(out,
                     "acquire\nmembers\nping\nquery\nrelease\nremove-member\nring\nrun\nstatus\n",
                     "[%s]", out);
    complete(WORDS("ticketctl", "st"), dir, out, sizeof out);
    cr_assert_str_eq(out, "status\n", "[%s]", out);
    complete(WORDS("ticketctl", "--sec"), dir, out, sizeof out);
    cr_assert_str_eq(out, "--secret-file\n", "[%s]", out);
    /* Flags anywhere: after the command and its key too. */
    complete(WORDS("ticketctl", "--addr", "db1:7400", "acquire", "k", "--js"), dir, out,
             sizeof out);
    cr_assert_str_eq(out, "--json\n", "[%s]", out);
    complete(WORDS("ticketctl", "--tls"), dir, out, sizeof out);
    cr_assert_str_eq(out, "--tls-ca\n--tls-cert\n--tls-key\n--tls-server-name\n", "[%s]", out);
    /* A command is given: no second one. */
    complete(WORDS("ticketctl", "status", ""), dir, out, sizeof out);
    cr_assert_str_eq(out, "", "[%s]", out);
    /* ring's subcommands, and --group's value is no command. */
    complete(WORDS("ticketctl", "ring", ""), dir, out, sizeof out);
    cr_assert_str_eq(out, "apply\nshow\n", "[%s]", out);
    complete(WORDS("ticketctl", "--group", "g1", "ring", "sh"), dir, out, sizeof out);
    cr_assert_str_eq(out, "show\n", "[%s]", out);
    complete(WORDS("ticketctl", "ring", "show", ""), dir, out, sizeof out);
    cr_assert_str_eq(out, "", "[%s]", out);
    complete(WORDS("ticketctl", "--gro"), dir, out, sizeof out);
    cr_assert_str_eq(out, "--group\n", "[%s]", out);

    /* Files after the flags that take one, in every spelling. */
    snprintf(file, sizeof file, "%s/client.secret", dir);
    FILE *f = fopen(file, "w");
    cr_assert(f != NULL);
    fclose(f);
    complete(WORDS("ticketctl", "--secret-file", "cli"), dir, out, sizeof out);
    cr_assert_str_eq(out, "client.secret\n", "[%s]", out);
    complete(WORDS("ticketctl", "--peer-secret-file", "=", "cli"), dir, out, sizeof out);
    cr_assert_str_eq(out, "client.secret\n", "[%s]", out);
    complete(WORDS("ticketctl", "--tls-ca=cli"), dir, out, sizeof out);
    cr_assert_str_eq(out, "--tls-ca=client.secret\n", "[%s]", out);
    /* The ring file of ring apply, then nothing more. */
    complete(WORDS("ticketctl", "ring", "apply", "cli"), dir, out, sizeof out);
    cr_assert_str_eq(out, "client.secret\n", "[%s]", out);
    complete(WORDS("ticketctl", "ring", "apply", "client.secret", "cli"), dir, out, sizeof out);
    cr_assert_str_eq(out, "", "[%s]", out);
    /* A flag whose value is no file: nothing offered, no file name. */
    complete(WORDS("ticketctl", "--owner", "cli"), dir, out, sizeof out);
    cr_assert_str_eq(out, "", "[%s]", out);
    /* `st` after a flag's value is still the command. */
    complete(WORDS("ticketctl", "--admin-port", "7402", "st"), dir, out, sizeof out);
    cr_assert_str_eq(out, "status\n", "[%s]", out);
}
