"""Outcomes and the exceptions they become.

Every outcome of the C library (enum tk_client_outcome) has a name here,
and every outcome that is not a success is an exception class under
ticketing.Error. Each exception carries the full Result as .result and the
outcome name as .outcome.
"""

ACQUIRED = "ACQUIRED"
TIMEOUT = "TIMEOUT"
BUSY = "BUSY"
INVALID = "INVALID"
UNAVAILABLE = "UNAVAILABLE"
INDETERMINATE = "INDETERMINATE"
CANCELLED = "CANCELLED"
RELEASED = "RELEASED"
NOT_HELD = "NOT_HELD"
UNCONFIRMED = "UNCONFIRMED"
QUEUE_FULL = "QUEUE_FULL"
ANSWERED = "ANSWERED"
WRONG_GROUP = "WRONG_GROUP"

OUTCOMES = (ACQUIRED, TIMEOUT, BUSY, INVALID, UNAVAILABLE, INDETERMINATE, CANCELLED,
            RELEASED, NOT_HELD, UNCONFIRMED, QUEUE_FULL, ANSWERED, WRONG_GROUP)


class Result:
    """What one request came to (the fields of struct tk_client_result).

    Times are time.monotonic() seconds; sent is None if no byte was written.
    WRONG_GROUP (the last answer was W) carries slot, the key's slot, and
    ring_version, the version of the ring that group judged by (0: none). A
    ring answer (ANSWERED to ring_result()) carries ring_version and body.
    """
    __slots__ = ("outcome", "key", "token", "lease_deadline", "sent", "reason", "held",
                 "owner", "waiters", "resent", "rtt", "slot", "ring_version", "body")

    def __init__(self, outcome, key="", token=0, lease_deadline=None, sent=None, reason="",
                 held=False, owner=None, waiters=0, resent=False, rtt=None, slot=0,
                 ring_version=0, body=""):
        self.outcome = outcome
        self.key = key
        self.token = token
        self.lease_deadline = lease_deadline
        self.sent = sent
        self.reason = reason
        self.held = held
        self.owner = owner
        self.waiters = waiters
        self.resent = resent
        self.rtt = rtt
        self.slot = slot
        self.ring_version = ring_version
        self.body = body

    def __repr__(self):
        return f"Result({self.outcome}, key={self.key!r}, token={self.token}, reason={self.reason!r})"


class Error(Exception):
    """Base of every Ticketing exception."""
    outcome = None

    def __init__(self, message, result=None):
        super().__init__(message)
        self.result = result

    @property
    def reason(self):
        """The client's reason word for the outcome, "" when it names none."""
        return self.result.reason if self.result else ""


class ConfigError(Error, ValueError):
    """The client cannot be made: bad addresses, owner, numbers, secret, TLS files."""


class Busy(Error):
    """B: the key was held and wait_ms was 0, or a server bound was reached. Not acquired."""
    outcome = BUSY


class Timeout(Error):
    """T: the turn did not come within wait_ms. Not acquired."""
    outcome = TIMEOUT


class Invalid(Error):
    """E <id> <reason>, or refused locally: a field broke the limits. Nothing changed.
    .reason names it ("key", "owner", "lease", "wait", "token", ...)."""
    outcome = INVALID


class Unavailable(Error):
    """Acquire: not one byte was written within its budget, definitely not
    acquired. Query, ping: no answer within request_timeout_ms."""
    outcome = UNAVAILABLE


class Indeterminate(Error):
    """The acquire was written and no confirmed answer came. The key may be
    held by you: do NOT enter. A late grant is released by the client.
    .reason "lease": a grant did come, but only after the lease counted from
    the first write had run out; the client releases it at once."""
    outcome = INDETERMINATE


class Cancelled(Error):
    """The request was cancelled (close(), or an asyncio cancellation) before
    its outcome. Treat as not acquired; a late grant is released."""
    outcome = CANCELLED


class NotHeld(Error):
    """N: nothing is held under exactly (key, owner, token). If .resent, an
    earlier attempt of this release may be what released it."""
    outcome = NOT_HELD

    @property
    def resent(self):
        return bool(self.result and self.result.resent)


class Unconfirmed(Error):
    """No R or N before the release's absolute 5 s deadline: never assume
    success; the lease frees the key."""
    outcome = UNCONFIRMED


class QueueFull(Error):
    """The release queue is full; nothing was enqueued. The lease frees the key."""
    outcome = QUEUE_FULL


class WrongGroup(Error):
    """W (SPEC 15): the groups the client routed the request to kept
    answering that they do not serve the key's slot until the request's
    budget ended, or the client's ring names no group for the slot (it has
    no ring, or no range covers the slot). Definite: nothing was done (a
    release: nothing was released). .slot is the key's slot, .ring_version
    the version of the ring the last W was judged by (0: none)."""
    outcome = WRONG_GROUP

    @property
    def slot(self):
        return self.result.slot if self.result else 0

    @property
    def ring_version(self):
        return self.result.ring_version if self.result else 0


BY_OUTCOME = {c.outcome: c for c in (Busy, Timeout, Invalid, Unavailable, Indeterminate,
                                      Cancelled, NotHeld, Unconfirmed, QueueFull, WrongGroup)}


def raise_for(res, what):
    """Raises the exception of a non-success Result."""
    cls = BY_OUTCOME[res.outcome]
    msg = f"{what} {res.key!r}: {res.outcome}" if res.key else f"{what}: {res.outcome}"
    if res.reason:
        msg += f" ({res.reason})"
    if res.outcome == WRONG_GROUP:
        msg += f" (slot {res.slot}, ring version {res.ring_version})"
    raise cls(msg, res)
