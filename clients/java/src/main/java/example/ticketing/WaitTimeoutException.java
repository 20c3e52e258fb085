package example.ticketing;

/**
 * {@link Outcome#TIMEOUT}: the turn did not come within the wait. Not
 * acquired. (Named so as not to be confused with
 * {@link java.util.concurrent.TimeoutException}.)
 */
public final class WaitTimeoutException extends TicketingException {
    private static final long serialVersionUID = 1L;

    WaitTimeoutException(String key, String message) {
        super(Outcome.TIMEOUT, key, "", message);
    }
}
