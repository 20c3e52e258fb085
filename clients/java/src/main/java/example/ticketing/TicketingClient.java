package example.ticketing;

import java.io.IOException;
import java.io.InputStream;
import java.lang.ref.Cleaner;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.function.Function;
import javax.net.ssl.SSLContext;

/**
 * The Java client of Ticketing, a distributed FIFO lock service. It follows
 * the rules of the C library libticketing (docs/client.md): connections
 * kept in the background (one per address, two for a single address), the
 * leader first and then round-robin with the remembered {@code M} hint,
 * pipelined requests, reconnects with backoff, the server's proof checked
 * in every handshake, byte-level "sent" tracking (an acquire none of whose
 * bytes was written is {@link UnavailableException}; once a byte was
 * written it is never resent), compensation of late grants, and one
 * bounded release queue with an absolute 5 s deadline per release.
 *
 * <p><b>Groups.</b> A deployment of several groups (clusters) needs one
 * client all the same: it routes each request by its key's slot
 * ({@link Slots#slot}), as docs/client.md ("Groups and the ring") says.
 * The configured addresses are one group, the seed; until the client knows
 * a ring, everything goes there, exactly as with a single cluster. A
 * {@code W} answer makes it fetch the ring from the group that answered
 * (one fetch at a time, and a newer ring only); then each request goes to
 * the group the ring names for its key, each group with its own
 * connections, made on first use from the ring's addresses with this
 * client's secret, owner, TLS files and settings (the group that includes
 * a configured address is the seed itself). A request answered {@code W}
 * changed nothing, so the client sends it again to the group its ring now
 * names: at once if another, after a pause of 20 ms doubling to 200 ms if
 * the same (a move in progress), while the request's budget lasts (an
 * acquire: max(wait, {@code sendBudgetMin}) from the call, each resend
 * waiting what is left of the wait; a query: {@code requestTimeout}; a
 * release: its 5 s). Only then, or at once when the ring names no group
 * for the slot, the call throws {@link WrongGroupException}.
 * {@link Stats#ringVersion()} and {@link Stats#rerouted()} tell what it
 * routes by and how often it sent a request again. Tokens of keys in
 * different groups are not comparable: fence per key.
 *
 * <pre>{@code
 * try (TicketingClient client = TicketingClient.builder()
 *         .addrs("10.0.0.1:7400,10.0.0.2:7400,10.0.0.3:7400")
 *         .secretFile(Path.of("/etc/ticketing/client.secret"))
 *         .build();
 *      Lease lease = client.acquire("show-42", Duration.ofSeconds(30), Duration.ofSeconds(5))) {
 *     // the critical section: pass lease.token() to every write it protects
 * }
 * }</pre>
 *
 * <p><b>Threads.</b> A client is thread-safe: any number of threads
 * (platform or virtual) may call it at once. It owns one I/O thread, which
 * owns every socket, timer and outcome, plus a name-lookup thread only when
 * an address is a host name. Calls hand their request to the I/O thread
 * and wait on a future; nothing holds a monitor while it waits, so virtual
 * threads are not pinned. The futures of the asynchronous calls are
 * completed on the I/O thread: dependent stages added with the non-async
 * methods ({@code thenApply}, {@code whenComplete}...) run there too, so
 * keep them short or use the {@code ...Async} variants. They may make
 * asynchronous calls (such as {@link Lease#releaseAsync()}); a blocking call
 * made on the I/O thread (including {@link Lease#close()}) fails at once
 * with {@link InvalidRequestException} reason {@code thread} instead of
 * deadlocking.
 *
 * <p><b>Interrupts and cancellation.</b> Interrupting a thread blocked in
 * {@link #acquire} (or cancelling the future of {@link #acquireAsync}) cancels
 * the request: {@link CancelledException} if no byte was written,
 * {@link IndeterminateException} if it was; a grant that still arrives is
 * released at once. The thread's interrupt status is kept set.
 */
public final class TicketingClient implements AutoCloseable {
    private static final Cleaner CLEANER = Cleaner.create();

    private final Engine engine;
    private final Cleaner.Cleanable cleanable;

    private TicketingClient(Settings cfg) {
        try {
            engine = new Engine(cfg);
        } catch (IOException e) {
            throw new ConfigException("selector", "cannot open a selector: " + e);
        }
        engine.start();
        Engine e = engine; // the cleaning action must not reach this object
        cleanable = CLEANER.register(this, () -> e.stop(false));
    }

    /** A builder for a client; {@link Builder#addrs} and a secret are required. */
    public static Builder builder() {
        return new Builder();
    }

    /** The owner name this client sends with every acquire and release. */
    public String owner() {
        return engine.cfg.owner;
    }

    // ---- acquire ------------------------------------------------------------------

    /**
     * Acquires key: blocks until the key is held, or the outcome says why
     * not.
     *
     * @param key 1-250 printable ASCII characters, no space
     * @param lease how long the key stays held at most, 1 s to 250 s (whole
     *     milliseconds): the safety net if this process dies
     * @param wait how long to wait for the turn, 0 to 250 s (0: one
     *     immediate try)
     * @return the held lease; close it (try-with-resources) to release
     * @throws BusyException held and the wait was 0, or a server bound: not acquired
     * @throws WaitTimeoutException the turn did not come within the wait: not acquired
     * @throws UnavailableException not one byte was written in time: definitely not acquired
     * @throws IndeterminateException written, no confirmed answer: maybe
     *     acquired; do not enter (a late grant is released by the client)
     * @throws InvalidRequestException a bad key, lease or wait (nothing was sent)
     * @throws CancelledException interrupted, or {@link #close()}, before any byte was written
     * @throws WrongGroupException no group served the key's slot within the budget (a slot no
     *     range of the ring covers, or a move that did not end in time): not acquired
     */
    public Lease acquire(String key, Duration lease, Duration wait) {
        Req r = acquireReq(key, lease, wait);
        Result res = call(r, checkAcquire(key, lease, wait));
        if (res.outcome != Outcome.ACQUIRED) {
            throw exception(res, "acquire", key);
        }
        return new Lease(this, key, res.token, res.leaseDeadlineNanos);
    }

    /**
     * Acquires key without blocking the caller; the future completes with
     * the lease, or exceptionally with the exception {@link #acquire} would
     * throw. Cancelling the future (or completing it yourself, for example
     * with {@code orTimeout}) cancels the request: a grant that still comes
     * is released at once.
     */
    public CompletableFuture<Lease> acquireAsync(String key, Duration lease, Duration wait) {
        Req r = acquireReq(key, lease, wait);
        CompletableFuture<Lease> pub = new CompletableFuture<>();
        Result refused = submit(r, checkAcquire(key, lease, wait), false);
        if (refused != null) {
            pub.completeExceptionally(exception(refused, "acquire", key));
            return pub;
        }
        r.future.whenComplete((res, x) -> {
            if (res.outcome == Outcome.ACQUIRED) {
                if (!pub.complete(new Lease(this, key, res.token, res.leaseDeadlineNanos))) {
                    engine.compensateAbandoned(key, res.token); // nobody will hold it
                }
            } else {
                pub.completeExceptionally(exception(res, "acquire", key));
            }
        });
        pub.whenComplete((v, x) -> {
            if (!r.future.isDone()) {
                engine.cancel(r);
            }
        });
        return pub;
    }

    private static Req acquireReq(String key, Duration lease, Duration wait) {
        return new Req('A', Proto.keyOk(key) ? key : "", millisOr(lease, -1), millisOr(wait, -1), 0);
    }

    private static String checkAcquire(String key, Duration lease, Duration wait) {
        long l = millisOr(lease, -1);
        long w = millisOr(wait, -1);
        if (!Proto.keyOk(key)) {
            return "key";
        }
        if (l < Proto.LEASE_MS_MIN || l > Proto.LEASE_MS_MAX) {
            return "lease";
        }
        if (w < 0 || w > Proto.WAIT_MS_MAX) {
            return "wait";
        }
        return null;
    }

    /** Whole milliseconds of d, or bad for null, negative or huge. */
    private static long millisOr(Duration d, long bad) {
        if (d == null || d.isNegative() || d.getSeconds() > 1_000_000) {
            return bad;
        }
        return d.toMillis();
    }

    // ---- release ------------------------------------------------------------------

    /**
     * Releases a lease through the release queue and blocks until
     * {@code R}, {@code N} or the absolute 5 s deadline. The lease is
     * then released as far as {@link Lease#close()} is concerned.
     *
     * @throws NotHeldException nothing held under (key, owner, token): the
     *     lease ran out (another holder may have entered) or it was released
     * @throws UnconfirmedException no answer by the deadline: never assume success
     * @throws QueueFullException the queue is full; nothing was enqueued
     * @throws WrongGroupException no group served the key's slot within the
     *     5 s: nothing was released where it was answered so
     */
    public void release(Lease lease) {
        refuseOnIoThread("release", lease.key());
        lease.markReleased();
        releaseToken(lease.key(), lease.token());
    }

    /**
     * Throws INVALID "thread" on the I/O thread, before a lease is marked
     * released: a refused release must leave the lease releasable.
     */
    void refuseOnIoThread(String op, String key) {
        if (Thread.currentThread() == engine.thread) {
            throw exception(new Result(Outcome.INVALID, "thread"), op, key);
        }
    }

    /**
     * Releases (key, this client's owner, token), as {@link #release(Lease)}
     * does, for a token kept elsewhere.
     *
     * @return true if the release was written more than once (its
     *     connection died after a write)
     * @throws InvalidRequestException a bad key, or token 0
     */
    public boolean releaseToken(String key, long token) {
        Req r = new Req('R', Proto.keyOk(key) ? key : "", 0, 0, token);
        Result res = call(r, checkRelease(key, token));
        if (res.outcome != Outcome.RELEASED) {
            throw exception(res, "release", key);
        }
        return res.resent;
    }

    /**
     * Releases (key, owner, token) without blocking; the future holds
     * whether the release was resent, or fails with the exception
     * {@link #releaseToken} would throw. Cancelling the future does not
     * stop the release, which goes on until its 5 s deadline.
     */
    public CompletableFuture<Boolean> releaseAsync(String key, long token) {
        Req r = new Req('R', Proto.keyOk(key) ? key : "", 0, 0, token);
        return async(r, checkRelease(key, token), "release", key, res -> res.resent);
    }

    private static String checkRelease(String key, long token) {
        if (!Proto.keyOk(key)) {
            return "key";
        }
        return token == 0 ? "token" : null;
    }

    // ---- query, ping and ring -------------------------------------------------------------

    /**
     * Reads the committed holder of key (a linearizable read).
     *
     * @throws UnavailableException no answer within the request timeout
     * @throws InvalidRequestException a bad key
     * @throws WrongGroupException no group served the key's slot within the request timeout
     */
    public QueryResult query(String key) {
        Req r = new Req('Q', Proto.keyOk(key) ? key : "", 0, 0, 0);
        Result res = call(r, Proto.keyOk(key) ? null : "key");
        if (res.outcome != Outcome.ANSWERED) {
            throw exception(res, "query", key);
        }
        return queryResult(key, res);
    }

    /** {@link #query} without blocking. */
    public CompletableFuture<QueryResult> queryAsync(String key) {
        Req r = new Req('Q', Proto.keyOk(key) ? key : "", 0, 0, 0);
        return async(r, Proto.keyOk(key) ? null : "key", "query", key, res -> queryResult(key, res));
    }

    private static QueryResult queryResult(String key, Result res) {
        return new QueryResult(key, res.held, res.owner, res.token, res.waiters);
    }

    /**
     * One round trip to the server.
     *
     * @return its time
     * @throws UnavailableException no answer within the request timeout
     */
    public Duration ping() {
        Result res = call(new Req('P', "", 0, 0, 0), null);
        if (res.outcome != Outcome.ANSWERED) {
            throw exception(res, "ping", "");
        }
        return Duration.ofNanos(res.rttNanos);
    }

    /** {@link #ping} without blocking. */
    public CompletableFuture<Duration> pingAsync() {
        return async(new Req('P', "", 0, 0, 0), null, "ping", "", res -> Duration.ofNanos(res.rttNanos));
    }

    /**
     * Asks the seed group (the configured addresses) for its ring
     * ({@code S}): the version and the body, the parts of a long answer
     * joined by {@code ;}. A group with no ring answers version 0 and body
     * {@code "-"}. This is the group's ring as it is now, not necessarily
     * the one the client routes by ({@link Stats#ringVersion()}).
     *
     * @throws UnavailableException no answer within the request timeout
     */
    public Ring ring() {
        Result res = call(new Req('S', "", 0, 0, 0), null);
        if (res.outcome != Outcome.ANSWERED) {
            throw exception(res, "ring", "");
        }
        return new Ring(res.ringVersion, res.body);
    }

    /** {@link #ring} without blocking. */
    public CompletableFuture<Ring> ringAsync() {
        return async(new Req('S', "", 0, 0, 0), null, "ring", "", res -> new Ring(res.ringVersion, res.body));
    }

    // ---- the client itself ---------------------------------------------------------------

    /**
     * Waits until some connection is usable (it finished its handshake and
     * probe), at most timeout. Requests need not wait for this: they wait
     * within their own budget.
     *
     * @return true if a connection is ready
     * @throws InterruptedException if interrupted while waiting
     */
    public boolean awaitReady(Duration timeout) throws InterruptedException {
        return engine.awaitReady(timeout.toNanos());
    }

    /**
     * The most recent connection failure, one sentence that starts with the
     * address ("" if none yet): a refused connect, a TLS refusal, a wrong
     * secret...
     */
    public String lastError() {
        return engine.lastError();
    }

    /** The client's counters. */
    public Stats stats() {
        return engine.stats();
    }

    /**
     * Stops the client: acquires, queries, pings and rings not decided yet end
     * {@link CancelledException} (reason {@code shutdown}); releases already
     * queued keep their 5 s deadline (this waits for them, at most about
     * 5 s); then every connection closes. Idempotent.
     */
    @Override
    public void close() {
        engine.stop(true);
        cleanable.clean();
    }

    // ---- submission and outcomes ----------------------------------------------------------

    /**
     * Submits r: null (then r.future will hold the result), or the result of
     * a local refusal, as the C library's blocking calls make them. A
     * blocking call on the I/O thread would wait for the thread it stops, so
     * it is refused; an asynchronous one only queues, and is fine there.
     */
    private Result submit(Req r, String bad, boolean blocking) {
        if (blocking && Thread.currentThread() == engine.thread) {
            return new Result(Outcome.INVALID, "thread");
        }
        if (bad != null) {
            return new Result(Outcome.INVALID, bad);
        }
        String err = engine.submit(r);
        if (err == null) {
            return null;
        }
        switch (err) {
            case "shutdown":
                return new Result(Outcome.CANCELLED, "shutdown");
            case "full":
                return new Result(Outcome.QUEUE_FULL);
            default:
                return new Result(Outcome.UNAVAILABLE, err);
        }
    }

    /** Submits r and blocks for its result (see the class comment on interrupts). */
    private Result call(Req r, String bad) {
        Result refused = submit(r, bad, true);
        if (refused != null) {
            return refused;
        }
        boolean interrupted = false;
        try {
            while (true) {
                try {
                    return r.future.get();
                } catch (InterruptedException e) {
                    if (r.type == 'R') {
                        // The release goes on in the queue; the caller stops waiting.
                        interrupted = true;
                        return new Result(Outcome.UNCONFIRMED, "interrupted");
                    }
                    if (!interrupted) {
                        interrupted = true;
                        engine.cancel(r); // decided at once by the I/O thread
                    }
                } catch (ExecutionException e) {
                    throw new IllegalStateException("ticketing: the engine failed a request", e.getCause());
                }
            }
        } finally {
            if (interrupted) {
                Thread.currentThread().interrupt();
            }
        }
    }

    private <T> CompletableFuture<T> async(Req r, String bad, String op, String key, Function<Result, T> ok) {
        CompletableFuture<T> pub = new CompletableFuture<>();
        Result refused = submit(r, bad, false);
        if (refused != null) {
            pub.completeExceptionally(exception(refused, op, key));
            return pub;
        }
        Outcome success = r.type == 'R' ? Outcome.RELEASED : Outcome.ANSWERED;
        r.future.whenComplete((res, x) -> {
            if (res.outcome == success) {
                pub.complete(ok.apply(res));
            } else {
                pub.completeExceptionally(exception(res, op, key));
            }
        });
        if (r.type != 'R') {
            pub.whenComplete((v, x) -> {
                if (!r.future.isDone()) {
                    engine.cancel(r);
                }
            });
        }
        return pub;
    }

    private TicketingException exception(Result res, String op, String key) {
        String what = key == null || key.isEmpty() ? op : op + " " + key;
        String reason = res.reason.isEmpty() ? "" : " (" + res.reason + ")";
        String head = what + ": " + res.outcome.name().toLowerCase() + reason;
        switch (res.outcome) {
            case BUSY:
                return new BusyException(key, head + ": held, or a server bound was reached; not acquired");
            case TIMEOUT:
                return new WaitTimeoutException(key, head + ": the turn did not come within the wait; not acquired");
            case INVALID:
                return new InvalidRequestException(key, res.reason, head + ": refused, nothing changed");
            case INDETERMINATE:
                return new IndeterminateException(key, res.reason, head + (res.reason.equals("lease")
                        ? ": the grant came after its lease had run out and was released; do not enter"
                        : ": written, no confirmed answer; do not enter (a late grant is released by the client)"));
            case CANCELLED:
                return new CancelledException(key, res.reason, head);
            case NOT_HELD:
                return new NotHeldException(key, res.resent, head + (res.resent ? " (resent)" : "")
                        + ": nothing held under this key, owner and token");
            case UNCONFIRMED:
                return new UnconfirmedException(key, res.resent, head
                        + ": no answer before the release's deadline; never assume success");
            case QUEUE_FULL:
                return new QueueFullException(key, head + ": the release queue is full; the lease will free the key");
            case WRONG_GROUP:
                return new WrongGroupException(key, res.slot, res.ringVersion, res.resent, head + ": no group "
                        + "served slot " + res.slot + " (last W by ring version "
                        + Long.toUnsignedString(res.ringVersion) + "; no range covers the slot, or a move of "
                        + "it did not end within the budget); nothing was done"
                        + (op.equals("acquire") ? ", not acquired" : ""));
            default: {
                String err = engine.lastError();
                String last = err.isEmpty() ? "" : "; last connection error: " + err;
                String msg = op.equals("acquire")
                        ? head + ": nothing was sent, definitely not acquired" + last
                        : head + ": no answer in time" + last;
                return new UnavailableException(key, res.reason, msg, engine.lastAuth());
            }
        }
    }

    /**
     * Configures a {@link TicketingClient}. Every number has the C
     * library's default; a zero duration or count also means the default.
     * {@link #build()} checks everything and fails with a
     * {@link ConfigException} before any connection is made.
     */
    public static final class Builder {
        private final List<String> addrs = new ArrayList<>();
        private Path secretFile;
        private byte[] secret;
        private String owner;
        private Duration connectTimeout;
        private Duration responseGrace;
        private Duration sendBudgetMin;
        private Duration requestTimeout;
        private Duration backoffMin;
        private Duration backoffMax;
        private int releaseQueueMax;
        private int requestsMax;
        private int inflightPerConnectionMax;
        private Path tlsCaFile;
        private Path tlsCertFile;
        private Path tlsKeyFile;
        private String tlsServerName;
        private System.Logger logger = System.getLogger("example.ticketing");

        private Builder() {}

        /**
         * The client addresses of the cluster (with several groups: of any
         * one group, the seed), {@code host:port} each ({@code [v6addr]:port}
         * for IPv6), at most 8; one argument may also hold several separated
         * by commas. With exactly one address the client keeps two
         * connections to it. The other groups' addresses come from the ring.
         */
        public Builder addrs(String... addrs) {
            this.addrs.addAll(Arrays.asList(addrs));
            return this;
        }

        /** As {@link #addrs(String...)}. */
        public Builder addrs(List<String> addrs) {
            this.addrs.addAll(addrs);
            return this;
        }

        /**
         * The client secret's file: its bytes less one trailing {@code \n}
         * or {@code \r\n}, 16-4096 bytes.
         */
        public Builder secretFile(Path file) {
            this.secretFile = file;
            return this;
        }

        /** The client secret itself, 16-4096 bytes (copied). */
        public Builder secret(byte[] secret) {
            this.secret = secret == null ? null : secret.clone();
            return this;
        }

        /**
         * This client's owner name, 1-64 printable ASCII characters without
         * space; the default is {@code <host>-<pid>-<12 random hex>}. Give
         * every process its own.
         */
        public Builder owner(String owner) {
            this.owner = owner;
            return this;
        }

        /** One connection attempt: TCP connect, TLS, handshake and probe. Default 5 s. */
        public Builder connectTimeout(Duration d) {
            this.connectTimeout = d;
            return this;
        }

        /** How long past the sent wait an acquire's answer is awaited before INDETERMINATE. Default 2 s. */
        public Builder responseGrace(Duration d) {
            this.responseGrace = d;
            return this;
        }

        /** The floor of an unsent acquire's budget (so a wait of 0 gets its one try). Default 1 s. */
        public Builder sendBudgetMin(Duration d) {
            this.sendBudgetMin = d;
            return this;
        }

        /** The budget of a query, ping or ring. Default 5 s. */
        public Builder requestTimeout(Duration d) {
            this.requestTimeout = d;
            return this;
        }

        /** The first reconnect delay, doubled after each failure. Default 100 ms. */
        public Builder backoffMin(Duration d) {
            this.backoffMin = d;
            return this;
        }

        /** The longest reconnect delay. Default 3.2 s. */
        public Builder backoffMax(Duration d) {
            this.backoffMax = d;
            return this;
        }

        /** The release queue's bound (explicit releases and compensations). Default 1024. */
        public Builder releaseQueueMax(int n) {
            this.releaseQueueMax = n;
            return this;
        }

        /** Acquires, queries and pings in progress in the client. Default 65536. */
        public Builder requestsMax(int n) {
            this.requestsMax = n;
            return this;
        }

        /** Requests in flight on one connection. Default 4096 (the server's). */
        public Builder inflightPerConnectionMax(int n) {
            this.inflightPerConnectionMax = n;
            return this;
        }

        /**
         * Turns TLS on: the PEM file of the CA that signs the servers'
         * certificates. The name checked is {@link #tlsServerName}, else the
         * host of each address dialled.
         */
        public Builder tlsCaFile(Path file) {
            this.tlsCaFile = file;
            return this;
        }

        /** The client certificate (PEM), for servers that require one; goes with {@link #tlsKeyFile}. */
        public Builder tlsCertFile(Path file) {
            this.tlsCertFile = file;
            return this;
        }

        /** The client certificate's private key (PEM, not encrypted). */
        public Builder tlsKeyFile(Path file) {
            this.tlsKeyFile = file;
            return this;
        }

        /** The name the servers' certificates must carry, instead of each address's host. */
        public Builder tlsServerName(String name) {
            this.tlsServerName = name;
            return this;
        }

        /**
         * Where connection events go (default: the platform logger
         * {@code example.ticketing}; refusals of TLS or of the secret at
         * ERROR, a lost connection at WARNING, the rest at DEBUG and TRACE);
         * null for none. Called on the I/O thread.
         */
        public Builder logger(System.Logger logger) {
            this.logger = logger;
            return this;
        }

        /**
         * Checks the configuration and starts the client. It does not wait
         * for a connection: the first requests wait within their budgets.
         *
         * @throws ConfigException addresses, secret, owner, a number or the
         *     TLS files cannot work ({@link ConfigException#reason()} names which)
         */
        public TicketingClient build() {
            List<Addr> list = new ArrayList<>();
            for (String a : addrs) {
                for (String p : Objects.requireNonNull(a, "addrs").split(",")) {
                    p = p.trim();
                    if (p.isEmpty()) {
                        continue;
                    }
                    Addr parsed = Addr.parseOrNull(p);
                    if (parsed == null) {
                        throw new ConfigException("addrs", "address " + p + ": want host:port");
                    }
                    list.add(parsed);
                }
            }
            if (list.isEmpty() || list.size() > Proto.ADDRS_MAX) {
                throw new ConfigException("addrs", "need 1-" + Proto.ADDRS_MAX + " addresses, got " + list.size());
            }
            byte[] sec = loadSecret();
            String own = owner == null ? defaultOwner() : owner;
            if (!Proto.ownerOk(own)) {
                throw new ConfigException("owner", "owner must be 1-64 characters of 0x21-0x7E (no space)");
            }
            long backMin = nanos(backoffMin, 100, "backoff");
            long backMax = nanos(backoffMax, 3200, "backoff");
            if (backMin > backMax) {
                throw new ConfigException("backoff", "backoffMin is above backoffMax");
            }
            SSLContext ctx = null;
            if (tlsCaFile == null) {
                if (tlsCertFile != null || tlsKeyFile != null || tlsServerName != null) {
                    throw new ConfigException("tls", "TLS settings without tlsCaFile: refusing to connect in plaintext");
                }
            } else {
                if ((tlsCertFile == null) != (tlsKeyFile == null)) {
                    throw new ConfigException("tls", "tlsCertFile and tlsKeyFile go together");
                }
                ctx = TlsFiles.context(tlsCaFile, tlsCertFile, tlsKeyFile);
            }
            Settings s = new Settings(List.copyOf(list), sec, own, nanos(connectTimeout, 5000, "connect_timeout"),
                    nanos(responseGrace, 2000, "response_grace"), nanos(sendBudgetMin, 1000, "send_budget") / Engine.MS,
                    nanos(requestTimeout, 5000, "request_timeout"), count(releaseQueueMax, 1024, "release_queue"),
                    count(requestsMax, 65536, "requests_max"), count(inflightPerConnectionMax, 4096, "inflight"),
                    backMin, backMax, ctx, tlsServerName, tlsCaFile == null ? null : tlsCaFile.toString(), logger);
            return new TicketingClient(s);
        }

        private byte[] loadSecret() {
            if ((secretFile == null) == (secret == null)) {
                throw new ConfigException("secret", "give exactly one of secretFile and secret");
            }
            byte[] b = secret;
            if (secretFile != null) {
                try (InputStream in = Files.newInputStream(secretFile)) {
                    b = in.readNBytes(Proto.SECRET_MAX + 3);
                } catch (IOException e) {
                    throw new ConfigException("secret", "cannot read the secret file: " + e);
                }
                int n = b.length;
                if (n >= 2 && b[n - 2] == '\r' && b[n - 1] == '\n') {
                    n -= 2;
                } else if (n >= 1 && b[n - 1] == '\n') {
                    n -= 1;
                }
                b = Arrays.copyOf(b, n);
            }
            if (b.length < Proto.SECRET_MIN || b.length > Proto.SECRET_MAX) {
                throw new ConfigException("secret", "the secret must be " + Proto.SECRET_MIN + "-"
                        + Proto.SECRET_MAX + " bytes, got " + b.length);
            }
            return b.clone();
        }

        private static long nanos(Duration d, long defMs, String name) {
            if (d == null || d.isZero()) {
                return defMs * Engine.MS;
            }
            if (d.isNegative() || d.getSeconds() > 86_400) {
                throw new ConfigException(name, name + " must be between 0 and one day, not " + d);
            }
            return d.toNanos();
        }

        private static int count(int n, int def, String name) {
            if (n < 0) {
                throw new ConfigException(name, name + " must not be negative");
            }
            return n == 0 ? def : n;
        }

        private static String defaultOwner() {
            String host = "";
            try {
                host = Files.readString(Path.of("/proc/sys/kernel/hostname"), StandardCharsets.US_ASCII).trim();
            } catch (IOException | RuntimeException e) {
                host = Objects.requireNonNullElse(System.getenv("HOSTNAME"), "");
            }
            StringBuilder h = new StringBuilder();
            for (int i = 0; i < host.length() && h.length() < 32; i++) {
                char c = host.charAt(i);
                h.append(c >= 0x21 && c <= 0x7e ? c : '_');
            }
            if (h.length() == 0) {
                h.append("host");
            }
            return h + "-" + ProcessHandle.current().pid() + "-" + Proto.randomHex(12);
        }
    }
}
