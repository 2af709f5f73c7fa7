#!/usr/bin/env bash
# Builds native/fuzz/fuzz_decode (libFuzzer + AddressSanitizer + UBSan, clang)
# from the addon's own decode/event sources and runs it for a bounded time on
# a copy of the committed seed corpus.
#   bash scripts/fuzz.sh [seconds=60] [extra libFuzzer flags...]
# Prints one line "fuzz: N executions, C crashes in S s" and exits non-zero on
# a crash, leaving the crashing input under build/fuzz/. A crash includes a
# message libnftnl would exit() on that the addon's checks let through
# (native/fuzz/abi_exit.c).
#   bash scripts/fuzz.sh replay
# Runs every committed input (native/fuzz/corpus/: the seeds and each crash
# found so far, kept as a regression input) once, without mutating, and exits
# non-zero if any of them crashes, leaks or hits undefined behaviour.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true

cxx=""
for c in clang++ clang++-14 clang++-15 clang++-16; do
  command -v "$c" >/dev/null && { cxx=$c; break; }
done
if [ -z "$cxx" ]; then
  echo "fuzz: clang++ not found; on Debian: apt-get install clang-14 libclang-rt-14-dev (scripts/setup.sh --test does it)" >&2
  exit 2
fi

out=build/fuzz
mkdir -p "$out/obj" "$out/corpus" "$out/crashes"
napi_inc=$(node -p "require('node-addon-api').include_dir")
flags=(-std=c++17 -g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined
  -fno-sanitize-recover=undefined -DNAPI_VERSION=8 -DNAPI_CPP_EXCEPTIONS -DNODE_ADDON_API_DISABLE_DEPRECATED
  -I/usr/include/node -I"$napi_inc" $(pkg-config --cflags libnftnl libmnl))
sources=(native/decode.cc native/decode_json.cc native/attr.cc native/expr_table.cc native/event.cc native/element.cc native/digest.cc native/common.cc native/object.cc
  native/fuzz/napi_shim.cc native/fuzz/fuzz_decode.cc)
cc=${cxx/clang++/clang}
"$cc" -g -O1 -fno-omit-frame-pointer $(pkg-config --cflags libnftnl libmnl) -c native/fuzz/abi_exit.c -o "$out/obj/abi_exit.o"
objs=("$out/obj/abi_exit.o")
for src in "${sources[@]}"; do
  obj="$out/obj/$(basename "$src" .cc).o"
  # Any header newer than the object rebuilds it: objects built against an
  # older header disagree about layouts (an ODR mismatch that shows up as leaks).
  stale=0
  for h in "$src" native/*.h native/fuzz/*.h; do [ "$h" -nt "$obj" ] && stale=1; done
  if [ ! -f "$obj" ] || [ $stale = 1 ]; then
    "$cxx" "${flags[@]}" -c "$src" -o "$obj"
  fi
  objs+=("$obj")
done
"$cxx" -fsanitize=fuzzer,address,undefined "${objs[@]}" $(pkg-config --libs libnftnl libmnl) -o "$out/fuzz_decode"

export ASAN_OPTIONS=suppressions=native/fuzz/asan.supp LSAN_OPTIONS=suppressions=native/fuzz/lsan.supp:fast_unwind_on_malloc=0 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
if [ "$seconds" = replay ]; then
  # Files, not the directory: libFuzzer then runs each one as given (none is
  # skipped as too long or a duplicate) and stops at the first failure.
  inputs=(native/fuzz/corpus/*)
  log="$out/replay.log"
  if "$out/fuzz_decode" -runs=1 "${inputs[@]}" >"$log" 2>&1; then
    ran=$(grep -c '^Executed ' "$log" || true)
    refused=$(sed -n 's/^stat::abi_refused: *//p' "$log" | tail -1)
    echo "fuzz replay: $ran of ${#inputs[@]} committed inputs, 0 crashes; refused by the libnftnl ABI checks: ${refused:-0} (log $log)"
    [ "$ran" = "${#inputs[@]}" ] || { echo "fuzz replay: not every input ran" >&2; exit 1; }
    exit 0
  fi
  echo "fuzz replay: $(grep '^Running: ' "$log" | tail -1 | cut -d' ' -f2) failed (log $log)" >&2
  grep -E "ERROR|SUMMARY|runtime error" "$log" | head -5 >&2
  exit 1
fi

cp -n native/fuzz/corpus/* "$out/corpus/" 2>/dev/null || true
log="$out/last-run.log"
set +e
"$out/fuzz_decode" -max_total_time="$seconds" -max_len=65536 \
  -artifact_prefix="$out/crashes/" -print_final_stats=1 "$@" "$out/corpus" >"$log" 2>&1
status=$?
set -e
execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
crashes=$(ls "$out/crashes" | wc -l)
abi=$(sed -n 's/^stat::libnftnl_abi_exits: *//p' "$log" | tail -1)
refused=$(sed -n 's/^stat::abi_refused: *//p' "$log" | tail -1)
echo "fuzz: ${execs:-?} executions, $crashes crashes in ${seconds} s; libnftnl exit() calls caught by the probe: ${abi:-0}, all refused by the addon's checks (refusals: ${refused:-0}) (corpus $(ls "$out/corpus" | wc -l) inputs; log $log)"
if [ $status -ne 0 ]; then
  grep -E "ERROR|SUMMARY|runtime error" "$log" | head -5 >&2
  exit 1
fi
