#!/usr/bin/env bash
# CI's named subset of the unit label under AddressSanitizer and UBSan (docs/fuzzing.md, "Sanitizers
# in CI"): the unit tests of the readers of files users hand over, built in the fuzz preset's build
# (clang, -fsanitize=address,undefined, -fno-sanitize-recover=undefined), whose libraries CI's short
# fuzzing run has built already, so only the tests compile. The asan preset's whole unit and mpi labels
# would add 28-37 minutes to CI (measured 7 December 2026), which has 60.
#   validation/sanitized-unit-tests.sh
# Exit status: 0 when every test passes with no sanitizer report, else the first failing binary's.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$root/build/fuzz
# Shards (reader, set, writer, raw chunks), safetensors, pack's CSV files and class lists, checkpoint
# files and stages, pretrained weights.
tests=(test_shards test_safetensors_file test_pack_inputs test_checkpoint_file test_stage_checkpoint test_pretrained_weights)
if [[ ! -f $build/CMakeCache.txt ]]; then
  (cd "$root" && cmake --preset fuzz > /dev/null) || { echo "sanitized-unit-tests: cmake --preset fuzz failed (jobscripts/install-deps.sh --fuzz)" >&2; exit 2; }
fi
cmake --build "$build" -j "${AVTRAIN_FUZZ_BUILD_JOBS:-2}" --target "${tests[@]}" > "$build/sanitized-unit-tests.build.log" 2>&1 ||
  { tail -20 "$build/sanitized-unit-tests.build.log"; echo "sanitized-unit-tests: the build failed" >&2; exit 2; }
export UBSAN_OPTIONS=print_stacktrace=1
# HDF5's own leaks on damaged files, as in the fuzz campaigns (tests/fuzz/lsan-suppressions.txt).
export LSAN_OPTIONS="suppressions=$root/tests/fuzz/lsan-suppressions.txt:print_suppressions=0"
for t in "${tests[@]}"; do
  start=$(date +%s%N)
  (cd "$build" && "$build/bin/$t" --gtest_brief=1) > "$build/$t.sanitized.log" 2>&1 ||
    { status=$?; tail -40 "$build/$t.sanitized.log"; echo "sanitized-unit-tests: $t failed under ASan/UBSan (log: $build/$t.sanitized.log)" >&2; exit $status; }
  printf 'sanitized-unit-tests: %-24s %s (%d ms)\n' "$t" "$(grep -E '^\[  PASSED  \]' "$build/$t.sanitized.log")" \
    $(( ($(date +%s%N) - start) / 1000000 ))
done
