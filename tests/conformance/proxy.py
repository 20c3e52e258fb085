"""A scriptable TCP fault proxy for the client conformance suite.

It listens on a free 127.0.0.1 port and forwards every connection to one
upstream ticketingd address. On command it cuts connections, holds bytes
in either direction, cuts a connection after N more client->server bytes
(in the middle of a request line), injects an `M host:port` line and then
closes (what a node that stops serving does), refuses new connections
(accept, then close at once), or plays a node that accepts and never says
a word (no banner, nothing forwarded).

Everything runs on one thread with a selector. Control calls may come from
any thread; each returns once the proxy thread has applied it, so "cut now"
means the sockets are closed when the call returns. Held bytes stay in the
kernel buffers (the held side is simply not read), as with a stalled peer,
and are lost if the connection is cut.
"""

import fcntl
import os
import selectors
import socket
import struct
import termios
import threading
import time


class _Conn:
    def __init__(self, client, upstream):
        self.client = client
        self.upstream = upstream  # None for a silent connection
        self.c2s_left = None  # bytes still forwarded before the cut, or None


class FaultProxy:
    def __init__(self, target_port, target_host="127.0.0.1"):
        self.target = (target_host, target_port)
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.listener.setblocking(False)
        self.port = self.listener.getsockname()[1]
        self.sel = selectors.DefaultSelector()
        self.conns = []
        self.hold_c2s = False
        self.hold_s2c = False
        self.refusing = False
        self.silent = False
        self.accepts = 0
        self.bytes_c2s = 0
        self._calls = []
        self._lock = threading.Lock()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        self.sel.register(self.listener, selectors.EVENT_READ, ("listen", None))
        self.sel.register(self._wake_r, selectors.EVENT_READ, ("wake", None))
        self._stop = False
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    # ---- control (any thread) ------------------------------------------------

    def _call(self, fn):
        done = threading.Event()
        box = {}

        def run():
            box["v"] = fn()
            done.set()

        with self._lock:
            self._calls.append(run)
        os.write(self._wake_w, b"x")
        if not done.wait(10):
            raise RuntimeError("proxy thread did not answer")
        return box.get("v")

    def hold(self, c2s, s2c):
        """Stop (True) or resume (False) forwarding in each direction, on
        every connection, current and future."""

        def fn():
            self.hold_c2s, self.hold_s2c = bool(c2s), bool(s2c)
            for c in self.conns:
                self._arm(c)

        self._call(fn)

    def cut_all(self):
        """Closes every live connection (both sides) now; returns how many."""

        def fn():
            n = len(self.conns)
            for c in list(self.conns):
                self._close(c)
            return n

        return self._call(fn)

    def cut_after(self, n):
        """Each live connection forwards at most n more client->server
        bytes, then is cut (0: at its next client byte)."""

        def fn():
            for c in self.conns:
                c.c2s_left = int(n)

        self._call(fn)

    def refuse(self, on):
        """New connections are accepted and closed at once while on."""

        def fn():
            self.refusing = bool(on)

        self._call(fn)

    def set_silent(self, on):
        """New connections are accepted and never answered while on: no
        upstream connection, client bytes are read and dropped."""

        def fn():
            self.silent = bool(on)

        self._call(fn)

    def inject_m(self, text):
        """Sends `M <text>` on every live connection, past any held server
        bytes, then closes it, as a node that stops serving does."""
        line = ("M %s\n" % text).encode()

        def fn():
            n = 0
            for c in list(self.conns):
                try:
                    c.client.setblocking(True)
                    c.client.sendall(line)
                    n += 1
                except OSError:
                    pass
                self._close(c)
            return n

        return self._call(fn)

    def pending_c2s(self):
        """Client bytes waiting, unread, in the proxy's sockets: what a held
        client->server direction keeps back."""

        def fn():
            n = 0
            for c in self.conns:
                try:
                    buf = fcntl.ioctl(c.client.fileno(), termios.FIONREAD, b"\0" * 4)
                    n += struct.unpack("i", buf)[0]
                except OSError:
                    pass
            return n

        return self._call(fn)

    def live(self):
        return self._call(lambda: len(self.conns))

    def stop(self):
        def fn():
            for c in list(self.conns):
                self._close(c)
            self._stop = True

        try:
            self._call(fn)
        except RuntimeError:
            pass
        self.thread.join(5)
        self.sel.close()
        self.listener.close()
        os.close(self._wake_r)
        os.close(self._wake_w)

    # ---- the proxy thread ---------------------------------------------------------

    def _want(self, sock, key):
        try:
            self.sel.register(sock, selectors.EVENT_READ, key)
        except KeyError:
            pass

    def _unwant(self, sock):
        try:
            self.sel.unregister(sock)
        except (KeyError, ValueError):
            pass

    def _arm(self, c):
        if c.upstream is None:
            self._want(c.client, ("c2s", c))
            return
        if self.hold_c2s:
            self._unwant(c.client)
        else:
            self._want(c.client, ("c2s", c))
        if self.hold_s2c:
            self._unwant(c.upstream)
        else:
            self._want(c.upstream, ("s2c", c))

    def _close(self, c):
        for s in (c.client, c.upstream):
            if s is None:
                continue
            self._unwant(s)
            try:
                s.close()
            except OSError:
                pass
        if c in self.conns:
            self.conns.remove(c)

    def _accept(self):
        try:
            s, _ = self.listener.accept()
        except OSError:
            return
        self.accepts += 1
        if self.refusing:
            s.close()
            return
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.silent:
            c = _Conn(s, None)
            self.conns.append(c)
            self._arm(c)
            return
        try:
            u = socket.create_connection(self.target, timeout=2)
        except OSError:
            s.close()
            return
        u.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.setblocking(True)
        u.setblocking(True)
        c = _Conn(s, u)
        self.conns.append(c)
        self._arm(c)

    def _forward(self, direction, c):
        src = c.client if direction == "c2s" else c.upstream
        try:
            data = src.recv(65536)
        except OSError:
            data = b""
        if not data:
            self._close(c)
            return
        if direction == "c2s":
            if c.upstream is None:
                return  # a silent node: read and drop
            cut = False
            if c.c2s_left is not None:
                if len(data) >= c.c2s_left:
                    data = data[: c.c2s_left]
                    cut = True
                else:
                    c.c2s_left -= len(data)
            try:
                if data:
                    c.upstream.sendall(data)
                    self.bytes_c2s += len(data)
            except OSError:
                cut = True
            if cut:
                # Let the partial line reach the server before the close.
                time.sleep(0.05)
                self._close(c)
        else:
            try:
                c.client.sendall(data)
            except OSError:
                self._close(c)

    def _loop(self):
        while not self._stop:
            for key, _ in self.sel.select(0.5):
                kind, c = key.data
                if kind == "listen":
                    self._accept()
                elif kind == "wake":
                    try:
                        os.read(self._wake_r, 4096)
                    except BlockingIOError:
                        pass
                    with self._lock:
                        calls, self._calls = self._calls, []
                    for fn in calls:
                        fn()
                elif c in self.conns:
                    self._forward(kind, c)
