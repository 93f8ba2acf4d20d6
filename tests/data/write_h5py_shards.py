#!/usr/bin/python3
"""Writes shards the way a Python user would (h5py): a valid set and a set with one bad label.

usage: write_h5py_shards.py GOOD_DIR BAD_DIR

The valid set uses what our own writer does not: a variable-length UTF-8 string attribute,
int64 attributes, float32 audio, chunks of several samples with shuffle + gzip, C = 3.
"""
import os
import sys

import h5py
import numpy as np

N, A, F, H, W, C = 6, 320, 5, 12, 10, 3
SAMPLE_RATE, FPS, TONES, MOTIONS = 8000, 10.0, 2, 3


def write_shard(path, seed, bad_label=False):
    rng = np.random.default_rng(seed)
    audio_len = rng.integers(A // 2, A + 1, size=N).astype(np.int32)
    video_len = rng.integers((F + 1) // 2, F + 1, size=N).astype(np.int32)
    label = rng.integers(0, TONES * MOTIONS, size=N).astype(np.int32)
    if bad_label:
        label[3] = 99
    t = np.arange(A) / SAMPLE_RATE
    audio = np.zeros((N, A), np.float32)
    video = np.zeros((N, F, H, W, C), np.uint8)
    for i in range(N):
        tone = 300.0 * (1 + label[i] // MOTIONS)
        audio[i, : audio_len[i]] = np.clip(0.5 * np.sin(2 * np.pi * tone * t[: audio_len[i]]), -1, 1)
        video[i, : video_len[i]] = rng.integers(0, 60, size=(video_len[i], H, W, C), dtype=np.uint8)
    tmp = path + ".tmp"
    with h5py.File(tmp, "w") as f:
        f.attrs["avtrain_format"] = "av-shard"  # h5py: variable-length UTF-8 string
        f.attrs["version"] = np.int64(1)
        f.attrs["sample_rate"] = np.int64(SAMPLE_RATE)
        f.attrs["fps"] = np.float64(FPS)
        f.attrs["num_classes"] = np.int64(TONES * MOTIONS)
        gz = dict(compression="gzip", compression_opts=6, shuffle=True)
        f.create_dataset("audio", data=audio, chunks=(4, A), **gz)
        f.create_dataset("audio_len", data=audio_len, chunks=(4,), **gz)
        f.create_dataset("video", data=video, chunks=(2, F, H, W, C), **gz)
        f.create_dataset("video_len", data=video_len, chunks=True, **gz)
        f.create_dataset("label", data=label, chunks=(3,), **gz)
    os.replace(tmp, path)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    good, bad = sys.argv[1:]
    for d in (good, bad):
        os.makedirs(d, exist_ok=True)
    write_shard(os.path.join(good, "shard-a.h5"), 1)
    write_shard(os.path.join(good, "shard-b.h5"), 2)
    write_shard(os.path.join(bad, "shard-a.h5"), 1)
    write_shard(os.path.join(bad, "shard-b.h5"), 2, bad_label=True)


if __name__ == "__main__":
    main()
