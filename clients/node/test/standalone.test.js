// The client against one real standalone ticketingd: every plain outcome,
// FIFO queueing and handoff, lease expiry, bad input refused before a byte
// is sent, AbortSignal, close, and the lease's async dispose.

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Client, Lease, TicketingError } from '../index.js';
import { Server, NODEDIR, closedAddr, eventually, writeSecret } from './support.js';

const T = { timeout: 20000 };
const asyncDispose = Symbol.asyncDispose ?? Symbol.for('nodejs.asyncDispose');

let srv;
const clients = [];

function client(extra = {}) {
  const c = new Client({ addrs: srv.addrs, secretFile: srv.secret, requestTimeoutMs: 3000, ...extra });
  clients.push(c);
  return c;
}

async function rejects(promise, code, reason) {
  const err = await promise.then(() => null, (e) => e);
  assert.ok(err instanceof TicketingError, `wanted a TicketingError ${code}, got ${err}`);
  assert.equal(err.code, code, err.message);
  if (reason !== undefined) assert.equal(err.reason, reason, err.message);
  return err;
}

before(async () => {
  srv = await Server.start();
});

after(async () => {
  await Promise.all(clients.map((c) => c.close()));
  await srv.stop();
});

describe('plain outcomes', () => {
  it('acquires, answers queries, releases; tokens only grow', T, async () => {
    const c = client({ owner: 'node-plain' });
    assert.equal(c.owner, 'node-plain');
    const l = await c.acquire('plain', { lease: 30000, wait: 1000 });
    assert.ok(l instanceof Lease);
    assert.equal(typeof l.token, 'bigint');
    assert.ok(l.token > 0n);
    assert.ok(l.remainingMs() > 29000 && l.remainingMs() <= 30000, `remaining ${l.remainingMs()}`);
    assert.deepEqual(await c.query('plain'), { key: 'plain', held: true, owner: 'node-plain', token: l.token, waiters: 0 });
    assert.deepEqual(await c.release(l), { outcome: 'RELEASED', resent: false });
    assert.deepEqual(await c.query('plain'), { key: 'plain', held: false, owner: null, token: 0n, waiters: 0 });
    await rejects(c.release('plain', l.token), 'NOT_HELD');
    const l2 = await c.acquire('plain', { lease: 30000, wait: 0 });
    assert.ok(l2.token > l.token, 'tokens only grow');
    await c.release('plain', String(l2.token)); // a token from an environment variable, say
    assert.ok((await c.ping()) >= 0);
    const st = c.stats();
    assert.equal(st.indeterminate, 0);
    assert.equal(st.compensations, 0);
    assert.equal(st.releasesQueued, 0);
    assert.equal(st.connections, 2, 'two connections to a single address');
  });

  it('BUSY at once with wait 0 on a held key; TIMEOUT after the wait', T, async () => {
    const c = client();
    const l = await c.acquire('busy', { lease: 30000, wait: 0 });
    let t0 = performance.now();
    await rejects(c.acquire('busy', { lease: 30000, wait: 0 }), 'BUSY');
    assert.ok(performance.now() - t0 < 1000, 'B returns at once');
    t0 = performance.now();
    await rejects(c.acquire('busy', { lease: 30000, wait: 300 }), 'TIMEOUT');
    const took = performance.now() - t0;
    assert.ok(took >= 300 && took < 2500, `TIMEOUT after ${took} ms`);
    await c.release(l);
  });

  it('queues FIFO and hands the key over on release, with larger tokens', T, async () => {
    const holder = client();
    const l = await holder.acquire('fifo', { lease: 30000, wait: 0 });
    const waiters = [client(), client(), client()];
    const order = [];
    const granted = [];
    for (const [i, w] of waiters.entries()) {
      granted.push(w.acquire('fifo', { lease: 30000, wait: 15000 }).then(async (g) => {
        order.push(i);
        await sleep(50);
        await w.release(g);
        return g.token;
      }));
      // Wait until the server has queued it, so the arrival order is known.
      const q = await eventually(async () => (await holder.query('fifo')).waiters === i + 1 || null, 5000);
      assert.ok(q, `waiter ${i} queued`);
    }
    await holder.release(l);
    const tokens = await Promise.all(granted);
    assert.deepEqual(order, [0, 1, 2], 'first come, first served');
    assert.ok(tokens[0] > l.token && tokens[1] > tokens[0] && tokens[2] > tokens[1], `tokens ${tokens}`);
    assert.equal((await holder.query('fifo')).held, false);
  });

  it('the lease frees the key and the next waiter gets it', T, async () => {
    const c = client();
    const l = await c.acquire('expiry', { lease: 1000, wait: 0 });
    const t0 = performance.now();
    const l2 = await c.acquire('expiry', { lease: 30000, wait: 10000 }); // not reentrant: queues
    const took = performance.now() - t0;
    assert.ok(took >= 500 && took < 5000, `granted after ${took} ms`);
    assert.ok(l2.token > l.token);
    await rejects(c.release(l), 'NOT_HELD');
    await c.release(l2);
  });
});

describe('bad input is refused before anything is sent', () => {
  it('with the C client reason words', T, async () => {
    const c = new Client({ addrs: await closedAddr(), secret: 'x'.repeat(16) });
    clients.push(c);
    const cases = [
      [() => c.acquire('', { lease: 30000, wait: 0 }), 'key'],
      [() => c.acquire('k'.repeat(251), { lease: 30000, wait: 0 }), 'key'],
      [() => c.acquire('bad key', { lease: 30000, wait: 0 }), 'key'],
      [() => c.acquire('caf\u00e9', { lease: 30000, wait: 0 }), 'key'],
      [() => c.acquire(undefined), 'key'],
      [() => c.acquire('k', { lease: 999, wait: 0 }), 'lease'],
      [() => c.acquire('k', { lease: 250001, wait: 0 }), 'lease'],
      [() => c.acquire('k', { lease: 1500.5, wait: 0 }), 'lease'],
      [() => c.acquire('k', { lease: '30000', wait: 0 }), 'lease'],
      [() => c.acquire('k', { lease: 30000, wait: -1 }), 'wait'],
      [() => c.acquire('k', { lease: 30000, wait: 250001 }), 'wait'],
      [() => c.release('k', 0), 'token'],
      [() => c.release('k', -5), 'token'],
      [() => c.release('k', 18446744073709551616n), 'token'],
      [() => c.release('k', 2 ** 60), 'token'],
      [() => c.release('', 5), 'key'],
      [() => c.query('a b'), 'key'],
    ];
    for (const [call, reason] of cases) {
      const t0 = performance.now();
      await rejects(call(), 'INVALID', reason);
      // Nothing listens at that address: had anything been sent, the call
      // would have waited its budget and ended UNAVAILABLE.
      assert.ok(performance.now() - t0 < 200, 'refused at once');
    }
    assert.equal(c.stats().requestsWritten, 0);
    assert.equal(c.stats().requestsInProgress, 0);
  });

  it('a bad owner, address, secret or number refuses the client itself', T, async () => {
    const ok = { addrs: srv.addrs, secretFile: srv.secret };
    const bad = [
      [{ ...ok, owner: 'web 7' }, 'owner'],
      [{ ...ok, owner: '' }, 'owner'],
      [{ ...ok, owner: 'o'.repeat(65) }, 'owner'],
      [{ ...ok, addrs: 'nowhere' }, 'addrs'],
      [{ ...ok, addrs: '' }, 'addrs'],
      [{ ...ok, addrs: Array(9).fill('127.0.0.1:1') }, 'addrs'],
      [{ addrs: srv.addrs, secret: 'too-short' }, 'secret'],
      [{ addrs: srv.addrs }, 'secret'],
      [{ ...ok, secretFile: '/nonexistent/secret' }, 'secret'],
      [{ ...ok, responseGraceMs: -1 }, 'config'],
      [{ ...ok, tlsCertFile: 'client.pem' }, 'tls'],
    ];
    for (const [conf, reason] of bad) {
      assert.throws(() => new Client(conf), (e) => e instanceof TicketingError && e.code === 'INVALID' &&
        e.reason === reason, JSON.stringify(conf));
    }
  });

  it('reads the secret file less one trailing newline', T, async () => {
    // The server's secret with "\r\n" added still matches; one more byte does not.
    const secret = (await import('node:fs')).readFileSync(srv.secret, 'utf8');
    const crlf = writeSecret(join(srv.tmp, 'crlf.secret'), `${secret}\r\n`);
    const good = client({ secretFile: crlf });
    assert.ok(await good.waitReady(5000));
    const wrong = client({ secretFile: undefined, secret: `${secret}x`, sendBudgetMinMs: 500 });
    const err = await rejects(wrong.acquire('wrong-secret', { lease: 30000, wait: 0 }), 'UNAVAILABLE');
    assert.match(err.detail, /authentication refused/);
    assert.ok(wrong.stats().authFailures >= 1);
  });
});

describe('unavailable', () => {
  it('no usable connection: UNAVAILABLE after the send budget, naming the cause', T, async () => {
    const c = new Client({ addrs: await closedAddr(), secretFile: srv.secret, sendBudgetMinMs: 400, requestTimeoutMs: 600 });
    clients.push(c);
    let t0 = performance.now();
    const err = await rejects(c.acquire('nowhere', { lease: 30000, wait: 0 }), 'UNAVAILABLE');
    assert.ok(performance.now() - t0 >= 400, 'the send budget floor');
    assert.match(err.message, /nothing was sent, definitely not acquired/);
    assert.match(err.detail, /connect: Connection refused/);
    t0 = performance.now();
    await rejects(c.ping(), 'UNAVAILABLE');
    assert.ok(performance.now() - t0 >= 600);
    assert.equal(c.stats().indeterminate, 0);
    assert.equal(c.stats().requestsWritten, 0);
  });
});

describe('AbortSignal', () => {
  it('an aborted wait in the queue is INDETERMINATE, and the late grant is released', T, async () => {
    const holder = client();
    const waiter = client();
    const l = await holder.acquire('abort-queued', { lease: 30000, wait: 0 });
    const ac = new AbortController();
    const p = waiter.acquire('abort-queued', { lease: 30000, wait: 10000, signal: ac.signal });
    assert.ok(await eventually(async () => (await holder.query('abort-queued')).waiters === 1), 'queued');
    const t0 = performance.now();
    ac.abort(new Error('the buyer left'));
    const err = await rejects(p, 'INDETERMINATE');
    assert.ok(performance.now() - t0 < 500, 'the abort ends the wait at once');
    assert.equal(err.cause.message, 'the buyer left');
    // The server still has it queued: the release hands the key to it, and
    // the client releases that grant at once.
    await holder.release(l);
    assert.ok(await eventually(async () => waiter.stats().compensations === 1 &&
      waiter.stats().releasesQueued === 0), 'one compensation');
    assert.equal((await holder.query('abort-queued')).held, false);
  });

  it('aborted before a byte was written: CANCELLED, nothing sent', T, async () => {
    const c = client();
    const ac = new AbortController();
    ac.abort();
    await rejects(c.acquire('abort-early', { lease: 30000, wait: 1000, signal: ac.signal }), 'CANCELLED');
    const off = new Client({ addrs: await closedAddr(), secretFile: srv.secret });
    clients.push(off);
    const ac2 = new AbortController();
    setTimeout(() => ac2.abort(), 200);
    const t0 = performance.now();
    await rejects(off.acquire('abort-early', { lease: 30000, wait: 5000, signal: ac2.signal }), 'CANCELLED');
    assert.ok(performance.now() - t0 < 1500);
    await rejects(off.query('abort-early', { signal: AbortSignal.timeout(100) }), 'CANCELLED');
    assert.equal(off.stats().requestsWritten, 0);
    assert.equal(off.stats().requestsInProgress, 0);
    assert.equal((await c.query('abort-early')).held, false);
  });
});

describe('the lease as a resource', () => {
  it('Symbol.asyncDispose releases once', T, async () => {
    const c = client();
    const l = await c.acquire('dispose', { lease: 30000, wait: 0 });
    assert.equal(typeof l[asyncDispose], 'function');
    await l[asyncDispose]();
    assert.equal((await c.query('dispose')).held, false);
    await l[asyncDispose](); // a second time changes nothing
    assert.equal(c.stats().releasesQueued, 0);
  });

  it('withLock releases when the work ends, and when it throws', T, async () => {
    const c = client();
    const v = await c.withLock('with', { lease: 30000, wait: 1000 }, async (l) => {
      assert.equal((await c.query('with')).token, l.token);
      return 'done';
    });
    assert.equal(v, 'done');
    assert.equal((await c.query('with')).held, false);
    await assert.rejects(c.withLock('with', async () => {
      throw new Error('work failed');
    }), /work failed/);
    assert.equal((await c.query('with')).held, false);
  });
});

describe('close', () => {
  it('ends pending acquires CANCELLED and waits for queued releases', T, async () => {
    const holder = client();
    const l = await holder.acquire('closing', { lease: 30000, wait: 0 });
    const c = new Client({ addrs: srv.addrs, secretFile: srv.secret });
    const mine = await c.acquire('closing-2', { lease: 30000, wait: 0 });
    const p = c.acquire('closing', { lease: 30000, wait: 10000 });
    p.catch(() => {}); // decided by the close below; looked at after it
    assert.ok(await eventually(async () => (await holder.query('closing')).waiters === 1));
    const rel = c.release(mine);
    await c.close();
    await rejects(p, 'CANCELLED', 'shutdown');
    assert.equal((await rel).outcome, 'RELEASED', 'the queued release went out before the close');
    assert.equal((await holder.query('closing-2')).held, false);
    await rejects(c.acquire('closing', { lease: 30000, wait: 0 }), 'CANCELLED', 'shutdown');
    await holder.release(l);
  });

  it('an idle client keeps no process alive', T, async () => {
    const script = `
      import { Client } from ${JSON.stringify(join(NODEDIR, 'index.js'))};
      const c = new Client({ addrs: ${JSON.stringify(srv.addrs)}, secretFile: ${JSON.stringify(srv.secret)} });
      const l = await c.acquire('idle-exit', { lease: 30000, wait: 1000 });
      await c.release(l);
      console.log('released ' + l.token);
    `;
    const t0 = performance.now();
    const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8', timeout: 10000 });
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stdout, /^released \d+/);
    assert.ok(performance.now() - t0 < 5000, 'exited without close()');
  });
});

describe('examples', () => {
  it('first_lock.js runs and releases', T, async () => {
    const r = spawnSync(process.execPath, [join(NODEDIR, 'examples', 'first_lock.js')], {
      encoding: 'utf8', timeout: 15000,
      env: { ...process.env, TICKETING_ADDR: srv.addrs, TICKETING_SECRET_FILE: srv.secret },
    });
    assert.equal(r.status, 0, r.stdout + r.stderr);
    assert.match(r.stdout, /^holding inventory\/sku-1 with token \d+, \d+ ms of lease left/);
    assert.match(r.stdout, /holding inventory\/sku-1 again with token \d+/);
    const c = client();
    assert.equal((await c.query('inventory/sku-1')).held, false);
  });
});

describe('the conformance driver', () => {
  it('answers each command with one JSON line, in order', T, async () => {
    const { spawn } = await import('node:child_process');
    const { createInterface } = await import('node:readline');
    const d = spawn(process.execPath, [join(NODEDIR, 'driver.js'), '--addrs', srv.addrs, '--secret-file', srv.secret,
      '--owner', 'drv-1', '--response-grace-ms', '1500'], { stdio: ['pipe', 'pipe', 'inherit'] });
    const lines = createInterface({ input: d.stdout })[Symbol.asyncIterator]();
    const ask = async (cmd) => {
      d.stdin.write(cmd + '\n');
      const { value } = await lines.next();
      return { raw: value, ...JSON.parse(value) };
    };
    const a = await ask('{"op":"acquire","key":"drv","lease_ms":30000,"wait_ms":0}');
    assert.equal(a.outcome, 'ACQUIRED');
    assert.match(a.raw, /"token":\d+,/, 'the token is a JSON integer');
    assert.equal(Number.isInteger(a.elapsed_ms), true);
    const q = await ask('{"op":"query","key":"drv"}');
    assert.equal(q.owner, 'drv-1');
    assert.equal(String(q.token), String(a.token));
    assert.equal((await ask('{"op":"acquire","key":"drv","lease_ms":30000,"wait_ms":0}')).outcome, 'BUSY');
    assert.equal((await ask(`{"op":"release","key":"drv","token":${a.token}}`)).outcome, 'RELEASED');
    const bad = await ask('{"op":"release","key":"drv","token":0}');
    assert.equal(bad.outcome, 'INVALID');
    assert.equal(bad.reason, 'token');
    assert.equal((await ask('{not json')).outcome, 'DRIVER_ERROR');
    assert.equal((await ask('[1,2]')).outcome, 'DRIVER_ERROR');
    assert.equal((await ask('{"op":"acquire","key":"k"}')).outcome, 'DRIVER_ERROR');
    assert.equal((await ask('{"op":"launch"}')).outcome, 'DRIVER_ERROR');
    const st = await ask('{"op":"stats"}');
    assert.deepEqual([st.outcome, st.indeterminate, st.compensations, st.releases_queued], ['OK', 0, 0, 0]);
    assert.equal((await ask('{"op":"close"}')).outcome, 'OK');
    const code = await new Promise((resolve) => (d.exitCode !== null ? resolve(d.exitCode) : d.once('exit', resolve)));
    assert.equal(code, 0);
  });
});
