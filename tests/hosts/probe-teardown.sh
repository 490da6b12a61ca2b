#!/bin/sh
# probe-teardown.sh --in-vm [BUILD_DIR]
#
# Runs inside a VM guest booted on a Debian kernel with a pure cgroup v2
# hierarchy (written for bullseye's 5.10, which has no cgroup.kill) and the
# host's root shown read-only over 9p with a tmpfs overlay (see issue 12, "How to
# test on other kernels"), so that build/ is the host's.
# It checks that the probe's claims about limits and teardown hold there:
#   - `cordon probe` enforces memory and process_count through cgroup2 and
#     names the teardown it will use ("teardown": ...);
#   - --memory 64M: a hog is OOM-killed and the run says so;
#   - --pids 20: a fork loop stops short of 20;
#   - --timeout: a timed-out run's setsid'ed grandchild is dead afterwards,
#     and a hopping fork loop too, with the teardown verified;
#   - the daemon, SIGKILLed with a run in flight and started again, reaps
#     that run's tree (verified) and releases its grant.
# Every check prints "PASS name" or "FAIL name: why"; the last line is
# "RESULT: N passed, M failed". Exit 0 only when nothing failed.
#
# It mounts cgroup2 at /sys/fs/cgroup and brings lo up: never run it on a
# host, only in a throwaway guest (hence --in-vm).
set -u

if [ "${1:-}" != "--in-vm" ]; then
  echo "usage: $0 --in-vm [BUILD_DIR]  (only inside a throwaway VM guest)" >&2
  exit 2
fi
build=${2:-/work/main/build}
cordon=$build/cordon
helpers=$build/helpers
py=/usr/bin/python3
passed=0
failed=0

pass() {
  echo "PASS $1"
  passed=$((passed + 1))
}
fail() {
  echo "FAIL $1: $2"
  failed=$((failed + 1))
}
# check NAME FILE PYTHON-EXPRESSION: the expression, over the JSON in FILE
# as `j`, must be true; otherwise the failure shows the JSON's gist.
check() {
  if $py - "$2" "$3" <<'EOF'; then pass "$1"; else fail "$1" "$(head -c 1500 "$2" | tr '\n' ' ')"; fi
import json, sys
try:
    j = json.load(open(sys.argv[1]))
except Exception as e:
    print("not JSON:", e)
    sys.exit(1)
sys.exit(0 if eval(sys.argv[2]) else 1)
EOF
}
alive() { kill -0 "$1" 2>/dev/null; }

# The host shape: pure cgroup v2 with every controller at the root.
grep -q ' /sys/fs/cgroup cgroup2 ' /proc/mounts || mount -t cgroup2 none /sys/fs/cgroup
ip link set lo up 2>/dev/null || true
out=$(mktemp -d /tmp/probe-teardown.XXXXXX)
chmod 755 "$out"
# The runs' workspace, open to the sandbox's outside uid: where a workspace
# cannot be idmapped (tmpfs before 6.3, any filesystem before 5.12), a 0700
# one is refused (EACCES at the workspace step; issue 12, problem 1).
mkdir -m 1777 "$out/ws"
echo "kernel $(uname -r); cgroup2 controllers: $(cat /sys/fs/cgroup/cgroup.controllers)"
echo "cgroup.kill in a child group: $(mkdir -p /sys/fs/cgroup/pt-look &&
  ls /sys/fs/cgroup/pt-look | grep -cx 'cgroup.kill'; rmdir /sys/fs/cgroup/pt-look)"

# --- the probe -------------------------------------------------------------
"$cordon" probe
"$cordon" probe --json >"$out/probe.json"
check probe_memory_enforced "$out/probe.json" \
  '[c for c in j["capabilities"] if c["capability"] == "memory"][0]["mechanism"] == "cgroup2 memory"'
check probe_process_count_enforced "$out/probe.json" \
  '[c for c in j["capabilities"] if c["capability"] == "process_count"][0]["mechanism"] == "cgroup2 pids"'
check probe_names_teardown "$out/probe.json" \
  'j["teardown"]["unisolated"] in ("cgroup.kill", "cgroup.freeze+kill") and j["teardown"]["isolated"] in ("cgroup.kill", "pid_namespace")'
if [ -e /sys/fs/cgroup/cordon/cgroup.kill ]; then
  want_plain=cgroup.kill
  want_isolated=cgroup.kill
else
  want_plain=cgroup.freeze+kill
  want_isolated=pid_namespace
fi
check probe_teardown_matches_the_kernel "$out/probe.json" \
  "j['teardown'] == {'isolated': '$want_isolated', 'unisolated': '$want_plain'}"

# --- limits and teardown of one-shot runs, with and without isolation ------
for iso in none standard; do
  if [ $iso = none ]; then want=$want_plain; else want=$want_isolated; fi
  # The helpers, shown inside the sandbox's filesystem view too.
  show=""
  [ $iso = standard ] && show="--ro-bind $helpers"
  cd "$out/ws" || exit 1
  "$cordon" run --json -q --isolation $iso $show --memory 64M -- "$helpers/alloc" 512 \
    >"$out/oom-$iso.json" 2>"$out/oom-$iso.err"
  check "memory_64M_oom_killed[$iso]" "$out/oom-$iso.json" \
    'j["outcome"] == "oom_killed" and j["oom_killed"] and j["release"]["dead"]'

  "$cordon" run --json -q --isolation $iso $show --pids 20 -- "$helpers/fork_loop" 1000 \
    >"$out/pids-$iso.json" 2>"$out/pids-$iso.err"
  check "pids_20_fork_loop_stops[$iso]" "$out/pids-$iso.json" \
    'j["outcome"] == "exited" and j["stdout"].startswith("forked ") and int(j["stdout"].split()[1]) < 20 and "EAGAIN" in j["stdout"] and j["release"]["dead"]'

  # A timed-out run whose setsid'ed grandchild ignores SIGTERM; and a
  # hopping fork loop (each process forks its successor and exits). The
  # grandchild's pid, as this guest sees it, comes from the grant's cgroup.
  rm -f "$out/gc.pid"
  "$cordon" run --json -q --isolation $iso --timeout 2 --grace 200ms --pids 200 \
    --shell 'setsid sh -c "trap \"\" TERM; exec sleep 300" & f() { f & }; f; trap "" TERM; sleep 300' \
    >"$out/timeout-$iso.json" 2>"$out/timeout-$iso.err" &
  run=$!
  # While it runs: the members of its group, to look for after.
  members=""
  for _ in $(seq 1 100); do
    group=$(ls -d /sys/fs/cgroup/cordon/*/ 2>/dev/null | head -1)
    if [ -n "$group" ] && [ "$(wc -l <"$group/cgroup.procs")" -ge 3 ]; then
      members=$(cat "$group/cgroup.procs" | tr '\n' ' ')
      break
    fi
    sleep 0.05
  done
  wait $run
  check "timeout_teardown_verified[$iso]" "$out/timeout-$iso.json" \
    "j['outcome'] == 'timed_out' and j['release']['dead'] and j['release']['escalated'] and j['release']['teardown'] == '$want' and not j['release']['survivors']"
  left=""
  for pid in $members; do alive "$pid" && left="$left $pid"; done
  if [ -z "$members" ]; then
    fail "timeout_grandchild_dead[$iso]" "the run's group was never seen with 3 members"
  elif [ -n "$left" ]; then
    fail "timeout_grandchild_dead[$iso]" "still alive:$left (of $members)"
  else
    pass "timeout_grandchild_dead[$iso]"
  fi
  if [ -z "$(ls -d /sys/fs/cgroup/cordon/*/ 2>/dev/null)" ]; then
    pass "timeout_cgroup_removed[$iso]"
  else
    fail "timeout_cgroup_removed[$iso]" "$(ls -d /sys/fs/cgroup/cordon/*/)"
  fi
done

# --- the daemon: SIGKILL with runs in flight, restart, reap ----------------
state=$out/state
mkdir -p "$state"
start_daemon() {
  rm -f "$state/serve.json"
  "$build/cordon-serve" serve --state-dir "$state" --listen 127.0.0.1:7419 \
    >>"$out/daemon.log" 2>&1 &
  daemon=$!
  for _ in $(seq 1 200); do
    [ -s "$state/serve.json" ] && return 0
    sleep 0.05
  done
  return 1
}
post_run() { # ISOLATION: a run that holds a setsid'ed grandchild, in the background
  $py - "$state/token" "$1" <<'EOF' >>"$out/client.log" 2>&1 &
import json, sys, urllib.request
token = open(sys.argv[1]).read().strip()
body = {"shell": "setsid sh -c 'exec sleep 300' & exec sleep 301", "isolation": sys.argv[2],
        "limits": {"timeout_ms": 600000, "memory_bytes": 64 << 20, "pids": 64}}
req = urllib.request.Request("http://127.0.0.1:7419/v1/runs", json.dumps(body).encode(),
                             {"Authorization": "Bearer " + token,
                              "Content-Type": "application/json"})
try:
    print(urllib.request.urlopen(req, timeout=600).read()[:300])
except Exception as e:
    print("client:", e)
EOF
}
if start_daemon; then
  pass daemon_started
  post_run none
  post_run standard
  # Both runs' groups, each with its two sleeps (and a sandbox init).
  groups=""
  for _ in $(seq 1 200); do
    "$cordon" grants --json --state-dir "$state" >"$out/grants-before.json" 2>/dev/null
    groups=$($py -c 'import json,sys; print(" ".join(g["cgroups"].get("v2","") for g in json.load(open(sys.argv[1])) if g.get("identity")))' "$out/grants-before.json" 2>/dev/null)
    n=0
    for g in $groups; do [ "$(wc -l <"$g/cgroup.procs" 2>/dev/null || echo 0)" -ge 2 ] && n=$((n + 1)); done
    [ $n -ge 2 ] && break
    sleep 0.05
  done
  members=""
  for g in $groups; do members="$members $(cat "$g/cgroup.procs" | tr '\n' ' ')"; done
  echo "grants' groups: $groups; members:$members"
  kill -KILL $daemon
  wait $daemon 2>/dev/null
  left=""
  dead=""
  for pid in $members; do
    if alive "$pid"; then left="$left $pid"; else dead="$dead $pid"; fi
  done
  if [ -n "$left" ] && [ -z "$dead" ]; then
    pass daemon_sigkill_leaves_the_runs
  else
    fail daemon_sigkill_leaves_the_runs "alive:$left dead:$dead"
  fi
  if start_daemon; then
    left=""
    for pid in $members; do alive "$pid" && left="$left $pid"; done
    if [ -z "$left" ]; then pass restart_reaps_the_trees; else fail restart_reaps_the_trees "alive:$left"; fi
    gone=yes
    for g in $groups; do [ -d "$g" ] && gone="no: $g"; done
    if [ $gone = yes ]; then pass restart_removes_the_groups; else fail restart_removes_the_groups "$gone"; fi
    "$cordon" grants --all --json --state-dir "$state" >"$out/grants-after.json"
    check restart_releases_the_grants "$out/grants-after.json" \
      "len([g for g in j if g['release'] and g['release'].get('reaped')]) == 2 and all(g['state'] == 'released' and g['release']['dead'] for g in j if g['release'] and g['release'].get('reaped'))"
    check restart_names_the_teardown "$out/grants-after.json" \
      "sorted(g['release']['teardown'] for g in j if g['release'] and g['release'].get('reaped')) == sorted(['$want_plain', '$want_isolated'])"
    kill -TERM $daemon
    wait $daemon 2>/dev/null
  else
    fail daemon_restarted "$(tail -5 "$out/daemon.log")"
  fi
else
  fail daemon_started "$(tail -5 "$out/daemon.log")"
fi
wait 2>/dev/null

for f in "$out"/*.err "$out/daemon.log" "$out/client.log"; do
  [ -s "$f" ] && { echo "--- $f"; tail -20 "$f"; }
done
echo "RESULT: $passed passed, $failed failed"
[ $failed -eq 0 ]
