#!/usr/bin/python3
"""avtrain-export's file in PyTorch (docs/safetensors.md): the checkpoint exported in fp32 and in bf16;
validation/torch_avnet.py evaluate --safetensors loads the fp32 file through safetensors.torch.load_file
into its AVNet (load_state_dict strict: the names and shapes are exactly its modules') and computes
the validation loss and accuracy of avtrain --eval-only's eval.json on the same samples, within
evaluate's tolerances (1e-5 relative; accuracy up to near ties); every tensor of the bf16 file is
PyTorch's own round-to-nearest-even of the fp32 file's, bit for bit.

usage: check_safetensors_export.py OUT CHECKPOINT DATA EVAL_JSON -- AVTRAIN_EXPORT
Run with a Python that has torch, h5py and the safetensors package (tests/e2e/make_pip_venv.sh).
"""
import os
import subprocess
import sys
import time

import torch
from safetensors.torch import load_file

HERE = os.path.dirname(os.path.abspath(__file__))
TORCH_AVNET = os.path.join(HERE, "..", "..", "validation", "torch_avnet.py")


def export(program, checkpoint, out, dtype):
    t0 = time.monotonic()
    done = subprocess.run([program, checkpoint, "--out", out, "--dtype", dtype], capture_output=True, text=True)
    print(done.stdout + done.stderr, end="")
    if done.returncode != 0:
        sys.exit(f"check_safetensors_export: avtrain-export --dtype {dtype} exited {done.returncode}")
    print(f"export {dtype}: {time.monotonic() - t0:.2f} s, {os.path.getsize(out)} bytes")


def main():
    if len(sys.argv) != 7 or sys.argv[5] != "--":
        sys.exit(__doc__)
    out, checkpoint, data, eval_json, program = sys.argv[1:5] + sys.argv[6:]
    os.makedirs(out, exist_ok=True)
    fp32, bf16 = os.path.join(out, "model.safetensors"), os.path.join(out, "model-bf16.safetensors")
    export(program, checkpoint, fp32, "fp32")
    export(program, checkpoint, bf16, "bf16")

    subprocess.run([sys.executable, TORCH_AVNET, "evaluate", "--safetensors", fp32, "--data", data,
                    "--eval-json", eval_json], check=True)

    a, b = load_file(fp32), load_file(bf16)
    if sorted(a) != sorted(b):
        sys.exit(f"check_safetensors_export: the bf16 file holds other tensors: {sorted(set(a) ^ set(b))}")
    for name in sorted(a):
        if a[name].dtype != torch.float32 or b[name].dtype != torch.bfloat16:
            sys.exit(f"check_safetensors_export: {name} is {a[name].dtype} / {b[name].dtype}")
        if not torch.equal(a[name].to(torch.bfloat16).view(torch.int16), b[name].view(torch.int16)):
            sys.exit(f"check_safetensors_export: {name} in bf16 is not the fp32 values rounded to nearest even")
    print(f"check_safetensors_export: {len(a)} tensors; the bf16 file is the fp32 one rounded to nearest even")


if __name__ == "__main__":
    main()
