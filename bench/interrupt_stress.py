#!/usr/bin/python3
"""Interrupts a shell session's command the moment it has begun, many times,
and counts the interrupts that did not end the execution.

Each round runs `touch $HOME/go; x=$(echo hi); sleep 30` (deadline 5 s),
waits for `go` without pausing, and interrupts: the SIGINT lands in the
`touch`, the command substitution or the `sleep`. An execution that is not
back with exit code 130 within 2 s is a miss: its end marker was lost (the
deadline then ends it, and the session may be invalidated) or the command
went on. Until 1a36efb both end markers were on one line, and a SIGINT in
the command substitution could drop the second one.

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

from daemon_support import Daemon, remove_bench_leftovers  # noqa: E402

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


def stress(binary, rounds):
    work = tempfile.mkdtemp(prefix="cordon-interrupt-")
    cgroup_root = f"/cordon-bench-interrupt-{os.getpid()}"
    daemon = Daemon(os.path.join(work, "state"), binary=binary, cgroup_root=cgroup_root)
    misses = 0
    try:
        client = daemon.client()
        session = client.session("stress")
        for n in range(rounds):
            r, ok = one_round(session)
            if not ok:
                misses += 1
                print(f"  round {n}: exit {r['exit_code']}, {r['duration_ms']} ms, "
                      f"invalidated {r['invalidated']}", flush=True)
                if r["invalidated"]:
                    session = client.session("stress")
        session.close()
    finally:
        daemon.stop()
        remove_bench_leftovers(work, cgroup_root)
    return misses


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 400
    binaries = sys.argv[2:] or [os.path.join(ROOT, "build", "cordon")]
    for binary in binaries:
        misses = stress(binary, rounds)
        print(f"{binary}: {misses} of {rounds} interrupts missed", flush=True)


if __name__ == "__main__":
    main()
