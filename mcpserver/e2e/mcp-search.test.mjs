// End-to-end tests of search_messages of `meerkatd mcp`, driven by the
// official MCP TypeScript SDK clients, run with `node --test` next to
// mcp.test.mjs (`make e2e`).
//
// Two nodes, alice and bob, trust each other over Unix sockets. bob sends
// alice messages and a request with the CLI; alice's agent acknowledges
// some of them, then searches through its MCP session: a word found in
// unacknowledged items and in the acknowledged history, newest first,
// pages followed with the cursor, the kind, peer and time filters, tool
// errors with their codes, malformed calls (bad_argument) among them.
//
// The suite runs once per protocol era and mode (embedded: meerkatd mcp
// runs alice's node; attached: meerkatd run for both homes). Successful
// calls go through Client.callTool, which validates structuredContent
// against the listed outputSchema; every structured result is also
// checked with Ajv, and the violations are asserted empty at the end.

import { after, before, describe } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';

import { CALL_TIMEOUT, ERAS, McpPeer, invalidCall, makeTempRoot, meerkatd, setUp, stepper, tearDown, until } from './helpers.mjs';

class Peer extends McpPeer {
  /** Client.callTool (SDK output validation); the call must succeed. */
  async ok(name, args = {}) {
    assert.ok(this.outputSchemas.has(name), `${this.name}: ${name} was not listed with an outputSchema`);
    return this.structured(name, this.check(name, args, await this.suite.era.callTool(this.client, { name, arguments: args }, CALL_TIMEOUT)));
  }
}

async function makeHomes(suite) {
  suite.root = await makeTempRoot('mkq-');
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
  describe(`meerkatd mcp search (${era.version}, ${era.sdk}, ${mode})`, { timeout: 120_000 }, () => {
    const suite = { era, logs: [], daemons: {}, schemaViolations: [], clientErrors: [], failed: false };
    let alice;
    let bob;
    const deploy = []; // ids of the items that mention deploy, oldest first
    let request;
    const step = stepper(suite);

    before(async () => {
      [alice, bob] = await setUp(suite, mode, makeHomes, Peer);
    });

    after(() => tearDown(suite, [alice, bob], `search ${era.version} ${mode}`));

    step('tools/list: search_messages, read only, query required, with an output schema', async () => {
      const { tools } = await alice.client.listTools(undefined, { timeout: CALL_TIMEOUT });
      for (const t of tools) if (t.outputSchema) alice.outputSchemas.set(t.name, t.outputSchema);
      const t = tools.find((x) => x.name === 'search_messages');
      assert.ok(t, 'tools/list lacks search_messages');
      assert.deepEqual(t.inputSchema.required, ['query']);
      for (const p of ['query', 'peer', 'kind', 'since', 'until', 'limit', 'cursor']) assert.ok(p in t.inputSchema.properties, `input lacks ${p}`);
      for (const p of ['hits', 'more', 'cursor', 'history', 'pending']) assert.ok(p in t.outputSchema.properties, `output lacks ${p}`);
      assert.equal(t.annotations?.readOnlyHint, true);
    });

    step('bob sends; alice acknowledges the first two, which become history', async () => {
      const send = async (...args) => JSON.parse(await meerkatd(['send', ...args, '--json', '--home', suite.homes.bob])).id;
      for (let i = 0; i < 5; i++) {
        if (i % 2 === 0) deploy.push(await send('message', 'alice', `Deploy ${i} went out`));
        else await send('message', 'alice', 'lunch at noon?');
      }
      request = await send('request', 'alice', 'deploy-now', '{"target": "production"}');
      deploy.push(request);
      const got = await until(10_000, 'alice: six items', async () => {
        const r = await alice.ok('receive_messages', { limit: 10 });
        return r.messages.length === 6 ? r : undefined;
      });
      const acked = await alice.ok('ack_messages', { ids: got.messages.slice(0, 2).map((m) => m.id) });
      assert.equal(acked.acked, 2);
    });

    step('search_messages finds the word in the inbox and the history, newest first', async () => {
      const r = await alice.ok('search_messages', { query: 'DEPLOY' });
      assert.deepEqual(r.hits.map((h) => h.message.id), deploy.slice().reverse());
      assert.equal(r.more, false);
      assert.equal(r.history, true);
      assert.equal(r.pending, 4);
      const oldest = r.hits.at(-1);
      assert.equal(oldest.acked, true, 'the first message was acknowledged');
      assert.equal(r.hits[0].acked, false);
      assert.equal(oldest.message.body, 'Deploy 0 went out');
      assert.equal(oldest.message.peer, 'bob');
      assert.match(oldest.snippet, /«Deploy»/);
      assert.equal(r.hits[0].message.intent, 'deploy-now');
    });

    step('pages of one follow the cursor through every hit once', async () => {
      const seen = [];
      let args = { query: 'deploy*', limit: 1 };
      for (let pages = 0; ; pages++) {
        assert.ok(pages < 10, 'paging does not end');
        const r = await alice.ok('search_messages', args);
        assert.ok(r.hits.length <= 1);
        seen.push(...r.hits.map((h) => h.message.id));
        if (!r.more) break;
        assert.equal(typeof r.cursor, 'string');
        args = { query: 'deploy*', limit: 1, cursor: r.cursor };
      }
      assert.deepEqual(seen, deploy.slice().reverse());
    });

    step('filters: kind, peer, since and until', async () => {
      const ids = async (args) => (await alice.ok('search_messages', args)).hits.map((h) => h.message.id);
      assert.deepEqual(await ids({ query: 'production', kind: 'request' }), [request]);
      assert.deepEqual(await ids({ query: 'production', kind: 'message' }), []);
      assert.deepEqual(await ids({ query: '"deploy 2"', peer: 'bob' }), [deploy[1]]);
      assert.deepEqual(await ids({ query: 'deploy', peer: suite.ids.bob.pubkey, limit: 1 }), [request]);
      assert.deepEqual(await ids({ query: 'deploy', since: '2099-01-01T00:00:00Z' }), []);
      assert.deepEqual(await ids({ query: 'deploy', until: '2000-01-01T00:00:00Z' }), []);
      assert.equal((await ids({ query: 'lunch noon' })).length, 2);
    });

    step('tool errors carry their codes; malformed calls are bad_argument', async () => {
      await alice.fails('search_messages', { query: '*** ---' }, 'bad_argument');
      await alice.fails('search_messages', { query: 'deploy', peer: 'carol' }, 'unknown_peer');
      await alice.fails('search_messages', { query: 'deploy', cursor: 'nonsense' }, 'bad_argument');
      for (const args of [{}, { query: 'x', limit: 0 }, { query: 'x', limit: 101 }, { query: 'x', kind: 'ack' }, { query: 'x', since: 'yesterday' }]) {
        await invalidCall(alice.call('search_messages', args), `search_messages ${JSON.stringify(args)}`);
      }
    });

    step('every structured result conformed to its outputSchema; the clients saw nothing wrong on the wire', async () => {
      assert.deepEqual(suite.schemaViolations, []);
      assert.deepEqual(suite.clientErrors, []);
    });
  });
}
