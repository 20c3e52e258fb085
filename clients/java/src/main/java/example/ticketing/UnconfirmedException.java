package example.ticketing;

/**
 * {@link Outcome#UNCONFIRMED}: no {@code R} or {@code N} came before the
 * release's absolute 5 s deadline from its enqueue. <b>Never assume
 * success</b>: the server-side lease is the final safety net.
 */
public final class UnconfirmedException extends TicketingException {
    private static final long serialVersionUID = 1L;

    private final boolean resent;

    UnconfirmedException(String key, boolean resent, String message) {
        super(Outcome.UNCONFIRMED, key, "", message);
        this.resent = resent;
    }

    /** True if the release was written more than once. */
    public boolean resent() {
        return resent;
    }
}
