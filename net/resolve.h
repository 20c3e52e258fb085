/* Name lookups off the calling thread: a small pool of resolver threads
 * that run getaddrinfo() for the Raft thread's outbound peer links, so a
 * slow DNS answer never stalls its heartbeats.
 *
 * A job is named by a small number the caller chooses (the peer link's
 * slot, below TK_RESOLVE_JOBS_MAX); at most one lookup per job is queued
 * or running. A finished lookup writes the caller's wake eventfd, and the
 * caller collects it on its own thread (tk_resolver_collect).
 *
 * Threads: tk_resolver_create, _submit, _collect and _release are the
 * owner's (one thread); the resolver threads are this module's own. The
 * pool is freed by whichever lets go of it last, because a thread blocked
 * in getaddrinfo() cannot be interrupted and shutdown must not wait for
 * it: after tk_resolver_release() no thread touches wake_fd.
 */
#ifndef TK_NET_RESOLVE_H
#define TK_NET_RESOLVE_H

#include <sys/socket.h>

#include "core/tk.h"
#include "net/config.h" /* TK_ADDR_MAX */

#define TK_RESOLVE_JOBS_MAX 64 /* job numbers 0..63: one per peer link slot */
/* Lookups at once: one per peer of a 5-member cluster, so one unready
 * pod's slow name cannot hold up the lookups of the others. */
#define TK_RESOLVE_THREADS_MAX 4

struct tk_resolver;

/* A pool that writes wake_fd (an eventfd) for each finished lookup and
 * first sleeps delay_ms before each one (a test hook; 0 normally). No
 * thread starts before the first job. NULL when out of memory. */
struct tk_resolver *tk_resolver_create(int wake_fd, uint32_t delay_ms);

/* Queues a lookup of host:port as job (which must have none outstanding),
 * starting a thread if every running one is busy. TK_OK, or TK_EIO if no
 * thread can run at all (the job is then not queued). */
int tk_resolver_submit(struct tk_resolver *rs, uint32_t job, const char *host, uint32_t port);

/* Calls done once for every finished lookup, with rc TK_OK and the first
 * address getaddrinfo() gave for a TCP connection, or rc TK_EIO (sa then
 * unset). done runs under the pool's lock: it must not call back into the
 * pool (preparing SQEs is fine). Costs one atomic load while none
 * finished. */
void tk_resolver_collect(struct tk_resolver *rs,
                         void *ctx,
                         void (*done)(void *ctx,
                                      uint32_t job,
                                      int rc,
                                      const struct sockaddr_storage *sa,
                                      socklen_t salen));

/* The owner lets go (NULL is fine): lookups still running finish on their
 * own threads and are dropped. */
void tk_resolver_release(struct tk_resolver *rs);

/* A numeric address (IPv4 or IPv6 literal) needs no lookup: getaddrinfo()
 * with AI_NUMERICHOST never asks a resolver, so any thread may call this.
 * False if host is not one. */
bool tk_resolve_numeric(const char *host,
                        uint32_t port,
                        struct sockaddr_storage *sa,
                        socklen_t *salen);

#endif
