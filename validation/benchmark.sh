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
bench() { "$root/build/cpu/bin/avtrain-bench" --deck "$root/inputs/quickstart.ini" --threads "$threads" \
            --steps "$steps" --precision "$1" | tail -n 1; }
avtrain_json=$(bench fp32)
avtrain_bf16_json=$(bench bf16)
avtrain_fp16_json=$(bench fp16)
torch_json=$(/usr/bin/python3 "$here/torch_avnet.py" bench --threads "$threads" --steps "$steps" | tail -n 1)
# PyTorch's bf16 autocast takes seconds a step on CPUs without bf16 units: fewer steps.
torch_bf16_json=$(/usr/bin/python3 "$here/torch_avnet.py" bench --threads "$threads" --steps 5 --autocast bf16 |
                  tail -n 1)

/usr/bin/python3 - "$avtrain_json" "$torch_json" "$avtrain_bf16_json" "$avtrain_fp16_json" "$torch_bf16_json" <<'PY'
import json, sys
a, t, ab, ah, tb = (json.loads(x) for x in sys.argv[1:6])
gflop = a["gemm_gflop_per_step"]
print(f"Quickstart shape (width 128, 4 blocks, 95 tokens/sample, batch {a['batch']}), "
      f"{a['threads']} threads, median of {a['steps']} steps:\n")
print("| code | precision | step (ms) | samples/s | GFLOP/s | × fp32 GEMM floor |")
print("|---|---|---:|---:|---:|---:|")
rows = (("avtrain", "fp32", a["median_step_ms"], a["floor_ratio"]),
        ("avtrain", "bf16", ab["median_step_ms"], ab["floor_ratio"]),
        ("avtrain", "fp16 (dynamic scaling)", ah["median_step_ms"], ah["floor_ratio"]),
        (f"PyTorch {t['torch']}", "fp32", t["median_step_ms"], t["median_step_ms"] / a["floor_ms"]),
        (f"PyTorch {tb['torch']}", "bf16 autocast", tb["median_step_ms"], tb["median_step_ms"] / a["floor_ms"]))
for name, prec, ms, ratio in rows:
    print(f"| {name} | {prec} | {ms:.1f} | {a['batch'] / ms * 1e3:.0f} | {gflop / ms * 1e3:.1f} | {ratio:.2f} |")
print(f"\navtrain bf16 step / avtrain fp32 step: {ab['median_step_ms'] / a['median_step_ms']:.2f}; "
      f"avtrain bf16 / PyTorch bf16 autocast: {ab['median_step_ms'] / tb['median_step_ms']:.3f}")
import ctypes, os
flags = next((l.split(":", 1)[1].split() for l in open("/proc/cpuinfo") if l.startswith("flags")), [])
model = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
blas = ctypes.CDLL("libopenblas.so.0")
blas.openblas_get_corename.restype = ctypes.c_char_p
forced = os.environ.get("OPENBLAS_CORETYPE")
print(f"\nMachine: {model}, {os.cpu_count()} cores, "
      f"{'AVX-512 with BF16' if 'avx512_bf16' in flags else 'AVX-512' if 'avx512f' in flags else 'AVX2' if 'avx2' in flags else 'no AVX2'}; "
      f"OpenBLAS kernels (both codes' fp32 products): {blas.openblas_get_corename().decode()}"
      + (f" (forced by OPENBLAS_CORETYPE={forced} in the environment)" if forced else ""))
print(f"\nModel matrix products: {gflop:.2f} GFLOP per step; large sgemm (2048³) here: "
      f"{a['sgemm_gflops']:.0f} GFLOP/s (median of the rounds); GEMM floor {a['floor_ms']:.1f} ms. avtrain's "
      f"ratio is the median over its steps of step / floor, each floor from the sgemm rate measured "
      f"beside that step; PyTorch's is its median step over the median floor.")
PY
