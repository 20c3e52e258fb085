package example.ticketing;

/**
 * {@link Outcome#INDETERMINATE}: the acquire was written and no confirmed
 * answer came (the connection died, or nothing came by wait + response
 * grace, or the caller cancelled it after it was written). The key may be
 * held by this client: <b>do not enter the critical section</b>, and do
 * nothing else. If the grant still arrives, the client releases it at once;
 * if it never does, the lease frees the key. With {@link #reason()}
 * {@code lease}: the grant did come, but only after the lease counted from
 * the first write had run out; it was released at once.
 */
public final class IndeterminateException extends TicketingException {
    private static final long serialVersionUID = 1L;

    IndeterminateException(String key, String reason, String message) {
        super(Outcome.INDETERMINATE, key, reason, message);
    }
}
