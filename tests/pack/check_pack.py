#!/usr/bin/env python3
"""Checks what `avtrain-shards pack` makes of the media of make_media.py.

    check_pack.py content SET MEDIA_DIR        lengths, tones (FFT), frame order, a colour, padding, labels
    check_pack.py same SET_A SET_B             the same samples in the same places, every value
    check_pack.py report SET MEDIA_DIR         pack-report.csv names every bad clip with its reason
    check_pack.py fail PACK MEDIA_DIR OUT -- LAUNCH...   --on-error fail stops every rank, exit 1, one line
    check_pack.py damaged PACK MEDIA_DIR OUT -- LAUNCH...   damaged packets: warning rows, the gaps filled,
        past --max-damaged skipped, --on-error fail stops
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
    # The clips' own lines ("...: video: file not found (line 3; --on-error fail)"), whichever rank meets
    # its bad clip first; the start line that counts the clips known to be unpackable is not one.
    lines = [l for l in stderr.splitlines() if "; --on-error fail)" in l]
    if code != 1 or not any("file not found" in l for l in lines):
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


def ffmpeg_decode_errors(path):
    """FFmpeg's own count of the packets it could not decode, per stream type: `ffmpeg -v error -i FILE
    -f null -` (its "Error while decoding stream #0:N" lines, with "Last message repeated K times")."""
    types = subprocess.run(["ffprobe", "-v", "error", "-show_entries", "stream=codec_type", "-of", "csv=p=0", path],
                           check=True, capture_output=True, text=True).stdout.split()
    stderr = subprocess.run(["ffmpeg", "-v", "error", "-nostdin", "-i", path, "-f", "null", "-"],
                            capture_output=True, text=True).stderr
    counts, last = {}, None
    for line in stderr.splitlines():
        if line.startswith("Error while decoding stream #0:"):
            last = types[int(line.split("#0:")[1].split(":")[0])]
            counts[last] = counts.get(last, 0) + 1
        elif "Last message repeated" in line and last:
            counts[last] += int(line.split("repeated")[1].split()[0])
        elif not line.startswith("["):
            last = None
    return counts


def packet_times(path, stream):
    """(start, duration) in seconds from the media's start of each packet of the stream ("a:0")."""
    out = subprocess.run(["ffprobe", "-v", "error", "-select_streams", stream, "-show_entries",
                          "packet=pts_time,duration_time", "-of", "json", path],
                         check=True, capture_output=True, text=True).stdout
    origin = subprocess.run(["ffprobe", "-v", "error", "-show_entries", "format=start_time", "-of", "csv=p=0", path],
                            check=True, capture_output=True, text=True).stdout.strip()
    origin = float(origin) if origin and origin != "N/A" else 0.0
    return [(float(p["pts_time"]) - origin, float(p["duration_time"])) for p in json.loads(out)["packets"]]


def damaged(pack, media_dir, out, launch):
    """Clips with a few damaged packets are packed with warning rows naming FFmpeg's own count, the gaps
    filled (silence for the lost audio, the frame before a lost one), everything else as the clean clip
    packs; one past --max-damaged is skipped with its reason; --on-error fail stops at the first."""
    expect = json.load(open(os.path.join(media_dir, "expect.json")))
    clips = expect["damaged"]
    rate = 16000
    # The media are bad as meant: ffmpeg itself fails on exactly those packets, and on none of the clean file.
    for clip in clips:
        errors = ffmpeg_decode_errors(os.path.join(media_dir, clip["path"]))
        if errors != clip["damaged"]:
            fail(f"{clip['path']}: ffmpeg -f null fails on {errors} packets, the media were made with {clip['damaged']}")
    base = [pack, "pack", "--manifest", os.path.join(media_dir, "damaged.csv"), "--classes",
            os.path.join(media_dir, "classes.txt"), "--progress-s", "0", "--overwrite", *expect["damaged_options"]]
    code, stdout, stderr = run_to_end(launch + base + ["--out", out, "--shard-size", "2"])
    if code != 0 or ", 1 skipped, 3 with warnings (" not in stdout:
        fail(f"the pack of damaged.csv: exit {code}, stdout:\n{stdout}\nstderr:\n{stderr}")
    rows = {int(r["line"]): r for r in csv.DictReader(open(os.path.join(out, "pack-report.csv")))}
    for clip in clips:
        row = rows.get(clip["line"])
        if clip["status"] == "packed":
            if row:
                fail(f"{clip['path']} is in the report: {row}")
            continue
        if not row or row["status"] != clip["status"] or not row["path"].endswith(clip["path"]):
            fail(f"{clip['path']}: report row {row}, expected status {clip['status']}")
        for stream, n in clip["damaged"].items():
            filled = "filled with silence" if stream == "audio" else "the previous frame shown"
            words = (f"{stream}: {n} of " if clip["status"] == "skipped" else f"{stream}: {n} of ")
            at = row["reason"].find(words)
            if at < 0:
                fail(f"{clip['path']}: reason {row['reason']!r} does not say {words!r}...")
            total = int(row["reason"][at + len(words):].split()[0])
            if not 90 <= total <= 250:  # 4 s of 25 frames or 43 AAC packets a second (31 AC-3 ones)
                fail(f"{clip['path']}: {total} {stream} packets in {row['reason']!r}")
            tail = "more than --max-damaged 0.05" if clip["status"] == "skipped" else f"packets damaged, skipped ({filled})"
            if tail not in row["reason"]:
                fail(f"{clip['path']}: reason {row['reason']!r} lacks {tail!r}")
        print(f"  line {row['line']}: {row['path']}: {row['status']}: {row['reason']}")
    if len(rows) != 4:
        fail(f"{len(rows)} report rows, expected 4: {rows}")

    data, _, _ = load_set(out)
    sources = [x.decode().replace(media_dir.rstrip("/") + "/", "") for x in data["source"]]
    packed = [c for c in clips if c["status"] != "skipped"]
    if sources != [c["path"] for c in packed]:
        fail(f"samples {sources}, expected {[c['path'] for c in packed]}")
    at = {c["path"]: i for i, c in enumerate(packed)}
    clean = at["media/damaged/clean.mp4"]
    audio_clean, video_clean = data["audio"][clean].astype(np.int64), data["video"][clean]
    # Lost video frames: the frame before shown instead (every source frame is a target at 25 fps); the
    # others and the audio as in the clean clip, bit for bit.
    v = at["media/damaged/video.mp4"]
    lost = set(clips[[c["path"] for c in clips].index("media/damaged/video.mp4")]["video_lost"])
    for k in range(int(data["video_len"][clean])):
        shown = k
        while shown in lost and shown > 0:
            shown -= 1
        if not np.array_equal(data["video"][v][k], video_clean[shown]):
            fail(f"video.mp4: frame {k} is not the clean clip's frame {shown}")
    if not np.array_equal(data["audio"][v], data["audio"][clean]) or data["video_len"][v] != data["video_len"][clean]:
        fail("video.mp4: its audio or video_len differ from the clean clip's")
    # Lost audio packets: silence for their time, and the audio on both sides at its time: as the clean
    # clip's, but for the decoder's overlap into the next packet (AAC: one frame of 1024 samples).
    a = at["media/damaged/audio.mp4"]
    if not np.array_equal(data["video"][a], video_clean) or data["audio_len"][a] != data["audio_len"][clean]:
        fail("audio.mp4: its video or audio_len differ from the clean clip's")
    times = packet_times(os.path.join(media_dir, "media/damaged/clean.mp4"), "a:0")
    lost_audio = [20, 90, 150]
    near = np.zeros(len(audio_clean), bool)
    audio = data["audio"][a].astype(np.int64)
    for i in lost_audio:
        t0, length = times[i]
        g0, g1 = round(t0 * rate), round((t0 + length) * rate)
        if np.any(audio[g0 + 40:g1 - 40] != 0):
            fail(f"audio.mp4: the lost packet {i} ({t0:.3f} s + {length:.3f} s) is not silent: "
                 f"{np.abs(audio[g0 + 40:g1 - 40]).max()}")
        near[max(0, g0 - 40):g1 + round(1024 / 44100 * rate) + 40] = True
    difference = np.abs(audio - audio_clean)[~near].max()
    if difference > 2:
        where = int(np.argmax(np.abs(audio - audio_clean) * ~near))
        fail(f"audio.mp4: away from the gaps the audio differs from the clean clip's by {difference} at {where}")
    print(f"check_pack: damaged: packed with warning rows of FFmpeg's count, lost frames {sorted(lost)} show the one "
          f"before, lost audio packets {lost_audio} silent, the rest as the clean clip (within {difference} LSB); "
          f"the clip past --max-damaged skipped")

    # --max-damaged 0: every damaged clip skipped; 0.2: the 11 % one packed, with its warning.
    for max_damaged, samples, warnings in [("0", 1, 0), ("0.2", 5, 4)]:
        code, stdout, stderr = run_to_end(base + ["--out", out + ".max", "--max-damaged", max_damaged])
        want = f"{samples} clip{'s' if samples > 1 else ''} packed into"
        if code != 0 or want not in stdout or f" {warnings} with warnings" not in stdout:
            fail(f"--max-damaged {max_damaged}: exit {code}, expected '{want}' and {warnings} warnings:\n{stdout}{stderr}")
    # --on-error fail: the first damaged packet stops the pack, the file named.
    code, stdout, stderr = run_to_end(launch + base + ["--out", out + ".fail", "--on-error", "fail", "--shard-size", "1",
                                                       "--threads", "1"])
    lines = [l for l in stderr.splitlines() if "--on-error fail" in l]
    if code != 1 or not lines or "media/damaged/" not in lines[0] or "(a damaged packet)" not in lines[0]:
        fail(f"--on-error fail on damaged packets: exit {code}, stderr:\n{stderr}")
    print(f"check_pack: damaged: --max-damaged 0 and 0.2 as meant; --on-error fail: '{lines[0]}'")


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
    elif args[0] == "damaged":
        damaged(args[1], args[2], args[3], launch)
    elif args[0] == "resume":
        resume(args[1], args[2], args[3], launch)
    else:
        fail(f"unknown check {args[0]}")


if __name__ == "__main__":
    main()
