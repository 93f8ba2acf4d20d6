#!/usr/bin/python3
"""Writes a float32-audio shard set (4 shards of 128) and puts a NaN into element 5 of row ROW of
shard number N: a row that a sampled start (data.check_values sample: rows 0, 25, 50, 76, 101, 127)
does not read, so only the full check and the reads of training can find it.

usage: corrupt_audio.py AVTRAIN_SHARDS DST_DIR N ROW
"""
import glob
import os
import shutil
import subprocess
import sys

import h5py


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    program, dst, n, row = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    shutil.rmtree(dst, ignore_errors=True)
    subprocess.run([program, "synth", "--out", dst, "--shards", "4", "--samples", "128", "--seed", "3",
                    "--float-audio"], check=True, stdout=subprocess.DEVNULL)
    path = sorted(glob.glob(os.path.join(dst, "*.h5")))[n]
    with h5py.File(path, "r+") as f:
        f["audio"][row, 5] = float("nan")
    print(f"corrupt_audio: {path}: /audio[{row}, 5] = nan")


if __name__ == "__main__":
    main()
