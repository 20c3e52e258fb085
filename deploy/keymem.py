#!/usr/bin/env python3
"""Measures how much memory a ticketingd node spends per held key.

Starts a 3-member cluster of BUILD_DIR/ticketingd on 127.0.0.1, holds N
distinct keys on the leader (keys of --key-len bytes, owners of --owner-len
bytes, 250 s leases), and reads VmRSS of every node from /proc before and
after. Then it replaces one follower with a fresh process, which makes the
leader take and send a snapshot of every held key, and reads the leader's
peak RSS (VmHWM) and the new member's RSS once it is ready. Prints one line
of figures per node and the bytes per key. Every process it starts is
killed at the end.

Usage: deploy/keymem.py BUILD_DIR [--keys N] [--key-len L] [--owner-len O]
                        [--threads T]
Needs nothing but python3. The whole run stays within the 250 s lease.
"""
import argparse, hashlib, hmac, os, re, secrets, shutil, signal, socket
import subprocess, sys, tempfile, time, urllib.request

CLIENT_SECRET = b"keymem-client-secret-0123456789abcdef"
PEER_SECRET = b"keymem-peer-secret-0123456789abcdef"


def proc_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        m = re.search(rf"^{field}:\s+(\d+) kB", f.read(), re.M)
    return int(m.group(1))


def free_base(span):
    for base in range(20000, 30000, span):
        ok = True
        for p in range(base, base + span):
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", p))
            except OSError:
                ok = False
            finally:
                s.close()
            if not ok:
                break
        if ok:
            return base
    sys.exit("keymem: no free ports")


class Conn:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.f = self.s.makefile("rb")
        banner = self.line().split()
        if banner[0] != "TICKETING/1":
            raise RuntimeError(f"banner {banner}")
        snonce, cnonce = banner[1], secrets.token_hex(32)
        msg = lambda side: f"ticketing/1 {side} {snonce} {cnonce}".encode()
        cproof = hmac.new(CLIENT_SECRET, msg("client"), hashlib.sha256).hexdigest()
        self.s.sendall(f"AUTH {cnonce} {cproof}\n".encode())
        ok = self.line().split()
        sproof = hmac.new(CLIENT_SECRET, msg("server"), hashlib.sha256).hexdigest()
        if ok[0] != "OK" or not hmac.compare_digest(ok[1], sproof):
            raise RuntimeError(f"handshake: {ok}")

    def line(self):
        b = self.f.readline()
        if not b:
            raise ConnectionError("closed")
        return b.decode().rstrip("\r\n")

    def close(self):
        self.f.close()
        self.s.close()


def admin(port, path):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port + 2}{path}", timeout=1) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, ""
    except OSError:
        return 0, ""


def is_leader(port):
    code, body = admin(port, "/metrics")
    return code == 200 and re.search(r"^ticketing_raft_is_leader 1$", body, re.M) is not None


def wait_for(cond, secs, what):
    end = time.monotonic() + secs
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.1)
    sys.exit(f"keymem: timed out waiting for {what}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--keys", type=int, default=200000)
    ap.add_argument("--key-len", type=int, default=250)
    ap.add_argument("--owner-len", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    if not (1 <= a.key_len <= 250 and 1 <= a.owner_len <= 64):
        sys.exit("keymem: keys are 1-250 bytes, owners 1-64")
    if len(str(a.keys)) > a.key_len:
        sys.exit("keymem: --key-len too short for that many distinct keys")
    binary = os.path.join(a.build, "ticketingd")
    tmp = tempfile.mkdtemp(prefix="keymem.")
    for name, sec in (("client", CLIENT_SECRET), ("peer", PEER_SECRET)):
        with open(os.path.join(tmp, name), "wb") as f:
            f.write(sec)
        os.chmod(os.path.join(tmp, name), 0o600)
    base = free_base(30)
    ports = [base, base + 10, base + 20]
    peers = ",".join(f"127.0.0.1:{p + 1}" for p in ports)
    procs = {}

    def spawn(i):
        log = open(os.path.join(tmp, f"node{i}.log"), "ab")
        procs[i] = subprocess.Popen(
            [binary, "--bind", "127.0.0.1", "--port", str(ports[i]),
             "--advertise", f"127.0.0.1:{ports[i]}", "--peers", peers,
             "--client-secret-file", os.path.join(tmp, "client"),
             "--peer-secret-file", os.path.join(tmp, "peer"),
             "--threads", str(a.threads), "--log-level", "1"],
            stdout=log, stderr=log)

    try:
        for i in range(3):
            spawn(i)
        leader = []
        wait_for(lambda: leader.extend(i for i in range(3) if is_leader(ports[i])) or leader,
                 30, "a leader")
        L = leader[0]
        wait_for(lambda: all(admin(p, "/readyz")[0] == 200 for p in ports), 30, "3 ready nodes")
        time.sleep(1)
        before = {i: proc_kib(procs[i].pid, "VmRSS") for i in range(3)}

        owner = ("o" * a.owner_len)
        t0 = time.monotonic()
        batch, start, resent, c = 2000, 0, False, None
        while start < a.keys:
            n = min(batch, a.keys - start)
            try:
                if c is None:
                    leader.clear()
                    wait_for(lambda: leader.extend(i for i in range(3) if is_leader(ports[i]))
                             or leader, 30, "a leader")
                    c = Conn(ports[leader[0]])
                lines = [f"A {k} {str(k).zfill(a.key_len)} {owner} 250000 0\n"
                         for k in range(start, start + n)]
                c.s.sendall("".join(lines).encode())
                for _ in range(n):
                    r = c.line()
                    # After a change of leader the batch is sent again: its
                    # keys that were granted already answer B.
                    if r.startswith("M "):
                        raise ConnectionError(r)
                    if not (r.startswith("G ") or (resent and r.startswith("B "))):
                        sys.exit(f"keymem: acquire answered {r!r}")
            except (ConnectionError, OSError):
                if c is not None:
                    c.close()
                c, resent = None, True
                time.sleep(0.5)
                continue
            start += n
            resent = False
        took = time.monotonic() - t0
        # Followers apply what the leader committed; give them a moment.
        time.sleep(2)
        after = {i: proc_kib(procs[i].pid, "VmRSS") for i in range(3)}
        L = leader[0]
        _, m = admin(ports[L], "/metrics")
        held = re.search(r"^ticketing_keys (\S+)$", m, re.M)
        if not held or int(float(held.group(1))) != a.keys:
            sys.exit(f"keymem: the leader holds {held and held.group(1)} keys, not {a.keys}")
        logb = re.search(r"^ticketing_raft_log_bytes (\S+)$", m, re.M)
        loge = re.search(r"^ticketing_raft_log_entries (\S+)$", m, re.M)

        # Replace a follower: the leader takes and sends a snapshot.
        F = next(i for i in range(3) if i != L)
        procs[F].send_signal(signal.SIGKILL)
        procs[F].wait()
        spawn(F)
        wait_for(lambda: admin(ports[F], "/readyz")[0] == 200, 200, "the new member to be ready")
        if not is_leader(ports[L]):
            sys.exit("keymem: the leader changed during the snapshot; run again")
        time.sleep(1)
        lead_hwm = proc_kib(procs[L].pid, "VmHWM")
        lead_now = proc_kib(procs[L].pid, "VmRSS")
        new_rss = proc_kib(procs[F].pid, "VmRSS")
        c.close()
        if time.monotonic() - t0 > 240:
            sys.exit("keymem: the run took longer than the 250 s lease; use fewer keys")

        K = a.keys
        print(f"keymem: {K} keys of {a.key_len} bytes, owners of {a.owner_len} bytes,"
              f" held in {took:.1f} s; leader log {loge.group(1) if loge else '?'} entries,"
              f" {logb.group(1) if logb else '?'} bytes")
        for i in range(3):
            role = "leader" if i == L else "follower"
            d = (after[i] - before[i]) * 1024
            print(f"keymem: node{i} {role}: VmRSS {before[i]} -> {after[i]} KiB,"
                  f" {d / K:.0f} bytes per key")
        print(f"keymem: after replacing node{F} (snapshot sent): leader VmHWM {lead_hwm} KiB"
              f" ({(lead_hwm - before[L]) * 1024 / K:.0f} bytes per key over the start),"
              f" leader VmRSS {lead_now} KiB, new node{F} VmRSS {new_rss} KiB"
              f" ({(new_rss - before[F]) * 1024 / K:.0f} bytes per key over an idle node)")
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
