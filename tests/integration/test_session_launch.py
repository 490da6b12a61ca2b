"""A session's workspace (a loop image under the daemon's default disk
bound) is made, and its shell launched, on a worker thread of the daemon;
the loop attaches it, and a close's workspace goes on a worker too. What a
client sees of that, against a real daemon and its store: creates of one id
while its workspace is being made share one runtime, a delete of an id
being made again is refused until it is, and a daemon stopped while
sessions are being made answers each create and leaves no process, grant,
cgroup or mount of them; nor does a create the daemon fails for want of
descriptors. An earlier generation's workspace, however big, is removed,
and a big file uploaded or downloaded, while other clients are answered.
A restarting shell's next one is launched on a worker too: a delete or a
stop meanwhile closes the session and leaves nothing of it."""
import hashlib
import http.client
import os
import resource
import sys
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "clients", "python"))

from cordon_client.errors import CordonError  # noqa: E402
from daemon_support import (  # noqa: E402  (tests/integration/daemon_support.py)
    CGROUP_ROOT,
    Daemon,
    active_grants,
    mounts_beneath,
    open_fds,
    pids_in_cgroup_tree,
    stop_amid,
    stop_leaving_nothing_mounted,
    store_query,
    wait_for,
)


def test_a_delete_while_the_next_generation_is_made_never_pulls_its_workspace(state_dir):
    d = Daemon(state_dir, "--prespawn-runs", "0")
    try:
        c = d.client()
        c.session("again", env={"MINE": "1"}).close()
        # Generation 2 (cold: an environment of its own) while deletes come.
        made = []

        def create():
            try:
                made.append(c.session("again", env={"MINE": "2"}))
            except CordonError as e:
                made.append(e)

        creator = threading.Thread(target=create)
        refused = []
        creator.start()
        other = d.client()
        while creator.is_alive():
            try:
                other.request("DELETE", "/v1/sessions/again?keep_workspace=true")
            except CordonError as e:
                # Its workspace is being made, or it is being closed.
                assert (e.status, e.code) == (409, "conflict"), e
                refused.append(e.message)
        creator.join()
        assert len(made) == 1, made
        if isinstance(made[0], CordonError):
            # A delete closed it while it started: said so.
            assert (made[0].status, made[0].code) == (409, "conflict"), made[0]
            assert "was closed" in made[0].message, made[0]
        elif made[0].refresh()["state"] in ("ready", "busy"):
            # No delete got in: it works, in its own workspace.
            r = made[0].exec("echo $MINE; echo ok > f; cat f")
            assert r["stdout"] == "2\nok\n", r
        assert all("being created" in m or "being closed" in m for m in refused), refused
        # Whatever came of it, the id is usable again.
        again = c.session("again", env={"MINE": "3"})
        assert again.exec("echo $MINE")["stdout"] == "3\n"
        again.close()
    finally:
        stop_leaving_nothing_mounted(d, state_dir)


def test_a_stop_while_sessions_are_made_answers_each_and_leaves_nothing(state_dir):
    # Cold creates (an environment each: no warm shell matches), each with
    # the daemon's default disk bound, a loop image made on a worker.
    d = Daemon(state_dir, "--prespawn-runs", "0", "--max-sessions", "64")
    answers = []
    first = threading.Event()

    def one(i):
        try:
            answers.append(d.client().session(f"stop-{i}", env={"N": str(i)}))
        except CordonError as e:
            answers.append(e)
        first.set()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(12)]
    # The stop lands once the first is answered: the rest are being made,
    # attached, or queued for a worker.
    stop_amid(d, threads, first.is_set)
    assert len(answers) == 12
    for a in answers:
        if isinstance(a, CordonError):
            # Refused at the door, or told it was not started or was closed.
            assert (a.status, a.code) in ((503, "stopping"), (409, "conflict")), a
    # Every grant made was released; no process is left in its groups, no
    # workspace is left mounted.
    assert active_grants(state_dir) == []
    assert pids_in_cgroup_tree(CGROUP_ROOT) == set()
    assert mounts_beneath(state_dir) == []
    # What was started is on record as closed, its workspace kept.
    states = dict(store_query(state_dir, "SELECT id, state FROM sessions"))
    assert set(states.values()) <= {"closed"}, states
    for a in answers:
        if not isinstance(a, CordonError):
            assert states.get(a.info["id"]) == "closed", (a.info, states)


def test_a_create_failed_for_want_of_descriptors_leaves_nothing(state_dir):
    # The daemon is allowed a few descriptors more than it holds, one more
    # each round, so that a cold create fails at each of the steps that
    # take one (its loop image, the sandbox's mount trees, pipes, clone3,
    # attaching), until one is enough. Each failure is said, and leaves no
    # workspace, image, mount, grant or process of the id; the daemon then
    # works as before. No pool: nothing else takes descriptors meanwhile.
    d = Daemon(state_dir, "--prespawn-runs", "0", "--prespawn-shells", "0")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        c = d.client()
        c.session("first").close()  # the store and the workspaces' parent made
        failures = []
        for spare in range(64):
            resource.prlimit(d.pid, resource.RLIMIT_NOFILE, (open_fds(d.pid) + spare, hard))
            try:
                made = c.session(f"fd-{spare}")
            except CordonError as e:
                made = e
            finally:
                resource.prlimit(d.pid, resource.RLIMIT_NOFILE, (soft, hard))
            if not isinstance(made, CordonError):
                assert made.exec("echo ok")["stdout"] == "ok\n"
                made.close()
                break
            assert (made.status, made.code) == (500, "internal"), made
            assert "EMFILE" in made.message, made.message
            failures.append(made.message)
            leftovers = [n for n in os.listdir(os.path.join(state_dir, "workspaces"))
                         if n.startswith(f"fd-{spare}")]
            assert leftovers == [], (made.message, leftovers)
            assert mounts_beneath(state_dir) == [], made.message
            assert active_grants(state_dir) == [], made.message
            assert pids_in_cgroup_tree(CGROUP_ROOT) == set(), made.message
        else:
            raise AssertionError("64 descriptors more were not enough for a create")
        assert failures, "no create failed: the test tested nothing"
        again = c.session("after")
        assert again.exec("echo again")["stdout"] == "again\n"
        again.close()
    finally:
        resource.prlimit(d.pid, resource.RLIMIT_NOFILE, (soft, hard))
        stop_leaving_nothing_mounted(d, state_dir)


def test_a_python_session_whose_channels_cannot_connect_for_want_of_descriptors_fails_soon(
        state_dir, tmp_path):
    # The kernel starts, and waits before binding its sockets until the test
    # has left the daemon no descriptor to spare. libzmq then cannot make a
    # socket to connect with, and retries unseen: the create must fail with
    # the reason long before the 120 s ready timeout, and leave no process
    # or grant; the same id then starts again once descriptors are back.
    d = Daemon(state_dir, "--prespawn-runs", "0", "--prespawn-shells", "0",
               "--kernel-ready-timeout", "120")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    hold = tmp_path / "hold"
    hold.mkdir()
    os.chmod(tmp_path, 0o755)
    os.chmod(hold, 0o777)
    (hold / "sitecustomize.py").write_text(
        "import os, time\n"
        f"open({str(hold / 'started')!r}, 'w').close()\n"
        f"while not os.path.exists({str(hold / 'go')!r}):\n"
        "    time.sleep(0.01)\n")
    try:
        c = d.client()
        c.request("POST", "/v1/sessions", {"kind": "python", "id": "first"})
        c.request("DELETE", "/v1/sessions/first")  # libzmq's context and threads made
        answer = {}

        def create():
            t = time.monotonic()
            try:
                answer["view"] = c.request("POST", "/v1/sessions", {
                    "kind": "python", "id": "starved", "isolation": "none",
                    "env": {"PYTHONPATH": str(hold)}})
            except CordonError as e:
                answer["error"] = e
            answer["s"] = time.monotonic() - t

        creating = threading.Thread(target=create)
        creating.start()
        try:
            # The kernel is held in its start-up. The daemon makes its sockets
            # (Kernel::Attach) right after it lets the kernel start, before
            # the kernel's Python is far enough to read sitecustomize.
            assert wait_for((hold / "started").exists, within=60), answer
            # A new descriptor takes the lowest number free, and fails only
            # where none below the limit is: 3 leaves none (stdin, stdout,
            # stderr), as a table filled to its limit would.
            resource.prlimit(d.pid, resource.RLIMIT_NOFILE, (3, hard))
            (hold / "go").touch()
            creating.join(timeout=100)
        finally:
            resource.prlimit(d.pid, resource.RLIMIT_NOFILE, (soft, hard))
            (hold / "go").touch()
            creating.join()
        error = answer.get("error")
        assert error is not None, answer
        # Invalidated, or quarantined where its teardown, still short of
        # descriptors, could not be verified (retried every second after).
        assert (error.status, error.code) in ((500, "internal"), (409, "quarantined")), error
        assert "could not make a socket for its connections to the kernel" in error.message
        assert "EMFILE" in error.message, error.message
        assert answer["s"] < 60, answer  # half the ready timeout; ~1 s in fact
        wait_for(lambda: c.request("GET", "/v1/sessions/starved")["state"] != "quarantined",
                 within=30)
        # Then closed (its quarantine resolved) or invalidated.
        assert c.request("GET", "/v1/sessions/starved")["state"] in ("closed", "invalidated")
        assert active_grants(state_dir) == []
        assert pids_in_cgroup_tree(CGROUP_ROOT) == set()
        (hold / "sitecustomize.py").unlink()
        again = c.request("POST", "/v1/sessions", {"kind": "python", "id": "starved",
                                                   "isolation": "none"})
        ran = c.request("POST", "/v1/sessions/starved/exec", {"code": "print(6 * 7)"})
        assert (ran["status"], ran["stdout"]) == ("ok", "42\n"), (again, ran)
        c.request("DELETE", "/v1/sessions/starved")
    finally:
        resource.prlimit(d.pid, resource.RLIMIT_NOFILE, (soft, hard))
        stop_leaving_nothing_mounted(d, state_dir)


class Others:
    """Another client's requests, one after another, while the test does
    something slow: which were sent and answered within a window."""

    def __init__(self, daemon):
        self.answered = []  # (sent, answered)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(daemon.client(),))
        self.thread.start()
        while not self.answered:
            time.sleep(0.01)

    def _run(self, client):
        while not self.stop.is_set():
            sent = time.monotonic()
            client.health()
            self.answered.append((sent, time.monotonic()))

    def within(self, began, ended):
        return len([a for a in self.answered if began < a[0] and a[1] < ended])

    def join(self):
        self.stop.set()
        self.thread.join()


def test_a_big_leftover_workspace_is_removed_while_others_are_answered(state_dir):
    # A session's workspace of 100000 files and 200 MB, kept by its close.
    # Creating the id again (a default spec: the warm pool matches) removes
    # it first, which takes a while; meanwhile another client's requests
    # are answered, one after another. (Removed on the daemon's loop, it
    # held every other request until it was done.)
    d = Daemon(state_dir, "--prespawn-runs", "0")
    try:
        c = d.client()
        s = c.session("big")
        r = s.exec("mkdir d && cd d && seq 1 100000 | xargs touch && "
                   "head -c 200M /dev/zero > /workspace/blob && echo made", timeout_ms=300000)
        assert r["stdout"] == "made\n", r
        c.request("DELETE", "/v1/sessions/big?keep_workspace=true")
        others = Others(d)
        began = time.monotonic()
        again = c.session("big")
        ended = time.monotonic()
        others.join()
        during = others.within(began, ended)
        assert during >= 10, (f"{during} requests answered during the "
                              f"{ended - began:.3f} s the create took")
        # A fresh generation: nothing of the old workspace is left in it.
        assert again.exec("ls -A /workspace")["stdout"] == ""
        again.close()
    finally:
        stop_leaving_nothing_mounted(d, state_dir)


class BigFile:
    """A 128 MB file uploaded to a session's workspace over a connection of
    its own, then requests about it on that connection, timed."""

    def __init__(self, daemon, session_id):
        url = urllib.parse.urlparse(daemon.url)
        self.conn = http.client.HTTPConnection(url.hostname, url.port, timeout=300)
        self.auth = {"Authorization": "Bearer " + daemon.token}
        self.target = f"/v1/sessions/{session_id}/files/big.bin"
        self.data = os.urandom(1 << 20) * 128
        put, body, _, _ = self.timed("PUT", self.target, self.data)
        assert put.status == 201, body

    def send_append(self):
        """Sends the append of one byte with the whole file's digest, which
        the daemon checks by reading the file again; returns when sent."""
        self.data += b"!"
        digest = hashlib.sha256(self.data).hexdigest()
        self.conn.request("PUT", f"{self.target}?offset={len(self.data) - 1}", body=b"!",
                          headers={**self.auth, "X-Content-SHA256": digest})
        return time.monotonic()

    def answer(self):
        """The answer to what was sent: (response, its body, when it came)."""
        response = self.conn.getresponse()
        answered = time.monotonic()
        return response, response.read(), answered

    def timed(self, method, path, body=None):
        self.conn.request(method, path, body=body, headers=self.auth)
        sent = time.monotonic()
        response, read, answered = self.answer()
        return response, read, sent, answered


def test_a_big_file_is_hashed_and_read_while_others_are_answered(state_dir):
    # A 128 MB file, then one byte appended to it with the digest of the
    # whole, then the file downloaded (read and hashed before the answer
    # begins). Between each request and its answer another client's
    # requests are answered. (On the daemon's loop, that work held every
    # other request.)
    d = Daemon(state_dir, "--prespawn-runs", "0")
    try:
        d.client().session("files")
        f = BigFile(d, "files")
        others = Others(d)
        put_sent = f.send_append()
        put, body, put_answered = f.answer()
        got, got_body, got_sent, got_answered = f.timed("GET", f.target)
        others.join()
        digest = hashlib.sha256(f.data).hexdigest()
        assert put.status == 200, body
        assert got.status == 200 and got.getheader("X-Content-SHA256") == digest
        assert hashlib.sha256(got_body).hexdigest() == digest
        during_put = others.within(put_sent, put_answered)
        during_get = others.within(got_sent, got_answered)
        assert during_put >= 10, (f"{during_put} answered in the {put_answered - put_sent:.3f} s "
                                  "the append took")
        assert during_get >= 10, (f"{during_get} answered in the {got_answered - got_sent:.3f} s "
                                  "the download took to be answered")
    finally:
        stop_leaving_nothing_mounted(d, state_dir)


def test_a_close_during_a_big_transfer_answers_both_and_leaves_nothing(state_dir):
    # The append of one byte to a 128 MB file with the whole file's digest
    # while the session is deleted: the append is answered first, and done;
    # the delete once the workspace is gone, and then no workspace, image
    # or mount of the session is left. (A close waits for the transfers
    # under way; here the close's own unmount takes longer than the append,
    # so the order alone does not show that it does.)
    d = Daemon(state_dir, "--prespawn-runs", "0")
    try:
        c = d.client()
        c.session("gone")
        f = BigFile(d, "gone")
        f.send_append()
        closed = {}

        def delete():
            closed["view"] = c.request("DELETE", "/v1/sessions/gone")
            closed["at"] = time.monotonic()

        deleter = threading.Thread(target=delete)
        deleter.start()
        put, put_body, put_at = f.answer()
        deleter.join()
        assert put.status == 200, put_body
        assert closed["view"]["state"] == "closed", closed
        assert put_at < closed["at"], "the delete was answered before the append it waited for"
        workspaces = os.path.join(state_dir, "workspaces")
        assert [n for n in os.listdir(workspaces) if n.startswith("gone")] == []
        assert [m for m in mounts_beneath(state_dir) if "/workspaces/gone" in m] == []
    finally:
        stop_leaving_nothing_mounted(d, state_dir)


def test_a_delete_while_a_shell_restarts_closes_it_and_leaves_nothing(state_dir):
    # `exit 3` ends a session's shell; its next shell is launched on a
    # worker once the exec is answered, and the delete sent right after
    # lands while it is being launched or just after. Either way the delete
    # is answered with the session closed, and nothing of it is left: the
    # shell launched meanwhile is killed once it is, not left running.
    d = Daemon(state_dir, "--prespawn-runs", "0", "--prespawn-shells", "0")
    try:
        c = d.client()
        other = d.client()
        for i in range(8):
            s = c.session(f"restarting-{i}")
            r = s.exec("exit 3")
            assert r["exit_code"] == 3 and r["shell_restarted"] is True, r
            closed = other.request("DELETE", f"/v1/sessions/restarting-{i}")
            assert closed["state"] == "closed", closed
            assert wait_for(lambda: active_grants(state_dir) == [], within=30), \
                active_grants(state_dir)
            assert pids_in_cgroup_tree(CGROUP_ROOT) == set()
            assert [m for m in mounts_beneath(state_dir) if "/workspaces/restarting-" in m] == []
        states = dict(store_query(state_dir, "SELECT id, state FROM sessions"))
        assert set(states.values()) == {"closed"}, states
        # The id is usable again, and a restart still gives a working shell.
        again = c.session("restarting-0")
        assert again.exec("exit 4")["shell_restarted"] is True
        assert again.exec("echo back")["stdout"] == "back\n"
        again.close()
    finally:
        stop_leaving_nothing_mounted(d, state_dir)


def test_a_stop_while_shells_restart_answers_each_and_leaves_nothing(state_dir):
    # Six sessions whose shells exit again and again (each next shell
    # launched on a worker) while the daemon is stopped: every exec is
    # answered, and no process, grant or mount of them is left.
    d = Daemon(state_dir, "--prespawn-runs", "0", "--prespawn-shells", "0")
    sessions = [d.client().session(f"loop-{i}") for i in range(6)]
    restarted = threading.Event()
    errors = []

    def churn(s):
        while True:
            try:
                r = s.exec("exit 5")
            except (CordonError, OSError) as e:
                errors.append(e)
                return
            if r["invalidated"]:
                # Killed by the stop, or the exec went to a shell the stop
                # was tearing down: told so, never left waiting.
                continue
            assert r["shell_restarted"] and r["exit_code"] == 5, r
            restarted.set()

    threads = [threading.Thread(target=churn, args=(s,)) for s in sessions]
    stop_amid(d, threads, restarted.is_set)
    assert not any(t.is_alive() for t in threads)
    for e in errors:
        # Refused at the door, told the session is being closed or was, or
        # the connection went with the daemon.
        assert isinstance(e, OSError) or (e.status, e.code) in ((503, "stopping"),
                                                                (409, "conflict")), e
    assert active_grants(state_dir) == []
    assert pids_in_cgroup_tree(CGROUP_ROOT) == set()
    assert mounts_beneath(state_dir) == []
    states = dict(store_query(state_dir, "SELECT id, state FROM sessions"))
    assert set(states.values()) == {"closed"}, states
