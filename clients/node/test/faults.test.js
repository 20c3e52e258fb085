// The rules for what nobody can know, against a real standalone ticketingd
// behind a small fault proxy of this file: an answer held back, connections
// cut before and after a request was written, a grant that comes only after
// its lease, a grant that comes after the caller was told INDETERMINATE, a
// release resent after its connection died.

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { Client, TicketingError } from '../index.js';
import { Server, eventually } from './support.js';

const T = { timeout: 20000 };

// Forwards every connection to one node. hold() stops reading one side
// (its bytes wait in the kernel, as with a stalled peer); cutAll() closes
// every connection; refuse() accepts and closes at once.
class Proxy {
  constructor(port) {
    this.target = port;
    this.pairs = new Set();
    this.holdC2S = false;
    this.holdS2C = false;
    this.refusing = false;
    this.server = net.createServer((c) => this.accept(c));
  }

  listen() {
    return new Promise((resolve) => this.server.listen(0, '127.0.0.1', () => {
      this.addr = `127.0.0.1:${this.server.address().port}`;
      resolve(this);
    }));
  }

  accept(c) {
    if (this.refusing) {
      c.destroy();
      return;
    }
    const u = net.connect(this.target, '127.0.0.1');
    const pair = { c, u };
    this.pairs.add(pair);
    const end = () => {
      c.destroy();
      u.destroy();
      this.pairs.delete(pair);
    };
    c.on('data', (d) => u.write(d));
    u.on('data', (d) => c.write(d));
    for (const s of [c, u]) {
      s.on('error', end);
      s.on('close', end);
    }
    this.arm(pair);
  }

  arm({ c, u }) {
    if (this.holdC2S) c.pause();
    else c.resume();
    if (this.holdS2C) u.pause();
    else u.resume();
  }

  hold(c2s, s2c) {
    this.holdC2S = c2s;
    this.holdS2C = s2c;
    for (const p of this.pairs) this.arm(p);
  }

  cutAll() {
    for (const { c, u } of this.pairs) {
      c.destroy();
      u.destroy();
    }
    this.pairs.clear();
  }

  close() {
    this.cutAll();
    return new Promise((resolve) => this.server.close(resolve));
  }
}

let srv;
let direct; // the server's own view, past the proxies
const closers = [];

async function setup(extra = {}) {
  const p = await new Proxy(srv.nodes[0].port).listen();
  const c = new Client({ addrs: p.addr, secretFile: srv.secret, ...extra });
  closers.push(() => c.close(), () => p.close());
  await c.ping();
  return { p, c };
}

async function rejects(promise, code) {
  const err = await promise.then(() => null, (e) => e);
  assert.ok(err instanceof TicketingError, `wanted ${code}, got ${err}`);
  assert.equal(err.code, code, err.message);
  return err;
}

const held = async (key) => (await direct.query(key)).held;

before(async () => {
  srv = await Server.start();
  direct = new Client({ addrs: srv.addrs, secretFile: srv.secret });
});

after(async () => {
  for (const f of closers.reverse()) await f();
  await direct.close();
  await srv.stop();
});

describe('faults', () => {
  it('a grant that comes after its lease is INDETERMINATE "lease", and released at once', T, async () => {
    const { p, c } = await setup();
    p.hold(false, true);
    const t0 = performance.now();
    const pending = rejects(c.acquire('lease-late', { lease: 1000, wait: 10000 }), 'INDETERMINATE');
    assert.ok(await eventually(() => held('lease-late')), 'the server granted it; its G waits in the proxy');
    await sleep(1200 - (performance.now() - t0));
    p.hold(false, false);
    const err = await pending;
    assert.equal(err.reason, 'lease');
    assert.ok(performance.now() - t0 >= 1000);
    assert.ok(await eventually(async () => !(await held('lease-late'))), 'the client released it');
    const st = c.stats();
    assert.equal(st.compensations, 1);
    assert.equal(st.indeterminate, 1);
    assert.ok(await eventually(() => c.stats().releasesQueued === 0));
  });

  it('the answer held and the connections cut: INDETERMINATE, never ACQUIRED', T, async () => {
    const { p, c } = await setup();
    p.hold(false, true);
    const pending = rejects(c.acquire('cut', { lease: 1500, wait: 0 }), 'INDETERMINATE');
    assert.ok(await eventually(() => held('cut')), 'granted on the server');
    p.cutAll();
    p.hold(false, false);
    await pending;
    assert.equal(c.stats().indeterminate, 1);
    assert.ok(await eventually(async () => !(await held('cut')), 6000), 'the lease frees the key');
    const l = await c.acquire('cut', { lease: 30000, wait: 5000 }); // the client reconnected
    await c.release(l);
  });

  it('a grant after wait + grace is INDETERMINATE, then released when it comes', T, async () => {
    const { p, c } = await setup({ responseGraceMs: 300 });
    p.hold(false, true);
    const t0 = performance.now();
    await rejects(c.acquire('late', { lease: 60000, wait: 0 }), 'INDETERMINATE');
    assert.ok(performance.now() - t0 >= 300, 'not before wait + grace');
    assert.ok(await held('late'));
    p.hold(false, false);
    assert.ok(await eventually(async () => !(await held('late'))), 'freed long before its 60 s lease');
    assert.ok(await eventually(() => c.stats().compensations === 1));
  });

  it('connections cut before the write: the acquire waits, unwritten, and succeeds', T, async () => {
    const { p, c } = await setup();
    p.refusing = true;
    p.cutAll();
    await sleep(300); // lets the client see the close
    setTimeout(() => {
      p.refusing = false;
    }, 800);
    const l = await c.acquire('back', { lease: 30000, wait: 8000 });
    assert.equal((await direct.query('back')).token, l.token);
    await c.release(l);
    assert.equal(c.stats().indeterminate, 0);
  });

  it('a written release whose connection died is resent, and says so', T, async () => {
    const { p, c } = await setup();
    const l = await c.acquire('resent', { lease: 30000, wait: 0 });
    p.hold(true, false);
    const pending = c.release(l);
    await sleep(200); // written into the held connection
    p.cutAll();
    p.hold(false, false);
    assert.deepEqual(await pending, { outcome: 'RELEASED', resent: true });
    assert.equal(await held('resent'), false);
  });

  it('no answer to a release within 5 s: UNCONFIRMED, never success', T, async () => {
    const { p, c } = await setup();
    const l = await c.acquire('unconfirmed', { lease: 30000, wait: 0 });
    p.hold(false, true);
    const t0 = performance.now();
    const err = await rejects(c.release(l), 'UNCONFIRMED');
    assert.ok(performance.now() - t0 >= 5000, 'the absolute 5 s deadline');
    assert.ok(!err.resent);
    assert.equal(await held('unconfirmed'), false, 'though the server did release it');
    p.hold(false, false);
  });
});
