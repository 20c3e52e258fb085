#!/usr/bin/env bash
# ctest conformance_java: builds the Java client and its conformance driver
# into BUILD_DIR/java-conformance (apart from clients_java's BUILD_DIR/java,
# so the two can run at once), then runs every scenario of
# tests/conformance/scenarios.json with it against BUILD_DIR/ticketingd.
# Extra arguments go to run.py (--only NAME, --verbose).
# Usage: clients/java/conformance.sh BUILD_DIR [RUN_PY_ARGS...]
# Exit: 0 pass, 1 fail, 77 no JDK.
set -euo pipefail
build=$(cd "${1:?usage: $0 BUILD_DIR [RUN_PY_ARGS...]}" && pwd)
shift
here=$(cd "$(dirname "$0")" && pwd)
for tool in java javac jar; do
    command -v "$tool" >/dev/null || { echo "conformance_java: SKIP: no $tool (apt-get install default-jdk-headless)"; exit 77; }
done
out=$build/java-conformance
"$here/build.sh" "$out"
exec python3 "$here/../../tests/conformance/run.py" --build "$build" \
    --driver "java=$out/ticketing-java-driver" "$@"
