// AsyncLocks.java: the CompletableFuture API; ten buyers take turns on one key.
import example.ticketing.Lease;
import example.ticketing.TicketingClient;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentLinkedQueue;

public class AsyncLocks {
    public static void main(String[] args) {
        boolean ok;
        try (TicketingClient client = TicketingClient.builder()
                .addrs(System.getenv("TICKETING_ADDR"))
                .secretFile(Path.of(System.getenv("TICKETING_SECRET_FILE")))
                .build()) {
            ConcurrentLinkedQueue<Long> tokens = new ConcurrentLinkedQueue<>();
            List<CompletableFuture<Boolean>> buyers = new ArrayList<>();
            for (int i = 0; i < 10; i++) {
                // All ten acquires are in flight at once; the server queues them FIFO.
                buyers.add(client.acquireAsync("event-42/seats", Duration.ofSeconds(10), Duration.ofSeconds(10))
                        .thenComposeAsync((Lease lease) -> {
                            tokens.add(lease.token()); // a real buyer writes with lease.token() here
                            return lease.releaseAsync(); // hands the key to the next buyer
                        }));
            }
            CompletableFuture.allOf(buyers.toArray(new CompletableFuture<?>[0])).join();
            List<Long> got = new ArrayList<>(tokens);
            List<Long> sorted = new ArrayList<>(got);
            sorted.sort(Long::compareUnsigned);
            System.out.printf("%d buyers served, tokens increasing: %b%n", got.size(), got.equals(sorted));
            ok = got.size() == 10 && got.equals(sorted);
        }
        System.exit(ok ? 0 : 1);
    }
}
