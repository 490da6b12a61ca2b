#!/usr/bin/python3
"""The portable suites, run in a cell (`make test-hosts`, hosts.py full):
the CLI tests, the escape suite, the daemon with its shell sessions, the
python sessions, recovery, and the Python client against a real daemon.
They are the release build's own test binaries and files (--tests, tests/),
run unchanged: what a suite cannot do on this kernel it skips with the
reason, and that is reported as such.

Writes OUT/suites.json ({"suites": [{"suite", "passed", "counts", "seconds",
"log"}]}) and OUT/<suite>.log; exit 0 when every suite passed.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

ap = argparse.ArgumentParser()
ap.add_argument("--repo", default="/work/main")
ap.add_argument("--build", default=None, help="the binaries smoke uses (unused: the suites run from --tests)")
ap.add_argument("--tests", default=None, help="the build tree whose test binaries run (default REPO/build)")
ap.add_argument("--out", required=True)
ap.add_argument("--cell", default="host")
ap.add_argument("--timeout", type=int, default=int(os.environ.get("HOSTS_SUITE_TIMEOUT", "1500")))
args = ap.parse_args()

BUILD = args.tests or os.path.join(args.repo, "build")
GTEST = os.path.join(BUILD, "cordon_integration_tests")
# In a VM cell (TCG) everything runs 10-80 times slower than here: the
# tests' graces (not the deadlines they test) are scaled by 10 there
# (tests/support/support.h, TimeScale).
ENV = dict(os.environ, CORDON_BINARY=os.path.join(BUILD, "cordon"),
           CORDON_HELPERS_DIR=os.path.join(BUILD, "helpers"), GTEST_COLOR="no",
           CORDON_TEST_TIME_SCALE="1" if args.cell == "host" else "10")

SUITES = [
    ("cli", [GTEST, "--gtest_filter=CliTest.*:ClosureCliTest.*:UnprivilegedCliTest.*:SandboxGroupsTest.*"]),
    ("escape", [GTEST, "--gtest_filter=*EscapeTest.*:IdmappedWorkspaceTest.*"]),
    ("daemon-shell", [GTEST, "--gtest_filter=DaemonTest.*:DaemonEnvTest.*:DaemonLimitsTest.*:DaemonListenTest.*:"
                             "DaemonLifecycleTest.*:DaemonQuarantineTest.*"]),
    ("python-sessions", [GTEST, "--gtest_filter=PythonTest.*:PythonEnvTest.*:PythonIsolationTest.*:PoolTest.*"]),
    ("recovery", [GTEST, "--gtest_filter=DaemonRecoveryTest.*:PythonRecoveryTest.*"]),
    ("python-client", ["/usr/bin/python3", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs",
                       os.path.join(args.repo, "tests/integration/test_daemon_client.py"),
                       os.path.join(args.repo, "tests/integration/test_cli_input.py")]),
]
only = os.environ.get("HOSTS_SUITES", "").split()

results = []
os.chdir(BUILD)
for name, argv in SUITES:
    if only and name not in only:
        continue
    logpath = os.path.join(args.out, f"{name}.log")
    t = time.monotonic()
    with open(logpath, "w") as logf:
        try:
            p = subprocess.run(argv, stdout=logf, stderr=subprocess.STDOUT, env=ENV, timeout=args.timeout,
                               stdin=subprocess.DEVNULL)
            rc = p.returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    text = open(logpath, errors="replace").read()
    counts = {}
    for key, pat in (("passed", r"\[  PASSED  \] (\d+) test"), ("failed", r"\[  FAILED  \] (\d+) test"),
                     ("skipped", r"\[  SKIPPED \] (\d+) test")):
        m = re.search(pat, text)
        if m:
            counts[key] = int(m.group(1))
    if argv[0].endswith("python3"):  # pytest's summary line: "3 passed, 1 skipped in 2.1s"
        m = re.findall(r"^=*\s*((?:\d+ \w+,? ?)+) in [\d.]+s", text, re.M)
        if m:
            for n, key in re.findall(r"(\d+) (passed|failed|skipped|errors?)", m[-1]):
                counts[key] = int(n)
    failed_tests = re.findall(r"\[  FAILED  \] (\S+\.\S+)", text) + re.findall(r"^FAILED (\S+)", text, re.M)
    results.append({"suite": name, "passed": rc == 0, "rc": rc, "counts": counts,
                    "failed_tests": sorted(set(failed_tests)), "seconds": round(time.monotonic() - t, 1),
                    "log": logpath})
    print(f"{name:<16} {'PASSED' if rc == 0 else 'FAILED'} rc={rc} {counts} {time.monotonic() - t:.0f}s "
          f"{' '.join(sorted(set(failed_tests)))}", flush=True)

with open(os.path.join(args.out, "suites.json"), "w") as f:
    json.dump({"cell": args.cell, "kernel": os.uname().release, "suites": results}, f, indent=1)
sys.exit(0 if results and all(r["passed"] for r in results) else 1)
