package example.ticketing;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The pure parts of routing by key (docs/client.md, "Groups and the
 * ring"): the group of a slot by a ring's body, the seed group matched by
 * address, never an older ring, and the arithmetic of resending after W.
 * No sockets, no clocks: every time is a number passed in.
 */
@Timeout(value = 10, unit = TimeUnit.SECONDS)
class RoutingTest {
    private static final long MS = 1_000_000L;
    private static final String TWO = "0-8191=sales-a@10.0.0.1:7400,10.0.0.2:7400,10.0.0.3:7400;"
            + "8192-16383=sales-b@10.0.1.1:7400,10.0.1.2:7400";

    private static List<Addr> addrs(String... texts) {
        List<Addr> out = new ArrayList<>();
        for (String t : texts) {
            out.add(Addr.parseOrNull(t));
        }
        return out;
    }

    @Test
    void theGroupOfASlot() {
        RingTable t = RingTable.parse(3, TWO);
        assertEquals(3, t.version);
        assertEquals(List.of("sales-a", "sales-b"), t.names);
        assertEquals(0, t.groupOf(0));
        assertEquals(0, t.groupOf(8191));
        assertEquals(1, t.groupOf(8192));
        assertEquals(1, t.groupOf(16383));
        assertEquals(1, t.groupOf(Slots.slot("show-42")), "slot 11909");
        assertEquals("10.0.1.2:7400", t.addrs.get(1).get(1).text);
        assertEquals(3, t.addrs.get(0).size());
    }

    @Test
    void slotsNoRangeCoversBelongToNoGroup() {
        RingTable t = RingTable.parse(2, "10-19=a@h:1;30-30=b@h:2;40-49=a@h:1");
        assertEquals(List.of("a", "b"), t.names, "a group named twice is one group");
        assertEquals(-1, t.groupOf(0));
        assertEquals(-1, t.groupOf(9));
        assertEquals(0, t.groupOf(10));
        assertEquals(0, t.groupOf(19));
        assertEquals(-1, t.groupOf(20));
        assertEquals(1, t.groupOf(30));
        assertEquals(-1, t.groupOf(31));
        assertEquals(0, t.groupOf(45));
        assertEquals(-1, t.groupOf(16383));
        RingTable none = RingTable.parse(4, "-");
        assertEquals(List.of(), none.names);
        for (int s : new int[] {0, 8191, 16383}) {
            assertEquals(-1, none.groupOf(s));
        }
    }

    @Test
    void groupNamesMayHoldAnyVisibleCharacterButSemicolonAndAt() {
        RingTable t = RingTable.parse(1, "0-16383=x=y-z/1@[::1]:7400");
        assertEquals(List.of("x=y-z/1"), t.names);
        assertEquals("::1", t.addrs.get(0).get(0).host);
    }

    @Test
    void aBodyThatBreaksTheRingsGrammarIsRefusedWhole() {
        String[] bad = {
            "", "0-100", "0-100=a", "0-100=@h:1", "0-100=a@", "0-100=a@h", "0-100=a@h:1@h:2",
            "00-100=a@h:1", "0-0100=a@h:1", "100-0=a@h:1", "0-16384=a@h:1", "-5=a@h:1", "0-5=a@h:1;",
            "0-5=a@h:1;;6-9=a@h:1", "0-10=a@h:1;5-20=b@h:2", "20-30=a@h:1;0-10=b@h:2", "0-5=a@h:1;5-9=b@h:2",
            "0-5=a b@h:1", "0-5=" + "g".repeat(65) + "@h:1", "0-5=a@h:1,h:2,h:3,h:4,h:5,h:6", "0-5=a@h:1,",
            "0-5=a@h:0", "0-5=a@" + "h".repeat(127) + ":1",
        };
        for (String b : bad) {
            assertThrows(IllegalArgumentException.class, () -> RingTable.parse(1, b), b);
        }
        // The bounds themselves are fine: 64 groups, 1,024 ranges, 5 addresses, 64-byte names.
        StringBuilder groups = new StringBuilder();
        for (int i = 0; i < 64; i++) {
            groups.append(i == 0 ? "" : ";").append(i).append('-').append(i).append("=g").append(i).append("@h:1");
        }
        assertEquals(64, RingTable.parse(1, groups.toString()).names.size());
        assertThrows(IllegalArgumentException.class, () -> RingTable.parse(1, groups + ";64-64=g64@h:1"),
                "65 groups");
        StringBuilder ranges = new StringBuilder();
        for (int i = 0; i < 1024; i++) {
            ranges.append(i == 0 ? "" : ";").append(2 * i).append('-').append(2 * i).append("=g@h:1");
        }
        assertEquals(1, RingTable.parse(1, ranges.toString()).names.size());
        assertThrows(IllegalArgumentException.class, () -> RingTable.parse(1, ranges + ";4000-4000=g@h:1"),
                "1,025 ranges");
        assertEquals(5, RingTable.parse(1, "0-5=" + "g".repeat(64) + "@a:1,b:2,c:3,d:4,e:5").addrs.get(0).size());
    }

    @Test
    void theSeedGroupIsTheOneWithAConfiguredAddress() {
        RingTable t = RingTable.parse(3, TWO);
        assertEquals(0, t.groupWithAnyOf(addrs("10.0.0.1:7400")));
        assertEquals(0, t.groupWithAnyOf(addrs("192.168.9.9:7400", "10.0.0.3:7400")), "any one of them");
        assertEquals(1, t.groupWithAnyOf(addrs("10.0.1.2:7400")));
        assertEquals(-1, t.groupWithAnyOf(addrs("10.0.1.2:7401")), "another port is another node");
        assertEquals(-1, t.groupWithAnyOf(addrs("10.0.9.9:7400")));
        RingTable named = RingTable.parse(1, "0-99=a@Node-1.Example:7400;100-199=b@node-2.example:7400");
        assertEquals(0, named.groupWithAnyOf(addrs("node-1.example:7400")), "a host name in either case");
        assertEquals(1, named.groupWithAnyOf(addrs("NODE-2.EXAMPLE:7400")));
        assertEquals(-1, RingTable.parse(1, "-").groupWithAnyOf(addrs("10.0.0.1:7400")));
    }

    @Test
    void neverAnOlderRingNorTheSameAgain() {
        assertTrue(RingTable.newer(2, 1));
        assertTrue(RingTable.newer(1, 0), "any ring is newer than none");
        assertFalse(RingTable.newer(1, 1));
        assertFalse(RingTable.newer(1, 2));
        assertFalse(RingTable.newer(0, 0), "a group with no ring tells nothing new");
        assertFalse(RingTable.newer(0, 7));
        long top = -1L; // 2^64 - 1: versions are unsigned
        assertTrue(RingTable.newer(top, Long.MAX_VALUE));
        assertFalse(RingTable.newer(Long.MAX_VALUE, top));
        assertTrue(RingTable.newer(Long.MIN_VALUE, Long.MAX_VALUE), "2^63 is above 2^63 - 1");
    }

    @Test
    void thePauseBeforeTheSameGroupDoublesFrom20To200Ms() {
        long p = 0;
        List<Long> got = new ArrayList<>();
        for (int i = 0; i < 7; i++) {
            p = Resend.nextPauseNanos(p);
            got.add(p / MS);
        }
        assertEquals(List.of(20L, 40L, 80L, 160L, 200L, 200L, 200L), got);
    }

    @Test
    void theBudgetOfEachRequest() {
        long timeout = 5000 * MS;
        assertEquals(1000 * MS, Resend.budgetNanos('A', 0, 1000, timeout), "wait 0 still gets the floor");
        assertEquals(1000 * MS, Resend.budgetNanos('A', 400, 1000, timeout));
        assertEquals(20_000 * MS, Resend.budgetNanos('A', 20_000, 1000, timeout), "the wait when longer");
        assertEquals(5000 * MS, Resend.budgetNanos('R', 20_000, 1000, 800 * MS), "a release: its absolute 5 s");
        assertEquals(800 * MS, Resend.budgetNanos('Q', 0, 1000, 800 * MS), "a query: the request timeout");
    }

    @Test
    void aResendMustStartBeforeTheBudgetEnds() {
        long end = 1_000_000 * MS;
        assertTrue(Resend.within(end - 1, end));
        assertFalse(Resend.within(end, end));
        assertFalse(Resend.within(end + 1, end));
        // System.nanoTime() may be negative and wrap: only differences count.
        long wrapEnd = Long.MIN_VALUE + 10 * MS;
        assertTrue(Resend.within(Long.MAX_VALUE - 5 * MS, wrapEnd));
        assertFalse(Resend.within(wrapEnd + MS, wrapEnd));
    }

    @Test
    void eachResendWaitsWhatIsLeftOfTheWait() {
        long call = -3_000 * MS; // nanoTime values may be negative
        assertEquals(20_000, Resend.waitLeftMs(20_000, call, call));
        assertEquals(19_400, Resend.waitLeftMs(20_000, call, call + 600 * MS + MS / 2), "whole ms spent");
        assertEquals(1, Resend.waitLeftMs(20_000, call, call + 19_999 * MS));
        assertEquals(0, Resend.waitLeftMs(20_000, call, call + 20_000 * MS));
        assertEquals(0, Resend.waitLeftMs(20_000, call, call + 60_000 * MS), "never below 0");
        assertEquals(0, Resend.waitLeftMs(0, call, call + 5 * MS));
        assertEquals(500, Resend.waitLeftMs(500, call, call - MS), "a clock read before the call spends nothing");
    }
}
