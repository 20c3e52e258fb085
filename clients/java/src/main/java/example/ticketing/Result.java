package example.ticketing;

/** What one request came to, as the engine decided it (not public API). */
final class Result {
    final Outcome outcome;
    final String reason;
    long token;
    /** ACQUIRED: System.nanoTime() by which the lease ends for certain. */
    long leaseDeadlineNanos;
    boolean held;
    String owner;
    long waiters;
    boolean resent;
    long rttNanos;

    Result(Outcome outcome, String reason) {
        this.outcome = outcome;
        this.reason = reason == null ? "" : reason;
    }

    Result(Outcome outcome) {
        this(outcome, "");
    }
}
