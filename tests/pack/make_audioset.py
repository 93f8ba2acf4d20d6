#!/usr/bin/env python3
"""Makes a tiny AudioSet as its users hold it: Google's two CSV files (the segments with their `#`
comment lines and quoted lists of mids; the class index with display names, one holding a comma)
and a folder of downloads named YTID.mp4, YYTID.mkv (in a sub-folder too), one segment never
downloaded and one downloaded as audio alone (YYTID.wav), each clip 1 s of a counter video and a
tone of its first class (make_media.py's sources; one ffmpeg a tone).

    make_audioset.py DIR

writes DIR/balanced_train_segments.csv, DIR/class_labels_indices.csv, DIR/media/ and DIR/expect.json:
the class names, per YTID its display names, and which segments the pack must skip and why.
"""
import json
import os
import sys

from make_media import counter_video, ffmpeg, sine

CLASSES = [("/m/09x0r", "Speech"), ("/m/05zppz", "Male speech, man speaking"), ("/m/0jbk", "Animal"),
           ("/m/0bt9lr", "Dog")]
SETS = [[0], [0, 1], [2, 3], [2], [3, 0], [1], [0, 2, 3], [1, 2], [3], [0, 1, 2, 3], [2, 0], [1, 3], [0], [3, 2]]
MISSING, AUDIO_ONLY = 5, 9


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    root = sys.argv[1]
    media = os.path.join(root, "media")
    os.makedirs(os.path.join(media, "part01"), exist_ok=True)
    with open(os.path.join(root, "class_labels_indices.csv"), "w") as f:
        f.write("index,mid,display_name\n")
        for i, (mid, name) in enumerate(CLASSES):
            f.write(f'{i},{mid},"{name}"\n')
    expect = {"class_names": [name for _, name in CLASSES], "labels": {}, "skipped": {}}
    rows, outputs = [], {}  # outputs: per tone, the files ffmpeg writes at once
    for i, classes in enumerate(SETS):
        ytid = f"-x{i:02d}_AbCdEf"[:11]
        start = 10.0 * i
        rows.append(f'{ytid}, {start:.3f}, {start + 10:.3f}, "{",".join(CLASSES[c][0] for c in classes)}"')
        expect["labels"][ytid] = [CLASSES[c][1] for c in classes]
        tone = 300 + 200 * classes[0]
        if i == MISSING:
            expect["skipped"][ytid] = f"no media file {ytid}.* or Y{ytid}.*"
        elif i == AUDIO_ONLY:
            ffmpeg(*sine(tone, 16000, 1), os.path.join(media, f"Y{ytid}.wav"))
            expect["skipped"][ytid] = "video: no video stream"
        else:
            name = f"Y{ytid}.mkv" if i % 3 == 1 else f"{ytid}.mp4"
            folder = os.path.join(media, "part01") if i == 3 else media
            outputs.setdefault(tone, []).append(os.path.join(folder, name))
    for tone, files in outputs.items():
        encode = ["-map", "0:v", "-map", "1:a", "-c:v", "libx264", "-preset", "ultrafast", "-c:a", "aac", "-shortest"]
        ffmpeg(*counter_video("64x48", 10, 1), *sine(tone, 16000, 1), *[a for f in files for a in (*encode, f)])
    with open(os.path.join(root, "balanced_train_segments.csv"), "w") as f:
        f.write("# Segments csv created Sun Mar  5 10:54:31 2017\n"
                f"# num_ytids={len(SETS)}, num_segs={len(SETS)}, num_unique_labels={len(CLASSES)}, "
                f"num_positive_labels={sum(len(s) for s in SETS)}\n"
                "# YTID, start_seconds, end_seconds, positive_labels\n")
        f.write("\n".join(rows) + "\n")
    with open(os.path.join(root, "expect.json"), "w") as f:
        json.dump(expect, f, indent=1)


if __name__ == "__main__":
    main()
