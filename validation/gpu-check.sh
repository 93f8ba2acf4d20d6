#!/usr/bin/env bash
# The one prepared GPU check (run on a machine with a GPU, in under 8 minutes):
#   1. builds the cuda preset;  2. runs ctest -L gpu (every CUDA op against the CPU op, NCCL);
#   3. measures the GPU's bf16 GEMM rate (avtrain-gemm-peak, 8192^3);
#   4. trains the quickstart deck on the GPU in FP32 and BF16 (200 steps) and reconciles them;
#   5. times the large deck (inputs/gpu-large.ini, ~1.2B parameters, ~1k tokens per sample) in BF16:
#      step time, samples/s and model FLOP utilisation against the measured bf16 GEMM rate.
# Every part runs even when an earlier one fails, so one run says as much as it can; the summary
# table at the end gives each part's result. Logs go under $OUT (default runs/gpu-check).
#   bash validation/gpu-check.sh
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${OUT:-$root/runs/gpu-check}
mkdir -p "$out"
bin="$root/build/cuda/bin"
cd "$root"
declare -a summary
note() { summary+=("$1"); echo "gpu-check: $1"; }
elapsed() { echo "$(( $(date +%s) - start ))s"; }
start=$(date +%s)
nvidia-smi > "$out/nvidia-smi.txt" 2>&1 || true
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# 1. Build.
if cmake --preset cuda > "$out/configure.log" 2>&1 &&
   cmake --build --preset cuda -j "$(nproc)" > "$out/build.log" 2>&1; then
  note "build: ok ($(elapsed))"
else
  note "build: FAILED (see build.log)"; tail -30 "$out/build.log"
fi

# 2. The gpu tests.
if ctest --preset cuda -L gpu > "$out/ctest-gpu.log" 2>&1; then
  note "ctest -L gpu: $(grep -E 'tests passed|tests failed' "$out/ctest-gpu.log" | tail -1) ($(elapsed))"
else
  note "ctest -L gpu: FAILED: $(grep -E 'tests passed|tests failed' "$out/ctest-gpu.log" | tail -1)"
  grep -E "Failure|FAILED|Expected|Which is|relative" "$out/ctest-gpu.log" | head -40
fi
grep -E "Skipped|\*\*\*" "$out/ctest-gpu.log" | head -10

# 3. The bf16 GEMM rate of this GPU.
peak=$("$bin/avtrain-gemm-peak" --device cuda --dtype bf16 --n 8192 --repeats 20 2>&1 | tee "$out/gemm-peak.log" |
       sed -n 's/.*"tflops": \([0-9.]*\).*/\1/p')
note "bf16 GEMM 8192^3: ${peak:-?} TFLOP/s"

# 4. Quickstart on the GPU, FP32 and BF16, reconciled.
shards="$out/quickstart-shards"
"$bin/avtrain-shards" synth --out "$shards" --shards 4 --samples 1024 --seed 1 > "$out/shards.log" 2>&1
for p in fp32 bf16; do
  if "$bin/avtrain" inputs/quickstart.ini --data "$shards" --device cuda --precision "$p" --steps 200 \
       --out "$out/quickstart-$p" > "$out/quickstart-$p.log" 2>&1; then
    note "quickstart $p on the GPU: $(grep 'done:' "$out/quickstart-$p.log")"
  else
    note "quickstart $p on the GPU: FAILED: $(tail -1 "$out/quickstart-$p.log")"
  fi
done
if /usr/bin/python3 validation/avtrain-reconcile "$out/quickstart-fp32" "$out/quickstart-bf16" \
     > "$out/reconcile.log" 2>&1; then
  note "reconcile fp32 vs bf16 (GPU): $(grep verdict "$out/reconcile.log")"
else
  note "reconcile fp32 vs bf16 (GPU): $(grep verdict "$out/reconcile.log" || tail -1 "$out/reconcile.log")"
fi

# 5. Throughput on the large deck.
large="$out/large-shards"
"$bin/avtrain-shards" synth --out "$large" --shards 2 --samples 64 --seed 1 --sample-rate 16000 \
  --audio-samples 64000 --frames 16 --height 160 --width 160 --channels 3 > "$out/large-shards.log" 2>&1
if "$bin/avtrain" inputs/gpu-large.ini --data "$large" --device cuda --out "$out/large" > "$out/large.log" 2>&1; then
  /usr/bin/python3 - "$out" "${peak:-0}" <<'PY' | tee "$out/throughput.txt"
import csv, json, statistics, sys
out, peak = sys.argv[1], float(sys.argv[2])
rows = list(csv.DictReader(open(f"{out}/large/trace.csv")))[5:]  # after warm-up
step_ms = statistics.median(float(r["step_ms"]) for r in rows)
samples = statistics.median(float(r["samples_per_s"]) for r in rows)
# Model FLOPs per step (run.json): 3 x the forward's matrix-product FLOPs (backward = 2 x forward).
flops = json.load(open(f"{out}/large/run.json"))["model"]["train_flops_per_step"]
tflops = flops / 1e12 / (step_ms / 1e3)
mfu = tflops / peak if peak else float("nan")
print(f"large deck (bf16): step {step_ms:.1f} ms, {samples:.1f} samples/s, {tflops:.1f} TFLOP/s model, "
      f"MFU {mfu:.1%} of the measured bf16 GEMM rate {peak:.1f} TFLOP/s")
PY
  note "large deck: $(tail -1 "$out/throughput.txt")"
else
  note "large deck on the GPU: FAILED: $(tail -1 "$out/large.log")"
fi

echo
echo "gpu-check summary ($(elapsed), logs in $out):"
for line in "${summary[@]}"; do echo "  - $line"; done
