#!/usr/bin/python3
"""avtrain-precision-plan end to end with bf16 as the target and a planted sensitive group
(validation/cases/plant_sensitive_group.py in place of avtrain): the plan must keep the planted
group in fp32, its deck fragment must be what avtrain accepts and what the
verification trained, and the verification must PASS. The planted group must be ranked first (raising
it alone helps most); what else the plan keeps in fp32 is genuine bf16 on that deck.

usage: plan_keeps_planted_group.py AVTRAIN DECK SHARDS WORK GROUP [PLAN_OPTIONS...]
  GROUP  the planted group, a layer of `avtrain --dry-run` (e.g. blocks.1): its modules GROUP.*
Exit 0 when all holds, 1 otherwise.
"""
import configparser
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PLAN = os.path.join(os.path.dirname(HERE), "avtrain-precision-plan")
PLANT = os.path.join(HERE, "plant_sensitive_group.py")


def fail(msg):
    print(f"plan_keeps_planted_group: {msg}")
    sys.exit(1)


def main():
    if len(sys.argv) < 6:
        sys.exit(__doc__)
    avtrain, deck, shards, work, group = sys.argv[1:6]
    glob = group + ".*"
    shutil.rmtree(work, ignore_errors=True)
    env = dict(os.environ, AVTRAIN=PLANT, PLANT_AVTRAIN=avtrain, PLANT_MODULES=glob)
    cmd = [PLAN, deck, "--data", shards, "--out", work, "--target", "bf16"] + sys.argv[6:]
    print(" ".join(cmd), flush=True)
    r = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        fail(f"avtrain-precision-plan exited {r.returncode}, not 0 (the verification PASSes)")

    # the control: every group at bf16 FAILs, naming the planted modules among the layers beyond
    with open(os.path.join(work, "runs", "bf16-bf16-bf16-bf16.json")) as f:
        target = json.load(f)
    beyond = {L["name"] for L in target["layers"] if L["exceeds"]}
    if target["verdict"] != "FAIL" or not any(n.startswith(group + ".") for n in beyond):
        fail(f"the all-bf16 run should FAIL naming {glob} (verdict {target['verdict']}, layers beyond {sorted(beyond)})")

    # the ranking: the planted group first (raising it alone helps most)
    with open(os.path.join(work, "plan.json")) as f:
        summary = json.load(f)
    ranked = [r["group"] for r in summary["ranking"]]
    if not ranked or ranked[0] != group:
        fail(f"the ranking should put {group} first: {ranked}")

    # the plan keeps it in fp32 (and with it whatever genuine bf16 needed on this deck, if any)
    frag = os.path.join(work, "plan.ini")
    ini = configparser.ConfigParser()
    ini.read(frag)
    settings = dict(ini["precision"])
    print(f"plan: {settings}")
    kept = settings.get("fp32_layers", "").split(",")
    if settings.get("mode") != "fp32" and (settings.get("mode") != "bf16" or glob not in kept):
        fail(f"{frag} should keep {glob} in fp32: {settings}")

    # what the verification trained from the fragment: the planted modules in fp32, the mode bf16
    seeds = sorted(d for d in os.listdir(os.path.join(work, "verify")) if d.startswith("seed-"))
    if not seeds:
        fail(f"no seed-S directory under {work}/verify")
    with open(os.path.join(work, "verify", seeds[0], "plan", "run.json")) as f:
        precision = json.load(f)["precision"]
    modules = [m for m in precision["fp32_modules"] if m.startswith(group + ".")]
    if precision["mode"] != "fp32" and (precision["mode"] != settings["mode"] or len(modules) < 2):
        fail(f"the verification's plan run did not train {glob} in fp32: {precision}")

    # the fragment appended to the deck: a deck avtrain accepts
    merged = os.path.join(work, "deck-with-plan.ini")
    with open(merged, "w") as f:
        f.write(open(deck).read() + "\n" + open(frag).read())
    d = subprocess.run([avtrain, merged, "--data", shards, "--dry-run"], capture_output=True, text=True)
    if d.returncode != 0 or f"precision: {settings['mode']}" not in d.stdout:
        fail(f"avtrain does not take {merged}: exit {d.returncode}: {d.stderr.strip()}")
    print(f"plan_keeps_planted_group: {group} ranked first and kept in fp32 ({settings}), verified, the deck accepted")


if __name__ == "__main__":
    main()
