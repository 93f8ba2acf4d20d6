#!/usr/bin/python3
"""The PyTorch peer (validation/torch_avnet.py train) trains as avtrain does: from the same initial
weights (the peer's, written by `torch_avnet.py init` and loaded by both through model.init_from), on
the same samples step by step (avtrain's sampler reproduced, balanced sampling included), with the
same optimizer. avtrain-reconcile, with its FP32 single-baseline tolerances and every step compared
one by one (--first-steps = the steps), says PASS, and the last evaluation's metrics that reconcile
does not compare agree: val_top5 exactly, val_map and val_auc within 2e-3. They rank the scores, and
scores of one class that lie within fp32's rounding of each other (early in training, a class the model
does not tell apart yet) are ordered by the rounding: on the test's set one positive/negative pair
swapped moves a class's AUC by 1/(30 x 97) = 3.4e-4 and the mean over 8 classes by 4e-5 (measured:
val_auc 4.7e-5, val_map 1.4e-5 apart, with the losses 6e-8 apart); 2e-3 allows a few such swaps and
no real difference in training.

usage: check_torch_peer.py OUT DECK STEPS -- OPTIONS... -- AVTRAIN_COMMAND...
OPTIONS are avtrain's (--data DIR, --model.task ..., ...): both runs get them.
"""
import csv
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
VALIDATION = os.path.join(HERE, "..", "..", "validation")
PYTHON = "/usr/bin/python3"


def run(command):
    done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(done.stdout, end="")
    if done.returncode != 0:
        sys.exit(f"check_torch_peer: {' '.join(command[:3])} ... exited {done.returncode}")
    return done.stdout


def last_evaluation(trace):
    with open(trace) as f:
        rows = [r for r in csv.DictReader(f) if r["val_map"]]
    if not rows:
        sys.exit(f"check_torch_peer: {trace} has no evaluation")
    return rows[-1]


def main():
    argv = sys.argv[1:]
    if len(argv) < 5 or argv[3] != "--" or "--" not in argv[4:]:
        sys.exit(__doc__)
    out, deck, steps = argv[0], argv[1], argv[2]
    rest = argv[4:]
    split = rest.index("--")
    options, avtrain = rest[:split] + ["--steps", steps], rest[split + 1:]
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    init = os.path.join(out, "init.safetensors")
    peer = [PYTHON, os.path.join(VALIDATION, "torch_avnet.py")]
    run(peer + ["init", deck, *options, "--init-out", init])
    options += ["--model.init_from", init]
    run(avtrain + [deck, *options, "--checkpoint.interval", "-1", "--out", os.path.join(out, "avtrain")])
    run(peer + ["train", deck, *options, "--out", os.path.join(out, "peer")])
    verdict = run([PYTHON, os.path.join(VALIDATION, "avtrain-reconcile"), os.path.join(out, "avtrain"),
                   os.path.join(out, "peer"), "--first-steps", steps])
    if "verdict: PASS" not in verdict:
        sys.exit("check_torch_peer: avtrain-reconcile did not say PASS")
    ours, theirs = (last_evaluation(os.path.join(out, run_, "trace.csv")) for run_ in ("avtrain", "peer"))
    failures = []
    for key, atol in (("val_map", 2e-3), ("val_auc", 2e-3), ("val_top5", 0.0)):
        a, b = float(ours[key]), float(theirs[key])
        print(f"{key:9s} avtrain {a:.9g}  peer {b:.9g}  difference {abs(a - b):.2e} (allowed {atol:g})")
        if not abs(a - b) <= atol:
            failures.append(f"{key}: difference {abs(a - b):.2e} > {atol:g}")
    if failures:
        sys.exit("check_torch_peer: " + "; ".join(failures))
    print("the PyTorch peer trains as avtrain does")


if __name__ == "__main__":
    main()
