package example.ticketing;

import java.time.Duration;
import java.time.Instant;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * A held lock: the key, the fencing token to pass to every write it
 * protects, and the deadline by which the lease ends for certain.
 *
 * <p>Closing a lease releases it, so try-with-resources holds the key for
 * exactly one block:
 *
 * <pre>{@code
 * try (Lease lease = client.acquire("show-42", Duration.ofSeconds(30), Duration.ofSeconds(5))) {
 *     db.write(..., lease.token());   // finish before lease.remaining() runs out
 * }
 * }</pre>
 *
 * A lease is released at most once: {@link #close()} after
 * {@link TicketingClient#release(Lease)} (or a second {@code close()})
 * does nothing. Thread-safe.
 */
public final class Lease implements AutoCloseable {
    private final TicketingClient client;
    private final String key;
    private final long token;
    private final long deadlineNanos;
    private final Instant deadline;
    private final AtomicBoolean released = new AtomicBoolean();

    Lease(TicketingClient client, String key, long token, long deadlineNanos) {
        this.client = client;
        this.key = key;
        this.token = token;
        this.deadlineNanos = deadlineNanos;
        this.deadline = Instant.now().plusNanos(deadlineNanos - System.nanoTime());
    }

    /** The key held. */
    public String key() {
        return key;
    }

    /**
     * The fencing token: an unsigned 64-bit number (tokens only grow).
     * Compare tokens with {@link Long#compareUnsigned}; store them where
     * every u64 fits (see {@link #tokenString()}).
     */
    public long token() {
        return token;
    }

    /** The token in decimal, as the server writes it (unsigned). */
    public String tokenString() {
        return Long.toUnsignedString(token);
    }

    /**
     * When the lease ends for certain, on the wall clock: counted from the
     * first byte of the acquire written, which is earlier than the server's
     * commit. Prefer {@link #remaining()}, which the monotonic clock
     * measures and a clock step cannot move.
     */
    public Instant deadline() {
        return deadline;
    }

    /** The lease left on the monotonic clock; zero or negative once it has run out. */
    public Duration remaining() {
        return Duration.ofNanos(deadlineNanos - System.nanoTime());
    }

    /** True once the lease has run out: another holder may be inside. */
    public boolean isExpired() {
        return deadlineNanos - System.nanoTime() <= 0;
    }

    boolean markReleased() {
        return released.compareAndSet(false, true);
    }

    /**
     * Releases the lease, once; later calls do nothing. Blocks until
     * {@code R} or {@code N} or the absolute 5 s deadline of the release.
     *
     * @throws NotHeldException nothing was held under (key, owner, token):
     *     the lease had run out, so another holder may have entered
     * @throws UnconfirmedException no answer within 5 s: never assume success
     * @throws QueueFullException the release queue was full (the lease will free the key)
     * @throws WrongGroupException no group served the key's slot within the
     *     release's 5 s: nothing was released where it was answered so
     * @throws InvalidRequestException reason {@code thread}: called on the
     *     client's I/O thread (in a stage of one of its futures), where it
     *     cannot block; the lease stays held, use {@link #releaseAsync()} there
     */
    @Override
    public void close() {
        client.refuseOnIoThread("release", key);
        if (markReleased()) {
            client.releaseToken(key, token);
        }
    }

    /**
     * Releases the lease without blocking, once: the future holds whether
     * the release was written more than once, or fails with the exception
     * {@link #close()} would throw. After a first release it completes with
     * false at once.
     */
    public CompletableFuture<Boolean> releaseAsync() {
        if (!markReleased()) {
            return CompletableFuture.completedFuture(false);
        }
        return client.releaseAsync(key, token);
    }

    @Override
    public String toString() {
        return "Lease[key=" + key + ", token=" + tokenString() + ", remaining=" + remaining().toMillis() + " ms]";
    }
}
