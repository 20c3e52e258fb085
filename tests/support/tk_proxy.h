/* Test support: a small fault-injecting TCP proxy that runs in a thread of
 * the test process. It forwards 127.0.0.1:<its port> to 127.0.0.1:<target>
 * and, on command, cuts connections, holds bytes in either direction, cuts a
 * connection after N more client->server bytes, or refuses connections
 * (accept, then close at once). Every accept is timestamped, so a test can
 * watch a client's reconnect schedule.
 *
 * Control calls may come from any thread; each returns once the proxy
 * thread has applied it, so "cut now" means the sockets are closed when the
 * call returns. Tests only: failures return NULL/false, nothing is hidden.
 */
#ifndef TK_PROXY_H
#define TK_PROXY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct tk_proxy;

/* Listens on a free 127.0.0.1 port; forwards to 127.0.0.1:target_port.
 * NULL on failure. */
struct tk_proxy *tk_proxy_start(uint32_t target_port);
/* Closes every connection and the listener, joins the thread, frees. */
void tk_proxy_stop(struct tk_proxy *p);
uint32_t tk_proxy_port(const struct tk_proxy *p);

/* Closes every live connection (both sides) now. Returns how many. */
unsigned tk_proxy_cut_all(struct tk_proxy *p);
/* Closes the oldest live connection now. False if there was none. */
bool tk_proxy_cut_one(struct tk_proxy *p);
/* Stops (true) or resumes (false) forwarding in each direction, on every
 * connection, current and future. Held bytes wait in the kernel buffers
 * and flow again once resumed. */
void tk_proxy_hold(struct tk_proxy *p, bool client_to_server, bool server_to_client);
/* Each current connection forwards at most n more client->server bytes,
 * then is cut (n = 0: cut at its next client byte). */
void tk_proxy_drop_after(struct tk_proxy *p, uint64_t n);
/* Each connection accepted from now on forwards at most c2s bytes
 * client->server and s2c bytes server->client, then holds that direction
 * for good (UINT64_MAX: no limit, the default). Lets a test hold what comes
 * after a handshake of known length. */
void tk_proxy_hold_after(struct tk_proxy *p, uint64_t c2s, uint64_t s2c);
/* Refuse mode: new connections are accepted and closed at once. */
void tk_proxy_refuse(struct tk_proxy *p, bool on);

/* Live connections now. */
unsigned tk_proxy_live(struct tk_proxy *p);
/* Connections accepted so far; up to cap accept times (tk_test_ms clock)
 * into times_ms (may be NULL). */
size_t tk_proxy_accepts(struct tk_proxy *p, uint64_t *times_ms, size_t cap);
/* Bytes forwarded client->server so far, over all connections. */
uint64_t tk_proxy_bytes_c2s(struct tk_proxy *p);

#endif
