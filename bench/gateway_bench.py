#!/usr/bin/python3
"""Kernel Gateway benchmarks, side by side in one run (bench/run.sh calls
this), with the same Debian ipykernel behind every server:

  - Debian's jupyter-server (python3-jupyter-server), the reference;
  - `cordon serve`, cold (each kernel started on create);
  - `cordon serve --prespawn 2`, warm (a started kernel handed out);
  - a direct ZeroMQ client to a kernel in Python (bench/zmq_direct.py,
    python3-zmq, signing and parsing each message as jupyter_client does):
    the floor, in the clients' own language, taking turns with the others;
  - the C++ direct client (build/bench/zmq_direct), printed for reference:
    timing the Python websocket client against it charged the gateway
    with the Python client's own per-message cost.

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

With --sandboxed (as root), the Python direct client also times a second
kernel of the cold daemon, sandboxed like the websocket's: the sandbox's
share of the gap apart from the relay's.

With --compare CORDON_BINARY, another cordon (say the build before a
change, copied aside with its cordon-serve) runs cold beside the first,
taking the same turns: before and after in one run.

Usage: gateway_bench.py [BUILD_DIR] [--runs N] [--creates N] [--compare CORDON] [--sandboxed]
                        [--json FILE]
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
from daemon_support import Daemon, remove_cgroup_root  # noqa: E402
from kernel_gateway import Gateway, JupyterServer  # noqa: E402
from zmq_direct import DirectKernel  # noqa: E402

NA = "not available"


def kernels_of(daemon_pid):
    """The ipykernel processes under a daemon (its descendants)."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, todo = set(), [daemon_pid]
    while todo:
        for child in children.get(todo.pop(), []):
            todo.append(child)
            try:
                with open(f"/proc/{child}/cmdline", "rb") as f:
                    if b"kernelapp" in f.read():
                        found.add(child)
            except OSError:
                pass
    return found


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
        # The bench process's own CPU per open-websocket round trip: the
        # client's work (frames, JSON, HMAC), which the servers' figures
        # include but which is not theirs.
        self.open_ws_cpu = []
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
        t, cpu = time.perf_counter(), time.process_time()
        assert self.gw.execute_on(self.ws, "1+1").text == "2"
        self.open_ws.append(ms(time.perf_counter() - t))
        self.open_ws_cpu.append(ms(time.process_time() - cpu))

    def close(self):
        if self.ws is not None:
            self.ws.close()
        if self.kernel is not None:
            self.gw.delete(self.kernel)
        self.stop()


class DirectSubject(Subject):
    """The Python direct ZeroMQ client: one kernel (create is until its
    kernel_info_reply), no websocket; its round trips take turns with the
    gateways' open-websocket ones."""

    def __init__(self, work, of=None):
        """`of`: a cordon Subject: a second kernel is created there, and
        this client attaches to it (its connection file) instead of
        starting a kernel of its own. A kernel of its own, with no
        websocket on it: the daemon then relays nothing while this client
        is timed, and the websocket's kernel sees none of its traffic."""
        key, name = ("direct", "direct ZeroMQ, Python (the floor)") if of is None else \
            ("sandboxed", "  the same, to cordon's kernel")
        super().__init__(key, name, None, lambda: None)
        self.work = work
        self.of = of
        self.direct = None

    def measure_creates(self, n):
        if self.of is not None:
            pid = self.of.gw.daemon_pid
            before = kernels_of(pid)
            r = self.of.gw.request("POST", "/api/kernels", {"name": "python3"})
            assert r.status_code == 201, (r.status_code, r.text)
            self.kernel = r.json()["id"]
            assert self.of.gw.wait_ready(self.kernel, within=120).text == "2"
            new = kernels_of(pid) - before
            if len(new) != 1:
                raise RuntimeError(f"cannot tell the new kernel among the processes {new}")
            # Its connection file and sockets as the sandbox sees them, through
            # its root (cordon's kernels read theirs at /run/cordon-kernel).
            where = f"/proc/{new.pop()}/root/run/cordon-kernel"
            with open(os.path.join(where, "connection.json")) as f:
                key = json.load(f)["key"]
            self.direct = DirectKernel(attach=(os.path.join(where, "k"), key))
            self.direct.wait_ready()
            assert self.direct.execute("1+1").text == "2"
            return
        self.direct = DirectKernel(os.path.join(self.work, "direct"))
        self.create.append(ms(self.direct.wait_ready()))
        assert self.direct.execute("1+1").text == "2"
        self.first.append(ms(time.perf_counter() - self.direct.started))

    def one_new_ws(self):
        pass

    def one_open_ws(self):
        t, cpu = time.perf_counter(), time.process_time()
        assert self.direct.execute("1+1").text == "2"
        self.open_ws.append(ms(time.perf_counter() - t))
        self.open_ws_cpu.append(ms(time.process_time() - cpu))

    def close(self):
        if self.direct is not None:
            self.direct.stop()
        if self.of is not None and self.kernel is not None:
            self.of.gw.delete(self.kernel)


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
    gw.daemon_pid = d.pid
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
        print(f"{'direct ZeroMQ, C++ (reference)':34} {cell(floor['create_ms'], 10)} "
              f"{cell(floor['first_result_ms'], 10)} {cell(None, 10)} "
              f"{cell(floor['round_trip_ms'], 11, 3)}")
    else:
        print(f"{'direct ZeroMQ, C++ (reference)':34} {NA} ({floor_problem})")

    for s in subjects:
        if "starting" in s.state_at_201:
            print(f"({s.name} answered 201 with execution_state "
                  f"{', '.join(sorted(map(str, s.state_at_201)))}: its create does not wait "
                  f"for the kernel; 'first' does)")
    by = {s.key: s for s in subjects}
    jupyter, cold, warm = by.get("jupyter"), by.get("cold"), by.get("warm")
    direct, compare, sandboxed = by.get("direct"), by.get("compare"), by.get("sandboxed")
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
    if cold and direct:
        ratio = median(cold.open_ws) / median(direct.open_ws)
        print(f"  round trip, open websocket: cordon / direct ZeroMQ (Python) = {ratio:.3f} "
              f"(target <= 1.10: {verdict(ratio <= 1.10)})")
        if compare:
            print(f"  the same for {compare.name}: "
                  f"{median(compare.open_ws) / median(direct.open_ws):.3f}")
        if sandboxed:
            r, k = (median(cold.open_ws) / median(sandboxed.open_ws),
                    median(sandboxed.open_ws) / median(direct.open_ws))
            print(f"  of which: the relay (cordon / direct to a kernel sandboxed alike) {r:.3f}, "
                  f"the sandbox (that kernel / an unsandboxed one, both direct) {k:.3f}")
        # Both clients are Python; the websocket one does more per message
        # (frame parse and unmasking in pure Python, as python3-websocket
        # does). What is left once that is taken out is the relay's own.
        ws_cpu, zmq_cpu = median(cold.open_ws_cpu), median(direct.open_ws_cpu)
        relay = median(cold.open_ws) - (ws_cpu - zmq_cpu)
        print(f"  the clients' own CPU per round trip: websocket {ws_cpu:.2f} ms, "
              f"ZeroMQ {zmq_cpu:.2f} ms; less that difference, cordon / direct = "
              f"{relay / median(direct.open_ws):.3f}")
        if floor:
            print(f"  (against the C++ client, not like for like: "
                  f"{median(cold.open_ws) / floor['round_trip_ms']:.3f})")
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
    p.add_argument("--sandboxed", action="store_true",
                   help="also time the Python direct client on a second kernel of the cold "
                        "daemon (sandboxed like the websocket's; root only): what the sandbox "
                        "does to the kernel, apart from the relay. Not like for like in this "
                        "crowd of servers: see docs/benchmarks.md")
    p.add_argument("--compare", metavar="CORDON",
                   help="another cordon binary (with its cordon-serve beside it), run cold "
                        "beside the build's: before and after a change in one run")
    p.add_argument("--json", metavar="FILE",
                   help="also write every sample (ms) of every server, and the C++ floor, to FILE "
                        "(bench/plots.py reads it)")
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
            runs = [("cold", "cordon (cold)", cordon, (), 0.0),
                    ("warm", "cordon --prespawn 2 (warm)", cordon, ("--prespawn", "2"),
                     a.warm_pause)]
            if a.compare:
                runs.insert(1, ("compare", f"{a.compare} (cold)"[-34:],
                                os.path.abspath(a.compare), (), 0.0))
            for key, label, binary, extra, pause in runs:
                started, why = start_cordon(binary, work, key, *extra)
                if started:
                    subjects.append(Subject(key, label, *started, warm_pause=pause))
                else:
                    unavailable.append((label, why))
            subjects.append(DirectSubject(work))
        for s in list(subjects):
            s.measure_creates(a.creates)
        if a.sandboxed:
            cold = next((s for s in subjects if s.key == "cold"), None)
            if cold is not None and os.geteuid() == 0:
                attached = DirectSubject(work, of=cold)
                attached.measure_creates(0)
                subjects.append(attached)
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
        for s in reversed(subjects):  # the attached client before its daemon
            s.close()
        shutil.rmtree(work, ignore_errors=True)
    floor, floor_problem = (None, "not asked (--url)") if a.url else zmq_floor(a.build, a.runs)
    report(subjects, unavailable, floor, floor_problem, a.runs, a.creates)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"runs": a.runs, "creates": a.creates,
                       "subjects": [{"key": s.key, "name": s.name, "create": s.create,
                                     "first": s.first, "new_ws": s.new_ws, "open_ws": s.open_ws}
                                    for s in subjects],
                       "unavailable": unavailable, "cpp_floor": floor}, f)


if __name__ == "__main__":
    main()
