#!/usr/bin/env bash
# Makes (once) the container cell's root filesystem: Debian 12 from Debian's
# archive by debootstrap, with what cordon needs at run time, the same
# packages the Containerfile installs. Cached in $1 (default
# build/hosts/container/rootfs) and never committed; it is made again when
# the package list below changes. cordon's binaries are not part of the
# cache: run.sh copies the current build in before every run.
#
# The new tree is made beside the old one ($1.new) and renamed into place
# only when it is complete (its stamp file written last, inside it), so an
# interrupted or failed run never leaves a partial tree where run.sh looks;
# debootstrap's own mounts (proc, sys, a bind of /dev) are made in a mount
# namespace of its own, so they vanish with it even when it is killed, and
# the next run's `rm -rf` of a leftover tree cannot reach the host's /dev.
# Callers serialize through prepare.sh's lock (FRESH=1: make it again even
# when the cache is current).
#
# Prints "rootfs: <dir> (cached|made in N s)" on success. Exits 3 with
# "SKIPPED: <reason>" on stdout when it cannot be had (no debootstrap, not
# root, the archive unreachable), so run.sh can report the cell skipped.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
rootfs=${1:-$repo/build/hosts/container/rootfs}

# The run-time packages: the same list as the Containerfile's apt-get line.
#   libzmq5           cordon-serve's one shared library outside libc/libstdc++
#                     (cordon itself is static)
#   python3-ipykernel python sessions and the Kernel Gateway's kernels
#                     (/usr/bin/python3 -m ipykernel_launcher)
#   e2fsprogs         mkfs.ext4, for the loop-image workspaces that bound disk
#   bash              shell sessions run /bin/bash
#   procps            ps/pkill-free inspection by operators (kept small)
BASE="libzmq5,e2fsprogs,bash,procps"
# python3-ipykernel goes in by apt-get in the finished system: debootstrap's
# own second stage configures --include'd python packages out of order
# (python3-zmq's postinst fails before python3 is configured).
EXTRA="python3-ipykernel"
SUITE=bookworm

skip() {
  echo "SKIPPED: $*"
  exit 3
}

# The host's own Debian mirror (deb822 or one-line sources), else Debian's.
mirror() {
  local uri
  uri=$(grep -hsE '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null |
    awk '{print $2}' | grep -v security | head -1 || true)
  if [[ -z $uri ]]; then
    uri=$(grep -hsE '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
      awk '{for (i = 2; i <= NF; i++) if ($i ~ /^https?:/) {print $i; exit}}' |
      grep -v security | head -1 || true)
  fi
  echo "${uri:-http://deb.debian.org/debian}"
}

stamp="$rootfs/.cordon-rootfs"
want="suite=$SUITE packages=$BASE,$EXTRA"
if [[ ${FRESH:-0} != 1 && -f $stamp && $(cat "$stamp") == "$want" ]]; then
  # What an interrupted run left beside it (see above) goes now.
  rm -rf --one-file-system "$rootfs.new" "$rootfs.old"
  echo "rootfs: $rootfs (cached)"
  exit 0
fi

[[ $(id -u) -eq 0 ]] || skip "debootstrap needs root"
command -v debootstrap >/dev/null ||
  skip "debootstrap is not installed (scripts/install-deps.sh debootstrap)"

url=$(mirror)
start=$(date +%s)
tmp="$rootfs.new"
rm -rf --one-file-system "$tmp" "$rootfs.old"
mkdir -p "$(dirname "$rootfs")"
# minbase: dpkg, apt and the Essential set; the run-time packages on top.
# Twice: a download from the archive was once seen to end debootstrap
# without a message; a second try starts from a clean tree.
: >"$rootfs.log"
for attempt in 1 2; do
  rm -rf --one-file-system "$tmp"
  status=0
  unshare --mount --propagation private debootstrap --variant=minbase --include="$BASE" "$SUITE" "$tmp" "$url" \
    >>"$rootfs.log" 2>&1 || status=$?
  ((status == 0)) && break
  echo "debootstrap attempt $attempt exited with status $status" >>"$rootfs.log"
  if ((attempt == 2)); then
    tail -5 "$rootfs.log" >&2
    skip "debootstrap $SUITE from $url failed twice, last with status $status (log: $rootfs.log; partial tree: $tmp)"
  fi
done
# The host's apt sources (its mirror, with bookworm-updates and -security),
# so the image gets the same fixes as the host. In a mount namespace of its
# own, so /proc is unmounted with it.
cp -a /etc/apt/sources.list* "$tmp/etc/apt/" 2>/dev/null || true
if ! unshare --mount --propagation private sh -c '
    mount -t proc proc "$1/proc" &&
    chroot "$1" apt-get update -q &&
    DEBIAN_FRONTEND=noninteractive chroot "$1" apt-get install -y -q \
      --no-install-recommends $2' sh "$tmp" "${EXTRA//,/ }" >>"$rootfs.log" 2>&1; then
  tail -5 "$rootfs.log" >&2
  skip "apt-get install $EXTRA in the new root failed (log: $rootfs.log)"
fi
chroot "$tmp" apt-get clean
# Package caches are not part of an image.
rm -rf "$tmp"/var/lib/apt/lists/*
echo "$want" >"$tmp/.cordon-rootfs"
# The old tree (stale, or --fresh) is replaced only now.
[[ -e $rootfs ]] && mv "$rootfs" "$rootfs.old"
mv "$tmp" "$rootfs"
rm -rf --one-file-system "$rootfs.old"
echo "rootfs: $rootfs (made in $(($(date +%s) - start)) s from $url)"
