"""A Slurm of several nodes on the namespace nodes of tests/nodes/netns_nodes.py: slurmctld on node0
and one slurmd per node (NodeName nodeI, NodeAddr its address, its own port), so that
`sbatch -N 2 jobscripts/slurm-avtrain.sbatch` runs across them.

    with Nodes(2, work) as nodes, NodesSlurm(nodes) as slurm:
        slurm.run(["sbatch", ...])                # Slurm's commands run on node0

munged runs in the host's namespaces (its socket is a file: every node reaches it); each slurmd runs
in its node's network and UTS namespaces and in a mount namespace of its own in which the TmpFS
directory is the node's own (PMIx makes its per-step directory there, with the same name on every
node). No systemd, no cgroups (proctrack/linuxproc, task/none); a short cred_expire (10 s) and a main
scheduler that passes over pending jobs every second (sched_interval=1; 60 s by default), so a
requeued job starts again soon after Slurm's hold, which no scheduler pass moves. stop() (or leaving
the block) cancels what is left and ends the daemons by process id; what they leave in the nodes is
killed by the nodes' teardown.
"""
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
import run_processes  # noqa: E402

CTLD_PORT, SLURMD_PORT0 = 6817, 6820
CRED_EXPIRE_S = 10


class NodesSlurm:
    def __init__(self, nodes):
        self.nodes = nodes
        self.dir = os.path.join(nodes.work, "slurm")
        self.pids, self.munge_dir = [], None
        self.conf = os.path.join(self.dir, "slurm.conf")
        self.env = dict(os.environ, SLURM_CONF=self.conf)

    def __enter__(self):
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def _start(self):
        for d in ["state", "log"] + [f"spool-{n}" for n in self.nodes.names] + [f"tmp-{n}" for n in self.nodes.names]:
            os.makedirs(os.path.join(self.dir, d))
        os.makedirs(os.path.join(self.dir, "tmp"))  # each node's own tmp-nodeI is bound here
        munge = pwd.getpwnam("munge")
        mdir = self.munge_dir = tempfile.mkdtemp(prefix="avtrain-munge-")
        with open(os.path.join(mdir, "key"), "wb") as f:
            f.write(os.urandom(1024))
        for p in (mdir, os.path.join(mdir, "key")):
            os.chown(p, munge.pw_uid, munge.pw_gid)
        os.chmod(mdir, 0o755)
        os.chmod(os.path.join(mdir, "key"), 0o600)
        socket = os.path.join(mdir, "sock")
        subprocess.run(["setpriv", f"--reuid={munge.pw_uid}", f"--regid={munge.pw_gid}", "--clear-groups", "munged",
                        f"--key-file={mdir}/key", f"--socket={socket}", f"--pid-file={mdir}/pid",
                        f"--log-file={mdir}/log", f"--seed-file={mdir}/seed"], check=True, timeout=30)
        self.pids.append(int(open(os.path.join(mdir, "pid")).read()))
        cpus = os.cpu_count()
        node_lines = "".join(f"NodeName={name} NodeAddr={address} Port={SLURMD_PORT0 + i} CPUs={cpus} State=UNKNOWN\n"
                             for i, (name, address) in enumerate(zip(self.nodes.names, self.nodes.addresses)))
        with open(self.conf, "w") as f:
            f.write(f"""ClusterName=avtrainnodes
SlurmctldHost={self.nodes.names[0]}({self.nodes.addresses[0]})
SlurmctldPort={CTLD_PORT}
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket={socket},cred_expire={CRED_EXPIRE_S}
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobRequeue=1
ReturnToService=2
SchedulerParameters=sched_interval=1
StateSaveLocation={self.dir}/state
SlurmdSpoolDir={self.dir}/spool-%n
TmpFS={self.dir}/tmp
SlurmctldPidFile={self.dir}/slurmctld.pid
SlurmdPidFile={self.dir}/slurmd-%n.pid
SlurmctldLogFile={self.dir}/log/slurmctld.log
SlurmdLogFile={self.dir}/log/slurmd-%n.log
{node_lines}PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
""")
        log = open(os.path.join(self.dir, "log", "slurmctld.out"), "w")
        self.pids.append(subprocess.Popen(self.nodes.enter(0) + ["slurmctld", "-D", "-i"], env=self.env, stdout=log,
                                          stderr=subprocess.STDOUT, start_new_session=True).pid)
        for i, name in enumerate(self.nodes.names):
            log = open(os.path.join(self.dir, "log", f"slurmd-{name}.out"), "w")
            own_tmp = f"mount --bind {self.dir}/tmp-{name} {self.dir}/tmp && exec slurmd -D -N {name}"
            self.pids.append(subprocess.Popen(
                self.nodes.enter(i) + ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", own_tmp],
                env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True).pid)
        deadline = time.monotonic() + 60
        while True:
            states = self.run(["sinfo", "-h", "-N", "-o", "%N %T"]).stdout.split("\n")
            if sorted(s for s in states if s.strip()) == sorted(f"{n} idle" for n in self.nodes.names):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the Slurm of {len(self.nodes.names)} nodes did not come up: sinfo {states}; "
                                   f"logs in {self.dir}/log")
            time.sleep(0.5)

    def run(self, command, check=False, timeout=60):
        """A Slurm command on node0."""
        return subprocess.run(self.nodes.enter(0) + command, env=self.env, capture_output=True, text=True,
                              timeout=timeout, check=check)

    def job(self, job_id):
        out = self.run(["scontrol", "show", "job", str(job_id)]).stdout
        return dict(field.split("=", 1) for field in out.split() if "=" in field)

    def logs(self, lines=60):
        """The last lines of every daemon's log, for a failure message."""
        text = []
        for name in sorted(os.listdir(os.path.join(self.dir, "log"))):
            content = open(os.path.join(self.dir, "log", name), errors="replace").read().splitlines()[-lines:]
            text.append(f"--- {name}:\n" + "\n".join(content))
        return "\n".join(text)

    def stop(self):
        if len(self.pids) > 1:  # slurmctld is up: cancel what is left
            try:
                self.run(["scancel", "--full", "--user", "root"], timeout=20)
                deadline = time.monotonic() + 40
                while self.run(["squeue", "-h"], timeout=20).stdout.strip() and time.monotonic() < deadline:
                    time.sleep(0.5)
            except subprocess.TimeoutExpired:
                pass
        run_processes.stop_daemons(self.pids)
        self.pids = []
        if self.munge_dir:
            shutil.rmtree(self.munge_dir, ignore_errors=True)
