package example.ticketing;

import java.net.InetAddress;
import java.net.UnknownHostException;

/**
 * One server address, {@code host:port} or {@code [v6addr]:port}, as given
 * (the text is also what an {@code M} hint is compared with).
 */
final class Addr {
    final String text;
    final String host;
    final int port;
    /** The host is an IP literal: no name lookup is needed. */
    final boolean literal;

    private Addr(String text, String host, int port, boolean literal) {
        this.text = text;
        this.host = host;
        this.port = port;
        this.literal = literal;
    }

    /** The address, or null when the text is not {@code host:port}. */
    static Addr parseOrNull(String text) {
        if (!Proto.visible(text)) {
            return null;
        }
        String host;
        String port;
        boolean v6 = false;
        if (text.startsWith("[")) {
            int close = text.indexOf(']');
            if (close < 2 || close + 1 >= text.length() || text.charAt(close + 1) != ':') {
                return null;
            }
            host = text.substring(1, close);
            port = text.substring(close + 2);
            v6 = true;
        } else {
            int colon = text.lastIndexOf(':');
            if (colon < 1 || text.indexOf(':') != colon) {
                return null;
            }
            host = text.substring(0, colon);
            port = text.substring(colon + 1);
        }
        Long p = Proto.parseU64(port);
        if (p == null || p < 1 || p > 65535) {
            return null;
        }
        boolean literal = v6 ? isV6Literal(host) : isV4Literal(host);
        if (v6 && !literal) {
            return null;
        }
        return new Addr(text, host, (int) (long) p, literal);
    }

    /** The IP address of a literal host (no lookup is made for one). */
    InetAddress literalAddress() throws UnknownHostException {
        return InetAddress.getByName(host);
    }

    /**
     * The same endpoint: the same port and the same host, its letters in
     * either case (a ring's address and a configured one are compared so).
     */
    boolean sameAs(Addr o) {
        return port == o.port && host.equalsIgnoreCase(o.host);
    }

    /** An IPv4 or IPv6 address literal (no brackets). */
    static boolean isIpLiteral(String h) {
        return isV4Literal(h) || isV6Literal(h);
    }

    private static boolean isV4Literal(String h) {
        String[] parts = h.split("\\.", -1);
        if (parts.length != 4) {
            return false;
        }
        for (String s : parts) {
            Long v = Proto.parseU64(s);
            if (v == null || v > 255) {
                return false;
            }
        }
        return true;
    }

    private static boolean isV6Literal(String h) {
        int zone = h.indexOf('%');
        String ip = zone >= 0 ? h.substring(0, zone) : h;
        if (ip.indexOf(':') < 0) {
            return false;
        }
        for (int i = 0; i < ip.length(); i++) {
            char c = ip.charAt(i);
            if (c != ':' && c != '.' && Character.digit(c, 16) < 0) {
                return false;
            }
        }
        return true;
    }

    @Override
    public String toString() {
        return text;
    }
}
