#!/usr/bin/env bash
# The main job: set-up (idempotent), then nfkeeper's demo in a throwaway
# network namespace that it creates and removes.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
node bin/nfkeeper.js demo "$@"
