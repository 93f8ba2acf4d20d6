#!/usr/bin/env bash
# One run, both codes, the same shape: avtrain's FP32 training step on the quickstart deck next to
# PyTorch's (validation/torch_avnet.py), with the model's GEMM FLOPs and this machine's large-sgemm
# rate. Prints a Markdown table for the README.
#   validation/benchmark.sh [--threads N] [--steps N]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
threads=2
steps=20
while [[ $# -gt 0 ]]; do
  case $1 in
    --threads) threads=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    *) echo "benchmark.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
"$root/jobscripts/install-deps.sh" --reference
"$root/jobscripts/build.sh" cpu >/dev/null

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
avtrain_json=$("$root/build/cpu/bin/avtrain-bench" --deck "$root/inputs/quickstart.ini" --threads "$threads" \
               --steps "$steps" | tail -n 1)
torch_json=$(/usr/bin/python3 "$here/torch_avnet.py" bench --threads "$threads" --steps "$steps" | tail -n 1)

/usr/bin/python3 - "$avtrain_json" "$torch_json" <<'PY'
import json, sys
a, t = json.loads(sys.argv[1]), json.loads(sys.argv[2])
gflop = a["gemm_gflop_per_step"]
print(f"Quickstart shape (width 128, 4 blocks, 95 tokens/sample, batch {a['batch']}), FP32, "
      f"{a['threads']} threads, median of {a['steps']} steps:\n")
print("| code | step (ms) | samples/s | GFLOP/s | × GEMM floor |")
print("|---|---:|---:|---:|---:|")
rows = (("avtrain", a["median_step_ms"], a["floor_ratio"]),
        (f"PyTorch {t['torch']}", t["median_step_ms"], t["median_step_ms"] / a["floor_ms"]))
for name, ms, ratio in rows:
    print(f"| {name} | {ms:.1f} | {a['batch'] / ms * 1e3:.0f} | {gflop / ms * 1e3:.1f} | {ratio:.2f} |")
print(f"\nModel matrix products: {gflop:.2f} GFLOP per step; large sgemm (2048³) here: "
      f"{a['sgemm_gflops']:.0f} GFLOP/s (median of the rounds); GEMM floor {a['floor_ms']:.1f} ms. avtrain's "
      f"ratio is the median over its steps of step / floor, each floor from the sgemm rate measured "
      f"beside that step; PyTorch's is its median step over the median floor.")
PY
