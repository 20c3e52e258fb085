#!/usr/bin/env python3
"""Fault harness for Ticketing: real members in network namespaces, real faults.

Started by tests/chaos/run.sh (which checks the prerequisites and cleans up
after a crash of this script). One run:

  1. creates a switch namespace with a bridge, one namespace per member and
     one per client, each joined to the bridge by a veth pair, with private
     addresses 10.77.0.0/24 that exist only inside these namespaces;
  2. starts 3 or 5 ticketingd members (--peers, --advertise on those
     addresses), each with its monotonic clock run by skewclock (a rate and
     forward jumps), and chaos_client processes on both sides;
  3. injects faults from a seeded schedule, one at a time: the leader
     isolated, 1/2 or 2/3 splits, one-way cuts (nftables inside the
     namespaces), a flapping bridge, kill -9 then a fresh restart,
     SIGSTOP/SIGCONT, SIGTERM restarts, and clock jumps. Between faults it
     waits until the cluster is whole again (a leader serving, every member
     ready), up to a bound;
  4. heals, lets the clients finish, reads every member's /status, stops
     everything, and runs check.py on the histories.

Every fault is logged with CLOCK_MONOTONIC microseconds (time.monotonic()
reads the same clock as the clients' tk_client_now_us(); namespaces share
it), so check.py can place faults among client events.
"""
import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def mono_us():
    return time.monotonic_ns() // 1000


class Harness:
    def __init__(self, a):
        self.a = a
        self.rng = random.Random(a.seed)
        self.tag = a.tag or "tkc%d" % os.getpid()
        self.sw = self.tag + "sw"
        self.n = a.nodes
        self.nodes = [dict(ns="%sn%d" % (self.tag, i), ip="10.77.0.%d" % (11 + i), proc=None,
                           starts=0, rate=1.0, offset=0) for i in range(self.n)]
        self.clients = [dict(ns="%sc%d" % (self.tag, j), ip="10.77.0.%d" % (101 + j), proc=None)
                        for j in range(a.clients)]
        self.dir = a.out
        self.flog = open(os.path.join(self.dir, "faults.jsonl"), "a")
        self.counts = {}
        self.namespaces = []
        self.extra = {}  # member index -> more ticketingd flags (scenarios)
        self.peers = ",".join("%s:7401" % nd["ip"] for nd in self.nodes)
        self.addrs = ",".join("%s:7400" % nd["ip"] for nd in self.nodes)

    # ---- logging -------------------------------------------------------
    def event(self, ev_, **kw):
        kw["ev"] = ev_
        kw["t"] = mono_us()
        self.flog.write(json.dumps(kw) + "\n")
        self.flog.flush()
        return kw["t"]

    def say(self, msg):
        print("[%7.1f s] %s" % ((mono_us() - self.t0) / 1e6, msg), flush=True)

    # ---- plumbing ------------------------------------------------------
    def sh(self, *cmd, inp=None, check=True):
        r = subprocess.run(cmd, input=inp, capture_output=True, text=True, timeout=20)
        if check and r.returncode != 0:
            raise RuntimeError("%s: %s" % (" ".join(cmd), r.stderr.strip()))
        return r

    def nsx(self, ns, *cmd, inp=None, check=True):
        return self.sh("ip", "netns", "exec", ns, *cmd, inp=inp, check=check)

    def setup_net(self):
        self.sh("ip", "netns", "add", self.sw)
        self.namespaces.append(self.sw)
        self.nsx(self.sw, "ip", "link", "set", "lo", "up")
        self.nsx(self.sw, "ip", "link", "add", "br0", "type", "bridge")
        self.nsx(self.sw, "ip", "link", "set", "br0", "up")
        for i, h in enumerate(self.nodes + self.clients):
            self.sh("ip", "netns", "add", h["ns"])
            self.namespaces.append(h["ns"])
            port = "p%d" % i
            self.sh("ip", "-n", self.sw, "link", "add", port, "type", "veth", "peer", "name",
                    "eth0", "netns", h["ns"])
            self.nsx(self.sw, "ip", "link", "set", port, "master", "br0")
            self.nsx(self.sw, "ip", "link", "set", port, "up")
            self.nsx(h["ns"], "ip", "link", "set", "lo", "up")
            self.nsx(h["ns"], "ip", "addr", "add", h["ip"] + "/24", "dev", "eth0")
            self.nsx(h["ns"], "ip", "link", "set", "eth0", "up")
            self.nsx(h["ns"], "nft", "-f", "-", inp=(
                "table inet chaos {\n"
                " chain in { type filter hook input priority 0; policy accept; }\n"
                " chain out { type filter hook output priority 0; policy accept; }\n"
                "}\n"))

    def teardown(self):
        for h in self.clients + self.nodes:
            p = h.get("proc")
            if p and p.poll() is None:
                try:
                    os.kill(p.pid, signal.SIGCONT)
                    os.kill(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
        for ns in reversed(self.namespaces):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=20)
        self.namespaces = []

    # ---- members -------------------------------------------------------
    def write_skew(self, i):
        nd = self.nodes[i]
        with open(os.path.join(self.dir, "skew%d" % i), "w") as f:
            f.write("%.6f %d\n" % (nd["rate"], nd["offset"]))

    def start_node(self, i):
        nd = self.nodes[i]
        nd["starts"] += 1
        self.write_skew(i)
        # In an ASan build the sanitizer's runtime must come first among the
        # libraries unless told otherwise; skewclock works either way.
        asan = (os.environ.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0").lstrip(":")
        env = dict(os.environ, TK_SKEW_FILE=os.path.join(self.dir, "skew%d" % i),
                   LD_PRELOAD=self.a.skewlib, ASAN_OPTIONS=asan)
        log = open(os.path.join(self.dir, "node%d.log" % i), "a")
        cmd = ["ip", "netns", "exec", nd["ns"], self.a.bin + "/ticketingd",
               "--bind", "0.0.0.0", "--port", "7400", "--advertise", nd["ip"] + ":7400",
               "--peers", self.peers, "--client-secret-file", self.dir + "/client.secret",
               "--peer-secret-file", self.dir + "/peer.secret", "--threads", "1",
               "--heartbeat-ms", "50", "--election-ms", "1000"] + self.extra.get(i, [])
        nd["proc"] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                      start_new_session=True)
        log.close()
        self.event("start", node=i, pid=nd["proc"].pid, rate=nd["rate"], offset=nd["offset"])

    def status(self, i):
        r = self.nsx(self.nodes[i]["ns"], "curl", "-s", "-m", "1",
                     "http://127.0.0.1:7402/status", check=False)
        try:
            return json.loads(r.stdout)
        except ValueError:
            return None

    def leader(self):
        for i in range(self.n):
            st = self.status(i)
            if st and st.get("role") == "leader" and st.get("serving"):
                return i, st
        return None, None

    def supervise(self):
        """A member that exited (status 3: replaced while away) is restarted."""
        for i, nd in enumerate(self.nodes):
            p = nd["proc"]
            if p is not None and p.poll() is not None:
                self.event("exited", node=i, code=p.returncode)
                self.say("member %d exited with %d; restarting it" % (i, p.returncode))
                self.count("exit%d" % p.returncode)
                self.start_node(i)

    def wait_healthy(self, bound_s):
        end = time.monotonic() + bound_s
        while time.monotonic() < end:
            self.supervise()
            sts = [self.status(i) for i in range(self.n)]
            if all(sts) and sum(1 for s in sts if s.get("role") == "leader" and s.get("serving")) == 1 \
                    and all(s.get("ready") for s in sts):
                self.event("healthy", node_ids=[s.get("node_id") for s in sts])
                return True
            time.sleep(0.3)
        self.event("unhealthy", bound_s=bound_s)
        self.say("cluster not whole after %d s" % bound_s)
        self.count("unhealthy")
        return False

    # ---- network faults ------------------------------------------------
    def rules(self, ns, drop_in=(), drop_out=()):
        text = "flush chain inet chaos in\nflush chain inet chaos out\n"
        if drop_in:
            text += "add rule inet chaos in ip saddr { %s } drop\n" % ", ".join(drop_in)
        if drop_out:
            text += "add rule inet chaos out ip daddr { %s } drop\n" % ", ".join(drop_out)
        self.nsx(ns, "nft", "-f", "-", inp=text)

    def heal(self):
        for h in self.nodes + self.clients:
            self.rules(h["ns"])

    def partition(self, minority, kind):
        """Cuts the members of `minority` (and some clients) from the rest."""
        major = [i for i in range(self.n) if i not in minority]
        cside = [self.rng.random() < 0.5 for _ in self.clients]  # True: minority side
        cside[0], cside[-1] = True, False  # both sides always have a client
        side_a = [self.nodes[i]["ip"] for i in minority] + \
                 [c["ip"] for c, s in zip(self.clients, cside) if s]
        side_b = [self.nodes[i]["ip"] for i in major] + \
                 [c["ip"] for c, s in zip(self.clients, cside) if not s]
        for i in range(self.n):
            other = side_b if i in minority else side_a
            self.rules(self.nodes[i]["ns"], other, other)
        for c, s in zip(self.clients, cside):
            other = side_b if s else side_a
            self.rules(c["ns"], other, other)
        mclients = [j for j, s in enumerate(cside) if s]
        t = self.event("partition", kind=kind, minority=minority, majority=major,
                       minority_clients=mclients)
        self.say("%s: members %s | %s, clients %s on the minority side"
                 % (kind, minority, major, mclients))
        return t

    # ---- the schedule --------------------------------------------------
    def count(self, k):
        self.counts[k] = self.counts.get(k, 0) + 1

    def pick_node(self):
        li, _ = self.leader()
        if li is not None and self.rng.random() < 0.6:
            return li, True
        return self.rng.randrange(self.n), False

    def fault(self):
        kinds = ["isolate_leader", "split", "oneway", "flap", "kill9", "stop", "restart"]
        if self.a.skew != "none":
            kinds.append("jump")
        kind = self.rng.choice(kinds)
        hold = self.rng.uniform(1.5, 5.0)
        self.count(kind)
        if kind == "isolate_leader":
            li, _ = self.leader()
            if li is None:
                li = self.rng.randrange(self.n)
            self.partition([li], kind)
            time.sleep(hold)
            self.event("heal_start")
            self.heal()
            self.event("heal")
        elif kind == "split":
            k = 1 if self.n == 3 else 2
            minority = sorted(self.rng.sample(range(self.n), k))
            self.partition(minority, kind)
            time.sleep(hold)
            self.event("heal_start")
            self.heal()
            self.event("heal")
        elif kind == "oneway":
            li, _ = self.leader()
            if li is None:
                li = self.rng.randrange(self.n)
            f = self.rng.choice([i for i in range(self.n) if i != li])
            src, dst = (li, f) if self.rng.random() < 0.5 else (f, li)
            # dst no longer hears src; src still hears dst.
            self.rules(self.nodes[dst]["ns"], [self.nodes[src]["ip"]], [])
            self.event("oneway", src=src, dst=dst)
            self.say("oneway: member %d no longer hears member %d" % (dst, src))
            time.sleep(hold)
            self.event("heal_start")
            self.heal()
            self.event("heal")
        elif kind == "flap":
            flips = self.rng.randrange(3, 8)
            self.say("flap: the bridge goes down and up %d times" % flips)
            for _ in range(flips):
                self.nsx(self.sw, "ip", "link", "set", "br0", "down")
                self.event("bridge_down")
                time.sleep(self.rng.uniform(0.1, 1.5))
                self.event("bridge_up_start")
                self.nsx(self.sw, "ip", "link", "set", "br0", "up")
                self.event("bridge_up")
                time.sleep(self.rng.uniform(0.1, 1.0))
        elif kind == "kill9":
            i, was_leader = self.pick_node()
            self.event("kill9", node=i, leader=was_leader)
            self.say("kill -9 member %d%s, restart after %.1f s" % (i, " (leader)" if was_leader else "", hold))
            p = self.nodes[i]["proc"]
            os.kill(p.pid, signal.SIGKILL)
            p.wait(timeout=10)
            time.sleep(hold)
            self.start_node(i)
        elif kind == "stop":
            i, was_leader = self.pick_node()
            self.event("sigstop", node=i, leader=was_leader)
            self.say("SIGSTOP member %d%s for %.1f s" % (i, " (leader)" if was_leader else "", hold))
            os.kill(self.nodes[i]["proc"].pid, signal.SIGSTOP)
            time.sleep(hold)
            os.kill(self.nodes[i]["proc"].pid, signal.SIGCONT)
            self.event("sigcont", node=i)
        elif kind == "restart":
            i, was_leader = self.pick_node()
            self.event("sigterm", node=i, leader=was_leader)
            self.say("SIGTERM member %d%s and start it again" % (i, " (leader)" if was_leader else ""))
            p = self.nodes[i]["proc"]
            p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)
            self.start_node(i)
        elif kind == "jump":
            i, was_leader = self.pick_node()
            jump = self.jump_us()
            self.nodes[i]["offset"] += jump
            self.write_skew(i)
            time.sleep(0.05)  # read again within 20 ms
            self.event("jump", node=i, leader=was_leader, jump_us=jump)
            self.say("clock of member %d%s jumps forward %d ms"
                     % (i, " (leader)" if was_leader else "", jump // 1000))
            time.sleep(hold)

    def jump_us(self):
        if self.a.skew == "beyond":
            return self.rng.randrange(100000, 600000)
        return self.rng.randrange(5000, 40000)

    def pick_rates(self):
        for nd in self.nodes:
            if self.a.skew == "inbounds":
                nd["rate"] = self.rng.choice([0.9995, 1.0, 1.0005])
            elif self.a.skew == "beyond":
                nd["rate"] = self.rng.choice([1.03, 1.05, 1.08])
            else:
                nd["rate"] = 1.0

    # ---- the run -------------------------------------------------------
    def run(self):
        a = self.a
        self.t0 = mono_us()
        print("chaos: seed %d, %d members, %d clients x %d threads, %d s of faults, skew %s%s"
              % (a.seed, self.n, len(self.clients), a.threads, a.seconds, a.skew,
                 ", clients enter on INDETERMINATE" if a.break_indeterminate else ""), flush=True)
        print("chaos: replay with: tests/chaos/run.sh --seed %d %s" % (a.seed, a.replay), flush=True)
        for name in ("client.secret", "peer.secret"):
            with open(os.path.join(self.dir, name), "w") as f:
                f.write(os.urandom(32).hex() + "\n")
            os.chmod(os.path.join(self.dir, name), 0o600)
        self.setup_net()
        self.pick_rates()
        self.event("run", seed=a.seed, nodes=self.n, skew=a.skew,
                   rates=[nd["rate"] for nd in self.nodes])
        self.say("members' clock rates: %s" % [nd["rate"] for nd in self.nodes])
        for i in range(self.n):
            self.start_node(i)
        if not self.wait_healthy(30):
            raise RuntimeError("the cluster did not form")
        li, st = self.leader()
        self.event("domain", domain=st["domain"], next_token=st["next_token"])
        self.say("cluster formed: leader member %d, domain %s" % (li, st["domain"]))
        client_s = a.seconds + 10
        for j, c in enumerate(self.clients):
            cmd = ["ip", "netns", "exec", c["ns"], a.bin + "/tests/chaos_client",
                   "--addrs", self.addrs, "--secret-file", self.dir + "/client.secret",
                   "--out", os.path.join(self.dir, "hist-c%d.jsonl" % j), "--name", "c%d" % j,
                   "--threads", str(a.threads), "--keys", str(a.keys), "--lease-ms", "2000",
                   "--wait-ms", "1500", "--seconds", str(client_s), "--seed",
                   str(a.seed * 100 + j + 1)]
            if a.break_indeterminate:
                cmd.append("--break-indeterminate")
            log = open(os.path.join(self.dir, "client%d.log" % j), "a")
            c["proc"] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
            log.close()
        end = time.monotonic() + a.seconds
        time.sleep(3)
        while time.monotonic() < end - 4:
            self.fault()
            self.wait_healthy(60)
            time.sleep(self.rng.uniform(1.0, 3.0))
        self.heal()
        self.nsx(self.sw, "ip", "link", "set", "br0", "up")
        self.wait_healthy(60)
        self.say("faults over; the clients finish")
        for c in self.clients:
            try:
                c["proc"].wait(timeout=client_s + 60)
            except subprocess.TimeoutExpired:
                c["proc"].kill()
                self.count("client_killed")
        final = [self.status(i) for i in range(self.n)]
        with open(os.path.join(self.dir, "final.json"), "w") as f:
            json.dump({"members": final, "counts": self.counts,
                       "starts": [nd["starts"] for nd in self.nodes]}, f)
        self.event("end")
        for nd in self.nodes:
            if nd["proc"].poll() is None:
                nd["proc"].terminate()
        for nd in self.nodes:
            try:
                nd["proc"].wait(timeout=10)
            except subprocess.TimeoutExpired:
                nd["proc"].kill()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bin", required=True)
    p.add_argument("--skewlib", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--seconds", type=int, default=90)
    p.add_argument("--nodes", type=int, default=3, choices=(3, 5))
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--threads", type=int, default=3)
    p.add_argument("--keys", type=int, default=3)
    p.add_argument("--skew", default="inbounds", choices=("none", "inbounds", "beyond"))
    p.add_argument("--break-indeterminate", action="store_true")
    p.add_argument("--replay", default="")
    p.add_argument("--tag", default="")
    a = p.parse_args()
    h = Harness(a)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(3))
    signal.signal(signal.SIGINT, lambda *_: sys.exit(3))
    rc = 0
    try:
        h.run()
    except Exception as e:  # the run is void; the checker is not asked
        print("chaos: harness error: %s" % e, file=sys.stderr, flush=True)
        rc = 2
    finally:
        h.teardown()
    print("chaos: faults by kind: %s" % json.dumps(h.counts, sort_keys=True), flush=True)
    sys.exit(rc)


if __name__ == "__main__":
    main()
