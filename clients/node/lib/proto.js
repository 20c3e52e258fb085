// The client side of the Ticketing line protocol (docs/protocol.md): field
// limits, request lines, response parsing and the handshake proofs. Pure
// functions: no sockets, no clocks.

import { createHmac, randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { isIP } from 'node:net';

export const KEY_MAX = 250;
export const OWNER_MAX = 64;
export const LEASE_MS_MIN = 1000;
export const LEASE_MS_MAX = 250000;
export const WAIT_MS_MAX = 250000;
export const U64_MAX = (1n << 64n) - 1n;
export const LINE_MAX = 1024; // bytes, the "\n" included
export const SECRET_MIN = 16;
export const SECRET_MAX = 4096;
export const ADDRS_MAX = 8;
export const SLOTS = 16384; // the slots of the groups-and-slots section
// The most lines of one S answer: each part holds at least one whole range,
// and a ring has at most 1,024 ranges.
export const RING_PARTS_MAX = 1024;

const VISIBLE = /^[\x21-\x7e]+$/;
const DIGITS = /^(0|[1-9][0-9]*)$/;
const HEX64 = /^[0-9a-f]{64}$/;
const HEX32 = /^[0-9a-f]{32}$/;
const HEX16 = /^[0-9a-f]{16}$/;

/** Printable ASCII without space (0x21-0x7E), at least one byte. */
export function visible(s) {
  return typeof s === 'string' && VISIBLE.test(s);
}

export function keyOk(k) {
  return visible(k) && k.length <= KEY_MAX;
}

export function ownerOk(o) {
  return visible(o) && o.length <= OWNER_MAX;
}

/** A decimal u64 as the server writes it (no sign, no leading zero), or null. */
export function parseU64(s) {
  if (s.length === 0 || s.length > 20 || !DIGITS.test(s)) return null;
  const v = BigInt(s);
  return v <= U64_MAX ? v : null;
}

/** A token as the caller gives it (bigint, safe integer, or decimal string),
 * as a bigint in 1..2^64-1, or null. */
export function tokenOf(t) {
  let v = null;
  if (typeof t === 'bigint') v = t;
  else if (typeof t === 'number' && Number.isSafeInteger(t)) v = BigInt(t);
  else if (typeof t === 'string') v = parseU64(t);
  return v !== null && v >= 1n && v <= U64_MAX ? v : null;
}

const FNV64_OFFSET = 0xcbf29ce484222325n;
const FNV64_PRIME = 0x100000001b3n;

/** The slot of a key (groups and slots): FNV-1a 64 of its bytes as they are
 * sent, modulo SLOTS. Part of the protocol: every client computes the same. */
export function slotOf(key) {
  let h = FNV64_OFFSET;
  for (const b of Buffer.from(key)) h = BigInt.asUintN(64, (h ^ BigInt(b)) * FNV64_PRIME);
  return Number(h % BigInt(SLOTS));
}

/** HMAC-SHA256(secret, "ticketing/1 <side> <snonce> <cnonce>") in lowercase hex. */
export function proof(secret, side, snonce, cnonce) {
  return createHmac('sha256', secret).update(`ticketing/1 ${side} ${snonce} ${cnonce}`).digest('hex');
}

export function newNonce() {
  return randomBytes(32).toString('hex');
}

/** The file's bytes less one trailing "\n" or "\r\n". */
export function loadSecret(path) {
  let b = readFileSync(path);
  if (b.length >= 2 && b[b.length - 2] === 0x0d && b[b.length - 1] === 0x0a) b = b.subarray(0, b.length - 2);
  else if (b.length >= 1 && b[b.length - 1] === 0x0a) b = b.subarray(0, b.length - 1);
  return b;
}

/** "<host>-<pid>-<12 random hex>", as libticketing makes it. */
export function defaultOwner() {
  const tail = `-${process.pid}-${randomBytes(6).toString('hex')}`;
  let host = '';
  for (const ch of hostname()) host += ch >= '\x21' && ch <= '\x7e' ? ch : '_';
  return (host || 'host').slice(0, 32) + tail;
}

/** "host:port" or "[v6]:port" -> {host, port}; throws on anything else. */
export function parseAddr(text) {
  let host, port;
  if (text.startsWith('[')) {
    const end = text.indexOf(']');
    if (end < 0 || text[end + 1] !== ':') throw new Error(`bad address ${JSON.stringify(text)}`);
    host = text.slice(1, end);
    port = text.slice(end + 2);
    if (isIP(host) !== 6) throw new Error(`bad address ${JSON.stringify(text)} (not an IPv6 literal)`);
  } else {
    const c = text.lastIndexOf(':');
    if (c < 0 || text.indexOf(':') !== c) {
      throw new Error(`bad address ${JSON.stringify(text)} (host:port; [v6]:port for IPv6)`);
    }
    host = text.slice(0, c);
    port = text.slice(c + 1);
  }
  const p = /^[0-9]{1,5}$/.test(port) ? Number(port) : 0;
  if (!visible(host) || host.length > 255 || p < 1 || p > 65535) {
    throw new Error(`bad address ${JSON.stringify(text)}`);
  }
  return { host, port: p };
}

export const fmtAcquire = (id, key, owner, leaseMs, waitMs) => `A ${id} ${key} ${owner} ${leaseMs} ${waitMs}\n`;
export const fmtRelease = (id, key, owner, token) => `R ${id} ${key} ${owner} ${token}\n`;
export const fmtQuery = (id, key) => `Q ${id} ${key}\n`;
export const fmtPing = (id) => `P ${id}\n`;
export const fmtRing = (id) => `S ${id}\n`;

/** "TICKETING/1 <snonce>" -> snonce, or null. */
export function parseBanner(line) {
  const w = line.split(' ');
  return w.length === 2 && w[0] === 'TICKETING/1' && HEX64.test(w[1]) ? w[1] : null;
}

/** "OK <sproof> <node-id> <domain-id>" -> sproof, or null. */
export function parseOk(line) {
  const w = line.split(' ');
  if (w.length !== 4 || w[0] !== 'OK' || !HEX64.test(w[1]) || !HEX16.test(w[2]) || !HEX32.test(w[3])) return null;
  return w[1];
}

/**
 * One response line (without "\n"; a "\r" before it is dropped), or null if
 * it breaks the server's grammar. {type, id (bigint, null for "E -" and M),
 * token (bigint), owner (null when free), waiters, text (E: the reason; M:
 * the address, null for "M -"; S: the body, or this line's part of it)};
 * W also has slot (a number, 0-16383) and version (bigint), S has version
 * (bigint), part and parts (1 and 1 for the one-line form; else 1 <= part
 * <= parts, 2 <= parts <= RING_PARTS_MAX: the order is the connection's to
 * check).
 */
export function parseResponse(line) {
  if (line.endsWith('\r')) line = line.slice(0, -1);
  const w = line.split(' ');
  if (w.length < 2 || w[0].length !== 1 || w.some((f) => f === '')) return null;
  const type = w[0];
  const r = { type, id: null, token: 0n, owner: null, waiters: 0, text: null };
  if (type === 'M') {
    if (w.length !== 2) return null;
    if (w[1] === '-') return r;
    try {
      parseAddr(w[1]);
    } catch {
      return null;
    }
    r.text = w[1];
    return r;
  }
  if (!(type === 'E' && w[1] === '-')) {
    r.id = parseU64(w[1]);
    if (r.id === null) return null;
  }
  switch (type) {
    case 'T': case 'B': case 'R': case 'N': case 'P':
      return w.length === 2 && r.id !== null ? r : null;
    case 'G': {
      const t = w.length === 3 ? parseU64(w[2]) : null;
      if (t === null || t < 1n || r.id === null) return null;
      r.token = t;
      return r;
    }
    case 'Q': {
      if (w.length !== 5 || !ownerOk(w[2]) || r.id === null) return null;
      const t = parseU64(w[3]);
      const n = parseU64(w[4]);
      if (t === null || n === null || n > 0xffffffffn) return null;
      r.token = t;
      r.waiters = Number(n);
      if (t === 0n) return w[2] === '-' && n === 0n ? r : null; // a free key is "- 0 0"
      r.owner = w[2];
      return r;
    }
    case 'W': {
      if (w.length !== 4 || r.id === null) return null;
      const sl = parseU64(w[2]);
      const v = parseU64(w[3]);
      if (sl === null || sl >= BigInt(SLOTS) || v === null) return null;
      r.slot = Number(sl);
      r.version = v;
      return r;
    }
    case 'S':
      return parseRing(w, r);
    case 'E':
      if (w.length !== 3 || !visible(w[2])) return null;
      r.text = w[2];
      return r;
    default:
      return null;
  }
}

// "S <id> <version> <body>", or "S <id> <version> <k>/<n> <part>".
function parseRing(w, r) {
  if ((w.length !== 4 && w.length !== 5) || r.id === null) return null;
  const v = parseU64(w[2]);
  const body = w[w.length - 1];
  if (v === null || !visible(body)) return null;
  let part = 1n;
  let parts = 1n;
  if (w.length === 5) {
    const kn = w[3].split('/');
    if (kn.length !== 2) return null;
    part = parseU64(kn[0]);
    parts = parseU64(kn[1]);
    if (part === null || parts === null || parts < 2n || parts > BigInt(RING_PARTS_MAX) ||
      part < 1n || part > parts) return null;
  }
  r.version = v;
  r.part = Number(part);
  r.parts = Number(parts);
  r.text = body;
  return r;
}
