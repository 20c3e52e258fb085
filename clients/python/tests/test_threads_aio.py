"""Thread-safety (FIFO, one holder at a time) and the asyncio client."""
import asyncio
import os
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import ticketing  # noqa: E402
import ticketing.aio  # noqa: E402
from tests.support import Server  # noqa: E402
from tests.test_outcomes import wait_for  # noqa: E402


class Threads(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = Server()

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()

    def test_fifo_one_holder_at_a_time(self):
        n = 6
        c = ticketing.Client(self.srv.addrs, secret_file=self.srv.secret)
        try:
            first = c.acquire("t-fifo", 30000, 0)
            mu = threading.Lock()
            holders = [0]
            order, tokens, errors = [], [], []

            def worker(i):
                try:
                    with c.lock("t-fifo", lease_ms=30000, wait_ms=20000) as g:
                        with mu:
                            holders[0] += 1
                            if holders[0] != 1:
                                errors.append(f"{holders[0]} holders at once")
                            order.append(i)
                            tokens.append(g.token)
                        time.sleep(0.01)
                        with mu:
                            holders[0] -= 1
                except Exception as e:  # reported below
                    errors.append(repr(e))
            threads = []
            for i in range(n):
                t = threading.Thread(target=worker, args=(i,))
                t.start()
                threads.append(t)
                # Arrival order at the server is known: thread i is queued
                # once the key shows i + 1 waiters.
                self.assertTrue(wait_for(lambda: c.query("t-fifo").waiters == i + 1),
                                f"waiter {i} did not queue")
            c.release(first)
            for t in threads:
                t.join(30)
            self.assertEqual(errors, [])
            self.assertEqual(order, list(range(n)), "grants not in arrival order")
            self.assertEqual(tokens, sorted(tokens))
            self.assertGreater(tokens[0], first.token)
            self.assertEqual(len(set(tokens)), n)
        finally:
            c.close()

    def test_many_threads_many_keys(self):
        c = ticketing.Client(self.srv.addrs, secret_file=self.srv.secret)
        errors = []

        def worker(i):
            try:
                for j in range(20):
                    g = c.acquire(f"t-many-{i}", 10000, 5000)
                    c.release(g)
            except Exception as e:
                errors.append(repr(e))
        ts = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(60)
        c.close()
        self.assertEqual(errors, [])
        self.assertEqual(c.stats()["requests_written"] >= 8 * 20 * 2, True)


class Asyncio(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = Server()

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()

    def test_outcomes_and_lock(self):
        async def main():
            async with ticketing.aio.Client(self.srv.addrs, secret_file=self.srv.secret,
                                            owner="py-aio") as c:
                self.assertIsInstance(await c.ping(), float)
                ring = await c.ring()
                self.assertEqual((ring.version, ring.body), (0, "-"))
                self.assertEqual((await c.ring_result()).outcome, "ANSWERED")
                g = await c.acquire("a-1", lease_ms=10000, wait_ms=0)
                with self.assertRaises(ticketing.Busy):
                    await c.acquire("a-1", 10000, 0)
                q = await c.query("a-1")
                self.assertEqual((q.owner, q.token), ("py-aio", g.token))
                await c.release(g)
                with self.assertRaises(ticketing.NotHeld):
                    await c.release(g)
                with self.assertRaises(ticketing.Invalid):
                    await c.acquire("a b", 10000, 0)
                with self.assertRaises(KeyError):
                    async with c.lock("a-2", 10000, 0):
                        raise KeyError("boom")
                self.assertFalse((await c.query("a-2")).held)
        asyncio.run(main())

    def test_event_loop_not_blocked_and_fifo(self):
        async def main():
            async with ticketing.aio.Client(self.srv.addrs, secret_file=self.srv.secret) as c:
                holder = await c.acquire("a-fifo", 30000, 0)
                ticks = 0
                stop = asyncio.Event()

                async def ticker():
                    nonlocal ticks
                    while not stop.is_set():
                        ticks += 1
                        await asyncio.sleep(0.01)
                tick_task = asyncio.create_task(ticker())
                # A waiting acquire must leave the loop free to run others.
                with self.assertRaises(ticketing.Timeout):
                    await c.acquire("a-fifo", 10000, 500)
                self.assertGreater(ticks, 1)
                order = []

                async def waiter(i):
                    async with c.lock("a-fifo", 10000, 20000) as g:
                        order.append((i, g.token))
                tasks = []
                for i in range(4):
                    tasks.append(asyncio.create_task(waiter(i)))
                    for _ in range(500):
                        if (await c.query("a-fifo")).waiters == i + 1:
                            break
                        await asyncio.sleep(0.01)
                await c.release(holder)
                await asyncio.gather(*tasks)
                stop.set()
                await tick_task
                self.assertEqual([i for i, _ in order], [0, 1, 2, 3])
                toks = [t for _, t in order]
                self.assertEqual(toks, sorted(toks))
        asyncio.run(main())

    def test_cancelled_task_compensates_late_grant(self):
        async def main():
            async with ticketing.aio.Client(self.srv.addrs, secret_file=self.srv.secret) as c:
                holder = await c.acquire("a-cancel", 30000, 0)
                task = asyncio.create_task(c.acquire("a-cancel", 10000, 20000))
                for _ in range(500):
                    if (await c.query("a-cancel")).waiters == 1:
                        break
                    await asyncio.sleep(0.01)
                task.cancel()
                with self.assertRaises(asyncio.CancelledError):
                    await task
                # The waiter is still queued on the server: the release hands
                # it the key, and the client gives the late grant back.
                await c.release(holder)
                for _ in range(500):
                    if c.stats()["compensations"] == 1 and not (await c.query("a-cancel")).held:
                        break
                    await asyncio.sleep(0.01)
                self.assertEqual(c.stats()["compensations"], 1)
                self.assertFalse((await c.query("a-cancel")).held)
        asyncio.run(main())


if __name__ == "__main__":
    unittest.main()
