#!/usr/bin/python3
"""Plots what avtrain-reconcile judges: the BASE runs, their band and the CAND run.

usage: plot_traces.py BASE_DIR [BASE_DIR ...] CAND_DIR --out FILE.png [--title T]
                      [--steps N] [--window W] [--first-steps K] [--band-factor F] [--tol M=A,R ...]

One PNG, four panels, every number computed by avtrain-reconcile itself (imported, not
recomputed here), with the same options and defaults:
  - loss and grad norm: each run's raw trace (thin), the smoothed CAND (thick) and the shaded
    region it must stay in (center +- allowed); windows beyond it are marked, and the first one;
  - difference / allowed over the steps for the loss, the grad norm and the worst layer, with
    the line at 1 that the verdict reads, the first steps' raw check and CAND's skipped steps;
  - each layer's worst difference / allowed, beyond 1 in red.
Exit 0 on success, 2 on unreadable or non-comparable input or an unwritable FILE, 3 (one line) when
matplotlib cannot be imported.
"""
import argparse
import math
import os
import sys
from importlib.machinery import SourceFileLoader
from importlib.util import module_from_spec, spec_from_loader

import numpy as np

PROG = "plot_traces.py"
NO_MATPLOTLIB = 3  # the exit code when matplotlib cannot be imported: a plot is optional to callers
try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: E402
except ImportError as e:
    print(f"{PROG}: cannot plot without matplotlib ({e}); install python3-matplotlib", file=sys.stderr)
    sys.exit(NO_MATPLOTLIB)


def load_reconcile():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "avtrain-reconcile")
    loader = SourceFileLoader("avtrain_reconcile", path)
    module = module_from_spec(spec_from_loader(loader.name, loader))
    loader.exec_module(module)
    return module


rec = load_reconcile()


def finite(x):
    x = np.asarray(x, dtype=float).copy()
    x[~np.isfinite(x)] = np.nan
    return x


def region(c, log):
    """Lower and upper edge of what CAND may be, in the metric's own units."""
    lo, hi = c["center"] - c["allowed"], c["center"] + c["allowed"]
    if log:
        return np.exp(lo), np.exp(hi)
    return lo, hi


def metric_panel(p, name, bases, cand, a, j):
    c = a["metrics"][name]
    log = name in rec.LOG_METRICS
    steps = a["step"]
    for i, run in enumerate(bases):
        t = run["trace"]
        p.plot(t["step"], finite(t[name]), "-", lw=0.6, alpha=0.6, color=f"C{i}",
               label=f"BASE {os.path.basename(os.path.normpath(run['dir']))} ({run['mode']})")
    t = cand["trace"]
    p.plot(t["step"], finite(t[name]), "-", lw=0.6, alpha=0.6, color="C3", label=f"CAND ({cand['mode']})")
    lo, hi = region(c, log)
    if name == "loss":
        lo = np.maximum(lo, 0.0)
    kind = f"band x{a['band_factor']:g} + floors" if len(bases) > 1 else "tolerance"
    p.fill_between(steps, finite(lo), finite(hi), color="0.6", alpha=0.35, lw=0, label=f"allowed ({kind})")
    value = np.exp(c["cand"]) if log else c["cand"]
    p.plot(steps, finite(value), "-", lw=2, color="C3", label=f"CAND smoothed ({a['window']} steps)")
    beyond = c["ratio"] > 1
    if beyond.any():
        p.plot(steps[beyond], finite(value[beyond]), "rx", ms=4, label=f"beyond ({int(beyond.sum())} windows)")
        p.axvline(steps[beyond][0], color="r", lw=0.8, ls="--")
    p.set_yscale("log")
    p.set_title(name + (" (compared as a ratio)" if log else ""))
    p.set_xlabel("step")
    p.legend(fontsize=7)


def ratio_panel(p, a, cand):
    m = a["metrics"]
    steps = a["step"]
    floor = 1e-3
    for name, color in (("loss", "C0"), ("grad_norm", "C1")):
        p.plot(steps, np.clip(finite(m[name]["ratio"]), floor, None), "-", lw=1, color=color, label=name)
    if a["layers"]:
        worst = a["layers"][0]
        r = a["layer_series"][worst["name"]]["ratio"]
        p.plot(steps, np.clip(finite(r), floor, None), "-", lw=1, color="C2", label=f"layer {worst['name']}")
    k = a["first_steps"]
    if k:
        for name, marker in (("first_loss", "o"), ("first_grad_norm", "s")):
            p.plot(steps[:k], np.clip(finite(m[name]["ratio"]), floor, None), marker, ms=3, mfc="none",
                   label=f"{name} (raw, steps 0..{k - 1})")
    skipped = a["skipped_cand"]
    for s in skipped:
        p.axvline(s, color="0.7", lw=0.5)
    p.axhline(1.0, color="r", lw=1, ls="--", label="allowed (FAIL above)")
    p.set_yscale("log")
    p.set_title("difference / allowed" + (f"; {len(skipped)} skipped steps of CAND in grey" if len(skipped) else ""))
    p.set_xlabel("step")
    p.legend(fontsize=7)


def layer_panel(p, a):
    layers = a["layers"]  # worst first
    names = [L["name"] + ("" if math.isfinite(L["worst"]) else " (inf)") for L in layers]
    values = [L["worst"] if math.isfinite(L["worst"]) else np.nan for L in layers]
    top = max([v for v in values if not np.isnan(v)] + [1.0])
    values = [top * 1.2 if np.isnan(v) else v for v in values]
    colors = ["tab:red" if L["exceeds"] else "tab:blue" for L in layers]
    y = np.arange(len(layers))
    p.barh(y, values, color=colors)
    p.set_yticks(y)
    p.set_yticklabels(names, fontsize=6)
    p.invert_yaxis()
    p.axvline(1.0, color="r", lw=1, ls="--")
    p.set_title("layers: worst difference / allowed of their share of the gradient norm")
    p.set_xlabel("difference / allowed")


def plot(args):
    bases, cand, a, j, tol, source = rec.reconcile(args)
    fig, ax = plt.subplots(2, 2, figsize=(14, 10))
    # inf and nan are valid values of a trace and of what is allowed (a tolerance of 1e6 in logs is
    # exp(1e6)): finite() leaves them out of the plot, so numpy's warnings on them would only be
    # noise on stderr, as in avtrain-reconcile
    with np.errstate(all="ignore"):
        metric_panel(ax[0, 0], "loss", bases, cand, a, j)
        metric_panel(ax[0, 1], "grad_norm", bases, cand, a, j)
        ratio_panel(ax[1, 0], a, cand)
        layer_panel(ax[1, 1], a)
    first = j["first_step_beyond"]
    verdict = j["verdict"] + (f", first step beyond: {first}" if first is not None else "")
    mode = f"band of {len(bases)} BASE runs" if len(bases) > 1 else "one BASE run"
    fig.suptitle((args.title or f"{cand['dir']} (CAND) against {', '.join(b['dir'] for b in bases)}")
                 + f"\n{mode}: {verdict}", color="k" if j["verdict"] == "PASS" else "tab:red")
    fig.tight_layout()
    fig.savefig(args.out, dpi=90)
    plt.close(fig)


def main(argv=None):
    p = argparse.ArgumentParser(prog=PROG, description="Plot what avtrain-reconcile judges.")
    rec.add_options(p)
    p.add_argument("--out", required=True, metavar="FILE.png")
    p.add_argument("--title")
    args = p.parse_args(argv)
    if len(args.runs) < 2:
        p.error("give at least one BASE_DIR and a CAND_DIR")
    try:
        plot(args)
    except rec.InputError as e:
        print(f"{PROG}: {rec.one_line(e)}", file=sys.stderr)
        return 2
    except rec.NotComparable as e:
        print(f"{PROG}: runs are not comparable: {rec.one_line(e)}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"{PROG}: {args.out}: cannot write ({e.strerror})", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
