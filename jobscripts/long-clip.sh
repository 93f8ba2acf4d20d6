#!/usr/bin/env bash
# Long clips with activation recomputation (inputs/long-clip.ini, docs/recompute.md): writes 192 synthetic
# samples of 30 s of 16 kHz audio and 16 frames of 64 x 64 (2011 tokens each), shows what the dry run
# predicts for each train.recompute setting against this machine's memory, then trains 30 steps at
# micro-batch 8 with recompute = attention. Ends with PASS when `none` does not fit, `attention` does,
# and the loss of the last 5 steps is below that of the first 5.
#   jobscripts/long-clip.sh [--no-build] [OUT]   (default runs/long-clip; the shards are kept and reused)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
if [ "${1:-}" = --no-build ]; then
  shift
else
  "$here/install-deps.sh"
  "$here/build.sh" cpu avtrain avtrain-shards >/dev/null
fi
bin="$root/build/cpu/bin"
out=${1:-$root/runs/long-clip}
mkdir -p "$out"
deck="$root/inputs/long-clip.ini"

if [ ! -f "$out/shards/shard-00001.h5" ]; then
  "$bin/avtrain-shards" synth --out "$out/shards" --shards 2 --samples 96 --seed 5 --sample-rate 16000 \
    --audio-samples 480000 --frames 16 --height 64 --width 64 --fps 1 >/dev/null
fi
"$here/mpirun-local.sh" 1 "$bin/avtrain" "$deck" --data "$out/shards" --dry-run > "$out/dry-run.txt"
sed -n '/^tokens per sample/p;/^activation recomputation/,/^$/p' "$out/dry-run.txt"
fits() { awk -v s="$1" '$1 == s && /MiB/ { print ($0 ~ /does not fit/ ? "no" : "yes") }' "$out/dry-run.txt"; }

echo "long-clip: training 30 steps with recompute = attention (log: $out/train.log)"
start=$(date +%s)
status=0
"$here/mpirun-local.sh" 1 "$bin/avtrain" "$deck" --data "$out/shards" --out "$out/run" --resume none --overwrite \
  > "$out/train.log" 2>&1 || status=$?
took=$(( $(date +%s) - start ))
grep -E "step +(1|5|10|15|20|25|30)/|done" "$out/train.log" || true
if [ "$status" -ne 0 ]; then
  tail -5 "$out/train.log"
  echo "long-clip: FAIL: training ended with exit $status (log: $out/train.log)"
  exit 1
fi
read -r first last < <(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "loss") c = i; next }
  { loss[NR - 1] = $c; n = NR - 1 }
  END { for (i = 1; i <= 5; i++) { a += loss[i]; b += loss[n - 5 + i] } printf "%.4f %.4f\n", a / 5, b / 5 }' \
  "$out/run/trace.csv")
act=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "act_mb") c = i; next } { v = $c } END { printf "%.1f", v }' \
  "$out/run/trace.csv")
verdict=$(awk -v a="$first" -v b="$last" -v n="$(fits none)" -v t="$(fits attention)" \
  'BEGIN { print (b < a && n == "no" && t == "yes" ? "PASS" : "FAIL") }')
echo "long-clip: mean loss of steps 1-5 $first, of steps 26-30 $last; act_mb $act; none fits: $(fits none)," \
     "attention fits: $(fits attention); training ${took} s; $verdict"
[ "$verdict" = PASS ]
