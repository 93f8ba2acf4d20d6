#!/usr/bin/python3
"""A Slurm job that survives its time limit, against a real one-node Slurm started here.

Starts munged (as the munge user), slurmctld and slurmd from Debian's packages in a directory of
their own (its own ports, no systemd, no cgroups), submits jobscripts/slurm-avtrain.sbatch with the
CI deck on 2 tasks, and once the run has trained some steps delivers what Slurm sends before a time
limit (scancel --batch --signal=USR1). The job must checkpoint (its ranks exit 75), requeue itself,
start again (RestartCnt 1), resume from that checkpoint and finish with the traces of a run that was
never interrupted; run.json must record both starts with SLURM_JOB_ID and SLURM_RESTART_COUNT.
The daemons are stopped by process id whatever happens.

usage: check_slurm_requeue.py WORK ROOT AVTRAIN SHARDS
"""
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
from same_run import trace_difference  # noqa: E402

STEPS, SIGNAL_AFTER = 300, 30


def fail(message):
    print(f"check_slurm_requeue: {message}")
    sys.exit(1)


def free_port():
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


class OneNodeSlurm:
    """munged, slurmctld and slurmd under WORK/slurm; stop() ends them by process id."""

    def __init__(self, work):
        self.dir = os.path.join(work, "slurm")
        shutil.rmtree(self.dir, ignore_errors=True)
        self.pids = []
        munge = pwd.getpwnam("munge")
        mdir = os.path.join(self.dir, "munge")
        for d in ("state", "spool", "log", "munge"):
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
AuthInfo=socket={self.socket},cred_expire=10
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
SlurmctldPidFile={self.dir}/slurmctld.pid
SlurmdPidFile={self.dir}/slurmd.pid
SlurmctldLogFile={self.dir}/log/slurmctld.log
SlurmdLogFile={self.dir}/log/slurmd.log
NodeName={host} CPUs={os.cpu_count()} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
""")
        self.env = dict(os.environ, SLURM_CONF=conf)
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
        for pid in reversed(self.pids):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 15
        for pid in self.pids:
            while time.monotonic() < deadline:
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                try:
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass
                time.sleep(0.1)
            else:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


def rows(path):
    try:
        with open(path) as f:
            return max(0, sum(1 for _ in f) - 1)
    except FileNotFoundError:
        return 0


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    work, root, avtrain, shards = (os.path.abspath(a) for a in sys.argv[1:])
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    deck = [os.path.join(root, "inputs", "ci.ini"), "--data", shards, "--dp", "2", "--steps", str(STEPS),
            "--train.log_interval", "50"]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    straight = os.path.join(work, "straight")
    p = subprocess.run(["mpirun", "-n", "2", "--bind-to", "none", avtrain] + deck + ["--threads", "1", "--out", straight],
                       env=env, capture_output=True, text=True, timeout=600)
    if p.returncode:
        fail(f"the straight run failed:\n{p.stdout}{p.stderr}")

    slurm = OneNodeSlurm(work)
    try:
        out = os.path.join(work, "job")
        script = os.path.join(root, "jobscripts", "slurm-avtrain.sbatch")
        submit = slurm.run(["sbatch", "--parsable", "--ntasks-per-node=2", "--cpus-per-task=1", "--time=10",
                            f"--output={work}/job-%j.out", f"--chdir={work}",
                            "--export=ALL,AVTRAIN_ROOT=" + root + ",OMPI_ALLOW_RUN_AS_ROOT=1,OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
                            script] + deck + ["--out", out])
        if submit.returncode:
            fail(f"sbatch failed: {submit.stderr}")
        job = submit.stdout.strip().split(";")[0]
        deadline = time.monotonic() + 120
        while rows(os.path.join(out, "trace.csv")) < SIGNAL_AFTER:
            if time.monotonic() > deadline or slurm.job(job).get("JobState") not in ("PENDING", "RUNNING"):
                fail(f"job {job} did not train {SIGNAL_AFTER} steps: {slurm.job(job).get('JobState')}; "
                     f"output {work}/job-{job}.out")
            time.sleep(0.05)
        slurm.run(["scancel", "--batch", "--signal=USR1", job], check=True)
        deadline = time.monotonic() + 240
        while True:
            state = slurm.job(job)
            if state.get("JobState") == "PENDING" and state.get("Restarts") == "1":
                slurm.run(["scontrol", "update", f"JobId={job}", "StartTime=now"])  # skip the requeue's wait
            if state.get("JobState") in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"):
                break
            if time.monotonic() > deadline:
                fail(f"job {job} did not finish: {state.get('JobState')}; output {work}/job-{job}.out")
            time.sleep(0.5)
        text = open(os.path.join(work, f"job-{job}.out")).read()
        print(text)
        if state.get("JobState") != "COMPLETED" or state.get("Restarts") != "1":
            fail(f"job {job} ended {state.get('JobState')} after {state.get('Restarts')} restart(s), expected "
                 f"COMPLETED after 1")
        for needed in ("(SIGUSR1), with a checkpoint", "exit 75", f"requeueing job {job}", "resuming from"):
            if needed not in text:
                fail(f"the job's output lacks '{needed}'")
        starts = json.load(open(os.path.join(out, "run.json")))["starts"]
        # Slurm may leave SLURM_RESTART_COUNT unset on a job's first start.
        if [(s.get("SLURM_JOB_ID"), s.get("SLURM_RESTART_COUNT", "0")) for s in starts] != [(job, "0"), (job, "1")]:
            fail(f"run.json's starts do not record the job and its restart: {starts}")
        diff = trace_difference(straight, out)
        if diff:
            fail(diff)
        print(f"check_slurm_requeue: job {job}: USR1 after step {starts[1]['step']}, checkpointed, requeued, "
              f"resumed and completed with the uninterrupted run's {STEPS} trace rows; ok")
    finally:
        slurm.stop()


if __name__ == "__main__":
    main()
