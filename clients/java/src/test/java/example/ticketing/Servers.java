package example.ticketing;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.net.HttpURLConnection;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.URL;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.SecureRandom;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;

/**
 * Real ticketingd processes for the tests, on 127.0.0.1: a standalone node,
 * a cluster of three, a node with TLS. The binary is TICKETING_BIN, else
 * TICKETING_BUILD_DIR/ticketingd, else build/ticketingd at the top of the
 * repository (the tests run in clients/java).
 *
 * <p>Ports: each node takes three consecutive ones (client P, peer P+1,
 * admin P+2) below the kernel's ephemeral range, in a block of 4 that is
 * locked as every Ticketing test harness locks it (docs/testing.md): an
 * flock on /tmp/ticketing-test-ports/P, held until this JVM exits. The JDK
 * has no flock(2) (FileChannel locks are fcntl locks, which flock does not
 * see), so a child {@code flock} process holds each lock; its stdin is a
 * pipe from this JVM, so it lets go when the JVM ends, however it ends.
 */
public final class Servers {
    private static final Path LOCKS = Path.of("/tmp/ticketing-test-ports");
    /** The flock processes: kept reachable, so that their pipes stay open. */
    private static final List<Process> HELD = new CopyOnWriteArrayList<>();

    private Servers() {}

    static Path ticketingd() {
        String bin = System.getenv("TICKETING_BIN");
        if (bin == null && System.getenv("TICKETING_BUILD_DIR") != null) {
            bin = System.getenv("TICKETING_BUILD_DIR") + "/ticketingd";
        }
        Path p = bin != null ? Path.of(bin) : Path.of("../../build/ticketingd").toAbsolutePath().normalize();
        if (!Files.isExecutable(p)) {
            throw new IllegalStateException("no ticketingd at " + p + " (set TICKETING_BIN)");
        }
        return p;
    }

    public static Path writeSecret(Path dir, String name) throws IOException {
        byte[] b = new byte[32];
        new SecureRandom().nextBytes(b);
        Path p = dir.resolve(name);
        Files.writeString(p, HexFormat.of().formatHex(b) + "\n");
        return p;
    }

    private static boolean portFree(int p) {
        try (ServerSocket s = new ServerSocket()) {
            s.bind(new InetSocketAddress("127.0.0.1", p));
            return true;
        } catch (IOException e) {
            return false;
        }
    }

    /** Locks the 4-port block at p for the rest of this JVM; false if another process holds it. */
    private static boolean lockBlock(int p) {
        try {
            Files.createDirectories(LOCKS);
            Process f = new ProcessBuilder("flock", "-n", "-E", "75", LOCKS.resolve(Integer.toString(p)).toString(),
                    "sh", "-c", "echo locked; exec cat >/dev/null")
                    .redirectErrorStream(true).start();
            BufferedReader r = new BufferedReader(new InputStreamReader(f.getInputStream(), StandardCharsets.US_ASCII));
            if ("locked".equals(r.readLine())) {
                HELD.add(f);
                return true;
            }
            f.waitFor(5, TimeUnit.SECONDS);
            return false;
        } catch (IOException e) {
            return true; // no lock directory or no flock: the bind check alone
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return false;
        }
    }

    /** P with P, P+1 and P+2 free and locked. */
    static int freePorts3() {
        for (int i = 0; i < 500; i++) {
            int p = (20000 + ThreadLocalRandom.current().nextInt(12000)) & ~3;
            if (portFree(p) && portFree(p + 1) && portFree(p + 2) && lockBlock(p)) {
                return p;
            }
        }
        throw new IllegalStateException("no free ports");
    }

    /** Where the client's classes are (a directory or a jar): the class path of its programs. */
    public static String clientClassPath() {
        try {
            return Path.of(TicketingClient.class.getProtectionDomain().getCodeSource().getLocation().toURI()).toString();
        } catch (java.net.URISyntaxException e) {
            throw new IllegalStateException(e);
        }
    }

    static boolean waitFor(Duration d, BooleanSupplier f) throws InterruptedException {
        long end = System.nanoTime() + d.toNanos();
        while (!f.getAsBoolean()) {
            if (System.nanoTime() - end > 0) {
                return false;
            }
            Thread.sleep(20);
        }
        return true;
    }

    /** One ticketingd process. */
    public static final class Node implements AutoCloseable {
        final int port;
        final Path log;
        private final List<String> args;
        private Process proc;

        Node(int port, Path log, List<String> args) {
            this.port = port;
            this.log = log;
            this.args = args;
        }

        public String addr() {
            return "127.0.0.1:" + port;
        }

        void start() throws IOException {
            List<String> cmd = new ArrayList<>();
            cmd.add(ticketingd().toString());
            cmd.addAll(args);
            proc = new ProcessBuilder(cmd).redirectErrorStream(true)
                    .redirectOutput(ProcessBuilder.Redirect.appendTo(log.toFile()))
                    .redirectInput(ProcessBuilder.Redirect.from(new java.io.File("/dev/null"))).start();
        }

        boolean alive() {
            return proc != null && proc.isAlive();
        }

        String status() {
            try {
                HttpURLConnection c = (HttpURLConnection) new URL("http://127.0.0.1:" + (port + 2) + "/status")
                        .openConnection();
                c.setConnectTimeout(500);
                c.setReadTimeout(500);
                try (var in = c.getInputStream()) {
                    return new String(in.readAllBytes(), StandardCharsets.UTF_8);
                } finally {
                    c.disconnect();
                }
            } catch (IOException e) {
                return "";
            }
        }

        boolean serving() {
            return alive() && status().contains("\"serving\":true");
        }

        /**
         * SIGSTOP or SIGCONT, by name ("STOP", "CONT"). A stop returns once
         * every thread of the server is stopped: kill(2) only queues the
         * signal, and a test that writes right after it must not race the
         * server's last running thread.
         */
        void signal(String sig) throws IOException, InterruptedException {
            int rc = new ProcessBuilder("kill", "-" + sig, Long.toString(proc.pid())).inheritIO().start().waitFor();
            if (rc != 0) {
                throw new IOException("kill -" + sig + " " + proc.pid() + " exited " + rc);
            }
            if (sig.equals("STOP") && !waitFor(Duration.ofSeconds(5), this::allStopped)) {
                throw new IOException("ticketingd " + proc.pid() + " did not stop within 5 s");
            }
        }

        /** True if every thread in /proc/PID/task is in state T (stopped). */
        private boolean allStopped() {
            try (var tasks = Files.list(Path.of("/proc", Long.toString(proc.pid()), "task"))) {
                for (Path t : (Iterable<Path>) tasks::iterator) {
                    String stat = Files.readString(t.resolve("stat"));
                    // pid (comm) STATE ...: comm may hold spaces, so the state follows the last ')'.
                    if (stat.charAt(stat.lastIndexOf(')') + 2) != 'T') {
                        return false;
                    }
                }
                return true;
            } catch (IOException e) {
                return false; // a thread ended while we looked: look again
            }
        }

        void kill() throws InterruptedException {
            if (proc != null) {
                proc.destroyForcibly();
                proc.waitFor();
            }
        }

        /** SIGCONT (it may be stopped), SIGTERM, then SIGKILL after 5 s. */
        @Override
        public void close() throws IOException {
            if (proc == null || !proc.isAlive()) {
                return;
            }
            try {
                signal("CONT");
                proc.destroy();
                if (!proc.waitFor(5, TimeUnit.SECONDS)) {
                    kill();
                }
            } catch (InterruptedException e) {
                proc.destroyForcibly();
                Thread.currentThread().interrupt();
            }
        }

        String logTail() {
            try {
                String s = Files.readString(log);
                return s.length() > 3000 ? s.substring(s.length() - 3000) : s;
            } catch (IOException e) {
                return "(no log: " + e + ")";
            }
        }
    }

    /** A started standalone node with its secret in dir. */
    public static Node standalone(Path dir, Path secret, String... extra) throws IOException, InterruptedException {
        for (int attempt = 0; attempt < 5; attempt++) {
            int p = freePorts3();
            List<String> a = new ArrayList<>(List.of("--bind", "127.0.0.1", "--port", Integer.toString(p),
                    "--threads", "1", "--client-secret-file", secret.toString()));
            a.addAll(List.of(extra));
            Node n = new Node(p, dir.resolve("node-" + p + ".log"), a);
            n.start();
            if (waitFor(Duration.ofSeconds(10), () -> !n.alive() || n.serving()) && n.alive()) {
                return n;
            }
            n.kill();
        }
        throw new IllegalStateException("ticketingd did not start (see the logs in " + dir + ")");
    }

    /** Three members that elected a leader. */
    static final class Cluster implements AutoCloseable {
        final List<Node> nodes = new ArrayList<>();
        final Path secret;

        Cluster(Path dir) throws IOException, InterruptedException {
            secret = writeSecret(dir, "client.secret");
            Path peer = writeSecret(dir, "peer.secret");
            int[] ports = new int[3];
            List<String> peers = new ArrayList<>();
            for (int i = 0; i < 3; i++) {
                ports[i] = freePorts3();
                peers.add("127.0.0.1:" + (ports[i] + 1));
            }
            for (int i = 0; i < 3; i++) {
                Node n = new Node(ports[i], dir.resolve("node" + i + ".log"), List.of("--bind", "127.0.0.1",
                        "--port", Integer.toString(ports[i]), "--advertise", "127.0.0.1:" + ports[i],
                        "--peers", String.join(",", peers), "--threads", "1", "--heartbeat-ms", "50",
                        "--election-ms", "600", "--client-secret-file", secret.toString(),
                        "--peer-secret-file", peer.toString()));
                n.start();
                nodes.add(n);
            }
            if (leader(Duration.ofSeconds(20)) < 0) {
                close();
                throw new IllegalStateException("no leader within 20 s");
            }
        }

        List<String> addrs() {
            List<String> a = new ArrayList<>();
            for (Node n : nodes) {
                a.add(n.addr());
            }
            return a;
        }

        /** The index of the serving node, -1 if none within timeout. */
        int leader(Duration timeout) throws InterruptedException {
            long end = System.nanoTime() + timeout.toNanos();
            do {
                for (int i = 0; i < nodes.size(); i++) {
                    if (nodes.get(i).serving()) {
                        return i;
                    }
                }
                Thread.sleep(50);
            } while (System.nanoTime() - end < 0);
            return -1;
        }

        @Override
        public void close() throws IOException {
            for (Node n : nodes) {
                n.close();
            }
        }
    }

    /** The test certificates of tests/support/make_certs.sh, made in dir. */
    static void makeCerts(Path dir) throws IOException, InterruptedException {
        Process p = new ProcessBuilder("sh", Path.of("../../tests/support/make_certs.sh").toString(), dir.toString())
                .redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        if (p.waitFor() != 0) {
            throw new IOException("make_certs.sh failed: " + out);
        }
    }
}
