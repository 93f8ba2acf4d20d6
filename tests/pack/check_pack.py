#!/usr/bin/env python3
"""Checks what `avtrain-shards pack` makes of the media of make_media.py.

    check_pack.py content SET MEDIA_DIR        lengths, tones (FFT), frame order, a colour, padding, labels
    check_pack.py same SET_A SET_B             the same samples in the same places, every value
    check_pack.py report SET MEDIA_DIR         pack-report.csv names every bad clip with its reason
    check_pack.py fail PACK MEDIA_DIR OUT -- LAUNCH...   --on-error fail stops every rank, exit 1, one line
    check_pack.py resume PACK MEDIA_DIR OUT -- LAUNCH...   a pack killed (SIGKILL, then SIGUSR1: exit 75)
        and run again ends with the set of a pack that ran through (on one rank, OUT.reference);
        rounds: AVTRAIN_PACK_KILL_ROUNDS (1)

PACK is the avtrain-shards program; LAUNCH the mpirun command line for the ranks.
"""
import csv
import filecmp
import glob
import json
import os
import signal
import subprocess
import sys
import time

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
import run_processes  # noqa: E402

DATASETS = ["audio", "audio_len", "video", "video_len", "label", "source"]


def fail(message):
    print(f"check_pack: FAIL: {message}")
    sys.exit(1)


def load_set(directory):
    """Every sample of the set in order: a dict of arrays, plus the attributes of the first shard."""
    files = sorted(glob.glob(os.path.join(directory, "*.h5")))
    if not files:
        fail(f"{directory} holds no shard")
    parts = {name: [] for name in DATASETS}
    attributes = None
    for path in files:
        with h5py.File(path, "r") as f:
            if attributes is None:
                attributes = {k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in f.attrs.items()}
            for name in DATASETS:
                parts[name].append(f[name][...])
    return {name: np.concatenate(parts[name]) for name in DATASETS}, attributes, [os.path.basename(p) for p in files]


def tone_of(audio, rate):
    x = audio.astype(np.float64) * np.hanning(len(audio))
    spectrum = np.abs(np.fft.rfft(x))
    k = int(np.argmax(spectrum[1:])) + 1
    a, b, c = np.log(spectrum[k - 1:k + 2] + 1e-12)
    shift = 0.5 * (a - c) / (a - 2 * b + c)  # parabolic peak
    return (k + shift) * rate / len(audio)


def content(directory, media_dir):
    expect = json.load(open(os.path.join(media_dir, "expect.json")))
    shape = expect["shape"]
    data, attrs, _ = load_set(directory)
    clips = expect["clips"]
    n = len(clips)
    if len(data["label"]) != n:
        fail(f"{len(data['label'])} samples, expected {n}")
    names = [x.decode() if isinstance(x, bytes) else x for x in attrs["class_names"]]
    if names != expect["classes"]:
        fail(f"class_names {names}, expected {expect['classes']}")
    packed = json.loads(attrs["packed_with"])
    for key, value in [("sample_rate", 16000), ("fps", 10.0), ("size", "32x24"), ("pixels", "rgb"), ("duration_s", 1.0)]:
        if packed[key] != value:
            fail(f"packed_with {key} = {packed[key]}, expected {value}")
    A, F = round(shape["duration"] * shape["sample_rate"]), round(shape["duration"] * shape["fps"])
    if data["audio"].shape != (n, A) or data["video"].shape != (n, F, shape["height"], shape["width"], 3):
        fail(f"shapes {data['audio'].shape} {data['video'].shape}")
    checked = 0
    for i, clip in enumerate(clips):
        where = f"sample {i} ({clip['path']}, start {clip['start']}, audio {clip['audio_path'] or 'inside'})"
        source = data["source"][i].decode()
        if not source.startswith("media/" + clip["path"]) and clip["path"] not in source:
            fail(f"{where}: /source is {source}")
        if data["label"][i] != clip["label"]:
            fail(f"{where}: label {data['label'][i]}, expected {clip['label']}")
        # Audio: its length, then the tone after resampling (within 1 %), zeros after it.
        alen = int(data["audio_len"][i])
        if abs(alen - clip["audio_len"]) > 0.002 * clip["audio_len"] + 2:
            fail(f"{where}: audio_len {alen}, expected {clip['audio_len']}")
        audio = data["audio"][i].astype(np.float64) / 32768
        window = audio[:alen]
        if clip["tone_window"]:  # the tone steps: the one after start tells where the audio starts
            a, b = (round(x * shape["sample_rate"]) for x in clip["tone_window"])
            window = audio[a:b]
        tone = tone_of(window, shape["sample_rate"])
        if abs(tone - clip["tone"]) > 0.01 * clip["tone"]:
            fail(f"{where}: tone {tone:.1f} Hz, expected {clip['tone']} Hz")
        if np.any(audio[alen:] != 0):
            fail(f"{where}: audio past audio_len is not zero")
        if np.abs(audio[:alen]).max() < 0.02:
            fail(f"{where}: the audio is silent")
        # Video: the frame counter (grey 20 + 6 n) read back from each frame, zeros after video_len.
        vlen = int(data["video_len"][i])
        frames = clip["frames"]
        if vlen != len(frames):
            fail(f"{where}: video_len {vlen}, expected {len(frames)}")
        video = data["video"][i].astype(np.float64)
        if clip["colour"]:
            mean = video[:vlen].reshape(-1, 3).mean(axis=0)
            if np.abs(mean - np.array(clip["colour"])).max() > 8:
                fail(f"{where}: colour {mean.round(1)}, expected {clip['colour']}")
        else:
            for k, n_expected in enumerate(frames):
                grey = video[k].mean()
                n_read = (grey - 20) / 6
                if abs(n_read - n_expected) > 0.45:
                    fail(f"{where}: frame {k} shows source frame {n_read:.2f}, expected {n_expected} "
                         f"(source times {clip['frame_times'][:12]})")
                if video[k].std() > 3:
                    fail(f"{where}: frame {k} is not uniform (std {video[k].std():.1f})")
        if np.any(video[vlen:] != 0):
            fail(f"{where}: frames past video_len are not zero")
        checked += 1
    print(f"check_pack: content ok: {checked} samples: lengths, tones within 1 %, frame order by timestamp, "
          f"the colour, zero padding, labels, class names")


def same(a, b):
    da, attrs_a, files_a = load_set(a)
    db, attrs_b, files_b = load_set(b)
    if files_a != files_b:
        fail(f"shard files differ: {files_a} vs {files_b}")
    if attrs_a != attrs_b:
        fail(f"attributes differ: {attrs_a} vs {attrs_b}")
    for name in DATASETS:
        if da[name].shape != db[name].shape or not np.array_equal(da[name], db[name]):
            fail(f"/{name} differs between {a} and {b}")
    for fa in files_a:
        with h5py.File(os.path.join(a, fa)) as x, h5py.File(os.path.join(b, fa)) as y:
            if len(x["label"]) != len(y["label"]):
                fail(f"{fa} holds {len(x['label'])} samples in {a}, {len(y['label'])} in {b}")
        # Byte for byte too: a run's fingerprint holds each shard's size, and the same set must pass it.
        if not filecmp.cmp(os.path.join(a, fa), os.path.join(b, fa), shallow=False):
            fail(f"{fa} differs in its bytes between {a} and {b} (its values are the same)")
    print(f"check_pack: same: {len(files_a)} shards, {len(da['label'])} samples, every value and byte equal in {a} and {b}")


def report(directory, media_dir):
    expect = json.load(open(os.path.join(media_dir, "expect.json")))
    rows = list(csv.DictReader(open(os.path.join(directory, "pack-report.csv"))))
    if [int(r["line"]) for r in rows] != [b["line"] for b in expect["bad"]]:
        fail(f"report lines {[r['line'] for r in rows]}, expected {[b['line'] for b in expect['bad']]}")
    for row, bad in zip(rows, expect["bad"]):
        if bad["reason"] not in row["reason"] or not row["path"].endswith(bad["path"]):
            fail(f"report row {row}, expected {bad['path']}: ...{bad['reason']}...")
        print(f"  line {row['line']}: {row['path']}: {row['reason']}")
    data, _, _ = load_set(directory)
    if len(data["label"]) != 1:
        fail(f"{len(data['label'])} samples packed, expected the 1 good clip")
    print(f"check_pack: report ok: {len(rows)} bad clips reported with their reasons, the good one packed")


def run_to_end(command, env=None, timeout=300):
    p = run_processes.run(command, capture_output=True, text=True, timeout=timeout, env=env)
    return p.returncode, p.stdout, p.stderr


def fail_mode(pack, media_dir, out, launch):
    expect = json.load(open(os.path.join(media_dir, "expect.json")))
    command = launch + [pack, "pack", "--manifest", os.path.join(media_dir, "bad.csv"), "--classes",
                        os.path.join(media_dir, "classes.txt"), "--out", out, "--on-error", "fail", "--overwrite",
                        "--shard-size", "1", "--threads", "1", *expect["pack_options"]]
    code, stdout, stderr = run_to_end(command)
    lines = [l for l in stderr.splitlines() if "--on-error fail" in l]
    if code != 1 or len(lines) < 1 or "file not found" not in lines[0]:
        fail(f"--on-error fail: exit {code}, stderr:\n{stderr}")
    # It stopped: no report (written only when every shard is done), and the bad clip's shard and the
    # failing rank's later shards not finished.
    records = glob.glob(os.path.join(out, ".pack", "shard-*.json"))
    if os.path.exists(os.path.join(out, "pack-report.csv")) or len(records) >= 9 or \
            os.path.exists(os.path.join(out, ".pack", "shard-00001.json")):
        fail(f"--on-error fail did not stop the pack: {len(records)} of 9 shards recorded")
    print(f"check_pack: fail ok: exit {code}, '{lines[0]}'")


def resume(pack, media_dir, out, launch):
    expect = json.load(open(os.path.join(media_dir, "expect.json")))
    base = [pack, "pack", "--manifest", os.path.join(media_dir, "good.csv"), "--classes",
            os.path.join(media_dir, "classes.txt"), "--out", out, "--shard-size", "2", "--threads", "1",
            "--progress-s", "0", *expect["pack_options"]]
    slow = ["--debug-delay-ms", "60"]  # a pause per clip, so that the signal lands while shards are written
    reference = out + ".reference"
    subprocess.run(["rm", "-rf", out, reference], check=True)
    code, stdout, stderr = run_to_end([*base[:base.index("--out") + 1], reference, *base[base.index("--out") + 2:]])
    if code != 0:
        fail(f"the reference pack: exit {code}\n{stderr}")
    rounds = int(os.environ.get("AVTRAIN_PACK_KILL_ROUNDS", "1"))
    for round_ in range(rounds):
        for sig, expected_code in [(signal.SIGKILL, None), (signal.SIGUSR1, 75)]:
            subprocess.run(["rm", "-rf", out], check=True)
            # Nothing of the run outlives this round: leaving the block kills its session.
            with run_processes.Session(launch + base + slow, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       text=True) as p:
                # A different moment each round: after 1, 2 or 3 shards are finished.
                wanted = 1 + (2 * round_ + (sig == signal.SIGUSR1)) % 3
                deadline = time.time() + 60
                while time.time() < deadline and len(glob.glob(os.path.join(out, ".pack", "shard-*.json"))) < wanted:
                    time.sleep(0.005)
                if len(glob.glob(os.path.join(out, ".pack", "shard-*.json"))) < wanted:
                    fail(f"{wanted} shard(s) did not finish within 60 s")
                if sig == signal.SIGKILL:
                    p.kill_session()  # every rank and the launcher
                else:
                    os.kill(p.pid, sig)  # mpirun passes SIGUSR1 on to the ranks (as Slurm's --signal does)
                stdout, stderr = p.communicate(timeout=60)
            finished = len(glob.glob(os.path.join(out, ".pack", "shard-*.json")))
            if expected_code is not None and p.returncode != expected_code:
                fail(f"{sig.name}: exit {p.returncode}, expected {expected_code}; stderr:\n{stderr}")
            if finished >= 8:
                fail(f"{sig.name} came after the pack had finished; slow it down")
            code, stdout, stderr = run_to_end(launch + base)
            if code != 0 or "continuing" not in stderr:
                fail(f"the pack run again after {sig.name}: exit {code}\n{stdout}\n{stderr}")
            same(reference, out)
            print(f"check_pack: resume round {round_ + 1}: {sig.name} after {finished} of 8 shards "
                  f"(exit {p.returncode}), run again: the same set")
    print(f"check_pack: resume ok: {rounds} round(s) of SIGKILL and SIGUSR1 (AVTRAIN_PACK_KILL_ROUNDS for more)")


def main():
    args = sys.argv[1:]
    launch = args[args.index("--") + 1:] if "--" in args else []
    args = args[:args.index("--")] if "--" in args else args
    if args[0] == "content":
        content(args[1], args[2])
    elif args[0] == "same":
        same(args[1], args[2])
    elif args[0] == "report":
        report(args[1], args[2])
    elif args[0] == "fail":
        fail_mode(args[1], args[2], args[3], launch)
    elif args[0] == "resume":
        resume(args[1], args[2], args[3], launch)
    else:
        fail(f"unknown check {args[0]}")


if __name__ == "__main__":
    main()
