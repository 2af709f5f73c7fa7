#!/usr/bin/env bash
# Installs whatever is missing for nfkeeper on Debian/Ubuntu, as root: the
# system packages, the npm dependencies, the native addon and the TypeScript
# build. Safe to run any number of times; a second run does almost nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
  echo "nfkeeper setup: run as root (it installs packages and its tests create network namespaces)" >&2
  exit 2
fi

# clang-14 and libclang-rt-14-dev (libFuzzer and the sanitizer runtimes) are for
# the fuzz smoke test, test/reliability/fuzz.test.ts (scripts/fuzz.sh).
# podman, runc, debootstrap and systemd-container (systemd-nspawn) are for the
# container image and booted-systemd tests (test/image.test.ts, test/systemd-boot.test.ts).
# containernetworking-plugins (/usr/lib/cni) writes the CNI rules foreign GC is tested against
# (test/gc/cni.test.ts, driven by test/helpers/cni.ts).
packages=(libnftnl-dev libmnl-dev pkg-config nftables iptables iproute2 make g++ python3 clang-14 libclang-rt-14-dev
  podman runc debootstrap systemd-container containernetworking-plugins)
# The linux-arm64 prebuild (scripts/prebuild.mjs --arch arm64, run by npm pack) and its smoke under
# qemu-user (test/arm64.test.ts); the arm64 libnftnl/libmnl come from scripts/sysroot.sh.
packages+=(g++-aarch64-linux-gnu qemu-user)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "nfkeeper setup: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# promtool checks deploy/prometheus/alerts.yaml (test/docs/metrics.test.ts): taken out of Debian's
# prometheus package, not installed from it (that would add and start a Prometheus server).
if ! command -v promtool >/dev/null; then
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
