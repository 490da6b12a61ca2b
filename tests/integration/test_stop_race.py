"""`cordon mcp` stopping (stdin EOF) while a run is finishing and a session
is starting: every teardown is verified and it exits 0.

The race it guards: the run's pipes and pidfd were ready in the same
epoll_wait as stdin's EOF. The stop unwatched them, Asio recycled their
descriptor states for the session teardown's verify timer, and their old
events woke that timer about 30 ms after SIGKILL: the session was
quarantined ("processes still alive 20000 ms after SIGKILL"), its workspace
stayed mounted and the exit status was 1 (src/api/asio_reactor.cc Dispatch,
src/contain/teardown.cc OnTimer). Stdin closes right after the three
requests, which is where the stop lands (every time before the fix)."""
import json
import subprocess

import pytest

from daemon_support import CGROUP_ROOT, CORDON, mounts_beneath, remove_cgroup_root, \
    unmount_beneath

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "stop-race", "version": "1"}}}
RUN = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
       "params": {"name": "run", "arguments": {"command": "echo hi; exit 3"}}}
SESSION_CREATE = {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                  "params": {"name": "session_create", "arguments": {"kind": "shell"}}}


@pytest.fixture()
def state(tmp_path):
    path = tmp_path / "state"
    yield str(path)
    unmount_beneath(path)
    remove_cgroup_root(CGROUP_ROOT)


def events(stderr):
    for line in stderr.splitlines():
        try:
            yield json.loads(line)
        except ValueError:
            pass


# Five stops (about a second in all): before the fix each one failed.
@pytest.mark.parametrize("attempt", range(5))
def test_stop_right_after_a_run_and_a_session_create(state, attempt):
    lines = "".join(json.dumps(m) + "\n" for m in (INIT, RUN, SESSION_CREATE))
    # --verify-timeout 20: a verify timer that fires early is told apart
    # from a real failure by the 20 s it would otherwise wait.
    proc = subprocess.run(
        [CORDON, "mcp", "--state-dir", state, "--cgroup-root", CGROUP_ROOT,
         "--verify-timeout", "20"],
        input=lines, capture_output=True, text=True, timeout=120)
    logged = list(events(proc.stderr))
    quarantined = [e for e in logged if e.get("event") == "session_quarantined"]
    assert not quarantined, f"a session was quarantined at stop: {quarantined}"
    stopped = [e for e in logged if e.get("event") == "stopped"]
    assert stopped and stopped[-1].get("all_dead") is True, proc.stderr
    assert proc.returncode == 0, proc.stderr
    assert mounts_beneath(state) == [], "the stop left mounts behind"
