#!/usr/bin/python3
"""No process a test started outlives the suite. Every test runs with AVTRAIN_TEST_SUITE=MARK in its
environment (cmake/AvtrainTesting.cmake), which mpirun, the ranks, Slurm's daemons and the jobs they
launch all inherit, whichever session or process group they move to; this check runs after every
other test (the cleanup of a fixture they all require), names every process still carrying the mark,
kills it and fails.

usage: check_no_process_left.py MARK          the suite's check
       check_no_process_left.py --self-test   a process left on purpose is found and ended
"""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "e2e"))
from run_processes import describe, kill_all, with_environment  # noqa: E402

NAME = "AVTRAIN_TEST_SUITE"


def leftovers(mark):
    """Names every process carrying the mark, kills them; the names ([] when none was left)."""
    found = [describe(pid) for pid in with_environment(NAME, mark)]
    kill_all(lambda: with_environment(NAME, mark))
    return found


def self_test():
    mark = f"self-test-{os.getpid()}"
    # A grandchild in a session of its own, its parent gone: what a killed mpirun leaves of a rank.
    subprocess.run(["setsid", "-f", "sleep", "300"], env=dict(os.environ, **{NAME: mark}), check=True)
    # setsid -f returns once it has forked: until its child has become sleep (its command line then
    # reads "sleep 300" alone, not setsid's), /proc may show it mid-exec, with an empty environment
    # or command line (seen in a fresh root). Wait until it shows as sleep.
    deadline = time.monotonic() + 10
    while (not any(describe(pid) == f"{pid} (sleep 300)" for pid in with_environment(NAME, mark))
           and time.monotonic() < deadline):
        time.sleep(0.01)
    found = leftovers(mark)
    if len(found) != 1 or "sleep 300" not in found[0]:
        print(f"check_no_process_left: the process left on purpose was not found alone: {found}")
        return 1
    if with_environment(NAME, mark):
        print("check_no_process_left: the process left on purpose survived")
        return 1
    print(f"check_no_process_left: found and ended the process left on purpose, {found[0]}; ok")
    return 0


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    if sys.argv[1] == "--self-test":
        return self_test()
    found = leftovers(sys.argv[1])
    if found:
        print(f"check_no_process_left: {len(found)} process(es) outlived the tests that started them "
              f"(killed now):\n  " + "\n  ".join(found))
        return 1
    print(f"check_no_process_left: no process of the suite ({NAME}={sys.argv[1]}) is left; ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
