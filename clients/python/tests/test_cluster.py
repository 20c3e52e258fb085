"""A 3-node cluster: the client follows M to the leader, and after the
leader is killed, to the new one."""
import os
import sys
import threading
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import ticketing  # noqa: E402
from tests.support import Server  # noqa: E402
from tests.test_outcomes import wait_for  # noqa: E402


class Cluster(unittest.TestCase):
    def setUp(self):
        self.srv = Server(n=3)

    def tearDown(self):
        self.srv.stop()

    def test_leader_kill(self):
        srv = self.srv
        c = ticketing.Client(srv.addrs, secret_file=srv.secret, owner="py-cluster")
        try:
            g = c.acquire("c-held", lease_ms=60000, wait_ms=5000)
            leader = srv.leader(5)
            self.assertIsNotNone(leader)
            # Followers answered M naming the leader; the hint is remembered.
            self.assertTrue(wait_for(lambda: c.stats()["moved"] >= 2))
            self.assertEqual(c.stats()["leader_hint"], leader.addr)
            # A waiter queued on the leader when it dies: written, no answer.
            out = []
            t = threading.Thread(target=lambda: out.append(
                c.acquire_result("c-held", 10000, 30000)))
            t.start()
            self.assertTrue(wait_for(lambda: c.query("c-held").waiters == 1))
            leader.kill()
            t.join(20)
            self.assertEqual(out[0].outcome, "INDETERMINATE")
            # A new leader serves; the client finds it (M or round-robin).
            g2 = c.acquire("c-after", lease_ms=10000, wait_ms=10000)
            new = srv.leader(10, skip=(leader,))
            self.assertIsNotNone(new)
            self.assertNotEqual(new, leader)
            self.assertGreater(g2.token, g.token)  # tokens grow across leaders
            # The committed grant survived the failover, with its token.
            q = c.query("c-held")
            self.assertEqual((q.held, q.owner, q.token), (True, "py-cluster", g.token))
            self.assertEqual(c.release(g).outcome, "RELEASED")
            c.release(g2)
        finally:
            c.close()


if __name__ == "__main__":
    unittest.main()
