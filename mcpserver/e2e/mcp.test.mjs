// End-to-end tests of `meerkatd mcp` driven by the official MCP TypeScript
// SDK clients, run with `node --test`.
//
//   MEERKATD_BIN=/abs/path/to/meerkatd node --test mcpserver/e2e/*.test.mjs
//
// (or `make e2e`). Two nodes, alice and bob, trust each other over Unix
// sockets in a temporary directory. The whole suite runs once per protocol
// era and mode:
//
//   2025-11-25: @modelcontextprotocol/sdk 1.x, the initialize handshake;
//               a waiting agent subscribes to meerkat://inbox
//               (resources/subscribe) and is sent resource-updated
//               notifications, plus a log event per arrival.
//   2026-07-28: @modelcontextprotocol/client 2.x with version negotiation
//               'auto' (server/discover, no initialize); a waiting agent
//               opens a subscriptions/listen stream for meerkat://inbox and
//               gets updates tagged with the stream's id there, and nothing
//               unsolicited (no log events: logging is deprecated).
//
//   embedded: no daemon; each `meerkatd mcp` runs its own node, so both
//             alice's and bob's MCP processes must be up for delivery.
//   attached: `meerkatd run` runs for both homes first; each `meerkatd mcp`
//             attaches to its daemon through the control socket.
//
// alice's meerkat.toml retries fast (outbox backoff 100ms, breaker open
// after one failed round for 1 s), so reliable sends to ghost (trusted,
// never running) show queued, breaker and dead-letter states within
// seconds.
//
// Tool calls go through the client's raw tools/call request and every
// structured result is checked against the tool's advertised outputSchema
// with an Ajv validator (the SDK 1.x one, the same for both eras); one test
// also calls Client.callTool itself, as an MCP host would, which validates
// with the SDK's own.
//
// One API, two faces: a few steps read the same node with the CLI
// (`meerkatd status|peers list|inbox|outbox --json`, through the control
// socket of the daemon, or of the node meerkatd mcp runs when embedded)
// and with the matching tool (status, list_peers, receive_messages,
// list_outbox), and require the same JSON, field by field (the CLI read
// is repeated around the tool call until it is stable, since the outbox
// retries ghost in the background); and give both faces the same failing
// operations, requiring the same error code and message (the CLI's
// {"error":{…}} on stdout and its exit status; the tool error's text).
//
// Bad send_response statuses: the server advertises the status enum in the
// input schema but does not enforce it at the protocol level; the handler
// answers with an isError tool result "bad_status: …". The test accepts
// that or the protocol's invalid-params error (-32602) and reports which.

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { isDeepStrictEqual } from 'node:util';
import { randomUUID } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';

import { SUBSCRIPTION_ID_META_KEY } from '@modelcontextprotocol/client';

import {
  BIN,
  CALL_TIMEOUT,
  ERAS,
  INVALID_PARAMS,
  McpPeer,
  UUID_RE,
  captureStderr,
  childEnv,
  exited,
  invalidCall,
  isProtocolError,
  makeTempRoot,
  meerkatd,
  setUp,
  stepper,
  stopProcess,
  tearDown,
  textOf,
  track,
  until,
  within,
} from './helpers.mjs';

const TOOLS = [
  'ack_messages',
  'broadcast', // broadcast and tasks
  'describe_peer', // agent cards (mcp-card.test.mjs)
  'edit_space',
  'list_dead_letters',
  'list_outbox',
  'list_peers',
  'list_proposals',
  'list_spaces',
  'message_status',
  'list_tasks', // broadcast and tasks
  'pair_accept',
  'pair_offer',
  'receive_messages',
  'retry_dead_letters',
  'retry_outbox',
  'drop_queued',
  'search_messages', // slice C: search
  'send_message',
  'send_request',
  'send_response',
  'space_chat',
  'space_fulfill',
  'space_grant',
  'space_propose',
  'space_reject',
  'space_respond',
  'space_revoke',
  'space_send',
  'space_withdraw',
  'status',
  'task_complete', // broadcast and tasks
  'wait_task', // broadcast and tasks
  // The request lifecycle (mcp-lifecycle.test.mjs).
  'cancel_request',
  'list_requests',
].sort();
const ACK_TIMEOUT_SECS = 3;

// ---------------------------------------------------------------- helpers

/**
 * Runs meerkatd with args whatever its exit status; resolves to
 * { code, stdout, stderr }.
 */
function meerkatdExit(args, { timeout = 15_000 } = {}) {
  return new Promise((resolve, reject) => {
    execFile(BIN, args, { env: childEnv(), timeout, maxBuffer: 16 << 20 }, (err, stdout, stderr) => {
      if (err && typeof err.code !== 'number') {
        err.message = `meerkatd ${args.join(' ')}: ${err.message}\nstderr: ${stderr}`;
        reject(err); // not started, killed, timed out
      } else {
        resolve({ code: err ? err.code : 0, stdout, stderr });
      }
    });
  });
}

/**
 * The same daemon state read by the CLI's --json and by an MCP tool: reads
 * cli(), tool(), cli() again until the two CLI reads agree (nothing changed
 * in between: the outbox retries in the background), then requires the
 * tool's result to be the same JSON. Returns the CLI's result.
 */
async function sameAsCLI(what, cli, tool, tries = 30) {
  let before;
  let after;
  for (let i = 0; i < tries; i++) {
    before = await cli();
    const got = await tool();
    after = await cli();
    if (isDeepStrictEqual(before, after)) {
      assert.deepEqual(got, before, `${what}: the MCP tool's result differs from the CLI's --json`);
      return before;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`${what}: the state kept changing between two CLI reads (${tries} tries): ${JSON.stringify(before)} then ${JSON.stringify(after)}`);
}

/** obj without the key pending (the key MCP adds to a result). */
function withoutPending(obj) {
  assert.equal(typeof obj.pending, 'number', `no pending in ${JSON.stringify(obj).slice(0, 200)}`);
  const { pending, ...rest } = obj;
  return rest;
}

/** Collects notifications and lets a test wait for one matching a predicate. */
class Inbox {
  constructor() {
    this.items = [];
    this.waiters = [];
  }
  push(n) {
    this.items.push(n);
    for (const w of [...this.waiters]) {
      if (w.from <= this.items.length - 1 && w.pred(n)) {
        this.waiters.splice(this.waiters.indexOf(w), 1);
        w.resolve(n);
      }
    }
  }
  /** The index to pass as from, to wait only for later notifications. */
  mark() {
    return this.items.length;
  }
  wait(from, pred, ms, what) {
    const found = this.items.slice(from).find(pred);
    if (found) return Promise.resolve(found);
    return within(ms, what, new Promise((resolve) => this.waiters.push({ from, pred, resolve })));
  }
}

/**
 * An MCP session with `meerkatd mcp --home H` (helpers.mjs) that collects
 * the inbox updates and log events it is sent, and checks structured
 * results against the suite's outputSchemas.
 */
class Peer extends McpPeer {
  constructor(name, home, suite) {
    super(name, home, suite);
    this.outputSchemas = suite.outputSchemas; // listed once, by the tools/list test
    this.updated = new Inbox(); // notifications/resources/updated
    this.logged = new Inbox(); // notifications/message
  }

  notifications() {
    return {
      'notifications/resources/updated': (n) => this.updated.push(n),
      'notifications/message': (n) => this.logged.push(n),
    };
  }

  async connect() {
    await super.connect();
    if (this.suite.era.modern) {
      assert.equal(this.client.getNegotiatedProtocolVersion(), '2026-07-28');
    } else {
      assert.equal(this.client.getServerVersion()?.name, 'meerkatd');
    }
  }

  /** Calls a tool (raw tools/call) that must succeed and returns its structuredContent. */
  async ok(name, args = {}, opts) {
    return this.structured(name, await this.call(name, args, opts));
  }
}

// ------------------------------------------------------------------ setup

/** Creates the temp dir, the homes alice, bob and ghost, and their trust. */
async function makeHomes(suite) {
  // Unix socket paths must stay under ~100 bytes: keep the names short.
  suite.root = await makeTempRoot('mk-');
  const homes = { alice: path.join(suite.root, 'a'), bob: path.join(suite.root, 'b'), ghost: path.join(suite.root, 'g') };
  for (const h of Object.values(homes)) {
    const sock = path.join(h, 'meerkat.sock');
    assert.ok(Buffer.byteLength(sock) < 100, `socket path too long for a Unix socket: ${sock}`);
  }
  suite.homes = homes;
  suite.ids = {};
  for (const [name, h] of Object.entries(homes)) {
    await meerkatd(['init', '--name', name, '--home', h]);
    // A short ack timeout, so that offline peers are reported quickly.
    const cfgPath = path.join(h, 'meerkat.toml');
    const cfg = await fs.readFile(cfgPath, 'utf8');
    const next = cfg.replace(/^ack_timeout_secs = \d+$/m, `ack_timeout_secs = ${ACK_TIMEOUT_SECS}`);
    assert.notEqual(next, cfg, `${cfgPath}: no ack_timeout_secs line to shorten`);
    // alice retries fast and opens a breaker on the first failed round
    // (shut for a second), so the reliable-send test needs no long waits.
    const tuned =
      name === 'alice'
        ? next
            .replace(/^backoff = ".*"$/m, 'backoff = "100ms"')
            .replace(/^breaker_failures = \d+$/m, 'breaker_failures = 1')
            .replace(/^breaker_open_secs = \d+$/m, 'breaker_open_secs = 1')
        : next;
    if (name === 'alice') {
      for (const k of ['backoff = "100ms"', 'breaker_failures = 1', 'breaker_open_secs = 1']) {
        assert.ok(tuned.includes(`\n${k}\n`), `${cfgPath}: could not set ${k}`);
      }
    }
    await fs.writeFile(cfgPath, tuned);
    suite.ids[name] = JSON.parse(await meerkatd(['id', '--json', '--home', h]));
    assert.equal(suite.ids[name].name, name);
    assert.match(suite.ids[name].pubkey, /^ed25519:/);
  }
  const addr = (name) => `uds://${homes[name]}/meerkat.sock`;
  await meerkatd(['peers', 'add', 'bob', suite.ids.bob.pubkey, addr('bob'), '--home', homes.alice]);
  await meerkatd(['peers', 'add', 'alice', suite.ids.alice.pubkey, addr('alice'), '--home', homes.bob]);
  // ghost is trusted by alice but never runs: nothing listens on its socket.
  // (With meta: list_peers and peers list --json show it, as any JSON.)
  await meerkatd(['peers', 'add', 'ghost', suite.ids.ghost.pubkey, addr('ghost'), '--meta', '{"role":"never runs","n":[1,2]}', '--home', homes.alice]);
  suite.addr = addr;
}

// ------------------------------------------------------------------ suite

for (const era of ERAS) for (const mode of ['embedded', 'attached']) {
  describe(`meerkatd mcp (${era.version}, ${era.sdk}, ${mode})`, { timeout: 120_000 }, () => {
    const suite = {
      era,
      logs: [],
      daemons: {},
      outputSchemas: new Map(),
      schemaViolations: [],
      clientErrors: [],
      failed: false,
    };
    let alice;
    let bob;

    // step wraps a test so that a failure also prints the processes' stderr.
    const step = stepper(suite);

    before(async () => {
      [alice, bob] = await setUp(suite, mode, makeHomes, Peer);
    });

    after(() => tearDown(suite, [alice, bob], mode));

    step('tools/list: every tool, with input and output schemas and annotations', async () => {
      const { tools } = await alice.client.listTools(undefined, { timeout: CALL_TIMEOUT });
      assert.deepEqual(tools.map((t) => t.name).sort(), TOOLS);
      for (const t of tools) {
        assert.equal(t.inputSchema?.type, 'object', `${t.name}: inputSchema.type`);
        assert.equal(typeof t.inputSchema.properties, 'object', `${t.name}: inputSchema.properties`);
        assert.equal(t.outputSchema?.type, 'object', `${t.name}: outputSchema.type`);
        assert.equal(typeof t.outputSchema.properties, 'object', `${t.name}: outputSchema.properties`);
        assert.ok('pending' in t.outputSchema.properties, `${t.name}: outputSchema lacks "pending"`);
        assert.ok(t.description, `${t.name}: no description`);
        suite.outputSchemas.set(t.name, t.outputSchema);
      }
      const by = Object.fromEntries(tools.map((t) => [t.name, t]));
      for (const p of ['messages', 'cursor', 'timed_out', 'pending']) {
        assert.ok(p in by.receive_messages.outputSchema.properties, `receive_messages outputSchema lacks ${p}`);
      }
      assert.deepEqual(by.send_message.inputSchema.required?.slice().sort(), ['body', 'peer']);
      assert.deepEqual(by.send_response.inputSchema.properties.status.enum?.slice().sort(), ['accepted', 'completed', 'failed']);
      assert.equal(by.list_peers.annotations?.readOnlyHint, true, 'list_peers readOnlyHint');
      assert.equal(by.status.annotations?.readOnlyHint, true, 'status readOnlyHint');
      for (const p of ['running', 'started_at', 'name', 'pubkey', 'listen', 'peers', 'inbox', 'outbox', 'dead_letters', 'send_peers']) {
        assert.ok(p in by.status.outputSchema.properties, `status outputSchema lacks ${p}`);
      }
      assert.equal(by.receive_messages.annotations?.readOnlyHint, true, 'receive_messages readOnlyHint');
      assert.equal(by.ack_messages.annotations?.destructiveHint, true, 'ack_messages destructiveHint');
      for (const n of ['send_message', 'send_request', 'send_response', 'ack_messages', 'retry_dead_letters']) {
        assert.notEqual(by[n].annotations?.readOnlyHint, true, `${n} must not be read-only`);
      }
      for (const n of ['list_outbox', 'list_dead_letters']) {
        assert.equal(by[n].annotations?.readOnlyHint, true, `${n} readOnlyHint`);
      }
      for (const n of ['send_message', 'send_request', 'send_response']) {
        const props = by[n].inputSchema.properties;
        assert.equal(props.reliable?.type, 'boolean', `${n}: reliable`);
        assert.equal(props.reliable?.default, true, `${n}: reliable defaults to true`);
        assert.equal(props.ttl_seconds?.type, 'number', `${n}: ttl_seconds`);
        assert.equal(props.ttl_seconds?.minimum, 0, `${n}: ttl_seconds minimum`);
        assert.ok('last_error' in by[n].outputSchema.properties, `${n}: outputSchema lacks last_error`);
      }
      for (const p of ['breaker', 'queued']) {
        assert.ok(p in by.list_peers.outputSchema.properties.peers.items.properties, `list_peers peers lack ${p}`);
      }
      // Resources and capabilities.
      const caps = alice.client.getServerCapabilities();
      assert.equal(caps?.resources?.subscribe, true, 'resources.subscribe capability');
      assert.ok(caps?.tools, 'tools capability');
      if (era.modern) {
        // Logging is deprecated in 2026-07-28 and the server sends no log
        // events there, so discover does not offer it.
        assert.equal(caps?.logging, undefined, 'logging capability offered to a 2026-07-28 client');
        const disc = alice.client.getDiscoverResult();
        assert.equal(disc.supportedVersions[0], '2026-07-28');
        assert.ok(disc.supportedVersions.includes('2025-11-25'), `supportedVersions ${disc.supportedVersions}`);
        assert.match(alice.client.getInstructions() ?? '', /"alice"/);
      } else {
        assert.ok(caps?.logging, 'logging capability');
      }
      const { resources } = await alice.client.listResources(undefined, { timeout: CALL_TIMEOUT });
      assert.deepEqual(resources.map((r) => r.uri).sort(), ['meerkat://inbox', 'meerkat://peers']);
    });

    step('list_peers: self and the trusted peers', async () => {
      const r = await alice.ok('list_peers');
      assert.equal(r.self.name, 'alice');
      assert.equal(r.self.pubkey, suite.ids.alice.pubkey);
      assert.equal(r.self.peer_uuid, suite.ids.alice.peer_uuid);
      assert.equal(r.peers[0].name, 'bob');
      assert.equal(r.peers[0].pubkey, suite.ids.bob.pubkey);
      assert.equal(r.peers[0].peer_uuid, suite.ids.bob.peer_uuid);
      assert.match(r.peers[0].peer_uuid, UUID_RE);
      assert.equal(r.peers[0].addr, suite.addr('bob'));
      assert.deepEqual(r.peers.map((p) => p.name).sort(), ['bob', 'ghost']);
      assert.equal(typeof r.pending, 'number');
      // meerkat://peers says the same.
      const rr = await alice.client.readResource({ uri: 'meerkat://peers' }, { timeout: CALL_TIMEOUT });
      const peers = JSON.parse(rr.contents[0].text);
      assert.equal(peers.self.name, 'alice');
      assert.deepEqual(peers.peers.map((p) => p.name).sort(), ['bob', 'ghost']);
    });

    step('send_message alice → bob is acked and received', async () => {
      const body = `hello bob ${randomUUID()}`;
      const sent = await alice.ok('send_message', { peer: 'bob', body });
      assert.equal(sent.delivery, 'acked');
      assert.equal(sent.peer, 'bob');
      assert.match(sent.id, UUID_RE);
      assert.equal(typeof sent.pending, 'number');

      const got = await bob.ok('receive_messages', { wait_ms: 10_000 }, { timeout: 10_000 + CALL_TIMEOUT });
      const m = got.messages.find((x) => x.id === sent.id);
      assert.ok(m, `bob did not receive ${sent.id}: ${JSON.stringify(got)}`);
      assert.equal(m.kind, 'message');
      assert.equal(m.body, body);
      assert.equal(m.peer, 'alice');
      assert.equal(m.from, suite.ids.alice.pubkey);
      assert.ok(got.pending >= 1, `pending = ${got.pending}`);
      assert.ok(got.cursor >= m.seq, `cursor ${got.cursor} < seq ${m.seq}`);
      suite.firstMessageId = sent.id;

      // A peer can also be addressed by its key or its peer UUID.
      for (const peer of [suite.ids.bob.pubkey, suite.ids.bob.peer_uuid]) {
        const s2 = await alice.ok('send_message', { peer, body: `by ${peer}` });
        assert.equal(s2.peer, 'bob', `send_message to ${peer}`);
        assert.equal(s2.delivery, 'acked');
      }

      if (mode === 'attached') {
        // The attached MCP server delivered to bob's daemon's node.
        const items = JSON.parse(await meerkatd(['inbox', '--home', suite.homes.bob, '--json'])).messages;
        assert.ok(items.some((it) => it.id === sent.id), `bob's daemon inbox lacks ${sent.id}`);
      }
    });

    step('send_request alice → bob, send_response bob → alice, correlated', async () => {
      const params = { a: 1, b: 2 };
      const req = await alice.ok('send_request', { peer: 'bob', intent: 'add', params });
      assert.equal(req.delivery, 'acked');
      assert.match(req.id, UUID_RE);
      const rid = req.id;

      const got = await bob.ok('receive_messages', { kinds: ['request'], wait_ms: 10_000 }, { timeout: 10_000 + CALL_TIMEOUT });
      const r = got.messages.find((x) => x.id === rid);
      assert.ok(r, `bob did not receive request ${rid}: ${JSON.stringify(got)}`);
      assert.equal(r.kind, 'request');
      assert.equal(r.intent, 'add');
      assert.deepEqual(r.params, params);
      assert.equal(r.peer, 'alice');
      assert.ok(got.messages.every((x) => x.kind === 'request'), 'kinds filter let other kinds through');

      const resp = await bob.ok('send_response', { peer: 'alice', request_id: rid, status: 'completed', result: { sum: 3 } });
      assert.match(resp.id, UUID_RE);
      assert.equal(resp.peer, 'alice');
      assert.equal(resp.delivery, 'written');

      const ans = await alice.ok('receive_messages', { request_id: rid, wait_ms: 10_000 }, { timeout: 10_000 + CALL_TIMEOUT });
      assert.equal(ans.messages.length, 1, `want exactly the response: ${JSON.stringify(ans)}`);
      const a = ans.messages[0];
      assert.equal(a.kind, 'response');
      assert.equal(a.request_id, rid);
      assert.equal(a.status, 'completed');
      assert.deepEqual(a.result, { sum: 3 });
      assert.equal(a.peer, 'bob');
      assert.equal(ans.timed_out, false);

      // A request is answered finally only once.
      await bob.fails('send_response', { peer: 'alice', request_id: rid, status: 'completed', result: { sum: 4 } }, 'already_answered');
      // An id that was never received.
      await bob.fails('send_response', { peer: 'alice', request_id: randomUUID(), status: 'completed' }, 'unknown_request');
      suite.requestId = rid;
    });

    step('reliable sends: acked by default; to an offline peer queued, shown by list_outbox and list_peers; a ttl makes a dead letter; retry_dead_letters requeues it', async () => {
      // The default send to a running peer is reliable and acked at once.
      const acked = await alice.ok('send_message', { peer: 'bob', body: `reliable ${randomUUID()}` });
      assert.equal(acked.delivery, 'acked');
      assert.equal(acked.last_error, undefined);
      assert.equal(acked.note, undefined);
      const bobState = (await alice.ok('list_peers')).peers.find((p) => p.name === 'bob');
      assert.equal(bobState.breaker, 'closed');
      assert.equal(bobState.queued, 0);

      // ghost is trusted, but nothing listens on its socket: not an error.
      const q = await alice.ok('send_message', { peer: 'ghost', body: 'anyone?', ttl_seconds: 1 });
      assert.equal(q.delivery, 'queued');
      assert.equal(q.peer, 'ghost');
      assert.match(q.id, UUID_RE);
      assert.equal(typeof q.last_error, 'string');
      assert.ok(q.last_error.length > 0, 'a queued send says why its attempt failed');
      assert.match(q.note, /list_outbox/);
      const qr = await alice.ok('send_request', { peer: 'ghost', intent: 'ping', ttl_seconds: 1 });
      assert.equal(qr.delivery, 'queued');
      assert.match(qr.id, UUID_RE);

      const ob = await alice.ok('list_outbox');
      const e = ob.entries.find((x) => x.id === q.id);
      assert.ok(e, `list_outbox lacks ${q.id}: ${JSON.stringify(ob)}`);
      assert.equal(e.peer, 'ghost');
      assert.equal(e.kind, 'message');
      assert.ok(e.attempts >= 1, `attempts ${e.attempts}`);
      assert.equal(typeof e.expires, 'string');
      assert.ok(!JSON.stringify(ob).includes('anyone?'), 'list_outbox must not show bodies');
      assert.ok(ob.entries.some((x) => x.id === qr.id && x.kind === 'request'));
      const gs = ob.peers.find((p) => p.peer === 'ghost');
      assert.ok(gs && gs.queued >= 1, `ghost's send state: ${JSON.stringify(ob.peers)}`);
      assert.ok(['open', 'half_open'].includes(gs.breaker), `ghost's breaker ${gs.breaker}`);

      const peers = await alice.ok('list_peers');
      const g = peers.peers.find((p) => p.name === 'ghost');
      assert.ok(['open', 'half_open'].includes(g.breaker), `list_peers: ghost's breaker ${g.breaker}`);
      assert.ok(g.queued >= 1, `list_peers: ghost queued ${g.queued}`);
      assert.ok(g.last_error, 'list_peers: ghost has no last_error');
      assert.equal(peers.peers.find((p) => p.name === 'bob').breaker, 'closed');

      // The ttl passes: dead letters, with the reason.
      const dead = await until(10_000, `${q.id} in list_dead_letters`, async () =>
        (await alice.ok('list_dead_letters')).dead_letters.find((d) => d.id === q.id),
      );
      assert.match(dead.reason, /^expired/);
      assert.equal(dead.peer, 'ghost');
      assert.equal(dead.kind, 'message');
      assert.equal(typeof dead.died_at, 'string');
      assert.ok(!(await alice.ok('list_outbox')).entries.some((x) => x.id === q.id), 'an expired send is still queued');

      const rr = await alice.ok('retry_dead_letters', { ids: [q.id, randomUUID()] });
      assert.equal(rr.requeued, 1);
      assert.equal(rr.not_found, 1);
      assert.ok((await alice.ok('list_outbox')).entries.some((x) => x.id === q.id), 'a retried dead letter is not queued');
      assert.ok(!(await alice.ok('list_dead_letters')).dead_letters.some((d) => d.id === q.id));

      // Bad send options are bad_argument tool errors.
      await invalidCall(alice.call('send_message', { peer: 'bob', body: 'x', ttl_seconds: -1 }), 'negative ttl');
      await invalidCall(alice.call('send_message', { peer: 'bob', body: 'x', ttl_seconds: 'soon' }), 'ttl not a number');
      await invalidCall(alice.call('send_message', { peer: 'bob', body: 'x', reliable: false, ttl_seconds: 5 }), 'ttl without reliable');
      await invalidCall(alice.call('send_request', { peer: 'bob', intent: 'x', reliable: 'yes' }), 'reliable not a boolean');
      await invalidCall(alice.call('retry_dead_letters', {}), 'retry with neither ids nor all');
    });

    // One API, two faces: for the same node, the CLI's --json and the MCP
    // tools give the same fields and the same error codes. (In embedded
    // mode the CLI reaches the node meerkatd mcp runs, through its control
    // socket; in attached mode both reach the daemon.)
    const cliJSON = async (args) => {
      const r = await meerkatdExit([...args, '--json']);
      assert.equal(r.code, 0, `meerkatd ${args.join(' ')} --json exited ${r.code}: ${r.stdout}${r.stderr}`);
      return JSON.parse(r.stdout);
    };

    step('status: the tool gives what meerkatd status --json prints', async () => {
      const home = ['status', '--home', suite.homes.alice];
      const st = await sameAsCLI('status', () => cliJSON(home), () => alice.ok('status'));
      assert.equal(st.running, true);
      assert.equal(st.name, 'alice');
      assert.equal(st.pubkey, suite.ids.alice.pubkey);
      assert.equal(st.peers, 2);
      assert.equal(typeof st.started_at, 'string');
      assert.ok(st.listen.includes(suite.addr('alice')), `listen ${st.listen}`);
      // pending is the status's own field: the count every tool adds. The
      // node's notices (a dead letter from the step before) land a moment
      // after the event, so compare two reads that agree with a third.
      let seen;
      for (let i = 0; i < 30; i++) {
        const a = (await alice.ok('status')).pending;
        const b = (await alice.ok('list_peers')).pending;
        const c = (await alice.ok('status')).pending;
        seen = [a, b, c];
        if (a === c) break;
        await new Promise((r) => setTimeout(r, 100));
      }
      assert.equal(seen[0], seen[2], `pending kept changing: ${seen}`);
      assert.equal(seen[1], seen[0], `status pending ${seen[0]}, list_peers pending ${seen[1]}`);
      assert.equal((await bob.ok('status')).name, 'bob');
    });

    step('list_peers: its peers are what meerkatd peers list --json prints', async () => {
      const peers = await sameAsCLI(
        'peers',
        () => cliJSON(['peers', 'list', '--home', suite.homes.alice]),
        async () => (await alice.ok('list_peers')).peers,
      );
      assert.deepEqual(peers.map((p) => p.name).sort(), ['bob', 'ghost']);
      const ghost = peers.find((p) => p.name === 'ghost');
      assert.deepEqual(ghost.meta, { role: 'never runs', n: [1, 2] });
      assert.ok(ghost.queued >= 1 && ghost.breaker !== 'closed', `ghost ${JSON.stringify(ghost)}`);
      assert.equal(typeof peers.find((p) => p.name === 'bob').last_seen, 'string');
    });

    step('receive_messages with a limit gives the batch meerkatd inbox --json --limit prints (messages, cursor, more, pending)', async () => {
      const home = ['inbox', '--home', suite.homes.bob];
      const page1 = await sameAsCLI(
        'inbox page 1',
        () => cliJSON([...home, '--limit', '2']),
        () => bob.ok('receive_messages', { limit: 2 }),
      );
      assert.equal(page1.messages.length, 2);
      assert.equal(page1.more, true, 'bob has more than two items');
      assert.equal(page1.timed_out, false);
      assert.equal(page1.cursor, page1.messages[1].seq);
      assert.ok(page1.messages.some((m) => m.id === suite.firstMessageId), 'page 1 lacks the first message');
      const page2 = await sameAsCLI(
        'inbox page 2',
        () => cliJSON([...home, '--limit', '2', '--after', String(page1.cursor)]),
        () => bob.ok('receive_messages', { limit: 2, after: page1.cursor }),
      );
      assert.ok(page2.messages.length >= 1 && page2.messages.every((m) => m.seq > page1.cursor), JSON.stringify(page2));
      // The request, with its params, reads the same both ways.
      const all = await sameAsCLI('inbox', () => cliJSON(home), () => bob.ok('receive_messages', { limit: 1000 }));
      assert.equal(all.more, false);
      const req = all.messages.find((m) => m.id === suite.requestId);
      assert.deepEqual(req?.params, { a: 1, b: 2 });
    });

    step('list_outbox gives the entries and peers meerkatd outbox --json prints', async () => {
      // Something surely queued: a reliable send to ghost, which is down.
      const q = await alice.ok('send_message', { peer: 'ghost', body: 'still there?', ttl_seconds: 600 });
      assert.equal(q.delivery, 'queued');
      const ob = await sameAsCLI(
        'outbox',
        () => cliJSON(['outbox', '--home', suite.homes.alice]),
        async () => withoutPending(await alice.ok('list_outbox')),
      );
      assert.deepEqual(Object.keys(ob).sort(), ['entries', 'peers']);
      const e = ob.entries.find((x) => x.id === q.id);
      assert.ok(e, `the outbox lacks ${q.id}: ${JSON.stringify(ob)}`);
      assert.equal(e.peer, 'ghost');
      assert.equal(typeof e.expires, 'string');
      assert.ok(ob.peers.some((p) => p.peer === 'ghost' && p.queued >= 1), JSON.stringify(ob.peers));
    });

    step('a send reports the same fields both ways: meerkatd send message --json and send_message', async () => {
      const cli = await cliJSON(['send', 'message', 'bob', 'fields from the CLI', '--home', suite.homes.alice]);
      const { note, pending, ...tool } = await alice.ok('send_message', { peer: 'bob', body: 'fields from the tool', reliable: false });
      assert.equal(typeof pending, 'number');
      assert.equal(note, undefined, 'an acked send has no note');
      assert.deepEqual(Object.keys(tool).sort(), Object.keys(cli).sort());
      for (const r of [cli, tool]) {
        assert.match(r.id, UUID_RE);
        assert.equal(r.peer, 'bob');
        assert.equal(r.delivery, 'acked');
      }
    });

    step('the same error codes: send_response to a request never received (unknown_request, exit 2), to an answered one (already_answered, exit 2), a send to an unknown peer (unknown_peer, exit 4)', async () => {
      const unknown = randomUUID();
      const cases = [
        {
          peer: bob,
          cli: ['send', 'response', 'alice', unknown, 'completed'],
          tool: ['send_response', { peer: 'alice', request_id: unknown, status: 'completed' }],
          code: 'unknown_request',
          exit: 2,
        },
        {
          peer: bob,
          cli: ['send', 'response', 'alice', suite.requestId, 'failed'],
          tool: ['send_response', { peer: 'alice', request_id: suite.requestId, status: 'failed' }],
          code: 'already_answered',
          exit: 2,
        },
        {
          peer: alice,
          cli: ['send', 'message', 'nobody', 'hi'],
          tool: ['send_message', { peer: 'nobody', body: 'hi' }],
          code: 'unknown_peer',
          exit: 4,
        },
      ];
      for (const c of cases) {
        const what = `meerkatd ${c.cli.join(' ')} --json`;
        const r = await meerkatdExit([...c.cli, '--home', c.peer.home, '--json']);
        assert.equal(r.code, c.exit, `${what}: exit ${r.code}, want ${c.exit}; stderr ${r.stderr}`);
        const out = JSON.parse(r.stdout);
        assert.deepEqual(Object.keys(out), ['error'], `${what}: ${r.stdout}`);
        assert.equal(out.error.code, c.code, `${what}: ${r.stdout}`);
        const text = await c.peer.fails(...c.tool, c.code);
        // The same message too: "code: message (pending: n)".
        assert.ok(text.startsWith(`${c.code}: ${out.error.message} (pending: `), `MCP ${JSON.stringify(text)} vs CLI ${JSON.stringify(out.error.message)}`);
      }
    });

    step('Client.callTool (SDK output-schema validation) accepts receive_messages with a request and a response', async () => {
      // An MCP host lists the tools and calls them with callTool, which
      // validates structuredContent against the advertised outputSchema.
      const { tools } = await bob.client.listTools(undefined, { timeout: CALL_TIMEOUT });
      assert.ok(tools.length > 0);
      await alice.client.listTools(undefined, { timeout: CALL_TIMEOUT });
      const r1 = await era.callTool(bob.client, { name: 'receive_messages', arguments: { kinds: ['request'] } }, CALL_TIMEOUT);
      assert.ok(r1.structuredContent.messages.some((m) => m.id === suite.requestId));
      const r2 = await era.callTool(alice.client, { name: 'receive_messages', arguments: { request_id: suite.requestId } }, CALL_TIMEOUT);
      assert.ok(r2.structuredContent.messages.some((m) => m.request_id === suite.requestId));
    });

    step('receive_messages wait: other tools run meanwhile, an arrival wakes it; an empty wait times out', async () => {
      const start = await alice.ok('receive_messages');
      let settled = false;
      const waiting = alice
        .ok('receive_messages', { wait_ms: 20_000, after: start.cursor }, { timeout: 20_000 + CALL_TIMEOUT })
        .finally(() => (settled = true));
      waiting.catch(() => {}); // awaited below
      // The wait does not block other tools.
      const peers = await within(5_000, 'list_peers during a receive wait', alice.ok('list_peers'));
      assert.equal(peers.self.name, 'alice');
      assert.equal(settled, false, 'receive_messages with wait_ms returned before anything arrived');

      const body = `wake up ${randomUUID()}`;
      const sent = await bob.ok('send_message', { peer: 'alice', body });
      const got = await waiting;
      assert.equal(got.timed_out, false);
      const m = got.messages.find((x) => x.id === sent.id);
      assert.ok(m, `the wait returned without the message: ${JSON.stringify(got)}`);
      assert.equal(m.body, body);
      assert.equal(m.peer, 'bob');
      assert.ok(got.messages.every((x) => x.seq > start.cursor), 'after did not filter older items');

      const empty = await alice.ok('receive_messages', { wait_ms: 300, after: got.cursor });
      assert.equal(empty.timed_out, true);
      assert.deepEqual(empty.messages, []);
      assert.equal(empty.cursor, got.cursor);
    });

    step('ack_messages removes items from pending (by ids, then up_to)', async () => {
      const before = await bob.ok('receive_messages');
      assert.ok(before.pending >= 2, `bob should have a message and a request pending: ${JSON.stringify(before)}`);
      assert.ok(before.messages.some((m) => m.id === suite.firstMessageId));

      // Filters: limit moves the cursor only as far as the items returned.
      const one = await bob.ok('receive_messages', { limit: 1 });
      assert.equal(one.messages.length, 1);
      assert.equal(one.cursor, one.messages[0].seq);
      assert.deepEqual((await bob.ok('receive_messages', { from: 'alice' })).messages.map((m) => m.id), before.messages.map((m) => m.id));
      await bob.fails('receive_messages', { from: 'nobody' }, 'unknown_peer');

      const byId = await bob.ok('ack_messages', { ids: [suite.firstMessageId] });
      assert.equal(byId.acked, 1);
      assert.equal(byId.pending, before.pending - 1);
      const mid = await bob.ok('receive_messages');
      assert.ok(!mid.messages.some((m) => m.id === suite.firstMessageId), 'an acked item is still listed');
      assert.equal(mid.pending, byId.pending);

      const upTo = await bob.ok('ack_messages', { up_to: mid.cursor });
      assert.equal(upTo.acked, mid.messages.length);
      assert.equal(upTo.pending, 0);
      const afterAck = await bob.ok('receive_messages');
      assert.deepEqual(afterAck.messages, []);
      assert.equal(afterAck.pending, 0);
      // Every tool result carries pending.
      assert.equal((await bob.ok('list_peers')).pending, 0);
    });

    const readInbox = async (peer) => {
      const rr = await peer.client.readResource({ uri: 'meerkat://inbox' }, { timeout: CALL_TIMEOUT });
      assert.equal(rr.contents.length, 1);
      assert.equal(rr.contents[0].uri, 'meerkat://inbox');
      assert.equal(rr.contents[0].mimeType, 'application/json');
      return JSON.parse(rr.contents[0].text);
    };
    const isInbox = (n) => n.params?.uri === 'meerkat://inbox';

    if (!era.modern) {
      step('waiting for mail (2025-11-25): resources/subscribe meerkat://inbox; updated + log notifications on arrival and ack, none after unsubscribing', async () => {
        await alice.client.subscribeResource({ uri: 'meerkat://inbox' }, { timeout: CALL_TIMEOUT });
        const u0 = alice.updated.mark();
        const l0 = alice.logged.mark();
        const body = `notify ${randomUUID()}`;
        const sent = await bob.ok('send_message', { peer: 'alice', body });

        const upd = await alice.updated.wait(u0, isInbox, 10_000, 'notifications/resources/updated for meerkat://inbox');
        assert.equal(upd.method, 'notifications/resources/updated');
        const log = await alice.logged.wait(l0, (n) => n.params?.data?.id === sent.id, 10_000, `notifications/message for ${sent.id}`);
        assert.equal(log.params.level, 'info');
        assert.equal(log.params.data.kind, 'message');
        assert.equal(log.params.data.peer, 'bob');
        assert.ok(!JSON.stringify(log.params).includes(body), 'the log notification must not carry the body');

        const inbox = await readInbox(alice);
        const m = inbox.messages.find((x) => x.id === sent.id);
        assert.ok(m, `meerkat://inbox lacks ${sent.id}`);
        assert.equal(m.body, body);
        assert.ok(inbox.pending >= 1);

        // Acknowledging changes the inbox too.
        const u1 = alice.updated.mark();
        const acked = await alice.ok('ack_messages', { up_to: inbox.cursor });
        assert.ok(acked.acked >= 1);
        await alice.updated.wait(u1, isInbox, 10_000, 'notifications/resources/updated after ack');

        // Unsubscribed: arrivals are still logged, but not updates. The
        // server sends an arrival's update before its log event, so once
        // the log event is in, an update would have been too.
        await alice.client.unsubscribeResource({ uri: 'meerkat://inbox' }, { timeout: CALL_TIMEOUT });
        const u2 = alice.updated.mark();
        const l2 = alice.logged.mark();
        const quiet = await bob.ok('send_message', { peer: 'alice', body: 'after unsubscribing' });
        await alice.logged.wait(l2, (n) => n.params?.data?.id === quiet.id, 10_000, `notifications/message for ${quiet.id}`);
        assert.deepEqual(alice.updated.items.slice(u2), [], 'resource updates after unsubscribing');
        assert.equal((await alice.ok('ack_messages', { ids: [quiet.id] })).acked, 1);
      });
    } else {
      step('waiting for mail (2026-07-28): subscriptions/listen on meerkat://inbox; tagged updates on arrival and ack, none once closed', async () => {
        // The server establishes only what it reports on: meerkat://inbox.
        const sub = await alice.client.listen({ resourceSubscriptions: ['meerkat://inbox', 'meerkat://peers'] }, { timeout: CALL_TIMEOUT });
        assert.deepEqual(sub.honoredFilter, { resourceSubscriptions: ['meerkat://inbox'] });
        const u0 = alice.updated.mark();
        const body = `notify ${randomUUID()}`;
        const sent = await bob.ok('send_message', { peer: 'alice', body });

        const upd = await alice.updated.wait(u0, isInbox, 10_000, 'notifications/resources/updated for meerkat://inbox on the listen stream');
        const subID = upd.params._meta?.[SUBSCRIPTION_ID_META_KEY];
        assert.equal(typeof subID, 'string', `the update is not tagged with its stream: ${JSON.stringify(upd)}`);

        const inbox = await readInbox(alice);
        const m = inbox.messages.find((x) => x.id === sent.id);
        assert.ok(m, `meerkat://inbox lacks ${sent.id}`);
        assert.equal(m.body, body);
        assert.ok(inbox.pending >= 1);

        const u1 = alice.updated.mark();
        const acked = await alice.ok('ack_messages', { up_to: inbox.cursor });
        assert.ok(acked.acked >= 1);
        const upd2 = await alice.updated.wait(u1, isInbox, 10_000, 'notifications/resources/updated after ack');
        assert.equal(upd2.params._meta?.[SUBSCRIPTION_ID_META_KEY], subID);

        // Closed (the client cancels the listen request): the server ends
        // the stream without answering it (the client would report an
        // answer as an error) and tells it nothing more.
        await sub.close();
        assert.equal(await within(5_000, 'the subscription to close', sub.closed), 'local');
        const u2 = alice.updated.mark();
        const quiet = await bob.ok('send_message', { peer: 'alice', body: 'after closing' });
        // A second stream: the server notifies streams oldest first, so an
        // update for the closed stream would arrive before this one's.
        const sub2 = await alice.client.listen({ resourceSubscriptions: ['meerkat://inbox'] }, { timeout: CALL_TIMEOUT });
        const loud = await bob.ok('send_message', { peer: 'alice', body: 'second stream' });
        const upd3 = await alice.updated.wait(u2, (n) => isInbox(n) && n.params._meta?.[SUBSCRIPTION_ID_META_KEY] !== subID, 10_000, 'an update on the second stream');
        assert.deepEqual(alice.updated.items.slice(u2).filter((n) => n.params._meta?.[SUBSCRIPTION_ID_META_KEY] === subID), [], 'updates on a closed stream');
        assert.notEqual(upd3.params._meta?.[SUBSCRIPTION_ID_META_KEY], undefined);
        await sub2.close();
        assert.equal((await alice.ok('ack_messages', { ids: [quiet.id, loud.id] })).acked, 2);
      });
    }

    step('error paths: unknown peer, peer offline, bad status, body too large, malformed call', async (t) => {
      await alice.fails('send_message', { peer: 'nobody', body: 'hi' }, 'unknown_peer');
      await alice.fails('send_request', { peer: 'nobody', intent: 'x' }, 'unknown_peer');

      // ghost is trusted, but nothing listens on its socket: a direct
      // (not reliable) send is one attempt, and fails.
      await alice.fails('send_message', { peer: 'ghost', body: 'anyone?', reliable: false }, 'peer_offline', {
        timeout: ACK_TIMEOUT_SECS * 1000 + CALL_TIMEOUT,
      });

      // A status outside the enum: the protocol's invalid-params error or a
      // bad_status tool error; record which one the server gives.
      let how;
      try {
        const res = await alice.call('send_response', { peer: 'bob', request_id: randomUUID(), status: 'maybe' });
        assert.equal(res.isError, true, `a bad status was accepted: ${textOf(res)}`);
        assert.ok(textOf(res).startsWith('bad_status:'), `want "bad_status: …", got ${JSON.stringify(textOf(res))}`);
        how = 'tool error "bad_status:"';
      } catch (err) {
        if (!isProtocolError(err)) throw err;
        assert.equal(err.code, INVALID_PARAMS, `bad status: want -32602 or bad_status, got ${err.code} ${err.message}`);
        how = 'JSON-RPC -32602';
      }
      t.diagnostic(`bad status answered with ${how}`);
      suite.badStatusAnswer = how;

      const big = 'x'.repeat(1_100_000);
      await alice.fails('send_message', { peer: 'bob', body: big }, 'body_too_large');

      // Arguments that do not fit the schema: the protocol error, not a tool result.
      await invalidCall(alice.call('send_message', { body: 'no peer' }), 'missing "peer"');
      await invalidCall(alice.call('send_message', { peer: 42, body: 'x' }), 'peer not a string');
      await invalidCall(alice.call('receive_messages', { wait_ms: 10_000_000 }), 'wait_ms out of range');
      await invalidCall(alice.call('ack_messages', {}), 'ack with neither ids nor up_to');
      // The session is still usable afterwards.
      assert.equal((await alice.ok('list_peers')).self.name, 'alice');
    });

    step('pair_offer and pair_accept: bob pairs with alice again (a key already trusted keeps its entry); the line works once', async () => {
      const offer = await alice.ok('pair_offer');
      assert.match(offer.line, /^meerkat-pair\/1 [A-Z2-7-]+ (uds|tcp):\/\//, 'offer line');
      assert.ok(Date.parse(offer.expires) > Date.now(), 'offer expires in the future');
      const acc = await bob.ok('pair_accept', { code_line: offer.line });
      assert.equal(acc.paired.name, 'alice', 'the known key keeps its name');
      assert.match(acc.paired.pubkey, /^ed25519:/);
      await bob.fails('pair_accept', { code_line: offer.line }, 'pair_failed');
      await bob.fails('pair_accept', { code_line: 'meerkat-pair/1 nope uds:///x.sock' }, 'bad_argument');
      await invalidCall(bob.call('pair_accept', {}), 'pair_accept without code_line');
      // Trust still works both ways.
      assert.equal((await alice.ok('send_message', { peer: 'bob', body: 'after pairing' })).delivery, 'acked');
    });

    step('every structured tool result conformed to its outputSchema', async () => {
      assert.ok(suite.outputSchemas.size === TOOLS.length, 'tools/list did not run');
      assert.deepEqual(suite.schemaViolations, []);
    });

    step(era.modern ? 'no log events reached the 2026-07-28 clients' : 'log events announced the arrivals', async () => {
      if (era.modern) {
        assert.deepEqual([...alice.logged.items, ...bob.logged.items], []);
      } else {
        assert.ok(alice.logged.items.length >= 3, `alice got ${alice.logged.items.length} log events`);
        assert.ok(bob.logged.items.length >= 3, `bob got ${bob.logged.items.length} log events`);
      }
    });

    step('the clients saw nothing wrong on the wire (onerror)', async () => {
      assert.deepEqual(suite.clientErrors, []);
    });

    step("closing stdin ends alice's meerkatd mcp with exit code 0", async () => {
      const child = alice.child;
      assert.ok(child?.pid, 'no child process behind the SDK transport');
      const done = exited(child);
      child.stdin.end();
      const { code, signal } = await within(5_000, 'meerkatd mcp to exit after stdin closed', done);
      assert.equal(signal, null, `killed by ${signal}`);
      assert.equal(code, 0);
      await alice.close();
      alice = undefined;
    });

    step('stdout carries nothing but JSON-RPC (raw process, with a notification)', async () => {
      const child = track(spawn(BIN, ['mcp', '--home', suite.homes.alice], { env: childEnv(), stdio: ['pipe', 'pipe', 'pipe'] }));
      captureStderr(child.stderr, 'raw alice mcp stderr', suite.logs);
      try {
        let out = '';
        const lines = [];
        const seen = new Inbox();
        child.stdout.on('data', (d) => {
          out += d.toString();
          let i;
          while ((i = out.indexOf('\n')) >= 0) {
            const line = out.slice(0, i);
            out = out.slice(i + 1);
            lines.push(line);
            try {
              seen.push(JSON.parse(line));
            } catch {
              // reported below
            }
          }
        });
        // A 2026-07-28 client puts its version, identity and capabilities
        // on every request instead of an initialize handshake.
        const meta = {
          'io.modelcontextprotocol/protocolVersion': '2026-07-28',
          'io.modelcontextprotocol/clientInfo': { name: 'raw', version: '0' },
          'io.modelcontextprotocol/clientCapabilities': {},
        };
        const send = (m) => {
          const msg = { jsonrpc: '2.0', ...m };
          if (era.modern && m.id !== undefined) msg.params = { _meta: meta, ...m.params };
          child.stdin.write(JSON.stringify(msg) + '\n');
        };
        if (era.modern) {
          send({ id: 1, method: 'server/discover' });
          const disc = await seen.wait(0, (m) => m.id === 1, 10_000, 'server/discover response');
          assert.ok(disc.result?.supportedVersions?.includes('2026-07-28'), JSON.stringify(disc));
        } else {
          send({
            id: 1,
            method: 'initialize',
            params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '0' } },
          });
          await seen.wait(0, (m) => m.id === 1, 10_000, 'initialize response');
          send({ method: 'notifications/initialized' });
        }
        send({ id: 2, method: 'tools/list' });
        send({ id: 3, method: 'tools/call', params: { name: 'list_peers', arguments: {} } });
        send({ id: 4, method: 'tools/call', params: { name: 'send_message', arguments: { body: 'no peer' } } });
        send({ id: 5, method: 'tools/call', params: { name: 'send_message', arguments: { peer: 'nobody', body: 'x' } } });
        send({ id: 6, method: 'resources/read', params: { uri: 'meerkat://inbox' } });
        for (const id of [2, 3, 4, 5, 6]) await seen.wait(0, (m) => m.id === id, 10_000, `response ${id}`);
        assert.equal(seen.items.find((m) => m.id === 4).result?.isError, true);
        assert.match(seen.items.find((m) => m.id === 4).result?.content?.[0]?.text ?? '', /^bad_argument: /);
        assert.equal(seen.items.find((m) => m.id === 5).result?.isError, true);

        // A server-initiated message too: bob writes to alice. In
        // 2026-07-28, only on a listen stream, tagged with its id; the
        // stream ends without a response when the client cancels it.
        if (era.modern) {
          send({ id: 'listen:raw', method: 'subscriptions/listen', params: { notifications: { resourceSubscriptions: ['meerkat://inbox'] } } });
          const ack = await seen.wait(0, (m) => m.method === 'notifications/subscriptions/acknowledged', 10_000, 'subscriptions acknowledged');
          assert.equal(ack.params?._meta?.[SUBSCRIPTION_ID_META_KEY], 'listen:raw');
          const s0 = seen.mark();
          await bob.ok('send_message', { peer: 'alice', body: 'raw' });
          const upd = await seen.wait(s0, (m) => m.method === 'notifications/resources/updated', 10_000, 'resource update on the raw stdout');
          assert.deepEqual(upd.params, { _meta: { [SUBSCRIPTION_ID_META_KEY]: 'listen:raw' }, uri: 'meerkat://inbox' });
          send({ method: 'notifications/cancelled', params: { requestId: 'listen:raw' } });
          // Answered after the cancellation: the stream is over by then.
          send({ id: 7, method: 'tools/list' });
          await seen.wait(0, (m) => m.id === 7, 10_000, 'response 7');
        } else {
          const sent = await bob.ok('send_message', { peer: 'alice', body: 'raw' });
          await seen.wait(0, (m) => m.method === 'notifications/message' && m.params?.data?.id === sent.id, 10_000, 'log notification on the raw stdout');
        }

        const done = exited(child);
        child.stdin.end();
        const { code, signal } = await within(5_000, 'raw meerkatd mcp to exit after stdin closed', done);
        assert.equal(signal, null);
        assert.equal(code, 0);
        assert.equal(out, '', `stdout ended without a newline: ${JSON.stringify(out.slice(0, 200))}`);
        assert.ok(lines.length >= 7, `only ${lines.length} lines`);
        for (const line of lines) {
          let msg;
          assert.doesNotThrow(() => (msg = JSON.parse(line)), `not JSON on stdout: ${JSON.stringify(line.slice(0, 200))}`);
          assert.ok(msg && typeof msg === 'object' && !Array.isArray(msg), `not a JSON object: ${line.slice(0, 200)}`);
          assert.equal(msg.jsonrpc, '2.0', `not JSON-RPC 2.0: ${line.slice(0, 200)}`);
          if (era.modern) {
            assert.notEqual(msg.id, 'listen:raw', `a response to the cancelled listen: ${line.slice(0, 200)}`);
            assert.notEqual(msg.method, 'notifications/message', `a log event to a 2026-07-28 client: ${line.slice(0, 200)}`);
          }
        }
      } finally {
        await stopProcess(child);
      }
    });

    step("closing stdin ends bob's meerkatd mcp with exit code 0", async () => {
      const child = bob.child;
      assert.ok(child?.pid, 'no child process behind the SDK transport');
      const done = exited(child);
      child.stdin.end(); // what the SDK's close does first (it signals only after 2 s)
      const { code, signal } = await within(5_000, 'meerkatd mcp to exit after stdin closed', done);
      assert.equal(signal, null, `killed by ${signal}`);
      assert.equal(code, 0);
      await bob.close();
      bob = undefined;
    });

    if (mode === 'attached') {
      step('the daemons stop on SIGTERM with exit code 0', async () => {
        for (const [name, child] of Object.entries(suite.daemons)) {
          const done = exited(child);
          child.kill('SIGTERM');
          const { code, signal } = await within(10_000, `${name}'s daemon to stop`, done);
          assert.equal(signal, null, `${name}: killed by ${signal}`);
          assert.equal(code, 0, `${name}'s daemon exit code`);
        }
      });
    }
  });
}
