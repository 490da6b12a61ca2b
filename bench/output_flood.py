#!/usr/bin/python3
"""Output flood against `cordon serve` (issue 11): a run and a python
kernel each print 2 GB; the daemon's memory stays bounded and the client
gets truncated output that says so.

Each case runs against a daemon of its own (so that VmHWM, the kernel's
record of the daemon's peak resident memory, is that case's alone), with the
default limits (output_limit_bytes 10 MiB). The daemon's VmRSS is sampled
every 20 ms as well, and read once more a second after the case.

  run, text            POST /v1/runs `yes | head -c 2G`
  run, text, NDJSON    the same with Accept: application/x-ndjson, read promptly
  run, NDJSON, stalled the same, the client reading nothing until the run is over
  run, NUL bytes       `head -c 2G /dev/zero` (not in the verdict: JSON
                       writes each NUL as 6 bytes, so the 10 MiB kept are a
                       60 MiB answer)
  kernel exec, lines   a python session's exec printing 2048 lines of 1 MiB
  kernel exec, loop    print(i, 'x' * 90) twenty million times (2 GB)
  kernel exec, 100 MB  one message of 100 MB, over the 64 MiB a kernel may send:
                       the connection is reset, the output is cut and flagged
  websocket, no reads  the Jupyter channels of a kernel printing 2 GB, by a
                       client that never reads (SO_RCVBUF 4 KiB): the daemon
                       disconnects it (ws_slow_reader) and the kernel goes on

Targets (issue 11): peak under 64 MiB for the runs and kernel executions,
each flagged truncated; under 256 MiB with the websocket client that never
reads, which is disconnected while its kernel goes on.

Usage: bench/output_flood.py [--only NAME-PREFIX]
(CORDON_BINARY names the binary; default build/cordon.)"""
import argparse
import http.client
import json
import os
import socket
import sys
import tempfile
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
sys.path.insert(0, os.path.join(ROOT, "clients", "python"))

import websocket  # noqa: E402  (python3-websocket)

from daemon_support import (  # noqa: E402
    Daemon,
    PeakSampler,
    proc_status,
    remove_bench_leftovers,
    store_query,
)
from kernel_gateway import Gateway  # noqa: E402

CORDON = os.environ.get("CORDON_BINARY", os.path.join(ROOT, "build", "cordon"))
MiB = 1 << 20
GB2 = 2 << 30
RUN_TARGET = 64 * MiB
WS_TARGET = 256 * MiB


class Http:
    """One keep-alive connection to the daemon, with the token."""

    def __init__(self, daemon, timeout=600):
        u = urllib.parse.urlsplit(daemon.url)
        self.conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
        self.token = daemon.token

    def request(self, method, path, body=None, headers=None):
        h = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}
        h.update(headers or {})
        self.conn.request(method, path, body=None if body is None else json.dumps(body), headers=h)
        return self.conn.getresponse()

    def json(self, method, path, body=None):
        r = self.request(method, path, body)
        data = r.read()
        if r.status >= 300:
            raise RuntimeError(f"{method} {path}: {r.status} {data[:500]!r}")
        return json.loads(data)

    def close(self):
        self.conn.close()


def mib(n):
    return f"{n / MiB:7.1f}"


# --- the cases: each gets a fresh daemon, returns what the client saw ---

def run_plain(daemon, shell):
    c = Http(daemon)
    r = c.json("POST", "/v1/runs", {"shell": shell, "limits": {"timeout_ms": 300000}})
    c.close()
    return {"truncated": r["stdout_truncated"], "kept": len(r["stdout"]),
            "produced": r["stdout_bytes"], "outcome": r["outcome"]}


def run_streamed(daemon, shell, stall):
    c = Http(daemon)
    r = c.request("POST", "/v1/runs", {"shell": shell, "limits": {"timeout_ms": 300000}},
                  {"Accept": "application/x-ndjson"})
    if stall:
        # Reads nothing until the run is over (its grant released), then
        # everything at once.
        assert wait_released(daemon, timeout=300), "the run did not end within 300 s"
    streamed, last, pending = 0, None, b""
    while True:
        chunk = r.read1(1 << 20)
        if not chunk:
            break
        *lines, pending = (pending + chunk).split(b"\n")
        for line in lines:
            event = json.loads(line)
            if event.get("type") in ("stdout", "stderr"):
                streamed += len(event["data"])
            else:
                last = event
    c.close()
    return {"truncated": last["stdout_truncated"], "kept": streamed,
            "produced": last["stdout_bytes"], "outcome": last["outcome"]}


def wait_released(daemon, timeout):
    """Waits until the store shows a released grant (the run is over)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if store_query(daemon.state_dir, "SELECT count(*) FROM grants WHERE state='released'")[0][0]:
                return True
        except Exception:  # noqa: BLE001  (not yet created, or busy)
            pass
        time.sleep(0.1)
    return False


def python_session(daemon, sid="flood"):
    c = Http(daemon)
    c.json("POST", "/v1/sessions", {"kind": "python", "id": sid})
    return c


def kernel_exec(c, code, sid="flood"):
    r = c.json("POST", f"/v1/sessions/{sid}/exec", {"code": code, "timeout_ms": 300000})
    return {"truncated": r["truncated"], "kept": len(r["stdout"]) + len(r["stderr"]),
            "produced": None, "outcome": r["status"] + (" (invalidated)" if r["invalidated"] else ""),
            "tail": r["stdout"][-160:].strip()}


LINES = "import sys\ns = 'x' * ((1 << 20) - 1)\nfor i in range(2048): print(s, flush=True)"
LOOP = "for i in range(20_000_000): print(i, 'x' * 90)"
# One stream message of 100 MB, written the way ipykernel's own OutStream
# sends one (its session, on its I/O thread's socket), past the chunking.
HUGE = ("import sys\nout = sys.stdout\n"
        "out.session.send(out.pub_thread, 'stream', content={'name': 'stdout', "
        "'text': 'x' * (100 << 20)}, parent=out.parent_header, ident=out.topic)\n"
        "import time; time.sleep(1)\nprint('after')")


def websocket_never_reads(daemon, timeout=600):
    gw = Gateway(daemon.url, daemon.token)
    k = gw.create_kernel()
    kid = k["id"]
    deadline = time.monotonic() + 60
    while gw.kernel(kid).json()["execution_state"] != "idle":
        assert time.monotonic() < deadline, "the kernel did not become idle"
        time.sleep(0.05)
    ws = websocket.create_connection(
        gw.channels_url(kid), header=[f"Authorization: token {daemon.token}"],
        sockopt=((socket.SOL_SOCKET, socket.SO_RCVBUF, 4096),), timeout=60)
    gw.send_execute(ws, LINES)
    started = time.monotonic()
    # The execution goes on after the client is cut off: until idle again.
    busy_seen = False
    while time.monotonic() - started < timeout:
        state = gw.kernel(kid).json()["execution_state"]
        busy_seen |= state == "busy"
        if (busy_seen and state == "idle") or state == "dead":
            break
        time.sleep(0.2)
    took = time.monotonic() - started
    model = gw.kernel(kid).json()
    with open(daemon.log_path, "rb") as f:
        log = f.read().decode(errors="replace")
    ws.close()
    return {"truncated": "ws_slow_reader" in log, "kept": None, "produced": None,
            "outcome": f"kernel {model['execution_state']} after {took:.0f} s, "
                       f"{model['connections']} connections",
            "kernel_ok": model["execution_state"] == "idle"}


CASES = [
    # name, target (None: informational), what to run, needs a python session
    ("run, text", RUN_TARGET, lambda d, c: run_plain(d, "yes | head -c 2G")),
    ("run, text, NDJSON", RUN_TARGET, lambda d, c: run_streamed(d, "yes | head -c 2G", False)),
    ("run, NDJSON, stalled", RUN_TARGET, lambda d, c: run_streamed(d, "yes | head -c 2G", True)),
    ("run, NUL bytes", None, lambda d, c: run_plain(d, "head -c 2G /dev/zero")),
    ("kernel exec, lines", RUN_TARGET, lambda d, c: kernel_exec(c, LINES)),
    ("kernel exec, loop", RUN_TARGET, lambda d, c: kernel_exec(c, LOOP)),
    ("kernel exec, 100 MB", RUN_TARGET, lambda d, c: kernel_exec(c, HUGE)),
    ("websocket, no reads", WS_TARGET, lambda d, c: websocket_never_reads(d)),
]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", help="run only the cases whose name starts with this")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="cordon-bench-flood.")
    cgroup_root = f"/cordon-bench-flood-{os.getpid()}"
    rows, failures = [], []
    try:
        print(f"== output flood: {CORDON}, defaults (output_limit_bytes 10 MiB), "
              f"a daemon per case")
        print(f"{'case':22} {'start':>7} {'before':>7} {'peak':>7} {'sampled':>7} {'after':>7}"
              f"  (MiB)  truncated  kept / produced, outcome")
        for i, (name, target, fn) in enumerate(CASES):
            if args.only and not name.startswith(args.only):
                continue
            d = Daemon(os.path.join(work, f"d{i}", "state"), cgroup_root=cgroup_root,
                       binary=CORDON)
            c = None
            try:
                start = proc_status(d.pid)["VmRSS"]
                if name.startswith("kernel"):
                    c = python_session(d)
                    c.json("POST", "/v1/sessions/flood/exec", {"code": "1+1"})
                before = proc_status(d.pid)["VmRSS"]
                sampler = PeakSampler(d.pid)
                t = time.monotonic()
                seen = fn(d, c)
                took = time.monotonic() - t
                sampled = sampler.stop()
                peak = proc_status(d.pid)["VmHWM"]
                time.sleep(1)
                after = proc_status(d.pid)["VmRSS"]
            finally:
                if c is not None:
                    c.close()
                status = d.stop()
            kept = "-" if seen["kept"] is None else f"{seen['kept'] / MiB:.1f} MiB"
            produced = "" if seen["produced"] is None else f" / {seen['produced'] / MiB:.0f} MiB"
            flag = ("disconnected" if name.startswith("websocket") else "yes") if seen["truncated"] \
                else "NO"
            print(f"{name:22} {mib(start)} {mib(before)} {mib(peak)} {mib(sampled)} {mib(after)}"
                  f"         {flag:9}  {kept}{produced}, {seen['outcome']}, {took:.1f} s")
            if seen.get("tail"):
                print(f"{'':22} stdout ends: {seen['tail'][-120:]!r}")
            rows.append((name, peak))
            if status != 0:
                failures.append(f"{name}: the daemon exited {status}")
            if target is None:
                continue
            if peak >= target:
                failures.append(f"{name}: peak {peak / MiB:.1f} MiB >= {target / MiB:.0f} MiB")
            if not seen["truncated"]:
                failures.append(f"{name}: not flagged truncated" if not name.startswith("websocket")
                                else f"{name}: the client was not disconnected (ws_slow_reader)")
            if name.startswith("websocket") and not seen.get("kernel_ok"):
                failures.append(f"{name}: the kernel did not go on ({seen['outcome']})")
    finally:
        remove_bench_leftovers(work, cgroup_root)
    print("peak: VmHWM at the end of the case; sampled: the largest VmRSS seen every 20 ms;"
          " after: VmRSS 1 s later")
    if failures:
        print("VERDICT: NOT MET: " + "; ".join(failures))
        return 1
    print(f"VERDICT: MET: every run and kernel execution peaked under {RUN_TARGET // MiB} MiB "
          f"and was flagged truncated; the non-reading websocket client was disconnected under "
          f"{WS_TARGET // MiB} MiB while its kernel went on")
    return 0


if __name__ == "__main__":
    sys.exit(main())
