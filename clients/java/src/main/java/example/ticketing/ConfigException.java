package example.ticketing;

/**
 * The configuration cannot work, so no client was made: an
 * {@link Outcome#INVALID} whose {@link #reason()} names the setting
 * ({@code addrs}, {@code secret}, {@code owner}, {@code tls}, or a
 * number's name such as {@code backoff}).
 */
public final class ConfigException extends InvalidRequestException {
    private static final long serialVersionUID = 1L;

    ConfigException(String reason, String message) {
        super("", reason, message);
    }
}
