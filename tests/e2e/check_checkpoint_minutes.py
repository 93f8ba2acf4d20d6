#!/usr/bin/python3
"""checkpoint.minutes: checkpoints by wall time. With --checkpoint.interval 0, a run whose minutes
are shorter than any step (1e-6 min = 60 us) commits a checkpoint after every step; the same run
with the default (30 minutes, as run.json says) or 0 (off) commits only the last step's; with --checkpoint.interval -1 (a benchmark's run) it
commits none, whatever the minutes say, and no checkpoints folder appears. All end with the same
traces (a checkpoint changes no bit of the run).

usage: check_checkpoint_minutes.py WORK -- [MPIRUN ...] AVTRAIN DECK [OPTIONS...]
"""
import json
import os
import shutil
import sys

import run_processes
from same_run import committed, trace_difference


def fail(message):
    print(f"check_checkpoint_minutes: {message}")
    sys.exit(1)


def main():
    argv = sys.argv[1:]
    if "--" not in argv or argv.index("--") != 1:
        sys.exit(__doc__)
    work, command = argv[0], argv[2:]
    shutil.rmtree(work, ignore_errors=True)
    steps = 6
    runs = {}
    # "rarely" takes the default (30 minutes), "off" turns checkpoints by time off (0).
    for name, interval, minutes in (("often", "0", "0.000001"), ("rarely", "0", None), ("off", "0", "0"),
                                    ("none", "-1", "0.000001")):
        out = os.path.join(work, name)
        by_time = ["--checkpoint.minutes", minutes] if minutes is not None else []
        p = run_processes.run(command + ["--out", out, "--steps", str(steps), "--checkpoint.interval", interval,
                                      "--checkpoint.keep", "100"] + by_time,
                           capture_output=True, text=True, timeout=300)
        if p.returncode:
            fail(f"the run with checkpoint.interval {interval}, minutes {minutes} failed:\n{p.stdout}{p.stderr}")
        runs[name] = committed(out)
    want_often = [f"step-{s:07d}" for s in range(1, steps + 1)]
    if runs["often"] != want_often:
        fail(f"checkpoint.minutes 1e-6 committed {runs['often']}, expected one after every step {want_often}")
    default = json.load(open(os.path.join(work, "rarely", "run.json")))["config"].get("checkpoint.minutes")
    if default != 30:
        fail(f"run.json says checkpoint.minutes {default} by default, expected 30")
    for name in ("rarely", "off"):
        if runs[name] != [f"step-{steps:07d}"]:
            fail(f"checkpoint.minutes {'30 (the default)' if name == 'rarely' else '0'} committed {runs[name]}, "
                 "expected only the last step's")
    if runs["none"] or os.path.exists(os.path.join(work, "none", "checkpoints")):
        fail(f"checkpoint.interval -1 wrote checkpoints: {os.listdir(os.path.join(work, 'none', 'checkpoints'))}")
    for name in ("often", "none"):
        diff = trace_difference(os.path.join(work, "rarely"), os.path.join(work, name))
        if diff:
            fail(diff)
    print(f"check_checkpoint_minutes: minutes 1e-6: {len(runs['often'])} checkpoints (every step); "
          f"minutes 30 (the default) and 0: {runs['rarely']} (the last step's); interval -1: none; the same traces; ok")


if __name__ == "__main__":
    main()
