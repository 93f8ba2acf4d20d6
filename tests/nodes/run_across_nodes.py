#!/usr/bin/python3
"""Runs avtrain across namespace nodes with mpirun --hostfile, as on a cluster (tests/nodes/netns_nodes.py).

usage: run_across_nodes.py WORK NODES RANKS [--rate RATE] -- AVTRAIN DECK [OPTIONS...]

Makes NODES nodes (RANKS / NODES slots each), optionally rate-limits every node's link with tc tbf
(RATE as tc writes it: 1gbit, 200mbit), and runs `mpirun --hostfile ... -n RANKS AVTRAIN DECK OPTIONS`
from node0, whose ssh starts orted on the others. Checks, besides the exit code, that the ranks ran
where the hostfile put them (RANKS / NODES avtrain processes seen in each node's namespace while the
run went on) and that their traffic crossed the nodes' links (bytes on every node's eth0). mpirun's
output goes to WORK/run.log; the nodes are torn down at the end, whatever happened.
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


def main():
    argv = sys.argv[1:]
    if "--" not in argv or argv.index("--") < 3:
        sys.exit(__doc__)
    split = argv.index("--")
    head, command = argv[:split], argv[split + 1:]
    work, count, ranks = head[0], int(head[1]), int(head[2])
    rate = head[head.index("--rate") + 1] if "--rate" in head else None
    skip_unless_possible()
    os.makedirs(work, exist_ok=True)
    log_path = os.path.join(work, "run.log")
    with Nodes(count, work, slots=ranks // count) as nodes:
        if rate:
            nodes.rate(rate)
        before = [nodes.wire_bytes(i) for i in range(count)]
        mpirun = ["mpirun", *nodes.mpirun_args(), "-n", str(ranks)] + command
        print("run_across_nodes: " + " ".join(mpirun))
        seen = [0] * count
        start = time.monotonic()
        with open(log_path, "w") as log:
            p = subprocess.Popen(nodes.enter(0) + mpirun, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            try:
                while p.poll() is None:
                    for i in range(count):
                        seen[i] = max(seen[i], len(nodes.processes_named(i, "avtrain")))
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
    print(f"run_across_nodes: {ranks} ranks on {count} nodes ({seen} per node"
          f"{', links ' + rate if rate else ''}), {took:.1f} s, eth0 bytes (in + out) per node "
          f"{[f'{m / 2**20:.1f} MiB' for m in moved]}; ok")


if __name__ == "__main__":
    main()
