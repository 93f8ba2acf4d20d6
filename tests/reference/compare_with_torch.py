#!/usr/bin/python3
"""Checks avtrain's loss and every parameter gradient for one micro-batch against the independent
PyTorch implementation in validation/torch_avnet.py, evaluated in float64.

usage: compare_with_torch.py DIR    (DIR written by avnet_reference_dump, with --multi-label or without:
its avtrain.h5 says which loss, the cross-entropy or the multi-label binary cross-entropy)
Tolerances: loss terms 2e-5 relative; each gradient tensor ||g - ref|| <= 2e-4 ||ref|| + 1e-6 G,
G the largest reference gradient norm (the floor covers tensors whose true gradient is zero).
"""
import os
import subprocess
import sys

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
TORCH_AVNET = os.path.join(HERE, "..", "..", "validation", "torch_avnet.py")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    d = sys.argv[1]
    with h5py.File(f"{d}/avtrain.h5", "r") as f:
        a = {k: float(f.attrs[k]) for k in f.attrs}
        grads = {name: f["grad"][name][...] for name in f["grad"]}
    args = []
    for key in ("width", "depth", "heads", "mlp_ratio", "window", "hop", "mel", "tubelet", "patch"):
        args += [f"--{key.replace('_', '-')}", str(int(a[key]))]
    args += ["--nce-weight", repr(a["nce_weight"]), "--nce-temperature", repr(a["nce_temperature"]), "--threads", "1"]
    args += ["--task", "multi_label" if a.get("multi_label", 0) else "single_label"]
    subprocess.run([sys.executable, TORCH_AVNET, "reference", *args, "--params", f"{d}/params.h5",
                    "--batch", f"{d}/batch/batch.h5", "--out", f"{d}/torch.h5"], check=True)
    failures = []
    with h5py.File(f"{d}/torch.h5", "r") as f:
        for key in ("loss", "ce_loss", "nce_loss"):
            ref = float(f.attrs[key])
            rel = abs(a[key] - ref) / max(abs(ref), 1e-12)
            print(f"{key:10s} avtrain {a[key]:.9g}  torch {ref:.9g}  rel {rel:.2e}")
            if rel > 2e-5:
                failures.append(f"{key}: relative difference {rel:.2e}")
        names = sorted(f["grad"].keys())
        if sorted(grads) != names:
            failures.append(f"parameter sets differ: {sorted(set(grads) ^ set(names))}")
        scale = max(np.linalg.norm(f["grad"][n][...]) for n in names)
        worst = (0.0, "")
        for n in names:
            ref = f["grad"][n][...]
            diff = np.linalg.norm(grads[n] - ref)
            tol = 2e-4 * np.linalg.norm(ref) + 1e-6 * scale
            worst = max(worst, (diff / tol, n))
            if diff > tol:
                failures.append(f"grad {n}: |diff| {diff:.3e} > {tol:.3e} (|ref| {np.linalg.norm(ref):.3e})")
    print(f"{len(names)} gradients compared; worst {worst[1]} at {worst[0]:.3f} of its tolerance")
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures))
        sys.exit(1)
    print("avtrain matches the PyTorch reference")


if __name__ == "__main__":
    main()
