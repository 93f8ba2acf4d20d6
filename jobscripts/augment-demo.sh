#!/usr/bin/env bash
# Augmentation at work (docs/augmentation.md): the media demo's words and voices, trained from only 8
# clips per word (64 clips; the full demo has 60 per word) for 300 steps of 32, so the model overfits,
# once without augmentation and once with each setting given; validated on the demo's 160 held-out
# voices and fonts. Prints the validation accuracy and loss at the last step of each run.
#   jobscripts/augment-demo.sh [OUT] [SEEDS...]   (default runs/augment-demo, seed 1; media made as
#   media-demo.sh makes them, or reused from OUT/media)
# AUGMENT_RUNS: the runs, "NAME:OPTIONS" separated by ';' (default below); AUGMENT_STEPS (300).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
bin="$root/build/cpu/bin"
out=${1:-$root/runs/augment-demo}
shift || true
seeds=("${@:-1}")
media="$out/media"
mkdir -p "$out"
if [ ! -f "$media/val.csv" ]; then
  /usr/bin/python3 "$here/make_word_clips.py" "$media" --train-per-word 60 --val-per-word 20
fi
# The first 8 training clips of each word.
awk -F, 'NR == 1 { print; next } { if (++n[$2] <= 8) print }' "$media/train.csv" > "$media/train8.csv"
shape=(--duration 1.2 --sample-rate 16000 --fps 8 --size 64x32 --pixels gray --shard-size 64)
"$bin/avtrain-shards" pack --manifest "$media/train8.csv" --out "$out/shards/train8" "${shape[@]}" --overwrite | tail -1
"$bin/avtrain-shards" pack --manifest "$media/val.csv" --out "$out/shards/val" "${shape[@]}" --overwrite | tail -1

runs=${AUGMENT_RUNS:-"none:;mixup:--augment.mixup 0.2;masks:--augment.freq_masks 2 --augment.time_masks 2;crops:--data.clip_seconds 1.0 --augment.crop_scale 0.6"}
IFS=';' read -r -a list <<< "$runs"
for seed in "${seeds[@]}"; do
  for r in "${list[@]}"; do
    name=${r%%:*} opts=${r#*:}
    dir="$out/$name-seed$seed"
    # shellcheck disable=SC2086
    "$bin/avtrain" "$root/inputs/media-demo.ini" --data "$out/shards/train8" --data.val_dir "$out/shards/val" \
      --train.micro_batches 2 --steps "${AUGMENT_STEPS:-300}" --seed "$seed" --out "$dir" --resume none --overwrite $opts > "$dir.log" 2>&1
    awk -F, -v n="$name" -v s="$seed" 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
      $c["val_acc"] != "" { a = $c["val_acc"]; l = $c["val_loss"]; t = $c["loss"] }
      END { printf "augment-demo: %-6s seed %s: val_acc %.4f val_loss %.4f (train loss %.4f)\n", n, s, a, l, t }' "$dir/trace.csv"
  done
done
