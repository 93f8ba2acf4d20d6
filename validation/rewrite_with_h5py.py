#!/usr/bin/python3
"""Rewrites a shard set with h5py, the way a Python user would write format v1.

usage: rewrite_with_h5py.py SRC_DIR DST_DIR

Same samples, another writer and layout: float32 audio (int16 / 32768, exactly representable),
a variable-length UTF-8 string attribute, int64 attributes, chunks of several samples with
shuffle + gzip, and the shards renamed. A run on DST must train exactly as on SRC.
"""
import glob
import os
import sys

import h5py
import numpy as np


def rewrite(src, dst):
    with h5py.File(src, "r") as f:
        audio = f["audio"][...]
        if audio.dtype == np.int16:
            audio = audio.astype(np.float32) / np.float32(32768.0)
        data = {name: f[name][...] for name in ("audio_len", "video", "video_len", "label")}
        attrs = {key: f.attrs[key] for key in ("sample_rate", "fps", "num_classes")}
    tmp = dst + ".tmp"
    with h5py.File(tmp, "w") as f:
        f.attrs["avtrain_format"] = "av-shard"
        f.attrs["version"] = np.int64(1)
        f.attrs["sample_rate"] = np.int64(attrs["sample_rate"])
        f.attrs["fps"] = np.float64(attrs["fps"])
        f.attrs["num_classes"] = np.int64(attrs["num_classes"])
        gz = dict(compression="gzip", compression_opts=5, shuffle=True)
        f.create_dataset("audio", data=audio.astype(np.float32), chunks=(8, audio.shape[1]), **gz)
        f.create_dataset("video", data=data["video"], chunks=(4,) + data["video"].shape[1:], **gz)
        for name in ("audio_len", "video_len", "label"):
            f.create_dataset(name, data=data[name].astype(np.int32), chunks=True, **gz)
    os.replace(tmp, dst)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    src_dir, dst_dir = sys.argv[1:]
    sources = sorted(glob.glob(os.path.join(src_dir, "*.h5")))
    if not sources:
        sys.exit(f"rewrite_with_h5py: no *.h5 in {src_dir}")
    os.makedirs(dst_dir, exist_ok=True)
    for i, src in enumerate(sources):
        rewrite(src, os.path.join(dst_dir, f"h5py-part-{i:03d}.h5"))
    print(f"rewrote {len(sources)} shards from {src_dir} to {dst_dir} with h5py {h5py.__version__}")


if __name__ == "__main__":
    main()
