package example.ticketing.driver;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A small JSON reader and writer for the conformance driver (RFC 8259,
 * standard library only). Values read are {@link Map} (members in order),
 * {@link List}, {@link String}, {@link Num} (the literal's text, see
 * {@link Num#text}), {@link Boolean} and {@link #NULL}.
 */
final class Json {
    /** JSON's null, so that a member holding null differs from a missing one. */
    static final Object NULL = new Object() {
        @Override
        public String toString() {
            return "null";
        }
    };

    /** A number as written, for the caller to read exactly as the type it needs. */
    record Num(String text) {
        /** The value as an unsigned 64-bit integer, or null if it is not one. */
        Long unsigned() {
            if (text.isEmpty() || text.charAt(0) == '-' || text.indexOf('.') >= 0
                    || text.indexOf('e') >= 0 || text.indexOf('E') >= 0) {
                return null;
            }
            try {
                return Long.parseUnsignedLong(text);
            } catch (NumberFormatException e) {
                return null;
            }
        }
    }

    /** Not JSON, with where and why. */
    static final class ParseException extends Exception {
        private static final long serialVersionUID = 1L;

        ParseException(String message) {
            super(message);
        }
    }

    private static final int DEPTH_MAX = 64;

    private final String s;
    private int p;

    private Json(String s) {
        this.s = s;
    }

    /** Parses one JSON text: a value with nothing but white space around it. */
    static Object parse(String text) throws ParseException {
        Json j = new Json(text);
        j.ws();
        Object v = j.value(0);
        j.ws();
        if (j.p != text.length()) {
            throw j.error("bytes after the value");
        }
        return v;
    }

    private ParseException error(String why) {
        return new ParseException(why + " at offset " + p);
    }

    private void ws() {
        while (p < s.length()) {
            char c = s.charAt(p);
            if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
                return;
            }
            p++;
        }
    }

    private Object value(int depth) throws ParseException {
        if (depth > DEPTH_MAX) {
            throw error("nested too deep");
        }
        if (p >= s.length()) {
            throw error("a value expected");
        }
        char c = s.charAt(p);
        switch (c) {
            case '{':
                return object(depth);
            case '[':
                return array(depth);
            case '"':
                return string();
            case 't':
                return word("true", Boolean.TRUE);
            case 'f':
                return word("false", Boolean.FALSE);
            case 'n':
                return word("null", NULL);
            default:
                if (c == '-' || (c >= '0' && c <= '9')) {
                    return number();
                }
                throw error("unexpected character '" + c + "'");
        }
    }

    private Object word(String w, Object v) throws ParseException {
        if (!s.startsWith(w, p)) {
            throw error("bad literal");
        }
        p += w.length();
        return v;
    }

    private Map<String, Object> object(int depth) throws ParseException {
        Map<String, Object> m = new LinkedHashMap<>();
        p++; // {
        ws();
        if (p < s.length() && s.charAt(p) == '}') {
            p++;
            return m;
        }
        while (true) {
            ws();
            if (p >= s.length() || s.charAt(p) != '"') {
                throw error("a member name expected");
            }
            String name = string();
            ws();
            if (p >= s.length() || s.charAt(p) != ':') {
                throw error("':' expected");
            }
            p++;
            ws();
            if (m.put(name, value(depth + 1)) != null) {
                throw error("duplicate member " + name);
            }
            ws();
            if (p < s.length() && s.charAt(p) == ',') {
                p++;
                continue;
            }
            if (p < s.length() && s.charAt(p) == '}') {
                p++;
                return m;
            }
            throw error("',' or '}' expected");
        }
    }

    private List<Object> array(int depth) throws ParseException {
        List<Object> a = new ArrayList<>();
        p++; // [
        ws();
        if (p < s.length() && s.charAt(p) == ']') {
            p++;
            return a;
        }
        while (true) {
            ws();
            a.add(value(depth + 1));
            ws();
            if (p < s.length() && s.charAt(p) == ',') {
                p++;
                continue;
            }
            if (p < s.length() && s.charAt(p) == ']') {
                p++;
                return a;
            }
            throw error("',' or ']' expected");
        }
    }

    private String string() throws ParseException {
        StringBuilder b = new StringBuilder();
        p++; // "
        while (true) {
            if (p >= s.length()) {
                throw error("unterminated string");
            }
            char c = s.charAt(p++);
            if (c == '"') {
                return b.toString();
            }
            if (c < 0x20) {
                throw error("a control character in a string");
            }
            if (c != '\\') {
                b.append(c);
                continue;
            }
            if (p >= s.length()) {
                throw error("unterminated escape");
            }
            char e = s.charAt(p++);
            switch (e) {
                case '"', '\\', '/' -> b.append(e);
                case 'b' -> b.append('\b');
                case 'f' -> b.append('\f');
                case 'n' -> b.append('\n');
                case 'r' -> b.append('\r');
                case 't' -> b.append('\t');
                case 'u' -> {
                    if (p + 4 > s.length()) {
                        throw error("bad \\u escape");
                    }
                    int v = 0;
                    for (int i = 0; i < 4; i++) {
                        int d = Character.digit(s.charAt(p + i), 16);
                        if (d < 0) {
                            throw error("bad \\u escape");
                        }
                        v = v * 16 + d;
                    }
                    p += 4;
                    b.append((char) v);
                }
                default -> throw error("bad escape \\" + e);
            }
        }
    }

    private Num number() throws ParseException {
        int start = p;
        if (s.charAt(p) == '-') {
            p++;
        }
        if (p < s.length() && s.charAt(p) == '0') {
            p++;
        } else if (!digits()) {
            throw error("bad number");
        }
        if (p < s.length() && s.charAt(p) == '.') {
            p++;
            if (!digits()) {
                throw error("bad number");
            }
        }
        if (p < s.length() && (s.charAt(p) == 'e' || s.charAt(p) == 'E')) {
            p++;
            if (p < s.length() && (s.charAt(p) == '+' || s.charAt(p) == '-')) {
                p++;
            }
            if (!digits()) {
                throw error("bad number");
            }
        }
        return new Num(s.substring(start, p));
    }

    private boolean digits() {
        int start = p;
        while (p < s.length() && s.charAt(p) >= '0' && s.charAt(p) <= '9') {
            p++;
        }
        return p > start;
    }

    // ---- writing ----------------------------------------------------------------------

    /** Writes a JSON object, one member per (name, value) pair, in order; pure ASCII. */
    static String object(Object... pairs) {
        StringBuilder b = new StringBuilder("{");
        for (int i = 0; i + 1 < pairs.length; i += 2) {
            if (i > 0) {
                b.append(',');
            }
            quote(b, (String) pairs[i]);
            b.append(':');
            Object v = pairs[i + 1];
            if (v == null || v == NULL) {
                b.append("null");
            } else if (v instanceof String str) {
                quote(b, str);
            } else if (v instanceof Num n) {
                b.append(n.text());
            } else {
                b.append(v); // Boolean, Integer, Long (signed values only)
            }
        }
        return b.append('}').toString();
    }

    /** An unsigned 64-bit integer as a JSON number. */
    static Num unsigned(long v) {
        return new Num(Long.toUnsignedString(v));
    }

    private static void quote(StringBuilder b, String s) {
        b.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c == '"' || c == '\\') {
                b.append('\\').append(c);
            } else if (c < 0x20 || c > 0x7e) {
                b.append(String.format("\\u%04x", (int) c));
            } else {
                b.append(c);
            }
        }
        b.append('"');
    }
}
