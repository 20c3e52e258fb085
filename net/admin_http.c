/* HTTP request parsing of the admin listener (see admin_http.h). */
#include "net/admin_http.h"

#include <string.h>

#define ADMIN_METHOD_MAX 7 /* was char method[8] */
#define ADMIN_PATH_MAX 255 /* was char path[256] */

/* White space as the C locale's isspace() has it (what %s skips). */
static bool http_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

static size_t http_len(const char *req, size_t len)
{
    return len == 0 ? 0 : strnlen(req, len);
}

static bool http_is(const char *s, size_t len, const char *lit)
{
    size_t n = strlen(lit);
    return len == n && memcmp(s, lit, n) == 0;
}

bool tk_admin_http_complete(const char *req, size_t len)
{
    len = http_len(req, len);
    return memmem(req, len, "\r\n\r\n", 4) != NULL || memmem(req, len, "\n\n", 2) != NULL;
}

enum tk_admin_route tk_admin_http_parse(const char *req, size_t len, bool *head_only)
{
    len = http_len(req, len);
    size_t p = 0;
    while (p < len && http_space(req[p]))
        p++;
    const char *method = req + p;
    size_t start = p;
    while (p < len && p - start < ADMIN_METHOD_MAX && !http_space(req[p]))
        p++;
    size_t method_len = p - start;
    while (p < len && http_space(req[p]))
        p++;
    const char *path = req + p;
    start = p;
    while (p < len && p - start < ADMIN_PATH_MAX && !http_space(req[p]))
        p++;
    size_t path_len = p - start;
    if (method_len == 0 || path_len == 0)
        return TK_ADMIN_BAD_REQUEST;
    const char *q = memchr(path, '?', path_len);
    if (q != NULL)
        path_len = (size_t)(q - path);
    *head_only = http_is(method, method_len, "HEAD");
    if (!*head_only && !http_is(method, method_len, "GET"))
        return TK_ADMIN_BAD_METHOD;
    if (http_is(path, path_len, "/healthz"))
        return TK_ADMIN_HEALTHZ;
    if (http_is(path, path_len, "/readyz"))
        return TK_ADMIN_READYZ;
    if (http_is(path, path_len, "/status"))
        return TK_ADMIN_STATUS;
    if (http_is(path, path_len, "/members"))
        return TK_ADMIN_MEMBERS;
    if (http_is(path, path_len, "/metrics"))
        return TK_ADMIN_METRICS;
    return TK_ADMIN_NOT_FOUND;
}
