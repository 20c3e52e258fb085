#!/usr/bin/env bash
# One group against two and three, and the grant gap of a slot move, in
# one run on this machine (docs/scaling.md, docs/benchmarks.md section 12).
#
#   bench/groups.sh [--quick] [--no-install]
#
# For G = 1, 2, 3: starts G groups of three ticketingd (--group g1..gG),
# gives each the ring that splits the 16,384 slots evenly, and runs one
# ticketing-bench per group at once (uncontended acquire+release, the
# keys of that group's slots, 64 connections in all). Reports pairs/s in
# all, server CPU (user + system of every ticketingd, from /proc) per pair,
# and the ratio to G = 1. On 2 shared cores the sum cannot grow with G: the
# useful figures are CPU per pair (what a group costs) and how it changes
# with the ring's check of each key's slot. G = 1 is also run without a
# ring (the default group: no slot check) to show the routing cost.
#
# Then the move: two groups, chaos_client (tests/chaos) contending on six
# keys of slots 0-99 through a client per group, and `ticketctl slots move
# 0-99` half-way; the grant gap is the time from the last grant of a moved
# key in the source to the first in the target. tests/chaos/check.py
# --groups judges the history (it must pass).
#
# Writes bench/results/<date>-<commit>-groups.{json,md}.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
QUICK=0
INSTALL=1
for arg in "$@"; do
    case "$arg" in
    --quick) QUICK=1 ;;
    --no-install) INSTALL=0 ;;
    -h | --help) sed -n '2,23p' "$0"; exit 0 ;;
    *) echo "unknown argument $arg" >&2; exit 2 ;;
    esac
done

# shellcheck source=bench/lib.sh
source "$HERE/lib.sh"
bench_tmp_init
trap bench_cleanup EXIT
trap 'exit 130' INT TERM

if [[ $QUICK == 1 ]]; then WARM=1; DUR=3; MOVE_S=10; else WARM=2; DUR=10; MOVE_S=16; fi
CONNS=64

bench_install "$INSTALL"
BUILD="$ROOT/build-bench"
bench_log "building (Release) in $BUILD"
cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" -j2 --target ticketingd ticketing-bench ticketctl chaos_client >/dev/null
BENCH="$BUILD/ticketing-bench"
CTL="$BUILD/ticketctl"
COMMIT=$(bench_commit "$ROOT")
export COMMIT
NAME="$(date -u +%Y-%m-%d)-$COMMIT-groups"
[[ $QUICK == 1 ]] && NAME="$NAME-quick"
RESULTS="$HERE/results"
mkdir -p "$RESULTS"
RUNS="$BENCH_TMP/groups.jsonl"
: >"$RUNS"

# Each group's variables from lib.sh's start_ticketing, kept by index.
G_ADDRS=() G_PEERS=() G_DIRS=() G_PIDS=()
start_groups() { # N: groups g1..gN (NO_RING=1: the default group, no --group)
    local n=$1 g
    G_ADDRS=() G_PEERS=() G_DIRS=() G_PIDS=()
    for ((g = 1; g <= n; g++)); do
        if [[ ${NO_RING:-0} == 1 ]]; then
            start_ticketing "$BUILD" 1
        else
            start_ticketing "$BUILD" 1 --group "g$g"
        fi
        G_ADDRS+=("$TK_ADDRS") G_PEERS+=("$TK_PEERS") G_DIRS+=("$TK_DIR")
        G_PIDS+=("${TK_PIDS[*]}")
    done
}

stop_groups() {
    local p
    for p in "${G_PIDS[@]}"; do
        # shellcheck disable=SC2086
        bench_kill $p
    done
    G_PIDS=()
}

# The first and last slot of group g (1-based) of n.
slot_lo() { echo $(((($1 - 1) * 16384) / $2)); }
slot_hi() { echo $((($1 * 16384) / $2 - 1)); }

# ring_file N PATH [MOVED]: the even split among N groups; MOVED: slots
# 0-99 at g2 (a higher version).
ring_file() {
    local n=$1 path=$2 moved=${3:-0} g lo
    {
        echo "version $((1 + moved))"
        for ((g = 1; g <= n; g++)); do
            lo=$(slot_lo "$g" "$n")
            if ((moved == 1 && g == 1)); then
                echo "0-99=g2@${G_ADDRS[1]}"
                lo=100
            fi
            echo "$lo-$(slot_hi "$g" "$n")=g$g@${G_ADDRS[$((g - 1))]}"
        done
    } >"$path"
}

give_rings() { # N PATH
    local g
    for ((g = 1; g <= $1; g++)); do
        "$CTL" ring apply "$2" --group "g$g" --peers "${G_PEERS[$((g - 1))]}" \
            --peer-secret-file "${G_DIRS[$((g - 1))]}/peer.secret" --timeout 20s >/dev/null
    done
}

# CPU ticks (user + system) of every server process.
cpu_ticks() {
    local p t=0 pid
    for p in "${G_PIDS[@]}"; do
        for pid in $p; do
            t=$((t + $(awk '{ print $14 + $15 }' "/proc/$pid/stat")))
        done
    done
    echo "$t"
}

# run_groups LABEL N: one ticketing-bench per group at once.
run_groups() {
    local label=$1 n=$2 g pids=() c0 c1 tick
    tick=$(getconf CLK_TCK)
    local out="$BENCH_TMP/$label.jsonl"
    : >"$out"
    for ((g = 1; g <= n; g++)); do
        local slots=()
        [[ ${NO_RING:-0} == 1 ]] || slots=(--slots "$(slot_lo "$g" "$n")-$(slot_hi "$g" "$n")")
        "$BENCH" --driver ticketing --addr "${G_ADDRS[$((g - 1))]}" \
            --secret-file "${G_DIRS[$((g - 1))]}/client.secret" --scenario uncontended \
            --conns $((CONNS / n)) --warmup "$WARM" --duration "$DUR" "${slots[@]}" \
            --label "$label" --case "g$g" --json-out "$out" 2>>"$BENCH_TMP/bench.err" &
        pids+=($!)
    done
    sleep "$WARM" # the CPU of the measured part (and the short drain after it)
    c0=$(cpu_ticks)
    for g in "${pids[@]}"; do wait "$g" || bench_log "a ticketing-bench exited non-zero"; done
    c1=$(cpu_ticks)
    jq -s -c --arg l "$label" --argjson n "$n" --argjson cpu "$(((c1 - c0) * 1000000 / tick))" \
        '{label: $l, groups: $n, pairs_per_s: (map(.pairs_per_s) | add),
          pairs: (map(.pairs) | add), server_cpu_us: $cpu,
          cpu_us_per_pair: ($cpu / ((map(.pairs) | add) + 0.000001)),
          p50_us: (map(.latency_us.p50) | max), p99_us: (map(.latency_us.p99) | max)}' \
        "$out" >>"$RUNS"
    bench_log "$label: $(tail -n 1 "$RUNS")"
}

for n in 1 2 3; do
    if ((n == 1)); then
        NO_RING=1 start_groups 1
        NO_RING=1 run_groups "1 group, no ring" 1
        stop_groups
    fi
    start_groups "$n"
    ring_file "$n" "$BENCH_TMP/ring$n.txt"
    give_rings "$n" "$BENCH_TMP/ring$n.txt"
    run_groups "$n group$([[ $n == 1 ]] || echo s)" "$n"
    stop_groups
done

# ---- the grant gap of a move -------------------------------------------------------
bench_log "move: 2 groups, 6 contended keys in slots 0-99, move at half-time"
start_groups 2
ring_file 2 "$BENCH_TMP/ring-move1.txt"
ring_file 2 "$BENCH_TMP/ring-move2.txt" 1
give_rings 2 "$BENCH_TMP/ring-move1.txt"
MDIR="$BENCH_TMP/move"
mkdir -p "$MDIR"
"$BUILD/tests/chaos_client" --addrs "${G_ADDRS[0]}" --secret-file "${G_DIRS[0]}/client.secret" \
    --addrs-b "${G_ADDRS[1]}" --secret-file-b "${G_DIRS[1]}/client.secret" --slots 0-99 \
    --out "$MDIR/hist-c0.jsonl" --name c0 --threads 6 --keys 6 --lease-ms 2000 --wait-ms 1000 \
    --seconds "$MOVE_S" --hold-max-ms 20 --abandon-pct 0 --seed 11 2>"$MDIR/client.log" &
LOAD=$!
sleep $((MOVE_S / 2))
T0=$(date +%s%N)
"$CTL" slots move 0-99 --group g1 --to g2 --ring "$BENCH_TMP/ring-move2.txt" \
    --peers "${G_PEERS[0]}" --to-peers "${G_PEERS[1]}" \
    --peer-secret-file "${G_DIRS[0]}/peer.secret" --to-peer-secret-file "${G_DIRS[1]}/peer.secret" \
    --timeout 20s >"$MDIR/move.out" 2>"$MDIR/move.err"
T1=$(date +%s%N)
wait "$LOAD"
python3 "$ROOT/tests/chaos/check.py" --groups "$MDIR" >"$MDIR/check.out" || {
    cat "$MDIR/check.out" >&2
    bench_log "the history checker failed: the move is not safe"
    exit 1
}
# The gap: last source grant before the first target grant, of any moved key.
GAP=$(jq -s -c '[.[] | select(.ev == "result" and (.outcome | ascii_upcase) == "ACQUIRED")]
    | ([.[] | select(.g == 1)] | map(.t) | min) as $first_b
    | ([.[] | select(.g == 0 and .t < $first_b)] | map(.t) | max) as $last_a
    | {gap_ms: (($first_b - $last_a) / 1000), grants_source: ([.[] | select(.g == 0)] | length),
       grants_target: ([.[] | select(.g == 1)] | length)}' "$MDIR/hist-c0.jsonl")
jq -c --argjson gap "$GAP" --argjson took "$(((T1 - T0) / 1000000))" \
    -n '{label: "move 0-99 under load", move_ms: $took} + $gap' >>"$RUNS"
bench_log "move: $(tail -n 1 "$RUNS")"
stop_groups

# ---- results -------------------------------------------------------------------------
jq -s --argjson m "$(bench_machine_json)" '{commit: env.COMMIT, runs: .} + $m' "$RUNS" \
    >"$RESULTS/$NAME.json"
{
    echo "# Groups: one against two and three ($COMMIT, $(date -u +%Y-%m-%d))"
    echo
    echo "Each group 3 ticketingd --threads 1 on 127.0.0.1, all on this machine's $(nproc) shared"
    echo "cores; one ticketing-bench per group, uncontended, $CONNS connections in all, ${DUR} s."
    echo
    echo "| run | pairs/s | vs 1 group | server CPU us/pair | vs 1 group | acquire p99 us |"
    echo "|---|---|---|---|---|---|"
    jq -s -r '(map(select(.label == "1 group")) | .[0]) as $one
        | .[] | select(.groups)
        | "| \(.label) | \(.pairs_per_s | floor) | \((.pairs_per_s / $one.pairs_per_s * 100 | floor) / 100) | \(.cpu_us_per_pair * 10 | floor / 10) | \((.cpu_us_per_pair / $one.cpu_us_per_pair * 100 | floor) / 100) | \(.p99_us) |"' "$RUNS"
    echo
    jq -s -r '.[] | select(.move_ms)
        | "Move of slots 0-99 between two groups under load: the move took \(.move_ms) ms; the grant gap (last grant in the source to the first in the target) was \(.gap_ms) ms; \(.grants_source) grants in the source, \(.grants_target) in the target; check.py --groups passed."' "$RUNS"
} >"$RESULTS/$NAME.md"
cat "$RESULTS/$NAME.md"
