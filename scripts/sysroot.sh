#!/usr/bin/env bash
# Prints the directory of arm64 Debian packages unpacked once under .cache/sysroot/, fetched from
# the machine's own Debian archive. apt reads arm64 package lists of its own under
# .cache/sysroot/apt/, so the machine's dpkg architectures and apt lists stay as they are.
#   bash scripts/sysroot.sh arm64      libnftnl-dev, libmnl-dev, libnftnl11 and libmnl0: what the
#                                      addon is cross-built against (scripts/prebuild.mjs --arch
#                                      arm64). The C library and libstdc++ come with the cross
#                                      compiler (g++-aarch64-linux-gnu, in /usr/aarch64-linux-gnu/),
#                                      which is also the root qemu-aarch64 runs an arm64 Node from.
#   bash scripts/sysroot.sh arm64 vm   Debian's arm64 kernel (linux-image-arm64's current image,
#                                      with its modules) and busybox-static: what scripts/arm64-vm.sh
#                                      boots under qemu-system-aarch64.
set -euo pipefail
cd "$(dirname "$0")/.."
arch=${1:?usage: scripts/sysroot.sh arm64 [vm]}
[ "$arch" = arm64 ] || { echo "sysroot.sh: only arm64 is cross-built" >&2; exit 2; }
what=${2:-}
case "$what" in
  '') packages=(libnftnl-dev libmnl-dev libnftnl11 libmnl0 linux-libc-dev); dir=$PWD/.cache/sysroot/$arch ;;
  vm) packages=(); dir=$PWD/.cache/sysroot/$arch-vm ;;
  *) echo "sysroot.sh: unknown '$what' (only vm)" >&2; exit 2 ;;
esac

if [ ! -f "$dir/done" ]; then
  apt_dir=$PWD/.cache/sysroot/apt
  mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial"
  opts=(-o "APT::Architecture=$arch" -o "APT::Architectures::=$arch" -o "Dir::State::Lists=$apt_dir/lists"
    -o "Dir::Cache=$apt_dir/cache" -o Dir::State::status=/dev/null -o Debug::NoLocking=1 -qq)
  tmp=$(mktemp -d ".cache/sysroot/.fetch-$arch.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  apt-get "${opts[@]}" update
  if [ "$what" = vm ]; then
    # The image the linux-image-arm64 metapackage points at today (apt-get download takes no dependencies).
    image=$(apt-cache "${opts[@]}" depends "linux-image-arm64:$arch" | sed -n 's/^ *Depends: \(linux-image-[^ ]*\)$/\1/p' | head -1)
    [ -n "$image" ] || { echo "sysroot.sh: no linux-image-arm64 in the archive" >&2; exit 1; }
    packages=("$image" busybox-static)
  fi
  echo "sysroot.sh: fetching ${packages[*]} for $arch from $(. /etc/os-release; echo "$PRETTY_NAME")'s archive" >&2
  # apt-get download writes into the current directory; -o APT::Sandbox::User=root because _apt
  # cannot write into .cache/ under a root-owned checkout.
  (cd "$tmp" && apt-get "${opts[@]}" -o APT::Sandbox::User=root download "${packages[@]/%/:$arch}")
  mkdir -p "$tmp/root"
  for deb in "$tmp"/*.deb; do dpkg-deb -x "$deb" "$tmp/root"; done
  rm -rf "$dir"
  mv -T "$tmp/root" "$dir"
  (cd "$dir" && find . -name '*.pc') > "$dir/done"
fi
echo "$dir"
