"""The Jupyter Kernel Gateway surface (issue 6), driven the way existing
Kernel Gateway clients drive it (kernel_gateway.py: requests + a new
websocket per execution, execute_request version 5.3, messages filtered by
parent id, complete on execute_reply and idle).

The protocol tests run against two targets: Debian's jupyter-server (the
reference implementation of the protocol, started here) and `cordon serve`
(kernels at /api/kernels). The cordon-only tests at the end check what
jupyter-server does not promise: containment, the interrupt escalation,
the files API, the environment, recovery after SIGKILL.

Processes are only ever looked at by pid, found by what the test gave
them: a KERNEL_GWTEST_MARK=<random> in the kernel's environment (cordon
passes KERNEL_* keys in), the kernel's connection file in its command line,
or membership of the test's own cgroup root. Nothing is signalled but the
daemons the tests started.

    ctest --test-dir build -R gateway          (what `make test` runs)
    CORDON_BINARY=build/cordon /usr/bin/python3 -m pytest -q -rs tests/integration/test_gateway.py
"""
import contextlib
import json
import os
import re
import secrets
import subprocess
import sys
import time
import uuid

import pytest
import requests
import websocket

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "clients", "python"))

from cordon_client import ConflictError, NotFoundError  # noqa: E402
from cordon_client.client import Session  # noqa: E402
from daemon_support import (  # noqa: E402
    CGROUP_ROOT,
    Daemon,
    chain_below,
    identity,
    logged,
    pids_in_cgroup_tree,
    pids_with_cmdline,
    pids_with_environ,
    read_proc,
    remove_cgroup_root,
    still_running,
    wait_for,
)
from kernel_gateway import (  # noqa: E402
    Execution,
    ExecutionTimeout,
    Gateway,
    JupyterServer,
    receive,
)

GW_CGROUP_ROOT = CGROUP_ROOT + "-gw"
# What the daemon's option for the interrupt escalation is called, and the
# grace the escalation tests use (the default is 10 s).
INTERRUPT_GRACE = ["--interrupt-grace", "2s"]
INTERRUPT_GRACE_S = 2.0
SECRET = "cordon-test-secret-" + secrets.token_hex(12)


# --- targets ---------------------------------------------------------------

class Target:
    """One server speaking the protocol, and what differs between them."""

    def __init__(self, name, gw, unauthorized, server_pid, daemon=None):
        self.name = name
        self.gw = gw
        self.server_pid = server_pid
        # The Kernel Gateway and cordon answer 401 to a missing or wrong
        # token; jupyter-server 1.23 answers 403 to API requests.
        self.unauthorized = unauthorized
        self.daemon = daemon

    @property
    def is_cordon(self):
        return self.daemon is not None


def start_cordon(state_dir, *extra, cgroup_root):
    """A daemon whose environment holds SECRET (kernels must never see it).
    Without warm shells or run sandboxes: these tests account for every
    process in the tree, and the pools have tests of their own
    (test_shell_pool.py, test_run_pool.py)."""
    env = dict(os.environ, CORDON_TEST_SECRET=SECRET)
    return Daemon(state_dir, "--prespawn-shells", "0", "--prespawn-runs", "0", *extra,
                  cgroup_root=cgroup_root, env=env)


@contextlib.contextmanager
def own_daemon(tmp_path, suffix, *extra):
    """A daemon of the test's own (start_cordon; its cgroup root is
    GW_CGROUP_ROOT + `suffix`) and a Gateway client of it, stopped with
    stop_cordon at the end."""
    d = start_cordon(tmp_path / "state", *extra, cgroup_root=GW_CGROUP_ROOT + suffix)
    try:
        yield d, Gateway(d.url, d.token)
    finally:
        stop_cordon(d)


def stop_cordon(d):
    """SIGTERM: every kernel torn down (verified) before the daemon exits 0;
    nothing may be left in its cgroup tree then."""
    status = d.stop()
    left = pids_in_cgroup_tree(d.cgroup_root)
    remove_cgroup_root(d.cgroup_root)
    assert status == 0, f"cordon serve exited {status}; see {d.log_path}"
    assert left == set(), f"left after SIGTERM: {describe(left)}"


@pytest.fixture(scope="module", params=["jupyter-server", "cordon"])
def target(request, tmp_path_factory):
    if request.param == "jupyter-server":
        if subprocess.run(["/usr/bin/python3", "-c", "import jupyter_server"],
                          capture_output=True).returncode != 0:
            pytest.fail("Debian's python3-jupyter-server is missing: `make deps` installs it "
                        "(apt-get install python3-jupyter-server)")
        server = JupyterServer(tmp_path_factory.mktemp("jupyter-server"))
        yield Target("jupyter-server", Gateway(server.url, server.token), 403, server.pid)
        server.stop()
    else:
        root = GW_CGROUP_ROOT + "-target"
        d = start_cordon(tmp_path_factory.mktemp("cordon") / "state",
                         cgroup_root=root)
        yield Target("cordon", Gateway(d.url, d.token), 401, d.pid, daemon=d)
        stop_cordon(d)


@pytest.fixture(scope="module")
def cordon(tmp_path_factory):
    """cordon alone, for what only cordon promises."""
    root = GW_CGROUP_ROOT + "-only"
    d = start_cordon(tmp_path_factory.mktemp("cordon-only") / "state",
                     cgroup_root=root)
    yield Target("cordon", Gateway(d.url, d.token), 401, d.pid, daemon=d)
    stop_cordon(d)


# --- kernels and their processes -------------------------------------------

class Kernel:
    def __init__(self, target, env=None):
        self.target = target
        self.gw = target.gw
        self.mark = uuid.uuid4().hex
        self.env = dict(env or {}, KERNEL_GWTEST_MARK=self.mark)
        self.model = self.gw.create_kernel(env=self.env)
        self.id = self.model["id"]
        self.deleted = False
        self.gw.wait_ready(self.id)
        self.connection_file = self.run(
            "import sys; print(sys.argv[sys.argv.index('-f') + 1], end='')").stdout
        # Every process between the server and the kernel too (cordon: the
        # sandbox's init), by identity, so that a recycled pid is not taken
        # for a survivor.
        self.identities = {identity(p) for pid in self.pids()
                           for p in chain_below(pid, target.server_pid) or [pid]} - {None}

    def running(self):
        """Those of the kernel's processes seen at start that still run, and
        any process carrying its mark now."""
        return {i[0] for i in self.identities if still_running(i)} | self.pids()

    def run(self, code, timeout=60):
        e = self.gw.execute(self.id, code, timeout=timeout)
        assert e.complete
        return e

    def pids(self):
        """The kernel's live processes, seen from the host: those carrying its
        mark in their environment, and those whose command line names its
        connection file when that file's name is its own (jupyter-server:
        kernel-<id>.json; unknown for cordon, hence the mark)."""
        found = pids_with_environ(f"KERNEL_GWTEST_MARK={self.mark}".encode())
        if self.id in self.connection_file:
            found |= pids_with_cmdline(self.connection_file.encode())
        return found

    def delete(self):
        r = self.gw.delete(self.id)
        self.deleted = True
        return r


def describe(pids):
    """What a test says about processes it found alive."""
    return {p: {"cmdline": read_proc(p, "cmdline").replace(b"\0", b" ").decode(errors="replace"),
                "stat": read_proc(p, "stat").decode(errors="replace")[:120],
                "cgroup": read_proc(p, "cgroup").decode(errors="replace").strip()}
            for p in sorted(pids)}


@pytest.fixture()
def kernel(target):
    k = Kernel(target)
    # The process checks below can fail only if they find the kernel alive.
    assert k.pids() and k.identities, \
        f"the kernel's processes cannot be found from the host ({target.name})"
    yield k
    if not k.deleted:
        k.delete()


def v1(target):
    return target.daemon.client()


# --- the protocol, against both --------------------------------------------

def test_api_version_and_kernelspecs(target):
    r = target.gw.api()
    assert r.status_code == 200 and isinstance(r.json()["version"], str)
    r = target.gw.request("GET", "/api/kernelspecs")
    assert r.status_code == 200
    specs = r.json()
    assert specs["default"] in specs["kernelspecs"]
    default = specs["kernelspecs"][specs["default"]]
    assert default["name"] == specs["default"]
    for key in ("display_name", "language", "interrupt_mode", "env", "metadata"):
        assert key in default["spec"], key
    assert default["spec"]["language"] == "python"
    assert "resources" in default


def test_create_list_get_and_the_kernel_model(kernel):
    gw = kernel.gw
    model = kernel.model
    assert str(uuid.UUID(model["id"])) == model["id"]
    for key in ("name", "last_activity", "execution_state", "connections"):
        assert key in model, key
    assert kernel.id in [k["id"] for k in gw.kernels()]
    r = gw.kernel(kernel.id)
    assert r.status_code == 200 and r.json()["id"] == kernel.id
    # It answers: the model comes to say idle. (jupyter-server follows the
    # kernel's status messages on a subscription of its own, which can miss
    # the first ones and then says `starting` until the next execution.)
    assert wait_for(lambda: kernel.run("1+1").text == "2" and
                    gw.kernel(kernel.id).json()["execution_state"] == "idle"), \
        gw.kernel(kernel.id).json()


def test_execute_result_stream_display_and_error(kernel):
    e = kernel.run("1+1")
    assert e.text == "2"
    assert e.reply["status"] == "ok" and isinstance(e.reply["execution_count"], int)
    assert e.states[-1] == "idle" and e.busy

    e = kernel.run("print('hello'); import sys; print('oops', file=sys.stderr)")
    assert e.stdout == "hello\n" and e.stderr == "oops\n" and e.results == []

    e = kernel.run("from IPython.display import display, HTML\n"
                   "display(HTML('<b>rich</b>'))")
    assert len(e.displays) == 1
    assert e.displays[0]["text/html"] == "<b>rich</b>"
    assert "text/plain" in e.displays[0]

    e = kernel.run("def f():\n    return 1/0\nf()")
    assert e.reply["status"] == "error"
    assert e.error["ename"] == "ZeroDivisionError"
    assert e.error["evalue"] == "division by zero"
    # The traceback names the frames (IPython colours it with ANSI escapes).
    traceback = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(e.error["traceback"]))
    assert "f()" in traceback and "return 1/0" in traceback and "ZeroDivisionError" in traceback
    assert e.reply["ename"] == "ZeroDivisionError"


def test_state_is_kept_between_executions_and_websockets(kernel):
    kernel.run("counter = 41\nimport os")
    assert kernel.run("counter += 1\ncounter").text == "42"
    ws = kernel.gw.connect(kernel.id)
    try:
        assert kernel.gw.execute_on(ws, "counter").text == "42"
        assert kernel.gw.execute_on(ws, "counter * 2").text == "84"
    finally:
        ws.close()


def test_messages_carry_msg_id_msg_type_and_channel(kernel):
    e = kernel.run("1+1")
    kinds = {}
    for m in e.messages:
        assert m["msg_id"] == m["header"]["msg_id"]
        assert m["msg_type"] == m["header"]["msg_type"]
        kinds[m["msg_type"]] = m["channel"]
    assert kinds["execute_reply"] == "shell"
    assert kinds["execute_result"] == "iopub" and kinds["status"] == "iopub"


def test_a_message_without_channel_buffers_or_date_goes_to_shell(target, kernel):
    ws = kernel.gw.connect(kernel.id)
    try:
        msg_id = uuid.uuid4().hex
        msg = {
            "header": {"msg_id": msg_id, "username": "test", "session": kernel.gw.session_id,
                       "msg_type": "execute_request", "version": "5.3"},
            "parent_header": {}, "metadata": {},
            "content": {"code": "6*7", "silent": False},
        }
        if target.is_cordon:
            del msg["metadata"]  # cordon accepts that too; jupyter-server 1.23 fails on it
        ws.send(json.dumps(msg))
        e = receive(ws, Execution(msg_id), lambda e: e.complete, 60)
        assert e.text == "42"
    finally:
        ws.close()


def test_every_connection_sees_the_iopub_stream(kernel):
    watcher = kernel.gw.connect(kernel.id, session_id=uuid.uuid4().hex)  # another client
    try:
        e = kernel.run("print('to everyone')")
        assert e.stdout == "to everyone\n"
        # The watcher sent nothing; it sees the same output, by the same parent.
        seen = receive(watcher, Execution(e.msg_id), lambda x: x.idle, 30)
        assert seen.stdout == "to everyone\n"
    finally:
        watcher.close()


def test_a_client_that_reconnects_gets_what_the_kernel_sent_while_it_was_away(target, kernel):
    """A browser tab's websocket drops mid-cell and JupyterLab reconnects with
    the same session id: what the cell printed meanwhile, and its reply,
    arrive then, as Jupyter servers replay them. Another session id gets
    none of it. (Before, cordon dropped them: the cell never ended.)"""
    gw = kernel.gw

    def leave_mid_cell():
        a = Raw(gw, kernel.id)
        msg_id = a.send(ws_message(
            "shell", "execute_request",
            {"code": "import time\nprint('before', flush=True)\ntime.sleep(2)\n"
                     "print('after', flush=True)",
             "silent": False, "store_history": True, "user_expressions": {},
             "allow_stdin": False, "stop_on_error": True}, a.session))
        assert a.line(msg_id) == "before\n"
        a.close()
        assert wait_for(lambda: gw.kernel(kernel.id).json()["execution_state"] == "idle"), \
            gw.kernel(kernel.id).json()
        return a.session, msg_id

    session, msg_id = leave_mid_cell()
    back = Raw(gw, kernel.id, session_id=session)
    try:
        reply = back.until(lambda m: m["header"]["msg_type"] == "execute_reply" and
                           m["parent_header"].get("msg_id") == msg_id, 60, "the kept reply")
        assert reply["content"]["status"] == "ok"
        text = "".join(m["content"]["text"] for _, m in back.frames
                       if m["header"]["msg_type"] == "stream" and
                       m["parent_header"].get("msg_id") == msg_id)
        assert "after\n" in text, text
    finally:
        back.close()

    if not target.is_cordon:
        # jupyter-server's model can still say idle from the cell before
        # (its own subscription misses status messages): the client below
        # could connect while the cell runs, and see its end live.
        return
    session, msg_id = leave_mid_cell()
    other = Raw(gw, kernel.id)
    try:
        reply, _ = other.execute("1+1")
        assert reply["status"] == "ok"
        assert not [m for _, m in other.frames if m["parent_header"].get("msg_id") == msg_id]
    finally:
        other.close()


def test_interrupt_a_sleep_comes_back_idle_and_keeps_state(kernel):
    gw = kernel.gw
    kernel.run("kept = 'yes'")
    ws = gw.connect(kernel.id)
    try:
        e = gw.send_execute(ws, "import time\nprint('sleeping', flush=True)\ntime.sleep(100)")
        receive(ws, e, lambda x: "sleeping" in x.stdout, 30)
        r = gw.interrupt(kernel.id)
        assert r.status_code == 204, (r.status_code, r.text)
        receive(ws, e, lambda x: x.complete, 30)
        assert e.reply["status"] == "error" and e.reply["ename"] == "KeyboardInterrupt"
        # IPython reports it as an iopub error, or (when the signal lands
        # while the print above is still flushing) as a bare line on stderr.
        assert (e.error and e.error["ename"] == "KeyboardInterrupt") or \
            "KeyboardInterrupt" in e.stderr, [m["msg_type"] for m in e.messages]
        assert e.states[-1] == "idle"
        assert gw.execute_on(ws, "kept").text == "'yes'"
    finally:
        ws.close()
    assert kernel.run("kept").text == "'yes'"


def test_an_interrupt_is_delivered_once(kernel):
    # Code that catches KeyboardInterrupt to clean up must not get a second
    # one inside its handler: one POST /interrupt, one SIGINT seen.
    gw = kernel.gw
    ws = gw.connect(kernel.id)
    try:
        e = gw.send_execute(
            ws,
            "import signal, time\n"
            "seen = []\n"
            "previous = signal.signal(signal.SIGINT, lambda *_: seen.append(time.monotonic()))\n"
            "try:\n"
            "    print('waiting', flush=True)\n"
            "    deadline = time.monotonic() + 60\n"
            "    # Until 1 s after the first SIGINT: time for a second one to arrive.\n"
            "    while time.monotonic() < deadline and not (seen and time.monotonic() > seen[0] + 1):\n"
            "        time.sleep(0.01)\n"
            "finally:\n"
            "    signal.signal(signal.SIGINT, previous)\n"
            "print('signals', len(seen))")
        receive(ws, e, lambda x: "waiting" in x.stdout, 30)
        assert gw.interrupt(kernel.id).status_code == 204
        receive(ws, e, lambda x: x.complete, 90)
        assert e.reply["status"] == "ok"
        assert e.stdout == "waiting\nsignals 1\n"
    finally:
        ws.close()


def test_restart_keeps_the_id_and_loses_the_state(target, kernel):
    gw = kernel.gw
    kernel.run("lost = 1\nopen('survives-restart.txt', 'w').write('still here')")
    before = {identity(p) for p in kernel.pids()} - {None}  # the kernel itself
    assert before
    r = gw.restart(kernel.id)
    assert r.status_code == 200, (r.status_code, r.text)
    assert r.json()["id"] == kernel.id
    gw.wait_ready(kernel.id)
    e = kernel.run("lost")
    assert e.reply["status"] == "error" and e.error["ename"] == "NameError"
    assert kernel.id in [k["id"] for k in gw.kernels()]
    # A new kernel process replaced the old one (which is gone).
    assert wait_for(lambda: not any(still_running(i) for i in before)), \
        describe({i[0] for i in before if still_running(i)})
    if target.is_cordon:
        # The same session and workspace (jupyter-server keeps its cwd too,
        # but promises nothing about it).
        assert kernel.run("print(open('survives-restart.txt').read(), end='')").stdout == \
            "still here"
        assert v1(target).request("GET", f"/v1/sessions/{kernel.id}")["state"] in ("ready", "busy")


def test_delete_answers_204_and_leaves_no_process(target, kernel):
    r = kernel.delete()
    assert r.status_code == 204, (r.status_code, r.text)
    assert target.gw.kernel(kernel.id).status_code == 404
    assert kernel.id not in [k["id"] for k in target.gw.kernels()]
    assert wait_for(lambda: not kernel.running()), f"left alive: {describe(kernel.running())}"
    assert target.gw.delete(kernel.id).status_code == 404
    if target.is_cordon:
        # The kernel was a cordon session: it is closed (or gone) now.
        try:
            state = v1(target).request("GET", f"/v1/sessions/{kernel.id}")["state"]
        except NotFoundError:
            state = "closed"
        assert state == "closed"


def test_token_is_required_on_http_and_websocket(target, kernel):
    gw = target.gw
    for headers in ({}, {"Authorization": "token wrong"}, {"Authorization": "Bearer wrong"}):
        for method, path in (("GET", "/api/kernels"), ("POST", "/api/kernels"),
                             ("GET", f"/api/kernels/{kernel.id}"),
                             ("POST", f"/api/kernels/{kernel.id}/interrupt"),
                             ("DELETE", f"/api/kernels/{kernel.id}")):
            r = gw.request(method, path, body={} if method == "POST" else None,
                           headers=headers, auth=False)
            assert r.status_code == target.unauthorized, (method, path, headers, r.status_code)
    assert gw.kernel(kernel.id).status_code == 200  # not deleted by the refused DELETE

    for kwargs in (dict(header=False), dict(token="wrong")):
        with pytest.raises(websocket.WebSocketBadStatusException) as e:
            gw.connect(kernel.id, **kwargs)
        assert e.value.status_code == target.unauthorized, kwargs

    # ?token= stands in for the header, on HTTP and on the websocket.
    r = requests.get(f"{gw.url}/api/kernels/{kernel.id}?token={gw.token}", timeout=30)
    assert r.status_code == 200 and r.json()["id"] == kernel.id
    ws = gw.connect(kernel.id, header=False, query_token=gw.token)
    try:
        assert gw.execute_on(ws, "1+1").text == "2"
    finally:
        ws.close()
    if target.is_cordon:
        r = gw.request("GET", "/api/kernels", headers={"Authorization": f"Bearer {gw.token}"},
                       auth=False)
        assert r.status_code == 200


def test_unknown_kernel_is_404_and_bad_bodies_400(target):
    gw = target.gw
    unknown = str(uuid.uuid4())
    calls = [("GET", f"/api/kernels/{unknown}"), ("DELETE", f"/api/kernels/{unknown}"),
             ("POST", f"/api/kernels/{unknown}/interrupt")]
    if target.is_cordon:  # jupyter-server 1.23 answers 500 to this one
        calls.append(("POST", f"/api/kernels/{unknown}/restart"))
    for method, path in calls:
        r = gw.request(method, path)
        assert r.status_code == 404, (method, path, r.status_code)
        assert "message" in r.json() and "reason" in r.json()
    with pytest.raises(websocket.WebSocketBadStatusException) as e:
        gw.connect(unknown)
    assert e.value.status_code == 404
    r = gw.request("POST", "/api/kernels", data=b"{not json",
                   headers={"Content-Type": "application/json"})
    assert r.status_code == 400
    assert "message" in r.json()


# --- cordon only -----------------------------------------------------------

def test_unknown_kernelspec_is_404(cordon):
    # jupyter-server 1.23 answers 500 here; the Kernel Gateway answers 404.
    r = cordon.gw.request("POST", "/api/kernels", {"name": "no-such-kernelspec"})
    assert r.status_code == 404 and "message" in r.json()


def test_a_kernel_is_a_cordon_session_and_shares_the_files_api(cordon):
    k = Kernel(cordon)
    try:
        client = v1(cordon)
        info = client.request("GET", f"/v1/sessions/{k.id}")
        assert info["kind"] == "python" and info["state"] in ("ready", "busy")
        assert k.id in [s["id"] for s in client.sessions()]
        session = Session(client, info)

        k.run("open('from_kernel.txt', 'w').write('written by the kernel')")
        assert session.get_file("from_kernel.txt") == b"written by the kernel"

        session.put_file("sub/to_kernel.txt", b"written through the API")
        assert k.run("print(open('sub/to_kernel.txt').read(), end='')").stdout == \
            "written through the API"
        # The workspace the daemon reports is where the kernel wrote.
        with open(os.path.join(info["workspace"], "from_kernel.txt")) as f:
            assert f.read() == "written by the kernel"
        assert "from_kernel.txt" in [f["name"] for f in session.list_files()]
    finally:
        assert k.delete().status_code == 204


def test_env_passes_only_kernel_keys(cordon):
    k = Kernel(cordon, env={"KERNEL_GWTEST_EXTRA": "yes", "GWTEST_NOT_KERNEL": "no",
                            "HTTP_PROXY": "http://leak.invalid:3128"})
    try:
        # /proc/self/environ: what the kernel was started with (ipykernel
        # itself adds TERM, PAGER, MPLBACKEND... to os.environ later).
        e = k.run("import json, os\n"
                  "raw = open('/proc/self/environ', 'rb').read().split(b'\\0')\n"
                  "env = dict(x.decode().split('=', 1) for x in raw if x)\n"
                  "print(json.dumps({'env': env, 'cwd': os.getcwd()}))")
        seen = json.loads(e.stdout)
        env = seen["env"]
        assert env.get("KERNEL_GWTEST_EXTRA") == "yes"
        assert env.get("KERNEL_GWTEST_MARK") == k.mark
        assert "GWTEST_NOT_KERNEL" not in env and "HTTP_PROXY" not in env
        assert "CORDON_TEST_SECRET" not in env
        allowed = {"PATH", "HOME", "LANG", "TERM"}
        extra = [key for key in env if not (key.startswith("KERNEL_") or
                                            key.startswith("JUPYTER_") or key in allowed)]
        assert extra == [], f"not declared and not on the allowlist: {extra}"
        assert env["HOME"] == seen["cwd"]
    finally:
        k.delete()


def test_the_daemons_secret_is_not_visible_to_kernel_code(cordon):
    # The plant is real: the daemon has it.
    with open(f"/proc/{cordon.daemon.pid}/environ", "rb") as f:
        assert SECRET.encode() in f.read()
    k = Kernel(cordon)
    try:
        e = k.run(
            "import json, os\n"
            f"paths = ['/proc/1/environ', '/proc/{cordon.daemon.pid}/environ', "
            "'/proc/self/environ']\n"
            "paths += ['/proc/%s/environ' % p for p in os.listdir('/proc') if p.isdigit()]\n"
            "seen = {'os.environ': repr(dict(os.environ))}\n"
            "for p in paths:\n"
            "    try:\n"
            "        seen[p] = open(p, 'rb').read().decode('latin-1')\n"
            "    except Exception as error:\n"
            "        seen[p] = 'unreadable: ' + type(error).__name__\n"
            "print(json.dumps(seen))")
        seen = json.loads(e.stdout)
        assert "os.environ" in seen and "/proc/self/environ" in seen
        leaked = [p for p, text in seen.items() if SECRET in text or "CORDON_TEST_SECRET" in text]
        assert leaked == [], f"the daemon's secret is visible through {leaked}"
    finally:
        k.delete()


def test_two_kernels_cannot_see_each_others_workspaces(cordon):
    client = v1(cordon)
    a, b = Kernel(cordon), Kernel(cordon)
    try:
        content = "only-a-" + secrets.token_hex(8)
        a.run(f"open('a-private.txt', 'w').write({content!r})")
        a_ws = client.request("GET", f"/v1/sessions/{a.id}")["workspace"]
        with open(os.path.join(a_ws, "a-private.txt")) as f:
            assert f.read() == content  # the file is where the daemon says A's workspace is
        e = b.run(
            "import json, os\n"
            f"a_ws, a_id = {a_ws!r}, {a.id!r}\n"
            "found = {}\n"
            "for p in (os.path.join(a_ws, 'a-private.txt'),\n"
            "          os.path.join(os.getcwd(), '..', a_id, 'a-private.txt'),\n"
            "          os.path.join(os.path.dirname(a_ws), a_id, 'a-private.txt')):\n"
            "    try:\n"
            "        found[p] = open(p).read()\n"
            "    except Exception as error:\n"
            "        found[p] = 'unreadable: ' + type(error).__name__\n"
            "for d in (os.path.dirname(a_ws), os.path.join(os.getcwd(), '..')):\n"
            "    try:\n"
            "        found['ls ' + d] = ' '.join(os.listdir(d))\n"
            "    except Exception as error:\n"
            "        found['ls ' + d] = 'unreadable: ' + type(error).__name__\n"
            "print(json.dumps(found))")
        found = json.loads(e.stdout)
        leaked = {p: v for p, v in found.items() if content in v or a.id in v}
        assert leaked == {}, f"kernel B sees kernel A's workspace: {leaked}"
    finally:
        a.delete()
        b.delete()


def test_the_kernel_limit_is_403_resource_limit(tmp_path, tmp_path_factory):
    with own_daemon(tmp_path, "-limit", "--max-kernels", "1") as (d, gw):
        first = gw.create_kernel()
        r = gw.request("POST", "/api/kernels", {})
        assert r.status_code == 403, (r.status_code, r.text)
        assert r.json()["reason"] == "Resource Limit" and r.json()["message"]
        assert [k["id"] for k in gw.kernels()] == [first["id"]]
        assert gw.delete(first["id"]).status_code == 204
        # The slot is free again once the kernel is gone.
        second = gw.create_kernel()
        assert gw.wait_ready(second["id"]).text == "2"
        assert gw.delete(second["id"]).status_code == 204


def test_a_client_that_stops_reading_is_disconnected_and_the_kernel_goes_on(tmp_path):
    """A websocket client that reads nothing while its kernel prints 64 MiB:
    the daemon disconnects it at --ws-max-queued (logged ws_slow_reader)
    instead of queueing the output for it, and the kernel and other clients
    go on."""
    with own_daemon(tmp_path, "-slow", "--ws-max-queued", "8M") as (d, gw):
        kid = gw.create_kernel()["id"]
        gw.wait_ready(kid)
        silent = gw.connect(kid, session_id="silent-" + secrets.token_hex(4))
        gw.send_execute(silent, 'chunk = "x" * (1 << 20)\n'
                                'for i in range(64):\n'
                                '    print(chunk, flush=True)')
        assert wait_for(lambda: logged(d, "ws_slow_reader"), 60), \
            "a client that reads nothing was never disconnected"
        # What it is still given is what was in flight and in the socket
        # buffers at the cut, then the end of the connection: far less than
        # the flood.
        received = 0
        silent.settimeout(30)
        with pytest.raises((websocket.WebSocketConnectionClosedException, ConnectionError)):
            while True:
                frame = silent.recv()
                if not frame:
                    raise websocket.WebSocketConnectionClosedException("closed")
                received += len(frame)
        assert received < 32 << 20, received
        # The kernel goes on to the end of the flood, then serves another
        # client.
        assert gw.wait_ready(kid, within=120).text == "2"
        assert gw.execute(kid, "print('still here')").stdout == "still here\n"
        assert gw.delete(kid).status_code == 204


# A kernel that swallows every interrupt: its SIGINT handler only notes it
# (a try/except KeyboardInterrupt loop has windows, at the loop's jump back
# and inside its own except block, where a second SIGINT would get out).
# The loop, not the handler, says so: a handler that prints can deadlock
# ipykernel. A SIGINT that lands while `print('looping', flush=True)` still
# holds the lock of the Event its flush waits on makes the handler's own
# flush wait behind that Event's set, on the one IO thread, for
# IOStream.flush_timeout (10 s): longer than the grace. (Seen once in CI,
# with the sanitizer build compiling beside the suite.)
SWALLOW = ("import signal, time\n"
           "seen = []\n"
           "signal.signal(signal.SIGINT, lambda *_: seen.append(1))\n"
           "print('looping', flush=True)\n"
           "while True:\n"
           "    time.sleep(0.05)\n"
           "    while seen:\n"
           "        seen.pop()\n"
           "        print('swallowed', flush=True)\n")


def test_a_kernel_that_swallows_interrupts_is_torn_down_after_the_grace(tmp_path,
                                                                         tmp_path_factory):
    root = GW_CGROUP_ROOT + "-grace"
    d = start_cordon(tmp_path / "state", *INTERRUPT_GRACE, cgroup_root=root)
    try:
        target = Target("cordon", Gateway(d.url, d.token), 401, d.pid, daemon=d)
        gw = target.gw
        k = Kernel(target)
        ws = gw.connect(k.id)
        try:
            e = gw.send_execute(ws, SWALLOW)
            receive(ws, e, lambda x: "looping" in x.stdout, 30)
            dead = []
            started = time.monotonic()
            r = gw.interrupt(k.id)
            assert r.status_code == 204, (r.status_code, r.text)

            def on_other(msg):
                if msg.get("msg_type") == "status" and \
                        msg["content"].get("execution_state") == "dead":
                    dead.append(time.monotonic())

            try:
                receive(ws, e, lambda x: dead or "dead" in x.states, INTERRUPT_GRACE_S + 30,
                        on_other=on_other)
            except websocket.WebSocketConnectionClosedException:
                pass  # the daemon may close the channels after the dead status
            # A dead status with our request as its parent counts too.
            if not dead and "dead" in e.states:
                dead.append(time.monotonic())
            assert dead, "no iopub status: dead reached the connected client"
            assert "swallowed" in e.stdout  # the interrupt did arrive, and was swallowed
            assert dead[0] - started >= INTERRUPT_GRACE_S - 0.1, "torn down before the grace"
        finally:
            ws.close()
        assert wait_for(lambda: gw.kernel(k.id).status_code == 200 and
                        gw.kernel(k.id).json()["execution_state"] == "dead")
        assert wait_for(lambda: not k.running()), f"left alive: {describe(k.running())}"
        assert pids_in_cgroup_tree(root) - {d.pid} == set(), \
            describe(pids_in_cgroup_tree(root) - {d.pid})
        assert v1(target).request("GET", f"/v1/sessions/{k.id}")["state"] == "invalidated"
        with pytest.raises((ExecutionTimeout, websocket.WebSocketException)):
            gw.execute(k.id, "1+1", timeout=5)
        # A new kernel is unaffected.
        fresh = Kernel(target)
        assert fresh.run("1+1").text == "2"
        assert fresh.delete().status_code == 204
        assert wait_for(lambda: not fresh.running())
    finally:
        stop_cordon(d)


def test_sigkill_the_daemon_then_restart_no_kernel_survives(tmp_path, tmp_path_factory):
    root = GW_CGROUP_ROOT + "-kill"
    state = tmp_path / "state"
    first = start_cordon(state, cgroup_root=root)
    second = None
    try:
        target = Target("cordon", Gateway(first.url, first.token), 401, first.pid, daemon=first)
        gw = target.gw
        kernels = [Kernel(target), Kernel(target)]
        workspaces = {}
        for i, k in enumerate(kernels):
            k.run(f"open('kept.txt', 'w').write('kept {i}')")
            workspaces[k.id] = v1(target).request("GET", f"/v1/sessions/{k.id}")["workspace"]
        assert all(k.pids() for k in kernels)
        # One kernel is busy when the daemon dies.
        ws = gw.connect(kernels[0].id)
        e = gw.send_execute(ws, "import time\nprint('busy', flush=True)\ntime.sleep(300)")
        receive(ws, e, lambda x: "busy" in x.stdout, 30)
        ws.close()  # the execution goes on
        in_tree = {identity(p) for p in pids_in_cgroup_tree(root)} - {None}
        first.kill()

        second = start_cordon(state, cgroup_root=root)
        # Reaped before the restarted daemon answered.
        survivors = {i[0] for i in in_tree if still_running(i)}
        for k in kernels:
            survivors |= k.running()
        assert survivors == set(), f"survived the restart: {describe(survivors)}"
        assert pids_in_cgroup_tree(root) - {second.pid} == set(), \
            describe(pids_in_cgroup_tree(root) - {second.pid})
        client = second.client()
        gw2 = Gateway(second.url, second.token)
        for i, k in enumerate(kernels):
            assert client.request("GET", f"/v1/sessions/{k.id}")["state"] == "lost"
            with open(os.path.join(workspaces[k.id], "kept.txt")) as f:
                assert f.read() == f"kept {i}"
            r = gw2.kernel(k.id)
            assert r.status_code == 404 or r.json()["execution_state"] == "dead", r.text
        # The restarted daemon serves new kernels.
        fresh = Kernel(Target("cordon", gw2, 401, second.pid, daemon=second))
        assert fresh.run("1+1").text == "2"
    finally:
        if second is not None:
            stop_cordon(second)
        else:
            if first.proc.poll() is None:
                first.stop()
            remove_cgroup_root(root)


def test_v1_python_sessions_exec_budget_and_timeout_ladder(cordon):
    """cordon's own API for python sessions (issue 6): one JSON result per
    execution, one output budget, the timeout ladder."""
    client = v1(cordon)
    info = client.request("POST", "/v1/sessions", {
        "id": "gw-py", "kind": "python",
        "limits": {"grace_ms": 3000, "output_limit_bytes": 4096}})
    assert info["kind"] == "python" and info["state"] == "ready"

    def run(code, **kw):
        return client.request("POST", "/v1/sessions/gw-py/exec", dict(code=code, **kw))

    try:
        r = run("print('hi')\nx = 20\n1+1")
        assert r["status"] == "ok" and r["error"] is None
        assert r["stdout"] == "hi\n" and r["stderr"] == ""
        assert [res["data"]["text/plain"] for res in r["results"]] == ["2"]
        assert isinstance(r["execution_count"], int)
        assert (r["truncated"], r["timed_out"], r["invalidated"]) == (False, False, False)

        r = run("from IPython.display import display, HTML\ndisplay(HTML('<i>x</i>'))")
        assert r["results"][0]["data"]["text/html"] == "<i>x</i>"
        assert "metadata" in r["results"][0]

        r = run("x / 0")
        assert r["status"] == "error"
        assert r["error"]["ename"] == "ZeroDivisionError" and r["error"]["traceback"]

        # One budget for stream text and rich payloads together: past it the
        # kernel is interrupted (here in its sleep: the test is not about a
        # kernel busy flushing megabytes) and the result says so.
        started = time.monotonic()
        r = run("import time\nfor i in range(100):\n    print('y' * 99, flush=True)\n"
                "time.sleep(30)\n", timeout_ms=60000)
        assert time.monotonic() - started < 20  # interrupted, not slept out
        assert r["truncated"] is True and (r["timed_out"], r["invalidated"]) == (False, False)
        assert 4096 <= len(r["stdout"]) <= 4096 + 512, len(r["stdout"])
        r = run("from IPython.display import display, HTML\nimport time\n"
                "for i in range(100):\n    display(HTML('z' * 100))\ntime.sleep(30)\n",
                timeout_ms=60000)
        assert r["truncated"] is True and r["invalidated"] is False
        assert sum(len(json.dumps(res["data"])) for res in r["results"]) <= 4096 + 2048

        # The deadline: SIGINT, the kernel comes back, its state is kept.
        r = run("import time\ntime.sleep(30)", timeout_ms=300)
        assert (r["timed_out"], r["invalidated"]) == (True, False)
        assert run("x")["results"][0]["data"]["text/plain"] == "20"

        # A kernel that ignores SIGINT: torn down, the session invalidated.
        r = run(SWALLOW, timeout_ms=300)
        assert (r["timed_out"], r["invalidated"]) == (True, True)
        assert client.request("GET", "/v1/sessions/gw-py")["state"] == "invalidated"
        with pytest.raises(ConflictError):
            run("1+1")
        again = client.request("POST", "/v1/sessions", {"id": "gw-py", "kind": "python"})
        assert again["generation"] == 2
        r = run("'x' in dir()")
        assert r["results"][0]["data"]["text/plain"] == "False"
    finally:
        client.request("DELETE", "/v1/sessions/gw-py")


# --- both websocket protocols, buffers, channels, several connections (issue 14)

import struct  # noqa: E402  (the binary framings below)

V1_PROTOCOL = "v1.kernel.websocket.jupyter.org"

# A comm target that sends every comm_msg back on iopub, its data under
# "echo" and its buffers as they came (ipykernel hands them over as
# memoryviews).
ECHO_TARGET = (
    "def _cordon_echo(comm, open_msg):\n"
    "    @comm.on_msg\n"
    "    def _echo(msg):\n"
    "        comm.send(data={'echo': msg['content']['data']},\n"
    "                  buffers=[bytes(b) for b in msg.get('buffers') or []])\n"
    "get_ipython().kernel.comm_manager.register_target('cordon_echo', _cordon_echo)\n")


def ws_header(msg_type, session):
    return {"msg_id": uuid.uuid4().hex, "username": "test", "session": session,
            "msg_type": msg_type, "version": "5.3",
            "date": time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())}


def ws_message(channel, msg_type, content, session, buffers=()):
    return {"channel": channel, "header": ws_header(msg_type, session), "parent_header": {},
            "metadata": {}, "content": content, "buffers": list(buffers)}


# The framings, written here from jupyter_server's serialize_binary_message
# and serialize_msg_to_ws_v1 (not from cordon's code).
def encode_binary(msg):
    msg = dict(msg)
    buffers = [bytes(b) for b in msg.pop("buffers", [])]
    parts = [json.dumps(msg).encode()] + buffers
    offsets = [4 * (len(parts) + 1)]
    for p in parts[:-1]:
        offsets.append(offsets[-1] + len(p))
    return struct.pack("!%dI" % (len(parts) + 1), len(parts), *offsets) + b"".join(parts)


def decode_binary(frame):
    (n,) = struct.unpack("!I", frame[:4])
    offsets = list(struct.unpack("!%dI" % n, frame[4:4 * (n + 1)])) + [len(frame)]
    parts = [frame[offsets[i]:offsets[i + 1]] for i in range(n)]
    msg = json.loads(parts[0])
    assert "buffers" not in msg, "the binary form's JSON part carries no buffers key"
    msg["buffers"] = parts[1:]
    return msg


def encode_v1(msg):
    parts = [json.dumps(msg[k]).encode()
             for k in ("header", "parent_header", "metadata", "content")]
    parts += [bytes(b) for b in msg.get("buffers", [])]
    channel = msg["channel"].encode()
    offsets = [8 * (1 + 1 + len(parts) + 1), 8 * (1 + 1 + len(parts) + 1) + len(channel)]
    for p in parts:
        offsets.append(offsets[-1] + len(p))
    return (len(offsets).to_bytes(8, "little") +
            b"".join(o.to_bytes(8, "little") for o in offsets) + channel + b"".join(parts))


def decode_v1(frame):
    n = int.from_bytes(frame[:8], "little")
    offsets = [int.from_bytes(frame[8 * (i + 1):8 * (i + 2)], "little") for i in range(n)]
    assert offsets[-1] == len(frame), (offsets, len(frame))
    parts = [frame[offsets[i]:offsets[i + 1]] for i in range(n - 1)]
    msg = {"channel": parts[0].decode()}
    for key, part in zip(("header", "parent_header", "metadata", "content"), parts[1:5]):
        msg[key] = json.loads(part)
    msg["buffers"] = parts[5:]
    return msg


class Raw:
    """One websocket to a kernel, in one protocol, reading whole messages."""

    def __init__(self, gw, kernel_id, v1=False, session_id=None):
        self.gw = gw
        self.session = session_id or uuid.uuid4().hex
        kwargs = {"subprotocols": [V1_PROTOCOL]} if v1 else {}
        self.ws = websocket.create_connection(
            gw.channels_url(kernel_id, session_id=self.session),
            header=[f"Authorization: token {gw.token}"], timeout=gw.timeout, **kwargs)
        self.protocol = self.ws.getsubprotocol()
        self.frames = []  # (opcode, message) of every frame read

    def send(self, msg, binary=None):
        if self.protocol == V1_PROTOCOL:
            self.ws.send_binary(encode_v1(msg))
        elif binary or (binary is None and msg.get("buffers")):
            self.ws.send_binary(encode_binary(msg))
        else:
            self.ws.send(json.dumps(msg))
        return msg["header"]["msg_id"]

    def recv(self, timeout):
        """The next message, or None for a ping or pong (the daemon pings a
        silent client every 30 s: returning lets `until` keep its deadline,
        where recv_data() alone would wait again after each ping)."""
        self.ws.settimeout(timeout)
        opcode, data = self.ws.recv_data(control_frame=True)
        if opcode in (websocket.ABNF.OPCODE_PING, websocket.ABNF.OPCODE_PONG):
            return None
        if opcode == websocket.ABNF.OPCODE_CLOSE:
            raise websocket.WebSocketConnectionClosedException("the server closed the websocket")
        if self.protocol == V1_PROTOCOL:
            assert opcode == websocket.ABNF.OPCODE_BINARY, "v1 frames are binary"
            msg = decode_v1(data)
        elif opcode == websocket.ABNF.OPCODE_BINARY:
            msg = decode_binary(data)
        else:
            msg = json.loads(data)
            msg["buffers"] = msg.get("buffers") or []
        self.frames.append((opcode, msg))
        return msg

    def line(self, msg_id, timeout=60, what="a line"):
        """The stream text of `msg_id` up to its first newline. One print can
        reach the client in more than one stream message: the kernel sends
        what was written within 0.2 s as one, and under load the writes of
        one print can straddle that."""
        text = ""
        while "\n" not in text:
            out = self.until(lambda m: m["header"]["msg_type"] == "stream" and
                             m["parent_header"].get("msg_id") == msg_id, timeout, what)
            text += out["content"]["text"]
        return text

    def until(self, predicate, timeout=60, what="a message"):
        """Messages read until one satisfies `predicate`; returns it."""
        deadline = time.monotonic() + timeout
        seen = []
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ExecutionTimeout(f"{what}: not within {timeout}s; seen "
                                       f"{[(m['channel'], m['header']['msg_type']) for m in seen]}")
            try:
                msg = self.recv(left)
            except websocket.WebSocketTimeoutException:
                continue
            if msg is None:
                continue
            seen.append(msg)
            if predicate(msg):
                return msg

    def execute(self, code, timeout=60, allow_stdin=False):
        """Executes `code`; returns (reply, the iopub messages of it)."""
        msg = ws_message("shell", "execute_request",
                         {"code": code, "silent": False, "store_history": True,
                          "user_expressions": {}, "allow_stdin": allow_stdin,
                          "stop_on_error": True}, self.session)
        msg_id = self.send(msg)
        reply, iopub, idle = None, [], False
        deadline = time.monotonic() + timeout
        while reply is None or not idle:
            m = self.until(lambda m: m["parent_header"].get("msg_id") == msg_id,
                           max(0.1, deadline - time.monotonic()), f"execute {code!r}")
            if m["channel"] == "shell" and m["header"]["msg_type"] == "execute_reply":
                reply = m["content"]
            elif m["channel"] == "iopub":
                iopub.append(m)
                idle |= (m["header"]["msg_type"] == "status" and
                         m["content"]["execution_state"] == "idle")
        return reply, iopub

    def close(self):
        self.ws.close()


def assert_whole(msg):
    """Every field a Jupyter client validates, as @jupyterlab/services does."""
    for key in ("msg_id", "msg_type", "session", "username", "date", "version"):
        assert isinstance(msg["header"].get(key), str), (key, msg)
    for key in ("parent_header", "metadata", "content"):
        assert isinstance(msg.get(key), dict), (key, msg)
    assert msg["channel"] in ("shell", "control", "stdin", "iopub"), msg


def comm_echo(raw, buffers, timeout=60):
    """A comm to ECHO_TARGET, one comm_msg with `buffers`; returns the echo."""
    reply, _ = raw.execute(ECHO_TARGET)
    assert reply["status"] == "ok", reply
    comm_id = uuid.uuid4().hex
    raw.send(ws_message("shell", "comm_open",
                        {"comm_id": comm_id, "target_name": "cordon_echo", "data": {}},
                        raw.session))
    msg_id = raw.send(ws_message("shell", "comm_msg",
                                 {"comm_id": comm_id, "data": {"n": len(buffers)}},
                                 raw.session, buffers))
    echo = raw.until(lambda m: m["header"]["msg_type"] == "comm_msg" and
                     m["parent_header"].get("msg_id") == msg_id, timeout, "the comm's echo")
    raw.send(ws_message("shell", "comm_close", {"comm_id": comm_id, "data": {}}, raw.session))
    return echo


BUFFERS = [bytes(range(256)) * 4, b"", b"\x00" * 100000]


def test_buffers_go_both_ways_in_the_binary_form_of_the_default_protocol(target, kernel):
    raw = Raw(kernel.gw, kernel.id)
    try:
        assert raw.protocol is None
        echo = comm_echo(raw, BUFFERS)
        assert echo["channel"] == "iopub"
        assert echo["content"]["data"] == {"echo": {"n": 3}}
        assert [bytes(b) for b in echo["buffers"]] == BUFFERS
        # That message came as a binary frame; those without buffers as text.
        opcodes = {m["header"]["msg_id"]: op for op, m in raw.frames}
        assert opcodes[echo["header"]["msg_id"]] == websocket.ABNF.OPCODE_BINARY
        assert websocket.ABNF.OPCODE_TEXT in opcodes.values()
        # A binary frame without buffers is a message too.
        msg = ws_message("shell", "kernel_info_request", {}, raw.session)
        msg_id = raw.send(msg, binary=True)
        info = raw.until(lambda m: m["parent_header"].get("msg_id") == msg_id and
                         m["channel"] == "shell", 60, "kernel_info_reply")
        assert info["header"]["msg_type"] == "kernel_info_reply"
    finally:
        raw.close()


def test_the_v1_subprotocol_is_agreed_and_frames_every_message(target, kernel):
    raw = Raw(kernel.gw, kernel.id, v1=True)
    try:
        if raw.protocol is None and not target.is_cordon:
            pytest.skip("this jupyter-server does not speak v1.kernel.websocket.jupyter.org")
        assert raw.protocol == V1_PROTOCOL
        reply, iopub = raw.execute("print('over v1')\n6 * 7")
        assert reply["status"] == "ok"
        kinds = [m["header"]["msg_type"] for m in iopub]
        assert "stream" in kinds and "execute_result" in kinds
        result = next(m for m in iopub if m["header"]["msg_type"] == "execute_result")
        assert result["content"]["data"]["text/plain"] == "42"
        assert all(op == websocket.ABNF.OPCODE_BINARY for op, _ in raw.frames)
        echo = comm_echo(raw, BUFFERS)
        assert [bytes(b) for b in echo["buffers"]] == BUFFERS
        assert echo["content"]["data"] == {"echo": {"n": 3}}
    finally:
        raw.close()
    # Without an offer, the same kernel speaks the default protocol.
    plain = Raw(kernel.gw, kernel.id)
    try:
        assert plain.protocol is None
        reply, _ = plain.execute("1 + 1")
        assert reply["status"] == "ok"
        assert all(op == websocket.ABNF.OPCODE_TEXT for op, _ in plain.frames)
    finally:
        plain.close()


def test_input_over_stdin_in_both_protocols(target, kernel):
    for v1 in (False, True):
        raw = Raw(kernel.gw, kernel.id, v1=v1)
        try:
            if v1 and raw.protocol is None and not target.is_cordon:
                continue  # a jupyter-server without v1
            msg = ws_message("shell", "execute_request",
                             {"code": "name = input('who? ')\nprint('hello', name)",
                              "silent": False, "store_history": True, "user_expressions": {},
                              "allow_stdin": True, "stop_on_error": True}, raw.session)
            msg_id = raw.send(msg)
            request = raw.until(lambda m: m["header"]["msg_type"] == "input_request", 60,
                                "input_request")
            assert request["channel"] == "stdin"
            assert request["parent_header"]["msg_id"] == msg_id
            assert request["content"]["prompt"] == "who? "
            answer = ws_message("stdin", "input_reply", {"value": f"cordon-{int(v1)}"},
                                raw.session)
            answer["parent_header"] = request["header"]
            raw.send(answer)
            assert raw.line(msg_id, 60, "the greeting") == f"hello cordon-{int(v1)}\n"
            raw.until(lambda m: m["header"]["msg_type"] == "execute_reply" and
                      m["parent_header"].get("msg_id") == msg_id, 60, "execute_reply")
        finally:
            raw.close()


def test_input_at_once_after_the_kernel_is_idle_reaches_the_client(target):
    """The first thing a client does once the model says `idle` is an
    input(). The daemon's sockets to a kernel connect each on its own
    timer; a kernel ROUTER drops an input_request addressed to a client it
    has not met on stdin, so `idle` must wait for stdin as well as shell
    (seen: a kernel reported ready with stdin connecting ~100 ms later, and
    the input_request lost)."""
    if not target.is_cordon:
        pytest.skip("jupyter-server's model says `starting` until a client connects: its "
                    "`idle` is no readiness signal to act on")
    gw = target.gw
    for attempt in range(3):
        kid = gw.create_kernel()["id"]
        try:
            deadline = time.monotonic() + 120
            while gw.kernel(kid).json()["execution_state"] != "idle":
                assert time.monotonic() < deadline, gw.kernel(kid).json()
                time.sleep(0.002)
            raw = Raw(gw, kid)
            try:
                msg_id = raw.send(ws_message(
                    "shell", "execute_request",
                    {"code": "print(input('now? '))", "silent": False, "store_history": False,
                     "user_expressions": {}, "allow_stdin": True, "stop_on_error": True},
                    raw.session))
                request = raw.until(lambda m: m["header"]["msg_type"] == "input_request", 30,
                                    f"the input_request of kernel {attempt + 1}")
                assert request["parent_header"]["msg_id"] == msg_id
                answer = ws_message("stdin", "input_reply", {"value": "yes"}, raw.session)
                answer["parent_header"] = request["header"]
                raw.send(answer)
                assert raw.line(msg_id, 30, "the echo") == "yes\n"
            finally:
                raw.close()
        finally:
            assert gw.delete(kid).status_code == 204


def test_interrupt_request_on_control_is_relayed_and_answered(target, kernel):
    raw = Raw(kernel.gw, kernel.id)
    try:
        msg = ws_message("shell", "execute_request",
                         {"code": "import time\nprint('spinning', flush=True)\ntime.sleep(100)",
                          "silent": False, "store_history": False, "user_expressions": {},
                          "allow_stdin": False, "stop_on_error": True}, raw.session)
        msg_id = raw.send(msg)
        raw.until(lambda m: m["header"]["msg_type"] == "stream" and
                  m["parent_header"].get("msg_id") == msg_id, 60, "the execution to start")
        interrupt_id = raw.send(ws_message("control", "interrupt_request", {}, raw.session))
        reply = raw.until(lambda m: m["parent_header"].get("msg_id") == interrupt_id and
                          m["channel"] != "iopub", 60, "interrupt_reply")
        assert reply["channel"] == "control"
        assert reply["header"]["msg_type"] == "interrupt_reply"
        done = raw.until(lambda m: m["header"]["msg_type"] == "execute_reply" and
                         m["parent_header"].get("msg_id") == msg_id, 60, "execute_reply")
        assert done["content"]["status"] == "error"
        assert done["content"]["ename"] == "KeyboardInterrupt"
    finally:
        raw.close()


def test_two_connections_replies_to_the_requester_iopub_to_both(target, kernel):
    gw = kernel.gw
    a = Raw(gw, kernel.id)
    b = Raw(gw, kernel.id, v1=target.is_cordon)  # one in each protocol, where both exist
    try:
        assert wait_for(lambda: gw.kernel(kernel.id).json()["connections"] == 2), \
            gw.kernel(kernel.id).json()
        before = gw.kernel(kernel.id).json()["last_activity"]
        time.sleep(0.01)  # last_activity has microseconds; let the clock move
        reply, iopub = a.execute("print('for both')")
        assert reply["status"] == "ok"
        msg_id = iopub[0]["parent_header"]["msg_id"]
        # b sent nothing: it sees a's iopub, and none of a's replies.
        b.until(lambda m: m["header"]["msg_type"] == "stream" and
                m["parent_header"].get("msg_id") == msg_id, 60, "a's output on b")
        b.until(lambda m: m["header"]["msg_type"] == "status" and
                m["parent_header"].get("msg_id") == msg_id and
                m["content"]["execution_state"] == "idle", 60, "a's idle on b")
        b_reply, _ = b.execute("1 + 1")
        assert b_reply["status"] == "ok"
        assert not [m for _, m in b.frames
                    if m["channel"] == "shell" and m["parent_header"].get("msg_id") == msg_id]
        assert not [m for _, m in a.frames if m["channel"] == "shell" and
                    m["parent_header"].get("msg_id") != msg_id]
        assert gw.kernel(kernel.id).json()["last_activity"] > before
    finally:
        a.close()
        b.close()
    assert wait_for(lambda: gw.kernel(kernel.id).json()["connections"] == 0), \
        gw.kernel(kernel.id).json()


def test_restart_and_death_reach_every_connection_as_whole_status_messages(cordon):
    k = Kernel(cordon)
    gw = k.gw
    a, b = Raw(gw, k.id), Raw(gw, k.id, v1=True)
    try:
        a.execute("kept = 1")
        assert gw.restart(k.id).status_code == 200
        for raw in (a, b):
            status = raw.until(lambda m: m["header"]["msg_type"] == "status" and
                               m["content"]["execution_state"] == "restarting", 60,
                               "status: restarting")
            assert_whole(status)
            assert status["channel"] == "iopub"
        reply, iopub = b.execute("'kept' in dir()")
        assert reply["status"] == "ok"
        assert [m["content"]["data"]["text/plain"] for m in iopub
                if m["header"]["msg_type"] == "execute_result"] == ["False"]
        # The kernel dies on its own: dead in the model, on both.
        a.send(ws_message("shell", "execute_request",
                          {"code": "import os\nos._exit(3)", "silent": False,
                           "store_history": False, "user_expressions": {},
                           "allow_stdin": False, "stop_on_error": True}, a.session))
        for raw in (a, b):
            status = raw.until(lambda m: m["header"]["msg_type"] == "status" and
                               m["content"]["execution_state"] == "dead", 60, "status: dead")
            assert_whole(status)
        assert gw.kernel(k.id).json()["execution_state"] == "dead"
    finally:
        a.close()
        b.close()
        k.delete()


def test_what_the_relay_refuses_is_a_whole_error_message(cordon):
    k = Kernel(cordon)
    raw, v1raw = Raw(k.gw, k.id), Raw(k.gw, k.id, v1=True)
    try:
        # A channel the client cannot send on.
        bad = ws_message("iopub", "execute_request", {"code": "1"}, raw.session)
        raw.send(bad)
        error = raw.until(lambda m: m["header"]["msg_type"] == "error", 30, "the refusal")
        assert_whole(error)
        assert error["content"]["ename"] == "CordonRelayError"
        assert "channel" in error["content"]["evalue"]
        assert error["parent_header"]["msg_id"] == bad["header"]["msg_id"]
        # Buffers in a text frame.
        raw.ws.send(json.dumps(ws_message("shell", "comm_msg", {"comm_id": "x", "data": {}},
                                          raw.session, ["AAAA"])))
        error = raw.until(lambda m: m["header"]["msg_type"] == "error", 30, "the refusal")
        assert "binary frame" in error["content"]["evalue"]
        # Binary frames whose offsets do not fit them, in each protocol.
        raw.ws.send_binary(struct.pack("!3I", 2, 12, 1000) + b"{}")
        error = raw.until(lambda m: m["header"]["msg_type"] == "error", 30, "the refusal")
        assert_whole(error)
        assert "offsets" in error["content"]["evalue"], error["content"]
        v1raw.ws.send_binary((3).to_bytes(8, "little") + b"\0" * 24)
        error = v1raw.until(lambda m: m["header"]["msg_type"] == "error", 30, "the refusal")
        assert_whole(error)
        assert "offset" in error["content"]["evalue"], error["content"]
        # Both connections still work.
        assert raw.execute("1 + 1")[0]["status"] == "ok"
        assert v1raw.execute("1 + 1")[0]["status"] == "ok"
    finally:
        raw.close()
        v1raw.close()
        k.delete()


def test_buffers_are_bounded_by_the_max_message_size(tmp_path):
    """--max-message-size bounds a message with its buffers, both ways: the
    kernel's echo over it is refused whole (an `error` in its place); a
    client's frame over it closes the connection (1009)."""
    with own_daemon(tmp_path, "-size", "--max-message-size", "1M") as (d, gw):
        kid = gw.create_kernel()["id"]
        gw.wait_ready(kid)
        for v1 in (False, True):
            raw = Raw(gw, kid, v1=v1)
            try:
                # Under the limit: relayed whole.
                echo = comm_echo(raw, [b"u" * (512 << 10)])
                assert [bytes(b) for b in echo["buffers"]] == [b"u" * (512 << 10)]
                # The kernel sends more than the limit: refused, with its parent.
                reply, iopub = raw.execute(
                    "from ipykernel.comm import Comm\n"
                    "c = Comm(target_name='nowhere', data={})\n"
                    "c.send(data={}, buffers=[b'o' * (3 << 20)])")
                errors = [m for m in iopub if m["header"]["msg_type"] == "error"]
                assert any("--max-message-size" in m["content"]["evalue"] for m in errors), \
                    [m["header"]["msg_type"] for m in iopub]
                # The client sends more than the limit: the connection ends
                # (the daemon may close it while the frame is still being
                # sent: a broken pipe then).
                with pytest.raises((websocket.WebSocketConnectionClosedException,
                                    ConnectionError)):
                    raw.send(ws_message("shell", "comm_msg", {"comm_id": "x", "data": {}},
                                        raw.session, [b"i" * (2 << 20)]))
                    raw.until(lambda m: False, 30, "the close")
            finally:
                raw.close()
        assert gw.wait_ready(kid).text == "2"
        assert gw.delete(kid).status_code == 204


def test_a_kernel_in_use_over_its_websocket_is_not_culled_as_idle(tmp_path):
    """--session-idle-ttl counts what clients do over the websocket: a
    kernel with a client connected, or busy with a cell a client sent, is
    not idle. Once the last client has left and the kernel is idle, the TTL
    culls it. Before, only /v1 requests counted: a notebook's kernel was
    culled under its user, mid-cell."""
    with own_daemon(tmp_path, "-cull", "--session-idle-ttl", "2s") as (d, gw):
        kid = gw.create_kernel()["id"]
        raw = Raw(gw, kid)
        reply, _ = raw.execute("x = 41")
        assert reply["status"] == "ok"
        time.sleep(6)  # connected and silent for three TTLs
        assert gw.kernel(kid).status_code == 200, "culled with a client connected"
        # A cell longer than the TTL, from a client that leaves at once.
        raw.send(ws_message("shell", "execute_request",
                            {"code": "import time; time.sleep(8); x += 1", "silent": False,
                             "store_history": True, "user_expressions": {},
                             "allow_stdin": False, "stop_on_error": True}, raw.session))
        raw.close()
        time.sleep(6)
        assert gw.kernel(kid).status_code == 200, "culled while busy"
        assert gw.execute(kid, "x").text == "42"  # the cell ran whole
        # Idle, nobody connected: culled after the TTL.
        assert wait_for(lambda: gw.kernel(kid).status_code == 404, within=30), \
            "an idle kernel with no client was not culled"


def test_a_dead_kernel_is_restarted_in_its_workspace_until_the_idle_ttl(tmp_path):
    """A kernel that died (or was torn down) restarts as a Jupyter server
    restarts it: same id, same workspace, a fresh process. Before, a
    restart of a dead kernel was 409, so a notebook's "Restart kernel" could
    not bring it back. What it takes is remembered for --session-idle-ttl
    after its death; after that a restart says it cannot."""
    with own_daemon(tmp_path, "-revive", "--session-idle-ttl", "3s") as (d, gw):
        kid = gw.create_kernel()["id"]

        def die():
            ws = gw.connect(kid)
            try:
                gw.send_execute(ws, "import os\nos._exit(3)")
            finally:
                ws.close()
            assert wait_for(lambda: gw.kernel(kid).json()["execution_state"] == "dead"), \
                gw.kernel(kid).text

        assert gw.execute(kid, "lost = open('kept.txt', 'w').write('kept')").complete
        die()
        r = gw.restart(kid)
        assert r.status_code == 200, (r.status_code, r.text)
        assert r.json()["id"] == kid
        gw.wait_ready(kid)
        assert gw.execute(kid, "print(open('kept.txt').read(), end='')").stdout == "kept"
        assert gw.execute(kid, "lost").error["ename"] == "NameError"
        assert kid in [k["id"] for k in gw.kernels()]

        die()
        time.sleep(3 * 3)  # three TTLs: forgotten
        r = gw.restart(kid)
        assert r.status_code == 409, (r.status_code, r.text)
        assert "invalidated" in r.json()["message"], r.text
        assert gw.kernel(kid).json()["execution_state"] == "dead"
        assert pids_in_cgroup_tree(d.cgroup_root) - {d.pid} == set(), \
            describe(pids_in_cgroup_tree(d.cgroup_root) - {d.pid})


def test_a_message_larger_than_the_queue_bound_reaches_a_client_that_reads(tmp_path):
    """--ws-max-queued bounds what waits behind the message being written:
    a client that reads gets a result larger than the bound, and the reply
    and status after it. Before, the message in flight counted, and what
    followed it disconnected the client."""
    with own_daemon(tmp_path, "-large", "--ws-max-queued", "1M") as (d, gw):
        kid = gw.create_kernel()["id"]
        gw.wait_ready(kid)
        size = 20 * 1024 * 1024
        for _ in range(3):
            e = gw.execute(kid, f"'x' * {size}")
            assert e.reply["status"] == "ok"
            assert len(e.text) == size + 2  # the repr's quotes
        assert not logged(d, "ws_slow_reader")
