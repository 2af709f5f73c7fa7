#!/usr/bin/env bash
# Builds the container image localhost/nfkeeper:<version> with podman from
# Debian's packages and the npm package alone (no image registry):
#   1. base: debootstrap --variant=minbase bookworm (scripts/debian-tree.sh,
#      cached), trimmed, plus Node 24 (the pinned release scripts/node.sh takes
#      from the npm registry, whatever node the build host runs), imported with
#      `podman import`;
#   2. the npm package (scripts/pack.mjs) installed into the build context
#      with npm, using its prebuilt addon: no compiler anywhere in the image;
#   3. podman build -f deploy/container/Dockerfile on that base.
# Prints the image name. Rebuilds only when the package or the base changed
# (the image carries the package's sha256 as a label).
#   --arch arm64    the linux/arm64 image, localhost/nfkeeper:<version>-arm64: the arm64 Node 24
#                   on an arm64 base unpacked by debootstrap --foreign (scripts/debian-tree.sh
#                   minbase-arm64); the Dockerfile runs nothing, so no arm64 CPU is needed to build it
#   --context DIR   only prepare the build context (for docker build elsewhere)
# Needs root, podman, runc and debootstrap (scripts/setup.sh --test installs them).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
cache=${NFKEEPER_CACHE:-/var/cache/nfkeeper-test}
mkdir -p "$cache"

# Podman on machines like this one: crun cannot set podman's default ulimits
# and does not support hybrid cgroups; runc with cgroupfs does.
if [ -z "${CONTAINERS_CONF:-}" ]; then
  printf '[containers]\ndefault_ulimits = []\n' > "$cache/containers.conf"
  export CONTAINERS_CONF=$cache/containers.conf
fi
pm() { podman --runtime runc --cgroup-manager=cgroupfs "$@"; }

context_only=
arch=amd64
case "${1:-}" in
  --context) context_only=${2:?--context DIR} ;;
  --arch) arch=${2:?--arch amd64|arm64} ;;
  '') ;;
  *) echo "image.sh: unknown option '$1' (--arch arm64, --context DIR)" >&2; exit 2 ;;
esac
case "$arch" in
  amd64) node_arch=x64; tree_kind=minbase; tag_suffix= ;;
  arm64) node_arch=arm64; tree_kind=minbase-arm64; tag_suffix=-arm64 ;;
  *) echo "image.sh: --arch amd64 or arm64, not '$arch'" >&2; exit 2 ;;
esac

tarball=$(node scripts/pack.mjs)
version=$(node -p "require('./package.json').version")
image=localhost/nfkeeper:$version$tag_suffix
pkg_sum=$(sha256sum "$tarball" | cut -c1-16)

node_dir=$(bash scripts/node.sh 24 "$node_arch")
node_bin=$node_dir/bin/node
# From the folder's name (.cache/node/<version>-linux-<arch>): an arm64 Node does not run here.
node_version=${node_dir##*/}
node_version=${node_version%-linux-*}

prepare_context() {
  local ctx=$1
  rm -rf "$ctx"
  mkdir -p "$ctx"
  # The package's own install script finds its prebuilt addon and builds nothing;
  # fail if it would have (that would mean a compiler and -dev files).
  log=$(npm install -g --omit=dev --no-audit --no-fund --prefer-offline --foreground-scripts \
    --prefix "$ctx/nfkeeper" "$tarball" 2>&1) || { echo "$log" >&2; exit 1; }
  if grep -q 'building it from source' <<<"$log" || [ -e "$ctx/nfkeeper/lib/node_modules/nfkeeper/build" ]; then
    echo "$log" >&2
    echo "image.sh: the package's prebuilt addon did not fit; the image would need a compiler" >&2
    exit 1
  fi
  # npm's global layout puts a symlink in bin/; keep it (ENTRYPOINT nfkeeper on PATH).
}

if [ -n "$context_only" ]; then
  prepare_context "$context_only"
  echo "$context_only"
  exit 0
fi

command -v podman >/dev/null || { echo "image.sh: podman is not installed (apt-get install podman runc)" >&2; exit 3; }
minbase=$(bash scripts/debian-tree.sh "$tree_kind")
base_key=$( (basename "$minbase"; sha256sum "$node_bin") | sha256sum | cut -c1-12)
base=localhost/nfkeeper-base:bookworm-node$node_version-$arch-$base_key
if ! pm image exists "$base"; then
  echo "image.sh: importing the base $base" >&2
  tree=$(mktemp -d "$cache/base.XXXXXX")
  trap 'rm -rf "$tree"' EXIT
  tar -C "$tree" -xf "$minbase"
  # What a daemon never reads: documentation, manuals, locales, apt's caches.
  rm -rf "$tree"/usr/share/{doc,man,info,locale,lintian} "$tree"/var/cache/apt/* "$tree"/var/lib/apt/lists/* "$tree"/var/log/*
  install -D -m 0755 "$node_bin" "$tree/usr/local/bin/node"
  tar -C "$tree" --numeric-owner -c . | pm import --arch "$arch" - "$base" >/dev/null
fi

if [ "$(pm image inspect --format '{{index .Labels "nfkeeper.package"}}' "$image" 2>/dev/null)" = "$pkg_sum $base" ]; then
  echo "image.sh: $image is up to date" >&2
else
  prepare_context "$cache/image-context"
  # --network none: nothing in the build needs one, and podman's default
  # network would add firewall rules to this machine's own namespace.
  pm build --quiet --network none --arch "$arch" --build-arg BASE="$base" --label "nfkeeper.package=$pkg_sum $base" \
    -f deploy/container/Dockerfile -t "$image" "$cache/image-context" >/dev/null
  # The builds this one replaced (dangling, and ours by their label).
  pm image prune -f --filter label=nfkeeper.package >/dev/null || true
fi
size=$(pm image inspect --format '{{.Size}}' "$image")
echo "image.sh: $image, $((size / 1000000)) MB" >&2
echo "$image"
