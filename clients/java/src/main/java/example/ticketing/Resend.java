package example.ticketing;

/**
 * The arithmetic of a request's budget and of resending it after {@code W}
 * (docs/client.md, "Deadlines" and "Groups and the ring"). Pure: every
 * time is a {@link System#nanoTime()} value passed in.
 *
 * <p>A request answered {@code W} goes again to the group the ring names:
 * at once if that is another group than the one that answered; after a
 * pause if it is the same one (a move in progress), 20 ms doubling to at
 * most 200 ms. It goes on while its budget lasts: an acquire's is
 * max(wait, send budget floor) from the call, a release's its absolute 5 s
 * deadline, a query's the request timeout.
 */
final class Resend {
    static final long PAUSE_FIRST_NANOS = 20 * Engine.MS;
    static final long PAUSE_MAX_NANOS = 200 * Engine.MS;

    private Resend() {}

    /** How long a request of type has from its call, in nanoseconds. */
    static long budgetNanos(char type, long waitMs, long sendBudgetMinMs, long requestTimeoutNanos) {
        if (type == 'A') {
            return Math.max(waitMs, sendBudgetMinMs) * Engine.MS;
        }
        if (type == 'R') {
            return Proto.RELEASE_DEADLINE_MS * Engine.MS;
        }
        return requestTimeoutNanos;
    }

    /**
     * The pause before a request goes again to the group that has just
     * answered it {@code W}: the first 20 ms, each next one twice the last,
     * at most 200 ms. last is the pause before this one (0: none yet).
     */
    static long nextPauseNanos(long lastPauseNanos) {
        if (lastPauseNanos <= 0) {
            return PAUSE_FIRST_NANOS;
        }
        return Math.min(lastPauseNanos * 2, PAUSE_MAX_NANOS);
    }

    /** Whether a request may still be sent at the time at: before its budget's end. */
    static boolean within(long at, long budgetEndNanos) {
        return at - budgetEndNanos < 0;
    }

    /**
     * The wait an acquire is sent with at now: what is left of the caller's
     * wait since the call (0 once it is spent), so that a resend waits no
     * longer than the caller asked in all.
     */
    static long waitLeftMs(long waitMs, long submitNanos, long now) {
        long spentMs = now - submitNanos > 0 ? (now - submitNanos) / Engine.MS : 0;
        return spentMs >= waitMs ? 0 : waitMs - spentMs;
    }
}
