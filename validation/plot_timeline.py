#!/usr/bin/python3
"""Draws one step of an avtrain --timeline file: one row per rank, a bar per span, coloured by kind
(forward, backward, receive/wait, all-reduce, optimizer) - the picture of the pipeline schedule
and its bubble.

usage: plot_timeline.py TIMELINE.json OUT.png [--step N]   (default: the last training step)
"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLOURS = {"forward": "#4C72B0", "backward": "#DD8452", "recv": "#DDDDDD", "send": "#555555",
           "allreduce": "#C44E52", "optimizer": "#55A868"}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("timeline")
    p.add_argument("out")
    p.add_argument("--step", type=int)
    a = p.parse_args()
    events = json.load(open(a.timeline))["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
    spans = [e for e in events if e.get("ph") == "X" and e.get("cat") in COLOURS]
    step = a.step if a.step is not None else max(e["args"]["step"] for e in spans)
    spans = [e for e in spans if e["args"].get("step") == step]
    if not spans:
        raise SystemExit(f"plot_timeline: no spans of step {step} in {a.timeline}")
    t0 = min(e["ts"] for e in spans)
    ranks = sorted({e["pid"] for e in spans})
    fig, ax = plt.subplots(figsize=(11, 0.7 * len(ranks) + 1.4))
    for row, rank in enumerate(ranks):
        for e in (x for x in spans if x["pid"] == rank):
            start, width = (e["ts"] - t0) / 1000, max(e["dur"] / 1000, 0.3)
            ax.barh(row, width, left=start, color=COLOURS[e["cat"]], edgecolor="white", linewidth=0.3)
            mb = e["args"].get("micro_batch")
            if mb is not None and e["cat"] in ("forward", "backward") and width > 25:
                ax.text(start + width / 2, row, str(mb), ha="center", va="center", fontsize=7, color="white")
    ax.set_yticks(range(len(ranks)))
    ax.set_yticklabels([names.get(r, f"rank {r}") for r in ranks])
    ax.invert_yaxis()
    ax.set_xlabel(f"ms since the start of step {step}")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in COLOURS.values()]
    ax.legend(handles, ["forward", "backward", "receive / wait (bubble)", "send", "all-reduce (exposed)", "optimizer"],
              ncol=6, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.35 if len(ranks) < 3 else -0.2))
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)
    print(f"plot_timeline: step {step} of {len(ranks)} rank(s) -> {a.out}")


if __name__ == "__main__":
    main()
