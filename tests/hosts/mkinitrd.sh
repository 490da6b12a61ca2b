#!/usr/bin/env bash
# mkinitrd.sh KERNEL_DIR OUT
#
# Builds the cells' initramfs for the kernel fetch-kernel.sh extracted into
# KERNEL_DIR (KERNEL_DIR/release, KERNEL_DIR/root/lib/modules/RELEASE): the
# host's busybox-static, tests/hosts/init, and the modules the guest needs
# (virtio over PCI, 9p over virtio, overlay, loop, ext4 and its quota
# formats, and virtio-rng: without an entropy source a TCG guest blocks in
# getrandom() for seconds) with every module they depend on. The kernel packages ship no
# modules.dep and this host has no depmod, so dependencies are read from
# each module's own .modinfo "depends=" field; .ko.xz / .ko.zst files (6.12)
# are decompressed, since busybox's insmod takes plain ELF. A module the
# kernel has built in, or that this version does not have (netfs before
# 5.17, virtio_pci_*_dev before 5.14), is simply not listed. The init loads
# the list in dependency order, in a few passes, as the kit did.
#
# OUT is a gzip'd newc cpio. Rebuilt only when an input is newer.
set -euo pipefail

kdir=${1:?usage: mkinitrd.sh KERNEL_DIR OUT}
out=${2:?usage: mkinitrd.sh KERNEL_DIR OUT}
here=$(cd "$(dirname "$0")" && pwd)
release=$(cat "$kdir/release")
moddir=$kdir/root/lib/modules/$release
busybox=/bin/busybox
[[ -x $busybox ]] || busybox=/usr/bin/busybox
if ! file -L "$busybox" 2>/dev/null | grep -q 'statically linked' &&
  ! ldd "$busybox" 2>&1 | grep -q 'not a dynamic'; then
  echo "mkinitrd: $busybox is not static: install busybox-static" >&2
  exit 1
fi

if [[ -s $out && $out -nt $here/init && $out -nt $here/mkinitrd.sh && $out -nt $kdir/release ]]; then
  exit 0
fi

stage=$(mktemp -d "${TMPDIR:-/tmp}/cordon-initrd.XXXXXX")
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage"/{bin,dev,proc,sys,mnt,newroot,mods}
cp "$busybox" "$stage/bin/busybox"
cp "$here/init" "$stage/init"
chmod 755 "$stage/init"

/usr/bin/python3 - "$moddir" "$stage/mods" <<'EOF'
import lzma, os, re, sys
moddir, dest = sys.argv[1], sys.argv[2]
wanted = ["virtio_pci", "9pnet_virtio", "9p", "overlay", "loop", "ext4",
          "quota_v2", "quota_tree", "crc32c_generic", "virtio_rng"]
files = {}
for root, _, names in os.walk(os.path.join(moddir, "kernel")):
    for n in names:
        m = re.match(r"(.+)\.ko(\.xz|\.zst|\.gz)?$", n)
        if m:
            files[m.group(1).replace("-", "_")] = os.path.join(root, n)
def load(name):
    path = files[name]
    data = open(path, "rb").read()
    if path.endswith(".xz"):
        data = lzma.decompress(data)
    elif path.endswith(".zst"):
        import subprocess
        data = subprocess.run(["zstd", "-dc", path], check=True, capture_output=True).stdout
    elif path.endswith(".gz"):
        import gzip
        data = gzip.decompress(data)
    return data
order, seen = [], set()
def visit(name):
    if name in seen or name not in files:
        return  # built in, or absent in this version
    seen.add(name)
    data = load(name)
    m = re.search(rb"depends=([^\0]*)\0", data)
    for dep in (m.group(1).decode().split(",") if m and m.group(1) else []):
        visit(dep.replace("-", "_"))
    with open(os.path.join(dest, name + ".ko"), "wb") as f:
        f.write(data)
    order.append(name)
for w in wanted:
    visit(w)
with open(os.path.join(dest, "order"), "w") as f:
    f.write("\n".join(order) + "\n")
EOF

mkdir -p "$(dirname "$out")"
(cd "$stage" && find . | "$busybox" cpio -o -H newc 2>/dev/null | gzip -1) >"$out.tmp"
mv "$out.tmp" "$out"
