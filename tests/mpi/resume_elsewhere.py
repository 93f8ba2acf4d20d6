#!/usr/bin/python3
"""Resumes a run's checkpoint in another layout.

usage: resume_elsewhere.py SRC_RUN STEP OUT -- [MPIRUN ...] AVTRAIN DECK [OPTIONS...]
Copies SRC_RUN's checkpoint step-STEP (STEP as 7 digits) and what the run had written then (run.json,
the trace rows before STEP) into a fresh OUT, runs the
command with --out OUT (which resumes from that checkpoint), and checks that it did. The continued
traces are then compared with a straight run of the new layout (check_layouts.py same).
"""
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
import run_processes  # noqa: E402
from same_run import copy_traces  # noqa: E402


def main():
    argv = sys.argv[1:]
    if "--" not in argv or argv.index("--") != 3:
        sys.exit(__doc__)
    src, step, out, command = argv[0], int(argv[1]), argv[2], argv[4:]
    name = f"step-{step:07d}"
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(os.path.join(out, "checkpoints"))
    copy_traces(src, out, step)  # what the run had written when it took the checkpoint
    shutil.copytree(os.path.join(src, "checkpoints", name), os.path.join(out, "checkpoints", name))
    done = run_processes.run(command + ["--out", out], capture_output=True, text=True, timeout=600)
    print(done.stdout[-3000:] + done.stderr[-3000:])
    if done.returncode != 0:
        sys.exit(f"resume_elsewhere: exit {done.returncode}")
    if f"resuming from {os.path.join(out, 'checkpoints', name)}" not in done.stdout:
        sys.exit(f"resume_elsewhere: the run did not resume from {name}")
    print(f"resume_elsewhere: {src}/checkpoints/{name} resumed into {out}")


if __name__ == "__main__":
    main()
