package example.ticketing;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * A server that stops answering (SIGSTOP) after requests were written:
 * INDETERMINATE and then compensation of the late G; UNAVAILABLE for a
 * query; UNCONFIRMED after the absolute 5 s and QUEUE_FULL at once.
 */
@Timeout(value = 30, unit = TimeUnit.SECONDS)
class StoppedServerTest {
    private static final Duration S30 = Duration.ofSeconds(30);

    @TempDir
    Path dir;
    private Path secret;
    private Servers.Node node;

    @BeforeEach
    void start() throws Exception {
        secret = Servers.writeSecret(dir, "client.secret");
        node = Servers.standalone(dir, secret);
    }

    @AfterEach
    void stop() throws Exception {
        node.close();
    }

    @Test
    void indeterminateThenTheLateGrantsAreReleased() throws Exception {
        try (TicketingClient c = TicketingClient.builder().addrs(node.addr()).secretFile(secret)
                .responseGrace(Duration.ofMillis(300)).requestTimeout(Duration.ofMillis(500)).build()) {
            c.ping();
            node.signal("STOP");
            long t0 = System.nanoTime();
            IndeterminateException e = assertThrows(IndeterminateException.class,
                    () -> c.acquire("s-late", S30, Duration.ZERO));
            assertTrue(System.nanoTime() - t0 >= 300_000_000L, "before wait (0) + grace");
            assertEquals("", e.reason());
            assertThrows(IndeterminateException.class, () -> c.acquire("s-late2", S30, Duration.ZERO));
            t0 = System.nanoTime();
            assertThrows(UnavailableException.class, () -> c.query("s-late"));
            assertTrue(System.nanoTime() - t0 >= 500_000_000L, "before the request timeout");
            assertEquals(2, c.stats().indeterminate());
            node.signal("CONT");
            // Both acquires are granted late; the client releases them itself.
            assertTrue(Servers.waitFor(Duration.ofSeconds(10), () -> c.stats().compensations() == 2));
            assertTrue(Servers.waitFor(Duration.ofSeconds(10),
                    () -> !c.query("s-late").held() && !c.query("s-late2").held()));
        }
    }

    @Test
    void unconfirmedAfterTheAbsoluteDeadlineAndQueueFullAtOnce() throws Exception {
        try (TicketingClient c = TicketingClient.builder().addrs(node.addr()).secretFile(secret)
                .releaseQueueMax(1).build()) {
            Lease g = c.acquire("s-rel", S30, Duration.ZERO);
            node.signal("STOP");
            long t0 = System.nanoTime();
            CompletableFuture<Boolean> rel = g.releaseAsync();
            assertTrue(Servers.waitFor(Duration.ofSeconds(5), () -> c.stats().releasesQueued() == 1));
            long q0 = System.nanoTime();
            assertThrows(QueueFullException.class, () -> c.releaseToken("s-other", 7));
            assertTrue(System.nanoTime() - q0 < 1_000_000_000L, "QUEUE_FULL is answered at once");
            ExecutionException e = assertThrows(ExecutionException.class, () -> rel.get(10, TimeUnit.SECONDS),
                    () -> "the release was answered by a stopped server; its log:\n" + node.logTail());
            UnconfirmedException u = assertInstanceOf(UnconfirmedException.class, e.getCause());
            assertFalse(u.resent());
            assertTrue(System.nanoTime() - t0 >= 5_000_000_000L, "UNCONFIRMED before the 5 s deadline");
            node.signal("CONT");
            // The written release still reached the server: the key is free.
            assertTrue(Servers.waitFor(Duration.ofSeconds(10), () -> !c.query("s-rel").held()));
        }
    }
}
