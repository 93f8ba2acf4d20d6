#!/usr/bin/env bash
# What a checkpoint costs (a benchmark, not a test): this disk's sequential write rate with fsync
# (dd conv=fsync), then for the quickstart deck and a larger one (width 512, 12 blocks) on one rank:
# the checkpoint's size, its write time (from the run's log: written, fsynced, committed), the load
# time of a resume, and the step time it is compared with.
#   validation/checkpoint-bench.sh [WORK]    (default runs/checkpoint-bench; the shards of the quickstart)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
work=${1:-$root/runs/checkpoint-bench}
bin=${AVTRAIN_BIN:-$root/build/cpu/bin}
mkdir -p "$work"
data=$work/shards
[ -d "$data" ] || "$bin/avtrain-shards" synth --out "$data" --shards 4 --samples 1024 --seed 1 > /dev/null

rm -f "$work/dd.bin"
dd_line=$(dd if=/dev/zero of="$work/dd.bin" bs=1M count=512 conv=fsync 2>&1 | tail -1)
rm -f "$work/dd.bin"
echo "disk: dd if=/dev/zero bs=1M count=512 conv=fsync: $dd_line"

bench() {  # name, extra options
  local name=$1
  shift
  local out=$work/$name
  rm -rf "$out"
  "$bin/avtrain" "$root/inputs/quickstart.ini" --data "$data" --steps 4 --checkpoint.interval 1 --checkpoint.keep 2 \
    --train.eval_interval 0 --threads "$(nproc)" --out "$out" "$@" > "$out.write.log" 2>&1
  rm -rf "$out/checkpoints/step-0000004" && rm -f "$out/checkpoints/latest"
  "$bin/avtrain" "$root/inputs/quickstart.ini" --data "$data" --steps 4 --checkpoint.interval 1 --checkpoint.keep 2 \
    --train.eval_interval 0 --threads "$(nproc)" --out "$out" "$@" > "$out.load.log" 2>&1
  /usr/bin/python3 - "$name" "$out" <<'EOF'
import csv, re, statistics, sys
name, out = sys.argv[1], sys.argv[2]
writes = [(float(m[0]), float(m[1])) for m in re.findall(r"checkpoint \S+: ([0-9.]+) MiB in ([0-9.]+) s", open(out + ".write.log").read())]
load = float(re.search(r"resuming from .* loaded in ([0-9.]+) s", open(out + ".load.log").read()).group(1))
steps = [float(r["step_ms"]) for r in csv.DictReader(open(out + "/trace.csv"))][1:]
mib = writes[0][0]
w = statistics.median(t for _, t in writes)
step = statistics.median(steps) / 1000
print(f"{name}: checkpoint {mib:.1f} MiB; write {w:.3f} s median of {len(writes)} ({mib / w:.0f} MiB/s), "
      f"load {load:.3f} s ({mib / load:.0f} MiB/s); median step {step * 1000:.0f} ms, "
      f"so a checkpoint costs {w / step:.2f} steps")
EOF
}
bench quickstart
bench large --model.width 512 --model.depth 12 --model.heads 8 --train.micro_batch 8
