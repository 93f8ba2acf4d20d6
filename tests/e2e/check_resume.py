#!/usr/bin/python3
"""Resuming from a checkpoint gives the run that never stopped, bit for bit.

usage: check_resume.py WORK [--interval N] [--straight "OPTIONS"] [--resumed "OPTIONS"] [--ignore COL,...]
                       -- [MPIRUN ...] AVTRAIN DECK [AVTRAIN OPTIONS...]

--straight and --resumed add options to one of the two runs only (space-separated), for what a
resume need not match: e.g. --straight "--train.recompute blocks" --resumed "--train.recompute none"
--ignore act_mb (what the activations kept measure then differs).

Trains the deck straight into WORK/straight with a checkpoint every --interval steps (keeping
them all); copies into WORK/resumed its first checkpoint and what the run had written when it took
it (run.json, and the rows of the traces before that step); runs the same command there, which
resumes from that checkpoint (--resume auto) and writes the rest; then
checks that trace.csv agrees in every column but the measurements of the process (step_ms,
data_wait_ms, comm_ms, samples_per_s, mem_peak_mb, bubble), that layers.csv agrees in every column, and
that the final checkpoints hold the same datasets with the same bits. Exit 0 when they do.
"""
import argparse
import os
import shutil
import subprocess
import sys

import run_processes
from same_run import checkpoint_difference, copy_traces, rows, trace_difference


def fail(message):
    print(f"check_resume: {message}")
    sys.exit(1)


def run(command, log):
    with open(log, "w") as f:
        done = run_processes.run(command, stdout=f, stderr=subprocess.STDOUT, timeout=600)
    if done.returncode != 0:
        print(open(log).read()[-3000:])
        fail(f"{' '.join(command)} exited {done.returncode} (log {log})")


def main():
    argv = sys.argv[1:]
    if "--" not in argv:
        sys.exit(__doc__)
    cut = argv.index("--")
    p = argparse.ArgumentParser()
    p.add_argument("work")
    p.add_argument("--interval", type=int, default=4)
    p.add_argument("--straight", default="", help="options of the straight run alone")
    p.add_argument("--resumed", default="", help="options of the resumed run alone")
    p.add_argument("--ignore", default="", help="trace.csv columns not compared, comma-separated")
    args = p.parse_args(argv[:cut])
    command = argv[cut + 1:]
    if len(command) < 2:
        p.error("give -- [MPIRUN ...] AVTRAIN DECK [OPTIONS...]")
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    straight, resumed = os.path.join(args.work, "straight"), os.path.join(args.work, "resumed")
    common = command + ["--checkpoint.interval", str(args.interval), "--checkpoint.keep", "1000"]
    run(common + args.straight.split() + ["--out", straight], os.path.join(args.work, "straight.log"))
    ckdir = os.path.join(straight, "checkpoints")
    steps = sorted(d for d in os.listdir(ckdir) if d.startswith("step-"))
    if len(steps) < 2:
        fail(f"{ckdir}: expected at least two checkpoints, found {steps}")
    first, last = steps[0], steps[-1]
    os.makedirs(os.path.join(resumed, "checkpoints"))
    copy_traces(straight, resumed, int(first[len("step-"):]))
    shutil.copytree(os.path.join(ckdir, first), os.path.join(resumed, "checkpoints", first))
    run(common + args.resumed.split() + ["--out", resumed], os.path.join(args.work, "resumed.log"))
    log = open(os.path.join(args.work, "resumed.log")).read()
    if f"resuming from {os.path.join(resumed, 'checkpoints', first)}" not in log:
        fail(f"the second run did not resume from {first}:\n{log[-2000:]}")

    diff = trace_difference(straight, resumed, also_ignore=set(filter(None, args.ignore.split(","))))
    if diff:
        fail(diff)
    diff, count = checkpoint_difference(os.path.join(ckdir, last), os.path.join(resumed, "checkpoints", last))
    if diff:
        fail(diff)
    print(f"check_resume: {last}: {count} datasets equal bit for bit")
    print(f"check_resume: resumed from {first}: {len(rows(os.path.join(straight, 'trace.csv')))} trace rows "
          "equal (but the measurements), layers.csv equal; ok")


if __name__ == "__main__":
    main()
