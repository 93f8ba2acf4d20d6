#!/usr/bin/python3
"""Checks that every shard of DIR records values_checked = 1 and, per dataset, the XXH3_64bits digest
of its values in row order (docs/shard-format.md), computed here independently: h5py reads each
dataset whole, numpy gives its little-endian bytes, libxxhash's one-shot XXH3_64bits (ctypes) hashes
them.

usage: check_value_digests.py DIR
"""
import ctypes
import glob
import os
import sys

import h5py
import numpy as np

DATASETS = {"audio": None, "audio_len": "<i4", "video": "u1", "video_len": "<i4", "label": "<i4"}


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    xxhash = ctypes.CDLL("libxxhash.so.0")
    xxhash.XXH3_64bits.restype = ctypes.c_uint64
    xxhash.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    paths = sorted(glob.glob(os.path.join(sys.argv[1], "*.h5")))
    if not paths:
        sys.exit(f"check_value_digests: no shards in {sys.argv[1]}")
    for path in paths:
        with h5py.File(path, "r") as f:
            if int(f.attrs.get("values_checked", 0)) != 1:
                sys.exit(f"check_value_digests: {path}: no values_checked = 1")
            algorithm = f.attrs["digest_algorithm"]
            algorithm = algorithm.decode() if isinstance(algorithm, bytes) else str(algorithm)
            if algorithm != "XXH3_64bits":
                sys.exit(f"check_value_digests: {path}: digest_algorithm = {algorithm!r}")
            for name, dtype in DATASETS.items():
                values = f[name][...]
                if dtype is None:  # int16 or float32 audio
                    dtype = "<i2" if values.dtype.kind == "i" else "<f4"
                data = np.ascontiguousarray(values.astype(dtype)).tobytes()
                expected = xxhash.XXH3_64bits(data, len(data))
                recorded = int(f.attrs[f"digest_{name}"])
                if recorded != expected:
                    sys.exit(f"check_value_digests: {path}: digest_{name} = {recorded:#018x}, "
                             f"the values hash to {expected:#018x}")
        print(f"check_value_digests: {path}: values_checked, 5 digests match")


if __name__ == "__main__":
    main()
