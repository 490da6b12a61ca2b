"""The daemon's default bounds and ceilings (cordon serve --default-*, --max-*)
against a real daemon: a session or run that declares no limits still gets
memory, pids and CPU bounds; at a bound the sandbox sees EAGAIN or an OOM
kill, the result says so, and the session, the daemon and other sessions go
on; a limit above a ceiling is refused with 422 and changes nothing."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "clients", "python"))

from cordon_client import AboveCeilingError, ValidationError  # noqa: E402

from daemon_support import (  # noqa: E402  (tests/integration/daemon_support.py)
    CGROUP_ROOT,
    Daemon,
    cgroup_mounts,
    remove_tree,
)

DEFAULT_PIDS = 48
DEFAULT_MEMORY = 192 << 20
MAX_MEMORY = 512 << 20

# Forks children that wait on a pipe until fork fails, then lets them go.
FORK_LOOP = r"""
import os
r, w = os.pipe()
n, err = 0, 0
while n < 5000:
    try:
        pid = os.fork()
    except OSError as e:
        err = e.errno
        break
    if pid == 0:
        os.close(w)
        os.read(r, 1)
        os._exit(0)
    n += 1
os.close(w)
for _ in range(n):
    os.wait()
print("forked", n, "errno", err)
"""

# Touches every page, so the memory is charged (a calloc'ed buffer would not be).
HOG_ARGV = ["/usr/bin/python3", "-c", 'b = bytearray(b"x") * (1 << 30); print(len(b))']
HOG = " ".join(HOG_ARGV[:2]) + " '" + HOG_ARGV[2] + "'"


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    d = Daemon(tmp_path_factory.mktemp("bounds") / "state",
               "--default-pids", str(DEFAULT_PIDS), "--default-memory", str(DEFAULT_MEMORY),
               "--max-memory", str(MAX_MEMORY), "--max-pids", "1024", "--max-cpu", "2")
    yield d
    assert d.stop() == 0
    for mount in cgroup_mounts():
        remove_tree(mount + CGROUP_ROOT)


@pytest.fixture()
def client(daemon):
    return daemon.client()


def capability(client, name):
    return next(c for c in client.probe()["capabilities"] if c["capability"] == name)


def require_enforceable(client, name):
    status = capability(client, name)
    if not status["enforceable"]:
        pytest.skip(f"{name} cannot be enforced on this host: {status['reason']}")


def test_a_session_that_declares_nothing_shows_and_gets_the_default_bounds(client):
    with client.session() as s:
        limits = s.info["limits"]
        assert limits["pids"] == DEFAULT_PIDS
        assert limits["memory_bytes"] == DEFAULT_MEMORY
        assert limits["cpu"] == 1
        assert limits["disk_bytes"] == 10 << 30
        assert limits["disk_inodes"] == 1 << 20
        assert sorted(s.info["spec"]["defaulted"]) == ["cpu", "disk", "memory", "process_count"]
        grant = s.info["grant"]
        degraded = {d["capability"]: d["reason"] for d in grant["degraded"]}
        for name in ("memory", "process_count", "cpu", "disk"):
            # A default the host cannot enforce is degraded with its reason,
            # never a refusal; one it can is enforced.
            if capability(client, name)["enforceable"]:
                assert name in grant["enforced"], grant
            else:
                assert degraded.get(name), grant
        if "memory" in grant["enforced"] and "process_count" in grant["enforced"]:
            groups = s.exec("cat /proc/self/cgroup")["stdout"]
            # The shell sits in a group of its own with memory and pids
            # bounds (v1 lines name the controller, v2 lines are "0::").
            assert grant["id"] in groups, groups
            mechanisms = grant["mechanisms"]
            for name, controller in (("memory", "memory"), ("process_count", "pids")):
                if mechanisms[name].startswith("cgroup1"):
                    line = next(l for l in groups.splitlines() if controller in l.split(":")[1])
                    assert grant["id"] in line, groups


def test_a_fork_loop_in_a_session_that_declared_nothing_stops_at_the_default_pids(client):
    require_enforceable(client, "process_count")
    with client.session() as s, client.session() as other:
        r = s.exec("/usr/bin/python3 -c '" + FORK_LOOP.replace("'", "'\\''") + "'",
                   timeout_ms=60000)
        words = r["stdout"].split()
        assert words[:1] == ["forked"], r
        forked, err = int(words[1]), int(words[3])
        assert forked < DEFAULT_PIDS, r
        assert err == 11, r  # EAGAIN
        assert s.exec("echo still here")["stdout"] == "still here\n"
        assert other.exec("echo unaffected")["stdout"] == "unaffected\n"
    assert client.health()["status"] == "ok"


def test_a_memory_hog_in_a_session_is_oom_killed_and_the_result_says_so(client):
    require_enforceable(client, "memory")
    with client.session() as s, client.session() as other:
        r = s.exec(HOG, timeout_ms=60000)
        assert r["oom_killed"] is True, r
        assert r["exit_code"] == 128 + 9, r
        assert not r["invalidated"] and not r["shell_restarted"], r
        # The shell was not the biggest process: it lives on.
        assert s.exec("echo still here")["stdout"] == "still here\n"
        assert s.exec("true")["oom_killed"] is False
        assert other.exec("echo unaffected")["stdout"] == "unaffected\n"
    assert client.health()["status"] == "ok"


def test_a_memory_hog_run_that_declared_nothing_is_oom_killed(client):
    require_enforceable(client, "memory")
    r = client.run(argv=HOG_ARGV)  # the main process itself is killed
    assert r["outcome"] == "oom_killed", r
    assert r["oom_killed"] is True
    assert r["limits"]["memory_bytes"] == DEFAULT_MEMORY
    assert r["release"]["dead"] is True
    ok = client.run(argv=["/bin/true"])
    assert ok["outcome"] == "exited" and ok["limits"]["pids"] == DEFAULT_PIDS


def test_a_run_that_sets_its_own_limits_gets_them_up_to_the_ceilings(client):
    r = client.run(argv=["/bin/true"], limits={"memory_bytes": MAX_MEMORY, "pids": 100},
                   permissive=True)
    assert r["outcome"] == "exited"
    assert r["limits"]["memory_bytes"] == MAX_MEMORY
    assert r["limits"]["pids"] == 100
    assert r["limits"]["cpu"] == 1  # still the default


@pytest.mark.parametrize("limits,field,ceiling", [
    ({"memory_bytes": MAX_MEMORY + 1}, "limits.memory_bytes", str(MAX_MEMORY)),
    ({"pids": 1025}, "limits.pids", "1024"),
    ({"cpu": 2.5}, "limits.cpu", "2"),
])
def test_a_limit_above_a_ceiling_is_422_naming_the_field_and_the_ceiling(
        daemon, client, limits, field, ceiling):
    sessions_before = client.sessions()
    for call in (lambda: client.run(argv=["/bin/true"], limits=limits),
                 lambda: client.session("over-ceiling", limits=limits)):
        with pytest.raises(AboveCeilingError) as e:
            call()
        assert e.value.status == 422
        assert e.value.code == "above_ceiling"
        assert e.value.field == field
        assert ceiling in e.value.message and "--max-" in e.value.message, e.value.message
    assert client.sessions() == sessions_before  # nothing was made


def test_an_explicit_limit_the_host_cannot_enforce_is_refused_where_a_default_is_degraded(
        client):
    missing = [c["capability"] for c in client.probe()["capabilities"]
               if c["capability"] in ("memory", "process_count", "cpu", "disk")
               and not c["enforceable"]]
    if not missing:
        pytest.skip("every bounded capability is enforceable here: nothing is degraded")
    field = {"memory": "memory_bytes", "process_count": "pids", "cpu": "cpu",
             "disk": "disk_bytes"}[missing[0]]
    with pytest.raises(ValidationError) as e:
        client.run(argv=["/bin/true"], limits={field: 64 << 20 if field.endswith("bytes") else 1})
    assert e.value.code == "refused" and missing[0] in e.value.message
    r = client.run(argv=["/bin/true"])
    assert missing[0] in [d["capability"] for d in r["grant"]["degraded"]]


def test_cordon_serve_refuses_a_default_above_its_ceiling(tmp_path):
    with pytest.raises(RuntimeError):
        Daemon(tmp_path / "state", "--default-pids", "100", "--max-pids", "50")
    with open(tmp_path / "daemon.log") as f:
        log = f.read()
    assert "--default-pids (100) is above --max-pids (50)" in log, log


def test_a_python_kernel_that_is_itself_oom_killed_ends_invalidated_and_says_so(client):
    require_enforceable(client, "memory")
    created = client.request("POST", "/v1/sessions", {"kind": "python"})
    other = client.session()
    try:
        base = "/v1/sessions/" + created["id"]
        assert client.request("POST", base + "/exec", {"code": "1 + 1"})["status"] == "ok"
        r = client.request("POST", base + "/exec",
                           {"code": 'b = bytearray(b"x") * (1 << 30)', "timeout_ms": 60000})
        assert r["oom_killed"] is True, r
        assert r["invalidated"] is True, r
        assert client.request("GET", base)["state"] == "invalidated"
        assert other.exec("echo unaffected")["stdout"] == "unaffected\n"
        assert client.health()["status"] == "ok"
    finally:
        other.close()
        client.request("DELETE", "/v1/sessions/" + created["id"])
