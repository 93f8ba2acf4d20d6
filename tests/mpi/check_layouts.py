#!/usr/bin/python3
"""Checks on the traces of runs in different pp x dp layouts.

  same BASE CAND LOSS_RTOL GNORM_RTOL [--first N]
                                         loss and grad_norm per step agree within the relative
                                         tolerances; same number of steps (--first: only steps
                                         0..N-1 are compared, of at least N)
  identical BASE CAND [--ignore COL,...] the same run bit for bit: every column of trace.csv but the
                                         process's measurements (and COLs), every row of layers.csv,
                                         and every dataset of the final checkpoint's stage files
  less-activation LOW HIGH               stage 0's peak act_mb (ranks.csv) is lower in LOW
  skipped-everywhere RUN STEP            STEP is skipped (trace.csv); every rank held the same loss
                                         scale at every step, and it halved after STEP
  bytes-ratio FULL HALF RATIO            the gradient all-reduce bytes of HALF are RATIO x FULL's, > 0
  timeline FILE RANKS STEPS M            a Chrome trace with one track per rank, each with a forward
                                         and a backward span per micro-batch and step, and optimizer spans
"""
import csv
import math
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
from same_run import run_difference  # noqa: E402


def fail(message):
    print(f"check_layouts: {message}")
    sys.exit(1)


def rows(run, name):
    with open(f"{run}/{name}", newline="") as f:
        return list(csv.DictReader(f))


def same(base, cand, loss_rtol, gnorm_rtol, first=None):
    a, b = rows(base, "trace.csv"), rows(cand, "trace.csv")
    if first is not None:
        if first < 1 or len(a) < first or len(b) < first:
            fail(f"--first {first}: {len(a)} steps in {base}, {len(b)} in {cand}")
        a, b = a[:first], b[:first]
    if len(a) != len(b) or not a:
        fail(f"{len(a)} steps in {base}, {len(b)} in {cand}")
    worst = {"loss": 0.0, "grad_norm": 0.0}
    for x, y in zip(a, b):
        for column, rtol in (("loss", loss_rtol), ("grad_norm", gnorm_rtol)):
            u, v = float(x[column]), float(y[column])
            if not (math.isfinite(u) and math.isfinite(v)):
                fail(f"step {x['step']}: {column} {u!r} vs {v!r}: not finite")
            rel = abs(u - v) / abs(u) if u else abs(v)
            worst[column] = max(worst[column], rel)
            if not rel <= rtol:
                fail(f"step {x['step']}: {column} {u!r} vs {v!r}: relative difference {rel:.3g} > {rtol:g}")
    print(f"check_layouts: {len(a)} steps agree; worst relative difference loss {worst['loss']:.3g}, "
          f"grad_norm {worst['grad_norm']:.3g}")


def identical(base, cand, ignore):
    diff, compared = run_difference(base, cand, ignore)
    if diff:
        fail(diff)
    print(f"check_layouts: {compared}")


def stage0_act(run):
    return max(float(r["act_mb"]) for r in rows(run, "ranks.csv") if r["pp_rank"] == "0")


def less_activation(low, high):
    a, b = stage0_act(low), stage0_act(high)
    print(f"check_layouts: stage 0 peak activations {a:.3f} MiB vs {b:.3f} MiB")
    if not a < b:
        fail(f"{low} holds {a} MiB on stage 0, not less than {high}'s {b} MiB")


def skipped_everywhere(run, step):
    trace = {int(r["step"]): r for r in rows(run, "trace.csv")}
    if trace[step]["skipped"] != "1":
        fail(f"step {step} was not skipped: {trace[step]}")
    scales = {}
    for r in rows(run, "ranks.csv"):
        scales.setdefault(int(r["step"]), set()).add(float(r["loss_scale"]))
    for s, held in sorted(scales.items()):
        if len(held) != 1:
            fail(f"step {s}: ranks held different loss scales {sorted(held)}")
    before, after = scales[step].pop(), scales[step + 1].pop()
    if after != before / 2:
        fail(f"the loss scale went from {before} at step {step} to {after}, not halved")
    print(f"check_layouts: step {step} skipped on every rank; scale {before} -> {after} everywhere")


def bytes_ratio(full, half, ratio):
    a = sum(int(r["grad_bytes"]) for r in rows(full, "ranks.csv"))
    b = sum(int(r["grad_bytes"]) for r in rows(half, "ranks.csv"))
    print(f"check_layouts: gradient all-reduce bytes {a} vs {b}")
    if a <= 0 or b != a * ratio:
        fail(f"{half} sent {b} bytes, not {ratio} x {a}")


def timeline(path, ranks, steps, micro_batches):
    events = json.load(open(path))["traceEvents"]
    names = {e["pid"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    if names != set(range(ranks)):
        fail(f"{path}: tracks {sorted(names)}, not ranks 0..{ranks - 1}")
    for rank in range(ranks):
        spans = [e for e in events if e.get("ph") == "X" and e["pid"] == rank]
        for cat in ("forward", "backward"):
            got = sorted((e["args"]["step"], e["args"]["micro_batch"]) for e in spans if e["cat"] == cat)
            want = sorted((s, m) for s in range(steps) for m in range(micro_batches))
            if got != want:
                fail(f"rank {rank}: {cat} spans {got[:4]}... are not one per step and micro-batch")
        if sum(e["cat"] == "optimizer" for e in spans) != steps:
            fail(f"rank {rank}: not one optimizer span per step")
        if any(e["dur"] < 0 for e in spans):
            fail(f"rank {rank}: a span of negative duration")
    print(f"check_layouts: {path}: {ranks} tracks with every forward, backward and optimizer span")


def main():
    args = sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    what = args[0]
    if what == "same" and (len(args) == 5 or (len(args) == 7 and args[5] == "--first")):
        if float(args[3]) == 0 and float(args[4]) == 0:
            sys.exit("check_layouts: 'same' with tolerances 0 compares two columns: use 'identical'")
        same(args[1], args[2], float(args[3]), float(args[4]), int(args[6]) if len(args) == 7 else None)
    elif what == "identical" and len(args) in (3, 5) and (len(args) == 3 or args[3] == "--ignore"):
        identical(args[1], args[2], set(args[4].split(",")) if len(args) == 5 else set())
    elif what == "less-activation" and len(args) == 3:
        less_activation(args[1], args[2])
    elif what == "skipped-everywhere" and len(args) == 3:
        skipped_everywhere(args[1], int(args[2]))
    elif what == "timeline" and len(args) == 5:
        timeline(args[1], int(args[2]), int(args[3]), int(args[4]))
    elif what == "bytes-ratio" and len(args) == 4:
        bytes_ratio(args[1], args[2], float(args[3]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
