// Routing by key (docs/client.md, "Groups and the ring"): the ring's text
// form read into a table of slots, the group of a slot, the seed group found
// by address, the newer of two rings, and the pause between resends to a
// group that answered W again. Pure functions: no sockets, no clocks.

import * as P from './proto.js';

export const GROUPS_MAX = 64; // groups of one ring
export const RANGES_MAX = 1024; // ranges of one ring
export const GROUP_NAME_MAX = 64;
export const GROUP_ADDRS_MAX = 5; // client addresses of one group
export const GROUP_ADDR_MAX = 128; // bytes of one of them
export const PAUSE_MIN_MS = 20; // the first pause before a resend to the same group
export const PAUSE_MAX_MS = 200;

const NONE = 0xff; // no group owns the slot
const NUM = /^(0|[1-9][0-9]{0,4})$/;
const NAME = /^[\x21-\x3a\x3c-\x3f\x41-\x7e]+$/; // 0x21-0x7E less ';' (0x3b) and '@' (0x40)

/** An address as routing compares them: "host:port" with the host in
 * lower case ("[v6]:port" for IPv6). Throws on what is not an address. */
export function addrKey(addr) {
  const { host, port } = P.parseAddr(addr);
  const h = host.toLowerCase();
  return h.includes(':') ? `[${h}]:${port}` : `${h}:${port}`;
}

/**
 * The ring of version (a bigint >= 1n) and body (the ranges joined by ";",
 * or "-"), checked as the server checks a ring: ranges in increasing order
 * and disjoint, first <= last <= 16383 without leading zeros, group names
 * of 1-64 bytes 0x21-0x7E but ";" and "@", 1-5 addresses of at most 128
 * bytes each, one address list per group, at most 64 groups and 1,024
 * ranges. {version, groups: [{name, addrs, group: null}], owner: a
 * Uint8Array of SLOTS group indexes (0xff: none)}. Throws an Error that says
 * what is wrong.
 */
export function parseRing(version, body) {
  if (typeof version !== 'bigint' || version < 1n || version > P.U64_MAX) throw new Error('ring: bad version');
  if (typeof body !== 'string' || body === '') throw new Error('ring: empty body');
  const ring = { version, groups: [], owner: new Uint8Array(P.SLOTS).fill(NONE) };
  if (body === '-') return ring;
  const texts = body.split(';');
  if (texts.length > RANGES_MAX) throw new Error(`ring: more than ${RANGES_MAX} ranges`);
  const byName = new Map();
  let next = 0; // the lowest slot the next range may start at
  for (const t of texts) {
    const eq = t.indexOf('=');
    const at = t.indexOf('@');
    const dash = t.indexOf('-');
    if (eq < 0 || at < eq || dash < 0 || dash > eq) throw new Error(`ring: bad range ${JSON.stringify(t)}`);
    const fs = t.slice(0, dash);
    const ls = t.slice(dash + 1, eq);
    if (!NUM.test(fs) || !NUM.test(ls)) throw new Error(`ring: bad slots in ${JSON.stringify(t)}`);
    const first = Number(fs);
    const last = Number(ls);
    if (first > last || last >= P.SLOTS) throw new Error(`ring: bad slots in ${JSON.stringify(t)}`);
    if (first < next) throw new Error(`ring: range ${first}-${last} overlaps or is out of order`);
    next = last + 1;
    const name = t.slice(eq + 1, at);
    if (name.length > GROUP_NAME_MAX || !NAME.test(name)) throw new Error(`ring: bad group name in ${JSON.stringify(t)}`);
    const addrs = t.slice(at + 1).split(',');
    if (addrs.length > GROUP_ADDRS_MAX) throw new Error(`ring: more than ${GROUP_ADDRS_MAX} addresses for ${name}`);
    for (const a of addrs) {
      if (a.length > GROUP_ADDR_MAX) throw new Error(`ring: address too long for ${name}`);
      try {
        P.parseAddr(a);
      } catch (e) {
        throw new Error(`ring: ${e.message} for ${name}`);
      }
    }
    let gi = byName.get(name);
    if (gi === undefined) {
      if (ring.groups.length >= GROUPS_MAX) throw new Error(`ring: more than ${GROUPS_MAX} groups`);
      gi = ring.groups.length;
      byName.set(name, gi);
      ring.groups.push({ name, addrs, group: null });
    } else if (!sameAddrs(ring.groups[gi].addrs, addrs)) {
      throw new Error(`ring: group ${name} is given two address lists`);
    }
    ring.owner.fill(gi, first, last + 1);
  }
  return ring;
}

/** Whether two address lists are the same list. */
export function sameAddrs(a, b) {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

/** The ring's entry of the group owning slot, or null (no ring, or a slot no range covers). */
export function groupOf(ring, slot) {
  if (!ring) return null;
  const gi = ring.owner[slot];
  return gi === NONE ? null : ring.groups[gi];
}

/** The index of the ring's group whose addresses include one of configured
 * (a Set of addrKey forms), or -1: that group is the seed itself. */
export function seedIndex(ring, configured) {
  for (let i = 0; i < ring.groups.length; i++) {
    for (const a of ring.groups[i].addrs) {
      let k;
      try {
        k = addrKey(a);
      } catch {
        continue;
      }
      if (configured.has(k)) return i;
    }
  }
  return -1;
}

/** Whether a ring of version got replaces the one of version have (0n:
 * none): only a higher version does, never an older one or the same again. */
export function newer(have, got) {
  return got > have;
}

/**
 * The pause before a request answered W goes again: 0 (at once) when the
 * ring names another group than the one that answered; otherwise the pause
 * after the last one (prevMs, 0 when none yet): 20 ms, doubling to 200 ms.
 */
export function resendPause(sameGroup, prevMs) {
  if (!sameGroup) return 0;
  if (prevMs <= 0) return PAUSE_MIN_MS;
  return Math.min(prevMs * 2, PAUSE_MAX_MS);
}
