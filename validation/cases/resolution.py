#!/usr/bin/python3
"""Checks, on genuine runs, the resolution avtrain-reconcile states: what it says holds, and a doubled
loss late in training either FAILs or is declared a part it cannot judge.

usage: resolution.py --work DIR [--factor X] [--tail F] [--parts SEGMENT:METRIC,...] BASE_DIR [BASE_DIR ...] CAND_DIR

  1. avtrain-reconcile BASE... CAND states its resolution (the report's line before the verdict, and
     the JSON's "resolution").
  2. The stated resolution holds: FP32's reference run (the first BASE) copied as CAND (run.json's
     precision.mode set to CAND's, so that CAND's tolerances judge it), its loss or grad norm
     multiplied over a part's doctored updates by the stated factor f FAILs at f^1.01 (1 % farther
     from 1, as logs) and PASSes at f^0.99 (1 % nearer); for each part and direction with a
     stated factor (or the parts named by --parts, e.g. late:loss).
  3. CAND with its loss times X (default 2) over its last F (default 0.4) of the steps FAILs, or
     its report says that it cannot judge the loss over every part that the doctoring covers whole,
     and why (issue 43: one BASE's 0.15 + 0.2|x| passes a BF16 loss doubled over the last 40 %).
Exit 0 when all hold, 1 when one does not, 2 on bad input.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
from importlib.machinery import SourceFileLoader
from importlib.util import module_from_spec, spec_from_loader

HERE = os.path.dirname(os.path.abspath(__file__))
RECONCILE = os.path.join(os.path.dirname(HERE), "avtrain-reconcile")
NUDGE = 0.01  # how far past the stated offset, and short of it, the doctored copies go: 1 % of its log


def load_reconcile():
    loader = SourceFileLoader("avtrain_reconcile", RECONCILE)
    module = module_from_spec(spec_from_loader(loader.name, loader))
    loader.exec_module(module)
    return module


def reconcile(runs, json_path):
    done = subprocess.run([sys.executable, RECONCILE, *runs, "--json", json_path], capture_output=True,
                          text=True, timeout=300)
    doc = None
    if done.returncode in (0, 1):
        with open(json_path) as f:
            doc = json.load(f)
    return done, doc


def rewrite_trace(src, out, rows, column, factor, mode=None):
    """Copies trace directory `src` to `out` with `column` of trace.csv times `factor` at the given
    row indices (of its rows, header excluded); run.json's precision.mode set to `mode` if given."""
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(src, out)
    path = os.path.join(out, "trace.csv")
    with open(path) as f:
        lines = f.read().splitlines()
    header = lines[0].split(",")
    col = header.index(column)
    for i in rows:
        fields = lines[1 + i].split(",")
        fields[col] = repr(float(fields[col]) * factor)
        lines[1 + i] = ",".join(fields)
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    if mode is not None:
        meta_path = os.path.join(out, "run.json")
        with open(meta_path) as f:
            meta = json.load(f)
        meta["config"]["precision.mode"] = mode
        with open(meta_path, "w") as f:
            json.dump(meta, f, indent=2)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", metavar="DIR")
    p.add_argument("--work", required=True)
    p.add_argument("--factor", type=float, default=2.0, help="the loss of CAND's tail times this (default 2)")
    p.add_argument("--tail", type=float, default=0.4, help="the doctored tail: the last F of the steps (default 0.4)")
    p.add_argument("--parts", default="", help="SEGMENT:METRIC,... whose stated resolution is checked (default all)")
    args = p.parse_args()
    if len(args.runs) < 2:
        p.error("give BASE_DIR [BASE_DIR ...] CAND_DIR")
    if not 0 < args.tail < 1:
        p.error(f"--tail {args.tail}: must lie between 0 and 1")
    if not 0 < args.factor < float("inf"):
        p.error(f"--factor {args.factor}: must be a finite number > 0")
    parts = {tuple(x.split(":")) for x in args.parts.split(",") if x}
    bases, cand = args.runs[:-1], args.runs[-1]
    os.makedirs(args.work, exist_ok=True)
    rec = load_reconcile()
    failures = []

    # 1. the genuine comparison states its resolution
    done, doc = reconcile(bases + [cand], os.path.join(args.work, "genuine.json"))
    if doc is None:
        print(done.stdout + done.stderr, end="")
        return 2
    lines = done.stdout.strip().splitlines()
    res = doc["resolution"]
    print(f"genuine: {lines[-1]}\n  {lines[-2]}")
    if not lines[-2].startswith("resolution") or res["none"] or not res["rows"]:
        failures.append("the genuine comparison states no resolution")

    # 2. the stated factors hold on FP32's reference run doctored through files and the command
    try:
        runs = [rec.load_run(d) for d in bases + [cand]]
        _, aligned, _ = rec.align(runs[:-1], runs[-1])
    except (rec.InputError, rec.NotComparable) as e:
        print(f"resolution.py: {e}", file=sys.stderr)
        return 2
    ref_rows = aligned[0]  # the reference's trace.csv rows of the compared updates
    checked = 0
    for row in res["rows"]:
        if parts and (row["segment"], row["metric"]) not in parts:
            continue
        for way in ("up", "down"):
            side = row[way]
            if side is None:
                print(f"  {row['segment']:<6} {row['metric']:<9} {way:<4} none fails: nothing to check")
                continue
            f = side["fails_at"]
            idx = ref_rows[row["first_update"]:row["first_update"] + row["updates"]]
            for factor, want in ((f ** (1 + NUDGE), "FAIL"), (f ** (1 - NUDGE), "PASS")):
                out = os.path.join(args.work, f"ref-{row['segment']}-{row['metric']}-{way}-{want.lower()}")
                rewrite_trace(bases[0], out, idx, row["metric"], factor, mode=doc["cand"]["precision_mode"])
                d, j = reconcile(bases + [out], out + ".json")
                got = j["verdict"] if j else f"exit {d.returncode}: {d.stderr.strip()}"
                ok = got == want
                checked += 1
                print(f"  {row['segment']:<6} {row['metric']:<9} {way:<4} stated x{f:.8g}: x{factor:.8g} over steps "
                      f"{row['from_step']}-{row['to_step']} {got}, expected {want}  {'ok' if ok else 'WRONG'}")
                if not ok:
                    failures.append(f"{row['segment']} {row['metric']} {way} x{factor:.6g}: {got}")
    print(f"resolution.py: {checked} doctored copies of FP32's reference run judged at the stated resolution")

    # 3. CAND's loss times X over its last F: FAIL, or the parts it covers whole are declared unjudged
    cand_rows = aligned[-1]
    n = len(cand_rows)
    start = min(n - 1, int((1 - args.tail) * n))  # the first doctored update, as doctored.py counts
    out = os.path.join(args.work, f"cand-loss-x{args.factor:g}-last-{args.tail:g}")
    rewrite_trace(cand, out, cand_rows[start:], "loss", args.factor)
    d, j = reconcile(bases + [out], out + ".json")
    if j is None:
        print(d.stdout + d.stderr, end="")
        return 2
    covered = [f"loss {r['segment']}" for r in j["resolution"]["rows"]
               if r["metric"] == "loss" and r["updates"] and r["first_update"] >= start]
    unjudged = [c for c in covered if c in j["resolution"]["cannot_judge"]]
    text = d.stdout.strip().splitlines()
    print(f"CAND, its loss x{args.factor:g} from update {start} of {n}: {text[-1]}\n  {text[-2]}")
    if j["verdict"] == "FAIL":
        print("  caught: FAIL")
    elif covered and unjudged == covered and j["resolution"]["advice"]:
        print(f"  PASS, and the report says it cannot judge {', '.join(covered)}: {j['resolution']['advice']}")
    else:
        failures.append(f"CAND's loss x{args.factor:g} over its last {args.tail:g} PASSes, and the report "
                        f"judges {', '.join(c for c in covered if c not in unjudged) or 'no part it covers whole'}")
    for f in failures:
        print("resolution.py: WRONG:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
