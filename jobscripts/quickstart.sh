#!/usr/bin/env bash
# The README's run command, the user's main job in one go: installs what is missing, builds, writes
# the default synthetic shard set, trains inputs/quickstart.ini on 2 ranks (data-parallel) in FP32,
# in FP32 again from initial weights a bf16 rounding step away, and in BF16, and reconciles BF16
# against the band the two FP32 runs draw (validation/reconcile-study.sh).
#   jobscripts/quickstart.sh [extra avtrain options...]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
"$here/build.sh" cpu avtrain avtrain-shards
bin="$root/build/cpu/bin"
data="$root/runs/quickstart-shards"
out="$root/runs/quickstart"
ranks=2
threads=$(( $(nproc) / ranks > 0 ? $(nproc) / ranks : 1 ))  # the cores shared out over the ranks
seed=1
if ! "$bin/avtrain-shards" inspect "$data" >/dev/null 2>&1; then
  rm -rf "$data"
  "$bin/avtrain-shards" synth --out "$data" --shards 4 --samples 1024 --seed 1
fi
# FP32, its FP32 twin (initial weights a bf16 rounding step apart: the band FP32 itself draws) and
# BF16, each on $ranks ranks; then the verdict, the JSON report and the plot.
rc=0
"$root/validation/reconcile-study.sh" "$root/inputs/quickstart.ini" --data "$data" --out "$out" \
  --ranks "$ranks" --seeds "$seed" --candidates bf16 -- --threads "$threads" "$@" || rc=$?
[ "$rc" -le 1 ] || exit "$rc"
band=$out/seed-$seed/bf16.band
plot="plot $band.png"
[ -f "$band.png" ] || plot="no plot (python3-matplotlib draws $band.png)"
cat "$band.txt"
echo "quickstart: traces in $out/seed-$seed/{fp32,fp32-twin,bf16}; report $band.{txt,json}; $plot"
exit "$rc"
