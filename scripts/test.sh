#!/usr/bin/env bash
# The whole test suite (what .ci/run runs): set-up with what only the tests
# need (scripts/setup.sh --test, idempotent), type check,
# every test on the real kernel inside throwaway network namespaces (among
# them the replay of every committed fuzz input and a 5 s fuzz run), then the
# addon's tests again under AddressSanitizer/UBSan (scripts/sanitize.sh at its
# quick sizes; `npm run sanitize -- --full` runs them whole). With arguments,
# they go to vitest and the sanitizer pass is left out.
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$SECONDS
bash scripts/setup.sh --test
t1=$SECONDS
npx tsc -p tsconfig.json --noEmit
t2=$SECONDS
npx vitest run "$@"
t3=$SECONDS
if [ $# -eq 0 ]; then bash scripts/sanitize.sh; fi
t4=$SECONDS
echo "test.sh: set-up $((t1 - t0)) s, type check $((t2 - t1)) s, suite $((t3 - t2)) s, sanitizers $((t4 - t3)) s; total $((t4 - t0)) s"
