#!/usr/bin/env python3
"""What train.recompute and parallel.zero cost and save (docs/recompute.md, docs/parallel.md), on this
machine:

1. Activation memory per micro-batch (avtrain --dry-run) and step time (the median of trace.csv's
   step_ms over the timed steps) for none, attention and blocks, on the quickstart deck and on the
   long-clip deck's clips (2011 tokens) with 2 of its 14 blocks, so that `none` fits for the timing.
   The settings run in ROUNDS interleaved rounds; a ratio is taken within a round, then the median.
2. The longest clip (tokens per sample) that fits a memory per rank at micro-batch 8 with the
   long-clip deck's model, for each setting: the dry run's total (parameters, optimizer, activations,
   workspace) at three clip lengths, fitted by a quadratic in the token count (exact: the probabilities
   grow as L^2, all else as L), solved for each budget.
3. ZeRO stage 1 on the quickstart deck in fp32 and bf16 at dp = 1, 2, 4 (1 thread per rank; 4 ranks
   share this machine's 2 cores): the optimizer and master memory per rank (rank 0's log line) and
   the median step time, with parallel.zero 0 and 1.

  /usr/bin/python3 validation/memory_bench.py [OUT]   (AVTRAIN_BENCH_ROUNDS, default 2;
                                                       AVTRAIN_BENCH_PARTS, default "recompute,clips,zero")
Prints Markdown tables.
"""
import csv
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "build", "cpu", "bin")
MPIRUN = [os.path.join(ROOT, "jobscripts", "mpirun-local.sh"), "1"]
PARTS = os.environ.get("AVTRAIN_BENCH_PARTS", "recompute,clips,zero").split(",")
SETTINGS = ("none", "attention", "blocks")
ROUNDS = int(os.environ.get("AVTRAIN_BENCH_ROUNDS", "2"))
GIB = 1024.0 ** 3


def run(cmd):
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)}: exit {done.returncode}\n{done.stdout[-2000:]}")
    return done.stdout


def synth(out, **shape):
    if os.path.exists(os.path.join(out, "shard-00000.h5")):
        return
    args = []
    for key, value in shape.items():
        args += ["--" + key.replace("_", "-"), str(value)]
    run([os.path.join(BIN, "avtrain-shards"), "synth", "--out", out] + args)


def dry_run(deck, data, *options):
    """{setting: (activations MiB, total MiB)} and the tokens per sample."""
    text = run(MPIRUN + [os.path.join(BIN, "avtrain"), deck, "--data", data, "--dry-run"] + list(options))
    tokens = int(re.search(r"tokens per sample: .* = (\d+)", text).group(1))
    rows = {}
    for setting in SETTINGS:
        m = re.search(rf"^  {setting} +([0-9.]+) MiB +([0-9.]+) MiB +([0-9.]+) MiB", text, re.M)
        rows[setting] = (float(m.group(1)), float(m.group(3)))
    return rows, tokens


def step_ms(out):
    with open(os.path.join(out, "trace.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    return statistics.median(float(r["step_ms"]) for r in rows[2:])  # the first two warm up


def timed(deck, data, out, steps, *options):
    """Median step (ms) per setting and round."""
    times = {s: [] for s in SETTINGS}
    for r in range(ROUNDS):
        for setting in SETTINGS:
            run_dir = os.path.join(out, f"{setting}-{r}")
            run(MPIRUN + [os.path.join(BIN, "avtrain"), deck, "--data", data, "--out", run_dir, "--steps", str(steps),
                          "--train.eval_interval", "0", "--train.recompute", setting, "--resume", "none",
                          "--overwrite"] + list(options))
            times[setting].append(step_ms(run_dir))
    return times


def memory_and_time_table(name, deck, data, out, steps, *options):
    mem, tokens = dry_run(deck, data, *options)
    times = timed(deck, data, out, steps, *options)
    print(f"\n{name}: {tokens} tokens per sample; {ROUNDS} round(s) of {steps} steps, median of steps 3..{steps}")
    print("| setting | activations / micro-batch | step (ms) | step / none's |")
    print("|---|---:|---:|---:|")
    for s in SETTINGS:
        ratios = [t / n for t, n in zip(times[s], times["none"])]
        print(f"| {s} | {mem[s][0]:.1f} MiB | {statistics.median(times[s]):.1f} "
              f"({', '.join(f'{t:.0f}' for t in times[s])}) | {statistics.median(ratios):.3f} |")


def longest_clips(deck, out, budgets_gib):
    """Tokens per sample that fit each budget, per setting, at the deck's micro-batch."""
    points = {s: [] for s in SETTINGS}
    for seconds in (6, 12, 18):
        data = os.path.join(out, f"probe-{seconds}s")
        synth(data, shards=1, samples=2, seed=5, sample_rate=16000, audio_samples=16000 * seconds, frames=16,
              height=64, width=64, fps=1)
        mem, tokens = dry_run(deck, data, "--data.val_fraction", "0")
        for s in SETTINGS:
            points[s].append((tokens, mem[s][1] * 1024 * 1024))
    print("\nlongest clip that fits, tokens per sample (the long-clip deck's model, micro-batch 8, fp32, one rank "
          "holding the whole net):")
    print("| memory per rank | " + " | ".join(SETTINGS) + " |")
    print("|---|" + "---:|" * len(SETTINGS))
    for budget in budgets_gib:
        cells = []
        for s in SETTINGS:
            (x0, y0), (x1, y1), (x2, y2) = points[s]
            # Lagrange form of the quadratic through the three points, solved by bisection.
            def total(x):
                return (y0 * (x - x1) * (x - x2) / ((x0 - x1) * (x0 - x2)) +
                        y1 * (x - x0) * (x - x2) / ((x1 - x0) * (x1 - x2)) +
                        y2 * (x - x0) * (x - x1) / ((x2 - x0) * (x2 - x1)))
            lo, hi = 0.0, 1e7
            for _ in range(200):
                mid = (lo + hi) / 2
                lo, hi = (mid, hi) if total(mid) <= budget * GIB else (lo, mid)
            cells.append(f"{int(lo):,}")
        print(f"| {budget:g} GiB | " + " | ".join(cells) + " |")


def zero_table(deck, data, out, steps):
    """Optimizer + master memory of rank 0 and the median step, per precision, dp and zero."""
    print(f"\nZeRO stage 1 (inputs/quickstart.ini, {steps} steps, 1 thread per rank, median of steps 3..{steps}):")
    print("| precision | dp | optimizer + masters per rank, zero 0 | zero 1 | zero 1 / zero 0 | step (ms), zero 0 | zero 1 |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for precision in ("fp32", "bf16"):
        for dp in (1, 2, 4):
            mem, ms = {}, {}
            for zero in (0, 1):
                run_dir = os.path.join(out, f"{precision}-dp{dp}-zero{zero}")
                text = run([os.path.join(ROOT, "jobscripts", "mpirun-local.sh"), str(dp), os.path.join(BIN, "avtrain"),
                            deck, "--data", data, "--out", run_dir, "--steps", str(steps), "--threads", "1", "--dp",
                            str(dp), "--precision", precision, "--parallel.zero", str(zero), "--train.eval_interval",
                            "0", "--train.micro_batch", str(32 // dp), "--resume", "none", "--overwrite"])
                mem[zero] = float(re.search(r"optimizer and masters ([0-9.]+) MiB", text).group(1))
                ms[zero] = step_ms(run_dir)
            print(f"| {precision} | {dp} | {mem[0]:.2f} MiB | {mem[1]:.2f} MiB | {mem[1] / mem[0]:.3f} | "
                  f"{ms[0]:.1f} | {ms[1]:.1f} |")


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "runs", "memory-bench")
    os.makedirs(out, exist_ok=True)
    quick = os.path.join(out, "quickstart-shards")
    synth(quick, shards=1, samples=512, seed=1)
    if "recompute" in PARTS:
        memory_and_time_table("quickstart deck (inputs/quickstart.ini, micro-batch 32, 2 threads)",
                              os.path.join(ROOT, "inputs", "quickstart.ini"), quick, os.path.join(out, "quickstart"), 12)
        long_data = os.path.join(out, "long-shards")
        synth(long_data, shards=1, samples=32, seed=5, sample_rate=16000, audio_samples=480000, frames=16, height=64,
              width=64, fps=1)
        memory_and_time_table("long clips (inputs/long-clip.ini with model.depth 2, micro-batch 8, 2 threads)",
                              os.path.join(ROOT, "inputs", "long-clip.ini"), long_data, os.path.join(out, "long"), 7,
                              "--model.depth", "2")
    if "clips" in PARTS:
        longest_clips(os.path.join(ROOT, "inputs", "long-clip.ini"), out, (8, 24, 80))
    if "zero" in PARTS:
        zero_table(os.path.join(ROOT, "inputs", "quickstart.ini"), quick, os.path.join(out, "zero"), 10)


if __name__ == "__main__":
    main()
