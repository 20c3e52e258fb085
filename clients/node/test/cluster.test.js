// A 3-node cluster of real ticketingd processes: the leader found through
// a follower's M, and kill -9 of the leader with the client going on.

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Client, TicketingError } from '../index.js';
import { Server } from './support.js';

let srv;
const clients = [];

function client(addrs, extra = {}) {
  const c = new Client({ addrs, secretFile: srv.secret, ...extra });
  clients.push(c);
  return c;
}

before(async () => {
  srv = await Server.start({ n: 3 });
});

after(async () => {
  await Promise.all(clients.map((c) => c.close()));
  await srv.stop();
});

describe('a 3-node cluster', () => {
  it('given one follower, the client follows its M to the leader', { timeout: 20000 }, async () => {
    const lead = await srv.leader(5000);
    const follower = srv.nodes.find((n) => n !== lead);
    const c = client(follower.addr);
    const l = await c.acquire('routed', { lease: 30000, wait: 5000 });
    const st = c.stats();
    assert.ok(st.moved >= 1, 'an M was followed');
    assert.equal(st.leaderHint, lead.addr);
    assert.equal(st.indeterminate, 0);
    const q = await c.query('routed');
    assert.equal(q.owner, c.owner);
    assert.equal(q.token, l.token);
    await c.release(l);
  });

  it('kill -9 of the leader: later acquires succeed on the new leader, grants survive', { timeout: 40000 }, async () => {
    const c = client(srv.addrs);
    const before = await c.acquire('before', { lease: 60000, wait: 5000 });
    const old = await srv.leader(5000);
    await old.kill('SIGKILL');
    // Let the client see the close: a request written to a socket whose
    // peer just died is rightly INDETERMINATE.
    await new Promise((r) => setTimeout(r, 300));
    const t0 = performance.now();
    const after = await c.acquire('after', { lease: 30000, wait: 20000 });
    assert.ok(after.token > before.token, 'the token counter continues above every earlier token');
    const lead = await srv.leader(10000, [old]);
    assert.ok(lead && lead !== old, 'a new leader');
    assert.ok(performance.now() - t0 < 20000);
    const err = await c.acquire('before', { lease: 30000, wait: 0 }).catch((e) => e);
    assert.ok(err instanceof TicketingError && err.code === 'BUSY', 'the committed grant outlives its leader');
    assert.deepEqual(await c.release(before), { outcome: 'RELEASED', resent: false });
    await c.release(after);
    assert.equal((await c.query('after')).held, false);
  });
});
