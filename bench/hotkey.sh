#!/usr/bin/env bash
# The hot key and the tail, compared between builds on local 3-node
# clusters: hotkey-16 and hotkey-64 (FIFO judged, --fifo-probe),
# uncontended at peak (64 connections) and open loop at half of that peak.
# One cluster per build runs at a time side by side (an idle cluster costs
# about 1% CPU), and the runs alternate between them, build after build,
# so that whatever else the machine does meets every build alike. Medians
# over the rounds are printed per build, with the server CPU per pair
# (all three nodes, from /proc/<pid>/stat) beside each throughput.
# Usage: bench/hotkey.sh [-t THREADS] [-r ROUNDS] [-k] BUILD_DIR [BUILD_DIR...]
#   THREADS: ticketingd --threads (default 1); ROUNDS (default 5); -k: the
#   hot key only (no uncontended runs).
# Environment: DUR (3 s per run), WARM (1 s).
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=1
ROUNDS=5
HOT_ONLY=0
while getopts "t:r:k" o; do
    case $o in
        t) THREADS=$OPTARG ;;
        r) ROUNDS=$OPTARG ;;
        k) HOT_ONLY=1 ;;
        *) exit 2 ;;
    esac
done
shift $((OPTIND - 1))
(($#)) || { echo "usage: bench/hotkey.sh [-t THREADS] [-r ROUNDS] BUILD_DIR..." >&2; exit 2; }
DUR=${DUR:-3}
WARM=${WARM:-1}
BUILDS=()
for b in "$@"; do BUILDS+=("$(cd "$b" && pwd)"); done

source bench/lib.sh
trap bench_cleanup EXIT
bench_tmp_init

# One cluster per build; their addresses, secrets and pids by build index.
ADDRS=() SECRETS=() PIDS=()
for i in "${!BUILDS[@]}"; do
    start_ticketing "${BUILDS[$i]}" "$THREADS"
    ADDRS[i]=$TK_ADDRS SECRETS[i]=$TK_SECRET PIDS[i]="${TK_PIDS[*]}"
done

cpu_ticks() { # pids...: utime + stime, summed
    local pid t=0 u s
    for pid in "$@"; do
        read -r u s < <(awk '{ print $14, $15 }' "/proc/$pid/stat")
        t=$((t + u + s))
    done
    echo "$t"
}

# run I NAME ARGS...: one run against build I's cluster; appends
# "rate p99_ms cpu_us_per_pair" to $BENCH_TMP/I.NAME and fails the script
# if a check failed.
run() {
    local i=$1 name=$2; shift 2
    local out="$BENCH_TMP/run.json" c0 c1 rc=0
    : >"$out"
    # shellcheck disable=SC2086
    c0=$(cpu_ticks ${PIDS[$i]})
    "${BUILDS[$i]}/ticketing-bench" --driver ticketing --addr "${ADDRS[$i]}" \
        --secret-file "${SECRETS[$i]}" --warmup "$WARM" --duration "$DUR" --json-out "$out" \
        "$@" 2>>"$BENCH_TMP/bench.err" || rc=$?
    # shellcheck disable=SC2086
    c1=$(cpu_ticks ${PIDS[$i]})
    if ((rc != 0)) || ! jq -e '.checks.ok' "$out" >/dev/null; then
        bench_log "${BUILDS[$i]} $name: ticketing-bench exited $rc or a check failed:"
        cat "$out" >&2
        exit 1
    fi
    # CPU over warm-up and measurement, pairs of the measurement scaled to
    # both: an estimate, comparable between builds.
    jq -r --arg d $((c1 - c0)) --arg hz "$(getconf CLK_TCK)" --arg w "$WARM" --arg t "$DUR" \
        '"\(.pairs_per_s | floor) \(.latency_us.p99 / 10 | floor | . / 100) \(($d | tonumber) * 1e6 / ($hz | tonumber) / (.pairs * (($w | tonumber) + ($t | tonumber)) / ($t | tonumber)) | floor)"' \
        "$out" >>"$BENCH_TMP/$i.$name"
}

median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
col() { [[ -f "$BENCH_TMP/$1" ]] && awk -v c="$2" '{ print $c }' "$BENCH_TMP/$1"; }

for ((r = 1; r <= ROUNDS; r++)); do
    for i in "${!BUILDS[@]}"; do
        run "$i" hk16 --scenario hotkey --conns 16 --fifo-probe
    done
    for i in "${!BUILDS[@]}"; do
        run "$i" hk64 --scenario hotkey --conns 64 --fifo-probe
    done
    for i in "${!BUILDS[@]}"; do
        ((HOT_ONLY)) && break
        run "$i" unc --scenario uncontended --conns 64
        peak=$(tail -n 1 "$BENCH_TMP/$i.unc" | awk '{ print $1 }')
        run "$i" half --scenario uncontended --conns 64 --rate $((peak / 2))
    done
    bench_log "round $r of $ROUNDS done"
done

printf 'threads %s, %s rounds of %s s, medians: rate (server CPU us per pair)\n' "$THREADS" \
    "$ROUNDS" "$DUR"
for i in "${!BUILDS[@]}"; do
    printf '%s: hotkey-16 %s (%s us), hotkey-64 %s (%s us), uncontended %s (%s us) p99 %s ms, half-load p99 %s ms\n' \
        "${BUILDS[$i]}" "$(col "$i.hk16" 1 | median)" "$(col "$i.hk16" 3 | median)" \
        "$(col "$i.hk64" 1 | median)" "$(col "$i.hk64" 3 | median)" \
        "$(col "$i.unc" 1 | median)" "$(col "$i.unc" 3 | median)" "$(col "$i.unc" 2 | median)" \
        "$(col "$i.half" 2 | median)"
    printf '  runs: hk16 %s | hk64 %s | half p99 %s\n' "$(col "$i.hk16" 1 | xargs)" \
        "$(col "$i.hk64" 1 | xargs)" "$(col "$i.half" 2 | xargs)"
done
