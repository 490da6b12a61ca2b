"""The Python client against a real `cordon serve` on loopback: every call
of the client, and its typed errors, on real processes and cgroups."""
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "clients", "python"))

from cordon_client import (  # noqa: E402
    AboveCeilingError,
    AuthError,
    Client,
    ConflictError,
    ForbiddenError,
    IntegrityError,
    NotFoundError,
    ValidationError,
)

from daemon_support import (  # noqa: E402  (tests/integration/daemon_support.py)
    CGROUP_ROOT,
    CORDON,
    Daemon,
    alive as _alive,
    cgroup_mounts as _cgroup_mounts,
    PRINT_TREE,
    any_running as _any_running,
    cgroups_hold_trees,
    sandbox_namespaces as _sandbox_namespaces,
    sandbox_tree as _sandbox_tree,
    visible_tree as _visible_tree,
    pids_in_cgroup_tree as _pids_in_cgroup_tree,
    POOL_OWNERS as _POOL_OWNERS,
    pool_pids as _pool_pids,
    read_proc as _read_proc,
    remove_tree as _remove_tree,
    store_query,
    wait_for as _wait_for,
)

CLIENT_DIR = os.path.join(os.path.dirname(__file__), "..", "..", "clients", "python")


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    d = Daemon(tmp_path_factory.mktemp("daemon") / "state")
    yield d
    assert d.stop() == 0
    for mount in _cgroup_mounts():
        _remove_tree(mount + CGROUP_ROOT)


@pytest.fixture()
def client(daemon):
    return daemon.client()


def test_health_probe_and_typed_auth_errors(daemon, client):
    assert Client(daemon.url).health()["status"] == "ok"
    assert any(c["capability"] == "process_tree" for c in client.probe()["capabilities"])
    assert "cordon_runs_total" in client.metrics()
    with pytest.raises(AuthError) as e:
        Client(daemon.url, token="wrong").probe()
    assert e.value.status == 401
    with pytest.raises(AuthError):
        Client(daemon.url).run(argv=["/bin/true"])


def test_head_on_health_probe_and_metrics_is_answered_as_get_without_a_body(daemon):
    # curl -I, as a load balancer's health check sends it (it was 405).
    bearer = ["-H", f"Authorization: Bearer {daemon.token}"]
    for path, auth in [("/v1/health", []), ("/v1/probe", bearer), ("/metrics", bearer)]:
        r = subprocess.run(["curl", "-sS", "-I", "--max-time", "30", *auth, daemon.url + path],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        head = r.stdout.splitlines()
        assert head[0] == "HTTP/1.1 200 OK", (path, r.stdout)
        length = [int(h.split(":")[1]) for h in head if h.lower().startswith("content-length:")]
        assert length and length[0] > 0, (path, r.stdout)
    # Not where a GET would change nothing but is not what it is for.
    r = subprocess.run(["curl", "-sS", "-I", "--max-time", "30", *bearer, daemon.url + "/v1/runs"],
                       capture_output=True, text=True, timeout=60)
    assert r.stdout.startswith("HTTP/1.1 405"), r.stdout


def test_validation_errors_carry_the_field(client):
    cases = [
        (dict(argv=[]), "argv"),
        (dict(argv=["/bin/true"], isolation="full"), "isolation"),
        (dict(argv=["/bin/true"], limits={"timeout_ms": -1}), "limits.timeout_ms"),
        (dict(argv=["/bin/true"], limits={"memory": 5}), "limits.memory"),
        (dict(argv=["/bin/true"], env={"A=B": "x"}), "env"),
        (dict(argv=["/bin/true"], require=["nothing"]), "require"),
        (dict(argv=["/bin/true"], workspace="rel"), "workspace"),
        (dict(argv=["/bin/true"], limits={"cpu": 1e-9}), "limits.cpu"),
    ]
    for kwargs, field in cases:
        with pytest.raises(ValidationError) as e:
            client.run(**kwargs)
        assert e.value.field == field, (kwargs, e.value.message)
        assert e.value.message
    with pytest.raises(ValidationError) as e:
        client.session("bad id")
    assert e.value.field == "id"


def test_a_workspace_that_would_show_the_host_is_refused(daemon, client, tmp_path):
    # Shown read-write at /workspace: not / through a link, not the host's
    # pseudo-filesystems, not the daemon's own state (its token) or above.
    link = tmp_path / "root-link"
    link.symlink_to("/")
    refused = [str(link), "/proc", "/proc/1", "/dev", "/sys/fs/cgroup", daemon.state_dir,
               os.path.dirname(daemon.state_dir)]
    for workspace in refused:
        with pytest.raises(ValidationError) as e:
            client.run(argv=["/bin/true"], workspace=workspace)
        assert e.value.field == "workspace", (workspace, e.value.message)
    # A directory beside the state is a workspace like any other.
    mine = tmp_path / "mine"
    mine.mkdir()
    r = client.run(shell="echo hi > /workspace/made", workspace=str(mine))
    assert r["exit_code"] == 0, r
    assert (mine / "made").read_text() == "hi\n"


def test_no_isolation_or_host_network_unless_the_operator_allows_it(tmp_path):
    # Before, whoever held the token, and an agent over MCP, could ask for
    # isolation none and run on the host as the daemon's user (root), or
    # for the host's network (its loopback services, a cloud's metadata).
    state = tmp_path / "state"
    d = Daemon(state, min_isolation=None)
    host_net = {"level": "standard", "network": "host"}
    try:
        c = d.client()
        for make, field, says in [
                (lambda: c.run(argv=["/bin/true"], isolation="none"), "isolation",
                 "below this daemon's floor of standard (cordon serve --min-isolation)"),
                (lambda: c.session("bare", isolation="none"), "isolation", "--min-isolation"),
                (lambda: c.run(argv=["/bin/true"], isolation=host_net), "isolation.network",
                 "host is not allowed by this daemon (cordon serve --allow-network-host)"),
                (lambda: c.session("bare", isolation=host_net), "isolation.network",
                 "--allow-network-host")]:
            with pytest.raises(AboveCeilingError) as e:
                make()
            assert e.value.field == field, e.value.message
            assert says in e.value.message, e.value.message
        with pytest.raises(NotFoundError):
            c.request("GET", "/v1/sessions/bare")
        owners = [o for (o,) in store_query(state, "SELECT owner FROM grants")]
        assert [o for o in owners if o not in _POOL_OWNERS] == [], owners  # nothing admitted
        assert c.run(argv=["/bin/true"])["exit_code"] == 0  # standard
    finally:
        assert d.stop() == 0
    # The MCP run tool too, where the model itself writes the arguments.
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "run", "arguments": {"command": "id -u", "isolation": "none"}}}
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "floor", "version": "1"}}}
    mcp = subprocess.run([CORDON, "mcp", "--state-dir", str(state), "--cgroup-root", CGROUP_ROOT],
                         input="".join(json.dumps(m) + "\n" for m in (init, call)),
                         capture_output=True, text=True, timeout=120)
    assert mcp.returncode == 0, mcp.stderr
    answer = [json.loads(line) for line in mcp.stdout.splitlines()][-1]
    assert answer["id"] == 2 and answer["result"]["isError"] is True, answer
    assert "--min-isolation" in answer["result"]["content"][0]["text"], answer
    # An operator who wants them says so.
    bare = Daemon(state, "--allow-network-host", min_isolation="none")
    try:
        assert bare.client().run(argv=["/bin/true"], isolation="none")["exit_code"] == 0
        assert bare.client().run(argv=["/bin/true"], isolation=host_net)["exit_code"] == 0
    finally:
        assert bare.stop() == 0
    for mount in _cgroup_mounts():
        _remove_tree(mount + CGROUP_ROOT)


def test_run_and_streaming(client):
    r = client.run(argv=["/bin/sh", "-c", "echo out; echo err >&2; exit 4"], env={"A": "1"})
    assert r["outcome"] == "exited" and r["exit_code"] == 4
    assert r["stdout"] == "out\n" and r["stderr"] == "err\n"
    assert r["release"]["dead"] is True
    assert client.run(shell="cat", stdin_bytes=b"bytes\x01")["stdout"] == "bytes\x01"
    events = []
    result = client.run(shell="echo a; sleep 0.1; echo b >&2", on_output=lambda s, d: events.append((s, d)))
    assert events == [("stdout", "a\n"), ("stderr", "b\n")]
    assert result["type"] == "result" and result["outcome"] == "exited"
    timed = client.run(argv=["/bin/sleep", "30"], limits={"timeout_ms": 200, "grace_ms": 100})
    assert timed["outcome"] == "timed_out"


def test_session_state_serialised_execs_and_interrupt(client):
    with client.session("py-state") as s:
        assert s.info["state"] == "ready"
        s.exec("cd /tmp && export K=v && g() { echo g$1; }")
        r = s.exec("pwd; echo $K; g 1")
        assert r["stdout"] == "/tmp\nv\ng1\n" and r["exit_code"] == 0
        assert s.exec("cat", stdin="in")["stdout"] == "in"

        results = []
        threads = [threading.Thread(target=lambda i=i: results.append(
            s.exec(f"echo {i} >> $HOME/order; sleep 0.05; echo {i} >> $HOME/order")))
            for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        order = s.exec("cat $HOME/order")["stdout"].split()
        assert [order[i] == order[i + 1] for i in range(0, 6, 2)] == [True] * 3

        box = {}
        t = threading.Thread(target=lambda: box.setdefault("r", s.exec("touch $HOME/go; sleep 30")))
        t.start()
        deadline = time.monotonic() + 20
        while "go" not in [f["name"] for f in s.list_files()] and time.monotonic() < deadline:
            time.sleep(0.01)
        assert s.interrupt() is True
        t.join(timeout=20)
        assert box["r"]["exit_code"] == 130 and box["r"]["timed_out"] is False
        assert s.exec("echo $K")["stdout"] == "v\n"
    assert s.info["state"] == "closed"
    with pytest.raises(ConflictError):
        s.exec("true")


def test_a_waiting_exec_is_answered_at_its_own_deadline(client):
    # Before, it was answered when the exec before it ended (here 60 s, cut
    # short by the interrupt below), saying timed_out.
    with client.session("py-waiting") as s:
        box = {}
        t = threading.Thread(target=lambda: box.setdefault("r", s.exec("touch $HOME/go; sleep 60")))
        t.start()
        assert _wait_for(lambda: "go" in [f["name"] for f in s.list_files()])
        start = time.monotonic()
        waited = s.exec("touch $HOME/ran", timeout_ms=500)
        took = time.monotonic() - start
        assert waited["timed_out"] is True and waited["duration_ms"] == 0, waited
        assert took < 10, f"answered after {took:.1f} s, not at its deadline"
        assert s.interrupt() is True
        t.join(timeout=30)
        assert box["r"]["exit_code"] == 130 and box["r"]["timed_out"] is False
        assert "ran" not in [f["name"] for f in s.list_files()]  # it never ran


def test_a_command_that_moves_its_shells_output_does_not_wedge_the_session(client):
    # Before, the end markers went where the command sent the shell's
    # stdout or stderr: each exec below hung until its deadline and the
    # session was invalidated.
    with client.session("py-redirected") as s:
        for command, stdout, stderr in [
            ("exec 2>/dev/null", "", ""),
            ("echo out; echo err >&2", "out\n", ""),  # stderr stays at /dev/null
            ("exec 3>&1 >$HOME/log; echo hidden", "", ""),
            ("echo shown >&3; cat $HOME/log >&3", "shown\nhidden\n", ""),
            ("exec 1>&-", "", ""),
            ("echo gone >&3", "gone\n", ""),
        ]:
            r = s.exec(command, timeout_ms=20000)
            assert (r["timed_out"], r["invalidated"], r["exit_code"]) == (False, False, 0), (command, r)
            assert (r["stdout"], r["stderr"]) == (stdout, stderr), (command, r)
        # The copies cannot be pointed elsewhere, and a fresh status still
        # comes through them.
        moved = s.exec("exec {__cordon_marker_out}>/dev/null", timeout_ms=20000)
        assert moved["timed_out"] is False and moved["exit_code"] != 0, moved
        assert s.exec("exit 7", timeout_ms=20000)["exit_code"] == 7
        assert s.exec("echo back >&2", timeout_ms=20000)["stderr"] == "back\n"


def test_timeout_ladder_invalidation_and_a_new_generation(client):
    s = client.session("py-ladder", limits={"grace_ms": 200})
    s.put_file("old.txt", b"old")
    r = s.exec("trap '' INT; sleep 30", timeout_ms=200)
    assert r["timed_out"] is True and r["invalidated"] is True
    assert s.state == "invalidated"
    with pytest.raises(ConflictError) as e:
        s.exec("true")
    assert "invalidated" in e.value.message
    s2 = client.session("py-ladder")
    assert s2.info["generation"] == 2
    assert s2.list_files() == []
    ok = s2.exec("sleep 30", timeout_ms=200)
    assert ok["timed_out"] is True and ok["invalidated"] is False
    restarted = s2.exec("exit 3")
    assert restarted["exit_code"] == 3 and restarted["shell_restarted"] is True
    s2.close()


def test_files_chunked_digest_empty_and_listing(client):
    with client.session("py-files") as s:
        data = os.urandom(7 << 20)
        info = s.put_file("deep/dir/blob.bin", data, chunk_size=(7 << 20) // 3 + 1)
        assert info["size"] == len(data)
        assert info["sha256"] == hashlib.sha256(data).hexdigest()
        assert s.get_file("deep/dir/blob.bin") == data
        assert s.exec("sha256sum deep/dir/blob.bin")["stdout"].split()[0] == info["sha256"]
        s.put_file("empty", b"")
        assert s.get_file("empty") == b""
        names = {(f["name"], f["type"]) for f in s.list_files()}
        assert ("deep", "directory") in names and ("empty", "file") in names
        s.delete_file("empty")
        with pytest.raises(NotFoundError):
            s.get_file("empty")


def test_digest_mismatch_and_escapes_are_refused(client):
    with client.session("py-refuse") as s:
        with pytest.raises(IntegrityError) as e:
            s.put_file("x.bin", b"content", sha256="0" * 64)
        assert e.value.field == "X-Content-SHA256"
        with pytest.raises(NotFoundError):
            s.get_file("x.bin")
        with pytest.raises(IntegrityError):
            s.put_file("chunked.bin", b"abcdef", chunk_size=2, sha256="1" * 64)
        with pytest.raises(NotFoundError):
            s.get_file("chunked.bin")
        for path in ("../x", "/etc/passwd", "a/../../x"):
            with pytest.raises(ValidationError):
                s.get_file(path)
        s.exec("ln -s /etc etc; ln -s .. up")
        with pytest.raises(ForbiddenError):
            s.get_file("etc/passwd")
        with pytest.raises(ForbiddenError):
            s.put_file("up/escaped.txt", b"x")
        assert not os.path.exists(os.path.join(os.path.dirname(s.info["workspace"]), "escaped.txt"))


def test_unknown_session_is_not_found(client):
    with pytest.raises(NotFoundError):
        client.request("GET", "/v1/sessions/nobody")


def test_the_client_installs_offline_into_a_virtualenv(tmp_path):
    # A copy: pip builds in the source directory and would leave build/ there.
    source = tmp_path / "source"
    shutil.copytree(CLIENT_DIR, source, ignore=shutil.ignore_patterns("build", "*.egg-info",
                                                                      "__pycache__"))
    venv = tmp_path / "venv"
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", str(venv)],
                   check=True, capture_output=True)
    install = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "--no-index", "--no-build-isolation",
         "--no-cache-dir", "--quiet", str(source)],
        capture_output=True, text=True, cwd=str(tmp_path))
    assert install.returncode == 0, install.stderr
    check = subprocess.run(
        [str(venv / "bin" / "python"), "-c",
         "import cordon_client, sys; print(cordon_client.Client.__name__, cordon_client.__file__)"],
        capture_output=True, text=True, cwd=str(tmp_path))
    assert check.returncode == 0, check.stderr
    assert check.stdout.startswith("Client ") and str(venv) in check.stdout


def _active_grants(state_dir, daemon_pid=None):
    """Active grants, but for the warm pools' that `daemon_pid` keeps."""
    out = subprocess.run([CORDON, "grants", "--json", "--state-dir", state_dir],
                         capture_output=True, text=True, check=True)
    return [g for g in json.loads(out.stdout)
            if g["owner"] not in _POOL_OWNERS or g["supervisor"]["pid"] != daemon_pid]


def test_a_disconnected_streaming_client_cancels_its_run(daemon, client, tmp_path):
    pidfile = tmp_path / "gc.pid"

    class Hangup(Exception):
        pass

    def on_output(stream, data):
        raise Hangup()  # leave at the first event, as a client that goes away

    with pytest.raises(Hangup):
        # Without isolation: the test watches the grandchild by its host pid.
        client.run(shell=f"setsid sleep 60 & echo $! > {pidfile}; echo started; sleep 60",
                   isolation="none", on_output=on_output)
    client._connection().close()
    pid = int(pidfile.read_text())
    assert _wait_for(lambda: not _alive(pid))

    def recorded():
        grants = json.loads(subprocess.run(
            [CORDON, "grants", "--all", "--json", "--state-dir", daemon.state_dir],
            capture_output=True, text=True).stdout)
        return [g for g in grants if g["spec"].get("shell", "").startswith("setsid sleep 60")]

    assert _wait_for(lambda: recorded() and recorded()[0]["state"] == "released")
    assert recorded()[0]["outcome"] == "cancelled"


def test_concurrent_creates_start_one_shell_and_twenty_sessions_run_in_parallel(daemon, tmp_path):
    results = []
    threads = [threading.Thread(target=lambda: results.append(daemon.client().session("py-once")))
               for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({s.info["grant_id"] for s in results}) == 1
    # Once the warm pool has refilled (nothing else starts then), one shell
    # is the session's and the others the pool's (none without namespaces).
    pool = 2 if _sandbox_namespaces() else 0
    assert _wait_for(lambda: daemon.client().health()["shells_warm"] == pool and
                     daemon.client().health()["runs_warm"] == pool)
    shells = [p for p in _pids_in_cgroup_tree(CGROUP_ROOT) - _pool_pids(daemon.state_dir, daemon.pid)
              if _read_proc(p, "comm") == b"bash\n"]
    # (Counted by their cgroups, where this user has any.)
    assert len(shells) == 1 or not cgroups_hold_trees()
    # Every runtime started is a grant: exactly one was the session's.
    grants = json.loads(subprocess.run(
        [CORDON, "grants", "--all", "--json", "--state-dir", daemon.state_dir],
        capture_output=True, text=True, check=True).stdout)
    assert len([g for g in grants if g["owner"] == "session:py-once"]) == 1
    results[0].close()

    shared = tmp_path / "barrier"
    shared.mkdir()
    # Without isolation: the sessions meet in a directory of the host.
    sessions = [daemon.client().session(f"py-par-{i}", isolation="none") for i in range(20)]
    outputs = [None] * 20

    def run(i):
        # Finishes only if all twenty run at the same time.
        outputs[i] = sessions[i].exec(
            f"touch {shared}/r{i}; while [ $(ls {shared} | wc -l) -lt 20 ]; do sleep 0.02; done;"
            f" echo {i}", timeout_ms=60000)["stdout"]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outputs == [f"{i}\n" for i in range(20)]
    for s in sessions:
        s.close()


def test_idle_sessions_are_culled(client):
    s = client.session("py-idle", ttl_s=1)
    tree = _sandbox_tree(s.exec(PRINT_TREE)["stdout"])
    assert tree
    assert _wait_for(lambda: s.state == "closed")
    assert not _any_running(tree)


def test_sigkill_restart_recovers_and_sigterm_leaves_nothing(tmp_path):
    state = tmp_path / "state"
    first = Daemon(state)
    c = first.client()
    s = c.session("py-keep")
    s.put_file("data.txt", b"kept")
    tree = _sandbox_tree(s.exec("setsid sleep 300 & " + PRINT_TREE)["stdout"])
    assert len(tree) >= _visible_tree()  # init, the shell, the escapee
    first.proc.send_signal(signal.SIGKILL)
    first.proc.wait(timeout=30)
    first.log.close()
    # (The shell ends on its own once its pipes close, and with it the
    # sandbox's init and the namespace: the test cannot count on finding
    # them alive here, only on finding none after the restart.)

    second = Daemon(state)
    try:
        # Dead before the restarted daemon answered.
        assert not _any_running(tree)
        assert _active_grants(str(state), second.pid) == []
        c = second.client()
        assert c.request("GET", "/v1/sessions/py-keep")["state"] == "lost"
        with pytest.raises(ConflictError):
            c.request("POST", "/v1/sessions/py-keep/exec", {"command": "true"})
        again = c.session("py-keep")
        assert again.info["generation"] == 2
        assert again.get_file("data.txt") == b"kept"
        fresh = _sandbox_tree(again.exec("setsid sleep 300 & " + PRINT_TREE)["stdout"])
        assert len(fresh) >= _visible_tree()
    finally:
        assert second.stop() == 0  # SIGTERM: everything torn down, exit 0
    assert not _any_running(fresh)
    assert _active_grants(str(state)) == []
    for mount in _cgroup_mounts():
        _remove_tree(mount + CGROUP_ROOT)


def test_a_second_daemon_on_the_same_state_directory_is_refused(tmp_path):
    # cordon mcp beside cordon serve, both on the default state directory:
    # the second would take the first's live sessions for a crashed
    # daemon's, record them lost and sweep their workspaces.
    state = tmp_path / "state"
    first = Daemon(state)
    try:
        s = first.client().session("held")
        s.put_file("data.txt", b"kept")
        for door in (["serve", "--listen", "127.0.0.1:0"], ["mcp"]):
            r = subprocess.run([CORDON, *door, "--state-dir", str(state),
                                "--cgroup-root", CGROUP_ROOT],
                               stdin=subprocess.DEVNULL, capture_output=True, text=True,
                               timeout=60)
            assert r.returncode != 0, door
            assert f"pid {first.pid}" in r.stderr and str(state) in r.stderr, r.stderr
        # The first daemon's session is untouched.
        assert first.client().request("GET", "/v1/sessions/held")["state"] == "ready"
        assert s.exec("cat data.txt")["stdout"] == "kept"
    finally:
        assert first.stop() == 0
    # Once it is gone, the directory is free again.
    second = Daemon(state)
    assert second.stop() == 0


def test_signals_after_the_first_sigterm_do_not_change_how_the_daemon_exits(tmp_path):
    # A service manager or an impatient operator may signal again while the
    # daemon stops. Its stop still ends in exit 0 after a verified teardown:
    # a later SIGTERM or SIGINT, however late in its exit, is not a kill.
    d = Daemon(tmp_path / "state")
    s = d.client().session("py-twice")
    tree = _sandbox_tree(s.exec(PRINT_TREE)["stdout"])
    d.proc.send_signal(signal.SIGTERM)
    sent = 0
    while d.proc.poll() is None:
        d.proc.send_signal(signal.SIGTERM if sent % 2 == 0 else signal.SIGINT)
        sent += 1
        time.sleep(0.0005)
    assert d.stop() == 0, f"after {sent} more signals"
    assert sent > 0
    assert not _any_running(tree)
    assert _active_grants(str(tmp_path / "state")) == []


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGUSR1, signal.SIGQUIT])
def test_any_signal_that_would_kill_the_daemon_stops_it_instead(tmp_path, sig):
    # Before, these killed it at once: every sandbox ran on, unsupervised,
    # until a next daemon started and reaped it.
    d = Daemon(tmp_path / "state")
    s = d.client().session("py-signalled")
    tree = _sandbox_tree(s.exec(PRINT_TREE)["stdout"])
    d.proc.send_signal(sig)
    assert d.proc.wait(timeout=60) == 0  # a stop, all torn down, not a kill
    assert d.stop() == 0  # (its log checked for sanitizer reports)
    assert not _any_running(tree)
    assert _active_grants(str(tmp_path / "state")) == []
    with open(d.log_path) as f:
        assert f'"signal":{int(sig)}' in f.read().replace(" ", "")


def test_nothing_of_the_daemons_environment_reaches_a_session_or_run(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-must-not-leak")
    monkeypatch.setenv("DATABASE_URL", "postgres://user:secret@db/x")
    d = Daemon(tmp_path / "state")
    try:
        c = d.client()
        with c.session("py-env", env={"MINE": "1"}) as s:
            env = s.exec("env")["stdout"]
        run_env = c.run(argv=["/usr/bin/env"])["stdout"]
        for text in (env, run_env):
            assert "sk-must-not-leak" not in text and "secret" not in text
        assert "MINE=1" in env and "HOME=" in env and "TERM=dumb" in env
        assert run_env == ""
    finally:
        assert d.stop() == 0
