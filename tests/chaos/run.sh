#!/usr/bin/env bash
# The fault harness: real members in network namespaces, real partitions,
# kill -9, SIGSTOP, restarts and clock skew; then check.py on the histories.
#
#   tests/chaos/run.sh --quick                 # ~2 minutes (ctest chaos_quick)
#   tests/chaos/run.sh --minutes 10            # a long run
#   tests/chaos/run.sh --quick --seed 42       # the same fault schedule again
#   tests/chaos/run.sh --scenario split-domain # --force-new-domain under uneven links
#
# Flags: --build DIR (default build/), --seed S, --nodes 3|5,
# --skew none|inbounds|beyond (default inbounds), --clients N,
# --break-indeterminate (clients enter on INDETERMINATE: the checker must
# fail), --keep (keep the run directory even when it passed).
#
# Needs root, ip netns, nftables, curl and python3; exits 77 (skip) when
# namespaces cannot be created. Everything it creates is named tkc<pid>...
# and removed on exit. See docs/testing.md, "Chaos".
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
build="$src/build"
seconds=75
seed=""
nodes=3
skew=inbounds
clients=4
brk=""
keep=0
scenario=""
rounds=3
replay=()
while [ $# -gt 0 ]; do
  case "$1" in
  --quick) seconds=75; replay+=(--quick) ;;
  --minutes) seconds=$(($2 * 60)); replay+=(--minutes "$2"); shift ;;
  --seconds) seconds=$2; replay+=(--seconds "$2"); shift ;;
  --seed) seed=$2; shift ;;
  --nodes) nodes=$2; replay+=(--nodes "$2"); shift ;;
  --skew) skew=$2; replay+=(--skew "$2"); shift ;;
  --clients) clients=$2; replay+=(--clients "$2"); shift ;;
  --break-indeterminate) brk=--break-indeterminate; replay+=("$1") ;;
  --build) build=$2; shift ;;
  --keep) keep=1 ;;
  --scenario) scenario=$2; shift ;;
  --rounds) rounds=$2; shift ;;
  *) echo "usage: $0 [--quick | --minutes N] [--seed S] [--nodes 3|5] [--skew none|inbounds|beyond] [--clients N] [--break-indeterminate] [--build DIR] [--keep] [--scenario split-domain [--rounds N]]" >&2; exit 64 ;;
  esac
  shift
done
[ -n "$seed" ] || seed=$(( $(od -An -N4 -tu4 /dev/urandom) % 1000000 + 1 ))

skip() { echo "chaos: skipped: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "needs root (network namespaces)"
for c in ip nft curl python3; do command -v $c >/dev/null || skip "$c is missing (scripts/setup.sh installs it)"; done
for f in "$build/ticketingd" "$build/tests/chaos_client" "$build/tests/libtkskewclock.so"; do
  [ -x "$f" ] || [ -f "$f" ] || { echo "chaos: $f is missing: build first" >&2; exit 2; }
done

tag="tkc$$"
probe="${tag}probe"
ip netns add "$probe" 2>/dev/null || skip "cannot create a network namespace here"
ip netns exec "$probe" nft list tables >/dev/null 2>&1 || { ip netns del "$probe"; skip "nftables does not work inside a namespace here"; }
ip netns del "$probe"

out=$(mktemp -d /tmp/tk-chaos-XXXXXX)
pypid=""
cleanup() {
  [ -n "$pypid" ] && kill -TERM "$pypid" 2>/dev/null && wait "$pypid" 2>/dev/null
  # Whatever the harness left (it removes its namespaces itself unless killed).
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$tag" || true); do
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -CONT "$p" 2>/dev/null; kill -KILL "$p" 2>/dev/null; done
    ip netns del "$ns" 2>/dev/null
  done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ "$scenario" = split-domain ]; then
  # A scenario judges itself (split_domain.py); no client histories.
  python3 "$here/split_domain.py" --bin "$build" --skewlib "$build/tests/libtkskewclock.so" \
    --out "$out" --seed "$seed" --rounds "$rounds" --tag "$tag" &
  pypid=$!
  wait "$pypid"
  src_rc=$?
  pypid=""
  if [ $src_rc -ne 0 ] || [ $keep -eq 1 ]; then echo "split-domain: run directory $out (seed $seed)"; else rm -rf "$out"; fi
  [ $src_rc -eq 0 ] && exit 0
  exit 1
elif [ -n "$scenario" ]; then
  echo "chaos: unknown scenario $scenario (known: split-domain)" >&2; exit 64
fi

python3 "$here/chaos.py" --bin "$build" --skewlib "$build/tests/libtkskewclock.so" --out "$out" \
  --seed "$seed" --seconds "$seconds" --nodes "$nodes" --clients "$clients" --skew "$skew" \
  --tag "$tag" $brk --replay="${replay[*]}" &
pypid=$!
wait "$pypid"
hrc=$?
pypid=""
if [ $hrc -ne 0 ]; then
  echo "chaos: the harness failed (exit $hrc); run directory $out"
  echo "0 passed, 1 failed"
  exit 1
fi

echo "chaos: checking the histories (seed $seed)"
python3 "$here/check.py" "$out"
crc=$?
if [ "$skew" = beyond ]; then
  echo "chaos: clock skew beyond the lease margin: failures above are the documented"
  echo "chaos: outcome of this mode (docs/testing.md, \"Chaos\"), not a test failure"
  echo "chaos: run directory $out"
  exit 0
fi
if [ $crc -ne 0 ] || [ $keep -eq 1 ]; then
  echo "chaos: run directory $out (seed $seed)"
else
  rm -rf "$out"
fi
exit $crc
