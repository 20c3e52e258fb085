#!/usr/bin/env bash
# ctest clients_go: builds the Go conformance driver into BUILD_DIR and runs
# the Go client's tests (with the race detector when it works here) against
# BUILD_DIR/ticketingd. Go's caches live under BUILD_DIR, nothing in $HOME.
# Usage: clients/go/ctest.sh BUILD_DIR     Exit: 0 pass, 1 fail, 77 no Go.
set -euo pipefail
build=$(cd "${1:?usage: $0 BUILD_DIR}" && pwd)
cd "$(dirname "$0")"
command -v go >/dev/null || { echo "clients_go: SKIP: no go (apt-get install golang-go)"; exit 77; }
export GOPATH=$build/go/path GOCACHE=$build/go/cache GOTOOLCHAIN=local GOPROXY=off GOFLAGS=
export TICKETING_BIN=$build/ticketingd
go build -o "$build/ticketing-go-driver" ./cmd/ticketing-driver
race=()
if [ "$(go env CGO_ENABLED)" = 1 ] && command -v gcc >/dev/null; then race=(-race); fi
exec go test "${race[@]}" -count=1 -timeout 110s ./...
