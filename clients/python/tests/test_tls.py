"""The Python client over TLS, against a real ticketingd with
--tls-cert/--tls-key/--tls-ca/--tls-client-auth (certificates made by
tests/support/make_certs.sh with openssl)."""
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import ticketing  # noqa: E402
from tests.support import Server  # noqa: E402

MAKE_CERTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                          "tests", "support", "make_certs.sh")


class TLS(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.certs = tempfile.mkdtemp(prefix="tk-py-certs-")
        done = subprocess.run(["sh", MAKE_CERTS, cls.certs], capture_output=True, text=True)
        if done.returncode != 0:
            shutil.rmtree(cls.certs, ignore_errors=True)
            raise unittest.SkipTest(f"cannot make test certificates (openssl?): {done.stderr}")
        cls.srv = Server(extra=["--tls-cert", cls.f("node.pem"), "--tls-key", cls.f("node.key"),
                                "--tls-ca", cls.f("ca.pem"), "--tls-client-auth"])

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()
        shutil.rmtree(cls.certs, ignore_errors=True)

    @classmethod
    def f(cls, name):
        return os.path.join(cls.certs, name)

    def client(self, **tls):
        c = ticketing.Client(self.srv.addrs, secret_file=self.srv.secret, owner="py-tls",
                             connect_timeout_ms=2000, request_timeout_ms=3000, **tls)
        self.addCleanup(c.close)
        return c

    def test_locks_over_tls_with_a_client_certificate(self):
        c = self.client(tls_ca_file=self.f("ca.pem"), tls_cert_file=self.f("client.pem"),
                        tls_key_file=self.f("client.key"))
        g = c.acquire("tls-key", lease_ms=10000, wait_ms=0)
        self.assertGreater(g.token, 0)
        with self.assertRaises(ticketing.Busy):
            c.acquire("tls-key", lease_ms=10000, wait_ms=0)
        self.assertEqual(c.release(g).outcome, ticketing.RELEASED)
        g2 = c.acquire("tls-key", lease_ms=10000, wait_ms=0)
        self.assertGreater(g2.token, g.token, "fencing tokens increase over TLS too")
        c.release(g2)

    def test_a_server_of_another_ca_is_refused_and_named(self):
        c = self.client(tls_ca_file=self.f("other-ca.pem"), tls_cert_file=self.f("client.pem"),
                        tls_key_file=self.f("client.key"))
        with self.assertRaises(ticketing.Unavailable) as e:
            c.acquire("tls-other", lease_ms=10000, wait_ms=0)
        self.assertIn("other-ca.pem", str(e.exception))

    def test_a_wrong_server_name_is_refused(self):
        c = self.client(tls_ca_file=self.f("ca.pem"), tls_cert_file=self.f("client.pem"),
                        tls_key_file=self.f("client.key"), tls_server_name="not-us.example")
        with self.assertRaises(ticketing.Unavailable) as e:
            c.acquire("tls-name", lease_ms=10000, wait_ms=0)
        self.assertIn("not-us.example", str(e.exception))

    def test_without_a_client_certificate_nothing_is_acquired(self):
        c = self.client(tls_ca_file=self.f("ca.pem"))
        with self.assertRaises(ticketing.Unavailable):
            c.acquire("tls-nocert", lease_ms=10000, wait_ms=0)
        # Nothing was taken: a client with its certificate gets the key at once.
        ok = self.client(tls_ca_file=self.f("ca.pem"), tls_cert_file=self.f("client.pem"),
                         tls_key_file=self.f("client.key"))
        ok.release(ok.acquire("tls-nocert", lease_ms=10000, wait_ms=0))

    def test_a_plaintext_client_on_the_tls_port_is_told_to_use_tls(self):
        c = self.client()
        with self.assertRaises(ticketing.Unavailable):
            c.acquire("tls-plain", lease_ms=10000, wait_ms=0)
        # The connection gives up when no banner comes within the connect
        # timeout (2 s here), which can be after the acquire's own budget.
        end = time.monotonic() + 10
        while "tls_ca_file" not in c.last_error() and time.monotonic() < end:
            time.sleep(0.05)
        self.assertIn("a TLS port? then set tls_ca_file", c.last_error())


if __name__ == "__main__":
    unittest.main()
