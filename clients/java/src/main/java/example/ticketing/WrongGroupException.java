package example.ticketing;

/**
 * {@link Outcome#WRONG_GROUP}: no group served the key's slot within the
 * request's budget. The client routes by key: after each {@code W <id>
 * <slot> <ring_version>} it fetched the ring and sent the request again to
 * the group the ring names, and this is the last such answer. Either the
 * ring names no group for the slot (no range covers it, or no ring at all)
 * or the slot stayed frozen or unclaimed by a move for the whole budget.
 * Definite: nothing was done where it was answered so, so an acquire was
 * not granted and a release released nothing there.
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
     * The version of the ring the group of the last {@code W} judged by, an
     * unsigned 64-bit number (0: the group has no ring yet). Compare with
     * {@link Long#compareUnsigned}.
     */
    public long ringVersion() {
        return ringVersion;
    }

    /**
     * Release: true if it was written more than once to a group that did not
     * answer {@code W} (its connection died after a write): that attempt may
     * have released the key. A write answered {@code W} released nothing and
     * does not count.
     */
    public boolean resent() {
        return resent;
    }
}
