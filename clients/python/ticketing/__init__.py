"""Ticketing: the official Python client (standard library only).

    import ticketing
    c = ticketing.Client(["10.0.0.1:7400", "10.0.0.2:7400"],
                         secret_file="client.secret", owner="web-7")
    with c.lock("show-42", lease_ms=30000, wait_ms=5000) as g:
        write_with_fence(g.token)
    c.close()

ticketing.Client is thread-safe and blocking; ticketing.aio.Client offers
the same calls as coroutines. The rules (outcomes, Indeterminate, retries,
the release queue) are those of the C library, docs/client.md.

Groups (SPEC 15): ticketing.slot(key) is a key's slot. A Client is given
one group's addresses (the seed); on a W answer it fetches the ring from the
group that answered and from then on sends each key's requests to the group
the ring gives its slot to, resending after W within the request's budget
(docs/client.md, "Groups and the ring"). WrongGroup (definite, nothing done,
.slot and .ring_version) is the outcome only when that budget ends or the
ring names no group for the slot. Client.ring() reads the seed group's ring
(a Ring: version and body); stats() gives ring_version and rerouted.
"""
from .client import Client, Grant, Query, Ring
from ._proto import SLOTS, slot
from .errors import (ACQUIRED, ANSWERED, BUSY, CANCELLED, INDETERMINATE, INVALID, NOT_HELD,
                     OUTCOMES, QUEUE_FULL, RELEASED, TIMEOUT, UNAVAILABLE, UNCONFIRMED,
                     WRONG_GROUP, Busy, Cancelled, ConfigError, Error, Indeterminate, Invalid,
                     NotHeld, QueueFull, Result, Timeout, Unavailable, Unconfirmed, WrongGroup)
from . import aio  # noqa: E402  (ticketing.aio.Client)

__version__ = "0.1.0"

__all__ = ["Client", "Grant", "Query", "Ring", "Result", "Error", "ConfigError", "Busy",
           "Timeout", "Invalid", "Unavailable", "Indeterminate", "Cancelled", "NotHeld",
           "Unconfirmed", "QueueFull", "WrongGroup", "OUTCOMES", "SLOTS", "slot", "aio"]
