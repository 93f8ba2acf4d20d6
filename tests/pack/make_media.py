#!/usr/bin/env python3
"""Makes the test media of `avtrain-shards pack` with the ffmpeg command-line tool, and what the
pack must make of them.

    make_media.py DIR

writes DIR/media/* (many containers and codecs, lavfi sources), DIR/good.csv (clips that must pack),
DIR/bad.csv (clips that must be reported), DIR/damaged.csv (clips with a few packets overwritten, and
one with many), DIR/classes.txt and DIR/expect.json: per good clip its
tone (Hz), audio length and the source frame (a counter drawn into every frame as its grey level,
20 + 6 n) expected at each target time, taken from ffprobe's timestamps by the rule of the pack:
the frame shown at start + k / fps is the last one whose timestamp is not after it.
"""
import json
import os
import subprocess
import sys

# The pack these expectations are for (check_pack.py passes the same options).
SHAPE = {"duration": 1.0, "sample_rate": 16000, "fps": 10.0, "width": 32, "height": 24}
PACK_OPTIONS = ["--duration", "1", "--sample-rate", "16000", "--fps", "10", "--size", "32x24", "--pixels", "rgb"]


def ffmpeg(*args):
    subprocess.run(["ffmpeg", "-v", "error", "-nostdin", "-y", *args], check=True)


def counter_video(size, rate, seconds, setpts=None):
    """A lavfi source whose frame n is grey 20 + 6 n (n <= 36)."""
    chain = f"color=c=black:s={size}:r={rate}:d={seconds},format=gray,geq=lum='min(20+6*N\\,236)',format=yuv420p"
    if setpts:
        chain += f",setpts='{setpts}'"
    return ["-f", "lavfi", "-i", chain]


def sine(freq, rate, seconds, channels=None):
    src = f"sine=frequency={freq}:sample_rate={rate}:duration={seconds}"
    if channels == 2:
        src += ",pan=stereo|c0=c0|c1=c0"
    elif channels == 6:
        src += ",pan=5.1|c0=c0|c1=c0|c2=c0|c3=c0|c4=c0|c5=c0"
    return ["-f", "lavfi", "-i", src]


def frame_times(path):
    out = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries",
                          "frame=best_effort_timestamp_time,pkt_duration_time", "-of", "csv=p=0", path],
                         check=True, capture_output=True, text=True).stdout
    times, durations = [], []
    for line in out.split():
        fields = [f for f in line.split(",") if f and f != "N/A"]
        if fields:
            times.append(float(fields[0]))
            durations.append(float(fields[1]) if len(fields) > 1 else 0.0)
    return times, durations


def audio_seconds(path):
    """The decoded audio's length (ffprobe's frames: encoder delay and padding as FFmpeg trims them)."""
    probe = lambda entries: subprocess.run(["ffprobe", "-v", "error", "-select_streams", "a:0", "-show_entries",
                                            entries, "-of", "csv=p=0", path],
                                           check=True, capture_output=True, text=True).stdout.split()
    rate = int(probe("stream=sample_rate")[0])
    return sum(int(n) for n in probe("frame=nb_samples")) / rate


def start_time(path):
    out = subprocess.run(["ffprobe", "-v", "error", "-show_entries", "format=start_time", "-of", "csv=p=0", path],
                         check=True, capture_output=True, text=True).stdout.strip()
    return float(out) if out and out != "N/A" else 0.0


def expected_frames(path, start, seconds, fps, frames):
    """Source frame index at each target, by the pack's rule, from ffprobe's timestamps."""
    times, durations = frame_times(path)
    origin = start_time(path)
    times = [t - origin for t in times]
    order = sorted(range(len(times)), key=lambda i: times[i])  # presentation order
    end = times[order[-1]] + (durations[order[-1]] or (times[order[-1]] - times[order[-2]]))
    picks = []
    for k in range(frames):
        target = start + k / fps
        if k / fps >= seconds - 1e-9 or target >= end - 1e-6:
            break
        shown = [i for i in order if times[i] <= target + 1e-6]
        picks.append(shown[-1] if shown else order[0])
    return picks, times


def packets_of(path, stream):
    """(byte offset, size) of each packet of the stream ("a:0", "v:0"), in file order, as ffprobe reads them."""
    out = subprocess.run(["ffprobe", "-v", "error", "-select_streams", stream, "-show_entries", "packet=pos,size",
                          "-of", "json", path], check=True, capture_output=True, text=True).stdout
    return [(int(p["pos"]), int(p["size"])) for p in json.loads(out)["packets"]]


def damage_packets(source, target, damage):
    """Copies source to target with the packets damage = {"a:0": [index, ...], "v:0": [...]} overwritten by
    0xff bytes (a bad header: the decoders refuse them, as ffmpeg -f null shows)."""
    with open(source, "rb") as f:
        data = bytearray(f.read())
    for stream, indices in damage.items():
        packets = packets_of(source, stream)
        for i in indices:
            pos, size = packets[i]
            data[pos:pos + size] = b"\xff" * size
    with open(target, "wb") as f:
        f.write(data)


# The damaged-packet pack: its own shape (4 s clips; frames at the source's 25 fps, so that every
# source frame is a target and a lost one shows as the one before it).
DAMAGED_OPTIONS = ["--duration", "4", "--sample-rate", "16000", "--fps", "25", "--size", "32x24", "--pixels", "rgb"]


def damaged_media(root, media):
    """media/damaged/*: a clean file and copies with a few packets overwritten; DIR/damaged.csv; what the
    pack must report (expect["damaged"]). Video all key frames (a lost frame damages no other)."""
    os.makedirs(os.path.join(media, "damaged"), exist_ok=True)
    d = lambda name: os.path.join(media, "damaged", name)
    ffmpeg(*counter_video("64x48", 25, 4.2), *sine(440, 44100, 4.2), "-c:v", "libx264", "-g", "1", "-c:a", "aac",
           "-shortest", d("clean.mp4"))
    # Like Megamind.avi (the opencv sample film): MPEG-4 video and AC-3 audio in AVI.
    ffmpeg(*counter_video("64x48", 25, 4.2), *sine(660, 48000, 4.2, 2), "-c:v", "mpeg4", "-g", "1", "-c:a", "ac3",
           "-shortest", d("mpeg4_ac3.avi"))
    clips = [  # file, made from, damaged packets, expected status
        ("clean.mp4", None, {}, "packed"),
        ("audio.mp4", "clean.mp4", {"a:0": [20, 90, 150]}, "warning"),
        ("video.mp4", "clean.mp4", {"v:0": [20, 50, 51]}, "warning"),
        ("both.avi", "mpeg4_ac3.avi", {"a:0": [15, 60], "v:0": [30, 70]}, "warning"),
        ("too_damaged.mp4", "clean.mp4", {"a:0": list(range(10, 50, 2))}, "skipped"),  # 20 of ~180: 11 %
    ]
    expect = []
    with open(os.path.join(root, "damaged.csv"), "w") as f:
        f.write("path,label\n")
        for i, (name, made_from, damage, status) in enumerate(clips):
            if made_from:
                damage_packets(d(made_from), d(name), damage)
            f.write(f"media/damaged/{name},{['bird', 'cat', 'dog'][i % 3]}\n")
            expect.append({"path": "media/damaged/" + name, "line": i + 2, "status": status,
                           "damaged": {"audio" if s == "a:0" else "video": len(ix) for s, ix in damage.items()},
                           "video_lost": damage.get("v:0", []), "like": made_from})
    return expect


def main():
    root = sys.argv[1]
    media = os.path.join(root, "media")
    os.makedirs(media, exist_ok=True)
    m = lambda name: os.path.join(media, name)

    # Video with its own audio, in several containers and codecs.
    ffmpeg(*counter_video("64x48", 25, 1.5), *sine(440, 44100, 1.5, 2), "-c:v", "libx264", "-c:a", "aac",
           "-shortest", m("h264_aac.mp4"))
    ffmpeg(*counter_video("33x17", 30, 1.5), *sine(1000, 48000, 1.5, 2), "-c:v", "libvpx-vp9", "-c:a", "libopus",
           "-shortest", m("vp9_opus_33x17.mkv"))
    ffmpeg(*counter_video("48x32", 15, 1.5), *sine(660, 22050, 1.5), "-c:v", "mpeg4", "-c:a", "libmp3lame",
           "-shortest", m("mpeg4_mp3.avi"))
    ffmpeg(*counter_video("40x30", 20, 1.5), *sine(880, 44100, 1.5, 6), "-c:v", "libvpx", "-c:a", "libvorbis",
           "-shortest", m("vp8_vorbis_51.webm"))
    # Variable frame rate: gaps of 70 ms, then 230 ms.
    ffmpeg(*counter_video("64x48", 25, 0.48, "if(lt(N,6),N*0.07,0.35+(N-5)*0.23)/TB"), *sine(550, 16000, 1.5),
           "-fps_mode", "passthrough", "-c:v", "libx264", "-c:a", "aac", m("vfr.mkv"))
    # A known colour, 16:9 (scaled to cover, centre-cropped).
    ffmpeg("-f", "lavfi", "-i", "color=c=0x3070C0:s=160x90:r=25:d=1.5", *sine(770, 44100, 1.5), "-c:v", "libx264",
           "-pix_fmt", "yuv420p", "-c:a", "aac", "-shortest", m("colour.mp4"))
    # Shorter than a clip (padded), and a long file cut into clips by start/duration.
    ffmpeg(*counter_video("64x48", 25, 0.5), *sine(330, 44100, 0.5), "-c:v", "libx264", "-c:a", "aac",
           "-shortest", m("short.mp4"))
    # Its tone steps each second (400, 800, 1200 Hz): where a clip's audio starts shows in its tone.
    ffmpeg(*counter_video("64x48", 10, 3), "-f", "lavfi", "-i", "aevalsrc=0.5*sin(2*PI*(400+400*floor(t))*t):s=48000:d=3",
           "-c:v", "libx264", "-c:a", "aac", "-shortest", m("long.mp4"))
    # Video without audio, and audio files beside it (audio_path).
    ffmpeg(*counter_video("64x48", 25, 1.5), "-c:v", "libx264", m("video_only.mp4"))
    ffmpeg(*sine(500, 8000, 1.5), "-c:a", "pcm_s16le", m("tone_8k_mono.wav"))
    ffmpeg(*sine(700, 22050, 1.5, 2), "-c:a", "flac", m("tone_22k_stereo.flac"))
    ffmpeg(*sine(1100, 44100, 1.5, 2), "-c:a", "libmp3lame", m("tone_44k_stereo.mp3"))
    ffmpeg(*sine(1300, 48000, 1.5, 6), "-c:a", "libopus", "-mapping_family", "1", m("tone_48k_51.ogg"))
    # An image sequence (PNG, read at FFmpeg's image2 rate of 25 fps) beside a WAV.
    os.makedirs(m("frames"), exist_ok=True)
    ffmpeg(*counter_video("48x36", 25, 1.2), "-pix_fmt", "gray", m("frames/f-%03d.png"))

    # Bad files.
    with open(m("not_media.mp4"), "w") as f:
        f.write("this is not a video\n")
    with open(m("h264_aac.mp4"), "rb") as f:
        whole = f.read()
    with open(m("truncated.mp4"), "wb") as f:
        f.write(whole[: len(whole) * 6 // 10])

    classes = ["bird", "cat", "dog"]
    with open(os.path.join(root, "classes.txt"), "w") as f:
        f.write("# the class list, in label order\n" + "\n".join(classes) + "\n")

    good = [  # path, audio_path, start, duration, tone Hz
        ("h264_aac.mp4", "", 0, 0, 440),
        ("vp9_opus_33x17.mkv", "", 0, 0, 1000),
        ("mpeg4_mp3.avi", "", 0, 0, 660),
        ("vp8_vorbis_51.webm", "", 0, 0, 880),
        ("vfr.mkv", "", 0, 0, 550),
        ("colour.mp4", "", 0, 0, 770),
        ("short.mp4", "", 0, 0, 330),
        ("long.mp4", "", 0, 0, 400),      # 0.05 .. 0.95 s: 400 Hz
        ("long.mp4", "", 1.2, 0, 800),    # 1.25 .. 1.95 s: 800 Hz
        ("long.mp4", "", 2.5, 0, 1200),   # 2.55 .. 2.95 s: 1200 Hz
        ("long.mp4", "", 0.4, 0.6, 400),  # 0.45 .. 0.95 s: 400 Hz
        ("video_only.mp4", "tone_8k_mono.wav", 0, 0, 500),
        ("video_only.mp4", "tone_22k_stereo.flac", 0, 0, 700),
        ("video_only.mp4", "tone_44k_stereo.mp3", 0, 0, 1100),
        ("video_only.mp4", "tone_48k_51.ogg", 0, 0, 1300),
        ("frames/f-%03d.png", "tone_8k_mono.wav", 0, 0, 500),
    ]
    expect = {"shape": SHAPE, "pack_options": PACK_OPTIONS, "classes": classes, "clips": []}
    with open(os.path.join(root, "good.csv"), "w") as f:
        f.write("path,label,audio_path,start,duration\n")
        for i, (path, audio, start, duration, tone) in enumerate(good):
            label = classes[i % 3]
            f.write(f"media/{path},{label},{'media/' + audio if audio else ''},{start or ''},{duration or ''}\n")
            seconds = min(duration or SHAPE["duration"], SHAPE["duration"])
            frames = round(SHAPE["duration"] * SHAPE["fps"])
            picks, times = expected_frames(m(path), start, seconds, SHAPE["fps"], frames)
            expect["clips"].append({
                "path": path, "audio_path": audio, "start": start, "label": i % 3, "tone": tone,
                "audio_len": round(min(seconds, audio_seconds(m(audio or path)) - start) * SHAPE["sample_rate"]),
                # long.mp4: the tone of the clip's audio within the second its start is in.
                "tone_window": [0.05, min(seconds, 1 - start % 1 - 0.05)] if path == "long.mp4" else None,
                "frames": picks, "frame_times": times, "colour": [48, 112, 192] if path == "colour.mp4" else None})

    bad = [  # path, label, audio_path, start, reason (a part of it)
        ("missing.mp4", "cat", "", "", "file not found"),
        ("not_media.mp4", "cat", "", "", "cannot open"),
        ("truncated.mp4", "dog", "", "", "cannot open"),
        ("video_only.mp4", "dog", "", "", "no audio stream"),
        ("tone_8k_mono.wav", "bird", "", "", "no video stream"),
        ("h264_aac.mp4", "zebra", "", "", "not in the class list"),
        ("h264_aac.mp4", "bird", "", "9", "past the end"),
        ("video_only.mp4", "cat", "missing.wav", "", "file not found"),
    ]
    with open(os.path.join(root, "bad.csv"), "w") as f:
        f.write("path,label,audio_path,start\n")
        f.write("media/h264_aac.mp4,bird,,\n")  # one good clip, first
        for path, label, audio, start, _ in bad:
            f.write(f"media/{path},{label},{'media/' + audio if audio else ''},{start}\n")
    expect["bad"] = [{"line": i + 3, "path": path, "reason": reason} for i, (path, _, _, _, reason) in enumerate(bad)]
    expect["damaged"] = damaged_media(root, media)
    expect["damaged_options"] = DAMAGED_OPTIONS
    with open(os.path.join(root, "expect.json"), "w") as f:
        json.dump(expect, f, indent=1)
    print(f"make_media: {len(good)} good clips, {len(bad)} bad ones in {root}")


if __name__ == "__main__":
    main()
