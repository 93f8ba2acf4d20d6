#!/usr/bin/python3
"""The watchdog ends a job that stops making progress, with a line naming what each rank waits for.

usage: check_watchdog.py WORK stop|stall VICTIM WATCHDOG_S -- MPIRUN... AVTRAIN DECK [OPTIONS...]

stop:  once the run has trained a few steps, rank VICTIM is stopped with SIGSTOP. Every other rank's
       watchdog must print "avtrain: rank R: watchdog: no progress for ... in: PHASE", at least one
       of them naming the silent rank (a peer "from/to rank V", or a group whose ranks include V: a
       rank may wait on another that waits on the silent one), and the job must end with exit 124
       within the bound the README documents: WATCHDOG_S + 8 s of the stop (the watchdog's 0.5 s
       poll and the step in progress, the 5 s it leaves the other ranks for their lines, the
       launcher's teardown). Every rank of the world (run.json's layout.world_size) but the stopped
       one must print its line.
stall: the run has --debug.stall_reader VICTIM:5: rank VICTIM's line must say it waits for data.
Every process of the run is gone at the end (a stopped rank is killed by the launcher), and rank 0
has written 124 to AVTRAIN_EXIT_STATUS_FILE (a job script reports it where the launcher cannot).
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
from run_processes import Session, avtrain_ranks  # noqa: E402

NO_PROGRESS = 124
BOUND_AFTER_WATCHDOG_S = 8.0  # README: the job ends within debug.watchdog_s + 8 s of the stall


def fail(message):
    print(f"check_watchdog: {message}")
    sys.exit(1)


def names(line, victim):
    """Whether a watchdog line names rank `victim`: a peer, or a group that includes it."""
    if re.search(rf"\b(from|to) rank {victim}\b", line):
        return True
    for group in re.findall(r"ranks: ([0-9, .]+)\)", line):
        if ".." in group:
            lo, hi = (int(x) for x in group.split(".."))
            if lo <= victim <= hi:
                return True
        elif victim in [int(x) for x in group.split(",")]:
            return True
    return False


def watch(p, mode, out, victim, watchdog_s, log_path):
    """Stops the victim (stop) and waits for the job's end: (exit code or None, seconds since the stop)."""
    t_stop = time.monotonic()
    if mode == "stop":
        trace = os.path.join(out, "trace.csv")
        while p.poll() is None:
            if os.path.exists(trace) and sum(1 for _ in open(trace)) > 4:
                break
            time.sleep(0.01)
        pids = [pid for pid, rank in avtrain_ranks(p.pid).items() if rank == victim]
        if p.poll() is not None or not pids:
            fail(f"the run ended (or rank {victim} was not found) before it could be stopped; log {log_path}")
        os.kill(pids[0], signal.SIGSTOP)
        t_stop = time.monotonic()
    try:
        code = p.wait(timeout=watchdog_s + 60)
    except subprocess.TimeoutExpired:
        code = None
    return code, time.monotonic() - t_stop


def main():
    argv = sys.argv[1:]
    if len(argv) < 6 or argv[4] != "--" or argv[1] not in ("stop", "stall"):
        sys.exit(__doc__)
    work, mode, victim, watchdog_s, command = argv[0], argv[1], int(argv[2]), float(argv[3]), argv[5:]
    os.makedirs(work, exist_ok=True)
    out = os.path.join(work, mode)
    shutil.rmtree(out, ignore_errors=True)
    log_path = os.path.join(work, f"{mode}.log")
    extra = ["--out", out, "--overwrite", "--resume", "none", "--debug.watchdog_s", str(watchdog_s)]
    if mode == "stall":
        extra += ["--debug.stall_reader", f"{victim}:5"]
    status_file = os.path.join(work, f"{mode}.exit-status")  # rank 0's own code, for a job script
    if os.path.exists(status_file):
        os.remove(status_file)
    with open(log_path, "w") as log:
        # Nothing of the run may be left, whatever happened: leaving the block kills its session.
        with Session(command + extra, stdout=log, stderr=subprocess.STDOUT,
                     env=dict(os.environ, AVTRAIN_EXIT_STATUS_FILE=status_file)) as p:
            code, took = watch(p, mode, out, victim, watchdog_s, log_path)
    if code is None:
        fail(f"the job still ran {watchdog_s + 60:.0f} s after the {mode}; log {log_path}")
    text = open(log_path, errors="replace").read()
    lines = re.findall(r"avtrain: rank (\d+): (watchdog: no progress .*)", text)
    print("\n".join(f"  rank {r}: {l}" for r, l in lines))
    if code != NO_PROGRESS:
        fail(f"the job ended with {code}, not {NO_PROGRESS}; log {log_path}")
    # Rank 0's watchdog (or its reader's, stalled) fired: it wrote 124 for a launcher that may not say it.
    rank0 = open(status_file).read().strip() if os.path.exists(status_file) else None
    if rank0 != str(NO_PROGRESS):
        fail(f"rank 0 wrote {rank0!r} to AVTRAIN_EXIT_STATUS_FILE, not {NO_PROGRESS}")
    if mode == "stop":
        if took > watchdog_s + BOUND_AFTER_WATCHDOG_S:
            fail(f"the job ended {took:.1f} s after the stop, past watchdog {watchdog_s:.0f} s + "
                 f"{BOUND_AFTER_WATCHDOG_S:.0f} s")
        with open(os.path.join(out, "run.json")) as f:
            world = json.load(f)["layout"]["world_size"]
        waiting = {int(r): l for r, l in lines if int(r) != victim}
        silent = [r for r in range(world) if r != victim and r not in waiting]
        if not waiting or silent:
            fail(f"ranks {silent or 'all'} printed no watchdog line")
        # A rank may wait on another that waits on the silent one: at least one line names it.
        naming = [r for r, l in waiting.items() if names(l, victim)]
        if not naming:
            fail(f"no rank's line names rank {victim}")
        print(f"check_watchdog: rank {victim} stopped: {len(waiting)} other rank(s) named what they wait for, "
              f"rank(s) {sorted(naming)} naming rank {victim}; the job ended with {code} {took:.1f} s later "
              f"(watchdog {watchdog_s:.0f} s); ok")
    else:
        mine = [l for r, l in lines if int(r) == victim]
        if not mine or "waiting for data" not in mine[0]:
            fail(f"rank {victim}'s watchdog line does not say it waits for data: {mine}")
        print(f"check_watchdog: rank {victim}'s reader stalled: its line says so, the job ended with {code}; ok")


if __name__ == "__main__":
    main()
