#!/usr/bin/env bash
# The README's run command: installs what is missing, builds, writes the default synthetic shard
# set, trains inputs/quickstart.ini on it and prints where the traces are.
#   jobscripts/quickstart.sh [extra avtrain options...]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
"$here/build.sh" cpu avtrain avtrain-shards
bin="$root/build/cpu/bin"
data="$root/runs/quickstart-shards"
out="$root/runs/quickstart"
if ! "$bin/avtrain-shards" inspect "$data" >/dev/null 2>&1; then
  rm -rf "$data"
  "$bin/avtrain-shards" synth --out "$data" --shards 4 --samples 1024 --seed 1
fi
"$here/mpirun-local.sh" 1 "$bin/avtrain" "$root/inputs/quickstart.ini" --data "$data" --out "$out" "$@"
echo "quickstart: traces in $out (run.json, trace.csv, layers.csv)"
