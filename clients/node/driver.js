#!/usr/bin/env node
// The conformance driver of the Node.js client (docs/testing.md, "Client
// conformance"):
//
//   node driver.js --addrs HOST:PORT[,HOST:PORT...] --secret-file PATH --owner NAME
//       [--response-grace-ms N] [--connect-timeout-ms N] [--send-budget-min-ms N]
//       [--request-timeout-ms N] [--backoff-min-ms N] [--backoff-max-ms N]
//       [--release-queue-max N] [--tls-ca-file PATH] [--tls-cert-file PATH]
//       [--tls-key-file PATH] [--tls-server-name NAME]
//
// Makes one Client for the whole session, then reads one JSON command per
// line on stdin and writes one JSON reply per line on stdout, in order,
// each with the C library's outcome name and elapsed_ms. The commands run
// one after another: a command is read while the previous one is pending
// only to be run after it, as the runner expects. A malformed command gets
// DRIVER_ERROR.

import { parseArgs } from 'node:util';
import { createInterface } from 'node:readline';
import { Client, TicketingError, slot } from './index.js';

const KNOBS = {
  'response-grace-ms': 'responseGraceMs',
  'connect-timeout-ms': 'connectTimeoutMs',
  'send-budget-min-ms': 'sendBudgetMinMs',
  'request-timeout-ms': 'requestTimeoutMs',
  'backoff-min-ms': 'backoffMinMs',
  'backoff-max-ms': 'backoffMaxMs',
  'release-queue-max': 'releaseQueueMax',
};
const TLS = {
  'tls-ca-file': 'tlsCaFile',
  'tls-cert-file': 'tlsCertFile',
  'tls-key-file': 'tlsKeyFile',
  'tls-server-name': 'tlsServerName',
};

class DriverError extends Error {}

function int(cmd, name) {
  const v = cmd[name];
  if (typeof v !== 'number' || !Number.isInteger(v)) throw new DriverError(`${name} must be an integer`);
  // JSON numbers beyond 2^53 have lost digits already: refuse them rather
  // than act on a different number.
  if (!Number.isSafeInteger(v)) throw new DriverError(`${name} is beyond 2^53, which JSON.parse cannot keep exact`);
  return v;
}

function str(cmd, name) {
  const v = cmd[name];
  if (typeof v !== 'string') throw new DriverError(`${name} must be a string`);
  return v;
}

// A WRONG_GROUP reply also carries the W line's slot and ring_version.
function wrong(err) {
  return err && err.code === 'WRONG_GROUP' ? { slot: err.slot, ring_version: err.ringVersion } : {};
}

// The outcome of a settled call: [outcome name, error or null].
async function outcome(promise, success) {
  try {
    return [success, null, await promise];
  } catch (e) {
    if (e instanceof TicketingError) return [e.code, e, undefined];
    throw e;
  }
}

async function handle(client, cmd) {
  switch (cmd.op) {
    case 'acquire': {
      const key = str(cmd, 'key');
      const lease = int(cmd, 'lease_ms');
      const wait = int(cmd, 'wait_ms');
      const [o, err, l] = await outcome(client.acquire(key, { lease, wait }), 'ACQUIRED');
      return { outcome: o, token: l ? l.token : 0n, reason: err ? err.reason : '', ...wrong(err) };
    }
    case 'release': {
      const key = str(cmd, 'key');
      const token = int(cmd, 'token');
      const [o, err, r] = await outcome(client.release(key, token), 'RELEASED');
      return { outcome: o, resent: r ? r.resent : err.resent, reason: err ? err.reason : '', ...wrong(err) };
    }
    case 'query': {
      const [o, err, q] = await outcome(client.query(str(cmd, 'key')), 'ANSWERED');
      return { outcome: o, held: q ? q.held : false, owner: q ? q.owner : null, token: q ? q.token : 0n,
        waiters: q ? q.waiters : 0, reason: err ? err.reason : '', ...wrong(err) };
    }
    case 'ping': {
      const [o, err] = await outcome(client.ping(), 'ANSWERED');
      return { outcome: o, reason: err ? err.reason : '' };
    }
    case 'ring': {
      const [o, err, g] = await outcome(client.ring(), 'ANSWERED');
      return { outcome: o, version: g ? g.version : 0n, body: g ? g.body : '', reason: err ? err.reason : '' };
    }
    case 'slot': {
      return { outcome: 'OK', slot: slot(str(cmd, 'key')) };
    }
    case 'sleep': {
      const ms = int(cmd, 'ms');
      if (ms < 0) throw new DriverError('ms must be >= 0');
      await new Promise((r) => setTimeout(r, ms)); // the client goes on meanwhile
      return { outcome: 'OK' };
    }
    case 'stats': {
      const s = client.stats();
      return { outcome: 'OK', compensations: s.compensations, indeterminate: s.indeterminate,
        moved: s.moved, releases_queued: s.releasesQueued, ring_version: s.ringVersion, rerouted: s.rerouted };
    }
    case 'close':
      await client.close();
      return { outcome: 'OK' };
    default:
      throw new DriverError(`unknown op ${JSON.stringify(cmd.op)}`);
  }
}

// JSON with bigints written as plain integers (tokens are u64).
function toJSON(obj) {
  return JSON.stringify(obj, (k, v) => (typeof v === 'bigint' ? `\u0000${v}\u0000` : v))
    .replace(/"\\u0000(\d+)\\u0000"/g, '$1');
}

function write(line) {
  return new Promise((resolve) => process.stdout.write(line + '\n', resolve));
}

async function main() {
  const options = { addrs: { type: 'string' }, 'secret-file': { type: 'string' }, owner: { type: 'string' } };
  for (const k of [...Object.keys(KNOBS), ...Object.keys(TLS)]) options[k] = { type: 'string' };
  let values;
  try {
    ({ values } = parseArgs({ options, strict: true }));
    if (!values.addrs || !values['secret-file'] || !values.owner) {
      throw new Error('--addrs, --secret-file and --owner are required');
    }
  } catch (e) {
    process.stderr.write(`ticketing-driver: ${e.message}\n`);
    process.exit(2);
  }
  const conf = { addrs: values.addrs, secretFile: values['secret-file'], owner: values.owner };
  for (const [flag, name] of Object.entries(KNOBS)) {
    if (values[flag] !== undefined) {
      if (!/^[0-9]+$/.test(values[flag])) {
        process.stderr.write(`ticketing-driver: --${flag} takes a number\n`);
        process.exit(2);
      }
      conf[name] = Number(values[flag]);
    }
  }
  for (const [flag, name] of Object.entries(TLS)) if (values[flag] !== undefined) conf[name] = values[flag];
  let client;
  try {
    client = new Client(conf);
  } catch (e) {
    process.stderr.write(`ticketing-driver: ${e.message}\n`);
    process.exit(2);
  }

  const rl = createInterface({ input: process.stdin, crlfDelay: Infinity });
  for await (const raw of rl) {
    const line = raw.trim();
    if (line === '') continue;
    const start = performance.now();
    let reply;
    let cmd = null;
    try {
      cmd = JSON.parse(line);
      if (cmd === null || typeof cmd !== 'object' || Array.isArray(cmd)) throw new DriverError('a command is a JSON object');
      reply = await handle(client, cmd);
    } catch (e) {
      if (!(e instanceof DriverError) && !(e instanceof SyntaxError)) throw e;
      reply = { outcome: 'DRIVER_ERROR', message: e.message };
      cmd = null;
    }
    reply.elapsed_ms = Math.floor(performance.now() - start);
    await write(toJSON(reply));
    if (cmd && cmd.op === 'close') process.exit(0);
  }
  await client.close();
  process.exit(0);
}

main().catch((e) => {
  process.stderr.write(`ticketing-driver: ${e.stack || e}\n`);
  process.exit(1);
});
