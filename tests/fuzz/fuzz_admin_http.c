/* Fuzz target "admin_http": the admin listener's request parsing
 * (net/admin_http.h), which anyone who reaches the admin port can feed.
 *
 * The input is the bytes of one request as net/admin.c receives them (at
 * most 4096, NUL-terminated after the last byte). The parser must behave
 * exactly as the inline code it replaced: the reference below is that code,
 * sscanf("%7s %255s") and strstr() included, and the route, the head_only
 * flag and the "request complete" answer must match it for every input.
 */
#include "tests/fuzz/fuzz.h"

#include "net/admin_http.h"

#define REQ_MAX 4096

/* net/admin.c serve() before the parser moved out, minus the sockets. */
static enum tk_admin_route ref_parse(char *req, bool *head_only)
{
    char method[8] = {0}, path[256] = {0};
    if (sscanf(req, "%7s %255s", method, path) != 2)
        return TK_ADMIN_BAD_REQUEST;
    char *q = strchr(path, '?');
    if (q)
        *q = 0;
    *head_only = strcmp(method, "HEAD") == 0;
    if (strcmp(method, "GET") != 0 && !*head_only)
        return TK_ADMIN_BAD_METHOD;
    if (!strcmp(path, "/healthz"))
        return TK_ADMIN_HEALTHZ;
    if (!strcmp(path, "/readyz"))
        return TK_ADMIN_READYZ;
    if (!strcmp(path, "/status"))
        return TK_ADMIN_STATUS;
    if (!strcmp(path, "/members")) /* added after the move */
        return TK_ADMIN_MEMBERS;
    if (!strcmp(path, "/metrics"))
        return TK_ADMIN_METRICS;
    return TK_ADMIN_NOT_FOUND;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t len = size < REQ_MAX ? size : REQ_MAX;
    /* Exactly len bytes for the parser (ASan sees any read past them), and
     * a NUL-terminated copy for the C string reference. */
    char *req = fuzz_dup(data, len);
    char *cstr = malloc(len + 1);
    FUZZ_CHECK(cstr != NULL);
    if (len > 0)
        memcpy(cstr, data, len);
    cstr[len] = 0;

    bool complete = tk_admin_http_complete(req, len);
    FUZZ_CHECK(complete == (strstr(cstr, "\r\n\r\n") != NULL || strstr(cstr, "\n\n") != NULL));

    bool head = true, ref_head = true; /* untouched on 400: both stay true */
    enum tk_admin_route got = tk_admin_http_parse(req, len, &head);
    enum tk_admin_route want = ref_parse(cstr, &ref_head);
    FUZZ_CHECK(got == want);
    FUZZ_CHECK(head == ref_head);
    head = false;
    ref_head = false;
    FUZZ_CHECK(tk_admin_http_parse(req, len, &head) == want);
    (void)ref_parse(cstr, &ref_head);
    FUZZ_CHECK(head == ref_head);

    /* Every prefix, as the request arrives in pieces. */
    for (size_t cut = 0; cut < len && cut < 64; cut++) {
        char *part = fuzz_dup(data, cut);
        char saved = cstr[cut];
        cstr[cut] = 0;
        bool h1 = false, h2 = false;
        FUZZ_CHECK(tk_admin_http_parse(part, cut, &h1) == ref_parse(cstr, &h2) && h1 == h2);
        FUZZ_CHECK(tk_admin_http_complete(part, cut) ==
                   (strstr(cstr, "\r\n\r\n") != NULL || strstr(cstr, "\n\n") != NULL));
        cstr[cut] = saved;
        free(part);
    }
    free(cstr);
    free(req);
    return 0;
}
