#!/usr/bin/python3
"""SIGKILL while checkpoints are being written, again and again: every committed checkpoint stays
complete, --resume auto always finds one (or starts afresh when none was committed yet), and the run
ends with the state of the run that was never killed, bit for bit.

usage: kill_during_checkpoint.py WORK -- [MPIRUN ...] AVTRAIN DECK [OPTIONS...]

Rounds: AVTRAIN_KILL_ROUNDS (default 3; CI runs the default, set more on demand, e.g. 20). Each
round starts the run (a checkpoint every step, --resume auto: a start killed before its first commit
starts again) and kills its whole session with SIGKILL. The rounds take the moments in turn:
  copy        --debug.hold_checkpoint copy:S: the checkpoint's directory made, the state not copied out;
  stage_file  --debug.hold_checkpoint stage_file:S: its stage file written whole as .tmp, not renamed;
  commit      --debug.hold_checkpoint commit:S: every stage file written, no committed marker;
  random      no hold: a kill at a random time (0.5-4 s), wherever it lands.
A held round waits for the run's line saying it holds step-S (S a step or three past the newest
committed checkpoint), checks what the disk shows at that point, and kills: the kill is inside that
write for certain, and the round fails if the hold is not reached. After each kill every committed
checkpoint is read whole with h5py and step-S is not among them. Then the run is finished without
kills and compared with a straight run: trace.csv in every column but the measurements, layers.csv,
and the final checkpoint dataset by dataset. Prints how many rounds ran and how many kills landed
inside a write (every held round's, at least one). Exit 0 when every check holds.
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
from same_run import checkpoint_difference, trace_difference


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
    in_write = held = resumed_checked = anew = 0
    moments = ["stage_file", "commit", "copy", "random"]
    last_step = step_of(final_ck)
    for r in range(rounds):
        if committed(ckdir) and step_of(committed(ckdir)[-1]) >= last_step - 1:
            shutil.rmtree(killed)  # too near the end to hold a later write: start another run
            anew += 1
        before = committed(ckdir)
        known_starts = len(starts(killed))
        moment = moments[r % len(moments)]
        target = (step_of(before[-1]) if before else 0) + rng.randrange(1, 4)
        target = min(target, last_step - 1)
        hold = [] if moment == "random" else ["--debug.hold_checkpoint", f"{moment}:{target}"]
        log_path = os.path.join(work, f"round-{r}.log")
        log = open(log_path, "w")
        p = run_processes.Session(common + ["--out", killed] + hold, stdout=log, stderr=subprocess.STDOUT)
        target_dir = os.path.join(ckdir, f"step-{target:07d}")
        if hold:
            line = f"holding {target_dir} at {moment} until killed"
            deadline = time.monotonic() + 120
            while p.poll() is None and time.monotonic() < deadline and line not in open(log_path).read():
                time.sleep(0.005)
            if line not in open(log_path).read():
                p.kill_session()
                fail(f"round {r + 1}: the run never held step-{target:07d} at {moment} (exit {p.poll()}; "
                     f"log {log_path})")
            # What the disk shows at the hold.
            stage_files = glob.glob(os.path.join(target_dir, "stage-*.h5"))
            shown = {"copy": not stage_files and not glob.glob(os.path.join(target_dir, "stage-*.h5.tmp")),
                     "stage_file": bool(glob.glob(os.path.join(target_dir, "stage-*.h5.tmp"))) and not stage_files,
                     "commit": bool(stage_files)}[moment]
            if not shown or os.path.exists(os.path.join(target_dir, "committed")):
                p.kill_session()
                fail(f"round {r + 1}: held at {moment}, but {target_dir} holds {sorted(os.listdir(target_dir))}")
        else:
            time.sleep(rng.uniform(0.5, 4.0))
        if p.poll() is None:
            writing = bool(in_flight(ckdir))
            p.kill_session()
            in_write += writing
            held += bool(hold)
            if hold and not writing:
                fail(f"round {r + 1}: held at {moment}, yet no checkpoint was in flight at the kill")
            what = (f"killed inside the write of step-{target:07d}, held at {moment}" if hold else
                    f"killed at a random time, {'inside a write' if writing else 'between writes'}")
        else:
            if hold:
                fail(f"round {r + 1}: the run ended while held (exit {p.returncode}; log {log_path})")
            what = f"finished before the random kill (exit {p.returncode})"
            p.kill_session()  # whatever the run left
        log.close()
        # A start that got as far as run.json must have resumed from the newest committed checkpoint.
        now = starts(killed)
        if before and len(now) > known_starts:
            if now[-1]["step"] != step_of(before[-1]):
                fail(f"round {r + 1} started at step {now[-1]['step']}, not from {before[-1]}")
            resumed_checked += 1
        done = committed(ckdir)
        if hold and any(step_of(c) == target for c in done):
            fail(f"round {r + 1}: step-{target:07d} is committed although its write was killed at {moment}")
        total = sum(read_whole(c) for c in done)
        print(f"round {r + 1}/{rounds}: {what}; {len(done)} committed checkpoint(s), {total} datasets all readable"
              + ("" if not done else f", newest {os.path.basename(done[-1])}"))
    if rounds >= 1 and (in_write < held or in_write < 1):
        fail(f"{in_write} kill(s) landed inside a write ({held} held): at least every held one must")
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
    diff, _ = checkpoint_difference(os.path.join(straight, "checkpoints", last), os.path.join(ckdir, last))
    if diff:
        fail(f"not the straight run's final state: {diff}")
    print(f"kill_during_checkpoint: {rounds} round(s) (AVTRAIN_KILL_ROUNDS), {in_write} killed inside a write "
          f"({held} of them held there), "
          f"{resumed_checked} seen resuming from the newest committed checkpoint, the final run too; {anew} started "
          f"anew after a round let the run finish; "
          f"the run ended with the straight run's traces and final checkpoint {last}, bit for bit; ok")


if __name__ == "__main__":
    main()
