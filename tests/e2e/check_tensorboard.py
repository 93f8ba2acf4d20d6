#!/usr/bin/env python3
"""TensorBoard reads what avtrain writes: two runs (fp32, bf16) into RUNS/fp32 and RUNS/bf16 and one with
--train.tensorboard 0 into RUNS/off (and fp32 again with --overwrite, which leaves one event file);
TensorBoard's own reader (EventMultiplexer over RUNS, as
`tensorboard --logdir RUNS` lists runs) finds exactly the runs fp32 and bf16, every number of each
trace.csv as the scalar trace/COLUMN at its step (as a float32), and each step's grad_share/MODULE equal
to the module's grad_norm^2 over the step's sum in layers.csv. Run it with the Python that has the
tensorboard package (tests/e2e/make_pip_venv.sh).

usage: check_tensorboard.py WORK -- [MPIRUN ...] AVTRAIN DECK [OPTIONS...]
"""
import csv
import os
import shutil
import subprocess
import sys

import numpy as np
from tensorboard.backend.event_processing import event_multiplexer


def fail(message):
    print(f"check_tensorboard: {message}")
    sys.exit(1)


def main():
    argv = sys.argv[1:]
    if len(argv) < 3 or argv[1] != "--":
        sys.exit(__doc__)
    work, command = argv[0], argv[2:]
    shutil.rmtree(work, ignore_errors=True)
    runs = os.path.join(work, "runs")
    for name, extra in (("fp32", []), ("bf16", ["--precision", "bf16"]), ("off", ["--train.tensorboard", "0"])):
        p = subprocess.run(command + ["--out", os.path.join(runs, name)] + extra, capture_output=True, text=True,
                           timeout=300)
        if p.returncode:
            fail(f"the {name} run failed:\n{p.stdout}{p.stderr}")
    if any(f.startswith("events.out.tfevents") for f in os.listdir(os.path.join(runs, "off"))):
        fail("--train.tensorboard 0 wrote an event file")
    # A fresh start over the fp32 run replaces its event file as it replaces trace.csv.
    p = subprocess.run(command + ["--out", os.path.join(runs, "fp32"), "--overwrite"], capture_output=True, text=True,
                       timeout=300)
    events = [f for f in os.listdir(os.path.join(runs, "fp32")) if f.startswith("events.out.tfevents")]
    if p.returncode or len(events) != 1:
        fail(f"the fp32 run again with --overwrite: exit {p.returncode}, event files {events} (expected one)")

    mux = event_multiplexer.EventMultiplexer(size_guidance={"scalars": 0})
    mux.AddRunsFromDirectory(runs)
    mux.Reload()
    if sorted(mux.Runs()) != ["bf16", "fp32"]:
        fail(f"TensorBoard lists the runs {sorted(mux.Runs())}, expected bf16 and fp32")
    checked = 0
    for name in ("fp32", "bf16"):
        acc = mux.GetAccumulator(name)
        tags = set(acc.Tags()["scalars"])
        scalars = {tag: {e.step: e.value for e in acc.Scalars(tag)} for tag in tags}
        rows = list(csv.DictReader(open(os.path.join(runs, name, "trace.csv"))))
        for row in rows:
            step = int(row["step"])
            for column, text in row.items():
                if column == "step" or text == "":
                    continue
                got = scalars.get("trace/" + column, {}).get(step)
                if got is None:
                    fail(f"{name}: trace/{column} has no value at step {step}")
                if got != float(np.float32(float(text))) and not (np.isnan(got) and np.isnan(float(text))):
                    fail(f"{name}: trace/{column} at step {step} is {got}, trace.csv says {text}")
                checked += 1
        layers = {}
        for row in csv.DictReader(open(os.path.join(runs, name, "layers.csv"))):
            layers.setdefault(int(row["step"]), []).append((row["layer"], float(row["grad_norm"])))
        for step, modules in layers.items():
            total = sum(g * g for _, g in modules)
            for module, g in modules:
                got = scalars.get("grad_share/" + module, {}).get(step)
                if got is None or abs(got - g * g / total) > 1e-6:
                    fail(f"{name}: grad_share/{module} at step {step} is {got}, layers.csv gives {g * g / total}")
                checked += 1
    print(f"check_tensorboard: runs bf16 and fp32 listed, none for train.tensorboard 0; {checked} scalars equal to "
          "trace.csv and layers.csv; ok")


if __name__ == "__main__":
    main()
