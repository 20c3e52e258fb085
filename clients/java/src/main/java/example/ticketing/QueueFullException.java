package example.ticketing;

/**
 * {@link Outcome#QUEUE_FULL}: the release queue is full and nothing was
 * enqueued (answered at once). The lease will free the key; back off.
 */
public final class QueueFullException extends TicketingException {
    private static final long serialVersionUID = 1L;

    QueueFullException(String key, String message) {
        super(Outcome.QUEUE_FULL, key, "", message);
    }
}
