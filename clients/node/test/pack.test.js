// What `npm pack` puts in the package: the files the client needs at run
// time, its declarations and its README, and that package.json's "exports"
// and "types" name files that exist. Runs `npm pack --dry-run`, which
// writes no tarball and needs no registry; skipped when npm is missing.

import { it } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { NODEDIR } from './support.js';

const NEEDED = ['index.js', 'index.d.ts', 'lib/engine.js', 'lib/proto.js', 'driver.js', 'README.md', 'package.json'];

function hasNpm() {
  return spawnSync('npm', ['--version'], { encoding: 'utf8', timeout: 30000 }).status === 0;
}

// Every file path named in an "exports" value (strings, conditions, arrays).
function exportTargets(v) {
  if (typeof v === 'string') return [v];
  if (Array.isArray(v)) return v.flatMap(exportTargets);
  if (v && typeof v === 'object') return Object.values(v).flatMap(exportTargets);
  return [];
}

it('npm pack holds the client, its declarations and its README', { timeout: 60000 }, (t) => {
  if (!hasNpm()) return t.skip('no npm on PATH (it comes with Node.js: apt-get install npm)');
  const r = spawnSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], {
    cwd: NODEDIR, encoding: 'utf8', timeout: 50000,
    // No update check, no registry: pack reads only this directory.
    env: { ...process.env, npm_config_update_notifier: 'false', npm_config_audit: 'false',
      npm_config_fund: 'false' },
  });
  assert.equal(r.status, 0, `npm pack --dry-run: ${r.stderr}`);
  const [pack] = JSON.parse(r.stdout);
  const files = pack.files.map((f) => f.path);
  t.diagnostic(`${pack.filename}: ${files.join(', ')}`);
  for (const f of NEEDED) assert.ok(files.includes(f), `the tarball lacks ${f}`);
  assert.ok(!files.some((f) => f.startsWith('test/')), 'the tests stay out of the tarball');

  const pkg = JSON.parse(readFileSync(join(NODEDIR, 'package.json'), 'utf8'));
  assert.equal(pack.name, pkg.name);
  assert.equal(pack.version, pkg.version);
  const targets = [pkg.types, pkg.main, ...exportTargets(pkg.exports)].filter((f) => f !== undefined);
  assert.ok(targets.includes('./index.d.ts'), '"types" names the declarations');
  for (const f of targets) {
    assert.ok(existsSync(join(NODEDIR, f)), `package.json names ${f}, which does not exist`);
    assert.ok(files.includes(f.replace(/^\.\//, '')), `package.json names ${f}, which the tarball lacks`);
  }
});
