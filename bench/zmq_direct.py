#!/usr/bin/python3
"""The floor for a kernel round trip, in the same language as the gateway
clients it is compared with: a direct ZeroMQ client (Debian's python3-zmq)
to Debian's ipykernel over ipc sockets, doing per message what a Python
Jupyter client does (jupyter_client's Session: JSON and an HMAC-SHA256
signature out; the signature checked and every part parsed in), and
completing an execution the same way the gateway clients do
(tests/integration/kernel_gateway.py's Execution: execute_reply and
status idle with our parent).

The websocket clients of bench/gateway_bench.py are Python
(python3-websocket); timing them against the C++ build/bench/zmq_direct
charged the Python client's own per-message cost (frame parse, unmasking,
json.loads) to the gateway. This floor pays the same kind of client cost,
so the ratio measures what the gateway adds.

As a library: DirectKernel(workdir) starts the kernel; .wait_ready(),
.execute(code) -> Execution, .stop(). Alone:
    zmq_direct.py [RUNS]   prints {"create_ms", "first_result_ms", "round_trip_ms"}
"""
import hashlib
import hmac
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

import zmq

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
from kernel_gateway import Execution  # noqa: E402

DELIM = b"<IDS|MSG>"


class DirectKernel:
    """A kernel of its own in `workdir`, or, with `attach` (the ipc prefix and
    key of a kernel someone else started, e.g. a cordon sandbox's), a
    client of that one."""

    def __init__(self, workdir=None, attach=None):
        self.session = uuid.uuid4().hex
        self.started = time.perf_counter()
        self.proc = None
        if attach:
            ip, key = attach
            self.key = key.encode()
        else:
            os.makedirs(workdir, exist_ok=True)
            self.key = secrets.token_hex(32).encode()
            ip = os.path.join(workdir, "k")
            conn = {"transport": "ipc", "ip": ip, "shell_port": 1, "iopub_port": 2,
                    "stdin_port": 3, "control_port": 4, "hb_port": 5,
                    "key": self.key.decode(), "signature_scheme": "hmac-sha256",
                    "kernel_name": "python3"}
            path = os.path.join(workdir, "connection.json")
            with open(path, "w") as f:
                json.dump(conn, f)
            self.proc = subprocess.Popen(
                ["/usr/bin/python3", "-m", "ipykernel_launcher", "-f", path],
                # Its own directory: `-m` puts the working directory on
                # sys.path, where any inspect.py would shadow the stdlib's.
                cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.ctx = zmq.Context()
        self.shell = self.ctx.socket(zmq.DEALER)
        self.shell.linger = 0
        # A DEALER with no peer blocks a send forever: fail instead.
        self.shell.sndtimeo = 10000
        self.shell.connect(f"ipc://{ip}-1")
        self.iopub = self.ctx.socket(zmq.SUB)
        self.iopub.linger = 0
        self.iopub.setsockopt(zmq.SUBSCRIBE, b"")
        self.iopub.connect(f"ipc://{ip}-2")
        self.poller = zmq.Poller()
        self.poller.register(self.shell, zmq.POLLIN)
        self.poller.register(self.iopub, zmq.POLLIN)

    def sign(self, parts):
        h = hmac.new(self.key, digestmod=hashlib.sha256)
        for p in parts:
            h.update(p)
        return h.hexdigest().encode()

    def send(self, msg_type, content):
        msg_id = uuid.uuid4().hex
        header = {"msg_id": msg_id, "username": "bench", "session": self.session,
                  "msg_type": msg_type, "version": "5.3",
                  "date": time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())}
        parts = [json.dumps(x).encode() for x in (header, {}, {}, content)]
        self.shell.send_multipart([DELIM, self.sign(parts)] + parts)
        return msg_id

    def receive(self, timeout):
        """The next message from shell or iopub as a dict (like the
        websocket's JSON), its signature checked; None on timeout."""
        for sock, _ in self.poller.poll(timeout * 1000):
            frames = sock.recv_multipart()
            i = frames.index(DELIM)
            sig, parts = frames[i + 1], frames[i + 2:i + 6]
            if not hmac.compare_digest(sig, self.sign(parts)):
                raise AssertionError("a kernel message with a bad signature")
            header, parent, metadata, content = (json.loads(p) for p in parts)
            return {"header": header, "parent_header": parent, "metadata": metadata,
                    "content": content, "msg_type": header["msg_type"],
                    "buffers": frames[i + 6:]}
        return None

    def wait_ready(self, within=120.0):
        """kernel_info_request until a reply and an iopub message arrived
        (iopub subscriptions are not up before); seconds since start."""
        deadline = time.monotonic() + within
        info = iopub = False
        while not (info and iopub):
            if time.monotonic() > deadline:
                raise TimeoutError("the kernel did not answer kernel_info_request")
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"the kernel exited at start ({self.proc.returncode})")
            # Asked again until both came: a status sent before the
            # subscription was up is lost, and only a new request makes one.
            self.send("kernel_info_request", {})
            end = time.monotonic() + 0.05
            while time.monotonic() < end and not (info and iopub):
                m = self.receive(0.05)
                if m is None:
                    continue
                if m["msg_type"] == "kernel_info_reply":
                    info = True
                elif m["msg_type"] == "status":  # only iopub carries status
                    iopub = True
        return time.perf_counter() - self.started

    def execute(self, code, timeout=60.0):
        msg_id = self.send("execute_request", {
            "code": code, "silent": False, "store_history": True, "user_expressions": {},
            "allow_stdin": False, "stop_on_error": True})
        execution = Execution(msg_id)
        deadline = time.monotonic() + timeout
        while not execution.complete:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no completion of {code!r} within {timeout}s")
            m = self.receive(left)
            if m is not None:
                execution.feed(m)
        return execution

    def stop(self):
        self.shell.close()
        self.iopub.close()
        self.ctx.term()
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    work = tempfile.mkdtemp(prefix="cordon-zmq-py.")
    k = DirectKernel(work)
    try:
        create = k.wait_ready()
        assert k.execute("1+1").text == "2"
        first = time.perf_counter() - k.started
        trips = []
        for _ in range(runs):
            t = time.perf_counter()
            assert k.execute("1+1").text == "2"
            trips.append(time.perf_counter() - t)
    finally:
        k.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps({"create_ms": round(create * 1000, 2),
                      "first_result_ms": round(first * 1000, 2),
                      "round_trip_ms": round(statistics.median(trips) * 1000, 3),
                      "runs": runs}))


if __name__ == "__main__":
    main()
