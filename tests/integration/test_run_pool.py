"""The warm run pool (cordon serve --prespawn-runs, on by default) against a
real daemon and its real store: a run that declares no workspace, limits or
isolation of its own starts in a sandbox that was made, under a grant of its
own, before the request came. The grant is the run's in the store before its
command exists, the sandbox is the one a cold run gets, no sandbox is handed
to two runs, and a crash leaves nothing of the pool running."""
import json
import os
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "clients", "python"))

from daemon_support import (  # noqa: E402  (tests/integration/daemon_support.py)
    CGROUP_ROOT,
    Daemon,
    mounts_beneath,
    pids_in_cgroup_tree,
    require_namespaces,
    assert_count_option_refused,
    still_running,
    grant_row,
    store_query,
    wait_for,
)

# What a sandbox shows of itself: the same for a warm run and a cold one
# (each maps root to an outside id of its own: one line, a different id).
SELF = ("grep -E '^(Seccomp|NoNewPrivs|CapEff|CapBnd):' /proc/self/status; hostname; "
        "id -u; wc -l < /proc/self/uid_map; pwd; ls -A; tr -d '\\0' < /proc/1/cmdline; echo; "
        "echo $$; sed -n '3,$p' /proc/net/dev | cut -d: -f1 | tr -d ' '")


def warm(client):
    return client.health()["runs_warm"]


def pool_grants(state_dir, daemon_pid):
    """The pool's grants not handed out: id -> (pid, start_ticks, cgroups)."""
    rows = store_query(state_dir, "SELECT id, pid, start_ticks, cgroups FROM grants WHERE "
                       "owner = 'run-pool' AND state = 'active' AND supervisor_pid = ?",
                       (daemon_pid,))
    return {row[0]: (row[1], row[2], json.loads(row[3])) for row in rows}


def private_workspaces(client):
    """Whether pooled sandboxes get a tmpfs of their own for a workspace:
    where a run's scratch would be a tmpfs anyway (no project quota)."""
    return client.probe()["disk"]["ephemeral"] == "tmpfs"


def scratch_entries(state_dir):
    scratch = os.path.join(state_dir, "scratch")
    return set(os.listdir(scratch)) if os.path.isdir(scratch) else set()


def test_a_run_that_declares_nothing_starts_in_a_warm_sandbox_by_default(state_dir, tmp_path):
    # The pool is on without options; the host's network is allowed, to
    # show that a run asking for it goes cold.
    d = Daemon(state_dir, "--allow-network-host")
    require_namespaces(d)
    try:
        c = d.client()
        # Back long before this bound: a sandbox is made in milliseconds.
        wait_for(lambda: warm(c) == 2, within=30)
        waiting = pool_grants(state_dir, d.pid)
        assert len(waiting) == 2, waiting
        for grant_id, (pid, ticks, cgroups) in waiting.items():
            # Each sandbox's init runs under a grant recorded before it, and
            # it is alone in its cgroup: no command runs before one is sent.
            assert still_running((pid, ticks)), grant_id
            with open(os.path.join(cgroups["v2"], "cgroup.procs")) as f:
                assert f.read().split() == [str(pid)], grant_id
        private = private_workspaces(c)
        # A private workspace is mounted in its sandbox's mount namespace
        # only: the host has no directory or mount of it.
        assert len(scratch_entries(state_dir)) == (0 if private else 2)
        if private:
            assert mounts_beneath(os.path.join(state_dir, "scratch")) == []

        r = c.run(shell="echo \"$A\" $0; cat; " + SELF + "; echo made > here; exit 3",
                  env={"A": "declared"}, stdin="from stdin\n")
        assert r["warm"] is True, r
        assert r["grant"]["id"] in waiting
        assert r["outcome"] == "exited" and r["exit_code"] == 3, r
        assert r["release"]["dead"] is True, r
        lines = r["stdout"].split("\n")
        assert lines[:2] == ["declared /bin/sh", "from stdin"], r["stdout"]
        # The command is pid 2 under the sandbox's init, in a fresh empty
        # workspace, with no privileges and the seccomp filter.
        assert "/workspace\ncordon-init\n2\nlo\n" in r["stdout"], r["stdout"]
        assert "NoNewPrivs:\t1\n" in r["stdout"] and "CapEff:\t0000000000000000\n" in r["stdout"]
        # The daemon's default bounds, as for any run that declares none.
        assert r["limits"]["memory_bytes"] == 1 << 30 and r["limits"]["pids"] == 512, r["limits"]
        # The grant is the run's in the store: its owner and its command.
        owner, state, spec, release = grant_row(state_dir, r["grant"]["id"])
        assert owner == r["grant"]["owner"] != "run-pool", owner
        assert state == "released" and json.loads(release)["dead"] is True
        spec = json.loads(spec)
        assert "exit 3" in spec["shell"] and "argv" not in spec, spec
        assert spec["env_names"] == ["A"] and spec["stdin_bytes"] == len("from stdin\n"), spec
        if private:
            assert spec["workspace"] is None and spec["isolation"]["private_workspace"] is True
            # Its own tmpfs, bounded as a run's scratch is (the default disk
            # bound), writable by the command, and not the host's.
            ws = c.run(shell="grep ' /workspace ' /proc/self/mountinfo; touch f && echo ok")
            assert ws["warm"] is True, ws
            assert ws["grant"]["mechanisms"]["disk"] == "tmpfs", ws["grant"]
            info, ok = ws["stdout"].split("\n")[:2]
            assert " / /workspace " in info and " - tmpfs tmpfs " in info, info
            assert f"size={10 << 30 >> 10}k" in info and "nr_inodes=1048576" in info, info
            assert "idmapped" not in info and ok == "ok", ws["stdout"]
        else:
            # Its workspace went with it, before the answer.
            assert not os.path.exists(spec["workspace"]), spec["workspace"]

        # What a cold run of the same sandbox shows (a declared limit makes
        # it cold) is what a warm run shows.
        cold = c.run(shell=SELF, limits={"memory_bytes": 1 << 29})
        again = c.run(shell=SELF)
        assert cold["warm"] is False and again["warm"] is True
        assert again["stdout"] == cold["stdout"], (again["stdout"], cold["stdout"])
        assert "here" not in again["stdout"]  # nothing of the run before
        if private:
            # A cold run's scratch is made as a pooled sandbox's is: a tmpfs
            # of its own, bounded the same, with nothing of it on the host.
            cold_spec = json.loads(grant_row(state_dir, cold["grant"]["id"])[2])
            assert cold_spec["workspace"] is None, cold_spec
            assert cold_spec["isolation"]["private_workspace"] is True, cold_spec
            ws = c.run(shell="grep ' /workspace ' /proc/self/mountinfo",
                       limits={"memory_bytes": 1 << 29})
            assert ws["warm"] is False and ws["grant"]["mechanisms"]["disk"] == "tmpfs", ws
            assert " - tmpfs tmpfs " in ws["stdout"], ws["stdout"]
            assert f"size={10 << 30 >> 10}k" in ws["stdout"], ws["stdout"]
            assert scratch_entries(state_dir) == set()

        # The command's own limits come with it: its deadline (the tree is
        # torn down, verified) and its output cap.
        late = c.run(shell="sleep 60 & exec sleep 60", limits={"timeout_ms": 300})
        assert late["warm"] is True and late["outcome"] == "timed_out", late
        assert late["release"]["dead"] is True, late
        capped = c.run(shell="head -c 100000 /dev/zero | tr '\\0' x",
                       limits={"output_limit_bytes": 1000})
        assert capped["warm"] is True and capped["stdout"] == "x" * 1000, len(capped["stdout"])
        assert capped["stdout_truncated"] is True and capped["stdout_bytes"] == 100000

        # What is fixed before a command goes cold: a workspace of the
        # caller's, a limit, another isolation, the host's network.
        mine = tmp_path / "mine"
        mine.mkdir()
        for declared in ({"workspace": str(mine)}, {"limits": {"pids": 64}},
                         {"isolation": "strict"}, {"isolation": "none"},
                         {"require": ["memory"]}):
            assert c.run(argv=["/bin/true"], **declared)["warm"] is False, declared
        assert c.request("POST", "/v1/runs", {"argv": ["/bin/true"], "isolation": {
            "level": "standard", "network": "host"}})["warm"] is False
        # The pool refills in the background.
        wait_for(lambda: warm(c) == 2, within=30)
    finally:
        assert d.stop() == 0
    # A SIGTERM takes the pool down with everything else: no process, no
    # workspace, no mount.
    assert pids_in_cgroup_tree(CGROUP_ROOT) == set()
    assert scratch_entries(state_dir) == set()
    assert mounts_beneath(os.path.join(state_dir, "scratch")) == []
    for grant_id in waiting:
        assert grant_row(state_dir, grant_id)[1] == "released"


def test_runs_at_once_never_share_a_sandbox(state_dir):
    d = Daemon(state_dir)
    require_namespaces(d)
    try:
        c = d.client()
        wait_for(lambda: warm(c) == 2, within=30)
        results = []

        def one(i):
            results.append(d.client().run(
                shell=f"echo {i} > mine; sleep 0.2; ls -A; readlink /proc/self/ns/pid"))

        threads = [threading.Thread(target=one, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(results) == 6
        assert sum(r["warm"] for r in results) >= 1, results
        # Six grants, six pid namespaces, and each saw only its own file.
        assert len({r["grant"]["id"] for r in results}) == 6
        assert len({r["stdout"].split("\n")[1] for r in results}) == 6
        for r in results:
            assert r["outcome"] == "exited" and r["stdout"].startswith("mine\n"), r
    finally:
        assert d.stop() == 0


def test_a_crash_leaves_no_pool_sandbox_running_and_the_next_daemon_makes_its_own(state_dir):
    d = Daemon(state_dir, "--prespawn-runs", "1", "--prespawn-shells", "0")
    require_namespaces(d)
    try:
        c = d.client()
        wait_for(lambda: warm(c) == 1, within=30)
        before = pool_grants(state_dir, d.pid)
        old_scratch = scratch_entries(state_dir)
        assert len(before) == 1 and len(old_scratch) == (0 if private_workspaces(c) else 1)
    except BaseException:
        d.stop()  # nothing of a failed test's daemon is left running
        raise
    d.kill()
    # A waiting init ends on its own once the daemon is gone (its control
    # socket closes): nothing of the pool outlives a crash.
    for grant_id, (pid, ticks, _) in before.items():
        wait_for(lambda: not still_running((pid, ticks)), within=20)
    d = Daemon(state_dir, "--prespawn-runs", "1", "--prespawn-shells", "0")
    try:
        c = d.client()
        # The old pool's grant was reaped at restart, its workspace removed.
        for grant_id in before:
            assert grant_row(state_dir, grant_id)[1] == "released"
        wait_for(lambda: warm(c) == 1, within=30)
        assert scratch_entries(state_dir).isdisjoint(old_scratch)
        assert c.run(argv=["/bin/true"])["warm"] is True
    finally:
        assert d.stop() == 0


def test_prespawn_runs_0_launches_every_run_on_request_and_bad_values_are_refused(
        state_dir, tmp_path):
    assert_count_option_refused("--prespawn-runs", tmp_path)
    d = Daemon(state_dir, "--prespawn-runs", "0")
    try:
        c = d.client()
        r = c.run(shell="echo hi")
        assert r["warm"] is False and r["stdout"] == "hi\n", r
        assert warm(c) == 0
        assert pool_grants(state_dir, d.pid) == {}
        assert scratch_entries(state_dir) == set()
    finally:
        assert d.stop() == 0
