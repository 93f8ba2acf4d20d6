"""The one way the gpu test scripts start a program: echo it, capture its output, and stop the
script with the program's tail and its exit code when it fails."""
import subprocess
import sys


def run(command):
    print("+", " ".join(command), flush=True)
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        print(done.stdout[-3000:], done.stderr[-3000:])
        sys.exit(f"{command[0]}: failed ({done.returncode}): {' '.join(command)}")
    return done.stdout
