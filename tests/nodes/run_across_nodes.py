#!/usr/bin/python3
"""Runs avtrain across namespace nodes with mpirun --hostfile, as on a cluster (tests/nodes/netns_nodes.py).

usage: run_across_nodes.py WORK NODES RANKS [--rate RATE] [--mpirun MPIRUN [--inside DIR]] -- AVTRAIN DECK [OPTIONS...]

Makes NODES nodes (RANKS / NODES slots each), optionally rate-limits every node's link with tc tbf
(RATE as tc writes it: 1gbit, 200mbit), and runs `mpirun --hostfile ... -n RANKS AVTRAIN DECK OPTIONS`
from node0, whose ssh starts orted on the others. Checks, besides the exit code, that the ranks ran
where the hostfile put them (RANKS / NODES avtrain processes seen in each node's namespace while the
run went on) and that their traffic crossed the nodes' links (bytes on every node's eth0). mpirun's
output goes to WORK/run.log; the nodes are torn down at the end, whatever happened.
--mpirun names the mpirun to use (default: the one on PATH), e.g. a bundle's BUNDLE/bin/mpirun: given by
its absolute path, OpenMPI takes its folder's parent as --prefix and starts PREFIX/bin/orted on the
other nodes over ssh (in the bundle, its launcher, which points OpenMPI at the bundle). With --inside,
it checks too that on every node the orted and the ranks seen ran programs of DIR (/proc/PID/exe: DIR's
orted on every node but node0, DIR's avtrain on all) and that the ranks mapped DIR's libmpi, not another's.
"""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from netns_nodes import Nodes, skip_unless_possible  # noqa: E402


def fail(message):
    print(f"run_across_nodes: {message}")
    sys.exit(1)


def look_inside(nodes, i, programs):
    """Notes what each orted and avtrain process on node i runs: its program and the libmpi it mapped
    (a launcher script's bash is passed by: it execs the program under the same process id)."""
    for comm in ("orted", "avtrain"):
        for pid in nodes.processes_named(i, comm):
            try:
                exe = os.readlink(f"/proc/{pid}/exe")
                if os.path.basename(exe) != comm or (pid in programs and programs[pid][2]):
                    continue
                libmpi = next((line.split()[-1] for line in open(f"/proc/{pid}/maps")
                               if "/libmpi.so" in line), None)
            except OSError:
                continue
            programs[pid] = (comm, exe, libmpi)


def check_inside(inside, programs):
    """Every node ran DIR's orted (but node0, where mpirun is) and DIR's avtrain with DIR's libmpi."""
    for i, found in enumerate(programs):
        for comm in ("orted", "avtrain") if i else ("avtrain",):
            exes = {exe for c, exe, _ in found.values() if c == comm}
            if not exes:
                fail(f"node{i}: no {comm} process seen")
            outside = [exe for exe in exes if not os.path.realpath(exe).startswith(inside + "/")]
            if outside:
                fail(f"node{i}: {comm} ran {outside}, not the one in {inside}")
        libs = {lib for c, _, lib in found.values() if c == "avtrain"}
        if None in libs or not all(os.path.realpath(lib).startswith(inside + "/") for lib in libs):
            fail(f"node{i}: the ranks mapped libmpi {sorted(map(str, libs))}, not {inside}'s")
    described = "; ".join(f"node{i}: " + ", ".join(sorted({f"{c} {os.path.relpath(e, inside)}" for c, e, _ in found.values()}))
                          + f" with {os.path.relpath(next(lib for c, _, lib in found.values() if c == 'avtrain'), inside)}"
                          for i, found in enumerate(programs))
    print(f"run_across_nodes: inside {inside}: {described}")


def main():
    argv = sys.argv[1:]
    if "--" not in argv or argv.index("--") < 3:
        sys.exit(__doc__)
    split = argv.index("--")
    head, command = argv[:split], argv[split + 1:]
    work, count, ranks = head[0], int(head[1]), int(head[2])
    rate = head[head.index("--rate") + 1] if "--rate" in head else None
    mpirun_program = head[head.index("--mpirun") + 1] if "--mpirun" in head else "mpirun"
    inside = os.path.realpath(head[head.index("--inside") + 1]) if "--inside" in head else None
    skip_unless_possible()
    os.makedirs(work, exist_ok=True)
    log_path = os.path.join(work, "run.log")
    with Nodes(count, work, slots=ranks // count) as nodes:
        if rate:
            nodes.rate(rate)
        before = [nodes.wire_bytes(i) for i in range(count)]
        mpirun = [mpirun_program, *nodes.mpirun_args(), "-n", str(ranks)] + command
        print("run_across_nodes: " + " ".join(mpirun))
        seen = [0] * count
        programs = [{} for _ in range(count)]  # per node: pid -> (comm, exe, libmpi)
        start = time.monotonic()
        with open(log_path, "w") as log:
            p = subprocess.Popen(nodes.enter(0) + mpirun, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            try:
                while p.poll() is None:
                    for i in range(count):
                        seen[i] = max(seen[i], len(nodes.processes_named(i, "avtrain")))
                        if inside:
                            look_inside(nodes, i, programs[i])
                    if time.monotonic() - start > 600:
                        fail(f"the run still goes after 600 s; log {log_path}")
                    time.sleep(0.05)
            finally:
                if p.poll() is None:
                    p.kill()
                p.wait()
        took = time.monotonic() - start
        moved = [sum(nodes.wire_bytes(i)) - sum(before[i]) for i in range(count)]
    print(open(log_path, errors="replace").read()[-2500:])
    if p.returncode != 0:
        fail(f"mpirun exited {p.returncode}; log {log_path}")
    if seen != [ranks // count] * count:
        fail(f"avtrain processes seen per node {seen}, expected {ranks // count} on each")
    if min(moved) < 1 << 20:
        fail(f"bytes through each node's eth0 {moved}: under 1 MiB, the ranks did not talk over the link")
    if inside:
        check_inside(inside, programs)
    print(f"run_across_nodes: {ranks} ranks on {count} nodes ({seen} per node"
          f"{', links ' + rate if rate else ''}), {took:.1f} s, eth0 bytes (in + out) per node "
          f"{[f'{m / 2**20:.1f} MiB' for m in moved]}; ok")


if __name__ == "__main__":
    main()
