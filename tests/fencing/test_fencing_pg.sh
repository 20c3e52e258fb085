#!/usr/bin/env bash
# Goal: prove that the fencing example of docs/fencing.md works against a
# real PostgreSQL and a real ticketingd, and that this test would notice if
# the SQL stopped checking the token.
#
# Method: start a private PostgreSQL (initdb in a temporary directory, unix
# socket there, no TCP) and a standalone ticketingd from the build
# directory; run docs/examples/fencing_pg.sh against both; then check the
# database directly: the fresh write is there, the stale one changed
# nothing, and a stale token is still refused afterwards. Finally run the
# example once more with the fence condition deleted from the SQL and
# require that the same checks fail (a mutation test of the checks).
#
# Usage: tests/fencing/test_fencing_pg.sh BUILD_DIR
# Exit: 0 pass, 1 fail, 77 skip (PostgreSQL or the postgres user missing).
set -euo pipefail

build=$(cd "${1:?usage: $0 BUILD_DIR}" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)
example=$src/docs/examples/fencing_pg.sh
sql=$src/docs/examples/fencing_pg.sql

say() { echo "fencing_pg: $*"; }
skip() { say "SKIP: $*"; exit 77; }
fail() { say "FAIL: $*"; exit 1; }

[ -x "$build/ticketingd" ] || fail "no $build/ticketingd"
[ -x "$build/ticketctl" ] || fail "no $build/ticketctl"

pgbin=${PGBIN:-/usr/lib/postgresql/15/bin}
if [ ! -x "$pgbin/initdb" ]; then
  for d in /usr/lib/postgresql/*/bin; do [ -x "$d/initdb" ] && pgbin=$d; done
fi
[ -x "$pgbin/initdb" ] && [ -x "$pgbin/pg_ctl" ] && [ -x "$pgbin/psql" ] ||
  skip "PostgreSQL server binaries not found (apt-get install postgresql)"
if [ "$(id -u)" -eq 0 ]; then
  id postgres >/dev/null 2>&1 || skip "no postgres user to run the server as"
  as_pg=(runuser -u postgres --)
else
  as_pg=()
fi

tmp=$(mktemp -d /tmp/tk-fencing-pg.XXXXXX)
tk_pid=""
pg_started=no
cleanup() {
  set +e
  if [ -n "$tk_pid" ]; then
    kill "$tk_pid" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$tk_pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$tk_pid" 2>/dev/null
  fi
  if [ "$pg_started" = yes ]; then
    "${as_pg[@]}" "$pgbin/pg_ctl" -D "$tmp/pg/data" -m immediate -w stop >/dev/null 2>&1
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

# Ports are picked below the usual ephemeral range (32768 and up), where
# outgoing connections cannot be holding them, and locked against the other
# tests (tests/support/ports.sh); a bind can still lose a race to some
# other program,
# so ticketingd is retried on other ports below.
# shellcheck source=tests/support/ports.sh
source "$src/tests/support/ports.sh"

# --- PostgreSQL: private instance, unix socket only -------------------------
chmod 711 "$tmp"
mkdir -p "$tmp/pg" "$tmp/sock"
[ ${#as_pg[@]} -eq 0 ] || chown postgres: "$tmp/pg" "$tmp/sock"
reserve_ports 1 || fail "no free port for PostgreSQL"
pg_port=$PORT
"${as_pg[@]}" "$pgbin/initdb" -D "$tmp/pg/data" -A trust -U postgres -E UTF8 --locale=C \
  --no-sync >"$tmp/initdb.log" 2>&1 || { cat "$tmp/initdb.log"; fail "initdb failed"; }
"${as_pg[@]}" "$pgbin/pg_ctl" -D "$tmp/pg/data" -l "$tmp/pg/server.log" -w -t 60 \
  -o "-k $tmp/sock -p $pg_port -c listen_addresses='' -c fsync=off" start >/dev/null 2>&1 ||
  { cat "$tmp/pg/server.log" 2>/dev/null; fail "PostgreSQL did not start"; }
pg_started=yes
export PGHOST=$tmp/sock PGPORT=$pg_port PGUSER=postgres PGDATABASE=postgres
psql=("$pgbin/psql" -X -q -v ON_ERROR_STOP=1 -tA)
[ "$("${psql[@]}" -c 'SELECT 1')" = 1 ] || fail "cannot query PostgreSQL"
say "PostgreSQL $("${psql[@]}" -c 'SHOW server_version') on $tmp/sock port $pg_port"

# --- ticketingd: standalone, loopback ----------------------------------------
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$tmp/client.secret"
export TICKETCTL=$build/ticketctl TICKETING_SECRET_FILE=$tmp/client.secret PSQL=$pgbin/psql
up=no
for attempt in 1 2 3 4 5; do
  reserve_ports 3 || fail "no free ports for ticketingd"
  tk_port=$PORT
  "$build/ticketingd" --bind 127.0.0.1 --port "$tk_port" --threads 1 \
    --client-secret-file "$tmp/client.secret" >"$tmp/ticketingd.log" 2>&1 &
  tk_pid=$!
  export TICKETING_ADDR=127.0.0.1:$tk_port
  for _ in $(seq 100); do
    kill -0 "$tk_pid" 2>/dev/null || break
    if "$TICKETCTL" ping --timeout 1s >/dev/null 2>&1; then up=yes; break; fi
    sleep 0.1
  done
  [ $up = yes ] && break
  if kill -0 "$tk_pid" 2>/dev/null; then
    cat "$tmp/ticketingd.log"
    fail "ticketingd runs but does not answer"
  fi
  wait "$tk_pid" 2>/dev/null || true
  tk_pid=""
  say "ticketingd did not start on port $tk_port (attempt $attempt): $(tail -1 "$tmp/ticketingd.log")"
done
[ $up = yes ] || { cat "$tmp/ticketingd.log"; fail "ticketingd did not start"; }
say "ticketingd on 127.0.0.1:$tk_port"

# --- checks ----------------------------------------------------------------
# Checks one run of the example from its output ($1) and the database.
# Returns 0 if every outcome is as docs/fencing.md promises, else prints
# what is wrong and returns 1.
check_run() {
  local out=$1 bad=0 a b row fence
  a=$(sed -n 's/^summary: alice_token=\([0-9]*\) .*/\1/p' "$out")
  b=$(sed -n 's/^summary: .* bob_token=\([0-9]*\) .*/\1/p' "$out")
  if [ -z "$a" ] || [ -z "$b" ]; then
    say "  no tokens in the example's output"
    return 1
  fi
  [ "$b" -gt "$a" ] || { say "  bob's token $b is not above alice's $a"; bad=1; }
  grep -q "^summary: .* bob_write=applied alice_write=stale$" "$out" ||
    { say "  the example did not report bob applied / alice stale"; bad=1; }
  row=$("${psql[@]}" -F '|' -c \
    "SELECT remaining, split_part(last_writer, '-', 1), last_token
       FROM ticketing_demo.inventory WHERE item = 'show-42'")
  [ "$row" = "39|bob|$b" ] ||
    { say "  inventory row is '$row', expected '39|bob|$b' (the stale write landed?)"; bad=1; }
  fence=$("${psql[@]}" -c "SELECT token FROM ticketing_demo.fence WHERE lock_key = 'show-42'")
  [ "$fence" = "$b" ] || { say "  fence is '$fence', expected bob's $b"; bad=1; }
  # The stale token is still refused now, and changes nothing.
  local again
  again=$("${psql[@]}" -c \
    "SELECT ticketing_demo.fenced_set_remaining('show-42', $a, 'show-42', 1, 'late')")
  row=$("${psql[@]}" -F '|' -c \
    "SELECT remaining, last_token FROM ticketing_demo.inventory WHERE item = 'show-42'")
  [ "$again" = stale ] && [ "$row" = "39|$b" ] ||
    { say "  a second stale write gave '$again', row '$row'"; bad=1; }
  return $bad
}

# Run 1: the example as documented. Everything must hold.
say "run 1: docs/examples/fencing_pg.sh"
if ! bash "$example" >"$tmp/run1.out" 2>&1; then
  sed 's/^/  | /' "$tmp/run1.out"
  fail "the example failed"
fi
sed 's/^/  | /' "$tmp/run1.out"
check_run "$tmp/run1.out" || fail "the example's outcomes are wrong"

# A fresh grant (a larger token) writes again: the fence moves on.
out=$("$TICKETCTL" acquire show-42 --owner carol --lease 5s --wait 5s --json)
c=$(sed -n 's/.*"token":\([0-9][0-9]*\).*/\1/p' <<<"$out")
[ -n "$c" ] || fail "carol could not acquire: $out"
r=$("${psql[@]}" -c \
  "SELECT ticketing_demo.fenced_set_remaining('show-42', $c, 'show-42', 38, 'carol')")
[ "$r" = applied ] || fail "carol's fresh write (token $c) gave '$r'"
[ "$("${psql[@]}" -c "SELECT token FROM ticketing_demo.fence WHERE lock_key='show-42'")" = "$c" ] ||
  fail "the fence did not move to carol's token"
"$TICKETCTL" release show-42 --owner carol --token "$c" >/dev/null || true
say "run 1: ok (fresh write applied, stale writes refused, fence follows the newest token)"

# Run 2: the same example with the fence condition deleted. The checks above
# must now fail, or they prove nothing.
sed 's/^\( *\)WHERE f\.token <= EXCLUDED\.token$/\1-- (fence check removed by the test)/' \
  "$sql" >"$tmp/unfenced.sql"
cmp -s "$sql" "$tmp/unfenced.sql" &&
  fail "could not remove the fence condition from $sql (did its text change?)"
say "run 2: the same example without the fence condition (must be caught)"
if FENCING_SQL=$tmp/unfenced.sql bash "$example" >"$tmp/run2.out" 2>&1; then
  sed 's/^/  | /' "$tmp/run2.out"
  fail "the example passed without the fence condition"
fi
sed 's/^/  | /' "$tmp/run2.out"
if check_run "$tmp/run2.out"; then
  fail "the checks passed without the fence condition: they prove nothing"
fi
say "run 2: ok (the missing check was detected)"
say "PASS"
