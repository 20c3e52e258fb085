"""The client line protocol of Ticketing (docs/protocol.md): the handshake
proofs, request formatting, response parsing and the field limits.

Pure functions: no sockets, no clocks, no threads.
"""
import hashlib
import hmac
import os
import re
import secrets
import socket

KEY_MAX = 250
OWNER_MAX = 64
LEASE_MS_MIN = 1000
LEASE_MS_MAX = 250000
WAIT_MS_MAX = 250000
U64_MAX = (1 << 64) - 1
LINE_MAX = 1024  # bytes, the "\n" included
SECRET_MIN = 16
SECRET_MAX = 4096
ADDRS_MAX = 8
RING_PARTS_MAX = 1024  # an S answer in parts: each part holds >= 1 of <= 1,024 ranges

_VISIBLE = re.compile(rb"[\x21-\x7e]+\Z")
_DIGITS = re.compile(rb"(0|[1-9][0-9]*)\Z")
_HEX64 = re.compile(rb"[0-9a-f]{64}\Z")


SLOTS = 16384  # SPEC 15: keys map to this many slots
_FNV_BASIS = 0xcbf29ce484222325
_FNV_PRIME = 0x100000001b3
_U64 = (1 << 64) - 1


def slot(key) -> int:
    """The slot of a key (a str or bytes): FNV-1a 64 of its bytes modulo
    SLOTS, the same number every Ticketing client computes."""
    b = key.encode() if isinstance(key, str) else bytes(key)
    h = _FNV_BASIS
    for byte in b:
        h = ((h ^ byte) * _FNV_PRIME) & _U64
    return h % SLOTS


def visible(b: bytes) -> bool:
    """Printable ASCII without space (0x21-0x7E), at least one byte."""
    return bool(_VISIBLE.match(b))


def key_ok(key: bytes) -> bool:
    return 1 <= len(key) <= KEY_MAX and visible(key)


def owner_ok(owner: bytes) -> bool:
    return 1 <= len(owner) <= OWNER_MAX and visible(owner)


def proof(secret: bytes, side: str, snonce: str, cnonce: str) -> str:
    """HMAC-SHA256(secret, "ticketing/1 <side> <snonce> <cnonce>") in hex."""
    msg = f"ticketing/1 {side} {snonce} {cnonce}".encode()
    return hmac.new(secret, msg, hashlib.sha256).hexdigest()


def new_nonce() -> str:
    return secrets.token_hex(32)


def load_secret(path) -> bytes:
    """The file's bytes less one trailing "\\n" or "\\r\\n"; 16-4096 bytes."""
    with open(path, "rb") as f:
        data = f.read(SECRET_MAX + 3)
    if data.endswith(b"\r\n"):
        data = data[:-2]
    elif data.endswith(b"\n"):
        data = data[:-1]
    if not SECRET_MIN <= len(data) <= SECRET_MAX:
        raise ValueError(f"{path}: the secret must be {SECRET_MIN}-{SECRET_MAX} bytes "
                         f"(after one trailing newline), not {len(data)}")
    return data


def default_owner() -> str:
    """"<host>-<pid>-<12 random hex>", as libticketing makes it."""
    tail = f"-{os.getpid()}-{secrets.token_hex(6)}"
    host = "".join(ch if "\x21" <= ch <= "\x7e" else "_" for ch in socket.gethostname())
    return (host or "host")[:OWNER_MAX - len(tail)] + tail


def parse_addr(text: str):
    """"host:port" or "[v6]:port" -> (host, port, numeric). ValueError if bad."""
    if text.startswith("["):
        end = text.find("]")
        if end < 0 or text[end + 1:end + 2] != ":":
            raise ValueError(f"bad address {text!r}")
        host, port = text[1:end], text[end + 2:]
    else:
        host, sep, port = text.rpartition(":")
        if not sep or ":" in host:
            raise ValueError(f"bad address {text!r} (host:port; [v6]:port for IPv6)")
    if not host or len(host) > 255 or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"bad address {text!r}")
    numeric = True
    try:
        socket.inet_pton(socket.AF_INET6 if ":" in host else socket.AF_INET, host)
    except OSError:
        numeric = False
    return host, int(port), numeric


def fmt_acquire(rid, key: bytes, owner: bytes, lease_ms, wait_ms) -> bytes:
    return b"A %d %s %s %d %d\n" % (rid, key, owner, lease_ms, wait_ms)


def fmt_release(rid, key: bytes, owner: bytes, token) -> bytes:
    return b"R %d %s %s %d\n" % (rid, key, owner, token)


def fmt_query(rid, key: bytes) -> bytes:
    return b"Q %d %s\n" % (rid, key)


def fmt_ping(rid) -> bytes:
    return b"P %d\n" % rid


def fmt_ring(rid) -> bytes:
    return b"S %d\n" % rid


def _u64(b: bytes):
    if len(b) > 20 or not _DIGITS.match(b):
        return None
    v = int(b)
    return v if v <= U64_MAX else None


def parse_banner(line: bytes):
    """"TICKETING/1 <snonce>" -> snonce (str), or None."""
    w = line.split(b" ")
    if len(w) != 2 or w[0] != b"TICKETING/1" or not _HEX64.match(w[1]):
        return None
    return w[1].decode()


def parse_ok(line: bytes):
    """"OK <sproof> <node-id> <domain-id>" -> sproof (str), or None."""
    w = line.split(b" ")
    if len(w) != 4 or w[0] != b"OK" or not _HEX64.match(w[1]):
        return None
    if not re.match(rb"[0-9a-f]{16}\Z", w[2]) or not re.match(rb"[0-9a-f]{32}\Z", w[3]):
        return None
    return w[1].decode()


class Response:
    __slots__ = ("type", "id", "token", "owner", "waiters", "text", "slot", "version", "part",
                 "parts")

    def __init__(self, type_, id_=None, token=0, owner=None, waiters=0, text=None, slot=0,
                 version=0, part=1, parts=1):
        self.type = type_
        self.id = id_  # None: no id ("E -", "M")
        self.token = token
        self.owner = owner  # Q: None when the key is free
        self.waiters = waiters
        self.text = text  # E: the reason; M: the address (None for "M -"); S: the body (part)
        self.slot = slot  # W: the key's slot
        self.version = version  # W: the ring version judged by; S: the ring's version
        self.part = part  # S: this line is part k of n (1 of 1: the one-line form)
        self.parts = parts


def _ring_part(b: bytes):
    """"<k>/<n>" of an S answer in parts -> (k, n), or None: 1 <= k <= n,
    2 <= n <= RING_PARTS_MAX, both numbers as SPEC 5 writes them."""
    k, sep, n = b.partition(b"/")
    if not sep:
        return None
    k, n = _u64(k), _u64(n)
    if k is None or n is None or not 1 <= k <= n or not 2 <= n <= RING_PARTS_MAX:
        return None
    return k, n


def parse_response(line: bytes):
    """One response line (without "\\n"; a "\\r" before it is dropped) ->
    Response, or None if malformed."""
    if line.endswith(b"\r"):
        line = line[:-1]
    w = line.split(b" ")
    if len(w) < 2 or len(w[0]) != 1 or any(not x for x in w):
        return None
    t = w[0].decode("ascii", "replace")
    if t == "M":
        if len(w) != 2:
            return None
        if w[1] == b"-":
            return Response("M")
        try:
            parse_addr(w[1].decode("ascii"))
        except (ValueError, UnicodeDecodeError):
            return None
        return Response("M", text=w[1].decode("ascii"))
    if t == "E" and w[1] == b"-":
        rid = None
    else:
        rid = _u64(w[1])
        if rid is None:
            return None
    if t in "TBRNP":
        return Response(t, rid) if len(w) == 2 and rid is not None else None
    if t == "G":
        tok = _u64(w[2]) if len(w) == 3 else None
        return Response(t, rid, token=tok) if tok else None
    if t == "Q":
        if len(w) != 5 or not visible(w[2]):
            return None
        tok, n = _u64(w[3]), _u64(w[4])
        if tok is None or n is None:
            return None
        if tok == 0:  # a free key is always "- 0 0"
            return Response(t, rid, 0, None, n) if w[2] == b"-" else None
        return Response(t, rid, tok, w[2].decode("ascii"), n)
    if t == "W":  # W <id> <slot> <ring_version>
        if len(w) != 4:
            return None
        s, v = _u64(w[2]), _u64(w[3])
        if s is None or s >= SLOTS or v is None:
            return None
        return Response(t, rid, slot=s, version=v)
    if t == "S":  # S <id> <version> <body>, or S <id> <version> <k>/<n> <part>
        if len(w) not in (4, 5) or not visible(w[-1]):
            return None
        v = _u64(w[2])
        if v is None:
            return None
        body = w[-1].decode("ascii")
        if len(w) == 4:
            if v == 0 and body != "-":  # no ring (version 0) has no ranges
                return None
            return Response(t, rid, text=body, version=v)
        kn = _ring_part(w[3])
        # Parts only for a ring too long for one line: ranges, and a version.
        if kn is None or v == 0 or body == "-":
            return None
        return Response(t, rid, text=body, version=v, part=kn[0], parts=kn[1])
    if t == "E":
        if len(w) != 3 or not visible(w[2]):
            return None
        return Response(t, rid, text=w[2].decode("ascii"))
    return None
