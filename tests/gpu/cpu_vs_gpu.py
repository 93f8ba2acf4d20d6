#!/usr/bin/python3
"""A training run of the CI deck on the GPU against the same run on the CPU backend.

  FP32: the first step's loss within 1e-5 relative (and its grad norm within 1e-4): the whole
        step - front end, blocks, head, losses, backward - agrees;
  BF16: 40 steps on each reconcile (avtrain-reconcile PASS).
Exits 77 (CTest: skipped) when the device check finds no GPU.

usage: cpu_vs_gpu.py BIN_DIR SOURCE_DIR WORK_DIR
"""
import csv
import os
import sys

from checked_run import fresh_shards, gpu_count, run


def first_row(run_dir):
    with open(os.path.join(run_dir, "trace.csv"), newline="") as f:
        return next(csv.DictReader(f))


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    bin_dir, source, work = sys.argv[1:]
    if gpu_count(bin_dir) == 0:
        print("no CUDA device: skipped")
        sys.exit(77)
    shards = fresh_shards(bin_dir, work, shards=2, samples=256)
    deck = os.path.join(source, "inputs", "ci.ini")
    avtrain = os.path.join(bin_dir, "avtrain")
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
    print(run([sys.executable, os.path.join(source, "validation", "avtrain-reconcile"),
               os.path.join(work, "bf16_cpu"), os.path.join(work, "bf16_cuda")]))
    print("cpu_vs_gpu: ok")


if __name__ == "__main__":
    main()
