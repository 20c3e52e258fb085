#!/usr/bin/env bash
# Ticketing vs etcd vs Redis, side by side, in one run on this machine.
#
#   bench/run.sh [--quick] [--no-install] [--skip-etcd-disk] [--skip-memory] [--scale]
#
# Installs what is missing (etcd-server, etcd-client, redis-server,
# gnuplot-nox, jq, curl: Debian packages), builds ticketingd and
# ticketing-bench (Release, in build-bench/), starts a 3-node Ticketing
# cluster, a 3-member etcd cluster (data on tmpfs; once more on disk) and one
# Redis, all on 127.0.0.1 with non-default ports, runs every scenario with
# the same concurrency for each system, stops everything it started (EXIT
# trap) and writes
#   bench/results/<date>-<commit>.json   every run, one object each
#   bench/results/<date>-<commit>.md     the tables, with ratios
#   bench/results/<date>-<commit>-*.png  charts (gnuplot)
# --quick finishes in under 3 minutes, the full run in under 30. The full run
# measures the common scenarios in two rounds (each system once per round,
# fresh clusters); the report takes the better round of each system, the
# JSON keeps both. The machine is shared: one round can land on a busy minute.
# --scale then runs bench/scale.sh (held keys, connections, snapshots under
# load, rolling restarts; docs/benchmarks.md section 11) at the same size.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
QUICK=0
INSTALL=1
ETCD_DISK=1
MEMORY=1
SCALE=0
for arg in "$@"; do
    case "$arg" in
    --quick) QUICK=1 ;;
    --no-install) INSTALL=0 ;;
    --skip-etcd-disk) ETCD_DISK=0 ;;
    --skip-memory) MEMORY=0 ;;
    --scale) SCALE=1 ;;
    -h | --help) sed -n '2,21p' "$0"; exit 0 ;;
    *) echo "unknown argument $arg" >&2; exit 2 ;;
    esac
done

# shellcheck source=bench/lib.sh
source "$HERE/lib.sh"
bench_tmp_init
ETCD_SHM_DIR=$(mktemp -d /dev/shm/tk-bench-etcd.XXXXXX)
trap bench_cleanup EXIT
trap 'exit 130' INT TERM

# ---- parameters: the same for every system ----------------------------------------
if [[ $QUICK == 1 ]]; then
    ROUNDS=1; WARM=1; DUR=3; FO_DUR=8; FO_KILL=3
    MEM_KEYS=100000; MEM_WAITERS=100000; ETCD_MEM_KEYS=10000
else
    ROUNDS=2; WARM=2; DUR=10; FO_DUR=15; FO_KILL=5
    MEM_KEYS=1000000; MEM_WAITERS=1000000; ETCD_MEM_KEYS=100000
fi
CONNS=64            # uncontended, failover
PIPE_DEPTH=16       # uncontended-pipelined
DROP_CLIENTS=256    # ticketdrop: clients (connections), keys, skew, critical section
DROP_KEYS=100
DROP_ZIPF=0.99
DROP_HOLD_MS=2
DROP_LEASE_MS=10000
DROP_WAIT_MS=1000
BENCH_THREADS=1
BENCH_PREFIX=()     # placement runs: taskset for the load generator
NODE_THREADS=2      # ticketingd --threads of the main table (two workers and a Raft thread)
FO_LEASE_MS=3000

# ---- install and build -----------------------------------------------------------
bench_install "$INSTALL"
BUILD="$ROOT/build-bench"
bench_build "$ROOT" "$BUILD"
BENCH="$BUILD/ticketing-bench"

COMMIT=$(bench_commit "$ROOT")
DAY=$(date -u +%Y-%m-%d)
RESULTS="$HERE/results"
mkdir -p "$RESULTS"
NAME="$DAY-$COMMIT"
[[ $QUICK == 1 ]] && NAME="$NAME-quick"
ROUND=1
RUNS="$BENCH_TMP/round1.jsonl"
: >"$RUNS"
START=$SECONDS

# run_bench LABEL CASE ARGS...: one scenario run; its JSON goes to $RUNS.
run_bench() {
    local label=$1 case=$2; shift 2
    local rc=0
    timeout -s KILL 900 "${BENCH_PREFIX[@]}" "$BENCH" --label "$label" --case "$case" --threads "$BENCH_THREADS" \
        --json-out "$RUNS" "$@" 2>>"$BENCH_TMP/bench.err" || rc=$?
    tail -n 1 "$BENCH_TMP/bench.err" | cut -c1-220 >&2
    if ((rc != 0)); then
        bench_log "ticketing-bench exited $rc for $label $case (checks or errors: see the JSON)"
    fi
    return 0
}

# Peak pairs/s of the last uncontended closed-loop run for a label.
last_peak() {
    jq -r --arg l "$1" 'select(.label == $l and .case == "uncontended") | .pairs_per_s' "$RUNS" |
        tail -n 1
}

# The scenarios every system runs, in order. $1 label, $2 driver, $3 addrs,
# rest: driver arguments.
run_common() {
    local label=$1 driver=$2 addrs=$3; shift 3
    local common=(--driver "$driver" --addr "$addrs" "$@" --warmup "$WARM" --duration "$DUR")
    bench_log "$label: uncontended, $CONNS connections"
    run_bench "$label" uncontended "${common[@]}" --scenario uncontended --conns "$CONNS"
    local peak half
    peak=$(last_peak "$label")
    half=$(awk -v p="${peak:-0}" 'BEGIN { printf "%d", p / 2 }')
    if ((half > 0)); then
        bench_log "$label: uncontended open loop at half of peak ($half acquires/s)"
        run_bench "$label" uncontended-half "${common[@]}" --scenario uncontended \
            --conns "$CONNS" --rate "$half"
    fi
    bench_log "$label: uncontended, pipelined depth $PIPE_DEPTH"
    run_bench "$label" uncontended-pipelined "${common[@]}" --scenario uncontended \
        --conns "$CONNS" --depth "$PIPE_DEPTH"
    local w
    for w in 1 16 64; do
        bench_log "$label: hotkey, $w waiters"
        run_bench "$label" "hotkey-$w" "${common[@]}" --scenario hotkey --conns "$w"
    done
    bench_log "$label: ticketdrop, $DROP_CLIENTS clients over $DROP_KEYS keys"
    run_bench "$label" ticketdrop "${common[@]}" --scenario ticketdrop --conns "$DROP_CLIENTS" \
        --keys "$DROP_KEYS" --zipf "$DROP_ZIPF" --hold-ms "$DROP_HOLD_MS" \
        --lease-ms "$DROP_LEASE_MS" --wait-ms "$DROP_WAIT_MS"
}

# failover LABEL DRIVER ADDRS LEADER_FN PIDS_ARRAY_NAME [driver args]
run_failover() {
    local label=$1 driver=$2 addrs=$3 leader_fn=$4 pids_name=$5; shift 5
    bench_log "$label: failover (kill -9 of the leader $FO_KILL s into the measurement)"
    "$BENCH" --label "$label" --case failover --threads "$BENCH_THREADS" --json-out "$RUNS" \
        --driver "$driver" --addr "$addrs" "$@" --scenario failover --conns "$CONNS" \
        --lease-ms "$FO_LEASE_MS" --warmup "$WARM" --duration "$FO_DUR" \
        2>>"$BENCH_TMP/bench.err" &
    local bpid=$!
    BENCH_PIDS+=("$bpid")
    sleep 0.5
    sleep $((WARM + FO_KILL))
    local li
    li=$($leader_fn) || li=""
    if [[ -n "$li" ]]; then
        local -n pids=$pids_name
        bench_log "$label: kill -9 leader (node $li, pid ${pids[$li]})"
        kill -9 "${pids[$li]}" 2>/dev/null || true
    else
        bench_log "$label: no leader found to kill"
    fi
    wait "$bpid" || bench_log "ticketing-bench exited $? for $label failover"
    bench_forget "$bpid"
    tail -n 1 "$BENCH_TMP/bench.err" | cut -c1-220 >&2
}

# ---- the common scenarios, in rounds ---------------------------------------------------
for ((ROUND = 1; ROUND <= ROUNDS; ROUND++)); do
    RUNS="$BENCH_TMP/round$ROUND.jsonl"
    touch "$RUNS"
    bench_log "round $ROUND of $ROUNDS"

    bench_log "starting a 3-node Ticketing cluster"
    start_ticketing "$BUILD" "$NODE_THREADS"
    run_common ticketing ticketing "$TK_ADDRS" --secret-file "$TK_SECRET"
    bench_log "ticketing: hotkey, 64 waiters, FIFO judged (a ping behind each acquire)"
    run_bench ticketing hotkey-64-fifo --driver ticketing --addr "$TK_ADDRS" \
        --secret-file "$TK_SECRET" --scenario hotkey --conns 64 --fifo-probe \
        --warmup "$WARM" --duration "$DUR"
    if ((ROUND == ROUNDS)); then
        run_failover ticketing ticketing "$TK_ADDRS" tk_leader_index TK_PIDS \
            --secret-file "$TK_SECRET"
    fi
    stop_ticketing

    # The same cluster with one worker thread per node, which also runs the
    # Raft loop: no thread switch per commit, on a machine with 2 cores for
    # 3 nodes.
    bench_log "starting a 3-node Ticketing cluster with --threads 1"
    start_ticketing "$BUILD" 1
    tk1=(--driver ticketing --addr "$TK_ADDRS" --secret-file "$TK_SECRET" --warmup "$WARM"
         --duration "$DUR")
    run_bench ticketing-t1 uncontended "${tk1[@]}" --scenario uncontended --conns "$CONNS"
    half=$(awk -v p="$(last_peak ticketing-t1)" 'BEGIN { printf "%d", p / 2 }')
    if ((half > 0)); then
        run_bench ticketing-t1 uncontended-half "${tk1[@]}" --scenario uncontended \
            --conns "$CONNS" --rate "$half"
    fi
    run_bench ticketing-t1 uncontended-pipelined "${tk1[@]}" --scenario uncontended \
        --conns "$CONNS" --depth "$PIPE_DEPTH"
    run_bench ticketing-t1 hotkey-16 "${tk1[@]}" --scenario hotkey --conns 16
    run_bench ticketing-t1 hotkey-64 "${tk1[@]}" --scenario hotkey --conns 64
    stop_ticketing

    bench_log "starting a 3-member etcd cluster (data on tmpfs $ETCD_SHM_DIR)"
    start_etcd "$ETCD_SHM_DIR"
    run_common etcd-tmpfs etcd "$ETCD_ADDRS"
    if ((ROUND == ROUNDS)); then
        run_failover etcd-tmpfs etcd "$ETCD_ADDRS" etcd_leader_index ETCD_PIDS
    fi
    stop_etcd

    bench_log "starting Redis (one process, no persistence, no replica)"
    start_redis
    run_common redis redis "$REDIS_ADDR"
    stop_redis
done
RUNS="$BENCH_TMP/round$ROUNDS.jsonl"

# ---- etcd on disk ------------------------------------------------------------------------
if [[ $ETCD_DISK == 1 ]]; then
    bench_log "starting a 3-member etcd cluster (data on disk $BENCH_TMP)"
    start_etcd "$BENCH_TMP"
    common=(--driver etcd --addr "$ETCD_ADDRS" --warmup "$WARM" --duration "$DUR")
    run_bench etcd-disk uncontended "${common[@]}" --scenario uncontended --conns "$CONNS"
    if [[ $QUICK == 0 ]]; then
        run_bench etcd-disk hotkey-64 "${common[@]}" --scenario hotkey --conns 64
        run_bench etcd-disk ticketdrop "${common[@]}" --scenario ticketdrop \
            --conns "$DROP_CLIENTS" --keys "$DROP_KEYS" --zipf "$DROP_ZIPF" \
            --hold-ms "$DROP_HOLD_MS" --lease-ms "$DROP_LEASE_MS" --wait-ms "$DROP_WAIT_MS"
    fi
    stop_etcd
fi

# ---- placement: the servers on one CPU, the load generator on another ---------------------
# Above, servers and load generator share both CPUs, so a 3-node cluster
# competes with its own load and every hop between its threads can cross
# CPUs. Here each system gets CPU 0 for all its processes and the load
# generator gets CPU 1: the same budget for Ticketing (3 nodes, and 1
# node without replication), Redis and etcd (3 members).
place_runs() { # LABEL DRIVER ADDRS [driver args]
    local label=$1 driver=$2 addrs=$3; shift 3
    local c=(--driver "$driver" --addr "$addrs" "$@" --warmup "$WARM" --duration "$DUR")
    bench_log "$label: uncontended, pipelined, hotkey-16 (servers on CPU 0, load on CPU 1)"
    run_bench "$label" uncontended "${c[@]}" --scenario uncontended --conns "$CONNS"
    run_bench "$label" uncontended-pipelined "${c[@]}" --scenario uncontended --conns "$CONNS" \
        --depth "$PIPE_DEPTH"
    run_bench "$label" hotkey-16 "${c[@]}" --scenario hotkey --conns 16
}
if (($(nproc) >= 2)); then
    BENCH_PREFIX=(taskset -c 1)
    start_ticketing "$BUILD" 1
    pin_cpu 0 "${TK_PIDS[@]}"
    place_runs ticketing-pin ticketing "$TK_ADDRS" --secret-file "$TK_SECRET"
    stop_ticketing
    start_ticketing_standalone "$BUILD" 1
    pin_cpu 0 "${TK_PIDS[@]}"
    place_runs ticketing1-pin ticketing "$TK_ADDRS" --secret-file "$TK_SECRET"
    stop_ticketing
    start_redis
    pin_cpu 0 "$REDIS_PID"
    place_runs redis-pin redis "$REDIS_ADDR"
    stop_redis
    start_etcd "$ETCD_SHM_DIR"
    pin_cpu 0 "${ETCD_PIDS[@]}"
    place_runs etcd-pin etcd "$ETCD_ADDRS"
    stop_etcd
    BENCH_PREFIX=()
fi

# ---- memory ----------------------------------------------------------------------------
if [[ $MEMORY == 1 ]]; then
    bench_log "memory: fresh Ticketing cluster, $MEM_KEYS held keys, then $MEM_WAITERS waiters"
    start_ticketing "$BUILD" "$NODE_THREADS" --max-keys $((MEM_KEYS * 2 + 100000)) \
        --max-waiters $((MEM_WAITERS * 2)) --max-connections 20000 --max-inflight 8192
    li=$(tk_leader_index)
    prefix="mem$RANDOM-"
    hold_args "$MEM_KEYS" 256
    run_bench ticketing memory-keys --driver ticketing --addr "$TK_ADDRS" \
        --secret-file "$TK_SECRET" "${HOLD_ARGS[@]}" --rss-pid "${TK_PIDS[$li]}" \
        --prefix "$prefix" --admin-port $((TK_PORTS[li] + 2))
    wconns=$(((MEM_WAITERS + 3999) / 4000))
    run_bench ticketing memory-waiters --driver ticketing --addr "$TK_ADDRS" \
        --secret-file "$TK_SECRET" --scenario memory --mem-waiters "$MEM_WAITERS" \
        --mem-waiter-keys 1000 --conns "$wconns" --depth 4000 --lease-ms 250000 \
        --rss-pid "${TK_PIDS[$li]}" --admin-port $((TK_PORTS[li] + 2)) --prefix "$prefix"
    stop_ticketing

    bench_log "memory: Redis, $MEM_KEYS held keys"
    start_redis
    hold_args "$MEM_KEYS" 256
    run_bench redis memory-keys --driver redis --addr "$REDIS_ADDR" "${HOLD_ARGS[@]}" \
        --rss-pid "$REDIS_PID"
    stop_redis

    bench_log "memory: etcd (tmpfs), $ETCD_MEM_KEYS held keys"
    start_etcd "$ETCD_SHM_DIR"
    li=$(etcd_leader_index)
    hold_args "$ETCD_MEM_KEYS" 4
    run_bench etcd-tmpfs memory-keys --driver etcd --addr "$ETCD_ADDRS" "${HOLD_ARGS[@]}" \
        --rss-pid "${ETCD_PIDS[$li]}"
    stop_etcd
fi

# ---- results -----------------------------------------------------------------------------
ELAPSED=$((SECONDS - START))
CMD="bench/run.sh${*:+ $*}"
jq -s --arg date "$DAY" --arg rounds "$ROUNDS" --arg commit "$COMMIT" --arg cmd "$CMD" \
    --argjson host "$(bench_machine_json)" --arg elapsed "$ELAPSED" --arg quick "$QUICK" \
    '{meta: ({date: $date, commit: $commit, command: $cmd, quick: ($quick == "1"),
             rounds: ($rounds | tonumber),
             elapsed_s: ($elapsed | tonumber)} + $host + {
             setup: {ticketing: "3 nodes, ticketingd --threads '"$NODE_THREADS"' (defaults otherwise)",
                     etcd: "3 members, defaults (heartbeat 100 ms, election 1000 ms), JSON gateway",
                     redis: "1 process, --save \"\" --appendonly no, no replica",
                     bench: "ticketing-bench --threads '"$BENCH_THREADS"', same machine"}}),
      runs: .}' <(for ((r = 1; r <= ROUNDS; r++)); do
                   jq -c --argjson r "$r" '. + {round: $r}' "$BENCH_TMP/round$r.jsonl"; done) \
    >"$RESULTS/$NAME.json"
"$HERE/report.sh" "$RESULTS/$NAME.json" "$RESULTS/$NAME"
bench_log "done in ${ELAPSED}s: $RESULTS/$NAME.json, $NAME.md, $NAME-*.png"
# --scale: the cost at scale as well (bench/scale.sh, its own results files),
# with the same size and the servers just built.
if [[ $SCALE == 1 ]]; then
    scale_args=(--no-install --build "$BUILD")
    [[ $QUICK == 1 ]] && scale_args+=(--quick)
    "$HERE/scale.sh" "${scale_args[@]}"
fi
