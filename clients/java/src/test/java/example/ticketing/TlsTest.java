package example.ticketing;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.time.Duration;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * TLS: a node with --tls-cert/--tls-key/--tls-client-auth; the client
 * verifies it against the CA and presents its certificate (an EC key in
 * SEC1 form, as openssl writes it). Refusals happen in TLS, before any
 * request byte: UNAVAILABLE with reason "tls".
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
@Timeout(value = 30, unit = TimeUnit.SECONDS)
class TlsTest {
    @TempDir
    static Path dir;
    private Path secret;
    private Servers.Node node;

    @BeforeAll
    void start() throws Exception {
        Servers.makeCerts(dir);
        secret = Servers.writeSecret(dir, "client.secret");
        node = Servers.standalone(dir, secret, "--tls-cert", dir.resolve("node.pem").toString(),
                "--tls-key", dir.resolve("node.key").toString(), "--tls-ca", dir.resolve("ca.pem").toString(),
                "--tls-client-auth");
    }

    @AfterAll
    void stop() throws Exception {
        node.close();
    }

    private TicketingClient client(Consumer<TicketingClient.Builder> mod) {
        TicketingClient.Builder b = TicketingClient.builder().addrs(node.addr()).secretFile(secret)
                .connectTimeout(Duration.ofSeconds(2));
        mod.accept(b);
        return b.build();
    }

    private void withCert(TicketingClient.Builder b, String ca) {
        b.tlsCaFile(dir.resolve(ca)).tlsCertFile(dir.resolve("client.pem")).tlsKeyFile(dir.resolve("client.key"));
    }

    @Test
    void locksOverTlsWithAClientCertificate() {
        try (TicketingClient c = client(b -> withCert(b, "ca.pem"))) {
            try (Lease l = c.acquire("tls-key", Duration.ofSeconds(10), Duration.ZERO)) {
                assertEquals(new QueryResult("tls-key", true, c.owner(), l.token(), 0), c.query("tls-key"));
                assertThrows(BusyException.class, () -> c.acquire("tls-key", Duration.ofSeconds(10), Duration.ZERO));
            }
            assertTrue(!c.query("tls-key").held());
        }
    }

    private static void assertRefusedInTls(TicketingClient c, String inMessage) {
        UnavailableException e = assertThrows(UnavailableException.class,
                () -> c.acquire("tls-refused", Duration.ofSeconds(10), Duration.ZERO));
        assertEquals("tls", e.reason(), e.getMessage());
        assertTrue(e.getMessage().contains(inMessage), e.getMessage());
        assertEquals(0, c.stats().requestsWritten(), "a request was written over a refused connection");
    }

    @Test
    void aServerOfAnotherCaIsRefusedAndTheCaFileNamed() {
        try (TicketingClient c = client(b -> withCert(b, "other-ca.pem"))) {
            assertRefusedInTls(c, "other-ca.pem");
        }
    }

    @Test
    void aWrongServerNameIsRefused() {
        try (TicketingClient c = client(b -> withCert(b.tlsServerName("elsewhere.example"), "ca.pem"))) {
            assertRefusedInTls(c, "elsewhere.example");
        }
    }

    @Test
    void withoutAClientCertificateNothingIsAcquired() {
        try (TicketingClient c = client(b -> b.tlsCaFile(dir.resolve("ca.pem")))) {
            assertRefusedInTls(c, node.addr());
        }
    }

    @Test
    void aPlaintextClientOnTheTlsPortIsToldToUseTls() {
        try (TicketingClient c = client(b -> b.connectTimeout(Duration.ofMillis(600)))) {
            UnavailableException e = assertThrows(UnavailableException.class,
                    () -> c.acquire("tls-plain", Duration.ofSeconds(10), Duration.ZERO));
            assertTrue(e.getMessage().contains("a TLS port?"), e.getMessage());
        }
    }

    @Test
    void tlsSettingsThatCannotWorkAreRefusedAtOnce() {
        String[][] bad = {
            {null, "client.pem", "client.key", null},           // no CA: not plaintext either
            {null, null, null, "localhost"},
            {"ca.pem", "client.pem", null, null},                // a certificate without its key
            {"ca.pem", "client.pem", "other.key", null},         // a key of another certificate
            {"ca.pem", "expired.pem", "expired.key", null},      // an expired certificate
            {"client.key", null, null, null},                    // a CA file that holds no certificate
            {"missing.pem", null, null, null},
        };
        for (String[] f : bad) {
            TicketingClient.Builder b = TicketingClient.builder().addrs(node.addr()).secretFile(secret);
            if (f[0] != null) {
                b.tlsCaFile(dir.resolve(f[0]));
            }
            if (f[1] != null) {
                b.tlsCertFile(dir.resolve(f[1]));
            }
            if (f[2] != null) {
                b.tlsKeyFile(dir.resolve(f[2]));
            }
            b.tlsServerName(f[3]);
            ConfigException e = assertThrows(ConfigException.class, b::build, String.join(",", String.valueOf(f[0]),
                    String.valueOf(f[1]), String.valueOf(f[2])));
            assertEquals("tls", e.reason(), e.getMessage());
        }
    }
}
