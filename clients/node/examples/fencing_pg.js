// fencing_pg.js: the stale holder of docs/fencing.md, with Ticketing tokens
// fenced in PostgreSQL.
//
//   alice  takes the lock of show-42 with a 1 s lease, reads the seats left
//          and wants 2; then she stalls past her lease without knowing it.
//   bob    queues for the same lock, gets it when alice's lease runs out,
//          sells 1 seat and writes: applied.
//   alice  wakes up and writes what she computed, with her old token:
//          refused by the database, nothing changes.
//
// The lock decides the order of work; the token, checked by the database
// in the same statement as the write, stops the stale one. Node's standard
// library has no PostgreSQL driver, so this example runs psql for each
// statement (psql's :'var' quoting makes each value an SQL literal); an
// application uses its driver with the same SQL, passing the token as a
// string or a BigInt (tokens are u64: numeric(20,0) in the schema).
//
// Needs TICKETING_ADDR, TICKETING_SECRET_FILE, the libpq variables of the
// database (PGHOST, PGPORT, PGUSER, PGDATABASE), PSQL (default: psql) and
// the schema, FENCING_SQL (default: docs/examples/fencing_pg.sql of this
// repository). Exit status 0 if bob's write was applied and alice's refused.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Client } from 'ticketing';

const SQL = process.env.FENCING_SQL ||
  fileURLToPath(new URL('../../../docs/examples/fencing_pg.sql', import.meta.url));
const KEY = 'show-42';
const ITEM = 'show-42';

function psql(stdin, vars = {}) {
  const args = ['-X', '-q', '-v', 'ON_ERROR_STOP=1', '-tA'];
  for (const [k, v] of Object.entries(vars)) args.push('-v', `${k}=${v}`);
  return execFileSync(process.env.PSQL || 'psql', args, { input: stdin, encoding: 'utf8' }).trim();
}

const remaining = () => Number(psql("SELECT remaining FROM ticketing_demo.inventory WHERE item = :'item'", { item: ITEM }));

// The protected write: the fence check and the write in one statement.
// 'applied', 'stale' or 'no_such_item'.
function fencedWrite(token, value, writer) {
  return psql("SELECT ticketing_demo.fenced_set_remaining(:'key', :'token', :'item', :'remaining', :'writer')",
    { key: KEY, token: String(token), item: ITEM, remaining: value, writer });
}

const client = (owner) => new Client({ addrs: process.env.TICKETING_ADDR,
  secretFile: process.env.TICKETING_SECRET_FILE, owner });

psql(readFileSync(SQL, 'utf8'));
console.log(`db:    ${ITEM} has ${remaining()} seats left`);
const run = String(process.pid);
const alice = client(`alice-${run}`);
const bob = client(`bob-${run}`);

const a = await alice.acquire(KEY, { lease: 1000, wait: 5000 });
const aliceValue = remaining() - 2;
console.log(`alice: token ${a.token} (lease 1 s), will write ${aliceValue}, ...stalls`);

const t0 = performance.now();
const b = await bob.acquire(KEY, { lease: 30000, wait: 10000 }); // granted when alice's lease ends
const bobValue = remaining() - 1;
const bobResult = fencedWrite(b.token, bobValue, bob.owner);
console.log(`bob:   token ${b.token} after ${((performance.now() - t0) / 1000).toFixed(1)} s, writes ${bobValue}: ${bobResult}`);

const aliceResult = fencedWrite(a.token, aliceValue, alice.owner); // she wakes up, stale
console.log(`alice: writes ${aliceValue} with token ${a.token}: ${aliceResult}`);
await alice.release(a).catch((e) => console.log(`alice: release: ${e.code} (her lease had run out)`));
await bob.release(b);
const final = remaining();
console.log(`db:    ${ITEM} has ${final} seats left`);
console.log(`summary: alice_token=${a.token} bob_token=${b.token} bob_write=${bobResult} alice_write=${aliceResult}`);
await Promise.all([alice.close(), bob.close()]);
process.exit(bobResult === 'applied' && aliceResult === 'stale' && final === bobValue ? 0 : 1);
