package example.ticketing;

/**
 * {@link Outcome#WRONG_GROUP}: the node's group does not serve the key's
 * slot (the server answered {@code W <id> <slot> <ring_version>}).
 * Definite: nothing was done, so an acquire was not granted and a release
 * released nothing (it is not retried). The request may be sent to the
 * group that owns the slot; {@link TicketingClient#ring()} tells which, and
 * a ring older than {@link #ringVersion()} is out of date.
 */
public final class WrongGroupException extends TicketingException {
    private static final long serialVersionUID = 1L;

    private final int slot;
    private final long ringVersion;
    private final boolean resent;

    WrongGroupException(String key, int slot, long ringVersion, boolean resent, String message) {
        super(Outcome.WRONG_GROUP, key, "", message);
        this.slot = slot;
        this.ringVersion = ringVersion;
        this.resent = resent;
    }

    /** The key's slot, 0 to 16383, as the server computed it (the same as {@link Slots#slot}). */
    public int slot() {
        return slot;
    }

    /**
     * The version of the ring the group judged by, an unsigned 64-bit
     * number (0: the group has no ring yet). Compare with
     * {@link Long#compareUnsigned}.
     */
    public long ringVersion() {
        return ringVersion;
    }

    /** Release: true if it was written more than once (its connection died after a write). */
    public boolean resent() {
        return resent;
    }
}
