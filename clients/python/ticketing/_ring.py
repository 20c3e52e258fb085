"""Routing by key across groups (docs/client.md, "Groups and the ring";
docs/protocol.md section 10): the ring's body parsed and checked, the group
of a slot, the group that is the seed, and the arithmetic of resending after
a W (the pause, the budget).

Pure: no sockets, no clocks, no threads. The engine (_core.py) keeps one
Router and asks it where each request goes.
"""
import bisect

from . import _proto as P

GROUPS_MAX = 64  # a ring names at most this many groups
RANGES_MAX = 1024
NAME_MAX = 64
GROUP_ADDRS_MAX = 5  # client addresses of one group in a ring
GROUP_ADDR_MAX = 128  # bytes of one of them
PAUSE_FIRST = 0.020  # s: the first pause before sending to the group that answered W
PAUSE_MAX = 0.200


def name_ok(name: str) -> bool:
    """A group name: 1-64 bytes 0x21-0x7E other than ";" and "@"."""
    return (1 <= len(name) <= NAME_MAX and name.isascii() and P.visible(name.encode())
            and ";" not in name and "@" not in name)


def _slot_number(text, what):
    if not text.isdigit() or not text.isascii() or (len(text) > 1 and text[0] == "0"):
        raise ValueError(f"{what} slot {text[:8]!r} is not a number (decimal, no leading zeros)")
    if len(text) > 5 or int(text) >= P.SLOTS:
        raise ValueError(f"{what} slot {text[:8]} is out of range (0-{P.SLOTS - 1})")
    return int(text)


def _range(text):
    """"<first>-<last>=<group>@<addr>[,<addr>...]" -> (first, last, name, addrs)."""
    dash = text.find("-")
    eq = text.find("=", dash + 1) if dash >= 0 else -1
    at = text.find("@", eq + 1) if eq >= 0 else -1
    if at < 0:
        raise ValueError(f"range {text[:40]!r} is not <first>-<last>=<group>@<addrs>")
    first = _slot_number(text[:dash], "first")
    last = _slot_number(text[dash + 1:eq], "last")
    if first > last:
        raise ValueError(f"range {first}-{last}: first slot after last")
    name = text[eq + 1:at]
    if not name_ok(name):
        raise ValueError(f"group name {name[:NAME_MAX]!r} is not valid")
    addrs = text[at + 1:].split(",")
    if not 1 <= len(addrs) <= GROUP_ADDRS_MAX:
        raise ValueError(f"group {name}: 1-{GROUP_ADDRS_MAX} addresses, not {len(addrs)}")
    for a in addrs:
        if len(a) > GROUP_ADDR_MAX:
            raise ValueError(f"group {name}: address {a[:40]!r}... longer than "
                             f"{GROUP_ADDR_MAX} bytes")
        P.parse_addr(a)  # ValueError names the address
    return first, last, name, tuple(addrs)


def parse_ring(body: str):
    """A ring's body ("-", or ranges joined by ";" in increasing order) ->
    (ranges, groups): ranges a list of (first, last, name), groups a dict
    name -> tuple of addresses, in the order the ring first names them.
    ValueError with a sentence if it is not a valid ring (overlapping or
    unordered ranges, a group given two address lists, more than 1,024
    ranges or 64 groups, a bad slot, name or address)."""
    if not isinstance(body, str) or not body.isascii():
        raise ValueError("a ring body is ASCII text")
    if body == "-":
        return [], {}
    items = body.split(";")
    if len(items) > RANGES_MAX:
        raise ValueError(f"more than {RANGES_MAX} ranges")
    ranges, groups = [], {}
    for item in items:
        if item == "-":
            raise ValueError("'-' (no ranges) must be the whole body")
        first, last, name, addrs = _range(item)
        if ranges and first <= ranges[-1][1]:
            raise ValueError(f"slots {first}-{last} do not come after "
                             f"{ranges[-1][0]}-{ranges[-1][1]}")
        known = groups.get(name)
        if known is None:
            if len(groups) == GROUPS_MAX:
                raise ValueError(f"more than {GROUPS_MAX} groups")
            groups[name] = addrs
        elif known != addrs:
            raise ValueError(f"group {name!r} is given two address lists")
        ranges.append((first, last, name))
    return ranges, groups


def addr_key(addr: str):
    """What makes two "host:port" texts the same address here: the host
    (case-insensitive, IPv6 without brackets) and the port."""
    host, port, _ = P.parse_addr(addr)
    return host.lower(), port


def seed_name(groups, configured):
    """The name of the first group (in ring order) one of whose addresses is
    one of the configured ones: the seed group itself. None if no group is."""
    mine = {addr_key(a) for a in configured}
    for name, addrs in groups.items():
        if any(addr_key(a) in mine for a in addrs):
            return name
    return None


class Router:
    """The ring a client routes by. version is 0 until a ring is taken;
    offer() takes only a newer one."""

    def __init__(self, configured):
        self.configured = tuple(configured)
        self.version = 0
        self.body = "-"
        self.ranges = []
        self.firsts = []
        self.groups = {}
        self.seed = None  # the name of the seed's group in the ring, if any

    def offer(self, version, body):
        """Takes the ring (version, body) if it is newer than the one held:
        True if taken, False if not newer (kept as it was). ValueError if a
        newer ring is not valid (nothing changes then either)."""
        if version <= self.version:
            return False
        ranges, groups = parse_ring(body)
        self.version, self.body = version, body
        self.ranges, self.groups = ranges, groups
        self.firsts = [r[0] for r in ranges]
        self.seed = seed_name(groups, self.configured)
        return True

    def group_of(self, slot):
        """The name of the group the ring gives slot to, or None (no ring,
        or no range covers it)."""
        i = bisect.bisect_right(self.firsts, slot) - 1
        if i < 0:
            return None
        first, last, name = self.ranges[i]
        return name if first <= slot <= last else None

    def is_seed(self, name):
        return name is not None and name == self.seed


def budget(type_, wait_ms, send_budget_min_ms, request_timeout, release_deadline):
    """Seconds a request may take from its call, resends after W included:
    an acquire max(wait_ms, send_budget_min_ms), a release its absolute
    deadline, a query (ping, ring) request_timeout."""
    if type_ == "A":
        return max(wait_ms, send_budget_min_ms) / 1000
    if type_ == "R":
        return release_deadline
    return request_timeout


def wait_left_ms(wait_ms, call, now):
    """The wait an acquire sends at now: what is left of wait_ms since the
    call (0 once it is spent)."""
    spent_ms = int((now - call) * 1000) if now > call else 0
    return 0 if spent_ms >= wait_ms else wait_ms - spent_ms


def plan_resend(now, end, same_group, pause):
    """When a request answered W goes again: (at, next_pause). at is now
    when the ring names another group than the one that answered, now +
    pause when it names the same one (pause 0: the first, PAUSE_FIRST;
    each next one doubles, up to PAUSE_MAX), and None when that is not
    before end, the end of the request's budget (it goes no more)."""
    if same_group:
        delay = pause if pause > 0 else PAUSE_FIRST
        nxt = min(delay * 2, PAUSE_MAX)
    else:
        delay, nxt = 0.0, 0.0
    at = now + delay
    return (at if at < end else None), nxt
