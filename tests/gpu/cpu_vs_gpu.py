#!/usr/bin/python3
"""A training run of the CI deck on the GPU against the same run on the CPU backend.

  FP32: the first step's loss within 1e-5 relative (and its grad norm within 1e-4): the whole
        step - front end, blocks, head, losses, backward - agrees;
  BF16: 40 steps on each reconcile (avtrain-reconcile PASS), on the GPU unfused and with
        --device.fused 1 (attention in FlashAttention kernels, the linears through cuBLASLt's
        epilogues: its log says both);
  the fused BF16 run twice: the same trace.csv and layers.csv (but the measured columns).
Exits 77 (CTest: skipped) when the device check finds no GPU.

usage: cpu_vs_gpu.py BIN_DIR SOURCE_DIR WORK_DIR
"""
import csv
import os
import sys

from checked_run import ci_deck_on_a_gpu, run


def first_row(run_dir):
    with open(os.path.join(run_dir, "trace.csv"), newline="") as f:
        return next(csv.DictReader(f))


def main():
    source, work, avtrain, deck, shards = ci_deck_on_a_gpu(sys.argv[1:], __doc__)
    for device in ("cpu", "cuda"):
        run([avtrain, deck, "--data", shards, "--device", device, "--steps", "1", "--out",
             os.path.join(work, f"fp32_{device}")])
    a, b = first_row(os.path.join(work, "fp32_cpu")), first_row(os.path.join(work, "fp32_cuda"))
    for column, tolerance in (("loss", 1e-5), ("grad_norm", 1e-4)):
        x, y = float(a[column]), float(b[column])
        rel = abs(x - y) / abs(x)
        print(f"cpu_vs_gpu: fp32 step 0 {column}: cpu {x!r} gpu {y!r} relative difference {rel:.3g}")
        if not rel <= tolerance:
            sys.exit(f"cpu_vs_gpu: fp32 {column} differs by {rel:.3g} > {tolerance}")
    for device in ("cpu", "cuda"):
        run([avtrain, deck, "--data", shards, "--device", device, "--precision", "bf16", "--steps", "40",
             "--out", os.path.join(work, f"bf16_{device}")])
    reconcile = os.path.join(source, "validation", "avtrain-reconcile")
    print(run([sys.executable, reconcile, os.path.join(work, "bf16_cpu"), os.path.join(work, "bf16_cuda")]))
    for name in ("bf16_fused", "bf16_fused_again"):
        log = run([avtrain, deck, "--data", shards, "--device", "cuda", "--device.fused", "1", "--precision", "bf16",
                   "--steps", "40", "--out", os.path.join(work, name)])
        if "attention fused" not in log:
            sys.exit("cpu_vs_gpu: --device.fused 1 did not run attention fused (no 'attention fused' in the log)")
        if "cuBLASLt epilogues" not in log:
            sys.exit("cpu_vs_gpu: --device.fused 1 did not take the linears' cuBLASLt epilogues (not in the log)")
    print(run([sys.executable, reconcile, os.path.join(work, "bf16_cpu"), os.path.join(work, "bf16_fused")]))
    sys.path.insert(0, os.path.join(source, "tests", "e2e"))
    from same_run import trace_difference
    diff = trace_difference(os.path.join(work, "bf16_fused"), os.path.join(work, "bf16_fused_again"))
    if diff:
        sys.exit(f"cpu_vs_gpu: the fused bf16 run twice differs: {diff}")
    print("cpu_vs_gpu: fused bf16 twice: the same trace.csv and layers.csv")
    print("cpu_vs_gpu: ok")


if __name__ == "__main__":
    main()
