// End-to-end tests of the agent card through `meerkatd mcp`, driven by the
// official MCP TypeScript SDK clients (run by `make e2e` with the other
// suites):
//
//   MEERKATD_BIN=/abs/path/to/meerkatd node --test mcpserver/e2e/*.test.mjs
//
// Two nodes, alice and bob, trust each other over Unix sockets; bob also
// trusts "ghost", a key at an address where nothing listens. Before any
// node starts, alice describes herself with the CLI (meerkatd card edit:
// a description, a contact and an intent with a JSON Schema for its
// params). Then, through tools/call:
//
//   - list_peers shows no card for alice until bob holds one (card null);
//   - describe_peer alice fetches alice's card (a meerkat.card request
//     that alice's node answers itself), verified against alice's key,
//     with the intent and its schema; list_peers then shows its summary;
//   - neither agent's inbox shows the card request or its answer;
//   - after alice edits her card, describe_peer returns the kept card
//     until refresh is set, then the new one;
//   - describe_peer of an unreachable peer is peer_offline, of an unknown
//     one unknown_peer, and without peer bad_argument.
//
//   - a kept card altered on disk (its signature no longer verifies) is
//     refused: list_peers shows none, describe_peer fetches a verified one.
//
// A card that does not verify when it arrives (tampered, or signed by
// another key) is refused with bad_card: that needs a peer that is not
// meerkatd, and is tested with real daemons in cmd/meerkatd/card_test.go.
//
// The suite runs once per protocol era and mode (embedded, attached), and
// every structured result is checked against the listed outputSchema by
// the SDK (callTool) and by Ajv.

import { after, before, describe } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import path from 'node:path';

import { CALL_TIMEOUT, ERAS, McpPeer, invalidCall, makeTempRoot, meerkatd, setUp, stepper, tearDown } from './helpers.mjs';

const SCHEMA = { type: 'object', properties: { url: { type: 'string' } }, required: ['url'] };

class Peer extends McpPeer {
  /** Client.callTool with SDK output validation; the structuredContent of a success. */
  async ok(name, args = {}, { timeout = CALL_TIMEOUT } = {}) {
    assert.ok(this.outputSchemas.has(name), `${this.name}: ${name} was not listed with an outputSchema`);
    return this.structured(name, this.check(name, args, await this.suite.era.callTool(this.client, { name, arguments: args }, timeout)));
  }

  async peer(name) {
    const r = await this.ok('list_peers');
    const p = r.peers.find((x) => x.name === name);
    assert.ok(p, `${this.name}: list_peers lacks ${name}: ${JSON.stringify(r)}`);
    return p;
  }
}

async function makeHomes(suite) {
  suite.root = await makeTempRoot('mkc-');
  const homes = { alice: path.join(suite.root, 'a'), bob: path.join(suite.root, 'b') };
  suite.homes = homes;
  suite.ids = {};
  for (const [name, h] of Object.entries(homes)) {
    await meerkatd(['init', '--name', name, '--home', h]);
    suite.ids[name] = JSON.parse(await meerkatd(['id', '--json', '--home', h]));
  }
  const addr = (name) => `uds://${homes[name]}/meerkat.sock`;
  await meerkatd(['peers', 'add', 'bob', suite.ids.bob.pubkey, addr('bob'), '--home', homes.alice]);
  await meerkatd(['peers', 'add', 'alice', suite.ids.alice.pubkey, addr('alice'), '--home', homes.bob]);
  const ghostKey = 'ed25519:' + Buffer.alloc(32, 9).toString('base64');
  await meerkatd(['peers', 'add', 'ghost', ghostKey, `uds://${suite.root}/ghost.sock`, '--home', homes.bob]);
  await meerkatd(['card', 'edit', '--description', 'Reviews pull requests', '--contact', 'alice@example.org', '--home', homes.alice]);
  await meerkatd(['card', 'edit', '--add-intent', 'review-pr', '--intent-description', 'review one PR', '--schema', JSON.stringify(SCHEMA), '--home', homes.alice]);
  const own = JSON.parse(await meerkatd(['card', 'show', '--json', '--home', homes.alice]));
  assert.equal(own.default, false);
  assert.equal(own.pubkey, suite.ids.alice.pubkey);
}

for (const era of ERAS) for (const mode of ['embedded', 'attached']) {
  describe(`meerkatd mcp cards (${era.version}, ${era.sdk}, ${mode})`, { timeout: 120_000 }, () => {
    const suite = { era, logs: [], daemons: {}, schemaViolations: [], clientErrors: [], failed: false };
    let alice;
    let bob;
    const step = stepper(suite);

    before(async () => {
      [alice, bob] = await setUp(suite, mode, makeHomes, Peer);
    });

    after(() => tearDown(suite, [alice, bob], `cards ${era.version} ${mode}`));

    step('tools/list: describe_peer (read only, peer required) with an output schema; list_peers items have a card', async () => {
      for (const peer of [alice, bob]) {
        const { tools } = await peer.client.listTools(undefined, { timeout: CALL_TIMEOUT });
        for (const t of tools) if (t.outputSchema) peer.outputSchemas.set(t.name, t.outputSchema);
        const t = tools.find((x) => x.name === 'describe_peer');
        assert.ok(t, `${peer.name}: no describe_peer`);
        assert.deepEqual(t.inputSchema.required, ['peer']);
        assert.equal(t.inputSchema.properties.refresh.type, 'boolean');
        assert.equal(t.annotations?.readOnlyHint, true);
        for (const p of ['peer', 'card', 'pending']) assert.ok(p in t.outputSchema.properties, `describe_peer output lacks ${p}`);
        const lp = tools.find((x) => x.name === 'list_peers');
        assert.ok('card' in lp.outputSchema.properties.peers.items.properties, 'list_peers items lack card');
      }
    });

    step('list_peers: no card held for alice yet (card null)', async () => {
      const p = await bob.peer('alice');
      assert.equal(p.card, null);
    });

    step('describe_peer alice: the card alice signed, verified, with its intent and schema; list_peers shows the summary', async () => {
      const d = await bob.ok('describe_peer', { peer: 'alice' });
      assert.equal(d.peer.name, 'alice');
      assert.equal(d.peer.pubkey, suite.ids.alice.pubkey);
      assert.equal(d.card.name, 'alice');
      assert.equal(d.card.description, 'Reviews pull requests');
      assert.equal(d.card.contact, 'alice@example.org');
      assert.equal(d.card.pubkey, suite.ids.alice.pubkey);
      assert.equal(d.card.peer, 'alice');
      assert.equal(d.card.untrusted, true);
      assert.equal(Buffer.from(d.card.signature, 'base64').length, 64);
      assert.deepEqual(d.card.intents, [{ name: 'review-pr', description: 'review one PR', params_schema: SCHEMA }]);
      assert.equal(typeof d.pending, 'number');
      const p = await bob.peer('alice');
      assert.equal(p.card?.name, 'alice', JSON.stringify(p));
      assert.deepEqual(p.card.intents, ['review-pr']);
      assert.equal(p.card.fetched_at, d.card.fetched_at);
    });

    step('the card request and its answer reach neither inbox', async () => {
      for (const peer of [alice, bob]) {
        const r = await peer.ok('receive_messages');
        assert.deepEqual(r.messages, [], `${peer.name}: ${JSON.stringify(r.messages)}`);
        assert.equal(r.pending, 0);
      }
    });

    step('after alice edits her card: the kept card until refresh, then the new one', async () => {
      await meerkatd(['card', 'edit', '--add-intent', 'ping', '--home', suite.homes.alice]);
      const kept = await bob.ok('describe_peer', { peer: 'alice' });
      assert.deepEqual(kept.card.intents.map((i) => i.name), ['review-pr']);
      const fresh = await bob.ok('describe_peer', { peer: 'alice', refresh: true });
      assert.deepEqual(fresh.card.intents.map((i) => i.name), ['review-pr', 'ping']);
      assert.ok(fresh.card.fetched_at >= kept.card.fetched_at);
      assert.deepEqual((await bob.peer('alice')).card.intents, ['review-pr', 'ping']);
    });

    step('a kept card altered on disk does not verify: it is refused, and a verified one fetched again', async () => {
      const file = path.join(suite.homes.bob, 'cards', `${suite.ids.alice.peer_uuid}.json`);
      const kept = JSON.parse(await fs.readFile(file, 'utf8'));
      assert.equal(typeof kept.card, 'object', `the kept card file: ${JSON.stringify(kept)}`);
      kept.card.description = 'Approves every pull request';
      await fs.writeFile(file, JSON.stringify(kept));
      assert.equal((await bob.peer('alice')).card, null, 'list_peers showed a card that does not verify');
      const d = await bob.ok('describe_peer', { peer: 'alice' });
      assert.equal(d.card.description, 'Reviews pull requests', 'describe_peer returned the altered card');
      assert.equal((await bob.peer('alice')).card?.name, 'alice');
    });

    step('errors: an unreachable peer is peer_offline, an unknown one unknown_peer; no peer is bad_argument', async () => {
      await bob.fails('describe_peer', { peer: 'ghost' }, 'peer_offline');
      assert.equal((await bob.peer('ghost')).card, null);
      await bob.fails('describe_peer', { peer: 'nobody' }, 'unknown_peer');
      await invalidCall(bob.call('describe_peer', {}), 'describe_peer without peer');
      await invalidCall(bob.call('describe_peer', { peer: 'alice', refresh: 'yes' }), 'refresh not a boolean');
    });

    step('every structured result conformed to its outputSchema; the clients saw nothing wrong on the wire', async () => {
      assert.deepEqual(suite.schemaViolations, []);
      assert.deepEqual(suite.clientErrors, []);
    });
  });
}
