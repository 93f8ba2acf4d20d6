#!/usr/bin/python3
"""A run that ends on purpose before its last step: every rank exits 75 ("stopped early, checkpoint
committed, resume me") with a checkpoint of the last step it trained, and the same command then
finishes the run with the traces of a run that was never stopped.

usage: check_stop.py WORK usr1|term|int|budget|twice -- MPIRUN... AVTRAIN DECK [OPTIONS...]

usr1:   SIGUSR1 to mpirun (which forwards it) at a random step (AVTRAIN_STOP_SEED, default 1);
        each rank runs under record_exit.py, so every rank's exit code is seen.
term:   SIGTERM to every rank at a random step, as Slurm signals every task of a step at a time
        limit without --signal; the same checks.
int:    SIGINT to every rank (Ctrl-C); the same checks.
budget: --max-minutes 0.25 on a run far longer than that: it must stop with its checkpoint (mpirun
        exits 75) before the 15 s run out, after training at least one step, and not early: rank
        0's stop line must account for the time (used + what the rest had to cover >= 15 s, and
        less than that plus a step and 0.5 s: the step before did not qualify), with a step term
        that the trace's step times bound and a checkpoint term within the documented estimate.
slurm-end: the same budget from SLURM_JOB_END_TIME (now + 15 s, whole seconds) without --max-minutes,
        as a Slurm job's ranks see it.
twice:  a single rank (started without mpirun) whose data reader stalls at step 3, so that only a
        signal can end it: a SIGTERM, and another at once (the same request by a second route, as
        Slurm and srun or mpirun deliver it), must not end it within 2.5 s; a SIGTERM 2 s or more
        after the first must end it at once with 143 (128 + SIGTERM).
"""
import glob
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time

import run_processes
from same_run import rows, trace_difference

STOPPED = 75
BUDGETS = ("budget", "slurm-end")  # the modes that stop on a time budget
here = os.path.dirname(os.path.abspath(__file__))


def fail(message):
    print(f"check_stop: {message}")
    sys.exit(1)


def committed(out):
    return sorted(d for d in glob.glob(os.path.join(out, "checkpoints", "step-*"))
                  if os.path.isfile(os.path.join(d, "committed")))


def trained_rows(out):
    try:
        with open(os.path.join(out, "trace.csv")) as f:
            return max(0, sum(1 for _ in f) - 1)
    except FileNotFoundError:
        return 0


def pending(pid):
    """The signals pending for a process (its own and its threads' shared set), as a bit mask."""
    mask = 0
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith(("SigPnd:", "ShdPnd:")):
                mask |= int(line.split()[1], 16)
    except FileNotFoundError:
        pass
    return mask


def twice(work, command):
    shutil.rmtree(work, ignore_errors=True)
    out = os.path.join(work, "twice")
    stalled = command + ["--out", out, "--debug.stall_reader", "0:3"]
    with run_processes.Session(stalled, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) as p:
        while p.poll() is None and trained_rows(out) < 3:
            time.sleep(0.005)

        def term():
            p.send_signal(signal.SIGTERM)
            # Two pending SIGTERMs would be one: wait until this one has been delivered.
            while p.poll() is None and pending(p.pid) & (1 << (signal.SIGTERM - 1)):
                time.sleep(0.001)

        term()
        first = time.monotonic()
        term()  # the same request by another route
        time.sleep(2.5)
        if p.poll() is not None:
            fail(f"SIGTERM, and again at once: the run ended (exit {p.returncode}); it should wait for its "
                 f"stalled step")
        term()
        t0 = time.monotonic()
        code = p.wait(timeout=60)
    took = time.monotonic() - t0
    if code != 128 + signal.SIGTERM or took > 1.0:
        fail(f"a second SIGTERM {t0 - first:.1f} s after the first: exit {code} after {took:.2f} s, not "
             f"{128 + signal.SIGTERM} at once")
    print(f"check_stop: SIGTERM twice at once left the stalled run running; a SIGTERM {t0 - first:.1f} s after "
          f"the first ended it with {code} after {took:.2f} s; ok")


def budget_stop_accounts_for_the_time(text, stopped, budget_s, slack_s):
    """Rank 0's stop line: the budget was reached (not too late is checked by the caller's clock) and
    not long before (not too early)."""
    m = re.search(r"stopping after step (\d+) \((?:train\.max_minutes [0-9.]+|the Slurm job's end time): ([0-9.]+) s of ([0-9.]+) s used; the "
                  r"rest no longer covers 2 steps \(([0-9.]+) s\), the longest evaluation \(([0-9.]+) s\), a "
                  r"checkpoint \(([0-9.]+) s\) and ([0-9.]+) s\)", text)
    if not m:
        fail("no stop line accounting for the time budget in the log")
    used, deadline, steps, evaluation, checkpoint, spare = (float(x) for x in m.groups()[1:])
    margin = steps + evaluation + checkpoint + spare
    step_s = [float(r["step_ms"]) / 1000 for r in rows(os.path.join(stopped, "trace.csv"))]
    if abs(deadline - budget_s) > slack_s:
        fail(f"the stop line's budget is {deadline} s, not {budget_s}")
    # Each of the 5 terms and the deadline is printed to 0.01 s: their sum may round 0.03 s low.
    rounding = 0.03
    if used + margin < deadline - rounding:
        fail(f"stopped too early: {used} s used + {margin:.2f} s to cover < {deadline} s")
    if used + margin >= deadline + max(step_s) + 0.5:
        fail(f"stopped late: {used} s used + {margin:.2f} s to cover passed {deadline} s more than a step before")
    if steps > 2 * max(step_s) + 0.01:
        fail(f"the margin's 2 steps ({steps} s) exceed twice the longest step in trace.csv ({max(step_s)} s)")
    if spare != 5.0 or checkpoint > 10:
        fail(f"the margin's checkpoint ({checkpoint} s) or spare ({spare} s) is not the documented one")
    return f"{used:.2f} s used + {margin:.2f} s to cover (2 steps {steps}, evaluation {evaluation}, " \
           f"checkpoint {checkpoint}, 5 s) reached {deadline:g} s"


def main():
    argv = sys.argv[1:]
    modes = ("usr1", "term", "int", "budget", "slurm-end", "twice")
    if len(argv) < 4 or argv[2] != "--" or argv[1] not in modes:
        sys.exit(__doc__)
    if argv[1] == "twice":
        return twice(argv[0], argv[3:])
    work, mode, command = argv[0], argv[1], argv[3:]
    binary = next((i for i, a in enumerate(command) if os.path.basename(a) == "avtrain"), None)
    if binary is None:
        sys.exit("check_stop: no avtrain in the command")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    straight, stopped = os.path.join(work, "straight"), os.path.join(work, "stopped")
    exits = os.path.join(work, "exits")
    os.makedirs(exits)

    if mode not in BUDGETS:
        p = run_processes.run(command + ["--out", straight], capture_output=True, text=True, timeout=600)
        if p.returncode:
            fail(f"the straight run failed:\n{p.stdout}{p.stderr}")
        steps = len(rows(os.path.join(straight, "trace.csv")))
        at = random.Random(int(os.environ.get("AVTRAIN_STOP_SEED", "1"))).randrange(2, steps - 3)
        wrapped = command[:binary] + [sys.executable, os.path.join(here, "record_exit.py"), exits, "--"] + command[binary:]
        log = open(os.path.join(work, "stopped.log"), "w")
        # mpirun ends the other ranks once one exits non-zero: SIGTERM (on which a stopped rank exits
        # 75 at once), then SIGKILL a second later, which could catch a wrapper under load before it
        # writes the code down: here SIGKILL waits 3 s (and mpirun with it).
        with run_processes.Session(wrapped + ["--out", stopped], stdout=log, stderr=subprocess.STDOUT,
                                   env=dict(os.environ, OMPI_MCA_odls_base_sigkill_timeout="3")) as p:
            while p.poll() is None and trained_rows(stopped) < at:
                time.sleep(0.002)
            if p.poll() is not None:
                fail(f"the run ended before step {at} (exit {p.returncode}; log {work}/stopped.log)")
            if mode == "usr1":
                p.send_signal(signal.SIGUSR1)
                what = f"SIGUSR1 to mpirun after step {at}"
            else:
                sig = signal.SIGTERM if mode == "term" else signal.SIGINT
                ranks = list(run_processes.avtrain_ranks(p.pid))
                for pid in ranks:
                    os.kill(pid, sig)
                what = f"{signal.Signals(sig).name} to each of {len(ranks)} ranks after step {at}"
            code = p.wait(timeout=300)
    else:
        steps = None
        log = open(os.path.join(work, "stopped.log"), "w")
        t0 = time.monotonic()
        if mode == "budget":
            budget, env = ["--max-minutes", "0.25"], os.environ
            what = "--max-minutes 0.25"
        else:
            budget, env = [], dict(os.environ, SLURM_JOB_END_TIME=str(int(time.time()) + 15))
            what = f"SLURM_JOB_END_TIME {env['SLURM_JOB_END_TIME']} (15 s on)"
        p = run_processes.run(command + ["--out", stopped, "--steps", "100000"] + budget,
                              stdout=log, stderr=subprocess.STDOUT, timeout=300, env=env)
        code, took = p.returncode, time.monotonic() - t0
        if took > 15 + 3:
            fail(f"{what} ran {took:.1f} s, past its 15 s (with 3 s for starting mpirun)")
        what += f" (ended after {took:.1f} s)"
    log.close()
    text = open(os.path.join(work, "stopped.log")).read()
    if code != STOPPED:
        fail(f"{what}: mpirun exited {code}, not {STOPPED} (log {work}/stopped.log)")
    codes = {os.path.basename(f): open(f).read().strip() for f in glob.glob(os.path.join(exits, "exit.*"))}
    ranks = len(rows(os.path.join(stopped, "ranks.csv"))) // max(1, trained_rows(stopped))
    if mode not in BUDGETS and (len(codes) != ranks or set(codes.values()) != {str(STOPPED)}):
        fail(f"{what}: the ranks exited {codes}, not all {ranks} with {STOPPED}")
    done = trained_rows(stopped)
    if done < 1:
        fail(f"{what}: stopped before training a step")
    if mode not in BUDGETS and done > at + 3:
        fail(f"{what}: stopped after step {done}, more than 3 steps after the signal")
    ck = committed(stopped)
    if not ck or int(os.path.basename(ck[-1])[len("step-"):]) != done:
        fail(f"{what}: the newest committed checkpoint is {ck[-1:] or 'none'}, not that of step {done}, "
             f"the last in trace.csv")
    print(f"check_stop: {what}: {f'{len(codes)} ranks' if codes else 'mpirun'} exited {STOPPED} after step {done} with "
          f"{os.path.basename(ck[-1])} committed")

    if mode not in BUDGETS:
        p = run_processes.run(command + ["--out", stopped], capture_output=True, text=True, timeout=600)
        if p.returncode:
            fail(f"resuming failed:\n{p.stdout}{p.stderr}")
        if f"resuming from {ck[-1]} " not in p.stdout:
            fail(f"the resumed run did not start from {ck[-1]}:\n{p.stdout}")
        diff = trace_difference(straight, stopped)
        if diff:
            fail(diff)
        print(f"check_stop: resumed from {os.path.basename(ck[-1])}, ended with the straight run's "
              f"{steps} trace rows; ok")
    else:
        # SLURM_JOB_END_TIME is in whole seconds and counts from before the ranks start: 15 s on, within 2.
        account = budget_stop_accounts_for_the_time(text, stopped, 15.0, 0.0 if mode == "budget" else 2.0)
        print(f"check_stop: {account}; ok")


if __name__ == "__main__":
    main()
