package example.ticketing;

import java.io.IOException;
import java.net.InetAddress;
import java.nio.channels.SelectionKey;
import java.nio.channels.Selector;
import java.security.SecureRandom;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;
import java.util.PriorityQueue;
import java.util.Random;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;

/**
 * The client engine: one I/O thread per client, a {@link Selector} loop
 * that owns every socket, every timer and every outcome, by the rules of
 * the C library (docs/client.md).
 *
 * <p>Each round: run expired deadlines; put pending requests on
 * connections (releases first, the leader first, then round-robin); write;
 * wait for sockets, a wake-up or the nearest deadline; read; take new
 * requests and cancellations from callers. Callers never touch a socket:
 * they submit a {@link Req} and wait on its future.
 *
 * <p>A request's deadline (its heap key) depends on where it is:
 * <ul>
 * <li>acquire, not yet written: submit + max(wait, send budget floor), then
 * UNAVAILABLE (a line still in a write buffer is neutered first: its
 * command letter becomes X, which the server answers E and ignores);
 * <li>acquire, written: first write + wait as sent + response grace, then
 * INDETERMINATE (a G that comes at or after first write + lease is
 * INDETERMINATE too, reason "lease", and compensated);
 * <li>release (explicit or compensation): enqueue + 5 s, absolute, then
 * UNCONFIRMED;
 * <li>query, ping, ring: submit + request timeout, then UNAVAILABLE;
 * <li>decided but still holding an id on a connection (a zombie): a
 * linger, after which its id is forgotten. A G for a zombie acquire is
 * released at once (compensation).
 * </ul>
 *
 * <p>"Written" is tracked in bytes: each request records the stream offset
 * of its first byte, each connection counts the bytes the kernel took (with
 * TLS: the plaintext the TLS engine consumed). Only a request none of whose
 * bytes was written may go to another connection; a written acquire is
 * never resent.
 *
 * <p>Each request goes to a {@link Group}'s queues: the one its key's
 * slot belongs to, which the {@link Router} decides (the configured
 * addresses until a ring is known). A request answered {@code W} goes back
 * to the router, which sends it again or ends it {@code WRONG_GROUP}.
 */
final class Engine {
    static final long MS = 1_000_000L;
    static final long ZOMBIE_LINGER_NANOS = 30_000 * MS;
    static final int EXTRA_MAX = 4;
    static final int WBUF_HIGH = 64 * 1024;
    static final long PROBE_ID = 0;

    final Settings cfg;
    final Selector sel;
    final Thread thread;
    final Random rng;

    // ---- shared, under mu ----
    final ReentrantLock mu = new ReentrantLock();
    private final Condition readyCv = mu.newCondition();
    private List<Req> submitted = new ArrayList<>();
    private List<Req> cancels = new ArrayList<>();
    private List<Lookup> lookups = new ArrayList<>();
    private boolean stopping;
    private boolean wakePending;
    int liveRequests;
    int liveReleases;
    int readyCount;
    String lastError = "";
    boolean lastAuth;
    String leaderHint = "";

    // ---- written by the I/O thread, read by anyone ----
    final AtomicLong connectAttempts = new AtomicLong();
    final AtomicLong handshakes = new AtomicLong();
    final AtomicLong authFailures = new AtomicLong();
    final AtomicLong moved = new AtomicLong();
    final AtomicLong requestsWritten = new AtomicLong();
    final AtomicLong compensations = new AtomicLong();
    final AtomicLong compensationsDropped = new AtomicLong();
    final AtomicLong indeterminate = new AtomicLong();
    private volatile int connectionCount;

    // ---- the I/O thread's own ----
    private final Router router;
    /** The router's list of groups, the seed first. */
    private final List<Group> groups;
    private final PriorityQueue<HeapEntry> heap = new PriorityQueue<>();
    private long hseq;
    private boolean draining;
    private long drainDeadline;
    private ExecutorService resolver;

    private record HeapEntry(long deadline, long seq, long gen, Req req) implements Comparable<HeapEntry> {
        @Override
        public int compareTo(HeapEntry o) {
            int c = Long.compare(deadline, o.deadline);
            return c != 0 ? c : Long.compare(seq, o.seq);
        }
    }

    private record Lookup(Conn conn, String host, InetAddress result) {}

    Engine(Settings cfg) throws IOException {
        this.cfg = cfg;
        this.sel = Selector.open();
        this.rng = new Random(new SecureRandom().nextLong());
        router = new Router(this, cfg.addrs);
        groups = router.groups;
        connectionCount = router.seed.conns.size();
        thread = new Thread(this::main, "ticketing-io");
        thread.setDaemon(true);
    }

    void start() {
        thread.start();
    }

    static long now() {
        return System.nanoTime();
    }

    void log(int level, String msg) {
        System.Logger lg = cfg.logger;
        if (lg == null) {
            return;
        }
        System.Logger.Level l = switch (level) {
            case 0 -> System.Logger.Level.ERROR;
            case 1 -> System.Logger.Level.WARNING;
            case 2 -> System.Logger.Level.DEBUG;
            default -> System.Logger.Level.TRACE;
        };
        try {
            if (lg.isLoggable(l)) {
                lg.log(l, msg);
            }
        } catch (RuntimeException e) {
            // a logger that throws must not stop the I/O thread
        }
    }

    // ---- the API side (any thread) -------------------------------------------

    private void wake() {
        if (!wakePending) {
            wakePending = true;
            sel.wakeup();
        }
    }

    /**
     * Queues r. Returns null, or why it was refused: "shutdown", "full" (the
     * release queue), "requests_max".
     */
    String submit(Req r) {
        r.submitNanos = now();
        mu.lock();
        try {
            if (stopping) {
                return "shutdown";
            }
            if (r.type == 'R') {
                if (liveReleases >= cfg.releaseQueueMax) {
                    return "full";
                }
                liveReleases++;
            } else {
                if (liveRequests >= cfg.requestsMax) {
                    return "requests_max";
                }
                liveRequests++;
            }
            submitted.add(r);
            wake();
            return null;
        } finally {
            mu.unlock();
        }
    }

    /** Asks the I/O thread to cancel r (an acquire, query, ping or ring). */
    void cancel(Req r) {
        mu.lock();
        try {
            if (!stopping) {
                cancels.add(r);
                wake();
            }
        } finally {
            mu.unlock();
        }
    }

    /**
     * A grant whose caller stopped waiting before it could be handed over
     * (its future was cancelled or completed by someone else): released at
     * once, like any late grant.
     */
    void compensateAbandoned(String key, long token) {
        Req c = new Req('R', key, 0, 0, token);
        c.compensation = true;
        c.submitNanos = now();
        mu.lock();
        try {
            if (stopping || liveReleases >= cfg.releaseQueueMax) {
                compensationsDropped.incrementAndGet();
                return;
            }
            liveReleases++;
            compensations.incrementAndGet();
            submitted.add(c);
            wake();
        } finally {
            mu.unlock();
        }
    }

    /** Begins the stop; joins the I/O thread if join (and not called on it). */
    void stop(boolean join) {
        mu.lock();
        try {
            stopping = true;
            wake();
        } finally {
            mu.unlock();
        }
        if (join && Thread.currentThread() != thread) {
            boolean interrupted = false;
            while (thread.isAlive()) {
                try {
                    thread.join();
                } catch (InterruptedException e) {
                    interrupted = true;
                }
            }
            if (interrupted) {
                Thread.currentThread().interrupt();
            }
        }
    }

    boolean awaitReady(long timeoutNanos) throws InterruptedException {
        long end = now() + timeoutNanos;
        mu.lock();
        try {
            while (readyCount == 0) {
                long left = end - now();
                if (left <= 0) {
                    return false;
                }
                readyCv.awaitNanos(left);
            }
            return true;
        } finally {
            mu.unlock();
        }
    }

    Stats stats() {
        mu.lock();
        try {
            return new Stats(connectionCount, readyCount, connectAttempts.get(), handshakes.get(),
                    authFailures.get(), moved.get(), requestsWritten.get(), liveRequests, liveReleases,
                    compensations.get(), compensationsDropped.get(), indeterminate.get(), leaderHint,
                    router.ringVersion(), router.rerouted.get());
        } finally {
            mu.unlock();
        }
    }

    String lastError() {
        mu.lock();
        try {
            return lastError;
        } finally {
            mu.unlock();
        }
    }

    boolean lastAuth() {
        mu.lock();
        try {
            return lastAuth;
        } finally {
            mu.unlock();
        }
    }

    void recordError(String msg, boolean auth) {
        mu.lock();
        try {
            lastError = msg;
            lastAuth = auth;
        } finally {
            mu.unlock();
        }
    }

    /** Looks a host name up on the resolver thread (getaddrinfo blocks). */
    void resolve(Conn conn, String host) {
        if (resolver == null) {
            resolver = Executors.newSingleThreadExecutor(r -> {
                Thread t = new Thread(r, "ticketing-resolve");
                t.setDaemon(true);
                return t;
            });
        }
        resolver.execute(() -> {
            InetAddress res;
            try {
                res = InetAddress.getByName(host);
            } catch (IOException | SecurityException e) {
                res = null;
            }
            mu.lock();
            try {
                lookups.add(new Lookup(conn, host, res));
                wake();
            } finally {
                mu.unlock();
            }
        });
    }

    void readyChange(int delta) {
        mu.lock();
        try {
            readyCount += delta;
            if (readyCount > 0) {
                readyCv.signalAll();
            }
        } finally {
            mu.unlock();
        }
    }

    // ---- heap ---------------------------------------------------------------------

    void heapSet(Req r, long deadline) {
        r.hgen++;
        r.deadline = deadline;
        r.inHeap = true;
        heap.add(new HeapEntry(deadline, ++hseq, r.hgen, r));
    }

    void heapRemove(Req r) {
        if (r.inHeap) {
            r.inHeap = false;
            r.hgen++; // its entry in the heap goes stale
        }
    }

    private Req heapTop() {
        HeapEntry e;
        while ((e = heap.peek()) != null && (!e.req.inHeap || e.gen != e.req.hgen)) {
            heap.poll();
        }
        return e == null ? null : e.req;
    }

    // ---- outcomes -------------------------------------------------------------------

    void decide(Req r, Result res) {
        if (r.decided) {
            throw new IllegalStateException("ticketing: a request decided twice");
        }
        r.decided = true;
        if (r.fetch) {
            router.ringFetched(r, res);
            return;
        }
        if (r.type == 'R') {
            res.token = r.token;
            res.resent = r.resent;
        }
        if (res.outcome == Outcome.INDETERMINATE) {
            indeterminate.incrementAndGet();
        }
        if (r.compensation) {
            boolean done = res.outcome == Outcome.RELEASED || res.outcome == Outcome.NOT_HELD;
            log(done ? 2 : 1, "compensation release of " + r.key + " token "
                    + Long.toUnsignedString(r.token) + ": " + res.outcome);
            return;
        }
        r.future.complete(res);
    }

    /** r is done with: give back its place in the client's bounds (a ring fetch has none). */
    void free(Req r) {
        if (r.fetch) {
            return;
        }
        mu.lock();
        try {
            if (r.type == 'R') {
                liveReleases--;
            } else {
                liveRequests--;
            }
        } finally {
            mu.unlock();
        }
    }

    void finish(Req r, Outcome o, String reason) {
        finish(r, new Result(o, reason));
    }

    void finish(Req r, Result res) {
        if (r.pending) {
            (r.type == 'R' ? r.group.pendingRel : r.group.pending).remove(r);
            r.pending = false;
        }
        router.unpark(r);
        heapRemove(r);
        // Its place in the bounds goes back before the caller wakes, so that
        // stats() read right after the outcome already leaves it out.
        free(r);
        decide(r, res);
    }

    /** WRONG_GROUP with the slot and ring version of r's last W. */
    static Result wrongResult(Req r) {
        Result res = new Result(Outcome.WRONG_GROUP);
        res.slot = r.wrongSlot;
        res.ringVersion = r.wrongVersion;
        return res;
    }

    void repend(Req r, boolean front) {
        ArrayDeque<Req> q = r.type == 'R' ? r.group.pendingRel : r.group.pending;
        if (front) {
            q.addFirst(r);
        } else {
            q.addLast(r);
        }
        r.pending = true;
    }

    private void accept(Req r) {
        if (draining && r.type != 'R') {
            free(r);
            decide(r, new Result(Outcome.CANCELLED, "shutdown"));
            return;
        }
        if (r.type == 'A' || r.type == 'R' || r.type == 'Q') {
            r.slot = Slots.slot(r.key);
        }
        r.budgetEnd = r.submitNanos + Resend.budgetNanos(r.type, r.waitMs, cfg.sendBudgetMinMs,
                cfg.requestTimeoutNanos);
        heapSet(r, r.budgetEnd);
        r.group = router.route(r);
        repend(r, false);
    }

    private void compensate(Req r, long token) {
        mu.lock();
        boolean full;
        try {
            full = liveReleases >= cfg.releaseQueueMax;
            if (!full) {
                liveReleases++;
            }
        } finally {
            mu.unlock();
        }
        String tok = Long.toUnsignedString(token);
        if (full) {
            compensationsDropped.incrementAndGet();
            log(1, "late grant of " + r.key + " token " + tok
                    + " not released: release queue full (the lease will free it)");
            return;
        }
        compensations.incrementAndGet();
        log(2, "late grant of " + r.key + " token " + tok + ": releasing it");
        Req c = new Req('R', r.key, 0, 0, token);
        c.compensation = true;
        c.submitNanos = now();
        accept(c);
    }

    /**
     * A G for a pending acquire at or after the lease deadline counted from
     * its first write: the lease may be someone else's already, so the
     * caller must not enter. INDETERMINATE, reason "lease", and the token is
     * released at once as a known-token compensation.
     */
    private Result grantTooLate(Req r, long token) {
        log(1, "grant of " + r.key + " token " + Long.toUnsignedString(token)
                + " came after its lease had run out");
        compensate(r, token);
        return new Result(Outcome.INDETERMINATE, "lease");
    }

    /** Keeps a decided request's id until its answer or the linger. */
    private void zombie(Req r, long now) {
        long until = now + ZOMBIE_LINGER_NANOS;
        if (r.type == 'A' && r.wire == Req.WIRE_SENT) {
            until += r.waitSentMs * MS;
        }
        heapSet(r, until);
    }

    void onSent(Req r, long at) {
        r.wire = Req.WIRE_SENT;
        r.wrong = false;
        if (r.everSent && r.type == 'R') {
            r.resent = true;
        }
        r.everSent = true;
        r.sentNanos = at;
        requestsWritten.incrementAndGet();
        if (!r.decided && r.type == 'A') {
            heapSet(r, at + r.waitSentMs * MS + cfg.responseGraceNanos);
        }
    }

    void onResponse(Req r, Proto.Response rsp, long now) {
        if (r.decided) {
            if (r.type == 'A' && rsp.type == 'G') {
                compensate(r, rsp.token);
            }
            heapRemove(r);
            free(r);
            return;
        }
        Result res;
        switch (rsp.type) {
            case 'G':
                res = new Result(Outcome.ACQUIRED);
                res.token = rsp.token;
                // The lease counts from the commit; the first write is earlier.
                res.leaseDeadlineNanos = r.sentNanos + r.leaseMs * MS;
                if (now - res.leaseDeadlineNanos >= 0) {
                    res = grantTooLate(r, rsp.token);
                }
                break;
            case 'Q':
                res = new Result(Outcome.ANSWERED);
                res.held = rsp.owner != null;
                res.owner = rsp.owner;
                res.token = rsp.token;
                res.waiters = rsp.waiters;
                break;
            case 'P':
                res = new Result(Outcome.ANSWERED);
                res.rttNanos = Math.max(0, now - r.sentNanos);
                break;
            case 'S':
                res = new Result(Outcome.ANSWERED);
                res.ringVersion = r.ringVersion;
                res.body = r.ringBody.toString();
                r.ringBody = null;
                break;
            case 'W':
                router.onWrong(r, rsp, now);
                return;
            case 'E':
                res = new Result(Outcome.INVALID, rsp.text.length() > 15 ? rsp.text.substring(0, 15) : rsp.text);
                break;
            case 'T':
                res = new Result(Outcome.TIMEOUT);
                break;
            case 'B':
                res = new Result(Outcome.BUSY);
                break;
            case 'R':
                res = new Result(Outcome.RELEASED);
                break;
            default:
                res = new Result(Outcome.NOT_HELD);
        }
        heapRemove(r);
        free(r);
        decide(r, res);
    }

    /** r was on a connection that died. */
    void onConnLost(Req r) {
        boolean sent = r.wire == Req.WIRE_SENT;
        r.wire = Req.WIRE_NONE;
        r.conn = null;
        if (r.decided) { // a zombie: its answer is gone with the connection
            heapRemove(r);
            free(r);
        } else if (!sent || r.type != 'A') {
            // Not one byte written: the same request may go elsewhere. A
            // written release or read is safe to repeat. By the ring it
            // goes where it belongs now (a ring fetch, to its own group).
            r.neutered = false;
            if (!router.stopped) {
                r.group = router.route(r);
            }
            repend(r, true);
        } else {
            // Written, no answer: nobody knows whether it was granted. Never
            // resent; an M or a close is no ground for it.
            finish(r, Outcome.INDETERMINATE, "");
        }
    }

    /** What r comes to when its deadline passes with no answer. */
    private static Result atDeadline(Req r) {
        if (r.wrong) { // answered W, and not written anywhere since
            return wrongResult(r);
        }
        if (r.type == 'R') {
            return new Result(Outcome.UNCONFIRMED);
        }
        if (r.type == 'A' && r.wire == Req.WIRE_SENT) {
            return new Result(Outcome.INDETERMINATE);
        }
        return new Result(Outcome.UNAVAILABLE);
    }

    private void expire(Req r, long now) {
        if (r.decided) { // the linger of a zombie ended: forget its id
            r.conn.dropSlot(r);
            free(r);
            return;
        }
        if (r.park == Req.PARK_PAUSE) { // the pause after a W ended: send it again
            router.unpark(r);
            heapSet(r, r.budgetEnd);
            router.afterPause(r);
            return;
        }
        Result res = atDeadline(r);
        if (r.wire == Req.WIRE_NONE) {
            finish(r, res);
            return;
        }
        if (r.wire == Req.WIRE_QUEUED) {
            r.conn.neuter(r);
        }
        decide(r, res);
        zombie(r, now);
    }

    /**
     * The caller gave up on r. Not written: CANCELLED. An acquire that was
     * written: INDETERMINATE, and a grant that still comes is released.
     */
    private void cancelOne(Req r, long now) {
        if (r.decided || r.type == 'R') {
            return;
        }
        if (r.wire == Req.WIRE_NONE) {
            if (r.pending || r.park != Req.PARK_NONE) {
                finish(r, Outcome.CANCELLED, "");
            }
            return;
        }
        Outcome o = Outcome.CANCELLED;
        if (r.wire == Req.WIRE_QUEUED) {
            r.conn.neuter(r);
        } else if (r.type == 'A') {
            o = Outcome.INDETERMINATE;
        }
        decide(r, new Result(o));
        zombie(r, now);
    }

    // ---- M hints -------------------------------------------------------------------------

    /** An M line of any group: counted, and kept as the stats' leader hint. */
    void noteMoved(String addr) {
        moved.incrementAndGet();
        mu.lock();
        try {
            leaderHint = addr == null ? "" : addr;
        } finally {
            mu.unlock();
        }
    }

    /** The connections of every group, counted again after one was made or dropped. */
    void recount() {
        int n = 0;
        for (Group g : groups) {
            n += g.conns.size();
        }
        connectionCount = n;
    }

    // ---- the loop ---------------------------------------------------------------------------

    /** Every connection of every group, in a list of its own (callbacks may add groups). */
    private List<Conn> allConns() {
        List<Conn> all = new ArrayList<>();
        for (Group g : groups) {
            all.addAll(g.conns);
        }
        return all;
    }

    private void dispatch(long now) {
        for (Group g : groups) { // queue() calls nothing back: the list stays as it is
            for (ArrayDeque<Req> q : List.of(g.pendingRel, g.pending)) {
                while (!q.isEmpty()) {
                    Conn k = g.pickConn();
                    if (k == null) {
                        break;
                    }
                    Req r = q.pollFirst();
                    r.pending = false;
                    k.queue(r, now);
                }
            }
        }
    }

    /** Requests of a group every one of whose connections was refused in TLS: UNAVAILABLE "tls". */
    private void failTlsRefused() {
        for (Group g : new ArrayList<>(groups)) {
            if (!g.pending.isEmpty() && g.tlsRefusedAll()) {
                while (!g.pending.isEmpty()) {
                    finish(g.pending.peekFirst(), Outcome.UNAVAILABLE, "tls");
                }
            }
        }
    }

    private void drainBegin(long now) {
        draining = true;
        drainDeadline = now + Proto.RELEASE_DEADLINE_MS * MS;
        // The ring fetch goes on: releases answered W may still need it.
        for (Req r : new ArrayList<>(router.parked)) {
            if (r.type != 'R') {
                finish(r, Outcome.CANCELLED, "shutdown");
            }
        }
        for (Group g : new ArrayList<>(groups)) {
            for (Req r : new ArrayList<>(g.pending)) {
                if (!r.fetch) {
                    finish(r, Outcome.CANCELLED, "shutdown");
                }
            }
        }
        for (Conn k : allConns()) {
            for (Req r : new ArrayList<>(k.slots.values())) {
                if (!r.decided && r.type != 'R' && !r.fetch) {
                    if (r.wire == Req.WIRE_QUEUED) {
                        k.neuter(r);
                    }
                    decide(r, new Result(Outcome.CANCELLED, "shutdown"));
                    zombie(r, now);
                }
            }
        }
    }

    private void drainInbox(long now) {
        List<Req> sub;
        List<Req> canc;
        List<Lookup> looks;
        boolean stop;
        mu.lock();
        try {
            wakePending = false;
            sub = submitted;
            submitted = new ArrayList<>();
            canc = cancels;
            cancels = new ArrayList<>();
            looks = lookups;
            lookups = new ArrayList<>();
            stop = stopping;
        } finally {
            mu.unlock();
        }
        for (Req r : sub) {
            accept(r);
        }
        for (Req r : canc) {
            cancelOne(r, now);
        }
        if (stop && !draining) {
            drainBegin(now);
        }
        for (Lookup l : looks) {
            l.conn.lookupDone(l.host, l.result, now);
        }
    }

    private void runTimers(long now) {
        for (Conn k : allConns()) {
            long t = k.nextTimer();
            if (t != Long.MAX_VALUE && t - now <= 0) {
                k.timer(now);
            }
        }
        while (true) {
            Req r = heapTop();
            if (r == null || r.deadline - now > 0) {
                break;
            }
            heapRemove(r);
            expire(r, now);
        }
    }

    /** Milliseconds to the nearest deadline (0: one is due; -1: none). */
    private long selectTimeoutMs(long now) {
        long next = Long.MAX_VALUE;
        Req r = heapTop();
        if (r != null) {
            next = r.deadline;
        }
        for (Group g : groups) {
            for (Conn k : g.conns) {
                next = Math.min(next, k.nextTimer());
            }
        }
        if (draining) {
            next = Math.min(next, drainDeadline);
        }
        if (next == Long.MAX_VALUE) {
            return -1;
        }
        long left = next - now;
        return left <= 0 ? 0 : (left + MS - 1) / MS;
    }

    private boolean drainDone(long now) {
        if (now - drainDeadline >= 0) {
            return true;
        }
        mu.lock();
        try {
            return liveReleases == 0;
        } finally {
            mu.unlock();
        }
    }

    private void main() {
        long now = now();
        router.seed.start(now);
        drainInbox(now);
        try {
            while (true) {
                runTimers(now);
                dispatch(now);
                failTlsRefused();
                for (Conn k : allConns()) {
                    k.flush(now);
                }
                router.sweepOrphans();
                if (draining && drainDone(now)) {
                    break;
                }
                long ms = selectTimeoutMs(now);
                if (ms == 0) {
                    sel.selectNow();
                } else if (ms < 0) {
                    sel.select();
                } else {
                    sel.select(ms);
                }
                now = now();
                for (SelectionKey key : sel.selectedKeys()) {
                    if (key.isValid()) {
                        ((Conn) key.attachment()).event(key.readyOps(), now);
                    }
                }
                sel.selectedKeys().clear();
                drainInbox(now);
            }
        } catch (IOException | RuntimeException | Error e) {
            log(0, "ticketing: the I/O thread failed: " + e);
            mu.lock();
            try {
                stopping = true;
            } finally {
                mu.unlock();
            }
        } finally {
            finalSweep();
        }
    }

    private void finalSweep() {
        router.stopped = true; // nothing is routed again: what is left ends here
        for (Conn k : allConns()) {
            k.retire();
        }
        for (Group g : groups) {
            while (!g.pendingRel.isEmpty()) {
                Req r = g.pendingRel.peekFirst();
                finish(r, r.wrong ? wrongResult(r) : new Result(Outcome.UNCONFIRMED));
            }
            while (!g.pending.isEmpty()) {
                finish(g.pending.peekFirst(), Outcome.CANCELLED, "shutdown");
            }
        }
        for (Req r : new ArrayList<>(router.parked)) {
            finish(r, r.type != 'R' ? new Result(Outcome.CANCELLED, "shutdown")
                    : r.wrong ? wrongResult(r) : new Result(Outcome.UNCONFIRMED));
        }
        List<Req> late;
        mu.lock();
        try {
            stopping = true;
            late = submitted;
            submitted = new ArrayList<>();
        } finally {
            mu.unlock();
        }
        for (Req l : late) { // submitted after the stop was seen
            free(l);
            if (l.type == 'R') {
                decide(l, new Result(Outcome.UNCONFIRMED));
            } else {
                decide(l, new Result(Outcome.CANCELLED, "shutdown"));
            }
        }
        try {
            sel.close();
        } catch (IOException e) {
            // nothing is left to close it for
        }
        if (resolver != null) {
            resolver.shutdownNow();
        }
    }
}
