#!/usr/bin/python3
"""--dry-run sizes a job for a GPU: on the own-videos recipe's shape (10 s clips at 8 fps, 112x112,
16 kHz audio: 8,465 tokens a sample with inputs/quickstart.ini, a micro-batch of 32) it says that a rank
does not fit on an 80 GiB GPU, and names train.recompute, train.micro_batch, --pp, data.clip_seconds
and --cp each with the number that makes it fit; the run with that micro-batch, the run with that clip
length and the run at that cp then fit, and one more sample does not.

usage: check_dry_run_fit.py WORK AVTRAIN_SHARDS -- [MPIRUN ...] AVTRAIN DECK
"""
import os
import re
import shutil
import subprocess
import sys


def fail(message):
    print(f"check_dry_run_fit: {message}")
    sys.exit(1)


def dry_run(command, *options):
    p = subprocess.run(command + ["--dry-run", *options], capture_output=True, text=True, timeout=600)
    if p.returncode:
        fail(f"--dry-run {' '.join(options)} exited {p.returncode}:\n{p.stdout}{p.stderr}")
    return p.stdout


def main():
    argv = sys.argv[1:]
    if len(argv) < 4 or argv[2] != "--":
        sys.exit(__doc__)
    work, shards_tool, command = argv[0], argv[1], argv[3:]
    shutil.rmtree(work, ignore_errors=True)
    data = os.path.join(work, "recipe_shape")
    subprocess.run([shards_tool, "synth", "--out", data, "--shards", "1", "--samples", "2", "--sample-rate", "16000",
                    "--audio-samples", "160000", "--frames", "80", "--height", "112", "--width", "112", "--fps", "8"],
                   check=True, capture_output=True)
    command = command + ["--data", data, "--dp", "1"]

    out = dry_run(command)
    if not re.search(r"tokens per sample: .* = 8465\n", out):
        fail("the recipe's shape is not 8465 tokens a sample:\n" + out)
    if not re.search(r"GPU a rank of 80 GiB .*\n.*\n +0 +0 .* does not fit\n", out):
        fail("the dry run does not say that rank 0 does not fit on 80 GiB:\n" + out)
    found = {
        "recompute": re.search(r"\n  train\.recompute (attention|blocks): ", out),
        "micro_batch": re.search(r"\n  train\.micro_batch (\d+) ", out),
        "pp": re.search(r"\n  --pp (\d+) ", out),
        "clip": re.search(r"\n  data\.clip_seconds ([0-9.]+) ", out),
        "cp": re.search(r"\n  --cp (\d+) ", out),
    }
    missing = [k for k, m in found.items() if not m]
    if missing:
        fail(f"no remedy for {', '.join(missing)}:\n" + out)
    micro_batch, clip = int(found["micro_batch"].group(1)), found["clip"].group(1)
    if not 1 <= micro_batch < 32:
        fail(f"train.micro_batch {micro_batch} is not below the deck's 32")

    for options in (["--train.micro_batch", str(micro_batch)], ["--data.clip_seconds", clip],
                    ["--cp", found["cp"].group(1)]):
        if "\nfits: every rank holds" not in dry_run(command, *options):
            fail(f"the remedy {' '.join(options)} does not fit")
    if "\ndoes not fit:" not in dry_run(command, "--train.micro_batch", str(micro_batch + 1)):
        fail(f"train.micro_batch {micro_batch + 1} fits too: {micro_batch} is not the largest")
    print(f"check_dry_run_fit: 8465 tokens, 32 a micro-batch does not fit on 80 GiB; "
          f"{found['recompute'].group(0).strip()[:-1]}, train.micro_batch {micro_batch} (and not {micro_batch + 1}), "
          f"--pp {found['pp'].group(1)}, data.clip_seconds {clip}, --cp {found['cp'].group(1)} make it fit; ok")


if __name__ == "__main__":
    main()
