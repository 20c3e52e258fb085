/* Test support: a test's own link to a node's peer port, as a member or
 * an operator would open it: the peer handshake (core/handshake.c) over a
 * plain tk_tc, then Raft frames. For tests of what an authenticated peer
 * (one holding the peer secret) can and cannot make a node do. */
#ifndef TK_TEST_PEER_H
#define TK_TEST_PEER_H

#include "core/handshake.h"
#include "raft/wire.h"
#include "tests/support/tk_test.h"

/* Connects to 127.0.0.1:port and runs the handshake meant for `to` with
 * the peer secret in secret_file. Returns 0 (hs holds the finished
 * handshake), -1 if no banner or answer came within timeout_ms (or the
 * connection failed), -2 if the node refused (E - auth) or its proof was
 * wrong. c is left open on 0 only. */
int tk_peer_open(struct tk_tc *c,
                 struct tk_hs *hs,
                 uint32_t port,
                 const char *to,
                 const char *secret_file,
                 int timeout_ms);
/* Encodes and sends one frame. 0 or -1. */
int tk_peer_send(struct tk_tc *c, const struct tk_wire_frame *f);
/* Whether a new connection to the peer port gets a banner line within
 * timeout_ms (the node has a link slot and answers). */
bool tk_peer_banner(uint32_t port, int timeout_ms);

#endif
