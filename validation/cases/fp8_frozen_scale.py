#!/usr/bin/python3
"""A doctored FP8 run whose one linear's scales are frozen (debug.fp8_freeze_scale: a scaling that never
follows its amax, a bug a user could have) must FAIL the reconcile verdict with that linear named as the
one whose FP8 scaling fails and among the layers that part, and the deck line that leaves it out of FP8
suggested; the same run without the freeze must name it in neither (its verdict is printed, not judged).

usage: fp8_frozen_scale.py MODULE FROZEN_RUN PLAIN_RUN --work DIR -- RECONCILE BASE_DIR... [OPTIONS]
(avtrain-reconcile runs as RECONCILE BASE_DIR... RUN OPTIONS --json DIR/NAME.json for each run)
"""
import json
import os
import subprocess
import sys


def judge(command, run, options, out):
    done = subprocess.run(command + [run] + options + ["--json", out], capture_output=True, text=True, timeout=120)
    print(done.stdout, done.stderr, sep="")
    doc = json.load(open(out)) if os.path.isfile(out) else {}
    return done.returncode, done.stdout, doc


def main():
    args = sys.argv[1:]
    if "--" not in args or len(args) < 6 or args[3] != "--work":
        sys.exit(__doc__)
    sep = args.index("--")
    module, frozen, plain, work = args[0], args[1], args[2], args[4]
    command = args[sep + 1:]
    options = []
    if any(a.startswith("--") for a in command):  # the options after the BASE dirs
        first = next(i for i, a in enumerate(command) if a.startswith("--"))
        command, options = command[:first], command[first:]
    os.makedirs(work, exist_ok=True)
    problems = []
    rc, out, doc = judge(command, frozen, options, os.path.join(work, "frozen.json"))
    if rc != 1:
        problems.append(f"the frozen run: exit {rc}, expected 1 (FAIL)")
    if doc.get("fp8_failing") != [module]:
        problems.append(f"the frozen run: fp8_failing {doc.get('fp8_failing')}, expected [{module!r}]")
    if f"fp8 scaling fails in {module}:" not in out or f"suggest: leave {module} out of FP8: " not in out:
        problems.append(f"the frozen run's report does not name {module} with the line that leaves it out")
    parted = [L["name"] for L in doc.get("layers", []) if L.get("exceeds")]
    if module not in parted:
        problems.append(f"the frozen run: {module} not among the layers beyond tolerance ({parted})")
    suggestion = doc.get("fp8_suggestion") or ""
    if not suggestion.startswith("precision.fp8_layers = ") or module in suggestion.split(" = ")[1].split(","):
        problems.append(f"the frozen run: fp8_suggestion {suggestion!r} does not leave {module} out")
    rc, out, doc = judge(command, plain, options, os.path.join(work, "plain.json"))
    scaling = doc.get("fp8_scaling") or {}
    if not scaling.get("modules"):
        problems.append("the plain run: no FP8 statistics read (fp8_scaling empty)")
    if module in (scaling.get("failing") or []) or f"fp8 scaling fails in {module}:" in out:
        problems.append(f"the plain run names {module} as failing its FP8 scaling")
    if any(L["name"] == module and L.get("exceeds") for L in doc.get("layers", [])):
        problems.append(f"the plain run's {module} parts beyond tolerance too")
    print(f"fp8_frozen_scale: the plain run's verdict {doc.get('verdict')} (exit {rc}); "
          f"its FP8 linears failing their scaling: {scaling.get('failing')}")
    for p in problems:
        print("fp8_frozen_scale:", p)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
