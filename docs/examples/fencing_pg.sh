#!/usr/bin/env bash
# The stale-holder story, for real: Ticketing tokens fenced in PostgreSQL
# (docs/fencing.md).
#
#   alice  takes the lock of show-42 (lease 1 s), reads 40 seats left and
#          wants 2 of them; then she stalls past her lease (think of a long
#          GC pause) without knowing it.
#   bob    queues for the same lock, gets it the moment alice's lease runs
#          out, reads 40, sells 1 seat and writes 39: applied.
#   alice  wakes up and writes the 38 she computed from her stale read,
#          with her old token: rejected, nothing changes. Without fencing,
#          her write would silently undo bob's sale.
#
# Needs: ticketctl and a running Ticketing node or cluster
#   TICKETING_ADDR         host:port[,host:port...]
#   TICKETING_SECRET_FILE  the client secret file
#   TICKETCTL              ticketctl binary (default: ticketctl on PATH)
# and a PostgreSQL database, named by the usual libpq variables (PGHOST,
# PGPORT, PGUSER, PGDATABASE, ...); PSQL names the psql binary (default
# psql). The database gets a schema ticketing_demo (see fencing_pg.sql,
# or FENCING_SQL to use another file).
#
# Exit status: 0 if the fresh write was applied and the stale one refused,
# 1 otherwise (or if a step failed).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
ctl=${TICKETCTL:-ticketctl}
sql=${FENCING_SQL:-$here/fencing_pg.sql}
psql=("${PSQL:-psql}" -X -q -v ON_ERROR_STOP=1)
key=show-42   # the Ticketing lock key
item=show-42  # the inventory row it protects
run="$$-$RANDOM"

die() { echo "fencing_pg: $*" >&2; exit 1; }

# Prints the token of a ticketctl --json acquire answer.
token_of() { sed -n 's/.*"token":\([0-9][0-9]*\).*/\1/p'; }

remaining() {
  "${psql[@]}" -tA -c "SELECT remaining FROM ticketing_demo.inventory WHERE item = '$item'"
}

# The protected write: token, new value, writer. Prints applied, stale or
# no_such_item. psql's :'var' quotes each value as an SQL literal.
fenced_write() {
  "${psql[@]}" -tA -v key="$key" -v token="$1" -v item="$item" -v remaining="$2" \
    -v writer="$3" <<'SQL'
SELECT ticketing_demo.fenced_set_remaining(:'key', :'token', :'item', :'remaining', :'writer');
SQL
}

"${psql[@]}" -f "$sql" >/dev/null || die "cannot load $sql"
echo "db:    ticketing_demo.inventory: $item has $(remaining) seats left"

alice="alice-$run"
bob="bob-$run"

# 1. alice gets the lock, reads, decides, ... and stalls.
out=$("$ctl" acquire "$key" --owner "$alice" --lease 1s --wait 5s --json) ||
  die "alice could not acquire $key: $out"
alice_token=$(token_of <<<"$out")
alice_read=$(remaining)
alice_value=$((alice_read - 2))
echo "alice: acquired $key with token $alice_token (lease 1s)"
echo "alice: reads $alice_read seats left, will buy 2 and write $alice_value"
echo "alice: ...stalls past the end of her lease, and does not know it"

# 2. bob queues; Ticketing hands him the lock when alice's lease runs out.
start=$(date +%s%N)
out=$("$ctl" acquire "$key" --owner "$bob" --lease 30s --wait 10s --json) ||
  die "bob could not acquire $key: $out"
bob_token=$(token_of <<<"$out")
waited=$((($(date +%s%N) - start) / 1000000))
echo "bob:   acquired $key with token $bob_token after waiting ${waited} ms"
bob_read=$(remaining)
bob_value=$((bob_read - 1))
bob_result=$(fenced_write "$bob_token" "$bob_value" "$bob")
echo "bob:   reads $bob_read, buys 1, writes $bob_value with token $bob_token: $bob_result"

# 3. alice wakes up and finishes what she started, with her old token.
alice_result=$(fenced_write "$alice_token" "$alice_value" "$alice")
echo "alice: wakes up, writes $alice_value with token $alice_token: $alice_result"

# 4. bob is done.
"$ctl" release "$key" --owner "$bob" --token "$bob_token" >/dev/null ||
  echo "bob:   release was not confirmed (the lease will end it)"

row=$("${psql[@]}" -tA -F ' ' -c \
  "SELECT remaining, last_writer, last_token FROM ticketing_demo.inventory WHERE item = '$item'")
fence=$("${psql[@]}" -tA -c "SELECT token FROM ticketing_demo.fence WHERE lock_key = '$key'")
echo "db:    $item: remaining, last writer, last token = $row; fence($key) = $fence"
echo "summary: alice_token=$alice_token bob_token=$bob_token bob_write=$bob_result" \
  "alice_write=$alice_result"

if [ "$bob_result" = applied ] && [ "$alice_result" = stale ] &&
  [ "$row" = "$bob_value $bob $bob_token" ] && [ "$fence" = "$bob_token" ]; then
  echo "ok:    the stale write was refused and changed nothing"
else
  die "FENCING FAILED: expected bob's write applied and alice's refused"
fi
