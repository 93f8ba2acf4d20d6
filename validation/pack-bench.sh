#!/usr/bin/env bash
# How fast `avtrain-shards pack` turns media into shards, against the floor of FFmpeg decoding the
# same files (`ffmpeg -i FILE -f null -`) on the same cores. Two shapes:
#   quickstart: 1 s MP4 (H.264 320x240 25 fps + AAC 44.1 kHz stereo) -> 1 s of 8 kHz, 8 frames 32x32 grey
#   vggsound:   10 s MP4 (H.264 640x360 25 fps + AAC 44.1 kHz stereo) -> 10 s of 16 kHz, 80 frames 112x112 RGB
# The floor is the faster of: CORES ffmpeg processes at once with one decoding thread each, and one
# ffmpeg at a time with its own threads. Each timing is the best of REPEATS runs.
#   validation/pack-bench.sh [OUT]     (AVTRAIN_BENCH_SHAPES, AVTRAIN_BENCH_CLIPS_{QUICKSTART,VGGSOUND},
#                                       AVTRAIN_BENCH_REPEATS)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
bin="$root/build/cpu/bin"
out=${1:-$root/runs/pack-bench}
cores=$(nproc)
repeats=${AVTRAIN_BENCH_REPEATS:-2}
mkdir -p "$out"

make_files() {  # NAME COUNT SECONDS SIZE
  local dir="$out/$1" count=$2 seconds=$3 size=$4
  [ -f "$dir/manifest.csv" ] && [ "$(($(wc -l < "$dir/manifest.csv") - 1))" = "$count" ] && return
  mkdir -p "$dir"
  seq 0 $((count - 1)) | xargs -P "$cores" -I{} ffmpeg -v error -nostdin -y \
    -f lavfi -i "testsrc2=size=$size:rate=25:duration=$seconds,noise=alls=6:allf=t" \
    -f lavfi -i "sine=frequency=440:sample_rate=44100:duration=$seconds,pan=stereo|c0=c0|c1=c0" \
    -c:v libx264 -preset veryfast -pix_fmt yuv420p -c:a aac -b:a 128k -shortest "$dir/clip-{}.mp4"
  { echo "path,label"; for i in $(seq 0 $((count - 1))); do echo "clip-$i.mp4,c$((i % 4))"; done; } > "$dir/manifest.csv"
}

best_of() {  # runs "$@" REPEATS times, prints the best wall time in seconds
  local best=""
  for _ in $(seq "$repeats"); do
    local t0 t1
    t0=$(date +%s.%N)
    "$@" > /dev/null 2>&1
    t1=$(date +%s.%N)
    best=$(awk -v a="$t0" -v b="$t1" -v c="$best" 'BEGIN { t = b - a; print (c == "" || t < c) ? t : c }')
  done
  echo "$best"
}

floor_parallel() { ls "$1"/*.mp4 | xargs -P "$cores" -I{} ffmpeg -v error -nostdin -threads 1 -i {} -f null -; }
floor_threaded() { for f in "$1"/*.mp4; do ffmpeg -v error -nostdin -i "$f" -f null -; done; }
pack() {  # DIR RANKS THREADS OUT OPTIONS...
  local dir=$1 ranks=$2 threads=$3 set=$4
  shift 4
  rm -rf "$set"
  "$root/jobscripts/mpirun-local.sh" "$ranks" "$bin/avtrain-shards" pack --manifest "$dir/manifest.csv" --out "$set" \
    --threads "$threads" --progress-s 0 "$@"
}

declare -A options=(
  [quickstart]="--duration 1 --sample-rate 8000 --fps 8 --size 32x32 --pixels gray --shard-size 100"
  [vggsound]="--duration 10 --sample-rate 16000 --fps 8 --size 112x112 --pixels rgb --shard-size 48"
)
make_files quickstart "${AVTRAIN_BENCH_CLIPS_QUICKSTART:-400}" 1 320x240
make_files vggsound "${AVTRAIN_BENCH_CLIPS_VGGSOUND:-96}" 10 640x360

printf "| shape | clips | ffmpeg -f null floor, clips/s (per core) | pack %d ranks x 1 thread | pack 1 rank x %d threads | pack, no compression | best / floor |\n" "$cores" "$cores"
printf "|---|---|---|---|---|---|---|\n"
for shape in ${AVTRAIN_BENCH_SHAPES:-quickstart vggsound}; do
  dir="$out/$shape"
  n=$(($(wc -l < "$dir/manifest.csv") - 1))
  read -r -a o <<< "${options[$shape]}"
  parallel=$(best_of floor_parallel "$dir")
  threaded=$(best_of floor_threaded "$dir")
  floor=$(awk -v a="$parallel" -v b="$threaded" 'BEGIN { print (a < b) ? a : b }')
  ranks=$(best_of pack "$dir" "$cores" 1 "$out/$shape.set" "${o[@]}")
  threads=$(best_of pack "$dir" 1 "$cores" "$out/$shape.set" "${o[@]}")
  raw=$(best_of pack "$dir" "$cores" 1 "$out/$shape.set" "${o[@]}" --compression none)
  awk -v s="$shape" -v n="$n" -v c="$cores" -v f="$floor" -v r="$ranks" -v t="$threads" -v u="$raw" 'BEGIN {
    printf "| %s | %d | %.1f (%.1f) | %.1f (%.1f) | %.1f (%.1f) | %.1f (%.1f) | %.2f |\n", s, n, n / f, n / f / c,
           n / r, n / r / c, n / t, n / t / c, n / u, n / u / c, f / (r < t ? r : t) }'
done
echo "pack-bench: $cores cores; clips/s (per core); best of $repeats runs; media and sets in $out"
