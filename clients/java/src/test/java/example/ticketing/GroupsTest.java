package example.ticketing;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * Groups and slots (SPEC 15): W, a definite WRONG_GROUP, and the ring of S
 * in its one-line and multi-line forms, against a scripted server where
 * ticketingd cannot give the answer, and against ticketingd itself.
 */
@Timeout(value = 30, unit = TimeUnit.SECONDS)
class GroupsTest {
    private static final Duration S30 = Duration.ofSeconds(30);

    @TempDir
    Path dir;

    private TicketingClient client(String addr, Path secret, Duration requestTimeout) {
        return TicketingClient.builder().addrs(addr).secretFile(secret).owner("java-groups")
                .requestTimeout(requestTimeout).backoffMin(Duration.ofMillis(20)).backoffMax(Duration.ofMillis(100))
                .build();
    }

    /** A scripted server that knows the secret in the file (its bytes less the trailing newline). */
    private FakeServer fake(Path secret, Function<String, List<String>> script) throws Exception {
        return new FakeServer(Files.readString(secret).strip().getBytes(StandardCharsets.US_ASCII), script);
    }

    /** W for A, Q and R: the slot of the key in the line, the version the script says. */
    private static List<String> wrong(String line, String version) {
        String[] w = line.split(" ");
        return List.of("W " + w[1] + " " + Slots.slot(w[2]) + " " + version);
    }

    @Test
    void wrongGroupIsDefiniteForAcquireQueryAndRelease() throws Exception {
        Path secret = Servers.writeSecret(dir, "client.secret");
        try (FakeServer f = fake(secret, l -> wrong(l, "18446744073709551615"));
             TicketingClient c = client(f.addr(), secret, Duration.ofSeconds(5))) {
            WrongGroupException a = assertThrows(WrongGroupException.class,
                    () -> c.acquire("show-42", S30, Duration.ofSeconds(1)));
            assertEquals(Outcome.WRONG_GROUP, a.outcome());
            assertEquals(11909, a.slot());
            assertEquals(-1L, a.ringVersion(), "a u64 ring version stays exact");
            assertFalse(a.resent());
            WrongGroupException q = assertThrows(WrongGroupException.class, () -> c.query("a"));
            assertEquals(11404, q.slot());
            WrongGroupException async = assertThrows(WrongGroupException.class,
                    () -> sync(c.queryAsync("inventory/2026-12-24/hall-B")));
            assertEquals(10740, async.slot());
            Stats st = c.stats();
            assertEquals(0, st.indeterminate(), "W is definite");
            assertEquals(0, st.compensations());
            assertEquals(3, f.lines.size(), "one line each, nothing resent: " + f.lines);
        }
    }

    /** A release answered W: WRONG_GROUP at once, neither retried nor kept in the release queue. */
    @Test
    void releaseAnsweredWrongGroupIsNotQueued() throws Exception {
        Path secret = Servers.writeSecret(dir, "client.secret");
        try (FakeServer f = fake(secret, l -> wrong(l, "4"));
             TicketingClient c = client(f.addr(), secret, Duration.ofSeconds(5))) {
            long t0 = System.nanoTime();
            WrongGroupException e = assertThrows(WrongGroupException.class,
                    () -> c.releaseToken("show-42:seat-17", 17));
            assertTrue(System.nanoTime() - t0 < 3_000_000_000L, "decided by the W, not by the 5 s deadline");
            assertEquals(10735, e.slot());
            assertEquals(4, e.ringVersion());
            assertFalse(e.resent());
            assertEquals(0, c.stats().releasesQueued(), "still queued after W");
            WrongGroupException viaAsync = assertThrows(WrongGroupException.class,
                    () -> sync(c.releaseAsync("show-42", 18)));
            assertEquals(11909, viaAsync.slot());
            assertEquals(0, c.stats().releasesQueued());
            Thread.sleep(400); // a retry, had there been one, would come in this time
            assertEquals(List.of("R 1 show-42:seat-17 java-groups 17", "R 2 show-42 java-groups 18"),
                    idsRenumbered(f.linesOf('R')), "a release answered W was sent again");
        }
    }

    /** The lines with their ids replaced by 1, 2, ... in order (ids depend on the connection). */
    private static List<String> idsRenumbered(List<String> lines) {
        List<String> out = new java.util.ArrayList<>();
        for (String l : lines) {
            String[] w = l.split(" ", 3);
            out.add(w[0] + " " + (out.size() + 1) + " " + w[2]);
        }
        return out;
    }

    @Test
    void oneLineRing() throws Exception {
        Path secret = Servers.writeSecret(dir, "client.secret");
        String body = "0-8191=sales-a@10.0.0.1:7400,10.0.0.2:7400;8192-16383=sales-b@10.0.1.1:7400";
        try (FakeServer f = fake(secret, l -> List.of("S " + FakeServer.id(l) + " 3 " + body));
             TicketingClient c = client(f.addr(), secret, Duration.ofSeconds(5))) {
            Ring r = c.ring();
            assertEquals(3, r.version());
            assertEquals(body, r.body());
            assertEquals(List.of("0-8191=sales-a@10.0.0.1:7400,10.0.0.2:7400", "8192-16383=sales-b@10.0.1.1:7400"),
                    r.ranges());
            Ring a = sync(c.ringAsync());
            assertEquals(r, a);
            assertEquals(2, f.linesOf('S').size());
        }
    }

    /** Three parts: one ring, the parts joined by ';'. */
    @Test
    void threePartRingIsJoined() throws Exception {
        Path secret = Servers.writeSecret(dir, "client.secret");
        try (FakeServer f = fake(secret, l -> {
                String id = FakeServer.id(l);
                return List.of("S " + id + " 18446744073709551615 1/3 0-99=a@h:1",
                        "S " + id + " 18446744073709551615 2/3 100-199=b@h:2;200-299=b@h:2",
                        "S " + id + " 18446744073709551615 3/3 300-16383=c@h:3");
            });
             TicketingClient c = client(f.addr(), secret, Duration.ofSeconds(5))) {
            Ring r = c.ring();
            assertEquals(-1L, r.version());
            assertEquals("18446744073709551615", r.versionString());
            assertEquals("0-99=a@h:1;100-199=b@h:2;200-299=b@h:2;300-16383=c@h:3", r.body());
            assertEquals(4, r.ranges().size());
            assertEquals(1, f.linesOf('S').size(), "the answer was taken whole, not asked again");
        }
    }

    /** Parts out of order, or a ring changing mid-answer: a protocol error, never a ring. */
    @Test
    void outOfOrderPartsAreRefused() throws Exception {
        Path secret = Servers.writeSecret(dir, "client.secret");
        String[][] cases = {
            {"1/3 a", "3/3 c"},
            {"2/3 b", "1/3 a", "3/3 c"},
            {"1/2 a", "1/2 a", "2/2 b"},
            {"1/3 a", "2/2 b"},
            {"1/2 a", "- b"},
        };
        for (String[] parts : cases) {
            try (FakeServer f = fake(secret, l -> {
                    String id = FakeServer.id(l);
                    List<String> out = new java.util.ArrayList<>();
                    for (String p : parts) {
                        out.add("S " + id + " 5 " + (p.startsWith("- ") ? p.substring(2) : p));
                    }
                    return out;
                });
                 TicketingClient c = client(f.addr(), secret, Duration.ofMillis(800))) {
                UnavailableException e = assertThrows(UnavailableException.class, c::ring, String.join(",", parts));
                assertEquals(Outcome.UNAVAILABLE, e.outcome());
                assertTrue(c.lastError().contains("protocol: "), c.lastError());
                assertTrue(f.linesOf('S').size() >= 2, "the connection was closed and the read resent elsewhere");
            }
        }
        // The version changes between parts.
        try (FakeServer f = fake(secret, l -> List.of("S " + FakeServer.id(l) + " 5 1/2 a",
                "S " + FakeServer.id(l) + " 6 2/2 b"));
             TicketingClient c = client(f.addr(), secret, Duration.ofMillis(800))) {
            assertThrows(UnavailableException.class, c::ring);
            assertTrue(c.lastError().contains("out of order"), c.lastError());
        }
        // A part that does not parse at all.
        try (FakeServer f = fake(secret, l -> List.of("S " + FakeServer.id(l) + " 5 0/2 a"));
             TicketingClient c = client(f.addr(), secret, Duration.ofMillis(800))) {
            assertThrows(UnavailableException.class, c::ring);
            assertTrue(c.lastError().contains("malformed"), c.lastError());
        }
    }

    /** ticketingd itself: a node of a named group with no ring, and a plain node. */
    @Test
    void ticketingdOfANamedGroupWithoutRing() throws Exception {
        Path secret = Servers.writeSecret(dir, "client.secret");
        try (Servers.Node node = Servers.standalone(dir, secret, "--group", "sales-b");
             TicketingClient c = client(node.addr(), secret, Duration.ofSeconds(5))) {
            WrongGroupException a = assertThrows(WrongGroupException.class,
                    () -> c.acquire("show-42", S30, Duration.ofSeconds(1)));
            assertEquals(11909, a.slot());
            assertEquals(0, a.ringVersion());
            assertEquals(11404, assertThrows(WrongGroupException.class, () -> c.query("a")).slot());
            WrongGroupException r = assertThrows(WrongGroupException.class,
                    () -> c.releaseToken("show-42:seat-17", 1));
            assertEquals(10735, r.slot());
            assertEquals(0, c.stats().releasesQueued());
            assertFalse(c.ping().isNegative(), "the connection stays usable");
            assertEquals(new Ring(0, "-"), c.ring());
            assertEquals(0, c.stats().indeterminate());
        }
        try (Servers.Node node = Servers.standalone(dir, secret);
             TicketingClient c = client(node.addr(), secret, Duration.ofSeconds(5))) {
            assertEquals(new Ring(0, "-"), c.ring());
            assertEquals(List.of(), c.ring().ranges());
            try (Lease l = c.acquire("show-42", S30, Duration.ZERO)) {
                assertTrue(l.token() != 0);
            }
        }
    }

    private static <T> T sync(java.util.concurrent.CompletableFuture<T> f) throws Exception {
        try {
            return f.get(10, TimeUnit.SECONDS);
        } catch (java.util.concurrent.ExecutionException e) {
            if (e.getCause() instanceof RuntimeException r) {
                throw r;
            }
            throw e;
        }
    }
}
