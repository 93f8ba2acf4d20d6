#!/usr/bin/python3
"""Runs a command that must succeed and print a line: exit 0 AND a match of PATTERN (Python regular
expression, `.` matching newlines too) in its stdout and stderr together. CTest's
PASS_REGULAR_EXPRESSION checks only the second and passes a run that prints the line and then
crashes; the suite uses this instead (tests/check_test_properties.py refuses the property).

usage: expect_output.py PATTERN [TIMEOUT_S] -- COMMAND...
       expect_output.py --self-test      (its own check: a command that prints the line and then
                                          exits 1, or dies of a signal, fails; so does one without it)
"""
import re
import subprocess
import sys

import run_processes


def check(pattern, command, timeout):
    """(passed, what it says) for one run of command."""
    try:
        done = run_processes.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                 timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, f"still running after {timeout} s (a hang): {' '.join(command)}"
    found = re.search(pattern, done.stdout, re.S)
    if done.returncode != 0:
        ended = f"signal {-done.returncode}" if done.returncode < 0 else f"exit {done.returncode}"
        return False, (f"{ended}{' after printing the expected output' if found else ''}:\n"
                       f"{done.stdout[-4000:]}")
    if not found:
        return False, f"exit 0, but its output does not match {pattern!r}:\n{done.stdout[-4000:]}"
    return True, f"exit 0 and the output matches: {found.group(0)[:300]!r}"


def self_test():
    sh = ["/bin/sh", "-c"]
    cases = [("the line, exit 0", sh + ["echo 'set ok'"], True),
             ("the line, then exit 1", sh + ["echo 'set ok'; exit 1"], False),
             ("the line, then killed by SIGSEGV", sh + ["echo 'set ok'; kill -SEGV $$"], False),
             ("no line, exit 0", sh + ["echo 'set not right'"], False),
             ("the line on stderr, exit 0", sh + ["echo 'set ok' >&2"], True)]
    wrong = [name for name, command, want in cases if check(r"set ok", command, 30)[0] != want]
    if wrong:
        sys.exit(f"expect_output --self-test: wrong verdict for: {', '.join(wrong)}")
    print(f"expect_output --self-test: {len(cases)} cases judged right (a crash after the line fails)")


def main():
    argv = sys.argv[1:]
    if argv == ["--self-test"]:
        return self_test()
    if "--" not in argv or argv.index("--") not in (1, 2) or argv.index("--") == len(argv) - 1:
        sys.exit(__doc__)
    split = argv.index("--")
    timeout = float(argv[1]) if split == 2 else 600.0
    passed, message = check(argv[0], argv[split + 1:], timeout)
    print(f"expect_output: {message}")
    sys.exit(0 if passed else 1)


if __name__ == "__main__":
    main()
