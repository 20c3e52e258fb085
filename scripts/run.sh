#!/usr/bin/env bash
# Installs what is missing, builds, and starts a standalone Ticketing node
# on 127.0.0.1:7400 with a freshly generated client secret (in .run/).
# Ctrl-C stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build
mkdir -p .run
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > .run/client.secret
chmod 600 .run/client.secret
echo "run: client secret in $(pwd)/.run/client.secret"
echo "run: admin at http://127.0.0.1:7402/status"
exec ./build/ticketingd --bind 127.0.0.1 --port "${TICKETING_PORT:-7400}" \
  --client-secret-file .run/client.secret "$@"
