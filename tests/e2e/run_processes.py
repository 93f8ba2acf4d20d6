"""The processes a test starts, in a session of their own, so that the test can end every one of them
whatever happens to it: mpirun and every rank it started (a rank may sit in a process group of its
own, so killpg alone would leave it), a Slurm daemon and what it launched.

    with Session(command, stdout=log) as p:   # subprocess.Popen; leaving the block kills what is left
        ...
    done = run(command, timeout=600, capture_output=True, text=True)   # subprocess.run, the same way
"""
import os
import signal
import subprocess
import sys
import time

# A test ended by SIGTERM (ctest's time limit, a user) unwinds, so that its sessions are killed too.
signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))


def session_members(sid):
    """Process ids whose session is `sid`."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.getsid(int(entry)) == sid:
                    out.append(int(entry))
            except (ProcessLookupError, PermissionError):
                pass
    return out


def avtrain_ranks(sid):
    """pid -> MPI rank (OMPI_COMM_WORLD_RANK, 0 without it) of every avtrain process in session `sid`."""
    out = {}
    for pid in session_members(sid):
        try:
            if open(f"/proc/{pid}/comm").read().strip() != "avtrain":
                continue
            env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        except (OSError, ProcessLookupError):
            continue
        ranks = [int(v.split(b"=", 1)[1]) for v in env if v.startswith(b"OMPI_COMM_WORLD_RANK=")]
        out[pid] = ranks[0] if ranks else 0
    return out


def with_environment(name, value):
    """Process ids (not this one) whose environment holds name=value: what a test and everything it
    started carry, whichever session they moved to."""
    mark = f"{name}={value}".encode()
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    if mark in f.read().split(b"\0"):
                        out.append(int(entry))
            except (FileNotFoundError, ProcessLookupError, PermissionError):
                pass
    return out


def describe(pid):
    """'PID (command line)' for a message."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            words = [w.decode(errors="replace") for w in f.read().split(b"\0") if w]
        return f"{pid} ({' '.join(words)[:160]})"
    except (FileNotFoundError, ProcessLookupError):
        return f"{pid} (gone)"


def kill_all(find, timeout=30):
    """SIGKILL to every process find() returns, again until it returns none. Returns the processes
    it killed; raises RuntimeError if some survive `timeout` seconds."""
    killed = set()
    deadline = time.monotonic() + timeout
    while True:
        members = find()
        if not members:
            return sorted(killed)
        if time.monotonic() > deadline:
            raise RuntimeError("processes survive SIGKILL: " + ", ".join(describe(p) for p in members))
        for pid in members:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except ProcessLookupError:
                pass
        for pid in members:  # our own children would stay zombies, members of the session
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
        time.sleep(0.005)


def stop_daemons(pids, grace=15):
    """SIGTERM to each of pids (the last started first), up to `grace` seconds in all for them to end
    (reaping our own children), then SIGKILL to those left."""
    for pid in reversed(pids):
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    for pid in pids:
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


def csv_rows(path):
    """Data rows of a CSV file with a header (0 while it does not exist)."""
    try:
        with open(path) as f:
            return max(0, sum(1 for _ in f) - 1)
    except FileNotFoundError:
        return 0


class Session(subprocess.Popen):
    """subprocess.Popen in a session of its own. kill_session() ends every process of the session;
    leaving a with-block does so too, so nothing the command started outlives the test."""

    def __init__(self, command, **kwargs):
        super().__init__(command, start_new_session=True, **kwargs)

    def kill_session(self):
        kill_all(lambda: session_members(self.pid))
        self.wait()

    def __exit__(self, *exc):
        try:
            self.kill_session()
        finally:
            super().__exit__(*exc)
        return False


def run(command, timeout, capture_output=False, **kwargs):
    """subprocess.run(command, timeout=...) in a session of its own: on a timeout (TimeoutExpired,
    as subprocess.run raises it), an error, or a normal end, whatever of the session is left is killed."""
    if capture_output:
        kwargs.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + timeout
    with Session(command, **kwargs) as p:
        while True:
            try:
                out, err = p.communicate(timeout=0.2)  # called again after a timeout, it loses nothing
                break
            except subprocess.TimeoutExpired:
                if p.poll() is not None:
                    p.kill_session()  # the command has ended: what it left holds the pipes open
                elif time.monotonic() > deadline:
                    raise subprocess.TimeoutExpired(command, timeout) from None
    return subprocess.CompletedProcess(command, p.returncode, out, err)
