package example.ticketing;

import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.security.SecureRandom;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;

/**
 * The client side of the Ticketing line protocol (docs/protocol.md): field
 * limits, request lines, response parsing and the handshake proofs. Pure
 * functions: no sockets, no clocks, no threads.
 */
final class Proto {
    static final int KEY_MAX = 250;
    static final int OWNER_MAX = 64;
    static final long LEASE_MS_MIN = 1000;
    static final long LEASE_MS_MAX = 250_000;
    static final long WAIT_MS_MAX = 250_000;
    /** A line's bound, the {@code \n} included. */
    static final int LINE_MAX = 1024;
    static final int SECRET_MIN = 16;
    static final int SECRET_MAX = 4096;
    static final int ADDRS_MAX = 8;
    /** The absolute deadline of a release, from its enqueue. */
    static final long RELEASE_DEADLINE_MS = 5000;

    private static final SecureRandom RANDOM = new SecureRandom();
    private static final char[] HEX = "0123456789abcdef".toCharArray();

    private Proto() {}

    /** Printable ASCII without space (0x21-0x7E), at least one character. */
    static boolean visible(String s) {
        if (s.isEmpty()) {
            return false;
        }
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c < 0x21 || c > 0x7e) {
                return false;
            }
        }
        return true;
    }

    static boolean keyOk(String key) {
        return key != null && key.length() <= KEY_MAX && visible(key);
    }

    static boolean ownerOk(String owner) {
        return owner != null && owner.length() <= OWNER_MAX && visible(owner);
    }

    /**
     * A decimal u64 as the server writes it: digits only, no leading zero
     * except "0" itself, nothing beyond the u64 range. Returns the value as
     * an unsigned long, or {@code null} if the text is not one.
     */
    static Long parseU64(String s) {
        int n = s.length();
        if (n == 0 || n > 20 || (n > 1 && s.charAt(0) == '0')) {
            return null;
        }
        for (int i = 0; i < n; i++) {
            char c = s.charAt(i);
            if (c < '0' || c > '9') {
                return null;
            }
        }
        try {
            return Long.parseUnsignedLong(s);
        } catch (NumberFormatException e) {
            return null; // above 2^64 - 1
        }
    }

    static byte[] acquireLine(long id, String key, String owner, long leaseMs, long waitMs) {
        return ascii("A " + Long.toUnsignedString(id) + " " + key + " " + owner + " " + leaseMs + " "
                + waitMs + "\n");
    }

    static byte[] releaseLine(long id, String key, String owner, long token) {
        return ascii("R " + Long.toUnsignedString(id) + " " + key + " " + owner + " "
                + Long.toUnsignedString(token) + "\n");
    }

    static byte[] queryLine(long id, String key) {
        return ascii("Q " + Long.toUnsignedString(id) + " " + key + "\n");
    }

    static byte[] pingLine(long id) {
        return ascii("P " + Long.toUnsignedString(id) + "\n");
    }

    static byte[] ringLine(long id) {
        return ascii("S " + Long.toUnsignedString(id) + "\n");
    }

    static byte[] ascii(String s) {
        return s.getBytes(StandardCharsets.US_ASCII);
    }

    /** One parsed server line after the handshake. */
    static final class Response {
        /** G T B R N Q P E M W S. */
        final char type;
        /** False for "E - reason" and M. */
        final boolean hasId;
        final long id;
        /** G: the token; Q: the holder's token, 0 when free. */
        final long token;
        /** Q: the holder, null when the key is free. */
        final String owner;
        final long waiters;
        /** E: the reason; M: the address, null for "M -"; S: the body, or this line's part of it. */
        final String text;
        /** W: the key's slot, 0 to 16383. */
        final int slot;
        /** W, S: the ring's version (unsigned). */
        final long version;
        /** S: this line is part {@code part} of {@code parts}; 1 of 1 for the one-line form. */
        final int part;
        final int parts;

        Response(char type, boolean hasId, long id, long token, String owner, long waiters, String text) {
            this(type, hasId, id, token, owner, waiters, text, 0, 0, 0, 0);
        }

        Response(char type, boolean hasId, long id, long token, String owner, long waiters, String text, int slot,
                long version, int part, int parts) {
            this.type = type;
            this.hasId = hasId;
            this.id = id;
            this.token = token;
            this.owner = owner;
            this.waiters = waiters;
            this.text = text;
            this.slot = slot;
            this.version = version;
            this.part = part;
            this.parts = parts;
        }
    }

    /**
     * Parses one line (without its {@code \n}) exactly by the server's
     * grammar; null for anything else, which the caller treats as a
     * protocol error.
     */
    static Response parseResponse(String line) {
        if (line.endsWith("\r")) {
            line = line.substring(0, line.length() - 1);
        }
        String[] w = line.split(" ", -1);
        if (w.length < 2 || w[0].length() != 1) {
            return null;
        }
        for (String f : w) {
            if (f.isEmpty()) {
                return null;
            }
        }
        char t = w[0].charAt(0);
        if (t == 'M') {
            if (w.length != 2) {
                return null;
            }
            if (w[1].equals("-")) {
                return new Response('M', false, 0, 0, null, 0, null);
            }
            Addr a = Addr.parseOrNull(w[1]);
            return a == null ? null : new Response('M', false, 0, 0, null, 0, w[1]);
        }
        boolean hasId = true;
        long id = 0;
        if (t == 'E' && w[1].equals("-")) {
            hasId = false;
        } else {
            Long v = parseU64(w[1]);
            if (v == null) {
                return null;
            }
            id = v;
        }
        switch (t) {
            case 'T':
            case 'B':
            case 'R':
            case 'N':
            case 'P':
                return w.length == 2 ? new Response(t, true, id, 0, null, 0, null) : null;
            case 'G': {
                if (w.length != 3) {
                    return null;
                }
                Long tok = parseU64(w[2]);
                return tok == null || tok == 0 ? null : new Response(t, true, id, tok, null, 0, null);
            }
            case 'Q': {
                if (w.length != 5 || !ownerOk(w[2])) {
                    return null;
                }
                Long tok = parseU64(w[3]);
                Long n = parseU64(w[4]);
                if (tok == null || n == null || Long.compareUnsigned(n, 0xffffffffL) > 0) {
                    return null;
                }
                if (tok == 0) {
                    return w[2].equals("-") && n == 0 ? new Response(t, true, id, 0, null, 0, null) : null;
                }
                return new Response(t, true, id, tok, w[2], n, null);
            }
            case 'W': {
                if (w.length != 4) {
                    return null;
                }
                Long slot = parseU64(w[2]);
                Long version = parseU64(w[3]);
                if (slot == null || Long.compareUnsigned(slot, Slots.SLOTS) >= 0 || version == null) {
                    return null;
                }
                return new Response(t, true, id, 0, null, 0, null, (int) (long) slot, version, 0, 0);
            }
            case 'S':
                return parseRing(w, id);
            case 'E':
                return w.length == 3 && visible(w[2]) ? new Response(t, hasId, id, 0, null, 0, w[2]) : null;
            default:
                return null;
        }
    }

    /**
     * The most parts an S answer can have: each part holds at least one whole
     * range, and a ring has at most 1,024 of them.
     */
    static final int RING_PARTS_MAX = 1024;

    /**
     * "S id version body" (the one-line form: part 1 of 1) or "S id version
     * k/n part" with 1 <= k <= n and 2 <= n <= {@link #RING_PARTS_MAX}; the
     * body or part is visible ASCII. Whether the parts come in order is the
     * connection's to check.
     */
    private static Response parseRing(String[] w, long id) {
        if (w.length != 4 && w.length != 5) {
            return null;
        }
        Long version = parseU64(w[2]);
        String body = w[w.length - 1];
        if (version == null || !visible(body)) {
            return null;
        }
        int part = 1;
        int parts = 1;
        if (w.length == 5) {
            int slash = w[3].indexOf('/');
            if (slash < 0) {
                return null;
            }
            Long k = parseU64(w[3].substring(0, slash));
            Long n = parseU64(w[3].substring(slash + 1));
            if (k == null || n == null || n < 2 || n > RING_PARTS_MAX || k < 1 || k > n) {
                return null;
            }
            part = (int) (long) k;
            parts = (int) (long) n;
        }
        return new Response('S', true, id, 0, null, 0, body, 0, version, part, parts);
    }

    /** 32 random bytes in lowercase hex: a handshake nonce. */
    static String newNonce() {
        byte[] b = new byte[32];
        RANDOM.nextBytes(b);
        return hex(b);
    }

    /** Random lowercase hex digits, n of them (n even). */
    static String randomHex(int n) {
        byte[] b = new byte[n / 2];
        RANDOM.nextBytes(b);
        return hex(b);
    }

    static String hex(byte[] b) {
        char[] out = new char[b.length * 2];
        for (int i = 0; i < b.length; i++) {
            out[2 * i] = HEX[(b[i] >> 4) & 0xf];
            out[2 * i + 1] = HEX[b[i] & 0xf];
        }
        return new String(out);
    }

    static boolean isHex(String s, int n) {
        if (s.length() != n) {
            return false;
        }
        for (int i = 0; i < n; i++) {
            char c = s.charAt(i);
            if (!(c >= '0' && c <= '9' || c >= 'a' && c <= 'f')) {
                return false;
            }
        }
        return true;
    }

    /**
     * HMAC-SHA256(secret, "ticketing/1 SIDE SNONCE CNONCE") in lowercase hex;
     * side is "client" or "server".
     */
    static String proof(byte[] secret, String side, String snonce, String cnonce) {
        try {
            Mac mac = Mac.getInstance("HmacSHA256");
            mac.init(new SecretKeySpec(secret, "HmacSHA256"));
            return hex(mac.doFinal(ascii("ticketing/1 " + side + " " + snonce + " " + cnonce)));
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException("HmacSHA256 is missing from this JDK", e);
        }
    }

    /** Compares two proofs in constant time. */
    static boolean proofEquals(String a, String b) {
        return MessageDigest.isEqual(ascii(a), ascii(b));
    }
}
