#!/usr/bin/env bash
# How fast the training reader feeds a rank (a benchmark, not a test): `avtrain-shards read-bench`
# over synthetic shard sets at three shapes, each stored without compression and with gzip (shuffle +
# deflate) at levels 1, 4 (the default) and 9; then what one node of 8 GPUs needs, from the step
# rates measured on an H200 (../shared/gpu-runs/2026-12-04, docs/cuda.md), and how many reader cores
# that is at each rate. The shards stay in the page cache (they are read once before timing): what
# is measured is HDF5's reads, the inflate and the batch assembly, not the disk.
#   quickstart  1 s of 8 kHz int16 audio, 8 frames 32x32 grey   (inputs/quickstart.ini; micro-batch 32)
#   vggsound    10 s of 16 kHz, 80 frames 112x112 RGB           (validation/pack-bench.sh's; micro-batch 8)
#   vggsound-float  the same with float32 audio (float audio is what a start's value check samples)
#   large       4 s of 16 kHz, 16 frames 160x160 RGB            (inputs/gpu-large.ini; micro-batch 8)
#   validation/data-bench.sh [WORK]    (default runs/data-bench; AVTRAIN_BENCH_SECONDS per reading, 8;
#                                       AVTRAIN_BENCH_SHAPES, AVTRAIN_BENCH_COMPRESSIONS to pick)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
work=${1:-$root/runs/data-bench}
bin=${AVTRAIN_BIN:-$root/build/cpu/bin}
seconds=${AVTRAIN_BENCH_SECONDS:-8}
shapes=${AVTRAIN_BENCH_SHAPES:-quickstart vggsound vggsound-float large}
compressions=${AVTRAIN_BENCH_COMPRESSIONS:-none gzip1 gzip4 gzip9}
mkdir -p "$work"

shape_options() {  # NAME -> synth options and the micro-batch
  case $1 in
    quickstart) echo "--shards 4 --samples 1024 32" ;;
    vggsound) echo "--shards 2 --samples 48 --sample-rate 16000 --audio-samples 160000 --frames 80 --height 112 --width 112 --channels 3 --fps 8 8" ;;
    vggsound-float) echo "--shards 2 --samples 48 --sample-rate 16000 --audio-samples 160000 --frames 80 --height 112 --width 112 --channels 3 --fps 8 --float-audio 8" ;;
    large) echo "--shards 2 --samples 128 --sample-rate 16000 --audio-samples 64000 --frames 16 --height 160 --width 160 --channels 3 --fps 4 8" ;;
    *) echo "data-bench: unknown shape $1" >&2; exit 1 ;;
  esac
}

results=$work/results.jsonl
: > "$results"
for shape in $shapes; do
  read -r -a opts <<< "$(shape_options "$shape")"
  mb=${opts[-1]}
  unset 'opts[-1]'
  for c in $compressions; do
    data=$work/$shape-$c
    case $c in
      none) comp=(--no-gzip) ;;
      gzip*) comp=(--gzip-level "${c#gzip}") ;;
    esac
    if [ ! -f "$data/.done" ]; then
      rm -rf "$data"
      "$bin/avtrain-shards" synth --out "$data" --seed 1 "${opts[@]}" "${comp[@]}" > /dev/null
      touch "$data/.done"
    fi
    cat "$data"/*.h5 > /dev/null  # into the page cache
    "$bin/avtrain-shards" read-bench --data "$data" --micro-batch "$mb" --seconds "$seconds" --json |
      /usr/bin/python3 -c "import json,sys; r=json.load(sys.stdin); r.update(shape='$shape', compression='$c'); print(json.dumps(r))" >> "$results"
  done
done

/usr/bin/python3 - "$results" "$(nproc)" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
# One H200's step rates (../shared/gpu-runs/2026-12-04): the quickstart 32 samples in 10.1 ms (FP32);
# the large deck 8 samples in 375 ms (BF16 today) and 175 ms (issue 27's goal). No GPU has run the
# VGGSound-like shape: its model is taken as the large deck's (a larger input would only slow it).
per_gpu = {"quickstart": [("10.1 ms step", 32 / 0.0101)],
           "vggsound": [("375 ms step", 8 / 0.375), ("175 ms step", 8 / 0.175)],
           "vggsound-float": [("175 ms step", 8 / 0.175)],
           "large": [("375 ms step", 8 / 0.375), ("175 ms step", 8 / 0.175)]}
print(f"reader: 1 thread per rank; {sys.argv[2]} cores on this machine; shards in the page cache")
print("| shape | compression | MB a sample (decoded / stored) | samples/s | MB/s decoded | MB/s of the files | samples per CPU-second | the start read |")
print("|---|---|---|---|---|---|---|---|")
for r in rows:
    print(f"| {r['shape']} | {r['compression']} | {r['decoded_mb_per_sample']:.3f} / {r['stored_mb_per_sample']:.3f} | "
          f"{r['samples_per_s']:.0f} | {r['decoded_mb_per_s']:.0f} | {r['file_mb_per_s']:.0f} | "
          f"{r['samples_per_cpu_s']:.0f} | {r['open_read_mb']:.2f} of {r['set_mb']:.0f} MB ({100 * r['open_read_mb'] / r['set_mb']:.2f} %) |")
print()
print("| shape | one node of 8 GPUs needs | reader cores it takes (at samples per CPU-second), by compression |")
print("|---|---|---|")
for shape, needs in per_gpu.items():
    mine = [r for r in rows if r["shape"] == shape]
    if not mine:
        continue
    for what, rate in needs:
        node = 8 * rate
        cores = ", ".join(f"{r['compression']} {node / r['samples_per_cpu_s']:.2f}" for r in mine if r["samples_per_cpu_s"] > 0)
        print(f"| {shape} | {node:.0f} samples/s (8 x {rate:.1f}, {what}) | {cores} |")
PY
