#!/usr/bin/python3
"""Doctors a genuine CAND run in known ways and checks that avtrain-reconcile FAILs each copy,
naming the step where the doctoring starts.

usage: doctored.py --work DIR [--cases NAME,...] [--slack S] [--tail F] BASE_DIR [BASE_DIR ...] CAND_DIR

The undoctored CAND must PASS against the BASE runs (the control); each doctored copy (written
under DIR/NAME) must FAIL, and the first step the report names must lie in [start, start + S]
where start is the first step the doctoring changed (S = 0 by default: exactly that step). For a
change in one layer the report must also name that layer first. Exit 0 when every case behaves,
1 otherwise, 2 on bad input. The cases (on a run of N steps, the tail is the last 30 %, or the
last F of the steps with --tail F):

  spike        the loss of step 0.6 N times SPIKE (--spike, default 1.2)
  offset5      loss and grad norm times 1.05 over the tail
  offset20     ... times 1.20
  offset50     ... times 1.50 (offsetN: times 1 + N/100, any N)
  loss20       the loss alone times 1.20 over the tail (lossN: times 1 + N/100, any N)
  drift        loss times 1 + 0.1 * step / (N - 1): a slow drift that reaches 10 % at the end
  nan_last     the loss of the last step is NaN
  grad_norm    the grad norm alone times GNORM (--gnorm, default 1.2) over the tail
  layer        one layer's grad norm (--layer, default blocks.1.attn.qkv) times LAYER_X
               (--layer-x, default 1.2) over the tail; loss and global grad norm untouched
"""
import argparse
import re
import csv
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
RECONCILE = os.path.join(os.path.dirname(HERE), "avtrain-reconcile")
CASES = ("spike", "offset5", "offset20", "offset50", "drift", "nan_last", "grad_norm", "layer")


def read(path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    return rows[0], rows[1:]


def write(path, header, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(header)
        w.writerows(rows)


def tail_index(n, fraction):
    """The first row of the last `fraction` of n rows (as avtrain-reconcile's segments count)."""
    return min(n - 1, int((1 - fraction) * n))


def doctor(cand, out, case, args):
    """Writes the doctored copy of `cand` into `out`; returns the first step it changed."""
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(cand, out)
    header, rows = read(os.path.join(cand, "trace.csv"))
    col = {h: i for i, h in enumerate(header)}
    steps = [int(r[col["step"]]) for r in rows]
    n = len(steps)
    tail = steps[tail_index(n, args.tail)]

    def scale(row, name, x):
        row[col[name]] = repr(float(row[col[name]]) * x)

    first = None
    for r, s in zip(rows, steps):
        changed = False
        if case == "spike" and s == steps[int(0.6 * n)]:
            scale(r, "loss", args.spike)
            changed = True
        elif case.startswith("offset") and s >= tail:
            x = 1 + int(case[len("offset"):]) / 100
            scale(r, "loss", x)
            scale(r, "grad_norm", x)
            changed = True
        elif re.fullmatch(r"loss\d+", case) and s >= tail:
            scale(r, "loss", 1 + int(case[len("loss"):]) / 100)
            changed = True
        elif case == "drift" and s > steps[0]:
            scale(r, "loss", 1 + 0.1 * (s - steps[0]) / (steps[-1] - steps[0]))
            changed = True
        elif case == "nan_last" and s == steps[-1]:
            r[col["loss"]] = "nan"
            changed = True
        elif case == "grad_norm" and s >= tail:
            scale(r, "grad_norm", args.gnorm)
            changed = True
        if changed and first is None:
            first = s
    write(os.path.join(out, "trace.csv"), header, rows)
    if case == "layer":
        lh, lrows = read(os.path.join(cand, "layers.csv"))
        lc = {h: i for i, h in enumerate(lh)}
        names = {r[lc["layer"]] for r in lrows}
        if args.layer not in names:
            raise SystemExit(f"doctored.py: {cand}/layers.csv: no layer '{args.layer}'")
        for r in lrows:
            if r[lc["layer"]] == args.layer and int(r[lc["step"]]) >= tail:
                r[lc["grad_norm"]] = repr(float(r[lc["grad_norm"]]) * args.layer_x)
        write(os.path.join(out, "layers.csv"), lh, lrows)
        first = tail
    return first


def reconcile(bases, cand, json_path, extra):
    done = subprocess.run([sys.executable, RECONCILE, *bases, cand, "--json", json_path, *extra],
                          capture_output=True, text=True, timeout=120)
    doc = None
    if os.path.isfile(json_path):
        with open(json_path) as f:
            doc = json.load(f)
    return done, doc


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", metavar="DIR")
    p.add_argument("--work", required=True)
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--slack", type=int, default=0)
    p.add_argument("--tail", type=float, default=0.3, help="the doctored tail: the last F of the steps")
    p.add_argument("--spike", type=float, default=1.2)
    p.add_argument("--gnorm", type=float, default=1.2)
    p.add_argument("--layer", default="blocks.1.attn.qkv")
    p.add_argument("--layer-x", type=float, default=1.2)
    p.add_argument("--reconcile-arg", action="append", default=[],
                   help="passed on to avtrain-reconcile (repeat for several)")
    args = p.parse_args()
    if len(args.runs) < 2:
        p.error("give BASE_DIR [BASE_DIR ...] CAND_DIR")
    cases = args.cases.split(",")
    unknown = [c for c in cases if c not in CASES and not re.fullmatch(r"(offset|loss)\d+", c)]
    if not 0 < args.tail < 1:
        p.error(f"--tail {args.tail}: must lie between 0 and 1")
    if unknown:
        p.error(f"unknown case {unknown[0]} (known: {', '.join(CASES)})")
    bases, cand = args.runs[:-1], args.runs[-1]
    os.makedirs(args.work, exist_ok=True)
    failures = []
    done, doc = reconcile(bases, cand, os.path.join(args.work, "control.json"), args.reconcile_arg)
    print(f"{'control (undoctored)':<22} exit {done.returncode}  "
          f"{doc['verdict'] if doc else done.stderr.strip()}")
    if done.returncode != 0:
        print(done.stdout + done.stderr)
        failures.append("control: the undoctored CAND does not PASS")
    for case in cases:
        out = os.path.join(args.work, case)
        start = doctor(cand, out, case, args)
        done, doc = reconcile(bases, out, out + ".json", args.reconcile_arg)
        named = doc and doc.get("first_step_beyond")
        layer = doc and doc["layers"] and doc["layers"][0]["name"]
        ok = done.returncode == 1 and named is not None and start <= named <= start + args.slack
        if case == "layer":
            ok = ok and layer == args.layer
        print(f"{case:<22} exit {done.returncode}  doctored from step {start}, report names step "
              f"{named}{f' and layer {layer}' if case == 'layer' else ''}  {'ok' if ok else 'WRONG'}")
        if doc:
            print("    " + "; ".join(doc["reasons"]) if doc["reasons"] else "    (no reasons)")
        if not ok:
            failures.append(case)
            if done.returncode == 2:
                print(done.stderr)
    print(f"doctored.py: {len(cases) - len([f for f in failures if f in cases])}/{len(cases)} doctored "
          f"cases FAIL naming the right step" + (f"; wrong: {', '.join(failures)}" if failures else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
