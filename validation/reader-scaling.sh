#!/usr/bin/env bash
# The reader's scaling at the VGGSound-like shape, in one run (docs/data-reader.md, "Measured, 6
# December"): read-bench with 1, 2 and 4 reader threads over data-bench.sh's vggsound sets (none,
# gzip4, zstd3; made by `validation/data-bench.sh WORK` first), and another build's reader (e.g.
# main's, one thread) on the same sets. Prints samples/s, the CPU it got, samples per CPU-second, the
# HDF5 lock's share and the limit it puts on 4 free cores.
#   validation/reader-scaling.sh WORK [OTHER_BIN_DIR]    (AVTRAIN_BIN: this build's bin, build/cpu/bin)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
work=$1 other=${2:-}
bin=${AVTRAIN_BIN:-$here/../build/cpu/bin}
seconds=${AVTRAIN_BENCH_SECONDS:-6}
for c in none gzip4 zstd3; do
  d=$work/vggsound-$c
  [ -d "$d" ] || { echo "reader-scaling: $d missing (run validation/data-bench.sh $work first)" >&2; exit 1; }
  cat "$d"/*.h5 > /dev/null
  for t in 1 2 4; do
    echo "$c $t-threads $("$bin/avtrain-shards" read-bench --data "$d" --micro-batch 8 --seconds "$seconds" --reader-threads "$t" --json)"
  done
  if [ -n "$other" ] && [ "$c" != zstd3 ]; then
    echo "$c other $("$other/avtrain-shards" read-bench --data "$d" --micro-batch 8 --seconds "$seconds" --json)"
  fi
done | /usr/bin/python3 -c '
import json, sys
print("| compression | reader | samples/s | CPU-s per s | samples per CPU-second | HDF5 lock held, share of the CPU | 4 free cores give at most |")
print("|---|---|---|---|---|---|---|")
for line in sys.stdin:
    c, who, j = line.split(" ", 2)
    r = json.loads(j)
    print(f"| {c} | {who} | {r[\"samples_per_s\"]:.0f} | {r[\"cpu_seconds\"] / r[\"seconds\"]:.2f} | {r[\"samples_per_cpu_s\"]:.0f} | "
          f"{100 * r.get(\"lock_share\", 0):.1f} % | {r.get(\"speedup_limit_4_cores\", 0):.2f}x |")
'
