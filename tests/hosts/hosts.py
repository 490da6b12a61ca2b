#!/usr/bin/python3
"""The host matrix (docs/hosts.md): boots each cell's Debian kernel under
qemu (TCG: a KVM guest hangs on these machines) with this machine's root
read-only over 9p, shapes the guest as the cell says (tests/hosts/guest.sh),
runs the smoke (tests/hosts/smoke.py) or the portable suites
(tests/hosts/suites.py) there with the host's build/ unchanged, and
collects the results on the host: each guest writes into its own directory
build/hosts/results/CELL (a writable 9p share) and prints markers on its
serial console (build/hosts/results/CELL/console.log).

  hosts.py smoke [CELL...]   what `make test` runs (make hosts-smoke)
  hosts.py full [CELL...]    the portable suites (make test-hosts)
  hosts.py list
  hosts.py markdown          the last smoke's matrix as a Markdown table
  hosts.py markdown full     the portable suites' results per cell, as a table

A cell whose kernel cannot be had (fetch-kernel.sh) is SKIPPED with the
reason, never passed; so is a container cell whose podman, crun or root
filesystem cannot be had (tests/hosts/container/prepare.sh, started in the
background here and, by make test, before ctest; the cells wait for it).
A cell that does not finish within its timeout is TIMEOUT (its VM
killed), and fails. Exit 0 when no cell failed.
Environment: HOSTS_JOBS (VMs at once, default 2), HOSTS_SMP (vCPUs per VM,
default 1), HOSTS_TIMEOUT (seconds per cell; default 240 smoke, 7200 full),
HOSTS_CELLS (a space-separated list instead of the arguments), HOSTS_SUITES
(full: only these of suites.py's suites), HOSTS_SUITE_TIMEOUT (full:
seconds per suite in a cell, default 2400), HOSTS_PYTHON=all (the smoke's
python session in every cell).

`full` keeps what earlier runs found for the cells it did not run
(build/hosts/results/full.json, each cell with the commit it ran), since
the whole matrix takes longer under TCG than one sitting: cells can be run
a few at a time and the table still covers every cell.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("BUILD", os.path.join(REPO, "build"))
if not os.path.isabs(BUILD):
    BUILD = os.path.join(REPO, BUILD)
HOSTS = os.path.join(BUILD, "hosts")
KERNELS = os.path.join(HOSTS, "kernels")
RESULTS = os.path.join(HOSTS, "results")
# The binaries every cell runs: a snapshot of build/ taken at the start, so
# that a rebuild while the matrix runs cannot change them under a cell.
BIN = os.path.join(HOSTS, "bin")


def snapshot_binaries():
    tmp = BIN + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(os.path.join(tmp, "helpers"))
    for name in ("cordon", "cordon-serve"):
        shutil.copy2(os.path.join(BUILD, name), tmp)
    helpers = os.path.join(BUILD, "helpers")
    for name in os.listdir(helpers):
        shutil.copy2(os.path.join(helpers, name), os.path.join(tmp, "helpers"))
    shutil.rmtree(BIN, ignore_errors=True)
    os.rename(tmp, BIN)


# The matrix. suite: the Debian kernel; cg: v2 (pure) or hybrid (v1 memory,
# pids, cpu + v2 at /sys/fs/cgroup/unified); place: where the daemon runs
# (root cgroup, system.slice/cordon.service with +memory +pids +cpu
# delegated, an unprivileged user with or without a delegated subtree);
# state: the state directory's filesystem; userns: 0 for
# user.max_user_namespaces=0.
CELLS = [
    dict(name="bookworm-v2-root", short="6.1-root", suite="bookworm", cg="v2", place="root",
         state="tmpfs"),
    dict(name="bookworm-v2-service-tmpfs", short="6.1-svc-tmp", suite="bookworm", cg="v2", place="service",
         state="tmpfs", python=True),
    dict(name="bookworm-v2-service-ext4", short="6.1-svc-ext4", suite="bookworm", cg="v2", place="service",
         state="ext4"),
    dict(name="bullseye-v2-service", short="5.10-svc", suite="bullseye", cg="v2", place="service",
         state="tmpfs"),
    dict(name="bullseye-hybrid-root", short="5.10-hybrid", suite="bullseye", cg="hybrid", place="root",
         state="tmpfs"),
    dict(name="trixie-v2-service", short="6.12-svc", suite="trixie", cg="v2", place="service",
         state="tmpfs"),
    dict(name="bookworm-user-delegated", short="6.1-user-del", suite="bookworm", cg="v2",
         place="user-delegated", state="tmpfs"),
    dict(name="bookworm-user-plain", short="6.1-user", suite="bookworm", cg="v2", place="user-plain",
         state="tmpfs"),
    dict(name="bookworm-no-userns", short="6.1-no-userns", suite="bookworm", cg="v2", place="service",
         state="tmpfs", userns="0"),
    # This machine as it is (6.18, hybrid, root): no VM.
    dict(name="host", short="host-6.18", kind="direct"),
    # cordon inside a container, as a Kubernetes pod runs it (podman +
    # crun, a debootstrap root filesystem): tests/hosts/container/run.sh,
    # once with a container's default capabilities and seccomp profile and
    # once privileged (as deploy/kubernetes/ runs it). Its preparation
    # (prepare.sh: packages, debootstrap) starts in the background before
    # the VMs (and, in make test, before ctest); the cells wait for it.
    dict(name="container-default", short="ctr-default", kind="container", container="default"),
    dict(name="container-privileged", short="ctr-priv", kind="container", container="privileged"),
    # The Containerfile built with podman (its base image imported from
    # the same root filesystem: no registry here) and run as the
    # Deployment runs it: 30-50 s, so in make test-hosts only.
    dict(name="container-image", short="ctr-image", kind="container", container="image", only="full"),
]
# How long one portable suite may take in a cell (suites.py --timeout):
# under TCG the escape suite alone takes ~20 minutes.
SUITE_TIMEOUT = int(os.environ.get("HOSTS_SUITE_TIMEOUT", "2400"))
# How long a container cell waits for its preparation beyond the cell's
# own timeout (run.sh's CONTAINER_PREPARE_WAIT): ~4 minutes from nothing.
CONTAINER_PREPARE_WAIT = 900


def commit():
    """The tree the cells run: HEAD, and "+changes" when it differs."""
    head = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip() or "unknown"
    dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return head + ("+changes" if dirty else "")


def log(msg):
    print(f"[hosts {time.strftime('%H:%M:%S')}] {msg}", flush=True)


COMMIT = "unknown"  # commit(), once per run
fetch_locks = {s: threading.Lock() for s in ("bullseye", "bookworm", "trixie")}
fetched = {}


def kernel(suite):
    """(kernel dir, None) or (None, skip reason); each suite fetched once
    (the suites in parallel)."""
    with fetch_locks.setdefault(suite, threading.Lock()):
        if suite not in fetched:
            t = time.monotonic()
            p = subprocess.run([os.path.join(HERE, "fetch-kernel.sh"), suite, KERNELS],
                               capture_output=True, text=True)
            if p.returncode != 0:
                reason = (p.stdout.strip().removeprefix("SKIP: ") or p.stderr.strip()
                          or f"fetch-kernel.sh exited {p.returncode}")
                fetched[suite] = (None, reason)
            else:
                fetched[suite] = (os.path.join(KERNELS, suite), None)
                initrd = os.path.join(HOSTS, f"initrd-{suite}.gz")
                q = subprocess.run([os.path.join(HERE, "mkinitrd.sh"), fetched[suite][0], initrd],
                                   capture_output=True, text=True)
                if q.returncode != 0:
                    fetched[suite] = (None, f"mkinitrd.sh failed: {q.stderr.strip()[-300:]}")
            log(f"kernel {suite}: {fetched[suite][1] or 'ready'} ({time.monotonic() - t:.1f}s)")
        return fetched[suite]


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError):
        return None


def python_here(c, mode):
    """Whether this cell's smoke starts a python session: under TCG one
    takes ~85 s (ipykernel's imports run ~80x slower than natively), so the
    smoke `make test` runs has it only in the cells marked python=True, one
    per kernel; HOSTS_PYTHON=all puts it in every cell (and `full` runs the
    python suites everywhere)."""
    return mode == "full" or os.environ.get("HOSTS_PYTHON") == "all" or c.get("python", False)


def run_vm(c, mode, out, timeout):
    kdir, reason = kernel(c["suite"])
    if kdir is None:
        return "SKIPPED", reason, {}
    release = open(os.path.join(kdir, "release")).read().strip()
    smp = os.environ.get("HOSTS_SMP", "1")
    append = " ".join([
        "console=ttyS0", "quiet", "panic=-1",
        f"cordon.guest={HERE}/guest.sh", f"cordon.repo={REPO}", f"cordon.cell={c['name']}",
        f"cordon.build={BIN}", f"cordon.mode={mode}", f"cordon.cg={c['cg']}", f"cordon.place={c['place']}",
        f"cordon.state={c['state']}", f"cordon.userns={c.get('userns', '1')}",
        f"cordon.python={1 if python_here(c, mode) else 0}",
        f"cordon.suites={','.join(os.environ.get('HOSTS_SUITES', '').split()) or 'all'}",
        f"cordon.suite_timeout={SUITE_TIMEOUT}", f"cordon.tests={BUILD}",
    ])
    argv = ["qemu-system-x86_64", "-accel", "tcg,thread=multi" if smp != "1" else "tcg",
            "-m", "2048", "-smp", smp, "-nographic", "-monitor", "none", "-no-reboot",
            "-kernel", os.path.join(kdir, "vmlinuz"),
            "-initrd", os.path.join(HOSTS, f"initrd-{c['suite']}.gz"),
            "-append", append, "-device", "virtio-rng-pci",
            "-virtfs", "local,path=/,mount_tag=host,security_model=passthrough,readonly=on,multidevs=remap",
            "-virtfs", f"local,path={out},mount_tag=results,security_model=passthrough"]
    console = os.path.join(out, "console.log")
    with open(console, "w") as con:
        vm = subprocess.Popen(argv, stdout=con, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            vm.wait(timeout)
        except subprocess.TimeoutExpired:
            vm.kill()
            vm.wait()
            return ("TIMEOUT", f"no poweroff within {timeout}s (Linux {release}; {console})",
                    {"kernel": release})
    text = open(console, errors="replace").read()
    end = [l for l in text.splitlines() if l.startswith("CORDON-CELL-END")]
    if "CORDON-INIT-FAILED" in text:
        line = next(l for l in text.splitlines() if "CORDON-INIT-FAILED" in l)
        return "ERROR", f"the guest did not come up: {line} ({console})", {"kernel": release}
    if not end:
        return ("ERROR", f"the guest stopped without its end marker (qemu exit {vm.returncode}; {console})",
                {"kernel": release})
    rc = end[-1].split("rc=")[-1].strip()
    return ("PASSED" if rc == "0" else "FAILED"), f"guest work exit {rc}", {"kernel": release}


def run_direct(mode, out, timeout):
    state = tempfile.mkdtemp(prefix="cordon-hosts-")
    try:
        if mode == "full":
            argv = [sys.executable, os.path.join(HERE, "suites.py"), "--repo", REPO, "--build", BIN,
                    "--out", out, "--cell", "host", "--timeout", str(SUITE_TIMEOUT), "--tests", BUILD]
        else:
            argv = [sys.executable, os.path.join(HERE, "smoke.py"), "--repo", REPO, "--build", BIN,
                    "--state-dir", state, "--out", out, "--cell", "host"]
        with open(os.path.join(out, "console.log"), "w") as con:
            try:
                p = subprocess.run(argv, stdout=con, stderr=subprocess.STDOUT, timeout=timeout,
                                   stdin=subprocess.DEVNULL)
            except subprocess.TimeoutExpired:
                return "TIMEOUT", f"not done within {timeout}s", {"kernel": os.uname().release}
        return (("PASSED" if p.returncode == 0 else "FAILED"), f"exit {p.returncode}",
                {"kernel": os.uname().release})
    finally:
        shutil.rmtree(state, ignore_errors=True)


def start_container_preparation():
    """prepare.sh --background: nothing to do when its cache is warm or
    one is under way (make test starts it before ctest)."""
    prep = os.path.join(HERE, "container", "prepare.sh")
    if os.access(prep, os.X_OK):
        subprocess.run([prep, "--background"], env=dict(os.environ, BUILD=BUILD),
                       stdin=subprocess.DEVNULL)


def container_result(which, seconds):
    """smoke.json's shape from guest.py's `CELL {json}` lines: a check whose
    claim is "enforced (MECHANISM)" or "not enforced" is a capability,
    anything else a step; for the matrix table."""
    rows, steps = [], []
    try:
        lines = open(os.path.join(HOSTS, "container", f"{which}.log"), errors="replace").read().splitlines()
    except OSError:
        return None
    for line in lines:
        if not line.startswith("CELL "):
            continue
        try:
            x = json.loads(line[5:])
        except json.JSONDecodeError:
            continue
        claim = x["claim"]
        if claim.startswith("enforced (") or claim == "not enforced":
            rows.append({"capability": x["check"], "claimed": claim != "not enforced",
                         "mechanism": claim[len("enforced ("):-1] if claim != "not enforced" else None,
                         "observed": x["observed"], "agree": bool(x["ok"]), "detail": x["detail"]})
        else:
            # The smoke's names for the same steps, so the table lines up.
            name = {"daemon starts": "daemon start", "standard run": "daemon run",
                    "SIGKILL + restart": "SIGKILL and restart",
                    "process_tree": "process_tree degraded, and said so"}.get(x["check"], x["check"])
            steps.append({"step": name, "ok": bool(x["ok"]),
                          "detail": f"{claim}: {x['observed']}"})
    if not rows and not steps:
        return None
    return {"cell": f"container-{which}", "seconds": seconds, "capabilities": rows, "steps": steps,
            "passed": all(r["agree"] for r in rows) and all(st["ok"] for st in steps)}


def run_container(c, mode, out, timeout):
    """The container cell's own driver (tests/hosts/container/run.sh, one
    container per cell; the same checks in both modes). It prints
    "SKIPPED: why" and exits 0 when podman, crun or its root filesystem
    cannot be had; it first waits for the preparation under way."""
    hook = os.path.join(HERE, "container", "run.sh")
    if not os.access(hook, os.X_OK):
        return "SKIPPED", "no tests/hosts/container/run.sh (the container cell is not provided)", {}
    console = os.path.join(out, "console.log")
    t = time.monotonic()
    with open(console, "w") as con:
        try:
            p = subprocess.run([hook, c["container"]], stdout=con, stderr=subprocess.STDOUT,
                               timeout=timeout + CONTAINER_PREPARE_WAIT, stdin=subprocess.DEVNULL,
                               env=dict(os.environ, BUILD=BUILD, CONTAINER_BIN=BIN,
                                        CONTAINER_PREPARE_WAIT=str(CONTAINER_PREPARE_WAIT)))
        except subprocess.TimeoutExpired:
            return "TIMEOUT", f"not done within {timeout + CONTAINER_PREPARE_WAIT}s ({console})", {}
    text = open(console, errors="replace").read()
    skips = [l for l in text.splitlines() if "SKIPPED:" in l]
    if p.returncode == 0 and skips:
        return "SKIPPED", skips[-1].split("SKIPPED:", 1)[1].strip(), {}
    result = container_result(c["container"], round(time.monotonic() - t, 1))
    if result is not None:
        with open(os.path.join(out, "smoke.json" if mode == "smoke" else "suites.json"), "w") as f:
            json.dump(result if mode == "smoke" else {"suites": []}, f, indent=1)
    ends = [l for l in text.splitlines() if l.startswith("container cell: ")]
    return (("PASSED" if p.returncode == 0 else "FAILED"),
            f"exit {p.returncode}: {ends[0] if ends else console}", {"kernel": os.uname().release})


def run_cell(c, mode, timeout):
    out = os.path.join(RESULTS, c["name"])
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    t = time.monotonic()
    log(f"{c['name']}: start")
    kind = c.get("kind", "vm")
    if kind == "direct":
        status, detail, info = run_direct(mode, out, timeout)
    elif kind == "container":
        status, detail, info = run_container(c, mode, out, timeout)
    else:
        status, detail, info = run_vm(c, mode, out, timeout)
    info.update(cell=c["name"], short=c.get("short", c["name"]), status=status, detail=detail,
                seconds=round(time.monotonic() - t, 1), commit=COMMIT,
                finished=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                result=read_json(os.path.join(out, "smoke.json" if mode == "smoke" else "suites.json")))
    with open(os.path.join(out, "cell.json"), "w") as f:
        json.dump(info, f, indent=1)
    log(f"{c['name']}: {status} in {info['seconds']}s: {detail}")
    return info


def table(mode, done):
    print(f"\n== host matrix ({mode})")
    print(f"{'cell':<28} {'kernel':<22} {'status':<8} {'time':>7}  failed")
    for i in done:
        r = i.get("result") or {}
        failed = []
        if mode == "smoke":
            failed = [x["capability"] for x in r.get("capabilities", []) if not x["agree"]]
            failed += [x["step"] for x in r.get("steps", []) if not x["ok"]]
        else:
            failed = [s["suite"] for s in r.get("suites", []) if not s["passed"]]
        what = ", ".join(failed) if failed else ("" if i["status"] == "PASSED" else i["detail"])
        print(f"{i['cell']:<28} {i.get('kernel', '-'):<22} {i['status']:<8} {i['seconds']:>6.0f}s  {what}")
    if mode == "smoke":
        caps = []
        for i in done:
            for x in (i.get("result") or {}).get("capabilities", []):
                if x["capability"] not in caps:
                    caps.append(x["capability"])
        if caps:
            print("\nclaimed/observed per capability (y = claimed and observed, n = not claimed and"
                  " refused when asked, X = claim and observation disagree)")
            short = {c["name"]: c.get("short", c["name"]) for c in CELLS}
            names = [short[i["cell"]] for i in done if i.get("result")]
            print(f"{'capability':<15} " + " ".join(f"{n[:13]:>13}" for n in names))
            for cap in caps:
                cells = []
                for i in done:
                    r = i.get("result")
                    if not r:
                        continue
                    x = next((x for x in r["capabilities"] if x["capability"] == cap), None)
                    cells.append("-" if x is None
                                 else ("X" if not x["agree"] else ("y" if x["claimed"] else "n")))
                print(f"{cap:<15} " + " ".join(f"{v:>13}" for v in cells))


def in_order(lists):
    """Each name of the lists once, in the order first seen."""
    seen = []
    for names in lists:
        seen += [n for n in names if n not in seen]
    return seen


def table_head(first, cells):
    print(f"| {first} | " + " | ".join(i.get("short", i["cell"]) for i in cells) + " |")
    print("|---|" + "---|" * len(cells))


def markdown_full():
    """The portable suites per cell as a Markdown table (for
    docs/hosts.md): passed/failed/skipped per suite, the cell's verdict,
    its time and the commit it ran."""
    data = read_json(os.path.join(RESULTS, "full.json"))
    if not data:
        print("hosts.py: no build/hosts/results/full.json: run `hosts.py full` first", file=sys.stderr)
        return 2
    cells = data["cells"]
    suites = in_order([x["suite"] for x in (i.get("result") or {}).get("suites", [])] for i in cells)
    table_head("suite", cells)
    for name in suites:
        row = []
        for i in cells:
            x = next((x for x in (i.get("result") or {}).get("suites", []) if x["suite"] == name), None)
            if x is None:
                row.append("")
                continue
            n = x.get("counts", {})
            text = f"{n.get('passed', 0)} ok"
            if n.get("skipped"):
                text += f", {n['skipped']} skipped"
            if not x["passed"]:
                text = f"**{n.get('failed', 0)} failed** ({text}; rc {x['rc']})"
            row.append(text)
        print(f"| {name} | " + " | ".join(row) + " |")
    print("| *cell time (s)* | " + " | ".join(f"{i['seconds']:.0f}" for i in cells) + " |")
    print("| *commit* | " + " | ".join(f"`{i.get('commit', '?')}`" for i in cells) + " |")
    print("| *verdict* | " + " | ".join(i["status"] for i in cells) + " |")
    return 0


def markdown():
    """The last smoke's matrix as a Markdown table (for docs/hosts.md):
    per capability and cell, the probe's mechanism when claimed and
    confirmed, "no" when not claimed (and refused when asked), and
    "**claimed, not observed**" when they disagree."""
    data = read_json(os.path.join(RESULTS, "smoke.json"))
    if not data:
        print("hosts.py: no build/hosts/results/smoke.json: run `hosts.py smoke` first", file=sys.stderr)
        return 2
    cells = [i for i in data["cells"] if i.get("result")]
    caps = in_order([x["capability"] for x in i["result"]["capabilities"]] for i in cells)
    table_head("capability", cells)
    for cap in caps:
        row = []
        for i in cells:
            x = next((x for x in i["result"]["capabilities"] if x["capability"] == cap), None)
            if x is None:
                row.append("")
            elif not x["agree"]:
                row.append(f"**claimed ({x['mechanism']}), not observed**" if x["claimed"]
                           else "**not claimed, yet not refused**")
            else:
                row.append(x["mechanism"] if x["claimed"] else "no")
        print(f"| {cap} | " + " | ".join(row) + " |")
    for st in in_order([x["step"] for x in i["result"]["steps"]] for i in cells):
        row = []
        for i in cells:
            x = next((x for x in i["result"]["steps"] if x["step"] == st), None)
            row.append("" if x is None else ("ok" if x["ok"] else "**FAILED**"))
        print(f"| *{st}* | " + " | ".join(row) + " |")
    print("| *cell time (s)* | " + " | ".join(f"{i['seconds']:.0f}" for i in cells) + " |")
    print("| *verdict* | " + " | ".join(i["status"] for i in cells) + " |")
    return 0


def main():
    argv = sys.argv[1:]
    mode = argv[0] if argv else "smoke"
    if mode == "list":
        for c in CELLS:
            print(c["name"])
        return 0
    if mode == "markdown":
        return markdown_full() if argv[1:] == ["full"] else markdown()
    if mode not in ("smoke", "full"):
        print(__doc__, file=sys.stderr)
        return 2
    names = argv[1:] or os.environ.get("HOSTS_CELLS", "").split()
    cells = [c for c in CELLS if (not names and c.get("only", mode) == mode) or c["name"] in names]
    unknown = set(names) - {c["name"] for c in CELLS}
    if unknown:
        print(f"hosts.py: unknown cell(s) {sorted(unknown)}; `hosts.py list` names them", file=sys.stderr)
        return 2
    for tool in ("qemu-system-x86_64", "curl"):
        if shutil.which(tool) is None:
            print(f"hosts.py: {tool} is missing (make test-hosts installs qemu-system-x86, busybox-static,"
                  " curl)", file=sys.stderr)
            return 2
    timeout = int(os.environ.get("HOSTS_TIMEOUT", "240" if mode == "smoke" else "7200"))
    jobs = int(os.environ.get("HOSTS_JOBS", "2"))
    os.makedirs(RESULTS, exist_ok=True)
    global COMMIT
    COMMIT = commit()
    t0 = time.monotonic()
    if any(c.get("kind") == "container" for c in cells):
        start_container_preparation()
    try:
        snapshot_binaries()
    except OSError as e:
        print(f"hosts.py: cannot copy the binaries from {BUILD} ({e}): build them first (make build)",
              file=sys.stderr)
        return 2
    # Fetch the kernels first, in parallel (a fresh machine downloads them
    # once; later runs find them in build/hosts/kernels).
    suites = sorted({c["suite"] for c in cells if "suite" in c})
    fetchers = [threading.Thread(target=kernel, args=(s,)) for s in suites]
    for f in fetchers:
        f.start()
    for f in fetchers:
        f.join()
    log(f"kernels ready after {time.monotonic() - t0:.1f}s")
    # The direct cell runs alone at the end: it measures this machine, and a
    # busy TCG neighbour would only slow it.
    vms = [c for c in cells if c.get("kind", "vm") != "direct"]
    direct = [c for c in cells if c.get("kind") == "direct"]
    done = {}
    queue = list(vms)
    lock = threading.Lock()

    def worker():
        while True:
            with lock:
                if not queue:
                    return
                c = queue.pop(0)
            done[c["name"]] = run_cell(c, mode, timeout)

    workers = [threading.Thread(target=worker) for _ in range(max(1, jobs))]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    for c in direct:
        done[c["name"]] = run_cell(c, mode, timeout)
    ordered = [done[c["name"]] for c in cells]
    total = time.monotonic() - t0
    table(mode, ordered)
    kept = []
    if mode == "full":  # the cells this run did not run, as earlier runs found them
        earlier = read_json(os.path.join(RESULTS, "full.json")) or {}
        kept = [i for i in earlier.get("cells", []) if i.get("cell") not in done]
    order = {c["name"]: n for n, c in enumerate(CELLS)}
    everything = sorted(ordered + kept, key=lambda i: order.get(i.get("cell"), len(order)))
    with open(os.path.join(RESULTS, f"{mode}.json"), "w") as f:
        json.dump({"mode": mode, "seconds": round(total, 1), "cells": everything}, f, indent=1)
    failed = [i["cell"] for i in ordered if i["status"] not in ("PASSED", "SKIPPED")]
    skipped = [i["cell"] for i in ordered if i["status"] == "SKIPPED"]
    print(f"\n{len(ordered) - len(failed) - len(skipped)} passed, {len(failed)} failed"
          f"{' (' + ', '.join(failed) + ')' if failed else ''}, {len(skipped)} skipped"
          f"{' (' + ', '.join(skipped) + ')' if skipped else ''}; {total:.0f}s in all "
          f"(results in {RESULTS})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
