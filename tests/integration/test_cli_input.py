"""Bad input for each `cordon run` option: exit 125, a message naming the
option, and nothing recorded or run."""
import json
import os
import subprocess

import pytest

CORDON = os.environ.get("CORDON_BINARY", "build/cordon")


def cordon(*args, stdin=None):
    return subprocess.run([CORDON, *args], capture_output=True, text=True,
                          input=stdin, timeout=60)


@pytest.fixture()
def state(tmp_path):
    return str(tmp_path / "state")


def run(state, *args):
    return cordon("run", "--state-dir", state, *args)


BAD = [
    (["--timeout", "abc"], "--timeout"),
    (["--timeout", "-1"], "--timeout"),
    (["--timeout", "0"], "--timeout"),
    (["--timeout", "1.5x"], "--timeout"),
    (["--grace", "soon"], "--grace"),
    (["--grace", "-2"], "--grace"),
    (["--output-limit", "0"], "--output-limit"),
    (["--output-limit", "12Q"], "--output-limit"),
    (["--output-limit", "2G"], "--output-limit"),
    (["--memory", "0"], "--memory"),
    (["--memory", "lots"], "--memory"),
    (["--memory", "-64M"], "--memory"),
    (["--pids", "0"], "--pids"),
    (["--pids", "ten"], "--pids"),
    (["--pids", "-1"], "--pids"),
    (["--cpu-seconds", "0"], "--cpu-seconds"),
    (["--cpu-seconds", "1.5"], "--cpu-seconds"),
    (["--file-size", "0"], "--file-size"),
    (["--file-size", "big"], "--file-size"),
    (["--open-files", "0"], "--open-files"),
    (["--open-files", "99999999"], "--open-files"),
    (["--address-space", "0"], "--address-space"),
    (["--address-space", "1.5G"], "--address-space"),
    (["--env", "NOEQUALS"], "--env"),
    (["--env", "=value"], "--env"),
    (["--env", "A=1", "--env", "A=2"], "--env"),
    (["--workspace", "/nonexistent/dir"], "--workspace"),
    (["--workspace", "/etc/passwd"], "--workspace"),
    (["--workspace", ""], "--workspace"),
    (["--stdin", "/nonexistent/file"], "--stdin"),
    (["--require", "teleportation"], "--require"),
    (["--owner", ""], "--owner"),
    (["--owner", "a\nb"], "--owner"),
    (["--cgroup-root", "relative"], "--cgroup-root"),
    (["--cgroup-root", "/a/../b"], "--cgroup-root"),
    (["--isolation", "max"], "--isolation"),
    (["--network", "wifi"], "--network"),
    (["--ro-bind", "relative/path"], "--ro-bind"),
    (["--bind", "/nonexistent/dir"], "--bind"),
    (["--bind", "/tmp:/proc/x"], "--bind"),
    (["--ro-bind", ":/x"], "--ro-bind"),
    (["--tmp-size", "0"], "--tmp-size"),
    (["--isolation", "none", "--ro-bind", "/etc"], "--bind/--ro-bind"),
    (["--policy", "/nonexistent/policy.toml"], "--policy"),
    (["--workspace", "/"], "--workspace"),
    (["--cpus", "0.0001"], "--cpus"),  # the smallest quota is 0.01
    (["--pin", "0" * 64], "--pin"),  # without --closure: nothing to verify
    (["--isolation", "none", "--network", "none"], "--network"),
    (["--isolation", "none", "--tmp-size", "1M"], "--tmp-size"),
    (["--no-such-option"], "--no-such-option"),
    (["--timeout"], "--timeout"),
    (["--timeout", "1M"], "--timeout"),  # was a minute: M is a size
    (["--pids", "1"], "--pids"),  # the sandbox's init is one: init EAGAIN, unexplained
]


@pytest.mark.parametrize("args,option", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_option_is_refused_naming_it(state, tmp_path, args, option):
    marker = tmp_path / "ran"
    r = run(state, *args, "--", "/usr/bin/touch", str(marker))
    assert r.returncode == 125, r.stderr
    assert option in r.stderr, r.stderr
    assert not marker.exists(), "the command ran despite the bad input"
    # Nothing was recorded either.
    if os.path.exists(state):
        grants = cordon("grants", "--all", "--json", "--state-dir", state)
        assert json.loads(grants.stdout) == []


def test_a_workspace_that_links_to_the_root_is_refused(state, tmp_path):
    link = tmp_path / "root-link"
    link.symlink_to("/")
    marker = tmp_path / "ran"
    r = run(state, "--workspace", str(link), "--", "/usr/bin/touch", str(marker))
    assert r.returncode == 125, r.stderr
    assert "--workspace: / would show the whole host" in r.stderr, r.stderr
    assert not marker.exists()


REQUIRED_BUT_NOT_SET_UP = [
    (["--require", "network", "--network", "host"], "network: network host shares"),
    (["--require", "network", "--isolation", "none"], "network: isolation none does not"),
    (["--require", "memory"], "memory: no limit asks for it: set limits.memory_bytes (--memory)"),
    (["--require", "wall_clock"], "wall_clock: no limit asks for it"),
]


@pytest.mark.parametrize("args,why", REQUIRED_BUT_NOT_SET_UP,
                         ids=[" ".join(a) for a, _ in REQUIRED_BUT_NOT_SET_UP])
def test_a_required_capability_that_nothing_sets_up_is_refused(state, tmp_path, args, why):
    # Before, it was reported enforced: --require network with --network
    # host ran on the host's network with `network` in grant.enforced.
    marker = tmp_path / "ran"
    r = run(state, *args, "--", "/usr/bin/touch", str(marker))
    assert r.returncode == 125, r.stderr
    assert "refused: cannot enforce " + why in r.stderr, r.stderr
    assert not marker.exists()


def test_options_after_the_program_are_the_programs(state):
    r = run(state, "/bin/echo", "--json", "--timeout", "1")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "--json --timeout 1\n"


def test_grants_shows_a_command_s_control_characters_escaped(state):
    # A command an agent wrote, listed on an operator's terminal: a newline
    # would forge a row, an escape sequence would be obeyed.
    shell = ": '\n9999 released root 1 exited \x1b]0;pwned\x07\x1b[2J \\'"
    assert run(state, "--shell", shell).returncode == 0
    listed = cordon("grants", "--all", "--state-dir", state)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert len(lines) == 2, lines  # the header and the one grant
    assert "\x1b" not in listed.stdout and "\x07" not in listed.stdout
    assert lines[1].endswith(r": '\n9999 released root 1 exited \x1b]0;pwned\x07\x1b[2J \\'"), \
        lines[1]


def test_bad_input_with_json_is_a_json_error(state):
    r = run(state, "--json", "--memory", "0", "--", "/bin/true")
    assert r.returncode == 125
    error = json.loads(r.stdout)["error"]
    assert error["code"] == "invalid"
    assert "--memory" in error["message"]


def test_a_policy_error_names_the_key(state, tmp_path):
    policy = tmp_path / "policy.toml"
    policy.write_text('isolation = "standard"\nmemroy_bytes = 1\n')
    r = run(state, "--policy", str(policy), "--", "/bin/true")
    assert r.returncode == 125
    assert "memroy_bytes: unknown key" in r.stderr, r.stderr


def test_options_override_the_policy(state, tmp_path):
    policy = tmp_path / "policy.toml"
    policy.write_text('isolation = "strict"\ntimeout_ms = 60000\n')
    r = run(state, "--policy", str(policy), "--isolation", "none", "--json", "--",
            "/bin/sh", "-c", "pwd")
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    assert result["stdout"] != "/workspace\n"  # isolation none won over the file
    assert "filesystem" not in result["grant"]["enforced"]
    assert "wall_clock" in result["grant"]["enforced"]  # the file's timeout stayed


def test_no_command(state):
    r = run(state)
    assert r.returncode == 125
    assert "no command" in r.stderr


def test_both_shell_and_argv(state):
    r = run(state, "--shell", "true", "--", "/bin/true")
    assert r.returncode == 125
    assert "--shell" in r.stderr


def test_every_subcommand_has_help():
    for sub in ["run", "probe", "grants", "reap", "closure", "attest", "signal", "serve", "mcp"]:
        r = cordon(sub, "--help")
        assert r.returncode == 0, sub
        assert "--help" in r.stdout, sub
        # run's exit statuses are run's own (every command's help ended with them).
        assert ("124 on timeout" in r.stdout) == (sub == "run"), (sub, r.stdout[-400:])
    r = cordon("--help")
    assert r.returncode == 0 and "run" in r.stdout


def test_grants_and_reap_make_no_state_directory_and_name_what_is_not_there(tmp_path):
    missing = tmp_path / "never"
    r = cordon("grants", "--state-dir", str(missing), "--json")
    assert r.returncode == 0 and json.loads(r.stdout) == [], r
    r = cordon("reap", "--state-dir", str(missing))
    assert r.returncode == 0 and r.stdout == "nothing to reap\n", r
    # A grant that is not there is an error, not "nothing to reap".
    r = cordon("reap", "--state-dir", str(missing), "--grant", "no-such-grant")
    assert r.returncode == 125 and "--grant: no grant no-such-grant" in r.stderr, r
    assert not missing.exists(), "a command that only reads made the state directory"
    state = str(tmp_path / "state")
    assert run(state, "--isolation", "none", "--", "/bin/true").returncode == 0
    r = cordon("reap", "--state-dir", state, "--grant", "no-such-grant")
    assert r.returncode == 125 and "--grant: no grant no-such-grant" in r.stderr, r
    # A state directory that is a file is named as such (it was EIO).
    afile = tmp_path / "afile"
    afile.write_text("")
    for args in (["grants"], ["reap"], ["run", "--state-dir", str(afile), "--", "/bin/true"]):
        r = cordon(*args[:1], *(args[1:] or ["--state-dir", str(afile)]))
        assert r.returncode == 125, (args, r)
        assert f"state directory {afile} is not a directory" in r.stderr, (args, r.stderr)


def test_unknown_subcommand():
    r = cordon("teleport")
    assert r.returncode == 125
    assert "teleport" in r.stderr


def test_sizes_and_durations_take_units(state, tmp_path):
    # (--permissive: an unprivileged caller may have no memory cgroup; the
    # units are what is checked.)
    r = run(state, "--json", "--timeout", "1.5", "--grace", "250ms", "--memory", "256M",
            "--permissive", "--output-limit", "1K", "--shell", "head -c 2000 /dev/zero")
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    assert result["stdout_bytes"] == 2000
    assert len(result["stdout"]) == 1024
    assert result["stdout_truncated"] is True
