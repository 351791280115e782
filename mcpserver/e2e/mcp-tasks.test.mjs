// End-to-end tests of the broadcast and task tools of `meerkatd mcp`,
// driven by the official MCP TypeScript SDK clients, run with
// `node --test` next to mcp.test.mjs:
//
//   MEERKATD_BIN=/abs/path/to/meerkatd node --test mcpserver/e2e/*.test.mjs
//
// (or `make e2e`). Two nodes, alice and bob, trust each other over Unix
// sockets in a temporary directory; alice holds bob as a meerkatd node in
// group "team" (trust entry meta), set with the CLI before any session
// starts. The flows, each through the SDK clients' tools/call:
//
//   - alice broadcasts: one copy to bob, acknowledged and marked; bob's
//     item carries the broadcast id. A broadcast to an unknown group is a
//     tool error naming the known groups.
//   - alice sends a request under a task; bob's item carries its
//     task_id; alice's wait_task times out with the task open (twice:
//     only a completion resolves it); bob lists the task with alice as
//     participant and completes it with a result; alice's wait_task then
//     returns it completed by bob with that result, and keeps doing so.
//   - Malformed calls are bad_argument tool errors.
//
// Like the other suites it runs once per protocol era and mode (embedded,
// attached); structured results are checked against the listed output
// schemas by the SDK (callTool) and by Ajv.

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

const TOOLS = ['broadcast', 'task_complete', 'list_tasks', 'wait_task'];
const TASK = 'e2e release 1';

class Peer extends McpPeer {
  /** Client.callTool (the SDK validates structuredContent); must succeed. */
  async ok(name, args = {}, { timeout = CALL_TIMEOUT } = {}) {
    assert.ok(this.outputSchemas.has(name), `${this.name}: ${name} was not listed with an outputSchema`);
    return this.structured(name, this.check(name, args, await this.suite.era.callTool(this.client, { name, arguments: args }, timeout)));
  }

  /** Waits for an inbox item matching pred. */
  async item(pred, what) {
    return until(20_000, `${this.name}: ${what}`, async () => {
      const got = await this.ok('receive_messages', { wait_ms: 1_000 }, { timeout: 1_000 + CALL_TIMEOUT });
      return got.messages.find(pred);
    });
  }
}

async function makeHomes(suite) {
  suite.root = await makeTempRoot('mkt-');
  const homes = { alice: path.join(suite.root, 'a'), bob: path.join(suite.root, 'b') };
  suite.homes = homes;
  suite.ids = {};
  for (const [name, h] of Object.entries(homes)) {
    await meerkatd(['init', '--name', name, '--home', h]);
    suite.ids[name] = JSON.parse(await meerkatd(['id', '--json', '--home', h]));
  }
  const addr = (name) => `uds://${homes[name]}/meerkat.sock`;
  await meerkatd(['peers', 'add', 'bob', suite.ids.bob.pubkey, addr('bob'), '--meta', '{"software":"meerkatd","groups":["team"]}', '--home', homes.alice]);
  await meerkatd(['peers', 'add', 'alice', suite.ids.alice.pubkey, addr('alice'), '--home', homes.bob]);
}

for (const era of ERAS) for (const mode of ['embedded', 'attached']) {
  describe(`meerkatd mcp broadcast and tasks (${era.version}, ${era.sdk}, ${mode})`, { timeout: 120_000 }, () => {
    const suite = { era, logs: [], daemons: {}, schemaViolations: [], clientErrors: [], failed: false };
    let alice;
    let bob;
    const step = stepper(suite);

    before(async () => {
      [alice, bob] = await setUp(suite, mode, makeHomes, Peer);
    });

    after(() => tearDown(suite, [alice, bob], `tasks ${era.version} ${mode}`));

    step('tools/list: broadcast, task_complete, list_tasks and wait_task with output schemas; task_id on the send tools', async () => {
      for (const peer of [alice, bob]) {
        const { tools } = await peer.client.listTools(undefined, { timeout: CALL_TIMEOUT });
        const by = Object.fromEntries(tools.map((t) => [t.name, t]));
        for (const name of TOOLS) {
          const t = by[name];
          assert.ok(t, `${peer.name}: tools/list lacks ${name}`);
          assert.equal(t.outputSchema?.type, 'object', `${name}: outputSchema.type`);
          assert.ok('pending' in t.outputSchema.properties, `${name}: outputSchema lacks "pending"`);
        }
        for (const t of tools) if (t.outputSchema) peer.outputSchemas.set(t.name, t.outputSchema);
        for (const name of ['send_message', 'send_request', 'send_response']) {
          assert.ok('task_id' in by[name].inputSchema.properties, `${name} lacks task_id`);
        }
        assert.deepEqual(by.broadcast.inputSchema.required, ['body']);
        assert.deepEqual(by.wait_task.inputSchema.required, ['task_id']);
        assert.equal(by.list_tasks.annotations?.readOnlyHint, true);
        for (const p of ['task_id', 'broadcast_id']) {
          assert.ok(p in by.receive_messages.outputSchema.properties.messages.items.properties, `receive_messages items lack ${p}`);
        }
      }
    });

    step('broadcast: one acknowledged copy to bob, marked; bob sees the broadcast id; an unknown group is refused', async () => {
      const res = await alice.ok('broadcast', { body: 'standup in five', group: 'team' });
      assert.match(res.broadcast_id, UUID_RE);
      assert.equal(res.copies.length, 1, JSON.stringify(res));
      const [c] = res.copies;
      assert.equal(c.peer, 'bob');
      assert.equal(c.marked, true);
      assert.ok(c.delivery === 'acked' || c.delivery === 'queued', `delivery ${c.delivery}`);
      const got = await bob.item((m) => m.body === 'standup in five', 'the broadcast');
      assert.equal(got.broadcast_id, res.broadcast_id);
      assert.equal(got.peer, 'alice');
      const text = await alice.fails('broadcast', { body: 'x', group: 'qa' }, 'bad_argument');
      assert.match(text, /team/, 'the known groups are listed');
    });

    step('a task resolves only on task_complete, also when awaited again', async () => {
      const sent = await alice.ok('send_request', { peer: 'bob', intent: 'release', params: { v: 1 }, task_id: TASK });
      assert.match(sent.id, UUID_RE);
      const req = await bob.item((m) => m.id === sent.id, 'the request under the task');
      assert.equal(req.task_id, TASK);
      for (let i = 0; i < 2; i++) {
        const w = await alice.ok('wait_task', { task_id: TASK, wait_ms: 300 });
        assert.equal(w.timed_out, true);
        assert.equal(w.task.state, 'open');
      }
      const listed = (await bob.ok('list_tasks', { state: 'open' })).tasks;
      const mine = listed.find((t) => t.id === TASK);
      assert.ok(mine, `bob's open tasks: ${JSON.stringify(listed)}`);
      assert.deepEqual(mine.participants.map((p) => p.peer), ['alice']);
      const done = await bob.ok('task_complete', { task_id: TASK, result: { tag: 'v1.0', n: 12345678901234567 } });
      assert.equal(done.task.state, 'completed');
      assert.equal(done.task.completed_by, 'self');
      assert.equal(done.copies.length, 1);
      const w = await alice.ok('wait_task', { task_id: TASK, wait_ms: 15_000 }, { timeout: 15_000 + CALL_TIMEOUT });
      assert.equal(w.timed_out, false);
      assert.equal(w.task.state, 'completed');
      assert.equal(w.task.completed_by, 'bob');
      assert.equal(w.task.result.tag, 'v1.0');
      const again = await alice.ok('wait_task', { task_id: TASK });
      assert.equal(again.task.state, 'completed');
      assert.equal((await bob.ok('task_complete', { task_id: TASK })).already, true);
      await alice.fails('wait_task', { task_id: 'no such task' }, 'unknown_task');
    });

    step('malformed calls are bad_argument tool errors', async () => {
      await invalidCall(alice.call('broadcast', {}), 'broadcast without body');
      await invalidCall(alice.call('broadcast', { body: 'x', group: 'team', peers: ['bob'] }), 'group and peers');
      await invalidCall(alice.call('wait_task', { task_id: TASK, wait_ms: 99_999 }), 'wait_ms too long');
      await invalidCall(alice.call('list_tasks', { state: 'done' }), 'bad state');
      await invalidCall(alice.call('task_complete', {}), 'task_complete without task_id');
    });

    step('every structured result conformed to its outputSchema; the clients saw nothing wrong on the wire', async () => {
      assert.deepEqual(suite.schemaViolations, []);
      assert.deepEqual(suite.clientErrors, []);
    });
  });
}
