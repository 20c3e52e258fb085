// FencingPg.java: the stale holder of docs/fencing.md, with Ticketing tokens
// fenced in PostgreSQL.
//
// alice takes the lock of show-42 with a 1 s lease, reads the seats left and
// stalls past her lease. bob queues, gets the lock when her lease runs out,
// and writes first. alice's late write carries her older token and is refused
// by the database.
//
// Without Maven there is no JDBC driver, so this example runs psql (PSQL,
// default "psql") for each statement; an application would run the same SQL
// through its JDBC driver. Needs TICKETING_ADDR, TICKETING_SECRET_FILE, the
// libpq variables of the database (PGHOST, PGPORT, PGUSER, PGDATABASE) and the
// schema file (FENCING_SQL, default docs/examples/fencing_pg.sql). Exit 0 if
// bob's write was applied and alice's refused.
import example.ticketing.Lease;
import example.ticketing.NotHeldException;
import example.ticketing.TicketingClient;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

public class FencingPg {
    static final String KEY = "show-42";
    static final String ITEM = "show-42";

    /** Runs SQL through psql; each "name=value" becomes :'name', an SQL literal. */
    static String psql(String sql, String... vars) throws IOException, InterruptedException {
        String bin = System.getenv().getOrDefault("PSQL", "psql");
        List<String> cmd = new ArrayList<>(List.of(bin, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-tA"));
        for (String v : vars) {
            cmd.add("-v");
            cmd.add(v);
        }
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
        p.getOutputStream().write(sql.getBytes(StandardCharsets.UTF_8));
        p.getOutputStream().close();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8).trim();
        if (p.waitFor() != 0) {
            throw new IOException("psql: " + out);
        }
        return out;
    }

    /** The fence raised to token and the row written in one statement: "applied" or "stale". */
    static String fencedWrite(Lease lease, int remaining, String writer) throws IOException, InterruptedException {
        return psql("SELECT ticketing_demo.fenced_set_remaining(:'key', :'token', :'item', :'remaining', :'writer');",
                "key=" + KEY, "token=" + lease.tokenString(), "item=" + ITEM, "remaining=" + remaining,
                "writer=" + writer);
    }

    static int remaining() throws IOException, InterruptedException {
        return Integer.parseInt(psql("SELECT remaining FROM ticketing_demo.inventory WHERE item = :'item';",
                "item=" + ITEM));
    }

    static TicketingClient client(String owner) {
        return TicketingClient.builder().addrs(System.getenv("TICKETING_ADDR"))
                .secretFile(Path.of(System.getenv("TICKETING_SECRET_FILE"))).owner(owner).build();
    }

    public static void main(String[] args) throws Exception {
        String sql = System.getenv().getOrDefault("FENCING_SQL", "docs/examples/fencing_pg.sql");
        psql(Files.readString(Path.of(sql)));
        String run = Long.toString(ProcessHandle.current().pid());
        try (TicketingClient alice = client("alice-" + run); TicketingClient bob = client("bob-" + run)) {
            Lease a = alice.acquire(KEY, Duration.ofSeconds(1), Duration.ofSeconds(5));
            int aliceValue = remaining() - 2;
            System.out.printf("alice: token %s, will write %d, then stalls past her lease%n", a.tokenString(), aliceValue);

            Lease b = bob.acquire(KEY, Duration.ofSeconds(30), Duration.ofSeconds(10)); // when alice's lease ends
            int bobValue = remaining() - 1;
            String bobResult = fencedWrite(b, bobValue, "bob-" + run);
            System.out.printf("bob:   token %s, writes %d: %s%n", b.tokenString(), bobValue, bobResult);

            String aliceResult = fencedWrite(a, aliceValue, "alice-" + run); // she wakes up, stale
            System.out.printf("alice: wakes up, writes %d with token %s: %s%n", aliceValue, a.tokenString(), aliceResult);
            try {
                a.close();
            } catch (NotHeldException e) {
                System.out.println("alice: release: not held (her lease had run out)");
            }
            b.close();
            System.out.printf("summary: alice_token=%s bob_token=%s bob_write=%s alice_write=%s%n",
                    a.tokenString(), b.tokenString(), bobResult, aliceResult);
            if (!bobResult.equals("applied") || !aliceResult.equals("stale") || remaining() != bobValue) {
                System.err.println("FencingPg: FENCING FAILED: expected bob's write applied and alice's refused");
                System.exit(1);
            }
            System.out.println("ok:    the stale write was refused and changed nothing");
        }
    }
}
