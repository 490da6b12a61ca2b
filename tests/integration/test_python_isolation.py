"""Python sessions under every isolation level, against a real daemon.

ipykernel binds a ZeroMQ socket on tcp://127.0.0.1 for its subprocesses'
output, and libzmq asks getifaddrs (route netlink) first: where the filter
refuses netlink (strict, or no network namespace at all) the refusal must be
one libzmq survives, or the kernel aborts during startup (it did, with
`ip_resolver.cpp:542`). Each level's session must start, keep its state
between executions, and say in its grant which level it got."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "clients", "python"))

from daemon_support import CGROUP_ROOT, Daemon, cgroup_mounts, remove_tree  # noqa: E402


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    d = Daemon(tmp_path_factory.mktemp("pyiso") / "state")
    yield d
    assert d.stop() == 0
    for mount in cgroup_mounts():
        remove_tree(mount + CGROUP_ROOT)


@pytest.mark.parametrize("isolation", ["strict", "standard", "none"])
def test_a_python_session_starts_and_keeps_state_under(daemon, isolation):
    client = daemon.client()
    sid = f"py-{isolation}"
    view = client.request("POST", "/v1/sessions",
                          {"kind": "python", "id": sid, "isolation": isolation})
    try:
        assert view["execution_state"] == "idle", view
        assert view["spec"]["isolation"]["level"] == isolation, view["spec"]
        first = client.request("POST", f"/v1/sessions/{sid}/exec", {"code": "x = 6 * 7"})
        assert first["status"] == "ok", first
        second = client.request("POST", f"/v1/sessions/{sid}/exec",
                                {"code": "import subprocess\nprint(x)\n"
                                         "subprocess.run(['echo', 'from a child'])"})
        assert second["status"] == "ok", second
        # The child's output reaches the client only through that pipe.
        assert second["stdout"] == "42\nfrom a child\n", second
    finally:
        client.request("DELETE", f"/v1/sessions/{sid}")
