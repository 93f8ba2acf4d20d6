#!/usr/bin/env bash
# The media demo, multi-label (issue 42, item 6): clips in which espeak-ng speaks two of the 8 words
# and ffmpeg draws one (one of the two or a third), labelled with the set of words present
# (make_word_clips.py --multi-label), packed from a manifest with a labels column (format v2),
# trained multi-label with balanced sampling (inputs/media-demo.ini, model.task multi_label) and
# validated on held-out voices and fonts; next to it the PyTorch peer (validation/torch_avnet.py
# train) on the same shards, from the same initial weights (torch_avnet.py init, model.init_from for
# both) and seed, judged by avtrain-reconcile against the band of avtrain and its FP32 twin. Prints
# both runs' mAP and the verdict.
#   jobscripts/media-demo-multi-label.sh [OUT] [-- AVTRAIN_OPTIONS...]   (default runs/media-demo-ml)
# Needs build/cpu (avtrain, avtrain-shards) and /usr/bin/python3 with torch, h5py and sklearn. On demand,
# not in CI (the peer trains on 1 core as fast as it can).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
bin="$root/build/cpu/bin"
out=$root/runs/media-demo-ml
if [ $# -gt 0 ] && [ "$1" != -- ]; then out=$1; shift; fi
[ "${1:-}" = -- ] && shift
media="$out/media"
mkdir -p "$out"
if [ ! -f "$media/val.csv" ]; then
  /usr/bin/python3 "$here/make_word_clips.py" "$media" --multi-label --train-per-word 60 --val-per-word 20
fi
# 1.5 s of 16 kHz mono audio (two words), 12 frames of 64 x 32 grey at 8 fps.
shape=(--duration 1.5 --sample-rate 16000 --fps 8 --size 64x32 --pixels gray --shard-size 64)
for split in train val; do
  [ -d "$out/shards/$split" ] || "$bin/avtrain-shards" pack --manifest "$media/$split.csv" --out "$out/shards/$split" "${shape[@]}"
done
options=(--data "$out/shards/train" --data.val_dir "$out/shards/val" --model.task multi_label
         --data.sampling balanced --train.threads 1 "$@")
deck="$root/inputs/media-demo.ini"
/usr/bin/python3 "$root/validation/torch_avnet.py" init "$deck" "${options[@]}" --init-out "$out/init.safetensors"
options+=(--model.init_from "$out/init.safetensors")
"$bin/avtrain" "$deck" "${options[@]}" --checkpoint.interval -1 --out "$out/avtrain" > "$out/avtrain.log" 2>&1
# avtrain's FP32 twin (the same weights 65536 ulps up, as the quickstart's): with the run itself, the
# band of how far FP32 wanders from itself, which the peer, another FP32 implementation, must keep to.
"$bin/avtrain" "$deck" "${options[@]}" --train.init_ulps 65536 --checkpoint.interval -1 --out "$out/avtrain-twin" \
  > "$out/avtrain-twin.log" 2>&1
/usr/bin/python3 "$root/validation/torch_avnet.py" train "$deck" "${options[@]}" --out "$out/peer" > "$out/peer.log" 2>&1
status=0
/usr/bin/python3 "$root/validation/avtrain-reconcile" "$out/avtrain" "$out/avtrain-twin" "$out/peer" \
  --json "$out/reconcile.json" > "$out/reconcile.txt" || status=$?
last() { awk -F, -v col="$2" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == col) c = i } NR > 1 && $c != "" { v = $c } END { printf "%.4f", v }' "$1/trace.csv"; }
echo "media-demo-multi-label: val_mAP avtrain $(last "$out/avtrain" val_map), peer $(last "$out/peer" val_map);" \
     "val_loss $(last "$out/avtrain" val_loss) / $(last "$out/peer" val_loss); $(grep '^verdict' "$out/reconcile.txt") ($out)"
exit $status
