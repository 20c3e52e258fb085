package example.ticketing;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.nio.file.Path;
import java.time.Duration;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/** A 3-node cluster: M routing to the leader, and kill -9 of the leader. */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class ClusterTest {
    @TempDir
    Path dir;

    @Test
    void leaderKillKeepsGrantsAndTokensGrow() throws Exception {
        try (Servers.Cluster cl = new Servers.Cluster(dir);
                TicketingClient c = TicketingClient.builder().addrs(cl.addrs()).secretFile(cl.secret).build()) {
            Lease g = c.acquire("seat-1", Duration.ofSeconds(60), Duration.ofSeconds(5));
            int lead = cl.leader(Duration.ofSeconds(1));
            assertTrue(lead >= 0, "no leader");
            // Two of the three connections reach followers, which answer M.
            assertTrue(Servers.waitFor(Duration.ofSeconds(5), () -> c.stats().moved() > 0), "no M seen");
            assertEquals(cl.nodes.get(lead).addr(), c.stats().leaderHint());
            cl.nodes.get(lead).kill();
            Lease g2 = null;
            long end = System.nanoTime() + 40_000_000_000L;
            while (g2 == null) {
                if (System.nanoTime() - end > 0) {
                    fail("no grant after the leader was killed");
                }
                try {
                    g2 = c.acquire("seat-2", Duration.ofSeconds(30), Duration.ofSeconds(5));
                } catch (UnavailableException | IndeterminateException e) {
                    // electing: the rules allow exactly these two, never a wrong grant
                }
            }
            assertTrue(Long.compareUnsigned(g2.token(), g.token()) > 0, "token after the failover");
            int nl = cl.leader(Duration.ofSeconds(5));
            assertTrue(nl >= 0);
            assertNotEquals(lead, nl);
            QueryResult q = c.query("seat-1");
            assertEquals(new QueryResult("seat-1", true, c.owner(), g.token(), 0), q, "the grant outlives its leader");
            c.release(g);
            c.release(g2);
        }
    }

    /** Given one follower only, the client follows its M to the leader it was not told about. */
    @Test
    void aFollowersMLeadsToTheLeader() throws Exception {
        try (Servers.Cluster cl = new Servers.Cluster(dir)) {
            int lead = cl.leader(Duration.ofSeconds(5));
            Servers.Node follower = cl.nodes.get((lead + 1) % 3);
            try (TicketingClient c = TicketingClient.builder().addrs(follower.addr()).secretFile(cl.secret).build()) {
                try (Lease l = c.acquire("routed", Duration.ofSeconds(30), Duration.ofSeconds(5))) {
                    Stats st = c.stats();
                    assertEquals(new QueryResult("routed", true, c.owner(), l.token(), 0), c.query("routed"));
                    assertTrue(st.moved() >= 1);
                    assertEquals(cl.nodes.get(lead).addr(), st.leaderHint());
                    assertEquals(3, st.connections(), "two to the follower, one to the hinted leader");
                    assertEquals(0, st.indeterminate());
                }
            }
        }
    }
}
