#!/usr/bin/python3
"""precision.mode fp8 leaves out the linears precision.fp8_layers, precision.fp32_layers and
precision.fp8_first_last_bf16 say: run.json's precision.fp8_modules lists exactly the expected ones,
and the last checkpoint holds an FP8 scaling state (fp8/<module>) for each of them and no other.

usage: check_fp8_modules.py OUT EXPECTED,... -- MPIRUN... AVTRAIN DECK [OPTIONS...]
  (the run's --out is OUT; EXPECTED: the modules, comma-separated, in model order)
"""
import glob
import json
import subprocess
import sys

import run_processes


def fail(message):
    print(f"check_fp8_modules: {message}")
    sys.exit(1)


def main():
    argv = sys.argv[1:]
    if len(argv) < 4 or argv[2] != "--":
        sys.exit(__doc__)
    out, expected, command = argv[0], argv[1].split(","), argv[3:]
    done = run_processes.run(command + ["--out", out, "--resume", "none", "--overwrite"], capture_output=True,
                             text=True, timeout=600)
    if done.returncode != 0:
        fail(f"exit {done.returncode}\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    with open(f"{out}/run.json") as f:
        listed = json.load(f)["precision"]["fp8_modules"]
    if listed != expected:
        fail(f"run.json lists {listed}, expected {expected}")
    files = sorted(glob.glob(f"{out}/checkpoints/step-*/stage-*.h5"))
    if not files:
        fail(f"no checkpoint under {out}/checkpoints")
    last = files[-1].rsplit("/", 1)[0]
    held = set()
    for f in glob.glob(f"{last}/stage-*.h5"):
        listing = subprocess.run(["h5ls", f + "/fp8"], capture_output=True, text=True)
        held.update(line.split()[0] for line in listing.stdout.splitlines() if line.strip())
    if held != set(expected):
        fail(f"the checkpoint holds FP8 states of {sorted(held)}, expected {sorted(expected)}")
    print(f"check_fp8_modules: {len(expected)} FP8 linears, as expected; ok")


if __name__ == "__main__":
    main()
