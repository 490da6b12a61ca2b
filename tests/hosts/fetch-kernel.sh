#!/usr/bin/env bash
# fetch-kernel.sh SUITE CACHE_DIR
#
# Downloads the amd64 kernel of a Debian suite (bullseye: 5.10, bookworm:
# 6.1, trixie: 6.12) from Debian's archive with apt-get, through a private
# apt configuration of its own (sources list, state and cache under
# CACHE_DIR/apt-SUITE), so the host's apt setup is never read for sources
# nor changed. Then extracts the package (dpkg-deb -x) into
# CACHE_DIR/SUITE/root and writes CACHE_DIR/SUITE/vmlinuz and
# CACHE_DIR/SUITE/release (the kernel release, e.g. 6.1.0-57-amd64).
#
# The result is cached: a second call with a complete CACHE_DIR/SUITE does
# nothing. Exit 0 when the kernel is there; otherwise exit 3 with one line
# "SKIP: <reason>" on stdout (no network, suite or package missing), so the
# cell is reported skipped, never passed.
#
# The mirror is the host's own (the first deb.debian.org-style URI of
# /etc/apt/sources.list*), or $CORDON_DEBIAN_MIRROR.
set -uo pipefail

suite=${1:?usage: fetch-kernel.sh SUITE CACHE_DIR}
cache=${2:?usage: fetch-kernel.sh SUITE CACHE_DIR}
mkdir -p "$cache"
cache=$(cd "$cache" && pwd)
out=$cache/$suite

skip() {
  echo "SKIP: $*"
  exit 3
}

if [[ -s $out/vmlinuz && -s $out/release && -d $out/root/lib/modules ]]; then
  exit 0
fi

case $suite in
  bullseye | bookworm | trixie) ;;
  *) skip "unknown suite '$suite' (bullseye, bookworm or trixie)" ;;
esac

# The host's mirror: the one its sources name for Debian itself.
mirror=${CORDON_DEBIAN_MIRROR:-}
if [[ -z $mirror ]]; then
  mirror=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
    /etc/apt/sources.list.d/*.sources 2>/dev/null |
    grep -oE 'https?://[^ ]+/debian/?( |$)' | grep -v security | head -1 | tr -d ' ')
fi
mirror=${mirror:-http://deb.debian.org/debian}
mirror=${mirror%/}

keyring=/usr/share/keyrings/debian-archive-keyring.gpg
[[ -r $keyring ]] || skip "no Debian archive keyring at $keyring (install debian-archive-keyring)"

apt_dir=$cache/apt-$suite
mkdir -p "$apt_dir/etc/sources.list.d" "$apt_dir/etc/preferences.d" \
  "$apt_dir/state/lists/partial" "$apt_dir/cache/archives/partial"
: >"$apt_dir/state/status"
cat >"$apt_dir/etc/sources.list" <<EOF
deb [signed-by=$keyring] $mirror $suite main
EOF
apt_opts=(
  -o "Dir::Etc::SourceList=$apt_dir/etc/sources.list"
  -o "Dir::Etc::SourceParts=$apt_dir/etc/sources.list.d"
  -o "Dir::Etc::Preferences=$apt_dir/etc/preferences"
  -o "Dir::Etc::PreferencesParts=$apt_dir/etc/preferences.d"
  -o "Dir::State=$apt_dir/state"
  -o "Dir::State::status=$apt_dir/state/status"
  -o "Dir::Cache=$apt_dir/cache"
  -o "APT::Architecture=amd64"
  -o "APT::Architectures=amd64"
  -o "APT::Sandbox::User=root"
  -o "Acquire::Retries=2"
  -o "Acquire::http::Timeout=20"
  -o "Debug::NoLocking=1"
)

if ! apt-get -q "${apt_opts[@]}" update >"$apt_dir/update.log" 2>&1; then
  skip "apt-get update of $mirror $suite failed (no network?): $(grep -E '^(E|W):' "$apt_dir/update.log" | head -1)"
fi
if grep -qE '^(E:|W: Failed)' "$apt_dir/update.log"; then
  skip "apt-get update of $mirror $suite: $(grep -E '^(E|W):' "$apt_dir/update.log" | head -1)"
fi

# linux-image-amd64 is a metapackage; the kernel itself is what it depends
# on (linux-image-6.1.0-57-amd64, linux-image-6.12.x+deb13-amd64, ...).
pkg=$(apt-cache "${apt_opts[@]}" depends linux-image-amd64 2>/dev/null |
  awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
[[ -n $pkg ]] || skip "no linux-image-amd64 dependency found in $suite at $mirror"

work=$apt_dir/download
rm -rf "$work" && mkdir -p "$work"
if ! (cd "$work" && apt-get -q "${apt_opts[@]}" download "$pkg") >"$apt_dir/download.log" 2>&1; then
  skip "apt-get download $pkg from $suite failed: $(grep -E '^(E|W):' "$apt_dir/download.log" | head -1)"
fi
deb=$(ls "$work"/*.deb 2>/dev/null | head -1)
[[ -n $deb ]] || skip "apt-get download $pkg left no .deb"

rm -rf "$out.tmp" && mkdir -p "$out.tmp/root"
dpkg-deb -x "$deb" "$out.tmp/root" || skip "dpkg-deb -x $deb failed"
vmlinuz=$(ls "$out.tmp"/root/boot/vmlinuz-* 2>/dev/null | head -1)
[[ -n $vmlinuz ]] || skip "$pkg has no /boot/vmlinuz-*"
cp "$vmlinuz" "$out.tmp/vmlinuz"
basename "$vmlinuz" | sed 's/^vmlinuz-//' >"$out.tmp/release"
# Only the modules are needed: keep them, drop the rest of the package.
if [[ ! -d $out.tmp/root/lib/modules && -d $out.tmp/root/usr/lib/modules ]]; then
  mkdir -p "$out.tmp/root/lib" && mv "$out.tmp/root/usr/lib/modules" "$out.tmp/root/lib/modules"
fi
[[ -d $out.tmp/root/lib/modules ]] || skip "$pkg has no modules directory"
rm -rf "$out.tmp/root/usr/share" "$out.tmp/root/boot"
# Of the modules, keep the trees mkinitrd.sh draws from (fs, lib, crypto,
# 9p, virtio, block, hw_random): ~100 MB instead of ~400 MB.
for m in "$out.tmp"/root/lib/modules/*/kernel; do
  mkdir -p "$m.keep/drivers/char" "$m.keep/net"
  for d in fs lib crypto arch net/9p drivers/virtio drivers/block drivers/char/hw_random; do
    [[ -e $m/$d ]] && mv "$m/$d" "$m.keep/$d"
  done
  rm -rf "$m" && mv "$m.keep" "$m"
done
echo "$pkg" >"$out.tmp/package"
rm -rf "$out" && mv "$out.tmp" "$out"
rm -rf "$work"
exit 0
