package example.ticketing;

import java.util.concurrent.CompletableFuture;

/**
 * One request inside the engine. Every field but {@link #future} belongs to
 * the I/O thread once the request is submitted.
 */
final class Req {
    static final int WIRE_NONE = 0;
    static final int WIRE_QUEUED = 1;
    static final int WIRE_SENT = 2;

    final char type;
    final String key;
    final long leaseMs;
    final long waitMs;
    final long token;
    /** Completed by the engine only, exactly once. */
    final CompletableFuture<Result> future = new CompletableFuture<>();

    long submitNanos;
    /** When its first byte was last written; valid if everSent. */
    long sentNanos;
    boolean everSent;
    long waitSentMs;
    long deadline;
    long hgen;
    boolean inHeap;
    int wire = WIRE_NONE;
    Conn conn;
    long wireId;
    long streamPos;
    boolean decided;
    boolean neutered;
    boolean compensation;
    boolean resent;
    boolean pending;
    /** S: the parts of a multi-line answer read so far on its connection (0: none yet). */
    int ringPartsRead;
    int ringParts;
    long ringVersion;
    StringBuilder ringBody;

    // ---- routing by group (docs/client.md, "Groups and the ring") ----
    static final int PARK_NONE = 0;
    /** Answered W, waiting for the ring fetch in progress. */
    static final int PARK_RING = 1;
    /** Answered W by the group the ring names, waiting out its pause. */
    static final int PARK_PAUSE = 2;

    /** A, R, Q: the key's slot. */
    int slot;
    /** The group it is routed to (the one whose queue or connection holds it). */
    Group group;
    /** submit + its budget: the end of its resends after W. */
    long budgetEnd;
    /** Its last answer was W and it was not written since. */
    boolean wrong;
    int wrongSlot;
    long wrongVersion;
    /** The group that answered the last W. */
    Group wrongGroup;
    /** The last pause before a resend to the same group (0: none). */
    long pauseNanos;
    int park = PARK_NONE;
    /** The client's own S, fetching the ring after a W: no caller waits on it. */
    boolean fetch;

    Req(char type, String key, long leaseMs, long waitMs, long token) {
        this.type = type;
        this.key = key;
        this.leaseMs = leaseMs;
        this.waitMs = waitMs;
        this.token = token;
    }
}
