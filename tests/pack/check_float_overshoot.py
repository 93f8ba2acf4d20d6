#!/usr/bin/python3
"""A decoder's float audio beyond [-1, 1] (a float WAV of 1.5 sin) packed with --float-audio: the pack
clips it to [-1, 1], as the int16 conversion saturates (the shard writer refuses anything else), and
the set passes `inspect --check-values` (every value and digest).

usage: check_float_overshoot.py AVTRAIN_SHARDS WORK_DIR
"""
import glob
import os
import shutil
import subprocess
import sys

import h5py


def ffmpeg(*args):
    subprocess.run(["ffmpeg", "-v", "error", "-nostdin", "-y", *args], check=True)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    program, work = sys.argv[1], sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    ffmpeg("-f", "lavfi", "-i", "aevalsrc=1.5*sin(2*PI*440*t):s=16000:d=1", "-c:a", "pcm_f32le",
           os.path.join(work, "loud.wav"))
    ffmpeg("-f", "lavfi", "-i", "testsrc=size=32x24:rate=10:duration=1", "-c:v", "libx264", "-pix_fmt", "yuv420p",
           os.path.join(work, "video.mp4"))
    with open(os.path.join(work, "clips.csv"), "w") as f:
        f.write("path,audio_path,label\nvideo.mp4,loud.wav,a\nvideo.mp4,loud.wav,b\n")
    out = os.path.join(work, "out")
    subprocess.run([program, "pack", "--manifest", os.path.join(work, "clips.csv"), "--out", out, "--duration", "1",
                    "--sample-rate", "16000", "--fps", "10", "--size", "32x24", "--float-audio", "--threads", "1"],
                   check=True)
    for path in glob.glob(os.path.join(out, "*.h5")):
        with h5py.File(path, "r") as f:
            audio = f["audio"][...]
            if audio.min() != -1.0 or audio.max() != 1.0:
                sys.exit(f"check_float_overshoot: {path}: /audio spans {audio.min()}..{audio.max()}, expected -1..1")
    subprocess.run([program, "inspect", "--check-values", out], check=True, stdout=subprocess.DEVNULL)
    print("check_float_overshoot: clipped to [-1, 1]; every value and digest checks")


if __name__ == "__main__":
    main()
