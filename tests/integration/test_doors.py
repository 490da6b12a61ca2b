"""The daemon's doors against a real `cordon serve` on loopback: the
connection cap and the reserve that keeps /v1/health answering, the header
timeout that answers 408 and closes, and other clients served while 500 slow
connections (slowloris) trickle their headers. The bounds here are
functional (an answer at all, within a generous time), not speed targets;
bench/slowloris.py measures."""
import json
import os
import resource
import socket
import sys
import threading
import time
import urllib.parse

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "clients", "python"))

from cordon_client import Client  # noqa: E402

from daemon_support import CGROUP_ROOT, Daemon, logged, remove_cgroup_root, wait_for  # noqa: E402

SLOW_CONNECTIONS = 500


def raise_open_files(needed):
    """This process holds every socket of the attack: its soft limit must
    allow them (the daemon raises its own)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        if hard != resource.RLIM_INFINITY and hard < needed:
            pytest.skip(f"the open files hard limit ({hard}) is below the {needed} sockets "
                        "this test opens; raise ulimit -Hn")
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


def address(daemon):
    parsed = urllib.parse.urlsplit(daemon.url)
    return parsed.hostname, parsed.port


def connect(daemon):
    return socket.create_connection(address(daemon), timeout=20)


def read_to_end(sock, within=20.0):
    """Everything the daemon sends until it closes; raises if it does not
    close within `within` seconds."""
    sock.settimeout(within)
    data = b""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return data
        if not chunk:
            return data
        data += chunk
    raise AssertionError(f"the daemon did not close the connection within {within} s: {data!r}")


def status_of(answer):
    line = answer.split(b"\r\n", 1)[0]
    return int(line.split()[1]) if line.startswith(b"HTTP/1.1 ") else None


def open_sockets_of(pid):
    """How many sockets the process `pid` holds (its /proc fd table)."""
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:"):
                count += 1
        except OSError:
            pass
    return count


class Slowloris:
    """`count` connections that each send a request header one byte at a
    time, a round of bytes every `pause` seconds, and never finish it (an
    endless header line). A connection the daemon closed (408 at the header
    timeout) is opened again, so that `count` stay open."""

    HEAD = b"GET /v1/health HTTP/1.1\r\nHost: slow\r\nX-Slow: "

    def __init__(self, host, port, count, pause=0.2):
        self.target = (host, port)
        self.pause = pause
        self.reopened = 0
        self.stopping = threading.Event()
        self.conns = [self._open() for _ in range(count)]
        self.thread = threading.Thread(target=self._trickle, daemon=True)
        self.thread.start()

    def _open(self):
        s = socket.create_connection(self.target, timeout=20)
        s.setblocking(False)
        return [s, 0]

    def _next_byte(self, sent):
        return self.HEAD[sent:sent + 1] if sent < len(self.HEAD) else b"a"

    def _trickle(self):
        while not self.stopping.wait(self.pause):
            for conn in self.conns:
                s, sent = conn
                try:
                    s.recv(1, socket.MSG_PEEK)  # an answer (408) or the end: it is over
                    closed = True
                except BlockingIOError:
                    closed = False
                except OSError:
                    closed = True
                if not closed:
                    try:
                        s.send(self._next_byte(sent))
                        conn[1] = sent + 1
                        continue
                    except OSError:
                        pass
                s.close()
                if self.stopping.is_set():
                    return
                conn[:] = self._open()
                self.reopened += 1

    def close(self):
        self.stopping.set()
        self.thread.join(timeout=30)
        for s, _ in self.conns:
            s.close()


@pytest.fixture(scope="module")
def capped(tmp_path_factory):
    root = CGROUP_ROOT + "-capped"
    d = Daemon(tmp_path_factory.mktemp("capped") / "state", "--max-connections", "50",
               "--header-timeout", "2", cgroup_root=root)
    yield d
    assert d.stop() == 0
    assert remove_cgroup_root(root) == []


@pytest.fixture(scope="module")
def default_daemon(tmp_path_factory):
    root = CGROUP_ROOT + "-doors"
    d = Daemon(tmp_path_factory.mktemp("doors") / "state", cgroup_root=root)
    yield d
    assert d.stop() == 0
    assert remove_cgroup_root(root) == []


def test_the_cap_the_reserve_and_the_header_timeout(capped):
    raise_open_files(1024)
    # 60 connections that send nothing: 50 fill the cap, 10 are taken into
    # the reserve (connections are accepted in the order they were made).
    idle = [connect(capped) for _ in range(50)]
    extra = [connect(capped) for _ in range(10)]
    started = time.monotonic()
    # On the reserve only GET /v1/health is served, and once.
    health, others = extra[0], extra[1:]
    health.sendall(b"GET /v1/health HTTP/1.1\r\nHost: a\r\n\r\n")
    answer = read_to_end(health)
    assert status_of(answer) == 200, answer
    assert b'"status":"ok"' in answer.replace(b" ", b""), answer
    for s in others:
        s.sendall(b"POST /v1/runs HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\n{}")
    for s in others:
        answer = read_to_end(s)
        assert status_of(answer) == 503, answer
        assert b"over_capacity" in answer and b"--max-connections" in answer, answer
    # The reserve full too (16 held), a new connection is answered 503 before
    # it says anything.
    held = [connect(capped) for _ in range(16)]
    refused = connect(capped)
    answer = read_to_end(refused)
    assert status_of(answer) == 503 and b"over_capacity" in answer, answer
    assert time.monotonic() - started < 2, "too slow to test before the header timeout"
    # The idle ones are answered 408 at the header timeout and closed.
    for s in idle + held:
        answer = read_to_end(s)
        assert status_of(answer) == 408, answer
        assert b"--header-timeout" in answer, answer
    for s in idle + extra + held + [refused]:
        s.close()
    # And the daemon serves as before.
    assert Client(capped.url).health()["status"] == "ok"


def test_others_are_served_under_500_slow_connections(default_daemon):
    raise_open_files(SLOW_CONNECTIONS + 1024)
    client = default_daemon.client()
    client.run(argv=["/bin/true"])  # the connection and a first run, before the attack
    attack = Slowloris(*address(default_daemon), SLOW_CONNECTIONS)
    try:
        # Every slow connection is open at the daemon before anything is timed.
        deadline = time.monotonic() + 30
        while open_sockets_of(default_daemon.pid) < SLOW_CONNECTIONS and \
                time.monotonic() < deadline:
            time.sleep(0.05)
        assert open_sockets_of(default_daemon.pid) >= SLOW_CONNECTIONS
        took = []
        for i in range(20):
            t = time.monotonic()
            assert Client(default_daemon.url).health()["status"] == "ok"  # a new connection
            took.append(("health", time.monotonic() - t))
            if i % 2 == 0:
                t = time.monotonic()
                r = client.run(argv=["/bin/true"])
                assert r["outcome"] == "exited" and r["exit_code"] == 0, r
                took.append(("run", time.monotonic() - t))
        assert attack.thread.is_alive()
        assert open_sockets_of(default_daemon.pid) >= SLOW_CONNECTIONS
    finally:
        attack.close()
    slow = [(what, round(s, 3)) for what, s in took if s >= 2.0]
    assert not slow, \
        f"answers that took 2 s or more under {SLOW_CONNECTIONS} slow connections: {slow}"


@pytest.fixture(scope="module")
def sending(tmp_path_factory):
    root = CGROUP_ROOT + "-sending"
    # No warm run pool: its sandboxes are made on workers after the daemon
    # answers, and each holds a control socket, so the count of the
    # daemon's sockets the slow-reader test compares would move with it.
    d = Daemon(tmp_path_factory.mktemp("sending") / "state", "--send-timeout", "1",
               "--prespawn-runs", "0", cgroup_root=root)
    yield d
    assert d.stop() == 0
    assert remove_cgroup_root(root) == []


def run_request(daemon, argv, accept="application/json"):
    body = json.dumps({"argv": argv, "isolation": "none"}).encode()
    return (f"POST /v1/runs HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer {daemon.token}\r\n"
            f"Accept: {accept}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def small_window(daemon, receive_buffer=4096):
    """A connection with a small receive buffer, so that the daemon's writes
    stall as soon as this side stops reading."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    s.settimeout(20)
    s.connect(address(daemon))
    return s


def content_length(head):
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    raise AssertionError(f"no Content-Length in {head!r}")


# 8 MiB of "y\n" is 12 MiB of JSON: more than the socket buffers of both ends
# hold, so the daemon's write waits on the client.
FLOOD = ["/bin/sh", "-c", "yes | head -c 8388608"]


def test_a_client_that_stops_reading_is_disconnected(sending):
    baseline = open_sockets_of(sending.pid)
    s = small_window(sending)
    s.sendall(run_request(sending, FLOOD))
    # Nothing is read: within a few send timeouts the daemon gives up on the
    # client and frees its descriptor.
    assert wait_for(lambda: logged(sending, "http_slow_reader"), within=30), \
        "no http_slow_reader logged"
    assert wait_for(lambda: open_sockets_of(sending.pid) <= baseline, within=10)
    answer = read_to_end(s)
    s.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert status_of(head) == 200, head
    assert len(body) < content_length(head), "the whole answer arrived: nothing was cut"
    event = logged(sending, "http_slow_reader")[-1]
    assert event["limit_ms"] == 1000 and event["taken_in_limit"] < 64 << 10, event
    # The daemon serves others as before.
    assert sending.client().run(argv=["/bin/true"], isolation="none")["exit_code"] == 0


def test_a_slow_but_steady_reader_gets_the_whole_answer(sending):
    before = len(logged(sending, "http_slow_reader"))
    s = small_window(sending, receive_buffer=8192)
    s.sendall(run_request(sending, ["/bin/sh", "-c", "yes | head -c 4194304"]))
    # 6 MiB of JSON through a small window, a read every 10 ms: several
    # hundred KiB a second, well over 64 KiB in each 1 s send timeout, and
    # slower than the daemon writes (which alone would take a fraction of a
    # second), so that its write waits on this reader for several timeouts.
    started = time.monotonic()
    data = b""
    while True:
        chunk = s.recv(16384)
        if not chunk:
            break
        data += chunk
        head, sep, body = data.partition(b"\r\n\r\n")
        if sep and len(body) >= content_length(head):
            break
        time.sleep(0.01)
    took = time.monotonic() - started
    s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    result = json.loads(body)
    assert result["stdout"] == "y\n" * (1 << 21) and not result["stdout_truncated"], \
        result.get("stdout_bytes")
    assert took > 2, f"read in {took:.1f} s: the daemon never waited on this reader"
    assert len(logged(sending, "http_slow_reader")) == before


def test_a_streamed_run_whose_client_stops_reading_is_cancelled(sending):
    before = len(logged(sending, "http_slow_reader"))
    s = small_window(sending)
    # Output without end, streamed: nothing but the client's reading would
    # stop it before its deadline.
    s.sendall(run_request(sending, ["/bin/sh", "-c", "exec yes"], accept="application/x-ndjson"))
    assert wait_for(lambda: len(logged(sending, "http_slow_reader")) > before, within=30)
    request_id = logged(sending, "http_slow_reader")[-1]["request_id"]

    def finished():
        return [e for e in logged(sending, "run_finished") if e["request_id"] == request_id]
    assert wait_for(finished, within=30), "the run went on after its client was dropped"
    assert finished()[0]["outcome"] == "cancelled" and finished()[0]["dead"], finished()
    s.close()


def test_a_stream_whose_run_is_silent_is_not_cut(sending):
    s = socket.create_connection(address(sending), timeout=20)
    # Three send timeouts of silence between two lines of output.
    s.sendall(run_request(sending, ["/bin/sh", "-c", "echo a; sleep 3; echo b"],
                          accept="application/x-ndjson"))
    answer = read_until(s, b'"type":"result"')
    s.close()
    assert status_of(answer) == 200, answer
    assert b'"data":"a\\n"' in answer and b'"data":"b\\n"' in answer, answer
    assert b'"outcome":"exited"' in answer, answer


def read_until(sock, needle, within=20.0):
    sock.settimeout(within)
    data = b""
    deadline = time.monotonic() + within
    while needle not in data.replace(b" ", b""):
        if time.monotonic() > deadline:
            raise AssertionError(f"{needle!r} did not arrive within {within} s: {data!r}")
        chunk = sock.recv(65536)
        if not chunk:
            raise AssertionError(f"the connection closed before {needle!r}: {data!r}")
        data += chunk
    return data
