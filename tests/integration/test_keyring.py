"""A sandboxed command joins a session keyring of its own (the setup step
`keyring`; the escape suite's keyring canary checks what it hides). A uid
whose key quota is full still gets its sandbox, which keeps that uid's
session keyring then (src/contain/privileges.cc)."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

CORDON = os.path.abspath(os.environ.get("CORDON_BINARY", "build/cordon"))
NOBODY = 65534

# Run as nobody by setpriv: fills its session keyring with keys until the
# kernel says the uid's quota is full, then runs cordon in that session.
FILL_AND_RUN = r"""
import ctypes, json, os, subprocess, sys
libc = ctypes.CDLL(None, use_errno=True)
SYS_keyctl, SYS_add_key = 250, 248  # x86_64
KEYCTL_JOIN_SESSION_KEYRING, KEY_SPEC_SESSION_KEYRING = 1, -3
if libc.syscall(SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, None) < 0:
    sys.exit("join: " + os.strerror(ctypes.get_errno()))
added = 0
while libc.syscall(SYS_add_key, b"user", b"filler%d" % added, b"x", 1,
                   KEY_SPEC_SESSION_KEYRING) >= 0:
    added += 1
full = ctypes.get_errno()
r = subprocess.run([sys.argv[1], "run", "--json", "-q", "--state-dir", sys.argv[2], "--",
                    "/bin/true"], capture_output=True, text=True, timeout=60)
print(json.dumps({"added": added, "full": os.strerror(full), "run": json.loads(r.stdout)}))
"""


def test_a_full_key_quota_does_not_stop_a_sandbox():
    if os.geteuid() != 0:
        pytest.skip("switches to nobody: run as root")
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv is not installed")
    if os.uname().machine != "x86_64":
        pytest.skip("the keyctl and add_key numbers here are x86_64's")
    with tempfile.TemporaryDirectory(prefix="cordon-keyring-") as work:  # nobody's to use
        os.chmod(work, 0o777)
        p = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                            sys.executable, "-c", FILL_AND_RUN, CORDON, os.path.join(work, "state")],
                           capture_output=True, text=True, timeout=120, cwd=work)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    if out["full"] != os.strerror(122):  # EDQUOT
        pytest.skip(f"keys could be added until: {out['full']}")
    run = out["run"]
    assert out["added"] > 0
    assert "error" not in run and run["setup_error"] is None, run
    assert run["outcome"] == "exited" and run["exit_code"] == 0, run
