"""Every outcome a standalone ticketingd can give, through the sync client."""
import os
import signal
import socket
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import ticketing  # noqa: E402
from ticketing import _core  # noqa: E402
from tests.support import Server, fault_proxy, free_ports3, write_secret  # noqa: E402


def wait_for(pred, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.02)
    return pred()


class Slots(unittest.TestCase):
    """SPEC 15's test vectors: no server needed, the slot is pure."""

    def test_spec_vectors(self):
        vectors = {"a": 11404, "show-42": 11909, "show-42:seat-17": 10735,
                   "inventory/2026-12-24/hall-B": 10740, "~" * 250: 9293}
        for key, want in vectors.items():
            self.assertEqual(ticketing.slot(key), want, key)
            self.assertEqual(ticketing.slot(key.encode()), want, key)
        self.assertEqual(ticketing.SLOTS, 16384)
        self.assertNotEqual(ticketing.slot("show-42"), ticketing.slot("show-43"))


class Outcomes(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = Server()
        cls.c = ticketing.Client(cls.srv.addrs, secret_file=cls.srv.secret, owner="py-outcomes")

    @classmethod
    def tearDownClass(cls):
        cls.c.close()
        cls.srv.stop()

    def test_grant_query_release_ping(self):
        c = self.c
        self.assertIsInstance(c.ping(), float)
        g = c.acquire("o-grant", lease_ms=10000, wait_ms=0)
        self.assertEqual(g.key, "o-grant")
        self.assertGreaterEqual(g.token, 1)
        self.assertTrue(0 < g.remaining() <= 10.0)
        q = c.query("o-grant")
        self.assertEqual((q.held, q.owner, q.token, q.waiters), (True, "py-outcomes", g.token, 0))
        res = c.release(g)
        self.assertEqual(res.outcome, ticketing.RELEASED)
        q = c.query("o-grant")
        self.assertEqual((q.held, q.owner, q.token, q.waiters), (False, None, 0, 0))
        g2 = c.acquire("o-grant", lease_ms=10000, wait_ms=0)
        self.assertGreater(g2.token, g.token)  # fencing tokens only grow
        c.release(g2)

    def test_busy_and_timeout(self):
        c = self.c
        g = c.acquire("o-busy", 10000, 0)
        with self.assertRaises(ticketing.Busy) as cm:
            c.acquire("o-busy", 10000, 0)
        self.assertEqual(cm.exception.outcome, "BUSY")
        t0 = time.monotonic()
        with self.assertRaises(ticketing.Timeout):
            c.acquire("o-busy", 10000, 300)
        self.assertGreaterEqual(time.monotonic() - t0, 0.3)  # the server waited 300 ms
        c.release(g)

    def test_not_held(self):
        c = self.c
        g = c.acquire("o-nh", 10000, 0)
        c.release(g)
        with self.assertRaises(ticketing.NotHeld) as cm:
            c.release(g)
        self.assertFalse(cm.exception.resent)
        with self.assertRaises(ticketing.NotHeld):
            c.release("o-never-held", 12345)

    def test_invalid_local_and_from_server(self):
        c = self.c
        for args, reason in (((("bad key"), 10000, 0), "key"), (("k", 999, 0), "lease"),
                             (("k", 10000, 250001), "wait"), (("k" * 251, 10000, 0), "key")):
            with self.assertRaises(ticketing.Invalid) as cm:
                c.acquire(*args)
            self.assertEqual(cm.exception.reason, reason)
        with self.assertRaises(ticketing.Invalid):
            c.release("k", 0)
        # The public calls refuse bad fields before sending, like the C
        # library; to see the server's own "E <id> key" answer, the same
        # request goes through the engine without the local check.
        r = _core.Req("A", "k" * 251, 10000, 0)
        res = c._run(r)
        self.assertEqual((res.outcome, res.reason), ("INVALID", "key"))
        self.assertIsNotNone(res.sent)  # it was written: the server said E
        r = _core.Req("R", "o-e-token", token=0)
        res = c._run(r)
        self.assertEqual((res.outcome, res.reason), ("INVALID", "token"))

    def test_lock_releases_on_exception(self):
        c = self.c
        with self.assertRaises(ZeroDivisionError):
            with c.lock("o-ctx", lease_ms=30000, wait_ms=0) as g:
                self.assertTrue(c.query("o-ctx").held)
                1 / 0
        q = c.query("o-ctx")
        self.assertFalse(q.held, "the with-block's exception left the key held")
        with c.lock("o-ctx", 30000, 0) as g2:
            self.assertGreater(g2.token, g.token)
        self.assertFalse(c.query("o-ctx").held)

    def test_wrong_secret_is_named(self):
        other = write_secret(os.path.join(self.srv.tmp, "wrong.secret"))
        with ticketing.Client(self.srv.addrs, secret_file=other) as bad:
            with self.assertRaises(ticketing.Unavailable) as cm:
                bad.acquire("o-auth", 10000, 0)
            msg = str(cm.exception)
            self.assertIn("authentication refused", msg)
            self.assertIn("nothing was sent", msg)
            self.assertGreaterEqual(bad.stats()["auth_failures"], 1)
            self.assertEqual(bad.stats()["requests_written"], 0)

    def test_nothing_listening_is_unavailable(self):
        port = free_ports3()
        with ticketing.Client(f"127.0.0.1:{port}", secret_file=self.srv.secret,
                              request_timeout_ms=500) as c:
            with self.assertRaises(ticketing.Unavailable) as cm:
                c.acquire("o-none", 10000, 0)
            self.assertIn("connect", str(cm.exception))
            with self.assertRaises(ticketing.Unavailable):
                c.ping()

    def test_server_proof_is_checked(self):
        # A fake server that does not know the secret: banner, then an OK
        # with a made-up proof followed by an M. The client must believe
        # neither, and count an authentication failure.
        ls = socket.socket()
        ls.bind(("127.0.0.1", 0))
        ls.listen(4)
        port = ls.getsockname()[1]
        stop = threading.Event()

        def serve():
            ls.settimeout(0.2)
            while not stop.is_set():
                try:
                    s, _ = ls.accept()
                except OSError:
                    continue
                with s:
                    s.sendall(b"TICKETING/1 " + b"ab" * 32 + b"\n")
                    s.settimeout(2)
                    try:
                        s.recv(1024)
                        s.sendall(b"OK " + b"cd" * 32 + b" 0123456789abcdef " + b"0" * 32 +
                                  b"\nM 127.0.0.1:1\n")
                        time.sleep(0.2)
                    except OSError:
                        pass
        t = threading.Thread(target=serve, daemon=True)
        t.start()
        try:
            with ticketing.Client(f"127.0.0.1:{port}", secret_file=self.srv.secret) as c:
                with self.assertRaises(ticketing.Unavailable) as cm:
                    c.acquire("o-fake", 10000, 0)
                self.assertIn("wrong server proof", str(cm.exception))
                st = c.stats()
                self.assertEqual(st["moved"], 0)
                self.assertEqual(st["leader_hint"], "")
                self.assertGreaterEqual(st["auth_failures"], 1)
        finally:
            stop.set()
            t.join()
            ls.close()

    def test_close_cancels_a_waiting_acquire(self):
        holder = self.c.acquire("o-cancel", 30000, 0)
        c = ticketing.Client(self.srv.addrs, secret_file=self.srv.secret)
        got = []

        def waiter():
            got.append(c.acquire_result("o-cancel", 10000, 20000))
        t = threading.Thread(target=waiter)
        t.start()
        self.assertTrue(wait_for(lambda: self.c.query("o-cancel").waiters == 1))
        c.close()
        t.join()
        self.assertEqual(got[0].outcome, "CANCELLED")
        with self.assertRaises(ticketing.Cancelled):
            c.acquire("o-cancel", 10000, 0)  # a closed client refuses
        self.c.release(holder)
        # The closed connection took the queued waiter with it.
        self.assertTrue(wait_for(lambda: not self.c.query("o-cancel").held))


class StoppedServer(unittest.TestCase):
    """A server that stops answering (SIGSTOP) after requests were written:
    INDETERMINATE, then compensation of the late G; UNCONFIRMED after the
    absolute 5 s; QUEUE_FULL."""

    def setUp(self):
        self.srv = Server()
        self.node = self.srv.nodes[0]

    def tearDown(self):
        self.node.proc.send_signal(signal.SIGCONT)
        self.srv.stop()

    def test_indeterminate_then_compensation(self):
        c = ticketing.Client(self.srv.addrs, secret_file=self.srv.secret,
                             response_grace_ms=300)
        try:
            c.ping()
            self.node.pause()
            t0 = time.monotonic()
            res = c.acquire_result("s-late", 10000, 0)
            took = time.monotonic() - t0
            self.assertEqual(res.outcome, "INDETERMINATE")
            self.assertIsNotNone(res.sent)
            self.assertGreaterEqual(took, 0.3)  # not before wait (0) + grace
            with self.assertRaises(ticketing.Indeterminate):
                c.acquire("s-late2", 10000, 0)
            self.assertEqual(c.stats()["indeterminate"], 2)
            self.node.proc.send_signal(signal.SIGCONT)
            # Both acquires are granted late; the client releases them itself.
            self.assertTrue(wait_for(lambda: c.stats()["compensations"] == 2))
            self.assertTrue(wait_for(lambda: not c.query("s-late").held
                                     and not c.query("s-late2").held))
        finally:
            c.close()

    def test_unconfirmed_and_queue_full(self):
        c = ticketing.Client(self.srv.addrs, secret_file=self.srv.secret, release_queue_max=1)
        try:
            g = c.acquire("s-rel", 30000, 0)
            self.node.pause()
            out = []
            t0 = time.monotonic()
            t = threading.Thread(target=lambda: out.append(c.release_result(g.key, g.token)))
            t.start()
            self.assertTrue(wait_for(lambda: c.stats()["releases_queued"] == 1))
            with self.assertRaises(ticketing.QueueFull):
                c.release("s-other", 7)
            t.join()
            self.assertEqual(out[0].outcome, "UNCONFIRMED")
            self.assertGreaterEqual(time.monotonic() - t0, 5.0)  # the absolute deadline
            self.node.proc.send_signal(signal.SIGCONT)
            # The written release still reached the server: the key is free.
            self.assertTrue(wait_for(lambda: not c.query("s-rel").held))
        finally:
            c.close()


class HeldGrant(unittest.TestCase):
    """A G held in a fault proxy while the acquire is still pending (wait
    10 s). The lease counts from the first write: a G that comes after it
    ran out is INDETERMINATE, reason "lease", and its token is released at
    once (one compensation); one that comes within it is a Grant."""

    def setUp(self):
        self.srv = Server()
        self.proxy = fault_proxy(self.srv.nodes[0].port)
        self.c = ticketing.Client(f"127.0.0.1:{self.proxy.port}", secret_file=self.srv.secret)
        self.c.ping()

    def tearDown(self):
        self.c.close()
        self.proxy.stop()
        self.srv.stop()

    def acquire_held(self, key, lease_ms, held_s):
        """acquire(key, lease_ms, wait 10 s) with its answer held for held_s:
        (the Grant or the exception, seconds the call took)."""
        out = []

        def call():
            try:
                out.append(self.c.acquire(key, lease_ms, 10000))
            except ticketing.Error as e:
                out.append(e)

        self.proxy.hold(False, True)
        t0 = time.monotonic()
        t = threading.Thread(target=call)
        t.start()
        time.sleep(held_s)
        self.assertEqual(out, [], "decided while its G was held")
        self.proxy.hold(False, False)
        t.join(10)
        self.assertEqual(len(out), 1, "no outcome once the G was let through")
        return out[0], time.monotonic() - t0

    def test_grant_after_the_lease_is_indeterminate_and_released(self):
        got, took = self.acquire_held("h-late", 1000, 1.5)
        self.assertIsInstance(got, ticketing.Indeterminate)
        self.assertEqual(got.reason, "lease")
        self.assertEqual(got.result.token, 0, "the late token must not reach the caller")
        self.assertIsNone(got.result.lease_deadline)
        self.assertIsNotNone(got.result.sent)
        self.assertGreaterEqual(took, 1.0)  # not before the lease ran out
        st = self.c.stats()
        self.assertEqual((st["compensations"], st["compensations_dropped"]), (1, 0))
        self.assertEqual(st["indeterminate"], 1)
        self.assertTrue(wait_for(lambda: self.c.stats()["releases_queued"] == 0))
        self.assertTrue(wait_for(lambda: not self.c.query("h-late").held))

    def test_grant_within_the_lease_is_held(self):
        got, _ = self.acquire_held("h-ok", 5000, 1.5)
        self.assertIsInstance(got, ticketing.Grant)
        self.assertGreater(got.remaining(), 0)
        self.c.release(got)
        self.assertEqual(self.c.stats()["compensations"], 0)


if __name__ == "__main__":
    unittest.main()
