/* The client line protocol (SPEC 3-5): parsing requests and formatting
 * responses, for the server and the client library alike.
 *
 * Pure: works on caller-owned memory, no I/O, no allocation. Parsed fields
 * point into the caller's line buffer.
 */
#ifndef TK_CORE_PROTO_H
#define TK_CORE_PROTO_H

#include "core/tk.h"

/* What the parser made of one line. */
enum tk_parse_status {
    TK_PARSE_OK = 0, /* a valid request in *req */
    TK_PARSE_REJECT, /* answer "E <id> <reason>" and go on; req->id is valid */
    TK_PARSE_FATAL,  /* answer "E - syntax" and close: no valid id */
};

/* The one-word reasons of E responses. */
enum tk_reason {
    TK_REASON_NONE = 0,
    TK_REASON_SYNTAX,
    TK_REASON_KEY,
    TK_REASON_OWNER,
    TK_REASON_LEASE,
    TK_REASON_WAIT,
    TK_REASON_TOKEN,
    TK_REASON_COMMAND,
    TK_REASON_AUTH,
    TK_REASON_TOOLONG,
    TK_REASON_OVERLOAD,
};
const char *tk_reason_str(enum tk_reason r);

struct tk_request {
    char type; /* 'A' 'R' 'Q' 'P' 'S' */
    uint64_t id;
    const char *key; /* A R Q */
    size_t key_len;
    const char *owner; /* A R */
    size_t owner_len;
    uint32_t lease_ms;     /* A */
    uint32_t wait_ms;      /* A */
    uint64_t token;        /* R */
    enum tk_reason reason; /* TK_PARSE_REJECT / TK_PARSE_FATAL */
};

/* Parses one request line of len bytes, without its trailing "\n" (a final
 * "\r" is tolerated and ignored; any other byte, NUL included, is data).
 * Applies every rule of SPEC 5; reads exactly len bytes, allocates nothing.
 *
 * Fields are separated by one space (0x20); a tab or any other byte is part
 * of a field. The command word is the first non-empty word and the id the
 * second, so an empty field before the id (" P 1", "P  1") still has an id
 * to answer. When several things are wrong, the first check that fails in
 * this order decides:
 *   1. empty line, or no second word, or that word is not a valid id
 *      -> TK_PARSE_FATAL, reason syntax (there is no id to answer with);
 *   2. the command word is not exactly "A", "R", "Q", "P" or "S"
 *      -> TK_PARSE_REJECT, reason command, type 0;
 *   3. the line's shape: wrong number of fields for the command, or any
 *      empty field (leading, doubled or trailing space)
 *      -> TK_PARSE_REJECT, reason syntax (fields are not judged then);
 *   4. each field from left to right (key, owner, lease_ms, wait_ms; key,
 *      owner, token; key) -> TK_PARSE_REJECT with that field's reason.
 * On TK_PARSE_REJECT req->id is valid and req->type is set unless the reason
 * is command. On TK_PARSE_OK req->reason is TK_REASON_NONE and key/owner
 * point into line. */
enum tk_parse_status tk_proto_parse(const char *line, size_t len, struct tk_request *req);

/* SPEC 5 key and owner rules: 1-250 (owner: 1-64) bytes, each 0x21-0x7E.
 * The client library uses them to refuse bad input without a round trip. */
bool tk_proto_key_ok(const char *key, size_t len);
bool tk_proto_owner_ok(const char *owner, size_t len);

/* Parses a decimal u64 by SPEC 5's number rules (digits only, no leading
 * zero except "0", 1-20 digits, no overflow). Returns true on success. */
bool tk_proto_parse_u64(const char *s, size_t len, uint64_t *out);

/* A response as the client library sees it. */
struct tk_response {
    char type;   /* 'G' 'T' 'B' 'R' 'N' 'Q' 'P' 'E' 'M' 'W' 'S' */
    bool has_id; /* false for "E -" and M */
    uint64_t id;
    uint64_t token;    /* G; Q */
    uint32_t waiters;  /* Q */
    const char *owner; /* Q: NULL when free ("- 0 0"); an owner may be "-" itself */
    size_t owner_len;
    uint64_t version;     /* W S: the ring's version */
    uint32_t slot;        /* W */
    uint32_t part, parts; /* S: this line is part k of n (1/1: the one-line form) */
    /* E: reason word; M: "host:port" or NULL for "-"; S: the body (core/slots.h) */
    const char *text;
    size_t text_len;
    enum tk_reason reason; /* E: the reason word, TK_REASON_NONE if unknown */
};

/* Parses one response line (client side), without its "\n" (a final "\r"
 * tolerated). Returns false on anything that is not a well-formed response:
 * fields separated by exactly one space, ids and tokens by SPEC 5, G and
 * held Q tokens >= 1, Q "-" with token 0 means free and then needs 0
 * waiters, E's reason one visible word (unknown words are accepted with
 * reason TK_REASON_NONE, for newer servers), M's address "-" or
 * "host:port" with visible bytes and a port 1-65535. Pointers in *rsp point
 * into line. */
bool tk_proto_parse_response(const char *line, size_t len, struct tk_response *rsp);

/* Formatting. Each writes one complete line with its "\n" into buf and
 * returns its length, or 0 if cap is too small. */
size_t tk_proto_fmt_id(char *buf, size_t cap, char type, uint64_t id);         /* T B R N P */
size_t tk_proto_fmt_grant(char *buf, size_t cap, uint64_t id, uint64_t token); /* G */
size_t tk_proto_fmt_query(char *buf,
                          size_t cap,
                          uint64_t id,
                          const char *owner,
                          size_t owner_len,
                          uint64_t token,
                          uint32_t waiters); /* Q; owner NULL = free */
size_t tk_proto_fmt_error(char *buf, size_t cap, bool has_id, uint64_t id, enum tk_reason r);
size_t tk_proto_fmt_moved(char *buf, size_t cap, const char *addr); /* addr NULL = "-" */
/* W: the group does not serve the key's slot (SPEC 15). */
size_t tk_proto_fmt_wrong(char *buf, size_t cap, uint64_t id, uint32_t slot, uint64_t version);
/* Parts of an S answer: each holds at least one range of at most 1,024. */
#define TK_PROTO_RING_PARTS_MAX 1024
/* One line of an S answer: "S <id> <version> <body>" when parts is 1,
 * else "S <id> <version> <part>/<parts> <body>" (body: visible bytes). */
size_t tk_proto_fmt_ring(char *buf,
                         size_t cap,
                         uint64_t id,
                         uint64_t version,
                         uint32_t part,
                         uint32_t parts,
                         const char *body,
                         size_t body_len);

/* Request lines, for the client. Fields must already be valid. */
size_t tk_proto_fmt_acquire(char *buf,
                            size_t cap,
                            uint64_t id,
                            const char *key,
                            size_t key_len,
                            const char *owner,
                            size_t owner_len,
                            uint32_t lease_ms,
                            uint32_t wait_ms);
size_t tk_proto_fmt_release(char *buf,
                            size_t cap,
                            uint64_t id,
                            const char *key,
                            size_t key_len,
                            const char *owner,
                            size_t owner_len,
                            uint64_t token);
size_t tk_proto_fmt_qreq(char *buf, size_t cap, uint64_t id, const char *key, size_t key_len);
size_t tk_proto_fmt_ping(char *buf, size_t cap, uint64_t id);
size_t tk_proto_fmt_ring_req(char *buf, size_t cap, uint64_t id); /* "S <id>" */

/* Handshake lines (SPEC 2), without their "\n" (a final "\r" tolerated).
 * Nonces and proofs are exactly 64 lowercase hex chars; returned pointers
 * point into line. */
bool tk_proto_parse_banner(const char *line, size_t len, bool peer, const char **snonce);
bool tk_proto_parse_auth(const char *line, size_t len, const char **cnonce, const char **cproof);
/* The peer port's AUTH (TICKETING-PEER/2, core/handshake.h): a fourth
 * word names the peer address the dialler meant to reach, 1 to
 * TK_PROTO_PEER_ADDR_MAX visible bytes (*to is not NUL-terminated). */
#define TK_PROTO_PEER_ADDR_MAX 255
bool tk_proto_parse_peer_auth(const char *line,
                              size_t len,
                              const char **cnonce,
                              const char **cproof,
                              const char **to,
                              size_t *to_len);
bool tk_proto_parse_ok(const char *line,
                       size_t len,
                       const char **sproof,
                       uint64_t *node_id,
                       uint64_t domain[2]);
size_t tk_proto_fmt_banner(char *buf, size_t cap, bool peer, const char *snonce);
size_t tk_proto_fmt_auth(char *buf, size_t cap, const char *cnonce, const char *cproof);
size_t tk_proto_fmt_peer_auth(char *buf,
                              size_t cap,
                              const char *cnonce,
                              const char *cproof,
                              const char *to,
                              size_t to_len);
/* node-id as 16 hex chars; domain as 32 hex chars: domain[1] then domain[0],
 * each as 16 hex digits (big-endian text of the 128-bit value). */
size_t tk_proto_fmt_ok(char *buf,
                       size_t cap,
                       const char *sproof,
                       uint64_t node_id,
                       const uint64_t domain[2]);

/* Writes a u64 in decimal; returns digits written (at most 20). */
size_t tk_proto_u64(char *buf, uint64_t v);

#endif
