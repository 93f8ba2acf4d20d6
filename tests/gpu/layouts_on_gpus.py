#!/usr/bin/python3
"""The layout invariance of the mpi tests, on GPUs: the CI deck, FP32, 20 steps, global batch 64 in
micro-batches of 16, each layout against one rank at the CPU layout tests' tolerances (loss within
1e-6, grad norm within 1e-5 relative).

usage: layouts_on_gpus.py BIN_DIR SOURCE_DIR WORK_DIR MPIEXEC nccl|mpi

nccl: each rank on its own GPU (NCCL cannot put two ranks on one): the layouts that fit the GPUs
      there are; exits 77 (skipped) with fewer than 2.
mpi:  --comm mpi, staged through host memory, the ranks sharing the GPUs there are (all of them on one
      GPU where there is one): (pp, dp) = (1, 2), (2, 1) under 1F1B and under GPipe, (2, 2), ZeRO 1 at
      dp 2, which must also be zero 0 bit for bit (both sum on the host in the same order), cp 2 and
      pp 2 x cp 2 (parallel.cp: the head exchange of the Ulysses all-to-all on the GPU); then the
      (2, 2) run's checkpoint of step 8 resumes at (1, 1) and must match the straight (1, 1) run.
      Exits 77 without a GPU.
"""
import os
import sys

from checked_run import fresh_shards, gpu_count, run

LAYOUTS = {  # name: (ranks, options)
    "pp1_dp2": (2, ["--train.micro_batches", "2", "--dp", "2"]),
    "pp2_dp1_1f1b": (2, ["--train.micro_batches", "4", "--pp", "2", "--parallel.schedule", "1f1b"]),
    "pp2_dp1_gpipe": (2, ["--train.micro_batches", "4", "--pp", "2", "--parallel.schedule", "gpipe"]),
    "pp2_dp2": (4, ["--train.micro_batches", "2", "--pp", "2", "--dp", "2"]),
    "zero_pp1_dp2": (2, ["--train.micro_batches", "2", "--dp", "2", "--parallel.zero", "1"]),
    # parallel.cp: each sample's tokens over 2 ranks (the Ulysses all-to-all through NCCL or staged)
    "cp2": (2, ["--train.micro_batches", "4", "--parallel.cp", "2"]),
    "pp2_cp2": (4, ["--train.micro_batches", "4", "--pp", "2", "--parallel.cp", "2"]),
}


def main():
    if len(sys.argv) != 6 or sys.argv[5] not in ("nccl", "mpi"):
        sys.exit(__doc__)
    bin_dir, source, work, mpiexec, comm = sys.argv[1:]
    gpus = gpu_count(bin_dir)
    if gpus < (2 if comm == "nccl" else 1):
        print(f"{gpus} GPU(s): skipped ({'NCCL needs a GPU per rank, and 2 ranks at least' if comm == 'nccl' else 'no GPU'})")
        sys.exit(77)
    os.environ["AVTRAIN_H5PY_OPTIONAL"] = "1"  # a GPU node's python may lack h5py: 'identical' then compares the traces
    shards = fresh_shards(bin_dir, work, shards=4, samples=128)
    deck = os.path.join(source, "inputs", "ci.ini")
    check = os.path.join(source, "tests", "mpi", "check_layouts.py")
    avtrain = os.path.join(bin_dir, "avtrain")

    said = "collectives: NCCL" if comm == "nccl" else "collectives: MPI, staged through pinned host memory"

    def train(name, ranks, extra):
        out = run([mpiexec, "-n", str(ranks), "--bind-to", "none", "--oversubscribe", avtrain, deck, "--data", shards,
             "--device", "cuda", "--comm", comm, "--steps", "20", "--checkpoint.interval", "8",
             "--checkpoint.keep", "10", "--train.log_interval", "0", "--out", os.path.join(work, name)] + extra)
        if said not in out:
            sys.exit(f"layouts_on_gpus: {name} did not say '{said}': the run did not go through --comm {comm}")

    train("pp1_dp1", 1, ["--train.micro_batches", "4"])
    compared = []
    for name, (ranks, extra) in LAYOUTS.items():
        if comm == "nccl" and ranks > gpus:
            print(f"{name}: {ranks} ranks, {gpus} GPUs: not run under NCCL")
            continue
        train(name, ranks, extra)
        print(run([sys.executable, check, "same", os.path.join(work, "pp1_dp1"), os.path.join(work, name),
                   "1e-6", "1e-5"]))
        compared.append(name)
    if comm == "mpi":
        print(run([sys.executable, check, "identical", os.path.join(work, "pp1_dp2"), os.path.join(work, "zero_pp1_dp2")]))
        resumed = os.path.join(work, "resumed_pp2_dp2_at_pp1_dp1")
        print(run([sys.executable, os.path.join(source, "tests", "mpi", "resume_elsewhere.py"),
                   os.path.join(work, "pp2_dp2"), "8", resumed, "--", mpiexec, "-n", "1", "--bind-to", "none", avtrain,
                   deck, "--data", shards, "--device", "cuda", "--comm", comm, "--steps", "20",
                   "--train.log_interval", "0", "--train.micro_batches", "4"]))
        print(run([sys.executable, check, "same", os.path.join(work, "pp1_dp1"), resumed, "1e-6", "1e-5"]))
        compared.append("a (2, 2) checkpoint resumed at (1, 1)")
    print(f"layouts_on_gpus ({comm}, {gpus} GPU(s)): {', '.join(compared)} match one rank")


if __name__ == "__main__":
    main()
