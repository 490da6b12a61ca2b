"""The warm shell pool (cordon serve --prespawn-shells, on by default)
against a real daemon and its real store: a shell session whose request
declares nothing of its own gets a shell that was started, in its sandbox
and under the default bounds, before the request came; no pooled shell is
ever handed to two sessions; a crash leaves nothing of the pool running."""
import os
import sys

import pytest
import requests

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "clients", "python"))

from daemon_support import (  # noqa: E402  (tests/integration/daemon_support.py)
    CGROUP_ROOT,
    Daemon,
    daemon_on_small_filesystem,
    empty_the_wal,
    fill_filesystem,
    pids_in_cgroup_tree,
    require_namespaces,
    assert_count_option_refused,
    still_running,
    grant_row,
    store_query,
    wait_for,
)

ENV = ("HOME=/workspace\nLANG=C.UTF-8\n"
       "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\nTERM=dumb\n")
# A pool shell's grant, as the tests read it.
SHELL_GRANT = "owner, state, pid, start_ticks, release"
SHOW_ENV = "env | grep -v -e ^PWD= -e ^OLDPWD= -e ^SHLVL= -e ^_= | sort"


def warm(client):
    return client.health()["shells_warm"]


def pool_grants(state_dir):
    """The grants of pool shells not handed out: their main process, by identity."""
    rows = store_query(state_dir, "SELECT g.id, g.pid, g.start_ticks FROM grants g "
                       "WHERE g.owner = 'session-pool' AND g.state = 'active' AND NOT EXISTS "
                       "(SELECT 1 FROM sessions s WHERE s.grant_id = g.id)")
    return {row[0]: (row[1], row[2]) for row in rows}


def pool_workspaces(state_dir):
    """The pool's workspace directories (a disk bound's image is beside its own)."""
    return {n for n in os.listdir(os.path.join(state_dir, "workspaces"))
            if n.startswith(".warm-") and not n.endswith(".img")}


def test_a_shell_session_that_declares_nothing_gets_a_warm_shell_by_default(state_dir):
    d = Daemon(state_dir)  # no options: the pool is on
    require_namespaces(d)
    try:
        c = d.client()
        # Back long before this bound: a shell is ready in milliseconds.
        wait_for(lambda: warm(c) == 2, within=30)
        waiting = pool_grants(state_dir)
        assert len(waiting) == 2, waiting
        # Each waits in its sandbox already, under a grant recorded before it ran.
        for grant_id, ident in waiting.items():
            assert still_running(ident), grant_id

        hot = c.session("hot")
        info = hot.refresh()
        assert info["state"] == "ready"
        assert info["spec"].get("warm") is True, info
        assert info["grant_id"] in waiting
        # Under the daemon's default bounds, in its own workspace at /workspace.
        assert info["limits"]["memory_bytes"] == 1 << 30, info["limits"]
        assert info["limits"]["pids"] == 512, info["limits"]
        assert hot.exec("pwd; echo made > here.txt")["stdout"] == "/workspace\n"
        with open(os.path.join(state_dir, "workspaces", "hot", "here.txt")) as f:
            assert f.read() == "made\n"
        hot.put_file("up.txt", b"uploaded")
        assert hot.exec("cat up.txt")["stdout"] == "uploaded"
        # Exactly the environment a cold shell gets: nothing of the pool's.
        assert hot.exec(SHOW_ENV)["stdout"] == ENV
        cold = c.session("cold", limits={"timeout_ms": 60000})
        assert cold.refresh()["spec"].get("warm") is None
        assert cold.exec(SHOW_ENV)["stdout"] == ENV
        assert cold.exec("pwd")["stdout"] == "/workspace\n"
        # A request that declares env starts cold, with exactly its environment.
        declared = c.session("declared", env={"MINE": "1"})
        assert declared.refresh()["spec"].get("warm") is None
        assert "MINE=1\n" in declared.exec(SHOW_ENV)["stdout"]

        # Three creates in a row: three different shells and grants, never one
        # shell for two sessions; what one writes the others do not see.
        more = [c.session(f"m{i}") for i in range(3)]
        grants = {s.refresh()["grant_id"] for s in more} | {info["grant_id"]}
        assert len(grants) == 4, grants
        more[0].exec("echo mine > only-here")
        for s in more[1:] + [hot]:
            assert s.exec("ls")["stdout"].find("only-here") < 0
        # The pool refills in the background.
        wait_for(lambda: warm(c) == 2, within=30)

        # Closing a warm session tears its tree down, verified, as for any other.
        main = grant_row(state_dir, info["grant_id"], SHELL_GRANT)
        hot.close()
        after = grant_row(state_dir, info["grant_id"], SHELL_GRANT)
        assert after[1] == "released", after
        assert '"dead":true' in after[4].replace(" ", ""), after
        assert not still_running((main[2], main[3]))
        assert not os.path.exists(os.path.join(state_dir, "workspaces", "hot"))
    finally:
        assert d.stop() == 0
    # A SIGTERM takes the pool down with everything else.
    assert pids_in_cgroup_tree(CGROUP_ROOT) == set()
    assert pool_workspaces(state_dir) == set()


def test_a_crash_leaves_no_pool_shell_running_and_the_next_daemon_makes_its_own(state_dir):
    d = Daemon(state_dir, "--prespawn-shells", "1")
    require_namespaces(d)
    try:
        c = d.client()
        wait_for(lambda: warm(c) == 1, within=30)
        before = pool_grants(state_dir)
        old_workspaces = pool_workspaces(state_dir)
        assert len(before) == 1 and len(old_workspaces) == 1
    except BaseException:
        d.stop()  # nothing of a failed test's daemon is left running
        raise
    d.kill()
    d = Daemon(state_dir, "--prespawn-shells", "1")
    try:
        c = d.client()
        # The old pool's grant was reaped at restart: released, its shell dead.
        for grant_id, ident in before.items():
            assert grant_row(state_dir, grant_id)[1] == "released"
            assert not still_running(ident)
        wait_for(lambda: warm(c) == 1, within=30)
        assert pool_workspaces(state_dir).isdisjoint(old_workspaces)
        assert c.session("after").refresh()["spec"].get("warm") is True
    finally:
        assert d.stop() == 0


def test_prespawn_shells_0_starts_every_shell_on_request_and_bad_values_are_refused(
        state_dir, tmp_path):
    assert_count_option_refused("--prespawn-shells", tmp_path)
    d = Daemon(state_dir, "--prespawn-shells", "0")
    try:
        c = d.client()
        s = c.session("cold")
        assert s.refresh()["spec"].get("warm") is None
        assert warm(c) == 0
        assert pool_grants(state_dir) == {}
        assert s.exec("echo hi")["stdout"] == "hi\n"
    finally:
        assert d.stop() == 0


@pytest.mark.parametrize("kind", ["shell", "python"])
def test_a_warm_session_that_cannot_be_recorded_is_refused_and_leaves_nothing(tmp_path, kind):
    """The state directory's filesystem full as a warm shell or kernel is
    handed out: its grant was recorded when the pool started it, but the
    session's own record cannot be written. Unrecorded, the session would
    be unknown to the next daemon after a crash (not `lost`, its files
    swept by the next create of its id), so the create is refused, 507
    naming the cause, and the runtime and its workspace go."""
    options, pool, size = (("--prespawn", "1"), "kernels_warm", 1) if kind == "python" else (
        (), "shells_warm", 2)
    with daemon_on_small_filesystem(tmp_path, *options) as (state, d):
        require_namespaces(d)
        c = d.client()
        # Back long before this bound: a kernel is ready in about a second.
        wait_for(lambda: c.health()[pool] == size, within=60)
        waiting = pool_grants(state)
        # What the store writes next needs new blocks: its write-ahead log
        # is emptied first. Then one block is left: enough for the
        # directory the warm workspace moves to, not for a page of the log.
        empty_the_wal(state)
        filler = state / "filler"
        fill_filesystem(filler)
        block = os.statvfs(state).f_bsize
        os.truncate(filler, os.path.getsize(filler) // block * block - block)

        def create():
            return requests.post(f"{d.url}/v1/sessions", json={"id": "w", "kind": kind},
                                 headers={"Authorization": f"Bearer {d.token}"}, timeout=60)

        r = create()
        assert r.status_code == 507, r.text
        error = r.json()["error"]
        assert error["code"] == "insufficient_storage", error
        assert "could not be recorded" in error["message"], error
        # The shell handed out is torn down, verified, and its workspace goes.
        # (Its grant's release cannot be recorded either: its process is
        # what tells.) The rest of the pool runs on.
        wait_for(lambda: sum(not still_running(i) for i in waiting.values()) == 1, within=30)
        wait_for(lambda: c.request("GET", "/v1/sessions/w")["state"] == "closed", within=30)
        assert not os.path.exists(state / "workspaces" / "w")
        assert not os.path.exists(state / "workspaces" / "w.img")
        # Recorded, if at all, as closed (the workspace's removal made room).
        assert store_query(state, "SELECT state FROM sessions WHERE id = 'w'") in (
            [], [("closed",)])

        # Room again: the same id is created and recorded.
        os.unlink(filler)
        r = create()
        assert r.status_code == 201 and r.json()["state"] == "ready", r.text
        assert store_query(state, "SELECT state FROM sessions WHERE id = 'w'") == [("ready",)]
