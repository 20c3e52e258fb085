#!/usr/bin/env python3
"""History checker for the fault harness (tests/chaos/). Python 3 stdlib only.

    check.py RUN_DIR            judge the run in RUN_DIR
    check.py --groups RUN_DIR   a run across several groups (tests/integ/test_moves.c)
    check.py --self-test        feed it broken histories and require each check to fail

RUN_DIR holds hist-*.jsonl (one per client process, see chaos_client.c),
faults.jsonl (the harness's fault log) and final.json (every member's
/status at the end). All times are CLOCK_MONOTONIC microseconds: every
namespace shares the kernel's monotonic clock, so client and fault times
compare directly.

An acquire is "inside" its key's critical section from its ACQUIRED answer
until the earlier of the client leaving (its exit line, written just before
the release call) and its lease_deadline_us. The checks:

  one_holder     no two acquires of one key inside at once.
  lease_kept     no client planned to stay inside past its lease deadline (the
                 client's own discipline; an overlap check built on deadlines is
                 only meaningful if clients keep them). A client whose sleep
                 ended past the deadline although it planned to leave before
                 it was paused by the machine, which is what leases and
                 fencing tokens exist for; that is a note, and its interval
                 still ends at the deadline for one_holder.
  indeterminate  no client entered a critical section without ACQUIRED.
  tokens         every ACQUIRED token is distinct (one counter for the whole
                 cluster), and per key, tokens strictly increase in the order
                 in which clients entered.
  fifo           two acquires of one key from one client process (one
                 libticketing client: its requests to the leader share one
                 connection, so they reach the leader in the order they were
                 written), both ACQUIRED, both written and answered within one
                 calm period (no fault from its start until the harness saw the
                 cluster whole again): the one written first got the smaller
                 token. That is what FIFO within one leadership implies and
                 what a history can judge; pairs from different processes are
                 not judged (their arrival order at the leader is unknown).
  committed      every token a client saw is below the cluster's next_token at
                 the end, the fencing domain never changed, and no acquire
                 written after a partition cut its client off with a minority
                 of the members (or after the bridge went down) was ACQUIRED
                 before the cut healed: a minority never commits, so such a G
                 would be a grant nobody committed.
  complete       every acquire and release invoked got an outcome.
  fresh_ids      every start of a member (the first, and each restart after
                 kill -9, SIGTERM or exit 3) came up under a NodeId of its
                 own, as the members reported it once the cluster was whole.

With --groups the clients asked several groups, each its own fencing
domain, while keys moved between them (result lines carry "g", the group
asked): tokens must be distinct within a group, and per key they must still
strictly increase in the order clients entered, across groups. fifo,
committed and fresh_ids judge one cluster's faults and final state and are
left out.

A violation prints the shortest window of history that shows it: the lines
of the operations involved and the faults between them, times relative to
the first line shown.
"""
import glob
import json
import os
import sys
import tempfile

DEFINITE_FAIL = ("UNAVAILABLE", "INDETERMINATE", "CANCELLED")


class Op:
    """One acquire and what followed it, from one client thread."""

    def __init__(self, c, th, id_):
        self.c, self.th, self.id = c, th, id_
        self.lines = []
        self.invoke = self.result = self.enter = self.exit = self.rinvoke = self.rresult = None

    @property
    def name(self):
        return "%s/%d#%d" % (self.c, self.th, self.id)

    def deadline(self):
        r = self.result
        if r["outcome"] == "ACQUIRED":
            return r["deadline"]
        # An entry without a grant: the deadline its careless user assumed.
        return (r.get("sent") or self.invoke["t"]) + self.invoke["lease_ms"] * 1000

    def interval(self):
        """[start, end) inside the critical section, or None."""
        if not self.enter:
            return None
        start = self.result["t"]
        end = self.deadline()
        if self.exit:
            end = min(end, self.exit["t"])
        return (start, end) if end > start else None


def load(run_dir):
    ops, lines = {}, []
    for path in sorted(glob.glob(os.path.join(run_dir, "hist-*.jsonl"))):
        with open(path) as f:
            for n, raw in enumerate(f, 1):
                raw = raw.strip()
                if not raw:
                    continue
                try:
                    ln = json.loads(raw)
                except ValueError:
                    # A torn last line of a killed client; anything else is a bug.
                    print("note: %s:%d unreadable line skipped" % (os.path.basename(path), n))
                    continue
                if "outcome" in ln:  # tk_client_outcome_str() spells them in lower case
                    ln["outcome"] = ln["outcome"].upper()
                lines.append(ln)
                key = (ln["c"], ln["th"], ln["id"])
                op = ops.get(key)
                if op is None:
                    op = ops[key] = Op(*key)
                op.lines.append(ln)
                setattr(op, ln["ev"], ln)
    faults = []
    fpath = os.path.join(run_dir, "faults.jsonl")
    if os.path.exists(fpath):
        with open(fpath) as f:
            faults = [json.loads(x) for x in f if x.strip()]
    final = None
    fin = os.path.join(run_dir, "final.json")
    if os.path.exists(fin):
        with open(fin) as f:
            final = json.load(f)
    return list(ops.values()), faults, final


class Checker:
    def __init__(self, ops, faults, final):
        self.ops, self.faults, self.final = ops, faults, final
        self.failures = {}
        self.notes = []

    def fail(self, check, msg, ops=(), extra=()):
        self.failures.setdefault(check, [])
        if len(self.failures[check]) >= 3:  # the first few say enough
            self.failures[check].append(None)
            return
        self.failures[check].append((msg, self.window(ops, extra)))

    def window(self, ops, extra):
        lines = [ln for op in ops for ln in op.lines] + list(extra)
        if not lines:
            return []
        lo = min(ln["t"] for ln in lines)
        hi = max(ln["t"] for ln in lines)
        lines += [f for f in self.faults if lo <= f["t"] <= hi and f not in extra]
        lines.sort(key=lambda ln: ln["t"])
        out = []
        for ln in lines:
            rest = {k: v for k, v in ln.items() if k not in ("t",)}
            who = "%s/%s#%s" % (rest.pop("c"), rest.pop("th"), rest.pop("id")) if "c" in rest else "harness"
            out.append("  +%9.3f ms  %-12s %s" % ((ln["t"] - lo) / 1000.0, who, json.dumps(rest)))
        return out

    # -- the checks ------------------------------------------------------
    def check_complete(self):
        for op in self.ops:
            if op.invoke and not op.result:
                self.fail("complete", "%s: acquire without an outcome" % op.name, [op])
            if op.rinvoke and not op.rresult:
                self.fail("complete", "%s: release without an outcome" % op.name, [op])

    def check_indeterminate(self):
        for op in self.ops:
            if op.enter and op.result["outcome"] != "ACQUIRED":
                self.fail("indeterminate", "%s entered the critical section of %s after %s"
                          % (op.name, op.result["key"], op.result["outcome"]), [op])

    def check_lease_kept(self):
        late, worst = 0, 0
        for op in self.ops:
            if not (op.enter and op.exit):
                continue
            planned = op.exit.get("planned", op.exit["t"])
            if planned > op.deadline():
                self.fail("lease_kept", "%s planned to stay inside %d us past its lease deadline"
                          % (op.name, planned - op.deadline()), [op])
            elif op.exit["t"] > op.deadline():
                late += 1
                worst = max(worst, op.exit["t"] - op.deadline())
        if late:
            self.notes.append("lease_kept: %d client sleep(s) ended past the deadline planned "
                              "before it (paused by the machine, up to %d us late)" % (late, worst))

    def by_key(self):
        keys = {}
        for op in self.ops:
            if op.interval():
                keys.setdefault(op.result["key"], []).append(op)
        for k in keys:
            keys[k].sort(key=lambda op: op.interval()[0])
        return keys

    def check_one_holder(self):
        for key, ops in sorted(self.by_key().items()):
            cur = None  # the op whose interval reaches furthest so far
            for op in ops:
                s, e = op.interval()
                if cur is not None and s < cur.interval()[1]:
                    self.fail("one_holder", "%s: %s and %s inside at once for %.3f ms"
                              % (key, cur.name, op.name,
                                 (min(e, cur.interval()[1]) - s) / 1000.0), [cur, op])
                if cur is None or e > cur.interval()[1]:
                    cur = op

    def check_tokens(self):
        seen = {}
        for op in self.ops:
            r = op.result
            if r and r["outcome"] == "ACQUIRED":
                t = (r.get("g", 0), r["token"])
                if t in seen:
                    self.fail("tokens", "token %d granted twice: %s and %s"
                              % (t[1], seen[t].name, op.name), [seen[t], op])
                seen[t] = op
        for key, ops in sorted(self.by_key().items()):
            ops = [op for op in ops if op.result["outcome"] == "ACQUIRED"]
            for prev, op in zip(ops, ops[1:]):
                if op.result["token"] <= prev.result["token"]:
                    self.fail("tokens", "%s: %s entered after %s with token %d <= %d"
                              % (key, op.name, prev.name, op.result["token"],
                                 prev.result["token"]), [prev, op])

    def disturbed(self):
        """[start, end] of every fault, from its first line to the next 'healthy'."""
        out, start = [], None
        for f in self.faults:
            if f["ev"] in ("healthy",):
                if start is not None:
                    out.append((start, f["t"]))
                    start = None
            elif f["ev"] not in ("run", "domain", "end"):
                if start is None:
                    start = f["t"]
        if start is not None:
            out.append((start, float("inf")))
        return out

    def check_fifo(self):
        bad = self.disturbed()

        def calm(lo, hi):
            return all(hi < s or lo > e for s, e in bad)

        groups = {}
        for op in self.ops:
            r = op.result
            if r and r["outcome"] == "ACQUIRED" and r.get("sent"):
                groups.setdefault((op.c, r["key"]), []).append(op)
        judged = 0
        for (c, key), ops in sorted(groups.items()):
            ops.sort(key=lambda op: op.result["sent"])
            for i, a in enumerate(ops):
                for b in ops[i + 1:]:
                    if b.result["sent"] == a.result["sent"]:
                        continue
                    # b was written after a; a pair is judged only if a was
                    # still waiting then (else the order is trivially kept).
                    if b.result["sent"] > a.result["t"]:
                        break
                    lo, hi = a.result["sent"], max(a.result["t"], b.result["t"])
                    if not calm(lo, hi):
                        continue
                    judged += 1
                    if b.result["token"] < a.result["token"]:
                        self.fail("fifo", "%s: %s was written before %s but got token %d > %d"
                                  % (key, a.name, b.name, a.result["token"],
                                     b.result["token"]), [a, b])
        self.notes.append("fifo: %d pairs of waiters judged" % judged)

    def check_committed(self):
        final = self.final
        if final is None:
            self.fail("committed", "no final.json: the cluster's state at the end is unknown")
            return
        members = [m for m in final["members"] if m]
        if not members:
            self.fail("committed", "no member answered /status at the end")
            return
        nxt = max(m["next_token"] for m in members)
        domains = {m["domain"] for m in members}
        first = [f for f in self.faults if f["ev"] == "domain"]
        if first:
            domains.add(first[0]["domain"])
        if len(domains) != 1:
            self.fail("committed", "the fencing domain changed: %s" % sorted(domains))
        for op in self.ops:
            r = op.result
            if r and r["outcome"] == "ACQUIRED" and r["token"] >= nxt:
                self.fail("committed", "%s saw token %d, not below the cluster's next_token %d"
                          % (op.name, r["token"], nxt), [op])
        # Cuts: (start, end, clients cut off from any majority).
        cuts, open_ = [], None
        for f in self.faults:
            if f["ev"] == "partition":
                open_ = (f, set("c%d" % j for j in f["minority_clients"]))
            elif f["ev"] == "heal_start" and open_:
                cuts.append((open_[0], f, open_[1]))
                open_ = None
            elif f["ev"] == "bridge_down":
                open_ = (f, None)  # everyone
            elif f["ev"] == "bridge_up_start" and open_:
                cuts.append((open_[0], f, None))
                open_ = None
        n = tried = 0
        for start, end, who in cuts:
            for op in self.ops:
                r = op.result
                if not r or (who is not None and op.c not in who):
                    continue
                if r.get("sent", 0) > start["t"] and r["t"] < end["t"]:
                    tried += 1
                if r["outcome"] != "ACQUIRED":
                    continue
                if r.get("sent", 0) > start["t"] and r["t"] < end["t"]:
                    self.fail("committed", "%s was granted %s while cut off with a minority"
                              % (op.name, r["key"]), [op], [start, end])
            n += 1
        self.notes.append("committed: next_token %d; %d cuts, in which cut-off clients "
                          "wrote and saw answered %d acquires (none may be ACQUIRED)"
                          % (nxt, n, tried))

    def check_fresh_ids(self):
        starts, ids, last_start, last_healthy = {}, {}, {}, {}
        for f in self.faults:
            if f["ev"] == "start":
                starts[f["node"]] = starts.get(f["node"], 0) + 1
                last_start[f["node"]] = f["t"]
            elif f["ev"] == "healthy" and f.get("node_ids"):
                for i, nid in enumerate(f["node_ids"]):
                    ids.setdefault(i, []).append(nid)
                    last_healthy[i] = f["t"]
        for i, seq in sorted(ids.items()):
            distinct = [x for k, x in enumerate(seq) if k == 0 or seq[k - 1] != x]
            if len(set(distinct)) != len(distinct):
                self.fail("fresh_ids", "member %d came back under a NodeId it had before: %s"
                          % (i, distinct))
            elif last_healthy.get(i, 0) > last_start.get(i, 0) and len(distinct) != starts.get(i, 0):
                self.fail("fresh_ids", "member %d started %d times under %d NodeIds: %s"
                          % (i, starts.get(i, 0), len(distinct), distinct))
        self.notes.append("fresh_ids: %d starts of %d members" % (sum(starts.values()), len(starts)))

    CHECKS = ("complete", "indeterminate", "lease_kept", "one_holder", "tokens", "fifo",
              "committed", "fresh_ids")

    GROUP_CHECKS = ("complete", "indeterminate", "lease_kept", "one_holder", "tokens")

    def run(self, quiet=False, groups=False):
        checks = self.GROUP_CHECKS if groups else self.CHECKS
        for name in checks:
            getattr(self, "check_" + name)()
        passed = failed = 0
        for name in checks:
            f = self.failures.get(name)
            if not f:
                passed += 1
                if not quiet:
                    print("PASS %s" % name)
                continue
            failed += 1
            if quiet:
                continue
            shown = [x for x in f if x]
            print("FAIL %s (%d violation%s)" % (name, len(f), "" if len(f) == 1 else "s"))
            for msg, win in shown:
                print("  " + msg)
                for w in win:
                    print("  " + w)
        return passed, failed

    def counts(self):
        c = {}
        for op in self.ops:
            if op.result:
                k = op.result["outcome"].lower()
                c[k] = c.get(k, 0) + 1
            if op.enter:
                c["entered"] = c.get("entered", 0) + 1
            if op.exit and op.exit.get("abandon"):
                c["abandoned"] = c.get("abandoned", 0) + 1
            if op.rresult:
                k = "release_" + op.rresult["outcome"].lower()
                c[k] = c.get(k, 0) + 1
        return c


def judge(run_dir, groups=False):
    ops, faults, final = load(run_dir)
    ch = Checker(ops, faults, final)
    passed, failed = ch.run(groups=groups)
    for n in ch.notes:
        print("note: " + n)
    print("counts: %s" % json.dumps(ch.counts(), sort_keys=True))
    return passed, failed


# ---- self-test: each check must be able to fail ------------------------
def _acq(c, id_, key, t, token, dur, lease_ms=2000, outcome="ACQUIRED", enter=True, sent=None,
         exit_late=0, woke_late=0):
    sent = t - 1000 if sent is None else sent
    lines = [dict(c=c, th=0, id=id_, ev="invoke", t=sent - 10, key=key, lease_ms=lease_ms,
                  wait_ms=1000),
             dict(c=c, th=0, id=id_, ev="result", t=t, key=key, outcome=outcome, token=token,
                  deadline=sent + lease_ms * 1000 if outcome == "ACQUIRED" else 0, sent=sent)]
    if enter:
        lines.append(dict(c=c, th=0, id=id_, ev="enter", t=t + 1, key=key, token=token))
        end = t + dur if not exit_late else sent + lease_ms * 1000 + exit_late
        lines.append(dict(c=c, th=0, id=id_, ev="exit", t=end + woke_late, key=key,
                          abandon=False, planned=end))
        end += woke_late
        if outcome == "ACQUIRED":
            lines.append(dict(c=c, th=0, id=id_, ev="rinvoke", t=end + 1, key=key, token=token))
            lines.append(dict(c=c, th=0, id=id_, ev="rresult", t=end + 500, key=key,
                              outcome="RELEASED", resent=False))
    return lines


def _in_group(lines, g):
    for ln in lines:
        if ln["ev"] == "result":
            ln["g"] = g
    return lines


def _run_case(hist, faults, next_token=10**6, groups=False):
    d = tempfile.mkdtemp(prefix="tk-chaos-selftest-")
    with open(os.path.join(d, "hist-c0.jsonl"), "w") as f:
        for ln in hist:
            f.write(json.dumps(ln) + "\n")
    with open(os.path.join(d, "faults.jsonl"), "w") as f:
        for ln in [dict(ev="domain", t=0, domain="d1", next_token=1)] + faults:
            f.write(json.dumps(ln) + "\n")
    with open(os.path.join(d, "final.json"), "w") as f:
        json.dump({"members": [dict(domain="d1", next_token=next_token)]}, f)
    ops, fl, final = load(d)
    ch = Checker(ops, fl, final)
    ch.run(quiet=True, groups=groups)
    for p in glob.glob(os.path.join(d, "*")):
        os.unlink(p)
    os.rmdir(d)
    return set(ch.failures)


def self_test():
    T = 10_000_000
    good = _acq("c0", 1, "k0", T, 100, 200_000) + _acq("c0", 2, "k0", T + 300_000, 101, 1000)
    cases = {
        "a clean history": (good, [], set()),
        "two holders at once": (_acq("c0", 1, "k0", T, 100, 500_000) +
                                _acq("c1", 1, "k0", T + 100_000, 101, 1000), [], {"one_holder"}),
        "entered on INDETERMINATE": (_acq("c0", 1, "k0", T, 0, 1000, outcome="INDETERMINATE"), [],
                                     {"indeterminate"}),
        "inside past the deadline": (_acq("c0", 1, "k0", T, 100, 0, exit_late=5000), [],
                                     {"lease_kept"}),
        "a sleep that ended past the deadline": (
            _acq("c0", 1, "k0", T, 100, 0, exit_late=-10_000, woke_late=16_000), [], set()),
        "a token that goes back": (_acq("c0", 1, "k0", T, 100, 1000) +
                                   _acq("c1", 1, "k0", T + 300_000, 99, 1000), [], {"tokens"}),
        "a token granted twice": (_acq("c0", 1, "k0", T, 100, 1000) +
                                  _acq("c1", 1, "k1", T, 100, 1000), [], {"tokens"}),
        "the later waiter first": (_acq("c0", 1, "k0", T + 900_000, 102, 1000, sent=T - 500_000) +
                                   _acq("c0", 2, "k0", T + 300_000, 101, 1000, sent=T - 400_000),
                                   [], {"fifo"}),
        "a token above next_token": (good, [], {"committed"}, 101),
        "a grant on the minority side": (
            _acq("c0", 1, "k0", T, 100, 1000, sent=T - 2000),
            [dict(ev="partition", t=T - 5000, kind="split", minority=[0], majority=[1, 2],
                  minority_clients=[0]), dict(ev="heal_start", t=T + 9000)], {"committed"}),
        "a grant while the bridge is down": (
            _acq("c0", 1, "k0", T, 100, 1000, sent=T - 2000),
            [dict(ev="bridge_down", t=T - 5000), dict(ev="bridge_up_start", t=T + 9000)],
            {"committed"}),
        "an acquire without outcome": (good[:1], [], {"complete"}),
        "a restart under an old NodeId": (
            good, [dict(ev="start", t=1, node=0), dict(ev="healthy", t=2, node_ids=["a"]),
                   dict(ev="start", t=3, node=0), dict(ev="healthy", t=4, node_ids=["a"])],
            {"fresh_ids"}),
        # --groups: a key moved from group 0 to group 1.
        "groups: a key moved, its tokens going up": (
            _acq("c0", 1, "k0", T, 100, 1000) + _in_group(_acq("c0", 2, "k0", T + 300_000, 500,
                                                                1000), 1) +
            _in_group(_acq("c0", 3, "k1", T, 100, 1000), 1), [], set(), 10**6, True),
        "groups: a key moved, its token going back": (
            _acq("c0", 1, "k0", T, 100, 1000) + _in_group(_acq("c0", 2, "k0", T + 300_000, 50,
                                                                1000), 1), [], {"tokens"}, 10**6,
            True),
        "groups: two holders, one in each group": (
            _acq("c0", 1, "k0", T, 100, 500_000) + _in_group(_acq("c1", 1, "k0", T + 100_000, 501,
                                                                   1000), 1), [], {"one_holder"},
            10**6, True),
    }
    bad = 0
    for name, case in cases.items():
        hist, faults, want = case[0], case[1], case[2]
        got = _run_case(hist, faults, *(case[3:]))
        ok = got == want
        bad += not ok
        print("%s %s: caught %s" % ("ok  " if ok else "FAIL", name, sorted(got) or "nothing"))
    print("self-test: %d passed, %d failed" % (len(cases) - bad, bad))
    return bad == 0


def main():
    if len(sys.argv) == 2 and sys.argv[1] == "--self-test":
        sys.exit(0 if self_test() else 1)
    groups = len(sys.argv) == 3 and sys.argv[1] == "--groups"
    if len(sys.argv) != 2 and not groups:
        print(__doc__)
        sys.exit(64)
    passed, failed = judge(sys.argv[-1], groups)
    print("%d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
