"""`cordon run`'s own stdin and stdout as pipes: a reader that stops
reading holds up neither the deadline nor the teardown, a reader that goes
away is felt by the command, and stdin is the command's as it comes."""
import array
import fcntl
import os
import subprocess
import termios

import pytest

from daemon_support import alive, wait_for  # noqa: E402  (tests/integration/daemon_support.py)

CORDON = os.environ.get("CORDON_BINARY", "build/cordon")


@pytest.fixture()
def state(tmp_path):
    return str(tmp_path / "state")


def run_args(state, *args):
    return [CORDON, "run", "--state-dir", state, *args]


def queued(fd):
    """Bytes waiting in the pipe whose read end is `fd`."""
    n = array.array("i", [0])
    fcntl.ioctl(fd, termios.FIONREAD, n)
    return n[0]


def stop(cordon):
    """Closes the stdin of a cordon the test started; one still running
    after that (the check before failed) is killed, by its pid."""
    cordon.stdin.close()
    try:
        cordon.wait(timeout=30)
    except subprocess.TimeoutExpired:
        cordon.kill()
        cordon.wait()


def stalled(state, tmp_path, *args, shell):
    """Starts cordon with a stdout pipe nobody reads, host pids (--isolation
    none) and `shell`, which writes the pid to watch to $PIDFILE; returns
    (cordon, the pipe's read end, that pid) once the pipe is full."""
    pidfile = tmp_path / "pid"
    read_end, write_end = os.pipe()
    cordon = subprocess.Popen(
        run_args(state, "--isolation", "none", *args, "--env", f"PIDFILE={pidfile}",
                 "--shell", shell),
        stdout=write_end, stderr=subprocess.PIPE)
    os.close(write_end)
    assert wait_for(lambda: pidfile.exists() and pidfile.read_text().strip())
    assert wait_for(lambda: queued(read_end) >= 65536)  # the pipe is full
    return cordon, read_end, int(pidfile.read_text())


def drained(cordon, read_end):
    """Reads the pipe to its end, then waits for cordon: (bytes, stderr)."""
    with os.fdopen(read_end, "rb") as reader:
        passed = len(reader.read())
    _, err = cordon.communicate(timeout=60)
    return passed, err


def test_a_reader_that_stops_reading_does_not_hold_up_the_deadline(state, tmp_path):
    # 20 MiB, twice what --output-limit keeps, well before the deadline.
    cordon, read_end, sleeper = stalled(
        state, tmp_path, "--timeout", "3",
        shell="sleep 600 & echo $! > $PIDFILE; head -c 20M /dev/zero; sleep 600")
    try:
        # Nobody reads cordon's stdout, yet the deadline tears the tree
        # down: before, cordon sat in write() and the tree lived on.
        assert wait_for(lambda: not alive(sleeper)), "the tree outlived its deadline"
        # cordon itself still waits to write what it kept.
        assert cordon.poll() is None
    finally:
        passed, err = drained(cordon, read_end)
    assert cordon.returncode == 124, err
    assert b"timed out after 3000 ms" in err
    assert passed == 10 * 1024 * 1024  # what --output-limit kept, all of it


def test_a_stalled_reader_does_not_hold_up_a_sigterm(state, tmp_path):
    cordon, read_end, command = stalled(state, tmp_path, shell="echo $$ > $PIDFILE; exec yes")
    try:
        cordon.send_signal(15)
        assert wait_for(lambda: not alive(command)), "SIGTERM did not tear the tree down"
    finally:
        _, err = drained(cordon, read_end)
    assert cordon.returncode == 128 + 15, err
    assert b"cancelled by SIGTERM" in err


def test_a_reader_that_goes_away_is_felt_by_the_command(state):
    # As `yes | head -1` without cordon between: yes dies of SIGPIPE.
    cordon = subprocess.Popen(run_args(state, "--timeout", "60", "--", "/usr/bin/yes"),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert cordon.stdout.readline() == b"y\n"
    cordon.stdout.close()
    try:
        _, err = cordon.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        cordon.kill()  # by its pid; the check below fails
        _, err = cordon.communicate()
    assert cordon.returncode == 128 + 13, err  # not 124, the deadline's


def test_stdin_is_the_commands_as_it_comes(state):
    # The writer keeps its end open: the command reads a line and is done.
    # Before, cordon read its stdin to the end before starting anything.
    cordon = subprocess.Popen(run_args(state, "--stdin", "-", "--", "/usr/bin/head", "-n", "1"),
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)
    cordon.stdin.write(b"first\n")
    cordon.stdin.flush()
    try:
        assert cordon.wait(timeout=30) == 0, cordon.stderr.read()
    finally:
        stop(cordon)
    assert cordon.stdout.read() == b"first\n"


def test_a_bad_option_is_refused_before_stdin_is_read(state):
    cordon = subprocess.Popen(run_args(state, "--stdin", "-", "--memory", "bogus", "--",
                                       "/bin/cat"),
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        # stdin stays open and empty: reading it first would wait forever.
        assert cordon.wait(timeout=30) == 125
    finally:
        stop(cordon)
    err = cordon.stderr.read()
    assert "--memory" in err, err


def test_a_large_stdin_reaches_the_command_whole(state, tmp_path):
    data = tmp_path / "in"
    with open(data, "wb") as f:
        f.truncate(64 * 1024 * 1024)  # sparse: 64 MiB of NULs
    r = subprocess.run(run_args(state, "--stdin", str(data), "--", "/usr/bin/wc", "-c"),
                       capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(64 * 1024 * 1024).encode()
