"""train.recompute changes memory, never a result: the same command with recompute none, attention
and blocks gives the same trace.csv (but act_mb and the process's measurements) and layers.csv, bit
for bit, and keeps less: act_mb of none > attention > blocks on every rank.

  check_recompute.py WORKDIR -- MPIRUN... AVTRAIN DECK [options]
"""
import csv
import os
import shutil
import subprocess
import sys

import run_processes
from same_run import trace_difference

SETTINGS = ("none", "attention", "blocks")


def act_mb(run):
    """The largest act_mb any rank reported at any step (ranks.csv)."""
    with open(os.path.join(run, "ranks.csv"), newline="") as f:
        per_rank = {}
        for r in csv.DictReader(f):
            per_rank[r["rank"]] = max(per_rank.get(r["rank"], 0.0), float(r["act_mb"]))
    return per_rank


def main():
    argv = sys.argv[1:]
    split = argv.index("--")
    work, command = argv[0], argv[split + 1:]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    runs = {}
    for setting in SETTINGS:
        out = os.path.join(work, setting)
        cmd = command + ["--out", out, "--train.recompute", setting, "--resume", "none"]
        done = run_processes.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
        if done.returncode != 0:
            sys.exit(f"recompute {setting}: exit {done.returncode}\n{done.stdout[-3000:]}")
        runs[setting] = out
    failures = []
    for setting in SETTINGS[1:]:
        diff = trace_difference(runs["none"], runs[setting], also_ignore={"act_mb"})
        if diff:
            failures.append(f"recompute {setting} against none: {diff}")
    kept = {s: act_mb(runs[s]) for s in SETTINGS}
    for rank in kept["none"]:
        mb = [kept[s][rank] for s in SETTINGS]
        print(f"rank {rank}: act_mb none {mb[0]:.3f}, attention {mb[1]:.3f}, blocks {mb[2]:.3f}")
        if not mb[0] > mb[1] > mb[2]:
            failures.append(f"rank {rank}: act_mb does not fall from none to attention to blocks: {mb}")
    if failures:
        sys.exit("\n".join(failures))
    print(f"recompute none, attention and blocks: the same traces bit for bit over {len(SETTINGS)} runs")


if __name__ == "__main__":
    main()
