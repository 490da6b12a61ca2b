"""A Jupyter Kernel Gateway client written the way existing clients are
(AutoGen's Jupyter executor, DocsGPT-style sandboxes): Debian's
python3-requests for the REST calls and python3-websocket's
`websocket.create_connection` for the channels, a new websocket per
execution, `execute_request` with header version 5.3, messages filtered by
`parent_header.msg_id`, and an execution complete only once both its
`execute_reply` and its `status: idle` have arrived.

Also starts Debian's jupyter-server (python3-jupyter-server) as the
reference implementation of the same protocol. The tests
(test_gateway.py) and the benchmark (bench/gateway_bench.py) share this."""
import json
import os
import secrets
import signal
import subprocess
import time
import uuid

import requests
import websocket


class ExecutionTimeout(AssertionError):
    pass


class Execution:
    """What one execution produced, from the messages whose parent is its
    request."""

    def __init__(self, msg_id):
        self.msg_id = msg_id
        self.messages = []
        self.reply = None          # execute_reply content
        self.idle = False          # status idle with our parent seen
        self.busy = False
        self.stdout = ""
        self.stderr = ""
        self.results = []          # execute_result content["data"]
        self.displays = []         # display_data content["data"]
        self.error = None          # the iopub error content
        self.states = []           # every execution_state seen, in order

    @property
    def complete(self):
        return self.reply is not None and self.idle

    @property
    def text(self):
        """text/plain of the last execute_result (None if there was none)."""
        return self.results[-1].get("text/plain") if self.results else None

    def feed(self, msg):
        """Takes one message from the websocket; False when it is not ours."""
        if (msg.get("parent_header") or {}).get("msg_id") != self.msg_id:
            return False
        self.messages.append(msg)
        kind = msg.get("msg_type") or msg["header"]["msg_type"]
        content = msg.get("content") or {}
        if kind == "execute_reply":
            self.reply = content
        elif kind == "status":
            state = content.get("execution_state")
            self.states.append(state)
            if state == "idle":
                self.idle = True
            elif state == "busy":
                self.busy = True
        elif kind == "stream":
            if content.get("name") == "stderr":
                self.stderr += content.get("text", "")
            else:
                self.stdout += content.get("text", "")
        elif kind == "execute_result":
            self.results.append(content.get("data", {}))
        elif kind == "display_data":
            self.displays.append(content.get("data", {}))
        elif kind == "error":
            self.error = content
        return True


def execute_request(code, session, msg_id=None):
    msg_id = msg_id or uuid.uuid4().hex
    return msg_id, {
        "header": {"msg_id": msg_id, "username": "test", "session": session,
                   "msg_type": "execute_request", "version": "5.3",
                   "date": time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())},
        "parent_header": {}, "metadata": {}, "channel": "shell",
        "content": {"code": code, "silent": False, "store_history": True,
                    "user_expressions": {}, "allow_stdin": False, "stop_on_error": True},
    }


def receive(ws, execution, until, timeout, on_other=None):
    """Reads messages into `execution` until `until(execution)` holds; raises
    ExecutionTimeout after `timeout` seconds. Every message read is JSON with
    a header (a malformed frame fails the test)."""
    deadline = time.monotonic() + timeout
    while not until(execution):
        left = deadline - time.monotonic()
        if left <= 0:
            raise ExecutionTimeout(
                f"no completion within {timeout}s; seen: "
                f"{[m.get('msg_type') for m in execution.messages]}, states {execution.states}")
        ws.settimeout(left)
        try:
            frame = ws.recv()
        except websocket.WebSocketTimeoutException:
            continue
        if not frame:  # websocket-client 1.2 returns '' once the peer closed
            raise websocket.WebSocketConnectionClosedException("the server closed the websocket")
        msg = json.loads(frame)
        assert "header" in msg and "content" in msg, msg
        if not execution.feed(msg) and on_other is not None:
            on_other(msg)
    return execution


class Gateway:
    """REST + websocket client of one Kernel Gateway-style server. Every
    REST call is a fresh `requests.request` (no Session, so no cookie set by
    the server ever stands in for the token)."""

    def __init__(self, url, token, timeout=60):
        self.url = url.rstrip("/")
        self.ws_url = "ws" + self.url[len("http"):]
        self.token = token
        self.timeout = timeout
        self.session_id = uuid.uuid4().hex

    def auth(self, token=None):
        return {"Authorization": f"token {self.token if token is None else token}"}

    def request(self, method, path, body=None, headers=None, auth=True, **kwargs):
        h = dict(self.auth() if auth else {})
        h.update(headers or {})
        kwargs.setdefault("timeout", self.timeout)
        if body is not None:
            kwargs["json"] = body
        return requests.request(method, self.url + path, headers=h, **kwargs)

    # --- REST ---

    def api(self):
        return self.request("GET", "/api")

    def create_kernel(self, name=None, env=None):
        body = {}
        if name is not None:
            body["name"] = name
        if env is not None:
            body["env"] = env
        r = self.request("POST", "/api/kernels", body)
        assert r.status_code == 201, (r.status_code, r.text)
        model = r.json()
        assert r.headers.get("Location", "").endswith(f"/api/kernels/{model['id']}"), r.headers
        return model

    def kernel(self, kernel_id):
        return self.request("GET", f"/api/kernels/{kernel_id}")

    def kernels(self):
        r = self.request("GET", "/api/kernels")
        assert r.status_code == 200, (r.status_code, r.text)
        return r.json()

    def delete(self, kernel_id):
        return self.request("DELETE", f"/api/kernels/{kernel_id}")

    def interrupt(self, kernel_id):
        return self.request("POST", f"/api/kernels/{kernel_id}/interrupt")

    def restart(self, kernel_id):
        return self.request("POST", f"/api/kernels/{kernel_id}/restart")

    # --- websocket ---

    def channels_url(self, kernel_id, query_token=None, session_id=None):
        url = (f"{self.ws_url}/api/kernels/{kernel_id}/channels"
               f"?session_id={session_id or self.session_id}")
        if query_token is not None:
            url += f"&token={query_token}"
        return url

    def connect(self, kernel_id, token=None, header=True, query_token=None, session_id=None):
        """A new websocket to the kernel's channels, authenticated by the
        Authorization header (or not, with header=False) and/or ?token=.
        `session_id` names the client (jupyter-server closes an older
        connection of the same session id: another client needs its own)."""
        headers = [f"Authorization: token {self.token if token is None else token}"] \
            if header else []
        return websocket.create_connection(self.channels_url(kernel_id, query_token, session_id),
                                           header=headers, timeout=self.timeout)

    def send_execute(self, ws, code):
        msg_id, msg = execute_request(code, self.session_id)
        ws.send(json.dumps(msg))
        return Execution(msg_id)

    def execute_on(self, ws, code, timeout=None):
        """One execution over an open websocket, until reply and idle.

        After an error ipykernel aborts the requests already queued
        (`stop_on_error`), and one sent right after the error's idle can
        still be among them: its reply is `aborted`, and it is sent again
        (bounded), as clients do."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            execution = self.send_execute(ws, code)
            receive(ws, execution, lambda e: e.complete, max(0.1, deadline - time.monotonic()))
            if execution.reply.get("status") != "aborted" or time.monotonic() >= deadline:
                return execution
            time.sleep(0.01)

    def execute(self, kernel_id, code, timeout=None):
        """One execution over a new websocket, closed afterwards: how the
        executors of agent frameworks drive a gateway."""
        ws = self.connect(kernel_id)
        try:
            return self.execute_on(ws, code, timeout)
        finally:
            ws.close()

    def wait_ready(self, kernel_id, within=60.0):
        """Executes `1+1` until it answers "2" (a kernel just created or
        restarted may not be listening yet); returns the execution."""
        deadline = time.monotonic() + within
        while True:
            try:
                e = self.execute(kernel_id, "1+1", timeout=max(1.0, deadline - time.monotonic()))
                if e.text == "2":
                    return e
            except (ExecutionTimeout, websocket.WebSocketException, ConnectionError):
                if time.monotonic() >= deadline:
                    raise
            if time.monotonic() >= deadline:
                raise ExecutionTimeout(f"kernel {kernel_id} not ready within {within}s")


def _listening_ports(pid):
    """TCP ports `pid` listens on (IPv4 loopback), from its socket inodes."""
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    except OSError:
        return set()
    ports = set()
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and inode in inodes:
                ports.add(int(local.split(":")[1], 16))
    return ports


class JupyterServer:
    """Debian's jupyter-server (or, with module="notebook", notebook 6) on
    127.0.0.1, a port of its own choosing (--port=0), read back from its
    listening socket; runtime and data directories private to this
    instance. With `gateway` (a Gateway), it runs in gateway mode: its own
    /api/sessions and websockets are what its front end uses, its kernels
    are the gateway's. `client` is a Gateway client of it."""

    APPS = {"jupyter_server": ("ServerApp", "root_dir"), "notebook": ("NotebookApp", "notebook_dir")}

    def __init__(self, workdir, token=None, module="jupyter_server", gateway=None):
        app, root = self.APPS[module]
        self.module = module
        self.token = token or secrets.token_hex(16)
        self.workdir = str(workdir)
        os.makedirs(self.workdir, exist_ok=True)
        self.log_path = os.path.join(self.workdir, f"{module}.log")
        self.log = open(self.log_path, "ab")
        env = dict(os.environ)
        env.update(JUPYTER_RUNTIME_DIR=os.path.join(self.workdir, "runtime"),
                   JUPYTER_DATA_DIR=os.path.join(self.workdir, "data"),
                   JUPYTER_CONFIG_DIR=os.path.join(self.workdir, "config"),
                   IPYTHONDIR=os.path.join(self.workdir, "ipython"))
        argv = ["/usr/bin/python3", "-m", module, f"--{app}.token={self.token}",
                f"--{app}.port=0", f"--{app}.ip=127.0.0.1", "--no-browser",
                f"--{app}.allow_root=True", f"--{app}.{root}={self.workdir}"]
        if gateway is not None:
            argv += [f"--GatewayClient.url={gateway.url}",
                     f"--GatewayClient.auth_token={gateway.token}"]
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=self.log, env=env, cwd=self.workdir)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            ports = _listening_ports(self.proc.pid)
            if ports:
                self.url = f"http://127.0.0.1:{min(ports)}"
                try:
                    if requests.get(self.url + "/api", timeout=5).status_code == 200:
                        self.client = Gateway(self.url, self.token)
                        return
                except requests.ConnectionError:
                    pass
            if self.proc.poll() is not None:
                raise RuntimeError(f"{module} exited at start; see {self.log_path}")
            time.sleep(0.05)
        self.stop()
        raise TimeoutError(f"{module} did not start; see {self.log_path}")

    @property
    def pid(self):
        return self.proc.pid

    def stop(self):
        """Asks it to shut down (kernels first), then SIGTERM, then SIGKILL
        if it lingers. Returns its exit status."""
        if self.proc.poll() is None:
            # POST /api/shutdown shuts the kernels down and exits; jupyter-server
            # 1.23 stops its kernels on SIGTERM but then lingers.
            try:
                requests.post(getattr(self, "url", "http://127.0.0.1:1") + "/api/shutdown",
                              headers={"Authorization": f"token {self.token}"}, timeout=10)
            except requests.RequestException:
                pass
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    self.proc.wait(timeout=20)
                    break
                except subprocess.TimeoutExpired:
                    self.proc.send_signal(sig)
            self.proc.wait(timeout=30)
        self.log.close()
        return self.proc.returncode
