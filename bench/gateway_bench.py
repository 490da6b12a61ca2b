#!/usr/bin/python3
"""Kernel Gateway benchmarks, side by side in one run (bench/run.sh calls
this), with the same Debian ipykernel behind every server:

  - Debian's jupyter-server (python3-jupyter-server), the reference;
  - `cordon serve`, cold (each kernel started on create);
  - `cordon serve --prespawn 2`, warm (a started kernel handed out);
  - a direct ZeroMQ client to a kernel (build/bench/zmq_direct): the floor.

Each server is driven the way Kernel Gateway clients drive it
(tests/integration/kernel_gateway.py: requests, a new websocket per
execution, execute_request v5.3, complete on execute_reply and idle).
Measured, medians:

  create       POST /api/kernels until its 201
  first        from that POST until the first `1+1` answered "2"
  new ws       a `1+1` round trip with a new websocket (connect included)
  open ws      a `1+1` round trip over one websocket kept open

Round trips take turns between the servers (one sample of each in turn),
so drift of the machine during the run hits them alike. Then the issue's
targets as ratios. cordon's parts print "not available" when the daemon
does not serve /api.

Usage: gateway_bench.py [BUILD_DIR] [--runs N] [--creates N]
       gateway_bench.py --url URL --token T [--runs N]   (one gateway alone)
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
from daemon_support import Daemon, remove_cgroup_root  # noqa: E402
from kernel_gateway import Gateway, JupyterServer  # noqa: E402

NA = "not available"


def ms(seconds):
    return seconds * 1000.0


class Subject:
    """One server under test: its gateway client and what was measured."""

    def __init__(self, key, name, gw, stop, warm_pause=0.0):
        self.key = key
        self.name = name
        self.gw = gw
        self.stop = stop
        self.warm_pause = warm_pause
        self.create, self.first, self.new_ws, self.open_ws = [], [], [], []
        self.state_at_201 = set()  # execution_state of the models the 201s carried
        self.kernel = None
        self.ws = None

    def measure_creates(self, n):
        """n kernels: create, first result, delete. The last one is kept
        for the round trips."""
        for i in range(n):
            if self.warm_pause:
                # The pool refills in the background; give it the time to, so
                # that each create measures a warm hand-out (there is no
                # public signal of a full pool to wait on).
                time.sleep(self.warm_pause)
            t0 = time.perf_counter()
            r = self.gw.request("POST", "/api/kernels", {"name": "python3"})
            created = time.perf_counter()
            assert r.status_code == 201, (self.name, r.status_code, r.text)
            kernel = r.json()["id"]
            self.state_at_201.add(r.json().get("execution_state"))
            first = self.gw.wait_ready(kernel, within=120)
            done = time.perf_counter()
            assert first.text == "2"
            self.create.append(ms(created - t0))
            self.first.append(ms(done - t0))
            if i < n - 1:
                assert self.gw.delete(kernel).status_code == 204
            else:
                self.kernel = kernel

    def one_new_ws(self):
        t = time.perf_counter()
        assert self.gw.execute(self.kernel, "1+1").text == "2"
        self.new_ws.append(ms(time.perf_counter() - t))

    def one_open_ws(self):
        if self.ws is None:
            # A session id of its own: jupyter-server closes an older websocket
            # of the same session when the new-websocket executions connect.
            self.ws = self.gw.connect(self.kernel, session_id=uuid.uuid4().hex)
        t = time.perf_counter()
        assert self.gw.execute_on(self.ws, "1+1").text == "2"
        self.open_ws.append(ms(time.perf_counter() - t))

    def close(self):
        if self.ws is not None:
            self.ws.close()
        if self.kernel is not None:
            self.gw.delete(self.kernel)
        self.stop()


def median(samples):
    return statistics.median(samples) if samples else None


def cell(value, width, digits=2):
    return f"{value:{width}.{digits}f}" if value is not None else f"{'-':>{width}}"


def start_cordon(cordon, work, name, *extra):
    """A daemon, or (None, reason) when it cannot serve the gateway."""
    root = f"/cordon-bench-gw-{os.getpid()}-{name}"
    try:
        d = Daemon(os.path.join(work, name, "state"), *extra, cgroup_root=root, binary=cordon)
    except (RuntimeError, TimeoutError):
        remove_cgroup_root(root)
        with open(os.path.join(work, name, "daemon.log"), errors="replace") as f:
            said = (f.read().strip().splitlines() or ["(nothing)"])[-1]
        return None, f"the daemon did not start with {' '.join(extra) or 'no options'}: {said}"

    def stop():
        d.stop()
        remove_cgroup_root(root)

    gw = Gateway(d.url, d.token, timeout=120)
    try:
        served = gw.api().status_code == 200
    except Exception:  # noqa: BLE001 (whatever it is, the gateway is not there)
        served = False
    if not served:
        stop()
        return None, "this cordon does not serve GET /api"
    return (gw, stop), None


def zmq_floor(build, runs):
    binary = os.path.join(build, "bench", "zmq_direct")
    if not os.access(binary, os.X_OK):
        return None, f"{binary} is missing (cmake --build {build} --target zmq_direct)"
    out = subprocess.run([binary, str(runs)], capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        return None, f"zmq_direct failed ({out.returncode}): {out.stderr.strip()}"
    return json.loads(out.stdout), None


def report(subjects, unavailable, floor, floor_problem, runs, creates):
    print(f"== Kernel Gateway: create, first result, `1+1` round trips "
          f"(medians; {creates} creates, {runs} round trips each, taking turns)")
    print(f"{'':34} {'create ms':>10} {'first ms':>10} {'new ws ms':>10} {'open ws ms':>11}")
    for s in subjects:
        print(f"{s.name:34} {cell(median(s.create), 10)} {cell(median(s.first), 10)} "
              f"{cell(median(s.new_ws), 10)} {cell(median(s.open_ws), 11)}")
    for name, why in unavailable:
        print(f"{name:34} {NA} ({why})")
    if floor:
        print(f"{'direct ZeroMQ client (the floor)':34} {cell(floor['create_ms'], 10)} "
              f"{cell(floor['first_result_ms'], 10)} {cell(None, 10)} "
              f"{cell(floor['round_trip_ms'], 11, 3)}")
    else:
        print(f"{'direct ZeroMQ client (the floor)':34} {NA} ({floor_problem})")

    for s in subjects:
        if "starting" in s.state_at_201:
            print(f"({s.name} answered 201 with execution_state "
                  f"{', '.join(sorted(map(str, s.state_at_201)))}: its create does not wait "
                  f"for the kernel; 'first' does)")
    by = {s.key: s for s in subjects}
    jupyter, cold, warm = by.get("jupyter"), by.get("cold"), by.get("warm")
    print("targets (create alone compares a 201 that means ready with one that may not; "
          "create to first result compares the same thing):")

    def verdict(ok):
        return "met" if ok else "NOT met"

    if cold and jupyter:
        ratio = median(cold.new_ws) / median(jupyter.new_ws)
        print(f"  round trip, new websocket: cordon / jupyter-server = {ratio:.3f} "
              f"(target <= 0.2: {verdict(ratio <= 0.2)})")
        c, j = median(cold.create), median(jupyter.create)
        print(f"  cold create: cordon {c:.1f} ms, jupyter-server {j:.1f} ms, ratio {c / j:.2f} "
              f"(target <= 1: {verdict(c <= j)})")
        c, j = median(cold.first), median(jupyter.first)
        print(f"  cold create to first result: cordon {c:.1f} ms, jupyter-server {j:.1f} ms, "
              f"ratio {c / j:.2f}")
    else:
        print(f"  round trip and cold create against jupyter-server: {NA}")
    if cold and floor:
        ratio = median(cold.open_ws) / floor["round_trip_ms"]
        print(f"  round trip, open websocket: cordon / direct ZeroMQ = {ratio:.3f} "
              f"(target <= 1.10: {verdict(ratio <= 1.10)})")
    else:
        print(f"  round trip over an open websocket against direct ZeroMQ: {NA}")
    if warm:
        w = median(warm.first)
        print(f"  warm create to first result: {w:.1f} ms (target < 50 ms: {verdict(w < 50)}); "
              f"create alone {median(warm.create):.1f} ms")
    else:
        print(f"  warm create to first result: {NA}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("build", nargs="?", default="build")
    p.add_argument("--runs", type=int, default=int(os.environ.get("GATEWAY_RUNS", 30)))
    p.add_argument("--creates", type=int, default=int(os.environ.get("GATEWAY_CREATES", 5)))
    p.add_argument("--warm-pause", type=float, default=3.0,
                   help="seconds between warm creates, for the pool to refill")
    p.add_argument("--url", help="bench this one gateway instead")
    p.add_argument("--token")
    a = p.parse_args()

    work = tempfile.mkdtemp(prefix="cordon-bench-gw.")
    subjects, unavailable = [], []
    try:
        if a.url:
            subjects.append(Subject("url", a.url, Gateway(a.url, a.token, timeout=120),
                                    lambda: None))
        else:
            server = JupyterServer(os.path.join(work, "jupyter-server"))
            version = Gateway(server.url, server.token).api().json()["version"]
            subjects.append(Subject("jupyter", f"jupyter-server {version}",
                                    Gateway(server.url, server.token, timeout=120), server.stop))
            cordon = os.path.abspath(os.path.join(a.build, "cordon"))
            for key, label, extra, pause in (
                    ("cold", "cordon (cold)", (), 0.0),
                    ("warm", "cordon --prespawn 2 (warm)", ("--prespawn", "2"), a.warm_pause)):
                started, why = start_cordon(cordon, work, key, *extra)
                if started:
                    subjects.append(Subject(key, label, *started, warm_pause=pause))
                else:
                    unavailable.append((label, why))
        for s in subjects:
            s.measure_creates(a.creates)
        for _ in range(3):  # warm-up, not counted
            for s in subjects:
                s.one_new_ws()
                s.one_open_ws()
        for s in subjects:
            s.new_ws.clear()
            s.open_ws.clear()
        for _ in range(a.runs):
            for s in subjects:
                s.one_new_ws()
            for s in subjects:
                s.one_open_ws()
    finally:
        for s in subjects:
            s.close()
        shutil.rmtree(work, ignore_errors=True)
    floor, floor_problem = (None, "not asked (--url)") if a.url else zmq_floor(a.build, a.runs)
    report(subjects, unavailable, floor, floor_problem, a.runs, a.creates)


if __name__ == "__main__":
    main()
