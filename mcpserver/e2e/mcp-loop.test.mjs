// End-to-end tests of the wake-ups and the loop guard of `meerkatd mcp`,
// driven by the official MCP TypeScript SDK clients, run with `node --test`
// next to mcp.test.mjs (or `make e2e`).
//
// Two nodes, alice and bob, trust each other over Unix sockets. Their
// meerkat.toml sets [agent] loop_max_exchanges = 3 (the default
// loop_fast_ms, 3 s, is far slower than these scripted agents) and
// notify_interval_ms = 3000 on alice.
//
//   - Coalescing: bob sends alice one message, then four more at once.
//     alice is notified of the first at once and of the four others
//     together, once, when the interval ends (2025-11-25: resource updates
//     and log events, whose "arrivals" count them; 2026-07-28: updates on
//     a subscriptions/listen stream).
//   - Loop guard: alice's and bob's agents answer each other at once
//     through send_message; after three fast replies each, alice's next
//     send_message, send_request or reliable send fails with the tool error
//     "loop_guard: …" saying what was seen and how a person releases it;
//     nothing is queued; status and list_peers show the hold. No MCP tool
//     releases it: `meerkatd release bob` (a person, on the CLI) does, and
//     alice's sends go again.
//
// Like the other suites, it runs once per protocol era and mode (embedded:
// each meerkatd mcp runs its node; attached: meerkatd run for both homes),
// and checks every structured result against the tool's outputSchema.

import { after, before, describe } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import path from 'node:path';

import {
  CALL_TIMEOUT,
  ERAS,
  McpPeer,
  makeTempRoot,
  meerkatd,
  setUp,
  stepper,
  tearDown,
  within,
} from './helpers.mjs';

const MAX_EXCHANGES = 3;
const NOTIFY_MS = 3000;

/** Collects notifications; a test waits for one after a mark. */
class Notes {
  constructor() {
    this.items = [];
    this.waiters = [];
  }
  push(n) {
    this.items.push(n);
    for (const w of [...this.waiters]) {
      if (this.items.length - 1 >= w.from && w.pred(n)) {
        this.waiters.splice(this.waiters.indexOf(w), 1);
        w.resolve(n);
      }
    }
  }
  mark() {
    return this.items.length;
  }
  since(from) {
    return this.items.slice(from);
  }
  wait(from, pred, ms, what) {
    const found = this.items.slice(from).find(pred);
    if (found) return Promise.resolve(found);
    return within(ms, what, new Promise((resolve) => this.waiters.push({ from, pred, resolve })));
  }
}

class Peer extends McpPeer {
  constructor(name, home, suite) {
    super(name, home, suite);
    this.updated = new Notes();
    this.logged = new Notes();
  }

  notifications() {
    return {
      'notifications/resources/updated': (n) => this.updated.push(n),
      'notifications/message': (n) => this.logged.push(n),
    };
  }

  async ok(name, args = {}, opts) {
    return this.structured(name, await this.call(name, args, opts));
  }

  /** Waits for the next unacknowledged message from peer, acknowledges it and returns it. */
  async nextMessage(peer) {
    const got = await this.ok('receive_messages', { kinds: ['message'], from: peer, wait_ms: 10_000, limit: 1 }, { timeout: 10_000 + CALL_TIMEOUT });
    assert.equal(got.messages.length, 1, `${this.name}: no message from ${peer} within 10 s`);
    await this.ok('ack_messages', { ids: [got.messages[0].id] });
    return got.messages[0];
  }
}

async function makeHomes(suite) {
  suite.root = await makeTempRoot('mkl-');
  const homes = { alice: path.join(suite.root, 'a'), bob: path.join(suite.root, 'b') };
  suite.homes = homes;
  suite.ids = {};
  for (const [name, h] of Object.entries(homes)) {
    await meerkatd(['init', '--name', name, '--home', h]);
    const cfgPath = path.join(h, 'meerkat.toml');
    const cfg = await fs.readFile(cfgPath, 'utf8');
    const tuned = cfg
      .replace(/^loop_max_exchanges = \d+$/m, `loop_max_exchanges = ${MAX_EXCHANGES}`)
      .replace(/^notify_interval_ms = \d+$/m, `notify_interval_ms = ${name === 'alice' ? NOTIFY_MS : 0}`);
    assert.ok(tuned.includes(`\nloop_max_exchanges = ${MAX_EXCHANGES}\n`), `${cfgPath}: could not set loop_max_exchanges`);
    await fs.writeFile(cfgPath, tuned);
    suite.ids[name] = JSON.parse(await meerkatd(['id', '--json', '--home', h]));
  }
  const addr = (name) => `uds://${homes[name]}/meerkat.sock`;
  await meerkatd(['peers', 'add', 'bob', suite.ids.bob.pubkey, addr('bob'), '--home', homes.alice]);
  await meerkatd(['peers', 'add', 'alice', suite.ids.alice.pubkey, addr('alice'), '--home', homes.bob]);
}

for (const era of ERAS) for (const mode of ['embedded', 'attached']) {
  describe(`meerkatd mcp wake-ups and loop guard (${era.version}, ${era.sdk}, ${mode})`, { timeout: 120_000 }, () => {
    const suite = { era, logs: [], daemons: {}, schemaViolations: [], clientErrors: [], failed: false };
    let alice;
    let bob;
    const step = stepper(suite);

    before(async () => {
      [alice, bob] = await setUp(suite, mode, makeHomes, Peer);
      for (const p of [alice, bob]) {
        const { tools } = await p.client.listTools(undefined, { timeout: CALL_TIMEOUT });
        for (const t of tools) if (t.outputSchema) p.outputSchemas.set(t.name, t.outputSchema);
        p.tools = tools.map((t) => t.name);
      }
    });

    after(() => tearDown(suite, [alice, bob], `loop ${era.version} ${mode}`));

    step('no MCP tool releases the loop guard; status and list_peers have its fields in their output schemas', async () => {
      for (const p of [alice, bob]) {
        assert.deepEqual(p.tools.filter((n) => /release|loop|guard/.test(n)), [], `${p.name}: a tool an agent could release itself with`);
      }
      assert.ok('loop_guards' in alice.outputSchemas.get('status').properties, 'status outputSchema lacks loop_guards');
      const peerProps = alice.outputSchemas.get('list_peers').properties.peers.items.properties;
      assert.ok('loop_guard' in peerProps, 'list_peers outputSchema lacks loop_guard');
    });

    step(`arrival notifications are coalesced: one at once, then one for the four that came within ${NOTIFY_MS} ms`, async () => {
      const isInbox = (n) => n.params?.uri === 'meerkat://inbox';
      let sub;
      if (era.modern) {
        sub = await alice.client.listen({ resourceSubscriptions: ['meerkat://inbox'] }, { timeout: CALL_TIMEOUT });
      } else {
        await alice.client.subscribeResource({ uri: 'meerkat://inbox' }, { timeout: CALL_TIMEOUT });
      }
      const u0 = alice.updated.mark();
      const l0 = alice.logged.mark();
      const first = await bob.ok('send_message', { peer: 'alice', body: 'first' });
      await alice.updated.wait(u0, isInbox, 10_000, 'the update for the first arrival');
      if (!era.modern) {
        const ev = await alice.logged.wait(l0, (n) => n.params?.data?.event === 'arrival', 10_000, 'the log event of the first arrival');
        assert.equal(ev.params.data.id, first.id);
        assert.equal(ev.params.data.arrivals, 1);
      }
      // Four more, at once: the interval that began with the first
      // notification is still running (the sends take milliseconds).
      const u1 = alice.updated.mark();
      const l1 = alice.logged.mark();
      const burst = [];
      for (let i = 0; i < 4; i++) burst.push(await bob.ok('send_message', { peer: 'alice', body: `burst ${i}` }));
      // The notification for them comes when the interval ends: never lost.
      await alice.updated.wait(u1, isInbox, NOTIFY_MS + 10_000, 'the coalesced update');
      if (!era.modern) {
        const ev = await alice.logged.wait(l1, (n) => n.params?.data?.id === burst[3].id, NOTIFY_MS + 10_000, 'the coalesced log event');
        const counted = alice.logged.since(l1).reduce((s, n) => s + (n.params?.data?.arrivals ?? 0), 0);
        assert.equal(counted, 4, `arrivals counted by the log events after the first: ${JSON.stringify(alice.logged.since(l1).map((n) => n.params.data))}`);
        assert.ok(alice.logged.since(l1).length < 4, 'four arrivals, four log events: nothing was coalesced');
        assert.equal(ev.params.data.peer, 'bob');
      }
      assert.ok(alice.updated.since(u1).filter(isInbox).length < 4, 'four arrivals, four updates: nothing was coalesced');
      if (sub) await sub.close();
      else await alice.client.unsubscribeResource({ uri: 'meerkat://inbox' }, { timeout: CALL_TIMEOUT });
      await alice.ok('ack_messages', { ids: [first.id, ...burst.map((s) => s.id)] });
    });

    step(`two agents answering each other at once: after ${MAX_EXCHANGES} fast replies each, send_message fails with loop_guard`, async () => {
      await bob.ok('send_message', { peer: 'alice', body: 'shall we talk?' });
      for (let i = 1; i <= MAX_EXCHANGES; i++) {
        await alice.nextMessage('bob');
        await alice.ok('send_message', { peer: 'bob', body: `alice reply ${i}` });
        await bob.nextMessage('alice');
        await bob.ok('send_message', { peer: 'alice', body: `bob reply ${i}` });
      }
      await alice.nextMessage('bob');
      const text = await alice.fails('send_message', { peer: 'bob', body: 'one more' }, 'loop_guard');
      for (const want of [`${MAX_EXCHANGES} replies in a row to bob`, 'no person in between since', 'held until', 'meerkatd release bob']) {
        assert.ok(text.includes(want), `loop_guard error ${JSON.stringify(text)} lacks ${JSON.stringify(want)}`);
      }
      await alice.fails('send_request', { peer: 'bob', intent: 'anything' }, 'loop_guard');
      await alice.fails('send_message', { peer: 'bob', body: 'direct', reliable: false }, 'loop_guard');
      const ob = await alice.ok('list_outbox');
      assert.deepEqual(ob.entries, [], 'a held send was queued');
    });

    step('status and list_peers show the hold; bob is held too (his third fast reply tripped his guard)', async () => {
      const st = await alice.ok('status');
      assert.equal(st.loop_guards.length, 1, JSON.stringify(st.loop_guards));
      const g = st.loop_guards[0];
      assert.equal(g.peer, 'bob');
      assert.equal(g.held, true);
      assert.equal(g.exchanges, MAX_EXCHANGES);
      assert.ok(Date.parse(g.held_until) > Date.now(), `held_until ${g.held_until}`);
      const peers = await alice.ok('list_peers');
      assert.equal(peers.peers.find((p) => p.name === 'bob')?.loop_guard?.held, true, JSON.stringify(peers.peers));
      const bobSt = await bob.ok('status');
      assert.equal(bobSt.loop_guards[0]?.peer, 'alice', JSON.stringify(bobSt.loop_guards));
    });

    step('a person releases it with meerkatd release; alice can send again', async () => {
      const listed = JSON.parse(await meerkatd(['release', '--json', '--home', suite.homes.alice]));
      assert.equal(listed[0]?.peer, 'bob');
      const out = await meerkatd(['release', 'bob', '--home', suite.homes.alice]);
      assert.match(out, /released bob/);
      const sent = await alice.ok('send_message', { peer: 'bob', body: 'a person stepped in' });
      assert.equal(sent.delivery, 'acked');
      assert.deepEqual((await alice.ok('status')).loop_guards, []);
    });

    step('every structured result matched its outputSchema; the clients saw no protocol errors', async () => {
      assert.deepEqual(suite.schemaViolations, []);
      assert.deepEqual(suite.clientErrors, []);
    });
  });
}
