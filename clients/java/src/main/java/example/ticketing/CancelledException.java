package example.ticketing;

/**
 * {@link Outcome#CANCELLED}: the request was cancelled before any byte of
 * it was written (its future cancelled, or the calling thread interrupted),
 * or the client was closed while the request was not decided yet
 * ({@link #reason()} {@code shutdown}). Treat as not acquired: a grant that
 * still arrives for it is released at once.
 */
public final class CancelledException extends TicketingException {
    private static final long serialVersionUID = 1L;

    CancelledException(String key, String reason, String message) {
        super(Outcome.CANCELLED, key, reason, message);
    }
}
