package example.ticketing;

import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.SocketOption;
import java.net.StandardSocketOptions;
import java.nio.ByteBuffer;
import java.nio.channels.SelectionKey;
import java.nio.channels.SocketChannel;
import java.security.cert.CertificateException;
import java.security.cert.CertPathValidatorException;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import javax.net.ssl.SNIHostName;
import javax.net.ssl.SSLEngine;
import javax.net.ssl.SSLEngineResult;
import javax.net.ssl.SSLException;
import javax.net.ssl.SSLParameters;

/**
 * One connection of a client, owned by the I/O thread: connect, (TLS,)
 * banner, AUTH, OK with the server's proof checked, the probe {@code P 0},
 * then pipelined requests by id.
 */
final class Conn {
    static final int IDLE = 0;
    static final int RESOLVING = 1;
    static final int CONNECTING = 2;
    static final int TLS = 3;
    static final int BANNER = 4;
    static final int AUTH = 5;
    static final int PROBE = 6;
    static final int READY = 7;
    static final int RETIRED = 8;

    private static final int TLS_WRITE_MAX = 16384;
    private static final ByteBuffer EMPTY = ByteBuffer.allocate(0);

    private final Engine core;
    /** The group whose connection set it belongs to. */
    final Group group;
    final boolean extra;
    int index;
    int state = IDLE;
    Addr addr;
    long backoffNanos;
    long nextAttempt;
    private long attemptDeadline;
    boolean tlsRefused;

    private SocketChannel ch;
    private SelectionKey skey;
    private int interest;
    private InetSocketAddress target;
    private String snonce = "";
    private String cnonce = "";
    private boolean gotBytes;

    private SSLEngine tls;
    private ByteBuffer netIn;
    private ByteBuffer netOut;
    private ByteBuffer appIn;
    private boolean tlsSeen;
    private final ByteBuffer readBuf = ByteBuffer.allocate(64 * 1024);

    private final Bytes rbuf = new Bytes();
    /** Holds the stream bytes [outWritten, outAppended). */
    private final Bytes wbuf = new Bytes();
    private long outAppended;
    private long outWritten;
    /** QUEUED requests, in stream order. */
    private final ArrayDeque<Req> unsent = new ArrayDeque<>();
    final Map<Long, Req> slots = new HashMap<>();
    private long nextId = 1;

    Conn(Engine core, Group group, Addr addr, boolean extra) {
        this.core = core;
        this.group = group;
        this.addr = addr;
        this.extra = extra;
        this.backoffNanos = core.cfg.backoffMinNanos;
    }

    // ---- selector and teardown ----------------------------------------------------

    private void arm(int ops) {
        if (ch == null || (skey != null && interest == ops)) {
            return;
        }
        try {
            if (skey == null) {
                skey = ch.register(core.sel, ops, this);
            } else {
                skey.interestOps(ops);
            }
            interest = ops;
        } catch (IOException | RuntimeException e) {
            fail("selector: " + e, Engine.now());
        }
    }

    private void teardown() {
        if (ch != null) {
            if (skey != null) {
                skey.cancel();
            }
            try {
                ch.close();
            } catch (IOException e) {
                // closed either way
            }
        }
        ch = null;
        skey = null;
        interest = 0;
        tls = null;
        netIn = netOut = appIn = null;
        tlsSeen = false;
        gotBytes = false;
        rbuf.clear();
        wbuf.clear();
        outAppended = outWritten = 0;
        if (state == READY) {
            core.readyChange(-1);
        }
        state = IDLE;
        // Untouched requests first, in reverse, each put at the front of its
        // pending list: they keep their order and their place.
        List<Req> un = new ArrayList<>(unsent);
        unsent.clear();
        for (int i = un.size() - 1; i >= 0; i--) {
            Req r = un.get(i);
            slots.remove(r.wireId);
            core.onConnLost(r);
        }
        List<Req> rest = new ArrayList<>(slots.values());
        slots.clear();
        for (Req r : rest) {
            core.onConnLost(r);
        }
        nextId = 1;
    }

    /**
     * Closes the connection and schedules the next attempt. record: the
     * cause becomes the client's last error (auth: a refused handshake).
     */
    private void down(String why, boolean record, boolean refusedInTls, boolean auth, long now) {
        core.log(refusedInTls ? 0 : state == READY ? 1 : 3, "connection to " + addr + ": " + why);
        if (record) {
            core.recordError(addr + ": " + why, auth);
        }
        teardown();
        tlsRefused = refusedInTls;
        if (extra && group.leader != this) {
            state = RETIRED; // the leader moved on from this address
            return;
        }
        if (refusedInTls) {
            backoffNanos = core.cfg.backoffMaxNanos;
        }
        // Jitter: a delay in [3/4, 1] of the step.
        long lo = backoffNanos * 3 / 4;
        nextAttempt = now + lo + (long) (core.rng.nextDouble() * (backoffNanos - lo));
        backoffNanos = Math.min(backoffNanos * 2, core.cfg.backoffMaxNanos);
    }

    private void fail(String why, long now) {
        down(why, true, false, false, now);
    }

    void retire() {
        teardown();
        state = RETIRED;
    }

    // ---- connecting -----------------------------------------------------------------

    private void start(long now) {
        attemptDeadline = now + core.cfg.connectTimeoutNanos;
        if (addr.literal) {
            try {
                target = new InetSocketAddress(addr.literalAddress(), addr.port);
            } catch (IOException e) {
                fail("bad address: " + e.getMessage(), now);
                return;
            }
            connect(now);
            return;
        }
        state = RESOLVING;
        core.resolve(this, addr.host);
    }

    void lookupDone(String host, InetAddress result, long now) {
        if (state != RESOLVING || !host.equals(addr.host)) {
            return; // timed out or re-pointed meanwhile
        }
        if (result == null) {
            fail("host name lookup failed", now);
            return;
        }
        target = new InetSocketAddress(result, addr.port);
        connect(now);
    }

    private void connect(long now) {
        core.connectAttempts.incrementAndGet();
        try {
            ch = SocketChannel.open();
            ch.configureBlocking(false);
            ch.setOption(StandardSocketOptions.TCP_NODELAY, true);
            ch.setOption(StandardSocketOptions.SO_KEEPALIVE, true);
            keepalive(ch);
            if (ch.connect(target)) {
                connected(now);
            } else {
                state = CONNECTING;
                arm(SelectionKey.OP_CONNECT);
            }
        } catch (IOException e) {
            fail("connect: " + message(e), now);
        }
    }

    /** Keepalive probes after 10 s idle, every 3 s, 3 of them, where the JDK can set them. */
    private static void keepalive(SocketChannel c) throws IOException {
        setIfSupported(c, jdk.net.ExtendedSocketOptions.TCP_KEEPIDLE, 10);
        setIfSupported(c, jdk.net.ExtendedSocketOptions.TCP_KEEPINTERVAL, 3);
        setIfSupported(c, jdk.net.ExtendedSocketOptions.TCP_KEEPCOUNT, 3);
    }

    private static void setIfSupported(SocketChannel c, SocketOption<Integer> o, int v) throws IOException {
        if (c.supportedOptions().contains(o)) {
            c.setOption(o, v);
        }
    }

    private static String message(Exception e) {
        return e.getMessage() != null ? e.getMessage() : e.getClass().getSimpleName();
    }

    private void connected(long now) {
        gotBytes = false;
        if (core.cfg.tls == null) {
            state = BANNER;
            arm(SelectionKey.OP_READ);
            return;
        }
        String name = core.cfg.tlsServerName != null ? core.cfg.tlsServerName : addr.host;
        tls = core.cfg.tls.createSSLEngine(name, addr.port);
        tls.setUseClientMode(true);
        SSLParameters p = tls.getSSLParameters();
        p.setEndpointIdentificationAlgorithm("HTTPS");
        p.setProtocols(new String[] {"TLSv1.3", "TLSv1.2"});
        if (!Addr.isIpLiteral(name)) {
            try {
                p.setServerNames(List.of(new SNIHostName(name)));
            } catch (IllegalArgumentException e) {
                // a name SNI cannot carry: the certificate check still uses it
            }
        }
        tls.setSSLParameters(p);
        int pkt = tls.getSession().getPacketBufferSize();
        netIn = ByteBuffer.allocate(pkt * 2);
        netOut = ByteBuffer.allocate(pkt * 2);
        appIn = ByteBuffer.allocate(tls.getSession().getApplicationBufferSize() + 64);
        tlsSeen = false;
        state = TLS;
        try {
            tls.beginHandshake();
        } catch (SSLException e) {
            failTls(e, now);
            return;
        }
        arm(SelectionKey.OP_READ);
        tlsStep(now);
    }

    void timer(long now) {
        if (state == IDLE) {
            if (nextAttempt - now <= 0) {
                start(now);
            }
        } else if (state >= RESOLVING && state <= PROBE) {
            if (attemptDeadline - now > 0) {
                return;
            }
            if (state == TLS) {
                fail("TLS handshake timed out", now);
            } else if (state == BANNER && tls == null && !gotBytes) {
                fail("connected, but no banner from the server in time (a TLS port? then set tlsCaFile)", now);
            } else {
                fail("connect or handshake timed out", now);
            }
        }
    }

    /** When timer() has work to do, or Long.MAX_VALUE. */
    long nextTimer() {
        if (state == IDLE) {
            return nextAttempt;
        }
        if (state == READY || state == RETIRED) {
            return Long.MAX_VALUE;
        }
        return attemptDeadline;
    }

    // ---- output ---------------------------------------------------------------------

    boolean hasRoom() {
        return state == READY && slots.size() < core.cfg.inflightMax && wbuf.length() < Engine.WBUF_HIGH;
    }

    private void append(byte[] line) {
        wbuf.append(line);
        outAppended += line.length;
    }

    void queue(Req r, long now) {
        long id = nextId;
        while (id == Engine.PROBE_ID || slots.containsKey(id)) {
            id++;
        }
        nextId = id + 1;
        String owner = core.cfg.owner;
        byte[] line;
        switch (r.type) {
            case 'A': {
                // The wait left of the caller's budget (a resend after W too).
                r.waitSentMs = Resend.waitLeftMs(r.waitMs, r.submitNanos, now);
                line = Proto.acquireLine(id, r.key, owner, r.leaseMs, r.waitSentMs);
                break;
            }
            case 'R':
                line = Proto.releaseLine(id, r.key, owner, r.token);
                break;
            case 'Q':
                line = Proto.queryLine(id, r.key);
                break;
            case 'S':
                line = Proto.ringLine(id);
                r.ringPartsRead = 0; // the parts of an answer on another connection are gone with it
                r.ringBody = null;
                break;
            default:
                line = Proto.pingLine(id);
        }
        r.streamPos = outAppended;
        append(line);
        r.wire = Req.WIRE_QUEUED;
        r.conn = this;
        r.wireId = id;
        slots.put(id, r);
        unsent.addLast(r);
    }

    /** Turns an unwritten line into "X id ...": answered "E id command", no effect. */
    void neuter(Req r) {
        int off = (int) (r.streamPos - outWritten);
        if (r.wire != Req.WIRE_QUEUED || off < 0 || off >= wbuf.length() || wbuf.get(off) != (byte) r.type) {
            throw new IllegalStateException("ticketing: neuter of a line that is not there");
        }
        wbuf.set(off, (byte) 'X');
        r.neutered = true;
    }

    void dropSlot(Req r) {
        slots.remove(r.wireId);
        if (r.wire == Req.WIRE_QUEUED) {
            unsent.remove(r);
        }
        r.wire = Req.WIRE_NONE;
        r.conn = null;
    }

    private void markSent(long before) {
        while (!unsent.isEmpty() && unsent.peekFirst().streamPos < outWritten) {
            core.onSent(unsent.pollFirst(), before);
        }
    }

    void flush(long now) {
        if (ch == null || state == CONNECTING) {
            return;
        }
        if (wbuf.length() > 0 && state == READY) {
            // A close the server made since the last select is read first:
            // a request written after it would be lost to INDETERMINATE,
            // while unwritten it may still go to the next connection.
            read(now);
            if (ch == null) {
                return;
            }
        }
        if (tls != null) {
            flushTls(now);
            return;
        }
        while (wbuf.length() > 0) {
            long before = Engine.now(); // never later than the first byte leaving
            int n;
            try {
                n = ch.write(wbuf.view(wbuf.length()));
            } catch (IOException e) {
                fail("write: " + message(e), now);
                return;
            }
            if (n == 0) {
                arm(SelectionKey.OP_READ | SelectionKey.OP_WRITE);
                return;
            }
            wbuf.consume(n);
            outWritten += n;
            markSent(before);
        }
        arm(SelectionKey.OP_READ);
    }

    // ---- TLS (SSLEngine: "written" means "consumed by TLS") -----------------------------

    /** Sends pending ciphertext: true if all of it left. */
    private boolean tlsPush(long now) {
        netOut.flip();
        try {
            while (netOut.hasRemaining()) {
                if (ch.write(netOut) == 0) {
                    arm(SelectionKey.OP_READ | SelectionKey.OP_WRITE);
                    return false;
                }
            }
            return true;
        } catch (IOException e) {
            netOut.clear();
            fail("write: " + message(e), now);
            return false;
        } finally {
            if (netOut != null) {
                netOut.compact();
            }
        }
    }

    private void flushTls(long now) {
        while (true) {
            if (!tlsPush(now)) {
                return;
            }
            if (wbuf.length() == 0 || state == TLS) {
                break;
            }
            int n = Math.min(wbuf.length(), TLS_WRITE_MAX);
            long before = Engine.now();
            SSLEngineResult res;
            try {
                res = tls.wrap(wbuf.view(n), netOut);
            } catch (SSLException e) {
                failTls(e, now);
                return;
            }
            if (res.getStatus() == SSLEngineResult.Status.CLOSED) {
                fail("TLS closed", now);
                return;
            }
            int used = res.bytesConsumed();
            wbuf.consume(used);
            outWritten += used;
            markSent(before);
        }
        arm(SelectionKey.OP_READ);
    }

    /** Advances the TLS handshake, then reads plaintext into rbuf. */
    private void tlsStep(long now) {
        try {
            while (ch != null) {
                SSLEngineResult.HandshakeStatus hs = tls.getHandshakeStatus();
                if (hs == SSLEngineResult.HandshakeStatus.NEED_TASK) {
                    Runnable t;
                    while ((t = tls.getDelegatedTask()) != null) {
                        t.run();
                    }
                    continue;
                }
                if (hs == SSLEngineResult.HandshakeStatus.NEED_WRAP) {
                    if (netOut.position() > 0 && !tlsPush(now)) {
                        return; // the socket is full: the write wake-up comes back here
                    }
                    SSLEngineResult res = tls.wrap(EMPTY, netOut);
                    if (res.getStatus() == SSLEngineResult.Status.CLOSED) {
                        fail("closed by the server (TLS close_notify)", now);
                        return;
                    }
                    handshakeDone(res);
                    continue;
                }
                netIn.flip();
                SSLEngineResult res = tls.unwrap(netIn, appIn);
                netIn.compact();
                SSLEngineResult.Status st = res.getStatus();
                if (st == SSLEngineResult.Status.BUFFER_UNDERFLOW) {
                    if (!netIn.hasRemaining()) {
                        netIn = grow(netIn);
                    }
                    break;
                }
                if (st == SSLEngineResult.Status.BUFFER_OVERFLOW) {
                    appIn = grow(appIn);
                    continue;
                }
                if (st == SSLEngineResult.Status.CLOSED) {
                    fail("closed by the server (TLS close_notify)", now);
                    return;
                }
                handshakeDone(res);
                if (appIn.position() > 0) {
                    appIn.flip();
                    rbuf.append(appIn);
                    appIn.clear();
                    lines(now);
                }
                if (res.bytesConsumed() == 0 && res.bytesProduced() == 0
                        && tls != null && tls.getHandshakeStatus() != SSLEngineResult.HandshakeStatus.NEED_WRAP
                        && tls.getHandshakeStatus() != SSLEngineResult.HandshakeStatus.NEED_TASK) {
                    break;
                }
            }
        } catch (SSLException e) {
            failTls(e, now);
            return;
        }
        if (ch != null) {
            tlsPush(now);
        }
    }

    private void handshakeDone(SSLEngineResult res) {
        if (state == TLS && (res.getHandshakeStatus() == SSLEngineResult.HandshakeStatus.FINISHED
                || tls.getHandshakeStatus() == SSLEngineResult.HandshakeStatus.NOT_HANDSHAKING)) {
            state = BANNER;
            tlsRefused = false;
        }
    }

    private static ByteBuffer grow(ByteBuffer b) {
        ByteBuffer n = ByteBuffer.allocate(b.capacity() * 2);
        b.flip();
        n.put(b);
        return n;
    }

    private void failTls(SSLException e, long now) {
        String name = core.cfg.tlsServerName != null ? core.cfg.tlsServerName : addr.host;
        boolean cert = false;
        for (Throwable t = e; t != null; t = t.getCause()) {
            if (t instanceof CertificateException || t instanceof CertPathValidatorException) {
                cert = true;
            }
        }
        String why = cert
                ? "TLS handshake failed: " + message(e) + " (CA file " + core.cfg.tlsCaFile + ", server name " + name + ")"
                : "TLS failed: " + message(e);
        // Before the banner, every TLS failure is a refusal (often of our certificate).
        down(why, true, cert || state == TLS || state == BANNER, false, now);
    }

    // ---- input ------------------------------------------------------------------------------

    private void onBanner(String line, long now) {
        String[] w = line.split(" ", -1);
        if (w.length != 2 || !w[0].equals("TICKETING/1") || !Proto.isHex(w[1], 64)) {
            fail(line.startsWith("E ") ? "refused (E before the banner): " + clip(line)
                    : "not a Ticketing client port", now);
            return;
        }
        snonce = w[1];
        cnonce = Proto.newNonce();
        append(Proto.ascii("AUTH " + cnonce + " " + Proto.proof(core.cfg.secret, "client", snonce, cnonce) + "\n"));
        state = AUTH; // written by the loop's flush
    }

    private void onOk(String line, long now) {
        String[] w = line.split(" ", -1);
        if (w.length != 4 || !w[0].equals("OK") || !Proto.isHex(w[1], 64) || !Proto.isHex(w[2], 16)
                || !Proto.isHex(w[3], 32)) {
            boolean auth = line.equals("E - auth");
            if (auth) {
                core.authFailures.incrementAndGet();
                core.log(0, addr + " refused our proof: is the client secret right?");
            }
            down(auth ? "authentication refused (wrong secret?)" : "bad handshake answer", true, false, auth, now);
            return;
        }
        String expect = Proto.proof(core.cfg.secret, "server", snonce, cnonce);
        if (!Proto.proofEquals(expect, w[1])) {
            // This peer does not know our secret: nothing it says is believed.
            core.authFailures.incrementAndGet();
            down("wrong server proof (not our cluster, or another secret)", true, false, true, now);
            return;
        }
        core.handshakes.incrementAndGet();
        append(Proto.pingLine(Engine.PROBE_ID));
        state = PROBE; // flushed by the loop, after the lines already read
    }

    private static String clip(String s) {
        return s.length() > 40 ? s.substring(0, 40) : s;
    }

    private void onLine(String line, long now) {
        if (line.endsWith("\r")) {
            line = line.substring(0, line.length() - 1);
        }
        if (state == BANNER) {
            onBanner(line, now);
            return;
        }
        if (state == AUTH) {
            onOk(line, now);
            return;
        }
        Proto.Response rsp = Proto.parseResponse(line);
        if (rsp == null) {
            fail("protocol: malformed line", now);
        } else if (rsp.type == 'M') {
            group.onMoved(rsp.text, now);
            down("not the leader (M)", false, false, false, now);
        } else if (!rsp.hasId) {
            fail("server closed: E - " + clip(rsp.text), now);
        } else if (state == PROBE) {
            if (rsp.type == 'P' && rsp.id == Engine.PROBE_ID) {
                state = READY;
                backoffNanos = core.cfg.backoffMinNanos; // a good handshake resets it
                core.readyChange(1);
                core.log(2, "connected to " + addr + (extra ? " (hinted leader)" : group.seed ? " (configured)"
                        : " (" + group.label() + ")"));
            } else {
                fail("unexpected answer to the probe", now);
            }
        } else {
            Req r = slots.get(rsp.id);
            if (r == null) {
                return; // a forgotten zombie's answer
            }
            if (r.wire != Req.WIRE_SENT || !fits(r, rsp.type) || (r.ringPartsRead != 0 && rsp.type != 'S')) {
                fail("protocol: answer does not fit its request", now);
                return;
            }
            if (rsp.type == 'S' && !ringPart(r, rsp, now)) {
                return; // more parts to come, or the connection failed
            }
            dropSlot(r);
            core.onResponse(r, rsp, now);
        }
    }

    /**
     * One line of an S answer: true when the answer is complete (the
     * one-line form, or part n of n; r then holds the joined body). Parts
     * must come in order 1..n with the same n and version; anything else is
     * a protocol error that closes the connection (and false).
     */
    private boolean ringPart(Req r, Proto.Response rsp, long now) {
        if (rsp.parts == 1) {
            if (r.ringPartsRead != 0) {
                fail("protocol: a one-line ring answer in the middle of a multi-line one", now);
                return false;
            }
            r.ringVersion = rsp.version;
            r.ringBody = new StringBuilder(rsp.text);
            return true;
        }
        if (r.ringPartsRead == 0) {
            if (rsp.part != 1) {
                fail("protocol: ring answer part " + rsp.part + "/" + rsp.parts + " before part 1", now);
                return false;
            }
            r.ringParts = rsp.parts;
            r.ringVersion = rsp.version;
            r.ringBody = new StringBuilder(rsp.text);
        } else {
            if (rsp.part != r.ringPartsRead + 1 || rsp.parts != r.ringParts || rsp.version != r.ringVersion) {
                fail("protocol: ring answer part " + rsp.part + "/" + rsp.parts + " out of order (after "
                        + r.ringPartsRead + "/" + r.ringParts + ")", now);
                return false;
            }
            r.ringBody.append(';').append(rsp.text);
        }
        r.ringPartsRead = rsp.part;
        return rsp.part == rsp.parts;
    }

    private static boolean fits(Req r, char t) {
        if (r.neutered) {
            return t == 'E';
        }
        switch (r.type) {
            case 'A':
                return t == 'G' || t == 'T' || t == 'B' || t == 'E' || t == 'W';
            case 'R':
                return t == 'R' || t == 'N' || t == 'E' || t == 'W';
            case 'Q':
                return t == 'Q' || t == 'E' || t == 'W';
            case 'S':
                return t == 'S' || t == 'E';
            default:
                return t == 'P' || t == 'E';
        }
    }

    private void lines(long now) {
        while (ch != null) {
            int nl = rbuf.indexOf((byte) '\n');
            if (nl < 0) {
                if (rbuf.length() >= Proto.LINE_MAX) {
                    fail("protocol: line too long", now);
                }
                return;
            }
            if (nl + 1 > Proto.LINE_MAX) {
                fail("protocol: line too long", now);
                return;
            }
            String line = rbuf.text(nl);
            rbuf.consume(nl + 1);
            onLine(line, now);
        }
    }

    private void read(long now) {
        while (ch != null) {
            ByteBuffer dst = tls == null ? readBuf : netIn;
            if (!dst.hasRemaining()) {
                netIn = grow(netIn);
                dst = netIn;
            }
            int start = dst.position();
            int n;
            try {
                n = ch.read(dst);
            } catch (IOException e) {
                fail(message(e), now);
                return;
            }
            if (n == 0) {
                return;
            }
            if (n < 0) {
                if (tls != null && (state == TLS || state == BANNER)) {
                    down("closed by the server during or right after the TLS handshake "
                            + "(it may have refused our certificate)", true, true, false, now);
                } else if (state == BANNER) {
                    fail("closed by the server before its banner", now);
                } else {
                    fail("closed by the server", now);
                }
                return;
            }
            gotBytes = true;
            if (tls == null) {
                readBuf.flip();
                rbuf.append(readBuf);
                readBuf.clear();
                lines(now);
                continue;
            }
            if (!tlsSeen) {
                tlsSeen = true;
                byte first = netIn.get(start);
                if (first != 0x16) {
                    String why;
                    if (first == 0x15) {
                        why = "the server refused the TLS handshake (alert)";
                    } else {
                        StringBuilder txt = new StringBuilder();
                        for (int i = start; i < Math.min(start + 20, netIn.position()); i++) {
                            int c = netIn.get(i) & 0xff;
                            txt.append(c >= 32 && c < 127 ? (char) c : '.');
                        }
                        why = "the server does not speak TLS: it answered in plaintext (\"" + txt
                                + "...\"); enable TLS on it, or connect without tlsCaFile";
                    }
                    down(why, true, true, false, now);
                    return;
                }
            }
            tlsStep(now);
        }
    }

    /** The selector's readiness for this connection. */
    void event(int ops, long now) {
        if (ch == null) {
            return;
        }
        if (state == CONNECTING) {
            if ((ops & SelectionKey.OP_CONNECT) != 0) {
                try {
                    if (ch.finishConnect()) {
                        connected(now);
                    }
                } catch (IOException e) {
                    fail("connect: " + message(e), now);
                }
            }
            return;
        }
        if ((ops & SelectionKey.OP_READ) != 0) {
            read(now);
        }
        if (ch != null && (ops & SelectionKey.OP_WRITE) != 0) {
            flush(now);
        }
    }
}
