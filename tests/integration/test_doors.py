"""The daemon's doors against a real `cordon serve` on loopback: the
connection cap and the reserve that keeps /v1/health answering, the header
timeout that answers 408 and closes, and other clients served while 500 slow
connections (slowloris) trickle their headers. The bounds here are
functional (an answer at all, within a generous time), not speed targets;
bench/slowloris.py measures."""
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

from daemon_support import CGROUP_ROOT, Daemon, remove_cgroup_root  # noqa: E402

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
