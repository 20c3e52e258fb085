/* Test support: one valid peer frame of each type, and the configuration
 * their Snapshot frames carry. Pointers in a frame stay valid until the
 * next call. */
#ifndef TK_WIRE_SAMPLE_H
#define TK_WIRE_SAMPLE_H

#include "raft/boot.h"
#include "raft/wire.h"

void tk_wire_sample_config(struct tk_raft_config *c);
struct tk_wire_frame tk_wire_sample(uint8_t type, const struct tk_raft_config *cfg);

#endif
