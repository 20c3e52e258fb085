/* Test support: the fault-injecting TCP proxy (see tk_proxy.h).
 *
 * One thread, one poll() loop over the listener, a wake pipe and every
 * connection pair. Control calls set fields under the mutex, bump cmd_seq,
 * wake the thread and wait until it reports done_seq >= their sequence:
 * commands are applied between two poll rounds, so a cut is complete when
 * the call returns. Bytes are forwarded with a blocking send (with a send
 * timeout), which is plenty for the small volumes of the tests.
 */
#include "tests/support/tk_proxy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tests/support/tk_test.h"

#define PROXY_PAIRS_MAX 64
#define PROXY_ACCEPTS_MAX 1024

struct proxy_pair {
    int cfd;             /* client side */
    int sfd;             /* server side */
    uint64_t c2s_budget; /* then cut; UINT64_MAX: unlimited */
    uint64_t allow[2];   /* c2s, s2c: then hold; UINT64_MAX: unlimited */
    uint64_t opened_seq;
};

struct tk_proxy {
    pthread_t thread;
    int lfd;
    int wake[2];
    uint32_t port;
    uint32_t target;

    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* commands (under mu) */
    uint64_t cmd_seq;
    uint64_t done_seq;
    bool stop;
    bool hold_c2s;
    bool hold_s2c;
    bool refuse;
    unsigned cut_all; /* requests pending */
    unsigned cut_one;
    bool drop_pending;
    uint64_t drop_n;
    uint64_t new_allow[2];
    /* results (under mu) */
    unsigned last_cut;
    unsigned live;
    size_t accepts;
    uint64_t accept_ms[PROXY_ACCEPTS_MAX];
    uint64_t bytes_c2s;

    /* proxy thread only */
    struct proxy_pair pairs[PROXY_PAIRS_MAX];
    unsigned npairs;
    uint64_t opened;
};

static int proxy_listen(uint32_t *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    socklen_t len = sizeof a;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 128) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    *port = ntohs(a.sin_port);
    return fd;
}

static int proxy_connect(uint32_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

static void proxy_tune(int fd)
{
    int one = 1;
    struct timeval tv = {.tv_sec = 2};
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

static void pair_close(struct tk_proxy *p, unsigned i)
{
    close(p->pairs[i].cfd);
    close(p->pairs[i].sfd);
    p->pairs[i] = p->pairs[--p->npairs]; /* order is kept by opened_seq */
}

static void proxy_accept(struct tk_proxy *p, bool refuse)
{
    int cfd = accept4(p->lfd, NULL, NULL, SOCK_CLOEXEC);
    if (cfd < 0)
        return;
    pthread_mutex_lock(&p->mu);
    if (p->accepts < PROXY_ACCEPTS_MAX)
        p->accept_ms[p->accepts] = tk_test_ms();
    p->accepts++;
    pthread_mutex_unlock(&p->mu);
    int sfd = refuse ? -1 : proxy_connect(p->target);
    if (sfd < 0 || p->npairs == PROXY_PAIRS_MAX) {
        close(cfd);
        if (sfd >= 0)
            close(sfd);
        return;
    }
    proxy_tune(cfd);
    proxy_tune(sfd);
    pthread_mutex_lock(&p->mu);
    p->pairs[p->npairs++] = (struct proxy_pair){.cfd = cfd,
                                                .sfd = sfd,
                                                .c2s_budget = UINT64_MAX,
                                                .allow = {p->new_allow[0], p->new_allow[1]},
                                                .opened_seq = p->opened++};
    pthread_mutex_unlock(&p->mu);
}

/* Forwards what is readable on one side; false when the pair must close. */
static bool pair_forward(struct tk_proxy *p, struct proxy_pair *q, bool c2s)
{
    char buf[16384];
    size_t want = sizeof buf;
    if (c2s && q->c2s_budget < want)
        want = (size_t)q->c2s_budget;
    if (q->allow[!c2s] < want)
        want = (size_t)q->allow[!c2s];
    if (want == 0)
        return q->allow[!c2s] == 0; /* held for good: keep the pair */
    ssize_t n = recv(c2s ? q->cfd : q->sfd, buf, want, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
        return true;
    if (n <= 0)
        return false;
    if (send(c2s ? q->sfd : q->cfd, buf, (size_t)n, MSG_NOSIGNAL) != n)
        return false;
    if (q->allow[!c2s] != UINT64_MAX)
        q->allow[!c2s] -= (uint64_t)n;
    if (c2s) {
        if (q->c2s_budget != UINT64_MAX)
            q->c2s_budget -= (uint64_t)n;
        pthread_mutex_lock(&p->mu);
        p->bytes_c2s += (uint64_t)n;
        pthread_mutex_unlock(&p->mu);
        if (q->c2s_budget == 0)
            return false;
    }
    return true;
}

static unsigned proxy_oldest(struct tk_proxy *p)
{
    unsigned best = 0;
    for (unsigned i = 1; i < p->npairs; i++)
        if (p->pairs[i].opened_seq < p->pairs[best].opened_seq)
            best = i;
    return best;
}

/* Applies pending commands; returns the flags for this round. */
static bool proxy_commands(struct tk_proxy *p, bool *hold_c2s, bool *hold_s2c, bool *refuse)
{
    pthread_mutex_lock(&p->mu);
    unsigned cut = 0;
    while (p->cut_all > 0) {
        p->cut_all--;
        while (p->npairs > 0) {
            pair_close(p, 0);
            cut++;
        }
    }
    while (p->cut_one > 0) {
        p->cut_one--;
        if (p->npairs > 0) {
            pair_close(p, proxy_oldest(p));
            cut++;
        }
    }
    if (p->drop_pending) {
        p->drop_pending = false;
        for (unsigned i = 0; i < p->npairs; i++)
            p->pairs[i].c2s_budget = p->drop_n;
    }
    p->last_cut = cut;
    *hold_c2s = p->hold_c2s;
    *hold_s2c = p->hold_s2c;
    *refuse = p->refuse;
    bool stop = p->stop;
    p->live = p->npairs;
    p->done_seq = p->cmd_seq;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    return stop;
}

static void *proxy_main(void *arg)
{
    struct tk_proxy *p = arg;
    struct pollfd fds[2 + 2 * PROXY_PAIRS_MAX];
    bool hold_c2s, hold_s2c, refuse;
    while (!proxy_commands(p, &hold_c2s, &hold_s2c, &refuse)) {
        /* A pair with a zero budget is cut at once: "after 0 more bytes". */
        for (unsigned i = 0; i < p->npairs;)
            if (p->pairs[i].c2s_budget == 0)
                pair_close(p, i);
            else
                i++;
        unsigned n = 0;
        fds[n++] = (struct pollfd){.fd = p->wake[0], .events = POLLIN};
        fds[n++] = (struct pollfd){.fd = p->lfd, .events = POLLIN};
        for (unsigned i = 0; i < p->npairs; i++) {
            struct proxy_pair *q = &p->pairs[i];
            bool c2s = !hold_c2s && q->allow[0] > 0, s2c = !hold_s2c && q->allow[1] > 0;
            fds[n++] = (struct pollfd){.fd = c2s ? q->cfd : -1, .events = POLLIN};
            fds[n++] = (struct pollfd){.fd = s2c ? q->sfd : -1, .events = POLLIN};
        }
        if (poll(fds, n, 100) <= 0)
            continue;
        if (fds[0].revents) {
            char tmp[64];
            ssize_t r = read(p->wake[0], tmp, sizeof tmp);
            (void)r;
        }
        /* Pairs first (their indexes match fds), then new connections. */
        for (unsigned i = p->npairs; i-- > 0;) {
            bool ok = true;
            if (fds[2 + 2 * i].revents)
                ok = pair_forward(p, &p->pairs[i], true);
            if (ok && fds[3 + 2 * i].revents)
                ok = pair_forward(p, &p->pairs[i], false);
            if (!ok)
                pair_close(p, i);
        }
        if (fds[1].revents)
            proxy_accept(p, refuse);
    }
    while (p->npairs > 0)
        pair_close(p, 0);
    return NULL;
}

struct tk_proxy *tk_proxy_start(uint32_t target_port)
{
    struct tk_proxy *p = calloc(1, sizeof *p);
    if (p == NULL)
        return NULL;
    p->target = target_port;
    p->lfd = proxy_listen(&p->port);
    if (p->lfd < 0 || pipe2(p->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
        if (p->lfd >= 0)
            close(p->lfd);
        free(p);
        return NULL;
    }
    p->new_allow[0] = UINT64_MAX;
    p->new_allow[1] = UINT64_MAX;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    if (pthread_create(&p->thread, NULL, proxy_main, p) != 0) {
        close(p->lfd);
        close(p->wake[0]);
        close(p->wake[1]);
        free(p);
        return NULL;
    }
    return p;
}

uint32_t tk_proxy_port(const struct tk_proxy *p)
{
    return p->port;
}

/* Sends the command set up under mu and waits until it was applied.
 * Called with mu held; returns with mu held. */
static void proxy_apply_locked(struct tk_proxy *p)
{
    uint64_t seq = ++p->cmd_seq;
    char one = 1;
    ssize_t w = write(p->wake[1], &one, 1);
    (void)w;
    while (p->done_seq < seq)
        pthread_cond_wait(&p->cv, &p->mu);
}

void tk_proxy_stop(struct tk_proxy *p)
{
    if (p == NULL)
        return;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    proxy_apply_locked(p);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->thread, NULL);
    close(p->lfd);
    close(p->wake[0]);
    close(p->wake[1]);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p);
}

unsigned tk_proxy_cut_all(struct tk_proxy *p)
{
    pthread_mutex_lock(&p->mu);
    p->cut_all++;
    proxy_apply_locked(p);
    unsigned n = p->last_cut;
    pthread_mutex_unlock(&p->mu);
    return n;
}

bool tk_proxy_cut_one(struct tk_proxy *p)
{
    pthread_mutex_lock(&p->mu);
    p->cut_one++;
    proxy_apply_locked(p);
    bool cut = p->last_cut > 0;
    pthread_mutex_unlock(&p->mu);
    return cut;
}

void tk_proxy_hold(struct tk_proxy *p, bool client_to_server, bool server_to_client)
{
    pthread_mutex_lock(&p->mu);
    p->hold_c2s = client_to_server;
    p->hold_s2c = server_to_client;
    proxy_apply_locked(p);
    pthread_mutex_unlock(&p->mu);
}

void tk_proxy_drop_after(struct tk_proxy *p, uint64_t n)
{
    pthread_mutex_lock(&p->mu);
    p->drop_pending = true;
    p->drop_n = n;
    proxy_apply_locked(p);
    pthread_mutex_unlock(&p->mu);
}

void tk_proxy_hold_after(struct tk_proxy *p, uint64_t c2s, uint64_t s2c)
{
    pthread_mutex_lock(&p->mu);
    p->new_allow[0] = c2s;
    p->new_allow[1] = s2c;
    proxy_apply_locked(p);
    pthread_mutex_unlock(&p->mu);
}

void tk_proxy_refuse(struct tk_proxy *p, bool on)
{
    pthread_mutex_lock(&p->mu);
    p->refuse = on;
    proxy_apply_locked(p);
    pthread_mutex_unlock(&p->mu);
}

unsigned tk_proxy_live(struct tk_proxy *p)
{
    pthread_mutex_lock(&p->mu);
    proxy_apply_locked(p); /* a fresh count, after this round's accepts and closes */
    unsigned n = p->live;
    pthread_mutex_unlock(&p->mu);
    return n;
}

size_t tk_proxy_accepts(struct tk_proxy *p, uint64_t *times_ms, size_t cap)
{
    pthread_mutex_lock(&p->mu);
    size_t n = p->accepts;
    for (size_t i = 0; times_ms != NULL && i < n && i < cap && i < PROXY_ACCEPTS_MAX; i++)
        times_ms[i] = p->accept_ms[i];
    pthread_mutex_unlock(&p->mu);
    return n;
}

uint64_t tk_proxy_bytes_c2s(struct tk_proxy *p)
{
    pthread_mutex_lock(&p->mu);
    uint64_t n = p->bytes_c2s;
    pthread_mutex_unlock(&p->mu);
    return n;
}
