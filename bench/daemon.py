"""Daemon benchmarks, side by side in one run (bench/run.sh calls this):

  1. a session exec round trip of `echo hi` over HTTP (keep-alive),
     a one-shot POST /v1/runs of /bin/true, and `cordon run -- /bin/true`
     from the CLI (posix_spawn + wait);
  2. session create-to-ready (POST /v1/sessions answers once the shell is
     ready), each followed by a DELETE;
  3. runs per second with 4 concurrent clients, and how busy both cores were.

Each under the default isolation (standard) and under `isolation: none`.

Usage: daemon.py CORDON_BINARY [ROUNDS]"""
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "clients", "python"))
from cordon_client import Client  # noqa: E402

cordon = os.path.abspath(sys.argv[1])
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 300
work = tempfile.mkdtemp(prefix="cordon-bench-daemon.")
state = os.path.join(work, "state")
cgroup_root = f"/cordon-bench-{os.getpid()}"

daemon = subprocess.Popen([cordon, "serve", "--state-dir", state, "--listen", "127.0.0.1:0",
                           "--cgroup-root", cgroup_root, "--max-runs", "64"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
for _ in range(600):
    try:
        info = json.load(open(os.path.join(state, "serve.json")))
        if info["pid"] == daemon.pid:
            break
    except (OSError, ValueError):
        pass
    time.sleep(0.01)
url = info["urls"][0]
client = Client(url, token_file=info["token_file"])


def timed(fn, n):
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t) * 1000)
    return samples


def row(name, samples):
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
                  timed(lambda: sessions[level].exec("echo hi"), rounds))
    run_ms = row(f"POST /v1/runs /bin/true (HTTP, {level})",
                 timed(lambda: client.run(argv=["/bin/true"], isolation=level), rounds))
    cli_ms = row(f"cordon run -- /bin/true (CLI, {level})", timed(lambda: cli_true(level), rounds))
    print(f"  {level}: exec round trip vs one-shot HTTP run: {exec_ms / run_ms:.2f}; "
          f"HTTP run vs CLI run: {run_ms / cli_ms:.2f}")

print()
n = max(20, rounds // 6)
print(f"== session create-to-ready ({n} each, each closed after)")
for level in LEVELS:
    create = []
    for i in range(n):
        t = time.perf_counter()
        s = client.session(f"c{i}-{level}", isolation=level)
        create.append((time.perf_counter() - t) * 1000)
        s.close()
    row(f"POST /v1/sessions ({level}; answers when ready)", create)


def cpu_busy():
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


print()
duration = float(os.environ.get("THROUGHPUT_SECONDS", "5"))
clients = int(os.environ.get("CLIENTS", "4"))


def worker(i, level):
    c = Client(url, token_file=info["token_file"])
    while time.monotonic() < stop:
        r = c.run(argv=["/bin/true"], isolation=level)
        assert r["release"]["dead"]
        counts[i] += 1


def daemon_ticks():
    with open(f"/proc/{daemon.pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime of the loop's thread


for level in LEVELS:
    counts = [0] * clients
    stop = time.monotonic() + duration
    busy0, total0 = cpu_busy()
    d0 = daemon_ticks()
    t0 = time.monotonic()
    threads = [threading.Thread(target=worker, args=(i, level)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - t0
    busy1, total1 = cpu_busy()
    d1 = daemon_ticks()
    ncpu = os.cpu_count()
    print(f"== throughput ({level}): {clients} concurrent clients, POST /v1/runs /bin/true for {duration:.0f} s")
    print(f"runs per second: {sum(counts) / elapsed:.0f}  (total {sum(counts)}); "
          f"CPU busy: {100 * (busy1 - busy0) / (total1 - total0):.0f}% of {ncpu} cores; "
          f"the daemon's loop: {100 * (d1 - d0) / os.sysconf('SC_CLK_TCK') / elapsed:.0f}% of one core")

for session in sessions.values():
    session.close()
daemon.send_signal(signal.SIGTERM)
daemon.wait(timeout=60)
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
