// The official Node.js client of Ticketing, a distributed FIFO lock service.
//
// It follows the rules of the C library libticketing (docs/client.md):
// connections kept in the background (two to a single address), the leader
// first and then round-robin, pipelined requests with ids, reconnects with a
// jittered backoff, the server's proof checked in the handshake, byte-level
// "sent" tracking (an acquire none of whose bytes was written is
// UNAVAILABLE; one that was written is never resent), compensation of late
// grants, and one bounded release queue with an absolute 5 s deadline per
// release. With several groups it routes each request by its key's slot to
// the group the ring names (learned from the seed group at the first W),
// one set of connections per group. Standard library only (net, tls,
// crypto).

import { readFileSync } from 'node:fs';
import { createSecureContext } from 'node:tls';
import * as P from './lib/proto.js';
import { Engine, Req, now } from './lib/engine.js';

// Node 20 names the symbol Symbol.for('nodejs.asyncDispose'); later
// versions have the well-known symbol. Either way `await using` (where the
// language has it) and explicit calls find the same method.
const asyncDispose = Symbol.asyncDispose ?? Symbol.for('nodejs.asyncDispose');

/** The outcome names of the C library; every error's `code` is one of them. */
export const Outcome = Object.freeze({
  ACQUIRED: 'ACQUIRED',
  TIMEOUT: 'TIMEOUT',
  BUSY: 'BUSY',
  INVALID: 'INVALID',
  UNAVAILABLE: 'UNAVAILABLE',
  INDETERMINATE: 'INDETERMINATE',
  CANCELLED: 'CANCELLED',
  RELEASED: 'RELEASED',
  NOT_HELD: 'NOT_HELD',
  UNCONFIRMED: 'UNCONFIRMED',
  QUEUE_FULL: 'QUEUE_FULL',
  ANSWERED: 'ANSWERED',
  WRONG_GROUP: 'WRONG_GROUP',
});

const MEANING = {
  TIMEOUT: 'the wait ran out before our turn; not acquired',
  BUSY: 'held and wait 0, or a server bound reached; not acquired',
  INVALID: 'refused: a field breaks the limits; nothing changed',
  UNAVAILABLE: 'no usable connection in time',
  INDETERMINATE: 'sent, no confirmed answer: maybe acquired, do not enter',
  CANCELLED: 'cancelled before an outcome',
  NOT_HELD: 'nothing held under exactly this key, owner and token',
  UNCONFIRMED: 'no answer before the 5 s release deadline: never assume success',
  QUEUE_FULL: 'the release queue is full; nothing was enqueued',
  WRONG_GROUP: "no group served the key's slot within the budget, or the ring names none; nothing was done",
};

/**
 * Every outcome that is not a success rejects with a TicketingError: `code`
 * is the outcome's name (BUSY, TIMEOUT, INVALID, UNAVAILABLE, INDETERMINATE,
 * CANCELLED, NOT_HELD, UNCONFIRMED, QUEUE_FULL, WRONG_GROUP), `reason` the
 * server's or the client's reason word ("key", "lease", "tls", "shutdown",
 * ...; "" when none), `detail` the last connection failure for UNAVAILABLE;
 * for WRONG_GROUP `slot` (the key's slot) and `ringVersion` (a bigint: the
 * version of the ring the group of the last W judged by, 0n for none), else
 * null.
 */
export class TicketingError extends Error {
  constructor(code, message, { op = '', key = '', reason = '', detail = '', resent = false, slot = null,
    ringVersion = null, cause } = {}) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = 'TicketingError';
    this.code = code;
    this.op = op;
    this.key = key;
    this.reason = reason;
    this.detail = detail;
    this.resent = resent;
    this.slot = slot;
    this.ringVersion = ringVersion;
  }
}

function errorOf(op, key, res, lastError, cause) {
  let msg = `ticketing: ${op}${key ? ` ${key}` : ''}: ${res.outcome}`;
  if (res.reason) msg += ` (${res.reason})`;
  if (res.outcome === 'INDETERMINATE' && res.reason === 'lease') {
    msg += ': granted only after the lease counted from the send had run out; do not enter (the client released it)';
  } else {
    msg += `: ${MEANING[res.outcome] || res.outcome}`;
  }
  let detail = '';
  if (res.outcome === 'UNAVAILABLE') {
    detail = lastError;
    if (op === 'acquire') msg += '; nothing was sent, definitely not acquired';
    if (lastError) msg += `; last connection error: ${lastError}`;
  }
  let slot = null, ringVersion = null;
  if (res.outcome === 'WRONG_GROUP') {
    slot = res.slot;
    ringVersion = res.ringVersion;
    msg += ` (slot ${slot}, ring version ${ringVersion})`;
  }
  return new TicketingError(res.outcome, msg, { op, key, reason: res.reason, detail, resent: res.resent,
    slot, ringVersion, cause });
}

function invalid(op, key, reason, what) {
  return new TicketingError('INVALID', `ticketing: ${op}${key ? ` ${key}` : ''}: INVALID (${reason}): ${what}`,
    { op, key: typeof key === 'string' ? key : '', reason });
}

function configError(reason, what) {
  return new TicketingError('INVALID', `ticketing: client configuration: INVALID (${reason}): ${what}`,
    { op: 'config', reason });
}

/** The number of slots keys are spread over (the protocol's groups and slots). */
export const SLOTS = P.SLOTS;

/**
 * The slot of key, 0..SLOTS-1: FNV-1a 64 of the key's bytes (as the client
 * sends them: Buffer.from(key)) modulo 16384, the same number in every
 * client and in the server. A pure function of any string, as in the other
 * clients: no client, no connection, no key check (acquire does that).
 */
export function slot(key) {
  if (typeof key !== 'string') throw new TypeError('ticketing: slot: the key must be a string');
  return P.slotOf(key);
}

/** A held lock. Pass `token` to every write it protects; finish before `deadline`. */
export class Lease {
  /** @internal */
  constructor(client, key, token, deadline) {
    this.key = key;
    /** The fencing token, a u64: exact as a bigint. */
    this.token = token;
    /** When the lease ends for certain, on the performance.now() clock (ms),
     * counted from the first write of the acquire (before the server's commit). */
    this.deadline = deadline;
    this.released = false;
    Object.defineProperty(this, 'client', { value: client, enumerable: false });
    Object.defineProperty(this, '_releasing', { value: null, writable: true, enumerable: false });
  }

  /** Milliseconds of lease left on this process's clock (negative: run out). */
  remainingMs() {
    return this.deadline - now();
  }

  /** Releases the lease (once; a second call resolves to the first result). */
  release(opts) {
    return this.client.release(this, opts);
  }

  /** `await using lease = await client.acquire(...)` releases at the end of the block. */
  [asyncDispose]() {
    // Released already: whoever did it has its outcome; the dispose only
    // waits for it.
    if (this._releasing) return this._releasing.then(() => undefined, () => undefined);
    return this.release().then(() => undefined);
  }
}

const DEFAULTS = {
  connectTimeoutMs: 5000,
  responseGraceMs: 2000,
  sendBudgetMinMs: 1000,
  requestTimeoutMs: 5000,
  releaseQueueMax: 1024,
  requestsMax: 65536,
  inflightPerConnectionMax: 4096,
  backoffMinMs: 100,
  backoffMaxMs: 3200,
};

function addrList(addrs) {
  let list = addrs;
  if (typeof list === 'string') list = list.split(',');
  if (!Array.isArray(list)) throw configError('addrs', 'addrs: "host:port,host:port" or an array of them');
  list = list.flatMap((a) => String(a).split(',')).map((a) => a.trim()).filter((a) => a !== '');
  if (list.length < 1 || list.length > P.ADDRS_MAX) {
    throw configError('addrs', `between 1 and ${P.ADDRS_MAX} addresses are needed, not ${list.length}`);
  }
  for (const a of list) {
    try {
      P.parseAddr(a);
    } catch (e) {
      throw configError('addrs', e.message);
    }
  }
  return list;
}

function readTls(path, what) {
  try {
    return readFileSync(path);
  } catch (e) {
    throw configError('tls', `${what} ${path}: ${e.message}`);
  }
}

export class Client {
  /**
   * @param {object} opts addrs ("host:port,host:port" or an array, at most
   *   8: the nodes of one group, the seed; the other groups' come from the
   *   ring); secretFile or secret (16-4096 bytes); owner (1-64 bytes
   *   0x21-0x7E, default unique); the numbers in milliseconds; TLS files;
   *   log(level, msg). Every group gets the same secret, owner, TLS and
   *   numbers.
   */
  constructor(opts = {}) {
    const addrs = addrList(opts.addrs);
    if ((opts.secretFile == null) === (opts.secret == null)) {
      throw configError('secret', 'give exactly one of secretFile and secret');
    }
    let secret;
    if (opts.secretFile != null) {
      try {
        secret = P.loadSecret(opts.secretFile);
      } catch (e) {
        throw configError('secret', `cannot read the secret file: ${e.message}`);
      }
    } else {
      secret = Buffer.from(opts.secret);
    }
    if (secret.length < P.SECRET_MIN || secret.length > P.SECRET_MAX) {
      throw configError('secret', `the secret must be ${P.SECRET_MIN}-${P.SECRET_MAX} bytes, not ${secret.length}`);
    }
    const owner = opts.owner == null ? P.defaultOwner() : opts.owner;
    if (!P.ownerOk(owner)) {
      throw configError('owner', 'owner: 1-64 bytes, each printable ASCII without space');
    }
    const cfg = {};
    for (const [k, d] of Object.entries(DEFAULTS)) {
      const v = opts[k];
      if (v == null || v === 0) cfg[k] = d;
      else if (Number.isSafeInteger(v) && v > 0) cfg[k] = v;
      else throw configError('config', `${k} must be a positive integer, not ${v}`);
    }
    if (cfg.backoffMinMs > cfg.backoffMaxMs) throw configError('config', 'backoffMinMs is above backoffMaxMs');
    let tlsOpts = null;
    if (opts.tlsCaFile == null) {
      if (opts.tlsCertFile != null || opts.tlsKeyFile != null || opts.tlsServerName != null) {
        // Nobody should believe a plaintext connection is encrypted.
        throw configError('tls', 'tlsCertFile, tlsKeyFile and tlsServerName need tlsCaFile (it turns TLS on)');
      }
    } else {
      if ((opts.tlsCertFile == null) !== (opts.tlsKeyFile == null)) {
        throw configError('tls', 'tlsCertFile and tlsKeyFile go together');
      }
      tlsOpts = { ca: readTls(opts.tlsCaFile, 'tlsCaFile') };
      if (!tlsOpts.ca.toString('latin1').includes('-----BEGIN CERTIFICATE-----')) {
        throw configError('tls', `tlsCaFile ${opts.tlsCaFile}: no PEM certificate`);
      }
      if (opts.tlsCertFile != null) {
        tlsOpts.cert = readTls(opts.tlsCertFile, 'tlsCertFile');
        tlsOpts.key = readTls(opts.tlsKeyFile, 'tlsKeyFile');
      }
      try {
        // Loads the files now, so that unusable ones fail here and not at
        // every connection attempt.
        createSecureContext(tlsOpts);
      } catch (e) {
        throw configError('tls', `TLS files cannot work: ${e.message}`);
      }
    }
    this._closed = false;
    this._e = new Engine({ addrs, secret, owner, cfg, tlsOpts, tlsServerName: opts.tlsServerName,
      tlsCaFile: opts.tlsCaFile, log: opts.log });
  }

  /** The owner name this client sends. */
  get owner() {
    return this._e.owner;
  }

  /** Runs one request to its result (never rejects). */
  _run(r, signal, onAbort) {
    return new Promise((resolve) => {
      let listener = null;
      r.done = (res) => {
        if (listener) signal.removeEventListener('abort', listener);
        resolve(res);
      };
      if (signal) {
        listener = () => onAbort(resolve);
        signal.addEventListener('abort', listener, { once: true });
      }
      this._e.submit(r);
    });
  }

  /**
   * Acquires key, waiting at most `wait` ms (0-250000; 0 = one immediate
   * try) for its turn, holding it at most `lease` ms (1000-250000). Resolves
   * to a Lease; rejects with a TicketingError: BUSY, TIMEOUT, UNAVAILABLE
   * (nothing was sent), CANCELLED (aborted before a byte was written): not
   * acquired. INDETERMINATE (written, no confirmed answer; or aborted after
   * it was written; or, reason "lease", granted only once the lease counted
   * from the first write had run out): maybe acquired, do not enter; a
   * grant that still comes is released by the client. WRONG_GROUP (every
   * group asked answered W until the budget ended, or the ring names no
   * group for the key's slot; err.slot, err.ringVersion of the last W): not
   * acquired, nothing was done. A request answered W goes again to the
   * group the ring names, within max(wait, sendBudgetMinMs) from the call.
   */
  async acquire(key, { lease = 30000, wait = 5000, signal } = {}) {
    if (!P.keyOk(key)) throw invalid('acquire', key, 'key', 'key: 1-250 bytes of 0x21-0x7E');
    if (!Number.isInteger(lease) || lease < P.LEASE_MS_MIN || lease > P.LEASE_MS_MAX) {
      throw invalid('acquire', key, 'lease', `lease: ${P.LEASE_MS_MIN}-${P.LEASE_MS_MAX} ms`);
    }
    if (!Number.isInteger(wait) || wait < 0 || wait > P.WAIT_MS_MAX) {
      throw invalid('acquire', key, 'wait', `wait: 0-${P.WAIT_MS_MAX} ms`);
    }
    if (signal?.aborted) {
      throw errorOf('acquire', key, { outcome: 'CANCELLED', reason: '' }, '', signal.reason);
    }
    const r = new Req('A', key, lease, wait);
    const res = await this._run(r, signal, () => this._e.cancel(r));
    if (res.outcome === 'ACQUIRED') return new Lease(this, key, res.token, res.leaseDeadline);
    const cause = signal?.aborted && (res.outcome === 'CANCELLED' || res.outcome === 'INDETERMINATE')
      ? signal.reason : undefined;
    throw errorOf('acquire', key, res, this._e.lastError, cause);
  }

  /**
   * Releases a Lease, or (key, token), through the release queue. Resolves
   * to {outcome: 'RELEASED', resent}; rejects with NOT_HELD, UNCONFIRMED (no
   * answer by the absolute 5 s deadline; never assume success), QUEUE_FULL,
   * INVALID or WRONG_GROUP (answered W, and no group took it again before
   * the 5 s deadline, or the ring names no group for the key's slot:
   * nothing was released). An AbortSignal stops the waiting only: the
   * release goes on in the queue, and the call rejects with UNCONFIRMED at
   * once.
   */
  async release(leaseOrKey, tokenOrOpts, maybeOpts) {
    let key, token, opts, lease = null;
    if (leaseOrKey instanceof Lease) {
      lease = leaseOrKey;
      key = lease.key;
      token = lease.token;
      opts = tokenOrOpts;
      if (lease._releasing) return lease._releasing;
    } else {
      key = leaseOrKey;
      token = tokenOrOpts;
      opts = maybeOpts;
    }
    const p = this._release(key, token, opts?.signal);
    if (lease) {
      lease._releasing = p;
      lease.released = true;
    }
    return p;
  }

  async _release(key, token, signal) {
    if (!P.keyOk(key)) throw invalid('release', key, 'key', 'key: 1-250 bytes of 0x21-0x7E');
    const t = P.tokenOf(token);
    if (t === null) throw invalid('release', key, 'token', 'token: an integer in 1..2^64-1');
    if (signal?.aborted) {
      throw errorOf('release', key, { outcome: 'UNCONFIRMED', reason: '' }, '', signal.reason);
    }
    const r = new Req('R', key, 0, 0, t);
    let aborted = false;
    const res = await this._run(r, signal, (resolve) => {
      aborted = true;
      resolve({ outcome: 'UNCONFIRMED', reason: '', resent: r.resent, token: t });
    });
    if (res.outcome === 'RELEASED') return { outcome: 'RELEASED', resent: res.resent };
    throw errorOf('release', key, res, this._e.lastError, aborted ? signal.reason : undefined);
  }

  /**
   * The committed holder of key (a linearizable read): {key, held, owner
   * (null when free), token (0n when free), waiters}. Rejects UNAVAILABLE
   * (no answer within requestTimeoutMs), INVALID, CANCELLED, WRONG_GROUP (as
   * an acquire's, within requestTimeoutMs).
   */
  async query(key, { signal } = {}) {
    if (!P.keyOk(key)) throw invalid('query', key, 'key', 'key: 1-250 bytes of 0x21-0x7E');
    if (signal?.aborted) throw errorOf('query', key, { outcome: 'CANCELLED', reason: '' }, '', signal.reason);
    const r = new Req('Q', key);
    const res = await this._run(r, signal, () => this._e.cancel(r));
    if (res.outcome === 'ANSWERED') {
      return { key, held: res.held, owner: res.owner, token: res.token, waiters: res.waiters };
    }
    throw errorOf('query', key, res, this._e.lastError, signal?.aborted ? signal.reason : undefined);
  }

  /** One round trip: its time in milliseconds. Rejects UNAVAILABLE, CANCELLED. */
  async ping({ signal } = {}) {
    if (signal?.aborted) throw errorOf('ping', '', { outcome: 'CANCELLED', reason: '' }, '', signal.reason);
    const r = new Req('P');
    const res = await this._run(r, signal, () => this._e.cancel(r));
    if (res.outcome === 'ANSWERED') return res.rtt;
    throw errorOf('ping', '', res, this._e.lastError, signal?.aborted ? signal.reason : undefined);
  }

  /**
   * The ring of the seed group (S), not the one the client routes by
   * (stats().ringVersion is that one's version): {version (a bigint, 0n for
   * no ring yet), body (the ranges joined by ";", the parts of a long answer
   * joined too; "-" when there are none)}. Not a linearizable read. Rejects
   * UNAVAILABLE (no answer within requestTimeoutMs), CANCELLED.
   */
  async ring({ signal } = {}) {
    if (signal?.aborted) throw errorOf('ring', '', { outcome: 'CANCELLED', reason: '' }, '', signal.reason);
    const r = new Req('S');
    const res = await this._run(r, signal, () => this._e.cancel(r));
    if (res.outcome === 'ANSWERED') return { version: res.ringVersion, body: res.body };
    throw errorOf('ring', '', res, this._e.lastError, signal?.aborted ? signal.reason : undefined);
  }

  /**
   * Acquires key, runs fn(lease), and releases, also when fn throws. If fn
   * throws, its error is what the call rejects with (the lease frees the key
   * if the release fails too); otherwise a failed release rejects the call.
   */
  async withLock(key, opts, fn) {
    if (typeof opts === 'function') {
      fn = opts;
      opts = {};
    }
    const lease = await this.acquire(key, opts);
    let value;
    try {
      value = await fn(lease);
    } catch (e) {
      await lease.release().catch(() => {});
      throw e;
    }
    await lease.release();
    return value;
  }

  /** Resolves true once a connection is usable, false after timeoutMs. */
  waitReady(timeoutMs = 5000) {
    return this._e.waitReady(timeoutMs);
  }

  /** The most recent connection failure, "addr: why" ("" if none yet). */
  lastError() {
    return this._e.lastError;
  }

  /** Counters, as the C library's tk_client_stats(); with ringVersion (a
   * bigint: the ring routed by, 0n before any) and rerouted (requests sent
   * again after a W). */
  stats() {
    return this._e.stats();
  }

  /**
   * Stops the client: acquires, queries, pings and rings not decided end CANCELLED
   * (reason "shutdown"); releases already queued keep their 5 s deadline
   * (close waits for them); then every connection closes.
   */
  close() {
    this._closed = true;
    return this._e.close();
  }

  [asyncDispose]() {
    return this.close();
  }
}
