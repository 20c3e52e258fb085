"""Real ticketingd processes for the Python client's tests.

The binary comes from TICKETING_BUILD_DIR (a CMake build directory holding
ticketingd), else from ../../build relative to the repository top. Ports are
picked free below the ephemeral range; each node needs three consecutive
ones (client P, peer P+1, admin P+2).
"""
import fcntl
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
PYDIR = os.path.dirname(HERE)
REPO = os.path.dirname(os.path.dirname(PYDIR))


def fault_proxy(port):
    """The conformance suite's fault proxy (tests/conformance/proxy.py) in
    front of 127.0.0.1:port: it can hold the bytes of either direction."""
    conformance = os.path.join(REPO, "tests", "conformance")
    if conformance not in sys.path:
        sys.path.insert(0, conformance)
    from proxy import FaultProxy
    return FaultProxy(port)


def build_dir():
    return os.environ.get("TICKETING_BUILD_DIR") or os.path.join(REPO, "build")


def ticketingd():
    path = os.path.join(build_dir(), "ticketingd")
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"no ticketingd at {path}: set TICKETING_BUILD_DIR")
    return path


def ticketctl(*args, timeout=60):
    """Runs the build's ticketctl: (exit status, stdout and stderr)."""
    path = os.path.join(build_dir(), "ticketctl")
    done = subprocess.run([path] + list(args), capture_output=True, text=True, timeout=timeout)
    return done.returncode, (done.stdout + done.stderr).strip()


def _port_free(p):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", p))
        except OSError:
            return False
    return True


_taken = set()
_locks = []


def _lock_block(p):
    # The 4-port block at p (p % 4 == 0) is this process's until it exits:
    # every Ticketing test harness locks blocks in this directory, so tests
    # running at once never pick the same ports.
    try:
        os.makedirs("/tmp/ticketing-test-ports", exist_ok=True)
        fd = os.open(f"/tmp/ticketing-test-ports/{p}", os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return False
    _locks.append(fd)
    return True


def free_ports3():
    for _ in range(1000):
        p = random.randrange(20000, 32000) & ~3
        if any(p + i in _taken for i in range(3)):
            continue
        if all(_port_free(p + i) for i in range(3)) and _lock_block(p):
            _taken.update((p, p + 1, p + 2))
            return p
    raise RuntimeError("no three free ports")


def write_secret(path, data=None):
    with open(path, "w") as f:
        f.write(data if data is not None else os.urandom(16).hex())
    os.chmod(path, 0o600)
    return path


class Node:
    def __init__(self, tmp, name, port, secret, args):
        self.dir = os.path.join(tmp, name)
        os.makedirs(self.dir, exist_ok=True)
        self.port = port
        self.addr = f"127.0.0.1:{port}"
        self.secret = secret
        self.args = args
        self.log = os.path.join(self.dir, "ticketingd.log")
        self.proc = None

    def start(self):
        argv = [ticketingd(), "--bind", "127.0.0.1", "--port", str(self.port),
                "--client-secret-file", self.secret] + self.args
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=log)

    def status(self):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port + 2}/status",
                                        timeout=1) as r:
                return json.loads(r.read())
        except (OSError, ValueError):
            return None

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def kill(self, sig=signal.SIGKILL):
        if self.alive():
            self.proc.send_signal(sig)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def pause(self):
        """SIGSTOP, then wait (up to 2 s) until every thread has stopped: the
        signal reaches each thread asynchronously, and one that was running
        can still answer a request sent at once."""
        self.proc.send_signal(signal.SIGSTOP)
        task = "/proc/%d/task" % self.proc.pid
        end = time.monotonic() + 2
        while time.monotonic() < end:
            try:
                states = []
                for t in os.listdir(task):
                    with open(os.path.join(task, t, "stat")) as f:
                        states.append(f.read().rsplit(")", 1)[1].split()[0])
                if states and all(st in ("T", "t") for st in states):
                    return
            except OSError:
                pass  # a thread ended while being read
            time.sleep(0.002)

    def log_tail(self):
        try:
            with open(self.log, errors="replace") as f:
                return f.read()[-2000:]
        except OSError:
            return ""


class Server:
    """A standalone node, or a cluster of n members, in a temporary directory.
    secret: the client secret file to use (default: a new one)."""

    def __init__(self, n=1, extra=(), secret=None):
        self.tmp = tempfile.mkdtemp(prefix="tk-py-")
        path = os.path.join(self.tmp, "client.secret")
        if secret is not None:  # the client secret of another Server (groups share it)
            with open(secret) as f:
                write_secret(path, f.read())
        self.secret = write_secret(path) if secret is None else path
        self.peer_secret = write_secret(os.path.join(self.tmp, "peer.secret"))
        self.nodes = []
        ports = [free_ports3() for _ in range(n)]
        peers = ",".join(f"127.0.0.1:{p + 1}" for p in ports)
        for i, p in enumerate(ports):
            args = ["--threads", "1"] + list(extra)
            if n > 1:
                args += ["--peers", peers, "--peer-secret-file", self.peer_secret,
                         "--advertise", f"127.0.0.1:{p}", "--heartbeat-ms", "50",
                         "--election-ms", "400"]
            self.nodes.append(Node(self.tmp, f"node{i}", p, self.secret, args))
        for nd in self.nodes:
            nd.start()
        if self.leader(15) is None:
            logs = "\n".join(nd.log_tail() for nd in self.nodes)
            self.stop()
            raise RuntimeError("no serving node after 15 s:\n" + logs)

    @property
    def addrs(self):
        return ",".join(nd.addr for nd in self.nodes)

    def leader(self, timeout, skip=()):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for nd in self.nodes:
                if nd in skip or not nd.alive():
                    continue
                st = nd.status()
                if st and st.get("serving") is True:
                    return nd
                if len(self.nodes) == 1 and st is not None and "serving" not in st:
                    return nd
            time.sleep(0.05)
        return None

    def stop(self):
        for nd in self.nodes:
            nd.kill(signal.SIGTERM)
        shutil.rmtree(self.tmp, ignore_errors=True)
