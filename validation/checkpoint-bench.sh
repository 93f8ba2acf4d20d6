#!/usr/bin/env bash
# What a checkpoint costs (a benchmark, not a test): this disk's sequential write rate with fsync
# (dd conv=fsync), then for the quickstart deck and a larger one (width 512, 12 blocks) on one rank:
# the checkpoint's size; its write time beside training (from the run's log: written and fsynced);
# what training lost to it: the pause to copy the state out plus how much longer the step beside
# the write took than the run's other steps; the load time of a resume; and the step time it is
# compared with. Then ZeRO (parallel.zero 1, bf16: the moments and the fp32 masters split over the
# replicas) at dp 2 and dp 4 on the larger deck, each replica writing the file of its part
# (checkpoint.zero_write parallel) against the parts gathered to the stage's first replica, which
# writes the stage whole (gathered): the pause, the slowest writer's time, what training lost, the
# load of a resume at the same layout.
#   validation/checkpoint-bench.sh [WORK]    (default runs/checkpoint-bench; the shards of the quickstart)
#   AVTRAIN_BENCH_ONLY=zero validation/checkpoint-bench.sh    the ZeRO comparison alone
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
direct_line=$(dd if=/dev/zero of="$work/dd.bin" bs=1M count=512 oflag=direct conv=fsync 2>&1 | tail -1)
rm -f "$work/dd.bin"
echo "disk: dd if=/dev/zero bs=1M count=512 conv=fsync: $dd_line"
echo "disk past the page cache (how checkpoints are written): dd ... oflag=direct conv=fsync: $direct_line"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
bench() {  # name, steps, interval, extra options (AVTRAIN_RANKS: ranks under mpirun)
  local name=$1 steps=$2 interval=$3
  shift 3
  local out=$work/$name
  run() {  # log, interval, options
    local log=$1 every=$2
    shift 2
    local launch=() threads=$(nproc)
    if [ -n "${AVTRAIN_RANKS:-}" ]; then
      launch=(mpirun -np "$AVTRAIN_RANKS" --oversubscribe --bind-to none)
      threads=1
    fi
    "${launch[@]}" "$bin/avtrain" "$root/inputs/quickstart.ini" --data "$data" --steps "$steps" \
      --checkpoint.interval "$every" --checkpoint.keep 2 --train.eval_interval 0 --threads "$threads" "$@" > "$log" 2>&1
  }
  rm -rf "$out"
  run "$out.write.log" "$interval" --out "$out" "$@"
  rm -rf "$out/checkpoints/step-$(printf %07d "$steps")" && rm -f "$out/checkpoints/latest"
  run "$out.load.log" "$interval" --out "$out" "$@"
  /usr/bin/python3 - "$name" "$out" "$interval" <<'EOF'
import csv, re, statistics, sys
name, out, interval = sys.argv[1], sys.argv[2], int(sys.argv[3])
pat = r"checkpoint \S+: ([0-9.]+) MiB written in ([0-9.]+) s beside training, which paused ([0-9.]+) s"
writes = [tuple(map(float, m)) for m in re.findall(pat, open(out + ".write.log").read())]
load = float(re.search(r"resuming from .* loaded in ([0-9.]+) s", open(out + ".load.log").read()).group(1))
steps = [float(r["step_ms"]) / 1000 for r in csv.DictReader(open(out + "/trace.csv"))]
mib = writes[0][0]
w = statistics.median(t for _, t, _ in writes)
pause = statistics.median(p for _, _, p in writes)
# The steps a write went on beside (the one after each periodic checkpoint) against the others of
# the same run, the first step excluded.
beside = [steps[i] for i in range(interval, len(steps), interval)]
others = [steps[i] for i in range(1, len(steps)) if i % interval]
step = statistics.median(others)
slower = statistics.mean(beside) - step
lost = pause + slower
print(f"{name}: checkpoint {mib:.1f} MiB; written in {w:.3f} s beside training, median of {len(writes)} "
      f"({mib / w:.0f} MiB/s); training paused {pause:.3f} s per checkpoint (the copy out) and the step beside "
      f"the write took {slower:+.3f} s; load {load:.3f} s ({mib / load:.0f} MiB/s); median step {step * 1000:.0f} ms, "
      f"so a checkpoint costs {lost / step:.2f} steps")
EOF
}
large=(--model.width 512 --model.depth 12 --model.heads 8)
if [ "${AVTRAIN_BENCH_ONLY:-}" != zero ]; then
  bench quickstart 16 4
  bench large 12 4 "${large[@]}" --train.micro_batch 8
fi
for dp in 2 4; do
  for how in gathered parallel; do
    AVTRAIN_RANKS=$dp bench "zero-dp$dp-$how" 12 4 "${large[@]}" --train.micro_batch $((8 / dp)) --dp "$dp" \
      --precision bf16 --parallel.zero 1 --checkpoint.zero_write "$how"
  done
done
