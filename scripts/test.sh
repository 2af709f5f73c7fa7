#!/usr/bin/env bash
# The whole test suite: set-up (idempotent), type check, then every test on
# the real kernel inside throwaway network namespaces.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
npx tsc -p tsconfig.json --noEmit
npx vitest run "$@"
