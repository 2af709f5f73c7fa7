#!/usr/bin/env bash
# Prints the path of a cached tarball of a Debian 12 (bookworm) root tree,
# building it first when missing, from Debian's packages alone (no image
# registry is needed):
#   debian-tree.sh minbase   debootstrap --variant=minbase (the container image's base)
#   debian-tree.sh systemd   minbase + systemd, systemd-sysv, dbus, nftables and Debian's nodejs (18;
#                            booted with systemd-nspawn)
#   debian-tree.sh minbase-arm64   minbase for arm64, unpacked only (debootstrap --foreign: no
#                            maintainer script ran, which would need an arm64 CPU or binfmt_misc):
#                            the libraries are there, which is all an image that runs no command
#                            at build time (deploy/container/Dockerfile) takes from its base
# The cache (NFKEEPER_CACHE, default /var/cache/nfkeeper-test) is outside the
# repository and keyed by what goes into the tree, so a second run costs nothing.
# Needs root (debootstrap, chroot).
set -euo pipefail

kind=${1:?usage: debian-tree.sh minbase|systemd}
suite=bookworm
cache=${NFKEEPER_CACHE:-/var/cache/nfkeeper-test}
# The machine's own mirror (deb822 or one-line sources), else Debian's CDN.
mirror=${NFKEEPER_MIRROR:-$(grep -hoE '^(URIs:|deb) +https?://[^ ]*/debian/?( |$)' /etc/apt/sources.list /etc/apt/sources.list.d/* 2>/dev/null \
  | head -1 | awk '{print $2}' || true)}
mirror=${mirror:-http://deb.debian.org/debian}

case $kind in
  minbase|minbase-arm64) extra= ;;
  systemd) extra="systemd systemd-sysv dbus nftables nodejs" ;;
  *) echo "debian-tree.sh: unknown tree '$kind' (minbase, minbase-arm64 or systemd)" >&2; exit 2 ;;
esac
key=$(printf '%s\n' 2 "$suite" "$mirror" "$extra" | sha256sum | cut -c1-12)
out=$cache/$suite-$kind-$key.tar
if [ -s "$out" ]; then echo "$out"; exit 0; fi

command -v debootstrap >/dev/null || { echo "debian-tree.sh: debootstrap is not installed (apt-get install debootstrap)" >&2; exit 3; }
mkdir -p "$cache"
work=$(mktemp -d "$cache/build.XXXXXX")
trap 'rm -rf "$work"' EXIT

base=$cache/$suite-minbase-$(printf '%s\n' 2 "$suite" "$mirror" "" | sha256sum | cut -c1-12).tar
if [ "$kind" = systemd ] && [ ! -s "$base" ]; then "$0" minbase >/dev/null; fi

tree=$work/tree
mkdir -p "$tree"
if [ "$kind" = minbase ]; then
  echo "debian-tree.sh: debootstrap --variant=minbase $suite from $mirror (about a minute)" >&2
  debootstrap --variant=minbase "$suite" "$tree" "$mirror" >"$work/log" 2>&1 \
    || { tail -20 "$work/log" >&2; echo "debian-tree.sh: debootstrap failed" >&2; exit 3; }
elif [ "$kind" = minbase-arm64 ]; then
  echo "debian-tree.sh: debootstrap --foreign --arch arm64 --variant=minbase $suite from $mirror (about a minute)" >&2
  debootstrap --foreign --arch arm64 --variant=minbase "$suite" "$tree" "$mirror" >"$work/log" 2>&1 \
    || { tail -20 "$work/log" >&2; echo "debian-tree.sh: debootstrap failed" >&2; exit 3; }
  rm -rf "$tree/debootstrap"
else
  tar -C "$tree" -xf "$base"
  echo "debian-tree.sh: installing $extra into the tree" >&2
  chroot "$tree" /bin/sh -c "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $extra" \
    >"$work/log" 2>&1 || { tail -20 "$work/log" >&2; echo "debian-tree.sh: apt-get in the tree failed" >&2; exit 3; }
fi
# Downloaded .debs and package lists are not part of the tree.
rm -rf "$tree"/var/cache/apt/archives/*.deb "$tree"/var/lib/apt/lists/*
tar -C "$tree" --numeric-owner -cf "$work/tree.tar" .
mv "$work/tree.tar" "$out"
# Older trees of this kind (other keys) are not used any more.
find "$cache" -maxdepth 1 -name "$suite-$kind-*.tar" ! -path "$out" -delete
echo "$out"
