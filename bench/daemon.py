"""Daemon benchmarks, side by side in one run (bench/run.sh calls this):

  1. a session exec round trip of `echo hi` over HTTP (keep-alive),
     a one-shot POST /v1/runs of /bin/true, and `cordon run -- /bin/true`
     from the CLI (posix_spawn + wait);
  2. session create-to-ready (POST /v1/sessions answers once the shell is
     ready), each followed by a DELETE: a warm create (a shell from the
     pool, --prespawn-shells, on by default), a cold one under the same
     isolation (a request that declares env), and one without isolation
     (issue 16, item 1: target at most 2 ms); then POST /v1/runs under
     standard isolation warm (a sandbox of --prespawn-runs' pool) and cold,
     interleaved with `bwrap --unshare-all /bin/true` (issue 16, item 1:
     warm at most 0.5x bwrap);
  3. runs per second against concurrent clients (1, 2, 4, 8), and how busy
     both cores were;
  4. a session exec round trip while 4 clients run /bin/true (what the
     loop's other work costs an interactive session), and while a client
     creates and closes sessions, warm and cold;
  5. runs per second from 4 clients with the daemon pinned to one core and
     to two (`taskset -c 0`, `taskset -c 0,1`: a daemon started under it, so
     whatever it spawns inherits the pinning; the clients are not pinned),
     and the ratio 2 cores / 1 core (issue 16, item 2: target 1.7x); beside
     it the same ratio for 4 loops of bare /bin/true and of bwrap pinned the
     same way, with no daemon at all: the host's own ceilings for making
     processes and sandboxes.

Each under the default isolation (standard) and under `isolation: none`.
--json FILE writes every sample and figure there (bench/plots.py reads it).

Usage: daemon.py CORDON_BINARY [ROUNDS] [--json FILE]
(THROUGHPUT_SECONDS, default 5, is the length of each throughput figure;
CLIENTS, default "1 2 4 8", the sweep.)"""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "clients", "python"))
from cordon_client import Client  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("cordon")
parser.add_argument("rounds", nargs="?", type=int, default=300)
parser.add_argument("--json", help="write the samples and figures here")
args = parser.parse_args()
cordon = os.path.abspath(args.cordon)
rounds = args.rounds
work = tempfile.mkdtemp(prefix="cordon-bench-daemon.")
state = os.path.join(work, "state")
cgroup_root = f"/cordon-bench-{os.getpid()}"
out = {"rounds": rounds, "latency_ms": {}, "create_ms": {}, "clients": {}, "cores": {}}


def start_daemon(state, prefix=()):
    """`cordon serve` (after `prefix`, say taskset) on a free loopback port:
    (process, serve.json)."""
    proc = subprocess.Popen([*prefix, cordon, "serve", "--state-dir", state, "--listen",
                             "127.0.0.1:0", "--cgroup-root", cgroup_root, "--max-runs", "64",
                             "--min-isolation", "none"],  # runs without isolation are measured
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(3000):
        try:
            info = json.load(open(os.path.join(state, "serve.json")))
            if info["pid"] == proc.pid:
                return proc, info
        except (OSError, ValueError):
            pass
        if proc.poll() is not None:
            sys.exit(f"the daemon exited at start ({proc.returncode})")
        time.sleep(0.01)
    sys.exit("the daemon did not start within 30 s")


daemon, info = start_daemon(state)
url = info["urls"][0]
client = Client(url, token_file=info["token_file"])


def timed(fn, n):
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t) * 1000)
    return samples


def row(name, samples, store=None):
    if store is not None:
        store[name] = samples
    s = sorted(samples)
    p90 = s[int(len(s) * 0.9)]
    print(f"{name:44} {statistics.median(s):9.3f} {p90:9.3f} {s[0]:9.3f}   (n={len(s)})")
    return statistics.median(s)


def cli_true(level):
    pid = os.posix_spawn(cordon, [cordon, "run", "--state-dir", state + "-cli", "--isolation", level,
                                  "--cgroup-root", cgroup_root, "--", "/bin/true"], os.environ)
    os.waitpid(pid, 0)


LEVELS = ("standard", "none")
sessions = {level: client.session(f"bench-{level}", isolation=level) for level in LEVELS}
for _ in range(50):  # warm-up
    for level in LEVELS:
        sessions[level].exec("echo hi")
        client.run(argv=["/bin/true"], isolation=level)
        cli_true(level)

print(f"== daemon: round trips, {rounds} each, interleaved warm-up, keep-alive HTTP on loopback")
print(f"{'':44} {'median ms':>9} {'p90':>9} {'min':>9}")
for level in LEVELS:
    exec_ms = row(f"session exec `echo hi` (HTTP, {level})",
                  timed(lambda: sessions[level].exec("echo hi"), rounds), out["latency_ms"])
    run_ms = row(f"POST /v1/runs /bin/true (HTTP, {level})",
                 timed(lambda: client.run(argv=["/bin/true"], isolation=level), rounds),
                 out["latency_ms"])
    cli_ms = row(f"cordon run -- /bin/true (CLI, {level})", timed(lambda: cli_true(level), rounds),
                 out["latency_ms"])
    print(f"  {level}: exec round trip vs one-shot HTTP run: {exec_ms / run_ms:.2f}; "
          f"HTTP run vs CLI run: {run_ms / cli_ms:.2f}")

print()
n = max(20, rounds // 6)
print(f"== session create-to-ready ({n} each, each closed after)")
CREATES = (("standard, warm (from the pool)", {"isolation": "standard"}, True),
           ("standard, cold (declares env)", {"isolation": "standard", "env": {"X": "1"}}, False),
           ("none, cold", {"isolation": "none"}, False))
for c, (name, kwargs, want_warm) in enumerate(CREATES):
    create, wrong = [], 0
    for i in range(n):
        # Untimed: a warm create waits for the pool to have refilled.
        while want_warm and client.health()["shells_warm"] == 0:
            time.sleep(0.002)
        t = time.perf_counter()
        s = client.session(f"c{i}-{c}", **kwargs)
        create.append((time.perf_counter() - t) * 1000)
        wrong += s.info["spec"].get("warm", False) != want_warm
        s.close()
    median = row(f"POST /v1/sessions ({name})", create, out["create_ms"])
    if wrong:
        print(f"  {wrong} of {n} were not {'warm' if want_warm else 'cold'} as meant")
    if want_warm:
        print(f"  target: at most 2 ms: {'met' if median <= 2 else 'NOT met'}")

print()
n = max(50, rounds // 2)
BWRAP = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-all",
         "--die-with-parent", "/bin/true"]


def bwrap_true():
    pid = os.posix_spawnp(BWRAP[0], BWRAP, os.environ)
    os.waitpid(pid, 0)


# `make bench` installs bwrap; a bench run alone may find none.
have_bwrap = shutil.which(BWRAP[0]) is not None and subprocess.run(
    BWRAP, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0
print(f"== POST /v1/runs /bin/true under standard isolation, warm and cold, beside "
      f"`bwrap --unshare-all` (whole process), interleaved, {n} each")
samples = {"warm": [], "cold": [], "bwrap": []}
wrong = 0
for i in range(n):
    # Untimed: a warm run waits for the pool to have refilled.
    while client.health()["runs_warm"] == 0:
        time.sleep(0.002)
    t = time.perf_counter()
    r = client.run(argv=["/bin/true"])
    samples["warm"].append((time.perf_counter() - t) * 1000)
    wrong += not r["warm"]
    t = time.perf_counter()
    # Cold: a run that declares its memory limit (the default's value) is
    # launched on request.
    r = client.run(argv=["/bin/true"], limits={"memory_bytes": 1 << 30})
    samples["cold"].append((time.perf_counter() - t) * 1000)
    wrong += r["warm"]
    if have_bwrap:
        t = time.perf_counter()
        bwrap_true()
        samples["bwrap"].append((time.perf_counter() - t) * 1000)
out["warm_runs_ms"] = samples
warm_ms = row("POST /v1/runs, warm (from the pool)", samples["warm"])
cold_ms = row("POST /v1/runs, cold (declares its memory)", samples["cold"])
if wrong:
    print(f"  {wrong} runs were not warm or cold as meant")
if have_bwrap:
    bwrap_ms = row("bwrap --unshare-all /bin/true", samples["bwrap"])
    ratio = warm_ms / bwrap_ms
    out["warm_vs_bwrap"] = ratio
    print(f"  warm / bwrap = {ratio:.2f}x, cold / bwrap = {cold_ms / bwrap_ms:.2f}x "
          f"(issue 16's target: warm at most 0.5x: {'met' if ratio <= 0.5 else 'NOT met'})")
else:
    print("  (bwrap does not run here: no ratio)")


def cpu_busy():
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


print()
duration = float(os.environ.get("THROUGHPUT_SECONDS", "5"))
sweep = [int(n) for n in os.environ.get("CLIENTS", "1 2 4 8").split()]
ncpu = os.cpu_count()
hz = os.sysconf("SC_CLK_TCK")


def ticks(path):
    with open(path) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def throughput(proc, info, level, clients):
    """Runs of /bin/true per second from `clients` threads, one keep-alive
    connection each, for `duration` s: (runs/s, machine busy %, the daemon's
    loop thread in % of a core, the whole daemon in % of a core)."""
    counts = [0] * clients
    stop = time.monotonic() + duration

    def worker(i):
        c = Client(info["urls"][0], token_file=info["token_file"])
        while time.monotonic() < stop:
            r = c.run(argv=["/bin/true"], isolation=level)
            assert r["release"]["dead"]
            counts[i] += 1

    busy0, total0 = cpu_busy()
    loop0, all0 = ticks(f"/proc/{proc.pid}/task/{proc.pid}/stat"), ticks(f"/proc/{proc.pid}/stat")
    t0 = time.monotonic()
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - t0
    busy1, total1 = cpu_busy()
    loop1, all1 = ticks(f"/proc/{proc.pid}/task/{proc.pid}/stat"), ticks(f"/proc/{proc.pid}/stat")
    return {"runs_per_s": sum(counts) / elapsed, "runs": sum(counts),
            "busy_pct": 100 * (busy1 - busy0) / (total1 - total0),
            "loop_pct": 100 * (loop1 - loop0) / hz / elapsed,
            "daemon_pct": 100 * (all1 - all0) / hz / elapsed}


def line(label, r):
    # The loop's CPU per run: what one thread spends on each, whatever the
    # rate (the loop is the daemon's one serial part).
    per_run = 10 * r["loop_pct"] / r["runs_per_s"] if r["runs_per_s"] else float("nan")
    print(f"{label:34} {r['runs_per_s']:7.0f} {r['busy_pct']:7.0f}% {r['loop_pct']:9.0f}% "
          f"{r['daemon_pct']:9.0f}% {per_run:9.2f}")


header = (f"{'':34} {'runs/s':>7} {'busy':>8} {'loop':>10} {'daemon':>10} "
          f"{'loop ms/run':>12}")
print(f"== throughput: POST /v1/runs /bin/true, {duration:.0f} s each; busy: the machine "
      f"({ncpu} cores); loop: the daemon's event-loop thread, daemon: all its threads "
      f"(% of one core); loop ms/run: the loop's CPU time per run")
print(header)
for level in LEVELS:
    out["clients"][level] = {}
    for n in sweep:
        r = throughput(daemon, info, level, n)
        out["clients"][level][n] = r
        line(f"{level}, {n} client{'s' if n > 1 else ''}", r)

# What the loop's other work costs a session while runs keep it busy: the
# exec round trip with 4 clients running /bin/true meanwhile (runs'
# workspaces are removed and the store checkpointed off the loop).
print()
print(f"== session exec `echo hi` while 4 clients run /bin/true ({duration:.0f} s, standard)")
print(f"{'':44} {'median ms':>9} {'p90':>9} {'min':>9}")
loaded = []
load_stop = time.monotonic() + duration


def loader():
    c = Client(info["urls"][0], token_file=info["token_file"])
    while time.monotonic() < load_stop:
        c.run(argv=["/bin/true"])


loaders = [threading.Thread(target=loader) for _ in range(4)]
for t in loaders:
    t.start()
while time.monotonic() < load_stop:
    t = time.perf_counter()
    sessions["standard"].exec("echo hi")
    loaded.append((time.perf_counter() - t) * 1000)
for t in loaders:
    t.join()
out["under_load_ms"] = {}
row("session exec under 4 clients' runs", loaded, out["under_load_ms"])
loaded.sort()
print(f"  p99 {loaded[min(len(loaded) - 1, int(len(loaded) * 0.99))]:.2f} ms, "
      f"{len(loaded) / duration:.0f} execs/s")

# What session churn costs another session: its exec round trip while one
# client creates and closes sessions back to back, warm (the defaults: a
# shell of the pool, which refills) and cold (an environment of its own).
# Each has a workspace bounded by the daemon's default disk bound, a loop
# image made and removed on a worker (issue 16, item 2).
print()
print(f"== session exec `echo hi` while a client creates and closes sessions "
      f"({duration:.0f} s each, standard)")
print(f"{'':44} {'median ms':>9} {'p90':>9} {'min':>9}")
out["under_churn_ms"] = {}
for label, extra in (("warm", {}), ("cold", {"env": {"CHURN": "1"}})):
    churned = []
    made = [0]
    churn_stop = time.monotonic() + duration

    def churner():
        c = Client(info["urls"][0], token_file=info["token_file"])
        while time.monotonic() < churn_stop:
            c.session(**extra).close()
            made[0] += 1

    churn = threading.Thread(target=churner)
    churn.start()
    while time.monotonic() < churn_stop:
        t = time.perf_counter()
        sessions["standard"].exec("echo hi")
        churned.append((time.perf_counter() - t) * 1000)
    churn.join()
    row(f"session exec under {label} creates+closes", churned, out["under_churn_ms"])
    churned.sort()
    print(f"  p99 {churned[min(len(churned) - 1, int(len(churned) * 0.99))]:.2f} ms, "
          f"{made[0] / duration:.0f} sessions/s")

for session in sessions.values():
    session.close()
daemon.send_signal(signal.SIGTERM)
daemon.wait(timeout=60)

# The daemon pinned: started under taskset, so whatever it spawns (every
# sandbox) inherits the pinning; the clients are not pinned.
print()
print(f"== throughput against cores: 4 clients, the daemon under `taskset -c 0` and "
      f"`taskset -c 0,1`, {duration:.0f} s each")
print(header)
pins = [("1 core", "0"), ("2 cores", "0,1")] if ncpu >= 2 else [("1 core", "0")]
for level in LEVELS:
    out["cores"][level] = {}
    for label, cpus in pins:
        proc, pinned = start_daemon(os.path.join(work, f"state-{level}-{cpus}"),
                                    ("taskset", "-c", cpus))
        try:
            Client(pinned["urls"][0], token_file=pinned["token_file"]).run(
                argv=["/bin/true"], isolation=level)  # warm-up
            r = throughput(proc, pinned, level, 4)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
        out["cores"][level][label] = r
        line(f"{level}, taskset -c {cpus}", r)


def loops_rate(spawn, cpus):
    """`spawn()` per second from 4 loops, each on a thread pinned to `cpus`
    (so is whatever it spawns), with no daemon: what this host gives any
    process maker on those cores."""
    counts = [0] * 4
    stop = time.monotonic() + duration

    def worker(i):
        os.sched_setaffinity(0, {int(c) for c in cpus.split(",")})  # this thread
        while time.monotonic() < stop:
            spawn()
            counts[i] += 1

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts) / (time.monotonic() - t0)


def bare_true():
    pid = os.posix_spawn("/bin/true", ["/bin/true"], os.environ)
    os.waitpid(pid, 0)


# The host's own ceilings: 4 loops of bare /bin/true (no sandbox at all),
# and of bwrap. Where the host's process creation does not scale (a VM
# whose page-table updates go through its hypervisor), no daemon can.
controls = [("bare", bare_true, "bare /bin/true")]
if have_bwrap:
    controls.append(("bwrap", bwrap_true, "bwrap"))
for key, spawn, label in controls:
    out["cores"][key] = {}
    for cores, cpus in pins:
        rate = loops_rate(spawn, cpus)
        out["cores"][key][cores] = {"runs_per_s": rate}
        print(f"{label + ', taskset -c ' + cpus:34} {rate:7.0f}")
for level in (*LEVELS, *(key for key, _, _ in controls)):
    c = out["cores"].get(level, {})
    if "2 cores" in c:
        ratio = c["2 cores"]["runs_per_s"] / c["1 core"]["runs_per_s"]
        c["ratio"] = ratio
        note = {"standard": f" (issue 16's target >= 1.7x: {'met' if ratio >= 1.7 else 'NOT met'})",
                "bare": " (the host's own: no sandbox, no daemon, 4 loops of /bin/true)",
                "bwrap": " (the host's own for sandboxes: no daemon, 4 loops of bwrap)"}
        print(f"{level}: 2 cores / 1 core = {ratio:.2f}x{note.get(level, '')}")
if args.json:
    with open(args.json, "w") as f:
        json.dump(out, f)
subprocess.run(["rm", "-rf", work])
with open("/proc/self/mountinfo") as f:
    mounts = [l.split(" - ")[0].split(" ")[4] for l in f if " - cgroup" in l]
for m in mounts:
    path = m + cgroup_root
    for root, dirs, _ in os.walk(path, topdown=False):
        for d in dirs:
            try:
                os.rmdir(os.path.join(root, d))
            except OSError:
                pass
    try:
        os.rmdir(path)
    except OSError:
        pass
