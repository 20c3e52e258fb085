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
    /** WRONG_GROUP: the key's slot. */
    int slot;
    /** WRONG_GROUP: the version of the ring the group judged by; ring: the ring's version (unsigned). */
    long ringVersion;
    /** Ring: the body, the parts joined by ';' ("-": no ranges). */
    String body;

    Result(Outcome outcome, String reason) {
        this.outcome = outcome;
        this.reason = reason == null ? "" : reason;
    }

    Result(Outcome outcome) {
        this(outcome, "");
    }
}
