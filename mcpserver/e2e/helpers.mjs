// Helpers shared by the end-to-end suites of `meerkatd mcp` (every
// *.test.mjs here): the meerkatd binary and CLI runner,
// the two protocol eras and their official clients, child process and temp
// dir tracking with a last-resort cleanup, timeouts and polling, daemon
// start/stop, an MCP session class with Ajv validation of structured
// results, and the suites' step/before/after scaffolding.
//
// Not a test file: `node --test mcpserver/e2e/*.test.mjs` does not match it.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import fs from 'node:fs/promises';
import fsSync from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { Client as Client1 } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport as StdioClientTransport1 } from '@modelcontextprotocol/sdk/client/stdio.js';
import {
  CallToolResultSchema,
  LoggingMessageNotificationSchema,
  McpError,
  ResourceUpdatedNotificationSchema,
} from '@modelcontextprotocol/sdk/types.js';
import { AjvJsonSchemaValidator } from '@modelcontextprotocol/sdk/validation/ajv';
import { Client as Client2, ProtocolError } from '@modelcontextprotocol/client';
import { StdioClientTransport as StdioClientTransport2 } from '@modelcontextprotocol/client/stdio';

if (!process.env.MEERKATD_BIN) {
  throw new Error('MEERKATD_BIN is not set: point it at a built meerkatd binary (make e2e does this)');
}
export const BIN = path.resolve(process.env.MEERKATD_BIN);
await fs.access(BIN, fs.constants.X_OK).catch((err) => {
  throw new Error(`MEERKATD_BIN=${BIN} is not an executable file: ${err.message}`);
});

export const INVALID_PARAMS = -32602;
export const CALL_TIMEOUT = 15_000; // any single tool call, beyond its own wait_ms
export const STEP_TIMEOUT = 45_000; // any single test
export const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** The installed version of an npm package of this suite. */
export function installed(name) {
  const p = new URL(`./node_modules/${name}/package.json`, import.meta.url);
  return JSON.parse(fsSync.readFileSync(p, 'utf8')).version;
}

/** A JSON-RPC error from the server, as either SDK reports it. */
export function isProtocolError(err) {
  return err instanceof McpError || err instanceof ProtocolError;
}
export const invalid = (err) => isProtocolError(err) && err.code === INVALID_PARAMS;

/**
 * A call whose arguments its tool refuses: a tool error "bad_argument: …"
 * the model sees (MCP reports input validation errors as tool execution
 * errors, not as -32602); returns its text.
 */
export async function invalidCall(p, what) {
  const res = await p;
  const text = textOf(res);
  assert.equal(res.isError, true, `${what}: want a bad_argument tool error, got ${text}`);
  assert.ok(text.startsWith('bad_argument: '), `${what}: want "bad_argument: …", got ${JSON.stringify(text)}`);
  return text;
}

// The SDK 1.x client registers notification handlers by schema.
const SCHEMAS_1 = {
  'notifications/resources/updated': ResourceUpdatedNotificationSchema,
  'notifications/message': LoggingMessageNotificationSchema,
};

// The two protocol eras and the official client for each: how to connect
// (with handlers for the notifications given by method), call a tool, and
// send a raw tools/call.
export const ERAS = [
  {
    version: '2025-11-25',
    sdk: `@modelcontextprotocol/sdk ${installed('@modelcontextprotocol/sdk')}`,
    modern: false,
    connect(peer, params, notifications = {}) {
      const transport = new StdioClientTransport1(params);
      const client = new Client1({ name: `e2e-${peer.name}`, version: '0.0.0' });
      for (const [method, fn] of Object.entries(notifications)) {
        if (!SCHEMAS_1[method]) throw new Error(`no SDK 1.x schema for ${method}`);
        client.setNotificationHandler(SCHEMAS_1[method], fn);
      }
      return { transport, client };
    },
    callTool: (client, params, timeout) => client.callTool(params, undefined, { timeout }),
    request: (client, params, timeout) => client.request({ method: 'tools/call', params }, CallToolResultSchema, { timeout }),
  },
  {
    version: '2026-07-28',
    sdk: `@modelcontextprotocol/client ${installed('@modelcontextprotocol/client')}`,
    modern: true,
    connect(peer, params, notifications = {}) {
      const transport = new StdioClientTransport2(params);
      // 'auto': what a host that speaks both eras uses. It probes with
      // server/discover (on a throwaway sibling process) and would fall
      // back to initialize if the server gave no sign of 2026-07-28.
      const client = new Client2({ name: `e2e-${peer.name}`, version: '0.0.0' }, { versionNegotiation: { mode: 'auto' } });
      for (const [method, fn] of Object.entries(notifications)) client.setNotificationHandler(method, fn);
      return { transport, client };
    },
    callTool: (client, params, timeout) => client.callTool(params, { timeout }),
    request: (client, params, timeout) => client.request({ method: 'tools/call', params }, { timeout }),
  },
];

// The environment for meerkatd processes: the caller's, without MEERKAT_*
// variables (they would override the homes' meerkat.toml).
export function childEnv() {
  const env = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (!k.startsWith('MEERKAT_')) env[k] = v;
  }
  return env;
}

// Last-resort cleanup if the runner dies before the after() hooks run (for
// instance when its output pipe closes): kill what we started, remove the
// temp dirs. The hooks do the orderly version.
const liveChildren = new Set();
const tempRoots = new Set();
function lastResortCleanup() {
  for (const c of liveChildren) {
    if (c.exitCode === null && c.signalCode === null) {
      try {
        c.kill('SIGKILL');
      } catch {
        // already gone
      }
    }
  }
  for (const r of tempRoots) fsSync.rmSync(r, { recursive: true, force: true });
}
process.on('exit', lastResortCleanup);
for (const [sig, n] of [['SIGINT', 2], ['SIGTERM', 15], ['SIGHUP', 1]]) {
  process.once(sig, () => {
    lastResortCleanup();
    process.exit(128 + n);
  });
}

/** Records a child for the last-resort cleanup. */
export function track(child) {
  if (child) {
    liveChildren.add(child);
    child.once('exit', () => liveChildren.delete(child));
  }
  return child;
}

/**
 * Creates a temp dir for a suite's homes, recorded for the last-resort
 * cleanup. Unix socket paths must stay under ~100 bytes: the caller keeps
 * the names short, and this falls back to /tmp when TMPDIR is long.
 */
export async function makeTempRoot(prefix) {
  let base = os.tmpdir();
  if (base.length > 40) base = '/tmp';
  const root = await fs.mkdtemp(path.join(base, prefix));
  tempRoots.add(root);
  return root;
}

/** Removes a temp dir of makeTempRoot. */
export async function removeTempRoot(root) {
  await fs.rm(root, { recursive: true, force: true });
  tempRoots.delete(root);
}

// ---------------------------------------------------------------- helpers

/** Rejects with a clear message if p does not settle within ms. */
export function within(ms, what, p) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${what}`)), ms);
  });
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
}

/** Polls fn (async, truthy when done) every 50 ms for up to ms. */
export async function until(ms, what, fn) {
  const deadline = Date.now() + ms;
  let last;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${ms} ms waiting for ${what}${last ? `: ${last.message}` : ''}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Runs meerkatd with args; resolves to stdout, rejects with stderr. */
export function meerkatd(args, { timeout = 15_000 } = {}) {
  return new Promise((resolve, reject) => {
    execFile(BIN, args, { env: childEnv(), timeout, maxBuffer: 16 << 20 }, (err, stdout, stderr) => {
      if (err) {
        err.message = `meerkatd ${args.join(' ')}: ${err.message}\nstderr: ${stderr}`;
        reject(err);
      } else {
        resolve(stdout);
      }
    });
  });
}

/** A bounded in-memory log of a process's stderr, for failure reports. */
export function captureStderr(stream, label, logs) {
  const entry = { label, text: '' };
  logs.push(entry);
  stream?.on('data', (d) => {
    entry.text += d.toString();
    if (entry.text.length > 64 << 10) entry.text = entry.text.slice(-(32 << 10));
  });
}

/** The text content of a CallToolResult. */
export function textOf(res) {
  return (res.content ?? [])
    .filter((c) => c.type === 'text')
    .map((c) => c.text)
    .join('\n');
}

/** Waits for a spawned process to exit; resolves to { code, signal }. */
export function exited(child) {
  if (child.exitCode !== null || child.signalCode !== null) {
    return Promise.resolve({ code: child.exitCode, signal: child.signalCode });
  }
  return once(child, 'exit').then(([code, signal]) => ({ code, signal }));
}

/** Ends a process we started: SIGTERM, then SIGKILL after ms. */
export async function stopProcess(child, ms = 5000) {
  if (!child || child.exitCode !== null || child.signalCode !== null) return;
  const done = exited(child);
  child.kill('SIGTERM');
  try {
    await within(ms, 'SIGTERM', done);
  } catch {
    child.kill('SIGKILL');
    await done;
  }
}

/** Starts `meerkatd run` for a home and waits until status shows it. */
export async function startDaemon(suite, name) {
  const home = suite.homes[name];
  const child = track(spawn(BIN, ['run', '--home', home], { env: childEnv(), stdio: ['ignore', 'pipe', 'pipe'] }));
  captureStderr(child.stderr, `${name} daemon stderr`, suite.logs);
  captureStderr(child.stdout, `${name} daemon stdout`, suite.logs);
  suite.daemons[name] = child;
  const early = exited(child).then(({ code, signal }) => {
    throw new Error(`meerkatd run for ${name} exited early (code ${code}, signal ${signal})`);
  });
  early.catch(() => {});
  await Promise.race([
    early,
    until(10_000, `${name}'s daemon to report "running": true`, async () => {
      // status exits 5 until a node serves the home: meerkatd() rejects.
      const st = JSON.parse(await meerkatd(['status', '--home', home, '--json']));
      return st.running === true;
    }),
  ]);
}

// ---------------------------------------------------------------- session

const validator = new AjvJsonSchemaValidator();

/**
 * An MCP session with `meerkatd mcp --home H` through the SDK's stdio
 * transport. A suite extends it with its own ok() (and more); structured
 * results are checked against this.outputSchemas (filled by the suite from
 * tools/list), violations recorded in suite.schemaViolations, so one schema
 * bug does not hide every later assertion.
 */
export class McpPeer {
  constructor(name, home, suite) {
    this.name = name;
    this.home = home;
    this.suite = suite;
    this.outputSchemas = new Map();
  }

  /** Notification handlers to install before connecting, by method. */
  notifications() {
    return {};
  }

  async connect() {
    const era = this.suite.era;
    const { transport, client } = era.connect(this, { command: BIN, args: ['mcp', '--home', this.home], stderr: 'pipe' }, this.notifications());
    this.transport = transport;
    this.client = client;
    captureStderr(transport.stderr, `${this.name} mcp stderr`, this.suite.logs);
    // Anything the client finds wrong on the wire (a response to a request
    // it cancelled, say) ends up here; the suites check it stays empty.
    this.client.onerror = (err) => this.suite.clientErrors.push(`${this.name}: ${err?.message ?? err}`);
    await within(15_000, `${this.name}: connect (${era.modern ? 'server/discover' : 'initialize'})`, this.client.connect(this.transport, { timeout: 10_000 }));
    this.child = track(this.transport._process); // the meerkatd mcp process (for the exit-code checks)
    if (era.modern) assert.equal(this.client.getProtocolEra(), 'modern', `${this.name}: the 2.x client fell back to initialize`);
  }

  /** Ajv check of a structured result against the listed outputSchema. */
  check(name, args, res) {
    const schema = this.outputSchemas.get(name);
    if (schema && res.structuredContent) {
      const v = validator.getValidator(schema)(res.structuredContent);
      if (!v.valid) this.suite.schemaViolations.push(`${this.name}: ${name}(${JSON.stringify(args).slice(0, 200)}): ${v.errorMessage}`);
    }
    return res;
  }

  /** tools/call through the client's raw request (no SDK output validation); the raw CallToolResult. */
  async call(name, args = {}, { timeout = CALL_TIMEOUT } = {}) {
    return this.check(name, args, await this.suite.era.request(this.client, { name, arguments: args }, timeout));
  }

  /** The structuredContent of a result that must be a success. */
  structured(name, res) {
    assert.notEqual(res.isError, true, `${this.name}: ${name} failed: ${textOf(res)}`);
    assert.equal(typeof res.structuredContent, 'object', `${this.name}: ${name}: no structuredContent`);
    // The text fallback carries the same JSON.
    assert.deepEqual(JSON.parse(textOf(res)), res.structuredContent, `${name}: text content is not the structured content`);
    return res.structuredContent;
  }

  /** A tool call that must fail with a tool error "code: …"; returns its text. */
  async fails(name, args, code, opts) {
    const res = await this.call(name, args, opts);
    const text = textOf(res);
    assert.equal(res.isError, true, `${this.name}: ${name} should have failed with ${code}: got ${text}`);
    assert.ok(text.startsWith(`${code}:`), `${this.name}: ${name}: want "${code}: …", got ${JSON.stringify(text)}`);
    return text;
  }

  async close() {
    await this.client?.close().catch(() => {});
  }
}

// ------------------------------------------------------------ scaffolding

/** A step: a test that, when it fails, also prints the processes' stderr (see tearDown). */
export function stepper(suite) {
  return (name, fn) =>
    test(name, { timeout: STEP_TIMEOUT }, async (t) => {
      try {
        await fn(t);
      } catch (err) {
        suite.failed = true;
        throw err;
      }
    });
}

/**
 * The suites' before(): makeHomes(suite), the daemons of alice and bob when
 * attached, then an MCP session each (new Peer(name, home, suite)).
 * Resolves to [alice, bob]; on failure closes what it opened.
 */
export async function setUp(suite, mode, makeHomes, Peer) {
  const peers = [];
  try {
    await makeHomes(suite);
    if (mode === 'attached') {
      await startDaemon(suite, 'alice');
      await startDaemon(suite, 'bob');
    }
    peers.push(new Peer('alice', suite.homes.alice, suite), new Peer('bob', suite.homes.bob, suite));
    for (const p of peers) await p.connect();
    // Each server has answered a request, so its node runs (and listens):
    // a client's connect may return before the server has answered
    // anything, and a first send to a peer not listening yet would open
    // alice's breaker (shut for a second) under the tests that follow.
    for (const p of peers) {
      await within(15_000, `${p.name}: a first answer`, p.client.listTools(undefined, { timeout: 10_000 }));
    }
    return peers;
  } catch (err) {
    suite.failed = true;
    for (const p of peers) await p.close();
    throw err;
  }
}

/**
 * The suites' after(): closes the sessions still open, stops the daemons,
 * prints the captured stderr if anything failed, removes the temp dir.
 */
export async function tearDown(suite, peers, label) {
  for (const p of peers) await p?.close();
  for (const child of Object.values(suite.daemons)) await stopProcess(child);
  if (suite.failed) {
    for (const l of suite.logs) {
      if (l.text.trim()) console.error(`--- ${label}: ${l.label}\n${l.text.trimEnd()}\n---`);
    }
  }
  if (suite.root) await removeTempRoot(suite.root);
}
