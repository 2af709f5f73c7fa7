#!/usr/bin/env bash
# Installs whatever is missing for nfkeeper on Debian/Ubuntu, as root: the
# system packages, the npm dependencies, the native addon and the TypeScript
# build. Safe to run any number of times; a second run does almost nothing.
#
#   bash scripts/setup.sh          what building and running nfkeeper (and its demo) needs
#   bash scripts/setup.sh --test   that, and what only the test suite needs (scripts/test.sh)
set -euo pipefail
cd "$(dirname "$0")/.."

with_test=false
for a in "$@"; do
  case "$a" in
    --test) with_test=true ;;
    *) echo "nfkeeper setup: unknown option '$a' (only --test)" >&2; exit 2 ;;
  esac
done

if [ "$(id -u)" != 0 ]; then
  echo "nfkeeper setup: run as root (it installs packages and its tests create network namespaces)" >&2
  exit 2
fi

# The addon's build (libnftnl, libmnl, pkg-config, a C++ compiler) and what the demo runs (nft, ip).
packages=(libnftnl-dev libmnl-dev pkg-config nftables iproute2 make g++ python3)
if $with_test; then
  # Only the tests need these:
  # iptables (iptables-nft and -legacy) write the foreign rules GC and the peers tests read;
  # clang-14 and libclang-rt-14-dev (libFuzzer and the sanitizer runtimes) are for the fuzz smoke
  # test, test/reliability/fuzz.test.ts (scripts/fuzz.sh), and scripts/sanitize.sh;
  # podman, runc, debootstrap and systemd-container (systemd-nspawn) are for the container image
  # and booted-systemd tests (test/image.test.ts, test/systemd-boot.test.ts);
  # containernetworking-plugins (/usr/lib/cni) write the CNI rules foreign GC is tested against
  # (test/gc/cni.test.ts, driven by test/helpers/cni.ts, and test/deploy/nomad.test.ts); qemu-user runs foreign-architecture binaries; zsh and fish load
  # the completion scripts (test/cli/usability.test.ts; bash is there already); the linux-arm64
  # prebuild (scripts/prebuild.mjs --arch arm64, run by npm pack) and its smoke under qemu-user
  # (test/arm64.test.ts) need the cross compiler (the arm64 libnftnl/libmnl come from
  # scripts/sysroot.sh); qemu-system-arm and cpio boot Debian's arm64 kernel for apply, check and a
  # repair on arm64 (scripts/arm64-vm.sh).
  packages+=(iptables clang-14 libclang-rt-14-dev podman runc debootstrap systemd-container
    containernetworking-plugins qemu-user qemu-system-arm cpio zsh fish g++-aarch64-linux-gnu)
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "nfkeeper setup: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# promtool checks deploy/prometheus/alerts.yaml and a live daemon's /metrics (test/docs/metrics.test.ts):
# taken out of Debian's prometheus package, not installed from it (that would add and start a
# Prometheus server).
if $with_test && ! command -v promtool >/dev/null; then
  echo "nfkeeper setup: unpacking promtool from Debian's prometheus package"
  tmp=$(mktemp -d)
  (cd "$tmp" && apt-get download -qq prometheus >/dev/null 2>&1 || { apt-get update -qq && apt-get download -qq prometheus >/dev/null; }
   dpkg-deb -x prometheus_*.deb x && install -m 0755 x/usr/bin/promtool /usr/local/bin/promtool) || echo "nfkeeper setup: no promtool; the alert rules get the structural check only" >&2
  rm -rf "$tmp"
fi

# npm ci only when the lock file changed since the last install (it also builds the addon).
stamp=node_modules/.nfkeeper-lock
lock_sum=$(sha256sum package-lock.json | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$lock_sum" ]; then
  npm ci --no-audit --no-fund
  echo "$lock_sum" > "$stamp"
fi
node scripts/build-native.mjs
npx tsc -p tsconfig.build.json
node scripts/bundle.mjs
