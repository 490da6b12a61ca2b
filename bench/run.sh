#!/usr/bin/env bash
# Side-by-side benchmarks of the one-shot boundary, in one run, with medians
# and ratios (absolute figures drift between runs and machines; ratios
# measured together do not). Usage: bench/run.sh [BUILD_DIR]
#
#  1. start-up: /bin/true bare, under cordon, under cordon with cgroup
#     limits, under the floor of any supervisor (build/bench/spawn_floor:
#     fork, exec, wait, nothing else), under bwrap's minimal invocation,
#     under systemd-run --scope (each peer only where it runs on this host);
#  2. teardown: from the deadline to verified death of a 50-process tree
#     whose members half escaped with setsid(), as cordon reports it;
#  3. where a sandboxed launch spends its time, per setup step
#     (cordon_setup_steps);
#  4. isolation, side by side: cordon --isolation standard against
#     bwrap --unshare-all, firejail and unshare (where they run), and bare
#     /bin/true.
#  5. the daemon (bench/daemon.py): session exec round trip, POST /v1/runs
#     and `cordon run` side by side, session create-to-ready, runs per
#     second with 4 concurrent clients.
#  6. the Kernel Gateway surface (bench/gateway_bench.py): kernel create and
#     create-to-first-result, `1+1` round trips over a new and an open
#     websocket, for Debian's jupyter-server, cordon cold and cordon
#     --prespawn 2 with the same ipykernel, and a direct ZeroMQ client in
#     Python like the websocket clients (bench/zmq_direct.py) as the floor
#     (build/bench/zmq_direct, in C++, for reference).
#  7. a tenant's bounds: bench/slowloris.py, output_flood.py, full_disk.py,
#     soak.py, kill_under_load.py (BOUNDS=0 leaves them out).
#  8. the daemon's memory under load (bench/memory.py): a 2 GB output flood,
#     64 live shell sessions, MEMORY_PYTHON (16) python ones, 1000 ended
#     ones (MEMORY=0 leaves it out).
#  9. PNG plots (bench/plots.py, python3-matplotlib) of what 4-6 and 8
#     measured.
#
# Every sample goes, as JSON, into $BENCH_OUT (default BUILD_DIR/bench),
# which is kept after the run: startup.json and isolation.json (hyperfine
# --export-json, with the rows' names), daemon.json, gateway.json,
# memory.json, meta.json (date, load), and the plots beside them.
# SECTIONS="startup teardown steps isolation daemon gateway bounds memory
# plots" (any of them; default all) runs some only. BENCH_BUILD=0 builds
# nothing (cordon_setup_steps and zmq_direct must then exist).
set -euo pipefail
build=${1:-build}
cordon=$(realpath "$build/cordon")
helpers=$(realpath "$build/helpers")
runs=${RUNS:-300}
work=$(mktemp -d /tmp/cordon-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
state=$work/state
out=${BENCH_OUT:-$build/bench}
mkdir -p "$out"
out=$(realpath "$out")
want() { [[ " ${SECTIONS:-all} " == *" all "* || " ${SECTIONS:-all} " == *" $1 "* ]]; }
build_target() { [[ ${BENCH_BUILD:-1} == 0 ]] || cmake --build "$build" --target "$1" >/dev/null; }
/usr/bin/python3 - "$out/meta.json" <<'PY'
import json, os, sys, time
json.dump({"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpus": os.cpu_count(),
           "load_start": " ".join(f"{x:.2f}" for x in os.getloadavg())}, open(sys.argv[1], "w"))
PY

command -v hyperfine >/dev/null || { echo "hyperfine is missing (make bench installs it)" >&2; exit 1; }

# Sections 1 and 2 measure the foundation's boundary (issue 2), so they
# run with --isolation none; isolation (the default) is section 3.
cmds=("/bin/true"
      "$cordon run --state-dir $state --isolation none -- /bin/true"
      "$cordon run --state-dir $state --isolation none --pids 64 --memory 256M -- /bin/true")
names=("bare /bin/true" "cordon run --isolation none" "cordon run --isolation none --pids 64 --memory 256M")
if want startup; then
  build_target spawn_floor
  cmds+=("$(realpath "$build/bench/spawn_floor") /bin/true")
  names+=("floor: static fork, exec, wait")
fi
if bwrap --ro-bind / / /bin/true 2>/dev/null; then
  cmds+=("bwrap --ro-bind / / /bin/true"); names+=("bwrap --ro-bind / /")
else
  echo "(bwrap does not run here: left out)"
fi
if systemd-run --scope --quiet /bin/true 2>/dev/null; then
  cmds+=("systemd-run --scope --quiet /bin/true"); names+=("systemd-run --scope")
else
  echo "(systemd-run --scope does not run here (no systemd as PID 1): left out)"
fi

if want startup; then
echo "== start-up, $runs runs each, interleaved warm-up"
hyperfine -N --style none --warmup 30 --runs "$runs" --export-json "$out/startup.json" "${cmds[@]}" >/dev/null 2>&1
/usr/bin/python3 - "$out/startup.json" "${names[@]}" <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))
results = data["results"]
names = sys.argv[2:]
data["names"] = names
json.dump(data, open(sys.argv[1], "w"))
base = results[0]["median"]
cordon = results[1]["median"]
print(f"{'command':40} {'median ms':>10} {'vs bare':>8} {'vs cordon':>10}")
for name, r in zip(names, results):
    m = r["median"]
    print(f"{name:40} {m*1000:10.3f} {m/base:8.2f} {m/cordon:10.2f}")
floor = [r["median"] for n, r in zip(names, results) if n.startswith("floor")]
print(f"issue 16, item 3: cordon run --isolation none at most 2.5x bare: {cordon/base:.2f}x "
      f"({'met' if cordon <= 2.5 * base else 'not met'})"
      + (f"; the floor of any supervisor (fork, exec, wait, nothing recorded) is "
         f"{floor[0]/base:.2f}x bare" if floor else ""))
PY
fi

if want teardown; then
echo
echo "== teardown of a 50-process tree (25 setsid'ed escapees), deadline 0.3 s"
for mode in term kill standard; do
  samples=()
  for i in $(seq "${TEARDOWN_RUNS:-30}"); do
    if [[ $mode == term ]]; then
      args=(--isolation none --timeout 0.3 -- "$helpers/spawn_tree" 50)
    elif [[ $mode == kill ]]; then
      args=(--isolation none --timeout 0.3 --grace 0 -- "$helpers/spawn_tree" 50 ignore-term)
    else
      args=(--ro-bind "$helpers" --timeout 0.3 -- "$helpers/spawn_tree" 50)
    fi
    # Exit status 124 (timed out) is the point here.
    us=$({ "$cordon" run --state-dir "$state" --json "${args[@]}" || true; } |
      /usr/bin/python3 -c 'import json,sys; r=json.load(sys.stdin); assert r["release"]["dead"] and r["outcome"] == "timed_out", r; print(r["release"]["teardown_us"])')
    samples+=("$us")
  done
  printf '%s\n' "${samples[@]}" | /usr/bin/python3 -c "
import statistics, sys
v = sorted(int(x) for x in sys.stdin)
label = {'term': 'SIGTERM, members cooperate', 'kill': 'SIGKILL at once (--grace 0)', 'standard': 'SIGTERM, isolated (standard)'}['$mode']
print(f'{label:32} median {statistics.median(v)/1000:.2f} ms  min {v[0]/1000:.2f}  max {v[-1]/1000:.2f}  (n={len(v)}, verified dead each time)')
"
done
fi


# The kernel frees network namespaces in the background, and a backlog of
# them slows every process start that follows: let it drain between
# sections that make many.
pause() { sleep "${PAUSE:-20}"; }

if want steps; then
pause
echo
steps="$build/cordon_setup_steps"
build_target cordon_setup_steps
echo
echo "== where a sandboxed launch spends its time"
"$steps" "${STEP_RUNS:-100}"
fi

if want isolation; then
pause
echo
echo "== isolation side by side, ${ISO_RUNS:-180} runs each, interleaved warm-up"
iso_cmds=("/bin/true"
          "$cordon run --state-dir $state -- /bin/true"
          "$cordon run --state-dir $state --isolation none -- /bin/true")
iso_names=("bare /bin/true" "cordon run (standard: all of it)" "cordon run --isolation none")
bwrap_all="bwrap --ro-bind / / --dev /dev --proc /proc --unshare-all --die-with-parent /bin/true"
if $bwrap_all 2>/dev/null; then
  iso_cmds+=("$bwrap_all"); iso_names+=("bwrap --unshare-all")
else
  echo "(bwrap --unshare-all does not run here: left out)"
fi
if firejail --quiet --noprofile --net=none /bin/true 2>/dev/null; then
  iso_cmds+=("firejail --quiet --noprofile --net=none /bin/true"); iso_names+=("firejail --net=none")
else
  echo "(firejail does not run here: left out)"
fi
unshare_cmd="unshare --user --map-root-user --pid --fork --mount-proc --net /bin/true"
if $unshare_cmd 2>/dev/null; then
  iso_cmds+=("$unshare_cmd"); iso_names+=("unshare user+pid+net")
else
  echo "(unshare does not run here: left out)"
fi
hyperfine -N --style none --warmup 30 --runs "${ISO_RUNS:-180}" --export-json "$out/isolation.json" "${iso_cmds[@]}" >/dev/null 2>&1
/usr/bin/python3 - "$out/isolation.json" "${iso_names[@]}" <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))
results = data["results"]
names = sys.argv[2:]
data["names"] = names
json.dump(data, open(sys.argv[1], "w"))
base = results[0]["median"]
cordon = results[1]["median"]
print(f"{'command':40} {'median ms':>10} {'vs bare':>8} {'vs cordon':>10}")
for name, r in zip(names, results):
    m = r["median"]
    print(f"{name:40} {m*1000:10.3f} {m/base:8.2f} {m/cordon:10.2f}")
bwrap = [r["median"] for n, r in zip(names, results) if n.startswith("bwrap")]
if bwrap:
    print(f"target: cordon standard at least 2x faster than bwrap --unshare-all: "
          f"{bwrap[0]/cordon:.2f}x ({'met' if bwrap[0] >= 2 * cordon else 'not met'})")
    print(f"issue 16, item 3: cordon standard at most 1.0x bwrap --unshare-all: "
          f"{cordon/bwrap[0]:.2f}x ({'met' if cordon <= bwrap[0] else 'not met'})")
PY
fi

if want daemon; then
pause
echo
# 5. the daemon: exec round trip, one-shot runs over HTTP and from the CLI,
#    session create-to-ready, throughput against 1, 2, 4, 8 clients and
#    against 1 and 2 cores (taskset).
/usr/bin/python3 "$(dirname "$0")/daemon.py" "$cordon" "${DAEMON_RUNS:-300}" --json "$out/daemon.json"
fi

if want gateway; then
pause
echo
# 6. the Kernel Gateway surface, against jupyter-server, and the ZeroMQ floor.
build_target zmq_direct
/usr/bin/python3 "$(dirname "$0")/gateway_bench.py" "$build" --runs "${GATEWAY_RUNS:-30}" \
  --creates "${GATEWAY_CREATES:-5}" --json "$out/gateway.json"
fi

if want bounds; then
pause
echo
# 7. a tenant's bounds (issue 11): slow connections, a 2 GB output flood,
#    a full state directory, a soak and SIGKILLs under load. Each prints its
#    figures and one verdict line; BOUNDS=0 leaves them out (they take
#    about 15 minutes together).
if [[ ${BOUNDS:-1} != 0 ]]; then
  export CORDON_BINARY=$cordon
  for b in "slowloris.py $build" output_flood.py full_disk.py soak.py kill_under_load.py; do
    # shellcheck disable=SC2086  # the bench and its arguments
    /usr/bin/python3 "$(dirname "$0")"/$b
    pause
    echo
  done
fi
fi

export CORDON_BINARY=$cordon
# 8. the daemon's memory under load (about two minutes): a 2 GB flood as a
#    run and as a shell exec, 64 live shell sessions, MEMORY_PYTHON python
#    ones, 1000 shell sessions closed one after another.
if want memory && [[ ${MEMORY:-1} != 0 ]]; then
  # A verdict NOT MET (exit 1) still leaves the plots to make.
  /usr/bin/python3 "$(dirname "$0")/memory.py" --json "$out/memory.json" ||
    echo "(bench/memory.py exited $?)"
  echo
fi

# 9. the plots, from the JSON above.
if want plots; then
  /usr/bin/python3 "$(dirname "$0")/plots.py" "$out"
  echo "(the samples and the plots are kept in $out)"
fi
