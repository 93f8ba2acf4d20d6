#!/usr/bin/python3
"""What a start does with an --out that holds a run already (docs/checkpoint.md, "Starting afresh"):

1. --overwrite starts afresh even under --resume auto (the default) and with committed checkpoints
   there: it trains from step 0 (the traces of a straight run of its own, one start in run.json),
   and the earlier run's checkpoints are gone, so a later --resume auto finds only its own.
2. A start of the same run that was killed before its first checkpoint (traces and run.json, no
   committed checkpoint) is started again by --resume auto, from step 0.
3. Traces of another run (another seed) with no checkpoint to continue from are refused, and so is
   --overwrite with --resume PATH.

usage: check_fresh_start.py WORK -- MPIRUN... AVTRAIN DECK [OPTIONS...]
"""
import json
import os
import shutil
import sys

import run_processes
from same_run import committed, trace_difference


def fail(message):
    print(f"check_fresh_start: {message}")
    sys.exit(1)


def train(command, what, expect_exit=0):
    done = run_processes.run(command, capture_output=True, text=True, timeout=600)
    if done.returncode != expect_exit:
        fail(f"{what}: exit {done.returncode}, expected {expect_exit}\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return done


def main():
    argv = sys.argv[1:]
    if len(argv) < 3 or argv[1] != "--":
        sys.exit(__doc__)
    work, command = argv[0], argv[2:]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    out, straight = os.path.join(work, "out"), os.path.join(work, "straight")
    short = ["--steps", "6", "--checkpoint.interval", "3"]

    train(command + ["--out", straight] + short, "the straight 6-step run")
    train(command + ["--out", out, "--steps", "12", "--checkpoint.interval", "4"], "the earlier 12-step run")
    if committed(out) != ["step-0000008", "step-0000012"]:
        fail(f"the earlier run committed {committed(out)}")

    # 1. --overwrite: a fresh start, whatever --resume auto would have found.
    done = train(command + ["--out", out, "--overwrite"] + short, "--overwrite")
    if "resuming from" in done.stdout or "--overwrite: a fresh start" not in done.stdout:
        fail(f"--overwrite did not say it starts afresh:\n{done.stdout[-2000:]}")
    starts = json.load(open(os.path.join(out, "run.json")))["starts"]
    if [s["step"] for s in starts] != [0]:
        fail(f"--overwrite: run.json's starts {starts}, expected one at step 0")
    if committed(out) != ["step-0000003", "step-0000006"]:
        fail(f"--overwrite: committed checkpoints {committed(out)}, expected only its own step-0000003 and -6")
    diff = trace_difference(straight, out)
    if diff:
        fail(f"--overwrite: {diff}")
    print("check_fresh_start: --overwrite under --resume auto trained from step 0 with the straight run's traces "
          "and removed the earlier run's checkpoints; ok")

    # 2. The same run, killed before its first checkpoint: its traces and run.json, no checkpoint.
    shutil.rmtree(os.path.join(out, "checkpoints"))
    done = train(command + ["--out", out] + short, "a restart of a start killed before its first checkpoint")
    if "starts again from step 0" not in done.stdout:
        fail(f"the restart did not say it starts again:\n{done.stdout[-2000:]}")
    diff = trace_difference(straight, out)
    if diff:
        fail(f"the restart: {diff}")
    print("check_fresh_start: --resume auto started again, from step 0, the same run killed before its first "
          "checkpoint; ok")

    # 3. Refusals, each naming what to do.
    shutil.rmtree(os.path.join(out, "checkpoints"))
    done = train(command + ["--out", out, "--seed", "99"] + short, "another run into the traces", expect_exit=1)
    if "already holds the traces of another run (run.json) and no committed checkpoint" not in done.stderr:
        fail(f"another run's traces: not refused as such:\n{done.stderr[-2000:]}")
    done = train(command + ["--out", out, "--overwrite", "--resume", os.path.join(straight, "checkpoints",
                                                                                  "step-0000006")] + short,
                 "--overwrite with --resume PATH", expect_exit=1)
    if "--overwrite starts the run afresh, --resume" not in done.stderr:
        fail(f"--overwrite with --resume PATH: not refused as such:\n{done.stderr[-2000:]}")
    print("check_fresh_start: another run's traces, and --overwrite with --resume PATH, refused; ok")


if __name__ == "__main__":
    main()
