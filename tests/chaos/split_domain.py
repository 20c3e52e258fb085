#!/usr/bin/env python3
"""A majority lost, recovered with --force-new-domain while the links between
the fresh nodes are uneven: at most one new fencing domain may ever serve.

Started by tests/chaos/run.sh --scenario split-domain (which checks the
prerequisites and cleans up). Five members in network namespaces (the
chaos harness's network); then, --rounds times:

  1. a fresh cluster forms; one member (the survivor) is kept, the other
     four are killed with SIGKILL, and the survivor loses its leader;
  2. the four restart fresh with --force-new-domain and a 3 s hold, first
     unable to reach one another (each sees only the survivor: no majority);
  3. the links between them open, except between the two lowest NodeIds:
     each of those two sees a majority of --peers fresh (itself and the two
     others) and the survivor without a leader, and is the lowest forcing
     NodeId in its own view. Two links then flap, and the survivor is
     paused and resumed, as the first report of this defect had it;
  4. for 12 s every member's /status is read every 150 ms: the round fails
     if two different domains have a serving leader at once, or if two
     fresh members report voters of two different new domains;
  5. everything heals: one new domain must serve, with every fresh member
     in it.

Exit 0 when every round passed, 1 otherwise (the lines above the verdict
say what was seen), 2 on a harness error.
"""
import argparse
import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from chaos import Harness, mono_us  # noqa: E402

HOLD_MS = 3000


class Scenario(Harness):
    def __init__(self, a):
        a.clients = 0
        a.skew = "none"
        super().__init__(a)
        self.failures = []

    def kill(self, i):
        p = self.nodes[i]["proc"]
        if p and p.poll() is None:
            os.kill(p.pid, signal.SIGCONT)
            p.kill()
            p.wait(timeout=10)

    def cut(self, pairs):
        """Drops traffic both ways between each pair of members (by index)."""
        drop = {i: [] for i in range(self.n)}
        for x, y in pairs:
            drop[x].append(self.nodes[y]["ip"])
            drop[y].append(self.nodes[x]["ip"])
        for i in range(self.n):
            self.rules(self.nodes[i]["ns"], drop[i], drop[i])

    def serving(self):
        """(domain, member) of every member that serves as leader now, and
        the domain each member reports."""
        out, domains = [], {}
        for i in range(self.n):
            st = self.status(i)
            if not st:
                continue
            domains[i] = st.get("domain")
            if st.get("role") == "leader" and st.get("serving"):
                out.append((st.get("domain"), i))
        return out, domains

    def round(self, k):
        self.heal()
        self.extra = {}
        for i in range(self.n):
            self.kill(i)
        for i in range(self.n):
            self.start_node(i)
        if not self.wait_healthy(40):
            raise RuntimeError("round %d: the cluster did not form" % k)
        survivor = self.rng.randrange(self.n)
        fresh = [i for i in range(self.n) if i != survivor]
        _, st = self.leader()
        old_domain = st["domain"]
        for i in fresh:
            self.kill(i)
        self.event("majority_lost", survivor=survivor)
        end = time.monotonic() + 10
        while time.monotonic() < end:
            s = self.status(survivor)
            if s and s.get("role") != "leader":
                break
            time.sleep(0.2)
        # Fresh, forcing, and cut from one another.
        self.cut([(x, y) for x in fresh for y in fresh if x < y])
        for i in fresh:
            self.extra[i] = ["--force-new-domain", "--new-domain-hold-ms", str(HOLD_MS)]
            self.start_node(i)
        ids = {}
        end = time.monotonic() + 15
        while time.monotonic() < end and len(ids) < len(fresh):
            for i in fresh:
                s = self.status(i)
                if s and s.get("node_id"):
                    ids[i] = int(s["node_id"], 16)
            time.sleep(0.2)
        if len(ids) < len(fresh):
            raise RuntimeError("round %d: fresh members did not answer /status" % k)
        low = sorted(fresh, key=lambda i: ids[i])
        a, b = low[0], low[1]
        others = low[2:]
        time.sleep(2)  # every fresh node has seen the survivor without a leader
        self.cut([(a, b)])
        t_open = self.event("links_open", kept_cut=[a, b], survivor=survivor)
        self.say("round %d: survivor %d, fresh %s; links open except %d-%d"
                 % (k, survivor, fresh, a, b))
        seen_domains = set()
        end = time.monotonic() + 12
        flapped = paused = False
        while time.monotonic() < end:
            el = (mono_us() - t_open) / 1e6
            if not flapped and el > 1.0:
                # Two more links flap: a-others[0] and b-others[1].
                self.cut([(a, b), (a, others[0]), (b, others[1])])
                time.sleep(0.4)
                self.cut([(a, b)])
                flapped = True
                self.event("flap", pairs=[[a, others[0]], [b, others[1]]])
            if not paused and el > 2.0:
                p = self.nodes[survivor]["proc"]
                os.kill(p.pid, signal.SIGSTOP)
                time.sleep(1.0)
                os.kill(p.pid, signal.SIGCONT)
                paused = True
                self.event("paused", node=survivor)
            srv, domains = self.serving()
            doms = {d for d, _ in srv}
            if len(doms) > 1:
                self.failures.append("round %d: %d domains serving at once: %s"
                                     % (k, len(doms), srv))
                self.say(self.failures[-1])
                break
            for i in fresh:
                d = domains.get(i)
                if d and d != old_domain and int(d, 16) != 0:
                    seen_domains.add(d)
            if len(seen_domains) > 1:
                self.failures.append("round %d: fresh members are in %d new domains: %s"
                                     % (k, len(seen_domains), sorted(seen_domains)))
                self.say(self.failures[-1])
                break
            time.sleep(0.15)
        self.heal()
        end = time.monotonic() + 30
        ok = False
        while time.monotonic() < end and not ok:
            srv, domains = self.serving()
            doms = {d for d, _ in srv}
            if len(doms) > 1:
                self.failures.append("round %d: after healing, %d domains serve: %s"
                                     % (k, len(doms), srv))
                break
            fresh_doms = {domains.get(i) for i in fresh}
            ok = len(srv) == 1 and len(fresh_doms) == 1 and srv[0][0] in fresh_doms
            time.sleep(0.3)
        if not ok and not self.failures:
            self.failures.append("round %d: no single new domain serving 30 s after healing" % k)
        self.event("round_end", round=k, ok=ok, domains=sorted(seen_domains))
        self.say("round %d: %s" % (k, "one new domain serves" if ok else "FAILED"))

    def run(self):
        self.t0 = mono_us()
        for name in ("client.secret", "peer.secret"):
            with open(os.path.join(self.dir, name), "w") as f:
                f.write(os.urandom(32).hex() + "\n")
            os.chmod(os.path.join(self.dir, name), 0o600)
        self.setup_net()
        for k in range(1, self.a.rounds + 1):
            self.round(k)
            if self.failures:
                break


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bin", required=True)
    p.add_argument("--skewlib", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--tag", default="")
    a = p.parse_args()
    a.nodes = 5
    h = Scenario(a)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(3))
    signal.signal(signal.SIGINT, lambda *_: sys.exit(3))
    rc = 0
    try:
        h.run()
        rc = 1 if h.failures else 0
    except Exception as e:
        print("split-domain: harness error: %s" % e, file=sys.stderr, flush=True)
        rc = 2
    finally:
        h.teardown()
    for f in h.failures:
        print("FAIL %s" % f, flush=True)
    print("split-domain: %s" % ("passed" if rc == 0 else "failed"), flush=True)
    sys.exit(rc)


if __name__ == "__main__":
    main()
