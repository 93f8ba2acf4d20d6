#!/usr/bin/python3
"""`sbatch -N 2 jobscripts/slurm-avtrain.sbatch` on a Slurm of two namespace nodes
(tests/nodes/namespace_slurm.py on tests/nodes/netns_nodes.py).

usage: check_slurm_nodes.py WORK ROOT AVTRAIN run|requeue -- DECK [OPTIONS...]

Submits the job script with -N 2 --ntasks-per-node=2 --cpus-per-task=1 and DECK OPTIONS --out WORK/job
(srun --mpi=pmix starts the 4 ranks: 2 on each node's slurmd).
  run      a source build named by AVTRAIN_BIN=AVTRAIN, with the user's own --threads 2: the job must
           complete, with 2 avtrain processes seen in each node's namespace; its log must name that
           program and 2 threads from the command line, and run.json train.threads 2 (not Slurm's 1).
  requeue  ROOT's build/cpu (AVTRAIN_ROOT), Slurm's 1 thread a task; once 6 steps are traced, USR1 to the batch script (scancel --batch --signal=USR1, what
           --signal=B:USR1@120 sends before a time limit): the ranks must checkpoint and exit 75, the
           job requeue itself, start again on both nodes (RestartCnt 1) after Slurm's hold, resume
           from that checkpoint and complete; run.json records both starts.
Compare WORK/job's traces with a straight run (tests/mpi/check_layouts.py identical). On failure the
daemons' logs are printed; Slurm, then the nodes, are torn down whatever happened.
"""
import json
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from namespace_slurm import NodesSlurm  # noqa: E402
from netns_nodes import Nodes, skip_unless_possible  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
import run_processes  # noqa: E402

SIGNAL_AFTER = 6


def main():
    argv = sys.argv[1:]
    if len(argv) < 6 or argv[4] != "--" or argv[3] not in ("run", "requeue"):
        sys.exit(__doc__)
    work, root, program, mode = os.path.abspath(argv[0]), os.path.abspath(argv[1]), os.path.abspath(argv[2]), argv[3]
    deck = argv[5:] + (["--threads", "2"] if mode == "run" else [])
    skip_unless_possible()
    if not shutil.which("slurmctld") or not shutil.which("slurmd") or not shutil.which("munged"):
        print("check_slurm_nodes: skipped: slurmctld, slurmd or munge not installed (jobscripts/install-deps.sh)")
        sys.exit(77)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    out = os.path.join(work, "job")
    with Nodes(2, work) as nodes, NodesSlurm(nodes) as slurm:
        def fail(message):
            print(f"check_slurm_nodes: {message}")
            print(slurm.logs())
            sys.exit(1)

        build = "AVTRAIN_BIN=" + program if mode == "run" else "AVTRAIN_ROOT=" + root
        export = ("--export=ALL," + build + ",OMPI_MCA_btl_vader_single_copy_mechanism=none,"
                  "OMPI_MCA_btl_tcp_if_include=10.213.0.0/24")
        submit = slurm.run(["sbatch", "--parsable", "-N", "2", "--ntasks-per-node=2", "--cpus-per-task=1", "--time=10",
                            f"--output={work}/job-%j.out", f"--chdir={work}", export,
                            os.path.join(root, "jobscripts", "slurm-avtrain.sbatch")] + deck + ["--out", out])
        if submit.returncode:
            fail(f"sbatch failed: {submit.stderr}")
        job = submit.stdout.strip().split(";")[0]
        print(f"check_slurm_nodes: job {job}: sbatch -N 2 --ntasks-per-node=2 jobscripts/slurm-avtrain.sbatch "
              + " ".join(deck + ["--out", out]))
        seen = {0: [0, 0], 1: [0, 0]}  # per start: avtrain processes seen on node0, node1
        signalled = False
        deadline = time.monotonic() + 300
        while True:
            state = slurm.job(job)
            start = int(state.get("Restarts", "0"))
            if start in seen:
                for i in (0, 1):
                    seen[start][i] = max(seen[start][i], len(nodes.processes_named(i, "avtrain")))
            if mode == "requeue" and not signalled and run_processes.csv_rows(os.path.join(out, "trace.csv")) >= SIGNAL_AFTER:
                slurm.run(["scancel", "--batch", "--signal=USR1", job], check=True)
                signalled = True
            if state.get("JobState") in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"):
                break
            if time.monotonic() > deadline:
                fail(f"job {job} did not end in 300 s: {state.get('JobState')} ({state.get('Reason')})")
            time.sleep(0.1)
        text = open(os.path.join(work, f"job-{job}.out"), errors="replace").read()
        print(text[-3000:])
        if state.get("JobState") != "COMPLETED":
            fail(f"job {job} ended {state.get('JobState')} ({state.get('ExitCode')})")
        if state.get("NodeList") != "node[0-1]":
            fail(f"job {job} ran on {state.get('NodeList')}, not node[0-1]")
        starts = 2 if mode == "requeue" else 1
        if [seen[s] for s in range(starts)] != [[2, 2]] * starts:
            fail(f"avtrain processes seen on node0, node1 per start: {[seen[s] for s in range(starts)]}, not 2 and 2")
        if mode == "requeue":
            if state.get("Restarts") != "1":
                fail(f"job {job} completed after {state.get('Restarts')} restart(s), not 1")
            for needed in ["(SIGUSR1), with a checkpoint", "exit 75", f"requeueing job {job}", "resuming from"]:
                if needed not in text:
                    fail(f"the job's output lacks '{needed}'")
            recorded = json.load(open(os.path.join(out, "run.json")))["starts"]
            if [(s.get("SLURM_JOB_ID"), s.get("SLURM_RESTART_COUNT", "0")) for s in recorded] != [(job, "0"), (job, "1")]:
                fail(f"run.json's starts do not record the job and its restart: {recorded}")
            print(f"check_slurm_nodes: job {job} on node0 and node1 (2 ranks each, both starts): USR1 after step "
                  f"{recorded[1]['step']}, checkpointed, requeued, started again on both nodes, resumed and "
                  f"completed; ok")
        else:
            said = f"avtrain job: {program} (AVTRAIN_BIN), 2 thread(s) a rank (the command line's --threads)"
            if said not in text:
                fail(f"the job's output lacks '{said}'")
            threads = json.load(open(os.path.join(out, "run.json")))["config"].get("train.threads")
            if threads != 2:
                fail(f"run.json says train.threads {threads}: the user's --threads 2 did not win over Slurm's 1")
            print(f"check_slurm_nodes: job {job} ran {program} (AVTRAIN_BIN, a source build) on node0 and node1, "
                  "2 ranks each with the user's 2 threads, and completed; ok")


if __name__ == "__main__":
    main()
