"""What the gpu test scripts share: the one way they start a program (echo it, capture its
output, stop the script with the program's tail and exit code when it fails), how many GPUs are
there, a fresh synthetic shard set, and the start of a CPU-against-GPU run of the CI deck."""
import os
import shutil
import subprocess
import sys


def run(command):
    print("+", " ".join(command), flush=True)
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        print(done.stdout[-3000:], done.stderr[-3000:])
        sys.exit(f"{command[0]}: failed ({done.returncode}): {' '.join(command)}")
    return done.stdout


def gpu_count(bin_dir):
    """CUDA devices this process sees (0 when none or no driver), as cuda_device_check lists them; any
    other CUDA error ends the test as a failure, never as skipped."""
    probe = subprocess.run([os.path.join(bin_dir, "cuda_device_check")], capture_output=True, text=True)
    if probe.returncode == 77:
        return 0
    if probe.returncode != 0:
        sys.exit(f"cuda_device_check: FAILED ({probe.returncode}): {probe.stdout.strip().splitlines()[-1:]}")
    return sum(line.startswith("device ") for line in probe.stdout.splitlines())


def fresh_shards(bin_dir, work, shards, samples):
    """Empties `work` and writes a synthetic shard set (seed 3) into work/shards; returns its path."""
    shutil.rmtree(work, ignore_errors=True)
    path = os.path.join(work, "shards")
    run([os.path.join(bin_dir, "avtrain-shards"), "synth", "--out", path, "--shards", str(shards), "--samples",
         str(samples), "--seed", "3"])
    return path


def ci_deck_on_a_gpu(argv, usage):
    """The start of a CPU-against-GPU test of the CI deck: argv is BIN_DIR SOURCE_DIR WORK_DIR (else the
    usage); without a CUDA device, exit 77 (CTest: skipped); fresh shards (2 of 256 samples) in WORK_DIR.
    Returns (source, work, avtrain, deck, shards)."""
    if len(argv) != 3:
        sys.exit(usage)
    bin_dir, source, work = argv
    if gpu_count(bin_dir) == 0:
        print("no CUDA device: skipped")
        sys.exit(77)
    shards = fresh_shards(bin_dir, work, shards=2, samples=256)
    return source, work, os.path.join(bin_dir, "avtrain"), os.path.join(source, "inputs", "ci.ini"), shards
