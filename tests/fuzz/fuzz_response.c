/* Fuzz target "response": what the client library makes of a server's
 * lines (client/conn.c conn_lines()/conn_line()).
 *
 * The input is the byte stream from a server after the handshake. It is cut
 * into lines as conn_lines() does (a line of TK_LINE_MAX bytes or more ends
 * the connection; a last line without '\n' is taken as if one followed), and
 * each line goes through tk_proto_parse_response(). An M line's address goes
 * on to tk_addr_parse(), as cl_on_moved() -> cl_conn_set_addr() takes it,
 * and every answer is matched against every request type with
 * cl_response_fits().
 *
 * Checked: the parsed fields obey core/proto.h (types, ids, G and held Q
 * tokens >= 1, a free Q is "- 0 0", a W's slot below TK_SLOTS, an S's part
 * k of n with 1 <= k <= n and n >= 2 only in the form with "k/n", pointers
 * inside the line); a response formats back to exactly the same line
 * where the format is canonical (G, T, B, R, N, P, Q, M, W, S, and E with
 * a known reason); W answers exactly A, R and Q, S only S; an address
 * tk_addr_parse() accepts has a host that fits the connection's buffer, a
 * port, and formats back to its text (a bracketed host is an IPv6 literal).
 */
#include "tests/fuzz/fuzz.h"

#include "client/internal.h"
#include "core/addr.h"
#include "core/proto.h"

static void check_addr(const char *text, size_t len)
{
    struct tk_addr a;
    const char *why = NULL;
    /* In a buffer of its own, as cl_on_moved() copies it. */
    char *copy = fuzz_dup((const uint8_t *)text, len);
    int rc = tk_addr_parse(copy, len, &a, &why);
    free(copy);
    if (rc != TK_OK) {
        FUZZ_CHECK(why != NULL && why[0] != '\0');
        return;
    }
    /* The rest of core/addr.h is fuzzed by fuzz_addr; here: what
     * cl_conn_set_addr() relies on. */
    size_t hlen = strnlen(a.host, sizeof(a.host));
    FUZZ_CHECK(hlen >= 1 && hlen <= CL_HOST_MAX);
    FUZZ_CHECK(a.port >= 1);
    char back[TK_ADDR_TEXT_MAX + 1];
    FUZZ_CHECK(tk_addr_format(&a, back, sizeof(back)) == len);
    FUZZ_CHECK(memcmp(back, text, len) == 0);
    FUZZ_CHECK((a.kind == TK_ADDR_IPV6) == (text[0] == '['));
}

static void check_fits(char type)
{
    static const char req_types[] = {'A', 'R', 'Q', 'P', 'S'};
    int fit = 0;
    for (size_t i = 0; i < sizeof(req_types); i++) {
        struct cl_req r;
        memset(&r, 0, sizeof(r));
        r.type = req_types[i];
        bool fits = cl_response_fits(&r, type);
        fit += fits;
        /* W (SPEC 15) answers the requests about a key, S only S. */
        if (type == 'W')
            FUZZ_CHECK(fits == (r.type == 'A' || r.type == 'R' || r.type == 'Q'));
        if (type == 'S')
            FUZZ_CHECK(fits == (r.type == 'S'));
        r.neutered = true; /* its line was turned into "X ...": only E answers it */
        FUZZ_CHECK(cl_response_fits(&r, type) == (type == 'E'));
    }
    /* M answers no request, E any, W the three about a key, every other
     * type exactly one kind. */
    FUZZ_CHECK(fit == (type == 'M' ? 0 : type == 'E' ? 5 : type == 'W' ? 3 : 1));
}

static void one_line(const char *line, size_t len)
{
    struct tk_response rsp;
    if (!tk_proto_parse_response(line, len, &rsp))
        return;
    size_t bare = len > 0 && line[len - 1] == '\r' ? len - 1 : len;
    char out[TK_LINE_MAX + 2];
    size_t n = 0;
    FUZZ_CHECK(strchr("GTBRNQPEMWS", rsp.type) != NULL && rsp.type != 0);
    FUZZ_CHECK(rsp.has_id == !(rsp.type == 'M' || (rsp.type == 'E' && line[2] == '-')));
    switch (rsp.type) {
        case 'T':
        case 'B':
        case 'R':
        case 'N':
        case 'P':
            n = tk_proto_fmt_id(out, sizeof(out), rsp.type, rsp.id);
            break;
        case 'G':
            FUZZ_CHECK(rsp.token >= 1);
            n = tk_proto_fmt_grant(out, sizeof(out), rsp.id, rsp.token);
            break;
        case 'Q':
            if (rsp.owner == NULL) {
                FUZZ_CHECK(rsp.token == 0 && rsp.waiters == 0);
            } else {
                FUZZ_CHECK(rsp.token >= 1);
                FUZZ_CHECK(fuzz_inside(rsp.owner, rsp.owner_len, line, len));
                FUZZ_CHECK(tk_proto_owner_ok(rsp.owner, rsp.owner_len));
            }
            n = tk_proto_fmt_query(out, sizeof(out), rsp.id, rsp.owner, rsp.owner_len, rsp.token,
                                   rsp.waiters);
            break;
        case 'E':
            FUZZ_CHECK(rsp.text != NULL && rsp.text_len > 0);
            FUZZ_CHECK(fuzz_inside(rsp.text, rsp.text_len, line, len));
            if (rsp.reason != TK_REASON_NONE) {
                FUZZ_CHECK(rsp.text_len == strlen(tk_reason_str(rsp.reason)));
                FUZZ_CHECK(memcmp(rsp.text, tk_reason_str(rsp.reason), rsp.text_len) == 0);
                n = tk_proto_fmt_error(out, sizeof(out), rsp.has_id, rsp.id, rsp.reason);
            }
            break;
        case 'W':
            FUZZ_CHECK(rsp.slot < TK_SLOTS);
            n = tk_proto_fmt_wrong(out, sizeof(out), rsp.id, rsp.slot, rsp.version);
            break;
        case 'S': {
            FUZZ_CHECK(rsp.text != NULL && rsp.text_len > 0);
            FUZZ_CHECK(fuzz_inside(rsp.text, rsp.text_len, line, len));
            for (size_t i = 0; i < rsp.text_len; i++)
                FUZZ_CHECK(rsp.text[i] > 0x20 && rsp.text[i] < 0x7f); /* one visible word */
            FUZZ_CHECK(rsp.part >= 1 && rsp.part <= rsp.parts);
            FUZZ_CHECK(rsp.parts <= TK_PROTO_RING_PARTS_MAX); /* conn_read.c relies on it */
            /* "S <id> <version> <body>" is 4 words, "... <k>/<n> <body>" 5. */
            size_t spaces = 0;
            for (size_t i = 0; i < bare; i++)
                spaces += line[i] == ' ';
            FUZZ_CHECK((rsp.parts >= 2) == (spaces == 4));
            FUZZ_CHECK(rsp.parts >= 2 || spaces == 3);
            n = tk_proto_fmt_ring(out, sizeof(out), rsp.id, rsp.version, rsp.part, rsp.parts,
                                  rsp.text, rsp.text_len);
            break;
        }
        case 'M':
            if (rsp.text != NULL) {
                FUZZ_CHECK(fuzz_inside(rsp.text, rsp.text_len, line, len));
                char *addr = malloc(rsp.text_len + 1);
                FUZZ_CHECK(addr != NULL);
                memcpy(addr, rsp.text, rsp.text_len);
                addr[rsp.text_len] = '\0';
                FUZZ_CHECK(strlen(addr) == rsp.text_len); /* visible bytes: no NUL */
                n = tk_proto_fmt_moved(out, sizeof(out), addr);
                free(addr);
                check_addr(rsp.text, rsp.text_len);
            } else {
                n = tk_proto_fmt_moved(out, sizeof(out), NULL);
            }
            break;
        default:
            FUZZ_CHECK(!"response type");
    }
    if (n > 0) {
        FUZZ_CHECK(n == bare + 1 && out[bare] == '\n');
        FUZZ_CHECK(memcmp(out, line, bare) == 0);
    }
    check_fits(rsp.type);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t pos = 0;
    while (pos < size) {
        const uint8_t *nl = memchr(data + pos, '\n', size - pos);
        size_t len = nl != NULL ? (size_t)(nl - (data + pos)) : size - pos;
        if (len + 1 > TK_LINE_MAX)
            break; /* "protocol: line too long" */
        char *line = fuzz_dup(data + pos, len);
        one_line(line, len);
        free(line);
        pos += len + 1;
    }
    /* A bare address as an M line would carry it. */
    check_addr((const char *)data, size < 300 ? size : 300);
    return 0;
}
