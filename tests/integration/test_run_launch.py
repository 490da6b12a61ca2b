"""A cold run's sandbox is made on a worker thread of the daemon (its
workspace, its grant's record and cgroups, its process), then supervised on
the loop. What a client sees of that, against a real daemon and its store:
a refusal found on the worker is still the run's answer, with its status,
streamed or not; and a daemon stopped while runs are being made answers
each, and leaves no process, grant or cgroup of them."""
import os
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "clients", "python"))

from cordon_client.errors import CordonError  # noqa: E402
from daemon_support import (  # noqa: E402  (tests/integration/daemon_support.py)
    CGROUP_ROOT,
    Daemon,
    active_grants,
    pids_in_cgroup_tree,
    stop_amid,
    store_query,
)


def test_a_workspace_that_cannot_be_made_is_the_runs_answer_streamed_or_not(state_dir):
    # No pool of either kind: a warm shell's grant, recorded whenever the
    # pool gets to it, would be counted among the runs' below.
    d = Daemon(state_dir, "--prespawn-runs", "0", "--prespawn-shells", "0")
    scratch = os.path.join(state_dir, "scratch")
    try:
        c = d.client()
        # Where a run's workspace goes is a file: the worker cannot make it.
        if os.path.isdir(scratch):
            os.rmdir(scratch)
        with open(scratch, "w") as f:
            f.write("in the way")
        before = store_query(state_dir, "SELECT COUNT(*) FROM grants")[0][0]
        seen = []
        for on_output in (None, lambda stream, text: seen.append(text)):
            try:
                c.run(argv=["/bin/echo", "never"], isolation="none", on_output=on_output)
                raise AssertionError("a run without a workspace was answered")
            except CordonError as e:
                # A streamed run too gets the status, not a 200 stream.
                assert e.status == 500 and e.code == "internal", e
                assert "cannot create the run's workspace" in e.message, e
        assert seen == []
        # Refused before admission: no grant was recorded.
        assert store_query(state_dir, "SELECT COUNT(*) FROM grants")[0][0] == before
        os.unlink(scratch)
        r = c.run(argv=["/bin/echo", "made"], isolation="none")
        assert r["outcome"] == "exited" and r["stdout"] == "made\n", r
    finally:
        if os.path.isfile(scratch):
            os.unlink(scratch)
        assert d.stop() == 0


def test_a_stop_while_runs_are_made_answers_each_and_leaves_nothing(state_dir):
    # No pool: every run is made on request, on a worker.
    d = Daemon(state_dir, "--prespawn-runs", "0", "--max-runs", "64")
    answers = []

    def one():
        try:
            answers.append(d.client().run(shell="sleep 60", limits={"timeout_ms": 120000}))
        except CordonError as e:
            answers.append(e)

    threads = [threading.Thread(target=one) for _ in range(16)]
    c = d.client()
    # All 16 are in (refused no more at the door): the stop lands while the
    # first are supervised and the rest are being made, or queued for a
    # worker.
    stop_amid(d, threads, lambda: c.health()["runs_active"] == 16)
    assert len(answers) == 16
    for a in answers:
        if isinstance(a, CordonError):
            assert a.status == 503 and a.code == "stopping", a
        else:
            assert a["outcome"] == "cancelled" and a["release"]["dead"] is True, a
    assert any(not isinstance(a, CordonError) for a in answers)
    # Every grant made was released; no process is left in its groups.
    assert active_grants(state_dir) == []
    recorded = store_query(state_dir, "SELECT outcome FROM grants")
    assert recorded and all(row[0] == "cancelled" for row in recorded), recorded
    assert pids_in_cgroup_tree(CGROUP_ROOT) == set()
