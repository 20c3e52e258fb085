// Groups and slots (SPEC 15): W, a definite WRONG_GROUP, and the ring of S in
// its one-line and multi-line forms. A scripted server gives the answers a
// real ticketingd cannot be made to give (a ring in parts, parts out of
// order); a real ticketingd of a named group without a ring gives W.

import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { writeFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { Client, TicketingError, slot } from '../index.js';
import * as P from '../lib/proto.js';
import { Server, NODEDIR, ticketctl } from './support.js';

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

// W for an A, Q or R line: the slot of the key in the line, the given
// version; the ring the client then asks for (S) is none ("S <id> 0 -"), so
// the W is the outcome.
const wrong = (version) => (line) => {
  const w = line.split(' ');
  if (w[0] === 'S') return [`S ${w[1]} 0 -`];
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
      assert.equal(f.linesOf('A').length, 1, `the acquire was resent: ${f.lines}`);
      assert.equal(f.linesOf('Q').length, 1, `the query was resent: ${f.lines}`);
      assert.equal(f.linesOf('S').length, 2, `one ring fetch after each W: ${f.lines}`);
      assert.equal(st.rerouted, 0);
      assert.equal(st.ringVersion, 0n, 'a group without a ring gives the client none');
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

// Two scripted groups: the seed "a" owns slots 0-8191 and answers W for the
// others; "b" owns 8192-16383 and grants, releases and answers queries as
// held. Each one's ring (S) is ringA / ringB(b) (a function of both fakes).
const grantAll = (token) => (line) => {
  const w = line.split(' ');
  if (w[0] === 'A') return [`G ${w[1]} ${token}`];
  if (w[0] === 'R') return [`R ${w[1]}`];
  if (w[0] === 'Q') return [`Q ${w[1]} node-groups ${token} 0`];
  return [];
};

function group(owns, version, ring, grant) {
  return (line) => {
    const w = line.split(' ');
    if (w[0] === 'S') return [`S ${w[1]} ${ring()}`];
    if (w[0] === 'P') return [`P ${w[1]}`];
    return owns(slot(w[2])) ? grant(line) : [`W ${w[1]} ${slot(w[2])} ${version()}`];
  };
}

async function withGroups(scriptA, scriptB, opts, fn) {
  const b = await new Fake(() => []).start();
  const a = await new Fake(() => []).start();
  a.script = scriptA(a, b);
  b.script = scriptB(a, b);
  const c = new Client({ addrs: a.addr, secret: SECRET, owner: 'node-groups', requestTimeoutMs: 3000,
    backoffMinMs: 20, backoffMaxMs: 100, ...opts });
  try {
    await fn(c, a, b);
  } finally {
    await c.close();
    await a.stop();
    await b.stop();
  }
}

const halves = (a, b, v = 1) => `${v} 0-8191=sales-a@${a.addr};8192-16383=sales-b@${b.addr}`;
const low = (s) => s < 8192;
const high = (s) => s >= 8192;

describe('routing by the ring', () => {
  it('fetches the ring after a W, resends to the owner, then goes there directly', T, async () => {
    await withGroups((a, b) => group(low, () => 1, () => halves(a, b), grantAll(5)),
      (a, b) => group(high, () => 1, () => halves(a, b), grantAll(7)), {}, async (c, a, b) => {
        assert.equal((await c.acquire('show-4', { lease: 30000, wait: 1000 })).token, 5n, 'slot 725: the seed');
        let st = c.stats();
        assert.equal(st.ringVersion, 0n, 'no W yet: no ring');
        assert.equal(st.rerouted, 0);
        const l = await c.acquire('show-1', { lease: 30000, wait: 1000 });
        assert.equal(l.token, 7n, 'slot 14934: granted by sales-b');
        st = c.stats();
        assert.equal(st.ringVersion, 1n);
        assert.equal(st.rerouted, 1);
        assert.equal(a.linesOf('S').length, 1, 'the ring was asked of the group that answered W');
        assert.equal(b.linesOf('S').length, 0);
        assert.equal((await c.acquire('show-6', { lease: 30000, wait: 0 })).token, 7n);
        assert.equal((await c.query('show-1')).token, 7n);
        assert.deepEqual(await l.release(), { outcome: 'RELEASED', resent: false });
        assert.equal(c.stats().rerouted, 1, 'routed by the ring: no second W');
        assert.deepEqual(a.linesOf('A').map((x) => x.split(' ')[2]), ['show-4', 'show-1']);
        assert.deepEqual(b.linesOf('A').map((x) => x.split(' ')[2]), ['show-1', 'show-6']);
        assert.deepEqual(b.linesOf('R').map((x) => x.split(' ')[2]), ['show-1']);
        assert.equal(b.linesOf('Q').length, 1);
        // ping and ring ask the seed
        await c.ping();
        assert.equal((await c.ring()).version, 1n);
        assert.equal(a.linesOf('S').length, 2);
        assert.equal(b.linesOf('S').length, 0);
        assert.equal(c.stats().connections, 4, 'two connections to each group');
      });
  });

  it('resends a release answered W to the owner (resent stays false)', T, async () => {
    await withGroups((a, b) => group(low, () => 1, () => halves(a, b), grantAll(5)),
      (a, b) => group(high, () => 1, () => halves(a, b), grantAll(7)), {}, async (c, a, b) => {
        assert.deepEqual(await c.release('show-1', 7n), { outcome: 'RELEASED', resent: false });
        assert.equal(a.linesOf('R').length, 1);
        assert.equal(b.linesOf('R').length, 1);
        assert.equal(c.stats().rerouted, 1);
        assert.equal(c.stats().releasesQueued, 0);
      });
  });

  it('takes the seed group of the ring as the seed itself: no second set of connections', T, async () => {
    const ring = (a, b) => `1 0-8191=sales-a@127.0.0.1:1,${a.addr};8192-16383=sales-b@${b.addr}`;
    await withGroups((a, b) => group(low, () => 1, () => ring(a, b), grantAll(5)),
      (a, b) => group(high, () => 1, () => ring(a, b), grantAll(7)), {}, async (c, a) => {
        await c.acquire('show-1', { lease: 30000, wait: 1000 });
        await c.acquire('show-4', { lease: 30000, wait: 1000 });
        assert.equal(a.linesOf('A').length, 2, 'slot 725 went to the seed');
        assert.equal(c.stats().connections, 4, 'the seed 2, sales-b 2: none to 127.0.0.1:1');
      });
  });

  it('ends WRONG_GROUP at once when the ring names no group for the slot', T, async () => {
    await withGroups((a) => group(low, () => 1, () => `1 0-8191=sales-a@${a.addr}`, grantAll(5)),
      () => () => [], {}, async (c, a, b) => {
        const t0 = performance.now();
        const e = await rejects(c.acquire('show-1', { lease: 30000, wait: 5000 }), 'WRONG_GROUP');
        assert.ok(performance.now() - t0 < 1000, 'not after the budget');
        assert.equal(e.slot, 14934);
        assert.equal(e.ringVersion, 1n);
        assert.equal(c.stats().ringVersion, 1n);
        assert.equal(c.stats().rerouted, 0);
        assert.equal(b.lines.length, 0);
      });
  });

  it('never takes an older ring; resends to the same group pause 20 ms doubling, within the budget', T, async () => {
    // b answers W with version 5 and gives an older ring (2) that names a
    // for everything: the client keeps version 3 and goes on asking b.
    const times = [];
    await withGroups((a, b) => group(low, () => 3, () => halves(a, b, 3), grantAll(5)),
      (a) => {
        const inner = group(() => false, () => 5, () => `2 0-16383=sales-a@${a.addr}`, grantAll(7));
        return (line) => {
          if (line[0] === 'A') times.push(performance.now());
          return inner(line);
        };
      }, { sendBudgetMinMs: 700 }, async (c) => {
        const t0 = performance.now();
        const e = await rejects(c.acquire('show-1', { lease: 30000, wait: 0 }), 'WRONG_GROUP');
        const took = performance.now() - t0;
        assert.ok(took >= 690 && took < 1500, `the budget max(wait 0, sendBudgetMinMs 700): ${took} ms`);
        assert.equal(e.slot, 14934);
        assert.equal(e.ringVersion, 5n, "the last W's version");
        assert.equal(c.stats().ringVersion, 3n, 'the older ring was not taken');
        // sent to b at once after a's W, then after 20, 40, 80, 160, 200 ms...
        const gaps = times.slice(1).map((t, i) => t - times[i]);
        assert.ok(gaps.length >= 4, `resent ${gaps.length} times`);
        [20, 40, 80, 160, 200, 200].slice(0, gaps.length).forEach((p, i) => {
          assert.ok(gaps[i] >= p - 2, `pause ${i}: ${gaps[i]} ms, not at least ${p}`);
        });
        assert.equal(c.stats().rerouted, 1 + gaps.length);
        assert.equal(c.stats().requestsInProgress, 0);
      });
  });

  it('a query answered W keeps its requestTimeoutMs budget', T, async () => {
    await withGroups((a, b) => group(() => false, () => 1, () => halves(a, b), grantAll(5)),
      () => () => [], { requestTimeoutMs: 500 }, async (c) => {
        // a owns 0-8191 by its ring, yet answers W (a move in progress)
        const t0 = performance.now();
        const e = await rejects(c.query('show-4'), 'WRONG_GROUP');
        const took = performance.now() - t0;
        assert.ok(took >= 490 && took < 1300, `${took} ms`);
        assert.equal(e.slot, 725);
        assert.ok(c.stats().rerouted >= 2);
      });
  });

  it('a move in progress: W from the owner until it serves, each resend with the wait left', T, async () => {
    let frozen = 4;
    const times = [];
    await withGroups((a, b) => group(low, () => 1, () => halves(a, b), grantAll(5)),
      (a, b) => {
        const inner = group(high, () => 1, () => halves(a, b), grantAll(9));
        return (line) => {
          const w = line.split(' ');
          if (w[0] === 'A') times.push(performance.now());
          if (w[0] === 'A' && frozen > 0) {
            frozen--;
            return [`W ${w[1]} ${slot(w[2])} 1`];
          }
          return inner(line);
        };
      }, {}, async (c, a, b) => {
        const l = await c.acquire('show-1', { lease: 30000, wait: 20000 });
        assert.equal(l.token, 9n);
        assert.equal(c.stats().rerouted, 5, "one after a's W, four after b's");
        assert.equal(c.stats().indeterminate, 0);
        const waits = b.linesOf('A').map((x) => Number(x.split(' ')[5]));
        assert.equal(waits.length, 5);
        for (let i = 1; i < waits.length; i++) assert.ok(waits[i] < waits[i - 1], `waits sent: ${waits}`);
        assert.ok(waits[4] <= 20000 - (20 + 40 + 80 + 160), `waits sent: ${waits}`);
        // The last send came after b had read (and answered W to) the one
        // before: the lease counts from that last send, not the first.
        assert.ok(l.deadline - 30000 > times[3], 'the lease counts from the first write of the resend');
        await l.release();
      });
  });
});

describe('two real groups', () => {
  it('routes by slot, and follows a move of slots to the new owner', { timeout: 120000 }, async () => {
    const a = await Server.start({ n: 3, extra: ['--group', 'sales-a'] });
    let b = null;
    let c = null;
    try {
      b = await Server.start({ n: 3, extra: ['--group', 'sales-b'], like: a });
      const names = new Map([[a, 'sales-a'], [b, 'sales-b']]);
      const ringFile = (v, ranges) => {
        const path = join(a.tmp, `ring-${v}.txt`);
        writeFileSync(path, [`version ${v}`, ...ranges.map(([r, g]) => `${r}=${names.get(g)}@${g.addrs}`)].join('\n') + '\n');
        return path;
      };
      const r1 = ringFile(1, [['0-8191', a], ['8192-16383', b]]);
      for (const [g, name] of names) {
        const x = ticketctl(['ring', 'apply', r1, '--group', name, '--peers', g.peers, '--peer-secret-file', a.peerSecret,
          '--timeout', '20s']);
        assert.equal(x.status, 0, x.out);
      }
      c = new Client({ addrs: a.addrs, secretFile: a.secret, requestTimeoutMs: 3000 });
      const l4 = await c.acquire('show-4', { lease: 30000, wait: 1000 }); // slot 725: the seed's
      assert.equal(c.stats().ringVersion, 0n);
      const l1 = await c.acquire('show-1', { lease: 30000, wait: 1000 }); // slot 14934: sales-b's
      assert.equal(c.stats().ringVersion, 1n);
      assert.equal(c.stats().rerouted, 1);
      const q = await c.query('show-1');
      assert.equal(q.token, l1.token);
      assert.equal(q.owner, c.owner);
      await l1.release();
      await l4.release();
      const s1 = await c.acquire('seat-1', { lease: 30000, wait: 1000 }); // slot 9802: sales-b's
      await s1.release();
      assert.equal(c.stats().rerouted, 1, 'straight to sales-b by the ring');
      const r2 = ringFile(2, [['0-12287', a], ['12288-16383', b]]);
      const m = ticketctl(['slots', 'move', '8192-12287', '--group', 'sales-b', '--to', 'sales-a', '--ring', r2,
        '--peers', b.peers, '--to-peers', a.peers, '--peer-secret-file', a.peerSecret, '--wait', '30s'], 60000);
      assert.equal(m.status, 0, m.out);
      const s2 = await c.acquire('seat-1', { lease: 30000, wait: 1000 }); // W from sales-b, then sales-a
      assert.ok(s2.token > s1.token, `the moved key's tokens keep increasing: ${s1.token} then ${s2.token}`);
      const st = c.stats();
      assert.equal(st.ringVersion, 2n);
      assert.equal(st.rerouted, 2);
      assert.equal(st.indeterminate, 0);
      await s2.release();
      assert.equal((await c.ring()).version, 2n, 'the seed (sales-a) has the new ring');
    } finally {
      if (c) await c.close();
      if (b) await b.stop();
      await a.stop();
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
      const st = await call({ op: 'stats' });
      assert.equal(st.releases_queued, 0);
      assert.equal(st.ring_version, 0, 'the group has no ring');
      assert.equal(st.rerouted, 0);
      assert.equal((await call({ op: 'close' })).outcome, 'OK');
      assert.equal(await new Promise((resolve) => d.once('exit', resolve)), 0);
    } finally {
      d.kill();
      await srv.stop();
    }
  });
});
