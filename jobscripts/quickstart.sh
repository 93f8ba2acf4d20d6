#!/usr/bin/env bash
# The README's run command, the user's main job in one go: installs what is missing, builds, writes
# the default synthetic shard set, trains inputs/quickstart.ini on 2 ranks (data-parallel) in FP32
# and again in BF16, and reconciles the two runs.
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
if ! "$bin/avtrain-shards" inspect "$data" >/dev/null 2>&1; then
  rm -rf "$data"
  "$bin/avtrain-shards" synth --out "$data" --shards 4 --samples 1024 --seed 1
fi
for precision in fp32 bf16; do
  "$here/mpirun-local.sh" "$ranks" "$bin/avtrain" "$root/inputs/quickstart.ini" --data "$data" \
    --dp "$ranks" --threads "$threads" --precision "$precision" --out "$out/$precision" "$@"
done
/usr/bin/python3 "$root/validation/avtrain-reconcile" "$out/fp32" "$out/bf16"
echo "quickstart: traces in $out/fp32 and $out/bf16 (run.json, trace.csv, layers.csv, ranks.csv)"
