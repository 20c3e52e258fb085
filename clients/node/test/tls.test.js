// The client over TLS, against a real ticketingd with --tls-cert, --tls-key,
// --tls-ca and --tls-client-auth (certificates made by
// tests/support/make_certs.sh with openssl).

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { Client, TicketingError } from '../index.js';
import { Server, makeCerts, eventually } from './support.js';

const T = { timeout: 20000 };
let srv;
let certs;
const clients = [];
const f = (name) => join(certs, name);

function client(tls) {
  const c = new Client({ addrs: srv.addrs, secretFile: srv.secret, owner: 'node-tls',
    connectTimeoutMs: 2000, requestTimeoutMs: 3000, ...tls });
  clients.push(c);
  return c;
}

const mutual = () => ({ tlsCaFile: f('ca.pem'), tlsCertFile: f('client.pem'), tlsKeyFile: f('client.key') });

async function unavailable(promise) {
  const err = await promise.then(() => null, (e) => e);
  assert.ok(err instanceof TicketingError && err.code === 'UNAVAILABLE', `wanted UNAVAILABLE, got ${err}`);
  return err;
}

describe('TLS', () => {
  before(async (t) => {
    certs = makeCerts();
    if (certs === null) return;
    srv = await Server.start({ extra: ['--tls-cert', f('node.pem'), '--tls-key', f('node.key'),
      '--tls-ca', f('ca.pem'), '--tls-client-auth'] });
  });

  after(async () => {
    await Promise.all(clients.map((c) => c.close()));
    if (srv) await srv.stop();
    if (certs) rmSync(certs, { recursive: true, force: true });
  });

  it('locks over TLS with a client certificate', T, async (t) => {
    if (!certs) return t.skip('no openssl to make test certificates');
    const c = client(mutual());
    const l = await c.acquire('tls-key', { lease: 10000, wait: 0 });
    assert.ok(l.token > 0n);
    const err = await c.acquire('tls-key', { lease: 10000, wait: 0 }).catch((e) => e);
    assert.equal(err.code, 'BUSY');
    assert.equal((await c.query('tls-key')).token, l.token);
    await c.release(l);
    const l2 = await c.acquire('tls-key', { lease: 10000, wait: 0 });
    assert.ok(l2.token > l.token, 'fencing tokens grow over TLS too');
    await c.release(l2);
    assert.equal(c.stats().indeterminate, 0);
  });

  it('a server of another CA is refused: UNAVAILABLE "tls", naming the CA file', T, async (t) => {
    if (!certs) return t.skip('no openssl to make test certificates');
    const c = client({ ...mutual(), tlsCaFile: f('other-ca.pem') });
    const t0 = performance.now();
    const err = await unavailable(c.acquire('tls-other', { lease: 10000, wait: 5000 }));
    assert.equal(err.reason, 'tls');
    assert.ok(performance.now() - t0 < 4000, 'a TLS refusal ends the wait: waiting will not fix it');
    assert.match(err.detail, /other-ca\.pem/);
    assert.equal(c.stats().requestsWritten, 0);
  });

  it('a wrong server name is refused, and named', T, async (t) => {
    if (!certs) return t.skip('no openssl to make test certificates');
    const c = client({ ...mutual(), tlsServerName: 'not-us.example' });
    const err = await unavailable(c.acquire('tls-name', { lease: 10000, wait: 0 }));
    assert.equal(err.reason, 'tls');
    assert.match(err.detail, /not-us\.example/);
  });

  it('without a client certificate nothing is acquired', T, async (t) => {
    if (!certs) return t.skip('no openssl to make test certificates');
    const c = client({ tlsCaFile: f('ca.pem') });
    await unavailable(c.acquire('tls-nocert', { lease: 10000, wait: 0 }));
    // Nothing was taken: a client with its certificate gets the key at once.
    const ok = client(mutual());
    await ok.release(await ok.acquire('tls-nocert', { lease: 10000, wait: 0 }));
  });

  it('a plaintext client on the TLS port is told to use TLS', T, async (t) => {
    if (!certs) return t.skip('no openssl to make test certificates');
    const c = client({});
    await unavailable(c.acquire('tls-plain', { lease: 10000, wait: 0 }));
    // The connection gives up when no banner comes within the connect
    // timeout (2 s here), which can be after the acquire's own budget.
    assert.ok(await eventually(() => c.lastError().includes('a TLS port? then set tlsCaFile'), 8000), c.lastError());
  });

  it('TLS settings that cannot work refuse the client', T, async (t) => {
    if (!certs) return t.skip('no openssl to make test certificates');
    const base = { addrs: srv.addrs, secretFile: srv.secret };
    for (const conf of [
      { tlsCertFile: f('client.pem'), tlsKeyFile: f('client.key') }, // no CA: would be plaintext
      { tlsServerName: 'localhost' },
      { tlsCaFile: f('ca.pem'), tlsCertFile: f('client.pem') }, // a certificate without its key
      { tlsCaFile: f('missing.pem') },
      { tlsCaFile: f('ca.key') }, // not a certificate
      { tlsCaFile: f('ca.pem'), tlsCertFile: f('client.pem'), tlsKeyFile: f('node.key') }, // not its key
    ]) {
      assert.throws(() => new Client({ ...base, ...conf }),
        (e) => e instanceof TicketingError && e.code === 'INVALID' && e.reason === 'tls', JSON.stringify(conf));
    }
  });
});
