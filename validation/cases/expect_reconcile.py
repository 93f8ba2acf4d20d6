#!/usr/bin/python3
"""Runs avtrain-reconcile and checks its verdict and report.

usage: expect_reconcile.py EXIT_CODE [--names PATTERN...] -- RECONCILE_COMMAND...
Each PATTERN must appear in the suggested precision.fp32_layers line.
"""
import subprocess
import sys


def main():
    args = sys.argv[1:]
    if "--" not in args or not args:
        sys.exit(__doc__)
    sep = args.index("--")
    expect, rest, command = int(args[0]), args[1:sep], args[sep + 1:]
    names = rest[1:] if rest[:1] == ["--names"] else []
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    print(done.stdout, done.stderr, sep="")
    problems = []
    if done.returncode != expect:
        problems.append(f"exit {done.returncode}, expected {expect}")
    suggest = [line for line in done.stdout.splitlines() if line.startswith("suggest:")]
    for n in names:
        if not suggest or n not in suggest[0]:
            problems.append(f"the suggested fp32_layers line does not name {n}")
    for p in problems:
        print("expect_reconcile:", p)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
