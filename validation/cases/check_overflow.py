#!/usr/bin/python3
"""Checks a run of the overflow deck: the scaler skipped steps at the start and mid-run, halved
the scale after each, never let a non-finite value reach the weights, did not advance the LR
schedule on a skipped step, and training recovered.

usage: check_overflow.py RUN_DIR
"""
import csv
import json
import math
import sys


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    run = sys.argv[1]
    with open(f"{run}/trace.csv") as f:
        trace = list(csv.DictReader(f))
    with open(f"{run}/layers.csv") as f:
        layers = list(csv.DictReader(f))
    problems = []
    skipped = [int(r["step"]) for r in trace if r["skipped"] == "1"]
    scale = [float(r["loss_scale"]) for r in trace]
    if not skipped:
        problems.append("no step was skipped")
    if not any(s >= 10 for s in skipped):
        problems.append(f"no overflow mid-run (skipped steps {skipped})")
    for s in skipped:
        if s + 1 < len(scale) and scale[s + 1] != scale[s] * 0.5:
            problems.append(f"step {s} was skipped but the scale went {scale[s]} -> {scale[s + 1]}, not halved")
    grown = [i for i in range(1, len(scale)) if scale[i] > scale[i - 1]]
    if not grown:
        problems.append("the scale never grew back")
    bad_weights = [r for r in layers if not math.isfinite(float(r["param_norm"]))]
    if bad_weights:
        problems.append(f"non-finite weights in {bad_weights[0]['layer']} at step {bad_weights[0]['step']}")
    applied = [r for r in trace if r["skipped"] == "0"]
    # The first applied update takes the schedule's first value, however many steps were skipped.
    with open(f"{run}/run.json") as f:
        config = json.load(f)["config"]
    first_lr = float(config["optim.lr"]) / int(config["optim.warmup_steps"])
    if skipped and skipped[0] == 0 and not math.isclose(float(applied[0]["lr"]), first_lr, rel_tol=1e-6):
        problems.append(f"first applied step {applied[0]['step']} used lr {applied[0]['lr']}, "
                        f"not the schedule's first {first_lr:g}: skipped steps advanced it")
    if any(float(r["lr"]) != 0 for r in trace if r["skipped"] == "1"):
        problems.append("a skipped step reports a learning rate")
    if any(not math.isfinite(float(r["loss"])) or not math.isfinite(float(r["grad_norm"])) for r in applied):
        problems.append("an applied step has a non-finite loss or grad_norm")
    first = sum(float(r["loss"]) for r in applied[:5]) / 5
    last = sum(float(r["loss"]) for r in applied[-5:]) / 5
    if not last < 0.9 * first:
        problems.append(f"training did not recover: loss {first:.4f} at the start, {last:.4f} at the end")
    print(f"skipped steps {skipped}; scale {scale[0]:g} -> {scale[-1]:g}; loss {first:.4f} -> {last:.4f}")
    for p in problems:
        print("check_overflow:", p)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
