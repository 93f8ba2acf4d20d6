#!/usr/bin/env bash
# A fuzzing campaign (docs/fuzzing.md): builds the fuzz preset (clang's libFuzzer under ASan and UBSan)
# and runs each target for SECONDS on a copy of its stored corpus, in libFuzzer's fork mode, so that a
# finding is written and the run goes on to its time. Then prints per target its executions, its
# coverage at the end (libFuzzer's cov: edges and ft: features), the inputs it kept, and its findings
# (crash-*, leak-*, timeout-*, oom-* files: a crash, a sanitizer report, an exception escaping as
# anything but the one-line refusal, a hang past -timeout, an allocation past -malloc_limit_mb).
# The stored corpus is not touched: new inputs stay in the campaign's copy; a finding, once fixed,
# goes into tests/fuzz/corpus/NAME/ by hand, as a regression input.
#   validation/fuzz-campaign.sh SECONDS [TARGET...]   (TARGET: deck, safetensors, ...; default all)
# Environment: AVTRAIN_FUZZ_OUT (default runs/fuzz-campaign), AVTRAIN_FUZZ_BUILD_JOBS (default 2),
# AVTRAIN_FUZZ_MALLOC_MB (default 256: no input of a few KiB justifies one allocation larger).
# Exit status: 0 when no target found anything, 1 when one did, 2 for a bad argument or a failed build.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
usage="usage: validation/fuzz-campaign.sh SECONDS [TARGET...]"
[[ $# -ge 1 && $1 =~ ^[1-9][0-9]*$ ]] || { echo "fuzz-campaign.sh: SECONDS must be a whole number > 0; $usage" >&2; exit 2; }
seconds=$1
shift
known=()
for f in "$root"/tests/fuzz/fuzz_*.cpp; do
  n=$(basename "$f" .cpp)
  known+=("${n#fuzz_}")
done
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=("${known[@]}")
for t in "${targets[@]}"; do
  [[ " ${known[*]} " == *" $t "* ]] || { echo "fuzz-campaign.sh: no fuzz target $t (targets: ${known[*]})" >&2; exit 2; }
done
out=${AVTRAIN_FUZZ_OUT:-$root/runs/fuzz-campaign}
malloc_mb=${AVTRAIN_FUZZ_MALLOC_MB:-256}
build="$root/build/fuzz"

mkdir -p "$out"
launcher=()
if command -v ccache > /dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
(cd "$root" && cmake --preset fuzz "${launcher[@]}" > "$out/configure.log" 2>&1) ||
  { echo "fuzz-campaign.sh: cmake --preset fuzz failed (clang, libFuzzer: jobscripts/install-deps.sh --fuzz); see $out/configure.log" >&2; exit 2; }
cmake --build "$build" -j "${AVTRAIN_FUZZ_BUILD_JOBS:-2}" --target "${targets[@]/#/fuzz_}" > "$out/build.log" 2>&1 ||
  { echo "fuzz-campaign.sh: the build failed; see $out/build.log" >&2; exit 2; }

found=0
printf '%-14s %8s %12s %8s %8s %8s %9s\n' target seconds executions cov ft corpus findings
for t in "${targets[@]}"; do
  dir="$out/$t"
  rm -rf "$dir"
  mkdir -p "$dir/corpus" "$dir/findings" "$dir/tmp"
  cp "$root/tests/fuzz/corpus/$t"/* "$dir/corpus/"
  start=$(date +%s)
  # The scratch files of the target (tests/fuzz/fuzz_input.hpp) go under the campaign's folder.
  (cd "$dir" && TMPDIR="$dir/tmp" "$build/bin/fuzz_$t" -fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 \
      -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb="$malloc_mb" -print_funcs=0 \
      -artifact_prefix="$dir/findings/" corpus > "$dir/log" 2>&1) || true
  took=$(( $(date +%s) - start ))
  # The last status line: "#EXECUTIONS: cov: N ft: N corp: N ..." (fork mode).
  last=$(grep -E '^#[0-9]+:? .*cov: [0-9]+ ft: [0-9]+' "$dir/log" | tail -n 1 || true)
  execs=$(sed -E 's/^#([0-9]+).*/\1/' <<< "$last")
  cov=$(sed -E 's/.*cov: ([0-9]+).*/\1/' <<< "$last")
  ft=$(sed -E 's/.*ft: ([0-9]+).*/\1/' <<< "$last")
  corp=$(sed -E 's/.*corp: ([0-9]+).*/\1/' <<< "$last")
  findings=$(find "$dir/findings" -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) | sort)
  n=0
  [[ -z $findings ]] || n=$(wc -l <<< "$findings")
  printf '%-14s %8s %12s %8s %8s %8s %9s\n' "$t" "$took" "${execs:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}" "$n"
  [[ -n $last ]] || echo "  no status line from libFuzzer: see $dir/log"
  if [[ $n -gt 0 ]]; then
    found=1
    while read -r f; do echo "  finding: $f"; done <<< "$findings"
  fi
done
echo "logs, corpora grown and findings: $out/TARGET/ (replay one: build/fuzz/bin/fuzz_TARGET FILE)"
exit $found
