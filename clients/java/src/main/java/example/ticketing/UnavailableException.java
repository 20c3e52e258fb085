package example.ticketing;

/**
 * {@link Outcome#UNAVAILABLE}. For an acquire: not one byte of the request
 * was written within its budget, so it was <b>definitely not acquired</b>
 * (the cluster may be down or electing; retry later). For a query or ping:
 * no answer within the request timeout. The message names the last
 * connection failure ({@link TicketingClient#lastError()}).
 */
public final class UnavailableException extends TicketingException {
    private static final long serialVersionUID = 1L;

    private final boolean authFailure;

    UnavailableException(String key, String reason, String message, boolean authFailure) {
        super(Outcome.UNAVAILABLE, key, reason, message);
        this.authFailure = authFailure;
    }

    /**
     * True when the last connection failure was a refused handshake: a
     * wrong secret, or a server that does not know ours.
     */
    public boolean authFailure() {
        return authFailure;
    }
}
