#!/usr/bin/env bash
# The cost at scale: what many held keys, many connections, snapshots and
# restarts cost Ticketing, next to Redis and etcd, in one run on this
# machine (docs/benchmarks.md, "Cost at scale"):
#   1. held keys: uncontended pairs/s and p99 (64 connections) while
#      1,000 / 100,000 / 1,000,000 other keys are held (etcd: up to 100,000,
#      10,000 with --quick, its fill is slow), fresh servers for each
#      point, filled by the memory scenario (lease 250 s), which also gives
#      the memory per held key at the largest point;
#   2. connections: the same load over 64, 1,024 and 16,384 connections
#      (etcd: up to 1,024);
#   3. snapshot under load (Ticketing only): 20 s of uncontended load with
#      1,000,000 held keys (100,000 with --quick) and with none: the
#      longest gap between grants, and the snapshots the leader cut;
#   4. rolling restart (Ticketing only): bench/rejoin.sh with as many held
#      keys as 3 and with none: restart-to-ready and the longest gap per step.
#
#   bench/scale.sh [--quick] [--build DIR] [--no-install] [--only PARTS]
#
# PARTS is a comma list of held, conns, snapshot, rolling (default: all).
# Installs what bench/run.sh installs when it is missing (--no-install:
# only checks), builds Release ticketingd and ticketing-bench in DIR
# (default build-bench in the repository), runs everything on 127.0.0.1,
# stops everything it started (EXIT trap) and writes
#   bench/results/<date>-<commit>-scale.json    every run, one object each
#   bench/results/<date>-<commit>-scale.md      the tables, with ratios
#   bench/results/<date>-<commit>-scale-*.png   charts (gnuplot)
# (<date>-<commit>-scale-quick.* with --quick). --quick takes about 5
# minutes on a 2-core machine, the full run under 30: it runs the two
# sweeps twice (fresh servers each round) and the report takes the better
# round of each point. Environment: NODE_THREADS (2, ticketingd --threads,
# as run.sh's main table), ETCD_CONNS_MAX (1024).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
QUICK=0
INSTALL=1
BUILD="$ROOT/build-bench"
PARTS=held,conns,snapshot,rolling
ARGS=("$@")
while (($#)); do
    case "$1" in
    --quick) QUICK=1 ;;
    --no-install) INSTALL=0 ;;
    --build)
        [[ $# -ge 2 ]] || { echo "--build needs a directory" >&2; exit 2; }
        BUILD=$(realpath -m "$2")
        shift
        ;;
    --only)
        [[ $# -ge 2 ]] || { echo "--only needs a list" >&2; exit 2; }
        PARTS=$2
        shift
        ;;
    -h | --help) sed -n '2,32p' "$0"; exit 0 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done
for p in ${PARTS//,/ }; do
    case "$p" in
    held | conns | snapshot | rolling) ;;
    *) echo "--only: unknown part '$p' (held, conns, snapshot, rolling)" >&2; exit 2 ;;
    esac
done
part() { [[ ",$PARTS," == *",$1,"* ]]; }

# shellcheck source=bench/lib.sh
source "$HERE/lib.sh"
bench_tmp_init
ETCD_SHM_DIR=$(mktemp -d /dev/shm/tk-bench-etcd.XXXXXX)
trap bench_cleanup EXIT
trap 'exit 130' INT TERM

# ---- parameters: the same for every system ----------------------------------------
if [[ $QUICK == 1 ]]; then
    ROUNDS=1; WARM=1; DUR=5
    ETCD_HELD_MAX=10000; BIG=100000; ROLL_LOAD_S=8; ROLL_TIMEOUT=300
else
    ROUNDS=2; WARM=2; DUR=10
    ETCD_HELD_MAX=100000; BIG=1000000; ROLL_LOAD_S=12; ROLL_TIMEOUT=900
fi
HELD_POINTS=(1000 100000 1000000)
CONN_POINTS=(64 1024 16384)
ETCD_CONNS_MAX=${ETCD_CONNS_MAX:-1024}
CONNS=64            # the held-keys sweep and the snapshot runs
CONN_WAIT_MS=10000  # connections sweep: closed-loop queueing is not a timeout
SNAP_S=20
NODE_THREADS=${NODE_THREADS:-2}
BENCH_THREADS=1
NOTES=()

# etcd's points: those up to its cap, and the cap itself.
ETCD_HELD=()
for n in "${HELD_POINTS[@]}"; do ((n <= ETCD_HELD_MAX)) && ETCD_HELD+=("$n"); done
[[ " ${ETCD_HELD[*]} " == *" $ETCD_HELD_MAX "* ]] || ETCD_HELD+=("$ETCD_HELD_MAX")
NOTES+=("etcd's held-keys sweep stops at $ETCD_HELD_MAX held keys: its fill takes about 30 s per 100,000 keys here (the lock API, one lease each).")

# Descriptors: the bench needs one per connection, ticketingd its
# --max-connections + --max-admin-connections (1024) + 128. Raise the soft
# limit to the hard one (raising the hard limit needs privileges a container
# may not have) and drop the connection counts that do not fit.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
NOFILE=$(ulimit -n)
[[ $NOFILE == unlimited ]] && NOFILE=1048576
fit=()
for c in "${CONN_POINTS[@]}"; do
    if ((c + 256 + 1024 + 128 <= NOFILE)); then
        fit+=("$c")
    else
        NOTES+=("$c connections were not run: the open-file limit here is $NOFILE (ulimit -Hn).")
    fi
done
if ((${#fit[@]} == 0)); then
    PARTS=${PARTS//conns/}
    fit=(64)
fi
CONN_POINTS=("${fit[@]}")
TK_MAX_CONNS=$((${CONN_POINTS[-1]} + 256))
NOTES+=("etcd's connections sweep stops at $ETCD_CONNS_MAX connections (ETCD_CONNS_MAX): tried with 16,384 clients on this machine, etcd refused most of their lease grants (one lease per client, taken at setup) with 'etcdserver: too many requests', and the run measured errors only.")

# ---- install and build -----------------------------------------------------------
bench_install "$INSTALL"
bench_build "$ROOT" "$BUILD"
BENCH="$BUILD/ticketing-bench"

COMMIT=$(bench_commit "$ROOT")
DAY=$(date -u +%Y-%m-%d)
RESULTS="$HERE/results"
mkdir -p "$RESULTS"
NAME="$DAY-$COMMIT-scale"
[[ $QUICK == 1 ]] && NAME="$NAME-quick"
RUNS="$BENCH_TMP/runs.jsonl"
REJOIN="$BENCH_TMP/rejoin.jsonl"
: >"$RUNS"
: >"$REJOIN"
ROUND=1
LAST_OK=0
START=$SECONDS

# run_bench LABEL CASE EXTRA_JSON ARGS...: one ticketing-bench run, bounded
# in time; its JSON, with the fields of EXTRA_JSON and the round added, goes
# to $RUNS, its summary line to stderr.
run_bench() {
    local label=$1 case=$2 extra=$3; shift 3
    local rc=0 one="$BENCH_TMP/one.json"
    : >"$one"
    timeout -s KILL 900 "$BENCH" --label "$label" --case "$case" --threads "$BENCH_THREADS" \
        --json-out "$one" "$@" 2>>"$BENCH_TMP/bench.err" || rc=$?
    tail -n 1 "$BENCH_TMP/bench.err" | cut -c1-240 >&2
    if ((rc != 0)); then
        bench_log "ticketing-bench exited $rc for $label $case (checks or errors: see the JSON)"
    fi
    LAST_OK=0
    if [[ -s "$one" ]]; then
        jq -c --argjson x "$extra" --argjson r "$ROUND" --argjson rc "$rc" \
            '. + $x + {round: $r, exit: $rc}' "$one" >>"$RUNS"
        LAST_OK=1
    fi
    return 0
}

# amend_last JSON: adds JSON's fields to the run just written (if it was).
amend_last() {
    [[ $LAST_OK == 1 ]] || return 0
    { head -n -1 "$RUNS"; tail -n 1 "$RUNS" | jq -c --argjson x "$1" '. + $x'; } >"$RUNS.tmp"
    mv "$RUNS.tmp" "$RUNS"
}

# tk_metric_sum NAME: NAME summed over the three nodes (0 for a node that
# does not answer).
tk_metric_sum() {
    local i v sum=0
    for i in 0 1 2; do
        v=$(tk_metric "$i" "$1" 2>/dev/null) || v=0
        sum=$((sum + ${v%.*}))
    done
    echo "$sum"
}

UNC=(--scenario uncontended --warmup "$WARM" --duration "$DUR")

# held_point SYSTEM N: fresh servers, N keys held, then the uncontended load.
held_point() {
    local sys=$1 n=$2 x
    x=$(jq -n -c --argjson n "$n" '{held_keys: $n}')
    hold_args "$n" 256
    case "$sys" in
    ticketing)
        start_ticketing "$BUILD" "$NODE_THREADS" --max-keys $((n * 2 + 100000))
        local li
        li=$(tk_leader_index)
        bench_log "ticketing: holding $n keys, then uncontended ($CONNS connections)"
        run_bench ticketing "fill-$n" "$x" --driver ticketing --addr "$TK_ADDRS" \
            --secret-file "$TK_SECRET" "${HOLD_ARGS[@]}" --prefix held- \
            --rss-pid "${TK_PIDS[$li]}" --admin-port $((TK_PORTS[li] + 2))
        run_bench ticketing "held-$n" "$x" --driver ticketing --addr "$TK_ADDRS" \
            --secret-file "$TK_SECRET" "${UNC[@]}" --conns "$CONNS"
        stop_ticketing
        ;;
    redis)
        start_redis
        bench_log "redis: holding $n keys, then uncontended ($CONNS connections)"
        run_bench redis "fill-$n" "$x" --driver redis --addr "$REDIS_ADDR" "${HOLD_ARGS[@]}" \
            --prefix held- --rss-pid "$REDIS_PID"
        run_bench redis "held-$n" "$x" --driver redis --addr "$REDIS_ADDR" "${UNC[@]}" \
            --conns "$CONNS"
        stop_redis
        ;;
    etcd)
        hold_args "$n" 4
        start_etcd "$ETCD_SHM_DIR"
        local li
        li=$(etcd_leader_index)
        bench_log "etcd: holding $n keys, then uncontended ($CONNS connections)"
        run_bench etcd-tmpfs "fill-$n" "$x" --driver etcd --addr "$ETCD_ADDRS" \
            "${HOLD_ARGS[@]}" --prefix held- --rss-pid "${ETCD_PIDS[$li]}"
        run_bench etcd-tmpfs "held-$n" "$x" --driver etcd --addr "$ETCD_ADDRS" "${UNC[@]}" \
            --conns "$CONNS"
        stop_etcd
        ;;
    esac
}

# conns_runs SYSTEM: one fresh server, the uncontended load over each count.
conns_runs() {
    local sys=$1 c x
    case "$sys" in
    ticketing)
        start_ticketing "$BUILD" "$NODE_THREADS" --max-connections "$TK_MAX_CONNS"
        for c in "${CONN_POINTS[@]}"; do
            bench_log "ticketing: uncontended over $c connections"
            local ev0 rej0 ev1 rej1
            ev0=$(tk_metric_sum handshakes_evicted_total)
            rej0=$(tk_metric_sum conns_rejected_total)
            x=$(jq -n -c --argjson c "$c" '{connections: $c}')
            run_bench ticketing "conns-$c" "$x" --driver ticketing --addr "$TK_ADDRS" \
                --secret-file "$TK_SECRET" "${UNC[@]}" --conns "$c" --wait-ms "$CONN_WAIT_MS"
            ev1=$(tk_metric_sum handshakes_evicted_total)
            rej1=$(tk_metric_sum conns_rejected_total)
            # The servers' side of the setup: connections closed in their
            # handshake to admit newer ones (--max-handshakes), and refused.
            amend_last "{\"server\":{\"handshakes_evicted\":$((ev1 - ev0)),\"conns_rejected\":$((rej1 - rej0))}}"
        done
        stop_ticketing
        ;;
    redis)
        start_redis
        for c in "${CONN_POINTS[@]}"; do
            bench_log "redis: uncontended over $c connections"
            x=$(jq -n -c --argjson c "$c" '{connections: $c}')
            run_bench redis "conns-$c" "$x" --driver redis --addr "$REDIS_ADDR" "${UNC[@]}" \
                --conns "$c" --wait-ms "$CONN_WAIT_MS"
        done
        stop_redis
        ;;
    etcd)
        start_etcd "$ETCD_SHM_DIR"
        for c in "${CONN_POINTS[@]}"; do
            ((c <= ETCD_CONNS_MAX)) || continue
            bench_log "etcd: uncontended over $c connections"
            x=$(jq -n -c --argjson c "$c" '{connections: $c}')
            run_bench etcd-tmpfs "conns-$c" "$x" --driver etcd --addr "$ETCD_ADDRS" "${UNC[@]}" \
                --conns "$c" --wait-ms "$CONN_WAIT_MS"
        done
        stop_etcd
        ;;
    esac
}

# ---- 1 and 2: the sweeps, in rounds -------------------------------------------------
for ((ROUND = 1; ROUND <= ROUNDS; ROUND++)); do
    if part held; then
        bench_log "held keys, round $ROUND of $ROUNDS"
        for n in "${HELD_POINTS[@]}"; do held_point ticketing "$n"; done
        for n in "${HELD_POINTS[@]}"; do held_point redis "$n"; done
        for n in "${ETCD_HELD[@]}"; do held_point etcd "$n"; done
    fi
    if part conns; then
        bench_log "connections, round $ROUND of $ROUNDS"
        conns_runs ticketing
        conns_runs redis
        conns_runs etcd
    fi
done
ROUND=1

# ---- 3: snapshots under load (Ticketing) -----------------------------------------------
if part snapshot; then
    for n in 0 "$BIG"; do
        bench_log "snapshot: $n held keys, then $SNAP_S s of uncontended load"
        start_ticketing "$BUILD" "$NODE_THREADS" --max-keys $((n * 2 + 100000))
        li=$(tk_leader_index)
        x=$(jq -n -c --argjson n "$n" '{held_keys: $n}')
        if ((n > 0)); then
            hold_args "$n" 256
            run_bench ticketing "snapfill-$n" "$x" --driver ticketing --addr "$TK_ADDRS" \
                --secret-file "$TK_SECRET" "${HOLD_ARGS[@]}" --prefix held- \
                --rss-pid "${TK_PIDS[$li]}" --admin-port $((TK_PORTS[li] + 2))
        fi
        s0=$(tk_metric "$li" 'raft_snapshots_total{event="taken"}') || s0=0
        run_bench ticketing "snapshot-$n" "$x" --driver ticketing --addr "$TK_ADDRS" \
            --secret-file "$TK_SECRET" --scenario uncontended --conns "$CONNS" --warmup 1 \
            --duration "$SNAP_S"
        s1=$(tk_metric "$li" 'raft_snapshots_total{event="taken"}') || s1=$s0
        sb=$(tk_metric "$li" raft_snapshot_bytes) || sb=0
        li1=$(tk_leader_index) || li1=-1
        moved=false
        [[ $li1 == "$li" ]] || moved=true
        amend_last "{\"snapshots_taken\":$((${s1%.*} - ${s0%.*})),\"snapshot_bytes\":${sb%.*},\"leader_changed\":$moved}"
        bench_log "snapshot: the leader cut $((${s1%.*} - ${s0%.*})) snapshots ($sb bytes the last)"
        stop_ticketing
    done
fi

# ---- 4: rolling restart with held keys (bench/rejoin.sh) --------------------------------
if part rolling; then
    for n in 0 "$BIG"; do
        bench_log "rolling restart: bench/rejoin.sh with $n held keys"
        out="$BENCH_TMP/rejoin-$n.jsonl"
        : >"$out"
        rc=0
        HELD_KEYS=$n THREADS=$NODE_THREADS LOAD_S=$ROLL_LOAD_S JSON_OUT=$out \
            timeout -k 30 "$ROLL_TIMEOUT" "$HERE/rejoin.sh" "$BUILD" \
            >"$BENCH_TMP/rejoin-$n.out" 2>>"$BENCH_TMP/rejoin.err" || rc=$?
        sed 's/^/  /' "$BENCH_TMP/rejoin-$n.out" >&2
        ((rc == 0)) || bench_log "bench/rejoin.sh exited $rc with $n held keys"
        jq -c --argjson n "$n" --argjson rc "$rc" '. + {held_keys_asked: $n, exit: $rc}' "$out" \
            >>"$REJOIN"
    done
fi

# ---- results -------------------------------------------------------------------------------
ELAPSED=$((SECONDS - START))
CMD="bench/scale.sh${ARGS[*]:+ ${ARGS[*]}}"
notes=$(printf '%s\n' "${NOTES[@]}" | jq -R . | jq -s -c .)
jq -n --arg date "$DAY" --arg commit "$COMMIT" --arg cmd "$CMD" --argjson rounds "$ROUNDS" \
    --argjson host "$(bench_machine_json)" --argjson elapsed "$ELAPSED" --arg quick "$QUICK" \
    --arg parts "$PARTS" --argjson notes "$notes" --argjson nofile "$NOFILE" \
    --argjson big "$BIG" --argjson snap_s "$SNAP_S" --argjson roll_s "$ROLL_LOAD_S" \
    --argjson conns "$CONNS" --argjson wait "$CONN_WAIT_MS" \
    --arg nt "$NODE_THREADS" --arg bt "$BENCH_THREADS" \
    --slurpfile runs "$RUNS" --slurpfile rejoin "$REJOIN" \
    '{meta: ({date: $date, commit: $commit, command: $cmd, quick: ($quick == "1"),
              rounds: $rounds, elapsed_s: $elapsed, parts: ($parts | split(",")),
              notes: $notes, nofile: $nofile,
              params: {big: $big, snapshot_load_s: $snap_s, rolling_load_s: $roll_s,
                       conns: $conns, conns_wait_ms: $wait, hold_lease_ms: 250000}} + $host + {
              setup: {ticketing: "3 nodes, ticketingd --threads \($nt) (defaults otherwise)",
                      etcd: "3 members, data on tmpfs, defaults, JSON gateway",
                      redis: "1 process, --save \"\" --appendonly no, no replica",
                      bench: "ticketing-bench --threads \($bt), same machine"}}),
      runs: $runs, rejoin: $rejoin}' >"$RESULTS/$NAME.json"
"$HERE/scale_report.sh" "$RESULTS/$NAME.json" "$RESULTS/$NAME"
bench_log "done in ${ELAPSED}s: $RESULTS/$NAME.json, $NAME.md, $NAME-*.png"
