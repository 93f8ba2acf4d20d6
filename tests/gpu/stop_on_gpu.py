#!/usr/bin/python3
"""SIGUSR1 to a 2-rank job on the GPU (pp 2, bf16, --comm mpi: both ranks on one GPU where there is
one): every rank exits 75 with a checkpoint of its last step, and the same command then finishes with
the traces of a run that was never stopped (tests/e2e/check_stop.py usr1). Exits 77 without a GPU.

usage: stop_on_gpu.py BIN_DIR SOURCE_DIR WORK_DIR MPIEXEC
"""
import os
import sys

from checked_run import fresh_shards, gpu_count, run


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    bin_dir, source, work, mpiexec = sys.argv[1:]
    if gpu_count(bin_dir) < 1:
        print("no GPU: skipped")
        sys.exit(77)
    shards = fresh_shards(bin_dir, work, shards=4, samples=128)
    print(run([sys.executable, os.path.join(source, "tests", "e2e", "check_stop.py"), os.path.join(work, "stop"), "usr1",
               "--", mpiexec, "-n", "2", "--bind-to", "none", "--oversubscribe", os.path.join(bin_dir, "avtrain"),
               os.path.join(source, "inputs", "ci.ini"), "--data", shards, "--device", "cuda", "--comm", "mpi",
               "--pp", "2", "--train.micro_batches", "2", "--precision", "bf16", "--steps", "200"]))


if __name__ == "__main__":
    main()
