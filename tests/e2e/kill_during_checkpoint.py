#!/usr/bin/python3
"""SIGKILL while checkpoints are being written, again and again: every committed checkpoint stays
complete, --resume auto always finds one (or starts afresh when none was committed yet), and the run
ends with the state of the run that was never killed, bit for bit.

usage: kill_during_checkpoint.py WORK -- [MPIRUN ...] AVTRAIN DECK [OPTIONS...]

Rounds: AVTRAIN_KILL_ROUNDS (default 3; CI runs the default, set more on demand, e.g. 20). Each
round starts the run (a checkpoint every step, --resume auto: a start killed before its first commit
starts again), watches its checkpoint directory and kills its whole session with SIGKILL at a chosen moment: while a checkpoint is in
flight (its directory exists uncommitted: the state is being copied out or its file built in memory
beside training), while a stage file is being written to the disk (a stage-K.h5.tmp exists), while
the commit marker is (committed.tmp), or at a random time. After each kill every committed checkpoint is read whole with h5py. Then the run is finished
without kills and compared with a straight run: trace.csv in every column but the measurements,
layers.csv, and the final checkpoint dataset by dataset. Prints how many rounds ran and how many
kills landed inside a write. Exit 0 when every check holds.
"""
import glob
import json
import os
import random
import shutil
import subprocess
import sys
import time

import h5py

import run_processes
from same_run import datasets, trace_difference


def fail(message):
    print(f"kill_during_checkpoint: {message}")
    sys.exit(1)


def starts(out):
    """run.json's list of starts (written atomically before a start trains), [] before the first."""
    try:
        with open(os.path.join(out, "run.json")) as f:
            return json.load(f).get("starts", [])
    except FileNotFoundError:
        return []


def step_of(checkpoint):
    return int(os.path.basename(checkpoint)[len("step-"):])


def committed(ckdir):
    return sorted(d for d in glob.glob(os.path.join(ckdir, "step-*")) if os.path.isfile(os.path.join(d, "committed")))


def in_flight(ckdir):
    """Checkpoint directories not (yet) committed: a write in flight, or what a kill left."""
    return [d for d in glob.glob(os.path.join(ckdir, "step-*")) if not os.path.isfile(os.path.join(d, "committed"))]


def read_whole(checkpoint):
    """Every dataset of every stage file, or an error naming what is missing or unreadable."""
    files = sorted(glob.glob(os.path.join(checkpoint, "stage-*.h5")))
    if not files:
        fail(f"{checkpoint}: committed, but no stage file")
    count = 0
    for path in files:
        try:
            with h5py.File(path, "r") as f:
                names = []
                f.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
                for n in names:
                    f[n][()]  # Fletcher-32 checked by HDF5
                count += len(names)
        except Exception as e:  # noqa: BLE001 - any failure to read is the finding
            fail(f"{path}: committed but not readable whole: {e}")
    return count


def main():
    argv = sys.argv[1:]
    if "--" not in argv or argv.index("--") != 1:
        sys.exit(__doc__)
    work, command = argv[0], argv[2:]
    rounds = int(os.environ.get("AVTRAIN_KILL_ROUNDS", "3"))
    rng = random.Random(int(os.environ.get("AVTRAIN_KILL_SEED", "1")))
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    straight, killed = os.path.join(work, "straight"), os.path.join(work, "killed")
    common = command + ["--checkpoint.interval", "1", "--checkpoint.keep", "2"]
    with open(os.path.join(work, "straight.log"), "w") as log:
        if run_processes.run(common + ["--out", straight], stdout=log, stderr=subprocess.STDOUT, timeout=600).returncode:
            fail(f"the straight run failed (log {work}/straight.log)")
    ckdir = os.path.join(killed, "checkpoints")
    final_ck = committed(os.path.join(straight, "checkpoints"))[-1]
    in_write = resumed_checked = anew = 0
    for r in range(rounds):
        if committed(ckdir) and step_of(committed(ckdir)[-1]) == step_of(final_ck):
            shutil.rmtree(killed)  # a kill came too late: the run is complete, so start another
            anew += 1
        before = committed(ckdir)
        known_starts = len(starts(killed))
        moment = rng.choice(["in flight", "stage file", "commit marker", "random"])
        log = open(os.path.join(work, f"round-{r}.log"), "w")
        p = run_processes.Session(common + ["--out", killed], stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + (rng.uniform(0.5, 4.0) if moment == "random" else 60)
        skip = rng.randrange(0, 4)  # let a few writes pass first
        seen_tmp = False
        while p.poll() is None and time.monotonic() < deadline:
            pattern = "stage-*.h5.tmp" if moment == "stage file" else "committed.tmp"
            def seen():
                if moment == "in flight":
                    return in_flight(ckdir)
                return glob.glob(os.path.join(ckdir, "step-*", pattern)) if moment != "random" else []
            if seen():
                if skip == 0:
                    seen_tmp = True
                    break
                skip -= 1
                while seen() and p.poll() is None:
                    time.sleep(0.0005)
            time.sleep(0.0005)
        if p.poll() is None:
            writing = bool(in_flight(ckdir))
            p.kill_session()
            in_write += writing
            what = f"killed {'inside a write' if writing else 'between writes'} (aimed at: {moment})"
        else:
            what = f"finished before the kill (aimed at: {moment}, exit {p.returncode})"
            seen_tmp = False
            p.kill_session()  # whatever the run left
        log.close()
        # A start that got as far as run.json must have resumed from the newest committed checkpoint.
        now = starts(killed)
        if before and len(now) > known_starts:
            if now[-1]["step"] != step_of(before[-1]):
                fail(f"round {r + 1} started at step {now[-1]['step']}, not from {before[-1]}")
            resumed_checked += 1
        done = committed(ckdir)
        total = sum(read_whole(c) for c in done)
        print(f"round {r + 1}/{rounds}: {what}; {len(done)} committed checkpoint(s), {total} datasets all readable"
              + ("" if not done else f", newest {os.path.basename(done[-1])}"))
    newest = committed(ckdir)
    final = run_processes.run(common + ["--out", killed], capture_output=True, text=True, timeout=600)
    with open(os.path.join(work, "final.log"), "w") as log:
        log.write(final.stdout + final.stderr)
    if final.returncode:
        fail(f"the final run failed (log {work}/final.log)")
    if newest and f"resuming from {newest[-1]} " not in final.stdout:
        fail(f"the final run did not resume from {newest[-1]} (log {work}/final.log)")
    diff = trace_difference(straight, killed)
    if diff:
        fail(diff)
    last = os.path.basename(committed(os.path.join(straight, "checkpoints"))[-1])
    for stage in sorted(glob.glob(os.path.join(straight, "checkpoints", last, "stage-*.h5"))):
        other = os.path.join(ckdir, last, os.path.basename(stage))
        if datasets(stage) != datasets(other):
            fail(f"{other}: not the straight run's final state")
    print(f"kill_during_checkpoint: {rounds} round(s) (AVTRAIN_KILL_ROUNDS), {in_write} killed inside a write, "
          f"{resumed_checked} seen resuming from the newest committed checkpoint, the final run too; {anew} started "
          f"anew after a round let the run finish; "
          f"the run ended with the straight run's traces and final checkpoint {last}, bit for bit; ok")


if __name__ == "__main__":
    main()
