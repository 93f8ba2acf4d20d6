#!/usr/bin/python3
"""avtrain-precision-plan's refusals: each bad argument exits 2 with one line on stderr naming it
and nothing on stdout; --target fp8 is refused in one line while avtrain refuses precision.mode fp8
(asked with a dry run), and accepted (--dry-run) once it does not. Also reconcile-study.sh's refusals
of a bad NAME=FRAGMENT.ini candidate (how the plan is verified), before it trains anything.

usage: plan_refusals.py AVTRAIN DECK SHARDS
Exit 0 when every case behaves, 1 otherwise.
"""
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PLAN = os.path.join(os.path.dirname(HERE), "avtrain-precision-plan")
STUDY = os.path.join(os.path.dirname(HERE), "reconcile-study.sh")


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    avtrain, deck, shards = sys.argv[1:]
    env = dict(os.environ, AVTRAIN=avtrain)
    ok = True

    def run(args, env=env):
        return subprocess.run([PLAN] + args, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)

    def refused(args, pattern, env=env):
        nonlocal ok
        r = run(args, env)
        lines = r.stderr.splitlines()
        good = (r.returncode == 2 and r.stdout == "" and len(lines) == 1
                and lines[0].startswith("avtrain-precision-plan: ") and re.search(pattern, lines[0]))
        print(f"{'ok  ' if good else 'BAD '} {' '.join(args)}: exit {r.returncode}: {r.stderr.strip()}"
              + ("" if r.stdout == "" else f" (stdout: {r.stdout.strip()})"))
        ok = ok and bool(good)

    common = [deck, "--data", shards, "--out", os.devnull]
    refused([], "the following arguments are required: deck")
    refused(["no-such-deck.ini"], "no-such-deck.ini: no such deck")
    refused([deck, "--data", "no-such-shards"], "--data no-such-shards: no such directory")
    refused(common + ["--steps", "3"], "--steps: must be a whole number >= 4, got '3'")
    refused(common + ["--steps", "ten"], "--steps: must be a whole number >= 4, got 'ten'")
    refused(common + ["--seed", "-1"], "--seed: must be a whole number >= 0")
    refused(common + ["--verify-seeds", "a,b"], "--verify-seeds: 'a,b' is not a list of seeds")
    refused(common + ["--verify-steps", "0"], "--verify-steps: must be a whole number >= 1")
    refused(common + ["--twin-ulps", "0"], "--twin-ulps: must be a whole number >= 1")
    refused(common + ["--target", "fp16"], "--target: invalid choice: 'fp16'")
    refused(common + ["--target", "fp32"], "--target: invalid choice: 'fp32'")
    refused(common + ["--bogus"], "unrecognized arguments: --bogus")
    refused([deck, "--data", shards, "--out", "runs/a,b"], "--out runs/a,b: no commas or spaces")
    refused(common, "not built", env=dict(env, AVTRAIN="/no/such/avtrain"))
    refused(common + ["--", "--model.width", "0"], "avtrain refuses the deck: .*model.width")

    fp8 = subprocess.run([avtrain, deck, "--data", shards, "--precision", "fp8", "--dry-run"],
                         capture_output=True, text=True)
    if fp8.returncode != 0:
        refused(common + ["--target", "fp8"], "--target fp8: avtrain refuses it \\(avtrain: precision.mode fp8")
        r = run(common + ["--dry-run"])
        good = r.returncode == 0 and "fp8 left out: avtrain refuses it" in r.stdout and "target bf16" in r.stdout
        print(f"{'ok  ' if good else 'BAD '} --dry-run without --target: fp8 left out in one line, target bf16")
        ok = ok and good
    else:
        r = run(common + ["--target", "fp8", "--dry-run"])
        good = r.returncode == 0 and "target fp8" in r.stdout
        print(f"{'ok  ' if good else 'BAD '} --target fp8 --dry-run, avtrain accepting fp8: exit {r.returncode}")
        ok = ok and good
    ok = study_refusals(env, deck) and ok
    sys.exit(0 if ok else 1)


def study_refusals(env, deck):
    """reconcile-study.sh with a bad NAME=FRAGMENT.ini: exit 2, one line naming it, nothing trained."""
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        cases = {"train.ini": ("[train]\nsteps = 3\n", "section \\[train\\]: only \\[precision\\] may be set"),
                 "nokey.ini": ("[precision]\nmode bf16\n", "'mode bf16' is not 'key = value'"),
                 "empty.ini": ("# nothing\n", "no \\[precision\\] setting"),
                 "nosection.ini": ("mode = bf16\n", "'mode = bf16' is outside a \\[precision\\] section")}
        cands = []
        for name, (text, pattern) in cases.items():
            with open(os.path.join(tmp, name), "w") as f:
                f.write(text)
            cands.append((f"p={os.path.join(tmp, name)}", f"{name}: {pattern}"))
        good_frag = os.path.join(tmp, "good.ini")
        with open(good_frag, "w") as f:
            f.write("[precision]\nmode = bf16\n")
        cands += [(f"p={os.path.join(tmp, 'none.ini')}", "none.ini: no such deck fragment"),
                  (f"fp32-twin={good_frag}", "'fp32-twin' is the name of an FP32 run"),
                  (f"a.b={good_frag}", "'a.b' is not a name of letters, digits, _ and -")]
        out = os.path.join(tmp, "study")
        for cand, pattern in cands:
            r = subprocess.run(["bash", STUDY, deck, "--out", out, "--candidates", cand], env=env,
                               capture_output=True, text=True, stdin=subprocess.DEVNULL)
            lines = r.stderr.splitlines()
            good = (r.returncode == 2 and len(lines) == 1 and re.search("^reconcile-study.sh: --candidates: .*" + pattern, lines[0])
                    and not os.path.exists(out))
            print(f"{'ok  ' if good else 'BAD '} reconcile-study.sh --candidates {cand}: exit {r.returncode}: {r.stderr.strip()}")
            ok = ok and bool(good)
    return ok


if __name__ == "__main__":
    main()
