package example.ticketing;

import java.util.List;
import javax.net.ssl.SSLContext;

/** A checked configuration, every default applied (built by {@link TicketingClient.Builder}). */
final class Settings {
    final List<Addr> addrs;
    final byte[] secret;
    final String owner;
    final long connectTimeoutNanos;
    final long responseGraceNanos;
    final long sendBudgetMinMs;
    final long requestTimeoutNanos;
    final int releaseQueueMax;
    final int requestsMax;
    final int inflightMax;
    final long backoffMinNanos;
    final long backoffMaxNanos;
    /** Null without TLS. */
    final SSLContext tls;
    final String tlsServerName;
    final String tlsCaFile;
    final System.Logger logger;

    Settings(List<Addr> addrs, byte[] secret, String owner, long connectTimeoutNanos,
            long responseGraceNanos, long sendBudgetMinMs, long requestTimeoutNanos, int releaseQueueMax,
            int requestsMax, int inflightMax, long backoffMinNanos, long backoffMaxNanos, SSLContext tls,
            String tlsServerName, String tlsCaFile, System.Logger logger) {
        this.addrs = addrs;
        this.secret = secret;
        this.owner = owner;
        this.connectTimeoutNanos = connectTimeoutNanos;
        this.responseGraceNanos = responseGraceNanos;
        this.sendBudgetMinMs = sendBudgetMinMs;
        this.requestTimeoutNanos = requestTimeoutNanos;
        this.releaseQueueMax = releaseQueueMax;
        this.requestsMax = requestsMax;
        this.inflightMax = inflightMax;
        this.backoffMinNanos = backoffMinNanos;
        this.backoffMaxNanos = backoffMaxNanos;
        this.tls = tls;
        this.tlsServerName = tlsServerName;
        this.tlsCaFile = tlsCaFile;
        this.logger = logger;
    }
}
