#!/usr/bin/env bash
# How fast the training reader feeds a rank (a benchmark, not a test): `avtrain-shards read-bench`
# over synthetic shard sets at three shapes, each stored without compression, with gzip (shuffle +
# deflate) at levels 1, 4 (the default) and 9 and with zstd (shuffle + zstd, filter 32015) at levels
# 1 and 3, each read with 1, 2 and 4 reader threads (data.reader_threads); then what one node of 8
# GPUs needs, from the step rates measured on an H200 on 2026-12-04 (docs/cuda.md, "The H200 run"),
# and how many reader cores that is at each rate. The shards stay in the page cache (they are read
# once before timing): what is measured is HDF5's reads, the decompression and the batch assembly,
# not the disk.
#   quickstart  1 s of 8 kHz int16 audio, 8 frames 32x32 grey   (inputs/quickstart.ini; micro-batch 32)
#   vggsound    10 s of 16 kHz, 80 frames 112x112 RGB           (validation/pack-bench.sh's; micro-batch 8)
#   vggsound-float  the same with float32 audio (float audio is what a start's value check samples)
#   large       4 s of 16 kHz, 16 frames 160x160 RGB            (inputs/gpu-large.ini; micro-batch 8)
#   validation/data-bench.sh [WORK]    (default runs/data-bench; AVTRAIN_BENCH_SECONDS per reading, 8;
#                                       AVTRAIN_BENCH_SHAPES, AVTRAIN_BENCH_COMPRESSIONS,
#                                       AVTRAIN_BENCH_THREADS (1 2 4) to pick)
#   validation/data-bench.sh --fed [WORK]   a 2-rank CPU training run at the vggsound shape with a
#       deliberately fast step (a tiny model: inputs/ci.ini's at width 16, depth 1, 156 audio frames of
#       1024 samples, tubelets of 16 frames x 28 x 28: 80 video tokens), 1 compute thread a rank, gzip 4 and zstd 3,
#       data.reader_threads 1 and 2: data_wait_ms as a share of step_ms in the steady state (steps
#       after the 5th, trace.csv), and the reader cores the step rate needs (samples per CPU-second
#       from read-bench).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
fed=0
if [ "${1:-}" = --fed ]; then fed=1; shift; fi
work=${1:-$root/runs/data-bench}
bin=${AVTRAIN_BIN:-$root/build/cpu/bin}
seconds=${AVTRAIN_BENCH_SECONDS:-8}
shapes=${AVTRAIN_BENCH_SHAPES:-quickstart vggsound vggsound-float large}
compressions=${AVTRAIN_BENCH_COMPRESSIONS:-none gzip1 gzip4 gzip9 zstd1 zstd3}
threads_list=${AVTRAIN_BENCH_THREADS:-1 2 4}
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

make_set() {  # SHAPE COMPRESSION -> the set's directory, made once
  local shape=$1 c=$2 data=$work/$1-$2
  read -r -a opts <<< "$(shape_options "$shape")"
  unset 'opts[-1]'
  case $c in
    none) comp=(--no-gzip) ;;
    gzip*) comp=(--gzip-level "${c#gzip}") ;;
    zstd*) comp=(--zstd-level "${c#zstd}") ;;
  esac
  if [ ! -f "$data/.done" ]; then
    rm -rf "$data"
    "$bin/avtrain-shards" synth --out "$data" --seed 1 "${opts[@]}" "${comp[@]}" > /dev/null
    touch "$data/.done"
  fi
  cat "$data"/*.h5 > /dev/null  # into the page cache
  echo "$data"
}

if [ $fed = 1 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  steps=${AVTRAIN_FED_STEPS:-30}
  fed_results=$work/fed.jsonl
  : > "$fed_results"
  for c in ${AVTRAIN_FED_COMPRESSIONS:-gzip4 zstd3}; do
    data=$(make_set vggsound "$c")
    rate=$("$bin/avtrain-shards" read-bench --data "$data" --micro-batch 8 --seconds "$seconds" --json)
    for t in ${AVTRAIN_FED_THREADS:-1 2}; do
      out=$work/fed-$c-t$t
      rm -rf "$out"
      mpirun -np 2 --oversubscribe --bind-to none "$bin/avtrain" "$root/inputs/ci.ini" --data "$data" --out "$out" \
        --steps "$steps" --train.micro_batch 4 --train.micro_batches 1 --model.width 16 --model.depth 1 --model.heads 2 \
        --model.mel_bins 16 --model.audio_window 1024 --model.audio_hop 1024 --model.tubelet_frames 16 --model.patch 28 --threads 1 --train.eval_interval 0 --data.val_fraction 0.1 --data.reader_threads "$t" > "$out.log" 2>&1
      /usr/bin/python3 - "$out/trace.csv" "$c" "$t" "$rate" >> "$fed_results" <<'PY'
import csv, json, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["step"].isdigit()]
steady = [r for r in rows if int(r["step"]) >= 5]
step = sum(float(r["step_ms"]) for r in steady)
wait = sum(float(r["data_wait_ms"]) for r in steady)
bench = json.loads(sys.argv[4])
print(json.dumps({"compression": sys.argv[2], "reader_threads": int(sys.argv[3]), "steps": len(steady),
                  "step_ms": step / len(steady), "data_wait_ms": wait / len(steady), "wait_share": wait / step,
                  "samples_per_cpu_s": bench["samples_per_cpu_s"]}))
PY
    done
  done
  /usr/bin/python3 - "$fed_results" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("2 ranks, micro-batch 4 per rank (8 samples a step), vggsound shape; steady state: steps 5 and later")
print("| compression | data.reader_threads | step_ms | data_wait_ms | wait share of the step | samples/s the step asks per rank | reader cores per rank that takes |")
print("|---|---|---|---|---|---|---|")
for r in rows:
    need = 4 / (r["step_ms"] - r["data_wait_ms"]) * 1000  # samples/s one rank consumes at the step's compute rate
    print(f"| {r['compression']} | {r['reader_threads']} | {r['step_ms']:.1f} | {r['data_wait_ms']:.1f} | "
          f"{100 * r['wait_share']:.1f} % | {need:.0f} | {need / r['samples_per_cpu_s']:.2f} |")
PY
  exit 0
fi

results=$work/results.jsonl
: > "$results"
for shape in $shapes; do
  read -r -a opts <<< "$(shape_options "$shape")"
  mb=${opts[-1]}
  for c in $compressions; do
    data=$(make_set "$shape" "$c")
    for t in $threads_list; do
      "$bin/avtrain-shards" read-bench --data "$data" --micro-batch "$mb" --seconds "$seconds" --reader-threads "$t" --json |
        /usr/bin/python3 -c "import json,sys; r=json.load(sys.stdin); r.update(shape='$shape', compression='$c'); print(json.dumps(r))" >> "$results"
    done
  done
done

/usr/bin/python3 - "$results" "$(nproc)" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
# One H200's step rates (2026-12-04, docs/cuda.md): the quickstart 32 samples in 10.1 ms (FP32);
# the large deck 8 samples in 375 ms (BF16 today) and 175 ms (issue 27's goal). No GPU has run the
# VGGSound-like shape: its model is taken as the large deck's (a larger input would only slow it).
per_gpu = {"quickstart": [("10.1 ms step", 32 / 0.0101)],
           "vggsound": [("375 ms step", 8 / 0.375), ("175 ms step", 8 / 0.175)],
           "vggsound-float": [("175 ms step", 8 / 0.175)],
           "large": [("375 ms step", 8 / 0.375), ("175 ms step", 8 / 0.175)]}
print(f"{sys.argv[2]} cores on this machine; shards in the page cache; columns by reader threads")
threads = sorted({r["reader_threads"] for r in rows})
by = {}
for r in rows:
    by.setdefault((r["shape"], r["compression"]), {})[r["reader_threads"]] = r
cols = " / ".join(str(t) for t in threads)
print(f"| shape | compression | MB a sample (decoded / stored) | samples/s ({cols}) | CPU-s per s ({cols}) | "
      f"samples per CPU-second ({cols}) | MB/s of the files per core | HDF5 lock held, share of CPU (1 thread) | "
      f"4 free cores give at most | the start read |")
print("|---|---|---|---|---|---|---|---|---|---|")
for (shape, c), t in by.items():
    r = t[threads[0]]
    join = lambda key, f: " / ".join(f.format(t[n][key]) if n in t else "-" for n in threads)
    cpu = " / ".join(f"{t[n]['cpu_seconds'] / t[n]['seconds']:.2f}" if n in t else "-" for n in threads)
    print(f"| {shape} | {c} | {r['decoded_mb_per_sample']:.3f} / {r['stored_mb_per_sample']:.3f} | "
          f"{join('samples_per_s', '{:.0f}')} | {cpu} | {join('samples_per_cpu_s', '{:.0f}')} | "
          f"{r['samples_per_cpu_s'] * r['stored_mb_per_sample']:.0f} | "
          f"{100 * r.get('lock_share', 0):.1f} % | {r.get('speedup_limit_4_cores', 0):.2f}x |"
          f" {r['open_read_mb']:.2f} of {r['set_mb']:.0f} MB ({100 * r['open_read_mb'] / r['set_mb']:.2f} %) |")
print()
print("| shape | one node of 8 GPUs needs | reader cores it takes (at samples per CPU-second, 1 thread), by compression |")
print("|---|---|---|")
for shape, needs in per_gpu.items():
    mine = [t[threads[0]] for (s, c), t in by.items() if s == shape]
    if not mine:
        continue
    for what, rate in needs:
        node = 8 * rate
        cores = ", ".join(f"{r['compression']} {node / r['samples_per_cpu_s']:.2f}" for r in mine if r["samples_per_cpu_s"] > 0)
        print(f"| {shape} | {node:.0f} samples/s (8 x {rate:.1f}, {what}) | {cores} |")
PY
