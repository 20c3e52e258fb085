package example.ticketing;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.time.Duration;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/** Connections: two for one address, host names, backoff, a server that comes back. */
@Timeout(value = 30, unit = TimeUnit.SECONDS)
class ConnectionTest {
    private static final Duration S30 = Duration.ofSeconds(30);

    @TempDir
    Path dir;

    @Test
    void oneAddressGetsTwoConnectionsAndHostNamesAreLookedUp() throws Exception {
        Path secret = Servers.writeSecret(dir, "client.secret");
        try (Servers.Node node = Servers.standalone(dir, secret);
                TicketingClient c = TicketingClient.builder().addrs("localhost:" + node.port).secretFile(secret)
                        .build()) {
            assertTrue(Servers.waitFor(Duration.ofSeconds(10), () -> c.stats().connectionsReady() == 2));
            Stats st = c.stats();
            assertEquals(2, st.connections());
            assertEquals(2, st.handshakes());
            c.acquire("c-host", S30, Duration.ZERO).close();
        }
    }

    /**
     * Against a port where nothing listens, each connection retries after
     * 0.1 s, 0.2 s, 0.4 s... capped at the maximum (here 0.2 s), each delay
     * drawn in [3/4, 1] of its step: over 1.5 s, 7 to 11 attempts each.
     */
    @Test
    void reconnectBackoffDoublesUpToItsCap() throws Exception {
        Path secret = Servers.writeSecret(dir, "client.secret");
        int port = Servers.freePorts3();
        try (TicketingClient c = TicketingClient.builder().addrs("127.0.0.1:" + port).secretFile(secret)
                .backoffMin(Duration.ofMillis(50)).backoffMax(Duration.ofMillis(200)).build()) {
            Thread.sleep(1500);
            long attempts = c.stats().connectAttempts();
            assertTrue(attempts >= 2 * 7 && attempts <= 2 * 11, "connect attempts in 1.5 s: " + attempts);
            assertTrue(c.lastError().startsWith("127.0.0.1:" + port + ": connect: "), c.lastError());
        }
    }

    /** A dead server never breaks the client: once one listens again, acquires succeed. */
    @Test
    void theClientOutlivesItsServer() throws Exception {
        Path secret = Servers.writeSecret(dir, "client.secret");
        Servers.Node node = Servers.standalone(dir, secret);
        try (TicketingClient c = TicketingClient.builder().addrs(node.addr()).secretFile(secret)
                .backoffMax(Duration.ofMillis(400)).sendBudgetMin(Duration.ofMillis(500)).build()) {
            c.acquire("c-back", S30, Duration.ZERO).close();
            node.kill();
            assertTrue(Servers.waitFor(Duration.ofSeconds(5), () -> c.stats().connectionsReady() == 0));
            assertThrows(UnavailableException.class, () -> c.acquire("c-back", S30, Duration.ZERO));
            node.start(); // the same port and secret, a new process
            try (Lease l = c.acquire("c-back", S30, Duration.ofSeconds(10))) {
                assertEquals(l.token(), c.query("c-back").token());
            }
            assertEquals(0, c.stats().indeterminate());
        } finally {
            node.close();
        }
    }
}
