#!/usr/bin/env python3
"""The media of jobscripts/media-demo.sh, made by tools outside avtrain: each clip is a word spoken
by espeak-ng (a WAV) and the same word drawn by ffmpeg's drawtext in a system font, moving across a
noisy background (an H.264 MP4). Training clips use one set of voices and fonts, validation clips
others (held-out voices and fonts), so validation accuracy measures what was not seen.

    make_word_clips.py DIR [--train-per-word N] [--val-per-word M] [--jobs J] [--seed S] [--multi-label]

writes DIR/train/*.{wav,mp4}, DIR/val/*.{wav,mp4} and the manifests DIR/train.csv, DIR/val.csv
(path,label,audio_path). The same seed makes the same files (x264 runs on one thread: with more, its
output can differ from run to run).

--multi-label: each clip speaks two different words (one voice, "apple river") and draws one word,
half of the time one of the two spoken, else a third; it is labelled with the set of words present
(two or three), and the manifests list it CSV-quoted in a `labels` column
(path,labels,audio_path: `train/m-0001.mp4,"apple,river",train/m-0001.wav`), as `avtrain-shards pack`
reads a multi-label manifest. The clips last MULTI_LABEL_SECONDS (two words take longer), and there
are N (M) clips per word of the vocabulary in all, so that the clip counts match the one-word set's.
"""
import argparse
import concurrent.futures
import os
import random
import subprocess

WORDS = ["apple", "river", "music", "yellow", "window", "garden", "rocket", "silver"]
FONTS = ["dejavu/DejaVuSans", "dejavu/DejaVuSansCondensed", "dejavu/DejaVuSansMono", "dejavu/DejaVuSerif",
         "dejavu/DejaVuSerifCondensed", "liberation2/LiberationSans", "liberation2/LiberationSerif",
         "liberation2/LiberationMono", "freefont/FreeSans", "freefont/FreeSerif", "freefont/FreeMono"]
FONT_DIR = "/usr/share/fonts/truetype"
# English voices of espeak-ng (its own, not MBROLA's) and voice variants (pitch, formants, breath).
VOICES = ["en-us", "en-gb", "en-gb-x-rp", "en-gb-x-gbclan", "en-gb-x-gbcwmd", "en-gb-scotland", "en-029", "en-us-nyc"]
VARIANTS = ["m1", "m2", "m3", "m4", "m5", "m6", "m7", "f1", "f2", "f3", "f4", "f5", "Andy", "Annie", "Alex",
            "belinda", "john", "linda", "Michael", "klatt"]


def font_files():
    """Every style of the families above (DejaVuSans.ttf, DejaVuSans-Bold.ttf, ...)."""
    files = []
    for family in FONTS:
        folder, name = os.path.join(FONT_DIR, os.path.dirname(family)), os.path.basename(family)
        for f in sorted(os.listdir(folder)):
            rest = f[len(name):-len(".ttf")] if f.startswith(name) and f.endswith(".ttf") else None
            # The family's own styles: DejaVuSans-Bold, FreeSansOblique, LiberationSans-Regular; not
            # DejaVuSansMono under DejaVuSans, nor ExtraLight (too thin to read when scaled down).
            if rest is not None and (rest == "" or rest[0] in "-BIO") and "ExtraLight" not in rest \
                    and not rest.startswith("Mono") and not rest.startswith("Condensed"):
                files.append(os.path.join(folder, f))
    return files


def held_out(items, share, rng):
    """Splits items into (training, validation): a share of them, drawn at random, only for validation."""
    items = list(items)
    rng.shuffle(items)
    cut = max(1, round(share * len(items)))
    return items[cut:], items[:cut]


SECONDS = 1.2
MULTI_LABEL_SECONDS = 1.6
SIZE = (160, 80)


def make_clip(job):
    wav, mp4, spoken, drawn, voice, speed, pitch, font, size, x0, x1, y, noise, grey, seconds = job
    subprocess.run(["espeak-ng", "-v", voice, "-s", str(speed), "-p", str(pitch), "-w", wav, spoken], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    w, h = SIZE
    text = (f"drawtext=fontfile={font}:text={drawn}:fontsize={size}:fontcolor=white:"
            f"x={x0}+({x1}-{x0})*t/{seconds}-text_w/2:y={y}-text_h/2")
    subprocess.run(["ffmpeg", "-v", "error", "-nostdin", "-y", "-f", "lavfi", "-i",
                    f"color=c=0x{grey:02x}{grey:02x}{grey:02x}:s={w}x{h}:r=25:d={seconds}",
                    "-vf", f"{text},noise=alls={noise}:allf=t", "-c:v", "libx264", "-preset", "veryfast", "-threads", "1",
                    "-pix_fmt", "yuv420p", mp4], check=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dir")
    parser.add_argument("--train-per-word", type=int, default=40)
    parser.add_argument("--val-per-word", type=int, default=10)
    parser.add_argument("--jobs", type=int, default=os.cpu_count())
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--multi-label", action="store_true",
                        help="two spoken words and one drawn, labelled with the set of words present")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    # Held out: a quarter of the voices (a voice is a base voice with a variant) and of the fonts; the
    # validation clips use only those, the training clips only the others.
    voices = held_out([f"{v}+{x}" for v in VOICES for x in VARIANTS], 0.25, rng)
    fonts = held_out(font_files(), 0.25, rng)
    pools = {"train": {"voices": voices[0], "fonts": fonts[0]}, "val": {"voices": voices[1], "fonts": fonts[1]}}
    jobs = []
    manifests = {}
    w, h = SIZE
    for split, count in (("train", args.train_per_word), ("val", args.val_per_word)):
        pool = pools[split]
        os.makedirs(os.path.join(args.dir, split), exist_ok=True)
        rows = []
        for k in range(count * len(WORDS)):
            if args.multi_label:
                name = f"m-{k:04d}"
                spoken = rng.sample(WORDS, 2)
                drawn = rng.choice(spoken) if rng.random() < 0.5 else rng.choice([x for x in WORDS if x not in spoken])
                present = [x for x in WORDS if x in spoken or x == drawn]  # in the vocabulary's order
                label, seconds, speeds = '"' + ",".join(present) + '"', MULTI_LABEL_SECONDS, (170, 230)
            else:
                word, i = WORDS[k // count], k % count
                name = f"{word}-{i:03d}"
                spoken, drawn, label, seconds, speeds = [word], word, word, SECONDS, (120, 210)
            voice = rng.choice(pool["voices"])
            font = rng.choice(pool["fonts"])
            x0, x1 = rng.uniform(0.3, 0.7) * w, rng.uniform(0.3, 0.7) * w
            jobs.append((os.path.join(args.dir, split, name + ".wav"), os.path.join(args.dir, split, name + ".mp4"),
                         " ".join(spoken), drawn, voice, rng.randint(*speeds), rng.randint(25, 75), font, rng.randint(26, 38),
                         round(x0), round(x1), round(rng.uniform(0.35, 0.65) * h), rng.randint(10, 40),
                         rng.randint(0, 90), seconds))
            rows.append(f"{split}/{name}.mp4,{label},{split}/{name}.wav\n")
        manifests[split] = ("path,labels,audio_path\n" if args.multi_label else "path,label,audio_path\n") + "".join(rows)
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        list(pool.map(make_clip, jobs))
    for split, text in manifests.items():  # last: a manifest says its clips are all there
        with open(os.path.join(args.dir, split + ".csv"), "w") as f:
            f.write(text)
    with open(os.path.join(args.dir, "held-out.txt"), "w") as f:
        f.write("validation voices: " + " ".join(voices[1]) + "\nvalidation fonts: " +
                " ".join(os.path.basename(x) for x in fonts[1]) + "\n")
    print(f"make_word_clips: {len(voices[0])} training and {len(voices[1])} held-out voices, {len(fonts[0])} and "
          f"{len(fonts[1])} fonts; {len(WORDS)} words, {args.train_per_word} training and {args.val_per_word} validation "
          f"clips per word ({len(jobs)} clips) in {args.dir}")


if __name__ == "__main__":
    main()
