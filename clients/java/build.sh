#!/usr/bin/env bash
# Builds the Java client with the JDK alone (no Maven): compiles
# src/main/java into OUT_DIR/classes, packs OUT_DIR/ticketing-client.jar and
# writes OUT_DIR/ticketing-java-driver, the conformance driver's launcher
# (a shell script that runs the driver class from that jar).
# Usage: clients/java/build.sh [OUT_DIR]   (default: clients/java/target)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/target}
mkdir -p "$out"
out=$(cd "$out" && pwd)
rm -rf "$out/classes"
mkdir -p "$out/classes"
find "$here/src/main/java" -name '*.java' | sort > "$out/sources.txt"
javac --release 17 -Xlint:all -Werror -encoding UTF-8 -d "$out/classes" @"$out/sources.txt"
printf 'Automatic-Module-Name: example.ticketing\nImplementation-Title: ticketing-client\n' > "$out/manifest.txt"
jar --create --file "$out/ticketing-client.jar" --manifest "$out/manifest.txt" -C "$out/classes" .

# The driver is one short-lived JVM per conformance session: the serial
# collector and the C1 compiler alone start it fastest, and it needs little
# heap. JAVA (default: java on PATH) picks the JVM.
cat > "$out/ticketing-java-driver" <<EOF
#!/bin/sh
# The Java client's conformance driver (written by clients/java/build.sh).
exec "\${JAVA:-java}" -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xss512k -Xmx128m \\
    -cp '$out/ticketing-client.jar' example.ticketing.driver.ConformanceDriver "\$@"
EOF
chmod +x "$out/ticketing-java-driver"
