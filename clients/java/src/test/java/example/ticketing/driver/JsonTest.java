package example.ticketing.driver;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** The driver's JSON reader and writer. */
@Timeout(value = 10, unit = TimeUnit.SECONDS)
class JsonTest {
    @Test
    void readsWhatTheRunnerWrites() throws Exception {
        Object v = Json.parse(" {\"op\": \"acquire\", \"key\": \"a\\\"b\\u0041\", \"lease_ms\": 30000,"
                + " \"ok\": true, \"no\": null, \"list\": [1, -2.5e3, {}]} ");
        Map<?, ?> m = (Map<?, ?>) v;
        assertEquals("acquire", m.get("op"));
        assertEquals("a\"bA", m.get("key"));
        assertEquals(30000L, ((Json.Num) m.get("lease_ms")).unsigned());
        assertEquals(Boolean.TRUE, m.get("ok"));
        assertSame(Json.NULL, m.get("no"));
        List<?> list = (List<?>) m.get("list");
        assertEquals("-2.5e3", ((Json.Num) list.get(1)).text());
        assertNull(((Json.Num) list.get(1)).unsigned());
        assertEquals(-1L, ((Json.Num) Json.parse("18446744073709551615")).unsigned(), "u64 max");
        assertNull(((Json.Num) Json.parse("18446744073709551616")).unsigned());
    }

    @Test
    void refusesWhatIsNotJson() {
        for (String bad : new String[] {"{not json", "{\"a\":1,}", "{\"a\" 1}", "[1,2", "01", "1.", "\"\\x\"",
                "{\"a\":1,\"a\":2}", "tru", "{\"a\":1} x", "\"a\tb\"", ""}) {
            assertThrows(Json.ParseException.class, () -> Json.parse(bad), bad);
        }
    }

    @Test
    void writesAsciiJson() {
        assertEquals("{\"outcome\":\"OK\",\"n\":5,\"t\":18446744073709551615,\"b\":false,\"s\":\"q\\\"\\\\\\u0009\\u00e9\","
                + "\"none\":null}", Json.object("outcome", "OK", "n", 5, "t", Json.unsigned(-1L), "b", false,
                        "s", "q\"\\\t\u00e9", "none", null));
    }
}
