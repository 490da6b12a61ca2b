#!/usr/bin/env bash
# Prepares the container cell: Debian's podman, crun and debootstrap
# (installed where missing) and the cell's root filesystem (rootfs.sh,
# cached in build/hosts/container/rootfs). On a fresh machine that takes
# ~4 minutes, nearly all of it downloads and dpkg, so `make test` starts it
# in the background before ctest (which is CPU-bound) and the cell
# (run.sh) waits for it; with the cache warm it takes a fraction of a
# second.
#
#   prepare.sh [--fresh]               prepare now, in the foreground
#   prepare.sh --background [--fresh]  start it detached (nice, idle I/O
#                                      class) and return at once; nothing
#                                      to do if one is already under way
#
# --fresh makes the root filesystem again (the cached one stays usable
# until the new one is complete). Files in build/hosts/container/:
#   prepare.lock    held (flock) by whoever prepares, and by run.sh for as
#                   long as it uses the root filesystem: starts queue
#                   behind each other instead of colliding;
#   prepare.log     what the last preparation did;
#   prepare.status  one line: "running PID", "ok: ...", "skipped: REASON"
#                   (the tools or the archive cannot be had) or "failed:
#                   REASON" (anything else), as run.sh reports it.
# Exit status of the foreground form: 0 ready, 3 skipped ("SKIPPED:
# reason" on stdout), 1 failed. The background form always exits 0.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
build=${BUILD:-$repo/build}
[[ $build == /* ]] || build=$repo/$build
cell_dir=$build/hosts/container
rootfs=$cell_dir/rootfs
lock=$cell_dir/prepare.lock
status_file=$cell_dir/prepare.status
PACKAGES=(podman crun debootstrap)
# apt-get waits this long for another apt or dpkg to finish.
APT_WAIT=${CONTAINER_APT_WAIT:-600}

background=0
locked=0
fresh=0
for a in "$@"; do
  case $a in
    --background) background=1 ;;
    --fresh) fresh=1 ;;
    --locked) locked=1 ;; # internal: the caller holds $lock on fd 9
    *) echo "prepare.sh: unknown argument '$a' (--background, --fresh)" >&2; exit 2 ;;
  esac
done

mkdir -p "$cell_dir"
set_status() { echo "$*" >"$status_file.tmp" && mv "$status_file.tmp" "$status_file"; }

if ((background)); then
  if [[ $(id -u) -ne 0 ]]; then
    set_status "skipped: needs root (podman as root, debootstrap)"
    exit 0
  fi
  exec 9>"$lock"
  if ! flock -n 9; then
    echo "container cell: preparation already under way (log: $cell_dir/prepare.log)"
    exit 0
  fi
  set_status "running (background, started $(date -u +%H:%M:%S))"
  # The child inherits fd 9, and with it the lock, for as long as it runs;
  # setsid: a Ctrl-C of make does not leave it half-way (it finishes the
  # cache, or its temporary tree is discarded by the next start).
  again=()
  ((fresh)) && again=(--fresh)
  setsid nice -n 19 ionice -c 3 "$0" --locked "${again[@]}" \
    </dev/null >"$cell_dir/prepare.log" 2>&1 &
  echo "container cell: preparing in the background (pid $!, log: $cell_dir/prepare.log)"
  exit 0
fi

if ((!locked)); then
  exec 9>"$lock"
  flock 9
  exec > >(tee "$cell_dir/prepare.log") 2>&1
fi
set_status "running $$"
start=$(date +%s.%N)

skip() {
  set_status "skipped: $*"
  echo "SKIPPED: $*"
  exit 3
}
fail() {
  set_status "failed: $*"
  echo "FAILED: $*"
  exit 1
}
trap 'fail "prepare.sh stopped at line $LINENO (log: $cell_dir/prepare.log)"' ERR

[[ $(id -u) -eq 0 ]] || skip "needs root (podman as root, debootstrap)"

# scripts/install-deps.sh takes turns with the other installs of `make
# test` and waits for an apt it did not start.
if ! APT_WAIT=$APT_WAIT "$repo/scripts/install-deps.sh" "${PACKAGES[@]}"; then
  skip "installing ${PACKAGES[*]} from Debian's archive failed (log: $cell_dir/prepare.log)"
fi

set +e
made=$(FRESH=$fresh "$here/rootfs.sh" "$rootfs")
rc=$?
set -e
echo "$made"
((rc == 3)) && skip "$(grep -m1 '^SKIPPED: ' <<<"$made" | sed 's/^SKIPPED: //')"
((rc == 0)) || fail "rootfs.sh exited $rc (log: $rootfs.log)"
secs=$(awk "BEGIN {printf \"%.1f\", $(date +%s.%N) - $start}")
trap - ERR
set_status "ok: ${made#rootfs: } ($secs s in all)"
echo "container cell: prepared in $secs s"
