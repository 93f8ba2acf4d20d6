#!/usr/bin/python3
"""--eval-only on a finished run's last checkpoint gives its last evaluation, bit for bit.

usage: check_eval_only.py OUT -- [MPIRUN ...] AVTRAIN DECK [OPTIONS...]   (the run's --out is OUT)
Runs the command with --out OUT --eval-only, then compares OUT/eval.json with the last row of
OUT/trace.csv that has val_loss (the run evaluates after its last step, whose checkpoint is loaded).
"""
import csv
import json
import os
import sys

import run_processes


def main():
    argv = sys.argv[1:]
    if "--" not in argv or argv.index("--") != 1:
        sys.exit(__doc__)
    out, command = argv[0], argv[2:]
    before = os.path.getmtime(os.path.join(out, "trace.csv"))
    done = run_processes.run(command + ["--out", out, "--eval-only"], capture_output=True, text=True, timeout=300)
    print(done.stdout + done.stderr)
    if done.returncode != 0:
        sys.exit(f"check_eval_only: exit {done.returncode}")
    with open(os.path.join(out, "eval.json")) as f:
        got = json.load(f)
    with open(os.path.join(out, "trace.csv"), newline="") as f:
        last = [r for r in csv.DictReader(f) if r["val_loss"]][-1]
    if os.path.getmtime(os.path.join(out, "trace.csv")) != before:
        sys.exit("check_eval_only: --eval-only touched trace.csv")
    want = {"val_loss": float(last["val_loss"]), "val_acc": float(last["val_acc"])}
    if int(last["step"]) + 1 != got["step"] or any(got[k] != v for k, v in want.items()):
        sys.exit(f"check_eval_only: eval.json {got} against the last evaluation {last['step']}: {want}")
    print(f"check_eval_only: {got['checkpoint']}: val_loss {got['val_loss']!r}, val_acc {got['val_acc']!r}, "
          "as the run's last evaluation; ok")


if __name__ == "__main__":
    main()
