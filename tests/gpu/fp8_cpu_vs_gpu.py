#!/usr/bin/python3
"""precision.mode fp8 on the GPU (cuBLASLt's FP8 products, the quantizing kernels) against the CPU's
exact emulation: the CI deck for 40 steps on the CPU, on the GPU unfused and with --device.fused 1,
each GPU run reconciled against the CPU's (avtrain-reconcile PASS), and run.json naming cuBLASLt's FP8
matmul as the products' engine. On a GPU older than sm_89 the run must be refused in one line naming
precision.mode (checked), and the test is skipped. Exits 77 (CTest: skipped) when the device check
finds no GPU.

usage: fp8_cpu_vs_gpu.py BIN_DIR SOURCE_DIR WORK_DIR
"""
import json
import os
import subprocess
import sys

from checked_run import ci_deck_on_a_gpu, run


def main():
    source, work, avtrain, deck, shards = ci_deck_on_a_gpu(sys.argv[1:], __doc__)
    common = [deck, "--data", shards, "--precision", "fp8", "--steps", "40"]
    probe = subprocess.run([avtrain, *common, "--device", "cuda", "--steps", "1", "--out", os.path.join(work, "probe")],
                           capture_output=True, text=True)
    refusal = [line for line in (probe.stdout + probe.stderr).splitlines() if "needs a GPU of sm_89" in line]
    if probe.returncode != 0 and refusal:
        if "precision.mode" not in refusal[0]:
            sys.exit(f"fp8_cpu_vs_gpu: the refusal does not name precision.mode: {refusal[0]}")
        print(f"fp8_cpu_vs_gpu: {refusal[0].strip()}: skipped (FP8 products need sm_89 or later)")
        sys.exit(77)
    if probe.returncode != 0:
        print(probe.stdout[-3000:], probe.stderr[-3000:])
        sys.exit(f"fp8_cpu_vs_gpu: one fp8 step on the GPU failed ({probe.returncode})")
    runs = {"cpu": ["--device", "cpu"], "cuda": ["--device", "cuda"],
            "cuda_fused": ["--device", "cuda", "--device.fused", "1"]}
    for name, options in runs.items():
        run([avtrain, *common, *options, "--out", os.path.join(work, name)])
    for name in ("cuda", "cuda_fused"):
        engine = json.load(open(os.path.join(work, name, "run.json")))["precision"].get("fp8_products", "")
        if "cuBLASLt FP8" not in engine:
            sys.exit(f"fp8_cpu_vs_gpu: {name}: run.json's fp8_products is {engine!r}, not cuBLASLt's FP8 matmul")
    reconcile = os.path.join(source, "validation", "avtrain-reconcile")
    for name in ("cuda", "cuda_fused"):
        print(run([sys.executable, reconcile, os.path.join(work, "cpu"), os.path.join(work, name)]))
    print("fp8_cpu_vs_gpu: ok")


if __name__ == "__main__":
    main()
