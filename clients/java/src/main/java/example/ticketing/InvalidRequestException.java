package example.ticketing;

/**
 * {@link Outcome#INVALID}: a field broke the protocol's limits, refused by
 * the client before anything was sent or by the server ({@code E <id>
 * <reason>}). Nothing changed. {@link #reason()} names the field with the
 * C library's word: {@code key}, {@code owner}, {@code lease},
 * {@code wait}, {@code token} (or the server's word, or {@code thread}
 * for a blocking call made on the client's I/O thread).
 */
public class InvalidRequestException extends TicketingException {
    private static final long serialVersionUID = 1L;

    InvalidRequestException(String key, String reason, String message) {
        super(Outcome.INVALID, key, reason, message);
    }
}
