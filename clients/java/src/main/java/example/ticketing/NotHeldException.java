package example.ticketing;

/**
 * {@link Outcome#NOT_HELD}: nothing is held under exactly (key, owner,
 * token): the lease ran out, it was released already, or never granted.
 * Definite. If it comes unexpected, the lease may have run out during the
 * work and another holder may have entered: fencing in the database is what
 * keeps that safe.
 */
public final class NotHeldException extends TicketingException {
    private static final long serialVersionUID = 1L;

    private final boolean resent;

    NotHeldException(String key, boolean resent, String message) {
        super(Outcome.NOT_HELD, key, "", message);
        this.resent = resent;
    }

    /**
     * True if the release was written more than once (its connection died
     * after a write): then an earlier attempt may be what released the key.
     */
    public boolean resent() {
        return resent;
    }
}
