package example.ticketing;

import java.nio.charset.StandardCharsets;
import java.util.Objects;

/**
 * The slot of a key, as the protocol defines it for groups and slots: a
 * deployment of several groups splits the keys into {@link #SLOTS} slots,
 * and each group serves the keys of the slot ranges it owns. Every client
 * computes the same slot for the same key, so this is part of the
 * protocol and never changes. A pure function: no sockets, no clocks.
 */
public final class Slots {
    /** How many slots there are; a slot is 0 to {@code SLOTS - 1}. */
    public static final int SLOTS = 16384;

    private static final long FNV_OFFSET_BASIS = 0xcbf29ce484222325L;
    private static final long FNV_PRIME = 0x100000001b3L;

    private Slots() {}

    /**
     * The slot of key: the 64-bit FNV-1a hash of the key's bytes (the bytes
     * the client sends, one per character for a valid key), modulo
     * {@link #SLOTS}. For example {@code slot("show-42")} is 11909.
     *
     * <p>It checks nothing but null: a key the client would refuse (empty,
     * longer than 250 characters, a space or a character outside printable
     * ASCII) still gets a slot, that of its UTF-8 bytes.
     *
     * @param key the key, as given to {@link TicketingClient#acquire}
     * @return the slot, 0 to {@code SLOTS - 1}
     * @throws NullPointerException if key is null
     */
    public static int slot(String key) {
        byte[] b = Objects.requireNonNull(key, "key").getBytes(StandardCharsets.UTF_8);
        long h = FNV_OFFSET_BASIS;
        for (byte x : b) {
            h ^= x & 0xff;
            h *= FNV_PRIME; // mod 2^64: long arithmetic wraps
        }
        return (int) Long.remainderUnsigned(h, SLOTS);
    }
}
