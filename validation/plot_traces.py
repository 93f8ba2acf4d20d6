#!/usr/bin/python3
"""Plots two avtrain trace directories side by side.

usage: plot_traces.py BASE_DIR CAND_DIR --out FILE.png [--title T]

One PNG, four panels: loss of both runs, grad_norm of both, CAND's loss scale with its skipped
steps marked, and the per-layer divergence that avtrain-reconcile computes (imported from it,
not recomputed here). Exit 0 on success, 2 on unreadable or non-comparable input.
"""
import argparse
import math
import os
import sys
from importlib.machinery import SourceFileLoader
from importlib.util import module_from_spec, spec_from_loader

import numpy as np
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load_reconcile():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "avtrain-reconcile")
    loader = SourceFileLoader("avtrain_reconcile", path)
    module = module_from_spec(spec_from_loader(loader.name, loader))
    loader.exec_module(module)
    return module


rec = load_reconcile()
PROG = "plot_traces.py"


def finite(x):
    x = np.asarray(x, dtype=float).copy()
    x[~np.isfinite(x)] = np.nan
    return x


def plot(base, cand, out, title):
    rec.check_comparable(base, cand)
    a = rec.analyze(base, cand)
    try:
        tol = rec.resolve_tolerances(cand)[0]
        rec.judge(a, tol)  # marks the layers that exceed
        layer_rtol = tol["layer_rtol"]
    except rec.InputError:  # a precision.mode without defaults: no tolerance line
        layer_rtol = None

    fig, ax = plt.subplots(2, 2, figsize=(13, 9))
    for run, label, style in ((base, "BASE", "-"), (cand, "CAND", "--")):
        t = run["trace"]
        for panel, column in ((ax[0, 0], "loss"), (ax[0, 1], "grad_norm")):
            panel.plot(t["step"], finite(t[column]), style, lw=1, label=f"{label} ({run['mode']})")
    for panel, column in ((ax[0, 0], "loss"), (ax[0, 1], "grad_norm")):
        panel.set_yscale("log")
        panel.set_title(column)
        panel.set_xlabel("step")
        panel.legend()

    t = cand["trace"]
    p = ax[1, 0]
    p.plot(t["step"], finite(t["loss_scale"]), "-", lw=1, label="CAND loss_scale")
    skipped = t["skipped"] != 0
    if skipped.any():
        p.plot(t["step"][skipped], finite(t["loss_scale"][skipped]), "rx",
               label=f"skipped ({int(skipped.sum())})")
    p.set_yscale("log")
    p.set_title("CAND loss scale")
    p.set_xlabel("step")
    p.legend()

    p = ax[1, 1]
    layers = a["layers"]  # top divergence first
    names = [L["name"] + ("" if math.isfinite(L["divergence"]) else " (inf)") for L in layers]
    values = [L["divergence"] if math.isfinite(L["divergence"]) else np.nan for L in layers]
    colors = ["tab:red" if L.get("exceeds") else "tab:blue" for L in layers]
    y = np.arange(len(layers))
    p.barh(y, values, color=colors)
    p.set_yticks(y)
    p.set_yticklabels(names, fontsize=7)
    p.invert_yaxis()
    if layer_rtol is not None:
        p.axvline(layer_rtol, color="k", ls=":", lw=1, label=f"layer_rtol {layer_rtol:g} ({cand['mode']})")
        p.legend(fontsize=8)
    p.set_title(f"layer divergence (median smoothed rel diff of grad_norm, window {a['window']})")
    p.set_xlabel("divergence")

    fig.suptitle(title or f"{base['dir']} (BASE) vs {cand['dir']} (CAND)")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def main(argv=None):
    p = argparse.ArgumentParser(prog=PROG, description="Plot two avtrain trace directories.")
    p.add_argument("base", metavar="BASE_DIR")
    p.add_argument("cand", metavar="CAND_DIR")
    p.add_argument("--out", required=True, metavar="FILE.png")
    p.add_argument("--title")
    args = p.parse_args(argv)
    try:
        plot(rec.load_run(args.base), rec.load_run(args.cand), args.out, args.title)
    except rec.InputError as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 2
    except rec.NotComparable as e:
        print(f"{PROG}: runs are not comparable: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"{PROG}: {args.out}: cannot write ({e.strerror})", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
