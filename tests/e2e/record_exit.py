#!/usr/bin/python3
"""Runs one rank's command, passes SIGUSR1, SIGTERM and SIGINT on to it, and writes its exit code
to DIR/exit.RANK (RANK from OMPI_COMM_WORLD_RANK): how a test sees every rank's exit, not only the
first one mpirun reports.

usage: mpirun ... record_exit.py DIR -- COMMAND...
"""
import os
import signal
import subprocess
import sys


def main():
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        sys.exit(__doc__)
    where, command = sys.argv[1], sys.argv[3:]
    child = subprocess.Popen(command)
    for sig in (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda number, _frame: child.send_signal(number))
    code = child.wait()
    rank = os.environ.get("OMPI_COMM_WORLD_RANK", "0")
    with open(os.path.join(where, f"exit.{rank}"), "w") as f:
        f.write(f"{code}\n")
    sys.exit(code if code >= 0 else 128 - code)


if __name__ == "__main__":
    main()
