/* Peer frames (SPEC 9): pure encoding and decoding, no I/O.
 *
 * Every frame, integers little-endian:
 *     u32 length | u8 type | u64 domain_lo | u64 domain_hi | u64 sender | u64 term | payload
 * `length` counts the bytes after itself (type through payload) and is at
 * most TK_WIRE_FRAME_MAX (16 MiB). Strings are u16 length + bytes. There
 * are no trailing bytes: a payload that does not end exactly at `length`
 * is malformed.
 *
 * Payloads by type (struct tk_raft_msg field names in brackets):
 *   1 PREVOTE, 2 VOTE:   u64 last_index | u64 last_term | u8 flags (bit0 transfer)
 *                        (PREVOTE: the header term is the term it would campaign in)
 *   3 VOTE_REPLY:        u8 pre | u8 granted                      (each 0 or 1)
 *   4 APPEND:            u64 prev_index | u64 prev_term | u64 commit | u64 seq | u32 n |
 *                        n x entry; entry = u64 term | u8 type | u64 token_first |
 *                        u32 token_count | u32 len | len bytes. Entry indexes are
 *                        implicit: prev_index + 1, + 2, ...
 *   5 APPEND_REPLY:      u8 success | u64 index | u64 hint | u64 seq
 *   6 SNAPSHOT:          u64 index | u64 term | u64 token_next | u64 total | u64 offset |
 *                        config (tk_raft_config_encode) | u32 len | len bytes
 *   7 SNAPSHOT_REPLY:    u64 index | u64 offset | u8 done
 *   8 TIMEOUT_NOW:       (empty)
 *   9 JOIN:              str peer_addr | str client_addr          (sender = the new NodeId)
 *  10 JOIN_REPLY:        u8 status | u64 leader_id | str leader_peer_addr
 *                        (status 4, REMOVED: the receiver is not a member)
 *  11 PROBE:             u64 peers_hash | str peer_addr | str client_addr | u8 flags
 *  12 PROBE_REPLY:       u8 flags | u64 peers_hash | u64 leader_id |
 *                        str leader_peer_addr | str leader_client_addr | u64 token_next
 *  13 REMOVE:            u64 id (non-zero; answered with JOIN_REPLY)
 *  14 BOOT:              u8 phase (1..6) | u64 round (non-zero) | u64 ballot_id (non-zero) |
 *                        u64 peers_hash | u64 acc_round | u64 acc_id | u64 token_floor |
 *                        u64 token_first | u8 has_config | config if has_config
 * Strings of JOIN/PROBE are visible ASCII of at most TK_RAFT_ADDR_MAX bytes;
 * JOIN's and PROBE's own addresses are non-empty, a leader's may be empty
 * (unknown). A fresh node (no domain yet) sends domain 0:0.
 *
 * The decoder validates everything (the bytes come from the network) but
 * not the domain: the caller compares it with its own and closes the
 * connection on a mismatch (SPEC 9).
 */
#ifndef TK_RAFT_WIRE_H
#define TK_RAFT_WIRE_H

#include "core/tk.h"
#include "raft/raft.h"

#define TK_WIRE_FRAME_MAX (16u << 20) /* bytes after the length field */
#define TK_WIRE_LENGTH_LEN 4
#define TK_WIRE_HEADER_LEN 33 /* type + domain + sender + term */
#define TK_WIRE_ENTRY_HEADER_LEN 25
/* Entries a decoder scratch needs room for: every Append the core sends
 * fits (TK_RAFT_APPEND_ENTRIES_MAX); frames with more are rejected. */
#define TK_WIRE_ENTRIES_MAX TK_RAFT_APPEND_ENTRIES_MAX

_Static_assert(TK_RAFT_ENTRY_BYTES_MAX + TK_WIRE_ENTRY_HEADER_LEN + 64 < TK_WIRE_FRAME_MAX,
               "one entry must fit in a frame");
_Static_assert((8u << 20) + TK_RAFT_CONFIG_ENCODED_MAX + 64 < TK_WIRE_FRAME_MAX,
               "a snapshot chunk (at most 8 MiB) must fit in a frame");

/* One frame: the domain of the header plus the message (sender = msg.from,
 * term = msg.term; msg.to is not on the wire and decodes as 0). */
struct tk_wire_frame {
    uint64_t domain_lo;
    uint64_t domain_hi;
    struct tk_raft_msg msg;
};

/* Where the decoder puts what does not fit in the frame struct. The
 * decoded frame points into the input buffer (entry data, chunk data,
 * strings) and into this scratch (entry array, config), so both must
 * outlive the use of the frame. */
struct tk_wire_scratch {
    struct tk_raft_entry *entries; /* caller-allocated */
    uint32_t entries_cap;          /* TK_WIRE_ENTRIES_MAX accepts every core Append */
    struct tk_raft_config config;
};

/* Stream reassembly: with len bytes received so far at buf, sets *frame_len
 * to the size of the whole first frame (length field included) once the
 * length field is complete, or to 0 while it is not. Returns TK_EPROTO if
 * the length is below the header or above TK_WIRE_FRAME_MAX (close the
 * connection), else TK_OK. */
int tk_wire_frame_len(const uint8_t *buf, size_t len, size_t *frame_len);

/* Decodes exactly one whole frame of len bytes (length field included).
 * Returns TK_OK, or TK_EPROTO for anything malformed: length mismatch,
 * unknown type, truncated or trailing payload, out-of-range fields, bad
 * strings or config, more entries than the scratch holds. */
int tk_wire_decode(const uint8_t *buf,
                   size_t len,
                   struct tk_wire_frame *f,
                   struct tk_wire_scratch *scratch);

/* Size of the encoding of f, length field included. */
size_t tk_wire_encoded_len(const struct tk_wire_frame *f);

/* Encodes f into buf. Returns the bytes written, or 0 if cap is too small.
 * f must be well-formed (what tk_raft_step produces, or a JOIN/PROBE message
 * filled by the driver with valid strings); violations panic. */
size_t tk_wire_encode(const struct tk_wire_frame *f, uint8_t *buf, size_t cap);

/* The text a reply's mac covers, into out; its length. JOIN_REPLY:
 * "<status> <leader id, 16 hex> <leader peer address or ->"; SLOTS_REPLY:
 * "slots <status> <version, 16 hex> <leader id, 16 hex> <leader peer
 * address or -> <why or -> <counter, 16 hex>". The sender and the receiver (ticketctl
 * remove-member, ring apply) make it the same way. */
#define TK_WIRE_REPLY_TEXT_MAX (6 + 2 + 17 + 17 + 256 + 256 + 17)
size_t tk_wire_reply_text(const struct tk_raft_msg *m, char *out, size_t cap);

#endif
