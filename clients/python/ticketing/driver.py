"""The conformance driver of the Python client.

    python3 -m ticketing.driver --addrs HOST:PORT[,HOST:PORT...] --secret-file PATH
        --owner NAME [--response-grace-ms N] [--connect-timeout-ms N]
        [--send-budget-min-ms N] [--request-timeout-ms N] [--backoff-min-ms N]
        [--backoff-max-ms N] [--release-queue-max N] [--tls-ca-file PATH]
        [--tls-cert-file PATH] [--tls-key-file PATH] [--tls-server-name NAME]

Makes one Client and keeps it for the whole session. Reads one JSON command
per line on stdin and writes one JSON reply per line on stdout, in order,
flushed after each. Outcome names are those of the C library without the
TK_CLIENT_ prefix; a WRONG_GROUP reply also carries slot and ring_version.
The stats reply carries ring_version (of the ring the client routes by) and
rerouted (requests sent again after a W). A malformed command gets outcome
DRIVER_ERROR.
"""
import argparse
import json
import sys
import time

from ._proto import slot
from .client import Client
from .errors import OUTCOMES, WRONG_GROUP

KNOBS = ("response_grace_ms", "connect_timeout_ms", "send_budget_min_ms", "request_timeout_ms",
         "backoff_min_ms", "backoff_max_ms", "release_queue_max")
TLS = ("tls_ca_file", "tls_cert_file", "tls_key_file", "tls_server_name")


def _int(cmd, name):
    v = cmd.get(name)
    if not isinstance(v, int) or isinstance(v, bool):
        raise ValueError(f"{name} must be an integer")
    return v


def _str(cmd, name):
    v = cmd.get(name)
    if not isinstance(v, str):
        raise ValueError(f"{name} must be a string")
    return v


def _wrong(r, reply):
    """A W answer's slot and ring version join the reply (WRONG_GROUP only)."""
    if r.outcome == WRONG_GROUP:
        reply["slot"], reply["ring_version"] = r.slot, r.ring_version
    return reply


def handle(client, cmd):
    """One command -> its reply (without elapsed_ms)."""
    op = cmd.get("op")
    if op == "acquire":
        key, lease, wait = _str(cmd, "key"), _int(cmd, "lease_ms"), _int(cmd, "wait_ms")
        r = client.acquire_result(key, lease, wait)
        return _wrong(r, {"outcome": r.outcome, "token": r.token if r.outcome == "ACQUIRED" else 0,
                          "reason": r.reason})
    if op == "release":
        key, token = _str(cmd, "key"), _int(cmd, "token")
        r = client.release_result(key, token)
        return _wrong(r, {"outcome": r.outcome, "resent": bool(r.resent), "reason": r.reason})
    if op == "query":
        r = client.query_result(_str(cmd, "key"))
        return _wrong(r, {"outcome": r.outcome, "held": bool(r.held), "owner": r.owner,
                          "token": r.token if r.outcome == "ANSWERED" else 0,
                          "waiters": r.waiters, "reason": r.reason})
    if op == "ping":
        r = client.ping_result()
        return {"outcome": r.outcome, "reason": r.reason}
    if op == "ring":
        r = client.ring_result()
        ok = r.outcome == "ANSWERED"
        return {"outcome": r.outcome, "version": r.ring_version if ok else 0,
                "body": r.body if ok else "", "reason": r.reason}
    if op == "sleep":
        ms = _int(cmd, "ms")
        if ms < 0:
            raise ValueError("ms must be >= 0")
        time.sleep(ms / 1000)  # the I/O thread goes on meanwhile
        return {"outcome": "OK"}
    if op == "stats":
        st = client.stats()
        return {"outcome": "OK", "compensations": st["compensations"],
                "indeterminate": st["indeterminate"], "moved": st["moved"],
                "releases_queued": st["releases_queued"],
                "ring_version": st["ring_version"], "rerouted": st["rerouted"]}
    if op == "slot":
        return {"outcome": "OK", "slot": slot(_str(cmd, "key"))}
    if op == "close":
        client.close()
        return {"outcome": "OK"}
    raise ValueError(f"unknown op {op!r}")


def main(argv=None):
    ap = argparse.ArgumentParser(prog="ticketing.driver", description=__doc__.split("\n")[0])
    ap.add_argument("--addrs", required=True)
    ap.add_argument("--secret-file", required=True)
    ap.add_argument("--owner", required=True)
    for k in KNOBS:
        ap.add_argument("--" + k.replace("_", "-"), type=int, default=None)
    for k in TLS:
        ap.add_argument("--" + k.replace("_", "-"), default=None)
    a = ap.parse_args(argv)
    knobs = {k: getattr(a, k) for k in KNOBS + TLS if getattr(a, k) is not None}
    client = Client(a.addrs, secret_file=a.secret_file, owner=a.owner, **knobs)
    out = sys.stdout
    for line in sys.stdin:
        if not line.strip():
            continue
        start = time.monotonic()
        try:
            cmd = json.loads(line)
            if not isinstance(cmd, dict):
                raise ValueError("a command is a JSON object")
            reply = handle(client, cmd)
        except (ValueError, TypeError) as e:
            reply = {"outcome": "DRIVER_ERROR", "message": str(e)}
            cmd = None
        assert reply["outcome"] in OUTCOMES or reply["outcome"] in ("OK", "DRIVER_ERROR")
        reply["elapsed_ms"] = int((time.monotonic() - start) * 1000)
        out.write(json.dumps(reply) + "\n")
        out.flush()
        if isinstance(cmd, dict) and cmd.get("op") == "close":
            return 0
    client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
