#!/usr/bin/env bash
# The main job: set-up (idempotent), then nfkeeper's demo in a throwaway
# network namespace that it creates and removes.
set -euo pipefail
cd "$(dirname "$0")/.."
# On Node 24 (a supported line): the machine's node when it is 24, else the pinned release from
# the npm registry (scripts/node.sh).
export PATH=$(bash scripts/node.sh --any 24)/bin:$PATH
bash scripts/setup.sh
node bin/nfkeeper.js demo "$@"
