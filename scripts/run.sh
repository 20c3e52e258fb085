#!/usr/bin/env bash
# The main job: installs what is missing, builds, starts a local 3-node
# Ticketing cluster on 127.0.0.1 (client ports 7400, 7410, 7420) and runs a
# short ticket-drop demo against it. The cluster keeps running until Ctrl-C
# (or pass --no-wait to stop it after the demo).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build
command -v curl >/dev/null && command -v bc >/dev/null || {
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq curl bc >/dev/null
}
trap 'scripts/cluster.sh stop' EXIT
scripts/cluster.sh start
scripts/demo.sh
if [ "${1:-}" = "--no-wait" ]; then exit 0; fi
echo "run: cluster running; try:"
echo "  export TICKETING_ADDR=127.0.0.1:7400,127.0.0.1:7410,127.0.0.1:7420"
echo "  export TICKETING_SECRET_FILE=$(pwd)/.run/cluster/client.secret"
echo "  ./build/ticketctl run my-key --lease 30s --wait 5s -- echo 'holding the lock'"
echo "  curl -s http://127.0.0.1:7402/status"
echo "run: Ctrl-C stops the cluster"
while sleep 3600; do :; done
