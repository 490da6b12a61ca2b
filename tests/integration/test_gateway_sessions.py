"""Jupyter's sessions API (/api/sessions, issue 14) on `cordon serve`, and
clients no one here wrote driving cordon as their kernel gateway: Debian's
jupyter-server 1.23 and notebook 6.4 in gateway mode (`--gateway-url`), and a
real notebook with a matplotlib plot executed cell by cell.

The sessions API follows jupyter-server's own handler
(jupyter_server/services/sessions): POST by path creates or answers the
existing session (201), kernel {"id"} binds a kernel, PATCH kernel {"name"}
starts a new kernel and shuts the old one down, DELETE shuts the kernel down.
Processes are only looked at through the kernel's own cgroup (its grant's,
read from the store) and by identity; nothing is signalled but the daemons
and servers the tests started.

    ctest --test-dir build -R python      (it is one of tests/integration/test_*.py)
    CORDON_BINARY=build/cordon /usr/bin/python3 -m pytest -q -rs \\
        tests/integration/test_gateway_sessions.py
"""
import base64
import json
import os
import sqlite3
import struct
import sys
import threading
import time
import uuid
import zlib

import pytest
import websocket

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "clients", "python"))

from daemon_support import (  # noqa: E402
    CGROUP_ROOT,
    Daemon,
    identity,
    pids_in_cgroup_tree,
    remove_cgroup_root,
    still_running,
    store_query,
    wait_for,
)
from kernel_gateway import Execution, Gateway, JupyterServer, execute_request  # noqa: E402

ROOT = CGROUP_ROOT + "-sessions"
KERNEL_KEYS = {"id", "name", "last_activity", "execution_state", "connections"}


def stop_daemon(d):
    status = d.stop()
    left = pids_in_cgroup_tree(d.cgroup_root)
    remove_cgroup_root(d.cgroup_root)
    assert status == 0, f"cordon serve exited {status}; see {d.log_path}"
    assert left == set(), f"left in {d.cgroup_root} after SIGTERM: {left}"


@pytest.fixture(scope="module")
def cordon(tmp_path_factory):
    d = Daemon(tmp_path_factory.mktemp("sessions") / "state", cgroup_root=ROOT + "-m")
    yield d
    stop_daemon(d)


@pytest.fixture(scope="module")
def gw(cordon):
    return Gateway(cordon.url, cordon.token)


# --- helpers ---------------------------------------------------------------

def check_model(model, path=None, type_=None, name=None):
    """The session model as Jupyter servers return it (and JupyterLab's
    validator wants: strings, and a whole kernel model)."""
    want = {"id", "path", "name", "type", "kernel"} | ({"notebook"} if model.get("type") ==
                                                      "notebook" else set())
    assert set(model) == want, model
    for key in ("id", "path", "name", "type"):
        assert isinstance(model[key], str), (key, model)
    uuid.UUID(model["id"])
    assert set(model["kernel"]) == KERNEL_KEYS, model["kernel"]
    assert model["kernel"]["name"] == "python3"
    assert isinstance(model["kernel"]["connections"], int)
    if path is not None:
        assert model["path"] == path, model
    if type_ is not None:
        assert model["type"] == type_, model
    if name is not None:
        assert model["name"] == name, model
    if model["type"] == "notebook":
        assert model["notebook"] == {"path": model["path"], "name": model["name"]}, model
    return model


def post_session(gw, path, type_="notebook", name=None, kernel=None):
    body = {"path": path, "type": type_}
    if name is not None:
        body["name"] = name
    if kernel is not None:
        body["kernel"] = kernel
    r = gw.request("POST", "/api/sessions", body)
    assert r.status_code == 201, (r.status_code, r.text)
    model = check_model(r.json(), path=path, type_=type_)
    assert r.headers.get("Location") == f"/api/sessions/{model['id']}", r.headers
    return model


def sessions(gw):
    r = gw.request("GET", "/api/sessions")
    assert r.status_code == 200, (r.status_code, r.text)
    return [check_model(m) for m in r.json()]


def kernel_processes(daemon, kernel_id):
    """Identities of the processes in the kernel's cgroup (its grant's, as
    the store recorded it)."""
    grant_id = daemon.client().request("GET", f"/v1/sessions/{kernel_id}")["grant_id"]
    rows = store_query(daemon.state_dir, "SELECT cgroups FROM grants WHERE id = ?", (grant_id,))
    assert rows, f"no grant {grant_id} in the store"
    cgroups = json.loads(rows[0][0])
    pids = set()
    for path in cgroups.values():
        for directory, _, files in os.walk(path):
            if "cgroup.procs" in files:
                try:
                    with open(os.path.join(directory, "cgroup.procs")) as f:
                        pids.update(int(line) for line in f if line.strip())
                except OSError:
                    pass
    return {identity(p) for p in pids} - {None}


def png_check(data):
    """`data` is one whole PNG: the signature, every chunk's length and CRC,
    IHDR first, IEND last with nothing after it, and the IDAT stream inflates
    to exactly the rows IHDR announces. Returns (width, height)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", data[:16]
    pos, chunks, idat = 8, [], b""
    while pos < len(data):
        assert pos + 12 <= len(data), f"a chunk is cut at byte {pos} of {len(data)}"
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind = data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        assert len(body) == length, f"chunk {kind} is cut: {len(body)} of {length} bytes"
        (crc,) = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])
        assert crc == zlib.crc32(kind + body), f"chunk {kind} at {pos}: bad CRC"
        chunks.append(kind)
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", body[:10])
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    assert chunks[0] == b"IHDR" and chunks[-1] == b"IEND", chunks
    assert data.endswith(b"\x00\x00\x00\x00IEND\xaeB`\x82")
    channels = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[color]
    assert depth == 8, depth
    assert len(zlib.decompress(idat)) == height * (1 + width * channels)
    return width, height


def decode_png(text):
    """image/png of a display_data: base64, which may be wrapped in newlines
    (IPython's Image ends it with one); any other stray byte is an error."""
    return base64.b64decode("".join(text.split()), validate=True)


def execute(gw, kernel_id, code, timeout=120):
    e = gw.execute(kernel_id, code, timeout=timeout)
    assert e.complete and e.reply.get("status") == "ok", (e.reply, e.error, e.stderr)
    return e


# --- the routes ------------------------------------------------------------

def test_create_reuse_get_list_rename_and_delete_shuts_the_kernel(cordon, gw):
    s = post_session(gw, "work/first.ipynb", name="first.ipynb", kernel={"name": "python3"})
    kid = s["kernel"]["id"]
    # No warm pool: answered as soon as the kernel is started, as Jupyter
    # servers answer, not once it is ready (about a second later).
    assert s["kernel"]["execution_state"] == "starting", s
    assert gw.wait_ready(kid).text == "2"
    # The kernel is one of /api/kernels, a contained cordon session.
    assert gw.kernel(kid).status_code == 200
    assert execute(gw, kid, "x = 6 * 7").reply["status"] == "ok"

    # The same path answers the same session (201, as jupyter-server), even
    # with another kernel asked for.
    again = post_session(gw, "work/first.ipynb", kernel={"name": "python3"})
    assert again["id"] == s["id"] and again["kernel"]["id"] == kid
    assert [m["id"] for m in sessions(gw)].count(s["id"]) == 1

    r = gw.request("GET", f"/api/sessions/{s['id']}")
    assert r.status_code == 200, r.text
    assert check_model(r.json(), path="work/first.ipynb", name="first.ipynb")["kernel"]["id"] == kid

    # Rename: path, name and type change; the kernel and its state stay.
    r = gw.request("PATCH", f"/api/sessions/{s['id']}",
                   {"path": "work/renamed.ipynb", "name": "renamed.ipynb"})
    assert r.status_code == 200, r.text
    check_model(r.json(), path="work/renamed.ipynb", name="renamed.ipynb", type_="notebook")
    assert r.json()["kernel"]["id"] == kid
    r = gw.request("PATCH", f"/api/sessions/{s['id']}", {"type": "console"})
    assert r.status_code == 200, r.text
    check_model(r.json(), path="work/renamed.ipynb", type_="console")
    assert "notebook" not in r.json()
    assert execute(gw, kid, "x").text == "42"
    # The old path is free: a POST of it makes a new session.
    other = post_session(gw, "work/first.ipynb", type_="console")
    assert other["id"] != s["id"] and other["kernel"]["id"] != kid
    listed = {m["id"]: m for m in sessions(gw)}
    assert listed[s["id"]]["path"] == "work/renamed.ipynb"
    assert other["id"] in listed

    # DELETE shuts the kernel down: 204, the kernel is gone from
    # /api/kernels, and nothing is left in its cgroup.
    procs = kernel_processes(cordon, kid)
    assert procs, "the kernel's processes cannot be found in its cgroup"
    r = gw.request("DELETE", f"/api/sessions/{s['id']}")
    assert r.status_code == 204, (r.status_code, r.text)
    assert r.text == ""
    assert gw.kernel(kid).status_code == 404
    assert wait_for(lambda: not any(still_running(p) for p in procs)), \
        f"the kernel outlived its session: {[p for p in procs if still_running(p)]}"
    assert gw.request("GET", f"/api/sessions/{s['id']}").status_code == 404
    assert gw.request("DELETE", f"/api/sessions/{s['id']}").status_code == 404
    assert s["id"] not in {m["id"] for m in sessions(gw)}
    assert gw.request("DELETE", f"/api/sessions/{other['id']}").status_code == 204


def test_bad_input_is_refused_naming_the_field_and_changes_nothing(gw):
    s = post_session(gw, "bad-input.ipynb", name="bad")
    sid = s["id"]
    big = "p" * 5000
    cases = [
        # (method, path, body (a str is sent as is), status, words in the message)
        ("POST", "/api/sessions", "", 400, ["No JSON data"]),
        ("POST", "/api/sessions", "[1]", 400, ["JSON object"]),
        ("POST", "/api/sessions", "{not json", 400, ["JSON object"]),
        ("POST", "/api/sessions", {"type": "notebook"}, 400, ["path", "required"]),
        ("POST", "/api/sessions", {"path": "a"}, 400, ["type", "required"]),
        ("POST", "/api/sessions", {"path": 7, "type": "notebook"}, 400, ["path", "string"]),
        ("POST", "/api/sessions", {"path": "", "type": "notebook"}, 400, ["path", "empty"]),
        ("POST", "/api/sessions", {"path": big, "type": "notebook"}, 400, ["path", "4096"]),
        ("POST", "/api/sessions", {"path": "a\u0000b", "type": "notebook"}, 400, ["path", "NUL"]),
        ("POST", "/api/sessions", {"path": "a", "type": ["x"]}, 400, ["type", "string"]),
        ("POST", "/api/sessions", {"path": "a", "type": "t" * 65}, 400, ["type", "64"]),
        ("POST", "/api/sessions", {"path": "a", "type": "notebook", "name": 3}, 400,
         ["name", "string"]),
        ("POST", "/api/sessions", {"path": "a", "type": "notebook", "kernel": "python3"}, 400,
         ["kernel", "object"]),
        ("POST", "/api/sessions", {"path": "a", "type": "notebook", "kernel": {"name": 3}}, 400,
         ["kernel.name", "string"]),
        ("POST", "/api/sessions", {"path": "a", "type": "notebook", "kernel": {"name": "ruby"}},
         404, ["kernel.name", "ruby"]),
        ("POST", "/api/sessions", {"path": "a", "type": "notebook", "kernel": {"id": 5}}, 400,
         ["kernel.id", "string"]),
        ("POST", "/api/sessions",
         {"path": "a", "type": "notebook", "kernel": {"id": str(uuid.uuid4())}}, 400,
         ["kernel.id", "no kernel"]),
        ("POST", "/api/sessions", {"notebook": "x.ipynb", "type": "notebook"}, 400,
         ["notebook", "object"]),
        ("GET", f"/api/sessions/{uuid.uuid4()}", None, 404, ["Session not found", "session_id"]),
        ("PATCH", f"/api/sessions/{uuid.uuid4()}", {"path": "x"}, 404, ["Session not found"]),
        ("DELETE", f"/api/sessions/{uuid.uuid4()}", None, 404, ["Session not found"]),
        ("PATCH", f"/api/sessions/{sid}", "", 400, ["No JSON data"]),
        ("PATCH", f"/api/sessions/{sid}", {"path": 1}, 400, ["path", "string"]),
        ("PATCH", f"/api/sessions/{sid}", {"path": ""}, 400, ["path", "empty"]),
        ("PATCH", f"/api/sessions/{sid}", {"name": big}, 400, ["name", "4096"]),
        ("PATCH", f"/api/sessions/{sid}", {"kernel": {}}, 400, ["kernel", "id", "name"]),
        ("PATCH", f"/api/sessions/{sid}", {"kernel": {"id": "nope"}}, 400,
         ["kernel.id", "no kernel"]),
        ("PATCH", f"/api/sessions/{sid}", {"kernel": {"name": "ruby"}}, 404, ["kernel.name"]),
        ("PUT", f"/api/sessions/{sid}", {}, 405, ["PUT", "GET, PATCH, DELETE"]),
        ("DELETE", "/api/sessions", None, 405, ["DELETE", "GET, POST"]),
        ("GET", f"/api/sessions/{sid}/more", None, 404, ["no such endpoint"]),
    ]
    failures = []
    for method, path, body, status, words in cases:
        kwargs = {"data": body, "headers": {"Content-Type": "application/json"}} \
            if isinstance(body, str) else {"body": body}
        r = gw.request(method, path, **kwargs)
        try:
            got = r.json()
        except ValueError:
            got = {}
        message = got.get("message", "")
        if (r.status_code != status or set(got) != {"reason", "message"}
                or not all(w in message for w in words)):
            failures.append((method, path, str(body)[:60], r.status_code, r.text[:200]))
    assert failures == [], "\n".join(map(str, failures))
    # Nothing changed: one session at that path, as it was, and no new one.
    now = {m["id"]: m for m in sessions(gw)}
    assert now[sid]["path"] == "bad-input.ipynb" and now[sid]["name"] == "bad"
    assert now[sid]["kernel"]["id"] == s["kernel"]["id"]
    assert not [m for m in now.values() if m["path"] in ("a", "x")], now
    assert gw.request("DELETE", f"/api/sessions/{sid}").status_code == 204


def test_kernel_id_binds_a_kernel_and_patch_replaces_the_kernel(cordon, gw):
    k = gw.create_kernel()
    assert gw.wait_ready(k["id"]).text == "2"
    execute(gw, k["id"], "marker = 'bound'")
    s = post_session(gw, "bound.ipynb", kernel={"id": k["id"], "name": "ignored-for-id"})
    assert s["kernel"]["id"] == k["id"]
    assert execute(gw, s["kernel"]["id"], "marker").text == "'bound'"

    # kernel {"name"}: a new kernel; the old one is shut down before the answer.
    old = kernel_processes(cordon, k["id"])
    r = gw.request("PATCH", f"/api/sessions/{s['id']}", {"kernel": {"name": "python3"}})
    assert r.status_code == 200, r.text
    fresh = check_model(r.json(), path="bound.ipynb")["kernel"]["id"]
    assert fresh != k["id"]
    assert gw.kernel(k["id"]).status_code == 404
    assert wait_for(lambda: not any(still_running(p) for p in old))
    assert gw.wait_ready(fresh).text == "2"
    assert "NameError" in gw.execute(fresh, "marker").error["ename"]

    # kernel {"id"}: that kernel; the one it replaces is shut down.
    other = gw.create_kernel()
    r = gw.request("PATCH", f"/api/sessions/{s['id']}", {"kernel": {"id": other["id"]}})
    assert r.status_code == 200, r.text
    assert r.json()["kernel"]["id"] == other["id"]
    assert gw.kernel(fresh).status_code == 404
    # Binding the kernel it already has changes nothing.
    r = gw.request("PATCH", f"/api/sessions/{s['id']}", {"kernel": {"id": other["id"]}})
    assert r.status_code == 200 and r.json()["kernel"]["id"] == other["id"], r.text
    assert gw.kernel(other["id"]).status_code == 200
    assert gw.request("DELETE", f"/api/sessions/{s['id']}").status_code == 204
    assert gw.kernel(other["id"]).status_code == 404


def test_a_session_whose_kernel_was_shut_down_is_dropped(gw):
    s = post_session(gw, "orphan.ipynb")
    assert gw.delete(s["kernel"]["id"]).status_code == 204
    # As jupyter-server: the session of a culled kernel no longer exists.
    assert s["id"] not in {m["id"] for m in sessions(gw)}
    assert gw.request("GET", f"/api/sessions/{s['id']}").status_code == 404
    again = post_session(gw, "orphan.ipynb")
    assert again["id"] != s["id"]
    assert gw.request("DELETE", f"/api/sessions/{again['id']}").status_code == 204


def test_concurrent_posts_of_one_path_make_one_session(gw):
    answers = []

    def post():
        answers.append(gw.request("POST", "/api/sessions",
                                  {"path": "race.ipynb", "type": "notebook"}))

    threads = [threading.Thread(target=post) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r.status_code for r in answers] == [201] * 4, [r.text for r in answers]
    ids = {(r.json()["id"], r.json()["kernel"]["id"]) for r in answers}
    assert len(ids) == 1, ids
    assert [m["path"] for m in sessions(gw)].count("race.ipynb") == 1
    assert gw.request("DELETE", f"/api/sessions/{ids.pop()[0]}").status_code == 204


def test_sessions_survive_a_daemon_crash_with_their_kernel_lost_not_a_clean_stop(tmp_path):
    root = ROOT + "-crash"
    state = tmp_path / "state"
    first = Daemon(state, "--max-kernels", "2", cgroup_root=root)
    second = None
    try:
        gw = Gateway(first.url, first.token)
        s = post_session(gw, "kept.ipynb", name="kept")
        assert gw.wait_ready(s["kernel"]["id"]).text == "2"
        procs = kernel_processes(first, s["kernel"]["id"])
        first.kill()

        second = Daemon(state, "--max-kernels", "2", cgroup_root=root)
        assert not any(still_running(p) for p in procs), "the kernel survived the crash"
        gw = Gateway(second.url, second.token)
        listed = sessions(gw)
        assert [m["id"] for m in listed] == [s["id"]], listed
        kept = listed[0]
        assert kept["path"] == "kept.ipynb" and kept["name"] == "kept"
        assert kept["kernel"]["id"] == s["kernel"]["id"]
        # The kernel was lost with the daemon: its session says so.
        assert kept["kernel"]["execution_state"] == "dead", kept
        lost = second.client().request("GET", f"/v1/sessions/{s['kernel']['id']}")["state"]
        assert lost == "lost"
        r = gw.request("GET", f"/api/sessions/{s['id']}")
        assert r.status_code == 200 and r.json()["kernel"]["execution_state"] == "dead", r.text

        # The client's way back: a new kernel for the same session.
        r = gw.request("PATCH", f"/api/sessions/{s['id']}", {"kernel": {"name": "python3"}})
        assert r.status_code == 200, r.text
        fresh = r.json()["kernel"]["id"]
        assert fresh != s["kernel"]["id"]
        assert gw.wait_ready(fresh).text == "2"

        # At most 16 sessions per --max-kernels (here 32), however many bind one kernel.
        extra = [post_session(gw, f"many-{i}", type_="console", kernel={"id": fresh})
                 for i in range(31)]
        r = gw.request("POST", "/api/sessions", {"path": "one-too-many", "type": "console",
                                                 "kernel": {"id": fresh}})
        assert r.status_code == 403, r.text
        assert r.json()["reason"] == "Resource Limit" and "32 sessions" in r.json()["message"]
        # Deleting one shuts the shared kernel down, which ends the others too.
        assert gw.request("DELETE", f"/api/sessions/{extra[0]['id']}").status_code == 204
        assert sessions(gw) == []
        assert store_query(second.state_dir, "SELECT count(*) FROM jupyter_sessions") == [(0,)]

        # A clean stop shuts every kernel down (closed, not lost): their
        # sessions end with them, as kernels are not listed after it either.
        post_session(gw, "clean-stop.ipynb")
        stop_daemon(second)
        second = None
        third = Daemon(state, "--max-kernels", "2", cgroup_root=root)
        try:
            gw = Gateway(third.url, third.token)
            assert gw.kernels() == []
            assert sessions(gw) == []
            assert store_query(third.state_dir, "SELECT count(*) FROM jupyter_sessions") == [(0,)]
        finally:
            stop_daemon(third)
    finally:
        if second is not None:
            stop_daemon(second)
        else:
            if first.proc.poll() is None:
                first.stop()
            remove_cgroup_root(root)


# --- clients no one here wrote ----------------------------------------------

def wait_kernel_info(ws, session, within=60.0):
    """Sends kernel_info_request until one is answered, as JupyterLab does on
    connecting: a gateway-mode server drops what arrives before its own
    websocket to the gateway is open (issue 14: jupyter-server's race)."""
    deadline = time.monotonic() + within
    sent = set()
    while time.monotonic() < deadline:
        msg_id = uuid.uuid4().hex
        _, msg = execute_request("", session, msg_id)
        msg["header"]["msg_type"] = "kernel_info_request"
        msg["content"] = {}
        ws.send(json.dumps(msg))
        sent.add(msg_id)
        resend = min(deadline, time.monotonic() + 1.0)
        while time.monotonic() < resend:
            ws.settimeout(max(0.05, resend - time.monotonic()))
            try:
                frame = ws.recv()
            except websocket.WebSocketTimeoutException:
                break
            m = json.loads(frame)
            if (m.get("msg_type") == "kernel_info_reply"
                    and m["parent_header"].get("msg_id") in sent):
                return m
    raise AssertionError(f"no kernel_info_reply within {within}s")


def read_until(ws, execution, done, timeout=120):
    deadline = time.monotonic() + timeout
    while not done(execution):
        left = deadline - time.monotonic()
        assert left > 0, f"timed out; seen {[m.get('msg_type') for m in execution.messages]}"
        ws.settimeout(left)
        try:
            frame = ws.recv()
        except websocket.WebSocketTimeoutException:
            continue
        assert frame, "the server closed the websocket"
        msg = json.loads(frame)
        assert "header" in msg and "content" in msg, msg
        execution.feed(msg)
    return execution


PLOT = """\
import io
import matplotlib
matplotlib.use("module://matplotlib_inline.backend_inline")
import matplotlib.pyplot as plt
import numpy as np
from IPython.display import Image, display
fig, ax = plt.subplots(figsize=(%(w)d, %(h)d), dpi=100)
ax.imshow(np.random.default_rng(7).random((%(rows)d, %(cols)d, 3)))
ax.plot(np.linspace(0, %(cols)d, 100), np.linspace(0, %(rows)d, 100))
png = io.BytesIO()
fig.savefig(png, format="png", dpi=100)
plt.close(fig)
display(Image(png.getvalue()))
"""
# A noise image compresses badly: a PNG of most of a megabyte, so that a
# large display_data crosses every layer. Saved at the figure's own size
# (800 x 600), unlike plt.show() under the inline backend, which crops.
PLOT_SIZES = {"w": 8, "h": 6, "rows": 600, "cols": 800}


def run_through_server(server, cordon_gw):
    """A notebook server's own client flow: POST its /api/sessions, open two
    websockets (two browser tabs) on the session's kernel, run code through
    each. Returns nothing; asserts on the way."""
    c = server.client
    r = c.request("POST", "/api/sessions", {"path": "via-gateway.ipynb", "type": "notebook",
                                            "name": "via-gateway.ipynb",
                                            "kernel": {"name": "python3"}})
    assert r.status_code == 201, (r.status_code, r.text)
    session = r.json()
    kid = session["kernel"]["id"]
    # The kernel is cordon's (gateway mode keeps the gateway's kernel ids).
    assert cordon_gw.kernel(kid).status_code == 200, cordon_gw.kernels()

    a_id, b_id = uuid.uuid4().hex, uuid.uuid4().hex
    a = c.connect(kid, session_id=a_id)
    b = None
    try:
        assert wait_kernel_info(a, a_id)["content"]["status"] == "ok"
        e = read_until(a, c.send_execute(a, "x = 41\nprint('from a', flush=True)"),
                       lambda e: e.complete)
        assert e.stdout == "from a\n" and e.reply["status"] == "ok", (e.stdout, e.reply)

        b = c.connect(kid, session_id=b_id)
        wait_kernel_info(b, b_id)
        # Each server opened a websocket of its own to cordon per client.
        assert wait_for(lambda: cordon_gw.kernel(kid).json()["connections"] == 2), \
            cordon_gw.kernel(kid).json()
        msg_id, msg = execute_request("x + 1", b_id)
        b.send(json.dumps(msg))
        on_b, on_a = Execution(msg_id), Execution(msg_id)
        read_until(b, on_b, lambda e: e.complete)
        assert on_b.text == "42", on_b.messages
        # iopub reaches the other client too (the reply only the requester).
        read_until(a, on_a, lambda e: e.idle and e.results)
        assert on_a.text == "42" and on_a.reply is None

        # A figure, through the notebook server and cordon, arrives whole.
        e = read_until(a, c.send_execute(a, PLOT % PLOT_SIZES), lambda e: e.complete)
        assert e.reply["status"] == "ok", (e.reply, e.error)
        pngs = [d["image/png"] for d in e.displays if "image/png" in d]
        assert len(pngs) == 1, e.displays
        assert png_check(decode_png(pngs[0])) == (800, 600)
    finally:
        a.close()
        if b is not None:
            b.close()
    r = c.request("DELETE", f"/api/sessions/{session['id']}")
    assert r.status_code == 204, (r.status_code, r.text)
    assert wait_for(lambda: cordon_gw.kernel(kid).status_code == 404), \
        "deleting the session on the notebook server left its kernel on cordon"


def test_a_store_that_cannot_be_read_is_a_500_not_a_kernel_that_does_not_exist(tmp_path):
    # A kernel id the daemon does not hold is looked up in its store. When
    # the store cannot answer, the gateway says so (500): not that the
    # kernel does not exist, which a client would believe.
    d = Daemon(tmp_path / "state", cgroup_root=ROOT + "-store")
    try:
        gw = Gateway(d.url, d.token)
        bind = {"path": "x.ipynb", "type": "notebook", "kernel": {"id": "no-such-kernel"}}
        db = sqlite3.connect(os.path.join(d.state_dir, "cordon.db"), timeout=30)
        try:
            db.execute("ALTER TABLE sessions RENAME TO sessions_away")
            db.commit()
            for r in [gw.kernel("no-such-kernel"), gw.request("GET", "/api/kernels"),
                      gw.request("POST", "/api/sessions", bind)]:
                assert r.status_code == 500, (r.request.method, r.request.url, r.text)
                assert "record" in r.json()["message"], r.text
        finally:
            db.execute("ALTER TABLE sessions_away RENAME TO sessions")
            db.commit()
            db.close()
        # Readable again: what those requests said before, and nothing changed.
        assert gw.kernel("no-such-kernel").status_code == 404
        assert gw.kernels() == []
        r = gw.request("POST", "/api/sessions", bind)
        assert r.status_code == 400 and "no kernel no-such-kernel" in r.text, r.text
        assert sessions(gw) == []
    finally:
        stop_daemon(d)


def test_jupyter_server_1_23_in_gateway_mode(gw, tmp_path):
    import jupyter_server
    assert jupyter_server.__version__.startswith("1."), jupyter_server.__version__
    server = JupyterServer(tmp_path / "jupyter-server", module="jupyter_server", gateway=gw)
    try:
        run_through_server(server, gw)
    finally:
        server.stop()


def test_notebook_6_4_in_gateway_mode(gw, tmp_path):
    try:
        import notebook
    except ImportError:
        pytest.fail("Debian's python3-notebook is missing: `make deps` installs it "
                    "(apt-get install python3-notebook)")
    assert notebook.__version__.startswith("6.4"), notebook.__version__
    server = JupyterServer(tmp_path / "notebook", module="notebook", gateway=gw)
    try:
        run_through_server(server, gw)
    finally:
        server.stop()


def test_a_notebook_with_a_plot_executes_cell_by_cell(gw, tmp_path):
    """A real .ipynb (nbformat), its code cells executed in order over one
    websocket, the outputs written back as nbclient would; the figure's
    display_data carries a whole PNG."""
    nbformat = pytest.importorskip("nbformat", reason="Debian's python3-nbformat is missing")
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("# A plot through cordon"),
        nbformat.v4.new_code_cell("%matplotlib inline\nimport matplotlib.pyplot as plt\n"
                                  "import numpy as np"),
        nbformat.v4.new_code_cell("x = np.linspace(0, 2 * np.pi, 400)\nx.size"),
        nbformat.v4.new_code_cell("fig, ax = plt.subplots(figsize=(6, 4), dpi=100)\n"
                                  "ax.plot(x, np.sin(x))\nax.set_title('sin')\n"
                                  "fig.savefig('sin.png', dpi=100)\nplt.show()"),
        nbformat.v4.new_code_cell(PLOT % PLOT_SIZES),
    ]
    path = tmp_path / "plot.ipynb"
    nbformat.write(nb, str(path))
    nb = nbformat.read(str(path), as_version=4)

    s = post_session(gw, "plot.ipynb", kernel={"name": "python3"})
    kid = s["kernel"]["id"]
    gw.wait_ready(kid)
    ws = gw.connect(kid)
    try:
        for count, cell in enumerate((c for c in nb.cells if c.cell_type == "code"), 1):
            e = gw.execute_on(ws, cell.source, timeout=180)
            assert e.reply["status"] == "ok", (cell.source, e.reply, e.error, e.stderr)
            cell.execution_count = e.reply["execution_count"]
            cell.outputs = [nbformat.v4.output_from_msg(m) for m in e.messages
                            if m["msg_type"] in ("stream", "display_data", "execute_result",
                                                 "error")]
    finally:
        ws.close()
    nbformat.validate(nb)
    nbformat.write(nb, str(path))
    done = nbformat.read(str(path), as_version=4)
    code = [c for c in done.cells if c.cell_type == "code"]
    assert code[1].outputs[0]["data"]["text/plain"] == "400"
    sizes = []
    for cell in code[2:]:
        pngs = [o["data"]["image/png"] for o in cell.outputs
                if o["output_type"] == "display_data" and "image/png" in o["data"]]
        assert len(pngs) == 1, cell.outputs
        sizes.append(png_check(decode_png(pngs[0])))
    # plt.show() under the inline backend crops to the drawn area
    # (bbox_inches="tight"); the saved figure keeps its size.
    assert 0 < sizes[0][0] <= 600 and 0 < sizes[0][1] <= 400, sizes
    assert sizes[1] == (800, 600), sizes
    assert gw.request("DELETE", f"/api/sessions/{s['id']}").status_code == 204
