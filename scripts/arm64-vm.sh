#!/usr/bin/env bash
# Boots Debian's arm64 kernel under qemu-system-aarch64 (emulated, no KVM needed) with an
# initramfs holding busybox, the arm64 Node 24, an unpacked npm package of nfkeeper and a work
# directory, runs the work directory's run.sh there as root, and powers off. The console goes
# to stdout; its last line is "=== exit N", run.sh's exit status. What qemu-user cannot do
# (it refuses NETLINK_NETFILTER sockets), this does: nf_tables is the arm64 kernel's own.
#   bash scripts/arm64-vm.sh PACKAGE_DIR WORK_DIR
# PACKAGE_DIR is the package as npm unpacks it (bin/, dist/, prebuilds/ ...), seen at
# /opt/package; WORK_DIR at /opt/work. Needs qemu-system-arm, qemu-user (to run depmod once)
# and cpio (scripts/setup.sh --test).
set -euo pipefail
cd "$(dirname "$0")/.."
pkg=$(realpath "${1:?usage: scripts/arm64-vm.sh PACKAGE_DIR WORK_DIR}")
work=$(realpath "${2:?usage: scripts/arm64-vm.sh PACKAGE_DIR WORK_DIR}")
[ -f "$work/run.sh" ] || { echo "arm64-vm.sh: $work/run.sh is missing" >&2; exit 2; }

debs=$(bash scripts/sysroot.sh arm64 vm)
node_dir=$(bash scripts/node.sh 24 arm64)
kernel=$(ls "$debs"/boot/vmlinuz-* | head -1)
version=${kernel##*/vmlinuz-}
# A newc archive (what the kernel unpacks as an initramfs) of the tree at $1, gzipped, on stdout.
archive() { (cd "$1" && find . | cpio -o -H newc --quiet | gzip -1); }

# The part every boot shares, built once: busybox, the C library, Node, the netfilter modules.
base=$PWD/.cache/sysroot/arm64-vm-base-$version-$(basename "$node_dir").cpio.gz
if [ ! -f "$base" ]; then
  root=$(mktemp -d /tmp/nfk-arm64-base.XXXXXX)
  trap 'rm -rf "$root"' EXIT
  mkdir -p "$root"/{bin,sbin,lib,proc,sys,dev,tmp,run,opt} "$root/lib/modules/$version/kernel"
  cp "$debs/bin/busybox" "$root/bin/"
  cp "$node_dir/bin/node" "$root/bin/"
  for l in ld-linux-aarch64.so.1 libc.so.6 libm.so.6 libstdc++.so.6 libgcc_s.so.1 libdl.so.2 libpthread.so.0; do
    cp -L "/usr/aarch64-linux-gnu/lib/$l" "$root/lib/"
  done
  # nf_tables and what it loads (conntrack, NAT, libcrc32c): net/, lib/ and crypto/ of the tree.
  for d in net lib crypto; do cp -a "$debs/lib/modules/$version/kernel/$d" "$root/lib/modules/$version/kernel/"; done
  cp "$debs/lib/modules/$version"/modules.{order,builtin,builtin.modinfo} "$root/lib/modules/$version/"
  # busybox's depmod, run by qemu-user: the machine needs no kmod for arm64 modules.
  qemu-aarch64 "$root/bin/busybox" depmod -b "$root" "$version"
  cat > "$root/init" <<'EOF'
#!/bin/busybox sh
/bin/busybox --install -s /bin
ln -s /bin/modprobe /sbin/modprobe
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp
mount -t tmpfs run /run
echo /sbin/modprobe > /proc/sys/kernel/modprobe
modprobe nf_tables
ip link set lo up
export HOME=/tmp PATH=/bin:/sbin
echo "=== arch $(uname -m) $(uname -r) node $(node -p 'process.arch + " " + process.version')"
cd /opt/work && sh ./run.sh
echo "=== exit $?"
poweroff -f
EOF
  chmod +x "$root/init"
  archive "$root" > "$base.tmp"
  mv "$base.tmp" "$base"
  rm -rf "$root"
  trap - EXIT
fi

# This boot's part: the package and the work directory, a second archive the kernel unpacks on top.
initrd=$(mktemp /tmp/nfk-arm64-initrd.XXXXXX)
stage=$(mktemp -d /tmp/nfk-arm64-run.XXXXXX)
trap 'rm -rf "$initrd" "$stage"' EXIT
mkdir -p "$stage/opt"
cp -a "$pkg" "$stage/opt/package"
cp -a "$work" "$stage/opt/work"
cat "$base" > "$initrd"
archive "$stage" >> "$initrd"

timeout 1200 qemu-system-aarch64 -M virt -cpu cortex-a57 -smp 2 -m 2048 -nographic -no-reboot -nic none \
  -kernel "$kernel" -initrd "$initrd" -append "console=ttyAMA0 rdinit=/init quiet panic=-1"
