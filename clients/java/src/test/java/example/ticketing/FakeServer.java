package example.ticketing;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Function;

/**
 * A scripted Ticketing server on 127.0.0.1 for answers a real ticketingd
 * cannot be made to give (a ring in several parts, parts out of order): it
 * does the real handshake with the client's secret (so the client believes
 * it), answers the probe {@code P 0}, and answers every other request line
 * with the lines the script gives for it (none: no answer). It records
 * every request line it reads, and counts its connections.
 */
final class FakeServer implements AutoCloseable {
    private final ServerSocket listener;
    private final byte[] secret;
    private final Function<String, List<String>> script;
    private final Thread acceptor;
    private final List<Socket> open = new CopyOnWriteArrayList<>();
    final List<String> lines = new CopyOnWriteArrayList<>();
    final AtomicInteger accepted = new AtomicInteger();

    FakeServer(byte[] secret, Function<String, List<String>> script) throws IOException {
        this.secret = secret.clone();
        this.script = script;
        listener = new ServerSocket(0, 16, InetAddress.getLoopbackAddress());
        acceptor = new Thread(this::acceptLoop, "fake-ticketingd");
        acceptor.setDaemon(true);
        acceptor.start();
    }

    String addr() {
        return "127.0.0.1:" + listener.getLocalPort();
    }

    /** The request lines read so far whose command letter is type. */
    List<String> linesOf(char type) {
        List<String> out = new ArrayList<>();
        for (String l : lines) {
            if (!l.isEmpty() && l.charAt(0) == type) {
                out.add(l);
            }
        }
        return out;
    }

    private void acceptLoop() {
        while (!listener.isClosed()) {
            Socket s;
            try {
                s = listener.accept();
            } catch (IOException e) {
                return;
            }
            accepted.incrementAndGet();
            open.add(s);
            Thread t = new Thread(() -> serve(s), "fake-ticketingd-conn");
            t.setDaemon(true);
            t.start();
        }
    }

    private void serve(Socket s) {
        try (s) {
            OutputStream out = s.getOutputStream();
            BufferedReader in = new BufferedReader(new InputStreamReader(s.getInputStream(), StandardCharsets.US_ASCII));
            String snonce = Proto.newNonce();
            write(out, List.of("TICKETING/1 " + snonce));
            String auth = in.readLine();
            String[] w = auth == null ? new String[0] : auth.split(" ");
            if (w.length != 3 || !w[0].equals("AUTH")) {
                return;
            }
            write(out, List.of("OK " + Proto.proof(secret, "server", snonce, w[1]) + " " + Proto.randomHex(16) + " "
                    + Proto.randomHex(32)));
            String line;
            while ((line = in.readLine()) != null) {
                if (line.equals("P 0")) {
                    write(out, List.of("P 0"));
                    continue;
                }
                lines.add(line);
                List<String> answer = script.apply(line);
                if (answer != null) {
                    write(out, answer);
                }
            }
        } catch (IOException e) {
            // the client closed the connection: done with it
        }
    }

    private static void write(OutputStream out, List<String> answer) throws IOException {
        StringBuilder b = new StringBuilder();
        for (String a : answer) {
            b.append(a).append('\n');
        }
        out.write(b.toString().getBytes(StandardCharsets.US_ASCII));
        out.flush();
    }

    /** The id of a request line ("X <id> ..."). */
    static String id(String line) {
        return line.split(" ")[1];
    }

    @Override
    public void close() throws IOException {
        listener.close();
        for (Socket s : open) {
            s.close();
        }
        try {
            acceptor.join(2000);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
