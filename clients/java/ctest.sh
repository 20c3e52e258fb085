#!/usr/bin/env bash
# ctest clients_java: builds the Java client with javac and jar into
# BUILD_DIR/java (the library ticketing-client.jar, which holds the
# conformance driver too, and the driver's launcher ticketing-java-driver),
# compiles its JUnit 5 tests and runs them against real
# BUILD_DIR/ticketingd processes. Nothing is fetched: JUnit comes from
# Debian's junit5 package.
# Usage: clients/java/ctest.sh BUILD_DIR   Exit: 0 pass, 1 fail, 77 no JDK or no JUnit 5.
set -euo pipefail
build=$(cd "${1:?usage: $0 BUILD_DIR}" && pwd)
cd "$(dirname "$0")"
for tool in java javac jar; do
    command -v "$tool" >/dev/null || { echo "clients_java: SKIP: no $tool (apt-get install default-jdk-headless)"; exit 77; }
done
junit=${JUNIT_CONSOLE_JAR:-/usr/share/java/junit-platform-console-standalone.jar}
[ -r "$junit" ] || { echo "clients_java: SKIP: no JUnit 5 console launcher at $junit (apt-get install junit5)"; exit 77; }
out=$build/java
./build.sh "$out"
rm -rf "$out/test-classes" "$out/test-reports"
mkdir -p "$out/test-classes"
find src/test/java -name '*.java' | sort > "$out/test-sources.txt"
javac --release 17 -Xlint:all -Werror -encoding UTF-8 -cp "$out/classes:$junit" -d "$out/test-classes" \
    @"$out/test-sources.txt"
export TICKETING_BIN=$build/ticketingd
# Every test has its own @Timeout, and the setup methods (which start the
# servers) get 60 s; this bounds the whole run besides, inside the 150 s that
# ctest gives clients_java.
exec timeout -k 5 140 java -XX:+UseSerialGC -jar "$junit" --disable-banner --fail-if-no-tests \
    --disable-ansi-colors --details=tree --class-path "$out/classes:$out/test-classes" \
    --config=junit.jupiter.execution.timeout.lifecycle.method.default=60s \
    --scan-class-path "$out/test-classes" --include-engine=junit-jupiter --reports-dir "$out/test-reports"
