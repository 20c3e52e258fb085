// Type declarations of the Ticketing Node.js client (hand-written; the
// client itself is plain JavaScript).

/** The outcome names of the C library. */
export declare const Outcome: Readonly<{
  ACQUIRED: 'ACQUIRED';
  TIMEOUT: 'TIMEOUT';
  BUSY: 'BUSY';
  INVALID: 'INVALID';
  UNAVAILABLE: 'UNAVAILABLE';
  INDETERMINATE: 'INDETERMINATE';
  CANCELLED: 'CANCELLED';
  RELEASED: 'RELEASED';
  NOT_HELD: 'NOT_HELD';
  UNCONFIRMED: 'UNCONFIRMED';
  QUEUE_FULL: 'QUEUE_FULL';
  ANSWERED: 'ANSWERED';
  WRONG_GROUP: 'WRONG_GROUP';
}>;

/** The outcomes a call rejects with (every one that is not a success). */
export type ErrorCode =
  | 'TIMEOUT'
  | 'BUSY'
  | 'INVALID'
  | 'UNAVAILABLE'
  | 'INDETERMINATE'
  | 'CANCELLED'
  | 'NOT_HELD'
  | 'UNCONFIRMED'
  | 'QUEUE_FULL'
  | 'WRONG_GROUP';

/** The one error class of the client: `code` says which outcome it is. */
export declare class TicketingError extends Error {
  readonly name: 'TicketingError';
  /** BUSY, TIMEOUT, UNAVAILABLE, CANCELLED: not acquired. INDETERMINATE:
   * maybe acquired, do not enter. INVALID: a field broke the limits, nothing
   * was sent. NOT_HELD, UNCONFIRMED, QUEUE_FULL: of a release.
   * WRONG_GROUP: of an acquire, release or query; answered W by every group
   * asked until the request's budget ended, or the ring names no group for
   * the key's slot: nothing was done (not acquired, nothing released). The
   * client itself sends a request answered W again to the group its ring
   * names, so this needs no routing by the caller. */
  readonly code: ErrorCode;
  /** "acquire", "release", "query", "ping", "ring", or "config" (the constructor). */
  readonly op: string;
  readonly key: string;
  /** The server's or the client's reason word: "key", "owner", "lease",
   * "wait", "token", "tls", "shutdown", "lease" (an INDETERMINATE grant that
   * came after its lease), "requests_max", "addrs", "secret", "config"...;
   * "" when none. */
  readonly reason: string;
  /** UNAVAILABLE: the last connection failure ("addr: why"), or "". */
  readonly detail: string;
  /** Release: the request was written more than once (its connection died). */
  readonly resent: boolean;
  /** WRONG_GROUP: the key's slot (0-16383), as the last W line says; else null. */
  readonly slot: number | null;
  /** WRONG_GROUP: the version of the ring the group of the last W judged
   * by (a u64, 0n: that group has no ring yet). Else null. */
  readonly ringVersion: bigint | null;
  /** An AbortSignal's reason, when the signal decided the outcome. */
  readonly cause?: unknown;
}

/** How many slots there are: 16384. */
export declare const SLOTS: 16384;

/** The slot of a key, from 0 to 16383: the key's bytes hashed with FNV-1a
 * 64 and taken modulo 16384. Every client and the server get the same
 * number for the same key. It needs no client, sends nothing and does not
 * check the key (acquire does); a key that is not a string throws a
 * TypeError. */
export declare function slot(key: string): number;

export interface AcquireOptions {
  /** Milliseconds the server holds the key at most: 1000-250000 (default 30000). */
  lease?: number;
  /** Milliseconds to wait for the turn: 0-250000; 0 = one immediate try (default 5000). */
  wait?: number;
  /** Aborting it before any byte was written: CANCELLED; after: INDETERMINATE
   * (and a grant that still comes is released by the client). */
  signal?: AbortSignal;
}

export interface SignalOption {
  signal?: AbortSignal;
}

/** A held lock. */
export declare class Lease {
  readonly key: string;
  /** The fencing token (u64, exact): pass it to every write the lock protects. */
  readonly token: bigint;
  /** When the lease ends for certain, on the performance.now() clock (ms),
   * counted from the first write of the acquire. */
  readonly deadline: number;
  /** True once release() (or the dispose) was called. */
  readonly released: boolean;
  /** Milliseconds of lease left (negative: it has run out). */
  remainingMs(): number;
  /** Releases it once; a second call returns the first call's promise. */
  release(opts?: SignalOption): Promise<ReleaseResult>;
  /** For `await using`: releases unless released already. */
  [Symbol.asyncDispose](): Promise<void>;
}

export interface ReleaseResult {
  outcome: 'RELEASED';
  resent: boolean;
}

export interface QueryResult {
  key: string;
  held: boolean;
  /** null when the key is free. */
  owner: string | null;
  /** 0n when the key is free. */
  token: bigint;
  waiters: number;
}

/** A group's ring, as its leader has applied it (not a linearizable read). */
export interface Ring {
  /** The ring's version (a u64, exact); 0n: the group has no ring yet. */
  version: bigint;
  /** The ranges, `<first>-<last>=<group>@<addr>[,<addr>...]`, joined by ";"
   * in increasing order (the parts of a multi-line answer joined too); "-"
   * when there are none. */
  body: string;
}

export interface Stats {
  connections: number;
  connectionsReady: number;
  connectAttempts: number;
  handshakes: number;
  authFailures: number;
  moved: number;
  requestsWritten: number;
  requestsInProgress: number;
  releasesQueued: number;
  compensations: number;
  compensationsDropped: number;
  indeterminate: number;
  /** The seed group's last leader hint (M). */
  leaderHint: string;
  /** The version of the ring the client routes by (a u64, exact); 0n
   * before any (every request then goes to the seed group). */
  ringVersion: bigint;
  /** How many times a request was sent again after a W. */
  rerouted: number;
}

export interface ClientOptions {
  /** "host:port,host:port" or a list ("[v6addr]:port" for IPv6), at most 8:
   * the nodes of one group (the seed). The client learns the other groups
   * from the ring at the first W, and connects to each on its first use with
   * the same secret, owner, TLS files and numbers. */
  addrs: string | string[];
  /** The client secret: a file (its bytes less one trailing newline)... */
  secretFile?: string;
  /** ...or the bytes themselves; 16-4096 bytes. Exactly one of the two. */
  secret?: string | Uint8Array;
  /** 1-64 bytes of 0x21-0x7E; default "<host>-<pid>-<12 random hex>". */
  owner?: string;
  /** One connection attempt: TCP, TLS, handshake and probe (5000). */
  connectTimeoutMs?: number;
  /** How long past the sent wait an acquire's answer is awaited (2000). */
  responseGraceMs?: number;
  /** Floor of an unsent acquire's budget (1000). */
  sendBudgetMinMs?: number;
  /** Budget of a query, ping or ring (5000). */
  requestTimeoutMs?: number;
  /** The release queue's bound (1024). */
  releaseQueueMax?: number;
  /** Acquires, queries and pings in progress (65536). */
  requestsMax?: number;
  /** Requests in flight on one connection (4096). */
  inflightPerConnectionMax?: number;
  /** Reconnect backoff, doubling from min to max, with jitter (100, 3200). */
  backoffMinMs?: number;
  backoffMaxMs?: number;
  /** Turns TLS on and verifies the servers with this CA. */
  tlsCaFile?: string;
  /** The client certificate and its key (together). */
  tlsCertFile?: string;
  tlsKeyFile?: string;
  /** The name checked in the servers' certificates; default the host dialled. */
  tlsServerName?: string;
  /** Connection events: level 0 error, 1 warning, 2 info, 3 debug. */
  log?: (level: number, message: string) => void;
}

export declare class Client {
  /** Checks the configuration (throws TicketingError INVALID) and starts
   * connecting in the background; it does not wait for a connection. */
  constructor(opts: ClientOptions);
  readonly owner: string;
  /** Resolves to a Lease; rejects with a TicketingError for every other outcome. */
  acquire(key: string, opts?: AcquireOptions): Promise<Lease>;
  /** Releases through the release queue. An aborted signal stops the
   * waiting only (UNCONFIRMED at once); the release goes on. */
  release(lease: Lease, opts?: SignalOption): Promise<ReleaseResult>;
  release(key: string, token: bigint | number | string, opts?: SignalOption): Promise<ReleaseResult>;
  /** The committed holder (a linearizable read). */
  query(key: string, opts?: SignalOption): Promise<QueryResult>;
  /** One round trip, in milliseconds. */
  ping(opts?: SignalOption): Promise<number>;
  /** The ring of the seed group (S), not the one routed by (see
   * stats().ringVersion): rejects UNAVAILABLE, CANCELLED like ping. */
  ring(opts?: SignalOption): Promise<Ring>;
  /** Acquires, runs fn, releases (also when fn throws). */
  withLock<T>(key: string, opts: AcquireOptions, fn: (lease: Lease) => T | Promise<T>): Promise<T>;
  withLock<T>(key: string, fn: (lease: Lease) => T | Promise<T>): Promise<T>;
  /** true once a connection is usable, false after timeoutMs (default 5000). */
  waitReady(timeoutMs?: number): Promise<boolean>;
  /** The most recent connection failure, "addr: why" ("" if none yet). */
  lastError(): string;
  stats(): Stats;
  /** Acquires, queries, pings and rings not decided end CANCELLED ("shutdown");
   * queued releases keep their 5 s deadline, which close waits for. */
  close(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}
