#!/usr/bin/env bash
# Installs what is missing (Debian 12 packages) and builds Ticketing.
# Usage: scripts/setup.sh [build-dir] [extra cmake args...]
set -euo pipefail
cd "$(dirname "$0")/.."

# Build: compiler, cmake, the four libraries of the design card, xxhash,
# Jansson (ticketctl reads the admin port's JSON with it).
# Tests: sqlite (client docs example), PostgreSQL (fencing example),
# python3 (log check, docs check; the Python client and its tests),
# python3-yaml, prometheus (promtool: the /metrics text and the alert rules)
# and python3-seccomp (deploy check), etcd and Redis (bench smoke), curl and
# bc, jq and openssl (docs check: the commands of docs/), golang-go (the Go
# client and its conformance driver), python3-venv, -setuptools and -wheel
# (docs check: installing the Python client with pip), nftables and iproute2
# (the chaos harness: network namespaces and partitions), default-jdk-headless
# and junit5 (the Java client), nodejs (the Node.js client).
# Fuzzing: clang and its libFuzzer runtime (tests/fuzz/run.sh); clang-format
# (the format check).
PKGS=(build-essential cmake pkg-config liburing-dev libwolfssl-dev libjemalloc-dev
      libcriterion-dev libxxhash-dev libjansson-dev libsqlite3-dev curl bc postgresql python3-yaml
      etcd-server etcd-client redis-server clang libclang-rt-14-dev clang-format python3
      prometheus python3-seccomp jq openssl golang-go python3-venv python3-setuptools
      python3-wheel nftables iproute2 default-jdk-headless junit5 nodejs)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

dir="${1:-build}"
shift || true
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$dir" -j"$(nproc)"
