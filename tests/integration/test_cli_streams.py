"""`cordon run`'s own stdin and stdout as pipes: a reader that stops
reading holds up neither the deadline nor the teardown, a reader that goes
away is felt by the command, and stdin is the command's as it comes."""
import array
import fcntl
import os
import subprocess
import termios
import time

import pytest

CORDON = os.environ.get("CORDON_BINARY", "build/cordon")


@pytest.fixture()
def state(tmp_path):
    return str(tmp_path / "state")


def run_args(state, *args):
    return [CORDON, "run", "--state-dir", state, *args]


def eventually(done, within=20.0):
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if done():
            return True
        time.sleep(0.02)
    return done()


def queued(fd):
    """Bytes waiting in the pipe whose read end is `fd`."""
    n = array.array("i", [0])
    fcntl.ioctl(fd, termios.FIONREAD, n)
    return n[0]


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def stop(cordon):
    """Closes the stdin of a cordon the test started; one still running
    after that (the check before failed) is killed, by its pid."""
    cordon.stdin.close()
    try:
        cordon.wait(timeout=30)
    except subprocess.TimeoutExpired:
        cordon.kill()
        cordon.wait()


def test_a_reader_that_stops_reading_does_not_hold_up_the_deadline(state, tmp_path):
    pidfile = tmp_path / "pid"
    read_end, write_end = os.pipe()
    # Host pids (--isolation none), so the test can watch the grandchild.
    cordon = subprocess.Popen(
        run_args(state, "--isolation", "none", "--timeout", "1", "--shell",
                 f"sleep 600 & echo $! > {pidfile}; while :; do head -c 65536 /dev/zero; done"),
        stdout=write_end, stderr=subprocess.PIPE)
    os.close(write_end)
    try:
        assert eventually(lambda: pidfile.exists() and pidfile.read_text().strip())
        sleeper = int(pidfile.read_text())
        assert eventually(lambda: queued(read_end) >= 65536)  # the pipe is full
        # Nobody reads cordon's stdout, yet the deadline tears the tree
        # down: before, cordon sat in write() and the tree lived on.
        assert eventually(lambda: not alive(sleeper)), "the tree outlived its deadline"
        # cordon itself still waits to write what it kept.
        assert cordon.poll() is None
    finally:
        with os.fdopen(read_end, "rb") as reader:
            passed = len(reader.read())
        _, err = cordon.communicate(timeout=60)
    assert cordon.returncode == 124, err
    assert b"timed out after 1000 ms" in err
    assert passed == 10 * 1024 * 1024  # what --output-limit kept, all of it


def test_a_stalled_reader_does_not_hold_up_a_sigterm(state, tmp_path):
    pidfile = tmp_path / "pid"
    read_end, write_end = os.pipe()
    cordon = subprocess.Popen(
        run_args(state, "--isolation", "none", "--shell",
                 f"echo $$ > {pidfile}; exec yes"),
        stdout=write_end, stderr=subprocess.PIPE)
    os.close(write_end)
    try:
        assert eventually(lambda: pidfile.exists() and pidfile.read_text().strip())
        command = int(pidfile.read_text())
        assert eventually(lambda: queued(read_end) >= 65536)  # the pipe is full
        cordon.send_signal(15)
        assert eventually(lambda: not alive(command)), "SIGTERM did not tear the tree down"
    finally:
        with os.fdopen(read_end, "rb") as reader:
            reader.read()
        _, err = cordon.communicate(timeout=60)
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
