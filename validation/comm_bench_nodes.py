#!/usr/bin/python3
"""The 16-bit gradient communication claim, measured between namespace nodes over a rate-limited link.

usage: comm_bench_nodes.py AVTRAIN AVTRAIN_SHARDS WORK [--nodes 2] [--rates 1gbit,200mbit] [--steps 8] [DECK OPTIONS...]

N nodes (tests/nodes/netns_nodes.py; 2 by default), one rank each, dp N: the gradient all-reduce
crosses the links.
For each link rate (every node's egress through tc tbf; "none": the veth unlimited) and each
parallel.grad_comm_dtype (fp32, bf16, fp16), trains inputs/quickstart.ini widened so that its
gradient is tens of MB (default: width 512, depth 3, 8 heads: 9.7 M parameters, 37 MiB of fp32
gradient) for --steps steps, one micro-batch of 4 per replica, one thread, no evaluation, and prints
a Markdown table of the medians over the steps after the first of trace.csv's step_ms and comm_ms
(the all-reduce left exposed after backward) and ranks.csv's grad_bytes (rank 0's payload per step).
"""
import csv
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, os.path.join(ROOT, "tests", "nodes"))
from netns_nodes import Nodes, skip_unless_possible  # noqa: E402

WIDE = ["--model.width", "512", "--model.depth", "3", "--model.heads", "8"]


def column(path, name, rank=None):
    with open(path, newline="") as f:
        rows = [r for r in csv.DictReader(f) if rank is None or int(r["rank"]) == rank]
    return [float(r[name]) for r in rows]


def main():
    argv = sys.argv[1:]
    if len(argv) < 3:
        sys.exit(__doc__)
    avtrain, shards_tool, work = argv[:3]
    rest = argv[3:]
    rates, steps, count = ["1gbit", "200mbit"], 8, 2
    if "--nodes" in rest:
        i = rest.index("--nodes")
        count = int(rest[i + 1])
        del rest[i:i + 2]
    if "--rates" in rest:
        i = rest.index("--rates")
        rates = rest[i + 1].split(",")
        del rest[i:i + 2]
    if "--steps" in rest:
        i = rest.index("--steps")
        steps = int(rest[i + 1])
        del rest[i:i + 2]
    skip_unless_possible()
    os.makedirs(work, exist_ok=True)
    shards = os.path.join(work, "shards")
    if not os.path.isdir(shards):
        subprocess.run([shards_tool, "synth", "--out", shards, "--shards", "2", "--samples", "64", "--seed", "3"],
                       check=True, stdout=subprocess.DEVNULL)
    deck = os.path.join(ROOT, "inputs", "quickstart.ini")
    table = []
    for rate in rates:
        with Nodes(count, work, slots=1) as nodes:
            if rate != "none":
                nodes.rate(rate)
            for dtype in ("fp32", "bf16", "fp16"):
                out = os.path.join(work, f"{count}nodes-{rate}-{dtype}")
                command = ["mpirun", *nodes.mpirun_args(), "-n", str(count), avtrain, deck, "--data", shards, "--out", out,
                           "--overwrite", "--resume", "none", "--steps", str(steps), "--threads", "1",
                           "--train.micro_batch", "4", "--train.micro_batches", "1", "--train.eval_interval", "0",
                           "--train.log_interval", "0", "--checkpoint.interval", "0", "--dp", str(count),
                           "--parallel.grad_comm_dtype", dtype] + WIDE + rest
                start = time.monotonic()
                with open(out + ".log", "w") as log:
                    done = nodes.run(0, command, check=False, timeout=900, stdout=log)
                if done.returncode != 0:
                    sys.exit(f"comm_bench_nodes: {rate} {dtype}: exit {done.returncode}; log {out}.log")
                step = statistics.median(column(os.path.join(out, "trace.csv"), "step_ms")[1:])
                comm = statistics.median(column(os.path.join(out, "trace.csv"), "comm_ms")[1:])
                sent = statistics.median(column(os.path.join(out, "ranks.csv"), "grad_bytes", rank=0)[1:])
                table.append((rate, dtype, sent / 2**20, step, comm))
                print(f"comm_bench_nodes: {rate} {dtype}: step {step:.0f} ms, exposed comm {comm:.0f} ms, "
                      f"{sent / 2**20:.1f} MiB ({time.monotonic() - start:.0f} s)", flush=True)
    print(f"\n{count} nodes, dp {count}:")
    print("| link (tbf, each direction) | grad_comm_dtype | MiB all-reduced per step (rank 0) | step_ms (median) "
          "| comm_ms, exposed (median) |")
    print("|---|---|---|---|---|")
    for rate, dtype, mib, step, comm in table:
        print(f"| {rate} | {dtype} | {mib:.1f} | {step:.0f} | {comm:.0f} |")


if __name__ == "__main__":
    main()
