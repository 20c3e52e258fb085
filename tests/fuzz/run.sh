#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz/ with clang and runs each one
# for a while on a copy of its seed corpus.
#
# Usage: tests/fuzz/run.sh [--seconds N] [--jobs J] [target...]
#   --seconds N  fuzzing time per target (default 10)
#   --jobs J     targets fuzzed at the same time (default 1); the build
#                always uses every core
#   target...    some of: request handshake wire snapshot cmd response
#                admin_http lock addr slots (default: all of them)
# Environment: TK_FUZZ_BUILD, the build directory (default build-fuzz).
#
# Needs clang and its libFuzzer runtime (Debian packages clang and
# libclang-rt-14-dev; scripts/setup.sh installs them). Installs nothing.
# The seed corpora in tests/fuzz/corpus/ are only read: each run fuzzes a
# temporary copy, so nothing new is written into the tree, except that a
# crash leaves its input in tests/fuzz/crashes/<target>/ (with the fuzzer's
# log next to it). Reproduce one with: $TK_FUZZ_BUILD/fuzz_<target> <input>
#
# Prints one line per target and a summary; exits non-zero if any target
# crashed (or failed to build):
#   fuzz: wire: 123456 runs, 12345 exec/s, ok
#   fuzz: 8 passed, 0 failed
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD

all=(request handshake wire snapshot cmd response admin_http lock addr slots entry)
seconds=10
jobs=1
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds="${2:?--seconds needs a number}"; shift 2 ;;
    --jobs) jobs="${2:?--jobs needs a number}"; shift 2 ;;
    -h|--help) sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "fuzz: unknown option $1" >&2; exit 2 ;;
    *)
      if [[ " ${all[*]} " != *" $1 "* ]]; then
        echo "fuzz: unknown target $1 (targets: ${all[*]})" >&2
        exit 2
      fi
      targets+=("$1"); shift ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")
[[ "$seconds" =~ ^[0-9]+$ && "$seconds" -ge 1 ]] || { echo "fuzz: bad --seconds $seconds" >&2; exit 2; }
[[ "$jobs" =~ ^[0-9]+$ && "$jobs" -ge 1 ]] || { echo "fuzz: bad --jobs $jobs" >&2; exit 2; }

# Longest input per target: a few lines, frames or records more than the
# longest single valid one, so that limits and splitting get exercised.
max_len() {
  case "$1" in
    request) echo 4096 ;;    # lines of up to TK_LINE_MAX
    handshake) echo 1024 ;;  # a few 100-200 byte lines
    wire) echo 8192 ;;       # frames with entries, a snapshot chunk and config
    snapshot) echo 8192 ;;   # a header and up to ~300 records
    cmd) echo 4096 ;;        # a batch of up to ~150 commands
    response) echo 4096 ;;   # lines of up to TK_LINE_MAX
    admin_http) echo 4200 ;; # the listener reads at most 4096 bytes
    lock) echo 2048 ;;       # choices for up to 400 operations
    addr) echo 2200 ;;       # a mode byte and a list of up to 8 addresses
    slots) echo 16384 ;;     # a ring file or encoding up to the 1024-range limit
    entry) echo 8192 ;;      # a batch of commands, or a ring or move step with its ring
  esac
}

build="${TK_FUZZ_BUILD:-$root/build-fuzz}"
case "$build" in /*) ;; *) build="$root/$build" ;; esac
mkdir -p "$build"

cc=clang
if ! command -v "$cc" >/dev/null; then
  echo "fuzz: clang not found: run scripts/setup.sh (Debian packages clang, libclang-rt-14-dev)" >&2
  exit 1
fi
probe="$build/.probe"
if ! printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { (void)d; (void)n; return 0; }\n' |
  "$cc" -x c -fsanitize=fuzzer,address,undefined - -o "$probe" 2>"$probe.log"; then
  echo "fuzz: clang cannot link a libFuzzer target (see $probe.log): run scripts/setup.sh" \
    "(Debian package libclang-rt-14-dev)" >&2
  exit 1
fi

echo "fuzz: building ${#targets[@]} targets in $build" >&2
bins=()
for t in "${targets[@]}"; do bins+=("$build/fuzz_$t"); done
if ! make -s -f tests/fuzz/Makefile BUILD="$build" -j"$(nproc)" "${bins[@]}" >&2; then
  echo "fuzz: build failed" >&2
  echo "fuzz: 0 passed, ${#targets[@]} failed"
  exit 1
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/tk-fuzz.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# Runs one target; writes its summary line to $work/<target>.result.
run_one() {
  local t="$1" dir="$work/$t"
  mkdir -p "$dir/corpus" "$dir/artifacts"
  cp -R "tests/fuzz/corpus/$t/." "$dir/corpus/"
  local dict=()
  [ -f "tests/fuzz/$t.dict" ] && dict=(-dict="$root/tests/fuzz/$t.dict")
  local rc=0
  (cd "$dir" &&
    ASAN_OPTIONS="abort_on_error=1:detect_leaks=1:${ASAN_OPTIONS:-}" \
    UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:${UBSAN_OPTIONS:-}" \
      "$build/fuzz_$t" -max_total_time="$seconds" -max_len="$(max_len "$t")" -timeout=30 \
        -rss_limit_mb=2048 -print_final_stats=1 "${dict[@]}" \
        -artifact_prefix="$dir/artifacts/" "$dir/corpus" >"$dir/log" 2>&1) || rc=$?
  local runs eps
  runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/log" | tail -n 1)"
  eps="$(sed -n 's/^stat::average_exec_per_sec: *//p' "$dir/log" | tail -n 1)"
  if [ -z "$runs" ]; then # no final stats (a crash): the last status line
    runs="$(sed -n 's/^#\([0-9][0-9]*\).*/\1/p' "$dir/log" | tail -n 1)"
    eps="$(sed -n 's/^#[0-9].* exec\/s: \([0-9][0-9]*\).*/\1/p' "$dir/log" | tail -n 1)"
  fi
  runs="${runs:-0}"
  eps="${eps:-0}"
  # A slow unit (over libFuzzer's 10 s report threshold) on a shared,
  # loaded machine is usually the machine: run it again alone, and count it
  # only if it is still slow (over 2 s) there. Hangs are caught by -timeout.
  local slow note=""
  for slow in "$dir"/artifacts/slow-unit-*; do
    [ -f "$slow" ] || continue
    local t0 t1
    t0=$(date +%s%N)
    "$build/fuzz_$t" "$slow" >/dev/null 2>&1 || true
    t1=$(date +%s%N)
    if [ $(((t1 - t0) / 1000000)) -lt 2000 ]; then
      note=" (a unit reported slow under load took $(((t1 - t0) / 1000000)) ms alone)"
      rm -f "$slow"
    fi
  done
  local artifact
  artifact="$(find "$dir/artifacts" -type f | head -n 1)"
  if [ "$rc" -eq 0 ] && [ -z "$artifact" ]; then
    echo "fuzz: $t: $runs runs, $eps exec/s, ok$note" >"$work/$t.result.tmp"
    mv "$work/$t.result.tmp" "$work/$t.result"
    return
  fi
  local dest="tests/fuzz/crashes/$t" saved="no input saved"
  mkdir -p "$dest"
  if [ -n "$artifact" ]; then
    saved="$dest/$(basename "$artifact")"
    cp "$artifact" "$saved"
  else
    saved="$dest/no-input-$(date +%Y%m%d-%H%M%S)"
  fi
  cp "$dir/log" "$saved.log"
  echo "fuzz: $t: $runs runs, $eps exec/s, CRASH ($saved)" >"$work/$t.result.tmp"
  mv "$work/$t.result.tmp" "$work/$t.result"
}

passed=0
failed=0
printed=0
# Prints, in target order, the results that are in; with wait=1 it waits
# for each one (the end of the run).
report() {
  local wait="$1"
  while [ "$printed" -lt "${#pids[@]}" ]; do
    local t="${targets[$printed]}" line log
    if [ ! -f "$work/$t.result" ]; then
      [ "$wait" -eq 1 ] || return 0
      wait "${pids[$printed]}" || true
    fi
    if [ -f "$work/$t.result" ]; then
      line="$(cat "$work/$t.result")"
    else
      line="fuzz: $t: 0 runs, 0 exec/s, CRASH (the runner failed; no input saved)"
    fi
    printed=$((printed + 1))
    echo "$line"
    case "$line" in
      *", ok") passed=$((passed + 1)) ;;
      *)
        failed=$((failed + 1))
        log="$(sed -n 's/.*CRASH (\(tests\/fuzz\/crashes\/[^)]*\))$/\1/p' <<<"$line")"
        if [ -n "$log" ] && [ -f "$log.log" ]; then
          echo "fuzz: $t: the fuzzer's report ($log.log):" >&2
          grep -v '^INFO:\|^#[0-9]' "$log.log" | head -n 40 >&2 || true
        fi ;;
    esac
  done
}

pids=()
for t in "${targets[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do
    wait -n || true
    report 0
  done
  run_one "$t" &
  pids+=($!)
done
report 1
echo "fuzz: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
