// End-to-end tests of the MEUP space tools of `meerkatd mcp`, driven by
// the official MCP TypeScript SDK clients, run with `node --test` next to
// mcp.test.mjs:
//
//   MEERKATD_BIN=/abs/path/to/meerkatd node --test mcpserver/e2e/*.test.mjs
//
// (or `make e2e`). Two nodes, alice and bob, trust each other over Unix
// sockets in a temporary directory, and take part in the space "build",
// configured with the CLI before any MCP session or daemon starts:
//
//   alice is participant A, the orchestrator: her node holds A able to
//         send every kind ('*'), and bob's node holds A to '*' as well.
//   bob   is participant B, a worker that proposes: alice's node holds B
//         to chat, mcp/proposal, mcp/withdraw (to take a proposal back)
//         and mcp/response (to answer a request made to it), and nothing
//         else, mcp/request in particular.
//
// The flows, each through the SDK clients' tools/call:
//
//   - B sends an mcp/request itself: alice's node refuses it (A's agent
//     never sees it) and answers B with a system/error
//     "capability_violation" correlated to it.
//   - B proposes a call of its own tool (addressed to B, the participant
//     that runs it): A sees the mcp/proposal and a pending proposal,
//     fulfils it (an mcp/request to B on B's behalf, correlated to the
//     proposal), B answers with space_respond, and both nodes show the
//     proposal fulfilled by A with its request and response ids.
//   - A rejects a second proposal with a reason; B sees the mcp/reject.
//   - B withdraws a third; A sees it withdrawn and can no longer fulfil it.
//   - Malformed calls are bad_argument tool errors.
//
// Like mcp.test.mjs, the suite runs once per protocol era (SDK 1.x with
// 2025-11-25, @modelcontextprotocol/client 2.x with 2026-07-28) and mode
// (embedded: each meerkatd mcp runs its own node; attached: meerkatd run
// for both homes, each meerkatd mcp attached to its daemon). Successful
// tool calls go through Client.callTool, which validates structuredContent
// against the outputSchema the client listed; every structured result is
// also checked with an Ajv validator, and the violations are asserted
// empty at the end.

import { after, before, describe, test } from 'node:test';
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
  textOf,
  until,
} from './helpers.mjs';

const SPACE_TOOLS = [
  'edit_space',
  'list_proposals',
  'list_spaces',
  'space_chat',
  'space_fulfill',
  'space_grant',
  'space_propose',
  'space_reject',
  'space_respond',
  'space_revoke',
  'space_send',
  'space_withdraw',
];
const SPACE = 'build';
const A = 'A'; // alice's participant id
const B = 'B'; // bob's
const B_CAPS = ['chat', 'mcp/proposal', 'mcp/withdraw', 'mcp/response'];
const WAIT_MS = 10_000; // receive_messages waits

/** A capability's kind as one string (a kind pattern may be a list). */
const capKinds = (caps) => caps.flatMap((c) => (Array.isArray(c.kind) ? c.kind : [c.kind])).sort();

/**
 * An MCP session with `meerkatd mcp --home H` (helpers.mjs), with the
 * outputSchemas this peer listed.
 */
class Peer extends McpPeer {
  /**
   * Client.callTool, as an MCP host calls a tool: the SDK validates the
   * structuredContent against the tool's outputSchema (from tools/list).
   * The call must succeed; returns the structuredContent.
   */
  async ok(name, args = {}, { timeout = CALL_TIMEOUT } = {}) {
    assert.ok(this.outputSchemas.has(name), `${this.name}: ${name} was not listed with an outputSchema`);
    return this.structured(name, this.check(name, args, await this.suite.era.callTool(this.client, { name, arguments: args }, timeout)));
  }

  /** Waits (receive_messages with wait_ms) for MEUP items of the space matching pred. */
  async receiveMEUP(filter, pred, what) {
    return until(WAIT_MS * 2, `${this.name}: ${what}`, async () => {
      const got = await this.ok('receive_messages', { kinds: ['meup'], space: SPACE, wait_ms: 1_000, ...filter }, { timeout: 1_000 + CALL_TIMEOUT });
      for (const m of got.messages) {
        assert.equal(m.kind, 'meup', `kinds filter let ${m.kind} through`);
        assert.equal(m.meup?.space, SPACE, 'space filter let another space through');
        if (filter.meup_kinds) assert.ok(filter.meup_kinds.includes(m.meup.kind), `meup_kinds ${filter.meup_kinds} let ${m.meup.kind} through`);
      }
      const found = got.messages.filter(pred);
      return found.length ? found : undefined;
    });
  }

  async proposals(args = {}) {
    return (await this.ok('list_proposals', { space: SPACE, ...args })).proposals;
  }
}

// ------------------------------------------------------------------ setup

/** The homes, their trust and the space "build" on both, by the CLI. */
async function makeHomes(suite) {
  suite.root = await makeTempRoot('mks-');
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

  // alice: A with every kind; B may chat, propose, withdraw and respond.
  await meerkatd(['space', 'create', SPACE, '--as', A, '--home', homes.alice]);
  await meerkatd(['space', 'add', SPACE, 'bob', B, ...B_CAPS.flatMap((c) => ['--cap', c]), '--home', homes.alice]);
  // bob: B (its own capabilities are for the others to enforce), A with '*'.
  await meerkatd(['space', 'create', SPACE, '--as', B, '--home', homes.bob]);
  await meerkatd(['space', 'add', SPACE, 'alice', A, '--cap', '*', '--home', homes.bob]);

  // The CLI reads the rosters back (the same API the tools use).
  const shown = JSON.parse(await meerkatd(['space', 'show', SPACE, '--json', '--home', homes.alice]));
  assert.deepEqual(shown.members.map((m) => m.id).sort(), [A, B], `space show: ${JSON.stringify(shown)}`);
}

// ------------------------------------------------------------------ suite

for (const era of ERAS) for (const mode of ['embedded', 'attached']) {
  describe(`meerkatd mcp spaces (${era.version}, ${era.sdk}, ${mode})`, { timeout: 120_000 }, () => {
    const suite = { era, logs: [], daemons: {}, schemaViolations: [], clientErrors: [], failed: false };
    let alice;
    let bob;

    const step = stepper(suite);

    before(async () => {
      [alice, bob] = await setUp(suite, mode, makeHomes, Peer);
      // The roster updates `space add` queued before the nodes ran go out
      // when each node starts, and fail while the other does not listen
      // yet; retried on their backoff, a queue still failing would make
      // the first sends of the steps below "queued". Try them now that
      // both listen, and wait until none is left.
      for (const name of ['alice', 'bob']) {
        await meerkatd(['outbox', 'retry', '--home', suite.homes[name]]);
      }
      await until(30_000, 'the roster updates queued before the nodes ran to go out', async () => {
        for (const name of ['alice', 'bob']) {
          const ob = JSON.parse(await meerkatd(['outbox', '--json', '--home', suite.homes[name]]));
          if (ob.entries.length > 0) return false;
        }
        return true;
      });
    });

    after(() => tearDown(suite, [alice, bob], `spaces ${era.version} ${mode}`));

    step('tools/list: the 12 space tools, with input and output schemas', async () => {
      for (const peer of [alice, bob]) {
        const { tools } = await peer.client.listTools(undefined, { timeout: CALL_TIMEOUT });
        const by = Object.fromEntries(tools.map((t) => [t.name, t]));
        for (const name of SPACE_TOOLS) {
          const t = by[name];
          assert.ok(t, `${peer.name}: tools/list lacks ${name}`);
          assert.ok(t.description, `${name}: no description`);
          assert.equal(t.inputSchema?.type, 'object', `${name}: inputSchema.type`);
          assert.equal(t.outputSchema?.type, 'object', `${name}: outputSchema.type`);
          assert.equal(typeof t.outputSchema.properties, 'object', `${name}: outputSchema.properties`);
          assert.ok('pending' in t.outputSchema.properties, `${name}: outputSchema lacks "pending"`);
        }
        for (const t of tools) if (t.outputSchema) peer.outputSchemas.set(t.name, t.outputSchema);
        for (const name of SPACE_TOOLS.filter((n) => n.startsWith('space_'))) {
          const t = by[name];
          assert.ok(t.inputSchema.required?.includes('space'), `${name}: space is not required`);
          for (const p of ['space', 'id', 'kind', 'envelope', 'copies']) {
            assert.ok(p in t.outputSchema.properties, `${name}: outputSchema lacks ${p}`);
          }
          assert.notEqual(t.annotations?.readOnlyHint, true, `${name} must not be read-only`);
        }
        assert.deepEqual(by.space_send.inputSchema.required.slice().sort(), ['kind', 'space']);
        assert.deepEqual(by.space_propose.inputSchema.required.slice().sort(), ['method', 'space']);
        assert.deepEqual(by.space_respond.inputSchema.required.slice().sort(), ['request_id', 'space']);
        for (const n of ['space_fulfill', 'space_reject', 'space_withdraw']) {
          assert.deepEqual(by[n].inputSchema.required.slice().sort(), ['proposal_id', 'space'], `${n} required`);
        }
        assert.deepEqual(by.list_proposals.inputSchema.properties.state.enum.slice().sort(), ['expired', 'fulfilled', 'pending', 'rejected', 'withdrawn']);
        assert.equal(by.list_spaces.annotations?.readOnlyHint, true, 'list_spaces readOnlyHint');
        assert.equal(by.list_proposals.annotations?.readOnlyHint, true, 'list_proposals readOnlyHint');
        for (const p of ['space', 'meup_kinds', 'context']) {
          assert.ok(p in by.receive_messages.inputSchema.properties, `receive_messages lacks the ${p} filter`);
        }
        assert.ok('meup' in by.receive_messages.outputSchema.properties.messages.items.properties, 'receive_messages items lack meup');
      }
    });

    step('list_spaces on both nodes: "build" with A and B, the capabilities each node enforces (SDK-validated)', async () => {
      for (const [peer, self, other] of [[alice, A, B], [bob, B, A]]) {
        const r = await peer.ok('list_spaces');
        const sp = r.spaces.find((s) => s.name === SPACE);
        assert.ok(sp, `${peer.name}: list_spaces lacks ${SPACE}: ${JSON.stringify(r)}`);
        assert.equal(sp.self, self, `${peer.name}: self`);
        assert.equal(sp.delivery, 'all');
        assert.equal(sp.pending_proposals, 0);
        assert.deepEqual(sp.members.map((m) => m.id).sort(), [A, B], `${peer.name}: members`);
        const me = sp.members.find((m) => m.id === self);
        const it = sp.members.find((m) => m.id === other);
        assert.equal(me.self, true);
        assert.equal(me.key, suite.ids[peer.name].pubkey);
        assert.notEqual(it.self, true);
        assert.equal(it.key, suite.ids[peer === alice ? 'bob' : 'alice'].pubkey);
        assert.equal(it.status, 'active', `${peer.name}: ${other} is trusted, so active`);
        assert.equal(typeof it.presence, 'string');
        // What this node enforces for the other member.
        assert.deepEqual(capKinds(it.capabilities), peer === alice ? B_CAPS.slice().sort() : ['*'], `${peer.name}: ${other}'s capabilities`);
      }
    });

    step('edit_space adds a member (pending until its key is trusted) and removes it; a bad op is bad_argument', async () => {
      const key = 'ed25519:' + Buffer.alloc(32, 7).toString('base64');
      const added = await alice.ok('edit_space', { op: 'add', space: SPACE, peer: key, id: 'carol', capabilities: [{ kind: 'chat' }] });
      const carol = added.space.members.find((m) => m.id === 'carol');
      assert.ok(carol, `edit_space add: ${JSON.stringify(added)}`);
      assert.equal(carol.status, 'pending', 'an untrusted key is pending');
      assert.deepEqual(capKinds(carol.capabilities), ['chat']);
      const removed = await alice.ok('edit_space', { op: 'remove', space: SPACE, id: 'carol' });
      assert.deepEqual(removed.space.members.map((m) => m.id).sort(), [A, B]);
      await invalidCall(alice.call('edit_space', { op: 'rename', space: SPACE }), 'edit_space with an unknown op');
    });

    step('B sends an mcp/request it may not: A never sees it; B gets a system/error "capability_violation" correlated to it', async () => {
      const sent = await bob.ok('space_send', {
        space: SPACE,
        kind: 'mcp/request',
        payload: { method: 'tools/call', params: { name: 'deploy', arguments: { env: 'prod' } } },
        to: [A],
      });
      assert.equal(sent.space, SPACE);
      assert.equal(sent.kind, 'mcp/request');
      assert.match(sent.id, UUID_RE);
      assert.equal(sent.envelope.id, sent.id);
      assert.equal(sent.envelope.from, B);
      assert.deepEqual(sent.envelope.to, [A]);
      assert.deepEqual(sent.copies.map((c) => c.participant), [A]);
      // Refused envelopes are acked (and stored nowhere): the refusal is the system/error.
      assert.equal(sent.copies[0].delivery, 'acked', `copy to A: ${JSON.stringify(sent.copies[0])}`);

      const [err] = await bob.receiveMEUP({ meup_kinds: ['system/error'] }, (m) => m.meup.envelope.correlation_id?.includes(sent.id), 'a system/error correlated to the mcp/request');
      assert.equal(err.meup.kind, 'system/error');
      assert.equal(err.meup.participant, A);
      assert.equal(err.peer, 'alice');
      assert.deepEqual(err.meup.envelope.correlation_id, [sent.id]);
      assert.equal(err.meup.envelope.payload.error, 'capability_violation');
      assert.equal(err.meup.envelope.payload.attempted_kind, 'mcp/request');
      assert.deepEqual(capKinds(err.meup.envelope.payload.your_capabilities), B_CAPS.slice().sort());

      // The system/error was sent after alice's node refused: nothing was delivered to A.
      const onA = await alice.ok('receive_messages', { kinds: ['meup'], space: SPACE, meup_kinds: ['mcp/request'] });
      assert.deepEqual(onA.messages, [], `A received an mcp/request: ${JSON.stringify(onA.messages)}`);
      const anyOnA = await alice.ok('receive_messages', { kinds: ['meup'], space: SPACE });
      assert.ok(!anyOnA.messages.some((m) => m.meup.id === sent.id), 'the refused envelope reached A under another filter');
      // alice's node counts the refusal against B.
      const sp = (await alice.ok('list_spaces')).spaces.find((s) => s.name === SPACE);
      assert.ok(sp.members.find((m) => m.id === B).refused >= 1, `B's refused count: ${JSON.stringify(sp.members)}`);
    });

    step('B proposes a call of its own tool → A sees it pending → space_fulfill → B answers with space_respond → fulfilled with request_id and response_id on both', async () => {
      const call = { name: 'run_build', arguments: { target: 'all', jobs: 4 } };
      const prop = await bob.ok('space_propose', { space: SPACE, method: 'tools/call', params: call, to: [B], context: 'ci-1' });
      assert.equal(prop.kind, 'mcp/proposal');
      assert.match(prop.id, UUID_RE);
      assert.deepEqual(prop.envelope.payload, { method: 'tools/call', params: call });
      assert.deepEqual(prop.envelope.to, [B]);
      assert.equal(prop.envelope.context, 'ci-1');
      assert.equal(prop.copies.find((c) => c.participant === A)?.delivery, 'acked');
      suite.proposalId = prop.id;

      // A sees the mcp/proposal (delivery "all": every member gets every envelope).
      const [seen] = await alice.receiveMEUP({ meup_kinds: ['mcp/proposal'] }, (m) => m.meup.id === prop.id, 'the mcp/proposal');
      assert.equal(seen.meup.participant, B);
      assert.deepEqual(seen.meup.to, [B]);
      assert.equal(seen.meup.context, 'ci-1');
      assert.deepEqual(seen.meup.envelope.payload, { method: 'tools/call', params: call });
      // ... and so does the context filter.
      const byCtx = await alice.ok('receive_messages', { space: SPACE, context: 'ci-1' });
      assert.ok(byCtx.messages.some((m) => m.meup?.id === prop.id), 'context filter lost the proposal');
      const otherCtx = await alice.ok('receive_messages', { space: SPACE, context: 'elsewhere' });
      assert.ok(!otherCtx.messages.some((m) => m.meup?.id === prop.id), 'context filter let another context through');

      for (const peer of [alice, bob]) {
        const pending = await peer.proposals({ state: 'pending' });
        const p = pending.find((x) => x.id === prop.id);
        assert.ok(p, `${peer.name}: list_proposals pending lacks ${prop.id}: ${JSON.stringify(pending)}`);
        assert.equal(p.state, 'pending');
        assert.equal(p.space, SPACE);
        assert.equal(p.proposer, B);
        assert.equal(p.key, suite.ids.bob.pubkey);
        suite.listedTo = { ...suite.listedTo, [peer.name]: p.to };
        assert.deepEqual(p.payload, { method: 'tools/call', params: call });
        assert.ok(Date.parse(p.expires) > Date.now(), 'expires in the future');
        assert.ok(pending.every((x) => x.state === 'pending'), 'state filter let other states through');
      }

      // A fulfils: an mcp/request to the participant the proposal addressed, B.
      const req = await alice.ok('space_fulfill', { space: SPACE, proposal_id: prop.id });
      assert.equal(req.kind, 'mcp/request');
      assert.match(req.id, UUID_RE);
      assert.deepEqual(req.envelope.correlation_id, [prop.id]);
      suite.fulfilmentTo = req.envelope.to;
      assert.equal(req.envelope.from, A);
      assert.deepEqual(req.envelope.payload, { method: 'tools/call', params: call });
      assert.equal(req.copies.find((c) => c.participant === B)?.delivery, 'acked');
      // Fulfilled once: a second fulfilment is refused here.
      await alice.fails('space_fulfill', { space: SPACE, proposal_id: prop.id }, 'bad_argument');

      // B receives the request and answers it.
      const [got] = await bob.receiveMEUP({ meup_kinds: ['mcp/request'] }, (m) => m.meup.id === req.id, 'the mcp/request of the fulfilment');
      assert.equal(got.meup.participant, A);
      assert.deepEqual(got.meup.envelope.correlation_id, [prop.id]);
      assert.deepEqual(got.meup.envelope.payload, { method: 'tools/call', params: call });
      const result = { content: [{ type: 'text', text: 'build ok: 4 jobs' }], isError: false };
      const resp = await bob.ok('space_respond', { space: SPACE, request_id: req.id, result });
      assert.equal(resp.kind, 'mcp/response');
      assert.deepEqual(resp.envelope.correlation_id, [req.id]);
      assert.deepEqual(resp.envelope.to, [A]);
      assert.deepEqual(resp.envelope.payload, { result });
      assert.equal(resp.copies.find((c) => c.participant === A)?.delivery, 'acked');

      // A sees the response (B holds mcp/response at alice's node).
      const [answer] = await alice.receiveMEUP({ meup_kinds: ['mcp/response'] }, (m) => m.meup.id === resp.id, 'the mcp/response');
      assert.equal(answer.meup.participant, B);
      assert.deepEqual(answer.meup.envelope.correlation_id, [req.id]);
      assert.deepEqual(answer.meup.envelope.payload, { result });

      for (const peer of [alice, bob]) {
        const p = await until(WAIT_MS, `${peer.name}: the proposal fulfilled with its response`, async () =>
          (await peer.proposals({ state: 'fulfilled' })).find((x) => x.id === prop.id && x.response_id),
        );
        assert.equal(p.state, 'fulfilled');
        assert.equal(p.by, A);
        assert.equal(p.request_id, req.id);
        assert.equal(p.response_id, resp.id);
        assert.ok(!(await peer.proposals({ state: 'pending' })).some((x) => x.id === prop.id), `${peer.name}: still pending`);
      }
    });

    step('A rejects a second proposal with a reason: B sees the mcp/reject; rejected with the reason on both', async () => {
      const prop = await bob.ok('space_propose', { space: SPACE, method: 'tools/call', params: { name: 'deploy', arguments: { env: 'prod' } }, to: [B] });
      await until(WAIT_MS, 'alice to hold the second proposal pending', async () => (await alice.proposals({ state: 'pending' })).some((x) => x.id === prop.id));

      const reason = 'no deploys on Fridays';
      const rej = await alice.ok('space_reject', { space: SPACE, proposal_id: prop.id, reason });
      assert.equal(rej.kind, 'mcp/reject');
      assert.deepEqual(rej.envelope.correlation_id, [prop.id]);
      assert.deepEqual(rej.envelope.to, [B], 'a rejection goes to the proposer');
      assert.deepEqual(rej.envelope.payload, { reason });

      const [seen] = await bob.receiveMEUP({ meup_kinds: ['mcp/reject'] }, (m) => m.meup.id === rej.id, 'the mcp/reject');
      assert.equal(seen.meup.participant, A);
      assert.deepEqual(seen.meup.envelope.correlation_id, [prop.id]);
      assert.equal(seen.meup.envelope.payload.reason, reason);

      for (const peer of [alice, bob]) {
        const p = await until(WAIT_MS, `${peer.name}: the second proposal rejected`, async () =>
          (await peer.proposals({ state: 'rejected' })).find((x) => x.id === prop.id),
        );
        assert.equal(p.by, A);
        assert.equal(p.reason, reason);
        assert.equal(p.request_id, undefined);
      }
      // A rejected proposal cannot be fulfilled.
      await alice.fails('space_fulfill', { space: SPACE, proposal_id: prop.id }, 'bad_argument');
    });

    step('B withdraws a third proposal: withdrawn on both; A can no longer fulfil it', async () => {
      const prop = await bob.ok('space_propose', { space: SPACE, method: 'tools/call', params: { name: 'clean', arguments: {} }, to: [B] });
      await until(WAIT_MS, 'alice to hold the third proposal pending', async () => (await alice.proposals({ state: 'pending' })).some((x) => x.id === prop.id));

      const wd = await bob.ok('space_withdraw', { space: SPACE, proposal_id: prop.id });
      assert.equal(wd.kind, 'mcp/withdraw');
      assert.deepEqual(wd.envelope.correlation_id, [prop.id]);
      assert.equal(wd.copies.find((c) => c.participant === A)?.delivery, 'acked');

      const [seen] = await alice.receiveMEUP({ meup_kinds: ['mcp/withdraw'] }, (m) => m.meup.id === wd.id, 'the mcp/withdraw');
      assert.equal(seen.meup.participant, B);
      for (const peer of [alice, bob]) {
        const p = await until(WAIT_MS, `${peer.name}: the third proposal withdrawn`, async () =>
          (await peer.proposals({ state: 'withdrawn' })).find((x) => x.id === prop.id),
        );
        assert.equal(p.by, B);
        assert.equal(p.proposer, B);
      }
      await alice.fails('space_fulfill', { space: SPACE, proposal_id: prop.id }, 'bad_argument');

      // Every proposal of the space, each in its final state; none pending.
      const all = await alice.proposals();
      const state = Object.fromEntries(all.map((p) => [p.id, p.state]));
      assert.equal(state[suite.proposalId], 'fulfilled');
      assert.equal(state[prop.id], 'withdrawn');
      assert.deepEqual(await alice.proposals({ state: 'pending' }), []);
      const sp = (await alice.ok('list_spaces')).spaces.find((s) => s.name === SPACE);
      assert.equal(sp.pending_proposals, 0);
    });

    // A proposal keeps the participants it addressed (in the store too),
    // and its fulfilment is addressed to them.
    test('list_proposals keeps the proposal\'s to, and the fulfilment is addressed to it', () => {
      assert.deepEqual(suite.listedTo, { alice: [B], bob: [B] }, 'list_proposals to');
      assert.deepEqual(suite.fulfilmentTo, [B], 'the fulfilment\'s to');
    });

    step('unknown proposals and spaces are tool errors', async () => {
      await alice.fails('space_fulfill', { space: SPACE, proposal_id: '00000000-0000-4000-8000-000000000000' }, 'unknown_proposal');
      await bob.fails('space_respond', { space: SPACE, request_id: '00000000-0000-4000-8000-000000000000', result: {} }, 'unknown_proposal');
      const text = await alice.call('space_chat', { space: 'nowhere', text: 'hi' }).then(textOf);
      assert.match(text, /^unknown_space:/, `space_chat to an unknown space: ${text}`);
    });

    step('malformed calls are bad_argument: space_send without kind, space_respond with both result and error (or neither)', async () => {
      await invalidCall(bob.call('space_send', { space: SPACE, payload: { x: 1 } }), 'space_send without kind');
      await invalidCall(bob.call('space_send', { kind: 'chat' }), 'space_send without space');
      await invalidCall(
        bob.call('space_respond', { space: SPACE, request_id: '00000000-0000-4000-8000-000000000000', result: { ok: true }, error: { code: 1 } }),
        'space_respond with result and error',
      );
      await invalidCall(bob.call('space_respond', { space: SPACE, request_id: '00000000-0000-4000-8000-000000000000' }), 'space_respond with neither');
      await invalidCall(alice.call('space_fulfill', { space: SPACE }), 'space_fulfill without proposal_id');
      await invalidCall(alice.call('list_proposals', { state: 'sleeping' }), 'list_proposals with a bad state');
      // The sessions are still usable.
      assert.ok((await bob.ok('list_spaces')).spaces.some((s) => s.name === SPACE));
    });

    step('every structured result conformed to its outputSchema; the clients saw nothing wrong on the wire', async () => {
      assert.deepEqual(suite.schemaViolations, []);
      assert.deepEqual(suite.clientErrors, []);
    });
  });
}
