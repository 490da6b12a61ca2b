"""A real `cordon serve` for the Python tests and benchmarks, and the /proc
and cgroup helpers they check processes with. Only processes the tests
started are looked at or signalled (by pid); nothing is found by name."""
import atexit
import contextlib
import errno
import functools
import json
import os
import shutil
import signal
import subprocess
import time

# The suites name the binary; a bench or script run from anywhere finds the
# checkout's own build.
CORDON = os.environ.get("CORDON_BINARY", os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                      "..", "..", "build", "cordon"))


def cgroup_mounts(types=("cgroup", "cgroup2")):
    """The mount points of every cgroup hierarchy (v2, and v1 on hybrid hosts)."""
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            if right.split(" ")[0] in types:
                yield left.split(" ")[4]


def _cgroup_root():
    """The tests' cgroup root: at the top of the tree for root; for an
    unprivileged user, beneath its own v2 group where that is its to write
    (as user@.service delegates), since it can make groups nowhere else
    (tests/support/support.h's CgroupRoot, the same rule)."""
    name = f"/cordon-pytest-{os.getpid()}"
    if os.geteuid() == 0:
        return name
    with open("/proc/self/cgroup") as f:
        own = next((line.split("::", 1)[1].strip() for line in f if line.startswith("0::")), None)
    v2 = next(iter(cgroup_mounts(("cgroup2",))), None)
    if own is None or v2 is None or not os.access(v2 + own, os.W_OK):
        return name
    return ("" if own == "/" else own) + name


CGROUP_ROOT = _cgroup_root()


def remove_tree(path):
    """Removes a cgroup directory tree, leaves first (empty groups only)."""
    if not os.path.isdir(path):
        return
    for entry in os.scandir(path):
        if entry.is_dir(follow_symlinks=False):
            remove_tree(entry.path)
    try:
        os.rmdir(path)
    except OSError:
        pass


def remove_cgroup_root(cgroup_root, within=5.0):
    """Removes the test's cgroup trees; a group whose last task is still
    being reaped refuses rmdir (EBUSY) for a moment, so this retries.
    Returns what is still there."""
    deadline = time.monotonic() + within
    while True:
        left = []
        for mount in cgroup_mounts():
            remove_tree(mount + cgroup_root)
            if os.path.isdir(mount + cgroup_root):
                left.append(mount + cgroup_root)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.05)


def pids_in_cgroup_tree(cgroup_root):
    """Every pid listed in a cgroup.procs at or beneath `cgroup_root`, in any
    hierarchy."""
    pids = set()
    for mount in cgroup_mounts():
        top = mount + cgroup_root
        for directory, _, files in os.walk(top):
            if "cgroup.procs" in files:
                try:
                    with open(os.path.join(directory, "cgroup.procs")) as f:
                        pids.update(int(line) for line in f if line.strip())
                except OSError:
                    pass  # removed while we looked
    return {p for p in pids if alive(p)}


@functools.cache
def probe():
    """`cordon probe --json` under the tests' cgroup root, once per run. The
    probe makes that root; this process removes it as it exits (a test run,
    a bench or a script alike)."""
    atexit.register(remove_cgroup_root, CGROUP_ROOT)
    return json.loads(subprocess.run([CORDON, "probe", "--json", "--cgroup-root", CGROUP_ROOT],
                                     capture_output=True, text=True, check=True).stdout)


def cgroups_hold_trees():
    """Whether cordon's cgroups hold a run's tree here without isolation:
    not for an unprivileged user without a delegated group, where nothing a
    test starts is in a cgroup to be counted by."""
    return probe()["teardown"]["unisolated"] != "process_group"


def alive(pid):
    """False once `pid` has exited (gone, or a zombie nobody reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def identity(pid):
    """(pid, start time in ticks): the same process as long as it matches; None
    once it has exited."""
    stat = read_proc(pid, "stat").decode(errors="replace")
    if not stat:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] in ("Z", "X"):
        return None
    return (pid, int(fields[19]))


def still_running(ident):
    """Whether the process `identity()` returned is still the one running."""
    return identity(ident[0]) == ident


def parent(pid):
    stat = read_proc(pid, "stat").decode(errors="replace")
    return int(stat.rsplit(")", 1)[1].split()[1]) if stat else 0


def chain_below(pid, top):
    """The processes from `pid` up to, but not including, its ancestor `top`
    (empty when `top` is not an ancestor)."""
    chain = []
    while pid > 1 and pid != top:
        chain.append(pid)
        pid = parent(pid)
    return chain if pid == top else []


def wait_for(predicate, within=20.0):
    """Polls `predicate` until it holds or `within` seconds passed; returns
    its last value."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


# What a sandbox's shell prints to name its tree: its pid namespace and its
# own pid (sandbox_tree()).
PRINT_TREE = "readlink /proc/$$/ns/pid; echo $$"


def sandbox_tree(printed):
    """The identities (identity()) of the live processes of the sandbox whose
    shell printed `printed` (PRINT_TREE): how a test sees a tree from the
    host. With a pid namespace, the processes in it (its own pids mean
    nothing outside); without one (no user namespace), the shell's pid is
    the host's, and the tree is every process in its cgroups. A test takes
    this snapshot while the tree lives and later asks still_running() about
    these very processes: a namespace's number is reused once it is gone."""
    ns, _, shell = printed.strip().partition("\n")
    if ns != os.readlink("/proc/self/ns/pid"):
        def member(p):
            try:
                return os.readlink(f"/proc/{p}/ns/pid") == ns
            except OSError:
                return False
    else:
        cgroups = read_proc(int(shell), "cgroup") if shell.strip().isdigit() else b""
        if not cgroups or cgroups == read_proc(os.getpid(), "cgroup"):
            return []

        def member(p):
            return read_proc(p, "cgroup") == cgroups
    return [i for i in (identity(p) for p in live_pids() if member(p)) if i]


def any_running(tree):
    """Whether any process of a sandbox_tree() snapshot still runs."""
    return any(still_running(i) for i in tree)


def sandbox_namespaces():
    """Whether sandboxes get namespaces of their own here: without them
    there is no init in a session's tree, and no warm pool."""
    return probe()["isolation"]["namespaces"]


def sandboxes_run_as_own_uids():
    """Whether a root daemon's sandboxes run as uids of their own without a
    mount namespace here (no user namespace): they reach their workspaces
    by host path then."""
    return any(c["capability"] == "privileges" and (c.get("mechanism") or "").startswith("leased_uid")
               for c in probe()["capabilities"])


def make_passable(path):
    """Lets other users through `path` and the directories of ours above it
    in /tmp (o+x, not listing), as an operator's state directory must where
    sandboxes run as uids of their own (cordon serve warns otherwise:
    state_dir_not_reachable)."""
    path = os.path.abspath(path)
    while path.startswith("/tmp/"):
        st = os.stat(path)
        if st.st_uid == os.geteuid():
            os.chmod(path, (st.st_mode & 0o7777) | 0o011)
        path = os.path.dirname(path)


def visible_tree():
    """How many of a session's init, its shell and an escapee a test sees:
    an unprivileged test cannot read the namespace link of the init, which
    is undumpable; without namespaces there is no init."""
    return 3 if os.geteuid() == 0 and sandbox_namespaces() else 2


def live_pids():
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and alive(int(p))]


def read_proc(pid, name):
    try:
        with open(f"/proc/{pid}/{name}", "rb") as f:
            return f.read()
    except OSError:
        return b""


def pids_with_environ(needle):
    """Live processes whose environment contains `needle` (bytes)."""
    return {p for p in live_pids() if needle in read_proc(p, "environ")}


def pids_with_cmdline(needle):
    """Live processes whose command line contains `needle` (bytes)."""
    return {p for p in live_pids() if needle in read_proc(p, "cmdline")}


def descendants(root):
    """Live descendants of `root` (by ppid, as /proc shows them now)."""
    children = {}
    for p in live_pids():
        stat = read_proc(p, "stat").decode(errors="replace")
        if stat:
            children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(p)
    found, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer",
                     "AddressSanitizer:DEADLYSIGNAL", "runtime error:",
                     "SUMMARY: UndefinedBehaviorSanitizer")


def sanitizer_report(log_path):
    """The first sanitizer report in a log, from its line on, or None. A
    daemon that wrote one fails its test even if it answered everything."""
    try:
        with open(log_path, "rb") as f:
            text = f.read().decode(errors="replace")
    except OSError:
        return None
    found = [i for i in (text.find(m) for m in SANITIZER_MARKERS) if i >= 0]
    if not found:
        return None
    start = text.rfind("\n", 0, min(found)) + 1
    return text[start:start + 8192]


def check_sanitizer_log(log_path, who="the daemon"):
    report = sanitizer_report(log_path)
    if report:
        raise AssertionError(f"{who} wrote a sanitizer report ({log_path}):\n{report}")


class Daemon:
    """`cordon serve` on 127.0.0.1:0 with its own state directory; `url`,
    `token_file` and `token` from serve.json once it answers."""

    def __init__(self, state_dir, *extra, cgroup_root=CGROUP_ROOT, env=None, binary=None,
                 min_isolation="none"):
        # The tests ask for isolation none where the sandbox is not what they
        # test; min_isolation=None keeps the daemon's own floor (standard).
        self.state_dir = str(state_dir)
        os.makedirs(os.path.dirname(self.state_dir), exist_ok=True)
        if sandboxes_run_as_own_uids():
            make_passable(os.path.dirname(self.state_dir))
        self.cgroup_root = cgroup_root
        self.log_path = os.path.join(os.path.dirname(self.state_dir), "daemon.log")
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [binary or CORDON, "serve", "--state-dir", self.state_dir, "--listen", "127.0.0.1:0",
             "--cgroup-root", cgroup_root,
             *(["--min-isolation", min_isolation] if min_isolation else []), *extra],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self.log, env=env)
        serve = os.path.join(self.state_dir, "serve.json")
        deadline = time.monotonic() + 30
        # serve.json is written once the daemon answers (after recovery).
        while time.monotonic() < deadline:
            try:
                with open(serve) as f:
                    info = json.load(f)
                if info["pid"] == self.proc.pid:
                    self.url = info["urls"][0]
                    self.token_file = info["token_file"]
                    with open(self.token_file) as f:
                        self.token = f.readline().strip()
                    return
            except (OSError, ValueError):
                pass
            if self.proc.poll() is not None:
                self.log.close()
                raise RuntimeError(f"the daemon exited at start ({self.proc.returncode}); "
                                   f"see {self.log_path}")
            time.sleep(0.01)
        raise TimeoutError("the daemon did not start")

    @property
    def pid(self):
        return self.proc.pid

    def client(self, **kwargs):
        from cordon_client import Client  # clients/python, put on sys.path by the caller
        return Client(self.url, token_file=self.token_file, **kwargs)

    def kill(self):
        """SIGKILL, as a crash: nothing is torn down."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        self.log.close()
        check_sanitizer_log(self.log_path)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        status = self.proc.wait(timeout=60)
        if not self.log.closed:
            self.log.close()
        check_sanitizer_log(self.log_path)
        return status


# --- For the benchmarks (bench/): what a daemon holds, read from /proc and
# its state directory. Nothing here signals or changes anything. ---

def proc_status(pid):
    """/proc/<pid>/status as {key: text}, with the Vm* and Rss* sizes as
    bytes (ints); {} once the process is gone."""
    out = {}
    for line in read_proc(pid, "status").decode(errors="replace").splitlines():
        key, _, value = line.partition(":")
        value = value.strip()
        if value.endswith(" kB"):
            out[key] = int(value[:-3]) * 1024
        else:
            out[key] = value
    return out


def open_fds(pid):
    """How many descriptors `pid` has open."""
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


class PeakSampler:
    """Samples a process's VmRSS every `interval` seconds on a thread until
    stop(); `peak` is the largest seen (VmHWM is the kernel's own peak)."""

    def __init__(self, pid, interval=0.02):
        import threading
        self.pid = pid
        self.peak = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(interval,), daemon=True)
        self._thread.start()

    def _run(self, interval):
        while not self._stop.is_set():
            rss = proc_status(self.pid).get("VmRSS", 0)
            self.peak = max(self.peak, rss)
            self.samples += 1
            self._stop.wait(interval)

    def stop(self):
        self._stop.set()
        self._thread.join()
        return self.peak


def cgroups_beneath(cgroup_root):
    """Every cgroup directory strictly beneath `cgroup_root`, in any
    hierarchy (the root itself is not counted)."""
    found = []
    for mount in cgroup_mounts():
        top = mount + cgroup_root
        for directory, subdirs, _ in os.walk(top):
            found.extend(os.path.join(directory, d) for d in subdirs)
    return sorted(found)


def zombies_among(pids):
    """The pids of `pids` that are zombies (exited, not yet reaped)."""
    out = []
    for p in pids:
        stat = read_proc(p, "stat").decode(errors="replace")
        if stat and stat.rsplit(")", 1)[1].split()[0] == "Z":
            out.append(p)
    return out


def children_of(pid):
    """Direct children of `pid`, zombies included (as /proc shows them now)."""
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            stat = read_proc(int(p), "stat").decode(errors="replace")
            if stat and int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(p))
    return out


def id_lease_dir(state_dir):
    """Where a supervisor with this state directory leases outside ids: as
    root, the host's one directory (shared by every root supervisor, so it
    also holds other daemons' leases); otherwise <state>/ids."""
    if os.geteuid() == 0 and os.path.isdir("/run/cordon/ids"):
        return "/run/cordon/ids"
    return os.path.join(str(state_dir), "ids")


def held_id_leases(state_dir, except_holders=()):
    """The id lease files (<id>.lock in id_lease_dir) that some process
    holds an flock on now, read from /proc/locks (nothing is locked to find
    out); leases locked by a pid of `except_holders` are not counted."""
    ids = id_lease_dir(state_dir)
    try:
        names = os.listdir(ids)
    except OSError:
        return []
    inodes = {}
    for name in names:
        try:
            st = os.stat(os.path.join(ids, name))
        except OSError:
            continue
        inodes[(os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)] = name
    held = set()
    with open("/proc/locks") as f:
        for line in f:
            fields = line.split()
            # "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF" (or "-> ..." for waiters)
            if len(fields) < 6 or fields[1] == "->":
                continue
            try:
                major, minor, ino = fields[5].split(":")
                key = (int(major, 16), int(minor, 16), int(ino))
            except ValueError:
                continue
            if key in inodes and int(fields[4]) not in except_holders:
                held.add(inodes[key])
    return sorted(held)


def store_files(state_dir):
    """{name: bytes} of the store's files (cordon.db and its -wal, -shm)."""
    out = {}
    for name in ("cordon.db", "cordon.db-wal", "cordon.db-shm"):
        try:
            out[name] = os.path.getsize(os.path.join(str(state_dir), name))
        except OSError:
            pass
    return out


POOL_OWNERS = ("session-pool", "run-pool")


def assert_count_option_refused(option, tmp_path):
    """`option` takes a count: a negative one and a word are refused at
    start, naming the option, and no state directory is made."""
    import pytest
    for bad, why in (("-1", "must not be negative"), ("many", "expected a whole number")):
        where = tmp_path / ("bad" + bad) / "state"
        with pytest.raises(RuntimeError):
            Daemon(where, option, bad)
        with open(where.parent / "daemon.log") as f:
            log = f.read()
        assert option + ": " + why in log, log
        assert not where.exists()


def require_namespaces(daemon):
    """Skips (stopping `daemon`) where it cannot make namespaces: its warm
    pools run only where a warm sandbox sees its workspace at /workspace."""
    import pytest
    isolation = daemon.client().probe()["isolation"]
    if not isolation["namespaces"]:
        daemon.stop()
        pytest.skip("no warm pool without namespaces: " + str(isolation["namespaces_problem"]))


def pool_pids(state_dir, daemon_pid):
    """The processes of the warm pools' sandboxes that `daemon_pid` keeps and
    has not handed out (its active grants owned by `session-pool` or
    `run-pool`), read from their cgroups. Wait for full pools first: a
    refill adds to them."""
    rows = store_query(state_dir, "SELECT cgroups FROM grants WHERE owner IN (?, ?) "
                       "AND state = 'active' AND supervisor_pid = ?", (*POOL_OWNERS, daemon_pid))
    pids = set()
    for (cgroups,) in rows:
        for path in json.loads(cgroups).values():
            try:
                with open(os.path.join(path, "cgroup.procs")) as f:
                    pids |= {int(p) for p in f.read().split()}
            except OSError:
                pass
    return pids


def grant_row(state_dir, grant_id, columns="owner, state, spec, release"):
    """One grant's `columns` from the store, or None when there is no such grant."""
    rows = store_query(state_dir, f"SELECT {columns} FROM grants WHERE id = ?", (grant_id,))
    return rows[0] if rows else None


def store_query(state_dir, sql, params=()):
    """Rows of a read-only query on the store (the daemon may be running)."""
    import sqlite3
    path = os.path.join(str(state_dir), "cordon.db")
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    try:
        return db.execute(sql, params).fetchall()
    finally:
        db.close()


def logged(daemon, event):
    """The events named `event` in a Daemon's log, in order."""
    with open(daemon.log_path, "rb") as f:
        lines = [json.loads(line) for line in f
                 if line.startswith(b"{") and f'"{event}"'.encode() in line]
    return [e for e in lines if e.get("event") == event]


def stop_amid(daemon, threads, ready):
    """Starts `threads` (clients of `daemon`), sends the daemon SIGTERM once
    `ready()` holds, and joins them; then checks that it exited 0 saying
    that every teardown was verified (its `stopped` event's all_dead)."""
    try:
        for t in threads:
            t.start()
        assert wait_for(ready, within=60), "the stop's moment never came"
        daemon.proc.send_signal(signal.SIGTERM)
        for t in threads:
            t.join(timeout=120)
    finally:
        status = daemon.stop()
    assert status == 0, f"the daemon exited {status}; see {daemon.log_path}"
    stopped = logged(daemon, "stopped")
    assert stopped and stopped[-1].get("all_dead") is True, stopped


def active_grants(state_dir):
    """(id, owner) of the grants still active in a daemon's store."""
    return store_query(state_dir, "SELECT id, owner FROM grants WHERE state = 'active'")


def mounts_beneath(path):
    """Mount points at or beneath `path` (this mount namespace), deepest first."""
    path = os.path.realpath(str(path))
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            target = line.split(" ")[4].encode().decode("unicode_escape")
            if target == path or target.startswith(path + "/"):
                found.append(target)
    return sorted(set(found), key=len, reverse=True)


def state_on_small_filesystem(tmp_path, size="64M"):
    """A state directory that is a filesystem of its own (an ext4 image of
    `size`, loop-mounted; the daemon's log is beside it), to be filled;
    unmount it with unmount_beneath."""
    image, state = tmp_path / "state.img", tmp_path / "daemon" / "state"
    state.mkdir(parents=True)
    subprocess.run(["truncate", "-s", size, str(image)], check=True)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", str(image)], check=True)
    subprocess.run(["mount", "-o", "loop", str(image), str(state)], check=True)
    return state


@contextlib.contextmanager
def daemon_on_small_filesystem(tmp_path, *extra, size="64M", **kwargs):
    """A Daemon (`extra`: its options) whose state directory is a small
    filesystem of its own (state_on_small_filesystem); yields (state,
    daemon). On the way out the daemon must stop cleanly, and nothing may
    be left mounted beneath its state directory (its workspace images,
    then the filesystem)."""
    state = state_on_small_filesystem(tmp_path, size)
    d = None
    try:
        d = Daemon(state, *extra, **kwargs)
        yield state, d
    finally:
        if d is not None:
            stop_leaving_nothing_mounted(d, state, own=[state])
        assert unmount_beneath(state) == []


def empty_the_wal(state):
    """Checkpoints the store's write-ahead log into its database and
    truncates it: what the daemon writes next needs new blocks."""
    import sqlite3
    db = sqlite3.connect(os.path.join(str(state), "cordon.db"), timeout=30)
    try:
        assert db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0
    finally:
        db.close()


def fill_filesystem(path):
    """Appends to the file `path` until its filesystem is full (ENOSPC or
    EDQUOT); returns how many bytes it wrote."""
    block = b"\0" * (1 << 20)
    written = 0
    with open(path, "ab", buffering=0) as f:
        for size in (1 << 20, 4096, 512):
            while True:
                try:
                    written += f.write(block[:size])
                except OSError as e:
                    if e.errno not in (errno.ENOSPC, errno.EDQUOT):
                        raise
                    break
    return written


def unmount_beneath(path, within=20.0):
    """Unmounts what is mounted at or beneath `path` (what a daemon under test
    left, such as a session's workspace image); returns what is still there.
    A mount still busy is tried again for up to `within` seconds: a loop
    device detaches on its own after its last unmount (autoclear), and
    keeps the filesystem of its backing file busy until the kernel has
    done so."""
    for target in mounts_beneath(path):
        deadline = time.monotonic() + within
        while (subprocess.run(["umount", target], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL).returncode != 0
               and target in mounts_beneath(path) and time.monotonic() < deadline):
            time.sleep(0.05)
    return mounts_beneath(path)


def stop_leaving_nothing_mounted(daemon, path, own=()):
    """Stops `daemon`: it must exit 0 and leave nothing mounted at or beneath
    `path` (`own`: mounts the test made itself, such as a small state
    filesystem). Everything there is unmounted either way, so that a failure
    does not leave a workspace image mounted on the host."""
    status = daemon.stop()
    own = {os.path.realpath(str(p)) for p in own}
    left = [m for m in mounts_beneath(path) if m not in own]
    still = unmount_beneath(path)
    assert status == 0, f"the daemon exited {status} at stop"
    assert left == [], f"the daemon left these mounted at its stop: {left}"
    assert still == [], f"these could not be unmounted: {still}"


def remove_bench_leftovers(work, cgroup_root):
    """What a bench's stopped daemons left: unmounts what is mounted beneath
    `work`, removes `cgroup_root` in every hierarchy, then `work`; prints
    what could not be removed."""
    mounted = unmount_beneath(work)
    left = remove_cgroup_root(cgroup_root)
    shutil.rmtree(work, ignore_errors=True)
    if left or mounted:
        print(f"(left behind: cgroups {left}, mounts {mounted})")
