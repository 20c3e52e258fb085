#!/usr/bin/env bash
# Runs what a Ticketing pod runs, to find or to check the system calls of
# the seccomp profile deploy/seccomp/ticketingd.json (deploy/README.md,
# section 4): a 3-member cluster of BUILD_DIR/ticketingd on 127.0.0.1,
# ticketctl's ping, run (acquire and release), status and members,
# ticketing-bench load when BUILD_DIR has it, one member replaced by a
# fresh process (join, snapshot transfer), `sleep 1` (the preStop hook) and
# a SIGTERM shutdown (leadership handover).
#
#   --trace:    every member and the ticketctl/sleep commands run under
#               `strace -f`; prints the sorted union of the calls seen, one
#               per line (observed.txt is this output).
#   --confined: every member and command runs under the profile
#               (confine.py, as a Localhost profile would be applied);
#               fails unless every step succeeds and every member exits 0.
#
# Usage: deploy/seccomp/exercise.sh --trace|--confined BUILD_DIR
# Needs: curl; strace (--trace); python3-seccomp (--confined). Every
# process it starts is stopped at the end.
set -euo pipefail
mode=${1:?usage: exercise.sh --trace|--confined BUILD_DIR}
build=$(cd "${2:?usage: exercise.sh --trace|--confined BUILD_DIR}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
case $mode in
  --trace) ;;
  --confined) ;;
  *) echo "exercise.sh: mode --trace or --confined" >&2; exit 2 ;;
esac
tmp=$(mktemp -d /tmp/tk-seccomp.XXXXXX)
wrappers=()  # strace or python (confine.py), one per member
pids=()      # the ticketingd processes themselves
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
# alive PID: running (a zombie, exited but not yet waited for, is not).
alive() {
  local st
  st=$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null) || return 1
  [ -n "$st" ] && [ "$st" != Z ]
}
fail() {
  echo "exercise.sh: the members' last log lines:" >&2
  tail -n 3 "$tmp"/node*.log >&2
  echo "exercise.sh: FAIL: $*" >&2
  exit 1
}

# wrap TAG CMD...: runs CMD traced or confined.
wrap() {
  local tag=$1; shift
  if [ "$mode" = --trace ]; then
    exec strace -f -qq -o "$tmp/trace.$tag" -- "$@"
  else
    exec /usr/bin/python3 "$here/confine.py" "$here/ticketingd.json" "$@"
  fi
}

printf 'exercise-client-secret-0123456789abcdef' >"$tmp/client"
printf 'exercise-peer-secret-0123456789abcdef' >"$tmp/peer"
chmod 600 "$tmp/client" "$tmp/peer"
base=$((21000 + RANDOM % 4000))
ports=($base $((base + 10)) $((base + 20)))
peers="127.0.0.1:$((base + 1)),127.0.0.1:$((base + 11)),127.0.0.1:$((base + 21))"
addrs="127.0.0.1:${ports[0]},127.0.0.1:${ports[1]},127.0.0.1:${ports[2]}"

spawn() { # spawn I TAG
  (wrap "$2" "$build/ticketingd" --bind 127.0.0.1 --port "${ports[$1]}" \
    --advertise "127.0.0.1:${ports[$1]}" --peers "$peers" \
    --client-secret-file "$tmp/client" --peer-secret-file "$tmp/peer" \
    --threads 2 --log-level 1) >>"$tmp/node$1.log" 2>&1 &
  local w=$! p=""
  wrappers[$1]=$w
  # Signals go to ticketingd itself: a strace killed first would leave it
  # running, untraced. Under confine.py, ticketingd is the process itself.
  if [ "$mode" = --trace ]; then
    for _ in $(seq 100); do
      p=$(pgrep -P "$w" || true)
      [ -n "$p" ] && break
      sleep 0.05
    done
    [ -n "$p" ] || fail "ticketingd did not start"
  else
    p=$w
  fi
  pids[$1]=$p
}
ready() { [ "$(curl -s -o /dev/null -w '%{http_code}' -m 1 "http://127.0.0.1:$(($1 + 2))/readyz")" = 200 ]; }
wait_ready() {
  for _ in $(seq 600); do ready "$1" && return 0; sleep 0.1; done
  fail "the member on port $1 is not ready after 60 s"
}
ctl() { # ctl TAG ARGS...: ticketctl in the pod (kubectl exec)
  local tag=$1; shift
  (export TICKETING_SECRET_FILE="$tmp/client"; wrap "$tag" "$build/ticketctl" --addr "$addrs" "$@") \
    >"$tmp/$tag.out" 2>&1 || fail "ticketctl $*: $(tail -n 2 "$tmp/$tag.out")"
}

for i in 0 1 2; do spawn $i n$i; done
for p in "${ports[@]}"; do wait_ready "$p"; done
ctl ctl-ping ping --count 3
ctl ctl-run run exercise-key --lease 5s --wait 5s -- true
ctl ctl-status status
ctl ctl-members members
if [ -x "$build/ticketing-bench" ]; then
  for sc in uncontended hotkey; do
    "$build/ticketing-bench" --driver ticketing --addr "$addrs" --secret-file "$tmp/client" \
      --scenario $sc --conns 8 --warmup 1 --duration 2 >"$tmp/bench.out" 2>&1 ||
      fail "ticketing-bench $sc: $(tail -n 2 "$tmp/bench.out")"
  done
fi
(wrap sleep sleep 1) || fail "sleep 1 (the preStop hook)"
# Replace member 2: a fresh process joins, the leader sends it a snapshot.
kill -9 "${pids[2]}"
wait "${wrappers[2]}" 2>/dev/null || true
spawn 2 n2b
wait_ready "${ports[2]}"
ctl ctl-members2 members
# SIGTERM: the leader hands leadership over, every member exits 0.
for i in 0 1 2; do kill -TERM "${pids[$i]}"; done
for i in 0 1 2; do
  for _ in $(seq 300); do
    alive "${pids[$i]}" || break
    sleep 0.05
  done
  alive "${pids[$i]}" && fail "member $i still runs 15 s after SIGTERM"
  rc=0
  wait "${wrappers[$i]}" || rc=$?
  [ "$rc" = 0 ] || fail "member $i exited with status $rc after SIGTERM"
done
pids=()
if [ "$mode" = --trace ]; then
  sed -n 's/^[0-9]\+ \+\([a-z_0-9]\+\)(.*/\1/p' "$tmp"/trace.* | sort -u
else
  echo "exercise.sh: every step ran under $(basename "$here")/ticketingd.json"
fi
