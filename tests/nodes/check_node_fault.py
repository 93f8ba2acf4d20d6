#!/usr/bin/python3
"""A node dies or loses its link mid-run: the job ends within the watchdog's bound, and resumes from
its last committed checkpoint on the node that is left, at another layout.

usage: check_node_fault.py WORK kill|link-down WATCHDOG_S -- AVTRAIN DECK [OPTIONS...] -- [FAULT_RUN...] -- [RESUME...]

Two namespace nodes (tests/nodes/netns_nodes.py), two slots each. The run: `mpirun --hostfile` of 4
ranks, AVTRAIN DECK OPTIONS FAULT_RUN --debug.watchdog_s WATCHDOG_S --out WORK/run, from node0. Once
checkpoint step 8 is committed and step 9 is traced, node1 fails:
  kill       every avtrain process of node1 (found in its network namespace by `ip netns pids`) is
             sent SIGKILL. node1's orted sees its ranks die and tells mpirun, which ends the job and
             names the rank and the node ("mpirun noticed that process rank R ... on node node1").
  link-down  `ip link set eth0 down` in node1's namespace: nothing is told to anyone. Each rank of
             node0 must print its watchdog line, "watchdog: no progress for ... in: PHASE", at least
             one naming a rank of node1 (a peer, or a group holding it); node1's ranks end by their
             own watchdog too. mpirun learns that node1 is gone from its ssh session to node1's
             orted (ServerAlive 2 s x 3 in the harness's ssh config) and ends, 255; rank 0 must have
             written its 124 to AVTRAIN_EXIT_STATUS_FILE before that (the job script reports it).
Either way: every avtrain process of both nodes and mpirun end within WATCHDOG_S + 8 s of the fault
(the README's bound for a stopped rank), with a non-zero exit; every committed checkpoint is whole
(h5py reads every dataset of its files) and the newest is step 8 or later. Then node0 alone runs
`mpirun -n 2` (its 2 slots) of AVTRAIN DECK OPTIONS RESUME --resume auto --out WORK/run: it must
resume from that checkpoint and finish (compare its traces with a straight run of that layout:
tests/mpi/check_layouts.py same). The nodes are torn down at the end, whatever happened.
"""
import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import h5py

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from netns_nodes import Nodes, skip_unless_possible  # noqa: E402

BOUND_AFTER_WATCHDOG_S = 8.0  # README: the job ends within debug.watchdog_s + 8 s of the stall
NO_PROGRESS = 124  # the watchdog's exit
NODE1_RANKS = (2, 3)  # ranks by slot: node0 holds 0, 1 and node1 2, 3


def fail(message):
    print(f"check_node_fault: {message}")
    sys.exit(1)


def names_node1(line):
    """Whether a watchdog line names a rank of node1: a peer, or a group that includes one."""
    if any(re.search(rf"\b(from|to) rank {r}\b", line) for r in NODE1_RANKS):
        return True
    for group in re.findall(r"ranks: ([0-9, .]+)\)", line):
        members = range(int(group.split("..")[0]), int(group.split("..")[1]) + 1) if ".." in group else \
            [int(x) for x in group.split(",")]
        if any(r in members for r in NODE1_RANKS):
            return True
    return False


def committed(out):
    return sorted(os.path.dirname(c) for c in glob.glob(os.path.join(out, "checkpoints", "step-*", "committed")))


def whole(checkpoint):
    """Reads every dataset of every file of a checkpoint; the count, or raises."""
    count = 0
    for path in sorted(glob.glob(os.path.join(checkpoint, "*.h5"))):
        with h5py.File(path, "r") as f:
            def read(name, obj):
                nonlocal count
                if isinstance(obj, h5py.Dataset):
                    obj[()]
                    count += 1
            f.visititems(read)
    return count


def main():
    argv = sys.argv[1:]
    if argv.count("--") != 3 or argv.index("--") != 3 or argv[1] not in ("kill", "link-down"):
        sys.exit(__doc__)
    work, mode, watchdog_s = argv[0], argv[1], float(argv[2])
    cuts = [i for i, a in enumerate(argv) if a == "--"]
    common, fault_run, resume = argv[cuts[0] + 1:cuts[1]], argv[cuts[1] + 1:cuts[2]], argv[cuts[2] + 1:]
    skip_unless_possible()
    out = os.path.join(work, "run")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    log_path, resume_log = os.path.join(work, "fault.log"), os.path.join(work, "resume.log")
    bound = watchdog_s + BOUND_AFTER_WATCHDOG_S
    with Nodes(2, work, slots=2, server_alive=(2, 3)) as nodes:
        status_file = os.path.join(work, "exit-status")  # rank 0's own exit code (it runs on node0)
        os.environ["AVTRAIN_EXIT_STATUS_FILE"] = status_file
        mpirun = ["mpirun", *nodes.mpirun_args(), "-x", "AVTRAIN_EXIT_STATUS_FILE", "-n", "4"] + common + fault_run + [
            "--out", out, "--overwrite", "--resume", "none", "--debug.watchdog_s", f"{watchdog_s:g}"]
        print("check_node_fault: " + " ".join(mpirun))
        with open(log_path, "w") as log:
            p = subprocess.Popen(nodes.enter(0) + mpirun, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            try:
                trace = os.path.join(out, "trace.csv")
                deadline = time.monotonic() + 300
                while p.poll() is None and time.monotonic() < deadline:
                    if (os.path.exists(os.path.join(out, "checkpoints", "step-0000008", "committed"))
                            and os.path.exists(trace) and sum(1 for _ in open(trace)) > 9):
                        break
                    time.sleep(0.01)
                if p.poll() is not None or time.monotonic() >= deadline:
                    fail(f"the run ended (exit {p.poll()}) or took 300 s before step 9; log {log_path}")
                victims = nodes.processes_named(1, "avtrain")
                if mode == "kill":
                    if len(victims) != 2:
                        fail(f"node1 holds avtrain processes {victims}, not 2")
                    for pid in victims:
                        os.kill(pid, signal.SIGKILL)
                else:
                    nodes.link(1, "down")
                t_fault = time.monotonic()
                ended = {}  # what ended when, seconds after the fault
                while time.monotonic() - t_fault < bound + 30 and len(ended) < 3:
                    if "mpirun" not in ended and p.poll() is not None:
                        ended["mpirun"] = time.monotonic() - t_fault
                    for i in (0, 1):
                        if f"node{i} ranks" not in ended and not nodes.processes_named(i, "avtrain"):
                            ended[f"node{i} ranks"] = time.monotonic() - t_fault
                    time.sleep(0.02)
                code = p.poll()
            finally:
                if p.poll() is None:
                    p.kill()
                p.wait()
        text = open(log_path, errors="replace").read()
        print(f"check_node_fault: {mode} of node1 (its ranks {list(NODE1_RANKS)}): "
              + ", ".join(f"{k} ended {v:.1f} s later" for k, v in ended.items()) + f"; mpirun exited {code}")
        late = [k for k in ("mpirun", "node0 ranks", "node1 ranks") if ended.get(k, 1e9) > bound]
        if late:
            fail(f"{', '.join(late)} still ran {bound:.0f} s (watchdog {watchdog_s:g} s + "
                 f"{BOUND_AFTER_WATCHDOG_S:g} s) after the {mode}; log {log_path}")
        if code == 0:
            fail(f"mpirun exited 0 after the {mode}; log {log_path}")
        rank0 = open(status_file).read().strip() if os.path.exists(status_file) else None
        del os.environ["AVTRAIN_EXIT_STATUS_FILE"]
        if mode == "link-down" and rank0 != str(NO_PROGRESS):
            fail(f"rank 0 wrote {rank0!r} to AVTRAIN_EXIT_STATUS_FILE, not {NO_PROGRESS} (its watchdog's exit)")
        print(f"  rank 0's exit code (AVTRAIN_EXIT_STATUS_FILE, what jobscripts/slurm-avtrain.sbatch reports): "
              + (rank0 or "none: the launcher ended it before its watchdog fired"))
        lines = re.findall(r"avtrain: rank (\d+): (watchdog: no progress .*)", text)
        for r, l in lines:
            print(f"  rank {r}: {l}")
        if mode == "kill":
            noticed = re.search(r"process rank (\d+) with PID \d+ on node (\S+) exited on signal (\d+)", text)
            if not noticed or int(noticed.group(1)) not in NODE1_RANKS or noticed.group(2) != "node1":
                fail(f"mpirun's output does not name a rank of node1 that died; log {log_path}")
            print(f"  mpirun: {noticed.group(0)}")
        else:
            node0 = {int(r): l for r, l in lines if int(r) not in NODE1_RANKS}
            if sorted(node0) != [0, 1]:
                fail(f"node0's ranks 0, 1 did not both print a watchdog line (got {sorted(node0)}); log {log_path}")
            if not any(names_node1(l) and " in: " in l for l in node0.values()):
                fail(f"no watchdog line of node0 names a phase and a rank of node1; log {log_path}")
        checkpoints = committed(out)
        if not checkpoints or int(os.path.basename(checkpoints[-1])[len("step-"):]) < 8:
            fail(f"no committed checkpoint at step 8 or later: {checkpoints}")
        for c in checkpoints:
            print(f"  {c}: committed, {whole(c)} datasets read whole")
        # The job again, on the node that is left: 2 ranks there, another layout.
        again = ["mpirun", "-n", "2", "--bind-to", "none", "--mca", "btl_vader_single_copy_mechanism", "none"] + (
            ["--allow-run-as-root"] if os.geteuid() == 0 else []) + common + resume + ["--out", out, "--resume", "auto"]
        print("check_node_fault: on node0: " + " ".join(again))
        with open(resume_log, "w") as log:
            done = nodes.run(0, again, check=False, timeout=600, stdout=log)
    text = open(resume_log, errors="replace").read()
    print(text[-1500:])
    if done.returncode != 0:
        fail(f"the resume on node0 exited {done.returncode}; log {resume_log}")
    if f"resuming from {checkpoints[-1]}" not in text:
        fail(f"the resume on node0 did not start from {checkpoints[-1]}; log {resume_log}")
    print(f"check_node_fault: the job ended within {bound:.0f} s of the {mode} of node1, its last committed "
          f"checkpoint {os.path.basename(checkpoints[-1])} whole, and node0 alone resumed from it; ok")


if __name__ == "__main__":
    main()
