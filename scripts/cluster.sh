#!/usr/bin/env bash
# Starts (or stops) a local 3-node Ticketing cluster on 127.0.0.1.
#   scripts/cluster.sh start   # new secrets; nodes on client ports 7400, 7410, 7420
#   scripts/cluster.sh stop
#   scripts/cluster.sh stop-node N              # SIGTERM to node N (0, 1 or 2)
#   scripts/cluster.sh start-node N [FLAG...]   # start node N again, same flags
#                                               # and secret files, plus FLAGs
# Node N has client port 7400+10N, peer port +1, admin port +2.
# State lives in .run/cluster/ (secrets, logs, pids). Expects ./build.
# Three nodes share this machine, so each gets one worker thread; set
# TICKETING_CLUSTER_ARGS to pass other flags to every node.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=.run/cluster
bin=./build/ticketingd
ports=(7400 7410 7420)
peers="127.0.0.1:7401,127.0.0.1:7411,127.0.0.1:7421"

stop_pidfile() {
  local f=$1 pid
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$f"
}

stop() {
  for f in "$dir"/node*.pid; do stop_pidfile "$f"; done
}

# start_node I [FLAG...]: node I in the background, its log appended to.
start_node() {
  local i=$1 p
  shift
  p=${ports[$i]}
  "$bin" --bind 127.0.0.1 --port "$p" --advertise "127.0.0.1:$p" --peers "$peers" \
    --client-secret-file "$dir/client.secret" --peer-secret-file "$dir/peer.secret" \
    ${TICKETING_CLUSTER_ARGS:---threads 1} "$@" \
    >> "$dir/node$i.log" 2>&1 &
  echo $! > "$dir/node$i.pid"
}

node_arg() {
  case "${1:-}" in
  0|1|2) ;;
  *) echo "$0: node number 0, 1 or 2 expected" >&2; exit 64 ;;
  esac
}

case "${1:-start}" in
stop) stop; exit 0 ;;
stop-node) node_arg "${2:-}"; stop_pidfile "$dir/node$2.pid"; exit 0 ;;
start-node)
  node_arg "${2:-}"
  if [ -f "$dir/node$2.pid" ] && kill -0 "$(cat "$dir/node$2.pid")" 2>/dev/null; then
    echo "$0: node $2 is running (pid $(cat "$dir/node$2.pid"))" >&2
    exit 1
  fi
  i=$2
  shift 2
  start_node "$i" "$@"
  exit 0 ;;
start) ;;
*) echo "usage: $0 start|stop|stop-node N|start-node N [FLAG...]" >&2; exit 64 ;;
esac

stop
mkdir -p "$dir"
umask 077
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$dir/client.secret"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$dir/peer.secret"
for i in 0 1 2; do
  : > "$dir/node$i.log"
  start_node "$i"
done
# Wait until a leader serves.
for _ in $(seq 100); do
  for p in "${ports[@]}"; do
    if curl -sf "http://127.0.0.1:$((p + 2))/status" 2>/dev/null | grep -q '"serving":true'; then
      echo "cluster: leader on 127.0.0.1:$p (logs in $dir)"
      exit 0
    fi
  done
  sleep 0.1
done
echo "cluster: no leader after 10 s; see $dir/node*.log" >&2
exit 1
