"""The asyncio client: the same calls as ticketing.Client, as coroutines.

Design: it wraps the synchronous client's engine. The I/O thread keeps the
sockets and decides every outcome exactly as for the blocking calls; a
coroutine submits its request and awaits the request's future through
asyncio.wrap_future, so the event loop never blocks (nothing here waits on
a lock held across I/O). Cancelling a task that awaits acquire() cancels the
request: it ends CANCELLED, and a grant that still arrives is released by
the client (as tk_client_cancel() does). close() waits for queued releases
(at most about 5 s) in a worker thread.
"""
import asyncio
import contextlib

from . import client as _client
from .errors import ACQUIRED, ANSWERED, RELEASED


class Client:
    """Takes the same arguments as ticketing.Client."""

    def __init__(self, *args, **kwargs):
        self._sync = _client.Client(*args, **kwargs)

    @property
    def owner(self):
        return self._sync.owner

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()

    async def close(self):
        await asyncio.get_running_loop().run_in_executor(None, self._sync.close)

    async def _run(self, r, bad):
        res = self._sync._submit(r, bad)
        if res is not None:
            return res
        try:
            return await asyncio.wrap_future(r.future)
        except asyncio.CancelledError:
            if r.type == "A":
                self._sync._core.cancel_req(r)
            raise

    async def acquire_result(self, key, lease_ms, wait_ms):
        return await self._run(*self._sync._req("A", key, lease_ms, wait_ms))

    async def release_result(self, key, token):
        return await self._run(*self._sync._req("R", key, token=token))

    async def query_result(self, key):
        return await self._run(*self._sync._req("Q", key))

    async def ping_result(self):
        return await self._run(*self._sync._req("P"))

    async def ring_result(self):
        return await self._run(*self._sync._req("S"))

    async def acquire(self, key, lease_ms=30000, wait_ms=5000):
        res = await self.acquire_result(key, lease_ms, wait_ms)
        if res.outcome != ACQUIRED:
            self._sync._raise(res, "acquire")
        return _client.Grant(res)

    async def release(self, grant_or_key, token=None):
        if isinstance(grant_or_key, _client.Grant):
            key, token = grant_or_key.key, grant_or_key.token
        else:
            key = grant_or_key
        res = await self.release_result(key, token)
        if res.outcome != RELEASED:
            self._sync._raise(res, "release")
        return res

    async def query(self, key):
        res = await self.query_result(key)
        if res.outcome != ANSWERED:
            self._sync._raise(res, "query")
        return _client.Query(res)

    async def ping(self):
        res = await self.ping_result()
        if res.outcome != ANSWERED:
            self._sync._raise(res, "ping")
        return res.rtt

    async def ring(self):
        res = await self.ring_result()
        if res.outcome != ANSWERED:
            self._sync._raise(res, "ring")
        return _client.Ring(res)

    @contextlib.asynccontextmanager
    async def lock(self, key, lease_ms=30000, wait_ms=5000):
        g = await self.acquire(key, lease_ms, wait_ms)
        try:
            yield g
        except BaseException:
            try:
                await self.release(g)
            except Exception:
                pass
            raise
        await self.release(g)

    def last_error(self):
        return self._sync.last_error()

    def stats(self):
        return self._sync.stats()
