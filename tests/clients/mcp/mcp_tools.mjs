// cordon's MCP server driven by the official TypeScript SDK client
// (@modelcontextprotocol/sdk, pinned in package.json), over both
// transports (issue 15): stdio (`cordon mcp`) and Streamable HTTP (/mcp of
// `cordon serve`, with the token). Each covers initialize, tools/list and
// every tool; a non-zero exit (isError false), a bad argument (isError
// true, naming the field), an unknown tool (-32602) and the output bound.
// Over HTTP also: no token (401 with WWW-Authenticate: Bearer), a foreign
// Origin (403), the session header rules (400, 404) and GET (405). On both:
// progress past a short request timeout (resetTimeoutOnProgress), the
// cancellation of a run (its tree seen dead in /proc) and of session execs
// (SIGINT, and the ladder for one that ignores it), and logging/setLevel;
// over HTTP the MCP counts of /metrics and DELETE closing the cordon
// session its MCP session left open.
//
// Each server has a state directory and a cgroup root of its own; only
// the processes this test started are signalled, by pid. Both must exit 0
// (every teardown verified).
//
//   ctest --test-dir build -R '^mcp$' --output-on-failure
//   NODE_PATH=build/clients/mcp/node_modules CORDON_BINARY=build/cordon \
//     node tests/clients/mcp/mcp_tools.mjs
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';
import { fileURLToPath } from 'node:url';

import {
  dead, loadPinned, NO_ISOLATION_ALLOWED, pidsIn, poll, removeCgroupRoot, SANITIZER_MARKS,
  TIMEOUT_MS,
} from '../support.mjs';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const BINARY = process.env.CORDON_BINARY || 'build/cordon';
const OUTPUT_LIMIT = 4096;  // --mcp-output-limit 4K
const TOOLS = ['run', 'session_create', 'session_exec', 'session_interrupt', 'session_close',
  'session_list', 'file_write', 'file_read', 'file_list'];

// --- the SDK, from the build directory -----------------------------------------

function loadSdk() {
  const require = loadPinned(HERE);
  return {
    ...require('@modelcontextprotocol/sdk/client/index.js'),
    ...require('@modelcontextprotocol/sdk/client/stdio.js'),
    ...require('@modelcontextprotocol/sdk/client/streamableHttp.js'),
    ...require('@modelcontextprotocol/sdk/types.js'),
  };
}

let sdk;
try {
  sdk = loadSdk();
} catch (error) {
  console.error(`not run: ${error.message}`);
  process.exit(1);
}
const { Client, StdioClientTransport, StreamableHTTPClientTransport, McpError } = sdk;

// --- helpers ------------------------------------------------------------------


function withTimeout(promise, what) {
  let timer;
  return Promise.race([promise, new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer within ${TIMEOUT_MS} ms`)), TIMEOUT_MS);
  })]).finally(() => clearTimeout(timer));
}

const cleanups = [];
// The cases, each with a server of its own, run at once by the one test at
// the end (node:test runs top-level tests one after another): the long
// calls of each then overlap.
const cases = [];
const testCase = (name, fn) => cases.push([name, fn]);
after(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup();
});

// --- what both transports must do ---------------------------------------------

async function call(client, name, args = {}) {
  return withTimeout(client.callTool({ name, arguments: args }), `tools/call ${name}`);
}

function text(result) {
  return result.content.filter((c) => c.type === 'text').map((c) => c.text).join('\n');
}

function ok(result, what) {
  assert.equal(result.isError, false, `${what}: isError, with: ${text(result)}`);
  assert.ok(result.structuredContent, `${what}: no structuredContent`);
  // The text copy is the structured result's JSON.
  assert.deepEqual(JSON.parse(result.content[0].text), result.structuredContent);
  return result.structuredContent;
}

function failed(result, field, what) {
  assert.equal(result.isError, true, `${what}: not isError: ${JSON.stringify(result)}`);
  assert.equal(result.structuredContent, undefined, `${what}: an error carries no structuredContent`);
  assert.match(text(result), new RegExp(field), `${what}: the message does not name ${field}`);
}

async function exerciseTools(client, label) {
  const info = client.getServerVersion();
  assert.equal(info.name, 'cordon');
  const { tools } = await withTimeout(client.listTools(), 'tools/list');
  assert.deepEqual(tools.map((t) => t.name).sort(), [...TOOLS].sort());
  for (const t of tools) {
    assert.equal(t.inputSchema.type, 'object', `${t.name}: inputSchema`);
    assert.equal(t.outputSchema.type, 'object', `${t.name}: outputSchema`);
  }

  // run: a command that ran, however it ended, is not an error.
  let r = ok(await call(client, 'run', { command: 'echo hello; echo oops >&2' }), 'run');
  assert.equal(r.exit_code, 0);
  assert.equal(r.stdout, 'hello\n');
  assert.equal(r.stderr, 'oops\n');
  assert.equal(r.dead, true);
  r = ok(await call(client, 'run', { command: 'exit 3' }), 'run exit 3');
  assert.equal(r.exit_code, 3, `${label}: exit 3`);
  assert.equal(r.outcome, 'exited');
  r = ok(await call(client, 'run', { argv: ['/bin/sh', '-c', 'cat'], stdin: 'in' }), 'run argv');
  assert.equal(r.stdout, 'in');
  r = ok(await call(client, 'run', { command: 'sleep 30', timeout_ms: 300 }), 'run timeout');
  assert.equal(r.timed_out, true);
  assert.equal(r.dead, true);

  // A bad argument: isError, naming the field.
  failed(await call(client, 'run', { command: 'true', timeout_ms: 'soon' }), 'timeout_ms', 'timeout_ms');
  failed(await call(client, 'run', { command: 'true', colour: 'red' }), 'colour', 'unknown argument');
  failed(await call(client, 'run', { command: 'true', limits: { memory_bytes: -1 } }),
    'memory_bytes', 'a limit the engine refuses');
  failed(await call(client, 'run', { command: 'true', network: 'sideways' }), 'network', 'network');

  // An unknown tool: JSON-RPC -32602.
  await assert.rejects(call(client, 'no_such_tool'), (e) => {
    assert.ok(e instanceof McpError, String(e));
    assert.equal(e.code, -32602);
    assert.match(e.message, /no_such_tool/);
    return true;
  });

  // The output bound: 4K a stream, cut on a UTF-8 boundary ("é\n" is three
  // bytes: the 4097th byte continues a sequence, so 4095 are kept).
  r = ok(await call(client, 'run', { command: "yes 'é' | head -c 10000" }), 'run big output');
  assert.equal(r.stdout_truncated, true);
  assert.equal(r.stderr_truncated, false);
  const marker = r.stdout.lastIndexOf('\n[... ');
  assert.ok(marker > 0, 'no truncation marker');
  assert.equal(Buffer.byteLength(r.stdout.slice(0, marker)), 4095);
  assert.equal(r.stdout.slice(marker), '\n[... 5905 bytes truncated]');
  assert.ok(!r.stdout.includes('\ufffd'), 'a sequence was split');

  // A shell session, its state, and its files.
  const s = ok(await call(client, 'session_create', { kind: 'shell' }), 'session_create');
  assert.equal(s.kind, 'shell');
  assert.ok(s.id);
  assert.equal(s.workspace, '/workspace');
  const id = s.id;
  r = ok(await call(client, 'session_exec', { id, command: 'x=41; echo start' }), 'exec');
  assert.equal(r.stdout, 'start\n');
  r = ok(await call(client, 'session_exec', { id, command: 'echo $((x + 1))' }), 'exec state');
  assert.equal(r.stdout, '42\n');
  r = ok(await call(client, 'session_exec', { id, command: 'false' }), 'exec non-zero');
  assert.equal(r.exit_code, 1);
  failed(await call(client, 'session_exec', { id }), 'command', 'exec without a command');

  let f = ok(await call(client, 'file_write', { id, path: 'notes/a.txt', content: 'héllo\n' }),
    'file_write');
  assert.equal(f.size, 7);
  assert.match(f.sha256, /^[0-9a-f]{64}$/);
  r = ok(await call(client, 'session_exec', { id, command: 'cat notes/a.txt' }), 'exec cat');
  assert.equal(r.stdout, 'héllo\n');
  f = ok(await call(client, 'file_read', { id, path: 'notes/a.txt' }), 'file_read');
  assert.equal(f.content, 'héllo\n');
  assert.equal(f.truncated, false);
  f = ok(await call(client, 'file_read', { id, path: 'notes/a.txt', max_bytes: 2 }), 'file_read 2');
  assert.equal(f.content, 'h');  // 'é' does not fit in the second byte
  assert.equal(f.truncated, true);
  ok(await call(client, 'file_write', { id, path: 'bin.dat', content_base64: '/wAB' }), 'write b64');
  f = ok(await call(client, 'file_read', { id, path: 'bin.dat' }), 'file_read binary');
  assert.equal(f.content_base64, '/wAB');
  assert.equal(f.content, undefined);
  const listing = ok(await call(client, 'file_list', { id }), 'file_list');
  assert.deepEqual(listing.entries.map((e) => e.name).sort(), ['bin.dat', 'notes']);
  const sub = ok(await call(client, 'file_list', { id, dir: 'notes' }), 'file_list notes');
  assert.deepEqual(sub.entries.map((e) => [e.name, e.type, e.size]), [['a.txt', 'file', 7]]);
  failed(await call(client, 'file_read', { id, path: '../escape' }), 'path', 'a path outside');
  failed(await call(client, 'file_read', { id }), 'path', 'file_read without a path');

  r = ok(await call(client, 'session_interrupt', { id }), 'session_interrupt');
  assert.equal(r.interrupted, false);
  const list = ok(await call(client, 'session_list'), 'session_list');
  assert.ok(list.sessions.some((x) => x.id === id && x.state === 'ready'), JSON.stringify(list));
  r = ok(await call(client, 'session_close', { id }), 'session_close');
  assert.equal(r.id, id);
  // Closed, it is listed only when asked for.
  const after = ok(await call(client, 'session_list'), 'session_list after the close');
  assert.ok(!after.sessions.some((x) => x.id === id), JSON.stringify(after));
  const closed = ok(await call(client, 'session_list', { kind: 'shell', state: ['closed'] }),
    'session_list of closed shells');
  assert.ok(closed.sessions.some((x) => x.id === id), JSON.stringify(closed));
  assert.ok(closed.sessions.every((x) => x.state === 'closed'), JSON.stringify(closed));
  failed(await call(client, 'session_list', { state: ['done'] }), 'state: no state "done"',
    'a state that is none');
  failed(await call(client, 'session_list', { state: 'closed' }), 'state: must be an array',
    'a state that is not an array');
  failed(await call(client, 'session_list', { state: [] }), 'state: must be an array of one',
    'no state');
  failed(await call(client, 'session_list', { kind: 'perl' }), 'kind', 'a kind that is none');
  // A page at a time: each page's `next` is the `after` of the one that
  // follows, and the pages together are the whole list.
  const other = ok(await call(client, 'session_create', { kind: 'shell' }), 'a second session');
  const states = ['starting', 'ready', 'busy', 'closed', 'invalidated', 'quarantined', 'lost'];
  const whole = ok(await call(client, 'session_list', { state: states }), 'session_list, all');
  assert.ok(whole.sessions.length >= 2 && whole.next === undefined, JSON.stringify(whole));
  const paged = [];
  for (let after; ;) {
    const page = ok(await call(client, 'session_list', { state: states, limit: 1, after }),
      `session_list after ${after}`);
    assert.equal(page.sessions.length, 1, JSON.stringify(page));
    paged.push(page.sessions[0].id);
    if (page.next === undefined) break;
    assert.equal(page.next, page.sessions[0].id);
    after = page.next;
  }
  assert.deepEqual(paged, whole.sessions.map((x) => x.id));
  ok(await call(client, 'session_close', { id: other.id }), 'the second session closed');
  failed(await call(client, 'session_list', { limit: 0 }), 'limit: must be from 1 to 1000',
    'a limit of 0');
  failed(await call(client, 'session_list', { limit: '5' }), 'limit: must be an integer',
    'a limit that is not a number');
  failed(await call(client, 'session_list', { after: '../x' }), 'after: must be a session id',
    'an after that is no id');
  failed(await call(client, 'session_exec', { id, command: 'true' }), id, 'exec on a closed session');
  failed(await call(client, 'file_list', { id: 'no-such-session' }), 'no-such-session', 'unknown id');
  failed(await call(client, 'session_create', { kind: 'perl' }), 'kind', 'a bad kind');
  if (label === 'stdio') await exercisePython(client);
}

// A python session (cordon mcp execs cordon-serve, which has kernels): a
// result, an exception (not isError: the code ran) and a PNG as image
// content.
async function exercisePython(client) {
  const created = await call(client, 'session_create', { kind: 'python' });
  assert.equal(created.isError, false, `python session: ${text(created)}`);
  const id = created.structuredContent.id;
  let r = ok(await call(client, 'session_exec', { id, code: 'x = 6 * 7\nprint(x)' }), 'python');
  assert.equal(r.stdout, '42\n');
  assert.equal(r.status, 'ok');
  r = ok(await call(client, 'session_exec', { id, code: '1/0' }), 'python exception');
  assert.equal(r.status, 'error');
  assert.equal(r.error.ename, 'ZeroDivisionError');
  // A result and a traceback are bounded as the streams are (before, a
  // 100 kB repr or exception came whole, whatever --mcp-output-limit said).
  r = ok(await call(client, 'session_exec', { id, code: "'x' * 100000" }), 'a large result');
  const plain = r.results[0].data['text/plain'];
  assert.ok(Buffer.byteLength(plain) <= OUTPUT_LIMIT + 64, `a result of ${plain.length} bytes`);
  assert.match(plain, /^'x{4095}\n\[\.\.\. 95906 bytes truncated\]$/);
  assert.equal(r.truncated, true);
  r = ok(await call(client, 'session_exec', { id, code: "raise ValueError('y' * 100000)" }),
    'a large exception');
  assert.equal(r.error.ename, 'ValueError');
  assert.ok(r.error.evalue.endsWith(' bytes truncated]'), r.error.evalue.slice(-80));
  const errorBytes = Buffer.byteLength(JSON.stringify(r.error));
  assert.ok(errorBytes < 2 * OUTPUT_LIMIT, `an error of ${errorBytes} bytes`);
  assert.equal(r.truncated, true);
  const png = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==';
  const shown = await call(client, 'session_exec', { id,
    code: `import base64\nfrom IPython.display import Image, display\ndisplay(Image(data=base64.b64decode('${png}')))` });
  ok(shown, 'python image');
  const images = shown.content.filter((c) => c.type === 'image');
  assert.equal(images.length, 1, JSON.stringify(shown.content));
  assert.equal(images[0].mimeType, 'image/png');
  assert.equal(images[0].data, png);
  // Once, as an image: the bundle keeps its size only.
  assert.ok(!JSON.stringify(shown.structuredContent).includes(png), 'the image twice');
  failed(await call(client, 'session_exec', { id, code: '1', stdin: 'x' }), 'stdin', 'stdin for python');
  // Progress: the message is the latest line of the kernel's stream output
  // so far (from iopub, as it comes).
  const seen = [];
  r = ok(await withTimeout(client.callTool({ name: 'session_exec', arguments: { id,
    code: "import time\nfor i in range(1, 5):\n    print(f'py {i}', flush=True)\n    time.sleep(1)" } },
  undefined, { onprogress: (p) => seen.push(p) }), 'python with progress'), 'python progress');
  assert.equal(r.stdout, 'py 1\npy 2\npy 3\npy 4\n');
  assert.ok(seen.some((p) => /^py [1-4]$/.test(p.message)), JSON.stringify(seen));
  ok(await call(client, 'session_close', { id }), 'python close');
}

// --- progress, cancellation, logging --------------------------------------------

// The JSON lines of a server's stderr.
function events(logText) {
  return logText().split('\n').filter(Boolean).map((l) => {
    try { return JSON.parse(l); } catch { return {}; }
  });
}

async function exerciseLongCalls(client, label, logText) {
  // Logging: declared, asked for, and cordon's own events sent at or above
  // the level asked; a level that is not one is -32602.
  assert.ok(client.getServerCapabilities().logging, 'no logging capability');
  const messages = [];
  client.setNotificationHandler(sdk.LoggingMessageNotificationSchema, (n) => messages.push(n.params));
  await assert.rejects(withTimeout(client.setLoggingLevel('chatty'), 'setLevel'), (e) => {
    assert.equal(e.code, -32602);
    assert.match(e.message, /params\.level/);
    return true;
  });
  await withTimeout(client.setLoggingLevel('info'), 'logging/setLevel');
  const s = ok(await call(client, 'session_create', { kind: 'shell', isolation: 'none' }), 'session');
  const created = messages.find((m) => m.data.event === 'session_created');
  assert.ok(created, `no session_created message: ${JSON.stringify(messages)}`);
  assert.equal(created.level, 'info');
  assert.equal(created.logger, 'cordon');
  assert.equal(created.data.session_id, s.id);
  assert.ok(events(logText).some((e) => e.event === 'mcp_session_created' && e.session_id === s.id),
    'the event is not on stderr');
  await withTimeout(client.setLoggingLevel('error'), 'logging/setLevel error');
  const before = messages.length;
  ok(await call(client, 'run', { command: 'true' }), 'run at level error');
  assert.equal(messages.length, before, `info sent at level error: ${JSON.stringify(messages)}`);

  // Progress: with a request timeout of 4 s, reset by each progress
  // notification, a 10 s run and a 10 s session exec (at once) both
  // succeed, and each saw progress (increasing), its message the latest
  // line of output so far: a line printed before the end (the exec's on
  // stderr, as it streams from the session's shell).
  const progress = { run: [], exec: [] };
  const options = (key) => ({ timeout: 4000, resetTimeoutOnProgress: true,
    onprogress: (p) => progress[key].push(p) });
  const ticks = (prefix, stream = '') =>
    `for i in 1 2 3 4 5 6 7 8 9 10; do echo "${prefix} $i"${stream}; sleep 1; done`;
  const [r, e] = await Promise.all([
    withTimeout(client.callTool({ name: 'run', arguments: { command: ticks('line') } },
      undefined, options('run')), 'a run with progress'),
    withTimeout(client.callTool({ name: 'session_exec', arguments: {
      id: s.id, command: `${ticks('tick', ' >&2')}; echo slept` } }, undefined, options('exec')),
    'a session exec with progress'),
  ]);
  assert.equal(ok(r, 'run with progress').stdout.split('\n').filter(Boolean).length, 10);
  const exec = ok(e, 'exec with progress');
  assert.equal(exec.stdout, 'slept\n');
  assert.equal(exec.stderr.split('\n').filter(Boolean).length, 10);
  for (const [key, seen] of Object.entries(progress)) {
    assert.ok(seen.length >= 3, `${label}: ${key}: ${seen.length} progress notifications`);
    for (let i = 1; i < seen.length; ++i) assert.ok(seen[i].progress > seen[i - 1].progress, key);
  }
  assert.ok(progress.run.some((p) => /^line [1-9]$/.test(p.message)), JSON.stringify(progress.run));
  assert.ok(progress.exec.some((p) => /^tick [1-9]$/.test(p.message)), JSON.stringify(progress.exec));

  // Cancellation of a run: the client's AbortSignal sends
  // notifications/cancelled; the whole tree (a setsid'ed child too) is
  // torn down, verified, and recorded `cancelled`.
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cordon-mcp-cancel-'));
  try {
    const pidFile = path.join(dir, 'run-pids');
    let abort = new AbortController();
    const running = client.callTool({ name: 'run', arguments: { isolation: 'none', command:
      `sleep 100 & echo $! > ${pidFile}; setsid sleep 100 & echo $! >> ${pidFile}; ` +
      `echo $$ >> ${pidFile}; wait` } }, undefined, { signal: abort.signal });
    const pids = await pidsIn(pidFile, 3);
    abort.abort('the test cancels it');
    await assert.rejects(withTimeout(running, 'a cancelled run'));
    await poll(() => pids.every(dead), `the run's processes ${pids} to die`);
    const finished = await poll(() => events(logText).find((x) => x.event === 'mcp_run_finished' &&
      x.outcome === 'cancelled'), 'the cancelled run recorded');
    assert.equal(finished.dead, true);
    assert.ok(events(logText).some((x) => x.event === 'mcp_call_cancelled' && x.tool === 'run'));

    // Cancellation of a session exec: SIGINT; the shell comes back and the
    // session goes on.
    const execPid = path.join(dir, 'exec-pid');
    abort = new AbortController();
    let exec = client.callTool({ name: 'session_exec', arguments: { id: s.id,
      command: `sh -c 'echo $$ > ${execPid}; exec sleep 100'` } }, undefined, { signal: abort.signal });
    let [pid] = await pidsIn(execPid, 1);
    abort.abort('cancelled');
    await assert.rejects(withTimeout(exec, 'a cancelled exec'));
    await poll(() => dead(pid), 'the exec\'s command to die');
    let after = ok(await call(client, 'session_exec', { id: s.id, command: 'echo after' }), 'after');
    assert.equal(after.stdout, 'after\n');
    // One that ignores SIGINT: the ladder replaces the shell (its tree torn
    // down, verified) and the session goes on in its workspace.
    const stubborn = path.join(dir, 'stubborn-pid');
    abort = new AbortController();
    exec = client.callTool({ name: 'session_exec', arguments: { id: s.id,
      command: `sh -c 'trap "" INT; echo $$ > ${stubborn}; exec sleep 100'` } }, undefined,
    { signal: abort.signal });
    [pid] = await pidsIn(stubborn, 1);
    abort.abort('cancelled');
    await assert.rejects(withTimeout(exec, 'a cancelled stubborn exec'));
    await poll(() => dead(pid), 'the stubborn command to die');
    assert.ok(events(logText).some((x) => x.event === 'mcp_exec_escalated' && x.session_id === s.id));
    after = ok(await call(client, 'session_exec', { id: s.id, command: 'echo again' }), 'again');
    assert.equal(after.stdout, 'again\n');
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
  return s.id;
}

// --- stdio: cordon mcp ----------------------------------------------------------

testCase('stdio: cordon mcp', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cordon-mcp-stdio-'));
  const cgroupRoot = `/cordon-test-mcp-stdio-${process.pid}`;
  cleanups.push(async () => {
    assert.deepEqual(await removeCgroupRoot(cgroupRoot), [], 'cgroups left');
    fs.rmSync(dir, { recursive: true, force: true });
  });
  const transport = new StdioClientTransport({
    command: BINARY,
    args: ['mcp', '--state-dir', path.join(dir, 'state'), '--cgroup-root', cgroupRoot,
      '--mcp-output-limit', '4K', ...NO_ISOLATION_ALLOWED],
    stderr: 'pipe',
  });
  let log = '';
  transport.stderr.on('data', (chunk) => { log += chunk; });
  const client = new Client({ name: 'cordon-test', version: '1.0.0' });
  await withTimeout(client.connect(transport), 'initialize over stdio');
  const pid = transport.pid;
  // A failure leaves the server running: stdin's EOF (or the SDK's
  // signals) end it before its cgroups are removed.
  cleanups.push(async () => {
    await client.close().catch(() => {});
    await poll(() => dead(pid), 'cordon mcp to exit').catch(() => {});
  });
  try {
    await exerciseTools(client, 'stdio');
    await exerciseLongCalls(client, 'stdio', () => log);
  } catch (error) {
    error.message += `\n--- cordon mcp's stderr ---\n${log.split('\n').slice(-30).join('\n')}`;
    throw error;
  }
  // stdin's EOF tears everything down: the log says so, with every
  // teardown verified, and the process is gone.
  await client.close();
  await poll(() => !fs.existsSync(`/proc/${pid}`) || fs.readFileSync(`/proc/${pid}/stat`, 'utf8')
    .split(') ')[1]?.startsWith('Z'), 'cordon mcp to exit');
  const stopped = log.split('\n').filter(Boolean).map((l) => {
    try { return JSON.parse(l); } catch { return {}; }
  }).find((e) => e.event === 'stopped');
  assert.ok(stopped, `no "stopped" event in its log:\n${log}`);
  assert.equal(stopped.all_dead, true);
  assert.ok(!log.includes('"event":"stopping","level":"info","reason":"signal"'),
    'it stopped on a signal, not on stdin EOF');
  for (const mark of SANITIZER_MARKS) assert.ok(!log.includes(mark), `a sanitizer report:\n${log}`);
});

testCase('stdio: SIGTERM tears a run and a session down and exits 0', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cordon-mcp-term-'));
  const cgroupRoot = `/cordon-test-mcp-term-${process.pid}`;
  cleanups.push(async () => {
    assert.deepEqual(await removeCgroupRoot(cgroupRoot), [], 'cgroups left');
    fs.rmSync(dir, { recursive: true, force: true });
  });
  const transport = new StdioClientTransport({
    command: BINARY,
    args: ['mcp', '--state-dir', path.join(dir, 'state'), '--cgroup-root', cgroupRoot,
      ...NO_ISOLATION_ALLOWED],
    stderr: 'pipe',
  });
  let log = '';
  transport.stderr.on('data', (chunk) => { log += chunk; });
  const client = new Client({ name: 'cordon-test', version: '1.0.0' });
  await withTimeout(client.connect(transport), 'initialize over stdio');
  const pid = transport.pid;
  const s = ok(await call(client, 'session_create', {}), 'session_create');
  // Both in flight when the signal comes; both answered, as torn down.
  const exec = call(client, 'session_exec', { id: s.id, command: 'sleep 100' });
  const run = call(client, 'run', { command: 'sleep 100' });
  await poll(() => (log.match(/"event":"run_started"/g) || []).length >= 1, 'the run to start');
  process.kill(pid, 'SIGTERM');
  const [e, r] = await Promise.all([exec, run]);
  assert.equal(ok(r, 'run').outcome, 'cancelled');
  assert.equal(ok(e, 'exec').invalidated, true);
  await poll(() => log.includes('"event":"stopped"'), 'cordon mcp to stop');
  const stopped = JSON.parse(log.split('\n').find((l) => l.includes('"event":"stopped"')));
  assert.equal(stopped.all_dead, true, log);
  await client.close();
});

// --- Streamable HTTP: /mcp of cordon serve --------------------------------------

// A `cordon serve` of its own (state directory, cgroup root, log) with
// `args`, once it answers: its url and token, and how it exited. Stopped
// (SIGTERM, by pid) and cleaned up after the tests if still running.
async function startServe(name, args) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `cordon-mcp-${name}-`));
  const stateDir = path.join(dir, 'state');
  const cgroupRoot = `/cordon-test-mcp-${name}-${process.pid}`;
  const logPath = path.join(dir, 'daemon.log');
  const logFd = fs.openSync(logPath, 'a');
  const daemon = spawn(BINARY, ['serve', '--state-dir', stateDir, '--listen', '127.0.0.1:0',
    '--cgroup-root', cgroupRoot, ...NO_ISOLATION_ALLOWED, ...args],
  { stdio: ['ignore', 'ignore', logFd] });
  fs.closeSync(logFd);
  let exit = null;
  const exited = new Promise((resolve) => daemon.on('exit', (code, signal) => {
    exit = { code, signal };
    resolve(exit);
  }));
  const logTail = () => fs.readFileSync(logPath, 'utf8').trimEnd().split('\n').slice(-30).join('\n');
  cleanups.push(async () => {
    if (!exit) {
      daemon.kill('SIGTERM');
      let timer;
      await Promise.race([exited, new Promise((r) => { timer = setTimeout(r, TIMEOUT_MS); })]);
      clearTimeout(timer);  // else it holds the process for TIMEOUT_MS
      if (!exit) daemon.kill('SIGKILL');
    }
    assert.deepEqual(await removeCgroupRoot(cgroupRoot), [], 'cgroups left');
    fs.rmSync(dir, { recursive: true, force: true });
  });
  const { url, token } = await poll(() => {
    if (exit) throw new Error(`the daemon exited at start:\n${logTail()}`);
    try {
      const info = JSON.parse(fs.readFileSync(path.join(stateDir, 'serve.json'), 'utf8'));
      if (info.pid !== daemon.pid) return false;
      return { url: info.urls[0], token: fs.readFileSync(info.token_file, 'utf8').split('\n')[0].trim() };
    } catch {
      return false;
    }
  }, 'serve.json');
  return { url, token, daemon, exited, logPath, logTail };
}

testCase('Streamable HTTP: /mcp of cordon serve', async () => {
  const { url, token, daemon, exited, logPath, logTail } =
    await startServe('http', ['--mcp-output-limit', '4K']);
  const endpoint = new URL(`${url}/mcp`);
  const auth = { Authorization: `Bearer ${token}` };

  const transport = new StreamableHTTPClientTransport(endpoint, { requestInit: { headers: auth } });
  const client = new Client({ name: 'cordon-test', version: '1.0.0' });
  await withTimeout(client.connect(transport), 'initialize over HTTP');
  assert.ok(transport.sessionId, 'no Mcp-Session-Id from initialize');
  assert.equal(transport.protocolVersion, '2025-11-25');
  let opened;  // a session this MCP session created and left open
  try {
    await exerciseTools(client, 'http');
    opened = await exerciseLongCalls(client, 'http', () => fs.readFileSync(logPath, 'utf8'));
  } catch (error) {
    error.message += `\n--- the daemon's log ---\n${logTail()}`;
    throw error;
  }

  const list = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' });
  const post = (headers, body = list) => fetch(endpoint, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream',
      ...headers },
    body,
  });
  // The token, as on every route.
  let res = await post({});
  assert.equal(res.status, 401);
  assert.equal(res.headers.get('www-authenticate'), 'Bearer');
  res = await post({ Authorization: 'Bearer wrong' });
  assert.equal(res.status, 401);
  // An Origin that is not loopback: 403, even with the token.
  res = await post({ ...auth, Origin: 'http://evil.example' });
  assert.equal(res.status, 403);
  res = await post({ ...auth, Origin: 'http://localhost:6274', 'Mcp-Session-Id': transport.sessionId,
    'MCP-Protocol-Version': '2025-11-25' });
  assert.equal(res.status, 200, 'a loopback Origin is served');
  // The session header after initialize: 400 without it, 404 for one unknown.
  res = await post(auth);
  assert.equal(res.status, 400);
  res = await post({ ...auth, 'Mcp-Session-Id': 'f00' });
  assert.equal(res.status, 404);
  res = await post({ ...auth, 'Mcp-Session-Id': transport.sessionId, 'MCP-Protocol-Version': '1999-01-01' });
  assert.equal(res.status, 400, 'an unsupported MCP-Protocol-Version');
  res = await fetch(endpoint, { headers: auth });
  assert.equal(res.status, 405, 'GET: no event stream');
  // Not JSON: a JSON-RPC parse error.
  res = await post({ ...auth, 'Mcp-Session-Id': transport.sessionId }, '{oops');
  assert.equal(res.status, 400);
  assert.equal((await res.json()).error.code, -32700);
  // A negotiation down to an older version.
  res = await post(auth, JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize',
    params: { protocolVersion: '2025-03-26', capabilities: {}, clientInfo: { name: 'old', version: '0' } } }));
  assert.equal(res.status, 200);
  assert.equal((await res.json()).result.protocolVersion, '2025-03-26');
  assert.ok(res.headers.get('mcp-session-id'));

  // MCP calls in /metrics, by tool and result.
  const metrics = await (await fetch(`${url}/metrics`, { headers: auth })).text();
  const counted = (tool, result) => Number((metrics.match(new RegExp(
    `^cordon_mcp_tool_calls_total\\{tool="${tool}",result="${result}"\\} (\\d+)$`, 'm')) || [])[1] || 0);
  assert.ok(counted('run', 'ok') >= 5, metrics);
  assert.ok(counted('run', 'error') >= 4, metrics);
  assert.equal(counted('run', 'cancelled'), 1, metrics);
  assert.equal(counted('session_exec', 'cancelled'), 2, metrics);
  assert.ok(counted('unknown', 'error') >= 1, metrics);

  // DELETE ends the session; it is then unknown, and the cordon session it
  // created and left open is closed with it.
  const sessionId = transport.sessionId;
  const view = async () => (await fetch(`${url}/v1/sessions/${opened}`, { headers: auth })).json();
  assert.equal((await view()).state, 'ready');
  await transport.terminateSession();
  res = await post({ ...auth, 'Mcp-Session-Id': sessionId });
  assert.equal(res.status, 404);
  await poll(async () => (await view()).state === 'closed', `session ${opened} to be closed`);
  await client.close();

  daemon.kill('SIGTERM');
  const how = await withTimeout(exited, 'the daemon to stop');
  assert.deepEqual(how, { code: 0, signal: null }, `the daemon's exit:\n${logTail()}`);
  const log = fs.readFileSync(logPath, 'utf8');
  for (const mark of SANITIZER_MARKS) assert.ok(!log.includes(mark), `a sanitizer report:\n${log}`);
});

// An MCP session idle past --mcp-session-ttl is ended: its Mcp-Session-Id
// then gets 404, and the cordon session its tools created and left open is
// closed, its processes gone. Expiry is checked on each request to /mcp: a
// GET (405, which touches no session) makes the daemon look, without
// using the session being waited on.
testCase('Streamable HTTP: an MCP session expires after --mcp-session-ttl', async () => {
  const TTL_MS = 2000;
  const { url, token, daemon, exited, logPath, logTail } =
    await startServe('ttl', ['--mcp-session-ttl', `${TTL_MS}ms`]);
  const endpoint = new URL(`${url}/mcp`);
  const auth = { Authorization: `Bearer ${token}` };
  const transport = new StreamableHTTPClientTransport(endpoint, { requestInit: { headers: auth } });
  const client = new Client({ name: 'cordon-test', version: '1.0.0' });
  let sessionId;
  let busy;
  try {
    await withTimeout(client.connect(transport), 'initialize over HTTP');
    sessionId = transport.sessionId;
    assert.ok(sessionId, 'no Mcp-Session-Id from initialize');
    const s = ok(await call(client, 'session_create', { kind: 'shell', isolation: 'none' }),
      'session_create');
    // The session's shell and a child it left running, by host pid. The
    // daemon counts the idle time from when it got this, the last request.
    const lastRequest = Date.now();
    const r = ok(await call(client, 'session_exec', { id: s.id,
      command: 'sleep 100 >/dev/null 2>&1 & echo $$ $!' }), 'exec');
    const pids = r.stdout.trim().split(' ').map(Number);
    assert.equal(pids.length, 2, r.stdout);
    assert.ok(pids.every((pid) => pid > 0 && !dead(pid)), `not running: ${pids}`);
    // Meanwhile a second MCP session has one call that outlasts the TTL:
    // a session with a call in flight is not idle, and its idle time
    // starts again when the call is answered.
    const busyTransport = new StreamableHTTPClientTransport(endpoint,
      { requestInit: { headers: auth } });
    busy = new Client({ name: 'cordon-test-busy', version: '1.0.0' });
    await withTimeout(busy.connect(busyTransport), 'initialize the busy MCP session');
    const longCall = call(busy, 'run', { command: `sleep ${(2 * TTL_MS) / 1000}`,
      isolation: 'none' });
    const view = async () => (await fetch(`${url}/v1/sessions/${s.id}`, { headers: auth })).json();
    await poll(async () => {
      assert.equal((await fetch(endpoint, { headers: auth })).status, 405);
      return (await view()).state === 'closed';
    }, `session ${s.id} to be closed with its expired MCP session`);
    assert.ok(Date.now() - lastRequest >= TTL_MS, 'the MCP session ended before its TTL');
    const long = ok(await withTimeout(longCall, 'the call that outlasts the TTL'), 'long run');
    assert.equal(long.exit_code, 0, JSON.stringify(long));
    assert.equal((await fetch(endpoint, { headers: auth })).status, 405);  // Expire looks again
    assert.ok((await withTimeout(busy.listTools(), 'tools/list after the long call')).tools.length,
      'the busy MCP session was ended');
    await poll(() => pids.every(dead), `the session's processes ${pids} to die`);
    const res = await fetch(endpoint, { method: 'POST',
      headers: { ...auth, 'Content-Type': 'application/json',
        Accept: 'application/json, text/event-stream', 'Mcp-Session-Id': sessionId },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }) });
    assert.equal(res.status, 404, 'an expired Mcp-Session-Id');
    assert.match((await res.json()).error.message, /expired/);
    await poll(() => events(() => fs.readFileSync(logPath, 'utf8')).some((x) =>
      x.event === 'mcp_session_closed' && x.session_id === s.id), 'mcp_session_closed logged');
  } catch (error) {
    error.message += `\n--- the daemon's log ---\n${logTail()}`;
    throw error;
  }
  await client.close().catch(() => {});
  if (busy) await busy.close().catch(() => {});
  daemon.kill('SIGTERM');
  const how = await withTimeout(exited, 'the daemon to stop');
  assert.deepEqual(how, { code: 0, signal: null }, `the daemon's exit:\n${logTail()}`);
  const log = fs.readFileSync(logPath, 'utf8');
  for (const mark of SANITIZER_MARKS) assert.ok(!log.includes(mark), `a sanitizer report:\n${log}`);
});

// At --mcp-max-sessions MCP sessions, an initialize ends the least
// recently used one, as its TTL would; a request in an existing session
// ends none. A bad value is refused before the daemon starts.
testCase('Streamable HTTP: past --mcp-max-sessions the least recently used is ended', async () => {
  const untouched = path.join(os.tmpdir(), `cordon-mcp-cap-refused-${process.pid}`);
  for (const bad of ['0', '-1', 'many']) {
    const r = spawnSync(BINARY, ['serve', '--state-dir', untouched, '--listen', '127.0.0.1:0',
      '--mcp-max-sessions', bad], { encoding: 'utf8', timeout: TIMEOUT_MS });
    assert.notEqual(r.status, 0, `--mcp-max-sessions ${bad} was taken`);
    assert.match(r.stderr, /--mcp-max-sessions: /, r.stderr);
    assert.ok(!fs.existsSync(untouched), `--mcp-max-sessions ${bad} made the state directory`);
  }
  const { url, token, daemon, exited, logPath, logTail } =
    await startServe('cap', ['--mcp-max-sessions', '2']);
  const endpoint = new URL(`${url}/mcp`);
  const auth = { Authorization: `Bearer ${token}` };
  const connect = async (name) => {
    const transport = new StreamableHTTPClientTransport(endpoint,
      { requestInit: { headers: auth } });
    const client = new Client({ name, version: '1.0.0' });
    await withTimeout(client.connect(transport), `initialize ${name}`);
    return { client, transport };
  };
  const tools = async (c, what) =>
    assert.ok((await withTimeout(c.client.listTools(), what)).tools.length, what);
  const clients = [];
  try {
    const a = await connect('cordon-test-a');
    clients.push(a);
    const s = ok(await call(a.client, 'session_create', { kind: 'shell', isolation: 'none' }),
      'session_create');
    const b = await connect('cordon-test-b');
    clients.push(b);
    // Two sessions, the cap: requests in them end neither.
    for (let i = 0; i < 3; i++) await tools(b, `tools/list in b (${i})`);
    await tools(a, 'tools/list in a, after b\'s');
    await tools(b, 'tools/list in b, after a\'s');
    // A third: a, the least recently used, is ended, with its cordon session.
    const c = await connect('cordon-test-c');
    clients.push(c);
    const res = await fetch(endpoint, { method: 'POST',
      headers: { ...auth, 'Content-Type': 'application/json',
        Accept: 'application/json, text/event-stream', 'Mcp-Session-Id': a.transport.sessionId },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }) });
    assert.equal(res.status, 404, 'the evicted Mcp-Session-Id');
    const view = async () => (await fetch(`${url}/v1/sessions/${s.id}`, { headers: auth })).json();
    await poll(async () => (await view()).state === 'closed',
      `session ${s.id} to be closed with its evicted MCP session`);
    await tools(b, 'tools/list in b after the eviction');
    await tools(c, 'tools/list in c');
    const evicted = events(() => fs.readFileSync(logPath, 'utf8'))
      .filter((x) => x.event === 'mcp_session_evicted');
    assert.equal(evicted.length, 1, JSON.stringify(evicted));
    assert.equal(evicted[0].max_sessions, 2);
  } catch (error) {
    error.message += `\n--- the daemon's log ---\n${logTail()}`;
    throw error;
  }
  for (const c of clients) await c.client.close().catch(() => {});
  daemon.kill('SIGTERM');
  const how = await withTimeout(exited, 'the daemon to stop');
  assert.deepEqual(how, { code: 0, signal: null }, `the daemon's exit:\n${logTail()}`);
  const log = fs.readFileSync(logPath, 'utf8');
  for (const mark of SANITIZER_MARKS) assert.ok(!log.includes(mark), `a sanitizer report:\n${log}`);
});

test('cordon mcp over stdio and Streamable HTTP', { concurrency: true }, async (t) => {
  await Promise.all(cases.map(([name, fn]) => t.test(name, fn)));
});
