#!/usr/bin/python3
"""Soak of `cordon serve` (issue 11): 10,000 runs, plus 2,000 shell execs
over 50 sessions, plus 200 python kernel create/exec/delete cycles, from 4
concurrent clients, and what the daemon holds before and after.

One daemon with its defaults (isolation standard, the default limits) on
loopback. After a warm-up (200 runs, a shell session, two kernel cycles)
the daemon is measured; then the work, shuffled, is shared by the clients
(each task checks its answer); then the 50 sessions are deleted, the daemon
is given up to 10 s to be quiet, and it is measured again:

  descriptors   /proc/<daemon>/fd
  RSS, threads  /proc/<daemon>/status
  processes     the daemon's live descendants; zombies among its children
  cgroups       directories beneath the cgroup root, in every hierarchy,
                and the processes in them
  id leases     /run/cordon/ids/*.lock (as root) held by anyone (/proc/locks)
  records       grants still active; sessions starting, ready or busy
  store         cordon.db, cordon.db-wal

The slack: descriptors +4, RSS +16 MiB, threads +2, WAL +4 MiB; nothing
else may grow (processes, zombies, cgroups, leases, active records: 0 more).
The store's database grows by the records it keeps (there is no retention):
its growth is printed per record, not counted as a leak.

Usage: bench/soak.py [--quick] [--clients N]
  --quick: a tenth of the work (1,000 runs, 200 execs, 20 kernel cycles).
(CORDON_BINARY names the binary; default build/cordon.)"""
import argparse
import os
import random
import shutil
import sys
import tempfile
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
sys.path.insert(0, os.path.join(ROOT, "clients", "python"))

from daemon_support import (  # noqa: E402
    Daemon,
    cgroups_beneath,
    children_of,
    descendants,
    held_id_leases,
    open_fds,
    pids_in_cgroup_tree,
    proc_status,
    remove_cgroup_root,
    store_files,
    store_query,
    unmount_beneath,
    zombies_among,
)

CORDON = os.environ.get("CORDON_BINARY", os.path.join(ROOT, "build", "cordon"))
MiB = 1 << 20
SESSIONS = 50
# name: (slack, unit divisor, unit)
SLACK = {
    "descriptors": (4, 1, ""),
    "rss": (16 * MiB, MiB, " MiB"),
    "threads": (2, 1, ""),
    "processes": (0, 1, ""),
    "zombies": (0, 1, ""),
    "cgroups": (0, 1, ""),
    "pids_in_cgroups": (0, 1, ""),
    "id_leases_held": (0, 1, ""),
    "active_grants": (0, 1, ""),
    "live_sessions": (0, 1, ""),
    "store_wal": (4 * MiB, MiB, " MiB"),
}


def snapshot(d, cgroup_root):
    pid = d.pid
    status = proc_status(pid)
    files = store_files(d.state_dir)
    return {
        "descriptors": open_fds(pid),
        "rss": status.get("VmRSS", 0),
        "threads": int(status.get("Threads", 0)),
        "processes": len(descendants(pid)),
        "zombies": len(zombies_among(children_of(pid))),
        "cgroups": len(cgroups_beneath(cgroup_root)),
        "pids_in_cgroups": len(pids_in_cgroup_tree(cgroup_root)),
        "id_leases_held": len(held_id_leases(d.state_dir)),
        "active_grants": store_query(d.state_dir,
                                     "SELECT count(*) FROM grants WHERE state = 'active'")[0][0],
        "live_sessions": store_query(
            d.state_dir,
            "SELECT count(*) FROM sessions WHERE state IN ('starting', 'ready', 'busy')")[0][0],
        "store_db": files.get("cordon.db", 0),
        "store_wal": files.get("cordon.db-wal", 0),
        "records": store_query(d.state_dir, "SELECT count(*) FROM grants")[0][0]
        + store_query(d.state_dir, "SELECT count(*) FROM sessions")[0][0],
    }


def quiet(d, cgroup_root, within=10.0):
    """Waits until nothing of the work is left running (or `within` passed)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not descendants(d.pid) and not cgroups_beneath(cgroup_root):
            break
        time.sleep(0.1)
    time.sleep(1.0)  # what the loop frees after its last answer


class Work:
    """The shared, shuffled task list, and what went wrong."""

    def __init__(self, tasks):
        self.tasks = tasks
        self.next = 0
        self.done = 0
        self.lock = threading.Lock()
        self.errors = []

    def take(self):
        with self.lock:
            if self.next >= len(self.tasks):
                return None
            self.next += 1
            return self.tasks[self.next - 1]

    def finished(self, error=None):
        with self.lock:
            self.done += 1
            if error:
                self.errors.append(error)


def do_task(client, task):
    kind, n = task
    if kind == "run":
        r = client.run(argv=["/bin/echo", f"soak-{n}"])
        assert r["outcome"] == "exited" and r["stdout"] == f"soak-{n}\n", r
        assert r["release"]["dead"], r["release"]
    elif kind == "exec":
        r = client.request("POST", f"/v1/sessions/s-{n % SESSIONS}/exec", {"command": f"echo {n}"})
        assert r["stdout"] == f"{n}\n" and r["exit_code"] == 0, r
    elif kind == "kernel":
        sid = f"k-{n}"
        client.request("POST", "/v1/sessions", {"kind": "python", "id": sid})
        try:
            r = client.request("POST", f"/v1/sessions/{sid}/exec", {"code": f"print({n}); 6*7"})
            assert r["status"] == "ok" and r["stdout"] == f"{n}\n", r
            assert r["results"][0]["data"]["text/plain"] == "42", r
        finally:
            client.request("DELETE", f"/v1/sessions/{sid}")


def worker(client, work):
    while True:
        task = work.take()
        if task is None:
            return
        try:
            do_task(client, task)
            work.finished()
        except Exception as e:  # noqa: BLE001  (every failure is counted and shown)
            work.finished(f"{task}: {type(e).__name__}: {str(e)[:300]}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a tenth of the work")
    parser.add_argument("--clients", type=int, default=4)
    args = parser.parse_args()
    scale = 10 if args.quick else 1
    runs, execs, kernels = 10000 // scale, 2000 // scale, 200 // scale

    work_dir = tempfile.mkdtemp(prefix="cordon-bench-soak.")
    cgroup_root = f"/cordon-bench-soak-{os.getpid()}"
    d = None
    status = None
    try:
        d = Daemon(os.path.join(work_dir, "state"), cgroup_root=cgroup_root, binary=CORDON)
        client = d.client()
        print(f"== soak: {runs} runs, {execs} shell execs over {SESSIONS} sessions, {kernels} "
              f"python kernel cycles, {args.clients} clients; {CORDON}")
        # Warm-up: every kind of work once, so that what is measured after is
        # what the work left, not what a first use allocates.
        for n in range(200):
            do_task(client, ("run", n))
        s = client.session("warm")
        s.exec("echo warm")
        s.close()
        for n in range(2):
            do_task(client, ("kernel", 10 ** 6 + n))
        quiet(d, cgroup_root)
        before = snapshot(d, cgroup_root)

        started = time.monotonic()
        for i in range(SESSIONS):
            client.session(f"s-{i}")
        tasks = ([("run", n) for n in range(runs)] + [("exec", n) for n in range(execs)]
                 + [("kernel", n) for n in range(kernels)])
        random.Random(11).shuffle(tasks)
        work = Work(tasks)
        threads = [threading.Thread(target=worker, args=(client, work), daemon=True)
                   for _ in range(args.clients)]
        for t in threads:
            t.start()
        peak_rss = peak_fds = 0
        last_report = time.monotonic()
        while any(t.is_alive() for t in threads):
            time.sleep(0.5)
            peak_rss = max(peak_rss, proc_status(d.pid).get("VmRSS", 0))
            peak_fds = max(peak_fds, open_fds(d.pid))
            if time.monotonic() - last_report > 30:
                last_report = time.monotonic()
                print(f"  {work.done}/{len(tasks)} done after {last_report - started:.0f} s, "
                      f"RSS {proc_status(d.pid).get('VmRSS', 0) / MiB:.1f} MiB, "
                      f"{open_fds(d.pid)} descriptors, {len(work.errors)} errors", flush=True)
        for i in range(SESSIONS):
            client.request("DELETE", f"/v1/sessions/s-{i}")
        took = time.monotonic() - started
        quiet(d, cgroup_root)
        after = snapshot(d, cgroup_root)

        print(f"work: {len(tasks)} tasks in {took:.1f} s ({len(tasks) / took:.0f}/s), "
              f"{len(work.errors)} failed; during it: peak RSS {peak_rss / MiB:.1f} MiB, "
              f"peak descriptors {peak_fds}")
        for e in work.errors[:10]:
            print(f"  failed: {e}")
        print(f"{'':18} {'before':>12} {'after':>12} {'growth':>12} {'slack':>10}")
        leaks = []
        for name, (slack, div, unit) in SLACK.items():
            grew = after[name] - before[name]
            ok = grew <= slack
            print(f"{name:18} {before[name] / div:12.1f} {after[name] / div:12.1f} "
                  f"{grew / div:+12.1f} {slack / div:9.1f}{unit:4} {'ok' if ok else 'OVER'}")
            if not ok:
                leaks.append(f"{name} {grew / div:+.1f}{unit} (slack {slack / div:.0f}{unit})")
        records = after["records"] - before["records"]
        db_growth = after["store_db"] - before["store_db"]
        per_record = db_growth / records if records else 0
        print(f"{'store_db':18} {before['store_db'] / MiB:12.1f} {after['store_db'] / MiB:12.1f} "
              f"{db_growth / MiB:+12.1f}  MiB for {records} new records "
              f"({per_record:.0f} bytes each; records are kept: no retention)")
    except Exception:
        traceback.print_exc()
        print("VERDICT: NOT MET: the soak did not complete")
        return 1
    finally:
        if d is not None and d.proc.poll() is None:
            status = d.stop()
        mounted = unmount_beneath(work_dir)
        left = remove_cgroup_root(cgroup_root)
        shutil.rmtree(work_dir, ignore_errors=True)
        if left or mounted:
            print(f"(left behind after the daemon stopped: cgroups {left}, mounts {mounted})")
    if status != 0:
        leaks.append(f"the daemon exited {status} at SIGTERM")
    if work.errors:
        leaks.append(f"{len(work.errors)} tasks failed")
    if leaks:
        print("VERDICT: NOT MET: " + "; ".join(leaks))
        return 1
    print(f"VERDICT: MET: {len(tasks)} tasks, none failed; no growth beyond the slack "
          f"(descriptors {after['descriptors'] - before['descriptors']:+d}, "
          f"RSS {(after['rss'] - before['rss']) / MiB:+.1f} MiB, nothing left running, no "
          f"cgroup, lease or active record left); the store grew {db_growth / MiB:.1f} MiB "
          f"with {records} records kept")
    return 0


if __name__ == "__main__":
    sys.exit(main())
