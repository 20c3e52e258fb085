#!/usr/bin/env bash
# ctest clients_node and conformance_node.
#   clients/node/ctest.sh BUILD_DIR               the Node.js client's tests (node --test)
#                                                 against BUILD_DIR/ticketingd
#   clients/node/ctest.sh BUILD_DIR conformance   the conformance scenarios with its driver
# Exit: 0 pass, 1 fail, 77 no node 20 or later (the client needs Node 20).
set -euo pipefail
build=$(cd "${1:?usage: $0 BUILD_DIR [conformance]}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
name=clients_node
[ "${2:-}" = conformance ] && name=conformance_node
command -v node >/dev/null || { echo "$name: SKIP: no node (apt-get install nodejs)"; exit 77; }
major=$(node -p 'process.versions.node.split(".")[0]')
[ "$major" -ge 20 ] || { echo "$name: SKIP: node $(node --version) is older than 20"; exit 77; }
if [ "$name" = conformance_node ]; then
    exec python3 "$here/../../tests/conformance/run.py" --build "$build" \
        --driver "node=node '$here/driver.js'"
fi
cd "$here"
export TICKETING_BUILD_DIR=$build
exec node --test --test-reporter=spec --test-timeout=90000 test/*.test.js
