#!/usr/bin/python3
"""The power of avtrain-reconcile: sustained loss offsets over the end of genuine AMP runs of a
reconcile-study.sh study, which must FAIL, and the genuine runs, which must PASS.

usage: power.py SEED_DIR [SEED_DIR ...] --work DIR [--candidates bf16,fp16] [--offsets 5,10,20,30,50]
                [--tail F] [--no-null] [--markdown OUT] [--require-fail-from P] [--reconcile-arg ARG ...]

Each SEED_DIR is one seed of reconcile-study.sh (STUDY/seed-S: fp32, fp32-twin, the candidates, and
any other FP32 run fp32-*). For each SEED_DIR and candidate C: avtrain-reconcile fp32 fp32-twin C
(the band) with, as --null, fp32 against every other FP32 run of the other SEED_DIRs and against the
seed's own fp32-* runs but its twin (the way reconcile-study.sh judges); then the same against
copies of C (under DIR) whose loss alone is times 1 + P/100 over the last F of the steps (default
0.3; doctored.py's case lossP), for each offset P. Prints one line per seed and candidate: the verdict, the effect size of the loss over
the late segment and the checks that failed it (b: the band, step by step; s: a segment; o: another),
genuine first, then each offset; --markdown OUT writes the same as a table.
--no-null judges with the seed's own BASE runs alone. Exit 0 when every genuine run PASSes and,
with --require-fail-from P, every offset of P % or more FAILs; 1 otherwise; 2 on bad input.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
from importlib.machinery import SourceFileLoader
from importlib.util import module_from_spec, spec_from_loader

HERE = os.path.dirname(os.path.abspath(__file__))
RECONCILE = os.path.join(os.path.dirname(HERE), "avtrain-reconcile")


def load_doctored():
    loader = SourceFileLoader("doctored", os.path.join(HERE, "doctored.py"))
    module = module_from_spec(spec_from_loader(loader.name, loader))
    loader.exec_module(module)
    return module


def fp32_pairs(seed_dir, own=False):
    """(fp32, X) for each other FP32 run X (fp32-*) of a seed directory, in name order, but one
    still training (X.log without X.done); the twin left out of the seed's own (own=True): it is a
    BASE run."""
    ref = os.path.join(seed_dir, "fp32")
    others = sorted(d for d in glob.glob(os.path.join(seed_dir, "fp32-*")) if os.path.isdir(d)
                    and not (own and os.path.basename(d) == "fp32-twin")
                    and not (os.path.isfile(d + ".log") and not os.path.isfile(d + ".done")))  # unfinished
    return [(ref, x) for x in others]


def judge(bases, cand, nulls, json_path, extra):
    args = [sys.executable, RECONCILE, *bases, cand, "--json", json_path, *extra]
    for a, b in nulls:
        args.append(f"--null={a},{b}")
    done = subprocess.run(args, capture_output=True, text=True, timeout=300)
    if done.returncode not in (0, 1):
        raise SystemExit(f"power.py: avtrain-reconcile failed on {cand}:\n{done.stderr}")
    with open(json_path) as f:
        doc = json.load(f)
    late = [r for r in doc["segments"]["rows"] if r["segment"] == "late" and r["metric"] == "loss"][0]
    m = doc["metrics"]
    checks = ("b" if any(m[k]["first_step_beyond"] is not None for k in ("loss", "grad_norm")) else "") + \
             ("s" if any(r["exceeds"] for r in doc["segments"]["rows"]) else "") + \
             ("o" if any(not r.startswith(("loss beyond", "grad_norm beyond", "loss over", "grad_norm over"))
                         for r in doc["reasons"]) else "")
    return {"verdict": doc["verdict"], "effect": late["effect"], "stat": late["stat"],
            "scale": late["scale"], "pairs": len(late["null"]), "first": doc["first_step_beyond"],
            "checks": checks, "reasons": doc["reasons"]}


def cell(r):
    """'FAIL +4.7 s': the verdict, the late segment's loss effect, the checks that failed it (b: the
    band, step by step; s: a segment; o: another check)."""
    effect = "-" if r["effect"] is None else f"{r['effect']:+.1f}"
    return f"{r['verdict']} {effect}" + (f" {r['checks']}" if r["checks"] else "")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("seed_dirs", nargs="+", metavar="SEED_DIR")
    p.add_argument("--work", required=True, help="where the doctored copies and the JSON reports go")
    p.add_argument("--candidates", default="bf16,fp16")
    p.add_argument("--offsets", default="5,10,20,30,50")
    p.add_argument("--tail", type=float, default=0.3)
    p.add_argument("--no-null", action="store_true", help="no --null pairs from the other seeds")
    p.add_argument("--markdown", metavar="OUT")
    p.add_argument("--require-fail-from", type=float, metavar="P")
    p.add_argument("--reconcile-arg", action="append", default=[],
                   help="passed on to avtrain-reconcile (repeat for several)")
    args = p.parse_args()
    cands = [c for c in args.candidates.split(",") if c]
    offsets = [int(o) for o in args.offsets.split(",") if o]
    doctored = load_doctored()
    dargs = argparse.Namespace(tail=args.tail)
    seeds = {}
    for sd in args.seed_dirs:
        for name in ["fp32", "fp32-twin"] + cands:
            if not os.path.isdir(os.path.join(sd, name)):
                p.error(f"{sd}/{name}: no such run")
        with open(os.path.join(sd, "fp32", "run.json")) as f:
            seeds[sd] = json.load(f)["seed"]
    table, ok = [], True
    for sd, s in seeds.items():
        nulls = [] if args.no_null else [pair for o in args.seed_dirs
                                         for pair in fp32_pairs(o, own=o == sd)]
        bases = [os.path.join(sd, "fp32"), os.path.join(sd, "fp32-twin")]
        for c in cands:
            wd = os.path.join(args.work, f"seed-{s}", c)
            os.makedirs(wd, exist_ok=True)
            row = {"seed": s, "cand": c, "genuine": judge(bases, os.path.join(sd, c), nulls,
                                                          os.path.join(wd, "genuine.json"), args.reconcile_arg)}
            ok = ok and row["genuine"]["verdict"] == "PASS"
            for o in offsets:
                out = os.path.join(wd, f"loss{o}")
                doctored.doctor(os.path.join(sd, c), out, f"loss{o}", dargs)
                row[o] = judge(bases, out, nulls, out + ".json", args.reconcile_arg)
                if args.require_fail_from is not None and o >= args.require_fail_from:
                    ok = ok and row[o]["verdict"] == "FAIL"
            g = row["genuine"]
            print(f"seed {s} {c}: genuine {cell(g)} (late loss {100 * (2.718281828459045 ** g['stat'] - 1):+.1f} %, "
                  f"scale {g['scale']:.3f} from {g['pairs']} FP32 pairs); "
                  + ", ".join(f"+{o} %: {cell(row[o])}" for o in offsets), flush=True)
            table.append(row)
    if args.markdown:
        lines = [f"| seed | CAND | genuine | " + " | ".join(f"+{o} %" for o in offsets) + " |",
                 "|---|---|---|" + "---|" * len(offsets)]
        for row in table:
            lines.append(f"| {row['seed']} | {row['cand']} | {cell(row['genuine'])} | "
                         + " | ".join(cell(row[o]) for o in offsets) + " |")
        with open(args.markdown, "w") as f:
            f.write("\n".join(lines) + "\n")
    if args.require_fail_from is not None:
        print(f"power.py: every genuine run PASSes and every offset of {args.require_fail_from:g} % or more "
              f"FAILs: {'yes' if ok else 'NO'}")
    elif not ok:
        print("power.py: a genuine run FAILs")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
