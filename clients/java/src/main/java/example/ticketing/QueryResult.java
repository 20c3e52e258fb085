package example.ticketing;

/**
 * The committed holder of a key, as a linearizable read saw it.
 *
 * @param key the key asked about
 * @param held false when the key is free
 * @param owner the holder's owner name, {@code null} when the key is free
 * @param token the holder's fencing token (unsigned), 0 when the key is free
 * @param waiters the number of acquires queued behind the holder
 */
public record QueryResult(String key, boolean held, String owner, long token, long waiters) {}
