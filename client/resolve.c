/* Host name lookups for the I/O thread. getaddrinfo() blocks (a slow DNS
 * server can hold it for seconds), so it runs on its own thread, started
 * only when some address is not an IP literal. The I/O thread asks with
 * cl_resolve_ask() and collects answers after an eventfd wake-up; a lookup
 * is redone at every connection attempt, since a restarted node (a new pod)
 * may come back under a new IP.
 */
#include "client/internal.h"

#include <netdb.h>
#include <stdio.h>
#include <string.h>

static void resolve_one(struct cl_lookup *l, const char *host, const char *port)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    l->ok = false;
    if (getaddrinfo(host, port, &hints, &res) != 0 || res == NULL)
        return;
    if (res->ai_addrlen <= sizeof l->sa) {
        memset(&l->sa, 0, sizeof l->sa);
        memcpy(&l->sa, res->ai_addr, res->ai_addrlen);
        l->sa_len = (socklen_t)res->ai_addrlen;
        l->ok = true;
    }
    freeaddrinfo(res);
}

static void *resolve_main(void *arg)
{
    struct tk_client *c = arg;
    pthread_mutex_lock(&c->rmu);
    for (;;) {
        int pick = -1;
        for (int i = 0; i < CL_CONNS_MAX && pick < 0; i++)
            if (c->lookups[i].state == 1)
                pick = i;
        if (pick < 0) {
            if (c->resolver_stop)
                break;
            pthread_cond_wait(&c->rcond, &c->rmu);
            continue;
        }
        struct cl_lookup l = c->lookups[pick];
        pthread_mutex_unlock(&c->rmu);
        resolve_one(&l, l.host, l.port);
        pthread_mutex_lock(&c->rmu);
        /* Asked again meanwhile (another address)? Then this answer is stale:
         * leave the request to be served next. */
        if (c->lookups[pick].state == 1 && strcmp(c->lookups[pick].host, l.host) == 0 &&
            strcmp(c->lookups[pick].port, l.port) == 0) {
            l.state = 2;
            c->lookups[pick] = l;
            pthread_mutex_unlock(&c->rmu);
            cl_wake(c);
            pthread_mutex_lock(&c->rmu);
        }
    }
    pthread_mutex_unlock(&c->rmu);
    return NULL;
}

int cl_resolve_ask(struct tk_client *c, unsigned index, const char *host, const char *port)
{
    int rc = 0;
    TK_ASSERT(index < CL_CONNS_MAX);
    pthread_mutex_lock(&c->rmu);
    if (!c->resolver_started) {
        if (pthread_create(&c->resolver, NULL, resolve_main, c) == 0)
            c->resolver_started = true;
        else
            rc = -1;
    }
    if (rc == 0) {
        struct cl_lookup *l = &c->lookups[index];
        snprintf(l->host, sizeof l->host, "%s", host);
        snprintf(l->port, sizeof l->port, "%s", port);
        l->state = 1;
        pthread_cond_signal(&c->rcond);
    }
    pthread_mutex_unlock(&c->rmu);
    return rc;
}

void cl_resolve_collect(struct tk_client *c, uint64_t now_us)
{
    struct cl_lookup done[CL_CONNS_MAX];
    bool have[CL_CONNS_MAX] = {false};
    pthread_mutex_lock(&c->rmu);
    for (unsigned i = 0; i < CL_CONNS_MAX; i++) {
        if (c->lookups[i].state == 2) {
            done[i] = c->lookups[i];
            have[i] = true;
            c->lookups[i].state = 0;
        }
    }
    pthread_mutex_unlock(&c->rmu);
    for (unsigned i = 0; i < CL_CONNS_MAX; i++)
        if (have[i] && i < c->nconns)
            cl_conn_lookup_done(c->conns[i], &done[i], now_us);
}

void cl_resolve_stop(struct tk_client *c)
{
    pthread_mutex_lock(&c->rmu);
    c->resolver_stop = true;
    bool started = c->resolver_started;
    pthread_cond_signal(&c->rcond);
    pthread_mutex_unlock(&c->rmu);
    if (started)
        pthread_join(c->resolver, NULL);
}
