#!/usr/bin/python3
"""The validation metrics of avtrain --eval-only against sklearn's on the same scores, and the same at
every layout.

usage: check_val_metrics.py EVAL_DIR... [--same EVAL_DIR...]
Each EVAL_DIR holds eval.json and eval_scores.h5 (every validation sample's logits and set of classes).
From the scores, sklearn computes: each class's average_precision_score and roc_auc_score (eval.json's
per_class ap and auc), mAP (the mean over classes with a positive), AUC (the mean over classes with
positives and negatives), d' = sqrt(2) norm.ppf(AUC), and top-1 / top-5 (top_k_accuracy_score where a
sample has one class; otherwise whether the first arg-max / one of the 5 highest is one of its
classes). Each must equal eval.json's to 1e-9. The dirs after --same (evaluations of one checkpoint at
other layouts) must give the same logits and the same metrics, bit for bit.
"""
import json
import math
import os
import sys

import h5py
import numpy as np
from scipy.stats import norm
from sklearn.metrics import average_precision_score, roc_auc_score, top_k_accuracy_score

TOLERANCE = 1e-9
METRICS = ("val_loss", "val_acc", "val_top5", "val_map", "val_auc", "val_dprime")


def load(directory):
    with open(os.path.join(directory, "eval.json")) as f:
        report = json.load(f)
    with h5py.File(os.path.join(directory, "eval_scores.h5"), "r") as f:
        index, logits, targets = f["index"][...], f["logits"][...], f["targets"][...]
    if list(index) != report["val_indices"]:
        sys.exit(f"check_val_metrics: {directory}: eval_scores.h5 /index differs from eval.json's val_indices")
    return report, logits.astype(np.float64), targets.astype(bool)


def sklearn_metrics(logits, targets):
    classes = logits.shape[1]
    ap = [average_precision_score(targets[:, c], logits[:, c]) if targets[:, c].any() else None
          for c in range(classes)]
    auc = [roc_auc_score(targets[:, c], logits[:, c]) if 0 < targets[:, c].sum() < len(targets) else None
           for c in range(classes)]
    mean_auc = float(np.mean([a for a in auc if a is not None]))
    one_label = bool((targets.sum(axis=1) == 1).all())
    k5 = min(5, classes)
    if one_label:
        labels = targets.argmax(axis=1)
        top1 = top_k_accuracy_score(labels, logits, k=1, labels=range(classes))
        top5 = top_k_accuracy_score(labels, logits, k=k5, labels=range(classes)) if classes > 2 else 1.0
    else:
        top1 = float(np.mean(targets[np.arange(len(targets)), logits.argmax(axis=1)]))
        order = np.argsort(-logits, axis=1, kind="stable")[:, :k5]
        top5 = float(np.mean([targets[r, order[r]].any() for r in range(len(targets))]))
    return {"val_acc": top1, "val_top5": top5, "val_map": float(np.mean([a for a in ap if a is not None])),
            "val_auc": mean_auc, "val_dprime": math.sqrt(2.0) * norm.ppf(mean_auc)}, ap, auc


def check_against_sklearn(directory):
    report, logits, targets = load(directory)
    want, ap, auc = sklearn_metrics(logits, targets)
    worst = 0.0
    for key, value in want.items():
        diff = abs(report[key] - value)
        worst = max(worst, diff)
        if not diff <= TOLERANCE:
            sys.exit(f"check_val_metrics: {directory}: {key} {report[key]!r}, sklearn {value!r} (|diff| {diff:.3g})")
    for c, row in enumerate(report["per_class"]):
        for key, value in (("ap", ap[c]), ("auc", auc[c])):
            if value is None:
                if row[key] is not None:
                    sys.exit(f"check_val_metrics: {directory}: class {row['class']} {key} {row[key]}, sklearn has none")
                continue
            diff = abs(row[key] - value)
            worst = max(worst, diff)
            if not diff <= TOLERANCE:
                sys.exit(f"check_val_metrics: {directory}: class {row['class']} {key} {row[key]!r}, sklearn {value!r}")
    print(f"check_val_metrics: {directory} ({report['task']}, {len(targets)} samples, {logits.shape[1]} classes): "
          + ", ".join(f"{k} {report[k]:.6f}" for k in want) + f"; sklearn's to {worst:.2g}")


def main():
    argv = sys.argv[1:]
    same = []
    if "--same" in argv:
        same = argv[argv.index("--same") + 1:]
        argv = argv[:argv.index("--same")]
    if not argv and not same:
        sys.exit(__doc__)
    for directory in argv + same:
        check_against_sklearn(directory)
    if same:
        first, first_logits, _ = load(same[0])
        for directory in same[1:]:
            report, logits, _ = load(directory)
            if not np.array_equal(logits, first_logits):
                sys.exit(f"check_val_metrics: {directory}: logits differ from {same[0]}'s")
            for key in METRICS:
                if report[key] != first[key]:
                    sys.exit(f"check_val_metrics: {directory}: {key} {report[key]!r}, {same[0]} {first[key]!r}")
            if report["per_class"] != first["per_class"]:
                sys.exit(f"check_val_metrics: {directory}: per_class differs from {same[0]}'s")
        print(f"check_val_metrics: {', '.join(same)}: the same logits and metrics, bit for bit")


if __name__ == "__main__":
    main()
