"""The client engine: one I/O thread per client, a selectors loop that owns
every socket, every timer and every outcome, the same rules as the C
library (docs/client.md).

Each round: wait for sockets, the wake-up socket or the nearest deadline;
take new requests and cancellations from callers; run expired deadlines;
put pending requests on connections (releases first, the leader first, then
round-robin); write. Callers never touch a socket: they submit a request
and wait on its concurrent.futures.Future.

Deadlines (a request's heap key) depend on where the request is:
  acquire, not yet written: submit + max(wait_ms, send_budget_min_ms), then
    UNAVAILABLE (a line still in a write buffer is neutered first: its
    command letter becomes X, which the server answers E and ignores);
  acquire, written: first write + wait as sent + response_grace_ms, then
    INDETERMINATE (a G that comes at or after first write + lease_ms is
    INDETERMINATE too, reason "lease", and compensated);
  release (explicit or compensation): enqueue + 5 s, absolute, then
    UNCONFIRMED;
  query, ping, ring: submit + request_timeout_ms, then UNAVAILABLE;
  decided but still holding an id on a connection (a zombie): a linger,
    after which its id is forgotten. A G for a zombie acquire is released
    at once (compensation).

"Written" is tracked in bytes: each request records the stream offset of
its first byte, each connection counts the bytes the kernel took (with TLS:
the plaintext handed to TLS). Only a request none of whose bytes was
written may go to another connection; a written acquire is never resent.

Groups (docs/client.md, "Groups and the ring"): the connections live in
connection sets, one per group (Group): the seed, made from the configured
addresses, and one for each other group the ring names, made on its first
use from the ring's addresses. An acquire, release or query goes to the
group the ring (a _ring.Router) gives its key's slot to, the seed while no
ring is known; pings and ring calls go to the seed. Everything above holds
per group: M hints, the leader, pending lists, reconnects. A W is definite:
the request is unwritten again, and
  - if a ring fetch is under way, or the W names a newer ring version than
    the one held, it waits ("parked" on the fetch) for the fetch, one at a
    time, an internal S request to the group that answered;
  - then it goes to the group the ring names: at once to another group,
    after a pause (20 ms doubling to 200 ms, "parked" on a timer) to the
    same one;
  - within its budget from the call (acquire max(wait_ms,
    send_budget_min_ms), each resend waiting what is left of wait_ms;
    query request_timeout_ms; release its absolute 5 s deadline). When the
    budget ends before it is written again, or at once when the ring names
    no group for the slot, it is WRONG_GROUP with the last W's slot and
    version.
"""
import collections
import concurrent.futures
import errno
import heapq
import random
import selectors
import socket
import ssl
import threading
import time

from . import _proto as P
from . import _ring
from .errors import (ACQUIRED, ANSWERED, BUSY, CANCELLED, INDETERMINATE, INVALID, NOT_HELD,
                     RELEASED, TIMEOUT, UNAVAILABLE, UNCONFIRMED, WRONG_GROUP, Result)

RELEASE_DEADLINE = 5.0
ZOMBIE_LINGER = 30.0
EXTRA_MAX = 4  # M-hinted connections per group
# Connection sets besides the seed: the groups of one ring (at most 64),
# with room for sets of groups an older ring named that still hold requests.
GROUP_SETS_MAX = 2 * _ring.GROUPS_MAX
WBUF_HIGH = 64 * 1024
TLS_WRITE_MAX = 16384
PROBE_ID = 0

WIRE_NONE, WIRE_QUEUED, WIRE_SENT = 0, 1, 2
(IDLE, RESOLVING, CONNECTING, TLS, BANNER, AUTH, PROBE, READY, RETIRED) = range(9)

# The answers each request may get ("S": the ring request, SPEC 15).
_FITS = {"A": "GTBEW", "R": "RNEW", "Q": "QEW", "P": "PE", "S": "SE"}


class Req:
    __slots__ = ("type", "key", "kb", "lease_ms", "wait_ms", "wait_sent_ms", "token",
                 "submit", "sent", "deadline", "hgen", "in_heap", "wire", "conn", "wire_id",
                 "stream_pos", "decided", "neutered", "compensation", "resent", "pending",
                 "future", "cancel", "ring_parts", "ring_n", "ring_version", "slot", "group",
                 "w_slot", "w_version", "w_group", "pause", "park", "pgen", "internal")

    def __init__(self, type_, key="", lease_ms=0, wait_ms=0, token=0):
        self.type = type_
        self.key = key
        self.kb = key.encode("ascii") if key else b""
        self.lease_ms = lease_ms
        self.wait_ms = wait_ms
        self.wait_sent_ms = 0
        self.token = token
        self.submit = 0.0
        self.sent = None
        self.deadline = 0.0
        self.hgen = 0
        self.in_heap = False
        self.wire = WIRE_NONE
        self.conn = None
        self.wire_id = 0
        self.stream_pos = 0
        self.decided = False
        self.neutered = False
        self.compensation = False
        self.resent = False
        self.pending = False
        self.future = None
        self.cancel = False
        self.ring_parts = []  # S in parts: the bodies of parts 1..k seen on this connection
        self.ring_n = 0
        self.ring_version = 0
        self.slot = P.slot(self.kb) if key else 0
        self.group = None  # the Group it goes to (its pending list, its connection)
        self.w_slot = None  # the last W answer: slot, ring version, the Group that sent it
        self.w_version = 0
        self.w_group = None
        self.pause = 0.0  # the next pause before going to the group that answered W
        self.park = None  # "ring": waiting for the ring fetch; "pause": for its pause
        self.pgen = 0
        self.internal = False  # the engine's own ring fetch: no caller, no bound counted


class Config:
    """Numbers with defaults applied (0 or None also means the default)."""

    def __init__(self, connect_timeout_ms=None, response_grace_ms=None, send_budget_min_ms=None,
                 request_timeout_ms=None, release_queue_max=None, requests_max=None,
                 inflight_per_connection_max=None, backoff_min_ms=None, backoff_max_ms=None):
        def d(v, default):
            if v is None or v == 0:
                return default
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ValueError(f"configuration numbers are non-negative ints, not {v!r}")
            return v
        self.connect_timeout = d(connect_timeout_ms, 5000) / 1000
        self.response_grace = d(response_grace_ms, 2000) / 1000
        self.send_budget_min_ms = d(send_budget_min_ms, 1000)
        self.request_timeout = d(request_timeout_ms, 5000) / 1000
        self.release_queue_max = d(release_queue_max, 1024)
        self.requests_max = d(requests_max, 65536)
        self.inflight_max = d(inflight_per_connection_max, 4096)
        self.backoff_min = d(backoff_min_ms, 100) / 1000
        self.backoff_max = d(backoff_max_ms, 3200) / 1000
        if self.backoff_min > self.backoff_max:
            raise ValueError("backoff_min_ms is above backoff_max_ms")


class Conn:
    """One connection: connect, (TLS,) banner, AUTH, OK with the server's
    proof checked, the probe "P 0", then pipelined requests by id."""

    def __init__(self, core, group, addr, extra):
        self.core = core
        self.group = group  # the connection set it belongs to
        self.extra = extra
        self.index = 0
        self.state = IDLE
        self.sock = None
        self.events = 0
        self.set_addr(addr)
        self.backoff = core.cfg.backoff_min
        self.next_attempt = 0.0
        self.attempt_deadline = 0.0
        self.sockaddr = None
        self.snonce = self.cnonce = ""
        self.tls = None  # ssl.SSLObject
        self.tls_in = self.tls_out_bio = None
        self.tls_out = bytearray()  # ciphertext not yet sent
        self.tls_seen = False
        self.tls_refused = False
        self.got_bytes = False
        self.rbuf = bytearray()
        self.wbuf = bytearray()  # holds stream bytes [out_written, out_appended)
        self.out_appended = 0
        self.out_written = 0
        self.unsent = collections.deque()  # QUEUED requests in stream order
        self.slots = {}  # wire id -> Req
        self.next_id = 1

    def set_addr(self, addr):
        self.host, self.port, self.numeric = P.parse_addr(addr)
        self.addr = addr

    # ---- selector and teardown ----

    def arm(self, events):
        if self.events == events or self.sock is None:
            return
        sel = self.core.sel
        if self.events == 0:
            sel.register(self.sock, events, self)
        else:
            sel.modify(self.sock, events, self)
        self.events = events

    def teardown(self):
        core = self.core
        if self.sock is not None:
            if self.events:
                core.sel.unregister(self.sock)
            self.sock.close()
        self.sock = None
        self.events = 0
        self.tls = self.tls_in = self.tls_out_bio = None
        self.tls_out = bytearray()
        self.tls_seen = False
        self.got_bytes = False
        self.rbuf = bytearray()
        self.wbuf = bytearray()
        self.out_appended = self.out_written = 0
        if self.state == READY:
            core.ready_change(-1)
        self.state = IDLE
        unsent, self.unsent = self.unsent, collections.deque()
        # Untouched requests first, in reverse, each put at the front of its
        # pending list: they keep their order and their place.
        for r in reversed(unsent):
            del self.slots[r.wire_id]
            core.on_conn_lost(r)
        slots, self.slots = self.slots, {}
        for r in slots.values():
            core.on_conn_lost(r)

    def down(self, why, record, tls_refused, now):
        core = self.core
        core.log(0 if tls_refused else 1 if self.state == READY else 3,
                 f"connection to {self.addr}: {why}")
        if record:
            with core.mu:
                core.last_error = f"{self.addr}: {why}"
        self.teardown()
        self.tls_refused = tls_refused
        if self.extra and self.group.leader is not self:
            self.state = RETIRED  # the leader moved on from this address
            return
        if tls_refused:
            self.backoff = core.cfg.backoff_max
        # Jitter: a delay in [3/4, 1] of the step.
        self.next_attempt = now + core.rng.uniform(self.backoff * 0.75, self.backoff)
        self.backoff = min(self.backoff * 2, core.cfg.backoff_max)

    def fail(self, why, now):
        self.down(why, True, False, now)

    def retire(self):
        self.teardown()
        self.state = RETIRED

    # ---- connecting ----

    def start(self, now):
        self.attempt_deadline = now + self.core.cfg.connect_timeout
        if self.numeric:
            fam = socket.AF_INET6 if ":" in self.host else socket.AF_INET
            self.sockaddr = (fam, (self.host, self.port))
            self.connect(now)
            return
        self.state = RESOLVING
        self.core.resolve(self, self.host, self.port)

    def lookup_done(self, host, result, now):
        if self.state != RESOLVING or host != self.host:
            return  # timed out or re-pointed meanwhile
        if result is None:
            self.fail("host name lookup failed", now)
            return
        self.sockaddr = result
        self.connect(now)

    def connect(self, now):
        core = self.core
        core.st["connect_attempts"] += 1
        fam, sa = self.sockaddr
        try:
            s = socket.socket(fam, socket.SOCK_STREAM)
        except OSError as e:
            self.fail(e.strerror or str(e), now)
            return
        s.setblocking(False)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        for opt, v in (("TCP_KEEPIDLE", 10), ("TCP_KEEPINTVL", 3), ("TCP_KEEPCNT", 3)):
            if hasattr(socket, opt):
                s.setsockopt(socket.IPPROTO_TCP, getattr(socket, opt), v)
        self.sock = s
        rc = s.connect_ex(sa)
        if rc == 0:
            self.connected(now)
        elif rc in (errno.EINPROGRESS, errno.EAGAIN, errno.EWOULDBLOCK):
            self.state = CONNECTING
            self.arm(selectors.EVENT_WRITE)
        else:
            self.fail(f"connect: {_strerror(rc)}", now)

    def connected(self, now):
        core = self.core
        self.got_bytes = False
        if core.tls_ctx is None:
            self.state = BANNER
            self.arm(selectors.EVENT_READ)
            return
        name = core.tls_server_name or self.host
        self.tls_in, self.tls_out_bio = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = core.tls_ctx.wrap_bio(self.tls_in, self.tls_out_bio, server_hostname=name)
        self.tls_seen = False
        self.state = TLS
        self.tls_step(now)
        if self.sock is not None:
            self.arm(selectors.EVENT_READ)

    def timer(self, now):
        if self.state == IDLE:
            if self.next_attempt <= now:
                self.start(now)
        elif self.state in (RESOLVING, CONNECTING, TLS, BANNER, AUTH, PROBE):
            if self.attempt_deadline > now:
                return
            if self.state == TLS:
                self.fail("TLS handshake timed out", now)
            elif self.state == BANNER and self.tls is None and not self.got_bytes:
                self.fail("connected, but no banner from the server in time (a TLS port? "
                          "then set tls_ca_file)", now)
            else:
                self.fail("connect or handshake timed out", now)

    def next_timer(self):
        if self.state == IDLE:
            return self.next_attempt
        if self.state in (READY, RETIRED):
            return None
        return self.attempt_deadline

    # ---- output ----

    def has_room(self):
        return (self.state == READY and len(self.slots) < self.core.cfg.inflight_max
                and len(self.wbuf) < WBUF_HIGH)

    def append(self, line):
        self.wbuf += line
        self.out_appended += len(line)

    def queue(self, r, now):
        core = self.core
        rid = self.next_id
        while rid == PROBE_ID or rid in self.slots:
            rid += 1
        self.next_id = rid + 1
        owner = core.owner_b
        if r.type == "A":
            # The wait left of the caller's budget (after a W too: counted
            # from the call).
            r.wait_sent_ms = _ring.wait_left_ms(r.wait_ms, r.submit, now)
            line = P.fmt_acquire(rid, r.kb, owner, r.lease_ms, r.wait_sent_ms)
        elif r.type == "R":
            line = P.fmt_release(rid, r.kb, owner, r.token)
        elif r.type == "Q":
            line = P.fmt_query(rid, r.kb)
        elif r.type == "S":
            line = P.fmt_ring(rid)
            r.ring_parts, r.ring_n, r.ring_version = [], 0, 0  # parts start anew here
        else:
            line = P.fmt_ping(rid)
        r.stream_pos = self.out_appended
        self.append(line)
        r.wire = WIRE_QUEUED
        r.conn = self
        r.wire_id = rid
        self.slots[rid] = r
        self.unsent.append(r)

    def neuter(self, r):
        off = r.stream_pos - self.out_written
        assert r.wire == WIRE_QUEUED and 0 <= off < len(self.wbuf)
        assert self.wbuf[off] == ord(r.type)
        self.wbuf[off] = ord("X")  # answered "E <id> command", changes nothing
        r.neutered = True

    def drop_slot(self, r):
        del self.slots[r.wire_id]
        if r.wire == WIRE_QUEUED:
            self.unsent.remove(r)
        r.wire = WIRE_NONE
        r.conn = None

    def mark_sent(self, before):
        while self.unsent and self.unsent[0].stream_pos < self.out_written:
            self.core.on_sent(self.unsent.popleft(), before)

    def flush(self, now):
        if self.sock is None or self.state == CONNECTING:
            return
        if self.tls is not None:
            self.flush_tls(now)
            return
        while self.wbuf:
            before = time.monotonic()  # never later than the first byte leaving
            try:
                n = self.sock.send(self.wbuf)
            except (BlockingIOError, InterruptedError):
                self.arm(selectors.EVENT_READ | selectors.EVENT_WRITE)
                return
            except OSError as e:
                self.fail(f"write: {e.strerror or e}", now)
                return
            if n <= 0:
                self.fail("write: no progress", now)
                return
            del self.wbuf[:n]
            self.out_written += n
            self.mark_sent(before)
        self.arm(selectors.EVENT_READ)

    # ---- TLS (through memory BIOs, so "written" means "handed to TLS") ----

    def tls_push(self, now):
        """Sends pending ciphertext: True if all of it left, False if the
        socket is full or the connection failed."""
        self.tls_out += self.tls_out_bio.read()
        while self.tls_out:
            try:
                n = self.sock.send(self.tls_out)
            except (BlockingIOError, InterruptedError):
                self.arm(selectors.EVENT_READ | selectors.EVENT_WRITE)
                return False
            except OSError as e:
                self.fail(f"write: {e.strerror or e}", now)
                return False
            del self.tls_out[:n]
        return True

    def flush_tls(self, now):
        while True:
            if not self.tls_push(now):
                return
            if not self.wbuf or self.state == TLS:
                break
            chunk = bytes(self.wbuf[:TLS_WRITE_MAX])
            before = time.monotonic()
            try:
                n = self.tls.write(chunk)
            except ssl.SSLError as e:
                self.fail_tls(e, now)
                return
            del self.wbuf[:n]
            self.out_written += n
            self.mark_sent(before)
        self.arm(selectors.EVENT_READ)

    def tls_step(self, now):
        """Advances the TLS handshake, then reads plaintext into rbuf."""
        try:
            if self.state == TLS:
                self.tls.do_handshake()
                self.state = BANNER
                self.tls_refused = False
            while True:
                data = self.tls.read(16384)
                if not data:
                    self.fail("closed by the server (TLS close_notify)", now)
                    return
                self.rbuf += data
                self.lines(now)
                if self.sock is None:
                    return
        except ssl.SSLWantReadError:
            pass
        except ssl.SSLZeroReturnError:
            self.fail("closed by the server (TLS close_notify)", now)
            return
        except ssl.SSLError as e:
            self.fail_tls(e, now)
            return
        if self.sock is not None:
            self.tls_push(now)

    def fail_tls(self, e, now):
        core = self.core
        name = core.tls_server_name or self.host
        cert = isinstance(e, ssl.SSLCertVerificationError)
        why = getattr(e, "verify_message", None) or getattr(e, "reason", None) or str(e)
        if cert:
            why = f"TLS handshake failed: {why} (CA file {core.tls_ca_file}, server name {name})"
        else:
            why = f"TLS failed: {why}"
        self.down(why, True, cert or self.state == TLS, now)

    # ---- input ----

    def on_banner(self, line, now):
        core = self.core
        snonce = P.parse_banner(line.rstrip(b"\r"))
        if snonce is None:
            self.fail("refused (E before the banner)" if line.startswith(b"E")
                      else "not a Ticketing client port", now)
            return
        self.snonce, self.cnonce = snonce, P.new_nonce()
        cproof = P.proof(core.secret, "client", self.snonce, self.cnonce)
        self.append(f"AUTH {self.cnonce} {cproof}\n".encode())
        self.state = AUTH  # written by the loop's flush

    def on_ok(self, line, now):
        core = self.core
        line = line.rstrip(b"\r")
        sproof = P.parse_ok(line)
        if sproof is None:
            auth = line == b"E - auth"
            if auth:
                core.st["auth_failures"] += 1
                core.log(0, f"{self.addr} refused our proof: is the client secret right?")
            self.fail("authentication refused (wrong secret?)" if auth
                      else "bad handshake answer", now)
            return
        expect = P.proof(core.secret, "server", self.snonce, self.cnonce)
        if not P.hmac.compare_digest(expect, sproof):
            # This peer does not know our secret: nothing it says is believed.
            core.st["auth_failures"] += 1
            self.fail("wrong server proof (not our cluster, or a wrong secret)", now)
            return
        core.st["handshakes"] += 1
        self.append(P.fmt_ping(PROBE_ID))
        self.state = PROBE  # flushed by the loop, after the lines already read

    def on_line(self, line, now):
        if self.state == BANNER:
            self.on_banner(line, now)
            return
        if self.state == AUTH:
            self.on_ok(line, now)
            return
        rsp = P.parse_response(line)
        core = self.core
        if rsp is None:
            self.fail("protocol: malformed line", now)
        elif rsp.type == "M":
            self.group.on_moved(rsp.text, now)
            self.down("not the leader (M)", False, False, now)
        elif rsp.id is None:
            self.fail(f"server closed: E - {rsp.text[:20]}", now)
        elif self.state == PROBE:
            if rsp.type == "P" and rsp.id == PROBE_ID:
                self.state = READY
                self.backoff = core.cfg.backoff_min  # a good handshake resets it
                core.ready_change(1)
                core.log(2, f"connected to {self.addr}"
                            f" ({'hinted leader' if self.extra else 'configured'}"
                            f"{self.group.label()})")
            else:
                self.fail("unexpected answer to the probe", now)
        else:
            r = self.slots.get(rsp.id)
            if r is None:
                return  # a forgotten zombie's answer
            fits = "E" if r.neutered else _FITS[r.type]
            if r.wire != WIRE_SENT or rsp.type not in fits:
                self.fail("protocol: answer does not fit its request", now)
                return
            if rsp.type == "S":
                rsp = self.ring_part(r, rsp, now)
                if rsp is None:
                    return  # more parts to come, or the connection failed
            self.drop_slot(r)
            core.on_response(r, rsp, self.group, now)

    def ring_part(self, r, rsp, now):
        """An S line for r: the whole answer (the parts' bodies joined by
        ";") once its last part came, else None. Parts come in order 1..n,
        all with the same n and version; anything else is a protocol error
        (the connection fails, and the request goes out again)."""
        if rsp.parts == 1:
            if r.ring_parts:
                self.fail("protocol: a one-line ring answer in the middle of its parts", now)
                return None
            return rsp
        if rsp.part != len(r.ring_parts) + 1 or (
                r.ring_parts and (rsp.parts != r.ring_n or rsp.version != r.ring_version)):
            self.fail(f"protocol: ring part {rsp.part}/{rsp.parts} out of order", now)
            return None
        r.ring_parts.append(rsp.text)
        r.ring_n, r.ring_version = rsp.parts, rsp.version
        if rsp.part < rsp.parts:
            return None
        body = ";".join(r.ring_parts)
        r.ring_parts = []
        return P.Response("S", rsp.id, text=body, version=rsp.version)

    def lines(self, now):
        while self.sock is not None:
            nl = self.rbuf.find(b"\n")
            if nl < 0:
                if len(self.rbuf) >= P.LINE_MAX:
                    self.fail("protocol: line too long", now)
                return
            if nl + 1 > P.LINE_MAX:
                self.fail("protocol: line too long", now)
                return
            line = bytes(self.rbuf[:nl])
            del self.rbuf[:nl + 1]
            self.on_line(line, now)

    def read(self, now):
        while self.sock is not None:
            try:
                data = self.sock.recv(65536)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                self.fail(e.strerror or str(e), now)
                return
            if not data:
                if self.tls is not None and self.state in (TLS, BANNER):
                    self.down("closed by the server during or right after the TLS handshake "
                              "(it may have refused our certificate)", True, True, now)
                else:
                    self.fail("closed by the server", now)
                return
            self.got_bytes = True
            if self.tls is None:
                self.rbuf += data
                self.lines(now)
                continue
            if not self.tls_seen:
                self.tls_seen = True
                if data[0] != 0x16:
                    if data[0] == 0x15:
                        why = "the server refused the TLS handshake (alert)"
                    else:
                        txt = "".join(chr(b) if 32 <= b < 127 else "." for b in data[:20])
                        why = (f"the server does not speak TLS: it answered in plaintext "
                               f"(\"{txt}...\"); enable TLS on it, or connect without "
                               f"tls_ca_file")
                    self.down(why, True, True, now)
                    return
            self.tls_in.write(data)
            self.tls_step(now)

    def event(self, mask, now):
        if self.sock is None:
            return
        if self.state == CONNECTING:
            err = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                self.fail(f"connect: {_strerror(err)}", now)
                return
            if mask & selectors.EVENT_WRITE:
                self.connected(now)
            return
        if mask & selectors.EVENT_READ:
            self.read(now)
        if self.sock is not None and mask & selectors.EVENT_WRITE:
            self.flush(now)


def _strerror(code):
    import os
    return os.strerror(code)


class Group:
    """One group's connection set: its connections (configured from its
    addresses, then up to EXTRA_MAX hinted by M), its leader, its pending
    requests. The seed is the group of the configured addresses; the others
    are made from the ring's addresses, with the seed's settings."""

    def __init__(self, core, name, addrs):
        self.core = core
        self.name = name  # None: the seed before a ring names it
        self.addrs = ()
        self.conns = []
        self.nconfigured = 0
        self.rr = 0
        self.leader = None
        self.leader_hint = ""  # under core.mu
        self.pending_rel = collections.deque()
        self.pending = collections.deque()
        self.set_addrs(addrs)

    def set_addrs(self, addrs):
        """The configured connections for addrs (two for a single address),
        keeping those already made to the same addresses. One that is no
        longer configured closes now if it holds no request, else it stays
        as a hinted one (it retires when it goes down, unless it leads)."""
        self.addrs = tuple(addrs)
        old = [k for k in self.conns if not k.extra]
        extras = [k for k in self.conns if k.extra]
        conns = []
        for a in (self.addrs if len(self.addrs) > 1 else self.addrs * 2):
            k = next((k for k in old if k.addr == a), None)
            if k is not None:
                old.remove(k)
            else:
                k = Conn(self.core, self, a, False)
            conns.append(k)
        for k in old:
            if k.slots:
                k.extra = True
                extras.append(k)
            else:
                k.retire()
        self.nconfigured = len(conns)
        self.conns = conns + [k for k in extras if k.state != RETIRED or k.slots]
        for i, k in enumerate(self.conns):
            k.index = i
        if self.leader not in self.conns:
            self.leader = None
        self.rr = 0

    def label(self):
        return f", group {self.name}" if self.name else ""

    def idle(self):
        return not self.pending_rel and not self.pending and not any(
            k.slots for k in self.conns)

    def close(self):
        for k in self.conns:
            k.retire()

    # ---- M hints ----

    def on_moved(self, addr, now):
        core = self.core
        core.st["moved"] += 1
        with core.mu:
            same = (addr or "") == self.leader_hint
            self.leader_hint = addr or ""
        if not addr:
            self.leader = None  # "M -": no leader known now
            return
        if not same:
            core.log(2, f"leader hint: {addr}{self.label()}")
        for k in self.conns:
            if k.addr == addr:
                self.leader = k
                if k.state == RETIRED:
                    k.state = IDLE
                    k.backoff = core.cfg.backoff_min
                    k.next_attempt = float("inf")
                # Soon, but not sooner than the shortest backoff: two nodes
                # naming each other during an election make no tight loop.
                if k.state == IDLE:
                    k.next_attempt = min(k.next_attempt, now + core.cfg.backoff_min)
                return
        # A member we were not configured with: connect to it too.
        extras = self.conns[self.nconfigured:]
        slot = None
        if len(extras) < EXTRA_MAX:
            try:
                k = Conn(core, self, addr, True)
            except ValueError:
                core.log(1, f"cannot connect to hinted leader {addr} (bad address)")
                return
            k.index = len(self.conns)
            k.next_attempt = now
            self.conns.append(k)
            self.leader = k
            core.count_conns()
            return
        for k in extras:
            if k.state == RETIRED:
                slot = k
                break
        if slot is None:
            for k in extras:
                if k.state != READY:
                    slot = k
                    break
        if slot is None:
            core.log(1, f"no room for a connection to hinted leader {addr}")
            return
        slot.retire()
        try:
            slot.set_addr(addr)
        except ValueError:
            return
        slot.state = IDLE
        slot.backoff = core.cfg.backoff_min
        slot.next_attempt = now
        self.leader = slot

    def pick_conn(self):
        if self.leader is not None and self.leader.has_room():
            return self.leader
        n = len(self.conns)
        for j in range(n):
            i = (self.rr + j) % n
            if self.conns[i].has_room():
                self.rr = (i + 1) % n
                return self.conns[i]
        return None

    def tls_refused_all(self):
        live = [k for k in self.conns if k.state != RETIRED]
        return bool(live) and all(k.tls_refused for k in live)


class Core:
    """The I/O thread's state. Fields under "shared" are guarded by mu."""

    def __init__(self, addrs, secret, owner, cfg, tls_ctx, tls_server_name, tls_ca_file, log):
        self.cfg = cfg
        self.secret = secret
        self.owner = owner
        self.owner_b = owner.encode("ascii")
        self.tls_ctx = tls_ctx
        self.tls_server_name = tls_server_name
        self.tls_ca_file = tls_ca_file
        self.logf = log
        self.rng = random.Random()
        self.sel = selectors.DefaultSelector()
        self.wake_r, self.wake_w = socket.socketpair()
        self.wake_r.setblocking(False)
        self.wake_w.setblocking(False)
        self.sel.register(self.wake_r, selectors.EVENT_READ, None)
        # ---- shared, under mu ----
        self.mu = threading.Lock()
        self.ready_cv = threading.Condition(self.mu)
        self.submitted = []
        self.cancels = []
        self.lookups = []
        self.live_requests = 0
        self.live_releases = 0
        self.stopping = False
        self.ready_count = 0
        self.last_error = ""
        self.wake_pending = False
        self.ring_version = 0  # of the ring requests are routed by
        self.conn_count = 0
        self.group_count = 1
        self.st = collections.Counter()  # written by the I/O thread only
        # ---- I/O thread only ----
        self.router = _ring.Router(addrs)
        self.seed = Group(self, None, addrs)
        self.groups = {}  # name -> Group: the other groups' connection sets
        self.fetch = None  # the ring fetch under way (an internal S request)
        self.ring_waiters = []  # requests answered W that wait for it
        self.paused = []  # heap of (due, seq, pgen, request): pauses before a resend
        self.pseq = 0
        self.count_conns()
        self.heap = []
        self.hseq = 0
        self.draining = False
        self.drain_deadline = 0.0
        self.resolver = None
        self.thread = threading.Thread(target=self.main, name="ticketing-io", daemon=True)
        self.thread.start()

    def log(self, level, msg):
        if self.logf is not None:
            try:
                self.logf(level, msg)
            except Exception:
                pass

    # ---- API side (any thread) ----

    def wake(self):
        if not self.wake_pending:
            self.wake_pending = True
            try:
                self.wake_w.send(b"\0")
            except (BlockingIOError, OSError):
                pass

    def submit(self, r):
        """Queues r; returns None, or an error word: "shutdown", "full"
        (release queue), "requests_max"."""
        r.future = concurrent.futures.Future()
        r.submit = time.monotonic()
        with self.mu:
            if self.stopping:
                return "shutdown"
            if r.type == "R":
                if self.live_releases >= self.cfg.release_queue_max:
                    return "full"
                self.live_releases += 1
            else:
                if self.live_requests >= self.cfg.requests_max:
                    return "requests_max"
                self.live_requests += 1
            self.submitted.append(r)
            self.wake()
        return None

    def cancel_req(self, r):
        with self.mu:
            if self.stopping:
                return
            self.cancels.append(r)
            self.wake()

    def stop(self, timeout=None):
        with self.mu:
            self.stopping = True
            self.wake()
        if threading.current_thread() is not self.thread:
            self.thread.join(timeout)

    def wait_ready(self, timeout):
        end = time.monotonic() + timeout
        with self.mu:
            while self.ready_count == 0:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self.ready_cv.wait(left)
            return True

    def resolve(self, conn, host, port):
        if self.resolver is None:
            self.resolver = concurrent.futures.ThreadPoolExecutor(
                1, thread_name_prefix="ticketing-resolve")

        def work():
            try:
                infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
                res = (infos[0][0], infos[0][4]) if infos else None
            except OSError:
                res = None
            with self.mu:
                self.lookups.append((conn, host, res))
                self.wake()
        self.resolver.submit(work)

    def ready_change(self, delta):
        with self.mu:
            self.ready_count += delta
            if self.ready_count > 0:
                self.ready_cv.notify_all()

    # ---- heap ----

    def heap_set(self, r, deadline):
        r.hgen += 1
        r.deadline = deadline
        r.in_heap = True
        self.hseq += 1
        heapq.heappush(self.heap, (deadline, self.hseq, r.hgen, r))

    def heap_remove(self, r):
        if r.in_heap:
            r.in_heap = False
            r.hgen += 1  # the entry in the heap goes stale

    def heap_top(self):
        h = self.heap
        while h and (not h[0][3].in_heap or h[0][2] != h[0][3].hgen):
            heapq.heappop(h)
        return h[0][3] if h else None

    # ---- groups and the ring ----

    def all_groups(self):
        yield self.seed
        yield from self.groups.values()

    def all_conns(self):
        for g in self.all_groups():
            yield from g.conns

    def count_conns(self):
        """Refreshes the figures stats() reads from other threads."""
        n = sum(len(g.conns) for g in self.all_groups())
        with self.mu:
            self.conn_count = n
            self.group_count = 1 + len(self.groups)

    def group_named(self, name):
        """The connection set of the ring's group name (None: no such group):
        the seed for the seed's group, else the group's own, made on its
        first use from the ring's addresses."""
        if self.router.is_seed(name):
            return self.seed
        g = self.groups.get(name)
        if g is not None:
            return g
        addrs = self.router.groups.get(name)
        if addrs is None:
            return None
        if len(self.groups) >= GROUP_SETS_MAX:
            self.prune()
            if len(self.groups) >= GROUP_SETS_MAX:
                self.log(1, f"group {name}: no room for another connection set")
                return None
        g = Group(self, name, addrs)
        self.groups[name] = g
        self.count_conns()
        self.log(2, f"group {name}: connecting to {','.join(addrs)}")
        return g

    def route(self, r):
        """The Group r goes to: the seed for a ping or a ring call; for a
        key, the group the ring gives its slot to, else (no ring, or no
        range covers the slot) the seed, whose answer decides."""
        if r.type in "PS":
            return self.seed
        g = self.group_named(self.router.group_of(r.slot))
        return g if g is not None else self.seed

    def take_ring(self, version, body):
        """A ring fetched: kept if newer than the one held (never an older
        one). Then each group's addresses follow it, connection sets it no
        longer names close once idle, and requests not written yet go where
        it says."""
        try:
            if not self.router.offer(version, body):
                return
        except ValueError as e:
            self.log(1, f"ring version {version} not taken: {e}")
            return
        with self.mu:
            self.ring_version = version
        if self.router.seed is not None:
            self.seed.name = self.router.seed
        for name, g in self.groups.items():
            addrs = self.router.groups.get(name)
            if addrs is not None and addrs != g.addrs:
                self.log(2, f"group {name}: addresses now {','.join(addrs)}")
                g.set_addrs(addrs)
        self.prune()
        for g in list(self.all_groups()):
            for rel in (True, False):
                lst = g.pending_rel if rel else g.pending
                stay = collections.deque()
                for r in lst:
                    t = g if r.internal else self.route(r)
                    if t is g:
                        stay.append(r)
                    else:
                        r.group = t
                        (t.pending_rel if rel else t.pending).append(r)
                lst.clear()
                lst.extend(stay)
        self.count_conns()
        self.log(2, f"ring version {version}: {len(self.router.ranges)} ranges, "
                    f"{len(self.router.groups)} groups"
                    + (f", the seed is {self.router.seed}" if self.router.seed else ""))

    def prune(self):
        """Closes the connection sets of groups the ring no longer names (or
        that turned out to be the seed) once they hold no request."""
        gone = [name for name, g in self.groups.items()
                if (name not in self.router.groups or self.router.is_seed(name)) and g.idle()]
        for name in gone:
            self.groups.pop(name).close()
        if gone:
            self.count_conns()

    def budget_end(self, r):
        return r.submit + _ring.budget(r.type, r.wait_ms, self.cfg.send_budget_min_ms,
                                       self.cfg.request_timeout, RELEASE_DEADLINE)

    def fetch_ring(self, group, now):
        """Asks group (it answered W) for its ring: an internal S request with
        a query's budget. One at a time; ring_fetched() takes its answer."""
        f = Req("S")
        f.internal = True
        f.submit = now
        f.group = group
        self.fetch = f
        self.st["ring_fetches"] += 1
        self.heap_set(f, self.budget_end(f))
        self.repend(f, False)

    def ring_fetched(self, res):
        self.fetch = None
        if res.outcome == ANSWERED:
            self.take_ring(res.ring_version, res.body)
        else:
            self.log(1, f"ring fetch: {res.outcome}"
                        + (f" ({res.reason})" if res.reason else ""))
        now = time.monotonic()
        waiters, self.ring_waiters = self.ring_waiters, []
        for r in waiters:
            r.park = None
            self.reroute(r, now)

    def on_wrong_group(self, r, rsp, group, now):
        """W: definite, nothing was done. r is unwritten again; it waits for
        a ring fetch if one is under way or the W names a newer ring, then
        goes where the ring says (reroute), within its budget."""
        r.w_slot, r.w_version, r.w_group = rsp.slot, rsp.version, group
        r.sent = None  # a resend is a new request: its lease counts from its own write
        end = self.budget_end(r)
        if r.type == "A":
            self.heap_set(r, end)  # unwritten again: its budget from the call
        if now >= end:
            self.finish(r, WRONG_GROUP)
            return
        if self.fetch is None and rsp.version > self.router.version:
            self.fetch_ring(group, now)
        if self.fetch is not None:
            r.park = "ring"
            self.ring_waiters.append(r)
            return
        self.reroute(r, now)

    def reroute(self, r, now):
        """r, answered W, goes to the group the ring names for its slot: at
        once if that is another group than the one that answered, after a
        pause if the same; WRONG_GROUP if the ring names none or the budget
        would end first."""
        target = self.group_named(self.router.group_of(r.slot))
        if target is None:
            self.finish(r, WRONG_GROUP)
            return
        at, r.pause = _ring.plan_resend(now, self.budget_end(r), target is r.w_group, r.pause)
        if at is None:
            self.finish(r, WRONG_GROUP)
            return
        r.group = target
        if at <= now:
            self.resend(r)
            return
        r.park = "pause"
        r.pgen += 1
        self.pseq += 1
        heapq.heappush(self.paused, (at, self.pseq, r.pgen, r))

    def resend(self, r):
        self.st["rerouted"] += 1
        self.repend(r, False)

    def paused_top(self):
        p = self.paused
        while p and (p[0][3].park != "pause" or p[0][2] != p[0][3].pgen):
            heapq.heappop(p)
        return p[0] if p else None

    def run_pauses(self, now):
        while True:
            top = self.paused_top()
            if top is None or top[0] > now:
                return
            heapq.heappop(self.paused)
            r = top[3]
            r.park = None
            # By the ring as it is now: it may have changed during the pause.
            target = self.group_named(self.router.group_of(r.slot))
            if target is None:
                self.finish(r, WRONG_GROUP)
            else:
                r.group = target
                self.resend(r)

    # ---- outcomes ----

    def result(self, r, outcome, reason=""):
        if outcome == WRONG_GROUP:  # the last W's slot and version
            return Result(outcome, reason=reason, slot=r.w_slot or 0, ring_version=r.w_version)
        return Result(outcome, reason=reason)

    def lapse(self, r):
        """The outcome of r when its budget ends undecided."""
        if r.w_slot is not None and r.wire != WIRE_SENT:
            return WRONG_GROUP  # answered W, not written again since: nothing was done
        if r.type == "R":
            return UNCONFIRMED
        if r.type == "A" and r.wire == WIRE_SENT:
            return INDETERMINATE
        return UNAVAILABLE

    def decide(self, r, res):
        assert not r.decided
        r.decided = True
        res.key = r.key
        res.sent = r.sent
        if r.internal:
            self.ring_fetched(res)
            return
        if r.type == "R":
            res.token = r.token
            res.resent = r.resent
        if res.outcome == INDETERMINATE:
            self.st["indeterminate"] += 1
        if r.compensation:
            self.log(2 if res.outcome in (RELEASED, NOT_HELD) else 1,
                     f"compensation release of {r.key} token {r.token}: {res.outcome}")
            return
        if not r.future.done():
            r.future.set_result(res)

    def free(self, r):
        """r is done with: give back its place in the client's bounds."""
        if r.internal:
            return
        with self.mu:
            if r.type == "R":
                self.live_releases -= 1
            else:
                self.live_requests -= 1

    def unqueue(self, r):
        """Takes r off its group's pending list, or out of a wait after W."""
        if r.pending:
            g = r.group
            (g.pending_rel if r.type == "R" else g.pending).remove(r)
            r.pending = False
        if r.park == "ring":
            self.ring_waiters.remove(r)
        elif r.park == "pause":
            r.pgen += 1  # its entry in the pause heap goes stale
        r.park = None

    def finish(self, r, outcome, reason=""):
        assert r.wire == WIRE_NONE
        self.unqueue(r)
        self.heap_remove(r)
        self.decide(r, self.result(r, outcome, reason))
        self.free(r)

    def repend(self, r, front):
        g = r.group
        lst = g.pending_rel if r.type == "R" else g.pending
        if front:
            lst.appendleft(r)
        else:
            lst.append(r)
        r.pending = True

    def accept(self, r):
        self.heap_set(r, self.budget_end(r))
        r.group = self.route(r)
        self.repend(r, False)

    def compensate(self, r, token):
        with self.mu:
            full = self.live_releases >= self.cfg.release_queue_max
            if not full:
                self.live_releases += 1
        if full:
            self.st["compensations_dropped"] += 1
            self.log(1, f"late grant of {r.key} token {token} not released: release queue "
                        f"full (the lease will free it)")
            return
        self.st["compensations"] += 1
        self.log(2, f"late grant of {r.key} token {token}: releasing it")
        c = Req("R", r.key, token=token)
        c.compensation = True
        c.submit = time.monotonic()
        self.accept(c)

    def grant_too_late(self, r, token):
        """A G for a pending acquire at or after the lease deadline counted
        from its first write: the lease may be someone else's already, so
        the caller must not enter. INDETERMINATE, reason "lease", and the
        token is released at once as a known-token compensation."""
        self.log(1, f"grant of {r.key} token {token} came after its lease had run out")
        self.compensate(r, token)
        return Result(INDETERMINATE, reason="lease")

    def zombie(self, r, now):
        until = now + ZOMBIE_LINGER
        if r.type == "A" and r.wire == WIRE_SENT:
            until += r.wait_sent_ms / 1000
        self.heap_set(r, until)

    def on_sent(self, r, now):
        r.wire = WIRE_SENT
        if r.sent is not None and r.type == "R":
            r.resent = True
        r.sent = now
        self.st["requests_written"] += 1
        if not r.decided and r.type == "A":
            self.heap_set(r, now + r.wait_sent_ms / 1000 + self.cfg.response_grace)

    def on_response(self, r, rsp, group, now):
        if r.decided:
            if r.type == "A" and rsp.type == "G":
                self.compensate(r, rsp.token)
            self.heap_remove(r)
            self.free(r)
            return
        t = rsp.type
        if t == "W":
            self.on_wrong_group(r, rsp, group, now)
            return
        if t == "G":
            # The lease counts from the commit; the first write is earlier.
            res = Result(ACQUIRED, token=rsp.token, lease_deadline=r.sent + r.lease_ms / 1000)
            if time.monotonic() >= res.lease_deadline:
                res = self.grant_too_late(r, rsp.token)
        elif t == "Q":
            res = Result(ANSWERED, token=rsp.token, held=rsp.owner is not None,
                         owner=rsp.owner, waiters=rsp.waiters)
        elif t == "P":
            res = Result(ANSWERED, rtt=max(0.0, now - r.sent))
        elif t == "S":
            res = Result(ANSWERED, ring_version=rsp.version, body=rsp.text)
        elif t == "E":
            res = Result(INVALID, reason=rsp.text[:15])
        else:
            res = Result({"T": TIMEOUT, "B": BUSY, "R": RELEASED, "N": NOT_HELD}[t])
        self.heap_remove(r)
        self.decide(r, res)
        self.free(r)

    def on_conn_lost(self, r):
        sent = r.wire == WIRE_SENT
        r.wire = WIRE_NONE
        r.conn = None
        if r.decided:  # a zombie: its answer is gone with the connection
            self.heap_remove(r)
            self.free(r)
        elif not sent or r.type != "A":
            # Not one byte written: the same request may go elsewhere (in
            # its group). A written release or read is safe to repeat.
            r.neutered = False
            self.repend(r, True)
        else:
            # Written, no answer: nobody knows whether it was granted.
            self.finish(r, INDETERMINATE)

    def expire(self, r, now):
        if r.decided:  # the linger of a zombie ended: forget its id
            r.conn.drop_slot(r)
            self.free(r)
            return
        o = self.lapse(r)
        if r.wire == WIRE_NONE:
            self.finish(r, o)
            return
        if r.wire == WIRE_QUEUED:
            r.conn.neuter(r)
        self.decide(r, self.result(r, o))
        self.zombie(r, now)

    def cancel_one(self, r, now):
        if r.decided or r.type != "A":
            return
        if r.wire == WIRE_NONE:
            if r.pending or r.park:
                self.finish(r, CANCELLED)
            return
        if r.wire == WIRE_QUEUED:
            r.conn.neuter(r)
        self.decide(r, Result(CANCELLED))
        self.zombie(r, now)

    # ---- the loop ----

    def dispatch(self, now):
        for g in self.all_groups():
            for lst in (g.pending_rel, g.pending):
                while lst:
                    k = g.pick_conn()
                    if k is None:
                        break
                    r = lst.popleft()
                    r.pending = False
                    k.queue(r, now)

    def parked(self):
        """The requests waiting after a W (for the ring fetch or a pause)."""
        out = list(self.ring_waiters)
        out += [e[3] for e in self.paused if e[3].park == "pause" and e[2] == e[3].pgen]
        return out

    def drain_begin(self, now):
        self.draining = True
        self.drain_deadline = now + RELEASE_DEADLINE
        for r in self.parked():
            if r.type != "R":
                self.finish(r, CANCELLED, "shutdown")
        for g in list(self.all_groups()):
            while g.pending:
                self.finish(g.pending[0], CANCELLED, "shutdown")
        for k in list(self.all_conns()):
            for r in list(k.slots.values()):
                if not r.decided and r.type != "R":
                    if r.wire == WIRE_QUEUED:
                        k.neuter(r)
                    self.decide(r, Result(CANCELLED, reason="shutdown"))
                    self.zombie(r, now)

    def drain_inbox(self, now):
        try:
            while self.wake_r.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass
        with self.mu:
            self.wake_pending = False
            sub, self.submitted = self.submitted, []
            cancels, self.cancels = self.cancels, []
            lookups, self.lookups = self.lookups, []
            stopping = self.stopping
        for r in sub:
            self.accept(r)
        for r in cancels:
            self.cancel_one(r, now)
        if stopping and not self.draining:
            self.drain_begin(now)
        for conn, host, res in lookups:
            conn.lookup_done(host, res, now)

    def run_timers(self, now):
        for k in list(self.all_conns()):
            t = k.next_timer()
            if t is not None and t <= now:
                k.timer(now)
        self.run_pauses(now)
        while True:
            r = self.heap_top()
            if r is None or r.deadline > now:
                break
            self.heap_remove(r)
            self.expire(r, now)

    def loop_timeout(self, now):
        nxt = None
        r = self.heap_top()
        if r is not None:
            nxt = r.deadline
        p = self.paused_top()
        if p is not None and (nxt is None or p[0] < nxt):
            nxt = p[0]
        for k in self.all_conns():
            t = k.next_timer()
            if t is not None and (nxt is None or t < nxt):
                nxt = t
        if self.draining and (nxt is None or self.drain_deadline < nxt):
            nxt = self.drain_deadline
        if nxt is None:
            return None
        return max(0.0, nxt - now)

    def drain_done(self, now):
        if now >= self.drain_deadline:
            return True
        with self.mu:
            return self.live_releases == 0

    def main(self):
        now = time.monotonic()
        for k in self.seed.conns:
            k.next_attempt = now
        self.drain_inbox(now)
        try:
            while True:
                self.run_timers(now)
                self.dispatch(now)
                for g in list(self.all_groups()):
                    if g.pending and g.tls_refused_all():
                        while g.pending:
                            self.finish(g.pending[0], UNAVAILABLE, "tls")
                for k in list(self.all_conns()):
                    k.flush(now)
                if self.draining and self.drain_done(now):
                    break
                events = self.sel.select(self.loop_timeout(now))
                now = time.monotonic()
                inbox = False
                for key, mask in events:
                    if key.data is None:
                        inbox = True
                    else:
                        key.data.event(mask, now)
                if inbox:
                    self.drain_inbox(now)
        finally:
            self.final_sweep()

    def final_sweep(self):
        for k in list(self.all_conns()):
            k.retire()
        if self.fetch is not None:  # its waiters go back to their lists, or end
            self.finish(self.fetch, CANCELLED, "shutdown")
        for r in self.parked():
            self.sweep_one(r)
        for g in list(self.all_groups()):
            while g.pending_rel:
                self.sweep_one(g.pending_rel[0])
            while g.pending:
                self.sweep_one(g.pending[0])
        with self.mu:
            late, self.submitted = self.submitted, []
        for r in late:  # submitted after the stop was seen
            self.decide(r, Result(CANCELLED, reason="shutdown"))
            self.free(r)
        self.sel.close()
        self.wake_r.close()
        self.wake_w.close()
        if self.resolver is not None:
            self.resolver.shutdown(wait=False)

    def sweep_one(self, r):
        """r when the client stops: a release is UNCONFIRMED (WRONG_GROUP if
        its last answer was W), anything else CANCELLED."""
        if r.type == "R":
            self.finish(r, self.lapse(r))
        else:
            self.finish(r, CANCELLED, "shutdown")
