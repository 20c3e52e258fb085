package example.ticketing.driver;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import example.ticketing.Servers;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * A session of the conformance driver, run as the runner runs it (its own
 * JVM, JSON lines on its stdin and stdout) against a real ticketingd.
 */
@Timeout(value = 30, unit = TimeUnit.SECONDS)
class ConformanceDriverTest {
    @TempDir
    Path dir;

    private BufferedReader out;
    private OutputStream in;

    private Map<?, ?> call(String line) throws Exception {
        in.write((line + "\n").getBytes(StandardCharsets.UTF_8));
        in.flush();
        String got = out.readLine();
        assertTrue(got != null, line + ": no reply");
        Map<?, ?> m = (Map<?, ?>) Json.parse(got);
        if (!"DRIVER_ERROR".equals(m.get("outcome"))) {
            assertTrue(m.get("elapsed_ms") instanceof Json.Num, line + ": no elapsed_ms in " + got);
        }
        return m;
    }

    private static void expect(Map<?, ?> m, String k, Object want) {
        Object got = m.get(k);
        Object norm = got instanceof Json.Num n ? n.text() : got == Json.NULL ? null : got;
        assertEquals(want == null ? null : want.toString(), norm == null ? null : norm.toString(), k + " in " + m);
    }

    @Test
    void session() throws Exception {
        Path secret = Servers.writeSecret(dir, "client.secret");
        try (Servers.Node node = Servers.standalone(dir, secret)) {
            String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
            Process p = new ProcessBuilder(List.of(java, "-cp", Servers.clientClassPath(),
                    ConformanceDriver.class.getName(), "--addrs", node.addr(), "--secret-file", secret.toString(),
                    "--owner", "drv-1", "--response-grace-ms", "1500"))
                    .redirectError(ProcessBuilder.Redirect.INHERIT).start();
            try {
                in = p.getOutputStream();
                out = new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.US_ASCII));
                expect(call("{\"op\":\"ping\"}"), "outcome", "ANSWERED");
                Map<?, ?> m = call("{\"op\":\"acquire\",\"key\":\"k1\",\"lease_ms\":30000,\"wait_ms\":0}");
                expect(m, "outcome", "ACQUIRED");
                expect(m, "reason", "");
                String tok = ((Json.Num) m.get("token")).text();
                m = call("{\"op\":\"acquire\",\"key\":\"k1\",\"lease_ms\":30000,\"wait_ms\":0}");
                expect(m, "outcome", "BUSY");
                expect(m, "token", 0);
                m = call("{\"op\":\"query\",\"key\":\"k1\"}");
                expect(m, "outcome", "ANSWERED");
                expect(m, "held", true);
                expect(m, "owner", "drv-1");
                expect(m, "token", tok);
                m = call("{\"op\":\"acquire\",\"key\":\"bad key\",\"lease_ms\":30000,\"wait_ms\":0}");
                expect(m, "outcome", "INVALID");
                expect(m, "reason", "key");
                m = call("{\"op\":\"release\",\"key\":\"k1\",\"token\":" + tok + "}");
                expect(m, "outcome", "RELEASED");
                expect(m, "resent", false);
                m = call("{\"op\":\"release\",\"key\":\"k1\",\"token\":" + tok + "}");
                expect(m, "outcome", "NOT_HELD");
                m = call("{\"op\":\"query\",\"key\":\"k1\"}");
                expect(m, "held", false);
                expect(m, "owner", null);
                expect(call("{\"op\":\"acquire\",\"key\":\"k1\"}"), "outcome", "DRIVER_ERROR");
                expect(call("{\"op\":\"release\",\"key\":\"k1\",\"token\":-1}"), "outcome", "DRIVER_ERROR");
                expect(call("{\"op\":\"launch\"}"), "outcome", "DRIVER_ERROR");
                expect(call("[1,2]"), "outcome", "DRIVER_ERROR");
                expect(call("{\"op\":\"sleep\",\"ms\":10}"), "outcome", "OK");
                m = call("{\"op\":\"slot\",\"key\":\"show-42:seat-17\"}");
                expect(m, "outcome", "OK");
                expect(m, "slot", 10735);
                expect(call("{\"op\":\"slot\"}"), "outcome", "DRIVER_ERROR");
                m = call("{\"op\":\"ring\"}");
                expect(m, "outcome", "ANSWERED");
                expect(m, "version", 0);
                expect(m, "body", "-");
                m = call("{\"op\":\"stats\"}");
                expect(m, "outcome", "OK");
                expect(m, "compensations", 0);
                expect(m, "indeterminate", 0);
                expect(m, "releases_queued", 0);
                expect(call("{\"op\":\"close\"}"), "outcome", "OK");
                assertTrue(p.waitFor(10, TimeUnit.SECONDS), "the driver did not exit after close");
                assertEquals(0, p.exitValue());
            } finally {
                p.destroyForcibly();
            }
        }
    }

    /** WRONG_GROUP replies carry the W line's slot and ring_version (docs/testing.md). */
    @Test
    void wrongGroupReplies() throws Exception {
        Path secret = Servers.writeSecret(dir, "client.secret");
        try (Servers.Node node = Servers.standalone(dir, secret, "--group", "sales-b")) {
            String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
            Process p = new ProcessBuilder(List.of(java, "-cp", Servers.clientClassPath(),
                    ConformanceDriver.class.getName(), "--addrs", node.addr(), "--secret-file", secret.toString(),
                    "--owner", "drv-2"))
                    .redirectError(ProcessBuilder.Redirect.INHERIT).start();
            try {
                in = p.getOutputStream();
                out = new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.US_ASCII));
                Map<?, ?> m = call("{\"op\":\"acquire\",\"key\":\"show-42\",\"lease_ms\":30000,\"wait_ms\":0}");
                expect(m, "outcome", "WRONG_GROUP");
                expect(m, "token", 0);
                expect(m, "slot", 11909);
                expect(m, "ring_version", 0);
                m = call("{\"op\":\"query\",\"key\":\"a\"}");
                expect(m, "outcome", "WRONG_GROUP");
                expect(m, "held", false);
                expect(m, "slot", 11404);
                m = call("{\"op\":\"release\",\"key\":\"show-42:seat-17\",\"token\":1}");
                expect(m, "outcome", "WRONG_GROUP");
                expect(m, "resent", false);
                expect(m, "slot", 10735);
                expect(m, "ring_version", 0);
                m = call("{\"op\":\"ping\"}");
                expect(m, "outcome", "ANSWERED");
                expect(m, "slot", null);
                m = call("{\"op\":\"stats\"}");
                expect(m, "releases_queued", 0);
                expect(call("{\"op\":\"close\"}"), "outcome", "OK");
                assertTrue(p.waitFor(10, TimeUnit.SECONDS), "the driver did not exit after close");
                assertEquals(0, p.exitValue());
            } finally {
                p.destroyForcibly();
            }
        }
    }

    @Test
    void badOptionsExit2() throws IOException, InterruptedException {
        String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
        Process p = new ProcessBuilder(java, "-cp", Servers.clientClassPath(),
                ConformanceDriver.class.getName(), "--addrs", "127.0.0.1:1", "--response-grace-ms", "-5")
                .redirectErrorStream(true).start();
        p.getInputStream().readAllBytes();
        assertTrue(p.waitFor(20, TimeUnit.SECONDS));
        assertEquals(2, p.exitValue());
    }
}
