#!/usr/bin/env python3
"""The Python client's cost per acquire + release.

    clients/python/bench.py --addr 127.0.0.1:7400 --secret-file client.secret [--pairs 5000]

Runs N sequential acquire/release pairs on one key through one
ticketing.Client (closed loop, one request at a time) and prints the pairs
per second, the mean wall time per pair and the CPU time per pair of this
process (the caller's thread and the client's I/O thread together). The C
figure to set it beside is ticketing-bench's hotkey scenario with one
connection and one slot (one key, acquire then release, one at a time):

    build/ticketing-bench --driver ticketing --addr 127.0.0.1:7400 \\
        --secret-file client.secret --scenario hotkey --conns 1 --depth 1 --duration 5
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import ticketing  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--addr", required=True)
    ap.add_argument("--secret-file", required=True)
    ap.add_argument("--pairs", type=int, default=5000)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--key", default=f"pybench-{os.getpid()}")
    a = ap.parse_args()
    with ticketing.Client(a.addr, secret_file=a.secret_file) as c:
        for _ in range(a.warmup):
            c.release(c.acquire(a.key, 10000, 1000))
        w0, c0 = time.perf_counter(), time.process_time()
        for _ in range(a.pairs):
            c.release(c.acquire(a.key, 10000, 1000))
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    out = {"client": "python", "pairs": a.pairs, "pairs_per_s": round(a.pairs / wall),
           "wall_us_per_pair": round(wall / a.pairs * 1e6, 1),
           "cpu_us_per_pair": round(cpu / a.pairs * 1e6, 1)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
