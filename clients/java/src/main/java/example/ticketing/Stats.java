package example.ticketing;

/**
 * The counters of a client, as the C library's {@code tk_client_stats()}
 * reports them.
 *
 * @param connections connections kept (configured and hinted), of every group
 * @param connectionsReady connections that finished the handshake and probe, of every group
 * @param connectAttempts connection attempts made
 * @param handshakes handshakes whose server proof checked
 * @param authFailures handshakes refused (a wrong secret either way)
 * @param moved {@code M} lines received
 * @param requestsWritten request lines written (a resend counts again)
 * @param requestsInProgress acquires, queries and pings the client still holds: not decided
 *     yet, or decided (an {@code INDETERMINATE} acquire) and still expecting their answer;
 *     bounded by {@code requestsMax}
 * @param releasesQueued releases (explicit and compensations) in the release queue
 * @param compensations late grants released by the client itself
 * @param compensationsDropped late grants not released because the queue was full
 * @param indeterminate acquires that ended {@link Outcome#INDETERMINATE}
 * @param leaderHint the address of the last {@code M} hint (of any group), {@code ""} if none
 * @param ringVersion the version of the ring the client routes by, unsigned (0: none yet,
 *     everything goes to the configured addresses); compare with {@link Long#compareUnsigned}
 * @param rerouted how many times a request was sent again after a {@code W} answer
 */
public record Stats(int connections, int connectionsReady, long connectAttempts, long handshakes,
        long authFailures, long moved, long requestsWritten, long requestsInProgress,
        long releasesQueued, long compensations, long compensationsDropped, long indeterminate,
        String leaderHint, long ringVersion, long rerouted) {}
