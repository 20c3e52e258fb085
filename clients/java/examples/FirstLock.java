// FirstLock.java: acquire, work under the lock, release.
import example.ticketing.IndeterminateException;
import example.ticketing.Lease;
import example.ticketing.TicketingClient;
import example.ticketing.TicketingException;
import java.nio.file.Path;
import java.time.Duration;

public class FirstLock {
    public static void main(String[] args) {
        try (TicketingClient client = TicketingClient.builder()
                .addrs(System.getenv("TICKETING_ADDR")) // "host:port,host:port"
                .secretFile(Path.of(System.getenv("TICKETING_SECRET_FILE")))
                .build()) {
            Lease lease;
            try {
                // Lease 30 s (the safety net if we die), wait at most 5 s for our turn.
                lease = client.acquire("inventory/sku-1", Duration.ofSeconds(30), Duration.ofSeconds(5));
            } catch (IndeterminateException e) {
                // Maybe acquired, maybe not: never enter. The client releases a
                // late grant by itself; otherwise the lease frees the key.
                System.err.println("not acquired: indeterminate");
                System.exit(1);
                return;
            } catch (TicketingException e) { // Busy, WaitTimeout, Unavailable: not acquired
                System.err.println("not acquired: " + e.getMessage());
                System.exit(1);
                return;
            }
            // The critical section: finish before lease.remaining() runs out and
            // pass lease.token() to every write it protects. Closing the lease
            // releases it, also when the block throws.
            try (lease) {
                System.out.printf("holding %s with token %s, %d ms of lease left%n",
                        lease.key(), lease.tokenString(), lease.remaining().toMillis());
            } catch (TicketingException e) { // NotHeld, Unconfirmed, QueueFull
                System.err.println("release: " + e.outcome() + ": the lease will free the key");
            }
        }
    }
}
