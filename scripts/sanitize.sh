#!/usr/bin/env bash
# Runs the addon's tests (test/netlink/) against an AddressSanitizer + UBSan
# build of the addon, and reports every leak, memory error or undefined
# behaviour attributable to the addon.
#   bash scripts/sanitize.sh [--full] [vitest files...]   (default: test/netlink/*, but lifecycle)
# By default (what scripts/test.sh, and so CI, runs) the big tests run at a
# tenth of their size (NFK_SANITIZE_FULL unset; see scaled() in
# test/netlink/fixtures.ts): 10,000 leak-test calls instead of 100,000, 1,000-op
# batches and 1,000 foreign rules instead of 10,000. --full runs them whole.
# The sanitized addon is built in build/sanitize/ and loaded through
# NFKEEPER_ADDON; build/Release (the normal addon) is never touched.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=$root/build/sanitize
full=0
if [ "${1:-}" = --full ]; then full=1; shift; fi
t0=$SECONDS
mkdir -p "$out/src/native"
# A copy of the sources, so node-gyp's build/ directory is this one's own.
# Only changed files are copied, so make rebuilds only what changed.
for f in binding.gyp native/*.cc native/*.h; do
  dst=$out/src/$f
  cmp -s "$f" "$dst" 2>/dev/null || cp "$f" "$dst"
done
gyp=$root/node_modules/node-gyp/bin/node-gyp.js
nodedir=()
[ -f /usr/include/node/node_api.h ] && nodedir=(--nodedir=/usr)
(cd "$out/src" && {
  if [ ! -f build/Makefile ] || [ binding.gyp -nt build/Makefile ]; then
    NFKEEPER_SANITIZE=1 node "$gyp" configure "${nodedir[@]}"
  fi
  NFKEEPER_SANITIZE=1 node "$gyp" build -j 2 "${nodedir[@]}"
} >"$out/build.log" 2>&1) || {
  tail -20 "$out/build.log" >&2
  exit 2
}
echo "sanitize: addon built in $((SECONDS - t0)) s"
t1=$SECONDS
addon=$out/src/build/Release/nfkeeper.node
if [ "$(nm -D "$addon" | grep -c __asan_report)" = 0 ]; then
  echo "sanitize: $addon is not instrumented" >&2
  exit 2
fi

rm -rf "$out/reports"
mkdir -p "$out/reports"
# lifecycle.test.ts is left out by default: it checks process exit and fd
# release in child processes with 30 s budgets that an ASan Node's start-up and
# exit-time leak scan overrun; it tests lifecycle, not memory.
files=("$@")
[ ${#files[@]} -eq 0 ] && files=($(ls test/netlink/*.test.ts | grep -v lifecycle))
# Node and V8 keep allocations until exit on purpose, so LeakSanitizer reports
# plenty that is not ours: the reports go to files and only leaks with a frame
# in the addon count. fast_unwind_on_malloc=0 keeps the addon's frames in
# stacks that pass through libnftnl (built without frame pointers).
set +e
# One test file at a time: an ASan-instrumented Node is slow to start, and
# two of them at once on two cores made vitest give up on starting workers.
LD_PRELOAD="$(g++ -print-file-name=libasan.so) $(g++ -print-file-name=libubsan.so)" \
ASAN_OPTIONS="detect_leaks=1:log_path=$out/reports/asan:detect_odr_violation=0:alloc_dealloc_mismatch=0:new_delete_type_mismatch=0:handle_segv=0:allow_user_segv_handler=1:detect_stack_use_after_return=0" \
LSAN_OPTIONS="fast_unwind_on_malloc=0:malloc_context_size=40:exitcode=0" \
UBSAN_OPTIONS="print_stacktrace=1:log_path=$out/reports/ubsan" \
NFK_SANITIZE=1 NFK_SANITIZE_FULL=$([ $full = 1 ] && echo 1) NFKEEPER_ADDON="$addon" \
  npx vitest run --maxWorkers=1 --no-file-parallelism --testTimeout=900000 --hookTimeout=900000 "${files[@]}" 2>&1 \
  | tee "$out/vitest.log" | grep -E "Test Files|Tests |FAIL|leak|encoder\]" 
status=${PIPESTATUS[0]}
set -e

found=0
node - "$out/reports" <<'JS' || found=$?
const fs = require('fs');
const dir = process.argv[2];
let addonLeaks = 0, addonBytes = 0, otherLeaks = 0, errors = [], ub = [];
for (const f of fs.readdirSync(dir)) {
  const text = fs.readFileSync(`${dir}/${f}`, 'utf8');
  for (const block of text.split(/\n(?=(?:Direct|Indirect) leak of )/)) {
    const m = /^(?:Direct|Indirect) leak of (\d+) byte/.exec(block);
    if (!m) continue;
    if (/nfkeeper\.node|native\/\w+\.cc/.test(block)) {
      addonLeaks++;
      addonBytes += Number(m[1]);
      if (addonLeaks <= 3) console.error(block.split('\n').slice(0, 14).join('\n'));
    } else otherLeaks++;
  }
  for (const m of text.matchAll(/ERROR: AddressSanitizer: (?!.*leaks)[^\n]*/g)) errors.push(`${f}: ${m[0]}`);
  if (f.startsWith('ubsan')) for (const m of text.matchAll(/[^\n]*runtime error:[^\n]*/g)) ub.push(m[0]);
}
console.log(`sanitize: addon leaks ${addonLeaks} (${addonBytes} bytes); leaks in Node/V8 itself (not counted) ${otherLeaks}; ` +
  `memory errors ${errors.length}; undefined behaviour ${ub.length}`);
for (const e of errors.slice(0, 5)) console.log(e);
for (const e of ub.slice(0, 5)) console.log(e);
if (fs.readdirSync(dir).length === 0) { console.log('sanitize: no sanitizer reports at all; was the runtime preloaded?'); process.exit(2); }
process.exit(addonLeaks + errors.length + ub.length > 0 ? 1 : 0);
JS
echo "sanitize: tests ($([ $full = 1 ] && echo full size || echo quick)) took $((SECONDS - t1)) s"
[ "$status" -ne 0 ] && { echo "sanitize: the tests failed under the sanitizers (see $out/vitest.log)" >&2; exit 1; }
exit $found
