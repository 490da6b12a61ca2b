#!/usr/bin/python3
"""Kill under load (issue 11): 4 clients do runs, shell execs and kernel
execs; the daemon is SIGKILLed at a random moment and started again on the
same state directory; 20 times.

The clients: one does short runs (`/bin/echo`) and now and then a long one
that leaves an escapee (`setsid sleep 300 &`); one streams runs that print
for a while (NDJSON); one does shell execs on 4 sessions (now and then
leaving an escapee in the session); one does kernel execs on a python
session (now and then starting a detached `sleep` from the kernel). After
3-8 s of that (uniform, seeded) the daemon is killed. Just before, every
process of the trees is recorded by (pid, start time): the daemon's
descendants and the members of every cgroup beneath the root (escapees
included), with the grants active in the store and the live sessions.

After every restart (before any new work), checked:
  - every process recorded before the kill is dead (its (pid, start time)
    no longer running);
  - every record is accounted for: each grant that was active is
    `released`, no grant is `active`, each live session is `lost`;
  - nothing is left: no cgroup beneath the root, no process in one, no
    descendant of the new daemon, no id lease held, but for the new daemon's
    own warm pools (--prespawn-runs 2, --prespawn-shells 2: 4 sandboxes it
    makes as it starts, each under an active grant it supervises), which
    are waited for (up to 30 s) and then set apart.
The last daemon is stopped with SIGTERM (exit 0) and checked the same way.

Prints a row per kill and one verdict line.

Usage: bench/kill_under_load.py [--rounds 20] [--seed 11]
(CORDON_BINARY names the binary; default build/cordon.)"""
import argparse
import http.client
import json
import os
import random
import sys
import tempfile
import threading
import time
import traceback
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
sys.path.insert(0, os.path.join(ROOT, "clients", "python"))

from daemon_support import (  # noqa: E402
    Daemon,
    cgroups_beneath,
    descendants,
    held_id_leases,
    identity,
    pids_in_cgroup_tree,
    remove_bench_leftovers,
    still_running,
    store_query,
)

CORDON = os.environ.get("CORDON_BINARY", os.path.join(ROOT, "build", "cordon"))
SHELLS = 4
POOLS = ("--prespawn-runs", "2", "--prespawn-shells", "2")  # cordon serve's defaults, named
POOLED = 4


class Load:
    """The four clients against one daemon, until stop()."""

    def __init__(self, daemon, rng):
        self.daemon = daemon
        self.stopping = threading.Event()
        self.done = {"runs": 0, "streamed": 0, "execs": 0, "kernel_execs": 0}
        self.seen_grants = set()  # grant ids the clients were told of
        self.errors = []  # failures before the kill (after it, failures are expected)
        self.lock = threading.Lock()
        self.rng = rng
        self.threads = [threading.Thread(target=self._guard, args=(f,), daemon=True)
                        for f in (self._runs, self._streams, self._execs, self._kernel)]
        for t in self.threads:
            t.start()

    def _guard(self, fn):
        client = self.daemon.client(timeout=30)
        try:
            fn(client)
        except Exception as e:  # noqa: BLE001
            if not self.stopping.is_set():
                with self.lock:
                    self.errors.append(f"{fn.__name__}: {type(e).__name__}: {str(e)[:200]}")

    def _count(self, what, grant=None):
        with self.lock:
            self.done[what] += 1
            if grant:
                self.seen_grants.add(grant)

    def _runs(self, client):
        n = 0
        while not self.stopping.is_set():
            n += 1
            if n % 20 == 0:
                # Ends after its main process; the escapee is torn down with it.
                r = client.run(shell="setsid sleep 300 & sleep 0.5; echo long")
            else:
                r = client.run(argv=["/bin/echo", f"run-{n}"])
            assert r["release"]["dead"], r
            self._count("runs", r["grant"]["id"])

    def _streams(self, client):
        u = urllib.parse.urlsplit(self.daemon.url)
        while not self.stopping.is_set():
            conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
            conn.request("POST", "/v1/runs", json.dumps(
                {"shell": "for i in $(seq 200); do echo $i; sleep 0.01; done"}),
                {"Authorization": f"Bearer {self.daemon.token}",
                 "Accept": "application/x-ndjson", "Content-Type": "application/json"})
            r = conn.getresponse()
            last = None
            for line in r:
                last = json.loads(line)
            conn.close()
            assert last and last["type"] == "result" and last["release"]["dead"], last
            self._count("streamed", last["grant"]["id"])

    def _execs(self, client):
        sessions = [client.session(f"sh-{i}") for i in range(SHELLS)]
        for s in sessions:
            self._count_grant(s.info)
        n = 0
        while not self.stopping.is_set():
            n += 1
            s = sessions[n % SHELLS]
            command = "setsid sleep 300 & echo $n" if n % 25 == 0 else f"echo {n}"
            r = s.exec(command)
            assert r["exit_code"] == 0, r
            self._count("execs")

    def _kernel(self, client):
        info = client.request("POST", "/v1/sessions", {"kind": "python", "id": "py-0"})
        self._count_grant(info)
        n = 0
        while not self.stopping.is_set():
            n += 1
            code = ("import subprocess; subprocess.Popen(['sleep', '300'], start_new_session=True)"
                    if n % 20 == 1 else f"{n} * 2")
            r = client.request("POST", "/v1/sessions/py-0/exec", {"code": code})
            assert r["status"] == "ok", r
            self._count("kernel_execs")

    def _count_grant(self, view):
        with self.lock:
            if view.get("grant_id"):
                self.seen_grants.add(view["grant_id"])

    def stop(self):
        self.stopping.set()
        for t in self.threads:
            t.join(timeout=60)


def record_trees(daemon, cgroup_root):
    """What must be dead after the kill: (pid, start time) of every process of
    the daemon's trees and of its cgroups, the active grants (with their main
    processes) and the live sessions."""
    pids = descendants(daemon.pid) | pids_in_cgroup_tree(cgroup_root)
    idents = {identity(p) for p in pids} - {None}
    grants = store_query(daemon.state_dir,
                         "SELECT id, pid, start_ticks FROM grants WHERE state = 'active'")
    for _, pid, ticks in grants:
        if pid and ticks is not None:
            idents.add((pid, ticks))
    sessions = store_query(daemon.state_dir, "SELECT id, generation FROM sessions "
                                             "WHERE state IN ('starting', 'ready', 'busy')")
    return idents, [g[0] for g in grants], sessions


def grant_of(cgroup, cgroup_root):
    """The grant id a cgroup beneath `cgroup_root` belongs to (its first
    component beneath the root)."""
    return cgroup.split(cgroup_root + "/", 1)[1].split("/", 1)[0]


def own_pool(daemon, cgroup_root):
    """The new daemon's warm pools: the ids of the active grants it
    supervises and the processes in their cgroups, once there are POOLED of
    them and every cgroup beneath the root is one of theirs (up to 30 s;
    then as they are, and verify() reports the rest)."""
    deadline = time.monotonic() + 30
    while True:
        own = {r[0] for r in store_query(
            daemon.state_dir, "SELECT id FROM grants WHERE state = 'active' AND supervisor_pid = ?",
            (daemon.pid,))}
        settled = {grant_of(c, cgroup_root) for c in cgroups_beneath(cgroup_root)} <= own
        if (len(own) == POOLED and settled) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    pids = set()
    for grant in own:
        pids |= pids_in_cgroup_tree(f"{cgroup_root}/{grant}")
    return own, pids


def verify(daemon, cgroup_root, idents, grants, sessions, seen_grants):
    """What is left of the trees from before, as a list of problems."""
    problems = []
    pool, pool_pids = own_pool(daemon, cgroup_root)
    alive = [i for i in idents if still_running(i)]
    if alive:
        problems.append(f"{len(alive)} processes from before still run: {alive[:5]}")
    active = [a for a in store_query(daemon.state_dir,
                                     "SELECT id FROM grants WHERE state = 'active'")
              if a[0] not in pool]
    if active:
        problems.append(f"{len(active)} grants active: {[a[0] for a in active][:3]}")
    for gid in set(grants) | seen_grants:
        row = store_query(daemon.state_dir, "SELECT state FROM grants WHERE id = ?", (gid,))
        if not row:
            problems.append(f"grant {gid} has no record")
        elif row[0][0] != "released":
            problems.append(f"grant {gid} is {row[0][0]}")
    for sid, generation in sessions:
        row = store_query(daemon.state_dir,
                          "SELECT state, generation FROM sessions WHERE id = ?", (sid,))
        if not row or row[0] != ("lost", generation):
            problems.append(f"session {sid} (generation {generation}) is {row}, not lost")
    cgroups = [c for c in cgroups_beneath(cgroup_root) if grant_of(c, cgroup_root) not in pool]
    if cgroups:
        # Which grants they were, as the store knows them (a group made
        # before its grant was recorded is known to no one).
        ids = sorted({grant_of(c, cgroup_root) for c in cgroups})
        known = {i: store_query(daemon.state_dir, "SELECT state, outcome FROM grants WHERE id = ?",
                                (i,)) for i in ids}
        problems.append(f"{len(cgroups)} cgroups left ({len(ids)} grants: "
                        + ", ".join(f"{i[:8]} {known[i][0] if known[i] else 'no record'}"
                                    for i in ids[:3]) + f"): {cgroups[:2]}")
    in_cgroups = pids_in_cgroup_tree(cgroup_root) - pool_pids
    if in_cgroups:
        problems.append(f"processes in the cgroups: {sorted(in_cgroups)[:5]}")
    children = descendants(daemon.pid) - pool_pids
    if children:
        problems.append(f"the new daemon has descendants: {sorted(children)[:5]}")
    leases = held_id_leases(daemon.state_dir, except_holders={daemon.pid})
    if leases:
        problems.append(f"id leases held: {leases[:5]}")
    if len(pool) != POOLED:
        problems.append(f"the new daemon's warm pools hold {len(pool)} grants, not {POOLED}")
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    work = tempfile.mkdtemp(prefix="cordon-bench-kill.")
    state = os.path.join(work, "state")
    cgroup_root = f"/cordon-bench-kill-{os.getpid()}"
    failures = []
    daemon = None
    print(f"== kill under load: {args.rounds} rounds, 4 clients, SIGKILL after 3-8 s; {CORDON}")
    print(f"{'round':>5} {'load s':>6} {'runs':>5} {'strm':>5} {'execs':>5} {'k-exec':>6} "
          f"{'procs':>5} {'grants':>6} {'sess':>4} {'restart ms':>10}  after the restart")
    try:
        daemon = Daemon(state, *POOLS, cgroup_root=cgroup_root, binary=CORDON)
        for round_ in range(1, args.rounds + 1):
            load = Load(daemon, rng)
            # At least until the kernel session is up, then a random moment.
            ready_by = time.monotonic() + 30
            while not load.done["kernel_execs"] and time.monotonic() < ready_by:
                time.sleep(0.05)
            seconds = rng.uniform(3, 8)
            time.sleep(seconds)
            idents, grants, sessions = record_trees(daemon, cgroup_root)
            load.stopping.set()  # what fails from now on is the kill's doing
            daemon.kill()  # SIGKILL to the daemon this script started, by pid
            load.stop()
            started = time.monotonic()
            daemon = Daemon(state, *POOLS, cgroup_root=cgroup_root, binary=CORDON)
            restart_ms = (time.monotonic() - started) * 1000
            problems = verify(daemon, cgroup_root, idents, grants, sessions, load.seen_grants)
            problems += [f"before the kill: {e}" for e in load.errors]
            d = load.done
            print(f"{round_:5} {seconds:6.1f} {d['runs']:5} {d['streamed']:5} {d['execs']:5} "
                  f"{d['kernel_execs']:6} {len(idents):5} {len(grants):6} {len(sessions):4} "
                  f"{restart_ms:10.0f}  {'; '.join(problems) if problems else 'all dead, all accounted for, nothing left'}",
                  flush=True)
            if problems:
                failures.append(f"round {round_}: {problems[0]}")
        # The last one goes with SIGTERM: everything torn down, exit 0.
        idents, grants, sessions = record_trees(daemon, cgroup_root)
        status = daemon.stop()
        leftover = [i for i in idents if still_running(i)] + cgroups_beneath(cgroup_root) \
            + held_id_leases(state)
        active = store_query(state, "SELECT count(*) FROM grants WHERE state = 'active'")[0][0]
        print(f"last daemon: SIGTERM exit {status}, {len(leftover)} things left, "
              f"{active} grants active")
        if status != 0 or leftover or active:
            failures.append(f"the last daemon's stop: exit {status}, left {leftover[:3]}, "
                            f"{active} active")
    except Exception:
        traceback.print_exc()
        failures.append("the bench did not complete")
    finally:
        if daemon is not None and daemon.proc.poll() is None:
            daemon.stop()
        remove_bench_leftovers(work, cgroup_root)
    if failures:
        print(f"VERDICT: NOT MET: {len(failures)} of {args.rounds} rounds: " + "; ".join(failures[:5]))
        return 1
    print(f"VERDICT: MET: {args.rounds} SIGKILLs under load; after each restart every process "
          f"recorded before was dead, every grant released and every live session lost, and no "
          f"cgroup, process or id lease was left")
    return 0


if __name__ == "__main__":
    sys.exit(main())
