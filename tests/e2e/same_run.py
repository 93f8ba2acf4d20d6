"""What "the same run" means for the checkpoint tests: trace.csv equal in every column but the
measurements of the process, layers.csv equal, and checkpoint datasets equal bit for bit (but
state/elapsed_s, the wall time)."""
import csv
import glob
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "validation"))
import avtrain_checkpoint  # noqa: E402


# Columns that measure the process (time, memory, the measured bubble), not the run.
MEASURED = {"step_ms", "data_wait_ms", "comm_ms", "samples_per_s", "mem_peak_mb", "bubble"}


def rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def trace_difference(straight, other, also_ignore=()):
    """The first difference between two runs' trace.csv (measurements and `also_ignore` aside) and
    layers.csv, or None."""
    a, b = rows(os.path.join(straight, "trace.csv")), rows(os.path.join(other, "trace.csv"))
    if [r["step"] for r in a] != [r["step"] for r in b]:
        return f"trace.csv steps {[r['step'] for r in b]}, expected {[r['step'] for r in a]}"
    for ra, rb in zip(a, b):
        for col in ra:
            if col not in MEASURED and col not in also_ignore and ra[col] != rb[col]:
                return f"trace.csv step {ra['step']}, {col}: {ra[col]} straight, {rb[col]} in {other}"
    la, lb = rows(os.path.join(straight, "layers.csv")), rows(os.path.join(other, "layers.csv"))
    if len(la) != len(lb):
        return f"layers.csv has {len(lb)} rows in {other}, {len(la)} straight"
    for ra, rb in zip(la, lb):
        for col in ra:
            if ra[col] != rb.get(col):
                return (f"layers.csv step {ra.get('step')}, {ra.get('layer')}, {col}: {ra[col]} straight, "
                        f"{rb.get(col)} in {other}")
    return None


# Checkpoint datasets that measure the process (wall time), not the run.
MEASURED_DATASETS = {"state/elapsed_s"}


def checkpoint_difference(a, b):
    """The first difference between two checkpoint directories, by dataset name whichever files hold
    it (a ZeRO replica's pieces put together, so a stage written whole and one written by part
    compare), wall time aside; or None. Returns (difference, datasets compared)."""
    x = avtrain_checkpoint.tensors(a, skip=MEASURED_DATASETS)
    y = avtrain_checkpoint.tensors(b, skip=MEASURED_DATASETS)
    if x.keys() != y.keys():
        return f"{b}: datasets {sorted(x.keys() ^ y.keys())[:5]} in one checkpoint only", 0
    for key in sorted(x):
        if x[key].dtype != y[key].dtype or x[key].shape != y[key].shape or x[key].tobytes() != y[key].tobytes():
            return f"{b}: dataset {key} differs from {a}'s", 0
    return None, len(x)


def run_difference(straight, other, also_ignore=()):
    """The first difference between two runs, or None: trace.csv (but the measurements and
    `also_ignore`), layers.csv, and every dataset of their final committed checkpoint's stage files.
    Returns (difference, what was compared)."""
    diff = trace_difference(straight, other, also_ignore)
    if diff:
        return diff, None
    a, b = committed(straight), committed(other)
    if not a or a[-1:] != b[-1:]:
        return f"final checkpoints {a[-1:] or 'none'} in {straight}, {b[-1:] or 'none'} in {other}", None
    final = a[-1]
    if os.environ.get("AVTRAIN_H5PY_OPTIONAL") == "1":  # the gpu checks: a GPU node's python may have numpy alone
        try:
            import h5py  # noqa: F401
        except ImportError:
            return None, (f"every column of trace.csv (but the measurements) and layers.csv bit for bit; {final}'s "
                          "datasets not compared: this python has no h5py")
    diff, count = checkpoint_difference(os.path.join(straight, "checkpoints", final),
                                        os.path.join(other, "checkpoints", final))
    if diff:
        return diff, None
    files = len(avtrain_checkpoint.files(os.path.join(other, "checkpoints", final)))
    steps = len(rows(os.path.join(straight, "trace.csv")))
    ignored = ", ".join(sorted(also_ignore))
    return None, (f"{steps} steps, every column of trace.csv (but the measurements{', ' + ignored if ignored else ''}) "
                  f"and layers.csv, and {count} datasets of {final} ({files} files): bit for bit")


TRACES = ("trace.csv", "layers.csv", "ranks.csv")


def copy_traces(src, dst, before, spoil_from=None):
    """Copies run.json and the rows of steps before `before` of each trace into dst: what a run
    that stopped there had written. With spoil_from, the rows of steps from spoil_from on get a
    loss (layers.csv: grad_norm; ranks.csv: grad_norm_local) of -1, so that a comparison passes only if
    a resume wrote them again."""
    os.makedirs(dst, exist_ok=True)
    shutil.copy(os.path.join(src, "run.json"), dst)
    for name in TRACES:
        with open(os.path.join(src, name), newline="") as f:
            lines = f.read().splitlines(keepends=True)
        header, kept = lines[0], [line for line in lines[1:] if int(line.split(",", 1)[0]) < before]
        columns = header.rstrip("\r\n").split(",")
        spoilt = next((c for c in ("loss", "grad_norm", "grad_norm_local") if c in columns), None)
        if spoil_from is not None and spoilt:
            col = columns.index(spoilt)
            for i, line in enumerate(kept):
                fields = line.rstrip("\r\n").split(",")
                if int(fields[0]) >= spoil_from:
                    fields[col] = "-1"
                    kept[i] = ",".join(fields) + "\n"
        with open(os.path.join(dst, name), "w", newline="") as f:
            f.write(header + "".join(kept))


def committed(out):
    """The names of the committed checkpoints under OUT/checkpoints, oldest first."""
    return sorted(os.path.basename(d) for d in glob.glob(os.path.join(out, "checkpoints", "step-*"))
                  if os.path.isfile(os.path.join(d, "committed")))
