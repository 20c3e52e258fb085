#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds three ways and runs
#   1. every test on the Release build (jemalloc, as shipped),
#   2. every test on an ASan+UBSan build but the chaos runs and the
#      other-language clients (they test behaviour the Release run covers,
#      and would double the suite's time),
#   3. the threaded stress programs on a TSan build (Criterion cannot run
#      under TSan, so TSan runs plain programs),
#   4. every libFuzzer target for 15 s (tests/fuzz/run.sh, build-fuzz).
# Exit status 0 only if everything passed.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="${TK_TEST_JOBS:-2}"

scripts/setup.sh build
(cd build && ctest --output-on-failure -j"$jobs")

scripts/setup.sh build-asan -DTK_SANITIZE=address
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j"$jobs" -LE '^(chaos|clients)$')

scripts/setup.sh build-tsan -DTK_SANITIZE=thread
(cd build-tsan && TSAN_OPTIONS=halt_on_error=1 ctest --output-on-failure -j"$jobs" -L stress)

tests/fuzz/run.sh --seconds 15
echo "test: all suites passed"
