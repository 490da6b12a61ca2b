"""The `disk` capability through a real `cordon serve`: a session's or a
run's workspace fills up to its bound and no further (ENOSPC or EDQUOT
inside), the session lives on, other sessions and the daemon are
unaffected; where the host cannot bound a workspace the grant reports
`disk` degraded with its reason. Every mount and loop device the daemons
made is gone when the tests end."""
import os
import shutil
import subprocess
import sys
import threading
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "clients", "python"))

from cordon_client import CordonError, TooLargeError  # noqa: E402

from daemon_support import (  # noqa: E402  (tests/integration/daemon_support.py)
    CGROUP_ROOT,
    Daemon,
    active_grants,
    cgroup_mounts,
    daemon_on_small_filesystem,
    empty_the_wal,
    fill_filesystem,
    remove_tree,
    wait_for,
)

MiB = 1 << 20
FULL = ("No space left on device", "Disk quota exceeded")


def mounts_under(prefix):
    """Mount points at or below `prefix` in this mount namespace."""
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            point = line.split(" ")[4]
            if point == prefix or point.startswith(prefix.rstrip("/") + "/"):
                found.append(point)
    return found


def loops_backed_under(prefix):
    """Loop devices whose backing file is below `prefix`."""
    found = []
    for name in os.listdir("/sys/block"):
        try:
            with open(f"/sys/block/{name}/loop/backing_file") as f:
                if f.read().startswith(prefix):
                    found.append(name)
        except OSError:
            pass
    return found


def disk_status(grant):
    """("enforced", mechanism) or ("degraded", reason) of `disk` in a grant summary."""
    if "disk" in grant["enforced"]:
        return "enforced", grant["mechanisms"]["disk"]
    for d in grant["degraded"]:
        if d["capability"] == "disk":
            return "degraded", d["reason"]
    return None, None


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return tmp_path_factory.mktemp("disk")


# These daemons keep no warm run sandboxes (--prespawn-runs 0): the tests
# watch the runs' scratch directory, where the pool keeps its own
# workspaces (test_run_pool.py checks those).
NO_RUN_POOL = ("--prespawn-runs", "0")


@pytest.fixture(scope="module")
def daemon(base):
    d = Daemon(base / "state", *NO_RUN_POOL)
    yield d
    assert d.stop() == 0
    for mount in cgroup_mounts():
        remove_tree(mount + CGROUP_ROOT)
    # Nothing of any workspace's bound is left: no mount, no loop device.
    assert mounts_under(str(base)) == []
    assert wait_for(lambda: loops_backed_under(str(base)) == [], within=10), \
        loops_backed_under(str(base))


@pytest.fixture()
def client(daemon):
    return daemon.client()


@pytest.fixture(scope="module")
def support(daemon):
    return daemon.client().probe()["disk"]


def test_the_probe_says_what_bounds_workspaces(client, support):
    assert support["state_dir"].endswith("/state")
    assert set(support["problems"]) == {"project_quota", "tmpfs", "loop_images"}
    entry = [c for c in client.probe()["capabilities"] if c["capability"] == "disk"][0]
    if support["ephemeral"] and support["persistent"]:
        assert entry["enforceable"] is True and entry["mechanism"]
    else:
        assert entry["enforceable"] is False and entry["reason"] and entry["fix"]


def test_a_session_fills_up_to_its_bound_and_lives_on(client, support):
    s = client.session("disk-full", limits={"disk_bytes": 16 * MiB}, permissive=True)
    try:
        status, detail = disk_status(s.info["grant"])
        if support["persistent"] is None:
            # The host cannot bound a session's workspace: said so, with why.
            assert status == "degraded" and detail, s.info["grant"]
            return
        assert (status, detail) == ("enforced", support["persistent"]), s.info["grant"]
        assert s.info["limits"]["disk_bytes"] == 16 * MiB

        r = s.exec("dd if=/dev/zero of=big bs=1M count=64")
        assert r["exit_code"] != 0, r
        assert any(m in r["stderr"] for m in FULL), r["stderr"]
        # The same shell goes on, and df shows the bound.
        r = s.exec("echo alive; rm -f big; df -k --output=size /workspace | tail -1")
        assert r["exit_code"] == 0, r
        alive, size = r["stdout"].split()
        assert alive == "alive" and 0 < int(size) <= 16 * 1024, r["stdout"]

        # An upload past the bound is a 413 naming the limit, and leaves nothing.
        with pytest.raises(TooLargeError) as e:
            s.put_file("upload.bin", b"\0" * (32 * MiB), chunk_size=32 * MiB)
        assert "limits.disk_bytes" in e.value.message, e.value.message
        assert "upload.bin" not in [f["name"] for f in s.list_files()]
        assert not [f for f in s.list_files() if f["name"].startswith(".cordon-upload-")]
        s.put_file("small.txt", b"fits")
        assert s.get_file("small.txt") == b"fits"
    finally:
        s.close()


def test_a_session_runs_out_of_inodes(client, support):
    if support["persistent"] is None:
        pytest.skip("the host cannot bound a session's workspace "
                    "(test_a_session_fills_up_to_its_bound_and_lives_on checks the degraded report)")
    with client.session("disk-inodes", limits={"disk_bytes": 64 * MiB, "disk_inodes": 200}) as s:
        r = s.exec("i=0; while [ $i -lt 1000 ]; do : > f$i || break; i=$((i+1)); done; echo $i")
        made = int(r["stdout"].split()[-1])
        assert made < 200, r
        assert any(m in r["stderr"] for m in FULL), r["stderr"]
        assert s.exec("echo alive")["stdout"] == "alive\n"


def test_a_closed_sessions_filesystem_is_gone_when_the_close_answers(client, support):
    """Once a close has answered, nothing is left of the workspace's bound:
    no loop device backed by its image. (The daemon used to keep the
    sandbox's mount trees open until it tidied up, up to a second later,
    which kept the image attached; and that last close then unmounted and
    freed it on the daemon's loop.) A warm session (the daemon's default
    bound) and a cold one (a bound of its own), three times each."""
    if support["persistent"] != "loop_image":
        pytest.skip(f"the host bounds sessions' workspaces with {support['persistent']}, "
                    "not loop images")
    for limits in (None, {"disk_bytes": 32 * MiB}) * 3:
        s = client.session(limits=limits) if limits else client.session()
        assert s.exec("echo kept > f")["exit_code"] == 0
        workspace = s.info["workspace"]
        assert loops_backed_under(workspace), "the session's workspace is not a loop image"
        s.close()
        assert loops_backed_under(workspace) == [], (limits, workspace)
        assert mounts_under(workspace) == []


def test_a_run_fills_up_to_its_bound(client, support, daemon):
    r = client.run(shell="dd if=/dev/zero of=big bs=1M count=64; echo rc=$?; "
                         "df -k --output=size . | tail -1",
                   limits={"disk_bytes": 8 * MiB}, permissive=True)
    status, detail = disk_status(r["grant"])
    if support["ephemeral"] is None:
        assert status == "degraded" and detail, r["grant"]
        return
    assert (status, detail) == ("enforced", support["ephemeral"]), r["grant"]
    assert "rc=0" not in r["stdout"], r
    assert any(m in r["stderr"] for m in FULL), r["stderr"]
    assert 0 < int(r["stdout"].split()[-1]) <= 8 * 1024, r["stdout"]
    # Its scratch workspace went with it, bound and all.
    scratch = os.path.join(daemon.state_dir, "scratch")
    assert mounts_under(scratch) == []
    assert not os.path.isdir(scratch) or os.listdir(scratch) == []


def test_a_full_session_leaves_the_others_alone(client, support):
    if support["persistent"] is None:
        pytest.skip("the host cannot bound a session's workspace "
                    "(test_a_session_fills_up_to_its_bound_and_lives_on checks the degraded report)")
    with client.session("disk-small", limits={"disk_bytes": 16 * MiB}) as small, \
            client.session("disk-large", limits={"disk_bytes": 256 * MiB}) as large:
        r = small.exec("dd if=/dev/zero of=big bs=1M count=64")
        assert any(m in r["stderr"] for m in FULL), r["stderr"]
        r = large.exec("dd if=/dev/zero of=big bs=1M count=64 && echo wrote")
        assert r["exit_code"] == 0 and "wrote" in r["stdout"], r
        assert client.health()["status"] == "ok"
        assert client.run(shell="echo fine")["stdout"] == "fine\n"


def test_bounds_outlive_a_daemon_killed_mid_run(base, support):
    """SIGKILL with a run in progress and a session with files: the next
    daemon removes the run's scratch (unmounting its tmpfs), and the lost
    session's next generation finds its files, still bounded. The run has
    no isolation: a namespaced run's tmpfs is in its own mount namespace,
    and nothing of it is on the host to remove."""
    if support["persistent"] is None or support["ephemeral"] is None:
        pytest.skip("the host cannot bound both kinds of workspace")
    state = base / "restart" / "state"
    first = Daemon(state, *NO_RUN_POOL)
    c = first.client()
    s = c.session("kept", limits={"disk_bytes": 16 * MiB})
    s.exec("echo data > notes")
    scratch = os.path.join(str(state), "scratch")
    box = {}

    def run():
        try:
            box["r"] = first.client().run(shell="sleep 60", limits={"disk_bytes": 8 * MiB},
                                          isolation="none")
        except Exception as e:  # the daemon dies under it
            box["e"] = e

    t = threading.Thread(target=run)
    t.start()
    try:
        if support["ephemeral"] == "tmpfs":
            assert wait_for(lambda: mounts_under(scratch) != []), "the run's tmpfs never appeared"
        else:
            assert wait_for(lambda: os.path.isdir(scratch) and os.listdir(scratch) != [])
    finally:
        first.kill()
        t.join(timeout=30)
    second = Daemon(state, *NO_RUN_POOL)
    try:
        assert mounts_under(scratch) == []
        assert os.listdir(scratch) == []
        c = second.client()
        again = c.session("kept", limits={"disk_bytes": 16 * MiB})
        assert again.info["spec"]["workspace_reused"] is True
        assert disk_status(again.info["grant"]) == ("enforced", support["persistent"])
        assert again.exec("cat notes")["stdout"] == "data\n"
        r = again.exec("dd if=/dev/zero of=big bs=1M count=64")
        assert any(m in r["stderr"] for m in FULL), r["stderr"]
        again.close()
        # A session still open when the daemon stops keeps its workspace
        # (its image), but no mount outlives the daemon.
        c.session("open", limits={"disk_bytes": 16 * MiB}).exec("echo x > kept")
    finally:
        assert second.stop() == 0
    kept = os.path.join(str(state), "workspaces", "open")
    if support["persistent"] == "loop_image":
        assert os.path.exists(kept + ".img")
    else:
        assert open(os.path.join(kept, "kept")).read() == "x\n"
    assert wait_for(lambda: loops_backed_under(str(state)) == [], within=10)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                    reason="hiding /dev/loop-control from a daemon needs root and unshare(1)")
def test_where_a_session_cannot_be_bounded_it_is_degraded_with_the_reason(base, support):
    """A daemon that cannot use loop devices (here: /dev/loop-control is
    /dev/null in its mount namespace) and has no project quota bounds no
    session: the default disk bound is degraded, with the reason and the
    fix; an explicit one is refused unless permissive."""
    if support["project_quota"]:
        pytest.skip("the state directory has project quotas: sessions are bounded without loops")
    state = base / "noloop" / "state"
    os.makedirs(state.parent, exist_ok=True)
    wrapper = state.parent / "serve"
    wrapper.write_text("#!/bin/sh\nmount --bind /dev/null /dev/loop-control && exec \"$@\"\n")
    wrapper.chmod(0o755)
    real = os.path.abspath(os.environ.get("CORDON_BINARY", "build/cordon"))
    launcher = state.parent / "cordon"
    launcher.write_text(f"#!/bin/sh\nexec unshare -m --propagation private {wrapper} {real} \"$@\"\n")
    launcher.chmod(0o755)
    d = Daemon(state, binary=str(launcher))
    try:
        c = d.client()
        disk = c.probe()["disk"]
        assert disk["loop_images"] is False and disk["problems"]["loop_images"], disk
        assert disk["persistent"] is None
        entry = [x for x in c.probe()["capabilities"] if x["capability"] == "disk"][0]
        assert entry["enforceable"] is False and entry["fix"], entry
        with c.session("unbounded") as s:  # the daemon's default bound
            status, reason = disk_status(s.info["grant"])
            assert status == "degraded", s.info["grant"]
            assert "not bounded" in reason and "loop" in reason, reason
        from cordon_client import ValidationError
        with pytest.raises(ValidationError) as e:
            c.session("explicit", limits={"disk_bytes": 16 * MiB})
        assert "disk" in e.value.message, e.value.message
    finally:
        assert d.stop() == 0


def test_health_says_while_the_store_cannot_write_and_since_when(tmp_path):
    # The state directory's filesystem full: nothing can be recorded, so
    # nothing new can start (507). GET /v1/health says so, with the first
    # error and its time, until a write succeeds again.
    with daemon_on_small_filesystem(tmp_path, "--prespawn-runs", "0", "--prespawn-shells", "0",
                                    cgroup_root=CGROUP_ROOT + "-store-health") as (state, d):
        c = d.client()
        # A workspace of its own (not on the full filesystem): what a run
        # then needs of the state directory is its records alone.
        workspace = tmp_path / "workspace"
        workspace.mkdir()

        def run():
            return c.run(["/bin/true"], isolation="none", workspace=str(workspace))

        assert run()["exit_code"] == 0
        health = c.health()
        assert health["status"] == "ok" and health["store"] == {"writes": "ok"}, health

        empty_the_wal(state)
        filler = state / "filler"
        fill_filesystem(filler)
        before_ms = time.time() * 1000
        for _ in range(2):
            with pytest.raises(CordonError) as e:
                run()
            assert e.value.status == 507, e.value
            assert "cannot record the grant" in e.value.message, e.value
        health = c.health()
        assert health["status"] == "degraded", health
        store = health["store"]
        assert store["writes"] == "failing" and any(f in store["error"] for f in FULL), store
        assert before_ms - 1000 <= store["since_ms"] <= time.time() * 1000, store
        first = store["since_ms"]
        with pytest.raises(CordonError):
            run()
        assert c.health()["store"]["since_ms"] == first  # the first failure's time stays

        os.unlink(filler)
        assert run()["exit_code"] == 0
        health = c.health()
        assert health["status"] == "ok" and health["store"] == {"writes": "ok"}, health


@pytest.mark.parametrize("reserve", [True, False], ids=["reserved", "sparse"])
def test_what_a_session_writes_survives_the_state_filesystem_filling_when_images_are_reserved(
        tmp_path, reserve):
    # A session's workspace image on a state filesystem that something
    # else then fills. Reserved (--reserve-disk), what the sandbox writes
    # reaches its image: `sync -f` says so, and it reads back whole from
    # the image file. Sparse (the default), the same write is
    # accepted and lost at writeback, which only `sync -f` reveals.
    with daemon_on_small_filesystem(tmp_path, "--prespawn-runs", "0", "--prespawn-shells", "0",
                                    *(["--reserve-disk"] if reserve else []), size="160M",
                                    cgroup_root=CGROUP_ROOT + "-reserve") as (state, d):
        c = d.client()
        disk = c.probe()["disk"]
        assert disk["reserve_images"] is reserve and disk["persistent"] == "loop_image", disk
        s = c.session("kept", limits={"disk_bytes": 64 * MiB})
        # Health says what the image may still take: nothing reserved,
        # most of its 64 MiB sparse.
        room = c.health()["state_filesystem"]
        fs = os.statvfs(state)
        assert room["size_bytes"] == fs.f_blocks * fs.f_frsize, room
        assert 0 < room["free_bytes"] <= room["size_bytes"], room
        if not reserve:
            assert 56 * MiB <= room["images_unwritten_bytes"] <= 64 * MiB, room
        else:
            assert room["images_unwritten_bytes"] == 0, room
            # A workspace that cannot be reserved is refused, and nothing
            # of it is left.
            with pytest.raises(CordonError) as e:
                c.session("too-big", limits={"disk_bytes": 128 * MiB})
            assert e.value.status == 507, e.value
            for says in ("cannot reserve the 134217728 bytes", "--reserve-disk", "had "):
                assert says in e.value.message, e.value
            assert not os.path.exists(state / "workspaces" / "too-big.img")

        filler = state / "filler"
        fill_filesystem(filler)
        wrote = s.exec("head -c 40M /dev/urandom > data && sha256sum data > sum && "
                       "sync -f data; echo synced=$?", timeout_ms=60000)
        os.unlink(filler)  # the store needs room for what follows
        if not reserve:
            assert "synced=1" in wrote["stdout"], wrote
            assert any(f in wrote["stderr"] for f in FULL + ("Input/output error",)), wrote
            return
        assert wrote["stdout"] == "synced=0\n", wrote

        # Read back from the image file itself, through a loop device of
        # the test's own (what the image holds, not the sandbox's page cache).
        s.close(keep_workspace=True)
        image, seen = state / "workspaces" / "kept.img", tmp_path / "seen"
        seen.mkdir()
        device = subprocess.run(["losetup", "--find", "--show", "--read-only", str(image)],
                                capture_output=True, text=True, check=True).stdout.strip()
        try:
            subprocess.run(["mount", "-o", "ro", device, str(seen)], check=True)
            try:
                checked = subprocess.run(["sha256sum", "-c", "sum"], cwd=seen,
                                         capture_output=True, text=True)
            finally:
                subprocess.run(["umount", str(seen)], check=True)
        finally:
            subprocess.run(["losetup", "-d", device], check=True)
        assert checked.stdout == "data: OK\n", checked


def test_a_session_whose_image_finds_no_room_is_refused_and_leaves_nothing(tmp_path):
    # Sparse images (the default) on a state filesystem with less room left
    # than an image's formatted metadata: the image's copy fails (ENOSPC),
    # and the session is refused 507 saying so. Never a session with an
    # unbounded workspace instead; nothing of it is left, and the same id
    # is made once there is room again.
    with daemon_on_small_filesystem(tmp_path, "--prespawn-runs", "0", "--prespawn-shells", "0",
                                    cgroup_root=CGROUP_ROOT + "-no-room") as (state, d):
        c = d.client()
        c.session("first", limits={"disk_bytes": 32 * MiB}).close()  # its template made
        templates = list((state / "images").iterdir())
        assert len(templates) == 1, templates
        metadata = os.stat(templates[0]).st_blocks * 512
        assert metadata >= 256 * 1024, metadata
        filler = state / "filler"
        fill_filesystem(filler)
        # Room for the store and a directory, not for an image's metadata.
        os.truncate(filler, os.stat(filler).st_size - metadata // 4)
        for permissive in (None, True):  # permissive too: want of room is no missing feature
            with pytest.raises(CordonError) as e:
                c.session("no-room", limits={"disk_bytes": 32 * MiB}, permissive=permissive)
            assert e.value.status == 507, e.value
            assert "ENOSPC" in e.value.message and "no-room.img" in e.value.message, e.value
        assert not os.path.exists(state / "workspaces" / "no-room.img")
        assert not os.path.exists(state / "workspaces" / "no-room")
        assert active_grants(state) == []
        assert c.sessions() == [] or all(s["id"] != "no-room" for s in c.sessions())
        os.unlink(filler)
        s = c.session("no-room", limits={"disk_bytes": 32 * MiB})
        size = s.exec("df -k --output=size /workspace | tail -1")["stdout"]
        assert int(size) * 1024 <= 32 * MiB, size  # bounded by its image
        s.close()
