/* Stress of the producer wakeup of the SPSC rings (net/ring.h), meant for
 * TSan too (Criterion cannot run there). Both threads sleep only in poll()
 * on their eventfds: the consumer on the one the outbox signals, the
 * producer, whenever its outbox holds overflow after a flush, on its own
 * one, which the consumer writes when it frees space (want_space). A lost
 * wakeup on either side shows as a poll() that runs into its 5 s timeout;
 * order and content of every message are checked as in stress_ring.c.
 * Exit 0 pass, 1 fail. */
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "net/ring.h"

#ifdef TK_TSAN
#define COUNT 300000u
#else
#define COUNT 3000000u
#endif
#define TIMEOUT_MS 5000
#define OVERFLOW_MAX 48 /* the producer sleeps when this much waits */

static struct tk_ring ring;
static struct tk_wake consumer_wake, producer_wake;
static _Atomic int timeouts;
static uint64_t producer_sleeps;

static uint32_t msg_len(uint64_t i)
{
    return (uint32_t)(9 + (i * 7919u) % 300u); /* the id, then at least one byte */
}

/* Blocks until fd is readable; false after TIMEOUT_MS. Resets the count. */
static bool sleep_on(int fd)
{
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    int rc = poll(&pfd, 1, TIMEOUT_MS);
    uint64_t v;
    ssize_t n = read(fd, &v, sizeof(v));
    (void)n;
    return rc == 1;
}

static void *producer(void *arg)
{
    (void)arg;
    struct tk_outbox ob;
    tk_outbox_init(&ob, &ring, &consumer_wake, COUNT);
    tk_outbox_set_producer(&ob, &producer_wake);
    for (uint64_t i = 0; i < COUNT; i++) {
        uint32_t len = msg_len(i);
        uint8_t *p = tk_outbox_put(&ob, 1, len);
        memcpy(p, &i, 8);
        memset(p + 8, (int)(i & 0xff), len - 8);
        if (i % 16 != 0 && ob.queued < OVERFLOW_MAX)
            continue;
        tk_outbox_flush(&ob);
        while (ob.queued >= OVERFLOW_MAX) {
            if (atomic_load(&timeouts))
                goto out; /* the consumer gave up */
            producer_sleeps++;
            if (!sleep_on(producer_wake.fd)) {
                fprintf(stderr, "stress_ring_wake: producer not woken in %d ms (message %llu)\n",
                        TIMEOUT_MS, (unsigned long long)i);
                atomic_fetch_add(&timeouts, 1);
            }
            tk_outbox_flush(&ob);
        }
    }
    while (tk_outbox_busy(&ob) && !atomic_load(&timeouts)) {
        tk_outbox_flush(&ob);
        if (tk_outbox_busy(&ob) && !sleep_on(producer_wake.fd))
            atomic_fetch_add(&timeouts, 1);
    }
    tk_outbox_flush(&ob);
out:
    tk_outbox_free(&ob);
    return NULL;
}

int main(void)
{
    if (tk_ring_init(&ring, 1u << 13) != TK_OK || tk_wake_init(&consumer_wake) != TK_OK ||
        tk_wake_init(&producer_wake) != TK_OK)
        return 1;
    pthread_t t;
    pthread_create(&t, NULL, producer, NULL);
    uint64_t next = 0, consumer_sleeps = 0;
    int failures = 0;
    while (next < COUNT && !failures && atomic_load(&timeouts) == 0) {
        tk_wake_clear(&consumer_wake);
        const struct tk_ring_msg *m;
        bool any = false;
        while ((m = tk_ring_peek(&ring)) != NULL) {
            uint64_t i;
            memcpy(&i, m->data, 8);
            if (i != next || m->len != msg_len(i) || m->kind != 1 ||
                m->data[m->len - 1] != (uint8_t)(i & 0xff)) {
                fprintf(stderr, "stress_ring_wake: message %llu out of order or corrupt\n",
                        (unsigned long long)next);
                failures++;
                break;
            }
            tk_ring_pop(&ring, m);
            next++;
            any = true;
            /* Now and then stop early, as the Raft thread does when its
             * log is full: tk_ring_pop_done() must still wake the producer. */
            if (next % 97 == 0)
                break;
        }
        tk_ring_pop_done(&ring);
        if (!any && next < COUNT) {
            consumer_sleeps++;
            if (!sleep_on(consumer_wake.fd)) {
                fprintf(stderr, "stress_ring_wake: consumer not woken in %d ms (message %llu)\n",
                        TIMEOUT_MS, (unsigned long long)next);
                atomic_fetch_add(&timeouts, 1);
            }
        }
    }
    if (failures) /* the producer leaves at its next wakeup or timeout */
        atomic_fetch_add(&timeouts, 1);
    pthread_join(t, NULL);
    tk_ring_free(&ring);
    tk_wake_close(&producer_wake);
    tk_wake_close(&consumer_wake);
    int bad = failures + atomic_load(&timeouts);
    printf(
        "stress_ring_wake: %llu messages, producer slept %llu times, consumer %llu; %d "
        "failures\n",
        (unsigned long long)next, (unsigned long long)producer_sleeps,
        (unsigned long long)consumer_sleeps, bad);
    return bad ? 1 : 0;
}
