package example.ticketing;

/**
 * The base of every exception of this client: an outcome that is not a
 * success. Catch the subclasses for the outcomes you handle one by one, or
 * this class and switch on {@link #outcome()}.
 *
 * <p>It is unchecked, so that it passes through lambdas and
 * {@link java.util.concurrent.CompletableFuture} stages; an asynchronous
 * call completes its future exceptionally with it.
 */
public class TicketingException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    private final Outcome outcome;
    private final String key;
    private final String reason;

    TicketingException(Outcome outcome, String key, String reason, String message) {
        super(message);
        this.outcome = outcome;
        this.key = key == null ? "" : key;
        this.reason = reason == null ? "" : reason;
    }

    /** The outcome, by the C library's name. */
    public Outcome outcome() {
        return outcome;
    }

    /** The request's key, {@code ""} for a ping or the configuration. */
    public String key() {
        return key;
    }

    /**
     * The reason word of the outcome, {@code ""} when it names none: for
     * {@link Outcome#INVALID} the field ({@code key}, {@code owner},
     * {@code lease}, {@code wait}, {@code token}, or the server's word),
     * {@code tls} for an {@link Outcome#UNAVAILABLE} decided because every
     * connection failed in TLS, {@code lease} for an
     * {@link Outcome#INDETERMINATE} grant that came after its lease,
     * {@code shutdown} for a request cut short by {@code close()},
     * {@code thread} for a blocking call made on the client's I/O thread.
     */
    public String reason() {
        return reason;
    }
}
