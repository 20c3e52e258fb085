package example.ticketing;

import java.util.List;
import java.util.Objects;

/**
 * The ring a group's leader has applied, as {@code S} answers it: which
 * group owns which slots, and where each group's nodes take clients. It is
 * not a linearizable read; a ring is only ever replaced by a newer one.
 *
 * @param version the ring's version, an unsigned 64-bit number (0: no ring
 *     yet); compare with {@link Long#compareUnsigned}
 * @param body the ranges joined by {@code ;} in increasing order, each
 *     {@code <first>-<last>=<group>@<addr>[,<addr>...]}; {@code "-"} when
 *     the ring has no ranges
 */
public record Ring(long version, String body) {
    public Ring {
        Objects.requireNonNull(body, "body");
    }

    /** The version in decimal, as the server writes it (unsigned). */
    public String versionString() {
        return Long.toUnsignedString(version);
    }

    /** The ranges of the body, one string each; empty when the body is {@code "-"}. */
    public List<String> ranges() {
        return body.equals("-") ? List.of() : List.of(body.split(";"));
    }
}
