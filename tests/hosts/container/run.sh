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
#   privileged  --privileged with a read-only root filesystem, as the
#               Deployment runs it: every isolation claim must hold.
# In each, guest.py compares the daemon's probe with observed effects and
# prints a claim-vs-observed table; this script prints both and a verdict.
#
#   tests/hosts/container/run.sh [--fresh] [default|privileged ...]
# --fresh makes the root filesystem again. Exit status: 0 all checks
# passed; 1 a check failed; 0 with "SKIPPED: reason" when podman, crun or
# the root filesystem cannot be had (the reason says which).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
build=${BUILD:-$repo/build}
[[ $build == /* ]] || build=$repo/$build
cell_dir=$build/hosts/container
rootfs=$cell_dir/rootfs

fresh=0
modes=()
for a in "$@"; do
  case $a in
    --fresh) fresh=1 ;;
    default | privileged) modes+=("$a") ;;
    *) echo "run.sh: unknown argument '$a' (--fresh, default, privileged)" >&2; exit 2 ;;
  esac
done
((${#modes[@]})) || modes=(default privileged)

skip() {
  echo "container cell: SKIPPED: $*"
  exit 0
}

start=$(date +%s.%N)
[[ $(id -u) -eq 0 ]] || skip "needs root (podman as root, debootstrap)"
for tool in podman crun; do
  command -v $tool >/dev/null ||
    skip "$tool is not installed (scripts/install-deps.sh podman crun debootstrap)"
done
for bin in cordon cordon-serve; do
  [[ -x $build/$bin ]] || skip "$build/$bin is missing (make build)"
done

((fresh)) && rm -rf "$rootfs"
set +e
made=$("$here/rootfs.sh" "$rootfs")
status=$?
set -e
echo "$made"
if ((status == 3)); then skip "${made#SKIPPED: }"; fi
((status == 0)) || { echo "container cell: FAILED: rootfs.sh exited $status"; exit 1; }
rootfs_done=$(date +%s.%N)

# The image's own files, as the Containerfile's COPY puts them.
install -m 0755 "$build/cordon" "$build/cordon-serve" "$rootfs/usr/local/bin/"
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

failed=0
summary=()
for mode in "${modes[@]}"; do
  state=$cell_dir/state-$mode
  rm -rf "$state"
  mkdir -p "$state"
  flags=(--rm --network none -v "$state:/var/lib/cordon" "${ulimits[@]}" "${cgroup_parent[@]}")
  # As the Deployment runs it: privileged, the image read-only (podman
  # puts tmpfs on /tmp and /run), the state directory a volume.
  [[ $mode == privileged ]] && flags+=(--privileged --read-only)
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
  if ((rc != 0)) || [[ $verdict != "verdict: PASS"* ]]; then
    failed=1
    echo "container cell ($mode): FAILED (exit $rc, ${secs} s; log: $cell_dir/$mode.log)"
    tail -20 "$cell_dir/$mode.log" | grep -v '^CELL ' | sed 's/^/  | /'
    summary+=("$mode: FAILED (${secs} s)")
  else
    summary+=("$mode: passed (${secs} s)")
  fi
  cp "$state/cell-serve.log" "$cell_dir/$mode-serve.log" 2>/dev/null || true
  rm -rf "$state"
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
echo "container cell: ${summary[*]}; root filesystem $(awk "BEGIN {printf \"%.1f\", $rootfs_done - $start}") s; total $(awk "BEGIN {printf \"%.1f\", $end - $start}") s"
if ((failed)); then
  echo "container cell: FAILED"
  exit 1
fi
echo "container cell: PASSED"
