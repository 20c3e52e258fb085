// Routing by key, the pure parts (lib/ring.js, and the budget arithmetic of
// lib/engine.js): the ring's text read into slots, the group of a slot, the
// seed group found by address, never an older ring, and the pause and
// budget of a resend after W. No server.

import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import * as G from '../lib/ring.js';
import { budgetMs, waitLeft, RELEASE_DEADLINE_MS } from '../lib/engine.js';

const BODY = '0-8191=sales-a@10.0.0.1:7400,10.0.0.2:7400;8192-12287=sales-b@10.0.1.1:7400;' +
  '12288-16383=sales-a@10.0.0.1:7400,10.0.0.2:7400';

describe('the ring', () => {
  it('gives each slot the group of the range that covers it', () => {
    const r = G.parseRing(3n, BODY);
    assert.equal(r.version, 3n);
    assert.deepEqual(r.groups.map((g) => g.name), ['sales-a', 'sales-b'], 'one entry per group, in order');
    assert.deepEqual(r.groups[0].addrs, ['10.0.0.1:7400', '10.0.0.2:7400']);
    for (const [slot, name] of [[0, 'sales-a'], [8191, 'sales-a'], [8192, 'sales-b'], [12287, 'sales-b'],
      [12288, 'sales-a'], [16383, 'sales-a']]) {
      assert.equal(G.groupOf(r, slot).name, name, `slot ${slot}`);
    }
    assert.equal(G.groupOf(r, 9000), G.groupOf(r, 10000), 'the same entry for the same group');
  });

  it('names no group for a slot no range covers, nor without a ring', () => {
    const r = G.parseRing(1n, '100-199=a@h:1;300-300=b@h:2');
    assert.equal(G.groupOf(r, 99), null);
    assert.equal(G.groupOf(r, 100).name, 'a');
    assert.equal(G.groupOf(r, 200), null);
    assert.equal(G.groupOf(r, 300).name, 'b');
    assert.equal(G.groupOf(r, 301), null);
    assert.equal(G.groupOf(G.parseRing(2n, '-'), 0), null, 'a ring without ranges');
    assert.equal(G.groupOf(null, 0), null, 'no ring at all');
  });

  it('takes what the server writes at its limits', () => {
    const name = '~'.repeat(64);
    const addr = `${'h'.repeat(122)}:65535`; // 128 bytes
    const five = [1, 2, 3, 4, 5].map((i) => `[::${i}]:7400`).join(',');
    const r = G.parseRing(18446744073709551615n, `0-0=${name}@${addr};1-16383=x=y,z-@${five}`);
    assert.equal(r.groups[0].name, name);
    assert.equal(r.groups[1].name, 'x=y,z-', 'a name may hold "=", "," and "-"');
    assert.equal(r.groups[1].addrs.length, 5);
    const ranges = Array.from({ length: 1024 }, (_, i) => `${i}-${i}=g${i % 64}@h:${1 + (i % 64)}`).join(';');
    const big = G.parseRing(1n, ranges);
    assert.equal(big.groups.length, 64);
    assert.equal(G.groupOf(big, 1023).name, 'g63');
  });

  it('refuses what is not a valid ring', () => {
    const bad = [
      '',
      '0-8191',
      '0-8191=a',
      '0-8191=@h:1',
      '8191-0=a@h:1',
      '0-16384=a@h:1',
      '00-10=a@h:1',
      '0-010=a@h:1',
      '+1-10=a@h:1',
      '0-10=a;b@h:1',
      '0-10=a@h',
      '0-10=a@h:0',
      '0-10=a@h:1,',
      `0-10=a@${'h'.repeat(123)}:65535`,
      '0-10=a@h:1,h:2,h:3,h:4,h:5,h:6',
      `0-10=${'n'.repeat(65)}@h:1`,
      '0-10=a@h:1;5-20=b@h:2',
      '20-30=a@h:1;0-10=b@h:2',
      '0-10=a@h:1;11-20=a@h:2',
      '0-10=a@h:1;;11-20=b@h:2',
      Array.from({ length: 65 }, (_, i) => `${i}-${i}=g${i}@h:1`).join(';'),
      Array.from({ length: 1025 }, (_, i) => `${i}-${i}=g@h:1`).join(';'),
    ];
    for (const body of bad) assert.throws(() => G.parseRing(1n, body), /ring: /, JSON.stringify(body).slice(0, 80));
    assert.throws(() => G.parseRing(0n, '-'), /version/, 'version 0 is "no ring"');
  });
});

describe('the seed group', () => {
  const cfg = (...a) => new Set(a.map(G.addrKey));

  it('is the group whose addresses include a configured one', () => {
    const r = G.parseRing(1n, BODY);
    assert.equal(G.seedIndex(r, cfg('10.0.0.2:7400')), 0);
    assert.equal(G.seedIndex(r, cfg('10.0.9.9:7400', '10.0.1.1:7400')), 1);
    assert.equal(G.seedIndex(r, cfg('10.0.0.1:7401')), -1, 'another port is another node');
    assert.equal(G.seedIndex(r, cfg('10.0.9.9:7400')), -1);
  });

  it('is matched whatever the case of a host name, and IPv6 alike', () => {
    const r = G.parseRing(1n, '0-99=a@Node-1.Example:7400;100-199=b@[::1]:7400');
    assert.equal(G.seedIndex(r, cfg('node-1.example:7400')), 0);
    assert.equal(G.seedIndex(r, cfg('[::1]:7400')), 1);
    assert.equal(G.addrKey('[::1]:7400'), '[::1]:7400');
    assert.equal(G.addrKey('HOST:1'), 'host:1');
  });
});

describe('the newer ring', () => {
  it('replaces the one routed by only when its version is higher', () => {
    assert.equal(G.newer(0n, 1n), true, 'the first ring');
    assert.equal(G.newer(0n, 0n), false, 'version 0: no ring');
    assert.equal(G.newer(2n, 3n), true);
    assert.equal(G.newer(3n, 3n), false, 'the same again');
    assert.equal(G.newer(3n, 2n), false, 'never an older one');
    assert.equal(G.newer(18446744073709551614n, 18446744073709551615n), true, 'exact as u64');
  });
});

describe('resending after W', () => {
  it('goes at once to another group', () => {
    assert.equal(G.resendPause(false, 0), 0);
    assert.equal(G.resendPause(false, 200), 0, 'whatever the pauses before');
  });

  it('pauses 20 ms before going to the same group again, doubling to 200 ms', () => {
    const seq = [];
    let p = 0;
    for (let i = 0; i < 7; i++) {
      p = G.resendPause(true, p);
      seq.push(p);
    }
    assert.deepEqual(seq, [20, 40, 80, 160, 200, 200, 200]);
  });

  it('within the budget of the request', () => {
    const cfg = { sendBudgetMinMs: 1000, requestTimeoutMs: 5000 };
    assert.equal(budgetMs('A', 0, cfg), 1000, 'an acquire: max(wait, sendBudgetMinMs)');
    assert.equal(budgetMs('A', 20000, cfg), 20000);
    assert.equal(budgetMs('Q', 20000, cfg), 5000, 'a query: requestTimeoutMs');
    assert.equal(budgetMs('S', 0, cfg), 5000, 'the ring fetch too');
    assert.equal(budgetMs('R', 0, cfg), RELEASE_DEADLINE_MS, 'a release: its absolute 5 s');
    assert.equal(RELEASE_DEADLINE_MS, 5000);
  });

  it('each resend of an acquire waiting what is left of its wait', () => {
    assert.equal(waitLeft(20000, 1000, 1000), 20000);
    assert.equal(waitLeft(20000, 1000, 1250.9), 19750, 'whole milliseconds spent');
    assert.equal(waitLeft(20000, 1000, 21000), 0);
    assert.equal(waitLeft(20000, 1000, 90000), 0, 'never below 0');
    assert.equal(waitLeft(0, 1000, 1500), 0);
  });
});
