package example.ticketing;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A ring as the client routes by it (docs/protocol.md, "The ring"): which
 * group owns each slot, and the client addresses of each group, parsed from
 * the body of an {@code S} answer. Pure: no sockets, no clocks, no threads.
 *
 * <p>The parse is as strict as the server's grammar and its bounds (1,024
 * ranges, 64 groups, 1-5 addresses of at most 128 bytes each, ranges in
 * increasing order and disjoint): a body that breaks them is refused
 * whole, and the client keeps routing by the ring it has.
 */
final class RingTable {
    static final int RANGES_MAX = 1024;
    static final int GROUPS_MAX = 64;
    static final int GROUP_NAME_MAX = 64;
    static final int GROUP_ADDRS_MAX = 5;
    static final int ADDR_LEN_MAX = 128;

    /** The ring's version, unsigned (0: no ring). */
    final long version;
    /** The groups' names, in the order the body first names them. */
    final List<String> names;
    /** The client addresses of each group, as its first range gives them. */
    final List<List<Addr>> addrs;
    /** Per slot: the index of its group in {@link #names}, -1 for none. */
    private final short[] owner;

    private RingTable(long version, List<String> names, List<List<Addr>> addrs, short[] owner) {
        this.version = version;
        this.names = names;
        this.addrs = addrs;
        this.owner = owner;
    }

    /**
     * Whether version is newer than than (both unsigned): a ring is only
     * ever replaced by a newer one, never by an older one or the same again.
     */
    static boolean newer(long version, long than) {
        return Long.compareUnsigned(version, than) > 0;
    }

    /**
     * Parses a ring's body ({@code "-"}: no ranges).
     *
     * @throws IllegalArgumentException the body breaks the ring's grammar or
     *     bounds; the message says where
     */
    static RingTable parse(long version, String body) {
        short[] o = new short[Slots.SLOTS];
        Arrays.fill(o, (short) -1);
        Map<String, Integer> index = new LinkedHashMap<>();
        List<List<Addr>> addrs = new ArrayList<>();
        if (body.equals("-")) {
            return new RingTable(version, List.of(), List.of(), o);
        }
        String[] ranges = body.split(";", -1);
        if (ranges.length > RANGES_MAX) {
            throw new IllegalArgumentException("more than " + RANGES_MAX + " ranges");
        }
        int prevLast = -1;
        for (String range : ranges) {
            int eq = range.indexOf('=');
            int at = range.indexOf('@');
            if (eq < 0 || at < eq || range.indexOf('@', at + 1) >= 0) {
                throw new IllegalArgumentException("range " + clip(range) + ": want <first>-<last>=<group>@<addr>");
            }
            int[] slots = slots(range.substring(0, eq));
            if (slots == null || slots[0] <= prevLast) {
                throw new IllegalArgumentException("range " + clip(range)
                        + ": bad slots, or not above the range before it");
            }
            prevLast = slots[1];
            String name = range.substring(eq + 1, at);
            if (name.length() > GROUP_NAME_MAX || !Proto.visible(name)) {
                throw new IllegalArgumentException("range " + clip(range) + ": bad group name");
            }
            List<Addr> list = addrList(range.substring(at + 1));
            if (list == null) {
                throw new IllegalArgumentException("range " + clip(range) + ": want 1-" + GROUP_ADDRS_MAX
                        + " addresses host:port");
            }
            Integer gi = index.get(name);
            if (gi == null) {
                if (index.size() == GROUPS_MAX) {
                    throw new IllegalArgumentException("more than " + GROUPS_MAX + " groups");
                }
                gi = index.size();
                index.put(name, gi);
                addrs.add(list);
            }
            Arrays.fill(o, slots[0], slots[1] + 1, (short) (int) gi);
        }
        return new RingTable(version, List.copyOf(index.keySet()), List.copyOf(addrs), o);
    }

    /** "first-last" as {first, last}, or null: decimal, no leading zero, first <= last < SLOTS. */
    private static int[] slots(String s) {
        int dash = s.indexOf('-');
        if (dash < 0) {
            return null;
        }
        Long first = Proto.parseU64(s.substring(0, dash));
        Long last = Proto.parseU64(s.substring(dash + 1));
        if (first == null || last == null || first > last || last >= Slots.SLOTS) {
            return null;
        }
        return new int[] {(int) (long) first, (int) (long) last};
    }

    private static List<Addr> addrList(String s) {
        String[] parts = s.split(",", -1);
        if (parts.length > GROUP_ADDRS_MAX) {
            return null;
        }
        List<Addr> out = new ArrayList<>();
        for (String p : parts) {
            Addr a = p.length() > ADDR_LEN_MAX ? null : Addr.parseOrNull(p);
            if (a == null) {
                return null;
            }
            out.add(a);
        }
        return List.copyOf(out);
    }

    private static String clip(String s) {
        return s.length() > 60 ? s.substring(0, 60) + "..." : s;
    }

    /** The index in {@link #names} of the group that owns slot, -1 if no range covers it. */
    int groupOf(int slot) {
        return owner[slot];
    }

    /**
     * The index of the group whose addresses include one of configured (the
     * client's seed group), -1 if the ring names none of them. The first
     * such group in the ring's order, should two share an address.
     */
    int groupWithAnyOf(List<Addr> configured) {
        for (int i = 0; i < addrs.size(); i++) {
            for (Addr a : addrs.get(i)) {
                for (Addr c : configured) {
                    if (a.sameAs(c)) {
                        return i;
                    }
                }
            }
        }
        return -1;
    }
}
