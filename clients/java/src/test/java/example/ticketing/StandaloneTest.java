package example.ticketing;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Consumer;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/** Every outcome a healthy standalone ticketingd gives, and the client's own refusals. */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
@Timeout(value = 30, unit = TimeUnit.SECONDS)
class StandaloneTest {
    private static final Duration S30 = Duration.ofSeconds(30);

    @TempDir
    static Path dir;
    private Path secret;
    private Servers.Node node;
    private TicketingClient c;
    private final List<TicketingClient> extra = new ArrayList<>();

    @BeforeAll
    void start() throws Exception {
        secret = Servers.writeSecret(dir, "client.secret");
        node = Servers.standalone(dir, secret);
        c = client(b -> b.owner("java-outcomes"));
    }

    @AfterAll
    void stop() throws Exception {
        for (TicketingClient x : extra) {
            x.close();
        }
        node.close();
    }

    private TicketingClient client(Consumer<TicketingClient.Builder> mod) {
        TicketingClient.Builder b = TicketingClient.builder().addrs(node.addr()).secretFile(secret);
        mod.accept(b);
        TicketingClient x = b.build();
        extra.add(x);
        return x;
    }

    @Test
    void grantQueryReleasePing() {
        assertFalse(c.ping().isNegative());
        long before = System.nanoTime();
        Lease g = c.acquire("o-grant", S30, Duration.ofSeconds(5));
        long after = System.nanoTime();
        assertEquals("o-grant", g.key());
        assertTrue(g.token() != 0);
        // Counted from the first write: after the call began, before it ended.
        long left = g.remaining().toNanos();
        assertTrue(left <= S30.toNanos() - (System.nanoTime() - after) && left > S30.toNanos() - (System.nanoTime() - before),
                "lease left " + left);
        assertFalse(g.isExpired());
        QueryResult q = c.query("o-grant");
        assertEquals(new QueryResult("o-grant", true, "java-outcomes", g.token(), 0), q);
        assertThrows(BusyException.class, () -> c.acquire("o-grant", S30, Duration.ZERO));
        long t0 = System.nanoTime();
        WaitTimeoutException te = assertThrows(WaitTimeoutException.class,
                () -> c.acquire("o-grant", S30, Duration.ofMillis(300)), "acquire is not reentrant");
        assertEquals(Outcome.TIMEOUT, te.outcome());
        assertTrue(System.nanoTime() - t0 >= 300_000_000L, "T before the wait ran out");
        TicketingClient other = client(b -> { });
        NotHeldException nh = assertThrows(NotHeldException.class, () -> other.release(g), "another owner");
        assertFalse(nh.resent());
        c.release(g);
        assertThrows(NotHeldException.class, () -> c.releaseToken("o-grant", g.token()), "released already");
        assertEquals(new QueryResult("o-grant", false, null, 0, 0), c.query("o-grant"));
        Lease g2 = c.acquire("o-grant", S30, Duration.ZERO);
        assertTrue(Long.compareUnsigned(g2.token(), g.token()) > 0, "tokens only grow");
        g2.close();
        g2.close(); // once only: the second close does nothing
        assertFalse(c.query("o-grant").held());
    }

    @Test
    void tryWithResourcesReleasesAlsoWhenTheBlockThrows() {
        long token;
        try (Lease l = c.acquire("o-twr", S30, Duration.ZERO)) {
            token = l.token();
            assertTrue(c.query("o-twr").held());
        }
        assertFalse(c.query("o-twr").held());
        IllegalStateException boom = assertThrows(IllegalStateException.class, () -> {
            try (Lease l = c.acquire("o-twr", S30, Duration.ZERO)) {
                assertTrue(Long.compareUnsigned(l.token(), token) > 0);
                throw new IllegalStateException("boom");
            }
        });
        assertEquals(0, boom.getSuppressed().length, "the release succeeded");
        assertFalse(c.query("o-twr").held(), "the block's exception left the key held");
        // A lease released explicitly is not released again by close().
        Lease l = c.acquire("o-twr", S30, Duration.ZERO);
        c.release(l);
        l.close();
    }

    /**
     * Bad input is refused before anything is sent, with the C library's
     * reason words: nothing is written, so requestsWritten does not move.
     */
    @Test
    void badInputIsRefusedBeforeAnythingIsSent() throws Exception {
        TicketingClient x = client(b -> { });
        assertTrue(x.awaitReady(Duration.ofSeconds(10)));
        long written = x.stats().requestsWritten();
        String[][] keys = {{"", "key"}, {"k".repeat(251), "key"}, {"a b", "key"}, {"tab\tkey", "key"},
            {"caf\u00e9", "key"}, {null, "key"}};
        for (String[] k : keys) {
            assertReason(k[1], () -> x.acquire(k[0], S30, Duration.ZERO));
            assertReason(k[1], () -> x.acquireAsync(k[0], S30, Duration.ZERO).join());
            assertReason(k[1], () -> x.releaseToken(k[0], 5));
            assertReason(k[1], () -> x.query(k[0]));
        }
        assertReason("lease", () -> x.acquire("k", Duration.ofMillis(999), Duration.ZERO));
        assertReason("lease", () -> x.acquire("k", Duration.ofMillis(250_001), Duration.ZERO));
        assertReason("lease", () -> x.acquire("k", null, Duration.ZERO));
        assertReason("lease", () -> x.acquire("k", Duration.ofSeconds(-1), Duration.ZERO));
        assertReason("wait", () -> x.acquire("k", S30, Duration.ofMillis(250_001)));
        assertReason("wait", () -> x.acquire("k", S30, Duration.ofMillis(-1)));
        assertReason("token", () -> x.releaseToken("k", 0));
        assertReason("token", () -> x.releaseAsync("k", 0).join());
        assertReason("key", () -> x.acquire("k".repeat(251), Duration.ofMillis(1), Duration.ofMillis(-1)));
        assertEquals(written, x.stats().requestsWritten(), "a refused request was written");
        // The limits themselves are accepted.
        x.acquire("k".repeat(250), Duration.ofMillis(1000), Duration.ZERO).close();
        x.acquire("k".repeat(250), Duration.ofMillis(250_000), Duration.ofMillis(250_000)).close();
        // The owner is checked when the client is made, with the same word.
        for (String bad : new String[] {"a b", "", "o".repeat(65), "\u00e9t\u00e9"}) {
            ConfigException e = assertThrows(ConfigException.class,
                    () -> TicketingClient.builder().addrs(node.addr()).secretFile(secret).owner(bad).build());
            assertEquals("owner", e.reason());
            assertEquals(Outcome.INVALID, e.outcome());
        }
    }

    private static void assertReason(String reason, Runnable call) {
        try {
            call.run();
            fail("not refused, expected INVALID " + reason);
        } catch (CompletionException e) {
            InvalidRequestException ie = assertInstanceOf(InvalidRequestException.class, e.getCause());
            assertEquals(reason, ie.reason());
        } catch (InvalidRequestException e) {
            assertEquals(reason, e.reason());
            assertEquals(Outcome.INVALID, e.outcome());
        }
    }

    @Test
    void configurationThatCannotWorkIsRefused() throws IOException {
        java.util.Map<String, Runnable> cases = new java.util.LinkedHashMap<>();
        cases.put("addrs", () -> TicketingClient.builder().secretFile(secret).build());
        cases.put("addrs ", () -> TicketingClient.builder().addrs("nohost").secretFile(secret).build());
        cases.put("addrs  ", () -> TicketingClient.builder().addrs("a:1,b:2,c:3,d:4,e:5,f:6,g:7,h:8,i:9")
                .secretFile(secret).build());
        cases.put("secret", () -> TicketingClient.builder().addrs(node.addr()).build());
        cases.put("secret ", () -> TicketingClient.builder().addrs(node.addr()).secret(new byte[15]).build());
        cases.put("secret  ", () -> TicketingClient.builder().addrs(node.addr()).secretFile(dir.resolve("none")).build());
        cases.put("secret   ", () -> TicketingClient.builder().addrs(node.addr()).secretFile(secret)
                .secret(new byte[20]).build());
        cases.put("backoff", () -> TicketingClient.builder().addrs(node.addr()).secretFile(secret)
                .backoffMin(Duration.ofSeconds(2)).backoffMax(Duration.ofSeconds(1)).build());
        cases.put("response_grace", () -> TicketingClient.builder().addrs(node.addr()).secretFile(secret)
                .responseGrace(Duration.ofMillis(-1)).build());
        cases.put("release_queue", () -> TicketingClient.builder().addrs(node.addr()).secretFile(secret)
                .releaseQueueMax(-1).build());
        for (var e : cases.entrySet()) {
            ConfigException x = assertThrows(ConfigException.class, e.getValue()::run, e.getKey());
            assertEquals(e.getKey().trim(), x.reason(), x.getMessage());
        }
    }

    @Test
    void wrongSecretIsNamedAndNothingIsSent() throws IOException {
        Path other = Servers.writeSecret(dir, "wrong.secret");
        try (TicketingClient bad = TicketingClient.builder().addrs(node.addr()).secretFile(other).build()) {
            UnavailableException e = assertThrows(UnavailableException.class,
                    () -> bad.acquire("o-auth", S30, Duration.ZERO));
            assertTrue(e.authFailure(), e.getMessage());
            assertTrue(e.getMessage().contains("authentication refused") && e.getMessage().contains(node.addr())
                    && e.getMessage().contains("nothing was sent"), e.getMessage());
            assertTrue(bad.stats().authFailures() >= 1);
            assertEquals(0, bad.stats().requestsWritten());
        }
    }

    @Test
    void nothingListeningIsUnavailable() {
        int port = Servers.freePorts3();
        try (TicketingClient x = TicketingClient.builder().addrs("127.0.0.1:" + port).secretFile(secret)
                .requestTimeout(Duration.ofMillis(500)).sendBudgetMin(Duration.ofMillis(500)).build()) {
            long t0 = System.nanoTime();
            UnavailableException e = assertThrows(UnavailableException.class,
                    () -> x.acquire("o-none", S30, Duration.ZERO));
            assertTrue(System.nanoTime() - t0 >= 500_000_000L, "before the send budget");
            assertTrue(e.getMessage().contains("connect") && !e.authFailure(), e.getMessage());
            assertThrows(UnavailableException.class, x::ping);
            assertEquals(0, x.stats().requestsWritten());
            assertEquals(2, x.stats().connections(), "one address: two connections");
        }
    }

    /**
     * A fake server that does not know the secret: a banner, then an OK with
     * a made-up proof followed by an M. The client must believe neither.
     */
    @Test
    void theServersProofIsCheckedBeforeAnythingIsBelieved() throws Exception {
        ServerSocket ls = new ServerSocket(0, 8, java.net.InetAddress.getLoopbackAddress());
        ExecutorService fake = Executors.newSingleThreadExecutor();
        Future<?> served = fake.submit(() -> {
            while (!ls.isClosed()) {
                try (Socket s = ls.accept()) {
                    OutputStream out = s.getOutputStream();
                    out.write(("TICKETING/1 " + "ab".repeat(32) + "\n").getBytes(StandardCharsets.US_ASCII));
                    new BufferedReader(new InputStreamReader(s.getInputStream(), StandardCharsets.US_ASCII)).readLine();
                    out.write(("OK " + "cd".repeat(32) + " 0123456789abcdef " + "0".repeat(32)
                            + "\nM 127.0.0.1:1\n").getBytes(StandardCharsets.US_ASCII));
                    Thread.sleep(200);
                } catch (IOException | InterruptedException e) {
                    return null;
                }
            }
            return null;
        });
        try (TicketingClient x = TicketingClient.builder().addrs("127.0.0.1:" + ls.getLocalPort())
                .secretFile(secret).build()) {
            UnavailableException e = assertThrows(UnavailableException.class,
                    () -> x.acquire("o-fake", S30, Duration.ZERO));
            assertTrue(e.getMessage().contains("wrong server proof") && e.authFailure(), e.getMessage());
            Stats st = x.stats();
            assertEquals(0, st.moved(), "an M from an unproven server was believed");
            assertEquals("", st.leaderHint());
            assertEquals(0, st.handshakes());
            assertTrue(st.authFailures() >= 1);
            assertEquals(0, st.requestsWritten());
        } finally {
            ls.close();
            served.get(5, TimeUnit.SECONDS);
            fake.shutdown();
        }
    }

    /** Interrupted before any byte was written: CANCELLED, never INDETERMINATE. */
    @Test
    void interruptBeforeSendIsCancelled() throws Exception {
        int port = Servers.freePorts3();
        try (TicketingClient x = TicketingClient.builder().addrs("127.0.0.1:" + port).secretFile(secret).build()) {
            CompletableFuture<Object> got = new CompletableFuture<>();
            CompletableFuture<Boolean> stillInterrupted = new CompletableFuture<>();
            Thread t = new Thread(() -> {
                try {
                    got.complete(x.acquire("o-intr", S30, Duration.ofSeconds(10)));
                } catch (TicketingException e) {
                    got.complete(e);
                }
                stillInterrupted.complete(Thread.currentThread().isInterrupted());
            });
            t.start();
            Thread.sleep(200);
            t.interrupt();
            t.join(5000);
            assertTrue(stillInterrupted.get(1, TimeUnit.SECONDS), "the interrupt status was lost");
            CancelledException e = assertInstanceOf(CancelledException.class, got.get(1, TimeUnit.SECONDS));
            assertEquals(Outcome.CANCELLED, e.outcome());
            Stats st = x.stats();
            assertEquals(0, st.requestsWritten());
            assertEquals(0, st.requestsInProgress());
        }
    }

    /**
     * A waiter queued on the server, then interrupted: INDETERMINATE; the
     * handoff that grants it later is released by its client at once.
     */
    @Test
    void interruptAfterSendIsIndeterminateAndTheLateGrantReleased() throws Exception {
        TicketingClient waiter = client(b -> { });
        Lease held = c.acquire("o-drop", S30, Duration.ZERO);
        CompletableFuture<Object> got = new CompletableFuture<>();
        Thread t = new Thread(() -> {
            try {
                got.complete(waiter.acquire("o-drop", S30, Duration.ofSeconds(20)));
            } catch (TicketingException e) {
                got.complete(e);
            }
        });
        t.start();
        assertTrue(Servers.waitFor(Duration.ofSeconds(10), () -> c.query("o-drop").waiters() == 1));
        t.interrupt();
        assertInstanceOf(IndeterminateException.class, got.get(5, TimeUnit.SECONDS));
        c.release(held); // the FIFO handoff grants the interrupted waiter
        assertTrue(Servers.waitFor(Duration.ofSeconds(10), () -> !c.query("o-drop").held()), "never released");
        assertTrue(Servers.waitFor(Duration.ofSeconds(5), () -> waiter.stats().compensations() == 1));
        Stats st = waiter.stats();
        assertEquals(1, st.indeterminate());
        assertTrue(Servers.waitFor(Duration.ofSeconds(5), () -> waiter.stats().releasesQueued() == 0));
    }

    /** Cancelling the future of a queued acquire: the grant that still comes is released. */
    @Test
    void cancelledFutureReleasesTheLateGrant() throws Exception {
        TicketingClient waiter = client(b -> { });
        Lease held = c.acquire("o-fut", S30, Duration.ZERO);
        CompletableFuture<Lease> f = waiter.acquireAsync("o-fut", S30, Duration.ofSeconds(20));
        assertTrue(Servers.waitFor(Duration.ofSeconds(10), () -> c.query("o-fut").waiters() == 1));
        assertTrue(f.cancel(true));
        assertTrue(Servers.waitFor(Duration.ofSeconds(5), () -> waiter.stats().indeterminate() == 1));
        c.release(held);
        assertTrue(Servers.waitFor(Duration.ofSeconds(10), () -> !c.query("o-fut").held()), "never released");
        assertEquals(1, waiter.stats().compensations());
    }

    @Test
    void asyncCalls() throws Exception {
        Lease l = c.acquireAsync("o-async", S30, Duration.ZERO).get(10, TimeUnit.SECONDS);
        assertEquals(c.owner(), c.queryAsync("o-async").get(10, TimeUnit.SECONDS).owner());
        assertFalse(c.pingAsync().get(10, TimeUnit.SECONDS).isNegative());
        ExecutionException busy = assertThrows(ExecutionException.class,
                () -> c.acquireAsync("o-async", S30, Duration.ZERO).get(10, TimeUnit.SECONDS));
        assertInstanceOf(BusyException.class, busy.getCause());
        assertFalse(l.releaseAsync().get(10, TimeUnit.SECONDS), "resent");
        assertFalse(l.releaseAsync().get(1, TimeUnit.SECONDS), "a second release is a no-op");
        ExecutionException nh = assertThrows(ExecutionException.class,
                () -> c.releaseAsync("o-async", l.token()).get(10, TimeUnit.SECONDS));
        assertInstanceOf(NotHeldException.class, nh.getCause());
    }

    /**
     * A blocking call on the I/O thread (in a stage the engine completes) is
     * refused, not a deadlock; an asynchronous call there is served. A lease
     * whose close() was refused there is still held, and releasable.
     */
    @Test
    void blockingCallOnTheIoThreadIsRefused() throws Exception {
        Lease held = c.acquire("o-thread", S30, Duration.ZERO);
        CompletableFuture<String> reason = c.acquireAsync("o-thread", S30, Duration.ofMillis(300))
                .handle((lease, x) -> {
                    try {
                        c.ping();
                        return "not refused";
                    } catch (InvalidRequestException e) {
                        return e.reason();
                    }
                });
        assertEquals("thread", reason.get(10, TimeUnit.SECONDS));
        // The next grant comes by handoff, after the stage below is attached:
        // so the stage runs on the I/O thread, which completes the future.
        CompletableFuture<Lease> refusedClose = new CompletableFuture<>();
        CompletableFuture<Boolean> released = c.acquireAsync("o-thread", S30, Duration.ofSeconds(10))
                .thenCompose(lease -> {
                    assertEquals("ticketing-io", Thread.currentThread().getName());
                    InvalidRequestException e = assertThrows(InvalidRequestException.class, lease::close);
                    assertEquals("thread", e.reason());
                    refusedClose.complete(lease);
                    return lease.releaseAsync(); // on the I/O thread too
                });
        assertTrue(Servers.waitFor(Duration.ofSeconds(10), () -> c.query("o-thread").waiters() == 1));
        c.release(held);
        assertFalse(released.get(10, TimeUnit.SECONDS), "resent");
        assertFalse(c.query("o-thread").held(), "the asynchronous release from the I/O thread");
        refusedClose.get(1, TimeUnit.SECONDS).close(); // released already: nothing to do
    }

    /**
     * Threads of one client queue on one key in a known order: granted in
     * that order, with growing tokens, never two holders at once.
     */
    @Test
    void threadsAreServedFifo() throws Exception {
        TicketingClient obs = client(b -> { });
        Lease first = obs.acquire("o-hot", S30, Duration.ZERO);
        int workers = 8;
        AtomicInteger holders = new AtomicInteger();
        List<Integer> order = new java.util.concurrent.CopyOnWriteArrayList<>();
        List<Long> tokens = new java.util.concurrent.CopyOnWriteArrayList<>();
        List<Throwable> errors = new java.util.concurrent.CopyOnWriteArrayList<>();
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < workers; i++) {
            int id = i;
            Thread t = new Thread(() -> {
                try (Lease l = c.acquire("o-hot", S30, Duration.ofSeconds(40))) {
                    if (holders.incrementAndGet() != 1) {
                        errors.add(new AssertionError("two holders at once"));
                    }
                    order.add(id);
                    tokens.add(l.token());
                    Thread.sleep(5);
                    holders.decrementAndGet();
                } catch (RuntimeException | InterruptedException e) {
                    errors.add(e);
                }
            });
            t.start();
            threads.add(t);
            int queued = i + 1; // the next one starts once this one is queued on the server
            assertTrue(Servers.waitFor(Duration.ofSeconds(10), () -> obs.query("o-hot").waiters() == queued));
        }
        obs.release(first);
        for (Thread t : threads) {
            t.join(30_000);
        }
        assertEquals(List.of(), errors);
        assertEquals(List.of(0, 1, 2, 3, 4, 5, 6, 7), order);
        long prev = first.token();
        for (long tok : tokens) {
            assertTrue(Long.compareUnsigned(tok, prev) > 0, "tokens not increasing: " + tokens);
            prev = tok;
        }
    }

    /** Many threads, many keys, one client: every key has one holder at a time. */
    @Test
    void manyThreadsManyKeys() throws Exception {
        int keys = 6;
        AtomicInteger[] holding = new AtomicInteger[keys];
        for (int i = 0; i < keys; i++) {
            holding[i] = new AtomicInteger();
        }
        ExecutorService pool = Executors.newFixedThreadPool(24);
        List<Future<Integer>> done = new ArrayList<>();
        for (int w = 0; w < 24; w++) {
            int worker = w;
            done.add(pool.submit(() -> {
                int n = 0;
                for (int i = 0; i < 15; i++) {
                    int k = (worker + i) % keys;
                    try (Lease l = c.acquire("o-many-" + k, S30, Duration.ofSeconds(30))) {
                        if (holding[k].incrementAndGet() != 1) {
                            throw new AssertionError("two holders of " + l.key());
                        }
                        holding[k].decrementAndGet();
                        n++;
                    }
                }
                return n;
            }));
        }
        int total = 0;
        for (Future<Integer> f : done) {
            total += f.get(40, TimeUnit.SECONDS);
        }
        pool.shutdown();
        assertEquals(24 * 15, total);
        assertEquals(0, c.stats().indeterminate());
    }

    /**
     * The lease counts from the first write. A waiter queued behind a holder
     * for longer than its own lease gets its G after that lease ran out:
     * INDETERMINATE, reason "lease", and its client releases the token at
     * once. A waiter whose lease outlasts the queueing is granted.
     */
    @Test
    void grantAfterItsLeaseIsIndeterminate() throws Exception {
        TicketingClient waiter = client(b -> { });
        Lease held = c.acquire("o-late", S30, Duration.ZERO);
        CompletableFuture<Lease> f = waiter.acquireAsync("o-late", Duration.ofSeconds(1), Duration.ofSeconds(10));
        long t0 = System.nanoTime();
        assertTrue(Servers.waitFor(Duration.ofSeconds(10), () -> c.query("o-late").waiters() == 1));
        Thread.sleep(Math.max(0, 1500 - (System.nanoTime() - t0) / 1_000_000));
        c.release(held); // the handoff to the waiter comes after its lease
        ExecutionException e = assertThrows(ExecutionException.class, () -> f.get(10, TimeUnit.SECONDS));
        IndeterminateException ie = assertInstanceOf(IndeterminateException.class, e.getCause());
        assertEquals("lease", ie.reason());
        assertTrue(Servers.waitFor(Duration.ofSeconds(10), () -> !c.query("o-late").held()));
        assertEquals(1, waiter.stats().compensations());
        assertEquals(0, waiter.stats().compensationsDropped());

        Lease held2 = c.acquire("o-late2", S30, Duration.ZERO);
        CompletableFuture<Lease> ok = waiter.acquireAsync("o-late2", Duration.ofSeconds(5), Duration.ofSeconds(10));
        assertTrue(Servers.waitFor(Duration.ofSeconds(10), () -> c.query("o-late2").waiters() == 1));
        Thread.sleep(1500);
        c.release(held2);
        try (Lease l = ok.get(10, TimeUnit.SECONDS)) {
            assertFalse(l.isExpired());
        }
        assertEquals(1, waiter.stats().compensations());
    }

    /** close() cancels an acquire waiting on the server; a closed client refuses. */
    @Test
    void closeCancelsAWaitingAcquire() throws Exception {
        Lease held = c.acquire("o-close", S30, Duration.ZERO);
        TicketingClient x = TicketingClient.builder().addrs(node.addr()).secretFile(secret).build();
        CompletableFuture<Lease> f = x.acquireAsync("o-close", S30, Duration.ofSeconds(20));
        assertTrue(Servers.waitFor(Duration.ofSeconds(10), () -> c.query("o-close").waiters() == 1));
        x.close();
        ExecutionException e = assertThrows(ExecutionException.class, () -> f.get(5, TimeUnit.SECONDS));
        CancelledException ce = assertInstanceOf(CancelledException.class, e.getCause());
        assertEquals("shutdown", ce.reason());
        CancelledException after = assertThrows(CancelledException.class,
                () -> x.acquire("o-close", S30, Duration.ZERO));
        assertEquals("shutdown", after.reason());
        x.close(); // idempotent
        c.release(held);
        // The closed connection took the queued waiter with it.
        assertTrue(Servers.waitFor(Duration.ofSeconds(5), () -> !c.query("o-close").held()));
        assertNull(c.query("o-close").owner());
    }
}
