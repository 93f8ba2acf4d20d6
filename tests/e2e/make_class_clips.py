#!/usr/bin/env python3
"""Makes a folder of labelled clips as a team's own videos would be laid out: DIR/<class>/<clip>.mp4,
each a few seconds of H.264 video with AAC audio made by the ffmpeg command-line tool. A class is a
tone and a colour (its clips vary in pitch, shade, length and noise), so a small model learns them.

usage: make_class_clips.py DIR [CLIPS_PER_CLASS]
"""
import os
import subprocess
import sys

CLASSES = {"cello": (220, "0x8a3b12"), "flute": (880, "0x2a7ab0"), "horn": (440, "0x3f9a3a")}


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    root, per_class = sys.argv[1], int(sys.argv[2]) if len(sys.argv) == 3 else 20
    for name, (tone, colour) in CLASSES.items():
        os.makedirs(os.path.join(root, name), exist_ok=True)
        for i in range(per_class):
            freq = tone * (1 + 0.03 * ((i % 5) - 2))
            seconds = 2.0 + 0.25 * (i % 3)
            video = (f"color=c={colour}:s=80x60:r=12:d={seconds},noise=alls={8 + i % 7}:allf=t,"
                     f"eq=brightness={0.02 * ((i % 4) - 1.5):.3f},format=yuv420p")
            audio = f"sine=frequency={freq:.1f}:sample_rate=22050:duration={seconds}"
            subprocess.run(["ffmpeg", "-v", "error", "-nostdin", "-y", "-f", "lavfi", "-i", video, "-f", "lavfi",
                            "-i", audio, "-c:v", "libx264", "-preset", "ultrafast", "-c:a", "aac", "-shortest",
                            os.path.join(root, name, f"clip-{i:03d}.mp4")], check=True)


if __name__ == "__main__":
    main()
