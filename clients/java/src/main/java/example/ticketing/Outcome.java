package example.ticketing;

/**
 * What one request came to: the outcomes of the C library
 * ({@code enum tk_client_outcome}), with the same names. The blocking and
 * asynchronous calls return the successful ones as values and raise every
 * other one as a {@link TicketingException}; {@link TicketingException#outcome()}
 * names it. docs/client.md has the table of what each means and what the
 * caller must do.
 */
public enum Outcome {
    /** Acquire, {@code G}: the key is held; the lease carries the fencing token. */
    ACQUIRED,
    /** Acquire, {@code T}: the turn did not come within the wait. Not acquired. */
    TIMEOUT,
    /** Acquire, {@code B}: held and the wait was 0, or a server bound. Not acquired. */
    BUSY,
    /** A field broke the limits (refused locally or {@code E <id> <reason>}). Nothing changed. */
    INVALID,
    /**
     * Acquire: not one byte was written within its budget, definitely not
     * acquired. Query, ping: no answer within the request timeout.
     */
    UNAVAILABLE,
    /** Acquire: written, no confirmed answer. Maybe acquired: do not enter. */
    INDETERMINATE,
    /** Cancelled (by the caller, an interrupt or {@code close()}) before any byte was written. */
    CANCELLED,
    /** Release, {@code R}: released. */
    RELEASED,
    /** Release, {@code N}: nothing held under exactly (key, owner, token). */
    NOT_HELD,
    /** Release: no {@code R} or {@code N} before the absolute 5 s deadline. Never assume success. */
    UNCONFIRMED,
    /** Release: the release queue is full; nothing was enqueued. */
    QUEUE_FULL,
    /** Query, ping or ring answered. */
    ANSWERED,
    /**
     * Acquire, release or query, {@code W}: no group served the key's slot
     * within the request's budget, though the client fetched the ring and
     * sent the request again to the group it names (the ring names no group
     * for the slot, or a move of it did not end in time). Definite: nothing
     * was done where it was answered so (not acquired, nothing released).
     */
    WRONG_GROUP
}
