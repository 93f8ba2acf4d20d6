#!/usr/bin/python3
"""Copies a shard set and puts a label out of range into shard number N of the copy.

usage: corrupt_label.py SRC_DIR DST_DIR N
"""
import glob
import os
import shutil
import sys

import h5py


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    src, dst, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    shards = sorted(glob.glob(os.path.join(dst, "*.h5")))
    with h5py.File(shards[n], "r+") as f:
        f["label"][0] = int(f.attrs["num_classes"]) + 7
    print(f"corrupt_label: {shards[n]}: /label[0] set out of range")


if __name__ == "__main__":
    main()
