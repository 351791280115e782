// End-to-end tests of the request lifecycle tools of `meerkatd mcp`
// (send_request's deadline, list_requests, cancel_request), driven by the
// official MCP TypeScript SDK clients, run with `node --test` next to
// mcp.test.mjs:
//
//   MEERKATD_BIN=/abs/path/to/meerkatd node --test mcpserver/e2e/*.test.mjs
//
// (or `make e2e`). Two nodes, alice and bob, trust each other over Unix
// sockets in a temporary directory. The flows, each through the SDK
// clients' tools/call:
//
//   - alice sends a request with a deadline of two seconds that bob does
//     not answer in time: alice's list_requests shows it timed_out, and
//     the request bob holds shows "cancelled" with reason "deadline";
//     bob may still answer it, and alice's node records that answer
//     without changing the state.
//   - alice cancels an open request with a note: bob's item shows the
//     cancellation and the note; a second cancel is refused.
//   - bob answers "accepted" first: alice sees the response but the
//     request stays open (progress), until bob's "completed".
//   - Malformed calls are bad_argument tool errors.
//
// Like the other suites, it runs once per protocol era and mode (embedded:
// each meerkatd mcp runs its own node; attached: meerkatd run for both
// homes). Structured results are validated by the SDK and by Ajv against
// the listed outputSchemas; violations are asserted empty at the end.

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

const WAIT_MS = 20_000;

class Peer extends McpPeer {
  /** Client.callTool: the SDK validates structuredContent against the listed outputSchema. */
  async ok(name, args = {}, { timeout = CALL_TIMEOUT } = {}) {
    assert.ok(this.outputSchemas.has(name), `${this.name}: ${name} was not listed with an outputSchema`);
    return this.structured(name, this.check(name, args, await this.suite.era.callTool(this.client, { name, arguments: args }, timeout)));
  }

  /** The request this peer holds with id (undefined if none). */
  async held(id) {
    const got = await this.ok('receive_messages', { kinds: ['request'] });
    return got.messages.find((m) => m.id === id);
  }

  /** The request this peer sent with id, from list_requests. */
  async sent(id) {
    const r = await this.ok('list_requests', {});
    return r.requests.find((x) => x.id === id);
  }
}

async function makeHomes(suite) {
  suite.root = await makeTempRoot('mkl-');
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
}

for (const era of ERAS) for (const mode of ['embedded', 'attached']) {
  describe(`meerkatd mcp request lifecycle (${era.version}, ${era.sdk}, ${mode})`, { timeout: 120_000 }, () => {
    const suite = { era, logs: [], daemons: {}, schemaViolations: [], clientErrors: [], failed: false };
    let alice;
    let bob;
    const step = stepper(suite);

    before(async () => {
      [alice, bob] = await setUp(suite, mode, makeHomes, Peer);
    });
    after(() => tearDown(suite, [alice, bob], `lifecycle ${era.version} ${mode}`));

    step('tools/list: cancel_request and list_requests with output schemas; send_request takes a deadline', async () => {
      for (const peer of [alice, bob]) {
        const { tools } = await peer.client.listTools(undefined, { timeout: CALL_TIMEOUT });
        const by = Object.fromEntries(tools.map((t) => [t.name, t]));
        for (const name of ['cancel_request', 'list_requests']) {
          const t = by[name];
          assert.ok(t, `${peer.name}: tools/list lacks ${name}`);
          assert.equal(t.outputSchema?.type, 'object', `${name}: outputSchema`);
          assert.ok('pending' in t.outputSchema.properties, `${name}: outputSchema lacks "pending"`);
        }
        assert.deepEqual(by.cancel_request.inputSchema.required, ['request_id']);
        assert.equal(by.list_requests.annotations?.readOnlyHint, true);
        assert.equal(by.send_request.inputSchema.properties.deadline?.type, 'string', 'send_request lacks deadline');
        const item = by.receive_messages.outputSchema.properties.messages.items.properties;
        assert.ok('cancelled' in item && 'deadline' in item, 'receive_messages items lack cancelled/deadline');
        for (const t of tools) if (t.outputSchema) peer.outputSchemas.set(t.name, t.outputSchema);
      }
    });

    step('a deadline passes: alice shows timed_out, bob\'s held request shows cancelled with reason deadline; a late answer is kept, the state stays', async () => {
      const sent = await alice.ok('send_request', { peer: 'bob', intent: 'review', params: { pr: 7 }, reliable: false, deadline: '2s' });
      assert.match(sent.id, UUID_RE);
      assert.equal(sent.delivery, 'acked');
      const open = await alice.sent(sent.id);
      assert.equal(open.state, 'open');
      assert.equal(open.intent, 'review');
      assert.ok(Date.parse(open.deadline) > Date.now() - 5_000, `deadline ${open.deadline}`);

      await until(WAIT_MS, 'bob to hold the request', () => bob.held(sent.id));
      const timedOut = await until(WAIT_MS, 'alice to time it out', async () => {
        const r = await alice.ok('list_requests', { states: ['timed_out'] });
        return r.requests.find((x) => x.id === sent.id);
      });
      assert.equal(timedOut.state, 'timed_out');
      const held = await until(WAIT_MS, 'bob to see the cancellation', async () => {
        const m = await bob.held(sent.id);
        return m?.cancelled ? m : undefined;
      });
      assert.equal(held.cancelled.reason, 'deadline');
      assert.ok(!Number.isNaN(Date.parse(held.cancelled.at)));
      // Neither side's agent sees the nodes' meerkat.cancel traffic.
      for (const peer of [alice, bob]) {
        const all = await peer.ok('receive_messages', {});
        assert.ok(!all.messages.some((m) => m.intent?.startsWith('meerkat.')), `${peer.name} sees a meerkat.* request`);
        assert.ok(!all.messages.some((m) => m.kind === 'response'), `${peer.name} sees a response it did not ask for`);
      }

      // Answering a cancelled request stays allowed.
      const late = await bob.ok('send_response', { peer: 'alice', request_id: sent.id, status: 'completed', result: 'late', reliable: false });
      const r = await until(WAIT_MS, 'alice to record the late answer', async () => {
        const x = await alice.sent(sent.id);
        return x.response_id ? x : undefined;
      });
      assert.equal(r.response_id, late.id);
      assert.equal(r.final_status, 'completed');
      assert.equal(r.state, 'timed_out', 'a late answer leaves the state');
      const got = await alice.ok('receive_messages', { request_id: sent.id });
      assert.deepEqual(got.messages.map((m) => m.id), [late.id]);
    });

    step('a cancel reaches the holder with its note; a second cancel is refused', async () => {
      const sent = await alice.ok('send_request', { peer: 'bob', intent: 'build', reliable: false });
      await until(WAIT_MS, 'bob to hold the request', () => bob.held(sent.id));
      const c = await alice.ok('cancel_request', { request_id: sent.id, reason: 'not needed any more' });
      assert.equal(c.request.id, sent.id);
      assert.equal(c.request.state, 'cancelled');
      assert.equal(c.request.note, 'not needed any more');
      assert.match(c.cancel.id, UUID_RE);
      assert.equal(c.cancel.delivery, 'acked');
      const held = await until(WAIT_MS, 'bob to see the cancel', async () => {
        const m = await bob.held(sent.id);
        return m?.cancelled ? m : undefined;
      });
      assert.equal(held.cancelled.reason, 'cancelled');
      assert.equal(held.cancelled.note, 'not needed any more');
      await alice.fails('cancel_request', { request_id: sent.id }, 'bad_argument');
      await alice.fails('cancel_request', { request_id: '00000000-0000-4000-8000-000000000000' }, 'unknown_request');
      const listed = await alice.ok('list_requests', { states: ['cancelled'] });
      assert.deepEqual(listed.requests.map((x) => x.id), [sent.id]);
    });

    step('accepted is progress: the request stays open until the final response', async () => {
      const sent = await alice.ok('send_request', { peer: 'bob', intent: 'work', reliable: false });
      await until(WAIT_MS, 'bob to hold the request', () => bob.held(sent.id));
      await bob.ok('send_response', { peer: 'alice', request_id: sent.id, status: 'accepted', result: { eta: 'soon' }, reliable: false });
      await until(WAIT_MS, 'alice to receive the accepted response', async () => {
        const got = await alice.ok('receive_messages', { request_id: sent.id });
        return got.messages.find((m) => m.status === 'accepted');
      });
      const progress = await alice.sent(sent.id);
      assert.equal(progress.state, 'open', 'accepted must not close the request');
      assert.equal(progress.response_id, undefined);
      const done = await bob.ok('send_response', { peer: 'alice', request_id: sent.id, status: 'completed', result: { ok: true }, reliable: false });
      const r = await until(WAIT_MS, 'alice to see it answered', async () => {
        const x = await alice.sent(sent.id);
        return x.state === 'answered' ? x : undefined;
      });
      assert.equal(r.response_id, done.id);
      assert.equal(r.final_status, 'completed');
      await alice.fails('cancel_request', { request_id: sent.id }, 'bad_argument');
    });

    step('malformed calls, reserved intents and past deadlines are tool errors', async () => {
      await invalidCall(alice.call('send_request', { peer: 'bob', intent: 'x', deadline: 'soon' }), 'deadline "soon"');
      await invalidCall(alice.call('send_request', { peer: 'bob', intent: 'x', deadline: 30 }), 'deadline as a number');
      await invalidCall(alice.call('list_requests', { states: ['done'] }), 'list_requests with a bad state');
      await invalidCall(alice.call('cancel_request', {}), 'cancel_request without request_id');
      await alice.fails('send_request', { peer: 'bob', intent: 'meerkat.cancel', params: {} }, 'bad_argument');
      await alice.fails('send_request', { peer: 'bob', intent: 'x', deadline: '2020-01-01T00:00:00Z' }, 'bad_argument');
    });

    step('every structured result conformed to its outputSchema; the clients saw nothing wrong on the wire', async () => {
      assert.deepEqual(suite.schemaViolations, []);
      assert.deepEqual(suite.clientErrors, []);
    });
  });
}
