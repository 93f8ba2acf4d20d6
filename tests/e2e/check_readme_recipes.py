#!/usr/bin/python3
"""The README's recipe blocks, run as written: the block after `<!-- recipe:NAME -->` in README.md is
read from the file, its commands joined where a line ends in a backslash, and each run by bash in
WORK, a folder laid out as the repository's root (build/cpu -> the build, inputs/ and jobscripts/ ->
the sources) holding what the recipe starts from.

  own-videos  WORK/videos/<class>/<clip>.mp4 made first (make_class_clips.py). Every command must exit
              0; a command followed by one whose comment says "after a kill" is killed (SIGKILL to
              every process) once its first checkpoint is committed, and the next must resume from it
              and finish the run. Then: shards/train and shards/val hold the same classes, neither
              empty; the dry run said the job fits a GPU; the run trained every step; run.json
              records the two starts; eval.json has every class.
  slurm       run after own-videos in the same WORK (its shards): a Slurm of two namespace nodes
              (tests/nodes) takes the sbatch command; the job must complete on both nodes with the
              program AVTRAIN_BIN names and train every step of the deck.

usage: check_readme_recipes.py own-videos|slurm README WORK BUILD_DIR SOURCE_DIR
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import run_processes  # noqa: E402


def fail(message):
    print(f"check_readme_recipes: {message}")
    sys.exit(1)


def recipe(readme, name):
    """The commands of the first ```bash block after <!-- recipe:NAME -->."""
    text = open(readme).read()
    marker = f"<!-- recipe:{name} -->"
    if marker not in text:
        fail(f"{readme} has no {marker}")
    block = re.search(r"```bash\n(.*?)```", text[text.index(marker):], re.S)
    if not block:
        fail(f"no ```bash block after {marker}")
    commands, current = [], ""
    for line in block.group(1).splitlines():
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        current += line
        if current.strip() and not current.strip().startswith("#"):
            commands.append(current.strip())
        current = ""
    return commands


def run(command, work, timeout=600):
    print(f"$ {command}", flush=True)
    done = run_processes.run(["bash", "-c", command], timeout=timeout, capture_output=True, text=True, cwd=work)
    print(done.stdout[-3000:] + done.stderr[-3000:], flush=True)
    if done.returncode:
        fail(f"exit {done.returncode}: {command}")
    return done.stdout + done.stderr


def run_and_kill(command, work, committed_marker, timeout=600):
    """Starts the command, SIGKILLs everything it started once committed_marker exists."""
    print(f"$ {command}   (killed once {os.path.relpath(committed_marker, work)} exists)", flush=True)
    deadline = time.monotonic() + timeout
    with open(os.path.join(work, "killed-run.log"), "w") as log:
        with run_processes.Session(["bash", "-c", command], cwd=work, stdout=log, stderr=subprocess.STDOUT) as p:
            while not os.path.exists(committed_marker):
                if p.poll() is not None:
                    fail(f"exited {p.returncode} before its first checkpoint: {command}")
                if time.monotonic() > deadline:
                    fail(f"no checkpoint within {timeout} s: {command}")
                time.sleep(0.05)
            p.kill_session()
    print(open(os.path.join(work, "killed-run.log")).read()[-2000:], flush=True)


def lay_out(work, build, source):
    os.makedirs(os.path.join(work, "build"), exist_ok=True)
    for link, target in ((os.path.join(work, "build", "cpu"), build), (os.path.join(work, "inputs"),
                         os.path.join(source, "inputs")), (os.path.join(work, "jobscripts"),
                                                            os.path.join(source, "jobscripts"))):
        if os.path.lexists(link):
            os.remove(link)
        os.symlink(target, link)


def own_videos(readme, work, build, source):
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    lay_out(work, build, source)
    subprocess.run([sys.executable, os.path.join(here, "make_class_clips.py"), os.path.join(work, "videos"), "20"],
                   check=True)
    commands = recipe(readme, "own-videos")
    outputs, i = [], 0
    while i < len(commands):
        if i + 1 < len(commands) and "after a kill" in commands[i + 1]:
            out = re.search(r"--out (\S+)", commands[i])
            if not out:
                fail(f"the command killed has no --out: {commands[i]}")
            run_and_kill(commands[i], work, os.path.join(work, out.group(1), "checkpoints", "latest"))
            outputs.append(run(commands[i + 1], work))
            if "resuming from" not in outputs[-1]:
                fail(f"the command after the kill did not resume: {commands[i + 1]}")
            i += 2
            continue
        outputs.append(run(commands[i], work))
        i += 1

    classes = {}
    for side in ("train", "val"):
        plan = json.load(open(os.path.join(work, "shards", side, ".pack", "plan.json")))
        classes[side] = plan["classes"]
        if plan["clips"] < 1:
            fail(f"shards/{side} holds no clip")
    if classes["train"] != classes["val"] or sorted(classes["train"]) != ["cello", "flute", "horn"]:
        fail(f"the two sets' classes differ or are not the folders': {classes}")
    joined = "\n".join(outputs)
    if "fits: every rank holds" not in joined:
        fail("the dry run did not say that the job fits a GPU")
    run_dir = os.path.join(work, "runs", "mine")
    rows = run_processes.csv_rows(os.path.join(run_dir, "trace.csv"))
    steps = int(re.search(r"^steps = (\d+)", open(os.path.join(source, "inputs", "own-videos.ini")).read(), re.M).group(1))
    if rows != steps:
        fail(f"trace.csv has {rows} rows, the deck trains {steps} steps")
    starts = json.load(open(os.path.join(run_dir, "run.json")))["starts"]
    if len(starts) != 2 or starts[1]["step"] <= 0:
        fail(f"run.json does not record a start and a resumed one: {starts}")
    evaluation = json.load(open(os.path.join(run_dir, "eval.json")))
    per_class = sorted(row["class"] for row in evaluation.get("per_class", []))
    if per_class != ["cello", "flute", "horn"]:
        fail(f"eval.json's per-class rows: {evaluation.get('per_class')}")
    print(f"check_readme_recipes: own-videos: {len(commands)} commands as written; killed after its first "
          f"checkpoint and resumed at step {starts[1]['step']}; {rows} steps; accuracy {evaluation.get('val_acc')} "
          f"per class {[(r['class'], r['acc']) for r in evaluation['per_class']]}; ok")


def slurm(readme, work, build, source):
    sys.path.insert(0, os.path.join(here, "..", "nodes"))
    from namespace_slurm import NodesSlurm  # noqa: E402
    from netns_nodes import Nodes, skip_unless_possible  # noqa: E402
    skip_unless_possible()
    if not shutil.which("slurmctld") or not shutil.which("slurmd") or not shutil.which("munged"):
        print("check_readme_recipes: skipped: slurmctld, slurmd or munge not installed (jobscripts/install-deps.sh)")
        sys.exit(77)
    if not os.path.isdir(os.path.join(work, "shards", "train")):
        fail(f"{work} holds no shards: the own-videos recipe runs first")
    commands = recipe(readme, "slurm")
    if len(commands) != 1 or not commands[0].startswith("sbatch "):
        fail(f"the Slurm recipe is not one sbatch command: {commands}")
    out = os.path.join(work, re.search(r"--out (\S+)", commands[0]).group(1))
    shutil.rmtree(out, ignore_errors=True)
    env = ("export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_btl_tcp_if_include=10.213.0.0/24 && "
           f"cd {work} && ")
    with Nodes(2, work) as nodes, NodesSlurm(nodes) as cluster:
        print(f"$ {commands[0]}", flush=True)
        submit = cluster.run(["bash", "-c", env + commands[0]], timeout=60)
        job = re.search(r"Submitted batch job (\d+)", submit.stdout)
        if submit.returncode or not job:
            print(cluster.logs())
            fail(f"sbatch exit {submit.returncode}: {submit.stdout}{submit.stderr}")
        job = job.group(1)
        deadline = time.monotonic() + 400
        while True:
            state = cluster.job(job)
            if state.get("JobState") in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"):
                break
            if time.monotonic() > deadline:
                print(cluster.logs())
                fail(f"job {job} did not end in 400 s: {state.get('JobState')} ({state.get('Reason')})")
            time.sleep(0.2)
        log = open(os.path.join(work, f"avtrain-{job}.out"), errors="replace").read()
        print(log[-3000:])
        if state.get("JobState") != "COMPLETED" or state.get("NodeList") != "node[0-1]":
            print(cluster.logs())
            fail(f"job {job} ended {state.get('JobState')} on {state.get('NodeList')}")
    program = os.path.join(work, "build", "cpu", "bin", "avtrain")
    if f"avtrain job: {program} (AVTRAIN_BIN)" not in log:
        fail(f"the job's log does not name {program} (AVTRAIN_BIN)")
    steps = int(re.search(r"^steps = (\d+)", open(os.path.join(source, "inputs", "own-videos.ini")).read(), re.M).group(1))
    rows = run_processes.csv_rows(os.path.join(out, "trace.csv"))
    if rows != steps:
        fail(f"the job's trace.csv has {rows} rows, the deck trains {steps} steps")
    print(f"check_readme_recipes: slurm: job {job} on node[0-1] ran {program} (AVTRAIN_BIN) for {rows} steps; ok")


def main():
    if len(sys.argv) != 6 or sys.argv[1] not in ("own-videos", "slurm"):
        sys.exit(__doc__)
    name, readme, work, build, source = sys.argv[1], *map(os.path.abspath, sys.argv[2:])
    (own_videos if name == "own-videos" else slurm)(readme, work, build, source)


if __name__ == "__main__":
    main()
