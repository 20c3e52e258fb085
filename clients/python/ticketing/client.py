"""The synchronous, thread-safe client.

A Client owns one background I/O thread (see _core.py) that keeps the
connections and decides every outcome; any number of threads may call its
methods at once. Each call submits one request and blocks on its future.
"""
import contextlib
import ssl
import threading
import time

from . import _core
from . import _proto as P
from .errors import (ACQUIRED, ANSWERED, CANCELLED, INVALID, QUEUE_FULL, RELEASED, UNAVAILABLE,
                     ConfigError, Result, raise_for)


class Grant:
    """A held lock: the key, the fencing token (pass it to every protected
    write) and lease_deadline, the time.monotonic() second by which the lease
    ends for certain (counted from the first byte of the acquire written)."""
    __slots__ = ("key", "token", "lease_deadline", "result")

    def __init__(self, result):
        self.key = result.key
        self.token = result.token
        self.lease_deadline = result.lease_deadline
        self.result = result

    def remaining(self):
        """Seconds of lease left on this client's clock (negative: run out)."""
        return self.lease_deadline - time.monotonic()

    def __repr__(self):
        return f"Grant(key={self.key!r}, token={self.token}, remaining={self.remaining():.3f}s)"


class Query:
    """The committed holder of a key: held, owner (None when free), token
    (0 when free) and waiters."""
    __slots__ = ("key", "held", "owner", "token", "waiters")

    def __init__(self, r):
        self.key, self.held, self.owner, self.token, self.waiters = (
            r.key, r.held, r.owner, r.token, r.waiters)

    def __repr__(self):
        return (f"Query(key={self.key!r}, held={self.held}, owner={self.owner!r}, "
                f"token={self.token}, waiters={self.waiters})")


class Ring:
    """The ring of the seed group (SPEC 15, docs/protocol.md section 10):
    version (0: no ring yet) and body, its ranges
    "<first>-<last>=<group>@<addr>[,<addr>...]" joined by ";" in increasing
    order ("-": no ranges). An answer the server sent in several lines
    arrives here joined."""
    __slots__ = ("version", "body")

    def __init__(self, r):
        self.version, self.body = r.ring_version, r.body

    @property
    def ranges(self):
        """The body's ranges as a list of strings ([] for "-")."""
        return [] if self.body == "-" else self.body.split(";")

    def __repr__(self):
        return f"Ring(version={self.version}, body={self.body!r})"


def _addr_list(addrs):
    if isinstance(addrs, str):
        addrs = addrs.split(",")
    addrs = [a.strip() for a in addrs if a.strip()]
    if not 1 <= len(addrs) <= P.ADDRS_MAX:
        raise ConfigError(f"between 1 and {P.ADDRS_MAX} addresses are needed, not {len(addrs)}")
    for a in addrs:
        try:
            P.parse_addr(a)
        except ValueError as e:
            raise ConfigError(str(e)) from None
    return addrs


def _tls_context(ca, cert, key):
    if ca is None:
        if cert or key:
            raise ConfigError("tls_cert_file and tls_key_file need tls_ca_file (TLS is turned "
                              "on by tls_ca_file)")
        return None
    if bool(cert) != bool(key):
        raise ConfigError("tls_cert_file and tls_key_file go together")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_verify_locations(cafile=ca)
        if cert:
            ctx.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as e:
        raise ConfigError(f"TLS files cannot work: {e}") from None
    return ctx


class Client:
    """A Ticketing client.

    addrs: "host:port,host:port" or a list of them (at most 8; "[v6]:port"):
    the nodes of one group, the seed. With several groups the client routes
    each key's requests to the group the ring gives its slot to (it learns
    the ring from the first W answer), with a connection set per group made
    from the ring's addresses and these same settings (docs/client.md,
    "Groups and the ring").
    secret_file or secret (bytes): the client secret, 16-4096 bytes.
    owner: this client's owner name (1-64 bytes, 0x21-0x7E); default unique.
    The numbers (milliseconds) and TLS files mean what the C library's
    configuration fields of the same names mean (docs/client.md).
    log: optional callable(level, message) for connection events, called on
    the I/O thread (0 error .. 3 debug).
    """

    def __init__(self, addrs, secret_file=None, *, secret=None, owner=None,
                 connect_timeout_ms=None, response_grace_ms=None, send_budget_min_ms=None,
                 request_timeout_ms=None, release_queue_max=None, requests_max=None,
                 inflight_per_connection_max=None, backoff_min_ms=None, backoff_max_ms=None,
                 tls_ca_file=None, tls_cert_file=None, tls_key_file=None, tls_server_name=None,
                 log=None):
        addrs = _addr_list(addrs)
        if (secret_file is None) == (secret is None):
            raise ConfigError("give exactly one of secret_file and secret")
        try:
            if secret_file is not None:
                secret = P.load_secret(secret_file)
        except OSError as e:
            raise ConfigError(f"cannot read the secret file: {e}") from None
        except ValueError as e:
            raise ConfigError(str(e)) from None
        if isinstance(secret, str):
            secret = secret.encode()
        if not P.SECRET_MIN <= len(secret) <= P.SECRET_MAX:
            raise ConfigError(f"the secret must be {P.SECRET_MIN}-{P.SECRET_MAX} bytes")
        owner = P.default_owner() if owner is None else owner
        if not isinstance(owner, str) or not P.owner_ok(owner.encode("utf-8")):
            raise ConfigError("owner: 1-64 bytes, each printable ASCII without space")
        try:
            cfg = _core.Config(connect_timeout_ms, response_grace_ms, send_budget_min_ms,
                               request_timeout_ms, release_queue_max, requests_max,
                               inflight_per_connection_max, backoff_min_ms, backoff_max_ms)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        if tls_server_name is not None and tls_ca_file is None:
            raise ConfigError("tls_server_name needs tls_ca_file")
        ctx = _tls_context(tls_ca_file, tls_cert_file, tls_key_file)
        self._closed = False
        self._core = _core.Core(addrs, bytes(secret), owner, cfg, ctx, tls_server_name or "",
                                tls_ca_file, log)

    # ---- context management of the client itself ----

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        core = getattr(self, "_core", None)
        if core is not None and not self._closed:
            with core.mu:
                core.stopping = True
                core.wake()

    @property
    def owner(self):
        """The owner name this client sends."""
        return self._core.owner

    def close(self):
        """Stops the client: acquires, queries and pings not decided yet end
        CANCELLED; releases already queued keep their 5 s deadline (this
        waits for them, at most about 5 s); then every connection closes."""
        if not self._closed:
            self._closed = True
            self._core.stop()

    # ---- requests: outcome level (no exceptions for outcomes) ----

    def _submit(self, r, check=None):
        """Submits r: None (then r.future will hold the Result), or the Result
        of a local refusal, as the C library's blocking calls make them."""
        core = self._core
        if threading.current_thread() is core.thread:
            return Result(INVALID, key=r.key, reason="thread")
        if check is not None:
            return Result(INVALID, key=r.key, reason=check)
        err = core.submit(r)
        if err == "shutdown":
            return Result(CANCELLED, key=r.key, reason="shutdown")
        if err == "full":
            return Result(QUEUE_FULL, key=r.key, token=r.token)
        if err == "requests_max":
            return Result(UNAVAILABLE, key=r.key, reason="requests_max")
        return None

    def _run(self, r, check=None):
        res = self._submit(r, check)
        return res if res is not None else r.future.result()

    @staticmethod
    def _check(type_, key, lease_ms=0, wait_ms=0, token=1):
        if type_ not in ("P", "S"):
            if not isinstance(key, str) or not key.isascii() or not P.key_ok(key.encode()):
                return "key"
        if type_ == "A":
            if not _is_int(lease_ms) or not P.LEASE_MS_MIN <= lease_ms <= P.LEASE_MS_MAX:
                return "lease"
            if not _is_int(wait_ms) or not 0 <= wait_ms <= P.WAIT_MS_MAX:
                return "wait"
        if type_ == "R" and (not _is_int(token) or not 1 <= token <= P.U64_MAX):
            return "token"
        return None

    def _req(self, type_, key="", lease_ms=0, wait_ms=0, token=0):
        bad = self._check(type_, key, lease_ms, wait_ms, token if type_ == "R" else 1)
        k = key if isinstance(key, str) and key.isascii() else ""
        r = _core.Req(type_, k, lease_ms if bad is None else 0, wait_ms if bad is None else 0,
                      token if _is_int(token) else 0)
        return r, bad

    def acquire_result(self, key, lease_ms, wait_ms):
        """Like acquire(), but returns the Result whatever the outcome."""
        return self._run(*self._req("A", key, lease_ms, wait_ms))

    def release_result(self, key, token):
        """Like release(), but returns the Result whatever the outcome."""
        return self._run(*self._req("R", key, token=token))

    def query_result(self, key):
        return self._run(*self._req("Q", key))

    def ping_result(self):
        return self._run(*self._req("P"))

    def ring_result(self):
        """Like ring(), but returns the Result whatever the outcome: ANSWERED
        with ring_version and body, or UNAVAILABLE, CANCELLED."""
        return self._run(*self._req("S"))

    # ---- requests: the usual API ----

    def acquire(self, key, lease_ms=30000, wait_ms=5000):
        """Acquires key: a Grant, or raises Busy, Timeout, Unavailable (nothing
        was sent: definitely not acquired), Indeterminate (sent, no confirmed
        answer: do not enter), Invalid, Cancelled or WrongGroup (definitely
        not acquired: groups kept answering W, that they do not serve the
        key's slot, until max(wait_ms, send_budget_min_ms) from the call had
        passed, or the ring names no group for the slot; .slot and
        .ring_version are the last W's)."""
        res = self.acquire_result(key, lease_ms, wait_ms)
        if res.outcome != ACQUIRED:
            self._raise(res, "acquire")
        return Grant(res)

    def release(self, grant_or_key, token=None):
        """Releases a Grant (or key, token) through the release queue: the
        Result (RELEASED), or raises NotHeld, Unconfirmed (no answer within
        the absolute 5 s deadline), QueueFull, Invalid or WrongGroup (nothing
        was released: groups kept answering W until the 5 s deadline, or the
        ring names no group for the key's slot)."""
        if isinstance(grant_or_key, Grant):
            key, token = grant_or_key.key, grant_or_key.token
        else:
            key = grant_or_key
        res = self.release_result(key, token)
        if res.outcome != RELEASED:
            self._raise(res, "release")
        return res

    def query(self, key):
        """The committed holder of key (a linearizable read): a Query, or
        raises Unavailable (no answer within request_timeout_ms), Invalid or
        WrongGroup (groups kept answering W within request_timeout_ms, or the
        ring names no group for the key's slot)."""
        res = self.query_result(key)
        if res.outcome != ANSWERED:
            self._raise(res, "query")
        return Query(res)

    def ping(self):
        """One round trip: its time in seconds, or raises Unavailable."""
        res = self.ping_result()
        if res.outcome != ANSWERED:
            self._raise(res, "ping")
        return res.rtt

    def ring(self):
        """The ring the seed group's leader has applied ("S"): a Ring
        (version 0 and body "-" when the group has none), or raises
        Unavailable (no answer within request_timeout_ms) or Cancelled. Not a
        linearizable read: a ring is only ever replaced by a newer one, and a
        W carries the version its group judged by. It does not change the
        ring the client routes by (stats()["ring_version"]): that one comes
        from the group that answered a W."""
        res = self.ring_result()
        if res.outcome != ANSWERED:
            self._raise(res, "ring")
        return Ring(res)

    @contextlib.contextmanager
    def lock(self, key, lease_ms=30000, wait_ms=5000):
        """Acquires key for the with-block and releases it when the block ends,
        by exception too. A failed release (NotHeld, Unconfirmed, QueueFull)
        is raised after a block that ended normally; after a block that raised,
        the block's exception wins (the lease frees the key anyway)."""
        g = self.acquire(key, lease_ms, wait_ms)
        try:
            yield g
        except BaseException:
            try:
                self.release(g)
            except Exception:
                pass
            raise
        self.release(g)

    def _raise(self, res, what):
        if res.outcome == UNAVAILABLE and what == "acquire":
            err = self.last_error()
            extra = f"; last connection error: {err}" if err else ""
            res_reason = f" ({res.reason})" if res.reason else ""
            from .errors import Unavailable
            raise Unavailable(f"acquire {res.key!r}: UNAVAILABLE{res_reason}: nothing was sent, "
                              f"definitely not acquired{extra}", res)
        if res.outcome == UNAVAILABLE:
            err = self.last_error()
            from .errors import Unavailable
            raise Unavailable(f"{what}: UNAVAILABLE: no answer in time"
                              + (f"; last connection error: {err}" if err else ""), res)
        raise_for(res, what)

    # ---- introspection ----

    def wait_ready(self, timeout=5.0):
        """Waits up to timeout seconds until a connection is usable."""
        return self._core.wait_ready(timeout)

    def last_error(self):
        """The most recent connection failure, "addr: why" ("" if none)."""
        with self._core.mu:
            return self._core.last_error

    def stats(self):
        """Counters as in the C library's tk_client_stats(), every group's
        connections added up: connections, connections_ready,
        connect_attempts, handshakes, auth_failures, moved, requests_written,
        requests_in_progress, releases_queued, compensations,
        compensations_dropped, indeterminate, leader_hint (the seed group's
        last M address); and for routing by key, ring_version (of the ring
        requests are routed by, 0 before any), rerouted (requests sent again
        after a W answer), groups (connection sets, the seed's included) and
        ring_fetches (S requests the client made on its own after a W)."""
        core = self._core
        st = dict(core.st)
        with core.mu:
            out = {
                "connections": core.conn_count,
                "connections_ready": core.ready_count,
                "releases_queued": core.live_releases,
                "requests_in_progress": core.live_requests,
                "leader_hint": core.seed.leader_hint,
                "ring_version": core.ring_version,
                "groups": core.group_count,
            }
        for name in ("connect_attempts", "handshakes", "auth_failures", "moved",
                     "requests_written", "compensations", "compensations_dropped",
                     "indeterminate", "rerouted", "ring_fetches"):
            out[name] = st.get(name, 0)
        return out


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)
