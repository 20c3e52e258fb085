// The fencing example (examples/fencing_pg.js) against a private PostgreSQL
// (initdb in a temporary directory, unix socket only) and a standalone
// ticketingd; the database is then checked directly. Skipped only when no
// PostgreSQL server binaries (or, as root, no postgres user) exist.

import { it, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, mkdirSync, chmodSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Server, NODEDIR, REPO, freePorts3 } from './support.js';

function pgBin() {
  const dirs = [process.env.PGBIN];
  try {
    for (const v of readdirSync('/usr/lib/postgresql')) dirs.push(`/usr/lib/postgresql/${v}/bin`);
  } catch {
    // no Debian PostgreSQL packages
  }
  return dirs.filter((d) => d && existsSync(join(d, 'initdb')) && existsSync(join(d, 'pg_ctl'))).pop() || null;
}

const cleanups = [];
after(async () => {
  for (const f of cleanups.reverse()) await f();
});

it('fencing_pg.js: the stale write is refused by PostgreSQL', { timeout: 90000 }, async (t) => {
  const bin = pgBin();
  if (!bin) return t.skip('PostgreSQL server binaries not found (apt-get install postgresql)');
  let asPG = [];
  if (process.getuid() === 0) {
    if (spawnSync('id', ['-u', 'postgres']).status !== 0) return t.skip('no postgres user to run the server as');
    asPG = ['runuser', '-u', 'postgres', '--'];
  }
  const pg = (...args) => {
    const full = [...asPG, ...args];
    const r = spawnSync(full[0], full.slice(1), { encoding: 'utf8' });
    if (r.status !== 0) t.diagnostic(`${args.join(' ')}: ${r.stdout}${r.stderr}`);
    return r.status === 0;
  };
  const tmp = mkdtempSync(join(tmpdir(), 'tk-node-pg.'));
  cleanups.push(() => rmSync(tmp, { recursive: true, force: true }));
  chmodSync(tmp, 0o711);
  const data = join(tmp, 'data');
  const sock = join(tmp, 'sock');
  mkdirSync(sock, { mode: 0o755 });
  mkdirSync(data, { mode: 0o700 });
  if (asPG.length) spawnSync('chown', ['postgres:', data, sock]);
  assert.ok(pg(join(bin, 'initdb'), '-D', data, '-A', 'trust', '-U', 'postgres', '-E', 'UTF8', '--locale=C', '--no-sync'),
    'initdb');
  const port = await freePorts3();
  assert.ok(pg(join(bin, 'pg_ctl'), '-D', data, '-l', join(sock, 'pg.log'), '-w', '-t', '60', '-o',
    `-k ${sock} -p ${port} -c listen_addresses='' -c fsync=off`, 'start'), 'PostgreSQL started');
  cleanups.push(() => pg(join(bin, 'pg_ctl'), '-D', data, '-m', 'immediate', '-w', 'stop'));

  const srv = await Server.start();
  cleanups.push(() => srv.stop());
  const env = { ...process.env, TICKETING_ADDR: srv.addrs, TICKETING_SECRET_FILE: srv.secret, PGHOST: sock,
    PGPORT: String(port), PGUSER: 'postgres', PGDATABASE: 'postgres', PSQL: join(bin, 'psql') };
  const r = spawnSync(process.execPath, [join(NODEDIR, 'examples', 'fencing_pg.js')],
    { cwd: REPO, env, encoding: 'utf8', timeout: 60000 });
  t.diagnostic(r.stdout + r.stderr);
  assert.equal(r.status, 0, 'the example succeeded');
  const m = /summary: alice_token=(\d+) bob_token=(\d+) bob_write=applied alice_write=stale/.exec(r.stdout);
  assert.ok(m, 'bob applied and alice stale');
  const q = spawnSync(join(bin, 'psql'), ['-X', '-tA', '-F', '|', '-c',
    "SELECT remaining, split_part(last_writer, '-', 1), last_token, (SELECT token FROM ticketing_demo.fence WHERE lock_key = 'show-42') FROM ticketing_demo.inventory WHERE item = 'show-42'"],
  { env, encoding: 'utf8' });
  assert.equal(q.stdout.trim(), `39|bob|${m[2]}|${m[2]}`, 'the row holds bob\'s write and the fence his token');
});
