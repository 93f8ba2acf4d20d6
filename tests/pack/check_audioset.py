#!/usr/bin/python3
"""Checks what `avtrain-shards pack --audioset-csv ... --val-fraction F` made of make_audioset.py's
folder: OUT/train and OUT/val are shard sets of format v2 whose class_names are the class index's
display names, every packed segment's /labels row is its CSV set (found by its /source file's YTID),
each segment is packed once or reported skipped with the reason expected, and both sides hold clips.

usage: check_audioset.py DIR OUT
"""
import csv
import glob
import json
import os
import sys

import h5py
import numpy as np


def fail(message):
    print(f"check_audioset.py: {message}")
    sys.exit(1)


def ytid_of(source):
    stem = os.path.basename(source.split("#")[0]).split(".")[0]
    return stem[1:] if len(stem) == 12 and stem.startswith("Y") else stem


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    root, out = sys.argv[1:]
    with open(os.path.join(root, "expect.json")) as f:
        expect = json.load(f)
    names = expect["class_names"]
    packed, skipped = {}, {}
    for side in ("train", "val"):
        shards = sorted(glob.glob(os.path.join(out, side, "shard-*.h5")))
        if not shards:
            fail(f"{out}/{side} holds no shard")
        for path in shards:
            with h5py.File(path, "r") as h5:
                if int(h5.attrs["version"]) != 2:
                    fail(f"{path}: version {h5.attrs['version']}, expected 2")
                if list(h5.attrs["class_names"]) != names:
                    fail(f"{path}: class_names {list(h5.attrs['class_names'])}, expected {names}")
                if "label" in h5:
                    fail(f"{path}: a v2 shard with /label")
                labels = h5["labels"][...]
                if labels.dtype != np.uint8 or labels.shape[1] != len(names):
                    fail(f"{path}: /labels {labels.dtype} {labels.shape}")
                for row, source in zip(labels, h5["source"][...]):
                    ytid = ytid_of(source.decode())
                    got = [names[c] for c in np.flatnonzero(row)]
                    if sorted(got) != sorted(expect["labels"][ytid]):
                        fail(f"{path}: {ytid} has labels {got}, the CSV says {expect['labels'][ytid]}")
                    if ytid in packed:
                        fail(f"{ytid} packed twice ({packed[ytid]}, {side})")
                    packed[ytid] = side
        report = os.path.join(out, side, "pack-report.csv")
        if os.path.exists(report):
            with open(report) as f:
                for row in csv.DictReader(f):
                    skipped[ytid_of(row["path"])] = (row["status"], row["reason"])
    for ytid, reason in expect["skipped"].items():
        if ytid not in skipped or skipped[ytid][0] != "skipped" or reason not in skipped[ytid][1]:
            fail(f"{ytid}: reported {skipped.get(ytid)}, expected skipped: {reason}")
    expected_packed = set(expect["labels"]) - set(expect["skipped"])
    if set(packed) != expected_packed or set(skipped) != set(expect["skipped"]):
        fail(f"packed {sorted(packed)}, skipped {sorted(skipped)}; expected packed {sorted(expected_packed)}")
    sides = [sum(1 for s in packed.values() if s == side) for side in ("train", "val")]
    print(f"check_audioset.py: {len(packed)} segments packed ({sides[0]} train, {sides[1]} val) with the CSV's "
          f"label sets, {len(skipped)} skipped as expected")


if __name__ == "__main__":
    main()
