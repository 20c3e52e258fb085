"""Routing by key across groups (docs/client.md, "Groups and the ring"):
the pure parts (the ring parsed, the group of a slot, the seed matched by
address, never an older ring, the resend pause and budget), then the engine
against fake groups, then two real groups."""
import os
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import ticketing  # noqa: E402
from ticketing import _ring as RG  # noqa: E402
from tests.support import Server, ticketctl  # noqa: E402
from tests.test_ring import FakeServer  # noqa: E402

A_ADDRS = "10.0.0.1:7400,10.0.0.2:7400"
B_ADDRS = "10.0.1.1:7400"
BODY = f"0-8191=sales-a@{A_ADDRS};8192-16383=sales-b@{B_ADDRS}"


class ParseRing(unittest.TestCase):
    def test_good(self):
        ranges, groups = RG.parse_ring(BODY)
        self.assertEqual(ranges, [(0, 8191, "sales-a"), (8192, 16383, "sales-b")])
        self.assertEqual(groups, {"sales-a": ("10.0.0.1:7400", "10.0.0.2:7400"),
                                  "sales-b": ("10.0.1.1:7400",)})
        self.assertEqual(RG.parse_ring("-"), ([], {}))
        # A group in several ranges, holes between them, IPv6 and host names.
        ranges, groups = RG.parse_ring("0-0=g@h:1;5-9=x-y=z@[::1]:7400,db.example:9;"
                                       "100-16383=g@h:1")
        self.assertEqual(ranges, [(0, 0, "g"), (5, 9, "x-y=z"), (100, 16383, "g")])
        self.assertEqual(list(groups), ["g", "x-y=z"])
        self.assertEqual(groups["x-y=z"], ("[::1]:7400", "db.example:9"))

    def test_bad(self):
        many = ";".join(f"{i}-{i}=g{i}@h:1" for i in range(65))
        for body in ("", "0-9=a@h:1;", ";0-9=a@h:1", "0-9=a@h:1;;10-19=a@h:1", "-;0-9=a@h:1",
                     "0-9=a@h:1;-", "0-9", "0-9=a", "0-9=@h:1", "09=a@h:1", "0-09=a@h:1",
                     "00-9=a@h:1", "9-0=a@h:1", "0-16384=a@h:1", "0-99999=a@h:1",
                     "a-9=a@h:1", "0-9=a;b@h:1", "0-9=a@", "0-9=a@h", "0-9=a@h:0",
                     "0-9=a@h:1,", "0-9=a@h:1,h:2,h:3,h:4,h:5,h:6",
                     "0-9=a@" + "h" * 127 + ":1", "0-9=" + "n" * 65 + "@h:1",
                     "0-9=caf\u00e9@h:1", "0-9=a@h:1;5-19=b@h:2", "10-19=a@h:1;0-9=b@h:2",
                     "0-9=a@h:1;10-19=a@h:2", many, ";".join(["0-0=a@h:1"] * 1025)):
            with self.assertRaises(ValueError, msg=body[:60]):
                RG.parse_ring(body)


class RouterRules(unittest.TestCase):
    def test_group_of_a_slot(self):
        r = RG.Router(["127.0.0.1:7400"])
        self.assertEqual((r.version, r.group_of(0), r.group_of(16383)), (0, None, None))
        self.assertTrue(r.offer(3, "10-19=a@h:1;20-29=b@h:2;100-16383=c@h:3"))
        for slot, name in ((0, None), (9, None), (10, "a"), (19, "a"), (20, "b"), (29, "b"),
                           (30, None), (99, None), (100, "c"), (16383, "c")):
            self.assertEqual(r.group_of(slot), name, slot)
        self.assertEqual(r.group_of(ticketing.slot("show-42")), "c")  # slot 11909

    def test_seed_matched_by_address(self):
        self.assertEqual(RG.seed_name(RG.parse_ring(BODY)[1], ["10.0.1.1:7400"]), "sales-b")
        self.assertEqual(RG.seed_name(RG.parse_ring(BODY)[1], ["10.0.9.9:7400",
                                                               "10.0.0.2:7400"]), "sales-a")
        self.assertIsNone(RG.seed_name(RG.parse_ring(BODY)[1], ["10.0.0.1:7401"]))
        groups = RG.parse_ring("0-9=v6@[::1]:7400;10-19=named@DB.Example:7400")[1]
        self.assertEqual(RG.seed_name(groups, ["[::1]:7400"]), "v6")
        self.assertEqual(RG.seed_name(groups, ["db.example:7400"]), "named")
        r = RG.Router(["10.0.0.2:7400"])
        self.assertFalse(r.is_seed("sales-a"))
        r.offer(1, BODY)
        self.assertTrue(r.is_seed("sales-a"))
        self.assertFalse(r.is_seed("sales-b"))
        self.assertFalse(r.is_seed(None))

    def test_never_an_older_ring(self):
        r = RG.Router(["10.0.0.1:7400"])
        self.assertFalse(r.offer(0, "-"))  # version 0: no ring
        self.assertTrue(r.offer(5, BODY))
        old = "0-16383=sales-a@" + A_ADDRS
        self.assertFalse(r.offer(4, old))
        self.assertFalse(r.offer(5, old))  # the same version is not newer
        self.assertEqual((r.version, r.body, r.group_of(9000)), (5, BODY, "sales-b"))
        with self.assertRaises(ValueError):  # newer but not a ring: nothing changes
            r.offer(6, "0-9=a@h:1;5-19=b@h:2")
        self.assertEqual((r.version, r.group_of(9000)), (5, "sales-b"))
        self.assertTrue(r.offer(6, old))
        self.assertEqual((r.version, r.group_of(9000)), (6, "sales-a"))
        self.assertTrue(r.offer(7, "-"))  # a newer ring with no ranges
        self.assertEqual((r.version, r.group_of(9000), r.seed), (7, None, None))


class ResendArithmetic(unittest.TestCase):
    def test_pause(self):
        # Another group: at once, and the pause starts over.
        self.assertEqual(RG.plan_resend(10.0, 11.0, False, 0.16), (10.0, 0.0))
        # The same group: 20 ms, then doubling, at most 200 ms.
        pause, at, now = 0.0, [], 10.0
        for _ in range(6):
            t, pause = RG.plan_resend(now, 100.0, True, pause)
            at.append(round(t - now, 3))
        self.assertEqual(at, [0.02, 0.04, 0.08, 0.16, 0.2, 0.2])
        self.assertEqual(pause, 0.2)

    def test_budget_ends_it(self):
        self.assertIsNone(RG.plan_resend(10.0, 10.0, False, 0.0)[0])  # spent
        self.assertEqual(RG.plan_resend(10.0, 10.001, False, 0.0)[0], 10.0)
        self.assertIsNone(RG.plan_resend(10.0, 10.02, True, 0.0)[0])  # the pause reaches the end
        self.assertAlmostEqual(RG.plan_resend(10.0, 10.021, True, 0.0)[0], 10.02)
        self.assertIsNone(RG.plan_resend(10.0, 10.1, True, 0.16)[0])

    def test_budgets(self):
        b = lambda t, wait=0: RG.budget(t, wait, 1000, 5.0, 5.0)  # noqa: E731
        self.assertEqual((b("A", 0), b("A", 999), b("A", 2500)), (1.0, 1.0, 2.5))
        self.assertEqual(RG.budget("R", 0, 1000, 2.0, 5.0), 5.0)  # absolute 5 s
        self.assertEqual(RG.budget("Q", 0, 1000, 2.0, 5.0), 2.0)  # request_timeout
        # Each resend of an acquire waits what is left of wait_ms.
        self.assertEqual(RG.wait_left_ms(2000, 10.0, 10.0), 2000)
        self.assertEqual(RG.wait_left_ms(2000, 10.0, 9.0), 2000)
        self.assertEqual(RG.wait_left_ms(2000, 10.0, 10.75), 1250)
        self.assertEqual(RG.wait_left_ms(2000, 10.0, 12.0), 0)
        self.assertEqual(RG.wait_left_ms(0, 10.0, 10.5), 0)


class Group:
    """A fake group: owns slots [first, last] of its ring; grants, answers
    queries and releases there, W (with its ring's version) elsewhere, and
    its ring to S. w_first: W to the first n requests even in its own slots
    (a move in progress)."""

    def __init__(self, first, last, version=1, w_first=0):
        self.first, self.last, self.version, self.w_first = first, last, version, w_first
        self.body = "-"
        self.token = 100 * first + 1
        self.fake = FakeServer(self.answer)
        self.addr = self.fake.addr

    def answer(self, line):
        w = line.split()
        if w[0] == "S":
            return [f"S {w[1]} {self.version} {self.body}"]
        slot = ticketing.slot(w[2])
        if not self.first <= slot <= self.last or self.w_first > 0:
            self.w_first -= 1
            return [f"W {w[1]} {slot} {self.version}"]
        if w[0] == "A":
            self.token += 1
            return [f"G {w[1]} {self.token}"]
        if w[0] == "Q":
            return [f"Q {w[1]} - 0 0"]
        return [f"R {w[1]}"]

    def lines(self, kind=None):
        return [x for x in self.fake.seen()[0] if kind is None or x.split()[0] == kind]


def keys_of(lines):
    return [x.split()[0] + " " + x.split()[2] if len(x.split()) > 2 else x.split()[0]
            for x in lines]


class FakeGroups(unittest.TestCase):
    def setUp(self):
        self.groups = []

    def tearDown(self):
        for g in self.groups:
            g.fake.stop()

    def group(self, *args, **kw):
        g = Group(*args, **kw)
        self.groups.append(g)
        return g

    def client(self, g, **kw):
        c = ticketing.Client(g.addr, secret_file=g.fake.secret_file, **kw)
        self.addCleanup(c.close)
        return c

    def test_one_w_then_straight_to_the_group(self):
        a, b = self.group(0, 8191), self.group(8192, 16383)
        a.body = b.body = f"0-8191=sales-a@{a.addr};8192-16383=sales-b@{b.addr}"
        c = self.client(a)
        ga = c.acquire("show-4", 30000, 1000)  # slot 725: the seed's
        st = c.stats()
        self.assertEqual((st["ring_version"], st["rerouted"], st["groups"]), (0, 0, 1))
        gb = c.acquire("show-1", 30000, 1000)  # slot 14934: W at the seed, then sales-b
        self.assertEqual((ga.token, gb.token), (2, 819202))
        st = c.stats()
        self.assertEqual((st["ring_version"], st["rerouted"], st["groups"], st["ring_fetches"]),
                         (1, 1, 2, 1))
        self.assertFalse(c.query("show-1").held)
        c.acquire("show-6", 30000, 0)  # slot 16239
        c.release(gb)
        c.release("show-6", 819203)
        c.release(ga)
        self.assertEqual(c.ring().version, 1)  # the ring call asks the seed
        self.assertEqual(keys_of(a.lines()), ["A show-4", "A show-1", "S", "R show-4", "S"])
        self.assertEqual(keys_of(b.lines()), ["A show-1", "Q show-1", "A show-6", "R show-1",
                                              "R show-6"])
        st = c.stats()
        self.assertEqual((st["rerouted"], st["ring_fetches"], st["releases_queued"]), (1, 1, 0))
        self.assertEqual(st["connections"], 4)  # two per single-address group

    def test_seed_not_in_the_ring(self):
        # The seed's addresses are no group's in the ring: each group of the
        # ring gets its own connections, the seed keeps serving ring calls.
        a, b = self.group(0, 8191), self.group(8192, 16383)
        a.body = b.body = f"0-8191=sales-a@{b.addr};8192-16383=sales-b@{b.addr}"
        b.first = 0
        c = self.client(a)
        c.release(c.acquire("show-1", 30000, 1000))
        c.release(c.acquire("show-4", 30000, 1000))  # sales-a by the ring: b's address
        self.assertEqual(keys_of(a.lines()), ["A show-1", "S"])
        self.assertEqual(keys_of(b.lines()), ["A show-1", "R show-1", "A show-4", "R show-4"])
        self.assertEqual(c.stats()["groups"], 3)

    def test_paused_when_the_same_group_answers_w(self):
        # The ring gives the seed every slot, but it answers W three times (a
        # slot frozen for a move): 20, 40 and 80 ms before the resends, each
        # with what is left of the wait.
        g = self.group(0, 16383, w_first=3)
        g.body = f"0-16383=solo@{g.addr}"
        c = self.client(g)
        t0 = time.monotonic()
        c.acquire("show-42", 30000, 3000)
        self.assertGreaterEqual(time.monotonic() - t0, 0.14)
        acquires = g.lines("A")
        self.assertEqual(len(acquires), 4)
        waits = [int(x.split()[5]) for x in acquires]
        self.assertGreater(waits[0], 2500)  # the call's 3000, less the time to connect
        self.assertTrue(all(waits[i + 1] < waits[i] for i in range(3)), waits)
        self.assertLessEqual(waits[3], waits[0] - 140)
        st = c.stats()
        self.assertEqual((st["rerouted"], st["ring_fetches"], st["groups"]), (3, 1, 1))

    def test_budget_ends_in_wrong_group(self):
        g = self.group(0, 16383, version=2, w_first=10 ** 9)  # W to everything
        g.body = f"0-16383=solo@{g.addr}"
        c = self.client(g, send_budget_min_ms=400, request_timeout_ms=400)
        for what, call in (("acquire", lambda: c.acquire_result("show-42", 30000, 0)),
                           ("query", lambda: c.query_result("show-42"))):
            t0 = time.monotonic()
            res = call()
            took = time.monotonic() - t0
            self.assertEqual((res.outcome, res.slot, res.ring_version),
                             ("WRONG_GROUP", 11909, 2), what)
            # Pauses of 20, 40, 80, 160 ms: the one after would end past 400.
            self.assertGreaterEqual(took, 0.28, what)
            self.assertLess(took, 0.4 + 0.5, what)
        self.assertEqual(len(g.lines("S")), 1)  # no newer version after the first
        st = c.stats()
        self.assertEqual((st["requests_in_progress"], st["ring_version"]), (0, 2))

    def test_no_group_for_the_slot(self):
        # The ring covers 0-8191 only: a key of another slot ends at its
        # first W, at once (a release too: it leaves the queue).
        a = self.group(0, 8191)
        a.body = f"0-8191=sales-a@{a.addr}"
        c = self.client(a)
        t0 = time.monotonic()
        res = c.release_result("show-1", 5)
        self.assertEqual((res.outcome, res.slot, res.ring_version, res.token),
                         ("WRONG_GROUP", 14934, 1, 5))
        self.assertLess(time.monotonic() - t0, 1.0)
        with self.assertRaises(ticketing.WrongGroup):
            c.acquire("show-6", 30000, 5000)
        st = c.stats()
        self.assertEqual((st["releases_queued"], st["rerouted"], st["ring_version"]), (0, 0, 1))
        self.assertEqual(keys_of(a.lines()), ["R show-1", "S", "A show-6"])

    def test_an_older_ring_is_not_taken(self):
        # sales-b answers W with a newer version but hands out an older ring:
        # the client keeps the one it has (and so routes to sales-b again).
        a, b = self.group(0, 8191, version=2), self.group(0, 0, version=3)
        a.body = f"0-8191=sales-a@{a.addr};8192-16383=sales-b@{b.addr}"
        b_answer = b.answer

        def old_ring(line):
            w = line.split()
            if w[0] == "S":
                return [f"S {w[1]} 1 0-16383=sales-a@{a.addr}"]
            return b_answer(line)
        b.fake.answer = old_ring
        c = self.client(a, send_budget_min_ms=300)
        res = c.acquire_result("show-1", 30000, 0)
        self.assertEqual((res.outcome, res.ring_version), ("WRONG_GROUP", 3))
        self.assertEqual(c.stats()["ring_version"], 2)
        self.assertEqual(keys_of(a.lines()), ["A show-1", "S"])
        self.assertGreaterEqual(len(b.lines("A")), 2)  # sales-b again, by ring 2


class TwoGroups(unittest.TestCase):
    """Two real 3-node groups given a ring by ticketctl; the client is given
    sales-a's addresses."""

    def test_route_by_slot(self):
        a = Server(n=3, extra=["--group", "sales-a"])
        self.addCleanup(a.stop)
        b = Server(n=3, extra=["--group", "sales-b"], secret=a.secret)
        self.addCleanup(b.stop)
        with tempfile.NamedTemporaryFile("w", suffix=".ring", delete=False) as f:
            f.write(f"version 1\n0-8191=sales-a@{a.addrs}\n8192-16383=sales-b@{b.addrs}\n")
        self.addCleanup(os.unlink, f.name)
        for name, srv in (("sales-a", a), ("sales-b", b)):
            peers = ",".join(f"127.0.0.1:{nd.port + 1}" for nd in srv.nodes)
            rc, out = ticketctl("ring", "apply", f.name, "--group", name, "--peers", peers,
                                "--peer-secret-file", srv.peer_secret, "--timeout", "20s")
            self.assertEqual(rc, 0, out)
        with ticketing.Client(a.addrs, secret_file=a.secret, owner="py-routing") as c:
            g1 = c.acquire("show-4", 30000, 1000)  # sales-a's
            g2 = c.acquire("show-1", 30000, 1000)  # sales-b's: one W, then there
            g3 = c.acquire("show-6", 30000, 0)  # straight to sales-b
            q = c.query("show-1")
            self.assertEqual((q.held, q.owner, q.token), (True, "py-routing", g2.token))
            for g in (g1, g2, g3):
                self.assertEqual(c.release(g).resent, False)
            st = c.stats()
            self.assertEqual((st["ring_version"], st["rerouted"], st["groups"],
                              st["indeterminate"]), (1, 1, 2, 0))
            self.assertEqual(c.ring().version, 1)
        # The server's own view: sales-a never held show-1, sales-b did.
        with ticketing.Client(b.addrs, secret_file=a.secret) as cb:
            self.assertFalse(cb.query("show-1").held)
            self.assertEqual(cb.stats()["rerouted"], 0)


if __name__ == "__main__":
    unittest.main()
