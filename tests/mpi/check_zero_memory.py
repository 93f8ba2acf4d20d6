#!/usr/bin/python3
"""parallel.zero 1 splits the optimizer state: rank 0's log line "parameter memory of rank 0: fp32
masters M MiB, AdamW moments A MiB ..." with zero 1 shows the moments at 1/dp of zero 0's and, in
fp16/bf16 (--split-masters), the masters too; without it the masters stay whole.

usage: check_zero_memory.py DP [--split-masters] -- MPIRUN... AVTRAIN DECK [OPTIONS...]
"""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
import run_processes  # noqa: E402

LINE = re.compile(r"parameter memory of rank 0: fp32 masters ([0-9.]+) MiB, AdamW moments ([0-9.]+) MiB")


def memory(command, zero):
    done = run_processes.run(command + ["--parallel.zero", str(zero)], capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        sys.exit(f"zero {zero}: exit {done.returncode}\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    found = LINE.search(done.stdout)
    if not found:
        sys.exit(f"zero {zero}: no parameter memory line in the log")
    return float(found.group(1)), float(found.group(2))


def main():
    argv = sys.argv[1:]
    split = argv.index("--")
    dp, split_masters, command = int(argv[0]), "--split-masters" in argv[:split], argv[split + 1:]
    (m0, a0), (m1, a1) = memory(command, 0), memory(command, 1)
    print(f"zero 0: masters {m0} MiB, moments {a0} MiB; zero 1 at dp {dp}: masters {m1} MiB, moments {a1} MiB")
    close = lambda got, want: abs(got - want) <= 0.02 + 0.02 * want  # the log rounds to 0.01 MiB
    failures = []
    if not close(a1, a0 / dp):
        failures.append(f"moments {a1} MiB, not 1/{dp} of {a0}")
    if not close(m1, m0 / dp if split_masters else m0):
        failures.append(f"masters {m1} MiB, expected {m0 / dp if split_masters else m0}")
    if failures:
        sys.exit("; ".join(failures))


if __name__ == "__main__":
    main()
