#!/usr/bin/env bash
# A fuzzing campaign (docs/fuzzing.md): builds the fuzz preset (clang's libFuzzer under ASan and UBSan)
# and runs each target for SECONDS on a copy of its stored corpus, in libFuzzer's fork mode, so that a
# finding is written and the run goes on to its time. Then prints per target its executions, its
# coverage at the end (libFuzzer's cov: edges and ft: features), the inputs it kept, and its findings
# (crash-*, leak-*, timeout-*, oom-* files: a crash, a sanitizer report, an exception escaping as
# anything but the one-line refusal, a hang past -timeout, an allocation past -malloc_limit_mb).
# The stored corpus is not touched: new inputs stay in the campaign's copy; a finding, once fixed,
# goes into tests/fuzz/corpus/NAME/ by hand, as a regression input.
#   validation/fuzz-campaign.sh SECONDS [TARGET[:SECONDS]...]   (TARGET: deck, safetensors, ...; default all;
#                                                            TARGET:S runs that one S seconds)
# Environment: AVTRAIN_FUZZ_OUT (default runs/fuzz-campaign), AVTRAIN_FUZZ_BUILD_JOBS (default 2),
# AVTRAIN_FUZZ_MALLOC_MB (default 256: no input of a few KiB justifies one allocation larger),
# AVTRAIN_FUZZ_JOBS (default 1: how many targets run at once, a core each), AVTRAIN_FUZZ_STRICT (1: a
# finding inside a library fails the campaign too), AVTRAIN_FUZZ_SEED (libFuzzer's -seed: the same
# mutations from one run to the next, as CI's short run wants), AVTRAIN_FUZZ_REPORT_ONLY (1: no build, no run: the
# table of the runs already in AVTRAIN_FUZZ_OUT, their findings replayed).
# Exit status: 0 when no target found anything in avtrain's code, 1 when one did, 2 for a bad argument or a failed build.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
usage="usage: validation/fuzz-campaign.sh SECONDS [TARGET[:SECONDS]...]"
[[ $# -ge 1 && $1 =~ ^[1-9][0-9]*$ ]] || { echo "fuzz-campaign.sh: SECONDS must be a whole number > 0; $usage" >&2; exit 2; }
seconds=$1
shift
known=()
for f in "$root"/tests/fuzz/fuzz_*.cpp; do
  n=$(basename "$f" .cpp)
  known+=("${n#fuzz_}")
done
# TARGET or TARGET:SECONDS (its own time).
words=("$@")
[[ ${#words[@]} -gt 0 ]] || words=("${known[@]}")
targets=()
declare -A seconds_of
for word in "${words[@]}"; do
  t=${word%%:*}
  [[ " ${known[*]} " == *" $t "* ]] || { echo "fuzz-campaign.sh: no fuzz target $t (targets: ${known[*]})" >&2; exit 2; }
  s=$seconds
  if [[ $word == *:* ]]; then
    s=${word#*:}
    [[ $s =~ ^[1-9][0-9]*$ ]] || { echo "fuzz-campaign.sh: $word: the seconds after : must be a whole number > 0" >&2; exit 2; }
  fi
  targets+=("$t")
  seconds_of[$t]=$s
done
out=${AVTRAIN_FUZZ_OUT:-$root/runs/fuzz-campaign}
malloc_mb=${AVTRAIN_FUZZ_MALLOC_MB:-256}
build="$root/build/fuzz"
# HDF5's own leaks on damaged files (tests/fuzz/lsan-suppressions.txt says which) are not findings.
lsan="suppressions=$root/tests/fuzz/lsan-suppressions.txt:print_suppressions=0"

mkdir -p "$out"
report_only=${AVTRAIN_FUZZ_REPORT_ONLY:-0}
if [[ $report_only != 1 ]]; then
launcher=()
if command -v ccache > /dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
(cd "$root" && cmake --preset fuzz "${launcher[@]}" > "$out/configure.log" 2>&1) ||
  { echo "fuzz-campaign.sh: cmake --preset fuzz failed (clang, libFuzzer: jobscripts/install-deps.sh --fuzz); see $out/configure.log" >&2; exit 2; }
cmake --build "$build" -j "${AVTRAIN_FUZZ_BUILD_JOBS:-2}" --target "${targets[@]/#/fuzz_}" > "$out/build.log" 2>&1 ||
  { echo "fuzz-campaign.sh: the build failed; see $out/build.log" >&2; exit 2; }

# One target's run: a copy of its stored corpus, libFuzzer in fork mode for SECONDS, its scratch files
# (tests/fuzz/fuzz_input.hpp) in memory where /dev/shm is (a shard or checkpoint input is written and
# opened as a file each time), else under the campaign's folder.
run_target() {
  local t=$1 dir="$out/$1" tmp
  rm -rf "$dir"
  mkdir -p "$dir/corpus" "$dir/findings"
  cp "$root/tests/fuzz/corpus/$t"/* "$dir/corpus/"
  if [[ -d /dev/shm && -w /dev/shm ]]; then tmp=$(mktemp -d /dev/shm/avtrain-fuzz-$t.XXXXXX); else tmp="$dir/tmp"; mkdir -p "$tmp"; fi
  local start
  start=$(date +%s)
  (cd "$dir" && TMPDIR="$tmp" LSAN_OPTIONS="$lsan" "$build/bin/fuzz_$t" -fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 \
      -max_total_time="${seconds_of[$t]}" ${AVTRAIN_FUZZ_SEED:+-seed=$AVTRAIN_FUZZ_SEED} -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb="$malloc_mb" -print_funcs=0 \
      -artifact_prefix="$dir/findings/" corpus > "$dir/log" 2>&1) || true
  echo $(( $(date +%s) - start )) > "$dir/seconds"
  rm -rf "$tmp"
}

# AVTRAIN_FUZZ_JOBS targets at once (each libFuzzer run takes one core).
jobs=${AVTRAIN_FUZZ_JOBS:-1}
[[ $jobs =~ ^[1-9][0-9]*$ ]] || { echo "fuzz-campaign.sh: AVTRAIN_FUZZ_JOBS must be a whole number > 0" >&2; exit 2; }
for t in "${targets[@]}"; do
  while [[ $(jobs -rp | wc -l) -ge $jobs ]]; do wait -n || true; done
  run_target "$t" &
done
wait
fi

# Each finding replayed alone, its report's stack read for where it happened (fuzz_finding_origin.py):
# avtrain's own code, or inside a library (HDF5, FFmpeg: written down in docs/fuzzing.md, worked
# around where avtrain can check first). Only avtrain's findings fail the campaign, unless
# AVTRAIN_FUZZ_STRICT=1.
# A finding whose replay runs clean is "not reproduced" (fork mode writes an empty input when a job ends
# without one, past -rss_limit_mb for example): listed, not counted.
origin_of() {
  local t=$1 file=$2 tmp report status=0
  tmp=$(mktemp -d)
  report=$(TMPDIR="$tmp" UBSAN_OPTIONS=print_stacktrace=1 LSAN_OPTIONS="$lsan" ASAN_OPTIONS=fast_unwind_on_malloc=0 \
      timeout 120 "$build/bin/fuzz_$t" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb="$malloc_mb" "$file" 2>&1) || status=$?
  rm -rf "$tmp"
  if [[ $status -eq 0 ]]; then echo "not reproduced (its replay ran clean)"; else python3 "$here/fuzz_finding_origin.py" <<< "$report"; fi
}

found=0
printf '%-14s %8s %12s %8s %8s %8s %8s %8s\n' target seconds executions cov ft corpus avtrain library
for t in "${targets[@]}"; do
  dir="$out/$t"
  took=$(cat "$dir/seconds" 2> /dev/null || echo '?')
  # The last status line: "#EXECUTIONS: cov: N ft: N corp: N ..." (fork mode).
  last=$(grep -E '^#[0-9]+:? .*cov: [0-9]+ ft: [0-9]+' "$dir/log" | tail -n 1 || true)
  execs=$(sed -E 's/^#([0-9]+).*/\1/' <<< "$last")
  cov=$(sed -E 's/.*cov: ([0-9]+).*/\1/' <<< "$last")
  ft=$(sed -E 's/.*ft: ([0-9]+).*/\1/' <<< "$last")
  corp=$(sed -E 's/.*corp: ([0-9]+).*/\1/' <<< "$last")
  ours=0 theirs=0
  : > "$dir/findings.txt"
  while read -r f; do
    [[ -n $f ]] || continue
    where=$(origin_of "$t" "$f")
    echo "$(basename "$f"): $where" >> "$dir/findings.txt"
    case $where in
      library*) theirs=$((theirs + 1)) ;;
      "not reproduced"*) ;;
      *) ours=$((ours + 1)) ;;
    esac
  done < <(find "$dir/findings" -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) | sort)
  printf '%-14s %8s %12s %8s %8s %8s %8s %8s\n' "$t" "$took" "${execs:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}" "$ours" "$theirs"
  [[ -n $last ]] || echo "  no status line from libFuzzer: see $dir/log"
  # Findings of one place and kind once, with their count (findings.txt lists every file).
  sed -E 's/^[a-z]+-[0-9a-f]+: //' "$dir/findings.txt" | sort | uniq -c | sort -rn | sed -E 's/^ *([0-9]+) /  finding x\1: /'
  if [[ $ours -gt 0 || ( $theirs -gt 0 && ${AVTRAIN_FUZZ_STRICT:-0} == 1 ) ]]; then found=1; fi
done
echo "logs, corpora grown and findings: $out/TARGET/ (findings.txt; replay one: build/fuzz/bin/fuzz_TARGET FILE)"
exit $found
