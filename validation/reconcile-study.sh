#!/usr/bin/env bash
# Trains the runs avtrain-reconcile needs and judges every candidate precision against FP32, per
# seed: the FP32 run, its FP32 twin (the same run with every initial weight moved --twin-ulps ulps
# up, default 65536: the size of one bf16 rounding step), and each candidate; then the verdict with
# the band the two FP32 runs draw and with the single-baseline defaults, the JSON reports and a plot.
# Every seed is trained before any is judged: the FP32 pairs of the other seeds calibrate the
# segment check as --null pairs (docs/reconcile.md, "Offsets: the segment check").
#
#   validation/reconcile-study.sh DECK [--out DIR] [--data SHARDS] [--seeds 1,2,3]
#       [--candidates bf16,fp16,NAME=FRAGMENT.ini (also fp32; fp8: every linear's products in FP8;
#       bf16-sr, bf16-rn: bf16 without fp32 masters, stochastic or nearest rounding of the update)] [--steps N] [--ranks R] [--twin-ulps U] [--null-ulps U,...] [--reuse]
#       [-- AVTRAIN_OPTIONS...]
#
# Writes, under DIR (default runs/study) and for each seed S:
#   seed-S/fp32, seed-S/fp32-twin, seed-S/CAND      trace directories (and NAME.log, the run's output)
#   seed-S/fp32-ulps-U                               with --null-ulps: more FP32 runs (initial weights U
#                                                    ulps up) for the segment check's null, not the band
#   seed-S/CAND.band.{txt,json,png}                  avtrain-reconcile fp32 fp32-twin CAND, and its plot
#                                                    (none, with a note, where matplotlib is missing)
#   seed-S/CAND.single.{txt,json}                    avtrain-reconcile fp32 CAND
#   summary.txt                                      one line per seed and candidate
# A candidate NAME=FRAGMENT.ini is trained with the [precision] section of that deck fragment (each
# `key = value` line as --precision.key value; what avtrain-precision-plan writes) and named NAME.
# --ranks R > 1 trains data-parallel on R ranks (--dp R) through jobscripts/mpirun-local.sh.
# --reuse keeps a run that finished before (seed-S/NAME.done) instead of training it again.
# The null pairs of seed S: fp32 against every other FP32 run (fp32-twin, fp32-ulps-U) of every
# seed, but S's own fp32-twin (a BASE run, counted as such).
# The avtrain program is build/cpu/bin/avtrain unless AVTRAIN names another.
# Exit 0 when every candidate PASSes against the band of FP32 and its twin, 1 when one FAILs, 2 on bad
# usage or a run that failed. The single-baseline verdicts are reported beside, not judged: with one
# FP32 run a single tolerance cannot both pass every genuine run late in training (chaos) and fail
# a doctored one (docs/reconcile.md, "Genuine runs").
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
prog=reconcile-study.sh
python=/usr/bin/python3
avtrain=${AVTRAIN:-$root/build/cpu/bin/avtrain}

die() { echo "$prog: $*" >&2; exit 2; }
[ $# -ge 1 ] || die "usage: $prog DECK [--out DIR] [--data SHARDS] [--seeds 1,2,3] [--candidates bf16,fp16,NAME=FRAGMENT.ini] [--steps N] [--ranks R] [--twin-ulps U] [--null-ulps U,...] [--reuse] [-- AVTRAIN_OPTIONS...]"
deck=$1
shift
[ -f "$deck" ] || die "$deck: no such deck"
out=runs/study data="" seeds=1,2,3 candidates=bf16,fp16 steps="" ranks=1 twin_ulps=65536 null_ulps="" reuse=0
extra=()
while [ $# -gt 0 ]; do
  case $1 in
    --out|--data|--seeds|--candidates|--steps|--ranks|--twin-ulps|--null-ulps)
      [ $# -ge 2 ] || die "$1 needs a value"
      case $1 in
        --out) out=$2 ;; --data) data=$2 ;; --seeds) seeds=$2 ;; --candidates) candidates=$2 ;;
        --steps) steps=$2 ;; --ranks) ranks=$2 ;; --twin-ulps) twin_ulps=$2 ;; --null-ulps) null_ulps=$2 ;;
      esac
      shift 2 ;;
    --reuse) reuse=1; shift ;;
    --) shift; extra=("$@"); break ;;
    *) die "unknown option $1" ;;
  esac
done
whole() { [[ $2 =~ ^[0-9]+$ ]] && [ "$2" -ge "$3" ] || die "$1 must be a whole number >= $3, got '$2'"; }
whole --ranks "$ranks" 1
whole --twin-ulps "$twin_ulps" 1
[ -z "$steps" ] || whole --steps "$steps" 1
IFS=', ' read -r -a seed_list <<< "$seeds"
IFS=', ' read -r -a cand_list <<< "$candidates"
IFS=', ' read -r -a null_list <<< "$null_ulps"
for u in ${null_list[@]+"${null_list[@]}"}; do
  whole --null-ulps "$u" 1
  [ "$u" -ne "$twin_ulps" ] || die "--null-ulps $u: that is the twin (--twin-ulps)"
done
[ ${#seed_list[@]} -gt 0 ] || die "--seeds is empty"
for s in "${seed_list[@]}"; do whole --seeds "$s" 0; done
# fragment_options FILE: the [precision] section of a deck fragment as avtrain options, one a line.
fragment_options() {
  local line key value section=""
  while IFS= read -r line || [ -n "$line" ]; do
    line=${line%%[#;]*}
    [[ $line =~ ^[[:space:]]*$ ]] && continue
    if [[ $line =~ ^[[:space:]]*\[([^]]*)\][[:space:]]*$ ]]; then
      section=${BASH_REMATCH[1]}
      [ "$section" = precision ] || die "--candidates: $1: section [$section]: only [precision] may be set"
    elif [[ $line =~ ^[[:space:]]*([a-z0-9_]+)[[:space:]]*=[[:space:]]*(.*[^[:space:]])[[:space:]]*$ ]]; then
      [ "$section" = precision ] || die "--candidates: $1: '$line' is outside a [precision] section"
      printf '%s\n%s\n' "--precision.${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}"
    else
      die "--candidates: $1: '$line' is not 'key = value'"
    fi
  done < "$1"
}
declare -A cand_options
cand_names=()
for c in "${cand_list[@]}"; do
  case $c in
    bf16|fp16|fp32|fp8) cand_names+=("$c"); cand_options[$c]="--precision"$'\n'"$c" ;;
    bf16-sr|bf16-rn)  # bf16 without fp32 masters, the update written back stochastically or to nearest
      rounding=stochastic; [ "$c" = bf16-rn ] && rounding=nearest
      cand_names+=("$c")
      cand_options[$c]=$(printf '%s\n' --precision bf16 --precision.master_weights none --precision.weight_rounding "$rounding") ;;
    *=*)
      name=${c%%=*} file=${c#*=}
      [[ $name =~ ^[A-Za-z0-9_-]+$ ]] || die "--candidates: '$name' is not a name of letters, digits, _ and -"
      case $name in fp32|fp32-twin|fp32-ulps-*) die "--candidates: '$name' is the name of an FP32 run" ;; esac
      [ -f "$file" ] || die "--candidates: $file: no such deck fragment"
      opts=$(fragment_options "$file") || exit 2
      [ -n "$opts" ] || die "--candidates: $file: no [precision] setting"
      cand_names+=("$name"); cand_options[$name]=$opts ;;
    *) die "--candidates: '$c' is not bf16, fp16, fp32, fp8, bf16-sr, bf16-rn or NAME=FRAGMENT.ini" ;;
  esac
done
cand_list=("${cand_names[@]}")
[ -x "$avtrain" ] || die "$avtrain: not built (run jobscripts/build.sh cpu, or set AVTRAIN)"

common=("$deck")
[ -z "$data" ] || common+=(--data "$data")
[ -z "$steps" ] || common+=(--steps "$steps")
[ "$ranks" -eq 1 ] || common+=(--dp "$ranks")

# train DIR NAME [OPTIONS...]: one run, its output in DIR/NAME.log; a failure stops the study.
train() {
  local dir=$1 name=$2
  shift 2
  if [ "$reuse" -eq 1 ] && [ -f "$dir/$name.done" ]; then
    echo "  $name: kept from before ($dir/$name)"
    return
  fi
  rm -f "$dir/$name.done"
  rm -rf "${dir:?}/$name"
  local launch=("$avtrain")
  [ "$ranks" -eq 1 ] || launch=("$root/jobscripts/mpirun-local.sh" "$ranks" "$avtrain")
  local t0=$SECONDS
  # stdin from /dev/null: mpirun passes its stdin to rank 0, which would eat a calling script's input.
  if ! "${launch[@]}" "${common[@]}" "$@" --out "$dir/$name" ${extra[@]+"${extra[@]}"} < /dev/null > "$dir/$name.log" 2>&1; then
    tail -n 5 "$dir/$name.log" >&2
    die "the $name run failed (log: $dir/$name.log)"
  fi
  touch "$dir/$name.done"
  echo "  $name: trained in $((SECONDS - t0)) s ($(grep -m1 -o 'final loss .*' "$dir/$name.log" || true))"
}

# plot PNG TITLE DIR...: the band's plot; a plot is optional, so a failure (no matplotlib) is a note.
plot() {
  local png=$1 title=$2
  shift 2
  rm -f "$png"
  local why
  if ! why=$("$python" "$here/plot_traces.py" "$@" --out "$png" --title "$title" 2>&1); then
    rm -f "$png"
    echo "  note: no plot $png: ${why##*$'\n'}"
  fi
}

mkdir -p "$out"
summary=$out/summary.txt
verdicts=0
{
  printf '# %s, %s ranks, FP32 twin with train.init_ulps %s; worst difference / allowed (loss grad_norm layer),\n' \
    "$deck" "$ranks" "$twin_ulps"
  printf '# then the segment check'"'"'s largest effect size (seg), then the resolution over the late part (late): the\n'
  printf '# smallest sustained loss offset that FAILs, up (? where the comparison cannot judge that part)\n'
  printf '%-5s %-5s  %-52s  %s\n' seed cand "band (fp32 + fp32-twin)" "single (fp32)"
} > "$summary"
for seed in "${seed_list[@]}"; do
  dir=$out/seed-$seed
  mkdir -p "$dir"
  echo "$prog: seed $seed -> $dir"
  train "$dir" fp32 --seed "$seed" --precision fp32
  train "$dir" fp32-twin --seed "$seed" --precision fp32 --train.init_ulps "$twin_ulps"
  for u in ${null_list[@]+"${null_list[@]}"}; do
    train "$dir" "fp32-ulps-$u" --seed "$seed" --precision fp32 --train.init_ulps "$u"
  done
  for cand in "${cand_list[@]}"; do
    mapfile -t opts <<< "${cand_options[$cand]}"
    train "$dir" "$cand" --seed "$seed" "${opts[@]}"
  done
done

# null_args S: the segment check's --null pairs for seed S, one a line.
null_args() {
  local s x
  for s in "${seed_list[@]}"; do
    for x in fp32-twin ${null_list[@]+"${null_list[@]/#/fp32-ulps-}"}; do
      [ "$s" != "$1" ] || [ "$x" != fp32-twin ] || continue
      printf '%s\n' "--null=$out/seed-$s/fp32,$out/seed-$s/$x"
    done
  done
}

for seed in "${seed_list[@]}"; do
  dir=$out/seed-$seed
  mapfile -t nulls < <(null_args "$seed")
  echo "$prog: seed $seed: the verdicts, with ${#nulls[@]} FP32 pair(s) of the study beside the BASE runs for the segment check"
  for cand in "${cand_list[@]}"; do
    line=$(printf '%-5s %-5s ' "$seed" "$cand")
    for mode in band single; do
      bases=("$dir/fp32" "$dir/fp32-twin")
      [ "$mode" = band ] || bases=("$dir/fp32")
      rc=0
      "$python" "$here/avtrain-reconcile" "${bases[@]}" "$dir/$cand" ${nulls[@]+"${nulls[@]}"} \
        --json "$dir/$cand.$mode.json" > "$dir/$cand.$mode.txt" 2>&1 || rc=$?
      [ "$rc" -le 1 ] || { cat "$dir/$cand.$mode.txt" >&2; die "avtrain-reconcile could not compare $dir/$cand"; }
      [ "$rc" -eq 0 ] || [ "$mode" = single ] || verdicts=1
      line+=" $("$python" - "$dir/$cand.$mode.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
worst = lambda k: d["metrics"][k]["worst"]
layer = max((L["worst"] for L in d["layers"]), default=0.0)
seg = max((abs(r["effect"]) for r in d["segments"]["rows"] if r["effect"] is not None), default=0.0)
f = lambda v: "inf" if v is None else f"{v:.2f}"
first = d["first_step_beyond"]
late = [r for r in d["resolution"]["rows"] if r["segment"] == "late" and r["metric"] == "loss"]
up = late[0]["up"] if late else None
res = "-" if up is None else (f"+{100 * (up['fails_at'] - 1):.3g}%" if up["fails_at"] <= 2 else f"x{up['fails_at']:.3g}")
res += "?" if late and late[0]["judged"] is False else ""
print(f"{d['verdict']:4} {f(worst('loss'))} {f(worst('grad_norm'))} {f(layer)} seg {seg:.1f} late {res:<8}"
      + (f" from {first}" if first is not None else "").ljust(12), end="")
EOF
)"
      [ "$mode" = single ] || plot "$dir/$cand.band.png" "seed $seed: $cand against fp32 and its twin" \
        "${bases[@]}" "$dir/$cand" ${nulls[@]+"${nulls[@]}"}
      echo "  $cand, $mode: $(tail -n 1 "$dir/$cand.$mode.txt")"
      echo "    $(tail -n 2 "$dir/$cand.$mode.txt" | head -n 1)"
    done
    echo "$line" >> "$summary"
  done
done
echo "$prog: summary ($summary):"
cat "$summary"
exit "$verdicts"
