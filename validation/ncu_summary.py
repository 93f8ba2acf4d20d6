#!/usr/bin/python3
"""GPU time per kind of kernel, from Nsight Compute's per-kernel summary of one avtrain run:

  ncu --metrics gpu__time_duration.sum --print-summary per-kernel --csv avtrain ... > ncu.csv
  ncu_summary.py ncu.csv [TITLE]

The CSV may have avtrain's own output lines before ncu's header (they are skipped). Prints a
markdown table: each group's launches, milliseconds and share of the run's kernel time, the groups
of docs/cuda.md's profile (the attention products, fp32 -> 16-bit rounding, packing, the softmax,
the sm_90 GEMMs, cuDNN's fused attention, ...), largest first, then the five largest kernels by name.
"""
import csv
import io
import re
import sys

# (group, pattern on the kernel's name), first match wins.
GROUPS = [
    # cuDNN's SDPA kernels (cudnn_generated_..._sdpa_..._flash_fprop/bprop, fmha) and the glue of
    # cuda_cudnn_attention.cu (the mask's bias, O and dq/dk/dv widened, the row statistics): before the
    # own kernel's group ("flash_") and the sm_90 GEMMs ("sm90_"), which their names also match.
    ("fused attention, cuDNN SDPA (cudnn*, sdpa, fmha; key_bias, widen, stats_in/out)",
     r"cudnn|sdpa|fmha|key_bias_kernel|widen_kernel|stats_(in|out)_kernel"),
    ("fused attention, own kernel (flash_*, row_dot)", r"flash_|row_dot"),
    ("attention products, cuBLAS strided-batched (cutlass_75 / sm80 tensorop)", r"cutlass|s1688gemm|s16816gemm"),
    ("attention softmax and its backward", r"softmax"),
    ("matrix products, sm_90 cuBLAS (nvjet, sm90)", r"nvjet|sm90_"),
    ("matrix products, other cuBLAS", r"gemm|xmma"),
    ("fp32 -> 16-bit rounding (round_kernel)", r"round_kernel"),
    ("16-bit packing (pack_kernel, unpack_kernel)", r"pack_kernel"),
    ("AdamW", r"adamw"),
    ("LayerNorm", r"layernorm|LayerNorm"),
    ("GELU", r"gelu"),
    ("bias, add, fill, scale", r"bias_grad|add_kernel|fill_rows|scale_kernel|fill_kernel"),
    ("statistics and reductions", r"reduce|stats|partials|sum_squares|abs_max"),
]


def rows(path):
    with open(path, newline="", errors="replace") as f:
        lines = f.read().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"') or line.startswith('"Process ID"')), None)
    if start is None:
        sys.exit(f"ncu_summary: {path}: no ncu CSV header (\"Process ID\" or \"ID\") found")
    return list(csv.DictReader(io.StringIO("\n".join(lines[start:]))))


def kernel_times(table):
    """(name, launches, total ns) per kernel, from --print-summary per-kernel (Invocations, Average)
    or from one row per launch (Metric Value)."""
    out = {}
    for r in table:
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        name = r["Kernel Name"]
        if "Average" in r and r.get("Invocations"):
            launches = int(r["Invocations"].replace(",", ""))
            ns = float(r["Average"].replace(",", "")) * launches
        else:
            launches, ns = 1, float(r["Metric Value"].replace(",", ""))
        unit = r.get("Metric Unit", "ns")
        ns *= {"ns": 1, "nsecond": 1, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6}.get(unit, 1)
        n0, t0 = out.get(name, (0, 0.0))
        out[name] = (n0 + launches, t0 + ns)
    return out


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    title = sys.argv[2] if len(sys.argv) == 3 else sys.argv[1]
    kernels = kernel_times(rows(sys.argv[1]))
    if not kernels:
        sys.exit(f"ncu_summary: {sys.argv[1]}: no gpu__time_duration.sum rows")
    total = sum(t for _, t in kernels.values())
    groups = {}
    for name, (launches, ns) in kernels.items():
        group = next((g for g, pattern in GROUPS if re.search(pattern, name)), "other")
        n0, t0 = groups.get(group, (0, 0.0))
        groups[group] = (n0 + launches, t0 + ns)
    print(f"{title}: {total / 1e6:.2f} ms of kernel time, {sum(n for n, _ in kernels.values())} launches")
    print("| kernels | launches | ms | share |")
    print("|---|---|---|---|")
    for group, (launches, ns) in sorted(groups.items(), key=lambda g: -g[1][1]):
        print(f"| {group} | {launches} | {ns / 1e6:.2f} | {ns / total:.1%} |")
    print("largest kernels:")
    for name, (launches, ns) in sorted(kernels.items(), key=lambda k: -k[1][1])[:5]:
        print(f"  {ns / total:5.1%}  {launches:4d} x  {name[:110]}")


if __name__ == "__main__":
    main()
