#!/usr/bin/python3
"""--resume auto over a damaged newest checkpoint: reported, the previous committed one used, and
the run ends as the run that was never damaged.

usage: check_damaged_fallback.py WORK -- [MPIRUN ...] AVTRAIN DECK [OPTIONS...]
Trains straight with a checkpoint every 10 steps (all kept); copies the run, its trace rows after the
previous checkpoint spoilt (loss -1: only a resume that writes them again can restore them);
changes one byte of every stage file of the copy's newest checkpoint (the last step's), in the middle
of its largest chunk of values (where Fletcher-32 guards them; a byte in space the file does not use
would change nothing), and runs again: the log must report the damage and resume from the previous committed
checkpoint, and trace.csv and layers.csv must equal the straight one's (but the measurements).
"""
import glob
import os
import shutil
import sys

import h5py

import run_processes
from same_run import copy_traces, trace_difference


def middle_of_largest_chunk(path):
    """The file offset of the middle byte of the largest chunk any dataset of the HDF5 file at PATH holds."""
    chunks = []
    with h5py.File(path, "r") as f:
        def visit(_, obj):
            if isinstance(obj, h5py.Dataset) and obj.chunks:
                chunks.extend(obj.id.get_chunk_info(i) for i in range(obj.id.get_num_chunks()))
        f.visititems(visit)
    largest = max(chunks, key=lambda c: c.size)
    return largest.byte_offset + largest.size // 2


def main():
    argv = sys.argv[1:]
    if "--" not in argv or argv.index("--") != 1:
        sys.exit(__doc__)
    work, command = argv[0], argv[2:] + ["--checkpoint.interval", "10", "--checkpoint.keep", "100"]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    straight, damaged = os.path.join(work, "straight"), os.path.join(work, "damaged")
    if run_processes.run(command + ["--out", straight], capture_output=True, timeout=600).returncode:
        sys.exit("check_damaged_fallback: the straight run failed")
    shutil.copytree(os.path.join(straight, "checkpoints"), os.path.join(damaged, "checkpoints"))
    steps = sorted(glob.glob(os.path.join(damaged, "checkpoints", "step-*")))
    newest, previous = steps[-1], steps[-2]
    step_of = lambda path: int(os.path.basename(path)[len("step-"):])  # noqa: E731
    copy_traces(straight, damaged, step_of(newest), spoil_from=step_of(previous))
    for path in glob.glob(os.path.join(newest, "stage-*.h5")):
        with open(path, "r+b") as f:
            f.seek(middle_of_largest_chunk(path))
            byte = f.read(1)
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([byte[0] ^ 0xFF]))
    done = run_processes.run(command + ["--out", damaged], capture_output=True, text=True, timeout=600)
    print(done.stdout[-2500:] + done.stderr[-2500:])
    if done.returncode != 0:
        sys.exit(f"check_damaged_fallback: exit {done.returncode}")
    if f"checkpoint {newest} is damaged; trying the previous committed one" not in done.stdout:
        sys.exit("check_damaged_fallback: the damage was not reported")
    if f"resuming from {previous}" not in done.stdout:
        sys.exit(f"check_damaged_fallback: did not resume from {previous}")
    diff = trace_difference(straight, damaged)
    if diff:
        sys.exit(f"check_damaged_fallback: {diff}")
    print(f"check_damaged_fallback: {os.path.basename(newest)} damaged, resumed from {os.path.basename(previous)}, "
          "the same traces; ok")


if __name__ == "__main__":
    main()
