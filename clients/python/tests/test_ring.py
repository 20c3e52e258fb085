"""SPEC 15's answers: W (wrong group) and S (the ring, one line or parts),
parsed strictly, put together, and the outcomes they give."""
import os
import secrets
import shutil
import socket
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import ticketing  # noqa: E402
from ticketing import _proto as P  # noqa: E402
from tests.support import Server  # noqa: E402


def wait_for(pred, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.02)
    return pred()


class ParseWrongGroup(unittest.TestCase):
    def test_good(self):
        for line, want in ((b"W 8 11909 3", (8, 11909, 3)), (b"W 1 0 0", (1, 0, 0)),
                           (b"W 18446744073709551615 16383 18446744073709551615",
                            (P.U64_MAX, 16383, P.U64_MAX)),
                           (b"W 2 5 7\r", (2, 5, 7))):
            r = P.parse_response(line)
            self.assertIsNotNone(r, line)
            self.assertEqual((r.type, r.id, r.slot, r.version), ("W",) + want, line)

    def test_bad(self):
        for line in (b"W 8 11909", b"W 8 11909 3 4", b"W 8 16384 3", b"W 8 011909 3",
                     b"W 8 11909 03", b"W 8 -1 3", b"W 8 11909 18446744073709551616",
                     b"W - 11909 3", b"W 8  11909 3", b"W 8 11909 3 ", b"W 8 1a 3"):
            self.assertIsNone(P.parse_response(line), line)


class ParseRing(unittest.TestCase):
    def test_good(self):
        body = b"0-8191=sales-a@10.0.0.1:7400,10.0.0.2:7400;8192-16383=sales-b@10.0.1.1:7400"
        for line, want in ((b"S 7 0 -", (0, 1, 1, "-")),
                           (b"S 7 3 " + body, (3, 1, 1, body.decode())),
                           (b"S 7 3 -", (3, 1, 1, "-")),
                           (b"S 7 4 1/3 0-9=a@h:1", (4, 1, 3, "0-9=a@h:1")),
                           (b"S 7 4 3/3 20-29=c@h:3", (4, 3, 3, "20-29=c@h:3")),
                           (b"S 7 4 1024/1024 x", (4, 1024, 1024, "x"))):
            r = P.parse_response(line)
            self.assertIsNotNone(r, line)
            self.assertEqual((r.type, r.id, r.version, r.part, r.parts, r.text),
                             ("S", 7) + want, line)

    def test_bad(self):
        for line in (b"S 7", b"S 7 3", b"S 7 0 0-9=a@h:1", b"S 7 03 -", b"S 7 3 1/3 a b",
                     b"S 7 3 0/3 x", b"S 7 3 4/3 x", b"S 7 3 1/1 x", b"S 7 3 1/1025 x",
                     b"S 7 3 1/03 x", b"S 7 3 1-3 x", b"S 7 3 1/3/3 x", b"S 7 3 /3 x",
                     b"S 7 0 1/2 x", b"S 7 3 1/2 -", b"S 7 3 \x01x", b"S 7 3 caf\xc3\xa9",
                     b"S - 3 -", b"S 7 3  -"):
            self.assertIsNone(P.parse_response(line), line)


class FakeServer:
    """Speaks the handshake with the right proof, answers the probe, and
    answers every other line with answer(line) (a list of lines). Records
    the request lines, counts connections and the client's closes."""

    def __init__(self, answer):
        self.answer = answer
        self.secret = b"fake-server-secret-0123456789"
        self.tmp = tempfile.mkdtemp(prefix="tk-py-fake-")
        self.secret_file = os.path.join(self.tmp, "client.secret")
        with open(self.secret_file, "wb") as f:
            f.write(self.secret)
        self.mu = threading.Lock()
        self.lines, self.conns, self.eofs = [], 0, 0
        self.ls = socket.socket()
        self.ls.bind(("127.0.0.1", 0))
        self.ls.listen(8)
        self.addr = "127.0.0.1:%d" % self.ls.getsockname()[1]
        self.stopped = False
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            try:
                s, _ = self.ls.accept()
            except OSError:
                return
            threading.Thread(target=self.serve, args=(s,), daemon=True).start()

    def serve(self, s):
        with self.mu:
            self.conns += 1
        with s:
            f = s.makefile("rb")
            snonce = secrets.token_hex(32)
            try:
                s.sendall(b"TICKETING/1 %s\n" % snonce.encode())
                w = f.readline().decode().split()
                if len(w) != 3 or w[0] != "AUTH" or w[2] != P.proof(self.secret, "client",
                                                                      snonce, w[1]):
                    return
                s.sendall(("OK %s 0123456789abcdef %s\n" % (
                    P.proof(self.secret, "server", snonce, w[1]), "0" * 32)).encode())
            except OSError:  # the client closed it during the handshake
                return
            while True:
                try:
                    line = f.readline()
                except OSError:
                    line = b""
                if not line:
                    with self.mu:
                        self.eofs += 1
                    return
                line = line.rstrip(b"\n").decode()
                if line == "P 0":
                    s.sendall(b"P 0\n")
                    continue
                with self.mu:
                    self.lines.append(line)
                out = "".join(a + "\n" for a in self.answer(line))
                try:
                    s.sendall(out.encode())
                except OSError:
                    return

    def seen(self):
        with self.mu:
            return list(self.lines), self.conns, self.eofs

    def stop(self):
        self.ls.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


def _id(line):
    return line.split()[1]


class RingAnswers(unittest.TestCase):
    def test_three_parts_joined_then_one_line(self):
        calls = []

        def answer(line):
            rid = _id(line)
            calls.append(line)
            if len(calls) == 1:
                return [f"S {rid} 9 1/3 0-99=a@h:1", f"S {rid} 9 2/3 100-199=b@h:2",
                        f"S {rid} 9 3/3 200-16383=c@h:3,h:4"]
            return [f"S {rid} 10 0-16383=a@h:1"]
        fake = FakeServer(answer)
        try:
            with ticketing.Client(fake.addr, secret_file=fake.secret_file) as c:
                ring = c.ring()
                self.assertEqual((ring.version, ring.body),
                                 (9, "0-99=a@h:1;100-199=b@h:2;200-16383=c@h:3,h:4"))
                self.assertEqual(ring.ranges, ["0-99=a@h:1", "100-199=b@h:2",
                                               "200-16383=c@h:3,h:4"])
                res = c.ring_result()
                self.assertEqual((res.outcome, res.ring_version, res.body),
                                 ("ANSWERED", 10, "0-16383=a@h:1"))
                self.assertEqual(len(calls), 2)
                self.assertTrue(all(line.startswith("S ") and len(line.split()) == 2
                                    for line in calls), calls)
        finally:
            fake.stop()

    def test_part_out_of_order_drops_the_connection(self):
        fake = FakeServer(lambda line: [f"S {_id(line)} 9 1/3 0-99=a@h:1",
                                        f"S {_id(line)} 9 3/3 200-16383=c@h:3"])
        try:
            with ticketing.Client(fake.addr, secret_file=fake.secret_file,
                                  request_timeout_ms=800, backoff_min_ms=20,
                                  backoff_max_ms=50) as c:
                res = c.ring_result()
                self.assertEqual(res.outcome, "UNAVAILABLE")
                self.assertEqual(res.body, "")
                self.assertIn("ring part 3/3 out of order", c.last_error())
                with self.assertRaises(ticketing.Unavailable):
                    c.ring()
            self.assertTrue(wait_for(lambda: fake.seen()[2] >= 1))  # the client closed it
            lines, conns, _ = fake.seen()
            # A read is safe to repeat: it went out again on a new connection.
            self.assertGreaterEqual(len(lines), 2)
            self.assertGreaterEqual(conns, 2)
        finally:
            fake.stop()

    def test_ring_parts_refused(self):
        # Each sequence breaks the order (1..n, the same n and version); the
        # answer never completes from it.
        for parts in (["2/3 x"], ["1/3 x", "1/3 y"], ["1/3 x", "2/4 y", "4/4 z"],
                      ["1/2 x", "0-16383=a@h:1"]):
            fake = FakeServer(lambda line, parts=parts: [f"S {_id(line)} 9 {p}" for p in parts])
            try:
                with ticketing.Client(fake.addr, secret_file=fake.secret_file,
                                      request_timeout_ms=400, backoff_min_ms=20,
                                      backoff_max_ms=50) as c:
                    res = c.ring_result()
                    self.assertEqual(res.outcome, "UNAVAILABLE", parts)
                    self.assertIn("protocol", c.last_error(), parts)
            finally:
                fake.stop()


def wrong_group(version, body="-"):
    """A fake group that owns no slot: W (ring version `version`) to every
    request for a key, and its ring (`body`) to S."""
    def answer(line):
        w = line.split()
        if w[0] == "S":
            return [f"S {w[1]} {version} {body}"]
        return ["W %s %d %d" % (w[1], ticketing.slot(w[2]), version)]
    return answer


class WrongGroupFake(unittest.TestCase):
    def test_definite_and_release_not_queued(self):
        # Its ring (version 4) has no ranges: no group serves any slot, so
        # each W is the outcome at once, and nothing is sent again.
        fake = FakeServer(wrong_group(4))
        try:
            with ticketing.Client(fake.addr, secret_file=fake.secret_file) as c:
                res = c.acquire_result("show-42", 30000, 1000)
                self.assertEqual((res.outcome, res.token, res.slot, res.ring_version),
                                 ("WRONG_GROUP", 0, 11909, 4))
                with self.assertRaises(ticketing.WrongGroup) as cm:
                    c.query("a")
                self.assertEqual((cm.exception.slot, cm.exception.ring_version), (11404, 4))
                self.assertEqual(cm.exception.outcome, "WRONG_GROUP")
                with self.assertRaises(ticketing.WrongGroup) as cm:
                    c.release("show-42:seat-17", 7)
                r = cm.exception.result
                self.assertEqual((r.slot, r.ring_version, r.resent, r.token), (10735, 4, False, 7))
                st = c.stats()
                self.assertEqual((st["releases_queued"], st["requests_in_progress"]), (0, 0))
                time.sleep(0.3)  # a release kept in the queue would go out again
                lines, _, _ = fake.seen()
                # The first W (version 4, newer than none) brought the ring;
                # the next ones name no newer version: no second fetch.
                self.assertEqual([x.split()[0] for x in lines], ["A", "S", "Q", "R"])
                st = c.stats()
                self.assertEqual((st["requests_written"], st["ring_version"], st["rerouted"],
                                  st["ring_fetches"]), (4, 4, 0, 1))
        finally:
            fake.stop()


class WrongGroupServer(unittest.TestCase):
    def test_named_group_without_ring(self):
        srv = Server(extra=["--group", "sales-b"])
        try:
            with ticketing.Client(srv.addrs, secret_file=srv.secret) as c:
                res = c.acquire_result("show-42", 30000, 1000)
                self.assertEqual((res.outcome, res.slot, res.ring_version),
                                 ("WRONG_GROUP", 11909, 0))
                res = c.query_result("a")
                self.assertEqual((res.outcome, res.slot), ("WRONG_GROUP", 11404))
                res = c.release_result("show-42:seat-17", 1)
                self.assertEqual((res.outcome, res.slot, res.resent), ("WRONG_GROUP", 10735, False))
                self.assertEqual(c.stats()["releases_queued"], 0)
                ring = c.ring()
                self.assertEqual((ring.version, ring.body, ring.ranges), (0, "-", []))
                self.assertIsInstance(c.ping(), float)
        finally:
            srv.stop()


if __name__ == "__main__":
    unittest.main()
