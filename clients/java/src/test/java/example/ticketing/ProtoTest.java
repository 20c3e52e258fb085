package example.ticketing;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** The line protocol's pure functions, against docs/protocol.md. */
@Timeout(value = 10, unit = TimeUnit.SECONDS)
class ProtoTest {
    /** The worked example of docs/protocol.md, section 1. */
    @Test
    void handshakeProofsMatchTheWorkedExample() {
        byte[] secret = "example-client-secret-0123456789".getBytes(StandardCharsets.US_ASCII);
        String sn = "59c022321689867600b1211b5c80e2eda6ca1235b91e02f2b9150f0918680045";
        String cn = "37af00b6a42a4ad8f1cbfbf3636ed14b817a7515213b8c1ad833e90d9894f0d6";
        assertEquals("bc8a1c901757cf0e9f28f83feb40e8faff6d7cf324e3ba88af9b8ad129863415",
                Proto.proof(secret, "client", sn, cn));
        assertEquals("492a324b111fc45168daee57e6b43c5a86004384c3dcff0c5b53c1aeec164bf7",
                Proto.proof(secret, "server", sn, cn));
        assertTrue(Proto.proofEquals(Proto.proof(secret, "server", sn, cn),
                "492a324b111fc45168daee57e6b43c5a86004384c3dcff0c5b53c1aeec164bf7"));
        assertFalse(Proto.proofEquals(Proto.proof(secret, "client", sn, cn),
                "492a324b111fc45168daee57e6b43c5a86004384c3dcff0c5b53c1aeec164bf7"));
    }

    @Test
    void requestLines() {
        assertEquals("A 2 show-42 alice 30000 0\n",
                new String(Proto.acquireLine(2, "show-42", "alice", 30000, 0), StandardCharsets.US_ASCII));
        assertEquals("R 6 show-42 alice 18446744073709551615\n",
                new String(Proto.releaseLine(6, "show-42", "alice", -1L), StandardCharsets.US_ASCII));
        assertEquals("Q 5 show-42\n", new String(Proto.queryLine(5, "show-42"), StandardCharsets.US_ASCII));
        assertEquals("P 0\n", new String(Proto.pingLine(0), StandardCharsets.US_ASCII));
    }

    @Test
    void responsesFollowTheServersGrammar() {
        Proto.Response g = Proto.parseResponse("G 2 1796223722315317");
        assertEquals('G', g.type);
        assertEquals(2, g.id);
        assertEquals(1796223722315317L, g.token);
        assertEquals(-1L, Proto.parseResponse("G 1 18446744073709551615").token, "u64 tokens stay exact");
        Proto.Response q = Proto.parseResponse("Q 5 alice 1796223722315317 1");
        assertEquals("alice", q.owner);
        assertEquals(1, q.waiters);
        assertEquals("-", Proto.parseResponse("Q 5 - 9 0").owner, "an owner named -");
        Proto.Response free = Proto.parseResponse("Q 5 - 0 0");
        assertNull(free.owner);
        assertEquals(0, free.token);
        Proto.Response e = Proto.parseResponse("E 7 command");
        assertTrue(e.hasId);
        assertEquals("command", e.text);
        Proto.Response conn = Proto.parseResponse("E - overload");
        assertFalse(conn.hasId);
        assertEquals("127.0.0.1:7410", Proto.parseResponse("M 127.0.0.1:7410").text);
        assertNull(Proto.parseResponse("M -").text);
        assertEquals('T', Proto.parseResponse("T 4\r").type);
        for (String bad : new String[] {"", "G", "G 1", "G 1 0", "G 01 5", "G 1 5 6", "P  1", "P 1 ",
                "X 1", "Q 1 - 0 3", "Q 1 a 0 1", "T -", "M nowhere", "M a:0", "M a:65536",
                "G 1 18446744073709551616", "E 1 two words", "GG 1"}) {
            assertNull(Proto.parseResponse(bad), bad);
        }
    }

    /** W: docs/protocol.md section 10, "W (wrong group)". */
    @Test
    void wrongGroupAnswers() {
        Proto.Response w = Proto.parseResponse("W 8 11909 3");
        assertEquals('W', w.type);
        assertTrue(w.hasId);
        assertEquals(8, w.id);
        assertEquals(11909, w.slot);
        assertEquals(3, w.version);
        assertEquals(0, Proto.parseResponse("W 1 0 0").slot);
        assertEquals(0, Proto.parseResponse("W 1 0 0").version, "0: the group has no ring");
        Proto.Response top = Proto.parseResponse("W 18446744073709551615 16383 18446744073709551615\r");
        assertEquals(-1L, top.id);
        assertEquals(16383, top.slot);
        assertEquals(-1L, top.version, "a u64 version stays exact");
        for (String bad : new String[] {"W 1", "W 1 5", "W 1 5 6 7", "W 1 16384 0", "W 1 99999 0", "W 1 -1 0",
                "W 1 05 0", "W 1 5 01", "W 1 5 -1", "W 1 5 +1", "W 1 5 18446744073709551616", "W - 5 0", "W x 5 0",
                "W 1  5 0", "W 1 5 0 ", "W 1 5 3a", "WW 1 5 0"}) {
            assertNull(Proto.parseResponse(bad), bad);
        }
        assertEquals("S 7\n", new String(Proto.ringLine(7), StandardCharsets.US_ASCII));
    }

    /** S: docs/protocol.md section 10, "S (the ring)": the one-line form and the parts. */
    @Test
    void ringAnswers() {
        Proto.Response one = Proto.parseResponse("S 7 3 0-8191=sales-a@10.0.0.1:7400,10.0.0.2:7400;"
                + "8192-16383=sales-b@10.0.1.1:7400");
        assertEquals('S', one.type);
        assertEquals(7, one.id);
        assertEquals(3, one.version);
        assertEquals(1, one.part);
        assertEquals(1, one.parts);
        assertEquals("0-8191=sales-a@10.0.0.1:7400,10.0.0.2:7400;8192-16383=sales-b@10.0.1.1:7400", one.text);
        Proto.Response none = Proto.parseResponse("S 7 0 -");
        assertEquals(0, none.version);
        assertEquals("-", none.text);
        Proto.Response part = Proto.parseResponse("S 9 18446744073709551615 2/3 100-199=b@h:2");
        assertEquals(-1L, part.version);
        assertEquals(2, part.part);
        assertEquals(3, part.parts);
        assertEquals("100-199=b@h:2", part.text);
        assertEquals(1024, Proto.parseResponse("S 9 4 1024/1024 x").parts);
        for (String bad : new String[] {"S 7", "S 7 3", "S 7 03 -", "S 7 -1 -", "S 7 18446744073709551616 -",
                "S - 3 -", "S 7 3 - -", "S 7 3 0/3 x", "S 7 3 4/3 x", "S 7 3 1/1 x", "S 7 3 2/1 x", "S 7 3 1/ x",
                "S 7 3 /2 x", "S 7 3 1-2 x", "S 7 3 01/2 x", "S 7 3 1/02 x", "S 7 3 1/2/3 x", "S 7 3 a/2 x",
                "S 7 3 1/2 x y", "S 7 3 1/1025 x", "S 7 3 1/18446744073709551617 x", "S 7 3 caf\u00e9",
                "S 7 3 a\tb", "S 7 3  -", "S 7 3 - ", "S 7 3 1/2  x"}) {
            assertNull(Proto.parseResponse(bad), bad);
        }
    }

    @Test
    void fieldLimits() {
        assertTrue(Proto.keyOk("k".repeat(250)));
        assertFalse(Proto.keyOk("k".repeat(251)));
        assertFalse(Proto.keyOk(""));
        assertFalse(Proto.keyOk("a b"));
        assertFalse(Proto.keyOk("caf\u00e9"));
        assertTrue(Proto.ownerOk("o".repeat(64)));
        assertFalse(Proto.ownerOk("o".repeat(65)));
        assertNull(Proto.parseU64("-1"));
        assertNull(Proto.parseU64("+1"));
        assertEquals(0L, Proto.parseU64("0"));
    }

    @Test
    void addresses() {
        Addr a = Addr.parseOrNull("127.0.0.1:7400");
        assertNotNull(a);
        assertTrue(a.literal);
        assertEquals(7400, a.port);
        Addr h = Addr.parseOrNull("node-1.example:7400");
        assertFalse(h.literal);
        assertEquals("node-1.example", h.host);
        Addr v6 = Addr.parseOrNull("[::1]:7400");
        assertTrue(v6.literal);
        assertEquals("::1", v6.host);
        for (String bad : new String[] {"host", ":7400", "host:", "host:0", "host:65536", "::1:7400", "[::1]7400",
                "[nothost]:1", "a b:1"}) {
            assertNull(Addr.parseOrNull(bad), bad);
        }
    }
}
