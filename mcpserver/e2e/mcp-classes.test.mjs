// End-to-end tests of item classes in `meerkatd mcp`, driven by the
// official MCP TypeScript SDK clients, run with `node --test` next to
// mcp.test.mjs:
//
//   MEERKATD_BIN=/abs/path/to/meerkatd node --test mcpserver/e2e/*.test.mjs
//
// (or `make e2e`). alice and bob trust each other over Unix sockets in a
// temporary directory; alice also trusts carol, whose node never runs.
// The flows, through the SDK clients' tools/call:
//
//   - tools/list: receive_messages takes order (priority, arrival), the
//     send tools take interrupt, items show class and notice, status and
//     receive_messages show pending_by_class.
//   - bob sends ten ordinary messages, then one with interrupt: true:
//     alice reads the interrupt first; in arrival order it comes last.
//   - alice's person adds a note with `meerkatd tell` (through the node
//     the MCP session uses); alice sends carol a reliable message with a
//     one-second ttl_seconds: it dies, and the dead-letter notice (class
//     system, naming carol and the envelope, not its body) comes before
//     the note, which comes before bob's interrupt.
//   - Malformed order and interrupt are bad_argument tool errors.
//
// Each suite runs once per protocol era and mode (embedded: meerkatd mcp
// runs its own node; attached: to a meerkatd run daemon). Successful tool
// calls go through Client.callTool, which validates structuredContent
// against the listed outputSchema; every structured result is also
// checked with Ajv, and the violations are asserted empty at the end.

import { after, before, describe } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';

import {
  CALL_TIMEOUT,
  ERAS,
  McpPeer,
  UUID_RE,
  invalidCall,
  makeTempRoot,
  meerkatd,
  setUp,
  stepper,
  tearDown,
  until,
} from './helpers.mjs';

const CLASSES = ['system', 'user', 'interrupt', 'broadcast', 'normal'];

class Peer extends McpPeer {
  /** Client.callTool (SDK-validated structuredContent); must succeed. */
  async ok(name, args = {}, { timeout = CALL_TIMEOUT } = {}) {
    assert.ok(this.outputSchemas.has(name), `${this.name}: ${name} was not listed with an outputSchema`);
    return this.structured(name, this.check(name, args, await this.suite.era.callTool(this.client, { name, arguments: args }, timeout)));
  }
}

async function makeHomes(suite) {
  suite.root = await makeTempRoot('mkc-');
  const homes = { alice: path.join(suite.root, 'a'), bob: path.join(suite.root, 'b'), carol: path.join(suite.root, 'c') };
  suite.homes = homes;
  const ids = {};
  for (const [name, h] of Object.entries(homes)) {
    await meerkatd(['init', '--name', name, '--home', h]);
    ids[name] = JSON.parse(await meerkatd(['id', '--json', '--home', h]));
  }
  const addr = (name) => `uds://${homes[name]}/meerkat.sock`;
  await meerkatd(['peers', 'add', 'bob', ids.bob.pubkey, addr('bob'), '--home', homes.alice]);
  await meerkatd(['peers', 'add', 'carol', ids.carol.pubkey, addr('carol'), '--home', homes.alice]); // never runs
  await meerkatd(['peers', 'add', 'alice', ids.alice.pubkey, addr('alice'), '--home', homes.bob]);
}

for (const era of ERAS) for (const mode of ['embedded', 'attached']) {
  describe(`meerkatd mcp classes (${era.version}, ${era.sdk}, ${mode})`, { timeout: 120_000 }, () => {
    const suite = { era, logs: [], daemons: {}, schemaViolations: [], clientErrors: [], failed: false };
    let alice;
    let bob;
    const step = stepper(suite);

    before(async () => {
      [alice, bob] = await setUp(suite, mode, makeHomes, Peer);
    });
    after(() => tearDown(suite, [alice, bob], `classes ${era.version} ${mode}`));

    step('tools/list: order, interrupt, class, notice, pending_by_class', async () => {
      for (const peer of [alice, bob]) {
        const { tools } = await peer.client.listTools(undefined, { timeout: CALL_TIMEOUT });
        const by = Object.fromEntries(tools.map((t) => [t.name, t]));
        for (const t of tools) if (t.outputSchema) peer.outputSchemas.set(t.name, t.outputSchema);
        assert.deepEqual(by.receive_messages.inputSchema.properties.order.enum.slice().sort(), ['arrival', 'priority']);
        for (const n of ['send_message', 'send_request']) {
          assert.equal(by[n].inputSchema.properties.interrupt?.type, 'boolean', `${n}: interrupt`);
        }
        assert.equal(by.send_response.inputSchema.properties.interrupt, undefined, 'send_response takes no interrupt');
        const item = by.receive_messages.outputSchema.properties.messages.items.properties;
        assert.ok('class' in item && 'notice' in item, 'items lack class or notice');
        assert.ok('pending_by_class' in by.receive_messages.outputSchema.properties, 'receive_messages lacks pending_by_class');
        assert.ok('pending_by_class' in by.status.outputSchema.properties, 'status lacks pending_by_class');
        assert.equal(by.tell, undefined, 'a tool makes user items');
      }
    });

    step('an interrupt sent after ten ordinary messages is read first', async () => {
      for (let i = 0; i < 10; i++) await bob.ok('send_message', { peer: 'alice', body: `ordinary ${i}` });
      const sent = await bob.ok('send_message', { peer: 'alice', body: 'stop and look at this', interrupt: true });
      assert.match(sent.id, UUID_RE);
      const got = await until(10_000, 'the eleven messages', async () => {
        const b = await alice.ok('receive_messages', { limit: 1 });
        return b.pending === 11 ? b : undefined;
      });
      assert.equal(got.messages[0].id, sent.id, `first item: ${JSON.stringify(got.messages[0])}`);
      assert.equal(got.messages[0].class, 'interrupt');
      assert.equal(got.messages[0].untrusted, true);
      assert.equal(got.more, true);
      assert.deepEqual(Object.keys(got.pending_by_class).sort(), CLASSES.slice().sort());
      assert.equal(got.pending_by_class.interrupt, 1);
      assert.equal(got.pending_by_class.normal, 10);
      const arrival = await alice.ok('receive_messages', { order: 'arrival' });
      assert.deepEqual(arrival.messages.map((m) => m.class), [...Array(10).fill('normal'), 'interrupt']);
      assert.equal(arrival.messages[0].body, 'ordinary 0');
    });

    step('a dead-letter notice outranks the person\'s note, which outranks the interrupt', async () => {
      await meerkatd(['tell', 'the person asks for a summary', '--home', suite.homes.alice]);
      const sent = await alice.ok('send_message', { peer: 'carol', body: 'a secret body', reliable: true, ttl_seconds: 1 });
      assert.equal(sent.delivery, 'queued');
      const got = await until(20_000, 'the dead-letter notice first', async () => {
        const b = await alice.ok('receive_messages', {});
        const first = b.messages[0];
        return first?.class === 'system' && b.messages.some((m) => m.notice?.event === 'dead_letter') ? b : undefined;
      });
      const sys = got.pending_by_class.system;
      const notices = got.messages.slice(0, sys);
      for (const m of notices) {
        assert.equal(m.class, 'system');
        assert.equal(m.untrusted, false);
      }
      const dead = notices.find((m) => m.notice?.event === 'dead_letter');
      assert.ok(dead, `no dead-letter notice among the system items: ${JSON.stringify(notices)}`);
      assert.equal(dead.notice.peer, 'carol');
      assert.equal(dead.notice.id, sent.id);
      assert.ok(!dead.body.includes('secret'), 'the notice shows the body');
      const rest = got.messages.slice(sys);
      assert.equal(rest[0].class, 'user');
      assert.equal(rest[0].body, 'the person asks for a summary');
      assert.equal(rest[0].untrusted, false);
      assert.equal(rest[1].class, 'interrupt');
      assert.ok(rest.slice(2).every((m) => m.class === 'normal'));
      const st = await alice.ok('status', {});
      assert.equal(st.pending_by_class.user, 1);
      assert.ok(st.pending_by_class.system >= 1);
    });

    step('malformed order and interrupt are bad_argument tool errors', async () => {
      for (const [name, args] of [
        ['receive_messages', { order: 'newest' }],
        ['send_message', { peer: 'bob', body: 'x', interrupt: 'yes' }],
      ]) {
        await invalidCall(alice.call(name, args), `${name} ${JSON.stringify(args)}`);
      }
    });

    step('every structured result matched its outputSchema', () => {
      assert.deepEqual(suite.schemaViolations, []);
      assert.deepEqual(suite.clientErrors, []);
    });
  });
}
