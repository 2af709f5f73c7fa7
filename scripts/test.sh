#!/usr/bin/env bash
# The whole test suite (what .ci/run runs): set-up with what only the tests
# need (scripts/setup.sh --test, idempotent), type check, vitest's unit project
# (logic only; as nobody when run as root, which proves it needs no privilege),
# then its kernel project: every other test, on the real kernel inside throwaway
# network namespaces (among them the replay of every committed fuzz input and a
# 5 s fuzz run), then the addon's tests again under AddressSanitizer/UBSan
# (scripts/sanitize.sh at its quick sizes; `npm run sanitize -- --full` runs
# them whole). With arguments, they go to vitest and the sanitizer pass is left out.
# All of it runs on Node 24, then a smoke of the suite on Node 22 (the two supported lines): the
# machine's node when it is that line, otherwise the pinned release from the npm registry
# (scripts/node.sh, unpacked once under .cache/node/).
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$SECONDS
node24=$(bash scripts/node.sh --any 24)
node22=$(bash scripts/node.sh --any 22)
export PATH=$node24/bin:$PATH
echo "test.sh: Node $(node --version) ($node24/bin/node), smoke on $("$node22/bin/node" --version)"
bash scripts/setup.sh --test
t1=$SECONDS
npx tsc -p tsconfig.json --noEmit
t2=$SECONDS
tu=$SECONDS
if [ $# -eq 0 ]; then
  # Each test file runs once: vitest.config.ts puts it in one project. `npm run test:unit` loads
  # the config without writing into the checkout, which nobody cannot write to.
  asnobody=(setpriv --reuid=65534 --regid=65534 --clear-groups)
  if [ "$(id -u)" -eq 0 ] && "${asnobody[@]}" test -r package.json -a -x "$node24/bin/node"; then
    home=$(mktemp -d) && chmod 0777 "$home"
    rc=0
    "${asnobody[@]}" env HOME="$home" PATH="$PATH" npm run --silent test:unit || rc=$?
    rm -rf "$home"
    [ "$rc" -eq 0 ] || exit "$rc"
  else
    [ "$(id -u)" -ne 0 ] || echo "test.sh: nobody cannot read this checkout: the unit project runs as root"
    npm run --silent test:unit
  fi
  tu=$SECONDS
  npx vitest run --project kernel
else
  npx vitest run "$@"
fi
t3=$SECONDS
if [ $# -eq 0 ]; then
  # What differs between the lines: the addon's load, the CLI, the daemon's start-up (its V8
  # flags and --expose-gc) and the owners API's peer credentials (the socket's fd).
  PATH=$node22/bin:$PATH npx vitest run test/netlink/smoke.test.ts test/netlink/lifecycle.test.ts \
    test/cli.test.ts test/cli/bundle.test.ts test/owners/api.test.ts
fi
t4=$SECONDS
if [ $# -eq 0 ]; then bash scripts/sanitize.sh; fi
t5=$SECONDS
echo "test.sh: set-up $((t1 - t0)) s, type check $((t2 - t1)) s, unit $((tu - t2)) s, suite $((t3 - tu)) s, Node 22 smoke $((t4 - t3)) s, sanitizers $((t5 - t4)) s; total $((t5 - t0)) s"
