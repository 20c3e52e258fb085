package example.ticketing;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * The programs of clients/java/examples, run as a user runs them
 * ({@code java -cp <the client> examples/X.java}) against a real
 * ticketingd; the fencing one against a private PostgreSQL as well, whose
 * rows are then checked directly.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class ExamplesTest {
    private static final Path EXAMPLES = Path.of("examples");

    @TempDir
    static Path dir;
    private Path secret;
    private Servers.Node node;

    @BeforeAll
    void start() throws Exception {
        secret = Servers.writeSecret(dir, "client.secret");
        node = Servers.standalone(dir, secret);
    }

    @AfterAll
    void stop() throws Exception {
        node.close();
    }

    /** Runs a program with the environment given; its exit status and output. */
    private static String[] run(List<String> cmd, Map<String, String> env, Path cwd) throws Exception {
        ProcessBuilder pb = new ProcessBuilder(cmd).redirectErrorStream(true).directory(cwd.toFile());
        pb.environment().putAll(env);
        Process p = pb.start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertTrue(p.waitFor(50, TimeUnit.SECONDS), cmd + " did not end");
        return new String[] {Integer.toString(p.exitValue()), out};
    }

    private String[] example(String name, Map<String, String> env) throws Exception {
        String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
        Map<String, String> all = new java.util.HashMap<>(Map.of("TICKETING_ADDR", node.addr(),
                "TICKETING_SECRET_FILE", secret.toString()));
        all.putAll(env);
        // From the top of the repository, as docs/client.md runs them.
        return run(List.of(java, "-cp", Servers.clientClassPath(),
                Path.of("clients/java/examples", name).toString()), all, Path.of("../.."));
    }

    @Test
    void everyExampleIsTestedAndShownInTheDocs() throws IOException {
        List<String> names = new ArrayList<>();
        try (Stream<Path> s = Files.list(EXAMPLES)) {
            s.forEach(p -> names.add(p.getFileName().toString()));
        }
        names.sort(null);
        assertEquals(List.of("AsyncLocks.java", "FencingPg.java", "FirstLock.java"), names);
        // The docs show each example as it is (docs/client.md, "Java").
        Path docs = Path.of("../../docs/client.md");
        String doc = Files.readString(docs);
        for (String n : names) {
            String src = Files.readString(EXAMPLES.resolve(n)).stripTrailing();
            assertTrue(doc.contains(src), docs + " differs from examples/" + n);
        }
    }

    @Test
    void firstLock() throws Exception {
        String[] r = example("FirstLock.java", Map.of());
        assertEquals("0", r[0], r[1]);
        assertTrue(r[1].matches("(?s)holding inventory/sku-1 with token \\d+, \\d+ ms of lease left\\n"), r[1]);
        try (TicketingClient c = TicketingClient.builder().addrs(node.addr()).secretFile(secret).build()) {
            assertFalse(c.query("inventory/sku-1").held(), "the example did not release");
        }
    }

    @Test
    void asyncLocks() throws Exception {
        String[] r = example("AsyncLocks.java", Map.of());
        assertEquals("0", r[0], r[1]);
        assertTrue(r[1].contains("10 buyers served, tokens increasing: true"), r[1]);
    }

    private static Path pgBin() throws IOException {
        List<Path> dirs = new ArrayList<>();
        if (System.getenv("PGBIN") != null) {
            dirs.add(Path.of(System.getenv("PGBIN")));
        }
        Path lib = Path.of("/usr/lib/postgresql");
        if (Files.isDirectory(lib)) {
            try (Stream<Path> s = Files.list(lib)) {
                s.sorted().forEach(v -> dirs.add(v.resolve("bin")));
            }
        }
        for (Path d : dirs) {
            if (Files.isExecutable(d.resolve("initdb")) && Files.isExecutable(d.resolve("pg_ctl"))
                    && Files.isExecutable(d.resolve("psql"))) {
                return d;
            }
        }
        return null;
    }

    /**
     * The stale-holder story against a private PostgreSQL (initdb in a
     * temporary directory, a unix socket only). Skipped only where no
     * PostgreSQL server binaries (or, as root, no postgres user) exist.
     */
    @Test
    void fencingWithPostgres() throws Exception {
        Path bin = pgBin();
        assumeTrue(bin != null, "PostgreSQL server binaries not found (apt-get install postgresql)");
        boolean root = "root".equals(System.getProperty("user.name"));
        List<String> asPg = new ArrayList<>();
        if (root) {
            assumeTrue(run(List.of("id", "postgres"), Map.of(), dir)[0].equals("0"), "no postgres user");
            asPg.addAll(List.of("runuser", "-u", "postgres", "--"));
        }
        Path tmp = Files.createTempDirectory("tk-java-pg.");
        Path data = tmp.resolve("data");
        Path sock = tmp.resolve("sock");
        Files.createDirectories(data);
        Files.createDirectories(sock);
        run(List.of("chmod", "711", tmp.toString()), Map.of(), dir);
        run(List.of("chmod", "700", data.toString()), Map.of(), dir);
        if (root) {
            run(List.of("chown", "postgres:", data.toString(), sock.toString()), Map.of(), dir);
        }
        List<String> initdb = new ArrayList<>(asPg);
        initdb.addAll(List.of(bin.resolve("initdb").toString(), "-D", data.toString(), "-A", "trust", "-U", "postgres",
                "-E", "UTF8", "--locale=C", "--no-sync"));
        String[] r = run(initdb, Map.of(), tmp);
        assertEquals("0", r[0], "initdb: " + r[1]);
        int port = Servers.freePorts3();
        List<String> pgctl = new ArrayList<>(asPg);
        pgctl.add(bin.resolve("pg_ctl").toString());
        List<String> startPg = new ArrayList<>(pgctl);
        startPg.addAll(List.of("-D", data.toString(), "-l", sock.resolve("pg.log").toString(), "-w", "-t", "60", "-o",
                "-k " + sock + " -p " + port + " -c listen_addresses='' -c fsync=off", "start"));
        r = run(startPg, Map.of(), tmp);
        assertEquals("0", r[0], "PostgreSQL did not start: " + r[1]);
        List<String> stopPg = new ArrayList<>(pgctl);
        stopPg.addAll(List.of("-D", data.toString(), "-m", "immediate", "-w", "stop"));
        try {
            Map<String, String> env = Map.of("PGHOST", sock.toString(), "PGPORT", Integer.toString(port),
                    "PGUSER", "postgres", "PGDATABASE", "postgres", "PSQL", bin.resolve("psql").toString());
            r = example("FencingPg.java", env);
            assertEquals("0", r[0], "the example failed:\n" + r[1]);
            Matcher m = Pattern.compile("summary: alice_token=(\\d+) bob_token=(\\d+) bob_write=applied alice_write=stale")
                    .matcher(r[1]);
            assertTrue(m.find(), "no summary with bob applied and alice stale:\n" + r[1]);
            String[] row = run(List.of(bin.resolve("psql").toString(), "-X", "-tA", "-F", "|", "-c",
                    "SELECT remaining, split_part(last_writer, '-', 1), last_token, (SELECT token FROM "
                            + "ticketing_demo.fence WHERE lock_key = 'show-42') FROM ticketing_demo.inventory "
                            + "WHERE item = 'show-42'"), env, tmp);
            assertEquals("39|bob|" + m.group(2) + "|" + m.group(2), row[1].trim(), "the stale write landed?");
        } finally {
            run(stopPg, Map.of(), tmp);
            run(List.of("rm", "-rf", tmp.toString()), Map.of(), dir);
        }
    }
}
