"""fencing_pg.py: Ticketing tokens fenced in PostgreSQL, the stale-holder story.

  alice  takes the lock of show-42 with a 1 s lease, reads 40 seats left and
         wants 2; then she stalls past her lease without knowing it.
  bob    queues for the same lock, gets it when alice's lease runs out,
         sells 1 seat and writes 39: applied.
  alice  wakes up and writes the 38 she computed, with her old token:
         refused, nothing changes.

Python's standard library has no PostgreSQL driver, so this example runs
psql through subprocess (psql's :'var' quoting makes each value an SQL
literal). In an application, use your driver and the same SQL. The schema
and the fenced write are docs/examples/fencing_pg.sql (or FENCING_SQL).

Needs TICKETING_ADDR, TICKETING_SECRET_FILE, the libpq variables (PGHOST,
PGPORT, PGUSER, PGDATABASE, ...) and PSQL (default: psql). Exit status 0 if
the fresh write was applied and the stale one refused.
"""
import os
import subprocess
import sys
import time

import ticketing

HERE = os.path.dirname(os.path.abspath(__file__))
SQL = os.environ.get("FENCING_SQL") or os.path.join(HERE, "..", "..", "..", "docs", "examples",
                                                     "fencing_pg.sql")
PSQL = [os.environ.get("PSQL", "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-tA"]
KEY = ITEM = "show-42"


def psql(stdin, **vars_):
    args = PSQL + [a for k, v in vars_.items() for a in ("-v", f"{k}={v}")]
    return subprocess.run(args, input=stdin, capture_output=True, text=True,
                          check=True).stdout.strip()


def remaining():
    return int(psql("SELECT remaining FROM ticketing_demo.inventory WHERE item = :'item'",
                    item=ITEM))


def fenced_write(token, value, writer):
    """The protected write: applied, stale or no_such_item."""
    return psql("SELECT ticketing_demo.fenced_set_remaining"
                "(:'key', :'token', :'item', :'remaining', :'writer')",
                key=KEY, token=token, item=ITEM, remaining=value, writer=writer)


def client(owner):
    return ticketing.Client(os.environ["TICKETING_ADDR"],
                            secret_file=os.environ["TICKETING_SECRET_FILE"], owner=owner)


subprocess.run(PSQL + ["-f", SQL], check=True, capture_output=True)
print(f"db:    {ITEM} has {remaining()} seats left")
run = f"{os.getpid()}"
alice, bob = client(f"alice-{run}"), client(f"bob-{run}")

a = alice.acquire(KEY, lease_ms=1000, wait_ms=5000)
alice_value = remaining() - 2
print(f"alice: token {a.token} (lease 1 s), will write {alice_value}, ...stalls")

t0 = time.monotonic()
b = bob.acquire(KEY, lease_ms=30000, wait_ms=10000)  # granted when alice's lease ends
bob_value = remaining() - 1
bob_result = fenced_write(b.token, bob_value, bob.owner)
print(f"bob:   token {b.token} after {time.monotonic() - t0:.1f} s, writes {bob_value}: "
      f"{bob_result}")

alice_result = fenced_write(a.token, alice_value, alice.owner)  # she wakes up, stale
print(f"alice: writes {alice_value} with token {a.token}: {alice_result}")
try:
    alice.release(a)
except ticketing.NotHeld:
    print("alice: release: not held (her lease had run out)")
bob.release(b)
final = remaining()
print(f"db:    {ITEM} has {final} seats left")
alice.close()
bob.close()
ok = bob_result == "applied" and alice_result == "stale" and final == bob_value
sys.exit(0 if ok else 1)
