// What the client tests (tests/clients/*/*.mjs) share: their pinned npm
// packages, found where `make jsclients` installed them; the test's cgroup
// trees; a real `cordon serve` on 127.0.0.1:0 with its own state directory
// and cgroup root, only ever signalled by its pid; and waits that always
// have a deadline. Node's standard library only.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';

// Every wait is bounded by this; generous, since the daemon may be an
// AddressSanitizer build (2-3x slower).
export const TIMEOUT_MS = Number(process.env.CORDON_CLIENT_TIMEOUT_MS || 60000);
// What a sanitizer writes into a daemon's log: a test fails on any of them.
export const SANITIZER_MARKS = ['ERROR: AddressSanitizer', 'runtime error:',
  'ERROR: LeakSanitizer', 'double free', 'Sanitizer'];

// A `require` for the packages that `dir`/package.json pins, from the first
// NODE_PATH entry, once each installed version is checked to be the pinned
// one. (The version is read from the package's directory: not every package
// exports its package.json.)
export function loadPinned(dir) {
  const wanted = JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8')).dependencies;
  const modules = (process.env.NODE_PATH || '').split(path.delimiter).find(Boolean);
  const name = path.basename(dir);
  const hint = `run \`make jsclients\` (it installs tests/clients/${name}/package-lock.json ` +
    `into build/clients/${name}/node_modules) and point NODE_PATH there`;
  if (!modules) throw new Error(`NODE_PATH is not set: ${hint}`);
  for (const [pkg, version] of Object.entries(wanted)) {
    let found;
    try {
      found = JSON.parse(fs.readFileSync(path.join(modules, pkg, 'package.json'), 'utf8')).version;
    } catch {
      throw new Error(`${pkg} is not installed in ${modules}: ${hint}`);
    }
    if (found !== version) {
      throw new Error(`${pkg} ${found} is installed in ${modules}, package.json pins ${version}: ${hint}`);
    }
  }
  return createRequire(path.join(path.resolve(modules), 'cordon-client-test.cjs'));
}

// Where the cgroup hierarchies are mounted (v1 and v2).
export function cgroupMounts() {
  const mounts = [];
  for (const line of fs.readFileSync('/proc/self/mountinfo', 'utf8').split('\n')) {
    const [left, right] = line.split(' - ');
    if (right && ['cgroup', 'cgroup2'].includes(right.split(' ')[0])) {
      mounts.push(left.split(' ')[4]);
    }
  }
  return mounts;
}

// Removes the test's cgroup trees, leaves first; a group whose last task is
// still being reaped refuses rmdir (EBUSY) for a moment, so this retries.
// Returns what is still there.
export async function removeCgroupRoot(root, withinMs = 5000) {
  const removeTree = (dir) => {
    let entries;
    try {
      entries = fs.readdirSync(dir, { withFileTypes: true });
    } catch {
      return;
    }
    for (const e of entries) if (e.isDirectory()) removeTree(path.join(dir, e.name));
    try {
      fs.rmdirSync(dir);
    } catch { /* busy or not empty: retried */ }
  };
  const deadline = Date.now() + withinMs;
  for (;;) {
    const left = [];
    for (const mount of cgroupMounts()) {
      removeTree(mount + root);
      if (fs.existsSync(mount + root)) left.push(mount + root);
    }
    if (left.length === 0 || Date.now() >= deadline) return left;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

// `cordon serve` ($CORDON_BINARY) on 127.0.0.1:0; `name` names its
// directory and cgroup root.
// `check()`'s first truthy value (it may be async), polled every 50 ms; a
// rejection naming `what` after `withinMs`.
export async function poll(check, what, withinMs = TIMEOUT_MS) {
  const deadline = Date.now() + withinMs;
  for (;;) {
    const got = await check();
    if (got) return got;
    if (Date.now() >= deadline) throw new Error(`timed out after ${withinMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

// /proc/PID is gone, or a zombie (dead, not yet reaped by its parent).
export function dead(pid) {
  try {
    return fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].startsWith('Z');
  } catch {
    return true;
  }
}

// The first `count` pids a command wrote to `file`, one per line, once it
// has written them.
export function pidsIn(file, count) {
  return poll(() => {
    try {
      const pids = fs.readFileSync(file, 'utf8').split('\n').filter(Boolean).map(Number);
      return pids.length >= count ? pids : false;
    } catch {
      return false;
    }
  }, `${count} pids in ${file}`);
}

// ipykernel aborts what reaches it right after an error (stop_on_error,
// with no grace in Debian 12's 6.17), and a restart or an interrupt can
// leave one behind: a request that arrives in that window is answered
// 'aborted' and never runs. A client sends it again, as JupyterLab's users
// do: `send()` again (bounded) while its reply says so.
export async function unaborted(send) {
  let out = await send();
  for (let tries = 0; out.reply.status === 'aborted' && tries < 50; ++tries) {
    console.log('ipykernel aborted a request (stop_on_error); sent again');
    out = await send();
  }
  return out;
}

// Disposes @jupyterlab/services managers for good. @lumino/polling's
// Poll.dispose() leaves its next tick's timer armed (the tick only checks
// for disposal when it fires), which holds node's event loop, and so the
// test process, up to a poll interval after the last test: 61 s for the
// kernelspec manager. The pinned version keeps that timer in `_timeout`.
export function disposeManagers(...managers) {
  for (const manager of managers) {
    if (!manager) continue;
    const polls = Object.values(manager).filter((value) => value?.constructor?.name === 'Poll');
    manager.dispose();
    for (const poll of polls) clearTimeout(poll._timeout);
  }
}

// `cordon serve` and `cordon mcp` allowing isolation none: the tests that
// ask for it watch the run's processes from the host (pid files in a host
// directory), and are about the doors, not the sandbox.
export const NO_ISOLATION_ALLOWED = ['--min-isolation', 'none'];

export class Daemon {
  // `extra`: more of cordon serve's options.
  constructor(name, extra = []) {
    this.extra = extra;
    this.binary = process.env.CORDON_BINARY || 'build/cordon';
    this.dir = fs.mkdtempSync(path.join(os.tmpdir(), `cordon-${name}-`));
    this.stateDir = path.join(this.dir, 'state');
    this.logPath = path.join(this.dir, 'daemon.log');
    this.cgroupRoot = `/cordon-test-${name}-${process.pid}`;
    this.exit = null;  // {code, signal} once it exited
    this.exited = new Promise(() => {});  // resolves with `exit` once started
    this.stopping = false;
  }

  async start() {
    assert.ok(fs.existsSync(this.binary), `CORDON_BINARY ${this.binary} does not exist`);
    const log = fs.openSync(this.logPath, 'a');
    this.proc = spawn(this.binary, ['serve', '--state-dir', this.stateDir,
      '--listen', '127.0.0.1:0', '--cgroup-root', this.cgroupRoot, ...this.extra],
    { stdio: ['ignore', 'ignore', log] });
    fs.closeSync(log);
    this.exited = new Promise((resolve) => {
      this.proc.on('exit', (code, signal) => {
        this.exit = { code, signal };
        resolve(this.exit);
      });
    });
    // serve.json is written once the daemon answers (after recovery).
    const serve = path.join(this.stateDir, 'serve.json');
    await this.poll(() => {
      if (this.exit) throw new Error(`the daemon exited at start ${this.describeExit()}`);
      try {
        const info = JSON.parse(fs.readFileSync(serve, 'utf8'));
        if (info.pid !== this.proc.pid) return false;
        this.url = info.urls[0];
        this.token = fs.readFileSync(info.token_file, 'utf8').split('\n')[0].trim();
        return true;
      } catch {
        return false;
      }
    }, 'serve.json from the daemon');
  }

  describeExit() {
    if (!this.exit) return '(running)';
    const how = this.exit.signal ? `killed by ${this.exit.signal}` : `exit status ${this.exit.code}`;
    return `(${how}); its log ${this.logPath} ends:\n${this.logTail()}`;
  }

  logTail(lines = 40) {
    try {
      return fs.readFileSync(this.logPath, 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
    } catch {
      return '(no log)';
    }
  }

  assertAlive() {
    assert.equal(this.exit, null, `the daemon died during the test ${this.describeExit()}`);
  }

  // After a daemon that died or had to be killed: its kernels are torn down
  // by `cordon reap` on its state directory (as a restart would).
  reap() {
    return new Promise((resolve) => {
      const reaper = spawn(this.binary, ['reap', '--state-dir', this.stateDir], { stdio: 'inherit' });
      const timer = setTimeout(() => reaper.kill('SIGKILL'), TIMEOUT_MS);
      reaper.on('exit', () => { clearTimeout(timer); resolve(); });
    });
  }

  // SIGTERM to the daemon we started (by its pid), then its exit status; if
  // it does not exit, SIGKILL, `cordon reap`, and a failure.
  async stop() {
    this.stopping = true;
    if (!this.exit) this.proc.kill('SIGTERM');
    let timer;
    const timeout = new Promise((resolve) => { timer = setTimeout(resolve, TIMEOUT_MS, null); });
    const status = await Promise.race([this.exited, timeout]);
    clearTimeout(timer);
    if (!status) {
      this.proc.kill('SIGKILL');
      await this.exited;
      await this.reap();
      throw new Error(`the daemon did not exit within ${TIMEOUT_MS} ms of SIGTERM; ` +
        `its log ${this.logPath} ends:\n${this.logTail()}`);
    }
    return status;
  }

  // `promise`, or a rejection naming `what` after `ms`, or as soon as the
  // daemon dies (unless it is being stopped).
  within(promise, what, ms = TIMEOUT_MS) {
    let timer;
    const timeout = new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what}: nothing within ${ms} ms`)), ms);
    });
    const died = this.exited.then(() => {
      if (!this.stopping) throw new Error(`${what}: the daemon died ${this.describeExit()}`);
      return new Promise(() => {});
    });
    return Promise.race([promise, timeout, died]).finally(() => clearTimeout(timer));
  }

  // Polls `condition` (every 20 ms) until it returns true, within TIMEOUT_MS.
  poll(condition, what) {
    return this.within(new Promise((resolve, reject) => {
      const check = async () => {
        try {
          if (await condition()) return resolve();
        } catch (error) {
          return reject(error);
        }
        setTimeout(check, 20);
      };
      check();
    }), what);
  }
}
