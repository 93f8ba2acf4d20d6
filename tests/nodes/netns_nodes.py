"""Nodes on this machine: N network namespaces on a bridge, each with its own hostname and sshd, so
that `mpirun --hostfile` starts its daemons over ssh and its ranks talk TCP, as on a cluster.

    with Nodes(2, work) as nodes:                 # node0, node1 at 10.213.0.1, .2 (ports 2200, 2201)
        nodes.run(0, ["mpirun", *nodes.mpirun_args(), ...])  # a command on node0 (its namespaces)
        nodes.link(1, "down")                     # node1's cable pulled
        nodes.rate("1gbit")                       # every node's egress through a tbf of that rate

What it makes (names carry a tag unique to the run, so two runs never collide):
- a "switch" namespace avsw-TAG holding a bridge br0, and per node a namespace avnd-TAG-I joined to it by
  a veth pair (vI in the switch, eth0 in the node) with address 10.213.0.(I+1)/24 — nothing is added to
  the host's own namespace, and the traffic stays in namespaces the run made;
- per node an sshd (Debian's openssh-server) in that namespace and a UTS namespace of its own whose
  hostname is nodeI, on port 2200+I, with a host key made here; root may log in with the key made here
  only. The sshd accepts AVTRAIN_TEST_SUITE (the suite's process mark) so that orted and the ranks it
  starts carry it (tests/check_no_process_left.py finds whatever a test leaves);
- an ssh config (HostName, Port, key, known_hosts of the host keys made here, BatchMode) and a hostfile.
Teardown (leaving the block, also on an exception or SIGTERM): every process in each node namespace
(`ip netns pids`), sshd first, killed by process id until none is left, then the namespaces deleted
by name; the run's directory WORK/nodes-TAG (keys, configs, logs) is removed unless the block failed.

The kernel here has tbf and htb but not netem (no sch_netem module): rate limits only, no delay or loss.
"""
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
import run_processes  # noqa: E402,F401  (its SIGTERM handler: a killed test unwinds through __exit__)

SUBNET = "10.213.0"
PORT0 = 2200
MARK = "AVTRAIN_TEST_SUITE"
SKIP = 77  # CTest's SKIP_RETURN_CODE for these tests: this machine cannot make nodes


def skip_unless_possible():
    """Exits 77 with the reason when nodes cannot be made here: not root, no `ip netns`, no sshd."""
    why = None
    if os.geteuid() != 0:
        why = "not root (ip netns and a root sshd need it)"
    elif not shutil.which("ip") or not shutil.which("nsenter") or not shutil.which("unshare"):
        why = "ip, nsenter or unshare missing"
    elif not os.path.exists("/usr/sbin/sshd") or not shutil.which("ssh"):
        why = "openssh-server / openssh-client not installed (jobscripts/install-deps.sh)"
    else:  # root in a container may lack CAP_NET_ADMIN or CAP_SYS_ADMIN
        probe = f"avprobe-{os.getpid()}-{secrets.token_hex(2)}"
        made = subprocess.run(["ip", "netns", "add", probe], stderr=subprocess.PIPE, text=True)
        if made.returncode != 0:
            why = f"ip netns add {probe}: {made.stderr.strip()}"
        else:
            subprocess.run(["ip", "netns", "del", probe], check=True)
    if why:
        print(f"netns_nodes: skipped: {why}")
        sys.exit(SKIP)


def sh(*command, check=True, **kwargs):
    """Runs a setup command; a failure raises with its stderr."""
    done = subprocess.run(list(command), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}: exit {done.returncode}: {done.stderr.strip()}")
    return done


class Nodes:
    def __init__(self, count, work, slots=2, server_alive=(5, 3)):
        self.count, self.slots, self.server_alive = count, slots, server_alive
        self.tag = f"{os.getpid() % 100000}{secrets.token_hex(2)}"
        self.work = os.path.join(work, f"nodes-{self.tag}")
        self.switch = f"avsw-{self.tag}"
        self.names = [f"node{i}" for i in range(count)]
        self.namespaces = [f"avnd-{self.tag}-{i}" for i in range(count)]
        self.addresses = [f"{SUBNET}.{i + 1}" for i in range(count)]
        self.sshd = []  # Popen per node
        self.made = []  # namespaces made, for teardown
        self.ssh_config = os.path.join(self.work, "ssh_config")
        self.hostfile = os.path.join(self.work, "hostfile")

    # -- setup ---------------------------------------------------------------------------------------
    def __enter__(self):
        try:
            self._setup()
        except BaseException:
            self.teardown()
            raise
        return self

    def __exit__(self, exc_type, *exc):
        self.teardown()
        if exc_type is None:  # the keys, configs and daemons' logs are kept after a failure only
            shutil.rmtree(self.work, ignore_errors=True)
        return False

    def _setup(self):
        os.makedirs(self.work)
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege separation directory
        user_key = os.path.join(self.work, "id_ed25519")
        sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"avtrain-nodes-{self.tag}", "-f", user_key)
        shutil.copy(user_key + ".pub", os.path.join(self.work, "authorized_keys"))
        sh("ip", "netns", "add", self.switch)
        self.made.append(self.switch)
        sh("ip", "-n", self.switch, "link", "set", "lo", "up")
        sh("ip", "-n", self.switch, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", self.switch, "link", "set", "br0", "up")
        known, config = [], [f"# ssh config of the namespace nodes of run {self.tag}"]
        for i, (name, ns, address) in enumerate(zip(self.names, self.namespaces, self.addresses)):
            sh("ip", "netns", "add", ns)
            self.made.append(ns)
            sh("ip", "-n", self.switch, "link", "add", f"v{i}", "type", "veth", "peer", "name", "eth0", "netns", ns)
            sh("ip", "-n", self.switch, "link", "set", f"v{i}", "master", "br0", "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            sh("ip", "-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
            sh("ip", "-n", ns, "link", "set", "eth0", "up")
            host_key = os.path.join(self.work, f"{name}_host_ed25519_key")
            sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", host_key)
            known.append(f"{name} " + " ".join(open(host_key + ".pub").read().split()[:2]))
            config += [f"Host {name}", f"  HostName {address}", f"  Port {PORT0 + i}", f"  HostKeyAlias {name}"]
            sshd_config = os.path.join(self.work, f"{name}_sshd_config")
            with open(sshd_config, "w") as f:
                f.write("\n".join([
                    f"Port {PORT0 + i}", f"ListenAddress {address}", f"HostKey {host_key}", "PidFile none",
                    f"AuthorizedKeysFile {self.work}/authorized_keys", "PermitRootLogin prohibit-password",
                    "PasswordAuthentication no", "KbdInteractiveAuthentication no", "UsePAM no",
                    # the keys live in a temporary directory, not in ~/.ssh
                    "StrictModes no", f"AcceptEnv {MARK}", "PrintMotd no", "PrintLastLog no",
                    "MaxStartups 100", "MaxSessions 100", "LogLevel ERROR", ""]))
            log = open(os.path.join(self.work, f"{name}_sshd.log"), "w")
            # ip netns exec and unshare exec what follows: the process started is the sshd itself.
            self.sshd.append(subprocess.Popen(
                ["ip", "netns", "exec", ns, "unshare", "--uts", "--", "sh", "-c",
                 f"hostname {name} && exec /usr/sbin/sshd -D -e -f {sshd_config}"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        with open(os.path.join(self.work, "known_hosts"), "w") as f:
            f.write("\n".join(known) + "\n")
        config += ["Host *", "  User root", f"  IdentityFile {user_key}", "  IdentitiesOnly yes",
                   f"  UserKnownHostsFile {self.work}/known_hosts", "  StrictHostKeyChecking yes",
                   "  BatchMode yes", f"  SendEnv {MARK}",
                   # mpirun's only sign of a node gone silent is its ssh session to that node's orted
                   f"  ServerAliveInterval {self.server_alive[0]}", f"  ServerAliveCountMax {self.server_alive[1]}", "  LogLevel ERROR", ""]
        with open(self.ssh_config, "w") as f:
            f.write("\n".join(config))
        with open(self.hostfile, "w") as f:
            f.write("".join(f"{name} slots={self.slots}\n" for name in self.names))
        # Ready when every node answers over ssh from node0 with its own hostname.
        deadline = time.monotonic() + 20
        for i, name in enumerate(self.names):
            while True:
                if self.sshd[i].poll() is not None:
                    raise RuntimeError(f"sshd of {name} exited {self.sshd[i].returncode}: "
                                       + open(os.path.join(self.work, f"{name}_sshd.log")).read())
                done = self.run(0, ["ssh", "-F", self.ssh_config, name, "hostname"], capture=True, check=False)
                if done.returncode == 0 and done.stdout.strip() == name:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"ssh to {name} fails: {done.stderr.strip()}")
                time.sleep(0.1)

    # -- use -----------------------------------------------------------------------------------------
    def enter(self, i):
        """The prefix that runs a command on node i: in its sshd's network and UTS namespaces."""
        return ["nsenter", "-t", str(self.sshd[i].pid), "-n", "-u", "--"]

    def run(self, i, command, capture=False, check=True, timeout=60, stdout=None):
        """Runs a command on node i; with stdout a file, its output and errors go there."""
        done = subprocess.run(self.enter(i) + list(command), text=True, timeout=timeout,
                              stdout=subprocess.PIPE if capture else stdout,
                              stderr=subprocess.PIPE if capture else (subprocess.STDOUT if stdout else None))
        if check and done.returncode != 0:
            raise RuntimeError(f"{name_of(command)} on node{i}: exit {done.returncode}")
        return done

    def mpirun_args(self):
        """mpirun's options to start across the nodes: the hostfile, ssh with this config, TCP over eth0."""
        subnet = f"{SUBNET}.0/24"
        return ["--hostfile", self.hostfile, "--mca", "plm_rsh_agent", "ssh", "--mca", "plm_rsh_args",
                f"-F {self.ssh_config}", "--mca", "btl", "self,vader,tcp", "--mca", "btl_tcp_if_include", subnet,
                "--mca", "oob_tcp_if_include", subnet, "--mca", "btl_vader_single_copy_mechanism", "none",
                "--bind-to", "none"] + (["--allow-run-as-root"] if os.geteuid() == 0 else [])

    def pids(self, i):
        """Process ids in node i's network namespace."""
        done = sh("ip", "netns", "pids", self.namespaces[i], check=False)
        return [int(p) for p in done.stdout.split()]

    def processes_named(self, i, comm):
        out = []
        for pid in self.pids(i):
            try:
                if open(f"/proc/{pid}/comm").read().strip() == comm:
                    out.append(pid)
            except OSError:
                pass
        return out

    def wire_bytes(self, i):
        """Bytes node i's eth0 has received and sent (its side of the veth)."""
        done = sh("ip", "netns", "exec", self.namespaces[i], "cat", "/sys/class/net/eth0/statistics/rx_bytes",
                  "/sys/class/net/eth0/statistics/tx_bytes")
        rx, tx = (int(x) for x in done.stdout.split())
        return rx, tx

    def link(self, i, state):
        """Node i's cable: `ip link set eth0 up|down` inside its namespace."""
        sh("ip", "-n", self.namespaces[i], "link", "set", "eth0", state)

    def rate(self, rate, latency="50ms"):
        """Every node's eth0 egress through a token bucket of `rate` (tc tbf; 1gbit, 200mbit): each
        direction of every link is limited. The bucket holds 10 ms at the rate (at least 64 KiB: tbf
        needs rate / HZ). netem (delay, loss) is not in this kernel."""
        units = {"gbit": 1e9, "mbit": 1e6, "kbit": 1e3}
        unit = next(u for u in units if rate.endswith(u))
        burst = f"{max(64 * 1024, int(float(rate[:-len(unit)]) * units[unit] / 8 / 100))}b"
        for ns in self.namespaces:
            sh("ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", "eth0", "root", "tbf",
               "rate", rate, "burst", burst, "latency", latency)

    # -- teardown ------------------------------------------------------------------------------------
    def teardown(self):
        errors = []
        for p in self.sshd:
            try:
                p.kill()
                p.wait(timeout=10)
            except Exception as e:  # noqa: BLE001
                errors.append(f"sshd {p.pid}: {e}")
        for ns in self.made:
            deadline = time.monotonic() + 30
            while True:
                left = [int(p) for p in sh("ip", "netns", "pids", ns, check=False).stdout.split()]
                left = [p for p in left if p != os.getpid()]
                if not left:
                    break
                if time.monotonic() > deadline:
                    errors.append(f"{ns}: processes survive SIGKILL: {left}")
                    break
                for pid in left:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                time.sleep(0.02)
        for ns in reversed(self.made):
            done = sh("ip", "netns", "del", ns, check=False)
            if done.returncode != 0:
                errors.append(f"ip netns del {ns}: {done.stderr.strip()}")
        self.made, self.sshd = [], []
        if errors:
            raise RuntimeError("nodes teardown: " + "; ".join(errors))


def name_of(command):
    return os.path.basename(command[0]) if command else "?"


def self_check():
    """python3 netns_nodes.py [N]: makes N nodes, runs hostname on each over ssh, tears down."""
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    with Nodes(count, "/tmp") as nodes:
        for name in nodes.names:
            done = nodes.run(0, ["ssh", "-F", nodes.ssh_config, name, "hostname; cat /proc/net/dev | grep eth0"],
                             capture=True)
            print(name, "->", done.stdout.strip().replace("\n", " | "))
        spaces = list(nodes.made)
    left = [ns for ns in spaces if os.path.exists(f"/run/netns/{ns}")]
    print("torn down" if not left else f"left: {left}")


if __name__ == "__main__":
    self_check()
