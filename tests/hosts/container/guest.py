#!/usr/bin/python3
"""The container cell's checks, run inside the container (run.sh).

Starts `cordon serve` as a pod would, reads its probe (GET /v1/probe), and
for each capability with an observable effect compares the claim with what
a run shows: a claimed bound must hold, and a bound the probe says it
cannot enforce must be refused when a request sets it (not silently
ignored). Then: a shell session, a python session, and SIGKILL of the daemon
with a session live, a restart, and the old sandbox reaped and recorded.

Prints a claim-vs-observed table, one `CELL {json}` line per check (for
machines), and `verdict: PASS` or `verdict: FAIL (n checks)`. Exit status 1
on any failed check. Standard library only: the image has no python3-requests.
"""

import http.client
import json
import os
import shlex
import signal
import subprocess
import sys
import time

CORDON = "/usr/local/bin/cordon"
STATE = "/var/lib/cordon"
PORT = 7419
MODE = sys.argv[1] if len(sys.argv) > 1 else "default"
# The Deployment's token: a read-only secret file (run.sh mounts one in the
# privileged container); else the one cordon serve makes in its state dir.
TOKEN_FILE = os.environ.get("CORDON_CELL_TOKEN_FILE") or STATE + "/token"
results = []


def record(check, claim, observed, ok, detail=""):
    results.append((check, claim, observed, ok, detail))
    print("CELL " + json.dumps({"mode": MODE, "check": check, "claim": claim,
                                "observed": observed, "ok": ok, "detail": detail}), flush=True)


class Daemon:
    def __init__(self):
        self.proc = None
        self.token = None
        self.log_path = STATE + "/cell-serve.log"  # the host keeps it (run.sh)
        self.log = open(self.log_path, "ab")

    def start(self, timeout=60):
        try:
            os.unlink(STATE + "/serve.json")
        except FileNotFoundError:
            pass
        self.proc = subprocess.Popen(
            # --min-isolation none: runs without isolation are checked too.
            [CORDON, "serve", "--state-dir", STATE, "--listen", "127.0.0.1:%d" % PORT,
             "--min-isolation", "none"]
            + (["--token-file", TOKEN_FILE] if "CORDON_CELL_TOKEN_FILE" in os.environ else []),
            stdout=self.log, stderr=self.log)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return "exited with status %d" % self.proc.returncode
            if os.path.exists(STATE + "/serve.json"):
                try:
                    self.token = open(TOKEN_FILE).read().strip()
                    status, body = self.call("GET", "/v1/health")
                    if status == 200:
                        return None
                except (OSError, ValueError):
                    pass
            time.sleep(0.05)
        return "no answer within %d s" % timeout

    def call(self, method, path, body=None, timeout=120):
        c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=timeout)
        headers = {"Authorization": "Bearer " + (self.token or "")}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        c.request(method, path, body=data, headers=headers)
        r = c.getresponse()
        text = r.read().decode("utf-8", "replace")
        c.close()
        try:
            return r.status, json.loads(text) if text else {}
        except ValueError:
            return r.status, {"raw": text}

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def run(d, shell, **extra):
    body = {"shell": shell}
    body.update(extra)
    return d.call("POST", "/v1/runs", body)


def describe(status, r):
    if status != 200:
        err = r.get("error", {})
        return "HTTP %d %s: %s" % (status, err.get("code"), err.get("message", r))[:300]
    out = "outcome %s exit %s" % (r.get("outcome"), r.get("exit_code"))
    if r.get("setup_error"):
        out += " setup_error %s" % json.dumps(r["setup_error"])
    return out[:300]


def processes_matching(needle):
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = open("/proc/%s/cmdline" % pid, "rb").read().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if needle in cmd:
            found.append(int(pid))
    return found


def claim_of(probe, cap):
    for c in probe.get("capabilities", []):
        if c["capability"] == cap:
            if c["enforceable"]:
                return "enforced (%s)" % c["mechanism"], True, ""
            return "not enforced", False, (c.get("reason") or "") + (
                "; fix: " + c["fix"] if c.get("fix") else "")
    return "absent", False, ""


def main():
    os.makedirs(STATE, exist_ok=True)
    d = Daemon()
    t0 = time.monotonic()
    problem = d.start()
    record("daemon starts", "cordon serve answers /v1/health",
           problem or "healthy after %.1f s" % (time.monotonic() - t0), problem is None)
    if problem:
        return finish(d)
    status, probe = d.call("GET", "/v1/probe")
    if status != 200:
        record("probe", "GET /v1/probe", describe(status, probe), False)
        return finish(d)
    caps = {c["capability"]: c for c in probe["capabilities"]}

    # Isolation: one standard run shows each claimed boundary.
    iso_caps = ["filesystem", "network", "process_view", "privileges", "syscall_filter"]
    claimed = [c for c in iso_caps if caps.get(c, {}).get("enforceable")]
    script = ("echo pidns=$(readlink /proc/self/ns/pid | tr -dc 0-9);"
              "echo procs=$(ls -d /proc/[0-9]* | wc -l);"
              "grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status | tr -d '\\t' | tr '\\n' ' ';"
              "echo; if echo x > /etc/cordon-cell-write 2>/dev/null; then echo etc=writable;"
              " else echo etc=refused; fi;"
              "if cat %s >/dev/null 2>&1; then echo token=readable; else echo token=hidden; fi;"
              # (Without a network namespace seccomp refuses IP sockets:
              # socket() itself failing is "unreachable" too.)
              "/usr/bin/python3 -c 'import socket\ntry:\n"
              "    s = socket.socket(); s.settimeout(2); r = s.connect_ex((\"127.0.0.1\", %d))\n"
              "except OSError:\n    r = -1\n"
              "print(\"daemon_port=\" + (\"reachable\" if r == 0 else \"unreachable\"))'"
              % (TOKEN_FILE, PORT))
    status, r = run(d, script)
    std_ok = status == 200 and r.get("outcome") == "exited" and r.get("exit_code") == 0
    record("standard run", "isolation claimed: " + (", ".join(claimed) or "none"),
           "ran" if std_ok else describe(status, r), std_ok or not claimed,
           "" if std_ok else "the probe claims isolation that a standard run cannot get")
    out = r.get("stdout", "") if std_ok else ""
    fields = dict(w.split("=", 1) for w in out.split() if "=" in w)
    fields.update(dict(w.split(":", 1) for w in out.split() if ":" in w))
    own_pidns = "".join(ch for ch in os.readlink("/proc/self/ns/pid") if ch.isdigit())
    observe = {} if not std_ok else {
        "filesystem": ("/etc %s, daemon token %s" % (fields.get("etc"), fields.get("token")),
                       fields.get("etc") == "refused" and fields.get("token") == "hidden"
                       and not os.path.exists("/etc/cordon-cell-write")),
        "network": ("daemon's 127.0.0.1:%d %s" % (PORT, fields.get("daemon_port")),
                    fields.get("daemon_port") == "unreachable"),
        "process_view": ("pid namespace %s (the daemon's: %s), %s processes visible"
                         % (fields.get("pidns"), own_pidns, fields.get("procs")),
                         fields.get("pidns") not in (None, "", own_pidns)),
        "privileges": ("CapEff %s NoNewPrivs %s" % (fields.get("CapEff"), fields.get("NoNewPrivs")),
                       fields.get("CapEff") == "0000000000000000" and fields.get("NoNewPrivs") == "1"),
        "syscall_filter": ("Seccomp mode %s" % fields.get("Seccomp"), fields.get("Seccomp") == "2"),
    }
    for cap in iso_caps:
        claim, enforced, reason = claim_of(probe, cap)
        if not enforced:
            record(cap, claim, "not checked (disclaimed)", True, reason)
        elif not std_ok:
            record(cap, claim, "no standard run to observe it in", False, reason)
        else:
            observed, ok = observe[cap]
            record(cap, claim, observed, ok, reason)

    # Where the namespaces are disclaimed, the reason is the cause this
    # container shows: its seccomp filter, else its masked /proc (paths
    # mounted over, which make the kernel refuse a sandbox a fresh procfs),
    # with the fix that unmasks it.
    iso_probe = probe.get("isolation", {})
    masked = [line.split()[4] for line in open("/proc/self/mountinfo")
              if line.split()[4].startswith("/proc/")]
    filtered = "\nSeccomp:\t2" in open("/proc/self/status").read()
    why = (iso_probe.get("namespaces_problem") or "") + "; fix: " + (
        iso_probe.get("namespaces_fix") or "")
    if iso_probe.get("namespaces"):
        ok, seen = std_ok, "namespaces claimed; the standard run %s" % (
            "ran" if std_ok else "failed")
    elif filtered:
        ok, seen = "seccomp" in why, "under a seccomp filter; the reason names it: %s" % (
            "seccomp" in why)
    elif masked:
        ok = "/proc" in why and "unmask" in why
        seen = "%d paths masked in /proc (%s); the reason names /proc and the fix: %s" % (
            len(masked), ", ".join(masked[:3]), ok)
    else:
        ok, seen = bool(iso_probe.get("namespaces_problem")), "no filter, /proc unmasked"
    record("namespaces", "claimed" if iso_probe.get("namespaces") else "disclaimed", seen, ok,
           why if not iso_probe.get("namespaces") else "")

    # Runs work with what is left (limits and teardown only), whatever the
    # isolation claims are.
    status, r = run(d, "echo none-ok", isolation="none")
    record("run without isolation", "works anywhere",
           (r.get("stdout", "").strip() or describe(status, r)) if status == 200
           else describe(status, r), status == 200 and r.get("stdout") == "none-ok\n")

    # Bounds: claimed ones hold, disclaimed ones are refused when asked for.
    iso = {} if std_ok else {"isolation": "none"}

    # per_grant: the host's claim covers more than a run (disk: sessions'
    # workspaces too), and each grant's own is observed at admission, so a
    # run may be bounded where the host's claim is not made. Accepted, it
    # must hold; a bound accepted and not held fails.
    def bound(cap, shell, limits, expect, show, per_grant=False):
        claim, enforced, reason = claim_of(probe, cap)
        body = {"argv" if isinstance(shell, list) else "shell": shell, "limits": limits}
        body.update(iso)
        status, r = d.call("POST", "/v1/runs", body)
        if enforced:
            ok = status == 200 and expect(r)
            observed = show(r) if status == 200 else describe(status, r)
        elif per_grant and status == 200:
            ok = expect(r)
            observed = "not claimed for the host, held for this run: " + show(r)
        else:
            err = r.get("error", {}) if status != 200 else {}
            missing = [m.get("capability") for m in err.get("missing", [])]
            ok = status == 400 and err.get("code") == "refused" and cap in missing
            # A disclaimed bound that is accepted anyway: what it did.
            observed = ("refused when asked for" if ok else
                        "not refused: " + show(r) if status == 200 else describe(status, r))
        record(cap, claim, observed, ok, reason)

    # b"x" * n writes every page (a bytearray's zeroed pages would not
    # count); python is the main process, so the run's outcome tells.
    bound("memory", ["/usr/bin/python3", "-c", "b = b'x' * (256 << 20); print(len(b))"],
          {"memory_bytes": 64 << 20}, lambda r: r.get("outcome") == "oom_killed",
          lambda r: "256 MiB under a 64 MiB bound: %s" % r.get("outcome"))
    forks = ("import os, time\nn = 0\nfor i in range(64):\n    try:\n        pid = os.fork()\n"
             "    except OSError:\n        break\n    if pid == 0:\n        time.sleep(5)\n"
             "        os._exit(0)\n    n += 1\nprint('started=%d' % n)\n")
    bound("process_count", "/usr/bin/python3 -c %s" % shlex.quote(forks), {"pids": 16},
          lambda r: r.get("outcome") == "exited" and "started=" in r.get("stdout", "")
          and int(r["stdout"].split("started=")[1].split()[0]) < 64,
          lambda r: "64 forks under a bound of 16: %s" % r.get("stdout", "").strip())
    bound("wall_clock", "sleep 60", {"timeout_ms": 1000},
          lambda r: r.get("outcome") == "timed_out" and r.get("usage", {}).get("wall_ms", 1e9) < 15000,
          lambda r: "sleep 60 with a 1 s deadline: %s after %s ms"
          % (r.get("outcome"), r.get("usage", {}).get("wall_ms")))
    bound("disk", "dd if=/dev/zero of=big bs=1M count=64 2>&1 | head -1; ls -s big",
          {"disk_bytes": 16 << 20},
          lambda r: "No space" in r.get("stdout", "") or "quota" in r.get("stdout", "").lower(),
          lambda r: "64 MiB into a 16 MiB workspace: " + r.get("stdout", "").strip()[:80],
          per_grant=True)

    # Teardown: a setsid'ed leftover must not outlive its run.
    # (A unique sleep argument names it; the run waits until it is running.)
    marker = "sleep 301.25"
    claim, enforced, reason = claim_of(probe, "process_tree")
    body = {"shell": "setsid %s </dev/null >/dev/null 2>&1 & sleep 0.5; echo left" % marker}
    body.update(iso)
    status, r = d.call("POST", "/v1/runs", body)
    time.sleep(0.2)
    left = processes_matching(marker)
    release = r.get("release", {}) if status == 200 else {}
    # The grant says what this run got (without isolation the probe's
    # pid_namespace does not apply): enforced must hold; degraded must say so.
    grant = r.get("grant", {}) if status == 200 else {}
    if "process_tree" in grant.get("enforced", []):
        claim = "enforced (%s)" % grant.get("mechanisms", {}).get("process_tree")
        ok = release.get("dead") is True and not left
    else:
        why = [g.get("reason", "") for g in grant.get("degraded", [])
               if g.get("capability") == "process_tree"]
        claim, reason = "degraded in this run's grant", (why[0] if why else "")
        ok = status == 200 and bool(why)  # a survivor is then what was said
    record("process_tree", claim,
           "setsid'ed child: %s, release %s/%s" % ("left running %s" % left if left else "gone",
                                                   release.get("method"), release.get("dead")),
           ok, reason)
    for pid in left:
        os.kill(pid, signal.SIGKILL)

    sessions(d, iso)
    restart(d, iso)
    d.stop()
    return finish(d)


def sessions(d, iso):
    status, s = d.call("POST", "/v1/sessions", dict({"kind": "shell", "id": "cell-shell"}, **iso))
    if status in (200, 201):
        status, r = d.call("POST", "/v1/sessions/cell-shell/exec",
                           {"command": "cd /tmp; x=kept; echo hi"})
        status2, r2 = d.call("POST", "/v1/sessions/cell-shell/exec", {"command": "echo $x $PWD"})
        ok = r.get("stdout") == "hi\n" and r2.get("stdout") == "kept /tmp\n"
        record("shell session", "starts, keeps state", "%r then %r"
               % (r.get("stdout"), r2.get("stdout")), ok)
        d.call("DELETE", "/v1/sessions/cell-shell")
    else:
        record("shell session", "starts, keeps state", describe(status, s), False)
    t0 = time.monotonic()
    status, s = d.call("POST", "/v1/sessions", dict({"kind": "python", "id": "cell-py"}, **iso))
    if status in (200, 201):
        took = time.monotonic() - t0
        status, r = d.call("POST", "/v1/sessions/cell-py/exec", {"code": "x = 20\nx * 2 + 2"})
        results_ = r.get("results", [])
        value = results_[0]["data"].get("text/plain") if results_ else None
        record("python session", "ipykernel starts, runs code",
               "started in %.1f s; 20*2+2 -> %s" % (took, value), value == "42")
        d.call("DELETE", "/v1/sessions/cell-py")
    else:
        record("python session", "ipykernel starts, runs code", describe(status, s), False)


def restart(d, iso):
    """SIGKILL with a session live; the next daemon reaps and records it."""
    marker = "sleep 302.25"
    status, s = d.call("POST", "/v1/sessions", dict({"kind": "shell", "id": "cell-orphan"}, **iso))
    if status not in (200, 201):
        record("SIGKILL + restart", "the old sandbox reaped and recorded",
               "no session to orphan: " + describe(status, s), False)
        return
    d.call("POST", "/v1/sessions/cell-orphan/exec",
           {"command": "%s </dev/null >/dev/null 2>&1 & sleep 0.5; echo ok" % marker})
    before = processes_matching(marker)
    d.proc.kill()
    d.proc.wait()
    orphans = processes_matching(marker)
    problem = d.start()
    if problem:
        record("SIGKILL + restart", "the old sandbox reaped and recorded",
               "the new daemon " + problem, False)
        return
    left = processes_matching(marker)
    status, view = d.call("GET", "/v1/sessions/cell-orphan")
    d.log.flush()
    log = open(d.log_path, errors="replace").read()
    reaped = [json.loads(line) for line in log.splitlines()
              if '"recovered_grant"' in line and line.startswith("{")]
    actions = sorted({e.get("action") for e in reaped})
    ok = (bool(before) and not left and view.get("state") == "lost"
          and bool(reaped) and "survivors" not in actions)
    record("SIGKILL + restart", "the old sandbox reaped and recorded",
           "orphan sleeper %s while down, %s after restart; session %s; recovered grants: %d %s"
           % ("alive" if orphans else "gone", "left %s" % left if left else "gone",
              view.get("state"), len(reaped), actions), ok)
    for pid in left:
        os.kill(pid, signal.SIGKILL)


def finish(d):
    d.stop()
    width = max(len(r[0]) for r in results)
    cw = max(len(r[1]) for r in results)
    print("\n%s cell: claim vs observed" % MODE)
    print("  %-*s  %-*s  %-4s  %s" % (width, "check", cw, "claim", "ok", "observed"))
    for check, claim, observed, ok, detail in results:
        print("  %-*s  %-*s  %-4s  %s" % (width, check, cw, claim, "yes" if ok else "NO", observed))
        if detail and (not ok or claim.startswith("not")):
            print("  %-*s  %-*s        why: %s" % (width, "", cw, "", detail[:220]))
    failed = [r for r in results if not r[3]]
    print("verdict: %s" % ("PASS" if not failed else "FAIL (%d checks: %s)"
                           % (len(failed), ", ".join(r[0] for r in failed))))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
