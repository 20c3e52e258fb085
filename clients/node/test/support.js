// Real ticketingd processes for the Node.js client's tests.
//
// The binary is TICKETING_BIN, else TICKETING_BUILD_DIR/ticketingd, else
// build/ticketingd at the top of the repository. Each node needs three
// consecutive ports (client P, peer P+1, admin P+2), picked free below the
// ephemeral range; the 4-port block is locked in /tmp/ticketing-test-ports
// as every Ticketing test harness does, so tests running at once never pick
// the same ports. Node has no flock(2), so a `flock` child process holds
// each lock for as long as this process lives.

import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, mkdirSync, writeFileSync, rmSync, readFileSync, existsSync, accessSync, constants, openSync, closeSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';

export const HERE = dirname(fileURLToPath(import.meta.url));
export const NODEDIR = dirname(HERE);
export const REPO = dirname(dirname(NODEDIR));

export function ticketingd() {
  const bin = process.env.TICKETING_BIN ||
    join(process.env.TICKETING_BUILD_DIR || join(REPO, 'build'), 'ticketingd');
  accessSync(bin, constants.X_OK);
  return bin;
}

/** Runs ticketctl (next to ticketingd) with args: {status, out}. */
export function ticketctl(args, timeoutMs = 60000) {
  const bin = join(dirname(ticketingd()), 'ticketctl');
  const r = spawnSync(bin, args, { encoding: 'utf8', timeout: timeoutMs });
  return { status: r.status, out: `${r.stdout || ''}${r.stderr || ''}`.trim() };
}

function portFree(p) {
  return new Promise((resolve) => {
    const s = createServer();
    s.once('error', () => resolve(false));
    s.listen(p, '127.0.0.1', () => s.close(() => resolve(true)));
  });
}

const taken = new Set();
const lockers = [];
process.on('exit', () => {
  for (const c of lockers) c.kill();
});

// True if the 4-port block at p is ours now (or no locking is possible here).
function lockBlock(p) {
  const dir = '/tmp/ticketing-test-ports';
  try {
    mkdirSync(dir, { recursive: true, mode: 0o777 });
    closeSync(openSync(join(dir, String(p)), 'a', 0o666));
  } catch {
    return Promise.resolve(true);
  }
  return new Promise((resolve) => {
    // "ok" once the lock is held; cat then holds it until our end of the
    // pipe closes (this process exits) or we kill it.
    const c = spawn('flock', ['-n', join(dir, String(p)), 'sh', '-c', 'echo ok; exec cat >/dev/null'],
      { stdio: ['pipe', 'pipe', 'ignore'] });
    let out = '';
    c.on('error', () => resolve(true)); // no flock here: the bind check alone
    c.stdout.on('data', (d) => {
      out += d;
      if (out.includes('ok')) {
        lockers.push(c);
        c.unref();
        c.stdin.unref?.();
        c.stdout.unref?.();
        c.stdout.destroy();
        resolve(true);
      }
    });
    c.on('exit', () => resolve(out.includes('ok')));
  });
}

export async function freePorts3() {
  for (let i = 0; i < 2000; i++) {
    const p = (20000 + Math.floor(Math.random() * 12000)) & ~3;
    if ([p, p + 1, p + 2].some((q) => taken.has(q))) continue;
    if ((await portFree(p)) && (await portFree(p + 1)) && (await portFree(p + 2)) && (await lockBlock(p))) {
      taken.add(p).add(p + 1).add(p + 2);
      return p;
    }
  }
  throw new Error('no three free ports');
}

export function writeSecret(path, data) {
  writeFileSync(path, data ?? randomBytes(16).toString('hex'), { mode: 0o600 });
  return path;
}

class Node {
  constructor(dir, port, secret, args) {
    this.dir = dir;
    mkdirSync(dir, { recursive: true });
    this.port = port;
    this.addr = `127.0.0.1:${port}`;
    this.secret = secret;
    this.args = args;
    this.log = join(dir, 'ticketingd.log');
    this.proc = null;
  }

  start() {
    const fd = openSync(this.log, 'a');
    this.proc = spawn(ticketingd(), ['--bind', '127.0.0.1', '--port', String(this.port),
      '--client-secret-file', this.secret, ...this.args], { stdio: ['ignore', fd, fd] });
    closeSync(fd);
    this.exited = new Promise((resolve) => this.proc.once('exit', resolve));
  }

  alive() {
    return this.proc !== null && this.proc.exitCode === null && this.proc.signalCode === null;
  }

  async status() {
    try {
      const r = await fetch(`http://127.0.0.1:${this.port + 2}/status`, { signal: AbortSignal.timeout(1000) });
      return await r.json();
    } catch {
      return null;
    }
  }

  async kill(sig = 'SIGKILL') {
    if (!this.alive()) return;
    this.proc.kill('SIGCONT');
    this.proc.kill(sig);
    const t = setTimeout(() => this.proc.kill('SIGKILL'), 5000);
    await this.exited;
    clearTimeout(t);
  }

  logTail() {
    try {
      return readFileSync(this.log, 'utf8').slice(-2000);
    } catch {
      return '';
    }
  }
}

/** A standalone node, or a cluster of n members, in a temporary directory;
 * with the secrets of another Server (`like`), for groups one client reaches. */
export class Server {
  static async start({ n = 1, extra = [], like = null } = {}) {
    const s = new Server();
    s.tmp = mkdtempSync(join(tmpdir(), 'tk-node-'));
    s.secret = like ? like.secret : writeSecret(join(s.tmp, 'client.secret'));
    s.peerSecret = like ? like.peerSecret : writeSecret(join(s.tmp, 'peer.secret'));
    const ports = [];
    for (let i = 0; i < n; i++) ports.push(await freePorts3());
    const peers = ports.map((p) => `127.0.0.1:${p + 1}`).join(',');
    s.nodes = ports.map((p, i) => {
      let args = ['--threads', '1', ...extra];
      if (n > 1) {
        args = args.concat(['--peers', peers, '--peer-secret-file', s.peerSecret, '--advertise',
          `127.0.0.1:${p}`, '--heartbeat-ms', '50', '--election-ms', '400']);
      }
      return new Node(join(s.tmp, `node${i}`), p, s.secret, args);
    });
    for (const nd of s.nodes) nd.start();
    if ((await s.leader(15000)) === null) {
      const logs = s.nodes.map((nd) => nd.logTail()).join('\n');
      await s.stop();
      throw new Error(`no serving node after 15 s:\n${logs}`);
    }
    return s;
  }

  get addrs() {
    return this.nodes.map((nd) => nd.addr).join(',');
  }

  /** The peer addresses of its members, as --peers lists them. */
  get peers() {
    return this.nodes.map((nd) => `127.0.0.1:${nd.port + 1}`).join(',');
  }

  /** The serving node (not one in skip), waiting up to timeoutMs; or null. */
  async leader(timeoutMs, skip = []) {
    const end = Date.now() + timeoutMs;
    while (Date.now() < end) {
      for (const nd of this.nodes) {
        if (skip.includes(nd) || !nd.alive()) continue;
        const st = await nd.status();
        if (st && st.serving === true) return nd;
        if (this.nodes.length === 1 && st !== null && !('serving' in st)) return nd;
      }
      await sleep(50);
    }
    return null;
  }

  async stop() {
    await Promise.all(this.nodes.map((nd) => nd.kill('SIGTERM')));
    rmSync(this.tmp, { recursive: true, force: true });
  }
}

/** A port where nothing listens (locked for us, so nobody starts there). */
export async function closedAddr() {
  return `127.0.0.1:${await freePorts3()}`;
}

/** Test certificates (tests/support/make_certs.sh), or null without openssl. */
export function makeCerts() {
  const dir = mkdtempSync(join(tmpdir(), 'tk-node-certs-'));
  const r = spawnSync('sh', [join(REPO, 'tests', 'support', 'make_certs.sh'), dir], { encoding: 'utf8' });
  if (r.status !== 0 || !existsSync(join(dir, 'ca.pem'))) {
    rmSync(dir, { recursive: true, force: true });
    return null;
  }
  return dir;
}

/** Polls fn until it returns a truthy value or timeoutMs passes; returns the last value. */
export async function eventually(fn, timeoutMs = 5000, stepMs = 50) {
  const end = Date.now() + timeoutMs;
  let v;
  for (;;) {
    v = await fn();
    if (v || Date.now() >= end) return v;
    await sleep(stepMs);
  }
}
