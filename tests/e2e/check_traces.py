#!/usr/bin/python3
"""Checks a run's trace directory, or that two runs have identical traces.

usage: check_traces.py learns RUN_DIR [--min-drop F] [--min-val-acc A]
       check_traces.py same RUN_A RUN_B     the same run bit for bit: every column of trace.csv but the
                                            process's measurements, layers.csv, the final checkpoint
"""
import csv
import json
import math
import sys

from same_run import run_difference

# The columns this check reads; the files' headers are the program's (io/trace_columns.hpp), read
# from the files, and must hold these.
TRACE_COLUMNS = ("step", "loss", "grad_norm", "loss_scale", "skipped", "lr", "comm_ms", "val_loss", "val_acc")
LAYER_COLUMNS = ("step", "layer", "grad_norm", "param_norm", "act_absmax", "nonfinite")


def fail(message):
    print(f"check_traces: {message}")
    sys.exit(1)


def read_csv(path, columns):
    with open(path, newline="") as f:
        reader = csv.reader(f)
        header = next(reader)
        missing = [c for c in columns if c not in header]
        if missing or len(set(header)) != len(header):
            fail(f"{path}: header {header} lacks {missing} or repeats a column")
        rows = list(reader)
        if any(len(row) != len(header) for row in rows):
            fail(f"{path}: a row without a field for every column of {header}")
        return [dict(zip(header, row)) for row in rows]


def learns(run, min_drop=0.3, min_val_acc=None):
    rows = read_csv(f"{run}/trace.csv", TRACE_COLUMNS)
    layers = read_csv(f"{run}/layers.csv", LAYER_COLUMNS)
    manifest = json.load(open(f"{run}/run.json"))
    for key in ("config", "build", "data", "seed", "layout", "model"):
        if key not in manifest:
            fail(f"{run}/run.json has no '{key}'")
    if not manifest["data"]["shards"] or "git_commit" not in manifest["build"]:
        fail(f"{run}/run.json lacks the data fingerprint or build facts")
    steps = [int(r["step"]) for r in rows]
    if steps != list(range(len(rows))) or len(rows) < 10:
        fail(f"{run}/trace.csv: steps {steps[:5]}... are not 0..N-1 with N >= 10")
    losses = [float(r["loss"]) for r in rows]
    if not all(math.isfinite(x) for x in losses):
        fail("non-finite loss in the trace")
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    if not last < (1 - min_drop) * first:
        fail(f"loss did not fall by {min_drop:.0%}: first five {first:.4f}, last five {last:.4f}")
    with open(f"{run}/run.json") as f:
        mode = json.load(f)["config"].get("precision.mode", "fp32")
    for r in rows:
        if float(r["comm_ms"]) != 0:
            fail(f"step {r['step']}: comm_ms is not 0 in a single-rank run")
        if mode == "fp32" and (r["loss_scale"] != "1" or r["skipped"] != "0"):
            fail(f"step {r['step']}: loss_scale/skipped are not 1/0 in an fp32 run")
    evaluated = [r for r in rows if r["val_acc"] != ""]
    if not evaluated or evaluated[-1]["step"] != rows[-1]["step"]:
        fail("no validation on the last step")
    per_step = {}
    for layer in layers:
        per_step.setdefault(int(layer["step"]), []).append(layer["layer"])
    if sorted(per_step) != steps:
        fail("layers.csv does not cover every step")
    names = per_step[0]
    for expected in ("audio.conv", "audio.bn", "video.patch", "embed", "blocks.0.attn.qkv", "head.cls"):
        if expected not in names:
            fail(f"layers.csv has no row for {expected}")
    if any(layer["act_absmax"] == "" for layer in layers):
        fail("a layer row has no act_absmax")
    if min_val_acc is not None and float(evaluated[-1]["val_acc"]) < min_val_acc:
        fail(f"final val_acc {evaluated[-1]['val_acc']} < {min_val_acc}")
    print(f"{run}: {len(rows)} steps, loss {first:.4f} -> {last:.4f}, val_acc {evaluated[-1]['val_acc']}, "
          f"{len(names)} layer rows per step")


def same(run_a, run_b):
    diff, compared = run_difference(run_a, run_b)
    if diff:
        fail(diff)
    print(f"{run_a} and {run_b}: {compared}")


def main():
    args = sys.argv[1:]
    if len(args) >= 2 and args[0] == "learns":
        opts = dict(zip(args[2::2], args[3::2]))
        learns(args[1], float(opts.get("--min-drop", 0.3)),
               float(opts["--min-val-acc"]) if "--min-val-acc" in opts else None)
    elif len(args) == 3 and args[0] == "same":
        same(args[1], args[2])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
