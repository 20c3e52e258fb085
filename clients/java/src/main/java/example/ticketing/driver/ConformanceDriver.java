package example.ticketing.driver;

import example.ticketing.Lease;
import example.ticketing.NotHeldException;
import example.ticketing.QueryResult;
import example.ticketing.Ring;
import example.ticketing.Slots;
import example.ticketing.Stats;
import example.ticketing.TicketingClient;
import example.ticketing.TicketingException;
import example.ticketing.UnconfirmedException;
import example.ticketing.WrongGroupException;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Map;

/**
 * The conformance driver of the Java client (docs/testing.md, "Client
 * conformance"): one client made from the command line's options, then one
 * JSON command per line on stdin and exactly one JSON reply per line on
 * stdout, in order, flushed, with the C library's outcome names.
 *
 * <pre>
 * java -cp ticketing-client.jar example.ticketing.driver.ConformanceDriver
 *     --addrs HOST:PORT[,HOST:PORT...] --secret-file PATH --owner NAME
 *     [--response-grace-ms N] [--connect-timeout-ms N] [--send-budget-min-ms N]
 *     [--request-timeout-ms N] [--backoff-min-ms N] [--backoff-max-ms N]
 *     [--release-queue-max N] [--tls-ca-file PATH] [--tls-cert-file PATH]
 *     [--tls-key-file PATH] [--tls-server-name NAME]
 * </pre>
 */
public final class ConformanceDriver {
    private static final int LINE_MAX = 65536;
    private static final long U32_MAX = 0xffffffffL;

    private final TicketingClient client;
    private final PrintStream out;

    private ConformanceDriver(TicketingClient client, PrintStream out) {
        this.client = client;
        this.out = out;
    }

    /**
     * Runs a session: exit status 0 after {@code close} or the end of stdin,
     * 1 if the client cannot be made, 2 for bad options.
     */
    public static void main(String[] args) throws IOException {
        TicketingClient.Builder b = TicketingClient.builder();
        boolean addrs = false;
        boolean secret = false;
        boolean owner = false;
        for (int i = 0; i < args.length; i += 2) {
            if (i + 1 >= args.length) {
                usage();
            }
            String v = args[i + 1];
            switch (args[i]) {
                case "--addrs" -> {
                    b.addrs(v);
                    addrs = true;
                }
                case "--secret-file" -> {
                    b.secretFile(Path.of(v));
                    secret = true;
                }
                case "--owner" -> {
                    b.owner(v);
                    owner = true;
                }
                case "--response-grace-ms" -> b.responseGrace(Duration.ofMillis(knob(args[i], v)));
                case "--connect-timeout-ms" -> b.connectTimeout(Duration.ofMillis(knob(args[i], v)));
                case "--send-budget-min-ms" -> b.sendBudgetMin(Duration.ofMillis(knob(args[i], v)));
                case "--request-timeout-ms" -> b.requestTimeout(Duration.ofMillis(knob(args[i], v)));
                case "--backoff-min-ms" -> b.backoffMin(Duration.ofMillis(knob(args[i], v)));
                case "--backoff-max-ms" -> b.backoffMax(Duration.ofMillis(knob(args[i], v)));
                case "--release-queue-max" -> b.releaseQueueMax((int) Math.min(knob(args[i], v), Integer.MAX_VALUE));
                case "--tls-ca-file" -> b.tlsCaFile(Path.of(v));
                case "--tls-cert-file" -> b.tlsCertFile(Path.of(v));
                case "--tls-key-file" -> b.tlsKeyFile(Path.of(v));
                case "--tls-server-name" -> b.tlsServerName(v);
                default -> usage();
            }
        }
        if (!addrs || !secret || !owner) {
            usage();
        }
        TicketingClient c;
        try {
            c = b.build();
        } catch (TicketingException e) {
            System.err.println("ticketing-java-driver: " + e.getMessage());
            System.exit(1);
            return;
        }
        PrintStream out = new PrintStream(System.out, false, StandardCharsets.US_ASCII);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        ConformanceDriver d = new ConformanceDriver(c, out);
        String line;
        while ((line = in.readLine()) != null) {
            if (!d.run(line)) {
                return;
            }
        }
        c.close(); // stdin closed without "close": end the session all the same
    }

    private static void usage() {
        System.err.println("usage: ConformanceDriver --addrs HOST:PORT[,...] --secret-file PATH --owner NAME\n"
                + "       [--response-grace-ms N] [--connect-timeout-ms N] [--send-budget-min-ms N]\n"
                + "       [--request-timeout-ms N] [--backoff-min-ms N] [--backoff-max-ms N]\n"
                + "       [--release-queue-max N] [--tls-ca-file PATH] [--tls-cert-file PATH]\n"
                + "       [--tls-key-file PATH] [--tls-server-name NAME]");
        System.exit(2);
    }

    /** A knob's number (milliseconds, or a count): 0 to 2^32 - 1. */
    private static long knob(String name, String v) {
        Long n = v.matches("[0-9]{1,10}") ? Long.valueOf(v) : null;
        if (n == null || n > U32_MAX) {
            System.err.println("ticketing-java-driver: bad " + name + ": " + v);
            System.exit(2);
        }
        return n;
    }

    /** A command's bad member: answered DRIVER_ERROR. */
    private static final class BadCommand extends Exception {
        private static final long serialVersionUID = 1L;

        BadCommand(String message) {
            super(message);
        }
    }

    private static String str(Map<String, Object> cmd, String name) throws BadCommand {
        if (cmd.get(name) instanceof String s) {
            return s;
        }
        throw new BadCommand("missing or bad member: " + name);
    }

    private static long num(Map<String, Object> cmd, String name, long max) throws BadCommand {
        if (cmd.get(name) instanceof Json.Num n) {
            Long v = n.unsigned();
            if (v != null && Long.compareUnsigned(v, max) <= 0) {
                return v;
            }
        }
        throw new BadCommand("missing or bad member: " + name);
    }

    private void reply(long t0, Object... pairs) {
        replyFor(t0, null, pairs);
    }

    /**
     * A reply: pairs, then, for a WRONG_GROUP (e a {@link WrongGroupException}),
     * its slot and ring_version, then elapsed_ms.
     */
    private void replyFor(long t0, TicketingException e, Object... pairs) {
        Object[] extra = e instanceof WrongGroupException w
                ? new Object[] {"slot", w.slot(), "ring_version", Json.unsigned(w.ringVersion())}
                : new Object[0];
        Object[] all = new Object[pairs.length + extra.length + 2];
        System.arraycopy(pairs, 0, all, 0, pairs.length);
        System.arraycopy(extra, 0, all, pairs.length, extra.length);
        all[all.length - 2] = "elapsed_ms";
        all[all.length - 1] = (System.nanoTime() - t0) / 1_000_000;
        out.print(Json.object(all));
        out.print('\n');
        out.flush();
    }

    private void driverError(String message) {
        out.print(Json.object("outcome", "DRIVER_ERROR", "message", message));
        out.print('\n');
        out.flush();
    }

    /** One command; false after "close". */
    private boolean run(String line) {
        long t0 = System.nanoTime();
        if (line.length() > LINE_MAX) {
            driverError("malformed command: line too long");
            return true;
        }
        Object parsed;
        try {
            parsed = Json.parse(line);
        } catch (Json.ParseException e) {
            driverError("malformed command: " + e.getMessage());
            return true;
        }
        if (!(parsed instanceof Map<?, ?> raw)) {
            driverError("malformed command: not a JSON object");
            return true;
        }
        @SuppressWarnings("unchecked")
        Map<String, Object> cmd = (Map<String, Object>) raw;
        try {
            String op = str(cmd, "op");
            switch (op) {
                case "acquire" -> acquire(cmd, t0);
                case "release" -> release(cmd, t0);
                case "query" -> query(cmd, t0);
                case "ping" -> ping(t0);
                case "ring" -> ring(t0);
                case "sleep" -> {
                    long ms = num(cmd, "ms", 600_000);
                    sleep(ms);
                    reply(t0, "outcome", "OK");
                }
                case "stats" -> {
                    Stats st = client.stats();
                    reply(t0, "outcome", "OK", "compensations", st.compensations(), "indeterminate",
                            st.indeterminate(), "moved", st.moved(), "releases_queued", st.releasesQueued(),
                            "ring_version", Json.unsigned(st.ringVersion()), "rerouted", st.rerouted());
                }
                case "slot" -> {
                    String key = str(cmd, "key");
                    reply(t0, "outcome", "OK", "slot", Slots.slot(key));
                }
                case "close" -> {
                    client.close();
                    reply(t0, "outcome", "OK");
                    return false;
                }
                default -> throw new BadCommand("unknown op: " + op);
            }
        } catch (BadCommand e) {
            driverError(e.getMessage());
        }
        return true;
    }

    private void acquire(Map<String, Object> cmd, long t0) throws BadCommand {
        String key = str(cmd, "key");
        long lease = num(cmd, "lease_ms", U32_MAX);
        long wait = num(cmd, "wait_ms", U32_MAX);
        try {
            Lease l = client.acquire(key, Duration.ofMillis(lease), Duration.ofMillis(wait));
            reply(t0, "outcome", "ACQUIRED", "token", Json.unsigned(l.token()), "reason", "");
        } catch (TicketingException e) {
            replyFor(t0, e, "outcome", e.outcome().name(), "token", 0, "reason", e.reason());
        }
    }

    private void release(Map<String, Object> cmd, long t0) throws BadCommand {
        String key = str(cmd, "key");
        long token = num(cmd, "token", -1L); // any u64
        try {
            boolean resent = client.releaseToken(key, token);
            reply(t0, "outcome", "RELEASED", "resent", resent, "reason", "");
        } catch (TicketingException e) {
            boolean resent = e instanceof NotHeldException n ? n.resent()
                    : e instanceof WrongGroupException w ? w.resent()
                    : e instanceof UnconfirmedException u && u.resent();
            replyFor(t0, e, "outcome", e.outcome().name(), "resent", resent, "reason", e.reason());
        }
    }

    private void query(Map<String, Object> cmd, long t0) throws BadCommand {
        String key = str(cmd, "key");
        try {
            QueryResult q = client.query(key);
            reply(t0, "outcome", "ANSWERED", "held", q.held(), "owner", q.owner(), "token",
                    Json.unsigned(q.token()), "waiters", q.waiters(), "reason", "");
        } catch (TicketingException e) {
            replyFor(t0, e, "outcome", e.outcome().name(), "held", false, "owner", null, "token", 0, "waiters", 0,
                    "reason", e.reason());
        }
    }

    private void ping(long t0) {
        try {
            client.ping();
            reply(t0, "outcome", "ANSWERED", "reason", "");
        } catch (TicketingException e) {
            reply(t0, "outcome", e.outcome().name(), "reason", e.reason());
        }
    }

    private void ring(long t0) {
        try {
            Ring r = client.ring();
            reply(t0, "outcome", "ANSWERED", "version", Json.unsigned(r.version()), "body", r.body(), "reason", "");
        } catch (TicketingException e) {
            replyFor(t0, e, "outcome", e.outcome().name(), "version", 0, "body", "", "reason", e.reason());
        }
    }

    private static void sleep(long ms) {
        long end = System.nanoTime() + ms * 1_000_000;
        long left;
        while ((left = end - System.nanoTime()) > 0) {
            try {
                Thread.sleep(left / 1_000_000, (int) (left % 1_000_000));
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return;
            }
        }
    }
}
