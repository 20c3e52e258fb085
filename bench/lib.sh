# shellcheck shell=bash
# Helpers shared by bench/run.sh, bench/scale.sh, bench/rejoin.sh and
# bench/smoke.sh (sourced, not run): install the systems compared, start and
# stop 3-node Ticketing and etcd clusters and one Redis on 127.0.0.1, find
# leaders, read their pids and metrics, hold many keys. Every process
# started here is recorded in BENCH_PIDS; bench_cleanup (run from an EXIT
# trap) kills exactly those and removes BENCH_TMP.
#
# Needs: curl, jq (for etcd's JSON status).
# The variables set for the calling script (TK_ADDRS, HOLD_ARGS, ...) look
# unused to shellcheck here.
# shellcheck disable=SC2034

BENCH_PIDS=()
BENCH_TMP=${BENCH_TMP:-}

bench_log() { printf '[bench %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

bench_tmp_init() {
    if [[ -z "$BENCH_TMP" ]]; then
        BENCH_TMP=$(mktemp -d /tmp/tk-bench.XXXXXX)
    fi
    mkdir -p "$BENCH_TMP"
}

# True while pid is running (a zombie counts as gone).
pid_alive() {
    local st
    st=$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null) || return 1
    [[ -n "$st" && "$st" != Z ]]
}

# Servers are started with `&` and then disowned, so that bash does not
# print a job notice when one is killed on purpose; bench_kill therefore
# polls /proc instead of `wait`.
bench_kill() {
    local pid i
    for pid in "$@"; do
        kill -9 "$pid" 2>/dev/null || true
    done
    for pid in "$@"; do
        for ((i = 0; i < 100; i++)); do
            pid_alive "$pid" || break
            sleep 0.05
        done
    done
    bench_forget "$@"
}

# Drops pids (already gone) from BENCH_PIDS.
bench_forget() {
    local keep=() p k pid
    for p in "${BENCH_PIDS[@]}"; do
        k=1
        for pid in "$@"; do [[ "$p" == "$pid" ]] && k=0; done
        [[ $k == 1 ]] && keep+=("$p")
    done
    BENCH_PIDS=("${keep[@]}")
}

bench_cleanup() {
    if ((${#BENCH_PIDS[@]})); then
        bench_kill "${BENCH_PIDS[@]}"
    fi
    BENCH_PIDS=()
    if [[ -n "$BENCH_TMP" && -d "$BENCH_TMP" && -z "${BENCH_KEEP:-}" ]]; then
        rm -rf "$BENCH_TMP"
    fi
    # etcd data on tmpfs
    if [[ -n "${ETCD_SHM_DIR:-}" && -d "$ETCD_SHM_DIR" ]]; then
        rm -rf "$ETCD_SHM_DIR"
    fi
    if [[ $BENCH_POLICY_CREATED == 1 ]]; then
        rm -f /usr/sbin/policy-rc.d
        BENCH_POLICY_CREATED=0
    fi
}

# ---- what the comparisons need --------------------------------------------------

BENCH_POLICY_CREATED=0

# bench_install INSTALL: installs what is missing of etcd-server,
# etcd-client, redis-server, gnuplot-nox, jq and curl (Debian packages) when
# INSTALL is 1; with 0, names what is missing and returns 1. Debian's
# etcd-server and redis-server start a service on install; a policy-rc.d
# that says "no" keeps them from starting (the benches run their own on
# other ports). Only one created here is removed afterwards (bench_cleanup
# too, if the install is interrupted).
bench_install() {
    local install=$1 need=()
    command -v etcd >/dev/null || need+=(etcd-server)
    command -v etcdctl >/dev/null || need+=(etcd-client)
    command -v redis-server >/dev/null || need+=(redis-server)
    command -v gnuplot >/dev/null || need+=(gnuplot-nox)
    command -v jq >/dev/null || need+=(jq)
    command -v curl >/dev/null || need+=(curl)
    ((${#need[@]})) || return 0
    if [[ $install == 0 ]]; then
        echo "missing: ${need[*]} (run without --no-install)" >&2
        return 1
    fi
    bench_log "installing ${need[*]}"
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
        chmod 755 /usr/sbin/policy-rc.d
        BENCH_POLICY_CREATED=1
    fi
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
    if [[ $BENCH_POLICY_CREATED == 1 ]]; then
        rm -f /usr/sbin/policy-rc.d
        BENCH_POLICY_CREATED=0
    fi
}

# bench_build ROOT BUILD: Release ticketingd and ticketing-bench in BUILD.
bench_build() {
    bench_log "building (Release) in $2"
    cmake -S "$1" -B "$2" -DCMAKE_BUILD_TYPE=Release >/dev/null
    cmake --build "$2" -j2 --target ticketingd ticketing-bench >/dev/null
}

# bench_commit ROOT: the short commit of the tree measured, "-dirty" when
# tracked files differ from it.
bench_commit() {
    local c
    c=$(git -C "$1" rev-parse --short HEAD 2>/dev/null || echo unknown)
    if [[ -n "$(git -C "$1" status --porcelain --untracked-files=no 2>/dev/null)" ]]; then
        c="$c-dirty"
    fi
    echo "$c"
}

# bench_machine_json: this machine and the compared versions, one JSON object.
bench_machine_json() {
    jq -n -c --arg cpu "$(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo)" \
        --arg cores "$(nproc)" --arg mem "$(free -g | awk '/Mem:/ { print $2 " GiB" }')" \
        --arg kernel "$(uname -r)" --arg load "$(cut -d' ' -f1-3 /proc/loadavg)" \
        --arg etcd "$(etcd --version 2>/dev/null | head -n 1)" \
        --arg redis "$(redis-server --version 2>/dev/null | cut -d' ' -f3)" \
        '{machine: {cpu: $cpu, cores: ($cores | tonumber), memory: $mem, kernel: $kernel,
                    loadavg_at_end: $load, shared: true},
          versions: {etcd: $etcd, redis: $redis}}'
}

# hold_args N DEPTH: sets HOLD_ARGS to the ticketing-bench arguments that
# hold N keys (the memory scenario: acquired with wait 0 and a 250 s lease,
# the longest there is, never released) over 64 connections of DEPTH slots.
# Add --driver, --addr and for the memory figures --rss-pid (and
# --admin-port for Ticketing). Whatever is measured with the keys held must
# end within the lease.
HOLD_LEASE_MS=250000
hold_args() {
    HOLD_ARGS=(--scenario memory --mem-keys "$1" --conns 64 --depth "$2" --lease-ms "$HOLD_LEASE_MS")
}

# port_free and reserve_ports (ports locked against every other test or
# bench process on this machine).
# shellcheck source=tests/support/ports.sh
source "$(dirname "${BASH_SOURCE[0]}")/../tests/support/ports.sh"

wait_until() { # timeout_s cmd...
    local end=$((SECONDS + $1)); shift
    while ((SECONDS < end)); do
        if "$@" >/dev/null 2>&1; then return 0; fi
        sleep 0.1
    done
    return 1
}

# ---- Ticketing ---------------------------------------------------------------

TK_PIDS=()
TK_PORTS=()
TK_ADDRS=""
TK_SECRET=""

TK_DIR=""
TK_PEERS=""
TK_BIN=""
TK_THREADS=1
TK_EXTRA=()

# tk_spawn I: starts node I (a fresh process: a new NodeId) with the
# cluster's addresses, secrets and flags; its log is appended to.
tk_spawn() {
    local i=$1
    "$TK_BIN/ticketingd" --bind 127.0.0.1 --port "${TK_PORTS[$i]}" \
        --advertise "127.0.0.1:${TK_PORTS[$i]}" --peers "$TK_PEERS" \
        --client-secret-file "$TK_SECRET" --peer-secret-file "$TK_DIR/peer.secret" \
        --threads "$TK_THREADS" --log-level 1 "${TK_EXTRA[@]}" >>"$TK_DIR/node$i.log" 2>&1 &
    TK_PIDS[i]=$!
    BENCH_PIDS+=($!)
    disown $!
}

# start_ticketing BIN_DIR THREADS [extra ticketingd args...]
# Three nodes; node i uses client port P_i, peer P_i+1, admin P_i+2.
start_ticketing() {
    TK_BIN=$1 TK_THREADS=$2; shift 2
    TK_EXTRA=("$@")
    TK_DIR="$BENCH_TMP/ticketing.$RANDOM"
    mkdir -p "$TK_DIR"
    TK_SECRET="$TK_DIR/client.secret"
    echo "bench-client-secret-0123456789abcdef" >"$TK_SECRET"
    echo "bench-peer-secret-0123456789abcdef" >"$TK_DIR/peer.secret"
    chmod 600 "$TK_SECRET" "$TK_DIR/peer.secret"
    local base
    reserve_ports 30 || { bench_log "no free ports"; return 1; }
    base=$PORT
    TK_PORTS=("$base" $((base + 10)) $((base + 20)))
    TK_PEERS="127.0.0.1:$((base + 1)),127.0.0.1:$((base + 11)),127.0.0.1:$((base + 21))"
    TK_ADDRS="127.0.0.1:${TK_PORTS[0]},127.0.0.1:${TK_PORTS[1]},127.0.0.1:${TK_PORTS[2]}"
    TK_PIDS=()
    local i
    for i in 0 1 2; do
        tk_spawn "$i"
    done
    if ! wait_until 30 tk_leader_index; then
        bench_log "ticketing: no leader within 30 s; logs in $TK_DIR"
        tail -5 "$TK_DIR"/node*.log >&2
        return 1
    fi
}

# True once node I answers /readyz with 200 (a caught-up voter whose
# predecessor at its address is out of the configuration).
tk_ready() {
    [[ "$(curl -s -o /dev/null -w '%{http_code}' -m 1 \
        "http://127.0.0.1:$((TK_PORTS[$1] + 2))/readyz")" == 200 ]]
}

# True once node I's /status says it serves (leads).
tk_serving() {
    curl -s -m 1 "http://127.0.0.1:$((TK_PORTS[$1] + 2))/status" | grep -q '"serving":true'
}

# tk_metric I NAME: the value of NAME (with its labels, e.g.
# 'raft_snapshots_total{event="taken"}', without the ticketing_ prefix) in
# node I's /metrics; fails when the node or the line is not there. (awk
# reads to the end: leaving early would fail curl's write, and the pipe.)
tk_metric() {
    curl -s -m 5 "http://127.0.0.1:$((TK_PORTS[$1] + 2))/metrics" |
        awk -v n="ticketing_$2" '$1 == n { v = $2; found = 1 } END { if (found) print v; exit !found }'
}

# Index (0-2) of the node whose /status says it serves as leader.
tk_leader_index() {
    local i
    for i in 0 1 2; do
        kill -0 "${TK_PIDS[$i]}" 2>/dev/null || continue
        if tk_serving "$i"; then
            echo "$i"
            return 0
        fi
    done
    return 1
}

# start_ticketing_standalone BIN_DIR THREADS: one node, no --peers (no
# replication), client port P, peer P+1, admin P+2; sets the same TK_*
# variables as start_ticketing.
start_ticketing_standalone() {
    TK_BIN=$1 TK_THREADS=$2
    TK_DIR="$BENCH_TMP/ticketing1.$RANDOM"
    mkdir -p "$TK_DIR"
    TK_SECRET="$TK_DIR/client.secret"
    echo "bench-client-secret-0123456789abcdef" >"$TK_SECRET"
    chmod 600 "$TK_SECRET"
    local base
    reserve_ports 10 || { bench_log "no free ports"; return 1; }
    base=$PORT
    TK_PORTS=("$base")
    TK_ADDRS="127.0.0.1:$base"
    "$TK_BIN/ticketingd" --bind 127.0.0.1 --port "$base" --peer-port $((base + 1)) \
        --admin-port $((base + 2)) --client-secret-file "$TK_SECRET" --threads "$TK_THREADS" \
        --log-level 1 >>"$TK_DIR/node0.log" 2>&1 &
    TK_PIDS=($!)
    BENCH_PIDS+=($!)
    disown $!
    if ! wait_until 10 tk_serving 0; then
        bench_log "ticketing standalone: not serving within 10 s; log in $TK_DIR"
        return 1
    fi
}

# pin_cpu CPU PID...: every thread of each process to one CPU (threads
# started later inherit it).
pin_cpu() {
    local cpu=$1 pid
    shift
    for pid in "$@"; do
        taskset -a -p -c "$cpu" "$pid" >/dev/null
    done
}

stop_ticketing() {
    bench_kill "${TK_PIDS[@]}"
    TK_PIDS=()
}

# ---- etcd ----------------------------------------------------------------------

ETCD_PIDS=()
ETCD_PORTS=()
ETCD_ADDRS=""
ETCD_SHM_DIR=""

# start_etcd DATA_ROOT (a tmpfs or disk directory)
start_etcd() {
    local root=$1
    local dir="$root/etcd.$RANDOM"
    mkdir -p "$dir"
    local base
    reserve_ports 30 || { bench_log "no free ports"; return 1; }
    base=$PORT
    ETCD_PORTS=("$base" $((base + 10)) $((base + 20)))
    local cluster="e0=http://127.0.0.1:$((base + 1)),e1=http://127.0.0.1:$((base + 11)),e2=http://127.0.0.1:$((base + 21))"
    ETCD_ADDRS="127.0.0.1:${ETCD_PORTS[0]},127.0.0.1:${ETCD_PORTS[1]},127.0.0.1:${ETCD_PORTS[2]}"
    ETCD_PIDS=()
    local i
    for i in 0 1 2; do
        etcd --name "e$i" --data-dir "$dir/e$i" \
            --listen-client-urls "http://127.0.0.1:${ETCD_PORTS[$i]}" \
            --advertise-client-urls "http://127.0.0.1:${ETCD_PORTS[$i]}" \
            --listen-peer-urls "http://127.0.0.1:$((ETCD_PORTS[i] + 1))" \
            --initial-advertise-peer-urls "http://127.0.0.1:$((ETCD_PORTS[i] + 1))" \
            --initial-cluster "$cluster" --initial-cluster-token "bench-$base" \
            --initial-cluster-state new --log-level error --logger zap \
            --quota-backend-bytes $((8 * 1024 * 1024 * 1024)) \
            >"$BENCH_TMP/etcd$i.$base.log" 2>&1 &
        ETCD_PIDS+=($!)
        BENCH_PIDS+=($!)
        disown $!
    done
    ETCD_DATA="$dir"
    if ! wait_until 30 etcd_leader_index; then
        bench_log "etcd: no leader within 30 s"
        tail -5 "$BENCH_TMP"/etcd*."$base".log >&2
        return 1
    fi
}

etcd_endpoints() {
    echo "http://127.0.0.1:${ETCD_PORTS[0]},http://127.0.0.1:${ETCD_PORTS[1]},http://127.0.0.1:${ETCD_PORTS[2]}"
}

# Index (0-2) of the etcd leader.
etcd_leader_index() {
    local i st
    for i in 0 1 2; do
        kill -0 "${ETCD_PIDS[$i]}" 2>/dev/null || continue
        st=$(curl -s -m 1 -X POST "http://127.0.0.1:${ETCD_PORTS[$i]}/v3/maintenance/status" -d '{}') || continue
        if [[ -n "$st" ]] && echo "$st" | jq -e '.header.member_id == .leader' >/dev/null 2>&1; then
            echo "$i"
            return 0
        fi
    done
    return 1
}

stop_etcd() {
    bench_kill "${ETCD_PIDS[@]}"
    ETCD_PIDS=()
    [[ -n "${ETCD_DATA:-}" ]] && rm -rf "$ETCD_DATA"
    ETCD_DATA=""
}

# ---- Redis -----------------------------------------------------------------------

REDIS_PID=""
REDIS_PORT=""
REDIS_ADDR=""

start_redis() {
    reserve_ports 1 || return 1
    REDIS_PORT=$PORT
    REDIS_ADDR="127.0.0.1:$REDIS_PORT"
    redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save "" --appendonly no \
        --protected-mode yes --daemonize no --dir "$BENCH_TMP" --loglevel warning \
        --maxclients 20000 >"$BENCH_TMP/redis.log" 2>&1 &
    REDIS_PID=$!
    BENCH_PIDS+=($!)
    disown $!
    if ! wait_until 10 redis_ping; then
        bench_log "redis: not up within 10 s"
        tail -5 "$BENCH_TMP/redis.log" >&2
        return 1
    fi
}

redis_ping() {
    exec 3<>"/dev/tcp/127.0.0.1/$REDIS_PORT" || return 1
    printf 'PING\r\n' >&3
    local line
    read -r -t 1 line <&3
    exec 3>&-
    [[ "$line" == "+PONG"* ]]
}

stop_redis() {
    [[ -n "$REDIS_PID" ]] && bench_kill "$REDIS_PID"
    REDIS_PID=""
}
