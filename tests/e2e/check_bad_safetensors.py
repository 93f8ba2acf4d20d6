#!/usr/bin/python3
"""model.init_from refuses each bad safetensors file (tests/e2e/make_bad_safetensors.py, made from a
good one) in one line that names the file and the tensor, with a non-zero exit and no hang: one
avtrain start per file, all at once (each stops in its first second; most of its time is mpiexec's
wait after a failed rank). The missing tensor is checked at pp 2 by a test of its own.

usage: check_bad_safetensors.py GOOD.safetensors OUT_DIR -- AVTRAIN_COMMAND...
"""
import os
import re
import subprocess
import sys

import make_bad_safetensors
import run_processes

TENSOR = r"[a-z0-9_.]+"
# What each file's refusal says after "model.init_from PATH: ".
EXPECTED = {
    "truncated": rf"tensor {TENSOR}: its data ends at byte \d+ of a data section of \d+ bytes \(a truncated file\?\)$",
    "header_past_end": r"its header length \d+ runs past the end of the file \(\d+ bytes; truncated, or not a safetensors file\?\)$",
    "overlap": rf"tensor {TENSOR} \(bytes \d+\.\.\d+\) overlaps tensor {TENSOR} \(bytes \d+\.\.\d+\)$",
    "gap": rf"tensor {TENSOR} \(bytes \d+\.\.\d+\) leaves a gap of 4 bytes before it$",
    "unknown_dtype": r"tensor blocks\.0\.attn\.qkv\.weight: unknown dtype 'F13'$",
    "malformed_json": r"its header is not JSON \(.*\)$",
    "mis_shaped": r"tensor blocks\.0\.attn\.qkv\.weight has shape \[64, 192\], this model's \[192, 64\] \(.*\)$",
}


def verdict(name, path, done, timed_out):
    """'' when the run was refused as expected, else what went wrong."""
    if timed_out:
        return "still running after 60 s (a hang)"
    if done.returncode == 0:
        return "the run was not refused (exit 0)"
    lines = [line for line in done.stderr.splitlines() if line.startswith("avtrain")]
    if len(lines) != 1:
        return f"{len(lines)} 'avtrain...' error lines, not one"
    pattern = r"^avtrain: rank 0: model\.init_from " + re.escape(path) + ": " + EXPECTED[name]
    return "" if re.search(pattern, lines[0]) else f"'{lines[0]}' does not match '{pattern}'"


def main():
    if len(sys.argv) < 5 or sys.argv[3] != "--":
        sys.exit(__doc__)
    good, out, command = sys.argv[1], sys.argv[2], sys.argv[4:]
    paths = make_bad_safetensors.write(good, out)
    runs = {}
    for name in EXPECTED:
        runs[name] = run_processes.Session(command + ["--model.init_from", paths[name], "--out",
                                                      os.path.join(out, "run_" + name), "--overwrite"],
                                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    failures = []
    for name, p in runs.items():
        with p:
            try:
                _, stderr = p.communicate(timeout=60)
                timed_out = False
            except subprocess.TimeoutExpired:
                stderr, timed_out = "", True
        done = subprocess.CompletedProcess(p.args, p.returncode, "", stderr)
        wrong = verdict(name, paths[name], done, timed_out)
        print(f"{name}: exit {p.returncode}: {'ok' if not wrong else wrong}\n  {stderr.strip().splitlines()[0] if stderr.strip() else ''}")
        if wrong:
            failures.append(name)
    if failures:
        sys.exit(f"check_bad_safetensors: not refused as expected: {', '.join(failures)}")
    print(f"check_bad_safetensors: each of {len(EXPECTED)} bad files refused in one line naming it")


if __name__ == "__main__":
    main()
