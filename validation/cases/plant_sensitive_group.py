#!/usr/bin/python3
"""Stands in for avtrain (AVTRAIN=this) and plants a sensitive layer group: it runs the real
avtrain (PLANT_AVTRAIN) with every argument, then, where the run trained (--out DIR) in a
precision.mode other than fp32 with some module matching PLANT_MODULES (a glob, e.g. `blocks.1.*`)
not kept in fp32 (run.json's precision.fp32_modules), multiplies those modules' gradient norms in
DIR/layers.csv by PLANT_FACTOR (default 4) at every step: a group that parts from FP32 unless it
is kept there, as the per-layer statistics would show one. Its exit is avtrain's.
"""
import csv
import fnmatch
import json
import os
import subprocess
import sys


def out_dir(argv):
    for i, a in enumerate(argv):
        if a in ("--out", "--train.out") and i + 1 < len(argv):
            return argv[i + 1]
    return None


def main():
    real, pattern = os.environ["PLANT_AVTRAIN"], os.environ["PLANT_MODULES"]
    factor = float(os.environ.get("PLANT_FACTOR", "4"))
    argv = sys.argv[1:]
    rc = subprocess.run([real] + argv).returncode
    out = out_dir(argv)
    if rc != 0 or "--dry-run" in argv or out is None:
        return rc
    with open(os.path.join(out, "run.json")) as f:
        precision = json.load(f)["precision"]
    kept = set(precision.get("fp32_modules", []))
    path = os.path.join(out, "layers.csv")
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    planted = {r["layer"] for r in rows if fnmatch.fnmatchcase(r["layer"], pattern)}
    if not planted:
        sys.exit(f"plant_sensitive_group: PLANT_MODULES {pattern} matches no module of {path}")
    if precision["mode"] == "fp32" or planted <= kept:
        return rc
    for r in rows:
        if r["layer"] in planted:
            r["grad_norm"] = repr(float(r["grad_norm"]) * factor)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    return rc


if __name__ == "__main__":
    sys.exit(main())
