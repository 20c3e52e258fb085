#!/usr/bin/env bash
# Smoke run of every ticketing-bench driver against real servers on
# 127.0.0.1 (ctest: bench_smoke, label bench): a 3-node Ticketing cluster
# from the build directory, a 3-member etcd cluster and one Redis.
#
#   bench/smoke.sh BUILD_DIR
#
# Passes when each driver completed N pairs without errors and the safety
# and FIFO checks passed (Ticketing also over TLS, when openssl is there to
# make certificates). No timing thresholds. Exits 77 (skipped) when
# etcd or redis-server is not installed (bench/run.sh installs them).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
BUILD=$(cd "${1:?usage: smoke.sh BUILD_DIR}" && pwd)
BENCH="$BUILD/ticketing-bench"

for tool in etcd redis-server curl jq; do
    if ! command -v "$tool" >/dev/null; then
        echo "bench_smoke: $tool is not installed: skipped (bench/run.sh installs it)"
        exit 77
    fi
done
[[ -x "$BENCH" && -x "$BUILD/ticketingd" ]] || { echo "bench_smoke: build ticketing-bench and ticketingd first"; exit 1; }

# shellcheck source=bench/lib.sh
source "$HERE/lib.sh"
bench_tmp_init
ETCD_SHM_DIR=$(mktemp -d /dev/shm/tk-smoke-etcd.XXXXXX)
trap bench_cleanup EXIT

FAILED=0
check() { # name min_pairs bench args...
    local name=$1 min=$2; shift 2
    local rc=0 out
    out=$(timeout -s KILL 60 "$BENCH" "$@" --warmup 0.3 --duration 1.5 --min-pairs "$min" \
        --json-out "$BENCH_TMP/smoke.jsonl" 2>&1) || rc=$?
    if ((rc == 0)); then
        echo "ok   $name: $(echo "$out" | tail -n 1 | cut -c1-160)"
    else
        echo "FAIL $name (exit $rc):"
        echo "$out" | tail -n 5
        FAILED=1
    fi
}

start_ticketing "$BUILD" 2 || { echo "bench_smoke: ticketing cluster did not start"; exit 1; }
start_etcd "$ETCD_SHM_DIR" || { echo "bench_smoke: etcd did not start"; exit 1; }
start_redis || { echo "bench_smoke: redis did not start"; exit 1; }

# Ticketing's FIFO promise is judged: a ping behind each acquire marks its arrival.
TK=(--driver ticketing --addr "$TK_ADDRS" --secret-file "$TK_SECRET" --fifo-probe)
ET=(--driver etcd --addr "$ETCD_ADDRS")
RD=(--driver redis --addr "$REDIS_ADDR")
for d in TK ET RD; do
    declare -n args=$d
    name=${args[1]}
    check "$name uncontended" 50 "${args[@]}" --scenario uncontended --conns 4 --depth 2
    check "$name hotkey" 20 "${args[@]}" --scenario hotkey --conns 4
    check "$name ticketdrop" 20 "${args[@]}" --scenario ticketdrop --conns 8 --keys 4 --hold-ms 1
    unset -n args
done
# Open loop, with its backlog and intended-time latency.
check "ticketing open loop" 50 "${TK[@]}" --scenario uncontended --conns 4 --rate 400

# TLS on the client port (certificates from the tests' openssl script; the
# node certificate names 127.0.0.1, so M redirects verify too).
if command -v openssl >/dev/null; then
    stop_ticketing
    sh "$HERE/../tests/support/make_certs.sh" "$BENCH_TMP/certs"
    C=$BENCH_TMP/certs
    start_ticketing "$BUILD" 2 --tls-cert "$C/node.pem" --tls-key "$C/node.key" \
        --tls-ca "$C/ca.pem" --tls-client-auth ||
        { echo "bench_smoke: ticketing cluster with TLS did not start"; exit 1; }
    check "ticketing tls" 50 --driver ticketing --addr "$TK_ADDRS" --secret-file "$TK_SECRET" \
        --tls-ca "$C/ca.pem" --tls-cert "$C/client.pem" --tls-key "$C/client.key" \
        --fifo-probe --scenario uncontended --conns 4 --depth 2
else
    echo "skip ticketing tls: openssl is not installed"
fi

if ((FAILED)); then
    echo "bench_smoke: FAILED"
    exit 1
fi
echo "bench_smoke: every driver completed its pairs, no errors, checks ok"
