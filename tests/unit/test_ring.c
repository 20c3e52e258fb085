/* Goal: the SPSC rings between threads (net/ring.h) keep every message
 * whole and in order through wraparound and padding, refuse a message when
 * full instead of overwriting, size themselves by thread count within the
 * memory budget, and wake a producer that sleeps with overflow as soon as
 * the consumer frees space, not at its next timer.
 *
 * Method: single-threaded checks of reserve/publish/peek/pop on small rings
 * (exact byte accounting), then two threads: a producer that fills its ring,
 * overflows, and blocks in poll() on its own eventfd with a 5 s timeout,
 * and a consumer that drains; the producer must return from poll() through
 * the eventfd (POLLIN, well before the timeout). The same handoff runs
 * under TSan as tests/stress/stress_ring_wake.c (Criterion cannot).
 */
#include <criterion/criterion.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "net/ring.h"

#define KIND 7u

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Bytes a message of len payload bytes occupies. */
static uint64_t rec(uint32_t len)
{
    return 8u + ((len + 7u) & ~7u);
}

static void fill(uint8_t *p, uint32_t len, uint64_t seq)
{
    for (uint32_t i = 0; i < len; i++)
        p[i] = (uint8_t)(seq * 31u + i);
}

static void check(const struct tk_ring_msg *m, uint32_t len, uint64_t seq)
{
    cr_assert_not_null(m, "message %llu missing", (unsigned long long)seq);
    cr_assert_eq(m->kind, KIND);
    cr_assert_eq(m->len, len, "message %llu: len %u, wanted %u", (unsigned long long)seq, m->len,
                 len);
    for (uint32_t i = 0; i < len; i++)
        cr_assert_eq(m->data[i], (uint8_t)(seq * 31u + i), "message %llu corrupt at byte %u",
                     (unsigned long long)seq, i);
}

/* True if the eventfd's counter is non-zero (and resets it). */
static bool fd_signalled(int fd)
{
    uint64_t v;
    return read(fd, &v, sizeof(v)) == (ssize_t)sizeof(v);
}

/* ---- sizing -------------------------------------------------------------- */

Test(ring, bytes_for_shrinks_with_threads_within_the_budget)
{
    size_t prev = SIZE_MAX;
    for (uint32_t n = 1; n <= 64; n++) {
        size_t b = tk_ring_bytes_for(n);
        uint64_t total = (uint64_t)n * (n + 1) * b;
        cr_assert_eq(b & (b - 1), 0, "n=%u: %zu is not a power of two", n, b);
        cr_assert_geq(b, (size_t)64 << 10, "n=%u", n);
        cr_assert_leq(b, (size_t)1 << 20, "n=%u", n);
        cr_assert_leq(b, prev, "n=%u: grew from %zu to %zu", n, prev, b);
        /* Within the budget unless already at the floor; never past
         * 64 threads at the floor (260 MiB). */
        cr_assert(total <= TK_RING_BUDGET_BYTES || b == TK_RING_BYTES_MIN, "n=%u: %llu bytes", n,
                  (unsigned long long)total);
        cr_assert_leq(total, (uint64_t)260 << 20, "n=%u", n);
        prev = b;
    }
    cr_assert_eq(tk_ring_bytes_for(2), (size_t)1 << 20, "few threads keep 1 MiB rings");
    cr_assert_eq(tk_ring_bytes_for(16), (size_t)256 << 10);
    cr_assert_eq(tk_ring_bytes_for(64), (size_t)64 << 10);
    cr_assert_eq(tk_ring_bytes_for(0), tk_ring_bytes_for(1));
    /* The smallest ring still carries the largest message. */
    struct tk_ring r;
    cr_assert_eq(tk_ring_init(&r, tk_ring_bytes_for(64)), TK_OK);
    cr_assert_not_null(tk_ring_reserve(&r, KIND, TK_RING_MSG_MAX));
    tk_ring_free(&r);
}

/* ---- one thread ---------------------------------------------------------- */

Test(ring, messages_appear_at_publish_in_order)
{
    struct tk_ring r;
    cr_assert_eq(tk_ring_init(&r, 4096), TK_OK);
    for (uint64_t s = 0; s < 5; s++)
        fill(tk_ring_reserve(&r, KIND, (uint32_t)(s * 3)), (uint32_t)(s * 3), s);
    cr_assert_null(tk_ring_peek(&r), "reserved but unpublished messages must stay hidden");
    tk_ring_publish(&r);
    cr_assert_eq(tk_ring_used(&r), rec(0) + rec(3) + rec(6) + rec(9) + rec(12));
    for (uint64_t s = 0; s < 5; s++) {
        const struct tk_ring_msg *m = tk_ring_peek(&r);
        check(m, (uint32_t)(s * 3), s);
        cr_assert_eq(tk_ring_peek(&r), m, "peek twice gives the same message");
        tk_ring_pop(&r, m);
    }
    cr_assert_null(tk_ring_peek(&r));
    cr_assert_eq(tk_ring_used(&r), 0);
    tk_ring_free(&r);
}

Test(ring, full_ring_returns_null_and_frees_on_pop)
{
    struct tk_ring r;
    cr_assert_eq(tk_ring_init(&r, 4096), TK_OK);
    /* 56-byte payloads: 64-byte records, exactly 64 fit. */
    for (uint64_t s = 0; s < 64; s++) {
        void *p = tk_ring_reserve(&r, KIND, 56);
        cr_assert_not_null(p, "record %llu of 64 should fit", (unsigned long long)s);
        fill(p, 56, s);
    }
    cr_assert_null(tk_ring_reserve(&r, KIND, 0), "a full ring takes nothing, not even a header");
    tk_ring_publish(&r);
    cr_assert_null(tk_ring_reserve(&r, KIND, 1));
    cr_assert_eq(tk_ring_used(&r), 4096);
    const struct tk_ring_msg *m = tk_ring_peek(&r);
    check(m, 56, 0);
    tk_ring_pop(&r, m);
    cr_assert_null(tk_ring_reserve(&r, KIND, 57), "65..72 bytes do not fit in 64 free");
    fill(tk_ring_reserve(&r, KIND, 56), 56, 64);
    tk_ring_publish(&r);
    for (uint64_t s = 1; s <= 64; s++) {
        m = tk_ring_peek(&r);
        check(m, 56, s);
        tk_ring_pop(&r, m);
    }
    cr_assert_null(tk_ring_peek(&r));
    tk_ring_free(&r);
}

Test(ring, padding_keeps_messages_contiguous_across_the_end)
{
    struct tk_ring r;
    cr_assert_eq(tk_ring_init(&r, 4096), TK_OK);
    /* Four records of 1008 bytes (1000 payload) end at offset 4032; the
     * fourth still fits before the end, so no padding yet. */
    for (uint64_t s = 0; s < 4; s++) {
        uint8_t *p = tk_ring_reserve(&r, KIND, 1000);
        cr_assert_not_null(p);
        cr_assert_eq(p - 8 - r.buf, (long)(s * 1008));
        fill(p, 1000, s);
    }
    tk_ring_publish(&r);
    /* 64 bytes are left before the end and 64 free in all: a 100-byte
     * message needs 64 of padding plus 112 at offset 0, which is only
     * there once the first record is popped. */
    cr_assert_null(tk_ring_reserve(&r, KIND, 100), "padding counts against the free space");
    const struct tk_ring_msg *m = tk_ring_peek(&r);
    check(m, 1000, 0);
    tk_ring_pop(&r, m);
    uint8_t *p = tk_ring_reserve(&r, KIND, 100);
    cr_assert_not_null(p);
    cr_assert_eq(p - 8 - r.buf, 0, "a message never wraps: it starts over at offset 0");
    fill(p, 100, 4);
    tk_ring_publish(&r);
    cr_assert_eq(tk_ring_used(&r), 3 * 1008 + 64 + rec(100), "padding is used until skipped");
    for (uint64_t s = 1; s < 4; s++) {
        m = tk_ring_peek(&r);
        check(m, 1000, s);
        tk_ring_pop(&r, m);
    }
    m = tk_ring_peek(&r);
    check(m, 100, 4); /* the padding record was skipped */
    tk_ring_pop(&r, m);
    cr_assert_null(tk_ring_peek(&r));
    cr_assert_eq(tk_ring_used(&r), 0);
    tk_ring_free(&r);
}

Test(ring, many_wraps_with_varied_and_largest_messages)
{
    struct tk_ring r;
    cr_assert_eq(tk_ring_init(&r, 4096), TK_OK);
    const uint32_t largest = 4096 / 4 - 8; /* the most a 4 KiB ring takes */
    uint64_t sent = 0, got = 0;
    for (int round = 0; round < 2000; round++) {
        uint32_t batch = 1 + (uint32_t)round % 5;
        for (uint32_t k = 0; k < batch; k++) {
            uint32_t len = (sent % 7 == 0) ? largest : (uint32_t)((sent * 2654435761u) % 500u);
            void *p = tk_ring_reserve(&r, KIND, len);
            if (!p)
                break;
            fill(p, len, sent);
            sent++;
        }
        tk_ring_publish(&r);
        const struct tk_ring_msg *m;
        while ((m = tk_ring_peek(&r)) != NULL && (round % 3 != 0 || got + 1 < sent)) {
            uint32_t len = (got % 7 == 0) ? largest : (uint32_t)((got * 2654435761u) % 500u);
            check(m, len, got);
            tk_ring_pop(&r, m);
            got++;
        }
    }
    cr_assert_gt(sent, 3000);
    cr_assert_gt(atomic_load(&r.head), (uint64_t)100 * 4096, "the indices wrapped many times");
    tk_ring_free(&r);
}

/* A 4 KiB ring, its consumer's wakeup and an outbox onto them. */
struct outbox_fixture {
    struct tk_ring r;
    struct tk_wake cw;
    struct tk_outbox o;
};

static void outbox_fixture_init(struct outbox_fixture *f, uint64_t limit)
{
    cr_assert_eq(tk_ring_init(&f->r, 4096), TK_OK);
    cr_assert_eq(tk_wake_init(&f->cw), TK_OK);
    tk_outbox_init(&f->o, &f->r, &f->cw, limit);
}

static void outbox_fixture_free(struct outbox_fixture *f)
{
    tk_outbox_free(&f->o);
    tk_wake_close(&f->cw);
    tk_ring_free(&f->r);
}

/* A follower's committed commands are published without a wakeup; the
 * next plain flush wakes the consumer for them even if it adds nothing. */
Test(ring, quiet_flush_publishes_without_waking_and_a_later_flush_wakes)
{
    struct outbox_fixture f;
    outbox_fixture_init(&f, 10);
    struct tk_ring *r = &f.r;
    struct tk_wake *cw = &f.cw;
    struct tk_outbox *o = &f.o;
    fill(tk_outbox_put(o, KIND, 24), 24, 1);
    tk_outbox_flush_quiet(o);
    cr_assert_not(fd_signalled(cw->fd), "a quiet flush writes no eventfd");
    const struct tk_ring_msg *m = tk_ring_peek(r);
    cr_assert_not_null(m, "but the message is published");
    check(m, 24, 1);
    tk_ring_pop(r, m);
    fill(tk_outbox_put(o, KIND, 24), 24, 2);
    tk_outbox_flush_quiet(o);
    cr_assert_not(fd_signalled(cw->fd));
    tk_outbox_flush(o); /* nothing new: still owes the consumer a wakeup */
    cr_assert(fd_signalled(cw->fd), "the next flush wakes the consumer");
    tk_wake_clear(cw);
    tk_outbox_flush(o);
    cr_assert_not(fd_signalled(cw->fd), "and only once");
    outbox_fixture_free(&f);
}

Test(ring, outbox_overflow_keeps_order_and_drains_on_flush)
{
    struct tk_ring r;
    struct tk_wake cw;
    cr_assert_eq(tk_ring_init(&r, 4096), TK_OK);
    cr_assert_eq(tk_wake_init(&cw), TK_OK);
    struct tk_outbox o;
    tk_outbox_init(&o, &r, &cw, 1000);
    for (uint64_t s = 0; s < 200; s++)
        fill(tk_outbox_put(&o, KIND, 56), 56, s); /* 64 fit, 136 overflow */
    cr_assert_eq(o.queued, 136);
    cr_assert(tk_outbox_busy(&o));
    tk_outbox_flush(&o);
    cr_assert(fd_signalled(cw.fd), "flush wakes the consumer");
    uint64_t got = 0;
    while (got < 200) {
        const struct tk_ring_msg *m;
        while ((m = tk_ring_peek(&r)) != NULL) {
            check(m, 56, got++);
            tk_ring_pop(&r, m);
        }
        /* While overflow waits, new messages queue behind it, never past. */
        if (got == 64)
            fill(tk_outbox_put(&o, KIND, 56), 56, 200);
        tk_outbox_flush(&o);
    }
    cr_assert_not(tk_outbox_busy(&o));
    tk_outbox_free(&o);
    tk_wake_close(&cw);
    tk_ring_free(&r);
}

Test(ring, consumer_writes_no_eventfd_unless_a_producer_waits)
{
    struct tk_ring r;
    struct tk_wake cw, pw;
    cr_assert_eq(tk_ring_init(&r, 4096), TK_OK);
    cr_assert_eq(tk_wake_init(&cw), TK_OK);
    cr_assert_eq(tk_wake_init(&pw), TK_OK);
    struct tk_outbox o;
    tk_outbox_init(&o, &r, &cw, 1000);
    tk_outbox_set_producer(&o, &pw);
    for (uint64_t s = 0; s < 10; s++)
        fill(tk_outbox_put(&o, KIND, 56), 56, s);
    tk_outbox_flush(&o);
    cr_assert_eq(atomic_load(&r.want_space), 0, "no overflow: nobody waits");
    const struct tk_ring_msg *m;
    while ((m = tk_ring_peek(&r)) != NULL)
        tk_ring_pop(&r, m);
    cr_assert_not(fd_signalled(pw.fd), "pops without a waiting producer cost no syscall");
    /* Overflow: the flag goes up, and the first drained batch wakes once. */
    for (uint64_t s = 0; s < 100; s++)
        fill(tk_outbox_put(&o, KIND, 56), 56, s);
    tk_outbox_flush(&o);
    cr_assert_eq(atomic_load(&r.want_space), 1);
    m = tk_ring_peek(&r);
    tk_ring_pop(&r, m);
    tk_ring_pop_done(&r);
    cr_assert(fd_signalled(pw.fd), "space freed while the producer waits: wake it");
    cr_assert_eq(atomic_load(&r.want_space), 0);
    tk_ring_pop_done(&r);
    while ((m = tk_ring_peek(&r)) != NULL)
        tk_ring_pop(&r, m);
    cr_assert_not(fd_signalled(pw.fd), "one wakeup per request");
    /* The producer moves the rest; with nothing left it withdraws. */
    tk_outbox_flush(&o);
    cr_assert_not(tk_outbox_busy(&o));
    cr_assert_eq(atomic_load(&r.want_space), 0);
    tk_outbox_free(&o);
    tk_wake_close(&pw);
    tk_wake_close(&cw);
    tk_ring_free(&r);
}

/* ---- two threads --------------------------------------------------------- */

struct handoff {
    struct tk_ring ring;
    struct tk_wake consumer, producer;
    int poll_rc;          /* the producer's poll() on its own eventfd */
    short revents;        /* its revents */
    uint64_t waited_ms;   /* how long it blocked there */
    uint64_t overflowed;  /* messages in overflow when it went to sleep */
    uint64_t sent, total; /* messages the producer put; all it will put */
};

static void *handoff_producer(void *arg)
{
    struct handoff *h = arg;
    struct tk_outbox o;
    tk_outbox_init(&o, &h->ring, &h->consumer, 1u << 20);
    tk_outbox_set_producer(&o, &h->producer);
    /* Fill the ring and overflow by half a ring more. */
    while (o.queued < 32) {
        fill(tk_outbox_put(&o, KIND, 56), 56, h->sent);
        h->sent++;
    }
    tk_outbox_flush(&o); /* publishes, wakes the consumer, asks for space */
    h->overflowed = o.queued;
    /* Sleep as a worker does: on its own eventfd, with a long timer. */
    uint64_t t0 = now_ms();
    struct pollfd pfd = {.fd = h->producer.fd, .events = POLLIN};
    h->poll_rc = poll(&pfd, 1, 5000);
    h->revents = pfd.revents;
    h->waited_ms = now_ms() - t0;
    while (tk_outbox_busy(&o)) {
        tk_outbox_flush(&o);
        if (tk_outbox_busy(&o)) {
            pfd.revents = 0;
            poll(&pfd, 1, 5000);
            fd_signalled(h->producer.fd);
        }
    }
    tk_outbox_flush(&o);
    tk_outbox_free(&o);
    return NULL;
}

Test(ring, consumer_wakes_a_producer_sleeping_with_overflow, .timeout = 30)
{
    static struct handoff h;
    memset(&h, 0, sizeof(h));
    cr_assert_eq(tk_ring_init(&h.ring, 4096), TK_OK);
    cr_assert_eq(tk_wake_init(&h.consumer), TK_OK);
    cr_assert_eq(tk_wake_init(&h.producer), TK_OK);
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, handoff_producer, &h), 0);
    uint64_t got = 0;
    uint64_t end = now_ms() + 20000;
    while (got < 64 + 32 && now_ms() < end) {
        tk_wake_clear(&h.consumer);
        const struct tk_ring_msg *m;
        bool any = false;
        while ((m = tk_ring_peek(&h.ring)) != NULL) {
            check(m, 56, got++);
            tk_ring_pop(&h.ring, m);
            any = true;
        }
        if (!any) {
            struct pollfd pfd = {.fd = h.consumer.fd, .events = POLLIN};
            poll(&pfd, 1, 1000);
            fd_signalled(h.consumer.fd);
        }
    }
    pthread_join(t, NULL);
    cr_assert_eq(got, h.sent, "every message arrived (%llu of %llu)", (unsigned long long)got,
                 (unsigned long long)h.sent);
    cr_assert_geq(h.overflowed, 32, "the producer slept with overflow");
    cr_assert_eq(h.poll_rc, 1, "the producer must be woken through its eventfd, not time out");
    cr_assert(h.revents & POLLIN);
    cr_assert_lt(h.waited_ms, 2000, "woken after %llu ms", (unsigned long long)h.waited_ms);
    tk_wake_close(&h.producer);
    tk_wake_close(&h.consumer);
    tk_ring_free(&h.ring);
}
