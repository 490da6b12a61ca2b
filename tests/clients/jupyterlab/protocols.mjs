// Both kernel websocket protocols through JupyterLab's own client library,
// @jupyterlab/services (issue 14): `v1.kernel.websocket.jupyter.org`, which
// the library offers and cordon agrees to, and the default JSON protocol
// (with its binary form for messages with buffers), which the library
// speaks when the server agrees to no subprotocol (here: a WebSocket that
// offers none). In each: the KernelManager flow (start, execute, interrupt,
// restart then execute again, shutdown), a comm message with binary
// buffers both ways (the kernel echoes them through a comm target the test
// registers by executing code), and input() with allow_stdin.
//
// A real `cordon serve` ($CORDON_BINARY) on 127.0.0.1:0 with its own state
// directory and cgroup root, as in kernel_lifecycle.mjs; only that daemon is
// ever signalled, by its pid. At the end it gets SIGTERM and must exit 0.
//
//   ctest --test-dir build -R jupyterlab --output-on-failure
//   NODE_PATH=build/clients/jupyterlab/node_modules CORDON_BINARY=build/cordon \
//     node tests/clients/jupyterlab/protocols.mjs
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';

import {
  Daemon, disposeManagers, loadPinned, removeCgroupRoot, unaborted,
} from '../support.mjs';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const V1 = 'v1.kernel.websocket.jupyter.org';

function loadModules() {
  const require = loadPinned(HERE);
  return { services: require('@jupyterlab/services'), WebSocket: require('ws') };
}

let modules;
try {
  modules = loadModules();
} catch (error) {
  console.error(`not run: ${error.message}`);
  process.exit(1);
}
const { services, WebSocket } = modules;
const { KernelManager, ServerConnection } = services;
console.debug = () => {};  // the library's per-socket chatter

// A message the library could not validate is thrown from the websocket's
// message handler, outside any promise: collected, and each step fails on it.
const uncaught = [];
process.on('uncaughtException', (error) => {
  uncaught.push(error);
  console.error('uncaught exception (the client tripped over something):', error);
});
function assertNothingUncaught() {
  assert.deepEqual(uncaught.map(String), [], 'the client threw outside a promise');
}

// A WebSocket that offers no subprotocol: the library then speaks the
// default protocol (JSON text frames, binary ones for buffers).
class PlainWebSocket extends WebSocket {
  constructor(url, _protocols, options) {
    super(url, [], options);
  }
}

// --- the daemon ---------------------------------------------------------------

const daemon = new Daemon('jupyterlab-protocols');
const within = (promise, what, ms) => daemon.within(promise, what, ms);

function waitForStatus(kernel, status, what) {
  if (kernel.status === status) return Promise.resolve();
  return within(new Promise((resolve) => {
    const on = (_, s) => {
      if (s !== status) return;
      kernel.statusChanged.disconnect(on);
      resolve();
    };
    kernel.statusChanged.connect(on);
  }), `${what}: kernel status ${status} (it is ${kernel.status})`);
}

// One execute_request: its stream text, results and reply.
async function execute(kernel, code, { allowStdin = false, onStdin, onIOPub } = {}) {
  const out = { stdout: '', results: [], reply: null };
  const future = kernel.requestExecute({ code, allow_stdin: allowStdin, stop_on_error: true });
  future.onIOPub = (msg) => {
    if (msg.header.msg_type === 'stream') out.stdout += msg.content.text;
    if (msg.header.msg_type === 'execute_result') out.results.push(msg.content.data['text/plain']);
    if (onIOPub) onIOPub(msg, out);
  };
  if (onStdin) future.onStdin = onStdin;
  out.reply = (await within(future.done, `execute ${JSON.stringify(code)}`)).content;
  return out;
}

// The kernel's end of the comm: every comm_msg goes back, its data under
// "echo", its buffers as they came.
const ECHO_TARGET = [
  'def _cordon_echo(comm, open_msg):',
  '    @comm.on_msg',
  '    def _echo(msg):',
  "        comm.send(data={'echo': msg['content']['data']},",
  "                  buffers=[bytes(b) for b in msg.get('buffers') or []])",
  "get_ipython().kernel.comm_manager.register_target('cordon_echo', _cordon_echo)",
].join('\n');

function bytesOf(view) {
  return Buffer.from(view.buffer, view.byteOffset, view.byteLength);
}

// --- the scenario, once per protocol -----------------------------------------

before(async () => {
  await daemon.start();
});

after(async () => {
  if (!daemon.exit && daemon.proc) await daemon.stop().catch(() => {});
  await removeCgroupRoot(daemon.cgroupRoot);
});

for (const [protocol, socketClass] of [[V1, WebSocket], ['', PlainWebSocket]]) {
  const name = protocol || 'the default protocol';
  test(`${name}: start, execute, buffers both ways, input(), interrupt, restart, shutdown`,
    async (t) => {
      const settings = ServerConnection.makeSettings({
        baseUrl: daemon.url, token: daemon.token, WebSocket: socketClass, appendToken: true,
      });
      const manager = new KernelManager({ serverSettings: settings });
      t.after(() => disposeManagers(manager));
      await within(manager.ready, 'the kernel manager');
      const kernel = await within(manager.startNew({ name: 'python3' }), 'POST /api/kernels');
      t.after(() => kernel.dispose());
      await within(kernel.info, 'kernel_info_reply');
      assert.equal(kernel.connectionStatus, 'connected');
      // What the server agreed to, as the library sees it.
      assert.equal(kernel._ws.protocol, protocol, 'the negotiated subprotocol');

      const first = await execute(kernel, 'x = 6\nx * 7');
      assert.equal(first.reply.status, 'ok');
      assert.deepEqual(first.results, ['42']);

      // A comm with binary buffers, both ways.
      assert.equal((await execute(kernel, ECHO_TARGET)).reply.status, 'ok');
      const comm = kernel.createComm('cordon_echo');
      const echoed = new Promise((resolve) => { comm.onMsg = resolve; });
      await within(comm.open({}).done, 'comm_open');
      const sent = [new Uint8Array([0, 1, 2, 255]), new Uint8Array(70000).fill(7)];
      comm.send({ n: sent.length }, {}, sent, false);
      const echo = await within(echoed, 'the echoed comm_msg');
      assert.deepEqual(echo.content.data, { echo: { n: 2 } });
      assert.equal(echo.buffers.length, 2);
      for (let i = 0; i < sent.length; ++i) {
        assert.ok(bytesOf(echo.buffers[i]).equals(Buffer.from(sent[i])), `buffer ${i} came back changed`);
      }
      comm.close();

      // input() over stdin.
      const asked = [];
      const greeted = await execute(kernel, "name = input('who? ')\nprint('hello', name)", {
        allowStdin: true,
        onStdin: (msg) => {
          asked.push(msg.content.prompt);
          kernel.sendInputReply({ status: 'ok', value: 'cordon' }, msg.header);
        },
      });
      assert.deepEqual(asked, ['who? ']);
      assert.equal(greeted.reply.status, 'ok');
      assert.equal(greeted.stdout, 'hello cordon\n');

      // Interrupt a busy execution.
      let started;
      const busy = new Promise((resolve) => { started = resolve; });
      const spinning = execute(kernel, 'import time\nprint("spinning", flush=True)\ntime.sleep(100)', {
        onIOPub: (_, out) => { if (out.stdout.includes('spinning')) started(); },
      });
      await within(busy, 'the busy execution to start');
      await within(kernel.interrupt(), 'kernel.interrupt()');
      const interrupted = await spinning;
      assert.equal(interrupted.reply.status, 'error');
      assert.equal(interrupted.reply.ename, 'KeyboardInterrupt');

      // Restart: the same id, the state gone, and it executes again.
      const id = kernel.id;
      const statuses = [];
      kernel.statusChanged.connect((_, s) => statuses.push(s));
      await within(kernel.restart(), 'kernel.restart()');
      assert.equal(kernel.id, id);
      await waitForStatus(kernel, 'idle', 'after the restart');
      assert.ok(statuses.includes('restarting'), `statuses: ${statuses.join(' -> ')}`);
      const gone = await unaborted(() => execute(kernel, 'x'));
      assert.equal(gone.reply.status, 'error');
      assert.equal(gone.reply.ename, 'NameError');
      // Right after that error ipykernel aborts what reaches it
      // (stop_on_error): sent again, as JupyterLab's users do.
      const again = await unaborted(() => execute(kernel, 'y = 5\ny * 2'));
      assert.equal(again.reply.status, 'ok');
      assert.deepEqual(again.results, ['10']);
      assert.equal(kernel._ws.protocol, protocol, 'the subprotocol after the reconnection');

      await within(kernel.shutdown(), 'kernel.shutdown()');
      await within(manager.refreshRunning(), 'GET /api/kernels');
      assert.ok(![...manager.running()].some((m) => m.id === id), 'the kernel is still listed');
      assertNothingUncaught();
      assert.equal(daemon.exit, null, `the daemon died ${daemon.describeExit()}`);
    });
}

test('a raw ws client gets v1 only when it offers it', async () => {
  const model = await within(services.KernelAPI.startNew({ name: 'python3' },
    ServerConnection.makeSettings({ baseUrl: daemon.url, token: daemon.token, WebSocket })),
  'POST /api/kernels');
  const url = `${daemon.url.replace(/^http/, 'ws')}/api/kernels/${model.id}/channels?` +
    `session_id=raw-${process.pid}&token=${encodeURIComponent(daemon.token)}`;
  for (const [offered, agreed] of [[[V1], V1], [['something-else', V1], V1], [[], '']]) {
    const ws = new WebSocket(url, offered);
    await within(new Promise((resolve, reject) => {
      ws.on('open', resolve);
      ws.on('error', reject);
    }), `a websocket offering ${JSON.stringify(offered)}`);
    assert.equal(ws.protocol, agreed, `offered ${JSON.stringify(offered)}`);
    ws.close();
  }
  await within(services.KernelAPI.shutdownKernel(model.id,
    ServerConnection.makeSettings({ baseUrl: daemon.url, token: daemon.token, WebSocket })),
  'DELETE /api/kernels/{id}');
});

test('the daemon exits 0 on SIGTERM; its cgroups go', async () => {
  assert.equal(daemon.exit, null, `the daemon died ${daemon.describeExit()}`);
  const status = await daemon.stop();
  const log = fs.readFileSync(daemon.logPath, 'utf8');
  for (const mark of ['ERROR: AddressSanitizer', 'runtime error:', 'ERROR: LeakSanitizer']) {
    assert.ok(!log.includes(mark), `a sanitizer report in ${daemon.logPath}:\n${daemon.logTail()}`);
  }
  assert.deepEqual(status, { code: 0, signal: null },
    `cordon serve did not exit 0 on SIGTERM ${daemon.describeExit()}`);
  assert.deepEqual(await removeCgroupRoot(daemon.cgroupRoot), [], 'cgroups that could not be removed');
  fs.rmSync(daemon.dir, { recursive: true, force: true });
});
