#!/usr/bin/python3
"""Runs a command that must fail: non-zero exit within a time limit, and one error message on
stderr that matches a pattern. With --once the message must be printed exactly once (one rank
reports a failure that others only stop for).

usage: expect_failure.py PATTERN TIMEOUT_S [--once] -- COMMAND...
"""
import re
import subprocess
import sys

import run_processes


def main():
    once = len(sys.argv) > 3 and sys.argv[3] == "--once"
    rest = 4 if once else 3
    if len(sys.argv) < rest + 2 or sys.argv[rest] != "--":
        sys.exit(__doc__)
    pattern, timeout, command = sys.argv[1], float(sys.argv[2]), sys.argv[rest + 1:]
    try:
        done = run_processes.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        print(f"expect_failure: still running after {timeout} s (a hang): {' '.join(command)}")
        sys.exit(1)
    errors = [line for line in done.stderr.splitlines() if line.startswith("avtrain")]
    print(f"exit {done.returncode}; stderr:\n{done.stderr}")
    if done.returncode == 0:
        print("expect_failure: the command succeeded")
        sys.exit(1)
    if not errors:
        print("expect_failure: no 'avtrain...' error line on stderr")
        sys.exit(1)
    if len(set(e.split(": ", 2)[-1] for e in errors)) != 1:
        print("expect_failure: more than one distinct error message")
        sys.exit(1)
    if once and len(errors) != 1:
        print(f"expect_failure: the error was printed {len(errors)} times, not once")
        sys.exit(1)
    if not re.search(pattern, errors[0]):
        print(f"expect_failure: '{errors[0]}' does not match '{pattern}'")
        sys.exit(1)
    print("expect_failure: ok")


if __name__ == "__main__":
    main()
