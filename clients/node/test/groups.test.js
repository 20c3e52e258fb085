// Groups and slots (SPEC 15): W, a definite WRONG_GROUP, and the ring of S in
// its one-line and multi-line forms. A scripted server gives the answers a
// real ticketingd cannot be made to give (a ring in parts, parts out of
// order); a real ticketingd of a named group without a ring gives W.

import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Client, TicketingError, slot } from '../index.js';
import * as P from '../lib/proto.js';
import { Server, NODEDIR } from './support.js';

const T = { timeout: 20000 };
const SECRET = 'groups-test-secret-0123456789abcdef';

// A server that does the real handshake with SECRET (so the client believes
// it), answers the probe "P 0", and answers every other request line with
// the lines script(line) gives (none: no answer). It records the request
// lines it reads.
class Fake {
  constructor(script) {
    this.script = script;
    this.lines = [];
    this.socks = new Set();
    this.server = net.createServer((s) => this.accept(s));
  }

  async start() {
    await new Promise((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.addr = `127.0.0.1:${this.server.address().port}`;
    return this;
  }

  accept(s) {
    this.socks.add(s);
    s.on('close', () => this.socks.delete(s));
    s.on('error', () => {});
    s.setEncoding('latin1');
    const snonce = P.newNonce();
    s.write(`TICKETING/1 ${snonce}\n`);
    let buf = '';
    let authed = false;
    s.on('data', (d) => {
      buf += d;
      let nl;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        if (!authed) {
          const w = line.split(' ');
          s.write(`OK ${P.proof(Buffer.from(SECRET), 'server', snonce, w[1])} ${'ab'.repeat(8)} ${'cd'.repeat(16)}\n`);
          authed = true;
        } else if (line === 'P 0') {
          s.write('P 0\n');
        } else {
          this.lines.push(line);
          const out = this.script(line);
          if (out.length) s.write(out.map((l) => `${l}\n`).join(''));
        }
      }
    });
  }

  linesOf(type) {
    return this.lines.filter((l) => l[0] === type);
  }

  async stop() {
    for (const s of this.socks) s.destroy();
    await new Promise((resolve) => this.server.close(resolve));
  }
}

const idOf = (line) => line.split(' ')[1];

// W for an A, Q or R line: the slot of the key in the line, the given version.
const wrong = (version) => (line) => {
  const w = line.split(' ');
  return [`W ${w[1]} ${slot(w[2])} ${version}`];
};

async function withFake(script, opts, fn) {
  const f = await new Fake(script).start();
  const c = new Client({ addrs: f.addr, secret: SECRET, owner: 'node-groups', requestTimeoutMs: 3000,
    backoffMinMs: 20, backoffMaxMs: 100, ...opts });
  try {
    await fn(c, f);
  } finally {
    await c.close();
    await f.stop();
  }
}

async function rejects(promise, code) {
  const err = await promise.then(() => null, (e) => e);
  assert.ok(err instanceof TicketingError, `wanted a TicketingError ${code}, got ${err}`);
  assert.equal(err.code, code, err.message);
  return err;
}

describe('W: WRONG_GROUP', () => {
  it('is definite for acquire and query, with the slot and an exact u64 ring version', T, async () => {
    await withFake(wrong('18446744073709551615'), {}, async (c, f) => {
      const a = await rejects(c.acquire('show-42', { lease: 30000, wait: 1000 }), 'WRONG_GROUP');
      assert.equal(a.slot, 11909);
      assert.equal(a.ringVersion, 18446744073709551615n);
      assert.equal(a.op, 'acquire');
      const q = await rejects(c.query('a'), 'WRONG_GROUP');
      assert.equal(q.slot, 11404);
      const st = c.stats();
      assert.equal(st.indeterminate, 0, 'W is definite');
      assert.equal(st.compensations, 0);
      assert.equal(f.lines.length, 2, `one line each, nothing resent: ${f.lines}`);
    });
  });

  it('ends a release at once: neither retried nor kept in the release queue', T, async () => {
    await withFake(wrong('4'), {}, async (c, f) => {
      const t0 = performance.now();
      const e = await rejects(c.release('show-42:seat-17', 17n), 'WRONG_GROUP');
      assert.ok(performance.now() - t0 < 3000, 'decided by the W, not by the 5 s deadline');
      assert.equal(e.slot, 10735);
      assert.equal(e.ringVersion, 4n);
      assert.equal(e.resent, false);
      assert.equal(c.stats().releasesQueued, 0, 'still queued after W');
      await sleep(400); // a retry, had there been one, would come in this time
      assert.deepEqual(f.linesOf('R').map((l) => l.replace(/^R \d+ /, 'R _ ')),
        ['R _ show-42:seat-17 node-groups 17'], 'a release answered W was sent again');
    });
  });

  it('comes from a ticketingd of a named group that has no ring', T, async () => {
    const srv = await Server.start({ extra: ['--group', 'sales-b'] });
    const c = new Client({ addrs: srv.addrs, secretFile: srv.secret, requestTimeoutMs: 3000 });
    try {
      const a = await rejects(c.acquire('show-42', { lease: 30000, wait: 1000 }), 'WRONG_GROUP');
      assert.equal(a.slot, 11909);
      assert.equal(a.ringVersion, 0n);
      assert.equal((await rejects(c.query('a'), 'WRONG_GROUP')).slot, 11404);
      assert.equal((await rejects(c.release('show-42:seat-17', 1), 'WRONG_GROUP')).slot, 10735);
      assert.equal(c.stats().releasesQueued, 0);
      assert.ok((await c.ping()) >= 0, 'the connection stays usable');
      assert.deepEqual(await c.ring(), { version: 0n, body: '-' });
      assert.equal(c.stats().indeterminate, 0);
    } finally {
      await c.close();
      await srv.stop();
    }
  });
});

describe('S: the ring', () => {
  it('in one line', T, async () => {
    const body = '0-8191=sales-a@10.0.0.1:7400,10.0.0.2:7400;8192-16383=sales-b@10.0.1.1:7400';
    await withFake((l) => [`S ${idOf(l)} 3 ${body}`], {}, async (c, f) => {
      assert.deepEqual(await c.ring(), { version: 3n, body });
      assert.equal(f.linesOf('S').length, 1);
    });
  });

  it('in three parts, joined by ";"', T, async () => {
    const v = '18446744073709551615';
    await withFake((l) => [`S ${idOf(l)} ${v} 1/3 0-99=a@h:1`, `S ${idOf(l)} ${v} 2/3 100-199=b@h:2;200-299=b@h:2`,
      `S ${idOf(l)} ${v} 3/3 300-16383=c@h:3`], {}, async (c, f) => {
      assert.deepEqual(await c.ring(),
        { version: 18446744073709551615n, body: '0-99=a@h:1;100-199=b@h:2;200-299=b@h:2;300-16383=c@h:3' });
      assert.equal(f.linesOf('S').length, 1, 'the answer was taken whole, not asked again');
    });
  });

  it('refuses parts out of order, or a ring that changes mid-answer', T, async () => {
    const cases = [
      ['5 1/3 a', '5 3/3 c'],
      ['5 2/3 b', '5 1/3 a', '5 3/3 c'],
      ['5 1/2 a', '5 1/2 a', '5 2/2 b'],
      ['5 1/3 a', '5 2/2 b'],
      ['5 1/2 a', '5 b'],
      ['5 1/2 a', '6 2/2 b'],
    ];
    for (const parts of cases) {
      await withFake((l) => parts.map((p) => `S ${idOf(l)} ${p}`), { requestTimeoutMs: 800 }, async (c, f) => {
        await rejects(c.ring(), 'UNAVAILABLE');
        assert.match(c.lastError(), /protocol: /, `${parts}: ${c.lastError()}`);
        assert.ok(f.linesOf('S').length >= 2, 'the connection was closed and the read resent');
      });
    }
    await withFake((l) => [`S ${idOf(l)} 5 0/2 a`], { requestTimeoutMs: 800 }, async (c) => {
      await rejects(c.ring(), 'UNAVAILABLE');
      assert.match(c.lastError(), /malformed/);
    });
  });

  it('of a plain ticketingd: version 0, no ranges', T, async () => {
    const srv = await Server.start();
    const c = new Client({ addrs: srv.addrs, secretFile: srv.secret, requestTimeoutMs: 3000 });
    try {
      assert.deepEqual(await c.ring(), { version: 0n, body: '-' });
      const l = await c.acquire('show-42', { lease: 30000, wait: 0 });
      assert.ok(l.token > 0n);
      await l.release();
    } finally {
      await c.close();
      await srv.stop();
    }
  });
});

describe('the driver', () => {
  it('answers ring, and reports WRONG_GROUP with slot and ring_version', T, async () => {
    const srv = await Server.start({ extra: ['--group', 'sales-b'] });
    const d = spawn(process.execPath, [join(NODEDIR, 'driver.js'), '--addrs', srv.addrs, '--secret-file', srv.secret,
      '--owner', 'drv-groups'], { stdio: ['pipe', 'pipe', 'inherit'] });
    let buf = '';
    const waiting = [];
    d.stdout.setEncoding('utf8');
    d.stdout.on('data', (x) => {
      buf += x;
      let nl;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        waiting.shift()(line);
      }
    });
    const call = (cmd) => new Promise((resolve) => {
      waiting.push((line) => resolve(JSON.parse(line)));
      d.stdin.write(`${JSON.stringify(cmd)}\n`);
    });
    try {
      const a = await call({ op: 'acquire', key: 'show-42', lease_ms: 30000, wait_ms: 0 });
      assert.equal(a.outcome, 'WRONG_GROUP');
      assert.equal(a.token, 0);
      assert.equal(a.slot, 11909);
      assert.equal(a.ring_version, 0);
      const q = await call({ op: 'query', key: 'a' });
      assert.equal(q.outcome, 'WRONG_GROUP');
      assert.equal(q.slot, 11404);
      assert.equal(q.held, false);
      const r = await call({ op: 'release', key: 'show-42:seat-17', token: 1 });
      assert.equal(r.outcome, 'WRONG_GROUP');
      assert.equal(r.resent, false);
      assert.equal(r.slot, 10735);
      assert.equal(r.ring_version, 0);
      const p = await call({ op: 'ping' });
      assert.equal(p.outcome, 'ANSWERED');
      assert.equal(p.slot, undefined);
      const g = await call({ op: 'ring' });
      assert.equal(g.outcome, 'ANSWERED');
      assert.equal(g.version, 0);
      assert.equal(g.body, '-');
      assert.equal((await call({ op: 'stats' })).releases_queued, 0);
      assert.equal((await call({ op: 'close' })).outcome, 'OK');
      assert.equal(await new Promise((resolve) => d.once('exit', resolve)), 0);
    } finally {
      d.kill();
      await srv.stop();
    }
  });
});
