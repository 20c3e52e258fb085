#!/usr/bin/env python3
"""Runs the client conformance scenarios against every driver given.

    run.py --build BUILD_DIR --driver c=BUILD_DIR/ticketing-c-driver \
           [--driver python="python3 -m ticketing.driver"] [--driver go=PATH] \
           [--scenarios FILE] [--only NAME[,NAME...]] [--verbose]

Each scenario of scenarios.json starts its own ticketingd node(s) on
127.0.0.1 (BUILD_DIR/ticketingd), its fault proxies (proxy.py) and one
driver process, then plays its steps: driver commands with the replies they
must give, proxy faults, server actions (kill -9 the leader, SIGSTOP and
SIGCONT a node) and checks of the server's own view over a connection that
bypasses the proxies. docs/testing.md ("Client conformance") describes the
format. One line per (scenario, driver), then "N passed, N failed"; the exit
status is 1 if anything failed. Python 3 standard library only.
"""

import argparse
import fcntl
import hashlib
import hmac
import json
import os
import random
import select
import shlex
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from proxy import FaultProxy  # noqa: E402

SECRET = b"conformance-client-secret-0123456789"
PEER_SECRET = b"conformance-peer-secret-0123456789"
REPLY_TIMEOUT_S = 40
MAKE_CERTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support",
                          "make_certs.sh")
OUTCOMES = {
    "ACQUIRED", "TIMEOUT", "BUSY", "INVALID", "UNAVAILABLE", "INDETERMINATE",
    "CANCELLED", "RELEASED", "NOT_HELD", "UNCONFIRMED", "QUEUE_FULL", "ANSWERED",
    "WRONG_GROUP", "OK", "DRIVER_ERROR",
}
# The members each reply must carry, by command, with their JSON types.
SHAPES = {
    "acquire": {"token": int},
    "release": {"resent": bool},
    "slot": {"slot": int},
    "ring": {"version": int, "body": str},
    "query": {"held": bool, "owner": (str, type(None)), "token": int, "waiters": int},
    "stats": {"compensations": int, "indeterminate": int, "moved": int,
              "releases_queued": int, "ring_version": int, "rerouted": int},
}


class StepFailed(Exception):
    pass


def now_ms():
    return time.monotonic() * 1000.0


# ---- ports, nodes, the server's view ------------------------------------------


def port_free(p):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("127.0.0.1", p))
        return True
    except OSError:
        return False
    finally:
        s.close()


PORT_LOCKS = "/tmp/ticketing-test-ports"
_port_locks = []


def lock_block(p):
    """Locks the 4-port block at p (p % 4 == 0) for the rest of this process,
    as every test harness of the project does, so tests running at once never
    pick the same ports. False if another process holds it."""
    try:
        os.makedirs(PORT_LOCKS, exist_ok=True)
        fd = os.open(os.path.join(PORT_LOCKS, str(p)), os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:
        return True  # no lock directory: the bind check alone
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return False
    _port_locks.append(fd)
    return True


def free_port3(taken):
    for _ in range(2000):
        p = random.randrange(10000, 32700) & ~3  # below the ephemeral range
        if any(q in taken for q in (p, p + 1, p + 2)):
            continue
        if all(port_free(q) for q in (p, p + 1, p + 2)) and lock_block(p):
            taken.update((p, p + 1, p + 2))
            return p
    raise RuntimeError("no three consecutive free ports")


def write_secret(path, data):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data + b"\n")


class Node:
    def __init__(self, binary, port, workdir, idx, extra):
        self.port = port
        self.idx = idx
        self.log = os.path.join(workdir, "node%d.log" % idx)
        args = [binary, "--bind", "127.0.0.1", "--port", str(port),
                "--client-secret-file", os.path.join(workdir, "client.secret"),
                "--threads", "1"] + extra
        with open(self.log, "ab") as logf:
            self.proc = subprocess.Popen(args, stdout=logf, stderr=logf,
                                         stdin=subprocess.DEVNULL)

    def alive(self):
        return self.proc.poll() is None

    def signal(self, sig):
        if self.alive():
            self.proc.send_signal(sig)
            if sig == signal.SIGSTOP:
                self.await_stopped()

    def await_stopped(self, timeout=2.0):
        """SIGSTOP reaches each thread asynchronously: a thread that was
        running may still answer a request sent at once (seen in CI)."""
        task = "/proc/%d/task" % self.proc.pid
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                states = []
                for tid in os.listdir(task):
                    with open("%s/%s/stat" % (task, tid)) as f:
                        states.append(f.read().rsplit(")", 1)[1].split()[0])
            except OSError:  # a thread ended while being read, or the process
                if not self.alive():
                    return
                continue
            if states and all(st in ("T", "t") for st in states):
                return
            time.sleep(0.002)

    def kill(self):
        if self.alive():
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
        self.proc.wait()

    def status(self):
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/status" % (self.port + 2),
                                        timeout=1) as r:
                return r.read().decode()
        except OSError:
            return ""

    def serves(self):
        body = self.status()
        return '"role":"leader"' in body and '"serving":false' not in body


class LineClient:
    """A connection to a node (no proxy), with the handshake; over TLS when
    given the runner's TLS context (Run.tls_ctx)."""

    def __init__(self, port, timeout=5.0, tls_ctx=None):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        if tls_ctx is not None:
            try:
                self.sock = tls_ctx.wrap_socket(self.sock, server_hostname="127.0.0.1")
            except (ssl.SSLError, OSError):
                self.sock.close()
                raise
        self.buf = b""
        banner = self.line()
        if not banner.startswith("TICKETING/1 "):
            raise OSError("no banner: %r" % banner)
        snonce = banner.split()[1]
        cnonce = os.urandom(32).hex()
        msg = "ticketing/1 client %s %s" % (snonce, cnonce)
        proof = hmac.new(SECRET, msg.encode(), hashlib.sha256).hexdigest()
        self.sock.sendall(("AUTH %s %s\n" % (cnonce, proof)).encode())
        ok = self.line()
        want = hmac.new(SECRET, ("ticketing/1 server %s %s" % (snonce, cnonce)).encode(),
                        hashlib.sha256).hexdigest()
        if not ok.startswith("OK ") or ok.split()[1] != want:
            raise OSError("handshake refused: %r" % ok)

    def line(self):
        while b"\n" not in self.buf:
            data = self.sock.recv(4096)
            if not data:
                raise OSError("closed")
            self.buf += data
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode().rstrip("\r")

    def ask(self, text):
        self.sock.sendall((text + "\n").encode())
        return self.line()

    def close(self):
        self.sock.close()


# ---- a driver process ----------------------------------------------------------


class Driver:
    def __init__(self, argv, workdir, env):
        self.errf = open(os.path.join(workdir, "driver.stderr"), "w+b")
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.errf, env=env)
        self.buf = b""
        self.sent = []  # ops written and not answered yet

    def send(self, line, op):
        try:
            self.proc.stdin.write(line.encode() + b"\n")
            self.proc.stdin.flush()
        except OSError as e:
            raise StepFailed("the driver does not read its commands (%s)" % e)
        self.sent.append(op)

    def recv(self, timeout_s=REPLY_TIMEOUT_S):
        end = time.monotonic() + timeout_s
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buf:
            left = end - time.monotonic()
            if left <= 0:
                raise StepFailed("no reply from the driver within %d s" % timeout_s)
            r, _, _ = select.select([fd], [], [], left)
            if r:
                data = os.read(fd, 65536)
                if not data:
                    raise StepFailed("the driver exited (status %s) without a reply"
                                     % self.proc.wait())
                self.buf += data
        line, self.buf = self.buf.split(b"\n", 1)
        op = self.sent.pop(0) if self.sent else None
        try:
            reply = json.loads(line)
        except ValueError:
            raise StepFailed("the driver's reply is not JSON: %r" % line[:200])
        if not isinstance(reply, dict):
            raise StepFailed("the driver's reply is not an object: %r" % line[:200])
        return op, reply

    def stderr_tail(self):
        try:
            self.errf.seek(0)
            return self.errf.read()[-1500:].decode(errors="replace")
        except OSError:
            return ""

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.errf.close()


# ---- expectations ----------------------------------------------------------------


def subst(v, env):
    if isinstance(v, str) and v.startswith("$"):
        if v[1:] not in env:
            raise StepFailed("unknown variable %s" % v)
        return env[v[1:]]
    if isinstance(v, dict):
        return {k: subst(x, env) for k, x in v.items()}
    if isinstance(v, list):
        return [subst(x, env) for x in v]
    return v


OPS = {
    "eq": lambda a, b: a == b,
    "ne": lambda a, b: a != b,
    "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b,
    "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b,
    "in": lambda a, b: a in b,
}


def mismatch(reply, expect, env):
    """The first expectation the reply breaks, as a sentence, or None."""
    for field, want in expect.items():
        if field not in reply:
            return "no %r in the reply" % field
        got = reply[field]
        want = subst(want, env)
        if isinstance(want, dict) and want and set(want) <= set(OPS):
            for op, arg in want.items():
                try:
                    ok = OPS[op](got, arg)
                except TypeError:
                    ok = False
                if not ok:
                    return "%s = %r, wanted %s %r" % (field, got, op, arg)
        elif isinstance(want, list):
            if got not in want:
                return "%s = %r, wanted one of %r" % (field, got, want)
        elif got != want or type(got) is not type(want):
            return "%s = %r, wanted %r" % (field, got, want)
    return None


def check_shape(op, reply):
    out = reply.get("outcome")
    if out not in OUTCOMES:
        return "outcome %r is not one of the protocol's" % (out,)
    if out == "DRIVER_ERROR":
        return None if isinstance(reply.get("message"), str) else "DRIVER_ERROR without message"
    if not isinstance(reply.get("elapsed_ms"), int) or isinstance(reply.get("elapsed_ms"), bool):
        return "no integer elapsed_ms"
    for field, typ in SHAPES.get(op, {}).items():
        if field not in reply or not isinstance(reply[field], typ) or (
                typ is int and isinstance(reply[field], bool)):
            return "%s reply without a proper %r" % (op, field)
    return None


# ---- one scenario with one driver -------------------------------------------------


class Run:
    def __init__(self, scn, name, argv, build, verbose):
        self.scn = scn
        self.client = name
        self.argv = argv
        self.build = build
        self.verbose = verbose
        self.nodes = []
        self.proxies = {}
        self.driver = None
        self.env = {}
        self.timers = []
        self.errors = []  # from delayed actions
        self.killed = None
        self.taken = set()  # ports picked by this run
        self.groups = {}  # gid -> {"name", "nodes"} when the scenario has groups
        self.moves = []  # (exit status, output) of each move, in order
        self.workdir = tempfile.mkdtemp(prefix="tk-conf-")
        self.certs = None  # the certificates' directory when the scenario runs TLS
        self.tls_ctx = None  # the runner's own TLS client context, made once

    def log(self, msg):
        if self.verbose:
            print("    [%s/%s] %s" % (self.scn["name"], self.client, msg), flush=True)

    # setup

    def make_certs(self):
        self.certs = os.path.join(self.workdir, "certs")
        done = subprocess.run(["sh", MAKE_CERTS, self.certs], capture_output=True)
        if done.returncode != 0:
            raise StepFailed("cannot make test certificates (openssl?): %s"
                             % done.stderr.decode(errors="replace"))
        self.tls_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        self.tls_ctx.load_verify_locations(cafile=os.path.join(self.certs, "ca.pem"))
        self.tls_ctx.load_cert_chain(os.path.join(self.certs, "client.pem"),
                                     os.path.join(self.certs, "client.key"))

    def start_nodes(self, count, tls, server_args):
        """Starts one standalone node or one cluster of count nodes and
        waits until it serves; returns its nodes (also in self.nodes)."""
        write_secret(os.path.join(self.workdir, "client.secret"), SECRET)
        write_secret(os.path.join(self.workdir, "peer.secret"), PEER_SECRET)
        binary = os.path.join(self.build, "ticketingd")
        ports = [free_port3(self.taken) for _ in range(count)]
        nodes = []
        for p in ports:
            extra = []
            if count > 1:
                extra = ["--peers", ",".join("127.0.0.1:%d" % (q + 1) for q in ports),
                         "--peer-secret-file", os.path.join(self.workdir, "peer.secret"),
                         "--advertise", "127.0.0.1:%d" % p,
                         "--heartbeat-ms", "50", "--election-ms", "600"]
            if tls:
                # Client and peer ports: mutual TLS, every certificate from the CA.
                extra += ["--tls-cert", os.path.join(self.certs, "node.pem"),
                          "--tls-key", os.path.join(self.certs, "node.key"),
                          "--tls-ca", os.path.join(self.certs, "ca.pem"), "--tls-client-auth"]
            nodes.append(Node(binary, p, self.workdir, len(self.nodes), extra + list(server_args)))
            self.nodes.append(nodes[-1])
        end = time.monotonic() + 20
        while time.monotonic() < end:
            if count == 1:
                try:
                    LineClient(ports[0], timeout=1, tls_ctx=self.tls_ctx).close()
                    return nodes
                except OSError:
                    pass
            elif self.leader(nodes) is not None:
                return nodes
            if not all(n.alive() for n in nodes):
                raise StepFailed("ticketingd exited at start (see %s)" % nodes[0].log)
            time.sleep(0.05)
        raise StepFailed("no serving node within 20 s")

    # groups (SPEC 15): each a 3-node cluster started with --group, given
    # the scenario's ring over its peer port by ticketctl ring apply

    def ring_file(self, ring):
        """Writes a ring file of {"version": N, "ranges": [["F-L", "gid"], ...]}
        with each group's client addresses; returns its path."""
        path = os.path.join(self.workdir, "ring-%d.txt" % ring["version"])
        lines = ["version %d" % ring["version"]]
        for rng, gid in ring["ranges"]:
            g = self.groups[gid]
            lines.append("%s=%s@%s" % (rng, g["name"],
                                       ",".join("127.0.0.1:%d" % n.port for n in g["nodes"])))
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        return path

    def ticketctl(self, args, timeout_s=60):
        argv = [os.path.join(self.build, "ticketctl")] + args
        self.log("ticketctl: %s" % " ".join(shlex.quote(a) for a in argv))
        done = subprocess.run(argv, capture_output=True, timeout=timeout_s)
        out = (done.stdout + done.stderr).decode(errors="replace").strip()
        self.log("  -> exit %d: %s" % (done.returncode, out))
        return done.returncode, out

    def peers(self, gid):
        return ",".join("127.0.0.1:%d" % (n.port + 1) for n in self.groups[gid]["nodes"])

    def start_groups(self, groups, ring, tls, server_args):
        for gid in sorted(groups):
            name = groups[gid]["name"]
            nodes = self.start_nodes(groups[gid].get("nodes", 3), tls,
                                     ["--group", name] + list(server_args))
            self.groups[gid] = {"name": name, "nodes": nodes}
        path = self.ring_file(ring)
        for gid in sorted(groups):
            rc, out = self.ticketctl(["ring", "apply", path, "--group", self.groups[gid]["name"],
                                      "--peers", self.peers(gid), "--peer-secret-file",
                                      os.path.join(self.workdir, "peer.secret"),
                                      "--timeout", "20s"])
            if rc != 0:
                raise StepFailed("ring apply to group %s: exit %d: %s" % (gid, rc, out))

    def move(self, step):
        """ticketctl slots move RANGE from group `from` to group `to` with
        the ring the move ends in; its exit status and output are kept for
        await_move."""
        path = self.ring_file(step["ring"])
        src, dst = step["from"], step["to"]
        rc, out = self.ticketctl(["slots", "move", step["range"],
                                  "--group", self.groups[src]["name"],
                                  "--to", self.groups[dst]["name"], "--ring", path,
                                  "--peers", self.peers(src), "--to-peers", self.peers(dst),
                                  "--peer-secret-file", os.path.join(self.workdir, "peer.secret"),
                                  "--wait", "%ds" % (step.get("wait_ms", 30000) // 1000)],
                                 timeout_s=step.get("wait_ms", 30000) / 1000 + 30)
        self.moves.append((rc, out))

    def leader(self, nodes=None):
        for n in self.nodes if nodes is None else nodes:
            if n.alive() and n.serves():
                return n
        return None

    def group_nodes(self, gid):
        if gid is None:
            return self.nodes
        if gid not in self.groups:
            raise StepFailed("no group %r in this scenario" % gid)
        return self.groups[gid]["nodes"]

    def resolve_addr(self, a):
        kind, _, arg = a.partition(":")
        if kind == "proxy":
            return "127.0.0.1:%d" % self.proxies[arg].port
        if kind == "node":
            return "127.0.0.1:%d" % self.nodes[int(arg)].port
        if kind in ("leader", "follower"):
            lead = self.leader()
            if lead is None:
                raise StepFailed("no leader")
            pick = lead if kind == "leader" else next(n for n in self.nodes if n is not lead)
            return "127.0.0.1:%d" % pick.port
        if kind == "group":  # every client address of a group
            return ",".join("127.0.0.1:%d" % n.port for n in self.group_nodes(arg))
        if kind == "closed":  # a port where nothing listens
            return "127.0.0.1:%d" % free_port3(self.taken)
        raise StepFailed("bad address %r" % a)

    def setup(self):
        st = self.scn["setup"]
        tls = st.get("tls")
        if tls is not None:
            self.make_certs()
        if "groups" in st:
            self.start_groups(st["groups"], st["ring"], tls is not None, st.get("server_args", []))
        else:
            self.start_nodes(st.get("nodes", 1), tls is not None, st.get("server_args", []))
        for pname, p in st.get("proxies", {}).items():
            target = self.nodes[p.get("node", 0)].port
            if p.get("to") == "leader":
                target = self.leader().port
            self.proxies[pname] = FaultProxy(target)
            if p.get("silent"):
                self.proxies[pname].set_silent(True)
            if p.get("refuse"):
                self.proxies[pname].refuse(True)
        owner = "conf-%s-%s-%d" % (self.scn["name"][:24], self.client, os.getpid())
        self.env["owner"] = owner
        addrs = ",".join(self.resolve_addr(a) for a in st["addrs"])
        argv = self.argv + ["--addrs", addrs,
                            "--secret-file", os.path.join(self.workdir, "client.secret"),
                            "--owner", owner]
        for k, v in st.get("knobs", {}).items():
            argv += ["--" + k, str(v)]
        if tls is not None:
            # The driver's TLS files: the CA it trusts (another one to see a
            # server refused) and its client certificate.
            argv += ["--tls-ca-file", os.path.join(self.certs, tls.get("ca", "ca.pem")),
                     "--tls-cert-file", os.path.join(self.certs, "client.pem"),
                     "--tls-key-file", os.path.join(self.certs, "client.key")]
        self.log("driver: %s" % " ".join(shlex.quote(a) for a in argv))
        self.driver = Driver(argv, self.workdir, os.environ.copy())

    # the server's view

    def server_port(self, gid=None):
        nodes = self.group_nodes(gid)
        n = self.leader(nodes) if len(nodes) > 1 else nodes[0]
        if n is None:
            raise StepFailed("no serving node to ask")
        return n.port

    def server_query(self, key, gid=None):
        c = LineClient(self.server_port(gid), tls_ctx=self.tls_ctx)
        try:
            parts = c.ask("Q 1 %s" % key).split()
        finally:
            c.close()
        if len(parts) == 4 and parts[0] == "W":
            return {"wrong_group": True, "held": False, "owner": None, "token": 0, "waiters": 0}
        if len(parts) != 5 or parts[0] != "Q":
            raise StepFailed("the server answered the query with %r" % " ".join(parts))
        return {"wrong_group": False, "held": parts[3] != "0",
                "owner": parts[2] if parts[3] != "0" else None,
                "token": int(parts[3]), "waiters": int(parts[4])}

    # actions

    def proxy_action(self, step):
        p = self.proxies[step["proxy"]]
        act = step["action"]
        if act == "hold":
            p.hold(step.get("c2s", False), step.get("s2c", False))
        elif act == "cut_all":
            p.cut_all()
        elif act == "cut_after":
            p.cut_after(step["bytes"])
        elif act == "refuse":
            p.refuse(step.get("on", True))
        elif act == "silent":
            p.set_silent(step.get("on", True))
        elif act == "inject_m":
            p.inject_m(self.resolve_addr(step["to"]))
        else:
            raise StepFailed("unknown proxy action %r" % act)

    def server_action(self, step):
        act = step["server"]
        if act == "kill_leader":
            lead = self.leader()
            if lead is None:
                raise StepFailed("no leader to kill")
            self.killed = lead
            lead.proc.kill()
            lead.proc.wait()
        elif act in ("stop", "cont", "kill"):
            n = self.nodes[step.get("node", 0)]
            n.signal({"stop": signal.SIGSTOP, "cont": signal.SIGCONT,
                      "kill": signal.SIGKILL}[act])
        elif act in ("acquire", "release"):
            # Another owner's grant, held by the runner itself on a group's
            # leader (the driver plays one sequential client).
            c = LineClient(self.server_port(step.get("group")), tls_ctx=self.tls_ctx)
            try:
                if act == "acquire":
                    got = c.ask("A 1 %s conf-runner %d 0" % (step["key"], step["lease_ms"]))
                    parts = got.split()
                    if len(parts) != 3 or parts[0] != "G":
                        raise StepFailed("the runner's acquire of %s: %r" % (step["key"], got))
                    self.env[step["save"]] = int(parts[2])
                else:
                    token = subst(step["token"], self.env)
                    got = c.ask("R 1 %s conf-runner %d" % (step["key"], token))
                    if got.split()[:1] != ["R"]:
                        raise StepFailed("the runner's release of %s: %r" % (step["key"], got))
            finally:
                c.close()
        elif act == "move":
            self.move(step)
        elif act == "await_move":
            end = time.monotonic() + step.get("within_ms", 60000) / 1000
            while not self.moves and time.monotonic() < end:
                time.sleep(0.05)
            if not self.moves:
                raise StepFailed("the move did not end")
            rc, out = self.moves.pop(0)
            if rc != step.get("exit", 0):
                raise StepFailed("slots move exited %d (wanted %d): %s"
                                 % (rc, step.get("exit", 0), out))
        elif act == "await_new_leader":
            end = time.monotonic() + step.get("within_ms", 20000) / 1000
            while time.monotonic() < end:
                lead = self.leader()
                if lead is not None and lead is not self.killed:
                    return
                time.sleep(0.05)
            raise StepFailed("no new leader")
        else:
            raise StepFailed("unknown server action %r" % act)

    def later(self, fn, step):
        def run():
            try:
                fn(step)
            except Exception as e:  # reported at the next step
                self.errors.append("delayed %r: %s" % (step, e))

        t = threading.Timer(step["delay_ms"] / 1000.0, run)
        t.start()
        self.timers.append(t)

    def check(self, step):
        key = step["key"]
        end = now_ms() + step.get("within_ms", 0)
        while True:
            view = self.server_query(key, step.get("group"))
            if "held" in step:
                bad = None if view["held"] == step["held"] else "held = %r" % view["held"]
            else:
                bad = mismatch(view, step.get("expect", {}), self.env)
            if bad is None:
                return
            if now_ms() >= end:
                raise StepFailed("server view of %s: %s" % (key, bad))
            time.sleep(0.05)

    def reply_step(self, op, reply, step, t_sent):
        bad = check_shape(op, reply)
        if bad is None:
            bad = mismatch(reply, step.get("expect", {}), self.env)
        if bad is None and "min_elapsed_ms" in step and reply["elapsed_ms"] < step["min_elapsed_ms"]:
            bad = "elapsed_ms = %d, the rule says not before %d" % (
                reply["elapsed_ms"], step["min_elapsed_ms"])
        if bad is None and "max_elapsed_ms" in step and reply["elapsed_ms"] > step["max_elapsed_ms"]:
            bad = "elapsed_ms = %d, the rule says by %d" % (reply["elapsed_ms"],
                                                            step["max_elapsed_ms"])
        if bad is None:
            for var, field in step.get("save", {}).items():
                self.env[var] = reply[field]
        return bad

    def command(self, step):
        if "raw" in step:
            line, op = step["raw"], None
        else:
            cmd = subst(step.get("do") or step.get("send"), self.env)
            line, op = json.dumps(cmd), cmd.get("op")
        poll_end = now_ms() + step.get("poll_ms", 0)
        while True:
            t = now_ms()
            self.driver.send(line, op)
            if "send" in step:
                return
            op_, reply = self.driver.recv()
            self.log("%s -> %s" % (line, json.dumps(reply)))
            bad = self.reply_step(op_, reply, step, t)
            if bad is None:
                return
            if now_ms() >= poll_end:
                raise StepFailed("%s -> %s: %s" % (line, json.dumps(reply), bad))
            time.sleep(0.05)

    def step(self, step):
        if self.errors:
            raise StepFailed(self.errors[0])
        if "do" in step or "send" in step or "raw" in step:
            self.command(step)
        elif "recv" in step:
            op, reply = self.driver.recv()
            self.log("(pending %s) -> %s" % (op, json.dumps(reply)))
            bad = self.reply_step(op, reply, step, None)
            if bad is not None:
                raise StepFailed("reply to the pending %s -> %s: %s" % (op, json.dumps(reply), bad))
        elif "proxy" in step:
            if "delay_ms" in step:
                self.later(self.proxy_action, step)
            elif step["action"] == "expect":
                p = self.proxies[step["proxy"]]
                end = now_ms() + step.get("within_ms", 0)
                while True:
                    view = {"accepts": p.accepts, "bytes_c2s": p.bytes_c2s,
                            "pending_c2s": p.pending_c2s(), "live": p.live()}
                    bad = mismatch(view, step["expect"], self.env)
                    if bad is None:
                        break
                    if now_ms() >= end:
                        raise StepFailed("proxy %s: %s" % (step["proxy"], bad))
                    time.sleep(0.02)
            else:
                self.proxy_action(step)
        elif "server" in step:
            if "delay_ms" in step:
                self.later(self.server_action, step)
            else:
                self.server_action(step)
        elif "check" in step:
            self.check(step)
        elif "pause_ms" in step:
            time.sleep(step["pause_ms"] / 1000.0)
        else:
            raise StepFailed("unknown step %r" % step)

    def play(self):
        """Returns None on success, else the failure sentence."""
        steps = self.scn["steps"]
        i = -1
        try:
            self.setup()
            for i, st in enumerate(steps):
                self.step(st)
            i = len(steps)
            for t in self.timers:
                t.join()
            if self.errors:
                raise StepFailed(self.errors[0])
            # Every session ends with close: OK, then exit status 0.
            self.driver.send(json.dumps({"op": "close"}), "close")
            _, reply = self.driver.recv()
            if reply.get("outcome") != "OK":
                raise StepFailed("close -> %s" % json.dumps(reply))
            try:
                rc = self.driver.proc.wait(15)
            except subprocess.TimeoutExpired:
                raise StepFailed("the driver did not exit after close")
            if rc != 0:
                raise StepFailed("the driver exited with status %d after close" % rc)
            return None
        except StepFailed as e:
            where = "setup" if i < 0 else ("close" if i >= len(steps) else "step %d" % (i + 1))
            note = steps[i].get("note") if 0 <= i < len(steps) else None
            msg = "%s%s: %s" % (where, " (%s)" % note if note else "", e)
            if self.driver is not None:
                tail = self.driver.stderr_tail().strip()
                if tail:
                    msg += "\n      driver stderr: " + tail.replace("\n", "\n      ")
            return msg
        finally:
            self.teardown()

    def teardown(self):
        for t in self.timers:
            t.cancel()
        if self.driver is not None:
            self.driver.kill()
        for p in self.proxies.values():
            p.stop()
        for n in self.nodes:
            n.kill()
        shutil.rmtree(self.workdir, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description="Ticketing client conformance")
    ap.add_argument("--build", required=True, help="the build dir (holds ticketingd)")
    ap.add_argument("--driver", action="append", required=True, metavar="NAME=COMMAND",
                    help="a client's driver: a path, or a command line (split like a shell)")
    ap.add_argument("--scenarios",
                    default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                         "scenarios.json"))
    ap.add_argument("--only", default="", help="comma-separated scenario names")
    ap.add_argument("--verbose", action="store_true", help="print every command and reply")
    a = ap.parse_args()

    if not os.access(os.path.join(a.build, "ticketingd"), os.X_OK):
        print("no ticketingd in %s" % a.build, file=sys.stderr)
        return 2
    drivers = []
    for d in a.driver:
        name, sep, cmd = d.partition("=")
        if not sep or not name or not cmd:
            print("bad --driver %r (NAME=COMMAND)" % d, file=sys.stderr)
            return 2
        drivers.append((name, shlex.split(cmd)))
    with open(a.scenarios) as f:
        scenarios = json.load(f)["scenarios"]
    only = set(filter(None, a.only.split(",")))
    unknown = only - {s["name"] for s in scenarios}
    if unknown:
        print("no such scenario: %s" % ", ".join(sorted(unknown)), file=sys.stderr)
        return 2
    passed = failed = 0
    for scn in scenarios:
        if only and scn["name"] not in only:
            continue
        for name, argv in drivers:
            t0 = time.monotonic()
            err = Run(scn, name, argv, a.build, a.verbose).play()
            took = time.monotonic() - t0
            if err is None:
                passed += 1
                print("PASS %-40s %-8s %5.1f s" % (scn["name"], name, took), flush=True)
            else:
                failed += 1
                print("FAIL %-40s %-8s %5.1f s  %s" % (scn["name"], name, took, err), flush=True)
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed or passed == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
