// The client engine: the connections, every deadline and every outcome,
// with the same rules as the C library (docs/client.md). Node runs it on the
// caller's own event loop: no threads, no locks; callers hand it requests and
// get each outcome through one callback, called exactly once.
//
// A request's deadline depends on where it is:
//   acquire, not yet written: submit + max(wait, sendBudgetMinMs), then
//     UNAVAILABLE (a line still in our write buffer is neutered first: its
//     command letter becomes X, which the server answers E and ignores);
//   acquire, written: first write + wait as sent + responseGraceMs, then
//     INDETERMINATE (a G that comes at or after first write + lease is
//     INDETERMINATE too, reason "lease", and compensated);
//   release (explicit or compensation): enqueue + 5 s, absolute, then
//     UNCONFIRMED;
//   query, ping, ring: submit + requestTimeoutMs, then UNAVAILABLE;
//   decided but still holding an id on a connection (a zombie): a linger,
//     after which its id is forgotten. A G for a zombie acquire is released
//     at once (compensation).
//
// Groups (docs/client.md, "Groups and the ring"): the configured addresses
// are the seed group. A W answer makes the engine fetch the ring of the
// group that answered (one fetch at a time; requests answered W meanwhile
// wait for it) and keep it if it is newer. Acquires, releases and queries
// go to the group the ring names for their key's slot, each group with its
// own connections, leader hint and pending lists; pings and ring calls go
// to the seed. A request answered W is definite and goes again, at once to
// another group, after a pause to the same one, while its budget lasts
// (an acquire: submit + max(wait, sendBudgetMinMs) again, as if unsent; a
// release or a read: its deadline, unchanged); it ends WRONG_GROUP when
// the budget ends before it was written again, or at once when the ring
// names no group for the slot. A resend is a new request: its lease counts
// from its own first write.
//
// "Written" is tracked in bytes. Each connection keeps the lines not yet
// handed to its socket in a buffer of its own and hands them over one chunk
// at a time, when the previous chunk has left. Lines still in that buffer
// were handed to nobody: their requests may be neutered or go to another
// connection. A chunk handed to the socket may be leaving at any moment, so
// its requests count as written from that moment on: an acquire among them
// is never resent.

import net from 'node:net';
import tls from 'node:tls';
import { timingSafeEqual } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import * as P from './proto.js';
import * as G from './ring.js';

export const RELEASE_DEADLINE_MS = 5000;
const ZOMBIE_LINGER_MS = 30000;
const EXTRA_MAX = 4;
// Groups with connections at once: the seed, the groups of the ring, and
// as many again of groups a newer ring no longer names (kept until their
// requests in flight are done).
const STALE_MAX = G.GROUPS_MAX;
const WBUF_HIGH = 64 * 1024;
const PROBE_ID = 0;

const NONE = 0;
const QUEUED = 1;
const SENT = 2;

const IDLE = 0;
const CONNECTING = 1;
const READY = 2;
const RETIRED = 3;

const FITS = { A: 'GTBEW', R: 'RNEW', Q: 'QEW', P: 'PE', S: 'SE' };
const MAX_ID = BigInt(Number.MAX_SAFE_INTEGER);

export const now = () => performance.now();

export class Req {
  constructor(type, key = '', leaseMs = 0, waitMs = 0, token = 0n) {
    this.type = type;
    this.key = key;
    this.leaseMs = leaseMs;
    this.waitMs = waitMs;
    this.waitSentMs = 0;
    this.token = token;
    this.submit = 0;
    this.sent = null; // when its last write was handed to a socket
    this.deadline = 0;
    this.timer = null;
    this.timerRef = true;
    this.wire = NONE;
    this.conn = null;
    this.id = 0;
    this.pos = 0; // stream offset of its line on its connection
    this.decided = false;
    this.neutered = false;
    this.comp = false;
    this.resent = false;
    this.list = null; // the pending list it is on, if any
    this.prev = null;
    this.next = null;
    this.done = null; // (result) => void, called once
    // S: the parts of a multi-line answer read so far on its connection.
    this.ringRead = 0;
    this.ringParts = 0;
    this.ringVersion = 0n;
    this.ringBody = null; // the parts, joined at the last
    // Routing: the group it goes to, its key's slot (computed once a ring
    // is known), and after a W the group that answered, the W's slot and
    // version, and the last pause before a resend to that same group.
    this.group = null;
    this.slot = -1;
    this.wrongGroup = null;
    this.wrongSlot = 0;
    this.wrongVersion = 0n;
    this.pauseMs = 0;
    this.pauseTimer = null;
    this.fetch = false; // the engine's own S, after a W
  }
}

// A doubly linked list of requests: the pending lists are served from the
// front and requests leave them from anywhere (a deadline, a cancel).
class List {
  constructor() {
    this.head = null;
    this.tail = null;
    this.length = 0;
  }

  pushBack(r) {
    r.list = this;
    r.prev = this.tail;
    r.next = null;
    if (this.tail) this.tail.next = r;
    else this.head = r;
    this.tail = r;
    this.length++;
  }

  pushFront(r) {
    r.list = this;
    r.next = this.head;
    r.prev = null;
    if (this.head) this.head.prev = r;
    else this.tail = r;
    this.head = r;
    this.length++;
  }

  remove(r) {
    if (r.prev) r.prev.next = r.next;
    else this.head = r.next;
    if (r.next) r.next.prev = r.prev;
    else this.tail = r.prev;
    r.prev = r.next = r.list = null;
    this.length--;
  }

  shift() {
    const r = this.head;
    if (r) this.remove(r);
    return r;
  }
}

function result(outcome, extra) {
  return { outcome, token: 0n, reason: '', leaseDeadline: null, held: false, owner: null,
    waiters: 0, resent: false, rtt: null, slot: null, ringVersion: null, body: null, ...extra };
}

const ERRNO_TEXT = {
  ECONNREFUSED: 'Connection refused',
  ECONNRESET: 'Connection reset by peer',
  ETIMEDOUT: 'Connection timed out',
  EHOSTUNREACH: 'No route to host',
  ENETUNREACH: 'Network is unreachable',
  EADDRNOTAVAIL: 'Cannot assign requested address',
  EPIPE: 'Broken pipe',
};

function errText(err) {
  return ERRNO_TEXT[err.code] || err.message || String(err);
}

// Errors that say TLS refused us or we refused the server: waiting will not
// fix a configuration error, so unsent requests end UNAVAILABLE "tls".
function tlsRefusal(err) {
  const code = String(err.code || '');
  return /CERT|_CA$|SIGNATURE|ISSUER|ALERT|^ERR_SSL_|^ERR_TLS_|HOSTNAME/.test(code);
}

class Conn {
  constructor(engine, group, addr, extra) {
    this.e = engine;
    this.g = group;
    this.extra = extra;
    this.state = IDLE;
    this.sock = null;
    this.stage = '';
    this.backoff = engine.cfg.backoffMinMs;
    this.retryTimer = null;
    this.nextAttempt = 0;
    this.attemptTimer = null;
    this.tlsRefused = false;
    this.gotBytes = false;
    this.snonce = '';
    this.cnonce = '';
    this.rbuf = '';
    this.wbuf = []; // one Buffer per line not yet handed to the socket
    this.wlen = 0;
    this.appended = 0; // stream offset after the last line appended
    this.handed = 0; // bytes handed to the socket
    this.writing = false;
    this.unsent = []; // QUEUED requests, in stream order
    this.slots = new Map(); // wire id -> Req
    this.nextId = 1;
    this.setAddr(addr);
  }

  setAddr(addr) {
    const { host, port } = P.parseAddr(addr);
    this.addr = addr;
    this.host = host;
    this.port = port;
  }

  hasRoom() {
    return this.state === READY && this.slots.size < this.e.cfg.inflightPerConnectionMax &&
      this.wlen < WBUF_HIGH;
  }

  // ---- connecting ----

  scheduleAttempt(at) {
    if (this.retryTimer) clearTimeout(this.retryTimer);
    this.nextAttempt = at;
    this.retryTimer = setTimeout(() => {
      this.retryTimer = null;
      if (this.state === IDLE && !this.e.closed) this.start();
    }, Math.max(0, Math.ceil(at - now())));
    this.retryTimer.unref();
  }

  start() {
    const e = this.e;
    e.st.connectAttempts++;
    this.state = CONNECTING;
    this.stage = 'connect';
    this.gotBytes = false;
    this.rbuf = '';
    let sock;
    // Host names are looked up again at every attempt (a restarted member
    // may come back with another address); Node does it off the loop.
    if (e.tls) {
      const o = { host: this.host, port: this.port, ...e.tls };
      if (e.tlsServerName) o.servername = e.tlsServerName;
      sock = tls.connect(o);
    } else {
      sock = net.connect({ host: this.host, port: this.port });
    }
    this.sock = sock;
    // The client keeps no process alive by itself: a request in progress
    // does, through its deadline timer.
    sock.unref();
    sock.setNoDelay(true);
    sock.setKeepAlive(true, 10000);
    sock.setEncoding('latin1'); // one char per byte: lengths below are in bytes
    const mine = (fn) => (...a) => {
      if (this.sock === sock) fn(...a);
    };
    sock.on(e.tls ? 'secureConnect' : 'connect', mine(() => {
      this.stage = 'banner';
    }));
    if (e.tls) sock.once('connect', mine(() => { this.stage = 'tls'; }));
    sock.on('data', mine((d) => this.onData(d)));
    sock.on('end', mine(() => this.onEnd()));
    sock.on('error', mine((err) => this.onError(err)));
    sock.on('close', mine(() => this.fail('closed')));
    this.attemptTimer = setTimeout(mine(() => this.onAttemptTimeout()), e.cfg.connectTimeoutMs);
    this.attemptTimer.unref();
  }

  onAttemptTimeout() {
    this.attemptTimer = null;
    if (this.state !== CONNECTING) return;
    if (this.stage === 'tls') this.fail('TLS handshake timed out');
    else if (this.stage === 'banner' && !this.e.tls && !this.gotBytes) {
      this.fail('connected, but no banner from the server in time (a TLS port? then set tlsCaFile)');
    } else this.fail('connect or handshake timed out');
  }

  onEnd() {
    if (this.e.tls && (this.stage === 'tls' || this.stage === 'banner')) {
      this.down('closed by the server during or right after the TLS handshake ' +
        '(it may have refused our certificate)', true, true);
    } else if (this.state === CONNECTING && this.stage === 'banner') {
      this.fail('closed by the server before its banner');
    } else {
      this.fail('closed by the server');
    }
  }

  onError(err) {
    const e = this.e;
    if (this.stage === 'connect') {
      if (err.code === 'ENOTFOUND' || err.code === 'EAI_AGAIN' || err.code === 'EAI_FAIL') {
        this.fail('host name lookup failed');
      } else {
        this.fail(`connect: ${errText(err)}`);
      }
      return;
    }
    if (e.tls && tlsRefusal(err)) {
      const name = e.tlsServerName || this.host;
      this.down(`TLS handshake failed: ${err.message} (CA file ${e.tlsCaFile}, server name ${name})`,
        true, true);
      return;
    }
    this.fail(errText(err));
  }

  // ---- the handshake and the lines ----

  onData(d) {
    this.gotBytes = true;
    this.rbuf += d;
    while (this.sock) {
      const nl = this.rbuf.indexOf('\n');
      if (nl < 0) {
        if (this.rbuf.length >= P.LINE_MAX) this.fail('protocol: line too long');
        break;
      }
      if (nl + 1 > P.LINE_MAX) {
        this.fail('protocol: line too long');
        break;
      }
      const line = this.rbuf.slice(0, nl);
      this.rbuf = this.rbuf.slice(nl + 1);
      this.onLine(line);
    }
    this.e.pump();
  }

  onLine(line) {
    const e = this.e;
    if (this.stage === 'banner') {
      const snonce = P.parseBanner(line.replace(/\r$/, ''));
      if (snonce === null) {
        this.fail(line.startsWith('E') ? `refused (E before the banner): ${line.slice(0, 40)}`
          : 'not a Ticketing client port');
        return;
      }
      this.snonce = snonce;
      this.cnonce = P.newNonce();
      this.stage = 'auth';
      this.sock.write(`AUTH ${this.cnonce} ${P.proof(e.secret, 'client', snonce, this.cnonce)}\n`, 'latin1');
      return;
    }
    if (this.stage === 'auth') {
      const l = line.replace(/\r$/, '');
      const sproof = P.parseOk(l);
      if (sproof === null) {
        if (l === 'E - auth') {
          e.st.authFailures++;
          e.log(0, `${this.addr} refused our proof: is the client secret right?`);
          this.down('authentication refused (wrong secret?)', true, false, true);
        } else {
          this.fail('bad handshake answer');
        }
        return;
      }
      const want = Buffer.from(P.proof(e.secret, 'server', this.snonce, this.cnonce), 'latin1');
      if (!timingSafeEqual(want, Buffer.from(sproof, 'latin1'))) {
        // This peer does not know our secret: nothing it says is believed.
        e.st.authFailures++;
        this.down('wrong server proof (not our cluster, or another secret)', true, false, true);
        return;
      }
      e.st.handshakes++;
      // The probe: no request is written before a node has shown that it
      // serves requests (a follower answers M and closes).
      this.stage = 'probe';
      this.sock.write(P.fmtPing(PROBE_ID), 'latin1');
      return;
    }
    const rsp = P.parseResponse(line);
    if (rsp === null) {
      this.fail('protocol: malformed line');
    } else if (rsp.type === 'M') {
      this.g.onMoved(rsp.text);
      this.down('not the leader (M)', false);
    } else if (rsp.id === null) {
      this.fail(`server closed: E - ${rsp.text.slice(0, 20)}`);
    } else if (this.stage === 'probe') {
      if (rsp.type === 'P' && rsp.id === 0n) this.ready();
      else this.fail('unexpected answer to the probe');
    } else {
      const r = rsp.id <= MAX_ID ? this.slots.get(Number(rsp.id)) : undefined;
      if (r === undefined) {
        e.log(3, `${this.addr}: answer for unknown id ${rsp.id} ignored`);
        return;
      }
      const fits = r.neutered ? 'E' : FITS[r.type];
      if (r.wire !== SENT || !fits.includes(rsp.type) || (r.ringRead !== 0 && rsp.type !== 'S')) {
        this.fail('protocol: answer does not fit its request');
        return;
      }
      if (rsp.type === 'S' && !this.ringPart(r, rsp)) return; // more to come, or the connection failed
      this.dropSlot(r);
      e.onResponse(r, rsp, now());
    }
  }

  // One line of an S answer: true once the answer is complete (the one-line
  // form, or part n of n; r.ringBody then holds every part). The parts must
  // come in order 1..n with the same n and version: anything else is a
  // protocol error that closes the connection (and false).
  ringPart(r, rsp) {
    if (rsp.parts === 1) {
      if (r.ringRead !== 0) {
        this.fail('protocol: a one-line ring answer in the middle of a multi-line one');
        return false;
      }
      r.ringVersion = rsp.version;
      r.ringBody = [rsp.text];
      return true;
    }
    if (r.ringRead === 0) {
      if (rsp.part !== 1) {
        this.fail(`protocol: ring answer part ${rsp.part}/${rsp.parts} before part 1`);
        return false;
      }
      r.ringParts = rsp.parts;
      r.ringVersion = rsp.version;
      r.ringBody = [];
    } else if (rsp.part !== r.ringRead + 1 || rsp.parts !== r.ringParts || rsp.version !== r.ringVersion) {
      this.fail(`protocol: ring answer part ${rsp.part}/${rsp.parts} out of order (after ` +
        `${r.ringRead}/${r.ringParts})`);
      return false;
    }
    r.ringBody.push(rsp.text);
    r.ringRead = rsp.part;
    return rsp.part === rsp.parts;
  }

  ready() {
    const e = this.e;
    clearTimeout(this.attemptTimer);
    this.attemptTimer = null;
    this.state = READY;
    this.stage = 'ready';
    this.tlsRefused = false;
    this.backoff = e.cfg.backoffMinMs; // a good handshake resets the backoff
    e.readyChange(1);
    e.log(2, `connected to ${this.addr}${this.extra ? ' (hinted leader)' : ''}`);
  }

  // ---- output ----

  queue(r, t) {
    const e = this.e;
    let id = this.nextId;
    while (id === PROBE_ID || this.slots.has(id)) id++;
    this.nextId = id + 1;
    let line;
    if (r.type === 'A') {
      // The wait left of the caller's budget: a request that waited for a
      // connection, or goes again after a W, goes on within what remains.
      r.waitSentMs = waitLeft(r.waitMs, r.submit, t);
      line = P.fmtAcquire(id, r.key, e.owner, r.leaseMs, r.waitSentMs);
    } else if (r.type === 'R') {
      line = P.fmtRelease(id, r.key, e.owner, r.token);
    } else if (r.type === 'Q') {
      line = P.fmtQuery(id, r.key);
    } else if (r.type === 'S') {
      line = P.fmtRing(id);
      r.ringRead = 0; // the parts of an answer on another connection are gone with it
      r.ringBody = null;
    } else {
      line = P.fmtPing(id);
    }
    const b = Buffer.from(line, 'latin1');
    r.pos = this.appended;
    this.wbuf.push(b);
    this.wlen += b.length;
    this.appended += b.length;
    r.wire = QUEUED;
    r.conn = this;
    r.id = id;
    this.slots.set(id, r);
    this.unsent.push(r);
  }

  // An unsent line becomes "X <id> ...": the server answers "E <id> command"
  // and changes nothing, so what was never written stays without effect.
  neuter(r) {
    let off = r.pos - this.handed;
    for (const b of this.wbuf) {
      if (off < b.length) {
        if (b[off] !== r.type.charCodeAt(0)) throw new Error('ticketing: neuter of a line that is not there');
        b[off] = 0x58; // 'X'
        r.neutered = true;
        return;
      }
      off -= b.length;
    }
    throw new Error('ticketing: neuter of a line that is not there');
  }

  dropSlot(r) {
    this.slots.delete(r.id);
    if (r.wire === QUEUED) {
      const i = this.unsent.indexOf(r);
      if (i >= 0) this.unsent.splice(i, 1);
    }
    r.wire = NONE;
    r.conn = null;
  }

  flush() {
    if (this.state !== READY || this.writing || this.wlen === 0) return;
    const chunk = this.wbuf.length === 1 ? this.wbuf[0] : Buffer.concat(this.wbuf, this.wlen);
    this.wbuf = [];
    this.wlen = 0;
    this.handed += chunk.length;
    this.writing = true;
    const sock = this.sock;
    const unsent = this.unsent;
    this.unsent = [];
    const at = now(); // never later than the first byte leaving
    for (const r of unsent) this.e.onSent(r, at);
    sock.write(chunk, (err) => {
      if (this.sock !== sock) return;
      this.writing = false;
      if (err) this.fail(`write: ${errText(err)}`);
      this.e.pump();
    });
  }

  // ---- teardown ----

  teardown() {
    const e = this.e;
    if (this.attemptTimer) {
      clearTimeout(this.attemptTimer);
      this.attemptTimer = null;
    }
    if (this.sock) {
      const s = this.sock;
      this.sock = null;
      s.destroy();
    }
    if (this.state === READY) e.readyChange(-1);
    this.state = IDLE;
    this.stage = '';
    const unsent = this.unsent;
    this.unsent = [];
    this.wbuf = [];
    this.wlen = this.appended = this.handed = 0;
    this.writing = false;
    this.rbuf = '';
    // Untouched requests first, in reverse, each put at the front of its
    // pending list: they keep their order and their place.
    for (let i = unsent.length - 1; i >= 0; i--) {
      this.slots.delete(unsent[i].id);
      e.onConnLost(unsent[i]);
    }
    const rest = [...this.slots.values()];
    this.slots.clear();
    for (const r of rest) e.onConnLost(r);
    this.nextId = 1;
  }

  fail(why) {
    this.down(why, true);
  }

  down(why, record, tlsRefused = false, auth = false) {
    const e = this.e;
    if (this.state === RETIRED) return;
    e.log(tlsRefused ? 0 : this.state === READY ? 1 : 3, `connection to ${this.addr}: ${why}`);
    if (record) {
      e.lastError = `${this.addr}: ${why}`;
      e.lastAuth = auth;
    }
    this.teardown();
    this.tlsRefused = tlsRefused;
    if (e.closed) {
      this.state = RETIRED;
      return;
    }
    if (this.extra && this.g.leader !== this) {
      this.state = RETIRED; // the leader moved on from this address
      return;
    }
    if (tlsRefused) this.backoff = e.cfg.backoffMaxMs;
    // Jitter: a delay in [3/4, 1] of the step.
    const lo = this.backoff * 0.75;
    this.scheduleAttempt(now() + lo + Math.random() * (this.backoff - lo));
    this.backoff = Math.min(this.backoff * 2, e.cfg.backoffMaxMs);
    e.pump(); // what it gave back may go to another connection
  }

  retire() {
    if (this.retryTimer) {
      clearTimeout(this.retryTimer);
      this.retryTimer = null;
    }
    this.teardown();
    this.state = RETIRED;
  }
}

/**
 * The budget of a request in ms from its submit: an acquire
 * max(wait, sendBudgetMinMs) while unsent (and again after a W: it is
 * unsent again), a release its absolute 5 s, a query, ping or ring
 * requestTimeoutMs.
 */
export function budgetMs(type, waitMs, cfg) {
  if (type === 'A') return Math.max(waitMs, cfg.sendBudgetMinMs);
  if (type === 'R') return RELEASE_DEADLINE_MS;
  return cfg.requestTimeoutMs;
}

/** The wait an acquire sends at t: what is left of waitMs since submit (0 at the least). */
export function waitLeft(waitMs, submit, t) {
  const spent = t > submit ? Math.floor(t - submit) : 0;
  return spent >= waitMs ? 0 : waitMs - spent;
}

// One group: the connections to its nodes (the configured addresses for
// the seed, the ring's for another group), its leader hint, and the
// requests waiting for one of its connections.
class Group {
  constructor(engine, name, addrs, seed) {
    this.e = engine;
    this.name = name; // null: the seed, until a ring names it
    this.addrs = addrs;
    this.seed = seed;
    this.stale = false; // the ring no longer names it: it takes no new request
    this.gone = false; // its connections are closed for good
    this.pending = new List();
    this.pendingRel = new List();
    this.leaderHint = '';
    this.leader = null;
    this.rr = 0;
    const list = addrs.length === 1 ? [addrs[0], addrs[0]] : addrs;
    this.conns = list.map((a) => new Conn(engine, this, a, false));
    this.nconfigured = this.conns.length;
    for (const k of this.conns) k.scheduleAttempt(now());
  }

  get label() {
    if (this.name === null) return 'the seed group';
    return this.seed ? `group ${this.name} (the seed)` : `group ${this.name}`;
  }

  pickConn() {
    if (this.leader && this.leader.hasRoom()) return this.leader;
    const n = this.conns.length;
    for (let j = 0; j < n; j++) {
      const i = (this.rr + j) % n;
      if (this.conns[i].hasRoom()) {
        this.rr = (i + 1) % n;
        return this.conns[i];
      }
    }
    return null;
  }

  // Every live connection's last attempt was refused in TLS: a
  // configuration error that waiting will not fix.
  tlsRefusedAll() {
    const live = this.conns.filter((k) => k.state !== RETIRED);
    return live.length > 0 && live.every((k) => k.tlsRefused);
  }

  // Nothing of it waiting, nothing in flight (zombies included).
  idle() {
    return this.pending.length === 0 && this.pendingRel.length === 0 && this.conns.every((k) => k.slots.size === 0);
  }

  // Closes its connections for good; what they gave back goes where
  // routing says (enqueue skips a group that is gone).
  close() {
    this.gone = true;
    for (const k of this.conns) k.retire();
  }

  // ---- M hints ----

  onMoved(addr) {
    const e = this.e;
    const t = now();
    e.st.moved++;
    const same = (addr || '') === this.leaderHint;
    this.leaderHint = addr || '';
    if (!addr) {
      this.leader = null; // "M -": no leader known now
      return;
    }
    if (!same) e.log(2, `leader hint: ${addr}${this.seed ? '' : ` (${this.label})`}`);
    for (const k of this.conns) {
      if (k.addr !== addr) continue;
      this.leader = k;
      if (k.state === RETIRED) {
        k.state = IDLE;
        k.backoff = e.cfg.backoffMinMs;
        k.nextAttempt = Infinity;
      }
      // Soon, but not sooner than the shortest backoff: two nodes naming
      // each other during an election must not make a tight loop.
      if (k.state === IDLE && (k.retryTimer === null || t + e.cfg.backoffMinMs < k.nextAttempt)) {
        k.scheduleAttempt(t + e.cfg.backoffMinMs);
      }
      return;
    }
    // A member we were not configured with: connect to it too.
    const extras = this.conns.slice(this.nconfigured);
    if (extras.length < EXTRA_MAX) {
      let k;
      try {
        k = new Conn(e, this, addr, true);
      } catch {
        e.log(1, `cannot connect to hinted leader ${addr} (bad address)`);
        return;
      }
      this.conns.push(k);
      this.leader = k;
      k.scheduleAttempt(t);
      return;
    }
    const slot = extras.find((k) => k.state === RETIRED) || extras.find((k) => k.state !== READY);
    if (!slot) {
      e.log(1, `no room for a connection to hinted leader ${addr}`);
      return;
    }
    slot.retire();
    try {
      slot.setAddr(addr);
    } catch {
      return;
    }
    slot.state = IDLE;
    slot.backoff = e.cfg.backoffMinMs;
    this.leader = slot;
    slot.scheduleAttempt(t);
  }
}

export class Engine {
  /**
   * addrs: ["host:port", ...] (checked): the seed group; secret: Buffer;
   * owner: string; cfg: numbers with defaults applied; tlsOpts: null or
   * {ca, cert, key}. Every other group gets the same.
   */
  constructor({ addrs, secret, owner, cfg, tlsOpts, tlsServerName, tlsCaFile, log }) {
    this.secret = secret;
    this.owner = owner;
    this.cfg = cfg;
    this.tls = tlsOpts ? { ...tlsOpts, minVersion: 'TLSv1.2' } : null;
    this.tlsServerName = tlsServerName || '';
    this.tlsCaFile = tlsCaFile || '';
    this.logFn = log || null;
    this.liveReq = 0;
    this.liveRel = 0;
    this.readyCount = 0;
    this.readyWaiters = [];
    this.lastError = '';
    this.lastAuth = false;
    this.draining = false;
    this.drainDeadline = 0;
    this.drainTimer = null;
    this.closed = false;
    this.closeWaiters = [];
    this.pumpScheduled = false;
    this.st = { connectAttempts: 0, handshakes: 0, authFailures: 0, moved: 0, requestsWritten: 0,
      compensations: 0, compensationsDropped: 0, indeterminate: 0, rerouted: 0 };
    // Routing: the ring routed by (null: none yet, everything to the seed),
    // the one ring fetch in progress, the requests answered W that wait for
    // it, and those pausing before a resend to the group that answered.
    this.configured = new Set(addrs.map(G.addrKey));
    this.ring = null;
    this.fetching = null;
    this.ringWait = new List();
    this.paused = new List();
    this.seed = new Group(this, null, addrs, true);
    this.groups = [this.seed];
  }

  log(level, msg) {
    if (this.logFn) {
      try {
        this.logFn(level, msg);
      } catch {
        // A logger that throws must not break the engine.
      }
    }
  }

  readyChange(d) {
    this.readyCount += d;
    if (this.readyCount > 0 && this.readyWaiters.length) {
      const w = this.readyWaiters;
      this.readyWaiters = [];
      for (const f of w) f(true);
    }
  }

  // ---- deadlines ----

  setDeadline(r, at, ref = true) {
    r.deadline = at;
    r.timerRef = ref;
    if (r.timer) clearTimeout(r.timer);
    r.timer = setTimeout(this.onTimer, Math.max(0, Math.ceil(at - now())), r);
    if (!ref) r.timer.unref();
  }

  clearDeadline(r) {
    if (r.timer) {
      clearTimeout(r.timer);
      r.timer = null;
    }
    if (r.pauseTimer) {
      clearTimeout(r.pauseTimer);
      r.pauseTimer = null;
    }
  }

  // Node's timers run on a loop clock that may lag the monotonic clock a
  // little, so a timer can fire a moment early: check, and wait the rest.
  onTimer = (r) => {
    r.timer = null;
    const t = now();
    if (t < r.deadline) {
      this.setDeadline(r, r.deadline, r.timerRef);
      return;
    }
    this.expire(r, t);
    this.pump();
  };

  // ---- the API side ----

  /** Submits r; r.done(result) is called exactly once, never inside submit. */
  submit(r) {
    if (this.closed || (this.draining && r.type !== 'R')) {
      queueMicrotask(() => r.done(result('CANCELLED', { reason: 'shutdown' })));
      return;
    }
    if (r.type === 'R') {
      if (this.liveRel >= this.cfg.releaseQueueMax) {
        queueMicrotask(() => r.done(result('QUEUE_FULL', { token: r.token })));
        return;
      }
      this.liveRel++;
    } else {
      if (this.liveReq >= this.cfg.requestsMax) {
        queueMicrotask(() => r.done(result('UNAVAILABLE', { reason: 'requests_max' })));
        return;
      }
      this.liveReq++;
    }
    r.submit = now();
    this.accept(r);
    this.pump();
  }

  /** An AbortSignal of an acquire, query, ping or ring fired. */
  cancel(r) {
    if (r.decided || r.type === 'R') return;
    if (r.wire === NONE) {
      this.finish(r, 'CANCELLED');
    } else {
      let o = 'CANCELLED';
      if (r.wire === QUEUED) r.conn.neuter(r);
      else if (r.type === 'A') o = 'INDETERMINATE'; // written: maybe granted
      this.decide(r, result(o));
      this.zombie(r, now());
    }
    this.pump();
  }

  waitReady(timeoutMs) {
    if (this.readyCount > 0) return Promise.resolve(true);
    return new Promise((resolve) => {
      const t = setTimeout(() => {
        this.readyWaiters = this.readyWaiters.filter((f) => f !== done);
        resolve(false);
      }, timeoutMs);
      const done = (v) => {
        clearTimeout(t);
        resolve(v);
      };
      this.readyWaiters.push(done);
    });
  }

  close() {
    if (this.closed) return Promise.resolve();
    const p = new Promise((resolve) => this.closeWaiters.push(resolve));
    if (!this.draining) this.drainBegin();
    this.pump();
    return p;
  }

  stats() {
    const conns = this.groups.flatMap((g) => g.conns);
    return {
      connections: conns.filter((k) => k.state !== RETIRED).length,
      connectionsReady: this.readyCount,
      connectAttempts: this.st.connectAttempts,
      handshakes: this.st.handshakes,
      authFailures: this.st.authFailures,
      moved: this.st.moved,
      requestsWritten: this.st.requestsWritten,
      requestsInProgress: this.liveReq,
      releasesQueued: this.liveRel,
      compensations: this.st.compensations,
      compensationsDropped: this.st.compensationsDropped,
      indeterminate: this.st.indeterminate,
      leaderHint: this.seed.leaderHint,
      ringVersion: this.ring ? this.ring.version : 0n,
      rerouted: this.st.rerouted,
    };
  }

  // ---- outcomes ----

  decide(r, res) {
    if (r.decided) throw new Error('ticketing: a request decided twice');
    r.decided = true;
    if (r.type === 'R') {
      res.token = r.token;
      res.resent = r.resent;
    }
    if (res.outcome === 'INDETERMINATE') this.st.indeterminate++;
    if (r.comp) {
      const ok = res.outcome === 'RELEASED' || res.outcome === 'NOT_HELD';
      this.log(ok ? 2 : 1, `compensation release of ${r.key} token ${r.token}: ${res.outcome}`);
      return;
    }
    r.done(res);
  }

  // Gives back r's place in the bounds (the engine's own ring fetch has none).
  unbound(r) {
    if (r.type === 'R') this.liveRel--;
    else if (!r.fetch) this.liveReq--;
  }

  /** r is done with: give back its timer, its list and its place in the bounds. */
  free(r) {
    this.clearDeadline(r);
    if (r.list) r.list.remove(r);
    this.unbound(r);
  }

  /** Decides r, which is on no connection, with res. */
  end(r, res) {
    if (r.list) r.list.remove(r);
    this.clearDeadline(r);
    this.decide(r, res);
    this.unbound(r);
  }

  finish(r, outcome, reason = '') {
    this.end(r, result(outcome, { reason }));
  }

  accept(r) {
    this.setDeadline(r, r.submit + budgetMs(r.type, r.waitMs, this.cfg));
    this.enqueue(r, false);
  }

  // r goes onto a pending list of its group: the one it has, unless that
  // one is gone, else the one routing names.
  enqueue(r, front) {
    if (r.group === null || r.group.gone) r.group = this.route(r);
    const lst = r.type === 'R' ? r.group.pendingRel : r.group.pending;
    if (front) lst.pushFront(r);
    else lst.pushBack(r);
  }

  compensate(r, token) {
    if (this.liveRel >= this.cfg.releaseQueueMax) {
      this.st.compensationsDropped++;
      this.log(1, `late grant of ${r.key} token ${token} not released: release queue full (the lease will free it)`);
      return;
    }
    this.liveRel++;
    this.st.compensations++;
    this.log(2, `late grant of ${r.key} token ${token}: releasing it`);
    const c = new Req('R', r.key, 0, 0, token);
    c.comp = true;
    c.group = r.group; // the group that granted it
    c.slot = r.slot;
    c.submit = now();
    this.accept(c);
  }

  // A G for a pending acquire at or after the lease deadline counted from
  // its first write: the lease may be someone else's already, so the caller
  // must not enter. INDETERMINATE with reason "lease", and the token is
  // released at once as a known-token compensation.
  grantTooLate(r, token) {
    this.log(1, `grant of ${r.key} token ${token} came after its lease had run out`);
    this.compensate(r, token);
    return result('INDETERMINATE', { reason: 'lease' });
  }

  zombie(r, t) {
    let until = t + ZOMBIE_LINGER_MS;
    if (r.type === 'A' && r.wire === SENT) until += r.waitSentMs;
    this.setDeadline(r, until, false);
  }

  onSent(r, at) {
    r.wire = SENT;
    if (r.sent !== null && r.type === 'R') r.resent = true;
    r.sent = at;
    this.st.requestsWritten++;
    if (!r.decided && r.type === 'A') this.setDeadline(r, at + r.waitSentMs + this.cfg.responseGraceMs);
  }

  onResponse(r, rsp, t) {
    if (r.decided) {
      if (r.type === 'A' && rsp.type === 'G') this.compensate(r, rsp.token);
      this.free(r);
      return;
    }
    let res;
    switch (rsp.type) {
      case 'G': {
        // The lease counts from the commit; the first write is earlier.
        const end = r.sent + r.leaseMs;
        res = t >= end ? this.grantTooLate(r, rsp.token)
          : result('ACQUIRED', { token: rsp.token, leaseDeadline: end });
        break;
      }
      case 'Q':
        res = result('ANSWERED', { token: rsp.token, held: rsp.owner !== null, owner: rsp.owner,
          waiters: rsp.waiters });
        break;
      case 'P':
        res = result('ANSWERED', { rtt: Math.max(0, t - r.sent) });
        break;
      case 'S':
        res = result('ANSWERED', { ringVersion: r.ringVersion, body: r.ringBody.join(';') });
        r.ringBody = null;
        break;
      case 'W':
        // Definite: the group changed nothing, so the request may go again
        // (a release too: nothing is held there to release).
        this.onWrong(r, rsp, t);
        return;
      case 'E':
        res = result('INVALID', { reason: rsp.text.slice(0, 15) });
        break;
      default:
        res = result({ T: 'TIMEOUT', B: 'BUSY', R: 'RELEASED', N: 'NOT_HELD' }[rsp.type]);
    }
    this.clearDeadline(r);
    this.decide(r, res);
    this.unbound(r);
  }

  onConnLost(r) {
    const sent = r.wire === SENT;
    r.wire = NONE;
    r.conn = null;
    if (r.decided) {
      this.free(r); // a zombie: its answer is gone with the connection
    } else if (!sent || r.type !== 'A') {
      // Not one byte written: the same request may go elsewhere. A written
      // release or read is safe to repeat.
      r.neutered = false;
      this.enqueue(r, true);
    } else {
      // Written, no answer: nobody knows whether it was granted. Never
      // resent; an M or a close is no ground for it.
      this.finish(r, 'INDETERMINATE');
    }
  }

  // The outcome of an undecided r whose budget has ended.
  endResult(r) {
    // Answered W and not written anywhere since: nothing was done.
    if (r.wrongGroup !== null && r.sent === null) return this.wrongResult(r);
    if (r.type === 'R') return result('UNCONFIRMED');
    if (r.type === 'A' && r.wire === SENT) return result('INDETERMINATE');
    return result('UNAVAILABLE');
  }

  expire(r, t) {
    if (r.decided) {
      // The linger of a zombie ended: forget its id.
      if (r.conn) r.conn.dropSlot(r);
      this.free(r);
      return;
    }
    const res = this.endResult(r);
    if (r.wire === NONE) {
      this.end(r, res);
      return;
    }
    if (r.wire === QUEUED) r.conn.neuter(r);
    this.decide(r, res);
    this.zombie(r, t);
  }

  // ---- routing ----

  // The group r goes to: by its key's slot in the ring for an acquire,
  // release or query (the seed while there is no ring, or for a slot the
  // ring gives nobody: its W then says so); the seed for a ping or ring.
  route(r) {
    if (r.type === 'P' || r.type === 'S' || this.ring === null) return this.seed;
    if (r.slot < 0) r.slot = P.slotOf(r.key);
    const e = G.groupOf(this.ring, r.slot);
    return e === null ? this.seed : this.groupOfEntry(e);
  }

  // The group of a ring entry: its connections are made on its first use.
  groupOfEntry(e) {
    if (e.group === null) {
      e.group = new Group(this, e.name, e.addrs, false);
      this.groups.push(e.group);
      this.log(2, `${e.group.label}: connecting to ${e.addrs.join(',')}`);
    }
    return e.group;
  }

  wrongResult(r) {
    return result('WRONG_GROUP', { slot: r.wrongSlot, ringVersion: r.wrongVersion });
  }

  // r was answered W (it is on no connection now). It waits for the ring of
  // the group that answered, then goes where that says (resend), within its
  // budget: an acquire's is the one of an unsent acquire again.
  onWrong(r, rsp, t) {
    r.wrongGroup = r.group;
    r.wrongSlot = rsp.slot;
    r.wrongVersion = rsp.version;
    if (r.slot < 0) r.slot = P.slotOf(r.key); // routed by the client's own slot, as every request
    r.sent = null; // a resend is a new request: its lease counts from its own first write
    r.neutered = false;
    if (r.type === 'A') this.setDeadline(r, r.submit + budgetMs('A', r.waitMs, this.cfg));
    if (t >= r.deadline) {
      this.end(r, this.wrongResult(r));
      return;
    }
    this.ringWait.pushBack(r);
    this.fetchRing(r.group);
  }

  // Asks g for its ring, unless a fetch is in progress already (the
  // requests answered W meanwhile wait for that one).
  fetchRing(g) {
    if (this.fetching !== null || this.closed) return;
    const f = new Req('S');
    f.fetch = true;
    f.group = g;
    f.submit = now();
    f.done = (res) => this.onRingFetched(f, res);
    this.fetching = f;
    this.setDeadline(f, f.submit + budgetMs('S', 0, this.cfg));
    g.pending.pushFront(f);
    this.pump();
  }

  onRingFetched(f, res) {
    if (this.fetching === f) this.fetching = null;
    if (this.closed) return;
    if (res.outcome === 'ANSWERED') {
      this.takeRing(res.ringVersion, res.body, f.group);
    } else {
      this.log(1, `ring of ${f.group.label}: ${res.outcome}; routing by ring version ` +
        `${this.ring ? this.ring.version : 0n}`);
    }
    const t = now();
    while (this.ringWait.length) this.resend(this.ringWait.shift(), t);
    this.pump();
  }

  // Keeps the ring of version and body if it is newer than the one routed
  // by (never an older one).
  takeRing(version, body, from) {
    if (!G.newer(this.ring ? this.ring.version : 0n, version)) return;
    let ring;
    try {
      ring = G.parseRing(version, body);
    } catch (err) {
      this.log(1, `ring version ${version} of ${from.label} not taken: ${err.message}`);
      return;
    }
    // A group keeps its connections into the new ring when the ring names
    // it with the same addresses; the group with a configured address is
    // the seed.
    const si = G.seedIndex(ring, this.configured);
    for (let i = 0; i < ring.groups.length; i++) {
      const e = ring.groups[i];
      e.group = i === si ? this.seed : this.groups.find((g) => !g.seed && !g.gone && g.name === e.name &&
        G.sameAddrs(g.addrs, e.addrs)) || null;
      if (e.group !== null) e.group.stale = false;
    }
    if (si >= 0) this.seed.name = ring.groups[si].name;
    this.ring = ring;
    this.log(2, `ring version ${version} from ${from.label}: ${ring.groups.length} groups`);
    // A group the ring no longer names takes no new request: what waits for
    // its connections goes where the ring says, and its connections close
    // once nothing is in flight there (pumpNow). Bounded: past STALE_MAX
    // such groups the oldest closes at once (its written acquires end
    // INDETERMINATE, as on any lost connection).
    for (const g of this.groups) {
      if (g.seed || g.stale || ring.groups.some((e) => e.group === g)) continue;
      g.stale = true;
      this.rerouteWaiting(g);
    }
    const stale = this.groups.filter((g) => g.stale);
    while (stale.length > STALE_MAX) {
      const g = stale.shift();
      this.log(1, `${g.label}: closed (too many groups the ring no longer names)`);
      g.close();
      this.rerouteWaiting(g);
    }
    this.groups = this.groups.filter((g) => !g.gone);
  }

  // What waits for a connection of g goes to the group routing names now.
  rerouteWaiting(g) {
    for (const lst of [g.pendingRel, g.pending]) {
      const rs = [];
      while (lst.length) rs.push(lst.shift());
      for (const r of rs) {
        r.group = null;
        this.enqueue(r, false);
      }
    }
  }

  // r, answered W, goes to the group the ring names for its slot now: at
  // once if that is another group than the one that answered, after a
  // pause if it is the same one; WRONG_GROUP at once if the ring names none.
  resend(r, t) {
    const e = G.groupOf(this.ring, r.slot);
    if (e === null) {
      this.end(r, this.wrongResult(r));
      return;
    }
    const g = this.groupOfEntry(e);
    r.pauseMs = G.resendPause(g === r.wrongGroup, r.pauseMs);
    if (r.pauseMs === 0) {
      this.requeue(r, g);
      return;
    }
    this.paused.pushBack(r);
    r.pauseTimer = setTimeout(this.onPause, r.pauseMs, r);
    r.pauseTimer.unref(); // the deadline timer keeps the process alive
  }

  onPause = (r) => {
    r.pauseTimer = null;
    if (r.decided || r.list !== this.paused) return;
    this.paused.remove(r);
    const e = G.groupOf(this.ring, r.slot);
    if (e === null) this.end(r, this.wrongResult(r));
    else this.requeue(r, this.groupOfEntry(e));
    this.pump();
  };

  requeue(r, g) {
    r.group = g;
    this.st.rerouted++;
    (r.type === 'R' ? g.pendingRel : g.pending).pushBack(r);
    this.pump();
  }

  // ---- the pump: requests onto connections, bytes onto sockets ----

  // Deferred to the loop's check phase: every socket event the loop has
  // already seen (a close above all) is handled before anything is
  // written, so a request is not written to a connection whose server end
  // is known to be gone.
  pump() {
    if (this.pumpScheduled || this.closed) return;
    this.pumpScheduled = true;
    setImmediate(this.pumpNow);
  }

  pumpNow = () => {
    this.pumpScheduled = false;
    if (this.closed) return;
    this.dispatch();
    for (const g of this.groups) {
      if (g.pending.length && g.tlsRefusedAll()) {
        while (g.pending.length) this.finish(g.pending.head, 'UNAVAILABLE', 'tls');
      }
    }
    for (const g of this.groups) for (const k of g.conns) k.flush();
    if (this.groups.some((g) => g.stale && g.idle())) {
      for (const g of this.groups) if (g.stale && g.idle()) g.close();
      this.groups = this.groups.filter((g) => !g.gone);
    }
    if (this.draining && (now() >= this.drainDeadline || this.liveRel === 0)) this.finalSweep();
  };

  dispatch() {
    const t = now();
    for (const g of this.groups) {
      for (const lst of [g.pendingRel, g.pending]) {
        while (lst.length) {
          const k = g.pickConn();
          if (!k) break;
          k.queue(lst.shift(), t);
        }
      }
    }
  }

  drainBegin() {
    const t = now();
    this.draining = true;
    this.drainDeadline = t + RELEASE_DEADLINE_MS;
    this.drainTimer = setTimeout(() => this.pump(), RELEASE_DEADLINE_MS + 1);
    for (const lst of [this.ringWait, this.paused]) {
      for (let r = lst.head, next; r; r = next) {
        next = r.next;
        if (r.type !== 'R') this.finish(r, 'CANCELLED', 'shutdown');
      }
    }
    for (const g of this.groups) {
      while (g.pending.length) this.finish(g.pending.head, 'CANCELLED', 'shutdown');
    }
    for (const g of this.groups) {
      for (const k of g.conns) {
        for (const r of [...k.slots.values()]) {
          if (!r.decided && r.type !== 'R') {
            if (r.wire === QUEUED) k.neuter(r);
            this.decide(r, result('CANCELLED', { reason: 'shutdown' }));
            this.zombie(r, t);
          }
        }
      }
    }
  }

  finalSweep() {
    this.closed = true;
    clearTimeout(this.drainTimer);
    for (const g of this.groups) for (const k of g.conns) k.retire();
    const last = (r) => (r.type === 'R' ? this.endResult(r) : result('CANCELLED', { reason: 'shutdown' }));
    for (const g of this.groups) {
      while (g.pendingRel.length) this.end(g.pendingRel.head, last(g.pendingRel.head));
      while (g.pending.length) this.end(g.pending.head, last(g.pending.head));
    }
    for (const lst of [this.ringWait, this.paused]) {
      while (lst.length) this.end(lst.head, last(lst.head));
    }
    for (const f of this.readyWaiters) f(false);
    this.readyWaiters = [];
    const w = this.closeWaiters;
    this.closeWaiters = [];
    for (const f of w) f();
  }
}
