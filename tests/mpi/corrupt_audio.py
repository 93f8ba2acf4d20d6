#!/usr/bin/python3
"""Writes a float32-audio shard set (4 shards of 128) and changes one value in row ROW of shard
number N after the write: by default a NaN into element 5 of /audio; --value V puts V there instead
(a value inside [-1, 1]: only the shard's digest can tell); --video moves pixel [ROW, 0, 0, 0, 0] of
/video by 128 grey levels (a valid pixel too). ROW 10 is a row that a sampled start (data.check_values
sample: the middle row, 64, of a shard whose writer checked its values) does not read, so only the full
check and the reads of training can find it.

usage: corrupt_audio.py AVTRAIN_SHARDS DST_DIR N ROW [--value V | --video]
"""
import argparse
import glob
import os
import shutil
import subprocess

import h5py


def main():
    parser = argparse.ArgumentParser(usage=__doc__)
    parser.add_argument("program")
    parser.add_argument("dst")
    parser.add_argument("n", type=int)
    parser.add_argument("row", type=int)
    change = parser.add_mutually_exclusive_group()
    change.add_argument("--value", type=float, default=float("nan"))
    change.add_argument("--video", action="store_true")
    a = parser.parse_args()
    shutil.rmtree(a.dst, ignore_errors=True)
    subprocess.run([a.program, "synth", "--out", a.dst, "--shards", "4", "--samples", "128", "--seed", "3",
                    "--float-audio"], check=True, stdout=subprocess.DEVNULL)
    path = sorted(glob.glob(os.path.join(a.dst, "*.h5")))[a.n]
    with h5py.File(path, "r+") as f:
        if a.video:
            old = int(f["video"][a.row, 0, 0, 0, 0])
            f["video"][a.row, 0, 0, 0, 0] = (old + 128) % 256
            print(f"corrupt_audio: {path}: /video[{a.row}, 0, 0, 0, 0] = {(old + 128) % 256} (was {old})")
        else:
            f["audio"][a.row, 5] = a.value
            print(f"corrupt_audio: {path}: /audio[{a.row}, 5] = {a.value}")


if __name__ == "__main__":
    main()
