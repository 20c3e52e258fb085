"""first_lock.py: acquire, work under the lock, release."""
import os
import sys

import ticketing

c = ticketing.Client(os.environ["TICKETING_ADDR"],  # "host:port,host:port"
                     secret_file=os.environ["TICKETING_SECRET_FILE"])
try:
    # Lease 30 s (the safety net if we die), wait at most 5 s for our turn.
    g = c.acquire("inventory/sku-1", lease_ms=30000, wait_ms=5000)
except ticketing.Indeterminate:
    # Maybe acquired, maybe not: never enter. The client releases a late
    # grant by itself; otherwise the lease frees the key.
    sys.exit("not acquired: indeterminate")
except ticketing.Error as e:  # Busy, Timeout, Unavailable: not acquired
    sys.exit(f"not acquired: {e}")

# The critical section: finish before g.lease_deadline (time.monotonic())
# and pass g.token to every write it protects.
print(f"holding {g.key} with token {g.token}, {g.remaining() * 1000:.0f} ms of lease left")
try:
    c.release(g)
except ticketing.Error as e:  # NotHeld, Unconfirmed, QueueFull
    print(f"release: {e.outcome}: the lease will free the key", file=sys.stderr)

# The same with a context manager: released at the end of the block, also
# when the block raises.
with c.lock("inventory/sku-1", lease_ms=30000, wait_ms=5000) as g:
    print(f"holding {g.key} again with token {g.token}")
c.close()
