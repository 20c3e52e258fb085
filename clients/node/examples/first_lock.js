// first_lock.js: acquire, work under the lock, release.
import { Client, TicketingError } from 'ticketing';

const client = new Client({
  addrs: process.env.TICKETING_ADDR, // "host:port,host:port"
  secretFile: process.env.TICKETING_SECRET_FILE,
});

let lease;
try {
  // Lease 30 s (the safety net if we die), wait at most 5 s for our turn.
  lease = await client.acquire('inventory/sku-1', { lease: 30000, wait: 5000 });
} catch (e) {
  // BUSY, TIMEOUT, UNAVAILABLE: not acquired. INDETERMINATE: maybe acquired,
  // maybe not; either way we must not enter. The client releases a late
  // grant by itself; otherwise the lease frees the key.
  console.error(`not acquired: ${e instanceof TicketingError ? e.code : e}`);
  await client.close();
  process.exit(1);
}

// The critical section: finish before lease.deadline (performance.now())
// and pass lease.token to every write it protects.
console.log(`holding ${lease.key} with token ${lease.token}, ${Math.floor(lease.remainingMs())} ms of lease left`);
try {
  await client.release(lease);
} catch (e) {
  // NOT_HELD, UNCONFIRMED, QUEUE_FULL: never assume success.
  console.error(`release: ${e.code}: the lease will free the key`);
}

// The same with withLock: released when the function ends, also when it throws.
await client.withLock('inventory/sku-1', { lease: 30000, wait: 5000 }, async (l) => {
  console.log(`holding ${l.key} again with token ${l.token}`);
});
await client.close();
