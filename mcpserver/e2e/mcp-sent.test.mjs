// End-to-end tests of delivery status and safe retries in `meerkatd mcp`,
// driven by the official MCP TypeScript SDK clients, run with
// `node --test` next to mcp.test.mjs (or `make e2e`):
//
//   MEERKATD_BIN=/abs/path/to/meerkatd node --test mcpserver/e2e/*.test.mjs
//
// Homes alice and bob trust each other over Unix sockets; alice also
// trusts carol, whose address has nothing behind it. alice's outbox
// retries every 200 ms. Through the SDK clients' tools/call:
//
//   - alice sends bob a request (with an idempotency key) while bob's node
//     is down: message_status shows it queued; the same call again returns
//     the first result with "replayed": true; the key with other arguments
//     is an idempotency_conflict.
//   - bob's node comes up; alice's retry_outbox sends it: acked. bob
//     answers "accepted": progress, still acked; then "completed":
//     answered, naming bob's response. bob received the request once.
//   - a reliable send to carol with a one-second ttl becomes dead.
//   - a request and its cancel_request, both with keys, then the node
//     restarts: the first request and the cancel retried with their keys
//     are replayed (bob received the request once); the cancel without
//     its key is refused (not open), with other arguments a conflict.
//   - malformed calls are bad_argument tool errors.
//
// The suite runs once per protocol era and mode (embedded: each meerkatd
// mcp runs its own node; attached: meerkatd run for both homes). Every
// structured result is checked against the outputSchema the client listed.

import { after, before, describe } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import path from 'node:path';

import {
  CALL_TIMEOUT,
  ERAS,
  McpPeer,
  UUID_RE,
  invalidCall,
  makeTempRoot,
  meerkatd,
  startDaemon,
  stopProcess,
  stepper,
  tearDown,
  until,
} from './helpers.mjs';

class Peer extends McpPeer {
  /** Client.callTool (the SDK validates structuredContent); returns it. */
  async ok(name, args = {}, { timeout = CALL_TIMEOUT } = {}) {
    assert.ok(this.outputSchemas.has(name), `${this.name}: ${name} was not listed with an outputSchema`);
    return this.structured(name, this.check(name, args, await this.suite.era.callTool(this.client, { name, arguments: args }, timeout)));
  }

  async status(id) {
    const { statuses } = await this.ok('message_status', { ids: [id] });
    assert.equal(statuses.length, 1);
    assert.equal(statuses[0].id, id);
    return statuses[0];
  }

  async listTools() {
    const { tools } = await this.client.listTools(undefined, { timeout: CALL_TIMEOUT });
    for (const t of tools) if (t.outputSchema) this.outputSchemas.set(t.name, t.outputSchema);
    return tools;
  }
}

async function makeHomes(suite) {
  suite.root = await makeTempRoot('mkb-');
  const homes = { alice: path.join(suite.root, 'a'), bob: path.join(suite.root, 'b'), carol: path.join(suite.root, 'c') };
  suite.homes = homes;
  const ids = {};
  for (const [name, h] of Object.entries(homes)) {
    await meerkatd(['init', '--name', name, '--home', h]);
    ids[name] = JSON.parse(await meerkatd(['id', '--json', '--home', h]));
  }
  const addr = (name) => `uds://${homes[name]}/meerkat.sock`;
  await meerkatd(['peers', 'add', 'bob', ids.bob.pubkey, addr('bob'), '--home', homes.alice]);
  await meerkatd(['peers', 'add', 'carol', ids.carol.pubkey, `uds://${homes.carol}/nobody.sock`, '--home', homes.alice]);
  await meerkatd(['peers', 'add', 'alice', ids.alice.pubkey, addr('alice'), '--home', homes.bob]);
  const toml = path.join(homes.alice, 'meerkat.toml');
  const text = await fs.readFile(toml, 'utf8');
  assert.match(text, /^backoff = .*$/m, 'meerkat.toml has no outbox backoff line');
  await fs.writeFile(toml, text.replace(/^backoff = .*$/m, 'backoff = "200ms"'));
}

for (const era of ERAS) for (const mode of ['embedded', 'attached']) {
  describe(`meerkatd mcp delivery status (${era.version}, ${era.sdk}, ${mode})`, { timeout: 120_000 }, () => {
    const suite = { era, logs: [], daemons: {}, schemaViolations: [], clientErrors: [], failed: false };
    let alice;
    let bob;
    const step = stepper(suite);

    before(async () => {
      try {
        await makeHomes(suite);
        if (mode === 'attached') await startDaemon(suite, 'alice');
        alice = new Peer('alice', suite.homes.alice, suite);
        await alice.connect();
      } catch (err) {
        suite.failed = true;
        throw err;
      }
    });

    after(() => tearDown(suite, [alice, bob], `sent ${era.version} ${mode}`));

    step('tools/list: message_status (read only) and idempotency_key on every send tool', async () => {
      const tools = await alice.listTools();
      const by = Object.fromEntries(tools.map((t) => [t.name, t]));
      const ms = by.message_status;
      assert.ok(ms, 'tools/list lacks message_status');
      assert.deepEqual(ms.inputSchema.required, ['ids']);
      assert.equal(ms.inputSchema.properties.ids.maxItems, 100);
      assert.equal(ms.annotations?.readOnlyHint, true);
      for (const p of ['statuses', 'pending']) assert.ok(p in ms.outputSchema.properties, `message_status outputSchema lacks ${p}`);
      for (const n of ['send_message', 'send_request', 'send_response', 'broadcast', 'task_complete', 'cancel_request']) {
        assert.equal(by[n].inputSchema.properties.idempotency_key?.type, 'string', `${n} lacks idempotency_key`);
        assert.ok('replayed' in by[n].outputSchema.properties, `${n} outputSchema lacks replayed`);
      }
    });

    step('a request to a peer that is down: queued; a retry with its key is replayed, other arguments conflict', async () => {
      const args = { peer: 'bob', intent: 'review', params: { pr: 7 }, idempotency_key: 'review-pr-7' };
      const first = await alice.ok('send_request', args);
      assert.match(first.id, UUID_RE);
      assert.equal(first.delivery, 'queued');
      assert.notEqual(first.replayed, true);
      suite.requestId = first.id;
      const st = await until(10_000, 'the request to show queued after a failed attempt', async () => {
        const s = await alice.status(first.id);
        return s.state === 'queued' && s.attempts >= 1 ? s : undefined;
      });
      assert.equal(st.peer, 'bob');
      assert.equal(st.kind, 'request');
      assert.equal(st.intent, 'review');
      assert.equal(st.reliable, true);
      assert.equal(st.acked_at, null);
      assert.ok(st.last_error, 'a queued send says why its last attempt failed');

      const again = await alice.ok('send_request', args);
      assert.equal(again.replayed, true);
      assert.equal(again.id, first.id);
      await alice.fails('send_request', { ...args, params: { pr: 8 } }, 'idempotency_conflict');
    });

    step('bob comes up: the request is acked; "accepted" is progress; "completed" answers it', async () => {
      if (mode === 'attached') await startDaemon(suite, 'bob');
      bob = new Peer('bob', suite.homes.bob, suite);
      await bob.connect();
      await bob.listTools();
      const id = suite.requestId;
      await alice.ok('retry_outbox', { peer: 'bob' });
      const acked = await until(15_000, 'the request to be acked', async () => {
        const s = await alice.status(id);
        return s.state === 'acked' ? s : undefined;
      });
      assert.ok(acked.acked_at, 'acked_at');

      const got = await bob.ok('receive_messages', { kinds: ['request'], wait_ms: 5_000 }, { timeout: 5_000 + CALL_TIMEOUT });
      const reqs = got.messages.filter((m) => m.id === id);
      assert.equal(reqs.length, 1, `bob received the request ${reqs.length} times`);
      assert.equal(got.messages.length, 1, 'bob received one request in all');

      const acc = await bob.ok('send_response', { peer: 'alice', request_id: id, status: 'accepted' });
      const progressed = await until(10_000, 'the accepted response as progress', async () => {
        const s = await alice.status(id);
        return s.progress ? s : undefined;
      });
      assert.equal(progressed.state, 'acked', 'an accepted response never answers');
      assert.equal(progressed.progress.accepted, 1);
      assert.equal(progressed.progress.response_id, acc.id);
      assert.equal(progressed.answer, undefined);

      const done = await bob.ok('send_response', { peer: 'alice', request_id: id, status: 'completed', result: { ok: true }, idempotency_key: 'answer-7' });
      const replay = await bob.ok('send_response', { peer: 'alice', request_id: id, status: 'completed', result: { ok: true }, idempotency_key: 'answer-7' });
      assert.equal(replay.replayed, true, 'the final answer retried with its key is replayed, not refused');
      assert.equal(replay.id, done.id);
      const answered = await until(10_000, 'the request to be answered', async () => {
        const s = await alice.status(id);
        return s.state === 'answered' ? s : undefined;
      });
      assert.equal(answered.answer.response_id, done.id);
      assert.equal(answered.answer.status, 'completed');
      assert.equal((await bob.status(done.id)).state, 'written');
    });

    step('a reliable send to an unreachable peer with a short ttl goes dead', async () => {
      const sent = await alice.ok('send_message', { peer: 'carol', body: 'anyone there?', ttl_seconds: 1 });
      assert.equal(sent.delivery, 'queued');
      const dead = await until(20_000, 'the send to carol to go dead', async () => {
        const s = await alice.status(sent.id);
        return s.state === 'dead' ? s : undefined;
      });
      assert.match(dead.reason, /^expired/);
      assert.ok(dead.died_at, 'died_at');
      const { statuses } = await alice.ok('message_status', { ids: [sent.id, suite.requestId, '00000000-0000-4000-8000-000000000000'] });
      assert.deepEqual(statuses.map((s) => s.state), ['dead', 'answered', 'unknown']);
    });

    step('keys outlive a restart of the node: a send and a cancel retried after it are replayed', async () => {
      const req = await alice.ok('send_request', { peer: 'carol', intent: 'ping', idempotency_key: 'ping-carol' });
      assert.equal(req.delivery, 'queued');
      const cancelArgs = { request_id: req.id, reason: 'never mind', idempotency_key: 'cancel-ping' };
      const cancelled = await alice.ok('cancel_request', cancelArgs);
      assert.equal(cancelled.request.state, 'cancelled');
      assert.notEqual(cancelled.replayed, true);
      // Still queued for carol, who is away: withdrawn, so no cancel was sent.
      assert.equal(cancelled.withdrawn, true);
      assert.equal(cancelled.cancel, undefined, 'no cancel object for a withdrawn request');

      // The node stops and starts again (the daemon, or the node meerkatd
      // mcp ran itself), and a new session comes up.
      await alice.close();
      await stopProcess(alice.child);
      if (mode === 'attached') {
        await stopProcess(suite.daemons.alice);
        await startDaemon(suite, 'alice');
      }
      alice = new Peer('alice', suite.homes.alice, suite);
      await alice.connect();
      await alice.listTools();

      const again = await alice.ok('send_request', { peer: 'bob', intent: 'review', params: { pr: 7 }, idempotency_key: 'review-pr-7' });
      assert.equal(again.replayed, true, 'the first request, replayed after the restart');
      assert.equal(again.id, suite.requestId);
      const recancel = await alice.ok('cancel_request', cancelArgs);
      assert.equal(recancel.replayed, true, 'the cancel, replayed after the restart');
      assert.equal(recancel.withdrawn, true);
      assert.equal(recancel.cancel, undefined);
      await alice.fails('cancel_request', { request_id: req.id }, 'bad_argument');
      await alice.fails('cancel_request', { ...cancelArgs, reason: 'other' }, 'idempotency_conflict');
      const got = await bob.ok('receive_messages', { kinds: ['request'] });
      assert.equal(got.messages.filter((m) => m.id === suite.requestId).length, 1, 'bob received the request once');
    });

    step('malformed calls are bad_argument tool errors; a malformed id is answered on its own', async () => {
      await invalidCall(alice.call('message_status', {}), 'message_status without ids');
      await invalidCall(alice.call('message_status', { ids: [] }), 'message_status with no ids');
      await invalidCall(alice.call('message_status', { ids: Array(101).fill(suite.requestId) }), 'message_status with 101 ids');
      await invalidCall(alice.call('send_message', { peer: 'bob', body: 'x', idempotency_key: 'tab\there' }), 'a key with a tab');
      const { statuses } = await alice.ok('message_status', { ids: ['not-an-id', suite.requestId] });
      assert.equal(statuses.length, 2);
      assert.deepEqual([statuses[0].id, statuses[0].state, statuses[0].reason], ['not-an-id', 'unknown', 'not an envelope id']);
      assert.equal(statuses[1].id, suite.requestId);
      assert.notEqual(statuses[1].state, 'unknown', 'the good id beside it is answered');
    });

    step('every structured result conformed to its outputSchema; the clients saw nothing wrong on the wire', async () => {
      assert.deepEqual(suite.schemaViolations, []);
      assert.deepEqual(suite.clientErrors, []);
    });
  });
}
