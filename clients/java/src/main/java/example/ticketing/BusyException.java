package example.ticketing;

/**
 * {@link Outcome#BUSY}: the key was held and the wait was 0, or a server
 * bound was reached (a key's queue, all queued acquires, the key table).
 * Not acquired; returned at once, never retried inside the client.
 */
public final class BusyException extends TicketingException {
    private static final long serialVersionUID = 1L;

    BusyException(String key, String message) {
        super(Outcome.BUSY, key, "", message);
    }
}
