/* Stress of the SPSC rings and wakeups between two threads (runs under
 * TSan too). A producer sends numbered messages of varying length through a
 * small ring, with overflow through an outbox; the consumer checks order,
 * length and content of every message. Exit 0 pass, 1 fail. */
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "net/ring.h"

#define COUNT 2000000u

static struct tk_ring ring;
static struct tk_wake wake;
static int failures;

static uint32_t msg_len(uint64_t i)
{
    return (uint32_t)(8 + (i * 7919u) % 200u);
}

static void *producer(void *arg)
{
    (void)arg;
    struct tk_outbox ob;
    tk_outbox_init(&ob, &ring, &wake, COUNT);
    for (uint64_t i = 0; i < COUNT; i++) {
        uint32_t len = msg_len(i);
        uint8_t *p = tk_outbox_put(&ob, 1, len);
        memcpy(p, &i, 8);
        memset(p + 8, (int)(i & 0xff), len - 8);
        if (i % 64 == 0)
            tk_outbox_flush(&ob);
    }
    while (tk_outbox_busy(&ob)) {
        tk_outbox_flush(&ob);
        usleep(100);
    }
    tk_outbox_flush(&ob);
    return NULL;
}

int main(void)
{
    if (tk_ring_init(&ring, 1u << 14) != TK_OK || tk_wake_init(&wake) != TK_OK)
        return 1;
    pthread_t t;
    pthread_create(&t, NULL, producer, NULL);
    uint64_t next = 0;
    while (next < COUNT) {
        struct pollfd pfd = {.fd = wake.fd, .events = POLLIN};
        poll(&pfd, 1, 10);
        uint64_t v;
        if (read(wake.fd, &v, sizeof(v)) < 0) {
            /* nothing to read: timeout round */
        }
        tk_wake_clear(&wake);
        const struct tk_ring_msg *m;
        while ((m = tk_ring_peek(&ring)) != NULL) {
            uint64_t i;
            memcpy(&i, m->data, 8);
            if (i != next || m->len != msg_len(i) || m->kind != 1) {
                fprintf(stderr, "stress_ring: message %llu out of order or corrupt\n",
                        (unsigned long long)next);
                failures++;
                break;
            }
            for (uint32_t k = 8; k < m->len; k++)
                if (m->data[k] != (uint8_t)(i & 0xff)) {
                    failures++;
                    break;
                }
            tk_ring_pop(&ring, m);
            next++;
        }
        if (failures)
            break;
    }
    pthread_join(t, NULL);
    tk_ring_free(&ring);
    tk_wake_close(&wake);
    printf("stress_ring: %llu messages, %d failures\n", (unsigned long long)next, failures);
    return failures ? 1 : 0;
}
