"""An avtrain checkpoint directory read by name, whatever wrote it (docs/checkpoint.md): the files its
`committed` marker lists (stage-S.h5, and under ZeRO's parallel write stage-S.part-R.h5 for each
replica R > 0), each tensor whole from the file that holds it whole or put together from its pieces
(one-dimensional datasets with the attributes `offset`, where the piece starts in the whole,
row-major, and `shape`, the whole's).

    import avtrain_checkpoint
    t = avtrain_checkpoint.tensors("runs/a/checkpoints/step-0000300")
    w = t["params/blocks.0.attn.qkv.weight"]       # numpy float32, shape (3 D, D)

Needs numpy and h5py.
"""
import json
import os

import numpy as np


def files(checkpoint):
    """The checkpoint's files, stage 0's main file first, from its `committed` marker."""
    marker = os.path.join(checkpoint, "committed")
    if not os.path.isfile(marker):
        raise FileNotFoundError(f"{checkpoint}: no committed marker (not a committed avtrain checkpoint)")
    with open(marker) as f:
        m = json.load(f)
    out = []
    for s in range(int(m["stages"])):
        for r in range(int(m.get("files_per_stage", 1))):
            out.append(os.path.join(checkpoint, f"stage-{s}.h5" if r == 0 else f"stage-{s}.part-{r}.h5"))
    return out


def fingerprint(checkpoint):
    """The fingerprint (JSON) the files carry."""
    import h5py
    with h5py.File(files(checkpoint)[0], "r") as f:
        text = f.attrs["fingerprint"]
    return json.loads(text.decode() if isinstance(text, bytes) else text)


def tensors(checkpoint, skip=()):
    """Every dataset of the checkpoint by name ("params/NAME", "adamw/m/NAME", "state/next_step", ...)
    as a numpy array, pieces put together; names in `skip` left out. A scalar a file of each stage
    holds (state/next_step) is taken from the first. Raises ValueError when pieces leave a gap or
    overlap, or two files hold a tensor whole."""
    import h5py
    whole, pieces = {}, {}

    def visit(name, obj):
        if not isinstance(obj, h5py.Dataset) or name in skip:
            return
        if "offset" in obj.attrs:
            pieces.setdefault(name, []).append((int(obj.attrs["offset"]), tuple(int(d) for d in obj.attrs["shape"]),
                                                obj[()]))
        elif name not in whole:
            whole[name] = obj[()]
        elif name.startswith(("params/", "adamw/m/", "adamw/v/")):
            raise ValueError(f"{checkpoint}: {name} is held whole by two files")

    for path in files(checkpoint):
        with h5py.File(path, "r") as f:
            f.visititems(visit)
    for name, held in pieces.items():
        if name in whole:
            raise ValueError(f"{checkpoint}: {name} is held whole and in pieces")
        shape = held[0][1]
        out = np.empty(int(np.prod(shape)), dtype=held[0][2].dtype)
        covered = 0
        for offset, s, values in sorted(held, key=lambda h: h[0]):
            if s != shape or offset != covered:
                raise ValueError(f"{checkpoint}: the pieces of {name} do not cover it exactly once "
                                 f"(a piece at {offset}, expected {covered})")
            out[offset:offset + values.size] = values
            covered = offset + values.size
        if covered != out.size:
            raise ValueError(f"{checkpoint}: the pieces of {name} end at element {covered} of {out.size}")
        whole[name] = out.reshape(shape)
    return whole
