#!/usr/bin/python3
"""Interrupts a shell session's command the moment it has begun, many times,
and counts the interrupts that did not end the execution.

Each round runs `touch $HOME/go; x=$(echo hi); sleep 30` (deadline 5 s),
waits for `go` without pausing, and interrupts: the SIGINT lands in the
`touch`, the command substitution or the `sleep`. An execution that is not
back with exit code 130 within 2 s is a miss: its end marker was lost (the
deadline then ends it, and the session may be invalidated) or the command
went on. Until 1a36efb both end markers were on one line, and a SIGINT in
the command substitution could drop the second one. A `sleep` still
running once the execution is back counts as left running: bash had forked
it as the SIGINT landed (it never got the signal) and ended the command
without waiting for it; since 318e034 what an interrupted command started
gets SIGINT once more after its end.

Usage: bench/interrupt_stress.py [ROUNDS] [CORDON ...]
(default 400 rounds, build/cordon; several binaries run in turn, each with a
daemon of its own.)"""
import os
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
sys.path.insert(0, os.path.join(ROOT, "clients", "python"))
os.environ.setdefault("CORDON_HELPERS_DIR", os.path.join(ROOT, "build", "helpers"))

from daemon_support import Daemon, descendants, read_proc, remove_bench_leftovers  # noqa: E402

COMMAND = "touch $HOME/go; x=$(echo hi); sleep 30"


def one_round(session):
    session.exec("rm -f $HOME/go")
    box = {}
    t = threading.Thread(target=lambda: box.setdefault("r", session.exec(COMMAND, timeout_ms=5000)))
    t.start()
    while "go" not in [f["name"] for f in session.list_files()]:
        pass
    begun = time.monotonic()
    session.interrupt()
    t.join()
    r = box["r"]
    return r, r["exit_code"] == 130 and time.monotonic() - begun < 2


def sleeping(daemon):
    """The daemon's descendants that are `sleep` and have not exited."""
    found = []
    for pid in descendants(daemon.pid):
        stat = read_proc(pid, "stat").decode(errors="replace")
        if "(sleep)" in stat and stat.rsplit(")", 1)[1].split()[0] not in "ZX":
            found.append(pid)
    return found


def stress(binary, rounds):
    work = tempfile.mkdtemp(prefix="cordon-interrupt-")
    cgroup_root = f"/cordon-bench-interrupt-{os.getpid()}"
    daemon = None
    misses = 0
    left = set()  # sleeps seen running after their round's result
    try:
        daemon = Daemon(os.path.join(work, "state"), binary=binary, cgroup_root=cgroup_root)
        client = daemon.client()
        session = client.session("stress")
        for n in range(rounds):
            r, ok = one_round(session)
            # A SIGINT sent as the result came has been delivered, but the
            # process may take a moment to go: looked at for up to 1 s.
            deadline = time.monotonic() + 1
            new = set(sleeping(daemon)) - left
            while new and time.monotonic() < deadline:
                time.sleep(0.01)
                new = set(sleeping(daemon)) - left
            if new:
                left |= new
                print(f"  round {n}: a sleep ran on after the result", flush=True)
            if not ok:
                misses += 1
                print(f"  round {n}: exit {r['exit_code']}, {r['duration_ms']} ms, "
                      f"invalidated {r['invalidated']}", flush=True)
                if r["invalidated"]:
                    session = client.session("stress")
        session.close()
    finally:
        if daemon is not None:
            daemon.stop()
        remove_bench_leftovers(work, cgroup_root)
    return misses, len(left)


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 400
    binaries = sys.argv[2:] or [os.path.join(ROOT, "build", "cordon")]
    for binary in binaries:
        misses, left = stress(binary, rounds)
        print(f"{binary}: {misses} of {rounds} interrupts missed, {left} left a process running",
              flush=True)


if __name__ == "__main__":
    main()
