// The line protocol without a server: proofs, request lines, the response
// grammar, the field checks and the slot of a key.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as P from '../lib/proto.js';
import { slot, SLOTS } from '../index.js';

test('the handshake proofs of the worked example in docs/protocol.md', () => {
  const secret = Buffer.from('example-client-secret-0123456789');
  const sn = '59c022321689867600b1211b5c80e2eda6ca1235b91e02f2b9150f0918680045';
  const cn = '37af00b6a42a4ad8f1cbfbf3636ed14b817a7515213b8c1ad833e90d9894f0d6';
  assert.equal(P.proof(secret, 'client', sn, cn), 'bc8a1c901757cf0e9f28f83feb40e8faff6d7cf324e3ba88af9b8ad129863415');
  assert.equal(P.proof(secret, 'server', sn, cn), '492a324b111fc45168daee57e6b43c5a86004384c3dcff0c5b53c1aeec164bf7');
  assert.equal(P.parseBanner(`TICKETING/1 ${sn}`), sn);
  assert.equal(P.parseBanner(`TICKETING/2 ${sn}`), null);
  assert.equal(P.parseOk('OK 492a324b111fc45168daee57e6b43c5a86004384c3dcff0c5b53c1aeec164bf7 9ece111f414eb40b e8976ec909731613da545efbae7a1b31'),
    '492a324b111fc45168daee57e6b43c5a86004384c3dcff0c5b53c1aeec164bf7');
  assert.equal(P.parseOk('E - auth'), null);
});

test('request lines', () => {
  assert.equal(P.fmtAcquire(2, 'show-42', 'alice', 30000, 0), 'A 2 show-42 alice 30000 0\n');
  assert.equal(P.fmtRelease(6, 'show-42', 'alice', 18446744073709551615n), 'R 6 show-42 alice 18446744073709551615\n');
  assert.equal(P.fmtQuery(5, 'k'), 'Q 5 k\n');
  assert.equal(P.fmtPing(0), 'P 0\n');
});

test('responses follow the server grammar exactly', () => {
  assert.deepEqual(P.parseResponse('G 2 1796223722315317'),
    { type: 'G', id: 2n, token: 1796223722315317n, owner: null, waiters: 0, text: null });
  assert.equal(P.parseResponse('G 2 18446744073709551615').token, 18446744073709551615n, 'u64 tokens stay exact');
  assert.equal(P.parseResponse('G 2 18446744073709551616'), null, 'beyond u64');
  assert.equal(P.parseResponse('G 2 0'), null, 'a token is at least 1');
  assert.equal(P.parseResponse('G 2 01'), null, 'no leading zero');
  assert.equal(P.parseResponse('T 4\r').type, 'T');
  const q = P.parseResponse('Q 5 alice 17 1');
  assert.equal(q.owner, 'alice');
  assert.equal(q.waiters, 1);
  assert.equal(P.parseResponse('Q 5 - 0 0').owner, null);
  assert.equal(P.parseResponse('Q 5 alice 0 0'), null, 'a free key is "- 0 0"');
  assert.equal(P.parseResponse('Q 5 - 0 3'), null, 'a free key has no waiters');
  assert.equal(P.parseResponse('E 7 command').text, 'command');
  const e = P.parseResponse('E - overload');
  assert.equal(e.id, null);
  assert.equal(e.text, 'overload');
  assert.equal(P.parseResponse('M 127.0.0.1:7410').text, '127.0.0.1:7410');
  assert.equal(P.parseResponse('M -').text, null);
  assert.equal(P.parseResponse('M nowhere'), null);
  for (const bad of ['', 'G', 'G  2 5', 'G 2 5 ', 'GG 2 5', 'P -1', 'Z 1', 'T 1 2', 'P 99999999999999999999999']) {
    assert.equal(P.parseResponse(bad), null, JSON.stringify(bad));
  }
});

test('field checks', () => {
  assert.ok(P.keyOk('a'));
  assert.ok(P.keyOk('~'.repeat(250)));
  assert.ok(!P.keyOk('~'.repeat(251)));
  assert.ok(!P.keyOk(''));
  assert.ok(!P.keyOk('a b'));
  assert.ok(!P.keyOk('caf\u00e9'));
  assert.ok(!P.keyOk(42));
  assert.ok(P.ownerOk('o'.repeat(64)));
  assert.ok(!P.ownerOk('o'.repeat(65)));
  assert.equal(P.tokenOf(1), 1n);
  assert.equal(P.tokenOf('18446744073709551615'), 18446744073709551615n);
  assert.equal(P.tokenOf(18446744073709551616n), null);
  assert.equal(P.tokenOf(0), null);
  assert.equal(P.tokenOf(2 ** 60), null, 'a Number beyond 2^53 may have lost digits');
  assert.equal(P.tokenOf('007'), null);
  assert.deepEqual(P.parseAddr('[::1]:7400'), { host: '::1', port: 7400 });
  assert.throws(() => P.parseAddr('::1:7400'));
  assert.throws(() => P.parseAddr('host:0'));
  assert.throws(() => P.parseAddr('host'));
  assert.match(P.defaultOwner(), /^[\x21-\x7e]+-\d+-[0-9a-f]{12}$/);
});

test('the slot of a key: FNV-1a 64 of its bytes modulo 16384', () => {
  assert.equal(SLOTS, 16384);
  assert.equal(slot('a'), 11404);
  assert.equal(slot('show-42'), 11909);
  assert.equal(slot('show-42:seat-17'), 10735);
  assert.equal(slot('inventory/2026-12-24/hall-B'), 10740);
  assert.equal(slot('~'.repeat(250)), 9293);
  assert.equal(P.slotOf('show-42'), 11909);
  // Any string, unchecked: the FNV-1a 64 of its UTF-8 bytes 63 61 66 c3 a9.
  assert.equal(slot('caf\u00e9'), 3465);
  assert.throws(() => slot(42), TypeError);
});

test('W: the group does not serve the key\'s slot (docs/protocol.md section 10)', () => {
  assert.deepEqual(P.parseResponse('W 8 11909 3'),
    { type: 'W', id: 8n, token: 0n, owner: null, waiters: 0, text: null, slot: 11909, version: 3n });
  assert.equal(P.parseResponse('W 1 0 0').version, 0n, '0: the group has no ring');
  const top = P.parseResponse('W 18446744073709551615 16383 18446744073709551615\r');
  assert.equal(top.id, 18446744073709551615n);
  assert.equal(top.slot, 16383);
  assert.equal(top.version, 18446744073709551615n, 'a u64 version stays exact');
  for (const bad of ['W 1', 'W 1 5', 'W 1 5 6 7', 'W 1 16384 0', 'W 1 99999 0', 'W 1 -1 0', 'W 1 05 0', 'W 1 5 01',
    'W 1 5 -1', 'W 1 5 +1', 'W 1 5 18446744073709551616', 'W - 5 0', 'W x 5 0', 'W 1  5 0', 'W 1 5 0 ',
    'W 1 5 3a', 'WW 1 5 0']) {
    assert.equal(P.parseResponse(bad), null, JSON.stringify(bad));
  }
  assert.equal(P.fmtRing(7), 'S 7\n');
});

test('S: the ring, in one line or in parts k/n (docs/protocol.md section 10)', () => {
  const body = '0-8191=sales-a@10.0.0.1:7400,10.0.0.2:7400;8192-16383=sales-b@10.0.1.1:7400';
  assert.deepEqual(P.parseResponse(`S 7 3 ${body}`),
    { type: 'S', id: 7n, token: 0n, owner: null, waiters: 0, text: body, version: 3n, part: 1, parts: 1 });
  const none = P.parseResponse('S 7 0 -');
  assert.equal(none.version, 0n);
  assert.equal(none.text, '-');
  const part = P.parseResponse('S 9 18446744073709551615 2/3 100-199=b@h:2');
  assert.equal(part.version, 18446744073709551615n);
  assert.equal(part.part, 2);
  assert.equal(part.parts, 3);
  assert.equal(part.text, '100-199=b@h:2');
  assert.equal(P.parseResponse('S 9 4 1024/1024 x').parts, 1024);
  for (const bad of ['S 7', 'S 7 3', 'S 7 03 -', 'S 7 -1 -', 'S 7 18446744073709551616 -', 'S - 3 -', 'S 7 3 - -',
    'S 7 3 0/3 x', 'S 7 3 4/3 x', 'S 7 3 1/1 x', 'S 7 3 2/1 x', 'S 7 3 1/ x', 'S 7 3 /2 x', 'S 7 3 1-2 x',
    'S 7 3 01/2 x', 'S 7 3 1/02 x', 'S 7 3 1/2/3 x', 'S 7 3 a/2 x', 'S 7 3 1/2 x y', 'S 7 3 1/1025 x',
    'S 7 3 1/18446744073709551617 x', 'S 7 3 caf\u00e9', 'S 7 3 a\tb', 'S 7 3  -', 'S 7 3 - ', 'S 7 3 1/2  x']) {
    assert.equal(P.parseResponse(bad), null, JSON.stringify(bad));
  }
});
