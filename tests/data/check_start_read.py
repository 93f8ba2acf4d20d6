#!/usr/bin/python3
"""What a start reads of a float32-audio set (data.check_values sample; read-bench --json's open_read_mb
against set_mb, /proc/self/io's rchar): at most MAX_PERCENT of the set when its writer checked the values
(one audio row a shard), and, the values_checked attributes taken out (an older set), it still opens
and reads more (six audio rows a shard). The shape keeps VGGSound's ratio of audio to video bytes
(64 KB float audio, 196 KB video a sample) and its 48 samples a shard, uncompressed.

usage: check_start_read.py AVTRAIN_SHARDS WORK_DIR MAX_PERCENT
"""
import glob
import json
import os
import shutil
import subprocess
import sys

import h5py


def start_read_percent(program, data):
    out = subprocess.run([program, "read-bench", "--data", data, "--micro-batch", "8", "--batches", "1", "--json"],
                         check=True, capture_output=True, text=True).stdout
    r = json.loads(out)
    return 100 * r["open_read_mb"] / r["set_mb"], r


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    program, work, max_percent = sys.argv[1], sys.argv[2], float(sys.argv[3])
    shutil.rmtree(work, ignore_errors=True)
    data = os.path.join(work, "set")
    subprocess.run([program, "synth", "--out", data, "--shards", "2", "--samples", "48", "--sample-rate", "16000",
                    "--audio-samples", "16000", "--frames", "16", "--height", "64", "--width", "64", "--channels", "3",
                    "--float-audio", "--no-gzip", "--seed", "1"], check=True, stdout=subprocess.DEVNULL)
    checked, r = start_read_percent(program, data)
    print(f"check_start_read: values_checked: the start read {r['open_read_mb']:.3f} of {r['set_mb']:.1f} MB "
          f"({checked:.2f} %)")
    for path in glob.glob(os.path.join(data, "*.h5")):
        with h5py.File(path, "r+") as f:
            for name in list(f.attrs):
                if name == "values_checked" or name.startswith("digest_"):
                    del f.attrs[name]
    older, r = start_read_percent(program, data)
    print(f"check_start_read: without values_checked: the start read {r['open_read_mb']:.3f} of "
          f"{r['set_mb']:.1f} MB ({older:.2f} %)")
    if checked > max_percent:
        sys.exit(f"check_start_read: a start read {checked:.2f} % of a set whose values were checked, "
                 f"more than {max_percent} %")
    if not older > checked:
        sys.exit("check_start_read: the set without values_checked read no more than the one with it")


if __name__ == "__main__":
    main()
