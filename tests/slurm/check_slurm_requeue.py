#!/usr/bin/python3
"""A Slurm job that survives its time limit, against a real one-node Slurm started here.

Starts munged (as the munge user), slurmctld and slurmd from Debian's packages in a directory of
their own (its own ports, no systemd, no cgroups; a fresh state directory each time), submits
jobscripts/slurm-avtrain.sbatch with the CI deck on 2 tasks, and once the run has trained some steps
delivers what Slurm sends before a time limit (scancel --batch --signal=USR1). The job must
checkpoint (its ranks exit 75), requeue itself, start again (RestartCnt 1), resume from that
checkpoint and finish with the traces of a run that was never interrupted; run.json must record both
starts with SLURM_JOB_ID and SLURM_RESTART_COUNT.

The requeued job takes the path it takes on a cluster: Slurm holds it until the requeue + cred_expire
+ 1 s (slurmd revokes the job's old credential at the requeue and refuses a launch credential of the
same job stamped in or before that second), then its scheduler starts it. Nothing here moves its
start time; the test's Slurm has a short cred_expire (CRED_EXPIRE_S) and checks that the hold held.
On failure it prints the daemons' logs. The daemons are stopped by process id, and whatever process
of this Slurm is left (a job step, a rank) is killed, whatever happens.

usage: check_slurm_requeue.py WORK ROOT AVTRAIN SHARDS [MODE]
       check_slurm_requeue.py check WORK time-limit|time-limit-mpirun
  usr1               (the default) USR1 to the batch script after 30 steps, as --signal=B:USR1@120
                     sends it; the job completes with the uninterrupted run's traces
  time-limits        two jobs of 1 minute side by side on the one Slurm (its node offers 4 CPUs), each
                     with no USR1 before its limit, brought forward once both have trained a step;
                     their output, --out and end state (state.json) under WORK/time-limit and
                     WORK/time-limit-mpirun; fails when a job does not end.
                     `check WORK JOB` then checks what that job left:
    time-limit         Slurm's SIGTERM to every process of the job (the ranks get it from slurmstepd
                       and again from srun) must stop the ranks with a checkpoint of their last step
                       (75); the job script, sent SIGTERM first, must not requeue the job (as after
                       scancel or pre-emption) and must say so
    time-limit-mpirun  the same with the ranks started by mpirun (the GPU bundle's launcher, here
                       AVTRAIN_BUNDLE pointing at this machine's mpirun and AVTRAIN): mpirun, sent
                       SIGTERM itself, exits 1; the job script must take rank 0's 75
  launch-fails       srun cannot start the ranks (PMIx's directory for the step exists already) and
                     exits 0: the job script must fail the job, saying the ranks did not run

The time-limit jobs' wait is Slurm's: slurmctld checks time limits every 30 s (PERIODIC_TIMEOUT,
not configurable), so a job of --time=1 started a few seconds after slurmctld ends about 90 s after
it. So both jobs share one Slurm, and once both have trained a step their end is brought forward to
that moment (scontrol update EndTime, as an administrator shortens a running job): the same check
ends them as it ends any job past its end time (TIMEOUT, "DUE TO TIME LIMIT", SIGTERM to every
process, KillWait), at most 30 s later. Side by side each job's ranks get half the cores: they train
fewer steps, which nothing here counts.
"""
import datetime
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
import run_processes  # noqa: E402
from same_run import trace_difference  # noqa: E402

MODES = ("usr1", "time-limits", "launch-fails")
TIME_LIMIT_JOBS = ("time-limit", "time-limit-mpirun")
# time-limits: the run outlasts its minute (and Slurm's check of it, every 30 s).
STEPS = {"usr1": 300, "time-limits": 100000, "launch-fails": 300}
SIGNAL_AFTER = 30
CRED_EXPIRE_S = 10  # Slurm's default is 120: a requeued job waits that long + 1 s, then a scheduler pass
slurm_logs = None  # the running Slurm's log directory, printed on failure


def fail(message):
    print(f"check_slurm_requeue: {message}")
    if slurm_logs:
        for name in ("slurmctld.log", "slurmd.log"):
            try:
                lines = open(os.path.join(slurm_logs, name), errors="replace").read().splitlines()
            except FileNotFoundError:
                continue
            print(f"--- the last {min(80, len(lines))} lines of {slurm_logs}/{name}:")
            print("\n".join(lines[-80:]))
    sys.exit(1)


def free_port():
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


class OneNodeSlurm:
    """munged (its key and socket in a directory of its own under /tmp), slurmctld and slurmd under
    WORK/slurm; stop() ends them by process id. The node offers at least 4 CPUs (slurmd takes the
    configured count: config_overrides), room for the two time-limit jobs of 2 tasks side by side.
    The main scheduler passes over pending jobs every second (sched_interval=1; 60 s by default), so a
    requeued job starts once its hold is over, not up to a minute later: the hold is Slurm's own
    (EligibleTime), which no scheduler pass moves, and the test checks it."""

    def __init__(self, work):
        self.dir = os.path.join(work, "slurm")
        shutil.rmtree(self.dir, ignore_errors=True)
        self.pids = []
        munge = pwd.getpwnam("munge")
        # munged runs as the munge user, who may not reach WORK (a checkout under /root, mode 700).
        mdir = self.munge_dir = tempfile.mkdtemp(prefix="avtrain-munge-")
        for d in ("state", "spool", "log", "tmp"):
            os.makedirs(os.path.join(self.dir, d))
        with open(os.path.join(mdir, "key"), "wb") as f:
            f.write(os.urandom(1024))
        for p in (mdir, os.path.join(mdir, "key")):
            os.chown(p, munge.pw_uid, munge.pw_gid)
        os.chmod(mdir, 0o755)  # munged: the socket's directory must be searchable by all
        os.chmod(os.path.join(mdir, "key"), 0o600)
        self.socket = os.path.join(mdir, "sock")
        subprocess.run(["setpriv", f"--reuid={munge.pw_uid}", f"--regid={munge.pw_gid}", "--clear-groups", "munged",
                        f"--key-file={mdir}/key", f"--socket={self.socket}", f"--pid-file={mdir}/pid",
                        f"--log-file={mdir}/log", f"--seed-file={mdir}/seed"], check=True, timeout=30)
        self.pids.append(int(open(os.path.join(mdir, "pid")).read()))
        host = socket.gethostname()
        conf = os.path.join(self.dir, "slurm.conf")
        with open(conf, "w") as f:
            f.write(f"""ClusterName=avtraintest
SlurmctldHost={host}
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket={self.socket},cred_expire={CRED_EXPIRE_S}
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobRequeue=1
ReturnToService=2
StateSaveLocation={self.dir}/state
SlurmdSpoolDir={self.dir}/spool
TmpFS={self.dir}/tmp
SlurmctldPidFile={self.dir}/slurmctld.pid
SlurmdPidFile={self.dir}/slurmd.pid
SlurmctldLogFile={self.dir}/log/slurmctld.log
SlurmdLogFile={self.dir}/log/slurmd.log
SlurmdParameters=config_overrides
SchedulerParameters=sched_interval=1
NodeName={host} CPUs={max(4, os.cpu_count())} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
""")
        self.conf = conf
        self.env = dict(os.environ, SLURM_CONF=conf)
        global slurm_logs
        slurm_logs = os.path.join(self.dir, "log")
        for daemon in (["slurmctld", "-D", "-i"], ["slurmd", "-D"]):
            log = open(os.path.join(self.dir, "log", daemon[0] + ".out"), "w")
            self.pids.append(subprocess.Popen(daemon, env=self.env, stdout=log, stderr=subprocess.STDOUT).pid)
            time.sleep(0.5)
        for _ in range(60):
            if self.run(["sinfo", "-h", "-o", "%T"]).stdout.strip() == "idle":
                return
            time.sleep(0.5)
        fail(f"the one-node Slurm did not come up (logs in {self.dir}/log)")

    def run(self, command, check=False):
        return subprocess.run(command, env=self.env, capture_output=True, text=True, timeout=60, check=check)

    def job(self, job_id):
        out = self.run(["scontrol", "show", "job", str(job_id)]).stdout
        return dict(field.split("=", 1) for field in out.split() if "=" in field)

    def stop(self):
        self.run(["scancel", "--full", "--user", "root"])  # whatever job is left, then the daemons
        deadline = time.monotonic() + 40  # KillWait (30 s) at most
        while self.run(["squeue", "-h"]).stdout.strip() and time.monotonic() < deadline:
            time.sleep(0.5)
        run_processes.stop_daemons(self.pids)
        shutil.rmtree(self.munge_dir, ignore_errors=True)
        # A job step, its batch script or a rank the daemons left: every one carries SLURM_CONF.
        find = lambda: run_processes.with_environment("SLURM_CONF", self.conf)  # noqa: E731
        left = [run_processes.describe(pid) for pid in find()]
        run_processes.kill_all(find)
        if left:
            print(f"check_slurm_requeue: killed what the daemons left: {'; '.join(left)}")


def starts_of(out):
    """run.json's starts ([] before the first)."""
    try:
        return json.load(open(os.path.join(out, "run.json")))["starts"]
    except (FileNotFoundError, ValueError, KeyError):
        return []


def wait_for_end(slurm, job, work):
    """Polls the job until it has ended. Returns its last state and the state seen once it was
    pending again after a requeue. An end state is final: scontrol shows a job COMPLETING until its
    batch script and every step have ended, and a requeue by the script (even one at the time limit,
    while the job completes) turns it PENDING before any end state shows."""
    deadline = time.monotonic() + 400
    requeued = None
    while True:
        state = slurm.job(job)
        if requeued is None and state.get("Restarts") == "1" and state.get("JobState") == "PENDING":
            requeued = state
        if state.get("JobState") in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"):
            return state, requeued
        if time.monotonic() > deadline:
            fail(f"job {job} did not finish: {state.get('JobState')} ({state.get('Reason')}); "
                 f"output {work}/job-{job}.out")
        time.sleep(0.2)


def submit(slurm, jobdir, root, avtrain, deck, job_kind):
    """sbatch of the job script with DECK, its output in JOBDIR/job-ID.out and --out JOBDIR/job.
    Returns the job id and that --out."""
    out = os.path.join(jobdir, "job")
    script = os.path.join(root, "jobscripts", "slurm-avtrain.sbatch")
    export = "--export=ALL,AVTRAIN_ROOT=" + root + ",OMPI_ALLOW_RUN_AS_ROOT=1,OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"
    limits = ["--time=10"]
    if job_kind.startswith("time-limit"):
        # A 1-minute limit and no USR1 before it (a harmless CONT instead), and no end time the
        # ranks could stop before it by (SLURM_JOB_END_TIME 0: unknown): Slurm's SIGTERM ends the start.
        limits = ["--time=1", "--signal=B:CONT@1"]
        export += ",SLURM_JOB_END_TIME=0"
    if job_kind == "time-limit-mpirun":  # the bundle's layout: bin/mpirun and bin/avtrain
        bundle = os.path.join(jobdir, "bundle")
        os.makedirs(os.path.join(bundle, "bin"))
        os.symlink(shutil.which("mpirun"), os.path.join(bundle, "bin", "mpirun"))
        os.symlink(avtrain, os.path.join(bundle, "bin", "avtrain"))
        export += ",AVTRAIN_BUNDLE=" + bundle
    done = slurm.run(["sbatch", "--parsable", "--ntasks-per-node=2", "--cpus-per-task=1", *limits,
                      f"--output={jobdir}/job-%j.out", f"--chdir={jobdir}", export, script] + deck + ["--out", out])
    if done.returncode:
        fail(f"sbatch failed: {done.stderr}")
    return done.stdout.strip().split(";")[0], out


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "check" and sys.argv[3] in TIME_LIMIT_JOBS:
        global slurm_logs
        slurm_logs = os.path.join(os.path.abspath(sys.argv[2]), "slurm", "log")  # the stopped Slurm's
        check_time_limit(os.path.join(os.path.abspath(sys.argv[2]), sys.argv[3]), sys.argv[3])
        return
    if len(sys.argv) not in (5, 6) or (len(sys.argv) == 6 and sys.argv[5] not in MODES):
        sys.exit(__doc__)
    work, root, avtrain, shards = (os.path.abspath(a) for a in sys.argv[1:5])
    mode = sys.argv[5] if len(sys.argv) == 6 else "usr1"
    steps = STEPS[mode]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    deck = [os.path.join(root, "inputs", "ci.ini"), "--data", shards, "--dp", "2", "--steps", str(steps),
            "--train.log_interval", "50"]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    straight = os.path.join(work, "straight")
    if mode == "usr1":
        p = run_processes.run(["mpirun", "-n", "2", "--bind-to", "none", avtrain] + deck + ["--threads", "1", "--out", straight],
                              env=env, capture_output=True, text=True, timeout=600)
        if p.returncode:
            fail(f"the straight run failed:\n{p.stdout}{p.stderr}")

    slurm = OneNodeSlurm(work)
    try:
        if mode == "time-limits":
            run_time_limit_jobs(slurm, work, root, avtrain, deck)
            return
        if mode == "launch-fails":  # PMIx refuses to set up a step whose directory exists (job 1, step 0)
            os.makedirs(os.path.join(slurm.dir, "tmp", "spmix_appdir_0_1.0"))
        job, out = submit(slurm, work, root, avtrain, deck, mode)
        if mode == "usr1":
            deadline = time.monotonic() + 120
            while run_processes.csv_rows(os.path.join(out, "trace.csv")) < SIGNAL_AFTER:
                if time.monotonic() > deadline or slurm.job(job).get("JobState") not in ("PENDING", "RUNNING"):
                    fail(f"job {job} did not train {SIGNAL_AFTER} steps: {slurm.job(job).get('JobState')}; "
                         f"output {work}/job-{job}.out")
                time.sleep(0.05)
            slurm.run(["scancel", "--batch", "--signal=USR1", job], check=True)
        state, requeued = wait_for_end(slurm, job, work)
        text = open(os.path.join(work, f"job-{job}.out")).read()
        print(text)

        if mode == "launch-fails":
            needed = "rank 0 never reported its end: the ranks did not run"
            if state.get("JobState") != "FAILED" or state.get("ExitCode") != "1:0" or needed not in text:
                fail(f"job {job} whose ranks never started ended {state.get('JobState')} "
                     f"({state.get('ExitCode')}), expected FAILED (1:0) with '{needed}'")
            print(f"check_slurm_requeue: job {job}: srun could not start the ranks and exited 0; the job script "
                  f"failed the job (exit 1) saying so; ok")
            return

        if state.get("JobState") != "COMPLETED" or state.get("Restarts") != "1":
            fail(f"job {job} is {state.get('JobState')} after {state.get('Restarts')} restart(s), expected "
                 f"COMPLETED after 1")
        for needed in ["(SIGUSR1), with a checkpoint", "exit 75", f"requeueing job {job}", "resuming from"]:
            if needed not in text:
                fail(f"the job's output lacks '{needed}'")
        # Slurm's own clock: the requeue sets SubmitTime; the second start may not come before the hold.
        if requeued is None:
            fail(f"job {job} was not seen pending after its requeue")
        at = lambda t: datetime.datetime.fromisoformat(t)  # noqa: E731
        # SubmitTime is the requeue's; the job's StartTime, now, is its second start's.
        requeue_at, eligible, start = at(requeued["SubmitTime"]), at(requeued["EligibleTime"]), at(state["StartTime"])
        hold = (eligible - requeue_at).total_seconds()
        waited = (start - requeue_at).total_seconds()
        if hold < CRED_EXPIRE_S or waited < CRED_EXPIRE_S:
            fail(f"job {job} requeued at {requeue_at}, eligible at {eligible}, started again at {start}: "
                 f"not held for cred_expire ({CRED_EXPIRE_S} s)")
        starts = starts_of(out)
        # Slurm may leave SLURM_RESTART_COUNT unset on a job's first start.
        if [(s.get("SLURM_JOB_ID"), s.get("SLURM_RESTART_COUNT", "0")) for s in starts] != [(job, "0"), (job, "1")]:
            fail(f"run.json's starts do not record the job and its restart: {starts}")
        stopped = f"stopping after step {starts[1]['step']} ("
        if stopped not in text or f"step-{starts[1]['step']:07d} (step {starts[1]['step']})" not in text:
            fail(f"the second start did not resume from the checkpoint of the step the first stopped after "
                 f"({starts[1]['step']})")
        diff = trace_difference(straight, out)
        if diff:
            fail(diff)
        print(f"check_slurm_requeue: job {job}: USR1 after step {starts[1]['step']}, checkpointed, requeued "
              f"(held {hold:.0f} s: cred_expire {CRED_EXPIRE_S} s + 1; started again {waited:.0f} s after the "
              f"requeue), resumed from that step's checkpoint and completed with the uninterrupted run's traces; ok")
    finally:
        slurm.stop()


def run_time_limit_jobs(slurm, work, root, avtrain, deck):
    """The time-limit jobs, submitted one right after the other; once both have trained a step, their
    end is brought forward to that moment, so that both meet Slurm's next check of time limits. Each
    one's end state is kept in WORK/JOB/state.json for `check`."""
    jobs = {}
    for kind in TIME_LIMIT_JOBS:
        os.makedirs(os.path.join(work, kind))
        jobs[kind] = submit(slurm, os.path.join(work, kind), root, avtrain, deck, kind)
    deadline = time.monotonic() + 120
    while any(run_processes.csv_rows(os.path.join(out, "trace.csv")) < 1 for _, out in jobs.values()):
        states = {kind: slurm.job(job).get("JobState") for kind, (job, _) in jobs.items()}
        if time.monotonic() > deadline or set(states.values()) - {"PENDING", "RUNNING"}:
            fail(f"the time-limit jobs did not each train a step: {states}")
        time.sleep(0.1)
    # Local time, as scontrol reads it; 2 s ahead, so that it is not in the past when slurmctld reads it.
    end = (datetime.datetime.now() + datetime.timedelta(seconds=2)).strftime("%Y-%m-%dT%H:%M:%S")
    ids = ",".join(job for job, _ in jobs.values())
    moved = slurm.run(["scontrol", "update", f"JobId={ids}", f"EndTime={end}"])
    if moved.returncode:
        fail(f"scontrol update JobId={ids} EndTime={end} failed: {moved.stdout}{moved.stderr}")
    for kind, (job, _) in jobs.items():
        state, _ = wait_for_end(slurm, job, os.path.join(work, kind))
        with open(os.path.join(work, kind, "state.json"), "w") as f:
            json.dump(state, f, indent=1)
        print(f"check_slurm_requeue: {kind}: job {job} ended {state.get('JobState')} ({state.get('Reason')}) after "
              f"{state.get('RunTime')}")


def check_time_limit(jobdir, kind):
    """What a time-limit job left in JOBDIR: the job timed out, its ranks stopped with a checkpoint of
    the last step they trained, and the job script said so and did not requeue (Slurm's SIGTERM came
    first)."""
    try:
        state = json.load(open(os.path.join(jobdir, "state.json")))
    except FileNotFoundError:
        fail(f"{jobdir}/state.json is missing: the time-limit jobs did not run "
             f"(e2e_slurm_runs_two_jobs_to_their_time_limits)")
    job = state["JobId"]
    text = open(os.path.join(jobdir, f"job-{job}.out")).read()
    print(text)
    out = os.path.join(jobdir, "job")
    if state.get("JobState") != "TIMEOUT" or state.get("Restarts") != "0":
        fail(f"job {job} is {state.get('JobState')} after {state.get('Restarts')} restart(s), expected TIMEOUT, "
             f"not requeued")
    needed = ["DUE TO TIME LIMIT", f"job {job} was sent SIGTERM", "so it is not requeued here"]
    # srun passes the ranks' 75 on; mpirun, sent SIGTERM itself, exits 1 (and drops their last lines).
    needed += {"time-limit": ["(SIGTERM), with a checkpoint", "Exited with exit code 75"],
               "time-limit-mpirun": ["the launcher exited 1, rank 0 75"]}[kind]
    for line in needed:
        if line not in text:
            fail(f"the job's output lacks '{line}'")
    trained = run_processes.csv_rows(os.path.join(out, "trace.csv"))
    checkpoints = sorted(d for d in os.listdir(os.path.join(out, "checkpoints"))
                         if os.path.isfile(os.path.join(out, "checkpoints", d, "committed")))
    if not checkpoints or checkpoints[-1] != f"step-{trained:07d}":
        fail(f"the newest committed checkpoint is {checkpoints[-1:]}, not that of step {trained}, the last trained")
    how = {"time-limit": "srun reported the ranks' 75", "time-limit-mpirun": "mpirun exited 1, rank 0 wrote 75"}[kind]
    print(f"check_slurm_requeue: job {job}: at its time limit (no USR1 before it) Slurm's SIGTERM stopped the "
          f"ranks after step {trained} with that step's checkpoint committed; {how}; the job script did not "
          f"requeue it and said how to resume; ok")


if __name__ == "__main__":
    main()
