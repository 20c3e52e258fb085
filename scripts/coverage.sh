#!/usr/bin/env bash
# Line and branch coverage of the test suite: installs gcovr if missing,
# builds with gcc --coverage -O0 (-DTK_COVERAGE=ON, Debug, so the debug-only
# assertions are compiled in), runs the unit tests and the deterministic
# simulation, and writes an HTML report to BUILD_DIR/coverage/index.html plus
# one summary line per layer. tests/ and bench/ are not counted.
#
# Usage: scripts/coverage.sh [--all] [BUILD_DIR]      (default: build-coverage)
#   BUILD_DIR  a relative path is taken from the top of the repository.
#   --all      also run the integration tests (real processes, a few
#              minutes) and report net/ and client/ too.
# Environment: TK_TEST_JOBS (ctest -j, default 2); TK_SIM_SEEDS (default 300
# here) and the other tests' variables pass through to the tests.
# Exit status: non-zero if a test failed (the report is still written).
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
start=$(date +%s)

all=0
dir=""
for a in "$@"; do
  case "$a" in
    --all) all=1 ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "coverage: unknown option $a" >&2; exit 2 ;;
    *) [ -z "$dir" ] || { echo "coverage: one BUILD_DIR only" >&2; exit 2; }
       dir="$a" ;;
  esac
done
dir="${dir:-build-coverage}"
jobs="${TK_TEST_JOBS:-2}"

# gcovr (it brings python3, which the summary below uses too).
PKGS=(gcovr)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "coverage: installing ${missing[*]}" >&2
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# The build's own packages, configure and build. gcov reads gcc's counters,
# so the compiler is gcc; the later -D overrides setup.sh's Release.
export CC="${CC:-gcc}"
scripts/setup.sh "$dir" -DCMAKE_BUILD_TYPE=Debug -DTK_COVERAGE=ON
case "$dir" in /*) ;; *) dir="$root/$dir" ;; esac

# Counters add up across runs: start from zero.
find "$dir" -name '*.gcda' -delete
rm -rf "$dir/coverage"
mkdir -p "$dir/coverage"

layers=(core shard raft)
labels='^(unit|sim)$'
if [ "$all" -eq 1 ]; then
  layers+=(net client)
  labels='^(unit|sim|integ)$'
fi

# The simulation at -O0 with counters runs about 5x slower than Release:
# fewer seeds (they reach the same code) keep it inside ctest's timeout, or
# a killed run would write no counters at all.
export TK_SIM_SEEDS="${TK_SIM_SEEDS:-300}"
status=0
(cd "$dir" && ctest --output-on-failure -j"$jobs" -L "$labels") || status=$?

# gcovr leaves gcov's scratch files in its working directory: run it in a
# scratch directory, with filters as absolute paths (regexes, so escaped).
re_root=$(printf '%s' "$root" | sed 's/[].[^$*+?(){}|\\]/\\&/g')
filters=()
for l in "${layers[@]}"; do filters+=(--filter "$re_root/$l/"); done
mkdir -p "$dir/coverage/.gcov"
(cd "$dir/coverage/.gcov" &&
 gcovr --root "$root" "${filters[@]}" --exclude "$re_root/tests/" --exclude "$re_root/bench/" \
       --gcov-executable gcov -j "$jobs" \
       --html-details "$dir/coverage/index.html" --html-title "Ticketing coverage" \
       --json-summary "$dir/coverage/summary.json" --json-summary-pretty \
       "$dir" >/dev/null)
rm -rf "$dir/coverage/.gcov"

python3 - "$dir/coverage/summary.json" "${layers[@]}" <<'EOF'
import json, math, sys
files = json.load(open(sys.argv[1]))["files"]
def pct(c, t):  # rounded as the HTML report rounds; never 100.0% unless all
    if not t:
        return "  n/a"
    v = math.floor(1000.0 * c / t + 0.5) / 10
    return "%5.1f%%" % (99.9 if c < t and v >= 100 else v)
def line(name, fs):
    lc = sum(f["line_covered"] for f in fs); lt = sum(f["line_total"] for f in fs)
    bc = sum(f["branch_covered"] for f in fs); bt = sum(f["branch_total"] for f in fs)
    print("coverage: %-8s %s lines, %s branches  (%d/%d lines, %d/%d branches)"
          % (name, pct(lc, lt), pct(bc, bt), lc, lt, bc, bt))
layers = sys.argv[2:]
for l in layers:
    line(l + "/", [f for f in files if f["filename"].startswith(l + "/")])
line("overall", [f for f in files if f["filename"].split("/")[0] in layers])
EOF
echo "coverage: report $dir/coverage/index.html ($(( $(date +%s) - start )) s)"
if [ "$status" -ne 0 ]; then
  echo "coverage: some tests FAILED (ctest exit $status); the figures above are from the runs that finished" >&2
fi
exit "$status"
