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
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.Function;
import java.util.function.IntPredicate;
import java.util.function.Supplier;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * Groups and slots (SPEC 15): W, a definite WRONG_GROUP, the ring of S in
 * its one-line and multi-line forms, and routing by key over two groups
 * (the ring fetched after a W, the resend at once to another group or
 * after a pause to the same one, never an older ring), against scripted
 * servers where ticketingd cannot give the answer, and against ticketingd
 * itself.
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

    /**
     * W for A, Q and R: the slot of the key in the line, the version the
     * script says; S (the ring the client asks for after a W): no ring.
     */
    private static List<String> wrong(String line, String version) {
        String[] w = line.split(" ");
        if (w[0].equals("S")) {
            return List.of("S " + w[1] + " 0 -");
        }
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
            assertEquals(0, st.ringVersion(), "the group has no ring: none to route by");
            assertEquals(0, st.rerouted());
            assertEquals(1, f.linesOf('A').size(), "nothing resent: " + f.lines);
            assertEquals(2, f.linesOf('Q').size(), "nothing resent: " + f.lines);
            assertEquals(3, f.linesOf('S').size(), "the ring asked after each W: " + f.lines);
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

    /**
     * A scripted group: it serves the keys of the slots it owns (grants with
     * tokens from one counter, releases, reads the key free), answers W with
     * its ring version for the others, and S with its ring.
     */
    private static List<String> group(String line, IntPredicate owns, long version, Supplier<String> ring,
            AtomicLong tokens) {
        String[] w = line.split(" ");
        String id = w[1];
        if (w[0].equals("S")) {
            return List.of("S " + id + " " + version + " " + ring.get());
        }
        int slot = Slots.slot(w[2]);
        if (!owns.test(slot)) {
            return List.of("W " + id + " " + slot + " " + version);
        }
        switch (w[0]) {
            case "A":
                return List.of("G " + id + " " + tokens.incrementAndGet());
            case "R":
                return List.of("R " + id);
            default:
                return List.of("Q " + id + " - 0 0");
        }
    }

    /** The wait an acquire line was sent with ("A id key owner lease wait"). */
    private static long waitOf(String acquireLine) {
        return Long.parseLong(acquireLine.split(" ")[5]);
    }

    /**
     * Seeded with sales-a: its keys go there; a key of sales-b is answered
     * W, the ring is fetched from sales-a, and the acquire is resent to
     * sales-b; from then on sales-b's keys go there directly. The seed group
     * is not connected to twice, and ring() still asks it.
     */
    @Test
    void eachKeyGoesToTheGroupOfItsSlot() throws Exception {
        Path secret = Servers.writeSecret(dir, "client.secret");
        AtomicReference<String> body = new AtomicReference<>("-");
        AtomicLong tokens = new AtomicLong(100);
        try (FakeServer a = fake(secret, l -> group(l, s -> s < 8192, 1, body::get, tokens));
             FakeServer b = fake(secret, l -> group(l, s -> s >= 8192, 1, body::get, tokens))) {
            body.set("0-8191=sales-a@" + a.addr() + ";8192-16383=sales-b@" + b.addr());
            try (TicketingClient c = client(a.addr(), secret, Duration.ofSeconds(5))) {
                Lease la = c.acquire("show-4", S30, Duration.ofSeconds(1)); // slot 725
                assertEquals(0, c.stats().ringVersion(), "no W yet: no ring");
                assertEquals(0, c.stats().rerouted());
                Lease lb = c.acquire("show-1", S30, Duration.ofSeconds(1)); // slot 14934
                Stats st = c.stats();
                assertEquals(1, st.ringVersion());
                assertEquals(1, st.rerouted());
                assertEquals(0, st.indeterminate());
                assertEquals(4, st.connections(), "two to each group's one address, not a second set for the seed");
                assertFalse(c.query("show-6").held()); // slot 16239
                Lease lc = c.acquire("show-6", S30, Duration.ZERO);
                assertFalse(c.releaseToken("show-1", lb.token()), "not resent");
                lc.close();
                la.close();
                assertEquals(1, c.stats().rerouted(), "routed by the ring: no second W");
                assertEquals(2, a.linesOf('A').size(), "show-4, and show-1 before the ring: " + a.lines);
                assertEquals(List.of(), a.linesOf('Q'));
                assertEquals(1, a.linesOf('R').size());
                assertEquals(2, b.linesOf('A').size(), "show-1 resent, show-6: " + b.lines);
                assertEquals(1, b.linesOf('Q').size());
                assertEquals(2, b.linesOf('R').size());
                assertEquals(1, a.linesOf('S').size(), "one ring fetch, from the group that answered W");
                assertEquals(new Ring(1, body.get()), c.ring());
                assertEquals(2, a.linesOf('S').size(), "ring() asks the seed group");
                assertEquals(List.of(), b.linesOf('S'));
            }
        }
    }

    /**
     * The group the ring names answers W (a move in progress): the client
     * resends there after 20, 40, 80 ms, each time with what is left of the
     * wait, and the acquire is granted once the group serves the slot.
     */
    @Test
    void theSameGroupIsAskedAgainAfterGrowingPauses() throws Exception {
        Path secret = Servers.writeSecret(dir, "client.secret");
        AtomicReference<String> body = new AtomicReference<>("-");
        AtomicLong tokens = new AtomicLong(7);
        java.util.concurrent.atomic.AtomicInteger acquires = new java.util.concurrent.atomic.AtomicInteger();
        try (FakeServer a = fake(secret, l -> group(l, s -> !l.startsWith("A ") || acquires.incrementAndGet() > 3, 1,
                body::get, tokens))) {
            body.set("0-16383=sales-a@" + a.addr());
            try (TicketingClient c = client(a.addr(), secret, Duration.ofSeconds(5))) {
                long t0 = System.nanoTime();
                Lease l = c.acquire("k", S30, Duration.ofSeconds(5));
                long ms = (System.nanoTime() - t0) / 1_000_000;
                assertTrue(ms >= 140, "20 + 40 + 80 ms of pauses, took " + ms);
                assertEquals(8, l.token());
                assertEquals(3, c.stats().rerouted());
                assertEquals(1, c.stats().ringVersion());
                List<String> sent = a.linesOf('A');
                assertEquals(4, sent.size(), sent.toString());
                assertTrue(waitOf(sent.get(0)) > 4000 && waitOf(sent.get(0)) <= 5000, sent.toString());
                for (int i = 1; i < sent.size(); i++) {
                    assertTrue(waitOf(sent.get(i)) <= waitOf(sent.get(i - 1)), "the rest of the wait: " + sent);
                }
                assertTrue(waitOf(sent.get(3)) <= 5000 - 140, sent.toString());
                assertEquals(3, a.linesOf('S').size(), "the ring asked after each W");
                l.close();
            }
        }
    }

    /** A slot no range of the ring covers: WRONG_GROUP at once, not at the end of the budget. */
    @Test
    void aSlotOfNoGroupIsWrongGroupAtOnce() throws Exception {
        Path secret = Servers.writeSecret(dir, "client.secret");
        AtomicReference<String> body = new AtomicReference<>("-");
        try (FakeServer a = fake(secret, l -> group(l, s -> s < 8192, 2, body::get, new AtomicLong()))) {
            body.set("0-8191=sales-a@" + a.addr());
            try (TicketingClient c = client(a.addr(), secret, Duration.ofSeconds(5))) {
                long t0 = System.nanoTime();
                WrongGroupException e = assertThrows(WrongGroupException.class,
                        () -> c.acquire("show-1", S30, Duration.ofSeconds(10)));
                assertTrue(System.nanoTime() - t0 < 3_000_000_000L, "decided by the ring, not the 10 s budget");
                assertEquals(14934, e.slot());
                assertEquals(2, e.ringVersion());
                assertEquals(2, c.stats().ringVersion());
                assertEquals(0, c.stats().rerouted());
                assertEquals(1, a.linesOf('A').size());
                WrongGroupException q = assertThrows(WrongGroupException.class, () -> c.query("show-1"));
                assertEquals(14934, q.slot());
                assertEquals(1, a.linesOf('Q').size(), "sent to the seed, whose W says the same");
            }
        }
    }

    /**
     * A slot frozen for the whole budget: the acquire ends WRONG_GROUP when
     * max(wait, sendBudgetMin) has passed, a query at its request timeout.
     * An acquire waiting out a pause is cancelled like one that waits for a
     * connection, and so is one the client's close() finds there.
     */
    @Test
    void aFrozenSlotEndsWrongGroupWithTheBudget() throws Exception {
        Path secret = Servers.writeSecret(dir, "client.secret");
        AtomicReference<String> body = new AtomicReference<>("-");
        try (FakeServer a = fake(secret, l -> group(l, s -> false, 1, body::get, new AtomicLong()))) {
            body.set("0-16383=sales-a@" + a.addr());
            TicketingClient c = TicketingClient.builder().addrs(a.addr()).secretFile(secret).owner("java-groups")
                    .sendBudgetMin(Duration.ofMillis(300)).requestTimeout(Duration.ofMillis(400)).build();
            try (c) {
                long t0 = System.nanoTime();
                WrongGroupException e = assertThrows(WrongGroupException.class,
                        () -> c.acquire("show-42", S30, Duration.ZERO));
                long ms = (System.nanoTime() - t0) / 1_000_000;
                assertTrue(ms >= 140 && ms < 1500, "within the 300 ms budget, with its pauses: " + ms);
                assertEquals(11909, e.slot());
                assertEquals(1, e.ringVersion());
                assertTrue(c.stats().rerouted() >= 2, c.stats().toString());
                t0 = System.nanoTime();
                assertThrows(WrongGroupException.class, () -> c.query("show-42"));
                ms = (System.nanoTime() - t0) / 1_000_000;
                assertTrue(ms >= 140 && ms < 1500, "within the 400 ms request timeout: " + ms);
                assertEquals(0, c.stats().indeterminate());

                java.util.concurrent.CompletableFuture<Lease> f = c.acquireAsync("show-42", S30,
                        Duration.ofSeconds(20));
                Thread.sleep(300);
                f.cancel(true);
                assertTrue(Servers.waitFor(Duration.ofSeconds(2), () -> c.stats().requestsInProgress() == 0),
                        "the cancelled acquire is still in the client: " + c.stats());
                java.util.concurrent.CompletableFuture<Lease> g = c.acquireAsync("show-42", S30,
                        Duration.ofSeconds(20));
                Thread.sleep(300);
                c.close();
                CancelledException x = assertThrows(CancelledException.class, () -> sync(g));
                assertEquals("shutdown", x.reason());
            }
        }
    }

    /**
     * The ring is never replaced by an older one: sales-b answers W by its
     * own older ring (version 3, which gives every slot back to sales-a),
     * and the client keeps version 5 and asks sales-b again after a pause. A
     * release answered W and sent again is no "resent" release.
     */
    @Test
    void anOlderRingIsNeverTaken() throws Exception {
        Path secret = Servers.writeSecret(dir, "client.secret");
        AtomicReference<String> ringA = new AtomicReference<>("-");
        AtomicReference<String> ringB = new AtomicReference<>("-");
        AtomicLong tokens = new AtomicLong(40);
        java.util.concurrent.atomic.AtomicInteger firsts = new java.util.concurrent.atomic.AtomicInteger();
        try (FakeServer a = fake(secret, l -> group(l, s -> false, 5, ringA::get, tokens));
             FakeServer b = fake(secret, l -> group(l, s -> {
                 // The first acquire and the first release are answered W.
                 int bit = l.startsWith("A ") ? 1 : l.startsWith("R ") ? 2 : 0;
                 return bit == 0 || (firsts.getAndUpdate(v -> v | bit) & bit) != 0;
             }, 3, ringB::get, tokens))) {
            ringA.set("0-16383=sales-b@" + b.addr());
            ringB.set("0-16383=sales-a@" + a.addr());
            try (TicketingClient c = client(a.addr(), secret, Duration.ofSeconds(5))) {
                Lease l = c.acquire("show-42", S30, Duration.ofSeconds(5));
                assertEquals(41, l.token());
                assertEquals(5, c.stats().ringVersion(), "version 3 from sales-b was not taken");
                assertEquals(2, c.stats().rerouted(), "to sales-b, then sales-b again after its W");
                assertFalse(c.releaseToken("show-42", l.token()), "a W released nothing: no resend of it");
                assertEquals(3, c.stats().rerouted());
                assertEquals(1, a.linesOf('A').size(), a.lines.toString());
                assertEquals(List.of(), a.linesOf('R'), "the release went by the ring: " + a.lines);
                assertEquals(2, b.linesOf('A').size());
                assertEquals(2, b.linesOf('R').size());
                assertEquals(5, c.stats().ringVersion());
                assertEquals(0, c.stats().releasesQueued());
            }
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
