#!/usr/bin/env bash
# Real media into shards, and a model trained on them: words spoken by espeak-ng (WAV) and drawn by
# ffmpeg's drawtext in system fonts, moving over noise (H.264 MP4) -- 8 words, training clips in 120
# voices and 33 fonts, validation clips in 40 other voices and 11 other fonts -- packed by
# `avtrain-shards pack` on 2 ranks, trained on 2 ranks (inputs/media-demo.ini), validated on the
# held-out voices and fonts. Ends with PASS when the validation accuracy is at least 0.9.
#   jobscripts/media-demo.sh [--no-build] [OUT]   (default runs/media-demo; the media are kept and reused)
# --no-build: use build/cpu as it is (the CTest test of this script).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
if [ "${1:-}" = --no-build ]; then
  shift
else
  "$here/install-deps.sh" --demo
  "$here/build.sh" cpu avtrain avtrain-shards >/dev/null
fi
bin="$root/build/cpu/bin"
out=${1:-$root/runs/media-demo}
media="$out/media"
mkdir -p "$out"
seconds() { date +%s.%N; }
took() { awk -v a="$1" -v b="$(seconds)" 'BEGIN { printf "%.1f", b - a }'; }

t=$(seconds)
if [ ! -f "$media/val.csv" ]; then
  /usr/bin/python3 "$here/make_word_clips.py" "$media" --train-per-word 60 --val-per-word 20
fi
media_s=$(took "$t")

# 1.2 s of 16 kHz mono audio, 10 frames of 64 x 32 grey at 8 fps.
shape=(--duration 1.2 --sample-rate 16000 --fps 8 --size 64x32 --pixels gray --shard-size 64)
t=$(seconds)
for split in train val; do
  "$here/mpirun-local.sh" 2 "$bin/avtrain-shards" pack --manifest "$media/$split.csv" --out "$out/shards/$split" \
    "${shape[@]}" --overwrite
done
pack_s=$(took "$t")
"$bin/avtrain-shards" inspect "$out/shards/val" | tail -1

echo "media-demo: training on 2 ranks (log: $out/train.log)"
t=$(seconds)
status=0
"$here/mpirun-local.sh" 2 "$bin/avtrain" "$root/inputs/media-demo.ini" --data "$out/shards/train" \
  --data.val_dir "$out/shards/val" --dp 2 --out "$out/run" --resume none --overwrite > "$out/train.log" 2>&1 ||
  status=$?
train_s=$(took "$t")
grep -E "val_acc|done" "$out/train.log" || true
if [ "$status" -ne 0 ]; then
  tail -5 "$out/train.log"
  echo "media-demo: FAIL: training ended with exit $status (log: $out/train.log)"
  exit 1
fi

acc=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "val_acc") c = i } NR > 1 && $c != "" { v = $c } END { print v }' \
      "$out/run/trace.csv")
acc=$(awk -v a="$acc" 'BEGIN { printf "%.4f", a }')
verdict=$(awk -v a="$acc" 'BEGIN { print (a >= 0.9 ? "PASS" : "FAIL") }')
echo "media-demo: validation accuracy $acc on held-out voices and fonts ($verdict, goal 0.9);" \
     "media ${media_s} s, pack ${pack_s} s (2 ranks), training ${train_s} s (2 ranks); $out"
[ "$verdict" = PASS ]
