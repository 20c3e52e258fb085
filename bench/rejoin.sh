#!/usr/bin/env bash
# Members coming back, measured on a local 3-node cluster (127.0.0.1):
#   1. time from a restart (kill -9, then a fresh process at the same
#      address) to a caught-up voter: /readyz 200 on the new process, whose
#      predecessor is out of the configuration, with HELD_KEYS held locks;
#   2. a rolling restart (SIGTERM, restart, wait for /readyz; every member
#      in turn, the leader last, as a StatefulSet RollingUpdate does) under
#      load: per step, the longest gap between grants the load generator
#      saw, and the restart-to-ready time.
# Usage: bench/rejoin.sh [BUILD_DIR]   (default build; needs curl)
# Environment: HELD_KEYS (0), THREADS (1 worker per node), LOAD_CONNS (16),
#   LOAD_S (12: seconds of load per rolling step, the restart 3 s in),
#   TIMERS ("" = the defaults: heartbeat 100 ms, election 2400 ms; e.g.
#   "--heartbeat-ms 50 --election-ms 400"),
#   JSON_OUT (a file: each measurement is also appended to it as one JSON
#   object a line, "kind" rejoin, rolling or check; bench/scale.sh reads it).
# Prints one line per measurement; the held locks' count and the domain
# are checked at the end (they must survive every step). The held keys'
# lease is 250 s: everything after the fill must end within it.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
HELD_KEYS=${HELD_KEYS:-0}
THREADS=${THREADS:-1}
LOAD_CONNS=${LOAD_CONNS:-16}
LOAD_S=${LOAD_S:-12}
JSON_OUT=${JSON_OUT:-}
read -r -a TIMERS <<<"${TIMERS:-}"
BENCH="$BUILD/ticketing-bench"

# shellcheck source=bench/lib.sh
source bench/lib.sh
trap bench_cleanup EXIT
trap 'exit 143' INT TERM # a timeout's TERM still runs the cleanup
bench_tmp_init

now_ms() { date +%s%3N; }
status_of() { curl -s -m 2 "http://127.0.0.1:$((TK_PORTS[$1] + 2))/status"; }
field() { sed -n "s/.*\"$2\":\"\\{0,1\\}\\([^,\"}]*\\).*/\\1/p" <<<"$1" | head -1; }
# json KEY VALUE ...: one object of numbers (a value in quotes stays a
# string) appended to JSON_OUT, if set.
json() {
    [[ -n "$JSON_OUT" ]] || return 0
    local out="{" sep=""
    while (($# >= 2)); do
        out+="$sep\"$1\":$2"
        sep=","
        shift 2
    done
    echo "$out}" >>"$JSON_OUT"
}

# restart I SIGNAL: stops node I with SIGNAL, starts a fresh process at its
# address and sets READY_MS to the milliseconds from the restart to /readyz
# (not a subshell: tk_spawn records the new pid).
restart() {
    local i=$1 sig=$2 pid=${TK_PIDS[$1]}
    kill "-$sig" "$pid" 2>/dev/null || true
    local k
    for ((k = 0; k < 200; k++)); do pid_alive "$pid" || break; sleep 0.05; done
    bench_forget "$pid"
    local t0
    t0=$(now_ms)
    tk_spawn "$i"
    wait_until 600 tk_ready "$i" || { bench_log "node $i not ready in 600 s"; return 1; }
    READY_MS=$(($(now_ms) - t0))
}

start_ticketing "$BUILD" "$THREADS" --max-keys $((HELD_KEYS * 2 + 100000)) "${TIMERS[@]}"
li=$(tk_leader_index)
domain=$(field "$(status_of "$li")" domain)
bench_log "cluster up: leader node $li, domain $domain, timers: ${TIMERS[*]:-defaults}"

if ((HELD_KEYS > 0)); then
    bench_log "holding $HELD_KEYS keys (lease 250 s)"
    hold_args "$HELD_KEYS" 256
    "$BENCH" --driver ticketing --addr "$TK_ADDRS" --secret-file "$TK_SECRET" "${HOLD_ARGS[@]}" \
        --prefix "held$RANDOM-" --json-out "$BENCH_TMP/fill.json" 2>>"$BENCH_TMP/bench.err"
fi
held0=$(field "$(status_of "$li")" held)
bench_log "held keys on the leader: $held0"

# 1. kill -9 of each follower in turn: restart to caught-up voter.
for i in 0 1 2; do
    [[ $i == "$(tk_leader_index)" ]] && continue
    restart "$i" KILL
    echo "rejoin after kill -9: node $i, held $held0 keys: restart to ready voter $READY_MS ms"
    json kind '"rejoin"' node "$i" held_keys "${held0:-null}" ready_ms "$READY_MS"
done

# 2. Rolling restart under load, followers first, the leader last.
li=$(tk_leader_index)
order=()
for i in 0 1 2; do [[ $i != "$li" ]] && order+=("$i"); done
order+=("$li")
step=0
for i in "${order[@]}"; do
    step=$((step + 1))
    role=follower
    [[ $i == "$(tk_leader_index)" ]] && role=leader
    out="$BENCH_TMP/step$step.json"
    "$BENCH" --driver ticketing --addr "$TK_ADDRS" --secret-file "$TK_SECRET" \
        --scenario failover --conns "$LOAD_CONNS" --keys 1024 --lease-ms 10000 \
        --warmup 1 --duration "$LOAD_S" --prefix "roll$step-" --json-out "$out" \
        2>>"$BENCH_TMP/bench.err" &
    bpid=$!
    BENCH_PIDS+=("$bpid")
    sleep 3
    restart "$i" TERM
    wait "$bpid" || bench_log "ticketing-bench exited $? in step $step"
    bench_forget "$bpid"
    gap=$(sed -n 's/.*"max_gap_ms":\([0-9]*\).*/\1/p' "$out" | tail -1)
    pairs=$(sed -n 's/.*"pairs":\([0-9]*\).*/\1/p' "$out" | tail -1)
    echo "rolling step $step: SIGTERM of the $role (node $i): restart to ready ${READY_MS} ms," \
        "longest gap between grants ${gap:-?} ms (${pairs:-?} pairs in $LOAD_S s)"
    json kind '"rolling"' step "$step" role "\"$role\"" node "$i" held_keys "${held0:-null}" \
        ready_ms "$READY_MS" max_gap_ms "${gap:-null}" pairs "${pairs:-null}" load_s "$LOAD_S"
done

li=$(tk_leader_index)
st=$(status_of "$li")
held1=$(field "$st" held)
domain1=$(field "$st" domain)
echo "after every step: held keys $held0 -> $held1, domain ${domain} -> ${domain1}"
json kind '"check"' held_before "${held0:-null}" held_after "${held1:-null}" \
    domain_kept "$([[ "$domain1" == "$domain" ]] && echo true || echo false)"
[[ "$domain1" == "$domain" ]] || { echo "FAIL: the domain changed"; exit 1; }
((held1 >= held0)) || { echo "FAIL: held locks were lost"; exit 1; }
