#!/usr/bin/env bash
# What TLS costs: the same 3-node cluster and the same load, once with
# plaintext client and peer ports and once with TLS on both (client
# certificates required), in one run; pairs/s and acquire p99 side by side
# with the TLS/plaintext ratio. Everything on 127.0.0.1.
#
#   bench/tls.sh [--duration S] [--build DIR]
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
DURATION=10
BUILD=$ROOT/build-bench
while (($#)); do
    case $1 in
        --duration) DURATION=$2; shift 2 ;;
        --build) BUILD=$2; shift 2 ;;
        *) echo "usage: bench/tls.sh [--duration S] [--build DIR]" >&2; exit 64 ;;
    esac
done
# shellcheck source=bench/lib.sh
source "$HERE/lib.sh"
trap bench_cleanup EXIT
bench_tmp_init
if [[ ! -x "$BUILD/ticketingd" || ! -x "$BUILD/ticketing-bench" ]]; then
    cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
    cmake --build "$BUILD" -j2 --target ticketingd ticketing-bench >/dev/null
fi
BENCH=$BUILD/ticketing-bench
sh "$ROOT/tests/support/make_certs.sh" "$BENCH_TMP/certs"
C=$BENCH_TMP/certs
SCEN=("uncontended --conns 64 --depth 4" "hotkey --conns 64" "ticketdrop --conns 256 --keys 16 --hold-ms 1")

run_all() { # label, extra bench args...
    local label=$1 s i=0
    shift
    for s in "${SCEN[@]}"; do
        # shellcheck disable=SC2086
        "$BENCH" --driver ticketing --addr "$TK_ADDRS" --secret-file "$TK_SECRET" \
            --scenario $s --duration "$DURATION" --json-out "$BENCH_TMP/$label.$i.json" "$@" \
            2>>"$BENCH_TMP/$label.log" || { tail -3 "$BENCH_TMP/$label.log" >&2; exit 1; }
        i=$((i + 1))
    done
}

start_ticketing "$BUILD" 2
run_all plain
stop_ticketing
start_ticketing "$BUILD" 2 --tls-cert "$C/node.pem" --tls-key "$C/node.key" \
    --tls-ca "$C/ca.pem" --tls-client-auth
run_all tls --tls-ca "$C/ca.pem" --tls-cert "$C/client.pem" --tls-key "$C/client.key"
stop_ticketing

printf '| scenario | plaintext pairs/s | TLS pairs/s | TLS/plain | plaintext p99 (us) | TLS p99 (us) | TLS/plain |\n'
printf '|---|---|---|---|---|---|---|\n'
for i in "${!SCEN[@]}"; do
    p=$BENCH_TMP/plain.$i.json t=$BENCH_TMP/tls.$i.json
    jq -rn --slurpfile p "$p" --slurpfile t "$t" --arg s "${SCEN[$i]%% *}" '
        ($p[0].pairs_per_s) as $pp | ($t[0].pairs_per_s) as $tp |
        ($p[0].latency_us.p99) as $pl | ($t[0].latency_us.p99) as $tl |
        "| \($s) | \($pp|floor) | \($tp|floor) | \(if $pp > 0 then ($tp/$pp*100|floor/100) else "-" end) | \($pl|floor) | \($tl|floor) | \(if $pl > 0 then ($tl/$pl*100|floor/100) else "-" end) |"'
done
