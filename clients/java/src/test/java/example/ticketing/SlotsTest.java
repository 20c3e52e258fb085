package example.ticketing;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** The slot of a key, against the protocol's test vectors (groups and slots). */
@Timeout(value = 10, unit = TimeUnit.SECONDS)
class SlotsTest {
    @Test
    void protocolTestVectors() {
        assertEquals(16384, Slots.SLOTS);
        assertEquals(11404, Slots.slot("a"));
        assertEquals(11909, Slots.slot("show-42"));
        assertEquals(10735, Slots.slot("show-42:seat-17"));
        assertEquals(10740, Slots.slot("inventory/2026-12-24/hall-B"));
        assertEquals(9293, Slots.slot("~".repeat(Proto.KEY_MAX)), "250 x ~");
    }

    @Test
    void alwaysASlotAndAFunctionOfEveryByte() {
        assertNotEquals(Slots.slot("show-42"), Slots.slot("show-43"));
        for (int n = 0; n < 1000; n++) {
            int s = Slots.slot("k" + n);
            assertTrue(s >= 0 && s < Slots.SLOTS, "slot of k" + n + ": " + s);
        }
        assertThrows(NullPointerException.class, () -> Slots.slot(null));
    }
}
