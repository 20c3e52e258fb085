package example.ticketing;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;

/** A growable byte queue: appended at the end, consumed from the front. */
final class Bytes {
    private byte[] data = new byte[512];
    private int start;
    private int end;

    int length() {
        return end - start;
    }

    byte get(int i) {
        return data[start + i];
    }

    void set(int i, byte b) {
        data[start + i] = b;
    }

    void append(byte[] b) {
        append(b, 0, b.length);
    }

    void append(byte[] b, int off, int len) {
        room(len);
        System.arraycopy(b, off, data, end, len);
        end += len;
    }

    /** Appends what src holds between its position and limit. */
    void append(ByteBuffer src) {
        int len = src.remaining();
        room(len);
        src.get(data, end, len);
        end += len;
    }

    void consume(int n) {
        start += n;
        if (start == end) {
            start = end = 0;
        }
    }

    void clear() {
        start = end = 0;
    }

    /** The first n bytes, as a buffer over this one (valid until it changes). */
    ByteBuffer view(int n) {
        return ByteBuffer.wrap(data, start, n);
    }

    int indexOf(byte b) {
        for (int i = start; i < end; i++) {
            if (data[i] == b) {
                return i - start;
            }
        }
        return -1;
    }

    /** The first n bytes as text, one char per byte. */
    String text(int n) {
        return new String(data, start, n, StandardCharsets.ISO_8859_1);
    }

    private void room(int len) {
        if (end + len <= data.length) {
            return;
        }
        int used = end - start;
        byte[] to = used + len <= data.length / 2 ? data : new byte[Math.max(data.length * 2, used + len)];
        System.arraycopy(data, start, to, 0, used);
        data = to;
        start = 0;
        end = used;
    }
}
