#!/usr/bin/python3
"""The layout invariance of the mpi tests, on GPUs with NCCL: the CI deck, FP32, 20 steps, global
batch 64 in micro-batches of 16, at (pp, dp) = (1, 2) and (2, 1) against (1, 1), each rank on its
own GPU. Loss within 1e-6, grad norm within 1e-5 relative. Exits 77 (skipped) with fewer than 2 GPUs.

usage: layouts_on_gpus.py BIN_DIR SOURCE_DIR WORK_DIR MPIEXEC
"""
import os
import sys

from checked_run import fresh_shards, gpu_count, run


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    bin_dir, source, work, mpiexec = sys.argv[1:]
    gpus = gpu_count(bin_dir)
    if gpus < 2:
        print(f"{gpus} GPU(s): skipped")
        sys.exit(77)
    shards = fresh_shards(bin_dir, work, shards=4, samples=128)
    deck = os.path.join(source, "inputs", "ci.ini")
    layouts = {"pp1_dp1": (1, ["--train.micro_batches", "4"]),
               "pp1_dp2": (2, ["--train.micro_batches", "2", "--dp", "2"]),
               "pp2_dp1": (2, ["--train.micro_batches", "4", "--pp", "2"])}
    for name, (ranks, extra) in layouts.items():
        run([mpiexec, "-n", str(ranks), "--bind-to", "none", os.path.join(bin_dir, "avtrain"), deck, "--data", shards,
             "--device", "cuda", "--steps", "20", "--out", os.path.join(work, name)] + extra)
    check = os.path.join(source, "tests", "mpi", "check_layouts.py")
    for name in ("pp1_dp2", "pp2_dp1"):
        print(run([sys.executable, check, "same", os.path.join(work, "pp1_dp1"), os.path.join(work, name),
                   "1e-6", "1e-5"]))
    print("layouts_on_gpus: ok")


if __name__ == "__main__":
    main()
