#!/usr/bin/env bash
# The container cell: cordon inside a container the way a Kubernetes pod
# runs it (deploy/kubernetes/), under Debian's podman and crun, on a root
# filesystem made by debootstrap from Debian's archive (rootfs.sh, cached
# in build/hosts/container/rootfs) plus this build's cordon and
# cordon-serve. Two containers:
#   default     a container's default capabilities and seccomp profile, a
#               read-only cgroup tree: cordon must start, its probe must say
#               what it cannot enforce and why, and runs and sessions must
#               work with what is left;
#   privileged  --privileged with a read-only root filesystem and only
#               the Deployment's writable mounts (the state directory, /tmp,
#               /run/cordon) and its read-only token file: every isolation
#               claim must hold;
#   image       (not by default; make test-hosts) the Containerfile built
#               by podman with no registry: the root filesystem imported as
#               its base image (podman build --from), then the image run as
#               the Deployment runs it, with its own ENTRYPOINT and CMD:
#               cordon serve must answer and a run must work.
# In each, guest.py compares the daemon's probe with observed effects and
# prints a claim-vs-observed table; this script prints both and a verdict.
#
#   tests/hosts/container/run.sh [--fresh] [default|privileged|image ...]
# --fresh makes the root filesystem again. CONTAINER_CELL_FLAGS adds podman
# run flags to the default and privileged containers (to see what a given
# runtime configuration gets, e.g. "--cap-add ALL --security-opt
# seccomp=unconfined"). podman, crun, debootstrap and
# the root filesystem come from prepare.sh: `make test` starts it in the
# background before ctest; this script waits for it (prepare.lock, at most
# CONTAINER_PREPARE_WAIT seconds, default 900), then runs it itself, which
# takes a fraction of a second when it is done, and the whole preparation
# when none ran. A preparation that skipped or failed less than two hours
# ago is reported as it ended, not tried again (prepare.sh tries again).
# Exit status: 0 all checks passed; 1 a check failed or the preparation
# failed; 0 with "SKIPPED: reason" when podman, crun or the root filesystem
# cannot be had, or were not ready by the deadline (the reason says which).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
build=${BUILD:-$repo/build}
[[ $build == /* ]] || build=$repo/$build
cell_dir=$build/hosts/container
# The binaries: hosts.py passes its snapshot (build/hosts/bin), so that a
# rebuild while the matrix runs cannot change them under a cell.
bins=${CONTAINER_BIN:-$build}
rootfs=$cell_dir/rootfs

fresh=0
modes=()
for a in "$@"; do
  case $a in
    --fresh) fresh=1 ;;
    default | privileged | image) modes+=("$a") ;;
    *) echo "run.sh: unknown argument '$a' (--fresh, default, privileged, image)" >&2; exit 2 ;;
  esac
done
((${#modes[@]})) || modes=(default privileged)

skip() {
  echo "container cell: SKIPPED: $*"
  exit 0
}

start=$(date +%s.%N)
[[ $(id -u) -eq 0 ]] || skip "needs root (podman as root, debootstrap)"
for bin in cordon cordon-serve; do
  [[ -x $bins/$bin ]] || skip "$bins/$bin is missing (make build)"
done

# The preparation: wait for one under way, then make sure (prepare.sh,
# under the same lock, held until this script exits so that no
# preparation replaces the tree while a container runs on it).
mkdir -p "$cell_dir"
wait_s=${CONTAINER_PREPARE_WAIT:-900}
exec 9>"$cell_dir/prepare.lock"
if ! flock -n 9; then
  echo "waiting for the preparation under way (at most $wait_s s; log: $cell_dir/prepare.log)"
  flock -w "$wait_s" 9 ||
    skip "the root filesystem was not ready within $wait_s s (prepare.sh still running: $(cat "$cell_dir/prepare.status" 2>/dev/null); log: $cell_dir/prepare.log)"
fi
waited=$(awk "BEGIN {printf \"%.1f\", $(date +%s.%N) - $start}")
last=$(cat "$cell_dir/prepare.status" 2>/dev/null || true)
if ((!fresh)) && [[ $last == skipped:* || $last == failed:* ]] &&
  [[ -n $(find "$cell_dir/prepare.status" -mmin -120 2>/dev/null) ]]; then
  at=$(date -u -r "$cell_dir/prepare.status" +%H:%M)
  again="prepare.sh at $at UTC; tests/hosts/container/prepare.sh tries again; log: $cell_dir/prepare.log"
  [[ $last == skipped:* ]] && skip "${last#skipped: } ($again)"
  echo "container cell: FAILED: the preparation failed: ${last#failed: } ($again)"
  exit 1
fi
set +e
again=()
((fresh)) && again=(--fresh)
# (Appended: the log of the background preparation stays readable.)
"$here/prepare.sh" --locked "${again[@]}" 2>&1 | tee -a "$cell_dir/prepare.log" |
  grep -E '^(rootfs:|installing:|SKIPPED:|FAILED:)'
status=${PIPESTATUS[0]}
set -e
if ((status == 3)); then skip "$(cat "$cell_dir/prepare.status" | sed 's/^skipped: //')"; fi
((status == 0)) || {
  echo "container cell: FAILED: prepare.sh exited $status: $(cat "$cell_dir/prepare.status") (log: $cell_dir/prepare.log)"
  exit 1
}
for tool in podman crun; do
  command -v $tool >/dev/null || skip "$tool is not installed and prepare.sh did not install it"
done
rootfs_done=$(date +%s.%N)

# The image's own files, as the Containerfile's COPY puts them.
install -m 0755 "$bins/cordon" "$bins/cordon-serve" "$rootfs/usr/local/bin/"
install -D -m 0755 "$here/guest.py" "$rootfs/opt/cordon-cell/guest.py"

# What this kind of machine needs before podman works, each detected:
# - crun refuses a hybrid host whose cgroup v2 mount has controllers of its
#   own ("cgroups in hybrid mode not supported, drop all controllers from
#   cgroupv2"; here: hugetlb, which no v1 hierarchy holds). Containers do
#   not use v2 on such a host, so podman runs in a mount namespace of its
#   own where that v2 mount's cgroup.controllers reads empty.
# - podman, as root, sets RLIMIT_NOFILE 1048576 and RLIMIT_NPROC 32768 in
#   every container; without CAP_SYS_RESOURCE (this machine is itself
#   sandboxed) raising the hard limit fails ("setrlimit RLIMIT_NPROC:
#   Operation not permitted"): the container gets this shell's limits.
wrap=()
notes=()
unified=/sys/fs/cgroup/unified
if [[ $(stat -fc %T /sys/fs/cgroup 2>/dev/null) == tmpfs &&
  $(stat -fc %T $unified 2>/dev/null) == cgroup2fs && -n $(cat $unified/cgroup.controllers 2>/dev/null) ]]; then
  : >"$cell_dir/empty"
  wrap=(unshare --mount --propagation private sh -c
    'mount --bind "$0" /sys/fs/cgroup/unified/cgroup.controllers && exec "$@"' "$cell_dir/empty")
  notes+=("hybrid host with v2 controllers ($(cat $unified/cgroup.controllers | tr '\n' ' ')): podman runs where $unified/cgroup.controllers reads empty")
fi
ulimits=()
if ! grep -q '^CapEff:.*' /proc/self/status ||
  (($((16#$(awk '/^CapEff/ {print $2}' /proc/self/status) >> 24 & 1)) == 0)); then
  nofile=$(ulimit -Hn)
  nproc=$(ulimit -Hu)
  [[ $nproc == unlimited || $nproc -gt 32768 ]] && nproc=32768
  ulimits=(--ulimit "nofile=$nofile:$nofile" --ulimit "nproc=$nproc:$nproc")
  notes+=("no CAP_SYS_RESOURCE here: containers get nofile=$nofile nproc=$nproc")
fi
# Containers' cgroups go beneath this shell's own (v1 memory, else v2)
# group, so the limits this machine puts on us keep applying to them.
cgroup_parent=()
if [[ $(podman info --format '{{.Host.CgroupManager}}' 2>/dev/null) == cgroupfs ]]; then
  own=$(awk -F: '$2 == "memory" {print $3}' /proc/self/cgroup)
  [[ -n $own ]] || own=$(awk -F: '$1 == "0" {print $3}' /proc/self/cgroup)
  cgroup_parent=(--cgroup-parent "${own%/}/cordon-container-cell")
fi
for n in "${notes[@]}"; do echo "note: $n"; done

# The image mode: prints what it did; returns non-zero on a failure.
image_check() {
  local base=localhost/cordon-cell-base:bookworm image=localhost/cordon-cell:bookworm
  local ctx=$cell_dir/image-context name=cordon-cell-image state=$1 t0 t1 t2 rc=0
  # The build context: the Containerfile and the two binaries where its
  # COPY looks (the repository root would send all of build/ along).
  rm -rf "$ctx"
  mkdir -p "$ctx/build"
  cp "$repo/Containerfile" "$ctx/"
  cp "$bins/cordon" "$bins/cordon-serve" "$ctx/build/"
  podman rm -f "$name" >/dev/null 2>&1 || true
  t0=$(date +%s.%N)
  # debian:bookworm cannot be pulled here: the same debootstrap tree stands
  # in for it (without this cell's own files).
  tar -C "$rootfs" --exclude=./usr/local/bin/cordon --exclude=./usr/local/bin/cordon-serve \
    --exclude=./opt/cordon-cell --exclude=./.cordon-rootfs -c . |
    podman import -q - "$base" >/dev/null || { echo "image: podman import failed"; return 1; }
  t1=$(date +%s.%N)
  # RUN reaches Debian's archive over the host's network: the cell sets up
  # no container network (the containers themselves run --network none).
  "${wrap[@]}" podman build -q --from "$base" --network host "${ulimits[@]}" "${cgroup_parent[@]}" \
    -f "$ctx/Containerfile" -t "$image" "$ctx" || rc=$?
  t2=$(date +%s.%N)
  if ((rc)); then
    echo "image: podman build -f Containerfile --from $base failed (exit $rc)"
  else
    echo "image: imported the base in $(awk "BEGIN {printf \"%.1f\", $t1 - $t0}") s, built the Containerfile in $(awk "BEGIN {printf \"%.1f\", $t2 - $t1}") s"
    # As the Deployment runs it (privileged, read-only, its volumes but the
    # node's id lease directory, which the privileged cell checks), with
    # the image's own ENTRYPOINT and CMD.
    "${wrap[@]}" podman run -d --name "$name" --network none --privileged --read-only \
      --read-only-tmpfs=false --tmpfs /tmp --tmpfs /run/cordon -v "$state:/var/lib/cordon" \
      "${ulimits[@]}" "${cgroup_parent[@]}" "$image" >/dev/null || rc=$?
    ((rc == 0)) && { "${wrap[@]}" podman exec "$name" /usr/bin/python3 -c '
import http.client, json, os, sys, time
deadline = time.monotonic() + 60
while True:
    try:
        token = open("/var/lib/cordon/token").read().strip()
        c = http.client.HTTPConnection("127.0.0.1", 7419, timeout=60)
        c.request("GET", "/v1/health")
        if c.getresponse().status == 200:
            break
    except OSError:
        pass
    if time.monotonic() > deadline:
        sys.exit("image: cordon serve (the image CMD) did not answer /v1/health within 60 s")
    time.sleep(0.1)
print("image: cordon serve answers /v1/health after %.1f s" % (time.monotonic() - deadline + 60))
def call(method, path, body=None):
    c = http.client.HTTPConnection("127.0.0.1", 7419, timeout=120)
    c.request(method, path, body=json.dumps(body) if body else None,
              headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
    r = c.getresponse()
    return r.status, json.loads(r.read() or b"{}")
s, probe = call("GET", "/v1/probe")
enforced = [c["capability"] for c in probe.get("capabilities", []) if c["enforceable"]]
print("image: probe enforces " + ", ".join(enforced))
s, r = call("POST", "/v1/runs", {"shell": "echo image-ok; readlink /proc/self/ns/pid", "limits": {"memory_bytes": 64 << 20}})
ok = s == 200 and r.get("outcome") == "exited" and r.get("stdout", "").startswith("image-ok\n")
print("image: a run with a memory bound: HTTP %d %s %r" % (s, r.get("outcome"), r.get("stdout")))
sys.exit(0 if ok and "network" in enforced and "memory" in enforced else 1)
' || rc=$?; }
    # SIGTERM (the image STOPSIGNAL): cordon tears down and exits 0.
    local t3 stopped
    t3=$(date +%s.%N)
    "${wrap[@]}" podman stop -t 30 "$name" >/dev/null 2>&1 || true
    stopped=$(podman inspect -f '{{.State.ExitCode}}' "$name" 2>/dev/null || echo '?')
    echo "image: stopped in $(awk "BEGIN {printf \"%.1f\", $(date +%s.%N) - $t3}") s, exit status $stopped"
    podman logs "$name" >"$cell_dir/image-serve.log" 2>&1 || true
    [[ $stopped == 0 ]] || rc=1
    "${wrap[@]}" podman rm -f "$name" >/dev/null 2>&1 || true
  fi
  # Nothing kept: the base and the image are ~0.4 GB each in podman's
  # store, and the root filesystem they come from is the cache.
  podman rmi -f "$image" "$base" >/dev/null 2>&1 || true
  rm -rf "$ctx"
  return $rc
}

failed=0
summary=()
for mode in "${modes[@]}"; do
  if [[ $mode == image ]]; then
    state=$cell_dir/state-image
    rm -rf "$state"
    mkdir -p "$state"
    t0=$(date +%s.%N)
    rc=0
    image_check "$state" >"$cell_dir/image.log" 2>&1 || rc=$?
    t1=$(date +%s.%N)
    secs=$(awk "BEGIN {printf \"%.1f\", $t1 - $t0}")
    cat "$cell_dir/image.log"
    if ((rc)); then
      failed=1
      summary+=("image: FAILED (${secs} s)")
      echo "container cell (image): FAILED (${secs} s; log: $cell_dir/image.log, $cell_dir/image-serve.log)"
    else
      summary+=("image: passed (${secs} s)")
    fi
    rm -rf "$state"
    continue
  fi
  state=$cell_dir/state-$mode
  rm -rf "$state"
  mkdir -p "$state"
  # shellcheck disable=SC2206 # word splitting of the extra flags is meant
  flags=(--rm --network none -v "$state:/var/lib/cordon" "${ulimits[@]}" "${cgroup_parent[@]}"
    ${CONTAINER_CELL_FLAGS:-})
  # As the Deployment runs it: privileged, the image read-only, and
  # writable only where the pod has volumes (not podman's own tmpfs on /run
  # and /var/tmp): the state directory, /tmp, /run/cordon; the token a
  # read-only file outside the directories cordon binds into sandboxes.
  # The node's id lease directory (the Deployment's hostPath volume at
  # /run/cordon/ids) stands here as one of the cell's, its lowest id held
  # by this script as a sandbox of the node's own would hold it: the
  # container's sandboxes must lease around it, in that directory.
  ids=$cell_dir/ids-$mode
  held=
  if [[ $mode == privileged ]]; then
    head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$cell_dir/token"
    chmod 0400 "$cell_dir/token"
    rm -rf "$ids"
    mkdir -m 0700 "$ids"
    exec {held}>"$ids/1000000000.lock"
    flock -n "$held"
    flags+=(--privileged --read-only --read-only-tmpfs=false --tmpfs /tmp --tmpfs /run/cordon
      -v "$ids:/run/cordon/ids"
      -v "$cell_dir/token:/run/secrets/cordon/token:ro" -e CORDON_CELL_TOKEN_FILE=/run/secrets/cordon/token)
  fi
  t0=$(date +%s.%N)
  # bash as the container's init: it reaps what the daemon's SIGKILL test
  # orphans, as a pod's pause-less PID 1 (cordon serve itself) would.
  set +e
  # --rootfs is a switch: the root filesystem is the first operand, after
  # every option (":O" mounts an overlay on it, so the cache stays clean).
  "${wrap[@]}" podman run "${flags[@]}" --rootfs "$rootfs:O" /bin/bash -c \
    '/usr/bin/python3 /opt/cordon-cell/guest.py "$0"; exit $?' "$mode" \
    >"$cell_dir/$mode.log" 2>&1
  rc=$?
  set -e
  t1=$(date +%s.%N)
  grep -v '^CELL ' "$cell_dir/$mode.log" | grep -E '^(  |[A-Za-z])' || true
  verdict=$(grep '^verdict: ' "$cell_dir/$mode.log" | tail -1 || true)
  secs=$(awk "BEGIN {printf \"%.1f\", $t1 - $t0}")
  if [[ -n $held ]]; then
    exec {held}>&-
    if [[ ! -e $ids/1000000001.lock ]]; then
      verdict="verdict: FAIL: no sandbox leased an id in the node's directory"
      echo "$verdict (1000000000 held by the node; there: $(ls "$ids" | tr '\n' ' '))"
    else
      echo "id leases in the node's directory: $(ls "$ids" | tr '\n' ' ')(1000000000 held by the node)"
    fi
  fi
  if ((rc != 0)) || [[ $verdict != "verdict: PASS"* ]]; then
    failed=1
    echo "container cell ($mode): FAILED (exit $rc, ${secs} s; log: $cell_dir/$mode.log)"
    tail -20 "$cell_dir/$mode.log" | grep -v '^CELL ' | sed 's/^/  | /'
    summary+=("$mode: FAILED (${secs} s)")
  else
    summary+=("$mode: passed (${secs} s)")
  fi
  cp "$state/cell-serve.log" "$cell_dir/$mode-serve.log" 2>/dev/null || true
  rm -rf "$state" "$cell_dir/token" "$ids"
done

# podman leaves the (empty) parent groups it made: remove them, and
# nothing that still holds a process (rmdir refuses those).
if ((${#cgroup_parent[@]})); then
  for h in /sys/fs/cgroup/*/; do
    [[ -d $h${cgroup_parent[1]#/} ]] &&
      find "$h${cgroup_parent[1]#/}" -depth -type d -exec rmdir {} \; 2>/dev/null || true
  done
fi
end=$(date +%s.%N)
echo "container cell: ${summary[*]}; waited ${waited} s for a preparation under way, root filesystem ready after $(awk "BEGIN {printf \"%.1f\", $rootfs_done - $start}") s; total $(awk "BEGIN {printf \"%.1f\", $end - $start}") s"
if ((failed)); then
  echo "container cell: FAILED"
  exit 1
fi
echo "container cell: PASSED"
