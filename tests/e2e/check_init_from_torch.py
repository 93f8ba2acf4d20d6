#!/usr/bin/python3
"""A PyTorch-written safetensors file starts an avtrain run (model.init_from, docs/safetensors.md):
validation/torch_avnet.py's AVNet for the deck's [model] and the shards' shapes, with its own
initialisation (torch.manual_seed 1), saved by safetensors.torch.save_file (no avtrain metadata);
avtrain trains one step from it with the whole shard set as its one micro-batch (data.val_fraction
0), so that its loss does not depend on the sample order; the first step's loss in trace.csv equals
PyTorch's train-mode loss of the same weights on the same samples, in float64, within the loss
tolerance of tests/reference/compare_with_torch.py (2e-5 relative).

usage: check_init_from_torch.py OUT DECK SHARDS -- AVTRAIN_COMMAND...
Run with a Python that has torch, h5py and the safetensors package (tests/e2e/make_pip_venv.sh).
"""
import configparser
import csv
import glob
import os
import shutil
import subprocess
import sys

import h5py
import torch
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "validation"))
import torch_avnet  # noqa: E402

ARCHITECTURE = ("width", "depth", "heads", "mlp_ratio", "audio_window", "audio_hop", "mel_bins", "tubelet_frames",
                "patch", "nce_weight", "nce_temperature", "init_std")


def torch_model(deck, shard_paths):
    """torch_avnet's AVNet of the deck's [model] keys and the shards' shapes."""
    ini = configparser.ConfigParser()
    ini.read(deck)
    model = {k: (float if k in ("nce_weight", "nce_temperature", "init_std") else int)(v)
             for k, v in (ini["model"].items() if "model" in ini else []) if k in ARCHITECTURE}
    with h5py.File(shard_paths[0], "r") as f:
        _, frames, height, width_px, channels = f["video"].shape
        cfg = torch_avnet.AVNetConfig(audio_samples=f["audio"].shape[1], sample_rate=int(f.attrs["sample_rate"]),
                                      frames=frames, height=height, width_px=width_px, channels=channels,
                                      num_classes=int(f.attrs["num_classes"]), **model)
    return torch_avnet.AVNet(cfg)


def first_loss(trace):
    with open(trace) as f:
        rows = list(csv.DictReader(f))
    if not rows:
        sys.exit(f"check_init_from_torch: {trace} has no step")
    return float(rows[0]["loss"])


def main():
    if len(sys.argv) < 6 or sys.argv[4] != "--":
        sys.exit(__doc__)
    out, deck, shards, command = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[5:]
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    shard_paths = sorted(glob.glob(os.path.join(shards, "*.h5")))
    shard_list = []
    for p in shard_paths:
        with h5py.File(p, "r") as f:
            shard_list.append({"name": os.path.basename(p), "samples": int(f["label"].shape[0])})
    samples = sum(s["samples"] for s in shard_list)

    torch.manual_seed(1)
    model = torch_model(deck, shard_paths)
    weights = os.path.join(out, "torch_init.safetensors")
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, weights, metadata={"format": "pt"})

    run = os.path.join(out, "run")
    done = subprocess.run(command + ["--data", shards, "--model.init_from", weights, "--steps", "1",
                                     "--train.micro_batch", str(samples), "--train.micro_batches", "1",
                                     "--data.val_fraction", "0", "--checkpoint.interval", "-1", "--out", run],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(done.stdout, end="")
    if done.returncode != 0:
        sys.exit(f"check_init_from_torch: avtrain exited {done.returncode}")
    # The name map both ways: every tensor of PyTorch's state_dict taken, none left over.
    if f"model.init_from {weights}: {len(model.state_dict())} tensors loaded" not in done.stdout:
        sys.exit("check_init_from_torch: avtrain did not say it loaded every tensor of the file")
    if "not used by this model" in done.stdout:
        sys.exit("check_init_from_torch: avtrain left tensors of PyTorch's state_dict unused")
    ours = first_loss(os.path.join(run, "trace.csv"))

    batch = torch_avnet.read_samples(shards, shard_list, list(range(samples)))
    batch["audio"] = batch["audio"].double()
    with torch.no_grad():
        theirs = model.double().train()(batch)[0].item()
    rel = abs(ours - theirs) / abs(theirs)
    print(f"first-step loss: avtrain {ours!r}, PyTorch (float64) {theirs!r}, relative difference {rel:.2e}")
    if not rel <= 2e-5:
        sys.exit(f"check_init_from_torch: relative difference {rel:.2e} > 2e-5")
    print("check_init_from_torch: ok")


if __name__ == "__main__":
    main()
